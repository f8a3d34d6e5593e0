//! What every example does with its terminal: [`outln!`](crate::outln) prints a line and
//! ends the process quietly when the reader closed the pipe (`cargo run --example checkout
//! | head -1`), as `cat` does, instead of panicking; [`init_logging`] writes log lines to
//! stderr, coloured only on a terminal.

use std::io::{IsTerminal as _, Write as _};

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
pub fn init_logging(default: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default.into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
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
