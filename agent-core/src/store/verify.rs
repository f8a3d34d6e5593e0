//! Tamper evidence: recompute a run's hash chain and find the first row that does not fit.
//!
//! Every transition record carries `hash = transition_hash(prev_hash, record.link(state))`:
//! the run, version, from and to states, kind, status, writer's epoch and the state at that
//! version, with `prev_hash = ""` for version 0. Recomputing the chain from the stored rows
//! detects a modified row (its content no longer hashes to its stored hash, or its stored
//! hash no longer chains), a deleted row (a gap in the versions, or a history shorter than
//! the run), a duplicated one, and a reordered one (a row whose content hashes correctly, but
//! only at another position). Rows written before kind, status and epoch were chained carry
//! the legacy hash; they are accepted and counted (`legacy`).

use std::collections::BTreeMap;

use super::{
    ChainLink, HistoryStore, RunRecord, StateAtVersion, StoreError, TransitionRecord,
    legacy_transition_hash, transition_hash,
};
use serde::Serialize;

/// What is wrong with a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// The row's content or hash changed.
    Modified,
    /// A row (or the state of a version) is missing.
    Deleted,
    /// A row sits at another row's position.
    Reordered,
    /// Two rows claim the same version.
    Duplicated,
}

impl ProblemKind {
    /// The kind's one word, as the JSON of a [`VerifyReport`] spells it: what `agentctl
    /// verify` and the run inspector print after a broken version.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Modified => "modified",
            Self::Deleted => "deleted",
            Self::Reordered => "reordered",
            Self::Duplicated => "duplicated",
        }
    }
}

/// The first problem found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The version where the chain breaks.
    pub version: u64,
    /// What kind of tampering it looks like.
    pub kind: ProblemKind,
    /// What was found, for a person.
    pub message: String,
}

/// The outcome of `verify`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// The run.
    pub run: String,
    /// Whether the whole chain checks out.
    pub ok: bool,
    /// Versions whose hash was recomputed and matched.
    pub verified: u64,
    /// Of those, versions carrying the legacy hash, written by builds that did not chain
    /// kind, status and epoch: a change to those three fields of these rows goes unseen.
    pub legacy: u64,
    /// The first stored version (above 0 when retention pruned older ones).
    pub first_version: Option<u64>,
    /// The last stored version.
    pub last_version: Option<u64>,
    /// The run's current version.
    pub run_version: u64,
    /// When the history starts above version 0: its first row is taken as the anchor.
    pub anchored_at: Option<u64>,
    /// The stored hash of the last version: the head of the chain. Recorded elsewhere, it
    /// also detects a chain rewritten from scratch.
    pub head_hash: Option<String>,
    /// The first problem, if any.
    pub problem: Option<Problem>,
}

/// Rows at most this many are searched for a reordering (the search is quadratic).
const REORDER_SEARCH_LIMIT: usize = 400;

/// Check `history` (as the store returned it) against the states of each version and the
/// run row.
#[must_use]
pub fn verify_chain(
    run: &RunRecord,
    history: &[TransitionRecord],
    states: &BTreeMap<u64, StateAtVersion>,
) -> VerifyReport {
    let mut report = VerifyReport {
        run: run.id.clone(),
        ok: false,
        verified: 0,
        legacy: 0,
        first_version: history.first().map(|t| t.version),
        last_version: history.last().map(|t| t.version),
        run_version: run.version,
        anchored_at: None,
        head_hash: history.last().map(|t| t.hash.clone()),
        problem: None,
    };
    let problem = check(run, history, states, &mut report);
    report.ok = problem.is_none();
    report.problem = problem;
    report
}

/// Read a run's history and the state at each of its versions from `store`, and check the
/// chain. A state that no longer replays (a deleted or moved delta) is reported as missing,
/// not as an error.
///
/// # Errors
/// When the store cannot be read.
pub async fn verify_run(
    store: &dyn HistoryStore,
    run: &RunRecord,
) -> Result<VerifyReport, StoreError> {
    let history = store.history(&run.id).await?;
    let mut states = BTreeMap::new();
    for t in &history {
        if states.contains_key(&t.version) {
            continue;
        }
        if let Ok(Some(s)) = store.state_at(&run.id, t.version).await {
            states.insert(t.version, s);
        }
    }
    Ok(verify_chain(run, &history, &states))
}

fn check(
    run: &RunRecord,
    history: &[TransitionRecord],
    states: &BTreeMap<u64, StateAtVersion>,
    report: &mut VerifyReport,
) -> Option<Problem> {
    let Some(first) = history.first() else {
        return Some(Problem {
            version: 0,
            kind: ProblemKind::Deleted,
            message: format!(
                "no transition rows stored, but the run is at version {}",
                run.version
            ),
        });
    };
    let mut prev: Option<&TransitionRecord> = None;
    for (index, row) in history.iter().enumerate() {
        if let Some(p) = prev {
            let expected = p.version + 1;
            if row.version == p.version {
                return Some(Problem {
                    version: row.version,
                    kind: ProblemKind::Duplicated,
                    message: format!("two rows claim version {}", row.version),
                });
            }
            if row.version < p.version {
                return Some(Problem {
                    version: row.version,
                    kind: ProblemKind::Reordered,
                    message: format!(
                        "version {} is stored after version {}",
                        row.version, p.version
                    ),
                });
            }
            if row.version > expected {
                if history[index..].iter().any(|t| t.version == expected) {
                    return Some(Problem {
                        version: expected,
                        kind: ProblemKind::Reordered,
                        message: format!(
                            "version {expected} is stored after version {}",
                            row.version
                        ),
                    });
                }
                let missing = if row.version - 1 == expected {
                    format!("version {expected} is missing")
                } else {
                    format!("versions {expected}..={} are missing", row.version - 1)
                };
                return Some(Problem {
                    version: expected,
                    kind: ProblemKind::Deleted,
                    message: format!("{missing} (the chain jumps to {})", row.version),
                });
            }
        }
        if row.run_id != run.id {
            return Some(Problem {
                version: row.version,
                kind: ProblemKind::Modified,
                message: format!(
                    "version {} belongs to run `{}`, not `{}`",
                    row.version, row.run_id, run.id
                ),
            });
        }
        let prev_hash = match prev {
            Some(p) => Some(p.hash.as_str()),
            None if row.version == 0 => Some(""),
            // Retention pruned the older versions: the first kept row is the anchor.
            None => None,
        };
        let Some(state) = states.get(&row.version) else {
            return Some(classify(
                history,
                states,
                index,
                Problem {
                    version: row.version,
                    kind: ProblemKind::Deleted,
                    message: format!(
                        "the state of version {} is missing or unreadable although its \
                         transition is stored",
                        row.version
                    ),
                },
            ));
        };
        if state.state_name != row.to_state {
            return Some(classify(
                history,
                states,
                index,
                Problem {
                    version: row.version,
                    kind: ProblemKind::Modified,
                    message: format!(
                        "version {} enters `{}` but its stored state is `{}`",
                        row.version, row.to_state, state.state_name
                    ),
                },
            ));
        }
        let Some(prev_hash) = prev_hash else {
            report.anchored_at = Some(row.version);
            prev = Some(row);
            continue;
        };
        let link = row.link(&state.state);
        let recomputed = transition_hash(prev_hash, &link);
        if recomputed != row.hash {
            if legacy_transition_hash(prev_hash, &link) == row.hash {
                report.legacy += 1;
                report.verified += 1;
                prev = Some(row);
                continue;
            }
            let problem = Problem {
                version: row.version,
                kind: ProblemKind::Modified,
                message: format!(
                    "version {} (`{}` -> `{}`) does not match its hash: stored {}, recomputed {} \
                     (its from/to states, kind, status, epoch, state data or hash were changed)",
                    row.version,
                    row.from_state,
                    row.to_state,
                    short(&row.hash),
                    short(&recomputed)
                ),
            };
            return Some(classify(history, states, index, problem));
        }
        report.verified += 1;
        prev = Some(row);
    }
    let last = history.last().unwrap_or(first);
    if last.version < run.version {
        let missing = if last.version + 1 == run.version {
            format!("version {} is missing", run.version)
        } else {
            format!(
                "versions {}..={} are missing",
                last.version + 1,
                run.version
            )
        };
        return Some(Problem {
            version: last.version + 1,
            kind: ProblemKind::Deleted,
            message: format!(
                "{missing}: the history ends at {} but the run is at version {}",
                last.version, run.version
            ),
        });
    }
    if last.version > run.version {
        return Some(Problem {
            version: run.version,
            kind: ProblemKind::Modified,
            message: format!(
                "the run row says version {} but the history goes on to {}",
                run.version, last.version
            ),
        });
    }
    if last.to_state != run.state_name
        || states
            .get(&run.version)
            .is_some_and(|s| s.state != run.state)
    {
        return Some(Problem {
            version: run.version,
            kind: ProblemKind::Modified,
            message: format!(
                "the run row's current state differs from the state committed at version {}",
                run.version
            ),
        });
    }
    None
}

/// The row at `index` does not fit where it is stored: reordered if it fits another
/// position of the chain (its content hashes correctly there, its states connect after
/// swapping it with another row, or its commit time is out of order), else `fallback`.
fn classify(
    history: &[TransitionRecord],
    states: &BTreeMap<u64, StateAtVersion>,
    index: usize,
    fallback: Problem,
) -> Problem {
    let row = &history[index];
    let reordered = |other: u64| Problem {
        version: row.version,
        kind: ProblemKind::Reordered,
        message: format!(
            "the row stored as version {} (`{}` -> `{}`) belongs at version {other}",
            row.version, row.from_state, row.to_state
        ),
    };
    if history.len() <= REORDER_SEARCH_LIMIT {
        let mut prevs: Vec<&str> = history.iter().map(|t| t.hash.as_str()).collect();
        prevs.push("");
        for other in history.iter().filter(|t| t.version != row.version) {
            let candidates = [states.get(&other.version), states.get(&row.version)];
            for state in candidates.into_iter().flatten() {
                let link = ChainLink {
                    version: other.version,
                    ..row.link(&state.state)
                };
                let fits = prevs.iter().any(|p| {
                    transition_hash(p, &link) == row.hash
                        || legacy_transition_hash(p, &link) == row.hash
                });
                if fits {
                    return reordered(other.version);
                }
            }
        }
    }
    // The states must connect: swapping this row with a later one makes them connect again.
    if index > 0 {
        let prev = &history[index - 1];
        if row.from_state != prev.to_state {
            let next_from = history.get(index + 1).map(|t| t.from_state.as_str());
            for other in &history[index + 1..] {
                let connects = other.from_state == prev.to_state
                    && (next_from.is_none()
                        || other.to_state == row.from_state
                        || Some(other.to_state.as_str()) == next_from);
                if connects {
                    return reordered(other.version);
                }
            }
        }
    }
    // Versions are committed in order, so their times are too (within clock skew).
    if let Some(next) = history.get(index + 1)
        && next.created_at < row.created_at
    {
        return reordered(next.version);
    }
    fallback
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{RunStatus, TransitionKind};
    use serde_json::json;

    type Chain = (
        RunRecord,
        Vec<TransitionRecord>,
        BTreeMap<u64, StateAtVersion>,
    );

    fn chain(n: u64) -> Chain {
        let names = ["A", "B", "C", "D", "E", "F"];
        let mut history = Vec::new();
        let mut states = BTreeMap::new();
        let mut prev = String::new();
        for v in 0..n {
            let at = |v: u64| names[usize::try_from(v).expect("a test-sized chain") % names.len()];
            let from = at(v.saturating_sub(1));
            let to = at(v);
            let from = if v == 0 { to } else { from };
            let state = json!({ "step": v, "name": to });
            let mut record = TransitionRecord {
                run_id: "r".into(),
                version: v,
                from_state: from.into(),
                to_state: to.into(),
                kind: if v == 0 {
                    TransitionKind::Start
                } else {
                    TransitionKind::Step
                },
                status: RunStatus::Running,
                epoch: 1,
                created_at: 0,
                hash: String::new(),
                note: None,
            };
            record.hash = transition_hash(&prev, &record.link(&state));
            let hash = record.hash.clone();
            history.push(record);
            states.insert(
                v,
                StateAtVersion {
                    version: v,
                    state_name: to.into(),
                    state,
                },
            );
            prev = hash;
        }
        let last = history.last().unwrap();
        let run = RunRecord {
            id: "r".into(),
            agent: "X".into(),
            fingerprint: String::new(),
            state_name: last.to_state.clone(),
            state: states[&last.version].state.clone(),
            version: last.version,
            status: RunStatus::Running,
            waiting_for: None,
            wake_at: None,
            error: None,
            epoch: 1,
            lease_owner: None,
            lease_expires_at: None,
            claims_without_progress: 0,
            parent: None,
            spawned_by: None,
            created_at: 0,
            updated_at: 0,
            labels: crate::store::Labels::new(),
            cancel_requested: None,
            agent_version: 1,
            migrated_at_version: None,
            resume_base: None,
            spend: crate::store::Spend::default(),
            budget: None,
        };
        (run, history, states)
    }

    #[test]
    fn clean_chain_verifies() {
        let (run, h, s) = chain(5);
        let r = verify_chain(&run, &h, &s);
        assert!(r.ok, "{r:?}");
        assert_eq!(r.verified, 5);
    }

    #[test]
    fn modified_state_is_found() {
        let (run, h, mut s) = chain(5);
        s.get_mut(&2).unwrap().state = json!({ "step": 2, "name": "C", "evil": true });
        let p = verify_chain(&run, &h, &s).problem.unwrap();
        assert_eq!((p.version, p.kind), (2, ProblemKind::Modified));
    }

    #[test]
    fn modified_kind_status_and_epoch_are_found() {
        let edits: [fn(&mut TransitionRecord); 3] = [
            |t| t.kind = TransitionKind::Error,
            |t| t.status = RunStatus::Completed,
            |t| t.epoch = 7,
        ];
        for edit in edits {
            let (run, mut h, s) = chain(5);
            edit(&mut h[2]);
            let p = verify_chain(&run, &h, &s).problem.unwrap();
            assert_eq!((p.version, p.kind), (2, ProblemKind::Modified), "{p:?}");
        }
    }

    /// A chain as builds before kind, status and epoch were chained wrote it.
    fn legacy_chain(n: u64) -> Chain {
        let (run, mut h, s) = chain(n);
        let mut prev = String::new();
        for t in &mut h {
            t.hash = legacy_transition_hash(&prev, &t.link(&s[&t.version].state));
            prev.clone_from(&t.hash);
        }
        (run, h, s)
    }

    #[test]
    fn legacy_rows_verify_and_are_counted() {
        let (run, h, s) = legacy_chain(5);
        let r = verify_chain(&run, &h, &s);
        assert!(r.ok, "{r:?}");
        assert_eq!((r.verified, r.legacy), (5, 5));
        let (run, h, s) = chain(5);
        assert_eq!(verify_chain(&run, &h, &s).legacy, 0);
    }

    #[test]
    fn legacy_rows_still_detect_what_they_chained() {
        let (run, mut h, s) = legacy_chain(5);
        h[2].to_state = "Z".into();
        let p = verify_chain(&run, &h, &s).problem.unwrap();
        assert_eq!((p.version, p.kind), (2, ProblemKind::Modified), "{p:?}");
        let (run, h, mut s) = legacy_chain(5);
        s.get_mut(&3).unwrap().state = json!({ "step": 3, "name": "D", "evil": true });
        let p = verify_chain(&run, &h, &s).problem.unwrap();
        assert_eq!((p.version, p.kind), (3, ProblemKind::Modified), "{p:?}");
    }

    #[test]
    fn modified_hash_is_found() {
        let (run, mut h, s) = chain(5);
        h[3].hash = "00".repeat(32);
        let p = verify_chain(&run, &h, &s).problem.unwrap();
        assert_eq!((p.version, p.kind), (3, ProblemKind::Modified));
    }

    #[test]
    fn deleted_rows_are_found() {
        let (run, mut h, s) = chain(5);
        h.remove(2);
        let p = verify_chain(&run, &h, &s).problem.unwrap();
        assert_eq!((p.version, p.kind), (2, ProblemKind::Deleted));
        let (run, mut h, s) = chain(5);
        h.pop();
        let p = verify_chain(&run, &h, &s).problem.unwrap();
        assert_eq!((p.version, p.kind), (4, ProblemKind::Deleted));
    }

    #[test]
    fn reordered_rows_are_found() {
        let (run, mut h, s) = chain(5);
        // Swap the contents of versions 1 and 2, keeping the version numbers in place.
        let (one, two) = (h[1].clone(), h[2].clone());
        h[1] = TransitionRecord { version: 1, ..two };
        h[2] = TransitionRecord { version: 2, ..one };
        let p = verify_chain(&run, &h, &s).problem.unwrap();
        assert_eq!((p.version, p.kind), (1, ProblemKind::Reordered), "{p:?}");
        let (run, mut h, s) = chain(5);
        h.swap(1, 2);
        let p = verify_chain(&run, &h, &s).problem.unwrap();
        assert_eq!(p.kind, ProblemKind::Reordered, "{p:?}");
    }

    #[test]
    fn rows_swapped_with_their_states_are_reordered() {
        // Swapping the version numbers of two rows moves their (delta) states with them, so
        // neither state replays: the rows' states no longer connect.
        let (run, mut h, mut s) = chain(5);
        let (one, two) = (h[1].clone(), h[2].clone());
        h[1] = TransitionRecord { version: 1, ..two };
        h[2] = TransitionRecord { version: 2, ..one };
        s.remove(&1);
        s.remove(&2);
        let p = verify_chain(&run, &h, &s).problem.unwrap();
        assert_eq!((p.version, p.kind), (1, ProblemKind::Reordered), "{p:?}");
    }

    #[test]
    fn pruned_prefix_is_anchored() {
        let (run, h, mut s) = chain(6);
        let h = h[3..].to_vec();
        s.retain(|v, _| *v >= 3);
        let r = verify_chain(&run, &h, &s);
        assert!(r.ok, "{r:?}");
        assert_eq!(r.anchored_at, Some(3));
        assert_eq!(r.verified, 2);
    }

    #[test]
    fn duplicated_version_is_found() {
        let (run, mut h, s) = chain(5);
        let copy = h[2].clone();
        h.insert(3, copy);
        let p = verify_chain(&run, &h, &s).problem.unwrap();
        assert_eq!((p.version, p.kind), (2, ProblemKind::Duplicated), "{p:?}");
    }

    #[test]
    fn tampered_run_row_is_found() {
        let (mut run, h, s) = chain(4);
        run.state = json!({ "step": 99 });
        let p = verify_chain(&run, &h, &s).problem.unwrap();
        assert_eq!((p.version, p.kind), (3, ProblemKind::Modified));
    }
}
