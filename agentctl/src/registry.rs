//! The agents a control binary registers, type-erased to what `migrate` needs: the name,
//! the version, the older versions it migrates from, and the planning and writing of one
//! run's migration ([`agent_core::versions::plan_migration`],
//! [`agent_core::versions::migrate_claimed`], generic over the agent); and the replays it
//! registers, type-erased to what `replay` needs ([`Replayer`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use agent_core::agent::{Agent, Handle};
use agent_core::replay::{Replay, RunReplay};
use agent_core::store::export::RunExport;
use agent_core::store::{Lease, RunRecord, Store, StoreError};
use agent_core::versions::{MigrationOutcome, MigrationPlan, migrate_claimed, plan_migration};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

type PlanFn =
    for<'a> fn(&'a dyn Store, &'a RunRecord) -> BoxFuture<'a, Result<MigrationPlan, StoreError>>;

type ApplyFn = for<'a> fn(
    &'a dyn Store,
    &'a Lease,
    &'a RunRecord,
) -> BoxFuture<'a, Result<MigrationOutcome, StoreError>>;

/// One registered agent.
pub(crate) struct Registered {
    /// `A::NAME`.
    pub name: &'static str,
    /// `A::VERSION`.
    pub version: u32,
    /// The versions `A` migrates runs from, oldest first.
    pub older: Vec<u32>,
    plan: PlanFn,
    apply: ApplyFn,
}

impl fmt::Debug for Registered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registered")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("older", &self.older)
            .finish_non_exhaustive()
    }
}

impl Registered {
    pub(crate) fn of<A: Agent>() -> Self {
        Self {
            name: A::NAME,
            version: A::VERSION,
            older: A::older_versions().iter().map(|o| o.version).collect(),
            plan: |store, record| Box::pin(plan_migration::<A>(store, record)),
            apply: |store, lease, record| Box::pin(migrate_claimed::<A>(store, lease, record)),
        }
    }

    /// What migrating `record` would write (nothing is written).
    pub(crate) async fn plan(
        &self,
        store: &dyn Store,
        record: &RunRecord,
    ) -> Result<MigrationPlan, StoreError> {
        (self.plan)(store, record).await
    }

    /// Migrate the run `lease` holds.
    pub(crate) async fn apply(
        &self,
        store: &dyn Store,
        lease: &Lease,
        record: &RunRecord,
    ) -> Result<MigrationOutcome, StoreError> {
        (self.apply)(store, lease, record).await
    }
}

/// A replay registered with [`Ctl::replay`](crate::Ctl::replay), type-erased to what
/// `agentctl replay` needs: the agent's name and the replay of one exported run.
pub(crate) trait Replayer: Send + Sync {
    /// `A::NAME`.
    fn agent(&self) -> &'static str;
    /// Replay one run.
    fn replay<'a>(&'a self, export: &'a RunExport) -> BoxFuture<'a, RunReplay>;
}

impl<A, H> Replayer for Replay<A, H>
where
    A: Agent + Handle<H>,
    H: Send + Sync + 'static,
{
    fn agent(&self) -> &'static str {
        A::NAME
    }

    fn replay<'a>(&'a self, export: &'a RunExport) -> BoxFuture<'a, RunReplay> {
        Box::pin(self.run(export))
    }
}

/// The replays a control binary registers.
#[derive(Default)]
pub(crate) struct Replayers(pub Vec<std::sync::Arc<dyn Replayer>>);

impl fmt::Debug for Replayers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|r| r.agent()))
            .finish()
    }
}

impl Replayers {
    /// The replay of agent `name`, if registered.
    pub(crate) fn of(&self, name: &str) -> Option<&dyn Replayer> {
        self.0.iter().find(|r| r.agent() == name).map(|r| &**r)
    }
}
