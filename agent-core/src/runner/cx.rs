//! The runner's side of one step ([`StepCx`]): the journal of the step, the journaled tool
//! path under each tool's policy, the lease kept alive while work runs. The handler (through
//! `Ctx`), the router loop and the saga all work through it; it depends on none of them.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::Value;
use tracing::{Instrument, info_span};

use super::caches::{ReadCache, lock};
use super::{FaultPoint, Inner, RunnerError, imported, keyed, renew_if_due};
use crate::agent::{Join, StepError, StepIo, Wake};
use crate::graph::{GraphDescription, StateDescription};
use crate::secrets::SealError;
use crate::store::{
    CallStatus, EntryKind, JournalEntry, Lease, RunFailure, RunRecord, SpawnedBy, StoreError,
    idempotency_key, input_hash, now_ms,
};
use crate::tool::{DynTool, ErrorClass, ToolContext, ToolError, ToolKind};

/// The runner's side of one step, shared by the handler (through `Ctx`), the router loop
/// and the journal.
pub(crate) struct StepCx<'r> {
    pub(crate) inner: &'r Inner,
    pub(crate) run_id: String,
    pub(crate) version: u64,
    pub(crate) state: &'r StateDescription,
    /// The typed state as stored (for the router's prompt).
    pub(crate) state_data: &'r Value,
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
    /// Whether the handler started children in this visit (one join per visit).
    spawned: AtomicBool,
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
            spawned: AtomicBool::new(false),
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

    pub(crate) fn next_seq(&self) -> u32 {
        self.seq.fetch_add(1, Ordering::SeqCst)
    }

    /// The entry journaled at `seq`, its sealed values opened: what replay executes is what
    /// was first executed. A value sealed with a key this runner lacks quarantines the run
    /// (`seal.key_missing`): the entry is returned still sealed, and the step, interrupted,
    /// executes nothing more.
    pub(crate) fn journaled(&self, seq: u32) -> Option<JournalEntry> {
        let mut entry = {
            let journal = lock(&self.journal);
            (journal.binary_search_by_key(&seq, |e| e.seq).ok()).map(|i| journal[i].clone())?
        };
        if let Err(e) = self.open_entry(&mut entry) {
            self.set_quarantine(RunFailure {
                code: e.code().into(),
                message: format!("journal entry #{seq} of `{}`: {e}", entry.name),
            });
        }
        Some(entry)
    }

    /// Open the sealed values of a journaled entry, in place.
    pub(crate) fn open_entry(&self, entry: &mut JournalEntry) -> Result<(), SealError> {
        let keys = &self.inner.config.seal_keys;
        keys.open_all(&mut entry.input)?;
        if let Some(output) = entry.output.as_mut() {
            keys.open_all(output)?;
        }
        Ok(())
    }

    /// `value` as stored in the journal: sealed where the policy says so.
    pub(crate) fn sealed(
        &self,
        mut value: Value,
        marked: &[String],
        what: &str,
    ) -> Result<Value, SealError> {
        self.inner.seal_value(&mut value, marked, what)?;
        Ok(value)
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
        recorded.abort.is_some() || recorded.quarantine.is_some()
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

    /// Durably record an entry, fenced by the lease, after the deferred read entries. A
    /// failure is fatal for the step.
    pub(crate) async fn record(&self, entry: JournalEntry) -> bool {
        // Boxed, and only when there is something to write: this future's space is held
        // for the whole tool call by every run in flight (it is part of the call's).
        if self.has_deferred() && !Box::pin(self.write_deferred()).await {
            return false;
        }
        self.write(entry).await
    }

    /// Journal a read call's entry in memory; it is written with the step's commit, or
    /// before the step's next write or call ([`write_deferred`](Self::write_deferred)).
    /// Should the process die in between, the read runs again when the step resumes,
    /// which a read may.
    fn defer(&self, entry: JournalEntry) {
        self.remember(entry.clone());
        let mut deferred = lock(&self.deferred);
        // Most steps defer one read: room for four (a `Vec`'s first growth) would be
        // held by every run in flight until its commit.
        deferred.reserve_exact(1);
        deferred.push(entry);
    }

    /// Whether read entries wait to be written.
    fn has_deferred(&self) -> bool {
        !lock(&self.deferred).is_empty()
    }

    /// Write the deferred read entries now. A failure is fatal for the step.
    pub(crate) async fn write_deferred(&self) -> bool {
        let deferred = std::mem::take(&mut *lock(&self.deferred));
        for entry in deferred {
            if !self.write(entry).await {
                return false;
            }
        }
        true
    }

    /// The deferred read entries, for the step's commit to write.
    pub(crate) fn take_deferred(&self) -> Vec<JournalEntry> {
        std::mem::take(&mut *lock(&self.deferred))
    }

    /// Add or replace `entry` in the step's journal in memory.
    fn remember(&self, entry: JournalEntry) {
        let mut journal = lock(&self.journal);
        match journal.binary_search_by_key(&entry.seq, |e| e.seq) {
            Ok(i) => journal[i] = entry,
            Err(i) => {
                journal.reserve_exact(1);
                journal.insert(i, entry);
            }
        }
    }

    /// Write one entry, fenced by the lease, retrying transient store errors.
    async fn write(&self, entry: JournalEntry) -> bool {
        let lease = self.lease();
        let mut attempt = 0;
        loop {
            match self.inner.store.record_entry(&lease, &entry).await {
                Ok(()) => {
                    self.remember(entry);
                    return true;
                }
                Err(e) if e.is_transient() && attempt < self.inner.config.store_retries => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(50 << attempt.min(6))).await;
                }
                Err(StoreError::LeaseLost { .. } | StoreError::Conflict { .. }) => {
                    self.set_fatal(RunnerError::LeaseLost(self.run_id.clone()));
                    return false;
                }
                Err(e) => {
                    self.set_fatal(e.into());
                    return false;
                }
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

    /// A new entry for `input`, hashed as it is executed and stored sealed where the policy
    /// says so (`marked`: the fields the input's type marks secret).
    pub(crate) fn new_entry(
        &self,
        seq: u32,
        kind: EntryKind,
        name: &str,
        input: Value,
        marked: &[String],
    ) -> Result<JournalEntry, SealError> {
        let hash = input_hash(&input);
        let input = self.sealed(input, marked, &format!("the input of `{name}`"))?;
        Ok(JournalEntry {
            run_id: self.run_id.clone(),
            version: self.version,
            seq,
            kind,
            state: self.state.name.clone(),
            name: name.to_owned(),
            tool_kind: None,
            input_hash: hash,
            input,
            idempotency_key: None,
            status: CallStatus::Started,
            output: None,
            error_class: None,
            error_code: None,
            error_message: None,
            attempts: 0,
            duration_ms: 0,
            started_at: now_ms(),
            finished_at: None,
        })
    }

    /// A tool call through the journal: replayed if journaled, else executed under its
    /// policy with the deterministic idempotency key. Its journal index is taken now, when
    /// the call is created, not when the returned future first runs: calls run concurrently
    /// keep the indices of the order they were made in, however they finish.
    pub(crate) fn call_tool<'a>(
        &'a self,
        name: &'a str,
        input: Value,
    ) -> impl std::future::Future<Output = Result<Value, ToolError>> + Send + 'a {
        let seq = self.next_seq();
        let calls = self.tool_calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.call_tool_at(seq, calls, name, input)
    }

    /// [`call_tool`](Self::call_tool) as call `calls` of the visit, journal entry `seq`.
    async fn call_tool_at(
        &self,
        seq: u32,
        calls: u32,
        name: &str,
        input: Value,
    ) -> Result<Value, ToolError> {
        if self.is_interrupted() {
            return Err(Self::interrupted_error());
        }
        if let Some(max) = self.state.max_tool_calls
            && calls > max
        {
            let e = StepError::Budget(format!(
                "state `{}` allows at most {max} tool calls per visit",
                self.state.name
            ));
            self.set_step_error(e.clone());
            return Err(ToolError::permanent(e.to_string()));
        }
        let legal = self.inner.tools_in(self.state).any(|t| t == name);
        let Some(tool) = self.inner.tools.get(name).filter(|_| legal) else {
            // Unreachable through the typed API and the validated router; refused anyway.
            return Err(ToolError::permanent(format!(
                "tool `{name}` is not allowed in state `{}`",
                self.state.name
            )));
        };
        let span = info_span!("tool", run_id = %self.run_id, state = %self.state.name, version = self.version, tool = name, seq);
        self.call_at(seq, EntryKind::Tool, tool.as_ref(), input)
            .instrument(span)
            .await
    }

    /// Execute (or replay) `tool` as journal entry `seq`.
    pub(crate) async fn call_at(
        &self,
        seq: u32,
        kind: EntryKind,
        tool: &dyn DynTool,
        input: Value,
    ) -> Result<Value, ToolError> {
        let name = tool.name();
        let marked = self.inner.marked.of(tool);
        // An imported tool's calls are journaled with the fingerprint of its schema.
        let journal_input = imported::journaled_input(tool, input.clone());
        let hash = input_hash(&journal_input);
        let mut prior_attempts = 0;
        if let Some(e) = self.journaled(seq) {
            // An entry that does not open held the run: nothing is served or run.
            if self.is_interrupted() {
                return Err(Self::interrupted_error());
            }
            if e.name == name
                && let Some(held) = imported::schema_changed(tool, &e)
            {
                self.set_quarantine(held);
                return Err(Self::interrupted_error());
            }
            if e.name != name || e.input_hash != hash {
                let err = StepError::Handler(format!(
                    "nondeterministic step: call #{seq} was `{}` with input {}, now `{name}` with input {}; \
                     handlers must make the same calls in the same order when resumed",
                    e.name,
                    &e.input_hash[..12],
                    &hash[..12]
                ));
                self.set_step_error(err.clone());
                return Err(ToolError::permanent(err.to_string()));
            }
            match e.status {
                CallStatus::Succeeded => return Ok(e.output.unwrap_or(Value::Null)),
                // A failed compensation is retried on resume (same key); a failed tool call is
                // a recorded outcome that replays as it was.
                CallStatus::Failed if kind != EntryKind::Compensation => {
                    return Err(entry_error(&e));
                }
                CallStatus::Failed | CallStatus::Started => prior_attempts = e.attempts,
            }
        }
        if tool.schema_fingerprint().is_some() && !self.same_schema_as_journaled(tool).await {
            return Err(Self::interrupted_error());
        }
        let policy = tool.policy();
        let with_commit =
            tool.kind() == ToolKind::Read && kind == EntryKind::Tool && policy.journal_with_commit;
        if tool.kind() == ToolKind::Read && policy.cache && kind == EntryKind::Tool {
            if let Some(out) = self.cached_read(name, &hash).await {
                // Journaled as a call served from the cache (no attempt), so the audit trail
                // and the router's view of this visit are the same on every replay.
                let stored = self
                    .new_entry(seq, kind, name, journal_input, &marked)
                    .and_then(|e| {
                        Ok((
                            e,
                            self.sealed(out.clone(), &[], &format!("the output of `{name}`"))?,
                        ))
                    });
                let (mut entry, stored) = match stored {
                    Ok(both) => both,
                    Err(e) => return Err(ToolError::permanent(e.to_string())),
                };
                entry.tool_kind = Some(ToolKind::Read);
                entry.status = CallStatus::Succeeded;
                entry.output = Some(stored);
                entry.finished_at = Some(entry.started_at);
                // A call served from the cache calls nothing: should it be lost, the step
                // serves it again from the entry it copies.
                self.defer(entry);
                return Ok(out);
            }
            if self.is_interrupted() {
                return Err(Self::interrupted_error());
            }
        }
        // Nothing runs that could not be journaled as it ran.
        let mut entry = match self.new_entry(seq, kind, name, journal_input, &marked) {
            Ok(entry) => entry,
            Err(e) => return Err(ToolError::permanent(e.to_string())),
        };
        entry.tool_kind = Some(tool.kind());
        entry.attempts = prior_attempts;
        if keyed(tool.kind()) || kind == EntryKind::Compensation {
            entry.idempotency_key = Some(idempotency_key(&self.run_id, self.version, seq));
        }
        let enabled = match self.tool_enabled(name).await {
            Ok(v) => v,
            Err(e) => {
                self.set_fatal(e.into());
                return Err(Self::interrupted_error());
            }
        };
        if !enabled {
            let err = ToolError::disabled(format!(
                "tool `{name}` is switched off in the tool registry"
            ));
            return Box::pin(self.finish(entry, Err(err), Instant::now(), with_commit)).await;
        }
        if entry.idempotency_key.is_some() {
            // The audit trail shows an effect may have happened before its result is known,
            // and counts the attempt before it starts: after a crash in the call, `attempts`
            // still counts every request that may have reached the service.
            entry.attempts = prior_attempts + 1;
            if !Box::pin(self.record(entry.clone())).await {
                return Err(Self::interrupted_error());
            }
            let point = if kind == EntryKind::Compensation {
                FaultPoint::CompensationRegistered
            } else {
                FaultPoint::ToolSent
            };
            if self.fault(point) {
                return Err(Self::interrupted_error());
            }
        }
        // What earlier reads returned is durable before this call, which may depend on it,
        // begins.
        if self.has_deferred() && !Box::pin(self.write_deferred()).await {
            return Err(Self::interrupted_error());
        }
        let started = Instant::now();
        let cx = ToolContext {
            run_id: self.run_id.clone(),
            state: self.state.name.clone(),
            version: self.version,
            call_index: seq,
            attempt: prior_attempts + 1,
            idempotency_key: entry.idempotency_key.clone(),
            tokens: self.inner.config.ephemeral.redacted_sink(
                &self.run_id,
                self.version,
                seq,
                &self.inner.redactor,
            ),
        };
        let result = self.attempts(tool, &input, cx, &mut entry).await;
        if self.is_interrupted() {
            return Err(Self::interrupted_error());
        }
        let point = if kind == EntryKind::Compensation {
            FaultPoint::CompensationSent
        } else {
            FaultPoint::ToolAnswered
        };
        if self.fault(point) {
            return Err(Self::interrupted_error());
        }
        // Boxed, as the other writes here: what a call holds while its tool works is the
        // largest of its parts, and every run in flight holds one (issue 22, W4).
        Box::pin(self.finish(entry, result, started, with_commit)).await
    }

    /// Attempts under the policy: timeout per attempt, backoff with jitter, `retry-after`.
    async fn attempts(
        &self,
        tool: &dyn DynTool,
        input: &Value,
        mut cx: ToolContext,
        entry: &mut JournalEntry,
    ) -> Result<Value, ToolError> {
        let policy = tool.policy();
        // Calls with effects are journaled before each attempt (the first one by `call_at`).
        let journal_each = entry.idempotency_key.is_some();
        let mut attempt_in_call = 0;
        loop {
            attempt_in_call += 1;
            if !journal_each || attempt_in_call > 1 {
                entry.attempts += 1;
            }
            if journal_each && attempt_in_call > 1 && !Box::pin(self.record(entry.clone())).await {
                return Err(Self::interrupted_error());
            }
            if !self.renew().await {
                return Err(Self::interrupted_error());
            }
            let result = match tokio::time::timeout(
                policy.timeout,
                tool.call_json(input.clone(), &cx),
            )
            .await
            {
                Ok(r) => r,
                Err(_) => Err(ToolError::timeout(format!(
                    "no answer within {} ms",
                    policy.timeout.as_millis()
                ))),
            };
            match result {
                Ok(v) => return Ok(v),
                Err(mut e) => {
                    e.tool = Some(tool.name().to_owned());
                    // Many clients put credentials in their errors: scrub at the source, so
                    // neither the journal, the handler, the router nor the logs see them.
                    e.message = self.inner.redact_text(&e.message);
                    if !e.class.is_retryable() || attempt_in_call >= policy.retry.max_attempts {
                        return Err(e);
                    }
                    let wait = e.retry_after_ms.map_or_else(
                        || policy.retry.backoff(attempt_in_call),
                        Duration::from_millis,
                    );
                    tracing::debug!(error = %e, ?wait, "tool attempt failed; retrying");
                    tokio::time::sleep(wait).await;
                    cx.attempt += 1;
                }
            }
        }
    }

    /// Journal the call's outcome: at once, or with the step's commit when `with_commit`
    /// (a read whose policy allows it).
    async fn finish(
        &self,
        mut entry: JournalEntry,
        result: Result<Value, ToolError>,
        started: Instant,
        with_commit: bool,
    ) -> Result<Value, ToolError> {
        // The error names its tool on every path (live, disabled, replayed), so a failure
        // reads the same when it is replayed from the journal.
        let result = result.map_err(|mut e| {
            e.tool.get_or_insert_with(|| entry.name.clone());
            e
        });
        entry.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        entry.finished_at = Some(now_ms());
        // An output that holds a secret and cannot be sealed is not stored: the call fails,
        // loudly, rather than replaying something else than what it returned.
        let result = match result {
            Ok(v) => {
                match self.sealed(v.clone(), &[], &format!("the output of `{}`", entry.name)) {
                    Ok(stored) => {
                        entry.output = Some(stored);
                        Ok(v)
                    }
                    Err(e) => Err(ToolError::permanent(e.to_string())),
                }
            }
            Err(e) => Err(e),
        };
        match &result {
            Ok(_) => entry.status = CallStatus::Succeeded,
            Err(e) => {
                entry.status = CallStatus::Failed;
                entry.error_class = Some(e.class);
                entry.error_code = Some(e.class.code().to_owned());
                entry.error_message = Some(e.message.clone());
            }
        }
        let cacheable =
            entry.tool_kind == Some(ToolKind::Read) && entry.status == CallStatus::Succeeded;
        let key = (entry.name.clone(), entry.input_hash.clone());
        if with_commit {
            self.defer(entry);
        } else if !self.record(entry).await {
            return Err(Self::interrupted_error());
        }
        if cacheable && let (Some(cache), Ok(v)) = (self.read_cache.lock().await.as_mut(), &result)
        {
            cache.insert(key, v.clone());
        }
        result
    }

    /// Whether every call of imported `tool` the run journaled (at any version) was made
    /// under the schema the tool has now; if not, the run is held (quarantined with
    /// [`FailureCode::ToolSchemaChanged`](crate::FailureCode::ToolSchemaChanged)) and this returns `false`. Only imported
    /// tools pay for reading the journal.
    async fn same_schema_as_journaled(&self, tool: &dyn DynTool) -> bool {
        let entries = match self.inner.store.journal(&self.run_id, None).await {
            Ok(entries) => entries,
            Err(e) => {
                self.set_fatal(e.into());
                return false;
            }
        };
        let held = entries
            .iter()
            .filter(|e| e.name == tool.name())
            .find_map(|e| imported::schema_changed(tool, e));
        match held {
            Some(held) => {
                self.set_quarantine(held);
                false
            }
            None => true,
        }
    }

    /// Whether the tool registry lets `tool` be called, from the runner's copy of the
    /// registry ([`ToolSwitches`]): a switch takes effect at the calls that start at most
    /// [`RunnerConfig::tool_registry_refresh`](super::RunnerConfig) after it.
    async fn tool_enabled(&self, tool: &str) -> Result<bool, StoreError> {
        let off = self
            .inner
            .switches
            .current(
                self.inner.store.as_ref(),
                self.inner.config.tool_registry_refresh,
            )
            .await?;
        Ok(!off.contains(tool))
    }

    async fn cached_read(&self, tool: &str, hash: &str) -> Option<Value> {
        let mut cache = self.read_cache.lock().await;
        if cache.is_none() {
            match self.inner.store.journal(&self.run_id, None).await {
                Ok(entries) => {
                    *cache = Some(
                        entries
                            .into_iter()
                            .filter(|e| {
                                e.tool_kind == Some(ToolKind::Read)
                                    && e.status == CallStatus::Succeeded
                                    && e.kind == EntryKind::Tool
                            })
                            .filter_map(|mut e| {
                                // A cached output that does not open is not served.
                                self.open_entry(&mut e).ok()?;
                                Some(((e.name, e.input_hash), e.output.unwrap_or(Value::Null)))
                            })
                            .collect(),
                    );
                }
                Err(e) => {
                    self.set_fatal(e.into());
                    return None;
                }
            }
        }
        cache
            .as_ref()
            .and_then(|c| c.get(&(tool.to_owned(), hash.to_owned())).cloned())
    }

    /// Results of successful tool calls in this visit, oldest first, for the router's prompt.
    pub(crate) fn results_so_far(&self) -> Vec<(u32, JournalEntry)> {
        lock(&self.journal)
            .iter()
            .filter(|e| e.kind == EntryKind::Tool && e.status == CallStatus::Succeeded)
            .map(|e| (e.seq, e.clone()))
            .collect()
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

/// Run `work` while keeping the lease alive (a tool call or an LLM answer may take longer
/// than the lease). `None` when the lease could not be renewed: the work is dropped at once,
/// as a crash would drop it, and the step stops without committing.
///
/// A future of its own rather than an `async fn` around `tokio::select!`: that kept `work`
/// twice, as its argument and inside the select, and every run in flight holds this future
/// while its tool call waits (issue 22, W4).
pub(crate) fn with_heartbeat<'a, F: Future>(
    cx: &'a StepCx<'_>,
    work: F,
) -> Heartbeat<F, impl Future<Output = ()> + 'a> {
    let beat = async move {
        loop {
            tokio::time::sleep(cx.inner.config.lease_ttl / 4).await;
            if !cx.renew().await {
                return;
            }
        }
    };
    Heartbeat { work, beat }
}

pin_project_lite::pin_project! {
    /// A step's work raced against its lease's heartbeat ([`with_heartbeat`]).
    pub(crate) struct Heartbeat<W, B> {
        #[pin]
        work: W,
        #[pin]
        beat: B,
    }
}

impl<W: Future, B: Future<Output = ()>> Future for Heartbeat<W, B> {
    type Output = Option<W::Output>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.project();
        // The step first: one that finishes without waiting never arms the timer.
        if let std::task::Poll::Ready(out) = this.work.poll(cx) {
            return std::task::Poll::Ready(Some(out));
        }
        this.beat.poll(cx).map(|()| None)
    }
}

fn entry_error(e: &JournalEntry) -> ToolError {
    ToolError {
        class: e.error_class.unwrap_or(ErrorClass::Permanent),
        message: e.error_message.clone().unwrap_or_default(),
        tool: Some(e.name.clone()),
        retry_after_ms: None,
    }
}
