//! The analytic cost model: iteration time and per-GPU memory of a validated plan.
//!
//! Every formula is derived in `docs/cost-model.md`; the constants live in `constants`, each
//! with its source. The cost model is what planners search with; the simulator (`sim`) is the
//! independent judge.

pub mod comm;
pub mod compute;
pub mod constants;
pub mod memory;
pub mod overlap;
pub mod profiled;

pub use compute::{Analytic, ComputeTimes, LayerShape, LayerTime, TimeSource};
pub use memory::MemoryBreakdown;
pub use profiled::Profiled;

use crate::cluster::{Cluster, GpuId};
use crate::model::Model;
use crate::plan::{Engine, LayerRange, Plan, Recompute, Schedule, Stage};
use crate::units::{Bytes, Flop, Seconds};
use comm::{collective_time, p2p_time, Collective};
use constants as k;
use serde::Serialize;
use std::collections::BTreeMap;

/// What is being trained: the model at a sequence length.
#[derive(Clone, Copy, Debug)]
pub struct Workload<'a> {
    pub model: &'a Model,
    pub cluster: &'a Cluster,
    pub seq_len: u64,
}

/// Cost of one stage (the slowest of its DP replicas sets the pace).
#[derive(Clone, Debug, Serialize)]
pub struct StageEstimate {
    pub index: usize,
    pub layers: LayerRange,
    pub tp: u32,
    pub dp: u32,
    pub micro_batch_sizes: Vec<u64>,
    /// Per micro-batch, slowest replica: forward and backward compute (backward includes
    /// recomputation), tensor-parallel communication, pipeline sends.
    pub forward: Seconds,
    pub backward: Seconds,
    pub recompute: Seconds,
    pub tp_comm: Seconds,
    pub p2p: Seconds,
    /// ZeRO-2/3 and offload traffic per micro-batch that compute could not hide.
    pub exposed_per_micro_batch: Seconds,
    /// Stable micro-batch time tᵢ (Mist Eq. 1).
    pub micro_batch_time: Seconds,
    /// Data-parallel gradient/parameter synchronisation, total and left exposed.
    pub dp_sync: Seconds,
    pub dp_sync_exposed: Seconds,
    pub optimizer: Seconds,
    /// Extra time of the first and last micro-batches dᵢ (Mist Eq. 1).
    pub extra: Seconds,
    /// Memory of the stage's most loaded GPU.
    pub memory: MemoryBreakdown,
    pub compute_source: TimeSource,
}

/// One GPU's memory.
#[derive(Clone, Debug, Serialize)]
pub struct GpuEstimate {
    pub gpu: GpuId,
    pub node: u32,
    pub local: u32,
    pub gpu_type: String,
    pub stage: usize,
    pub replica: usize,
    pub peak_memory_bytes: f64,
    pub capacity_bytes: f64,
    pub fits: bool,
}

/// The estimate of one iteration.
#[derive(Clone, Debug, Serialize)]
pub struct Estimate {
    pub iteration_time_s: f64,
    pub samples_per_s: f64,
    pub tokens_per_s: f64,
    pub tokens_per_s_per_gpu: f64,
    pub mfu: f64,
    pub hfu: f64,
    pub bubble_fraction: f64,
    pub fits: bool,
    pub peak_memory_bytes: f64,
    pub num_gpus: usize,
    pub stages: Vec<StageEstimate>,
    pub per_gpu: Vec<GpuEstimate>,
    /// Things the user should know: interpolated profile points, OOMs and by how much.
    pub notes: Vec<String>,
}

/// Number of stage devices on each node: they share the node's network.
fn devices_per_node(devs: &[GpuId]) -> BTreeMap<u32, usize> {
    let mut m = BTreeMap::new();
    for d in devs {
        *m.entry(d.node).or_insert(0) += 1;
    }
    m
}

/// Per-replica, per-micro-batch timing of a stage.
struct ReplicaTime {
    forward: f64,
    backward: f64,
    recompute: f64,
    tp_comm: f64,
    p2p: f64,
    exposed: f64,
    hw_flop: f64,
    source: TimeSource,
}

/// Model FLOPs of one forward of `layers` for `tokens` tokens, split into what a full forward
/// recomputation and a selective one would repeat (Korthikanti's counting, see `model_flop`).
fn forward_model_flop(
    model: &Model,
    layers: std::ops::Range<usize>,
    tokens: f64,
    seq: u64,
) -> (f64, f64) {
    let mut all = 0.0;
    let mut attn = 0.0;
    for i in layers {
        for op in &model.layers[i].ops {
            match &op.kind {
                crate::model::OpKind::Gemm {
                    k,
                    n,
                    count,
                    token_fraction,
                    ..
                } => {
                    all +=
                        2.0 * tokens * token_fraction * (*k as f64) * (*n as f64) * (*count as f64)
                }
                crate::model::OpKind::Attention {
                    heads,
                    head_dim,
                    implementation,
                    ..
                } => {
                    let f = 4.0 * tokens * seq as f64 * (*heads as f64) * (*head_dim as f64);
                    all += f;
                    if *implementation == crate::model::AttnImpl::Torch {
                        attn += f;
                    }
                }
                crate::model::OpKind::Opaque { flops_per_sample } => {
                    all += tokens * flops_per_sample
                }
                _ => {}
            }
        }
    }
    (all, attn)
}

/// Estimates one training iteration of `plan`. The plan must have passed
/// `plan::validate::validate` against the same model and cluster.
pub fn estimate(w: Workload<'_>, plan: &Plan, compute: &dyn ComputeTimes) -> Estimate {
    let model = w.model;
    let cluster = w.cluster;
    let seq = w.seq_len;
    let tokens_per_sample = model.tokens_per_sample(seq) as f64;
    let m = plan.micro_batches.max(1);
    let depth = plan.pipeline_depth().max(1);
    let v = match plan.schedule {
        Schedule::Interleaved { virtual_stages } => virtual_stages.max(1) as usize,
        _ => 1,
    };
    let elem = plan.precision.element_bytes();
    let (w_bytes, g_bytes, _) = memory::state_bytes(plan.precision);
    // Element sizes on the wire of parameter gathers and gradient reductions.
    let (pg_bytes, gg_bytes) = plan.collective_element_bytes();
    let mut notes = Vec::new();
    let mut stages = Vec::with_capacity(plan.stages.len());
    let mut per_gpu = Vec::new();
    let mut hw_flop_total = 0.0;
    let mut model_flop_hw = 0.0;

    for (si, st) in plan.stages.iter().enumerate() {
        let gpn = devices_per_node(&st.devices);
        let conc = |node: u32| gpn.get(&node).copied().unwrap_or(0);
        let params_local = memory::stage_params(model, st.layers.iter(), st.tp);
        let dp = st.dp.max(1) as f64;
        let nlayers = st.layers.len().max(1) as f64;
        // The next stage in pipeline order (chunk order for interleaving).
        let next = plan.stages.get(si + 1);

        let mut replicas = Vec::with_capacity(st.dp as usize);
        for r in 0..st.dp as usize {
            let devs = st.replica(r);
            let gpu = cluster.gpu(devs[0]);
            let mbs = st.micro_batch_sizes[r];
            let shape = LayerShape {
                mbs,
                seq,
                tp: st.tp,
                sequence_parallel: st.sequence_parallel,
                precision: plan.precision,
            };
            let mut rt = ReplicaTime {
                forward: 0.0,
                backward: 0.0,
                recompute: 0.0,
                tp_comm: 0.0,
                p2p: 0.0,
                exposed: 0.0,
                hw_flop: 0.0,
                source: TimeSource::Analytic,
            };
            let n_ckpt = match st.recompute {
                Recompute::Full => st.layers.len(),
                Recompute::Layers(n) => n as usize,
                _ => 0,
            };
            let tokens = mbs as f64 * tokens_per_sample;
            for (j, li) in st.layers.iter().enumerate() {
                let lt = compute.layer_time(gpu, model, li, shape);
                if lt.source != TimeSource::Analytic {
                    rt.source = lt.source;
                }
                rt.forward += lt.forward.get();
                rt.backward += lt.backward.get();
                let mut hw = lt.forward_flop.get() + lt.backward_flop.get();
                let layer = &model.layers[li];
                let tp_c = if st.tp > 1 && !lt.includes_tp_comm {
                    let bytes = Bytes(tokens * layer.tp_comm_bytes_per_token * elem / 2.0);
                    collective_time(cluster, devs, bytes, Collective::AllReduce, &conc).get()
                } else {
                    0.0
                };
                rt.tp_comm += tp_c * (layer.tp_allreduces_fwd + layer.tp_allreduces_bwd) as f64;
                if j < n_ckpt {
                    rt.recompute += lt.forward.get() + tp_c * layer.tp_allreduces_fwd as f64;
                    hw += lt.forward_flop.get();
                } else if st.recompute == Recompute::Selective {
                    rt.recompute += lt.selective_forward.get();
                }
                rt.hw_flop += hw;
            }
            // Pipeline sends: this replica's share of the activations to the next stage
            // (Megatron scatter-gather: each TP rank sends 1/tp).
            if let Some(nx) = next {
                let out = model.layers[st.layers.end - 1].output_bytes_per_token;
                let bytes = Bytes(tokens * out * elem / 2.0 / st.tp.max(1) as f64);
                let to = nx.replica(r % nx.dp.max(1) as usize)[0];
                rt.p2p += p2p_time(cluster, devs[0], to, bytes, conc(devs[0].node)).get();
            }
            // ... and the gradients back to the previous stage.
            if si > 0 {
                let pv = &plan.stages[si - 1];
                let out = model.layers[st.layers.start - 1].output_bytes_per_token;
                let bytes = Bytes(tokens * out * elem / 2.0 / st.tp.max(1) as f64);
                let to = pv.replica(r % pv.dp.max(1) as usize)[0];
                rt.p2p += p2p_time(cluster, devs[0], to, bytes, conc(devs[0].node)).get();
            }
            // ZeRO-3: every micro-batch gathers the parameters in forward and in backward and
            // reduce-scatters gradients in backward; ZeRO-2 only the reduce-scatter. Prefetching
            // (FSDP, DeepSpeed) overlaps layer l+1's gather with layer l's compute: what is left
            // is the excess over compute plus the first layer's gather.
            let dp_group: Vec<GpuId> = (0..st.dp as usize).map(|q| st.replica(q)[0]).collect();
            if st.dp > 1 && st.zero >= 2 {
                let pbytes = Bytes(params_local * pg_bytes);
                let gbytes = Bytes(params_local * gg_bytes);
                let ag =
                    collective_time(cluster, &dp_group, pbytes, Collective::AllGather, &conc).get();
                let rs =
                    collective_time(cluster, &dp_group, gbytes, Collective::ReduceScatter, &conc)
                        .get();
                let (fwd_comm, bwd_comm) = if st.zero == 3 {
                    (ag, ag + rs)
                } else {
                    (0.0, rs)
                };
                let fwd_compute = rt.forward;
                let bwd_compute = rt.backward + rt.recompute;
                // All but the first layer's transfer runs beside compute and slows it.
                let hidden = 1.0 - 1.0 / nlayers;
                rt.exposed += overlap::co_run(fwd_compute, fwd_comm * hidden) - fwd_compute
                    + fwd_comm / nlayers;
                rt.exposed += overlap::co_run(bwd_compute, bwd_comm * hidden) - bwd_compute
                    + bwd_comm / nlayers;
            }
            // Offloading over the host link, overlapped with compute (Mist Fig. 7): weights
            // come up for forward and backward, activations go down in forward and up in
            // backward, gradients go down in backward.
            let off = st.offload;
            if !off.is_none() {
                let pcie = gpu.pcie_bandwidth.get();
                let shard3 = if st.zero >= 3 { dp } else { 1.0 };
                let wb = off.weights * params_local * w_bytes / shard3;
                let (act, _) = memory::micro_batch_activations(
                    model,
                    st,
                    mbs,
                    seq,
                    plan.precision,
                    plan.engine,
                );
                let ab = off.activations * act;
                let gb =
                    off.gradients * params_local * g_bytes / if st.zero >= 2 { dp } else { 1.0 };
                let fwd_io = (wb + ab) / pcie;
                let bwd_io = (wb + ab + gb) / pcie;
                rt.exposed +=
                    (fwd_io - rt.forward).max(0.0) + (bwd_io - rt.backward - rt.recompute).max(0.0);
            }
            replicas.push(rt);
        }

        let slowest = replicas
            .iter()
            .map(|r| r.forward + r.backward + r.recompute + r.tp_comm + r.p2p + r.exposed)
            .fold(0.0f64, f64::max);
        let worst = replicas
            .iter()
            .max_by(|a, b| {
                let ta = a.forward + a.backward + a.recompute + a.tp_comm + a.p2p + a.exposed;
                let tb = b.forward + b.backward + b.recompute + b.tp_comm + b.p2p + b.exposed;
                ta.total_cmp(&tb)
            })
            .expect("a stage has at least one replica");
        hw_flop_total +=
            replicas.iter().map(|r| r.hw_flop).sum::<f64>() * st.tp.max(1) as f64 * m as f64;
        let samples_mb: u64 = st.samples_per_micro_batch();
        let (fwd_model, attn_model) = forward_model_flop(
            model,
            st.layers.iter(),
            samples_mb as f64 * tokens_per_sample,
            seq,
        );
        let rec_model = match st.recompute {
            Recompute::Full => fwd_model,
            Recompute::Layers(n) => {
                let end = (st.layers.start + n as usize).min(st.layers.end);
                forward_model_flop(
                    model,
                    st.layers.start..end,
                    samples_mb as f64 * tokens_per_sample,
                    seq,
                )
                .0
            }
            Recompute::Selective => attn_model,
            Recompute::None => 0.0,
        };
        model_flop_hw += (3.0 * fwd_model + rec_model) * m as f64;

        // Data-parallel synchronisation at the end of the iteration, per TP rank's DP group;
        // all TP ranks' groups run at once and share the network.
        let dp_group: Vec<GpuId> = (0..st.dp as usize).map(|q| st.replica(q)[0]).collect();
        let dp_sync = if st.dp > 1 {
            let g = Bytes(params_local * gg_bytes);
            let p = Bytes(params_local * pg_bytes);
            match st.zero {
                0 => collective_time(cluster, &dp_group, g, Collective::AllReduce, &conc).get(),
                1 => {
                    collective_time(cluster, &dp_group, g, Collective::ReduceScatter, &conc).get()
                        + collective_time(cluster, &dp_group, p, Collective::AllGather, &conc).get()
                }
                2 => collective_time(cluster, &dp_group, p, Collective::AllGather, &conc).get(),
                _ => 0.0,
            }
        } else {
            0.0
        };
        // Bucketed reduction overlaps the last micro-batch's backward (Megatron
        // overlap-grad-reduce, DeepSpeed overlap_comm, DDP/FSDP hooks); the last layer's bucket
        // cannot overlap. Parameter all-gathers after the step overlap the next forward in
        // Megatron (overlap-param-gather) but not in DeepSpeed.
        let bwd_last = worst.backward + worst.recompute;
        let dp_exposed = match plan.engine {
            Engine::Megatron | Engine::Fsdp | Engine::Deepspeed => {
                let hidden = dp_sync * (1.0 - 1.0 / nlayers);
                overlap::co_run(bwd_last, hidden) - bwd_last + dp_sync / nlayers
            }
        };
        // Optimizer step: HBM-bound Adam over this GPU's shard; offloaded states are updated by
        // the CPU (DeepSpeed CPU-Adam) after their gradients cross PCIe.
        let shard = if st.zero >= 1 { dp } else { 1.0 };
        let gpu0 = cluster.gpu(st.devices[0]);
        let opt_on_gpu = params_local / shard * (1.0 - st.offload.optimizer);
        let mut optimizer =
            opt_on_gpu * k::ADAM_BYTES_PER_PARAM / (gpu0.hbm_bandwidth.get() * k::HBM_EFFICIENCY);
        if st.offload.optimizer > 0.0 {
            let off_params = params_local / shard * st.offload.optimizer;
            optimizer += off_params / k::CPU_ADAM_PARAMS_PER_S
                + off_params * (g_bytes + w_bytes) / gpu0.pcie_bandwidth.get();
        }
        let extra = dp_exposed + optimizer;

        // Memory of each GPU of the stage.
        let pipe_index = si % depth;
        let inflight = memory::in_flight(plan.schedule, depth, pipe_index, m);
        let mut worst_mem = MemoryBreakdown::default();
        for r in 0..st.dp as usize {
            let mbs = st.micro_batch_sizes[r];
            let mem = stage_memory(w, plan, st, si, mbs, params_local, inflight, v);
            if mem.total.get() > worst_mem.total.get() {
                worst_mem = mem;
            }
            for &g in st.replica(r) {
                let spec = cluster.gpu(g);
                let cap = spec.memory.get();
                per_gpu.push(GpuEstimate {
                    gpu: g,
                    node: g.node,
                    local: g.local,
                    gpu_type: spec.name.clone(),
                    stage: si,
                    replica: r,
                    peak_memory_bytes: mem.total.get(),
                    capacity_bytes: cap,
                    fits: mem.total.get() <= cap,
                });
            }
        }

        stages.push(StageEstimate {
            index: si,
            layers: st.layers,
            tp: st.tp,
            dp: st.dp,
            micro_batch_sizes: st.micro_batch_sizes.clone(),
            forward: Seconds(worst.forward),
            backward: Seconds(worst.backward + worst.recompute),
            recompute: Seconds(worst.recompute),
            tp_comm: Seconds(worst.tp_comm),
            p2p: Seconds(worst.p2p),
            exposed_per_micro_batch: Seconds(worst.exposed),
            micro_batch_time: Seconds(slowest),
            dp_sync: Seconds(dp_sync),
            dp_sync_exposed: Seconds(dp_exposed),
            optimizer: Seconds(optimizer),
            extra: Seconds(extra),
            memory: worst_mem,
            compute_source: worst.source,
        });
        if worst.source != TimeSource::Analytic && worst.source != TimeSource::Measured {
            notes.push(format!(
                "stage {si}: layer times {} from profile points",
                match worst.source {
                    TimeSource::Interpolated => "interpolated",
                    _ => "extrapolated",
                }
            ));
        }
    }

    // Interleaved chunks: a device's per-micro-batch time is the sum over its chunks.
    let device_t: Vec<f64> = (0..depth)
        .map(|p| {
            stages
                .iter()
                .enumerate()
                .filter(|(i, _)| i % depth == p)
                .map(|(_, s)| s.micro_batch_time.get())
                .sum()
        })
        .collect();
    let device_d: Vec<f64> = (0..depth)
        .map(|p| {
            stages
                .iter()
                .enumerate()
                .filter(|(i, _)| i % depth == p)
                .map(|(_, s)| s.extra.get())
                .sum()
        })
        .collect();
    let t_max = device_t.iter().copied().fold(0.0, f64::max);
    let t_sum: f64 = device_t.iter().sum();
    // Mist Eq. 1: (m−1)·max tᵢ + Σ tᵢ + max_i (dᵢ − Σ_{j<i} tⱼ). With v virtual stages the
    // fill and drain shrink by v (Narayanan et al. 2021 §2.2): (m − 1/v)·max + Σ/v.
    let vf = v as f64;
    let mut prefix = 0.0;
    let mut tail = 0.0f64;
    for p in 0..depth {
        tail = tail.max(device_d[p] - prefix / vf);
        prefix += device_t[p];
    }
    let iteration = (m as f64 - 1.0 / vf) * t_max + t_sum / vf + tail.max(0.0);

    let busy: f64 = device_t.iter().map(|t| t * m as f64).sum();
    let bubble_fraction = if iteration > 0.0 {
        (1.0 - busy / (depth as f64 * iteration)).max(0.0)
    } else {
        0.0
    };
    let num_gpus = plan.devices().len();
    let peak_sum: f64 = plan
        .devices()
        .iter()
        .map(|g| cluster.gpu(*g).peak_tensor.get())
        .sum();
    let mflop = compute::model_flop(model, plan.global_batch, seq).get();
    let samples_per_s = plan.global_batch as f64 / iteration;
    let tokens_per_s = samples_per_s * tokens_per_sample;
    let fits = per_gpu.iter().all(|g| g.fits);
    let peak_memory = per_gpu
        .iter()
        .map(|g| g.peak_memory_bytes)
        .fold(0.0, f64::max);
    for g in per_gpu.iter().filter(|g| !g.fits) {
        if notes.len() < 8 {
            notes.push(format!(
                "{} ({}, stage {}): needs {}, has {}: out of memory by {}",
                g.gpu,
                g.gpu_type,
                g.stage,
                Bytes(g.peak_memory_bytes),
                Bytes(g.capacity_bytes),
                Bytes(g.peak_memory_bytes - g.capacity_bytes)
            ));
        }
    }
    let _ = hw_flop_total;
    Estimate {
        iteration_time_s: iteration,
        samples_per_s,
        tokens_per_s,
        tokens_per_s_per_gpu: tokens_per_s / num_gpus.max(1) as f64,
        mfu: mflop / (iteration * peak_sum),
        hfu: model_flop_hw / (iteration * peak_sum),
        bubble_fraction,
        fits,
        peak_memory_bytes: peak_memory,
        num_gpus,
        stages,
        per_gpu,
        notes,
    }
}

/// Memory of one GPU of replica with micro-batch size `mbs` of stage `si`.
#[allow(clippy::too_many_arguments)]
fn stage_memory(
    w: Workload<'_>,
    plan: &Plan,
    st: &Stage,
    si: usize,
    mbs: u64,
    params_local: f64,
    inflight: f64,
    v: usize,
) -> MemoryBreakdown {
    let model = w.model;
    let seq = w.seq_len;
    let (w_bytes, g_bytes, o_bytes) = memory::state_bytes(plan.precision);
    let dp = st.dp.max(1) as f64;
    let off = st.offload;
    // With interleaving a device holds all its chunks' states.
    let depth = plan.pipeline_depth().max(1);
    let chunks: Vec<&Stage> = if v > 1 {
        plan.stages
            .iter()
            .enumerate()
            .filter(|(i, _)| i % depth == si % depth)
            .map(|(_, s)| s)
            .collect()
    } else {
        vec![st]
    };
    let params: f64 = if v > 1 {
        chunks
            .iter()
            .map(|c| memory::stage_params(model, c.layers.iter(), c.tp))
            .sum()
    } else {
        params_local
    };
    let weights = params * w_bytes / if st.zero >= 3 { dp } else { 1.0 } * (1.0 - off.weights);
    let gradients = params * g_bytes / if st.zero >= 2 { dp } else { 1.0 } * (1.0 - off.gradients);
    let optimizer = params * o_bytes / if st.zero >= 1 { dp } else { 1.0 } * (1.0 - off.optimizer);
    let mut act_per_mb = 0.0;
    let mut working: f64 = 0.0;
    for c in &chunks {
        let (a, wk) =
            memory::micro_batch_activations(model, c, mbs, seq, plan.precision, plan.engine);
        act_per_mb += a;
        working = working.max(wk);
    }
    // Offloaded activations leave the GPU except for the micro-batch in progress.
    let activations = act_per_mb * (1.0 + (inflight - 1.0).max(0.0) * (1.0 - off.activations));
    let mut temporary = working + memory::transient_bytes(model, st, mbs, seq);
    if st.zero >= 3 {
        // The gathered current layer and the prefetched next one.
        let per_layer = params_local / st.layers.len().max(1) as f64;
        temporary += 2.0 * per_layer * plan.collective_element_bytes().0;
    }
    let allocated = weights + gradients + optimizer + activations + temporary;
    let overhead = allocated * k::ALLOCATOR_OVERHEAD + Bytes::gib(k::RUNTIME_RESERVED_GIB).get();
    MemoryBreakdown {
        weights: Bytes(weights),
        gradients: Bytes(gradients),
        optimizer: Bytes(optimizer),
        activations: Bytes(activations),
        temporary: Bytes(temporary),
        overhead: Bytes(overhead),
        total: Bytes(allocated + overhead),
    }
}

/// The FLOPs of one iteration that MFU counts (re-exported for reports).
pub fn iteration_model_flop(model: &Model, global_batch: u64, seq: u64) -> Flop {
    compute::model_flop(model, global_batch, seq)
}
