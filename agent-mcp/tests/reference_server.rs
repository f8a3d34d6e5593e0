//! MCP tools against a server no one here wrote: the protocol's reference
//! `@modelcontextprotocol/server-memory` (npm), run with Node.js as a child process over
//! stdio. `scripts/mcp-servers` installs it and prints `MCP_SERVER_MEMORY`; without it
//! (and without the default cache location) the test says how to install it and skips.

use std::path::PathBuf;
use std::sync::Arc;

use durable_agents::mcp::{McpImport, McpServer, import};
use durable_agents::runner::Runner;
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{RunStatus, Store};
use durable_agents::{Agent, Ctx, StepResult, ToolBox};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Remembers a person in the knowledge graph, then reads the graph back.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
enum Recall {
    #[agent(initial, to(Read))]
    Remember { name: String },
    #[agent(to(Done))]
    Read { name: String },
    #[agent(terminal)]
    Done { found: bool },
}

struct Behaviour;

impl RecallHandlers for Behaviour {
    async fn remember(
        &self,
        ctx: Ctx<'_, recall::Remember>,
        recall::Remember { name }: recall::Remember,
    ) -> StepResult<recall::Remember> {
        let entity = json!({"name": name, "entityType": "person", "observations": ["likes tea"]});
        ctx.call_imported("memory__create_entities", json!({ "entities": [entity] }))
            .await?;
        Ok(ctx.to(recall::Read { name }))
    }

    async fn read(
        &self,
        ctx: Ctx<'_, recall::Read>,
        recall::Read { name }: recall::Read,
    ) -> StepResult<recall::Read> {
        let graph = ctx.call_imported("memory__read_graph", json!({})).await?;
        let found = graph.to_string().contains(&name);
        Ok(ctx.to(recall::Done { found }))
    }
}

/// The server's entry script, or `None` with a message saying how to get it.
fn server_script() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("MCP_SERVER_MEMORY") {
        return Some(PathBuf::from(path));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let default = cache.join(
        "durable-agents/mcp-servers/server-memory-2026.8.31/node_modules/@modelcontextprotocol/server-memory/dist/index.js",
    );
    if default.exists() && which_node() {
        return Some(default);
    }
    eprintln!(
        "SKIPPED: the reference MCP server is not installed; run `eval \"$(scripts/mcp-servers)\"` \
         (needs Node.js and npm) and run the test again"
    );
    None
}

fn which_node() -> bool {
    std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

async fn memory_server(dir: &tempfile::TempDir) -> McpServer {
    let script = server_script().unwrap();
    let mut command = tokio::process::Command::new("node");
    command
        .arg(script)
        .env("MEMORY_FILE_PATH", dir.path().join("memory.jsonl"));
    McpServer::stdio("memory", command).await.unwrap()
}

#[tokio::test]
async fn an_agent_writes_and_reads_through_the_reference_memory_server() {
    if server_script().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = memory_server(&dir).await;
    let tools = import([McpImport::new(server)
        .write("create_entities")
        .read("read_graph")
        .allow::<recall::Remember, _, _>(["create_entities"])
        .allow::<recall::Read, _, _>(["read_graph"])])
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner =
        Runner::<Recall, Behaviour>::builder(Arc::clone(&store), Behaviour, ToolBox::new())
            .imported_tools(tools)
            .build()
            .unwrap();
    runner
        .start("r-1", Recall::Remember { name: "Ada".into() })
        .await
        .unwrap();
    let done = runner.run("r-1").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state["Done"]["found"], true);
    let journal = store.journal("r-1", None).await.unwrap();
    let write = journal
        .iter()
        .find(|e| e.name == "memory__create_entities")
        .unwrap();
    assert_eq!(write.idempotency_key.as_deref(), Some("r-1:0:0"));
    assert_eq!(write.input["schema"].as_str().map(str::len), Some(64));
}

#[tokio::test]
async fn the_reference_server_is_checked_at_start_up() {
    if server_script().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = memory_server(&dir).await;
    let err = import([McpImport::new(server).write("create_entities").allow_in(
        "Remember",
        ["create_entities", "forget_everything", "delete_entities"],
    )])
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("state `Remember` lists `forget_everything`, but server `memory` offers no tool `forget_everything`"),
        "{err}"
    );
    assert!(
        err.contains("state `Remember` lists tool `delete_entities` of server `memory`, which is imported without a kind"),
        "{err}"
    );
}
