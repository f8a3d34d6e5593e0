//! `#[agent(...)]` on a variant: its state's edges, tools, wait, timer, limits and children.

use proc_macro2::Span;
use syn::meta::ParseNestedMeta;
use syn::parse::Parse;
use syn::spanned::Spanned;
use syn::{Attribute, Ident, LitStr, Path, Token, Type};

use crate::ctxt::{Ctxt, Message};
use crate::names;

use super::budget::{Budget, budget};
use super::values::{
    empty_parens, flag, key_of, name_list, parse_each, path_list, positive_u32, positive_u64,
    skip_value, unknown_key, value,
};
use super::{
    AGENT, ARGS, Attr, BUDGET, CHILDREN, CHILDREN_OUTLIVE, COMPENSATE, DECISION_TIMEOUT_MS,
    ENUM_KEYS, INITIAL, Kind, MAX_TOOL_CALLS, ON_BUDGET, ON_ERROR, ROUTE, TERMINAL, TIMEOUT_MS,
    TIMER, TIMER_MS, TO, TOOLS, TOOLS_PER_ANSWER, VARIANT_KEYS, WAIT, WAIT_PAYLOAD,
    WAIT_TIMEOUT_MS,
};

/// `Payment` or `Payment(args = PayArgs)` inside a state's `to(...)`.
pub(crate) struct TargetDecl {
    pub(crate) ident: Ident,
    /// The argument the model must give with this transition: the span of `args`, the type.
    pub(crate) args: Option<(Span, Type)>,
}

pub(crate) struct VariantAttrs {
    pub(crate) initial: Attr<()>,
    pub(crate) terminal: Attr<()>,
    pub(crate) compensate: Attr<()>,
    pub(crate) to: Attr<Vec<TargetDecl>>,
    pub(crate) tools: Attr<Vec<Ident>>,
    pub(crate) route_llm: Attr<()>,
    pub(crate) wait: Attr<String>,
    pub(crate) wait_timeout_ms: Attr<u64>,
    /// The type of the signal's payload, for its JSON Schema in the graph description.
    pub(crate) wait_payload: Attr<syn::Type>,
    /// `timer = field`: the state's field that holds when its timer is due.
    pub(crate) timer: Attr<Ident>,
    /// `timer_ms = N`: a fixed delay.
    pub(crate) timer_ms: Attr<u64>,
    pub(crate) on_error: Attr<Ident>,
    pub(crate) on_budget: Attr<Ident>,
    /// `budget(...)`: what one visit may spend.
    pub(crate) budget: Attr<Budget>,
    pub(crate) max_tool_calls: Attr<u32>,
    pub(crate) tools_per_answer: Attr<u32>,
    pub(crate) timeout_ms: Attr<u64>,
    pub(crate) decision_timeout_ms: Attr<u64>,
    pub(crate) children: Attr<Vec<Path>>,
    pub(crate) children_outlive: Attr<()>,
}

/// `to(A, B(args = Type))`: the successors, each optionally with the type of the argument
/// the model gives with it, written as a hybrid tool names its compensation.
fn targets(cx: &Ctxt, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Vec<TargetDecl>>> {
    if !meta.input.peek(syn::token::Paren) {
        cx.error(meta.path.span(), "expected `to(...)` with a list of states");
        skip_value(meta.input)?;
        return Ok(None);
    }
    if empty_parens(meta.input)? {
        // `to()`: reported by the checks as a list of nothing, not as a parse error.
        return Ok(Some(Vec::new()));
    }
    let mut out = Vec::new();
    let nested = meta.parse_nested_meta(|item| {
        let Some(ident) = item.path.get_ident().cloned() else {
            cx.error(
                item.path.span(),
                "expected a list of states in `to(...)`, like `to(A, B)`",
            );
            return skip_value(item.input);
        };
        if item.input.is_empty() || item.input.peek(Token![,]) {
            out.push(TargetDecl { ident, args: None });
            return Ok(());
        }
        if !item.input.peek(syn::token::Paren) {
            cx.error(
                item.path.span(),
                "expected a list of states in `to(...)`, like `to(A, B)`",
            );
            return skip_value(item.input);
        }
        let mut args: Option<(Span, Type)> = None;
        let mut given = false;
        let target = names::unraw(&ident);
        item.parse_nested_meta(|a| {
            let key = key_of(&a);
            if key == ARGS {
                if given {
                    cx.error(
                        a.path.span(),
                        Message::new(format!("duplicate key `args` on transition `{target}`"))
                            .help("a transition takes one argument; make it a struct with one field per value"),
                    );
                    return skip_value(a.input);
                }
                given = true;
                if let Some(ty) = value(cx, &a, "Type", Type::parse)? {
                    args = Some((a.path.span(), ty));
                }
                Ok(())
            } else if !a.input.peek(Token![=]) {
                // `Payment(PayArgs)`: a type where `args = Type` belongs.
                let ty = if a.input.is_empty() || a.input.peek(Token![,]) {
                    key
                } else {
                    "Type".to_owned()
                };
                cx.error(
                    a.path.span(),
                    Message::new(format!("expected `{target}(args = {ty})`")).help(format!(
                        "a transition's argument is declared with `args = Type`, as a hybrid tool's compensation is with `compensate = Tool`: `to({target}(args = {ty}))`"
                    )),
                );
                skip_value(a.input)
            } else {
                unknown_key(cx, &a, AGENT, &[ARGS], Some("a transition"))
            }
        })?;
        out.push(TargetDecl { ident, args });
        Ok(())
    });
    if let Err(e) = nested {
        cx.syn_error(e);
    }
    Ok(Some(out))
}

pub(crate) fn variant_attrs(cx: &Ctxt, attrs: &[Attribute]) -> VariantAttrs {
    let mut out = VariantAttrs {
        initial: Attr::none(INITIAL),
        terminal: Attr::none(TERMINAL),
        compensate: Attr::none(COMPENSATE),
        to: Attr::none(TO),
        tools: Attr::none(TOOLS),
        route_llm: Attr::none(ROUTE),
        wait: Attr::none(WAIT),
        wait_timeout_ms: Attr::none(WAIT_TIMEOUT_MS),
        wait_payload: Attr::none(WAIT_PAYLOAD),
        timer: Attr::none(TIMER),
        timer_ms: Attr::none(TIMER_MS),
        on_error: Attr::none(ON_ERROR),
        on_budget: Attr::none(ON_BUDGET),
        budget: Attr::none(BUDGET),
        max_tool_calls: Attr::none(MAX_TOOL_CALLS),
        tools_per_answer: Attr::none(TOOLS_PER_ANSWER),
        timeout_ms: Attr::none(TIMEOUT_MS),
        decision_timeout_ms: Attr::none(DECISION_TIMEOUT_MS),
        children: Attr::none(CHILDREN),
        children_outlive: Attr::none(CHILDREN_OUTLIVE),
    };
    parse_each(cx, AGENT, attrs, |meta| {
        let span = meta.path.span();
        match key_of(&meta).as_str() {
            INITIAL => flag(cx, &meta, &mut out.initial)?,
            TERMINAL => flag(cx, &meta, &mut out.terminal)?,
            COMPENSATE => flag(cx, &meta, &mut out.compensate)?,
            TO => {
                if let Some(v) = targets(cx, &meta)? {
                    out.to.set(cx, span, v);
                }
            }
            TOOLS => {
                if meta.input.peek(syn::token::Paren) {
                    let fork = meta.input.fork();
                    let content;
                    syn::parenthesized!(content in fork);
                    let first: Option<Ident> = content.fork().parse().ok();
                    if let Some(first) = first {
                        let kind = names::unraw(&first);
                        if Kind::from_name(&kind).is_some() && content.peek2(syn::token::Paren) {
                            cx.error(
                                first.span(),
                                Message::new("tool kinds are declared on the enum, not on a state").help(format!("move `{kind}(...)` to the enum's `#[agent(tools(...))]` and list the tools here by name")),
                            );
                            skip_value(meta.input)?;
                            return Ok(());
                        }
                    }
                }
                if let Some(v) = name_list(cx, &meta, "tools")? {
                    out.tools.set(cx, span, v);
                }
            }
            ROUTE => {
                if let Some(v) = value(cx, &meta, "llm", Ident::parse)? {
                    if v == "llm" {
                        out.route_llm.set(cx, span, ());
                    } else {
                        cx.error(
                            v.span(),
                            Message::new(format!("unknown route `{v}`")).help(
                                "the only route is `route = llm`; without it the handler decides",
                            ),
                        );
                    }
                }
            }
            WAIT => {
                if let Some(v) = value(cx, &meta, "\"signal_name\"", <LitStr as Parse>::parse)? {
                    if v.value().is_empty() {
                        cx.error(v.span(), "the signal name must not be empty");
                    } else {
                        out.wait.set(cx, span, v.value());
                    }
                }
            }
            WAIT_TIMEOUT_MS => {
                if let Some(v) = value(cx, &meta, "N (milliseconds)", positive_u64)? {
                    out.wait_timeout_ms.set(cx, span, v);
                }
            }
            WAIT_PAYLOAD => {
                if let Some(v) = value(cx, &meta, "Type", syn::Type::parse)? {
                    out.wait_payload.set(cx, span, v);
                }
            }
            TIMER => {
                // `timer = 3000` or `timer = "3d"`: a delay where a field belongs.
                if meta.input.peek(Token![=]) && !meta.input.peek2(Ident) {
                    cx.error(
                        span,
                        Message::new("`timer = ...` names a field of the state")
                            .help("for a fixed delay write `timer_ms = N`; for a time the handler computes, give the state a field (a `Deadline`, `SystemTime` or `Duration`) and write `timer = field`"),
                    );
                    return skip_value(meta.input);
                }
                if let Some(v) = value(cx, &meta, "field", Ident::parse)? {
                    out.timer.set(cx, span, v);
                }
            }
            TIMER_MS => {
                if let Some(v) = value(cx, &meta, "N (milliseconds)", positive_u64)? {
                    out.timer_ms.set(cx, span, v);
                }
            }
            ON_ERROR | ON_BUDGET => {
                let edge = if key_of(&meta) == ON_ERROR {
                    &mut out.on_error
                } else {
                    &mut out.on_budget
                };
                if let Some(v) = value(cx, &meta, "State", Ident::parse)? {
                    edge.set(cx, span, v);
                }
            }
            BUDGET => {
                if !out.budget.first(cx, span) {
                    return skip_value(meta.input);
                }
                if let Some(v) = budget(cx, &meta)? {
                    out.budget.set(cx, span, v);
                }
            }
            MAX_TOOL_CALLS => {
                if let Some(v) = value(cx, &meta, "N (a positive integer)", positive_u32)? {
                    out.max_tool_calls.set(cx, span, v);
                }
            }
            TOOLS_PER_ANSWER => {
                if let Some(v) = value(cx, &meta, "N (a positive integer)", positive_u32)? {
                    out.tools_per_answer.set(cx, span, v);
                }
            }
            TIMEOUT_MS => {
                if let Some(v) = value(cx, &meta, "N (milliseconds)", positive_u64)? {
                    out.timeout_ms.set(cx, span, v);
                }
            }
            DECISION_TIMEOUT_MS => {
                if let Some(v) = value(cx, &meta, "N (milliseconds)", positive_u64)? {
                    out.decision_timeout_ms.set(cx, span, v);
                }
            }
            CHILDREN => {
                if let Some(v) = path_list(cx, &meta, "child agents")? {
                    out.children.set(cx, span, v);
                }
            }
            CHILDREN_OUTLIVE => flag(cx, &meta, &mut out.children_outlive)?,
            _ => {
                let key = key_of(&meta);
                if ENUM_KEYS.contains(&key.as_str()) {
                    cx.error(
                        span,
                        Message::new(format!("`{key}` belongs on the enum, not on a variant"))
                            .help("move it to the enum's `#[agent(...)]`"),
                    );
                    skip_value(meta.input)?;
                } else {
                    unknown_key(cx, &meta, AGENT, VARIANT_KEYS, Some("a variant"))?;
                }
            }
        }
        Ok(())
    });
    out
}
