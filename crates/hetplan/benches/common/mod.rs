//! What the planner benches share (each bench includes this with `mod common;`): the wall clock
//! a timed search reads, and the 256-GPU, three-type cluster of issue 5's speed rows.
#![allow(dead_code)]

use hetplan::cluster::spec::parse_cluster_toml;
use hetplan::planners::Clock;
use hetplan::units::Seconds;
use hetplan::Cluster;
use std::time::Instant;

/// The wall clock since the search began (the library never reads clocks itself).
pub struct Wall(pub Instant);

impl Clock for Wall {
    fn elapsed(&self) -> Seconds {
        Seconds(self.0.elapsed().as_secs_f64())
    }
}

/// 16 nodes of 8 A100-80GB (NVLink), 8 of 8 V100-32GB (NVLink) and 8 of 8 T4 (PCIe), 100 Gbps
/// between nodes: 256 GPUs of three types.
pub fn three_types_256() -> Cluster {
    three_types(1)
}

/// The three-type cluster with `gpus` GPUs (a multiple of 32): A100, V100 and T4 nodes of 8
/// in the ratio 2:1:1.
pub fn three_types_n(gpus: u32) -> Cluster {
    let b = gpus / 32;
    parse_cluster_toml(&format!(
        r#"
name = "a100-v100-t4-{gpus}"
[[node_group]]
gpu = "a100-sxm4-80gb"
gpus_per_node = 8
nodes = {a}
inter_node_bandwidth = "100 Gbps"
[[node_group]]
gpu = "v100-sxm2-32gb"
gpus_per_node = 8
nodes = {b}
inter_node_bandwidth = "100 Gbps"
[[node_group]]
gpu = "t4"
gpus_per_node = 8
nodes = {b}
inter_node_bandwidth = "100 Gbps"
"#,
        a = 2 * b
    ))
    .expect("the three-type cluster parses")
}

/// The 256-GPU cluster with `k` times as many nodes of each type (`k = 4`: 1,024 GPUs).
pub fn three_types(k: u32) -> Cluster {
    three_types_n(256 * k)
}

/// One group of identical nodes: GPU catalog name, GPUs per node, nodes, and each node's network
/// (all NICs, per direction), e.g. `("rtx-4090", 4, 2, "25 Gbps")`.
pub type Group<'a> = (&'a str, u32, u32, &'a str);

/// A cluster of node groups (intra-node links: each GPU's default, NVLink where it has one).
pub fn fleet(name: &str, groups: &[Group<'_>]) -> Cluster {
    let mut toml = format!("name = \"{name}\"\n");
    for (gpu, per_node, nodes, network) in groups {
        toml.push_str(&format!(
            "[[node_group]]\ngpu = \"{gpu}\"\ngpus_per_node = {per_node}\nnodes = {nodes}\n\
             inter_node_bandwidth = \"{network}\"\n"
        ));
    }
    parse_cluster_toml(&toml).unwrap_or_else(|e| panic!("cluster {name}: {e}"))
}
