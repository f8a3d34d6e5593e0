//! Issue 41: triggers under kill -9. A schedule ticks every second, a NATS JetStream
//! trigger and an MQTT (QoS 1) trigger are fed at a steady rate by publishers in this test,
//! while worker processes (`e2e-worker` in `"agents": "triggers"` mode: the worker, which
//! ticks the schedule, and both triggers, on PostgreSQL) are killed with SIGKILL at random
//! and restarted as new incarnations. Every slot shares the JetStream durable consumer and
//! has its own persistent MQTT session on one shared subscription, stable across its
//! incarnations. Pass: exactly one run per tick from the schedule's first to its last,
//! exactly one run per published message (none lost, none doubled, none for a message never
//! published), every run completed after one step (`e2e::triggered::check_runs`).
//!
//! Reduced size here (20 s of publishing, 50 messages a second per broker, 3 processes);
//! `E2E_SCALE=full` (scripts/reliability) publishes for 5 minutes to 4.
//! `E2E_TRIG_SECONDS`, `E2E_TRIG_RATE`, `E2E_TRIG_WORKERS` override. Needs PostgreSQL,
//! `nats-server` and `mosquitto`: without one it says so and passes; under `CI=true` it fails.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::runner::RunnerConfig;
use agent_core::schedule::{
    CatchUp, NewSchedule, OverlapPolicy, Schedule, ScheduleSpec, create_schedule, pause_schedule,
    tick_text,
};
use agent_core::store::{Labels, RunFilter, RunRecord, Store};
use agent_triggers::Broker as _;
use agent_triggers::mqtt::MqttBroker;
use async_nats::jetstream::{self, consumer::pull, stream};
use e2e::brokers::Broker;
use e2e::db::{TestDb, database_url};
use e2e::procs::{Agents, WorkerOpts, WorkerProc, wait_all_final};
use e2e::triggered::{
    Expected, MQTT_DEAD, MQTT_SHARED, MQTT_TRIGGER, NATS_DEAD, NATS_STREAM, NATS_SUBJECT,
    NATS_TRIGGER, SCHEDULE_ID, STATS_SQL, Sent, TriggerOpts, check_runs, mqtt_options,
    publish_mqtt, publish_nats, tick_state, trigger_totals,
};
use e2e::{full_scale, now_ms, size};
use rand::Rng;

const BIN: &str = env!("CARGO_BIN_EXE_e2e-worker");
const TEST: &str = "triggers_kill9_soak";

const LEASE_MS: u64 = 1_000;
const POLL_MS: u64 = 100;
const ACK_WAIT_MS: u64 = 2_000;

/// Runs of the agent with `labels`, any status.
async fn count(store: &dyn Store, labels: &[(&str, &str)]) -> u64 {
    let filter = RunFilter {
        agent: Some("Event".to_owned()),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..RunFilter::default()
    };
    store
        .count_runs(&filter)
        .await
        .map_or(0, |c| c.iter().map(|(_, n)| n).sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn triggers_kill9_soak() {
    let Some(url) = database_url(TEST).await else {
        return;
    };
    let Some(nats) = Broker::nats(TEST) else {
        return;
    };
    let Some(mqtt) = Broker::mosquitto(TEST) else {
        return;
    };
    let seconds = size("E2E_TRIG_SECONDS", 20, 300);
    let rate = size("E2E_TRIG_RATE", 50, 50);
    let workers = usize::try_from(size("E2E_TRIG_WORKERS", 3, 4)).unwrap_or(3);
    let db = TestDb::create(&url, "trig").await;
    sqlx::raw_sql(STATS_SQL)
        .execute(&db.pool)
        .await
        .expect("the counters' table");
    let store: Arc<dyn Store> = db.store.clone();

    // The stream and its durable consumer, as the workers will find them.
    let js = jetstream::new(async_nats::connect(nats.url()).await.expect("NATS"));
    let soak_stream = js
        .create_stream(stream::Config {
            name: NATS_STREAM.to_owned(),
            subjects: vec![NATS_SUBJECT.to_owned(), NATS_DEAD.to_owned()],
            ..stream::Config::default()
        })
        .await
        .expect("the stream");
    soak_stream
        .create_consumer(pull::Config {
            durable_name: Some(NATS_TRIGGER.to_owned()),
            filter_subject: NATS_SUBJECT.to_owned(),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_millis(ACK_WAIT_MS),
            ..pull::Config::default()
        })
        .await
        .expect("the durable consumer");
    // Each slot's persistent session subscribed before anything is published: mosquitto
    // keeps a shared subscription's messages only for sessions that hold it.
    for slot in 0..workers {
        let mut session = MqttBroker::connect(
            mqtt_options(slot, mqtt.port()),
            MQTT_SHARED,
            MQTT_DEAD,
            Duration::from_millis(500),
        );
        let start = Instant::now();
        while session.receive(1).await.is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "session {slot} did not subscribe"
            );
        }
    }

    let probe = e2e::triggered::runner(Arc::clone(&store), RunnerConfig::default(), 0);
    let created = create_schedule(
        store.as_ref(),
        NewSchedule {
            id: SCHEDULE_ID.to_owned(),
            agent: "Event".to_owned(),
            spec: ScheduleSpec::Interval {
                every_ms: 1_000,
                anchor_ms: 0,
            },
            jitter_ms: 0,
            // Every tick starts a run, whatever the previous one does and however late it
            // is ticked: so every tick of the window must have one.
            overlap: OverlapPolicy::AllowAll,
            catch_up: CatchUp::UpTo(3_600),
            paused: false,
            initial_state: tick_state(),
            labels: Labels::new(),
        },
        Some(&probe),
        now_ms(),
    )
    .await
    .expect("the schedule");
    let first_tick = created.next_tick.expect("an interval ticks");

    let opts = |slot: usize, incarnation: u32| {
        let mut o = WorkerOpts::new(&url, &db.schema, &format!("trig-{slot}-{incarnation}"));
        o.agents = Agents::Triggers;
        o.lease_ms = LEASE_MS;
        o.poll_ms = POLL_MS;
        o.concurrency = 16;
        o.triggers = Some(TriggerOpts {
            slot,
            nats_url: Some(nats.url()),
            mqtt_port: Some(mqtt.port()),
            ack_wait_ms: ACK_WAIT_MS,
            max_in_flight: 200,
            work_ms: 20,
        });
        o
    };
    let mut gens = vec![0_u32; workers];
    let mut procs: Vec<WorkerProc> = (0..workers)
        .map(|s| WorkerProc::spawn(Path::new(BIN), &opts(s, 0)))
        .collect();
    let window = Duration::from_secs(seconds);
    let started = Instant::now();
    let publishing_nats = tokio::spawn(publish_nats(nats.url(), rate, window));
    let publishing_mqtt = tokio::spawn(publish_mqtt(mqtt.port(), rate, window));
    let mut kills = 0_u64;
    while started.elapsed() < window {
        let pause = rand::rng().random_range(300..1_500);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let slot = rand::rng().random_range(0..workers);
        procs[slot].kill9();
        kills += 1;
        let restart = rand::rng().random_range(0..300);
        tokio::time::sleep(Duration::from_millis(restart)).await;
        gens[slot] += 1;
        procs[slot] = WorkerProc::spawn(Path::new(BIN), &opts(slot, gens[slot]));
    }
    let sent_nats = publishing_nats.await.expect("the NATS publisher");
    let sent_mqtt = publishing_mqtt.await.expect("the MQTT publisher");
    let window_end = now_ms();

    // Every message has its run and every tick up to the window's end was ticked; then
    // the schedule is paused and the runs finish.
    let drain = Instant::now();
    let drain_limit = Duration::from_secs(if full_scale() { 300 } else { 60 });
    loop {
        let nats_runs = count(store.as_ref(), &[("trigger", NATS_TRIGGER)]).await;
        let mqtt_runs = count(store.as_ref(), &[("trigger", MQTT_TRIGGER)]).await;
        let next = store
            .load_schedule(SCHEDULE_ID)
            .await
            .ok()
            .flatten()
            .and_then(|s| s.next_tick)
            .unwrap_or(0);
        if nats_runs >= sent_nats.len() as u64
            && mqtt_runs >= sent_mqtt.len() as u64
            && next > window_end
        {
            break;
        }
        assert!(
            drain.elapsed() < drain_limit,
            "not drained in {drain_limit:?}: NATS {nats_runs} runs of {} messages, MQTT \
             {mqtt_runs} of {}, next tick {} (window ended {})",
            sent_nats.len(),
            sent_mqtt.len(),
            tick_text(next),
            tick_text(window_end),
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let paused_at = now_ms();
    pause_schedule(store.as_ref(), SCHEDULE_ID, paused_at)
        .await
        .expect("pause");
    let all_final = wait_all_final(&db, 0, Duration::from_mins(1)).await;
    let drained = drain.elapsed();
    let mut driven = 0;
    let mut leases_lost = 0;
    for p in procs {
        let (code, report) = p.stop(Duration::from_secs(30));
        assert_eq!(code, Some(0), "a worker exited badly");
        if let Some(r) = report {
            driven += r.runs_driven;
            leases_lost += r.leases_lost;
        }
    }
    assert!(all_final, "runs still open a minute after the pause");
    let wall = started.elapsed();

    let schedule = store
        .load_schedule(SCHEDULE_ID)
        .await
        .expect("the schedule")
        .expect("it exists");
    assert!(schedule.paused, "the schedule is paused");
    let runs = store
        .list_runs(&RunFilter {
            agent: Some("Event".to_owned()),
            ..RunFilter::default()
        })
        .await
        .expect("the runs");
    let report = check_runs(
        &runs,
        &Expected {
            nats: &sent_nats,
            mqtt: &sent_mqtt,
            first_tick,
            schedule: &schedule,
            paused_at,
        },
    );
    let consumer = soak_stream
        .get_consumer::<pull::Config>(NATS_TRIGGER)
        .await
        .expect("the durable consumer")
        .info()
        .await
        .expect("its state")
        .clone();
    let totals = trigger_totals(&db.pool).await;
    let (n_started, n_dup, n_rej) = totals.get(NATS_TRIGGER).copied().unwrap_or_default();
    let (m_started, m_dup, m_rej) = totals.get(MQTT_TRIGGER).copied().unwrap_or_default();
    println!(
        "triggers kill -9 soak: {workers} worker processes (lease {LEASE_MS} ms, poll \
         {POLL_MS} ms, JetStream ack_wait {ACK_WAIT_MS} ms), {kills} kills in {seconds} s of \
         publishing at {rate}/s per broker; drained and final {:.1} s after; wall {:.1} s",
        drained.as_secs_f64(),
        wall.as_secs_f64()
    );
    println!(
        "  runs {}: ticks {} (one run each; {} more started by a tick that lost its write \
         to the pause), NATS messages {} -> runs {}, MQTT messages {} -> runs {}",
        report.runs,
        report.ticks,
        report.ticks_before_pause_unrecorded,
        sent_nats.len(),
        report.nats_runs,
        sent_mqtt.len(),
        report.mqtt_runs
    );
    println!(
        "  tick -> run created {}; NATS published -> run created {}; MQTT published -> run \
         created {}",
        report.tick_delay, report.nats_delay, report.mqtt_delay
    );
    println!(
        "  JetStream consumer at the end: unacknowledged {}, never delivered {}; counted by \
         the incarnations (a killed one's last 200 ms lost): NATS \
         started {n_started}, duplicates {n_dup}, rejected {n_rej}; MQTT started \
         {m_started}, duplicates {m_dup}, rejected {m_rej}; runs driven by the last \
         incarnations {driven}, leases lost {leases_lost}",
        consumer.num_ack_pending, consumer.num_pending
    );
    report.assert_clean();
    assert!(kills > 0, "the chaos driver killed nobody");
    assert!(report.ticks > 0 && !sent_nats.is_empty() && !sent_mqtt.is_empty());
    assert_eq!(n_rej + m_rej, 0, "messages were dead-lettered");
    checker_reports_each_kind_of_damage(
        &runs, &sent_nats, &sent_mqtt, &schedule, first_tick, paused_at,
    );
    db.drop().await;
}

/// One way to damage the records.
type Damage<'a> = Box<dyn Fn(&mut Vec<RunRecord>) + 'a>;

/// The checker, shown able to fail: the soak's own clean records, damaged one way at a time.
fn checker_reports_each_kind_of_damage(
    clean: &[RunRecord],
    nats: &[Sent],
    mqtt: &[Sent],
    schedule: &Schedule,
    first_tick: i64,
    paused_at: i64,
) {
    let expected = Expected {
        nats,
        mqtt,
        first_tick,
        schedule,
        paused_at,
    };
    let of = |trigger: &str| {
        clean
            .iter()
            .position(|r| r.labels.get("trigger").is_some_and(|t| t == trigger))
            .expect("a run of the trigger")
    };
    // The first tick's run: a run of a tick past the schedule's next tick (one whose write
    // lost to the pause) may be removed without a finding.
    let first_tick_run = schedule.run_id_of(first_tick);
    let tick = clean
        .iter()
        .position(|r| r.id == first_tick_run)
        .expect("a run of the first tick");
    let damages: Vec<(&str, Damage<'_>)> = vec![
        (
            "has no run (lost)",
            Box::new(|runs| {
                runs.remove(of(NATS_TRIGGER));
            }),
        ),
        (
            "runs (doubled)",
            Box::new(|runs| {
                let mut twin = runs[of(MQTT_TRIGGER)].clone();
                twin.id.push_str("-twin");
                runs.push(twin);
            }),
        ),
        (
            "which was never published",
            Box::new(|runs| {
                let mut stray = runs[of(MQTT_TRIGGER)].clone();
                stray.id.push_str("-stray");
                stray.state = serde_json::json!({"Handled": {"source": "mqtt", "key": "m-unsent"}});
                runs.push(stray);
            }),
        ),
        (
            "has no run",
            Box::new(move |runs| {
                runs.remove(tick);
            }),
        ),
        (
            "expected completed",
            Box::new(|runs| {
                runs[of(NATS_TRIGGER)].status = agent_core::store::RunStatus::Running;
            }),
        ),
        (
            "neither the schedule nor a trigger",
            Box::new(|runs| {
                let mut stray = runs[0].clone();
                "unlabelled".clone_into(&mut stray.id);
                stray.labels.clear();
                runs.push(stray);
            }),
        ),
    ];
    for (finding, damage) in damages {
        let mut runs = clean.to_vec();
        damage(&mut runs);
        let report = check_runs(&runs, &expected);
        assert!(
            report.violations.iter().any(|v| v.contains(finding)),
            "damage `{finding}` not reported: {:?}",
            report.violations
        );
    }
    println!("  checker: each of 6 kinds of damage to these records reported");
}
