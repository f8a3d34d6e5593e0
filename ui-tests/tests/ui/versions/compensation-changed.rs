// A hybrid tool kept by the new version must keep its compensation: calls completed on the
// old version are undone by the tool that undoes them.
use durable_agents::{Agent, Compensate, Tool};
use serde::{Deserialize, Serialize};

#[derive(Debug, Tool)]
#[tool(kind = write, input = String, output = ())]
pub struct CancelHold;

pub mod tools_v1 {
    use durable_agents::{Compensate, Tool};

    #[derive(Debug, Tool)]
    #[tool(kind = hybrid, input = String, output = String)]
    pub struct HoldSeat;

    #[derive(Debug, Tool)]
    #[tool(kind = write, input = String, output = ())]
    pub struct FreeSeat;

    impl Compensate for HoldSeat {
        type With = FreeSeat;
        fn compensation(&self, _input: &String, output: &String) -> String {
            output.clone()
        }
    }
}

mod v1 {
    use super::tools_v1::{FreeSeat, HoldSeat};
    use durable_agents::Agent;
    use serde::{Deserialize, Serialize};

    #[derive(Agent, Clone, Serialize, Deserialize)]
    #[agent(tools(write(FreeSeat), hybrid(HoldSeat(compensate = FreeSeat))))]
    pub enum Booking {
        #[agent(initial, tools(HoldSeat), to(Done, Failed))]
        Holding,
        #[agent(terminal)]
        Done,
        #[agent(terminal, compensate)]
        Failed,
    }
}

/// Version 2's `HoldSeat`: the same tool name, undone by another tool.
#[derive(Debug, Tool)]
#[tool(kind = hybrid, input = String, output = String)]
pub struct HoldSeat;

impl Compensate for HoldSeat {
    type With = CancelHold;
    fn compensation(&self, _input: &String, output: &String) -> String {
        output.clone()
    }
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(
    version = 2,
    migrate_from(v1::Booking, with = from_v1),
    tools(write(CancelHold), hybrid(HoldSeat(compensate = CancelHold)))
)]
pub enum Booking {
    #[agent(initial, tools(HoldSeat), to(Done, Failed))]
    Holding,
    #[agent(terminal)]
    Done,
    #[agent(terminal, compensate)]
    Failed,
}

fn from_v1(old: v1::Booking) -> Booking {
    match old {
        v1::Booking::Holding => Booking::Holding,
        v1::Booking::Done => Booking::Done,
        v1::Booking::Failed => Booking::Failed,
    }
}

fn main() {}
