//! The estimate-vs-simulation table of docs/validation.md §3: the cases, and where the two are
//! known to part, the bound and its cause. `tests/sim.rs` asserts every row; the example
//! `sim_vs_estimate` prints the table (`cargo run --release -p hetplan --example sim_vs_estimate`).
#![allow(dead_code)]

use hetplan::cluster::spec::{catalog_cluster, parse_cluster_toml};
use hetplan::cost::{estimate, Analytic, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::plan::validate::{parse_plan_json, validate};
use hetplan::sim::{simulate, SimOptions};
use hetplan::{Cluster, Model, Plan};

/// A cluster: a catalog name or a TOML file's text.
pub enum ClusterIn {
    Catalog(&'static str),
    Toml(&'static str, &'static str),
}

/// A plan: the inline form or a JSON file's text.
pub enum PlanIn {
    Inline(&'static str),
    Json(&'static str, &'static str),
}

pub struct Case {
    pub model: &'static str,
    pub cluster: ClusterIn,
    pub plan: PlanIn,
    pub seq: u64,
    /// Largest |simulated − estimated| / estimated this row may show, and why it is larger than
    /// the 5% every other row keeps.
    pub known: Option<(f64, &'static str)>,
    /// What the row shows, for the table.
    pub why: &'static str,
}

pub struct Row {
    pub model: &'static str,
    pub cluster: &'static str,
    pub plan: &'static str,
    pub estimate_s: f64,
    pub simulate_s: f64,
}

impl Row {
    pub fn difference(&self) -> f64 {
        (self.simulate_s - self.estimate_s) / self.estimate_s
    }
}

pub const AGREE: f64 = 0.05;

pub fn cases() -> Vec<Case> {
    use ClusterIn::*;
    use PlanIn::*;
    vec![
        Case {
            model: "gpt3-1.3b",
            cluster: Catalog("1x4xa100-80gb"),
            plan: Inline("pp=4,dp=1,mbs=1,gbs=16"),
            seq: 2048,
            known: None,
            why: "uniform stages, no overlap, no contention: the formula is exact",
        },
        Case {
            model: "gpt3-1.3b",
            cluster: Catalog("2x4xa100-80gb@200Gbps"),
            plan: Inline("pp=2,dp=4,mbs=2,gbs=64"),
            seq: 2048,
            known: None,
            why: "pipeline sends of all replicas share each node's network in both",
        },
        Case {
            model: "gpt3-1.3b",
            cluster: Catalog("2x4xa100-80gb@200Gbps"),
            plan: Inline("pp=2,dp=4,mbs=2,gbs=64,zero=1"),
            seq: 2048,
            known: None,
            why: "as above; the ZeRO-1 parameter gather hides behind the next forward in both",
        },
        Case {
            model: "gpt3-1.3b",
            cluster: Catalog("t4-v100"),
            plan: Inline("dp=10,mbs=1,gbs=40"),
            seq: 1024,
            known: None,
            why: "one ring over V100s and T4s on 16 Gbps: each gradient bucket waits for the \
                  slowest replica's (T4) layer in the simulator, the estimate overlaps the whole \
                  reduction with its backward (6.1% apart while the simulator's buckets counted \
                  the tied embedding twice)",
        },
        Case {
            model: "gpt3-1.3b",
            cluster: Catalog("t4-v100"),
            plan: Inline("pp=2,dp=5,mbs=1,gbs=40"),
            seq: 1024,
            known: None,
            why: "node 1 holds GPUs of both stages: activations, gradients and the tied-embedding \
                  all-reduces share its 16 Gbps network in both",
        },
        Case {
            model: "gpt3-2.7b",
            cluster: Catalog("t4-v100"),
            plan: Inline("pp=5,dp=2,mbs=1,gbs=32,ckpt=full"),
            seq: 1024,
            known: None,
            why: "fully recomputed stages on mixed GPUs: fast stages run ahead within the 1F1B \
                  limits, transfers meet on the 16 Gbps links",
        },
        Case {
            model: "mpt-7b",
            cluster: Catalog("dgx-a100-80gb"),
            plan: Inline("dp=8,mbs=4,gbs=64,zero=3,ckpt=full,engine=fsdp"),
            seq: 2048,
            known: None,
            why: "FSDP: per-layer gathers and reduce-scatters prefetched behind compute in both",
        },
        Case {
            model: "gpt3-13b",
            cluster: Catalog("a100-80gb-8x8"),
            plan: Inline("tp=8,pp=4,dp=2,mbs=1,gbs=64,schedule=interleaved,v=2"),
            seq: 2048,
            known: None,
            why: "interleaved 1F1B: the virtual-stage order is simulated; the formula shrinks the \
                  bubble by v",
        },
        Case {
            model: "llama2-7b",
            cluster: Catalog("8x2xa100-sxm4-80gb@25Gbps"),
            plan: Inline("tp=1,pp=16,mbs=1,gbs=64,engine=megatron,schedule=interleaved,v=2"),
            seq: 4096,
            known: None,
            why: "Megatron's interleaved schedule over a 25 Gbps network: each device alternates \
                  one chunk's forward and one chunk's backward, and the estimate times the other \
                  devices' sends on a node's network chunk cycle by chunk cycle (25% apart when \
                  every send met every chunk's of the other devices)",
        },
        Case {
            model: "llama2-7b",
            cluster: Catalog("4x4xa100-sxm4-80gb@25Gbps"),
            plan: Inline("tp=1,pp=8,dp=2,mbs=1,gbs=64,engine=megatron,schedule=interleaved,v=2"),
            seq: 4096,
            known: Some((
                0.16,
                "the same, two replicas a stage on each node: the simulated sends meet more \
                 than the ideal chunk cycle places them, and the fill and drain block their \
                 backward sends where the estimate overlaps them as in the steady state \
                 (the estimate was 28% above the simulation before the chunk timing)",
            )),
            why: "",
        },
        Case {
            model: "llama2-7b",
            cluster: Catalog("8x2xa100-sxm4-80gb@10Gbps"),
            plan: Inline("tp=1,pp=8,dp=2,mbs=1,gbs=64,engine=megatron,schedule=interleaved,v=4"),
            seq: 4096,
            known: Some((
                0.35,
                "the same at 10 Gbps: a send lasts longer than the chunk cycle timed at the \
                 GPUs' peak, so each other device's send is taken to meet it whole, once a \
                 chunk cycle (the \
                 estimate 43% above the simulation; 3.4 times it before the chunk timing)",
            )),
            why: "",
        },
        Case {
            model: "gpt3-2.7b",
            cluster: Catalog("l4-x4"),
            plan: Inline("pp=2,dp=2,mbs=1,gbs=8,ckpt=full,offload_opt=1"),
            seq: 4096,
            known: None,
            why: "optimizer offloaded to the CPU: both charge the CPU step and its PCIe traffic \
                  after the last backward",
        },
        Case {
            model: "gpt3-175b",
            cluster: Catalog("128x8xa100-80gb@1600Gbps"),
            plan: Inline("tp=8,pp=16,dp=8,mbs=1,m=128"),
            seq: 2048,
            known: None,
            why: "1024 GPUs: each stage's gradient reduction overlaps the other stages' drain \
                  differently",
        },
        Case {
            model: "llama3-8b",
            cluster: Toml(
                "a100-v100-10gbps",
                include_str!("../data/a100-v100-10gbps.toml"),
            ),
            plan: Json(
                "Metis's 9 stages",
                include_str!("../data/metis-llama3-8b-a100-v100-10gbps.json"),
            ),
            seq: 2048,
            known: None,
            why: "10 Gbps: a node's network carries one stage's activations beside the next \
                  stage's gradients; both price every send on it together",
        },
        Case {
            model: "gpt3-350m",
            cluster: Toml(
                "a100-v100-100gbps",
                include_str!("../data/a100-v100-100gbps.toml"),
            ),
            plan: Json(
                "32 A100 replicas at TP 1 + 24 V100 replicas at TP 4, one stage",
                include_str!("../data/mixed-tp-gpt3-350m-a100-v100.json"),
            ),
            seq: 2048,
            known: None,
            why: "replicas at different TP degrees (Sailor): the gradient rings of one DP group \
                  span A100 and V100 replicas, and each bucket waits for the slower replicas' \
                  backward in the simulator (7.1% apart while its buckets counted the tied \
                  embedding twice)",
        },
        // Plans the seed planners found on docs/planners.md's quality suite, where the two
        // parted by 13-58% before the estimate learned what the simulator does with them.
        Case {
            model: "gpt3-1.3b",
            cluster: Catalog("2x8xv100-sxm2-16gb@25Gbps+4x2xt4@10Gbps"),
            plan: Json(
                "Mist's 3 stages, the middle one on 8 T4s",
                include_str!("../data/mist-gpt3-1.3b-v100-t4.json"),
            ),
            seq: 2048,
            known: None,
            why: "eight 10 Gbps T4s send into one 25 Gbps V100 node: each end of a send at its \
                  own node's bandwidth in both (pricing both ends at 10 Gbps was 34% slow)",
        },
        Case {
            model: "gpt3-2.7b",
            cluster: Catalog("1x4xrtx-4090@10Gbps+2x2xrtx-3090@10Gbps"),
            plan: Json(
                "Mist's 4 stages on three 10 GbE workstations",
                include_str!("../data/mist-gpt3-2.7b-lab-8-consumer.json"),
            ),
            seq: 2048,
            known: None,
            why: "stage 0's activations and stage 2's gradients into node 2 leave a third of a \
                  1F1B cycle apart and never meet (the estimate took every other send on a \
                  network to meet it: 13% slow)",
        },
        Case {
            model: "llama2-13b",
            cluster: Catalog("8x4xrtx-4090@25Gbps+4x2xrtx-3090@10Gbps"),
            plan: Json(
                "Mist's 4 ZeRO-1 stages with offloading",
                include_str!("../data/mist-llama2-13b-gamer-farm.json"),
            ),
            seq: 2048,
            known: Some((
                0.11,
                "ZeRO-1 on 10-25 Gbps: the parameter gathers ahead of each stage's first \
                 forward (Megatron's overlap-param-gather) are on the critical path in both, \
                 but on stages 1 and 2 the simulator's per-layer gathers, beside the \
                 pipeline's sends, take 0.2-0.5 s longer than the estimate's ring (before the \
                 gathers moved there the two parted by 18%); Megatron's FP32 gradients \
                 doubled the reduce-scatters after the last backward, and the two parted \
                 from +5.9% to +9.9%",
            )),
            why: "",
        },
        Case {
            model: "metis-moe-10b",
            cluster: Catalog("2x8xv100-sxm2-32gb@50Gbps+4x4xa10@25Gbps"),
            plan: Json(
                "Ditto's 9 stages, two TP groups of 4 across 25 Gbps nodes",
                include_str!("../data/ditto-moe-10b-cross-node-tp.json"),
            ),
            seq: 2048,
            known: Some((
                0.11,
                "TP groups across nodes: both count the two groups' all-reduces sharing node \
                 4's network and the pipeline sends beside them (58% apart before the estimate \
                 counted the sharing; 18% until the simulator shared links max-min fairly, \
                 each ring holding at a hop no more than its slowest hop lets it use). The \
                 estimate has the two groups share it all the time; in the simulation they \
                 meet there only part of it since Megatron's host loop over the experts \
                 (MOE_HOST_S_PER_LOCAL_EXPERT) lengthened every MoE layer's compute between \
                 the all-reduces: -0.3% before, -10.2% since",
            )),
            why: "",
        },
        Case {
            model: "mixtral-8x7b",
            cluster: Catalog("2x8xh100-sxm5-80gb@400Gbps+2x8xa100-sxm4-80gb@200Gbps"),
            plan: Inline("tp=1,pp=4,dp=8,mbs=1,gbs=64,zero=1,ep=8"),
            seq: 4096,
            known: None,
            why: "expert parallelism inside each node: every MoE layer's all-to-alls on the \
                  GPUs' links (the busiest expert's load factor is a shared per-layer cost, \
                  not checked here)",
        },
        Case {
            model: "mixtral-8x7b",
            cluster: Catalog("2x8xh100-sxm5-80gb@400Gbps+2x8xa100-sxm4-80gb@200Gbps"),
            plan: Inline("tp=2,pp=2,dp=8,mbs=1,gbs=64,zero=1,sp=on,ep=8"),
            seq: 4096,
            known: None,
            why: "expert-parallel groups across two nodes: the all-to-alls cross each node's \
                  network beside the pipeline sends",
        },
        Case {
            model: "llama3-8b",
            cluster: Catalog("1x8xh100-sxm5-80gb@400Gbps+1x8xa100-sxm4-80gb@200Gbps"),
            plan: Inline("tp=1,pp=2,dp=4,cp=2,mbs=1,gbs=16,zero=1,ckpt=full"),
            seq: 32768,
            known: None,
            why: "context parallelism inside each node: the ring's transfers run beside the \
                  attention core and hide there in both; the pipeline sends each chunk to its \
                  counterpart",
        },
        Case {
            model: "llama3-8b",
            cluster: Catalog("2x4xa100-sxm4-80gb@25Gbps"),
            plan: Inline("tp=1,pp=1,dp=1,cp=8,mbs=1,gbs=4,zero=1,ckpt=full"),
            seq: 32768,
            known: None,
            why: "a ring of 8 around two nodes on 25 Gbps: its transfers outlast attention and \
                  share each node's network with the other ring members' and the gradient \
                  reduction's",
        },
        Case {
            model: "llama3-8b",
            cluster: Catalog("2x4xa100-sxm4-80gb@25Gbps"),
            plan: Inline("tp=1,pp=1,dp=1,cp=8,cp_comm=a2a,mbs=1,gbs=4,zero=1,ckpt=full"),
            seq: 32768,
            known: None,
            why: "the same by Ulysses' all-to-alls: two per layer and pass, blocking, half of \
                  each GPU's buffer crossing the 25 Gbps networks",
        },
    ]
}

impl Case {
    /// How far simulation and estimate may part on this row, and why.
    pub fn bound(&self) -> (f64, &'static str) {
        self.known.unwrap_or((AGREE, self.why))
    }

    pub fn cluster_name(&self) -> &'static str {
        match self.cluster {
            ClusterIn::Catalog(n) | ClusterIn::Toml(n, _) => n,
        }
    }

    pub fn plan_name(&self) -> &'static str {
        match self.plan {
            PlanIn::Inline(p) | PlanIn::Json(p, _) => p,
        }
    }

    /// The case's model, cluster and validated plan.
    pub fn inputs(&self) -> (Model, Cluster, Plan) {
        let model = catalog_model(self.model).unwrap();
        let cluster = match self.cluster {
            ClusterIn::Catalog(n) => catalog_cluster(n).unwrap(),
            ClusterIn::Toml(_, t) => parse_cluster_toml(t).unwrap(),
        };
        let plan = match self.plan {
            PlanIn::Inline(p) => parse_inline_plan(p, &model, &cluster).unwrap(),
            PlanIn::Json(_, j) => parse_plan_json(j).unwrap(),
        };
        validate(&plan, &model, &cluster).unwrap();
        (model, cluster, plan)
    }

    pub fn run(&self) -> Row {
        let (model, cluster, plan) = self.inputs();
        let w = Workload {
            model: &model,
            cluster: &cluster,
            seq_len: self.seq,
        };
        let valid = w.validate(&plan).unwrap();
        Row {
            model: self.model,
            cluster: self.cluster_name(),
            plan: self.plan_name(),
            estimate_s: estimate(w, &valid, &Analytic).iteration_time_s,
            simulate_s: simulate(w, &valid, &Analytic, &SimOptions::default())
                .unwrap()
                .iteration_time_s,
        }
    }
}
