//! The rolling deploy's instrument and checker (issue 20): which worker claimed which run
//! on which version, and what each version's workers did to runs after their migration.
//!
//! The store records who holds a lease now, not who held it before, so the harness adds
//! its own record: a trigger on the store's `runs` table writes a row to `e2e_claims` for
//! every claim (every update that raises the fencing epoch and sets an owner), in the
//! claim's own transaction, with the run's agent version at that moment. Every commit is
//! made under the epoch of a claim, so the owner of each transition is known too.
//!
//! [`check_versions`] adds to [`check`](crate::check::check) (which checks every chain,
//! edge and effect, version-aware):
//!
//! - no worker of version 1 ever claimed a run on version 2, and none committed a version
//!   of a run after its migration (nor the migration itself);
//! - no worker of version 1 executed a tool of a run at or after its migration's version,
//!   or after the migration committed;
//! - every transition but the first was committed under a recorded claim's epoch (the
//!   instrument saw everything);
//! - every run was created on version 1: a run on version 2 was migrated exactly once;
//! - a run done on version 2 applied exactly one `Ship` effect, whose shipment its final
//!   state names; a run that finished on version 1, or was compensated, applied none.

use std::collections::{BTreeMap, HashMap};

use sqlx::{PgPool, Row};

/// The claims table and the trigger that fills it, for the schema `schema`.
#[must_use]
pub fn claims_sql(schema: &str) -> String {
    format!(
        r#"
CREATE TABLE IF NOT EXISTS e2e_claims (
    id            bigserial   PRIMARY KEY,
    run_id        text        NOT NULL,
    epoch         bigint      NOT NULL,
    owner         text        NOT NULL,
    agent_version integer     NOT NULL,
    version       bigint      NOT NULL,
    status        text        NOT NULL,
    -- Whose lease the claim took over (NULL: the run was free), and whether the claim was
    -- charged to the run (`claims_without_progress` went up), to how much.
    found_owner   text,
    charged       boolean     NOT NULL DEFAULT false,
    lost_claims   integer     NOT NULL DEFAULT 0,
    at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION "{schema}".e2e_record_claim() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO "{schema}".e2e_claims (run_id, epoch, owner, agent_version, version, status,
        found_owner, charged, lost_claims)
    VALUES (NEW.id, NEW.epoch, NEW.lease_owner, NEW.agent_version, NEW.version, NEW.status,
        OLD.lease_owner, NEW.claims_without_progress > OLD.claims_without_progress,
        NEW.claims_without_progress);
    RETURN NULL;
END
$$;
CREATE TRIGGER e2e_claims AFTER UPDATE ON "{schema}".runs FOR EACH ROW
    WHEN (NEW.epoch IS DISTINCT FROM OLD.epoch AND NEW.lease_owner IS NOT NULL)
    EXECUTE FUNCTION "{schema}".e2e_record_claim();
"#
    )
}

/// Record every claim in `e2e_claims` from now on.
///
/// # Panics
/// When the database refuses.
pub async fn record_claims(db: &crate::db::TestDb) {
    // The schema's name is the harness's own (`TestDb::create`), never user input.
    sqlx::raw_sql(sqlx::AssertSqlSafe(claims_sql(&db.schema)))
        .execute(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("claims trigger: {e}"));
}

/// What [`check_versions`] found.
#[derive(Debug, Clone, Default)]
pub struct VersionsReport {
    /// Runs by the agent version they ended on.
    pub runs_by_version: BTreeMap<i32, u64>,
    /// `migrated` transitions.
    pub migrated: u64,
    /// Of them, migrations that carried an interrupted version 1 step over (`resume_base`).
    pub carried_over: u64,
    /// Runs that stayed on version 1 but were finished by a version 2 worker (compensation
    /// rounds, which are never migrated).
    pub v1_finished_by_v2: u64,
    /// Claims by version 1 workers, and of them claims of version 1 runs.
    pub claims_by_v1: (u64, u64),
    /// Claims by version 2 workers, and of them claims of version 1 runs.
    pub claims_by_v2: (u64, u64),
    /// Tool executions by version 1 workers on runs later migrated (before the migration).
    pub v1_calls_before_migration: u64,
    /// `Ship` effects applied.
    pub shipped: u64,
    /// Every violation, described.
    pub violations: Vec<String>,
}

impl VersionsReport {
    /// Panic with every violation when there is one.
    ///
    /// # Panics
    /// When an invariant is violated.
    pub fn assert_clean(&self) {
        assert!(
            self.violations.is_empty(),
            "{} version violation(s):\n  {}",
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

/// A migration: its version, when it committed (ms), whether it carried a step over.
struct Migration {
    version: i64,
    at_ms: i64,
    carried: bool,
}

/// Check the version invariants in the schema behind `pool`; `is_v1` tells the worker
/// incarnations that ran version 1.
///
/// # Panics
/// When the database cannot be read.
#[allow(clippy::too_many_lines)]
pub async fn check_versions(pool: &PgPool, is_v1: impl Fn(&str) -> bool) -> VersionsReport {
    let mut report = VersionsReport::default();
    let q = |e: sqlx::Error| panic!("versions checker query: {e}");

    let runs = sqlx::query("SELECT id, status, agent_version, state FROM runs")
        .fetch_all(pool)
        .await
        .unwrap_or_else(q);
    let migrated_rows = sqlx::query(
        "SELECT run_id, version, ts_to_ms(created_at) AS at_ms, note_reason FROM transitions \
         WHERE kind = 'migrated'",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(q);
    let mut migrations: HashMap<String, Vec<Migration>> = HashMap::new();
    for m in &migrated_rows {
        let reason: Option<String> = m.get("note_reason");
        migrations
            .entry(m.get("run_id"))
            .or_default()
            .push(Migration {
                version: m.get("version"),
                at_ms: m.get("at_ms"),
                carried: reason.is_some_and(|r| r.contains("resumes the step")),
            });
    }
    report.migrated = migrated_rows.len() as u64;
    report.carried_over = migrations.values().flatten().filter(|m| m.carried).count() as u64;

    // Claims, by (run, epoch).
    let claims = sqlx::query("SELECT run_id, epoch, owner, agent_version, version FROM e2e_claims")
        .fetch_all(pool)
        .await
        .unwrap_or_else(q);
    let mut owners: HashMap<(String, i64), String> = HashMap::new();
    for c in &claims {
        let run: String = c.get("run_id");
        let owner: String = c.get("owner");
        let agent_version: i32 = c.get("agent_version");
        let epoch: i64 = c.get("epoch");
        let counts = if is_v1(&owner) {
            &mut report.claims_by_v1
        } else {
            &mut report.claims_by_v2
        };
        counts.0 += 1;
        if agent_version == 1 {
            counts.1 += 1;
        }
        if is_v1(&owner) && agent_version != 1 {
            let version: i64 = c.get("version");
            report.violations.push(format!(
                "run {run}: claimed on version {agent_version} (at v{version}, epoch {epoch}) by \
                 {owner}, a version 1 worker"
            ));
        }
        owners.insert((run, epoch), owner);
    }

    // Who committed each transition.
    let transitions = sqlx::query(
        "SELECT run_id, version, kind, epoch FROM transitions WHERE version > 0 \
         ORDER BY run_id, version",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(q);
    let mut last_owner: HashMap<String, String> = HashMap::new();
    for t in &transitions {
        let run: String = t.get("run_id");
        let version: i64 = t.get("version");
        let kind: String = t.get("kind");
        let epoch: i64 = t.get("epoch");
        let Some(owner) = owners.get(&(run.clone(), epoch)) else {
            report.violations.push(format!(
                "run {run} v{version}: committed under epoch {epoch}, which no recorded claim \
                 set"
            ));
            continue;
        };
        let migrated_at = migrations
            .get(&run)
            .and_then(|m| m.first())
            .map(|m| m.version);
        if is_v1(owner) && migrated_at.is_some_and(|m| version >= m) {
            report.violations.push(format!(
                "run {run} v{version} ({kind}): committed by {owner}, a version 1 worker, after \
                 the run's migration at v{}",
                migrated_at.unwrap_or_default()
            ));
        }
        if kind == "migrated" && is_v1(owner) {
            report.violations.push(format!(
                "run {run} v{version}: migrated by {owner}, a version 1 worker"
            ));
        }
        last_owner.insert(run, owner.clone());
    }

    // Tool executions by version 1 workers on migrated runs.
    let calls = sqlx::query("SELECT run_id, version, tool, worker, started_ms FROM e2e_calls")
        .fetch_all(pool)
        .await
        .unwrap_or_else(q);
    for c in &calls {
        let worker: String = c.get("worker");
        if !is_v1(&worker) {
            continue;
        }
        let run: String = c.get("run_id");
        let Some(m) = migrations.get(&run).and_then(|m| m.first()) else {
            continue;
        };
        let version: i64 = c.get("version");
        let tool: String = c.get("tool");
        let started: i64 = c.get("started_ms");
        if version >= m.version || started > m.at_ms {
            report.violations.push(format!(
                "run {run}: {worker}, a version 1 worker, executed {tool} at v{version} (at \
                 {started} ms), after the run's migration at v{} ({} ms)",
                m.version, m.at_ms
            ));
        } else {
            report.v1_calls_before_migration += 1;
        }
    }

    // Shipments.
    let ships = sqlx::query("SELECT key, run_id FROM e2e_effects WHERE tool = 'Ship'")
        .fetch_all(pool)
        .await
        .unwrap_or_else(q);
    report.shipped = ships.len() as u64;
    let mut shipped: HashMap<String, Vec<String>> = HashMap::new();
    for s in &ships {
        shipped
            .entry(s.get("run_id"))
            .or_default()
            .push(s.get("key"));
    }
    for r in &runs {
        let id: String = r.get("id");
        let status: String = r.get("status");
        let agent_version: i32 = r.get("agent_version");
        let state: serde_json::Value = r.get("state");
        *report.runs_by_version.entry(agent_version).or_default() += 1;
        let n = migrations.get(&id).map_or(0, Vec::len);
        let want = usize::from(agent_version == 2);
        if n != want {
            report.violations.push(format!(
                "run {id}: on version {agent_version} after {n} migrations (created on version 1)"
            ));
        }
        if agent_version == 1 && last_owner.get(&id).is_some_and(|o| !is_v1(o)) {
            report.v1_finished_by_v2 += 1;
        }
        let keys = shipped.get(&id).map_or(&[][..], Vec::as_slice);
        let done_on_v2 = agent_version == 2 && status == "completed";
        if done_on_v2 {
            let shipment = state
                .pointer("/Done/shipment")
                .and_then(serde_json::Value::as_str);
            match keys {
                [key] if shipment == Some(format!("ship:{key}").as_str()) => {}
                _ => report.violations.push(format!(
                    "run {id} done on version 2: shipment {shipment:?}, Ship effects {keys:?}"
                )),
            }
        } else if !keys.is_empty() {
            report.violations.push(format!(
                "run {id} ({status} on version {agent_version}): Ship effects {keys:?}, none \
                 expected"
            ));
        }
    }
    report
}

/// What the claims of a soak cost their runs ([`claim_charges`]).
#[derive(Debug, Clone, Default)]
pub struct ClaimCharges {
    /// Claims recorded.
    pub claims: u64,
    /// Claims charged to their run (they found its previous claim lost).
    pub charged: u64,
    /// Charged claims that found a free run: a claim that costs a run by itself (must be 0).
    pub charged_free: u64,
    /// The most charged claims of one run that found the lease of one killed incarnation
    /// (one per crash; more only if that incarnation also lost the run while alive).
    pub most_for_one_death: u64,
    /// Claims made by an incarnation after it was killed (sent just before, committed after).
    pub after_death: u64,
    /// Of them, those the next claim of the run found lost and charged.
    pub after_death_charged: u64,
    /// The most lost claims a run had in a row at any claim.
    pub most_in_a_row: i32,
}

/// What the recorded claims cost: `killed` maps each killed incarnation to when it was
/// killed (milliseconds since the epoch).
///
/// # Panics
/// When the database refuses.
pub async fn claim_charges<S: std::hash::BuildHasher>(
    pool: &PgPool,
    killed: &HashMap<String, i64, S>,
) -> ClaimCharges {
    let rows = sqlx::query(
        "SELECT run_id, epoch, owner, found_owner, charged, lost_claims, \
         (extract(epoch FROM at) * 1000)::bigint AS at_ms FROM e2e_claims ORDER BY run_id, epoch",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| panic!("e2e_claims: {e}"));
    let mut out = ClaimCharges::default();
    let mut for_death: HashMap<(String, String), u64> = HashMap::new();
    // (run, owner) of each claim made after its owner's death, to find the next claim.
    let mut late: Vec<(String, i64)> = Vec::new();
    let mut by_run_epoch: HashMap<(String, i64), bool> = HashMap::new();
    for row in &rows {
        let run: String = row.get("run_id");
        let epoch: i64 = row.get("epoch");
        let owner: String = row.get("owner");
        let found: Option<String> = row.get("found_owner");
        let charged: bool = row.get("charged");
        let at: i64 = row.get("at_ms");
        out.claims += 1;
        out.most_in_a_row = out.most_in_a_row.max(row.get("lost_claims"));
        by_run_epoch.insert((run.clone(), epoch), charged);
        if charged {
            out.charged += 1;
            match found {
                None => out.charged_free += 1,
                Some(found) if killed.contains_key(&found) => {
                    *for_death.entry((run.clone(), found)).or_default() += 1;
                }
                Some(_) => {}
            }
        }
        if killed.get(&owner).is_some_and(|k| at > *k) {
            out.after_death += 1;
            late.push((run.clone(), epoch));
        }
    }
    out.most_for_one_death = for_death.values().copied().max().unwrap_or(0);
    // The claim after a late one took its lease over: was it charged?
    let mut epochs: HashMap<String, Vec<i64>> = HashMap::new();
    for (run, epoch) in by_run_epoch.keys() {
        epochs.entry(run.clone()).or_default().push(*epoch);
    }
    for v in epochs.values_mut() {
        v.sort_unstable();
    }
    for (run, epoch) in late {
        let next = epochs
            .get(&run)
            .and_then(|v| v.iter().find(|e| **e > epoch).copied());
        if let Some(next) = next
            && by_run_epoch.get(&(run, next)).copied().unwrap_or(false)
        {
            out.after_death_charged += 1;
        }
    }
    out
}
