//! The baseline the tree algorithm is compared with: a plain minimum spanning tree (Prim from the
//! root over the whole network, weight = utilisation as a fraction of capacity, ties by link order),
//! with no degree limits and no roles (any node forwards), pruned to the targets afterwards.
//! It is what Algorithm 1 reduces to without its constraints; it is not used to move data.

use crate::topology::{NodeId, Topology};
use crate::tree::{Flow, Tree, TreeEdge};

/// A plain MST rooted at `root`, pruned to `targets`; None when a target is not connected to the root.
pub fn plain_mst(
    topology: &Topology,
    root: NodeId,
    targets: &[NodeId],
    flow: Flow,
) -> Option<Tree> {
    let n = topology.nodes().len();
    let mut in_tree = vec![false; n];
    in_tree[root.index()] = true;
    let mut edges: Vec<TreeEdge> = Vec::new();
    loop {
        let mut best: Option<(f64, TreeEdge)> = None;
        for e in edges.iter().map(|e| e.child).chain([root]) {
            for (link, child) in topology.neighbours(e) {
                if in_tree[child.index()] {
                    continue;
                }
                let l = topology.link(link);
                let weight = match flow {
                    Flow::Down => l.utilisation_from(e),
                    Flow::Up => l.utilisation_from(child),
                };
                let better = best
                    .as_ref()
                    .is_none_or(|(w, b)| weight.total_cmp(w).then(link.cmp(&b.link)).is_lt());
                if better {
                    best = Some((
                        weight,
                        TreeEdge {
                            parent: e,
                            child,
                            link,
                        },
                    ));
                }
            }
        }
        let Some((_, edge)) = best else { break };
        in_tree[edge.child.index()] = true;
        edges.push(edge);
    }
    if targets.iter().any(|t| !in_tree[t.index()]) {
        return None;
    }
    loop {
        let mut children = vec![0u32; n];
        for e in &edges {
            children[e.parent.index()] += 1;
        }
        let before = edges.len();
        edges.retain(|e| children[e.child.index()] > 0 || targets.contains(&e.child));
        if edges.len() == before {
            break;
        }
    }
    Some(Tree::from_parts(root, flow, edges, targets.to_vec()))
}
