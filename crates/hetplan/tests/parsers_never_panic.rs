//! Every public input parser returns `Ok` or `Err` on any input: arbitrary strings, and valid
//! inputs mutated (numbers replaced by 0, u64::MAX, negative, NaN, 1e308, …; text deleted,
//! inserted, duplicated). Never a panic, an overflow (tests build with overflow checks), an
//! abort or a runaway loop.

use hetplan::calibration::{self, sailor::check_sailor};
use hetplan::cluster::spec::{catalog_cluster, parse_cluster_toml};
use hetplan::import::deepspeed::{DeepspeedJob, Split};
use hetplan::import::megatron::MegatronJob;
use hetplan::import::torchtitan::TorchtitanJob;
use hetplan::model::catalog::catalog_model;
use hetplan::model::hf::parse_hf_config;
use hetplan::model::layerlist::parse_layer_list;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::plan::validate::parse_plan_json;
use hetplan::plan::Recompute;
use hetplan::profile::{import_metis, import_oobleck, import_sailor, ProfileDb};
use proptest::prelude::*;

// ------------------------------------------------------------------------------ valid inputs

/// A Megatron-LM launch script (`hetplan import --from megatron`).
const MEGATRON_SCRIPT: &str = "torchrun --nnodes 2 --nproc_per_node 4 pretrain_gpt.py \\\n  \
    --num-layers 4 --hidden-size 256 --num-attention-heads 8 --group-query-attention \
    --num-query-groups 4 --seq-length 512 --max-position-embeddings 512 --vocab-size 1000 \
    --swiglu --normalization RMSNorm --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Et|t*3L' \
    --num-experts 4 --moe-router-topk 2 --micro-batch-size 2 --global-batch-size 16 \
    --use-distributed-optimizer --recompute-granularity full --recompute-method block \
    --recompute-num-layers 1 --optimizer-cpu-offload --optimizer-offload-fraction 0.5 --bf16\n";

/// A torchtitan config module (`hetplan import --from torchtitan`).
const TT_MODULE: &str = "DIM = 256\nN_LAYERS = 2\nN_HEADS = 4\nN_KV_HEADS = 2\nFFN_HIDDEN_DIM = 512\n\
VOCAB_SIZE = 1000\nTIED_EMBEDDINGS = False\n\ndef job():\n    return Trainer.Config(\n        \
training=TrainingConfig(local_batch_size=4, global_batch_size=16, seq_len=128),\n        \
parallelism=ParallelismConfig(data_parallel_replicate_degree=2, tensor_parallel_degree=2,\n            \
pipeline_parallel_degree=1, pipeline_parallel_schedule=\"1F1B\"),\n        \
activation_checkpoint=FullAC.Config(),\n    )\n";

/// A DeepSpeed config (`hetplan import --from deepspeed`).
const DS_CONFIG: &str = r#"{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 1,
  "offload_optimizer": {"device": "cpu", "ratio": 0.5}}, "bf16": {"enabled": true}}"#;

const CLUSTER_TOML: &str = r#"
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

const CLUSTER_NAMES: &[&str] = &[
    "dgx-a100-80gb",
    "2x8xa100-80gb",
    "4x8xh100@3200Gbps",
    "2x8xmi300x@50 GB/s",
    "8x8xa100-80gb@3200gbps",
    "2x8xh100@€xy",
];

const PLAN_JSON: &str = r#"{
  "global_batch": 32,
  "micro_batches": 8,
  "schedule": { "kind": "interleaved-1f1b", "virtual_stages": 2 },
  "engine": "megatron",
  "precision": "bf16",
  "stages": [
    {
      "layers": { "start": 0, "end": 3 },
      "devices": [ { "node": 0, "local": 0 }, { "node": 0, "local": 1 } ],
      "tp": 2, "dp": 1, "micro_batch_sizes": [4], "zero": 1,
      "recompute": "selective", "sequence_parallel": true
    },
    {
      "layers": { "start": 3, "end": 6 },
      "devices": [ { "node": 1, "local": 0 }, { "node": 1, "local": 1 } ],
      "tp": 2, "dp": 1, "micro_batch_sizes": [4], "zero": 1, "recompute": 2,
      "offload": { "optimizer": 0.5 }, "sequence_parallel": true, "ep": 1
    }
  ]
}"#;

/// The committed reference configs (`tests/data/hf/*.json`, one per family), read once.
fn hf_reference_configs() -> &'static [String] {
    static CONFIGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    CONFIGS.get_or_init(|| {
        let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/hf"));
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .expect("tests/data/hf")
            .map(|e| e.expect("a directory entry").path())
            .filter(|p| {
                p.extension().is_some_and(|x| x == "json")
                    && p.file_name().is_some_and(|n| n != "reference.json")
            })
            .collect();
        files.sort();
        assert!(files.len() >= 40, "{} reference configs", files.len());
        files
            .iter()
            .map(|p| std::fs::read_to_string(p).expect("readable"))
            .collect()
    })
}

const HF_CONFIGS: &[&str] = &[
    r#"{"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
        "max_position_embeddings": 4096, "num_attention_heads": 32, "num_hidden_layers": 4,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 32000, "attention_dropout": 0.0,
        "tie_word_embeddings": false}"#,
    r#"{"model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_inner": null,
        "n_layer": 2, "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257}"#,
    r#"{"model_type": "mpt", "attn_config": {"alibi": true, "attn_impl": "triton",
        "attn_type": "grouped_query_attention", "kv_n_heads": 8}, "d_model": 4096,
        "expansion_ratio": 4, "max_seq_len": 2048, "n_heads": 32, "n_layers": 2,
        "no_bias": true, "vocab_size": 50432}"#,
    r#"{"model_type": "qwen2_moe", "decoder_sparse_step": 2, "hidden_size": 2048,
        "intermediate_size": 5632, "max_position_embeddings": 8192, "moe_intermediate_size": 1408,
        "num_attention_heads": 16, "num_experts": 60, "num_experts_per_tok": 4,
        "num_hidden_layers": 3, "num_key_value_heads": 16, "mlp_only_layers": [0],
        "shared_expert_intermediate_size": 5632, "vocab_size": 151936}"#,
    r#"{"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71,
        "num_hidden_layers": 2, "multi_query": true, "new_decoder_architecture": false,
        "num_kv_heads": 1, "ffn_hidden_size": 18176, "vocab_size": 65024}"#,
    r#"{"model_type": "gpt_neox", "hidden_size": 768, "intermediate_size": 3072,
        "max_position_embeddings": 2048, "num_attention_heads": 12, "num_hidden_layers": 2,
        "rotary_pct": 0.25, "vocab_size": 50304}"#,
    r#"{"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 2,
        "num_key_value_heads": 8, "num_local_experts": 8, "vocab_size": 32000}"#,
];

const LAYERS_TOML: &str = r#"
name = "tiny-cnn"
seq_len = 1

[[layer]]
name = "stem"
kind = "embedding"
params = 9536
forward_flops = 2.4e8
activation_bytes = "8 MiB"
output_bytes = "392 KiB"

[[layer]]
name = "block"
params = 70_000
forward_flops = "0.5 GFLOP"
activation_bytes = "4 MiB"
output_bytes = "392 KiB"
tp_comm_bytes = "196 KiB"
count = 3
"#;

const LAYERS_JSON: &str = r#"{"name": "tiny", "seq_len": 1, "layer": [
  {"name": "stem", "kind": "embedding", "params": 9536, "forward_flops": 2.4e8,
   "activation_bytes": "8 MiB", "output_bytes": "392 KiB"},
  {"name": "block", "params": 70000, "forward_flops": "0.5 GFLOP", "count": 3,
   "activation_bytes": "4 MiB", "output_bytes": "392 KiB", "tp_comm_bytes": "196 KiB"}]}"#;

const PROFILE_JSON: &str = r#"{ "format_version": 1,
  "profiles": [ { "gpu": "a100-sxm4-40gb", "model": "gpt3-125m", "seq_len": 2048,
                  "precision": "fp32", "source": "test",
                  "layers": [ { "layer": 0, "tp": 1, "mbs": 1, "forward": 0.0004,
                                "backward": 3e-6, "optimizer": 0.0006 },
                              { "layer": "transformer", "tp": 1, "mbs": 2,
                                "forward": 0.0046, "backward": 0.0116,
                                "activation_memory": 1048576 } ],
                  "collectives": [ { "op": "all-reduce", "group_size": 8,
                                     "link": "intra-node", "message": 67108864,
                                     "bandwidth": 1.2e11 } ] } ] }"#;

const CALIBRATION_CSV: &str = "# comment
gpu,model,seq,gpus,mfu,hfu,mbs,grad_accum,gbs,tok_s_gpu,ckpt,nparams,precision,inter_node
a100_80gb,125m,2048,8,50,60,2,4,64,30000,True,1,bf16,1600 Gbps
a100_80gb,350m,1024,12,50,60,1,2,24,30000,False,1,amp_bf16,100 Gbps
";

const SAILOR_PROFILES: &str = r#"{"TINY": {"A100-40": {
  "1": {"1": {"0": [0.0004, 3e-06, 0.003], "1": [0.0028, 0.0059, 0.003],
              "2": [0.0028, 0.0059, 0.003], "3": [0.0045, 0.0040, 0.003]}},
  "4": {"2": {"0": [0.0005, 3e-06, 0.003], "1": [0.0086, 0.0227, 0.003],
              "2": [0.0086, 0.0227, 0.003], "3": [0.0161, 0.0149, 0.003]}}}}}"#;

const SAILOR_INFO: &str = r#"{"TINY": {"1": {
  "0": {"params_floats": 500, "act_mem_bytes": 40},
  "1": {"params_floats": 250, "act_mem_bytes": 400},
  "2": {"params_floats": 250, "act_mem_floats": 100},
  "3": {"params_floats": 0, "act_mem_bytes": 80}}}}"#;

const METIS_NAME: &str = "DeviceType.A100_tp2_bs4.json";
const METIS_FILE: &str = r#"{"model": {"model_name": "gpt", "parameters":
  {"parameters_per_layer_bytes": [100, 200, 300]}},
  "execution_time": {"layer_compute_total_ms": [1.0, 2.0, 3.0], "optimizer_time_ms": 4.0},
  "execution_memory": {"layer_memory_total_mb": [10, 20, 30]}}"#;

const OOBLECK_MB: &str = r#"[{"forward": 0.5, "backward": 1.5, "mem_required": [4e8, 1e6]},
  {"forward": 10.0, "backward": 30.0, "mem_required": [5e7, 3e8]}]"#;
const OOBLECK_ALLREDUCE: &str = r#"[{"1": 0.01, "2": 4.0, "4": 6.0}, {"2": 0.5}]"#;

const SAILOR_RUN: &str = r#"{"pipeline_list": [{
  "layers_per_stage": [[0,1,2,3,4,5,6,7,8,9,10,11,12], [13,14,15,16,17,18,19,20,21,22,23,24,25]],
  "tmp_per_stage": [[[[["GH-96", 4, "z"]], 1]], [[[["GH-96", 4, "z"]], 1]]],
  "dp": [1, 1]}], "mbs": 1, "gbs": 8, "real": 1.0, "max_mem": 1e9, "N": 1}"#;

const INLINE_KEYS: &[&str] = &[
    "tp",
    "pp",
    "dp",
    "mbs",
    "gbs",
    "m",
    "zero",
    "ckpt",
    "sp",
    "schedule",
    "v",
    "engine",
    "precision",
    "offload_w",
    "offload_g",
    "offload_opt",
    "offload_act",
];

// ------------------------------------------------------------------------------ strategies

/// Numbers that break parsers: zero, the integer limits, negatives, non-finite and huge floats,
/// fractions, and some ordinary ones.
const SPECIAL: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "8",
    "12",
    "4096",
    "-1",
    "-0",
    "0.0",
    "2.5",
    "1e308",
    "-1e308",
    "1e-308",
    "1e400",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "1e9",
    "1000000000",
    "1000000001",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "18014398509481984",
    "9000000000000000000",
    "99999999999999999999999999",
];

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(SPECIAL).prop_map(str::to_string),
        1 => any::<u64>().prop_map(|v| v.to_string()),
        1 => any::<i64>().prop_map(|v| v.to_string()),
        1 => any::<f64>().prop_map(|v| v.to_string()),
        2 => (0u32..200).prop_map(|v| v.to_string()),
    ]
}

/// Text to insert: syntax that matters to the formats, multi-byte characters, anything.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(
            &[
                "\"",
                ",",
                "=",
                "{",
                "}",
                "[",
                "]",
                ":",
                "\n",
                "#",
                "[[layer]]",
                "[[node_group]]",
                "€",
                "😀",
                "é",
                "x",
                "@",
                " ",
                "null",
                "true",
                "-",
                ".",
                "e",
                "_",
            ][..]
        )
        .prop_map(str::to_string),
        "\\PC{0,6}",
        number(),
    ]
}

#[derive(Clone, Debug)]
enum Edit {
    /// Replace the i-th number (modulo how many there are) by this text.
    Number(usize, String),
    /// Delete `len` characters at a position (a fraction of the length, in 1/1000).
    Delete(u16, u8),
    /// Insert text at a position (in 1/1000 of the length).
    Insert(u16, String),
    /// Duplicate the i-th line.
    DupLine(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        6 => (any::<usize>(), number()).prop_map(|(i, n)| Edit::Number(i, n)),
        1 => (0u16..1000, 1u8..12).prop_map(|(p, n)| Edit::Delete(p, n)),
        2 => (0u16..1000, fragment()).prop_map(|(p, s)| Edit::Insert(p, s)),
        1 => any::<usize>().prop_map(Edit::DupLine),
    ]
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec(edit(), 1..5)
}

/// Character ranges of the numbers in `s`: a digit run with its fraction and exponent.
fn numbers_in(s: &[char]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if s[i].is_ascii_digit() {
            let start = i;
            while i < s.len()
                && (s[i].is_ascii_digit()
                    || s[i] == '.'
                    || s[i] == '_'
                    || ((s[i] == 'e' || s[i] == 'E')
                        && s.get(i + 1)
                            .is_some_and(|c| c.is_ascii_digit() || *c == '-' || *c == '+'))
                    || ((s[i] == '-' || s[i] == '+') && matches!(s[i - 1], 'e' | 'E')))
            {
                i += 1;
            }
            out.push((start, i));
        } else {
            i += 1;
        }
    }
    out
}

fn apply(src: &str, edits: &[Edit]) -> String {
    let mut s: Vec<char> = src.chars().collect();
    for e in edits {
        let at = |p: u16, len: usize| (p as usize * len) / 1000;
        match e {
            Edit::Number(i, n) => {
                let nums = numbers_in(&s);
                if let Some(&(a, b)) = nums.get(i % nums.len().max(1)) {
                    s.splice(a..b, n.chars());
                }
            }
            Edit::Delete(p, n) => {
                let a = at(*p, s.len());
                let b = (a + *n as usize).min(s.len());
                s.drain(a..b);
            }
            Edit::Insert(p, t) => {
                let a = at(*p, s.len());
                s.splice(a..a, t.chars());
            }
            Edit::DupLine(i) => {
                let text: String = s.iter().collect();
                let lines: Vec<&str> = text.split('\n').collect();
                let k = i % lines.len();
                let mut out = lines[..=k].to_vec();
                out.push(lines[k]);
                out.extend_from_slice(&lines[k + 1..]);
                s = out.join("\n").chars().collect();
            }
        }
    }
    s.into_iter().collect()
}

// ------------------------------------------------------------------------------ properties

/// Batch values for the inline form: absent, ordinary, at and beyond the limits.
const BATCH: &[&str] = &[
    "",
    "0",
    "1",
    "2",
    "3",
    "8",
    "1000000000",
    "4294967296",
    "18014398509481984",
    "18446744073709551615",
];

/// The model-wide totals, which sum over every layer.
fn totals(m: &hetplan::Model) {
    let _ = (m.params(), m.active_params(), m.inactive_params());
}

/// A database an importer returns is written and read back unchanged.
fn reads_back(r: Result<ProfileDb, hetplan::InputError>) {
    if let Ok(db) = r {
        let again = ProfileDb::parse(&db.to_json())
            .unwrap_or_else(|e| panic!("an imported database does not read back: {e}"));
        assert_eq!(again, db);
    }
}

/// 256 cases each (fast: the whole file runs in about a second), or `PROPTEST_CASES`.
fn cases() -> ProptestConfig {
    let mut c = ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 256;
    }
    c
}

proptest! {
    #![proptest_config(cases())]

    /// Any string, to every parser that takes one.
    #[test]
    fn arbitrary_text(s in "\\PC{0,64}", t in "[ -~]{0,64}") {
        for x in [&s, &t] {
            let _ = parse_cluster_toml(x);
            let _ = catalog_cluster(x);
            let _ = parse_plan_json(x);
            let _ = parse_hf_config(x, "");
            let _ = parse_layer_list(x, false);
            let _ = parse_layer_list(x, true);
            let _ = ProfileDb::parse(x);
            if let Ok(rows) = calibration::parse_csv(x) {
                let _ = calibration::check(&rows);
            }
            let _ = import_sailor(x, Some(x));
            let _ = import_metis(&[(x.to_string(), x.to_string())]);
            let _ = import_oobleck(x, x, &[(x.to_string(), x.to_string())]);
            let _ = check_sailor(&[(format!("OPT-350{x}"), x.to_string())], &ProfileDb::new());
            let _ = MegatronJob::parse(x, "m");
            let _ = DeepspeedJob::parse(x);
            let _ = TorchtitanJob::parse(x);
        }
    }

    #[test]
    fn torchtitan_modules(e in edits()) {
        let cluster = catalog_cluster("1x4xa100-80gb").unwrap();
        if let Ok(job) = TorchtitanJob::parse(&apply(TT_MODULE, &e)) {
            if let Ok(Some(model)) = job.model("m") {
                totals(&model);
                let _ = job.plan(&model, &cluster, None);
            }
        }
    }

    #[test]
    fn megatron_jobs(e in edits()) {
        let cluster = catalog_cluster("2x4xa100-80gb").unwrap();
        if let Ok(job) = MegatronJob::parse(&apply(MEGATRON_SCRIPT, &e), "m") {
            totals(&job.model);
            let _ = job.plan(&cluster, None);
        }
    }

    #[test]
    fn deepspeed_configs(e in edits(), stages in 0usize..20) {
        let cluster = catalog_cluster("2x4xa100-80gb").unwrap();
        let model = catalog_model("gpt3-125m").unwrap();
        if let Ok(job) = DeepspeedJob::parse(&apply(DS_CONFIG, &e)) {
            for split in [
                Split::Parameters(stages),
                Split::Uniform(stages),
                Split::Parts(vec![0, stages, 14]),
            ] {
                let _ = job.plan(&model, &cluster, &split, None, Recompute::None);
            }
        }
    }

    #[test]
    fn cluster_files(e in edits()) {
        let _ = parse_cluster_toml(&apply(CLUSTER_TOML, &e));
    }

    #[test]
    fn cluster_names(i in 0..CLUSTER_NAMES.len(), e in edits()) {
        let _ = catalog_cluster(&apply(CLUSTER_NAMES[i], &e));
    }

    #[test]
    fn plan_files(e in edits()) {
        let _ = parse_plan_json(&apply(PLAN_JSON, &e));
    }

    #[test]
    fn hf_configs(i in 0..HF_CONFIGS.len(), e in edits()) {
        if let Ok(m) = parse_hf_config(&apply(HF_CONFIGS[i], &e), "m") {
            totals(&m);
        }
    }

    /// The configs `transformers` writes for every family hetplan reads (issue 12), mutated.
    #[test]
    fn hf_reference_families(i in 0..hf_reference_configs().len(), e in edits()) {
        if let Ok(m) = parse_hf_config(&apply(&hf_reference_configs()[i], &e), "m") {
            totals(&m);
        }
    }

    #[test]
    fn layer_lists(e in edits()) {
        for m in [
            parse_layer_list(&apply(LAYERS_TOML, &e), false),
            parse_layer_list(&apply(LAYERS_JSON, &e), true),
        ]
        .into_iter()
        .flatten()
        {
            totals(&m);
        }
    }

    #[test]
    fn profile_databases(e in edits()) {
        let _ = ProfileDb::parse(&apply(PROFILE_JSON, &e));
    }

    #[test]
    fn published_csv(i in 0..3usize, e in edits()) {
        // The header and three rows of each published file, edited: parsed, made into
        // problems and estimated (not simulated: that is the simulator's own test), or a
        // located error.
        let (name, text) = calibration::published::BUILTIN[i];
        let head: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).take(4).collect();
        if let Ok(outcomes) = calibration::published::parse(name, &apply(&head.join("\n"), &e)) {
            for o in outcomes {
                if let calibration::published::Outcome::Case(c) = o {
                    let _ = calibration::published::check(&c, false);
                }
            }
        }
    }

    #[test]
    fn calibration_csv(e in edits()) {
        if let Ok(rows) = calibration::parse_csv(&apply(CALIBRATION_CSV, &e)) {
            let _ = calibration::check(&rows);
        }
    }

    #[test]
    fn inline_plans(
        keys in prop::collection::vec(
            (prop::sample::select(INLINE_KEYS), prop_oneof![
                3 => number(),
                1 => prop::sample::select(&[
                    "interleaved", "gpipe", "1f1b", "full", "selective", "on", "fsdp", "fp32", "",
                ][..]).prop_map(str::to_string),
            ]),
            0..7,
        ),
        e in edits(),
        which in 0..2usize,
    ) {
        let model = catalog_model("gpt3-125m").unwrap();
        let cluster = catalog_cluster(["2x4xa100-80gb", "1x1xa100-80gb"][which]).unwrap();
        let spec: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let spec = spec.join(",");
        let _ = parse_inline_plan(&spec, &model, &cluster);
        let _ = parse_inline_plan(&apply(&spec, &e), &model, &cluster);
        let _ = parse_inline_plan(&apply("tp=2,pp=2,mbs=2,gbs=16,zero=1,ckpt=selective", &e), &model, &cluster);
    }

    /// The batch arithmetic of the inline form, with values drawn where the overflows are.
    #[test]
    fn inline_batch_arithmetic(
        degrees in prop::collection::vec(prop::sample::select(&["", "1", "2", "4"][..]), 4),
        batch in prop::collection::vec(prop::sample::select(BATCH), 3),
        schedule in prop::sample::select(&["", "interleaved", "gpipe", "1f1b"][..]),
        which in 0..2usize,
    ) {
        let model = catalog_model("gpt3-125m").unwrap();
        let cluster = catalog_cluster(["2x4xa100-80gb", "1x1xa100-80gb"][which]).unwrap();
        let mut spec = Vec::new();
        for (k, v) in ["tp", "pp", "dp", "v"].iter().zip(&degrees) {
            if !v.is_empty() {
                spec.push(format!("{k}={v}"));
            }
        }
        for (k, v) in ["mbs", "gbs", "m"].iter().zip(&batch) {
            if !v.is_empty() {
                spec.push(format!("{k}={v}"));
            }
        }
        if !schedule.is_empty() {
            spec.push(format!("schedule={schedule}"));
        }
        let _ = parse_inline_plan(&spec.join(","), &model, &cluster);
    }

    /// Importers: never a panic, and what they return reads back.
    #[test]
    fn sailor_imports(e in edits(), f in edits()) {
        let profiles = apply(SAILOR_PROFILES, &e);
        reads_back(import_sailor(&profiles, None));
        reads_back(import_sailor(&profiles, Some(&apply(SAILOR_INFO, &f))));
        reads_back(import_sailor(SAILOR_PROFILES, Some(&apply(SAILOR_INFO, &e))));
    }

    #[test]
    fn metis_imports(e in edits(), f in edits()) {
        reads_back(import_metis(&[(apply(METIS_NAME, &e), apply(METIS_FILE, &f))]));
        reads_back(import_metis(&[(METIS_NAME.to_string(), apply(METIS_FILE, &e))]));
    }

    #[test]
    fn oobleck_imports(
        e in edits(),
        f in edits(),
        name in "mb[0-9]{1,22}\\.json",
        model in prop::sample::select(&["m", "", " ", "é"][..]),
    ) {
        let files = [
            (name, apply(OOBLECK_MB, &e)),
            ("allreduce_in_node.json".to_string(), apply(OOBLECK_ALLREDUCE, &f)),
        ];
        reads_back(import_oobleck("V100", model, &files));
    }

    #[test]
    fn sailor_runs(e in edits()) {
        let run = apply(SAILOR_RUN, &e);
        let _ = check_sailor(&[("OPT-350_run.json".to_string(), run)], &ProfileDb::new());
    }
}

/// The valid inputs above are valid: the mutations start from something that parses.
#[test]
fn the_valid_inputs_parse() {
    parse_cluster_toml(CLUSTER_TOML).unwrap();
    for n in &CLUSTER_NAMES[..5] {
        catalog_cluster(n).unwrap();
    }
    parse_plan_json(PLAN_JSON).unwrap();
    for c in HF_CONFIGS {
        parse_hf_config(c, "m").unwrap_or_else(|e| panic!("{c}: {e}"));
    }
    parse_layer_list(LAYERS_TOML, false).unwrap();
    parse_layer_list(LAYERS_JSON, true).unwrap();
    ProfileDb::parse(PROFILE_JSON).unwrap();
    let rows = calibration::parse_csv(CALIBRATION_CSV).unwrap();
    calibration::check(&rows).unwrap();
    import_sailor(SAILOR_PROFILES, Some(SAILOR_INFO)).unwrap();
    import_metis(&[(METIS_NAME.to_string(), METIS_FILE.to_string())]).unwrap();
    import_oobleck(
        "V100",
        "m",
        &[
            ("mb1.json".to_string(), OOBLECK_MB.to_string()),
            (
                "allreduce_in_node.json".to_string(),
                OOBLECK_ALLREDUCE.to_string(),
            ),
        ],
    )
    .unwrap();
    let r = check_sailor(
        &[("OPT-350_run.json".to_string(), SAILOR_RUN.to_string())],
        &ProfileDb::new(),
    )
    .unwrap();
    assert_eq!(r.runs.len(), 1, "{:?}", r.skipped);
    let model = catalog_model("gpt3-125m").unwrap();
    let cluster = catalog_cluster("2x4xa100-80gb").unwrap();
    let tt = TorchtitanJob::parse(TT_MODULE).unwrap();
    let tt_model = tt.model("m").unwrap().unwrap();
    tt.plan(&tt_model, &catalog_cluster("1x4xa100-80gb").unwrap(), None)
        .unwrap();
    let job = MegatronJob::parse(MEGATRON_SCRIPT, "m").unwrap();
    job.plan(&cluster, None).unwrap();
    DeepspeedJob::parse(DS_CONFIG)
        .unwrap()
        .plan(
            &model,
            &cluster,
            &Split::Parameters(2),
            None,
            Recompute::None,
        )
        .unwrap();
    parse_inline_plan(
        "tp=2,pp=2,mbs=2,gbs=16,zero=1,ckpt=selective",
        &model,
        &cluster,
    )
    .unwrap();
}
