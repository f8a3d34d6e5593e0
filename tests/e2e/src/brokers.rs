//! The real message brokers of the triggers soak: `nats-server -js` and `mosquitto`, each on
//! a free loopback port with its data in a temporary folder, stopped when dropped (as
//! `agent-triggers/tests/common/servers.rs` starts them for the trigger tests); and
//! Prometheus, started the same way for the metrics test.
//!
//! A server that is not installed makes the test say so loudly and pass; under `CI=true`
//! it fails instead, since CI installs both (`apt-get install nats-server mosquitto`).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::db::ci;

/// A broker process, stopped (SIGTERM, then SIGKILL) and its folder deleted on drop.
#[derive(Debug)]
pub struct Broker {
    name: &'static str,
    port: u16,
    child: Option<Child>,
    dir: TempDir,
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let start = Instant::now();
            while matches!(child.try_wait(), Ok(None)) {
                if start.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.wait();
        }
    }
}

impl Broker {
    /// `nats-server` with JetStream, or `None` (after a loud message; a panic under CI)
    /// when it is not installed.
    ///
    /// # Panics
    /// Under CI when it is missing; when it does not start listening.
    #[must_use]
    pub fn nats(test: &str) -> Option<Self> {
        let program = find(test, "nats-server", "nats-server")?;
        let dir = TempDir::new().expect("a temporary folder");
        let port = free_port();
        let args = [
            "-js".to_owned(),
            "-a".to_owned(),
            "127.0.0.1".to_owned(),
            "-p".to_owned(),
            port.to_string(),
            "-sd".to_owned(),
            dir.path().join("jetstream").display().to_string(),
        ];
        Some(Self::start("nats-server", &program, &args, port, dir))
    }

    /// `mosquitto` keeping persistent sessions, with no bound on the messages it queues
    /// for a session whose client is away (a killed worker's), or `None` (after a loud
    /// message; a panic under CI) when it is not installed.
    ///
    /// # Panics
    /// Under CI when it is missing; when it does not start listening.
    #[must_use]
    pub fn mosquitto(test: &str) -> Option<Self> {
        let program = find(test, "mosquitto", "mosquitto")?;
        let dir = TempDir::new().expect("a temporary folder");
        let port = free_port();
        let config = dir.path().join("mosquitto.conf");
        // `user root`: as root (CI), mosquitto would switch to its own user, which cannot
        // write the temporary folder. `max_queued_messages 0`: no bound (1,000 by default,
        // past which QoS 1 messages for an absent client are dropped).
        let user = if is_root() { "user root\n" } else { "" };
        std::fs::write(
            &config,
            format!(
                "listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\n\
                 persistence_location {}/\nmax_queued_messages 0\n{user}",
                dir.path().display()
            ),
        )
        .expect("mosquitto.conf");
        let args = ["-c".to_owned(), config.display().to_string()];
        Some(Self::start("mosquitto", &program, &args, port, dir))
    }

    /// Prometheus scraping `target`'s `/metrics` every 500 ms, with its data in a folder
    /// of its own, or `None` (after a loud message; a panic under CI) when it is not
    /// installed (`scripts/prometheus` finds or installs it and names it in
    /// `PROMETHEUS_BIN`).
    ///
    /// # Panics
    /// Under CI when it is missing; when it does not start listening.
    #[must_use]
    pub fn prometheus(test: &str, target: SocketAddr) -> Option<Self> {
        let program = match std::env::var_os("PROMETHEUS_BIN") {
            Some(bin) => PathBuf::from(bin),
            None => find(test, "prometheus", "prometheus")?,
        };
        let dir = TempDir::new().expect("a temporary folder");
        let port = free_port();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n\
                 scrape_configs:\n  - job_name: worker\n    static_configs:\n      \
                 - targets: ['{target}']\n"
            ),
        )
        .expect("prometheus.yml");
        let args = [
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.path().join("data").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
        ];
        Some(Self::start("prometheus", &program, &args, port, dir))
    }

    fn start(name: &'static str, program: &Path, args: &[String], port: u16, dir: TempDir) -> Self {
        let log_path = dir.path().join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path).expect("log file");
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        let broker = Self {
            name,
            port,
            child: Some(child),
            dir,
        };
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let start = Instant::now();
        while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{name} does not listen on {address}; its log: {}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        broker
    }

    /// Its port on 127.0.0.1.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL (`nats://…` for NATS; `http://…` for Prometheus; `127.0.0.1:port` for
    /// mosquitto).
    #[must_use]
    pub fn url(&self) -> String {
        match self.name {
            "nats-server" => format!("nats://127.0.0.1:{}", self.port),
            "prometheus" => format!("http://127.0.0.1:{}", self.port),
            _ => format!("127.0.0.1:{}", self.port),
        }
    }

    /// Its data folder (and log).
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// The program's path: on `PATH`, or in an `sbin` folder a user's `PATH` may lack (Debian
/// installs both servers in `/usr/sbin`).
fn find(test: &str, program: &'static str, package: &str) -> Option<PathBuf> {
    let runs = |path: &Path| {
        Command::new(path)
            .arg("--help")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    let found = std::iter::once(PathBuf::from(program))
        .chain(["/usr/sbin", "/usr/local/sbin"].map(|dir| Path::new(dir).join(program)))
        .find(|path| runs(path));
    if found.is_some() {
        return found;
    }
    assert!(
        !ci(),
        "{test}: {program} is not installed, and CI must run the real-broker tests \
         (apt-get install {package})"
    );
    eprintln!("\n*** SKIPPED {test}: {program} is not installed (apt-get install {package}) ***\n");
    None
}

/// A loopback port nothing listens on now (a server to start, or one that stays down).
#[must_use]
pub fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map_or(54_222, |a| a.port())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}
