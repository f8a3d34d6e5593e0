//! Item 10: the mediation matrix, on `MemoryStore`. For every state of the fixture agent
//! (and of `Mediated`, an agent over the same tools whose every state is LLM-routed, so a
//! router can ask for a tool in states with no tool, reads only, writes only, and a
//! hybrid), and for every tool name plus unknown and lookalike names, a router asks for
//! that name first. The tool must run if and only if the name is exactly a tool legal in
//! that state; executions are counted at the tools.

use std::sync::Arc;

use agent_conformance::fixture::{Charge, Lookup, Order, Release, Reserve, World};
use agent_core::router::{OptionKind, ScriptedRouter};
use agent_core::runner::{Runner, RunnerConfig};
use agent_core::store::memory::MemoryStore;
use agent_core::store::{EntryKind, NewRun, Store};
use agent_core::{Agent, Ctx, Handle, StepResult};
use battery::order::{self, advance};
use battery::{CallLog, pass, probe_all};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Every state LLM-routed, with different tool sets.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(read(Lookup), write(Charge, Release), hybrid(Reserve(compensate = Release))))]
pub(crate) enum Mediated {
    /// No tool at all. Two successors, since a routed state with one option and no tool
    /// leaves the model nothing to choose and does not compile; the router takes `Reads`.
    #[agent(initial, route = llm, to(Reads, End))]
    Bare,
    /// Reads only.
    #[agent(route = llm, tools(Lookup), to(Writes))]
    Reads,
    /// Writes only.
    #[agent(route = llm, tools(Charge, Release), to(Hybrid))]
    Writes,
    /// A hybrid and a read.
    #[agent(route = llm, tools(Reserve, Lookup), to(End))]
    Hybrid,
    /// The end.
    #[agent(terminal)]
    End,
}

/// Handlers following the router's choice.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Follow;

impl MediatedHandlers for Follow {
    async fn bare(
        &self,
        ctx: Ctx<'_, mediated::Bare>,
        _: mediated::BareRoute,
        _: mediated::Bare,
    ) -> StepResult<mediated::Bare> {
        Ok(ctx.to(mediated::Reads))
    }
    async fn reads(
        &self,
        ctx: Ctx<'_, mediated::Reads>,
        _: mediated::ReadsRoute,
        _: mediated::Reads,
    ) -> StepResult<mediated::Reads> {
        Ok(ctx.to(mediated::Writes))
    }
    async fn writes(
        &self,
        ctx: Ctx<'_, mediated::Writes>,
        _: mediated::WritesRoute,
        _: mediated::Writes,
    ) -> StepResult<mediated::Writes> {
        Ok(ctx.to(mediated::Hybrid))
    }
    async fn hybrid(
        &self,
        ctx: Ctx<'_, mediated::Hybrid>,
        _: mediated::HybridRoute,
        _: mediated::Hybrid,
    ) -> StepResult<mediated::Hybrid> {
        Ok(ctx.to(mediated::End))
    }
}

const TOOLS: [&str; 4] = ["Lookup", "Reserve", "Release", "Charge"];

/// A valid input for each real tool (a lookalike gets its original's input).
fn input_for(tool: &str) -> Value {
    match tool {
        "Lookup" | "Reserve" => json!({ "sku": "mediated" }),
        "Release" => json!({ "reservation": "res-none" }),
        _ => json!({ "cents": 1 }),
    }
}

/// The names a router asks for: each tool, unknown names, and lookalikes of each tool
/// (case, whitespace, Cyrillic and fullwidth confusables, invisible characters).
fn candidates() -> Vec<(String, &'static str)> {
    let mut out: Vec<(String, &'static str)> = Vec::new();
    for tool in TOOLS {
        out.push((tool.to_owned(), tool));
        out.push((tool.to_lowercase(), tool));
        out.push((tool.to_uppercase(), tool));
        out.push((format!("{tool} "), tool));
        out.push((format!(" {tool}"), tool));
        out.push((format!("{tool}\n"), tool));
        out.push((format!("{tool}\u{200b}"), tool));
        out.push((format!("\u{feff}{tool}"), tool));
        out.push((format!("{tool}\u{0}"), tool));
        // Cyrillic confusables of a Latin letter of the name.
        let cyrillic = tool
            .replacen('o', "\u{43e}", 1)
            .replacen('e', "\u{435}", 1)
            .replacen('a', "\u{430}", 1)
            .replacen('C', "\u{421}", 1);
        out.push((cyrillic, tool));
        // Fullwidth first letter.
        let mut chars = tool.chars();
        let first = chars.next().expect("non-empty");
        let wide = char::from_u32(first as u32 - 'A' as u32 + 0xFF21).expect("fullwidth letter");
        out.push((format!("{wide}{}", chars.as_str()), tool));
        out.push((format!("{tool}s"), tool));
        out.push((format!("agent.{tool}"), tool));
    }
    for unknown in [
        "Refund",
        "",
        "router",
        "*",
        "Lookup,Charge",
        "DeleteEverything",
    ] {
        out.push((unknown.to_owned(), "Charge"));
    }
    out
}

/// A router asking for `name` first, then choosing the first offered transition.
fn router(name: String, args: Value) -> Arc<ScriptedRouter> {
    Arc::new(ScriptedRouter::from_fn(move |req| {
        if req.feedback.is_empty() && req.tool_results.is_empty() {
            ScriptedRouter::choose(&name, &args.to_string())
        } else {
            let to = req
                .options
                .iter()
                .find(|o| o.kind == OptionKind::Transition)
                .map(|o| o.name.clone())
                .unwrap_or_default();
            ScriptedRouter::choose(&to, "{}")
        }
    }))
}

/// One cell: a run created directly in `state`, one step with a router asking for `name`.
/// Returns (executions of the real tool named `name` caused by the router, router asks,
/// every executed tool name).
async fn cell<A, H>(
    runner_for: &dyn Fn(Arc<ScriptedRouter>, Arc<CallLog>) -> Runner<A, H>,
    state: &A,
    name: &str,
    original: &str,
    run_id: &str,
) -> Result<(u32, u64, Vec<String>), String>
where
    A: Agent + Handle<H>,
    H: Send + Sync + 'static,
{
    let log = CallLog::new();
    let router = router(name.to_owned(), input_for(original));
    let runner = runner_for(Arc::clone(&router), Arc::clone(&log));
    runner
        .store()
        .create_run(NewRun::new(
            run_id.to_owned(),
            A::NAME.to_owned(),
            A::graph().fingerprint(),
            state.state_name().to_owned(),
            serde_json::to_value(state).map_err(|e| e.to_string())?,
        ))
        .await
        .map_err(|e| e.to_string())?;
    // A state that waits is woken at once; agents without a wait take no signal.
    if A::graph().signals_waited_for().contains(&"confirm") {
        runner
            .signal(run_id, "confirm", json!({"ok": true}))
            .await
            .map_err(|e| e.to_string())?;
    }
    advance(&runner, run_id, 1).await?;
    let executed: Vec<String> = log.calls_of(run_id).into_iter().map(|c| c.tool).collect();
    let by_router = executed.iter().filter(|t| *t == name).count();
    Ok((
        u32::try_from(by_router).unwrap_or(u32::MAX),
        router.calls(),
        executed,
    ))
}

/// Check one agent's matrix; returns the failures.
async fn matrix<A, H>(
    runner_for: &dyn Fn(Arc<ScriptedRouter>, Arc<CallLog>) -> Runner<A, H>,
    states: &[A],
    cells: &mut usize,
) -> Vec<String>
where
    A: Agent + Handle<H>,
    H: Send + Sync + 'static,
{
    let graph = A::graph();
    let mut failures = Vec::new();
    for state in states {
        let desc = graph
            .state(state.state_name())
            .expect("a state of the graph");
        let llm = desc.route == agent_core::Routing::Llm;
        for (i, (name, original)) in candidates().into_iter().enumerate() {
            *cells += 1;
            let run_id = format!("{}-{}-{i}", A::NAME, desc.name);
            let legal = desc.tools.contains(&name);
            match cell(runner_for, state, &name, original, &run_id).await {
                Err(e) => failures.push(format!("{}/{name:?}: {e}", desc.name)),
                Ok((by_router, asks, executed)) => {
                    // Whatever ran in this step was legal in the state.
                    if let Some(bad) = executed.iter().find(|t| !desc.tools.contains(t)) {
                        failures.push(format!(
                            "{}/{name:?}: `{bad}` executed, not legal in the state",
                            desc.name
                        ));
                    }
                    if llm {
                        let expected = u32::from(legal);
                        if by_router != expected {
                            failures.push(format!(
                                "{}/{name:?}: executed {by_router} time(s), expected {expected}",
                                desc.name
                            ));
                        }
                    } else if asks != 0 {
                        failures.push(format!(
                            "{}/{name:?}: the router was asked in a handler-routed state",
                            desc.name
                        ));
                    }
                }
            }
        }
    }
    failures
}

/// The fixture agent: every state; only `Decide` consults the router.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixture_agent_mediation_matrix() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let world = Arc::new(World::default());
    let runner_for = |router: Arc<ScriptedRouter>, log: Arc<CallLog>| {
        order::runner(
            &store,
            probe_all(&order::tools(&world), &log, &pass()),
            router,
            RunnerConfig {
                max_reasks: 1,
                ..order::config("mediator", std::time::Duration::from_secs(5))
            },
        )
    };
    let items = vec!["a".to_owned()];
    let states = [
        Order::Start {
            items: items.clone(),
        },
        Order::Decide {
            items: items.clone(),
            reservations: vec![],
        },
        Order::Pay { cents: 100 },
        Order::Confirm {
            payment_id: "p".into(),
        },
        Order::Done {
            payment_id: "p".into(),
        },
        Order::Cancelled,
        Order::Failed { reason: "r".into() },
    ];
    assert_eq!(states.len(), Order::graph().states.len(), "every state");
    let mut cells = 0;
    let failures = matrix(&runner_for, &states, &mut cells).await;
    eprintln!(
        "FIGURE item10 fixture agent: states={} names={} cells={cells} failures={}",
        states.len(),
        candidates().len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

/// `Mediated`: every state asks the router, with no tool, reads, writes, a hybrid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_routed_states_mediation_matrix() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let world = Arc::new(World::default());
    let runner_for = |router: Arc<ScriptedRouter>, log: Arc<CallLog>| {
        Runner::<Mediated, Follow>::builder(
            Arc::clone(&store),
            Follow,
            probe_all(&order::tools(&world), &log, &pass()),
        )
        .router(router)
        .config(RunnerConfig {
            max_reasks: 1,
            ..order::config("mediator", std::time::Duration::from_secs(5))
        })
        .build()
        .expect("tool box matches")
    };
    let states = [
        Mediated::Bare,
        Mediated::Reads,
        Mediated::Writes,
        Mediated::Hybrid,
        Mediated::End,
    ];
    let mut cells = 0;
    let failures = matrix(&runner_for, &states, &mut cells).await;
    eprintln!(
        "FIGURE item10 all-LLM agent: states={} names={} cells={cells} failures={}",
        states.len(),
        candidates().len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Every refused name is journaled as a rejected decision with `decision.unknown_option`
/// (the audit trail shows what the model asked for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_names_are_journaled() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let world = Arc::new(World::default());
    let log = CallLog::new();
    let mut missing = Vec::new();
    for (i, (name, original)) in candidates().into_iter().enumerate() {
        if name == "Lookup" {
            continue;
        }
        let run_id = format!("journaled-{i}");
        let runner = order::runner(
            &store,
            probe_all(&order::tools(&world), &log, &pass()),
            router(name.clone(), input_for(original)),
            order::config("mediator", std::time::Duration::from_secs(5)),
        );
        runner
            .start(&run_id, agent_conformance::fixture::initial(&["a"]))
            .await
            .unwrap();
        advance(&runner, &run_id, 2).await.unwrap();
        let journal = store.journal(&run_id, Some(1)).await.unwrap();
        let rejected = journal.iter().any(|e| {
            e.kind == EntryKind::Decision
                && e.error_code.as_deref() == Some("decision.unknown_option")
        });
        if !rejected {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "no rejection journaled for {missing:?}");
}
