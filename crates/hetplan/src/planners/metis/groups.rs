//! Device groups (§4.1, §4.2.2): the sizes a group may have, the multisets of sizes that fill
//! the cluster, their permutations over the stages (pairing the smallest groups beyond the
//! maximum permutation length), their placement on the nodes, and the three-factor identity that
//! makes two placements the same candidate.

use super::ctx::Ctx;
use crate::cluster::{Cluster, GpuId};

/// A device group: the GPUs of one stage.
#[derive(Clone, Debug)]
pub(super) struct Group {
    /// Sorted by (node, local): replica r is `devices[r·tp..(r+1)·tp]`.
    pub(super) devices: Vec<GpuId>,
    /// (node, GPUs of the group on it), node-ordered.
    pub(super) per_node: Vec<(u32, u32)>,
    /// More than one GPU type.
    pub(super) hetero: bool,
    /// Interned (node class, GPUs on the node) sequence in node order: everything the
    /// intra-stage choices of a group depend on (see `Ctx::shape_of`).
    pub(super) shape: u32,
}

impl Group {
    pub(super) fn size(&self) -> u32 {
        self.devices.len() as u32
    }

    /// GPUs of the group on `node`: they share its network (the `concurrent` argument of
    /// `cost::comm`).
    pub(super) fn on_node(&self, node: u32) -> usize {
        self.per_node
            .iter()
            .find(|(n, _)| *n == node)
            .map_or(0, |&(_, c)| c as usize)
    }
}

impl Ctx<'_, '_> {
    /// The interned shape of a group's GPUs: (node class, count) per node, in node order. Two
    /// groups of one shape have the same replica classes in the same order, the same valid TP
    /// degrees and the same memory, so their intra-stage choices are the same.
    pub(super) fn shape_of(&mut self, per_node: &[(u32, u32)]) -> u32 {
        let key: Vec<(usize, u32)> = per_node
            .iter()
            .map(|&(n, c)| (self.node_class[n as usize], c))
            .collect();
        let next = self.shapes.len() as u32;
        *self.shapes.entry(key).or_insert(next)
    }
}

/// The sizes a device group may have: powers of two up to the GPU count, and every sum of whole
/// nodes' GPU counts. Ascending.
pub(super) fn group_sizes(cluster: &Cluster) -> Vec<u32> {
    let n = cluster.num_gpus();
    let mut reach = vec![false; n + 1];
    reach[0] = true;
    for node in &cluster.nodes {
        let c = node.num_gpus as usize;
        for v in (c..=n).rev() {
            if reach[v - c] {
                reach[v] = true;
            }
        }
    }
    let mut p = 1usize;
    while p <= n {
        reach[p] = true;
        p *= 2;
    }
    (1..=n).filter(|&v| reach[v]).map(|v| v as u32).collect()
}

/// Calls `f` with every non-decreasing sequence of `parts` sizes from `sizes` (ascending)
/// summing to `total`; stops when `f` returns false (and returns false).
pub(super) fn partitions(
    total: u32,
    parts: usize,
    sizes: &[u32],
    f: &mut dyn FnMut(&[u32]) -> bool,
) -> bool {
    fn rec(
        rem: u64,
        left: usize,
        from: usize,
        sizes: &[u32],
        acc: &mut Vec<u32>,
        f: &mut dyn FnMut(&[u32]) -> bool,
    ) -> bool {
        if left == 0 {
            return rem != 0 || f(acc);
        }
        let Some(&largest) = sizes.last() else {
            return true;
        };
        if (largest as u64) * (left as u64) < rem {
            return true;
        }
        for (idx, &z) in sizes.iter().enumerate().skip(from) {
            if (z as u64) * (left as u64) > rem {
                break;
            }
            acc.push(z);
            let go = rec(rem - z as u64, left - 1, idx, sizes, acc, f);
            acc.pop();
            if !go {
                return false;
            }
        }
        true
    }
    rec(total as u64, parts, 0, sizes, &mut Vec::new(), f)
}

/// The elements to permute (§4.2.2): while there are more than `max_len`, the groups of the
/// smallest size are paired up — all of them at once, or as many pairs as are needed if more,
/// as the released code's `permute` does (the paper's example pairs g₁g₂ and g₃g₄ of four
/// one-GPU groups); a pair is one element of their total size. Sorted.
pub(super) fn permutation_elements(sizes: &[u32], max_len: usize) -> Vec<Vec<u32>> {
    let total = |e: &Vec<u32>| e.iter().map(|&x| x as u64).sum::<u64>();
    let mut elems: Vec<Vec<u32>> = sizes.iter().map(|&s| vec![s]).collect();
    elems.sort_by_key(total);
    let max_len = max_len.max(1);
    while elems.len() > max_len {
        let need = elems.len() - max_len;
        let smallest = total(&elems[0]);
        let k = elems.iter().take_while(|e| total(e) == smallest).count();
        if k < 2 {
            break;
        }
        let pairs = need.max(k / 2).min(k / 2);
        let rest = elems.split_off(2 * pairs);
        let mut merged: Vec<Vec<u32>> = elems
            .chunks(2)
            .map(|p| p.iter().flatten().copied().collect())
            .collect();
        merged.extend(rest);
        merged.sort_by_key(total);
        elems = merged;
    }
    elems.sort();
    elems
}

/// The next lexicographic permutation of `v` in place; false after the last.
pub(super) fn next_permutation<T: Ord>(v: &mut [T]) -> bool {
    if v.len() < 2 {
        return false;
    }
    let mut i = v.len() - 1;
    while i > 0 && v[i - 1] >= v[i] {
        i -= 1;
    }
    if i == 0 {
        return false;
    }
    let mut j = v.len() - 1;
    while v[j] <= v[i - 1] {
        j -= 1;
    }
    v.swap(i - 1, j);
    v[i..].reverse();
    true
}

/// Places an ordered size sequence on the cluster: stages take consecutive GPUs along the nodes
/// of the classes in `order` (nodes of a class in index order).
pub(super) fn place(ctx: &mut Ctx<'_, '_>, order: &[usize], seq: &[u32]) -> Vec<Group> {
    let cluster = ctx.cluster();
    let node_class = &ctx.node_class;
    let walk: Vec<u32> = order
        .iter()
        .flat_map(|&c| {
            (0..cluster.nodes.len() as u32).filter(move |&n| node_class[n as usize] == c)
        })
        .collect();
    let mut pos = 0usize;
    let mut used = 0u32;
    let mut groups = Vec::with_capacity(seq.len());
    for &size in seq {
        let mut need = size;
        let mut devices = Vec::with_capacity(size as usize);
        let mut per_node: Vec<(u32, u32)> = Vec::new();
        while need > 0 {
            let node = walk[pos];
            let cap = cluster.nodes[node as usize].num_gpus;
            let take = need.min(cap - used);
            devices.extend((used..used + take).map(|l| GpuId { node, local: l }));
            per_node.push((node, take));
            used += take;
            need -= take;
            if used == cap {
                pos += 1;
                used = 0;
            }
        }
        devices.sort();
        per_node.sort();
        let t0 = cluster.gpu_type_of(devices[0]);
        let hetero = devices.iter().any(|&d| cluster.gpu_type_of(d) != t0);
        let shape = ctx.shape_of(&per_node);
        groups.push(Group {
            devices,
            per_node,
            hetero,
            shape,
        });
    }
    groups
}

/// The three factors of a device group (§4.1): its GPUs as (node class, GPUs on that node),
/// sorted — which fixes its size, its GPU types and how each type sits on nodes.
type GroupKey = Vec<(usize, u32)>;

/// A placement's identity: its groups' three factors in stage order, and which adjacent stages
/// share a node, flattened into one vector (per stage: its pair count, then (class, count)
/// pairs; then one 0/1 per adjacent pair). One allocation per key: a search at 1,024 GPUs keeps
/// hundreds of thousands of keys of hundreds of stages, and nested vectors took over a second
/// to free when it stopped.
pub(super) type PlacementKey = Vec<u32>;

fn group_key(ctx: &Ctx<'_, '_>, g: &Group) -> GroupKey {
    let mut v: GroupKey = g
        .per_node
        .iter()
        .map(|&(n, c)| (ctx.node_class[n as usize], c))
        .collect();
    v.sort();
    v
}

/// The three-factor identity of a placement (per stage: its GPUs as (node class, count on the
/// node), sorted — which fixes size and GPU types — and whether adjacent stages share a node).
pub(super) fn placement_key(ctx: &Ctx<'_, '_>, groups: &[Group]) -> PlacementKey {
    let mut key = Vec::new();
    for g in groups {
        let k = group_key(ctx, g);
        key.push(k.len() as u32);
        for (class, count) in k {
            key.push(class as u32);
            key.push(count);
        }
    }
    key.extend(groups.windows(2).map(|w| {
        u32::from(
            w[0].per_node
                .iter()
                .any(|(n, _)| w[1].per_node.iter().any(|(m, _)| m == n)),
        )
    }));
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairing_the_smallest_groups_limits_the_permutation_length() {
        // The paper's example: four groups of one GPU and one of two, length 3.
        let e = permutation_elements(&[1, 1, 1, 1, 2], 3);
        assert_eq!(e, vec![vec![1, 1], vec![1, 1], vec![2]]);
        let mut v = e;
        let mut n = 1;
        while next_permutation(&mut v) {
            n += 1;
        }
        assert_eq!(n, 3);
        assert_eq!(permutation_elements(&[4, 8], 10), vec![vec![4], vec![8]]);
    }

    #[test]
    fn partitions_respect_the_sizes() {
        let mut all = Vec::new();
        partitions(12, 2, &[1, 2, 4, 8, 12], &mut |p| {
            all.push(p.to_vec());
            true
        });
        assert_eq!(all, vec![vec![4, 8]]);
        let mut all = Vec::new();
        partitions(8, 3, &[2, 4, 6, 8], &mut |p| {
            all.push(p.to_vec());
            true
        });
        assert_eq!(all, vec![vec![2, 2, 4]]);
    }
}
