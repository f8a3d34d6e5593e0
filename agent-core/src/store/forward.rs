//! Forwarding a role to a wrapped store, for wrappers that change one role and read as
//! the wrapped store reads.

/// Implement [`HistoryStore`](crate::store::HistoryStore) for a wrapper of a store by handing every method, the provided
/// ones included (the wrapped store's own, faster reads), to one of its fields:
/// `forward_history_store!(Audited => inner);`. For wrappers that change other roles (a store
/// that delays, fails or checks some writes, as the conformance suite's broken stores and the
/// simulation's store do) and read as the wrapped store reads.
#[macro_export]
macro_rules! forward_history_store {
    ($wrapper:ty => $field:ident) => {
        #[$crate::__private::async_trait]
        impl $crate::store::HistoryStore for $wrapper {
            async fn agents(
                &self,
            ) -> ::core::result::Result<Vec<::std::string::String>, $crate::store::StoreError> {
                use $crate::store::HistoryStore as _;
                self.$field.agents().await
            }

            async fn agent_graph(
                &self,
                agent: &str,
                fingerprint: ::core::option::Option<&str>,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::graph::GraphDescription>,
                $crate::store::StoreError,
            > {
                use $crate::store::HistoryStore as _;
                self.$field.agent_graph(agent, fingerprint).await
            }

            async fn load_run(
                &self,
                run_id: &str,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::store::RunRecord>,
                $crate::store::StoreError,
            > {
                use $crate::store::HistoryStore as _;
                self.$field.load_run(run_id).await
            }

            async fn inspect_run(
                &self,
                run_id: &str,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::store::InspectedRun>,
                $crate::store::StoreError,
            > {
                use $crate::store::HistoryStore as _;
                self.$field.inspect_run(run_id).await
            }

            async fn list_runs(
                &self,
                filter: &$crate::store::RunFilter,
            ) -> ::core::result::Result<Vec<$crate::store::RunRecord>, $crate::store::StoreError>
            {
                use $crate::store::HistoryStore as _;
                self.$field.list_runs(filter).await
            }

            async fn count_runs(
                &self,
                filter: &$crate::store::RunFilter,
            ) -> ::core::result::Result<
                Vec<($crate::store::RunStatus, u64)>,
                $crate::store::StoreError,
            > {
                use $crate::store::HistoryStore as _;
                self.$field.count_runs(filter).await
            }

            async fn count_versions(
                &self,
                filter: &$crate::store::RunFilter,
            ) -> ::core::result::Result<Vec<$crate::store::VersionCount>, $crate::store::StoreError>
            {
                use $crate::store::HistoryStore as _;
                self.$field.count_versions(filter).await
            }

            async fn spend_by_day(
                &self,
                filter: &$crate::store::RunFilter,
            ) -> ::core::result::Result<Vec<$crate::store::DaySpend>, $crate::store::StoreError>
            {
                use $crate::store::HistoryStore as _;
                self.$field.spend_by_day(filter).await
            }

            async fn count_label_values(
                &self,
                key: &str,
                filter: &$crate::store::RunFilter,
            ) -> ::core::result::Result<
                Vec<$crate::store::LabelValueCount>,
                $crate::store::StoreError,
            > {
                use $crate::store::HistoryStore as _;
                self.$field.count_label_values(key, filter).await
            }

            async fn history(
                &self,
                run_id: &str,
            ) -> ::core::result::Result<
                Vec<$crate::store::TransitionRecord>,
                $crate::store::StoreError,
            > {
                use $crate::store::HistoryStore as _;
                self.$field.history(run_id).await
            }

            async fn history_from(
                &self,
                run_id: &str,
                version: u64,
                limit: usize,
            ) -> ::core::result::Result<
                Vec<$crate::store::TransitionRecord>,
                $crate::store::StoreError,
            > {
                use $crate::store::HistoryStore as _;
                self.$field.history_from(run_id, version, limit).await
            }

            async fn version_span(
                &self,
                run_id: &str,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::store::VersionSpan>,
                $crate::store::StoreError,
            > {
                use $crate::store::HistoryStore as _;
                self.$field.version_span(run_id).await
            }

            async fn state_at(
                &self,
                run_id: &str,
                version: u64,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::store::StateAtVersion>,
                $crate::store::StoreError,
            > {
                use $crate::store::HistoryStore as _;
                self.$field.state_at(run_id, version).await
            }

            async fn fork(
                &self,
                run_id: &str,
                version: u64,
                new_id: &str,
            ) -> ::core::result::Result<$crate::store::RunRecord, $crate::store::StoreError> {
                use $crate::store::HistoryStore as _;
                self.$field.fork(run_id, version, new_id).await
            }

            async fn journal(
                &self,
                run_id: &str,
                version: ::core::option::Option<u64>,
            ) -> ::core::result::Result<Vec<$crate::store::JournalEntry>, $crate::store::StoreError>
            {
                use $crate::store::HistoryStore as _;
                self.$field.journal(run_id, version).await
            }

            async fn journal_from(
                &self,
                run_id: &str,
                from: (u64, u32),
                limit: usize,
            ) -> ::core::result::Result<Vec<$crate::store::JournalEntry>, $crate::store::StoreError>
            {
                use $crate::store::HistoryStore as _;
                self.$field.journal_from(run_id, from, limit).await
            }

            async fn pending_signals(
                &self,
                run_id: &str,
            ) -> ::core::result::Result<Vec<$crate::store::SignalRecord>, $crate::store::StoreError>
            {
                use $crate::store::HistoryStore as _;
                self.$field.pending_signals(run_id).await
            }

            async fn signal_by_key(
                &self,
                run_id: &str,
                key: &str,
            ) -> ::core::result::Result<::core::option::Option<i64>, $crate::store::StoreError>
            {
                use $crate::store::HistoryStore as _;
                self.$field.signal_by_key(run_id, key).await
            }

            async fn tool_switches(
                &self,
            ) -> ::core::result::Result<Vec<$crate::store::ToolSwitch>, $crate::store::StoreError>
            {
                use $crate::store::HistoryStore as _;
                self.$field.tool_switches().await
            }

            async fn tool_enabled(
                &self,
                tool: &str,
            ) -> ::core::result::Result<bool, $crate::store::StoreError> {
                use $crate::store::HistoryStore as _;
                self.$field.tool_enabled(tool).await
            }

            async fn tool_stats(
                &self,
                since: $crate::store::Millis,
            ) -> ::core::result::Result<Vec<$crate::store::ToolStats>, $crate::store::StoreError>
            {
                use $crate::store::HistoryStore as _;
                self.$field.tool_stats(since).await
            }

            async fn storage_bytes(
                &self,
                run_id: &str,
            ) -> ::core::result::Result<::core::option::Option<u64>, $crate::store::StoreError>
            {
                use $crate::store::HistoryStore as _;
                self.$field.storage_bytes(run_id).await
            }
        }
    };
}

/// Implement [`ScheduleStore`](crate::store::ScheduleStore) for a wrapper of a store by handing every method to one of
/// its fields: `forward_schedule_store!(Audited => inner);`. For wrappers that change
/// other roles (a store that counts, delays or fails some calls, as the conformance
/// suite's broken stores do) and keep the schedules as the wrapped store does.
#[macro_export]
macro_rules! forward_schedule_store {
    ($wrapper:ty => $field:ident) => {
        #[$crate::__private::async_trait]
        impl $crate::store::ScheduleStore for $wrapper {
            async fn insert_schedule(
                &self,
                schedule: &$crate::schedule::Schedule,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::schedule::Schedule>,
                $crate::store::StoreError,
            > {
                use $crate::store::ScheduleStore as _;
                self.$field.insert_schedule(schedule).await
            }

            async fn load_schedule(
                &self,
                id: &str,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::schedule::Schedule>,
                $crate::store::StoreError,
            > {
                use $crate::store::ScheduleStore as _;
                self.$field.load_schedule(id).await
            }

            async fn list_schedules(
                &self,
                agent: ::core::option::Option<&str>,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::schedule::Schedule>,
                $crate::store::StoreError,
            > {
                use $crate::store::ScheduleStore as _;
                self.$field.list_schedules(agent).await
            }

            async fn replace_schedule(
                &self,
                schedule: &$crate::schedule::Schedule,
                expected_revision: u64,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::schedule::Schedule>,
                $crate::store::StoreError,
            > {
                use $crate::store::ScheduleStore as _;
                self.$field
                    .replace_schedule(schedule, expected_revision)
                    .await
            }

            async fn delete_schedule(
                &self,
                id: &str,
            ) -> ::core::result::Result<bool, $crate::store::StoreError> {
                use $crate::store::ScheduleStore as _;
                self.$field.delete_schedule(id).await
            }

            async fn due_schedules(
                &self,
                agent: &str,
                now: $crate::store::Millis,
                limit: usize,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::schedule::Schedule>,
                $crate::store::StoreError,
            > {
                use $crate::store::ScheduleStore as _;
                self.$field.due_schedules(agent, now, limit).await
            }

            async fn next_schedule_due(
                &self,
                agent: &str,
            ) -> ::core::result::Result<
                ::core::option::Option<$crate::store::Millis>,
                $crate::store::StoreError,
            > {
                use $crate::store::ScheduleStore as _;
                self.$field.next_schedule_due(agent).await
            }
        }
    };
}

/// Implement [`LimitStore`](crate::store::LimitStore) for a wrapper of a store by handing
/// every method to one of its fields: `forward_limit_store!(Audited => inner);`, for
/// wrappers that change other roles and keep the rate limits as the wrapped store does.
#[macro_export]
macro_rules! forward_limit_store {
    ($wrapper:ty => $field:ident) => {
        #[$crate::__private::async_trait]
        impl $crate::store::LimitStore for $wrapper {
            async fn define_limit(
                &self,
                limit: &$crate::store::RateLimit,
                now: $crate::store::Millis,
            ) -> ::core::result::Result<(), $crate::store::StoreError> {
                use $crate::store::LimitStore as _;
                self.$field.define_limit(limit, now).await
            }

            async fn take_capacity(
                &self,
                name: &str,
                amount: u64,
                now: $crate::store::Millis,
            ) -> ::core::result::Result<
                ::core::option::Option<::std::time::Duration>,
                $crate::store::StoreError,
            > {
                use $crate::store::LimitStore as _;
                self.$field.take_capacity(name, amount, now).await
            }

            async fn pause_limit(
                &self,
                name: &str,
                wait: ::std::time::Duration,
                now: $crate::store::Millis,
            ) -> ::core::result::Result<(), $crate::store::StoreError> {
                use $crate::store::LimitStore as _;
                self.$field.pause_limit(name, wait, now).await
            }

            async fn limits(
                &self,
                now: $crate::store::Millis,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::store::LimitState>,
                $crate::store::StoreError,
            > {
                use $crate::store::LimitStore as _;
                self.$field.limits(now).await
            }
        }
    };
}
