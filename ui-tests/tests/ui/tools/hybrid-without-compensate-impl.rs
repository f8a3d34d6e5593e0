// A tool declared hybrid must implement `Compensate`.
use durable_agents::{Agent, Tool};
use serde::{Deserialize, Serialize};
use ui_tests::ReleaseInventory;

/// Hold a seat.
#[derive(Tool)]
#[tool(kind = hybrid, input = String, output = String)]
pub struct HoldSeat;

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(write(ReleaseInventory), hybrid(HoldSeat(compensate = ReleaseInventory))))]
enum Booking {
    #[agent(initial, tools(HoldSeat), to(Done))]
    Start,
    #[agent(terminal)]
    Done,
}

fn main() {}
