//! Mist's intra-stage analysis and tuning (§5.2–5.3): for one pipeline stage — its layers, its
//! device group, its position in the pipeline and the number of micro-batches — every
//! (DP, TP, ZeRO, checkpointed layers, offload ratios) is costed with Mist's own composition of
//! the overlap schedule (Fig. 7) and the interference model (Algorithm 1), giving the stable
//! micro-batch time `t`, the extra time `d` of the first and last micro-batches (Eq. 5–6) and
//! the peak memory; the Pareto frontier of (t, d) is sampled by sweeping α in Eq. 4.
//!
//! The per-layer quantities (compute times, tensor-parallel all-reduces, saved activations,
//! parameters) come from hetplan's building blocks (`ComputeTimes::layer_time`,
//! `cost::comm`, `cost::memory`) — the analogue of Mist's operator database and symbolic
//! shapes. They are computed once per (layers, device group shape, TP, micro-batch size) and
//! summed with prefix sums, so that every further configuration is a few additions: Mist's
//! "single symbolic pass, then value substitution" (§5.2.1).

use super::interference::{pred_intf, InterferenceParams, C, D2H, G2G, H2D};
use crate::cluster::GpuId;
use crate::cost::comm::{collective_time, p2p_time, Collective};
use crate::cost::constants as k;
use crate::cost::memory;
use crate::gpu::GpuSpec;
use crate::model::{LayerKind, OpKind};
use crate::plan::{Offload, Stage};
use crate::planners::{Problem, Search};
use crate::units::Bytes;
use std::collections::BTreeMap;

/// Which activation-checkpointing counts the search may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CkptSpace {
    /// Any number of the stage's layers (Mist).
    Tuned,
    /// Every layer of every stage (Megatron-LM's and Alpa's full checkpointing).
    Full,
    /// None.
    Off,
}

/// The memory-optimisation space of the intra-stage search.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Space {
    /// Highest ZeRO level (0–3).
    pub max_zero: u8,
    pub ckpt: CkptSpace,
    /// Offload ratios are searched on the grid `0, 1/steps, …, 1` for each of WO, GO, OO and
    /// AO; `0` disables offloading.
    pub offload_steps: u32,
    /// How many α of Eq. 4 are sampled uniformly in [0, 1] (at least 2: both ends).
    pub alphas: usize,
}

/// A stage as the inter-stage tuner asks about it.
#[derive(Clone, Debug, PartialEq)]
pub struct StageSpec {
    /// Layers `[start, end)` (for a middle stage, a representative run of blocks).
    pub start: usize,
    pub end: usize,
    /// The canonical devices of the group: `per_node` GPUs on each of its nodes, node-major.
    pub devices: Vec<GpuId>,
    /// GPUs per node of the group (a TP group stays inside a node).
    pub per_node: u32,
    /// Micro-batches per iteration (G).
    pub micro_batches: u64,
    /// Micro-batches whose activations the stage holds at once (1F1B: min(S − i, G)).
    pub in_flight: u64,
    /// Pipeline neighbours the stage sends to (0, 1 or 2).
    pub sends: u32,
    /// Whether the stage holds a tied embedding whose gradient it all-reduces with the other
    /// end of the pipeline, and how many parameters that is (per TP rank before /tp).
    pub tied_params: f64,
    /// The pipeline has three stages or more (its pipeline group is not a pair).
    pub deep: bool,
}

/// One intra-stage configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StageConfig {
    pub dp: u32,
    pub tp: u32,
    pub micro_batch: u64,
    pub zero: u8,
    /// Checkpointed (recomputed) layers, the stage's first ones.
    pub ckpt: u32,
    pub offload: Offload,
}

/// A costed configuration: Mist's stable micro-batch time, first/last extra and peak memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub t: f64,
    pub d: f64,
    pub memory: f64,
    pub config: StageConfig,
}

/// Per-layer quantities of one (layers, group shape, TP, micro-batch) — Mist's symbolic pass.
#[derive(Clone, Debug)]
pub struct Table {
    /// Σ forward and backward compute, Σ TP all-reduces (forward and backward).
    fwd: f64,
    bwd: f64,
    tp_comm: f64,
    /// `recompute[n]`: the forward work repeated in backward when the first n layers are
    /// checkpointed.
    recompute: Vec<f64>,
    /// `kept[n]`: activation bytes one micro-batch keeps with n checkpointed layers, and
    /// `working[n]` the recompute working set.
    kept: Vec<f64>,
    working: Vec<f64>,
    /// Parameters per TP rank, and the largest layer's (ZeRO-3 gathers two layers at a time).
    params: f64,
    largest_layer: f64,
    transient: f64,
    p2p: f64,
}

/// What the intra-stage search needs that does not change between calls.
pub struct Ctx<'a> {
    pub problem: &'a Problem<'a>,
    pub gpu: &'a GpuSpec,
    pub space: Space,
    pub interference: &'a InterferenceParams,
    /// Attention (heads, kv heads) of the model: TP must split them.
    pub heads: Vec<(u64, u64)>,
}

/// Memo of per-layer tables, keyed by (start, end, first device, per-node, GPUs, tp, mbs).
pub type TableCache = BTreeMap<(usize, usize, GpuId, u32, usize, u32, u64, u32), Table>;

fn devices_per_node(devs: &[GpuId]) -> BTreeMap<u32, usize> {
    let mut m = BTreeMap::new();
    for d in devs {
        *m.entry(d.node).or_insert(0) += 1;
    }
    m
}

fn table(ctx: &Ctx<'_>, spec: &StageSpec, tp: u32, mbs: u64) -> Table {
    let p = ctx.problem;
    let (model, cluster) = (p.model, p.cluster);
    let gpn = devices_per_node(&spec.devices);
    let conc = |n: u32| gpn.get(&n).copied().unwrap_or(0);
    let tp_devs = &spec.devices[..tp as usize];
    let elem = p.options.precision.element_bytes();
    let tokens = mbs as f64 * model.tokens_per_sample(p.seq_len) as f64;
    // Its recompute table prices what the engine's recomputation repeats
    // (`LayerShape::early_stop`; the other planners price none and skip the cost of asking).
    let shape = crate::cost::LayerShape {
        early_stop: p.options.engine.runs_pytorch_code(),
        ..p.layer_shape(mbs, tp)
    };
    let n = spec.end - spec.start;
    let mut t = Table {
        fwd: 0.0,
        bwd: 0.0,
        tp_comm: 0.0,
        recompute: vec![0.0; n + 1],
        kept: vec![0.0; n + 1],
        working: vec![0.0; n + 1],
        params: memory::stage_params(model, spec.start..spec.end, tp),
        largest_layer: 0.0,
        transient: 0.0,
        p2p: 0.0,
    };
    // Saved bytes and checkpoint inputs of the stage's transformer layers, the ones
    // checkpointing recomputes (`Layer::checkpointable`); the embedding and the head keep
    // theirs (`fixed`).
    let mut full = Vec::with_capacity(n);
    let mut ckpt = Vec::with_capacity(n);
    let mut fixed = 0.0;
    for li in spec.start..spec.end {
        let layer = &model.layers[li];
        let lt = p.compute.layer_time(ctx.gpu, model, li, shape);
        let tp_c = if tp > 1 && !lt.includes_tp_comm {
            let bytes = Bytes(tokens * layer.tp_comm_bytes_per_token * elem / 2.0);
            collective_time(cluster, tp_devs, bytes, Collective::AllReduce, &conc).get()
        } else {
            0.0
        };
        let tpf = tp_c * layer.tp_allreduces_fwd as f64;
        t.fwd += lt.forward.get();
        t.bwd += lt.backward.get();
        t.tp_comm += tpf + tp_c * layer.tp_allreduces_bwd as f64;
        let saved = memory::layer_saved_bytes(
            layer,
            tokens,
            p.seq_len,
            tp,
            false,
            false,
            p.options.precision,
            p.options.compiles_loss(),
            memory::transformer_engine_fp8(p.options.precision, p.options.engine),
        );
        if layer.checkpointable() {
            let k = full.len();
            // What a whole recomputation repeats: the forward and its collectives, less the
            // closing product and its collective where it stops early (`early_stop`).
            let closing = u32::from(
                shape.early_stop
                    && !shape.sequence_parallel
                    && layer.closing_product_skipped(shape.eager),
            );
            let redone = tp_c * layer.tp_allreduces_fwd.saturating_sub(closing) as f64;
            t.recompute[k + 1] = t.recompute[k] + lt.recompute_forward.get() + redone;
            full.push(saved);
            // Full checkpointing keeps the layer's input: the previous layer's output.
            let input = if li == 0 {
                0.0
            } else {
                model.layers[li - 1].output_bytes_per_token * tokens * elem / 2.0
            };
            ckpt.push(input);
        } else {
            fixed += saved;
        }
        t.largest_layer = t
            .largest_layer
            .max(memory::stage_params(model, li..li + 1, tp));
    }
    // Entry j: the first j transformer layers recomputed (all of them from their count on).
    let blocks = full.len();
    let total_full: f64 = full.iter().sum();
    let mut ck_sum = 0.0;
    let mut full_sum = 0.0;
    let mut work: f64 = 0.0;
    for j in 0..=n {
        t.recompute[j] = t.recompute[j.min(blocks)];
        t.kept[j] = fixed + ck_sum + (total_full - full_sum);
        t.working[j] = work;
        if j < blocks {
            ck_sum += ckpt[j];
            full_sum += full[j];
            work = work.max(full[j]);
        }
    }
    let dummy = Stage {
        etp: None,
        ep: 1,
        cp: 1,
        layers: crate::plan::LayerRange {
            start: spec.start,
            end: spec.end,
        },
        devices: vec![],
        tp,
        dp: 1,
        micro_batch_sizes: vec![mbs],
        zero: 0,
        recompute: crate::plan::Recompute::None,
        offload: Offload::default(),
        sequence_parallel: false,
        replica_samples: Vec::new(),
        replica_tp: Vec::new(),
    };
    t.transient = memory::transient_bytes(
        model,
        &dummy,
        mbs,
        dummy.tp,
        p.seq_len,
        p.options.engine,
        p.options.compiles_loss(),
    );
    // Pipeline sends (§5.3: part of tᵢ): the boundary activation, 1/tp per rank, to a GPU of
    // another node when the cluster has more than one, else of the same node.
    if spec.sends > 0 {
        let out = if spec.end < model.layers.len() {
            model.layers[spec.end - 1].output_bytes_per_token
        } else {
            model.layers[spec.start.max(1) - 1].output_bytes_per_token
        };
        let bytes = Bytes(tokens * out * elem / 2.0 / tp as f64);
        let from = spec.devices[0];
        let to = if cluster.nodes.len() > 1 {
            GpuId {
                node: (from.node + 1) % cluster.nodes.len() as u32,
                local: 0,
            }
        } else {
            GpuId {
                node: from.node,
                local: (spec.devices.len() as u32) % cluster.nodes[0].num_gpus,
            }
        };
        t.p2p =
            spec.sends as f64 * p2p_time(cluster, from, to, bytes, conc(from.node) as f64).get();
    }
    t
}

/// Whether two inputs are the same floats, bit for bit.
fn same_bits(a: [f64; 4], b: [f64; 4]) -> bool {
    a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Offload ratio grid.
fn grid(steps: u32) -> Vec<f64> {
    if steps == 0 {
        return vec![0.0];
    }
    (0..=steps).map(|i| i as f64 / steps as f64).collect()
}

/// Keeps the best point per α of Eq. 4 (`α·G·t + (1−α)·d`), ties to the other objective, then
/// to the first found.
struct Sweep {
    alphas: Vec<f64>,
    g: f64,
    best: Vec<Option<(f64, f64, Point)>>,
}

impl Sweep {
    fn new(n: usize, g: f64) -> Sweep {
        let n = n.max(2);
        Sweep {
            alphas: (0..n).map(|i| i as f64 / (n - 1) as f64).collect(),
            g,
            best: vec![None; n],
        }
    }
    fn offer(&mut self, p: Point) {
        let tie = self.g * p.t + p.d;
        for (a, slot) in self.alphas.iter().zip(self.best.iter_mut()) {
            let score = a * self.g * p.t + (1.0 - a) * p.d;
            if slot
                .as_ref()
                .is_none_or(|(s, ti, _)| score < *s || (score == *s && tie < *ti))
            {
                *slot = Some((score, tie, p));
            }
        }
    }
    /// The sampled frontier: distinct, non-dominated, by ascending t.
    fn points(self) -> Vec<Point> {
        let mut pts: Vec<Point> = self.best.into_iter().flatten().map(|(_, _, p)| p).collect();
        pts.sort_by(|a, b| a.t.total_cmp(&b.t).then(a.d.total_cmp(&b.d)));
        let mut out: Vec<Point> = Vec::new();
        for p in pts {
            if out.iter().any(|q| q.t <= p.t && q.d <= p.d) {
                continue;
            }
            out.push(p);
        }
        out
    }
}

/// The intra-stage tuning of one stage (Eq. 4): exhaustive over (DP, TP) of the group (the
/// micro-batch size follows from G and DP), ZeRO 0..=max, the offload grid, and for each the
/// fewest checkpointed layers that fit (recomputation only adds time, so more layers are
/// dominated). Returns the sampled Pareto frontier of (t, d), or `None` when the search limit
/// stopped it.
pub fn intra_stage(
    ctx: &Ctx<'_>,
    spec: &StageSpec,
    cache: &mut TableCache,
    search: &mut Search<'_>,
) -> Option<Vec<Point>> {
    let p = ctx.problem;
    let cluster = p.cluster;
    let n_gpus = spec.devices.len() as u32;
    let g = spec.micro_batches;
    let per_mb = p.global_batch / g;
    let mut sweep = Sweep::new(ctx.space.alphas, g as f64);
    let (w_b, g_b, _) = memory::state_bytes(p.options.engine, p.options.precision);
    let (pg, gg) = (
        p.options.precision.element_bytes(),
        crate::plan::default_gradient_dtype(p.options.engine, p.options.precision).element_bytes(),
    );
    let cap = ctx.gpu.memory.get();
    // What the runtime holds beside the tensors: the stage knows its neighbours and whether
    // the pipeline is deeper than two, which is all its communicators' sizes depend on (a
    // depth of 3 stands for any deeper one).
    let runtime_at = |tp: u32, dp: u32| {
        let (stage, depth) = match (spec.sends, spec.deep) {
            (0, _) => (0, 1),
            (1, false) => (0, 2),
            (1, true) => (0, 3),
            _ => (1, 3),
        };
        let layout = memory::RankLayout {
            tied_across_stages: spec.tied_params > 0.0,
            ..memory::RankLayout::stage(
                p.options.engine,
                false,
                (tp, dp),
                (stage, depth),
                cluster.num_gpus() as u32,
            )
        };
        memory::gpu_runtime_bytes(cluster, spec.devices[0], &layout)
    };
    let pcie = ctx.gpu.pcie_bandwidth.get();
    let hbm = crate::cost::compute::hbm_rate(ctx.gpu);
    let nl = (spec.end - spec.start) as u32;
    // What checkpointing counts: the stage's transformer layers.
    let blocks = (spec.start..spec.end)
        .filter(|&l| p.model.layers[l].checkpointable())
        .count();
    let hidden = 1.0 - 1.0 / nl.max(1) as f64;
    let gpn = devices_per_node(&spec.devices);
    let conc = |n: u32| gpn.get(&n).copied().unwrap_or(0);
    let ratios = grid(ctx.space.offload_steps);
    let zero_off = [0.0];
    let (wos, gos, oos, aos): (&[f64], &[f64], &[f64], &[f64]) = if ctx.space.offload_steps == 0 {
        (&zero_off, &zero_off, &zero_off, &zero_off)
    } else {
        (&ratios, &ratios, &ratios, &ratios)
    };
    let (nw, ng, no, na) = (wos.len(), gos.len(), oos.len(), aos.len());
    let ckpt_range: (usize, usize) = match ctx.space.ckpt {
        CkptSpace::Tuned => (0, blocks),
        CkptSpace::Full => (blocks, blocks),
        CkptSpace::Off => (0, 0),
    };
    let mut fits: Vec<usize> = Vec::with_capacity(nw * ng * no * na);
    for tp in (1..=spec.per_node).filter(|t| spec.per_node.is_multiple_of(*t)) {
        if tp > p.options.max_tp
            || !ctx.heads.iter().all(|&(h, kv)| {
                h.is_multiple_of(tp as u64)
                    && crate::plan::validate::tp_fits_kv_heads(tp as u64, kv)
            })
        {
            continue;
        }
        let dp = n_gpus / tp;
        if !per_mb.is_multiple_of(dp as u64) {
            continue;
        }
        let runtime = runtime_at(tp, dp);
        let room_all = memory::allocatable_bytes(cap, runtime);
        let mbs = per_mb / dp as u64;
        if mbs == 0 || mbs > p.options.max_micro_batch {
            continue;
        }
        let key = (
            spec.start,
            spec.end,
            spec.devices[0],
            spec.per_node,
            spec.devices.len(),
            tp,
            mbs,
            spec.sends,
        );
        let tab: &Table = cache
            .entry(key)
            .or_insert_with(|| table(ctx, spec, tp, mbs));
        let dp_group: Vec<GpuId> = (0..dp as usize)
            .map(|r| spec.devices[r * tp as usize])
            .collect();
        let coll =
            |bytes: f64, kind| collective_time(cluster, &dp_group, Bytes(bytes), kind, &conc).get();
        let ag = coll(tab.params * pg, Collective::AllGather);
        let rs = coll(tab.params * gg, Collective::ReduceScatter);
        let ar = coll(tab.params * gg, Collective::AllReduce);
        let tied = if spec.tied_params > 0.0 {
            let other = GpuId {
                node: (spec.devices[0].node + 1) % cluster.nodes.len() as u32,
                local: if cluster.nodes.len() > 1 {
                    0
                } else {
                    (spec.devices.len() as u32) % cluster.nodes[0].num_gpus
                },
            };
            let bytes = Bytes(spec.tied_params / tp as f64 * gg);
            collective_time(
                cluster,
                &[spec.devices[0], other],
                bytes,
                Collective::AllReduce,
                &conc,
            )
            .get()
        } else {
            0.0
        };
        // The activation curve per AO ratio, and its prefix minimum over the allowed
        // checkpoint counts: the fewest checkpointed layers that fit in a room is one binary
        // search. They do not depend on the ZeRO level.
        let curves: Vec<(Vec<f64>, Vec<f64>)> = aos
            .iter()
            .map(|&ao| {
                let mult = 1.0 + (spec.in_flight.max(1) - 1) as f64 * (1.0 - ao);
                let curve: Vec<f64> = (ckpt_range.0..=ckpt_range.1)
                    .map(|n| tab.kept[n] * mult + tab.working[n])
                    .collect();
                let mut pm = curve.clone();
                for i in 1..pm.len() {
                    pm[i] = pm[i].min(pm[i - 1]);
                }
                (curve, pm)
            })
            .collect();
        let max_zero = if dp > 1 { ctx.space.max_zero.min(3) } else { 0 };
        for zero in 0..=max_zero {
            if !search.tick() {
                return None;
            }
            let (w, gr, o) = memory::sharded_states(
                tab.params,
                p.options.engine,
                p.options.precision,
                zero,
                dp as f64,
            );
            let opt_params = tab.params / if zero >= 1 { dp as f64 } else { 1.0 };
            let gathered = if zero >= 3 {
                2.0 * tab.largest_layer * pg
            } else {
                0.0
            };
            // The time of one configuration (Fig. 7 schedule, Algorithm 1 per pass).
            let pass = |c: f64, nccl: f64, h2d: f64, d2h: f64| {
                let mut s = [0.0; 4];
                s[C] = c;
                s[G2G] = nccl * hidden;
                s[H2D] = h2d * hidden;
                s[D2H] = d2h * hidden;
                pred_intf(s, ctx.interference) + (nccl + h2d + d2h) * (1.0 - hidden)
            };
            let cost = |n: usize, off: Offload| -> (f64, f64) {
                let kept = tab.kept[n];
                let c_f = tab.fwd;
                let c_b = tab.bwd + tab.recompute[n];
                let nccl_f = if zero >= 3 { ag } else { 0.0 };
                let nccl_b = if zero >= 3 {
                    ag + rs
                } else if zero == 2 {
                    rs
                } else {
                    0.0
                };
                let wo = off.weights * w / pcie;
                let ao = off.activations * kept / pcie;
                let go = off.gradients * gr / pcie;
                let fwd = pass(c_f, nccl_f, wo, ao);
                let bwd = pass(c_b, nccl_b, wo + ao, go);
                let t = fwd + bwd + tab.tp_comm + tab.p2p;
                // First micro-batch: the repositioned optimizer step (§5.1) — GPU Adam on the
                // resident share, CPU Adam on the offloaded share whose gradients go down and
                // weights come back up beside the first forward — and ZeRO-1/2's parameter
                // all-gather. Last micro-batch: the gradient all-reduce (ZeRO-0) or
                // reduce-scatter (ZeRO-1) beside the last backward.
                let off_p = opt_params * off.optimizer;
                let gather = if zero == 1 || zero == 2 { ag } else { 0.0 };
                // `pass` is a function of its four inputs: where the first (last) micro-batch
                // adds nothing to the stable forward (backward), its value is reused.
                let first_in = [
                    c_f,
                    nccl_f + gather,
                    wo + off_p * w_b / pcie,
                    ao + off_p * g_b / pcie,
                ];
                let first = if same_bits(first_in, [c_f, nccl_f, wo, ao]) {
                    fwd
                } else {
                    pass(first_in[0], first_in[1], first_in[2], first_in[3])
                };
                let reduce = match zero {
                    0 => ar,
                    1 => rs,
                    _ => 0.0,
                };
                let last = if (nccl_b + reduce).to_bits() == nccl_b.to_bits() {
                    bwd
                } else {
                    pass(c_b, nccl_b + reduce, wo + ao, go)
                };
                let adam = (opt_params - off_p) * k::ADAM_BYTES_PER_PARAM / hbm
                    + off_p / k::CPU_ADAM_PARAMS_PER_S;
                (t, (first - fwd) + (last - bwd) + adam + tied)
            };
            // Per offload grid point, the fewest checkpointed layers that fit (an index into
            // `curves[ia]`; `len` when none does), in one pass in loop order so that the points
            // one ratio step lower are already known. That index never increases with a ratio
            // (more offloading leaves more room: `states` is a sum of non-negative products
            // of (1 − ratio), and `curves` shrinks with AO; IEEE rounding is monotone), so
            // the lower neighbours' smallest index `u` bounds it: it is `u` exactly when
            // `pm[u − 1]` does not fit either (the point is then dominated, or with `u = len`
            // does not fit at all); else the binary search runs on `pm[..u]`. Same answers as a full search everywhere
            // (checked against one in debug builds).
            let len = curves[0].1.len();
            // Exact cut: with every ratio at its top and AO's smallest curve, the most room and
            // the least activation memory; if even that does not fit, by the same monotonicity
            // no grid point of this ZeRO level does, and none would be costed.
            let room_top = room_all
                - (w * (1.0 - wos[nw - 1]) + gr * (1.0 - gos[ng - 1]) + o * (1.0 - oos[no - 1]))
                - tab.transient
                - gathered;
            if curves[na - 1].1[len - 1] > room_top {
                continue;
            }
            fits.clear();
            fits.resize(nw * ng * no * na, len);
            let at =
                |iw: usize, ig: usize, io: usize, ia: usize| ((ia * nw + iw) * ng + ig) * no + io;
            for ia in 0..na {
                let pm = &curves[ia].1;
                for iw in 0..nw {
                    for ig in 0..ng {
                        for io in 0..no {
                            let states =
                                w * (1.0 - wos[iw]) + gr * (1.0 - gos[ig]) + o * (1.0 - oos[io]);
                            let room = room_all - states - tab.transient - gathered;
                            let mut u = len;
                            if iw > 0 {
                                u = u.min(fits[at(iw - 1, ig, io, ia)]);
                            }
                            if ig > 0 {
                                u = u.min(fits[at(iw, ig - 1, io, ia)]);
                            }
                            if io > 0 {
                                u = u.min(fits[at(iw, ig, io - 1, ia)]);
                            }
                            if ia > 0 {
                                u = u.min(fits[at(iw, ig, io, ia - 1)]);
                            }
                            // Dominated: one ratio a step lower fits with as few checkpointed
                            // layers (t and d never decrease with a ratio or a layer).
                            let at_u = u == 0 || pm[u - 1] > room;
                            let dominated = at_u && u < len;
                            let idx = if at_u {
                                u
                            } else {
                                pm[..u].partition_point(|v| *v > room)
                            };
                            debug_assert_eq!(idx, pm.partition_point(|v| *v > room));
                            fits[at(iw, ig, io, ia)] = idx;
                            if dominated || idx == len {
                                continue;
                            }
                            let n = ckpt_range.0 + idx;
                            let off = Offload {
                                weights: wos[iw],
                                gradients: gos[ig],
                                optimizer: oos[io],
                                activations: aos[ia],
                            };
                            let (t, d) = cost(n, off);
                            let mem = memory::device_bytes(
                                states + curves[ia].0[idx] + tab.transient + gathered,
                                runtime,
                            );
                            sweep.offer(Point {
                                t,
                                d,
                                memory: mem,
                                config: StageConfig {
                                    dp,
                                    tp,
                                    micro_batch: mbs,
                                    zero,
                                    ckpt: n as u32,
                                    offload: off,
                                },
                            });
                        }
                    }
                }
            }
        }
    }
    Some(sweep.points())
}

/// Tied-embedding parameters of the model's last layer (0 when it ties nothing), per the
/// unsharded count.
pub fn tied_params(problem: &Problem<'_>) -> f64 {
    let model = problem.model;
    let has_emb = model.layers.iter().any(|l| l.kind == LayerKind::Embedding);
    if !has_emb {
        return 0.0;
    }
    model
        .layers
        .last()
        .map(|l| {
            l.ops
                .iter()
                .filter(|o| o.tied)
                .map(|o| o.params as f64)
                .sum()
        })
        .unwrap_or(0.0)
}

/// The attention (heads, kv heads) shapes of the model.
pub fn attention_heads(problem: &Problem<'_>) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    for l in &problem.model.layers {
        for op in &l.ops {
            if let OpKind::Attention {
                heads, kv_heads, ..
            } = op.kind
            {
                if !v.contains(&(heads, kv_heads)) {
                    v.push((heads, kv_heads));
                }
            }
        }
    }
    v
}
