//! The harness: a SQLite store in a tempdir with runs of the conformance fixture agent,
//! driven by the real runner; the API served on a loopback port; a small SSE client.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agent_conformance::fixture::{self, Behaviour, Order, World};
use agent_core::runner::Runner;
use agent_core::store::{Store, StoreError};
use agent_http::{ApiConfig, ServeError};
use futures::StreamExt;
use serde_json::Value;

pub(crate) const TOKEN: &str = "correct-horse-battery-staple";

/// A store for one test.
pub(crate) struct Db {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) store: Arc<dyn Store>,
    /// The URL and schema of a PostgreSQL store of the test's own, dropped with it.
    drop_schema: Option<(String, String)>,
}

impl Drop for Db {
    fn drop(&mut self) {
        let Some((url, schema)) = self.drop_schema.take() else {
            return;
        };
        // On a thread and runtime of its own: a test's runtime may be ending.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let store = agent_pg::PgStore::connect(&url, &schema).await?;
                store.drop_schema().await
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("could not drop a test's schema: {e}");
        }
    }
}

impl Db {
    /// An empty SQLite store in a tempdir.
    pub(crate) async fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = agent_sqlite::SqliteStore::open(&dir.path().join("runs.sqlite3"))
            .await
            .expect("open the SQLite store");
        Self {
            dir,
            store: Arc::new(store),
            drop_schema: None,
        }
    }

    /// An empty PostgreSQL store in a schema of its own on `DATABASE_URL`, or `None` when
    /// it is not set (outside CI: under CI the PostgreSQL tests must not be skipped).
    pub(crate) async fn pg() -> Option<Self> {
        let url = match std::env::var("DATABASE_URL") {
            Ok(url) if !url.is_empty() => url,
            _ => {
                assert!(
                    std::env::var("CI").is_err(),
                    "DATABASE_URL is not set under CI"
                );
                eprintln!("*** SKIPPED on PostgreSQL: DATABASE_URL is not set ***");
                return None;
            }
        };
        let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
        let mut db = Self::pg_at(&url, &schema).await;
        db.drop_schema = Some((url, schema));
        Some(db)
    }

    /// A PostgreSQL store in `schema` of `DATABASE_URL` (which must be set), migrated.
    pub(crate) async fn pg_in(schema: &str) -> Self {
        let url = std::env::var("DATABASE_URL").expect("set DATABASE_URL");
        Self::pg_at(&url, schema).await
    }

    async fn pg_at(url: &str, schema: &str) -> Self {
        let store = agent_pg::PgStore::connect(url, schema)
            .await
            .expect("connect to DATABASE_URL");
        store.migrate().await.expect("migrate");
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
            store: Arc::new(store),
            drop_schema: None,
        }
    }

    /// A SQLite store, and a PostgreSQL one when `DATABASE_URL` is set, each named.
    pub(crate) async fn both() -> Vec<(&'static str, Self)> {
        let mut dbs = vec![("sqlite", Self::new().await)];
        if let Some(pg) = Self::pg().await {
            dbs.push(("postgres", pg));
        }
        dbs
    }

    /// A SQLite store at `path` (kept).
    pub(crate) async fn open(path: &std::path::Path) -> Self {
        let store = agent_sqlite::SqliteStore::open(path)
            .await
            .expect("open the SQLite store");
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
            store: Arc::new(store),
            drop_schema: None,
        }
    }

    /// A runner of the fixture agent whose router picks `choice` (`Pay`, `Cancelled`).
    pub(crate) fn runner(&self, choice: &'static str) -> Runner<Order, Behaviour> {
        runner(&self.store, choice)
    }

    /// Start run `id` and drive it until it waits or ends (`Pay`: it waits for `confirm`).
    pub(crate) async fn drive(&self, id: &str, choice: &'static str) {
        let r = self.runner(choice);
        r.start(id, fixture::initial(&["apple", "kiwi"]))
            .await
            .expect("start");
        r.run(id).await.expect("run");
    }

    /// Start run `id` and drive it to completion (confirmed with `{"ok": true}`).
    pub(crate) async fn complete(&self, id: &str) {
        self.drive(id, "Pay").await;
        let r = self.runner("Pay");
        r.signal(id, "confirm", serde_json::json!({"ok": true}))
            .await
            .expect("signal");
        r.run(id).await.expect("run");
    }

    /// Run `new` created and claimed by `worker` for half an hour: what writes a run's
    /// journal and steps by hand, or holds its lease.
    pub(crate) async fn claimed(
        &self,
        new: agent_core::store::NewRun,
        worker: &str,
    ) -> agent_core::store::Lease {
        let id = new.id.clone();
        self.store.create_run(new).await.expect("create");
        self.store
            .claim_run(&id, worker, Duration::from_mins(30))
            .await
            .expect("claim")
            .expect("a free run")
            .lease
    }

    /// The number of versions committed to `id`.
    pub(crate) async fn history_len(&self, id: &str) -> usize {
        self.store.history(id).await.expect("history").len()
    }
}

pub(crate) fn runner(store: &Arc<dyn Store>, choice: &'static str) -> Runner<Order, Behaviour> {
    let world = Arc::new(World::default());
    Runner::builder(Arc::clone(store), Behaviour, fixture::tools(&world))
        .router(Arc::new(fixture::router(choice)))
        .build()
        .expect("runner")
}

/// The API served on a loopback port until dropped.
pub(crate) struct Server {
    pub(crate) base: String,
    pub(crate) addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl Server {
    /// `agent_http::serve_on` (what `agentctl serve` runs) on 127.0.0.1, port 0.
    pub(crate) async fn serve(store: &Arc<dyn Store>, config: ApiConfig) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        Self::serve_on(store, config, listener)
    }

    pub(crate) fn serve_on(
        store: &Arc<dyn Store>,
        config: ApiConfig,
        listener: tokio::net::TcpListener,
    ) -> Self {
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(agent_http::serve_on(
            Arc::clone(store),
            config,
            listener,
            async move {
                let _ = rx.await;
            },
        ));
        Self {
            base: format!("http://127.0.0.1:{}", addr.port()),
            addr,
            stop: Some(tx),
            task,
        }
    }

    /// A router as a user mounts it in their own service (under `/api`).
    pub(crate) async fn mounted(router: axum::Router) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = axum::Router::new()
            .route("/healthz", axum::routing::get(|| async { "ok" }))
            .nest("/api", router);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await
                .map_err(|source| ServeError::Io { addr, source })
        });
        Self {
            base: format!("http://127.0.0.1:{}/api", addr.port()),
            addr,
            stop: Some(tx),
            task,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The OpenAPI document the server serves.
    #[allow(dead_code)] // not every test binary reads it
    pub(crate) async fn openapi(&self) -> Value {
        client()
            .get(self.url("/v1/openapi.json"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

pub(crate) fn client() -> reqwest::Client {
    #[allow(deprecated, reason = "ring is the provider sqlx compiles")]
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// A response's status and JSON body (`Null` when the body is not JSON).
pub(crate) async fn json(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Assert `body` is an error of the API: `{"error": {"code": CODE, "message": ...}}`.
pub(crate) fn assert_error(status: u16, body: &Value, want_status: u16, code: &str) {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert_eq!(
        body.as_object().map(serde_json::Map::len),
        Some(1),
        "only `error`: {body}"
    );
}

/// One SSE message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SseMessage {
    pub(crate) event: Option<String>,
    pub(crate) id: Option<String>,
    pub(crate) data: String,
}

impl SseMessage {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.data).expect("JSON data")
    }
}

/// Reads SSE messages from a streaming response.
pub(crate) struct SseClient {
    body: futures::stream::BoxStream<'static, reqwest::Result<axum::body::Bytes>>,
    buf: String,
}

impl SseClient {
    /// GET `url` with `Accept: text/event-stream` and the given headers; must be 200.
    pub(crate) async fn connect(url: &str, headers: &[(&str, String)]) -> Self {
        let mut req = client().get(url).header("accept", "text/event-stream");
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let resp = req.send().await.expect("connect");
        assert_eq!(resp.status(), 200, "{url}");
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Self {
            body: resp.bytes_stream().boxed(),
            buf: String::new(),
        }
    }

    /// The next message (comments skipped), or `None` when the stream ended.
    pub(crate) async fn next(&mut self) -> Option<SseMessage> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut msg = SseMessage {
                    event: None,
                    id: None,
                    data: String::new(),
                };
                let mut any = false;
                for line in block.lines() {
                    if line.starts_with(':') || line.is_empty() {
                        continue;
                    }
                    let (k, v) = line.split_once(':').unwrap_or((line, ""));
                    let v = v.strip_prefix(' ').unwrap_or(v);
                    any = true;
                    match k {
                        "event" => msg.event = Some(v.to_owned()),
                        "id" => msg.id = Some(v.to_owned()),
                        "data" => {
                            if !msg.data.is_empty() {
                                msg.data.push('\n');
                            }
                            msg.data.push_str(v);
                        }
                        _ => {}
                    }
                }
                if any {
                    return Some(msg);
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.body.next())
                .await
                .expect("an SSE message within 20 s")?;
            self.buf
                .push_str(std::str::from_utf8(&chunk.expect("chunk")).expect("utf-8"));
        }
    }
}

/// Every event of `scope` from the start, from the store.
pub(crate) async fn stored_events(
    store: &Arc<dyn Store>,
    scope: &agent_core::store::EventScope,
) -> Result<Vec<agent_core::store::RunEvent>, StoreError> {
    store
        .events(scope, agent_core::store::EventCursor::START, 100_000)
        .await
}

/// A succeeded read-tool call `Lookup` of run `run_id` at version 0, entry `seq`, looking up
/// `sku-{seq:04}`: the long journals of the inspector's tests and bench.
pub(crate) fn lookup_entry(run_id: &str, seq: u32) -> agent_core::store::JournalEntry {
    use agent_core::store::{CallStatus, EntryKind, JournalEntry, now_ms};
    JournalEntry {
        run_id: run_id.into(),
        version: 0,
        seq,
        kind: EntryKind::Tool,
        state: "Start".into(),
        name: "Lookup".into(),
        tool_kind: Some(agent_core::tool::ToolKind::Read),
        input_hash: "0".repeat(64),
        input: serde_json::json!({"sku": format!("sku-{seq:04}")}),
        idempotency_key: None,
        status: CallStatus::Succeeded,
        output: Some(serde_json::json!({"cents": seq})),
        error_class: None,
        error_code: None,
        error_message: None,
        attempts: 1,
        duration_ms: 3,
        started_at: now_ms(),
        finished_at: Some(now_ms()),
    }
}

/// Commit `steps` steps to run `id`, claimed with `lease` at version 0: from `Tick` to `Tock`
/// and back (`{"Tock": {"i": 1, "log": …}}`, `i` the version), each step with `entries`
/// succeeded `Lookup` calls whose inputs name the step (`step-0042`, then `step-0042-1`, …).
/// The long runs of the inspector's tests and bench.
pub(crate) async fn commit_steps(
    store: &Arc<dyn Store>,
    lease: &agent_core::store::Lease,
    id: &str,
    steps: u64,
    entries: u32,
) {
    use agent_core::store::{RunStatus, StepCommit, TransitionKind};
    for v in 0..steps {
        let (from, to) = if v % 2 == 0 {
            ("Tick", "Tock")
        } else {
            ("Tock", "Tick")
        };
        let calls: Vec<_> = (0..entries)
            .map(|seq| {
                let mut e = lookup_entry(id, seq);
                e.version = v;
                from.clone_into(&mut e.state);
                let name = match seq {
                    0 => format!("step-{v:04}"),
                    _ => format!("step-{v:04}-{seq}"),
                };
                e.input = serde_json::json!({ "sku": name });
                e
            })
            .collect();
        store
            .commit_step(
                lease,
                &StepCommit {
                    expected_version: v,
                    from_state: from.to_owned(),
                    to_state: to.to_owned(),
                    state: serde_json::json!({ to: {"i": v + 1, "log": "a line of the run's own notes"} }),
                    kind: TransitionKind::Step,
                    status: RunStatus::Running,
                    waiting_for: None,
                    wake_at: None,
                    error: None,
                    consumed_signal: None,
                    spend: None,
                },
                &calls,
            )
            .await
            .expect("commit a step");
    }
}
