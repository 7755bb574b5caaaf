//! The built-in scenarios (the seed papers' set-ups) and the scenario file format.

use hetplan::cluster::spec::catalog_cluster;
use hetplan::model::catalog::catalog_model;
use hetplan::plan::validate::validate_seq_len;
use hetplan::scenario::{builtin_scenarios, parse_scenario, scenario, scenario_names};
use hetplan::{BytesPerSec, FlopPerSec};

#[test]
fn every_builtin_parses_and_resolves() {
    let all = builtin_scenarios();
    assert!(all.len() >= 60, "{}", all.len());
    let mut seen = std::collections::BTreeSet::new();
    for (name, src) in &all {
        assert!(seen.insert(*name), "{name} twice");
        let s = parse_scenario(src).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.name, *name);
        assert!(!s.description.is_empty() && !s.source.is_empty(), "{name}");
        assert!(s.assumptions.len() > 40, "{name}: say what was assumed");
        assert!(s.cluster.num_gpus() > 0, "{name}");
        assert!(s.model.params() > 0, "{name}");
        assert!(s.global_batch > 0, "{name}");
        validate_seq_len(&s.model, s.seq_len).unwrap_or_else(|e| panic!("{name}: {e}"));
        // By name, in any spelling.
        assert_eq!(scenario(&name.to_uppercase()).unwrap(), s);
    }
    assert_eq!(scenario_names().len(), all.len());
    for paper in ["metis-", "amp-", "ditto-", "poplar-", "mist-"] {
        assert!(
            all.iter().filter(|(n, _)| n.starts_with(paper)).count() >= 3,
            "{paper}"
        );
    }
}

#[test]
fn metis_table_3_setups() {
    // 3 GPU pairs × 4 sizes × 3 models, and Fig. 5's four non-uniform compositions.
    let names = scenario_names();
    for model in ["gpt3", "moe", "wresnet"] {
        for pair in ["p100-t4", "t4-v100", "p100-v100"] {
            for n in [4, 8, 16, 32] {
                let name = format!("metis-{pair}-{n}-{model}");
                assert!(names.contains(&name.as_str()), "{name}");
            }
        }
    }
    let s = scenario("metis-t4-v100-16-gpt3").unwrap();
    assert_eq!(s.model, catalog_model("metis-gpt3-6.7b").unwrap());
    assert_eq!((s.cluster.nodes.len(), s.cluster.num_gpus()), (4, 16));
    assert_eq!(s.cluster.gpu_types[0].name, "t4");
    assert_eq!(s.cluster.gpu_types[1].name, "v100-sxm2-16gb");
    assert_eq!(s.cluster.node_pair_bandwidth(0, 3), BytesPerSec::gbps(16.0));
    assert_eq!((s.global_batch, s.seq_len), (1024, 1024));
    let w = scenario("metis-p100-v100-32-wresnet").unwrap();
    assert_eq!(w.model.name, "wresnet-6.8b");
    assert_eq!((w.seq_len, w.cluster.num_gpus()), (1, 32));
    let f = scenario("metis-fig5c-p100-8").unwrap();
    let sizes: Vec<u32> = f.cluster.nodes.iter().map(|n| n.num_gpus).collect();
    assert_eq!(sizes, vec![1, 1, 2, 4]);
    assert_eq!(
        f.cluster.gpu(hetplan::GpuId { node: 0, local: 0 }).name,
        "v100-sxm2-16gb"
    );
}

#[test]
fn amp_ditto_poplar_and_mist_setups() {
    let amp = scenario("amp-hetero-cluster").unwrap();
    assert_eq!(amp.cluster, catalog_cluster("amp-hetero").unwrap());
    assert_eq!(
        (amp.global_batch, amp.model.name.as_str()),
        (32, "gpt3-350m")
    );
    let het = scenario("amp-hetero-model").unwrap();
    assert_eq!(het.model.name, "amp-hetero");
    assert_eq!((het.cluster.nodes.len(), het.cluster.num_gpus()), (4, 16));
    assert_eq!(
        het.cluster.node_pair_bandwidth(0, 1),
        BytesPerSec::gbps(10.0)
    );
    assert_eq!(
        scenario("amp-homogeneous-t4").unwrap().cluster.num_gpus(),
        16
    );

    // Ditto Fig. 8: Ex3 has 4 GPU types on 11 nodes of 2.
    let ex3 = scenario("ditto-ex3").unwrap();
    assert_eq!(ex3.cluster.gpu_types.len(), 4);
    assert_eq!((ex3.cluster.nodes.len(), ex3.cluster.num_gpus()), (11, 22));
    assert_eq!(scenario("ditto-ex4").unwrap().cluster.num_gpus(), 24);
    assert_eq!(
        scenario("ditto-ex5").unwrap().cluster.gpu_types[2].name,
        "a100-pcie-80gb"
    );

    // Poplar Table 1, cluster C: the V100S as an overridden V100-PCIe-32GB.
    let c = scenario("poplar-cluster-c").unwrap();
    assert_eq!(c.cluster.num_gpus(), 8);
    assert_eq!(
        c.cluster.gpu_types[1].peak_tensor,
        FlopPerSec::tflops(130.0)
    );
    assert!(c.cluster.gpu_types[1].source.contains("overridden"));
    assert_eq!(c.cluster.nodes[0].intra_bandwidth, BytesPerSec::gb_s(31.5));
    assert_eq!(scenario("poplar-cluster-b").unwrap().cluster.num_gpus(), 4);

    // Mist: Fig. 2 and the A100 runs at 4096 tokens with a resized position table.
    let fig2 = scenario("mist-fig2-l4").unwrap();
    assert_eq!((fig2.global_batch, fig2.seq_len), (8, 4096));
    assert_eq!(fig2.cluster.num_gpus(), 4);
    assert_eq!(
        fig2.cluster.nodes[0].intra_bandwidth,
        BytesPerSec::gb_s(15.75)
    );
    let base = catalog_model("gpt3-2.7b").unwrap();
    assert_eq!(fig2.model.transformer.as_ref().unwrap().max_seq_len, 4096);
    assert_eq!(fig2.model.params() - base.params(), 2048 * 2560);
    let a = scenario("mist-a100-32-gpt3").unwrap();
    assert_eq!((a.cluster.nodes.len(), a.cluster.num_gpus()), (4, 32));
    assert_eq!((a.global_batch, a.seq_len), (512, 4096));
    let l = scenario("mist-l4-16-gpt3").unwrap();
    assert_eq!(
        (l.cluster.nodes.len(), l.seq_len, l.global_batch),
        (2, 2048, 256)
    );
}

const SMALL: &str = r#"name = "x"
description = "d"
source = "s"
model = "gpt3-350m"
global_batch = 32
seq_len = 1024
assumptions = """
A line that looks like a header:
[[cluster.node_group]]
inside the string.
"""

[cluster]
name = "c"

[[cluster.node_group]]
gpu = "v100"
gpus_per_node = 4
nodes = 2
inter_node_bandwidth = "10 Gbps"
"#;

fn line_of(src: &str, needle: &str) -> usize {
    src[..src.find(needle).unwrap()].matches('\n').count() + 1
}

#[test]
fn an_inline_cluster_is_read_in_place() {
    let s = parse_scenario(SMALL).unwrap();
    assert_eq!(s.cluster.name, "c");
    assert_eq!(s.cluster.num_gpus(), 8);
    assert!(s.assumptions.contains("[[cluster.node_group]]"));
    // A name instead of a table.
    let named =
        SMALL.split("\n[cluster]").next().unwrap().to_string() + "cluster = \"2x4xv100@10Gbps\"\n";
    assert_eq!(parse_scenario(&named).unwrap().cluster.num_gpus(), 8);
    // An inline table.
    let inline = SMALL.split("\n[cluster]").next().unwrap().to_string()
        + "cluster = { name = \"c\", node_group = [{ gpu = \"t4\", gpus_per_node = 2, nodes = 1 }] }\n";
    assert_eq!(parse_scenario(&inline).unwrap().cluster.num_gpus(), 2);
}

#[test]
fn errors_inside_the_inline_cluster_point_into_the_scenario() {
    let src = SMALL.replace("gpus_per_node = 4", "gpus_per_nod = 4");
    let e = parse_scenario(&src).unwrap_err();
    assert_eq!(e.line, Some(line_of(&src, "gpus_per_nod")));
    assert_eq!(e.column, Some(1));
    assert_eq!(
        e.field.as_deref(),
        Some("cluster.node_group[0].gpus_per_nod")
    );
    assert_eq!(e.hint.as_deref(), Some("did you mean `gpus_per_node`?"));

    let src = SMALL.replace("gpu = \"v100\"", "gpu = \"v10O\"");
    let e = parse_scenario(&src).unwrap_err();
    assert_eq!((e.line, e.column), (Some(line_of(&src, "gpu = ")), Some(7)));
    assert_eq!(e.field.as_deref(), Some("cluster.node_group[0].gpu"));
    assert!(e.message.contains("unknown GPU"), "{e}");
    assert!(e.hint.is_some());

    let src = SMALL.replace(
        "inter_node_bandwidth = \"10 Gbps\"",
        "inter_node_bandwidth = 10",
    );
    let e = parse_scenario(&src).unwrap_err();
    assert_eq!(e.line, Some(line_of(&src, "inter_node_bandwidth")));
    assert!(e.hint.unwrap().contains("10 Gbps"));

    let src = SMALL.replace("name = \"c\"\n", "");
    let e = parse_scenario(&src).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("cluster.name"));
    assert_eq!(e.line, Some(line_of(&src, "[cluster]")));
}

#[test]
fn unknown_keys_and_names_get_hints() {
    let e = parse_scenario(&SMALL.replace("global_batch =", "global_bach =")).unwrap_err();
    assert_eq!(e.message, "unknown key `global_bach`");
    assert_eq!(e.hint.as_deref(), Some("did you mean `global_batch`?"));
    assert_eq!(e.line, Some(5));

    let e = parse_scenario(&SMALL.replace("gpt3-350m", "gpt3-350")).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("model"));
    assert_eq!((e.line, e.column), (Some(4), Some(9)));
    assert!(e.hint.unwrap().contains("gpt3-350m"));

    let named =
        SMALL.split("\n[cluster]").next().unwrap().to_string() + "cluster = \"amp-heter\"\n";
    let e = parse_scenario(&named).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("cluster"));
    assert_eq!(e.hint.as_deref(), Some("did you mean `amp-hetero`?"));

    let e = scenario("dito-ex2").unwrap_err();
    assert_eq!(e.hint.as_deref(), Some("did you mean `ditto-ex2`?"));
    let e = scenario("metis-t4-v100-16-gtp3").unwrap_err();
    assert_eq!(
        e.hint.as_deref(),
        Some("did you mean `metis-t4-v100-16-gpt3`?")
    );
}

#[test]
fn bad_values_are_located_errors() {
    let e = parse_scenario(&SMALL.replace("description = \"d\"\n", "")).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("description"));
    assert!(e.message.contains("no `description`"), "{e}");
    let e =
        parse_scenario(&SMALL.replace("global_batch = 32", "global_batch = \"32\"")).unwrap_err();
    assert_eq!(e.line, Some(5));
    assert!(e.hint.unwrap().contains("global_batch = 32"));
    let e = parse_scenario(&SMALL.replace("global_batch = 32", "global_batch = 0")).unwrap_err();
    assert!(e.message.contains("at least 1"), "{e}");
    // A sequence beyond the learned positions, and the way out.
    let long = SMALL.replace("seq_len = 1024", "seq_len = 4096");
    let e = parse_scenario(&long).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("seq_len"));
    assert!(e.hint.unwrap().contains("max_position_embeddings = 4096"));
    let fixed = long.replace(
        "seq_len = 4096",
        "seq_len = 4096\nmax_position_embeddings = 4096",
    );
    assert_eq!(parse_scenario(&fixed).unwrap().seq_len, 4096);
    // Resizing needs learned positions of a plain transformer.
    let rotary = fixed.replace("gpt3-350m", "llama2-7b");
    let e = parse_scenario(&rotary).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("max_position_embeddings"));
    let parts = fixed.replace("gpt3-350m", "amp-hetero");
    assert!(parse_scenario(&parts).is_err());
    // Syntax errors carry a position.
    let e = parse_scenario("name = \"x\n").unwrap_err();
    assert_eq!(e.line, Some(1));
    // A cluster of the wrong type.
    let e =
        parse_scenario(&(SMALL.split("\n[cluster]").next().unwrap().to_string() + "cluster = 3\n"))
            .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("cluster"));
}
