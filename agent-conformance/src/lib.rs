//! # durable-agents-conformance
//!
//! The conformance suite of [durable-agents](https://docs.rs/durable-agents): the same tests
//! for every [`Store`](agent_core::store::Store) backend, and the fixture agents they run.
//! It is for two readers: the author of a store backend, whose tests run the suite, and the
//! framework's own tests, which drive the fixture agents ([`fixture`]). Nothing in a program
//! that runs agents needs it; depend on it as a dev-dependency (through the facade's feature
//! `conformance`, as `durable_agents::conformance`, or directly).
//!
//! Each guarantee of the contract is a `pub async fn check_…(store) -> Result<(), String>`
//! in a module per group ([`store_checks`]); a broken store makes the check return `Err`
//! with what went wrong. [`store_conformance!`] expands to one `#[tokio::test]` per check,
//! each on a fresh store, so a backend's test file is a few lines (the crate using it needs
//! `tokio` with the `macros` and `rt-multi-thread` features):
//!
//! ```ignore
//! use std::sync::Arc;
//! use my_store::MyStore;
//!
//! durable_agents::conformance::store_conformance!(
//!     setup = async || Arc::new(MyStore::open_fresh().await),
//!     corrupt = |store: Arc<MyStore>, run_id: String| async move {
//!         store.damage_for_tests(&run_id).await;
//!     },
//! );
//! durable_agents::conformance::runner_conformance!(setup = async || Arc::new(MyStore::open_fresh().await));
//! ```
//!
//! - `setup` returns a fresh `Arc<S>` for one test (for PostgreSQL: its own schema; for
//!   SQLite: its own file), or an `Option<Arc<S>>` whose `None` skips the test.
//! - `corrupt` damages one run's stored data the way a bad disk or a careless manual edit
//!   would (an unknown status name, a history payload that no longer parses), so the suite
//!   can check that it surfaces as [`StoreError::Corrupt`](agent_core::store::StoreError::Corrupt)
//!   and not as a panic.
//! - `teardown` (optional) receives the store after the check, to drop a schema or a file.
//!
//! [`runner_conformance!`] does the same for the runner's checks ([`runner_checks`],
//! [`child_checks`], [`version_checks`]): the fixture agents run on the store through
//! crashes at every fault point, reclaims, cancels and version changes.
//!
//! Extending the suite: add a `pub async fn` to a group module (or a new `pub mod` group)
//! and list its name in [`store_conformance!`]. The suite's own tests run every check
//! against [`MemoryStore`](agent_core::store::memory::MemoryStore) (`tests/memory.rs`) and
//! each relevant check against a deliberately broken store, asserting that the check fails.
#![warn(missing_docs)]

pub mod child_checks;
pub mod fixture;
pub mod runner_checks;
pub mod schedule_checks;
pub mod store_checks;
pub mod version_checks;

#[cfg(test)]
mod broken;

/// What the macros' expansions name. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use agent_core::store::Store;
}

/// What a conformance `setup` returns: the store, or `None` to skip the test (a backend
/// whose database is not configured outside CI).
pub trait SetupOutput {
    /// The store type.
    type Store;
    /// The store, or `None` to skip.
    fn into_store(self) -> Option<Self::Store>;
}

impl<S: ?Sized> SetupOutput for std::sync::Arc<S> {
    type Store = Self;
    fn into_store(self) -> Option<Self> {
        Some(self)
    }
}

impl<S: ?Sized> SetupOutput for Option<std::sync::Arc<S>> {
    type Store = std::sync::Arc<S>;
    fn into_store(self) -> Option<std::sync::Arc<S>> {
        self
    }
}

/// Expand to one `#[tokio::test]` per store conformance check. See [the crate](crate).
#[macro_export]
macro_rules! store_conformance {
    (setup = $setup:expr, corrupt = $corrupt:expr $(,)?) => {
        $crate::store_conformance!(
            setup = $setup,
            corrupt = $corrupt,
            teardown = |_store| async {},
        );
    };
    (setup = $setup:expr, corrupt = $corrupt:expr, teardown = $teardown:expr $(,)?) => {
        $crate::store_conformance!(@plain ($setup, $teardown)
            check_store_and_load_runs,
            check_create_run_is_idempotent,
            check_version_chain_single_winner,
            check_stale_epoch_is_fenced,
            check_commits_across_a_reclaim,
            check_live_lease_blocks_and_expired_lease_is_reclaimed,
            check_journal_is_durable_and_ordered,
            check_commit_carries_entries,
            check_signals_kept_and_consumed_once,
            check_keyed_signals_stored_once,
            check_claim_next_selects_runnable_runs,
            check_claim_next_takes_the_oldest_first,
            check_hand_back_does_not_count_the_claim,
            check_expire_leases_of_frees_one_workers_runs,
            check_final_commit_ends_the_lease,
            check_quarantine_is_fenced,
            check_repair_resets_a_quarantined_run,
            check_edit_is_one_audited_transition,
            check_edit_by_patch,
            check_spend_and_budget_are_stored,
            check_spend_is_summed_per_agent_and_day,
            check_rate_limits_are_shared_and_exact,
            check_defer_run_hands_back_until_its_turn,
            check_migration_is_a_fenced_transition_once,
            check_migration_refuses_compensating_runs,
            check_claim_next_filters_by_version,
            check_concurrent_claim_next_is_disjoint,
            check_claim_reads_match_the_reads,
            check_create_run_claimed_holds_the_run,
            check_history_time_travel_and_fork,
            check_history_and_journal_pages,
            check_prune_keeps_resume_working,
            check_retention_keeps_the_window,
            check_retention_deletes_old_final_runs,
            check_storage_grows_linearly,
            check_tool_registry,
            check_set_status,
            check_list_runs,
            check_list_runs_keyset,
            check_agent_graphs,
            check_wait_for_work_returns,
            check_next_due_is_no_later_than_a_live_lease,
            check_tool_stats_match_the_journal,
            check_terminate_stops_runs_at_once,
            check_terminate_closes_out_stopped_runs,
            check_drop_signal_is_audited,
            check_cancel_moves_free_runs_to_compensating,
            check_cancel_of_a_leased_run_waits_for_its_holder,
            check_cancel_racing_a_commit,
            check_labels_filter_runs,
            check_child_creation_is_idempotent,
            check_cancel_reaches_children,
            check_list_runs_by_parent,
            check_claim_next_waits_for_all_children,
            check_claim_next_wakes_on_first_child,
            check_prune_keeps_child_entries,
            check_events_follow_the_records,
            check_events_resume_from_any_cursor,
            check_events_of_parallel_calls_are_not_lost,
            check_events_by_agent_and_of_all,
            check_followers_are_woken,
            check_hub_followers_share_reads,
            check_status_changes_are_events,
        );
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn check_corrupt_data_is_an_error() {
            let ::std::option::Option::Some(store) =
                $crate::SetupOutput::into_store(($setup)().await)
            else {
                return;
            };
            let corrupter = store.clone();
            let result = $crate::store_checks::check_corrupt_data_is_an_error(
                store.clone(),
                move |run_id: ::std::string::String| ($corrupt)(corrupter, run_id),
            )
            .await;
            ($teardown)(store).await;
            if let ::std::result::Result::Err(e) = result {
                ::std::panic!("conformance check failed: {e}");
            }
        }
    };
    (@plain ($setup:expr, $teardown:expr) $($check:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let ::std::option::Option::Some(store) =
                    $crate::SetupOutput::into_store(($setup)().await)
                else {
                    return;
                };
                let result = $crate::store_checks::$check(store.clone()).await;
                ($teardown)(store).await;
                if let ::std::result::Result::Err(e) = result {
                    ::std::panic!("conformance check failed: {e}");
                }
            }
        )*
    };
}
