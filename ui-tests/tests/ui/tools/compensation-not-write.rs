// The compensation of a hybrid tool must be a write tool.
use agent_core::Agent;
use serde::{Deserialize, Serialize};
use ui_tests::{ReleaseInventory, ReserveInventory};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(read(ReleaseInventory), hybrid(ReserveInventory(compensate = ReleaseInventory))))]
enum Checkout {
    #[agent(initial, tools(ReserveInventory), to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn main() {}
