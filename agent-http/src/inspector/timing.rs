//! A run's timing, laid out from its durable history alone (no trace collector): one row
//! per step, its journal entries under it, and the time it spent waiting, each placed on
//! one time axis as percentages of it.
//!
//! A step of version `v` runs from the commit of version `v - 1` to its own commit, and its
//! calls are the journal entries of version `v - 1` (the version a step starts from). When
//! version `v - 1` left the run waiting, the step's first part is the wait: until its first
//! call, or its commit when it made none.
//!
//! The bars are positioned by classes (`at-N`, `w-N`, N a whole percent) that the
//! stylesheet defines ([`bar_rules`]): the pages' Content-Security-Policy allows no inline
//! style, and classes keep the page readable without JavaScript.

use std::fmt::Write as _;

use agent_core::graph::GraphDescription;
use agent_core::store::{
    CallStatus, EntryKind, JournalEntry, Millis, RunRecord, RunStatus, TransitionKind,
    TransitionRecord, WaitingFor,
};

/// A bar's place on the axis, in whole percents: its start, and its width (at most what is
/// left of the axis).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bar {
    pub(crate) at: u32,
    pub(crate) width: u32,
}

/// What a row of the waterfall stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowKind {
    /// A committed step, or the step under way.
    Step,
    /// The time a step waited (a signal, a timer, children) before it ran.
    Wait,
    /// A journal entry of the step.
    Entry(EntryKind),
}

impl RowKind {
    /// The row's class, and the word that says what it is.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Step => "step",
            Self::Wait => "wait",
            Self::Entry(kind) => kind.as_str(),
        }
    }
}

/// One row of the waterfall, as the page shows it.
#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) kind: RowKind,
    /// For a step, the version it committed (or would commit); for an entry, its version
    /// (the one its step started from).
    pub(crate) version: u64,
    /// An entry's index within its step.
    pub(crate) seq: Option<u32>,
    /// What the row is, in words: `v3 Decide → Pay`, `Charge (write)`,
    /// ``waiting for signal `confirm` ``.
    pub(crate) label: String,
    /// A step's run status after it, or an entry's call status.
    pub(crate) status: &'static str,
    /// When it started, after the run's creation (`+1.2 s`).
    pub(crate) start: String,
    /// How long it took (`340 ms`), `so far` when it is under way.
    pub(crate) duration: String,
    /// An entry's attempts (0 for steps and waits).
    pub(crate) attempts: u32,
    /// An entry's error code and class.
    pub(crate) error: String,
    /// Still under way (the step or wait at the run's head, a call with no result).
    pub(crate) ongoing: bool,
    pub(crate) bar: Bar,
}

/// A run's waterfall, over the steps read.
#[derive(Debug)]
pub(crate) struct Waterfall {
    pub(crate) rows: Vec<Row>,
    /// The time the axis covers (`4 min 2 s`).
    pub(crate) span: String,
    /// The time waited in all (signals, timers, children) over the steps shown.
    pub(crate) waited: String,
}

/// The time axis: from `start` to `end`, both in ms since the epoch.
#[derive(Clone, Copy, Debug)]
struct Axis {
    start: Millis,
    end: Millis,
}

impl Axis {
    /// The bar from `from` to `to`, clamped to the axis; at least 0 wide.
    fn bar(self, from: Millis, to: Millis) -> Bar {
        let span = (self.end - self.start).max(1);
        let pct = |t: Millis| -> i64 { (t.clamp(self.start, self.end) - self.start) * 100 };
        let at = u32::try_from(pct(from) / span).unwrap_or(0).min(100);
        // The end rounded up, so that a short call still shows as a sliver.
        let end = u32::try_from((pct(to.max(from)) + span - 1) / span).unwrap_or(100);
        Bar {
            at,
            width: end.min(100).saturating_sub(at),
        }
    }
}

/// Everything [`layout`] reads.
pub(crate) struct Inputs<'a> {
    pub(crate) run: &'a RunRecord,
    /// Transitions by version: the one before the first step shown, then every step shown.
    pub(crate) history: &'a [TransitionRecord],
    /// The journal entries of those steps (and of the step under way), by `(version, seq)`.
    pub(crate) journal: &'a [JournalEntry],
    /// The run's graph, to name what a past wait waited for.
    pub(crate) graph: Option<&'a GraphDescription>,
    /// Whether the last transition read is the run's head (the step under way shows).
    pub(crate) at_head: bool,
    pub(crate) now: Millis,
}

/// The waterfall of `inputs`' steps.
pub(crate) fn layout(inputs: &Inputs<'_>) -> Waterfall {
    let Inputs {
        run,
        history,
        journal,
        graph,
        at_head,
        now,
    } = *inputs;
    let Some(base) = history.first() else {
        return Waterfall {
            rows: Vec::new(),
            span: duration(0),
            waited: duration(0),
        };
    };
    let under_way = at_head && !run.status.is_final();
    let last_commit = history.last().map_or(base.created_at, |t| t.created_at);
    let last_entry = journal
        .iter()
        .map(|e| end_of(e, now, under_way))
        .max()
        .unwrap_or(last_commit);
    let axis = Axis {
        start: base.created_at,
        end: if under_way {
            now.max(last_commit)
        } else {
            last_commit.max(last_entry)
        },
    };
    let entries_of = |version: u64| journal.iter().filter(move |e| e.version == version);
    let mut rows = Vec::new();
    let mut waited = 0;
    let mut steps: Vec<(&TransitionRecord, Option<&TransitionRecord>)> = history
        .windows(2)
        .map(|pair| (&pair[0], Some(&pair[1])))
        .collect();
    if under_way {
        steps.push((history.last().unwrap_or(base), None));
    }
    for (before, after) in steps {
        let from = before.created_at;
        let to = after.map_or(axis.end, |t| t.created_at);
        let first_call = entries_of(before.version).map(|e| e.started_at).min();
        // The wait, when the step started from one: until its first call, or its commit.
        let wait_until = (before.status == RunStatus::Waiting)
            .then(|| first_call.map_or(to, |c| c.clamp(from, to)));
        waited += wait_until.map_or(0, |until| until - from);
        let wait = wait_until.map(|until| {
            let open = after.is_none() && first_call.is_none();
            let what = waited_for(
                run,
                before,
                entries_of(before.version.saturating_sub(1)),
                graph,
            );
            Row {
                kind: RowKind::Wait,
                version: before.version + 1,
                seq: None,
                label: format!("waiting for {what}"),
                status: RunStatus::Waiting.as_str(),
                start: offset(run, from),
                duration: ongoing(until - from, open),
                attempts: 0,
                error: String::new(),
                ongoing: open,
                bar: axis.bar(from, until),
            }
        });
        let (label, status) = if let Some(t) = after {
            (step_label(t), t.status.as_str())
        } else {
            let how = if run.status == RunStatus::Waiting {
                "waiting"
            } else if run.lease_owner.is_none() && first_call.is_none() {
                "queued: no worker holds it"
            } else {
                "under way"
            };
            let version = before.version + 1;
            (
                format!("v{version} in {} ({how})", before.to_state),
                run.status.as_str(),
            )
        };
        // The step first: its wait and its calls read as its parts.
        rows.push(Row {
            kind: RowKind::Step,
            version: before.version + 1,
            seq: None,
            label,
            status,
            start: offset(run, from),
            duration: ongoing(to - from, after.is_none()),
            attempts: 0,
            error: String::new(),
            ongoing: after.is_none(),
            bar: axis.bar(from, to),
        });
        rows.extend(wait);
        for e in entries_of(before.version) {
            let end = end_of(e, now, under_way && after.is_none());
            let open = e.status == CallStatus::Started && after.is_none();
            rows.push(Row {
                kind: RowKind::Entry(e.kind),
                version: e.version,
                seq: Some(e.seq),
                label: match e.tool_kind {
                    Some(k) => format!("{} ({k})", e.name),
                    None => e.name.clone(),
                },
                status: e.status.as_str(),
                start: offset(run, e.started_at),
                duration: ongoing(
                    if open {
                        end - e.started_at
                    } else {
                        i64::try_from(e.duration_ms).unwrap_or(i64::MAX)
                    },
                    open,
                ),
                attempts: e.attempts,
                error: [
                    e.error_code.clone(),
                    e.error_class.map(|c| format!("({c:?})")),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" "),
                ongoing: open,
                bar: axis.bar(e.started_at, end),
            });
        }
    }
    Waterfall {
        rows,
        span: duration(axis.end - axis.start),
        waited: duration(waited),
    }
}

/// When entry `e` ended: its finish, or its start and duration; now for a call of the step
/// under way that has no result yet.
fn end_of(e: &JournalEntry, now: Millis, under_way: bool) -> Millis {
    match e.finished_at {
        Some(at) => at,
        None if under_way && e.status == CallStatus::Started => now.max(e.started_at),
        None => e.started_at + i64::try_from(e.duration_ms).unwrap_or(0),
    }
}

/// `v3 Decide → Pay`, with the transition's kind when it is not a step's edge.
fn step_label(t: &TransitionRecord) -> String {
    let mut label = format!("v{} {} → {}", t.version, t.from_state, t.to_state);
    if t.kind != TransitionKind::Step {
        let _ = write!(label, " ({})", t.kind.as_str());
    }
    label
}

/// What the run waited for after `waiting` (a transition into a wait): the run's own wait
/// when that is its head, children when the step that waited started some, else what the
/// graph declares for the state.
fn waited_for<'a>(
    run: &RunRecord,
    waiting: &TransitionRecord,
    mut calls: impl Iterator<Item = &'a JournalEntry>,
    graph: Option<&GraphDescription>,
) -> String {
    if waiting.version == run.version
        && let Some(w) = &run.waiting_for
    {
        return wait_words(w);
    }
    if calls.any(|e| e.kind == EntryKind::Child) {
        return "its children".to_owned();
    }
    let state = graph.and_then(|g| g.states.iter().find(|s| s.name == waiting.to_state));
    match state {
        Some(s) if s.wait.is_some() => {
            format!(
                "signal `{}`",
                s.wait.as_ref().map_or("", |w| w.signal.as_str())
            )
        }
        Some(s) if s.timer.is_some() => "its timer".to_owned(),
        _ => format!("a wake-up in {}", waiting.to_state),
    }
}

/// A wait in words: ``signal `confirm` ``, `its timer`, `all its children`, `its first
/// child`.
fn wait_words(w: &WaitingFor) -> String {
    match w {
        WaitingFor::Signal(name) => format!("signal `{name}`"),
        WaitingFor::AllChildren => "all its children".to_owned(),
        WaitingFor::FirstChild => "its first child".to_owned(),
        WaitingFor::Timer => "its timer".to_owned(),
        WaitingFor::Capacity(_) => format!("room under `{}`", w.limit().unwrap_or_default()),
    }
}

/// `+1.2 s`: how long after the run's creation `at` is.
fn offset(run: &RunRecord, at: Millis) -> String {
    format!("+{}", duration(at - run.created_at))
}

fn ongoing(ms: i64, open: bool) -> String {
    if open {
        format!("{} so far", duration(ms))
    } else {
        duration(ms)
    }
}

/// A duration for people: `340 ms`, `1.2 s`, `3 min 4 s`, `2 h 3 min`, `1 d 2 h`.
pub(crate) fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    let s = ms / 1000;
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{}.{} s", s, ms % 1000 / 100),
        60_000..3_600_000 => format!("{} min {} s", s / 60, s % 60),
        3_600_000..86_400_000 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The stylesheet's rules that place bars: `.at-N` (left N%) and `.w-N` (width N%).
pub(crate) fn bar_rules() -> String {
    let mut css =
        String::from("\n/* Waterfall bars, generated (agent-http/src/inspector/timing.rs). */\n");
    for n in 0..=100 {
        let _ = writeln!(css, ".at-{n} {{ left: {n}%; }} .w-{n} {{ width: {n}%; }}");
    }
    css
}

#[cfg(test)]
mod tests {
    use super::{Axis, Bar, bar_rules, duration};

    #[test]
    fn durations_read_in_the_largest_fitting_unit() {
        assert_eq!(duration(-5), "0 ms");
        assert_eq!(duration(340), "340 ms");
        assert_eq!(duration(1_250), "1.2 s");
        assert_eq!(duration(184_000), "3 min 4 s");
        assert_eq!(duration(7_380_000), "2 h 3 min");
        assert_eq!(duration(93_600_000), "1 d 2 h");
    }

    #[test]
    fn bars_are_whole_percents_within_the_axis() {
        let axis = Axis {
            start: 1_000,
            end: 2_000,
        };
        assert_eq!(axis.bar(1_000, 2_000), Bar { at: 0, width: 100 });
        assert_eq!(axis.bar(1_250, 1_500), Bar { at: 25, width: 25 });
        // A short call is a sliver, not nothing; times off the axis are clamped.
        assert_eq!(axis.bar(1_500, 1_501), Bar { at: 50, width: 1 });
        assert_eq!(axis.bar(500, 9_000), Bar { at: 0, width: 100 });
        assert_eq!(axis.bar(1_900, 1_800), Bar { at: 90, width: 0 });
        // An empty axis does not divide by zero.
        let point = Axis { start: 5, end: 5 };
        assert_eq!(point.bar(5, 5), Bar { at: 0, width: 0 });
    }

    #[test]
    fn every_percent_has_its_rules() {
        let css = bar_rules();
        assert!(css.contains(".at-0 { left: 0%; }"));
        assert!(css.contains(".w-100 { width: 100%; }"));
    }
}
