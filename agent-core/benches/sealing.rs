//! The cost of sealing and of the one redactor, against the same work without them, in one
//! run (ratios, not absolute times: this machine is noisy).
//!
//! - Per decision: a run whose model-routed state calls a tool and then takes a typed
//!   transition, both with a secret field (`password`) that is sealed in the journal, against
//!   the same run whose field is not secret (`reference`); the same configured secrets and
//!   key in both, on the memory store, alternated in rounds.
//! - Per commit: a run of steps each calling a write tool whose input holds a secret field,
//!   against the same input without one.
//!
//! The redactor alone (every encoding it looks for, on a 4 KB output) is measured by the
//! `redaction` bench.
//!
//! ```sh
//! cargo bench -p durable-agents-core --bench sealing
//! ```

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use durable_agents::router::{RouteRequest, ScriptedRouter};
use durable_agents::runner::{Runner, RunnerConfig};
use durable_agents::secrets::SealKeys;
use durable_agents::store::Store;
use durable_agents::store::memory::MemoryStore;
use durable_agents::tool::ToolsFor;
use durable_agents::{Agent, Ctx, Shared, StepResult, ToolResult, tool_fn};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Charge something (a write) with a free-form body.
#[tool_fn(write)]
pub async fn charge(Shared(_unit): Shared<Arc<()>>, body: Value) -> ToolResult<u32> {
    Ok(u32::try_from(body.to_string().len()).unwrap_or(0))
}

/// The transition's argument.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct Args {
    pub amount: u32,
    pub body: Value,
}

#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(write(Charge)))]
pub enum Bench {
    #[agent(initial, tools(Charge), to(Decide))]
    Start { n: u32, secret: bool },
    #[agent(route = llm, tools(Charge), to(Done(args = Args)))]
    Decide,
    #[agent(terminal)]
    Done,
}

#[derive(Clone, Debug, Default)]
pub struct Handlers;

fn body(secret: bool, i: u32) -> Value {
    if secret {
        json!({"password": format!("pw-{i:06}-abcdef"), "amount": i})
    } else {
        json!({"reference": format!("pw-{i:06}-abcdef"), "amount": i})
    }
}

impl BenchHandlers for Handlers {
    async fn start(
        &self,
        ctx: Ctx<'_, bench::Start>,
        bench::Start { n, secret }: bench::Start,
    ) -> StepResult<bench::Start> {
        for i in 0..n {
            ctx.call::<Charge>(body(secret, i)).await?;
        }
        Ok(ctx.to(bench::Decide))
    }

    async fn decide(
        &self,
        ctx: Ctx<'_, bench::Decide>,
        _route: bench::DecideRoute,
        _: bench::Decide,
    ) -> StepResult<bench::Decide> {
        Ok(ctx.to(bench::Done))
    }
}

fn model(secret: bool) -> Arc<ScriptedRouter> {
    Arc::new(ScriptedRouter::from_fn(move |req: &RouteRequest| {
        if req.tool_results.is_empty() {
            ScriptedRouter::choose("Charge", &json!({"body": body(secret, 1)}).to_string())
        } else {
            ScriptedRouter::choose(
                "Done",
                &json!({"amount": 1, "body": body(secret, 2)}).to_string(),
            )
        }
    }))
}

fn config() -> RunnerConfig {
    RunnerConfig {
        secrets: vec!["sk-bench-configured-0123456789".into()],
        seal_keys: SealKeys::generate("bench"),
        ..RunnerConfig::default()
    }
}

/// Runs per second of `runs` runs, each with `calls` calls in its first step.
async fn rate(secret: bool, runs: u32, calls: u32, round: u32) -> f64 {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = Runner::<Bench, _>::builder(
        Arc::clone(&store),
        Handlers,
        BenchTools::from_shared(&Arc::new(())).into_tool_box(),
    )
    .router(model(secret))
    .config(config())
    .build()
    .unwrap();
    let started = Instant::now();
    for i in 0..runs {
        let id = format!("r{round}-{secret}-{i}");
        runner
            .start(&id, Bench::Start { n: calls, secret })
            .await
            .unwrap();
        black_box(runner.run(&id).await.unwrap());
    }
    f64::from(runs) / started.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let runs = 300;
    let rounds = 5;
    for (what, calls) in [
        (
            "per decision (a routed tool call and a typed transition)",
            0,
        ),
        ("per commit (a step of 8 write calls, then the decision)", 8),
    ] {
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            without.push(rt.block_on(rate(false, runs, calls, round)));
            with.push(rt.block_on(rate(true, runs, calls, round)));
        }
        let (w, wo) = (median(with), median(without));
        println!("{what}, {runs} runs x {rounds} rounds, memory store:");
        println!("  without a secret field : {wo:>9.0} runs/s");
        println!(
            "  sealed secret fields   : {w:>9.0} runs/s ({:.2} of without)",
            w / wo
        );
    }
}
