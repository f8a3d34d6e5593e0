//! # durable-agents-core
//!
//! The core of [durable-agents](https://docs.rs/durable-agents): the graph model, tools, the
//! `Store` contract, the runner and the router contract. No database driver, no HTTP.
//!
//! Users depend on the facade, `durable-agents`, which re-exports everything here together
//! with the stores and providers its features select; its documentation is the tutorial.
//! Depend on this crate directly only to write a store backend or a router without the
//! facade (and then give the derives `#[agent(crate = ::your_name_for_it)]` if you rename it).
//!
//! | module | what |
//! |---|---|
//! | [`graph`] | the checked graph as data: DOT, Mermaid, JSON, YAML exports, a stable fingerprint |
//! | [`tool`] | [`Tool`] (derivable), [`Execute`], [`Compensate`]; kinds read, write, hybrid; policies |
//! | [`runner`] | [`Runner`] and [`Worker`]: steps, journal, sagas, waits, budgets, leases, fault points |
//! | [`router`] | the LLM as a routing node: [`Router`](router::Router), validation, decision records, a scripted router for tests |
//! | [`versions`] | an agent's versions and the migrations between them |
//! | [`timer`] | durable timers: a state that waits for a time ([`timer::Deadline`], [`timer::TimerField`]) |
//! | [`started_by`] | what started a run (a schedule's tick, a message, a webhook's delivery), from its labels |
//! | [`store`] | the [`Store`] contract, records, delta history, the hash chain and its verifier, an in-memory store |
//!
//! The suite every store backend runs, with the fixture agents, is a crate of its own:
//! `durable-agents-conformance` (the facade's feature `conformance`).
#![warn(missing_docs)]

// Lets the derives' `::agent_core::…` paths resolve inside this crate (the unit tests' agents).
#[allow(unused_extern_crates)]
extern crate self as agent_core;

pub mod agent;
pub mod events;
pub mod graph;
pub mod json;
pub mod metrics;
pub mod replay;
pub mod router;
pub mod runner;
pub mod schedule;
pub mod schema;
pub mod secrets;
pub mod signals;
pub mod started_by;
pub mod store;
pub mod timer;
pub mod tool;
pub mod toolset;
pub mod trace;
pub mod versions;

pub use agent::{
    Agent, AllowsChild, AllowsTool, AllowsTransition, ChildOutcome, ChildRun, Ctx, Failure, Handle,
    Next, RoutedByCode, RoutedByLlm, State, StepError, StepResult, Wake,
};
pub use graph::{
    GraphDescription, PathOverlay, Routing, StateDescription, ToolDescription, TransitionArguments,
};
pub use tool::{
    Compensate, DynTool, ErrorClass, Execute, RetryPolicy, Tool, ToolBox, ToolContext, ToolError,
    ToolKind, ToolPolicy, ToolResult, kind,
};
pub use toolset::{BuildTool, FromShared, Shared, ToolsFor};
// What a program that runs agents names most: reachable without knowing the modules.
pub use runner::{
    Runner, RunnerConfig, RunnerError, StepOutcome, Worker, WorkerConfig, WorkerStats,
};
pub use store::memory::MemoryStore;
pub use store::{FailureCode, RunRecord, RunStatus, Store, StoreError};

/// Derive an agent from an enum of states: a graph checked at compile time.
///
/// # Grammar
///
/// One attribute namespace, `#[agent(...)]`, on the enum and on its variants. Each variant is
/// a state; it may be a unit, tuple or struct variant (the state's typed data).
///
/// On the enum:
///
/// | key | meaning |
/// |---|---|
/// | `tools(read(A, B), write(C, D), hybrid(E(compensate = D)))` | every tool of the agent, by kind; a hybrid tool names its compensation, which must be declared `write` |
/// | `dag` | the graph may have no cycle |
/// | `name = "..."` | the agent's name (default: the enum's name) |
/// | `module = ident` | the generated module of the states' structs (default: the enum's name in snake case) |
/// | `handlers = Ident` | the generated handler trait (default: `{Enum}Handlers`) |
/// | `crate = path` | where the framework is (default: the `durable-agents` dependency, under the name the manifest gives it), for re-exports |
/// | `max_steps = N` | budget: at most `N` steps per run |
/// | `budget(tokens = N, cost = X, asks = N, tool_calls = N)` | the budget of each run unless its start sets one: any of the limits, each above zero; `tokens` counts input and output tokens, `cost` is an amount of the price table's currency (`cost = 0.50`, at most 6 decimal places), `asks` the questions to the model, `tool_calls` the calls executed ([`store::Budget`]) |
/// | `version = N` | the agent's version, a whole number from 1 (the default); every run records the version it is on ([`versions`]) |
/// | `migrate_from(v1::Enum, with = f)` | with `version`: this version runs the runs of the version `v1::Enum` (the previous version's enum, kept in your code), after `f: fn(v1::Enum) -> Self` maps their state; chains compose ([`Agent::migrate`], [`Agent::older_versions`]) |
/// | `migrate_from(..., skip_signal("a", "b"))` | signals the old version's states wait for that this version may leave unwaited (a run waiting for one is moved past the wait by `f`) |
///
/// On a variant:
///
/// | key | meaning |
/// |---|---|
/// | `initial` | runs start here (exactly one state) |
/// | `terminal` | runs end here (no transitions, no handler) |
/// | `compensate` | entering this state runs the saga's compensations |
/// | `to(A, B)` | the declared successors |
/// | `to(A(args = T), B)` | with `route = llm`: the model must give an argument of type `T` (`Deserialize + JsonSchema`) when it chooses `A`; it is shown `T`'s schema (objects closed), its answer is checked against that schema and then deserialized (a refused one is journaled with its code and re-asked), and the handler receives it typed in the route enum, `ReviewRoute::A(t)`. A transition without `args` takes none: it is offered with the closed empty object and any argument is refused (`decision.schema_violation`) |
/// | `tools(X, Y)` | the tools legal in this state (declared on the enum) |
/// | `route = llm` | the LLM chooses among the `to(...)` targets |
/// | `wait = "signal"` | the handler runs once the named signal arrives |
/// | `wait_timeout_ms = N` | ... or once `N` ms passed without it |
/// | `timer_ms = N` | a durable timer: the state waits `N` ms from the commit that enters it, holding no worker, then its handler runs; with `wait`, the wait's deadline (instead of `wait_timeout_ms`) ([`timer`]) |
/// | `timer = field` | a durable timer due at the time the state's field holds ([`timer::Deadline`], `SystemTime`, or a `Duration` from entering; an `Option` of one, `None` for no timer): the handler that moves into the state computes it ([`timer`]) |
/// | `on_error = State` | an extra edge, taken when a step of this state fails |
/// | `on_budget = State` | an extra edge, taken when a step of this state exceeds a budget (without it, such a step takes `on_error`); the state is built from the [`Failure`] as `on_error`'s is |
/// | `budget(tokens = N, cost = X, asks = N, tool_calls = N)` | budget: what one visit of this state may spend, the same limits as the enum's |
/// | `max_tool_calls = N` | budget: tool calls per visit |
/// | `tools_per_answer = N` | with `route = llm`: one answer may call up to `N` of the state's tools at once (each checked before any runs; one bad call rejects the answer), run concurrently and journaled as one decision; the providers allow parallel tool calls only here |
/// | `timeout_ms = N` | budget: time per visit |
/// | `children(A, path::B)` | the agents whose runs the handler may start and wait for ([`Ctx::spawn_all`], [`Ctx::spawn_first`]); starting another is a compile error |
/// | `children_outlive` | with `children(...)`: the children keep running when the run fails or is cancelled (by default they are cancelled, their compensations run) |
/// | `decision_timeout_ms = N` | with `route = llm`: one ask of the model in this state may take `N` ms (instead of `RunnerConfig::decision_timeout`); a slower one is journaled as `ask.timeout` and counts against the re-asks |
///
/// Checked at compile time: unknown states and tools, one initial state, reachability, a way
/// out of every state and a way to a terminal state, terminal states without transitions,
/// LLM states with options, cycles under `dag`, hybrid compensations, that each tool's
/// `Tool` impl has the declared kind and name, that each child is an `Agent` started
/// only where declared, and that transition arguments are declared only on LLM-routed
/// states, with types that are `Deserialize` and `JsonSchema`; with `migrate_from`, that the
/// source is an older version of the same agent, that the mapping is a `fn(Old) -> Self`,
/// that every hybrid tool of the old version is kept with its compensation, and that every
/// signal the old version waits for is still waited for or named in `skip_signal`. See
/// [`compile_errors`] for every message.
///
/// # What it generates
///
/// For `enum Checkout`, with the enum's visibility:
/// - `impl Agent for Checkout`: [`Agent::graph`] is the checked [`GraphDescription`];
///   with `version`, [`Agent::VERSION`]; with `migrate_from`, [`Agent::migrate`] and
///   [`Agent::older_versions`] through the chain of mappings;
/// - `mod checkout`: a struct per state with the variant's fields, by name and as visible
///   as the enum (`checkout::Browsing { customer, cart }`; a tuple struct for a tuple
///   variant, a unit struct for a unit variant), implementing [`State`], `Debug` and `Clone`
///   when its fields do; it is the type [`Ctx`] is typed by, the value the handler receives
///   and the value [`Ctx::to`] takes. For each `route = llm` state an enum of its `to(...)` targets
///   (`checkout::ReviewRoute`), whose variant of a typed transition carries its argument
///   (`ReviewRoute::Payment(PayArgs)`; such an enum is neither `Copy` nor comparable, and
///   its `Debug` leaves the arguments out);
/// - [`AllowsTool`], [`AllowsTransition`] and [`AllowsChild`] for exactly the declared
///   tools, edges and child agents, so [`Ctx::call`], [`Ctx::to`] and [`Ctx::spawn_all`]
///   compile only when legal;
/// - `trait CheckoutHandlers`: one method per non-terminal state (its name in snake case),
///   taking the [`Ctx`], then the route for `route = llm` states, then the [`Wake`] for
///   `wait` states, then the state's struct, which the handler destructures by field name
///   (`checkout::Browsing { customer, cart }: checkout::Browsing`); implement it with
///   `async fn`s. The trait is
///   not in your source: run `cargo doc --open` and find it next to your enum, where each
///   method's docs list its parameters in order;
/// - `impl<H: CheckoutHandlers> Handle<H> for Checkout`, which the runner dispatches through;
/// - `struct CheckoutTools`: one public field per declared tool (its name in snake case),
///   what [`Runner::new`](runner::Runner::new) takes ([`ToolsFor`]), so a runner built
///   without one of the agent's tools does not compile; `CheckoutTools::from_shared(&app)`
///   builds every tool from the application's shared state ([`BuildTool`]).
///
/// # Example
///
/// ```
/// use durable_agents::agent::Handle;
/// use durable_agents::{Agent, Ctx, StepResult, Tool};
/// use serde::{Deserialize, Serialize};
///
/// /// Search the catalogue.
/// #[derive(Tool)]
/// #[tool(kind = read, input = String, output = Vec<String>, timeout_ms = 2000)]
/// pub struct SearchProducts;
///
/// /// Charge the customer.
/// #[derive(Tool)]
/// #[tool(kind = write, input = u64, output = String, retries = 5)]
/// pub struct ChargePayment;
///
/// #[derive(Agent, Clone, Serialize, Deserialize)]
/// #[agent(tools(read(SearchProducts), write(ChargePayment)))]
/// enum Checkout {
///     #[agent(initial, tools(SearchProducts), to(Review))]
///     Browsing { cart: Vec<String> },
///     #[agent(route = llm, to(Payment, Browsing))]
///     Review { cart: Vec<String> },
///     #[agent(tools(ChargePayment), to(Done), on_error = Failed)]
///     Payment { cents: u64 },
///     #[agent(terminal)]
///     Done,
///     #[agent(terminal, compensate)]
///     Failed(String),
/// }
///
/// struct Shop;
///
/// impl CheckoutHandlers for Shop {
///     async fn browsing(
///         &self,
///         ctx: Ctx<'_, checkout::Browsing>,
///         checkout::Browsing { cart }: checkout::Browsing,
///     ) -> StepResult<checkout::Browsing> {
///         let _hits = ctx.call::<SearchProducts>("socks".into()).await?;
///         Ok(ctx.to(checkout::Review { cart }))
///     }
///
///     async fn review(
///         &self,
///         ctx: Ctx<'_, checkout::Review>,
///         route: checkout::ReviewRoute,
///         checkout::Review { cart }: checkout::Review,
///     ) -> StepResult<checkout::Review> {
///         Ok(match route {
///             checkout::ReviewRoute::Payment => ctx.to(checkout::Payment { cents: 100 * cart.len() as u64 }),
///             checkout::ReviewRoute::Browsing => ctx.to(checkout::Browsing { cart }),
///         })
///     }
///
///     async fn payment(
///         &self,
///         ctx: Ctx<'_, checkout::Payment>,
///         checkout::Payment { cents }: checkout::Payment,
///     ) -> StepResult<checkout::Payment> {
///         ctx.call::<ChargePayment>(cents).await?;
///         Ok(ctx.to(checkout::Done))
///     }
/// }
///
/// let graph = Checkout::graph();
/// assert_eq!(graph.states.len(), 5);
/// assert!(graph.has_edge("Payment", "Failed"));
/// assert!(graph.allows_tool("Browsing", "SearchProducts"));
/// fn dispatches<A: Handle<Shop>>() {}
/// dispatches::<Checkout>();
/// ```
pub use agent_macros::Agent;
/// Derive [`Tool`] from `#[tool(...)]` attributes.
///
/// `#[tool(kind = read|write|hybrid, input = Type, output = Type, timeout_ms = N, retries = N,
/// cache = bool, journal_with_commit = bool, crate = path)]`: `kind`, `input` and `output`
/// are required; `retries` is the number of attempts in all ([`RetryPolicy::max_attempts`]);
/// `cache` and `journal_with_commit` are [`ToolPolicy`]'s, for read tools; what is not
/// given comes from [`ToolPolicy::default`]. `NAME` is the type's name and `DESCRIPTION` its doc comment.
/// Implement [`Execute`] (and [`Compensate`] for a hybrid tool) by hand.
pub use agent_macros::Tool;

/// Make a tool of an `async fn`.
///
/// ```text
/// #[tool_fn(read | write | hybrid, timeout_ms = N, retries = N, cache = bool,
///           journal_with_commit = bool, compensate = WriteTool,
///           compensate_input = path::to_fn, crate = path)]
/// ```
///
/// The function stays as written, and next to it comes the tool type, named after it in
/// `CamelCase` (`charge_payment` -> `ChargePayment`): the name agents list in
/// `#[agent(tools(...))]` and handlers call with `ctx.call::<ChargePayment>(input)`. It is
/// the same [`Tool`] as a `#[derive(Tool)]` struct with an [`Execute`] impl: `NAME` is the
/// type's name, `DESCRIPTION` the function's doc comment (what the model reads), and the
/// policy comes from the keys, as for [`derive@Tool`].
///
/// The parameters are told apart by their types, in any order:
/// - [`Shared<T>`](Shared): a resource (a client, a pool). The tool type holds one `T` per
///   such parameter and passes a clone to each call; `ChargePayment::new(t)` builds it, and
///   the agent's tools struct builds it from the application's shared state
///   ([`BuildTool`], [`FromShared`]);
/// - `&ToolContext`: the call ([`ToolContext::idempotency_key`] for write tools);
/// - the others are the input, whose JSON schema the model is shown:
///   - **arguments**: several parameters, or documented ones, become the fields of a
///     generated struct named after the tool with `Input` appended (`ChargePaymentInput`),
///     public, each field named and documented as its parameter (the doc comment is the
///     field's description in the schema); handlers call
///     `ctx.call::<ChargePayment>(ChargePaymentInput { card, cents })`, and a tool of one
///     argument converts from it (`ctx.call::<LookupOrder>(order_id.into())`);
///   - **a struct**: one parameter without a doc comment is the input itself, a type you
///     derive `Deserialize` and `JsonSchema` for;
///   - none: the input is `()`.
///
/// The return type is `Result<Output, E>` for any `E: Into<ToolError>`, where `Output` is
/// any serializable type with a schema: a struct, a `String`, a number, `()`.
///
/// A hybrid tool names the write tool that undoes it with `compensate = ReleaseInventory`;
/// the compensation's input is this tool's output converted with `From` (an identity when
/// they are one type), or what `compensate_input = my_fn` computes, a
/// `fn(&Input, &Output) -> <ReleaseInventory as Tool>::Input`.
///
/// ```
/// use durable_agents::prelude::*;
/// use std::sync::Arc;
///
/// # #[derive(Debug)] struct Gateway;
/// # impl Gateway { async fn charge(&self, _: &str, _: u64) -> Result<String, ToolError> { Ok("pay-1".into()) } }
/// /// Charge a card. (The model reads this line.)
/// #[tool_fn(write, timeout_ms = 800, retries = 3)]
/// pub async fn charge_payment(
///     Shared(gateway): Shared<Arc<Gateway>>,
///     /// The card to charge. (The model reads this one in the input's schema.)
///     card: String,
///     /// Amount in cents.
///     cents: u64,
///     cx: &ToolContext,
/// ) -> Result<String, ToolError> {
///     let _key = cx.idempotency_key(); // the gateway's idempotency key
///     gateway.charge(&card, cents).await
/// }
///
/// assert_eq!(<ChargePayment as Tool>::NAME, "ChargePayment");
/// assert_eq!(<ChargePayment as Tool>::DESCRIPTION, "Charge a card. (The model reads this line.)");
/// let _input = ChargePaymentInput { card: "4242".into(), cents: 1200 };
/// let _tool = ChargePayment::new(Arc::new(Gateway));
/// ```
pub use agent_macros::tool_fn;

/// How to read the compile errors of `#[derive(Agent)]`, each with what to do about it.
#[doc = include_str!("../../docs/compile-errors.md")]
pub mod compile_errors {}

#[doc(hidden)]
pub mod __private;
