//! Runner overhead per step on the in-memory store, against calling the same handler
//! directly (no journal, no store, no commit), measured in the same run.
//!
//! ```sh
//! cargo bench -p durable-agents-core --bench runner_overhead
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use durable_agents::__private::{Join, StepIo};
use durable_agents::agent::Handle;
use durable_agents::events::TokenSink;
use durable_agents::graph::GraphDescription;
use durable_agents::runner::{Runner, RunnerConfig};
use durable_agents::store::RunRecord;
use durable_agents::store::memory::MemoryStore;
use durable_agents::tool::{Execute, Tool, ToolBox, ToolContext, ToolError, kind};
use durable_agents::{Agent, Ctx, StepError, StepResult, Wake};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Echoes its input (a read tool with caching off, so every step executes it).
#[derive(Debug)]
struct Echo;

impl Tool for Echo {
    const NAME: &'static str = "Echo";
    type Kind = kind::Read;
    type Input = u64;
    type Output = u64;
    fn policy() -> durable_agents::tool::ToolPolicy {
        durable_agents::tool::ToolPolicy {
            cache: false,
            ..durable_agents::tool::ToolPolicy::default()
        }
    }
}

impl Execute for Echo {
    async fn execute(&self, input: u64, _: &ToolContext) -> Result<u64, ToolError> {
        Ok(input)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, durable_agents::Agent)]
#[agent(tools(read(Echo)))]
enum Counter {
    #[agent(initial, tools(Echo), to(Counting, Done))]
    Counting { n: u64, limit: u64 },
    #[agent(terminal)]
    Done { n: u64 },
}

#[derive(Debug, Clone, Copy)]
struct Count;

impl CounterHandlers for Count {
    async fn counting(
        &self,
        ctx: Ctx<'_, counter::Counting>,
        counter::Counting { n, limit }: counter::Counting,
    ) -> StepResult<counter::Counting> {
        let n = ctx.call::<Echo>(n).await? + 1;
        Ok(if n >= limit {
            ctx.to(counter::Done { n })
        } else {
            ctx.to(counter::Counting { n, limit })
        })
    }
}

/// The baseline's side of a step: calls the tool directly, journals nothing.
struct Direct;

impl StepIo for Direct {
    fn run_id(&self) -> &'static str {
        "direct"
    }
    fn version(&self) -> u64 {
        0
    }
    fn call<'a>(
        &'a self,
        _: &'static str,
        input: Value,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let cx = ToolContext {
                agent: "bench",
                run_id: String::new(),
                state: String::new(),
                version: 0,
                call_index: 0,
                attempt: 1,
                idempotency_key: None,
                tokens: TokenSink::default(),
            };
            let n: u64 =
                serde_json::from_value(input).map_err(|e| ToolError::permanent(e.to_string()))?;
            Ok(Value::from(Echo.execute(n, &cx).await?))
        })
    }
    fn route(&self) -> Option<&str> {
        None
    }
    fn route_arguments(&self) -> Option<&Value> {
        None
    }
    fn wake(&self) -> Option<Wake> {
        None
    }
    fn spawn<'a>(
        &'a self,
        _: &'static GraphDescription,
        _: Vec<Value>,
        _: Join,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StepError>> {
        Box::pin(std::future::ready(Err(StepError::handler(
            "the baseline starts no children",
        ))))
    }
}

async fn direct(steps: u64) -> Duration {
    let started = Instant::now();
    let mut state = Counter::Counting { n: 0, limit: steps };
    while !matches!(state, Counter::Done { .. }) {
        state = state.handle(&Count, &Direct).await.expect("direct step");
    }
    started.elapsed()
}

async fn framework(steps: u64, runs: u64) -> Duration {
    let store = Arc::new(MemoryStore::new());
    let runner = Runner::<Counter, Count>::builder(store, Count, ToolBox::new().with(Echo))
        .config(RunnerConfig {
            worker_id: "bench".into(),
            ..RunnerConfig::default()
        })
        .build()
        .expect("tool box matches");
    let started = Instant::now();
    for r in 0..runs {
        let id = format!("bench-{r}");
        runner
            .start(&id, Counter::Counting { n: 0, limit: steps })
            .await
            .expect("start");
        let done = runner.run(&id).await.expect("run");
        assert_eq!(done.state_name, "Done");
    }
    started.elapsed()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let steps = 200;
    let runs = 20;
    let _ = Counter::graph();
    // Warm up both paths.
    direct(steps).await;
    framework(steps, 2).await;
    let mut direct_total = Duration::ZERO;
    for _ in 0..runs {
        direct_total += direct(steps).await;
    }
    let framework_total = framework(steps, runs).await;
    let n = f64::from(u32::try_from(steps * runs).unwrap_or(u32::MAX));
    let direct_us = direct_total.as_secs_f64() * 1e6 / n;
    let framework_us = framework_total.as_secs_f64() * 1e6 / n;
    println!(
        "runner overhead per step, in-memory store ({runs} runs x {steps} steps, one tool call per step)"
    );
    println!("  direct handler call : {direct_us:>9.2} µs/step");
    println!(
        "  through the runner  : {framework_us:>9.2} µs/step (journal entry, CAS commit, history delta)"
    );
    println!(
        "  overhead            : {:>9.2} µs/step",
        framework_us - direct_us
    );
    println!("  ratio runner/direct : {:>9.1}x", framework_us / direct_us);
}
