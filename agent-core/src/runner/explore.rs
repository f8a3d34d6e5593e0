//! Path exploration of a declared graph: runs of an agent on a memory store, driven by a
//! scripted router that chooses, across runs, every option the model could choose in every
//! routed state (each transition, each legal tool), then heads for work not yet done or for
//! the end. What the runs took is read back as a [`Coverage`], with each untaken edge and
//! tool said why (no sample input to call it with, decided by a handler, not reached within
//! the bound), and each run's choices kept as a script a test can replay.
//!
//! It explores what the model decides. What handlers decide depends on the data they are
//! given: pass several initial states to reach their branches. Tools run for real (give the
//! runner the test doubles a test would); a signal a run waits for is sent with the sample
//! payload given for it; a timer is not waited for.
//!
//! ```text
//! let found = explore(&[Order::Start { items: vec!["apple".into()] }], &ExploreConfig::default(),
//!     |store, router| Runner::builder(store, Behaviour, tools()).router(router).build()).await?;
//! assert_eq!(found.coverage.edges_taken(), (7, 7));
//! ```

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{Value, json};

use super::{Runner, RunnerError};
use crate::agent::{Agent, Handle};
use crate::graph::{Coverage, GraphDescription, Routing};
use crate::router::{
    OptionKind, RouteOption, RouteRequest, Router, RouterError, RouterReply, ScriptedRouter,
};
use crate::store::memory::MemoryStore;
use crate::store::{RunStatus, Store, WaitingFor};
use crate::tool::ErrorClass;

/// How far to explore, and the sample values the router and the signals need.
#[derive(Clone, Debug)]
pub struct ExploreConfig {
    /// At most this many runs.
    pub max_runs: usize,
    /// Decisions one run may take exploring; past them, it heads for the nearest terminal
    /// state (a model-routed loop ends).
    pub decisions_per_run: usize,
    /// A tool's input to call it with, by tool name. A tool whose input schema requires no
    /// field is called with `{}` (`null` for a tool without input) without one.
    pub tool_inputs: BTreeMap<String, Value>,
    /// A transition's argument (`to(Pay(args = PayArgs))`), by target state.
    pub transition_arguments: BTreeMap<String, Value>,
    /// The payload to send when a run waits for a signal, by signal name.
    pub signals: BTreeMap<String, Value>,
}

impl Default for ExploreConfig {
    fn default() -> Self {
        Self {
            max_runs: 64,
            decisions_per_run: 16,
            tool_inputs: BTreeMap::new(),
            transition_arguments: BTreeMap::new(),
            signals: BTreeMap::new(),
        }
    }
}

/// What the exploration reached.
#[derive(Clone, Debug, Serialize)]
pub struct Exploration {
    /// Every declared edge and legal tool, with how often the runs took it.
    pub coverage: Coverage,
    /// The runs, each with the choices the router made: scripts to replay in a test.
    pub scenarios: Vec<Scenario>,
    /// The edges and tools no run took, each with why.
    pub unexplored: Vec<Unexplored>,
}

impl std::fmt::Display for Exploration {
    /// The coverage in two counts, then each edge and tool not taken with why: what a test
    /// prints when it asserts full coverage.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (edges, all_edges) = self.coverage.edges_taken();
        let (tools, all_tools) = self.coverage.tools_called();
        write!(
            f,
            "{}: {} runs, edges {edges}/{all_edges}, tools {tools}/{all_tools}",
            self.coverage.agent,
            self.scenarios.len()
        )?;
        for u in &self.unexplored {
            write!(f, "\n  {} -> {}: {}", u.state, u.option, u.why)?;
        }
        Ok(())
    }
}

/// One run of the exploration.
#[derive(Clone, Debug, Serialize)]
pub struct Scenario {
    /// The run.
    pub run_id: String,
    /// Its initial state.
    pub initial: String,
    /// The router's choices, in order.
    pub choices: Vec<Choice>,
    /// How it ended (or that it waits).
    pub status: RunStatus,
}

/// One choice of the exploring router.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Choice {
    /// The state deciding.
    pub state: String,
    /// The option chosen: a target state or a tool.
    pub option: String,
    /// Its arguments.
    pub arguments: Value,
}

/// An edge or a tool no run took, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unexplored {
    /// The state.
    pub state: String,
    /// The edge's target state, or the tool.
    pub option: String,
    /// Why no run took it.
    pub why: String,
}

/// Explore agent `A` from `initial` (one run per initial state in turn, until a round of
/// them finds nothing new or [`ExploreConfig::max_runs`]): `build` makes the runner over the
/// exploration's store with its router.
///
/// # Errors
/// What `build` or the runner returns (a run that fails is an outcome, not an error).
///
/// # Panics
/// When `initial` is empty.
pub async fn explore<A, H, F>(
    initial: &[A],
    config: &ExploreConfig,
    build: F,
) -> Result<Exploration, RunnerError>
where
    A: Agent + Handle<H> + Clone,
    H: Send + Sync + 'static,
    F: Fn(Arc<dyn Store>, Arc<dyn Router>) -> Result<Runner<A, H>, RunnerError>,
{
    assert!(
        !initial.is_empty(),
        "explore needs at least one initial state"
    );
    let graph = A::graph();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let explorer = Arc::new(Explorer::new(graph, config.clone()));
    let runner = build(Arc::clone(&store), Arc::clone(&explorer) as Arc<dyn Router>)?;
    let mut scenarios = Vec::new();
    let mut waits = BTreeMap::new();
    let mut found_in_round = false;
    for n in 0..config.max_runs {
        let start = initial[n % initial.len()].clone();
        let run_id = format!("explore-{n}");
        let initial_name = start.state_name().to_owned();
        let before = explorer.tried();
        explorer.begin_run();
        runner.start(&run_id, start).await?;
        let mut record = runner.run(&run_id).await?;
        // A run that waits for a signal gets the sample payload; a bound keeps a state that
        // waits again and again from running forever.
        for _ in 0..config.decisions_per_run {
            if record.status != RunStatus::Waiting {
                break;
            }
            let Some(WaitingFor::Signal(name)) = record.waiting_for.clone() else {
                break;
            };
            let Some(payload) = config.signals.get(&name) else {
                waits.entry(record.state_name.clone()).or_insert_with(|| {
                    format!("waits for signal `{name}`, and no sample payload was given")
                });
                break;
            };
            runner.signal(&run_id, &name, payload.clone()).await?;
            record = runner.run(&run_id).await?;
        }
        found_in_round |= explorer.tried() > before;
        scenarios.push(Scenario {
            run_id,
            initial: initial_name,
            choices: explorer.take_choices(),
            status: record.status,
        });
        // A whole round of the initial states found nothing new: more runs would repeat it.
        if (n + 1) % initial.len() == 0 {
            if !found_in_round {
                break;
            }
            found_in_round = false;
        }
    }
    let mut coverage = Coverage::new(graph);
    for s in &scenarios {
        let history = store.history(&s.run_id).await?;
        let journal = store.journal(&s.run_id, None).await?;
        coverage.add_run(&history, &journal);
    }
    let unexplored = explorer.why_untaken(&coverage, &waits, scenarios.len());
    Ok(Exploration {
        coverage,
        scenarios,
        unexplored,
    })
}

/// The exploring router: remembers what it chose across runs, and why it could not choose
/// an option.
#[derive(Debug)]
struct Explorer {
    graph: &'static GraphDescription,
    config: ExploreConfig,
    plan: Mutex<Plan>,
}

#[derive(Debug, Default)]
struct Plan {
    /// `(state, option)` chosen at least once.
    tried: BTreeSet<(String, String)>,
    /// `(state, option)` the explorer cannot choose, and why.
    unusable: BTreeMap<(String, String), String>,
    /// This run's choices.
    choices: Vec<Choice>,
}

impl Explorer {
    fn new(graph: &'static GraphDescription, config: ExploreConfig) -> Self {
        Self {
            graph,
            config,
            plan: Mutex::new(Plan::default()),
        }
    }

    fn plan(&self) -> std::sync::MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tried(&self) -> usize {
        self.plan().tried.len()
    }

    fn begin_run(&self) {
        self.plan().choices.clear();
    }

    fn take_choices(&self) -> Vec<Choice> {
        std::mem::take(&mut self.plan().choices)
    }

    /// The arguments to choose `option` with, or why it cannot be chosen.
    fn arguments(&self, option: &RouteOption) -> Result<Value, String> {
        let (given, what) = match option.kind {
            OptionKind::Tool => (self.config.tool_inputs.get(&option.name), "tool_inputs"),
            OptionKind::Transition => (
                self.config.transition_arguments.get(&option.name),
                "transition_arguments",
            ),
        };
        if let Some(value) = given {
            return Ok(value.clone());
        }
        let requires = option
            .schema
            .as_ref()
            .and_then(|s| s.get("required"))
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty());
        if requires {
            Err(format!(
                "no sample {} to choose it with (`ExploreConfig::{what}`)",
                if option.kind == OptionKind::Tool {
                    "input"
                } else {
                    "argument"
                }
            ))
        } else if option.schema.as_ref().and_then(|s| s.get("type")) == Some(&json!("null")) {
            // A tool without input (`()`).
            Ok(Value::Null)
        } else {
            Ok(json!({}))
        }
    }

    /// Hops from `from` to the nearest state `goal` accepts, along declared edges.
    fn distance(&self, from: &str, goal: impl Fn(&str) -> bool) -> Option<usize> {
        let mut seen = BTreeSet::from([from.to_owned()]);
        let mut queue = VecDeque::from([(from.to_owned(), 0)]);
        while let Some((state, d)) = queue.pop_front() {
            if goal(&state) {
                return Some(d);
            }
            for e in self.graph.edges().filter(|e| e.from == state) {
                if seen.insert(e.to.to_owned()) {
                    queue.push_back((e.to.to_owned(), d + 1));
                }
            }
        }
        None
    }

    /// Whether `state` has a model-routed option not yet tried and not known unusable.
    fn has_work(&self, plan: &Plan, state: &str) -> bool {
        let Some(desc) = self.graph.state(state) else {
            return false;
        };
        desc.route == Routing::Llm
            && desc.to.iter().chain(&desc.tools).any(|o| {
                let key = (state.to_owned(), o.clone());
                !plan.tried.contains(&key) && !plan.unusable.contains_key(&key)
            })
    }

    /// Why each untaken edge and tool was not taken.
    fn why_untaken(
        &self,
        coverage: &Coverage,
        waits: &BTreeMap<String, String>,
        runs: usize,
    ) -> Vec<Unexplored> {
        let plan = self.plan();
        let why = |state: &str, option: &str| {
            let routed = self
                .graph
                .state(state)
                .is_some_and(|s| s.route == Routing::Llm);
            let key = (state.to_owned(), option.to_owned());
            if let Some(why) = plan.unusable.get(&key) {
                why.clone()
            } else if let Some(wait) = waits.get(state) {
                wait.clone()
            } else if !routed {
                "decided by the state's handler: give an initial state whose run takes it"
                    .to_owned()
            } else if plan.tried.contains(&key) {
                "chosen, and refused by the runner (the sample does not fit its schema)".to_owned()
            } else {
                format!("the state was not reached in {runs} runs")
            }
        };
        let edges = (coverage.edges.iter())
            .filter(|e| e.taken == 0)
            .map(|e| Unexplored {
                state: e.from.clone(),
                option: e.to.clone(),
                why: if e.on_error {
                    "an `on_error` path: taken when a step of the state fails".to_owned()
                } else {
                    why(&e.from, &e.to)
                },
            });
        let tools = (coverage.tools.iter())
            .filter(|t| t.calls == 0)
            .map(|t| Unexplored {
                state: t.state.clone(),
                option: t.tool.clone(),
                why: why(&t.state, &t.tool),
            });
        edges.chain(tools).collect()
    }
}

#[async_trait]
impl Router for Explorer {
    async fn decide(&self, request: &RouteRequest) -> Result<RouterReply, RouterError> {
        let mut plan = self.plan();
        let state = request.state.as_str();
        let usable: Vec<(&RouteOption, Value)> = (request.options.iter())
            .filter_map(|o| match self.arguments(o) {
                Ok(arguments) => Some((o, arguments)),
                Err(why) => {
                    plan.unusable
                        .insert((state.to_owned(), o.name.clone()), why);
                    None
                }
            })
            .collect();
        let untried = |o: &RouteOption| !plan.tried.contains(&(state.to_owned(), o.name.clone()));
        let exploring = plan.choices.len() < self.config.decisions_per_run;
        // An answer refused by the runner is asked again with feedback: the option asked
        // last is known, so the next pick differs.
        let rejected = (!request.feedback.is_empty())
            .then(|| plan.choices.last().map(|c| c.option.clone()))
            .flatten();
        let transitions = || {
            usable
                .iter()
                .filter(|(o, _)| o.kind == OptionKind::Transition)
                .filter(|(o, _)| Some(&o.name) != rejected.as_ref())
        };
        let new = exploring
            .then(|| {
                // Each tool once, then each transition once.
                (usable.iter())
                    .filter(|(o, _)| Some(&o.name) != rejected.as_ref())
                    .find(|(o, _)| untried(o) && o.kind == OptionKind::Tool)
                    .or_else(|| transitions().find(|(o, _)| untried(o)))
            })
            .flatten();
        let (option, arguments) = if let Some(found) = new {
            found.clone()
        } else {
            // Toward a state with options not yet tried, else toward the end.
            let to_work = |o: &RouteOption| self.distance(&o.name, |s| self.has_work(&plan, s));
            let to_end = |o: &RouteOption| {
                self.distance(&o.name, |s| self.graph.state(s).is_some_and(|d| d.terminal))
            };
            let best = transitions().min_by_key(|(o, _)| {
                let work = if exploring { to_work(o) } else { None };
                (work.unwrap_or(usize::MAX), to_end(o).unwrap_or(usize::MAX))
            });
            let Some(found) = best else {
                return Err(RouterError::new(
                    ErrorClass::Permanent,
                    format!("the explorer has no option it can choose in `{state}`"),
                ));
            };
            found.clone()
        };
        plan.tried.insert((state.to_owned(), option.name.clone()));
        plan.choices.push(Choice {
            state: state.to_owned(),
            option: option.name.clone(),
            arguments: arguments.clone(),
        });
        Ok(ScriptedRouter::choose(&option.name, &arguments.to_string()))
    }
}
