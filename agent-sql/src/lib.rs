//! # agent-sql
//!
//! **Internal crate: not for users.** It is the SQL layer under the two SQL stores of
//! durable agents, [`agent-pg`](https://docs.rs/agent-pg) and
//! [`agent-sqlite`](https://docs.rs/agent-sqlite), the way `sqlx-core` sits under sqlx's
//! drivers. Depend on one of those stores instead; this crate's API follows what they
//! need and changes with them (they pin it with `=`).
//!
//! It holds what is the same on both dialects:
//! - [`rows`]: the rows the stores read, decoded with sqlx's `FromRow` derive (JSON columns
//!   through [`sqlx::types::Json`], whether the database stores it as `jsonb` or as text),
//!   and their conversion to the records of [`agent_core::store`], reporting data that does
//!   not read as [`StoreError::Corrupt`] with the run it belongs to;
//! - [`commit`]: the planning of a step commit, from the run's stored head to the payload
//!   (snapshot or patch), the chained hash and the record after the commit;
//! - [`dialect`]: the writes whose logic is the same on both (status sets, quarantine,
//!   leases, signals, claims of one run), over a trait of the dialect's hooks: its
//!   statements, its clock, its write transactions and how it wakes workers and followers;
//! - [`events`]: `EventLog::events`, from the records positioned after a cursor;
//! - [`heads`]: the cache of the heads of runs, so that a commit need not read its run back;
//! - [`migrations`]: whether a database holds the migrations a binary embeds, for opens that
//!   must not migrate;
//! - [`reads`]: the reads whose logic is the same on both (time travel, history, journal,
//!   signals, fork), over a small trait each store implements;
//! - [`retention`]: `OperatorStore::prune`, a batch chosen by reads and written set-based;
//! - [`sql`]: the statements whose text is the same on both dialects, and the list of final
//!   statuses, derived once from [`RunStatus`](agent_core::store::RunStatus);
//! - [`write`](mod@write): the rows of a step's writes (a commit, a journal entry, a signal), built
//!   once from the records, and the planning of a commit from its run's head to its row;
//! - [`write_queue`]: the queue of the group commits, which hands writes to a store's own
//!   writer alone or in batches.
//!
//! Each store keeps what is its own: connection setup, migrations and its dialect's
//! statements (and how a batch of the group commit is written: grouped statements on
//! PostgreSQL, one transaction on SQLite; on PostgreSQL, `LISTEN/NOTIFY`).
#![warn(missing_docs)]

use std::time::Duration;

use agent_core::store::{ClaimReads, Claimed, Lease, RunRecord, StoreError};
use serde_json::Value;

pub mod commit;
mod decode;
pub mod dialect;
pub mod events;
pub mod heads;
pub mod limits;
pub mod migrations;
pub mod operator;
pub mod reads;
pub mod retention;
pub mod rows;
pub mod schedules;
pub mod sql;
mod store_impl;
pub mod write;
pub mod write_queue;

/// What [`impl_sql_store!`] names; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use agent_core::graph::GraphDescription;
    pub use agent_core::schedule::Schedule;
    pub use agent_core::store::{
        Budget, Claimed, DaySpend, EventCursor, EventLog, EventScope, EventWakes, HistoryStore,
        InspectedRun, JournalEntry, LabelValueCount, Lease, LimitState, LimitStore,
        MigrationCommit, Millis, OperatorNote, OperatorStore, PruneReport, RateLimit,
        RetentionPolicy, RunEvent, RunFailure, RunFilter, RunRecord, RunStatus, RunStore,
        ScheduleStore, SignalReceipt, SignalRecord, StateAtVersion, StepCommit, StoreError,
        ToolSwitch, TransitionRecord, VersionCount, VersionSpan, WaitingFor, operator,
    };
    pub use async_trait::async_trait;
    pub use serde_json::Value;
}

/// Tool outputs whose JSON is larger than this many bytes are stored in the `outputs` side
/// table; the journal row keeps a summary.
pub const LARGE_OUTPUT_BYTES: usize = 8 * 1024;

/// How many characters of an output the journal keeps as its summary.
const SUMMARY_CHARS: usize = 200;

/// A store error for data of `run_id` that does not read.
pub fn corrupt(run_id: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        run_id: run_id.to_owned(),
        message: e.to_string(),
    }
}

/// Why a repair's compare-and-set matched no row: the run is gone, or it moved since the
/// repair was planned (`current`: the run as read after the refusal).
#[must_use]
pub fn repair_refused(
    commit: &agent_core::store::RepairCommit,
    current: Result<Option<RunRecord>, StoreError>,
) -> StoreError {
    match current {
        Ok(None) => StoreError::NotFound(commit.run_id.clone()),
        Ok(Some(run)) => StoreError::Conflict {
            run_id: commit.run_id.clone(),
            expected: commit.last_version,
            found: run.version,
        },
        // A row that still does not read has not been repaired either.
        Err(_) => StoreError::Conflict {
            run_id: commit.run_id.clone(),
            expected: commit.last_version,
            found: commit.last_version,
        },
    }
}

/// A `u64` as the databases' `bigint` (saturating; no stored count comes near it).
#[must_use]
pub fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A stored `bigint` that must not be negative.
///
/// # Errors
/// [`sqlx::Error::Decode`] for a negative value.
pub fn to_u64(v: i64) -> Result<u64, sqlx::Error> {
    u64::try_from(v).map_err(|_| sqlx::Error::Decode(format!("negative value {v}").into()))
}

/// A lease's time to live in milliseconds, bounded so that adding it to a time cannot
/// overflow.
#[must_use]
pub fn ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 4)
}

/// What the journal keeps of an output's JSON text: its first characters.
#[must_use]
pub fn summary(text: &str) -> String {
    match text.char_indices().nth(SUMMARY_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The name serde gives a unit variant (the stored form of enums without an `as_str`).
pub fn serde_name<T: serde::Serialize>(v: &T) -> Option<String> {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// The lease a claim of `r` by `worker` holds.
#[must_use]
pub fn lease_of(r: &RunRecord, worker: &str) -> Lease {
    Lease {
        run_id: r.id.clone(),
        worker: worker.to_owned(),
        epoch: r.epoch,
        expires_at: r.lease_expires_at.unwrap_or(r.updated_at),
    }
}

/// A run just created claimed by `worker` ([`RunStore::create_run_claimed`]), with what its
/// first step would read: nothing beyond its start.
///
/// [`RunStore::create_run_claimed`]: agent_core::store::RunStore::create_run_claimed
#[must_use]
pub fn created_claimed(record: RunRecord, worker: &str) -> Claimed {
    Claimed {
        lease: lease_of(&record, worker),
        record,
        reads: Some(ClaimReads::created()),
    }
}

/// The claimed runs, each with what the store's claim read for it
/// ([`RunStore::claim_next`]): `rows` are the rows of the store's statement reading
/// them, `decode` reads a row's run id and reads. The claims stand whatever happened
/// there: a run whose reads failed or did not decode gets `reads: None`, and the runner
/// reads them itself.
///
/// [`RunStore::claim_next`]: agent_core::store::RunStore::claim_next
pub fn with_claim_reads<R>(
    claimed: Vec<(Lease, RunRecord)>,
    rows: Result<Vec<R>, StoreError>,
    decode: impl Fn(&R) -> Result<(String, ClaimReads), StoreError>,
) -> Vec<Claimed> {
    let mut reads = std::collections::HashMap::new();
    match rows {
        Ok(rows) => {
            for row in &rows {
                match decode(row) {
                    Ok((id, r)) => {
                        reads.insert(id, r);
                    }
                    Err(e) => tracing::warn!(error = %e,
                        "a claimed run's reads did not decode; the runner reads them"),
                }
            }
        }
        Err(e) => tracing::warn!(error = %e,
            "reading the claimed runs' history, journal and signals failed; \
             the runner reads them run by run"),
    }
    claimed
        .into_iter()
        .map(|(lease, record)| Claimed {
            reads: reads.remove(&record.id),
            lease,
            record,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_cuts_at_a_character() {
        assert_eq!(summary("short"), "short");
        let long = "é".repeat(SUMMARY_CHARS + 5);
        let cut = summary(&long);
        assert_eq!(cut.chars().count(), SUMMARY_CHARS + 1);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn negative_counts_do_not_read() {
        assert_eq!(to_u64(7).unwrap(), 7);
        assert!(to_u64(-1).is_err());
        assert_eq!(to_i64(u64::MAX), i64::MAX);
    }
}
