//! Runner-level invariants, checked on a real store: the [`fixture`] agent
//! runs through the runner, with crashes injected at every fault point.
//!
//! [`runner_conformance!`](crate::runner_conformance) expands to one test per check.

mod crashes;
mod operator;
mod steps;
mod timers;
mod workers;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::fixture::{self, Behaviour, Order, World};
use agent_core::Agent;
use agent_core::runner::{FaultHook, NoFaults, Runner, RunnerConfig};
use agent_core::store::{EntryKind, RunRecord, RunStatus, Store, TransitionKind};

pub use crashes::{
    check_crash_sweep, check_crash_sweep_parallel_calls,
    check_followers_miss_nothing_across_crashes, check_runs_complete_with_effects_once,
};
pub use operator::{
    check_cancel_compensates_a_waiting_run_once, check_cancel_during_a_step_takes_its_place,
    check_cancel_racing_the_runner, check_terminate_during_a_step_fences_the_worker,
    check_terminate_stops_without_compensating,
};
pub use steps::{
    check_illegal_router_answers, check_kill_switch, check_quarantine, check_read_cache,
    check_redaction, check_stale_worker_is_fenced, check_wait_survives_restart,
};
pub use timers::{
    Fired, FollowUp, FollowUpBehaviour, check_timer_or_signal_whichever_first,
    check_timers_fire_once_when_due,
};
pub use workers::{
    check_worker_expires_its_old_leases_at_start, check_worker_runs_suspects_alone,
    check_worker_takes_over_when_a_lease_expires,
};

pub use super::version_checks::{
    check_compensating_v1_run_is_compensated_by_v2, check_older_runner_leaves_newer_runs_alone,
    check_v1_run_interrupted_mid_step_finishes_on_v2,
};

pub use super::schedule_checks::{
    check_schedule_bad_input_is_refused, check_schedule_catch_up_policies,
    check_schedule_crash_before_advancing_starts_no_second_run,
    check_schedule_dst_with_a_controllable_clock, check_schedule_overlap_policies,
    check_schedule_pause_resume_trigger_backfill,
    check_schedule_ticks_once_with_concurrent_tickers, check_schedule_worker_ticks_without_polling,
};

pub use super::child_checks::{
    check_cancelled_parent_cancels_its_children, check_children_budget, check_children_join_all,
    check_children_join_first_cancels_the_rest, check_crash_sweep_children,
    check_failed_child_reaches_the_parent,
};

const LEASE: Duration = Duration::from_millis(150);

fn config(worker: &str) -> RunnerConfig {
    RunnerConfig {
        worker_id: worker.to_owned(),
        lease_ttl: LEASE,
        ..RunnerConfig::default()
    }
}

fn runner(
    store: &Arc<dyn Store>,
    world: &Arc<World>,
    choice: &'static str,
    worker: &str,
) -> Result<Runner<Order, Behaviour>, String> {
    runner_with(store, world, choice, worker, Arc::new(NoFaults))
}

fn runner_with(
    store: &Arc<dyn Store>,
    world: &Arc<World>,
    choice: &'static str,
    worker: &str,
    faults: Arc<dyn FaultHook>,
) -> Result<Runner<Order, Behaviour>, String> {
    Runner::builder(Arc::clone(store), Behaviour, fixture::tools(world))
        .router(Arc::new(fixture::router(choice)))
        .config(config(worker))
        .faults(faults)
        .build()
        .map_err(|e| e.to_string())
}

/// How a fixture run should end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    /// Reserve, route to Pay, charge (timing out once), confirm, done.
    Paid,
    /// The card is declined: `on_error` into `Failed`, reservations released.
    Declined,
    /// The router cancels: reservations released.
    Cancelled,
}

impl Scenario {
    fn choice(self) -> &'static str {
        if self == Self::Cancelled {
            "Cancelled"
        } else {
            "Pay"
        }
    }

    fn world(self) -> Arc<World> {
        let world = Arc::new(World::default());
        world.configure(|w| match self {
            Self::Paid => w.charge_timeouts = 1,
            Self::Declined => w.fail_charges = true,
            Self::Cancelled => {}
        });
        world
    }

    fn final_status(self) -> RunStatus {
        if self == Self::Paid {
            RunStatus::Completed
        } else {
            RunStatus::Compensated
        }
    }
}

/// Versions form one chain `0..=n`, every move is a declared edge, every journaled tool
/// call was legal in its state.
async fn check_history(store: &dyn Store, record: &RunRecord) -> Result<(), String> {
    let graph = Order::graph();
    let history = store.history(&record.id).await.map_err(|e| e.to_string())?;
    let versions: Vec<u64> = history.iter().map(|t| t.version).collect();
    let expected: Vec<u64> = (0..=record.version).collect();
    if versions != expected {
        return Err(format!(
            "versions {versions:?}, expected one chain {expected:?}"
        ));
    }
    for t in &history {
        let legal = match t.kind {
            TransitionKind::Start => t.version == 0,
            TransitionKind::Status
            | TransitionKind::Cancel
            | TransitionKind::Terminate
            | TransitionKind::SignalDropped => t.from_state == t.to_state,
            TransitionKind::Step | TransitionKind::Error => {
                graph.has_edge(&t.from_state, &t.to_state)
            }
            // An operator's reset goes back to a state the run was in, not along an edge.
            TransitionKind::Repair => graph.state(&t.to_state).is_some(),
            // An operator's edit stays in the state or takes an edge, unless its note says
            // it overrode the graph.
            TransitionKind::Edited => {
                t.from_state == t.to_state
                    || graph.has_edge(&t.from_state, &t.to_state)
                    || t.note
                        .as_ref()
                        .is_some_and(|n| n.reason.contains("[graph overridden"))
            }
            // A migration maps a state of an older version to one of this version's: it
            // names who wrote it, and leads to a state the graph has.
            TransitionKind::Migrated => {
                t.note.as_ref().is_some_and(|n| n.by == "migration")
                    && graph.state(&t.to_state).is_some()
            }
        };
        if !legal {
            return Err(format!(
                "v{} {:?} `{}` -> `{}` is not a declared edge",
                t.version, t.kind, t.from_state, t.to_state
            ));
        }
    }
    let journal = store
        .journal(&record.id, None)
        .await
        .map_err(|e| e.to_string())?;
    for e in journal.iter().filter(|e| e.kind == EntryKind::Tool) {
        if !graph.allows_tool(&e.state, &e.name) {
            return Err(format!(
                "tool `{}` journaled in state `{}` where it is not allowed",
                e.name, e.state
            ));
        }
    }
    Ok(())
}

/// Effects: each key applied once; what was applied matches the scenario; compensations
/// released exactly the reservations, last first.
fn check_world(world: &World, scenario: Scenario) -> Result<(), String> {
    let w = world.state();
    let mut seen = BTreeSet::new();
    for (tool, key) in &w.applied {
        if !seen.insert(key) {
            return Err(format!("effect `{tool}` with key {key} applied twice"));
        }
    }
    let count = |tool: &str| w.applied.iter().filter(|(t, _)| t == tool).count();
    let (charges, releases) = match scenario {
        Scenario::Paid => (1, 0),
        Scenario::Declined | Scenario::Cancelled => (0, 2),
    };
    if count("Reserve") != 2 || count("Charge") != charges || count("Release") != releases {
        return Err(format!("{scenario:?}: applied {:?}", w.applied));
    }
    if releases > 0 {
        if !w.held.is_empty() {
            return Err(format!(
                "reservations still held after compensation: {:?}",
                w.held
            ));
        }
        let mut last_first = w.reserved.clone();
        last_first.reverse();
        if w.released != last_first {
            return Err(format!(
                "released {:?}; expected the reservations {:?} last first",
                w.released, w.reserved
            ));
        }
    }
    Ok(())
}

async fn start(runner: &Runner<Order, Behaviour>, run_id: &str) -> Result<(), String> {
    runner
        .start(run_id, fixture::initial(&["a", "bb"]))
        .await
        .map_err(|e| e.to_string())?;
    // Sent before the run reaches its wait: it must be kept.
    runner
        .signal(run_id, "confirm", json!({ "ok": true }))
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Expand to one `#[tokio::test]` per runner check, each on a fresh store from `setup`
/// (an `Arc` of a store, or an `Option` of one whose `None` skips the test).
#[macro_export]
macro_rules! runner_conformance {
    (setup = $setup:expr $(,)?) => {
        $crate::runner_conformance!(@each $setup,
            check_runs_complete_with_effects_once,
            check_crash_sweep,
            check_crash_sweep_parallel_calls,
            check_children_join_all,
            check_children_join_first_cancels_the_rest,
            check_failed_child_reaches_the_parent,
            check_cancelled_parent_cancels_its_children,
            check_children_budget,
            check_crash_sweep_children,
            check_stale_worker_is_fenced,
            check_quarantine,
            check_wait_survives_restart,
            check_timers_fire_once_when_due,
            check_timer_or_signal_whichever_first,
            check_kill_switch,
            check_illegal_router_answers,
            check_read_cache,
            check_redaction,
            check_worker_runs_suspects_alone,
            check_worker_expires_its_old_leases_at_start,
            check_worker_takes_over_when_a_lease_expires,
            check_cancel_compensates_a_waiting_run_once,
            check_cancel_during_a_step_takes_its_place,
            check_terminate_stops_without_compensating,
            check_terminate_during_a_step_fences_the_worker,
            check_cancel_racing_the_runner,
            check_followers_miss_nothing_across_crashes,
            check_v1_run_interrupted_mid_step_finishes_on_v2,
            check_compensating_v1_run_is_compensated_by_v2,
            check_older_runner_leaves_newer_runs_alone,
            check_schedule_ticks_once_with_concurrent_tickers,
            check_schedule_crash_before_advancing_starts_no_second_run,
            check_schedule_overlap_policies,
            check_schedule_catch_up_policies,
            check_schedule_pause_resume_trigger_backfill,
            check_schedule_dst_with_a_controllable_clock,
            check_schedule_bad_input_is_refused,
            check_schedule_worker_ticks_without_polling,
        );
    };
    (@each $setup:expr, $($check:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let ::std::option::Option::Some(store) =
                    $crate::SetupOutput::into_store(($setup)().await)
                else {
                    return;
                };
                let store: ::std::sync::Arc<dyn $crate::__private::Store> = store;
                if let ::std::result::Result::Err(e) =
                    $crate::runner_checks::$check(store).await
                {
                    ::std::panic!("runner conformance check failed: {e}");
                }
            }
        )*
    };
}
