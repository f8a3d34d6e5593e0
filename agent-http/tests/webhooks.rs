//! Webhooks over real HTTP: a delivery starts one run, a retried delivery finds it, a
//! different body under a used key is refused; the key from a header or a body field; a
//! signed webhook checks the `sha256=` HMAC of the raw body and needs no token, an unsigned
//! one needs the token; bodies that are not an initial state get the API's errors. A
//! signalling webhook and a signal `POST` with an `Idempotency-Key` store one signal per key.

extern crate durable_agents_http as agent_http;

mod common;

use agent_core::store::RunStatus;
use agent_http::{ApiConfig, DeliveryKey, Webhook};
use common::{Db, Server, TOKEN, client, runner};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

const SECRET: &str = "whsec-test-5c1b7";

fn sign(body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

async fn run_count(db: &Db) -> u64 {
    let by_status = db
        .store
        .count_runs(&agent_core::store::RunFilter::default())
        .await
        .unwrap();
    by_status.iter().map(|(_, n)| n).sum()
}

async fn post(url: &str, body: &Value, headers: &[(&str, String)]) -> (u16, Value) {
    let mut req = client()
        .post(url)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap());
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let resp = req.send().await.expect("post");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_starts_one_run_and_a_retry_finds_it() {
    let db = Db::new().await;
    let hook = Webhook::starting("orders", runner(&db.store, "Pay")).in_state("Start");
    let server = Server::serve(
        &db.store,
        ApiConfig::default().with_token(TOKEN).with_webhook(hook),
    )
    .await;
    let url = server.url("/v1/webhooks/orders");
    let auth = ("Authorization", format!("Bearer {TOKEN}"));
    let key = ("Idempotency-Key", "delivery-1".to_owned());
    let body = json!({"items": ["apple"]});

    let (status, first) = post(&url, &body, &[auth.clone(), key.clone()]).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["created"], true);
    assert_eq!(first["run"]["id"], "orders-delivery-1");
    assert_eq!(first["run"]["state_name"], "Start");
    assert_eq!(first["run"]["labels"]["webhook"], "orders", "{first}");
    assert_eq!(first["run"]["labels"]["webhook.delivery"], "delivery-1");

    // The sender retries: the same run, no second one.
    let (status, again) = post(&url, &body, &[auth.clone(), key.clone()]).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["created"], false);
    assert_eq!(again["run"]["id"], "orders-delivery-1");
    // Another body under the same key is a conflict, and starts nothing.
    let (status, other) = post(&url, &json!({"items": ["pear"]}), &[auth.clone(), key]).await;
    assert_eq!(status, 409, "{other}");
    assert_eq!(run_count(&db).await, 1);

    // No key: refused, saying where the key goes.
    let (status, no_key) = post(&url, &body, std::slice::from_ref(&auth)).await;
    assert_eq!(status, 400, "{no_key}");
    assert!(
        no_key["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`Idempotency-Key` header"),
        "{no_key}"
    );
    // Not the initial state's data: the API's error, naming the states to start in.
    let (status, wrong) = post(
        &url,
        &json!({"items": 3}),
        &[auth.clone(), ("Idempotency-Key", "delivery-2".to_owned())],
    )
    .await;
    assert_eq!(status, 422, "{wrong}");
    assert!(
        wrong["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Start"),
        "{wrong}"
    );
    // An unsigned webhook is an API write: no token, no run.
    let (status, anonymous) =
        post(&url, &body, &[("Idempotency-Key", "delivery-3".to_owned())]).await;
    assert_eq!(status, 401, "{anonymous}");
    let (status, unknown) = post(&server.url("/v1/webhooks/nope"), &body, &[auth]).await;
    assert_eq!(status, 404, "{unknown}");

    // The inspector says which delivery started it.
    let page = common::client()
        .get(server.url("/ui/runs/orders-delivery-1"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("webhook `orders`, delivery `delivery-1`"),
        "{page}"
    );

    // The run it started is a run like any other: a worker drives it.
    let done = runner(&db.store, "Pay")
        .run("orders-delivery-1")
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Waiting, "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_webhook_checks_the_signature_and_needs_no_token() {
    let db = Db::new().await;
    let hook = Webhook::starting("shop", runner(&db.store, "Pay"))
        .key(DeliveryKey::Field("/order/id".into()))
        .signed_hmac_sha256(SECRET)
        .signature_header("X-Hub-Signature-256");
    let server = Server::serve(
        &db.store,
        ApiConfig::default().with_token(TOKEN).with_webhook(hook),
    )
    .await;
    let url = server.url("/v1/webhooks/shop");
    // The body is the enum as it serializes; the key is a field of it.
    let body = json!({"Start": {"items": ["apple"]}, "order": {"id": 42}});
    let raw = serde_json::to_vec(&body).unwrap();

    let (status, started) = post(&url, &body, &[("X-Hub-Signature-256", sign(&raw))]).await;
    // The extra `order` field is not part of the state: refused as the API refuses it.
    assert_eq!(status, 422, "{started}");

    let body = json!({"Start": {"items": ["apple"]}});
    let keyed = DeliveryKey::Field("/Start/items/0".into());
    let hook = Webhook::starting("shop2", runner(&db.store, "Pay"))
        .key(keyed)
        .signed_hmac_sha256(SECRET);
    let server2 = Server::serve(
        &db.store,
        ApiConfig::default().with_token(TOKEN).with_webhook(hook),
    )
    .await;
    let url2 = server2.url("/v1/webhooks/shop2");
    let raw = serde_json::to_vec(&body).unwrap();
    let (status, started) = post(&url2, &body, &[("X-Signature-256", sign(&raw))]).await;
    assert_eq!(status, 201, "{started}");
    assert_eq!(started["run"]["id"], "shop2-apple");

    // No signature, a malformed one, a wrong one: refused, and nothing started.
    let (status, none) = post(&url2, &body, &[]).await;
    assert_eq!(status, 401, "{none}");
    assert!(
        none["error"]["message"]
            .as_str()
            .unwrap()
            .contains("X-Signature-256: sha256="),
        "{none}"
    );
    let (status, garbled) = post(&url2, &body, &[("X-Signature-256", "md5=abc".to_owned())]).await;
    assert_eq!(status, 401, "{garbled}");
    let tampered = json!({"Start": {"items": ["apple", "gold"]}});
    let (status, wrong) = post(&url2, &tampered, &[("X-Signature-256", sign(&raw))]).await;
    assert_eq!(status, 401, "{wrong}");
    assert!(
        wrong["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not match the body"),
        "{wrong}"
    );
    // A token is no substitute for the signature.
    let (status, _) = post(
        &url2,
        &tampered,
        &[("Authorization", format!("Bearer {TOKEN}"))],
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(
        run_count(&db).await,
        1,
        "only the signed delivery started a run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signalling_webhook_signals_once_per_delivery_even_after_the_run_moved_on() {
    let db = Db::new().await;
    db.drive("order-1", "Pay").await;
    let hook = Webhook::signalling(
        "confirmations",
        runner(&db.store, "Pay"),
        "confirm",
        "/order",
    )
    .payload_at("/answer");
    let server = Server::serve(
        &db.store,
        ApiConfig::default().with_token(TOKEN).with_webhook(hook),
    )
    .await;
    let url = server.url("/v1/webhooks/confirmations");
    let auth = ("Authorization", format!("Bearer {TOKEN}"));
    let key = ("Idempotency-Key", "c-1".to_owned());
    let body = json!({"order": "order-1", "answer": {"ok": true}});

    let (status, first) = post(&url, &body, &[auth.clone(), key.clone()]).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["created"], true, "{first}");
    assert_eq!(first["run_id"], "order-1", "{first}");
    let signal_id = first["signal_id"].as_i64().expect("a signal id");
    // The run consumes the signal and completes before the sender retries: the retry is
    // the same delivery, not a signal the ended run refuses.
    let done = runner(&db.store, "Pay").run("order-1").await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    let (status, again) = post(&url, &body, &[auth.clone(), key]).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["created"], false, "{again}");
    assert_eq!(again["signal_id"], signal_id, "{again}");

    // A new delivery to the ended run: the API's refusal.
    let (status, ended) = post(
        &url,
        &body,
        &[auth.clone(), ("Idempotency-Key", "c-2".to_owned())],
    )
    .await;
    assert_eq!(status, 409, "{ended}");
    // No run id, no payload field, an unknown run: refused, saying which.
    let (status, no_run) = post(
        &url,
        &json!({"answer": {"ok": true}}),
        &[auth.clone(), ("Idempotency-Key", "c-3".to_owned())],
    )
    .await;
    assert_eq!(status, 422, "{no_run}");
    assert!(
        no_run["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`/order`"),
        "{no_run}"
    );
    let (status, no_payload) = post(
        &url,
        &json!({"order": "order-1"}),
        &[auth.clone(), ("Idempotency-Key", "c-4".to_owned())],
    )
    .await;
    assert_eq!(status, 422, "{no_payload}");
    let (status, unknown) = post(
        &url,
        &json!({"order": "nowhere", "answer": {"ok": true}}),
        &[auth, ("Idempotency-Key", "c-5".to_owned())],
    )
    .await;
    assert_eq!(status, 404, "{unknown}");
    assert!(
        db.store
            .pending_signals("order-1")
            .await
            .unwrap()
            .is_empty(),
        "nothing pending: the retry and the refusals stored no signal"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_posted_with_an_idempotency_key_is_stored_once() {
    let db = Db::new().await;
    db.drive("order-1", "Pay").await;
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;
    let url = server.url("/v1/runs/order-1/signals");
    let auth = ("Authorization", format!("Bearer {TOKEN}"));
    let body = json!({"name": "confirm", "payload": {"ok": true}});
    let key = ("Idempotency-Key", "retry-me".to_owned());

    let (status, first) = post(&url, &body, &[auth.clone(), key.clone()]).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["duplicate"], false, "{first}");
    let (status, again) = post(&url, &body, &[auth.clone(), key]).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (again["id"].clone(), again["duplicate"].clone()),
        (first["id"].clone(), json!(true)),
        "{again}"
    );
    assert_eq!(db.store.pending_signals("order-1").await.unwrap().len(), 1);
    // Without a key, a second POST is a second signal, as before.
    let (status, plain) = post(&url, &body, std::slice::from_ref(&auth)).await;
    assert_eq!((status, plain["duplicate"].clone()), (200, json!(false)));
    assert_eq!(db.store.pending_signals("order-1").await.unwrap().len(), 2);
    let (status, too_long) = post(&url, &body, &[auth, ("Idempotency-Key", "k".repeat(201))]).await;
    assert_eq!(status, 400, "{too_long}");
}
