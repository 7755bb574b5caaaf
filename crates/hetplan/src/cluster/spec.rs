//! The cluster TOML format and its resolution into a `Cluster`.
//!
//! ```toml
//! name = "t4-v100"
//! intra_node_latency = "5 us"     # optional, default `DEFAULT_INTRA_NODE_LATENCY_US`
//! inter_node_latency = "20 us"    # optional, default `DEFAULT_INTER_NODE_LATENCY_US`
//!
//! [[node_group]]                  # a group of identical nodes
//! gpu = "v100-sxm2-16gb"          # GPU catalog name or alias (see `gpu::catalog`)
//! gpus_per_node = 4
//! nodes = 2
//! intra_node_bandwidth = "150 GB/s"  # optional: GPU-to-GPU inside a node, per GPU, per
//!                                    # direction; default `GpuSpec::default_intra_node_bandwidth`
//! inter_node_bandwidth = "16 Gbps"   # the node's network (all NICs), per direction; required
//!                                    # when the cluster has more than one node
//! host_memory = "512 GiB"            # optional: each node's RAM for offloading; default
//!                                    # 48 GiB per GPU (`cluster::DEFAULT_HOST_MEMORY_PER_GPU_GIB`)
//! [[node_group]]
//! gpu = "t4"
//! gpus_per_node = 2
//! nodes = 1
//! inter_node_bandwidth = "16 Gbps"
//!
//! [gpu_overrides."v100-sxm2-16gb"]  # per GPU type: memory, peak_tensor, peak_fp32,
//! memory = "15 GiB"                 # hbm_bandwidth, nvlink_bandwidth, pcie_bandwidth,
//!                                   # power_limit ("250 W": compute clock × (cap/TDP)^⅔)
//!
//! [[bandwidth]]                     # per node-pair override (AMP's bandwidth matrix)
//! nodes = [0, 2]                    # node indices: file order, group 0's nodes first
//! bandwidth = "10 Gbps"
//! ```
//!
//! Every quantity is a string with its unit (`"16 Gbps"`, `"300 GB/s"`, `"80 GiB"`,
//! `"312 TFLOP/s"`, `"10 us"`); a bare number is rejected because its unit would be a guess.
//! Bandwidths are per direction (see `units`). Unknown keys are rejected with the nearest known
//! key as a hint; every error carries the line, column and dotted path of the offending field.
//!
//! Besides files, `catalog_cluster` knows a few published clusters by name and the pattern
//! `NxGxGPU[@BANDWIDTH]` (see there).

pub use super::builtin::catalog_cluster_names;
use super::builtin::BUILTINS;
use super::{Cluster, GpuTypeId, Node};
use crate::error::InputError;
use crate::gpu::{self, AliasNote, GpuSpec};
use crate::names;
use crate::names::did_you_mean;
use crate::parse::{self, Num};
use crate::units::{self, Bytes, BytesPerSec, FlopPerSec, Seconds, UnitError};
use serde::Deserialize;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Range;
use std::str::FromStr;
use toml::{Spanned, Value};

/// Default latency of one message between two GPUs of a node, in microseconds.
///
/// NCCL's own cost model (`src/graph/tuning.cc`, NCCL 2.x) charges a per-operation base
/// latency of 3.6–6.8 µs for its low-latency (LL) protocol plus about 0.5 µs per NVLink hop
/// (1 µs per PCIe hop); nccl-tests measure small-message latencies of about 5–10 µs inside an
/// NVLink node. We take 5 µs.
pub const DEFAULT_INTRA_NODE_LATENCY_US: f64 = 5.0;

/// Default latency of one message between two nodes, in microseconds.
///
/// The same NCCL model charges 2.7–5 µs per network hop on top of the base latency for the LL
/// protocols and 9.6 µs for the Simple protocol (8.4 µs base), i.e. about 18 µs for a
/// bandwidth-bound transfer; nccl-tests across InfiniBand/RoCE report 10–20 µs small-message
/// latencies, more over TCP. We take 20 µs, the upper end, since the clusters hetplan targets
/// are often cloud instances joined by Ethernet.
pub const DEFAULT_INTER_NODE_LATENCY_US: f64 = 20.0;

/// The inter-node bandwidth of a `NxGxGPU` cluster name without an `@BANDWIDTH` suffix, in
/// Gbps (a 200 Gb/s HDR InfiniBand or 200 GbE NIC per node).
pub const PATTERN_DEFAULT_INTER_NODE_GBPS: f64 = 200.0;

/// At most this many nodes in a cluster, and GPUs in a node: larger values are typos that would
/// only exhaust memory.
pub const MAX_NODES: u64 = 100_000;
pub const MAX_GPUS_PER_NODE: u64 = 1024;
/// At most this many GPUs in a cluster (2²⁰): plans and cost reports list every GPU.
pub const MAX_GPUS: u64 = 1 << 20;

pub fn default_intra_node_latency() -> Seconds {
    Seconds::us(DEFAULT_INTRA_NODE_LATENCY_US)
}

pub fn default_inter_node_latency() -> Seconds {
    Seconds::us(DEFAULT_INTER_NODE_LATENCY_US)
}

// ------------------------------------------------------------------------------ raw form

/// Every leaf is a `Spanned<Value>` so that type errors (a bare number for a bandwidth, a
/// quoted node count) get our own messages and hints rather than serde's.
type Leaf = Option<Spanned<Value>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    name: Leaf,
    intra_node_latency: Leaf,
    inter_node_latency: Leaf,
    #[serde(default)]
    node_group: Vec<RawGroup>,
    #[serde(default)]
    gpu_overrides: BTreeMap<Spanned<String>, RawOverride>,
    #[serde(default)]
    bandwidth: Vec<RawPair>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    gpu: Leaf,
    gpus_per_node: Leaf,
    nodes: Leaf,
    intra_node_bandwidth: Leaf,
    inter_node_bandwidth: Leaf,
    host_memory: Leaf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOverride {
    memory: Leaf,
    peak_tensor: Leaf,
    peak_fp32: Leaf,
    hbm_bandwidth: Leaf,
    nvlink_bandwidth: Leaf,
    pcie_bandwidth: Leaf,
    power_limit: Leaf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPair {
    nodes: Leaf,
    bandwidth: Leaf,
}

// ------------------------------------------------------------------------------- parsing

/// Parses and validates a cluster file.
pub fn parse_cluster_toml(src: &str) -> Result<Cluster, InputError> {
    parse_cluster_toml_noted(src).map(|(c, _)| c)
}

/// Parses and validates a cluster file, with a note for each ambiguous GPU name it uses
/// (`gpu = "A100"`: which card it was taken for), once per name.
pub fn parse_cluster_toml_noted(src: &str) -> Result<(Cluster, Vec<AliasNote>), InputError> {
    let raw: RawCluster = toml::from_str(src).map_err(|e| serde_error(src, &e))?;
    let r = Resolver {
        src,
        notes: RefCell::new(Vec::new()),
        headers: header_offsets(src),
    };
    let c = r.resolve(raw)?;
    Ok((c, r.notes.into_inner()))
}

struct Resolver<'a> {
    src: &'a str,
    notes: RefCell<Vec<AliasNote>>,
    /// Offsets of the `[[name]]` headers, by name, in file order: found in one pass, since a
    /// file may hold hundreds of thousands of groups.
    headers: BTreeMap<String, Vec<usize>>,
}

/// Adds `note` unless the same name was already noted.
fn push_note(notes: &mut Vec<AliasNote>, note: Option<AliasNote>) {
    if let Some(n) = note {
        let key = names::normalize(&n.written);
        if !notes.iter().any(|m| names::normalize(&m.written) == key) {
            notes.push(n);
        }
    }
}

/// A node group after its own fields are checked.
struct Group {
    gpu: GpuSpec,
    gpu_at: Range<usize>,
    gpus_per_node: u32,
    nodes: u32,
    intra: Option<BytesPerSec>,
    inter: Option<BytesPerSec>,
    host: Option<Bytes>,
    /// Where to point at the group as a whole: its `[[node_group]]` header.
    at: Option<usize>,
}

impl<'a> Resolver<'a> {
    /// Byte offset of the `idx`-th `[[name]]` header, if the file has one.
    fn header(&self, name: &str, idx: usize) -> Option<usize> {
        self.headers.get(name).and_then(|v| v.get(idx)).copied()
    }

    fn err(
        &self,
        at: Option<usize>,
        field: impl Into<String>,
        msg: impl Into<String>,
    ) -> InputError {
        let e = InputError::new(msg).field(field);
        match at {
            Some(o) => e.at_offset(self.src, o),
            None => e,
        }
    }

    fn resolve(&self, raw: RawCluster) -> Result<Cluster, InputError> {
        let name = match &raw.name {
            Some(v) => self.string(v, "name")?,
            None => {
                return Err(self
                    .err(Some(0), "name", "the cluster has no `name`")
                    .hint(Some(
                        "add a line like `name = \"my-cluster\"` at the top".into(),
                    )))
            }
        };
        if name.trim().is_empty() {
            let at = raw.name.as_ref().map(|v| v.span().start);
            return Err(self.err(at, "name", "the cluster name is empty"));
        }
        let intra_latency = match &raw.intra_node_latency {
            Some(v) => {
                self.quantity::<Seconds>(v, "intra_node_latency", units::SECONDS_EXPECTED, "us")?
            }
            None => default_intra_node_latency(),
        };
        let inter_latency = match &raw.inter_node_latency {
            Some(v) => {
                self.quantity::<Seconds>(v, "inter_node_latency", units::SECONDS_EXPECTED, "us")?
            }
            None => default_inter_node_latency(),
        };

        if raw.node_group.is_empty() {
            return Err(self
                .err(None, "node_group", "the cluster has no nodes")
                .hint(Some(
                    "add a `[[node_group]]` table with `gpu`, `gpus_per_node` and `nodes`".into(),
                )));
        }
        let mut groups = Vec::with_capacity(raw.node_group.len());
        for (i, g) in raw.node_group.iter().enumerate() {
            groups.push(self.group(i, g)?);
        }
        let total_nodes: u64 = groups.iter().map(|g| g.nodes as u64).sum();
        if total_nodes > MAX_NODES {
            let last = groups.last().and_then(|g| g.at);
            return Err(self.err(
                last,
                "node_group",
                format!("{total_nodes} nodes, more than the {MAX_NODES} hetplan accepts"),
            ));
        }
        let total_gpus: u64 = groups
            .iter()
            .map(|g| g.nodes as u64 * g.gpus_per_node as u64)
            .sum();
        if total_gpus > MAX_GPUS {
            let last = groups.last().and_then(|g| g.at);
            return Err(self.err(
                last,
                "node_group",
                format!("{total_gpus} GPUs, more than the {MAX_GPUS} hetplan accepts"),
            ));
        }

        // Per-GPU-type overrides, applied before the intra-node defaults are taken.
        let overrides = self.overrides(&raw.gpu_overrides, &groups)?;
        for g in &mut groups {
            if let Some(spec) = overrides.get(&g.gpu.name) {
                g.gpu = spec.clone();
            }
        }

        // GPU types in order of first appearance.
        let mut gpu_types: Vec<GpuSpec> = Vec::new();
        let mut nodes = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            let type_id = match gpu_types.iter().position(|t| t.name == g.gpu.name) {
                Some(t) => t,
                None => {
                    gpu_types.push(g.gpu.clone());
                    gpu_types.len() - 1
                }
            };
            let inter = match g.inter {
                Some(bw) => bw,
                None if total_nodes > 1 => return Err(self.missing_network(i, g)),
                // A single node never talks to another: the value is never used. The GPU's
                // host link stands in (a NIC sits behind the same PCIe fabric).
                None => g.gpu.pcie_bandwidth,
            };
            let intra = g
                .intra
                .unwrap_or_else(|| g.gpu.default_intra_node_bandwidth());
            for _ in 0..g.nodes {
                nodes.push(Node {
                    gpu_type: GpuTypeId(type_id),
                    num_gpus: g.gpus_per_node,
                    intra_bandwidth: intra,
                    inter_bandwidth: inter,
                    host_memory: g
                        .host
                        .unwrap_or_else(|| super::default_host_memory(g.gpus_per_node)),
                    group: i,
                });
            }
        }

        let pair_bandwidth = self.pairs(&raw.bandwidth, nodes.len())?;
        Ok(Cluster {
            name,
            gpu_types,
            nodes,
            pair_bandwidth,
            intra_latency,
            inter_latency,
        })
    }

    fn missing_network(&self, i: usize, g: &Group) -> InputError {
        self.err(
            g.at.or(Some(g.gpu_at.start)),
            format!("node_group[{i}].inter_node_bandwidth"),
            "missing `inter_node_bandwidth`: each node's network bandwidth is required when \
             the cluster has more than one node",
        )
        .hint(Some(
            "add the node's network bandwidth, all NICs together, per direction, e.g. \
             `inter_node_bandwidth = \"100 Gbps\"`"
                .into(),
        ))
    }

    fn group(&self, i: usize, g: &RawGroup) -> Result<Group, InputError> {
        let path = |k: &str| format!("node_group[{i}].{k}");
        let at = self.header("node_group", i);
        let missing = |k: &str, example: &str| {
            self.err(at, path(k), format!("missing `{k}`"))
                .hint(Some(format!(
                    "add `{k} = {example}` to this `[[node_group]]`"
                )))
        };
        let gpu_v = g
            .gpu
            .as_ref()
            .ok_or_else(|| missing("gpu", "\"a100-sxm4-80gb\""))?;
        let gpu_name = self.string(gpu_v, &path("gpu"))?;
        let gpu = gpu::resolve(&gpu_name).map_err(|e| {
            self.err(
                Some(gpu_v.span().start),
                path("gpu"),
                format!("unknown GPU `{gpu_name}`"),
            )
            .hint(Some(did_you_mean(e.hint).unwrap_or_else(|| {
                "run `hetplan gpus` to list the GPU catalog".into()
            })))
        })?;
        push_note(&mut self.notes.borrow_mut(), gpu.note);
        let gpu = gpu.spec;
        let gpus_v = g
            .gpus_per_node
            .as_ref()
            .ok_or_else(|| missing("gpus_per_node", "8"))?;
        let gpus_per_node = self.count(gpus_v, &path("gpus_per_node"), MAX_GPUS_PER_NODE)?;
        let nodes_v = g.nodes.as_ref().ok_or_else(|| missing("nodes", "1"))?;
        let nodes = self.count(nodes_v, &path("nodes"), MAX_NODES)?;
        let intra = g
            .intra_node_bandwidth
            .as_ref()
            .map(|v| {
                self.quantity::<BytesPerSec>(
                    v,
                    &path("intra_node_bandwidth"),
                    units::BANDWIDTH_EXPECTED,
                    "GB/s",
                )
            })
            .transpose()?;
        let inter = g
            .inter_node_bandwidth
            .as_ref()
            .map(|v| {
                self.quantity::<BytesPerSec>(
                    v,
                    &path("inter_node_bandwidth"),
                    units::BANDWIDTH_EXPECTED,
                    "Gbps",
                )
            })
            .transpose()?;
        let host = g
            .host_memory
            .as_ref()
            .map(|v| self.quantity::<Bytes>(v, &path("host_memory"), units::BYTES_EXPECTED, "GiB"))
            .transpose()?;
        Ok(Group {
            gpu,
            gpu_at: gpu_v.span(),
            gpus_per_node,
            nodes,
            intra,
            inter,
            host,
            at,
        })
    }

    /// Resolves `[gpu_overrides."NAME"]` tables into overridden specs keyed by canonical name.
    fn overrides(
        &self,
        raw: &BTreeMap<Spanned<String>, RawOverride>,
        groups: &[Group],
    ) -> Result<BTreeMap<String, GpuSpec>, InputError> {
        // File order, so that the first error in the file is the one reported.
        let mut entries: Vec<(&Spanned<String>, &RawOverride)> = raw.iter().collect();
        entries.sort_by_key(|(k, _)| k.span().start);
        let in_cluster: Vec<&str> = groups.iter().map(|g| g.gpu.name.as_str()).collect();
        let mut out: BTreeMap<String, GpuSpec> = BTreeMap::new();
        let mut first_key: BTreeMap<String, String> = BTreeMap::new();
        for (key, ov) in entries {
            let written = key.get_ref().as_str();
            let path = format!("gpu_overrides.\"{written}\"");
            let at = Some(key.span().start);
            let base = match gpu::resolve(written) {
                Ok(g) => {
                    push_note(&mut self.notes.borrow_mut(), g.note);
                    g.spec
                }
                Err(e) => {
                    let near = names::nearest(written, in_cluster.iter().copied()).or(e.hint);
                    return Err(self
                        .err(at, path, format!("unknown GPU `{written}`"))
                        .hint(Some(
                            did_you_mean(near).unwrap_or_else(|| cluster_gpus_hint(&in_cluster)),
                        )));
                }
            };
            let Some(group) = groups.iter().find(|g| g.gpu.name == base.name) else {
                let near = names::nearest(written, in_cluster.iter().copied());
                return Err(self
                    .err(
                        at,
                        path,
                        format!(
                            "override for GPU `{}`, which no `[[node_group]]` of this cluster uses",
                            base.name
                        ),
                    )
                    .hint(Some(
                        did_you_mean(near).unwrap_or_else(|| cluster_gpus_hint(&in_cluster)),
                    )));
            };
            if let Some(prev) = first_key.get(&base.name) {
                return Err(self
                    .err(
                        at,
                        path,
                        format!(
                            "GPU `{}` is overridden twice, as `{prev}` and as `{written}`",
                            base.name
                        ),
                    )
                    .hint(Some("merge the two tables into one".into())));
            }
            first_key.insert(base.name.clone(), written.to_string());
            let mut spec = group.gpu.clone();
            let mut changed: Vec<&str> = Vec::new();
            let f = |k: &str| format!("{path}.{k}");
            if let Some(v) = &ov.memory {
                spec.memory =
                    self.quantity::<Bytes>(v, &f("memory"), units::BYTES_EXPECTED, "GiB")?;
                changed.push("memory");
            }
            if let Some(v) = &ov.peak_tensor {
                spec.peak_tensor = self.quantity::<FlopPerSec>(
                    v,
                    &f("peak_tensor"),
                    units::FLOPS_EXPECTED,
                    "TFLOP/s",
                )?;
                changed.push("peak_tensor");
            }
            if let Some(v) = &ov.peak_fp32 {
                spec.peak_fp32 = self.quantity::<FlopPerSec>(
                    v,
                    &f("peak_fp32"),
                    units::FLOPS_EXPECTED,
                    "TFLOP/s",
                )?;
                changed.push("peak_fp32");
            }
            if let Some(v) = &ov.hbm_bandwidth {
                spec.hbm_bandwidth = self.quantity::<BytesPerSec>(
                    v,
                    &f("hbm_bandwidth"),
                    units::BANDWIDTH_EXPECTED,
                    "GB/s",
                )?;
                changed.push("hbm_bandwidth");
            }
            if let Some(v) = &ov.nvlink_bandwidth {
                spec.nvlink_bandwidth = Some(self.quantity::<BytesPerSec>(
                    v,
                    &f("nvlink_bandwidth"),
                    units::BANDWIDTH_EXPECTED,
                    "GB/s",
                )?);
                changed.push("nvlink_bandwidth");
            }
            if let Some(v) = &ov.pcie_bandwidth {
                spec.pcie_bandwidth = self.quantity::<BytesPerSec>(
                    v,
                    &f("pcie_bandwidth"),
                    units::BANDWIDTH_EXPECTED,
                    "GB/s",
                )?;
                changed.push("pcie_bandwidth");
            }
            // Last: the cap scales the (possibly overridden) peaks.
            if let Some(v) = &ov.power_limit {
                let at = Some(v.span().start);
                let field = f("power_limit");
                let watts = match v.get_ref() {
                    Value::String(t) => t
                        .trim()
                        .strip_suffix('W')
                        .and_then(|n| n.trim().parse::<f64>().ok()),
                    _ => None,
                }
                .ok_or_else(|| {
                    self.err(
                        at,
                        field.clone(),
                        "expected a power in watts, e.g. \"500 W\"",
                    )
                    .hint(Some("write `power_limit = \"500 W\"`".into()))
                })?;
                spec = gpu::power_capped(&spec, watts).map_err(|e| {
                    self.err(at, field.clone(), e.to_string()).hint(Some(
                        "set `peak_tensor` and `peak_fp32` to the capped rates instead".into(),
                    ))
                })?;
                changed.push("power_limit");
            }
            if !changed.is_empty() {
                spec.source = format!(
                    "{}; overridden by the cluster file: {}",
                    spec.source,
                    changed.join(", ")
                );
            }
            out.insert(base.name.clone(), spec);
        }
        Ok(out)
    }

    fn pairs(
        &self,
        raw: &[RawPair],
        num_nodes: usize,
    ) -> Result<BTreeMap<(u32, u32), BytesPerSec>, InputError> {
        let mut out = BTreeMap::new();
        let mut first_at: BTreeMap<(u32, u32), usize> = BTreeMap::new();
        for (i, p) in raw.iter().enumerate() {
            let path = |k: &str| format!("bandwidth[{i}].{k}");
            let at = self.header("bandwidth", i);
            let missing = |k: &str, example: &str| {
                self.err(at, path(k), format!("missing `{k}`"))
                    .hint(Some(format!(
                        "add `{k} = {example}` to this `[[bandwidth]]`"
                    )))
            };
            let nodes_v = p.nodes.as_ref().ok_or_else(|| missing("nodes", "[0, 1]"))?;
            let bw_v = p
                .bandwidth
                .as_ref()
                .ok_or_else(|| missing("bandwidth", "\"10 Gbps\""))?;
            let nodes_at = Some(nodes_v.span().start);
            let bad_shape = || {
                self.err(nodes_at, path("nodes"), "expected a pair of node indices")
                    .hint(Some("write e.g. `nodes = [0, 2]`".into()))
            };
            let Value::Array(items) = nodes_v.get_ref() else {
                return Err(bad_shape());
            };
            if items.len() != 2 {
                return Err(bad_shape());
            }
            let mut idx = [0u32; 2];
            for (k, item) in items.iter().enumerate() {
                let Value::Integer(n) = item else {
                    return Err(bad_shape());
                };
                if *n < 0 || *n as u64 >= num_nodes as u64 {
                    return Err(self
                        .err(
                            nodes_at,
                            path("nodes"),
                            format!("no node {n} in this cluster"),
                        )
                        .hint(Some(format!(
                            "the cluster has {num_nodes} node{}, numbered 0 to {} in file order, \
                             the first `[[node_group]]`'s nodes first",
                            if num_nodes == 1 { "" } else { "s" },
                            num_nodes - 1
                        ))));
                }
                idx[k] = *n as u32;
            }
            if idx[0] == idx[1] {
                return Err(self
                    .err(
                        nodes_at,
                        path("nodes"),
                        format!("a bandwidth override between node {} and itself", idx[0]),
                    )
                    .hint(Some(
                        "inside a node, set `intra_node_bandwidth` on its `[[node_group]]`".into(),
                    )));
            }
            let key = (idx[0].min(idx[1]), idx[0].max(idx[1]));
            if let Some(prev) = first_at.get(&key) {
                let (l, _) = crate::error::line_col(self.src, *prev);
                return Err(self
                    .err(
                        nodes_at,
                        path("nodes"),
                        format!(
                            "the bandwidth between nodes {} and {} is already set on line {l}",
                            key.0, key.1
                        ),
                    )
                    .hint(Some("keep one `[[bandwidth]]` per node pair".into())));
            }
            first_at.insert(key, nodes_v.span().start);
            let bw = self.quantity::<BytesPerSec>(
                bw_v,
                &path("bandwidth"),
                units::BANDWIDTH_EXPECTED,
                "Gbps",
            )?;
            out.insert(key, bw);
        }
        Ok(out)
    }

    // ------------------------------------------------------------------------- leaves

    fn string(&self, v: &Spanned<Value>, field: &str) -> Result<String, InputError> {
        match v.get_ref() {
            Value::String(s) => Ok(s.clone()),
            other => Err(self
                .err(
                    Some(v.span().start),
                    field,
                    format!("expected a string, found {}", describe(other)),
                )
                .hint(Some(format!("quote it: `{} = \"...\"`", last_key(field))))),
        }
    }

    /// A whole number in `1..=max` (`max` ≤ `u32::MAX`).
    fn count(&self, v: &Spanned<Value>, field: &str, max: u64) -> Result<u32, InputError> {
        let at = Some(v.span().start);
        let key = last_key(field);
        match v.get_ref() {
            Value::Integer(n) => parse::whole(Num::Int(*n as i128), 1, max.min(u32::MAX as u64))
                .map(|n| n as u32)
                .map_err(|e| self.err(at, field, format!("`{key}` {e}"))),
            Value::String(s) => Err(self
                .err(
                    at,
                    field,
                    format!("expected a whole number, found the string \"{s}\""),
                )
                .hint(Some(format!(
                    "write it without quotes: `{key} = {}`",
                    s.trim()
                )))),
            other => Err(self.err(
                at,
                field,
                format!("expected a whole number, found {}", describe(other)),
            )),
        }
    }

    /// A quantity written as a string with its unit. `unit` is the unit suggested when it is
    /// missing (e.g. `Gbps` for networks, `GB/s` for GPU links).
    fn quantity<T: FromStr<Err = UnitError>>(
        &self,
        v: &Spanned<Value>,
        field: &str,
        expected: &'static str,
        unit: &str,
    ) -> Result<T, InputError> {
        let at = Some(v.span().start);
        let key = last_key(field);
        let bare = |text: String| {
            let e = UnitError::MissingUnit {
                text: text.clone(),
                expected,
            };
            self.err(at, field, e.to_string())
                .hint(Some(format!("write `{key} = \"{text} {unit}\"`")))
        };
        match v.get_ref() {
            Value::String(s) => s.parse::<T>().map_err(|e| {
                let hint = match &e {
                    UnitError::MissingUnit { text, .. } => {
                        Some(format!("write `{key} = \"{} {unit}\"`", text.trim()))
                    }
                    _ => None,
                };
                self.err(at, field, e.to_string()).hint(hint)
            }),
            Value::Integer(n) => Err(bare(n.to_string())),
            Value::Float(x) => Err(bare(x.to_string())),
            other => Err(self
                .err(
                    at,
                    field,
                    format!("expected {expected}, found {}", describe(other)),
                )
                .hint(Some(format!("write `{key} = \"... {unit}\"`")))),
        }
    }
}

fn cluster_gpus_hint(in_cluster: &[&str]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for n in in_cluster {
        if !names.contains(n) {
            names.push(n);
        }
    }
    format!(
        "this cluster's GPUs are {}",
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a number",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

/// `node_group[1].inter_node_bandwidth` → `inter_node_bandwidth`.
fn last_key(field: &str) -> &str {
    field.rsplit('.').next().unwrap_or(field)
}

// ------------------------------------------------------------------ serde/toml errors

/// Turns a toml/serde error into an `InputError`: position from its span, the field path
/// recovered from the source text, and a hint for unknown keys and misused tables.
fn serde_error(src: &str, e: &toml::de::Error) -> InputError {
    let mut err = InputError::from_toml(src, e);
    let path = e.span().and_then(|s| path_at(src, s.start));
    let msg = e.message();
    if let Some(rest) = msg.strip_prefix("unknown field ") {
        // serde: "unknown field `x`, expected one of `a`, `b`" (or "expected `a` or `b`").
        let ticks = backticked(rest);
        if let Some((unknown, known)) = ticks.split_first() {
            err.message = format!("unknown key `{unknown}`");
            let near = names::nearest(unknown, known.iter().map(|s| s.as_str()));
            err.hint = Some(did_you_mean(near).unwrap_or_else(|| {
                format!(
                    "known keys here: {}",
                    known
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }));
        }
    } else if msg.contains("expected a sequence") {
        if let Some(p) = &path {
            let table = p.split(['.', '[']).next().unwrap_or(p);
            if table == "node_group" || table == "bandwidth" {
                err.hint = Some(format!(
                    "`{table}` is a list: write each entry as a `[[{table}]]` table (double brackets)"
                ));
            }
        }
    }
    err.field = path;
    err
}

fn backticked(s: &str) -> Vec<String> {
    s.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, t)| t.to_string())
        .collect()
}

/// The dotted path of the key on the line holding `offset`, from the table headers above it:
/// `node_group[1].inter_node_bandwidth`, `gpu_overrides."t4".memory`. Heuristic (it reads
/// headers and `key =` lines, not the full grammar), used only to label serde's errors.
fn path_at(src: &str, offset: usize) -> Option<String> {
    let mut section: Option<String> = None;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut line_start = 0;
    for line in src.split_inclusive('\n') {
        let line_end = line_start + line.len();
        let t = line.trim();
        let is_target = offset < line_end || line_end == src.len();
        if let Some(h) = t.strip_prefix("[[") {
            let name = h.split("]]").next().unwrap_or("").trim().to_string();
            let n = counts.entry(name.clone()).or_insert(0);
            section = Some(format!("{name}[{n}]"));
            *n += 1;
        } else if let Some(h) = t.strip_prefix('[') {
            let name: String = h
                .split(']')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            section = Some(name);
        } else if is_target {
            let key = t
                .split_once('=')
                .map(|(k, _)| k.trim().trim_matches('"').to_string());
            return match (section, key) {
                (Some(s), Some(k)) if !k.is_empty() => Some(format!("{s}.{k}")),
                (None, Some(k)) if !k.is_empty() => Some(k),
                (s, _) => s,
            };
        }
        if is_target {
            return section;
        }
        line_start = line_end;
    }
    section
}

/// Byte offsets of every `[[name]]` header, by name, in file order (one pass over the text).
fn header_offsets(src: &str) -> BTreeMap<String, Vec<usize>> {
    let mut out: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut line_start = 0;
    for line in src.split_inclusive('\n') {
        let t = line.trim_start();
        if let Some(h) = t.strip_prefix("[[") {
            if let Some(name) = h.split("]]").next().map(str::trim) {
                out.entry(name.to_string())
                    .or_default()
                    .push(line_start + (line.len() - t.len()));
            }
        }
        line_start += line.len();
    }
    out
}

/// A built-in cluster by name (compared after `names::normalize`), or a uniform cluster
/// written as `NxGxGPU[@BANDWIDTH]`:
///
/// * `N` nodes of `G` GPUs each, `GPU` any catalog name or alias: `2x4xgh200-96gb`,
///   `8x8xa100-80gb`, `4x4xV100`;
/// * each node's network bandwidth (per direction) is `PATTERN_DEFAULT_INTER_NODE_GBPS`
///   (200 Gbps) unless a suffix gives it with its unit: `4x8xh100@3200Gbps`, `2x8xa100@25 GB/s`;
/// * intra-node bandwidth and latencies are the defaults (see `uniform_cluster`);
/// * several such groups joined by `+` make a mixed cluster (see `parse_mixed`):
///   `2x8xa100-80gb+4x8xv100-32gb@100Gbps`.
///
/// Unknown names get the nearest built-in name as a hint.
pub fn catalog_cluster(name: &str) -> Result<Cluster, InputError> {
    catalog_cluster_noted(name).map(|(c, _)| c)
}

/// `catalog_cluster`, with a note for each ambiguous GPU name (`4x8xA100`).
pub fn catalog_cluster_noted(name: &str) -> Result<(Cluster, Vec<AliasNote>), InputError> {
    let n = names::normalize(name);
    if let Some((builtin, src)) = BUILTINS.iter().find(|(b, _)| names::normalize(b) == n) {
        return parse_cluster_toml_noted(src).map_err(|mut e| {
            e.message = format!("built-in cluster `{builtin}`: {}", e.message);
            e
        });
    }
    if name.contains('+') {
        return parse_mixed(name);
    }
    if let Some(result) = parse_pattern(name) {
        return result;
    }
    let near = names::nearest(name, BUILTINS.iter().map(|(b, _)| *b));
    Err(InputError::new(format!(
        "unknown cluster `{}`: not a built-in ({}) nor of the form NxGxGPU[@BANDWIDTH][+...]",
        name.trim(),
        catalog_cluster_names().join(", ")
    ))
    .hint(Some(did_you_mean(near).unwrap_or_else(|| {
        "write e.g. `2x8xa100-80gb` or `4x8xh100@3200Gbps`, or give a cluster file".into()
    }))))
}

/// Node groups of the `NxGxGPU` form joined by `+`: `2x8xa100-80gb+4x8xv100-32gb@100Gbps`.
///
/// The network bandwidth is written either once, after the last group, for every node of the
/// cluster (`2x8xa100-80gb+4x8xv100-32gb@100Gbps`), or after each group for its own nodes
/// (`2x8xa100-80gb@400Gbps+4x8xv100-32gb@100Gbps`; two nodes of different groups talk at the
/// slower of their NICs, see `Cluster::node_pair_bandwidth`), or nowhere
/// (`PATTERN_DEFAULT_INTER_NODE_GBPS` for every node). Some groups with and some without one,
/// other than the first way, is an error: it would be a guess which bandwidth was meant.
/// Nodes are numbered in the order written; the same GPU in two groups is one GPU type.
fn parse_mixed(name: &str) -> Result<(Cluster, Vec<AliasNote>), InputError> {
    let full = name.trim();
    let err = |msg: String, hint: &str| {
        InputError::new(format!("cluster `{full}`: {msg}")).hint(Some(hint.to_string()))
    };
    let parts: Vec<&str> = full.split('+').map(str::trim).collect();
    if let Some(i) = parts.iter().position(|p| p.is_empty()) {
        return Err(err(
            format!("node group {} is empty", i + 1),
            "join node groups with single `+` signs: `2x8xa100-80gb+4x8xv100-32gb@100Gbps`",
        ));
    }
    let with_bw: Vec<usize> = (0..parts.len())
        .filter(|i| parts[*i].contains('@'))
        .collect();
    // One bandwidth after the last group: for every group.
    let shared = match with_bw.as_slice() {
        [last] if *last == parts.len() - 1 => parts[*last].split_once('@').map(|(_, b)| b),
        _ => None,
    };
    if shared.is_none() && !with_bw.is_empty() && with_bw.len() != parts.len() {
        let missing = (0..parts.len()).find(|i| !with_bw.contains(i)).unwrap_or(0);
        return Err(err(
            format!(
                "node group `{}` has no network bandwidth, but other groups have one",
                parts[missing]
            ),
            "give one bandwidth after the last group for every node \
             (`2x8xa100-80gb+4x8xv100-32gb@100Gbps`), or one after every group \
             (`2x8xa100-80gb@400Gbps+4x8xv100-32gb@100Gbps`)",
        ));
    }
    let mut gpu_types: Vec<GpuSpec> = Vec::new();
    let mut nodes: Vec<Node> = Vec::new();
    let mut notes: Vec<AliasNote> = Vec::new();
    let mut names_out: Vec<String> = Vec::new();
    let mut total_gpus: u64 = 0;
    for (g, part) in parts.iter().enumerate() {
        let text = match shared {
            Some(bw) => format!("{}@{bw}", part.split_once('@').map_or(*part, |(m, _)| m)),
            None => part.to_string(),
        };
        let (c, part_notes) = match parse_pattern(&text) {
            Some(r) => r.map_err(|e| match e.hint {
                Some(_) => e,
                None => e.hint(Some(format!(
                    "node group {} of `{full}`: write it as nodes x GPUs per node x GPU, e.g. \
                     `2x8xa100-80gb`",
                    g + 1
                ))),
            })?,
            None => {
                return Err(err(
                    format!("node group `{part}` is not of the form NxGxGPU[@BANDWIDTH]"),
                    "write each group as nodes x GPUs per node x GPU, e.g. `2x8xa100-80gb`",
                ))
            }
        };
        for n in part_notes {
            push_note(&mut notes, Some(n));
        }
        let spec = &c.gpu_types[0];
        let type_id = match gpu_types.iter().position(|t| t.name == spec.name) {
            Some(t) => t,
            None => {
                gpu_types.push(spec.clone());
                gpu_types.len() - 1
            }
        };
        total_gpus += c.num_gpus() as u64;
        nodes.extend(c.nodes.into_iter().map(|n| Node {
            gpu_type: GpuTypeId(type_id),
            group: g,
            ..n
        }));
        if nodes.len() as u64 > MAX_NODES || total_gpus > MAX_GPUS {
            return Err(err(
                format!(
                    "{} nodes and {total_gpus} GPUs, more than the {MAX_NODES} nodes or \
                     {MAX_GPUS} GPUs hetplan accepts",
                    nodes.len()
                ),
                "use fewer or smaller node groups",
            ));
        }
        // Each group's own name, without a shared bandwidth (it is written once at the end).
        names_out.push(match shared {
            Some(_) => c.name.split('@').next().unwrap_or(&c.name).to_string(),
            None => c.name,
        });
    }
    let mut name_out = names_out.join("+");
    if let Some(bw) = shared {
        name_out = format!("{name_out}@{}", bw.trim().replace(' ', ""));
    }
    Ok((
        Cluster {
            name: name_out,
            gpu_types,
            nodes,
            pair_bandwidth: BTreeMap::new(),
            intra_latency: default_intra_node_latency(),
            inter_latency: default_inter_node_latency(),
        },
        notes,
    ))
}

/// `NxGxGPU[@BANDWIDTH]`: `None` when `name` does not have that shape at all.
fn parse_pattern(name: &str) -> Option<Result<(Cluster, Vec<AliasNote>), InputError>> {
    let (main, bw_text) = match name.trim().split_once('@') {
        Some((m, b)) => (m, Some(b.trim())),
        None => (name.trim(), None),
    };
    let main = names::normalize(main);
    let mut parts = main.splitn(3, 'x');
    let nodes_text = parts.next()?;
    let gpus_text = parts.next()?;
    let gpu_text = parts.next()?;
    let is_count = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !is_count(nodes_text) || !is_count(gpus_text) || gpu_text.is_empty() {
        return None;
    }
    Some((|| {
        let count = |s: &str, what: &str, max: u64| -> Result<u32, InputError> {
            match parse::whole(Num::Text(s), 1, max) {
                Ok(v) => Ok(v as u32),
                _ => Err(InputError::new(format!(
                    "cluster `{}`: the number of {what} must be between 1 and {max}, found {s}",
                    name.trim()
                ))),
            }
        };
        let nodes = count(nodes_text, "nodes", MAX_NODES)?;
        let gpus_per_node = count(gpus_text, "GPUs per node", MAX_GPUS_PER_NODE)?;
        if nodes as u64 * gpus_per_node as u64 > MAX_GPUS {
            return Err(InputError::new(format!(
                "cluster `{}`: {nodes} × {gpus_per_node} GPUs, more than the {MAX_GPUS} hetplan \
                 accepts",
                name.trim()
            )));
        }
        let resolved = gpu::resolve(gpu_text).map_err(|e| {
            InputError::new(format!(
                "cluster `{}`: unknown GPU `{gpu_text}`",
                name.trim()
            ))
            .hint(Some(did_you_mean(e.hint).unwrap_or_else(|| {
                "run `hetplan gpus` to list the GPU catalog".into()
            })))
        })?;
        let inter = match bw_text {
            None => BytesPerSec::gbps(PATTERN_DEFAULT_INTER_NODE_GBPS),
            Some(t) => parse_bandwidth_lenient(t).map_err(|e| {
                let example = match &e {
                    UnitError::MissingUnit { .. } => format!("{main}@{t}Gbps"),
                    _ => format!("{main}@400Gbps"),
                };
                InputError::new(format!("cluster `{}`: {e}", name.trim())).hint(Some(format!(
                    "write the bandwidth with its unit, e.g. `{example}`"
                )))
            })?,
        };
        let mut c = uniform_cluster(&resolved.spec, nodes, gpus_per_node, inter);
        if let Some(t) = bw_text {
            c.name = format!("{}@{}", c.name, t.replace(' ', ""));
        }
        Ok((c, resolved.note.into_iter().collect()))
    })())
}

/// `BytesPerSec::from_str`, also accepting the lower-case units that `names::normalize`-style
/// typing produces (`3200gbps`, `25gb/s`).
fn parse_bandwidth_lenient(text: &str) -> Result<BytesPerSec, UnitError> {
    match text.parse::<BytesPerSec>() {
        Ok(bw) => Ok(bw),
        Err(e) => {
            const CANONICAL: [&str; 8] = [
                "Tbps", "Gbps", "Mbps", "Kbps", "TB/s", "GB/s", "MB/s", "kB/s",
            ];
            let t = text.trim();
            for unit in CANONICAL {
                // `get`: the split point may fall inside a multi-byte character (`2x8xh100@€xy`).
                let Some(cut) = t.len().checked_sub(unit.len()) else {
                    continue;
                };
                let (Some(number), Some(suffix)) = (t.get(..cut), t.get(cut..)) else {
                    continue;
                };
                if suffix.eq_ignore_ascii_case(unit) {
                    if let Ok(bw) = format!("{number}{unit}").parse::<BytesPerSec>() {
                        return Ok(bw);
                    }
                }
            }
            Err(e)
        }
    }
}

/// `nodes` identical nodes of `gpus_per_node` GPUs each, every node's network at
/// `inter_node_bandwidth` (per direction); intra-node bandwidth is the GPU's default (NVLink,
/// else PCIe) and latencies the defaults of this module. Named `NxGxGPU`.
///
/// # Panics
/// If `nodes` or `gpus_per_node` is zero (callers validate user input first).
pub fn uniform_cluster(
    gpu: &GpuSpec,
    nodes: u32,
    gpus_per_node: u32,
    inter_node_bandwidth: BytesPerSec,
) -> Cluster {
    assert!(
        nodes > 0 && gpus_per_node > 0,
        "uniform_cluster needs at least one node and one GPU per node"
    );
    let node = Node {
        gpu_type: GpuTypeId(0),
        num_gpus: gpus_per_node,
        intra_bandwidth: gpu.default_intra_node_bandwidth(),
        inter_bandwidth: inter_node_bandwidth,
        host_memory: super::default_host_memory(gpus_per_node),
        group: 0,
    };
    Cluster {
        name: format!("{nodes}x{gpus_per_node}x{}", gpu.name),
        gpu_types: vec![gpu.clone()],
        nodes: vec![node; nodes as usize],
        pair_bandwidth: BTreeMap::new(),
        intra_latency: default_intra_node_latency(),
        inter_latency: default_inter_node_latency(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::GpuId;

    /// The example of the format documentation, with every optional part.
    const EXAMPLE: &str = r#"
name = "t4-v100"
intra_node_latency = "5 us"
inter_node_latency = "20 us"

[[node_group]]
gpu = "v100-sxm2-16gb"
gpus_per_node = 4
nodes = 2
intra_node_bandwidth = "300 GB/s"
inter_node_bandwidth = "16 Gbps"

[[node_group]]
gpu = "t4"
gpus_per_node = 2
nodes = 1
inter_node_bandwidth = "16 Gbps"

[gpu_overrides."v100-sxm2-16gb"]
memory = "15 GiB"
peak_tensor = "100 TFLOP/s"
hbm_bandwidth = "800 GB/s"

[[bandwidth]]
nodes = [0, 2]
bandwidth = "10 Gbps"
"#;

    fn parse_err(src: &str) -> InputError {
        parse_cluster_toml(src).expect_err("should be rejected")
    }

    #[test]
    fn the_example_parses() {
        let c = parse_cluster_toml(EXAMPLE).unwrap();
        assert_eq!(c.name, "t4-v100");
        assert_eq!(c.nodes.len(), 3);
        assert_eq!(c.num_gpus(), 10);
        assert_eq!(c.gpu_types.len(), 2);
        assert_eq!(c.gpu_types[0].name, "v100-sxm2-16gb");
        assert_eq!(c.gpu_types[1].name, "t4");
        assert_eq!(c.nodes[0].gpu_type, GpuTypeId(0));
        assert_eq!(c.nodes[1].gpu_type, GpuTypeId(0));
        assert_eq!(c.nodes[2].gpu_type, GpuTypeId(1));
        assert_eq!(c.nodes[2].group, 1);
        assert_eq!(c.nodes[0].intra_bandwidth, BytesPerSec(300e9));
        // T4 without NVLink: PCIe Gen3 by default.
        assert_eq!(c.nodes[2].intra_bandwidth, BytesPerSec(15.75e9));
        assert_eq!(c.nodes[0].inter_bandwidth, BytesPerSec(2e9));
        assert_eq!(c.node_pair_bandwidth(0, 1), BytesPerSec(2e9));
        assert_eq!(c.node_pair_bandwidth(2, 0), BytesPerSec(10e9 / 8.0));
        let a = GpuId { node: 0, local: 0 };
        let b = GpuId { node: 2, local: 1 };
        assert_eq!(c.link_bandwidth(a, b), BytesPerSec(10e9 / 8.0));
        assert!((c.intra_latency.get() - 5e-6).abs() < 1e-15);
        assert!((c.inter_latency.get() - 20e-6).abs() < 1e-15);
    }

    #[test]
    fn a_power_limit_scales_the_peaks_and_bad_ones_are_located() {
        let src = |v: &str| {
            format!(
                "name = \"p\"\n[[node_group]]\ngpu = \"h100\"\ngpus_per_node = 8\nnodes = 1\n\
                 [gpu_overrides.h100]\npower_limit = {v}\n"
            )
        };
        let c = parse_cluster_toml(&src("\"500 W\"")).unwrap();
        let h100 = crate::gpu::lookup("h100").unwrap();
        let f = c.gpu_types[0].peak_tensor.get() / h100.peak_tensor.get();
        assert!((f - (500.0f64 / 700.0).powf(crate::gpu::POWER_CLOCK_EXPONENT)).abs() < 1e-12);
        assert!(c.gpu_types[0].source.contains("capped at 500 W"));
        for (bad, want) in [
            ("\"900 W\"", "not in (0, 700]"),
            ("500", "expected a power"),
        ] {
            let e = parse_cluster_toml(&src(bad)).unwrap_err();
            assert!(e.message.contains(want), "{}", e.message);
            assert_eq!(e.line, Some(7), "{e:?}");
            assert_eq!(
                e.field.as_deref(),
                Some("gpu_overrides.\"h100\".power_limit")
            );
        }
    }

    #[test]
    fn gpu_overrides_are_applied() {
        let c = parse_cluster_toml(EXAMPLE).unwrap();
        let v100 = &c.gpu_types[0];
        assert_eq!(v100.memory, Bytes::gib(15.0));
        assert_eq!(v100.peak_tensor, FlopPerSec::tflops(100.0));
        assert_eq!(v100.hbm_bandwidth, BytesPerSec::gb_s(800.0));
        // Untouched values keep the catalog's.
        assert_eq!(v100.peak_fp32, FlopPerSec::tflops(15.7));
        assert!(v100.source.contains("overridden"));
        assert_eq!(c.gpu(GpuId { node: 1, local: 3 }).memory, Bytes::gib(15.0));
        // The T4 is not overridden.
        assert_eq!(c.gpu_types[1], gpu::lookup("t4").unwrap());
    }

    #[test]
    fn nvlink_override_changes_the_intra_node_default() {
        let src = r#"
name = "x"
[[node_group]]
gpu = "a100"
gpus_per_node = 8
nodes = 1
[gpu_overrides.A100]
nvlink_bandwidth = "100 GB/s"
"#;
        let c = parse_cluster_toml(src).unwrap();
        assert_eq!(c.nodes[0].intra_bandwidth, BytesPerSec::gb_s(100.0));
    }

    #[test]
    fn aliases_resolve_and_single_nodes_need_no_network() {
        let src = r#"
name = "x"
[[node_group]]
gpu = "A100_80GB"
gpus_per_node = 8
nodes = 1
"#;
        let c = parse_cluster_toml(src).unwrap();
        assert_eq!(c.gpu_types[0].name, "a100-sxm4-80gb");
        assert_eq!(c.num_gpus(), 8);
        assert_eq!(c.nodes[0].intra_bandwidth, BytesPerSec::gb_s(300.0));
        // Default latencies.
        assert_eq!(c.intra_latency, default_intra_node_latency());
        assert_eq!(c.inter_latency, default_inter_node_latency());
    }

    #[test]
    fn ambiguous_gpu_names_come_with_a_note_once() {
        let src = r#"
name = "x"
[[node_group]]
gpu = "A100"
gpus_per_node = 8
nodes = 1
inter_node_bandwidth = "100 Gbps"
[[node_group]]
gpu = "a100"
gpus_per_node = 8
nodes = 1
inter_node_bandwidth = "100 Gbps"
[[node_group]]
gpu = "NVIDIA A100-SXM4-80GB"
gpus_per_node = 8
nodes = 1
inter_node_bandwidth = "100 Gbps"
"#;
        let (c, notes) = parse_cluster_toml_noted(src).unwrap();
        assert_eq!(c.gpu_types[0].name, "a100-sxm4-40gb");
        assert_eq!(c.gpu_types[1].name, "a100-sxm4-80gb");
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0].written, "A100");
        assert_eq!(notes[0].chosen, "a100-sxm4-40gb");
        let (_, notes) = catalog_cluster_noted("2x8xV100").unwrap();
        assert_eq!(notes[0].chosen, "v100-sxm2-16gb");
        let (_, notes) = catalog_cluster_noted("2x8xv100-sxm2-32gb").unwrap();
        assert!(notes.is_empty());
        let (_, notes) = catalog_cluster_noted("t4-v100").unwrap();
        assert!(notes.is_empty());
    }

    #[test]
    fn same_gpu_in_two_groups_is_one_type() {
        let src = r#"
name = "x"
[[node_group]]
gpu = "v100"
gpus_per_node = 4
nodes = 1
inter_node_bandwidth = "25 Gbps"
[[node_group]]
gpu = "V100-SXM2-16GB"
gpus_per_node = 8
nodes = 2
inter_node_bandwidth = "100 Gbps"
"#;
        let c = parse_cluster_toml(src).unwrap();
        assert_eq!(c.gpu_types.len(), 1);
        assert!(c.nodes.iter().all(|n| n.gpu_type == GpuTypeId(0)));
        assert_eq!(c.num_gpus(), 20);
        assert_eq!(c.node_pair_bandwidth(0, 1), BytesPerSec::gbps(25.0));
        assert_eq!(c.node_pair_bandwidth(1, 2), BytesPerSec::gbps(100.0));
    }

    #[test]
    fn bare_number_bandwidth_is_rejected_with_the_unit_to_write() {
        let src = "name = \"x\"\n[[node_group]]\ngpu = \"t4\"\ngpus_per_node = 2\nnodes = 2\ninter_node_bandwidth = 16\n";
        let e = parse_err(src);
        assert_eq!((e.line, e.column), (Some(6), Some(24)));
        assert_eq!(
            e.field.as_deref(),
            Some("node_group[0].inter_node_bandwidth")
        );
        assert!(e.message.contains("no unit"), "{e}");
        assert!(e.message.contains("Gbps"), "{e}");
        assert_eq!(
            e.hint.as_deref(),
            Some("write `inter_node_bandwidth = \"16 Gbps\"`")
        );
        // A quoted bare number too.
        let e = parse_err(&src.replace("= 16", "= \"16\""));
        assert_eq!(e.line, Some(6));
        assert!(e.message.contains("no unit"), "{e}");
        assert!(e.hint.unwrap().contains("16 Gbps"));
        // And a bare latency.
        let e = parse_err("name = \"x\"\ninter_node_latency = 20\n[[node_group]]\ngpu = \"t4\"\ngpus_per_node = 2\nnodes = 1\n");
        assert_eq!(e.field.as_deref(), Some("inter_node_latency"));
        assert_eq!(e.line, Some(2));
        assert!(e.hint.unwrap().contains("20 us"));
    }

    #[test]
    fn bad_units_are_rejected() {
        let src = "name = \"x\"\n[[node_group]]\ngpu = \"t4\"\ngpus_per_node = 2\nnodes = 1\nintra_node_bandwidth = \"16 GiG/s\"\n";
        let e = parse_err(src);
        assert_eq!(e.line, Some(6));
        assert!(e.message.contains("unknown unit"), "{e}");
    }

    #[test]
    fn unknown_gpu_gets_a_hint() {
        let src =
            "name = \"x\"\n[[node_group]]\ngpu = \"v100-sxm-16g\"\ngpus_per_node = 2\nnodes = 1\n";
        let e = parse_err(src);
        assert_eq!((e.line, e.column), (Some(3), Some(7)));
        assert_eq!(e.field.as_deref(), Some("node_group[0].gpu"));
        assert!(e.message.contains("unknown GPU `v100-sxm-16g`"));
        assert!(e.hint.unwrap().contains("v100-sxm"));
    }

    #[test]
    fn unknown_key_gets_a_hint() {
        let src = "name = \"x\"\n[[node_group]]\ngpu = \"t4\"\ngpus_per_node = 2\nnodes = 1\nintra_node_bandwith = \"10 GB/s\"\n";
        let e = parse_err(src);
        assert_eq!(e.line, Some(6));
        assert_eq!(e.column, Some(1));
        assert_eq!(
            e.field.as_deref(),
            Some("node_group[0].intra_node_bandwith")
        );
        assert_eq!(e.message, "unknown key `intra_node_bandwith`");
        assert_eq!(
            e.hint.as_deref(),
            Some("did you mean `intra_node_bandwidth`?")
        );
        // At the top level and in an override table too.
        let e = parse_err("name = \"x\"\nnode_groups = 3\n");
        assert_eq!(e.field.as_deref(), Some("node_groups"));
        assert_eq!(e.hint.as_deref(), Some("did you mean `node_group`?"));
        let e = parse_err(&format!(
            "{EXAMPLE}\n[gpu_overrides.t4]\nmemroy = \"15 GiB\"\n"
        ));
        assert_eq!(e.field.as_deref(), Some("gpu_overrides.t4.memroy"));
        assert_eq!(e.hint.as_deref(), Some("did you mean `memory`?"));
    }

    #[test]
    fn single_brackets_for_a_list_get_a_hint() {
        let e =
            parse_err("name = \"x\"\n[node_group]\ngpu = \"t4\"\ngpus_per_node = 2\nnodes = 1\n");
        assert!(e.hint.unwrap().contains("[[node_group]]"), "{}", e.message);
    }

    #[test]
    fn pair_override_is_applied_in_both_orders() {
        let src = format!("{EXAMPLE}\n[[bandwidth]]\nnodes = [1, 0]\nbandwidth = \"1 GB/s\"\n");
        let c = parse_cluster_toml(&src).unwrap();
        assert_eq!(c.node_pair_bandwidth(0, 1), BytesPerSec::gb_s(1.0));
        assert_eq!(c.node_pair_bandwidth(1, 0), BytesPerSec::gb_s(1.0));
        assert_eq!(c.node_pair_bandwidth(1, 2), BytesPerSec::gbps(16.0));
        assert_eq!(c.pair_bandwidth.len(), 2);
    }

    #[test]
    fn bad_pair_overrides_are_rejected() {
        let e = parse_err(&EXAMPLE.replace("nodes = [0, 2]", "nodes = [0, 3]"));
        assert_eq!(e.field.as_deref(), Some("bandwidth[0].nodes"));
        assert!(e.message.contains("no node 3"), "{e}");
        assert!(e.hint.unwrap().contains("0 to 2"));
        let e = parse_err(&EXAMPLE.replace("nodes = [0, 2]", "nodes = [2, 2]"));
        assert!(e.message.contains("itself"), "{e}");
        let e = parse_err(&EXAMPLE.replace("nodes = [0, 2]", "nodes = [0]"));
        assert!(e.message.contains("pair"), "{e}");
        let dup = format!("{EXAMPLE}\n[[bandwidth]]\nnodes = [2, 0]\nbandwidth = \"1 Gbps\"\n");
        let e = parse_err(&dup);
        assert_eq!(e.field.as_deref(), Some("bandwidth[1].nodes"));
        assert!(e.message.contains("already set on line"), "{e}");
    }

    #[test]
    fn bad_overrides_are_rejected() {
        let e = parse_err(
            &EXAMPLE.replace("[gpu_overrides.\"v100-sxm2-16gb\"]", "[gpu_overrides.a100]"),
        );
        assert!(e.message.contains("no `[[node_group]]`"), "{e}");
        assert!(e.hint.unwrap().contains("v100-sxm2-16gb"));
        let e = parse_err(
            &EXAMPLE.replace("[gpu_overrides.\"v100-sxm2-16gb\"]", "[gpu_overrides.v10]"),
        );
        assert!(e.message.contains("unknown GPU"), "{e}");
        let twice = format!("{EXAMPLE}\n[gpu_overrides.V100]\nmemory = \"16 GiB\"\n");
        let e = parse_err(&twice);
        assert!(e.message.contains("twice"), "{e}");
        let e = parse_err(&EXAMPLE.replace("memory = \"15 GiB\"", "memory = 15"));
        assert_eq!(
            e.field.as_deref(),
            Some("gpu_overrides.\"v100-sxm2-16gb\".memory")
        );
        assert!(e.hint.unwrap().contains("15 GiB"));
    }

    #[test]
    fn counts_and_structure_are_checked() {
        let base = "name = \"x\"\n[[node_group]]\ngpu = \"t4\"\ngpus_per_node = 2\nnodes = 1\n";
        let e = parse_err(&base.replace("nodes = 1", "nodes = 0"));
        assert_eq!(e.field.as_deref(), Some("node_group[0].nodes"));
        assert!(e.message.contains("at least 1"));
        let e = parse_err(&base.replace("gpus_per_node = 2", "gpus_per_node = 0"));
        assert_eq!(e.field.as_deref(), Some("node_group[0].gpus_per_node"));
        let e = parse_err(&base.replace("nodes = 1", "nodes = \"2\""));
        assert!(e.hint.unwrap().contains("nodes = 2"));
        let e = parse_err(&base.replace("gpus_per_node = 2\n", ""));
        assert_eq!(e.field.as_deref(), Some("node_group[0].gpus_per_node"));
        assert_eq!(e.line, Some(2));
        let e = parse_err("name = \"x\"\n");
        assert!(e.message.contains("no nodes"));
        let e = parse_err(&base.replace("name = \"x\"", ""));
        assert_eq!(e.field.as_deref(), Some("name"));
        // Two nodes need a network bandwidth.
        let e = parse_err(&base.replace("nodes = 1", "nodes = 2"));
        assert_eq!(
            e.field.as_deref(),
            Some("node_group[0].inter_node_bandwidth")
        );
        assert_eq!(e.line, Some(2));
        assert!(e.hint.unwrap().contains("Gbps"));
    }

    #[test]
    fn syntax_errors_carry_a_position() {
        let e = parse_err("name = \"x\"\n[[node_group]]\ngpu = \"t4\n");
        assert_eq!(e.line, Some(3));
    }

    #[test]
    fn every_builtin_parses_under_its_own_name() {
        for name in catalog_cluster_names() {
            let c = catalog_cluster(name).unwrap();
            assert_eq!(c.name, name);
            assert!(c.num_gpus() > 0);
        }
        let c = catalog_cluster("T4_V100").unwrap();
        assert_eq!((c.nodes.len(), c.num_gpus()), (3, 10));
        assert_eq!(c.node_pair_bandwidth(0, 2), BytesPerSec::gbps(16.0));
        let c = catalog_cluster("amp-hetero").unwrap();
        assert_eq!((c.nodes.len(), c.num_gpus()), (4, 16));
        assert_eq!(c.node_pair_bandwidth(0, 3), BytesPerSec::gbps(10.0));
        let c = catalog_cluster("a100-80gb-8x8").unwrap();
        assert_eq!(c.num_gpus(), 64);
        assert_eq!(c.node_pair_bandwidth(0, 7), BytesPerSec::gbps(1600.0));
        assert_eq!(catalog_cluster("h100-4x8").unwrap().num_gpus(), 32);
        assert_eq!(
            catalog_cluster("l4-x4").unwrap().nodes[0].intra_bandwidth,
            BytesPerSec::gb_s(31.5)
        );
    }

    #[test]
    fn unknown_builtin_gets_a_hint() {
        let e = catalog_cluster("dgx-h10").unwrap_err();
        assert_eq!(e.hint.as_deref(), Some("did you mean `dgx-h100`?"));
        assert!(e.message.contains("NxGxGPU"));
    }

    #[test]
    fn pattern_names_resolve() {
        let c = catalog_cluster("2x4xgh200-96gb").unwrap();
        assert_eq!(c.name, "2x4xgh200-96gb");
        assert_eq!((c.nodes.len(), c.num_gpus()), (2, 8));
        assert_eq!(c.gpu_types[0].name, "gh200-96gb");
        assert_eq!(c.node_pair_bandwidth(0, 1), BytesPerSec::gbps(200.0));
        let c = catalog_cluster("4x8xH100@3200Gbps").unwrap();
        assert_eq!(c.gpu_types[0].name, "h100-sxm5-80gb");
        assert_eq!(c.num_gpus(), 32);
        assert_eq!(c.node_pair_bandwidth(1, 3), BytesPerSec::gbps(3200.0));
        assert_eq!(c.nodes[0].intra_bandwidth, BytesPerSec::gb_s(450.0));
        let c = catalog_cluster("8x8xa100-80gb@3200gbps").unwrap();
        assert_eq!(c.node_pair_bandwidth(0, 1), BytesPerSec::gbps(3200.0));
        let c = catalog_cluster("2x8xmi300x@50 GB/s").unwrap();
        assert_eq!(c.node_pair_bandwidth(0, 1), BytesPerSec::gb_s(50.0));
        let c = catalog_cluster("2x4x3090").unwrap();
        assert_eq!(c.gpu_types[0].name, "rtx-3090");

        let e = catalog_cluster("2x4xh10").unwrap_err();
        assert!(e.message.contains("unknown GPU"), "{e}");
        assert!(e.hint.is_some());
        let e = catalog_cluster("0x8xh100").unwrap_err();
        assert!(e.message.contains("between 1 and"), "{e}");
        let e = catalog_cluster("2x8xh100@fast").unwrap_err();
        assert!(e.message.contains("fast"), "{e}");
        let e = catalog_cluster("2x8xh100@400").unwrap_err();
        assert!(e.message.contains("no unit"), "{e}");
    }

    /// Regression: `2x8xh100@€xy` panicked slicing inside the `€`.
    #[test]
    fn multi_byte_bandwidth_suffixes_are_errors() {
        for name in [
            "2x8xh100@€xy",
            "2x8xh100@€",
            "2x8xh100@1€bps",
            "2x8xh100@ü",
            "2x8xh100@😀😀",
            "2x8xh100@100 Gbpß",
            "2x8x€",
            "€x8xh100",
        ] {
            assert!(catalog_cluster(name).is_err(), "{name}");
        }
        let e = catalog_cluster("2x8xh100@1e308 TB/s").unwrap_err();
        assert!(e.message.contains("out of range"), "{e}");
    }

    #[test]
    fn sizes_beyond_the_limits_are_errors() {
        let e = catalog_cluster("100000x1024xh100").unwrap_err();
        assert!(e.message.contains("more than"), "{e}");
        assert!(catalog_cluster("99999999999999999999x8xh100").is_err());
        let base = "name = \"x\"\n[[node_group]]\ngpu = \"t4\"\ngpus_per_node = 2\nnodes = 1\n";
        for (from, to, field) in [
            (
                "nodes = 1",
                "nodes = 9223372036854775807",
                "node_group[0].nodes",
            ),
            (
                "nodes = 1",
                "nodes = -9223372036854775808",
                "node_group[0].nodes",
            ),
            (
                "gpus_per_node = 2",
                "gpus_per_node = 1025",
                "node_group[0].gpus_per_node",
            ),
            (
                "nodes = 1",
                "nodes = 2000\ninter_node_bandwidth = \"1e308 TB/s\"",
                "node_group[0].inter_node_bandwidth",
            ),
        ] {
            let e = parse_err(&base.replace(from, to));
            assert_eq!(e.field.as_deref(), Some(field), "{to}: {e}");
            assert!(e.line.is_some(), "{to}: {e}");
        }
        let e = parse_err(&base.replace(
            "gpus_per_node = 2\nnodes = 1",
            "gpus_per_node = 1024\nnodes = 2000\ninter_node_bandwidth = \"1 Gbps\"",
        ));
        assert_eq!(e.field.as_deref(), Some("node_group"));
        assert!(e.message.contains("2048000 GPUs"), "{e}");
    }

    #[test]
    fn mixed_clusters_join_node_groups_with_plus() {
        // One bandwidth at the end: every node.
        let c = catalog_cluster("2x8xa100-80gb+4x8xv100-32gb@100Gbps").unwrap();
        assert_eq!(c.name, "2x8xa100-sxm4-80gb+4x8xv100-sxm2-32gb@100Gbps");
        assert_eq!((c.nodes.len(), c.num_gpus()), (6, 48));
        assert_eq!(c.gpu_types.len(), 2);
        assert_eq!(c.nodes[1].gpu_type, GpuTypeId(0));
        assert_eq!(c.nodes[2].gpu_type, GpuTypeId(1));
        assert_eq!((c.nodes[1].group, c.nodes[2].group), (0, 1));
        assert!(c
            .nodes
            .iter()
            .all(|n| n.inter_bandwidth == BytesPerSec::gbps(100.0)));
        // Intra-node links are each GPU's own.
        assert_eq!(c.nodes[0].intra_bandwidth, BytesPerSec::gb_s(300.0));
        assert_eq!(c.nodes[5].intra_bandwidth, BytesPerSec::gb_s(150.0));
        // One per group: each group's nodes; between groups the slower NIC.
        let c = catalog_cluster("1x8xh100@400Gbps + 2x4xt4@25 GB/s").unwrap();
        assert_eq!(c.nodes[0].inter_bandwidth, BytesPerSec::gbps(400.0));
        assert_eq!(c.nodes[1].inter_bandwidth, BytesPerSec::gb_s(25.0));
        assert_eq!(c.node_pair_bandwidth(0, 1), BytesPerSec::gb_s(25.0));
        // None: the default; the same GPU twice is one type.
        let c = catalog_cluster("1x8xt4+2x4xT4").unwrap();
        assert_eq!(c.gpu_types.len(), 1);
        assert_eq!(c.node_pair_bandwidth(0, 2), BytesPerSec::gbps(200.0));
        // Notes from every group.
        let (_, notes) = catalog_cluster_noted("1x8xA100+1x8xV100").unwrap();
        assert_eq!(notes.len(), 2);
    }

    #[test]
    fn malformed_mixed_clusters_are_errors() {
        for (name, what) in [
            ("2x8xa100+", "node group 2 is empty"),
            ("+2x8xa100", "node group 1 is empty"),
            ("2x8xa100++1x8xt4", "is empty"),
            ("2x8xa100@100Gbps+1x8xt4", "has no network bandwidth"),
            (
                "2x8xa100@100Gbps+1x8xt4+1x8xt4@1Gbps",
                "has no network bandwidth",
            ),
            ("2x8xa100+dgx-h100", "not of the form"),
            ("2x8xa100+1x8xh10", "unknown GPU"),
            ("2x8xa100+1x8xt4@fast", "fast"),
            ("2x8xa100+0x8xt4", "between 1 and"),
            ("60000x8xa100+60000x8xt4", "more than"),
        ] {
            let e = catalog_cluster(name).unwrap_err();
            assert!(e.message.contains(what), "{name}: {e}");
            assert!(e.hint.is_some(), "{name}: {e}");
        }
    }

    #[test]
    fn uniform_cluster_is_uniform() {
        let g = gpu::lookup("t4").unwrap();
        let c = uniform_cluster(&g, 3, 4, BytesPerSec::gbps(50.0));
        assert_eq!(c.name, "3x4xt4");
        assert_eq!(c.num_gpus(), 12);
        assert!(c
            .nodes
            .iter()
            .all(|n| n.intra_bandwidth == g.pcie_bandwidth));
        assert_eq!(c.node_pair_bandwidth(0, 2), BytesPerSec::gbps(50.0));
    }

    #[test]
    fn paths_come_from_the_headers_above() {
        let src = "a = 1\n[[g]]\nx = 1\n[[g]]\n y = 2\n[t.\"q\"]\nz = 3\n";
        assert_eq!(path_at(src, 0).as_deref(), Some("a"));
        assert_eq!(path_at(src, 14).as_deref(), Some("g[0].x"));
        assert_eq!(
            path_at(src, src.find("y").unwrap()).as_deref(),
            Some("g[1].y")
        );
        assert_eq!(
            path_at(src, src.find("z").unwrap()).as_deref(),
            Some("t.\"q\".z")
        );
        assert_eq!(header_offsets(src)["g"][1], src.find("[[g]]\n y").unwrap());
    }
}
