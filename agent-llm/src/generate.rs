//! Text generation as a tool: the model writes an answer for a handler (the reply to a
//! user, a summary, a draft), journaled like every tool call.
//!
//! [`Generator`] holds a provider (OpenAI-compatible or Anthropic) and an optional
//! [`PriceTable`]; [`GenerateText`] is the ready-made tool around it. Register it in the
//! [`ToolBox`](agent_core::ToolBox) and list it in the states that write:
//! `#[agent(tools(read(GenerateText)))]`, then `ctx.call::<GenerateText>(input)`.
//!
//! ## Why a read tool
//!
//! A generation changes nothing in the world; what it costs is money, and what must not
//! happen is paying twice for the same answer. A [`kind::Read`] call is journaled with its
//! output as soon as it succeeds, so a resumed step is served the journaled text and never
//! asks the model again, and a second call with the same input in the same run is served
//! from the run's journal too (the read cache, on by default): one sample per input. Ask
//! for a fresh sample by changing the input (a draft number in the context, say). A write
//! tool's idempotency key would buy nothing here (no provider honours one for a completion)
//! and would cost a journal write before every attempt. A call interrupted before its
//! result is journaled is asked again, as any read; its deltas were only ever ephemeral.
//!
//! ## Policy
//!
//! [`GenerateText`] allows 10 minutes per attempt (the [`HttpSettings`] of its provider
//! bound each HTTP request and stream tighter, retries included) and 2 attempts: the
//! provider's transient statuses are already retried by the HTTP layer, so the runner's
//! second attempt is for a stream that was cut or stalled. For another name, kind or
//! policy, wrap a [`Generator`] in a tool of your own and call [`Generator::generate`].
//!
//! [`HttpSettings`]: crate::HttpSettings

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use agent_core::events::TokenSink;
use agent_core::metrics;
use agent_core::router::RouterReply;
use agent_core::store::{Spend, cost_micros};
use agent_core::{
    ErrorClass, Execute, RetryPolicy, Tool, ToolContext, ToolError, ToolPolicy, kind,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::anthropic::{AnthropicConfig, AnthropicRouter};
use crate::config::ConfigError;
use crate::openai::{OpenAiConfig, OpenAiRouter};

/// What the model is asked to write.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GenerateInput {
    /// Standing instructions: who writes, in what tone, what never to say (the system
    /// prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// What to write now (the user message).
    pub prompt: String,
    /// Facts to write from, as JSON (the typed state, a tool's result), appended to the
    /// prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
    /// Output token limit of this generation; the provider's configured limit when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

impl GenerateInput {
    /// Asked to write `prompt`.
    #[must_use]
    pub fn new(prompt: impl Into<String>) -> Self {
        Self {
            instructions: None,
            prompt: prompt.into(),
            context: None,
            max_tokens: None,
        }
    }

    /// With standing instructions (the system prompt).
    #[must_use]
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// With facts to write from.
    #[must_use]
    pub fn with_context(mut self, context: Value) -> Self {
        self.context = Some(context);
        self
    }

    /// With an output token limit.
    #[must_use]
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// The user message sent: the prompt, then the context as pretty JSON.
    #[must_use]
    pub fn user_message(&self) -> String {
        match &self.context {
            None | Some(Value::Null) => self.prompt.clone(),
            Some(context) => format!(
                "{}\n\nContext (JSON):\n{}",
                self.prompt,
                serde_json::to_string_pretty(context).unwrap_or_else(|_| context.to_string())
            ),
        }
    }
}

/// Tokens a generation was billed for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    /// Input (prompt) tokens, cache reads and writes included, as the provider reported.
    pub input_tokens: Option<u64>,
    /// Output (completion) tokens.
    pub output_tokens: Option<u64>,
}

/// What a generation or a routed answer cost, by the configured [`PriceTable`].
pub use agent_core::router::Cost;

/// What the model wrote: the tool's output, journaled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Generation {
    /// The text.
    pub text: String,
    /// The model that answered, as the provider named it.
    pub model: String,
    /// Tokens billed.
    pub usage: Usage,
    /// The cost, when a price table is configured and names the model and the provider
    /// reported both counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// The text was cut at the output token limit.
    #[serde(default)]
    pub truncated: bool,
}

/// The price of one model, per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// Per million input tokens.
    pub input_per_million: f64,
    /// Per million output tokens.
    pub output_per_million: f64,
}

/// Prices by model, in one currency. A model is priced by its exact name, else by the
/// longest configured name it starts with (so `gpt-4o-mini` prices the answering
/// `gpt-4o-mini-2024-07-18`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PriceTable {
    /// The currency of every price, e.g. `USD`.
    pub currency: String,
    /// Prices by model name.
    pub models: BTreeMap<String, Price>,
}

impl PriceTable {
    /// An empty table in `currency`.
    #[must_use]
    pub fn new(currency: impl Into<String>) -> Self {
        Self {
            currency: currency.into(),
            models: BTreeMap::new(),
        }
    }

    /// With `model` priced per million input and output tokens.
    #[must_use]
    pub fn with(
        mut self,
        model: impl Into<String>,
        input_per_million: f64,
        output_per_million: f64,
    ) -> Self {
        self.models.insert(
            model.into(),
            Price {
                input_per_million,
                output_per_million,
            },
        );
        self
    }

    /// The price of `model`, if the table names it.
    #[must_use]
    pub fn price(&self, model: &str) -> Option<Price> {
        if let Some(p) = self.models.get(model) {
            return Some(*p);
        }
        self.models
            .iter()
            .filter(|(name, _)| !name.is_empty() && model.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, p)| *p)
    }

    /// What `usage` of `model` cost, when priced and both counts are known.
    #[must_use]
    pub fn cost(&self, model: &str, usage: Usage) -> Option<Cost> {
        let price = self.price(model)?;
        #[allow(clippy::cast_precision_loss)] // token counts are far below 2^52
        let amount = (usage.input_tokens? as f64 * price.input_per_million
            + usage.output_tokens? as f64 * price.output_per_million)
            / 1_000_000.0;
        Some(Cost {
            amount,
            currency: self.currency.clone(),
        })
    }

    /// Price a router's answer ([`RouterReply::cost`]) by the model that answered.
    pub(crate) fn price_reply(
        &self,
        reply: &mut Result<RouterReply, agent_core::router::RouterError>,
    ) {
        if let Ok(reply) = reply {
            let usage = Usage {
                input_tokens: reply.input_tokens,
                output_tokens: reply.output_tokens,
            };
            reply.cost = self.cost(&reply.model, usage);
        }
    }
}

/// A provider's complete written answer, before pricing.
#[derive(Debug)]
pub(crate) struct Written {
    reply: RouterReply,
    text: String,
}

impl Written {
    pub(crate) fn new(reply: RouterReply, text: String) -> Self {
        Self { reply, text }
    }
}

#[derive(Debug)]
enum Backend {
    OpenAi(OpenAiRouter),
    Anthropic(AnthropicRouter),
}

/// Has a model write text, on an OpenAI-compatible server or on Anthropic, streaming its
/// tokens to a [`TokenSink`] as they come (when the provider's
/// [`Streaming`](crate::Streaming) setting says so) and pricing the answer by an optional
/// [`PriceTable`]. Cheap to clone.
#[derive(Clone)]
pub struct Generator {
    backend: Arc<Backend>,
    prices: Option<Arc<PriceTable>>,
}

impl fmt::Debug for Generator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Generator")
            .field("backend", &self.backend)
            .field("priced", &self.prices.is_some())
            .finish()
    }
}

impl Generator {
    /// A generator on an OpenAI-compatible chat completions endpoint.
    ///
    /// # Errors
    /// As [`OpenAiRouter::new`].
    pub fn openai(config: OpenAiConfig) -> Result<Self, ConfigError> {
        Ok(Self::with_backend(Backend::OpenAi(OpenAiRouter::new(
            config,
        )?)))
    }

    /// A generator on Anthropic's messages API.
    ///
    /// # Errors
    /// As [`AnthropicRouter::new`].
    pub fn anthropic(config: AnthropicConfig) -> Result<Self, ConfigError> {
        Ok(Self::with_backend(Backend::Anthropic(
            AnthropicRouter::new(config)?,
        )))
    }

    fn with_backend(backend: Backend) -> Self {
        Self {
            backend: Arc::new(backend),
            prices: None,
        }
    }

    /// Price every generation by `prices`.
    #[must_use]
    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.prices = Some(Arc::new(prices));
        self
    }

    /// Have the model write text for `input`, its tokens sent to `tokens` as they come.
    ///
    /// # Errors
    /// A [`ToolError`] of the provider's error class (a stalled stream is a timeout, a cut
    /// one retryable, an `overloaded_error` event retryable, refused credentials `auth`, ...),
    /// and a permanent one when the model refused to answer.
    pub async fn generate(
        &self,
        input: &GenerateInput,
        tokens: &TokenSink,
    ) -> Result<Generation, ToolError> {
        let written = match &*self.backend {
            Backend::OpenAi(r) => r.write(input, tokens).await,
            Backend::Anthropic(r) => r.write(input, tokens).await,
        }
        .map_err(|e| tool_error(e.class, e.message))?;
        let Written { reply, text } = written;
        // The same reduction as a decision's: text whose answer contradicts itself (two end
        // reasons, several candidate messages, a repeated key) is not taken either.
        if let Some(conflict) = reply.conflicts.first() {
            return Err(ToolError::permanent(format!(
                "the model's answer is ambiguous: {conflict}"
            )));
        }
        if let Some(refusal) = reply.refusal {
            return Err(ToolError::permanent(format!(
                "the model refused to write: {refusal}"
            )));
        }
        let usage = Usage {
            input_tokens: reply.input_tokens,
            output_tokens: reply.output_tokens,
        };
        Ok(Generation {
            text,
            cost: self
                .prices
                .as_ref()
                .and_then(|p| p.cost(&reply.model, usage)),
            model: reply.model,
            usage,
            truncated: reply.truncated,
        })
    }
}

fn tool_error(class: ErrorClass, message: String) -> ToolError {
    match class {
        ErrorClass::Retryable => ToolError::retryable(message),
        ErrorClass::Timeout => ToolError::timeout(message),
        ErrorClass::RateLimited => ToolError::rate_limited(message, None),
        ErrorClass::Auth => ToolError::auth(message),
        ErrorClass::Disabled => ToolError::disabled(message),
        ErrorClass::Permanent => ToolError::permanent(message),
    }
}

/// The ready-made generation tool: a [`Generator`] as a read tool named `GenerateText`
/// (see the [module docs](self) for why read, and its policy).
///
/// ```no_run
/// use durable_agents::ToolBox;
/// use durable_agents::llm::{GenerateText, Generator, OpenAiConfig, PriceTable};
///
/// # fn main() -> Result<(), durable_agents::llm::ConfigError> {
/// let writer = Generator::openai(OpenAiConfig::ollama("llama3.1"))?
///     .with_prices(PriceTable::new("USD").with("llama3.1", 0.0, 0.0));
/// let tools = ToolBox::new().with(GenerateText(writer));
/// # let _ = tools;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct GenerateText(pub Generator);

impl Tool for GenerateText {
    const NAME: &'static str = "GenerateText";
    const DESCRIPTION: &'static str =
        "Have the language model write text (a reply, a summary) from a prompt and context.";
    type Kind = kind::Read;
    type Input = GenerateInput;
    type Output = Generation;

    fn policy() -> ToolPolicy {
        ToolPolicy {
            timeout: Duration::from_mins(10),
            retry: RetryPolicy {
                max_attempts: 2,
                ..RetryPolicy::default()
            },
            cache: true,
            journal_with_commit: false,
        }
    }

    /// The tokens and cost of a generation count in the run's spend and its budgets.
    const REPORTS_SPEND: bool = true;

    fn spend(output: &Generation) -> Spend {
        Spend {
            input_tokens: output.usage.input_tokens.unwrap_or(0),
            output_tokens: output.usage.output_tokens.unwrap_or(0),
            cost_micros: output.cost.as_ref().map_or(0, |c| cost_micros(c.amount)),
            ..Spend::default()
        }
    }
}

impl Execute for GenerateText {
    async fn execute(
        &self,
        input: GenerateInput,
        cx: &ToolContext,
    ) -> Result<Generation, ToolError> {
        let generation = self.0.generate(&input, &cx.tokens).await?;
        // Counted once per executed generation: a replayed one is served from the journal.
        let Generation {
            model, usage, cost, ..
        } = &generation;
        metrics::model_tokens(cx.agent, model, usage.input_tokens, usage.output_tokens);
        if let Some(cost) = cost {
            metrics::model_cost(cx.agent, model, &cost.currency, cost.amount);
        }
        Ok(generation)
    }
}
