//! # e2e: the reliability battery's harness
//!
//! Real worker processes (`e2e-worker`), a real PostgreSQL and real signals. The pieces:
//!
//! - [`shop`]: the example agent (read, write and hybrid tools, an LLM-routed state with a
//!   scripted router of random latency) whose tools act on a fake external [`service`];
//! - [`service`]: that service, recording every applied effect by idempotency key, every tool
//!   execution and every LLM call in PostgreSQL (tables `e2e_*` in the test's schema), so
//!   the record survives `kill -9` and is shared by every process;
//! - [`check`]: the invariant checker over the store's tables and that record (the seven
//!   invariants of `DESIGN.md`);
//! - [`db`]: reaching PostgreSQL (or failing loudly under CI), a schema per test, and a
//!   throwaway cluster of our own for the restart test;
//! - [`procs`]: worker processes and in-process workers, the chaos driver's tools;
//! - [`proxy`]: a TCP proxy that injects network faults between a worker and the database;
//! - [`tree`]: a parent agent that fans out to five child agents, and its checker (the
//!   children soak, issue 17);
//! - [`shop_v2`]: version 2 of the shop, migrating version 1's runs, and [`versions`]: the
//!   record of every claim and the checker of a rolling deploy (issue 20);
//! - [`triggered`]: runs started by a schedule and by NATS and MQTT triggers in killed
//!   worker processes, and their checker (issue 41), on the real [`brokers`];
//! - [`limited`]: runs asking a model through the real OpenAI router under a rate limit
//!   shared by killed worker processes, against a provider stand-in enforcing its own
//!   (issue 42).
//!
//! `RELIABILITY.md` at the workspace root reports the figures and how to reproduce them.

pub mod brokers;
pub mod check;
pub mod db;
pub mod limited;
pub mod procs;
pub mod proxy;
pub mod service;
pub mod shop;
pub mod shop_v2;
pub mod stats;
pub mod tree;
pub mod triggered;
pub mod versions;

/// Whether the full sizes were asked for (`E2E_SCALE=full`, from `scripts/reliability`).
#[must_use]
pub fn full_scale() -> bool {
    std::env::var("E2E_SCALE").is_ok_and(|v| v == "full")
}

/// A size from the environment (`name`), else `full` under `E2E_SCALE=full`, else `reduced`.
#[must_use]
pub fn size(name: &str, reduced: u64, full: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full_scale() { full } else { reduced })
}

/// Milliseconds since the Unix epoch.
#[must_use]
pub fn now_ms() -> i64 {
    agent_core::store::now_ms()
}
