//! What a replay found: per run, the steps replayed, the steps skipped and why, and the
//! first divergence.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::runner::imported::short;
use crate::store::{RunStatus, TransitionKind};

/// The first place where the new code did not do what a recorded run did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    /// The version whose step was replayed (the recorded transition is into `version + 1`).
    pub version: u64,
    /// The state the step ran in, as recorded.
    pub state: String,
    /// What differed.
    #[serde(flatten)]
    pub kind: DivergenceKind,
}

/// What differed in a step ([`Divergence`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DivergenceKind {
    /// The new code called another tool than the one journaled at this index.
    OtherTool {
        /// The call's index in the step (its journal `seq`).
        seq: u32,
        /// The tool journaled there (or, for an entry that is no tool call, its kind and
        /// name: `decision Review`).
        recorded: String,
        /// The tool the new code called.
        now: String,
    },
    /// The new code called the journaled tool with other arguments.
    OtherArguments {
        /// The call's index in the step.
        seq: u32,
        /// The tool.
        tool: String,
        /// The journaled input (sealed values shown sealed).
        recorded: Value,
        /// The input the new code gave (sealed values shown sealed).
        now: Value,
        /// The first place the two differ, as a JSON pointer.
        at: String,
    },
    /// The step called an imported tool (from an MCP server) whose input schema is not the
    /// one the journaled call was made under: the runner would hold the run
    /// (`tool.schema_changed`) rather than resume it against a different tool.
    SchemaChanged {
        /// The call's index in the step.
        seq: u32,
        /// The tool.
        tool: String,
        /// The fingerprint of the schema the call was journaled under.
        recorded: String,
        /// The fingerprint of the tool's schema now.
        now: String,
    },
    /// The new code called a tool where the step journaled no call.
    UnjournaledCall {
        /// The call's index in the step.
        seq: u32,
        /// The tool.
        tool: String,
        /// Its input (sealed values shown sealed).
        input: Value,
    },
    /// The new code asked the model where the step journaled no decision.
    UnjournaledAsk {
        /// The options offered, transitions then tools.
        options: Vec<String>,
    },
    /// A call journaled in the step that the new code did not make.
    MissingCall {
        /// Its index in the step.
        seq: u32,
        /// The tool.
        tool: String,
    },
    /// A call journaled as started that never finished: replay cannot answer it.
    UnfinishedCall {
        /// Its index in the step.
        seq: u32,
        /// The tool.
        tool: String,
    },
    /// The step ended otherwise: another target state, another kind of transition,
    /// another status, or another next state.
    Transition {
        /// What the recorded run did.
        recorded: Move,
        /// What the new code did.
        now: Move,
        /// When only the next state differs: the first place, as a JSON pointer.
        at: Option<String>,
    },
    /// The migration mapping, applied to the state before a recorded `migrated` transition,
    /// does not give the state that transition recorded.
    Migration {
        /// The recorded state after the migration (sealed values shown sealed).
        recorded: Value,
        /// What the mapping gives now.
        now: Value,
        /// The first place the two differ, as a JSON pointer.
        at: String,
    },
    /// The step could not be replayed at all (the runner returned an error).
    NotReplayable {
        /// Why.
        message: String,
    },
}

/// How a step ended: its transition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Move {
    /// The state entered (`None`: nothing was committed).
    pub to_state: Option<String>,
    /// The transition's kind.
    pub kind: Option<TransitionKind>,
    /// The run's status after it.
    pub status: Option<RunStatus>,
    /// The next state (sealed values shown sealed).
    pub state: Option<Value>,
    /// The run's error after it, when the new code committed one (the recorded history
    /// keeps no error per version).
    pub error: Option<String>,
}

impl fmt::Display for Move {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.to_state, self.kind, self.status) {
            (Some(to), Some(kind), Some(status)) => {
                write!(f, "`{to}` ({}, {})", kind.as_str(), status.as_str())?;
            }
            _ => f.write_str("no transition")?,
        }
        if let Some(e) = &self.error {
            write!(f, ": {e}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "version {} in `{}`: ", self.version, self.state)?;
        match &self.kind {
            DivergenceKind::OtherTool { seq, recorded, now } => {
                write!(
                    f,
                    "call #{seq} was `{recorded}`, the new code calls `{now}`"
                )
            }
            DivergenceKind::OtherArguments {
                seq,
                tool,
                recorded,
                now,
                at,
            } => write!(
                f,
                "call #{seq} of `{tool}` has other arguments at `{at}`: recorded {}, now {}",
                pointed(recorded, at),
                pointed(now, at)
            ),
            DivergenceKind::SchemaChanged {
                seq,
                tool,
                recorded,
                now,
            } => write!(
                f,
                "call #{seq} of `{tool}` was journaled under schema {}, the tool's schema is now {} \
                 (the runner holds such a run: tool.schema_changed)",
                short(recorded),
                short(now)
            ),
            DivergenceKind::UnjournaledCall { seq, tool, .. } => write!(
                f,
                "the new code calls `{tool}` as call #{seq}, where the step journaled none"
            ),
            DivergenceKind::UnjournaledAsk { .. } => {
                f.write_str("the new code asks the model where the step journaled no decision")
            }
            DivergenceKind::MissingCall { seq, tool } => write!(
                f,
                "call #{seq} of `{tool}` was journaled, the new code does not make it"
            ),
            DivergenceKind::UnfinishedCall { seq, tool } => write!(
                f,
                "call #{seq} of `{tool}` was journaled as started and never finished"
            ),
            DivergenceKind::Transition { recorded, now, at } => {
                write!(f, "recorded {recorded}, the new code {now}")?;
                match at {
                    Some(at) => write!(f, " (the next state differs at `{at}`)"),
                    None => Ok(()),
                }
            }
            DivergenceKind::Migration { at, .. } => write!(
                f,
                "the migration mapping gives another state than the recorded migration (at `{at}`)"
            ),
            DivergenceKind::NotReplayable { message } => {
                write!(f, "the step could not be replayed: {message}")
            }
        }
    }
}

/// The value at JSON pointer `at` in `v`, as compact JSON (`missing` when absent).
fn pointed(v: &Value, at: &str) -> String {
    v.pointer(at)
        .map_or_else(|| "missing".to_owned(), Value::to_string)
}

/// A recorded transition replay left alone, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The version the transition was made from.
    pub version: u64,
    /// Why it was not replayed.
    pub why: SkipReason,
}

/// Why a recorded transition was not replayed ([`Skipped`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum SkipReason {
    /// An operator's or the runner's own transition, no handler's: cancel, terminate,
    /// repair, a dropped signal.
    Operator {
        /// The transition's kind.
        kind: TransitionKind,
    },
    /// A step of the saga's compensation round: runner code, not a handler's.
    Compensation,
    /// A step woken by a signal or its wait's timeout: the consumed signal's payload is not
    /// in the recorded history.
    Signal,
    /// A step resumed after its children: the children's runs are not in the recorded
    /// history of the parent.
    Children,
    /// The run was quarantined or dead-lettered there: the runner's checks, no handler's.
    Held,
    /// A step of an older version whose mapped move is no edge of the current graph: the
    /// graph changed there, and the new code is meant to do something else.
    GraphChanged {
        /// The mapped state the step began in.
        from: String,
        /// The mapped state the recorded step entered.
        to: String,
    },
    /// A step of an older version the current agent declares no migration from (or whose
    /// mapping refuses the state).
    NotMapped {
        /// The older version.
        agent_version: u32,
        /// Why.
        message: String,
    },
    /// The state before or after the transition is not in the recorded history (pruned by
    /// retention, or an export without states).
    NoState,
}

/// What the replay of one recorded run found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReplay {
    /// The run.
    pub run_id: String,
    /// Its agent.
    pub agent: String,
    /// The versions whose step was replayed and matched, in order.
    pub replayed: Vec<u64>,
    /// The transitions left alone, and why.
    pub skipped: Vec<Skipped>,
    /// The first divergence; the run's later steps are not replayed after it.
    pub divergence: Option<Divergence>,
}

impl RunReplay {
    /// Whether the new code replayed every step it replayed as recorded.
    #[must_use]
    pub fn ok(&self) -> bool {
        self.divergence.is_none()
    }
}

/// What the replay of several recorded runs found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// One per run, in the order they were replayed.
    pub runs: Vec<RunReplay>,
}

impl ReplayReport {
    /// Whether no run diverged.
    #[must_use]
    pub fn ok(&self) -> bool {
        self.runs.iter().all(RunReplay::ok)
    }

    /// The runs that diverged.
    pub fn diverged(&self) -> impl Iterator<Item = &RunReplay> {
        self.runs.iter().filter(|r| !r.ok())
    }
}

/// The first place where `a` and `b` differ, as a JSON pointer (`""`: the roots), or
/// `None` when they are equal.
#[must_use]
pub fn first_difference(a: &Value, b: &Value) -> Option<String> {
    fn walk(left: &Value, right: &Value, path: &mut String) -> bool {
        match (left, right) {
            (Value::Object(lefts), Value::Object(rights)) => {
                let mut keys: Vec<&String> = lefts.keys().chain(rights.keys()).collect();
                keys.sort_unstable();
                keys.dedup();
                for key in keys {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                    match (lefts.get(key), rights.get(key)) {
                        (Some(l), Some(r)) if !walk(l, r, path) => path.truncate(len),
                        _ => return true,
                    }
                }
                false
            }
            (Value::Array(lefts), Value::Array(rights)) => {
                for (i, (l, r)) in lefts.iter().zip(rights).enumerate() {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&i.to_string());
                    if walk(l, r, path) {
                        return true;
                    }
                    path.truncate(len);
                }
                if lefts.len() != rights.len() {
                    path.push('/');
                    path.push_str(&lefts.len().min(rights.len()).to_string());
                    return true;
                }
                false
            }
            _ => left != right,
        }
    }
    let mut path = String::new();
    walk(a, b, &mut path).then_some(path)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::first_difference;

    #[test]
    fn the_first_difference_is_named_by_its_pointer() {
        assert_eq!(first_difference(&json!({"a": 1}), &json!({"a": 1})), None);
        assert_eq!(
            first_difference(&json!({"a": {"b": [1, 2]}}), &json!({"a": {"b": [1, 3]}})),
            Some("/a/b/1".to_owned())
        );
        assert_eq!(
            first_difference(&json!({"a": [1]}), &json!({"a": [1, 2]})),
            Some("/a/1".to_owned())
        );
        assert_eq!(
            first_difference(&json!({"a": 1}), &json!({"b": 1})),
            Some("/a".to_owned())
        );
        assert_eq!(first_difference(&json!(1), &json!(2)), Some(String::new()));
    }

    #[test]
    fn the_first_difference_escapes_keys_and_resolves_in_both_documents() {
        // `~` and `/` in a key, escaped as RFC 6901 says (`~` first).
        let (a, b) = (json!({"a/b": {"c~d": 1}}), json!({"a/b": {"c~d": 2}}));
        let at = first_difference(&a, &b).unwrap();
        assert_eq!(at, "/a~1b/c~0d");
        assert_eq!(
            (a.pointer(&at), b.pointer(&at)),
            (Some(&json!(1)), Some(&json!(2)))
        );
        // Deep in arrays of objects.
        let (a, b) = (
            json!({"x": {"y": [0, {"k": "v"}]}}),
            json!({"x": {"y": [0, {"k": "w"}]}}),
        );
        let at = first_difference(&a, &b).unwrap();
        assert_eq!(at, "/x/y/1/k");
        assert_eq!(
            (a.pointer(&at), b.pointer(&at)),
            (Some(&json!("v")), Some(&json!("w")))
        );
    }

    #[test]
    fn the_first_difference_is_the_first_key_in_order_and_types_count() {
        // Keys are walked sorted, whatever order they were written in.
        assert_eq!(
            first_difference(&json!({"z": 1, "b": 1}), &json!({"z": 2, "b": 2})),
            Some("/b".to_owned())
        );
        // Another type at a place is a difference there, not inside it.
        assert_eq!(
            first_difference(&json!({"a": [1]}), &json!({"a": {"0": 1}})),
            Some("/a".to_owned())
        );
        // `null` is not a missing key.
        assert_eq!(
            first_difference(&json!({"a": null}), &json!({})),
            Some("/a".to_owned())
        );
        // A shorter array: the first index one of them lacks.
        assert_eq!(
            first_difference(&json!([1, 2, 3]), &json!([1, 2])),
            Some("/2".to_owned())
        );
        // Equal documents, however their keys were written.
        assert_eq!(
            first_difference(&json!({"a": [], "b": {}}), &json!({"b": {}, "a": []})),
            None
        );
    }
}
