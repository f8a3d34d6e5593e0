//! A runner's settings.

use std::time::Duration;

use crate::secrets::SealKeys;

/// Settings of a runner.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    /// This worker's name, stored with its leases.
    pub worker_id: String,
    /// How long a lease lasts without renewal.
    pub lease_ttl: Duration,
    /// How many times the router is re-asked after a rejected answer or a failed ask (an
    /// HTTP error, a timeout, a body that is not the provider's shape), per decision; then
    /// the state takes its failure path.
    pub max_reasks: u32,
    /// How long one ask of the router may take, the provider's own retries included; past
    /// it the ask is journaled as `ask.timeout` and counts against `max_reasks`. Keep it
    /// well under `lease_ttl`'s renewals (the lease is renewed while the ask runs), so one
    /// slow model never holds a claim for long.
    pub decision_timeout: Duration,
    /// Token budget of a routing prompt; the oldest tool results are trimmed first.
    pub prompt_token_budget: usize,
    /// Lost claims without a commit before a run is dead-lettered (a poison run): claims
    /// that found the run's previous claim neither released nor committed through (its
    /// worker crashed, panicked, or hung past its lease). A claim itself costs nothing, so
    /// a crash costs each run it held one, even a claim that landed after the worker died.
    pub max_claims_without_progress: u32,
    /// How often a transient store error is retried before the runner gives up on a run.
    pub store_retries: u32,
    /// Sensitive field names (matched case-insensitively, at any depth). Their values are
    /// stored *sealed* ([`seal_keys`](Self::seal_keys)) in what a resumed run executes
    /// again (journaled tool inputs and outputs, the model's decisions, children's inputs,
    /// run states, signal payloads), so replay opens them and executes exactly what was first executed; everywhere else
    /// (what the router is shown, logs, events) they are replaced by `"[redacted]"`. Input
    /// hashes are computed on the values as executed. Fields a type marks secret
    /// ([`Secret`](crate::secrets::Secret), `x-sealed`) are sealed too.
    pub redact_fields: Vec<String>,
    /// Secret values (API keys, passwords, tokens the tools hold), found plainly, JSON-escaped,
    /// percent-encoded, in hex or in base64, whole or in pieces of
    /// [`SECRET_PIECE`](crate::secrets::SECRET_PIECE) characters, in values and in object keys ([`Redactor`](crate::secrets::Redactor)). Where a
    /// resumed run executes a value again (tool inputs and outputs, decisions, states,
    /// signal payloads) a string or key holding one is stored sealed; everywhere else (error
    /// messages, the run's error, what the router is shown, the decision's raw output and
    /// rejection messages, logs, the live token bus) it is replaced by `"[redacted]"`. A
    /// model's answer that holds one is refused as exfiltration (`decision.exfiltration`)
    /// and nothing in it runs. Values shorter than 4 characters are ignored (they would
    /// shred text).
    pub secrets: Vec<String>,
    /// The keys secret values are sealed with ([`SealKeys`]: the active one seals, every
    /// configured one opens what it sealed). Empty by default: a step that must store a
    /// secret without a key fails with `seal.no_key` before anything runs, and a run whose
    /// journal, state or signal holds a value sealed with a key not configured here is
    /// quarantined with `seal.key_missing`. [`SealKeys::from_env`] reads them from
    /// [`SEAL_KEYS_ENV`](crate::secrets::SEAL_KEYS_ENV).
    pub seal_keys: SealKeys,
    /// How many child runs one step may start ([`Ctx::spawn_all`](crate::Ctx::spawn_all));
    /// a step starting more fails with a budget error, before any child is created.
    pub max_children_per_step: u32,
    /// How deep child runs may nest below a run that nobody started: a run this many
    /// levels down fails with a budget error when it starts children (a guard against an
    /// agent that, through its children, starts itself without end).
    pub max_child_depth: u32,
    /// Where the model's tokens go as they come, while a decision is asked or a tool
    /// generates text ([events](crate::events)): share one bus with whoever shows them
    /// (the HTTP server's event streams). Nothing is sent while nobody subscribes.
    pub ephemeral: crate::events::EphemeralBus,
    /// How long the runner uses the tool registry (the kill switch) it read before reading
    /// it again: a tool switched off (`agentctl tools disable`,
    /// [`OperatorStore::set_tool_enabled`](crate::store::OperatorStore::set_tool_enabled)) fails fast with `tool.disabled` at every call that
    /// starts this long after the switch or later (calls started earlier may still run
    /// it). `Duration::ZERO` reads the registry at every call.
    pub tool_registry_refresh: Duration,
    /// The most bytes one stored value may take as JSON: a state the run enters, a tool's
    /// output, a run's initial state, a signal's payload. Past it, what would have been
    /// stored is refused with an error naming it and its size (a step fails with a budget
    /// error; a tool call fails permanently; `start` and `signal` return
    /// [`RunnerError::PayloadTooLarge`](super::RunnerError::PayloadTooLarge)), never a
    /// database error and never a bloated row. 16 MiB by default.
    pub max_payload_bytes: usize,
    /// Rate limits shared by every worker of the store (asks to a model, the tokens of its
    /// answers, calls of a tool: [`RateLimit`](crate::store::RateLimit)), declared in the
    /// store when the runner first takes from them. Before each new ask and each tool call
    /// the step takes its turn under the limits that apply; a turn further away than
    /// [`capacity_wait_in_place`](Self::capacity_wait_in_place) hands the run back until
    /// then, so that a run waiting for capacity holds no worker. Empty by default.
    pub rate_limits: Vec<crate::store::RateLimit>,
    /// The longest a step waits for its turn under a rate limit in its worker; a longer
    /// wait hands the run back to the store until its turn
    /// ([`RunStore::defer_run`](crate::store::RunStore::defer_run)). 250 ms by default.
    pub capacity_wait_in_place: Duration,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        Self {
            worker_id: format!("worker-{}", uuid::Uuid::new_v4().simple()),
            lease_ttl: Duration::from_secs(30),
            max_reasks: 2,
            decision_timeout: Duration::from_secs(20),
            prompt_token_budget: 8_000,
            max_claims_without_progress: 5,
            store_retries: 5,
            redact_fields: crate::secrets::DEFAULT_SENSITIVE_FIELDS
                .map(str::to_owned)
                .to_vec(),
            secrets: Vec::new(),
            seal_keys: SealKeys::new(),
            max_children_per_step: 1_000,
            max_child_depth: 8,
            ephemeral: crate::events::EphemeralBus::new(),
            tool_registry_refresh: Duration::from_secs(1),
            max_payload_bytes: 16 * 1024 * 1024,
            rate_limits: Vec::new(),
            capacity_wait_in_place: Duration::from_millis(250),
        }
    }
}
