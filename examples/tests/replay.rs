//! Recorded runs of the examples replayed against code: the same handlers replay them, a
//! changed handler is caught at the step and call where it diverges, version 2 replays
//! version 1's runs through its migration mapping, and `agentctl replay` exits non-zero on
//! a divergence.

use std::process::ExitCode;
use std::sync::Arc;

use durable_agents::replay::{DivergenceKind, Replay, RunReplay, SkipReason};
use durable_agents::runner::{CrashAt, FaultPoint, Runner, RunnerConfig, RunnerError};
use durable_agents::store::export::{RunExport, export_run_with_states};
use durable_agents::store::{RunStatus, TransitionKind};
use durable_agents::tool::Tool;
use examples::checkout::{
    self as v1, ChargePaymentInput, CheckoutHandlers, Recommend, RecommendInput, SearchProducts,
    checkout as states,
};
use examples::checkout_v2 as v2;
use examples::shop::Shop;

use durable_agents::{Ctx, StepError, StepResult};

mod common;
use common::{shop, sqlite};

fn config() -> RunnerConfig {
    RunnerConfig {
        worker_id: "checkout".into(),
        ..RunnerConfig::default()
    }
}

/// Alice (paid after a gateway timeout) and Bob (declined, compensated) run to their end
/// on version 1, exported with their states and read back as a file would be.
async fn recorded_v1_runs() -> Vec<RunExport> {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir).await;
    let shop = shop();
    let runner = Runner::builder(Arc::clone(&store), v1::Handlers, v1::checkout_tools(&shop))
        .router(Arc::new(v1::scripted_reviewer()))
        .config(config())
        .build()
        .unwrap();
    let [alice, bob] = v1::demo_customers();
    runner.start("alice", v1::start(alice)).await.unwrap();
    runner.start("bob", v1::start(bob)).await.unwrap();
    assert_eq!(
        runner.run("alice").await.unwrap().status,
        RunStatus::Completed
    );
    assert_eq!(
        runner.run("bob").await.unwrap().status,
        RunStatus::Compensated
    );
    let mut exports = Vec::new();
    for id in ["alice", "bob"] {
        let export = export_run_with_states(store.as_ref(), id)
            .await
            .unwrap()
            .unwrap();
        let text = serde_json::to_string(&export).unwrap();
        exports.push(serde_json::from_str(&text).unwrap());
    }
    exports
}

fn replay_v1<H>(handlers: H) -> Replay<v1::Checkout, H>
where
    v1::Checkout: durable_agents::agent::Handle<H>,
    H: Send + Sync + 'static,
{
    Replay::with_config(handlers, v1::checkout_tools(&shop()), config()).unwrap()
}

/// The steps of a replayed run that were replayed, with the states they ran in.
fn steps_in<'a>(run: &RunReplay, export: &'a RunExport) -> Vec<&'a str> {
    run.replayed
        .iter()
        .filter_map(|v| export.history.iter().find(|t| t.version == *v))
        .map(|t| t.to_state.as_str())
        .collect()
}

#[tokio::test]
async fn the_examples_recorded_runs_replay_against_their_own_handlers() {
    let exports = recorded_v1_runs().await;
    let replay = replay_v1(v1::Handlers);
    let report = replay.run_all(&exports).await;
    for run in &report.runs {
        assert!(run.ok(), "{}: {:?}", run.run_id, run.divergence);
    }
    let (alice, bob) = (&report.runs[0], &report.runs[1]);
    // Every step a handler or the router made: browsing, the routed review (its decision
    // served from the journal), reserving, the payment retried after its timeout, the
    // receipt.
    assert_eq!(
        steps_in(alice, &exports[0]),
        ["Browsing", "Review", "Reserving", "Payment", "Receipt"],
        "{alice:?}"
    );
    assert!(alice.skipped.is_empty(), "{alice:?}");
    // Bob's declined payment takes `on_error` into `Failed`, replayed; the compensation
    // round that follows is the runner's, skipped and said so.
    assert!(
        bob.replayed.len() >= 4,
        "{bob:?}: browsing, review, reserving, the failed payment"
    );
    assert!(
        bob.skipped
            .iter()
            .all(|s| s.why == SkipReason::Compensation),
        "{bob:?}"
    );
    assert!(!bob.skipped.is_empty(), "{bob:?}");
}

/// Which handler to change, and how.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// Browsing asks for recommendations before playing the customer's plan.
    Tool,
    /// The payment charges one cent more.
    Arguments,
    /// The payment gives up instead of charging.
    Transition,
}

/// Version 1's handlers with one deliberate change.
struct Changed(Change);

impl CheckoutHandlers for Changed {
    async fn browsing(
        &self,
        ctx: Ctx<'_, states::Browsing>,
        state: states::Browsing,
    ) -> StepResult<states::Browsing> {
        if matches!(self.0, Change::Tool) {
            ctx.call::<Recommend>(RecommendInput {
                cart: Vec::new(),
                exclude: Vec::new(),
            })
            .await?;
        }
        v1::Handlers.browsing(ctx, state).await
    }

    async fn review(
        &self,
        ctx: Ctx<'_, states::Review>,
        route: states::ReviewRoute,
        state: states::Review,
    ) -> StepResult<states::Review> {
        v1::Handlers.review(ctx, route, state).await
    }

    async fn reserving(
        &self,
        ctx: Ctx<'_, states::Reserving>,
        state: states::Reserving,
    ) -> StepResult<states::Reserving> {
        v1::Handlers.reserving(ctx, state).await
    }

    async fn payment(
        &self,
        ctx: Ctx<'_, states::Payment>,
        state: states::Payment,
    ) -> StepResult<states::Payment> {
        match self.0 {
            Change::Tool => v1::Handlers.payment(ctx, state).await,
            Change::Arguments => {
                let states::Payment { customer, cart, .. } = state;
                let payment_id = ctx
                    .call::<v1::ChargePayment>(ChargePaymentInput {
                        user: customer.user.clone(),
                        card: customer.card.clone(),
                        cents: cart.total_cents() + 1,
                    })
                    .await?;
                Ok(ctx.to(states::Receipt {
                    customer,
                    cart,
                    payment_id,
                }))
            }
            Change::Transition => Err(StepError::handler("payments are paused")),
        }
    }

    async fn receipt(
        &self,
        ctx: Ctx<'_, states::Receipt>,
        state: states::Receipt,
    ) -> StepResult<states::Receipt> {
        v1::Handlers.receipt(ctx, state).await
    }
}

/// Alice's run replayed against a changed handler: it diverges, and the report says where.
async fn alice_against(change: Change) -> (RunReplay, RunExport) {
    let exports = recorded_v1_runs().await;
    let alice = exports.into_iter().next().unwrap();
    let run = replay_v1(Changed(change)).run(&alice).await;
    (run, alice)
}

/// The version of Alice's run whose step ran in `state`.
fn version_in(export: &RunExport, state: &str) -> u64 {
    export
        .history
        .iter()
        .find(|t| t.to_state == state && t.kind == TransitionKind::Step)
        .map(|t| t.version)
        .or_else(|| (state == "Browsing").then_some(0))
        .unwrap()
}

#[tokio::test]
async fn a_handler_calling_another_tool_is_caught() {
    let (run, _) = alice_against(Change::Tool).await;
    let d = run.divergence.clone().expect("a divergence");
    assert_eq!((d.version, d.state.as_str()), (0, "Browsing"));
    assert_eq!(
        d.kind,
        DivergenceKind::OtherTool {
            seq: 0,
            recorded: SearchProducts::NAME.to_owned(),
            now: Recommend::NAME.to_owned(),
        }
    );
    assert!(run.replayed.is_empty(), "{:?}", run.replayed);
    assert!(d.to_string().contains("version 0 in `Browsing`"), "{d}");
}

#[tokio::test]
async fn a_handler_calling_with_other_arguments_is_caught() {
    let (run, alice) = alice_against(Change::Arguments).await;
    let d = run.divergence.clone().expect("a divergence");
    assert_eq!(d.version, version_in(&alice, "Payment"));
    assert_eq!(d.state, "Payment");
    let DivergenceKind::OtherArguments {
        seq,
        tool,
        recorded,
        now,
        at,
    } = &d.kind
    else {
        panic!("{d:?}");
    };
    assert_eq!(
        (*seq, tool.as_str(), at.as_str()),
        (0, "ChargePayment", "/cents")
    );
    assert_eq!(
        now["cents"].as_u64(),
        recorded["cents"].as_u64().map(|c| c + 1)
    );
    // The steps before the payment replayed as recorded.
    assert_eq!(steps_in(&run, &alice), ["Browsing", "Review", "Reserving"]);
}

#[tokio::test]
async fn a_handler_taking_another_transition_is_caught() {
    let (run, alice) = alice_against(Change::Transition).await;
    let d = run.divergence.clone().expect("a divergence");
    assert_eq!(d.version, version_in(&alice, "Payment"));
    let DivergenceKind::Transition { recorded, now, .. } = &d.kind else {
        panic!("{d:?}");
    };
    assert_eq!(recorded.to_state.as_deref(), Some("Receipt"));
    assert_eq!(recorded.kind, Some(TransitionKind::Step));
    assert_eq!(now.to_state.as_deref(), Some("Failed"));
    assert_eq!(now.kind, Some(TransitionKind::Error));
    assert!(
        d.to_string().contains("payments are paused"),
        "the report says what the new code did: {d}"
    );
}

/// Version 2 replays version 1's runs through its mapping: a run recorded wholly on
/// version 1, and one interrupted on version 1 and finished on version 2 after a migration.
#[tokio::test]
async fn version_two_replays_version_one_runs_through_its_migration() {
    let exports = recorded_v1_runs().await;
    let replay = Replay::with_config(v2::Handlers, v2::checkout_tools(&shop()), config()).unwrap();
    let alice = replay.run(&exports[0]).await;
    assert!(alice.ok(), "{alice:?}");
    // Payment -> Receipt on version 1 is Payment -> Shipping through the mapping, an edge
    // of version 2: its new handler books nothing there and moves as recorded. The receipt
    // step maps to Shipping -> Done, no edge of version 2: the graph changed there.
    assert_eq!(
        steps_in(&alice, &exports[0]),
        ["Browsing", "Review", "Reserving", "Payment"],
        "{alice:?}"
    );
    assert_eq!(
        alice.skipped.iter().map(|s| &s.why).collect::<Vec<_>>(),
        [&SkipReason::GraphChanged {
            from: "Shipping".into(),
            to: "Done".into()
        }]
    );

    // Interrupted mid-reservation on version 1, finished on version 2.
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir).await;
    let shop = Arc::new(Shop::demo());
    let crashing = Runner::builder(Arc::clone(&store), v1::Handlers, v1::checkout_tools(&shop))
        .router(Arc::new(v1::scripted_reviewer()))
        .config(config())
        .faults(Arc::new(CrashAt::new(FaultPoint::ToolAnswered, 9)))
        .build()
        .unwrap();
    let [carol, _] = v1::demo_customers();
    crashing.start("carol", v1::start(carol)).await.unwrap();
    assert!(matches!(
        crashing.run("carol").await,
        Err(RunnerError::Crashed(_))
    ));
    let finished = Runner::builder(Arc::clone(&store), v2::Handlers, v2::checkout_tools(&shop))
        .router(Arc::new(v1::scripted_reviewer()))
        .config(config())
        .build()
        .unwrap()
        .run("carol")
        .await
        .unwrap();
    assert_eq!(finished.status, RunStatus::Completed);
    let carol = export_run_with_states(store.as_ref(), "carol")
        .await
        .unwrap()
        .unwrap();
    let migrated = carol
        .history
        .iter()
        .find(|t| t.kind == TransitionKind::Migrated)
        .expect("a migration")
        .version;
    let run = replay.run(&carol).await;
    assert!(run.ok(), "{run:?}");
    // The migration itself (checked against the mapping), and the step it resumed.
    assert!(run.replayed.contains(&(migrated - 1)), "{run:?}");
    assert!(run.replayed.contains(&migrated), "{run:?}");
    assert!(run.skipped.is_empty(), "{run:?}");
}

/// `agentctl replay` in a control binary of the checkout: exit 0 when the runs replay,
/// 1 when one diverges, 2 without a replay registered.
#[test]
fn agentctl_replay_exits_non_zero_on_a_divergence() {
    let exports = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(recorded_v1_runs());
    let dir = tempfile::tempdir().unwrap();
    for export in &exports {
        let path = dir.path().join(format!("{}.json", export.run.id));
        std::fs::write(&path, serde_json::to_string_pretty(export).unwrap()).unwrap();
    }
    let from = dir.path().to_str().unwrap().to_owned();
    let ctl = |change: Option<Change>| {
        let ctl = agentctl::Ctl::new();
        match change {
            None => ctl.replay(replay_v1(v1::Handlers)),
            Some(change) => ctl.replay(replay_v1(Changed(change))),
        }
    };
    let args = ["agentctl", "replay", "--json", "--from-file", from.as_str()];
    assert_eq!(ctl(None).run_from(args), ExitCode::SUCCESS);
    assert_eq!(
        ctl(Some(Change::Arguments)).run_from(args),
        ExitCode::from(1)
    );
    let one = dir.path().join("alice.json");
    assert_eq!(
        ctl(Some(Change::Tool)).run_from([
            "agentctl",
            "replay",
            "--from-file",
            one.to_str().unwrap()
        ]),
        ExitCode::from(1)
    );
    assert_eq!(agentctl::Ctl::new().run_from(args), ExitCode::from(2));
}
