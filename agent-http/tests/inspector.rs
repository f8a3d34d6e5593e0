//! The run inspector's pages over HTTP: what each page shows, that hostile strings in a run
//! are escaped, that reads follow the API's token rules (with the sign-in cookie), that the
//! pages work where the router is mounted, and the tool switches of the API.

extern crate durable_agents_http as agent_http;

mod common;

use agent_core::graph::GraphDescription;
use agent_core::store::{NewRun, RunFilter};
use agent_http::ApiConfig;
use common::{Db, Server, TOKEN, client, json};
use serde_json::json;

async fn page(url: &str) -> (u16, String, String) {
    let resp = client().get(url).send().await.expect("get");
    let status = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, ctype, resp.text().await.expect("body"))
}

/// The part of `body` after the first `start` and before the next `end`.
fn between<'a>(body: &'a str, start: &str, end: &str) -> &'a str {
    let (_, rest) = body
        .split_once(start)
        .unwrap_or_else(|| panic!("no `{start}` in {body}"));
    rest.split(end).next().unwrap_or(rest)
}

/// A store with a waiting run, a completed one and a cancelled one of the fixture agent.
async fn fixture() -> Db {
    let db = Db::new().await;
    db.drive("order-waiting", "Pay").await;
    db.drive("order-cancelled", "Cancelled").await;
    db.complete("order-done").await;
    db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runs_page_lists_filters_counts_and_pages() {
    let db = fixture().await;
    let server = Server::serve(&db.store, ApiConfig::default()).await;

    let (status, ctype, body) = page(&server.url("/ui/")).await;
    assert_eq!(status, 200, "{body}");
    assert!(ctype.starts_with("text/html"), "{ctype}");
    for id in ["order-waiting", "order-cancelled", "order-done"] {
        assert!(body.contains(id), "{id} missing");
    }
    // Without JavaScript, the page says what needs it.
    assert!(body.contains(r#"<noscript><p class="error-box" id="no-script">"#));
    // The server's root is the runs page (the client follows the redirect).
    let (status, _, root) = page(&server.url("/")).await;
    assert_eq!((status, root.as_str()), (200, body.as_str()));
    // Counts per status, in words (not by colour alone).
    assert!(
        body.contains(r#"<span class="status s-waiting">waiting</span> 1"#),
        "{body}"
    );
    assert!(body.contains(r#"<span class="status s-completed">completed</span> 1"#));
    // Links work wherever the router is mounted: relative to the page.
    assert!(
        body.contains(r#"href="../ui/runs/order-waiting""#),
        "{body}"
    );
    assert!(body.contains(r#"href="../ui/assets/inspector.css""#));

    // Filters: status, agent, age.
    let (_, _, waiting) = page(&server.url("/ui/?status=waiting")).await;
    assert!(waiting.contains("order-waiting") && !waiting.contains("order-done\""));
    assert!(!waiting.contains(r#"data-run="order-done""#));
    let (_, _, none) = page(&server.url("/ui/?agent=Nobody")).await;
    assert!(none.contains("No run matches."));
    let (_, _, recent) = page(&server.url("/ui/?age=1h")).await;
    assert!(recent.contains(r#"data-run="order-done""#));
    let (status, _, bad) = page(&server.url("/ui/?age=forever")).await;
    assert_eq!(status, 400, "{bad}");
    assert!(bad.contains("age is 1h, 24h, 7d or 30d"), "{bad}");

    // Cursor pagination: one run a page, three pages, every run once.
    let mut seen = Vec::new();
    let mut url = server.url("/ui/?limit=1");
    for _ in 0..5 {
        let (status, _, body) = page(&url).await;
        assert_eq!(status, 200);
        let row = body
            .split(r#"<tr data-run=""#)
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("a row")
            .to_owned();
        seen.push(row);
        match body.split(r#"id="next-page" href="./?"#).nth(1) {
            Some(rest) => {
                let q = rest
                    .split('"')
                    .next()
                    .unwrap()
                    .replace("&#38;", "&")
                    .replace("&amp;", "&");
                url = server.url(&format!("/ui/?{q}"));
            }
            None => break,
        }
    }
    seen.sort();
    assert_eq!(seen, ["order-cancelled", "order-done", "order-waiting"]);

    // The live section alone, as the script fetches it.
    let (_, _, rows) = page(&server.url("/ui/?fragment=rows")).await;
    assert!(rows.contains("runs-table") && !rows.contains("<html"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_page_shows_graph_path_timeline_journal_decisions_and_verdict() {
    let db = fixture().await;
    let server = Server::serve(&db.store, ApiConfig::default()).await;

    let (status, _, body) = page(&server.url("/ui/runs/order-waiting")).await;
    assert_eq!(status, 200, "{body}");
    // The graph, laid out in Rust, with the path and the current state in words.
    assert!(body.contains("<svg"), "{body}");
    assert!(
        body.contains(r#"class="node waits visited current""#),
        "{body}"
    );
    assert!(body.contains("● current · waits `confirm`"), "{body}");
    assert!(body.contains(r#"class="edge taken""#));
    assert!(body.contains("Start → Decide"));
    // The wait, and the form to answer it.
    assert!(body.contains(r#"id="signal-form""#));
    assert!(body.contains(r#"id="signal-name" name="name" value="confirm""#));
    // Built from the wait's payload type (`wait_payload = Confirmation`): a checkbox for
    // the required `ok`, a text box for the optional `note`, each with its doc comment.
    assert!(body.contains(r#"data-fields="true""#), "{body}");
    assert!(
        body.contains(r#"<input type="checkbox" id="sig-ok" data-key="ok" data-control="boolean""#),
        "{body}"
    );
    assert!(body.contains("The customer confirms the order."));
    assert!(body.contains(r#"id="sig-note" data-key="note" data-control="string""#));
    assert!(!body.contains(r#"id="signal-payload""#));
    assert!(body.contains(r#"id="cancel-button""#));
    // Timeline with each version's state and its change from the previous one.
    assert!(body.contains(r#"<li id="v1">"#), "{body}");
    assert!(body.contains("Change from the previous version"));
    // The journal: tools with kinds and keys; the decisions with their options.
    assert!(body.contains("Reserve") && body.contains("hybrid"));
    assert!(
        body.contains("<code>order-waiting:0:1</code>"),
        "idempotency key: {body}"
    );
    assert!(body.contains(r#"<table id="decisions">"#));
    assert!(body.contains("Lookup, Pay, Cancelled") || body.contains("Pay, Cancelled"));
    // The hash chain checks out.
    assert!(body.contains("✔ intact"), "{body}");
    // What the run spent on its way here (its asks and calls); no budget, so none shown.
    assert!(
        body.contains(r#"<dt>Spent</dt><dd id="run-spend">"#) && body.contains("tool calls"),
        "{body}"
    );
    assert!(!body.contains(r#"id="run-budget""#), "{body}");

    // A final run offers no signal form and no cancel.
    let (_, _, done) = page(&server.url("/ui/runs/order-done")).await;
    assert!(!done.contains(r#"id="signal-form""#) && !done.contains(r#"id="cancel-button""#));
    assert!(done.contains(r#"<span id="run-status" class="status s-completed">completed</span>"#));

    // The live section alone.
    let (_, _, live) = page(&server.url("/ui/runs/order-waiting?fragment=live")).await;
    assert!(live.contains("run-facts") && !live.contains("<html"));

    // One entry whole; unknown runs and entries are pages that say so.
    let (status, _, entry) = page(&server.url("/ui/runs/order-waiting/entries/0/0")).await;
    assert_eq!(status, 200);
    assert!(entry.contains("idempotency_key"));
    let (status, ctype, missing) = page(&server.url("/ui/runs/nope")).await;
    assert_eq!(status, 404);
    assert!(ctype.starts_with("text/html") && missing.contains("run `nope` not found"));
    let (status, _, _) = page(&server.url("/ui/runs/order-waiting/entries/9/9")).await;
    assert_eq!(status, 404);

    // The whole run to download, from the page's link and from the API, as one document.
    assert!(
        body.contains(r#"href="../../ui/runs/order-waiting/export.json" download"#),
        "{body}"
    );
    for path in [
        "/ui/runs/order-waiting/export.json",
        "/v1/runs/order-waiting/export",
    ] {
        let resp = client().get(server.url(path)).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{path}");
        let disposition = resp
            .headers()
            .get("content-disposition")
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(
            disposition.as_deref(),
            Some(r#"attachment; filename="run-order-waiting.json""#)
        );
        let export: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(export["format"], "durable-agents/run-export/1");
        assert_eq!(export["run"]["status"], "waiting");
        assert!(export["journal"].as_array().is_some_and(|j| !j.is_empty()));
    }
    let resp = client()
        .get(server.url("/v1/runs/nope/export"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_page_shows_states_by_role_and_tools_with_kinds() {
    let db = fixture().await;
    let server = Server::serve(&db.store, ApiConfig::default()).await;
    let (_, _, agents) = page(&server.url("/ui/agents")).await;
    let agent = db.store.agents().await.unwrap().remove(0);
    assert!(agents.contains(&agent));
    let (status, _, body) = page(&server.url(&format!("/ui/agents/{agent}"))).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("<svg"));
    assert!(
        body.contains(r#"<th scope="row">Decide</th><td>LLM-routed</td>"#),
        "{body}"
    );
    assert!(body.contains(r#"<th scope="row">Start</th><td>initial, handler</td>"#));
    assert!(body.contains("Reserve (hybrid)"), "{body}");
    assert!(body.contains(r#"data-action="tool" data-tool="Charge" data-enable="false""#));
    // The spend of the agent's runs per day: the fixture's runs, all created today.
    let runs = (db.store)
        .list_runs(&RunFilter {
            agent: Some(agent.clone()),
            ..RunFilter::default()
        })
        .await
        .unwrap();
    let today = agent_core::store::now_ms().div_euclid(agent_core::store::DAY_MS);
    let made_today = runs
        .iter()
        .filter(|r| r.created_at.div_euclid(agent_core::store::DAY_MS) == today)
        .count();
    let calls: u64 = runs.iter().map(|r| r.spend.tool_calls).sum();
    assert!(made_today > 0 && calls > 0, "{runs:?}");
    assert!(body.contains(r#"<table id="spend">"#), "{body}");
    let row = format!("</th><td>{made_today}</td>");
    assert!(body.contains(&row), "no day of {made_today} runs in {body}");
    if made_today == runs.len() {
        let calls = format!("<td>{calls}</td></tr>");
        assert!(body.contains(&calls), "{calls} missing: {body}");
    }
    let (status, _, _) = page(&server.url("/ui/agents/Nobody")).await;
    assert_eq!(status, 404);
}

/// The start form is on an agent's page only where the server starts runs of it
/// (`ApiConfig::with_agent`), built from the initial states' fields; elsewhere (as under
/// `agentctl serve`) the page says why there is none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_form_is_offered_only_where_the_server_starts_runs() {
    let db = fixture().await;
    let stock = Server::serve(&db.store, ApiConfig::default()).await;
    let (status, _, body) = page(&stock.url("/ui/agents/Order")).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains(r#"id="start-form""#), "{body}");
    assert!(
        body.contains(r#"<p id="start-unavailable">This server cannot start runs of Order"#),
        "{body}"
    );
    assert!(body.contains("<code>agentctl serve</code> links no agent code"));

    let starting = Server::serve(
        &db.store,
        ApiConfig::default()
            .with_token(TOKEN)
            .with_agent(db.runner("Pay")),
    )
    .await;
    let (status, _, body) = page(&starting.url("/ui/agents/Order")).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("start-unavailable"), "{body}");
    assert!(
        body.contains(r#"<form id="start-form" data-agent="Order">"#),
        "{body}"
    );
    // Only the initial states are offered: `Start`, not `Pay`.
    assert!(body.contains(r#"<option value="Start">Start</option>"#));
    assert!(!body.contains(r#"<option value="Pay">"#), "{body}");
    assert!(body.contains(r#"data-state="Start" data-shape="fields""#));
    // Start's one field, `items: Vec<String>`, by the signal form's builder: JSON, required.
    assert!(
        body.contains(
            r#"<textarea id="start-Start-items" data-key="items" data-control="json" rows="2" placeholder="JSON" required></textarea>"#
        ),
        "{body}"
    );
    assert!(body.contains(r#"<label for="start-Start-items">items (required)</label>"#));
    // The run id is optional: the API makes one.
    assert!(body.contains(r#"<input type="text" id="start-id" maxlength="200""#));
    // Without JavaScript the form says it needs it.
    assert!(body.contains("Starting a run from this page needs JavaScript"));
}

/// The runs page's batch form carries the page's filters as the API takes them (the age as
/// a fixed `created_after`), in words for its confirmation, and the batch's bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_form_carries_the_filters_and_the_bound() {
    let db = fixture().await;
    let server = Server::serve(&db.store, ApiConfig::default()).await;
    let (status, _, body) = page(&server.url("/ui/")).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(
            r#"<form id="batch-form" data-query="" data-filters="no filter: every run" data-max="500">"#
        ),
        "{body}"
    );
    // Once, in the page's content (not in the body's attributes).
    assert_eq!(body.matches(r#"id="batch-form""#).count(), 1, "{body}");
    let body_tag = body.split("<body").nth(1).and_then(|b| b.split('>').next());
    assert!(!body_tag.unwrap().contains("batch"), "{body_tag:?}");
    for action in ["cancel", "retry", "signal"] {
        assert!(body.contains(&format!(r#"<option value="{action}">"#)));
    }
    assert!(body.contains("Batch actions need JavaScript"));
    // What the batch lists with is the API's own query: here, the one waiting run.
    let (_, _, body) = page(&server.url("/ui/?status=waiting")).await;
    assert!(body.contains(r#"data-query="status=waiting""#), "{body}");
    let (status, listed) = json(
        client()
            .get(server.url("/v1/runs?status=waiting"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(listed["runs"][0]["id"], "order-waiting");
    assert_eq!(listed["runs"].as_array().map(Vec::len), Some(1));
    let before = agent_core::store::now_ms();
    let (status, _, body) =
        page(&server.url("/ui/?agent=Order&status=waiting&label=team%3Dops&age=1h")).await;
    assert_eq!(status, 200, "{body}");
    let query = body
        .split(r#"<form id="batch-form" data-query=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the batch form");
    let (filters, after) = query.split_once("&#38;created_after=").expect(query);
    assert_eq!(
        filters,
        "agent=Order&#38;status=waiting&#38;label=team%3Dops"
    );
    let after: i64 = after.parse().unwrap();
    let hour = 3_600_000;
    assert!(
        (before - hour - 1000..=agent_core::store::now_ms() - hour).contains(&after),
        "{after}"
    );
    assert!(body.contains(
        r#"data-filters="agent=Order, status=waiting, label=team=ops, created in the last 1h""#
    ));
}

/// A timer state is listed with its timer on the agent's page, and a run waiting for its
/// timer says so, with when it is due, on its page and in the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_show_on_the_agent_page_and_a_waiting_runs_page() {
    use agent_conformance::runner_checks::{FollowUp, FollowUpBehaviour};
    use agent_core::runner::Runner;
    let db = Db::new().await;
    let runner = Runner::new(
        db.store.clone(),
        FollowUpBehaviour::default(),
        agent_core::ToolBox::new(),
    )
    .unwrap();
    let sleeping = FollowUp::Sleeping {
        customer: "ada".into(),
    };
    runner.start("follow-1", sleeping).await.unwrap();
    let waiting = runner.run("follow-1").await.unwrap();
    assert!(waiting.wake_at.is_some(), "{waiting:?}");
    let server = Server::serve(&db.store, ApiConfig::default()).await;
    let (status, _, agent) = page(&server.url("/ui/agents/FollowUp")).await;
    assert_eq!(status, 200, "{agent}");
    assert!(agent.contains("<td>timer 300 ms</td>"), "{agent}");
    assert!(agent.contains("<td>timer at remind_at</td>"), "{agent}");
    assert!(agent.contains("<td>answer, timer at until</td>"), "{agent}");
    let (status, _, run) = page(&server.url("/ui/runs/follow-1")).await;
    assert_eq!(status, 200, "{run}");
    // When it is due, as the pages print times (`view::time`, tested with the view).
    assert!(run.contains("its timer (until 20"), "{run}");
    let (_, _, list) = page(&server.url("/ui/")).await;
    assert!(list.contains("<td>its timer</td>"), "{list}");
}

/// The schedules page lists each schedule with when it ticks, its next ticks, its latest
/// tick and that tick's run, and links to the runs of its past ticks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedules_page_shows_next_and_past_ticks() {
    use agent_core::schedule::{NewSchedule, create_schedule, tick_due, trigger_schedule};
    let db = Db::new().await;
    let server = Server::serve(&db.store, ApiConfig::default()).await;
    let (status, _, empty) = page(&server.url("/ui/schedules")).await;
    assert_eq!(status, 200, "{empty}");
    assert!(empty.contains("No schedule is kept"), "{empty}");

    let runner = db.runner("Pay");
    let now = agent_core::store::now_ms();
    for (id, spec, paused) in [
        (
            "nightly",
            json!({ "cron": { "expression": "30 2 * * *", "time_zone": "Europe/Berlin" } }),
            false,
        ),
        (
            "hourly",
            json!({ "interval": { "every_ms": 3_600_000 } }),
            true,
        ),
    ] {
        let new: NewSchedule = serde_json::from_value(json!({
            "id": id, "agent": "Order", "spec": spec, "paused": paused,
            "initial_state": { "Start": { "items": ["apple"] } },
        }))
        .unwrap();
        create_schedule(db.store.as_ref(), new, Some(&runner), now)
            .await
            .unwrap();
    }
    // A tick asked for by hand, started by a pass of the ticker.
    trigger_schedule(db.store.as_ref(), "nightly", now)
        .await
        .unwrap();
    tick_due(db.store.as_ref(), &runner, now + 1, 10)
        .await
        .unwrap();

    let (status, _, body) = page(&server.url("/ui/schedules")).await;
    assert_eq!(status, 200, "{body}");
    let nightly = &body[body
        .find(r#"id="schedule-nightly""#)
        .expect("nightly's row")..];
    let nightly = &nightly[..nightly.find("</tr>").unwrap()];
    assert!(
        nightly.contains("cron `30 2 * * *` in Europe/Berlin"),
        "{nightly}"
    );
    assert!(nightly.contains("active"), "{nightly}");
    // Three next ticks, a day apart, at 02:30 in Berlin (01:30Z in winter); the latest
    // tick, asked for by hand, is now.
    assert_eq!(nightly.matches(":30:00Z").count(), 3, "{nightly}");
    assert!(
        nightly.contains(r#"href="../ui/runs/nightly%40"#),
        "{nightly}"
    );
    assert!(
        nightly.contains(r#"href="../ui/?label=schedule%3Dnightly""#),
        "{nightly}"
    );
    let hourly = &body[body.find(r#"id="schedule-hourly""#).expect("hourly's row")..];
    let hourly = &hourly[..hourly.find("</tr>").unwrap()];
    assert!(hourly.contains("every 3600000 ms"), "{hourly}");
    assert!(hourly.contains("paused"), "{hourly}");
    // The past ticks' runs, through the link: the runs page filtered by the label.
    let (_, _, runs) = page(&server.url("/ui/?label=schedule%3Dnightly")).await;
    assert!(runs.contains("nightly@"), "{runs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_strings_in_a_run_are_escaped_everywhere() {
    let db = Db::new().await;
    let evil = "<script>alert(1)</script>";
    let graph: GraphDescription = serde_json::from_value(json!({
        "agent": "Evil",
        "states": [
            {"name": evil, "initial": true, "to": ["Done\"><img src=x onerror=alert(2)>"]},
            {"name": "Done\"><img src=x onerror=alert(2)>", "terminal": true}
        ],
        "tools": []
    }))
    .unwrap();
    db.store.register_agent(&graph).await.unwrap();
    db.store
        .create_run(
            NewRun::new(
                "evil-run",
                "Evil",
                "f",
                evil,
                json!({ "note": evil, evil: "</pre><script>alert(3)</script>" }),
            )
            .with_label("who", "x"),
        )
        .await
        .unwrap();
    db.store
        .send_signal("evil-run", evil, &json!({"p": evil}))
        .await
        .unwrap();
    let server = Server::serve(&db.store, ApiConfig::default()).await;
    for path in ["/ui/", "/ui/runs/evil-run", "/ui/agents/Evil"] {
        let (status, _, body) = page(&server.url(path)).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert!(!body.contains("<script>alert"), "{path}: {body}");
        assert!(!body.contains("<img src=x"), "{path}: {body}");
        assert!(
            body.contains("&lt;script&gt;alert(1)&lt;/script&gt;")
                || body.contains("&#60;script&#62;"),
            "{path}: {body}"
        );
    }
    // The pages allow no inline script at all.
    let resp = client().get(server.url("/ui/")).send().await.unwrap();
    let csp = resp.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'"), "{csp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_loopback_rules_the_pages_need_the_token_or_the_sign_in_cookie() {
    let db = fixture().await;
    let server = Server::serve(
        &db.store,
        ApiConfig::default()
            .with_token(TOKEN)
            .require_token_for_reads(),
    )
    .await;
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    // Without the token: pages go to the sign-in form, streams are refused.
    let resp = plain
        .get(server.url("/ui/runs/order-waiting"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()["location"], "../../ui/login");
    let resp = plain
        .get(server.url("/ui/stream/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    // The form and the assets are served to anyone.
    let resp = plain.get(server.url("/ui/login")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let resp = plain
        .get(server.url("/ui/assets/inspector.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // With the bearer header.
    let resp = plain
        .get(server.url("/ui/"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // A wrong token does not sign in; the right one sets a cookie that reads the pages.
    let resp = plain
        .post(server.url("/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("token=wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let resp = plain
        .post(server.url("/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    let resp = plain
        .get(server.url("/ui/runs/order-waiting"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // The cookie reads pages only: the API still wants the header.
    let resp = plain
        .get(server.url("/v1/runs"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let resp = plain
        .post(server.url("/v1/runs/order-waiting/cancel"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_work_where_the_router_is_mounted() {
    let db = fixture().await;
    let server = Server::mounted(agent_http::router(db.store.clone(), ApiConfig::default())).await;
    let (status, _, body) = page(&server.url("/ui/")).await;
    assert_eq!(status, 200, "{body}");
    // `../ui/...` from `/api/ui/` is `/api/ui/...`.
    let (status, ctype, css) = page(&server.url("/ui/assets/inspector.css")).await;
    assert_eq!(status, 200);
    assert!(ctype.starts_with("text/css") && css.contains("svg.graph"));
    let (status, _, _) = page(&server.url("/ui/runs/order-waiting")).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_switched_off_and_on_with_the_token() {
    let db = Db::new().await;
    // A run registers the fixture agent's graph, which declares `Charge`.
    db.drive("order-waiting", "Pay").await;
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;
    let c = client();
    let (status, _) = json(
        c.post(server.url("/v1/tools/Charge/disable"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 401);
    let (status, body) = json(
        c.post(server.url("/v1/tools/Charge/disable"))
            .bearer_auth(TOKEN)
            .json(&json!({"reason": "the gateway is down"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["enabled"], false);
    assert_eq!(body["reason"], "the gateway is down");
    assert!(!db.store.tool_enabled("Charge").await.unwrap());
    let (_, list) = json(c.get(server.url("/v1/tools")).send().await.unwrap()).await;
    assert_eq!(list[0]["tool"], "Charge");
    let (status, body) = json(
        c.post(server.url("/v1/tools/Charge/enable"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["enabled"], true);
    assert!(db.store.tool_enabled("Charge").await.unwrap());
    // In the document.
    let (_, doc) = json(c.get(server.url("/v1/openapi.json")).send().await.unwrap()).await;
    assert!(doc["paths"]["/v1/tools/{name}/disable"]["post"].is_object());
}

/// A run with a long journal shows it a page at a time, newest first, with links both ways;
/// the counts per status on the runs page are exact beyond any cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_journal_is_paged_and_counts_are_exact() {
    let db = Db::new().await;
    let lease = db
        .claimed(
            NewRun::new("long", "Checkout", "f", "Start", json!({})),
            "test",
        )
        .await;
    for seq in 0..450_u32 {
        db.store
            .record_entry(&lease, &common::lookup_entry("long", seq))
            .await
            .unwrap();
    }
    for i in 0..1_205 {
        db.store
            .create_run(NewRun::new(
                format!("bulk-{i}"),
                "Bulk",
                "f",
                "Start",
                json!({}),
            ))
            .await
            .unwrap();
    }
    let server = Server::serve(&db.store, ApiConfig::default()).await;

    let (status, _, newest) = page(&server.url("/ui/runs/long")).await;
    assert_eq!(status, 200, "{newest}");
    assert!(
        newest.contains("450 entries, 200 shown (page 1 of 3"),
        "{newest}"
    );
    assert!(newest.contains("sku-0449") && newest.contains("sku-0250"));
    assert!(
        !newest.contains("sku-0249"),
        "an older entry on the newest page"
    );
    assert!(newest.contains(r#"id="journal-older" href="?journal=1#journal-h""#));
    assert!(!newest.contains(r#"id="journal-newer""#));

    let (_, _, oldest) = page(&server.url("/ui/runs/long?journal=2")).await;
    assert!(oldest.contains("page 3 of 3") && oldest.contains("sku-0000"));
    assert!(oldest.contains("sku-0049") && !oldest.contains("sku-0050"));
    assert!(oldest.contains(r#"id="journal-newer" href="?journal=1#journal-h""#));
    assert!(!oldest.contains(r#"id="journal-older""#));
    // A page past the end shows the oldest; the live fragment keeps the page asked for.
    let (_, _, past) = page(&server.url("/ui/runs/long?journal=99")).await;
    assert!(past.contains("page 3 of 3"), "{past}");
    let (_, _, live) = page(&server.url("/ui/runs/long?journal=1&fragment=live")).await;
    assert!(live.contains("page 2 of 3") && live.contains("sku-0249"));

    let (_, _, runs) = page(&server.url("/ui/?agent=Bulk")).await;
    assert!(
        runs.contains(r#"<span class="status s-running">running</span> 1205"#),
        "{runs}"
    );
}

/// A run is forked at a version of its timeline through the API, with the token: once per
/// new id, never past the run's version; the run page offers the fork on each version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_forked_at_a_version_with_the_token() {
    let db = fixture().await;
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;
    let done = db.store.load_run("order-done").await.unwrap().unwrap();
    assert!(done.version >= 2, "{done:?}");

    let (_, _, body) = page(&server.url("/ui/runs/order-done")).await;
    assert!(
        body.contains(r#"data-action="fork" data-run="order-done" data-version="1""#),
        "{body}"
    );

    let fork = |body: serde_json::Value| {
        client()
            .post(server.url("/v1/runs/order-done/fork"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .json(&body)
            .send()
    };
    let (status, first) = json(fork(json!({"version": 1})).await.unwrap()).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["id"], "order-done.fork-v1");
    let forked = db
        .store
        .load_run("order-done.fork-v1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(forked.parent, Some(("order-done".to_owned(), 1)));
    let at_one = db.store.state_at("order-done", 1).await.unwrap().unwrap();
    assert_eq!(forked.state, at_one.state);
    // The same request again is the same fork; the forked run is not changed.
    let (status, again) = json(fork(json!({"version": 1})).await.unwrap()).await;
    assert_eq!((status, &again["id"]), (200, &first["id"]));
    assert_eq!(
        db.store
            .load_run("order-done")
            .await
            .unwrap()
            .unwrap()
            .version,
        done.version
    );
    // A chosen id; a version past the run's; an id that is not valid; no token.
    let (status, named) = json(
        fork(json!({"version": 0, "new_id": "try-again"}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, named["id"].as_str()), (200, Some("try-again")));
    let (status, body) = json(fork(json!({"version": done.version + 1})).await.unwrap()).await;
    common::assert_error(status, &body, 400, "bad_request");
    let (status, body) = json(fork(json!({"version": 0, "new_id": ""})).await.unwrap()).await;
    common::assert_error(status, &body, 400, "bad_request");
    let (status, body) = json(fork(json!({"version": 0, "extra": 1})).await.unwrap()).await;
    assert_eq!(status, 422, "{body}");
    let resp = client()
        .post(server.url("/v1/runs/order-done/fork"))
        .json(&json!({"version": 0, "new_id": "no-token"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert!(db.store.load_run("no-token").await.unwrap().is_none());
}

/// A run's children show as a tree (grandchildren nested, each level bounded with an
/// "N more" link to the runs page filtered by parent), its children counted per status,
/// and a descendant's page leads back up to the root run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_page_shows_its_family_tree_breadcrumbs_and_rollup() {
    use agent_core::store::RunStatus;

    let db = Db::new().await;
    let new = |id: &str| NewRun::new(id, "Tree", "f", "Start", json!({}));
    db.store.create_run(new("fam-root")).await.unwrap();
    for i in 1..=25 {
        db.store
            .create_run(new(&format!("fam-c{i:02}")).spawned_by("fam-root", 1))
            .await
            .unwrap();
    }
    for i in 1..=3 {
        db.store
            .set_status(&format!("fam-c{i:02}"), RunStatus::Failed, None)
            .await
            .unwrap();
    }
    // Down four levels from the newest child: the fourth is past the tree's depth.
    let chain = ["fam-c25", "fam-g1", "fam-gg1", "fam-ggg1"];
    for pair in chain.windows(2) {
        db.store
            .create_run(new(pair[1]).spawned_by(pair[0], 2))
            .await
            .unwrap();
    }
    db.store
        .create_run(new("fam-g2").spawned_by("fam-c25", 2))
        .await
        .unwrap();
    let server = Server::serve(&db.store, ApiConfig::default()).await;

    let (status, _, body) = page(&server.url("/ui/runs/fam-root")).await;
    assert_eq!(status, 200, "{body}");
    // The roll-up counts every child, in words.
    assert!(body.contains("<li>25 in all:</li>"), "{body}");
    assert!(body.contains(r#"<span class="status s-failed">failed</span> 3"#));
    assert!(body.contains(r#"<span class="status s-running">running</span> 22"#));
    // Twenty children listed, the newest first; five more behind a link.
    let tree = between(&body, r#"<ul class="tree" id="child-tree">"#, "</section>");
    assert!(tree.contains(r#"data-run="fam-c25""#) && tree.contains(r#"data-run="fam-c06""#));
    assert!(!tree.contains(r#"data-run="fam-c05""#), "{tree}");
    assert!(
        tree.contains(r#"<li class="more"><a href="../../ui/?parent=fam-root">5 more</a></li>"#),
        "{tree}"
    );
    // Grandchildren nested under their parent, great-grandchildren under them; the level
    // past the depth is a link to the page of the run whose children it is.
    let under_c25 = between(tree, r#"data-run="fam-c25""#, r#"data-run="fam-c24""#);
    assert!(under_c25.contains("· 2 children"), "{under_c25}");
    assert!(under_c25.contains("<ul>") && under_c25.contains(r#"data-run="fam-g1""#));
    assert!(under_c25.contains(r#"data-run="fam-gg1""#));
    assert!(!under_c25.contains(r#"data-run="fam-ggg1""#));
    assert!(
        under_c25.contains(
            r#"<a class="tree-cut" href="../../ui/runs/fam-gg1#children-h">1 child, on its page</a>"#
        ),
        "{under_c25}"
    );

    // From the deepest run, the way up: the root first, each a link, this run last.
    let (_, _, deep) = page(&server.url("/ui/runs/fam-ggg1")).await;
    let crumbs = between(&deep, r#"id="breadcrumbs""#, "</nav>");
    let order: Vec<usize> = ["fam-root", "fam-c25", "fam-g1", "fam-gg1", "fam-ggg1"]
        .iter()
        .map(|id| crumbs.find(&format!(">{id}<")).expect(id))
        .collect();
    assert!(order.is_sorted(), "{crumbs}");
    assert!(crumbs.contains(r#"<a href="../../ui/runs/fam-root">fam-root</a>"#));
    assert!(crumbs.contains(r#"<li aria-current="page">fam-ggg1</li>"#));
    // A root run has no breadcrumbs; a run without children says so.
    assert!(!body.contains(r#"id="breadcrumbs""#));
    assert!(!deep.contains(r#"id="child-tree""#));

    // "5 more" leads to the runs page filtered by parent: every child, counted.
    let (_, _, children) = page(&server.url("/ui/?parent=fam-root")).await;
    assert!(
        children.contains(r#"data-run="fam-c01""#) && !children.contains(r#"data-run="fam-g1""#)
    );
    assert!(children.contains(r#"<span class="status s-running">running</span> 22"#));
    assert!(children.contains(r#"name="parent" value="fam-root""#));
}

/// A wide family is cut at the tree's bounds: 200 runs shown, the runs whose children did
/// not fit linking to their own pages with their children's count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wide_family_is_cut_at_the_trees_bounds() {
    let db = Db::new().await;
    let new = |id: &str| NewRun::new(id, "Wide", "f", "Start", json!({}));
    db.store.create_run(new("wide")).await.unwrap();
    for i in 0..20 {
        let child = format!("wide-{i:02}");
        db.store
            .create_run(new(&child).spawned_by("wide", 1))
            .await
            .unwrap();
        for j in 0..20 {
            db.store
                .create_run(new(&format!("{child}-{j:02}")).spawned_by(&child, 1))
                .await
                .unwrap();
        }
    }
    let server = Server::serve(&db.store, ApiConfig::default()).await;

    let (status, _, body) = page(&server.url("/ui/runs/wide")).await;
    assert_eq!(status, 200, "{body}");
    let tree = between(&body, r#"<ul class="tree" id="child-tree">"#, "</section>");
    assert_eq!(tree.matches("<li data-run=").count(), 200, "{tree}");
    // The newest children's children are listed; the oldest child's are not read.
    assert!(tree.contains(r#"data-run="wide-19-00""#), "{tree}");
    assert!(!tree.contains(r#"data-run="wide-00-"#), "{tree}");
    assert!(
        tree.contains(
            r#"<a class="tree-cut" href="../../ui/runs/wide-00#children-h">20 children, on its page</a>"#
        ),
        "{tree}"
    );
    assert!(body.contains("<li>20 in all:</li>"));
}

/// The search: an id typed whole opens the run; the first characters of ids and text in the
/// states find runs among a bounded scan (said on the page), combined with the filters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runs_page_searches_by_id_prefix_and_state_text() {
    let db = fixture().await;
    db.store
        .create_run(NewRun::new(
            "note-1",
            "Notes",
            "f",
            "Start",
            json!({"Start": {"memo": "Refund the Blue Teapot"}}),
        ))
        .await
        .unwrap();
    let server = Server::serve(&db.store, ApiConfig::default()).await;

    // A whole id: the run's page.
    let resp = client()
        .get(server.url("/ui/?q=order-done"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.url().path().ends_with("/ui/runs/order-done"),
        "{}",
        resp.url()
    );
    // The first characters of ids.
    let (status, _, body) = page(&server.url("/ui/?q=order-")).await;
    assert_eq!(status, 200, "{body}");
    for id in ["order-waiting", "order-cancelled", "order-done"] {
        assert!(
            body.contains(&format!(r#"data-run="{id}""#)),
            "{id}: {body}"
        );
    }
    assert!(!body.contains(r#"data-run="note-1""#));
    assert!(
        body.contains("3 found among the 4 newest runs matching the other filters"),
        "{body}"
    );
    assert!(body.contains(r#"<td class="found"><code>id</code></td>"#));
    assert!(
        body.contains(r#"value="order-" placeholder"#)
            || body.contains(r#"name="q" value="order-""#)
    );
    // Text in a state, whatever its case, with where it was found.
    let (_, _, found) = page(&server.url("/ui/?q=blue%20teapot")).await;
    assert!(found.contains(r#"data-run="note-1""#), "{found}");
    assert!(
        found.contains("/Start/memo = &#34;Refund the Blue Teapot&#34;")
            || found.contains("/Start/memo = &quot;Refund the Blue Teapot&quot;"),
        "{found}"
    );
    assert!(!found.contains(r#"data-run="order-done""#));
    // With a filter: only the runs it matches are searched.
    let (_, _, filtered) = page(&server.url("/ui/?q=order-&status=waiting")).await;
    assert!(filtered.contains(r#"data-run="order-waiting""#));
    assert!(!filtered.contains(r#"data-run="order-done""#));
    assert!(
        filtered.contains("1 found among the 1 newest runs"),
        "{filtered}"
    );
    // Nothing found.
    let (_, _, none) = page(&server.url("/ui/?q=zzz")).await;
    assert!(none.contains("No run matches.") && none.contains("0 found among the 4"));
    // The live section searches the same way (and never redirects).
    let (status, _, rows) = page(&server.url("/ui/?q=order-done&fragment=rows")).await;
    assert_eq!(status, 200);
    assert!(rows.contains(r#"data-run="order-done""#) && !rows.contains("<html"));
}

/// The workers page: each lease owner with the runs it holds and when the leases expire,
/// and per agent the runnable runs no worker holds and the waiting runs by what they wait
/// for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_page_shows_leases_and_backlog() {
    use std::time::Duration;

    let db = fixture().await;
    for id in ["q-1", "q-2", "q-3"] {
        db.store
            .create_run(NewRun::new(id, "Queue", "f", "Start", json!({})))
            .await
            .unwrap();
    }
    db.store
        .claim_run("q-2", "worker-7", Duration::from_mins(5))
        .await
        .unwrap()
        .expect("claimed");
    let server = Server::serve(&db.store, ApiConfig::default()).await;

    let (status, _, body) = page(&server.url("/ui/workers")).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(r#"<a href="../ui/workers">Workers</a>"#),
        "the nav: {body}"
    );
    let lease = between(&body, r#"<tr data-owner="worker-7">"#, "</tr>");
    assert!(lease.contains(r#"<td class="num">1</td>"#), "{lease}");
    assert!(
        lease.contains(r#"<a href="../ui/runs/q-2">q-2</a> until 20"#),
        "{lease}"
    );
    let queue = between(&body, r#"<tr data-agent="Queue">"#, "</tr>");
    // 3 runnable, 1 held, 2 waiting for a worker, none waiting.
    assert!(queue.contains("status=running\">3</a>"), "{queue}");
    assert!(queue.contains(r#"<td class="num">1</td>"#), "{queue}");
    assert!(
        queue.contains(r#"<td class="num backlog-free">2</td>"#),
        "{queue}"
    );
    assert!(queue.contains("status=waiting\">0</a>"), "{queue}");
    // The fixture's waiting run waits for its signal.
    let order = between(&body, r#"<tr data-agent="Order">"#, "</tr>");
    assert!(order.contains("<li>confirm: 1</li>"), "{order}");
    assert!(body.contains("every one of them"), "{body}");
}

/// A run of 2,000 steps: its page stays small (the timeline and the journal paged, the
/// path summarised) and the pages reach its first version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_run_is_paged_down_to_its_first_version() {
    const STEPS: u64 = 2_000;
    let db = Db::new().await;
    let lease = db
        .claimed(
            NewRun::new("loop", "Looper", "f", "Tick", json!({"Tick": {"i": 0}})),
            "test",
        )
        .await;
    common::commit_steps(&db.store, &lease, "loop", STEPS, 1).await;
    let server = Server::serve(&db.store, ApiConfig::default()).await;

    let (status, _, body) = page(&server.url("/ui/runs/loop")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.len() < 300_000, "the page is {} bytes", body.len());
    // The path in one sentence: its ends named, the steps between counted.
    let path = between(&body, r#"<p id="path">"#, "</p>");
    assert!(path.contains("… 1994 more steps …"), "{path}");
    assert!(path.len() < 1_000, "{path}");
    // The newest versions first, and the way to the oldest.
    assert!(body.contains(r#"<li id="v2000">"#) && body.contains(r#"<li id="v1951">"#));
    assert!(!body.contains(r#"<li id="v1950">"#));
    assert!(body.contains("page 1 of 41"), "{body}");
    let href = |body: &str, id: &str| -> Option<String> {
        let rest = body.split(&format!(r#"id="{id}" href=""#)).nth(1)?;
        Some(
            rest.split('"')
                .next()?
                .replace("&#38;", "&")
                .replace("&amp;", "&"),
        )
    };
    let oldest = href(&body, "timeline-oldest").expect("a link to the first versions");
    let (_, _, first) = page(&server.url(&format!("/ui/runs/loop{oldest}"))).await;
    assert!(first.contains("page 41 of 41"), "{first}");
    assert!(first.contains(r#"<li id="v0">"#) && !first.contains(r#"<li id="v1">"#));
    assert!(href(&first, "timeline-older").is_none());
    // Walking the older pages one at a time gets there too.
    let mut url = server.url("/ui/runs/loop");
    let mut pages = 1;
    loop {
        let (_, _, b) = page(&url).await;
        assert!(b.len() < 300_000, "page {pages} is {} bytes", b.len());
        let Some(q) = href(&b, "timeline-older") else {
            assert!(b.contains(r#"<li id="v0">"#));
            break;
        };
        url = server.url(&format!("/ui/runs/loop{q}"));
        pages += 1;
    }
    assert_eq!(pages, 41);
    // The journal pages with the timeline: the entries of the steps begun at the versions
    // shown, its oldest page holding the first step's call.
    assert!(body.contains("step-1999") && !body.contains("step-1950"));
    let mut url = server.url("/ui/runs/loop");
    let mut pages = 1;
    loop {
        let (_, _, b) = page(&url).await;
        let Some(q) = href(&b, "journal-older") else {
            assert!(b.contains("step-0000") && !b.contains("step-0001"), "{b}");
            break;
        };
        url = server.url(&format!("/ui/runs/loop{q}"));
        pages += 1;
    }
    assert_eq!(pages, 41);
}

/// The calls of the current step journaled without a result show with their attempts and
/// when they are tried again, as far as the run's record says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_tool_calls_show_their_attempts() {
    use agent_core::store::CallStatus;
    use agent_core::tool::ToolKind;

    let db = fixture().await;
    let lease = db
        .claimed(
            NewRun::new("calls", "Checkout", "f", "Start", json!({})),
            "worker-3",
        )
        .await;
    db.store
        .record_entry(&lease, &common::lookup_entry("calls", 0))
        .await
        .unwrap();
    let mut charge = common::lookup_entry("calls", 1);
    charge.name = "Charge".into();
    charge.tool_kind = Some(ToolKind::Write);
    charge.idempotency_key = Some("calls:0:1".into());
    charge.status = CallStatus::Started;
    charge.output = None;
    charge.finished_at = None;
    charge.attempts = 3;
    db.store.record_entry(&lease, &charge).await.unwrap();
    let server = Server::serve(&db.store, ApiConfig::default()).await;

    let (status, _, body) = page(&server.url("/ui/runs/calls")).await;
    assert_eq!(status, 200, "{body}");
    let table = between(&body, r#"<table id="pending">"#, "</table>");
    assert!(table.contains(r#"<tr data-call="0.1">"#), "{table}");
    assert!(
        !table.contains(r#"data-call="0.0""#),
        "a completed call listed: {table}"
    );
    assert!(table.contains("<td>Charge</td><td>write</td><td><code>calls:0:1</code></td>"));
    assert!(table.contains(r#"<td class="num">3</td>"#));
    assert!(table.contains("retrying (attempt 3)"), "{table}");
    assert!(table.contains("Tried again: now, by worker-3"), "{table}");
    // A worker that stopped renewing: the calls wait for the next claim.
    db.store
        .create_run(NewRun::new("stalled", "Checkout", "f", "Start", json!({})))
        .await
        .unwrap();
    let short = db
        .store
        .claim_run("stalled", "worker-9", std::time::Duration::from_millis(300))
        .await
        .unwrap()
        .expect("a free run")
        .lease;
    charge.run_id = "stalled".into();
    db.store.record_entry(&short, &charge).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let (_, _, stalled) = page(&server.url("/ui/runs/stalled")).await;
    assert!(
        stalled.contains(
            "Tried again: at the next claim of the run: the lease of worker-9 expired at"
        ),
        "{stalled}"
    );
    // A run whose calls all have their results says so.
    let (_, _, done) = page(&server.url("/ui/runs/order-done")).await;
    assert!(done.contains(r#"id="pending-none""#) && !done.contains(r#"<table id="pending">"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edit_page_offers_the_form_only_for_a_stopped_run() {
    let db = fixture().await;
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;

    // A waiting run: its state to edit, what stopped it, and every field labelled.
    let (status, ctype, body) = page(&server.url("/ui/runs/order-waiting/edit")).await;
    assert_eq!(status, 200, "{body}");
    assert!(ctype.starts_with("text/html"), "{ctype}");
    assert!(
        body.contains(r#"<form id="edit-form" data-run="order-waiting">"#),
        "{body}"
    );
    let waiting = db.store.load_run("order-waiting").await.unwrap().unwrap();
    let payment = waiting.state["Confirm"]["payment_id"].as_str().unwrap();
    let text_box = body
        .split(r#"<textarea id="edit-json""#)
        .nth(1)
        .and_then(|rest| rest.split("</textarea>").next())
        .expect("the state's text box");
    assert!(
        text_box.contains("Confirm") && text_box.contains(payment),
        "{text_box}"
    );
    assert!(
        body.contains(r#"<dd id="edit-state-name">Confirm</dd>"#),
        "{body}"
    );
    assert!(body.contains(r#"<span id="edit-status" class="status s-waiting">waiting</span>"#));
    assert!(
        body.contains(r#"<dd id="edit-stopped">it waits for"#),
        "{body}"
    );
    assert!(
        body.contains(r#"<dd id="edit-leads-to">Done, Failed</dd>"#),
        "{body}"
    );
    for field in [
        "edit-json",
        "edit-reason",
        "edit-by",
        "edit-state-name-input",
        "edit-override",
    ] {
        assert!(
            body.contains(&format!(r#"<label for="{field}">"#)),
            "{field}"
        );
    }
    assert!(body.contains(r#"id="edit-reason" name="reason" required"#));
    assert!(body.contains("The override is recorded"));
    assert!(body.contains(r#"<noscript><p class="error-box" id="edit-no-script">"#));
    // Without the script, the buttons stay off: the form cannot submit itself unapplied.
    assert!(body.contains(r#"<button type="submit" id="edit-apply" disabled>"#));
    assert!(!body.contains(r#"id="edit-refused""#));
    // Links work wherever the router is mounted.
    assert!(
        body.contains(r#"href="../../../ui/runs/order-waiting""#),
        "{body}"
    );

    // Ended runs: why not, and what to do instead; the state is shown, no form.
    for (run, status) in [
        ("order-done", "completed"),
        ("order-cancelled", "compensated"),
    ] {
        let (code, _, body) = page(&server.url(&format!("/ui/runs/{run}/edit"))).await;
        assert_eq!(code, 200, "{body}");
        assert!(
            body.contains(&format!(
                r#"<p class="error-box" id="edit-refused">This run cannot be edited: run `{run}` is {status}"#
            )),
            "{body}"
        );
        assert!(body.contains("fork it"), "{body}");
        assert!(body.contains(r#"id="edit-current""#));
        assert!(!body.contains(r#"id="edit-form""#), "{body}");
    }

    // A run a worker drives (just edited, through the API) is refused; once its state did
    // not read as the agent's type, the run is quarantined and can be edited again, its
    // page saying why it stopped.
    db.drive("order-held", "Pay").await;
    let typo = json!({ "state": { "Confirm": { "payment_id": 42 } }, "reason": "typo" });
    let resp = client()
        .post(server.url("/v1/runs/order-held/state"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .json(&typo)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let (_, _, running) = page(&server.url("/ui/runs/order-held/edit")).await;
    assert!(
        running.contains("This run cannot be edited: run `order-held` is running")
            && running.contains("a worker is driving it"),
        "{running}"
    );
    db.runner("Pay").run("order-held").await.unwrap();
    let held = db.store.load_run("order-held").await.unwrap().unwrap();
    let (_, _, body) = page(&server.url("/ui/runs/order-held/edit")).await;
    assert!(
        body.contains(r#"class="status s-quarantined">quarantined</span>"#),
        "{body}"
    );
    assert!(body.contains(r#"<form id="edit-form" data-run="order-held">"#));
    let why = held.error.expect("why it was quarantined").to_string();
    let first_words = why.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    assert!(
        body.contains(&format!(r#"<dd id="edit-stopped">{first_words}"#)),
        "{why}: {body}"
    );

    let (status, ctype, missing) = page(&server.url("/ui/runs/nope/edit")).await;
    assert_eq!(status, 404);
    assert!(ctype.starts_with("text/html") && missing.contains("run `nope` not found"));

    // The run's page links to the edit only where the run can be edited.
    let (_, _, waiting_page) = page(&server.url("/ui/runs/order-waiting")).await;
    assert!(
        waiting_page.contains(
            r#"<a id="edit-link" class="button" href="../../ui/runs/order-waiting/edit">"#
        ),
        "{waiting_page}"
    );
    for run in ["order-done", "order-cancelled"] {
        let (_, _, body) = page(&server.url(&format!("/ui/runs/{run}"))).await;
        assert!(!body.contains(r#"id="edit-link""#), "{run}");
    }
}
