//! MCP tools in an agent, against the tests' Rust MCP server (rmcp's server side): over
//! stdio (the `rust_mcp_server` example as a child process) and streamable HTTP (served by
//! axum in this process, so the test can look at what the server received).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use durable_agents::FailureCode;
use durable_agents::mcp::{IDEMPOTENCY_KEY_META, McpImport, McpServer, import};
use durable_agents::router::{OptionKind, RouteRequest, ScriptedRouter};
use durable_agents::runner::{
    CrashAt, FaultPoint, ImportedTools, Runner, RunnerConfig, RunnerError,
};
use durable_agents::runner::{FaultHook, NoFaults};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{CallStatus, EntryKind, RunStatus, Store};
use durable_agents::{Agent, Ctx, StepError, StepResult, ToolBox};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::notes_server::NotesServer;

/// Writes a note through an MCP write tool, then lets the model look at the notes (an
/// MCP read tool) and finish.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
enum Notebook {
    #[agent(initial, to(Decide))]
    Write { text: String },
    #[agent(route = llm, to(Done, Gave))]
    Decide { count: u64 },
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    Gave,
}

struct Behaviour;

impl NotebookHandlers for Behaviour {
    async fn write(
        &self,
        ctx: Ctx<'_, notebook::Write>,
        notebook::Write { text }: notebook::Write,
    ) -> StepResult<notebook::Write> {
        let out = ctx
            .call_imported("notes__add_note", json!({ "text": text }))
            .await?;
        let count = out["structuredContent"]["count"]
            .as_u64()
            .ok_or_else(|| StepError::handler(format!("no count in {out}")))?;
        Ok(ctx.to(notebook::Decide { count }))
    }

    async fn decide(
        &self,
        ctx: Ctx<'_, notebook::Decide>,
        route: notebook::DecideRoute,
        _: notebook::Decide,
    ) -> StepResult<notebook::Decide> {
        Ok(match route {
            notebook::DecideRoute::Done => ctx.to(notebook::Done),
            notebook::DecideRoute::Gave => ctx.to(notebook::Gave),
        })
    }
}

const LEASE: Duration = Duration::from_millis(150);

fn config(worker: &str) -> RunnerConfig {
    RunnerConfig {
        worker_id: worker.to_owned(),
        lease_ttl: LEASE,
        ..RunnerConfig::default()
    }
}

/// What the tests import: `list_notes` read (legal in `Decide`), `add_note` write (legal in
/// `Write`).
fn notebook_import(server: McpServer) -> McpImport {
    McpImport::new(server)
        .read("list_notes")
        .write("add_note")
        .allow::<notebook::Write, _, _>(["add_note"])
        .allow_in("Decide", ["list_notes"])
}

/// A router that reads the notes once, then finishes; it records what it was offered.
fn router(offered: Arc<Mutex<Vec<RouteRequest>>>) -> Arc<ScriptedRouter> {
    Arc::new(ScriptedRouter::from_fn(move |req| {
        let mut seen = offered.lock().unwrap();
        seen.push(req.clone());
        if req.tool_results.is_empty() {
            ScriptedRouter::choose("notes__list_notes", "{}")
        } else {
            ScriptedRouter::choose("Done", "{}")
        }
    }))
}

fn runner(
    store: &Arc<dyn Store>,
    tools: ImportedTools,
    worker: &str,
) -> Runner<Notebook, Behaviour> {
    runner_with(store, tools, worker, Arc::new(NoFaults))
}

fn runner_with(
    store: &Arc<dyn Store>,
    tools: ImportedTools,
    worker: &str,
    faults: Arc<dyn FaultHook>,
) -> Runner<Notebook, Behaviour> {
    Runner::builder(Arc::clone(store), Behaviour, ToolBox::new())
        .router(router(Arc::default()))
        .imported_tools(tools)
        .config(config(worker))
        .faults(faults)
        .build()
        .unwrap()
}

/// The stdio server: the `rust_mcp_server` example next to this test binary.
async fn stdio_server(schema_version: u32) -> McpServer {
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("examples").join("rust_mcp_server"))
        .unwrap();
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo test --workspace` (which builds examples) or \
         `cargo build --workspace --examples`",
        bin.display()
    );
    let mut command = tokio::process::Command::new(bin);
    command.arg(schema_version.to_string());
    McpServer::stdio("notes", command).await.unwrap()
}

/// The HTTP server, in this process: the notebook (to look at) and its URL.
async fn http_server(schema_version: u32) -> (NotesServer, String) {
    let notes = NotesServer::new(schema_version);
    let shared = notes.clone();
    let service: StreamableHttpService<NotesServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(shared.clone()),
            Arc::default(),
            StreamableHttpServerConfig::default(),
        );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (notes, url)
}

#[tokio::test]
async fn stdio_tools_are_legal_per_state_and_the_model_sees_only_its_own() {
    let server = stdio_server(1).await;
    let tools = import([notebook_import(server)]).unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let offered = Arc::new(Mutex::new(Vec::new()));
    let runner =
        Runner::<Notebook, Behaviour>::builder(Arc::clone(&store), Behaviour, ToolBox::new())
            .router(router(Arc::clone(&offered)))
            .imported_tools(tools)
            .build()
            .unwrap();
    runner
        .start(
            "n-1",
            Notebook::Write {
                text: "milk".into(),
            },
        )
        .await
        .unwrap();
    let done = runner.run("n-1").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);

    // The routed state offered its transitions and exactly the MCP tools it may call,
    // with the server's schema.
    let requests = offered.lock().unwrap().clone();
    let tools: Vec<&str> = requests[0]
        .options
        .iter()
        .filter(|o| o.kind == OptionKind::Tool)
        .map(|o| o.name.as_str())
        .collect();
    assert_eq!(tools, ["notes__list_notes"]);
    assert_eq!(
        requests[1].tool_results.len(),
        1,
        "the read's result reached the model"
    );

    // The write got its idempotency key in `_meta`, and the server saw it.
    let journal = store.journal("n-1", None).await.unwrap();
    let write = journal
        .iter()
        .find(|e| e.name == "notes__add_note")
        .unwrap();
    let key = write.idempotency_key.clone().expect("a write has a key");
    let output = write.output.clone().unwrap();
    assert_eq!(
        output["structuredContent"]["key"],
        json!(key),
        "{IDEMPOTENCY_KEY_META}"
    );
    assert_eq!(output["structuredContent"]["count"], 1);
    // The journal records the schema the call was made under.
    assert_eq!(write.input["arguments"], json!({"text": "milk"}));
    assert_eq!(write.input["schema"].as_str().unwrap().len(), 64);
    let read = journal
        .iter()
        .find(|e| e.name == "notes__list_notes" && e.kind == EntryKind::Tool)
        .unwrap();
    assert_eq!(read.idempotency_key, None, "reads carry no key");
    assert_eq!(
        read.output.clone().unwrap()["structuredContent"]["notes"],
        json!(["milk"])
    );
}

#[tokio::test]
async fn a_state_listing_a_tool_the_server_does_not_offer_stops_start_up() {
    let server = stdio_server(1).await;
    let err = import([notebook_import(server)
        .write("drop_everything")
        .allow_in("Write", ["drop_everything"])])
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("state `Write` lists `drop_everything`, but server `notes` offers no tool `drop_everything`; it offers: `list_notes`, `add_note`, `remove_note`, `reserve_slot`"),
        "{err}"
    );
    assert!(
        err.contains("`drop_everything` is declared write, but server `notes` offers no tool"),
        "{err}"
    );
}

#[tokio::test]
async fn a_tool_imported_without_a_kind_is_refused() {
    let (_, url) = http_server(1).await;
    let server = McpServer::http("notes", &url).await.unwrap();
    let err = import([McpImport::new(server)
        .write("add_note")
        .allow_in("Write", ["add_note", "remove_note"])])
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("state `Write` lists tool `remove_note` of server `notes`, which is imported without a kind"),
        "{err}"
    );
    assert!(
        !err.contains("`add_note`"),
        "only the kindless tool is reported: {err}"
    );
}

#[tokio::test]
async fn states_and_compensations_are_checked_against_the_agent() {
    let (_, url) = http_server(1).await;
    let server = McpServer::http("notes", &url).await.unwrap();
    let tools = import([McpImport::new(server.clone())
        .write("add_note")
        .allow_in("Wirte", ["add_note"])])
    .unwrap();
    let err = Runner::<Notebook, Behaviour>::builder(
        Arc::new(MemoryStore::new()),
        Behaviour,
        ToolBox::new(),
    )
    .router(router(Arc::default()))
    .imported_tools(tools)
    .build()
    .unwrap_err();
    let RunnerError::ToolBox { problem, .. } = &err else {
        panic!("{err}")
    };
    assert!(
        problem.contains("state `Wirte`, which agent `Notebook` does not have"),
        "{problem}"
    );

    let err = import([McpImport::new(server)
        .hybrid("reserve_slot", "list_notes", |args, _| args.clone())
        .read("list_notes")])
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("hybrid `reserve_slot` is compensated by `list_notes`, which is declared read, not write"),
        "{err}"
    );
}

#[tokio::test]
async fn a_call_the_state_does_not_allow_is_refused_at_run_time() {
    let (notes, url) = http_server(1).await;
    let server = McpServer::http("notes", &url).await.unwrap();
    // `add_note` imported and legal in `Decide` only: the `Write` handler's call is refused.
    let tools = import([McpImport::new(server)
        .read("list_notes")
        .write("add_note")
        .allow_in("Decide", ["list_notes", "add_note"])])
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = runner(&store, tools, "w");
    runner
        .start("n-illegal", Notebook::Write { text: "x".into() })
        .await
        .unwrap();
    let record = runner.run("n-illegal").await.unwrap();
    assert_eq!(record.status, RunStatus::Failed);
    let error = record.error.unwrap();
    assert!(
        error
            .message
            .contains("tool `notes__add_note` is not allowed in state `Write`"),
        "{error:?}"
    );
    assert!(notes.requests().is_empty(), "nothing reached the server");
}

#[tokio::test]
async fn a_write_retried_after_a_crash_reuses_its_key_over_http() {
    let (notes, url) = http_server(1).await;
    let server = McpServer::http("notes", &url).await.unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let hook = Arc::new(CrashAt::new(FaultPoint::ToolAnswered, 0));
    let crashy = runner_with(
        &store,
        import([notebook_import(server.clone())]).unwrap(),
        "crashy",
        hook.clone(),
    );
    crashy
        .start(
            "n-crash",
            Notebook::Write {
                text: "eggs".into(),
            },
        )
        .await
        .unwrap();
    let err = crashy.run("n-crash").await.unwrap_err();
    assert!(
        matches!(err, RunnerError::Crashed(_)) && hook.fired(),
        "{err}"
    );

    // The server applied the write, the journal does not know: the next worker sends it
    // again, with the same key, and the server answers from its first application.
    tokio::time::sleep(LEASE + Duration::from_millis(50)).await;
    let healthy = runner(
        &store,
        import([notebook_import(server)]).unwrap(),
        "healthy",
    );
    let done = healthy.run("n-crash").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let requests = notes.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_eq!(requests[0], requests[1], "same arguments, same key");
    assert_eq!(requests[0].1.as_deref(), Some("n-crash:0:0"));
    assert_eq!(notes.notes(), ["eggs"], "applied once");
}

#[tokio::test]
async fn a_changed_schema_holds_the_run_instead_of_replaying_it() {
    let (_, url) = http_server(1).await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let hook = Arc::new(CrashAt::new(FaultPoint::ToolAnswered, 0));
    let v1 = McpServer::http("notes", &url).await.unwrap();
    let crashy = runner_with(
        &store,
        import([notebook_import(v1)]).unwrap(),
        "crashy",
        hook.clone(),
    );
    crashy
        .start("n-schema", Notebook::Write { text: "tea".into() })
        .await
        .unwrap();
    assert!(crashy.run("n-schema").await.is_err() && hook.fired());

    // The server is upgraded: `add_note` now requires an `author`.
    let (v2_notes, v2_url) = http_server(2).await;
    let v2 = McpServer::http("notes", &v2_url).await.unwrap();
    tokio::time::sleep(LEASE + Duration::from_millis(50)).await;
    let upgraded = runner(&store, import([notebook_import(v2)]).unwrap(), "upgraded");
    let held = upgraded.run("n-schema").await.unwrap();
    assert_eq!(held.status, RunStatus::Quarantined);
    let error = held.error.unwrap();
    assert_eq!(error.code, FailureCode::ToolSchemaChanged);
    assert!(
        error.message.contains(
            "the input schema of tool `notes__add_note` changed since this run called it"
        ),
        "{error:?}"
    );
    assert!(
        v2_notes.requests().is_empty(),
        "nothing was replayed against the new tool"
    );
}

#[tokio::test]
async fn a_schema_changed_after_an_earlier_step_holds_the_run_too() {
    // `Decide` may call `add_note` as well; the run's first step called it under schema 1.
    let (_, url) = http_server(1).await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let import_with = |server| notebook_import(server).allow_in("Decide", ["add_note"]);
    let v1 = McpServer::http("notes", &url).await.unwrap();
    // The first worker commits `Write` and crashes once it has asked the model in `Decide`.
    let hook = Arc::new(CrashAt::new(FaultPoint::LlmSent, 0));
    let first = runner_with(
        &store,
        import([import_with(v1)]).unwrap(),
        "first",
        hook.clone(),
    );
    first
        .start("n-later", Notebook::Write { text: "jam".into() })
        .await
        .unwrap();
    assert!(first.run("n-later").await.is_err() && hook.fired());
    tokio::time::sleep(LEASE + Duration::from_millis(50)).await;

    let (_, v2_url) = http_server(2).await;
    let v2 = McpServer::http("notes", &v2_url).await.unwrap();
    let router = Arc::new(ScriptedRouter::new([ScriptedRouter::choose(
        "notes__add_note",
        r#"{"text": "more", "author": "ann"}"#,
    )]));
    let upgraded =
        Runner::<Notebook, Behaviour>::builder(Arc::clone(&store), Behaviour, ToolBox::new())
            .router(router)
            .imported_tools(import([import_with(v2)]).unwrap())
            .config(config("upgraded"))
            .build()
            .unwrap();
    let held = upgraded.run("n-later").await.unwrap();
    assert_eq!(held.status, RunStatus::Quarantined);
    assert_eq!(held.error.unwrap().code, FailureCode::ToolSchemaChanged);
}

/// Reserves a slot with an MCP hybrid tool, then fails at the confirmation: the saga
/// undoes the reservation with the hybrid's compensation, an MCP write.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
enum Slots {
    #[agent(initial, to(Confirm))]
    Reserve { text: String },
    #[agent(to(Booked))]
    Confirm { text: String },
    #[agent(terminal)]
    Booked,
}

impl SlotsHandlers for Behaviour {
    async fn reserve(
        &self,
        ctx: Ctx<'_, slots::Reserve>,
        slots::Reserve { text }: slots::Reserve,
    ) -> StepResult<slots::Reserve> {
        ctx.call_imported("notes__reserve_slot", json!({ "text": text }))
            .await?;
        Ok(ctx.to(slots::Confirm { text }))
    }

    async fn confirm(
        &self,
        _: Ctx<'_, slots::Confirm>,
        slots::Confirm { text }: slots::Confirm,
    ) -> StepResult<slots::Confirm> {
        Err(StepError::handler(format!("the venue refused `{text}`")))
    }
}

#[tokio::test]
async fn a_failed_run_compensates_its_mcp_hybrid_once_with_a_key() {
    let (notes, url) = http_server(1).await;
    let server = McpServer::http("notes", &url).await.unwrap();
    let tools = import([McpImport::new(server)
        .hybrid(
            "reserve_slot",
            "remove_note",
            |args, _| json!({ "text": args["text"] }),
        )
        .write("remove_note")
        .allow::<slots::Reserve, _, _>(["reserve_slot"])])
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = Runner::<Slots, Behaviour>::builder(Arc::clone(&store), Behaviour, ToolBox::new())
        .imported_tools(tools)
        .config(config("w"))
        .build()
        .unwrap();
    runner
        .start(
            "s-1",
            Slots::Reserve {
                text: "10:00".into(),
            },
        )
        .await
        .unwrap();
    let record = runner.run("s-1").await.unwrap();
    assert_eq!(record.status, RunStatus::Compensated, "{:?}", record.error);
    assert!(
        record
            .error
            .unwrap()
            .message
            .contains("the venue refused `10:00`"),
        "the run's failure is the confirmation's"
    );

    // The server reserved once, then was asked once to undo it, with the key of the
    // compensation's journal slot (not the reservation's).
    assert_eq!(
        notes.requests(),
        [("10:00".to_owned(), Some("s-1:0:0".to_owned()))]
    );
    let removals = notes.removals();
    assert_eq!(removals.len(), 1, "{removals:?}");
    assert_eq!(removals[0].0, "10:00");
    assert!(notes.notes().is_empty(), "the slot was released");

    // The journal has the compensation, succeeded, under the key the server saw.
    let journal = store.journal("s-1", None).await.unwrap();
    let compensations: Vec<_> = journal
        .iter()
        .filter(|e| e.kind == EntryKind::Compensation)
        .collect();
    assert_eq!(compensations.len(), 1, "{journal:?}");
    let undo = compensations[0];
    assert_eq!(undo.name, "notes__remove_note");
    assert_eq!(undo.status, CallStatus::Succeeded);
    assert_eq!(undo.input["arguments"], json!({ "text": "10:00" }));
    let key = undo
        .idempotency_key
        .clone()
        .expect("a compensation has a key");
    assert_ne!(key, "s-1:0:0", "its own key, not the hybrid's");
    assert_eq!(removals[0].1.as_deref(), Some(key.as_str()));
}
