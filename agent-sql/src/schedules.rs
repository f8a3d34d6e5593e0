//! The schedules role ([`ScheduleStore`](agent_core::store::ScheduleStore)) written once
//! over the SQL stores: one table, each schedule a JSON document beside its agent, its
//! revision and when it comes due (indexed), written by compare-and-set on the revision
//! in one `UPDATE … WHERE revision = $2`. A store names its statement texts and invokes
//! [`impl_sql_schedules!`](crate::impl_sql_schedules).

use agent_core::schedule::Schedule;
use agent_core::store::{Millis, StoreError};

use crate::reads::{Arg, SqlReads};
use crate::rows::SqlRow;
use crate::to_i64;

/// The statements of the schedules role, in a dialect.
pub trait SqlSchedules: SqlReads {
    /// Insert schedule `$1` of agent `$2` at revision `$3`, due `$4`, document `$5`
    /// unless the id exists; the `body` when it inserted.
    const INSERT_SCHEDULE: &'static str;
    /// The `body` of schedule `$1`.
    const LOAD_SCHEDULE: &'static str;
    /// The `body` of every schedule of agent `$1` (every agent's when `NULL`), by id.
    const LIST_SCHEDULES: &'static str;
    /// Write schedule `$1` at revision `$3`, due `$4`, document `$5` if its revision is
    /// `$2`; its `body` when it wrote.
    const REPLACE_SCHEDULE: &'static str;
    /// Delete schedule `$1`; its `id` when it existed.
    const DELETE_SCHEDULE: &'static str;
    /// The `body` of at most `$3` schedules of agent `$1` due at or before `$2`, earliest
    /// first.
    const DUE_SCHEDULES: &'static str;
    /// The earliest `due_at` of agent `$1`'s schedules, in the column `0`; no row when none.
    const NEXT_SCHEDULE_DUE: &'static str;
}

fn decode(rows: &[impl SqlRow]) -> Result<Vec<Schedule>, StoreError> {
    rows.iter()
        .map(|row| {
            let body = row
                .schedule_row()
                .map_err(|e| StoreError::backend(format!("a schedule row does not read: {e}")))?
                .body
                .0;
            serde_json::from_value(body)
                .map_err(|e| StoreError::backend(format!("a stored schedule does not read: {e}")))
        })
        .collect()
}

fn encode(schedule: &Schedule) -> Result<String, StoreError> {
    serde_json::to_string(schedule).map_err(|e| StoreError::backend(e.to_string()))
}

/// `ScheduleStore::insert_schedule`.
///
/// # Errors
/// The store's error.
pub async fn insert_schedule<S: SqlSchedules>(
    store: &S,
    schedule: &Schedule,
) -> Result<Option<Schedule>, StoreError> {
    let body = encode(schedule)?;
    let args = [
        Arg::Text(&schedule.id),
        Arg::Text(&schedule.agent),
        Arg::Int(to_i64(schedule.revision)),
        Arg::OptInt(schedule.due_at()),
        Arg::Text(&body),
    ];
    let rows = store.fetch(S::INSERT_SCHEDULE, &args).await?;
    Ok(decode(&rows)?.pop())
}

/// `ScheduleStore::load_schedule`.
///
/// # Errors
/// The store's error.
pub async fn load_schedule<S: SqlSchedules>(
    store: &S,
    id: &str,
) -> Result<Option<Schedule>, StoreError> {
    let rows = store.fetch(S::LOAD_SCHEDULE, &[Arg::Text(id)]).await?;
    Ok(decode(&rows)?.pop())
}

/// `ScheduleStore::list_schedules`.
///
/// # Errors
/// The store's error.
pub async fn list_schedules<S: SqlSchedules>(
    store: &S,
    agent: Option<&str>,
) -> Result<Vec<Schedule>, StoreError> {
    let rows = store
        .fetch(S::LIST_SCHEDULES, &[Arg::OptText(agent)])
        .await?;
    decode(&rows)
}

/// `ScheduleStore::replace_schedule`.
///
/// # Errors
/// The store's error.
pub async fn replace_schedule<S: SqlSchedules>(
    store: &S,
    schedule: &Schedule,
    expected_revision: u64,
) -> Result<Option<Schedule>, StoreError> {
    let body = encode(schedule)?;
    let args = [
        Arg::Text(&schedule.id),
        Arg::Int(to_i64(expected_revision)),
        Arg::Int(to_i64(schedule.revision)),
        Arg::OptInt(schedule.due_at()),
        Arg::Text(&body),
    ];
    let rows = store.fetch(S::REPLACE_SCHEDULE, &args).await?;
    Ok(decode(&rows)?.pop())
}

/// `ScheduleStore::delete_schedule`.
///
/// # Errors
/// The store's error.
pub async fn delete_schedule<S: SqlSchedules>(store: &S, id: &str) -> Result<bool, StoreError> {
    let rows = store.fetch(S::DELETE_SCHEDULE, &[Arg::Text(id)]).await?;
    Ok(!rows.is_empty())
}

/// `ScheduleStore::due_schedules`.
///
/// # Errors
/// The store's error.
pub async fn due_schedules<S: SqlSchedules>(
    store: &S,
    agent: &str,
    now: Millis,
    limit: usize,
) -> Result<Vec<Schedule>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let args = [Arg::Text(agent), Arg::Int(now), Arg::Int(limit)];
    let rows = store.fetch(S::DUE_SCHEDULES, &args).await?;
    decode(&rows)
}

/// `ScheduleStore::next_schedule_due`.
///
/// # Errors
/// The store's error.
pub async fn next_schedule_due<S: SqlSchedules>(
    store: &S,
    agent: &str,
) -> Result<Option<Millis>, StoreError> {
    let rows = store
        .fetch(S::NEXT_SCHEDULE_DUE, &[Arg::Text(agent)])
        .await?;
    rows.first()
        .map(|row| {
            row.first_int()
                .map_err(|e| StoreError::backend(format!("a due time does not read: {e}")))
        })
        .transpose()
}

/// `impl SqlSchedules` from the store's statement module `$sql`, and
/// `impl ScheduleStore` over [`crate::schedules`]'s functions.
///
/// ```text
/// agent_sql::impl_sql_schedules!(PgStore, schedule_sql);
/// ```
#[macro_export]
macro_rules! impl_sql_schedules {
    ($store:ty, $sql:ident) => {
        impl $crate::schedules::SqlSchedules for $store {
            const INSERT_SCHEDULE: &'static str = $sql::INSERT_SCHEDULE;
            const LOAD_SCHEDULE: &'static str = $sql::LOAD_SCHEDULE;
            const LIST_SCHEDULES: &'static str = $sql::LIST_SCHEDULES;
            const REPLACE_SCHEDULE: &'static str = $sql::REPLACE_SCHEDULE;
            const DELETE_SCHEDULE: &'static str = $sql::DELETE_SCHEDULE;
            const DUE_SCHEDULES: &'static str = $sql::DUE_SCHEDULES;
            const NEXT_SCHEDULE_DUE: &'static str = $sql::NEXT_SCHEDULE_DUE;
        }

        #[$crate::__private::async_trait]
        impl $crate::__private::ScheduleStore for $store {
            async fn insert_schedule(
                &self,
                schedule: &$crate::__private::Schedule,
            ) -> Result<Option<$crate::__private::Schedule>, $crate::__private::StoreError> {
                $crate::schedules::insert_schedule(self, schedule).await
            }

            async fn load_schedule(
                &self,
                id: &str,
            ) -> Result<Option<$crate::__private::Schedule>, $crate::__private::StoreError> {
                $crate::schedules::load_schedule(self, id).await
            }

            async fn list_schedules(
                &self,
                agent: Option<&str>,
            ) -> Result<Vec<$crate::__private::Schedule>, $crate::__private::StoreError> {
                $crate::schedules::list_schedules(self, agent).await
            }

            async fn replace_schedule(
                &self,
                schedule: &$crate::__private::Schedule,
                expected_revision: u64,
            ) -> Result<Option<$crate::__private::Schedule>, $crate::__private::StoreError> {
                $crate::schedules::replace_schedule(self, schedule, expected_revision).await
            }

            async fn delete_schedule(
                &self,
                id: &str,
            ) -> Result<bool, $crate::__private::StoreError> {
                $crate::schedules::delete_schedule(self, id).await
            }

            async fn due_schedules(
                &self,
                agent: &str,
                now: i64,
                limit: usize,
            ) -> Result<Vec<$crate::__private::Schedule>, $crate::__private::StoreError> {
                $crate::schedules::due_schedules(self, agent, now, limit).await
            }

            async fn next_schedule_due(
                &self,
                agent: &str,
            ) -> Result<Option<i64>, $crate::__private::StoreError> {
                $crate::schedules::next_schedule_due(self, agent).await
            }
        }
    };
}
