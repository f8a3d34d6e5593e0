//! Claims: a held lease, and a claimed run with what the claim read for its resumption.

use serde::{Deserialize, Serialize};

use super::{Millis, RunRecord, SignalRecord, VersionSpan};

/// A held lease: the right to write the run's next version, fenced by `epoch`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The run.
    pub run_id: String,
    /// The holder.
    pub worker: String,
    /// Strictly increasing per run; every fenced write checks it.
    pub epoch: u64,
    /// Expiry.
    pub expires_at: Millis,
}

/// What a claim read besides the run, for the worker about to resume it
/// ([`RunStore::claim_next`](crate::store::RunStore::claim_next)): what the runner
/// would otherwise read with statements of its own before the run's first step. Read in
/// the claim's statement, while the new lease already holds the run, so none of it can
/// change under the runner (only a lease holder commits or journals, and only the
/// runner consumes a signal).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClaimReads {
    /// The run's stored versions, as [`HistoryStore::version_span`](crate::store::HistoryStore::version_span)
    /// answers.
    pub span: Option<VersionSpan>,
    /// Whether the journal holds an entry at the run's current version (a step
    /// interrupted after a tool call); when not, the first step does not read it.
    pub journaled_at_version: bool,
    /// The signals pending for a waiting run, oldest first, as
    /// [`HistoryStore::pending_signals`](crate::store::HistoryStore::pending_signals) answers; `None` when not
    /// read (the run does not wait). A signal sent after the claim is not here: the runner
    /// reads them again when none of these is the one it waits for.
    pub pending_signals: Option<Vec<SignalRecord>>,
}

impl ClaimReads {
    /// What a run just created holds: its start version, no journal, no signals (nothing
    /// can be sent to a run before it exists, and a new run does not wait).
    #[must_use]
    pub fn created() -> Self {
        Self {
            span: Some(VersionSpan {
                first: 0,
                last: 0,
                count: 1,
            }),
            journaled_at_version: false,
            pending_signals: None,
        }
    }
}

/// A claimed run: its lease, its record, and what the claim read for its resumption
/// (`None` when the store reads nothing more with a claim).
#[derive(Clone, Debug, PartialEq)]
pub struct Claimed {
    /// The new lease.
    pub lease: Lease,
    /// The run as claimed.
    pub record: RunRecord,
    /// What the claim read besides the run.
    pub reads: Option<ClaimReads>,
}
