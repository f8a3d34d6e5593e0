//! `agentctl`: inspect and operate durable agent runs from the command line.
//!
//! It reads the same database the workers write (a SQLite file or PostgreSQL) and needs no
//! agent code: each agent's graph is stored by the runner when the agent's first run starts.
//! See `docs/agentctl.md` for every command with examples.

mod cli;
mod commands;
mod error;
mod output;
mod store;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let out = output::Output::new(&cli.global);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            out.error(&error::CliError::failed(format!(
                "cannot start the async runtime: {e}"
            )));
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(commands::run(cli, out)) {
        Ok(code) => code,
        Err(e) => {
            out.error(&e);
            e.exit_code()
        }
    }
}
