//! The whole suite against the in-memory store, written as a backend's test files are.

mod store {
    use std::sync::Arc;

    use agent_core::store::memory::MemoryStore;

    agent_conformance::store_conformance!(
        setup = async || Arc::new(MemoryStore::new()),
        corrupt = |store: Arc<MemoryStore>, run_id: String| async move {
            agent_core::__private::corrupt_memory_store(&store, &run_id);
        },
    );
}

mod runner {
    use std::sync::Arc;

    use agent_core::store::memory::MemoryStore;

    agent_conformance::runner_conformance!(setup = async || Arc::new(MemoryStore::new()));
}
