//! Reads whose logic is the same on both stores, over [`SqlReads`]: each store says how to
//! run a statement bound to a run, and gives its dialect's text where it differs.

use agent_core::graph::GraphDescription;
use agent_core::store::{
    InspectedRun, JournalEntry, Lease, NewRun, RetentionPolicy, RunRecord, SignalRecord,
    StateAtVersion, Store, StoreError, ToolSwitch, TransitionRecord, VersionSpan,
};
use async_trait::async_trait;
use sqlx::query::Query;
use sqlx::{Database, Encode, Executor, IntoArguments, Type};

use crate::rows::{self, SqlRow};
use crate::{corrupt, sql, to_i64, to_u64};

/// A statement's parameter, as the shared reads bind them (`$1`, `$2`, … in order).
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// Text.
    Text(&'a str),
    /// Text or `NULL`.
    OptText(Option<&'a str>),
    /// A `bigint`.
    Int(i64),
    /// A `bigint` or `NULL`.
    OptInt(Option<i64>),
    /// A boolean.
    Bool(bool),
}

/// Bind `args` to `query`, in order.
pub fn bind<'q, DB: Database>(
    mut query: Query<'q, DB, DB::Arguments>,
    args: &[Arg<'_>],
) -> Query<'q, DB, DB::Arguments>
where
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> Option<&'a str>: Encode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + Type<DB>,
    for<'a> Option<i64>: Encode<'a, DB> + Type<DB>,
    for<'a> bool: Encode<'a, DB> + Type<DB>,
{
    for arg in args {
        query = match *arg {
            Arg::Text(v) => query.bind(v),
            Arg::OptText(v) => query.bind(v),
            Arg::Int(v) => query.bind(v),
            Arg::OptInt(v) => query.bind(v),
            Arg::Bool(v) => query.bind(v),
        };
    }
    query
}

/// The rows of `sql` with `args` bound in order, on `executor` (a pool, or a
/// transaction's connection).
///
/// # Errors
/// The driver's error.
pub async fn fetch_all<'c, DB, E>(
    executor: E,
    sql: &'static str,
    args: &[Arg<'_>],
) -> sqlx::Result<Vec<DB::Row>>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> Option<&'a str>: Encode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + Type<DB>,
    for<'a> Option<i64>: Encode<'a, DB> + Type<DB>,
    for<'a> bool: Encode<'a, DB> + Type<DB>,
{
    bind(sqlx::query(sql), args).fetch_all(executor).await
}

/// What the shared reads need of a store.
#[async_trait]
pub trait SqlReads: Store + Sync {
    /// The driver's row.
    type Row: SqlRow + Send;

    /// The latest graph of an agent in the column `graph`, `$1` the agent, `$2` a
    /// fingerprint or `NULL` for the latest registered.
    const AGENT_GRAPH: &'static str;
    /// A run's history in the columns of [`rows::TransitionRow`], `$1` the run.
    const HISTORY: &'static str;
    /// A run's journal in the columns of [`rows::EntryRow`], `$1` the run, `$2` a version
    /// or `NULL` for all.
    const JOURNAL: &'static str;
    /// As [`HISTORY`](Self::HISTORY) from version `$2` on, at most `$3` rows.
    const HISTORY_FROM: &'static str;
    /// As [`JOURNAL`](Self::JOURNAL) from `($2, $3)` (version, seq) on, at most `$4` rows.
    const JOURNAL_FROM: &'static str;
    /// A run's pending signals in the columns of [`rows::SignalRow`], `$1` the run.
    const PENDING_SIGNALS: &'static str;
    /// The tool switches in the columns of [`rows::SwitchRow`].
    const TOOL_SWITCHES: &'static str;
    /// Give a claim back uncounted, `$1` the run, `$2` the lease's epoch.
    const HAND_BACK: &'static str;
    /// Hand a running run back until `$3` (its `wake_at`), waiting for `$4`, uncounted:
    /// `$1` the run, `$2` the lease's epoch; its `id` when it was.
    const DEFER_RUN: &'static str;
    /// A run row in the columns of [`rows::RunRow`], `$1` the run.
    const LOAD_RUN: &'static str;
    /// A run's records positioned at or after `$2`, in the columns of
    /// [`EventRow`](crate::events::EventRow), `$1` the run, each arm cut at `$3` rows
    /// (a function: the text is built once, on first use).
    fn run_events_sql() -> &'static str;
    /// As [`run_events_sql`](Self::run_events_sql) for every run of agent `$1`, or of all
    /// agents when `NULL`.
    fn scope_events_sql() -> &'static str;
    /// [`sql::prune_candidates`] in the store's dialect.
    fn prune_candidates_sql() -> &'static str;
    /// [`sql::expired_runs`] in the store's dialect.
    fn expired_runs_sql() -> &'static str;

    /// The rows of `sql` with `args` bound in order.
    ///
    /// # Errors
    /// The store's error for a failed statement.
    async fn fetch(
        &self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Vec<Self::Row>, StoreError>;

    /// As [`fetch`](Self::fetch), for the reads of event followers and of retention: a
    /// store whose writes and reads share a connection reads them elsewhere, so that
    /// neither holds up a commit (nor waits for a turn behind every commit).
    ///
    /// # Errors
    /// The store's error for a failed statement.
    async fn fetch_events(
        &self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Vec<Self::Row>, StoreError> {
        self.fetch(sql, args).await
    }

    /// Create `new` as a fork of `parent` (run and version), as `HistoryStore::fork` does
    /// (idempotent: the same fork again returns the run it made).
    ///
    /// # Errors
    /// As `HistoryStore::fork`.
    async fn insert_fork(&self, new: &NewRun, parent: (&str, u64))
    -> Result<RunRecord, StoreError>;
}

/// A run's stored `(version, epoch)`, `None` when it does not exist.
///
/// # Errors
/// The store's error for a failed statement; [`StoreError::Corrupt`] when they do not read.
pub async fn head_of<S: SqlReads>(
    store: &S,
    run_id: &str,
) -> Result<Option<(u64, u64)>, StoreError> {
    let rows = store.fetch(sql::RUN_HEAD, &[Arg::Text(run_id)]).await?;
    rows.first().map(|r| rows::head(run_id, r)).transpose()
}

/// Why a write fenced by `lease` matched no row: the run is gone
/// ([`StoreError::NotFound`]), or the epoch moved ([`StoreError::LeaseLost`]).
///
/// # Errors
/// The store's error for a failed statement; [`StoreError::Corrupt`] when the head does
/// not read.
pub async fn fenced_out<S: SqlReads>(store: &S, lease: &Lease) -> Result<StoreError, StoreError> {
    Ok(if head_of(store, &lease.run_id).await?.is_none() {
        StoreError::NotFound(lease.run_id.clone())
    } else {
        StoreError::LeaseLost {
            run_id: lease.run_id.clone(),
            epoch: lease.epoch,
        }
    })
}

/// Whether the run has a row, however much of it reads (an empty listing of a damaged
/// run is still a listing, not an error).
async fn run_exists<S: SqlReads>(store: &S, run_id: &str) -> Result<bool, StoreError> {
    Ok(!store
        .fetch(sql::RUN_HEAD, &[Arg::Text(run_id)])
        .await?
        .is_empty())
}

/// `HistoryStore::inspect_run`.
///
/// # Errors
/// The store's error for a failed statement.
pub async fn inspect_run<S: SqlReads>(
    store: &S,
    run_id: &str,
) -> Result<Option<InspectedRun>, StoreError> {
    let rows = store.fetch(S::LOAD_RUN, &[Arg::Text(run_id)]).await?;
    rows.first()
        .map(|r| rows::inspected_run(r).map(|(inspected, _)| inspected))
        .transpose()
}

/// Why a commit under `lease` expecting version `expected`, whose statement wrote nothing,
/// was refused: a stale epoch or version, the run gone, an operator's cancel waiting
/// ([`StoreError::CancelRequested`]), or else `otherwise()`. A failed lookup is the error.
pub async fn commit_refused<S: SqlReads>(
    store: &S,
    lease: &Lease,
    expected: u64,
    otherwise: impl FnOnce() -> StoreError,
) -> StoreError {
    let stored = match head_of(store, &lease.run_id).await {
        Ok(stored) => stored,
        Err(e) => return e,
    };
    if let Some(refused) = crate::heads::commit_refusal(lease, expected, stored) {
        return refused;
    }
    match store
        .fetch(sql::CANCEL_PENDING, &[Arg::Text(&lease.run_id)])
        .await
    {
        Ok(rows) if rows.is_empty() => otherwise(),
        Ok(_) => StoreError::CancelRequested(lease.run_id.clone()),
        Err(e) => e,
    }
}

/// `NotFound` when rows of a run came back empty and the run does not exist either.
async fn found<S: SqlReads, T>(
    store: &S,
    run_id: &str,
    rows: Vec<T>,
) -> Result<Vec<T>, StoreError> {
    if rows.is_empty() && !run_exists(store, run_id).await? {
        return Err(StoreError::NotFound(run_id.to_owned()));
    }
    Ok(rows)
}

/// The state of a run at `version`, replayed from the nearest snapshot; `None` when that
/// version is not stored (or the run does not exist).
///
/// # Errors
/// The store's error for a failed statement; [`StoreError::Corrupt`] when the payloads do
/// not replay, or the version is stored without a snapshot at or before it.
pub async fn replay_at<S: SqlReads>(
    store: &S,
    run_id: &str,
    version: u64,
) -> Result<Option<StateAtVersion>, StoreError> {
    replay_at_via(store, run_id, version, false).await
}

/// [`replay_at`], through [`SqlReads::fetch_events`] when `aside`.
async fn replay_at_via<S: SqlReads>(
    store: &S,
    run_id: &str,
    version: u64,
    aside: bool,
) -> Result<Option<StateAtVersion>, StoreError> {
    let args = [Arg::Text(run_id), Arg::Int(to_i64(version))];
    let rows = if aside {
        store.fetch_events(sql::STATE_AT, &args).await?
    } else {
        store.fetch(sql::STATE_AT, &args).await?
    };
    if rows.is_empty() {
        let exists = if aside {
            store.fetch_events(sql::VERSION_EXISTS, &args).await?
        } else {
            store.fetch(sql::VERSION_EXISTS, &args).await?
        };
        return if exists.is_empty() {
            Ok(None)
        } else {
            Err(rows::corrupt_history(run_id, version))
        };
    }
    rows::replay(run_id, version, &rows)
}

/// `HistoryStore::state_at`.
///
/// # Errors
/// As `HistoryStore::state_at`.
pub async fn state_at<S: SqlReads>(
    store: &S,
    run_id: &str,
    version: u64,
) -> Result<Option<StateAtVersion>, StoreError> {
    let at = replay_at(store, run_id, version).await?;
    if at.is_none() && !run_exists(store, run_id).await? {
        return Err(StoreError::NotFound(run_id.to_owned()));
    }
    Ok(at)
}

/// `HistoryStore::version_span`.
///
/// # Errors
/// As `HistoryStore::version_span`.
pub async fn version_span<S: SqlReads>(
    store: &S,
    run_id: &str,
) -> Result<Option<VersionSpan>, StoreError> {
    let rows = store.fetch(sql::VERSION_SPAN, &[Arg::Text(run_id)]).await?;
    match rows.first() {
        Some(row) => rows::version_span(run_id, row),
        None => Ok(None),
    }
}

/// `HistoryStore::history`.
///
/// # Errors
/// As `HistoryStore::history`.
pub async fn history<S: SqlReads>(
    store: &S,
    run_id: &str,
) -> Result<Vec<TransitionRecord>, StoreError> {
    let rows = found(
        store,
        run_id,
        store.fetch(S::HISTORY, &[Arg::Text(run_id)]).await?,
    )
    .await?;
    rows.iter().map(|r| rows::transition(run_id, r)).collect()
}

/// `HistoryStore::history_from`.
///
/// # Errors
/// As `HistoryStore::history`.
pub async fn history_from<S: SqlReads>(
    store: &S,
    run_id: &str,
    version: u64,
    max: usize,
) -> Result<Vec<TransitionRecord>, StoreError> {
    let rows = store
        .fetch(
            S::HISTORY_FROM,
            &[
                Arg::Text(run_id),
                Arg::Int(to_i64(version)),
                Arg::Int(limit(Some(max))),
            ],
        )
        .await?;
    let rows = found(store, run_id, rows).await?;
    rows.iter().map(|r| rows::transition(run_id, r)).collect()
}

/// `HistoryStore::journal_from`.
///
/// # Errors
/// As `HistoryStore::journal`.
pub async fn journal_from<S: SqlReads>(
    store: &S,
    run_id: &str,
    from: (u64, u32),
    max: usize,
) -> Result<Vec<JournalEntry>, StoreError> {
    let rows = store
        .fetch(
            S::JOURNAL_FROM,
            &[
                Arg::Text(run_id),
                Arg::Int(to_i64(from.0)),
                Arg::Int(i64::from(from.1)),
                Arg::Int(limit(Some(max))),
            ],
        )
        .await?;
    let rows = found(store, run_id, rows).await?;
    rows.iter().map(|r| rows::entry(run_id, r)).collect()
}

/// `HistoryStore::journal`.
///
/// # Errors
/// As `HistoryStore::journal`.
pub async fn journal<S: SqlReads>(
    store: &S,
    run_id: &str,
    version: Option<u64>,
) -> Result<Vec<JournalEntry>, StoreError> {
    let rows = store
        .fetch(
            S::JOURNAL,
            &[Arg::Text(run_id), Arg::OptInt(version.map(to_i64))],
        )
        .await?;
    let rows = found(store, run_id, rows).await?;
    rows.iter().map(|r| rows::entry(run_id, r)).collect()
}

/// `HistoryStore::pending_signals`.
///
/// # Errors
/// As `HistoryStore::pending_signals`.
pub async fn pending_signals<S: SqlReads>(
    store: &S,
    run_id: &str,
) -> Result<Vec<SignalRecord>, StoreError> {
    let rows = store
        .fetch(S::PENDING_SIGNALS, &[Arg::Text(run_id)])
        .await?;
    let rows = found(store, run_id, rows).await?;
    rows.iter().map(|r| rows::signal(run_id, r)).collect()
}

/// `HistoryStore::fork`: a new run from the state of `run_id` at `version`.
///
/// # Errors
/// As `HistoryStore::fork`.
pub async fn fork<S: SqlReads>(
    store: &S,
    run_id: &str,
    version: u64,
    new_id: &str,
) -> Result<RunRecord, StoreError> {
    let source = store
        .load_run(run_id)
        .await?
        .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
    let at = replay_at(store, run_id, version)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("{run_id}@{version}")))?;
    // The state at `version` is of the agent version the run was on then.
    let (agent_version, fingerprint) =
        agent_core::store::agent_version_at(&source, &history(store, run_id).await?, version);
    let new = NewRun::new(new_id, source.agent, fingerprint, at.state_name, at.state)
        .with_labels(source.labels)
        .with_agent_version(agent_version);
    store.insert_fork(&new, (run_id, version)).await
}

/// `HistoryStore::agents`.
///
/// # Errors
/// As `HistoryStore::agents`.
pub async fn agents<S: SqlReads>(store: &S) -> Result<Vec<String>, StoreError> {
    let rows = store.fetch(sql::AGENTS, &[]).await?;
    rows.iter()
        .map(|r| r.agent().map_err(|e| StoreError::backend(e.to_string())))
        .collect()
}

/// `HistoryStore::tool_switches`.
///
/// # Errors
/// As `HistoryStore::tool_switches`.
pub async fn tool_switches<S: SqlReads>(store: &S) -> Result<Vec<ToolSwitch>, StoreError> {
    let rows = store.fetch(S::TOOL_SWITCHES, &[]).await?;
    rows.iter().map(rows::tool_switch).collect()
}

/// `HistoryStore::agent_graph`.
///
/// # Errors
/// As `HistoryStore::agent_graph`.
pub async fn agent_graph<S: SqlReads>(
    store: &S,
    agent: &str,
    fingerprint: Option<&str>,
) -> Result<Option<GraphDescription>, StoreError> {
    let rows = store
        .fetch(
            S::AGENT_GRAPH,
            &[Arg::Text(agent), Arg::OptText(fingerprint)],
        )
        .await?;
    rows.first().map(|r| rows::graph(agent, r)).transpose()
}

/// `RunStore::hand_back`.
///
/// # Errors
/// As `RunStore::hand_back`.
pub async fn hand_back<S: SqlReads>(store: &S, lease: &Lease) -> Result<(), StoreError> {
    store
        .fetch(
            S::HAND_BACK,
            &[Arg::Text(&lease.run_id), Arg::Int(to_i64(lease.epoch))],
        )
        .await?;
    Ok(())
}

/// `RunStore::defer_run`.
///
/// # Errors
/// As `RunStore::defer_run`.
pub async fn defer_run<S: SqlReads>(
    store: &S,
    lease: &Lease,
    until: agent_core::store::Millis,
    why: &agent_core::store::WaitingFor,
) -> Result<bool, StoreError> {
    let rows = store
        .fetch(
            S::DEFER_RUN,
            &[
                Arg::Text(&lease.run_id),
                Arg::Int(to_i64(lease.epoch)),
                Arg::Int(until),
                Arg::Text(why.as_str()),
            ],
        )
        .await?;
    Ok(!rows.is_empty())
}

/// `HistoryStore::tool_enabled`.
///
/// # Errors
/// As `HistoryStore::tool_enabled`.
pub async fn tool_enabled<S: SqlReads>(store: &S, tool: &str) -> Result<bool, StoreError> {
    let rows = store.fetch(sql::TOOL_ENABLED, &[Arg::Text(tool)]).await?;
    rows.first().map_or(Ok(true), rows::enabled)
}

/// The runs `policy` prunes: rows of `(id, cutoff)`, the first version kept (at most
/// `policy.max_runs`).
///
/// # Errors
/// The store's error for a failed statement.
pub async fn prune_candidates<S: SqlReads>(
    store: &S,
    policy: &RetentionPolicy,
) -> Result<Vec<S::Row>, StoreError> {
    let keep = to_i64(policy.keep_last_versions.max(1));
    store
        .fetch_events(
            S::prune_candidates_sql(),
            &[
                Arg::Int(keep),
                Arg::Bool(policy.only_final_runs),
                Arg::OptInt(policy.keep_versions_since),
                Arg::Int(limit(policy.max_runs)),
            ],
        )
        .await
}

/// The final runs `policy` deletes (none without `delete_final_before`), oldest first, at
/// most `policy.max_runs`.
///
/// # Errors
/// The store's error for a failed statement; [`StoreError::Corrupt`] for an id that does
/// not read.
pub async fn expired_runs<S: SqlReads>(
    store: &S,
    policy: &RetentionPolicy,
) -> Result<Vec<String>, StoreError> {
    let Some(before) = policy.delete_final_before else {
        return Ok(Vec::new());
    };
    let rows = store
        .fetch_events(
            S::expired_runs_sql(),
            &[Arg::Int(before), Arg::Int(limit(policy.max_runs))],
        )
        .await?;
    rows.iter()
        .map(|r| r.id().map_err(|e| corrupt("?", e)))
        .collect()
}

fn limit(max: Option<usize>) -> i64 {
    max.map_or(i64::MAX, |m| i64::try_from(m).unwrap_or(i64::MAX))
}

/// Where a candidate of [`prune_candidates`] is cut: its id, the first kept version and
/// the state there (which becomes a snapshot, so that every kept version replays); `None`
/// when that version no longer replays to anything (nothing to prune).
///
/// # Errors
/// The store's error for a failed statement; [`StoreError::Corrupt`] when the row or the
/// history does not read.
pub async fn prune_point<S: SqlReads>(
    store: &S,
    candidate: &S::Row,
) -> Result<Option<(String, u64, StateAtVersion)>, StoreError> {
    let id = candidate.id().map_err(|e| corrupt("?", e))?;
    let cutoff = rows::cutoff(candidate)
        .and_then(to_u64)
        .map_err(|e| corrupt(&id, e))?;
    Ok(replay_at_via(store, &id, cutoff, true)
        .await?
        .map(|at| (id, cutoff, at)))
}
