//! Setting a store up: connecting into a schema, migrating, the `LISTEN` task that wakes
//! idle workers, and how driver errors map to store errors.

use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_core::store::StoreError;
use agent_sql::heads::HeadCache;
use sqlx::AssertSqlSafe;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tokio::sync::Notify;

use crate::group_commit::{GroupCommit, GroupCommitStats};
use crate::{COMMITS_IN_FLIGHT, COMMITS_PER_STATEMENT, PgStore};

/// Errors of setting a [`PgStore`] up (connecting, migrating).
#[derive(Debug, thiserror::Error)]
pub enum PgSetupError {
    /// The schema name is not a plain identifier.
    #[error(
        "invalid schema name `{0}`: use letters, digits and `_`, starting with a letter or `_`"
    )]
    InvalidSchema(String),
    /// Connecting failed.
    #[error("cannot connect to PostgreSQL: {0}")]
    Connect(#[source] sqlx::Error),
    /// A migration failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Any other database error.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

fn valid_schema(schema: &str) -> bool {
    let mut chars = schema.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && schema.len() <= 63
}

impl PgStore {
    /// Connect to `url` with the store's tables in `schema` (created by [`Self::migrate`]).
    /// Connections show as `agent-pg/<schema>` in `pg_stat_activity`.
    ///
    /// # Errors
    /// [`PgSetupError::InvalidSchema`] for a schema name that is not a plain identifier;
    /// [`PgSetupError::Connect`] when the URL is invalid or the server does not answer.
    pub async fn connect(url: &str, schema: &str) -> Result<Self, PgSetupError> {
        Self::connect_with(url, schema, PgPoolOptions::new().max_connections(16)).await
    }

    /// [`Self::connect`] with the pool's options (size, timeouts) chosen by the caller.
    ///
    /// # Errors
    /// As [`Self::connect`].
    pub async fn connect_with(
        url: &str,
        schema: &str,
        pool: PgPoolOptions,
    ) -> Result<Self, PgSetupError> {
        if !valid_schema(schema) {
            return Err(PgSetupError::InvalidSchema(schema.to_owned()));
        }
        let options = PgConnectOptions::from_str(url)
            .map_err(PgSetupError::Connect)?
            .options([("search_path", schema)])
            .application_name(&format!("agent-pg/{schema}"));
        let pool = pool
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone())
            .await
            .map_err(PgSetupError::Connect)?;
        Ok(Self {
            group: Arc::new(GroupCommit::new(
                pool.clone(),
                options.clone(),
                COMMITS_IN_FLIGHT,
                COMMITS_PER_STATEMENT,
            )),
            options,
            pool,
            schema: schema.to_owned(),
            channel: format!("agent_work_{schema}"),
            heads: HeadCache::default(),
            work: Arc::new(Notify::new()),
            listener: Mutex::new(None),
        })
    }

    /// Create the schema if needed and apply the embedded migrations (each in one
    /// transaction; concurrent callers serialize on an advisory lock). Idempotent.
    ///
    /// # Errors
    /// [`PgSetupError::Migrate`] when a migration fails or an applied one was changed.
    pub async fn migrate(&self) -> Result<(), PgSetupError> {
        let mut migrator = sqlx::migrate!("./migrations");
        let quoted = format!("\"{}\"", self.schema);
        migrator.create_schema(quoted.clone());
        migrator.dangerous_set_table_name(format!("{quoted}._sqlx_migrations"));
        migrator.run(&self.pool).await?;
        Ok(())
    }

    /// Drop the store's schema and everything in it (tests, throwaway environments).
    ///
    /// # Errors
    /// [`PgSetupError::Database`] when the statement fails.
    pub async fn drop_schema(&self) -> Result<(), PgSetupError> {
        sqlx::query(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            self.schema
        )))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Set how step commits share statements (see "Group commit" in the crate docs): at
    /// most `in_flight` commit statements at once (at least 1), each carrying at most
    /// `per_statement` commits (at least 1). `per_statement = 1` turns grouping off: every
    /// commit is a statement of its own, queued while `in_flight` are running.
    #[must_use]
    pub fn with_group_commit(mut self, in_flight: usize, per_statement: usize) -> Self {
        self.group = Arc::new(GroupCommit::new(
            self.pool.clone(),
            self.options.clone(),
            in_flight,
            per_statement,
        ));
        self
    }

    /// How many commits went to the database in how many statements, since the store
    /// was opened.
    #[must_use]
    pub fn group_commit_stats(&self) -> GroupCommitStats {
        self.group.stats()
    }

    /// The connection pool, for callers that add their own tables or measure (benchmarks).
    #[must_use]
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema holding the store's tables.
    #[must_use]
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The `NOTIFY` channel on which the store announces new work.
    #[must_use]
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Start the task that listens on the store's channel, unless it runs.
    pub(crate) fn ensure_listener(&self) {
        let mut slot = self.listener.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let pool = self.pool.clone();
        let channel = self.channel.clone();
        let work = Arc::clone(&self.work);
        *slot = Some(tokio::spawn(async move {
            loop {
                let mut listener = match PgListener::connect_with(&pool).await {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(error = %e, "LISTEN connection failed; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                if let Err(e) = listener.listen(&channel).await {
                    tracing::warn!(error = %e, "LISTEN failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                // `recv` reconnects by itself after a dropped connection; wake everyone
                // then too, since notifications may have been missed meanwhile.
                loop {
                    match listener.recv().await {
                        Ok(_) => work.notify_waiters(),
                        Err(e) => {
                            tracing::warn!(error = %e, "LISTEN connection lost");
                            work.notify_waiters();
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            break;
                        }
                    }
                }
            }
        }));
    }
}

/// Map a driver error: connection-level failures are transient ([`StoreError::Unavailable`]).
// By value: it is passed to `map_err` as a function.
#[allow(clippy::needless_pass_by_value)]
pub(crate) fn db_err(e: sqlx::Error) -> StoreError {
    let transient = match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| {
            c.starts_with("08")
                || c.starts_with("57P")
                || c.starts_with("53")
                || c == "40001"
                || c == "40P01"
                || c == "25006"
        }),
        _ => false,
    };
    if transient {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Backend(e.to_string())
    }
}
