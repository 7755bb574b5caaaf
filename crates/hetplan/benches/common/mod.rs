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
    parse_cluster_toml(
        r#"
name = "a100-v100-t4-256"
[[node_group]]
gpu = "a100-sxm4-80gb"
gpus_per_node = 8
nodes = 16
inter_node_bandwidth = "100 Gbps"
[[node_group]]
gpu = "v100-sxm2-32gb"
gpus_per_node = 8
nodes = 8
inter_node_bandwidth = "100 Gbps"
[[node_group]]
gpu = "t4"
gpus_per_node = 8
nodes = 8
inter_node_bandwidth = "100 Gbps"
"#,
    )
    .expect("the 256-GPU cluster parses")
}
