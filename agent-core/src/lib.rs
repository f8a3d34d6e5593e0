//! # agent-core
//!
//! LLM agents as compile-time-checked, durable state machines.
//!
//! (Crate documentation: see `docs/` — filled in as the crate grows.)

pub mod agent;
pub mod graph;
pub mod router;
pub mod store;
pub mod tool;

pub use agent::{
    Agent, AllowsTool, AllowsTransition, Ctx, Handle, Next, State, StepError, StepResult, Target,
    Wake,
};
pub use graph::{GraphDescription, PathOverlay, Routing, StateDescription, ToolDescription};
pub use tool::{
    Compensate, DynTool, ErrorClass, Execute, RetryPolicy, Tool, ToolBox, ToolContext, ToolError,
    ToolKind, ToolPolicy, kind,
};

/// Derive an agent from an enum of states. See the crate documentation for the grammar.
pub use agent_macros::Agent;
/// Derive [`Tool`] from `#[tool(...)]` attributes.
pub use agent_macros::Tool;

/// Items the derives expand to. Not public API: may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::agent::{RouteChoice, StepIo};
    pub use ::core;
    pub use ::futures::future::BoxFuture;
    pub use ::serde_json;
    pub use ::std::borrow::ToOwned;
    pub use ::std::boxed::Box;
    pub use ::std::option::Option;
    pub use ::std::string::String;
    pub use ::std::sync::OnceLock;
    pub use ::std::vec;
    pub use ::std::vec::Vec;
}
