//! The runner's side of one step ([`StepCx`]): the journal of the step, the journaled tool
//! path under each tool's policy, the lease kept alive while work runs. The handler (through
//! `Ctx`), the router loop and the saga all work through it; it depends on none of them.

mod heartbeat;
mod journal;
mod tool_path;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use futures::future::BoxFuture;
use serde_json::Value;

use super::caches::{ReadCache, lock};
use super::{FaultPoint, Inner, RunnerError, renew_if_due};
use crate::agent::{Join, StepError, StepIo, Wake};
use crate::graph::{GraphDescription, StateDescription};
use crate::store::{
    JournalEntry, Labels, Lease, Millis, RunFailure, RunRecord, SpawnedBy, WaitingFor,
};
use crate::tool::ToolError;

pub(crate) use heartbeat::with_heartbeat;

/// The runner's side of one step, shared by the handler (through `Ctx`), the router loop
/// and the journal.
pub(crate) struct StepCx<'r> {
    pub(crate) inner: &'r Inner,
    pub(crate) run_id: String,
    pub(crate) version: u64,
    pub(crate) state: &'r StateDescription,
    /// The typed state as stored (for the router's prompt).
    pub(crate) state_data: &'r Value,
    /// The run as claimed: its spend through its last commit and its budget.
    pub(crate) run: &'r RunRecord,
    lease: Mutex<Lease>,
    /// Entries already journaled at this version (a resumed step replays them), by `seq`.
    /// A `Vec`: a step has a few entries, and a B-tree's first node holds room for eleven
    /// (about 3 KB) while every run in flight keeps its step's journal.
    journal: Mutex<Vec<JournalEntry>>,
    /// Entries of read calls journaled with the commit
    /// ([`ToolPolicy::journal_with_commit`](crate::tool::ToolPolicy), and calls served from
    /// the read cache), in memory but not written yet: they go with the step's commit (one
    /// write for a step and its reads), or are written before anything else the step writes
    /// or calls, so a read result is durable before a later call can depend on it.
    deferred: Mutex<Vec<JournalEntry>>,
    /// Successful read results of the whole run, by (tool, input hash): the drive's
    /// ([`ReadCache`]), kept from one step of the run to the next.
    read_cache: &'r ReadCache,
    seq: AtomicU32,
    tool_calls: AtomicU32,
    /// In an LLM-routed state: the transition the router chose, set before the handler runs.
    pub(crate) route_name: std::sync::OnceLock<String>,
    pub(crate) route_args: std::sync::OnceLock<Value>,
    wake: Option<Wake>,
    /// What the step recorded that its handler cannot undo, read when it returns.
    recorded: Mutex<Recorded>,
    /// The run's parent, for the depth limit of the children it starts.
    pub(crate) spawned_by: Option<SpawnedBy>,
    /// The run's labels: its trace, which the children it starts join.
    pub(crate) labels: &'r Labels,
    /// Whether the handler started children in this visit (one join per visit).
    spawned: AtomicBool,
    /// Whether the turn the run took before it was handed back for a rate limit (the
    /// limit its `waiting_for` names) was used up by this step ([`take_turn`](Self::take_turn)).
    reserved_used: AtomicBool,
}

/// What a step recorded, as it ran, that decides how it ends whatever its handler returns:
/// the tool path, the router loop and the start of children record here what the handler
/// could otherwise swallow (`let _ = ctx.call(...)`). Each keeps the first one recorded;
/// which of them wins is decided once, where the step's end is built
/// ([`StepEnd`](super::step::StepEnd)).
#[derive(Debug, Default)]
pub(crate) struct Recorded {
    /// A condition that must stop the step without committing (crash, lease lost, store down).
    pub(crate) abort: Option<RunnerError>,
    /// The journal contradicts the current graph: quarantine instead of committing.
    pub(crate) quarantine: Option<RunFailure>,
    /// A failure the handler must not be able to swallow (budget, nondeterminism).
    pub(crate) failure: Option<StepError>,
    /// The join the step waits for: the runner commits the run as waiting instead.
    pub(crate) suspend: Option<Join>,
    /// The step's turn under a rate limit comes then: the runner hands the run back until
    /// then, waiting for that, instead of committing.
    pub(crate) defer: Option<(Millis, WaitingFor)>,
}

impl<'r> StepCx<'r> {
    pub(crate) fn new(
        inner: &'r Inner,
        record: &'r RunRecord,
        state: &'r StateDescription,
        lease: Lease,
        journal: BTreeMap<u32, JournalEntry>,
        wake: Option<Wake>,
        read_cache: &'r ReadCache,
    ) -> Self {
        Self {
            inner,
            run_id: record.id.clone(),
            version: record.version,
            state,
            state_data: &record.state,
            run: record,
            lease: Mutex::new(lease),
            journal: Mutex::new(journal.into_values().collect()),
            deferred: Mutex::new(Vec::new()),
            read_cache,
            seq: AtomicU32::new(0),
            tool_calls: AtomicU32::new(0),
            route_name: std::sync::OnceLock::new(),
            route_args: std::sync::OnceLock::new(),
            wake,
            recorded: Mutex::new(Recorded::default()),
            spawned_by: record.spawned_by.clone(),
            labels: &record.labels,
            spawned: AtomicBool::new(false),
            reserved_used: AtomicBool::new(false),
        }
    }

    /// The step resumes at `version`, the one it began at before it waited for its
    /// children: its journal, idempotency keys and children are that version's.
    pub(crate) fn resumed_at(mut self, version: u64) -> Self {
        self.version = version;
        self
    }

    /// Record that the handler started children; `true` if it had already.
    pub(crate) fn mark_spawned(&self) -> bool {
        self.spawned.swap(true, Ordering::SeqCst)
    }

    /// End the step by handing the run back until `until`, waiting for `why`.
    pub(crate) fn defer_until(&self, until: Millis, why: WaitingFor) {
        lock(&self.recorded).defer.get_or_insert((until, why));
    }

    /// Whether the run was handed back for one of `limits` (it took its turn then) by the
    /// lease just before this one: the reservation is used up. A claim after another (whose
    /// worker may have asked under the turn and crashed before journaling the answer) takes a
    /// turn of its own, so that a turn is never used twice.
    pub(crate) fn take_reserved<'a>(&self, mut limits: impl Iterator<Item = &'a str>) -> bool {
        if self.run.status != crate::store::RunStatus::Running {
            return false;
        }
        let Some(wait) = self.run.waiting_for.as_ref() else {
            return false;
        };
        let (Some(reserved), Some(by)) = (wait.limit(), wait.handed_back_by()) else {
            return false;
        };
        by.checked_add(1) == Some(self.lease().epoch)
            && limits.any(|name| name == reserved)
            && !self.reserved_used.swap(true, Ordering::SeqCst)
    }

    /// Suspend the step until `join` holds over its children.
    pub(crate) fn suspend(&self, join: Join) {
        lock(&self.recorded).suspend.get_or_insert(join);
    }

    /// What the step recorded, taken: how it ends is built from it and the handler's result.
    pub(crate) fn take_recorded(&self) -> Recorded {
        std::mem::take(&mut *lock(&self.recorded))
    }

    /// The fatal condition, if any, taken: the step must stop without committing.
    pub(crate) fn take_fatal(&self) -> Option<RunnerError> {
        lock(&self.recorded).abort.take()
    }

    pub(crate) fn lease(&self) -> Lease {
        lock(&self.lease).clone()
    }

    /// Stop the step without committing (crash, lease lost, store down).
    pub(crate) fn set_fatal(&self, e: RunnerError) {
        lock(&self.recorded).abort.get_or_insert(e);
    }

    /// Whether the step was stopped: nothing more may run or be journaled in it.
    pub(crate) fn is_interrupted(&self) -> bool {
        let recorded = lock(&self.recorded);
        recorded.abort.is_some() || recorded.quarantine.is_some() || recorded.defer.is_some()
    }

    /// Stop the step and quarantine the run: what the journal says cannot be replayed
    /// under the current graph.
    pub(crate) fn set_quarantine(&self, e: RunFailure) {
        lock(&self.recorded).quarantine.get_or_insert(e);
    }

    /// Fail the step, whatever its handler makes of the error.
    pub(crate) fn set_step_error(&self, e: StepError) {
        lock(&self.recorded).failure.get_or_insert(e);
    }

    fn interrupted_error() -> ToolError {
        ToolError::permanent("the step was interrupted")
    }

    pub(crate) fn fault(&self, point: FaultPoint) -> bool {
        match self.inner.faults.check(point, &self.run_id, self.version) {
            Ok(()) => false,
            Err(crash) => {
                self.set_fatal(RunnerError::Crashed(crash));
                true
            }
        }
    }

    pub(crate) async fn renew(&self) -> bool {
        let mut lease = self.lease();
        match renew_if_due(self.inner, &mut lease, &self.run_id, self.version).await {
            Ok(()) => {
                *lock(&self.lease) = lease;
                true
            }
            Err(e) => {
                self.set_fatal(e);
                false
            }
        }
    }
}

impl StepIo for StepCx<'_> {
    fn run_id(&self) -> &str {
        &self.run_id
    }

    fn version(&self) -> u64 {
        self.version
    }

    fn call<'a>(
        &'a self,
        tool: &'static str,
        input: Value,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(self.call_tool(tool, input))
    }

    fn route(&self) -> Option<&str> {
        self.route_name.get().map(String::as_str)
    }

    fn route_arguments(&self) -> Option<&Value> {
        self.route_args.get()
    }

    fn wake(&self) -> Option<Wake> {
        self.wake.clone()
    }

    fn spawn<'a>(
        &'a self,
        child: &'static GraphDescription,
        states: Vec<Value>,
        join: Join,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StepError>> {
        self.spawn_children(child, states, join)
    }
}
