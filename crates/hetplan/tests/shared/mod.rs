//! Shapes shared by the planner test crates (each `tests/*.rs` includes this with `mod shared;`).
#![allow(dead_code)]

use hetplan::cluster::spec::parse_cluster_toml;
use hetplan::model::TransformerConfig;
use hetplan::{Cluster, Model};

/// Two V100 and two T4 on a slow network: small enough for the exhaustive oracle.
pub fn small_cluster() -> Cluster {
    parse_cluster_toml(
        r#"
name = "small-hetero"
[[node_group]]
gpu = "v100-sxm2-16gb"
gpus_per_node = 2
nodes = 1
inter_node_bandwidth = "25 Gbps"
[[node_group]]
gpu = "t4"
gpus_per_node = 2
nodes = 1
inter_node_bandwidth = "25 Gbps"
"#,
    )
    .expect("the small cluster parses")
}

/// A 4-block GPT with hidden 1024.
pub fn small_model() -> Model {
    TransformerConfig::gpt("tiny-gpt", 4, 1024, 16, 1024).build()
}
