//! Offloading lives in the node's host memory, which is finite (issue 9: Mist offloaded all
//! states of llama3-405b on 8 T4s, about 6.5 TB of host RAM on one node, and called it a fit).

use hetplan::cluster::spec::parse_cluster_toml;
use hetplan::cost::{estimate, Analytic, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;

fn host_notes(host_memory: Option<&str>) -> (bool, Vec<String>, f64) {
    let model = catalog_model("gpt3-13b").unwrap();
    let extra = host_memory
        .map(|h| format!("host_memory = \"{h}\"\n"))
        .unwrap_or_default();
    let cluster = parse_cluster_toml(&format!(
        "name = \"t4s\"\n[[node_group]]\ngpu = \"t4\"\ngpus_per_node = 2\nnodes = 1\n{extra}"
    ))
    .unwrap();
    let plan = parse_inline_plan(
        "dp=2,mbs=1,gbs=2,zero=3,ckpt=full,offload_w=1,offload_g=1,offload_opt=1",
        &model,
        &cluster,
    )
    .unwrap();
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 2048,
    };
    let e = estimate(w, &w.validate(&plan).unwrap(), &Analytic);
    let host: f64 = e.per_gpu.iter().map(|g| g.host_memory_bytes).sum();
    let notes = e
        .notes
        .into_iter()
        .filter(|n| n.contains("out of host memory"))
        .collect();
    (e.fits, notes, host)
}

#[test]
fn offloading_beyond_a_nodes_host_memory_does_not_fit() {
    // 13 B parameters' weights, gradients and Adam states (18 B each: Megatron keeps BF16
    // gradients in FP32), sharded over two GPUs and all offloaded: about 217 GiB on the node,
    // over the default 2 × 48 GiB.
    let (fits, notes, host) = host_notes(None);
    assert!(
        host > 212.0 * 1073741824.0 && host < 222.0 * 1073741824.0,
        "{host}"
    );
    assert!(!fits);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("the node has 96.00 GiB"), "{notes:?}");
    // A node with the RAM for it: no host shortfall (and the T4s hold what is left).
    let (fits, notes, _) = host_notes(Some("1 TiB"));
    assert!(notes.is_empty(), "{notes:?}");
    assert!(fits);
}
