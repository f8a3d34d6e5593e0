//! What the user declares about a server's tools (kinds, legality per state), checked
//! against what the server offers when the tools are imported.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use agent_core::runner::ImportedTools;
use agent_core::{State, ToolKind, ToolPolicy};
use serde_json::Value;

use crate::server::McpServer;
use crate::tool::{CompensationFn, McpTool, imported_name};

/// Every problem found when importing: a tool allowed in a state but declared without a
/// kind, a declared or allowed tool the server does not offer, a schema that does not
/// compile, a hybrid whose compensation is not a write of the same server.
#[derive(Debug, thiserror::Error)]
#[error("MCP tools cannot be imported:\n- {}", problems.join("\n- "))]
pub struct ImportError {
    /// One line per problem.
    pub problems: Vec<String>,
}

enum Declared {
    Plain(ToolKind),
    Hybrid {
        with: String,
        compensation: CompensationFn,
    },
}

impl Declared {
    fn kind(&self) -> ToolKind {
        match self {
            Self::Plain(kind) => *kind,
            Self::Hybrid { .. } => ToolKind::Hybrid,
        }
    }
}

/// The tools to import from one server: each one's kind, the states that may call it and
/// the policy of its calls. Nothing is assumed: a tool without a declared kind is not
/// imported, and a state that lists one is an error.
pub struct McpImport {
    server: McpServer,
    declared: BTreeMap<String, Declared>,
    allowed: Vec<(String, String)>,
    policies: BTreeMap<String, ToolPolicy>,
    policy: ToolPolicy,
}

impl fmt::Debug for McpImport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpImport")
            .field("server", &self.server.name)
            .field(
                "declared",
                &self
                    .declared
                    .iter()
                    .map(|(t, d)| (t, d.kind()))
                    .collect::<Vec<_>>(),
            )
            .field("allowed", &self.allowed)
            .finish_non_exhaustive()
    }
}

impl McpImport {
    /// Import from `server`; declare kinds and legal states next.
    #[must_use]
    pub fn new(server: McpServer) -> Self {
        Self {
            server,
            declared: BTreeMap::new(),
            allowed: Vec::new(),
            policies: BTreeMap::new(),
            policy: ToolPolicy::default(),
        }
    }

    /// Import `tool` (its name on the server) as a read: no side effect, served from the
    /// journal on resume, no idempotency key.
    #[must_use]
    pub fn read(mut self, tool: &str) -> Self {
        self.declared
            .insert(tool.to_owned(), Declared::Plain(ToolKind::Read));
        self
    }

    /// Import `tool` as a write: it gets an idempotency key, and once its result is
    /// committed it never runs again.
    #[must_use]
    pub fn write(mut self, tool: &str) -> Self {
        self.declared
            .insert(tool.to_owned(), Declared::Plain(ToolKind::Write));
        self
    }

    /// Import `tool` as a hybrid: a write undone by `compensated_by`, a tool of the same
    /// server that must be imported as a write, called with the input `compensation`
    /// computes from the completed call's arguments and its output (the result as journaled:
    /// `content`, `structuredContent`).
    #[must_use]
    pub fn hybrid(
        mut self,
        tool: &str,
        compensated_by: &str,
        compensation: impl Fn(&Value, &Value) -> Value + Send + Sync + 'static,
    ) -> Self {
        self.declared.insert(
            tool.to_owned(),
            Declared::Hybrid {
                with: compensated_by.to_owned(),
                compensation: Arc::new(compensation),
            },
        );
        self
    }

    /// Make these tools (names on the server) legal in state `S`.
    #[must_use]
    pub fn allow<S: State, I: IntoIterator<Item = T>, T: AsRef<str>>(self, tools: I) -> Self {
        self.allow_in(S::NAME, tools)
    }

    /// Make these tools (names on the server) legal in the state named `state`; the name is
    /// checked against the agent's graph when the tools are added to a runner.
    #[must_use]
    pub fn allow_in<I: IntoIterator<Item = T>, T: AsRef<str>>(
        mut self,
        state: &str,
        tools: I,
    ) -> Self {
        for tool in tools {
            self.allowed
                .push((state.to_owned(), tool.as_ref().to_owned()));
        }
        self
    }

    /// The timeout and retry policy of every tool of this import without its own
    /// ([`policy_of`](Self::policy_of)).
    #[must_use]
    pub fn policy(mut self, policy: ToolPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The timeout and retry policy of `tool`.
    #[must_use]
    pub fn policy_of(mut self, tool: &str, policy: ToolPolicy) -> Self {
        self.policies.insert(tool.to_owned(), policy);
        self
    }

    fn offers(&self, tool: &str) -> bool {
        self.server.tools.iter().any(|t| t.name == tool)
    }

    fn not_offered(&self, tool: &str) -> String {
        let offered: Vec<String> = self
            .server
            .tools
            .iter()
            .map(|t| format!("`{}`", t.name))
            .collect();
        format!(
            "server `{}` offers no tool `{tool}`; it offers: {}",
            self.server.name,
            if offered.is_empty() {
                "none".to_owned()
            } else {
                offered.join(", ")
            }
        )
    }

    fn check(&self, problems: &mut Vec<String>) {
        for (state, tool) in &self.allowed {
            if !self.offers(tool) {
                problems.push(format!(
                    "state `{state}` lists `{tool}`, but {}",
                    self.not_offered(tool)
                ));
            } else if !self.declared.contains_key(tool) {
                problems.push(format!(
                    "state `{state}` lists tool `{tool}` of server `{}`, which is imported without a kind; \
                     declare it with `.read(\"{tool}\")`, `.write(\"{tool}\")` or `.hybrid(\"{tool}\", ...)` \
                     (MCP's annotations are hints, never taken as the kind)",
                    self.server.name
                ));
            }
        }
        for (tool, declared) in &self.declared {
            if !self.offers(tool) {
                problems.push(format!(
                    "`{tool}` is declared {}, but {}",
                    declared.kind(),
                    self.not_offered(tool)
                ));
            }
            if let Declared::Hybrid { with, .. } = declared {
                match self.declared.get(with) {
                    Some(Declared::Plain(ToolKind::Write)) => {}
                    Some(other) => problems.push(format!(
                        "hybrid `{tool}` is compensated by `{with}`, which is declared {}, not write",
                        other.kind()
                    )),
                    None => problems.push(format!(
                        "hybrid `{tool}` is compensated by `{with}`, which is not imported; declare it with `.write(\"{with}\")`"
                    )),
                }
            }
        }
    }

    fn tools(self, problems: &mut Vec<String>) -> Vec<(McpTool, Vec<String>)> {
        let mut out = Vec::new();
        for (remote, declared) in self.declared {
            let Some(listed) = self.server.tools.iter().find(|t| t.name == remote) else {
                continue;
            };
            let schema = Value::Object((*listed.input_schema).clone());
            let compiled = match agent_core::schema::compiled(&schema) {
                Ok(c) => c,
                Err(e) => {
                    problems.push(format!(
                        "the input schema of `{remote}` of server `{}` does not compile: {e}",
                        self.server.name
                    ));
                    continue;
                }
            };
            let name = imported_name(&self.server.name, &remote);
            let states = self
                .allowed
                .iter()
                .filter(|(_, t)| *t == remote)
                .map(|(s, _)| s.clone())
                .collect();
            let kind = declared.kind();
            let compensation = match declared {
                Declared::Plain(_) => None,
                Declared::Hybrid { with, compensation } => {
                    Some((imported_name(&self.server.name, &with), compensation))
                }
            };
            out.push((
                McpTool {
                    // Tool names are `&'static str` across the runner; an imported tool's
                    // name is made once per import, at start-up.
                    name: Box::leak(name.into_boxed_str()),
                    description: Box::leak(
                        listed
                            .description
                            .as_deref()
                            .unwrap_or_default()
                            .to_owned()
                            .into_boxed_str(),
                    ),
                    kind,
                    policy: self
                        .policies
                        .get(&remote)
                        .cloned()
                        .unwrap_or_else(|| self.policy.clone()),
                    fingerprint: McpTool::fingerprint_of(&schema),
                    schema,
                    compiled,
                    compensation,
                    remote,
                    client: Arc::clone(&self.server.client),
                },
                states,
            ));
        }
        out
    }
}

/// Check every import against its server's tool list and build the [`ImportedTools`] to
/// add to a runner ([`RunnerBuilder::imported_tools`], which checks the states against the
/// agent's graph).
///
/// [`RunnerBuilder::imported_tools`]: agent_core::runner::RunnerBuilder::imported_tools
///
/// # Errors
/// [`ImportError`] listing every problem of every import.
pub fn import(imports: impl IntoIterator<Item = McpImport>) -> Result<ImportedTools, ImportError> {
    let mut problems = Vec::new();
    let mut tools = ImportedTools::new();
    for import in imports {
        import.check(&mut problems);
        for (tool, states) in import.tools(&mut problems) {
            let name = tool.name;
            tools = tools.with(Arc::new(tool));
            for state in states {
                tools = tools.allow(state, name);
            }
        }
    }
    if problems.is_empty() {
        Ok(tools)
    } else {
        Err(ImportError { problems })
    }
}
