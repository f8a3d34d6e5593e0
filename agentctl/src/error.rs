//! Errors that end a command, each with the exit code it maps to and a hint saying what to do.

use std::fmt;
use std::process::ExitCode;

use agent_core::store::StoreError;

/// What kind of failure, which decides the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A run, agent or database that does not exist (exit 1).
    NotFound,
    /// The command cannot work with these arguments (exit 2).
    Usage,
    /// Anything else: the store failed, the operation was refused (exit 1).
    Failed,
}

/// A failed command.
#[derive(Debug)]
pub(crate) struct CliError {
    /// Decides the exit code.
    pub kind: Kind,
    /// What went wrong.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
}

impl CliError {
    pub(crate) fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            hint: None,
        }
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(Kind::NotFound, message)
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(Kind::Usage, message)
    }

    pub(crate) fn failed(message: impl Into<String>) -> Self {
        Self::new(Kind::Failed, message)
    }

    #[must_use]
    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub(crate) fn exit_code(&self) -> ExitCode {
        match self.kind {
            Kind::NotFound | Kind::Failed => ExitCode::from(1),
            Kind::Usage => ExitCode::from(2),
        }
    }

    /// A missing run, with the hint to list runs.
    pub(crate) fn no_run(run: &str) -> Self {
        Self::not_found(format!("run `{run}` not found"))
            .hint("list runs with `agentctl runs` (and check --db / DATABASE_URL)")
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(run) => Self::no_run(&run),
            StoreError::LeaseLost { run_id, .. } => Self::failed(format!(
                "run `{run_id}` is held by a worker's live lease"
            ))
            .hint("a worker is executing it; wait for the lease to expire (or the worker to stop), then try again"),
            StoreError::Unavailable(msg) => Self::failed(format!("store unavailable: {msg}"))
                .hint("check that the database is reachable, then try again"),
            StoreError::Corrupt { run_id, message } => {
                Self::failed(format!("corrupt data in run `{run_id}`: {message}")).hint(format!(
                    "`agentctl show {run_id}` shows what of it reads and `agentctl verify \
                     {run_id}` which versions verify; `agentctl repair {run_id} --to VERSION` \
                     puts a quarantined run back at one of those"
                ))
            }
            StoreError::RunIsFinal {
                ref run_id, status, ..
            } if !status.has_ended() => {
                let hint = format!(
                    "`agentctl terminate {run_id} --reason WHY` closes it out; `agentctl retry \
                     {run_id}` runs it again"
                );
                Self::failed(e.to_string()).hint(hint)
            }
            StoreError::RunIsFinal { ref run_id, .. } => {
                let hint = format!(
                    "a finished run stays as it is; `agentctl fork {run_id} NEW_RUN --at VERSION` \
                     starts a new one from any of its versions"
                );
                Self::failed(e.to_string()).hint(hint)
            }
            StoreError::InvalidLabel(_) | StoreError::InvalidRateLimit(_) => {
                Self::usage(e.to_string())
            }
            StoreError::RunIsHeld { .. } => Self::failed(e.to_string()).hint(
                "a worker is executing it; try again once its step commits or its lease expires",
            ),
            StoreError::NoPendingSignal { ref run_id, .. } => {
                let hint = format!("`agentctl show {run_id}` lists its pending signals");
                Self::failed(e.to_string()).hint(hint)
            }
            other => Self::failed(other.to_string()),
        }
    }
}

pub(crate) type Result<T, E = CliError> = std::result::Result<T, E>;
