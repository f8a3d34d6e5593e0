//! What a trigger is (its name, the agent it starts, how a message becomes an initial state
//! and a dedup key) and what it decides for one message, independent of the broker.

use std::fmt;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use agent_core::runner::{JsonSignaller, JsonStarter, RunnerError, StartError};
use agent_core::store::{HistoryStore, Labels, RunRecord, StoreError, validate_label};
use serde_json::Value;
use sha2::{Digest, Sha256};

pub use agent_core::started_by::{
    TRIGGER_LABEL, TRIGGER_MESSAGE_LABEL as MESSAGE_LABEL, TRIGGER_ORIGIN_LABEL as ORIGIN_LABEL,
};

/// The longest trigger name, in characters: it is a label value and the prefix of run ids.
pub const MAX_TRIGGER_NAME_CHARS: usize = 64;

/// How many messages a trigger pulls at once unless told otherwise.
const DEFAULT_BATCH: NonZeroUsize = NonZeroUsize::new(16).unwrap();

/// One message as a broker delivered it, borrowed from the broker's own type.
#[derive(Clone, Copy, Debug)]
pub struct Message<'a> {
    /// The broker's id for the message, stable across redeliveries, when it has one
    /// (NATS: the `Nats-Msg-Id` header, else the stream and sequence). MQTT has none.
    pub id: Option<&'a str>,
    /// The subject (NATS) or topic (MQTT) it was published to.
    pub origin: &'a str,
    /// Its body.
    pub body: &'a [u8],
}

/// How a message body becomes the initial state of the run it starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum InitialState {
    /// The body is the state's JSON as the agent serializes it (`{"Start": {...}}`).
    #[default]
    Body,
    /// The body is the fields of this initial state: `Wrap("Start")` reads `{"word": "x"}`
    /// as `{"Start": {"word": "x"}}`, so publishers need not know the agent's enum.
    Wrap(String),
}

/// Where the dedup key of a message comes from. Two messages with the same key start one
/// run: the run id is derived from the trigger's name and the key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DedupKey {
    /// The broker's message id ([`Message::id`]); for a broker without one (MQTT), a
    /// SHA-256 of the topic and the body, so two identical messages are one run.
    #[default]
    MessageId,
    /// A field of the body, as a JSON pointer (`/order_id`); a string or a number. A
    /// message without it is rejected.
    Field(String),
}

/// Which run a message signals, and with what: for a trigger made with
/// [`Trigger::signalling`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalTarget {
    /// The signal's name.
    pub name: String,
    /// The JSON pointer of the run's id in the body (`/run_id`).
    pub run_field: String,
    /// The JSON pointer of the payload in the body; the whole body when `None`.
    pub payload_field: Option<String>,
}

/// What a trigger does with a message.
#[derive(Clone)]
pub(crate) enum Target {
    Start(Arc<dyn JsonStarter>),
    Signal(Arc<dyn JsonSignaller>, SignalTarget),
}

/// What a trigger decided for one message. The broker acknowledges the message only
/// after the decision was reached, which for a run means after its creation committed.
#[derive(Clone, Debug)]
pub enum Decision {
    /// A run was created for the message.
    Started(RunRecord),
    /// The message's run existed already: a redelivery, or a second message with the same
    /// dedup key. Nothing was written.
    Duplicate(RunRecord),
    /// The signal was stored for the run under the message's dedup key (its id in the
    /// store), or had been: a message redelivered after its signal was stored signals
    /// nothing more (exactly once per run and key).
    Signalled {
        /// The run signalled.
        run_id: String,
        /// The stored signal's id.
        signal_id: i64,
        /// Whether the signal had been stored before, under the same key: nothing was
        /// written now.
        duplicate: bool,
    },
    /// The message cannot start a run (or signal one); it goes to the dead-letter destination with the
    /// reason, and is acknowledged after that.
    Rejected(Rejection),
}

/// Why a message was refused; published with it to the dead-letter destination.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The body is not JSON.
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    /// The declared dedup field is missing, or is neither a string nor a number.
    #[error("the dedup field `{field}` {problem}")]
    NoDedupKey {
        /// The JSON pointer.
        field: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A signalling trigger's run field is missing or not a string.
    #[error("the run field `{0}` is missing or not a string")]
    NoRunId(String),
    /// A signalling trigger's payload field is missing.
    #[error("the payload field `{0}` is missing")]
    NoPayload(String),
    /// The signal was refused: unknown run, a run that ended or waits for no such signal,
    /// a payload of the wrong type.
    #[error("the signal was refused: {0}")]
    SignalRefused(String),
    /// The body is not an initial state of the agent (the message names the ones it can be).
    #[error("{0}")]
    NotAnInitialState(String),
    /// The store refused the run as asked (a label it does not accept, for example).
    #[error("the store refused the run: {0}")]
    Refused(String),
}

/// A trigger's settings that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TriggerConfigError {
    /// The name is empty, too long, or holds characters other than ASCII letters, digits,
    /// `.`, `_` and `-`.
    #[error(
        "trigger name `{0}` must be 1 to {MAX_TRIGGER_NAME_CHARS} ASCII letters, digits, `.`, `_` or `-`, starting with a letter or digit"
    )]
    BadName(String),
    /// The state to wrap bodies into has no name.
    #[error("`InitialState::Wrap` names an empty state")]
    EmptyWrap,
}

/// The store failed while deciding: nothing was decided, and the message is not
/// acknowledged (it is tried again).
#[derive(Debug, thiserror::Error)]
#[error("trigger `{trigger}` could not decide on a message: {source}")]
pub struct DecideError {
    /// The trigger.
    pub trigger: String,
    /// What failed.
    #[source]
    pub source: StoreError,
}

/// A trigger: which runs a message starts, and how many may be in flight.
///
/// Build it with [`Trigger::new`] and the `with_*` methods, then hand it to a broker's
/// consumer ([`Consumer`](crate::Consumer), over the broker of module `nats` or `mqtt`).
#[derive(Clone)]
pub struct Trigger {
    pub(crate) name: String,
    pub(crate) target: Target,
    pub(crate) agent: &'static str,
    pub(crate) store: Arc<dyn HistoryStore>,
    pub(crate) initial: InitialState,
    pub(crate) dedup: DedupKey,
    pub(crate) max_in_flight: Option<NonZeroU32>,
    pub(crate) batch: NonZeroUsize,
    pub(crate) backpressure_poll: Duration,
    pub(crate) max_backoff: Duration,
}

impl fmt::Debug for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trigger")
            .field("name", &self.name)
            .field("agent", &self.agent)
            .field(
                "signal",
                &match &self.target {
                    Target::Start(_) => None,
                    Target::Signal(_, target) => Some(target),
                },
            )
            .field("initial", &self.initial)
            .field("dedup", &self.dedup)
            .field("max_in_flight", &self.max_in_flight)
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

impl Trigger {
    /// A trigger named `name` starting runs through `starter` (a
    /// [`Runner`](agent_core::runner::Runner)), counting its runs in flight in `store` (the
    /// runner's). By default the body is the state's JSON, the dedup key is the broker's
    /// message id, there is no bound on runs in flight, and messages are pulled 16 at a time.
    ///
    /// # Errors
    /// [`TriggerConfigError::BadName`] when the name cannot be a label value and the prefix
    /// of run ids.
    pub fn new(
        name: impl Into<String>,
        starter: Arc<dyn JsonStarter>,
        store: Arc<dyn HistoryStore>,
    ) -> Result<Self, TriggerConfigError> {
        let agent = starter.agent();
        Self::with_target(name.into(), Target::Start(starter), agent, store)
    }

    /// A trigger named `name` that signals a run per message instead of starting one: the
    /// run's id and the payload are read from the body as `target` says, and the signal
    /// sent through `signaller` (a [`Runner`](agent_core::runner::Runner) of the run's
    /// agent). Signals are sent **exactly once** per run and message: stored under the message's dedup key
    /// ([`signal_key`](Self::signal_key)), so a message redelivered after its signal was
    /// stored but before its ack signals nothing more. The bound on runs in flight, when
    /// set, counts the signalled agent's runs.
    ///
    /// # Errors
    /// [`TriggerConfigError::BadName`] as for [`new`](Self::new).
    pub fn signalling(
        name: impl Into<String>,
        signaller: Arc<dyn JsonSignaller>,
        target: SignalTarget,
        store: Arc<dyn HistoryStore>,
    ) -> Result<Self, TriggerConfigError> {
        let agent = signaller.agent();
        Self::with_target(name.into(), Target::Signal(signaller, target), agent, store)
    }

    fn with_target(
        name: String,
        target: Target,
        agent: &'static str,
        store: Arc<dyn HistoryStore>,
    ) -> Result<Self, TriggerConfigError> {
        let chars = name.chars().count();
        let valid = (1..=MAX_TRIGGER_NAME_CHARS).contains(&chars)
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !valid {
            return Err(TriggerConfigError::BadName(name));
        }
        Ok(Self {
            name,
            target,
            agent,
            store,
            initial: InitialState::Body,
            dedup: DedupKey::MessageId,
            max_in_flight: None,
            batch: DEFAULT_BATCH,
            backpressure_poll: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
        })
    }

    /// How bodies become initial states.
    ///
    /// # Errors
    /// [`TriggerConfigError::EmptyWrap`] for `Wrap("")`.
    pub fn with_initial_state(mut self, initial: InitialState) -> Result<Self, TriggerConfigError> {
        if initial == InitialState::Wrap(String::new()) {
            return Err(TriggerConfigError::EmptyWrap);
        }
        self.initial = initial;
        Ok(self)
    }

    /// Where the dedup key comes from.
    #[must_use]
    pub fn with_dedup_key(mut self, dedup: DedupKey) -> Self {
        self.dedup = dedup;
        self
    }

    /// Stop pulling messages while the agent has this many runs in flight (running,
    /// waiting or compensating), and pull at most as many as there is room for.
    #[must_use]
    pub fn with_max_in_flight(mut self, bound: NonZeroU32) -> Self {
        self.max_in_flight = Some(bound);
        self
    }

    /// Pull at most this many messages at once (16 by default).
    #[must_use]
    pub fn with_batch(mut self, batch: NonZeroUsize) -> Self {
        self.batch = batch;
        self
    }

    /// How often a paused trigger counts the runs in flight again (200 ms by default).
    #[must_use]
    pub fn with_backpressure_poll(mut self, every: Duration) -> Self {
        self.backpressure_poll = every;
        self
    }

    /// The longest wait between two attempts to reach a broker or the store that failed
    /// (5 s by default; the wait doubles from 100 ms up to it).
    #[must_use]
    pub fn with_max_backoff(mut self, max: Duration) -> Self {
        self.max_backoff = max;
        self
    }

    /// The trigger's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name of the agent it starts.
    #[must_use]
    pub fn agent(&self) -> &'static str {
        self.agent
    }

    /// The id of the run a message with dedup key `key` starts: the trigger's name and
    /// 128 bits of the key's SHA-256, so any key (long, or with characters a run id should
    /// not hold) gives a short id, and equal keys give the same one.
    #[must_use]
    pub fn run_id(&self, key: &str) -> String {
        let digest = Sha256::digest(key.as_bytes());
        format!("{}-{}", self.name, hex::encode(&digest[..16]))
    }

    /// Decide on one message: reject it, or start its run (or find it started). The run is
    /// committed when this returns `Decision::Started`; the caller acknowledges the message
    /// only then.
    ///
    /// # Errors
    /// [`DecideError`] when the store failed: nothing is decided, the message must not be
    /// acknowledged.
    pub async fn decide(&self, message: &Message<'_>) -> Result<Decision, DecideError> {
        let body: Value = match serde_json::from_slice(message.body) {
            Ok(body) => body,
            Err(e) => return Ok(Decision::Rejected(Rejection::NotJson(e.to_string()))),
        };
        let starter = match &self.target {
            Target::Start(starter) => starter,
            Target::Signal(signaller, target) => {
                let key = match self.dedup_key(message, &body) {
                    Ok(key) => self.signal_key(&key),
                    Err(rejection) => return Ok(Decision::Rejected(rejection)),
                };
                return self.signal(signaller.as_ref(), target, body, key).await;
            }
        };
        let key = match self.dedup_key(message, &body) {
            Ok(key) => key,
            Err(rejection) => return Ok(Decision::Rejected(rejection)),
        };
        let run_id = self.run_id(&key);
        let store_failed = |source| DecideError {
            trigger: self.name.clone(),
            source,
        };
        // Looked up first so that a redelivery writes nothing and reads as a duplicate; a
        // second consumer racing on the same message still creates one run, as creation is
        // idempotent on the id.
        if let Some(run) = self.store.load_run(&run_id).await.map_err(store_failed)? {
            return Ok(Decision::Duplicate(run));
        }
        let state = match &self.initial {
            InitialState::Body => body,
            InitialState::Wrap(name) => serde_json::json!({ name.as_str(): body }),
        };
        let labels = self.labels(&key, message.origin);
        match starter.start_json(run_id.clone(), state, labels).await {
            Ok(run) => Ok(Decision::Started(run)),
            Err(StartError::NotAnInitialState(why)) => {
                Ok(Decision::Rejected(Rejection::NotAnInitialState(why)))
            }
            // Created by someone else between the look-up and the start, with other
            // content (another body with the same key): the first one wins, as with the
            // broker's own deduplication.
            Err(StartError::Runner(RunnerError::Store(StoreError::AlreadyExists(_)))) => {
                match self.store.load_run(&run_id).await.map_err(store_failed)? {
                    Some(run) => Ok(Decision::Duplicate(run)),
                    None => Err(store_failed(StoreError::NotFound(run_id))),
                }
            }
            Err(StartError::Runner(RunnerError::Store(StoreError::InvalidLabel(why)))) => {
                Ok(Decision::Rejected(Rejection::Refused(why)))
            }
            Err(StartError::Runner(RunnerError::Store(e))) => Err(store_failed(e)),
            Err(StartError::Runner(e)) => Ok(Decision::Rejected(Rejection::Refused(e.to_string()))),
        }
    }

    /// The key a signal of the message with dedup key `key` is stored under: the trigger's
    /// name and 128 bits of the key's SHA-256, as for run ids, so that two triggers whose
    /// brokers number messages alike never take each other's signals for duplicates, and
    /// any key fits the store's bound.
    #[must_use]
    pub fn signal_key(&self, key: &str) -> String {
        self.run_id(key)
    }

    async fn signal(
        &self,
        signaller: &dyn JsonSignaller,
        target: &SignalTarget,
        mut body: Value,
        key: String,
    ) -> Result<Decision, DecideError> {
        let Some(run_id) = body
            .pointer(&target.run_field)
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return Ok(Decision::Rejected(Rejection::NoRunId(
                target.run_field.clone(),
            )));
        };
        let payload = match &target.payload_field {
            None => body,
            Some(field) => match body.pointer_mut(field) {
                Some(payload) => payload.take(),
                None => return Ok(Decision::Rejected(Rejection::NoPayload(field.clone()))),
            },
        };
        match signaller
            .signal_json(run_id.clone(), target.name.clone(), payload, key)
            .await
        {
            Ok(receipt) => Ok(Decision::Signalled {
                run_id,
                signal_id: receipt.id,
                duplicate: receipt.duplicate,
            }),
            Err(RunnerError::Store(StoreError::NotFound(_)) | RunnerError::NotFound(_)) => {
                Ok(Decision::Rejected(Rejection::SignalRefused(format!(
                    "run `{run_id}` not found"
                ))))
            }
            Err(RunnerError::Store(e)) => Err(DecideError {
                trigger: self.name.clone(),
                source: e,
            }),
            Err(e) => Ok(Decision::Rejected(Rejection::SignalRefused(e.to_string()))),
        }
    }

    fn dedup_key(&self, message: &Message<'_>, body: &Value) -> Result<String, Rejection> {
        match &self.dedup {
            DedupKey::MessageId => Ok(message
                .id
                .map_or_else(|| content_key(message.origin, message.body), str::to_owned)),
            DedupKey::Field(pointer) => {
                let missing = |problem| Rejection::NoDedupKey {
                    field: pointer.clone(),
                    problem,
                };
                match body.pointer(pointer) {
                    Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
                    Some(Value::Number(n)) => Ok(n.to_string()),
                    Some(Value::String(_)) => Err(missing("is empty")),
                    Some(_) => Err(missing("is neither a string nor a number")),
                    None => Err(missing("is missing")),
                }
            }
        }
    }

    fn labels(&self, key: &str, origin: &str) -> Labels {
        let mut labels = Labels::new();
        labels.insert(TRIGGER_LABEL.to_owned(), self.name.clone());
        let shown = |value: &str| {
            if validate_label(MESSAGE_LABEL, value).is_ok() {
                value.to_owned()
            } else {
                format!("sha256:{}", hex::encode(Sha256::digest(value.as_bytes())))
            }
        };
        labels.insert(MESSAGE_LABEL.to_owned(), shown(key));
        labels.insert(ORIGIN_LABEL.to_owned(), shown(origin));
        labels
    }
}

/// The dedup key of a message without an id: the SHA-256 of its origin and body.
fn content_key(origin: &str, body: &[u8]) -> String {
    let mut hash = Sha256::new();
    hash.update(origin.as_bytes());
    // A separator no topic holds, so ("a", "bc") and ("ab", "c") differ.
    hash.update([0]);
    hash.update(body);
    format!("content-sha256:{}", hex::encode(hash.finalize()))
}

#[cfg(test)]
mod tests {
    use super::content_key;

    #[test]
    fn the_content_key_tells_origin_from_body() {
        assert_ne!(content_key("a", b"bc"), content_key("ab", b"c"));
        assert_eq!(content_key("t", b"{}"), content_key("t", b"{}"));
    }
}
