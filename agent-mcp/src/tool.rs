//! One imported tool: a [`DynTool`] whose calls go to the MCP server.

use std::fmt;
use std::sync::Arc;

use agent_core::schema::CompiledSchema;
use agent_core::store::input_hash;
use agent_core::{DynTool, ToolContext, ToolError, ToolKind, ToolPolicy};
use futures::future::BoxFuture;
use rmcp::ServiceError;
use rmcp::model::{CallToolRequestParams, ErrorCode, RequestMetaObject};
use serde_json::Value;

use crate::server::Client;

/// The key of the request's `_meta` member that carries the idempotency key of write and
/// hybrid calls (and of compensations): `{"_meta": {"io.durable-agents/idempotency-key":
/// "run:version:call"}}`. The same key on every retry and every resume of one call; a
/// server that honours it applies the effect once. Read calls carry none.
pub const IDEMPOTENCY_KEY_META: &str = "io.durable-agents/idempotency-key";

/// The name a tool of server `server` is imported under: `{server}__{tool}` (models accept
/// tool names of letters, digits, `_` and `-` only, so no `.` or `/`).
#[must_use]
pub fn imported_name(server: &str, tool: &str) -> String {
    format!("{server}__{tool}")
}

/// How a hybrid tool's compensation input is computed from a completed call's arguments
/// and output.
pub(crate) type CompensationFn = Arc<dyn Fn(&Value, &Value) -> Value + Send + Sync>;

/// A tool of an MCP server with the kind its importer declared.
pub struct McpTool {
    pub(crate) name: &'static str,
    pub(crate) remote: String,
    pub(crate) description: &'static str,
    pub(crate) kind: ToolKind,
    pub(crate) policy: ToolPolicy,
    pub(crate) schema: Value,
    pub(crate) compiled: Arc<CompiledSchema>,
    pub(crate) fingerprint: String,
    pub(crate) compensation: Option<(String, CompensationFn)>,
    pub(crate) client: Arc<Client>,
}

impl fmt::Debug for McpTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

impl McpTool {
    /// The fingerprint of an input schema: SHA-256 of its canonical JSON (key order and
    /// whitespace do not count; any other change does).
    #[must_use]
    pub fn fingerprint_of(schema: &Value) -> String {
        input_hash(schema)
    }

    async fn call(&self, input: Value, cx: &ToolContext) -> Result<Value, ToolError> {
        let Value::Object(arguments) = input else {
            return Err(ToolError::permanent(
                "the arguments of an MCP tool must be a JSON object",
            ));
        };
        let mut params = CallToolRequestParams::new(self.remote.clone()).with_arguments(arguments);
        if let Some(key) = &cx.idempotency_key {
            let mut meta = RequestMetaObject::new();
            meta.insert(IDEMPOTENCY_KEY_META.to_owned(), Value::String(key.clone()));
            params.meta = Some(meta);
        }
        let result = self
            .client
            .call_tool(params)
            .await
            .map_err(|e| classify(&e))?;
        if result.is_error == Some(true) {
            // The tool ran and reported a failure: its content is the message.
            return Err(ToolError::permanent(format!(
                "the MCP tool reported an error: {}",
                text_of(&result.content)
            )));
        }
        serde_json::to_value(&result)
            .map_err(|e| ToolError::permanent(format!("result does not serialize: {e}")))
    }
}

/// Text blocks of a result, joined, for error messages.
fn text_of(content: &[rmcp::model::ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Protocol errors the server answered (bad arguments, unknown tool) do not pass on
/// retrying; a transport that failed or closed may.
fn classify(e: &ServiceError) -> ToolError {
    match e {
        ServiceError::McpError(data)
            if data.code == ErrorCode::INVALID_PARAMS
                || data.code == ErrorCode::METHOD_NOT_FOUND
                || data.code == ErrorCode::INVALID_REQUEST =>
        {
            ToolError::permanent(format!("the MCP server refused the call: {e}"))
        }
        _ => ToolError::retryable(format!("the MCP call failed: {e}")),
    }
}

impl DynTool for McpTool {
    fn name(&self) -> &'static str {
        self.name
    }
    fn description(&self) -> &'static str {
        self.description
    }
    fn kind(&self) -> ToolKind {
        self.kind
    }
    fn policy(&self) -> ToolPolicy {
        self.policy.clone()
    }
    fn input_schema(&self) -> Value {
        self.schema.clone()
    }
    fn check_input(&self, input: &Value) -> Result<(), String> {
        self.compiled.check(input)?;
        self.check_typed(input)
    }
    fn check_typed(&self, input: &Value) -> Result<(), String> {
        if input.is_object() {
            Ok(())
        } else {
            Err("the arguments of an MCP tool must be a JSON object".to_owned())
        }
    }
    fn call_json<'a>(
        &'a self,
        input: Value,
        cx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(self.call(input, cx))
    }
    fn compensation(
        &self,
        input: &Value,
        output: &Value,
    ) -> Option<Result<(String, Value), String>> {
        let (with, f) = self.compensation.as_ref()?;
        Some(Ok((with.clone(), f(input, output))))
    }
    fn schema_fingerprint(&self) -> Option<String> {
        Some(self.fingerprint.clone())
    }
    fn compensated_by(&self) -> Option<String> {
        self.compensation.as_ref().map(|(with, _)| with.clone())
    }
}
