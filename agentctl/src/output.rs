//! How results are printed: tables and colours for people, JSON for scripts.

use std::io::{IsTerminal, Write};

use agent_core::store::{CallStatus, Millis, RunStatus};
use comfy_table::{
    Cell, Color, ColumnConstraint, ContentArrangement, LineStyle, Table, TableStyle,
};
use owo_colors::OwoColorize;
use serde::Serialize;

use crate::cli::{ColorChoice, Global};
use crate::error::CliError;

/// Where and how to print.
// Four independent switches read off the terminal and the flags, not states of one thing.
#[allow(clippy::struct_excessive_bools)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Output {
    /// Print JSON.
    pub json: bool,
    /// Colour stdout.
    pub color: bool,
    /// Colour stderr.
    pub color_err: bool,
    /// stderr is a terminal (progress indicators).
    pub tty_err: bool,
    /// The width tables are fitted to: `--width`, else the terminal's on a terminal.
    pub width: Option<u16>,
}

impl Output {
    pub(crate) fn new(global: &Global) -> Self {
        let tty = std::io::stdout().is_terminal();
        let tty_err = std::io::stderr().is_terminal();
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let (color, color_err) = match global.color {
            ColorChoice::Always => (true, true),
            ColorChoice::Never => (false, false),
            ColorChoice::Auto => (tty && !no_color, tty_err && !no_color),
        };
        // A terminal narrower than 60 columns is not worth fitting a table to.
        let terminal = tty
            .then(|| Table::new().width())
            .flatten()
            .filter(|w| *w >= 60);
        Self {
            width: global.width.or(terminal),
            json: global.json,
            color,
            color_err,
            tty_err,
        }
    }

    /// A table in the house style: no borders, a rule under the header, bold header on a
    /// terminal; wrapped to the terminal's width only on a terminal.
    pub(crate) fn table<I, S>(self, header: I) -> Table
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut table = Table::new();
        table.load_style(TableStyle::new().header_separator(LineStyle::none().fill('─')));
        // Fit to the width asked for or the terminal's; in a pipe, never wrap.
        match self.width {
            Some(width) => {
                table.set_width(width);
                table.set_content_arrangement(ContentArrangement::Dynamic);
            }
            None => {
                table.set_content_arrangement(ContentArrangement::Disabled);
            }
        }
        if self.color {
            table.enforce_styling();
        } else {
            table.force_no_tty();
        }
        let cells: Vec<Cell> = header
            .into_iter()
            .map(|h| {
                let c = Cell::new(h.into());
                if self.color {
                    c.add_attribute(comfy_table::Attribute::Bold)
                } else {
                    c
                }
            })
            .collect();
        table.set_header(cells);
        // No borders: columns are separated by two spaces, the first starts at the margin.
        // Only the last column (details, errors) wraps on a narrow terminal.
        let last = table.column_count().saturating_sub(1);
        for (i, column) in table.column_iter_mut().enumerate() {
            column.set_padding((0, 2));
            if i < last {
                column.set_constraint(ColumnConstraint::ContentWidth);
            } else {
                // Wrapped, but never to a sliver: where the other columns leave less, the
                // table is wider than asked rather than an error one letter a line.
                column.set_constraint(ColumnConstraint::LowerBoundary(comfy_table::Width::Fixed(
                    MIN_LAST_COLUMN,
                )));
            }
        }
        table
    }

    /// Print a table, trimming trailing blanks of every line (stable snapshots, clean pipes).
    // A method like the others, so that every print goes through `cx.out`.
    #[allow(clippy::unused_self)]
    pub(crate) fn print_table(self, table: &Table) {
        let text = table.to_string();
        for line in text.lines() {
            stdout_line(format_args!("{}", line.trim_end()));
        }
    }

    #[allow(clippy::unused_self)]
    pub(crate) fn print_json<T: Serialize + ?Sized>(self, value: &T) {
        let text = serde_json::to_string_pretty(value).unwrap_or_else(|e| {
            serde_json::json!({ "error": format!("could not serialize output: {e}") }).to_string()
        });
        stdout_line(format_args!("{text}"));
    }

    /// A status cell, coloured by what it means.
    pub(crate) fn status_cell(self, status: RunStatus) -> Cell {
        let color = match status {
            RunStatus::Completed => Color::Green,
            RunStatus::Running => Color::Cyan,
            RunStatus::Waiting | RunStatus::Compensating => Color::Yellow,
            RunStatus::Compensated | RunStatus::Cancelled => Color::Magenta,
            RunStatus::Failed
            | RunStatus::Quarantined
            | RunStatus::DeadLettered
            | RunStatus::Terminated => Color::Red,
        };
        self.cell(status.as_str(), color)
    }

    pub(crate) fn call_status_cell(self, status: CallStatus) -> Cell {
        let color = match status {
            CallStatus::Succeeded => Color::Green,
            CallStatus::Started => Color::Yellow,
            CallStatus::Failed => Color::Red,
        };
        self.cell(status.as_str(), color)
    }

    pub(crate) fn cell(self, text: impl Into<String>, color: Color) -> Cell {
        let c = Cell::new(text.into());
        if self.color { c.fg(color) } else { c }
    }

    pub(crate) fn dim_cell(self, text: impl Into<String>) -> Cell {
        self.cell(text, Color::DarkGrey)
    }

    /// A heading line.
    pub(crate) fn heading(self, text: &str) -> String {
        if self.color {
            text.bold().to_string()
        } else {
            text.to_owned()
        }
    }

    pub(crate) fn green(self, text: &str) -> String {
        if self.color {
            text.green().to_string()
        } else {
            text.to_owned()
        }
    }

    pub(crate) fn red(self, text: &str) -> String {
        if self.color {
            text.red().to_string()
        } else {
            text.to_owned()
        }
    }

    pub(crate) fn yellow(self, text: &str) -> String {
        if self.color {
            text.yellow().to_string()
        } else {
            text.to_owned()
        }
    }

    pub(crate) fn dim(self, text: &str) -> String {
        if self.color {
            text.dimmed().to_string()
        } else {
            text.to_owned()
        }
    }

    /// A note on stderr (so stdout stays clean for pipes).
    pub(crate) fn note(self, text: &str) {
        if self.color_err {
            eprintln!("{} {text}", "note:".cyan().bold());
        } else {
            eprintln!("note: {text}");
        }
    }

    pub(crate) fn warn(self, text: &str) {
        if self.color_err {
            eprintln!("{} {text}", "warning:".yellow().bold());
        } else {
            eprintln!("warning: {text}");
        }
    }

    /// Print an error the way `main` reports it; in JSON mode, as a JSON object on stdout too.
    pub(crate) fn error(self, e: &CliError) {
        if self.json {
            self.print_json(&serde_json::json!({
                "error": e.message,
                "hint": e.hint,
            }));
        }
        if self.color_err {
            eprintln!("{} {}", "error:".red().bold(), e.message);
            if let Some(h) = &e.hint {
                eprintln!("  {} {h}", "hint:".cyan().bold());
            }
        } else {
            eprintln!("error: {}", e.message);
            if let Some(h) = &e.hint {
                eprintln!("  hint: {h}");
            }
        }
    }
}

/// `2026-11-30 04:50:01.123Z` (UTC).
pub(crate) fn fmt_time(ms: Millis) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The narrowest the last column of a table wraps to.
const MIN_LAST_COLUMN: u16 = 24;

/// `3s ago`, `5m ago`, `2h ago`, `4d ago`.
pub(crate) fn fmt_age(ms: Millis, now: Millis) -> String {
    let secs = (now - ms).max(0) / 1000;
    if secs < 60 {
        format!("{secs}s ago")
    } else if secs < 3600 {
        format!("{}m ago", secs / 60)
    } else if secs < 86_400 {
        format!("{}h ago", secs / 3600)
    } else {
        format!("{}d ago", secs / 86_400)
    }
}

/// `850 ms`, `1.25 s`, `2m 05s`.
pub(crate) fn fmt_duration_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        #[allow(clippy::cast_precision_loss)]
        let s = ms as f64 / 1000.0;
        format!("{s:.2} s")
    } else {
        format!("{}m {:02}s", ms / 60_000, ms % 60_000 / 1000)
    }
}

/// Shorten `text` to at most `max` characters, with an ellipsis.
pub(crate) fn ellipsize(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian, UTC).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    #[allow(clippy::cast_sign_loss, clippy::cast_possible_truncation)]
    (if m <= 2 { y + 1 } else { y }, m as u32, d as u32)
}

/// Write one line to stdout (see [`stdout_text`]).
pub(crate) fn stdout_line(line: std::fmt::Arguments<'_>) {
    stdout_text(&format!("{line}\n"));
}

/// Write text to stdout. A reader that closed the pipe (`agentctl runs | head`, or
/// `agentctl graph … | dot` where `dot` is missing) is not a failure of ours: the process
/// ends quietly with status 0, as `cat` and `ls` do, instead of panicking.
pub(crate) fn stdout_text(text: &str) {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            std::process::exit(1);
        }
    }
}

/// `println!` through [`stdout_line`].
macro_rules! outln {
    () => {
        $crate::output::stdout_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::stdout_line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_in_utc() {
        assert_eq!(fmt_time(0), "1970-01-01 00:00:00.000Z");
        assert_eq!(fmt_time(1_796_000_401_123), "2026-11-30 01:00:01.123Z");
        assert_eq!(fmt_time(951_782_400_000), "2000-02-29 00:00:00.000Z");
    }

    #[test]
    fn durations_and_ages() {
        assert_eq!(fmt_duration_ms(12), "12 ms");
        assert_eq!(fmt_duration_ms(1250), "1.25 s");
        assert_eq!(fmt_duration_ms(125_000), "2m 05s");
        assert_eq!(fmt_age(0, 59_000), "59s ago");
        assert_eq!(fmt_age(0, 7_200_000), "2h ago");
        assert_eq!(ellipsize("abcdef", 4), "abc…");
        assert_eq!(ellipsize("abc", 4), "abc");
    }
}
