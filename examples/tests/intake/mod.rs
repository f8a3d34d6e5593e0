//! A small agent of the replay tests, in four builds of one agent `Intake`: as recorded
//! (version 1, `Noted` routed by code), with `Noted` routed by the model instead, and
//! version 2 twice, with two migration mappings from version 1 that differ.
//!
//! A ticket is opened (a note is written, an imported tool may be called), noted, then
//! answered. The handlers say which calls the open step makes, so that a test changes them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use durable_agents::agent::{AllowsTool, State};
use durable_agents::runner::ImportedTools;
use durable_agents::tool::{DynTool, ToolPolicy};
use durable_agents::{Ctx, Execute, StepError, StepResult, ToolContext, ToolError, ToolKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The input of [`Note`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub(crate) struct NoteInput {
    /// What to note.
    pub text: String,
}

/// Write a note on the ticket (its output is not in the state).
#[derive(Debug, Clone, durable_agents::Tool)]
#[tool(kind = write, input = NoteInput, output = ())]
pub(crate) struct Note;

impl Execute for Note {
    async fn execute(&self, _: NoteInput, _: &ToolContext) -> Result<(), ToolError> {
        Ok(())
    }
}

/// One build of the intake: its enum, its `#[agent]` head (name, version, migration,
/// module, handlers), the fields of `Open`, and how `Noted` is routed.
macro_rules! intake {
    (
        $(#[$doc:meta])*
        $name:ident, agent($($head:tt)*),
        open { $($open:ident: $ty:ty),* },
        noted($($route:tt)*)
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Serialize, Deserialize, durable_agents::Agent)]
        #[agent(name = "Intake", $($head)*, tools(write(Note)))]
        pub(crate) enum $name {
            /// A ticket is opened.
            #[agent(initial, tools(Note), to(Noted))]
            Open {
                /// The ticket's text.
                text: String,
                $(
                    /// Set by the migration.
                    $open: $ty,
                )*
            },
            /// Noted: answered or dropped.
            #[agent($($route)* to(Answered, Dropped))]
            Noted {
                /// The ticket's text.
                text: String,
            },
            /// Answered.
            #[agent(terminal)]
            Answered {
                /// The ticket's text.
                text: String,
            },
            /// Dropped.
            #[agent(terminal)]
            Dropped,
        }
    };
}

intake!(
    /// The intake as recorded: `Noted` routed by code.
    IntakeByCode,
    agent(module = by_code, handlers = ByCodeHandlers),
    open {},
    noted()
);

intake!(
    /// The same version of the intake, `Noted` now routed by the model.
    IntakeByModel,
    agent(module = by_model, handlers = ByModelHandlers),
    open {},
    noted(route = llm,)
);

intake!(
    /// Version 2: an opened ticket has a priority, set by the migration mapping.
    IntakeV2,
    agent(
        version = 2,
        migrate_from(IntakeByCode, with = v2_from_v1),
        module = v2,
        handlers = V2Handlers
    ),
    open { priority: u8 },
    noted()
);

intake!(
    /// Version 2 as [`IntakeV2`], its mapping changed: opened tickets get another priority.
    IntakeV2Changed,
    agent(
        version = 2,
        migrate_from(IntakeByCode, with = v2_from_v1_changed),
        module = v2_changed,
        handlers = V2ChangedHandlers
    ),
    open { priority: u8 },
    noted()
);

/// Version 1 to 2: an opened ticket gets priority 1.
#[must_use]
pub(crate) fn v2_from_v1(old: IntakeByCode) -> IntakeV2 {
    match old {
        IntakeByCode::Open { text } => IntakeV2::Open { text, priority: 1 },
        IntakeByCode::Noted { text } => IntakeV2::Noted { text },
        IntakeByCode::Answered { text } => IntakeV2::Answered { text },
        IntakeByCode::Dropped => IntakeV2::Dropped,
    }
}

/// The changed mapping: an opened ticket gets priority 2.
#[must_use]
pub(crate) fn v2_from_v1_changed(old: IntakeByCode) -> IntakeV2Changed {
    match old {
        IntakeByCode::Open { text } => IntakeV2Changed::Open { text, priority: 2 },
        IntakeByCode::Noted { text } => IntakeV2Changed::Noted { text },
        IntakeByCode::Answered { text } => IntakeV2Changed::Answered { text },
        IntakeByCode::Dropped => IntakeV2Changed::Dropped,
    }
}

/// The imported tool's name, as an MCP import names it (`server__tool`).
pub(crate) const ADD_NOTE: &str = "notes__add_note";

/// A tool imported from an MCP server, its input schema pinned by `schema` (the fingerprint
/// an import computes; here given).
#[derive(Debug)]
pub(crate) struct AddNote {
    /// The fingerprint of its input schema.
    pub schema: &'static str,
}

impl DynTool for AddNote {
    fn name(&self) -> &'static str {
        ADD_NOTE
    }

    fn description(&self) -> &'static str {
        "Add a note to the notes server."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Write
    }

    fn policy(&self) -> ToolPolicy {
        ToolPolicy::default()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": { "text": { "type": "string" } },
            "required": ["text"],
            "additionalProperties": false
        })
    }

    fn check_input(&self, input: &Value) -> Result<(), String> {
        input["text"]
            .is_string()
            .then_some(())
            .ok_or_else(|| "`text` must be a string".to_owned())
    }

    fn call_json<'a>(
        &'a self,
        _: Value,
        _: &'a ToolContext,
    ) -> Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send + 'a>> {
        Box::pin(async { Ok(json!({ "id": 7 })) })
    }

    fn compensation(&self, _: &Value, _: &Value) -> Option<Result<(String, Value), String>> {
        None
    }

    fn schema_fingerprint(&self) -> Option<String> {
        Some(self.schema.to_owned())
    }
}

/// [`AddNote`] under `schema`, legal in `Open`.
#[must_use]
pub(crate) fn imported(schema: &'static str) -> ImportedTools {
    ImportedTools::new()
        .with(Arc::new(AddNote { schema }))
        .allow("Open", ADD_NOTE)
}

/// What the open step calls; the other steps move on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handlers {
    /// Write a note with [`Note`].
    pub note: bool,
    /// Call the imported [`AddNote`] with this text.
    pub add_note: Option<&'static str>,
}

impl Handlers {
    /// A note, no imported call.
    pub(crate) const NOTE: Self = Self {
        note: true,
        add_note: None,
    };

    async fn open<S>(&self, ctx: &Ctx<'_, S>, text: &str) -> Result<(), StepError>
    where
        S: State + AllowsTool<Note>,
    {
        if self.note {
            ctx.call::<Note>(NoteInput {
                text: text.to_owned(),
            })
            .await?;
        }
        if let Some(add) = self.add_note {
            ctx.call_imported(ADD_NOTE, json!({ "text": add })).await?;
        }
        Ok(())
    }
}

/// The handlers of a build whose `Noted` is routed by code.
macro_rules! by_code {
    ($handlers:ident, $module:ident) => {
        impl $handlers for Handlers {
            async fn open(
                &self,
                ctx: Ctx<'_, $module::Open>,
                state: $module::Open,
            ) -> StepResult<$module::Open> {
                Self::open(self, &ctx, &state.text).await?;
                Ok(ctx.to($module::Noted { text: state.text }))
            }

            async fn noted(
                &self,
                ctx: Ctx<'_, $module::Noted>,
                $module::Noted { text }: $module::Noted,
            ) -> StepResult<$module::Noted> {
                Ok(ctx.to($module::Answered { text }))
            }
        }
    };
}

by_code!(ByCodeHandlers, by_code);
by_code!(V2Handlers, v2);
by_code!(V2ChangedHandlers, v2_changed);

impl ByModelHandlers for Handlers {
    async fn open(
        &self,
        ctx: Ctx<'_, by_model::Open>,
        by_model::Open { text }: by_model::Open,
    ) -> StepResult<by_model::Open> {
        Self::open(self, &ctx, &text).await?;
        Ok(ctx.to(by_model::Noted { text }))
    }

    async fn noted(
        &self,
        ctx: Ctx<'_, by_model::Noted>,
        route: by_model::NotedRoute,
        by_model::Noted { text }: by_model::Noted,
    ) -> StepResult<by_model::Noted> {
        Ok(match route {
            by_model::NotedRoute::Answered => ctx.to(by_model::Answered { text }),
            by_model::NotedRoute::Dropped => ctx.to(by_model::Dropped),
        })
    }
}
