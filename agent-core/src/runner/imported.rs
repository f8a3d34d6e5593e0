//! Tools the compiler never saw (imported from MCP servers at start-up): which states may
//! call them, checked when they are added to a runner, and the fingerprint of their schemas
//! that holds a run instead of replaying it against a tool that changed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::graph::GraphDescription;
use crate::store::FailureCode;
use crate::store::{JournalEntry, RunFailure};
use crate::tool::{DynTool, ToolKind};

/// Tools imported at start-up, and the states of the agent that may call each one: the
/// run-time twin of `tools(...)` on a state, for tools whose names the compiler cannot see.
///
/// Added to a runner with [`RunnerBuilder::imported_tools`](super::RunnerBuilder::imported_tools),
/// which checks it against the agent's graph. A handler calls an imported tool with
/// [`Ctx::call_imported`](crate::agent::Ctx::call_imported); an LLM-routed state offers the
/// imported tools it may call to the model next to its compiled ones.
#[derive(Clone, Default)]
pub struct ImportedTools {
    tools: BTreeMap<&'static str, Arc<dyn DynTool>>,
    allowed: BTreeMap<String, BTreeSet<&'static str>>,
}

impl fmt::Debug for ImportedTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImportedTools")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("allowed", &self.allowed)
            .finish()
    }
}

impl ImportedTools {
    /// No tools.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a tool (legal in no state until [`allow`](Self::allow)ed).
    #[must_use]
    pub fn with(mut self, tool: Arc<dyn DynTool>) -> Self {
        self.tools.insert(tool.name(), tool);
        self
    }

    /// Make `tool` legal in state `state` (the variant's name). Both are checked when the
    /// tools are added to a runner.
    #[must_use]
    pub fn allow(mut self, state: impl Into<String>, tool: &'static str) -> Self {
        self.allowed.entry(state.into()).or_default().insert(tool);
        self
    }

    /// The tools, by name.
    pub fn tools(&self) -> impl Iterator<Item = &Arc<dyn DynTool>> + '_ {
        self.tools.values()
    }

    /// The same tools, each replaced by `f` of it (under the same name), legal in the same
    /// states: the stand-ins a replay calls instead.
    pub(crate) fn map_tools(self, f: impl Fn(&Arc<dyn DynTool>) -> Arc<dyn DynTool>) -> Self {
        Self {
            tools: self
                .tools
                .iter()
                .map(|(name, tool)| (*name, f(tool)))
                .collect(),
            allowed: self.allowed,
        }
    }

    /// The imported tools legal in `state`, sorted.
    pub fn allowed_in(&self, state: &str) -> impl Iterator<Item = &'static str> + '_ {
        self.allowed.get(state).into_iter().flatten().copied()
    }

    /// Every problem with these tools for an agent whose graph is `graph` and whose compiled
    /// tools are `compiled`: a state the agent does not have (or that is terminal), a tool
    /// allowed but not imported, a name taken by a compiled tool, a hybrid whose
    /// compensation is neither imported nor compiled or is not a write.
    pub(crate) fn problems(
        &self,
        graph: &GraphDescription,
        compiled: &crate::tool::ToolBox,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        for (state, tools) in &self.allowed {
            match graph.state(state) {
                None => problems.push(format!(
                    "imported tools are allowed in state `{state}`, which agent `{}` does not have; its states: {}",
                    graph.agent,
                    graph
                        .states
                        .iter()
                        .map(|s| format!("`{}`", s.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                Some(s) if s.terminal => problems.push(format!(
                    "imported tools are allowed in state `{state}`, which is terminal and calls no tool"
                )),
                Some(_) => {}
            }
            for tool in tools {
                if !self.tools.contains_key(tool) {
                    problems.push(format!(
                        "state `{state}` allows tool `{tool}`, which is not imported"
                    ));
                }
            }
        }
        for (name, tool) in &self.tools {
            if compiled.get(name).is_some() {
                problems.push(format!(
                    "imported tool `{name}` has the name of a tool of the agent's tool box"
                ));
            }
            if tool.kind() == ToolKind::Hybrid {
                let Some(with) = tool.compensated_by() else {
                    problems.push(format!(
                        "imported hybrid tool `{name}` names no compensating tool"
                    ));
                    continue;
                };
                let comp = self
                    .tools
                    .get(with.as_str())
                    .or_else(|| compiled.get(&with));
                match comp {
                    None => problems.push(format!(
                        "imported hybrid tool `{name}` is compensated by `{with}`, which is neither imported nor in the tool box"
                    )),
                    Some(c) if c.kind() != ToolKind::Write => problems.push(format!(
                        "imported hybrid tool `{name}` is compensated by `{with}`, which is a {} tool, not a write",
                        c.kind()
                    )),
                    Some(_) => {}
                }
            }
        }
        problems
    }
}

/// The input journaled for a call of a tool with a schema fingerprint: the arguments and
/// the fingerprint of the schema they were checked against.
pub(crate) fn journaled_input(tool: &dyn DynTool, arguments: Value) -> Value {
    match tool.schema_fingerprint() {
        Some(schema) => json!({ "arguments": arguments, "schema": schema }),
        None => arguments,
    }
}

/// The arguments of a journaled call (the inverse of [`journaled_input`]).
pub(crate) fn journaled_arguments<'e>(tool: &dyn DynTool, input: &'e Value) -> &'e Value {
    if tool.schema_fingerprint().is_some() {
        input.get("arguments").unwrap_or(input)
    } else {
        input
    }
}

/// The fingerprint a journaled call of an imported tool was made under, if any.
pub(crate) fn journaled_fingerprint(entry: &JournalEntry) -> Option<&str> {
    entry.input.get("schema").and_then(Value::as_str)
}

/// The error a run is held with when `entry` was journaled under another schema of `tool`.
pub(crate) fn schema_changed(tool: &dyn DynTool, entry: &JournalEntry) -> Option<RunFailure> {
    let now = tool.schema_fingerprint()?;
    let then = journaled_fingerprint(entry)?;
    (now != then).then(|| RunFailure {
        code: FailureCode::ToolSchemaChanged,
        message: format!(
            "the input schema of tool `{}` changed since this run called it at version {} \
             (journaled schema {}, now {}); the run is held rather than replayed against a \
             different tool: restore the tool's schema, or repair the run",
            entry.name,
            entry.version,
            short(then),
            short(&now)
        ),
    })
}

/// A fingerprint's first 12 characters, as messages show it.
pub(crate) fn short(s: &str) -> &str {
    s.get(..12).unwrap_or(s)
}
