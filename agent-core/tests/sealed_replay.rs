//! Stored equals executed: secret parts of tool inputs, tool outputs, the model's tool
//! calls and typed transitions are stored *sealed*, and a run resumed after a crash at any
//! fault point executes exactly what was first executed, with no plaintext secret in any
//! stored row. A value sealed with a key the runner lacks holds the run with a clear code;
//! a secret that must be stored without any key stops the step before anything runs; an
//! answer carrying a configured secret, encoded or not, is refused and runs nothing.

// The tools lock a test's log, and a test that panics there has failed anyway.
#![allow(clippy::missing_panics_doc)]

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use durable_agents::router::{RouteRequest, RouterReply, ScriptedRouter};
use durable_agents::runner::{CrashAt, FaultPoint, Runner, RunnerConfig, RunnerError};
use durable_agents::runner::{FaultHook, NoFaults};
use durable_agents::secrets::{SealKeys, Secret};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{EntryKind, RunStatus, Store};
use durable_agents::tool::ToolsFor;
use durable_agents::{Agent, Ctx, Shared, StepResult, ToolResult, tool_fn};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Every secret of the scenario; none may be stored in plaintext.
const HANDLER_TOKEN: &str = "tok-handler-secret-1f2e";
const HANDLER_PIN: &str = "pin-4242-marked-9c";
const MODEL_KEY: &str = "model-api-key-77aa31";
const MODEL_PASSWORD: &str = "pw-model-chosen-5d1b";
const MODEL_NOTE: &str = "note-marked-secret-0e9";
const OUTPUT_TOKEN: &str = "out-session-token-3b7c";
const CONFIGURED: &str = "sk-configured-canary-8f00d";

/// What the tools saw, in order: (tool, input).
#[derive(Debug, Default)]
pub struct Log(Mutex<Vec<(String, Value)>>);

impl Log {
    fn calls(&self, tool: &str) -> Vec<Value> {
        let calls = self.0.lock().unwrap();
        calls
            .iter()
            .filter(|(t, _)| t == tool)
            .map(|(_, i)| i.clone())
            .collect()
    }
}

/// Log in (a write), with a token (sensitive by name) and a pin (marked secret by type).
#[tool_fn(write)]
pub async fn login(
    Shared(log): Shared<Arc<Log>>,
    /// Who.
    user: String,
    /// The session token to use.
    token: String,
    /// The pin.
    pin: Secret<String>,
) -> ToolResult<String> {
    log.0.lock().unwrap().push((
        "Login".into(),
        json!({"user": user, "token": token, "pin": pin.expose()}),
    ));
    Ok(format!("session of {user}"))
}

/// Look something up (a read) with an API key; the answer carries a token.
#[tool_fn(read)]
pub async fn lookup(
    Shared(log): Shared<Arc<Log>>,
    /// The key.
    api_key: String,
    /// What.
    query: String,
) -> ToolResult<Value> {
    log.0
        .lock()
        .unwrap()
        .push(("Lookup".into(), json!({"api_key": api_key, "query": query})));
    Ok(json!({"hits": 3, "token": OUTPUT_TOKEN}))
}

/// What the model gives to pay: a password (sensitive by name), a note (marked).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
pub struct PayArgs {
    pub amount: u32,
    pub password: String,
    pub note: Secret<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(write(Login), read(Lookup)))]
pub enum Vault {
    #[agent(initial, tools(Login), to(Decide), on_error = Failed)]
    Start { user: String },
    #[agent(route = llm, tools(Lookup), to(Pay(args = PayArgs), Closed), on_error = Failed)]
    Decide,
    #[agent(to(Closed))]
    Pay { amount: u32 },
    #[agent(terminal)]
    Closed,
    #[agent(terminal)]
    Failed,
}

#[derive(Clone, Debug, Default)]
pub struct Handlers {
    seen: Arc<Mutex<Vec<PayArgs>>>,
}

impl VaultHandlers for Handlers {
    async fn start(
        &self,
        ctx: Ctx<'_, vault::Start>,
        vault::Start { user }: vault::Start,
    ) -> StepResult<vault::Start> {
        ctx.call::<Login>(LoginInput {
            user,
            token: HANDLER_TOKEN.into(),
            pin: Secret(HANDLER_PIN.into()),
        })
        .await?;
        Ok(ctx.to(vault::Decide))
    }

    async fn decide(
        &self,
        ctx: Ctx<'_, vault::Decide>,
        route: vault::DecideRoute,
        _: vault::Decide,
    ) -> StepResult<vault::Decide> {
        Ok(match route {
            vault::DecideRoute::Pay(args) => {
                self.seen.lock().unwrap().push(args.clone());
                ctx.to(vault::Pay {
                    amount: args.amount,
                })
            }
            vault::DecideRoute::Closed => ctx.to(vault::Closed),
        })
    }

    async fn pay(&self, ctx: Ctx<'_, vault::Pay>, _: vault::Pay) -> StepResult<vault::Pay> {
        Ok(ctx.to(vault::Closed))
    }
}

fn pay_arguments() -> String {
    json!({"amount": 5, "password": MODEL_PASSWORD, "note": MODEL_NOTE}).to_string()
}

/// The model: looks up first, then pays. Counts its asks.
fn model(asks: Arc<Mutex<u32>>) -> Arc<ScriptedRouter> {
    Arc::new(ScriptedRouter::from_fn(move |req: &RouteRequest| {
        *asks.lock().unwrap() += 1;
        if req.tool_results.is_empty() {
            ScriptedRouter::choose(
                "Lookup",
                &json!({"api_key": MODEL_KEY, "query": "balance"}).to_string(),
            )
        } else {
            ScriptedRouter::choose("Pay", &pay_arguments())
        }
    }))
}

fn runner(
    store: &Arc<dyn Store>,
    log: &Arc<Log>,
    handlers: &Handlers,
    router: Arc<ScriptedRouter>,
    keys: SealKeys,
) -> Runner<Vault, Handlers> {
    runner_with(store, log, handlers, router, keys, Arc::new(NoFaults))
}

fn runner_with(
    store: &Arc<dyn Store>,
    log: &Arc<Log>,
    handlers: &Handlers,
    router: Arc<ScriptedRouter>,
    keys: SealKeys,
    faults: Arc<dyn FaultHook>,
) -> Runner<Vault, Handlers> {
    Runner::<Vault, _>::builder(
        Arc::clone(store),
        handlers.clone(),
        VaultTools::from_shared(log).into_tool_box(),
    )
    .router(router)
    .config(RunnerConfig {
        secrets: vec![CONFIGURED.into()],
        seal_keys: keys,
        ..RunnerConfig::default()
    })
    .faults(faults)
    .build()
    .unwrap()
}

async fn release(store: &Arc<dyn Store>, run: &str) {
    // A crashed process keeps its lease until it expires; the tests let it go at once.
    let record = store.load_run(run).await.unwrap().unwrap();
    if let (Some(worker), Some(expires_at)) = (record.lease_owner.clone(), record.lease_expires_at)
    {
        let lease = durable_agents::backend::Lease {
            run_id: run.into(),
            worker,
            epoch: record.epoch,
            expires_at,
        };
        store.release_lease(&lease).await.unwrap();
    }
}

/// Every stored row of the run, as text: the run record, its history and its journal.
async fn stored_text(store: &Arc<dyn Store>, run: &str) -> String {
    let record = store.load_run(run).await.unwrap().unwrap();
    let history = store.history(run).await.unwrap();
    let journal = store.journal(run, None).await.unwrap();
    format!(
        "{}\n{}\n{}",
        serde_json::to_string(&record).unwrap(),
        serde_json::to_string(&history).unwrap(),
        serde_json::to_string(&journal).unwrap()
    )
}

fn assert_no_plaintext(text: &str, context: &str) {
    for secret in [
        HANDLER_TOKEN,
        HANDLER_PIN,
        MODEL_KEY,
        MODEL_PASSWORD,
        MODEL_NOTE,
        OUTPUT_TOKEN,
        CONFIGURED,
    ] {
        assert!(!text.contains(secret), "{context}: `{secret}` stored");
    }
}

fn expected_pay() -> PayArgs {
    PayArgs {
        amount: 5,
        password: MODEL_PASSWORD.into(),
        note: Secret(MODEL_NOTE.into()),
    }
}

#[tokio::test]
async fn a_crash_at_every_fault_point_replays_exactly_what_ran_and_stores_no_plaintext() {
    let keys = SealKeys::generate("k1");
    let mut crashed_at = Vec::new();
    for point in FaultPoint::ALL {
        for nth in 0..3 {
            let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
            let log = Arc::new(Log::default());
            let handlers = Handlers::default();
            let asks = Arc::new(Mutex::new(0));
            let crash = Arc::new(CrashAt::new(point, nth));
            let first = runner_with(
                &store,
                &log,
                &handlers,
                model(Arc::clone(&asks)),
                keys.clone(),
                crash.clone(),
            );
            let run = format!("vault-{point}-{nth}");
            first
                .start(&run, Vault::Start { user: "ann".into() })
                .await
                .unwrap();
            let outcome = first.run(&run).await;
            if crash.fired() {
                assert!(
                    matches!(outcome, Err(RunnerError::Crashed(_))),
                    "{outcome:?}"
                );
                crashed_at.push(format!("{point}#{nth}"));
                release(&store, &run).await;
                let again = runner(
                    &store,
                    &log,
                    &handlers,
                    model(Arc::clone(&asks)),
                    keys.clone(),
                );
                again.run(&run).await.unwrap();
            }
            let context = format!("crash at {point} #{nth}");
            let done = store.load_run(&run).await.unwrap().unwrap();
            assert_eq!(done.status, RunStatus::Completed, "{context}: {done:?}");
            assert_eq!(done.state_name, "Closed", "{context}");

            // Every execution of a call got exactly the input of the first one.
            let logins = log.calls("Login");
            assert!(!logins.is_empty(), "{context}");
            assert!(
                logins.iter().all(|i| *i == logins[0]),
                "{context}: {logins:?}"
            );
            assert_eq!(
                logins[0],
                json!({"user": "ann", "token": HANDLER_TOKEN, "pin": HANDLER_PIN})
            );
            let lookups = log.calls("Lookup");
            assert!(!lookups.is_empty(), "{context}");
            assert!(
                lookups.iter().all(|i| *i == lookups[0]),
                "{context}: {lookups:?}"
            );
            assert_eq!(
                lookups[0],
                json!({"api_key": MODEL_KEY, "query": "balance"})
            );
            // The handler got the model's typed arguments, the same each time.
            let seen = handlers.seen.lock().unwrap().clone();
            assert!(
                seen.iter().all(|a| *a == expected_pay()),
                "{context}: {seen:?}"
            );
            assert!(!seen.is_empty(), "{context}");
            // A committed question is never asked again: two decisions, at most one ask
            // more for a decision whose answer a crash lost before it was journaled.
            let asked = *asks.lock().unwrap();
            assert!((2..=3).contains(&asked), "{context}: asked {asked} times");

            let stored = stored_text(&store, &run).await;
            assert_no_plaintext(&stored, &context);
            assert!(stored.contains("$sealed"), "{context}: nothing sealed");
        }
    }
    // The sweep reached the points this agent passes through.
    for point in [
        FaultPoint::RunClaimed,
        FaultPoint::LlmSent,
        FaultPoint::LlmAnswered,
        FaultPoint::ToolSent,
        FaultPoint::ToolAnswered,
        FaultPoint::CommitSent,
        FaultPoint::CommitApplied,
    ] {
        assert!(
            crashed_at.iter().any(|c| c.starts_with(&point.to_string())),
            "{point} never fired: {crashed_at:?}"
        );
    }
    println!("crashes injected and replayed: {}", crashed_at.len());
}

#[tokio::test]
async fn a_value_sealed_with_a_missing_key_holds_the_run_and_runs_nothing_again() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let log = Arc::new(Log::default());
    let handlers = Handlers::default();
    let asks = Arc::new(Mutex::new(0));
    // Crash after the model's `Pay` was journaled, before its step commits.
    let crash = Arc::new(CrashAt::new(FaultPoint::CommitSent, 1));
    let first = runner_with(
        &store,
        &log,
        &handlers,
        model(Arc::clone(&asks)),
        SealKeys::generate("old"),
        crash.clone(),
    );
    first
        .start("held", Vault::Start { user: "ann".into() })
        .await
        .unwrap();
    assert!(first.run("held").await.is_err());
    assert!(crash.fired());
    release(&store, "held").await;
    let executed = log.0.lock().unwrap().len();
    let asked = *asks.lock().unwrap();

    // Rotated without keeping the old key: the run is held, naming the key.
    let again = runner(
        &store,
        &log,
        &handlers,
        model(Arc::clone(&asks)),
        SealKeys::generate("new"),
    );
    let held = again.run("held").await.unwrap();
    assert_eq!(held.status, RunStatus::Quarantined, "{held:?}");
    let error = held.error.unwrap();
    assert_eq!(error.code, "seal.key_missing");
    assert!(error.message.contains("`old`"), "{}", error.message);
    assert_eq!(log.0.lock().unwrap().len(), executed, "a tool ran again");
    assert_eq!(*asks.lock().unwrap(), asked, "the model was asked again");
}

#[tokio::test]
async fn a_secret_that_must_be_stored_without_a_key_stops_the_step_before_it_runs() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let log = Arc::new(Log::default());
    let handlers = Handlers::default();
    let r = runner(
        &store,
        &log,
        &handlers,
        model(Arc::default()),
        SealKeys::new(),
    );
    r.start("nokey", Vault::Start { user: "ann".into() })
        .await
        .unwrap();
    let done = r.run("nokey").await.unwrap();
    assert_eq!(done.state_name, "Failed", "{done:?}");
    assert!(log.calls("Login").is_empty(), "the tool ran unsealable");
    let stored = stored_text(&store, "nokey").await;
    assert!(
        stored.contains("seal.no_key") || stored.contains("no sealing key"),
        "{stored}"
    );
    assert_no_plaintext(&stored, "no key");
}

#[tokio::test]
async fn an_answer_carrying_a_configured_secret_in_any_encoding_runs_nothing() {
    let b64 = base64::engine::general_purpose::STANDARD;
    let encodings = [
        CONFIGURED.to_owned(),
        b64.encode(format!("x{CONFIGURED}")),
        hex::encode(CONFIGURED),
        percent(CONFIGURED),
    ];
    for (i, form) in encodings.iter().enumerate() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let log = Arc::new(Log::default());
        let handlers = Handlers::default();
        // Every answer tries to send the secret out through the lookup's query, or as a
        // key of its input.
        let form = form.clone();
        let router = Arc::new(ScriptedRouter::from_fn(
            move |_: &RouteRequest| -> RouterReply {
                if i % 2 == 0 {
                    ScriptedRouter::choose(
                        "Lookup",
                        &json!({"api_key": "k", "query": form}).to_string(),
                    )
                } else {
                    ScriptedRouter::choose(
                        "Lookup",
                        &format!(r#"{{"api_key":"k","query":"q","{form}":1}}"#),
                    )
                }
            },
        ));
        let r = runner(&store, &log, &handlers, router, SealKeys::generate("k1"));
        r.start("exfil", Vault::Start { user: "ann".into() })
            .await
            .unwrap();
        let done = r.run("exfil").await.unwrap();
        assert_eq!(done.state_name, "Failed", "{i}: {done:?}");
        assert!(log.calls("Lookup").is_empty(), "{i}: the lookup ran");
        let journal = store.journal("exfil", None).await.unwrap();
        let decisions: Vec<_> = journal
            .iter()
            .filter(|e| e.kind == EntryKind::Decision)
            .collect();
        assert!(!decisions.is_empty());
        assert!(
            decisions
                .iter()
                .all(|e| e.error_code.as_deref() == Some("decision.exfiltration")),
            "{i}: {decisions:#?}"
        );
        let stored = stored_text(&store, "exfil").await;
        for form in &encodings {
            assert!(!stored.contains(form.as_str()), "{i}: `{form}` stored");
        }
    }
}

fn percent(s: &str) -> String {
    use std::fmt::Write as _;
    s.bytes().fold(String::new(), |mut out, b| {
        let _ = write!(out, "%{b:02x}");
        out
    })
}

/// Stream a text back as the model would, three characters a delta, and keep what it got.
#[tool_fn(read)]
pub async fn echo(
    Shared(log): Shared<Arc<Log>>,
    /// Entries, by name.
    entries: std::collections::BTreeMap<String, u32>,
    /// What to stream.
    text: String,
    cx: &durable_agents::ToolContext,
) -> ToolResult<u32> {
    log.0
        .lock()
        .unwrap()
        .push(("Echo".into(), json!({"entries": entries})));
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(3) {
        cx.tokens.token(&piece.iter().collect::<String>());
    }
    cx.tokens.finish();
    Ok(u32::try_from(entries.len()).unwrap_or(0))
}

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(read(Echo)))]
pub enum Streamer {
    #[agent(initial, tools(Echo), to(Done))]
    Go,
    #[agent(terminal)]
    Done,
}

impl StreamerHandlers for Handlers {
    async fn go(&self, ctx: Ctx<'_, streamer::Go>, _: streamer::Go) -> StepResult<streamer::Go> {
        ctx.call::<Echo>(EchoInput {
            entries: [(CONFIGURED.to_owned(), 1), ("plain".to_owned(), 2)].into(),
            text: format!(
                "{} the key is {CONFIGURED}, in hex {}.",
                "x".repeat(200),
                hex::encode(CONFIGURED)
            ),
        })
        .await?;
        Ok(ctx.to(streamer::Done))
    }
}

/// The live token bus and map keys: a secret split across deltas never reaches a
/// follower, and one used as a map key of a tool's input is stored sealed while the tool
/// gets it as it was written.
#[tokio::test]
async fn live_deltas_and_map_keys_never_show_a_secret() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let log = Arc::new(Log::default());
    let config = RunnerConfig {
        secrets: vec![CONFIGURED.into()],
        seal_keys: SealKeys::generate("k1"),
        ..RunnerConfig::default()
    };
    let mut follower = config.ephemeral.subscribe();
    let r = Runner::<Streamer, _>::builder(
        Arc::clone(&store),
        Handlers::default(),
        StreamerTools::from_shared(&log).into_tool_box(),
    )
    .config(config)
    .build()
    .unwrap();
    r.start("live", Streamer::Go).await.unwrap();
    r.run("live").await.unwrap();
    let mut live = String::new();
    while let Ok(event) = follower.try_recv() {
        let durable_agents::events::EphemeralKind::TokenDelta { text } = &event.kind else {
            continue;
        };
        live.push_str(text);
    }
    assert!(live.contains("the key is [redacted]"), "{live}");
    let chars: Vec<char> = CONFIGURED.chars().collect();
    for piece in chars.windows(8) {
        let piece: String = piece.iter().collect();
        assert!(!live.contains(&piece), "`{piece}` went live: {live}");
    }
    assert!(!live.contains(&hex::encode(CONFIGURED)[..16]), "{live}");
    // The tool got the key as written; the journal keeps it sealed.
    assert_eq!(
        log.calls("Echo"),
        [json!({"entries": {CONFIGURED: 1, "plain": 2}})]
    );
    assert_no_plaintext(&stored_text(&store, "live").await, "map key");
}

/// An approval: a password (sensitive by name) and a code its type marks secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Approval {
    pub ok: bool,
    pub password: String,
    pub code: Secret<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
pub enum Gate {
    #[agent(initial, wait = "approve", wait_payload = Approval, to(Open))]
    Waiting,
    #[agent(terminal)]
    Open,
}

#[derive(Clone, Debug, Default)]
pub struct Approver {
    seen: Arc<Mutex<Vec<Approval>>>,
}

impl GateHandlers for Approver {
    async fn waiting(
        &self,
        ctx: Ctx<'_, gate::Waiting>,
        wake: durable_agents::Wake,
        _: gate::Waiting,
    ) -> StepResult<gate::Waiting> {
        let approval: Approval = wake.payload().map_err(durable_agents::StepError::handler)?;
        self.seen.lock().unwrap().push(approval);
        Ok(ctx.to(gate::Open))
    }
}

fn gate(store: &Arc<dyn Store>, handlers: &Approver, keys: SealKeys) -> Runner<Gate, Approver> {
    without_tools(store, handlers, keys)
}

/// A runner of an agent without tools, sealing with `keys`.
fn without_tools<A, H>(store: &Arc<dyn Store>, handlers: &H, keys: SealKeys) -> Runner<A, H>
where
    A: durable_agents::agent::RoutedByCode + durable_agents::agent::Handle<H>,
    H: Clone + Send + Sync + 'static,
{
    Runner::<A, H>::builder(
        Arc::clone(store),
        handlers.clone(),
        durable_agents::ToolBox::new(),
    )
    .config(RunnerConfig {
        seal_keys: keys,
        ..RunnerConfig::default()
    })
    .build()
    .unwrap()
}

/// A signal's payload is stored with its secret parts sealed and reaches the handler as
/// it was sent; a worker without the key holds the run; a sender without any key is
/// refused before anything is stored.
#[tokio::test]
async fn signal_payloads_are_stored_sealed_and_opened_for_the_handler() {
    let sent = json!({"ok": true, "password": MODEL_PASSWORD, "code": MODEL_NOTE});
    let keys = SealKeys::generate("k1");
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handlers = Approver::default();
    let r = gate(&store, &handlers, keys.clone());
    r.start("gate", Gate::Waiting).await.unwrap();
    r.run("gate").await.unwrap();
    r.signal("gate", "approve", sent.clone()).await.unwrap();
    let pending = store.pending_signals("gate").await.unwrap();
    let stored = serde_json::to_string(&pending).unwrap();
    assert!(
        !stored.contains(MODEL_PASSWORD) && !stored.contains(MODEL_NOTE),
        "{stored}"
    );
    assert!(stored.contains("$sealed"), "{stored}");
    let done = r.run("gate").await.unwrap();
    assert_eq!(done.state_name, "Open");
    assert_eq!(
        *handlers.seen.lock().unwrap(),
        [Approval {
            ok: true,
            password: MODEL_PASSWORD.into(),
            code: Secret(MODEL_NOTE.into()),
        }]
    );

    // Sent with one key, consumed by a worker without it: held, nothing consumed.
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handlers = Approver::default();
    let sender = gate(&store, &handlers, SealKeys::generate("old"));
    sender.start("held", Gate::Waiting).await.unwrap();
    sender.run("held").await.unwrap();
    sender
        .signal("held", "approve", sent.clone())
        .await
        .unwrap();
    let held = gate(&store, &handlers, SealKeys::generate("new"))
        .run("held")
        .await
        .unwrap();
    assert_eq!(held.status, RunStatus::Quarantined, "{held:?}");
    assert_eq!(held.error.unwrap().code, "seal.key_missing");
    assert!(handlers.seen.lock().unwrap().is_empty());

    // No key at all: refused, nothing stored.
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let r = gate(&store, &Approver::default(), SealKeys::new());
    r.start("nokey", Gate::Waiting).await.unwrap();
    r.run("nokey").await.unwrap();
    let refused = r.signal("nokey", "approve", sent).await.unwrap_err();
    assert!(refused.to_string().contains("no sealing key"), "{refused}");
    assert!(store.pending_signals("nokey").await.unwrap().is_empty());
}

/// A session whose states carry a token (sensitive by name).
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
pub enum Session {
    #[agent(initial, to(Using))]
    Opening { user: String, token: String },
    #[agent(to(Closed))]
    Using {
        user: String,
        token: String,
        uses: u32,
    },
    #[agent(terminal)]
    Closed { uses: u32 },
}

#[derive(Clone, Debug, Default)]
pub struct Sessions {
    tokens: Arc<Mutex<Vec<String>>>,
}

impl SessionHandlers for Sessions {
    async fn opening(
        &self,
        ctx: Ctx<'_, session::Opening>,
        session::Opening { user, token }: session::Opening,
    ) -> StepResult<session::Opening> {
        self.tokens.lock().unwrap().push(token.clone());
        Ok(ctx.to(session::Using {
            user,
            token,
            uses: 1,
        }))
    }

    async fn using(
        &self,
        ctx: Ctx<'_, session::Using>,
        session::Using { token, uses, .. }: session::Using,
    ) -> StepResult<session::Using> {
        self.tokens.lock().unwrap().push(token);
        Ok(ctx.to(session::Closed { uses: uses + 1 }))
    }
}

fn sessions(
    store: &Arc<dyn Store>,
    handlers: &Sessions,
    keys: SealKeys,
) -> Runner<Session, Sessions> {
    without_tools(store, handlers, keys)
}

/// A state's secret fields are stored sealed, the same text while they do not change (no
/// churn in the history or its diffs), and reach each handler as they were.
#[tokio::test]
async fn state_fields_are_stored_sealed_and_stable() {
    let token = "tok-state-field-5a6b7c";
    let keys = SealKeys::generate("k1");
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handlers = Sessions::default();
    let r = sessions(&store, &handlers, keys.clone());
    let opening = Session::Opening {
        user: "ann".into(),
        token: token.into(),
    };
    r.start("s", opening.clone()).await.unwrap();
    let stored = store.load_run("s").await.unwrap().unwrap();
    assert!(durable_agents::secrets::sealed_text(&stored.state["Opening"]["token"]).is_some());
    // Crash after the first step is committed: the second step reads the sealed state.
    let crash = Arc::new(CrashAt::new(FaultPoint::CommitApplied, 0));
    let crashing = Runner::<Session, Sessions>::builder(
        Arc::clone(&store),
        handlers.clone(),
        durable_agents::ToolBox::new(),
    )
    .config(RunnerConfig {
        seal_keys: keys.clone(),
        ..RunnerConfig::default()
    })
    .faults(crash.clone())
    .build()
    .unwrap();
    assert!(crashing.run("s").await.is_err());
    assert!(crash.fired());
    release(&store, "s").await;
    let done = r.run("s").await.unwrap();
    assert_eq!(done.state_name, "Closed");
    assert_eq!(*handlers.tokens.lock().unwrap(), [token, token]);
    let text = stored_text(&store, "s").await;
    assert!(!text.contains(token), "{text}");
    // Sealed the same way in both states that hold it.
    let using = store.state_at("s", 1).await.unwrap().unwrap();
    let sealed_using =
        durable_agents::secrets::sealed_text(&using.state["Using"]["token"]).unwrap();
    let sealed_opening =
        durable_agents::secrets::sealed_text(&stored.state["Opening"]["token"]).unwrap();
    assert_eq!(sealed_using, sealed_opening);
    assert_eq!(keys.open(sealed_using).unwrap(), json!(token));

    // A worker without the key holds the run; a runner without any key starts nothing.
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    sessions(&store, &handlers, keys)
        .start("h", opening.clone())
        .await
        .unwrap();
    let held = sessions(&store, &handlers, SealKeys::generate("other"))
        .run("h")
        .await
        .unwrap();
    assert_eq!(held.status, RunStatus::Quarantined, "{held:?}");
    assert_eq!(held.error.unwrap().code, "seal.key_missing");
    let refused = sessions(&store, &handlers, SealKeys::new())
        .start("n", opening)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("no sealing key"), "{refused}");
    assert!(store.load_run("n").await.unwrap().is_none());
}
