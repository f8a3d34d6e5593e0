//! `agentctl migrate`: create a store, or bring it to this version's migrations; then
//! migrate the runs of older versions of the agents this binary registers, each in one
//! `migrated` transition under a lease, as a worker would at the run's next step. With
//! `--dry-run`, nothing changes: the pending schema migrations, and per run the state it
//! would become or why it would not migrate.

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agent_core::store::location::StoreLocation;
use agent_core::store::{
    Claimed, ROW_UNREADABLE, RunFilter, RunRecord, RunStatus, Store, StoreError,
};
use agent_core::versions::{MigrationOutcome, MigrationPlan, NotMigrated};
use agent_pg::{PgSetupError, PgStore};
use agent_sqlite::{Access, SqliteOpenError, SqliteStore};
use comfy_table::{Cell, Color};
use serde::Serialize;
use serde_json::Value;

use crate::cli::{Global, MigrateArgs};
use crate::error::{CliError, Result};
use crate::output::{Output, ellipsize, outln};
use crate::registry::Registered;
use crate::store::{location, pg_error, sqlite_error};

/// What a migration of runs needs the user to do for an agent this binary has no code of.
const NO_CODE_HINT: &str = "build a control binary with your agents (docs/versions.md)";

/// How long the lease taken to migrate one run lasts (one write needs far less).
const LEASE_TTL: Duration = Duration::from_secs(30);

/// The store the command works on, and where it is, for people.
struct Opened {
    what: &'static str,
    target: String,
    store: Arc<dyn Store>,
    /// The SQLite store behind `store`, closed at the end (its lock and `-wal` file).
    sqlite: Option<Arc<SqliteStore>>,
}

/// One run of an older version, and what happens (or would happen) to it.
#[derive(Debug, Serialize)]
struct Row {
    run: String,
    agent: String,
    from_version: u32,
    /// The version it moves to: the registered agent's, or for an agent this binary has
    /// no code of, the newest version its graphs and runs show.
    to_version: u32,
    state: String,
    status: RunStatus,
    /// `migrate` (dry run) or `migrated`; `leave`, `quarantine` (a worker would quarantine
    /// it at its next step: nothing is written here), `held` (a worker holds it, or took
    /// it first), `no_code` (this binary does not register the agent).
    action: &'static str,
    to_state: Option<String>,
    to_status: Option<RunStatus>,
    waiting_for: Option<agent_core::store::WaitingFor>,
    /// The state it becomes, in full (dry run), or became.
    #[serde(skip_serializing_if = "Option::is_none")]
    mapped_state: Option<Value>,
    /// The base version of an interrupted step whose calls are carried over.
    resume_base: Option<u64>,
    /// Why it does not migrate.
    reason: Option<String>,
    /// The error code a worker would quarantine it with.
    code: Option<String>,
}

impl Row {
    fn new(record: &RunRecord, to_version: u32, action: &'static str) -> Self {
        Self {
            run: record.id.clone(),
            agent: record.agent.clone(),
            from_version: record.agent_version,
            to_version,
            state: record.state_name.clone(),
            status: record.status,
            action,
            to_state: None,
            to_status: None,
            waiting_for: None,
            mapped_state: None,
            resume_base: None,
            reason: None,
            code: None,
        }
    }

    fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

pub(super) async fn run(
    global: &Global,
    out: Output,
    args: &MigrateArgs,
    agents: &[Registered],
) -> Result<ExitCode> {
    if args.dry_run {
        return dry_run(global, out, agents).await;
    }
    let opened = migrate_schema(global).await?;
    let result = apply(&opened, out, agents).await;
    if let Some(sqlite) = &opened.sqlite {
        sqlite.close().await;
    }
    result
}

/// Bring the schema to this binary's migrations, creating the store if there is none.
async fn migrate_schema(global: &Global) -> Result<Opened> {
    Ok(match location(global)? {
        StoreLocation::Postgres(url) => {
            let store = PgStore::connect(&url, &global.pg_schema)
                .await
                .map_err(|e| pg_error(&e))?;
            store.migrate().await.map_err(|e| {
                CliError::failed(format!(
                    "cannot migrate schema `{}` of PostgreSQL database {}: {e}",
                    global.pg_schema,
                    store.database()
                ))
            })?;
            Opened {
                what: "PostgreSQL",
                target: format!("schema `{}` of {}", global.pg_schema, store.database()),
                store: Arc::new(store),
                sqlite: None,
            }
        }
        StoreLocation::Sqlite(path) => {
            // The worker's open: it takes the file's worker lock, so it refuses to migrate
            // under a worker that is running.
            let store = Arc::new(SqliteStore::open(&path).await.map_err(|e| {
                CliError::failed(format!("cannot migrate the SQLite store at {path}: {e}"))
            })?);
            Opened {
                what: "SQLite",
                target: path,
                store: Arc::clone(&store) as Arc<dyn Store>,
                sqlite: Some(store),
            }
        }
    })
}

/// Migrate every run the registered agents can move, one lease each.
async fn apply(opened: &Opened, out: Output, agents: &[Registered]) -> Result<ExitCode> {
    let store = opened.store.as_ref();
    let worker = format!("agentctl-migrate-{}", std::process::id());
    let mut rows = Vec::new();
    for candidate in candidates(store, agents).await? {
        let Some(agent) = candidate.agent else {
            rows.push(no_code(&candidate));
            continue;
        };
        let record = &candidate.record;
        let planned = plan_row(store, agent, record).await?;
        if planned.action != "migrate" {
            rows.push(planned);
            continue;
        }
        let claimed = match store.claim_run(&record.id, &worker, LEASE_TTL).await {
            Ok(Some(claimed)) => claimed,
            Ok(None) => {
                rows.push(
                    Row::new(record, agent.version, "held")
                        .reason("held by a worker: it migrates at its next step"),
                );
                continue;
            }
            Err(StoreError::Corrupt { message, .. }) => {
                rows.push(
                    Row::new(record, agent.version, "leave")
                        .reason(format!("the row does not read: {message}")),
                );
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let Claimed {
            lease,
            record: fresh,
            ..
        } = claimed;
        let row = match agent.apply(store, &lease, &fresh).await {
            Ok(MigrationOutcome::Migrated(migrated)) => {
                let migrated = *migrated;
                store.release_lease(&lease).await?;
                let mut row = Row::new(&fresh, agent.version, "migrated");
                row.to_state = Some(migrated.state_name.clone());
                row.to_status = Some(migrated.status);
                row.waiting_for.clone_from(&migrated.waiting_for);
                row.resume_base = migrated.migration_resume_base();
                row.mapped_state = Some(migrated.state);
                row
            }
            Ok(MigrationOutcome::Refused(failure)) => {
                store.hand_back(&lease).await?;
                let mut row = Row::new(&fresh, agent.version, "quarantine").reason(
                    quarantine_reason(agent, failure.code.as_str(), &failure.message),
                );
                row.code = Some(failure.code.into());
                row
            }
            Ok(MigrationOutcome::Left(why)) => {
                store.hand_back(&lease).await?;
                Row::new(&fresh, agent.version, "leave").reason(leave_reason(agent, &fresh, why))
            }
            Err(StoreError::LeaseLost { .. } | StoreError::Conflict { .. }) => {
                Row::new(&fresh, agent.version, "held").reason("a worker took it first")
            }
            Err(StoreError::CancelRequested(_)) => {
                store.hand_back(&lease).await?;
                Row::new(&fresh, agent.version, "leave")
                    .reason(NotMigrated::CancelRequested.reason())
            }
            Err(e) => {
                let _ = store.hand_back(&lease).await;
                return Err(e.into());
            }
        };
        rows.push(row);
    }
    if out.json {
        out.print_json(&serde_json::json!({
            "store": opened.what,
            "at": opened.target,
            "migrated": true,
            "runs": rows,
        }));
    } else {
        outln!(
            "the {} store at {} is at this version's migrations",
            opened.what,
            opened.target
        );
        print_rows(out, &rows, false);
    }
    Ok(ExitCode::SUCCESS)
}

/// Change nothing: what `migrate` would do.
async fn dry_run(global: &Global, out: Output, agents: &[Registered]) -> Result<ExitCode> {
    let AsIs {
        what,
        target,
        store: opened,
    } = open_as_is(global).await?;
    let (pending, rows) = match opened {
        Ok(store) => {
            let mut rows = Vec::new();
            for candidate in candidates(store.as_ref(), agents).await? {
                rows.push(match candidate.agent {
                    Some(agent) => plan_row(store.as_ref(), agent, &candidate.record).await?,
                    None => no_code(&candidate),
                });
            }
            (None, rows)
        }
        Err(pending) => (Some(pending), Vec::new()),
    };
    if out.json {
        out.print_json(&serde_json::json!({
            "store": what,
            "at": target,
            "dry_run": true,
            "schema_pending": pending,
            "runs": rows,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    match &pending {
        Some(pending) => {
            outln!("the {what} store at {target}: {pending}");
            out.note(
                "`agentctl migrate` applies the schema's migrations; runs of older versions \
                 are listed once it has",
            );
        }
        None => outln!("the {what} store at {target} is at this version's migrations"),
    }
    if pending.is_none() {
        print_rows(out, &rows, true);
    }
    Ok(ExitCode::SUCCESS)
}

/// The store as it is, for the dry run.
struct AsIs {
    what: &'static str,
    target: String,
    /// The store, or what its schema lacks (no store yet, or migrations pending).
    store: std::result::Result<Arc<dyn Store>, String>,
}

/// Open the store as it is, for the dry run: the store, or what its schema lacks.
async fn open_as_is(global: &Global) -> Result<AsIs> {
    let as_is = |what, target, store| AsIs {
        what,
        target,
        store,
    };
    Ok(match location(global)? {
        StoreLocation::Postgres(url) => {
            let schema = &global.pg_schema;
            match PgStore::open_existing(&url, schema).await {
                Ok(store) => {
                    let target = format!("schema `{schema}` of {}", store.database());
                    as_is("PostgreSQL", target, Ok(Arc::new(store) as Arc<dyn Store>))
                }
                Err(PgSetupError::Level {
                    database, problem, ..
                }) => as_is(
                    "PostgreSQL",
                    format!("schema `{schema}` of {database}"),
                    Err(problem),
                ),
                Err(PgSetupError::NoSchema { .. }) => as_is(
                    "PostgreSQL",
                    format!("schema `{schema}`"),
                    Err("no store yet: `agentctl migrate` creates it".to_owned()),
                ),
                Err(e) => return Err(pg_error(&e)),
            }
        }
        StoreLocation::Sqlite(path) => {
            match SqliteStore::open_existing(&path, Access::ReadOnly).await {
                Ok(store) => as_is("SQLite", path, Ok(Arc::new(store) as Arc<dyn Store>)),
                Err(SqliteOpenError::Level { problem, .. }) => as_is("SQLite", path, Err(problem)),
                Err(SqliteOpenError::NotFound(_)) => as_is(
                    "SQLite",
                    path,
                    Err("no store yet: `agentctl migrate` creates it".to_owned()),
                ),
                Err(e) => return Err(sqlite_error(&e, &path)),
            }
        }
    })
}

/// A run of an older version than the one its agent's code runs.
struct Candidate<'a> {
    record: RunRecord,
    /// The registered agent, or `None` when this binary has no code for it.
    agent: Option<&'a Registered>,
    /// The version it would move to.
    to_version: u32,
}

/// Every run that is not final and is on another version than its agent's newest: the
/// registered agent's version, else the newest version its registered graphs and its runs
/// show. By agent, then run id.
async fn candidates<'a>(store: &dyn Store, agents: &'a [Registered]) -> Result<Vec<Candidate<'a>>> {
    let filter = RunFilter {
        statuses: vec![
            RunStatus::Running,
            RunStatus::Waiting,
            RunStatus::Compensating,
        ],
        ..RunFilter::default()
    };
    let runs = store.list_runs(&filter).await?;
    let mut newest: HashMap<String, u32> = HashMap::new();
    for r in &runs {
        let v = newest.entry(r.agent.clone()).or_insert(r.agent_version);
        *v = (*v).max(r.agent_version);
    }
    for (agent, version) in &mut newest {
        if agents.iter().any(|a| a.name == agent) {
            continue;
        }
        if let Some(graph) = store.agent_graph(agent, None).await? {
            *version = (*version).max(graph.version);
        }
    }
    let mut out: Vec<Candidate<'a>> = runs
        .into_iter()
        .filter_map(|record| {
            let agent = agents.iter().find(|a| a.name == record.agent);
            let to_version = agent.map_or_else(|| newest[&record.agent], |a| a.version);
            let old = match agent {
                Some(a) => record.agent_version != a.version,
                None => record.agent_version < to_version,
            };
            old.then_some(Candidate {
                record,
                agent,
                to_version,
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.record.agent, &a.record.id).cmp(&(&b.record.agent, &b.record.id)));
    Ok(out)
}

fn no_code(candidate: &Candidate<'_>) -> Row {
    Row::new(&candidate.record, candidate.to_version, "no_code").reason(format!(
        "this binary has no code for agent `{}`: {NO_CODE_HINT}",
        candidate.record.agent
    ))
}

/// What migrating `record` would do, as a row (nothing is written).
async fn plan_row(store: &dyn Store, agent: &Registered, record: &RunRecord) -> Result<Row> {
    if let Some(e) = record.error.as_ref().filter(|e| e.code == ROW_UNREADABLE) {
        return Ok(Row::new(record, agent.version, "leave")
            .reason(format!("the row does not read: {}", e.message)));
    }
    Ok(match agent.plan(store, record).await? {
        MigrationPlan::Migrate(commit) => {
            let commit = *commit;
            let mut row = Row::new(record, agent.version, "migrate");
            row.to_state = Some(commit.to_state);
            row.to_status = Some(commit.status);
            row.waiting_for = commit.waiting_for;
            row.resume_base = commit.resume_base;
            row.mapped_state = Some(commit.state);
            row
        }
        MigrationPlan::Quarantine(failure) => {
            let mut row = Row::new(record, agent.version, "quarantine").reason(quarantine_reason(
                agent,
                failure.code.as_str(),
                &failure.message,
            ));
            row.code = Some(failure.code.into());
            row
        }
        MigrationPlan::Leave(why) => {
            Row::new(record, agent.version, "leave").reason(leave_reason(agent, record, why))
        }
    })
}

fn quarantine_reason(agent: &Registered, code: &str, message: &str) -> String {
    format!(
        "a worker of version {} quarantines it at its next step ({code}): {message}",
        agent.version
    )
}

fn leave_reason(agent: &Registered, record: &RunRecord, why: NotMigrated) -> String {
    match why {
        NotMigrated::NoChain if record.agent_version > agent.version => format!(
            "on version {}, newer than this binary's {}: left for a worker that runs it",
            record.agent_version, agent.version
        ),
        NotMigrated::NoChain => format!(
            "no migration chain from version {} (this binary's `{}` version {} migrates from {})",
            record.agent_version,
            agent.name,
            agent.version,
            if agent.older.is_empty() {
                "no version".to_owned()
            } else {
                agent
                    .older
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
        other => other.reason().to_owned(),
    }
}

/// The table, and a summary by action on stderr.
fn print_rows(out: Output, rows: &[Row], dry_run: bool) {
    if rows.is_empty() {
        outln!("no runs of an older version");
        return;
    }
    let mut table = out.table(["RUN", "AGENT", "VERSION", "STATE", "NEW STATE", "RESULT"]);
    for r in rows {
        let new_state = match (&r.to_state, &r.waiting_for) {
            (Some(s), Some(w)) => format!("{s} (waiting for `{w}`)"),
            (Some(s), None) => s.clone(),
            (None, _) => "-".to_owned(),
        };
        let (result, color) = match r.action {
            "migrate" => (
                r.resume_base.map_or_else(
                    || "would migrate".to_owned(),
                    |b| format!("would migrate, carrying the interrupted step's calls over from version {b}"),
                ),
                Color::Green,
            ),
            "migrated" => (
                r.resume_base.map_or_else(
                    || "migrated".to_owned(),
                    |b| format!("migrated, carrying the interrupted step's calls over from version {b}"),
                ),
                Color::Green,
            ),
            "quarantine" => (
                format!("not migrated: {}", r.reason.as_deref().unwrap_or_default()),
                Color::Red,
            ),
            _ => (
                format!("left: {}", r.reason.as_deref().unwrap_or_default()),
                Color::Yellow,
            ),
        };
        table.add_row(vec![
            Cell::new(&r.run),
            Cell::new(&r.agent),
            Cell::new(format!("{} → {}", r.from_version, r.to_version)),
            Cell::new(&r.state),
            Cell::new(new_state),
            out.cell(ellipsize(&result, 200), color),
        ]);
    }
    out.print_table(&table);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rows {
        *counts.entry(r.action).or_default() += 1;
    }
    let n = |action: &str| counts.get(action).copied().unwrap_or(0);
    let moved = if dry_run {
        format!("{} would migrate", n("migrate"))
    } else {
        format!("{} migrated", n("migrated"))
    };
    let mut summary = vec![moved];
    for (count, what) in [
        (n("leave") + n("held"), "left"),
        (n("quarantine"), "a worker would quarantine"),
        (n("no_code"), "without code in this binary"),
    ] {
        if count > 0 {
            summary.push(format!("{count} {what}"));
        }
    }
    outln!("{}", summary.join(", "));
    if n("no_code") > 0 {
        out.note(&format!(
            "this binary has no code for some agents: {NO_CODE_HINT}"
        ));
    }
    if dry_run && n("migrate") > 0 {
        out.note("`migrate` without --dry-run applies it");
    }
}
