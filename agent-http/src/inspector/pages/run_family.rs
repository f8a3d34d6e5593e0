//! A run's family on its page: the runs above it (breadcrumbs from the root run), the runs
//! below it (a tree of children, bounded), and the count of its children per status.
//!
//! Everything is read with the store's run listing and counting by parent
//! ([`RunFilter::spawned_by`]): no read of its own, so every store answers it.

use std::collections::VecDeque;

use agent_core::store::{HistoryStore, RunFilter, RunRecord, StoreError};

use super::RunRow;

/// Levels of the tree below the run: its children, grandchildren and their children.
const TREE_DEPTH: usize = 3;
/// Children listed under one run, newest first; the rest behind an "N more" link.
const TREE_WIDTH: usize = 20;
/// Runs of the tree whose own children are listed: a wide tree is cut there, each run
/// left out linking to its own page.
const TREE_READS: usize = 60;
/// Runs the tree shows in all (each counted for its own children): a page's reads stay a
/// few hundred however wide the family.
const TREE_NODES: usize = 200;
/// Ancestors read for the breadcrumbs; a deeper run shows `…` before the oldest read.
const ANCESTORS: usize = 20;

/// One line of the tree as the template writes it: nested lists opened and closed in order.
pub(super) enum TreeLine {
    /// A run's item opens (`<li>` and the run).
    Run {
        /// Boxed: a run's row is most of a line, the other lines are markers.
        row: Box<RunRow>,
        /// How many children it has, when it has some (`None`: none).
        children: Option<u64>,
        /// Its children are not listed here (the depth or the reads ran out): the count
        /// links to its page.
        cut: bool,
    },
    /// A nested list opens under the run before it.
    Nest,
    /// The nested list closes.
    Unnest,
    /// The run's item closes.
    End,
    /// Children of `parent` not listed: `n` more, on the runs page filtered by parent.
    More { parent: String, n: u64 },
}

/// A run's family.
pub(super) struct Family {
    /// From the root run down to the run's parent; `true` first when older ancestors were
    /// not read.
    pub(super) ancestors: Vec<(String, String)>,
    pub(super) ancestors_cut: bool,
    /// The run's children per status (every child, not only those listed).
    pub(super) rollup: Vec<(&'static str, u64)>,
    pub(super) children_total: u64,
    /// The tree below the run, as lines.
    pub(super) tree: Vec<TreeLine>,
    /// The tree's bounds, for the page to say.
    pub(super) width: usize,
    pub(super) depth: usize,
}

fn children_of(parent: &str, limit: Option<usize>) -> RunFilter {
    RunFilter {
        spawned_by: Some(parent.to_owned()),
        limit,
        ..RunFilter::default()
    }
}

/// The runs above `run`, root first, as `(id, agent)`; and whether older ones were left.
async fn ancestors(
    store: &dyn HistoryStore,
    run: &RunRecord,
) -> Result<(Vec<(String, String)>, bool), StoreError> {
    let mut chain = Vec::new();
    let mut next = run.spawned_by.as_ref().map(|s| s.run_id.clone());
    while let Some(id) = next {
        if chain.len() == ANCESTORS {
            chain.reverse();
            return Ok((chain, true));
        }
        // A parent pruned away ends the chain where it is.
        let Some(parent) = store.load_run(&id).await? else {
            break;
        };
        next = parent.spawned_by.as_ref().map(|s| s.run_id.clone());
        chain.push((parent.id, parent.agent));
    }
    chain.reverse();
    Ok((chain, false))
}

/// A run of the tree and what was read of its children.
struct Node {
    run: RunRecord,
    total: u64,
    /// Indexes of its listed children in the arena; `None` when they were not read.
    listed: Option<Vec<usize>>,
}

/// The family of `run`: every read bounded (ancestors, levels, children per run, runs whose
/// children are listed, runs shown), the tree read breadth first so that a cut leaves the
/// deep runs out.
pub(super) async fn family(
    store: &dyn HistoryStore,
    run: &RunRecord,
) -> Result<Family, StoreError> {
    let (ancestors, ancestors_cut) = ancestors(store, run).await?;
    let counts = store.count_runs(&children_of(&run.id, None)).await?;
    let children_total = counts.iter().map(|(_, n)| n).sum();
    let rollup = counts.iter().map(|(s, n)| (s.as_str(), *n)).collect();

    let mut arena: Vec<Node> = Vec::new();
    let mut top = Vec::new();
    // (parent's index, or None for the page's run; its depth below the page's run)
    let mut queue: VecDeque<(Option<usize>, usize)> = VecDeque::from([(None, 0)]);
    let mut reads = 0;
    while let Some((parent, depth)) = queue.pop_front() {
        let parent_id = parent.map_or_else(|| run.id.clone(), |i| arena[i].run.id.clone());
        let total = match parent {
            None => children_total,
            Some(i) => arena[i].total,
        };
        let room = TREE_NODES - arena.len();
        if total == 0 || depth == TREE_DEPTH || reads == TREE_READS || room == 0 {
            continue;
        }
        reads += 1;
        let listed = store
            .list_runs(&children_of(&parent_id, Some(TREE_WIDTH.min(room))))
            .await?;
        let mut indexes = Vec::new();
        for child in listed {
            let total = store
                .count_runs(&children_of(&child.id, None))
                .await?
                .iter()
                .map(|(_, n)| n)
                .sum();
            indexes.push(arena.len());
            queue.push_back((Some(arena.len()), depth + 1));
            arena.push(Node {
                run: child,
                total,
                listed: None,
            });
        }
        match parent {
            None => top = indexes,
            Some(i) => arena[i].listed = Some(indexes),
        }
    }
    let mut tree = Vec::new();
    lines(&arena, &top, &run.id, children_total, &mut tree);
    Ok(Family {
        ancestors,
        ancestors_cut,
        rollup,
        children_total,
        tree,
        width: TREE_WIDTH,
        depth: TREE_DEPTH,
    })
}

/// The lines of the children `listed` of `parent` (which has `total`), depth first.
fn lines(arena: &[Node], listed: &[usize], parent: &str, total: u64, out: &mut Vec<TreeLine>) {
    for &i in listed {
        let node = &arena[i];
        out.push(TreeLine::Run {
            row: Box::new(RunRow::from(&node.run)),
            children: (node.total > 0).then_some(node.total),
            cut: node.total > 0 && node.listed.is_none(),
        });
        if let Some(children) = &node.listed {
            out.push(TreeLine::Nest);
            lines(arena, children, &node.run.id, node.total, out);
            out.push(TreeLine::Unnest);
        }
        out.push(TreeLine::End);
    }
    let shown = listed.len() as u64;
    if total > shown {
        out.push(TreeLine::More {
            parent: parent.to_owned(),
            n: total - shown,
        });
    }
}
