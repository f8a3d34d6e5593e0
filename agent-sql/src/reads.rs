//! Reads whose logic is the same on both stores, over [`SqlReads`]: each store says how to
//! run a statement bound to a run, and gives its dialect's text where it differs.

use agent_core::store::{
    JournalEntry, NewRun, RunRecord, SignalRecord, StateAtVersion, StoreError, TransitionRecord,
    VersionSpan,
};
use async_trait::async_trait;

use crate::rows::{self, SqlRow};
use crate::sql;

/// What the shared reads need of a store.
#[async_trait]
pub trait SqlReads: Sync {
    /// The driver's row.
    type Row: SqlRow + Send;

    /// A run's history in the columns of [`rows::TransitionRow`], `$1` the run.
    const HISTORY: &'static str;
    /// A run's journal in the columns of [`rows::EntryRow`], `$1` the run, `$2` a version
    /// or `NULL` for all.
    const JOURNAL: &'static str;
    /// A run's pending signals in the columns of [`rows::SignalRow`], `$1` the run.
    const PENDING_SIGNALS: &'static str;

    /// The rows of `sql` with `$1` bound to `run_id`.
    ///
    /// # Errors
    /// The store's error for a failed statement.
    async fn rows_of(&self, sql: &'static str, run_id: &str) -> Result<Vec<Self::Row>, StoreError>;

    /// The rows of `sql` with `$1` bound to `run_id` and `$2` to `version` (`NULL` for
    /// `None`).
    ///
    /// # Errors
    /// The store's error for a failed statement.
    async fn rows_at(
        &self,
        sql: &'static str,
        run_id: &str,
        version: Option<u64>,
    ) -> Result<Vec<Self::Row>, StoreError>;

    /// The run, as `Store::load_run` reads it.
    ///
    /// # Errors
    /// As `Store::load_run`.
    async fn load(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError>;

    /// Create `new` as a fork of `parent` (run and version), as `Store::fork` does
    /// (idempotent: the same fork again returns the run it made).
    ///
    /// # Errors
    /// As `Store::fork`.
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
    let rows = store.rows_of(sql::RUN_HEAD, run_id).await?;
    rows.first().map(|r| rows::head(run_id, r)).transpose()
}

/// `NotFound` when rows of a run came back empty and the run does not exist either.
async fn found<S: SqlReads, T>(
    store: &S,
    run_id: &str,
    rows: Vec<T>,
) -> Result<Vec<T>, StoreError> {
    if rows.is_empty() && head_of(store, run_id).await?.is_none() {
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
    let rows = store.rows_at(sql::STATE_AT, run_id, Some(version)).await?;
    if rows.is_empty() {
        let exists = store
            .rows_at(sql::VERSION_EXISTS, run_id, Some(version))
            .await?;
        return if exists.is_empty() {
            Ok(None)
        } else {
            Err(rows::corrupt_history(run_id, version))
        };
    }
    rows::replay(run_id, version, &rows)
}

/// `Store::state_at`.
///
/// # Errors
/// As `Store::state_at`.
pub async fn state_at<S: SqlReads>(
    store: &S,
    run_id: &str,
    version: u64,
) -> Result<Option<StateAtVersion>, StoreError> {
    let at = replay_at(store, run_id, version).await?;
    if at.is_none() && head_of(store, run_id).await?.is_none() {
        return Err(StoreError::NotFound(run_id.to_owned()));
    }
    Ok(at)
}

/// `Store::version_span`.
///
/// # Errors
/// As `Store::version_span`.
pub async fn version_span<S: SqlReads>(
    store: &S,
    run_id: &str,
) -> Result<Option<VersionSpan>, StoreError> {
    let rows = store.rows_of(sql::VERSION_SPAN, run_id).await?;
    match rows.first() {
        Some(row) => rows::version_span(run_id, row),
        None => Ok(None),
    }
}

/// `Store::history`.
///
/// # Errors
/// As `Store::history`.
pub async fn history<S: SqlReads>(
    store: &S,
    run_id: &str,
) -> Result<Vec<TransitionRecord>, StoreError> {
    let rows = found(store, run_id, store.rows_of(S::HISTORY, run_id).await?).await?;
    rows.iter().map(|r| rows::transition(run_id, r)).collect()
}

/// `Store::journal`.
///
/// # Errors
/// As `Store::journal`.
pub async fn journal<S: SqlReads>(
    store: &S,
    run_id: &str,
    version: Option<u64>,
) -> Result<Vec<JournalEntry>, StoreError> {
    let rows = store.rows_at(S::JOURNAL, run_id, version).await?;
    let rows = found(store, run_id, rows).await?;
    rows.iter().map(|r| rows::entry(run_id, r)).collect()
}

/// `Store::pending_signals`.
///
/// # Errors
/// As `Store::pending_signals`.
pub async fn pending_signals<S: SqlReads>(
    store: &S,
    run_id: &str,
) -> Result<Vec<SignalRecord>, StoreError> {
    let rows = store.rows_of(S::PENDING_SIGNALS, run_id).await?;
    let rows = found(store, run_id, rows).await?;
    rows.iter().map(|r| rows::signal(run_id, r)).collect()
}

/// `Store::fork`: a new run from the state of `run_id` at `version`.
///
/// # Errors
/// As `Store::fork`.
pub async fn fork<S: SqlReads>(
    store: &S,
    run_id: &str,
    version: u64,
    new_id: &str,
) -> Result<RunRecord, StoreError> {
    let source = store
        .load(run_id)
        .await?
        .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
    let at = replay_at(store, run_id, version)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("{run_id}@{version}")))?;
    let new = NewRun {
        id: new_id.to_owned(),
        agent: source.agent,
        fingerprint: source.fingerprint,
        state_name: at.state_name,
        state: at.state,
    };
    store.insert_fork(&new, (run_id, version)).await
}
