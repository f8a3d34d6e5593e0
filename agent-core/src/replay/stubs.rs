//! The model and the tools as a replay sees them: stubs that answer from the journal of the
//! step being replayed, and never execute anything.
//!
//! A tool call reaches its stub at its journal index (`ToolContext::call_index`), the index
//! the runner gives every call in program order: the stub answers with the journaled
//! result when the journal has a call of the same tool with the same input hash at that
//! index (the rule the runner applies when it resumes a step), and records a divergence
//! otherwise. Decisions and child starts are not stubbed: they are seeded in the replay's
//! store, and the runner's own resume path serves (and checks) them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde_json::Value;

use super::report::{DivergenceKind, first_difference};
use crate::router::{OptionKind, RouteRequest, Router, RouterError, RouterReply};
use crate::runner::imported;
use crate::secrets::{SealKeys, shown};
use crate::store::{CallStatus, EntryKind, JournalEntry, input_hash};
use crate::tool::{DynTool, ErrorClass, ToolContext, ToolError, ToolPolicy};

/// What the stubs of one replay share: the journal of the step being replayed, the calls
/// answered from it, and the first divergence they saw.
#[derive(Debug, Default)]
pub(crate) struct Probe {
    step: Mutex<StepJournal>,
    keys: SealKeys,
}

#[derive(Debug, Default)]
struct StepJournal {
    /// The step's journal entries, by index.
    recorded: BTreeMap<u32, JournalEntry>,
    /// The indices of the tool calls answered.
    answered: BTreeSet<u32>,
    /// The first divergence a stub saw.
    first: Option<DivergenceKind>,
}

impl Probe {
    pub(crate) fn new(keys: SealKeys) -> Self {
        Self {
            step: Mutex::default(),
            keys,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StepJournal> {
        self.step
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Begin the replay of a step whose journal is `entries`.
    pub(crate) fn begin(&self, entries: impl IntoIterator<Item = JournalEntry>) {
        *self.lock() = StepJournal {
            recorded: entries.into_iter().map(|e| (e.seq, e)).collect(),
            ..StepJournal::default()
        };
    }

    /// The first divergence the stubs saw in the step, taken.
    pub(crate) fn take_divergence(&self) -> Option<DivergenceKind> {
        self.lock().first.take()
    }

    /// The journaled tool calls of the step the new code did not make, as the divergence
    /// of the first.
    pub(crate) fn missing_call(&self) -> Option<DivergenceKind> {
        let step = self.lock();
        step.recorded
            .values()
            .find(|e| e.kind == EntryKind::Tool && !step.answered.contains(&e.seq))
            .map(|e| DivergenceKind::MissingCall {
                seq: e.seq,
                tool: e.name.clone(),
            })
    }

    fn diverge(step: &mut StepJournal, kind: DivergenceKind) -> ToolError {
        let message = format!("replay: {kind:?}");
        step.first.get_or_insert(kind);
        ToolError::permanent(message)
    }

    /// The answer to call `seq` of `tool` with `input`: the journaled result, or an error
    /// and a divergence. The call is compared as the runner compares it on resume: the
    /// same tool, journaled under the schema the tool has now (an imported tool's), with
    /// the same input hash (an imported tool's arguments and its schema's fingerprint).
    fn answer(&self, tool: &dyn DynTool, input: &Value, seq: u32) -> Result<Value, ToolError> {
        let name = tool.name();
        let mut step = self.lock();
        let Some(entry) = step.recorded.get(&seq).cloned() else {
            let input = shown(input).into_owned();
            return Err(Self::diverge(
                &mut step,
                DivergenceKind::UnjournaledCall {
                    seq,
                    tool: name.to_owned(),
                    input,
                },
            ));
        };
        if entry.kind != EntryKind::Tool || entry.name != name {
            let recorded = if entry.kind == EntryKind::Tool {
                entry.name.clone()
            } else {
                format!("{} {}", entry.kind.as_str(), entry.name)
            };
            return Err(Self::diverge(
                &mut step,
                DivergenceKind::OtherTool {
                    seq,
                    recorded,
                    now: name.to_owned(),
                },
            ));
        }
        if imported::schema_changed(tool, &entry).is_some() {
            let recorded = imported::journaled_fingerprint(&entry)
                .unwrap_or_default()
                .to_owned();
            return Err(Self::diverge(
                &mut step,
                DivergenceKind::SchemaChanged {
                    seq,
                    tool: name.to_owned(),
                    recorded,
                    now: tool.schema_fingerprint().unwrap_or_default(),
                },
            ));
        }
        if entry.input_hash != input_hash(&imported::journaled_input(tool, input.clone())) {
            // An imported tool's arguments, compared without the fingerprint they were
            // journaled with (the same on both sides once the schema is).
            let recorded = shown(imported::journaled_arguments(tool, &entry.input)).into_owned();
            let now = shown(input).into_owned();
            let at = first_difference(&recorded, &now).unwrap_or_default();
            return Err(Self::diverge(
                &mut step,
                DivergenceKind::OtherArguments {
                    seq,
                    tool: name.to_owned(),
                    recorded,
                    now,
                    at,
                },
            ));
        }
        step.answered.insert(seq);
        match entry.status {
            CallStatus::Succeeded => {
                let mut output = entry.output.unwrap_or(Value::Null);
                // What the first execution returned, opened as the runner opens it.
                self.keys
                    .open_all(&mut output)
                    .map_err(|e| ToolError::permanent(format!("replay: {e}")))?;
                Ok(output)
            }
            CallStatus::Failed => Err(ToolError {
                class: entry.error_class.unwrap_or(ErrorClass::Permanent),
                message: entry.error_message.unwrap_or_default(),
                tool: Some(entry.name),
                retry_after_ms: None,
            }),
            CallStatus::Started => Err(Self::diverge(
                &mut step,
                DivergenceKind::UnfinishedCall {
                    seq,
                    tool: name.to_owned(),
                },
            )),
        }
    }

    /// The model was asked.
    fn asked(&self, request: &RouteRequest) {
        let options = request
            .options
            .iter()
            .map(|o| {
                let kind = match o.kind {
                    OptionKind::Transition => "transition",
                    OptionKind::Tool => "tool",
                };
                format!("{kind} {}", o.name)
            })
            .collect();
        self.lock()
            .first
            .get_or_insert(DivergenceKind::UnjournaledAsk { options });
    }
}

/// A tool as a replay calls it: the real tool's name, kind, schemas and compensation, its
/// calls answered by the [`Probe`] and never executed. One attempt per call: the journal
/// holds the call's outcome after all its attempts.
pub(crate) struct StubTool {
    real: Arc<dyn DynTool>,
    probe: Arc<Probe>,
}

impl StubTool {
    pub(crate) fn new(real: Arc<dyn DynTool>, probe: Arc<Probe>) -> Self {
        Self { real, probe }
    }
}

impl DynTool for StubTool {
    fn name(&self) -> &'static str {
        self.real.name()
    }

    fn description(&self) -> &'static str {
        self.real.description()
    }

    fn kind(&self) -> crate::tool::ToolKind {
        self.real.kind()
    }

    fn policy(&self) -> ToolPolicy {
        let mut policy = self.real.policy();
        policy.retry.max_attempts = 1;
        policy.cache = false;
        policy.journal_with_commit = false;
        policy
    }

    fn input_schema(&self) -> Value {
        self.real.input_schema()
    }

    fn check_input(&self, input: &Value) -> Result<(), String> {
        self.real.check_input(input)
    }

    fn check_typed(&self, input: &Value) -> Result<(), String> {
        self.real.check_typed(input)
    }

    fn schema_fingerprint(&self) -> Option<String> {
        self.real.schema_fingerprint()
    }

    fn call_json<'a>(
        &'a self,
        input: Value,
        cx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        let answer = self.probe.answer(self, &input, cx.call_index);
        Box::pin(async move { answer })
    }

    fn compensation(
        &self,
        input: &Value,
        output: &Value,
    ) -> Option<Result<(String, Value), String>> {
        self.real.compensation(input, output)
    }

    fn compensated_by(&self) -> Option<String> {
        self.real.compensated_by()
    }
}

/// The model as a replay asks it: never. A decision the step journaled is served by the
/// runner from the journal; an ask that reaches this router is a divergence.
#[derive(Debug)]
pub(crate) struct StubRouter {
    pub(crate) probe: Arc<Probe>,
}

#[async_trait]
impl Router for StubRouter {
    async fn decide(&self, request: &RouteRequest) -> Result<RouterReply, RouterError> {
        self.probe.asked(request);
        Err(RouterError::new(
            ErrorClass::Permanent,
            "replay: the model is not asked in a replay",
        ))
    }
}
