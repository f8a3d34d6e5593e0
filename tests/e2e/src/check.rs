//! The invariant checker: reads the store's tables and the service's record after a test
//! and checks the seven invariants of `DESIGN.md`, as far as a black box can see them.
//!
//! 1. Every run's versions form one chain `0..=version`: no gap, no duplicate, and the hash
//!    chain recomputed from the stored states matches (a fork would break it); lease epochs
//!    never go backwards along the chain.
//! 2. Every transition is a declared edge (or a status change in place); every journaled
//!    call was legal in its state.
//! 3. Every write and hybrid call has exactly one effect: no succeeded keyed call without its
//!    effect (lost), no effect without its succeeded call (orphan), no logical effect applied
//!    under two keys (duplicate); compensations release exactly what was reserved.
//! 4. The router was asked each question once, except by crashed (or paused, or cut off)
//!    workers whose answer could not be journaled: at most one ask per question comes from a
//!    worker that did not crash.
//! 5. At most one worker executed a step at a time: the calls of a `(run, version)` never
//!    interleave between workers (A, B, A), no two live workers' executions of a step
//!    overlap in time, and each run reached a final status once.
//! 6. Runs whose rows a test corrupted are quarantined with no tool call and no version of
//!    their own (their chains verify); no other run is.
//! 7. Storage per version is bounded (bytes per version reported).
//!
//! Runs of the shop's version 2 ([`ShopV2`], issue 20) are checked against the graph of the
//! version they were on at each version of their chain: version 1's before their `migrated`
//! transition, version 2's after it. The `migrated` transition itself must move a version 1
//! state to the state `from_v1` maps it to (the stored states on both sides are compared),
//! once per run, never out of a compensation round. Journal entries of a step interrupted on
//! version 1 and carried over by the migration (its `resume_base`) may be version 2's calls.
//! The version-specific invariants (who claimed what) are in [`crate::versions`].

use std::collections::{BTreeMap, HashMap, HashSet};

use agent_core::Agent;
use agent_core::store::history::{self, VersionPayload};
use agent_core::store::{
    ChainLink, MigrationNote, OperatorNote, RunStatus, TransitionKind, transition_hash,
};
use serde_json::Value;
use sqlx::{PgPool, Row};

use crate::shop::{Shop, cancels};
use crate::shop_v2::ShopV2;

/// What the test knows that the database does not.
#[derive(Debug, Clone, Default)]
pub struct Expect {
    /// How many runs the test created.
    pub runs: u64,
    /// Runs whose rows the test corrupted (must be quarantined).
    pub corrupted: HashSet<String>,
    /// Worker incarnations that were killed, paused past their lease or cut off: they may
    /// leave a question asked twice.
    pub crashed_workers: HashSet<String>,
}

/// What the checker found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Runs by status.
    pub statuses: BTreeMap<String, u64>,
    /// Committed versions (transitions) in all.
    pub versions: u64,
    /// Journal entries in all.
    pub journal_entries: u64,
    /// Effects applied.
    pub effects: u64,
    /// Tool executions recorded by the service (reads included).
    pub executions: u64,
    /// Executions of an already-applied key (deduplicated by the service).
    pub deduplicated: u64,
    /// Router answers recorded.
    pub llm_calls: u64,
    /// Questions asked more than once (each explained by a crashed asker).
    pub reasked: u64,
    /// Steps executed by more than one worker one after the other (takeovers).
    pub steps_taken_over: u64,
    /// Bytes per committed version: median and maximum over runs.
    pub bytes_per_version: (u64, u64),
    /// Every violation, described.
    pub violations: Vec<String>,
}

impl Report {
    /// Panic with every violation when there is one.
    ///
    /// # Panics
    /// When an invariant is violated.
    pub fn assert_clean(&self) {
        assert!(
            self.violations.is_empty(),
            "{} invariant violation(s):\n  {}",
            self.violations.len(),
            self.violations
                .iter()
                .take(50)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    }

    fn violation(&mut self, v: String) {
        self.violations.push(v);
    }
}

const FINAL: [&str; 7] = [
    "completed",
    "compensated",
    "failed",
    "quarantined",
    "dead_lettered",
    "cancelled",
    "terminated",
];

/// Per step: (worker, started, finished) of each execution.
type Span = (String, i64, i64);

/// Check everything in the schema behind `pool`.
///
/// # Panics
/// When the database cannot be read.
#[allow(clippy::too_many_lines)]
pub async fn check(pool: &PgPool, expect: &Expect) -> Report {
    let mut report = Report::default();
    let graph = Shop::graph();
    let graph_v2 = ShopV2::graph();
    let q = |e: sqlx::Error| panic!("checker query: {e}");

    // Runs.
    let runs = sqlx::query("SELECT id, status, version, state_name, error_code FROM runs")
        .fetch_all(pool)
        .await
        .unwrap_or_else(q);
    let mut run_status: HashMap<String, (String, i64, String)> = HashMap::new();
    for r in &runs {
        let id: String = r.get("id");
        let status: String = r.get("status");
        *report.statuses.entry(status.clone()).or_default() += 1;
        run_status.insert(id, (status, r.get("version"), r.get("state_name")));
    }
    if run_status.len() as u64 != expect.runs {
        report.violation(format!(
            "{} runs in the store, {} created",
            run_status.len(),
            expect.runs
        ));
    }
    for (id, (status, _, state)) in &run_status {
        if expect.corrupted.contains(id) {
            if status != "quarantined" {
                report.violation(format!("corrupted run {id} is {status}, not quarantined"));
            }
            continue;
        }
        let want = if cancels(id) {
            "compensated"
        } else {
            "completed"
        };
        if status != want {
            report.violation(format!(
                "run {id} ended {status} in state {state}, expected {want}"
            ));
        }
    }

    // (1), (2), (5): the version chain, its edges and epochs.
    let rows = sqlx::query(
        "SELECT run_id, version, from_state, to_state, kind, status, epoch, hash, payload_kind, \
         payload, note_by, note_reason FROM transitions ORDER BY run_id, version",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(q);
    report.versions = rows.len() as u64;
    let mut by_run: BTreeMap<String, Vec<&sqlx::postgres::PgRow>> = BTreeMap::new();
    for r in &rows {
        by_run.entry(r.get("run_id")).or_default().push(r);
    }
    // Per run: the version of its `migrated` transition and the base of the step it carried
    // over, if any.
    let mut migrations: HashMap<String, (i64, Option<i64>)> = HashMap::new();
    for (id, (_, version, _)) in &run_status {
        let chain = by_run.get(id).map_or(&[][..], Vec::as_slice);
        let versions: Vec<i64> = chain.iter().map(|r| r.get("version")).collect();
        let want: Vec<i64> = (0..=*version).collect();
        if versions != want {
            report.violation(format!(
                "run {id}: versions {versions:?} are not the chain 0..={version}"
            ));
            continue;
        }
        let mut payloads = Vec::new();
        let mut snapshot_at = 0;
        let mut prev_hash = String::new();
        let mut prev_epoch = 0_i64;
        let mut prev_status = String::new();
        let mut prev_state: Option<Value> = None;
        let mut finals = 0_usize;
        let migrated_at: Vec<i64> = chain
            .iter()
            .filter(|r| r.get::<String, _>("kind") == "migrated")
            .map(|r| r.get("version"))
            .collect();
        if migrated_at.len() > 1 {
            report.violation(format!(
                "run {id}: migrated {} times (versions {migrated_at:?})",
                migrated_at.len()
            ));
        }
        let migrated_at = migrated_at.first().copied();
        for r in chain {
            let v: i64 = r.get("version");
            let from: String = r.get("from_state");
            let to: String = r.get("to_state");
            let kind: String = r.get("kind");
            let status: String = r.get("status");
            let epoch: i64 = r.get("epoch");
            let hash: String = r.get("hash");
            let note = r.get::<Option<String>, _>("note_by").map(|by| {
                OperatorNote::new(
                    by,
                    r.get::<Option<String>, _>("note_reason")
                        .unwrap_or_default(),
                )
            });
            let body: Value = r.get("payload");
            let payload = if r.get::<String, _>("payload_kind") == "snapshot" {
                snapshot_at = payloads.len();
                VersionPayload::Snapshot(body)
            } else {
                VersionPayload::Patch(body)
            };
            payloads.push(payload);
            // The graph of the version the run was on when it left `from`.
            let on = if migrated_at.is_some_and(|m| v > m) {
                graph_v2
            } else {
                graph
            };
            let legal = match kind.as_str() {
                "start" => v == 0 && from == to,
                "status" | "cancel" | "terminate" => from == to,
                "step" | "error" => on.has_edge(&from, &to),
                "migrated" => {
                    if let Some(note) = note.as_ref() {
                        let parsed = MigrationNote::parse(note);
                        migrations.insert(
                            id.clone(),
                            (
                                v,
                                parsed
                                    .as_ref()
                                    .and_then(|n| n.resume_base)
                                    .and_then(|b| i64::try_from(b).ok()),
                            ),
                        );
                        if parsed.is_none_or(|n| n.from_version != 1 || n.to_version != 2) {
                            report.violation(format!(
                                "run {id} v{v}: migration note {note:?} is not version 1 -> 2"
                            ));
                        }
                    }
                    if prev_status == "compensating" {
                        report.violation(format!(
                            "run {id} v{v}: migrated in the middle of a compensation round"
                        ));
                    }
                    graph.state(&from).is_some() && graph_v2.state(&to).is_some()
                }
                _ => false,
            };
            if !legal {
                report.violation(format!(
                    "run {id} v{v}: `{from}` -> `{to}` ({kind}) is not a declared edge"
                ));
            }
            if epoch < prev_epoch {
                report.violation(format!(
                    "run {id} v{v}: committed under epoch {epoch} after epoch {prev_epoch}"
                ));
            }
            prev_epoch = epoch;
            prev_status.clone_from(&status);
            if FINAL.contains(&status.as_str()) {
                finals += 1;
            }
            match history::replay(&payloads[snapshot_at..]) {
                Ok(state) => {
                    if kind == "migrated" {
                        // The state after is what the mapping makes of the state before.
                        let mapped = prev_state
                            .clone()
                            .and_then(|before| ShopV2::migrate(1, before))
                            .and_then(Result::ok);
                        if mapped.as_ref() != Some(&state) {
                            report.violation(format!(
                                "run {id} v{v}: migrated to {state}, the mapping of the state \
                                 before gives {mapped:?}"
                            ));
                        }
                    }
                    prev_state = Some(state.clone());
                    let u = u64::try_from(v).unwrap_or(0);
                    let link = TransitionKind::parse(&kind)
                        .zip(RunStatus::parse(&status))
                        .map(|(kind, status)| ChainLink {
                            run_id: id,
                            version: u,
                            from_state: &from,
                            to_state: &to,
                            kind,
                            status,
                            epoch: u64::try_from(epoch).unwrap_or(0),
                            state: &state,
                            note: note.as_ref(),
                        });
                    if link.is_none_or(|link| transition_hash(&prev_hash, &link) != hash) {
                        report.violation(format!("run {id} v{v}: hash chain broken (fork?)"));
                    }
                }
                Err(e) => report.violation(format!("run {id} v{v}: history does not replay: {e}")),
            }
            prev_hash = hash;
        }
        // A corrupted run is quarantined without a version (its row says so, checked
        // above): its chain holds only what the workers committed before, and verifies.
        let want = usize::from(!expect.corrupted.contains(id));
        if finals != want {
            report.violation(format!(
                "run {id}: reached a final status {finals} times in its history, not {want}"
            ));
        }
    }

    // (2), (3): the journal.
    let journal = sqlx::query(
        "SELECT run_id, version, seq, kind, state, name, idempotency_key, status FROM journal",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(q);
    report.journal_entries = journal.len() as u64;
    let compensations: HashSet<&str> = graph
        .tools
        .iter()
        .chain(&graph_v2.tools)
        .filter_map(|t| t.compensation.as_deref())
        .collect();
    let mut succeeded_keys: HashSet<String> = HashSet::new();
    let mut decisions: HashMap<String, u32> = HashMap::new();
    for j in &journal {
        let run: String = j.get("run_id");
        let kind: String = j.get("kind");
        let state: String = j.get("state");
        let name: String = j.get("name");
        let status: String = j.get("status");
        let version: i64 = j.get("version");
        // A step at or after the migration is version 2's; the step the migration carried
        // over (begun on version 1 at `resume_base`) may hold calls of both versions.
        let (on_v1, on_v2) = match migrations.get(&run) {
            Some((m, _)) if version >= *m => (false, true),
            Some((_, base)) => (true, *base == Some(version)),
            None => (true, false),
        };
        let legal = match kind.as_str() {
            "tool" => {
                (on_v1 && graph.allows_tool(&state, &name))
                    || (on_v2 && graph_v2.allows_tool(&state, &name))
            }
            "decision" => name == "router",
            "compensation" => compensations.contains(name.as_str()),
            _ => false,
        };
        if !legal {
            report.violation(format!(
                "run {run}: journaled {kind} `{name}` in state `{state}`"
            ));
        }
        if expect.corrupted.contains(&run) {
            report.violation(format!("corrupted run {run} has a journal entry `{name}`"));
        }
        if kind == "decision" {
            *decisions.entry(run.clone()).or_default() += 1;
        }
        if let Some(key) = j
            .get::<Option<String>, _>("idempotency_key")
            .filter(|_| status == "succeeded")
        {
            succeeded_keys.insert(key);
        }
    }
    for id in run_status
        .keys()
        .filter(|id| !expect.corrupted.contains(*id))
    {
        let n = decisions.get(id).copied().unwrap_or(0);
        if n != 2 {
            report.violation(format!("run {id}: {n} journaled decisions, expected 2"));
        }
    }

    let effects = sqlx::query("SELECT key, tool, run_id, target, executions FROM e2e_effects")
        .fetch_all(pool)
        .await
        .unwrap_or_else(q);
    report.effects = effects.len() as u64;
    let mut effect_keys: HashSet<String> = HashSet::new();
    let mut logical: HashMap<(String, String, String), u32> = HashMap::new();
    let mut reserved: HashMap<String, HashSet<String>> = HashMap::new();
    let mut released: HashMap<String, HashSet<String>> = HashMap::new();
    for e in &effects {
        let key: String = e.get("key");
        let tool: String = e.get("tool");
        let run: String = e.get("run_id");
        let target: String = e.get("target");
        let executions: i32 = e.get("executions");
        report.deduplicated += u64::try_from(executions - 1).unwrap_or(0);
        *logical
            .entry((run.clone(), tool.clone(), target.clone()))
            .or_default() += 1;
        match tool.as_str() {
            "Reserve" => {
                reserved
                    .entry(run.clone())
                    .or_default()
                    .insert(format!("res:{key}"));
            }
            "Release" => {
                released.entry(run.clone()).or_default().insert(target);
            }
            _ => {}
        }
        if !succeeded_keys.contains(&key) {
            report.violation(format!(
                "orphan effect: {tool} {key} of {run} applied, its call not journaled as succeeded"
            ));
        }
        effect_keys.insert(key);
    }
    for ((run, tool, target), n) in &logical {
        if *n > 1 {
            report.violation(format!(
                "duplicate effect: {tool} on {target} of {run} applied under {n} keys"
            ));
        }
    }
    for key in &succeeded_keys {
        if !effect_keys.contains(key) {
            report.violation(format!(
                "lost effect: call {key} succeeded, no effect applied"
            ));
        }
    }
    for (id, (status, _, _)) in &run_status {
        let r = reserved.get(id).cloned().unwrap_or_default();
        let l = released.get(id).cloned().unwrap_or_default();
        let want = if status == "compensated" {
            r.clone()
        } else {
            HashSet::new()
        };
        if l != want {
            report.violation(format!(
                "run {id} ({status}): released {l:?}, reserved {r:?}"
            ));
        }
    }

    // (5) executors per step, (4) questions asked twice.
    let calls = sqlx::query(
        "SELECT run_id, version, worker, started_ms, finished_ms FROM e2e_calls \
         ORDER BY run_id, version, started_ms, id",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(q);
    report.executions = calls.len() as u64;
    let mut steps: BTreeMap<(String, i64), Vec<String>> = BTreeMap::new();
    let mut spans: BTreeMap<(String, i64), Vec<Span>> = BTreeMap::new();
    for c in &calls {
        let run: String = c.get("run_id");
        if expect.corrupted.contains(&run) {
            report.violation(format!("corrupted run {run} executed a tool"));
        }
        let worker: String = c.get("worker");
        let start: i64 = c.get("started_ms");
        // An execution that never finished (its worker was killed) ended at the latest when
        // it started, as far as another worker can tell.
        let end = c.get::<Option<i64>, _>("finished_ms").unwrap_or(start);
        spans
            .entry((run.clone(), c.get("version")))
            .or_default()
            .push((worker.clone(), start, end));
        steps
            .entry((run, c.get("version")))
            .or_default()
            .push(worker);
    }
    for ((run, version), calls) in &spans {
        // Two live workers executing the same step at the same time (crashed, paused and
        // cut-off workers excepted: their in-flight call may finish late, deduplicated by key).
        let live: Vec<&Span> = calls
            .iter()
            .filter(|c| !expect.crashed_workers.contains(&c.0))
            .collect();
        for a in &live {
            if let Some(b) = live.iter().find(|b| b.0 != a.0 && b.1 >= a.1 && b.1 < a.2) {
                report.violation(format!(
                    "run {run} v{version}: {} and {} executed the step at once ({}..{} ms and \
                     from {} ms)",
                    a.0, b.0, a.1, a.2, b.1
                ));
                break;
            }
        }
    }
    let (taken_over, interleaved) = executors_per_step(&steps);
    report.steps_taken_over += taken_over;
    for v in interleaved {
        report.violation(v);
    }
    let llm = sqlx::query(
        "SELECT run_id, question, worker FROM e2e_llm_calls ORDER BY run_id, question, at_ms, id",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(q);
    report.llm_calls = llm.len() as u64;
    let mut asks: BTreeMap<(String, i32), Vec<String>> = BTreeMap::new();
    for a in &llm {
        asks.entry((a.get("run_id"), a.get("question")))
            .or_default()
            .push(a.get("worker"));
    }
    for ((run, question), askers) in &asks {
        if askers.len() > 1 {
            report.reasked += askers.len() as u64 - 1;
            // One answer was journaled; every other came from a worker that crashed (or was
            // paused, or cut off) between the answer and its journal entry. The order of the
            // records does not tell which: a paused worker's answer may land after the
            // taker's.
            let unexplained: Vec<&String> = askers
                .iter()
                .filter(|w| !expect.crashed_workers.contains(*w))
                .collect();
            if unexplained.len() > 1 {
                report.violation(format!(
                    "run {run} question {question} asked {} times (askers {askers:?}); \
                     {unexplained:?} did not crash",
                    askers.len()
                ));
            }
        }
    }

    // (7) bytes per version.
    let sizes = sqlx::query(
        "SELECT r.id, r.version, \
           (SELECT COALESCE(sum(pg_column_size(t.*)), 0) FROM transitions t WHERE t.run_id = r.id) \
         + (SELECT COALESCE(sum(pg_column_size(j.*)), 0) FROM journal j WHERE j.run_id = r.id) \
           AS bytes FROM runs r",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(q);
    let mut per_version: Vec<u64> = sizes
        .iter()
        .map(|s| {
            let bytes: i64 = s.get("bytes");
            let version: i64 = s.get("version");
            u64::try_from(bytes / (version + 1)).unwrap_or(0)
        })
        .collect();
    per_version.sort_unstable();
    if let (Some(mid), Some(max)) = (per_version.get(per_version.len() / 2), per_version.last()) {
        report.bytes_per_version = (*mid, *max);
        if *max > 16 * 1024 {
            report.violation(format!("a run stores {max} bytes per version"));
        }
    }
    report
}

/// The executions of each step `(run, version)`, by worker in the order they started: how
/// many steps more than one worker executed (taken over after a kill), and a violation for
/// each step whose executors interleaved (a worker came back after another had taken over).
pub(crate) fn executors_per_step(
    steps: &BTreeMap<(String, i64), Vec<String>>,
) -> (u64, Vec<String>) {
    let mut taken_over = 0;
    let mut violations = Vec::new();
    for ((run, version), workers) in steps {
        let mut blocks: Vec<&String> = Vec::new();
        for w in workers {
            if blocks.last() != Some(&w) {
                blocks.push(w);
            }
        }
        let distinct: HashSet<&&String> = blocks.iter().collect();
        if distinct.len() > 1 {
            taken_over += 1;
        }
        if distinct.len() != blocks.len() {
            violations.push(format!(
                "run {run} v{version}: two executors interleaved: {blocks:?}"
            ));
        }
    }
    (taken_over, violations)
}
