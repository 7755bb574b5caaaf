//! Which plans each mainstream training engine can run, and why not.
//!
//! hetplan's space holds plans no mainstream engine runs (a TP degree per stage, a micro-batch
//! size per replica, ZeRO-2 beside pipelining in DeepSpeed). `Runtime::why_not` lists every
//! reason a plan cannot run on an engine; `Runtime::conform` makes the uniform parts of a plan
//! uniform (one recompute choice, one ZeRO stage, ...) where that is a choice and not a change
//! of structure. The rules come from `../shared/engines.md` (read from the engines' code,
//! November 2026: Megatron-Core 0.19, DeepSpeed 0.19.6, torchtitan 0.2.2/0.3); each rule names
//! its source. Where the sheet is silent the rule is the conservative one, said so.

use super::{Compile, LayerRange, Plan, Recompute, Schedule, Stage};
use serde::Serialize;

/// A mainstream training engine a plan may be restricted to (`--engine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    Megatron,
    Deepspeed,
    Torchtitan,
    /// PyTorch FSDP alone (no pipeline, no tensor parallelism).
    Fsdp,
}

/// The cost-model engine of the plans a search makes: the engine's own where the plan must run
/// on one (`--engine`); otherwise Megatron's behaviour (a heterogeneity-aware runtime built
/// like it), or PyTorch's (`Engine::Fsdp`) for torchao's rowwise FP8, which only PyTorch's
/// engines run.
pub fn planning_engine(runtime: Option<Runtime>, precision: super::Precision) -> super::Engine {
    match runtime {
        Some(rt) => rt.engine(),
        None if precision == super::Precision::Fp8Rowwise => super::Engine::Fsdp,
        None => super::Engine::Megatron,
    }
}

impl Runtime {
    pub const ALL: [Runtime; 4] = [
        Runtime::Megatron,
        Runtime::Deepspeed,
        Runtime::Torchtitan,
        Runtime::Fsdp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Runtime::Megatron => "megatron",
            Runtime::Deepspeed => "deepspeed",
            Runtime::Torchtitan => "torchtitan",
            Runtime::Fsdp => "fsdp",
        }
    }

    /// The engine behaviour hetplan's cost model assumes for plans run here (torchtitan's data
    /// parallelism is FSDP2).
    pub fn engine(self) -> super::Engine {
        match self {
            Runtime::Megatron => super::Engine::Megatron,
            Runtime::Deepspeed => super::Engine::Deepspeed,
            Runtime::Torchtitan | Runtime::Fsdp => super::Engine::Fsdp,
        }
    }

    /// Whether hetplan exports context parallelism and expert tensor parallelism to this
    /// engine (Megatron's `--context-parallel-size`, `--expert-tensor-parallel-size`; see
    /// `why_not` for why not elsewhere). `None` (any runtime) takes them too.
    pub fn runs_megatron_only_parallelism(runtime: Option<Runtime>) -> bool {
        runtime.is_none_or(|r| r == Runtime::Megatron)
    }

    /// ZeRO stages the engine offers with this pipeline depth.
    fn zero_stages(self, pp: usize) -> &'static [u8] {
        match self {
            // `--use-distributed-optimizer` (1); Megatron-FSDP's optim_grads (2) and
            // optim_grads_params (3) — with pipelining not documented in the sheet: refused.
            Runtime::Megatron if pp > 1 => &[0, 1],
            Runtime::Megatron => &[0, 1, 2, 3],
            // runtime/pipe/engine.py:76: ZeRO-2/3 are incompatible with pipeline parallelism.
            Runtime::Deepspeed if pp > 1 => &[0, 1],
            Runtime::Deepspeed => &[0, 1, 2, 3],
            // data_parallel_replicate_degree (0) or data_parallel_shard_degree (FSDP2: 3).
            Runtime::Torchtitan => &[0, 3],
            // NO_SHARD, SHARD_GRAD_OP, FULL_SHARD.
            Runtime::Fsdp => &[0, 2, 3],
        }
    }

    /// Whether the engine trains in precision `p`: DeepSpeed's engine has no FP8 (its config
    /// has no FP8 section); Megatron (Transformer Engine) and FSDP2 with torchao's Float8 run
    /// per-tensor FP8; torchao's rowwise recipe runs under FSDP2 and torchtitan, whose 0.3.0
    /// takes no other (`Float8LinearConverter.Config.recipe_name`: `rowwise` or
    /// `rowwise_with_gw_hp`, components/quantization/float8.py; its December 2024 benchmarks
    /// ran per-tensor scaling, since dropped), while Transformer Engine's recipes are per-tensor,
    /// block and MX scaling; every engine runs FP32, FP16 and BF16.
    pub fn trains_in(self, p: super::Precision) -> bool {
        use super::Precision;
        match p {
            Precision::Fp8 => matches!(self, Runtime::Megatron | Runtime::Fsdp),
            Precision::Fp8Rowwise => matches!(self, Runtime::Torchtitan | Runtime::Fsdp),
            Precision::Bf16 | Precision::Fp16 | Precision::Fp32 | Precision::Tf32 => true,
        }
    }

    /// Whether the engine overlaps TP communication with the GEMMs (`Plan::tp_comm_overlap`):
    /// Megatron's `--tp-comm-overlap`, torchtitan's `compile.enable_async_tensor_parallel`;
    /// DeepSpeed's and FSDP's tensor parallelism has no such overlap.
    pub fn overlaps_tp(self) -> bool {
        matches!(self, Runtime::Megatron | Runtime::Torchtitan)
    }

    /// Whether a uniform layout of `tp`-wide groups in `pp` stages is one the engine runs
    /// (FSDP alone has neither), before a plan is laid out: the check `why_not` makes of it.
    pub fn runs_layout(self, tp: u64, pp: u64) -> bool {
        self != Runtime::Fsdp || (tp == 1 && pp == 1)
    }

    /// Every reason `plan` cannot run on this engine; empty when it can.
    pub fn why_not(self, plan: &Plan) -> Vec<String> {
        let mut why = Vec::new();
        let name = self.name();
        let pp = plan.pipeline_depth().max(1);
        let Some(first) = plan.stages.first() else {
            return vec!["the plan has no stages".into()];
        };
        let same = |f: &dyn Fn(&Stage) -> String| plan.stages.iter().all(|s| f(s) == f(first));
        if !self.trains_in(plan.precision) {
            why.push(match plan.precision {
                super::Precision::Fp8Rowwise => format!(
                    "{name} has no rowwise FP8 (torchao's recipe); the plan's matrix products \
                     are FP8 with per-row scales"
                ),
                _ if self == Runtime::Torchtitan => format!(
                    "{name} runs FP8 by torchao's rowwise recipe only (fp8-rowwise); the plan's \
                     matrix products are FP8 with per-tensor scales"
                ),
                _ => format!(
                    "{name} trains in FP32, FP16 or BF16; the plan's matrix products are FP8"
                ),
            });
        }
        if self == Runtime::Fsdp && pp > 1 {
            why.push(format!(
                "{name} has no pipeline parallelism; the plan has {pp} stages"
            ));
        }
        if self == Runtime::Fsdp && plan.stages.iter().any(|s| s.tp > 1) {
            why.push(format!("{name} alone has no tensor parallelism"));
        }
        if plan.stages.iter().any(|s| !s.replica_tp.is_empty()) {
            why.push(format!(
                "{name} runs one TP degree in every replica; the plan mixes TP degrees in a stage"
            ));
        }
        // Megatron: initialize_model_parallel takes single sizes; torchtitan: one mesh;
        // DeepSpeed: one pipeline grid.
        if !same(&|s| s.tp.to_string()) {
            why.push(format!(
                "{name} runs one TP degree in every stage; the plan's are {}",
                list(plan, |s| s.tp.to_string())
            ));
        }
        if !same(&|s| s.dp.to_string()) {
            why.push(format!(
                "{name} runs one data-parallel degree in every stage; the plan's are {}",
                list(plan, |s| s.dp.to_string())
            ));
        }
        // Expert parallelism: Megatron's `--expert-model-parallel-size` and torchtitan's
        // `expert_parallel_degree` are single sizes; hetplan exports it to those two.
        if plan.stages.iter().any(|s| s.ep > 1) {
            // Stages without experts keep 1; the others must agree (the export checks which
            // stages have experts).
            let mut eps: Vec<u32> = plan
                .stages
                .iter()
                .map(|s| s.ep)
                .filter(|&e| e > 1)
                .collect();
            eps.sort_unstable();
            eps.dedup();
            let exports_ep = matches!(self, Runtime::Megatron | Runtime::Torchtitan);
            if exports_ep && eps.len() > 1 {
                why.push(format!(
                    "{name} runs one expert-parallel degree in every stage; the plan's are {}",
                    list(plan, |s| s.ep.to_string())
                ));
            }
            if self == Runtime::Megatron
                && (plan.stages.iter()).any(|s| s.ep > 1 && s.tp > 1 && !s.sequence_parallel)
            {
                // megatron-core ModelParallelConfig: "When using expert parallelism and tensor
                // parallelism for training, sequence parallelism must be used".
                why.push(
                    "Megatron runs expert parallelism beside tensor parallelism only with \
                     sequence parallelism; the plan has it off"
                        .into(),
                );
            }
            if !exports_ep {
                why.push(format!(
                    "hetplan exports expert parallelism to Megatron and torchtitan; {name} runs \
                     the plan without it"
                ));
            }
        }
        // Context parallelism: Megatron's `--context-parallel-size` (ring attention with its
        // transfers overlapped, one size; `Plan` validation makes it one). torchtitan 0.3's
        // language models run FlexAttention, whose CP all-gathers the keys and values before
        // attention (distributed/context_parallel/api.py:73) — not the ring hetplan prices;
        // DeepSpeed's sequence parallelism is Ulysses (all-to-all over heads); FSDP has none.
        if first.cp > 1 && !Runtime::runs_megatron_only_parallelism(Some(self)) {
            why.push(format!(
                "hetplan exports context parallelism (ring attention) to Megatron; {name} runs \
                 the plan without it"
            ));
        }
        // Expert tensor parallelism: Megatron's `--expert-tensor-parallel-size`, one degree.
        let mut etps: Vec<u32> = plan.stages.iter().filter_map(|s| s.etp).collect();
        etps.sort_unstable();
        etps.dedup();
        if !etps.is_empty() && !Runtime::runs_megatron_only_parallelism(Some(self)) {
            why.push(format!(
                "hetplan exports expert tensor parallelism to Megatron; {name} runs the plan \
                 without it"
            ));
        }
        if etps.len() > 1 {
            why.push(format!(
                "{name} runs one expert tensor-parallel degree; the plan's are {}",
                list(plan, |s| s.expert_tp().to_string())
            ));
        }
        if plan.tp_comm_overlap && plan.stages.iter().any(|s| s.tp > 1) && !self.overlaps_tp() {
            why.push(format!(
                "hetplan exports tensor-parallel communication overlap to Megatron and \
                 torchtitan; {name} runs the plan without it"
            ));
        }
        if !plan.compile.is_on() && !self.engine().runs_pytorch_code() {
            why.push(format!(
                "{name} runs its own fused kernels; the plan runs PyTorch's model code {} \
                 (compile={})",
                if plan.compile == Compile::Off {
                    "eagerly"
                } else {
                    "with an eager loss"
                },
                plan.compile.name()
            ));
        }
        if plan.moe_capacity_factor.is_some() && self != Runtime::Megatron {
            why.push(format!(
                "hetplan exports the MoE capacity factor (token dropping) to Megatron; {name} \
                 runs the plan without it"
            ));
        }
        // `--micro-batch-size`, `train_micro_batch_size_per_gpu`, `local_batch_size`: global.
        let mbs = first.micro_batch_sizes.first().copied().unwrap_or(0);
        if plan
            .stages
            .iter()
            .any(|s| s.micro_batch_sizes.iter().any(|&b| b != mbs) || !s.replica_samples.is_empty())
        {
            why.push(format!(
                "{name} runs one micro-batch size on every GPU; the plan's replicas take different \
                 ones"
            ));
        }
        match (self, plan.schedule) {
            (Runtime::Megatron, Schedule::Gpipe) if pp > 1 => {
                why.push("Megatron has no GPipe schedule (1F1B and interleaved 1F1B only)".into())
            }
            (Runtime::Deepspeed, Schedule::Gpipe | Schedule::Interleaved { .. }) if pp > 1 => {
                why.push("DeepSpeed's pipeline engine runs 1F1B only (TrainSchedule)".into())
            }
            _ => {}
        }
        let zeros = self.zero_stages(pp);
        if let Some(s) = plan.stages.iter().find(|s| !zeros.contains(&s.zero)) {
            why.push(format!(
                "{name} offers ZeRO stages {zeros:?} with {pp} pipeline stage(s); the plan uses \
                 ZeRO-{}",
                s.zero
            ));
        }
        if !same(&|s| s.zero.to_string()) {
            why.push(format!(
                "{name} shards every stage alike; the plan's ZeRO stages are {}",
                list(plan, |s| s.zero.to_string())
            ));
        }
        // Megatron: one --recompute-granularity and one --recompute-num-layers; torchtitan:
        // one [activation_checkpoint] mode; DeepSpeed: one activation_checkpointing section.
        if !same(&|s| format!("{:?}", s.recompute)) {
            why.push(format!(
                "{name} checkpoints every stage alike; the plan's choices are {}",
                list(plan, |s| format!("{:?}", s.recompute))
            ));
        }
        let recompute_ok = |r: Recompute| match self {
            // --recompute-granularity selective|full: no op-level policy.
            Runtime::Megatron => r != Recompute::Ops,
            // deepspeed.checkpointing wraps whole layers: no selective variant in the sheet.
            Runtime::Deepspeed => !matches!(r, Recompute::Selective | Recompute::Ops),
            // FullAC or SelectiveAC, whose policy is the op-level one (`Recompute::Ops`), not
            // the attention core alone; selective_ac_option "<int>" was every k-th layer, not
            // the first k.
            Runtime::Torchtitan => matches!(r, Recompute::None | Recompute::Full | Recompute::Ops),
            Runtime::Fsdp => matches!(r, Recompute::None | Recompute::Full),
        };
        if let Some(s) = plan.stages.iter().find(|s| !recompute_ok(s.recompute)) {
            why.push(format!("{name} cannot checkpoint as {:?}", s.recompute));
        }
        if !same(&|s| s.sequence_parallel.to_string()) {
            why.push(format!(
                "{name} turns sequence parallelism on or off for all stages; the plan mixes them"
            ));
        }
        // Offloading: Megatron `--optimizer-offload-fraction F` (one F); DeepSpeed
        // offload_optimizer (a ratio with ZeRO-3 only) and offload_param (ZeRO-3, all);
        // torchtitan/FSDP enable_cpu_offload / CPUOffload (parameters, gradients and optimizer
        // all in host memory).
        if !same(&|s| format!("{:?}", s.offload)) {
            why.push(format!(
                "{name} offloads every stage alike; the plan's stages offload {}",
                list(plan, |s| format!("({})", s.offload))
            ));
        }
        for s in &plan.stages {
            let o = s.offload;
            let problem = match self {
                Runtime::Megatron if o.weights > 0.0 || o.gradients > 0.0 || o.activations > 0.0 => {
                    Some("only a fraction of the optimizer state (--optimizer-offload-fraction)")
                }
                Runtime::Deepspeed
                    if o.gradients > 0.0
                        || o.activations > 0.0
                        || (s.zero < 3 && (o.weights > 0.0 || !matches!(o.optimizer, 0.0 | 1.0)))
                        || (o.weights > 0.0 && o.weights < 1.0) =>
                {
                    Some("the whole optimizer state, a fraction of it with ZeRO-3, and with ZeRO-3 all parameters")
                }
                Runtime::Torchtitan | Runtime::Fsdp
                    if !(o.is_none()
                        || (o.weights == 1.0
                            && o.gradients == 1.0
                            && o.optimizer == 1.0
                            && o.activations == 0.0)) =>
                {
                    Some("parameters, gradients and optimizer state together (CPU offload) or nothing")
                }
                _ => None,
            };
            if let Some(p) = problem {
                why.push(format!("{name} offloads {p}; the plan offloads {o}"));
                break;
            }
        }
        why
    }

    /// `plan` with its per-stage choices made uniform the way this engine takes them, where
    /// that keeps the plan's structure: the strongest ZeRO stage the engine offers, the
    /// strongest checkpointing it runs, sequence parallelism on wherever it is on anywhere, the
    /// largest optimizer offload fraction, a schedule it runs. `None` when the structure itself
    /// (TP and DP degrees, micro-batch sizes, pipeline depth) does not fit the engine; the
    /// result may still not run (`why_not`) or not fit in memory.
    /// The one element type the runtime reduces gradients in, whatever it trains in, where it
    /// has one: torchtitan reduce-scatters in FP32 only (`mixed_precision_reduce`, whose one
    /// value is "float32", config/configs.py). The others follow the plan.
    pub fn gradient_dtype(self) -> Option<super::Precision> {
        (self == Runtime::Torchtitan).then_some(super::Precision::Fp32)
    }

    pub fn conform(self, plan: &Plan) -> Option<Plan> {
        let mut p = plan.clone();
        let pp = p.pipeline_depth().max(1);
        if self == Runtime::Fsdp && pp > 1 {
            return None;
        }
        // Without context parallelism a CP group's replicas take whole samples: cp times the
        // samples per micro-batch, 1/cp of the micro-batches.
        let cp = p.stages.first().map_or(1, |s| s.cp.max(1)) as u64;
        if cp > 1 && !Runtime::runs_megatron_only_parallelism(Some(self)) {
            let interleaved = matches!(p.schedule, Schedule::Interleaved { .. });
            if !p.micro_batches.is_multiple_of(cp)
                || (interleaved && !(p.micro_batches / cp).is_multiple_of(pp as u64))
            {
                return None;
            }
            p.micro_batches /= cp;
            for s in &mut p.stages {
                s.cp = 1;
            }
        }
        let zeros = self.zero_stages(pp);
        let want = p.stages.iter().map(|s| s.zero).max()?;
        let zero = zeros
            .iter()
            .copied()
            .find(|&z| z >= want)
            .unwrap_or(*zeros.last()?);
        let strongest = p
            .stages
            .iter()
            .map(|s| s.recompute)
            .max_by_key(|r| match r {
                Recompute::None => (0, 0),
                Recompute::Selective => (1, 0),
                Recompute::Ops => (1, 1),
                Recompute::Layers(k) => (2, *k),
                Recompute::Full => (3, 0),
            })?;
        // Where the engine has no such checkpointing, the one that keeps less: what fitted
        // still fits. torchtitan's selective checkpointing is the op-level one, which keeps
        // less than the attention core's.
        let recompute = match (self, strongest) {
            (Runtime::Torchtitan, Recompute::Selective) => Recompute::Ops,
            (Runtime::Megatron, Recompute::Ops)
            | (Runtime::Deepspeed, Recompute::Selective | Recompute::Ops)
            | (Runtime::Torchtitan, Recompute::Layers(_))
            | (Runtime::Fsdp, Recompute::Selective | Recompute::Layers(_) | Recompute::Ops) => {
                Recompute::Full
            }
            (_, r) => r,
        };
        // Expert parallelism: one degree (the smallest the plan uses, the likeliest to divide
        // every stage) where the engine has it, none elsewhere; Megatron runs it beside TP only
        // with sequence parallelism.
        let ep = match self {
            Runtime::Megatron | Runtime::Torchtitan => {
                p.stages.iter().map(|s| s.ep).filter(|&e| e > 1).min()
            }
            Runtime::Deepspeed | Runtime::Fsdp => None,
        };
        let etp = match self {
            Runtime::Megatron => p.stages.iter().filter_map(|s| s.etp).min(),
            _ => None,
        };
        let sp = p.stages.iter().any(|s| s.sequence_parallel)
            || (self == Runtime::Megatron && ep.is_some() && p.stages.iter().any(|s| s.tp > 1));
        let optimizer = p
            .stages
            .iter()
            .map(|s| s.offload.optimizer)
            .fold(0.0, f64::max);
        let offload = match self {
            Runtime::Megatron => super::Offload {
                optimizer,
                ..Default::default()
            },
            Runtime::Deepspeed if zero < 3 => super::Offload {
                optimizer: if optimizer > 0.0 { 1.0 } else { 0.0 },
                ..Default::default()
            },
            Runtime::Deepspeed => super::Offload {
                optimizer,
                ..Default::default()
            },
            Runtime::Torchtitan | Runtime::Fsdp => Default::default(),
        };
        for s in &mut p.stages {
            s.zero = zero;
            s.recompute = match recompute {
                Recompute::Layers(k) if k as usize >= s.layers.len() => Recompute::Full,
                r => r,
            };
            // A no-op without TP, and what the exports write (`--sequence-parallel` with TP).
            s.sequence_parallel = sp && s.tp > 1;
            s.offload = offload;
            s.ep = match ep {
                Some(e) if s.ep > 1 => e,
                _ => 1,
            };
            // Expert tensor parallelism: Megatron's one degree, the smallest; none elsewhere.
            s.etp = match etp {
                Some(e) if s.etp.is_some() && s.tp.is_multiple_of(e) && e != s.tp => Some(e),
                _ => None,
            };
        }
        p.engine = self.engine();
        if let Some(g) = self.gradient_dtype() {
            p.collective_dtypes.gradients = Some(g);
        }
        // Eager model code is PyTorch's; async TP needs it compiled.
        p.compile = p.compile.under(p.engine);
        p.tp_comm_overlap &= self.overlaps_tp() && sp && p.compile != Compile::Off;
        p.schedule = match (self, p.schedule) {
            (Runtime::Megatron, Schedule::Gpipe) => Schedule::OneFOneB,
            (Runtime::Deepspeed, Schedule::Interleaved { .. }) => {
                p.stages = merge_chunks(&p.stages, pp);
                Schedule::OneFOneB
            }
            (Runtime::Deepspeed, _) => Schedule::OneFOneB,
            (_, s) => s,
        };
        Some(p)
    }
}

/// "2, 1, 1": a per-stage field, stage by stage.
fn list(plan: &Plan, f: impl Fn(&Stage) -> String) -> String {
    plan.stages.iter().map(f).collect::<Vec<_>>().join(", ")
}

/// The `pp` stages of an interleaved plan's chunks: stage g takes as many layers as its chunks
/// held, laid out in stage order.
fn merge_chunks(chunks: &[Stage], pp: usize) -> Vec<Stage> {
    let mut start = 0;
    (0..pp)
        .map(|g| {
            let len: usize = (g..chunks.len())
                .step_by(pp)
                .map(|j| chunks[j].layers.len())
                .sum();
            let mut st = chunks[g].clone();
            st.layers = LayerRange {
                start,
                end: start + len,
            };
            start += len;
            st
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::GpuId;
    use crate::plan::Offload;

    fn stage(layers: (usize, usize), gpus: &[u32], tp: u32, mbs: u64) -> Stage {
        let dp = gpus.len() as u32 / tp;
        Stage {
            etp: None,
            ep: 1,
            cp: 1,
            layers: LayerRange {
                start: layers.0,
                end: layers.1,
            },
            devices: gpus.iter().map(|&g| GpuId { node: 0, local: g }).collect(),
            tp,
            replica_tp: Vec::new(),
            dp,
            micro_batch_sizes: vec![mbs; dp as usize],
            zero: 0,
            recompute: Recompute::None,
            offload: Offload::default(),
            sequence_parallel: false,
            replica_samples: Vec::new(),
        }
    }

    fn plan(stages: Vec<Stage>) -> Plan {
        Plan {
            global_batch: 16,
            micro_batches: 4,
            schedule: Schedule::OneFOneB,
            engine: Default::default(),
            precision: Default::default(),
            collective_dtypes: Default::default(),
            moe_capacity_factor: None,
            cp_comm: Default::default(),
            tp_comm_overlap: false,
            compile: Default::default(),
            stages,
            made_for: None,
        }
    }

    #[test]
    fn a_uniform_pipeline_runs_on_megatron_deepspeed_and_torchtitan_not_fsdp() {
        let p = plan(vec![
            stage((0, 3), &[0, 1], 1, 2),
            stage((3, 8), &[2, 3], 1, 2),
        ]);
        for rt in [Runtime::Megatron, Runtime::Deepspeed, Runtime::Torchtitan] {
            assert!(rt.why_not(&p).is_empty(), "{rt:?}: {:?}", rt.why_not(&p));
        }
        let fsdp = Runtime::Fsdp.why_not(&p);
        assert_eq!(fsdp.len(), 1, "{fsdp:?}");
        assert!(fsdp[0].contains("no pipeline"));
    }

    /// `runs_layout` drops a uniform layout before it is laid out only where `why_not` refuses
    /// every plan of that layout, and keeps every one it runs.
    #[test]
    fn runs_layout_agrees_with_why_not_on_uniform_layouts() {
        let gpus: Vec<u32> = (0..8).collect();
        for rt in Runtime::ALL {
            for tp in [1u32, 2, 4] {
                for pp in [1usize, 2] {
                    let per = gpus.len() / pp;
                    let stages = (0..pp)
                        .map(|k| stage((4 * k, 4 * k + 4), &gpus[k * per..(k + 1) * per], tp, 1))
                        .collect();
                    let runs = rt.why_not(&plan(stages)).is_empty();
                    assert_eq!(
                        rt.runs_layout(tp as u64, pp as u64),
                        runs,
                        "{rt:?} tp {tp} pp {pp}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_reason_is_listed() {
        let mut a = stage((0, 3), &[0, 1], 2, 2);
        a.zero = 2;
        a.recompute = Recompute::Layers(1);
        let mut b = stage((3, 8), &[2, 3, 4], 1, 1);
        b.micro_batch_sizes = vec![1, 1, 0];
        let mut p = plan(vec![a, b]);
        p.schedule = Schedule::Gpipe;
        let why = Runtime::Megatron.why_not(&p);
        for what in [
            "one TP degree in every stage",
            "one data-parallel degree",
            "one micro-batch size",
            "no GPipe",
            "ZeRO-2",
            "checkpoints every stage alike",
        ] {
            assert!(why.iter().any(|w| w.contains(what)), "{what}: {why:?}");
        }
        assert!(Runtime::Megatron.conform(&p).is_some());
    }

    #[test]
    fn conform_makes_choices_uniform_and_keeps_structure() {
        let mut a = stage((0, 3), &[0, 1], 1, 2);
        a.zero = 1;
        a.recompute = Recompute::Selective;
        a.offload.optimizer = 0.5;
        let mut b = stage((3, 8), &[2, 3], 1, 2);
        b.recompute = Recompute::Layers(2);
        let mut p = plan(vec![a, b]);
        p.schedule = Schedule::Gpipe;
        let m = Runtime::Megatron.conform(&p).unwrap();
        assert!(
            Runtime::Megatron.why_not(&m).is_empty(),
            "{:?}",
            Runtime::Megatron.why_not(&m)
        );
        assert!(m
            .stages
            .iter()
            .all(|s| s.zero == 1 && s.recompute == Recompute::Layers(2)));
        let d = Runtime::Deepspeed.conform(&p).unwrap();
        assert!(
            Runtime::Deepspeed.why_not(&d).is_empty(),
            "{:?}",
            Runtime::Deepspeed.why_not(&d)
        );
        assert!(d.stages.iter().all(|s| s.offload.optimizer == 1.0));
        let t = Runtime::Torchtitan.conform(&p).unwrap();
        assert!(
            Runtime::Torchtitan.why_not(&t).is_empty(),
            "{:?}",
            Runtime::Torchtitan.why_not(&t)
        );
        assert!(t
            .stages
            .iter()
            .all(|s| s.zero == 3 && s.recompute == Recompute::Full));
        assert!(Runtime::Fsdp.conform(&p).is_none());
        // Interleaved chunks merge back into stages for DeepSpeed.
        let mut i = plan(vec![
            stage((0, 2), &[0, 1], 1, 2),
            stage((2, 4), &[2, 3], 1, 2),
            stage((4, 6), &[0, 1], 1, 2),
            stage((6, 8), &[2, 3], 1, 2),
        ]);
        i.schedule = Schedule::Interleaved { virtual_stages: 2 };
        let d = Runtime::Deepspeed.conform(&i).unwrap();
        assert_eq!(d.stages.len(), 2);
        assert_eq!(d.stages[0].layers, LayerRange { start: 0, end: 4 });
        assert_eq!(d.schedule, Schedule::OneFOneB);
    }

    #[test]
    fn op_level_checkpointing_is_torchtitans_selective_and_nobody_elses() {
        let both = |r: Recompute| {
            let mut a = stage((0, 3), &[0, 1], 1, 2);
            a.recompute = r;
            let mut b = stage((3, 8), &[2, 3], 1, 2);
            b.recompute = r;
            plan(vec![a, b])
        };
        let ops = both(Recompute::Ops);
        assert!(Runtime::Torchtitan.why_not(&ops).is_empty());
        for rt in [Runtime::Megatron, Runtime::Deepspeed] {
            let why = rt.why_not(&ops);
            assert!(
                why.iter().any(|w| w.contains("cannot checkpoint as Ops")),
                "{why:?}"
            );
            // What it runs instead keeps less, so what fitted still fits.
            let c = rt.conform(&ops).unwrap();
            assert!(c.stages.iter().all(|s| s.recompute == Recompute::Full));
        }
        // torchtitan's SelectiveAC is the op-level policy, not the attention core alone.
        let attention_core = both(Recompute::Selective);
        let why = Runtime::Torchtitan.why_not(&attention_core);
        assert!(why.iter().any(|w| w.contains("Selective")), "{why:?}");
        let t = Runtime::Torchtitan.conform(&attention_core).unwrap();
        assert!(t.stages.iter().all(|s| s.recompute == Recompute::Ops));
    }
}
