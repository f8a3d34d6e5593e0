//! A real crash for the examples' `--crash-after-steps N`: the process aborts right after the
//! N-th committed step (of any run), with nothing cleaned up, as a kill would leave it.

use std::sync::atomic::{AtomicU32, Ordering};

use durable_agents::runner::{Crash, FaultHook, FaultPoint};

/// Aborts the process after `n` commits: a crash, not a clean exit.
#[derive(Debug)]
pub struct CrashAfter {
    left: AtomicU32,
    example: &'static str,
}

impl CrashAfter {
    /// Abort after `n` commits (at least one); the message says how to run `example` again.
    #[must_use]
    pub fn new(n: u32, example: &'static str) -> Self {
        Self {
            left: AtomicU32::new(n.max(1)),
            example,
        }
    }
}

impl FaultHook for CrashAfter {
    fn check(&self, point: FaultPoint, run_id: &str, version: u64) -> Result<(), Crash> {
        if point == FaultPoint::CommitApplied && self.left.fetch_sub(1, Ordering::SeqCst) == 1 {
            crate::outln!(
                "\n💥 simulated crash: aborting the process right after run {run_id} committed v{version}.\n   \
                 Nothing else is saved. Start the example again to resume from the last committed steps:\n   \
                 cargo run --example {}\n",
                self.example
            );
            std::process::abort();
        }
        Ok(())
    }
}
