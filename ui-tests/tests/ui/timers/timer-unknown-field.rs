// `timer = field` names a field the state has.
use durable_agents::Agent;
use durable_agents::timer::Deadline;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, timer = due, to(Done))]
    Start { customer: String, remind_at: Deadline },
    #[agent(terminal)]
    Done,
}

fn main() {}
