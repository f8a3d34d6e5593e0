//! The model and the code cannot drift: paths of the model, random ones and the shapes of the
//! mutations' counterexamples, are replayed as store calls against the real stores (memory,
//! SQLite, PostgreSQL), and after every action what the store says must be what the model
//! says: who may claim, which journal writes and commits are refused, which version and epoch
//! the run is at, whether it completed.
//!
//! A change to the protocol in the stores and not in the model (or the other way round) fails
//! here. PostgreSQL is used when `DATABASE_URL` is set (always under CI).

use std::sync::Arc;
use std::time::Duration;

use agent_core::MemoryStore;
use agent_core::store::{
    CallStatus, EntryKind, JournalEntry, Lease, NewRun, RateLimit, RunStatus, StepCommit, Store,
    StoreError, TransitionKind, WaitingFor, idempotency_key, input_hash, now_ms,
};
use agent_core::store::{
    FailureCode, MigrationCommit, MigrationNote, Millis, OperatorNote, RunFailure,
};
use model::{Action, Cancel, Mutation, Phase, Protocol, Signal, Worker, World};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use stateright::{Checker, Model};

/// Fail the replay with a message unless `$cond`.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// Long enough that no lease expires by the clock during a replay: expiry is the model's
/// `Expire`, done with `expire_leases_of`.
const TTL: Duration = Duration::from_mins(10);

/// The random paths' protocols: three steps, with a signal waited for at version 1, a
/// child started at version 0 and joined at 1, a failure at version 1 compensated at 2, a
/// run on an older agent version migrated by the first claim, a keyed signal sent up to
/// three times waited for at version 1, a timer waited for at version 1, or an operator's
/// cancel at any moment.
fn protocols() -> [Protocol; 8] {
    [
        Protocol::new(2, 3, 3).with_signal_at(1),
        Protocol::new(2, 3, 3).with_child_at(0),
        Protocol::new(2, 3, 3).with_saga_at(1),
        Protocol::new(2, 3, 3).with_migration(),
        Protocol::new(2, 3, 3).with_keyed_signal_at(1, 3),
        Protocol::new(2, 3, 3).with_timer_at(1),
        Protocol::new(2, 3, 3).with_cancel(),
        Protocol::new(2, 3, 3).with_capacity_at(1),
    ]
}

/// The keyed signal's dedup key (a message id, an `Idempotency-Key`).
const SIGNAL_KEY: &str = "message-1";

/// How far ahead of the commit into the timer's wait its due time is set, in the random
/// paths: `Tick` sleeps until then. The store's clock must not reach it before the model's
/// `Tick`; where it may have (a slow replay), the probe that the run is not claimable is
/// left out rather than claim the run.
const TIMER_MS: Millis = 100;

/// The least time before the due time at which the probe that a waiting run is not
/// claimable is still made.
const TIMER_MARGIN_MS: Millis = 50;

/// The name of the signal the run waits for.
const SIGNAL: &str = "approve";

/// The model whose asks the limited step takes turns for (`Protocol::capacity_at`).
const LIMITED_MODEL: &str = "model/limited";

fn worker(w: u8) -> String {
    format!("worker-{w}")
}

/// The journal entry a worker writes for version `at`: the decision (seq 0), the write
/// tool's result (seq 1), or a compensation (seq: its slot in the round).
fn entry(run_id: &str, at: u8, kind: EntryKind, slot: u8) -> JournalEntry {
    let version = u64::from(at);
    let (seq, name) = match kind {
        EntryKind::Decision => (0, "route"),
        EntryKind::Compensation => (u32::from(slot), "release_payment"),
        _ => (1, "charge_payment"),
    };
    let input = json!({ "version": version });
    JournalEntry {
        run_id: run_id.to_owned(),
        version,
        seq,
        kind,
        state: "Step".to_owned(),
        name: name.to_owned(),
        tool_kind: (kind != EntryKind::Decision).then_some(agent_core::tool::ToolKind::Write),
        input_hash: input_hash(&input),
        input,
        idempotency_key: (kind != EntryKind::Decision)
            .then(|| idempotency_key(run_id, version, seq)),
        status: CallStatus::Succeeded,
        output: Some(json!({ "ok": version })),
        error_class: None,
        error_code: None,
        error_message: None,
        attempts: 1,
        duration_ms: 1,
        started_at: now_ms(),
        finished_at: Some(now_ms()),
    }
}

/// The commit of the step from `at`: the last one completes the run, the one into the
/// signal's version makes it wait for it (and the one from it consumes `signal`), the one
/// of the step that started the child makes it wait for the child, the one into the
/// timer's version makes it wait for its timer (due at `wake_at`), and the cancel's round
/// ends it cancelled.
fn commit(
    protocol: &Protocol,
    world: &World,
    at: u8,
    signal: Option<i64>,
    wake_at: Option<Millis>,
) -> StepCommit {
    let cancelled = world.cancel == Cancel::Accepted(at);
    let last = cancelled || at + 1 >= protocol.last_version(world);
    let waiting_for = if protocol.signal_at == Some(at + 1) {
        Some(WaitingFor::signal(SIGNAL))
    } else if protocol.child_at == Some(at) {
        Some(WaitingFor::AllChildren)
    } else if protocol.timer_at == Some(at + 1) {
        Some(WaitingFor::Timer)
    } else {
        None
    };
    let waits = waiting_for.is_some();
    let failure = RunFailure {
        code: FailureCode::Handler,
        message: "the step failed after its call".to_owned(),
    };
    let (compensating, compensated) = (
        protocol.saga_at == Some(at),
        protocol.saga_at.is_some_and(|k| k + 1 == at),
    );
    StepCommit {
        expected_version: u64::from(at),
        from_state: "Step".to_owned(),
        to_state: if last { "Done" } else { "Step" }.to_owned(),
        state: json!({ "at": at + 1 }),
        kind: TransitionKind::Step,
        status: if cancelled {
            RunStatus::Cancelled
        } else if compensated {
            RunStatus::Compensated
        } else if last {
            RunStatus::Completed
        } else if compensating {
            RunStatus::Compensating
        } else if waits {
            RunStatus::Waiting
        } else {
            RunStatus::Running
        },
        waiting_for,
        wake_at: if protocol.timer_at == Some(at + 1) {
            wake_at
        } else {
            None
        },
        error: if cancelled {
            Some(RunFailure {
                code: FailureCode::Cancelled,
                message: "cancelled by an operator".to_owned(),
            })
        } else {
            (compensating || compensated).then_some(failure)
        },
        consumed_signal: if protocol.signal_at == Some(at) {
            signal
        } else {
            None
        },
        spend: None,
    }
}

/// The migration of the run of `agent` at version `at`, from agent version 1 to 2, the
/// interrupted step resuming from the journal of `at`.
fn migration(agent: &str, at: u8) -> MigrationCommit {
    MigrationCommit {
        expected_version: u64::from(at),
        from_agent_version: 1,
        to_agent_version: 2,
        fingerprint: "fp-2".to_owned(),
        from_state: "Step".to_owned(),
        to_state: "Step".to_owned(),
        state: json!({ "at": at, "migrated": true }),
        status: RunStatus::Running,
        waiting_for: None,
        wake_at: None,
        error: None,
        resume_base: Some(u64::from(at)),
        note: MigrationNote {
            agent: agent.to_owned(),
            from_version: 1,
            from_fingerprint: "fp".to_owned(),
            to_version: 2,
            to_fingerprint: "fp-2".to_owned(),
            resume_base: Some(u64::from(at)),
        },
    }
}

/// A worker's step: its epoch and version, from the model's state.
fn step_of(world: &World, w: u8) -> (u8, u8) {
    match world.workers[usize::from(w)] {
        Worker::Step { epoch, at, .. } | Worker::Unsure { epoch, at } => (epoch, at),
        Worker::Idle => unreachable!("the model enabled a step action of an idle worker"),
    }
}

/// One run driven by a path of the model.
struct Replay<'a> {
    store: &'a Arc<dyn Store>,
    protocol: &'a Protocol,
    run_id: String,
    /// The run's agent, its own: `claim_next` of it finds this run alone.
    agent: String,
    /// Each worker's lease, as its process holds it (gone after a crash).
    leases: Vec<Option<Lease>>,
    /// The worker that claimed last.
    holder: Option<u8>,
    /// The signal's id, once sent.
    signal: Option<i64>,
    /// How far ahead of the commit into the timer's wait its due time is set.
    timer_ms: Millis,
    /// The due time of the run's timer, once stored.
    wake_at: Option<Millis>,
}

impl Replay<'_> {
    /// The id of the child run of key `key` (the attempt, 0 unless derived from it).
    fn child_id(&self, key: u8) -> String {
        format!("{}-child-{key}", self.run_id)
    }

    /// The parent's children as stored: by id, whether each ended.
    async fn children(&self) -> Vec<(String, bool)> {
        let filter = agent_core::store::RunFilter {
            spawned_by: Some(self.run_id.clone()),
            ..Default::default()
        };
        let mut children: Vec<(String, bool)> = (self.store.list_runs(&filter).await)
            .expect("list_runs")
            .into_iter()
            .map(|r| (r.id, r.status.is_final()))
            .collect();
        children.sort();
        children
    }

    fn lease(&self, w: u8) -> &Lease {
        self.leases[usize::from(w)]
            .as_ref()
            .expect("a working worker holds its lease")
    }

    async fn journaled(&self, at: u8, kind: EntryKind) -> bool {
        let journal = self
            .store
            .journal(&self.run_id, Some(u64::from(at)))
            .await
            .expect("journal");
        journal.iter().any(|e| e.kind == kind)
    }

    /// A journal write; whether the store took it, refusals other than a lost lease failing
    /// the replay.
    async fn record(&self, w: u8, at: u8, kind: EntryKind, slot: u8) -> bool {
        let written = self
            .store
            .record_entry(self.lease(w), &entry(&self.run_id, at, kind, slot))
            .await;
        match written {
            Ok(()) => true,
            Err(StoreError::LeaseLost { .. }) => false,
            Err(e) => panic!("record_entry: {e}"),
        }
    }

    /// Do `action`, which takes the model from `before` to `after`, on the store; the store
    /// must answer as the model does.
    async fn apply(&mut self, action: Action, before: &World, after: &World) -> Result<(), String> {
        match action {
            Action::Claim(w) => {
                // As a worker finds runs: `claim_next` decides what is claimable.
                let claimed = self
                    .store
                    .claim_next(std::slice::from_ref(&self.agent), &worker(w), TTL, 1)
                    .await
                    .expect("claim_next")
                    .pop();
                let Some(claimed) = claimed else {
                    return Err("the model claims the run; claim_next found nothing".into());
                };
                ensure!(
                    claimed.lease.epoch == u64::from(after.epoch),
                    "claim's epoch: store {}, model {}",
                    claimed.lease.epoch,
                    after.epoch
                );
                self.leases[usize::from(w)] = Some(claimed.lease);
                self.holder = Some(w);
            }
            Action::Decide(w) => {
                let (_, at) = step_of(before, w);
                let slot = self.protocol.journal_slot(before, at);
                ensure!(
                    self.journaled(slot, EntryKind::Decision).await
                        == before.decisions[usize::from(slot)].is_some(),
                    "whether version {slot}'s decision is journaled"
                );
            }
            Action::CallTool(w) => {
                let (epoch, at) = step_of(before, w);
                let slot = self.protocol.journal_slot(before, at);
                ensure!(
                    self.journaled(slot, EntryKind::Tool).await
                        == before.results[usize::from(slot)],
                    "whether version {slot}'s tool result is journaled"
                );
                if self.protocol.child_at == Some(at) && !before.results[usize::from(at)] {
                    // The call is the child's creation, its id its key.
                    let key = if self
                        .protocol
                        .mutations
                        .contains(&Mutation::ChildIdFromAttempt)
                    {
                        epoch
                    } else {
                        0
                    };
                    let mut child = NewRun::new(
                        self.child_id(key),
                        format!("{}-child", self.agent),
                        "fp",
                        "Step",
                        json!({ "child": key }),
                    );
                    child.spawned_by = Some(agent_core::store::SpawnedBy {
                        run_id: self.run_id.clone(),
                        version: u64::from(at),
                    });
                    self.store
                        .create_run(child)
                        .await
                        .expect("create_run of the child");
                }
            }
            Action::Migrate(w) => {
                let (_, at) = step_of(before, w);
                let migration = migration(&self.agent, at);
                let outcome = self.store.migrate_run(self.lease(w), &migration).await;
                let applied = after.migrated_at.len() > before.migrated_at.len();
                match outcome {
                    Ok(record) => {
                        ensure!(applied, "the store migrated a run the model did not");
                        ensure!(
                            record.agent_version == 2,
                            "the migrated run's agent version"
                        );
                    }
                    Err(StoreError::LeaseLost { .. } | StoreError::Conflict { .. }) => {
                        ensure!(!applied, "the store refused a migration the model applied");
                    }
                    Err(e) => panic!("migrate_run: {e}"),
                }
            }
            Action::Compensate(w) => {
                let (_, at) = step_of(before, w);
                let journal = self
                    .store
                    .journal(&self.run_id, Some(u64::from(at)))
                    .await
                    .expect("journal");
                let journaled: Vec<bool> = (0..before.undo_journaled.len())
                    .map(|slot| {
                        journal
                            .iter()
                            .any(|e| e.kind == EntryKind::Compensation && e.seq as usize == slot)
                    })
                    .collect();
                ensure!(
                    journaled == before.undo_journaled,
                    "compensations journaled: store {journaled:?}, model {:?}",
                    before.undo_journaled
                );
            }
            Action::JournalCompensation(w) => {
                let Worker::Step {
                    at,
                    phase: Phase::Undone(slot),
                    ..
                } = before.workers[usize::from(w)]
                else {
                    unreachable!("the model journals a compensation it called");
                };
                let taken = self.record(w, at, EntryKind::Compensation, slot).await;
                let model_took = matches!(after.workers[usize::from(w)], Worker::Step { .. });
                ensure!(
                    taken == model_took,
                    "compensation {slot} journaled by worker {w}: store took it {taken}, model {model_took}"
                );
            }
            Action::ChildEnds(key) => {
                let child = self.child_id(key);
                let lease = self
                    .store
                    .claim_run(&child, "child-worker", TTL)
                    .await
                    .expect("claim_run of the child")
                    .expect("a running child is claimable")
                    .lease;
                let lone = Protocol::new(1, 1, 0);
                let mut end = commit(&lone, &lone.init_states().remove(0), 0, None, None);
                end.state = json!({ "child": key, "done": true });
                self.store
                    .commit_step(&lease, &end, &[])
                    .await
                    .expect("the child's final commit");
            }
            Action::JournalDecision(w) | Action::JournalResult(w) => {
                let (_, at) = step_of(before, w);
                let kind = if matches!(action, Action::JournalDecision(_)) {
                    EntryKind::Decision
                } else {
                    EntryKind::Tool
                };
                // After a migration, the step's journal is at its resume base.
                let taken = (self.record(w, self.protocol.journal_slot(before, at), kind, 0)).await;
                let model_took = matches!(after.workers[usize::from(w)], Worker::Step { .. });
                ensure!(
                    taken == model_took,
                    "journal write of version {at} by worker {w}: store took it {taken}, model {model_took}"
                );
            }
            Action::Commit(w) | Action::CommitAckLost(w) => {
                let (_, at) = step_of(before, w);
                let wake_at = now_ms() + self.timer_ms;
                let outcome = self
                    .store
                    .commit_step(
                        self.lease(w),
                        &commit(self.protocol, before, at, self.signal, Some(wake_at)),
                        &[],
                    )
                    .await;
                let applied = after.chain.len() > before.chain.len();
                // Refused for a cancel request, the worker that heard it writes the cancel.
                let for_cancel = matches!(
                    after.workers[usize::from(w)],
                    Worker::Step {
                        phase: Phase::CancelRequested,
                        ..
                    }
                );
                match outcome {
                    Ok(record) => {
                        ensure!(
                            applied,
                            "the store applied a commit of version {at} the model refused"
                        );
                        ensure!(record.version == u64::from(at) + 1, "commit's version");
                        if self.protocol.timer_at == Some(at + 1) {
                            ensure!(
                                record.wake_at == Some(wake_at),
                                "the timer's due time: store {:?}",
                                record.wake_at
                            );
                            self.wake_at = Some(wake_at);
                        }
                    }
                    Err(StoreError::LeaseLost { .. } | StoreError::Conflict { .. }) => {
                        ensure!(
                            !applied,
                            "the store refused a commit of version {at} the model applied"
                        );
                        ensure!(
                            !for_cancel,
                            "the store refused a commit of version {at} the model refused \
                             for a cancel request: {outcome:?}"
                        );
                    }
                    Err(StoreError::CancelRequested(_)) => {
                        ensure!(
                            !applied && (for_cancel || matches!(action, Action::CommitAckLost(_))),
                            "the store refused a commit of version {at} for a cancel request; \
                             the model applied it {applied}"
                        );
                    }
                    Err(e) => panic!("commit_step: {e}"),
                }
            }
            // The request never reached the store.
            Action::CommitRequestLost(_) => {}
            Action::Resolve(w) => {
                let (epoch, at) = step_of(before, w);
                let history = self.store.history(&self.run_id).await.expect("history");
                let landed = history
                    .iter()
                    .any(|t| t.version == u64::from(at) + 1 && t.epoch == u64::from(epoch));
                ensure!(
                    landed == before.chain.contains(&(at + 1, epoch)),
                    "whether the unknown commit of version {at} landed: store {landed}"
                );
            }
            Action::LeaseLost(w) => {
                let renewed = self.store.renew_lease(self.lease(w), TTL).await;
                ensure!(
                    matches!(renewed, Err(StoreError::LeaseLost { .. })),
                    "renew_lease of a run claimed since: {renewed:?}"
                );
                self.leases[usize::from(w)] = None;
            }
            Action::Crash(w) => self.leases[usize::from(w)] = None,
            Action::SendSignal => {
                let id = self
                    .store
                    .send_signal(&self.run_id, SIGNAL, &json!({ "approved": true }))
                    .await
                    .expect("send_signal");
                self.signal = Some(id);
            }
            Action::SendSignalOnce | Action::SignalAckLost => {
                let receipt = self
                    .store
                    .send_signal_once(
                        &self.run_id,
                        SIGNAL,
                        &json!({ "approved": true }),
                        SIGNAL_KEY,
                    )
                    .await
                    .expect("send_signal_once");
                let stored = after.stored > before.stored;
                // A lost receipt is not heard by the sender; the store's answer is the same.
                ensure!(
                    receipt.duplicate != stored,
                    "send {} of the keyed signal: store says duplicate {}, model stored {stored}",
                    after.sends,
                    receipt.duplicate
                );
                if receipt.duplicate {
                    ensure!(
                        Some(receipt.id) == self.signal,
                        "a duplicate's receipt names {}, not the signal stored first {:?}",
                        receipt.id,
                        self.signal
                    );
                } else if self.signal.is_none() {
                    self.signal = Some(receipt.id);
                }
            }
            // The store's clock reaches the due time: wait for it.
            Action::Tick => {
                let due = self.wake_at.expect("a timer due time was stored");
                let wait = due + 2 - now_ms();
                if let Ok(wait) = u64::try_from(wait) {
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                }
            }
            Action::CancelRun => {
                let note = OperatorNote {
                    by: "operator".to_owned(),
                    reason: "traced".to_owned(),
                };
                let outcome = self.store.cancel_run(&self.run_id, &note).await;
                match (outcome, after.cancel) {
                    (Err(StoreError::RunIsFinal { .. }), Cancel::Refused) => {}
                    (Ok(record), Cancel::Requested) => ensure!(
                        record.cancel_requested.is_some()
                            && record.version == u64::from(before.version),
                        "cancel of a leased run: store version {}, requested {}",
                        record.version,
                        record.cancel_requested.is_some()
                    ),
                    (Ok(record), Cancel::Accepted(v)) => ensure!(
                        record.version == u64::from(v) && record.status == RunStatus::Compensating,
                        "cancel of a run without a live lease: store version {} {:?}",
                        record.version,
                        record.status
                    ),
                    (outcome, cancel) => {
                        return Err(format!("cancel_run: store {outcome:?}, model {cancel:?}"));
                    }
                }
            }
            Action::AcceptCancel(w) => {
                let written = self.store.accept_cancel(self.lease(w)).await;
                let model_wrote = matches!(after.workers[usize::from(w)], Worker::Step { .. });
                match written {
                    Ok(record) => ensure!(
                        model_wrote && record.version == u64::from(after.version),
                        "accept_cancel written at {}, the model wrote it {model_wrote}",
                        record.version
                    ),
                    Err(StoreError::LeaseLost { .. }) => ensure!(
                        !model_wrote,
                        "the store refused accept_cancel the model wrote"
                    ),
                    Err(e) => panic!("accept_cancel: {e}"),
                }
            }
            Action::Suspend(w) => {
                self.store
                    .release_lease(self.lease(w))
                    .await
                    .expect("release_lease");
            }
            Action::TakeTurn(_) => {
                // A limit whose turns are free: the model decides whether the turn is far
                // (a hand-back follows) or not; the store's part is the take itself.
                let now = now_ms();
                let limit = RateLimit::asks(LIMITED_MODEL, 1_000_000, Duration::from_secs(1))
                    .expect("a valid limit");
                self.store
                    .define_limit(&limit, now)
                    .await
                    .expect("define_limit");
                self.store
                    .take_capacity(&limit.name(), 1, now)
                    .await
                    .expect("take_capacity");
            }
            Action::UseTurn(w) => {
                // The stored wait names the lease that handed the run back: the one before
                // this worker's.
                let run = (self.store.load_run(&self.run_id).await)
                    .expect("load_run")
                    .expect("the run exists");
                let by = run
                    .waiting_for
                    .as_ref()
                    .and_then(WaitingFor::handed_back_by);
                ensure!(
                    by.map(|e| e + 1) == Some(self.lease(w).epoch),
                    "the turn reserved for the claim of epoch {}: stored wait {:?}",
                    self.lease(w).epoch,
                    run.waiting_for
                );
            }
            Action::Defer(w) => {
                // Due at once: the model's hand-back makes the run claimable again.
                let lease = self.lease(w).clone();
                let why = WaitingFor::capacity(&format!("asks:{LIMITED_MODEL}"), lease.epoch);
                let handed = (self.store.defer_run(&lease, now_ms(), &why))
                    .await
                    .expect("defer_run");
                let model_handed = after.handed_back == Some(step_of(before, w).0)
                    && before.handed_back != after.handed_back;
                ensure!(
                    handed == model_handed,
                    "defer_run: store handed back {handed}, model {model_handed}"
                );
            }
            Action::Expire => {
                let holder = self.holder.expect("a lease to expire was claimed");
                let expired = self
                    .store
                    .expire_leases_of(&worker(holder))
                    .await
                    .expect("expire_leases_of");
                ensure!(expired >= 1, "no lease of the holder to expire");
            }
        }
        // A worker that the model stops lets its lease go (its process forgets it).
        for (w, state) in after.workers.iter().enumerate() {
            if *state == Worker::Idle {
                self.leases[w] = None;
            }
        }
        let run = self
            .store
            .load_run(&self.run_id)
            .await
            .expect("load_run")
            .expect("the run exists");
        ensure!(
            run.version == u64::from(after.version),
            "version after {action:?}: store {}, model {}",
            run.version,
            after.version
        );
        ensure!(
            run.epoch == u64::from(after.epoch),
            "epoch after {action:?}: store {}, model {}",
            run.epoch,
            after.epoch
        );
        let handed_back = run
            .waiting_for
            .as_ref()
            .and_then(WaitingFor::handed_back_by);
        ensure!(
            handed_back == after.handed_back.map(u64::from),
            "the hand-back's epoch after {action:?}: store {handed_back:?}, model {:?}",
            after.handed_back
        );
        ensure!(
            (run.status == RunStatus::Compensating) == (after.compensating && !after.done),
            "compensating after {action:?}: store {:?}, model {}",
            run.status,
            after.compensating
        );
        ensure!(
            run.agent_version == u32::from(after.agent_version),
            "agent version after {action:?}: store {}, model {}",
            run.agent_version,
            after.agent_version
        );
        ensure!(
            run.status.is_final() == after.done,
            "completion after {action:?}: store {:?}, model done {}",
            run.status,
            after.done
        );
        let cancelled = after.done && matches!(after.cancel, Cancel::Accepted(_));
        ensure!(
            (run.status == RunStatus::Cancelled) == cancelled,
            "cancelled after {action:?}: store {:?}, model {:?}",
            run.status,
            after.cancel
        );
        ensure!(
            run.cancel_requested.is_some() == (after.cancel == Cancel::Requested),
            "cancel requested after {action:?}: store {}, model {:?}",
            run.cancel_requested.is_some(),
            after.cancel
        );
        ensure!(
            (run.status == RunStatus::Waiting) == after.waiting,
            "waiting after {action:?}: store {:?}, model waiting {}",
            run.status,
            after.waiting
        );
        let pending = self
            .store
            .pending_signals(&self.run_id)
            .await
            .expect("pending_signals")
            .len();
        // Signals stored under the key past the first (without the dedup) stay pending.
        let model_pending = usize::from(after.signal == Signal::Pending)
            + usize::from(after.stored.saturating_sub(1));
        ensure!(
            pending == model_pending,
            "pending signals after {action:?}: store {pending}, model {model_pending} ({:?}, {} stored)",
            after.signal,
            after.stored
        );
        if self.protocol.signal_sends > 0 {
            let by_key = self
                .store
                .signal_by_key(&self.run_id, SIGNAL_KEY)
                .await
                .expect("signal_by_key");
            ensure!(
                by_key.is_some() == (after.stored > 0)
                    && (by_key.is_none() || by_key == self.signal),
                "signal_by_key after {action:?}: store {by_key:?}, model {} stored (first {:?})",
                after.stored,
                self.signal
            );
        }
        let model_children: Vec<(String, bool)> = (after.children.iter())
            .map(|(key, ended)| (self.child_id(*key), *ended))
            .collect();
        let children = self.children().await;
        ensure!(
            children == model_children,
            "children after {action:?}: store {children:?}, model {model_children:?}"
        );
        // Where the model says nobody may claim the run, `claim_next` must not find it; not
        // while the store's clock may have reached a timer the model's has not.
        let timer_ahead = after.due.is_some_and(|d| after.now < d);
        let clock_close = self
            .wake_at
            .is_some_and(|t| now_ms() + TIMER_MARGIN_MS >= t);
        if !self.protocol.claimable(after)
            && after.workers.contains(&Worker::Idle)
            && !(timer_ahead && clock_close)
        {
            let found = self
                .store
                .claim_next(std::slice::from_ref(&self.agent), "probe", TTL, 1)
                .await
                .expect("claim_next");
            ensure!(
                found.is_empty(),
                "claim_next found the run after {action:?}, which the model says is not claimable"
            );
        }
        Ok(())
    }
}

/// Replay `actions` on a new run of `store`, skipping those the unmutated protocol does not
/// enable where the path came (a counterexample's steps after the mutation took effect).
/// Returns how many were replayed, or where the store and the model first disagreed.
async fn replay(
    store: &Arc<dyn Store>,
    protocol: &Protocol,
    actions: &[Action],
) -> Result<usize, String> {
    replay_timed(store, protocol, actions, TIMER_MS).await
}

/// [`replay`], the timer due `timer_ms` after the commit into its wait.
async fn replay_timed(
    store: &Arc<dyn Store>,
    protocol: &Protocol,
    actions: &[Action],
    timer_ms: Millis,
) -> Result<usize, String> {
    let run_id = format!("trace-{}", uuid::Uuid::new_v4().simple());
    let agent = format!("Traced-{run_id}");
    let mut new = NewRun::new(&run_id, &agent, "fp", "Step", json!({ "at": 0 }));
    new.agent_version = if protocol.migrate { 1 } else { 2 };
    store.create_run(new).await.expect("create_run");
    let mut replay = Replay {
        store,
        protocol,
        run_id,
        agent,
        leases: vec![None; usize::from(protocol.workers)],
        holder: None,
        signal: None,
        timer_ms,
        wake_at: None,
    };
    let mut world = protocol.init_states().remove(0);
    let mut replayed = 0;
    for &action in actions {
        let mut enabled = Vec::new();
        protocol.actions(&world, &mut enabled);
        if !enabled.contains(&action) {
            continue;
        }
        let after = protocol
            .next_state(&world, action)
            .expect("an enabled action has a next state");
        replay
            .apply(action, &world, &after)
            .await
            .map_err(|e| format!("at action {replayed} ({action:?}): {e}"))?;
        world = after;
        replayed += 1;
    }
    Ok(replayed)
}

/// A random path of the model to its end, from `seed`.
fn random_path(protocol: &Protocol, seed: u64) -> Vec<Action> {
    random_path_with(protocol, seed, true)
}

/// A random path of the model to its end, from `seed`; with `ticks` false, the clock does
/// not move while anything else may happen.
fn random_path_with(protocol: &Protocol, seed: u64, ticks: bool) -> Vec<Action> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut world = protocol.init_states().remove(0);
    let mut path = Vec::new();
    loop {
        let mut enabled = Vec::new();
        protocol.actions(&world, &mut enabled);
        if enabled.is_empty() {
            return path;
        }
        // The client is slow to send: the run then often suspends while it waits.
        if enabled.len() > 1 && rng.random_ratio(7, 8) {
            enabled.retain(|a| *a != Action::SendSignal);
        }
        // So is the keyed signal's sender (its resends come late too), and the operator.
        if enabled.len() > 1 && rng.random_ratio(3, 4) {
            enabled.retain(|a| !matches!(a, Action::SendSignalOnce | Action::SignalAckLost));
        }
        if enabled.len() > 1 && rng.random_ratio(7, 8) {
            enabled.retain(|a| *a != Action::CancelRun);
        }
        // Time passes slowly: the holder often suspends the run before its timer is due.
        // Without ticks, the path ends where only the clock could move.
        if !ticks || (enabled.len() > 1 && rng.random_ratio(1, 2)) {
            enabled.retain(|a| *a != Action::Tick);
        }
        if enabled.is_empty() {
            return path;
        }
        let action = enabled[rng.random_range(0..enabled.len())];
        world = protocol.next_state(&world, action).expect("next state");
        path.push(action);
    }
}

/// The actions of each mutation's counterexample (the paths where the protocol is most
/// likely to have been got wrong), with the unmutated protocol they came from.
fn counterexample_paths() -> Vec<(Protocol, Vec<Action>)> {
    Mutation::BREAKING
        .iter()
        .map(|(property, mutations)| {
            let mut protocol = model::protocol_for(mutations);
            protocol.mutations.clear();
            (protocol, counterexample(property, mutations))
        })
        .collect()
}

/// The actions of the counterexample `mutations` give to `property`.
fn counterexample(property: &'static str, mutations: &[Mutation]) -> Vec<Action> {
    model::protocol_for(mutations)
        .checker()
        .spawn_bfs()
        .join()
        .discovery(property)
        .expect("a counterexample")
        .into_actions()
}

async fn replay_all(store: Arc<dyn Store>, random: u64) {
    let mut actions = 0;
    let mut faulted = 0;
    let mut ticks = 0;
    for (seed, protocol) in (0..random).zip(protocols().into_iter().cycle()) {
        let path = random_path(&protocol, seed);
        if path.iter().any(|a| {
            matches!(
                a,
                Action::Crash(_)
                    | Action::Expire
                    | Action::CommitAckLost(_)
                    | Action::CommitRequestLost(_)
            )
        }) {
            faulted += 1;
        }
        ticks += usize::from(path.contains(&Action::Tick));
        actions += replay(&store, &protocol, &path)
            .await
            .unwrap_or_else(|e| panic!("random path {seed}: {e}\npath: {path:?}"));
    }
    // Replayed under the protocol those paths came from, with its bounds.
    for (protocol, path) in counterexample_paths() {
        actions += replay(&store, &protocol, &path)
            .await
            .unwrap_or_else(|e| panic!("counterexample shape: {e}\npath: {path:?}"));
    }
    println!(
        "{random} random paths ({faulted} with faults, {ticks} waiting for a timer) and {} counterexample shapes: {actions} actions replayed",
        Mutation::BREAKING.len()
    );
    assert!(
        faulted * 2 > usize::try_from(random).unwrap_or(0),
        "too few random paths meet a fault"
    );
}

#[tokio::test]
async fn the_memory_store_follows_the_model() {
    replay_all(Arc::new(MemoryStore::new()), 700).await;
}

#[tokio::test]
async fn the_sqlite_store_follows_the_model() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = agent_sqlite::SqliteStore::open(dir.path().join("traces.db"))
        .await
        .expect("open SQLite");
    replay_all(Arc::new(store), 262).await;
}

#[tokio::test]
async fn the_postgres_store_follows_the_model() {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "DATABASE_URL is not set under CI: run the tests through ./scripts/test"
        );
        eprintln!(
            "*** SKIPPED: no DATABASE_URL; run ./scripts/test, which starts a PostgreSQL ***"
        );
        return;
    };
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let store = agent_pg::PgStore::connect(&url, &schema)
        .await
        .expect("connect to DATABASE_URL");
    store.migrate().await.expect("migrate");
    let store = Arc::new(store);
    replay_all(store.clone(), 262).await;
    store.drop_schema().await.expect("drop the test's schema");
}

#[test]
fn a_replay_meets_every_kind_of_action() {
    let mut seen = std::collections::BTreeSet::new();
    for (seed, protocol) in (0..700).zip(protocols().into_iter().cycle()) {
        for action in random_path(&protocol, seed) {
            seen.insert(
                format!("{action:?}")
                    .split('(')
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
    }
    // Claim, Decide, JournalDecision, CallTool, JournalResult, Commit, CommitRequestLost,
    // CommitAckLost, Resolve, LeaseLost, Crash, Expire, SendSignal, Suspend, ChildEnds,
    // Compensate, JournalCompensation, Migrate, SendSignalOnce, SignalAckLost, Tick,
    // CancelRun, AcceptCancel, TakeTurn, UseTurn, Defer.
    assert_eq!(
        seen.len(),
        26,
        "the random paths leave some action out: {seen:?}"
    );
}

/// The replay can fail: a model whose protocol differs from the stores' (here, each mutation
/// that changes what a store answers) is caught at the first action where they part.
#[tokio::test]
async fn a_model_that_differs_from_the_stores_is_caught() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    for (property, mutations) in Mutation::BREAKING {
        let mutated = model::protocol_for(mutations);
        let path = counterexample(property, mutations);
        match replay(&store, &mutated, &path).await {
            Err(e) => println!("{mutations:?}: {e}"),
            // Its shortest counterexample has the worker join at once, which no store call
            // refuses; where it differs from the stores is the parent being claimable while
            // its child runs, which random paths reach. So for a timer: its holder going
            // on before the due time is refused by no store call; a claim before it is.
            // The timer is due a minute after its commit, and the clock does not move
            // (`Tick` would wait for it): a claim the store allows is the mutation's.
            Ok(_) if matches!(mutations, [Mutation::JoinEarly | Mutation::ClaimBeforeDue]) => {
                let mut caught = None;
                for seed in 0..200 {
                    let path = random_path_with(&mutated, seed, false);
                    if let Err(e) = replay_timed(&store, &mutated, &path, 60_000).await {
                        caught = Some(e);
                        break;
                    }
                }
                let e = caught.expect("a mutation of when a run is claimable went unnoticed");
                println!("{mutations:?}: {e}");
            }
            // Mutations of what a worker does in its own memory (a key or a child's id, a
            // journal read, an outcome taken on trust) leave the stores' answers as they
            // are: the model's invariants catch those, not the replay.
            Ok(_) => assert!(
                matches!(
                    mutations,
                    [Mutation::KeyFromAttempt
                        | Mutation::ChildIdFromAttempt
                        | Mutation::UndoKeyFromAttempt
                        | Mutation::UndoForward
                        | Mutation::ResumeBaseIgnored
                        | Mutation::DecisionNotReplayed
                        | Mutation::AssumeCommitted]
                ),
                "{mutations:?} changes what the store answers, and the replay did not notice"
            ),
        }
    }
}
