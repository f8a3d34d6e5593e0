//! Wrong tokens are throttled per client address: after ten within a minute, the sign-in
//! form and the API answer `429` with `Retry-After` without checking what they are given
//! (the right token included), while another client is served as before.

extern crate durable_agents_http as agent_http;

mod common;

use std::net::{IpAddr, Ipv4Addr};

use agent_http::ApiConfig;
use common::{Db, Server, TOKEN, assert_error, json};

/// A client whose requests come from `127.0.0.N` (every `127/8` address is loopback on
/// Linux), not following redirects.
fn client_from(n: u8) -> reqwest::Client {
    #[allow(deprecated, reason = "ring is the provider sqlx compiles")]
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, n)))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn sign_in(server: &Server, client: &reqwest::Client, token: &str) -> reqwest::Response {
    client
        .post(server.url("/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sign_in_form_is_throttled_per_client() {
    let db = Db::new().await;
    let server = Server::serve(
        &db.store,
        ApiConfig::default()
            .with_token(TOKEN)
            .require_token_for_reads(),
    )
    .await;
    let guesser = client_from(2);
    for guess in 0..10 {
        let resp = sign_in(&server, &guesser, &format!("guess-{guess}")).await;
        assert_eq!(resp.status(), 403, "guess {guess}");
    }
    for token in ["guess-10", TOKEN] {
        let resp = sign_in(&server, &guesser, token).await;
        assert_eq!(resp.status(), 429, "{token}");
        let secs: u64 = resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&secs), "{secs}");
        assert!(resp.headers().get("set-cookie").is_none());
    }
    // The guesser's reads with a token are throttled too (the same count).
    let resp = guesser
        .get(server.url("/ui/"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    // Another client signs in.
    let resp = sign_in(&server, &client_from(3), TOKEN).await;
    assert_eq!(resp.status(), 303);
    assert!(resp.headers().get("set-cookie").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_bearer_tokens_are_throttled_per_client() {
    let db = Db::new().await;
    db.drive("order-waiting", "Pay").await;
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;
    let guesser = client_from(4);
    let cancel = |client: &reqwest::Client, token: &str| {
        client
            .post(server.url("/v1/runs/order-waiting/cancel"))
            .bearer_auth(token)
            .json(&serde_json::json!({}))
            .send()
    };
    for guess in 0..10 {
        let (status, body) = json(cancel(&guesser, &format!("guess-{guess}")).await.unwrap()).await;
        assert_error(status, &body, 403, "forbidden");
    }
    let resp = cancel(&guesser, TOKEN).await.unwrap();
    assert!(resp.headers().contains_key("retry-after"));
    let (status, body) = json(resp).await;
    assert_error(status, &body, 429, "too_many_requests");
    let run = db.store.load_run("order-waiting").await.unwrap().unwrap();
    assert!(run.cancel_requested.is_none() && !run.status.is_final());
    // Reads without a token are not guesses: still served, to the guesser too.
    let resp = guesser.get(server.url("/v1/runs")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    // Another client's write goes through.
    let (status, body) = json(cancel(&client_from(5), TOKEN).await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    // The document says so, on every operation.
    let (_, doc) = json(
        client_from(5)
            .get(server.url("/v1/openapi.json"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            assert!(
                op["responses"]["429"].is_object(),
                "{method} {path} does not document 429"
            );
        }
    }
}
