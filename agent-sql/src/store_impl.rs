//! The store contract written once for the SQL stores: the macros a store invokes inside
//! its impls. [`statements!`](crate::statements) names a dialect's statement texts for
//! the traits that read them; [`impl_sql_store!`](crate::impl_sql_store) writes the
//! methods of the contract's roles that are the same on every SQL store, over the
//! store's [`SqlDialect`](crate::dialect::SqlDialect). The bodies are generic functions
//! of [`dialect`](crate::dialect), [`reads`](crate::reads), [`operator`](crate::operator)
//! and [`retention`](crate::retention); the macro only hands each method to one of them.
//!
//! Why a macro and not a generic `SqlStore<D>` with `type PgStore = SqlStore<Pg>`, as sqlx
//! has `PgPool = Pool<Postgres>`: each store keeps its own public type and constructors
//! (`PgStore::connect`, `SqliteStore::open`, their settings and statistics), which an
//! alias of a type defined here could not have (inherent methods belong to the crate that
//! defines the type), and a newtype around a generic store would forward every method
//! again. A store's type implements the dialect's traits instead, and this macro writes
//! its roles' methods once for all of them.

/// The statement texts of [`SqlReads`](crate::reads::SqlReads), [`SqlDialect`](crate::dialect::SqlDialect) or
/// [`OperatorTx`](crate::operator::OperatorTx),
/// inside a store's impl of the trait named first, from the store's module `$sql`: each
/// statement bears the name of the trait's constant, or, for a text built on first use,
/// the name of the trait's function in capitals without its `_sql` (`claim_run_sql`,
/// `CLAIM_RUN`).
///
/// ```text
/// impl SqlReads for PgStore {
///     agent_sql::statements!(SqlReads, sql);
///     …
/// }
/// ```
#[macro_export]
macro_rules! statements {
    (SqlReads, $sql:ident) => {
        const AGENT_GRAPH: &'static str = $sql::AGENT_GRAPH;
        const HISTORY: &'static str = $sql::HISTORY;
        const HAND_BACK: &'static str = $sql::HAND_BACK;
        const DEFER_RUN: &'static str = $sql::DEFER_RUN;
        const LOAD_RUN: &'static str = $sql::LOAD_RUN;
        const JOURNAL: &'static str = $sql::JOURNAL;
        const HISTORY_FROM: &'static str = $sql::HISTORY_FROM;
        const JOURNAL_FROM: &'static str = $sql::JOURNAL_FROM;
        const PENDING_SIGNALS: &'static str = $sql::PENDING_SIGNALS;
        const TOOL_SWITCHES: &'static str = $sql::TOOL_SWITCHES;

        fn run_events_sql() -> &'static str {
            $sql::RUN_EVENTS.as_str()
        }

        fn scope_events_sql() -> &'static str {
            $sql::SCOPE_EVENTS.as_str()
        }

        fn prune_candidates_sql() -> &'static str {
            $sql::PRUNE_CANDIDATES.as_str()
        }

        fn expired_runs_sql() -> &'static str {
            $sql::EXPIRED_RUNS.as_str()
        }
    };
    (OperatorTx, $sql:ident) => {
        const AGENT_GRAPH: &'static str = $sql::AGENT_GRAPH;
        const SIGNAL_OF_RUN: &'static str = $sql::SIGNAL_OF_RUN;
    };
    (SqlDialect, $sql:ident) => {
        const STORAGE_BYTES: &'static str = $sql::STORAGE_BYTES;
        const LAST_POSITION: &'static str = $sql::LAST_POSITION;
        const SET_TOOL: &'static str = $sql::SET_TOOL;
        const SET_STATUS: &'static str = $sql::SET_STATUS;
        const SET_BUDGET: &'static str = $sql::SET_BUDGET;
        const QUARANTINE_UNDER_LEASE: &'static str = $sql::QUARANTINE_UNDER_LEASE;
        const QUARANTINE_CORRUPT: &'static str = $sql::QUARANTINE_CORRUPT;
        const RENEW_LEASE: &'static str = $sql::RENEW_LEASE;
        const RELEASE_LEASE: &'static str = $sql::RELEASE_LEASE;
        const EXPIRE_LEASES_OF: &'static str = $sql::EXPIRE_LEASES_OF;
        const SEND_SIGNAL_ONCE: &'static str = $sql::SEND_SIGNAL_ONCE;
        const SIGNAL_BY_KEY: &'static str = $sql::SIGNAL_BY_KEY;
        const LIST_RUNS: &'static str = $sql::LIST_RUNS;
        const LIST_RUNS_AFTER: &'static str = $sql::LIST_RUNS_AFTER;
        const COUNT_RUNS: &'static str = $sql::COUNT_RUNS;
        const COUNT_VERSIONS: &'static str = $sql::COUNT_VERSIONS;
        const SPEND_BY_DAY: &'static str = $sql::SPEND_BY_DAY;
        const COUNT_LABEL_VALUES: &'static str = $sql::COUNT_LABEL_VALUES;
        const REGISTER_AGENT: &'static str = $sql::REGISTER_AGENT;

        fn claim_run_sql() -> &'static str {
            $sql::CLAIM_RUN.as_str()
        }
    };
}

/// The methods of the store contract's roles that are the same on every SQL store, inside
/// the store's role impls (the rest of each role's methods go in its braces). The store
/// implements [`SqlDialect`](crate::dialect::SqlDialect) (with [`SqlReads`](crate::reads::SqlReads)),
/// [`SqlOperator`](crate::operator::SqlOperator) (the operators' verbs, [`crate::operator`])
/// and [`SqlRetention`](crate::retention::SqlRetention), and has inherent methods for the
/// claim of a batch without its reads, `claim_batch(agents, worker, ttl, limit)`, and for
/// what a claim reads for its runs, `with_reads(claimed)`.
///
/// ```text
/// agent_sql::impl_sql_store!(PgStore {
///     history { async fn load_run(&self, run_id: &str) -> … { … } … }
///     runs { … }
///     operator { … }
///     events { … }
/// });
/// ```
#[macro_export]
macro_rules! impl_sql_store {
    ($store:ty {
        history { $($history:tt)* }
        runs { $($runs:tt)* }
        operator { $($operator:tt)* }
        events { $($events:tt)* }
    }) => {
        #[$crate::__private::async_trait]
        impl $crate::__private::HistoryStore for $store {
            async fn agents(&self) -> ::core::result::Result<
                ::std::vec::Vec<::std::string::String>,
                $crate::__private::StoreError,
            > {
                $crate::reads::agents(self).await
            }

            async fn agent_graph(
                &self,
                agent: &str,
                fingerprint: ::core::option::Option<&str>,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::__private::GraphDescription>,
                $crate::__private::StoreError,
            > {
                $crate::reads::agent_graph(self, agent, fingerprint).await
            }

            async fn tool_enabled(
                &self,
                tool: &str,
            ) -> ::core::result::Result<bool, $crate::__private::StoreError> {
                $crate::reads::tool_enabled(self, tool).await
            }

            async fn journal(
                &self,
                run_id: &str,
                version: ::core::option::Option<u64>,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::__private::JournalEntry>,
                $crate::__private::StoreError,
            > {
                $crate::reads::journal(self, run_id, version).await
            }

            async fn version_span(
                &self,
                run_id: &str,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::__private::VersionSpan>,
                $crate::__private::StoreError,
            > {
                $crate::reads::version_span(self, run_id).await
            }

            async fn history(
                &self,
                run_id: &str,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::__private::TransitionRecord>,
                $crate::__private::StoreError,
            > {
                $crate::reads::history(self, run_id).await
            }

            async fn history_from(
                &self,
                run_id: &str,
                version: u64,
                limit: usize,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::__private::TransitionRecord>,
                $crate::__private::StoreError,
            > {
                $crate::reads::history_from(self, run_id, version, limit).await
            }

            async fn journal_from(
                &self,
                run_id: &str,
                from: (u64, u32),
                limit: usize,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::__private::JournalEntry>,
                $crate::__private::StoreError,
            > {
                $crate::reads::journal_from(self, run_id, from, limit).await
            }

            async fn state_at(
                &self,
                run_id: &str,
                version: u64,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::__private::StateAtVersion>,
                $crate::__private::StoreError,
            > {
                $crate::reads::state_at(self, run_id, version).await
            }

            async fn fork(
                &self,
                run_id: &str,
                version: u64,
                new_id: &str,
            ) -> ::core::result::Result<
                $crate::__private::RunRecord,
                $crate::__private::StoreError,
            > {
                $crate::reads::fork(self, run_id, version, new_id).await
            }

            async fn pending_signals(
                &self,
                run_id: &str,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::__private::SignalRecord>,
                $crate::__private::StoreError,
            > {
                $crate::reads::pending_signals(self, run_id).await
            }

            async fn signal_by_key(
                &self,
                run_id: &str,
                key: &str,
            ) -> ::core::result::Result<
                ::core::option::Option<i64>,
                $crate::__private::StoreError,
            > {
                $crate::dialect::signal_by_key(self, run_id, key).await
            }

            async fn inspect_run(
                &self,
                run_id: &str,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::__private::InspectedRun>,
                $crate::__private::StoreError,
            > {
                $crate::reads::inspect_run(self, run_id).await
            }

            async fn tool_switches(
                &self,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::__private::ToolSwitch>,
                $crate::__private::StoreError,
            > {
                $crate::reads::tool_switches(self).await
            }

            async fn load_run(
                &self,
                run_id: &str,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::__private::RunRecord>,
                $crate::__private::StoreError,
            > {
                $crate::dialect::load_run(self, run_id).await
            }

            async fn storage_bytes(
                &self,
                run_id: &str,
            ) -> ::core::result::Result<
                ::core::option::Option<u64>,
                $crate::__private::StoreError,
            > {
                $crate::dialect::storage_bytes(self, run_id).await
            }

            async fn list_runs(
                &self,
                filter: &$crate::__private::RunFilter,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::__private::RunRecord>,
                $crate::__private::StoreError,
            > {
                $crate::dialect::list_runs(self, filter).await
            }

            async fn count_runs(
                &self,
                filter: &$crate::__private::RunFilter,
            ) -> ::core::result::Result<
                ::std::vec::Vec<($crate::__private::RunStatus, u64)>,
                $crate::__private::StoreError,
            > {
                $crate::dialect::count_runs(self, filter).await
            }

            async fn count_versions(
                &self,
                filter: &$crate::__private::RunFilter,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::__private::VersionCount>,
                $crate::__private::StoreError,
            > {
                $crate::dialect::count_versions(self, filter).await
            }

            async fn spend_by_day(
                &self,
                filter: &$crate::__private::RunFilter,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::__private::DaySpend>,
                $crate::__private::StoreError,
            > {
                $crate::dialect::spend_by_day(self, filter).await
            }

            async fn count_label_values(
                &self,
                key: &str,
                filter: &$crate::__private::RunFilter,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::__private::LabelValueCount>,
                $crate::__private::StoreError,
            > {
                $crate::dialect::count_label_values(self, key, filter).await
            }

            $($history)*
        }

        #[$crate::__private::async_trait]
        impl $crate::__private::RunStore for $store {
            async fn hand_back(
                &self,
                lease: &$crate::__private::Lease,
            ) -> ::core::result::Result<(), $crate::__private::StoreError> {
                $crate::reads::hand_back(self, lease).await
            }

            async fn defer_run(
                &self,
                lease: &$crate::__private::Lease,
                until: $crate::__private::Millis,
                why: &$crate::__private::WaitingFor,
            ) -> ::core::result::Result<bool, $crate::__private::StoreError> {
                $crate::reads::defer_run(self, lease, until, why).await
            }

            async fn record_entry(
                &self,
                lease: &$crate::__private::Lease,
                entry: &$crate::__private::JournalEntry,
            ) -> ::core::result::Result<(), $crate::__private::StoreError> {
                $crate::dialect::record_entry(self, lease, entry).await
            }

            async fn claim_run(
                &self,
                run_id: &str,
                worker: &str,
                ttl: ::std::time::Duration,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::__private::Claimed>,
                $crate::__private::StoreError,
            > {
                let ::core::option::Option::Some(claimed) =
                    $crate::dialect::claim_one(self, run_id, worker, ttl).await?
                else {
                    return ::core::result::Result::Ok(::core::option::Option::None);
                };
                ::core::result::Result::Ok(self.with_reads(::std::vec![claimed]).await.pop())
            }

            async fn claim_next(
                &self,
                agents: &[::std::string::String],
                worker: &str,
                ttl: ::std::time::Duration,
                limit: usize,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::__private::Claimed>,
                $crate::__private::StoreError,
            > {
                let claimed = self.claim_batch(agents, worker, ttl, limit).await?;
                ::core::result::Result::Ok(self.with_reads(claimed).await)
            }

            async fn commit_step(
                &self,
                lease: &$crate::__private::Lease,
                commit: &$crate::__private::StepCommit,
                entries: &[$crate::__private::JournalEntry],
            ) -> ::core::result::Result<
                $crate::__private::RunRecord,
                $crate::__private::StoreError,
            > {
                $crate::dialect::commit_step(self, lease, commit, entries).await
            }

            async fn accept_cancel(
                &self,
                lease: &$crate::__private::Lease,
            ) -> ::core::result::Result<
                $crate::__private::RunRecord,
                $crate::__private::StoreError,
            > {
                $crate::operator::operator_action(self, &lease.run_id, ::core::option::Option::None, |r, _| {
                    $crate::__private::operator::plan_accept_cancel(r, lease).map(|t| {
                        $crate::__private::operator::OperatorPlan::Transition(
                            ::std::boxed::Box::new(t),
                        )
                    })
                })
                .await
            }

            async fn renew_lease(
                &self,
                lease: &$crate::__private::Lease,
                ttl: ::std::time::Duration,
            ) -> ::core::result::Result<
                $crate::__private::Lease,
                $crate::__private::StoreError,
            > {
                $crate::dialect::renew_lease(self, lease, ttl).await
            }

            async fn release_lease(
                &self,
                lease: &$crate::__private::Lease,
            ) -> ::core::result::Result<(), $crate::__private::StoreError> {
                $crate::dialect::release_lease(self, lease).await
            }

            async fn expire_leases_of(
                &self,
                worker: &str,
            ) -> ::core::result::Result<u64, $crate::__private::StoreError> {
                $crate::dialect::expire_leases_of(self, worker).await
            }

            async fn send_signal(
                &self,
                run_id: &str,
                name: &str,
                payload: &$crate::__private::Value,
            ) -> ::core::result::Result<i64, $crate::__private::StoreError> {
                $crate::dialect::send_signal(self, run_id, name, payload).await
            }

            async fn send_signal_once(
                &self,
                run_id: &str,
                name: &str,
                payload: &$crate::__private::Value,
                key: &str,
            ) -> ::core::result::Result<
                $crate::__private::SignalReceipt,
                $crate::__private::StoreError,
            > {
                $crate::dialect::send_signal_once(self, run_id, name, payload, key).await
            }

            async fn quarantine(
                &self,
                lease: &$crate::__private::Lease,
                error: $crate::__private::RunFailure,
            ) -> ::core::result::Result<
                $crate::__private::RunRecord,
                $crate::__private::StoreError,
            > {
                $crate::dialect::quarantine(self, lease, error).await
            }

            async fn migrate_run(
                &self,
                lease: &$crate::__private::Lease,
                commit: &$crate::__private::MigrationCommit,
            ) -> ::core::result::Result<
                $crate::__private::RunRecord,
                $crate::__private::StoreError,
            > {
                $crate::operator::migrate(self, lease, commit).await
            }

            async fn register_agent(
                &self,
                graph: &$crate::__private::GraphDescription,
            ) -> ::core::result::Result<(), $crate::__private::StoreError> {
                $crate::dialect::register_agent(self, graph).await
            }

            $($runs)*
        }

        #[$crate::__private::async_trait]
        impl $crate::__private::OperatorStore for $store {
            async fn cancel_run(
                &self,
                run_id: &str,
                note: &$crate::__private::OperatorNote,
            ) -> ::core::result::Result<
                $crate::__private::RunRecord,
                $crate::__private::StoreError,
            > {
                $crate::operator::cancel_with_children(self, run_id, note).await
            }

            async fn terminate_run(
                &self,
                run_id: &str,
                note: &$crate::__private::OperatorNote,
            ) -> ::core::result::Result<
                $crate::__private::RunRecord,
                $crate::__private::StoreError,
            > {
                $crate::operator::operator_action(self, run_id, ::core::option::Option::None, |r, _| {
                    $crate::__private::operator::plan_terminate(r, note)
                })
                .await
            }

            async fn drop_signal(
                &self,
                run_id: &str,
                signal_id: i64,
                note: &$crate::__private::OperatorNote,
            ) -> ::core::result::Result<
                $crate::__private::RunRecord,
                $crate::__private::StoreError,
            > {
                $crate::operator::drop_signal(self, run_id, signal_id, note).await
            }

            async fn set_status(
                &self,
                run_id: &str,
                status: $crate::__private::RunStatus,
                error: ::core::option::Option<$crate::__private::RunFailure>,
            ) -> ::core::result::Result<
                $crate::__private::RunRecord,
                $crate::__private::StoreError,
            > {
                $crate::dialect::set_status(self, run_id, status, error).await
            }

            async fn prune(
                &self,
                policy: &$crate::__private::RetentionPolicy,
            ) -> ::core::result::Result<
                $crate::__private::PruneReport,
                $crate::__private::StoreError,
            > {
                $crate::retention::prune(self, policy).await
            }

            async fn set_budget(
                &self,
                run_id: &str,
                budget: ::core::option::Option<$crate::__private::Budget>,
            ) -> ::core::result::Result<
                $crate::__private::RunRecord,
                $crate::__private::StoreError,
            > {
                $crate::dialect::set_budget(self, run_id, budget).await
            }

            async fn set_tool_enabled(
                &self,
                tool: &str,
                enabled: bool,
                reason: ::core::option::Option<&str>,
            ) -> ::core::result::Result<(), $crate::__private::StoreError> {
                $crate::dialect::set_tool_enabled(self, tool, enabled, reason).await
            }

            $($operator)*
        }

        #[$crate::__private::async_trait]
        impl $crate::__private::EventLog for $store {
            async fn events(
                &self,
                scope: &$crate::__private::EventScope,
                after: $crate::__private::EventCursor,
                limit: usize,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::__private::RunEvent>,
                $crate::__private::StoreError,
            > {
                $crate::events::events(self, scope, after, limit).await
            }

            async fn event_head(
                &self,
            ) -> ::core::result::Result<
                $crate::__private::EventCursor,
                $crate::__private::StoreError,
            > {
                $crate::dialect::event_head(self).await
            }

            $($events)*
        }
    };
}
