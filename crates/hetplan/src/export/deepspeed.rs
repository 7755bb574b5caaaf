//! DeepSpeed: `ds_config.json`, the pipeline's layer split as the small subclass of
//! `PipelineModule` a user imports (`hetplan_pipeline.py`), one `torchrun` per node, and a
//! README.
//!
//! Read from DeepSpeed 0.19.8 (the PyPI release the tests install):
//! - `runtime/config.py`: `train_batch_size == train_micro_batch_size_per_gpu ·
//!   gradient_accumulation_steps · data-parallel world size`; with a pipeline the accumulation
//!   steps are the micro-batches of one step (`runtime/pipe/engine.py`).
//! - `runtime/zero/config.py`, `runtime/zero/offload_config.py`: `zero_optimization.stage`,
//!   `offload_optimizer {device, pin_memory, ratio}` (a ratio below 1 with ZeRO-3 only),
//!   `offload_param` (ZeRO-3 only).
//! - `runtime/pipe/engine.py:76`: ZeRO-2/3 cannot run beside pipeline parallelism
//!   (`plan::runtime`).
//! - `runtime/pipe/module.py`: `PipelineModule(partition_method='parameters'|'uniform'|
//!   'type:regex')` takes no list of boundaries; `_partition_layers` sets `self.parts` and calls
//!   `_set_bounds(start, stop)` for the rank's stage, so a subclass that overrides it runs any
//!   split (AMP does the same). `activation_checkpoint_interval=k` checkpoints every run of `k`
//!   layers of a stage (1: every layer).
//! - `runtime/pipe/topology.py`: `PipeModelDataParallelTopology` has axes `pipe, data, model`,
//!   the last fastest: stage-major ranks ([`super::ranks::stage_major`]).
//!
//! Plain DeepSpeed has no tensor parallelism for a `PipelineModule`'s layers (that is
//! Megatron-DeepSpeed's model code), so plans with TP are refused here; export them to Megatron.

use super::ranks::{self, RankLayout};
use super::{Export, ExportError, ExportFile, Job, Target};
use crate::plan::runtime::Runtime;
use crate::plan::{Plan, Precision, Recompute};
use serde_json::json;

/// Every reason DeepSpeed cannot run `plan` (empty: it can).
pub fn reasons(plan: &Plan) -> Vec<String> {
    checked(plan).err().unwrap_or_default()
}

/// The rank layout when DeepSpeed runs the plan; every reason otherwise.
fn checked(plan: &Plan) -> Result<RankLayout, Vec<String>> {
    let mut why = Runtime::Deepspeed.why_not(plan);
    let layout = ranks::stage_major(plan).map_err(|mut w| why.append(&mut w));
    let Some(first) = plan.stages.first() else {
        return Err(vec!["the plan has no stages".into()]);
    };
    let pp = plan.pipeline_depth().max(1);
    if first.tp > 1 {
        why.push(format!(
            "plain DeepSpeed has no tensor parallelism for a PipelineModule's layers; the plan \
             uses TP {} (Megatron-DeepSpeed's model code has it: export to megatron)",
            first.tp
        ));
    }
    if pp > 1 && matches!(first.recompute, Recompute::Layers(_)) {
        why.push(
            "DeepSpeed's PipelineModule checkpoints every run of k layers \
             (activation_checkpoint_interval), not the first k of a stage"
                .into(),
        );
    }
    let mbs = first.micro_batch_sizes.first().copied().unwrap_or(1);
    if mbs * first.dp as u64 * plan.micro_batches != plan.global_batch {
        why.push(format!(
            "DeepSpeed needs train_batch_size = micro-batch × accumulation steps × DP: {} ≠ {} × \
             {} × {}",
            plan.global_batch, mbs, plan.micro_batches, first.dp
        ));
    }
    match layout {
        Ok(l) if why.is_empty() => Ok(l),
        _ => Err(why),
    }
}

/// The export of `job` for DeepSpeed, or every reason it cannot run there.
pub fn export(job: Job<'_>) -> Result<Export, ExportError> {
    let plan: &Plan = job.plan;
    let layout = checked(plan).map_err(|reasons| ExportError::Unsupported {
        target: Target::Deepspeed,
        reasons,
    })?;
    let pp = plan.pipeline_depth().max(1);
    let config = ds_config(plan);
    let parts = super::layer_parts(plan);
    let mut files = vec![ExportFile {
        path: "ds_config.json".into(),
        contents: serde_json::to_string_pretty(&config).expect("JSON values serialise") + "\n",
        executable: false,
    }];
    if pp > 1 {
        files.push(ExportFile {
            path: "hetplan_pipeline.py".into(),
            contents: pipeline_module(job, &parts),
            executable: false,
        });
    }
    files.push(super::ranks_file(plan, &layout));
    files.push(ExportFile {
        path: "launch.sh".into(),
        contents: super::launch_script(
            job,
            &layout,
            "DeepSpeed",
            "Follow it with your training script and its arguments: bash launch.sh train.py \
             --deepspeed_config ds_config.json",
            None,
            29500,
        ),
        executable: true,
    });
    files.push(ExportFile {
        path: "README.md".into(),
        contents: readme(job, &layout, &parts),
        executable: false,
    });
    Ok(Export {
        target: Target::Deepspeed,
        files,
        layout,
    })
}

/// `ds_config.json` of the plan.
fn ds_config(plan: &Plan) -> serde_json::Value {
    let st = &plan.stages[0];
    let mbs = st.micro_batch_sizes.first().copied().unwrap_or(1);
    let mut zero = json!({ "stage": st.zero });
    let o = st.offload;
    if o.optimizer > 0.0 {
        let mut opt = json!({ "device": "cpu", "pin_memory": true });
        if o.optimizer < 1.0 {
            opt["ratio"] = json!(o.optimizer);
        }
        zero["offload_optimizer"] = opt;
    }
    if o.weights > 0.0 {
        zero["offload_param"] = json!({ "device": "cpu", "pin_memory": true });
    }
    let mut c = json!({
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": mbs,
        "gradient_accumulation_steps": plan.micro_batches,
        "zero_optimization": zero,
        "steps_per_print": 1,
    });
    match plan.precision {
        Precision::Bf16 => c["bf16"] = json!({ "enabled": true }),
        Precision::Fp16 => c["fp16"] = json!({ "enabled": true }),
        // Refused before export (`Target::precisions`).
        Precision::Fp32 | Precision::Tf32 | Precision::Fp8 | Precision::Fp8Rowwise => {}
    }
    if st.recompute != Recompute::None {
        // The settings of deepspeed.checkpointing (runtime/activation_checkpointing/config.py);
        // which layers are checkpointed is the model's (or PipelineModule's) business.
        c["activation_checkpointing"] = json!({
            "partition_activations": false,
            "contiguous_memory_optimization": false,
            "cpu_checkpointing": false,
        });
    }
    c
}

/// `activation_checkpoint_interval` of the plan's PipelineModule.
fn checkpoint_interval(plan: &Plan) -> usize {
    match plan.stages[0].recompute {
        Recompute::Full => 1,
        _ => 0,
    }
}

/// `hetplan_pipeline.py`: the layer split as a `PipelineModule` subclass.
fn pipeline_module(job: Job<'_>, parts: &[usize]) -> String {
    let list = parts
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let names: Vec<String> = job
        .model
        .layers
        .iter()
        .map(|l| format!("    {:?},", l.name))
        .collect();
    format!(
        r#""""The layer split hetplan chose for {model} on {cluster}, for DeepSpeed's PipelineModule.

Written by `hetplan export --to deepspeed` (hetplan {version}). Build the model as a PipelineModule
whose layers are the model's in this order (LAYERS), with HetplanPipelineModule instead of
PipelineModule:

    from hetplan_pipeline import HetplanPipelineModule
    model = HetplanPipelineModule(layers=[...], loss_fn=...)

Stage s runs layers PARTS[s] .. PARTS[s + 1] - 1. DeepSpeed's own partition methods
('parameters', 'uniform', 'type:...') take no list of boundaries; this subclass sets them where
PipelineModule._partition_layers does (deepspeed/runtime/pipe/module.py).
"""

from deepspeed.pipe import PipelineModule

PARTS = [{list}]
NUM_LAYERS = {n}
ACTIVATION_CHECKPOINT_INTERVAL = {interval}
LAYERS = [
{names}
]


class HetplanPipelineModule(PipelineModule):
    """A PipelineModule whose stages take hetplan's layer split."""

    def __init__(self, layers, **kwargs):
        kwargs.setdefault("num_stages", len(PARTS) - 1)
        kwargs.setdefault("partition_method", "hetplan")
        kwargs.setdefault("activation_checkpoint_interval", ACTIVATION_CHECKPOINT_INTERVAL)
        super().__init__(layers, **kwargs)

    def _partition_layers(self, method="uniform"):
        if method.lower() != "hetplan":
            return super()._partition_layers(method)
        if len(self._layer_specs) != NUM_LAYERS:
            raise ValueError(
                f"hetplan's split is for {{NUM_LAYERS}} layers; this PipelineModule has "
                f"{{len(self._layer_specs)}}"
            )
        if self.num_stages != len(PARTS) - 1:
            raise ValueError(
                f"hetplan's split has {{len(PARTS) - 1}} stages; num_stages is {{self.num_stages}}"
            )
        self.parts = list(PARTS)
        stage_id = self._topo.get_coord(self.global_rank).pipe
        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])
"#,
        model = job.model.name,
        cluster = job.cluster.name,
        version = env!("CARGO_PKG_VERSION"),
        n = parts.last().copied().unwrap_or(0),
        interval = checkpoint_interval(job.plan),
        names = names.join("\n"),
    )
}

fn readme(job: Job<'_>, layout: &RankLayout, parts: &[usize]) -> String {
    let plan: &Plan = job.plan;
    let st = &plan.stages[0];
    let pp = plan.pipeline_depth().max(1);
    let mut s = super::readme_head(job, "DeepSpeed", Target::Deepspeed);
    s.push_str(&format!(
        "PP {}, DP {}, ZeRO-{}; micro-batch {}, global batch {} ({} gradient accumulation \
         steps); sequence {}.\n\n## Files\n\n\
         - `ds_config.json`: pass it to `deepspeed.initialize(config=...)` (or \
         `--deepspeed_config`).\n",
        pp,
        st.dp,
        st.zero,
        st.micro_batch_sizes.first().copied().unwrap_or(1),
        plan.global_batch,
        plan.micro_batches,
        job.seq_len
    ));
    if pp > 1 {
        s.push_str(&format!(
            "- `hetplan_pipeline.py`: `HetplanPipelineModule`, a `PipelineModule` that runs the \
             plan's layer split (stage boundaries {parts:?}). Build your model with it; its layers \
             must be the model's in hetplan's order (embedding, the blocks, the head).{}\n",
            if checkpoint_interval(plan) > 0 {
                " It checkpoints every layer's activations (`activation_checkpoint_interval=1`); \
                 hetplan priced the transformer blocks as checkpointed and not the embedding or \
                 the head, so pass `checkpointable_layers=[\"<your block's class name>\"]` (a \
                 plain PipelineModule otherwise checkpoints every layer with parameters, \
                 deepspeed/runtime/pipe/module.py `_is_checkpointable`)."
            } else {
                ""
            }
        ));
    } else if st.recompute != Recompute::None {
        s.push_str(
            "- Activation checkpointing: wrap each transformer block's forward in \
             `deepspeed.checkpointing.checkpoint` (configured by the `activation_checkpointing` \
             section).\n",
        );
    }
    s.push_str(
        "- `ranks.json`: the degrees, the split and where every rank runs.\n\
         - `launch.sh`: run it on every node with `NODE_RANK` and `MASTER_ADDR` set, followed by \
         your training script and its arguments (`bash launch.sh train.py --deepspeed_config \
         ds_config.json`); it starts `torchrun` with the node's GPUs in `CUDA_VISIBLE_DEVICES`. \
         Call `deepspeed.init_distributed()` in the script: it reads torchrun's environment.\n",
    );
    s.push_str(&super::placement_table(
        job.cluster,
        layout,
        "DeepSpeed's pipeline topology orders ranks pipe, data, model (the last fastest): \
         stage `s` is global ranks `[s·DP, (s+1)·DP)`.",
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::catalog::catalog_model;

    fn problem() -> (crate::model::Model, crate::cluster::Cluster) {
        let model = catalog_model("gpt3-1.3b").unwrap();
        let cluster = crate::cluster::spec::parse_cluster_toml(
            "name = \"t\"\n[[node_group]]\ngpu = \"a100-sxm4-80gb\"\ngpus_per_node = 4\nnodes = 2\ninter_node_bandwidth = \"100 Gbps\"\n",
        )
        .unwrap();
        (model, cluster)
    }

    fn export_of(spec: &str) -> Result<Export, ExportError> {
        let (model, cluster) = problem();
        let plan = crate::plan::inline::parse_inline_plan(spec, &model, &cluster).unwrap();
        let plan = crate::plan::ValidPlan::new(plan, &model, &cluster).unwrap();
        export(Job {
            model: &model,
            cluster: &cluster,
            plan: &plan,
            seq_len: 2048,
        })
    }

    #[test]
    fn batches_and_zero_follow_the_plan() {
        let e = export_of("pp=2,dp=4,mbs=2,gbs=64,zero=1,engine=deepspeed").unwrap();
        let f = |p: &str| {
            e.files
                .iter()
                .find(|f| f.path == p)
                .unwrap()
                .contents
                .clone()
        };
        let c: serde_json::Value = serde_json::from_str(&f("ds_config.json")).unwrap();
        assert_eq!(c["train_batch_size"], 64);
        assert_eq!(c["train_micro_batch_size_per_gpu"], 2);
        assert_eq!(c["gradient_accumulation_steps"], 8);
        assert_eq!(c["zero_optimization"]["stage"], 1);
        let py = f("hetplan_pipeline.py");
        assert!(py.contains("PARTS = [0, 13, 26]"), "{py}");
        assert_eq!(e.layout.world_size(), 8);
    }

    #[test]
    fn tensor_parallel_and_zero_3_with_a_pipeline_are_refused() {
        let Err(ExportError::Unsupported { reasons, .. }) =
            export_of("tp=2,pp=2,dp=2,mbs=1,gbs=16,zero=3")
        else {
            panic!("exported")
        };
        assert!(
            reasons.iter().any(|r| r.contains("tensor parallelism")),
            "{reasons:?}"
        );
        assert!(reasons.iter().any(|r| r.contains("ZeRO")), "{reasons:?}");
    }
}
