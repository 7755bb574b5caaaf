//! The built-in clusters: published set-ups known by name (`hetplan clusters`), each written
//! in the cluster TOML format (see `spec`) with its source.

/// hetplan's running example: two nodes of four V100-SXM2-16GB (NVLink inside the node) and one
/// node of two T4, every node on a 16 Gbps network. Intra-node bandwidths are the catalog
/// defaults (V100 NVLink 150 GB/s per direction, T4 PCIe Gen3).
const T4_V100: &str = r#"
name = "t4-v100"

[[node_group]]
gpu = "v100-sxm2-16gb"
gpus_per_node = 4
nodes = 2
inter_node_bandwidth = "16 Gbps"

[[node_group]]
gpu = "t4"
gpus_per_node = 2
nodes = 1
inter_node_bandwidth = "16 Gbps"
"#;

/// AMP (Li et al., "AMP: Automatically Finding Model Parallel Strategies with Heterogeneity
/// Awareness", NeurIPS 2022) §4.3, heterogeneous cluster: three AWS p3.8xlarge-like nodes of
/// four V100-16GB joined by NVLink and one g4dn.12xlarge node of four T4, 10 Gbps between nodes
/// (p3.8xlarge's network). AMP states 50 Gbps intra-node (PCIe) bandwidth for the T4 nodes;
/// the V100 nodes use the catalog's NVLink value.
const AMP_HETERO: &str = r#"
name = "amp-hetero"

[[node_group]]
gpu = "v100-sxm2-16gb"
gpus_per_node = 4
nodes = 3
inter_node_bandwidth = "10 Gbps"

[[node_group]]
gpu = "t4"
gpus_per_node = 4
nodes = 1
intra_node_bandwidth = "50 Gbps"
inter_node_bandwidth = "10 Gbps"
"#;

/// AMP (NeurIPS 2022), homogeneous cluster: four AWS g4dn.12xlarge nodes of four T4. The paper
/// states "50 Gbps PCIe connection intra-node bandwidth, and 50 Gbps inter-node bandwidth"
/// (50 Gbps is also AWS's listed network bandwidth of g4dn.12xlarge); we use both as stated.
const AMP_T4: &str = r#"
name = "amp-t4"

[[node_group]]
gpu = "t4"
gpus_per_node = 4
nodes = 4
intra_node_bandwidth = "50 Gbps"
inter_node_bandwidth = "50 Gbps"
"#;

/// NVIDIA DGX A100 (640 GB) datasheet (2020): eight A100-80GB SXM4 on NVSwitch, eight
/// single-port 200 Gb/s HDR InfiniBand ConnectX-6 NICs for compute traffic = 1600 Gbps.
const DGX_A100_80GB: &str = r#"
name = "dgx-a100-80gb"

[[node_group]]
gpu = "a100-sxm4-80gb"
gpus_per_node = 8
nodes = 1
inter_node_bandwidth = "1600 Gbps"
"#;

/// The llm-foundry (MosaicML) throughput-table cluster used for calibration: 8 nodes of
/// 8 A100-80GB SXM4, nodes joined by 1600 Gbps RoCE (llm-foundry
/// `scripts/train/benchmarking/README.md`).
const A100_80GB_8X8: &str = r#"
name = "a100-80gb-8x8"

[[node_group]]
gpu = "a100-sxm4-80gb"
gpus_per_node = 8
nodes = 8
inter_node_bandwidth = "1600 Gbps"
"#;

/// NVIDIA DGX H100 datasheet (2023): eight H100 SXM5 on NVSwitch, eight 400 Gb/s ConnectX-7
/// (NDR InfiniBand) NICs = 3200 Gbps per node.
const DGX_H100: &str = r#"
name = "dgx-h100"

[[node_group]]
gpu = "h100-sxm5-80gb"
gpus_per_node = 8
nodes = 1
inter_node_bandwidth = "3200 Gbps"
"#;

/// Four DGX H100-like nodes (see `DGX_H100`), 3200 Gbps per node.
const H100_4X8: &str = r#"
name = "h100-4x8"

[[node_group]]
gpu = "h100-sxm5-80gb"
gpus_per_node = 8
nodes = 4
inter_node_bandwidth = "3200 Gbps"
"#;

/// Mist (Zhu et al., EuroSys 2025) Fig. 2 setup: one node of four L4 joined only by PCIe
/// (catalog default, Gen4 x16).
const L4_X4: &str = r#"
name = "l4-x4"

[[node_group]]
gpu = "l4"
gpus_per_node = 4
nodes = 1
"#;

/// Every built-in cluster: its name and its cluster TOML.
pub(super) const BUILTINS: &[(&str, &str)] = &[
    ("t4-v100", T4_V100),
    ("amp-hetero", AMP_HETERO),
    ("amp-t4", AMP_T4),
    ("dgx-a100-80gb", DGX_A100_80GB),
    ("a100-80gb-8x8", A100_80GB_8X8),
    ("dgx-h100", DGX_H100),
    ("h100-4x8", H100_4X8),
    ("l4-x4", L4_X4),
];

/// Names of the built-in clusters, in listing order.
pub fn catalog_cluster_names() -> Vec<&'static str> {
    BUILTINS.iter().map(|(n, _)| *n).collect()
}
