//! # Message triggers: runs started by NATS and MQTT messages
//!
//! A [`Trigger`] starts one run of an agent per message read from a broker: NATS
//! JetStream (a durable pull consumer, feature `nats`) or MQTT (QoS 1, a persistent
//! session, feature `mqtt`). Each message gets a **dedup key** (the broker's message id,
//! or a field of its body) and its run an id derived from the trigger's name and that key,
//! so a message delivered twice finds its run instead of starting another. The message is
//! **acknowledged only after the run's creation committed**: a consumer that dies in
//! between leaves it to the broker, which delivers it again. Together: exactly one run per
//! message, under redelivery and crashes.
//!
//! A message that cannot start a run (not JSON, not an initial state of the agent, no
//! dedup field) is **rejected**: published with the reason to a dead-letter subject or
//! topic, then acknowledged, and the consumer goes on. A trigger bounded with
//! [`Trigger::with_max_in_flight`] stops pulling while its agent has that many runs in
//! flight. A lost broker is reached again with backoff; [`TriggerMonitor::state`] says
//! where the consumer is ([`TriggerState`]).
//!
//! The guide is `docs/message-triggers.md` in the repository.
//!
//! ```no_run
//! # #[cfg(feature = "nats")]
//! # async fn example(
//! #     runner: std::sync::Arc<dyn agent_core::runner::JsonStarter>,
//! #     store: std::sync::Arc<dyn agent_core::store::HistoryStore>,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use std::num::NonZeroU32;
//! use agent_triggers::{Consumer, DedupKey, InitialState, Trigger};
//! use agent_triggers::nats::{NatsBroker, NatsConfig};
//!
//! let trigger = Trigger::new("orders", runner, store)?
//!     .with_initial_state(InitialState::Wrap("Received".into()))?
//!     .with_dedup_key(DedupKey::Field("/order_id".into()))
//!     .with_max_in_flight(NonZeroU32::new(100).unwrap());
//! let client = async_nats::ConnectOptions::new()
//!     .retry_on_initial_connect()
//!     .connect("nats://127.0.0.1:4222")
//!     .await?;
//! let broker = NatsBroker::new(client, NatsConfig::new("ORDERS", "orders-trigger", "orders.dead"));
//! let consumer = Consumer::new(trigger);
//! let monitor = consumer.monitor(); // its state and counters
//! consumer.consume(broker).await?;
//! # Ok(())
//! # }
//! ```
//!
//! | feature | what |
//! |---|---|
//! | `nats` | `nats::NatsBroker`: JetStream durable pull consumer, explicit double acks (`async-nats`) |
//! | `mqtt` | `mqtt::MqttBroker`: MQTT 3.1.1 QoS 1, persistent session, manual acks (`rumqttc`) |

mod consume;
#[cfg(feature = "mqtt")]
pub mod mqtt;
#[cfg(feature = "nats")]
pub mod nats;
mod trigger;

pub use consume::{
    AckFaults, Broker, BrokerError, ConsumeError, Consumer, NoAckFaults, TriggerMonitor,
    TriggerState, TriggerStats,
};
pub use trigger::{
    DecideError, Decision, DedupKey, InitialState, MAX_TRIGGER_NAME_CHARS, MESSAGE_LABEL, Message,
    ORIGIN_LABEL, Rejection, SignalTarget, TRIGGER_LABEL, Trigger, TriggerConfigError,
};
