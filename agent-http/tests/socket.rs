//! A run over one WebSocket, with a real client: its events as SSE carries them, a
//! reconnect from the last cursor that misses nothing, signals sent over the socket with the
//! token (and refused without it, or with a wrong one), and the API's errors for a signal
//! nothing waits for.

extern crate durable_agents_http as agent_http;

mod common;

use std::time::Duration;

use agent_http::ApiConfig;
use common::{Db, Server, TOKEN};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn open(server: &Server, path: &str, token: Option<&str>) -> Socket {
    let url = server.url(path).replacen("http://", "ws://", 1);
    let mut request = url.into_client_request().unwrap();
    if let Some(token) = token {
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    tokio_tungstenite::connect_async(request)
        .await
        .expect("the upgrade")
        .0
}

/// The next JSON message, skipping pings.
async fn next(socket: &mut Socket) -> Option<Value> {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("a message within 10 s")?
            .ok()?;
        match message {
            Message::Text(text) => return Some(serde_json::from_str(&text).unwrap()),
            Message::Close(_) => return None,
            _ => {}
        }
    }
}

/// Events until (and with) the run's entering its wait.
async fn events_until_waiting(socket: &mut Socket) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let m = next(socket).await.expect("the socket closed early");
        assert_eq!(m["type"], "event", "{m}");
        let e = &m["event"];
        let done = e["type"] == "wait_entered";
        out.push(e.clone());
        if done {
            return out;
        }
    }
}

async fn get(url: &str) -> (u16, Value) {
    common::json(common::client().get(url).send().await.unwrap()).await
}

async fn send(socket: &mut Socket, message: &Value) {
    socket
        .send(Message::Text(message.to_string().into()))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_signals_over_one_socket_and_a_reconnect_misses_nothing() {
    let db = Db::new().await;
    db.drive("order-1", "Pay").await;
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;

    // The events so far, as the SSE stream has them, cursors increasing.
    let mut socket = open(&server, "/v1/runs/order-1/socket", Some(TOKEN)).await;
    let before = events_until_waiting(&mut socket).await;
    let cursors: Vec<u64> = before
        .iter()
        .map(|e| e["cursor"].as_u64().unwrap())
        .collect();
    assert!(cursors.windows(2).all(|w| w[0] < w[1]), "{cursors:?}");
    let last = *cursors.last().unwrap();

    // A signal nothing waits for: the API's error, matched by its request id.
    send(
        &mut socket,
        &json!({"type": "signal", "name": "nope", "payload": {}, "request": "r1"}),
    )
    .await;
    let refused = next(&mut socket).await.unwrap();
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(refused["request"], "r1");
    assert_eq!(refused["error"]["code"], "unprocessable", "{refused}");
    // Garbage is answered, and the socket stays open.
    socket.send(Message::Text("{".into())).await.unwrap();
    let garbage = next(&mut socket).await.unwrap();
    assert_eq!(garbage["error"]["code"], "bad_request", "{garbage}");

    // The signal the run waits for, over the socket; then the run moves on.
    send(
        &mut socket,
        &json!({"type": "signal", "name": "confirm", "payload": {"ok": true}, "request": "r2"}),
    )
    .await;
    let sent = next(&mut socket).await.unwrap();
    assert_eq!(sent["type"], "signal_sent", "{sent}");
    assert_eq!(sent["request"], "r2");
    assert!(sent["id"].as_i64().is_some(), "{sent}");
    drop(socket);
    db.runner("Pay").run("order-1").await.unwrap();

    // Reconnecting after the last cursor seen: exactly what came since, nothing twice.
    let mut again = open(
        &server,
        &format!("/v1/runs/order-1/socket?after={last}&until_finished=true"),
        None,
    )
    .await;
    let mut after = Vec::new();
    while let Some(m) = next(&mut again).await {
        after.push(m["event"].clone());
    }
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|e| e["cursor"].as_u64().unwrap() > last),
        "{after:?}"
    );
    assert_eq!(
        after.last().unwrap()["type"],
        "run_finished",
        "until_finished closes after the run's end: {after:?}"
    );
    let (_, all) = get(&server.url("/v1/runs/order-1/events?limit=1000")).await;
    let stored: Vec<u64> = all["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["cursor"].as_u64().unwrap())
        .collect();
    let seen: Vec<u64> = cursors
        .iter()
        .copied()
        .chain(after.iter().map(|e| e["cursor"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        seen, stored,
        "the two sockets together saw every event once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_need_the_token_and_a_wrong_one_is_refused_at_the_upgrade() {
    let db = Db::new().await;
    db.drive("order-2", "Pay").await;
    let server = Server::serve(&db.store, ApiConfig::default().with_token(TOKEN)).await;

    // Reading needs no token on loopback; signalling does.
    let mut reader = open(&server, "/v1/runs/order-2/socket", None).await;
    events_until_waiting(&mut reader).await;
    send(
        &mut reader,
        &json!({"type": "signal", "name": "confirm", "payload": {"ok": true}}),
    )
    .await;
    let refused = next(&mut reader).await.unwrap();
    assert_eq!(refused["error"]["code"], "unauthorized", "{refused}");
    assert!(
        db.store
            .pending_signals("order-2")
            .await
            .unwrap()
            .is_empty()
    );

    // A browser cannot set the header: the token rides in a subprotocol.
    let url = server
        .url("/v1/runs/order-2/socket")
        .replacen("http://", "ws://", 1);
    let mut request = url.clone().into_client_request().unwrap();
    request.headers_mut().insert(
        "sec-websocket-protocol",
        format!("durable-agents, bearer.{TOKEN}").parse().unwrap(),
    );
    let (mut browser, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(
        response.headers()["sec-websocket-protocol"],
        "durable-agents",
        "the server speaks its protocol, and never echoes the token"
    );
    events_until_waiting(&mut browser).await;
    send(
        &mut browser,
        &json!({"type": "signal", "name": "confirm", "payload": {"ok": true}}),
    )
    .await;
    let sent = next(&mut browser).await.unwrap();
    assert_eq!(sent["type"], "signal_sent", "{sent}");
    assert_eq!(db.store.pending_signals("order-2").await.unwrap().len(), 1);

    // A wrong token is refused before the upgrade.
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert(
        "authorization",
        "Bearer not-the-token-at-all".parse().unwrap(),
    );
    let refused = tokio_tungstenite::connect_async(request).await.unwrap_err();
    assert!(refused.to_string().contains("403"), "{refused}");
    // A plain GET is told where events over HTTP are.
    let (status, body) = get(&server.url("/v1/runs/order-2/socket")).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("events/stream"),
        "{body}"
    );
}
