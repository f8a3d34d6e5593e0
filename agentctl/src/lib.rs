//! `agentctl`: inspect and operate durable agent runs from the command line, as a binary
//! and as a library.
//!
//! The stock `agentctl` binary reads the same database the workers write (a SQLite file or
//! PostgreSQL) and needs no agent code: each agent's graph is stored by the runner when the
//! agent's first run starts. See `docs/agentctl.md` for every command with examples.
//!
//! One command needs your code: `agentctl migrate` moving runs of an older version of an
//! agent to the version your code runs calls your mapping functions
//! (`migrate_from(..., with = ...)`), which a generic binary does not have. Build your own
//! control binary, with your agents registered, as Django projects have their own
//! `manage.py`:
//!
//! ```no_run
//! # use agent_conformance::fixture::Order as Checkout;
//! // src/bin/checkout-ctl.rs in your project
//! fn main() -> std::process::ExitCode {
//!     agentctl::Ctl::new().agent::<Checkout>().run()
//! }
//! ```
//!
//! It is `agentctl` with every command, and `migrate` (and `migrate --dry-run`) also
//! migrates the runs of the registered agents' older versions (`docs/versions.md`,
//! "Rolling out"). Registering an agent takes nothing but its type: no handlers, no tools,
//! no router; nothing of a run executes but its migration.
//!
//! `agentctl replay` needs your handlers too: register a [`Replay`] of the agent
//! (`Ctl::new().replay(Replay::new(Handlers, tools)?)`), and the binary replays recorded runs
//! of it against the handlers it was built with (`docs/verification.md`, "Replay").
#![warn(missing_docs)]

mod cli;
mod commands;
mod error;
mod output;
mod registry;
mod store;

use std::ffi::OsString;
use std::process::ExitCode;

use agent_core::agent::{Agent, Handle};
use agent_core::replay::Replay;
use clap::Parser;

use crate::registry::{Registered, Replayers};

/// A control binary: `agentctl` with the agents it can migrate runs of.
///
/// `Ctl::new().run()` is the stock `agentctl`; `Ctl::new().agent::<A>()` adds agent `A`,
/// whose runs of an older version `agentctl migrate` moves to `A`'s version.
#[derive(Debug, Default)]
pub struct Ctl {
    agents: Vec<Registered>,
    replays: Replayers,
}

impl Ctl {
    /// A control binary with no agent registered (the stock `agentctl`).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Register agent `A` (its latest version, with its `migrate_from` chain): `agentctl
    /// migrate` then migrates the runs of its older versions, and `--dry-run` shows, per
    /// run, the state it would become. Registering an agent twice, or two versions of one
    /// agent, keeps the one with the highest version.
    #[must_use]
    pub fn agent<A: Agent>(mut self) -> Self {
        let new = Registered::of::<A>();
        match self.agents.iter_mut().find(|a| a.name == new.name) {
            Some(known) if known.version >= new.version => {}
            Some(known) => *known = new,
            None => self.agents.push(new),
        }
        self
    }

    /// Register a replay of agent `A`'s recorded runs against the handlers it was built
    /// with: `agentctl replay` replays exported runs (`--from-file`) or the store's runs of
    /// the agent (`--agent`) with it. A second replay of the same agent replaces the first.
    #[must_use]
    pub fn replay<A, H>(mut self, replay: Replay<A, H>) -> Self
    where
        A: Agent + Handle<H>,
        H: Send + Sync + 'static,
    {
        self.replays.0.retain(|r| r.agent() != A::NAME);
        self.replays.0.push(std::sync::Arc::new(replay));
        self
    }

    /// Parse the process's command line and run the command; the exit code to return from
    /// `main` (0 ok, 1 not found / verification failed / store error, 2 usage).
    #[must_use]
    pub fn run(self) -> ExitCode {
        self.run_from(std::env::args_os())
    }

    /// [`run`](Self::run) on these arguments (the first is the program's name). A usage
    /// error, `--help` or `--version` prints and ends the process, as clap does.
    #[must_use]
    pub fn run_from<I, T>(self, args: I) -> ExitCode
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let cli = cli::Cli::parse_from(args);
        let out = output::Output::new(&cli.global);
        let runtime = match runtime_for(&cli.command) {
            Ok(rt) => rt,
            Err(e) => {
                out.error(&error::CliError::failed(format!(
                    "cannot start the async runtime: {e}"
                )));
                return ExitCode::from(1);
            }
        };
        match runtime.block_on(commands::run(cli, out, &self.agents, &self.replays)) {
            Ok(code) => code,
            Err(e) => {
                out.error(&e);
                e.exit_code()
            }
        }
    }
}

/// The runtime a command runs on. `serve` answers many clients at once, on every core: on
/// one thread, a few expensive requests held up every other. The other commands are one
/// client's sequence of requests, on the thread that runs them.
fn runtime_for(command: &cli::Command) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if matches!(command, cli::Command::Serve(_)) {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all().build()
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use tokio::runtime::RuntimeFlavor;

    fn flavor(args: &[&str]) -> RuntimeFlavor {
        let cli = crate::cli::Cli::parse_from(args);
        super::runtime_for(&cli.command)
            .expect("runtime")
            .handle()
            .runtime_flavor()
    }

    #[test]
    fn serve_runs_on_every_core_and_the_rest_on_one_thread() {
        assert_eq!(
            flavor(&["agentctl", "--db", "x.sqlite3", "serve"]),
            RuntimeFlavor::MultiThread
        );
        assert_eq!(
            flavor(&["agentctl", "--db", "x.sqlite3", "runs"]),
            RuntimeFlavor::CurrentThread
        );
    }
}
