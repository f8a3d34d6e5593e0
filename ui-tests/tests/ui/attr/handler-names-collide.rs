// Two states whose handler methods have one snake-case name (`HTTPCall`, `HttpCall`) are one error naming both states.
use durable_agents::Agent;
use serde::{Deserialize, Serialize};

#[derive(Agent, Clone, Serialize, Deserialize)]
enum Flow {
    #[agent(initial, to(HttpCall, Done))]
    HTTPCall,
    #[agent(to(Done))]
    HttpCall,
    #[agent(terminal)]
    Done,
}

fn main() {}
