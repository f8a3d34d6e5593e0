//! Stage 2: the model of an agent, each node keeping the span of the user's token.

use std::collections::HashMap;

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, Ident, Path, Visibility};

use crate::attr::{self, Budget, Kind, MigrateFrom, ToolDecl};
use crate::ctxt::{Ctxt, Message};
use crate::names;

pub(crate) struct Agent {
    pub(crate) ident: Ident,
    pub(crate) vis: Visibility,
    /// `NAME` and the graph's agent name.
    pub(crate) name: String,
    pub(crate) module: Ident,
    pub(crate) handlers: Ident,
    pub(crate) krate: Path,
    pub(crate) dag: bool,
    pub(crate) max_steps: Option<u64>,
    /// `budget(...)` on the enum: each run's.
    pub(crate) budget: Option<Budget>,
    /// `version = N`, with the span of `version`.
    pub(crate) version: Option<(Span, u32)>,
    /// `migrate_from(...)`, with the span of `migrate_from`.
    pub(crate) migrate_from: Option<(Span, MigrateFrom)>,
    pub(crate) tools: Vec<ToolDecl>,
    pub(crate) states: Vec<State>,
    /// The index in `states` of each state's name (without `r#`), and in `tools` of each
    /// tool's (the first, when declared twice): the expansion looks names up once per
    /// edge and per listed tool, which a scan comparing identifiers makes quadratic.
    state_index: HashMap<String, usize>,
    tool_index: HashMap<String, usize>,
}

pub(crate) struct State {
    pub(crate) ident: Ident,
    pub(crate) fields: Fields,
    pub(crate) initial: Option<Span>,
    pub(crate) terminal: Option<Span>,
    pub(crate) compensate: Option<Span>,
    pub(crate) llm: Option<Span>,
    pub(crate) wait: Option<(Span, String)>,
    pub(crate) wait_timeout_ms: Option<(Span, u64)>,
    /// `wait_payload = Type`: the signal payload's type.
    pub(crate) wait_payload: Option<(Span, syn::Type)>,
    /// `timer = field`, with the span of `timer`.
    pub(crate) timer: Option<(Span, Ident)>,
    /// `timer_ms = N`, with the span of `timer_ms`.
    pub(crate) timer_ms: Option<(Span, u64)>,
    pub(crate) to: Vec<Ident>,
    /// The typed transitions among `to(...)`, in the order written.
    pub(crate) args: Vec<Argument>,
    pub(crate) to_span: Option<Span>,
    pub(crate) on_error: Option<Ident>,
    pub(crate) on_budget: Option<Ident>,
    /// `budget(...)`, with the span of `budget`: what one visit may spend.
    pub(crate) budget: Option<(Span, Budget)>,
    pub(crate) tools: Vec<Ident>,
    pub(crate) tools_span: Option<Span>,
    pub(crate) max_tool_calls: Option<(Span, u32)>,
    pub(crate) tools_per_answer: Option<(Span, u32)>,
    pub(crate) timeout_ms: Option<(Span, u64)>,
    pub(crate) decision_timeout_ms: Option<(Span, u64)>,
    /// The child agents' types, as written in `children(...)`.
    pub(crate) children: Vec<syn::Path>,
    pub(crate) children_span: Option<Span>,
    pub(crate) children_outlive: Option<Span>,
}

/// The edges the runner takes, not the handler: `on_error = T` when a step fails, and
/// `on_budget = T` when it exceeds a budget. Their target is built from the step's failure.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailureEdge {
    Error,
    Budget,
}

impl FailureEdge {
    pub(crate) const ALL: [Self; 2] = [Self::Error, Self::Budget];

    pub(crate) const fn key(self) -> &'static str {
        match self {
            Self::Error => attr::ON_ERROR,
            Self::Budget => attr::ON_BUDGET,
        }
    }

    /// When the edge is taken, after "entered": `on error`.
    pub(crate) const fn when(self) -> &'static str {
        match self {
            Self::Error => "on error",
            Self::Budget => "when a budget is exceeded",
        }
    }

    /// What a step of the state did, after "when a step of `A`": `fails`.
    pub(crate) const fn step(self) -> &'static str {
        match self {
            Self::Error => "fails",
            Self::Budget => "exceeds a budget",
        }
    }
}

/// `to(Payment(args = PayArgs))`: the argument the model gives with a transition.
pub(crate) struct Argument {
    /// The target, as written in `to(...)`.
    pub(crate) to: Ident,
    /// The span of the `args` key.
    pub(crate) key: Span,
    pub(crate) ty: syn::Type,
}

impl State {
    /// The argument of the transition to `target`, if it declares one (the first, when the
    /// target is listed twice).
    pub(crate) fn argument(&self, target: &Ident) -> Option<&Argument> {
        self.args.iter().find(|a| names::same(&a.to, target))
    }

    pub(crate) fn name(&self) -> String {
        names::unraw(&self.ident)
    }

    /// The variant's data as written (`{ cart : Cart }`, `(u32)` or empty), without attributes.
    pub(crate) fn data(&self) -> String {
        let mut fields = self.fields.clone();
        for f in &mut fields {
            f.attrs.clear();
        }
        match fields {
            Fields::Unit => String::new(),
            f => unraw_tokens(quote::ToTokens::to_token_stream(&f)).to_string(),
        }
    }

    /// The target of `on_error` or `on_budget`.
    pub(crate) const fn failure_target(&self, edge: FailureEdge) -> Option<&Ident> {
        match edge {
            FailureEdge::Error => self.on_error.as_ref(),
            FailureEdge::Budget => self.on_budget.as_ref(),
        }
    }

    /// The declared successors: `to(...)` in order, then `on_error` and `on_budget` unless
    /// already listed.
    pub(crate) fn successors(&self) -> Vec<&Ident> {
        let mut out: Vec<&Ident> = Vec::new();
        for t in self
            .to
            .iter()
            .chain(self.on_error.iter())
            .chain(self.on_budget.iter())
        {
            if !out.iter().any(|o| names::same(o, t)) {
                out.push(t);
            }
        }
        out
    }
}

impl Agent {
    pub(crate) fn state(&self, name: &Ident) -> Option<&State> {
        self.state_position(name).map(|i| &self.states[i])
    }

    /// The index of the state named `name` in `states`.
    pub(crate) fn state_position(&self, name: &Ident) -> Option<usize> {
        self.state_index.get(&names::unraw(name)).copied()
    }

    pub(crate) fn tool(&self, name: &Ident) -> Option<&ToolDecl> {
        self.tool_index
            .get(&names::unraw(name))
            .map(|&i| &self.tools[i])
    }

    pub(crate) fn tool_kind(&self, name: &Ident) -> Option<Kind> {
        self.tool(name).map(|t| t.kind)
    }
}

/// Build the model. Returns `None` only when the input cannot be an agent at all (not an
/// enum, generic); attribute mistakes are reported into `cx` and the model is still built.
pub(crate) fn parse(cx: &Ctxt, input: &DeriveInput) -> Option<Agent> {
    let Data::Enum(data) = &input.data else {
        let what = match &input.data {
            Data::Struct(_) => "a struct",
            _ => "a union",
        };
        cx.error(
            input.ident.span(),
            Message::new(format!(
                "`#[derive(Agent)]` only supports enums, and `{}` is {what}",
                input.ident
            ))
            .help("declare the states of an agent as the variants of an enum"),
        );
        return None;
    };
    if !input.generics.params.is_empty() || input.generics.where_clause.is_some() {
        let span = input
            .generics
            .params
            .first()
            .map_or_else(|| input.generics.span(), Spanned::span);
        cx.error(
            span,
            Message::new("`#[derive(Agent)]` does not support generic enums").help(format!(
                "an agent's states must be concrete types so the graph can be stored and resumed; remove the generics from `{}`",
                input.ident
            )),
        );
        return None;
    }
    let ea = attr::enum_attrs(cx, &input.attrs);
    if let Some(span) = ea.migrate_from.span()
        && !ea.version.is_given()
    {
        cx.error(
            span,
            Message::new(format!(
                "`migrate_from(...)` needs a `version = N` on `{}`, above the version it migrates from",
                input.ident
            ))
            .help("give this enum the next version, like `#[agent(version = 2, migrate_from(...))]`; the enum it migrates from keeps its own (1 when it has none)"),
        );
    }
    let ident = input.ident.clone();
    let name_text = names::unraw(&ident);
    let mut states = Vec::new();
    for v in &data.variants {
        let va = attr::variant_attrs(cx, &v.attrs);
        for f in &v.fields {
            attr::reject(cx, &f.attrs, "fields");
        }
        let to_span = va.to.span();
        let targets = va.to.take().unwrap_or_default();
        let to: Vec<Ident> = targets.iter().map(|t| t.ident.clone()).collect();
        let args: Vec<Argument> = targets
            .into_iter()
            .filter_map(|t| {
                t.args.map(|(key, ty)| Argument {
                    to: t.ident,
                    key,
                    ty,
                })
            })
            .collect();
        states.push(State {
            ident: v.ident.clone(),
            fields: v.fields.clone(),
            initial: va.initial.span(),
            terminal: va.terminal.span(),
            compensate: va.compensate.span(),
            llm: va.route_llm.span(),
            wait: va.wait.span().zip(va.wait.get().cloned()),
            wait_timeout_ms: va
                .wait_timeout_ms
                .span()
                .zip(va.wait_timeout_ms.get().copied()),
            wait_payload: va.wait_payload.span().zip(va.wait_payload.take()),
            timer: va.timer.span().zip(va.timer.take()),
            timer_ms: va.timer_ms.span().zip(va.timer_ms.get().copied()),
            to_span,
            tools_span: va.tools.span(),
            max_tool_calls: va
                .max_tool_calls
                .span()
                .zip(va.max_tool_calls.get().copied()),
            tools_per_answer: va
                .tools_per_answer
                .span()
                .zip(va.tools_per_answer.get().copied()),
            timeout_ms: va.timeout_ms.span().zip(va.timeout_ms.get().copied()),
            decision_timeout_ms: va
                .decision_timeout_ms
                .span()
                .zip(va.decision_timeout_ms.get().copied()),
            children_span: va.children.span(),
            children_outlive: va.children_outlive.span(),
            children: va
                .children
                .take()
                .unwrap_or_default()
                .into_iter()
                .map(|c| self_to_enum(c, &input.ident))
                .collect(),
            on_error: va.on_error.take(),
            on_budget: va.on_budget.take(),
            budget: va.budget.span().zip(va.budget.get().copied()),
            to,
            args,
            tools: va.tools.take().unwrap_or_default(),
        });
    }
    let module = ea.module.get().cloned().unwrap_or_else(|| {
        let module = names::snake_case(&name_text);
        if names::reserved(&module) {
            cx.error(
                ident.span(),
                Message::new(format!(
                    "the states of agent `{name_text}` would be in a module named `{module}`, a keyword that cannot name a module"
                ))
                .help(format!(
                    "name the module: `#[agent(module = {module}_states)]`, or rename the enum"
                )),
            );
        }
        names::ident(&module, Span::call_site())
    });
    let handlers = ea
        .handlers
        .get()
        .cloned()
        .unwrap_or_else(|| Ident::new(&format!("{name_text}Handlers"), Span::call_site()));
    let krate = ea
        .krate
        .get()
        .cloned()
        .unwrap_or_else(crate::krate::default_path);
    let tools: Vec<ToolDecl> = ea.tools.take().unwrap_or_default();
    Some(Agent {
        state_index: index(states.iter().map(|s| &s.ident)),
        tool_index: index(tools.iter().map(|t| &t.ident)),
        vis: input.vis.clone(),
        name: ea.name.get().cloned().unwrap_or(name_text),
        module,
        handlers,
        krate,
        dag: ea.dag.is_set(),
        max_steps: ea.max_steps.get().copied(),
        budget: ea.budget.get().copied(),
        version: ea.version.span().zip(ea.version.get().copied()),
        migrate_from: ea.migrate_from.span().zip(ea.migrate_from.take()),
        tools,
        states,
        ident,
    })
}

/// Each name's first position.
fn index<'a>(idents: impl Iterator<Item = &'a Ident>) -> HashMap<String, usize> {
    let mut index = HashMap::new();
    for (i, ident) in idents.enumerate() {
        index.entry(names::unraw(ident)).or_insert(i);
    }
    index
}

/// `Self` in `children(...)` is the enum: the generated impls that name the child are outside
/// the enum's impls, where `Self` means nothing.
fn self_to_enum(path: Path, enum_ident: &Ident) -> Path {
    if path.is_ident("Self") {
        let mut ident = enum_ident.clone();
        ident.set_span(path.span());
        Path::from(ident)
    } else {
        path
    }
}

/// The tokens with every raw identifier written without `r#`: the exports show the field
/// `r#type` as `type`, the name serde gives it.
fn unraw_tokens(tokens: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
    use proc_macro2::{Group, TokenTree};
    tokens
        .into_iter()
        .map(|t| match t {
            TokenTree::Ident(i) => TokenTree::Ident(Ident::new(&names::unraw(&i), i.span())),
            TokenTree::Group(g) => {
                let mut out = Group::new(g.delimiter(), unraw_tokens(g.stream()));
                out.set_span(g.span());
                TokenTree::Group(out)
            }
            other => other,
        })
        .collect()
}
