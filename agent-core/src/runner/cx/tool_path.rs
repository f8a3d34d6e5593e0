//! The journaled tool path: a call replayed from the journal, or executed under its tool's
//! policy (kill switch, read cache, attempts, timeouts) and journaled.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;
use tracing::{Instrument, info_span};

use super::StepCx;
use crate::agent::StepError;
use crate::runner::{FaultPoint, imported, keyed};
use crate::store::{
    CallStatus, EntryKind, JournalEntry, Spending, StoreError, idempotency_key, input_hash, now_ms,
};
use crate::tool::{DynTool, ErrorClass, ToolContext, ToolError, ToolKind};

impl StepCx<'_> {
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
        // OpenTelemetry GenAI conventions: a tool execution span.
        let span = info_span!(
            "tool",
            otel.name = %format_args!("execute_tool {name}"),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = name,
            gen_ai.tool.type = "function",
            gen_ai.tool.call.id = %format_args!("{}/v{}/{seq}", self.run_id, self.version),
            error.type = tracing::field::Empty,
            run_id = %self.run_id,
            state = %self.state.name,
            version = self.version,
            seq,
        );
        let called = self
            .call_at(seq, EntryKind::Tool, tool.as_ref(), input)
            .instrument(span.clone())
            .await;
        if let Err(e) = &called {
            span.record("error.type", e.class.code());
        }
        called
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
        // A new call (not a replayed one) is within the budgets or not made. Compensations
        // run whatever the budget: they undo what was spent.
        if kind == EntryKind::Tool
            && let Err(e) = self.check_budget(Spending::ToolCall)
        {
            return Err(ToolError::permanent(e.to_string()));
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
            return Box::pin(self.finish(name, entry, Err(err), Instant::now(), with_commit)).await;
        }
        // A call made (not replayed, nor served from the cache) takes its turn under the
        // tool's rate limit, if it has one; a far turn hands the run back until then. Boxed
        // only where limits are configured: every call without them skips the allocation.
        if !self.inner.config.rate_limits.is_empty()
            && Box::pin(self.take_turn(super::super::limits::Turn::Call(name)))
                .await
                .is_err()
        {
            return Err(Self::interrupted_error());
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
            agent: &self.inner.graph.agent,
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
        Box::pin(self.finish(name, entry, result, started, with_commit)).await
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
        tool: &'static str,
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
        let elapsed = started.elapsed();
        entry.duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        entry.finished_at = Some(now_ms());
        // An output that holds a secret and cannot be sealed is not stored: the call fails,
        // loudly, rather than replaying something else than what it returned.
        // Nor is one past the size bound: the call's effect, if any, happened, but what it
        // returned cannot be kept, so it fails for good (a retry would not shrink it).
        let result = match result {
            Ok(v) => {
                let what = format!("the output of `{}`", entry.name);
                let limit = self.inner.config.max_payload_bytes;
                match super::super::payload::fits(&v, limit, &what)
                    .map_err(ToolError::permanent)
                    .and_then(|()| {
                        (self.sealed(v.clone(), &[], &what))
                            .map_err(|e| ToolError::permanent(e.to_string()))
                    }) {
                    Ok(stored) => {
                        entry.output = Some(stored);
                        Ok(v)
                    }
                    Err(e) => Err(e),
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
        let class = result.as_ref().err().map(|e| e.class);
        crate::metrics::tool_call(&self.inner.graph.agent, tool, class, elapsed);
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
    /// [`RunnerConfig::tool_registry_refresh`](crate::runner::RunnerConfig) after it.
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
}

fn entry_error(e: &JournalEntry) -> ToolError {
    ToolError {
        class: e.error_class.unwrap_or(ErrorClass::Permanent),
        message: e.error_message.clone().unwrap_or_default(),
        tool: Some(e.name.clone()),
        retry_after_ms: None,
    }
}
