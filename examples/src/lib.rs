//! The example agents and the shop service they act on.
//!
//! - [`checkout`]: the checkout agent (`cargo run --example checkout`).
//! - [`checkout_v2`]: version 2 of it, migrating runs of version 1 (`cargo run --example checkout-v2`).
//! - [`shop`]: the small shop service its tools call, with idempotency keys and an effect log.
//! - [`triage`]: the support-triage agent (`cargo run --example support-triage`).
//! - [`research`]: a report researched by child agents (`cargo run --example research`).
//! - [`digest`]: a digest started by a schedule, with a durable timer (`cargo run --example digest`).
//! - [`stores`]: SQLite by default, PostgreSQL when `DATABASE_URL` is set.
//! - [`report`]: run timelines read back from the store.
//! - [`crash`]: the examples' `--crash-after-steps`, a real abort.
//! - [`out`]: lines to stdout that end quietly on a closed pipe, logs coloured only on a terminal.

pub mod checkout;
pub mod checkout_v2;
pub mod crash;
pub mod digest;
pub mod out;
pub mod report;
pub mod research;
pub mod shop;
pub mod stores;
pub mod triage;
