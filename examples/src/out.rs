//! What every example does with its terminal: [`outln!`](crate::outln) prints a line and
//! ends the process quietly when the reader closed the pipe (`cargo run --example checkout
//! | head -1`), as `cat` does, instead of panicking; [`init_logging`] writes log lines to
//! stderr, coloured only on a terminal, and exports traces when a collector is named.

use std::io::Write as _;

/// Write one line to stdout. A reader that closed the pipe is not a failure of the
/// example: the process ends with status 0 (the runs it committed are in the store, as
/// after any stop). Any other write error ends it with status 1.
pub fn stdout_line(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            std::process::exit(1);
        }
    }
}

/// `println!` through [`stdout_line`].
#[macro_export]
macro_rules! outln {
    () => {
        $crate::out::stdout_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::stdout_line(format_args!($($arg)*))
    };
}

/// Log to stderr at `RUST_LOG`'s levels (`default` when it is unset), with colour codes
/// only when stderr is a terminal: a log piped to a file or `grep` reads as plain text.
/// `AGENT_LOG_FORMAT=json` writes JSON lines instead, and `OTEL_EXPORTER_OTLP_ENDPOINT`
/// exports the example's traces to that collector (`docs/observability.md`): keep the
/// guard until the end of `main`, which flushes the spans still queued.
#[must_use]
pub fn init_logging(default: &str) -> Option<durable_agents::observe::TelemetryGuard> {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| default.to_owned());
    match durable_agents::observe::Telemetry::from_env()
        .and_then(|t| t.log_filter(filter).install())
    {
        Ok(guard) => Some(guard),
        Err(e) => {
            eprintln!("warning: no logs or traces: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    /// The example binary, built by Cargo for this package's tests.
    fn checkout() -> Option<std::path::PathBuf> {
        let exe = std::env::current_exe().ok()?;
        let examples = exe.parent()?.parent()?.join("examples").join("checkout");
        examples.exists().then_some(examples)
    }

    #[test]
    fn an_example_whose_reader_closed_the_pipe_ends_quietly() {
        let Some(example) = checkout() else {
            println!("skipped: the checkout example is not built (cargo test builds it)");
            return;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(example)
            .current_dir(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the example");
        // The reader goes away before reading a line, as `| head -0` would.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "exit {:?}, stderr: {stderr}",
            out.status
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
