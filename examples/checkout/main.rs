//! The checkout agent, end to end.
//!
//! ```sh
//! cargo run --example checkout                          # two checkouts on the embedded SQLite store
//! cargo run --example checkout -- --crash-after-steps 4 # kill the process mid-run...
//! cargo run --example checkout                          # ...and resume from the last committed step
//! ```
//!
//! Alice's checkout succeeds although the payment gateway times out once; Bob's card is
//! declined and the stock reserved for him is released by compensation. The example prints
//! proof of each guarantee, read back from the store and the shop's effect log, then each
//! run's timeline.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use durable_agents::runner::{Runner, RunnerConfig};
use durable_agents::store::{CallStatus, EntryKind, RunFilter, RunStatus, Store};
use durable_agents::{Agent, router::Router};
use examples::checkout::{self, Checkout, Handlers};
use examples::shop::{Product, Shop};

use examples::crash::CrashAfter;
use examples::outln;
use examples::report::{self, check};
use examples::stores;

/// The checkout agent: typed cart, LLM-routed review, idempotent payment, saga.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// SQLite file of runs (the embedded default store). Ignored when `DATABASE_URL` is set.
    #[arg(long, env = "AGENT_DB", default_value = stores::DEFAULT_DB)]
    db: PathBuf,
    /// PostgreSQL instead of SQLite.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Simulate a crash: abort the process after this many committed steps.
    #[arg(long)]
    crash_after_steps: Option<u32>,
    /// Start new runs even if unfinished ones exist (instead of resuming them).
    #[arg(long)]
    fresh: bool,
    /// Use the scripted router even if an LLM is configured in the environment.
    #[arg(long)]
    offline: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let _telemetry = examples::out::init_logging("error");
    match run(Args::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("some proof failed: see ✘ above");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{}", report::error_report(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<bool, Box<dyn std::error::Error>> {
    let opened = stores::open(args.database_url.as_deref(), &args.db).await?;
    let result = run_on(&opened, &args).await;
    // Also after an error: the SQLite file then holds every committed step by itself.
    opened.close().await;
    result
}

async fn run_on(opened: &stores::Opened, args: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    outln!("checkout example · store: {}", opened.description);
    let shop = Arc::new(Shop::open(opened.shop_path.clone())?);
    let (router, router_note): (Arc<dyn Router>, String) = match durable_agents::llm::router_from_env()? {
        Some(r) if !args.offline => (r, "a real LLM configured in the environment".to_owned()),
        _ => (
            Arc::new(checkout::scripted_reviewer()),
            "scripted reviewer — an offline stand-in, not an LLM (set AGENT_LLM_PROVIDER=openai|ollama|anthropic \
             and its model to use one: see docs/llm-providers.md)"
                .to_owned(),
        ),
    };
    outln!("router: {router_note}");
    let store = Arc::clone(&opened.store);
    // A stable worker name: a restarted example reclaims its own lease at once instead of
    // waiting for it to expire (each claim still bumps the fencing epoch).
    let config = RunnerConfig {
        worker_id: "checkout-example".to_owned(),
        ..RunnerConfig::default()
    };
    let mut builder = Runner::builder(
        Arc::clone(&store),
        Handlers,
        checkout::checkout_tools(&shop),
    )
    .router(router)
    .config(config);
    if let Some(n) = args.crash_after_steps {
        builder = builder.faults(Arc::new(CrashAfter::new(n, "checkout")));
    }
    let runner = builder.build()?;

    let unfinished = store
        .list_runs(&RunFilter {
            agent: Some(Checkout::NAME.to_owned()),
            statuses: vec![
                RunStatus::Running,
                RunStatus::Waiting,
                RunStatus::Compensating,
            ],
            ..RunFilter::default()
        })
        .await?;
    let run_ids: Vec<String> = if !unfinished.is_empty() && !args.fresh {
        outln!(
            "\nfound {} unfinished run(s): resuming each from its last committed step (pass --fresh to start new ones)",
            unfinished.len()
        );
        let mut ids: Vec<String> = unfinished.into_iter().map(|r| r.id).collect();
        ids.sort();
        ids
    } else {
        shop.configure(|s| {
            s.gateway_timeouts = 1;
            s.declined_cards.insert("4000-declined".to_owned());
        })?;
        let mut ids = Vec::new();
        for customer in checkout::demo_customers() {
            let id = format!(
                "{}-{}",
                durable_agents::store::new_run_id("checkout"),
                customer.user
            );
            runner.start(&id, checkout::start(customer)).await?;
            ids.push(id);
        }
        outln!("\nstarted {} and {}", ids[0], ids[1]);
        ids
    };

    let mut all_ok = true;
    for id in &run_ids {
        let record = runner.run(id).await?;
        outln!(
            "\n── {id}: {} in `{}` after {} versions",
            record.status,
            record.state_name,
            record.version
        );
        all_ok &= prove(store.as_ref(), &shop, id).await?;
    }
    for id in &run_ids {
        outln!("\n{}", report::timeline(store.as_ref(), id).await?);
    }
    outln!("where to look next:");
    outln!(
        "  cargo run --bin agentctl -- runs                      # every run in {}",
        opened.short
    );
    outln!(
        "  cargo run --bin agentctl -- show {}   # the timeline, with tool calls and decisions",
        run_ids[0]
    );
    outln!(
        "  cargo run --bin agentctl -- graph Checkout --format mermaid --run {}   # the path taken, as Mermaid",
        run_ids[0]
    );
    outln!(
        "  cargo run --bin agentctl -- graph Checkout --run {} | dot -Tsvg > checkout.svg   # SVG: needs Graphviz (apt install graphviz, brew install graphviz)",
        run_ids[0]
    );
    outln!(
        "  cargo run --example checkout -- --fresh --crash-after-steps 3   # crash mid-run, then run again to resume"
    );
    Ok(all_ok)
}

/// Print the proof lines of one run, read back from the store and the shop's effect log.
async fn prove(
    store: &dyn Store,
    shop: &Shop,
    run_id: &str,
) -> Result<bool, Box<dyn std::error::Error>> {
    let journal = store.journal(run_id, None).await?;
    let history = store.history(run_id).await?;
    let shop_state = shop.snapshot();
    let mut ok = true;

    // 1. The cart is typed state; the recommender read it.
    if let Some(rec) = journal
        .iter()
        .find(|e| e.name == "Recommend" && e.status == CallStatus::Succeeded)
    {
        let removed: Vec<String> =
            serde_json::from_value(rec.input["exclude"].clone()).unwrap_or_default();
        let cart: Vec<String> =
            serde_json::from_value(rec.input["cart"].clone()).unwrap_or_default();
        let recs: Vec<Product> = rec
            .output
            .clone()
            .and_then(|o| serde_json::from_value(o).ok())
            .unwrap_or_default();
        let rec_skus: Vec<&str> = recs.iter().map(|p| p.sku.as_str()).collect();
        let clean = removed.iter().all(|r| !rec_skus.contains(&r.as_str()));
        ok &= check(
            clean,
            &format!(
                "typed cart: removed {removed:?}; the recommender read the cart {cart:?} and proposed {rec_skus:?} — \
                 the removed item was {}recommended",
                if clean { "not " } else { "" }
            ),
        );
    }

    // 2. The payment: one effect per key; retries reuse the key; the LLM is not asked again.
    let decisions = journal
        .iter()
        .filter(|e| e.kind == EntryKind::Decision)
        .count();
    if let Some(charge) = journal.iter().find(|e| e.name == "ChargePayment") {
        let key = charge.idempotency_key.clone().unwrap_or_default();
        let applied = shop_state.effects.iter().filter(|e| e.key == key).count();
        let requests = shop_state.requests.get(&key).copied().unwrap_or(0);
        match charge.status {
            CallStatus::Succeeded => {
                ok &= check(
                    applied == 1,
                    &format!(
                        "payment: {} attempt(s) with the same idempotency key `{key}` ({requests} request(s) reached \
                         the gateway); charged exactly {applied} time(s)",
                        charge.attempts
                    ),
                );
                ok &= check(
                    decisions == 1,
                    &format!(
                        "the LLM was asked {decisions} time(s) in this run: the payment retry did not ask it again"
                    ),
                );
            }
            _ => {
                ok &= check(
                    applied == 0,
                    &format!(
                        "payment failed ({}: {}); nothing was charged",
                        charge.error_code.as_deref().unwrap_or("?"),
                        charge.error_message.as_deref().unwrap_or("")
                    ),
                );
            }
        }
    }

    // 3. The saga: reservations released by compensation, last first.
    let reserved: Vec<String> = journal
        .iter()
        .filter(|e| e.name == "ReserveInventory" && e.status == CallStatus::Succeeded)
        .filter_map(|e| e.output.as_ref()?.as_str().map(str::to_owned))
        .collect();
    let compensations: Vec<String> = journal
        .iter()
        .filter(|e| e.kind == EntryKind::Compensation && e.status == CallStatus::Succeeded)
        .filter_map(|e| e.input.get("reservation_id")?.as_str().map(str::to_owned))
        .collect();
    if !compensations.is_empty() {
        let mut last_first = reserved.clone();
        last_first.reverse();
        let still_held: Vec<&String> = reserved
            .iter()
            .filter(|r| shop_state.reservations.contains_key(*r))
            .collect();
        ok &= check(
            compensations == last_first && still_held.is_empty(),
            &format!(
                "compensation released the reservations {compensations:?} (last first); none still held"
            ),
        );
    }

    // 4. Versions form one chain.
    let chain = history
        .iter()
        .enumerate()
        .all(|(i, t)| t.version == i as u64);
    ok &= check(
        chain,
        &format!(
            "versions 0..={} form one chain, every transition a declared edge",
            history.len().saturating_sub(1)
        ),
    );
    let graph = Checkout::graph();
    let legal = history.iter().all(|t| {
        t.from_state == t.to_state || t.version == 0 || graph.has_edge(&t.from_state, &t.to_state)
    });
    ok &= legal;
    Ok(ok)
}
