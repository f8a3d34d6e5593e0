//! Named fault points: every boundary where a crash changes the outcome.
//!
//! The runner calls [`FaultHook::check`] at each point. In production the hook does
//! nothing. Tests install a hook that "crashes" at a chosen point: the runner then stops
//! at once, as a killed process would (no cleanup, no lease release, nothing committed),
//! and a fresh runner must resume the run correctly. The reliability battery installs a
//! hook that really aborts the process.

use std::fmt;
use std::sync::Mutex;

/// A boundary where a crash changes what happens next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultPoint {
    /// The run's lease was just taken.
    RunClaimed,
    /// The question was sent to the router; no answer yet.
    LlmSent,
    /// The router answered; the decision is not journaled yet.
    LlmAnswered,
    /// A tool call was sent (its `started` entry is journaled); no answer yet.
    ToolSent,
    /// The tool answered; its result is not journaled yet.
    ToolAnswered,
    /// The step's commit is about to be sent.
    CommitSent,
    /// The commit was applied by the store but its acknowledgement was not processed.
    CommitApplied,
    /// A compensation was journaled as started.
    CompensationRegistered,
    /// A compensating call was sent; its result is not journaled yet.
    CompensationSent,
    /// The lease is about to be renewed.
    LeaseRenewal,
    /// A step journaled the children it starts; they are not all created yet.
    ChildrenStarted,
    /// The children were created; the journal does not say so yet.
    ChildrenCreated,
}

impl FaultPoint {
    /// Every fault point, for sweeps.
    pub const ALL: [Self; 12] = [
        Self::RunClaimed,
        Self::LlmSent,
        Self::LlmAnswered,
        Self::ToolSent,
        Self::ToolAnswered,
        Self::CommitSent,
        Self::CommitApplied,
        Self::CompensationRegistered,
        Self::CompensationSent,
        Self::LeaseRenewal,
        Self::ChildrenStarted,
        Self::ChildrenCreated,
    ];
}

impl fmt::Display for FaultPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A simulated crash at a fault point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("crash injected at {point} (run version {version})")]
pub struct Crash {
    /// Where.
    pub point: FaultPoint,
    /// The run's version at the time.
    pub version: u64,
}

/// Decides whether to crash at a fault point.
pub trait FaultHook: Send + Sync + fmt::Debug {
    /// `Err` to crash here.
    ///
    /// # Errors
    /// The crash to simulate.
    fn check(&self, point: FaultPoint, run_id: &str, version: u64) -> Result<(), Crash>;
}

/// The production hook: never crashes.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoFaults;

impl FaultHook for NoFaults {
    fn check(&self, _: FaultPoint, _: &str, _: u64) -> Result<(), Crash> {
        Ok(())
    }
}

/// Crash the `nth` time (counting from 0) `point` is reached, once.
#[derive(Debug)]
pub struct CrashAt {
    point: FaultPoint,
    nth: u32,
    state: Mutex<(u32, bool)>,
}

impl CrashAt {
    /// Crash at the `nth` hit of `point`.
    #[must_use]
    pub fn new(point: FaultPoint, nth: u32) -> Self {
        Self {
            point,
            nth,
            state: Mutex::new((0, false)),
        }
    }

    /// Whether the crash happened.
    #[must_use]
    pub fn fired(&self) -> bool {
        self.state.lock().is_ok_and(|s| s.1)
    }
}

impl FaultHook for CrashAt {
    fn check(&self, point: FaultPoint, _: &str, version: u64) -> Result<(), Crash> {
        if point != self.point {
            return Ok(());
        }
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let hit = s.0;
        s.0 += 1;
        if hit == self.nth && !s.1 {
            s.1 = true;
            return Err(Crash { point, version });
        }
        Ok(())
    }
}
