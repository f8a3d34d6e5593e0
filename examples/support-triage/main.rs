//! Support triage with a person in the loop.
//!
//! ```sh
//! cargo run --example support-triage
//! ```
//!
//! Two tickets ask for refunds. The small one is refunded at once. The large one waits for
//! approval — in the store, not in memory: the example drops its runner (a restart) while
//! the run waits. An approval captured on another run is then replayed against it and
//! refused, because an approval names the exact refund (run, order, amount) by hash. The
//! matching approval finally releases the refund.
//!
//! To give the approval yourself:
//!
//! ```sh
//! cargo run --example support-triage -- --manual          # stops at the wait, prints the command
//! cargo run --bin agentctl -- signal RUN approval '…'     # the printed command: you approve
//! cargo run --example support-triage -- --continue RUN    # a worker finishes the run
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use durable_agents::Agent;
use durable_agents::runner::Runner;
use durable_agents::store::{RunStatus, Store};
use examples::outln;
use examples::triage::{self, Desk, Handlers, RefundRequest, Ticket, Triage};
use examples::{report, stores};

/// Support triage: LLM-routed, with approvals bound to the exact refund.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// SQLite file of runs (the embedded default store). Ignored when `DATABASE_URL` is set.
    #[arg(long, env = "AGENT_DB", default_value = stores::DEFAULT_DB)]
    db: std::path::PathBuf,
    /// PostgreSQL instead of SQLite.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Stop when the large refund waits for its approval, and print the `agentctl signal`
    /// command that gives it, for a person to run.
    #[arg(long, conflicts_with = "continue_run")]
    manual: bool,
    /// Drive run RUN (approved by hand) to its end.
    #[arg(long = "continue", value_name = "RUN")]
    continue_run: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
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

fn check(ok: bool, line: &str) -> bool {
    outln!("   {} {line}", if ok { "✔" } else { "✘" });
    ok
}

fn runner(
    store: &Arc<dyn Store>,
    desk: &Arc<Desk>,
) -> Result<Runner<Triage, Handlers>, Box<dyn std::error::Error>> {
    Ok(
        Runner::builder(Arc::clone(store), Handlers, triage::tools(desk))
            .router(Arc::new(triage::scripted_classifier()))
            .build()?,
    )
}

async fn run(args: Args) -> Result<bool, Box<dyn std::error::Error>> {
    let opened = stores::open(args.database_url.as_deref(), &args.db).await?;
    let result = run_on(&opened, &args).await;
    // Also after an error: the SQLite file then holds every committed step by itself.
    opened.close().await;
    result
}

async fn run_on(opened: &stores::Opened, args: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    let store = Arc::clone(&opened.store);
    outln!("support-triage example · store: {}", opened.description);
    outln!("router: scripted classifier — an offline stand-in, not an LLM");
    let desk = Arc::new(Desk::with_orders(&[
        ("order-17", 2_500),
        ("order-42", 48_000),
    ]));
    if let Some(id) = &args.continue_run {
        return continue_by_hand(&store, &desk, id).await;
    }
    // One id for the pair, so their names say they belong together.
    let pair = durable_agents::store::new_run_id("triage");
    let small = format!("{pair}-small");
    let large = format!("{pair}-large");

    let first = runner(&store, &desk)?;
    for (id, order) in [(&small, "order-17"), (&large, "order-42")] {
        let ticket = Ticket {
            customer: "carol".into(),
            order_id: order.into(),
            text: "The parcel never came, please refund".into(),
        };
        first.start(id, Triage::Received { ticket }).await?;
        let record = first.run(id).await?;
        outln!("\n── {id}: {} in `{}`", record.status, record.state_name);
    }
    let mut ok = true;
    let waiting = store.load_run(&large).await?.ok_or("run vanished")?;
    ok &= check(
        waiting.status == RunStatus::Waiting,
        &format!(
            "the 48000-cent refund waits for `approval` (threshold {} cents); the 2500-cent one was refunded at once",
            triage::APPROVAL_THRESHOLD_CENTS
        ),
    );
    let refund: RefundRequest =
        serde_json::from_value(waiting.state["AwaitApproval"]["refund"].clone())?;
    drop(first);
    if args.manual {
        outln!(
            "\n   {large} waits for a person. Approve this exact refund by hand:\n\n     {}\n\n   then let a worker finish it:\n\n     cargo run --example support-triage -- --continue {large}",
            triage::approval_command(&large, &refund, "you")
        );
        return Ok(ok);
    }
    outln!(
        "\n   (runner dropped: the waiting run lives only in the store — a restart changes nothing)"
    );

    // An approval captured on the other run, replayed here: it names another refund.
    let small_refund = RefundRequest {
        run_id: small.clone(),
        order_id: "order-17".into(),
        amount_cents: 2_500,
    };
    let second = runner(&store, &desk)?;
    second
        .signal(
            &large,
            "approval",
            triage::approve(&small_refund, "mallory"),
        )
        .await?;
    let after_replay = second.run(&large).await?;
    ok &= check(
        after_replay.status == RunStatus::Waiting && desk.refunds().len() == 1,
        "an approval for another run's refund, replayed on this run, is refused: still waiting, nothing refunded",
    );
    second
        .signal(&large, "approval", triage::approve(&refund, "dana"))
        .await?;
    let done = second.run(&large).await?;
    let refunds = desk.refunds();
    ok &= check(
        done.status == RunStatus::Completed
            && refunds.iter().filter(|r| r.1 == "order-42").count() == 1,
        &format!(
            "the approval bound to hash {}… releases exactly that refund: {refunds:?}",
            &refund.binding()[..12]
        ),
    );
    ok &= check(
        Triage::graph()
            .state("AwaitApproval")
            .is_some_and(|s| s.wait.is_some()),
        "the wait is declared in the graph",
    );
    outln!("\n{}", report::timeline(store.as_ref(), &large).await?);
    Ok(ok)
}

/// `--continue RUN`: a worker drives a run that was approved (or not yet) by hand.
async fn continue_by_hand(
    store: &Arc<dyn Store>,
    desk: &Arc<Desk>,
    id: &str,
) -> Result<bool, Box<dyn std::error::Error>> {
    let record = runner(store, desk)?.run(id).await?;
    outln!("\n── {id}: {} in `{}`", record.status, record.state_name);
    let ok = match record.status {
        RunStatus::Completed => check(true, "the approval given by hand released the refund"),
        RunStatus::Waiting => check(
            false,
            "still waiting: no approval for this exact refund has arrived (send the printed command)",
        ),
        other => check(false, &format!("the run ended {other}")),
    };
    outln!("\n{}", report::timeline(store.as_ref(), id).await?);
    Ok(ok)
}
