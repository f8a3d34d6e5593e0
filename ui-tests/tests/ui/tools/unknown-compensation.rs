// The compensation of a hybrid tool must be a tool declared on the agent.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};
use ui_tests::{ReleaseInventory, ReserveInventory};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(write(ReleaseInventory), hybrid(ReserveInventory(compensate = ReleaseInventroy))))]
enum Checkout {
    #[agent(initial, tools(ReserveInventory), to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn main() {}
