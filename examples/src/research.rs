//! The research agent (`cargo run --example research`): a [`Report`] plans a question into
//! topics, starts one [`Research`] child per topic and waits for all of them, has the router
//! review the findings, then publishes one report.
//!
//! Each child searches three sources at once (`Ctx::call_each`). The search and the
//! publisher are offline stand-ins with a fixed corpus, named so; the router is scripted.
//! Everything else is the real framework: the children are ordinary runs, claimed by their
//! own worker, and the parent waits for them in the store, holding no worker.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use durable_agents::agent::ChildOutcome;
use durable_agents::router::{RouterReply, ScriptedRouter};
use durable_agents::tool::{Execute, ToolBox, ToolContext, ToolError};
use durable_agents::{Agent, Ctx, StepResult, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One search: a topic in one source.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Query {
    /// The topic.
    pub topic: String,
    /// Where to look: `papers`, `news` or `forums`.
    pub source: String,
}

/// What a source says about a topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Snippet {
    /// The source.
    pub source: String,
    /// The text.
    pub text: String,
}

/// A topic's findings, as a child hands them to its parent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Finding {
    /// The topic.
    pub topic: String,
    /// One line per source.
    pub notes: Vec<String>,
}

/// A report to publish.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Draft {
    /// The question.
    pub question: String,
    /// The text.
    pub text: String,
}

/// Split a question into the topics to research (a fixed plan: an offline stand-in).
#[derive(Debug, Tool)]
#[tool(kind = read, input = String, output = Vec<String>, timeout_ms = 2000)]
pub struct Outline;

/// Search one source for a topic (a scripted stand-in: a fixed corpus, 40 ms per search).
#[derive(Debug, Tool)]
#[tool(kind = read, input = Query, output = Snippet, timeout_ms = 2000)]
pub struct Search;

/// Publish a report: writes `<dir>/<idempotency key>.md`, once per key.
#[derive(Debug, Tool)]
#[tool(kind = write, input = Draft, output = String, timeout_ms = 2000)]
pub struct Publish {
    /// Where reports go.
    pub dir: PathBuf,
}

impl Execute for Outline {
    async fn execute(&self, question: String, _: &ToolContext) -> Result<Vec<String>, ToolError> {
        let subject = question.trim_end_matches('?');
        Ok(["history", "current practice", "open problems"]
            .iter()
            .map(|aspect| format!("{subject}: {aspect}"))
            .collect())
    }
}

impl Execute for Search {
    async fn execute(&self, q: Query, _: &ToolContext) -> Result<Snippet, ToolError> {
        tokio::time::sleep(Duration::from_millis(40)).await;
        let aspect = q.topic.rsplit(": ").next().unwrap_or(&q.topic);
        let text = match (q.source.as_str(), aspect) {
            ("papers", "history") => "first described in the 1970s, formalised in the 1980s",
            ("papers", "current practice") => "most systems journal each step before acting",
            ("papers", "open problems") => "exactly-once effects across services remain costly",
            ("news", "history") => "early adopters were banks and airlines",
            ("news", "current practice") => "teams move agents onto workflow engines",
            ("news", "open problems") => "outages still replay non-deterministic calls",
            ("forums", "history") => "people first hit it when retries doubled payments",
            ("forums", "current practice") => "idempotency keys are the common advice",
            ("forums", "open problems") => "nobody agrees how to undo partial work",
            _ => "nothing found",
        };
        Ok(Snippet {
            source: q.source,
            text: text.to_owned(),
        })
    }
}

impl Execute for Publish {
    async fn execute(&self, draft: Draft, cx: &ToolContext) -> Result<String, ToolError> {
        let key = cx.idempotency_key().replace(['/', ':'], "_");
        let path = self.dir.join(format!("{key}.md"));
        std::fs::create_dir_all(&self.dir)
            .and_then(|()| {
                std::fs::write(&path, format!("# {}\n\n{}\n", draft.question, draft.text))
            })
            .map_err(|e| ToolError::retryable(format!("cannot write {}: {e}", path.display())))?;
        Ok(path.display().to_string())
    }
}

/// A child: researches one topic in three sources at once.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(read(Search)))]
pub enum Research {
    /// Search every source at once.
    #[agent(initial, tools(Search), to(Found), on_error = Failed)]
    Searching {
        /// The topic.
        topic: String,
    },
    /// The topic's findings.
    #[agent(terminal)]
    Found(Finding),
    /// A search failed after its retries.
    #[agent(terminal)]
    Failed(String),
}

/// The parent: plans, fans out to [`Research`] children, has the findings reviewed, and
/// publishes.
#[derive(Clone, Debug, Serialize, Deserialize, Agent)]
#[agent(tools(read(Outline), write(Publish)))]
pub enum Report {
    /// Outline the question, then research every topic in a child of its own and wait for
    /// them all.
    #[agent(initial, tools(Outline), children(Research), to(Reviewing))]
    Planning {
        /// The question.
        question: String,
    },
    /// The router reads the findings and decides whether they make a report.
    #[agent(route = llm, to(Writing, Abandoned))]
    Reviewing {
        /// The question.
        question: String,
        /// What the children found, in the order of the topics.
        findings: Vec<Finding>,
        /// Topics whose research did not complete.
        missing: Vec<String>,
    },
    /// Publish the report.
    #[agent(tools(Publish), to(Published))]
    Writing {
        /// The question.
        question: String,
        /// The findings to write up.
        findings: Vec<Finding>,
    },
    /// Published at this path.
    #[agent(terminal)]
    Published {
        /// Where the report is.
        path: String,
    },
    /// The findings did not make a report.
    #[agent(terminal)]
    Abandoned,
}

/// The handlers of both agents.
#[derive(Clone, Copy, Debug, Default)]
pub struct Handlers;

impl ResearchHandlers for Handlers {
    async fn searching(
        &self,
        ctx: Ctx<'_, research::Searching>,
        research::Searching { topic }: research::Searching,
    ) -> StepResult<research::Searching> {
        let queries = ["papers", "news", "forums"].map(|source| Query {
            topic: topic.clone(),
            source: source.to_owned(),
        });
        let mut notes = Vec::new();
        for snippet in ctx.call_each::<Search>(queries, 3).await {
            let s = snippet?;
            notes.push(format!("{}: {}", s.source, s.text));
        }
        Ok(ctx.to(research::Found(Finding { topic, notes })))
    }
}

impl ReportHandlers for Handlers {
    async fn planning(
        &self,
        ctx: Ctx<'_, report::Planning>,
        report::Planning { question }: report::Planning,
    ) -> StepResult<report::Planning> {
        let topics = ctx.call::<Outline>(question.clone()).await?;
        let children = topics.iter().map(|topic| Research::Searching {
            topic: topic.clone(),
        });
        // Suspends the step here until every child is final; the parent is stored as
        // waiting meanwhile. Resumed, the outline above is served from the journal.
        let mut findings = Vec::new();
        let mut missing = Vec::new();
        for (child, topic) in ctx
            .spawn_all::<Research>(children)
            .await?
            .into_iter()
            .zip(topics)
        {
            match child.outcome {
                ChildOutcome::Completed(Research::Found(f)) => findings.push(f),
                _ => missing.push(topic),
            }
        }
        Ok(ctx.to(report::Reviewing {
            question,
            findings,
            missing,
        }))
    }

    async fn reviewing(
        &self,
        ctx: Ctx<'_, report::Reviewing>,
        route: report::ReviewingRoute,
        report::Reviewing {
            question, findings, ..
        }: report::Reviewing,
    ) -> StepResult<report::Reviewing> {
        Ok(match route {
            report::ReviewingRoute::Writing => ctx.to(report::Writing { question, findings }),
            report::ReviewingRoute::Abandoned => ctx.to(report::Abandoned),
        })
    }

    async fn writing(
        &self,
        ctx: Ctx<'_, report::Writing>,
        report::Writing { question, findings }: report::Writing,
    ) -> StepResult<report::Writing> {
        let mut text = String::new();
        for f in &findings {
            let _ = writeln!(text, "## {}", f.topic);
            for n in &f.notes {
                let _ = writeln!(text, "- {n}");
            }
            text.push('\n');
        }
        let path = ctx.call::<Publish>(Draft { question, text }).await?;
        Ok(ctx.to(report::Published { path }))
    }
}

/// The tools of the parent, publishing into `dir`.
#[must_use]
pub fn report_tools(dir: PathBuf) -> ToolBox {
    ToolBox::new().with(Outline).with(Publish { dir })
}

/// The tools of a child.
#[must_use]
pub fn research_tools() -> ToolBox {
    ToolBox::new().with(Search)
}

/// A scripted reviewer (an offline stand-in, not a model): writes the report when no topic
/// is missing, else abandons it.
#[must_use]
pub fn scripted_reviewer() -> ScriptedRouter {
    ScriptedRouter::from_fn(|req| -> RouterReply {
        let missing = req
            .state_data
            .get("Reviewing")
            .and_then(|s| s.get("missing"))
            .and_then(serde_json::Value::as_array)
            .is_some_and(|m| !m.is_empty());
        ScriptedRouter::choose(if missing { "Abandoned" } else { "Writing" }, "{}")
    })
}
