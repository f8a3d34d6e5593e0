//! Recorded runs of the examples replayed against code: the same handlers replay them, a
//! changed handler is caught at the step and call where it diverges (every kind of
//! divergence), version 2 replays version 1's runs through its migration mapping, a changed
//! mapping is caught, imported tools replay as the runner resumes them, and `agentctl
//! replay` reads exports and stores and exits non-zero on a divergence.

use std::process::{Command, ExitCode};
use std::sync::Arc;

use durable_agents::replay::{DivergenceKind, Replay, RunReplay, SkipReason};
use durable_agents::runner::{
    CrashAt, FaultPoint, ImportedTools, Runner, RunnerConfig, RunnerError,
};
use durable_agents::store::export::{RunExport, export_run_with_states};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{HistoryStore, RunFilter, RunStatus, Store, TransitionKind};
use durable_agents::tool::{Tool, ToolBox};
use examples::checkout::{
    self as v1, ChargePaymentInput, CheckoutHandlers, Recommend, RecommendInput, SearchProducts,
    checkout as states,
};
use examples::checkout_v2 as v2;
use examples::shop::Shop;
use serde_json::{Value, json};

use durable_agents::{Ctx, StepError, StepResult};

mod common;
mod intake;
use common::{shop, sqlite};
use intake::{IntakeByCode, IntakeByModel, IntakeV2, IntakeV2Changed, Note};

fn config() -> RunnerConfig {
    RunnerConfig {
        worker_id: "checkout".into(),
        ..RunnerConfig::default()
    }
}

/// Run `id` of `store` exported with its states, and read back as a file would be.
async fn exported(store: &dyn HistoryStore, id: &str) -> RunExport {
    let export = export_run_with_states(store, id).await.unwrap().unwrap();
    serde_json::from_str(&serde_json::to_string(&export).unwrap()).unwrap()
}

/// Alice (paid after a gateway timeout) and Bob (declined, compensated) run to their end
/// on version 1, exported with their states and read back as a file would be.
async fn recorded_v1_runs() -> Vec<RunExport> {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir).await;
    record_v1_runs(&store).await;
    let mut exports = Vec::new();
    for id in ["alice", "bob"] {
        exports.push(exported(store.as_ref(), id).await);
    }
    exports
}

/// Alice's and Bob's runs on version 1, recorded in `store`.
async fn record_v1_runs(store: &Arc<dyn Store>) {
    let shop = shop();
    let runner = Runner::builder(Arc::clone(store), v1::Handlers, v1::checkout_tools(&shop))
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
}

fn replay_v1<H>(handlers: H) -> Replay<v1::Checkout, H>
where
    v1::Checkout: durable_agents::agent::Handle<H>,
    H: Send + Sync + 'static,
{
    Replay::with_config(handlers, v1::checkout_tools(&shop()), config()).unwrap()
}

/// The divergence of `run`, which must be at `version`, in `state`.
#[track_caller]
fn diverged(run: &RunReplay, version: u64, state: &str) -> DivergenceKind {
    let d = run.divergence.as_ref().expect("a divergence");
    assert_eq!((d.version, d.state.as_str()), (version, state), "{d}");
    d.kind.clone()
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
    /// Browsing searches once more after the recommendations.
    ExtraCall,
}

/// Version 1's handlers with one deliberate change.
struct Changed(Change);

impl CheckoutHandlers for Changed {
    async fn browsing(
        &self,
        ctx: Ctx<'_, states::Browsing>,
        state: states::Browsing,
    ) -> StepResult<states::Browsing> {
        match self.0 {
            Change::Tool => {
                ctx.call::<Recommend>(RecommendInput {
                    cart: Vec::new(),
                    exclude: Vec::new(),
                })
                .await?;
            }
            Change::ExtraCall => {
                let states::Browsing { customer, cart } = state;
                let (customer, cart, recommendations) = v1::browse(&ctx, customer, cart).await?;
                ctx.call::<SearchProducts>(String::from("teapot").into())
                    .await?;
                return Ok(ctx.to(states::Review {
                    customer,
                    cart,
                    recommendations,
                }));
            }
            Change::Arguments | Change::Transition => {}
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
            Change::Tool | Change::ExtraCall => v1::Handlers.payment(ctx, state).await,
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
    assert_eq!(
        diverged(&run, 0, "Browsing"),
        DivergenceKind::OtherTool {
            seq: 0,
            recorded: SearchProducts::NAME.to_owned(),
            now: Recommend::NAME.to_owned(),
        }
    );
    assert!(run.replayed.is_empty(), "{:?}", run.replayed);
    let d = run.divergence.unwrap();
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
    let carol = exported(store.as_ref(), "carol").await;
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

#[tokio::test]
async fn a_call_after_the_recorded_ones_is_caught() {
    let (run, _) = alice_against(Change::ExtraCall).await;
    // The plan's six calls and the recommendations were journaled as #0 to #6: the new
    // search is #7.
    assert_eq!(
        diverged(&run, 0, "Browsing"),
        DivergenceKind::UnjournaledCall {
            seq: 7,
            tool: SearchProducts::NAME.to_owned(),
            input: json!({ "query": "teapot" }),
        }
    );
    assert!(run.replayed.is_empty(), "{:?}", run.replayed);
    let d = run.divergence.unwrap();
    assert!(
        d.to_string()
            .contains("calls `SearchProducts` as call #7, where the step journaled none"),
        "{d}"
    );
}

/// Alice's run, its payment's journal entry edited as a crash between the call's start and
/// its finish leaves it: `started`, no output.
#[tokio::test]
async fn a_call_journaled_as_started_is_reported_unfinished() {
    let alice = recorded_v1_runs().await.into_iter().next().unwrap();
    let payment = version_in(&alice, "Payment");
    let mut json = serde_json::to_value(&alice).unwrap();
    let entry = json["journal"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["name"] == "ChargePayment")
        .expect("the payment's entry");
    assert_eq!(entry["version"], payment);
    assert_eq!(entry["status"], "succeeded");
    entry["status"] = json!("started");
    entry["output"] = Value::Null;
    entry["finished_at"] = Value::Null;
    let crashed: RunExport = serde_json::from_value(json).unwrap();

    let run = replay_v1(v1::Handlers).run(&crashed).await;
    assert_eq!(
        diverged(&run, payment, "Payment"),
        DivergenceKind::UnfinishedCall {
            seq: 0,
            tool: "ChargePayment".to_owned(),
        }
    );
    assert_eq!(steps_in(&run, &alice), ["Browsing", "Review", "Reserving"]);
    // The same export unedited replays: the edit is what is caught.
    assert!(replay_v1(v1::Handlers).run(&alice).await.ok());
}

fn intake_config() -> RunnerConfig {
    RunnerConfig {
        worker_id: "intake".into(),
        ..RunnerConfig::default()
    }
}

/// A runner of build `A` of the intake on `store`, with `handlers` and `imported` tools.
fn intake_runner<A>(
    store: &Arc<dyn Store>,
    handlers: intake::Handlers,
    imported: ImportedTools,
) -> Runner<A, intake::Handlers>
where
    A: durable_agents::agent::Handle<intake::Handlers> + durable_agents::agent::RoutedByCode,
{
    Runner::<A, _>::builder(Arc::clone(store), handlers, ToolBox::new().with(Note))
        .imported_tools(imported)
        .config(intake_config())
        .build()
        .unwrap()
}

/// A replay of build `A` of the intake with `handlers` and `imported` tools.
fn intake_replay<A>(
    handlers: intake::Handlers,
    imported: ImportedTools,
) -> Replay<A, intake::Handlers>
where
    A: durable_agents::agent::Handle<intake::Handlers>,
{
    Replay::with_imported(
        handlers,
        ToolBox::new().with(Note),
        intake_config(),
        imported,
    )
    .unwrap()
}

/// The ticket opened on version 1 of the intake (not run yet).
async fn open_ticket(runner: &Runner<IntakeByCode, intake::Handlers>) {
    runner
        .start(
            "ticket",
            IntakeByCode::Open {
                text: "where is my parcel?".into(),
            },
        )
        .await
        .unwrap();
}

/// A ticket run to its end by the recorded intake (`Noted` routed by code), on a memory
/// store, with `handlers` and `imported` tools; exported.
async fn recorded_intake(handlers: intake::Handlers, imported: ImportedTools) -> RunExport {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = intake_runner::<IntakeByCode>(&store, handlers, imported);
    open_ticket(&runner).await;
    assert_eq!(
        runner.run("ticket").await.unwrap().status,
        RunStatus::Completed
    );
    exported(store.as_ref(), "ticket").await
}

/// The new code routes `Noted` by the model: the recorded step journaled no decision, so
/// the replay's model is asked, which the report names with the options it was offered.
#[tokio::test]
async fn a_step_asking_the_model_where_none_was_asked_is_caught() {
    let ticket = recorded_intake(intake::Handlers::NOTE, ImportedTools::new()).await;
    let by_code = intake_replay::<IntakeByCode>(intake::Handlers::NOTE, ImportedTools::new())
        .run(&ticket)
        .await;
    assert!(by_code.ok(), "{by_code:?}");
    assert_eq!(by_code.replayed, [0, 1], "{by_code:?}");

    let run = intake_replay::<IntakeByModel>(intake::Handlers::NOTE, ImportedTools::new())
        .run(&ticket)
        .await;
    assert_eq!(
        diverged(&run, 1, "Noted"),
        DivergenceKind::UnjournaledAsk {
            options: vec!["transition Answered".into(), "transition Dropped".into()],
        }
    );
    // The open step, unchanged, replayed before it.
    assert_eq!(run.replayed, [0]);
    let d = run.divergence.unwrap();
    assert!(
        d.to_string()
            .contains("version 1 in `Noted`: the new code asks the model"),
        "{d}"
    );
}

/// The new code no longer writes the note: the journaled call is missing, the step's move
/// otherwise the same.
#[tokio::test]
async fn a_journaled_call_the_new_code_skips_is_caught() {
    let ticket = recorded_intake(intake::Handlers::NOTE, ImportedTools::new()).await;
    let silent = intake::Handlers {
        note: false,
        add_note: None,
    };
    let run = intake_replay::<IntakeByCode>(silent, ImportedTools::new())
        .run(&ticket)
        .await;
    assert_eq!(
        diverged(&run, 0, "Open"),
        DivergenceKind::MissingCall {
            seq: 0,
            tool: Note::NAME.to_owned(),
        }
    );
    let d = run.divergence.clone().unwrap();
    assert!(run.replayed.is_empty(), "{:?}", run.replayed);
    assert!(
        d.to_string()
            .contains("call #0 of `Note` was journaled, the new code does not make it"),
        "{d}"
    );
}

/// A ticket opened on version 1 and run to its end on version 2, migrated at its first
/// step by `v2_from_v1`; replayed by version 2 with that mapping (as recorded) and with a
/// changed one (another priority).
#[tokio::test]
async fn a_changed_migration_mapping_is_caught() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let v1 = intake_runner::<IntakeByCode>(&store, intake::Handlers::NOTE, ImportedTools::new());
    open_ticket(&v1).await;
    let v2 = intake_runner::<IntakeV2>(&store, intake::Handlers::NOTE, ImportedTools::new());
    assert_eq!(v2.run("ticket").await.unwrap().status, RunStatus::Completed);
    let ticket = exported(store.as_ref(), "ticket").await;
    let migrated = ticket
        .history
        .iter()
        .find(|t| t.kind == TransitionKind::Migrated)
        .expect("a migration");
    assert_eq!(migrated.version, 1);

    let run = intake_replay::<IntakeV2>(intake::Handlers::NOTE, ImportedTools::new())
        .run(&ticket)
        .await;
    assert!(run.ok(), "{run:?}");
    // The migration checked, the open step it resumed, the noted step.
    assert_eq!(run.replayed, [0, 1, 2], "{run:?}");

    let run = intake_replay::<IntakeV2Changed>(intake::Handlers::NOTE, ImportedTools::new())
        .run(&ticket)
        .await;
    let text = "where is my parcel?";
    assert_eq!(
        diverged(&run, 0, "Open"),
        DivergenceKind::Migration {
            recorded: json!({ "Open": { "text": text, "priority": 1 } }),
            now: json!({ "Open": { "text": text, "priority": 2 } }),
            at: "/Open/priority".to_owned(),
        }
    );
    assert!(run.replayed.is_empty(), "{run:?}");
}

/// An agent calling a tool imported from an MCP server: its calls are journaled with the
/// fingerprint of its schema, and replay compares them as the runner does on resume.
#[tokio::test]
async fn imported_tools_replay_as_the_runner_resumes_them() {
    let adds = |text| intake::Handlers {
        note: false,
        add_note: Some(text),
    };
    let ticket = recorded_intake(adds("hello"), intake::imported("schema-1")).await;
    let entry = &ticket.journal[0];
    assert_eq!(
        entry.input,
        json!({ "arguments": { "text": "hello" }, "schema": "schema-1" }),
        "the journaled input carries the fingerprint"
    );
    let replay =
        |handlers, schema| intake_replay::<IntakeByCode>(handlers, intake::imported(schema));

    // The same code and the same schema: replayed (not `other_arguments`).
    let run = replay(adds("hello"), "schema-1").run(&ticket).await;
    assert!(run.ok(), "{run:?}");
    assert_eq!(run.replayed, [0, 1]);

    // Other arguments: the arguments compared, without the fingerprint.
    let run = replay(adds("bye"), "schema-1").run(&ticket).await;
    assert_eq!(
        diverged(&run, 0, "Open"),
        DivergenceKind::OtherArguments {
            seq: 0,
            tool: intake::ADD_NOTE.to_owned(),
            recorded: json!({ "text": "hello" }),
            now: json!({ "text": "bye" }),
            at: "/text".to_owned(),
        }
    );

    // The tool's schema changed since: the runner would hold the run; replay says so.
    let run = replay(adds("hello"), "schema-2").run(&ticket).await;
    assert_eq!(
        diverged(&run, 0, "Open"),
        DivergenceKind::SchemaChanged {
            seq: 0,
            tool: intake::ADD_NOTE.to_owned(),
            recorded: "schema-1".to_owned(),
            now: "schema-2".to_owned(),
        }
    );
    let d = run.divergence.unwrap();
    assert!(d.to_string().contains("tool.schema_changed"), "{d}");
}

/// The checkout's runs and a ticket of another agent in one SQLite file.
async fn store_of_runs(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    let store = sqlite(dir).await;
    record_v1_runs(&store).await;
    let intake =
        intake_runner::<IntakeByCode>(&store, intake::Handlers::NOTE, ImportedTools::new());
    open_ticket(&intake).await;
    intake.run("ticket").await.unwrap();
    store
}

#[tokio::test]
async fn the_runs_of_a_store_replay() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_of_runs(&dir).await;
    let replay = replay_v1(v1::Handlers);
    let checkout = |limit| RunFilter {
        agent: Some("Checkout".into()),
        limit,
        ..RunFilter::default()
    };
    let ids = |report: &durable_agents::replay::ReplayReport| {
        report
            .runs
            .iter()
            .map(|r| r.run_id.clone())
            .collect::<Vec<_>>()
    };

    let all = replay
        .run_store(store.as_ref(), &checkout(None))
        .await
        .unwrap();
    assert!(all.ok(), "{all:?}");
    assert_eq!(ids(&all), ["bob", "alice"], "newest first");
    // The same as replaying their exports.
    let exports = [
        exported(store.as_ref(), "bob").await,
        exported(store.as_ref(), "alice").await,
    ];
    assert_eq!(all, replay.run_all(&exports).await);

    let newest = replay
        .run_store(store.as_ref(), &checkout(Some(1)))
        .await
        .unwrap();
    assert_eq!(ids(&newest), ["bob"]);

    // Without an agent, the ticket is selected too: not replayable by the checkout.
    let every = replay
        .run_store(store.as_ref(), &RunFilter::default())
        .await
        .unwrap();
    assert_eq!(every.runs.len(), 3);
    assert!(!every.ok());
    let ticket = every.diverged().next().unwrap();
    assert_eq!(ticket.run_id, "ticket");
    assert_eq!(
        diverged(ticket, 0, ""),
        DivergenceKind::NotReplayable {
            message: "the run is of agent `Intake`, the replay of `Checkout`".into()
        }
    );

    // A changed handler over the store: both runs diverge at their payment.
    let report = replay_v1(Changed(Change::Arguments))
        .run_store(store.as_ref(), &checkout(None))
        .await
        .unwrap();
    assert_eq!(report.diverged().count(), 2, "{report:?}");
}

/// The environment variable that makes [`agentctl_in_a_child_process`] run `agentctl`: the
/// arguments, as a JSON array, and which handlers (`same` or `changed`).
const CTL_ARGS: &str = "REPLAY_TEST_CTL_ARGS";
const CTL_HANDLERS: &str = "REPLAY_TEST_CTL_HANDLERS";

/// Not a test of its own: the child process of [`agentctl_replays_the_runs_of_a_store`],
/// which runs the checkout's control binary on the arguments it is given and exits with its
/// code, so that the parent reads what it printed. Without the variable it does nothing.
#[test]
fn agentctl_in_a_child_process() {
    let Ok(args) = std::env::var(CTL_ARGS) else {
        return;
    };
    let args: Vec<String> = serde_json::from_str(&args).unwrap();
    let ctl = match std::env::var(CTL_HANDLERS).as_deref() {
        Ok("changed") => agentctl::Ctl::new().replay(replay_v1(Changed(Change::Arguments))),
        _ => agentctl::Ctl::new().replay(replay_v1(v1::Handlers)),
    };
    let code = ctl.run_from(args);
    std::process::exit(if code == ExitCode::SUCCESS {
        0
    } else if code == ExitCode::from(1) {
        1
    } else {
        2
    });
}

/// `agentctl replay … --json` in a child process: its exit code and the JSON it printed.
fn agentctl(handlers: &str, args: &[&str]) -> (i32, Option<Value>) {
    let mut all = vec!["agentctl", "replay"];
    all.extend_from_slice(args);
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "agentctl_in_a_child_process", "--nocapture"])
        .env(CTL_ARGS, serde_json::to_string(&all).unwrap())
        .env(CTL_HANDLERS, handlers)
        .env("NO_COLOR", "1")
        // agentctl prefers `DATABASE_URL` to `--db`: the runs are in the SQLite file.
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    // The test harness's own lines come before what agentctl printed.
    let json = stdout
        .find("\n{")
        .and_then(|at| serde_json::from_str(&stdout[at..]).ok());
    (out.status.code().unwrap(), json)
}

#[test]
fn agentctl_replays_the_runs_of_a_store() {
    let dir = tempfile::tempdir().unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(store_of_runs(&dir));
    let db = dir.path().join("runs.sqlite3");
    let db = db.to_str().unwrap();

    let (code, json) = agentctl(
        "same",
        &["--db", db, "--json", "--agent", "Checkout", "--limit", "1"],
    );
    assert_eq!(code, 0);
    let json = json.expect("the report as JSON");
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{json}");
    let bob = &runs[0];
    assert_eq!(bob["run_id"], "bob");
    assert_eq!(bob["agent"], "Checkout");
    assert_eq!(bob["divergence"], Value::Null);
    assert!(!bob["replayed"].as_array().unwrap().is_empty(), "{bob}");
    assert!(
        bob["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["version"].is_u64() && s["why"]["reason"] == "compensation"),
        "{bob}"
    );

    let (code, json) = agentctl("changed", &["--db", db, "--json", "--agent", "Checkout"]);
    assert_eq!(code, 1);
    let json = json.expect("the report as JSON");
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{json}");
    for run in runs {
        let d = &run["divergence"];
        assert_eq!(d["kind"], "other_arguments", "{run}");
        assert_eq!(d["state"], "Payment");
        assert!(d["version"].is_u64());
        assert_eq!(
            (d["seq"].as_u64(), d["at"].as_str()),
            (Some(0), Some("/cents"))
        );
        assert_eq!(d["tool"], "ChargePayment");
        assert_eq!(
            d["now"]["cents"].as_u64(),
            d["recorded"]["cents"].as_u64().map(|c| c + 1)
        );
    }

    // Without `--json`: one line per run and a summary, no JSON.
    let (code, json) = agentctl("changed", &["--db", db, "--agent", "Checkout"]);
    assert_eq!((code, json), (1, None));

    // An agent this binary has no replay of: a usage error.
    let (code, _) = agentctl("same", &["--db", db, "--agent", "Intake"]);
    assert_eq!(code, 2);
}
