//! The store's writes whose logic is the same on both SQL stores, over [`SqlDialect`]: each
//! store gives its statements' text and says what truly differs, whose clock a statement
//! takes (PostgreSQL's server clock inside the statement, SQLite's bound from this
//! process), whether a status set is one statement or a write transaction that also
//! records the change, how its group commit takes a step's writes, and how idle workers
//! and event followers are woken.

use std::time::Duration;

use agent_core::graph::GraphDescription;
use agent_core::store::{
    Budget, DaySpend, EventCursor, JournalEntry, LabelValueCount, Lease, Millis, RunFailure,
    RunFilter, RunKey, RunRecord, RunStatus, SignalReceipt, StepCommit, StoreError, VersionCount,
    check_signal_key, now_ms,
};
use async_trait::async_trait;

use crate::commit::check_entry;
use crate::heads::HeadCache;
use crate::reads::{Arg, SqlReads, fenced_out, head_of};
use crate::rows::{self, SqlRow};
use crate::write::{
    CommitRow, EntryRow, Outcome, SignalRow, entry_rows, json_text, plan_commit, refused,
};
use crate::{corrupt, lease_of, ms, to_i64};

/// How a write reaches the idle workers it wakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerWake {
    /// The write's statement notified them, where the dialect's statements can
    /// (PostgreSQL's `pg_notify`): only the rest are woken.
    InStatement,
    /// Nothing notified them yet: the store notifies them now.
    Separate,
}

/// A statement of [`LIST_RUNS`](SqlDialect::LIST_RUNS)'s parameters over a run filter, as
/// [`SqlDialect::fetch_listing`] runs it.
#[derive(Debug, Clone, Copy)]
pub struct Listing<'a> {
    /// The statement.
    pub sql: &'static str,
    /// The filter, bound as the dialect binds it (`$1` to `$10`).
    pub filter: &'a RunFilter,
    /// The third parameter.
    pub limit: Option<i64>,
    /// What is bound after the filter, from `$11` on.
    pub tail: ListingTail<'a>,
    /// A scan that a store whose one connection writes (SQLite) reads on a reader, not to
    /// hold up the worker's claims and commits.
    pub aside: bool,
}

/// What a [`Listing`]'s statement binds after the filter, from `$11` on.
#[derive(Debug, Clone, Copy)]
pub enum ListingTail<'a> {
    /// Nothing.
    Nothing,
    /// The key to list after (`$11` its creation time, `$12` its id), for
    /// [`LIST_RUNS_AFTER`](SqlDialect::LIST_RUNS_AFTER).
    After(&'a RunKey),
    /// The label key whose values are counted (`$11`), for
    /// [`COUNT_LABEL_VALUES`](SqlDialect::COUNT_LABEL_VALUES).
    LabelKey(&'a str),
}

/// What the store's shared writes need of a dialect, beyond its reads.
#[async_trait]
pub trait SqlDialect: SqlReads {
    /// The bytes a run takes in the column `0`, `$1` the run.
    const STORAGE_BYTES: &'static str;
    /// The last event position drawn so far, in the column `0`.
    const LAST_POSITION: &'static str;
    /// Switch tool `$1` on or off (`$2`), with the reason `$3`, then the clock.
    const SET_TOOL: &'static str;
    /// Set the budget of run `$1` to `$2` (JSON text or `NULL`); the run row after it.
    const SET_BUDGET: &'static str;
    /// An operator's status `$2` (with the failure's code `$3` and message `$4`) on run
    /// `$1` when no live lease holds it, then the clock, then the notification channel;
    /// the run row after it.
    const SET_STATUS: &'static str;
    /// Quarantine run `$1` under the lease of epoch `$2` with the failure's code `$3` and
    /// message `$4`, then the clock; the run row after it.
    const QUARANTINE_UNDER_LEASE: &'static str;
    /// Quarantine run `$1`, whose row does not read, with the message `$2`, then the
    /// clock; a row when it wrote one, where the dialect's
    /// [`write_status`](Self::write_status) records the change after the statement.
    const QUARANTINE_CORRUPT: &'static str;
    /// Extend the lease of run `$1`, epoch `$2`, worker `$3`, until
    /// [`lease_until`](Self::lease_until) `$4`; the new expiry in the column `0`.
    const RENEW_LEASE: &'static str;
    /// End the lease of run `$1` at epoch `$2`, then the notification channel; a row for
    /// the run when it ended a lease.
    const RELEASE_LEASE: &'static str;
    /// Expire every live lease of worker `$1`, then the clock and the notification
    /// channel; a row for each run whose lease it expired.
    const EXPIRE_LEASES_OF: &'static str;
    /// Store signal `$2` with payload `$3` (JSON text) for run `$1` under dedup key `$4`,
    /// then the clock, unless the run has a signal under that key; its id, no row when
    /// nothing was stored (no such run, or the key's signal stored before).
    const SEND_SIGNAL_ONCE: &'static str;
    /// The id of run `$1`'s signal under dedup key `$2`, in the column `0`.
    const SIGNAL_BY_KEY: &'static str;

    /// The runs of a filter in the columns of [`rows::RunRow`], listed in their order, at
    /// most `$3` ([`NO_LIMIT`](Self::NO_LIMIT) for all).
    const LIST_RUNS: &'static str;
    /// As [`LIST_RUNS`](Self::LIST_RUNS), after the run of key `$11` (created at) and
    /// `$12` (id).
    const LIST_RUNS_AFTER: &'static str;
    /// The runs of a filter counted by status (`$3` is `NULL`).
    const COUNT_RUNS: &'static str;
    /// The runs of a filter counted by agent version and fingerprint (`$3` is `NULL`).
    const COUNT_VERSIONS: &'static str;
    /// The runs of a filter, per agent and UTC day of creation, with their spend summed in
    /// the columns of [`rows::SpendRow`] (`$3` is `NULL`).
    const SPEND_BY_DAY: &'static str;
    /// The values of label `$11` on the runs of a filter, by value as bytes, each with
    /// its number of runs and the newest one's creation time (`$3` is `NULL`).
    const COUNT_LABEL_VALUES: &'static str;
    /// What [`LIST_RUNS`](Self::LIST_RUNS) binds for no limit.
    const NO_LIMIT: Option<i64>;
    /// Whether the head of a run read (not created or claimed) is remembered for the
    /// run's next commit: where the workers that write a run read it too (PostgreSQL's
    /// operators and listings).
    const REMEMBERS_READS: bool;

    /// Register graph `$3` (JSON text) of agent `$1` under fingerprint `$2`, then the clock.
    const REGISTER_AGENT: &'static str;

    /// Claim run `$1` for worker `$2` for `$3` ms, then the clock; the run row after it,
    /// none when the run is not claimable (a function: the text is built once).
    fn claim_run_sql() -> &'static str;

    /// Now, for the statements that bind it: SQLite's, from this process's clock;
    /// `None` where the statement reads the server's (PostgreSQL's `clock_timestamp()`).
    fn clock(&self) -> Option<Millis>;

    /// The channel a statement notifies idle workers on, where statements can
    /// (PostgreSQL's); `None` elsewhere.
    fn channel(&self) -> Option<&str>;

    /// What [`RENEW_LEASE`](Self::RENEW_LEASE) binds for a lease of `ttl`: the time to
    /// live, where the statement adds the server's clock, or the expiry itself.
    fn lease_until(&self, ttl: Duration) -> Millis;

    /// Run `sql`, a write of run `run_id`'s status without a version, with `args` bound
    /// in order; its row, if any. A dialect whose statement cannot also record the change
    /// (SQLite) runs it in a write transaction that records it when a row came back.
    ///
    /// # Errors
    /// The store's error for a failed statement.
    async fn write_status(
        &self,
        run_id: &str,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Option<Self::Row>, StoreError>;

    /// The rows of `listing`.
    ///
    /// # Errors
    /// The store's error for a failed statement.
    async fn fetch_listing(&self, listing: Listing<'_>) -> Result<Vec<Self::Row>, StoreError>;

    /// The heads the store remembers.
    fn head_cache(&self) -> &HeadCache;

    /// Send `row` through the store's group commit: the commit's outcome.
    ///
    /// # Errors
    /// The store's error for a failed statement.
    async fn commit_row(&self, row: CommitRow) -> Outcome;

    /// The journal entries `rows` a commit under `lease` carries: all of them, or those left
    /// once the store wrote first, on their own, the ones it does not carry.
    ///
    /// # Errors
    /// As [`record_row`](Self::record_row).
    async fn carried(
        &self,
        _lease: &Lease,
        rows: Vec<EntryRow>,
    ) -> Result<Vec<EntryRow>, StoreError> {
        Ok(rows)
    }

    /// Write journal entry `row` fenced by `lease` (through the store's group commit, or on
    /// its own), durable when this returns; its run's followers woken.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] or [`StoreError::LeaseLost`] when the lease no longer
    /// holds the run; the store's error for a failed statement.
    async fn record_row(&self, lease: &Lease, row: EntryRow) -> Result<(), StoreError>;

    /// Send `row` through the store's group commit; the signal's id, `None` when the run
    /// does not exist.
    ///
    /// # Errors
    /// The store's error for a failed statement.
    async fn insert_signal(&self, row: SignalRow) -> Result<Option<i64>, StoreError>;

    /// After a write to `run_id` that gives events: wake its followers.
    fn wake_followers(&self, run_id: &str);

    /// After a write that may make runs claimable: wake the idle workers.
    fn wake_workers(&self, wake: WorkerWake);

    /// After `child` reached a final status or was quarantined: wake the idle workers if it
    /// has a parent, which may be claimable now. Best effort (workers poll too).
    async fn wake_parent(&self, child: &RunRecord);
}

/// `args`, then the dialect's clock where it binds one.
fn clocked<'a, S: SqlDialect>(store: &'a S, args: &[Arg<'a>]) -> Vec<Arg<'a>> {
    let mut args = args.to_vec();
    args.extend(store.clock().map(Arg::Int));
    args
}

/// `args`, then the dialect's notification channel where it has one.
fn notifying<'a, S: SqlDialect>(store: &'a S, mut args: Vec<Arg<'a>>) -> Vec<Arg<'a>> {
    args.extend(store.channel().map(Arg::Text));
    args
}

/// The run of a row read after a write or by `HistoryStore::load_run`, its head remembered
/// where the store remembers runs it reads.
fn written_run<S: SqlDialect>(store: &S, row: &S::Row) -> Result<RunRecord, StoreError> {
    let head = rows::stored_run(row)?.head;
    Ok(if S::REMEMBERS_READS {
        store.head_cache().remembered(head)
    } else {
        head.record
    })
}

/// `HistoryStore::list_runs`.
///
/// # Errors
/// As `HistoryStore::list_runs`.
pub async fn list_runs<S: SqlDialect>(
    store: &S,
    filter: &RunFilter,
) -> Result<Vec<RunRecord>, StoreError> {
    let limit = (filter.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX))).or(S::NO_LIMIT);
    let sql = match filter.after {
        None => S::LIST_RUNS,
        Some(_) => S::LIST_RUNS_AFTER,
    };
    let listing = Listing {
        sql,
        filter,
        limit,
        tail: filter
            .after
            .as_ref()
            .map_or(ListingTail::Nothing, ListingTail::After),
        aside: false,
    };
    let rows = store.fetch_listing(listing).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let (record, head) = rows::listed_run(row)?;
        if let Some(head) = head.filter(|_| S::REMEMBERS_READS) {
            store.head_cache().remember(head);
        }
        out.push(record);
    }
    Ok(out)
}

/// `HistoryStore::count_runs`.
///
/// # Errors
/// As `HistoryStore::count_runs`.
pub async fn count_runs<S: SqlDialect>(
    store: &S,
    filter: &RunFilter,
) -> Result<Vec<(RunStatus, u64)>, StoreError> {
    let listing = Listing {
        sql: S::COUNT_RUNS,
        filter,
        limit: None,
        tail: ListingTail::Nothing,
        aside: false,
    };
    let rows = store.fetch_listing(listing).await?;
    rows::status_counts(&rows)
}

/// `HistoryStore::count_versions`: aside, since counting scans the runs (a worker counts at
/// start-up, while it claims and commits).
///
/// # Errors
/// As `HistoryStore::count_versions`.
pub async fn count_versions<S: SqlDialect>(
    store: &S,
    filter: &RunFilter,
) -> Result<Vec<VersionCount>, StoreError> {
    let listing = Listing {
        sql: S::COUNT_VERSIONS,
        filter,
        limit: None,
        tail: ListingTail::Nothing,
        aside: true,
    };
    let rows = store.fetch_listing(listing).await?;
    rows::version_counts(&rows)
}

/// `HistoryStore::spend_by_day`: aside, since summing scans the runs of the filter.
///
/// # Errors
/// As `HistoryStore::spend_by_day`.
pub async fn spend_by_day<S: SqlDialect>(
    store: &S,
    filter: &RunFilter,
) -> Result<Vec<DaySpend>, StoreError> {
    let listing = Listing {
        sql: S::SPEND_BY_DAY,
        filter,
        limit: None,
        tail: ListingTail::Nothing,
        aside: true,
    };
    let rows = store.fetch_listing(listing).await?;
    rows::day_spends(&rows)
}

/// `HistoryStore::count_label_values`: aside, since counting scans the runs of the filter
/// that carry the key.
///
/// # Errors
/// As `HistoryStore::count_label_values`.
pub async fn count_label_values<S: SqlDialect>(
    store: &S,
    key: &str,
    filter: &RunFilter,
) -> Result<Vec<LabelValueCount>, StoreError> {
    let listing = Listing {
        sql: S::COUNT_LABEL_VALUES,
        filter,
        limit: None,
        tail: ListingTail::LabelKey(key),
        aside: true,
    };
    let rows = store.fetch_listing(listing).await?;
    rows::label_value_counts(&rows)
}

/// `HistoryStore::load_run`.
///
/// # Errors
/// As `HistoryStore::load_run`.
pub async fn load_run<S: SqlDialect>(
    store: &S,
    run_id: &str,
) -> Result<Option<RunRecord>, StoreError> {
    let rows = store.fetch(S::LOAD_RUN, &[Arg::Text(run_id)]).await?;
    rows.first().map(|row| written_run(store, row)).transpose()
}

/// `HistoryStore::storage_bytes`.
///
/// # Errors
/// As `HistoryStore::storage_bytes`.
pub async fn storage_bytes<S: SqlDialect>(
    store: &S,
    run_id: &str,
) -> Result<Option<u64>, StoreError> {
    let rows = store.fetch(S::STORAGE_BYTES, &[Arg::Text(run_id)]).await?;
    let bytes = match rows.first() {
        Some(row) => row.first_int().map_err(|e| corrupt(run_id, e))?,
        None => return Err(StoreError::backend("no row for the run's storage bytes")),
    };
    Ok(Some(u64::try_from(bytes).unwrap_or(0)))
}

/// `EventLog::event_head`.
///
/// # Errors
/// As `EventLog::event_head`.
pub async fn event_head<S: SqlDialect>(store: &S) -> Result<EventCursor, StoreError> {
    let rows = store.fetch(S::LAST_POSITION, &[]).await?;
    let last = match rows.first() {
        Some(row) => row
            .first_int()
            .map_err(|e| StoreError::backend(e.to_string()))?,
        None => return Err(StoreError::backend("no row for the last event position")),
    };
    Ok(EventCursor::after_position(
        u64::try_from(last).unwrap_or(0),
    ))
}

/// `RunStore::register_agent`.
///
/// # Errors
/// As `RunStore::register_agent`.
pub async fn register_agent<S: SqlDialect>(
    store: &S,
    graph: &GraphDescription,
) -> Result<(), StoreError> {
    let json = serde_json::to_string(graph).map_err(|e| StoreError::backend(e.to_string()))?;
    let fingerprint = graph.fingerprint();
    let args = [
        Arg::Text(&graph.agent),
        Arg::Text(&fingerprint),
        Arg::Text(&json),
    ];
    store
        .fetch(S::REGISTER_AGENT, &clocked(store, &args))
        .await?;
    Ok(())
}

/// `OperatorStore::set_tool_enabled`.
///
/// # Errors
/// As `OperatorStore::set_tool_enabled`.
pub async fn set_tool_enabled<S: SqlDialect>(
    store: &S,
    tool: &str,
    enabled: bool,
    reason: Option<&str>,
) -> Result<(), StoreError> {
    let args = [Arg::Text(tool), Arg::Bool(enabled), Arg::OptText(reason)];
    store.fetch(S::SET_TOOL, &clocked(store, &args)).await?;
    Ok(())
}

/// `OperatorStore::set_budget`.
///
/// # Errors
/// As `OperatorStore::set_budget`.
pub async fn set_budget<S: SqlDialect>(
    store: &S,
    run_id: &str,
    budget: Option<Budget>,
) -> Result<RunRecord, StoreError> {
    let json = budget
        .map(|b| serde_json::to_string(&b))
        .transpose()
        .map_err(|e| StoreError::backend(e.to_string()))?;
    let args = [Arg::Text(run_id), Arg::OptText(json.as_deref())];
    match store.fetch(S::SET_BUDGET, &args).await?.first() {
        Some(row) => written_run(store, row),
        None => Err(StoreError::NotFound(run_id.to_owned())),
    }
}

/// `OperatorStore::set_status`: refused with [`StoreError::LeaseLost`] (the stored epoch)
/// while a live lease holds the run.
///
/// # Errors
/// As `OperatorStore::set_status`.
pub async fn set_status<S: SqlDialect>(
    store: &S,
    run_id: &str,
    status: RunStatus,
    error: Option<RunFailure>,
) -> Result<RunRecord, StoreError> {
    let args = [
        Arg::Text(run_id),
        Arg::Text(status.as_str()),
        Arg::OptText(error.as_ref().map(|e| e.code.as_str())),
        Arg::OptText(error.as_ref().map(|e| e.message.as_str())),
    ];
    let args = notifying(store, clocked(store, &args));
    match store.write_status(run_id, S::SET_STATUS, &args).await? {
        Some(row) => {
            store.wake_workers(WorkerWake::InStatement);
            store.wake_followers(run_id);
            written_run(store, &row)
        }
        None => match head_of(store, run_id).await? {
            None => Err(StoreError::NotFound(run_id.to_owned())),
            Some((_, epoch)) => Err(StoreError::LeaseLost {
                run_id: run_id.to_owned(),
                epoch,
            }),
        },
    }
}

/// `RunStore::quarantine`.
///
/// # Errors
/// As `RunStore::quarantine`.
pub async fn quarantine<S: SqlDialect>(
    store: &S,
    lease: &Lease,
    error: RunFailure,
) -> Result<RunRecord, StoreError> {
    let args = [
        Arg::Text(&lease.run_id),
        Arg::Int(to_i64(lease.epoch)),
        Arg::Text(error.code.as_str()),
        Arg::Text(&error.message),
    ];
    let args = clocked(store, &args);
    let written = (store.write_status(&lease.run_id, S::QUARANTINE_UNDER_LEASE, &args)).await?;
    let Some(row) = written else {
        return Err(fenced_out(store, lease).await?);
    };
    let record = written_run(store, &row)?;
    store.wake_followers(&record.id);
    // A quarantined child may end its parent's wait.
    store.wake_parent(&record).await;
    Ok(record)
}

/// `RunStore::renew_lease`.
///
/// # Errors
/// As `RunStore::renew_lease`.
pub async fn renew_lease<S: SqlDialect>(
    store: &S,
    lease: &Lease,
    ttl: Duration,
) -> Result<Lease, StoreError> {
    let args = [
        Arg::Text(&lease.run_id),
        Arg::Int(to_i64(lease.epoch)),
        Arg::Text(&lease.worker),
        Arg::Int(store.lease_until(ttl)),
    ];
    let rows = store.fetch(S::RENEW_LEASE, &args).await?;
    match rows.first() {
        Some(row) => Ok(Lease {
            expires_at: row.first_int().map_err(|e| corrupt(&lease.run_id, e))?,
            ..lease.clone()
        }),
        None => Err(fenced_out(store, lease).await?),
    }
}

/// `RunStore::release_lease`: the idle workers woken when it ended a lease.
///
/// # Errors
/// As `RunStore::release_lease`.
pub async fn release_lease<S: SqlDialect>(store: &S, lease: &Lease) -> Result<(), StoreError> {
    let args = [Arg::Text(&lease.run_id), Arg::Int(to_i64(lease.epoch))];
    let args = notifying(store, args.to_vec());
    if !store.fetch(S::RELEASE_LEASE, &args).await?.is_empty() {
        store.wake_workers(WorkerWake::InStatement);
    }
    Ok(())
}

/// `RunStore::expire_leases_of`: the idle workers woken when it expired any.
///
/// # Errors
/// As `RunStore::expire_leases_of`.
pub async fn expire_leases_of<S: SqlDialect>(store: &S, worker: &str) -> Result<u64, StoreError> {
    let args = notifying(store, clocked(store, &[Arg::Text(worker)]));
    let expired = store.fetch(S::EXPIRE_LEASES_OF, &args).await?.len() as u64;
    if expired > 0 {
        store.wake_workers(WorkerWake::InStatement);
    }
    Ok(expired)
}

/// `RunStore::record_entry`.
///
/// # Errors
/// As `RunStore::record_entry`.
pub async fn record_entry<S: SqlDialect>(
    store: &S,
    lease: &Lease,
    entry: &JournalEntry,
) -> Result<(), StoreError> {
    check_entry(lease, entry)?;
    store.record_row(lease, EntryRow::new(lease, entry)).await
}

/// `RunStore::commit_step`: planned from the head the store remembers (or reads), then
/// written by the group commit, alone or with other runs' commits, with the entries it
/// carries written before it (and only if it applies); its run's followers woken, and the
/// idle workers when a child run ended (its waiting parent may be claimable now; other
/// commits wake nobody: the worker holding the run steps it on).
///
/// # Errors
/// As `RunStore::commit_step`.
pub async fn commit_step<S: SqlDialect>(
    store: &S,
    lease: &Lease,
    commit: &StepCommit,
    entries: &[JournalEntry],
) -> Result<RunRecord, StoreError> {
    let carried = store.carried(lease, entry_rows(lease, entries)?).await?;
    // A statement that reads the server's clock takes its time from it, not from `now`.
    let heads = store.head_cache();
    let (plan, row) = plan_commit(store, heads, lease, commit, carried, now_ms()).await?;
    // A step consuming a signal goes through the group commit like any other: its row also
    // checks that the signal is pending and marks it consumed.
    let Some(applied) = store.commit_row(row).await? else {
        // Nothing was written (the head is one the run has moved past, or the signal is no
        // longer pending): say why from the run as stored.
        return Err(refused(store, lease, commit).await);
    };
    let record = plan.applied(lease, commit, applied, heads);
    store.wake_followers(&lease.run_id);
    if record.status.is_final() {
        store.wake_parent(&record).await;
    }
    Ok(record)
}

/// `RunStore::send_signal`: the idle workers woken (the run may be waiting for it), then
/// the run's followers.
///
/// # Errors
/// As `RunStore::send_signal`.
pub async fn send_signal<S: SqlDialect>(
    store: &S,
    run_id: &str,
    name: &str,
    payload: &serde_json::Value,
) -> Result<i64, StoreError> {
    let row = SignalRow::new(run_id, name, payload, now_ms());
    let id =
        (store.insert_signal(row).await?).ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
    store.wake_workers(WorkerWake::Separate);
    store.wake_followers(run_id);
    Ok(id)
}

/// `RunStore::send_signal_once`: one statement that stores the signal unless its key's
/// is stored (a unique index on the run and the key decides, also between concurrent
/// senders), then, when it stored nothing, a read of the key's signal, which tells a
/// duplicate from an unknown run. Not through the group commit: a keyed signal is a
/// trigger's or an API client's, one at a time, and its statement differs.
///
/// # Errors
/// As `RunStore::send_signal_once`.
pub async fn send_signal_once<S: SqlDialect>(
    store: &S,
    run_id: &str,
    name: &str,
    payload: &serde_json::Value,
    key: &str,
) -> Result<SignalReceipt, StoreError> {
    check_signal_key(key)?;
    let payload = json_text(payload);
    let args = [
        Arg::Text(run_id),
        Arg::Text(name),
        Arg::Text(payload.get()),
        Arg::Text(key),
    ];
    let stored = store
        .fetch(S::SEND_SIGNAL_ONCE, &clocked(store, &args))
        .await?;
    if let Some(row) = stored.first() {
        let id = row.first_int().map_err(|e| corrupt(run_id, e))?;
        store.wake_workers(WorkerWake::Separate);
        store.wake_followers(run_id);
        return Ok(SignalReceipt {
            id,
            duplicate: false,
        });
    }
    let id = signal_by_key(store, run_id, key)
        .await?
        .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
    Ok(SignalReceipt {
        id,
        duplicate: true,
    })
}

/// `HistoryStore::signal_by_key`.
///
/// # Errors
/// The store's error.
pub async fn signal_by_key<S: SqlDialect>(
    store: &S,
    run_id: &str,
    key: &str,
) -> Result<Option<i64>, StoreError> {
    let rows = store
        .fetch(S::SIGNAL_BY_KEY, &[Arg::Text(run_id), Arg::Text(key)])
        .await?;
    rows.first()
        .map(|row| row.first_int().map_err(|e| corrupt(run_id, e)))
        .transpose()
}

/// A claim's row, read.
// The large variant is the one nearly every row gives: boxing it would allocate per claim.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum ClaimedRow {
    /// The run claimed, its head remembered for its first commit.
    Claimed(Lease, RunRecord),
    /// The run's row does not read: quarantine it for an operator, so that no worker
    /// claims it again.
    Unreadable {
        /// The run.
        run_id: String,
        /// Why it does not read.
        message: String,
    },
}

/// Read the row of a run `worker` claimed.
///
/// # Errors
/// A decoding error other than [`StoreError::Corrupt`].
pub fn claimed_row(
    heads: &HeadCache,
    row: &impl SqlRow,
    worker: &str,
) -> Result<ClaimedRow, StoreError> {
    match rows::stored_run(row) {
        Ok(stored) => {
            let record = heads.remembered(stored.head);
            Ok(ClaimedRow::Claimed(lease_of(&record, worker), record))
        }
        Err(StoreError::Corrupt { run_id, message }) => {
            tracing::error!(
                run_id,
                message,
                "quarantining a run whose row does not read"
            );
            Ok(ClaimedRow::Unreadable { run_id, message })
        }
        Err(e) => Err(e),
    }
}

/// Quarantine run `run_id`, whose row does not read: written without decoding anything,
/// so that listings say what the row holds and no worker claims it again.
///
/// # Errors
/// The store's error for a failed statement.
pub async fn quarantine_unreadable<S: SqlDialect>(
    store: &S,
    run_id: &str,
    message: &str,
) -> Result<(), StoreError> {
    let args = clocked(store, &[Arg::Text(run_id), Arg::Text(message)]);
    (store.write_status(run_id, S::QUARANTINE_CORRUPT, &args)).await?;
    store.wake_followers(run_id);
    Ok(())
}

/// `RunStore::claim_run` without its reads.
///
/// # Errors
/// As `RunStore::claim_run`; [`StoreError::Corrupt`] for a run quarantined because its row
/// does not read.
pub async fn claim_one<S: SqlDialect>(
    store: &S,
    run_id: &str,
    worker: &str,
    ttl: Duration,
) -> Result<Option<(Lease, RunRecord)>, StoreError> {
    let args = [Arg::Text(run_id), Arg::Text(worker), Arg::Int(ms(ttl))];
    let rows = store
        .fetch(S::claim_run_sql(), &clocked(store, &args))
        .await?;
    match rows.first() {
        Some(row) => match claimed_row(store.head_cache(), row, worker)? {
            ClaimedRow::Claimed(lease, record) => Ok(Some((lease, record))),
            ClaimedRow::Unreadable { run_id, message } => {
                quarantine_unreadable(store, &run_id, &message).await?;
                Err(StoreError::Corrupt { run_id, message })
            }
        },
        None if head_of(store, run_id).await?.is_none() => {
            Err(StoreError::NotFound(run_id.to_owned()))
        }
        None => Ok(None),
    }
}

/// The run of `new`'s id that inserting `new` found (`stored`, with its creation hash):
/// the same request's run (a retry: the same creation hash and parent) is returned, any
/// other request is refused.
///
/// # Errors
/// [`StoreError::AlreadyExists`] for another request's run.
pub fn created_before(
    record: RunRecord,
    creation_hash: &str,
    new: &agent_core::store::NewRun,
    parent: Option<(&str, u64)>,
) -> Result<RunRecord, StoreError> {
    let same_parent = record.parent.as_ref().map(|(p, v)| (p.as_str(), *v)) == parent;
    if creation_hash == agent_core::store::creation_hash(new) && same_parent {
        Ok(record)
    } else {
        Err(StoreError::AlreadyExists(new.id.clone()))
    }
}
