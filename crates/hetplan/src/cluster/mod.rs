//! Clusters: nodes of GPUs, the links inside a node and between nodes.
//!
//! `spec` holds the raw TOML form and its parser, `builtin` the clusters known by name; this
//! module the resolved, validated value that the cost model, the simulator and the planners
//! use.

pub mod builtin;
pub mod spec;

use crate::gpu::GpuSpec;
use crate::units::{Bytes, BytesPerSec, Seconds};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Host memory per GPU of a node whose cluster file does not say (`host_memory` per node
/// group): 48 GiB, the RAM per GPU of AWS's g4dn.12xlarge (192 GiB for 4 T4), low among cloud
/// GPU instances (p3.16xlarge: 488 GiB for 8 V100, 61 GiB a GPU; p4d.24xlarge: 1,152 GiB for 8
/// A100, 144 GiB a GPU), so that an offloading plan is not called a fit on RAM a node may not
/// have. Set it for your nodes.
pub const DEFAULT_HOST_MEMORY_PER_GPU_GIB: f64 = 48.0;

/// A node's host memory when its cluster file does not say.
pub fn default_host_memory(gpus: u32) -> Bytes {
    Bytes::gib(DEFAULT_HOST_MEMORY_PER_GPU_GIB * gpus as f64)
}

/// A GPU in the cluster: its node and its index inside the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GpuId {
    pub node: u32,
    pub local: u32,
}

impl fmt::Display for GpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}g{}", self.node, self.local)
    }
}

/// Index into `Cluster::gpu_types`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GpuTypeId(pub usize);

/// One node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub gpu_type: GpuTypeId,
    pub num_gpus: u32,
    /// GPU-to-GPU bandwidth inside the node, per GPU, per direction.
    pub intra_bandwidth: BytesPerSec,
    /// The node's network bandwidth (all its NICs together), per direction.
    pub inter_bandwidth: BytesPerSec,
    /// The node's host memory, where offloaded states and activations live.
    pub host_memory: Bytes,
    /// Index of the `[[node_group]]` this node came from.
    pub group: usize,
}

/// A resolved cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    pub name: String,
    /// GPU types present, after per-cluster overrides, in order of first appearance.
    pub gpu_types: Vec<GpuSpec>,
    pub nodes: Vec<Node>,
    /// Per node-pair bandwidth overrides (AMP's bandwidth matrix), keyed by (min, max) node index.
    pub pair_bandwidth: BTreeMap<(u32, u32), BytesPerSec>,
    /// Latency of one message inside a node.
    pub intra_latency: Seconds,
    /// Latency of one message between nodes.
    pub inter_latency: Seconds,
}

/// Nodes that are interchangeable for a planner's device groups: the same GPU type, GPU count
/// and intra- and inter-node bandwidths. A node named in a per-pair bandwidth is a class of its
/// own (its links differ from its peers').
#[derive(Clone, Debug, PartialEq)]
pub struct NodeClass {
    pub gpu_type: GpuTypeId,
    pub per_node: u32,
    /// Node indices, ascending.
    pub nodes: Vec<u32>,
}

impl Cluster {
    /// The node classes of the cluster, in order of first appearance; every node is in exactly
    /// one (nodes without GPUs too: planners that place GPUs skip classes with `per_node` 0).
    pub fn node_classes(&self) -> Vec<NodeClass> {
        let mut own = std::collections::BTreeSet::new();
        for &(a, b) in self.pair_bandwidth.keys() {
            own.insert(a);
            own.insert(b);
        }
        type Key = (usize, u32, u64, u64, Option<u32>);
        let mut keys: Vec<Key> = Vec::new();
        let mut out: Vec<NodeClass> = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let i = i as u32;
            let key = (
                n.gpu_type.0,
                n.num_gpus,
                n.intra_bandwidth.get().to_bits(),
                n.inter_bandwidth.get().to_bits(),
                own.contains(&i).then_some(i),
            );
            match keys.iter().position(|k| *k == key) {
                Some(c) => out[c].nodes.push(i),
                None => {
                    keys.push(key);
                    out.push(NodeClass {
                        gpu_type: n.gpu_type,
                        per_node: n.num_gpus,
                        nodes: vec![i],
                    });
                }
            }
        }
        out
    }

    pub fn num_gpus(&self) -> usize {
        self.nodes.iter().map(|n| n.num_gpus as usize).sum()
    }

    /// Every GPU, node-major.
    pub fn gpus(&self) -> Vec<GpuId> {
        self.nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| {
                (0..n.num_gpus).map(move |l| GpuId {
                    node: i as u32,
                    local: l,
                })
            })
            .collect()
    }

    pub fn contains(&self, id: GpuId) -> bool {
        self.nodes
            .get(id.node as usize)
            .is_some_and(|n| id.local < n.num_gpus)
    }

    pub fn node(&self, id: GpuId) -> &Node {
        &self.nodes[id.node as usize]
    }

    pub fn gpu_type_of(&self, id: GpuId) -> GpuTypeId {
        self.node(id).gpu_type
    }

    pub fn gpu(&self, id: GpuId) -> &GpuSpec {
        &self.gpu_types[self.node(id).gpu_type.0]
    }

    /// Bandwidth between two nodes' networks: the override if one is set, otherwise the slower
    /// of the two nodes' NICs.
    pub fn node_pair_bandwidth(&self, a: u32, b: u32) -> BytesPerSec {
        let key = (a.min(b), a.max(b));
        if let Some(bw) = self.pair_bandwidth.get(&key) {
            return *bw;
        }
        let (na, nb) = (&self.nodes[a as usize], &self.nodes[b as usize]);
        na.inter_bandwidth.min(nb.inter_bandwidth)
    }

    /// Point-to-point bandwidth between two GPUs (one stream, per direction).
    pub fn link_bandwidth(&self, a: GpuId, b: GpuId) -> BytesPerSec {
        if a.node == b.node {
            self.node(a).intra_bandwidth
        } else {
            self.node_pair_bandwidth(a.node, b.node)
        }
    }

    pub fn link_latency(&self, a: GpuId, b: GpuId) -> Seconds {
        if a.node == b.node {
            self.intra_latency
        } else {
            self.inter_latency
        }
    }
}
