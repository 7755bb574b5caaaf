//! Node folding (§5.3): the weakest GPU type, and per type how many of the weakest GPUs one of
//! its GPUs is worth — §5.3.1 from compute alone, §5.3.2 with the averaged within- and
//! across-node communication (`l_in`, `l_across`).

use super::{Folding, Model};
use crate::cluster::GpuId;
use crate::cost::comm::{collective_time, Collective};
use crate::cost::constants as k;
use crate::units::Bytes;

/// Folding factors `dᵢ` per type (index into `types`) and the weakest type.
pub(super) fn fold(m: &Model<'_>, folding: Folding) -> (Vec<usize>, usize) {
    let w = (0..m.types.len())
        .max_by(|&a, &b| {
            m.types[a]
                .total
                .total_cmp(&m.types[b].total)
                .then(b.cmp(&a))
        })
        .unwrap_or(0);
    let tw = m.types[w].total;
    let star: Vec<usize> = m
        .types
        .iter()
        .map(|t| ((tw / t.total).round() as usize).max(1))
        .collect();
    if folding == Folding::IgnoreComm {
        return (star, w);
    }
    let (l_in, l_across) = comm_averages(m, w);
    let mm = m.types[w].per_node;
    let layers = m.layers as f64;
    let p = |d: usize| {
        let n1 = d / mm;
        let d1 = d - n1 * mm;
        let denom = (n1 * mm + d1) as f64;
        tw / d as f64
            + n1 as f64 * l_across
            + layers * d1 as f64 / denom * l_in[d1]
            + layers * (n1 * mm) as f64 / denom * l_in[mm]
    };
    let d = m
        .types
        .iter()
        .zip(&star)
        .map(|(t, &ds)| {
            (1..=ds)
                .min_by(|&a, &b| (p(a) - t.total).abs().total_cmp(&(p(b) - t.total).abs()))
                .unwrap_or(1)
        })
        .collect();
    (d, w)
}

/// §5.3.2's `l_in[d]` (d = 0..=M) and `l_across` on the weakest type: mean over layers of the
/// all-reduce of its output over `d` GPUs of one node and of its send between two nodes.
pub(super) fn comm_averages(m: &Model<'_>, w: usize) -> (Vec<f64>, f64) {
    let (model, cluster) = (m.problem.model, m.problem.cluster);
    let t = &m.types[w];
    let tokens = m.b as f64 * model.tokens_per_sample(m.problem.seq_len) as f64;
    let elem = m.problem.options.precision.element_bytes();
    let node0 = t.gpus[0].node;
    let node_gpus: Vec<GpuId> = t.gpus.iter().copied().filter(|g| g.node == node0).collect();
    let bytes = |l: usize| Bytes(tokens * model.layers[l].output_bytes_per_token * elem / 2.0);
    let n = m.layers.max(1) as f64;
    let mut l_in = vec![0.0; t.per_node + 1];
    for (d, slot) in l_in.iter_mut().enumerate().skip(2) {
        let group = &node_gpus[..d.min(node_gpus.len())];
        *slot = (0..m.layers)
            .map(|l| collective_time(cluster, group, bytes(l), Collective::AllReduce, &|_| d).get())
            .sum::<f64>()
            / n;
    }
    let nic = cluster.nodes[node0 as usize].inter_bandwidth.get() * k::P2P_EFFICIENCY;
    let across = (0..m.layers)
        .map(|l| bytes(l).get() / nic + cluster.inter_latency.get())
        .sum::<f64>()
        / n;
    (l_in, across)
}
