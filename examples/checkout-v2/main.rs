//! Version 2 of the checkout, deployed while version 1 has runs in flight.
//!
//! ```sh
//! cargo run --example checkout-v2
//! ```
//!
//! A version 1 worker starts three checkouts and stops part-way, as a deploy would stop it:
//! Alice and Bob before their payment, Carol after hers, before her receipt. A version 2
//! worker (a shipping step between payment and receipt) then takes every run over: each is
//! migrated once, in a `migrated` transition of its history, and finishes on version 2.
//! Carol, paid on version 1, is shipped before her receipt; Bob's declined card releases the
//! stock version 1 reserved for him. The example prints proof of each, read back from the
//! store and the shop's effect log, then each run's timeline. Its runs stay in a SQLite file
//! of its own (`checkout-v2-runs.sqlite3`, `--db`), or in PostgreSQL when `DATABASE_URL` is set,
//! for `agentctl` to look at.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use durable_agents::backend::Claimed;
use durable_agents::runner::{Runner, RunnerConfig, StepOutcome};
use durable_agents::store::{RunStatus, Store, TransitionKind, verify::verify_run};
use durable_agents::{Agent, router::Router};
use examples::checkout::{self as v1, Customer};
use examples::checkout_v2 as v2;
use examples::outln;
use examples::report::{self, check};
use examples::shop::Shop;
use examples::stores;

/// Version 2 of the checkout taking over version 1's runs in flight.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// SQLite file of runs, kept after the example for `agentctl` (a file of its own:
    /// the store ends with version 2 of the checkout registered). Ignored when
    /// `DATABASE_URL` is set.
    #[arg(long, default_value = "checkout-v2-runs.sqlite3")]
    db: PathBuf,
    /// PostgreSQL instead of SQLite.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
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

/// Where the version 1 worker leaves each customer's run.
const STOPS: [(&str, &str); 3] = [
    ("alice", "Payment"),
    ("bob", "Payment"),
    ("carol", "Receipt"),
];

async fn run(args: Args) -> Result<bool, Box<dyn std::error::Error>> {
    let opened = stores::open(args.database_url.as_deref(), &args.db).await?;
    let result = run_on(&opened).await;
    opened.close().await;
    if result.is_ok() {
        let at = if opened.sqlite_path().is_some() {
            format!("agentctl --db {} ", opened.short)
        } else {
            "agentctl ".to_owned()
        };
        outln!(
            "\nthe runs stay in {}: `{at}runs --agent Checkout` lists them, `{at}show RUN` \
             shows one",
            opened.short
        );
    }
    result
}

async fn run_on(opened: &stores::Opened) -> Result<bool, Box<dyn std::error::Error>> {
    outln!("checkout-v2 example · store: {}", opened.description);
    outln!("router: scripted reviewer — an offline stand-in, not an LLM");
    let store = Arc::clone(&opened.store);
    let shop = Arc::new(Shop::open(opened.shop_path.clone())?);
    shop.configure(|s| {
        s.declined_cards.insert("4000-declined".to_owned());
    })?;
    let reviewer: Arc<dyn Router> = Arc::new(v1::scripted_reviewer());

    // --- Version 1 runs, stopped part-way by the deploy ---------------------------------
    let config = |worker: &str| RunnerConfig {
        worker_id: worker.to_owned(),
        ..RunnerConfig::default()
    };
    let runner_v1 = Runner::builder(Arc::clone(&store), v1::Handlers, v1::checkout_tools(&shop))
        .router(Arc::clone(&reviewer))
        .config(config("checkout-v1"))
        .build()?;
    let [alice, bob] = v1::demo_customers();
    let carol = Customer {
        user: "carol".into(),
        ..alice.clone()
    };
    let mut ids = Vec::new();
    for ((user, stop), customer) in STOPS.iter().zip([alice, bob, carol]) {
        let id = format!("{}-{user}", durable_agents::store::new_run_id("checkout"));
        runner_v1.start(&id, v1::start(customer)).await?;
        let Claimed {
            mut lease,
            mut record,
            ..
        } = store
            .claim_run(&id, "checkout-v1", Duration::from_secs(30))
            .await?
            .ok_or("a run just started is claimable")?;
        while record.state_name != *stop {
            record = match runner_v1.step(&mut lease, record).await? {
                StepOutcome::Committed(r) => r,
                other => return Err(format!("{user}'s run stopped early: {other:?}").into()),
            };
        }
        store.release_lease(&lease).await?;
        outln!(
            "version 1 worker: {id} stopped in `{stop}` at version {}",
            record.version
        );
        ids.push(id);
    }

    // --- Version 2 deployed: it takes every run over ----------------------------------
    outln!(
        "\nversion 2 deployed (agent `{}` version {}, migrates from version {})",
        v2::Checkout::NAME,
        v2::Checkout::VERSION,
        v1::Checkout::VERSION
    );
    let runner_v2 = Runner::builder(Arc::clone(&store), v2::Handlers, v2::checkout_tools(&shop))
        .router(reviewer)
        .config(config("checkout-v2"))
        .build()?;
    let mut all_ok = true;
    for (id, (user, _)) in ids.iter().zip(STOPS) {
        let record = runner_v2.run(id).await?;
        outln!(
            "\n── {id}: {} in `{}` after {} versions, on version {}",
            record.status,
            record.state_name,
            record.version,
            record.agent_version
        );
        all_ok &= prove(store.as_ref(), &shop, id, user).await?;
    }
    for id in &ids {
        outln!("\n{}", report::timeline(store.as_ref(), id).await?);
    }
    Ok(all_ok)
}

/// Print the proof lines of one run, read back from the store and the shop's effect log.
async fn prove(
    store: &dyn Store,
    shop: &Shop,
    run_id: &str,
    user: &str,
) -> Result<bool, Box<dyn std::error::Error>> {
    let run = store.load_run(run_id).await?.ok_or("the run exists")?;
    let history = store.history(run_id).await?;
    let effects = shop.snapshot().effects;
    let ops = |op: &str| {
        effects
            .iter()
            .filter(|e| e.op == op && e.key.starts_with(run_id))
            .count()
    };
    let migrated: Vec<_> = history
        .iter()
        .filter(|t| t.kind == TransitionKind::Migrated)
        .collect();
    let mut ok = check(
        migrated.len() == 1,
        &format!(
            "migrated once: {}",
            migrated
                .iter()
                .map(|t| format!(
                    "version {} `{}` -> `{}`",
                    t.version, t.from_state, t.to_state
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    let report = verify_run(store, &run).await?;
    ok &= check(
        report.ok,
        &format!(
            "the hash chain verifies across the migration ({} versions)",
            report.verified
        ),
    );
    if user == "bob" {
        let reserved = ops("reserve");
        let released = ops("release");
        ok &= check(
            run.status == RunStatus::Compensated && reserved > 0 && released == reserved,
            &format!(
                "card declined on version 2: the {reserved} reservation(s) version 1 made were \
                 released {released} time(s) in all"
            ),
        );
        ok &= check(ops("charge") == 0, "nothing was charged");
    } else {
        ok &= check(
            run.status == RunStatus::Completed && run.agent_version == 2,
            "completed on version 2",
        );
        ok &= check(
            ops("charge") == 1 && ops("book_shipment") == 1 && ops("send_receipt") == 1,
            &format!(
                "charged {} time(s), shipped {} time(s), receipted {} time(s)",
                ops("charge"),
                ops("book_shipment"),
                ops("send_receipt")
            ),
        );
    }
    Ok(ok)
}
