//! Replay of recorded runs against new code: the gate before a deploy.
//!
//! A [`Replay`] takes recorded runs (exported with their states,
//! [`export_run_with_states`], `agentctl export --states`, or read from a store) and drives
//! the current handlers against each run's journal, step by step, with the model and the
//! tools stubbed by what was journaled: nothing is executed and no model is asked. It
//! reports, per run, the first divergence ([`Divergence`]): another tool, other arguments,
//! a call or an ask where none was journaled, a journaled call not made, another
//! transition or another next state. Where a run was recorded on an older version of the
//! agent, each step is replayed through the migration mapping (`migrate_from`) where the
//! graph did not change, and a recorded `migrated` transition is checked against the
//! mapping.
//!
//! Each step is executed by the real runner ([`Runner::step`]) on a memory store seeded with
//! the run as it stood at that version: its state and status, the journal of the versions
//! before it (the saga's completed calls), and the step's journaled decisions and child
//! starts, which the runner serves from the journal as it does on resume. Only the tools
//! and the model are stand-ins, so a replay cannot drift from execution.
//!
//! ```ignore
//! let replay = Replay::new(Handlers, checkout_tools(&shop))?;
//! let report = replay.run(&export).await;
//! assert!(report.ok(), "{}", report.divergence.unwrap());
//! ```
//!
//! What it checks and what it does not is in `docs/verification.md`.

mod report;
mod stubs;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

pub use report::{
    Divergence, DivergenceKind, Move, ReplayReport, RunReplay, SkipReason, Skipped,
    first_difference,
};
use stubs::{Probe, StubRouter, StubTool};

use crate::agent::{Agent, Handle};
use crate::runner::{ImportedTools, Runner, RunnerConfig, RunnerError, StepOutcome};
use crate::secrets::shown;
use crate::store::export::{RunExport, export_run_with_states};
use crate::store::memory::MemoryStore;
use crate::store::migrate::{MigrationNote, agent_version_at};
use crate::store::{
    EntryKind, HistoryStore, RunFilter, RunRecord, RunStatus, RunStore, StateAtVersion, Store,
    StoreError, TransitionKind, TransitionRecord, WaitingFor, canonical_json,
};
use crate::tool::{DynTool, ToolBox};
use crate::toolset::ToolsFor;

/// The worker id a replay claims its runs with.
const REPLAY_WORKER: &str = "replay";

/// The lease of a replayed step: longer than any step, so that none renews.
const REPLAY_LEASE: Duration = Duration::from_hours(1);

/// Replays recorded runs of agent `A` against handlers `H` and the agent's tools, stubbed.
pub struct Replay<A, H> {
    runner: Runner<A, H>,
    store: Arc<MemoryStore>,
    probe: Arc<Probe>,
    /// One step at a time: the probe holds the journal of the step being replayed.
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl<A: Agent, H> std::fmt::Debug for Replay<A, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("agent", &A::NAME)
            .field("version", &A::VERSION)
            .finish_non_exhaustive()
    }
}

/// How one recorded transition was dealt with.
enum StepVerdict {
    Replayed,
    Skipped(SkipReason),
    Diverged(DivergenceKind),
}

/// The transition a step is expected to make, in the current version's terms.
struct Expected {
    to_state: String,
    kind: TransitionKind,
    status: RunStatus,
    state: Value,
}

impl<A, H> Replay<A, H>
where
    A: Agent + Handle<H>,
    H: Send + Sync + 'static,
{
    /// A replay of `A`'s runs against `handlers` and `tools` (the agent's tools struct or
    /// a [`ToolBox`]; only their names, kinds, schemas and compensations are used), with
    /// the default settings.
    ///
    /// # Errors
    /// As [`RunnerBuilder::build`](crate::runner::RunnerBuilder::build): the tool box
    /// lacks a tool of the agent, or has it with another kind.
    pub fn new(handlers: H, tools: impl ToolsFor<A>) -> Result<Self, RunnerError> {
        Self::with_config(handlers, tools, RunnerConfig::default())
    }

    /// [`new`](Self::new) with the runner settings the recorded runs ran under: the seal
    /// keys (to open sealed states and results), the redaction, `max_reasks` (a journal
    /// that holds rejected answers is replayed against the same budget) and
    /// `max_children_per_step`.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_config(
        handlers: H,
        tools: impl ToolsFor<A>,
        config: RunnerConfig,
    ) -> Result<Self, RunnerError> {
        Self::with_imported(handlers, tools, config, ImportedTools::new())
    }

    /// [`with_config`](Self::with_config) for an agent that calls imported tools (from MCP
    /// servers: [`RunnerBuilder::imported_tools`](crate::runner::RunnerBuilder::imported_tools)),
    /// given as the runner is given them. Their calls are compared as the runner compares
    /// them on resume: the journaled schema fingerprint must be the tool's now
    /// ([`DivergenceKind::SchemaChanged`] otherwise), then the arguments.
    ///
    /// # Errors
    /// As [`new`](Self::new), and the imported tools' problems as the runner names them.
    pub fn with_imported(
        handlers: H,
        tools: impl ToolsFor<A>,
        config: RunnerConfig,
        imported: ImportedTools,
    ) -> Result<Self, RunnerError> {
        let probe = Arc::new(Probe::new(config.seal_keys.clone()));
        let stub = |tool: &Arc<dyn DynTool>| -> Arc<dyn DynTool> {
            Arc::new(StubTool::new(Arc::clone(tool), Arc::clone(&probe)))
        };
        let real = tools.into_tool_box();
        let mut stubbed = ToolBox::new();
        for name in real.names() {
            if let Some(tool) = real.get(name) {
                stubbed = stubbed.with_dyn(stub(tool));
            }
        }
        let imported = imported.map_tools(stub);
        let store = Arc::new(MemoryStore::new());
        let config = RunnerConfig {
            worker_id: REPLAY_WORKER.to_owned(),
            lease_ttl: REPLAY_LEASE,
            ..config
        };
        let router = Arc::new(StubRouter {
            probe: Arc::clone(&probe),
        });
        let runner = Runner::builder(Arc::clone(&store) as Arc<dyn Store>, handlers, stubbed)
            .config(config)
            .imported_tools(imported)
            .finish(Some(router))?;
        Ok(Self {
            runner,
            store,
            probe,
            one_at_a_time: tokio::sync::Mutex::new(()),
        })
    }

    /// Replay the runs `filter` selects in `store` (set its `agent` and `limit`; runs of
    /// other agents are reported as not replayable).
    ///
    /// # Errors
    /// The store's, reading the runs.
    pub async fn run_store(
        &self,
        store: &dyn HistoryStore,
        filter: &RunFilter,
    ) -> Result<ReplayReport, StoreError> {
        let mut report = ReplayReport::default();
        for run in store.list_runs(filter).await? {
            if let Some(export) = export_run_with_states(store, &run.id).await? {
                report.runs.push(self.run(&export).await);
            }
        }
        Ok(report)
    }

    /// Replay every run of `exports`.
    pub async fn run_all(&self, exports: &[RunExport]) -> ReplayReport {
        let mut report = ReplayReport::default();
        for export in exports {
            report.runs.push(self.run(export).await);
        }
        report
    }

    /// Replay one recorded run, exported with its states
    /// ([`export_run_with_states`]): every transition its history recorded, in order, up to
    /// the first divergence.
    pub async fn run(&self, export: &RunExport) -> RunReplay {
        let _one = self.one_at_a_time.lock().await;
        let mut out = RunReplay {
            run_id: export.run.id.clone(),
            agent: export.run.agent.clone(),
            replayed: Vec::new(),
            skipped: Vec::new(),
            divergence: None,
        };
        let refuse = |message: String| Divergence {
            version: 0,
            state: String::new(),
            kind: DivergenceKind::NotReplayable { message },
        };
        if export.run.agent != A::NAME {
            out.divergence = Some(refuse(format!(
                "the run is of agent `{}`, the replay of `{}`",
                export.run.agent,
                A::NAME
            )));
            return out;
        }
        if export.states.is_empty() {
            out.divergence = Some(refuse(
                "the export holds no states: export the run with its states \
                 (`agentctl export --states`, `export_run_with_states`)"
                    .to_owned(),
            ));
            return out;
        }
        let states: BTreeMap<u64, &StateAtVersion> =
            export.states.iter().map(|s| (s.version, s)).collect();
        let mut history: Vec<&TransitionRecord> = export.history.iter().collect();
        history.sort_by_key(|t| t.version);
        for pair in history.windows(2) {
            let (prev, next) = (pair[0], pair[1]);
            if next.version != prev.version + 1 {
                continue;
            }
            let verdict = match (states.get(&prev.version), states.get(&next.version)) {
                (Some(before), Some(after)) => self.step(export, prev, next, before, after).await,
                _ => StepVerdict::Skipped(SkipReason::NoState),
            };
            match verdict {
                StepVerdict::Replayed => out.replayed.push(prev.version),
                StepVerdict::Skipped(why) => out.skipped.push(Skipped {
                    version: prev.version,
                    why,
                }),
                StepVerdict::Diverged(kind) => {
                    out.divergence = Some(Divergence {
                        version: prev.version,
                        state: prev.to_state.clone(),
                        kind,
                    });
                    break;
                }
            }
        }
        out
    }

    /// Replay the step from `prev` (state `before`) that recorded `next` (state `after`).
    async fn step(
        &self,
        export: &RunExport,
        prev: &TransitionRecord,
        next: &TransitionRecord,
        before: &StateAtVersion,
        after: &StateAtVersion,
    ) -> StepVerdict {
        match next.kind {
            TransitionKind::Migrated => return check_migration::<A>(next, before, after),
            TransitionKind::Cancel
            | TransitionKind::Terminate
            | TransitionKind::Repair
            | TransitionKind::Edited
            | TransitionKind::SignalDropped
            | TransitionKind::Start => {
                return StepVerdict::Skipped(SkipReason::Operator { kind: next.kind });
            }
            TransitionKind::Step | TransitionKind::Error | TransitionKind::Status => {}
        }
        if prev.status == RunStatus::Compensating
            || matches!(
                next.status,
                RunStatus::Compensated | RunStatus::Cancelled | RunStatus::Terminated
            )
        {
            return StepVerdict::Skipped(SkipReason::Compensation);
        }
        if matches!(
            next.status,
            RunStatus::Quarantined | RunStatus::DeadLettered
        ) {
            return StepVerdict::Skipped(SkipReason::Held);
        }
        let v = prev.version;
        let (agent_version, _) = agent_version_at(&export.run, &export.history, v);
        // The recorded state's own graph, for what woke the step.
        let own_graph = if agent_version == A::VERSION {
            A::graph()
        } else {
            match A::older_versions()
                .into_iter()
                .find(|o| o.version == agent_version)
            {
                Some(old) => old.graph,
                None => {
                    return StepVerdict::Skipped(SkipReason::NotMapped {
                        agent_version,
                        message: format!(
                            "`{}` version {} declares no migration from version {agent_version}",
                            A::NAME,
                            A::VERSION
                        ),
                    });
                }
            }
        };
        let Some(desc) = own_graph.state(&before.state_name) else {
            return StepVerdict::Diverged(DivergenceKind::NotReplayable {
                message: format!(
                    "state `{}` is not in the graph of version {agent_version}",
                    before.state_name
                ),
            });
        };
        let (mut waiting_for, mut wake_at) = (None, None);
        if prev.status == RunStatus::Waiting {
            if desc.wait.is_some() {
                return StepVerdict::Skipped(SkipReason::Signal);
            }
            if desc.timer.is_none() {
                return StepVerdict::Skipped(SkipReason::Children);
            }
            // The recorded step ran once the timer was due: it is due in the replay.
            waiting_for = Some(WaitingFor::Timer);
            wake_at = Some(0);
        } else if desc.wait.is_some() && next.kind != TransitionKind::Status {
            return StepVerdict::Skipped(SkipReason::Signal);
        }
        let (state, expected) = if agent_version == A::VERSION {
            (
                before.state.clone(),
                Expected {
                    to_state: next.to_state.clone(),
                    kind: next.kind,
                    status: next.status,
                    state: after.state.clone(),
                },
            )
        } else {
            match mapped_step::<A>(agent_version, next, before, after) {
                Ok(both) => both,
                Err(why) => return StepVerdict::Skipped(why),
            }
        };
        let state_name = match A::deserialize(&state) {
            Ok(s) => s.state_name().to_owned(),
            // A state this version does not read (sealed, say): the runner says why.
            Err(_) => before.state_name.clone(),
        };
        // The first step after a migration resumes the step the old version left.
        let (migrated_at_version, resume_base) = if prev.kind == TransitionKind::Migrated {
            let base = prev
                .note
                .as_ref()
                .and_then(MigrationNote::parse)
                .and_then(|n| n.resume_base);
            (Some(v), base)
        } else {
            (None, None)
        };
        let base = resume_base.unwrap_or(v);
        let record = RunRecord {
            agent: A::NAME.to_owned(),
            fingerprint: A::graph().fingerprint(),
            state_name,
            state,
            version: v,
            status: prev.status,
            waiting_for,
            wake_at,
            error: None,
            epoch: 0,
            agent_version: A::VERSION,
            migrated_at_version,
            resume_base,
            ..export.run.clone()
        };
        // The run's journal before the step (what the saga reads), and the step's own
        // decisions and child starts (served by the runner); its tool calls are the stubs'.
        let seeded = export
            .journal
            .iter()
            .filter(|e| {
                e.version < base
                    || (e.version == base
                        && matches!(e.kind, EntryKind::Decision | EntryKind::Child))
            })
            .cloned()
            .collect();
        self.probe.begin(
            export
                .journal
                .iter()
                .filter(|e| e.version == base && e.kind == EntryKind::Tool)
                .cloned(),
        );
        self.store.seed_run(record, seeded);
        let stepped = self.execute(&export.run.id).await;
        if let Some(kind) = self.probe.take_divergence() {
            return StepVerdict::Diverged(kind);
        }
        let now = match stepped {
            Ok(now) => now,
            Err(message) => {
                return StepVerdict::Diverged(DivergenceKind::NotReplayable { message });
            }
        };
        let recorded = Move {
            to_state: Some(expected.to_state),
            kind: Some(expected.kind),
            status: Some(expected.status),
            state: Some(shown(&expected.state).into_owned()),
            error: None,
        };
        let same_move = now.to_state == recorded.to_state
            && now.kind == recorded.kind
            && now.status == recorded.status;
        let (Some(a), Some(b)) = (&recorded.state, &now.state) else {
            return StepVerdict::Diverged(DivergenceKind::Transition {
                recorded,
                now,
                at: None,
            });
        };
        if !same_move || canonical_json(a) != canonical_json(b) {
            let at = if same_move {
                first_difference(a, b)
            } else {
                None
            };
            return StepVerdict::Diverged(DivergenceKind::Transition { recorded, now, at });
        }
        // A step that waits for its children journals, at its version, the calls it makes
        // once they are done too.
        if next.status != RunStatus::Waiting
            && let Some(missing) = self.probe.missing_call()
        {
            return StepVerdict::Diverged(missing);
        }
        StepVerdict::Replayed
    }

    /// Claim the seeded run and execute its step with the real runner; the transition it
    /// committed, if any.
    async fn execute(&self, run_id: &str) -> Result<Move, String> {
        let claimed = self
            .store
            .claim_run(run_id, REPLAY_WORKER, REPLAY_LEASE)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "the seeded run could not be claimed".to_owned())?;
        let version = claimed.record.version;
        let mut lease = claimed.lease;
        let outcome = self
            .runner
            .step(&mut lease, claimed.record)
            .await
            .map_err(|e| e.to_string())?;
        let (StepOutcome::Committed(record)
        | StepOutcome::Waiting(record)
        | StepOutcome::Finished(record)
        | StepOutcome::Deferred(record)) = outcome;
        let history = self
            .store
            .history(run_id)
            .await
            .map_err(|e| e.to_string())?;
        let committed = history.iter().find(|t| t.version == version + 1);
        Ok(match committed {
            Some(t) if record.version == t.version => Move {
                to_state: Some(t.to_state.clone()),
                kind: Some(t.kind),
                status: Some(t.status),
                state: Some(shown(&record.state).into_owned()),
                error: record.error.map(|e| format!("{}: {}", e.code, e.message)),
            },
            _ => Move {
                to_state: None,
                kind: None,
                status: None,
                state: None,
                error: record.error.map(|e| format!("{}: {}", e.code, e.message)),
            },
        })
    }
}

/// A step of older version `agent_version`, in the current version's terms: the state
/// before it and the transition expected, both through the migration mapping; or why it
/// is not replayed (no mapping, or the mapped move is no edge of the current graph).
fn mapped_step<A: Agent>(
    agent_version: u32,
    next: &TransitionRecord,
    before: &StateAtVersion,
    after: &StateAtVersion,
) -> Result<(Value, Expected), SkipReason> {
    let map = |state: &Value| -> Result<(Value, String), SkipReason> {
        let not_mapped = |message: String| SkipReason::NotMapped {
            agent_version,
            message,
        };
        let mapped = match A::migrate(agent_version, state.clone()) {
            Some(Ok(mapped)) => mapped,
            Some(Err(e)) => return Err(not_mapped(e.to_string())),
            None => return Err(not_mapped("no migration from this version".to_owned())),
        };
        let name = A::deserialize(&mapped)
            .map_err(|e| not_mapped(format!("the mapped state does not read: {e}")))?
            .state_name()
            .to_owned();
        Ok((mapped, name))
    };
    let (from, from_name) = map(&before.state)?;
    let (to, to_name) = map(&after.state)?;
    let moves = next.kind != TransitionKind::Status || from_name != to_name;
    if moves && !A::graph().has_edge(&from_name, &to_name) {
        return Err(SkipReason::GraphChanged {
            from: from_name,
            to: to_name,
        });
    }
    Ok((
        from,
        Expected {
            to_state: to_name,
            kind: next.kind,
            status: next.status,
            state: to,
        },
    ))
}

/// A recorded `migrated` transition: the mapping of the current code, applied to the state
/// before it, must give the state it recorded (checked when it migrated to this version).
fn check_migration<A: Agent>(
    next: &TransitionRecord,
    before: &StateAtVersion,
    after: &StateAtVersion,
) -> StepVerdict {
    let Some(note) = next.note.as_ref().and_then(MigrationNote::parse) else {
        return StepVerdict::Skipped(SkipReason::Operator { kind: next.kind });
    };
    let not_mapped = |message: String| {
        StepVerdict::Skipped(SkipReason::NotMapped {
            agent_version: note.from_version,
            message,
        })
    };
    if note.to_version != A::VERSION {
        return not_mapped(format!(
            "the run migrated to version {}, the replay runs version {}",
            note.to_version,
            A::VERSION
        ));
    }
    let mapped = match A::migrate(note.from_version, before.state.clone()) {
        Some(Ok(mapped)) => mapped,
        Some(Err(e)) => {
            return StepVerdict::Diverged(DivergenceKind::NotReplayable {
                message: format!("the migration mapping refuses the state: {e}"),
            });
        }
        None => return not_mapped("no migration from this version".to_owned()),
    };
    let recorded = shown(&after.state).into_owned();
    let now = shown(&mapped).into_owned();
    match first_difference(&recorded, &now) {
        None => StepVerdict::Replayed,
        Some(at) => StepVerdict::Diverged(DivergenceKind::Migration { recorded, now, at }),
    }
}
