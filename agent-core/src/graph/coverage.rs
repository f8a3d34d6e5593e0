//! Which of a graph's edges and tools runs took: the transitions and tool calls a team's
//! tests (or its production runs) never exercised.
//!
//! Read from what the store keeps: each run's history (its `step` and `error` transitions)
//! and journal (its tool calls, by the state they were made in). `agentctl coverage` prints
//! it for the runs of an agent.

use std::collections::BTreeMap;

use serde::Serialize;

use super::GraphDescription;
use crate::store::{EntryKind, JournalEntry, TransitionKind, TransitionRecord};

/// How often runs took each declared edge and called each tool legal in each state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Coverage {
    /// The agent.
    pub agent: String,
    /// Runs counted.
    pub runs: u64,
    /// Every declared edge, in declaration order, with how often it was taken.
    pub edges: Vec<EdgeCoverage>,
    /// Every tool legal in every state, in declaration order, with how often it was called
    /// there.
    pub tools: Vec<ToolCoverage>,
    /// Transitions the runs took that this graph does not declare (runs of another version
    /// of the agent), with how often.
    pub undeclared: Vec<EdgeCoverage>,
}

/// One edge and how often runs took it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EdgeCoverage {
    /// Source state.
    pub from: String,
    /// Target state.
    pub to: String,
    /// Whether this edge is the source's `on_error` path.
    pub on_error: bool,
    /// How many times runs took it.
    pub taken: u64,
}

/// One tool legal in one state and how often runs called it there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ToolCoverage {
    /// The state.
    pub state: String,
    /// The tool.
    pub tool: String,
    /// How many calls runs journaled (each call once, whatever its retries).
    pub calls: u64,
}

impl Coverage {
    /// Nothing taken yet: every edge and tool of `graph` at zero.
    #[must_use]
    pub fn new(graph: &GraphDescription) -> Self {
        Self {
            agent: graph.agent.clone(),
            runs: 0,
            edges: graph
                .edges()
                .map(|e| EdgeCoverage {
                    from: e.from.to_owned(),
                    to: e.to.to_owned(),
                    on_error: e.error,
                    taken: 0,
                })
                .collect(),
            tools: graph
                .states
                .iter()
                .flat_map(|s| {
                    s.tools.iter().map(|t| ToolCoverage {
                        state: s.name.clone(),
                        tool: t.clone(),
                        calls: 0,
                    })
                })
                .collect(),
            undeclared: Vec::new(),
        }
    }

    /// Count one run, from its history and journal.
    pub fn add_run(&mut self, history: &[TransitionRecord], journal: &[JournalEntry]) {
        self.runs += 1;
        let mut taken: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        for t in history {
            // A repair, a migration or an operator's verb is not an edge of the graph.
            if matches!(t.kind, TransitionKind::Step | TransitionKind::Error) {
                *taken.entry((&t.from_state, &t.to_state)).or_default() += 1;
            }
        }
        let mut undeclared: Vec<(String, String)> = Vec::new();
        for ((from, to), n) in taken {
            match (self.edges.iter_mut()).find(|e| e.from == from && e.to == to) {
                Some(e) => e.taken += n,
                None => undeclared.extend((0..n).map(|_| (from.to_owned(), to.to_owned()))),
            }
        }
        for (from, to) in undeclared {
            match (self.undeclared.iter_mut()).find(|e| e.from == from && e.to == to) {
                Some(e) => e.taken += 1,
                None => self.undeclared.push(EdgeCoverage {
                    from,
                    to,
                    on_error: false,
                    taken: 1,
                }),
            }
        }
        for entry in journal.iter().filter(|e| e.kind == EntryKind::Tool) {
            if let Some(t) =
                (self.tools.iter_mut()).find(|t| t.state == entry.state && t.tool == entry.name)
            {
                t.calls += 1;
            }
        }
    }

    /// Edges taken at least once, and declared.
    #[must_use]
    pub fn edges_taken(&self) -> (usize, usize) {
        let taken = self.edges.iter().filter(|e| e.taken > 0).count();
        (taken, self.edges.len())
    }

    /// (state, tool) pairs called at least once, and legal.
    #[must_use]
    pub fn tools_called(&self) -> (usize, usize) {
        let called = self.tools.iter().filter(|t| t.calls > 0).count();
        (called, self.tools.len())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::{CallStatus, RunStatus};

    fn graph() -> GraphDescription {
        GraphDescription::from_json(
            &json!({
                "agent": "Shop",
                "states": [
                    { "name": "Browse", "initial": true, "route": "handler",
                      "to": ["Pay", "Leave"], "tools": ["search"] },
                    { "name": "Pay", "route": "handler", "to": ["Done"], "on_error": "Leave",
                      "tools": ["charge", "search"] },
                    { "name": "Done", "terminal": true, "route": "handler" },
                    { "name": "Leave", "terminal": true, "route": "handler" }
                ],
                "tools": [
                    { "name": "search", "kind": "read" },
                    { "name": "charge", "kind": "write" }
                ]
            })
            .to_string(),
        )
        .expect("a graph")
    }

    fn transition(version: u64, from: &str, to: &str, kind: TransitionKind) -> TransitionRecord {
        TransitionRecord {
            run_id: "r".to_owned(),
            version,
            from_state: from.to_owned(),
            to_state: to.to_owned(),
            kind,
            status: RunStatus::Running,
            epoch: 1,
            created_at: 0,
            hash: String::new(),
            note: None,
        }
    }

    fn call(state: &str, tool: &str) -> JournalEntry {
        JournalEntry {
            run_id: "r".to_owned(),
            version: 0,
            seq: 0,
            kind: EntryKind::Tool,
            state: state.to_owned(),
            name: tool.to_owned(),
            tool_kind: None,
            input: json!({}),
            input_hash: String::new(),
            idempotency_key: None,
            status: CallStatus::Succeeded,
            output: None,
            error_class: None,
            error_code: None,
            error_message: None,
            attempts: 1,
            duration_ms: 0,
            started_at: 0,
            finished_at: None,
        }
    }

    #[test]
    fn counts_edges_and_tools_taken_and_names_the_rest() {
        let mut coverage = Coverage::new(&graph());
        assert_eq!(coverage.edges_taken(), (0, 4));
        assert_eq!(coverage.tools_called(), (0, 3));
        coverage.add_run(
            &[
                transition(0, "Browse", "Browse", TransitionKind::Start),
                transition(1, "Browse", "Pay", TransitionKind::Step),
                transition(2, "Pay", "Leave", TransitionKind::Error),
                // Not edges: an operator's repair, and a transition of another version.
                transition(3, "Leave", "Pay", TransitionKind::Repair),
                transition(4, "Pay", "Refund", TransitionKind::Step),
            ],
            &[
                call("Browse", "search"),
                call("Pay", "charge"),
                call("Pay", "charge"),
            ],
        );
        assert_eq!(coverage.runs, 1);
        assert_eq!(coverage.edges_taken(), (2, 4));
        let taken: Vec<(&str, &str, bool, u64)> = (coverage.edges.iter())
            .map(|e| (e.from.as_str(), e.to.as_str(), e.on_error, e.taken))
            .collect();
        assert_eq!(
            taken,
            [
                ("Browse", "Pay", false, 1),
                ("Browse", "Leave", false, 0),
                ("Pay", "Done", false, 0),
                ("Pay", "Leave", true, 1),
            ]
        );
        assert_eq!(coverage.tools_called(), (2, 3));
        let charge = coverage.tools.iter().find(|t| t.tool == "charge").unwrap();
        assert_eq!(charge.calls, 2);
        let never = coverage
            .tools
            .iter()
            .find(|t| t.state == "Pay" && t.tool == "search")
            .unwrap();
        assert_eq!(never.calls, 0);
        assert_eq!(coverage.undeclared.len(), 1);
        assert_eq!(
            (
                coverage.undeclared[0].from.as_str(),
                coverage.undeclared[0].to.as_str()
            ),
            ("Pay", "Refund")
        );
    }
}
