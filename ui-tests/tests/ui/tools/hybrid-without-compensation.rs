// A hybrid tool must name the write tool that undoes it.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};
use ui_tests::{ReleaseInventory, ReserveInventory};

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(write(ReleaseInventory), hybrid(ReserveInventory)))]
enum Checkout {
    #[agent(initial, tools(ReserveInventory), to(Done))]
    Browsing,
    #[agent(terminal)]
    Done,
}

fn main() {}
