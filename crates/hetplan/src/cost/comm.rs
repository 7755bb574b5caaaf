//! Collective and point-to-point communication times (α–β model, docs/cost-model.md §3).
//!
//! Collectives are NCCL's ring (docs/cost-model.md §3 says why ring): the members form one ring
//! that visits each node's GPUs in turn, and every edge of the ring carries `passes·(n−1)/n` of
//! the buffer at the same time (NCCL pipelines the buffer in chunks through all edges), so the
//! slowest edge sets the pace. Inside a node an edge is a GPU's link; between nodes it is the
//! node's network, which every ring of the node that crosses nodes at the same time shares
//! (`concurrent`: the GPUs of that node communicating across nodes; a ring with k members on
//! the node uses k of them and one crossing).

use super::constants as k;
use crate::cluster::{Cluster, GpuId};
use crate::units::{Bytes, Seconds};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    /// Every member sends 1/n of its buffer to each other member (expert parallelism's token
    /// dispatch and combine): not a ring; see [`all_to_all_time`].
    AllToAll,
}

impl Collective {
    /// Times a ring moves the buffer: an all-reduce is a reduce-scatter then an all-gather.
    /// An all-to-all moves each member's buffer once.
    pub fn passes(self) -> f64 {
        match self {
            Collective::AllReduce => 2.0,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => 1.0,
        }
    }

    /// The same collective as a profile database names it.
    pub fn measured_op(self) -> crate::profile::CollectiveOp {
        use crate::profile::CollectiveOp;
        match self {
            Collective::AllReduce => CollectiveOp::AllReduce,
            Collective::AllGather => CollectiveOp::AllGather,
            Collective::ReduceScatter => CollectiveOp::ReduceScatter,
            Collective::AllToAll => CollectiveOp::AllToAll,
        }
    }
}

/// Members of a group (or a stage's devices) per node, node-ordered.
pub(crate) fn members_per_node(group: &[GpuId]) -> BTreeMap<u32, usize> {
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
    if kind == Collective::AllToAll {
        return all_to_all_time(cluster, group, bytes, concurrent);
    }
    let steps = kind.passes() * (n as f64 - 1.0);
    // What every edge of the ring carries.
    let volume = steps / n as f64 * bytes.get();
    let per_node = members_per_node(group);
    // The slowest edge: a GPU link inside a node with two members or more, and each crossing
    // from a node to the next, on the node's share of the network at both ends.
    let mut bw = f64::INFINITY;
    for (&node, &members) in &per_node {
        if members > 1 {
            bw = bw.min(cluster.nodes[node as usize].intra_bandwidth.get());
        }
    }
    let nodes: Vec<u32> = per_node.keys().copied().collect();
    if nodes.len() > 1 {
        let share = |node: u32| {
            let members = per_node[&node];
            members as f64 / concurrent(node).max(members) as f64
        };
        for (i, &a) in nodes.iter().enumerate() {
            let b = nodes[(i + 1) % nodes.len()];
            let pair = cluster.node_pair_bandwidth(a, b).get();
            bw = bw.min(pair * share(a).min(share(b)));
        }
    }
    Seconds(volume / (bw * k::COLLECTIVE_EFFICIENCY)) + collective_latency(cluster, group, kind)
}

/// Time of an all-to-all over `group` in which every member sends `bytes`, 1/n to each member
/// (itself included): all pairs at once, as NCCL's grouped send/receive runs them. Inside a
/// node each GPU's link carries its (m−1)/n share out; each node's network carries what its m
/// members send off the node, m·(n−m)/n of the buffer, on the node's share of the network
/// (`concurrent` as for the rings); the busiest of these sets the time, plus one message
/// latency (the sends run side by side).
pub fn all_to_all_time(
    cluster: &Cluster,
    group: &[GpuId],
    bytes: Bytes,
    concurrent: &dyn Fn(u32) -> usize,
) -> Seconds {
    let n = group.len();
    if n <= 1 || bytes.get() <= 0.0 {
        return Seconds::ZERO;
    }
    let nf = n as f64;
    let b = bytes.get();
    let per_node = members_per_node(group);
    let mut t = 0.0f64;
    for (&node, &m) in &per_node {
        let mf = m as f64;
        let nd = &cluster.nodes[node as usize];
        if m > 1 {
            t = t.max(b * (mf - 1.0) / nf / nd.intra_bandwidth.get());
        }
        if m < n {
            // The node's network at its share for these m GPUs: bytes out (and, symmetric,
            // in) over m / concurrent of its bandwidth.
            let share = mf / concurrent(node).max(m) as f64;
            t = t.max(mf * b * (nf - mf) / nf / (nd.inter_bandwidth.get() * share));
        }
    }
    let latency = if per_node.len() > 1 {
        cluster.inter_latency
    } else {
        cluster.intra_latency
    };
    Seconds(t / k::COLLECTIVE_EFFICIENCY + latency.get())
}

/// The message latencies of one `kind` ring collective over `group`: `passes·(n−1)` steps,
/// each a message across the slowest kind of link the ring crosses.
pub fn collective_latency(cluster: &Cluster, group: &[GpuId], kind: Collective) -> Seconds {
    let n = group.len();
    if n <= 1 {
        return Seconds::ZERO;
    }
    let latency = if group.iter().any(|g| g.node != group[0].node) {
        cluster.inter_latency
    } else {
        cluster.intra_latency
    };
    Seconds(kind.passes() * (n as f64 - 1.0) * latency.get())
}

/// The bytes each network a send crosses between two nodes carries while it is in flight, its
/// own included: the sender's outgoing side, the receiver's incoming side, and the route between
/// the two nodes where the cluster sets its bandwidth.
#[derive(Clone, Copy, Debug)]
pub struct SharedSides {
    pub outgoing: Bytes,
    pub incoming: Bytes,
    pub route: Bytes,
}

/// Time of a send between two GPUs whose networks are shared (`sides`): fair shares, so the
/// send ends when its busiest side has moved what it carries, each side at its own bandwidth —
/// a 10 Gbps sender feeding a 25 Gbps receiver that takes eight such sends is limited by the
/// receiver, not by 10 Gbps eight times over. Inside a node the GPU link, unshared.
pub fn shared_send_time(
    cluster: &Cluster,
    from: GpuId,
    to: GpuId,
    bytes: Bytes,
    sides: SharedSides,
) -> Seconds {
    if from == to || bytes.get() <= 0.0 {
        return Seconds::ZERO;
    }
    if from.node == to.node {
        return p2p_time(cluster, from, to, bytes, 1.0);
    }
    let out = sides.outgoing.get().max(bytes.get()) / cluster.node(from).inter_bandwidth.get();
    let inn = sides.incoming.get().max(bytes.get()) / cluster.node(to).inter_bandwidth.get();
    let key = (from.node.min(to.node), from.node.max(to.node));
    let route = match cluster.pair_bandwidth.get(&key) {
        Some(bw) => sides.route.get().max(bytes.get()) / bw.get(),
        None => 0.0,
    };
    Seconds(out.max(inn).max(route) / k::P2P_EFFICIENCY + cluster.link_latency(from, to).get())
}

/// Time to send `bytes` from `from` to `to` when the network between them carries `load` times
/// the traffic of this send (e.g. the number of GPUs of the sending node that send across nodes
/// at the same time, each as much); `load` does not apply inside a node.
pub fn p2p_time(cluster: &Cluster, from: GpuId, to: GpuId, bytes: Bytes, load: f64) -> Seconds {
    if from == to || bytes.get() <= 0.0 {
        return Seconds::ZERO;
    }
    let bw = if from.node == to.node {
        cluster.node(from).intra_bandwidth.get()
    } else {
        cluster.node_pair_bandwidth(from.node, to.node).get() / load.max(1.0)
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
                    host_memory: crate::cluster::default_host_memory(gpus),
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
    fn ring_all_reduce_across_nodes() {
        // 2 nodes × 2 GPUs; intra 100 GB/s, network 10 GB/s per node; 1 GB. Every ring edge
        // carries 2·(3/4)·1 GB = 1.5 GB; the crossing is the slowest: 1.5 GB / (10·0.8) GB/s.
        let c = cluster(2, 2, 100e9, 10e9);
        let g = c.gpus();
        let t = collective_time(&c, &g, Bytes(1e9), Collective::AllReduce, &|_| 0);
        assert!((t.get() - 0.1875).abs() < 1e-9, "{t:?}");
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
        let t = p2p_time(&c, g[0], g[1], Bytes(1e9), 1.0);
        assert!((t.get() - 1.0 / 8.5).abs() < 1e-9);
    }
}
