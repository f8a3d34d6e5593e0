//! The command line, as clap derive types.

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The default SQLite file, relative to the current directory (the examples write it).
pub(crate) const DEFAULT_DB: &str = "agent-runs.sqlite3";

/// Inspect and operate durable agent runs: the same database the workers use.
///
/// The database is a SQLite file (`--db`, `AGENT_DB`, default `agent-runs.sqlite3`) or
/// PostgreSQL (`--database-url` or `DATABASE_URL`, starting with `postgres://`).
///
/// Exit codes: 0 ok, 1 not found / verification failed / store error, 2 usage.
#[derive(Debug, Parser)]
#[command(
    name = "agentctl",
    version,
    propagate_version = true,
    after_help = "Examples:
  agentctl runs --status waiting,dead_lettered
  agentctl show order-42
  agentctl export order-42 --out order-42.json
  agentctl replay --from-file runs/ --json
  agentctl graph Checkout --run order-42 --format mermaid
  agentctl graph Checkout --run order-42 | dot -Tsvg > run.svg   # dot: Graphviz
  agentctl stats --since 1h
  agentctl signal order-42 approval '{\"approved\": true}'
  agentctl tools disable ChargePayment --reason \"gateway incident\"
  agentctl verify --all
  agentctl backup runs-backup.sqlite3
  agentctl runs --label tenant=acme
  agentctl runs --parent report-1
  agentctl cancel order-42 --reason \"customer asked\"
  agentctl terminate order-42 --reason \"duplicate order\"
  agentctl migrate --dry-run
  agentctl schedules list
  agentctl triggers show inbox

See docs/agentctl.md for every command."
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub(crate) struct Global {
    /// SQLite database file.
    #[arg(long, global = true, env = "AGENT_DB", value_name = "PATH")]
    pub db: Option<String>,
    /// PostgreSQL URL (`postgres://...`); takes precedence over `--db`.
    #[arg(
        long,
        global = true,
        env = "DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,
    /// PostgreSQL schema holding the store's tables.
    #[arg(
        long,
        global = true,
        env = "AGENT_PG_SCHEMA",
        value_name = "SCHEMA",
        default_value = "agents"
    )]
    pub pg_schema: String,
    /// Print JSON for scripts instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// When to use colours (`auto`: only on a terminal, and not with `NO_COLOR`).
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// Fit tables to this many columns (default: the terminal's width on a terminal, no
    /// limit in a pipe). The last column (details, errors) wraps.
    #[arg(long, global = true, env = "AGENTCTL_WIDTH", value_name = "COLUMNS",
          value_parser = clap::value_parser!(u16).range(40..))]
    pub width: Option<u16>,
}

/// When to colour output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List runs, newest first.
    // `--version` filters by agent version here: the binary's version stays on
    // `agentctl --version`.
    #[command(disable_version_flag = true)]
    Runs(RunsArgs),
    /// Show a run's timeline: versions, tool calls, decisions, compensations, signals.
    Show(ShowArgs),
    /// Print a run's state at a version (time travel), as JSON.
    State(StateArgs),
    /// Start a new run from a run's state at a version (what-if, or redo after a fix).
    Fork(ForkArgs),
    /// Print a whole run as one JSON document (record, graph, history, journal, pending
    /// signals), to attach to a report or archive it.
    Export(ExportArgs),
    /// Replay recorded runs (exports, or runs in the store) against this binary's handlers,
    /// the model and the tools stubbed by the journal; exit 1 when any run diverges. Needs
    /// a control binary with the agent registered (`Ctl::new().replay(...)`).
    Replay(ReplayArgs),
    /// Draw an agent's graph, optionally with a run's path overlaid.
    Graph(GraphArgs),
    /// Which of an agent's declared edges and legal tools its runs took, and which none did
    /// (run the tests against a store, then ask which transitions they never exercised).
    Coverage(CoverageArgs),
    /// Per-tool call statistics: count, latency percentiles, errors by code.
    Stats(StatsArgs),
    /// Send a signal to a run (for example an approval a waiting state expects).
    Signal(SignalArgs),
    /// The tool registry: list tools, switch them off (kill switch) and on.
    Tools(ToolsArgs),
    /// Remove old versions and journal entries by retention policy.
    Prune(PruneArgs),
    /// Re-queue a quarantined or dead-lettered run for the workers.
    Resume(RunArg),
    /// Re-queue a failed, quarantined or dead-lettered run: its failed step runs again.
    Retry(RunArg),
    /// Reset a quarantined run to an earlier version whose hash chain verifies, as a new
    /// `repair` transition; the workers then run it from there.
    Repair(RepairArgs),
    /// Correct the state of a waiting, failed, quarantined or dead-lettered run and let it
    /// continue, as a new `edited` transition with who and why (a whole state, or a JSON
    /// Patch of the current one).
    Edit(EditArgs),
    /// Set a run's budget for the whole run (model tokens, cost, asks, tool calls), or
    /// remove it: to raise the budget of a run that spent it. Its spend so far is kept; the
    /// run checks the new budget from its next claim.
    Budget(BudgetArgs),
    /// Recompute a run's hash chain and report the first modified, deleted or reordered row.
    Verify(VerifyArgs),
    /// List the agents whose graphs the workers registered.
    Agents,
    /// List the rate limits the workers share (declared by their runners'
    /// `RunnerConfig::rate_limits`): each one's rate, burst, what it holds now, and how
    /// long a run taking from it would wait.
    Limits,
    /// Copy the whole SQLite store to one new file while it is in use (for PostgreSQL,
    /// prints the `pg_dump` command to use).
    Backup(BackupArgs),
    /// Create the store's tables, or bring them to this version's migrations (the only
    /// command that changes a store's schema: the others refuse a missing or older store);
    /// then migrate the runs of older versions of the agents this binary registers.
    Migrate(MigrateArgs),
    /// Cancel a run: the workers run its saga's compensations and it ends `cancelled`.
    Cancel(CancelArgs),
    /// Terminate a run: it stops at once, nothing compensated, recorded with who and why.
    /// Also closes out a failed, quarantined or dead-lettered run.
    Terminate(TerminateArgs),
    /// Drop a pending signal of a run (one no handler accepts), recorded with who and why
    /// (`agentctl show RUN` lists the pending signals with their ids).
    DropSignal(DropSignalArgs),
    /// Serve the store over HTTP: runs, history, live events, signal, cancel, retry
    /// (`docs/http-api.md`).
    Serve(ServeArgs),
    /// Schedules that start runs on a cron expression or an interval: create, list, show,
    /// update, delete, pause, resume, trigger, backfill (the agent's workers tick them).
    Schedules(SchedulesArgs),
    /// What message triggers and webhooks started: each with its runs by status and its
    /// latest ones (from the runs' labels; a trigger's live state is its process's).
    Triggers(TriggersArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The run's id.
    pub run: String,
    /// Then print each event as it is committed, until the run ends (or Ctrl-C).
    #[arg(long, short)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// The run's id.
    pub run: String,
    /// Write the document to this file instead of stdout (refused if it exists).
    #[arg(long, short, value_name = "PATH")]
    pub out: Option<std::path::PathBuf>,
    /// Include the state of every stored version: what `agentctl replay` needs.
    #[arg(long)]
    pub states: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// A run exported with `agentctl export --states`, or a directory of them (every
    /// `*.json` file in it); repeatable.
    #[arg(long = "from-file", value_name = "PATH")]
    pub from_file: Vec<std::path::PathBuf>,
    /// Replay this agent's runs from the store (the newest first).
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// With `--agent`: at most this many runs.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on. Off loopback, a token is required, and every request
    /// needs it.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR:PORT")]
    pub listen: std::net::SocketAddr,
    /// A file holding the bearer token requests must carry (every write, always): kept
    /// out of the command line, where other users could read it.
    #[arg(long, value_name = "PATH", conflicts_with = "token_env")]
    pub token_file: Option<std::path::PathBuf>,
    /// The environment variable holding the bearer token.
    #[arg(long, value_name = "VAR", default_value = "DURABLE_AGENTS_TOKEN")]
    pub token_env: String,
    /// Let browsers on this origin call the API (repeat it; none by default).
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
    /// Answer requests naming this host without the token (repeat it), besides
    /// `localhost`, `127.0.0.1` and `::1`: any other `Host` is refused unless the request
    /// carries the token (a guard against DNS rebinding).
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
    /// Answer `GET /metrics` in the Prometheus format: a read like any other (free on
    /// loopback, the token required off it), with the runs by status and the queue
    /// depths counted in the store every 15 seconds.
    #[arg(long)]
    pub metrics: bool,
    /// Link each run's timing page in the inspector to its trace in a trace viewer: the
    /// viewer's URL with `{trace_id}` where the run's trace id goes (for example
    /// `http://localhost:6006/projects/default/traces/{trace_id}`).
    #[arg(long, value_name = "URL")]
    pub trace_url: Option<String>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("limits").required(true).multiple(true)
    .args(["tokens", "cost", "asks", "tool_calls", "none"])))]
pub(crate) struct BudgetArgs {
    /// The run's id.
    pub run: String,
    /// At most this many tokens, input and output together.
    #[arg(long, value_name = "N")]
    pub tokens: Option<u64>,
    /// At most this cost, in the price table's currency (`0.50`).
    #[arg(long, value_name = "AMOUNT")]
    pub cost: Option<f64>,
    /// At most this many questions to the routing model.
    #[arg(long, value_name = "N")]
    pub asks: Option<u64>,
    /// At most this many tool calls.
    #[arg(long, value_name = "N")]
    pub tool_calls: Option<u64>,
    /// Remove the run's budget: it spends without limit.
    #[arg(long, conflicts_with_all = ["tokens", "cost", "asks", "tool_calls"])]
    pub none: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CancelArgs {
    /// The run's id.
    pub run: String,
    /// Why (recorded with the `cancel` transition).
    #[arg(long, default_value = "no reason given")]
    pub reason: String,
    /// Who cancels (recorded with the transition).
    #[arg(long, env = "USER", value_name = "WHO")]
    pub by: String,
}

#[derive(Debug, Args)]
pub(crate) struct TerminateArgs {
    /// The run's id.
    pub run: String,
    /// Why (recorded with the `terminate` transition).
    #[arg(long)]
    pub reason: String,
    /// Who terminates (recorded with the transition).
    #[arg(long, env = "USER", value_name = "WHO")]
    pub by: String,
}

#[derive(Debug, Args)]
pub(crate) struct DropSignalArgs {
    /// The run's id.
    pub run: String,
    /// The pending signal's id (`agentctl show RUN` lists them).
    pub signal: i64,
    /// Why (recorded with the `signal_dropped` transition).
    #[arg(long)]
    pub reason: String,
    /// Who drops it (recorded with the transition).
    #[arg(long, env = "USER", value_name = "WHO")]
    pub by: String,
}

impl Command {
    /// Whether the command writes rows (a SQLite store is then opened read-write; every
    /// other command opens it read-only, so that it cannot write by mistake).
    pub(crate) fn writes(&self) -> bool {
        match self {
            Self::Fork(_)
            | Self::Signal(_)
            | Self::Prune(_)
            | Self::Resume(_)
            | Self::Retry(_)
            | Self::Repair(_)
            | Self::Edit(_)
            | Self::Budget(_)
            | Self::Cancel(_)
            | Self::Terminate(_)
            | Self::DropSignal(_)
            | Self::Serve(_) => true,
            Self::Migrate(args) => !args.dry_run,
            Self::Schedules(args) => !matches!(
                args.action,
                SchedulesAction::List(_) | SchedulesAction::Show(_)
            ),
            Self::Tools(args) => !matches!(args.action, ToolsAction::List),
            Self::Runs(_)
            | Self::Triggers(_)
            | Self::Show(_)
            | Self::Export(_)
            | Self::Replay(_)
            | Self::State(_)
            | Self::Graph(_)
            | Self::Coverage(_)
            | Self::Stats(_)
            | Self::Verify(_)
            | Self::Agents
            | Self::Limits
            | Self::Backup(_) => false,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct TriggersArgs {
    #[command(subcommand)]
    pub action: TriggersAction,
}

#[derive(Debug, Subcommand)]
pub(crate) enum TriggersAction {
    /// List the message triggers and webhooks that started runs: runs by status, the
    /// latest run's time.
    List(TriggerListArgs),
    /// Show a trigger or webhook: its runs by status, where its messages came from, its
    /// latest runs with their messages or deliveries.
    Show(TriggerShowArgs),
}

#[derive(Debug, Args)]
pub(crate) struct TriggerListArgs {
    /// Only the runs of this agent.
    #[arg(long)]
    pub agent: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct TriggerShowArgs {
    /// The trigger's or webhook's name.
    pub name: String,
    /// How many of its latest runs to list.
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
}

#[derive(Debug, Args)]
pub(crate) struct SchedulesArgs {
    #[command(subcommand)]
    pub action: SchedulesAction,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SchedulesAction {
    /// List schedules, with their next and last ticks.
    List(ScheduleListArgs),
    /// Show a schedule and the runs of its latest ticks.
    Show(ScheduleIdArg),
    /// Create a schedule (checked: its spec, its time zone, its initial state against the
    /// agent's registered graph).
    Create(ScheduleCreateArgs),
    /// Change a schedule: the options given replace its own.
    Update(ScheduleUpdateArgs),
    /// Delete a schedule (its runs stay).
    Delete(ScheduleIdArg),
    /// Pause a schedule: no tick starts a run until it is resumed.
    Pause(ScheduleIdArg),
    /// Resume a paused schedule from its next tick (the ticks of the pause start nothing).
    Resume(ScheduleIdArg),
    /// Start a run of the schedule now, whatever its overlap policy, also while paused.
    Trigger(ScheduleIdArg),
    /// Start the runs of every tick in a past time range that has none.
    Backfill(ScheduleBackfillArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleListArgs {
    /// Only the schedules of this agent.
    #[arg(long)]
    pub agent: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleIdArg {
    /// The schedule's id.
    pub id: String,
}

/// When a schedule ticks, and what its runs start from: for `create` and `update`.
#[derive(Debug, Args)]
pub(crate) struct ScheduleDefinition {
    /// A cron expression (`30 2 * * *`, `0 8 * * MON-FRI`, six fields with seconds, `@daily`).
    #[arg(long, conflicts_with = "every")]
    pub cron: Option<String>,
    /// The IANA time zone the cron expression is read in.
    #[arg(long = "tz", value_name = "ZONE", requires = "cron")]
    pub time_zone: Option<String>,
    /// A fixed interval instead of a cron expression (`30s`, `5m`, `1h`, `1d`).
    #[arg(long, value_parser = parse_window)]
    pub every: Option<std::time::Duration>,
    /// The initial state of every run, as JSON (`'{"Start": {"items": []}}'`).
    #[arg(long, value_parser = parse_json)]
    pub state: Option<serde_json::Value>,
    /// Start each tick's run up to this much later, by an amount fixed per tick (`30s`).
    #[arg(long, value_parser = parse_window)]
    pub jitter: Option<std::time::Duration>,
    /// While the previous tick's run is not final.
    #[arg(long, value_enum)]
    pub overlap: Option<OverlapArg>,
    /// After downtime: `skip` the missed ticks, run the `last`, or run up to N of them.
    #[arg(long, value_parser = parse_catch_up, value_name = "skip|last|N")]
    pub catch_up: Option<agent_core::schedule::CatchUp>,
    /// A label of every run (`KEY=VALUE`, repeat it); on `update`, replaces them all.
    #[arg(long = "label", value_parser = parse_label, value_name = "KEY=VALUE")]
    pub labels: Vec<(String, String)>,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleCreateArgs {
    /// The schedule's id (its runs are named `ID@TICK`).
    pub id: String,
    /// The agent whose runs it starts.
    #[arg(long)]
    pub agent: String,
    #[command(flatten)]
    pub definition: ScheduleDefinition,
    /// Create it paused.
    #[arg(long)]
    pub paused: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleUpdateArgs {
    /// The schedule's id.
    pub id: String,
    #[command(flatten)]
    pub definition: ScheduleDefinition,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleBackfillArgs {
    /// The schedule's id.
    pub id: String,
    /// The range's start, RFC 3339 (`2026-12-01T00:00:00Z`).
    #[arg(long, value_parser = parse_instant)]
    pub from: i64,
    /// The range's end, included, RFC 3339.
    #[arg(long, value_parser = parse_instant)]
    pub to: i64,
}

/// [`OverlapPolicy`](agent_core::schedule::OverlapPolicy) on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum OverlapArg {
    /// Drop the tick.
    Skip,
    /// Keep the latest tick and start it when the previous run ends.
    BufferOne,
    /// Start it anyway.
    AllowAll,
    /// Cancel the previous run and start it.
    CancelPrevious,
}

impl From<OverlapArg> for agent_core::schedule::OverlapPolicy {
    fn from(arg: OverlapArg) -> Self {
        match arg {
            OverlapArg::Skip => Self::Skip,
            OverlapArg::BufferOne => Self::BufferOne,
            OverlapArg::AllowAll => Self::AllowAll,
            OverlapArg::CancelPrevious => Self::CancelPrevious,
        }
    }
}

fn parse_catch_up(s: &str) -> Result<agent_core::schedule::CatchUp, String> {
    use agent_core::schedule::CatchUp;
    match s {
        "skip" => Ok(CatchUp::Skip),
        "last" => Ok(CatchUp::Last),
        n => n
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .map(CatchUp::UpTo)
            .ok_or_else(|| {
                format!("`{s}` is not a catch-up policy: skip, last, or a count like 3")
            }),
    }
}

/// An RFC 3339 time, as Unix milliseconds.
fn parse_instant(s: &str) -> Result<i64, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|e| format!("`{s}` is not an RFC 3339 time like 2026-12-01T00:00:00Z: {e}"))
}

#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// Change nothing: print the schema migrations pending, and per run of an older
    /// version the state it would become, or why it would not migrate.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub(crate) struct BackupArgs {
    /// The new file to write (refused if it exists, unless `--force`).
    pub dest: std::path::PathBuf,
    /// Replace DEST if it exists.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RunArg {
    /// The run's id.
    pub run: String,
}

#[derive(Debug, Args)]
pub(crate) struct RepairArgs {
    /// The run's id.
    pub run: String,
    /// The version whose state the run goes back to (`agentctl verify RUN` says which
    /// versions verify).
    #[arg(long = "to", value_name = "VERSION")]
    pub to: u64,
    /// Why (recorded with the `repair` transition).
    #[arg(long)]
    pub reason: String,
    /// Who repairs (recorded with the transition).
    #[arg(long, env = "USER", value_name = "WHO")]
    pub by: String,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("new_state").required(true).args(["state", "patch"])))]
pub(crate) struct EditArgs {
    /// The run's id.
    pub run: String,
    /// The whole new state, as JSON, as the agent's enum serializes it
    /// (`'{"Review": {"amount": 50}}'`; `agentctl state RUN` prints the current one).
    #[arg(long, value_parser = parse_json, value_name = "JSON")]
    pub state: Option<serde_json::Value>,
    /// A JSON Patch (RFC 6902) of the current state
    /// (`'[{"op": "replace", "path": "/Review/amount", "value": 50}]'`).
    #[arg(long, value_parser = parse_json, value_name = "JSON")]
    pub patch: Option<serde_json::Value>,
    /// The new state's name, for an enum whose JSON does not start with it (an internal or
    /// adjacent serde tag).
    #[arg(long, value_name = "STATE")]
    pub state_name: Option<String>,
    /// Allow a state the graph does not lead to from the current one (recorded with the
    /// transition).
    #[arg(long)]
    pub override_graph: bool,
    /// Why (recorded with the `edited` transition).
    #[arg(long)]
    pub reason: String,
    /// Who edits (recorded with the transition).
    #[arg(long, env = "USER", value_name = "WHO")]
    pub by: String,
}

#[derive(Debug, Args)]
pub(crate) struct StateArgs {
    /// The run's id.
    pub run: String,
    /// The version (default: the current one).
    #[arg(long, value_name = "VERSION")]
    pub at: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct ForkArgs {
    /// The run to fork.
    pub run: String,
    /// The id of the new run.
    pub new_run: String,
    /// The version whose state the new run starts from (default: the current one).
    #[arg(long, value_name = "VERSION")]
    pub at: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The run's id.
    #[arg(required_unless_present = "all")]
    pub run: Option<String>,
    /// Verify every run (exit 1 if any fails).
    #[arg(long, conflicts_with = "run")]
    pub all: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RunsArgs {
    /// Only runs of this agent.
    #[arg(long)]
    pub agent: Option<String>,
    /// Only runs in these statuses (comma-separated: running, waiting, completed,
    /// compensating, compensated, failed, quarantined, `dead_lettered`, cancelled,
    /// terminated).
    #[arg(long, value_delimiter = ',', value_parser = parse_status)]
    pub status: Vec<agent_core::store::RunStatus>,
    /// Only runs carrying this label (`KEY=VALUE`; repeat it: every one must match).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Only the child runs this run started (at any step).
    #[arg(long, value_name = "RUN")]
    pub parent: Option<String>,
    /// Only runs on this version of their agent (`#[agent(version = N)]`; runs started
    /// before versions existed are version 1).
    #[arg(long, value_name = "N")]
    pub version: Option<u32>,
    /// At most this many runs.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Then print every event of the listed agent's runs (every run's without
    /// `--agent`) as it is committed, until Ctrl-C.
    #[arg(long, short)]
    pub watch: bool,
}

/// Output formats of `graph`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum GraphFormat {
    /// Graphviz DOT (`| dot -Tsvg > graph.svg`).
    Dot,
    /// Mermaid `stateDiagram-v2`.
    Mermaid,
    /// The graph description as JSON.
    Json,
    /// The graph description as YAML.
    Yaml,
}

#[derive(Debug, Args)]
pub(crate) struct GraphArgs {
    /// The agent's name (see `agentctl agents`); optional with `--run`.
    #[arg(required_unless_present = "run")]
    pub agent: Option<String>,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = GraphFormat::Dot)]
    pub format: GraphFormat,
    /// Overlay this run's path: transitions taken, current state, states where steps failed.
    #[arg(long)]
    pub run: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct CoverageArgs {
    /// The agent's name (see `agentctl agents`).
    pub agent: String,
    /// Count at most this many runs, the newest first.
    #[arg(long, default_value_t = 1000)]
    pub limit: usize,
}

#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// The window: calls started this long ago or later (`30m`, `1h`, `24h`, `7d`).
    #[arg(long, default_value = "24h", value_parser = parse_window)]
    pub since: std::time::Duration,
    /// Only calls made by runs of this agent, and only its spend.
    #[arg(long)]
    pub agent: Option<String>,
    /// The spend per day, not per agent.
    #[arg(long)]
    pub by_day: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SignalArgs {
    /// The run's id.
    pub run: String,
    /// The signal's name (the one the waiting state names).
    pub name: String,
    /// The payload, as JSON (for example '{"approved": true}').
    #[arg(default_value = "null", value_parser = parse_json)]
    pub payload: serde_json::Value,
}

#[derive(Debug, Args)]
pub(crate) struct ToolsArgs {
    #[command(subcommand)]
    pub action: ToolsAction,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ToolsAction {
    /// Every tool the registered agents declare, and every switched tool.
    List,
    /// Allow calls to a tool again.
    Enable(ToolSwitchArgs),
    /// Make calls to a tool fail fast with `tool.disabled` (kill switch).
    Disable(ToolSwitchArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ToolSwitchArgs {
    /// The tool's name.
    pub tool: String,
    /// Why (stored with the switch and shown by `tools list`).
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct PruneArgs {
    /// Keep this many most recent versions of every run (the current one always).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub keep_last: u64,
    /// Only prune runs that are final (completed, compensated, failed, ...).
    #[arg(long)]
    pub only_final: bool,
}

fn parse_status(s: &str) -> Result<agent_core::store::RunStatus, String> {
    let normalized = s.trim().to_ascii_lowercase().replace('-', "_");
    agent_core::store::RunStatus::parse(&normalized).ok_or_else(|| {
        let all: Vec<&str> = agent_core::store::RunStatus::ALL
            .iter()
            .map(|s| s.as_str())
            .collect();
        format!("unknown status `{s}`; one of: {}", all.join(", "))
    })
}

/// `KEY=VALUE`, checked by the rules the store applies at creation.
fn parse_label(s: &str) -> Result<(String, String), String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not KEY=VALUE"))?;
    agent_core::store::validate_label(key, value).map_err(|e| e.to_string())?;
    Ok((key.to_owned(), value.to_owned()))
}

/// `90s`, `30m`, `1h`, `24h`, `7d`, `2w`.
pub(crate) fn parse_window(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}` is not a window; write it like 30m, 1h, 24h or 7d"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" | "" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => {
            return Err(format!(
                "unknown unit `{unit}` in `{s}`; use s, m, h, d or w (like 24h or 7d)"
            ));
        }
    };
    Ok(std::time::Duration::from_secs(n.saturating_mul(secs)))
}

fn parse_json(s: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(s).map_err(|e| {
        format!(
            "not valid JSON ({e}); quote it for the shell, for example '{{\"approved\": true}}'"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn windows_parse() {
        assert_eq!(parse_window("1h"), Ok(Duration::from_hours(1)));
        assert_eq!(parse_window("24h"), Ok(Duration::from_hours(24)));
        assert_eq!(parse_window("7d"), Ok(Duration::from_hours(168)));
        assert_eq!(parse_window("30m"), Ok(Duration::from_mins(30)));
        assert!(parse_window("h").is_err());
        assert!(parse_window("3y").is_err());
    }

    #[test]
    fn statuses_parse_leniently() {
        use agent_core::store::RunStatus;
        assert_eq!(parse_status("dead-lettered"), Ok(RunStatus::DeadLettered));
        assert_eq!(parse_status("Waiting"), Ok(RunStatus::Waiting));
        assert!(
            parse_status("sleeping")
                .unwrap_err()
                .contains("dead_lettered")
        );
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
