//! What a trigger costs (issue 41): messages per second turned into runs by a trigger,
//! against the same client consuming and acknowledging the same messages without creating
//! runs, for NATS JetStream and MQTT (QoS 1), measured in the same process run and printed
//! as a ratio.
//!
//! ```sh
//! cargo bench -p durable-agents-triggers --bench brokers          # SQLite, 2,000 messages
//! DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres' \
//!     cargo bench -p durable-agents-triggers --bench brokers      # and PostgreSQL
//! TRIGGERS_BENCH_FULL=1 ...          # 20,000 messages per measurement
//! TRIGGERS_BENCH_MESSAGES=5000 ...   # another size
//! ```
//!
//! Each measurement gets a broker prefilled with the same number of messages, stored
//! before it starts: a JetStream stream read through a durable pull consumer, or an MQTT
//! persistent session (subscribed, then away while the messages were published, so
//! mosquitto queued them). **Plain**: the trigger's own broker client (`NatsBroker`,
//! `MqttBroker`) pulls 16 at a time and acknowledges each message, as the trigger does,
//! and nothing else. **Trigger**: a `Consumer` over the same kind of client decides on
//! each message (a look-up of its run id, then the run's creation, committed) before
//! acknowledging it. The two run back to back for each broker and store; the ratio
//! trigger / plain is the figure to read, the absolute rates are the machine's. **Store
//! alone**: the same look-up and creation of as many runs, one after the other, with no
//! broker, in a fresh store of the same kind: trigger / store alone says what the broker and the consume loop add to the
//! store's own cost of creating a run.
//!
//! Needs `nats-server` and `mosquitto` (Debian puts both in `/usr/sbin`); a missing one
//! is skipped with a message.

// Figures are counts and durations turned into rates: `as f64` loses nothing shown.
#![allow(clippy::cast_precision_loss)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_triggers::mqtt::MqttBroker;
use agent_triggers::nats::{NatsBroker, NatsConfig};
use agent_triggers::{Broker, Consumer, Trigger};
use async_nats::jetstream::{self, consumer::pull, stream};
use durable_agents::prelude::*;
use durable_agents::store::HistoryStore;
use tempfile::TempDir;

/// An agent started once per order message.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
enum Order {
    #[agent(initial, to(Done))]
    Received { order_id: String },
    #[agent(terminal)]
    Done { order_id: String },
}

struct Behaviour;

impl OrderHandlers for Behaviour {
    async fn received(
        &self,
        ctx: Ctx<'_, order::Received>,
        order::Received { order_id }: order::Received,
    ) -> StepResult<order::Received> {
        Ok(ctx.to(order::Done { order_id }))
    }
}

fn body(i: usize) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "Received": { "order_id": format!("o{i}") } }))
        .expect("a body")
}

/// A broker process, stopped on drop.
struct Server {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find(program: &str) -> Option<PathBuf> {
    std::iter::once(PathBuf::from(program))
        .chain(["/usr/sbin", "/usr/local/sbin"].map(|d| Path::new(d).join(program)))
        .find(|p| {
            Command::new(p)
                .arg("--help")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok()
        })
}

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

impl Server {
    fn start(program: &str, args: impl FnOnce(u16, &Path) -> Vec<String>) -> Option<Self> {
        let Some(path) = find(program) else {
            eprintln!("skipped: {program} is not installed (apt-get install {program})");
            return None;
        };
        let dir = TempDir::new().expect("a temporary folder");
        let port = free_port();
        let child = Command::new(path)
            .args(args(port, dir.path()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the server starts");
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let start = Instant::now();
        while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{program} does not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(Self {
            child,
            port,
            _dir: dir,
        })
    }

    fn nats() -> Option<Self> {
        Self::start("nats-server", |port, dir| {
            vec![
                "-js".into(),
                "-a".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
                "-sd".into(),
                dir.join("js").display().to_string(),
            ]
        })
    }

    fn mosquitto() -> Option<Self> {
        Self::start("mosquitto", |port, dir| {
            let config = dir.join("mosquitto.conf");
            let user = if is_root() { "user root\n" } else { "" };
            // No bound on what a session queues while its client is away (1,000 by
            // default): the prefill is queued whole.
            std::fs::write(
                &config,
                format!(
                    "listener {port} 127.0.0.1\nallow_anonymous true\n\
                     max_queued_messages 0\n{user}"
                ),
            )
            .expect("mosquitto.conf");
            vec!["-c".into(), config.display().to_string()]
        })
    }
}

/// A store to create runs in, removed after.
enum Place {
    Sqlite(Arc<SqliteStore>, TempDir),
    Pg(Arc<durable_agents::postgres::PgStore>),
}

impl Place {
    async fn open(pg: Option<&str>, tag: &str) -> Self {
        if let Some(url) = pg {
            let schema = format!("bench_brokers_{}_{tag}", std::process::id());
            let store = durable_agents::postgres::PgStore::connect(url, &schema)
                .await
                .expect("PostgreSQL");
            store.migrate().await.expect("migrate");
            return Self::Pg(Arc::new(store));
        }
        let dir = TempDir::new().expect("a temporary folder");
        let store = SqliteStore::open(&dir.path().join("runs.db"))
            .await
            .expect("SQLite");
        Self::Sqlite(Arc::new(store), dir)
    }

    fn label(&self) -> &'static str {
        match self {
            Self::Sqlite(..) => "SQLite",
            Self::Pg(_) => "PostgreSQL",
        }
    }

    fn store(&self) -> Arc<dyn Store> {
        match self {
            Self::Sqlite(s, _) => s.clone(),
            Self::Pg(s) => s.clone(),
        }
    }

    async fn remove(self) {
        match self {
            Self::Sqlite(s, _dir) => s.close().await,
            Self::Pg(s) => s.drop_schema().await.expect("drop schema"),
        }
    }
}

fn runner(store: &Arc<dyn Store>) -> Runner<Order, Behaviour> {
    Runner::<Order, _>::builder(Arc::clone(store), Behaviour, ToolBox::new())
        .build()
        .expect("the runner")
}

fn trigger(name: &str, store: &Arc<dyn Store>) -> Trigger {
    let runner = runner(store);
    Trigger::new(
        name,
        Arc::new(runner),
        Arc::clone(store) as Arc<dyn HistoryStore>,
    )
    .expect("a trigger")
}

/// Create `n` runs one after the other as a trigger does (a look-up of the id, then the
/// start), with no broker: runs a second, the store's share of the trigger's cost.
async fn store_only(store: &Arc<dyn Store>, tag: &str, n: usize) -> f64 {
    use agent_core::runner::JsonStarter;
    let runner = runner(store);
    let start = Instant::now();
    for i in 0..n {
        let id = format!("direct-{tag}-{i}");
        assert!(store.load_run(&id).await.expect("look-up").is_none());
        let state = serde_json::json!({ "Received": { "order_id": format!("o{i}") } });
        runner
            .start_json(id, state, durable_agents::store::Labels::new())
            .await
            .expect("start");
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// [`store_only`] on a fresh store of the same kind, so that it starts as empty as the
/// trigger's did.
async fn store_alone(pg: Option<&str>, tag: &str, n: usize) -> f64 {
    let fresh = Place::open(pg, &format!("{tag}d")).await;
    let rate = store_only(&fresh.store(), tag, n).await;
    fresh.remove().await;
    rate
}

/// Receive and acknowledge `n` messages through `broker`, creating nothing: messages a second.
async fn plain<B: Broker>(mut broker: B, n: usize) -> f64 {
    let start = Instant::now();
    let mut acked = 0;
    while acked < n {
        let Ok(batch) = broker.receive(16).await else {
            continue;
        };
        for delivery in &batch {
            broker.ack(delivery).await.expect("ack");
            acked += 1;
        }
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Let a trigger consume `broker` until it started `n` runs: messages a second.
async fn triggered<B>(trigger: Trigger, broker: B, n: usize) -> f64
where
    B: Broker + 'static,
    B::Delivery: Sync,
{
    let consumer = Consumer::new(trigger);
    let monitor = consumer.monitor();
    let start = Instant::now();
    let task = tokio::spawn(async move { consumer.consume(broker).await });
    while monitor.stats().started() < n as u64 {
        assert!(!task.is_finished(), "the consumer stopped");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    task.abort();
    rate
}

/// NATS: a stream of `n` messages and two durable consumers on it, one per measurement.
async fn nats_pair(url: &str, place: &Place, tag: &str, n: usize) -> (f64, f64) {
    let client = async_nats::connect(url).await.expect("NATS");
    let js = jetstream::new(client.clone());
    let name = format!("BENCH_{tag}");
    let subject = format!("bench.{tag}.orders");
    let dead = format!("bench.{tag}.dead");
    let stream = js
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone(), dead.clone()],
            ..stream::Config::default()
        })
        .await
        .expect("the stream");
    // Confirmations awaited 500 at a time: the client bounds the publishes awaiting one,
    // and a publish past the bound waits for a confirmation to be read.
    let mut acks = Vec::with_capacity(500);
    for i in 0..n {
        acks.push(
            js.publish(subject.clone(), body(i).into())
                .await
                .expect("publish"),
        );
        if acks.len() == 500 || i + 1 == n {
            for ack in acks.drain(..) {
                ack.await.expect("stored");
            }
        }
    }
    let broker = |durable: &str| {
        let mut config = NatsConfig::new(&name, durable, &dead);
        config.filter_subject = Some(subject.clone());
        NatsBroker::new(client.clone(), config)
    };
    for durable in ["plain", "trigger"] {
        stream
            .create_consumer(pull::Config {
                durable_name: Some(durable.to_owned()),
                filter_subject: subject.clone(),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(30),
                ..pull::Config::default()
            })
            .await
            .expect("a durable consumer");
    }
    let plain_rate = plain(broker("plain"), n).await;
    let trigger_rate = triggered(
        trigger(&format!("nats-{tag}"), &place.store()),
        broker("trigger"),
        n,
    )
    .await;
    js.delete_stream(&name).await.expect("delete the stream");
    (plain_rate, trigger_rate)
}

/// MQTT: two persistent sessions subscribed to a topic, then `n` messages published to it
/// while both are away; one session per measurement.
async fn mqtt_pair(port: u16, place: &Place, tag: &str, n: usize) -> (f64, f64) {
    let topic = format!("bench/{tag}/orders");
    let dead = format!("bench/{tag}/dead");
    let options = |who: &str| {
        let mut o = rumqttc::MqttOptions::new(format!("bench-{tag}-{who}"), "127.0.0.1", port);
        o.set_keep_alive(Duration::from_secs(5));
        o
    };
    let connect = |who: &str| {
        MqttBroker::connect(
            options(who),
            topic.clone(),
            dead.clone(),
            Duration::from_millis(500),
        )
    };
    for who in ["plain", "trigger"] {
        let mut session = connect(who);
        while session.receive(1).await.is_err() {}
    }
    let (client, mut event_loop) = rumqttc::AsyncClient::new(options("publisher"), 1_024);
    let publishing = tokio::spawn(async move {
        let mut acked = 0;
        while acked < n {
            if let Ok(rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_))) =
                event_loop.poll().await
            {
                acked += 1;
            }
        }
    });
    for i in 0..n {
        client
            .publish(topic.clone(), rumqttc::QoS::AtLeastOnce, false, body(i))
            .await
            .expect("publish");
    }
    publishing.await.expect("every message acknowledged");
    let plain_rate = plain(connect("plain"), n).await;
    let trigger_rate = triggered(
        trigger(&format!("mqtt-{tag}"), &place.store()),
        connect("trigger"),
        n,
    )
    .await;
    (plain_rate, trigger_rate)
}

#[tokio::main]
async fn main() {
    let n: usize = match std::env::var("TRIGGERS_BENCH_MESSAGES") {
        Ok(v) => v
            .replace('_', "")
            .parse()
            .expect("TRIGGERS_BENCH_MESSAGES: a number"),
        Err(_) if std::env::var("TRIGGERS_BENCH_FULL").is_ok_and(|v| v == "1") => 20_000,
        Err(_) => 2_000,
    };
    let pg = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty());
    if pg.is_none() {
        eprintln!("DATABASE_URL is not set: SQLite only");
    }
    let nats = Server::nats();
    let mosquitto = Server::mosquitto();
    println!(
        "brokers: {n} messages per measurement; plain = the trigger's client receiving and \
         acknowledging, trigger = the same deciding (one run created per message) first"
    );
    println!(
        "\n| broker | store | plain msg/s | trigger runs/s | trigger / plain | store alone \
         runs/s | trigger / store alone |"
    );
    println!("|---|---|---|---|---|---|---|");
    let places = [None].into_iter().chain(pg.as_deref().map(Some));
    for (k, url) in places.enumerate() {
        if let Some(server) = &nats {
            let place = Place::open(url, &format!("n{k}")).await;
            let nats_url = format!("nats://127.0.0.1:{}", server.port);
            let (p, t) = nats_pair(&nats_url, &place, &format!("n{k}"), n).await;
            let d = store_alone(url, &format!("n{k}"), n).await;
            println!(
                "| NATS JetStream | {} | {p:.0} | {t:.0} | {:.3} | {d:.0} | {:.2} |",
                place.label(),
                t / p,
                t / d
            );
            place.remove().await;
        }
        if let Some(server) = &mosquitto {
            let place = Place::open(url, &format!("m{k}")).await;
            let (p, t) = mqtt_pair(server.port, &place, &format!("m{k}"), n).await;
            let d = store_alone(url, &format!("m{k}"), n).await;
            println!(
                "| MQTT QoS 1 | {} | {p:.0} | {t:.0} | {:.3} | {d:.0} | {:.2} |",
                place.label(),
                t / p,
                t / d
            );
            place.remove().await;
        }
    }
}
