//! The checked graph of an agent, as data.
//!
//! `#[derive(Agent)]` checks the graph at compile time and emits one [`GraphDescription`]
//! per agent. It is the single table that the runner, the router and `agentctl` read, so
//! generated code and the runtime description cannot disagree. It serializes to JSON and
//! YAML (round-trip), exports to Graphviz DOT and Mermaid, and has a stable
//! [fingerprint](GraphDescription::fingerprint).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::store::Budget;
use crate::store::records::ToolKind;

mod coverage;
mod export;

pub use coverage::{Coverage, EdgeCoverage, ToolCoverage};

/// The whole graph of one agent: its states in declaration order and the tools it declares.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphDescription {
    /// The agent's name (the enum's name unless overridden with `#[agent(name = "...")]`).
    pub agent: String,
    /// The agent's version (`#[agent(version = N)]`). Left out of the JSON (and so of the
    /// fingerprint) when it is 1, so graphs written before versions keep their fingerprint.
    #[serde(default = "first_version", skip_serializing_if = "is_first_version")]
    pub version: u32,
    /// Whether the agent was declared `#[agent(dag)]` (no cycles allowed).
    #[serde(default)]
    pub dag: bool,
    /// Budget: at most this many steps per run (`#[agent(max_steps = N)]`).
    #[serde(default)]
    pub max_steps: Option<u64>,
    /// The budget of each run unless its start sets one (`#[agent(budget(...))]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// States in declaration order.
    pub states: Vec<StateDescription>,
    /// Tools declared on the agent, in declaration order.
    pub tools: Vec<ToolDescription>,
}

fn first_version() -> u32 {
    1
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_first_version(v: &u32) -> bool {
    *v == 1
}

/// One state (one variant of the agent's enum).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "each flag is one attribute of the `#[agent(...)]` grammar, serialized as written"
)]
pub struct StateDescription {
    /// The variant's name.
    pub name: String,
    /// The run starts here.
    #[serde(default)]
    pub initial: bool,
    /// The run ends here.
    #[serde(default)]
    pub terminal: bool,
    /// Entering this state runs the saga's compensations.
    #[serde(default)]
    pub compensate: bool,
    /// Who chooses the next step.
    #[serde(default)]
    pub route: Routing,
    /// The state waits for a named signal before its handler runs.
    #[serde(default)]
    pub wait: Option<WaitDescription>,
    /// The state's durable timer (`timer_ms`, `timer = field`): alone, the state waits for
    /// it; with `wait`, it is the wait's deadline. Left out when `None`, as
    /// `tools_per_answer` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timer: Option<TimerDescription>,
    /// Declared successors, in the order written in `to(...)`.
    #[serde(default)]
    pub to: Vec<String>,
    /// The state taken when a step of this state fails (also one of the edges).
    #[serde(default)]
    pub on_error: Option<String>,
    /// The state taken when a step of this state exceeds a budget (also one of the edges);
    /// without it, a budget failure takes `on_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_budget: Option<String>,
    /// What one visit of this state may spend (`budget(...)` on the variant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Tools legal in this state, in the order written in `tools(...)`.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Budget: at most this many tool calls per visit of the state.
    #[serde(default)]
    pub max_tool_calls: Option<u32>,
    /// LLM-routed states: how many tools one answer may call at once (`tools_per_answer`);
    /// `None` is one. Left out of the description when `None`, so that the fingerprints of
    /// graphs that do not use it are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_per_answer: Option<u32>,
    /// Budget: a visit of the state may take at most this long (milliseconds).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// LLM-routed states: one ask of the model may take at most this long (milliseconds,
    /// `decision_timeout_ms`); `None` is [`RunnerConfig::decision_timeout`]. Left out of the
    /// description when `None`, as `tools_per_answer` is.
    ///
    /// [`RunnerConfig::decision_timeout`]: crate::runner::RunnerConfig::decision_timeout
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_timeout_ms: Option<u64>,
    /// The agents whose runs this state's handler may start as children (`children(...)`),
    /// by name, in the order written. Left out when empty, as `tools_per_answer` is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<String>,
    /// Children started here are not cancelled when the run fails or is cancelled
    /// (`children_outlive`). Left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub children_outlive: bool,
    /// The state's data as written in the source (`{ cart: Cart }`, `(u32)`, or empty).
    /// Part of the fingerprint: changing a state's data type changes the graph.
    #[serde(default)]
    pub data: String,
    /// LLM-routed states: the successors in `to(...)` that take an argument from the model
    /// (`to(Payment(args = PayArgs))`), in the order written. Every other transition takes
    /// none: it is offered with the closed empty object. Left out when empty, as
    /// `tools_per_answer` is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<TransitionArguments>,
}

/// The argument a transition takes from the model: its type and the JSON Schema the model
/// is shown, which its answer is checked against before it is deserialized.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionArguments {
    /// The target state.
    pub to: String,
    /// The argument's type, as written in `args = ...` (part of the fingerprint, as
    /// [`StateDescription::data`] is).
    #[serde(rename = "type")]
    pub type_name: String,
    /// The type's schema, every object closed, as generated for a tool's input.
    pub schema: serde_json::Value,
    /// The typed check (the type's `Deserialize`), present in the description the derive
    /// builds and absent from one read back from JSON or YAML.
    #[serde(skip)]
    pub(crate) typed: TypedCheck,
}

impl TransitionArguments {
    /// Check `arguments` against the type: the schema first (the validator the model's
    /// answers go through), then the type's `Deserialize`, so a value accepted here is one
    /// the handler receives typed.
    ///
    /// # Errors
    /// What is wrong: the schema's violations, or the deserializer's error.
    pub fn check(&self, arguments: &serde_json::Value) -> Result<(), String> {
        crate::schema::compiled(&self.schema)
            .map_err(|e| e.to_string())?
            .check(arguments)?;
        self.check_typed(arguments)
    }

    /// Only the type's `Deserialize` (for arguments the schema already accepted).
    ///
    /// # Errors
    /// The deserializer's error.
    pub fn check_typed(&self, arguments: &serde_json::Value) -> Result<(), String> {
        self.typed.0.map_or(Ok(()), |check| check(arguments))
    }
}

/// The type's own check of a transition's arguments, as a function of the derive. Not part
/// of the description's value: two descriptions that differ only here are equal.
#[derive(Clone, Copy, Default)]
pub(crate) struct TypedCheck(pub(crate) Option<ArgumentCheck>);

/// Whether arguments deserialize into a transition's argument type, with the error if not.
pub(crate) type ArgumentCheck = fn(&serde_json::Value) -> Result<(), String>;

impl PartialEq for TypedCheck {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for TypedCheck {}

impl std::fmt::Debug for TypedCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "typed" } else { "untyped" })
    }
}

impl StateDescription {
    /// The argument the transition to `to` takes, if it declares one.
    #[must_use]
    pub fn arguments_of(&self, to: &str) -> Option<&TransitionArguments> {
        self.arguments.iter().find(|a| a.to == to)
    }

    /// Check the arguments of the transition to `to`: against its declared argument, or,
    /// for a transition that declares none, against the closed empty object.
    ///
    /// # Errors
    /// What is wrong with them.
    pub fn check_arguments(&self, to: &str, arguments: &serde_json::Value) -> Result<(), String> {
        match self.arguments_of(to) {
            Some(declared) => declared.check(arguments),
            None => crate::schema::compiled(&crate::schema::closed_empty_object())
                .map_err(|e| e.to_string())?
                .check(arguments),
        }
    }
}

/// Who picks the next step in a state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// The user's handler decides (the default).
    #[default]
    Handler,
    /// The LLM picks among the legal options (`route = llm`).
    Llm,
}

/// A wait for a named signal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitDescription {
    /// The signal's name.
    pub signal: String,
    /// After this long without the signal, the handler runs with a timeout.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The JSON Schema of the signal's payload, when the state declares its type
    /// (`wait_payload = Type`): the inspector builds its signal form from it. Left out of
    /// the description (and so of the fingerprint) when not declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_schema: Option<serde_json::Value>,
}

/// A state's durable timer ([`crate::timer`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimerDescription {
    /// `timer_ms = N`: due `N` ms after the commit that enters the state.
    AfterMs(u64),
    /// `timer = field`: due at the time the state's field of this name holds.
    Field(String),
}

impl TimerDescription {
    /// How the exports and the inspector show it: `timer 3 s`, `timer at due`.
    #[must_use]
    pub fn label(&self) -> String {
        match self {
            Self::AfterMs(ms) => format!("timer {}", human_ms(*ms)),
            Self::Field(field) => format!("timer at {field}"),
        }
    }
}

/// `90000` → `90 s`, `259200000` → `3 d`: the largest unit the delay is a whole number of.
fn human_ms(ms: u64) -> String {
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("min", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{} {unit}", ms / size);
        }
    }
    format!("{ms} ms")
}

/// A tool declared on the agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolDescription {
    /// The tool's type name as written in the attribute.
    pub name: String,
    /// Read, write or hybrid.
    pub kind: ToolKind,
    /// For hybrid tools: the write tool that undoes it.
    #[serde(default)]
    pub compensation: Option<String>,
}

/// An edge of the graph.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Edge<'a> {
    /// Source state.
    pub from: &'a str,
    /// Target state.
    pub to: &'a str,
    /// Whether this edge is the source's `on_error` path.
    pub error: bool,
}

/// What a run did, drawn over the graph by the exports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathOverlay {
    /// Transitions taken, in order.
    pub transitions: Vec<(String, String)>,
    /// The state the run is in now.
    pub current: Option<String>,
    /// States where a step failed.
    pub failed: BTreeSet<String>,
}

/// Error reading a graph description from JSON or YAML.
#[derive(Debug, thiserror::Error)]
pub enum GraphParseError {
    /// Not valid JSON for a graph description.
    #[error("invalid graph JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Not valid YAML for a graph description.
    #[error("invalid graph YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
}

impl GraphDescription {
    /// The state with this name.
    #[must_use]
    pub fn state(&self, name: &str) -> Option<&StateDescription> {
        self.states.iter().find(|s| s.name == name)
    }

    /// The tool with this name.
    #[must_use]
    pub fn tool(&self, name: &str) -> Option<&ToolDescription> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The initial state.
    #[must_use]
    pub fn initial(&self) -> Option<&StateDescription> {
        self.states.iter().find(|s| s.initial)
    }

    /// Every edge, in declaration order (the `on_error` and `on_budget` edges last for each
    /// state).
    pub fn edges(&self) -> impl Iterator<Item = Edge<'_>> {
        self.states.iter().flat_map(|s| {
            s.to.iter()
                .map(move |t| Edge {
                    from: &s.name,
                    to: t,
                    error: false,
                })
                .chain(
                    // `on_budget` is a failure path too, drawn as one unless it is also
                    // `on_error`'s or a `to(...)` edge.
                    (s.on_error.iter())
                        .chain(
                            s.on_budget
                                .iter()
                                .filter(|b| s.on_error.as_ref() != Some(*b)),
                        )
                        .filter(|e| !s.to.contains(e))
                        .map(move |t| Edge {
                            from: &s.name,
                            to: t,
                            error: true,
                        }),
                )
        })
    }

    /// The signals some state of the agent waits for (`wait = "..."`), sorted, once each.
    #[must_use]
    pub fn signals_waited_for(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .states
            .iter()
            .filter_map(|s| s.wait.as_ref().map(|w| w.signal.as_str()))
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The declared payload schema of signal `name` (`wait_payload = Type`), from the first
    /// state that waits for it with one.
    #[must_use]
    pub fn signal_payload_schema(&self, name: &str) -> Option<&serde_json::Value> {
        self.states
            .iter()
            .filter_map(|s| s.wait.as_ref())
            .filter(|w| w.signal == name)
            .find_map(|w| w.payload_schema.as_ref())
    }

    /// Whether `from` -> `to` is a declared edge (`to(...)`, `on_error` or `on_budget`).
    #[must_use]
    pub fn has_edge(&self, from: &str, to: &str) -> bool {
        self.state(from).is_some_and(|s| {
            s.to.iter().any(|t| t == to)
                || s.on_error.as_deref() == Some(to)
                || s.on_budget.as_deref() == Some(to)
        })
    }

    /// Whether `tool` is legal in `state`.
    #[must_use]
    pub fn allows_tool(&self, state: &str, tool: &str) -> bool {
        self.state(state)
            .is_some_and(|s| s.tools.iter().any(|t| t == tool))
    }

    /// A stable fingerprint: the SHA-256 of the canonical JSON of the description, hex.
    ///
    /// Identical for identical graphs on every build and machine (the description holds
    /// only names in declaration order, never hash-map order); different when any state,
    /// edge, tool set, tool kind or state data type changes.
    ///
    /// # Panics
    /// Never: a description holds only strings, numbers and booleans.
    #[must_use]
    pub fn fingerprint(&self) -> String {
        let json = serde_json::to_vec(self).expect("a graph description always serializes");
        hex::encode(Sha256::digest(&json))
    }

    /// Pretty JSON.
    ///
    /// # Panics
    /// Never: a description holds only strings, numbers and booleans.
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a graph description always serializes")
    }

    /// Parse JSON written by [`to_json`](Self::to_json).
    ///
    /// # Errors
    /// When the text is not a graph description.
    pub fn from_json(text: &str) -> Result<Self, GraphParseError> {
        Ok(serde_json::from_str(text)?)
    }

    /// YAML, written with `serde_yaml_ng` (the maintained successor of `serde_yaml`).
    ///
    /// # Panics
    /// Never: a description holds only strings, numbers and booleans.
    #[must_use]
    pub fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).expect("a graph description always serializes")
    }

    /// Parse YAML written by [`to_yaml`](Self::to_yaml).
    ///
    /// # Errors
    /// When the text is not a graph description.
    pub fn from_yaml(text: &str) -> Result<Self, GraphParseError> {
        Ok(serde_yaml_ng::from_str(text)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> GraphDescription {
        let state = |name: &str, to: &[&str]| StateDescription {
            name: name.into(),
            initial: false,
            terminal: to.is_empty(),
            compensate: false,
            route: Routing::Handler,
            wait: None,
            timer: None,
            to: to.iter().map(|s| (*s).into()).collect(),
            on_error: None,
            on_budget: None,
            budget: None,
            tools: vec![],
            max_tool_calls: None,
            tools_per_answer: None,
            timeout_ms: None,
            decision_timeout_ms: None,
            children: Vec::new(),
            children_outlive: false,
            data: String::new(),
            arguments: Vec::new(),
        };
        let mut browsing = state("Browsing", &["Review"]);
        browsing.initial = true;
        browsing.tools = vec!["SearchProducts".into()];
        let mut review = state("Review", &["Done", "Browsing"]);
        review.route = Routing::Llm;
        review.on_error = Some("Failed".into());
        let mut failed = state("Failed", &[]);
        failed.compensate = true;
        GraphDescription {
            agent: "Checkout".into(),
            version: 1,
            dag: false,
            max_steps: None,
            budget: None,
            states: vec![browsing, review, state("Done", &[]), failed],
            tools: vec![ToolDescription {
                name: "SearchProducts".into(),
                kind: ToolKind::Read,
                compensation: None,
            }],
        }
    }

    #[test]
    fn json_and_yaml_round_trip() {
        let g = sample();
        assert_eq!(GraphDescription::from_json(&g.to_json()).unwrap(), g);
        assert_eq!(GraphDescription::from_yaml(&g.to_yaml()).unwrap(), g);
    }

    #[test]
    fn fingerprint_is_stable_and_sensitive() {
        let g = sample();
        assert_eq!(g.fingerprint(), sample().fingerprint());
        assert_eq!(g.fingerprint().len(), 64);
        let mut edge = sample();
        edge.states[1].to.pop();
        let mut data = sample();
        data.states[0].data = "{ cart: Cart }".into();
        let mut kind = sample();
        kind.tools[0].kind = ToolKind::Write;
        let mut tools = sample();
        tools.states[0].tools.clear();
        for changed in [edge, data, kind, tools] {
            assert_ne!(changed.fingerprint(), g.fingerprint());
        }
    }

    #[test]
    fn edges_include_error_path_once() {
        let g = sample();
        let edges: Vec<_> = g.edges().map(|e| (e.from, e.to, e.error)).collect();
        assert_eq!(
            edges,
            vec![
                ("Browsing", "Review", false),
                ("Review", "Done", false),
                ("Review", "Browsing", false),
                ("Review", "Failed", true),
            ]
        );
        assert!(g.has_edge("Review", "Failed"));
        assert!(!g.has_edge("Browsing", "Done"));
    }

    #[test]
    fn dot_marks_roles_and_overlay() {
        let g = sample();
        let dot = g.to_dot_with(&PathOverlay {
            transitions: vec![("Browsing".into(), "Review".into())],
            current: Some("Review".into()),
            failed: BTreeSet::new(),
        });
        assert!(dot.starts_with("digraph \"Checkout\" {"));
        assert!(dot.contains("\"Review\" [label=\"Review\\n[LLM-routed]\", shape=hexagon"));
        assert!(dot.contains("SearchProducts (read)"));
        assert!(dot.contains("\"Review\" -> \"Failed\" [style=dashed"));
        assert!(
            dot.contains("\"Browsing\" -> \"Review\" [penwidth=2.5, color=blue, xlabel=\"x1\"]")
        );
    }

    #[test]
    fn mermaid_lists_states_and_edges() {
        let m = sample().to_mermaid();
        assert!(m.starts_with("stateDiagram-v2\n"));
        assert!(m.contains("[*] --> Browsing"));
        assert!(m.contains("Review --> Failed : on error"));
        assert!(m.contains("Done --> [*]"));
        assert!(m.contains("class Review llm"));
    }

    #[test]
    fn exports_mark_states_that_start_children() {
        let mut g = sample();
        g.states[0].children = vec!["Research".into(), "Fact".into()];
        let dot = g.to_dot();
        assert!(dot.contains("\"Browsing\" [label=\"Browsing\\n[starts Research, Fact]\\l"));
        assert!(dot.contains("shape=box3d"));
        let m = g.to_mermaid();
        assert!(m.contains("Browsing : starts Research, Fact"));
        assert!(m.contains("class Browsing children"));
        g.states[0].children_outlive = true;
        assert!(
            g.to_mermaid()
                .contains("starts Research, Fact (outlive it)")
        );
        assert_ne!(g.fingerprint(), sample().fingerprint());
    }

    #[test]
    fn exports_mark_timers_and_graphs_without_them_keep_their_fingerprint() {
        let plain = sample();
        assert!(!plain.to_json().contains("timer"), "{}", plain.to_json());
        let mut g = sample();
        g.states[0].timer = Some(TimerDescription::AfterMs(259_200_000));
        g.states[1].timer = Some(TimerDescription::Field("remind_at".into()));
        let dot = g.to_dot();
        assert!(dot.contains("Browsing\\n[timer 3 d]"), "{dot}");
        assert!(dot.contains("style=\"rounded,filled,dashed\""), "{dot}");
        let m = g.to_mermaid();
        assert!(m.contains("Browsing : timer 3 d"), "{m}");
        assert!(m.contains("Review : LLM-routed, timer at remind_at"), "{m}");
        assert!(m.contains("class Browsing,Review waiting"), "{m}");
        assert_ne!(g.fingerprint(), plain.fingerprint());
        assert_eq!(GraphDescription::from_json(&g.to_json()).unwrap(), g);
        assert_eq!(TimerDescription::AfterMs(90_000).label(), "timer 90 s");
        assert_eq!(TimerDescription::AfterMs(1_500).label(), "timer 1500 ms");
    }
}
