//! Rate limits shared by every worker (`RunnerConfig::rate_limits`): a tool's calls never
//! come faster than its limit, whoever makes them; a run whose turn is far is handed back
//! until then (it holds no worker, and its next claim is not charged) and makes its call
//! once, at its turn; an ask answered 429 pauses the model's asks for every worker.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use durable_agents::router::{RouteRequest, Router, RouterError, RouterReply, ScriptedRouter};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{RateLimit, RunStatus, Store, WaitingFor};
use durable_agents::tool::{ErrorClass, ToolsFor};
use durable_agents::{
    Agent, Ctx, Runner, RunnerConfig, StepResult, ToolResult, Worker, WorkerConfig, tool_fn,
};
use serde::{Deserialize, Serialize};

/// When each call of [`search`] was made, since the test began.
static CALLS: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
static EPOCH: Mutex<Option<Instant>> = Mutex::new(None);

/// Searches (a paid API allowing 5 calls a second).
///
/// # Panics
/// When the test did not set [`EPOCH`].
#[tool_fn(read)]
pub async fn search(
    /// What.
    query: u32,
) -> ToolResult<u32> {
    let began = EPOCH.lock().unwrap().expect("the test sets the epoch");
    CALLS.lock().unwrap().push(began.elapsed());
    Ok(query)
}

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(read(Search)))]
pub enum Seeker {
    /// Searches once, or asks the model.
    #[agent(initial, tools(Search), to(Done, Ask))]
    Seek { query: u32, ask: bool },
    /// Asks the model where to go.
    #[agent(route = llm, to(Done, GaveUp), on_error = Stopped)]
    Ask,
    #[agent(terminal)]
    Done,
    #[agent(terminal)]
    GaveUp,
    #[agent(terminal)]
    Stopped(String),
}

#[derive(Clone, Debug)]
pub struct Handlers;

impl SeekerHandlers for Handlers {
    async fn seek(
        &self,
        ctx: Ctx<'_, seeker::Seek>,
        seeker::Seek { query, ask }: seeker::Seek,
    ) -> StepResult<seeker::Seek> {
        if ask {
            return Ok(ctx.to(seeker::Ask));
        }
        ctx.call::<Search>(SearchInput { query }).await?;
        Ok(ctx.to(seeker::Done))
    }

    async fn ask(
        &self,
        ctx: Ctx<'_, seeker::Ask>,
        route: seeker::AskRoute,
        _: seeker::Ask,
    ) -> StepResult<seeker::Ask> {
        Ok(match route {
            seeker::AskRoute::Done => ctx.to(seeker::Done),
            seeker::AskRoute::GaveUp => ctx.to(seeker::GaveUp),
        })
    }
}

/// A model known to the limits as `test/model`: its first `refusals` answers are 429s asking to
/// wait `retry_after`, then it answers `Done`.
#[derive(Debug)]
struct Busy {
    asked: AtomicU32,
    refusals: u32,
    retry_after: Duration,
    inner: ScriptedRouter,
}

#[async_trait]
impl Router for Busy {
    async fn decide(&self, request: &RouteRequest) -> Result<RouterReply, RouterError> {
        if self.asked.fetch_add(1, Ordering::SeqCst) < self.refusals {
            return Err(
                RouterError::new(ErrorClass::RateLimited, "HTTP 429 Too Many Requests")
                    .with_retry_after(Some(self.retry_after)),
            );
        }
        self.inner.decide(request).await
    }

    fn limit_key(&self) -> Option<String> {
        Some("test/model".into())
    }
}

fn runner(
    store: &Arc<dyn Store>,
    limits: Vec<RateLimit>,
    router: Arc<Busy>,
) -> Runner<Seeker, Handlers> {
    Runner::<Seeker, _>::builder(
        Arc::clone(store),
        Handlers,
        SeekerTools::from_shared(&()).into_tool_box(),
    )
    .router(router)
    .config(RunnerConfig {
        rate_limits: limits,
        capacity_wait_in_place: Duration::from_millis(50),
        ..RunnerConfig::default()
    })
    .build()
    .unwrap()
}

fn busy(retry_after: Duration) -> Arc<Busy> {
    busy_for(1, retry_after)
}

fn busy_for(refusals: u32, retry_after: Duration) -> Arc<Busy> {
    Arc::new(Busy {
        asked: AtomicU32::new(0),
        refusals,
        retry_after,
        inner: ScriptedRouter::new([ScriptedRouter::choose("Done", "{}")]),
    })
}

#[tokio::test]
async fn calls_under_a_limit_are_spaced_and_far_turns_hand_the_run_back() {
    *EPOCH.lock().unwrap() = Some(Instant::now());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let limit = RateLimit::tool_calls("Search", 5, Duration::from_secs(1)).unwrap();
    // Two runners on one store: two workers, one limit between them.
    let a = runner(&store, vec![limit.clone()], busy(Duration::ZERO));
    let b = runner(&store, vec![limit], busy(Duration::ZERO));
    for i in 0..8 {
        let starter = if i % 2 == 0 { &a } else { &b };
        let seek = Seeker::Seek {
            query: i,
            ask: false,
        };
        starter.start(&format!("seek-{i}"), seek).await.unwrap();
    }
    // Each run's first step by hand: all eight take their turns at once; those further
    // than 50 ms away are handed back, uncharged, waiting for the limit.
    let mut handed_back = 0;
    for i in 0..8 {
        let runner = if i % 2 == 0 { &a } else { &b };
        let record = runner.run(&format!("seek-{i}")).await.unwrap();
        if record.status == RunStatus::Running {
            handed_back += 1;
            assert_eq!(
                record.waiting_for,
                Some(WaitingFor::capacity("tool:Search", record.epoch)),
                "{record:?}"
            );
            let stored = store.load_run(&record.id).await.unwrap().unwrap();
            assert!(
                stored.lease_owner.is_none() && stored.wake_at.is_some(),
                "{stored:?}"
            );
            assert_eq!(stored.claims_without_progress, 0);
        } else {
            assert_eq!(record.state_name, "Done");
        }
    }
    assert!(
        handed_back >= 6,
        "only {handed_back} of 8 runs were handed back"
    );
    // The workers take the rest up at their turns.
    let workers = [a, b].map(|runner| {
        Worker::new(
            runner,
            WorkerConfig {
                poll_interval: Duration::from_millis(10),
                ..WorkerConfig::default()
            },
        )
    });
    let all_done = async {
        loop {
            let mut done = 0;
            for i in 0..8 {
                let r = store.load_run(&format!("seek-{i}")).await.unwrap().unwrap();
                done += usize::from(r.status == RunStatus::Completed);
            }
            if done == 8 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let [w1, w2] = &workers;
    tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(w1.run_until(all_done), w2.run_until_idle());
    })
    .await
    .expect("every run completes");
    // Each run called once, and never two calls closer than the limit allows: over any
    // k + 1 calls, at least k × 200 ms (burst 1), as the calls were seen by the tool.
    let mut calls = CALLS.lock().unwrap().clone();
    calls.sort();
    assert_eq!(calls.len(), 8, "each run calls once: {calls:?}");
    let span = calls[7].saturating_sub(calls[0]);
    assert!(
        span >= Duration::from_millis(7 * 200 - 30),
        "8 calls at 5 a second take at least 1.4 s; took {span:?}: {calls:?}"
    );
    for i in 0..8 {
        let r = store.load_run(&format!("seek-{i}")).await.unwrap().unwrap();
        assert_eq!(r.spend.tool_calls, 1, "{r:?}");
        assert_eq!(r.waiting_for, None, "the commit clears the wait: {r:?}");
    }
}

#[tokio::test]
async fn a_429_pauses_the_models_asks_for_every_worker() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let limit = RateLimit::asks("test/model", 600, Duration::from_mins(1)).unwrap();
    let other = RateLimit::asks("other/model", 600, Duration::from_mins(1)).unwrap();
    let runner = runner(&store, vec![limit, other], busy(Duration::from_secs(30)));
    let ask = Seeker::Seek {
        query: 0,
        ask: true,
    };
    runner.start("asker", ask).await.unwrap();
    // The first ask is answered 429: the step re-asks, finds the model's asks paused for
    // 30 s, and hands the run back until then.
    let record = runner.run("asker").await.unwrap();
    assert_eq!(record.status, RunStatus::Running, "{record:?}");
    assert_eq!(
        record.waiting_for,
        Some(WaitingFor::capacity("asks:test/model", record.epoch))
    );
    let limits = store
        .limits(durable_agents::backend::now_ms())
        .await
        .unwrap();
    let paused = limits.iter().find(|l| l.name == "asks:test/model").unwrap();
    assert!(
        paused.wait_ms > 25_000,
        "the 429's Retry-After pauses the limit for every worker: {paused:?}"
    );
    let free = limits
        .iter()
        .find(|l| l.name == "asks:other/model")
        .unwrap();
    assert_eq!(free.wait_ms, 0, "another model's limit is not paused");
    // Another worker's ask to that model waits its turn too.
    let second = runner
        .start(
            "second",
            Seeker::Seek {
                query: 1,
                ask: true,
            },
        )
        .await;
    second.unwrap();
    let record = runner.run("second").await.unwrap();
    assert_eq!(record.status, RunStatus::Running, "{record:?}");
    assert!(record.wake_at.unwrap() > durable_agents::backend::now_ms() + 25_000);
}

#[tokio::test]
async fn a_model_answering_429_past_max_reasks_is_waited_out() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let limit = RateLimit::asks("test/model", 600, Duration::from_mins(1)).unwrap();
    // Five 429s, each asking for 200 ms, against `max_reasks` = 2: the run waits them out
    // (handed back each time) instead of failing, and ends where the model sends it.
    let model = busy_for(5, Duration::from_millis(200));
    let runner = runner(&store, vec![limit], Arc::clone(&model));
    let ask = Seeker::Seek {
        query: 0,
        ask: true,
    };
    runner.start("patient", ask).await.unwrap();
    let worker = Worker::new(
        runner,
        WorkerConfig {
            poll_interval: Duration::from_millis(10),
            ..WorkerConfig::default()
        },
    );
    let done = async {
        while !store
            .load_run("patient")
            .await
            .unwrap()
            .unwrap()
            .status
            .is_final()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), worker.run_until(done))
        .await
        .expect("the run ends once the model answers");
    let ended = store.load_run("patient").await.unwrap().unwrap();
    assert_eq!(ended.state_name, "Done", "{ended:?}");
    assert_eq!(
        model.asked.load(Ordering::SeqCst),
        6,
        "five 429s, then the answer"
    );
    let journal = store.journal("patient", None).await.unwrap();
    let limited = (journal.iter())
        .filter(|e| e.error_code.as_deref() == Some("ask.rate_limited"))
        .count();
    assert_eq!(
        limited, 5,
        "each 429 is journaled as ask.rate_limited: {journal:#?}"
    );
}

/// A run handed back until its turn is taken up by the next claim, which asks without taking
/// again; a claim after that one (whose worker may have asked under the turn and crashed
/// before journaling the answer) takes a turn of its own: a turn is never used twice.
#[tokio::test]
async fn only_the_claim_right_after_the_hand_back_uses_its_turn() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // One ask every 10 s: the first run's ask has the room, the others' turns are far.
    let limit = RateLimit::asks("test/model", 6, Duration::from_mins(1)).unwrap();
    let model = Arc::new(Busy {
        asked: AtomicU32::new(0),
        refusals: 0,
        retry_after: Duration::ZERO,
        inner: ScriptedRouter::new([
            ScriptedRouter::choose("Done", "{}"),
            ScriptedRouter::choose("Done", "{}"),
            ScriptedRouter::choose("Done", "{}"),
        ]),
    });
    let runner = runner(&store, vec![limit], Arc::clone(&model));
    let mut deferred = Vec::new();
    for id in ["first", "kept", "crashed"] {
        let ask = Seeker::Seek {
            query: 0,
            ask: true,
        };
        runner.start(id, ask).await.unwrap();
        let record = runner.run(id).await.unwrap();
        if id == "first" {
            assert_eq!(record.status, RunStatus::Completed, "{record:?}");
            continue;
        }
        assert_eq!(record.status, RunStatus::Running, "{record:?}");
        let wait = record.waiting_for.clone().unwrap();
        assert_eq!(wait.limit(), Some("asks:test/model"));
        assert_eq!(wait.handed_back_by(), Some(record.epoch), "{record:?}");
        deferred.push(record);
    }
    // The next claim uses the turn taken for it: it asks at once and the run ends.
    let kept = runner.run("kept").await.unwrap();
    assert_eq!(kept.status, RunStatus::Completed, "{kept:?}");
    assert_eq!(model.asked.load(Ordering::SeqCst), 2);
    // A claim whose worker dies before journaling (here: before doing anything), then the
    // next: it takes a turn of its own, after every turn taken so far.
    let crasher = store
        .claim_run("crashed", "crasher", Duration::from_millis(1))
        .await
        .unwrap()
        .expect("the run is claimed");
    assert_eq!(crasher.lease.epoch, deferred[1].epoch + 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let again = runner.run("crashed").await.unwrap();
    assert_eq!(again.status, RunStatus::Running, "{again:?}");
    assert_eq!(
        model.asked.load(Ordering::SeqCst),
        2,
        "no ask under a used turn"
    );
    let turn = again.wake_at.unwrap();
    assert!(
        turn > deferred[1].wake_at.unwrap() + 5_000,
        "a new turn, after the one the crashed claim may have used: {again:?}"
    );
}
