//! `#[agent(...)]` on the enum: tools, name, version, `migrate_from` and the rest.

use syn::meta::ParseNestedMeta;
use syn::parse::Parse;
use syn::spanned::Spanned;
use syn::{Attribute, Ident, LitInt, LitStr, Path, Token};

use crate::ctxt::{Ctxt, Message};
use crate::names;

use super::budget::{Budget, budget};
use super::values::Written;
use super::values::{
    crate_path, empty_parens, flag, key_of, parse_each, path_text, positive_u64, skip_value,
    unknown_key, value,
};
use super::{
    AGENT, Attr, BUDGET, COMPENSATE, CRATE, DAG, ENUM_KEYS, HANDLERS, Kind, MAX_STEPS,
    MIGRATE_FROM, MIGRATE_KEYS, MODULE, NAME, SKIP_SIGNAL, TOOLS, VARIANT_KEYS, VERSION, WITH,
};

/// `read(A)`, `write(B)` or `hybrid(C(compensate = B))` inside the enum's `tools(...)`.
pub(crate) struct ToolDecl {
    pub(crate) path: Path,
    pub(crate) ident: Ident,
    pub(crate) kind: Kind,
    pub(crate) compensate: Option<Ident>,
}

pub(crate) struct EnumAttrs {
    pub(crate) tools: Attr<Vec<ToolDecl>>,
    pub(crate) dag: Attr<()>,
    pub(crate) name: Attr<String>,
    pub(crate) module: Attr<Ident>,
    pub(crate) handlers: Attr<Ident>,
    pub(crate) krate: Attr<Path>,
    pub(crate) max_steps: Attr<u64>,
    /// `budget(...)`: each run's budget unless its start sets one.
    pub(crate) budget: Attr<Budget>,
    pub(crate) version: Attr<u32>,
    pub(crate) migrate_from: Attr<MigrateFrom>,
}

/// `migrate_from(v1::Checkout, with = from_v1, skip_signal("approval"))`.
pub(crate) struct MigrateFrom {
    /// The previous version's enum.
    pub(crate) source: Path,
    /// The mapping `fn(Old) -> New`.
    pub(crate) with: Path,
    /// The signals the migration may leave unwaited, each with its literal's span.
    pub(crate) skip_signals: Vec<LitStr>,
}

pub(crate) fn enum_attrs(cx: &Ctxt, attrs: &[Attribute]) -> EnumAttrs {
    let mut out = EnumAttrs {
        tools: Attr::none(TOOLS),
        dag: Attr::none(DAG),
        name: Attr::none(NAME),
        module: Attr::none(MODULE),
        handlers: Attr::none(HANDLERS),
        krate: Attr::none(CRATE),
        max_steps: Attr::none(MAX_STEPS),
        budget: Attr::none(BUDGET),
        version: Attr::none(VERSION),
        migrate_from: Attr::none(MIGRATE_FROM),
    };
    parse_each(cx, AGENT, attrs, |meta| {
        let span = meta.path.span();
        match key_of(&meta).as_str() {
            TOOLS => {
                if let Some(tools) = tool_decls(cx, &meta)? {
                    out.tools.set(cx, span, tools);
                }
            }
            DAG => flag(cx, &meta, &mut out.dag)?,
            NAME => {
                if let Some(v) = value(cx, &meta, "\"agent name\"", <LitStr as Parse>::parse)? {
                    if v.value().is_empty() {
                        cx.error(v.span(), "the agent name must not be empty");
                    } else if let Some(problem) = name_problem(&v.value()) {
                        cx.error(
                            v.span(),
                            Message::new(format!("the agent name {:?} contains {problem}", v.value()))
                                .note("the name is stored with every run, keys its claims and names it in URLs and exported graphs")
                                .help("use letters, digits and punctuation without spaces, like `checkout-v2`"),
                        );
                    } else {
                        out.name.set(cx, span, v.value());
                    }
                }
            }
            MODULE => {
                if let Some(v) = value(cx, &meta, "module_name", Ident::parse)? {
                    out.module.set(cx, span, v);
                }
            }
            HANDLERS => {
                if let Some(v) = value(cx, &meta, "TraitName", Ident::parse)? {
                    out.handlers.set(cx, span, v);
                }
            }
            CRATE => {
                if let Some(v) = crate_path(cx, &meta)? {
                    out.krate.set(cx, span, v);
                }
            }
            MAX_STEPS => {
                if let Some(v) = value(cx, &meta, "N (a positive integer)", positive_u64)? {
                    out.max_steps.set(cx, span, v);
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
            VERSION => {
                if !out.version.first(cx, span) {
                    return skip_value(meta.input);
                }
                if let Some(v) = version(cx, &meta)? {
                    out.version.set(cx, span, v);
                }
            }
            MIGRATE_FROM => {
                if !out.migrate_from.first(cx, span) {
                    return skip_value(meta.input);
                }
                if let Some(v) = migrate_from(cx, &meta)? {
                    out.migrate_from.set(cx, span, v);
                }
            }
            _ => {
                let place = "the enum";
                if VARIANT_KEYS.contains(&key_of(&meta).as_str()) {
                    let key = key_of(&meta);
                    cx.error(
                        span,
                        Message::new(format!("`{key}` belongs on a variant, not on the enum"))
                            .help("move it to the `#[agent(...)]` of a state"),
                    );
                    skip_value(meta.input)?;
                } else {
                    unknown_key(cx, &meta, AGENT, ENUM_KEYS, Some(place))?;
                }
            }
        }
        Ok(())
    });
    out
}

/// What makes `name` unfit to name an agent: whitespace or a control character (a name is
/// printable text in one piece).
fn name_problem(name: &str) -> Option<String> {
    let c = name.chars().find(|c| c.is_whitespace() || c.is_control())?;
    Some(match c {
        ' ' => "a space".to_owned(),
        '\n' | '\r' => "a line break".to_owned(),
        '\t' => "a tab".to_owned(),
        c if c.is_control() => format!("the control character U+{:04X}", u32::from(c)),
        c => format!("the whitespace character U+{:04X}", u32::from(c)),
    })
}

/// `version = N`: a whole number, 1 or more, reported at the value otherwise.
fn version(cx: &Ctxt, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<u32>> {
    if !meta.input.peek(Token![=]) {
        cx.error(
            meta.path.span(),
            Message::new("expected `version = N`")
                .help("write the agent's version as a whole number, like `version = 2`"),
        );
        skip_value(meta.input)?;
        return Ok(None);
    }
    meta.input.parse::<Token![=]>()?;
    let written = Written::read(meta)?;
    let span = written.span;
    let parsed = syn::parse2::<LitInt>(written.tokens.clone())
        .ok()
        .filter(|lit| lit.suffix().is_empty())
        .map(|lit| lit.base10_parse::<u32>());
    match parsed {
        Some(Ok(0)) => {
            cx.error(
                span,
                Message::new("versions start at 1: `version = 0` is not a version").help("the first version of an agent is 1 (also what it is without `version`); number the next one 2"),
            );
            Ok(None)
        }
        Some(Ok(n)) => Ok(Some(n)),
        _ => {
            let shown = written.shown();
            let help = if written.is_quoted() {
                "write the number without quotes, like `version = 2`".to_owned()
            } else {
                format!(
                    "write a whole number from 1 to {}, like `version = 2`",
                    u32::MAX
                )
            };
            cx.error(
                span,
                Message::new(format!(
                    "expected `version = N` with N a whole number of 1 or more, found {shown}"
                ))
                .help(help),
            );
            Ok(None)
        }
    }
}

/// `migrate_from(path::to::Old, with = function, skip_signal("a", "b"))`. Every mistake
/// inside is reported; the value is kept only when it is whole.
fn migrate_from(cx: &Ctxt, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<MigrateFrom>> {
    const EXAMPLE: &str = "migrate_from(v1::MyAgent, with = from_v1)";
    if !meta.input.peek(syn::token::Paren) {
        cx.error(
            meta.path.span(),
            Message::new("expected `migrate_from(...)` with the previous version's enum and its mapping")
                .help(format!("write `{EXAMPLE}`, where `fn from_v1(old: v1::MyAgent) -> MyAgent` maps each old state")),
        );
        skip_value(meta.input)?;
        return Ok(None);
    }
    let mut source: Option<Path> = None;
    let mut with = Attr::<Path>::none(WITH);
    let mut skip = Attr::<Vec<LitStr>>::none(SKIP_SIGNAL);
    let mut whole = true;
    let nested = meta.parse_nested_meta(|item| {
        let key = key_of(&item);
        let bare = item.input.is_empty() || item.input.peek(Token![,]);
        match key.as_str() {
            WITH => {
                if !with.first(cx, item.path.span()) {
                    whole = false;
                    return skip_value(item.input);
                }
                match value(cx, &item, "function", Path::parse_mod_style)? {
                    Some(f) => with.set(cx, item.path.span(), f),
                    None => whole = false,
                }
            }
            SKIP_SIGNAL => {
                if !skip.first(cx, item.path.span()) {
                    whole = false;
                    return skip_value(item.input);
                }
                match skip_signals(cx, &item)? {
                    Some(v) => skip.set(cx, item.path.span(), v),
                    None => whole = false,
                }
            }
            _ if bare && source.is_none() && !with.is_given() && !skip.is_given() => {
                source = Some(item.path.clone());
            }
            _ if bare => {
                whole = false;
                let msg = if source.is_some() {
                    Message::new(format!("`migrate_from(...)` names one source, and `{}` is a second", path_text(&item.path)))
                        .help("a version migrates from the version before it; chains compose (version 3 migrates from 2, which migrates from 1)")
                } else {
                    Message::new(format!("the previous version's enum comes first in `migrate_from(...)`, before `{}`", path_text(&item.path)))
                        .help(format!("write `{EXAMPLE}`"))
                };
                cx.error(item.path.span(), msg);
            }
            _ => {
                whole = false;
                unknown_key(cx, &item, AGENT, MIGRATE_KEYS, Some("`migrate_from(...)`"))?;
            }
        }
        Ok(())
    });
    if let Err(e) = nested {
        cx.syn_error(e);
        return Ok(None);
    }
    let Some(source) = source else {
        cx.error(
            meta.path.span(),
            Message::new("`migrate_from(...)` does not name the previous version's enum")
                .help(format!("name it first: `{EXAMPLE}`")),
        );
        return Ok(None);
    };
    if !with.is_given() {
        let old = path_text(&source);
        let last = source
            .segments
            .last()
            .map(|s| names::unraw(&s.ident))
            .unwrap_or_default();
        cx.error(
            meta.path.span(),
            Message::new(format!("`migrate_from({old})` has no `with = function` mapping its states"))
                .help(format!("write `migrate_from({old}, with = from_old)` and a function `fn from_old(old: {old}) -> {last} {{ match old {{ ... }} }}` that maps each old state (an exhaustive `match`, so a forgotten state does not compile)")),
        );
        return Ok(None);
    }
    let (Some(with), true) = (with.take(), whole) else {
        return Ok(None);
    };
    Ok(Some(MigrateFrom {
        source,
        with,
        skip_signals: skip.take().unwrap_or_default(),
    }))
}

/// `skip_signal("a", "b")`: signal names, each once.
fn skip_signals(cx: &Ctxt, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Vec<LitStr>>> {
    let expected = || {
        Message::new("expected `skip_signal(\"signal\", ...)` with the signals' names as strings")
            .help("write `skip_signal(\"approval\")`")
    };
    if !meta.input.peek(syn::token::Paren) {
        cx.error(meta.path.span(), expected());
        skip_value(meta.input)?;
        return Ok(None);
    }
    let content;
    syn::parenthesized!(content in meta.input);
    // Taken whole, so that a malformed list is one error, not one more for what is left.
    let tokens: proc_macro2::TokenStream = content.parse()?;
    let strings = syn::punctuated::Punctuated::<LitStr, Token![,]>::parse_terminated;
    let list = match syn::parse::Parser::parse2(strings, tokens) {
        Ok(list) => list,
        Err(e) => {
            cx.error(e.span(), expected());
            return Ok(None);
        }
    };
    if list.is_empty() {
        cx.error(
            meta.path.span(),
            Message::new("`skip_signal()` names no signal").help(
                "name the signals the migration may leave unwaited, or remove `skip_signal()`",
            ),
        );
        return Ok(None);
    }
    let mut out: Vec<LitStr> = Vec::new();
    let mut ok = true;
    for lit in list {
        let name = lit.value();
        if name.is_empty() {
            cx.error(lit.span(), "the signal name must not be empty");
            ok = false;
        } else if out.iter().any(|o| o.value() == name) {
            cx.error(
                lit.span(),
                Message::new(format!(
                    "signal `{name}` is named twice in `skip_signal(...)`"
                ))
                .help("remove this one"),
            );
            ok = false;
        } else {
            out.push(lit);
        }
    }
    Ok(ok.then_some(out))
}

/// `tools(read(A, B), write(C), hybrid(D(compensate = C)))`
fn tool_decls(cx: &Ctxt, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Vec<ToolDecl>>> {
    if !meta.input.peek(syn::token::Paren) {
        cx.error(
            meta.path.span(),
            "expected `tools(read(...), write(...), hybrid(...))`",
        );
        skip_value(meta.input)?;
        return Ok(None);
    }
    if empty_parens(meta.input)? {
        cx.error(
            meta.path.span(),
            Message::new("`tools()` declares no tools").help(
                "declare the agent's tools by kind, `tools(read(SearchProducts), write(ChargePayment))`, or remove `tools()`",
            ),
        );
        return Ok(Some(Vec::new()));
    }
    let mut out = Vec::new();
    let nested = meta.parse_nested_meta(|group| {
        let kind_name = key_of(&group);
        let Some(kind) = Kind::from_name(&kind_name) else {
            let mut msg = Message::new(format!("unknown tool kind `{kind_name}`")).help("declare tools as `read(...)`, `write(...)` or `hybrid(...)`");
            if !group.input.peek(syn::token::Paren) {
                msg = Message::new(format!("`{kind_name}` has no kind")).help(format!("declare tools by kind: `tools(read({kind_name}))`, `tools(write({kind_name}))` or `tools(hybrid({kind_name}(compensate = ...)))`"));
            }
            cx.error(group.path.span(), msg);
            return skip_value(group.input);
        };
        if !group.input.peek(syn::token::Paren) {
            cx.error(
                group.path.span(),
                format!("expected `{kind_name}(ToolA, ToolB)`"),
            );
            return skip_value(group.input);
        }
        if empty_parens(group.input)? {
            cx.error(
                group.path.span(),
                Message::new(format!("`{kind_name}()` lists no tools")).help(format!(
                    "list the {kind_name} tools, `{kind_name}(ToolA, ToolB)`, or remove `{kind_name}()`"
                )),
            );
            return Ok(());
        }
        group.parse_nested_meta(|tool| {
            let Some(ident) = tool.path.segments.last().map(|s| s.ident.clone()) else {
                return Ok(());
            };
            let mut compensate = None;
            if tool.input.peek(syn::token::Paren) {
                if kind == Kind::Hybrid {
                    let mut seen = false;
                    tool.parse_nested_meta(|c| {
                        if key_of(&c) == COMPENSATE {
                            if seen {
                                cx.error(c.path.span(), "duplicate key `compensate`");
                            }
                            seen = true;
                            if let Some(v) = value(cx, &c, "WriteTool", Ident::parse)? {
                                compensate = Some(v);
                            }
                            Ok(())
                        } else {
                            unknown_key(cx, &c, AGENT, &[COMPENSATE], Some("a hybrid tool"))
                        }
                    })?;
                } else {
                    cx.error(
                        tool.path.span(),
                        Message::new(format!("only hybrid tools name a compensation; `{ident}` is declared `{kind_name}`")).help(format!("declare it as `hybrid({ident}(compensate = ...))`, or remove the parentheses")),
                    );
                    skip_value(tool.input)?;
                }
            } else if !(tool.input.is_empty() || tool.input.peek(Token![,])) {
                cx.error(tool.path.span(), format!("expected a tool type in `{kind_name}(...)`"));
                skip_value(tool.input)?;
                return Ok(());
            }
            out.push(ToolDecl {
                path: tool.path.clone(),
                ident,
                kind,
                compensate,
            });
            Ok(())
        })
    });
    if let Err(e) = nested {
        cx.syn_error(e);
    }
    Ok(Some(out))
}
