//! Items the derives expand to. Not public API: may change in any release.
//!
//! Generated code names only `::durable_agents::__private::…`, so everything else can move.

pub use crate::agent::{
    Agent, AllowsChild, AllowsTool, AllowsTransition, ChildLink, Ctx, Failure, Handle, Join,
    RouteChoice, RoutedByCode, RoutedByLlm, State, StepError, StepIo, StepResult, Wake,
};
pub use crate::graph::GraphDescription;
pub use crate::store::Budget;
pub use crate::timer::{Due, TimerField};
pub use crate::tool::{
    Compensate, Execute, RetryPolicy, Tool, ToolBox, ToolContext, ToolError, ToolKind, ToolPolicy,
    kind,
};
pub use crate::toolset::{BuildTool, FromShared, Shared, ToolsFor};
pub use crate::versions::checks::{
    AgentFacts, MigratesFrom, Text, check_compensations_kept, check_hybrid_kept,
    check_signals_kept, check_skip_signal, check_source, fail_if, migrate, older_versions,
};
pub use crate::versions::{MigrationError, OlderVersion};
pub use crate::versions::{migrate_via, older_via};
pub use ::async_trait::async_trait;
pub use ::core;
pub use ::core::clone::Clone;
pub use ::core::fmt::{Debug, Formatter, Result as FmtResult};
pub use ::core::future::Future;
pub use ::core::marker::{Send, Sync};
pub use ::futures::future::BoxFuture;
pub use ::schemars;
pub use ::serde;
pub use ::serde_json;
pub use ::std::borrow::ToOwned;
pub use ::std::boxed::Box;
pub use ::std::option::Option;
pub use ::std::result::Result::{self, Err, Ok};
pub use ::std::string::String;
pub use ::std::sync::OnceLock;
pub use ::std::vec;
pub use ::std::vec::Vec;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::graph::{
    Routing, StateDescription, TimerDescription, ToolDescription, TransitionArguments, TypedCheck,
    WaitDescription,
};

/// The JSON round trip an agent's enum needs to be stored (the serde bounds of
/// [`Agent`](crate::Agent)), as one trait the derive implements for the enum. That impl is
/// unconditional, so every other use of the enum as an agent holds; the derive's other impls
/// assume it with `where for<'a> Enum: StoredAsJson` (a bound under a binder is not checked
/// where it is written). An enum without the serde derives is then reported at this impl
/// only, once per missing trait, instead of at every impl whose trait bounds `Agent`.
pub trait StoredAsJson: DerivesSerde {}

/// The serde impls of an agent's enum, behind a bound the user's crate can name: bounded
/// on `serde`'s traits directly, [`StoredAsJson`] would be called "sealed" by rustc in a crate
/// that does not name `serde` itself (the usual case when the derives were forgotten).
/// `for<'de> Deserialize<'de>` rather than `DeserializeOwned` for the same reason: that
/// trait lives in `serde_core`, which the user's crate never names.
pub trait DerivesSerde: serde::Serialize + for<'de> serde::Deserialize<'de> {}

impl<T: serde::Serialize + for<'de> serde::Deserialize<'de>> DerivesSerde for T {}

/// A state as the derive writes it: literals only, turned into a
/// [`StateDescription`] once per process.
// Each flag is a role the attribute gives the state, written as a literal by the derive.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug)]
pub struct StateSpec {
    pub name: &'static str,
    pub initial: bool,
    pub terminal: bool,
    pub compensate: bool,
    pub llm: bool,
    pub wait: Option<&'static str>,
    pub wait_timeout_ms: Option<u64>,
    /// `timer_ms = N`.
    pub timer_ms: Option<u64>,
    /// `timer = field`: the field's name.
    pub timer_field: Option<&'static str>,
    /// The JSON Schema of the signal's payload (`wait_payload = Type`).
    pub wait_payload: Option<fn() -> Value>,
    pub to: &'static [&'static str],
    pub on_error: Option<&'static str>,
    /// `on_budget = T`.
    pub on_budget: Option<&'static str>,
    /// `budget(...)`: what one visit may spend.
    pub budget: Option<Budget>,
    pub tools: &'static [&'static str],
    pub max_tool_calls: Option<u32>,
    pub tools_per_answer: Option<u32>,
    pub timeout_ms: Option<u64>,
    pub decision_timeout_ms: Option<u64>,
    pub children: &'static [&'static str],
    pub children_outlive: bool,
    pub data: &'static str,
    pub arguments: &'static [ArgumentSpec],
}

impl StateSpec {
    /// A state with nothing given: the derive writes the fields a state's attribute sets and
    /// takes the rest from here (`..StateSpec::DEFAULT`), so that an agent of many states
    /// expands to few tokens.
    pub const DEFAULT: Self = Self {
        name: "",
        initial: false,
        terminal: false,
        compensate: false,
        llm: false,
        wait: None,
        wait_timeout_ms: None,
        timer_ms: None,
        timer_field: None,
        wait_payload: None,
        to: &[],
        on_error: None,
        on_budget: None,
        budget: None,
        tools: &[],
        max_tool_calls: None,
        tools_per_answer: None,
        timeout_ms: None,
        decision_timeout_ms: None,
        children: &[],
        children_outlive: false,
        data: "",
        arguments: &[],
    };
}

/// A typed transition as the derive writes it: `to(Payment(args = PayArgs))`.
#[derive(Debug)]
pub struct ArgumentSpec {
    pub to: &'static str,
    pub type_name: &'static str,
    pub schema: fn() -> Value,
    pub check: fn(&Value) -> Result<(), String>,
}

/// A declared tool as the derive writes it.
#[derive(Debug)]
pub struct ToolSpec {
    pub name: &'static str,
    pub kind: ToolKind,
    pub compensation: Option<&'static str>,
}

/// An agent as the derive writes it.
#[derive(Debug)]
pub struct AgentSpec {
    pub name: &'static str,
    pub version: u32,
    pub dag: bool,
    pub max_steps: Option<u64>,
    /// `budget(...)` on the enum: each run's unless its start sets one.
    pub budget: Option<Budget>,
    pub states: &'static [StateSpec],
    pub tools: &'static [ToolSpec],
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// The [`GraphDescription`] of a derived agent.
#[must_use]
pub fn graph(spec: &AgentSpec) -> GraphDescription {
    GraphDescription {
        agent: spec.name.to_owned(),
        version: spec.version,
        dag: spec.dag,
        max_steps: spec.max_steps,
        budget: spec.budget,
        states: spec
            .states
            .iter()
            .map(|s| StateDescription {
                name: s.name.to_owned(),
                initial: s.initial,
                terminal: s.terminal,
                compensate: s.compensate,
                route: if s.llm {
                    Routing::Llm
                } else {
                    Routing::Handler
                },
                wait: s.wait.map(|signal| WaitDescription {
                    signal: signal.to_owned(),
                    timeout_ms: s.wait_timeout_ms,
                    payload_schema: s.wait_payload.map(|schema| schema()),
                }),
                timer: s
                    .timer_ms
                    .map(TimerDescription::AfterMs)
                    .or_else(|| s.timer_field.map(|f| TimerDescription::Field(f.to_owned()))),
                to: strings(s.to),
                on_error: s.on_error.map(str::to_owned),
                on_budget: s.on_budget.map(str::to_owned),
                budget: s.budget,
                tools: strings(s.tools),
                max_tool_calls: s.max_tool_calls,
                tools_per_answer: s.tools_per_answer,
                timeout_ms: s.timeout_ms,
                decision_timeout_ms: s.decision_timeout_ms,
                children: strings(s.children),
                children_outlive: s.children_outlive,
                data: s.data.to_owned(),
                arguments: s
                    .arguments
                    .iter()
                    .map(|a| TransitionArguments {
                        to: a.to.to_owned(),
                        type_name: a.type_name.to_owned(),
                        schema: (a.schema)(),
                        typed: TypedCheck(Some(a.check)),
                    })
                    .collect(),
            })
            .collect(),
        tools: spec
            .tools
            .iter()
            .map(|t| ToolDescription {
                name: t.name.to_owned(),
                kind: t.kind,
                compensation: t.compensation.map(str::to_owned),
            })
            .collect(),
    }
}

/// The route the runner chose for an LLM-routed state, as the state's route enum, with the
/// typed argument of a transition that declares one.
///
/// # Errors
/// [`StepError::Routing`] when there is no route, it is not a successor, or its arguments
/// are not its declared type (the runner checked them; a journal written by another build
/// may still disagree).
pub fn route<R: RouteChoice>(io: &dyn StepIo, state: &'static str) -> Result<R, StepError> {
    let Some(name) = io.route() else {
        return Err(StepError::Routing(format!(
            "state `{state}` is LLM-routed but the runner gave no route"
        )));
    };
    let empty = Value::Object(serde_json::Map::new());
    let arguments = io.route_arguments().unwrap_or(&empty);
    match R::from_choice(name, arguments) {
        None => Err(StepError::Routing(format!(
            "`{name}` is not a successor of state `{state}`"
        ))),
        Some(Err(e)) => Err(StepError::Routing(format!(
            "the arguments of `{state}` -> `{name}` are not its declared type: {e}"
        ))),
        Some(Ok(route)) => Ok(route),
    }
}

/// The argument type of a typed transition: what the model's arguments deserialize into.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the argument of a transition: it does not implement `Deserialize`",
    label = "the model's arguments are deserialized into this type",
    note = "derive it: `#[derive(serde::Deserialize, schemars::JsonSchema)]`"
)]
pub trait ArgumentType: Sized + Send + 'static {
    /// The arguments as this type.
    ///
    /// # Errors
    /// The deserializer's error.
    fn decode(arguments: &Value) -> Result<Self, String>;

    /// Whether the arguments deserialize into this type.
    ///
    /// # Errors
    /// The deserializer's error.
    fn check(arguments: &Value) -> Result<(), String> {
        Self::decode(arguments).map(drop)
    }
}

#[diagnostic::do_not_recommend]
impl<T: DeserializeOwned + Send + 'static> ArgumentType for T {
    fn decode(arguments: &Value) -> Result<Self, String> {
        T::deserialize(arguments).map_err(|e| e.to_string())
    }
}

/// The schema of a typed transition's argument, as the model is shown it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the argument of a transition: it has no JSON schema",
    label = "the model is shown this type's schema, and its answer is checked against it",
    note = "derive it: `#[derive(serde::Deserialize, schemars::JsonSchema)]`"
)]
pub trait ArgumentSchema {
    /// The schema, every object closed.
    fn schema() -> Value;
}

#[diagnostic::do_not_recommend]
impl<T: schemars::JsonSchema> ArgumentSchema for T {
    fn schema() -> Value {
        crate::schema::schema_for::<T>()
    }
}

/// The schema of a wait's signal payload (`wait_payload = Type`), for the people who send it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the payload of a signal: it has no JSON schema",
    label = "`wait_payload` describes the signal's payload by this type's schema",
    note = "derive it: `#[derive(serde::Deserialize, schemars::JsonSchema)]`"
)]
pub trait PayloadSchema {
    /// The schema, every object closed.
    fn schema() -> Value;
}

#[diagnostic::do_not_recommend]
impl<T: schemars::JsonSchema> PayloadSchema for T {
    fn schema() -> Value {
        crate::schema::schema_for::<T>()
    }
}

/// The field of a state entered by `on_error`, built from the failure that takes the run
/// there ([`Agent::__on_error`](crate::Agent::__on_error)): the [`Failure`] itself, a
/// `String` (its message), or a type of the user's with `From<Failure>`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be built from a failure, so it cannot be the field of an `on_error` state",
    label = "a step that fails enters this state with its `Failure` here",
    note = "use `Failure` (the state that failed, the error's code and message), `String` (the message), or a type that implements `From<Failure>`"
)]
pub trait FromFailure {
    /// The field's value for `failure`.
    fn from_failure(failure: Failure) -> Self;
}

#[diagnostic::do_not_recommend]
impl<T: From<Failure>> FromFailure for T {
    fn from_failure(failure: Failure) -> Self {
        T::from(failure)
    }
}

/// One step of the generated `Handle::handle`: the future of the state's handler, awaited
/// and turned into the agent's next value. Generic, so that the user's crate checks one call
/// per state instead of one `async` block holding every state's handler.
#[must_use]
pub fn step<'a, S, F>(next: F) -> BoxFuture<'a, Result<S::Agent, StepError>>
where
    S: State,
    F: Future<Output = StepResult<S>> + Send + 'a,
{
    Box::pin(async move { next.await.map(crate::agent::Next::__into_state) })
}

/// A step of the generated `Handle::handle` that fails before its handler runs (a terminal
/// state, a missing route or wake-up).
#[must_use]
pub fn fail<'a, A: Send + 'a>(error: StepError) -> BoxFuture<'a, Result<A, StepError>> {
    Box::pin(core::future::ready(Err(error)))
}

/// What woke a waiting state.
///
/// # Errors
/// [`StepError::Handler`] when the runner gave no wake-up.
pub fn wake(io: &dyn StepIo, state: &'static str) -> Result<Wake, StepError> {
    io.wake().ok_or_else(|| {
        StepError::Handler(format!(
            "state `{state}` waits for a signal but the runner gave no wake-up"
        ))
    })
}

/// The error of dispatching a terminal state.
#[must_use]
pub fn terminal(state: &'static str) -> StepError {
    StepError::Handler(format!("terminal state `{state}` has no handler"))
}

/// A type no tool or state is: the second impl of the generated per-state traits.
#[derive(Debug)]
pub enum Unreachable {}

/// `a == b`, in const context (the derive checks `Tool::NAME` at compile time).
#[must_use]
pub const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// A declared read or write tool, added to the tool box by the agent's tools struct. A
/// helper trait so that the struct's `ToolsFor` impl can require it under `for<'a>`: the
/// requirement is then checked where the struct is used, not where the agent is derived
/// (an agent may be declared, and its graph checked, before its tools run).
#[diagnostic::on_unimplemented(
    message = "tool `{Self}` cannot be run by a runner: it is not `Execute` as a read or write tool",
    label = "not runnable as declared",
    note = "implement `Execute` for it (or write it as a `#[tool_fn]`); a hybrid tool is declared `hybrid(...)` on the agent"
)]
pub trait PlainTool {
    fn add_to(self, tools: crate::ToolBox) -> crate::ToolBox;
}

impl<T: crate::Execute> PlainTool for T
where
    T::Kind: crate::kind::Plain,
{
    fn add_to(self, tools: crate::ToolBox) -> crate::ToolBox {
        tools.with(self)
    }
}

/// A declared hybrid tool, added with its compensation (see [`PlainTool`]).
#[diagnostic::on_unimplemented(
    message = "hybrid tool `{Self}` cannot be run by a runner: it is not `Execute` and `Compensate`",
    label = "not runnable as declared",
    note = "implement `Execute` and `Compensate` for it, or write it as `#[tool_fn(hybrid, compensate = ...)]`"
)]
pub trait HybridTool {
    fn add_to(self, tools: crate::ToolBox) -> crate::ToolBox;
}

impl<T: crate::Execute + crate::Compensate> HybridTool for T {
    fn add_to(self, tools: crate::ToolBox) -> crate::ToolBox {
        tools.hybrid(self)
    }
}

/// For the conformance suite (`durable-agents-conformance`), whose corrupt-data check
/// needs a run the memory store can no longer read: damages the run's latest stored
/// version (an unparsable patch).
pub fn corrupt_memory_store(store: &crate::store::memory::MemoryStore, run_id: &str) {
    store.corrupt_latest_version(run_id);
}
