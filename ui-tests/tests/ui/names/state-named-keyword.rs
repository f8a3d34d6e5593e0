// States whose handler method would be a keyword that cannot be raw (`Super` -> `super`,
// `Self_` -> `self`, `Crate` -> `crate`): one error at each state.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Climb {
    #[agent(initial, to(Self_))]
    Super,
    #[agent(to(Crate))]
    Self_,
    #[agent(to(Done))]
    Crate,
    #[agent(terminal)]
    Done,
}

fn main() {}
