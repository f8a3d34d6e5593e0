//! Setting a store up: connecting into a schema, checking or migrating it, the `LISTEN` task that wakes
//! idle workers, and how driver errors map to store errors.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_core::store::StoreError;
use agent_sql::heads::HeadCache;
use agent_sql::migrations::{Applied, applied_sql};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection};
use tokio::sync::Notify;

use crate::error::{db_err, describe};
use crate::group_commit::{GroupCommitStats, HeldConnections, PgGroupCommit, group_commit};
use crate::pooler::{Connector, Db, Pooler, Settings, Wakeups};
use crate::{COMMITS_IN_FLIGHT, COMMITS_PER_STATEMENT, PgStore};

/// Errors of setting a [`PgStore`] up (connecting, checking the schema, migrating). The
/// database is named as `host:port/dbname` (never with the password).
#[derive(Debug, thiserror::Error)]
pub enum PgSetupError {
    /// The schema name is not a plain identifier.
    #[error(
        "invalid schema name `{0}`: use letters, digits and `_`, starting with a letter or `_`"
    )]
    InvalidSchema(String),
    /// The URL does not parse.
    #[error("invalid PostgreSQL URL: {0}")]
    InvalidUrl(String),
    /// Nothing listens at the server's address.
    #[error("connection refused at {address}: is PostgreSQL running there?")]
    Refused {
        /// `host:port`.
        address: String,
    },
    /// The server refused the user or the password.
    #[error("authentication failed for PostgreSQL database {database}: {message}")]
    Auth {
        /// `host:port/dbname`.
        database: String,
        /// The server's message.
        message: String,
    },
    /// Connecting failed otherwise (unknown host, no such database, TLS, no answer).
    #[error("cannot connect to PostgreSQL database {database}: {message}")]
    Connect {
        /// `host:port/dbname`.
        database: String,
        /// Why.
        message: String,
    },
    /// [`PgStore::open_existing`]: the schema does not exist.
    #[error("no schema `{schema}` in PostgreSQL database {database}{}", stores_note(.stores))]
    NoSchema {
        /// `host:port/dbname`.
        database: String,
        /// The schema tried.
        schema: String,
        /// The schemas of that database that hold an agent store.
        stores: Vec<String>,
    },
    /// [`PgStore::open_existing`]: the schema exists but holds no agent store.
    #[error(
        "schema `{schema}` of PostgreSQL database {database} holds no agent store \
         (no `_sqlx_migrations` and `runs` tables)"
    )]
    NotAStore {
        /// `host:port/dbname`.
        database: String,
        /// The schema tried.
        schema: String,
    },
    /// [`PgStore::open_existing`]: the store's migrations are not this binary's.
    #[error("the agent store in schema `{schema}` of PostgreSQL database {database}: {problem}")]
    Level {
        /// `host:port/dbname`.
        database: String,
        /// The schema tried.
        schema: String,
        /// How its migrations differ from this binary's, and what to do.
        problem: String,
    },
    /// The URL asks for `LISTEN` through a transaction pooler (`pooler=transaction`
    /// without `direct=` or `wake=poll`), where a notification would reach whichever
    /// client's transaction last ran on that server connection.
    #[error(
        "idle workers cannot `LISTEN` through the transaction pooler at {database} \
         (`pooler=transaction`): add PostgreSQL's own address for `LISTEN` \
         (`direct=HOST:PORT`), or poll instead (`wake=poll`, with `poll_ms=` for the interval)"
    )]
    ListenThroughPooler {
        /// `host:port/dbname` of the pooler.
        database: String,
    },
    /// A migration failed.
    #[error("migration failed: {}", describe_migrate(.0))]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Any other database error.
    #[error("database error: {}", describe(.0))]
    Database(#[from] sqlx::Error),
}

fn stores_note(stores: &[String]) -> String {
    if stores.is_empty() {
        " (no schema there holds an agent store; a worker creates one when it opens the database)"
            .to_owned()
    } else {
        format!(
            " (schemas there holding an agent store: {})",
            stores.join(", ")
        )
    }
}

fn describe_migrate(e: &sqlx::migrate::MigrateError) -> String {
    use sqlx::migrate::MigrateError;
    match e {
        MigrateError::Execute(e) => describe(e),
        MigrateError::ExecuteMigration(e, version) => {
            format!("migration {version}: {}", describe(e))
        }
        other => other.to_string(),
    }
}

/// `host:port/dbname` of `options`, for messages.
fn database_of(options: &PgConnectOptions) -> String {
    let host = options.get_socket().map_or_else(
        || options.get_host().to_owned(),
        |dir| dir.display().to_string(),
    );
    let db = options
        .get_database()
        .unwrap_or_else(|| options.get_username());
    format!("{host}:{}/{db}", options.get_port())
}

/// What connecting with `options` failing with `e` means, in the reader's terms.
fn connect_error(e: &sqlx::Error, options: &PgConnectOptions) -> PgSetupError {
    let database = database_of(options);
    match e {
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            PgSetupError::Refused {
                address: database
                    .rsplit_once('/')
                    .map_or(database.clone(), |(address, _)| address.to_owned()),
            }
        }
        // invalid_authorization_specification, invalid_password
        sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("28")) => {
            PgSetupError::Auth {
                database,
                message: describe(e),
            }
        }
        // PgBouncer refuses the `search_path` start-up option the store sends directly.
        sqlx::Error::Database(db) if db.message().contains("unsupported startup parameter") => {
            PgSetupError::Connect {
                database,
                message: format!(
                    "{} (a connection pooler such as PgBouncer answers there: add \
                     `pooler=transaction` or `pooler=session` to the URL, as its `pool_mode`)",
                    describe(e)
                ),
            }
        }
        _ => PgSetupError::Connect {
            database,
            message: describe(e),
        },
    }
}

/// Open a connection with `connector`, reporting failure as [`connect_error`] says (and no
/// answer within [`CONNECT_TIMEOUT`] as such).
async fn first_connection(connector: &Connector) -> Result<PgConnection, PgSetupError> {
    let options = &connector.options;
    tokio::time::timeout(CONNECT_TIMEOUT, connector.connect())
        .await
        .map_err(|_| PgSetupError::Connect {
            database: database_of(options),
            message: format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
        })?
        .map_err(|e| connect_error(&e, options))
}

/// How long opening the first connection may take before the server counts as not
/// answering (a host that drops packets instead of refusing them).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A pooled connection idle at least this long is pinged before it is handed out (the
/// server may have restarted or dropped it meanwhile); one in use more often is not.
const POOL_CHECK_AFTER_IDLE: Duration = Duration::from_secs(2);

/// The pool's check of a connection it hands out, in place of sqlx's ping on every
/// acquire (`test_before_acquire`), which made every pool statement two round trips
/// before its own: a connection idle for [`POOL_CHECK_AFTER_IDLE`] is pinged (a failed
/// ping closes it and the pool hands out another), a busy one is used as it is, as the
/// commit connections are. A connection that broke in between fails its statement, which
/// the caller sees as [`StoreError::Unavailable`], as when the server goes away mid-query.
#[expect(
    clippy::needless_pass_by_value,
    reason = "the signature of sqlx's `before_acquire` callback"
)]
fn ping_if_idle(
    conn: &mut PgConnection,
    meta: sqlx::pool::PoolConnectionMetadata,
) -> std::pin::Pin<Box<dyn Future<Output = Result<bool, sqlx::Error>> + Send + '_>> {
    Box::pin(async move {
        if meta.idle_for >= POOL_CHECK_AFTER_IDLE {
            conn.ping().await?;
        }
        Ok(true)
    })
}

fn migrator() -> Migrator {
    sqlx::migrate!("./migrations")
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
    /// A worker calls this and then [`Self::migrate`]; a tool that only reads or operates an
    /// existing store calls [`Self::open_existing`], which writes nothing.
    ///
    /// The first connection is opened at once and its failure reported as it is
    /// ([`PgSetupError::Refused`] when nothing listens): a server that is not there at
    /// start-up is a configuration to fix, not a wait. Once the store is open, the pool
    /// retries refused connections for up to 10 s before a query fails with
    /// [`StoreError::Unavailable`], since a server that was there (restarting, failing
    /// over) is expected to come back.
    ///
    /// Behind a connection pooler, the URL says which (`pooler=session` or
    /// `pooler=transaction`) and, past a transaction pooler, how idle workers wake:
    /// `direct=HOST:PORT` (PostgreSQL's own address, for `LISTEN`; checked here like the
    /// first connection) or `wake=poll` (with `poll_ms=`). The store takes these out of the
    /// URL; see [`Pooler`] and `docs/poolers.md`.
    ///
    /// # Errors
    /// [`PgSetupError::InvalidSchema`] for a schema name that is not a plain identifier;
    /// [`PgSetupError::InvalidUrl`] for a URL, or a pooler setting, that does not parse;
    /// [`PgSetupError::ListenThroughPooler`] for `pooler=transaction` with neither
    /// `direct=` nor `wake=poll`; [`PgSetupError::Refused`], [`PgSetupError::Auth`] or
    /// [`PgSetupError::Connect`] when the first connection (or the one to the direct
    /// address) fails.
    pub async fn connect(url: &str, schema: &str) -> Result<Self, PgSetupError> {
        Self::connect_with(url, schema, PgPoolOptions::new().max_connections(16)).await
    }

    /// [`Self::connect`] with the pool's options (size, timeouts) chosen by the caller.
    /// The store replaces the options' check of a connection on acquire: a connection idle
    /// for 2 s is pinged before use, a busy one is not (sqlx's `test_before_acquire`,
    /// which pings every time, is turned off, and a `before_acquire` of the caller's is
    /// replaced).
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
        let (url, settings) = Settings::take(url)?;
        let options = settings.options(crate::pooler::parse(&url)?, schema);
        if settings.pooler == Pooler::Transaction
            && settings.direct.is_none()
            && settings.poll.is_none()
        {
            return Err(PgSetupError::ListenThroughPooler {
                database: database_of(&options),
            });
        }
        let after_connect = settings.after_connect(schema);
        let connector = Connector::new(options.clone(), after_connect.clone());
        // One connection of our own first: the pool retries a refused connection until its
        // acquire timeout and then reports only "pool timed out", hiding the cause.
        let first = first_connection(&connector).await?;
        let set_up = |pool: PgPoolOptions| match after_connect.clone() {
            None => pool,
            Some(sql) => pool.after_connect(move |conn, _| {
                let sql = AssertSqlSafe(sql.to_string());
                Box::pin(async move { sqlx::raw_sql(sql).execute(conn).await.map(|_| ()) })
            }),
        };
        let pool = set_up(pool)
            .acquire_timeout(Duration::from_secs(10))
            .test_before_acquire(false)
            .before_acquire(ping_if_idle)
            .connect_lazy_with(options.clone());
        let readers = set_up(PgPoolOptions::new())
            .max_connections(crate::EVENT_READERS)
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(options.clone());
        let wakeups = match (settings.poll, settings.direct_options(&options)) {
            (Some(every), _) => Wakeups::Poll(every),
            // Checked now, as the pooler was: an address that cannot work is a
            // configuration to fix, not something to retry every second.
            (None, Some(direct)) => {
                drop(first_connection(&Connector::new(direct.clone(), None)).await?);
                Wakeups::Listen(
                    PgPoolOptions::new()
                        .max_connections(2)
                        .min_connections(0)
                        .acquire_timeout(Duration::from_secs(10))
                        .connect_lazy_with(direct),
                )
            }
            (None, None) => Wakeups::Listen(pool.clone()),
        };
        let each = settings.each_transaction(schema);
        let pool = Db::new(pool, each.clone());
        let readers = Db::new(readers, each);
        // Commits, a worker's claims and wake-ups share the connections held outside the
        // pool: a wake-up takes one the commits left idle instead of opening its own while
        // the server is busy.
        let held = Arc::new(HeldConnections::new(connector));
        // The first connection proved the server is there; it serves the first statements.
        held.adopt(first);
        let group = group_commit(
            pool.clone(),
            Arc::clone(&held),
            COMMITS_IN_FLIGHT,
            COMMITS_PER_STATEMENT,
        );
        let waker = crate::wake::WorkWaker::new(held);
        Ok(Self {
            readers,
            group: Arc::new(group),
            options,
            pooler: settings.pooler,
            wakeups,
            pool,
            schema: schema.to_owned(),
            channel: format!("agent_work_{schema}"),
            heads: HeadCache::default(),
            work: Arc::new(Notify::new()),
            notices: Arc::new(AtomicU64::new(0)),
            notices_seen: AtomicU64::new(0),
            waker,
            listener: Mutex::new(None),
            events: crate::events::EventNotices::new(schema),
        })
    }

    /// Connect to the store in `schema` that a worker created, without creating or
    /// changing anything: [`Self::connect`], then [`Self::check_schema`].
    ///
    /// # Errors
    /// As [`Self::connect`] and [`Self::check_schema`].
    pub async fn open_existing(url: &str, schema: &str) -> Result<Self, PgSetupError> {
        let store = Self::connect(url, schema).await?;
        store.check_schema().await?;
        Ok(store)
    }

    /// Check, reading only, that the store's schema exists and holds exactly the
    /// migrations of this binary (its `_sqlx_migrations` table).
    ///
    /// # Errors
    /// [`PgSetupError::NoSchema`] (listing the schemas of the database that hold a store),
    /// [`PgSetupError::NotAStore`] for a schema without the store's tables,
    /// [`PgSetupError::Level`] for a store behind or ahead of this binary, or half
    /// migrated; [`PgSetupError::Database`] when a query fails.
    pub async fn check_schema(&self) -> Result<(), PgSetupError> {
        let schema_exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                .bind(&self.schema)
                .fetch_one(&self.pool)
                .await?;
        if !schema_exists {
            let stores: Vec<String> = sqlx::query_scalar(
                "SELECT m.table_schema::text FROM information_schema.tables m \
                 JOIN information_schema.tables r \
                   ON r.table_schema = m.table_schema AND r.table_name = 'runs' \
                 WHERE m.table_name = '_sqlx_migrations' ORDER BY 1",
            )
            .fetch_all(&self.pool)
            .await?;
            return Err(PgSetupError::NoSchema {
                database: database_of(&self.options),
                schema: self.schema.clone(),
                stores,
            });
        }
        let is_store: bool = sqlx::query_scalar(
            "SELECT to_regclass(format('%I._sqlx_migrations', $1::text)) IS NOT NULL \
                AND to_regclass(format('%I.runs', $1::text)) IS NOT NULL",
        )
        .bind(&self.schema)
        .fetch_one(&self.pool)
        .await?;
        if !is_store {
            return Err(PgSetupError::NotAStore {
                database: database_of(&self.options),
                schema: self.schema.clone(),
            });
        }
        let applied: Vec<Applied> = sqlx::query_as(AssertSqlSafe(applied_sql(&format!(
            "\"{}\"._sqlx_migrations",
            self.schema
        ))))
        .fetch_all(&self.pool)
        .await?;
        match agent_sql::migrations::compare(&migrator(), &applied) {
            None => Ok(()),
            Some(mismatch) => Err(PgSetupError::Level {
                database: database_of(&self.options),
                schema: self.schema.clone(),
                problem: mismatch.to_string(),
            }),
        }
    }

    /// `host:port/dbname` of the store's database, for messages (never the password).
    #[must_use]
    pub fn database(&self) -> String {
        database_of(&self.options)
    }

    /// Create the schema if needed and apply the embedded migrations, all in one
    /// transaction: a start that fails writes nothing (no schema, no migrations table, no
    /// half of the migrations), whatever it failed on. Concurrent callers on one schema
    /// serialize on an advisory lock held by that transaction. Idempotent.
    ///
    /// # Errors
    /// [`PgSetupError::Migrate`] when a migration fails or an applied one was changed;
    /// [`PgSetupError::Database`] when the schema cannot be created or locked.
    pub async fn migrate(&self) -> Result<(), PgSetupError> {
        // A store already at this binary's migrations (every start after the first): one
        // read says so, without the schema creation, lock and listing of the migrator's
        // run (several round trips at every process start). Anything else, a missing
        // table included, goes through the migrator, which applies or reports.
        let applied: Result<Vec<Applied>, _> = sqlx::query_as(AssertSqlSafe(applied_sql(
            &format!("\"{}\"._sqlx_migrations", self.schema),
        )))
        .fetch_all(&self.pool)
        .await;
        if let Ok(applied) = applied
            && agent_sql::migrations::compare(&migrator(), &applied).is_none()
        {
            return Ok(());
        }
        let mut migrator = migrator();
        let quoted = format!("\"{}\"", self.schema);
        migrator.dangerous_set_table_name(format!("{quoted}._sqlx_migrations"));
        // The transaction's own lock instead of the migrator's session lock, which a
        // failed run would leave held on a pooled connection.
        migrator.set_locking(false);
        // Through a transaction pooler too: a transaction keeps its server connection, and
        // the lock is the transaction's.
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('agent-pg/migrate/' || $1))")
            .bind(&self.schema)
            .execute(&mut *tx)
            .await?;
        // Created only when missing: an existing schema needs no right to create schemas.
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                .bind(&self.schema)
                .fetch_one(&mut *tx)
                .await?;
        if !exists {
            sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {quoted}")))
                .execute(&mut *tx)
                .await?;
        }
        // The migrator's own run, on the transaction's connection: each migration's
        // transaction becomes a savepoint of this one, which commits them all or none.
        migrator.run_direct(None, &mut *tx, false).await?;
        tx.commit().await?;
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
        self.group = Arc::new(group_commit(
            self.pool.clone(),
            self.group.connections(),
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

    /// The plan PostgreSQL chooses now for [`RunStore::claim_next`](agent_core::store::Store)
    /// of these agents, `limit` at a time (`EXPLAIN`, nothing executed): for an operator
    /// or a benchmark checking that claims go through indexes however many runs wait.
    ///
    /// # Errors
    /// [`StoreError`] when the statement fails.
    pub async fn explain_claim_next(
        &self,
        agents: &[String],
        limit: usize,
    ) -> Result<String, StoreError> {
        let explain = format!("EXPLAIN (COSTS OFF) {}", crate::sql::CLAIM_NEXT.as_str());
        let rows: Vec<String> = sqlx::query_scalar(AssertSqlSafe(explain))
            .bind(agents)
            .bind("explain")
            .bind(0_i64)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(rows.join("\n"))
    }

    /// The connection pool, for callers that add their own tables or measure (benchmarks).
    ///
    /// Behind a transaction pooler (`pooler=transaction`), a statement on it runs without
    /// the store's `search_path` (name the schema's tables with [`Self::schema`]) and
    /// must be in a transaction (sqlx prepares it in one exchange and executes it in the
    /// next, which only a transaction keeps on one server connection).
    #[must_use]
    pub fn pool(&self) -> &PgPool {
        self.pool.raw()
    }

    /// The connection pooler the store was told is in front of PostgreSQL (`pooler=` in the
    /// URL).
    #[must_use]
    pub fn pooler(&self) -> Pooler {
        self.pooler
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
    /// Polling: never (idle workers claim again every interval, see `wait_for_work`).
    pub(crate) fn ensure_listener(&self) {
        let Wakeups::Listen(pool) = &self.wakeups else {
            return;
        };
        let mut slot = self.listener.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let pool = pool.clone();
        let channel = self.channel.clone();
        let work = Arc::clone(&self.work);
        let notices = Arc::clone(&self.notices);
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
                        Ok(_) => {
                            notices.fetch_add(1, Ordering::Relaxed);
                            work.notify_waiters();
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "LISTEN connection lost");
                            notices.fetch_add(1, Ordering::Relaxed);
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
