//! A connection to one MCP server and the tools it offers.

use std::fmt;
use std::sync::{Arc, OnceLock};

use rmcp::ServiceExt as _;
use rmcp::model::Tool;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{IntoTransport, StreamableHttpClientTransport, TokioChildProcess};

/// The client side of one connection (kept alive as long as a tool of the server is).
pub(crate) type Client = RunningService<RoleClient, ()>;

/// Why a server could not be reached or listed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The child process did not start.
    #[error("MCP server `{server}`: could not start the process: {source}")]
    Spawn {
        /// The server's name.
        server: String,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP client could not be built.
    #[error("MCP server `{server}`: could not build the HTTP client: {message}")]
    Client {
        /// The server's name.
        server: String,
        /// Why.
        message: String,
    },
    /// The protocol's handshake failed.
    #[error("MCP server `{server}`: the handshake failed: {message}")]
    Handshake {
        /// The server's name.
        server: String,
        /// Why.
        message: String,
    },
    /// `tools/list` failed.
    #[error("MCP server `{server}`: listing its tools failed: {message}")]
    List {
        /// The server's name.
        server: String,
        /// Why.
        message: String,
    },
    /// The server's name cannot prefix tool names.
    #[error(
        "MCP server name `{0}` must be non-empty ASCII letters, digits, `_` or `-` (it prefixes the tools' names, which models accept only in that alphabet)"
    )]
    BadName(String),
}

/// A connected MCP server and the tools it listed at connection time.
#[derive(Clone)]
pub struct McpServer {
    pub(crate) name: String,
    pub(crate) client: Arc<Client>,
    pub(crate) tools: Vec<Tool>,
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field(
                "tools",
                &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Start `command` as a child process speaking MCP on its stdin and stdout, and list
    /// its tools. `name` prefixes the imported tools' names (`{name}__{tool}`).
    ///
    /// # Errors
    /// [`ConnectError`] when the process does not start, the handshake or the listing fails.
    pub async fn stdio(name: &str, command: tokio::process::Command) -> Result<Self, ConnectError> {
        Self::connect(name, || {
            TokioChildProcess::new(command).map_err(|source| ConnectError::Spawn {
                server: name.to_owned(),
                source,
            })
        })
        .await
    }

    /// Connect to the streamable HTTP endpoint `url` (`http://host:port/mcp`) and list its
    /// tools, with an HTTP client on rustls with the *ring* provider (the workspace's one).
    ///
    /// # Errors
    /// [`ConnectError`] when the client cannot be built, the handshake or the listing fails.
    pub async fn http(name: &str, url: &str) -> Result<Self, ConnectError> {
        let client = reqwest::Client::builder()
            .use_preconfigured_tls(tls_config().map_err(|message| ConnectError::Client {
                server: name.to_owned(),
                message,
            })?)
            .build()
            .map_err(|e| ConnectError::Client {
                server: name.to_owned(),
                message: e.to_string(),
            })?;
        Self::http_with_client(name, url, client).await
    }

    /// [`http`](Self::http) with your own reqwest client (proxies, headers, timeouts).
    ///
    /// # Errors
    /// [`ConnectError`] when the handshake or the listing fails.
    pub async fn http_with_client(
        name: &str,
        url: &str,
        http: reqwest::Client,
    ) -> Result<Self, ConnectError> {
        Self::connect(name, || {
            Ok(StreamableHttpClientTransport::with_client(
                http,
                StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
            ))
        })
        .await
    }

    /// The one way in for every transport: check the name before the transport is made
    /// (no process is started for a server that could not be named), shake hands, list
    /// the tools.
    async fn connect<T, E, A>(
        name: &str,
        transport: impl FnOnce() -> Result<T, ConnectError>,
    ) -> Result<Self, ConnectError>
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        check_name(name)?;
        let client =
            ().serve(transport()?)
                .await
                .map_err(|e| ConnectError::Handshake {
                    server: name.to_owned(),
                    message: e.to_string(),
                })?;
        let tools = client
            .list_all_tools()
            .await
            .map_err(|e| ConnectError::List {
                server: name.to_owned(),
                message: e.to_string(),
            })?;
        Ok(Self {
            name: name.to_owned(),
            client: Arc::new(client),
            tools,
        })
    }

    /// The server's name (the prefix of its imported tools' names).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tools the server listed when it was connected.
    #[must_use]
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }
}

fn check_name(name: &str) -> Result<(), ConnectError> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ConnectError::BadName(name.to_owned()))
    }
}

/// The *ring* provider. rustls 0.23.48 deprecates it, for lacking post-quantum key
/// exchange; it stays because it is the one sqlx compiles (aws-lc-rs would build a second
/// crypto library into every user's binary).
#[allow(
    deprecated,
    reason = "ring is the provider sqlx compiles; rustls deprecates it for lacking post-quantum key exchange"
)]
fn ring_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// rustls on the *ring* provider, the platform's verifier or else the bundled Mozilla
/// roots; built once per process, never installed as the process-wide default.
fn tls_config() -> Result<rustls::ClientConfig, String> {
    static CONFIG: OnceLock<Result<rustls::ClientConfig, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(ring_provider());
            let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?;
            Ok(match rustls_platform_verifier::Verifier::new(provider) {
                Ok(verifier) => builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(verifier))
                    .with_no_client_auth(),
                Err(_) => builder
                    .with_root_certificates(rustls::RootCertStore {
                        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
                    })
                    .with_no_client_auth(),
            })
        })
        .clone()
}
