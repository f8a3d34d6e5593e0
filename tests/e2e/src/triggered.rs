//! The triggers soak (issue 41): runs started by a schedule ticking every second, by a NATS
//! JetStream trigger and by an MQTT (QoS 1) trigger, in worker processes killed -9 at random.
//!
//! - [`Event`]: the agent every run belongs to: `Received { source, key }` → `Handled`, one
//!   step of 0–`work_ms` ms;
//! - [`run_workers`]: what an `e2e-worker` process in `"agents": "triggers"` mode runs: a
//!   [`Worker`] (which ticks the agent's schedules before each claim), a consumer on the
//!   shared JetStream durable consumer, a consumer on its slot's persistent MQTT session (a
//!   shared subscription, so each message goes to one slot), and a recorder of the
//!   triggers' counters in the table `e2e_trigger_stats`;
//! - [`publish_nats`], [`publish_mqtt`]: the test's steady publishers;
//! - [`check_runs`]: the checker: exactly one run per tick and per published message, every
//!   run completed after one step.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agent_core::runner::{Runner, RunnerConfig, Worker, WorkerConfig};
use agent_core::schedule::{SCHEDULE_LABEL, Schedule, TICK_LABEL, tick_text};
use agent_core::store::{HistoryStore, RunRecord, RunStatus, Store};
use agent_core::{Agent, Ctx, StepResult, ToolBox};
use agent_triggers::mqtt::MqttBroker;
use agent_triggers::nats::{NatsBroker, NatsConfig};
use agent_triggers::{Consumer, InitialState, MESSAGE_LABEL, TRIGGER_LABEL, Trigger};
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::procs::WorkerCounts;
use crate::stats::Summary;

/// The schedule of the soak: every second.
pub const SCHEDULE_ID: &str = "soak-every-second";
/// The NATS trigger (and its durable consumer).
pub const NATS_TRIGGER: &str = "soak-nats";
/// The MQTT trigger (and the prefix of its slots' client ids).
pub const MQTT_TRIGGER: &str = "soak-mqtt";
/// The JetStream stream holding the soak's messages and dead letters.
pub const NATS_STREAM: &str = "SOAK";
/// The subject the publisher sends to.
pub const NATS_SUBJECT: &str = "soak.events";
/// The subject of rejected NATS messages.
pub const NATS_DEAD: &str = "soak.dead";
/// The topic the publisher sends to.
pub const MQTT_TOPIC: &str = "soak/events";
/// The topic of rejected MQTT messages.
pub const MQTT_DEAD: &str = "soak/dead";
/// What every slot subscribes to: one shared subscription, so that mosquitto hands each
/// message to one slot's session (and keeps it there while the slot's process is away).
pub const MQTT_SHARED: &str = "$share/soak/soak/events";
/// The table of the triggers' counters, per worker incarnation.
pub const STATS_SQL: &str = "CREATE TABLE IF NOT EXISTS e2e_trigger_stats (\
    worker_id text NOT NULL, trigger text NOT NULL, started bigint NOT NULL, \
    duplicates bigint NOT NULL, rejected bigint NOT NULL, PRIMARY KEY (worker_id, trigger))";

/// A run started by the clock or by a message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Agent)]
pub enum Event {
    /// Handle it.
    #[agent(initial, to(Handled))]
    Received {
        /// `schedule`, `nats` or `mqtt`.
        source: String,
        /// The message's key (empty for a tick).
        key: String,
    },
    /// Handled.
    #[agent(terminal)]
    Handled {
        /// As received.
        source: String,
        /// As received.
        key: String,
    },
}

/// The step: a little work, then done.
#[derive(Debug, Clone, Copy, Default)]
pub struct Behaviour {
    /// The step takes 0 to this many milliseconds.
    pub work_ms: u64,
}

impl EventHandlers for Behaviour {
    async fn received(
        &self,
        ctx: Ctx<'_, event::Received>,
        event::Received { source, key }: event::Received,
    ) -> StepResult<event::Received> {
        let ms = rand::rng().random_range(0..=self.work_ms);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(ctx.to(event::Handled { source, key }))
    }
}

/// A runner of [`Event`] over `store`.
///
/// # Panics
/// Never: the agent has no tool and no routed state.
#[must_use]
pub fn runner(
    store: Arc<dyn Store>,
    config: RunnerConfig,
    work_ms: u64,
) -> Runner<Event, Behaviour> {
    Runner::builder(store, Behaviour { work_ms }, ToolBox::new())
        .config(config)
        .build()
        .expect("the event runner")
}

/// The initial state of the schedule's runs.
///
/// # Panics
/// Never: the state serializes.
#[must_use]
pub fn tick_state() -> serde_json::Value {
    serde_json::to_value(Event::Received {
        source: "schedule".to_owned(),
        key: String::new(),
    })
    .expect("the state serializes")
}

/// What a worker process of the triggers soak consumes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TriggerOpts {
    /// The slot: its MQTT session is `soak-mqtt-<slot>`, stable across incarnations.
    pub slot: usize,
    /// The NATS server, if any.
    pub nats_url: Option<String>,
    /// Mosquitto's port on 127.0.0.1, if any.
    pub mqtt_port: Option<u16>,
    /// The JetStream consumer's `ack_wait`, ms: how soon a killed worker's unacknowledged
    /// messages are delivered again.
    pub ack_wait_ms: u64,
    /// Each trigger's bound on the agent's runs in flight.
    pub max_in_flight: u32,
    /// The step takes 0 to this many milliseconds.
    pub work_ms: u64,
}

/// The JetStream durable consumer every slot shares (created by the test first, so the
/// workers find it as it is).
#[must_use]
pub fn nats_config(ack_wait: Duration) -> NatsConfig {
    let mut config = NatsConfig::new(NATS_STREAM, NATS_TRIGGER, NATS_DEAD);
    config.filter_subject = Some(NATS_SUBJECT.to_owned());
    config.ack_wait = ack_wait;
    config.fetch_wait = Duration::from_millis(500);
    config
}

/// The MQTT options of slot `slot`'s session.
#[must_use]
pub fn mqtt_options(slot: usize, port: u16) -> rumqttc::MqttOptions {
    let mut options =
        rumqttc::MqttOptions::new(format!("{MQTT_TRIGGER}-{slot}"), "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(5));
    options
}

fn trigger(
    name: &str,
    runner: &Runner<Event, Behaviour>,
    store: &Arc<dyn HistoryStore>,
    bound: u32,
) -> Trigger {
    Trigger::new(name, Arc::new(runner.clone()), Arc::clone(store))
        .expect("a valid trigger name")
        .with_initial_state(InitialState::Wrap("Received".to_owned()))
        .expect("a state name")
        .with_max_in_flight(NonZeroU32::new(bound.max(1)).expect("at least one"))
        .with_max_backoff(Duration::from_millis(500))
}

/// Run the worker and both triggers until `stop`; the triggers' counters are written to
/// `e2e_trigger_stats` every 200 ms (a killed incarnation loses at most the last 200 ms).
pub async fn run_workers(
    store: Arc<dyn Store>,
    stats_pool: sqlx::PgPool,
    config: &RunnerConfig,
    workers: &WorkerConfig,
    opts: &TriggerOpts,
    stop: impl Future<Output = ()>,
) -> WorkerCounts {
    let runner = runner(Arc::clone(&store), config.clone(), opts.work_ms);
    let history: Arc<dyn HistoryStore> = store;
    let mut tasks = tokio::task::JoinSet::new();
    let mut monitors = Vec::new();
    if let Some(url) = &opts.nats_url {
        let consumer = Consumer::new(trigger(NATS_TRIGGER, &runner, &history, opts.max_in_flight));
        monitors.push((NATS_TRIGGER, consumer.monitor()));
        let config = nats_config(Duration::from_millis(opts.ack_wait_ms));
        let url = url.clone();
        tasks.spawn(async move {
            let client = loop {
                match async_nats::ConnectOptions::new()
                    .retry_on_initial_connect()
                    .connect(&url)
                    .await
                {
                    Ok(client) => break client,
                    Err(e) => {
                        tracing::error!(error = %e, "NATS client");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            };
            if let Err(e) = consumer.consume(NatsBroker::new(client, config)).await {
                tracing::error!(error = %e, "NATS trigger stopped");
            }
        });
    }
    if let Some(port) = opts.mqtt_port {
        let consumer = Consumer::new(trigger(MQTT_TRIGGER, &runner, &history, opts.max_in_flight));
        monitors.push((MQTT_TRIGGER, consumer.monitor()));
        let options = mqtt_options(opts.slot, port);
        tasks.spawn(async move {
            let broker =
                MqttBroker::connect(options, MQTT_SHARED, MQTT_DEAD, Duration::from_millis(500));
            if let Err(e) = consumer.consume(broker).await {
                tracing::error!(error = %e, "MQTT trigger stopped");
            }
        });
    }
    let worker_id = config.worker_id.clone();
    let record = {
        let monitors = monitors.clone();
        let (pool, worker_id) = (stats_pool.clone(), worker_id.clone());
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                record_stats(&pool, &worker_id, &monitors).await;
            }
        }
    };
    tasks.spawn(record);
    let stats = Worker::new(runner, workers.clone()).run_until(stop).await;
    tasks.shutdown().await;
    record_stats(&stats_pool, &worker_id, &monitors).await;
    WorkerCounts {
        runs_driven: stats.runs_driven,
        leases_lost: stats.leases_lost,
        errors: stats.errors,
    }
}

async fn record_stats(
    pool: &sqlx::PgPool,
    worker_id: &str,
    monitors: &[(&str, agent_triggers::TriggerMonitor)],
) {
    for (name, monitor) in monitors {
        let s = monitor.stats();
        let wide = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let written = sqlx::query(
            "INSERT INTO e2e_trigger_stats (worker_id, trigger, started, duplicates, rejected) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (worker_id, trigger) DO UPDATE SET \
             started = EXCLUDED.started, duplicates = EXCLUDED.duplicates, \
             rejected = EXCLUDED.rejected",
        )
        .bind(worker_id)
        .bind(*name)
        .bind(wide(s.started()))
        .bind(wide(s.duplicates()))
        .bind(wide(s.rejected()))
        .execute(pool)
        .await;
        if let Err(e) = written {
            tracing::debug!(error = %e, "trigger counters not recorded");
        }
    }
}

/// What every incarnation's triggers decided, added up: (started, duplicates, rejected)
/// per trigger.
///
/// # Panics
/// When the table cannot be read.
pub async fn trigger_totals(pool: &sqlx::PgPool) -> BTreeMap<String, (i64, i64, i64)> {
    let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
        "SELECT trigger, sum(started)::bigint, sum(duplicates)::bigint, sum(rejected)::bigint \
         FROM e2e_trigger_stats GROUP BY trigger",
    )
    .fetch_all(pool)
    .await
    .expect("trigger counters");
    rows.into_iter()
        .map(|(t, s, d, r)| (t, (s, d, r)))
        .collect()
}

/// A published message: its key and when its publication was confirmed (ms).
pub type Sent = (String, i64);

/// The body of message `key` from `source`: the fields of `Received`.
///
/// # Panics
/// Never: the body serializes.
#[must_use]
pub fn body(source: &str, key: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "source": source, "key": key }))
        .expect("a body serializes")
}

/// Publish `n_per_s` messages a second to the soak's subject for `for_`, each stored by
/// the stream before the next (a failed publish is sent again with the same
/// `Nats-Msg-Id`, which the stream stores once).
///
/// # Panics
/// When the server cannot be reached.
pub async fn publish_nats(url: String, n_per_s: u64, for_: Duration) -> Vec<Sent> {
    let client = async_nats::connect(url.as_str())
        .await
        .expect("NATS publisher");
    let jetstream = async_nats::jetstream::new(client);
    let mut sent = Vec::new();
    let mut every =
        tokio::time::interval(Duration::from_secs(1) / u32::try_from(n_per_s.max(1)).unwrap_or(1));
    let end = tokio::time::Instant::now() + for_;
    let mut i = 0_u64;
    while tokio::time::Instant::now() < end {
        every.tick().await;
        let key = format!("n-{i:06}");
        loop {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_ID, key.as_str());
            let stored = async {
                jetstream
                    .publish_with_headers(NATS_SUBJECT, headers, body("nats", &key).into())
                    .await?
                    .await
                    .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
            };
            match stored.await {
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, key, "publish again");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        sent.push((key, crate::now_ms()));
        i += 1;
    }
    sent
}

/// Publish `n_per_s` messages a second at QoS 1 to the soak's topic for `for_`, then wait
/// until the broker acknowledged every one (PUBACK).
///
/// # Panics
/// When not every message is acknowledged within 30 s of the last.
pub async fn publish_mqtt(port: u16, n_per_s: u64, for_: Duration) -> Vec<Sent> {
    let mut options = rumqttc::MqttOptions::new("soak-publisher", "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(5));
    options.set_inflight(100);
    let (client, mut event_loop) = rumqttc::AsyncClient::new(options, 1_024);
    let acked = Arc::new(AtomicU64::new(0));
    let polling = {
        let acked = Arc::clone(&acked);
        tokio::spawn(async move {
            loop {
                match event_loop.poll().await {
                    Ok(rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_))) => {
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "MQTT publisher");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        })
    };
    let mut sent = Vec::new();
    let mut every =
        tokio::time::interval(Duration::from_secs(1) / u32::try_from(n_per_s.max(1)).unwrap_or(1));
    let end = tokio::time::Instant::now() + for_;
    let mut i = 0_u64;
    while tokio::time::Instant::now() < end {
        every.tick().await;
        let key = format!("m-{i:06}");
        client
            .publish(
                MQTT_TOPIC,
                rumqttc::QoS::AtLeastOnce,
                false,
                body("mqtt", &key),
            )
            .await
            .expect("the publisher's queue");
        sent.push((key, crate::now_ms()));
        i += 1;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while acked.load(Ordering::Relaxed) < sent.len() as u64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "mosquitto acknowledged {} of {} messages",
            acked.load(Ordering::Relaxed),
            sent.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    polling.abort();
    sent
}

/// What the checker expects.
#[derive(Clone, Debug)]
pub struct Expected<'a> {
    /// The NATS messages published.
    pub nats: &'a [Sent],
    /// The MQTT messages published.
    pub mqtt: &'a [Sent],
    /// The schedule's first tick (its `next_tick` when created).
    pub first_tick: i64,
    /// The schedule as read after it was paused and every worker stopped.
    pub schedule: &'a Schedule,
    /// When it was paused (ms).
    pub paused_at: i64,
}

/// What the checker found.
#[derive(Clone, Debug, Default)]
pub struct TriggersReport {
    /// Runs of the agent.
    pub runs: usize,
    /// Ticks from the first to the paused schedule's next, each expected to have one run.
    pub ticks: usize,
    /// Runs of ticks at or after the paused schedule's next tick and before the pause: a
    /// tick whose write lost its race to the pause (its run counts, the schedule did not
    /// move).
    pub ticks_before_pause_unrecorded: usize,
    /// Runs started by NATS messages.
    pub nats_runs: usize,
    /// Runs started by MQTT messages.
    pub mqtt_runs: usize,
    /// A tick's run creation against the tick's time.
    pub tick_delay: Summary,
    /// A NATS message's run creation against its publication's confirmation.
    pub nats_delay: Summary,
    /// An MQTT message's run creation against its publication.
    pub mqtt_delay: Summary,
    /// Everything wrong, one line each.
    pub violations: Vec<String>,
}

impl TriggersReport {
    /// Panic with every violation, if any.
    ///
    /// # Panics
    /// When a violation was found.
    pub fn assert_clean(&self) {
        assert!(
            self.violations.is_empty(),
            "{} violations:\n  {}",
            self.violations.len(),
            self.violations.join("\n  ")
        );
    }
}

/// Check the runs of the soak: one run per tick from the first to the paused schedule's
/// next tick (and none after the pause), one run per published message and none for a
/// message that was not published, every run completed after exactly one step with the
/// source and key it started with.
#[must_use]
pub fn check_runs(runs: &[RunRecord], expected: &Expected<'_>) -> TriggersReport {
    let mut report = TriggersReport {
        runs: runs.len(),
        ..TriggersReport::default()
    };
    let v = &mut report.violations;
    let every = match &expected.schedule.spec {
        agent_core::schedule::ScheduleSpec::Interval { every_ms, .. } => {
            i64::try_from(*every_ms).unwrap_or(i64::MAX)
        }
        agent_core::schedule::ScheduleSpec::Cron { .. } => {
            v.push("the soak's schedule is an interval".to_owned());
            return report;
        }
    };
    let next = expected.schedule.next_tick.unwrap_or(i64::MAX);
    // Every tick text up to a tick past the pause, with its time.
    let mut tick_of: HashMap<String, i64> = HashMap::new();
    let mut t = expected.first_tick;
    while t <= expected.paused_at.max(next) + every {
        tick_of.insert(tick_text(t), t);
        t += every;
    }
    let mut by_tick: BTreeMap<i64, Vec<&RunRecord>> = BTreeMap::new();
    let mut by_nats: HashMap<String, Vec<&RunRecord>> = HashMap::new();
    let mut by_mqtt: HashMap<String, Vec<&RunRecord>> = HashMap::new();
    for run in runs {
        let handled: Option<(String, String)> = match serde_json::from_value(run.state.clone()) {
            Ok(Event::Handled { source, key }) => Some((source, key)),
            _ => None,
        };
        if run.status != RunStatus::Completed || handled.is_none() || run.version != 1 {
            v.push(format!(
                "run {} is {} in {} at version {} (expected completed in Handled at version 1)",
                run.id, run.status, run.state_name, run.version
            ));
        }
        let (source, key) = handled.unwrap_or_default();
        let label = |name: &str| run.labels.get(name).map(String::as_str);
        match (label(SCHEDULE_LABEL), label(TRIGGER_LABEL)) {
            (Some(SCHEDULE_ID), None) => {
                let Some(&tick) = label(TICK_LABEL).and_then(|text| tick_of.get(text)) else {
                    v.push(format!(
                        "run {} has tick {:?}, not a tick of the schedule's window",
                        run.id,
                        label(TICK_LABEL)
                    ));
                    continue;
                };
                if run.id != expected.schedule.run_id_of(tick) {
                    v.push(format!("run {} is not named after its tick", run.id));
                }
                if source != "schedule" && run.status == RunStatus::Completed {
                    v.push(format!("run {} of a tick handled {source:?}", run.id));
                }
                by_tick.entry(tick).or_default().push(run);
            }
            (None, Some(NATS_TRIGGER)) => {
                if label(MESSAGE_LABEL) != Some(key.as_str()) || source != "nats" {
                    v.push(format!(
                        "run {} of message {:?} handled {source:?} {key:?}",
                        run.id,
                        label(MESSAGE_LABEL)
                    ));
                }
                by_nats.entry(key_of(run, &key)).or_default().push(run);
            }
            (None, Some(MQTT_TRIGGER)) => {
                if source != "mqtt" {
                    v.push(format!("run {} of MQTT handled {source:?}", run.id));
                }
                by_mqtt.entry(key_of(run, &key)).or_default().push(run);
            }
            (s, t) => v.push(format!(
                "run {} was started by neither the schedule nor a trigger (schedule {s:?}, \
                 trigger {t:?})",
                run.id
            )),
        }
    }
    // Ticks: each from the first to the schedule's next exactly once; after it, only
    // ticks due before the pause (a tick whose write lost to the pause).
    let mut tick_delays = Vec::new();
    let mut t = expected.first_tick;
    while t < next {
        report.ticks += 1;
        match by_tick.get(&t).map(Vec::as_slice) {
            None | Some([]) => v.push(format!("tick {} has no run", tick_text(t))),
            Some([run]) => tick_delays.push(run.created_at - t),
            Some(more) => v.push(format!("tick {} has {} runs", tick_text(t), more.len())),
        }
        t += every;
    }
    for (&tick, tick_runs) in by_tick.range(next..) {
        if tick <= expected.paused_at && tick_runs.len() == 1 {
            report.ticks_before_pause_unrecorded += 1;
        } else {
            v.push(format!(
                "tick {} at or after the paused schedule's next tick has {} runs",
                tick_text(tick),
                tick_runs.len()
            ));
        }
    }
    report.tick_delay = Summary::of(&tick_delays);
    let mut per_message = |sent: &[Sent], got: &HashMap<String, Vec<&RunRecord>>, what: &str| {
        let mut delays = Vec::new();
        for (key, at) in sent {
            match got.get(key.as_str()).map(Vec::as_slice) {
                None | Some([]) => v.push(format!("{what} message {key} has no run (lost)")),
                Some([run]) => delays.push(run.created_at - at),
                Some(more) => v.push(format!(
                    "{what} message {key} has {} runs (doubled)",
                    more.len()
                )),
            }
        }
        let published: std::collections::HashSet<&str> =
            sent.iter().map(|(k, _)| k.as_str()).collect();
        for key in got.keys() {
            if !published.contains(key.as_str()) {
                v.push(format!("{what} run for {key}, which was never published"));
            }
        }
        (
            got.values().map(Vec::len).sum::<usize>(),
            Summary::of(&delays),
        )
    };
    (report.nats_runs, report.nats_delay) = per_message(expected.nats, &by_nats, "NATS");
    (report.mqtt_runs, report.mqtt_delay) = per_message(expected.mqtt, &by_mqtt, "MQTT");
    report
}

/// The message key a run handled, or, for a run that did not finish, the one in its
/// initial state.
fn key_of(run: &RunRecord, handled: &str) -> String {
    if !handled.is_empty() {
        return handled.to_owned();
    }
    run.state
        .get("Received")
        .and_then(|r| r.get("key"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or("")
        .to_owned()
}
