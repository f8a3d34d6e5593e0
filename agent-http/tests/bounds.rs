//! What a request may cost, on both stores: every list a page bounded by its limit (runs
//! by keyset, history and journal from a version), every integer of a path, query, cursor
//! or header checked (out of range: `400` in the API's shape, never a panic), and a tool
//! switch only for a tool that exists.

extern crate durable_agents_http as agent_http;

mod common;

use agent_core::store::{NewRun, RunFilter};
use agent_http::ApiConfig;
use common::{Db, Server, TOKEN, assert_error, client, json};
use serde_json::{Value, json};

const RUN: &str = "order-waiting";

/// A store of each kind with one run of the fixture agent (its graph registered, its
/// tools declared) waiting for `confirm`.
async fn fixture_dbs() -> Vec<(&'static str, Db)> {
    let mut dbs = Db::both().await;
    for (_, db) in &mut dbs {
        db.drive(RUN, "Pay").await;
    }
    dbs
}

/// Every page of `GET /v1/runs?limit=LIMIT`, following `next`.
async fn run_pages(server: &Server, limit: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let mut url = format!("/v1/runs?limit={limit}");
        if let Some(c) = &cursor {
            url.push_str("&cursor=");
            url.push_str(c);
        }
        let (status, page) = json(client().get(server.url(&url)).send().await.unwrap()).await;
        assert_eq!(status, 200, "{url}: {page}");
        let runs = page["runs"].as_array().unwrap();
        assert!(runs.len() <= limit, "{url}: {} runs", runs.len());
        ids.extend(runs.iter().map(|r| r["id"].as_str().unwrap().to_owned()));
        match page.get("next") {
            Some(Value::String(next)) => cursor = Some(next.clone()),
            None => return ids,
            Some(other) => panic!("next: {other}"),
        }
    }
    panic!("pagination did not end");
}

/// Runs created back to back (many in one millisecond), with ids whose order is not their
/// creation order: the pages list each run once, in the store's order, on both stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_pages_follow_the_keyset_on_both_stores() {
    for (kind, db) in Db::both().await {
        for i in 0..45_u32 {
            let id = format!("run-{}-{i}", ["b", "a", "c"][(i % 3) as usize]);
            db.store
                .create_run(NewRun::new(id, "Checkout", "f", "Start", json!({"i": i})))
                .await
                .unwrap();
        }
        let all: Vec<String> = (db.store.list_runs(&RunFilter::default()).await.unwrap())
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(all.len(), 45, "{kind}");
        let server = Server::serve(&db.store, ApiConfig::default()).await;
        for limit in [1, 4, 7, 45, 500] {
            assert_eq!(
                run_pages(&server, limit).await,
                all,
                "{kind}, limit {limit}"
            );
        }
        // An old cursor (the runs of one millisecond counted) is refused in words.
        let (status, body) = json(
            client()
                .get(server.url("/v1/runs?cursor=1700000000123.3"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_error(status, &body, 400, "bad_request");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("earlier version"),
            "{kind}: {body}"
        );
    }
}

/// History and journal come a page at a time, from a version (and index) on, at most the
/// limit: read page after page, they are the whole history and journal, on both stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_and_journal_come_in_bounded_pages() {
    for (kind, db) in fixture_dbs().await {
        let server = Server::serve(&db.store, ApiConfig::default()).await;
        let history = db.store.history(RUN).await.unwrap();
        let journal = db.store.journal(RUN, None).await.unwrap();
        assert!(history.len() >= 3 && journal.len() >= 2, "{kind}");
        for limit in [1_usize, 2, 1000] {
            let mut versions = Vec::new();
            let mut from = 0;
            loop {
                let url = server.url(&format!("/v1/runs/{RUN}/history?from={from}&limit={limit}"));
                let (status, page) = json(client().get(url).send().await.unwrap()).await;
                assert_eq!(status, 200, "{kind}: {page}");
                let page = page.as_array().unwrap();
                assert!(page.len() <= limit, "{kind}");
                versions.extend(page.iter().map(|t| t["version"].as_u64().unwrap()));
                if page.len() < limit {
                    break;
                }
                from = versions.last().unwrap() + 1;
            }
            let want: Vec<u64> = history.iter().map(|t| t.version).collect();
            assert_eq!(versions, want, "{kind}, limit {limit}");

            let mut keys = Vec::new();
            let (mut version, mut seq) = (0, 0);
            loop {
                let url = server.url(&format!(
                    "/v1/runs/{RUN}/journal?from_version={version}&from_seq={seq}&limit={limit}"
                ));
                let (status, page) = json(client().get(url).send().await.unwrap()).await;
                assert_eq!(status, 200, "{kind}: {page}");
                let page = page.as_array().unwrap();
                assert!(page.len() <= limit, "{kind}");
                keys.extend(
                    page.iter()
                        .map(|e| (e["version"].as_u64().unwrap(), e["seq"].as_u64().unwrap())),
                );
                if page.len() < limit {
                    break;
                }
                let last = keys.last().unwrap();
                (version, seq) = (last.0, last.1 + 1);
            }
            let want: Vec<(u64, u64)> = journal
                .iter()
                .map(|e| (e.version, u64::from(e.seq)))
                .collect();
            assert_eq!(keys, want, "{kind}, limit {limit}");
        }
        for url in [
            format!("/v1/runs/{RUN}/history?limit=0"),
            format!("/v1/runs/{RUN}/history?limit=1001"),
            format!("/v1/runs/{RUN}/journal?limit=1001"),
            format!("/v1/runs/{RUN}/history?from=9223372036854775808"),
            format!("/v1/runs/{RUN}/journal?from_version=9223372036854775808"),
            "/v1/events?after=9223372036854775808".to_owned(),
        ] {
            let (status, body) = json(client().get(server.url(&url)).send().await.unwrap()).await;
            assert_error(status, &body, 400, "bad_request");
        }
    }
}

/// Integers out of their type's range, negative or not numbers at all, in every path,
/// query, cursor and header that carries one: `400` in the API's shape (`422` for a JSON
/// body, as for any body of the wrong shape), never a panic nor a `500`, on both stores.
/// At the edge of their range (`u64::MAX`), they are answered too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_integers_are_refused_everywhere() {
    const BAD: [&str; 6] = [
        "18446744073709551616",
        "-1",
        "99999999999999999999999999",
        "1e3",
        "0x10",
        "%2B%2B1",
    ];
    let gets = [
        "/v1/runs?limit={}",
        "/v1/runs?created_after={}",
        "/v1/runs?created_before={}",
        "/v1/runs?agent_version={}",
        "/v1/runs?cursor=r1.{}.72",
        "/v1/runs/order-waiting/history?from={}",
        "/v1/runs/order-waiting/history?limit={}",
        "/v1/runs/order-waiting/journal?version={}",
        "/v1/runs/order-waiting/journal?from_version={}",
        "/v1/runs/order-waiting/journal?from_seq={}",
        "/v1/runs/order-waiting/journal?limit={}",
        "/v1/runs/order-waiting/state/{}",
        "/v1/runs/order-waiting/events?after={}",
        "/v1/runs/order-waiting/events?limit={}",
        "/v1/events?after={}",
        "/v1/events?limit={}",
        "/v1/runs/order-waiting/events/stream?after={}",
        "/v1/events/stream?after={}",
        "/ui/?limit={}",
        "/ui/?cursor=r1.{}.72",
        "/ui/runs/order-waiting?journal={}",
        "/ui/runs/order-waiting/entries/{}/0",
        "/ui/runs/order-waiting/entries/0/{}",
    ];
    for (kind, db) in fixture_dbs().await {
        let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;
        for template in gets {
            // `-1` and `1e3` are fine where the value is a signed time; each other is out
            // of range or not an integer everywhere.
            let signed = template.contains("created_") || template.contains("cursor");
            for bad in BAD {
                if signed && bad == "-1" {
                    continue;
                }
                let path = template.replace("{}", bad);
                let resp = client().get(server.url(&path)).send().await.unwrap();
                let status = resp.status().as_u16();
                if path.starts_with("/ui/") {
                    assert_eq!(status, 400, "{kind} {path}");
                    continue;
                }
                let (status, body) = json(resp).await;
                assert_eq!(status, 400, "{kind} {path}: {body}");
                assert_error(status, &body, 400, "bad_request");
            }
            // The largest value of the type: an answer (empty, not found, or out of the
            // parameter's range), never a failure of the server.
            for edge in ["18446744073709551615", "9223372036854775807", "4294967295"] {
                let path = template.replace("{}", edge);
                let resp = client().get(server.url(&path)).send().await.unwrap();
                let status = resp.status().as_u16();
                assert!(
                    [200, 400, 404].contains(&status),
                    "{kind} {path}: {status} {}",
                    resp.text().await.unwrap_or_default()
                );
            }
        }
        for header in ["18446744073709551616", "-1", "1.5"] {
            for path in ["/v1/events/stream", "/v1/runs/order-waiting/events/stream"] {
                let (status, body) = json(
                    client()
                        .get(server.url(path))
                        .header("last-event-id", header)
                        .send()
                        .await
                        .unwrap(),
                )
                .await;
                assert_error(status, &body, 400, "bad_request");
            }
        }
        for version in ["18446744073709551616", "-1", "1.5"] {
            let resp = client()
                .post(server.url("/v1/runs/order-waiting/fork"))
                .bearer_auth(TOKEN)
                .header("content-type", "application/json")
                .body(format!(r#"{{"version": {version}}}"#))
                .send()
                .await
                .unwrap();
            let (status, body) = json(resp).await;
            assert_error(status, &body, 422, "unprocessable");
        }
        let resp = client()
            .post(server.url("/v1/runs/order-waiting/fork"))
            .bearer_auth(TOKEN)
            .json(&json!({"version": u64::MAX}))
            .send()
            .await
            .unwrap();
        let (status, body) = json(resp).await;
        assert_error(status, &body, 400, "bad_request");
    }
}

/// A tool switch names a tool a registered agent declares (or one switched before): a
/// name that differs only by case is refused with the known names and the close one, and
/// nothing is stored; the real name is switched, on both stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_switches_name_tools_that_exist() {
    for (kind, db) in fixture_dbs().await {
        let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;
        let switch = |name: &str, on: &str| {
            client()
                .post(server.url(&format!("/v1/tools/{name}/{on}")))
                .bearer_auth(TOKEN)
                .json(&json!({"reason": "incident 12"}))
                .send()
        };
        for (name, on) in [
            ("charge", "disable"),
            ("Chargepayment", "enable"),
            ("x", "disable"),
        ] {
            let (status, body) = json(switch(name, on).await.unwrap()).await;
            assert_error(status, &body, 404, "not_found");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(
                message.contains(&format!("no registered agent declares a tool `{name}`"))
                    && message.contains("Charge, Lookup, Release, Reserve"),
                "{kind}: {message}"
            );
            if name == "charge" {
                assert!(
                    message.contains("did you mean `Charge`?"),
                    "{kind}: {message}"
                );
            }
        }
        assert!(db.store.tool_switches().await.unwrap().is_empty(), "{kind}");
        let (status, body) = json(switch("Charge", "disable").await.unwrap()).await;
        assert_eq!(status, 200, "{kind}: {body}");
        assert_eq!(body["enabled"], false, "{kind}: {body}");
        assert!(!db.store.tool_enabled("Charge").await.unwrap(), "{kind}");
        let (status, body) = json(switch("Charge", "enable").await.unwrap()).await;
        assert_eq!(status, 200, "{kind}: {body}");
        assert!(db.store.tool_enabled("Charge").await.unwrap(), "{kind}");
    }
}
