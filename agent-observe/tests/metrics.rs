//! A scrape of the Prometheus recorder after a run: the framework's metric names are
//! there with the labels `agent_core::metrics::METRICS` declares for them, and no run id is
//! among the labels' values.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agent_core::metrics::{self, METRICS};
use agent_observe::metrics::Metrics;
use durable_agents::runner::{Runner, RunnerConfig};
use durable_agents::store::memory::MemoryStore;
use durable_agents::store::{RateLimit, Store};
use durable_agents::tool::kind;
use durable_agents::{Agent, Ctx, Execute, StepResult, Tool, ToolBox, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A SKU.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Sku {
    /// Its code.
    pub sku: String,
}

/// A read that answers, except for an unknown SKU, which it refuses for good.
#[derive(Clone, Debug, Default)]
pub struct Lookup;

impl Tool for Lookup {
    const NAME: &'static str = "Lookup";
    type Kind = kind::Read;
    type Input = Sku;
    type Output = u64;
}

impl Execute for Lookup {
    async fn execute(&self, input: Sku, _: &ToolContext) -> Result<u64, ToolError> {
        match input.sku.as_str() {
            "unknown" => Err(ToolError::permanent("no such sku")),
            _ => Ok(42),
        }
    }
}

/// Look up, then done.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(read(Lookup)))]
pub enum Price {
    #[agent(initial, tools(Lookup), to(Done))]
    Start { sku: String },
    #[agent(terminal)]
    Done { cents: u64 },
}

/// The handlers.
#[derive(Debug, Clone, Copy)]
pub struct Handlers;

impl PriceHandlers for Handlers {
    async fn start(
        &self,
        ctx: Ctx<'_, price::Start>,
        price::Start { sku }: price::Start,
    ) -> StepResult<price::Start> {
        // A failed call the handler gets over: counted among the tool errors.
        let _ = ctx
            .call::<Lookup>(Sku {
                sku: "unknown".into(),
            })
            .await;
        let cents = ctx.call::<Lookup>(Sku { sku }).await?;
        Ok(ctx.to(price::Done { cents }))
    }
}

/// The series of a scrape: name and labels of each sample line.
fn series(scrape: &str) -> Vec<(String, BTreeMap<String, String>)> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let (head, _value) = line.rsplit_once(' ').expect("a sample has a value");
            let Some((name, labels)) = head.split_once('{') else {
                return (head.to_owned(), BTreeMap::new());
            };
            let labels = labels
                .trim_end_matches('}')
                .split("\",")
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("a label is key=value");
                    (k.to_owned(), v.trim_matches('"').to_owned())
                })
                .collect();
            (name.to_owned(), labels)
        })
        .collect()
}

#[tokio::test]
async fn a_scrape_names_every_metric_with_its_declared_labels_and_no_run_id() {
    let metrics = Metrics::install().expect("the recorder installs");
    assert!(
        Metrics::install().is_ok(),
        "installing again returns the same recorder"
    );
    let store = Arc::new(MemoryStore::new());
    // A rate limit on the tool, so the call takes a turn and its wait is recorded.
    let lookups = RateLimit::tool_calls("Lookup", 10, Duration::from_secs(1)).unwrap();
    let runner = Runner::<Price, _>::builder(
        Arc::clone(&store) as Arc<dyn Store>,
        Handlers,
        ToolBox::new().with(Lookup),
    )
    .config(RunnerConfig {
        rate_limits: vec![lookups],
        ..RunnerConfig::default()
    })
    .build()
    .unwrap();
    let run_id = "run-4f1b2c3d-secret-ish";
    runner
        .start(
            run_id,
            Price::Start {
                sku: "sku-1".into(),
            },
        )
        .await
        .unwrap();
    runner.run(run_id).await.unwrap();
    metrics::record_run_counts(store.as_ref()).await.unwrap();
    let follower = metrics::Follower::open("sse");

    let scrape = metrics.render();
    assert!(
        !scrape.contains(run_id),
        "a run id reached the scrape:\n{scrape}"
    );
    let samples = series(&scrape);
    for name in [
        "durable_agents_steps_total",
        "durable_agents_step_duration_seconds_bucket",
        "durable_agents_claims_total",
        "durable_agents_tool_calls_total",
        "durable_agents_tool_errors_total",
        "durable_agents_tool_call_duration_seconds_bucket",
        "durable_agents_runs",
        "durable_agents_queue_depth",
        "durable_agents_event_followers",
        "durable_agents_capacity_wait_seconds_bucket",
    ] {
        assert!(
            samples.iter().any(|(n, _)| n == name),
            "`{name}` is missing from the scrape:\n{scrape}"
        );
    }
    // Each sample's labels are the ones its metric declares (`le` on histogram buckets).
    for (name, labels) in samples
        .iter()
        .filter(|(n, _)| n.starts_with("durable_agents_"))
    {
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|b| METRICS.iter().any(|m| m.name == *b))
            .unwrap_or(name);
        let doc = METRICS
            .iter()
            .find(|m| m.name == base)
            .unwrap_or_else(|| panic!("`{name}` is not in agent_core::metrics::METRICS"));
        for key in labels.keys() {
            assert!(
                doc.labels.contains(&key.as_str()) || key == "le",
                "`{name}` carries label `{key}`, which METRICS does not declare"
            );
        }
    }
    let step = samples
        .iter()
        .find(|(n, l)| n == "durable_agents_steps_total" && l["state"] == "Start")
        .expect("a step of `Start`");
    assert_eq!(step.1["agent"], "Price");
    assert_eq!(step.1["outcome"], "completed");
    let error = samples
        .iter()
        .find(|(n, _)| n == "durable_agents_tool_errors_total")
        .expect("the refused call");
    assert_eq!(error.1["tool"], "Lookup");
    assert_eq!(error.1["class"], "permanent");
    let waited = samples
        .iter()
        .find(|(n, l)| {
            n == "durable_agents_capacity_wait_seconds_count" && l["limit"] == "tool:Lookup"
        })
        .expect("the call's turn under the tool's limit");
    assert_eq!(waited.1["agent"], "Price");
    assert!(
        scrape.contains("durable_agents_capacity_wait_seconds_bucket{")
            && scrape.contains("le=\"1800\""),
        "the capacity wait has buckets up to half an hour:\n{scrape}"
    );
    assert!(
        scrape.contains("# HELP durable_agents_steps_total "),
        "the help texts are registered:\n{scrape}"
    );
    assert!(
        scrape.contains("durable_agents_step_duration_seconds_bucket{")
            && scrape.contains("le=\"0.0005\""),
        "the step latency has the sub-millisecond bucket:\n{scrape}"
    );
    drop(follower);
}

#[test]
fn every_metric_is_named_by_the_conventions() {
    for m in METRICS {
        assert!(m.name.starts_with("durable_agents_"), "{}", m.name);
        match m.kind {
            metrics::Kind::Counter => assert!(m.name.ends_with("_total"), "{}", m.name),
            metrics::Kind::Gauge => assert!(!m.name.ends_with("_total"), "{}", m.name),
            metrics::Kind::Histogram => {}
        }
        if m.unit.is_some_and(|u| u.as_str() == "seconds") {
            assert!(m.name.ends_with("_seconds"), "{}", m.name);
        }
        assert!(!m.labels.contains(&"run_id") && !m.labels.contains(&"run"));
    }
}
