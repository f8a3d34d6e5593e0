//! The checkout's control binary: `agentctl` with the checkout agent registered, so that
//! `migrate` can move runs of version 1 to version 2 through `checkout_v2::from_v1`.
//!
//! ```sh
//! cargo run --example checkout-ctl -- migrate --dry-run   # per run: the state it becomes
//! cargo run --example checkout-ctl -- migrate             # apply: one `migrated` each
//! cargo run --example checkout-ctl -- runs --version 1    # every other agentctl command
//! ```
//!
//! The stock `agentctl` has no agent code, so it cannot call your mapping functions; a
//! project builds this binary of its own, with its agents registered, as a Django project
//! has its `manage.py` (`docs/versions.md`, "Rolling out"). Registering an agent takes its
//! type only: no handlers, tools or router, since nothing of a run executes but its
//! migration.

use std::process::ExitCode;

use examples::checkout_v2;

fn main() -> ExitCode {
    agentctl::Ctl::new().agent::<checkout_v2::Checkout>().run()
}
