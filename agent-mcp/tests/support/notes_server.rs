//! The MCP server of the tests, written with rmcp's server side: a notebook with a read
//! tool, a write tool that honours the idempotency key in `_meta`, and a hybrid pair. It
//! runs over stdio (the `rust_mcp_server` example, as a child process) and streamable HTTP
//! (in the test process).
//!
//! `schema_version` 2 adds a required `author` to `add_note`'s input schema: the same
//! server after an upgrade that changed a tool.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};

/// The `_meta` key the client sends idempotency keys in (`durable_agents::mcp::IDEMPOTENCY_KEY_META`).
const KEY: &str = "io.durable-agents/idempotency-key";

#[derive(Default)]
struct Book {
    notes: Vec<String>,
    /// Effects applied, by idempotency key: a repeated key returns the first answer.
    applied: BTreeMap<String, Value>,
    /// Every `add_note` request as it arrived: (text, key).
    requests: Vec<(String, Option<String>)>,
    /// Every `remove_note` request as it arrived: (text, key).
    removals: Vec<(String, Option<String>)>,
}

/// The notebook server.
#[derive(Clone)]
pub(crate) struct NotesServer {
    schema_version: u32,
    book: Arc<Mutex<Book>>,
}

fn object(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(o) => Arc::new(o),
        _ => unreachable!("schemas are objects"),
    }
}

impl NotesServer {
    /// A new, empty notebook whose `add_note` has schema `schema_version` (1 or 2).
    pub(crate) fn new(schema_version: u32) -> Self {
        Self {
            schema_version,
            book: Arc::default(),
        }
    }

    /// `add_note` requests as they arrived: (text, idempotency key).
    #[allow(dead_code)]
    pub(crate) fn requests(&self) -> Vec<(String, Option<String>)> {
        self.book.lock().unwrap().requests.clone()
    }

    /// `remove_note` requests as they arrived: (text, idempotency key).
    #[allow(dead_code)]
    pub(crate) fn removals(&self) -> Vec<(String, Option<String>)> {
        self.book.lock().unwrap().removals.clone()
    }

    /// The notes, in order.
    #[allow(dead_code)]
    pub(crate) fn notes(&self) -> Vec<String> {
        self.book.lock().unwrap().notes.clone()
    }

    fn tools(&self) -> Vec<Tool> {
        let mut add = json!({
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        });
        if self.schema_version >= 2 {
            add["properties"]["author"] = json!({"type": "string"});
            add["required"] = json!(["text", "author"]);
        }
        vec![
            Tool::new(
                "list_notes",
                "List the notes.",
                object(json!({"type": "object", "properties": {}})),
            ),
            Tool::new(
                "add_note",
                "Add a note; honours the idempotency key.",
                object(add),
            ),
            Tool::new(
                "remove_note",
                "Remove a note by its text.",
                object(json!({
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                })),
            ),
            Tool::new(
                "reserve_slot",
                "Reserve a slot (undone by `remove_note`).",
                object(json!({
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                })),
            ),
        ]
    }

    fn call(&self, name: &str, args: &JsonObject, key: Option<String>) -> Result<Value, String> {
        let mut book = self.book.lock().unwrap();
        let text = args.get("text").and_then(Value::as_str).map(str::to_owned);
        match name {
            "list_notes" => Ok(json!({"notes": book.notes})),
            "add_note" | "reserve_slot" => {
                let text = text.ok_or("`text` is required")?;
                if self.schema_version >= 2 && !args.contains_key("author") {
                    return Err("`author` is required".into());
                }
                book.requests.push((text.clone(), key.clone()));
                if let Some(key) = &key
                    && let Some(first) = book.applied.get(key)
                {
                    return Ok(first.clone());
                }
                book.notes.push(text);
                let answer = json!({"count": book.notes.len(), "key": key});
                if let Some(key) = key {
                    book.applied.insert(key, answer.clone());
                }
                Ok(answer)
            }
            "remove_note" => {
                let text = text.ok_or("`text` is required")?;
                book.removals.push((text.clone(), key.clone()));
                if let Some(key) = &key
                    && let Some(first) = book.applied.get(key)
                {
                    return Ok(first.clone());
                }
                book.notes.retain(|n| *n != text);
                let answer = json!({"count": book.notes.len()});
                if let Some(key) = key {
                    book.applied.insert(key, answer.clone());
                }
                Ok(answer)
            }
            other => Err(format!("no tool `{other}`")),
        }
    }
}

impl ServerHandler for NotesServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let key = context
            .meta
            .get(KEY)
            .and_then(Value::as_str)
            .map(str::to_owned);
        let args = request.arguments.unwrap_or_default();
        Ok(match self.call(&request.name, &args, key) {
            Ok(v) => CallToolResult::structured(v).into(),
            Err(e) => CallToolResult::error(vec![rmcp::model::ContentBlock::text(e)]).into(),
        })
    }
}
