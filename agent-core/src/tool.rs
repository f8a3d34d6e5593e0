//! Tools: typed side effects with a kind, a policy and a journal.
//!
//! A tool is a type. [`Tool`] carries what the graph and the router need to know (name,
//! kind, input and output types with JSON schemas, timeout and retry policy) and is usually
//! derived; [`Execute`] is the call itself; a hybrid tool also implements [`Compensate`],
//! naming the write tool that undoes it. Tools never run directly: the runner calls them
//! through a [`ToolBox`], applying the policy and journaling every call.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::Spend;

// The kinds are the records' vocabulary (stored by name in every journal entry), so they
// live on the ground floor with the records, below the graph and the tools that use them.
pub use crate::store::records::{ErrorClass, ToolKind};

/// Type-level tool kinds, used as [`Tool::Kind`].
pub mod kind {
    mod sealed {
        pub trait Sealed {}
    }

    /// A type-level [`ToolKind`](super::ToolKind). Sealed: the three below are all there is.
    pub trait Kind: sealed::Sealed + Send + Sync + 'static {
        /// The kind as a value.
        const KIND: super::ToolKind;
    }

    /// Kinds that need no compensation: read and write.
    #[diagnostic::on_unimplemented(
        message = "a hybrid tool must be added with `ToolBox::hybrid`",
        note = "hybrid tools declare how they are undone (`Compensate`); `ToolBox::hybrid` records that"
    )]
    pub trait Plain: Kind {}

    /// No side effect.
    #[derive(Debug, Clone, Copy)]
    pub struct Read;
    /// A side effect with an idempotency key.
    #[derive(Debug, Clone, Copy)]
    pub struct Write;
    /// A write with a declared compensation.
    #[derive(Debug, Clone, Copy)]
    pub struct Hybrid;

    impl sealed::Sealed for Read {}
    impl sealed::Sealed for Write {}
    impl sealed::Sealed for Hybrid {}
    impl Kind for Read {
        const KIND: super::ToolKind = super::ToolKind::Read;
    }
    impl Kind for Write {
        const KIND: super::ToolKind = super::ToolKind::Write;
    }
    impl Kind for Hybrid {
        const KIND: super::ToolKind = super::ToolKind::Hybrid;
    }
    impl Plain for Read {}
    impl Plain for Write {}
}

/// What a tool is: its name, kind, typed input and output, and policy.
///
/// Usually derived:
///
/// ```
/// use durable_agents::Tool;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize, schemars::JsonSchema)] pub struct Query { text: String }
/// # #[derive(Serialize, Deserialize, schemars::JsonSchema)] pub struct Product { sku: String }
///
/// /// Search the catalogue.
/// #[derive(Tool)]
/// #[tool(kind = read, input = Query, output = Vec<Product>, timeout_ms = 2000, retries = 3)]
/// pub struct SearchProducts;
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tool",
    label = "not a tool",
    note = "derive it: `#[derive(Tool)] #[tool(kind = read, input = ..., output = ...)]`, or implement `durable_agents::Tool`"
)]
pub trait Tool: Send + Sync + 'static {
    /// The tool's name: the type's name, as the agent's attribute writes it.
    const NAME: &'static str;
    /// What the tool does, for the router's prompt (the type's doc comment when derived).
    const DESCRIPTION: &'static str = "";
    /// [`kind::Read`], [`kind::Write`] or [`kind::Hybrid`].
    type Kind: kind::Kind;
    /// The input; its JSON schema is what the router must produce.
    type Input: Serialize + DeserializeOwned + JsonSchema + Send + Sync + 'static;
    /// The output, journaled as JSON.
    type Output: Serialize + DeserializeOwned + JsonSchema + Send + Sync + 'static;

    /// Timeout, retries and caching.
    #[must_use]
    fn policy() -> ToolPolicy {
        ToolPolicy::default()
    }

    /// Whether [`spend`](Self::spend) reports anything: the runner reads a call's output for
    /// it only then (it reads it again from the journal when a step resumes).
    const REPORTS_SPEND: bool = false;

    /// What one call spent beyond the call itself, from its output: the tokens and cost a
    /// tool that asks a model was billed. Counted in the run's spend and checked against its
    /// budgets; set [`REPORTS_SPEND`](Self::REPORTS_SPEND) with it.
    #[must_use]
    fn spend(_output: &Self::Output) -> Spend {
        Spend::default()
    }
}

/// The call itself. Implement it for every tool; the runner is the only caller.
#[diagnostic::on_unimplemented(
    message = "tool `{Self}` cannot run: it has no `Execute` impl",
    label = "no `Execute` impl",
    note = "implement `durable_agents::Execute for {Self}`, or write the tool as an `async fn` with `#[tool_fn]`"
)]
pub trait Execute: Tool {
    /// Run the tool once. Write and hybrid tools must honour `cx.idempotency_key()`: a
    /// second call with the same key must not apply the effect twice.
    fn execute(
        &self,
        input: Self::Input,
        cx: &ToolContext,
    ) -> impl Future<Output = Result<Self::Output, ToolError>> + Send;
}

/// How a hybrid tool is undone: the write tool and its input, computed from the call.
#[diagnostic::on_unimplemented(
    message = "hybrid tool `{Self}` does not say how it is undone",
    label = "missing `Compensate` impl",
    note = "implement `durable_agents::Compensate for {Self}` with `type With = <a write tool>;`"
)]
pub trait Compensate: Tool<Kind = kind::Hybrid> {
    /// The write tool that undoes this one.
    type With: Tool<Kind = kind::Write>;
    /// The input of the compensating call, from the input and output of the original call.
    fn compensation(
        &self,
        input: &Self::Input,
        output: &Self::Output,
    ) -> <Self::With as Tool>::Input;
}

/// Timeout, retry and cache settings of a tool.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolPolicy {
    /// How long one attempt may take.
    pub timeout: Duration,
    /// How failed attempts are retried.
    pub retry: RetryPolicy,
    /// Read tools only: serve a repeated call with the same input from the run's journal.
    pub cache: bool,
    /// Read tools only: journal the call's result with its step's commit (one write for
    /// the step, not two), or before the step's next call or write if one comes first,
    /// instead of as soon as it returns. For reads that are cheap to repeat: a process
    /// that dies between the call and the commit runs the call again when the step
    /// resumes. Off by default, and never for a call that must not be paid for twice (a
    /// model's generation).
    pub journal_with_commit: bool,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            cache: true,
            journal_with_commit: false,
        }
    }
}

/// Exponential backoff with full jitter.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 means no retry).
    pub max_attempts: u32,
    /// Backoff before the second attempt.
    pub initial_backoff: Duration,
    /// Upper bound of one backoff.
    pub max_backoff: Duration,
    /// Growth factor per attempt.
    pub multiplier: f64,
    /// Randomize each backoff in `[backoff/2, backoff]`, so retries of many runs spread out.
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            multiplier: 2.0,
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// No retry at all.
    #[must_use]
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// The backoff before attempt `attempt + 1` (attempts count from 1).
    #[must_use]
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .multiplier
            .powi(i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX));
        let base = self.initial_backoff.as_secs_f64() * exp;
        let capped = base.min(self.max_backoff.as_secs_f64());
        let secs = if self.jitter {
            capped * rand::random_range(0.5..=1.0)
        } else {
            capped
        };
        Duration::from_secs_f64(secs)
    }
}

/// A failed tool call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{} ({}): {message}", class.code(), tool.as_deref().unwrap_or("tool"))]
pub struct ToolError {
    /// Decides retry.
    pub class: ErrorClass,
    /// What went wrong.
    pub message: String,
    /// The tool, filled in by the runner.
    #[serde(default)]
    pub tool: Option<String>,
    /// For rate limits: how long the service asked us to wait, in milliseconds.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
}

impl ToolError {
    fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Self {
            class,
            message: message.into(),
            tool: None,
            retry_after_ms: None,
        }
    }

    /// A passing fault; the runner retries.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Retryable, message)
    }

    /// A failure that will repeat; the runner does not retry.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Permanent, message)
    }

    /// The attempt timed out.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Timeout, message)
    }

    /// Credentials refused.
    pub fn auth(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Auth, message)
    }

    /// The tool is switched off.
    pub fn disabled(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Disabled, message)
    }

    /// The service asked to wait `retry_after` before the next attempt.
    pub fn rate_limited(message: impl Into<String>, retry_after: Option<Duration>) -> Self {
        Self {
            retry_after_ms: retry_after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            ..Self::new(ErrorClass::RateLimited, message)
        }
    }
}

/// What a tool function returns: its output, or why the call failed.
pub type ToolResult<T> = Result<T, ToolError>;

/// What a tool sees of the call: who calls it, and the idempotency key of effects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolContext {
    /// The agent whose run makes the call (a bounded metric label: tokens and cost of a
    /// generation are counted per agent).
    pub agent: &'static str,
    /// The run.
    pub run_id: String,
    /// The state the call is made in.
    pub state: String,
    /// The state version the step started from.
    pub version: u64,
    /// The call's index within the step.
    pub call_index: u32,
    /// Which attempt this is (1 for the first).
    pub attempt: u32,
    /// Deterministic key of write and hybrid calls: derived from (run, version, call index),
    /// never from the attempt, so every retry and every resume reuses it.
    pub idempotency_key: Option<String>,
    /// Where a tool that has a model write text sends it as it comes (ephemeral, never
    /// stored: the call's journaled output is the durable answer). The default sends
    /// nowhere.
    pub tokens: crate::events::TokenSink,
}

impl ToolContext {
    /// The idempotency key, for write and hybrid tools (empty for read tools).
    #[must_use]
    pub fn idempotency_key(&self) -> &str {
        self.idempotency_key.as_deref().unwrap_or("")
    }
}

/// The object-safe twin of [`Tool`] + [`Execute`], working on JSON. The runner and the
/// router use it; users implement the typed traits.
pub trait DynTool: Send + Sync {
    /// [`Tool::NAME`].
    fn name(&self) -> &'static str;
    /// [`Tool::DESCRIPTION`].
    fn description(&self) -> &'static str;
    /// The tool's kind.
    fn kind(&self) -> ToolKind;
    /// [`Tool::policy`].
    fn policy(&self) -> ToolPolicy;
    /// JSON schema of the input: the document shown to the model and enforced on its
    /// answers. Derived tools generate it once per process, objects closed
    /// ([`crate::schema::schema_for`]).
    fn input_schema(&self) -> Value;
    /// Whether `input` satisfies the input schema and then deserializes into the input type.
    ///
    /// # Errors
    /// The schema violations or the deserialization error, as text.
    fn check_input(&self, input: &Value) -> Result<(), String>;
    /// Whether `input` deserializes into the input type; the router calls it after it has
    /// checked the advertised schema itself. Defaults to [`check_input`](Self::check_input).
    ///
    /// # Errors
    /// The deserialization error, as text.
    fn check_typed(&self, input: &Value) -> Result<(), String> {
        self.check_input(input)
    }
    /// One attempt, on JSON.
    fn call_json<'a>(
        &'a self,
        input: Value,
        cx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>>;
    /// For hybrid tools: the compensating tool and its input, for a completed call.
    fn compensation(
        &self,
        input: &Value,
        output: &Value,
    ) -> Option<Result<(String, Value), String>>;
    /// For tools whose schema the compiler never saw (imported from an MCP server): a
    /// fingerprint of the input schema the tool was imported with. The runner journals it
    /// with every call (the journaled input is `{"arguments": …, "schema": …}`) and holds a
    /// run whose journal names another fingerprint for the tool (code
    /// [`FailureCode::ToolSchemaChanged`](crate::FailureCode::ToolSchemaChanged)) instead of replaying it against a
    /// different tool. `None` (the default) for compiled tools: their schema is the graph's.
    fn schema_fingerprint(&self) -> Option<String> {
        None
    }
    /// For hybrid tools: the name of the write tool that undoes a call.
    fn compensated_by(&self) -> Option<String> {
        None
    }
    /// [`Tool::spend`] of a journaled output; nothing for a tool that reports none or an
    /// output that does not read.
    fn spend(&self, _output: &Value) -> Spend {
        Spend::default()
    }
}

struct Typed<T>(T);
struct TypedHybrid<T>(T);

fn call_typed<'a, T: Execute>(
    tool: &'a T,
    input: Value,
    cx: &'a ToolContext,
) -> BoxFuture<'a, Result<Value, ToolError>> {
    Box::pin(async move {
        let input: T::Input = serde_json::from_value(input)
            .map_err(|e| ToolError::permanent(format!("input does not match the tool: {e}")))?;
        let output = tool.execute(input, cx).await?;
        serde_json::to_value(output)
            .map_err(|e| ToolError::permanent(format!("output does not serialize: {e}")))
    })
}

macro_rules! dyn_common {
    () => {
        fn name(&self) -> &'static str {
            T::NAME
        }
        fn description(&self) -> &'static str {
            T::DESCRIPTION
        }
        fn kind(&self) -> ToolKind {
            <T::Kind as kind::Kind>::KIND
        }
        fn policy(&self) -> ToolPolicy {
            T::policy()
        }
        fn input_schema(&self) -> Value {
            crate::schema::compiled_for::<T::Input>().schema().clone()
        }
        fn check_input(&self, input: &Value) -> Result<(), String> {
            crate::schema::compiled_for::<T::Input>().check(input)?;
            self.check_typed(input)
        }
        fn check_typed(&self, input: &Value) -> Result<(), String> {
            T::Input::deserialize(input)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
        fn call_json<'a>(
            &'a self,
            input: Value,
            cx: &'a ToolContext,
        ) -> BoxFuture<'a, Result<Value, ToolError>> {
            call_typed(&self.0, input, cx)
        }
        fn spend(&self, output: &Value) -> Spend {
            if !T::REPORTS_SPEND {
                return Spend::default();
            }
            T::Output::deserialize(output).map_or_else(|_| Spend::default(), |o| T::spend(&o))
        }
    };
}

impl<T: Execute> DynTool for Typed<T> {
    dyn_common!();
    fn compensation(&self, _: &Value, _: &Value) -> Option<Result<(String, Value), String>> {
        None
    }
}

impl<T: Execute + Compensate> DynTool for TypedHybrid<T> {
    dyn_common!();
    fn compensation(
        &self,
        input: &Value,
        output: &Value,
    ) -> Option<Result<(String, Value), String>> {
        let run = || -> Result<(String, Value), String> {
            let input = T::Input::deserialize(input).map_err(|e| e.to_string())?;
            let output = T::Output::deserialize(output).map_err(|e| e.to_string())?;
            let comp = self.0.compensation(&input, &output);
            let value = serde_json::to_value(comp).map_err(|e| e.to_string())?;
            Ok((<T::With as Tool>::NAME.to_owned(), value))
        };
        Some(run())
    }
    fn compensated_by(&self) -> Option<String> {
        Some(<T::With as Tool>::NAME.to_owned())
    }
}

/// The tools a runner may call, by name.
#[derive(Clone, Default)]
pub struct ToolBox {
    tools: BTreeMap<&'static str, Arc<dyn DynTool>>,
}

impl fmt::Debug for ToolBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolBox {
    /// An empty tool box.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a read or write tool.
    #[must_use]
    pub fn with<T: Execute>(mut self, tool: T) -> Self
    where
        T::Kind: kind::Plain,
    {
        self.tools.insert(T::NAME, Arc::new(Typed(tool)));
        self
    }

    /// Add a hybrid tool (its compensating write tool must be added too).
    #[must_use]
    pub fn hybrid<T: Execute + Compensate>(mut self, tool: T) -> Self {
        self.tools.insert(T::NAME, Arc::new(TypedHybrid(tool)));
        self
    }

    /// Add an already type-erased tool (for tests and adapters).
    #[must_use]
    pub fn with_dyn(mut self, tool: Arc<dyn DynTool>) -> Self {
        self.tools.insert(tool.name(), tool);
        self
    }

    /// The tool with this name.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&Arc<dyn DynTool>> {
        self.tools.get(name)
    }

    /// Names of all tools, sorted.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.tools.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            jitter: false,
            ..RetryPolicy::default()
        };
        assert_eq!(p.backoff(1), Duration::from_millis(100));
        assert_eq!(p.backoff(2), Duration::from_millis(200));
        assert_eq!(p.backoff(30), Duration::from_secs(10));
        let j = RetryPolicy::default();
        for attempt in 1..6 {
            let d = j.backoff(attempt);
            assert!(d <= p.backoff(attempt) && d >= p.backoff(attempt) / 2);
        }
    }

    #[test]
    fn error_classes_decide_retry() {
        assert!(ToolError::retryable("x").class.is_retryable());
        assert!(ToolError::timeout("x").class.is_retryable());
        assert!(!ToolError::permanent("x").class.is_retryable());
        assert!(!ToolError::auth("x").class.is_retryable());
        assert!(!ToolError::disabled("x").class.is_retryable());
        let r = ToolError::rate_limited("slow down", Some(Duration::from_secs(2)));
        assert_eq!(r.retry_after_ms, Some(2000));
        assert_eq!(r.to_string(), "tool.rate_limited (tool): slow down");
    }
}
