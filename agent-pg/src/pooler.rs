//! Running behind a connection pooler such as PgBouncer: the settings read from the URL,
//! and the executor every statement of the store goes through.
//!
//! Directly on PostgreSQL (the default), the store relies on the state of its sessions:
//! the schema is the connection's `search_path` (a start-up option), statements are
//! prepared once per connection and cached by sqlx, idle workers `LISTEN`.
//!
//! - A session pooler (`pooler=session`) hands each client one server connection for as
//!   long as it is connected, so all of that holds, but PgBouncer refuses start-up options
//!   it does not know: the `search_path` is set with `SET` after connecting instead.
//! - A transaction pooler (`pooler=transaction`) hands a client a server connection for one
//!   transaction only, so no state may outlive a transaction. Every statement then runs in
//!   a transaction of its own that first sets the `search_path` with `SET LOCAL` and drops
//!   the prepared statements left on that server connection (`DEALLOCATE ALL`: sqlx
//!   prepares a statement in one exchange and executes it in the next, which only a
//!   transaction keeps on one server connection, and names it, which may collide with a
//!   name another client left there). sqlx's statement cache is off (PgBouncer 1.18, in
//!   Debian 12, does not track prepared statements; 1.21 can). Migrations and operator
//!   transactions were already transactions with transaction-level advisory locks; they
//!   get the same first statement. `LISTEN` cannot work through it, so wake-ups come from
//!   a direct address (`direct=HOST:PORT`) or by polling (`wake=poll`); the store refuses
//!   to open with neither.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgQueryResult, PgRow, PgStatement};
use sqlx::postgres::{PgTypeInfo, Postgres};
use sqlx::{AssertSqlSafe, Connection, Either, Execute, Executor, SqlStr, Transaction};

use crate::connect::PgSetupError;

/// Which connection pooler sits between the store and PostgreSQL (`pooler=` in the URL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pooler {
    /// None: the store talks to PostgreSQL itself.
    #[default]
    None,
    /// A pooler in session mode (`pooler=session`): one server connection per client
    /// connection, for as long as it lasts.
    Session,
    /// A pooler in transaction mode (`pooler=transaction`): a server connection per
    /// transaction.
    Transaction,
}

/// How the store wakes idle workers and event followers.
#[derive(Clone, Debug)]
pub(crate) enum Wakeups {
    /// `LISTEN` on connections of this pool (the store's own, or one to the direct address).
    Listen(PgPool),
    /// No `LISTEN`: idle workers claim again at least this often, followers poll.
    Poll(Duration),
}

/// How often idle workers claim again with `wake=poll` when `poll_ms` is not given.
pub(crate) const DEFAULT_POLL: Duration = Duration::from_secs(1);

/// The store's settings in its URL, which sqlx does not know and which are taken out of
/// the URL before sqlx reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) pooler: Pooler,
    /// `direct=HOST:PORT`: PostgreSQL itself, for `LISTEN` (same user, password, database).
    pub(crate) direct: Option<(String, u16)>,
    /// `wake=poll` (with `poll_ms=`): poll instead of `LISTEN`.
    pub(crate) poll: Option<Duration>,
}

impl Settings {
    /// `url` without the store's parameters, and what they say.
    ///
    /// # Errors
    /// [`PgSetupError::InvalidUrl`] for a value it does not know, a parameter given twice, or
    /// `direct` with anything but `pooler=transaction` (the others `LISTEN` where they are).
    pub(crate) fn take(url: &str) -> Result<(String, Self), PgSetupError> {
        let bad = |m: String| PgSetupError::InvalidUrl(m);
        let Some((base, query)) = url.split_once('?') else {
            return Ok((url.to_owned(), Self::default()));
        };
        let (query, fragment) = query
            .split_once('#')
            .map_or((query, None), |(q, f)| (q, Some(f)));
        let mut settings = Self::default();
        let (mut pooler, mut direct, mut wake, mut poll_ms) = (None, None, None, None);
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let slot = match key {
                "pooler" => &mut pooler,
                "direct" => &mut direct,
                "wake" => &mut wake,
                "poll_ms" => &mut poll_ms,
                _ => {
                    kept.push(pair);
                    continue;
                }
            };
            if slot.replace(value).is_some() {
                return Err(bad(format!("`{key}` is given twice")));
            }
        }
        settings.pooler = match pooler {
            None | Some("none") => Pooler::None,
            Some("session") => Pooler::Session,
            Some("transaction") => Pooler::Transaction,
            Some(other) => {
                return Err(bad(format!(
                    "unknown `pooler={other}`: use `pooler=session` or `pooler=transaction` \
                     (PgBouncer's `pool_mode`), or leave it out when there is no pooler"
                )));
            }
        };
        if let Some(direct) = direct {
            let parsed = direct
                .rsplit_once(':')
                .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
                .filter(|(host, _)| !host.is_empty());
            let Some((host, port)) = parsed else {
                return Err(bad(format!(
                    "`direct={direct}`: give PostgreSQL's own address as HOST:PORT"
                )));
            };
            if settings.pooler != Pooler::Transaction {
                return Err(bad(
                    "`direct=` is the address for `LISTEN` past a transaction pooler; \
                     it needs `pooler=transaction`"
                        .to_owned(),
                ));
            }
            settings.direct = Some((host.trim_matches(['[', ']']).to_owned(), port));
        }
        let interval = match poll_ms {
            None => DEFAULT_POLL,
            Some(ms) => match ms.parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => {
                    return Err(bad(format!(
                        "`poll_ms={ms}`: give the polling interval in milliseconds (at least 1)"
                    )));
                }
            },
        };
        settings.poll = match wake {
            None | Some("listen") if poll_ms.is_some() => {
                return Err(bad("`poll_ms=` needs `wake=poll`".to_owned()));
            }
            None | Some("listen") => None,
            Some("poll") => Some(interval),
            Some(other) => {
                return Err(bad(format!(
                    "unknown `wake={other}`: use `wake=listen` or `wake=poll`"
                )));
            }
        };
        if settings.direct.is_some() && settings.poll.is_some() {
            return Err(bad(
                "`direct=` is for `LISTEN`, and `wake=poll` does not listen: give one".to_owned(),
            ));
        }
        let mut url = base.to_owned();
        if !kept.is_empty() {
            url = format!("{url}?{}", kept.join("&"));
        }
        if let Some(fragment) = fragment {
            url = format!("{url}#{fragment}");
        }
        Ok((url, settings))
    }

    /// The connect options for `schema` through this pooler, from the URL's.
    pub(crate) fn options(&self, url: PgConnectOptions, schema: &str) -> PgConnectOptions {
        let url = url.application_name(&format!("agent-pg/{schema}"));
        match self.pooler {
            // One round trip less than a `SET` after connecting.
            Pooler::None => url.options([("search_path", schema)]),
            // PgBouncer refuses start-up parameters it does not track (`options`, and
            // `extra_float_digits` unless told to ignore it; statements' values travel in
            // binary, where it makes no difference).
            Pooler::Session => url.extra_float_digits(None),
            // A cached statement would be executed on a server connection that never saw it.
            Pooler::Transaction => url.extra_float_digits(None).statement_cache_capacity(0),
        }
    }

    /// What a new connection runs before its first statement: the `search_path` on a
    /// session pooler, where it cannot be a start-up option.
    pub(crate) fn after_connect(&self, schema: &str) -> Option<Arc<str>> {
        (self.pooler == Pooler::Session)
            .then(|| Arc::from(format!("SET search_path TO \"{schema}\"").as_str()))
    }

    /// What every transaction runs first on a transaction pooler.
    pub(crate) fn each_transaction(&self, schema: &str) -> Option<Arc<str>> {
        (self.pooler == Pooler::Transaction).then(|| {
            Arc::from(format!("SET LOCAL search_path TO \"{schema}\"; DEALLOCATE ALL").as_str())
        })
    }

    /// The connect options of the direct address, from the store's.
    pub(crate) fn direct_options(&self, options: &PgConnectOptions) -> Option<PgConnectOptions> {
        let (host, port) = self.direct.as_ref()?;
        Some(options.clone().host(host).port(*port))
    }
}

/// Opens the store's connections outside its pools, set up as the pool's are.
#[derive(Clone, Debug)]
pub(crate) struct Connector {
    pub(crate) options: PgConnectOptions,
    after_connect: Option<Arc<str>>,
}

impl Connector {
    pub(crate) fn new(options: PgConnectOptions, after_connect: Option<Arc<str>>) -> Self {
        Self {
            options,
            after_connect,
        }
    }

    pub(crate) async fn connect(&self) -> Result<PgConnection, sqlx::Error> {
        let mut conn = PgConnection::connect_with(&self.options).await?;
        if let Some(sql) = &self.after_connect {
            sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
                .execute(&mut conn)
                .await?;
        }
        Ok(conn)
    }
}

/// A pool of the store, as an executor: each statement as it is, or, on a transaction
/// pooler, in a transaction of its own that begins with what the pooler cannot keep.
#[derive(Clone, Debug)]
pub(crate) struct Db {
    pool: PgPool,
    each: Option<Arc<str>>,
}

impl Db {
    /// `pool`, whose transactions begin with `each` (a transaction pooler's).
    pub(crate) fn new(pool: PgPool, each: Option<Arc<str>>) -> Self {
        Self { pool, each }
    }

    /// The pool itself: statements on it run bare (no `search_path` on a transaction
    /// pooler).
    pub(crate) fn raw(&self) -> &PgPool {
        &self.pool
    }

    /// A transaction on the pool, set up as the store's statements are.
    pub(crate) async fn begin(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        if let Some(each) = &self.each {
            sqlx::raw_sql(AssertSqlSafe(each.to_string()))
                .execute(&mut *tx)
                .await?;
        }
        Ok(tx)
    }

    /// `conn` (one of the store's held connections) as an executor like this one.
    pub(crate) fn on<'c>(&'c self, conn: &'c mut PgConnection) -> OnConn<'c> {
        OnConn {
            conn,
            each: self.each.as_deref(),
        }
    }
}

/// A held connection as an executor (see [`Db::on`]).
#[derive(Debug)]
pub(crate) struct OnConn<'c> {
    conn: &'c mut PgConnection,
    each: Option<&'c str>,
}

type Step = Either<PgQueryResult, PgRow>;

/// `query` in a transaction of its own on `conn`, beginning with `each`; its results once
/// it committed. The caller learns of a write only once it is committed, as it would
/// of a statement outside a transaction.
async fn in_transaction<'q, E>(
    conn: &mut PgConnection,
    each: &str,
    query: E,
) -> Result<Vec<Step>, sqlx::Error>
where
    E: 'q + Execute<'q, Postgres>,
{
    sqlx::raw_sql(AssertSqlSafe(format!("BEGIN; {each}")))
        .execute(&mut *conn)
        .await?;
    let result: Result<Vec<Step>, _> = conn.fetch_many(query).try_collect().await;
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    let ended = sqlx::raw_sql(end).execute(&mut *conn).await;
    match (result, ended) {
        (Ok(steps), Ok(_)) => Ok(steps),
        // A connection that cannot roll back is broken: its error, which tells the
        // caller not to keep it.
        (Err(e), Ok(_)) | (_, Err(e)) => Err(e),
    }
}

/// A pool connection inside [`in_transaction`]: closed, not given back, when the
/// statement's caller stops waiting, so that its transaction ends with the connection
/// instead of holding its locks until the connection's next statement.
struct Unfinished {
    conn: PoolConnection<Postgres>,
    done: bool,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.done {
            self.conn.close_on_drop();
        }
    }
}

fn steps_stream<'e>(
    steps: impl Future<Output = Result<Vec<Step>, sqlx::Error>> + Send + 'e,
) -> BoxStream<'e, Result<Step, sqlx::Error>> {
    stream::once(steps)
        .map_ok(|steps| stream::iter(steps.into_iter().map(Ok)))
        .try_flatten()
        .boxed()
}

fn first_row(
    steps: BoxStream<'_, Result<Step, sqlx::Error>>,
) -> BoxFuture<'_, Result<Option<PgRow>, sqlx::Error>> {
    Box::pin(async move {
        let steps: Vec<Step> = steps.try_collect().await?;
        Ok(steps.into_iter().find_map(Either::right))
    })
}

/// The executor methods that [`Db`] and [`OnConn`] share, `$inner` being what runs a
/// statement as it is (the pool or the connection): `fetch_optional` as `$inner` does
/// directly and through `fetch_many` behind a transaction pooler; preparing and describing
/// as `$inner` does (the store calls neither).
macro_rules! as_inner_otherwise {
    ($this:ident => $inner:ident) => {
        fn fetch_optional<'e, 'q: 'e, E>(
            $this,
            query: E,
        ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
        where
            'c: 'e,
            E: 'q + Execute<'q, Postgres>,
        {
            match &$this.each {
                None => $this.$inner.fetch_optional(query),
                Some(_) => first_row($this.fetch_many(query)),
            }
        }

        fn prepare_with<'e>(
            $this,
            sql: SqlStr,
            parameters: &'e [PgTypeInfo],
        ) -> BoxFuture<'e, Result<PgStatement, sqlx::Error>>
        where
            'c: 'e,
        {
            $this.$inner.prepare_with(sql, parameters)
        }

        fn describe<'e>(
            $this,
            sql: SqlStr,
        ) -> BoxFuture<'e, Result<sqlx::Describe<Postgres>, sqlx::Error>>
        where
            'c: 'e,
        {
            $this.$inner.describe(sql)
        }
    };
}

impl<'c> Executor<'c> for &'c Db {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Step, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let Some(each) = &self.each else {
            return self.pool.fetch_many(query);
        };
        steps_stream(async move {
            let mut conn = Unfinished {
                conn: self.pool.acquire().await?,
                done: false,
            };
            let steps = in_transaction(&mut conn.conn, each, query).await;
            // Finished, committed or rolled back: the connection goes back to the pool.
            conn.done = true;
            steps
        })
    }

    as_inner_otherwise!(self => pool);
}

impl<'c> Executor<'c> for OnConn<'c> {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Step, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.each {
            None => self.conn.fetch_many(query),
            // Cancelled, the held connection is dropped by its caller, not kept.
            Some(each) => steps_stream(in_transaction(self.conn, each, query)),
        }
    }

    as_inner_otherwise!(self => conn);
}

/// `PgConnectOptions` of `url`, as [`PgConnectOptions::from_str`].
pub(crate) fn parse(url: &str) -> Result<PgConnectOptions, PgSetupError> {
    PgConnectOptions::from_str(url).map_err(|e| PgSetupError::InvalidUrl(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Pooler, Settings};

    #[test]
    fn the_store_settings_leave_the_url_and_the_rest_stays() {
        let (url, s) = Settings::take(
            "postgres://u@h:6432/db?sslmode=disable&pooler=transaction&direct=db1:5432&application_name=x",
        )
        .unwrap();
        assert_eq!(
            url,
            "postgres://u@h:6432/db?sslmode=disable&application_name=x"
        );
        assert_eq!(s.pooler, Pooler::Transaction);
        assert_eq!(s.direct, Some(("db1".to_owned(), 5432)));
        assert_eq!(s.poll, None);
        let (url, s) =
            Settings::take("postgres://u@h/db?pooler=transaction&wake=poll&poll_ms=250").unwrap();
        assert_eq!(url, "postgres://u@h/db");
        assert_eq!(s.poll, Some(Duration::from_millis(250)));
        let (url, s) = Settings::take("postgres://u@h/db").unwrap();
        assert_eq!(
            (url.as_str(), s),
            ("postgres://u@h/db", Settings::default())
        );
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        for (url, says) in [
            (
                "postgres://h/d?pooler=statement",
                "unknown `pooler=statement`",
            ),
            (
                "postgres://h/d?direct=db1:5432",
                "needs `pooler=transaction`",
            ),
            ("postgres://h/d?pooler=transaction&direct=db1", "HOST:PORT"),
            ("postgres://h/d?wake=sometimes", "unknown `wake=sometimes`"),
            ("postgres://h/d?poll_ms=5", "needs `wake=poll`"),
            ("postgres://h/d?wake=poll&poll_ms=0", "at least 1"),
            (
                "postgres://h/d?pooler=session&pooler=session",
                "given twice",
            ),
            (
                "postgres://h/d?pooler=transaction&direct=db1:5432&wake=poll",
                "give one",
            ),
        ] {
            let e = Settings::take(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
        }
    }
}
