//! Collective and point-to-point communication times (α–β model, docs/cost-model.md §3).
//!
//! A collective inside one node is a ring over the node's GPU links. A collective that spans
//! nodes is hierarchical, as NCCL's ring/tree over rail-connected nodes behaves for large
//! messages: an intra-node reduce-scatter, an inter-node collective between the members with the
//! same local rank (each carrying 1/k of the buffer, all k in parallel), an intra-node
//! all-gather. A node's network bandwidth is shared by every GPU of the node communicating
//! across nodes at the same time (`concurrent`), so the slowest node sets the pace.

use super::constants as k;
use crate::cluster::{Cluster, GpuId};
use crate::units::{Bytes, Seconds};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
}

/// Members of a group per node, node-ordered.
fn members_per_node(group: &[GpuId]) -> BTreeMap<u32, usize> {
    let mut m = BTreeMap::new();
    for g in group {
        *m.entry(g.node).or_insert(0) += 1;
    }
    m
}

/// Time of `kind` over `group` on a buffer of `bytes` (the full, unsharded buffer: an
/// all-gather's output, a reduce-scatter's input). `concurrent(node)` is the number of GPUs of
/// that node that communicate across nodes at the same time (at least this group's members).
pub fn collective_time(
    cluster: &Cluster,
    group: &[GpuId],
    bytes: Bytes,
    kind: Collective,
    concurrent: &dyn Fn(u32) -> usize,
) -> Seconds {
    let n = group.len();
    if n <= 1 || bytes.get() <= 0.0 {
        return Seconds::ZERO;
    }
    // An all-reduce moves twice the data of an all-gather or a reduce-scatter.
    let passes = match kind {
        Collective::AllReduce => 2.0,
        Collective::AllGather | Collective::ReduceScatter => 1.0,
    };
    let per_node = members_per_node(group);
    let s = bytes.get();
    if per_node.len() == 1 {
        let node = &cluster.nodes[group[0].node as usize];
        let bw = node.intra_bandwidth.get() * k::COLLECTIVE_EFFICIENCY;
        let steps = passes * (n as f64 - 1.0);
        return Seconds(steps / n as f64 * s / bw + steps * cluster.intra_latency.get());
    }
    // Intra-node phase: on the node with the most members (slowest ring of the phase).
    let mut intra = 0.0f64;
    let mut intra_steps = 0.0f64;
    for (&node, &kk) in &per_node {
        if kk > 1 {
            let bw = cluster.nodes[node as usize].intra_bandwidth.get() * k::COLLECTIVE_EFFICIENCY;
            let kf = kk as f64;
            // reduce-scatter and/or all-gather inside the node on the whole buffer.
            let t = passes * (kf - 1.0) / kf * s / bw;
            intra = intra.max(t);
            intra_steps = intra_steps.max(passes * (kf - 1.0));
        }
    }
    // Inter-node phase: each member exchanges its 1/k share with its peers on the other nodes,
    // over its share of the node's network. The pair bandwidth of adjacent ring nodes (AMP's
    // matrix) bounds it too.
    let nodes: Vec<u32> = per_node.keys().copied().collect();
    let nn = nodes.len() as f64;
    let mut inter = 0.0f64;
    for (i, &a) in nodes.iter().enumerate() {
        let b = nodes[(i + 1) % nodes.len()];
        let pair = cluster.node_pair_bandwidth(a, b).get();
        let kk = per_node[&a] as f64;
        let share = kk / (concurrent(a).max(per_node[&a]) as f64);
        let bw = pair * share * k::COLLECTIVE_EFFICIENCY;
        // The node sends passes·(N−1)/N of the buffer through its network in total.
        let t = passes * (nn - 1.0) / nn * s / bw;
        inter = inter.max(t);
    }
    let latency = intra_steps * cluster.intra_latency.get()
        + passes * (nn - 1.0) * cluster.inter_latency.get();
    Seconds(intra + inter + latency)
}

/// Time to send `bytes` from `from` to `to`, when `concurrent` GPUs of the sending node send
/// across nodes at the same time (sharing the node's network).
pub fn p2p_time(
    cluster: &Cluster,
    from: GpuId,
    to: GpuId,
    bytes: Bytes,
    concurrent: usize,
) -> Seconds {
    if from == to || bytes.get() <= 0.0 {
        return Seconds::ZERO;
    }
    let bw = if from.node == to.node {
        cluster.node(from).intra_bandwidth.get()
    } else {
        cluster.node_pair_bandwidth(from.node, to.node).get() / concurrent.max(1) as f64
    };
    Seconds(bytes.get() / (bw * k::P2P_EFFICIENCY) + cluster.link_latency(from, to).get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{GpuTypeId, Node};
    use crate::units::BytesPerSec;

    fn cluster(nodes: u32, gpus: u32, intra: f64, inter: f64) -> Cluster {
        Cluster {
            name: "t".into(),
            gpu_types: vec![crate::gpu::lookup("a100-sxm4-80gb").unwrap()],
            nodes: (0..nodes)
                .map(|_| Node {
                    gpu_type: GpuTypeId(0),
                    num_gpus: gpus,
                    intra_bandwidth: BytesPerSec(intra),
                    inter_bandwidth: BytesPerSec(inter),
                    group: 0,
                })
                .collect(),
            pair_bandwidth: Default::default(),
            intra_latency: Seconds(0.0),
            inter_latency: Seconds(0.0),
        }
    }

    #[test]
    fn ring_all_reduce_inside_a_node() {
        // 4 GPUs, 100 GB/s links, 1 GB buffer: 2·3/4 GB / (100 GB/s · 0.8) = 18.75 ms.
        let c = cluster(1, 4, 100e9, 1e9);
        let g: Vec<GpuId> = c.gpus();
        let t = collective_time(&c, &g, Bytes(1e9), Collective::AllReduce, &|_| 0);
        assert!((t.get() - 0.01875).abs() < 1e-9, "{t:?}");
        let t = collective_time(&c, &g, Bytes(1e9), Collective::AllGather, &|_| 0);
        assert!((t.get() - 0.009375).abs() < 1e-9);
    }

    #[test]
    fn hierarchical_all_reduce_across_nodes() {
        // 2 nodes × 2 GPUs; intra 100 GB/s, network 10 GB/s per node; 1 GB.
        // intra: 2·(1/2)·1 GB / 80 GB/s = 12.5 ms; inter: 2·(1/2)·1 GB / (10·0.8) = 125 ms.
        let c = cluster(2, 2, 100e9, 10e9);
        let g = c.gpus();
        let t = collective_time(&c, &g, Bytes(1e9), Collective::AllReduce, &|_| 0);
        assert!((t.get() - 0.1375).abs() < 1e-9, "{t:?}");
        // If the other GPUs of each node also use the network at the same time, it halves.
        let t2 = collective_time(
            &c,
            &g[..1].iter().chain(&g[2..3]).copied().collect::<Vec<_>>(),
            Bytes(1e9),
            Collective::AllReduce,
            &|_| 2,
        );
        assert!(
            (t2.get() - 2.0 * 0.5 * 1e9 / (5e9 * 0.8)).abs() < 1e-9,
            "{t2:?}"
        );
    }

    #[test]
    fn p2p_uses_the_link() {
        let c = cluster(2, 1, 100e9, 10e9);
        let g = c.gpus();
        let t = p2p_time(&c, g[0], g[1], Bytes(1e9), 1);
        assert!((t.get() - 1.0 / 8.5).abs() < 1e-9);
    }
}
