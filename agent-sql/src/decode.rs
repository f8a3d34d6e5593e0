//! [`SqlRow`]: one bound for code generic over the store's row type, standing for "decodes
//! into every row type of [`rows`](crate::rows)".

use sqlx::{FromRow, Row};

use crate::events::EventRow;
use crate::rows::{
    AgentRow, Applied, ChildRow, CountRow, CutoffRow, EnabledRow, EntryRow, GraphRow, HeadRow,
    IdRow, LabelCountRow, LimitRow, PayloadRow, RunRow, SalvageRow, ScheduleRow, SignalRow,
    SpanRow, SpendRow, SwitchRow, TransitionRow, VersionCountRow,
};

/// A row of either dialect that decodes into every row type of [`rows`](crate::rows). Implemented
/// for every row type that does (`PgRow`, `SqliteRow`), so that code generic over the
/// store needs this one bound, not one per row type.
pub trait SqlRow: Row {
    /// The row as a run row.
    ///
    /// # Errors
    /// The driver's decode error.
    fn run_row(&self) -> sqlx::Result<RunRow>;
    /// The columns of a run row but its state.
    ///
    /// # Errors
    /// The driver's decode error.
    fn salvage_row(&self) -> sqlx::Result<SalvageRow>;
    /// The `id` column alone.
    ///
    /// # Errors
    /// The driver's decode error.
    fn id(&self) -> sqlx::Result<String>;
    /// The `agent` column alone.
    ///
    /// # Errors
    /// The driver's decode error.
    fn agent(&self) -> sqlx::Result<String>;
    /// The row as a head row.
    ///
    /// # Errors
    /// The driver's decode error.
    fn head_row(&self) -> sqlx::Result<HeadRow>;
    /// The row as a transition row.
    ///
    /// # Errors
    /// The driver's decode error.
    fn transition_row(&self) -> sqlx::Result<TransitionRow>;
    /// The row as a payload row.
    ///
    /// # Errors
    /// The driver's decode error.
    fn payload_row(&self) -> sqlx::Result<PayloadRow>;
    /// The row as a span row.
    ///
    /// # Errors
    /// The driver's decode error.
    fn span_row(&self) -> sqlx::Result<SpanRow>;
    /// The row as a journal row.
    ///
    /// # Errors
    /// The driver's decode error.
    fn entry_row(&self) -> sqlx::Result<EntryRow>;
    /// The row as a signal row.
    ///
    /// # Errors
    /// The driver's decode error.
    fn signal_row(&self) -> sqlx::Result<SignalRow>;
    /// The `graph` column.
    ///
    /// # Errors
    /// The driver's decode error.
    fn graph_row(&self) -> sqlx::Result<GraphRow>;
    /// The `enabled` column.
    ///
    /// # Errors
    /// The driver's decode error.
    fn enabled_row(&self) -> sqlx::Result<EnabledRow>;
    /// The `cutoff` column.
    ///
    /// # Errors
    /// The driver's decode error.
    fn cutoff_row(&self) -> sqlx::Result<CutoffRow>;
    /// The row as a count per status.
    ///
    /// # Errors
    /// The driver's decode error.
    fn count_row(&self) -> sqlx::Result<CountRow>;
    /// The row as a count per agent version and fingerprint.
    ///
    /// # Errors
    /// The driver's decode error.
    fn version_count_row(&self) -> sqlx::Result<VersionCountRow>;
    /// The row as a label value's count.
    ///
    /// # Errors
    /// The driver's decode error.
    fn label_count_row(&self) -> sqlx::Result<LabelCountRow>;
    /// The row as an agent's spend on a day.
    ///
    /// # Errors
    /// The driver's decode error.
    fn spend_row(&self) -> sqlx::Result<SpendRow>;
    /// The row as a tool switch row.
    ///
    /// # Errors
    /// The driver's decode error.
    fn switch_row(&self) -> sqlx::Result<SwitchRow>;
    /// The row as what a commit changed.
    ///
    /// # Errors
    /// The driver's decode error.
    fn applied_row(&self) -> sqlx::Result<Applied>;
    /// The row as a record of the event statements.
    ///
    /// # Errors
    /// The driver's decode error.
    fn event_row(&self) -> sqlx::Result<EventRow>;
    /// The row as a child a cancel may reach.
    ///
    /// # Errors
    /// The driver's decode error.
    fn child_row(&self) -> sqlx::Result<ChildRow>;
    /// The first column, a `bigint` (a statement's one number).
    ///
    /// # Errors
    /// The driver's decode error.
    fn first_int(&self) -> sqlx::Result<i64>;
    /// The row as a stored schedule.
    ///
    /// # Errors
    /// The driver's decode error.
    fn schedule_row(&self) -> sqlx::Result<ScheduleRow>;
    /// The row as a rate limit's bucket.
    ///
    /// # Errors
    /// The driver's decode error.
    fn limit_row(&self) -> sqlx::Result<LimitRow>;
}

impl<R> SqlRow for R
where
    R: Row,
    for<'r> RunRow: FromRow<'r, R>,
    for<'r> SalvageRow: FromRow<'r, R>,
    for<'r> IdRow: FromRow<'r, R>,
    for<'r> AgentRow: FromRow<'r, R>,
    for<'r> HeadRow: FromRow<'r, R>,
    for<'r> TransitionRow: FromRow<'r, R>,
    for<'r> PayloadRow: FromRow<'r, R>,
    for<'r> SpanRow: FromRow<'r, R>,
    for<'r> EntryRow: FromRow<'r, R>,
    for<'r> SignalRow: FromRow<'r, R>,
    for<'r> SwitchRow: FromRow<'r, R>,
    for<'r> GraphRow: FromRow<'r, R>,
    for<'r> EnabledRow: FromRow<'r, R>,
    for<'r> CutoffRow: FromRow<'r, R>,
    for<'r> CountRow: FromRow<'r, R>,
    for<'r> VersionCountRow: FromRow<'r, R>,
    for<'r> LabelCountRow: FromRow<'r, R>,
    for<'r> SpendRow: FromRow<'r, R>,
    for<'r> Applied: FromRow<'r, R>,
    for<'r> EventRow: FromRow<'r, R>,
    for<'r> ChildRow: FromRow<'r, R>,
    for<'r> (i64,): FromRow<'r, R>,
    for<'r> ScheduleRow: FromRow<'r, R>,
    for<'r> LimitRow: FromRow<'r, R>,
{
    fn run_row(&self) -> sqlx::Result<RunRow> {
        RunRow::from_row(self)
    }
    fn salvage_row(&self) -> sqlx::Result<SalvageRow> {
        SalvageRow::from_row(self)
    }
    fn id(&self) -> sqlx::Result<String> {
        IdRow::from_row(self).map(|r| r.id)
    }
    fn agent(&self) -> sqlx::Result<String> {
        AgentRow::from_row(self).map(|r| r.agent)
    }
    fn head_row(&self) -> sqlx::Result<HeadRow> {
        HeadRow::from_row(self)
    }
    fn transition_row(&self) -> sqlx::Result<TransitionRow> {
        TransitionRow::from_row(self)
    }
    fn payload_row(&self) -> sqlx::Result<PayloadRow> {
        PayloadRow::from_row(self)
    }
    fn span_row(&self) -> sqlx::Result<SpanRow> {
        SpanRow::from_row(self)
    }
    fn entry_row(&self) -> sqlx::Result<EntryRow> {
        EntryRow::from_row(self)
    }
    fn signal_row(&self) -> sqlx::Result<SignalRow> {
        SignalRow::from_row(self)
    }
    fn graph_row(&self) -> sqlx::Result<GraphRow> {
        GraphRow::from_row(self)
    }
    fn enabled_row(&self) -> sqlx::Result<EnabledRow> {
        EnabledRow::from_row(self)
    }
    fn cutoff_row(&self) -> sqlx::Result<CutoffRow> {
        CutoffRow::from_row(self)
    }
    fn count_row(&self) -> sqlx::Result<CountRow> {
        CountRow::from_row(self)
    }
    fn version_count_row(&self) -> sqlx::Result<VersionCountRow> {
        VersionCountRow::from_row(self)
    }
    fn label_count_row(&self) -> sqlx::Result<LabelCountRow> {
        LabelCountRow::from_row(self)
    }
    fn spend_row(&self) -> sqlx::Result<SpendRow> {
        SpendRow::from_row(self)
    }
    fn switch_row(&self) -> sqlx::Result<SwitchRow> {
        SwitchRow::from_row(self)
    }
    fn applied_row(&self) -> sqlx::Result<Applied> {
        Applied::from_row(self)
    }
    fn event_row(&self) -> sqlx::Result<EventRow> {
        EventRow::from_row(self)
    }
    fn child_row(&self) -> sqlx::Result<ChildRow> {
        ChildRow::from_row(self)
    }
    fn first_int(&self) -> sqlx::Result<i64> {
        <(i64,)>::from_row(self).map(|(n,)| n)
    }
    fn schedule_row(&self) -> sqlx::Result<ScheduleRow> {
        ScheduleRow::from_row(self)
    }

    fn limit_row(&self) -> sqlx::Result<LimitRow> {
        LimitRow::from_row(self)
    }
}
