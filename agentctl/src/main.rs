//! The stock `agentctl`: every command, and no agent code (see the library's docs for a
//! control binary with your agents registered, which `agentctl migrate` needs to migrate
//! runs of older versions).

use std::process::ExitCode;

fn main() -> ExitCode {
    agentctl::Ctl::new().run()
}
