//! The real brokers the tests run: `nats-server -js` and `mosquitto`, each on a free
//! loopback port with its data in a temporary folder, stopped when dropped.
//!
//! When a server's program is missing the test says so and is skipped; under CI (the `CI`
//! variable set) it fails instead, since CI installs both (`.ci/run`).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// A server process, restartable on the same port with the same data.
pub(crate) struct Server {
    name: &'static str,
    program: PathBuf,
    args: Vec<String>,
    port: u16,
    child: Option<Child>,
    dir: TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Server {
    /// `nats-server` with JetStream, or `None` (the test is skipped) when it is not installed.
    pub(crate) fn nats() -> Option<Self> {
        let name = "nats-server";
        let program = find(name, "nats-server")?;
        let dir = TempDir::new().unwrap();
        let port = free_port();
        let args = vec![
            "-js".to_owned(),
            "-a".to_owned(),
            "127.0.0.1".to_owned(),
            "-p".to_owned(),
            port.to_string(),
            "-sd".to_owned(),
            dir.path().join("jetstream").display().to_string(),
        ];
        Some(Self::started(name, program, args, port, dir))
    }

    /// `mosquitto` keeping sessions on disk, or `None` (the test is skipped) when it is not
    /// installed.
    pub(crate) fn mosquitto() -> Option<Self> {
        let name = "mosquitto";
        let program = find(name, "mosquitto")?;
        let dir = TempDir::new().unwrap();
        let port = free_port();
        let config = dir.path().join("mosquitto.conf");
        // `user root`: run as root (CI), mosquitto would switch to its own user, which
        // cannot write the temporary folder.
        let user = if is_root() { "user root\n" } else { "" };
        std::fs::write(
            &config,
            format!(
                "listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\n\
                 persistence_location {}/\n{user}",
                dir.path().display()
            ),
        )
        .unwrap();
        let args = vec!["-c".to_owned(), config.display().to_string()];
        Some(Self::started(name, program, args, port, dir))
    }

    fn started(
        name: &'static str,
        program: PathBuf,
        args: Vec<String>,
        port: u16,
        dir: TempDir,
    ) -> Self {
        let mut server = Self {
            name,
            program,
            args,
            port,
            child: None,
            dir,
        };
        server.start();
        server
    }

    /// The server's port on 127.0.0.1.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Its data folder.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Start it (again), and wait until it accepts connections.
    pub(crate) fn start(&mut self) {
        assert!(self.child.is_none(), "{} runs already", self.name);
        let log =
            std::fs::File::create(self.dir.path().join(format!("{}.log", self.name))).unwrap();
        let child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.program.display()));
        self.child = Some(child);
        let address = SocketAddr::from(([127, 0, 0, 1], self.port));
        let start = Instant::now();
        while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{} does not listen on {address}; its log: {}",
                self.name,
                std::fs::read_to_string(self.log()).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop it (SIGTERM, so that mosquitto writes its sessions to disk), and wait for it.
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let start = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if start.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.wait();
        }
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join(format!("{}.log", self.name))
    }
}

/// The program's path: on `PATH`, or in an `sbin` folder that a user's `PATH` may lack
/// (Debian installs both servers in `/usr/sbin`).
fn find(program: &'static str, package: &str) -> Option<PathBuf> {
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
        std::env::var_os("CI").is_none(),
        "{program} is not installed, and CI must run the real-broker tests (apt-get install {package})"
    );
    eprintln!("skipped: {program} is not installed (apt-get install {package})");
    None
}

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}
