//! Item 7: the saga matrix, on every store: `MemoryStore`, PostgreSQL and SQLite (each
//! test once per backend, `memory` / `postgres` / `sqlite` in its module). A chain of `n` steps, each booking `per`
//! slots with a hybrid tool (`Book`, undone by `Unbook`). For every booking index `k` the
//! booking fails permanently (before applying), the run takes `on_error` into a
//! `compensate` state, and the runner undoes what was booked; for every compensation `j`
//! of that round a crash is also injected when the compensation is journaled as started
//! (`CompensationRegistered`) and when it was sent (`CompensationSent`), and a fresh worker
//! resumes. A compensation that keeps failing must end dead-lettered.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_core::runner::{CrashAt, FaultPoint, Runner, RunnerConfig, RunnerError};
use agent_core::runner::{FaultHook, NoFaults};
use agent_core::store::{EntryKind, RunRecord, RunStatus, Store};
use agent_core::{
    Agent, Compensate, Ctx, Execute, RetryPolicy, StepResult, Tool, ToolBox, ToolContext,
    ToolError, ToolPolicy, kind,
};
use battery::backends::{Backend, Fresh};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the booking service saw: every effect by idempotency key.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    inner: Mutex<LedgerState>,
}

#[derive(Debug, Default, Clone)]
pub(crate) struct LedgerState {
    /// Effects applied, in order: (tool, key).
    applied: Vec<(String, String)>,
    /// Executions per key (repeats deduplicated by the key included).
    executions: BTreeMap<String, u32>,
    results: BTreeMap<String, serde_json::Value>,
    /// Bookings made, in order.
    booked: Vec<String>,
    /// Bookings undone, in order.
    undone: Vec<String>,
    /// The booking index that fails (permanently, before applying).
    fail_book_at: Option<u32>,
    /// The booking whose undo keeps failing, and how.
    unbook_fails: Option<(String, bool)>,
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, LedgerState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn effect(
        &self,
        tool: &str,
        key: &str,
        apply: impl FnOnce(&mut LedgerState) -> serde_json::Value,
    ) -> serde_json::Value {
        let mut l = self.lock();
        *l.executions.entry(key.to_owned()).or_default() += 1;
        if let Some(v) = l.results.get(key) {
            return v.clone();
        }
        let v = apply(&mut l);
        l.applied.push((tool.to_owned(), key.to_owned()));
        l.results.insert(key.to_owned(), v.clone());
        v
    }
}

/// A slot to book.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Slot {
    /// Its index in the chain.
    pub i: u32,
}

/// A booking.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Booking {
    /// Its id.
    pub id: String,
}

/// Book a slot (hybrid, undone by [`Unbook`]).
#[derive(Debug, Clone)]
pub(crate) struct Book(Arc<Ledger>);

/// Undo a booking (write).
#[derive(Debug, Clone)]
pub(crate) struct Unbook(Arc<Ledger>);

fn policy() -> ToolPolicy {
    ToolPolicy {
        timeout: Duration::from_secs(2),
        retry: RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
            multiplier: 2.0,
            jitter: false,
        },
        cache: false,
        journal_with_commit: false,
    }
}

impl Tool for Book {
    const NAME: &'static str = "Book";
    type Kind = kind::Hybrid;
    type Input = Slot;
    type Output = Booking;
    fn policy() -> ToolPolicy {
        policy()
    }
}

impl Execute for Book {
    async fn execute(&self, input: Slot, cx: &ToolContext) -> Result<Booking, ToolError> {
        if self.0.lock().fail_book_at == Some(input.i) {
            return Err(ToolError::permanent(format!(
                "slot {} is sold out",
                input.i
            )));
        }
        let v = self.0.effect("Book", cx.idempotency_key(), |l| {
            let id = format!("b{}", input.i);
            l.booked.push(id.clone());
            serde_json::json!({ "id": id })
        });
        serde_json::from_value(v).map_err(|e| ToolError::permanent(e.to_string()))
    }
}

impl Compensate for Book {
    type With = Unbook;
    fn compensation(&self, _: &Slot, output: &Booking) -> Booking {
        output.clone()
    }
}

impl Tool for Unbook {
    const NAME: &'static str = "Unbook";
    type Kind = kind::Write;
    type Input = Booking;
    type Output = ();
    fn policy() -> ToolPolicy {
        policy()
    }
}

impl Execute for Unbook {
    async fn execute(&self, input: Booking, cx: &ToolContext) -> Result<(), ToolError> {
        let failing = self.0.lock().unbook_fails.clone();
        if let Some((id, retryable)) = failing
            && id == input.id
        {
            *self
                .0
                .lock()
                .executions
                .entry(format!("failed:{}", cx.idempotency_key()))
                .or_default() += 1;
            return Err(if retryable {
                ToolError::retryable("booking service unavailable")
            } else {
                ToolError::permanent("booking cannot be cancelled")
            });
        }
        self.0.effect("Unbook", cx.idempotency_key(), |l| {
            l.undone.push(input.id.clone());
            serde_json::Value::Null
        });
        Ok(())
    }
}

/// A chain of bookings, `per` per step, `n` steps.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(write(Unbook), hybrid(Book(compensate = Unbook))))]
pub(crate) enum Chain {
    /// Book slots `i*per .. (i+1)*per`, then the next leg or done.
    #[agent(initial, tools(Book), to(Leg, Done), on_error = Failed)]
    Leg {
        /// This leg.
        i: u32,
        /// Legs in all.
        n: u32,
        /// Bookings per leg.
        per: u32,
    },
    /// Everything booked.
    #[agent(terminal)]
    Done,
    /// A booking failed: everything booked is undone.
    #[agent(terminal, compensate)]
    Failed {
        /// Why.
        reason: String,
    },
}

/// The chain's handlers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Legs;

impl ChainHandlers for Legs {
    async fn leg(
        &self,
        ctx: Ctx<'_, chain::Leg>,
        chain::Leg { i, n, per }: chain::Leg,
    ) -> StepResult<chain::Leg> {
        for j in 0..per {
            ctx.call::<Book>(Slot { i: i * per + j }).await?;
        }
        Ok(if i + 1 < n {
            ctx.to(chain::Leg { i: i + 1, n, per })
        } else {
            ctx.to(chain::Done)
        })
    }
}

fn runner(store: &Arc<dyn Store>, ledger: &Arc<Ledger>, worker: &str) -> Runner<Chain, Legs> {
    runner_with(store, ledger, worker, Arc::new(NoFaults))
}

fn runner_with(
    store: &Arc<dyn Store>,
    ledger: &Arc<Ledger>,
    worker: &str,
    faults: Arc<dyn FaultHook>,
) -> Runner<Chain, Legs> {
    let tools = ToolBox::new()
        .with(Unbook(Arc::clone(ledger)))
        .hybrid(Book(Arc::clone(ledger)));
    Runner::builder(Arc::clone(store), Legs, tools)
        .config(RunnerConfig {
            worker_id: worker.to_owned(),
            lease_ttl: LEASE,
            ..RunnerConfig::default()
        })
        .faults(faults)
        .build()
        .expect("tool box matches")
}

const LEASE: Duration = Duration::from_millis(40);

/// One cell of the matrix.
#[derive(Clone, Copy, Debug)]
struct Cell {
    n: u32,
    per: u32,
    /// The booking index that fails.
    k: u32,
    /// A crash at the `j`-th hit of this point (compensations of the round count from 0).
    crash: Option<(FaultPoint, u32)>,
    /// The booking (by index) whose undo keeps failing; `true` when retryable.
    unbook_fails: Option<(u32, bool)>,
}

/// Drive the cell's run `id` in `store`, resuming after the injected crash; check the
/// saga's invariants.
async fn run_cell(store: &Arc<dyn Store>, id: &str, cell: Cell) -> Result<RunRecord, String> {
    let ledger = Arc::new(Ledger::default());
    ledger.lock().fail_book_at = Some(cell.k);
    ledger.lock().unbook_fails = cell.unbook_fails.map(|(b, r)| (format!("b{b}"), r));
    let first = runner(store, &ledger, "first");
    first
        .start(
            id,
            Chain::Leg {
                i: 0,
                n: cell.n,
                per: cell.per,
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    let record = match cell.crash {
        None => first.run(id).await.map_err(|e| e.to_string())?,
        Some((point, j)) => {
            let hook = Arc::new(CrashAt::new(point, j));
            let crashing = runner_with(store, &ledger, "first", hook.clone());
            match crashing.run(id).await {
                Err(RunnerError::Crashed(_)) => {}
                other => return Err(format!("expected a crash at {point} #{j}, got {other:?}")),
            }
            if !hook.fired() {
                return Err("the crash did not fire".into());
            }
            // The crashed worker never releases its lease: the next one waits it out.
            tokio::time::sleep(LEASE + Duration::from_millis(10)).await;
            runner(store, &ledger, "second")
                .run(id)
                .await
                .map_err(|e| e.to_string())?
        }
    };
    let seen = ledger.lock().clone();
    check(&cell, &seen, &record, store.as_ref()).await?;
    Ok(record)
}

async fn check(
    cell: &Cell,
    l: &LedgerState,
    record: &RunRecord,
    store: &dyn Store,
) -> Result<(), String> {
    let booked: Vec<String> = (0..cell.k).map(|b| format!("b{b}")).collect();
    if l.booked != booked {
        return Err(format!("booked {:?}, expected {booked:?}", l.booked));
    }
    // Every effect applied once: no key twice, no booking undone twice.
    let mut seen = std::collections::BTreeSet::new();
    for (tool, key) in &l.applied {
        if !seen.insert(key) {
            return Err(format!("{tool} applied twice under {key}"));
        }
    }
    let mut undone_once = std::collections::BTreeSet::new();
    for u in &l.undone {
        if !undone_once.insert(u) {
            return Err(format!("{u} undone twice: {:?}", l.undone));
        }
        if !booked.contains(u) {
            return Err(format!("{u} undone but never applied"));
        }
    }
    let reversed: Vec<String> = booked.iter().rev().cloned().collect();
    match cell.unbook_fails {
        None => {
            if l.undone != reversed {
                return Err(format!(
                    "undone {:?}, expected {reversed:?} (reverse order)",
                    l.undone
                ));
            }
            let ok = if cell.k == 0 {
                // Nothing booked: nothing to compensate.
                matches!(record.status, RunStatus::Compensated | RunStatus::Failed)
            } else {
                record.status == RunStatus::Compensated
            };
            if !ok || record.state_name != "Failed" {
                return Err(format!(
                    "ended {} in `{}` ({:?})",
                    record.status, record.state_name, record.error
                ));
            }
        }
        Some((b, _)) => {
            // Undone in reverse order up to the failing one; nothing after it.
            let stop = reversed
                .iter()
                .position(|x| *x == format!("b{b}"))
                .ok_or("the failing undo is not in the saga")?;
            if l.undone != reversed[..stop] {
                return Err(format!(
                    "undone {:?}, expected {:?} before the failing undo",
                    l.undone,
                    &reversed[..stop]
                ));
            }
            let code = record.error.as_ref().map(|e| e.code.as_str());
            if record.status != RunStatus::DeadLettered || code != Some("compensation.failed") {
                return Err(format!(
                    "a failing compensation ended {} with {:?}, not dead_lettered with \
                     compensation.failed",
                    record.status, record.error
                ));
            }
        }
    }
    // The journal shows one compensation entry per undo, each with its own key.
    let journal = store
        .journal(&record.id, None)
        .await
        .map_err(|e| e.to_string())?;
    let comp_keys: Vec<_> = journal
        .iter()
        .filter(|e| e.kind == EntryKind::Compensation)
        .map(|e| e.idempotency_key.clone())
        .collect();
    let distinct: std::collections::BTreeSet<_> = comp_keys.iter().collect();
    if distinct.len() != comp_keys.len() {
        return Err(format!("compensation keys repeat: {comp_keys:?}"));
    }
    Ok(())
}

fn cells(n: u32, per: u32) -> Vec<Cell> {
    let mut out = Vec::new();
    for k in 0..n * per {
        let base = Cell {
            n,
            per,
            k,
            crash: None,
            unbook_fails: None,
        };
        out.push(base);
        for j in 0..k {
            for point in [
                FaultPoint::CompensationRegistered,
                FaultPoint::CompensationSent,
            ] {
                out.push(Cell {
                    crash: Some((point, j)),
                    ..base
                });
            }
        }
        for b in 0..k {
            for retryable in [false, true] {
                out.push(Cell {
                    unbook_fails: Some((b, retryable)),
                    ..base
                });
            }
        }
    }
    out
}

battery::on_every_backend!(saga_matrix, crash_around_the_compensation_round_commits);

/// The whole matrix: every failing booking, every crash during compensation, every
/// failing compensation. Each cell is a run of its own in the one store.
async fn saga_matrix(backend: Backend) {
    let Some(fresh) = Fresh::open(backend).await else {
        return;
    };
    let store = &fresh.store;
    let n = u32::try_from(battery::size(3, 6)).unwrap_or(3);
    let mut failures = Vec::new();
    let mut total = 0;
    let mut by_outcome: BTreeMap<String, u32> = BTreeMap::new();
    let started = std::time::Instant::now();
    for per in [1, 2] {
        for cell in cells(n, per) {
            total += 1;
            let id = format!("chain-{total}");
            let outcome = tokio::time::timeout(Duration::from_secs(10), run_cell(store, &id, cell))
                .await
                .unwrap_or_else(|_| Err("did not finish within 10 s".into()));
            match outcome {
                Ok(r) => *by_outcome.entry(r.status.to_string()).or_default() += 1,
                Err(e) => failures.push(format!("{cell:?}: {e}")),
            }
        }
    }
    eprintln!(
        "FIGURE item7 saga matrix: backend={backend:?} n={n} per=1,2 cells={total} \
         outcomes={by_outcome:?} failures={} elapsed={:.1}s",
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {total} cells failed:\n{failures:#?}",
        failures.len()
    );
    fresh.finish().await;
}

/// Crashes at the commits around the compensation round: before the commit into the
/// `compensate` state (#3 of `CommitSent` for 3 legs booked) and before the commit that
/// closes the round after every compensation was applied (#4). Each undo still happens
/// once, in reverse order.
async fn crash_around_the_compensation_round_commits(backend: Backend) {
    let Some(fresh) = Fresh::open(backend).await else {
        return;
    };
    for nth in [3, 4] {
        let cell = Cell {
            n: 4,
            per: 1,
            k: 3,
            crash: Some((FaultPoint::CommitSent, nth)),
            unbook_fails: None,
        };
        if let Err(e) = run_cell(&fresh.store, &format!("round-{nth}"), cell).await {
            panic!("{cell:?}: {e}");
        }
    }
    fresh.finish().await;
}
