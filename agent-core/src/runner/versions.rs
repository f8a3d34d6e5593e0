//! Runs of an older version of the agent: migrated at a step boundary, or compensated at
//! their own version. The rules, and why they are safe, are in `docs/versions.md`.

use super::{Runner, RunnerError, StepOutcome, children, renew_if_due, saga};
use crate::agent::{Agent, Handle};
use crate::graph::GraphDescription;
use crate::store::FailureCode;
use crate::store::WaitingFor;
use crate::store::{
    EntryKind, Lease, MigrationCommit, MigrationNote, RunFailure, RunRecord, RunStatus, Store,
    StoreError, versioned_agent,
};
use crate::versions::{MigrationOutcome, MigrationPlan, NotMigrated, OlderVersion};

/// The entries of [`RunStore::claim_next`](crate::store::RunStore::claim_next) for the runs a
/// runner of `A` can run: `A@VERSION` and `A@v` for every older version it migrates from.
#[must_use]
pub fn claim_entries<A: Agent>() -> Vec<String> {
    let mut entries: Vec<String> = A::older_versions()
        .iter()
        .map(|o| versioned_agent(A::NAME, o.version))
        .collect();
    entries.push(versioned_agent(A::NAME, A::VERSION));
    entries
}

/// The older version `version` of `A`, when `A` can run its runs.
pub(crate) fn older<A: Agent>(version: u32) -> Option<OlderVersion> {
    A::older_versions()
        .into_iter()
        .find(|o| o.version == version)
}

impl<A, H> Runner<A, H>
where
    A: Agent + Handle<H>,
    H: Send + Sync + 'static,
{
    /// One step of a claimed run on another version of the agent than this runner's:
    /// an operator's cancel is taken first; a compensating run is compensated at its own
    /// version, with that version's graph; a running or waiting run is migrated (one
    /// `migrated` commit; the step itself runs next, on this version). A version this
    /// runner cannot run is an error, and the run is left as it is.
    pub(super) async fn step_other_version(
        &self,
        lease: &mut Lease,
        record: RunRecord,
    ) -> Result<StepOutcome, RunnerError> {
        let Some(old) = older::<A>(record.agent_version) else {
            return Err(RunnerError::VersionNotRunnable {
                run_id: record.id.clone(),
                agent: A::NAME.to_owned(),
                version: record.agent_version,
                runs: claim_entries::<A>().join(", "),
            });
        };
        if record.cancel_requested.is_some() && record.status != RunStatus::Compensating {
            let record = self.inner.accept_cancel(lease, &record.id).await?;
            return Ok(StepOutcome::after_commit(record));
        }
        let Some(old_state) = old.graph.state(&record.state_name) else {
            let error = not_in_graph::<A>(&record, &old);
            let record = self
                .inner
                .commit_status(lease, &record, RunStatus::Quarantined, Some(error))
                .await?;
            return Ok(StepOutcome::Finished(record));
        };
        if record.status == RunStatus::Compensating {
            // Never migrated: the round runs at the version whose status is `compensating`
            // (`saga_of`), and moving the version would hide its remaining compensations.
            // This version's tool box holds every old hybrid with its compensation.
            return saga::compensate(&self.inner, lease, record, old_state).await;
        }
        let planned = plan::<A>(
            self.inner.store.as_ref(),
            &record,
            &old,
            &self.inner.fingerprint,
        )
        .await?;
        match planned {
            Ok(commit) => {
                renew_if_due(&self.inner, lease, &record.id, record.version).await?;
                match self.inner.store.migrate_run(lease, &commit).await {
                    Ok(migrated) => {
                        tracing::info!(
                            run_id = %migrated.id,
                            from = old.version,
                            to = A::VERSION,
                            state = %migrated.state_name,
                            "migrated the run"
                        );
                        Ok(StepOutcome::Committed(migrated))
                    }
                    Err(StoreError::LeaseLost { .. } | StoreError::Conflict { .. }) => {
                        Err(RunnerError::LeaseLost(record.id))
                    }
                    Err(StoreError::CancelRequested(_)) => {
                        let record = self.inner.accept_cancel(lease, &record.id).await?;
                        Ok(StepOutcome::after_commit(record))
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Err(error) => {
                let record = self
                    .inner
                    .commit_status(lease, &record, RunStatus::Quarantined, Some(error))
                    .await?;
                Ok(StepOutcome::Finished(record))
            }
        }
    }
}

/// What migrating `record` to `A`'s version would write, by the rules a worker of `A`
/// applies when it claims the run (`docs/versions.md`), read from the run and its journal
/// without writing anything: `agentctl migrate --dry-run` prints it, [`migrate_claimed`]
/// writes it.
///
/// For a run as it is stored, not necessarily claimable now: a run waiting for a signal is
/// planned as it would be when the signal comes (it keeps waiting when its new state waits
/// for the same signal); a parent waiting for its children is left
/// ([`NotMigrated::WaitingForChildren`]), since only a claim finds whether its join holds.
/// The checks come in the runner's order: a pending cancel is taken first, a compensating
/// run is compensated at its own version, a state its version's graph lacks quarantines the
/// run.
///
/// # Errors
/// The store's, reading the run's journal.
pub async fn plan_migration<A: Agent>(
    store: &dyn Store,
    record: &RunRecord,
) -> Result<MigrationPlan, StoreError> {
    if record.agent != A::NAME || record.agent_version == A::VERSION {
        return Ok(MigrationPlan::Leave(NotMigrated::Current));
    }
    if record.status.is_final() {
        return Ok(MigrationPlan::Leave(NotMigrated::Final));
    }
    let Some(old) = older::<A>(record.agent_version) else {
        return Ok(MigrationPlan::Leave(NotMigrated::NoChain));
    };
    if record.cancel_requested.is_some() && record.status != RunStatus::Compensating {
        return Ok(MigrationPlan::Leave(NotMigrated::CancelRequested));
    }
    if record.status == RunStatus::Compensating {
        return Ok(MigrationPlan::Leave(NotMigrated::Compensating));
    }
    if children::waits_for_children(record) {
        return Ok(MigrationPlan::Leave(NotMigrated::WaitingForChildren));
    }
    if old.graph.state(&record.state_name).is_none() {
        return Ok(MigrationPlan::Quarantine(not_in_graph::<A>(record, &old)));
    }
    let fingerprint = A::graph().fingerprint();
    Ok(match plan::<A>(store, record, &old, &fingerprint).await? {
        Ok(commit) => MigrationPlan::Migrate(Box::new(commit)),
        Err(failure) => MigrationPlan::Quarantine(failure),
    })
}

/// Migrate the run `lease` holds (claimed as `record`) to `A`'s version now, with one
/// [`RunStore::migrate_run`](crate::store::RunStore::migrate_run) under the lease, as [`plan_migration`] plans it; nothing else
/// of the run runs, and the lease stays held (release it). A run the plan leaves or would
/// quarantine is not written: the caller hands it back (a worker quarantines it at its
/// next step; an operator's tool reports it). `agentctl migrate` applies runs with it.
///
/// # Errors
/// The store's: [`StoreError::LeaseLost`] or [`StoreError::Conflict`] when another worker
/// took or migrated the run first, [`StoreError::CancelRequested`] when a cancel came in
/// between; nothing is written then.
pub async fn migrate_claimed<A: Agent>(
    store: &dyn Store,
    lease: &Lease,
    record: &RunRecord,
) -> Result<MigrationOutcome, StoreError> {
    Ok(match plan_migration::<A>(store, record).await? {
        MigrationPlan::Migrate(commit) => {
            let migrated = store.migrate_run(lease, &commit).await?;
            tracing::info!(
                run_id = %migrated.id,
                from = commit.from_agent_version,
                to = A::VERSION,
                state = %migrated.state_name,
                "migrated the run"
            );
            MigrationOutcome::Migrated(Box::new(migrated))
        }
        MigrationPlan::Quarantine(failure) => MigrationOutcome::Refused(failure),
        MigrationPlan::Leave(why) => MigrationOutcome::Left(why),
    })
}

/// The failure of a run in a state its version's graph does not have.
fn not_in_graph<A: Agent>(record: &RunRecord, old: &OlderVersion) -> RunFailure {
    RunFailure {
        code: FailureCode::GraphIncompatible,
        message: format!(
            "the run is in state `{}`, which version {} of `{}` does not have",
            record.state_name,
            old.version,
            A::NAME
        ),
    }
}

/// The migration of `record` (on version `old`) to `A`'s version, whose graph has
/// `fingerprint`, or why the run is quarantined instead: the one planning of a
/// migration, for the runner and for [`plan_migration`].
async fn plan<A: Agent>(
    store: &dyn Store,
    record: &RunRecord,
    old: &OlderVersion,
    fingerprint: &str,
) -> Result<Result<MigrationCommit, RunFailure>, StoreError> {
    let graph: &GraphDescription = A::graph();
    let failed = |message: String| {
        Ok(Err(RunFailure {
            code: FailureCode::MigrationFailed,
            message,
        }))
    };
    // A migration maps the state as its old type reads it; sealed values would not read.
    if crate::secrets::holds_sealed(&record.state) {
        return failed(format!(
            "the state of `{}` holds sealed values, and migrating a sealed state is not \
             supported yet (docs/security.md)",
            record.state_name
        ));
    }
    let mapped = match A::migrate(old.version, record.state.clone()) {
        Some(Ok(mapped)) => mapped,
        Some(Err(e)) => return failed(e.to_string()),
        None => {
            return failed(format!(
                "`{}` version {} declares no migration from version {}",
                A::NAME,
                A::VERSION,
                old.version
            ));
        }
    };
    let state = match A::deserialize(&mapped) {
        Ok(state) => state,
        Err(e) => {
            return failed(format!(
                "the migrated state of `{}` does not read as version {}: {e}",
                record.state_name,
                A::VERSION
            ));
        }
    };
    let to = state.state_name();
    let Some(target) = graph.state(to) else {
        return failed(format!("version {} has no state `{to}`", A::VERSION));
    };
    let old_wait = old
        .graph
        .state(&record.state_name)
        .and_then(|s| s.wait.as_ref())
        .map(|w| w.signal.clone());
    let waits_for_children = children::waits_for_children(record);
    if let Some(signal) = old_wait.filter(|_| !waits_for_children) {
        let kept = target.wait.as_ref().is_some_and(|w| w.signal == signal);
        if !kept && !old.skipped_signals.contains(&signal.as_str()) {
            return Ok(Err(RunFailure {
                code: FailureCode::MigrationSkipsSignal,
                message: format!(
                    "the run waits for signal `{signal}` in state `{}` of version {}, \
                     which migrates to state `{to}` of version {}, which does not wait \
                     for it, and no migration of the chain declares \
                     `skip_signal({signal})`",
                    record.state_name,
                    old.version,
                    A::VERSION
                ),
            }));
        }
    }
    // The base whose journal the first step on the new version reads: a parent's step
    // that waited for its children began one version before its wait (its children's
    // ids derive from it); any other step began at the run's version, and its calls
    // journaled there belong to a step interrupted under the old version.
    let resume_base = if waits_for_children {
        Some(record.version.saturating_sub(1))
    } else {
        let journal = store.journal(&record.id, Some(record.version)).await?;
        journal
            .iter()
            .any(|e| e.kind != EntryKind::Compensation)
            .then_some(record.version)
    };
    // A parent waiting for its children is claimed once its join holds: it moves on
    // as running (a wait stored at the migration's version would wait for children of
    // the wrong step). A run waiting for a signal keeps waiting when the new state
    // waits too; its pending signals stay where they are, with the run.
    let (status, waiting_for, wake_at) = match &target.wait {
        Some(w) if record.status == RunStatus::Waiting && !waits_for_children => {
            let same = record
                .waiting_for
                .as_ref()
                .and_then(WaitingFor::signal_name)
                == Some(w.signal.as_str());
            let wake_at = if same {
                record.wake_at
            } else {
                super::step::due_at(target, &state)
            };
            (
                RunStatus::Waiting,
                Some(WaitingFor::signal(&w.signal)),
                wake_at,
            )
        }
        // A run waiting for its timer keeps its due time when the new state has a timer
        // too (a state without one runs at once; one whose run was not waiting starts its
        // timer at its first step).
        None if target.timer.is_some()
            && record.status == RunStatus::Waiting
            && record.waiting_for == Some(WaitingFor::Timer) =>
        {
            (RunStatus::Waiting, Some(WaitingFor::Timer), record.wake_at)
        }
        _ => (RunStatus::Running, None, None),
    };
    Ok(Ok(MigrationCommit {
        expected_version: record.version,
        from_agent_version: old.version,
        to_agent_version: A::VERSION,
        fingerprint: fingerprint.to_owned(),
        from_state: record.state_name.clone(),
        to_state: to.to_owned(),
        state: mapped,
        status,
        waiting_for,
        wake_at,
        error: record.error.clone(),
        resume_base,
        note: MigrationNote {
            agent: A::NAME.to_owned(),
            from_version: old.version,
            from_fingerprint: record.fingerprint.clone(),
            to_version: A::VERSION,
            to_fingerprint: fingerprint.to_owned(),
            resume_base,
        },
    }))
}
