//! Durable timers on a real store: a run in a timer state is stored waiting with its due
//! time, holds no worker, is not claimable before it, survives a restart, and fires once;
//! a timer the handler computed is the one stored; a timer beside a signal wakes the
//! handler when it comes first, and the signal does when it does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;

use agent_core::runner::{Runner, RunnerConfig, RunnerError};
use agent_core::store::{RunRecord, RunStatus, Store, WaitingFor, now_ms};
use agent_core::timer::Deadline;
use agent_core::{Agent, Ctx, StepResult, ToolBox, Wake};

/// The fixed delay of [`FollowUp::Sleeping`], in milliseconds.
const SLEEP_MS: u64 = 300;
/// The delay the `Sleeping` handler gives [`FollowUp::Reminding`]'s computed timer.
const REMIND_AFTER: Duration = Duration::from_millis(200);
/// How long [`FollowUp::Asking`] waits for the answer.
const ANSWER_WITHIN: Duration = Duration::from_millis(250);

/// The timers' fixture: a follow-up that sleeps a fixed delay, then until a time its
/// handler computed, then waits for the customer's answer until a deadline.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(crate = ::agent_core)]
pub enum FollowUp {
    /// Sleep a fixed delay from the start.
    #[agent(initial, timer_ms = 300, to(Reminding))]
    Sleeping {
        /// Who to follow up with.
        customer: String,
    },
    /// Sleep until the time the previous handler computed.
    #[agent(timer = remind_at, to(Asking))]
    Reminding {
        /// Who.
        customer: String,
        /// When to remind.
        remind_at: Deadline,
    },
    /// Wait for the answer, until a deadline.
    #[agent(wait = "answer", timer = until, to(Answered, Expired))]
    Asking {
        /// Who.
        customer: String,
        /// The answer's deadline (`None`: wait for ever).
        until: Option<Deadline>,
    },
    /// The customer answered in time.
    #[agent(terminal)]
    Answered {
        /// What they said.
        answer: String,
    },
    /// Nobody answered before the deadline.
    #[agent(terminal)]
    Expired,
}

/// How many times each handler ran: a timer fires once.
#[derive(Debug, Default)]
pub struct Fired {
    sleeping: AtomicU32,
    reminding: AtomicU32,
    asking: AtomicU32,
}

/// The handlers of [`FollowUp`], counting their runs in [`Fired`].
#[derive(Debug, Clone, Default)]
pub struct FollowUpBehaviour(pub Arc<Fired>);

impl FollowUpHandlers for FollowUpBehaviour {
    async fn sleeping(
        &self,
        ctx: Ctx<'_, follow_up::Sleeping>,
        follow_up::Sleeping { customer }: follow_up::Sleeping,
    ) -> StepResult<follow_up::Sleeping> {
        self.0.sleeping.fetch_add(1, Ordering::SeqCst);
        let remind_at = Deadline::after(REMIND_AFTER);
        Ok(ctx.to(follow_up::Reminding {
            customer,
            remind_at,
        }))
    }

    async fn reminding(
        &self,
        ctx: Ctx<'_, follow_up::Reminding>,
        follow_up::Reminding { customer, .. }: follow_up::Reminding,
    ) -> StepResult<follow_up::Reminding> {
        self.0.reminding.fetch_add(1, Ordering::SeqCst);
        let until = Some(Deadline::after(ANSWER_WITHIN));
        Ok(ctx.to(follow_up::Asking { customer, until }))
    }

    async fn asking(
        &self,
        ctx: Ctx<'_, follow_up::Asking>,
        wake: Wake,
        _: follow_up::Asking,
    ) -> StepResult<follow_up::Asking> {
        self.0.asking.fetch_add(1, Ordering::SeqCst);
        match wake {
            Wake::Signal(answer) => Ok(ctx.to(follow_up::Answered {
                answer: answer["text"].as_str().unwrap_or_default().to_owned(),
            })),
            Wake::TimedOut => Ok(ctx.to(follow_up::Expired)),
        }
    }
}

fn runner(
    store: &Arc<dyn Store>,
    fired: &Arc<Fired>,
    worker: &str,
) -> Result<Runner<FollowUp, FollowUpBehaviour>, String> {
    Runner::builder(
        Arc::clone(store),
        FollowUpBehaviour(Arc::clone(fired)),
        ToolBox::new(),
    )
    .config(RunnerConfig {
        worker_id: worker.to_owned(),
        lease_ttl: Duration::from_millis(500),
        ..RunnerConfig::default()
    })
    .build()
    .map_err(|e| e.to_string())
}

fn start_state() -> FollowUp {
    FollowUp::Sleeping {
        customer: "ada".into(),
    }
}

/// The run is waiting for its timer, due within `[from, to]` (milliseconds since the epoch).
fn waits_for_timer(record: &RunRecord, state: &str, from: i64, to: i64) -> Result<i64, String> {
    let due = record.wake_at.unwrap_or(i64::MIN);
    if record.status != RunStatus::Waiting
        || record.state_name != state
        || record.waiting_for != Some(WaitingFor::Timer)
        || due < from
        || due > to
    {
        return Err(format!(
            "expected `{state}` waiting for its timer due in [{from}, {to}], got `{}` {} \
             waiting for {:?} due {:?}",
            record.state_name, record.status, record.waiting_for, record.wake_at
        ));
    }
    Ok(due)
}

async fn sleep_until(due: i64) {
    let left = u64::try_from(due.saturating_sub(now_ms())).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(left + 20)).await;
}

/// A fixed timer, then one the handler computed: each run waits stored with its due time,
/// is not claimable before it (a worker polling it changes nothing), survives a restart,
/// and fires once however many workers race for it once due.
///
/// # Errors
/// What went wrong.
pub async fn check_timers_fire_once_when_due(store: Arc<dyn Store>) -> Result<(), String> {
    let fired = Arc::new(Fired::default());
    let first = runner(&store, &fired, "before-restart")?;
    let before = now_ms();
    first
        .start("follow-up", start_state())
        .await
        .map_err(|e| e.to_string())?;
    let waiting = first.run("follow-up").await.map_err(|e| e.to_string())?;
    let sleep = i64::try_from(SLEEP_MS).unwrap_or(i64::MAX);
    let due = waits_for_timer(&waiting, "Sleeping", before + sleep, now_ms() + sleep)?;
    // Before it is due, nobody claims it and polling it commits nothing.
    let claimed = store
        .claim_next(
            &[FollowUp::NAME.to_owned()],
            "probe",
            Duration::from_secs(5),
            10,
        )
        .await
        .map_err(|e| e.to_string())?;
    if !claimed.is_empty() {
        return Err(format!(
            "a run waiting for a timer due in {} ms was claimed",
            due - now_ms()
        ));
    }
    let again = first.run("follow-up").await.map_err(|e| e.to_string())?;
    if again.version != waiting.version || fired.sleeping.load(Ordering::SeqCst) != 0 {
        return Err(format!(
            "a run polled before its timer moved: version {} -> {}, handler ran {} times",
            waiting.version,
            again.version,
            fired.sleeping.load(Ordering::SeqCst)
        ));
    }
    // A restart: the timer is in the store, not in the worker that started it.
    drop(first);
    sleep_until(due).await;
    let workers: Vec<_> = (0..3)
        .map(|i| runner(&store, &fired, &format!("after-restart-{i}")))
        .collect::<Result<_, _>>()?;
    let raced = futures::future::join_all(workers.iter().map(|w| w.run("follow-up"))).await;
    for r in &raced {
        // The losers find the run held by the winner; nothing else may go wrong.
        if let Err(e) = r
            && !matches!(e, RunnerError::LeaseLost(_))
        {
            return Err(format!("a worker racing for a due timer failed: {e}"));
        }
    }
    if fired.sleeping.load(Ordering::SeqCst) != 1 {
        return Err(format!(
            "the fixed timer fired {} times",
            fired.sleeping.load(Ordering::SeqCst)
        ));
    }
    // The handler's computed time is the stored due time.
    let record = store
        .load_run("follow-up")
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the run is gone")?;
    let at = record.state["Reminding"]["remind_at"]
        .as_i64()
        .unwrap_or(-1);
    let due = waits_for_timer(&record, "Reminding", at, at)?;
    sleep_until(due).await;
    let asking = workers[1]
        .run("follow-up")
        .await
        .map_err(|e| e.to_string())?;
    if fired.reminding.load(Ordering::SeqCst) != 1 {
        return Err("the computed timer did not fire exactly once".into());
    }
    let until = asking.state["Asking"]["until"].as_i64().unwrap_or(-1);
    if asking.status != RunStatus::Waiting
        || asking.waiting_for != Some(WaitingFor::signal("answer"))
        || asking.wake_at != Some(until)
    {
        return Err(format!(
            "expected waiting for `answer` until {until}, got {} {:?} until {:?}",
            asking.status, asking.waiting_for, asking.wake_at
        ));
    }
    Ok(())
}

/// A timer beside a signal: the signal wakes the handler when it comes first, the timer
/// when it does; each wakes it once.
///
/// # Errors
/// What went wrong.
pub async fn check_timer_or_signal_whichever_first(store: Arc<dyn Store>) -> Result<(), String> {
    let fired = Arc::new(Fired::default());
    let r = runner(&store, &fired, "w")?;
    // Both runs straight into `Asking`, as a later state: started in `Sleeping`, their
    // timers passed by waiting, not by writing the store.
    for id in ["answered", "expired"] {
        r.start(id, start_state())
            .await
            .map_err(|e| e.to_string())?;
        r.run(id).await.map_err(|e| e.to_string())?;
    }
    tokio::time::sleep(Duration::from_millis(SLEEP_MS + 20)).await;
    for id in ["answered", "expired"] {
        r.run(id).await.map_err(|e| e.to_string())?;
    }
    tokio::time::sleep(REMIND_AFTER + Duration::from_millis(20)).await;
    for id in ["answered", "expired"] {
        let record = r.run(id).await.map_err(|e| e.to_string())?;
        if record.state_name != "Asking" || record.status != RunStatus::Waiting {
            return Err(format!(
                "`{id}`: expected waiting in `Asking`, got `{}` {}",
                record.state_name, record.status
            ));
        }
    }
    r.signal("answered", "answer", json!({"text": "yes"}))
        .await
        .map_err(|e| e.to_string())?;
    let answered = r.run("answered").await.map_err(|e| e.to_string())?;
    if answered.state_name != "Answered" || answered.state["Answered"]["answer"] != "yes" {
        return Err(format!(
            "the signal before the deadline should answer, got `{}` {}",
            answered.state_name, answered.state
        ));
    }
    let still = r.run("expired").await.map_err(|e| e.to_string())?;
    if still.status != RunStatus::Waiting {
        return Err(format!(
            "a run whose deadline has not passed moved: `{}` {}",
            still.state_name, still.status
        ));
    }
    tokio::time::sleep(ANSWER_WITHIN + Duration::from_millis(20)).await;
    let expired = r.run("expired").await.map_err(|e| e.to_string())?;
    if expired.state_name != "Expired" || expired.status != RunStatus::Completed {
        return Err(format!(
            "the deadline should expire the wait, got `{}` {}",
            expired.state_name, expired.status
        ));
    }
    if fired.asking.load(Ordering::SeqCst) != 2 {
        return Err(format!(
            "each wait should wake its handler once: {} wakes for two runs",
            fired.asking.load(Ordering::SeqCst)
        ));
    }
    Ok(())
}
