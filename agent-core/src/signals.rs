//! The one check a signal passes before it is stored, whoever sends it (`Runner::signal`,
//! `agentctl signal`, `POST /v1/runs/{id}/signals`).
//!
//! A signal is kept until a state consumes it, and the state that consumes it deserializes
//! its payload into the type it declared (`wait_payload = Type`). A signal nothing will
//! consume would wait for ever; one whose payload the handler cannot read would fail the
//! run when it is consumed, and again on every retry, since a retry consumes the same
//! signal. Both are refused at send, where the sender can still correct them.

use serde_json::Value;

use crate::graph::GraphDescription;
use crate::store::{RunRecord, RunStatus};

/// The longest signal name, in characters.
pub const MAX_SIGNAL_NAME_CHARS: usize = 200;

/// Why a signal is refused at send.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignalRefusal {
    /// An empty name, or one over [`MAX_SIGNAL_NAME_CHARS`].
    #[error("a signal's name has 1 to {MAX_SIGNAL_NAME_CHARS} characters, not {chars}")]
    BadName {
        /// The name's length in characters.
        chars: usize,
    },
    /// The run has ended: no state will consume the signal.
    #[error("run `{run}` is {status}: no state will consume the signal")]
    RunEnded {
        /// The run.
        run: String,
        /// Its status.
        status: RunStatus,
    },
    /// No state of the run's agent waits for a signal of this name.
    #[error(
        "no state of agent `{agent}` waits for a signal named `{signal}`; {}",
        waits_phrase(waits)
    )]
    NotWaitedFor {
        /// The agent.
        agent: String,
        /// The signal's name as sent.
        signal: String,
        /// The signals its states wait for, sorted.
        waits: Vec<String>,
    },
    /// The payload does not satisfy the type a waiting state declared for it.
    #[error(
        "the payload of signal `{signal}` is not the `wait_payload` type of state `{state}`: {violations}"
    )]
    BadPayload {
        /// The signal's name.
        signal: String,
        /// The state whose declared type the payload breaks.
        state: String,
        /// What is wrong, each with its location in the payload.
        violations: String,
    },
}

impl SignalRefusal {
    /// Whether the refusal is about the run's status (it may be re-queued and signalled
    /// again), rather than about the signal itself.
    #[must_use]
    pub fn is_run_ended(&self) -> bool {
        matches!(self, Self::RunEnded { .. })
    }
}

fn waits_phrase(waits: &[String]) -> String {
    if waits.is_empty() {
        "it waits for no signal".to_owned()
    } else {
        format!("the signals it waits for: {}", waits.join(", "))
    }
}

/// Check signal `name` with `payload` for `run`, whose agent's graph is `graph` (`None`
/// when the store does not hold it: only the name's length and the run's status are then
/// checked).
///
/// The payload must satisfy the declared type of *every* state that waits for `name` with
/// one: a signal sent early is consumed by whichever of them the run reaches first.
///
/// # Errors
/// The first [`SignalRefusal`] that applies, in the order of its variants.
pub fn check_signal(
    run: &RunRecord,
    graph: Option<&GraphDescription>,
    name: &str,
    payload: &Value,
) -> Result<(), SignalRefusal> {
    let chars = name.chars().count();
    if chars == 0 || chars > MAX_SIGNAL_NAME_CHARS {
        return Err(SignalRefusal::BadName { chars });
    }
    if run.status.is_final() {
        return Err(SignalRefusal::RunEnded {
            run: run.id.clone(),
            status: run.status,
        });
    }
    match graph {
        Some(graph) => graph.check_signal(name, payload),
        None => Ok(()),
    }
}

impl GraphDescription {
    /// Check that some state waits for signal `name` and that `payload` satisfies the
    /// declared type of every state that waits for it with one.
    ///
    /// # Errors
    /// [`SignalRefusal::NotWaitedFor`] or [`SignalRefusal::BadPayload`].
    pub fn check_signal(&self, name: &str, payload: &Value) -> Result<(), SignalRefusal> {
        let waiting: Vec<_> = self
            .states
            .iter()
            .filter_map(|s| s.wait.as_ref().map(|w| (s, w)))
            .filter(|(_, w)| w.signal == name)
            .collect();
        if waiting.is_empty() {
            return Err(SignalRefusal::NotWaitedFor {
                agent: self.agent.clone(),
                signal: name.to_owned(),
                waits: self
                    .signals_waited_for()
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
            });
        }
        for (state, wait) in waiting {
            let Some(schema) = &wait.payload_schema else {
                continue;
            };
            let bad = |violations: String| SignalRefusal::BadPayload {
                signal: name.to_owned(),
                state: state.name.clone(),
                violations,
            };
            // A stored schema the validator cannot compile accepts nothing: the handler's
            // type could not be checked, and a payload it fails on must not get in.
            crate::schema::compiled(&as_deserialized(schema))
                .map_err(|e| bad(format!("its declared schema does not compile ({e})")))?
                .check(payload)
                .map_err(bad)?;
        }
        Ok(())
    }
}

/// `schema` as the handler's `Deserialize` reads it: the declared schema closes every
/// object (what a model is shown), but serde ignores fields a type does not declare, so a
/// payload carrying more than the type (a webhook's whole event) is one the handler reads.
/// (A type declared `deny_unknown_fields` would refuse it; its extra fields are not
/// refused here, and a run that fails on one can have the signal dropped.)
fn as_deserialized(schema: &Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(map) => {
                if map.get("additionalProperties") == Some(&Value::Bool(false)) {
                    map.remove("additionalProperties");
                }
                map.values_mut().for_each(walk);
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut open = schema.clone();
    walk(&mut open);
    open
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn approval() -> Value {
        json!({
            "type": "object",
            "properties": {"approved": {"type": "boolean"}, "by": {"type": "string"}},
            "required": ["approved"],
            "additionalProperties": false,
        })
    }

    fn graph() -> GraphDescription {
        serde_json::from_value(json!({
            "agent": "Refund",
            "states": [
                {"name": "Start", "initial": true, "to": ["AwaitApproval"]},
                {"name": "AwaitApproval",
                 "wait": {"signal": "approve", "payload_schema": approval()}},
                {"name": "AwaitNudge", "wait": {"signal": "nudge"}},
            ],
            "tools": [],
        }))
        .unwrap()
    }

    fn run(status: RunStatus) -> RunRecord {
        serde_json::from_value(json!({
            "id": "r1", "agent": "Refund", "fingerprint": "", "state_name": "AwaitApproval",
            "state": {}, "version": 1, "status": status, "epoch": 1,
            "claims_without_progress": 0, "created_at": 0, "updated_at": 0,
            "labels": {}, "agent_version": 1,
        }))
        .unwrap()
    }

    #[test]
    fn a_payload_of_the_declared_type_passes() {
        let g = graph();
        check_signal(
            &run(RunStatus::Waiting),
            Some(&g),
            "approve",
            &json!({"approved": true, "by": "ann"}),
        )
        .unwrap();
        // Fields the type does not declare are ignored by its `Deserialize`, so kept.
        check_signal(
            &run(RunStatus::Waiting),
            Some(&g),
            "approve",
            &json!({"approved": false, "event": {"id": 7}}),
        )
        .unwrap();
        // A wait without a declared type takes any payload.
        check_signal(
            &run(RunStatus::Running),
            Some(&g),
            "nudge",
            &json!([1, "x"]),
        )
        .unwrap();
    }

    #[test]
    fn a_payload_the_handler_could_not_read_is_refused_with_where() {
        let g = graph();
        for (payload, needle) in [
            (json!({"approved": "yes"}), "/approved"),
            (json!({}), "approved"),
            (json!("approved"), "object"),
        ] {
            let refused =
                check_signal(&run(RunStatus::Waiting), Some(&g), "approve", &payload).unwrap_err();
            assert!(
                matches!(&refused, SignalRefusal::BadPayload { state, .. } if state == "AwaitApproval"),
                "{payload}: {refused:?}"
            );
            assert!(refused.to_string().contains(needle), "{payload}: {refused}");
        }
    }

    #[test]
    fn every_state_waiting_for_the_signal_must_take_the_payload() {
        let mut g = graph();
        let strict = json!({"type": "object", "properties": {"n": {"type": "integer"}},
            "required": ["n"], "additionalProperties": false});
        g.states.push(
            serde_json::from_value(json!({"name": "AwaitAgain",
                "wait": {"signal": "nudge", "payload_schema": strict}}))
            .unwrap(),
        );
        let refused =
            check_signal(&run(RunStatus::Waiting), Some(&g), "nudge", &json!({})).unwrap_err();
        assert!(
            matches!(&refused, SignalRefusal::BadPayload { state, .. } if state == "AwaitAgain")
        );
        check_signal(
            &run(RunStatus::Waiting),
            Some(&g),
            "nudge",
            &json!({"n": 1}),
        )
        .unwrap();
    }

    #[test]
    fn names_no_state_waits_for_are_refused_with_the_ones_it_does() {
        let refused = check_signal(
            &run(RunStatus::Waiting),
            Some(&graph()),
            "aprove",
            &json!({}),
        )
        .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "no state of agent `Refund` waits for a signal named `aprove`; \
             the signals it waits for: approve, nudge"
        );
    }

    #[test]
    fn ended_runs_and_bad_names_are_refused_before_the_graph_is_read() {
        for status in RunStatus::ALL.iter().copied().filter(|s| s.is_final()) {
            let refused = check_signal(&run(status), None, "approve", &json!({})).unwrap_err();
            assert!(refused.is_run_ended(), "{status}: {refused}");
        }
        for name in [String::new(), "x".repeat(MAX_SIGNAL_NAME_CHARS + 1)] {
            assert!(matches!(
                check_signal(&run(RunStatus::Waiting), Some(&graph()), &name, &json!({})),
                Err(SignalRefusal::BadName { .. })
            ));
        }
        // Without the graph, only the name and the status can be checked.
        check_signal(&run(RunStatus::Waiting), None, "anything", &json!(1)).unwrap();
    }
}
