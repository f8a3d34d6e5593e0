//! The exports people read: Graphviz DOT and Mermaid, each with a run's path drawn over it.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::{GraphDescription, PathOverlay, Routing, StateDescription};

impl GraphDescription {
    /// Graphviz DOT. Initial, terminal, LLM-routed, waiting (for a signal or a timer) and
    /// compensating states are drawn differently; each state lists its tools with their kind.
    #[must_use]
    pub fn to_dot(&self) -> String {
        self.to_dot_with(&PathOverlay::default())
    }

    /// Graphviz DOT with a run's path drawn over it.
    #[must_use]
    pub fn to_dot_with(&self, overlay: &PathOverlay) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "digraph {} {{", dot_id(&self.agent));
        let _ = writeln!(out, "  rankdir=LR;");
        let _ = writeln!(
            out,
            "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\"];"
        );
        let _ = writeln!(out, "  edge [fontname=\"Helvetica\"];");
        let _ = writeln!(out, "  __start [shape=point, width=0.2, label=\"\"];");
        for s in &self.states {
            let mut label = dot_escape(&s.name);
            let tags = role_tags(s, |signal| format!("'{signal}'"));
            if !tags.is_empty() {
                let _ = write!(label, "\\n[{}]", dot_escape(&tags.join(", ")));
            }
            for t in &s.tools {
                let kind = self.tool(t).map_or("?", |d| d.kind.as_str());
                let _ = write!(label, "\\l  {} ({kind})", dot_escape(t));
            }
            if !s.tools.is_empty() {
                label.push_str("\\l");
            }
            let (shape, fill, extra) = if s.terminal && s.compensate {
                ("box", "mistyrose", ", peripheries=2")
            } else if s.terminal {
                ("box", "honeydew", ", peripheries=2")
            } else if s.route == Routing::Llm {
                ("hexagon", "lightyellow", "")
            } else if !s.children.is_empty() {
                ("box3d", "white", "")
            } else if s.wait.is_some() || s.timer.is_some() {
                ("box", "lightblue", ", style=\"rounded,filled,dashed\"")
            } else {
                ("box", "white", "")
            };
            let mut attrs = format!("shape={shape}, fillcolor={fill}{extra}");
            if overlay.current.as_deref() == Some(&s.name) {
                attrs.push_str(", penwidth=3, color=blue");
            } else if overlay.failed.contains(&s.name) {
                attrs.push_str(", penwidth=3, color=red");
            } else if overlay
                .transitions
                .iter()
                .any(|(a, b)| a == &s.name || b == &s.name)
            {
                attrs.push_str(", penwidth=2, color=blue");
            }
            let _ = writeln!(out, "  {} [label=\"{label}\", {attrs}];", dot_id(&s.name));
        }
        if let Some(init) = self.initial() {
            let _ = writeln!(out, "  __start -> {};", dot_id(&init.name));
        }
        for e in self.edges() {
            let taken = overlay
                .transitions
                .iter()
                .filter(|(a, b)| a == e.from && b == e.to)
                .count();
            let mut attrs = Vec::new();
            if e.error {
                attrs.push("style=dashed".to_owned());
                attrs.push("color=red".to_owned());
                attrs.push("label=\"on error\"".to_owned());
            }
            if taken > 0 {
                attrs.push("penwidth=2.5".to_owned());
                if !e.error {
                    attrs.push("color=blue".to_owned());
                }
                attrs.push(format!("xlabel=\"x{taken}\""));
            }
            let attrs = if attrs.is_empty() {
                String::new()
            } else {
                format!(" [{}]", attrs.join(", "))
            };
            let _ = writeln!(out, "  {} -> {}{attrs};", dot_id(e.from), dot_id(e.to));
        }
        out.push_str("}\n");
        out
    }

    /// Mermaid `stateDiagram-v2`.
    #[must_use]
    pub fn to_mermaid(&self) -> String {
        self.to_mermaid_with(&PathOverlay::default())
    }

    /// Mermaid `stateDiagram-v2` with a run's path drawn over it (as classes).
    #[must_use]
    pub fn to_mermaid_with(&self, overlay: &PathOverlay) -> String {
        let mut out = String::from("stateDiagram-v2\n");
        for s in &self.states {
            let tags = role_tags(s, str::to_owned);
            let _ = writeln!(out, "    state \"{}\" as {}", s.name, mermaid_id(&s.name));
            if !tags.is_empty() {
                let _ = writeln!(out, "    {} : {}", mermaid_id(&s.name), tags.join(", "));
            }
            for t in &s.tools {
                let kind = self.tool(t).map_or("?", |d| d.kind.as_str());
                let _ = writeln!(out, "    {} : {t} ({kind})", mermaid_id(&s.name));
            }
        }
        if let Some(init) = self.initial() {
            let _ = writeln!(out, "    [*] --> {}", mermaid_id(&init.name));
        }
        for e in self.edges() {
            let label = if e.error { " : on error" } else { "" };
            let _ = writeln!(
                out,
                "    {} --> {}{label}",
                mermaid_id(e.from),
                mermaid_id(e.to)
            );
        }
        for s in self.states.iter().filter(|s| s.terminal) {
            let _ = writeln!(out, "    {} --> [*]", mermaid_id(&s.name));
        }
        let llm: Vec<_> = self
            .states
            .iter()
            .filter(|s| s.route == Routing::Llm)
            .map(|s| mermaid_id(&s.name))
            .collect();
        let waiting: Vec<_> = self
            .states
            .iter()
            .filter(|s| s.wait.is_some() || s.timer.is_some())
            .map(|s| mermaid_id(&s.name))
            .collect();
        let comp: Vec<_> = self
            .states
            .iter()
            .filter(|s| s.compensate)
            .map(|s| mermaid_id(&s.name))
            .collect();
        let parents: Vec<_> = self
            .states
            .iter()
            .filter(|s| !s.children.is_empty())
            .map(|s| mermaid_id(&s.name))
            .collect();
        let visited: BTreeSet<String> = overlay
            .transitions
            .iter()
            .flat_map(|(a, b)| [mermaid_id(a), mermaid_id(b)])
            .collect();
        let failed: Vec<_> = overlay.failed.iter().map(|s| mermaid_id(s)).collect();
        for (class, style, members) in [
            ("llm", "fill:#ffffe0", llm),
            ("waiting", "fill:#add8e6,stroke-dasharray: 5 5", waiting),
            ("compensating", "fill:#ffe4e1", comp),
            (
                "children",
                "stroke-width:3px,stroke-dasharray: 2 2",
                parents,
            ),
            (
                "visited",
                "stroke:#0000ff,stroke-width:3px",
                visited.into_iter().collect(),
            ),
            ("failed", "stroke:#ff0000,stroke-width:3px", failed),
        ] {
            if !members.is_empty() {
                let _ = writeln!(out, "    classDef {class} {style}");
                let _ = writeln!(out, "    class {} {class}", members.join(","));
            }
        }
        out
    }
}

/// What a state does besides its edges and tools, as the exports label it: LLM-routed, the
/// signal it waits for (written by `signal`, as each format quotes), its timer, the
/// children it starts, compensates.
fn role_tags(s: &StateDescription, signal: impl Fn(&str) -> String) -> Vec<String> {
    let mut tags = Vec::new();
    if s.route == Routing::Llm {
        tags.push("LLM-routed".to_owned());
    }
    if let Some(w) = &s.wait {
        tags.push(format!("waits for {}", signal(&w.signal)));
    }
    if let Some(t) = &s.timer {
        tags.push(t.label());
    }
    if !s.children.is_empty() {
        tags.push(children_tag(s));
    }
    if s.compensate {
        tags.push("compensates".to_owned());
    }
    tags
}

/// "starts Research, Fact" (and "outlived" when the children outlive the run).
fn children_tag(s: &StateDescription) -> String {
    let outlive = if s.children_outlive {
        " (outlive it)"
    } else {
        ""
    };
    format!("starts {}{outlive}", s.children.join(", "))
}

fn dot_id(name: &str) -> String {
    format!("\"{}\"", dot_escape(name))
}

fn dot_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// A Mermaid node id for a state: ASCII letters and digits as they are, `_` doubled, any
/// other character as `_u{hex}_`. Two names never share an id (`Étape` and `Ètape` are two
/// nodes), and a plain name (`Review`) is its own id.
fn mermaid_id(name: &str) -> String {
    let mut id = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            c if c.is_ascii_alphanumeric() => id.push(c),
            '_' => id.push_str("__"),
            c => {
                let _ = write!(id, "_u{:x}_", u32::from(c));
            }
        }
    }
    id
}

#[cfg(test)]
mod tests {
    use super::mermaid_id;
    use crate::graph::tests::sample;

    #[test]
    fn mermaid_ids_are_one_per_name() {
        assert_eq!(mermaid_id("Review"), "Review");
        let names = ["Étape", "Ètape", "_tape", "a_b", "a b", "a__b", "a_u20_b"];
        let ids: std::collections::BTreeSet<String> = names.iter().map(|n| mermaid_id(n)).collect();
        assert_eq!(ids.len(), names.len(), "{ids:?}");
        assert!(
            ids.iter()
                .all(|id| id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        );
    }

    #[test]
    fn states_outside_ascii_are_two_nodes() {
        let mut g = sample();
        g.states[2].name = "Étape".into();
        g.states[3].name = "Ètape".into();
        let mermaid = g.to_mermaid();
        assert!(
            mermaid.contains("state \"Étape\" as _uc9_tape"),
            "{mermaid}"
        );
        assert!(
            mermaid.contains("state \"Ètape\" as _uc8_tape"),
            "{mermaid}"
        );
    }
}
