//! Stage 3: the rules of a well-formed agent graph. Every finding points at the user's
//! token; findings that would only be consequences of an earlier one are not reported.

use std::collections::BTreeSet;

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::{Bfs, Reversed};
use proc_macro2::Span;
use syn::Ident;

use crate::ast::{Agent, FailureEdge, State};
use crate::attr::Kind;
use crate::ctxt::{Ctxt, Message};
use crate::expand;
use crate::names;

/// Check the agent, reporting every finding into `cx`.
pub(crate) fn check(cx: &Ctxt, agent: &Agent) {
    // A malformed or misspelled key (say `inital`) would otherwise also be reported as the
    // graph mistake it causes (no initial state): with attribute errors, only local checks run.
    let attrs_ok = !cx.has_errors();
    check_tools(cx, agent);
    let graph_ok = check_states(cx, agent, attrs_ok);
    if graph_ok && attrs_ok {
        check_graph(cx, agent);
    }
}

fn check_tools(cx: &Ctxt, agent: &Agent) {
    let tool_names: Vec<String> = agent.tools.iter().map(|t| names::unraw(&t.ident)).collect();
    let mut seen: Vec<&Ident> = Vec::new();
    for tool in &agent.tools {
        if seen.iter().any(|x| names::same(x, &tool.ident)) {
            cx.error(
                tool.ident.span(),
                Message::new(format!(
                    "tool `{}` is declared twice on agent `{}`",
                    names::unraw(&tool.ident),
                    agent.name
                ))
                .help("remove this declaration"),
            );
        }
        let field = names::snake_case(&names::unraw(&tool.ident));
        if let Some(first) = seen
            .iter()
            .find(|x| !names::same(x, &tool.ident) && names::snake_case(&names::unraw(x)) == field)
        {
            let tools = crate::toolset::ident(agent);
            cx.error(
                tool.ident.span(),
                Message::new(format!(
                    "tools `{}` and `{}` of agent `{}` would be one field, `{field}`, of `{tools}`",
                    names::unraw(first),
                    names::unraw(&tool.ident),
                    agent.name
                ))
                .note(format!(
                    "`{tools}`, what the runner is built with, has one field per declared tool, named after it in snake case"
                ))
                .help("rename one of the two tools"),
            );
        }
        seen.push(&tool.ident);
        if agent.state(&tool.ident).is_some() {
            cx.error(
                tool.ident.span(),
                Message::new(format!("tool `{0}` has the same name as state `{0}` of agent `{1}`", names::unraw(&tool.ident), agent.name)).help("rename one of them: the router names transitions and tools by name, so one name cannot mean both"),
            );
        }
        if tool.kind != Kind::Hybrid {
            continue;
        }
        let Some(comp) = &tool.compensate else {
            cx.error(
                tool.ident.span(),
                Message::new(format!("hybrid tool `{}` has no compensation", names::unraw(&tool.ident))).help(format!("name the write tool that undoes it: `hybrid({}(compensate = UndoTool))`, or declare `{}` as `write` if it needs no undo", tool.ident, tool.ident)),
            );
            continue;
        };
        match agent.tool_kind(comp) {
            None => cx.error(
                comp.span(),
                Message::new(format!(
                    "unknown tool `{}` in `compensate = ...` of hybrid tool `{}`",
                    names::unraw(comp),
                    names::unraw(&tool.ident)
                ))
                .help(
                    names::did_you_mean(&names::unraw(comp), tool_names.iter().map(String::as_str))
                        .unwrap_or_else(|| {
                            format!(
                                "declare it on the enum as a write tool: `tools(write({comp}))`"
                            )
                        }),
                ),
            ),
            Some(Kind::Write) => {}
            Some(kind) => cx.error(
                comp.span(),
                Message::new(format!(
                    "compensation `{}` of hybrid tool `{}` is a `{}` tool, not a `write` tool",
                    names::unraw(comp),
                    names::unraw(&tool.ident),
                    kind.as_str()
                ))
                .help("a compensation undoes an effect, so it must be declared in `write(...)`"),
            ),
        }
    }
}

/// Per-state rules. Returns whether the graph is sound enough for the global checks
/// (every target resolves, exactly one initial state, no state both initial and terminal).
fn check_states(cx: &Ctxt, agent: &Agent, attrs_ok: bool) -> bool {
    let mut ok = true;
    if agent.states.is_empty() {
        cx.error(
            agent.ident.span(),
            Message::new(format!("agent `{}` has no states", agent.name))
                .help("add variants, one per state, with `#[agent(initial)]` on the first"),
        );
        return false;
    }
    let state_names: Vec<String> = agent.states.iter().map(super::ast::State::name).collect();
    let initials: Vec<_> = agent
        .states
        .iter()
        .filter_map(|s| s.initial.map(|sp| (s, sp)))
        .collect();
    match initials.as_slice() {
        [] if !attrs_ok => ok = false,
        [] => {
            ok = false;
            cx.error(
                agent.ident.span(),
                Message::new(format!("agent `{}` has no initial state", agent.name))
                    .help("mark the state a run starts in with `#[agent(initial)]`"),
            );
        }
        [_] => {}
        [(first, _), rest @ ..] => {
            ok = false;
            for (s, span) in rest {
                cx.error(
                    *span,
                    Message::new(format!(
                        "agent `{}` has more than one initial state: `{}` and `{}`",
                        agent.name,
                        first.name(),
                        s.name()
                    ))
                    .help("keep `initial` on exactly one state"),
                );
            }
        }
    }
    for s in &agent.states {
        let name = s.name();
        if let (Some(_), Some(t)) = (s.initial, s.terminal) {
            ok = false;
            cx.error(
                t,
                Message::new(format!("state `{name}` is both `initial` and `terminal`")).help(format!("a run that starts in `{name}` would end before doing anything; add a separate initial state, or remove `terminal`")),
            );
        }
        if s.terminal.is_some() {
            let extra = [
                (s.to_span, "to(...)"),
                (s.on_error.as_ref().map(Ident::span), "on_error"),
                (s.on_budget.as_ref().map(Ident::span), "on_budget"),
            ];
            for (span, key) in extra {
                if let Some(span) = span {
                    cx.error(
                        span,
                        Message::new(format!("terminal state `{name}` has transitions")).help(format!("a run ends in a terminal state; remove `{key}`, or remove `terminal` if the run continues from `{name}`")),
                    );
                }
            }
            let unused = [
                (s.tools_span, "tools(...)"),
                (s.llm, "route = llm"),
                (s.wait.as_ref().map(|w| w.0), "wait"),
                (s.timer.as_ref().map(|t| t.0), "timer"),
                (s.timer_ms.map(|t| t.0), "timer_ms"),
                (s.max_tool_calls.map(|m| m.0), "max_tool_calls"),
                (s.tools_per_answer.map(|m| m.0), "tools_per_answer"),
                (s.timeout_ms.map(|m| m.0), "timeout_ms"),
                (s.decision_timeout_ms.map(|m| m.0), "decision_timeout_ms"),
                (s.children_span, "children(...)"),
                (s.children_outlive, "children_outlive"),
                (s.budget.map(|b| b.0), "budget(...)"),
            ];
            for (span, key) in unused {
                if let Some(span) = span {
                    cx.error(
                        span,
                        Message::new(format!("`{key}` has no effect on terminal state `{name}`"))
                            .help(format!("terminal states run no handler; remove `{key}`")),
                    );
                }
            }
        }
        if let Some((span, _)) = s.tools_per_answer
            && s.terminal.is_none()
        {
            if s.llm.is_none() {
                cx.error(
                    span,
                    Message::new(format!(
                        "`tools_per_answer` without `route = llm` on state `{name}`"
                    ))
                    .help("it says how many tools the model may call in one answer; add `route = llm`, or remove `tools_per_answer`"),
                );
            } else if s.tools.is_empty() {
                cx.error(
                    span,
                    Message::new(format!(
                        "`tools_per_answer` on state `{name}`, which lists no tools"
                    ))
                    .help("list the tools the model may call in `tools(...)`, or remove `tools_per_answer`"),
                );
            }
        }
        if let (Some((span, _)), None, None) = (s.decision_timeout_ms, s.llm, s.terminal) {
            cx.error(
                span,
                Message::new(format!(
                    "`decision_timeout_ms` without `route = llm` on state `{name}`"
                ))
                .help("it bounds one ask of the model in this state; add `route = llm`, or remove `decision_timeout_ms`"),
            );
        }
        if let (Some(span), None, None) = (s.children_outlive, s.children_span, s.terminal) {
            cx.error(
                span,
                Message::new(format!(
                    "`children_outlive` without `children(...)` on state `{name}`"
                ))
                .help("it keeps the children this state starts running when the run fails or is cancelled; list them in `children(...)`, or remove `children_outlive`"),
            );
        }
        if agent.dag
            && let Some(c) = s
                .children
                .iter()
                .find(|c| c.get_ident().is_some_and(|i| names::same(i, &agent.ident)))
        {
            cx.error(
                syn::spanned::Spanned::span(c),
                Message::new(format!(
                    "agent `{}` is declared `dag` but state `{name}` starts runs of itself",
                    agent.name
                ))
                .note("a run that starts a run of its own agent can go round again, a cycle through `children(...)`")
                .help(format!("remove `dag` from the enum (the depth of the runs is then bounded by `RunnerConfig::max_child_depth`), or remove `{}` from `children(...)`", crate::attr::path_text(c))),
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in &s.children {
            let text = crate::attr::path_text(c);
            if !seen.insert(text.clone()) {
                ok = false;
                cx.error(
                    syn::spanned::Spanned::span(c),
                    Message::new(format!(
                        "agent `{text}` is listed twice in the `children(...)` of `{name}`"
                    ))
                    .help("list each child agent once"),
                );
            }
        }
        if let (Some(span), Some(_), None) = (s.children_span, &s.wait, s.terminal) {
            cx.error(
                span,
                Message::new(format!(
                    "state `{name}` both waits for a signal and starts children"
                ))
                .help("a state waits for one thing; start the children in a state of their own, before or after the one that waits"),
            );
        }
        if let (Some(span), true, None) = (s.children_span, s.children.is_empty(), s.terminal) {
            cx.error(
                span,
                Message::new(format!("`children()` on state `{name}` lists no agents")).help(
                    "list the child agents' types, `children(Research)`, or remove `children()`",
                ),
            );
        }
        // `to()` and `tools()` with nothing inside. On a terminal state they are reported
        // as keys that do not belong there, once.
        let empty_to = s.to_span.is_some() && s.to.is_empty();
        if let (Some(span), true, None) = (s.to_span, s.to.is_empty(), s.terminal) {
            ok = false;
            cx.error(
                span,
                Message::new(format!("`to()` on state `{name}` lists no states")).help(format!(
                    "list the states `{name}` moves to, `to(A, B)`, or mark it `terminal` if runs end there"
                )),
            );
        }
        if let (Some(span), true, None) = (s.tools_span, s.tools.is_empty(), s.terminal) {
            cx.error(
                span,
                Message::new(format!("`tools()` on state `{name}` lists no tools")).help(
                    "list the tools its handler or the model may call, `tools(SearchProducts)`, or remove `tools()`",
                ),
            );
        }
        if let (Some((span, _)), None) = (s.wait_timeout_ms, &s.wait) {
            cx.error(
                span,
                Message::new(format!(
                    "`wait_timeout_ms` without `wait` on state `{name}`"
                ))
                .help("add `wait = \"signal_name\"`, or remove `wait_timeout_ms`"),
            );
        }
        check_timer(cx, s, &name);
        if let (Some((span, _)), None) = (&s.wait_payload, &s.wait) {
            cx.error(
                *span,
                Message::new(format!("`wait_payload` without `wait` on state `{name}`"))
                    .help("add `wait = \"signal_name\"`, or remove `wait_payload`"),
            );
        }
        let mut seen: Vec<&Ident> = Vec::new();
        for target in &s.to {
            if agent.state(target).is_none() {
                ok = false;
                unknown_state(cx, target, "to(...)", &state_names);
            } else if seen.iter().any(|x| names::same(x, target)) {
                cx.error(
                    target.span(),
                    Message::new(format!(
                        "`{}` is listed twice in `to(...)` of state `{name}`",
                        names::unraw(target)
                    ))
                    .help("remove one"),
                );
            }
            seen.push(target);
        }
        if s.llm.is_none() && s.terminal.is_none() {
            for a in &s.args {
                cx.error(
                    a.key,
                    Message::new(format!(
                        "transition `{name}` -> `{}` takes an argument, but `{name}` is not LLM-routed",
                        names::unraw(&a.to)
                    ))
                    .note("a transition's argument is what the model gives when it chooses the transition")
                    .help(format!("add `route = llm` to `{name}`, or remove `args = ...` and pass the data in the target's fields: `ctx.to({}::{} {{ .. }})` in the handler", agent.module, names::unraw(&a.to))),
                );
            }
        }
        for edge in FailureEdge::ALL {
            let Some(target) = s.failure_target(edge) else {
                continue;
            };
            match agent.state(target) {
                None => {
                    ok = false;
                    let place = format!("{} = ...", edge.key());
                    unknown_state(cx, target, &place, &state_names);
                }
                Some(t) if t.fields.len() > 1 => failure_target_shape(cx, edge, &name, target, t),
                Some(_) => {}
            }
        }
        let declared: Vec<String> = agent.tools.iter().map(|t| names::unraw(&t.ident)).collect();
        let mut seen: Vec<&Ident> = Vec::new();
        for tool in &s.tools {
            if agent.tool(tool).is_none() {
                let hint =
                    names::did_you_mean(&names::unraw(tool), declared.iter().map(String::as_str));
                cx.error(
                    tool.span(),
                    Message::new(format!(
                        "tool `{}` is not declared on agent `{}`",
                        names::unraw(tool),
                        agent.name
                    ))
                    .help(hint.unwrap_or_else(|| format!("declare it with its kind on the enum: `#[agent(tools(read({tool})))]` (or `write`, `hybrid`)"))),
                );
            } else if seen.iter().any(|x| names::same(x, tool)) {
                cx.error(
                    tool.span(),
                    Message::new(format!(
                        "tool `{}` is listed twice in `tools(...)` of state `{name}`",
                        names::unraw(tool)
                    ))
                    .help("remove one"),
                );
            }
            seen.push(tool);
        }
        if s.llm.is_some() {
            let route = format!("{name}Route");
            if let Some(clash) = agent.states.iter().find(|x| x.name() == route) {
                cx.error(
                    clash.ident.span(),
                    Message::new(format!("state `{route}` has the name of the generated route enum of LLM-routed state `{name}`")).help("rename one of the two states"),
                );
            }
        }
        // The router chooses among `to(...)` only; `on_error` and `on_budget` are the runner's.
        if empty_to && s.terminal.is_none() {
            // Reported above as an empty list.
        } else if let (Some(llm), true, None) = (s.llm, s.to.is_empty(), s.terminal) {
            if attrs_ok {
                cx.error(
                    llm,
                    Message::new(format!("LLM-routed state `{name}` has no legal option")).help(
                        "the model chooses among the state's successors; list them with `to(...)`",
                    ),
                );
            }
        } else if let (Some(llm), [only], true, None, true) = (
            s.llm,
            s.to.as_slice(),
            s.tools.is_empty(),
            s.terminal,
            attrs_ok,
        ) {
            let only = names::unraw(only);
            cx.error(
                llm,
                Message::new(format!("LLM-routed state `{name}` has only one option, `{only}`"))
                    .note("the model would be asked a question with one answer")
                    .help(format!("remove `route = llm` and move to `{only}` in the handler, or give the model a choice: more states in `to(...)`, or tools in `tools(...)`")),
            );
        } else if attrs_ok && s.terminal.is_none() && s.successors().is_empty() {
            cx.error(
                s.ident.span(),
                Message::new(format!("state `{name}` has no way out")).help("add `#[agent(to(...))]` with its successors, or mark it `#[agent(terminal)]` if runs end here"),
            );
        }
    }
    check_handler_names(cx, agent);
    ok
}

/// The handler trait has one method per state that is not terminal, named in snake case:
/// two states must not share one (`HTTPCall` and `HttpCall` are both `http_call`).
/// A state's timer: one of `timer_ms` and `timer = field`, not beside `wait_timeout_ms`
/// (the timer is the wait's deadline), not on a compensating state (it runs the saga at
/// once), and `timer = field` names a field the state has. (On a terminal state it is
/// reported with the other keys that have no effect there.) The field's type is checked by
/// the compiler, at the generated `TimerField` call spanned at the field's name.
fn check_timer(cx: &Ctxt, s: &State, name: &str) {
    if let (Some((span, _)), Some(_)) = (s.timer_ms, &s.timer) {
        cx.error(
            span,
            Message::new(format!("state `{name}` has two timers, `timer` and `timer_ms`"))
                .help("keep `timer_ms = N` for a fixed delay, or `timer = field` for a time the handler computes"),
        );
    }
    let timer = s.timer.as_ref().map(|t| t.0).or(s.timer_ms.map(|t| t.0));
    if let (Some(_), Some((span, _))) = (timer, s.wait_timeout_ms) {
        cx.error(
            span,
            Message::new(format!(
                "state `{name}` has a timer and a `wait_timeout_ms`"
            ))
            .note("with `wait`, the state's timer is the wait's deadline: whichever comes first, the signal or the timer, wakes the handler")
            .help("remove `wait_timeout_ms`, or remove the timer"),
        );
    }
    if let (Some(span), Some(_), None) = (timer, s.compensate, s.terminal) {
        cx.error(
            span,
            Message::new(format!(
                "compensating state `{name}` has a timer"
            ))
            .help("entering a compensating state runs the saga at once; put the timer on a state before it, or remove it"),
        );
    }
    let Some((_, field)) = &s.timer else {
        return;
    };
    let syn::Fields::Named(fields) = &s.fields else {
        cx.error(
            field.span(),
            Message::new(format!(
                "`timer = {}` names a field, and state `{name}` has no named fields",
                names::unraw(field)
            ))
            .help(format!("give `{name}` a named field for the time, `{name} {{ due: Deadline }}`, and write `timer = due`; for a fixed delay write `timer_ms = N`")),
        );
        return;
    };
    let named: Vec<String> = fields
        .named
        .iter()
        .filter_map(|f| f.ident.as_ref().map(names::unraw))
        .collect();
    if !named.iter().any(|n| *n == names::unraw(field)) {
        cx.error(
            field.span(),
            Message::new(format!(
                "state `{name}` has no field `{}`",
                names::unraw(field)
            ))
            .help(format!(
                "`timer = field` names the field that holds when the timer is due; `{name}` has `{}`",
                named.join("`, `")
            )),
        );
    }
}

fn check_handler_names(cx: &Ctxt, agent: &Agent) {
    let mut seen: Vec<(String, &State)> = Vec::new();
    for s in agent.states.iter().filter(|s| s.terminal.is_none()) {
        let method = expand::method_name(s);
        if names::reserved(&method) {
            cx.error(
                s.ident.span(),
                Message::new(format!(
                    "state `{}` would have the handler method `{method}`, a keyword that cannot name a method",
                    s.name()
                ))
                .note(format!(
                    "`{}` has one method per state that is not terminal, named after the state in snake case",
                    agent.handlers
                ))
                .help("rename the state"),
            );
            continue;
        }
        if let Some((_, first)) = seen.iter().find(|(m, _)| *m == method) {
            cx.error(
                s.ident.span(),
                Message::new(format!(
                    "states `{}` and `{}` have the same handler method `{method}`",
                    first.name(),
                    s.name()
                ))
                .note(format!(
                    "`{}` has one method per state that is not terminal, named after the state in snake case",
                    agent.handlers
                ))
                .help("rename one of the two states"),
            );
        } else {
            seen.push((method, s));
        }
    }
}

/// A state entered on error (or when a budget is exceeded) is built from the failure alone:
/// it can hold one field.
fn failure_target_shape(cx: &Ctxt, edge: FailureEdge, name: &str, target: &Ident, t: &State) {
    let t_name = t.name();
    cx.error(
        target.span(),
        Message::new(format!(
            "state `{t_name}` cannot be entered {}: it has {} fields, and a failure fills one",
            edge.when(),
            t.fields.len()
        ))
        .note(format!(
            "when a step of `{name}` {}, the runner builds `{t_name}` from the step's `Failure`",
            edge.step()
        ))
        .help(format!(
            "give `{t_name}` no field, or one: `reason: Failure` (the failed state, the error's code and message), `reason: String` (the message), or a type with `From<Failure>`"
        )),
    );
}

fn unknown_state(cx: &Ctxt, target: &Ident, place: &str, states: &[String]) {
    let hint = names::did_you_mean(&names::unraw(target), states.iter().map(String::as_str));
    let msg = Message::new(format!(
        "unknown state `{}` in `{place}`",
        names::unraw(target)
    ));
    let msg = match hint {
        Some(hint) => msg.help(hint),
        None => msg.note(format!(
            "the states are {}",
            names::list(states.iter().map(String::as_str))
        )),
    };
    cx.error(target.span(), msg);
}

/// Nodes are state indices; edge weights are the span of the target name in `to(...)`.
fn build(agent: &Agent) -> DiGraph<usize, Span> {
    let mut g = DiGraph::new();
    for i in 0..agent.states.len() {
        g.add_node(i);
    }
    for (i, s) in agent.states.iter().enumerate() {
        for t in s.successors() {
            if let Some(j) = agent.state_position(t) {
                g.add_edge(NodeIndex::new(i), NodeIndex::new(j), t.span());
            }
        }
    }
    g
}

fn check_graph(cx: &Ctxt, agent: &Agent) {
    let g = build(agent);
    let n = agent.states.len();
    let Some(initial) = agent.states.iter().position(|s| s.initial.is_some()) else {
        return;
    };
    let initial_name = agent.states[initial].name();

    let mut reachable = vec![false; n];
    let mut bfs = Bfs::new(&g, NodeIndex::new(initial));
    while let Some(x) = bfs.next(&g) {
        reachable[x.index()] = true;
    }
    for (i, s) in agent.states.iter().enumerate() {
        if !reachable[i] {
            cx.error(
                s.ident.span(),
                Message::new(format!(
                    "state `{}` is unreachable from the initial state `{initial_name}`",
                    s.name()
                ))
                .help(format!(
                    "add `{}` to the `to(...)` of a state that is reached, or remove it",
                    s.name()
                )),
            );
        }
    }

    let dead_end = |i: usize| {
        let s = &agent.states[i];
        s.terminal.is_none() && s.successors().is_empty()
    };
    if agent.states.iter().any(|s| s.terminal.is_some()) {
        // Dead ends were reported already; count them as exits so their predecessors are
        // not reported again as traps.
        let mut coreach = vec![false; n];
        let rev = Reversed(&g);
        for i in (0..n).filter(|&i| agent.states[i].terminal.is_some() || dead_end(i)) {
            let mut bfs = Bfs::new(rev, NodeIndex::new(i));
            while let Some(x) = bfs.next(rev) {
                coreach[x.index()] = true;
            }
        }
        let trap: BTreeSet<usize> = (0..n).filter(|&i| reachable[i] && !coreach[i]).collect();
        let sccs = petgraph::algo::tarjan_scc(&g);
        let mut reports: Vec<Vec<usize>> = Vec::new();
        for scc in sccs {
            let members: BTreeSet<usize> = scc.iter().map(|x| x.index()).collect();
            if !members.iter().all(|m| trap.contains(m)) {
                continue;
            }
            // Only the SCCs the run cannot leave: the others lead into one of them.
            let sink = members.iter().all(|&m| {
                g.neighbors(NodeIndex::new(m))
                    .all(|x| members.contains(&x.index()))
            });
            if sink {
                reports.push(members.into_iter().collect());
            }
        }
        reports.sort();
        for members in reports {
            let first = members[0];
            let cycle = cycle_through(&g, first, &members);
            let names_in: Vec<String> = members.iter().map(|&m| agent.states[m].name()).collect();
            let path = cycle
                .iter()
                .map(|&m| format!("`{}`", agent.states[m].name()))
                .collect::<Vec<_>>()
                .join(" -> ");
            cx.error(
                agent.states[first].ident.span(),
                Message::new(format!(
                    "no terminal state can be reached from {}",
                    names::list(names_in.iter().map(String::as_str))
                ))
                .note(format!("{path} loops forever"))
                .help("add a transition out of the loop, towards a terminal state"),
            );
        }
    } else {
        cx.error(
            agent.ident.span(),
            Message::new(format!("agent `{}` has no terminal state", agent.name))
                .help("mark the states where a run ends with `#[agent(terminal)]`"),
        );
    }

    if agent.dag {
        let mut cycles: Vec<Vec<usize>> = petgraph::algo::tarjan_scc(&g)
            .into_iter()
            .map(|scc| {
                let mut m: Vec<usize> = scc.iter().map(|x| x.index()).collect();
                m.sort_unstable();
                m
            })
            .filter(|m| m.len() > 1 || g.contains_edge(NodeIndex::new(m[0]), NodeIndex::new(m[0])))
            .collect();
        cycles.sort();
        for members in cycles {
            let cycle = cycle_through(&g, members[0], &members);
            let path = cycle
                .iter()
                .map(|&m| format!("`{}`", agent.states[m].name()))
                .collect::<Vec<_>>()
                .join(" -> ");
            // Point at the edge that closes the cycle.
            let last = cycle[cycle.len() - 2];
            let span = g
                .find_edge(NodeIndex::new(last), NodeIndex::new(members[0]))
                .map_or_else(|| agent.states[members[0]].ident.span(), |e| g[e]);
            cx.error(
                span,
                Message::new(format!("agent `{}` is declared `dag` but has a cycle: {path}", agent.name)).help("remove a transition of the cycle, or remove `dag` from the enum's `#[agent(...)]`"),
            );
        }
    }
}

/// The shortest cycle from `start` back to `start` inside `members`, as a path that
/// begins and ends with `start`. Successors are explored in declaration order.
fn cycle_through(g: &DiGraph<usize, Span>, start: usize, members: &[usize]) -> Vec<usize> {
    let mut parent: Vec<Option<usize>> = vec![None; g.node_count()];
    let mut queue = std::collections::VecDeque::from([start]);
    let mut visited = vec![false; g.node_count()];
    visited[start] = true;
    while let Some(x) = queue.pop_front() {
        let mut succ: Vec<usize> = g
            .neighbors(NodeIndex::new(x))
            .map(NodeIndex::index)
            .collect();
        // `neighbors` yields the most recently added edge first; restore declaration order.
        succ.reverse();
        for y in succ {
            if !members.contains(&y) {
                continue;
            }
            if y == start {
                let mut forward = vec![start];
                let mut chain = Vec::new();
                let mut cur = x;
                while cur != start {
                    chain.push(cur);
                    cur = parent[cur].unwrap_or(start);
                }
                chain.reverse();
                forward.extend(chain);
                forward.push(start);
                return forward;
            }
            if !visited[y] {
                visited[y] = true;
                parent[y] = Some(x);
                queue.push_back(y);
            }
        }
    }
    vec![start, start]
}
