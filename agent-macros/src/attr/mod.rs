//! Stage 1: the syntax of `#[agent(...)]`. Every key is parsed on its own so that one
//! malformed key does not hide the others; duplicates are reported at the second occurrence.

mod budget;
mod on_enum;
mod on_tool;
mod on_variant;
mod values;

use proc_macro2::Span;
use syn::Attribute;
use syn::spanned::Spanned;

use crate::ctxt::{Ctxt, Message};

pub(crate) use budget::Budget;
pub(crate) use on_enum::{MigrateFrom, ToolDecl, enum_attrs};
pub(crate) use on_tool::{ToolAttrs, tool_attrs};
pub(crate) use on_variant::variant_attrs;
use values::attrs_in;
pub(crate) use values::path_text;

/// The attribute namespace of `#[derive(Agent)]`.
pub(crate) const AGENT: &str = "agent";
/// The attribute namespace of `#[derive(Tool)]`.
pub(crate) const TOOL: &str = "tool";

pub(crate) const TOOLS: &str = "tools";
pub(crate) const DAG: &str = "dag";
pub(crate) const NAME: &str = "name";
pub(crate) const MODULE: &str = "module";
pub(crate) const HANDLERS: &str = "handlers";
pub(crate) const CRATE: &str = "crate";
pub(crate) const MAX_STEPS: &str = "max_steps";
pub(crate) const VERSION: &str = "version";
pub(crate) const MIGRATE_FROM: &str = "migrate_from";
/// On the enum, each run's budget; on a variant, what one visit may spend.
pub(crate) const BUDGET: &str = "budget";
/// Inside `budget(...)`: the limits.
pub(crate) const TOKENS: &str = "tokens";
pub(crate) const COST: &str = "cost";
pub(crate) const ASKS: &str = "asks";
pub(crate) const TOOL_CALLS: &str = "tool_calls";
/// Inside `migrate_from(...)`: the mapping function.
pub(crate) const WITH: &str = "with";
/// Inside `migrate_from(...)`: signals the migration may leave unwaited.
pub(crate) const SKIP_SIGNAL: &str = "skip_signal";

pub(crate) const INITIAL: &str = "initial";
pub(crate) const TERMINAL: &str = "terminal";
pub(crate) const COMPENSATE: &str = "compensate";
pub(crate) const TO: &str = "to";
pub(crate) const ROUTE: &str = "route";
pub(crate) const WAIT: &str = "wait";
pub(crate) const WAIT_TIMEOUT_MS: &str = "wait_timeout_ms";
pub(crate) const WAIT_PAYLOAD: &str = "wait_payload";
pub(crate) const TIMER: &str = "timer";
pub(crate) const TIMER_MS: &str = "timer_ms";
pub(crate) const ON_ERROR: &str = "on_error";
pub(crate) const ON_BUDGET: &str = "on_budget";
pub(crate) const MAX_TOOL_CALLS: &str = "max_tool_calls";
pub(crate) const TOOLS_PER_ANSWER: &str = "tools_per_answer";
pub(crate) const TIMEOUT_MS: &str = "timeout_ms";
pub(crate) const DECISION_TIMEOUT_MS: &str = "decision_timeout_ms";
pub(crate) const CHILDREN: &str = "children";
pub(crate) const CHILDREN_OUTLIVE: &str = "children_outlive";
/// Inside `to(...)`: `Payment(args = PayArgs)`.
pub(crate) const ARGS: &str = "args";

pub(crate) const KIND: &str = "kind";
pub(crate) const INPUT: &str = "input";
pub(crate) const OUTPUT: &str = "output";
pub(crate) const RETRIES: &str = "retries";
pub(crate) const CACHE: &str = "cache";
pub(crate) const JOURNAL_WITH_COMMIT: &str = "journal_with_commit";

const ENUM_KEYS: &[&str] = &[
    TOOLS,
    DAG,
    NAME,
    MODULE,
    HANDLERS,
    CRATE,
    MAX_STEPS,
    BUDGET,
    VERSION,
    MIGRATE_FROM,
];
const MIGRATE_KEYS: &[&str] = &[WITH, SKIP_SIGNAL];
const BUDGET_KEYS: &[&str] = &[TOKENS, COST, ASKS, TOOL_CALLS];
const VARIANT_KEYS: &[&str] = &[
    INITIAL,
    TERMINAL,
    COMPENSATE,
    TO,
    TOOLS,
    ROUTE,
    WAIT,
    WAIT_TIMEOUT_MS,
    WAIT_PAYLOAD,
    TIMER,
    TIMER_MS,
    ON_ERROR,
    ON_BUDGET,
    BUDGET,
    MAX_TOOL_CALLS,
    TOOLS_PER_ANSWER,
    TIMEOUT_MS,
    DECISION_TIMEOUT_MS,
    CHILDREN,
    CHILDREN_OUTLIVE,
];
const TOOL_KEYS: &[&str] = &[
    KIND,
    INPUT,
    OUTPUT,
    TIMEOUT_MS,
    RETRIES,
    CACHE,
    JOURNAL_WITH_COMMIT,
    CRATE,
];

/// One key's value, with the span of the key that set it.
pub(crate) struct Attr<T> {
    /// The attribute namespace, `agent` or `tool`.
    ns: &'static str,
    name: &'static str,
    value: Option<(Span, T)>,
    /// The key was written, even if its value was malformed (and reported).
    given: bool,
}

impl<T> Attr<T> {
    const fn none(name: &'static str) -> Self {
        Self::in_ns(AGENT, name)
    }

    const fn in_ns(ns: &'static str, name: &'static str) -> Self {
        Self {
            ns,
            name,
            value: None,
            given: false,
        }
    }

    fn set(&mut self, cx: &Ctxt, span: Span, value: T) {
        self.given = true;
        if self.value.is_some() {
            self.duplicate(cx, span);
        } else {
            self.value = Some((span, value));
        }
    }

    /// Record that the key was written, before its value is parsed. A key written before,
    /// even with a malformed value, is reported here, and `false` says to skip this one.
    fn first(&mut self, cx: &Ctxt, span: Span) -> bool {
        if self.given {
            self.duplicate(cx, span);
            return false;
        }
        self.given = true;
        true
    }

    fn duplicate(&self, cx: &Ctxt, span: Span) {
        cx.error(
            span,
            Message::new(format!(
                "duplicate key `{}` in `#[{}(...)]`",
                self.name, self.ns
            ))
            .help(format!(
                "remove this `{}`; each key may appear once",
                self.name
            )),
        );
    }

    pub(crate) const fn is_given(&self) -> bool {
        self.given
    }

    pub(crate) fn get(&self) -> Option<&T> {
        self.value.as_ref().map(|(_, v)| v)
    }

    pub(crate) fn span(&self) -> Option<Span> {
        self.value.as_ref().map(|(s, _)| *s)
    }

    pub(crate) fn is_set(&self) -> bool {
        self.value.is_some()
    }

    pub(crate) fn take(self) -> Option<T> {
        self.value.map(|(_, v)| v)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Read,
    Write,
    Hybrid,
}

impl Kind {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Hybrid => "hybrid",
        }
    }

    pub(crate) const ALL: [Self; 3] = [Self::Read, Self::Write, Self::Hybrid];

    pub(crate) fn from_name(name: &str) -> Option<Self> {
        match name {
            "read" => Some(Self::Read),
            "write" => Some(Self::Write),
            "hybrid" => Some(Self::Hybrid),
            _ => None,
        }
    }
}

/// `#[agent]` where it has no meaning (fields).
pub(crate) fn reject(cx: &Ctxt, attrs: &[Attribute], place: &str) {
    for attr in attrs_in(AGENT, attrs) {
        cx.error(
            attr.path().span(),
            Message::new(format!("`#[agent(...)]` is not allowed on {place}"))
                .help("put it on the enum or on a variant"),
        );
    }
}
