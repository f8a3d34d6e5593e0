//! The names a tool switch may name: the tools the registered agents declare, and those
//! switched before. The CLI (`agentctl tools`) and the HTTP API check a switch against
//! them with the same words ([`UnknownTool`]).

use std::collections::BTreeSet;

use super::{HistoryStore, StoreError};

/// The tools an operator may switch: every tool the latest graph of a registered agent
/// declares, and every tool switched before (so that a switch can be undone after its
/// agent stopped declaring it). Reads one graph per registered agent.
///
/// # Errors
/// The store's error when the agents, a graph or the switches cannot be read.
pub async fn known_tools<S: HistoryStore + ?Sized>(
    store: &S,
) -> Result<BTreeSet<String>, StoreError> {
    let mut known = BTreeSet::new();
    for agent in store.agents().await? {
        if let Some(graph) = store.agent_graph(&agent, None).await? {
            known.extend(graph.tools.into_iter().map(|t| t.name));
        }
    }
    known.extend(store.tool_switches().await?.into_iter().map(|s| s.tool));
    Ok(known)
}

/// A tool switch naming a tool no registered agent declares and none switched before:
/// it would switch nothing (names are case-sensitive: `chargepayment` is not
/// `ChargePayment`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no registered agent declares a tool `{tool}` (known: {}){}",
    if known.is_empty() { "none".to_owned() } else { known.join(", ") },
    close.as_ref().map_or_else(String::new, |c| format!("; did you mean `{c}`?")))]
pub struct UnknownTool {
    /// The name given.
    pub tool: String,
    /// The names known ([`known_tools`]).
    pub known: Vec<String>,
    /// A known name equal to the one given but for case.
    pub close: Option<String>,
}

impl UnknownTool {
    /// `Some` when `tool` is not in `known`.
    #[must_use]
    pub fn check(tool: &str, known: &BTreeSet<String>) -> Option<Self> {
        if known.contains(tool) {
            return None;
        }
        Some(Self {
            tool: tool.to_owned(),
            known: known.iter().cloned().collect(),
            close: known.iter().find(|k| k.eq_ignore_ascii_case(tool)).cloned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::UnknownTool;

    #[test]
    fn unknown_tools_are_named_with_the_known_ones() {
        let known = ["ChargePayment", "Refund"].map(str::to_owned).into();
        assert_eq!(UnknownTool::check("ChargePayment", &known), None);
        let e = UnknownTool::check("chargepayment", &known).unwrap();
        assert_eq!(
            e.to_string(),
            "no registered agent declares a tool `chargepayment` (known: ChargePayment, \
             Refund); did you mean `ChargePayment`?"
        );
        let none = UnknownTool::check("x", &std::collections::BTreeSet::new()).unwrap();
        assert_eq!(
            none.to_string(),
            "no registered agent declares a tool `x` (known: none)"
        );
    }
}
