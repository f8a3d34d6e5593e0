//! An agent's tools as one typed value, and the shared resources tools are built from.
//!
//! `#[derive(Agent)]` on `enum Checkout` generates `CheckoutTools`, a struct with one public
//! field per tool the agent declares. [`Runner::new`](crate::runner::Runner::new) takes it
//! (through [`ToolsFor`]), so a runner built without one of the agent's tools does not
//! compile: rustc reports the missing field, which is the tool's name in snake case, in
//! the initializer of the agent's tools struct.
//!
//! A tool written as a function with [`#[tool_fn]`](macro@crate::tool_fn) takes the clients,
//! pools and handles it needs as [`Shared<T>`] arguments. The generated tool type holds
//! them, and [`BuildTool`] builds it from one value of the application's shared state:
//! `CheckoutTools::from_shared(&app)` builds every tool of the agent at once, each taking
//! from `app` what its `Shared<T>` arguments ask for ([`FromShared`], as axum's `FromRef`).

use crate::tool::ToolBox;

/// A resource a tool function takes: `Shared(pool): Shared<PgPool>`.
///
/// The tool type `#[tool_fn]` generates holds one `T` per `Shared<T>` argument and passes a
/// clone to each call, so `T` is usually cheap to clone (an `Arc`, a pool, a client).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shared<T>(pub T);

/// `Self` can be taken from the application's shared state `S`.
///
/// Every `Clone` type is taken from itself. When tools need different parts of one
/// application state, implement `FromShared<AppState>` for each part (axum's `FromRef`
/// pattern):
///
/// ```
/// # use durable_agents::tool::FromShared;
/// # #[derive(Clone)] struct Db; #[derive(Clone)] struct Mailer;
/// #[derive(Clone)]
/// struct App { db: Db, mailer: Mailer }
///
/// impl FromShared<App> for Mailer {
///     fn from_shared(app: &App) -> Self {
///         app.mailer.clone()
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "a tool takes `Shared<{Self}>`, which cannot be taken from `{S}`",
    label = "`{Self}` is not `FromShared<{S}>`",
    note = "implement `FromShared<{S}>` for `{Self}` (take it from a field of `{S}`), or pass a `{Self}` itself"
)]
pub trait FromShared<S> {
    /// Take `Self` from the shared state.
    fn from_shared(shared: &S) -> Self;
}

impl<T: Clone> FromShared<T> for T {
    fn from_shared(shared: &T) -> Self {
        shared.clone()
    }
}

/// A tool that can be built from the application's shared state `S`.
///
/// `#[tool_fn]` implements it for every `S` its `Shared<T>` arguments can be taken from
/// (a tool with none is built from any `S`). A tool written as a struct implements it by
/// hand, or is given by value in the field of the agent's tools struct.
#[diagnostic::on_unimplemented(
    message = "tool `{Self}` cannot be built from `{S}`",
    label = "`{Self}` is not `BuildTool<{S}>`",
    note = "a `#[tool_fn]` tool is built from `{S}` when each of its `Shared<T>` arguments is `FromShared<{S}>`; a struct tool implements `BuildTool<{S}>` itself, or is given by value in the tools struct"
)]
pub trait BuildTool<S>: Sized {
    /// Build the tool.
    fn build_tool(shared: &S) -> Self;
}

/// The tools a runner of agent `A` is given.
///
/// Implemented by the agent's generated tools struct (`CheckoutTools` for `Checkout`),
/// which cannot be written without every declared tool, and by [`ToolBox`], which is
/// checked when the runner is built instead (for tools known only at run time).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not the tool set of agent `{A}`",
    label = "expected the agent's tools struct or a `ToolBox`",
    note = "`#[derive(Agent)]` on `{A}` generates a struct named after it with `Tools` appended, with one field per declared tool"
)]
pub trait ToolsFor<A> {
    /// The tools, by name.
    fn into_tool_box(self) -> ToolBox;
}

impl<A> ToolsFor<A> for ToolBox {
    fn into_tool_box(self) -> ToolBox {
        self
    }
}
