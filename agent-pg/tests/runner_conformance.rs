//! The runner's invariants on PostgreSQL: the conformance fixture agent driven through the
//! runner, with crashes injected at every fault point, each check in its own schema.

mod common;

agent_conformance::runner_conformance!(setup = common::fresh_store);
