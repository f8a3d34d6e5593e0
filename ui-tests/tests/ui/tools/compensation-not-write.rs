// The compensation of a hybrid tool must be a write tool.
use durable_agents::Agent;
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
