//! Child runs: a step starts runs of other agents ([`Ctx::spawn_all`]) and waits for them
//! durably; a parent that fails or is cancelled cancels the children it left running.
//!
//! Starting: the step journals one [`EntryKind::Child`] entry (started, naming every child
//! id) before it creates the children, so a cancel of the parent finds them whatever
//! happened next; child ids derive from the parent, the step's version and the index, and
//! [`RunStore::create_run`] is idempotent, so a crash anywhere creates no child twice.
//!
//! Waiting: when the join does not hold yet, the step is suspended and the runner commits
//! the parent as waiting ([`WAIT_ALL_CHILDREN`] or [`WAIT_FIRST_CHILD`]); the store's
//! [`claim_next`](RunStore::claim_next) makes it claimable once the join holds, with nothing
//! written when a child commits. The resumed step runs at the version it began at (the
//! one before the wait), so its journal and idempotency keys are the ones of its first
//! execution.
//!
//! [`Ctx::spawn_all`]: crate::agent::Ctx::spawn_all
//! [`RunStore::create_run`]: crate::store::RunStore::create_run

use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use super::FaultPoint;
use super::cx::StepCx;
use crate::agent::{Join, StepError};
use crate::graph::GraphDescription;
use crate::store::WaitingFor;
use crate::store::{
    CallStatus, EntryKind, NewRun, OperatorNote, RunFilter, RunRecord, RunStatus, Store,
    StoreError, input_hash,
};

/// The id of child `index` started by run `parent`'s step at `version`.
#[must_use]
pub fn child_run_id(parent: &str, version: u64, index: usize) -> String {
    format!("{parent}/v{version}/{index}")
}

/// The `waiting_for` of a parent suspended on `join`.
pub(crate) fn waiting_for(join: Join) -> WaitingFor {
    match join {
        Join::All => WaitingFor::AllChildren,
        Join::First => WaitingFor::FirstChild,
    }
}

/// Whether a run is waiting for its children (so its step resumes at `version - 1`).
pub(crate) fn waits_for_children(record: &RunRecord) -> bool {
    record.status == RunStatus::Waiting
        && record
            .waiting_for
            .as_ref()
            .is_some_and(WaitingFor::is_children)
}

/// Whether `join` holds over these children.
fn holds(join: Join, children: &[RunRecord]) -> bool {
    let all_final = children.iter().all(|c| c.status.is_final());
    match join {
        Join::All => all_final,
        Join::First => all_final || children.iter().any(|c| c.status == RunStatus::Completed),
    }
}

impl StepCx<'_> {
    /// [`StepIo::spawn`](crate::agent::StepIo::spawn).
    pub(crate) fn spawn_children<'a>(
        &'a self,
        child: &'static GraphDescription,
        states: Vec<Value>,
        join: Join,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StepError>> {
        // The entry's index is taken now, in program order, as a tool call's is.
        let seq = self.next_seq();
        Box::pin(async move {
            if self.is_interrupted() {
                return Err(StepError::Interrupted("the step was interrupted".into()));
            }
            match self.start_and_join(seq, child, states, join).await {
                Ok(children) => Ok(children),
                Err(e) => {
                    // Nondeterminism, budgets and a second join must fail the step even if
                    // the handler swallows them; a suspension must suspend it.
                    if !matches!(e, StepError::Interrupted(_)) {
                        self.set_step_error(e.clone());
                    }
                    Err(e)
                }
            }
        })
    }

    async fn start_and_join(
        &self,
        seq: u32,
        child: &'static GraphDescription,
        states: Vec<Value>,
        join: Join,
    ) -> Result<Vec<RunRecord>, StepError> {
        let agent = child.agent.as_str();
        if !self.state.children.iter().any(|c| c == agent) {
            // Unreachable through the typed API (`AllowsChild`); refused anyway.
            return Err(StepError::handler(format!(
                "agent `{agent}` is not a child of state `{}`",
                self.state.name
            )));
        }
        if self.mark_spawned() {
            return Err(StepError::handler(format!(
                "state `{}` started children twice in one visit; start them all with one \
                 `spawn_all` or `spawn_first`",
                self.state.name
            )));
        }
        let config = &self.inner.config;
        if states.len() > config.max_children_per_step as usize {
            return Err(StepError::Budget(format!(
                "a step may start at most {} children (RunnerConfig::max_children_per_step); \
                 this one started {}",
                config.max_children_per_step,
                states.len()
            )));
        }
        let depth = self.depth().await?;
        if depth >= config.max_child_depth {
            return Err(StepError::Budget(format!(
                "run `{}` is {depth} levels below its root; children may nest at most {} \
                 levels (RunnerConfig::max_child_depth)",
                self.run_id, config.max_child_depth
            )));
        }
        let initial = child.initial().map(|s| s.name.clone()).unwrap_or_default();
        let mut runs = Vec::with_capacity(states.len());
        for (index, state) in states.iter().enumerate() {
            let name = state_name(state);
            if name != Some(initial.as_str()) {
                return Err(StepError::handler(format!(
                    "child {index} of `{agent}` starts in `{}`, not in its initial state `{initial}`",
                    name.unwrap_or("?")
                )));
            }
            let id = child_run_id(&self.run_id, self.version, index);
            let mut stored = state.clone();
            self.inner
                .seal_state(&mut stored, &initial)
                .map_err(|e| StepError::Handler(format!("child {index} of `{agent}`: {e}")))?;
            runs.push(
                NewRun::new(id, agent, child.fingerprint(), initial.clone(), stored)
                    .spawned_by(self.run_id.clone(), self.version)
                    .with_labels(crate::trace::child_labels(&self.run_id, self.labels))
                    .with_budget(child.budget),
            );
        }
        let ids: Vec<Value> = runs.iter().map(|r| Value::String(r.id.clone())).collect();
        let input = serde_json::json!({ "states": states });
        let hash = input_hash(&input);

        let journaled = self.journaled(seq);
        if let Some(e) = &journaled
            && (e.kind != EntryKind::Child || e.name != agent || e.input_hash != hash)
        {
            return Err(StepError::Handler(format!(
                "nondeterministic step: entry #{seq} was `{}` with input {}, now children of \
                 `{agent}` with input {}; handlers must start the same children in the same \
                 order when resumed",
                e.name,
                &e.input_hash[..12],
                &hash[..12]
            )));
        }
        if journaled
            .as_ref()
            .is_none_or(|e| e.status != CallStatus::Succeeded)
        {
            let mut entry = self
                .new_entry(seq, EntryKind::Child, agent, input, &[])
                .map_err(|e| StepError::Handler(e.to_string()))?;
            entry.output = Some(Value::Array(ids.clone()));
            if !self.record(entry.clone()).await || self.fault(FaultPoint::ChildrenStarted) {
                return Err(interrupted());
            }
            self.create(child, runs).await?;
            if self.fault(FaultPoint::ChildrenCreated) {
                return Err(interrupted());
            }
            entry.status = CallStatus::Succeeded;
            entry.finished_at = Some(crate::store::now_ms());
            if !self.record(entry).await {
                return Err(interrupted());
            }
        }

        let children = self.children_at(&ids).await?;
        if !holds(join, &children) {
            self.suspend(join);
            return Err(StepError::Interrupted(format!(
                "waiting for {} children of `{agent}`",
                children.iter().filter(|c| !c.status.is_final()).count()
            )));
        }
        if join == Join::First {
            let note = OperatorNote::new(
                format!("run {}", self.run_id),
                "its first child completed; the others are no longer needed",
            );
            for c in children.iter().filter(|c| !c.status.is_final()) {
                self.store_op(|| cancel_quietly(self.inner.store.as_ref(), &c.id, &note))
                    .await?;
            }
        }
        Ok(children)
    }

    /// How many ancestors this run has (0 for a run nobody started).
    async fn depth(&self) -> Result<u32, StepError> {
        let mut depth = 0;
        let mut parent = self.spawned_by.clone();
        while let Some(p) = parent {
            depth += 1;
            if depth > self.inner.config.max_child_depth {
                break;
            }
            let record = self
                .store_op(|| self.inner.store.load_run(&p.run_id))
                .await?;
            parent = record.and_then(|r| r.spawned_by);
        }
        Ok(depth)
    }

    /// Create the children (idempotent on their ids), and register the child agent's graph
    /// so that `agentctl` can draw them.
    async fn create(
        &self,
        child: &'static GraphDescription,
        runs: Vec<NewRun>,
    ) -> Result<(), StepError> {
        self.store_op(|| self.inner.store.register_agent(child))
            .await?;
        for run in runs {
            self.store_op(|| self.inner.store.create_run(run.clone()))
                .await?;
        }
        Ok(())
    }

    /// The children with these ids, in this order.
    async fn children_at(&self, ids: &[Value]) -> Result<Vec<RunRecord>, StepError> {
        let filter = RunFilter {
            spawned_by: Some(self.run_id.clone()),
            ..RunFilter::default()
        };
        let mut found = self
            .store_op(|| self.inner.store.list_runs(&filter))
            .await?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let id = id.as_str().unwrap_or_default();
            let Some(i) = found.iter().position(|r| r.id == id) else {
                return Err(StepError::handler(format!(
                    "child run `{id}` of run `{}` is missing from the store",
                    self.run_id
                )));
            };
            let mut child = found.swap_remove(i);
            // The parent reads the child's state as it ran: its sealed values opened.
            if let Err(e) = self.inner.config.seal_keys.open_all(&mut child.state) {
                return Err(StepError::handler(format!("child run `{id}`: {e}")));
            }
            out.push(child);
        }
        Ok(out)
    }

    /// A store call with the runner's retries of transient errors; any other failure stops
    /// the step without committing (as a failed journal write does).
    async fn store_op<'f, T, F, Fut>(&'f self, op: F) -> Result<T, StepError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>> + 'f,
    {
        let mut attempt = 0;
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(StoreError::AlreadyExists(id)) => {
                    return Err(StepError::Handler(format!(
                        "nondeterministic step: child run `{id}` exists with other content; \
                         handlers must start the same children when resumed"
                    )));
                }
                Err(e) if e.is_transient() && attempt < self.inner.config.store_retries => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(50 << attempt.min(6))).await;
                }
                Err(e) => {
                    self.set_fatal(e.into());
                    return Err(interrupted());
                }
            }
        }
    }
}

fn interrupted() -> StepError {
    StepError::Interrupted("the step was interrupted".into())
}

/// The variant name of a serialized state (serde's externally tagged form).
fn state_name(state: &Value) -> Option<&str> {
    match state {
        Value::String(s) => Some(s),
        Value::Object(o) if o.len() == 1 => o.keys().next().map(String::as_str),
        _ => None,
    }
}

/// Cancel a run, taking "already final" and "gone" as done.
async fn cancel_quietly(
    store: &dyn Store,
    run_id: &str,
    note: &OperatorNote,
) -> Result<(), StoreError> {
    match store.cancel_run(run_id, note).await {
        Ok(_) | Err(StoreError::RunIsFinal { .. } | StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Cancel the children a run started that are still running, except those of states that
/// declare `children_outlive`: before a parent's failure is committed, and when a
/// compensating parent begins its saga (so an operator's cancel reaches them too). Read from
/// the parent's journal, so a child journaled as started but never created is skipped, and
/// a crash in between cancels the rest at the next attempt.
pub(crate) async fn cancel_children(
    store: &dyn Store,
    graph: &GraphDescription,
    record: &RunRecord,
    why: &str,
) -> Result<u64, StoreError> {
    let journal = store.journal(&record.id, None).await?;
    let note = OperatorNote::new(format!("run {}", record.id), why);
    let mut cancelled = 0;
    for entry in journal.iter().filter(|e| e.kind == EntryKind::Child) {
        if graph
            .state(&entry.state)
            .is_some_and(|s| s.children_outlive)
        {
            continue;
        }
        let ids = entry.output.as_ref().and_then(Value::as_array);
        for id in ids.into_iter().flatten().filter_map(Value::as_str) {
            let Some(child) = store.load_run(id).await? else {
                continue;
            };
            if child.status.is_final() || child.cancel_requested.is_some() {
                continue;
            }
            cancel_quietly(store, id, &note).await?;
            cancelled += 1;
        }
    }
    Ok(cancelled)
}

#[cfg(test)]
mod tests {
    use super::{child_run_id, state_name};

    #[test]
    fn child_ids_name_parent_version_and_index() {
        assert_eq!(child_run_id("report-1", 2, 0), "report-1/v2/0");
        assert_eq!(child_run_id(&child_run_id("r", 1, 3), 4, 5), "r/v1/3/v4/5");
    }

    #[test]
    fn state_names_of_serialized_variants() {
        assert_eq!(state_name(&serde_json::json!("Done")), Some("Done"));
        assert_eq!(
            state_name(&serde_json::json!({ "Search": { "q": "x" } })),
            Some("Search")
        );
        assert_eq!(state_name(&serde_json::json!({ "a": 1, "b": 2 })), None);
        assert_eq!(state_name(&serde_json::json!(3)), None);
    }
}

/// The mediation matrix of child starts, below the typed API (which makes an undeclared
/// child a compile error): in every state of a parent, asking the runner to start each
/// candidate agent (the declared child, another agent, the parent itself, lookalike names)
/// starts runs if and only if the agent is declared for that state.
#[cfg(test)]
mod mediation {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    use super::super::Runner;
    use super::super::cx::StepCx;
    use crate::agent::{Join, StepError};
    use crate::graph::GraphDescription;
    use crate::store::memory::MemoryStore;
    use crate::store::{Claimed, HistoryStore, NewRun, RunFilter, RunStore, Store};
    use crate::{Agent, Ctx, StepResult, ToolBox};

    /// The child: its initial state takes the items the matrix starts it with.
    #[derive(Clone, Debug, Serialize, Deserialize, Agent)]
    #[agent(crate = ::agent_core)]
    enum Kid {
        #[agent(initial, to(Done))]
        Working { items: Vec<String> },
        #[agent(terminal)]
        Done,
    }

    /// An agent no state of the parent declares.
    #[derive(Clone, Debug, Serialize, Deserialize, Agent)]
    #[agent(crate = ::agent_core)]
    enum Stranger {
        #[agent(initial, to(Done))]
        Working { items: Vec<String> },
        #[agent(terminal)]
        Done,
    }

    /// The parent: one state declares `Kid`, one declares no child, two are terminal.
    #[derive(Clone, Debug, Serialize, Deserialize, Agent)]
    #[agent(crate = ::agent_core)]
    enum Parent {
        #[agent(initial, to(Splitting))]
        Preparing,
        #[agent(children(Kid), to(Settled, Short))]
        Splitting,
        #[agent(terminal)]
        Settled,
        #[agent(terminal)]
        Short,
    }

    struct Handlers;

    impl ParentHandlers for Handlers {
        async fn preparing(
            &self,
            ctx: Ctx<'_, parent::Preparing>,
            _: parent::Preparing,
        ) -> StepResult<parent::Preparing> {
            Ok(ctx.to(parent::Splitting))
        }

        async fn splitting(
            &self,
            ctx: Ctx<'_, parent::Splitting>,
            _: parent::Splitting,
        ) -> StepResult<parent::Splitting> {
            Ok(ctx.to(parent::Settled))
        }
    }

    fn renamed(graph: &GraphDescription, name: &str) -> &'static GraphDescription {
        let mut g = graph.clone();
        name.clone_into(&mut g.agent);
        Box::leak(Box::new(g))
    }

    #[tokio::test]
    async fn a_child_starts_iff_declared_for_the_state() {
        let candidates: Vec<&'static GraphDescription> = vec![
            Kid::graph(),
            Stranger::graph(),
            Parent::graph(),
            renamed(Kid::graph(), "kid"),
            renamed(Kid::graph(), "Kid "),
            renamed(Kid::graph(), "Kid\u{200b}"),
        ];
        let mut cells = 0;
        let mut declared_cells = 0;
        for state in &Parent::graph().states {
            for child in &candidates {
                let store = Arc::new(MemoryStore::new());
                let runner = Runner::<Parent, Handlers>::new(
                    Arc::clone(&store) as Arc<dyn Store>,
                    Handlers,
                    ToolBox::new(),
                )
                .unwrap();
                let id = format!("parent-{}", state.name);
                store
                    .create_run(NewRun::new(
                        &id,
                        "Parent",
                        "f",
                        &state.name,
                        serde_json::json!({}),
                    ))
                    .await
                    .unwrap();
                let Claimed { lease, record, .. } = store
                    .claim_run(&id, "w", Duration::from_secs(30))
                    .await
                    .unwrap()
                    .unwrap();
                let cache = crate::runner::caches::unloaded_read_cache();
                let cx = StepCx::new(
                    &runner.inner,
                    &record,
                    state,
                    lease,
                    BTreeMap::new(),
                    None,
                    &cache,
                );
                let initial = child.initial().map_or("?", |s| s.name.as_str());
                let states = vec![serde_json::json!({ initial: { "items": ["a"] } })];
                let outcome = cx.spawn_children(child, states, Join::All).await;
                let started = store
                    .list_runs(&RunFilter {
                        spawned_by: Some(id.clone()),
                        ..RunFilter::default()
                    })
                    .await
                    .unwrap();
                let declared = state.children.contains(&child.agent);
                let cell = format!("state `{}`, child `{}`", state.name, child.agent);
                if declared {
                    declared_cells += 1;
                    assert!(
                        matches!(outcome, Err(StepError::Interrupted(_))),
                        "{cell}: a declared child starts and the step waits: {outcome:?}"
                    );
                    assert_eq!(started.len(), 1, "{cell}");
                } else {
                    assert!(
                        matches!(&outcome, Err(StepError::Handler(m)) if m.contains("is not a child")),
                        "{cell}: refused: {outcome:?}"
                    );
                    assert!(started.is_empty(), "{cell}: nothing may be started");
                    assert!(
                        cx.take_recorded().failure.is_some(),
                        "{cell}: the step fails"
                    );
                }
                cells += 1;
            }
        }
        assert_eq!(cells, Parent::graph().states.len() * candidates.len());
        assert_eq!(declared_cells, 1, "exactly one cell is a declared child");
    }
}
