//! `agentctl schedules …` and `agentctl triggers …` run as a user would, on a store the
//! fixture agent registered: bad input refused at creation with exit code 2, then each
//! verb, a triggered tick started by the agent's runner and found by `runs --label`, and
//! the runs message triggers and webhooks started, listed by who started them.

mod common;

use std::sync::Arc;

use agent_conformance::fixture::World;
use common::Db;

fn code(out: &std::process::Output) -> i32 {
    out.status.code().expect("exit code")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const STATE: &str = r#"{"Start": {"items": ["apple"]}}"#;

fn bad_input_is_refused_at_creation(new_db: fn() -> Db) {
    let db = new_db();
    for (args, says) in [
        (
            vec!["--cron", "61 * * * *", "--tz", "UTC", "--state", STATE],
            "malformed cron expression `61 * * * *`",
        ),
        (
            vec![
                "--cron",
                "0 8 * * MON-FRI",
                "--tz",
                "Europe/Atlantis",
                "--state",
                STATE,
            ],
            "unknown time zone `Europe/Atlantis`",
        ),
        (
            vec!["--every", "1h", "--state", r#"{"Pay": {"cents": 5}}"#],
            "`Pay` is not an initial state of agent `Order`; start it in `Start`",
        ),
        (vec!["--every", "1h"], "a schedule needs `--state JSON`"),
    ] {
        let mut all = vec!["schedules", "create", "nightly", "--agent", "Order"];
        all.extend_from_slice(&args);
        let out = db.agentctl(&all);
        assert_eq!(code(&out), 2, "{all:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{all:?}: {}", stderr(&out));
    }
    let unknown = db.agentctl(&[
        "schedules",
        "create",
        "x",
        "--agent",
        "Nobody",
        "--every",
        "1h",
        "--state",
        STATE,
    ]);
    assert_eq!(code(&unknown), 2, "{}", stderr(&unknown));
    assert!(
        stderr(&unknown).contains("agent `Nobody` is not registered"),
        "{}",
        stderr(&unknown)
    );
    let listed = db.json(&["schedules", "list"]);
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(0),
        "refused, yet stored: {listed}"
    );
}

fn schedules_are_operated(new_db: fn() -> Db) {
    let db = new_db();
    let created = db.json(&[
        "schedules",
        "create",
        "digest",
        "--agent",
        "Order",
        "--cron",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--state",
        STATE,
        "--label",
        "team=ops",
        "--overlap",
        "buffer-one",
        "--catch-up",
        "3",
    ]);
    assert_eq!(
        created["spec"]["cron"]["time_zone"], "Europe/Berlin",
        "{created}"
    );
    assert_eq!(created["overlap"], "buffer_one");
    assert_eq!(created["catch_up"], serde_json::json!({ "up_to": 3 }));
    assert!(created["next_tick"].as_i64().is_some(), "{created}");

    let table = db.ok(&["schedules", "list"]);
    assert!(
        table.contains("digest") && table.contains("cron `30 2 * * *` in Europe/Berlin"),
        "{table}"
    );
    assert!(
        db.ok(&["schedules", "list", "--agent", "Other"])
            .contains("no schedules of agent")
    );

    let paused = db.json(&["schedules", "pause", "digest"]);
    assert_eq!(paused["paused"], true);
    assert!(
        db.ok(&["schedules", "show", "digest"])
            .contains("status:     paused")
    );
    let resumed = db.json(&["schedules", "resume", "digest"]);
    assert_eq!(resumed["paused"], false);

    let updated = db.json(&[
        "schedules",
        "update",
        "digest",
        "--every",
        "1h",
        "--overlap",
        "allow-all",
    ]);
    assert_eq!(
        updated["spec"]["interval"]["every_ms"], 3_600_000,
        "{updated}"
    );
    assert_eq!(updated["overlap"], "allow_all");
    assert_eq!(
        updated["labels"]["team"], "ops",
        "update keeps what it was not given"
    );
    let nothing = db.agentctl(&["schedules", "update", "digest"]);
    assert_eq!(code(&nothing), 2, "{}", stderr(&nothing));

    let triggered = db.json(&["schedules", "trigger", "digest"]);
    assert_eq!(
        triggered["requested_ticks"].as_array().map(Vec::len),
        Some(1),
        "{triggered}"
    );
    let backfilled = db.json(&[
        "schedules",
        "backfill",
        "digest",
        "--from",
        "2026-01-01T00:00:00Z",
        "--to",
        "2026-01-01T02:00:00Z",
    ]);
    assert_eq!(backfilled["ticks"], 3, "{backfilled}");

    // The agent's runner ticks: the four ticks asked for start their runs, labelled.
    db.runtime.block_on(async {
        let store = db.store().await;
        let runner = common::runner(&store, &Arc::new(World::default()), "Pay");
        let report = agent_core::schedule::tick_due(
            store.as_ref(),
            &runner,
            agent_core::store::now_ms(),
            10,
        )
        .await
        .expect("tick");
        assert_eq!(report.started.len(), 4, "{report:?}");
    });
    let runs = db.json(&["runs", "--label", "schedule=digest"]);
    assert_eq!(runs.as_array().map(Vec::len), Some(4), "{runs}");
    assert!(
        runs.as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == "digest@2026-01-01T01:00:00.000Z"),
        "{runs}"
    );
    let shown = db.ok(&["schedules", "show", "digest"]);
    assert!(
        shown.contains("digest@2026-01-01T02:00:00.000Z") && shown.contains("label:      team=ops"),
        "{shown}"
    );

    db.ok(&["schedules", "delete", "digest"]);
    let missing = db.agentctl(&["schedules", "show", "digest"]);
    assert_eq!(code(&missing), 1, "{}", stderr(&missing));
    assert!(
        stderr(&missing).contains("schedule `digest` not found"),
        "{}",
        stderr(&missing)
    );
    assert_eq!(
        db.json(&["runs", "--label", "schedule=digest"])
            .as_array()
            .map(Vec::len),
        Some(4),
        "deleting the schedule removed its runs"
    );
}

/// `triggers list` counts the runs of each message trigger and webhook by their labels;
/// `triggers show` gives one's runs by status, where its messages came from and its
/// latest runs; `show RUN` says what started a run.
fn triggers_list_what_they_started(new_db: fn() -> Db) {
    let db = new_db();
    assert!(
        db.ok(&["triggers", "list"])
            .contains("no run was started by a trigger or webhook yet")
    );
    db.runtime.block_on(async {
        let store = db.store().await;
        let fingerprint = store
            .agent_graph("Order", None)
            .await
            .expect("graph")
            .expect("the fixture registered Order")
            .fingerprint();
        let message = |key: &'static str, origin: &'static str| {
            vec![
                ("trigger", "inbox"),
                ("trigger.message", key),
                ("trigger.origin", origin),
            ]
        };
        for (id, labels) in [
            ("inbox-1", message("ORDERS:1", "orders.new")),
            ("inbox-2", message("ORDERS:2", "orders.new")),
            ("inbox-3", message("ORDERS:3", "orders.eu")),
            (
                "orders-d-1",
                vec![("webhook", "orders"), ("webhook.delivery", "d-1")],
            ),
            ("by-hand", vec![("team", "ops")]),
        ] {
            let run = agent_core::store::NewRun::new(
                id,
                "Order",
                fingerprint.clone(),
                "Start",
                serde_json::json!({"Start": {"items": ["apple"]}}),
            )
            .with_labels(labels);
            store.create_run(run).await.expect("create");
        }
    });

    let listed = db.json(&["triggers", "list"]);
    let shape: Vec<(String, String, u64)> = listed
        .as_array()
        .expect("a list")
        .iter()
        .map(|t| {
            (
                t["kind"].as_str().unwrap_or_default().to_owned(),
                t["name"].as_str().unwrap_or_default().to_owned(),
                t["runs"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("message".to_owned(), "inbox".to_owned(), 3),
            ("webhook".to_owned(), "orders".to_owned(), 1)
        ],
        "{listed}"
    );
    assert_eq!(listed[0]["by_status"]["running"], 3, "{listed}");
    let table = db.ok(&["triggers", "list"]);
    assert!(
        table.contains("inbox") && table.contains("running 3"),
        "{table}"
    );
    assert!(
        db.ok(&["triggers", "list", "--agent", "Other"])
            .contains("no run of agent `Other` was started by a trigger or webhook")
    );

    let shown = db.ok(&["triggers", "show", "inbox"]);
    for says in [
        "message inbox started 3 runs: running 3",
        "from orders.eu: 1 runs",
        "from orders.new: 2 runs",
        "ORDERS:3",
    ] {
        assert!(shown.contains(says), "`{says}` missing:\n{shown}");
    }
    let cut = db.agentctl(&["triggers", "show", "inbox", "--limit", "2"]);
    assert!(
        stderr(&cut).contains("the latest 2 of 3"),
        "{}",
        stderr(&cut)
    );
    let hook = db.json(&["triggers", "show", "orders"]);
    assert_eq!(hook[0]["kind"], "webhook", "{hook}");
    assert_eq!(hook[0]["latest_runs"][0]["id"], "orders-d-1", "{hook}");
    let nobody = db.agentctl(&["triggers", "show", "nobody"]);
    assert_eq!(code(&nobody), 1, "{}", stderr(&nobody));
    assert!(
        stderr(&nobody).contains("agentctl triggers list"),
        "{}",
        stderr(&nobody)
    );
    assert!(
        db.ok(&["show", "inbox-3"])
            .contains("trigger `inbox`, message `ORDERS:3` on `orders.eu`")
    );
}

/// Each test on SQLite, and on PostgreSQL when one is configured.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(super::Db::sqlite);
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    if !super::Db::postgres_available() {
                        println!(
                            "skipped on PostgreSQL: set DATABASE_URL or AGENTCTL_TEST_PG to a postgres:// URL"
                        );
                        return;
                    }
                    super::$name(super::Db::postgres);
                }
            )*
        }
    };
}

on_both_backends!(
    bad_input_is_refused_at_creation,
    schedules_are_operated,
    triggers_list_what_they_started
);
