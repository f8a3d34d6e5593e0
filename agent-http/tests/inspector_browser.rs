//! The run inspector in a real browser: Debian's Chromium, headless, driven through
//! chromedriver (the `WebDriver` protocol) with fantoccini. Open the runs page and filter it, open a run
//! and see its graph and journal, refuse an action without a token, approve a waiting run
//! from the form and watch it complete without reloading, reach the actions by keyboard and
//! cancel a run through the confirmation dialog.
//!
//! Needs `chromium` and `chromedriver` on `PATH` (or `CHROMIUM` and `CHROMEDRIVER`); without
//! them it says so and passes, except under `CI=true`, where it fails (`.ci/run` installs
//! both). `scripts/browser-test` runs it alone. `INSPECTOR_SCREENSHOTS=DIR` saves what the
//! browser saw (the docs' pictures come from there).

extern crate durable_agents_http as agent_http;

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::store::{RunStatus, Store};
use agent_http::ApiConfig;
use common::{Db, Server, TOKEN};
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

const TAB: char = '\u{e004}';
const ENTER: char = '\u{e007}';

fn which(names: &[&str], env: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.is_file())
    })
}

/// chromedriver on a free loopback port, killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn start_driver(chromedriver: &Path) -> Driver {
    let port = free_port();
    let child = Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "chromedriver did not listen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    driver
}

async fn browser(driver: &Driver, chromium: &Path, profile: &Path) -> Client {
    browser_with(driver, chromium, profile, &[]).await
}

/// A session in Chromium with more command-line switches (`extra`).
async fn browser_with(driver: &Driver, chromium: &Path, profile: &Path, extra: &[&str]) -> Client {
    let mut args = vec![
        "--headless".to_owned(),
        "--no-sandbox".to_owned(),
        "--disable-gpu".to_owned(),
        "--disable-quic".to_owned(),
        "--no-first-run".to_owned(),
        "--disable-background-networking".to_owned(),
        "--disable-component-update".to_owned(),
        "--disable-sync".to_owned(),
        "--window-size=1280,800".to_owned(),
        format!("--user-data-dir={}", profile.display()),
    ];
    args.extend(extra.iter().map(|&a| a.to_owned()));
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        json!({ "binary": chromium, "args": args }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a WebDriver session in Chromium")
}

/// Poll `script`'s value until `ok` holds, for up to 15 s.
async fn until(c: &Client, script: &str, ok: impl Fn(&Value) -> bool, what: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        // A script run while the page navigates may fail: not yet, unless it lasts.
        let v = match c.execute(script, vec![]).await {
            Ok(v) => v,
            Err(e) => Value::String(format!("(script failed: {e})")),
        };
        if ok(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: last saw {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn text_of(c: &Client, id: &str) -> String {
    c.execute(
        "const e = document.getElementById(arguments[0]); return e ? e.textContent : null;",
        vec![json!(id)],
    )
    .await
    .expect("script")
    .as_str()
    .unwrap_or_default()
    .to_owned()
}

async fn key(c: &Client, k: char) {
    c.perform_actions(
        KeyActions::new("keyboard".to_owned())
            .then(KeyAction::Down { value: k })
            .then(KeyAction::Up { value: k }),
    )
    .await
    .expect("key");
}

async fn shot(c: &Client, name: &str) {
    if let Some(dir) = std::env::var_os("INSPECTOR_SCREENSHOTS") {
        let png = c.screenshot().await.expect("screenshot");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(Path::new(&dir).join(name), png).unwrap();
    }
}

/// Scroll to the element `id` and save what the browser shows as `name` (with
/// `INSPECTOR_SCREENSHOTS`).
async fn shot_at(c: &Client, id: &str, name: &str) {
    c.execute(
        "document.getElementById(arguments[0]).scrollIntoView(); return null;",
        vec![json!(id)],
    )
    .await
    .unwrap();
    shot(c, name).await;
}

/// Click the first element `css` selects.
async fn click_css(c: &Client, css: &str) {
    c.find(Locator::Css(css))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// A worker: runs every run that can move (runnable, or waiting with a signal in), with
/// the fixture's runner. The payloads of the signals it sees go to `seen`.
fn worker(
    db: &Db,
    ids: &'static [&'static str],
    seen: Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
) -> tokio::task::JoinHandle<()> {
    worker_with(db, db.runner("Pay"), ids, seen)
}

/// [`worker`] with `runner`, of any agent.
fn worker_with<A, H>(
    db: &Db,
    runner: agent_core::runner::Runner<A, H>,
    ids: &'static [&'static str],
    seen: Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
) -> tokio::task::JoinHandle<()>
where
    A: agent_core::Agent + agent_core::Handle<H>,
    H: Send + Sync + 'static,
{
    let store: Arc<dyn Store> = Arc::clone(&db.store);
    tokio::spawn(async move {
        loop {
            for id in ids {
                let Ok(Some(run)) = store.load_run(id).await else {
                    continue;
                };
                let pending = store.pending_signals(id).await.unwrap_or_default();
                seen.lock()
                    .unwrap()
                    .extend(pending.iter().map(|s| s.payload.clone()));
                let signalled = run.status == RunStatus::Waiting && !pending.is_empty();
                if run.status.is_runnable() || signalled {
                    let _ = runner.run(id).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    })
}

/// Chromium and chromedriver, or `None` (said, and a failure under `CI=true`).
fn chromium_and_driver() -> Option<(PathBuf, PathBuf)> {
    let (Some(chromium), Some(chromedriver)) = (
        which(
            &["chromium", "chromium-browser", "google-chrome"],
            "CHROMIUM",
        ),
        which(&["chromedriver"], "CHROMEDRIVER"),
    ) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI needs chromium and chromedriver (apt-get install chromium chromium-driver)"
        );
        eprintln!(
            "SKIPPED the browser test: chromium or chromedriver is not installed \
             (apt-get install chromium chromium-driver, or set CHROMIUM and CHROMEDRIVER)"
        );
        return None;
    };
    Some((chromium, chromedriver))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_in_chromium() {
    let Some((chromium, chromedriver)) = chromium_and_driver() else {
        return;
    };

    let db = Db::new().await;
    db.drive("order-approve", "Pay").await;
    db.drive("order-cancel", "Pay").await;
    db.drive("order-cancelled", "Cancelled").await;
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let work = worker(&db, &["order-approve", "order-cancel"], Arc::clone(&seen));
    let driver = start_driver(&chromedriver).await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, &chromium, profile.path()).await;

    // The runs page, live, filtered to the waiting runs.
    c.goto(&server.url("/ui/")).await.unwrap();
    c.wait()
        .for_element(Locator::Css("#runs-table"))
        .await
        .unwrap();
    until(
        &c,
        "return document.getElementById('live-state').textContent",
        |v| v == "live updates: on",
        "the runs page follows the events",
    )
    .await;
    shot(&c, "inspector-runs.png").await;
    // Statuses by meaning: done, undone by a saga, stopped by a person and broken each look
    // different (colours and mark), as the page's stylesheet renders them.
    let looks = c
        .execute(
            "return ['completed', 'compensated', 'cancelled', 'failed'].map(s => { \
               const e = document.createElement('span'); e.className = 'status s-' + s; \
               document.body.appendChild(e); const st = getComputedStyle(e); \
               const mark = getComputedStyle(e, '::before').content; \
               const look = [st.color, st.backgroundColor, mark].join(' '); e.remove(); \
               return look; });",
            vec![],
        )
        .await
        .unwrap();
    let looks: Vec<&str> = looks
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let distinct: std::collections::HashSet<&&str> = looks.iter().collect();
    assert_eq!(distinct.len(), 4, "statuses that look alike: {looks:?}");
    c.find(Locator::Css("select[name=status]"))
        .await
        .unwrap()
        .select_by_value("waiting")
        .await
        .unwrap();
    c.find(Locator::Css("form.filters button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let rows = until(
        &c,
        "return location.search.includes('status=waiting') ? Array.from(document.querySelectorAll('#runs-table tbody tr[data-run]')).map(r => r.dataset.run).sort() : null",
        Value::is_array,
        "the filtered page",
    )
    .await;
    assert_eq!(rows, json!(["order-approve", "order-cancel"]));

    // Into a run: its graph with the path, its journal.
    c.find(Locator::LinkText("order-approve"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .for_element(Locator::Css("#graph svg .node.current"))
        .await
        .unwrap();
    let current = c
        .find(Locator::Css("#graph svg .node.current"))
        .await
        .unwrap()
        .attr("data-state")
        .await
        .unwrap();
    assert_eq!(current.as_deref(), Some("Confirm"));
    assert!(
        !c.find_all(Locator::Css("#graph svg .edge.taken"))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(text_of(&c, "journal").await.contains("Reserve"));
    assert_eq!(text_of(&c, "run-status").await, "waiting");
    until(
        &c,
        "return document.getElementById('live-state').textContent",
        |v| v == "live updates: on",
        "the run page follows the run",
    )
    .await;
    // A mark that a reload would wipe.
    c.execute("window.__notReloaded = true; return null;", vec![])
        .await
        .unwrap();

    // Without a token, the action is refused (the dialog asks, nobody answers).
    c.find(Locator::Id("signal-send"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .for_element(Locator::Css("#token-dialog[open]"))
        .await
        .unwrap();
    c.find(Locator::Css("#token-dialog button[value=cancel]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &c,
        "return document.getElementById('action-result').textContent",
        |v| v.as_str().is_some_and(|s| s.contains("No token")),
        "the refusal",
    )
    .await;
    assert!(
        db.store
            .pending_signals("order-approve")
            .await
            .unwrap()
            .is_empty()
    );

    // Approve from the form, with the token: the run completes on the page, no reload.
    // The form was built from the payload's schema: tick `ok`, write a note.
    c.find(Locator::Id("sig-ok"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.find(Locator::Id("sig-note"))
        .await
        .unwrap()
        .send_keys("approved in the browser")
        .await
        .unwrap();
    c.find(Locator::Id("signal-send"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .for_element(Locator::Css("#token-dialog[open]"))
        .await
        .unwrap();
    c.find(Locator::Id("token-input"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    c.find(Locator::Id("token-save"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &c,
        "return document.getElementById('run-status').textContent",
        |v| v == "completed",
        "the run completes on the page",
    )
    .await;
    // The payload the form built, typed by the schema, is what the run received.
    assert_eq!(
        seen.lock().unwrap().first(),
        Some(&json!({"ok": true, "note": "approved in the browser"}))
    );
    let not_reloaded = c
        .execute("return window.__notReloaded === true;", vec![])
        .await
        .unwrap();
    assert_eq!(not_reloaded, json!(true), "the page was reloaded");
    assert!(
        text_of(&c, "feed")
            .await
            .contains("run finished: completed")
    );
    shot(&c, "inspector-run.png").await;
    shot_at(&c, "graph", "inspector-graph.png").await;

    // The run's timing, from its page's link: the waterfall's bars are placed by the
    // stylesheet's classes (the CSP allows no inline style), the wait among them.
    c.find(Locator::Id("run-timing"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .for_element(Locator::Css("#waterfall tr.wf-wait"))
        .await
        .unwrap();
    let bars = c
        .execute(
            "const track = document.querySelector('#waterfall td.wf-track'); \
             const w = track.getBoundingClientRect().width; \
             return Array.from(document.querySelectorAll('#waterfall .wf-bar')).map(b => { \
               const n = Number(/w-(\\d+)/.exec(b.className)[1]); \
               return [n, b.getBoundingClientRect().width / w * 100, \
                       getComputedStyle(b).position]; });",
            vec![],
        )
        .await
        .unwrap();
    let bars = bars.as_array().expect("bars");
    assert!(bars.len() > 5, "{bars:?}");
    for bar in bars {
        let (want, got) = (bar[0].as_f64().unwrap(), bar[1].as_f64().unwrap());
        assert_eq!(bar[2], "absolute", "{bar}");
        // Within a pixel or two of its class's percent (a 0% bar is a 2 px sliver).
        assert!((want - got).abs() < 2.0, "a bar of {want}% drawn {got}%");
    }
    assert!(
        text_of(&c, "waterfall")
            .await
            .contains("waiting for signal `confirm`")
    );
    shot(&c, "inspector-timing.png").await;

    // Another run: reach Cancel by keyboard, confirm in the dialog.
    c.goto(&server.url("/ui/runs/order-cancel")).await.unwrap();
    c.wait()
        .for_element(Locator::Id("cancel-button"))
        .await
        .unwrap();
    press_by_keyboard(&c, "cancel-button").await;
    wait_confirm(&c).await;
    c.find(Locator::Id("confirm-reason"))
        .await
        .unwrap()
        .send_keys("the customer asked")
        .await
        .unwrap();
    c.find(Locator::Id("confirm-yes"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &c,
        "return document.getElementById('run-status').textContent",
        |v| v == "cancelled",
        "the run is cancelled on the page",
    )
    .await;
    let history = db.store.history("order-cancel").await.unwrap();
    let note = history
        .iter()
        .find_map(|t| t.note.clone())
        .expect("the cancel's note");
    assert_eq!(note.reason, "the customer asked");

    // Schedules from the inspector, through the API with the tab's token: create one from
    // the form, pause it, run it now, delete it.
    c.goto(&server.url("/ui/schedules")).await.unwrap();
    c.wait()
        .for_element(Locator::Id("schedule-form"))
        .await
        .unwrap();
    for (id, text) in [
        ("schedule-id", "nightly"),
        ("schedule-every", "3600"),
        ("schedule-state", r#"{"Start": {"items": ["apple"]}}"#),
    ] {
        c.find(Locator::Id(id))
            .await
            .unwrap()
            .send_keys(text)
            .await
            .unwrap();
    }
    c.find(Locator::Css("#schedule-form button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let status = "return (document.querySelector('#schedule-nightly .schedule-status') || {}).textContent || null";
    until(&c, status, |v| v == "active", "the new schedule is listed").await;
    let created = db.store.load_schedule("nightly").await.unwrap();
    assert_eq!(created.map(|s| s.agent).as_deref(), Some("Order"));
    // One action: its button, confirmed, then the page it reloads (a mark set on the old
    // page is gone on the new one).
    let act = |op: &'static str| {
        let c = c.clone();
        async move {
            c.execute("window.__beforeAction = true; return null;", vec![])
                .await
                .unwrap();
            c.find(Locator::Css(&format!(
                "#schedule-nightly button[data-op={op}]"
            )))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
            c.find(Locator::Id("confirm-yes"))
                .await
                .unwrap()
                .click()
                .await
                .unwrap();
            until(
                &c,
                "return window.__beforeAction !== true && document.readyState === 'complete'",
                |v| v == true,
                "the page reloaded after the action",
            )
            .await;
        }
    };
    act("pause").await;
    until(&c, status, |v| v == "paused", "the schedule is paused").await;
    act("trigger").await;
    let asked = db.store.load_schedule("nightly").await.unwrap().unwrap();
    assert_eq!(asked.requested_ticks.len(), 1, "{asked:?}");
    assert!(asked.paused);
    act("delete").await;
    until(
        &c,
        "return document.getElementById('schedule-nightly') === null",
        |v| v == true,
        "the schedule is gone from the page",
    )
    .await;
    assert!(db.store.load_schedule("nightly").await.unwrap().is_none());

    c.close().await.unwrap();
    work.abort();
}

/// Reach the control `id` with the Tab key (from wherever the focus is) and press Enter.
async fn press_by_keyboard(c: &Client, id: &str) {
    for _ in 0..80 {
        key(c, TAB).await;
        let focused = c
            .execute("return document.activeElement.id;", vec![])
            .await
            .unwrap();
        if focused == id {
            key(c, ENTER).await;
            return;
        }
    }
    panic!("Tab never reached #{id}");
}

async fn wait_confirm(c: &Client) {
    c.wait()
        .for_element(Locator::Css("#confirm-dialog[open]"))
        .await
        .unwrap();
}

/// Each row of the batch's results: run, outcome and result as shown, sorted by run.
async fn batch_outcomes(c: &Client) -> Value {
    c.execute(
        "return Array.from(document.querySelectorAll('#batch-results tbody tr')) \
           .map(r => [r.dataset.run, r.dataset.outcome, r.cells[1].textContent]).sort();",
        vec![],
    )
    .await
    .unwrap()
}

/// The batch form, its button pressed: check that the confirmation asks `asks` (saving what
/// the browser shows as `picture`, when given), confirm, and wait for the summary `says`;
/// then each run's outcome ([`batch_outcomes`]).
async fn confirm_batch(c: &Client, asks: &str, picture: Option<&str>, says: &str) -> Value {
    wait_confirm(c).await;
    assert_eq!(text_of(c, "confirm-text").await, asks);
    if let Some(name) = picture {
        shot(c, name).await;
    }
    click(c, "confirm-yes").await;
    until(
        c,
        "return document.getElementById('batch-summary').textContent",
        |v| v == says,
        "the batch's summary",
    )
    .await;
    batch_outcomes(c).await
}

/// Fill the control `id` with `text` (what was in it replaced).
async fn fill(c: &Client, id: &str, text: &str) {
    let el = c.find(Locator::Id(id)).await.unwrap();
    el.clear().await.unwrap();
    el.send_keys(text).await.unwrap();
}

async fn click(c: &Client, id: &str) {
    c.find(Locator::Id(id))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// The statuses of `ids` in the store.
async fn statuses(db: &Db, ids: &[&str]) -> Vec<RunStatus> {
    let mut out = Vec::new();
    for id in ids {
        out.push(db.store.load_run(id).await.unwrap().expect(id).status);
    }
    out
}

/// Start a run from an agent's page on a server that starts runs of it (and see the API's
/// refusals there), then act on a filtered set of runs from the runs page: a batch cancel
/// whose confirmation counts the runs, reached by keyboard, and a batch some runs refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_runs_and_batch_actions_in_chromium() {
    let Some((chromium, chromedriver)) = chromium_and_driver() else {
        return;
    };
    let db = Db::new().await;
    db.drive("batch-a", "Pay").await;
    db.drive("batch-b", "Pay").await;
    db.complete("batch-done").await;
    let server = Server::serve(
        &db.store,
        ApiConfig::default()
            .with_token(TOKEN)
            .with_agent(db.runner("Pay")),
    )
    .await;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let work = worker(&db, &["batch-a", "batch-b"], seen);
    let driver = start_driver(&chromedriver).await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, &chromium, profile.path()).await;

    // The agent's page, with the tab's token.
    open_with_token(&c, &server.url("/ui/agents/Order"), "start-form").await;
    let result = "return document.getElementById('start-result').textContent";

    // A field the agent's type refuses: the API's error is shown, nothing started.
    fill(&c, "start-id", "ui-bad").await;
    fill(&c, "start-Start-items", r#"["apple", 3]"#).await;
    click(&c, "start-send").await;
    let refused = until(
        &c,
        result,
        |v| v.as_str().is_some_and(|s| s.starts_with("✗ Refused")),
        "the refused start",
    )
    .await;
    assert!(
        refused.as_str().unwrap().starts_with("✗ Refused (422): "),
        "{refused}"
    );
    assert!(db.store.load_run("ui-bad").await.unwrap().is_none());
    // A state that is not initial (offered by hand: the form lists only initial ones).
    c.execute(
        "const s = document.getElementById('start-state'); s.add(new Option('Pay', 'Pay')); \
         const fs = document.createElement('fieldset'); fs.className = 'start-fields'; \
         fs.dataset.state = 'Pay'; fs.dataset.shape = 'json'; \
         const t = document.createElement('textarea'); t.dataset.whole = 'true'; \
         t.value = '{\"cents\": 5}'; fs.appendChild(t); \
         document.getElementById('start-send').before(fs); \
         s.value = 'Pay'; s.dispatchEvent(new Event('change', { bubbles: true })); \
         document.getElementById('start-result').textContent = ''; return null;",
        vec![],
    )
    .await
    .unwrap();
    click(&c, "start-send").await;
    let refused = until(
        &c,
        result,
        |v| v.as_str().is_some_and(|s| s.starts_with("✗ Refused")),
        "the start in a state that is not initial",
    )
    .await;
    assert_eq!(
        refused,
        "✗ Refused (422): `Pay` is not an initial state of agent `Order`; start it in `Start`"
    );
    assert!(db.store.load_run("ui-bad").await.unwrap().is_none());

    // The start itself: the run is created as the form built it, and linked.
    c.refresh().await.unwrap();
    c.wait()
        .for_element(Locator::Id("start-form"))
        .await
        .unwrap();
    fill(&c, "start-id", "ui-started").await;
    fill(&c, "start-Start-items", r#"["apple", "kiwi"]"#).await;
    fill(&c, "start-labels", "from=browser").await;
    click(&c, "start-send").await;
    let started = until(
        &c,
        result,
        |v| v.as_str().is_some_and(|s| s.starts_with("✓")),
        "the started run",
    )
    .await;
    assert!(
        started
            .as_str()
            .unwrap()
            .starts_with("✓ Started run ui-started"),
        "{started}"
    );
    shot(&c, "inspector-start.png").await;
    let run = db.store.load_run("ui-started").await.unwrap().expect("run");
    assert_eq!(run.state, json!({"Start": {"items": ["apple", "kiwi"]}}));
    assert_eq!(run.labels.get("from").map(String::as_str), Some("browser"));
    click(&c, "start-link").await;
    c.wait()
        .for_element(Locator::Id("run-status"))
        .await
        .unwrap();
    assert_eq!(text_of(&c, "run-state").await, "Start");
    assert!(
        c.current_url()
            .await
            .unwrap()
            .path()
            .ends_with("/ui/runs/ui-started")
    );
    // It appears on the runs page.
    c.goto(&server.url("/ui/")).await.unwrap();
    c.wait()
        .for_element(Locator::Css("#runs-table tr[data-run='ui-started']"))
        .await
        .unwrap();

    // A batch cancel over the waiting runs, reached with the keyboard: the confirmation
    // says how many, each is cancelled in the store, the others are left alone.
    c.goto(&server.url("/ui/?status=waiting")).await.unwrap();
    c.wait().for_element(Locator::Id("batch-go")).await.unwrap();
    press_by_keyboard(&c, "batch-go").await;
    let outcomes = confirm_batch(
        &c,
        "Cancel 2 runs matching these filters (status=waiting)? \
         Each run answers for itself: those that refuse are listed.",
        Some("inspector-batch-confirm.png"),
        "Cancel 2 runs: 2 done, 0 refused.",
    )
    .await;
    assert_eq!(
        outcomes,
        json!([["batch-a", "done", "✓ done"], ["batch-b", "done", "✓ done"]])
    );
    until_statuses(
        &db,
        &["batch-a", "batch-b"],
        &[RunStatus::Cancelled, RunStatus::Cancelled],
    )
    .await;
    let note = db
        .store
        .history("batch-a")
        .await
        .unwrap()
        .iter()
        .find_map(|t| t.note.clone())
        .expect("the cancel's note");
    assert_eq!(note.by, "inspector");
    assert_eq!(
        statuses(&db, &["batch-done", "ui-started"]).await,
        [RunStatus::Completed, RunStatus::Running]
    );

    // A batch over every run of the agent: the completed one refuses, the rest go on, and
    // each run's answer is listed.
    c.goto(&server.url("/ui/?agent=Order")).await.unwrap();
    c.wait().for_element(Locator::Id("batch-go")).await.unwrap();
    click(&c, "batch-go").await;
    let outcomes = confirm_batch(
        &c,
        "Cancel 4 runs matching these filters (agent=Order)? \
         Each run answers for itself: those that refuse are listed.",
        None,
        "Cancel 4 runs: 3 done, 1 refused.",
    )
    .await;
    assert_eq!(
        outcomes,
        json!([
            ["batch-a", "done", "✓ done"],
            ["batch-b", "done", "✓ done"],
            ["batch-done", "refused", "✗ refused (409)"],
            ["ui-started", "done", "✓ done"]
        ])
    );
    let detail = c
        .execute(
            "return document.querySelector(\"#batch-results tr[data-run='batch-done']\").cells[2].textContent;",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        detail.as_str().is_some_and(|d| d.contains("completed")),
        "{detail}"
    );
    shot(&c, "inspector-batch.png").await;
    assert_eq!(statuses(&db, &["batch-done"]).await, [RunStatus::Completed]);
    assert_ne!(
        statuses(&db, &["ui-started"]).await,
        [RunStatus::Running],
        "the started run was cancelled"
    );

    c.close().await.unwrap();
    work.abort();
}

/// Open a page and set this tab's token, as a person would once.
async fn open_with_token(c: &Client, url: &str, wait_for: &str) {
    c.goto(url).await.unwrap();
    c.wait().for_element(Locator::Id(wait_for)).await.unwrap();
    c.execute(
        "sessionStorage.setItem('durable-agents-token', arguments[0]); return null;",
        vec![json!(TOKEN)],
    )
    .await
    .unwrap();
}

/// Wait until the page follows its event stream: a navigation started while the stream
/// still connects waits for it (a minute, in Chromium).
async fn live(c: &Client) {
    until(
        c,
        "return document.getElementById('live-state').textContent",
        |v| v == "live updates: on",
        "the page follows the events",
    )
    .await;
}

/// Wait until every one of `ids` is in `want` in the store.
async fn until_statuses(db: &Db, ids: &[&str], want: &[RunStatus]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = statuses(db, ids).await;
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "{ids:?}: {now:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The batch's other two actions from the runs page: retry the failed runs, then answer
/// the waiting runs' signal with one payload, each confirmed with its count and each run's
/// answer listed; a worker then takes the runs to their end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_retry_and_batch_signal_in_chromium() {
    use agent_core::store::RunFailure;

    let Some((chromium, chromedriver)) = chromium_and_driver() else {
        return;
    };
    let db = Db::new().await;
    for id in ["fail-a", "fail-b", "wait-a", "wait-b"] {
        db.drive(id, "Pay").await;
    }
    for id in ["fail-a", "fail-b"] {
        db.store
            .set_status(
                id,
                RunStatus::Failed,
                Some(RunFailure {
                    code: "handler".into(),
                    message: "a failure for the test".to_owned(),
                }),
            )
            .await
            .unwrap();
    }
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;
    let driver = start_driver(&chromedriver).await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, &chromium, profile.path()).await;

    // Retry every failed run: the confirmation counts them, each goes back to work.
    open_with_token(&c, &server.url("/ui/?status=failed"), "batch-go").await;
    c.find(Locator::Id("batch-action"))
        .await
        .unwrap()
        .select_by_value("retry")
        .await
        .unwrap();
    click(&c, "batch-go").await;
    let outcomes = confirm_batch(
        &c,
        "Retry 2 runs matching these filters (status=failed)? \
         Each run answers for itself: those that refuse are listed.",
        None,
        "Retry 2 runs: 2 done, 0 refused.",
    )
    .await;
    assert_eq!(
        outcomes,
        json!([["fail-a", "done", "✓ done"], ["fail-b", "done", "✓ done"]])
    );
    until_statuses(
        &db,
        &["fail-a", "fail-b"],
        &[RunStatus::Running, RunStatus::Running],
    )
    .await;
    assert!(
        db.store
            .load_run("fail-a")
            .await
            .unwrap()
            .unwrap()
            .error
            .is_none()
    );

    // A worker drives the retried runs back to their wait; then one signal answers all four.
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let work = worker(
        &db,
        &["fail-a", "fail-b", "wait-a", "wait-b"],
        Arc::clone(&seen),
    );
    let waiting = [RunStatus::Waiting; 4];
    until_statuses(&db, &["fail-a", "fail-b", "wait-a", "wait-b"], &waiting).await;
    open_with_token(&c, &server.url("/ui/?status=waiting"), "batch-go").await;
    c.find(Locator::Id("batch-action"))
        .await
        .unwrap()
        .select_by_value("signal")
        .await
        .unwrap();
    // The signal's fields show only for the signal.
    let hidden = "return document.getElementById('batch-signal').hidden";
    until(&c, hidden, |v| v == false, "the signal's fields").await;
    fill(&c, "batch-signal-name", "confirm").await;
    fill(&c, "batch-payload", r#"{"ok": true, "note": "batch"}"#).await;
    click(&c, "batch-go").await;
    let outcomes = confirm_batch(
        &c,
        "Send the signal confirm to 4 runs matching these filters (status=waiting)? \
         Each run answers for itself: those that refuse are listed.",
        Some("inspector-batch-signal.png"),
        "Send the signal confirm to 4 runs: 4 done, 0 refused.",
    )
    .await;
    assert_eq!(outcomes.as_array().map(Vec::len), Some(4), "{outcomes}");
    assert!(
        outcomes
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r[1] == "done" && r[2] == "✓ done"),
        "{outcomes}"
    );
    until_statuses(
        &db,
        &["fail-a", "fail-b", "wait-a", "wait-b"],
        &[RunStatus::Completed; 4],
    )
    .await;
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .any(|p| *p == json!({"ok": true, "note": "batch"})),
        "the payload the runs received"
    );

    c.close().await.unwrap();
    work.abort();
}

/// A run's family in the browser: the tree nested as lists, a grandchild opened from it,
/// the breadcrumbs back up to the root; and the search from the runs page, by a whole id
/// (the run opens), by the first characters of ids and by text in the states.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_tree_and_search_in_chromium() {
    use agent_core::store::NewRun;

    let Some((chromium, chromedriver)) = chromium_and_driver() else {
        return;
    };
    let db = Db::new().await;
    let new = |id: &str, note: &str| {
        NewRun::new(id, "Tree", "f", "Start", json!({"Start": {"note": note}}))
    };
    db.store.create_run(new("root", "the top")).await.unwrap();
    db.store
        .create_run(new("root.a", "first child").spawned_by("root", 1))
        .await
        .unwrap();
    db.store
        .create_run(new("root.b", "second child").spawned_by("root", 1))
        .await
        .unwrap();
    db.store
        .create_run(new("root.a.x", "a grandchild with a Teapot").spawned_by("root.a", 1))
        .await
        .unwrap();
    db.store
        .set_status("root.b", RunStatus::Failed, None)
        .await
        .unwrap();
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;
    let driver = start_driver(&chromedriver).await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, &chromium, profile.path()).await;

    c.goto(&server.url("/ui/runs/root")).await.unwrap();
    c.wait()
        .for_element(Locator::Id("child-tree"))
        .await
        .unwrap();
    // The grandchild is drawn inside its parent's item, indented under it.
    let nested = c
        .execute(
            "const g = document.querySelector(\"#child-tree li[data-run='root.a'] > ul > li[data-run='root.a.x']\"); \
             const p = document.querySelector(\"#child-tree li[data-run='root.a']\"); \
             return g && p ? [g.getBoundingClientRect().left > p.getBoundingClientRect().left, \
               g.offsetParent !== null] : null;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        nested,
        json!([true, true]),
        "the grandchild, nested and shown"
    );
    let rollup = c
        .execute(
            "return Array.from(document.querySelectorAll('#children-rollup li')) \
               .map(l => l.textContent.trim());",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(rollup, json!(["2 in all:", "running 1", "failed 1"]));
    shot_at(&c, "children-h", "inspector-child-tree.png").await;
    // Open the grandchild from the tree; its breadcrumbs lead back to the root.
    click_css(&c, "#child-tree li[data-run='root.a.x'] > a").await;
    c.wait()
        .for_element(Locator::Id("breadcrumbs"))
        .await
        .unwrap();
    let crumbs = c
        .execute(
            "return Array.from(document.querySelectorAll('#breadcrumbs li')) \
               .map(l => l.textContent.trim());",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(crumbs, json!(["root (Tree)", "root.a (Tree)", "root.a.x"]));
    click_css(&c, "#breadcrumbs a[href$='/ui/runs/root']").await;
    c.wait()
        .for_element(Locator::Id("child-tree"))
        .await
        .unwrap();
    assert!(
        c.current_url()
            .await
            .unwrap()
            .path()
            .ends_with("/ui/runs/root")
    );

    // The search box, from the keyboard: a whole id opens the run.
    c.goto(&server.url("/ui/")).await.unwrap();
    c.wait().for_element(Locator::Id("search")).await.unwrap();
    let search = c.find(Locator::Id("search")).await.unwrap();
    search.send_keys(&format!("root.b{ENTER}")).await.unwrap();
    c.wait()
        .for_element(Locator::Id("run-status"))
        .await
        .unwrap();
    assert!(
        c.current_url()
            .await
            .unwrap()
            .path()
            .ends_with("/ui/runs/root.b")
    );
    assert_eq!(text_of(&c, "run-status").await, "failed");
    // The first characters of ids: the runs found, with where.
    c.goto(&server.url("/ui/")).await.unwrap();
    c.wait().for_element(Locator::Id("search")).await.unwrap();
    // The seventh page with a live stream in this session: the pages left behind (kept in
    // the back-forward cache) must have closed theirs, or this one waits a minute for a
    // connection to the server and the wait below fails.
    live(&c).await;
    fill(&c, "search", &format!("root.{ENTER}")).await;
    c.wait()
        .for_element(Locator::Id("search-summary"))
        .await
        .unwrap();
    let rows = "return Array.from(document.querySelectorAll('#runs-table tbody tr[data-run]')) \
                .map(r => [r.dataset.run, r.querySelector('td.found').textContent]).sort();";
    let found = c.execute(rows, vec![]).await.unwrap();
    assert_eq!(
        found,
        json!([["root.a", "id"], ["root.a.x", "id"], ["root.b", "id"]])
    );
    // Text in a state, in any case.
    fill(&c, "search", &format!("teapot{ENTER}")).await;
    until(
        &c,
        rows,
        |v| *v == json!([["root.a.x", "/Start/note = \"a grandchild with a Teapot\""]]),
        "the run whose state holds the text",
    )
    .await;
    assert!(
        text_of(&c, "search-summary")
            .await
            .contains("1 found among the 4 newest runs matching the other filters")
    );
    shot(&c, "inspector-search.png").await;

    c.close().await.unwrap();
}

/// Press Apply on the edit page; its outcome, once it starts with `mark` (`✓`, `✗ Refused`).
async fn apply_edit(c: &Client, mark: &str) -> String {
    click(c, "edit-apply").await;
    let outcome = until(
        c,
        "return document.getElementById('edit-result').textContent",
        |v| v.as_str().is_some_and(|s| s.starts_with(mark)),
        "the edit's outcome",
    )
    .await;
    outcome.as_str().unwrap_or_default().to_owned()
}

/// Edit a waiting run's state from its edit page: a state the graph does not allow is
/// refused with the API's message and nothing written; a changed field is previewed, applied
/// as a patch, and the run, driven by a runner, continues from the edited state to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_state_is_edited_previewed_and_resumed_in_chromium() {
    let Some((chromium, chromedriver)) = chromium_and_driver() else {
        return;
    };
    let db = Db::new().await;
    db.drive("edit-me", "Pay").await;
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;
    let driver = start_driver(&chromedriver).await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, &chromium, profile.path()).await;

    // From the run's page to its edit page, with the tab's token.
    open_with_token(&c, &server.url("/ui/runs/edit-me"), "edit-link").await;
    live(&c).await;
    click(&c, "edit-link").await;
    c.wait()
        .for_element(Locator::Id("edit-form"))
        .await
        .unwrap();
    let versions = db.history_len("edit-me").await;

    // Back to the start, which the graph does not lead to from `Confirm`: the preview says
    // the variant moves, the API refuses and says why, next to the form.
    fill(&c, "edit-json", r#"{"Start": {"items": ["apple"]}}"#).await;
    fill(&c, "edit-reason", "start over").await;
    click(&c, "edit-preview").await;
    c.wait()
        .for_element(Locator::Css("#edit-diff tr.dstate"))
        .await
        .unwrap();
    assert!(text_of(&c, "edit-diff").await.contains("→ state"));
    let refused = apply_edit(&c, "✗ Refused").await;
    assert!(
        refused.starts_with("✗ Refused (422): ")
            && refused.contains("no edge from `Confirm` to `Start`"),
        "{refused}"
    );
    assert_eq!(db.history_len("edit-me").await, versions, "a refusal wrote");

    // One field changed: the preview shows that field alone, Apply sends it.
    fill(
        &c,
        "edit-json",
        r#"{"Confirm": {"payment_id": "pay-edited"}}"#,
    )
    .await;
    fill(&c, "edit-reason", "the charge was made again").await;
    fill(&c, "edit-by", "browser-test").await;
    click(&c, "edit-preview").await;
    let rows = until(
        &c,
        "return Array.from(document.querySelectorAll('#edit-diff tbody tr')) \
           .map(r => Array.from(r.cells).map(td => td.textContent));",
        |v| v.as_array().is_some_and(|a| !a.is_empty()),
        "the preview",
    )
    .await;
    let before =
        db.store.load_run("edit-me").await.unwrap().unwrap().state["Confirm"]["payment_id"].clone();
    assert_eq!(
        rows,
        json!([[
            "~ changed",
            "/Confirm/payment_id",
            before.to_string(),
            "\"pay-edited\""
        ]])
    );
    shot_at(&c, "edit-reason", "inspector-edit.png").await;
    let edited = apply_edit(&c, "✓").await;
    assert!(edited.contains("is running at version"), "{edited}");
    let run = db.store.load_run("edit-me").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.state["Confirm"]["payment_id"], "pay-edited");
    let history = db.store.history("edit-me").await.unwrap();
    let note = history.last().unwrap().note.clone().unwrap();
    assert_eq!(
        (note.by.as_str(), note.reason.as_str()),
        ("browser-test", "the charge was made again")
    );

    // A runner steps the edited state: it waits again, is confirmed, and ends with the
    // edited payment; the run's page, from the result's link, says so.
    let runner = db.runner("Pay");
    assert_eq!(
        runner.run("edit-me").await.unwrap().status,
        RunStatus::Waiting
    );
    runner
        .signal("edit-me", "confirm", json!({"ok": true}))
        .await
        .unwrap();
    let done = runner.run("edit-me").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.state, json!({"Done": {"payment_id": "pay-edited"}}));
    click(&c, "edit-run-link").await;
    until(
        &c,
        "const e = document.getElementById('run-status'); return e ? e.textContent : null;",
        |v| v == "completed",
        "the run's page",
    )
    .await;
    assert!(
        c.find_all(Locator::Id("edit-link"))
            .await
            .unwrap()
            .is_empty(),
        "an ended run offers no edit"
    );
    c.close().await.unwrap();
}

/// A long run in the browser: its timeline paged down to version 0 with the journal
/// following, a version's change read as a diff table, the pending calls of its current
/// step with their attempts, and the run downloaded as JSON from its link; the workers page
/// naming the worker that holds it; and, with JavaScript off, a page that reads and says
/// what needs JavaScript.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_run_pending_calls_download_workers_and_no_script_in_chromium() {
    use agent_core::store::{CallStatus, NewRun};

    const STEPS: u64 = 120;
    let Some((chromium, chromedriver)) = chromium_and_driver() else {
        return;
    };
    let db = Db::new().await;
    db.drive("order-waiting", "Pay").await;
    let lease = db
        .claimed(
            NewRun::new("loop", "Looper", "f", "Tick", json!({"Tick": {"i": 0}})),
            "worker-7",
        )
        .await;
    common::commit_steps(&db.store, &lease, "loop", STEPS, 1).await;
    // The current step's call: sent three times, no result yet.
    let mut call = common::lookup_entry("loop", 0);
    call.version = STEPS;
    call.name = "Charge".to_owned();
    call.status = CallStatus::Started;
    call.output = None;
    call.finished_at = None;
    call.attempts = 3;
    call.idempotency_key = Some("loop-charge-1".to_owned());
    call.error_message = Some("the bank timed out".to_owned());
    db.store.record_entry(&lease, &call).await.unwrap();
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;
    let driver = start_driver(&chromedriver).await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, &chromium, profile.path()).await;

    // The newest page of the timeline, and the pending call with its attempts.
    c.goto(&server.url("/ui/runs/loop")).await.unwrap();
    c.wait().for_element(Locator::Id("timeline")).await.unwrap();
    live(&c).await;
    assert!(text_of(&c, "timeline-pages").await.contains("page 1 of 3"));
    let pending = text_of(&c, "pending").await;
    for want in [
        "Charge",
        "loop-charge-1",
        "retrying (attempt 3)",
        "the bank timed out",
        "worker-7",
    ] {
        assert!(pending.contains(want), "{want} in {pending}");
    }
    shot_at(&c, "pending-h", "inspector-pending.png").await;

    // A version's change, opened from its summary: the variant's move and the field.
    let diff = "const t = document.querySelector('#v120 table.diff'); \
                return t.closest('details').open ? t.textContent : null;";
    assert_eq!(c.execute(diff, vec![]).await.unwrap(), Value::Null);
    click_css(&c, "#v120 summary").await;
    let change = until(&c, diff, Value::is_string, "the change shown").await;
    let change = change.as_str().unwrap();
    for want in ["→ state", "TockTick", "~ changed", "/i119120"] {
        assert!(change.contains(want), "{want} in {change}");
    }
    shot_at(&c, "v117", "inspector-timeline.png").await;

    // The run as JSON from its Download link: a file named for the run, the whole history.
    let download = c
        .execute_async(
            "const done = arguments[arguments.length - 1]; \
             const a = document.getElementById('run-download'); \
             fetch(a.href).then(async r => done([a.hasAttribute('download'), \
               r.headers.get('content-disposition'), (await r.json()).history.length])) \
             .catch(e => done(String(e)));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        download,
        json!([true, "attachment; filename=\"run-loop.json\"", STEPS + 1])
    );

    // Older versions, a page at a time, down to version 0; the journal follows them.
    click(&c, "timeline-older").await;
    until(
        &c,
        "const e = document.getElementById('timeline-pages'); return e ? e.textContent : '';",
        |v| v.as_str().is_some_and(|t| t.contains("page 2 of 3")),
        "the second page",
    )
    .await;
    assert!(text_of(&c, "journal").await.contains("step-0070"));
    click(&c, "timeline-older").await;
    until(
        &c,
        "const e = document.getElementById('timeline-pages'); return e ? e.textContent : '';",
        |v| v.as_str().is_some_and(|t| t.contains("page 3 of 3")),
        "the oldest page",
    )
    .await;
    assert!(c.find(Locator::Id("v0")).await.is_ok());
    assert!(
        c.find_all(Locator::Id("timeline-older"))
            .await
            .unwrap()
            .is_empty()
    );
    let journal = text_of(&c, "journal").await;
    assert!(
        journal.contains("step-0000") && !journal.contains("step-0021"),
        "{journal}"
    );

    // The workers page, from the header: the worker holding the run, and the waiting run
    // of the fixture's agent in the backlog.
    click_css(&c, "nav a[href$='ui/workers']").await;
    c.wait().for_element(Locator::Id("leases")).await.unwrap();
    let worker = c
        .find(Locator::Css("#leases tr[data-owner='worker-7']"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(worker.contains("loop"), "{worker}");
    assert!(text_of(&c, "backlog").await.contains("confirm: 1"));
    shot(&c, "inspector-workers.png").await;
    // With JavaScript on, the page does not say it is off.
    assert!(
        c.find_all(Locator::Id("no-script"))
            .await
            .unwrap()
            .is_empty()
    );
    c.close().await.unwrap();

    // JavaScript off: the run's page reads, and says what needs JavaScript.
    let profile = tempfile::tempdir().unwrap();
    let c = browser_with(
        &driver,
        &chromium,
        profile.path(),
        &["--blink-settings=scriptEnabled=false"],
    )
    .await;
    c.goto(&server.url("/ui/runs/order-waiting")).await.unwrap();
    let said = c
        .find(Locator::Id("no-script"))
        .await
        .expect("the message shows without JavaScript");
    assert!(said.is_displayed().await.unwrap());
    assert!(said.text().await.unwrap().contains("JavaScript is off"));
    let status = c.find(Locator::Id("run-status")).await.unwrap();
    assert_eq!(status.text().await.unwrap(), "waiting");
    let live = c.find(Locator::Id("live-state")).await.unwrap();
    assert_eq!(
        live.text().await.unwrap(),
        "live updates: off (they need JavaScript)"
    );
    shot(&c, "inspector-no-script.png").await;
    c.close().await.unwrap();
}

/// Fill the triage run's approval form (built from the example's `Approval`): the refund's
/// binding `hash`, the approver, `approved` ticked. The live section is drawn again when the
/// run moves, which may replace the form between two keys: then the form is filled again.
async fn fill_approval(c: &Client, hash: &str) {
    async fn once(c: &Client, hash: &str) -> Result<(), fantoccini::error::CmdError> {
        for (id, text) in [("sig-refund_hash", hash), ("sig-approver", "dana")] {
            let el = c.wait().for_element(Locator::Id(id)).await?;
            el.clear().await?;
            el.send_keys(text).await?;
        }
        let approved = c.find(Locator::Id("sig-approved")).await?;
        if !approved.is_selected().await? {
            approved.click().await?;
        }
        Ok(())
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while let Err(e) = once(c, hash).await {
        assert!(Instant::now() < deadline, "the approval form: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The support-triage example's run, waiting for a person to approve a large refund,
/// approved from its page: the form is built from the example's `Approval` (the refund's
/// binding, who approves, a tick); an approval naming another refund is refused by the
/// run's handler and the run waits again; the right one takes it through the refund to its
/// end, on the page without a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_triage_run_is_approved_from_its_page_in_chromium() {
    use agent_core::runner::Runner;
    use examples::triage::{self, Desk, Handlers, RefundRequest, Ticket, Triage};

    let Some((chromium, chromedriver)) = chromium_and_driver() else {
        return;
    };
    let db = Db::new().await;
    let desk = Arc::new(Desk::with_orders(&[("order-42", 48_000)]));
    let runner = Runner::builder(Arc::clone(&db.store), Handlers, triage::tools(&desk))
        .router(Arc::new(triage::scripted_classifier()))
        .build()
        .unwrap();
    let ticket = Ticket {
        customer: "carol".into(),
        order_id: "order-42".into(),
        text: "The parcel never came, please refund".into(),
    };
    runner
        .start("triage-large", Triage::Received { ticket })
        .await
        .unwrap();
    let waiting = runner.run("triage-large").await.unwrap();
    assert_eq!(
        (waiting.status, waiting.state_name.as_str()),
        (RunStatus::Waiting, "AwaitApproval")
    );
    let refund: RefundRequest =
        serde_json::from_value(waiting.state["AwaitApproval"]["refund"].clone()).unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let work = worker_with(&db, runner, &["triage-large"], Arc::clone(&seen));
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;
    let driver = start_driver(&chromedriver).await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, &chromium, profile.path()).await;
    open_with_token(&c, &server.url("/ui/runs/triage-large"), "signal-form").await;
    live(&c).await;
    assert!(text_of(&c, "run-wait").await.contains("approval"));

    // An approval of another refund: the handler refuses it, the run waits again.
    let version = waiting.version;
    fill_approval(&c, &"0".repeat(64)).await;
    click(&c, "signal-send").await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let run = db.store.load_run("triage-large").await.unwrap().unwrap();
        if run.version > version && run.status == RunStatus::Waiting {
            break;
        }
        assert!(Instant::now() < deadline, "the wrong approval: {run:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(desk.refunds().is_empty());
    let again = db.store.load_run("triage-large").await.unwrap().unwrap();
    until(
        &c,
        "const e = document.getElementById('run-version'); return e ? e.textContent : null;",
        |v| v.as_str() == Some(again.version.to_string().as_str()),
        "the run waits again, on the page",
    )
    .await;

    // The approval of this refund, from the form: the refund is issued, the run ends.
    fill_approval(&c, &refund.binding()).await;
    shot_at(&c, "actions", "inspector-approve.png").await;
    click(&c, "signal-send").await;
    until(
        &c,
        "return document.getElementById('run-status').textContent",
        |v| v == "completed",
        "the run completes on the page",
    )
    .await;
    let refunds: Vec<(String, u64)> = desk
        .refunds()
        .into_iter()
        .map(|(_key, order, cents)| (order, cents))
        .collect();
    assert_eq!(refunds, [("order-42".to_owned(), 48_000)]);
    let run = db.store.load_run("triage-large").await.unwrap().unwrap();
    assert_eq!(run.state_name, "Closed");
    // What the form sent, typed by `Approval`'s schema: the wrong binding, then this one's.
    let approved =
        |hash: String| json!({"refund_hash": hash, "approver": "dana", "approved": true});
    let mut sent = seen.lock().unwrap().clone();
    sent.dedup();
    assert_eq!(sent, [approved("0".repeat(64)), approved(refund.binding())]);
    c.close().await.unwrap();
    work.abort();
}
