// `#[derive(Tool)]`: name from the type, description from the doc comment, policy from the attribute.
use std::time::Duration;

use durable_agents::tool::{ToolPolicy, kind::Kind};
use durable_agents::{Tool, ToolKind};

/// Search the catalogue.
///
/// Returns SKUs.
#[derive(Tool)]
#[tool(kind = read, input = String, output = Vec<String>, timeout_ms = 2000, retries = 4, cache = false, journal_with_commit = true)]
pub struct SearchProducts;

#[derive(Tool)]
#[tool(kind = write, input = u64, output = ())]
pub struct Charge;

fn main() {
    assert_eq!(SearchProducts::NAME, "SearchProducts");
    assert_eq!(SearchProducts::DESCRIPTION, "Search the catalogue.\n\nReturns SKUs.");
    assert_eq!(<<SearchProducts as Tool>::Kind as Kind>::KIND, ToolKind::Read);
    let p = SearchProducts::policy();
    assert_eq!(p.timeout, Duration::from_millis(2000));
    assert_eq!(p.retry.max_attempts, 4);
    assert!(!p.cache);
    assert!(p.journal_with_commit);
    assert_eq!(Charge::policy(), ToolPolicy::default());
    assert_eq!(Charge::DESCRIPTION, "");
    assert_eq!(<<Charge as Tool>::Kind as Kind>::KIND, ToolKind::Write);
}
