//! An agent's graph as SVG, laid out in Rust: no Graphviz, no script, the same picture for
//! the same graph every time.
//!
//! A layered (Sugiyama-style) layout, small enough to read in one sitting: edges that close
//! a cycle (found by a depth-first search from the initial state, in declaration order) are
//! set aside, every state goes on the layer of its longest path from the initial state, the
//! states of a layer are ordered by the mean position of their predecessors (two sweeps),
//! and layers are centred. Agents have tens of states, not thousands, so nothing here needs
//! to be clever; a layout crate (`layout-rs`) would draw its own SVG, in which a run's path,
//! the current state and the roles could not be marked with our classes and text.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use agent_core::graph::{GraphDescription, Routing};

/// What a run did, drawn over the graph.
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    /// Edges taken, with how many times.
    pub(crate) taken: BTreeMap<(String, String), usize>,
    /// States the run has been in.
    pub(crate) visited: BTreeSet<String>,
    /// The state it is in now.
    pub(crate) current: Option<String>,
    /// States where a step failed (left by an error edge).
    pub(crate) failed: BTreeSet<String>,
}

const LAYER_GAP: i64 = 96;
const NODE_GAP: i64 = 36;
const NODE_HEIGHT: i64 = 52;
const MARGIN: i64 = 24;
const CHAR_WIDTH: i64 = 8;

struct Node {
    layer: usize,
    x: i64,
    y: i64,
    width: i64,
}

/// Escape text for an SVG (XML) text node or attribute.
pub(crate) fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Each state's layer: the longest path to it from the initial state over the edges that
/// do not close a cycle. Returns the layers and the edges set aside.
fn layers(graph: &GraphDescription) -> (Vec<usize>, BTreeSet<(usize, usize)>) {
    let n = graph.states.len();
    let index: BTreeMap<&str, usize> = graph
        .states
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
    for e in graph.edges() {
        if let (Some(&a), Some(&b)) = (index.get(e.from), index.get(e.to))
            && !succ[a].contains(&b)
        {
            succ[a].push(b);
        }
    }
    // Depth-first, iteratively, from the initial states first: an edge to a state on the
    // stack closes a cycle.
    let mut back = BTreeSet::new();
    let mut mark = vec![0u8; n]; // 0 new, 1 on the stack, 2 done
    let mut order: Vec<usize> = graph
        .states
        .iter()
        .enumerate()
        .filter(|(_, s)| s.initial)
        .map(|(i, _)| i)
        .collect();
    order.extend(0..n);
    for root in order {
        if mark[root] != 0 {
            continue;
        }
        let mut stack = vec![(root, 0usize)];
        mark[root] = 1;
        while let Some(&mut (v, ref mut next)) = stack.last_mut() {
            if let Some(&w) = succ[v].get(*next) {
                *next += 1;
                match mark[w] {
                    0 => {
                        mark[w] = 1;
                        stack.push((w, 0));
                    }
                    1 => {
                        back.insert((v, w));
                    }
                    _ => {}
                }
            } else {
                mark[v] = 2;
                stack.pop();
            }
        }
    }
    // Longest path over what is left (a DAG): relax n times at most.
    let mut layer = vec![0usize; n];
    for _ in 0..n {
        let mut changed = false;
        for a in 0..n {
            for &b in &succ[a] {
                if a != b && !back.contains(&(a, b)) && layer[b] < layer[a] + 1 {
                    layer[b] = layer[a] + 1;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    (layer, back)
}

fn role_line(graph: &GraphDescription, i: usize) -> String {
    let s = &graph.states[i];
    let mut roles = Vec::new();
    if s.initial {
        roles.push("initial".to_owned());
    }
    if s.terminal {
        roles.push("terminal".to_owned());
    }
    if s.compensate {
        roles.push("compensates".to_owned());
    }
    if s.route == Routing::Llm {
        roles.push("LLM-routed".to_owned());
    }
    if let Some(w) = &s.wait {
        roles.push(format!("waits `{}`", w.signal));
    }
    roles.join(" · ")
}

/// The graph as an `<svg>` element, with the overlay's path, current state and failures
/// marked by class and by text (never by colour alone). Every name is escaped.
#[allow(
    clippy::cast_possible_wrap,
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss,
    reason = "coordinates of a few dozen states, far from any limit"
)]
pub(crate) fn svg(graph: &GraphDescription, overlay: &Overlay) -> String {
    let n = graph.states.len();
    if n == 0 {
        return String::new();
    }
    let (layer, back) = layers(graph);
    let depth = layer.iter().copied().max().unwrap_or(0) + 1;
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for (i, &l) in layer.iter().enumerate() {
        rows[l].push(i);
    }
    let index: BTreeMap<&str, usize> = graph
        .states
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let edges: Vec<(usize, usize, bool)> = graph
        .edges()
        .filter_map(|e| Some((*index.get(e.from)?, *index.get(e.to)?, e.error)))
        .collect();
    // Order each layer by the mean position of its predecessors in the layer above.
    for _ in 0..2 {
        for l in 1..depth {
            let pos: BTreeMap<usize, usize> = rows[l - 1]
                .iter()
                .enumerate()
                .map(|(p, &v)| (v, p))
                .collect();
            let mut keyed: Vec<(f64, usize, usize)> = rows[l]
                .iter()
                .enumerate()
                .map(|(p, &v)| {
                    let preds: Vec<usize> = edges
                        .iter()
                        .filter(|(a, b, _)| *b == v && pos.contains_key(a))
                        .map(|(a, _, _)| pos[a])
                        .collect();
                    let key = if preds.is_empty() {
                        p as f64
                    } else {
                        preds.iter().sum::<usize>() as f64 / preds.len() as f64
                    };
                    (key, p, v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            rows[l] = keyed.into_iter().map(|(_, _, v)| v).collect();
        }
    }
    let width_of = |i: usize| {
        let s = &graph.states[i];
        let mut roles = role_line(graph, i).chars().count();
        if overlay.current.as_deref() == Some(&s.name) {
            roles += "● current · ".chars().count();
        }
        let chars = s.name.chars().count().max(roles * 7 / 8);
        (chars as i64 * CHAR_WIDTH + 28).max(96)
    };
    let row_widths: Vec<i64> = rows
        .iter()
        .map(|r| r.iter().map(|&i| width_of(i)).sum::<i64>() + NODE_GAP * (r.len() as i64 - 1))
        .collect();
    let total_width = row_widths.iter().copied().max().unwrap_or(0) + 2 * MARGIN + 120;
    let mut nodes: Vec<Node> = (0..n)
        .map(|i| Node {
            layer: layer[i],
            x: 0,
            y: 0,
            width: width_of(i),
        })
        .collect();
    for (l, r) in rows.iter().enumerate() {
        let mut x = (total_width - row_widths[l]) / 2;
        for &i in r {
            nodes[i].x = x;
            nodes[i].y = MARGIN + l as i64 * (NODE_HEIGHT + LAYER_GAP);
            x += nodes[i].width + NODE_GAP;
        }
    }
    let height = MARGIN * 2 + depth as i64 * (NODE_HEIGHT + LAYER_GAP) - LAYER_GAP + 8;

    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="graph" viewBox="0 0 {total_width} {height}" width="{total_width}" height="{height}" role="img" aria-labelledby="graph-title graph-desc">"#
    );
    let _ = write!(
        out,
        r#"<title id="graph-title">The graph of agent {}</title><desc id="graph-desc">{}</desc>"#,
        xml_escape(&graph.agent),
        xml_escape(&describe(graph, overlay))
    );
    out.push_str(
        r#"<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="10" markerHeight="10" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker><marker id="arrow-taken" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="12" markerHeight="12" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead taken"/></marker></defs>"#,
    );
    for &(a, b, error) in &edges {
        let from = &graph.states[a].name;
        let to = &graph.states[b].name;
        let times = overlay
            .taken
            .get(&(from.clone(), to.clone()))
            .copied()
            .unwrap_or(0);
        let mut class = String::from("edge");
        if error {
            class.push_str(" error");
        }
        if times > 0 {
            class.push_str(" taken");
        }
        let (na, nb) = (&nodes[a], &nodes[b]);
        let d = if a == b {
            let x = na.x + na.width;
            let y = na.y + NODE_HEIGHT / 2;
            format!(
                "M{x},{} C{},{} {},{} {x},{}",
                y - 10,
                x + 40,
                y - 30,
                x + 40,
                y + 30,
                y + 10
            )
        } else if back.contains(&(a, b)) || na.layer >= nb.layer || nb.layer > na.layer + 1 {
            // Up, sideways, or over more than one layer: around the right of both nodes,
            // not through the states in between.
            let x1 = na.x + na.width;
            let y1 = na.y + NODE_HEIGHT / 2;
            let x2 = nb.x + nb.width;
            let y2 = nb.y + NODE_HEIGHT / 2;
            let bend = x1.max(x2) + 50;
            format!("M{x1},{y1} C{bend},{y1} {bend},{y2} {x2},{y2}")
        } else {
            let x1 = na.x + na.width / 2;
            let y1 = na.y + NODE_HEIGHT;
            let x2 = nb.x + nb.width / 2;
            let y2 = nb.y;
            let mid = i64::midpoint(y1, y2);
            format!("M{x1},{y1} C{x1},{mid} {x2},{mid} {x2},{y2}")
        };
        let marker = if times > 0 { "arrow-taken" } else { "arrow" };
        let title = match (error, times) {
            (false, 0) => format!("{from} → {to}"),
            (true, 0) => format!("{from} → {to} (on error)"),
            (false, t) => format!("{from} → {to}: taken {t}×"),
            (true, t) => format!("{from} → {to} (on error): taken {t}×"),
        };
        let _ = write!(
            out,
            r#"<path class="{class}" d="{d}" marker-end="url(#{marker})" data-from="{}" data-to="{}"><title>{}</title></path>"#,
            xml_escape(from),
            xml_escape(to),
            xml_escape(&title)
        );
        if times > 1 {
            let (lx, ly) = if a == b {
                (na.x + na.width + 42, na.y + NODE_HEIGHT / 2 + 4)
            } else {
                (
                    i64::midpoint(na.x + na.width / 2, nb.x + nb.width / 2) + 6,
                    i64::midpoint(na.y + NODE_HEIGHT, nb.y),
                )
            };
            let _ = write!(
                out,
                r#"<text class="edge-count" x="{lx}" y="{ly}">{times}×</text>"#
            );
        }
    }
    for (i, s) in graph.states.iter().enumerate() {
        let node = &nodes[i];
        let mut class = String::from("node");
        for (on, name) in [
            (s.initial, "initial"),
            (s.terminal, "terminal"),
            (s.compensate, "compensate"),
            (s.route == Routing::Llm, "llm"),
            (s.wait.is_some(), "waits"),
            (overlay.visited.contains(&s.name), "visited"),
            (overlay.current.as_deref() == Some(&s.name), "current"),
            (overlay.failed.contains(&s.name), "failed"),
        ] {
            if on {
                class.push(' ');
                class.push_str(name);
            }
        }
        let current = overlay.current.as_deref() == Some(&s.name);
        let mut roles = role_line(graph, i);
        if current {
            roles = if roles.is_empty() {
                "● current".to_owned()
            } else {
                format!("● current · {roles}")
            };
        }
        let _ = write!(
            out,
            r#"<g class="{class}" data-state="{}"><title>{}</title><rect x="{}" y="{}" width="{}" height="{NODE_HEIGHT}" rx="{}"/><text class="name" x="{}" y="{}">{}</text><text class="roles" x="{}" y="{}">{}</text></g>"#,
            xml_escape(&s.name),
            xml_escape(&format!(
                "{}{}",
                s.name,
                if roles.is_empty() {
                    String::new()
                } else {
                    format!(" ({roles})")
                }
            )),
            node.x,
            node.y,
            node.width,
            if s.terminal { 22 } else { 6 },
            node.x + node.width / 2,
            node.y + 22,
            xml_escape(&s.name),
            node.x + node.width / 2,
            node.y + 40,
            xml_escape(&roles),
        );
    }
    out.push_str("</svg>");
    out
}

/// The picture in words, for screen readers and for the page's text.
fn describe(graph: &GraphDescription, overlay: &Overlay) -> String {
    let mut out = format!("{} states.", graph.states.len());
    if let Some(current) = &overlay.current {
        let _ = write!(out, " The run is in {current}.");
    }
    if !overlay.taken.is_empty() {
        let taken: Vec<String> = overlay
            .taken
            .iter()
            .map(|((a, b), t)| format!("{a} to {b} ({t}×)"))
            .collect();
        let _ = write!(out, " Transitions taken: {}.", taken.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Overlay, layers, svg};
    use agent_core::graph::GraphDescription;

    fn graph() -> GraphDescription {
        serde_json::from_value(serde_json::json!({
            "agent": "A<b>",
            "states": [
                {"name": "Start", "initial": true, "to": ["Work"]},
                {"name": "Work", "to": ["Work", "Review", "Done"]},
                {"name": "Review", "to": ["Work", "Done"]},
                {"name": "Done", "terminal": true}
            ],
            "tools": []
        }))
        .unwrap()
    }

    #[test]
    fn layers_follow_the_longest_path_and_set_cycles_aside() {
        let (layer, back) = layers(&graph());
        assert_eq!(layer, vec![0, 1, 2, 3]);
        // Review → Work closes a cycle; Work → Work is a loop.
        assert!(back.contains(&(2, 1)));
        assert!(back.contains(&(1, 1)));
    }

    #[test]
    fn the_svg_is_deterministic_escaped_and_marks_the_path_in_text() {
        let mut overlay = Overlay::default();
        overlay
            .taken
            .insert(("Start".to_owned(), "Work".to_owned()), 1);
        overlay.current = Some("Work".to_owned());
        overlay.visited.insert("Start".to_owned());
        let a = svg(&graph(), &overlay);
        assert_eq!(a, svg(&graph(), &overlay));
        assert!(a.contains("A&lt;b&gt;") && !a.contains("A<b>"), "{a}");
        assert!(a.contains("● current"), "{a}");
        assert!(a.contains(r#"class="edge taken""#), "{a}");
    }
}
