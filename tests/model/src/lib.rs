//! The durable execution protocol as a model, checked exhaustively within bounds with
//! [`stateright`].
//!
//! The model is the protocol among workers and the store for one run, as `docs/verification.md`
//! describes it: a worker claims the run (a lease with a fencing epoch), asks the model for a
//! decision and journals it, calls a write tool under an idempotency key and journals its
//! result, and commits the step with a compare-and-set on version and epoch. Faults, from a
//! budget: a worker crashes at any point, its lease expires while it still works, a commit's
//! request or acknowledgement is lost. A worker whose commit outcome is unknown reads the run
//! back to learn it; a worker that finds its lease gone stops. Optional parts add a signal
//! waited for (sent plainly, or under a dedup key by a sender that retries and redelivers),
//! a child run started and joined, a failed run compensated, a migration to a newer agent
//! version, a durable timer waited for, an operator's cancel, and an ask under a rate limit
//! whose far turn hands the run back until then.
//!
//! Each action is named after the store call it stands for (`claim_run`, `record_entry`,
//! `commit_step`, `renew_lease`, `load_run`), so that a path of the model reads as the calls a
//! runner makes.
//!
//! [`Protocol::properties`] are the durable execution contract's invariants (DESIGN.md,
//! invariants 1, 3, 4 and 5, and those of signals, children, sagas, migrations, timers and
//! cancels) and its
//! liveness under a finite fault budget. A [`Mutation`]
//! removes one mechanism the invariants rest on; the tests show each one yields a
//! counterexample, so no invariant holds vacuously.

use std::collections::{BTreeMap, BTreeSet};

use stateright::{Model, Property};

/// The protocol for one run, within bounds.
#[derive(Debug, Clone)]
pub struct Protocol {
    /// Worker processes sharing the run.
    pub workers: u8,
    /// Steps the run makes before it completes (its final commit is version `steps`).
    pub steps: u8,
    /// How many faults may happen along one path: crashes, early lease expiries, lost
    /// commit requests or acknowledgements.
    pub faults: u8,
    /// The version at which the run waits for a signal (the commit into it makes the run
    /// waiting; the step from it consumes the signal in its commit), if it does.
    pub signal_at: Option<u8>,
    /// The version whose step starts a child run (its call is the child's creation, under
    /// the child's id as its key) and commits into a wait for it; the step after it joins.
    pub child_at: Option<u8>,
    /// The version whose step fails the run after its call: its commit makes the run
    /// compensating, and the round at the next version undoes every step's call, last
    /// first, before the run ends compensated (`steps` is then this version plus two).
    pub saga_at: Option<u8>,
    /// The run starts on an older version of its agent and every worker runs the newer
    /// one: a worker that claims it on the older version migrates it first (a transition
    /// of its own, the lease kept), and the step it was in resumes from the journal of the
    /// version it began at (the resume base).
    pub migrate: bool,
    /// With a signal (`signal_at`): 0 when a client sends it once with `send_signal`;
    /// otherwise the signal is sent with `send_signal_once` under one dedup key, by a sender
    /// that sends it again when it did not hear the receipt and may be redelivered at any
    /// moment (after the run consumed it too), at most this many times along a path.
    pub signal_sends: u8,
    /// The version at which the run waits for a durable timer: the commit into it stores
    /// the run waiting with a due time one tick after it, and releases the lease; the step
    /// from it runs once the clock reached the due time.
    pub timer_at: Option<u8>,
    /// An operator may cancel the run once, at any moment (`cancel_run`).
    pub cancel: bool,
    /// The version whose step asks the model under a rate limit: before asking, the worker
    /// takes a turn (`take_capacity`), and may hand the run back until it (`defer_run`,
    /// once along a path); the claim right after the hand-back asks under that turn
    /// without taking another.
    pub capacity_at: Option<u8>,
    /// Mechanisms removed, to show that an invariant rests on them.
    pub mutations: Vec<Mutation>,
}

/// One mechanism of the protocol, removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// The commit's compare-and-set ignores the epoch: a worker whose lease was taken over
    /// still commits.
    NoEpochCheck,
    /// The commit's compare-and-set ignores the version. Alone it breaks nothing (each epoch
    /// has one worker, which reads an unknown outcome back); with [`BlindRetry`](Self::BlindRetry)
    /// a version is committed twice.
    NoVersionCheck,
    /// A commit whose outcome is unknown is sent again without reading the run back. Alone
    /// it breaks nothing: the version check refuses the second one.
    BlindRetry,
    /// A write's idempotency key is derived from the attempt (the epoch), not from the run,
    /// step and call: a retried call is a new effect.
    KeyFromAttempt,
    /// A journaled decision is not served from the journal on resume: the model is asked
    /// again.
    DecisionNotReplayed,
    /// Journal writes are not fenced by the lease's epoch: a stale worker journals over the
    /// current holder's entry.
    UnfencedJournal,
    /// A commit whose outcome is unknown is taken as applied without reading the run back:
    /// the worker goes on to the next step past a commit that may not have happened.
    AssumeCommitted,
    /// The signal is marked consumed by a write of its own when the step reads it, not by
    /// the step's commit: a crash between the two loses it.
    ConsumeApart,
    /// A child run's id is derived from the attempt (the epoch): a retried step starts a
    /// second child.
    ChildIdFromAttempt,
    /// The parent is claimable and joins without waiting for its child to end.
    JoinEarly,
    /// A compensation's idempotency key is derived from the attempt: a retried round undoes
    /// a call twice.
    UndoKeyFromAttempt,
    /// The round compensates the calls first-first instead of last-first.
    UndoForward,
    /// A worker migrates every run it claims, whatever agent version it is on.
    MigrateAlways,
    /// The migration's compare-and-set ignores the agent version. Alone it breaks nothing
    /// (workers read the run's agent version first); with [`MigrateAlways`](Self::MigrateAlways)
    /// a run is migrated twice.
    NoAgentVersionCheck,
    /// The step after a migration reads the journal of its own version, not of the version
    /// the interrupted step began at.
    ResumeBaseIgnored,
    /// `send_signal_once` ignores its key: every send stores a signal.
    NoSignalDedup,
    /// A run waiting for its timer is claimable (and its holder goes on) before the due
    /// time.
    ClaimBeforeDue,
    /// The holder's commit ignores an operator's cancel request: its steps go on
    /// committing after the cancel was acknowledged.
    IgnoreCancel,
    /// Any claim of a run handed back until its turn asks under that turn, not only the one
    /// right after the hand-back: a claim after one that asked and died before journaling
    /// the answer asks again under the same turn (the runner before it named the epoch).
    ReservationForAnyClaim,
}

impl Mutation {
    /// Each invariant with mutations that must break it.
    pub const BREAKING: [(&'static str, &'static [Mutation]); 17] = [
        (COMMITTER_HOLDS_LEASE, &[Mutation::NoEpochCheck]),
        (ONE_CHAIN, &[Mutation::NoVersionCheck, Mutation::BlindRetry]),
        (EFFECT_ONCE, &[Mutation::KeyFromAttempt]),
        (DECISION_ONCE, &[Mutation::DecisionNotReplayed]),
        (ONE_DECISION_PER_VERSION, &[Mutation::UnfencedJournal]),
        (NOTHING_AHEAD_OF_THE_CHAIN, &[Mutation::AssumeCommitted]),
        (SIGNAL_NOT_LOST, &[Mutation::ConsumeApart]),
        (CHILD_ONCE, &[Mutation::ChildIdFromAttempt]),
        (JOIN_AFTER_THE_CHILD, &[Mutation::JoinEarly]),
        (UNDONE_ONCE, &[Mutation::UndoKeyFromAttempt]),
        (UNDONE_LAST_FIRST, &[Mutation::UndoForward]),
        (
            MIGRATED_ONCE,
            &[Mutation::MigrateAlways, Mutation::NoAgentVersionCheck],
        ),
        (DECISION_ONCE, &[Mutation::ResumeBaseIgnored]),
        (KEYED_SIGNAL_ONCE, &[Mutation::NoSignalDedup]),
        (TIMER_NOT_EARLY, &[Mutation::ClaimBeforeDue]),
        (CANCEL_ENDS_THE_RUN, &[Mutation::IgnoreCancel]),
        (TURN_ONCE, &[Mutation::ReservationForAnyClaim]),
    ];
}

/// The small protocol in which `mutations` are shown to break their property: two workers,
/// two steps, two faults, with the signal, child, saga, migration, timer or cancel the
/// mutation is about.
#[must_use]
pub fn protocol_for(mutations: &[Mutation]) -> Protocol {
    let small = Protocol::new(2, 2, 2);
    if mutations
        .iter()
        .any(|m| matches!(m, Mutation::ChildIdFromAttempt | Mutation::JoinEarly))
    {
        small.with_child_at(0)
    } else if mutations
        .iter()
        .any(|m| matches!(m, Mutation::UndoKeyFromAttempt | Mutation::UndoForward))
    {
        small.with_saga_at(1)
    } else if mutations.iter().any(|m| {
        matches!(
            m,
            Mutation::MigrateAlways | Mutation::NoAgentVersionCheck | Mutation::ResumeBaseIgnored
        )
    }) {
        small.with_migration()
    } else if mutations.contains(&Mutation::NoSignalDedup) {
        small.with_keyed_signal_at(1, 2)
    } else if mutations.contains(&Mutation::ClaimBeforeDue) {
        small.with_timer_at(1)
    } else if mutations.contains(&Mutation::IgnoreCancel) {
        small.with_cancel()
    } else if mutations.contains(&Mutation::ReservationForAnyClaim) {
        small.with_capacity_at(0)
    } else {
        small.with_signal_at(1)
    }
    .mutated(mutations)
}

/// Invariant 1: versions form one chain 1, 2, … with no gap, duplicate or fork.
pub const ONE_CHAIN: &str = "versions form one chain";
/// Invariant 5: every commit is made under the latest claim's epoch (the commit of a worker
/// whose run was claimed since is rejected).
pub const COMMITTER_HOLDS_LEASE: &str = "only the lease holder commits";
/// Invariant 3: a write's effect happens once (the tool honouring its key).
pub const EFFECT_ONCE: &str = "each write takes effect once";
/// Invariant 4: a journaled decision is never asked again.
pub const DECISION_ONCE: &str = "a journaled decision is never asked again";
/// The journal holds one decision per version: a stale worker's entry is refused.
pub const ONE_DECISION_PER_VERSION: &str = "one decision journaled per version";
/// Resume continues from the last committed version: nothing is journaled or executed for a
/// step past it.
pub const NOTHING_AHEAD_OF_THE_CHAIN: &str = "nothing runs ahead of the chain";
/// A signal is consumed once, by a committed step: never lost to a crash, never delivered
/// twice.
pub const SIGNAL_NOT_LOST: &str = "a signal is consumed once, by a committed step";
/// A step's child run is started once, whatever the retries.
pub const CHILD_ONCE: &str = "a child run is started once";
/// The parent resumes (its join commits) only once its child ended: woken once, not early.
pub const JOIN_AFTER_THE_CHILD: &str = "the parent joins only after its child ended";
/// Each completed call of the saga is compensated once (the compensating tool honouring its
/// key).
pub const UNDONE_ONCE: &str = "each call is compensated once";
/// Compensations take effect in the reverse order of the calls they undo.
pub const UNDONE_LAST_FIRST: &str = "compensations run last-first";
/// A run is migrated to the newer version at most once.
pub const MIGRATED_ONCE: &str = "a run is migrated at most once";
/// A keyed signal is stored once whatever the sender's retries and redeliveries, and the
/// run consumes it exactly once (the step after the wait commits only consuming it).
pub const KEYED_SIGNAL_ONCE: &str = "a keyed signal is stored once and consumed once";
/// A run waiting for its timer is not claimed, nor its step run, before the due time; the
/// step the timer wakes commits once.
pub const TIMER_NOT_EARLY: &str = "a timer fires once, never before its due time";
/// After an operator's cancel was acknowledged, no step commits but the cancel's own (the
/// `cancel` transition and its round), and the run ends cancelled.
pub const CANCEL_ENDS_THE_RUN: &str =
    "after a cancel only the cancel commits, and the run ends cancelled";
/// Every ask under a rate limit has a turn of its own: the asks of the limited step are at
/// most the turns taken.
pub const TURN_ONCE: &str = "every ask under a rate limit has a turn of its own";
/// Liveness under a finite fault budget: the run completes.
pub const RUN_COMPLETES: &str = "the run completes";
/// Reachability: the model does reach a refused commit (so the fence is exercised).
pub const A_COMMIT_IS_REFUSED: &str = "a commit is refused";
/// Reachability: the model does reach a lost acknowledgement read back as applied.
pub const AN_UNKNOWN_OUTCOME_IS_READ_BACK: &str = "an unknown outcome is read back as applied";

/// Where a worker is in the step of version `at`, under the lease of `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Worker {
    /// Holds no run (never claimed, stopped, or restarted after a crash).
    Idle,
    /// Working on the step from version `at` under the lease of `epoch`.
    Step {
        /// The lease's fencing epoch.
        epoch: u8,
        /// The version the step started from.
        at: u8,
        /// How far the step went.
        phase: Phase,
    },
    /// Sent the commit of the step from `at`; its outcome is unknown (the request or its
    /// acknowledgement was lost).
    Unsure {
        /// The lease's fencing epoch.
        epoch: u8,
        /// The version the step started from.
        at: u8,
    },
}

/// How far a worker's step went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Claimed or moved to this version; nothing done yet.
    Start,
    /// The model answered; the answer is only in the worker's memory.
    Answered,
    /// The decision is journaled (or was found journaled).
    Decided,
    /// The write tool was called; its result is only in the worker's memory.
    Called,
    /// The tool's result is journaled (or was found journaled): ready to commit.
    Journaled,
    /// In the compensation round: the compensation of this slot was called; its result
    /// is only in the worker's memory.
    Undone(u8),
    /// Claimed on the older agent version: to migrate before stepping.
    Migrate,
    /// The commit was refused for an operator's cancel request: to write the cancel
    /// (`accept_cancel`), the lease kept.
    CancelRequested,
    /// Took a turn under the rate limit (`take_capacity`): to ask, or to hand the run back
    /// until the turn.
    TurnTaken,
    /// The turn reserved by the hand-back before this claim: to ask under it.
    TurnReserved,
}

/// The store's run and what the world outside saw.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent facts of the run's row (leased, waiting, compensating, ended), \
              each compared one by one with a store's"
)]
pub struct World {
    /// The run's version.
    pub version: u8,
    /// The epoch of the latest claim.
    pub epoch: u8,
    /// Whether the latest claim's lease is still live.
    pub leased: bool,
    /// The run reached its final status.
    pub done: bool,
    /// Committed transitions in order: (version, epoch of the committing worker).
    pub chain: Vec<(u8, u8)>,
    /// Per version: the epoch whose decision is journaled.
    pub decisions: Vec<Option<u8>>,
    /// Per version: whether the tool's result is journaled.
    pub results: Vec<bool>,
    /// Idempotency keys the tool has seen: (version, attempt), attempt 0 unless the key is
    /// derived from the attempt.
    pub keys: BTreeSet<(u8, u8)>,
    /// Per version: effects that took place in the world.
    pub effects: Vec<u8>,
    /// The run waits for its signal (its status is waiting).
    pub waiting: bool,
    /// The signal, sent by a client.
    pub signal: Signal,
    /// Child runs started, by key (the attempt, 0 unless the id is derived from it), and
    /// whether each ended.
    pub children: BTreeMap<u8, bool>,
    /// The run is compensating (the saga's failing step committed).
    pub compensating: bool,
    /// Per slot of the compensation round: whether its compensation is journaled.
    pub undo_journaled: Vec<bool>,
    /// Compensation keys the compensating tool has seen: (slot, attempt).
    pub undo_keys: BTreeSet<(u8, u8)>,
    /// The versions whose calls were compensated, in the order the world saw it.
    pub undone: Vec<u8>,
    /// The run's agent version: 1 (older) or 2 (the workers').
    pub agent_version: u8,
    /// The versions written by migrations.
    pub migrated_at: Vec<u8>,
    /// Sends of the keyed signal so far (`send_signal_once`).
    pub sends: u8,
    /// Signals stored under the key: one whatever the sends, unless the dedup is removed
    /// (the first is `signal`; the others stay pending).
    pub stored: u8,
    /// The clock, in ticks.
    pub now: u8,
    /// The due time of the run's timer, once the commit into its wait stored it.
    pub due: Option<u8>,
    /// An operator's cancel of the run.
    pub cancel: Cancel,
    /// Turns taken under the rate limit of the limited step.
    pub turns: u8,
    /// The model asked in the limited step (a question served from the journal is not).
    pub limited_asks: u8,
    /// The stored wait of a run handed back until its turn: the epoch of the lease that
    /// handed it back (`capacity:<limit>@<epoch>`); cleared by the step's commit, kept by
    /// claims.
    pub handed_back: Option<u8>,
    /// Hand-backs so far (one along a path).
    pub defers: u8,
    /// What happened along the path that the properties ask about.
    pub seen: BTreeSet<Seen>,
    /// Faults left along this path.
    pub faults_left: u8,
    /// The workers.
    pub workers: Vec<Worker>,
}

/// The run's signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    /// Not sent yet.
    Unsent,
    /// `send_signal`: stored, pending.
    Pending,
    /// Marked consumed by the step from this version (it is consumed by version + 1).
    Consumed(u8),
}

/// An operator's cancel (`cancel_run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cancel {
    /// Not asked for.
    None,
    /// Asked for once the run had ended: refused (`RunIsFinal`), nothing written.
    Refused,
    /// Asked for while a live lease held the run: recorded for the holder's next commit
    /// (or the next claimer).
    Requested,
    /// The `cancel` transition wrote this version (the run compensating): the round from
    /// it ends the run cancelled.
    Accepted(u8),
}

/// Something that happened along a path, which a property asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Seen {
    /// The model was asked for a version whose decision was journaled already.
    AskedAgain,
    /// A decision was journaled over another epoch's decision.
    DecisionOverwritten,
    /// A commit by a worker whose run was claimed by another since.
    StaleCommit,
    /// A journal entry or tool call for a version past the run's.
    RanAhead,
    /// A commit was refused (a stale worker's, or one sent again after it landed).
    CommitRefused,
    /// An unknown commit outcome was read back as applied.
    ResolvedApplied,
    /// The join committed while a child had not ended.
    JoinedEarly,
    /// The run was claimed while waiting for its timer, or the timer's step committed,
    /// before the due time.
    TimerEarly,
    /// A step committed after an operator's cancel was acknowledged, not the cancel's.
    CommittedAfterCancel,
}

/// A worker's move, or a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// `claim_run`: take the lease (a new epoch) if none is live.
    Claim(u8),
    /// Serve the decision from the journal, or ask the model.
    Decide(u8),
    /// `record_entry` of the decision, fenced by the epoch.
    JournalDecision(u8),
    /// Call the write tool under its idempotency key (unless its result is journaled).
    CallTool(u8),
    /// `record_entry` of the tool's result, fenced by the epoch.
    JournalResult(u8),
    /// `commit_step`: compare-and-set on version and epoch, heard back.
    Commit(u8),
    /// `commit_step` whose request is lost (fault): nothing is written, the worker is unsure.
    CommitRequestLost(u8),
    /// `commit_step` applied but its acknowledgement lost (fault): the worker is unsure.
    CommitAckLost(u8),
    /// `load_run` after an unknown outcome: committed, not committed, or lease gone.
    Resolve(u8),
    /// `renew_lease` refused (the run was claimed since): the worker stops.
    LeaseLost(u8),
    /// The process dies (fault): its memory is gone, its lease stays until it expires.
    Crash(u8),
    /// The lease expires: free of charge once its holder is gone, a fault while it works.
    Expire,
    /// `send_signal` by a client.
    SendSignal,
    /// `release_lease` after the commit into a wait that is not over (no signal pending,
    /// a child still running): the worker suspends the run, claimable again when it is.
    Suspend(u8),
    /// A child run ends (its own worker's final commit).
    ChildEnds(u8),
    /// In the compensation round: call the compensation of the first slot not journaled
    /// (or, all journaled, get ready to commit the round).
    Compensate(u8),
    /// `record_entry` of a compensation, fenced by the epoch.
    JournalCompensation(u8),
    /// `migrate_run`: compare-and-set on version, epoch and agent version.
    Migrate(u8),
    /// `send_signal_once` under the signal's key, the receipt heard.
    SendSignalOnce,
    /// `send_signal_once` under the signal's key, the receipt lost: the sender sends again.
    SignalAckLost,
    /// The clock reaches the due time of the run's timer.
    Tick,
    /// `cancel_run` by an operator, once, at any moment.
    CancelRun,
    /// `accept_cancel`: the holder whose commit was refused for a cancel request (or who
    /// finds the request as it claims) writes the cancel, fenced by its epoch.
    AcceptCancel(u8),
    /// `take_capacity` before the limited step's ask: a turn of its own.
    TakeTurn(u8),
    /// The claim right after a hand-back asks under the turn taken before it.
    UseTurn(u8),
    /// `defer_run`: hand the run back until its turn, fenced by the epoch, nothing committed.
    Defer(u8),
}

impl Protocol {
    /// The protocol, unmutated.
    #[must_use]
    pub fn new(workers: u8, steps: u8, faults: u8) -> Self {
        Self {
            workers,
            steps,
            faults,
            signal_at: None,
            child_at: None,
            saga_at: None,
            migrate: false,
            signal_sends: 0,
            timer_at: None,
            cancel: false,
            capacity_at: None,
            mutations: Vec::new(),
        }
    }

    /// The protocol whose run waits for a signal at version `at`, sent with
    /// `send_signal_once` under one key, at most `sends` times along a path (retries after
    /// a lost receipt, redeliveries).
    #[must_use]
    pub fn with_keyed_signal_at(mut self, at: u8, sends: u8) -> Self {
        self.signal_at = Some(at);
        self.signal_sends = sends;
        self
    }

    /// The protocol whose run waits for a durable timer at version `at` (between 1 and
    /// `steps - 1`).
    #[must_use]
    pub fn with_timer_at(mut self, at: u8) -> Self {
        self.timer_at = Some(at);
        self
    }

    /// The protocol whose step from version `at` asks under a rate limit.
    #[must_use]
    pub fn with_capacity_at(mut self, at: u8) -> Self {
        self.capacity_at = Some(at);
        self
    }

    /// Whether the worker of `epoch`, in the limited step, may ask under the turn reserved
    /// by the hand-back: only the claim right after it may.
    fn reserved_for(&self, world: &World, epoch: u8) -> bool {
        world
            .handed_back
            .is_some_and(|by| by + 1 == epoch || self.has(Mutation::ReservationForAnyClaim))
    }

    /// The protocol in which an operator may cancel the run, once, at any moment.
    #[must_use]
    pub fn with_cancel(mut self) -> Self {
        self.cancel = true;
        self
    }

    /// Whether the step from `at` is a compensation round: the saga's, or the one after
    /// a cancel.
    fn in_round(&self, world: &World, at: u8) -> bool {
        self.round_at(at) || world.cancel == Cancel::Accepted(at)
    }

    /// Whether the timer waited for at `version`, if any, is not due yet.
    fn timer_ahead(&self, world: &World, version: u8) -> bool {
        self.timer_at == Some(version) && world.due.is_none_or(|d| world.now < d)
    }

    /// The protocol whose run starts on an older agent version, migrated by the first
    /// worker that claims it.
    #[must_use]
    pub fn with_migration(mut self) -> Self {
        self.migrate = true;
        self
    }

    /// The version whose journal the step from `at` reads and writes: its own, or, after a
    /// migration that interrupted the step, the version the step began at (the resume
    /// base) — which is what counting the migrations at or before `at` gives.
    #[must_use]
    pub fn journal_slot(&self, world: &World, at: u8) -> u8 {
        if self.has(Mutation::ResumeBaseIgnored) {
            at
        } else {
            Self::base_of(world, at)
        }
    }

    /// The resume base of the step from `at`, as the stores keep it.
    fn base_of(world: &World, at: u8) -> u8 {
        let migrations = world.migrated_at.iter().filter(|m| **m <= at).count();
        at - u8::try_from(migrations).unwrap_or(0)
    }

    /// The version whose commit ends the run: one more per migration.
    #[must_use]
    pub fn last_version(&self, world: &World) -> u8 {
        self.steps + u8::try_from(world.migrated_at.len()).unwrap_or(0)
    }

    /// The protocol whose step from version `at` fails the run after its call, which is
    /// then compensated (`steps` becomes `at + 2`: the round at `at + 1` ends the run).
    #[must_use]
    pub fn with_saga_at(mut self, at: u8) -> Self {
        self.saga_at = Some(at);
        self.steps = at + 2;
        self
    }

    /// Whether the step from `at` is the compensation round.
    fn round_at(&self, at: u8) -> bool {
        self.saga_at.is_some_and(|k| k + 1 == at)
    }

    /// The version whose call slot `slot` of the round compensates.
    fn undoes(&self, slot: u8) -> u8 {
        let last = self.saga_at.unwrap_or(0);
        if self.has(Mutation::UndoForward) {
            slot
        } else {
            last - slot
        }
    }

    /// The protocol whose step from version `at` starts a child run and waits for it (`at`
    /// below `steps - 1`: the step after it joins).
    #[must_use]
    pub fn with_child_at(mut self, at: u8) -> Self {
        self.child_at = Some(at);
        self
    }

    /// Whether the step from `at` joins the child.
    fn joins_at(&self, at: u8) -> bool {
        self.child_at.is_some_and(|c| c + 1 == at)
    }

    /// Whether the run at `version` waits (for its signal, its child or its timer).
    fn waits(&self, version: u8) -> bool {
        self.waits_at(version) || self.joins_at(version) || self.timer_at == Some(version)
    }

    /// Whether the wait of the run at `version`, if any, is over: its signal pending, its
    /// child ended.
    fn wait_over(&self, world: &World, version: u8) -> bool {
        if self.waits_at(version) {
            world.signal == Signal::Pending
        } else if self.joins_at(version) {
            self.has(Mutation::JoinEarly) || world.children.values().all(|ended| *ended)
        } else if self.timer_at == Some(version) {
            self.has(Mutation::ClaimBeforeDue) || !self.timer_ahead(world, version)
        } else {
            true
        }
    }

    /// The protocol whose run waits for a signal at version `at` (between 1 and `steps - 1`).
    #[must_use]
    pub fn with_signal_at(mut self, at: u8) -> Self {
        self.signal_at = Some(at);
        self
    }

    /// Whether the step from `at` is the limited one and must ask (its decision not
    /// journaled where the stores keep it).
    fn needs_turn(&self, world: &World, at: u8) -> bool {
        self.capacity_at == Some(at)
            && world.decisions[usize::from(self.journal_slot(world, at))].is_none()
    }

    /// Whether the step from `at` waits for the signal.
    fn waits_at(&self, at: u8) -> bool {
        self.signal_at == Some(at)
    }

    /// Whether a worker may claim the run (as `claim_next` finds runs): not ended, no live
    /// lease, and not waiting for a signal that has not come, a child still running or a
    /// timer not due, unless a cancel is requested (its claimer writes the cancel).
    #[must_use]
    pub fn claimable(&self, world: &World) -> bool {
        let wait_on = world.waiting
            && !self.wait_over(world, world.version)
            && world.cancel != Cancel::Requested;
        !(world.done || world.leased || wait_on)
    }

    /// The protocol with `mutations`.
    #[must_use]
    pub fn mutated(mut self, mutations: &[Mutation]) -> Self {
        self.mutations.extend_from_slice(mutations);
        self
    }

    fn has(&self, mutation: Mutation) -> bool {
        self.mutations.contains(&mutation)
    }

    /// Whether the worker that took the latest lease still works (has not crashed or
    /// stopped): its lease then expires only by a fault (a pause longer than its time to
    /// live); a dead holder's expires in due course.
    fn holder_alive(world: &World) -> bool {
        world.workers.iter().any(|w| {
            matches!(*w, Worker::Step { epoch, .. } | Worker::Unsure { epoch, .. }
                if epoch == world.epoch)
        })
    }

    /// Whether the worker of `epoch` still has the run: nobody claimed it since. Its lease
    /// may have expired meanwhile; as in the stores, it still commits, journals and renews
    /// (the epoch is the fence, not the clock).
    fn current(world: &World, epoch: u8) -> bool {
        world.epoch == epoch
    }

    /// A worker's next state after its commit of the step from `at` applied.
    fn after_commit(&self, world: &World, epoch: u8, at: u8) -> Worker {
        if world.done || at + 1 >= self.last_version(world) {
            Worker::Idle
        } else {
            Worker::Step {
                epoch,
                at: at + 1,
                phase: Phase::Start,
            }
        }
    }

    /// Apply the commit of the step from `at` by the worker of `epoch`, if the
    /// compare-and-set lets it through; whether it did, or was refused for a cancel.
    fn apply_commit(&self, world: &mut World, epoch: u8, at: u8) -> Committed {
        let version_ok = self.has(Mutation::NoVersionCheck) || world.version == at;
        let epoch_ok = self.has(Mutation::NoEpochCheck) || world.epoch == epoch;
        // A step consuming the signal commits only while it is pending, and marks it
        // consumed in the same write.
        let consumes = self.waits_at(at) && !self.has(Mutation::ConsumeApart);
        let signal_ok = !consumes || world.signal == Signal::Pending;
        if !(version_ok && epoch_ok && signal_ok) || world.done {
            world.seen.insert(Seen::CommitRefused);
            return Committed::Refused;
        }
        // An operator's cancel request refuses the holder's commit, checked in the same
        // compare-and-set (`CancelRequested`): the holder writes the cancel instead.
        if world.cancel == Cancel::Requested && !self.has(Mutation::IgnoreCancel) {
            world.seen.insert(Seen::CommitRefused);
            return Committed::CancelRequested;
        }
        match world.cancel {
            Cancel::Requested => {
                world.seen.insert(Seen::CommittedAfterCancel);
            }
            Cancel::Accepted(c) if c != at => {
                world.seen.insert(Seen::CommittedAfterCancel);
            }
            _ => {}
        }
        if self.timer_ahead(world, at) {
            world.seen.insert(Seen::TimerEarly);
        }
        // The lease may have expired with nobody claiming since: the commit is still the
        // latest claim's, which is all the epoch promises.
        if world.epoch != epoch {
            world.seen.insert(Seen::StaleCommit);
        }
        world.version = at + 1;
        world.chain.push((at + 1, epoch));
        if consumes {
            world.signal = Signal::Consumed(at);
        }
        if self.joins_at(at) && world.children.values().any(|ended| !ended) {
            world.seen.insert(Seen::JoinedEarly);
        }
        if self.saga_at == Some(at) {
            world.compensating = true;
        }
        world.waiting = self.waits(at + 1);
        if self.capacity_at == Some(at) {
            // The commit clears the run's wait, the hand-back's included.
            world.handed_back = None;
        }
        if self.timer_at == Some(at + 1) {
            // The commit into the timer's wait stores its due time.
            world.due = Some(world.now + 1);
        }
        // The cancel's round ends the run cancelled.
        let cancelled = world.cancel == Cancel::Accepted(at);
        if cancelled || world.version >= self.last_version(world) {
            // The final commit ends the run and its lease in the same write.
            world.done = true;
            world.leased = false;
        }
        Committed::Applied
    }

    /// The `cancel` transition under `epoch`: a version of its own, the run compensating,
    /// no longer waiting; the round from it ends the run cancelled.
    fn write_cancel(world: &mut World, epoch: u8) -> Cancel {
        world.version += 1;
        world.chain.push((world.version, epoch));
        world.compensating = true;
        world.waiting = false;
        Cancel::Accepted(world.version)
    }

    /// A journal write of the worker of `epoch` for version `at`: refused unless it holds
    /// the run's latest epoch (the fence), unless the fence is removed.
    fn journal_allowed(&self, world: &World, epoch: u8) -> bool {
        self.has(Mutation::UnfencedJournal) || Self::current(world, epoch)
    }

    fn note_ahead(world: &mut World, at: u8) {
        if at > world.version {
            world.seen.insert(Seen::RanAhead);
        }
    }
}

/// What became of a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Committed {
    /// Written.
    Applied,
    /// Refused: the lease is gone or the run moved on.
    Refused,
    /// Refused for an operator's cancel request: the holder writes the cancel.
    CancelRequested,
}

impl Model for Protocol {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        // Room for the versions migrations add (journal slots past them stay unused unless
        // the resume base is ignored).
        let steps = usize::from(self.steps) + if self.migrate { 2 } else { 0 };
        vec![World {
            version: 0,
            epoch: 0,
            leased: false,
            done: false,
            waiting: false,
            signal: Signal::Unsent,
            children: BTreeMap::new(),
            compensating: false,
            undo_journaled: vec![false; usize::from(self.saga_at.map_or(0, |k| k + 1))],
            undo_keys: BTreeSet::new(),
            undone: Vec::new(),
            agent_version: if self.migrate { 1 } else { 2 },
            migrated_at: Vec::new(),
            sends: 0,
            stored: 0,
            now: 0,
            due: None,
            cancel: Cancel::None,
            turns: 0,
            limited_asks: 0,
            handed_back: None,
            defers: 0,
            chain: Vec::new(),
            decisions: vec![None; steps],
            results: vec![false; steps],
            keys: BTreeSet::new(),
            effects: vec![0; steps],
            seen: BTreeSet::new(),
            faults_left: self.faults,
            workers: vec![Worker::Idle; usize::from(self.workers)],
        }]
    }

    fn actions(&self, world: &World, actions: &mut Vec<Action>) {
        let fault = world.faults_left > 0;
        for (w, worker) in (0..self.workers).zip(&world.workers) {
            match *worker {
                Worker::Idle => {
                    if self.claimable(world) {
                        actions.push(Action::Claim(w));
                    }
                }
                Worker::Step { epoch, at, phase } => {
                    if !Self::current(world, epoch) {
                        // Its heartbeat is refused; until it beats it may go on.
                        actions.push(Action::LeaseLost(w));
                    }
                    let wait_on = self.waits(at) && !self.wait_over(world, at);
                    if phase == Phase::Start
                        && world.cancel == Cancel::Requested
                        && Self::current(world, epoch)
                    {
                        // A worker that finds the cancel request as it claims (or reads
                        // the run) writes the cancel; one that does not goes on, and its
                        // commit is refused.
                        actions.push(Action::AcceptCancel(w));
                    }
                    actions.push(match phase {
                        // The step reads what it waited for first (the pending signal, the
                        // child's end, the timer due); without it, the run is suspended
                        // until it comes.
                        Phase::Start if self.in_round(world, at) => Action::Compensate(w),
                        Phase::Start if wait_on => Action::Suspend(w),
                        // The limited step asks under a turn, unless its decision is
                        // journaled (served from the journal, no ask).
                        Phase::Start if self.needs_turn(world, at) => {
                            if self.reserved_for(world, epoch) {
                                Action::UseTurn(w)
                            } else {
                                Action::TakeTurn(w)
                            }
                        }
                        Phase::Start | Phase::TurnTaken | Phase::TurnReserved => Action::Decide(w),
                        Phase::CancelRequested => Action::AcceptCancel(w),
                        Phase::Undone(_) => Action::JournalCompensation(w),
                        Phase::Migrate => Action::Migrate(w),
                        Phase::Answered => Action::JournalDecision(w),
                        Phase::Decided => Action::CallTool(w),
                        Phase::Called => Action::JournalResult(w),
                        Phase::Journaled => Action::Commit(w),
                    });
                    if phase == Phase::TurnTaken && world.defers == 0 {
                        // A far turn: the run is handed back until then.
                        actions.push(Action::Defer(w));
                    }
                    if phase == Phase::Journaled && fault {
                        actions.push(Action::CommitRequestLost(w));
                        actions.push(Action::CommitAckLost(w));
                    }
                    if fault {
                        actions.push(Action::Crash(w));
                    }
                }
                Worker::Unsure { .. } => {
                    actions.push(Action::Resolve(w));
                    if fault {
                        actions.push(Action::Crash(w));
                    }
                }
            }
        }
        if world.leased && (fault || !Self::holder_alive(world)) {
            actions.push(Action::Expire);
        }
        if self.signal_at.is_some() && self.signal_sends == 0 && world.signal == Signal::Unsent {
            actions.push(Action::SendSignal);
        }
        if world.sends < self.signal_sends {
            actions.push(Action::SendSignalOnce);
            // The last send is heard: a sender that never hears is not the store's fault.
            if world.sends + 1 < self.signal_sends {
                actions.push(Action::SignalAckLost);
            }
        }
        if world.due.is_some_and(|d| world.now < d) {
            actions.push(Action::Tick);
        }
        if self.cancel && world.cancel == Cancel::None {
            actions.push(Action::CancelRun);
        }
        for (key, ended) in &world.children {
            if !ended {
                actions.push(Action::ChildEnds(*key));
            }
        }
    }

    fn next_state(&self, last: &World, action: Action) -> Option<World> {
        let mut world = last.clone();
        match action {
            Action::Claim(w) => {
                if world.waiting && self.timer_ahead(&world, world.version) {
                    world.seen.insert(Seen::TimerEarly);
                }
                world.epoch += 1;
                world.leased = true;
                let migrate =
                    self.migrate && (world.agent_version == 1 || self.has(Mutation::MigrateAlways));
                world.workers[usize::from(w)] = Worker::Step {
                    epoch: world.epoch,
                    at: world.version,
                    phase: if migrate {
                        Phase::Migrate
                    } else {
                        Phase::Start
                    },
                };
            }
            Action::Migrate(w) => {
                let Worker::Step { epoch, at, .. } = world.workers[usize::from(w)] else {
                    return None;
                };
                let agent_ok = world.agent_version == 1 || self.has(Mutation::NoAgentVersionCheck);
                world.workers[usize::from(w)] =
                    if world.version == at && world.epoch == epoch && agent_ok && !world.done {
                        world.version = at + 1;
                        world.chain.push((at + 1, epoch));
                        world.agent_version = 2;
                        world.migrated_at.push(at + 1);
                        Worker::Step {
                            epoch,
                            at: at + 1,
                            phase: Phase::Start,
                        }
                    } else {
                        world.seen.insert(Seen::CommitRefused);
                        Worker::Idle
                    };
            }
            Action::Decide(w) => {
                let Worker::Step { epoch, at, .. } = world.workers[usize::from(w)] else {
                    return None;
                };
                if self.waits_at(at) && self.has(Mutation::ConsumeApart) {
                    // Read and marked consumed at once, apart from the commit; a worker
                    // after it finds no signal pending.
                    if world.signal != Signal::Pending {
                        return None;
                    }
                    world.signal = Signal::Consumed(at);
                }
                let v = usize::from(self.journal_slot(&world, at));
                let journaled = world.decisions[v].is_some();
                let phase = if journaled && !self.has(Mutation::DecisionNotReplayed) {
                    Phase::Decided
                } else {
                    // The model is asked: again, if the step's decision is journaled where
                    // the stores keep it.
                    if world.decisions[usize::from(Self::base_of(&world, at))].is_some() {
                        world.seen.insert(Seen::AskedAgain);
                    }
                    if self.capacity_at == Some(at) {
                        world.limited_asks += 1;
                    }
                    Phase::Answered
                };
                world.workers[usize::from(w)] = Worker::Step { epoch, at, phase };
            }
            Action::JournalDecision(w) => {
                let Worker::Step { epoch, at, .. } = world.workers[usize::from(w)] else {
                    return None;
                };
                if self.journal_allowed(&world, epoch) {
                    Self::note_ahead(&mut world, at);
                    let v = usize::from(self.journal_slot(&world, at));
                    if world.decisions[v].is_some_and(|e| e != epoch) {
                        world.seen.insert(Seen::DecisionOverwritten);
                    }
                    world.decisions[v] = Some(epoch);
                    world.workers[usize::from(w)] = Worker::Step {
                        epoch,
                        at,
                        phase: Phase::Decided,
                    };
                } else {
                    world.workers[usize::from(w)] = Worker::Idle;
                }
            }
            Action::CallTool(w) => {
                let Worker::Step { epoch, at, .. } = world.workers[usize::from(w)] else {
                    return None;
                };
                let slot = self.journal_slot(&world, at);
                let v = usize::from(slot);
                let phase = if world.results[v] {
                    Phase::Journaled
                } else if self.child_at == Some(at) {
                    Self::note_ahead(&mut world, at);
                    // The child's id is its key: creating it again finds the one made.
                    let attempt = if self.has(Mutation::ChildIdFromAttempt) {
                        epoch
                    } else {
                        0
                    };
                    world.children.entry(attempt).or_insert(false);
                    Phase::Called
                } else {
                    Self::note_ahead(&mut world, at);
                    let attempt = if self.has(Mutation::KeyFromAttempt) {
                        epoch
                    } else {
                        0
                    };
                    // The tool honours its key: a key it has seen takes no effect again. The
                    // key is the journal's version, not the attempt's.
                    let base = usize::from(Self::base_of(&world, at));
                    if world.keys.insert((slot, attempt)) {
                        world.effects[base] += 1;
                    }
                    Phase::Called
                };
                world.workers[usize::from(w)] = Worker::Step { epoch, at, phase };
            }
            Action::JournalResult(w) => {
                let Worker::Step { epoch, at, .. } = world.workers[usize::from(w)] else {
                    return None;
                };
                if self.journal_allowed(&world, epoch) {
                    Self::note_ahead(&mut world, at);
                    let v = usize::from(self.journal_slot(&world, at));
                    world.results[v] = true;
                    world.workers[usize::from(w)] = Worker::Step {
                        epoch,
                        at,
                        phase: Phase::Journaled,
                    };
                } else {
                    world.workers[usize::from(w)] = Worker::Idle;
                }
            }
            Action::Commit(w) => {
                let Worker::Step { epoch, at, .. } = world.workers[usize::from(w)] else {
                    return None;
                };
                world.workers[usize::from(w)] = match self.apply_commit(&mut world, epoch, at) {
                    Committed::Applied => self.after_commit(&world, epoch, at),
                    // Refused: the lease is gone or the run moved on; the worker stops.
                    Committed::Refused => Worker::Idle,
                    Committed::CancelRequested => Worker::Step {
                        epoch,
                        at,
                        phase: Phase::CancelRequested,
                    },
                };
            }
            Action::CommitRequestLost(w) | Action::CommitAckLost(w) => {
                let Worker::Step { epoch, at, .. } = world.workers[usize::from(w)] else {
                    return None;
                };
                world.faults_left -= 1;
                if matches!(action, Action::CommitAckLost(_)) {
                    self.apply_commit(&mut world, epoch, at);
                }
                world.workers[usize::from(w)] = if self.has(Mutation::AssumeCommitted) {
                    self.after_commit(&world, epoch, at)
                } else {
                    Worker::Unsure { epoch, at }
                };
            }
            Action::Resolve(w) => {
                let Worker::Unsure { epoch, at } = world.workers[usize::from(w)] else {
                    return None;
                };
                // Read the run back: its chain says whether this commit landed.
                world.workers[usize::from(w)] = if self.has(Mutation::BlindRetry) {
                    Worker::Step {
                        epoch,
                        at,
                        phase: Phase::Journaled,
                    }
                } else if world.chain.contains(&(at + 1, epoch)) {
                    world.seen.insert(Seen::ResolvedApplied);
                    self.after_commit(&world, epoch, at)
                } else if world.version == at && Self::current(&world, epoch) {
                    // Not written, and still ours: send it again.
                    Worker::Step {
                        epoch,
                        at,
                        phase: Phase::Journaled,
                    }
                } else {
                    Worker::Idle
                };
            }
            Action::LeaseLost(w) => world.workers[usize::from(w)] = Worker::Idle,
            Action::Crash(w) => {
                world.faults_left -= 1;
                world.workers[usize::from(w)] = Worker::Idle;
            }
            Action::SendSignal => world.signal = Signal::Pending,
            Action::SendSignalOnce | Action::SignalAckLost => {
                world.sends += 1;
                // Stored unless a signal is stored under the key already (the receipt then
                // names it: a duplicate).
                if world.stored == 0 || self.has(Mutation::NoSignalDedup) {
                    world.stored += 1;
                    if world.signal == Signal::Unsent {
                        world.signal = Signal::Pending;
                    }
                }
            }
            Action::Tick => world.now += 1,
            Action::CancelRun => {
                world.cancel = if world.done {
                    Cancel::Refused
                } else if world.leased {
                    Cancel::Requested
                } else {
                    // No live lease: the `cancel` transition at once, under a new epoch
                    // that fences out an expired holder.
                    world.epoch += 1;
                    let epoch = world.epoch;
                    Self::write_cancel(&mut world, epoch)
                };
            }
            Action::AcceptCancel(w) => {
                let Worker::Step { epoch, .. } = world.workers[usize::from(w)] else {
                    return None;
                };
                world.workers[usize::from(w)] =
                    if Self::current(&world, epoch) && world.cancel == Cancel::Requested {
                        world.cancel = Self::write_cancel(&mut world, epoch);
                        Worker::Step {
                            epoch,
                            at: world.version,
                            phase: Phase::Start,
                        }
                    } else {
                        Worker::Idle
                    };
            }
            Action::ChildEnds(key) => {
                world.children.insert(key, true);
            }
            Action::Compensate(w) => {
                let Worker::Step { epoch, at, .. } = world.workers[usize::from(w)] else {
                    return None;
                };
                // The round resumes at the first compensation not journaled, with its key.
                let next = world.undo_journaled.iter().position(|done| !done);
                let phase = match next.and_then(|i| u8::try_from(i).ok()) {
                    None => Phase::Journaled,
                    Some(slot) => {
                        let attempt = if self.has(Mutation::UndoKeyFromAttempt) {
                            epoch
                        } else {
                            0
                        };
                        if world.undo_keys.insert((slot, attempt)) {
                            world.undone.push(self.undoes(slot));
                        }
                        Phase::Undone(slot)
                    }
                };
                world.workers[usize::from(w)] = Worker::Step { epoch, at, phase };
            }
            Action::JournalCompensation(w) => {
                let Worker::Step {
                    epoch,
                    at,
                    phase: Phase::Undone(slot),
                } = world.workers[usize::from(w)]
                else {
                    return None;
                };
                world.workers[usize::from(w)] = if self.journal_allowed(&world, epoch) {
                    world.undo_journaled[usize::from(slot)] = true;
                    Worker::Step {
                        epoch,
                        at,
                        phase: Phase::Start,
                    }
                } else {
                    Worker::Idle
                };
            }
            Action::Suspend(w) => {
                let Worker::Step { epoch, .. } = world.workers[usize::from(w)] else {
                    return None;
                };
                // Released only by the lease's holder (the epoch fences the release too).
                if Self::current(&world, epoch) {
                    world.leased = false;
                }
                world.workers[usize::from(w)] = Worker::Idle;
            }
            Action::TakeTurn(w) | Action::UseTurn(w) => {
                let Worker::Step { epoch, at, .. } = world.workers[usize::from(w)] else {
                    return None;
                };
                let phase = if matches!(action, Action::TakeTurn(_)) {
                    world.turns += 1;
                    Phase::TurnTaken
                } else {
                    Phase::TurnReserved
                };
                world.workers[usize::from(w)] = Worker::Step { epoch, at, phase };
            }
            Action::Defer(w) => {
                let Worker::Step { epoch, .. } = world.workers[usize::from(w)] else {
                    return None;
                };
                world.defers += 1;
                // Fenced as the stores fence it: only the lease's holder hands the run back,
                // and only while the run is running and leased.
                if Self::current(&world, epoch) && world.leased && !world.done {
                    world.leased = false;
                    world.handed_back = Some(epoch);
                }
                world.workers[usize::from(w)] = Worker::Idle;
            }
            Action::Expire => {
                if Self::holder_alive(&world) {
                    world.faults_left -= 1;
                }
                world.leased = false;
            }
        }
        Some(world)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_CHAIN, |_, w: &World| {
                (w.chain.iter().enumerate()).all(|(i, (v, _))| usize::from(*v) == i + 1)
                    && w.chain.len() == usize::from(w.version)
            }),
            Property::always(COMMITTER_HOLDS_LEASE, |_, w: &World| {
                !w.seen.contains(&Seen::StaleCommit)
            }),
            Property::always(EFFECT_ONCE, |_, w: &World| {
                w.effects.iter().all(|n| *n <= 1)
            }),
            Property::always(DECISION_ONCE, |_, w: &World| {
                !w.seen.contains(&Seen::AskedAgain)
            }),
            Property::always(ONE_DECISION_PER_VERSION, |_, w: &World| {
                !w.seen.contains(&Seen::DecisionOverwritten)
            }),
            Property::always(NOTHING_AHEAD_OF_THE_CHAIN, |_, w: &World| {
                !w.seen.contains(&Seen::RanAhead)
            }),
            Property::always(SIGNAL_NOT_LOST, |_, w: &World| match w.signal {
                // Consumed by the step from `at`: that step is in the chain, or still the
                // run's next while a worker holds the lease to commit it.
                Signal::Consumed(at) => w.version > at || (w.version == at && w.leased),
                Signal::Unsent | Signal::Pending => true,
            }),
            Property::always(CHILD_ONCE, |_, w: &World| w.children.len() <= 1),
            Property::always(JOIN_AFTER_THE_CHILD, |_, w: &World| {
                !w.seen.contains(&Seen::JoinedEarly)
            }),
            Property::always(UNDONE_ONCE, |_, w: &World| {
                let distinct: BTreeSet<&u8> = w.undone.iter().collect();
                distinct.len() == w.undone.len()
            }),
            Property::always(UNDONE_LAST_FIRST, |_, w: &World| {
                w.undone.windows(2).all(|pair| pair[0] > pair[1])
            }),
            Property::always(MIGRATED_ONCE, |_, w: &World| w.migrated_at.len() <= 1),
            Property::always(KEYED_SIGNAL_ONCE, |_, w: &World| {
                // One stored, whatever the sends; the run ends only past the step that
                // consumed it (which commits only consuming it, and once: the chain).
                w.stored <= 1
                    && (!w.done || w.stored == 0 || matches!(w.signal, Signal::Consumed(_)))
            }),
            Property::always(TIMER_NOT_EARLY, |p: &Protocol, w: &World| {
                let fired = p
                    .timer_at
                    .map_or(0, |t| w.chain.iter().filter(|(v, _)| *v == t + 1).count());
                !w.seen.contains(&Seen::TimerEarly) && fired <= 1
            }),
            Property::always(CANCEL_ENDS_THE_RUN, |_, w: &World| {
                // Ended with the cancel still requested: a step ended it, not the cancel.
                let ended_otherwise = w.done && w.cancel == Cancel::Requested;
                !(w.seen.contains(&Seen::CommittedAfterCancel) || ended_otherwise)
            }),
            Property::always(TURN_ONCE, |_, w: &World| w.limited_asks <= w.turns),
            Property::eventually(RUN_COMPLETES, |_, w: &World| w.done),
            // Reachability: the faults the model claims to cover do happen.
            Property::sometimes(A_COMMIT_IS_REFUSED, |_, w: &World| {
                w.seen.contains(&Seen::CommitRefused)
            }),
            Property::sometimes(AN_UNKNOWN_OUTCOME_IS_READ_BACK, |_, w: &World| {
                w.seen.contains(&Seen::ResolvedApplied)
            }),
        ]
    }
}
