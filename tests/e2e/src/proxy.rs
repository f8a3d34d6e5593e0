//! A TCP proxy between a worker and PostgreSQL that injects network faults:
//!
//! - **blackhole**: stop forwarding in both directions (bytes wait in the kernel, as packets
//!   do during a partition that TCP rides out), then deliver them when it heals;
//! - **reset**: close every proxied connection at once;
//! - **latency**: delay every chunk;
//! - **cut mid-result**: forward half of a server-to-client chunk, then close the
//!   connection (a result cut off mid-message, an acknowledgement lost).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

/// The proxy's controls.
#[derive(Debug)]
pub struct Proxy {
    /// Where clients connect.
    pub port: u16,
    paused: watch::Sender<bool>,
    latency_ms: AtomicU64,
    cut_every: AtomicU64,
    chunks: AtomicU64,
    reset: Notify,
    /// Connections cut by `cut_every`.
    pub cuts: AtomicU64,
    /// Connections accepted.
    pub accepted: AtomicU64,
    stopped: AtomicBool,
}

impl Proxy {
    /// Listen on a free port of 127.0.0.1, forwarding to `upstream` (`host:port`).
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start(upstream: String) -> Arc<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let (paused, _) = watch::channel(false);
        let proxy = Arc::new(Self {
            port,
            paused,
            latency_ms: AtomicU64::new(0),
            cut_every: AtomicU64::new(0),
            chunks: AtomicU64::new(0),
            reset: Notify::new(),
            cuts: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        });
        let p = Arc::clone(&proxy);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if p.stopped.load(Ordering::SeqCst) {
                    break;
                }
                p.accepted.fetch_add(1, Ordering::SeqCst);
                let p = Arc::clone(&p);
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        p.serve(client, server).await;
                    }
                });
            }
        });
        proxy
    }

    /// `postgres://…@127.0.0.1:PORT/…` for a URL whose host and port are replaced.
    #[must_use]
    pub fn url_for(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
        let (auth, hostpath) = rest.rsplit_once('@').map_or(("", rest), |(a, h)| (a, h));
        let path = hostpath.find('/').map_or("", |i| &hostpath[i..]);
        let at = if auth.is_empty() { "" } else { "@" };
        format!("{scheme}://{auth}{at}127.0.0.1:{}{path}", self.port)
    }

    /// Stop forwarding (true) or resume (false).
    pub fn blackhole(&self, on: bool) {
        let _ = self.paused.send(on);
    }

    /// Close every proxied connection now.
    pub fn reset_all(&self) {
        self.reset.notify_waiters();
    }

    /// Delay each chunk by `ms`.
    pub fn set_latency(&self, ms: u64) {
        self.latency_ms.store(ms, Ordering::SeqCst);
    }

    /// Cut one server-to-client chunk in `n` mid-way (0: never).
    pub fn set_cut_every(&self, n: u64) {
        self.cut_every.store(n, Ordering::SeqCst);
    }

    async fn serve(self: Arc<Self>, client: TcpStream, server: TcpStream) {
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (cr, cw) = client.into_split();
        let (sr, sw) = server.into_split();
        let up = self.pump(cr, sw, false);
        let down = self.pump(sr, cw, true);
        tokio::select! {
            () = up => {}
            () = down => {}
            () = self.reset.notified() => {}
        }
    }

    async fn pump(
        &self,
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        to_client: bool,
    ) {
        let mut buf = vec![0_u8; 16 * 1024];
        let mut paused = self.paused.subscribe();
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            while *paused.borrow_and_update() {
                if paused.changed().await.is_err() {
                    return;
                }
            }
            let latency = self.latency_ms.load(Ordering::SeqCst);
            if latency > 0 {
                tokio::time::sleep(Duration::from_millis(latency)).await;
            }
            let every = self.cut_every.load(Ordering::SeqCst);
            if to_client && every > 0 && n > 1 {
                let c = self.chunks.fetch_add(1, Ordering::SeqCst) + 1;
                if c.is_multiple_of(every) {
                    let _ = to.write_all(&buf[..n / 2]).await;
                    let _ = to.shutdown().await;
                    self.cuts.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            }
            if to.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.reset.notify_waiters();
    }
}
