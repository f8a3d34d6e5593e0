//! The fake external service the shop's tools act on, recorded in PostgreSQL.
//!
//! Three tables in the test's schema, shared by every worker process:
//!
//! - `e2e_effects`: one row per applied effect, keyed by idempotency key (the service
//!   honours keys: a repeated key increments `executions` and applies nothing);
//! - `e2e_calls`: one row per tool execution (reads included), with the worker and the
//!   worker's clock when the execution started;
//! - `e2e_llm_calls`: one row per question the router answered.
//!
//! The recording is the test's instrument, not the system under test, so its writes retry
//! until they land (PostgreSQL restarts) and are idempotent (a client-chosen id), so a lost
//! acknowledgement never records one execution twice.

use std::time::Duration;

use rand::Rng;
use sqlx::PgPool;

/// The harness's tables (created in the test's schema after the store's migrations).
pub const SCHEMA_SQL: &str = "
CREATE TABLE IF NOT EXISTS e2e_effects (
    key          text        PRIMARY KEY,
    tool         text        NOT NULL,
    run_id       text        NOT NULL,
    target       text        NOT NULL,
    executions   integer     NOT NULL DEFAULT 1,
    first_worker text        NOT NULL,
    applied_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS e2e_calls (
    id         text    PRIMARY KEY,
    run_id     text    NOT NULL,
    version    bigint  NOT NULL,
    seq        integer NOT NULL,
    tool       text    NOT NULL,
    key        text,
    worker     text    NOT NULL,
    started_ms bigint  NOT NULL,
    finished_ms bigint
);
CREATE INDEX IF NOT EXISTS e2e_calls_step ON e2e_calls (run_id, version);
CREATE TABLE IF NOT EXISTS e2e_llm_calls (
    id       text    PRIMARY KEY,
    run_id   text    NOT NULL,
    question integer NOT NULL,
    worker   text    NOT NULL,
    at_ms    bigint  NOT NULL
);
";

/// Latency range in milliseconds, inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Latency {
    /// Shortest.
    pub min_ms: u64,
    /// Longest.
    pub max_ms: u64,
}

impl Latency {
    /// `min..=max` milliseconds.
    #[must_use]
    pub const fn ms(min_ms: u64, max_ms: u64) -> Self {
        Self { min_ms, max_ms }
    }

    /// Parse `MIN:MAX` (or `MS`).
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s.split_once(':') {
            Some((a, b)) => Some(Self::ms(a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|v| Self::ms(v, v)),
        }
    }

    /// Sleep a random time in the range.
    pub async fn sleep(self) {
        let ms = if self.max_ms > self.min_ms {
            rand::rng().random_range(self.min_ms..=self.max_ms)
        } else {
            self.min_ms
        };
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    }
}

/// The service, as one worker sees it.
#[derive(Debug, Clone)]
pub struct Service {
    pool: PgPool,
    /// The worker (incarnation) executing the calls.
    pub worker: String,
    /// Time between a call's start and its effect.
    pub tool_latency: Latency,
    /// Time the router takes to answer.
    pub llm_latency: Latency,
}

/// One tool execution, as the service records it.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    /// The run.
    pub run_id: &'a str,
    /// The state version of the step.
    pub version: u64,
    /// The call's index in the step.
    pub seq: u32,
    /// The tool.
    pub tool: &'a str,
    /// The idempotency key (effects only).
    pub key: Option<&'a str>,
}

impl Service {
    /// The service over `pool` (whose `search_path` is the test's schema).
    #[must_use]
    pub fn new(pool: PgPool, worker: &str, tool_latency: Latency, llm_latency: Latency) -> Self {
        Self {
            pool,
            worker: worker.to_owned(),
            tool_latency,
            llm_latency,
        }
    }

    /// The pool.
    #[must_use]
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Run `f` until it succeeds (the instrument must not lose a record to a restart).
    async fn retry<T, F, Fut>(&self, what: &str, mut f: F) -> Result<T, String>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
    {
        let deadline = std::time::Instant::now() + Duration::from_mins(1);
        let mut wait = Duration::from_millis(20);
        loop {
            match f().await {
                Ok(v) => return Ok(v),
                Err(e) if std::time::Instant::now() < deadline => {
                    tracing::debug!(error = %e, what, "service write failed; retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_millis(500));
                }
                Err(e) => return Err(format!("{what}: {e}")),
            }
        }
    }

    /// Record that a tool execution starts (the worker's clock, before any await); returns
    /// the execution's id for [`Self::finish_call`].
    ///
    /// # Errors
    /// The database stayed unreachable for a minute.
    pub async fn record_call(&self, call: &Call<'_>) -> Result<String, String> {
        let started = crate::now_ms();
        let id = uuid::Uuid::new_v4().simple().to_string();
        self.retry("record call", || {
            sqlx::query(
                "INSERT INTO e2e_calls (id, run_id, version, seq, tool, key, worker, started_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING",
            )
            .bind(&id)
            .bind(call.run_id)
            .bind(i64::try_from(call.version).unwrap_or(i64::MAX))
            .bind(i32::try_from(call.seq).unwrap_or(i32::MAX))
            .bind(call.tool)
            .bind(call.key)
            .bind(&self.worker)
            .bind(started)
            .execute(&self.pool)
        })
        .await?;
        Ok(id)
    }

    /// Record that execution `id` finished (the worker's clock).
    ///
    /// # Errors
    /// The database stayed unreachable for a minute.
    pub async fn finish_call(&self, id: &str) -> Result<(), String> {
        let finished = crate::now_ms();
        self.retry("finish call", || {
            sqlx::query("UPDATE e2e_calls SET finished_ms = $2 WHERE id = $1")
                .bind(id)
                .bind(finished)
                .execute(&self.pool)
        })
        .await
        .map(drop)
    }

    /// Apply an effect once per key: a repeated key only counts the execution.
    ///
    /// # Errors
    /// The database stayed unreachable for a minute.
    pub async fn apply(
        &self,
        key: &str,
        tool: &str,
        run_id: &str,
        target: &str,
    ) -> Result<(), String> {
        self.retry("apply effect", || {
            sqlx::query(
                "INSERT INTO e2e_effects (key, tool, run_id, target, first_worker) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (key) DO UPDATE SET executions = e2e_effects.executions + 1",
            )
            .bind(key)
            .bind(tool)
            .bind(run_id)
            .bind(target)
            .bind(&self.worker)
            .execute(&self.pool)
        })
        .await
        .map(drop)
    }

    /// Record that the router answered `question` of `run_id`.
    ///
    /// # Errors
    /// The database stayed unreachable for a minute.
    pub async fn record_llm_call(&self, run_id: &str, question: usize) -> Result<(), String> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let at = crate::now_ms();
        self.retry("record llm call", || {
            sqlx::query(
                "INSERT INTO e2e_llm_calls (id, run_id, question, worker, at_ms) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
            )
            .bind(&id)
            .bind(run_id)
            .bind(i32::try_from(question).unwrap_or(i32::MAX))
            .bind(&self.worker)
            .bind(at)
            .execute(&self.pool)
        })
        .await
        .map(drop)
    }
}
