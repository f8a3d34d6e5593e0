//! The battery's agent tree (issue 17, part 4): a [`Fanout`] parent starts five [`Leaf`]
//! children, waits for all of them in the store, and publishes the list and sum of their
//! answers; each leaf computes its answer through a write tool of the fake [`Service`], so
//! every child's effect is applied once per idempotency key and every execution is counted.
//!
//! ```text
//!   Fanout:  Start ──spawn_all(5 × Leaf)── wait ──► Publish (write) ──► Joined
//!   Leaf:    Asked ──Work (write)──► Answered
//! ```
//!
//! [`check_tree`] is the tree's checker: the shop's [`check`](crate::check) knows one agent,
//! this one knows both, and how a parent and its children must relate.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use agent_core::runner::{Runner, RunnerConfig, Worker, WorkerConfig, child_run_id};
use agent_core::store::history::{self, VersionPayload};
use agent_core::store::{
    ChainLink, OperatorNote, RunFilter, RunStatus, Store, TransitionKind, transition_hash,
};
use agent_core::tool::{Execute, RetryPolicy, Tool, ToolBox, ToolContext, ToolError, ToolPolicy};
use agent_core::{Agent, Ctx, StepResult, tool::kind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::{PgPool, Row};

use crate::procs::WorkerCounts;
use crate::service::{Latency, Service};
use crate::shop::effect;

/// Children per parent.
pub const CHILDREN: u32 = 5;

/// What a leaf works on.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Job {
    /// The leaf's input.
    pub input: u64,
}

/// A leaf's answer.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Answer {
    /// Computed from the input ([`answer`]).
    pub result: u64,
}

/// What a parent publishes.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Total {
    /// The sum of its children's answers.
    pub sum: u64,
}

/// A publication's receipt.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Receipt {
    /// Derived from the idempotency key.
    pub receipt: String,
}

/// Compute a leaf's answer (write): the service applies the effect once per key.
#[derive(Debug, Clone)]
pub struct Work(pub Arc<Service>);

/// Publish a parent's total (write), once per key.
#[derive(Debug, Clone)]
pub struct Publish(pub Arc<Service>);

/// The answer to `input`, as the service computes it.
#[must_use]
pub fn answer(input: u64) -> u64 {
    input * input + 1
}

/// The input of child `index` of parent number `base`.
#[must_use]
pub fn child_input(base: u64, index: u32) -> u64 {
    base * 10 + u64::from(index)
}

/// The answers parent number `base` must collect, in creation order.
#[must_use]
pub fn expected_results(base: u64) -> Vec<u64> {
    (0..CHILDREN)
        .map(|i| answer(child_input(base, i)))
        .collect()
}

/// As the shop's: generous, the service's own writes wait out a PostgreSQL restart.
fn policy() -> ToolPolicy {
    ToolPolicy {
        timeout: Duration::from_secs(90),
        retry: RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(100),
            multiplier: 2.0,
            jitter: true,
        },
        cache: true,
        journal_with_commit: false,
    }
}

impl Tool for Work {
    const NAME: &'static str = "Work";
    const DESCRIPTION: &'static str = "Compute a leaf's answer.";
    type Kind = kind::Write;
    type Input = Job;
    type Output = Answer;
    fn policy() -> ToolPolicy {
        policy()
    }
}

impl Execute for Work {
    async fn execute(&self, job: Job, cx: &ToolContext) -> Result<Answer, ToolError> {
        effect(&self.0, cx, Self::NAME, &format!("job:{}", job.input)).await?;
        Ok(Answer {
            result: answer(job.input),
        })
    }
}

impl Tool for Publish {
    const NAME: &'static str = "Publish";
    const DESCRIPTION: &'static str = "Publish a parent's total.";
    type Kind = kind::Write;
    type Input = Total;
    type Output = Receipt;
    fn policy() -> ToolPolicy {
        policy()
    }
}

impl Execute for Publish {
    async fn execute(&self, total: Total, cx: &ToolContext) -> Result<Receipt, ToolError> {
        effect(&self.0, cx, Self::NAME, &format!("sum:{}", total.sum)).await?;
        Ok(Receipt {
            receipt: format!("pub:{}", cx.idempotency_key()),
        })
    }
}

/// A child: one keyed write, then its answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Agent)]
#[agent(tools(write(Work)))]
pub enum Leaf {
    /// Compute the answer.
    #[agent(initial, tools(Work), to(Answered))]
    Asked {
        /// Its position among its siblings.
        index: u32,
        /// What to compute.
        input: u64,
    },
    /// Done.
    #[agent(terminal)]
    Answered {
        /// Its position among its siblings.
        index: u32,
        /// What it computed.
        input: u64,
        /// The answer.
        result: u64,
    },
}

/// A parent: five leaves, joined, published.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Agent)]
#[agent(tools(write(Publish)))]
pub enum Fanout {
    /// Start the leaves, wait for all of them, publish their sum.
    #[agent(initial, tools(Publish), children(Leaf), to(Joined))]
    Start {
        /// Parent number: the leaves' inputs derive from it.
        base: u64,
    },
    /// The leaves' answers in creation order, their sum and the publication's receipt.
    #[agent(terminal)]
    Joined {
        /// The answers.
        results: Vec<u64>,
        /// Their sum.
        sum: u64,
        /// The receipt.
        receipt: String,
    },
}

/// The handlers of both agents.
#[derive(Debug, Clone, Copy, Default)]
pub struct Behaviour;

impl LeafHandlers for Behaviour {
    async fn asked(
        &self,
        ctx: Ctx<'_, leaf::Asked>,
        leaf::Asked { index, input }: leaf::Asked,
    ) -> StepResult<leaf::Asked> {
        let a = ctx.call::<Work>(Job { input }).await?;
        Ok(ctx.to(leaf::Answered {
            index,
            input,
            result: a.result,
        }))
    }
}

impl FanoutHandlers for Behaviour {
    async fn start(
        &self,
        ctx: Ctx<'_, fanout::Start>,
        fanout::Start { base }: fanout::Start,
    ) -> StepResult<fanout::Start> {
        let leaves = (0..CHILDREN).map(|index| Leaf::Asked {
            index,
            input: child_input(base, index),
        });
        // Suspends here until every leaf is final (the parent is stored as waiting); the
        // resumed step starts at this line again and finds the same children.
        let mut results = Vec::new();
        for child in ctx.spawn_all::<Leaf>(leaves).await? {
            match child.ok()? {
                Leaf::Answered { result, .. } => results.push(result),
                // Not terminal: a child cannot complete there.
                Leaf::Asked { .. } => {
                    return Err(agent_core::StepError::handler(
                        "a leaf completed in `Asked`",
                    ));
                }
            }
        }
        let sum = results.iter().sum();
        let receipt = ctx.call::<Publish>(Total { sum }).await?.receipt;
        Ok(ctx.to(fanout::Joined {
            results,
            sum,
            receipt,
        }))
    }
}

/// The run id of parent `i`.
#[must_use]
pub fn parent_id(i: u64) -> String {
    format!("fanout-{i:05}")
}

fn leaf_runner(
    store: Arc<dyn Store>,
    svc: &Arc<Service>,
    config: RunnerConfig,
) -> Runner<Leaf, Behaviour> {
    Runner::builder(store, Behaviour, ToolBox::new().with(Work(Arc::clone(svc))))
        .config(config)
        .build()
        .expect("the tool box matches the graph")
}

fn fanout_runner(
    store: Arc<dyn Store>,
    svc: &Arc<Service>,
    config: RunnerConfig,
) -> Runner<Fanout, Behaviour> {
    Runner::builder(
        store,
        Behaviour,
        ToolBox::new().with(Publish(Arc::clone(svc))),
    )
    .config(config)
    .build()
    .expect("the tool box matches the graph")
}

/// Run a worker for each agent of the tree (parents and leaves) on the same store until
/// `stop`; their statistics added up.
pub async fn run_workers(
    store: Arc<dyn Store>,
    svc: &Arc<Service>,
    config: &RunnerConfig,
    workers: &WorkerConfig,
    stop: impl Future<Output = ()>,
) -> WorkerCounts {
    let parents = Worker::new(
        fanout_runner(Arc::clone(&store), svc, config.clone()),
        workers.clone(),
    );
    let leaves = Worker::new(leaf_runner(store, svc, config.clone()), workers.clone());
    let (tx, rx) = tokio::sync::watch::channel(false);
    let until = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let signal = async move {
        stop.await;
        let _ = tx.send(true);
    };
    let (p, l, ()) = tokio::join!(
        parents.run_until(until(rx.clone())),
        leaves.run_until(until(rx)),
        signal
    );
    WorkerCounts {
        runs_driven: p.runs_driven + l.runs_driven,
        leases_lost: p.leases_lost + l.leases_lost,
        errors: p.errors + l.errors,
    }
}

/// Create parents `from..to` (idempotent).
///
/// # Panics
/// When the store refuses.
pub async fn create_parents(db: &crate::db::TestDb, from: u64, to: u64) {
    let svc = Arc::new(Service::new(
        db.pool.clone(),
        "creator",
        Latency::ms(0, 0),
        Latency::ms(0, 0),
    ));
    let store: Arc<dyn Store> = db.store.clone();
    let runner = fanout_runner(store, &svc, RunnerConfig::default());
    for i in from..to {
        let id = parent_id(i);
        runner
            .start(&id, Fanout::Start { base: i })
            .await
            .unwrap_or_else(|e| panic!("start {id}: {e}"));
    }
}

/// What the tree's checker found.
#[derive(Debug, Clone, Default)]
pub struct TreeReport {
    /// Runs by agent and status.
    pub statuses: BTreeMap<String, u64>,
    /// Parents completed with the five expected answers in creation order.
    pub parents_joined: u64,
    /// Children completed with their expected answer, created by their parent's first step.
    pub children_ok: u64,
    /// Parents whose step found its children all final already when it resumed after a
    /// crash, so it never committed the wait (chain start, step): legal, counted.
    pub joined_without_waiting: u64,
    /// Effects applied (rows of `e2e_effects`): leaves' and parents'.
    pub effects: u64,
    /// Tool executions recorded by the service.
    pub executions: u64,
    /// Executions of an already-applied key, by tool (deduplicated by the service).
    pub deduplicated: BTreeMap<String, u64>,
    /// Steps whose calls were executed by more than one worker, one after the other.
    pub steps_taken_over: u64,
    /// Every violation, described.
    pub violations: Vec<String>,
}

impl TreeReport {
    /// Deduplicated executions in all.
    #[must_use]
    pub fn deduplicated_total(&self) -> u64 {
        self.deduplicated.values().sum()
    }

    /// Panic with every violation when there is one.
    ///
    /// # Panics
    /// When an invariant is violated.
    pub fn assert_clean(&self) {
        assert!(
            self.violations.is_empty(),
            "{} violation(s):\n  {}",
            self.violations.len(),
            self.violations
                .iter()
                .take(50)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    }
}

/// One stored transition.
struct Link {
    version: i64,
    from: String,
    to: String,
    kind: String,
    status: String,
    epoch: i64,
    hash: String,
    note: Option<OperatorNote>,
    payload: VersionPayload,
}

/// Check the tree of `parents` parents in the schema behind `pool`, through `store`.
///
/// # Panics
/// When the database cannot be read.
#[allow(clippy::too_many_lines)]
pub async fn check_tree(pool: &PgPool, store: &dyn Store, parents: u64) -> TreeReport {
    let mut report = TreeReport::default();
    let mut v = Vec::new();
    let q = |e: sqlx::Error| panic!("tree checker query: {e}");

    // Every run, by the store's own reading (current state included).
    let all = store
        .list_runs(&RunFilter::default())
        .await
        .unwrap_or_else(|e| panic!("list runs: {e}"));
    let mut runs = HashMap::new();
    for r in all {
        *report
            .statuses
            .entry(format!("{} {}", r.agent, r.status))
            .or_default() += 1;
        if r.agent != Fanout::NAME && r.agent != Leaf::NAME {
            v.push(format!("run {} of unknown agent {}", r.id, r.agent));
        }
        runs.insert(r.id.clone(), r);
    }

    // Parents: completed, joined, with the expected answers in creation order; exactly five
    // children, those of its first step (version 0), with the derived ids.
    let mut owned: HashSet<String> = HashSet::new();
    for i in 0..parents {
        let id = parent_id(i);
        let Some(p) = runs.get(&id) else {
            v.push(format!("parent {id} missing"));
            continue;
        };
        let want = expected_results(i);
        let sum: u64 = want.iter().sum();
        match serde_json::from_value::<Fanout>(p.state.clone()) {
            Ok(Fanout::Joined {
                results,
                sum: s,
                receipt,
            }) if p.status == RunStatus::Completed => {
                let key = agent_core::store::idempotency_key(&id, 0, 1);
                if results == want && s == sum && receipt == format!("pub:{key}") {
                    report.parents_joined += 1;
                } else {
                    v.push(format!(
                        "parent {id} joined {results:?} (sum {s}, receipt {receipt}), expected \
                         {want:?} (sum {sum}, receipt pub:{key})"
                    ));
                }
            }
            other => v.push(format!(
                "parent {id} is {} in {}: {other:?}",
                p.status, p.state_name
            )),
        }
        let mut kids = store
            .list_runs(&RunFilter {
                spawned_by: Some(id.clone()),
                ..RunFilter::default()
            })
            .await
            .unwrap_or_else(|e| panic!("children of {id}: {e}"));
        kids.sort_by(|a, b| a.id.cmp(&b.id));
        let ids: Vec<&str> = kids.iter().map(|k| k.id.as_str()).collect();
        let want_ids: Vec<String> = (0..CHILDREN as usize)
            .map(|k| child_run_id(&id, 0, k))
            .collect();
        if ids != want_ids {
            v.push(format!(
                "parent {id} has children {ids:?}, expected {want_ids:?}"
            ));
        }
        for kid in &kids {
            owned.insert(kid.id.clone());
            let Some(index) = want_ids.iter().position(|w| *w == kid.id) else {
                continue;
            };
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            let input = child_input(i, index);
            let expect = Leaf::Answered {
                index,
                input,
                result: answer(input),
            };
            let by = kid
                .spawned_by
                .as_ref()
                .map(|b| (b.run_id.as_str(), b.version));
            match serde_json::from_value::<Leaf>(kid.state.clone()) {
                Ok(s)
                    if s == expect
                        && kid.status == RunStatus::Completed
                        && kid.agent == Leaf::NAME
                        && by == Some((id.as_str(), 0)) =>
                {
                    report.children_ok += 1;
                }
                other => v.push(format!(
                    "child {} ({}, spawned by {by:?}) is {} in {}: {other:?}, expected \
                     {expect:?}",
                    kid.id, kid.agent, kid.status, kid.state_name
                )),
            }
        }
    }
    // Orphans: a run that is neither a parent nor a child of one.
    let parent_ids: HashSet<String> = (0..parents).map(parent_id).collect();
    for (id, r) in &runs {
        if !parent_ids.contains(id) && !owned.contains(id) {
            v.push(format!(
                "orphan run {id} ({} {}, spawned by {:?})",
                r.agent, r.status, r.spawned_by
            ));
        }
    }
    let want_runs = parents * (1 + u64::from(CHILDREN));
    if runs.len() as u64 != want_runs {
        v.push(format!(
            "{} runs in the store, expected {want_runs}",
            runs.len()
        ));
    }

    // Version chains: 0..=version, declared edges, epochs forward, one final status, the
    // hash chain recomputed from the stored states (a fork would break it); a parent's
    // chain is start, [waiting,] one step: its step was committed (resumed) exactly once.
    let rows = sqlx::query(
        "SELECT run_id, version, from_state, to_state, kind, status, epoch, hash, payload_kind, \
         payload, note_by, note_reason FROM transitions ORDER BY run_id, version",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(q);
    let mut chains: BTreeMap<String, Vec<Link>> = BTreeMap::new();
    for r in &rows {
        let body: Value = r.get("payload");
        chains.entry(r.get("run_id")).or_default().push(Link {
            version: r.get("version"),
            from: r.get("from_state"),
            to: r.get("to_state"),
            kind: r.get("kind"),
            status: r.get("status"),
            epoch: r.get("epoch"),
            hash: r.get("hash"),
            note: r.get::<Option<String>, _>("note_by").map(|by| {
                OperatorNote::new(
                    by,
                    r.get::<Option<String>, _>("note_reason")
                        .unwrap_or_default(),
                )
            }),
            payload: if r.get::<String, _>("payload_kind") == "snapshot" {
                VersionPayload::Snapshot(body)
            } else {
                VersionPayload::Patch(body)
            },
        });
    }
    for (id, run) in &runs {
        let graph = if run.agent == Fanout::NAME {
            Fanout::graph()
        } else {
            Leaf::graph()
        };
        let chain = chains.remove(id).unwrap_or_default();
        let versions: Vec<i64> = chain.iter().map(|l| l.version).collect();
        let want: Vec<i64> = (0..=i64::try_from(run.version).unwrap_or(-1)).collect();
        if versions != want {
            v.push(format!(
                "run {id}: versions {versions:?} are not the chain 0..={}",
                run.version
            ));
            continue;
        }
        let kinds: Vec<&str> = chain.iter().map(|l| l.kind.as_str()).collect();
        let statuses: Vec<&str> = chain.iter().map(|l| l.status.as_str()).collect();
        let shape_ok = if run.agent == Fanout::NAME {
            match kinds.as_slice() {
                ["start", "status", "step"] => statuses == ["running", "waiting", "completed"],
                ["start", "step"] => {
                    report.joined_without_waiting += 1;
                    statuses == ["running", "completed"]
                }
                _ => false,
            }
        } else {
            kinds == ["start", "step"] && statuses == ["running", "completed"]
        };
        if !shape_ok {
            v.push(format!(
                "run {id}: chain {kinds:?} / {statuses:?} is not start, [wait,] one step"
            ));
        }
        let mut payloads = Vec::new();
        let mut snapshot_at = 0;
        let mut prev_hash = String::new();
        let mut prev_epoch = 0;
        for l in chain {
            let legal = match l.kind.as_str() {
                "start" => l.version == 0 && l.from == l.to,
                "status" => l.from == l.to,
                "step" => graph.has_edge(&l.from, &l.to),
                _ => false,
            };
            if !legal {
                v.push(format!(
                    "run {id} v{}: `{}` -> `{}` ({}) is not a declared edge",
                    l.version, l.from, l.to, l.kind
                ));
            }
            if l.epoch < prev_epoch {
                v.push(format!(
                    "run {id} v{}: epoch {} after {prev_epoch}",
                    l.version, l.epoch
                ));
            }
            prev_epoch = l.epoch;
            if matches!(l.payload, VersionPayload::Snapshot(_)) {
                snapshot_at = payloads.len();
            }
            payloads.push(l.payload);
            match history::replay(&payloads[snapshot_at..]) {
                Ok(state) => {
                    let link = TransitionKind::parse(&l.kind)
                        .zip(RunStatus::parse(&l.status))
                        .map(|(kind, status)| ChainLink {
                            run_id: id,
                            version: u64::try_from(l.version).unwrap_or(0),
                            from_state: &l.from,
                            to_state: &l.to,
                            kind,
                            status,
                            epoch: u64::try_from(l.epoch).unwrap_or(0),
                            state: &state,
                            note: l.note.as_ref(),
                        });
                    if link.is_none_or(|link| transition_hash(&prev_hash, &link) != l.hash) {
                        v.push(format!(
                            "run {id} v{}: hash chain broken (fork?)",
                            l.version
                        ));
                    }
                }
                Err(e) => v.push(format!(
                    "run {id} v{}: history does not replay: {e}",
                    l.version
                )),
            }
            prev_hash = l.hash;
        }
    }

    // The journal: a parent journals one child start (#0, the five ids) and one Publish
    // (#1), both at version 0 and succeeded; a leaf one Work (#0) at version 0.
    let journal = sqlx::query(
        "SELECT run_id, version, seq, kind, name, idempotency_key, status, output \
         FROM journal ORDER BY run_id, version, seq",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(q);
    let mut entries: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut succeeded_keys: HashSet<String> = HashSet::new();
    for j in &journal {
        let run: String = j.get("run_id");
        let version: i64 = j.get("version");
        let seq: i32 = j.get("seq");
        let kind: String = j.get("kind");
        let name: String = j.get("name");
        let status: String = j.get("status");
        if kind == "child" {
            let want: Vec<Value> = (0..CHILDREN as usize)
                .map(|k| Value::String(child_run_id(&run, 0, k)))
                .collect();
            if j.get::<Option<Value>, _>("output") != Some(Value::Array(want)) {
                v.push(format!("run {run}: child entry names other children"));
            }
        }
        if let Some(key) = j
            .get::<Option<String>, _>("idempotency_key")
            .filter(|_| status == "succeeded")
        {
            succeeded_keys.insert(key);
        }
        entries
            .entry(run)
            .or_default()
            .push(format!("v{version}#{seq} {kind} {name} {status}"));
    }
    for (id, run) in &runs {
        let got = entries.remove(id).unwrap_or_default();
        let want: &[&str] = if run.agent == Fanout::NAME {
            &["v0#0 child Leaf succeeded", "v0#1 tool Publish succeeded"]
        } else {
            &["v0#0 tool Work succeeded"]
        };
        if got != want {
            v.push(format!("run {id}: journal {got:?}, expected {want:?}"));
        }
    }

    // Effects: exactly one per leaf (Work) and per parent (Publish), each under the key of
    // its succeeded call; nothing applied twice under two keys, nothing lost, no orphan.
    let effects = sqlx::query("SELECT key, tool, run_id, target, executions FROM e2e_effects")
        .fetch_all(pool)
        .await
        .unwrap_or_else(q);
    report.effects = effects.len() as u64;
    let mut per_run: HashMap<String, Vec<String>> = HashMap::new();
    let mut effect_keys = HashSet::new();
    for e in &effects {
        let key: String = e.get("key");
        let tool: String = e.get("tool");
        let run: String = e.get("run_id");
        let executions: i32 = e.get("executions");
        *report.deduplicated.entry(tool.clone()).or_default() +=
            u64::try_from(executions - 1).unwrap_or(0);
        if !succeeded_keys.contains(&key) {
            v.push(format!(
                "orphan effect: {tool} {key} of {run} applied, its call not journaled as succeeded"
            ));
        }
        per_run.entry(run).or_default().push(tool);
        effect_keys.insert(key);
    }
    for key in succeeded_keys.difference(&effect_keys) {
        v.push(format!(
            "lost effect: call {key} succeeded, no effect applied"
        ));
    }
    for (id, run) in &runs {
        let got = per_run.remove(id).unwrap_or_default();
        let want = if run.agent == Fanout::NAME {
            "Publish"
        } else {
            "Work"
        };
        if got != [want] {
            v.push(format!("run {id}: effects {got:?}, expected one {want}"));
        }
    }
    for (run, tools) in per_run {
        v.push(format!("effects {tools:?} of unknown run {run}"));
    }

    // Executions: the calls of one step never interleave between workers (A, B, A).
    let calls = sqlx::query(
        "SELECT run_id, version, worker FROM e2e_calls ORDER BY run_id, version, started_ms, id",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(q);
    report.executions = calls.len() as u64;
    let mut steps: BTreeMap<(String, i64), Vec<String>> = BTreeMap::new();
    for c in &calls {
        steps
            .entry((c.get("run_id"), c.get("version")))
            .or_default()
            .push(c.get("worker"));
    }
    let (taken_over, interleaved) = crate::check::executors_per_step(&steps);
    report.steps_taken_over += taken_over;
    v.extend(interleaved);
    report.violations = v;
    report
}

const _: fn() = || {
    fn is_agent<A: Agent>() {}
    is_agent::<Leaf>();
    is_agent::<Fanout>();
};
