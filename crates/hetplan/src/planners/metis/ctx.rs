//! The search's context: the problem's constants, the node classes (nodes interchangeable for a
//! device group), and per-layer prefix sums, computed once and cached — per (node class, TP
//! degree, micro-batch size) a replica's time, per TP degree the parameters, saved activations,
//! logits buffer and attention-head validity — from which a stage's time and memory are
//! differences (the analogue of Metis's per-layer profile, §4.3).

use crate::cluster::{Cluster, GpuId};
use crate::cost::comm::{collective_time, Collective};
use crate::cost::memory;
use crate::model::{LayerKind, OpKind, TpSplit};
use crate::planners::Problem;
use crate::units::Bytes;
use rustc_hash::FxHashMap as HashMap;

use super::balance::DpFirst;

/// Per-TP-degree prefix sums over layers for the memory model and TP validity.
pub(super) struct TpPrefix {
    /// Parameters held by one TP rank, every op counted.
    pub(super) params: Vec<f64>,
    /// Of which tied to the embedding (not held again when the embedding is on the stage).
    pub(super) tied: Vec<f64>,
    /// Saved activation bytes per token.
    pub(super) saved: Vec<f64>,
    /// Per layer: the head's logits buffer per token (0 elsewhere).
    pub(super) transient: Vec<f64>,
    /// Layers whose attention heads this degree cannot split.
    bad: Vec<u32>,
}

/// A cache keyed by (a, b, c): a dense table where the key space is small, a map beyond.
pub(super) struct Table<T> {
    dims: (usize, usize, usize),
    dense: Vec<Option<T>>,
    sparse: HashMap<(usize, u64, u64), T>,
}

impl<T> Table<T> {
    fn new(a: usize, b: usize, c: usize) -> Table<T> {
        let n = a.saturating_mul(b).saturating_mul(c);
        let dense = if n <= 1 << 20 {
            (0..n).map(|_| None).collect()
        } else {
            Vec::new()
        };
        Table {
            dims: (a, b, c),
            dense,
            sparse: HashMap::default(),
        }
    }

    fn index(&self, a: usize, b: u64, c: u64) -> Option<usize> {
        let (da, db, dc) = self.dims;
        (!self.dense.is_empty() && a < da && (b as usize) < db && (c as usize) < dc)
            .then(|| (a * db + b as usize) * dc + c as usize)
    }

    pub(super) fn get(&self, a: usize, b: u64, c: u64) -> Option<&T> {
        match self.index(a, b, c) {
            Some(i) => self.dense[i].as_ref(),
            None => self.sparse.get(&(a, b, c)),
        }
    }

    fn insert(&mut self, a: usize, b: u64, c: u64, v: T) {
        match self.index(a, b, c) {
            Some(i) => self.dense[i] = Some(v),
            None => {
                self.sparse.insert((a, b, c), v);
            }
        }
    }
}

/// Node classes, caches and the problem's constants.
pub(super) struct Ctx<'a, 'p> {
    pub(super) p: &'a Problem<'p>,
    pub(super) layers: usize,
    /// Class of each node.
    pub(super) node_class: Vec<usize>,
    /// Per class: its first node.
    pub(super) class_rep: Vec<u32>,
    pub(super) tokens_per_sample: f64,
    pub(super) elem: f64,
    pub(super) grad_elem: f64,
    pub(super) state_bytes: f64,
    /// Embedding layers before layer l.
    pub(super) emb: Vec<u32>,
    /// Parameters of ops tied to the embedding before layer l (unsharded).
    pub(super) tied_raw: Vec<f64>,
    pub(super) head_layers: Vec<usize>,
    /// Normalised per-layer loads (prefix sums), for the layer load balancer.
    pub(super) loads: Vec<f64>,
    time_cache: Table<Vec<f64>>,
    pub(super) tp_cache: Table<TpPrefix>,
    pub(super) least_cache: HashMap<(usize, u64, u64), f64>,
    /// Interned group shapes (`Group::shape`).
    pub(super) shapes: HashMap<Vec<(usize, u32)>, u32>,
    /// Per (shape, micro-batch samples): the DP-first (TP, replica micro-batches, capacity).
    pub(super) first_cache: HashMap<(u32, u64), Option<DpFirst>>,
    /// Per (shape, TP, micro-batch samples, in-flight micro-batches, stages): `max_layers`.
    pub(super) room_cache: HashMap<(u32, u32, u64, u64, u32), usize>,
    /// The model ties a weight to its embedding (`memory::ties_weights`): the pipeline's ends
    /// reduce it over a communicator of their own.
    pub(super) ties: bool,
    /// About how many bytes `first_cache`, `room_cache` and `least_cache` hold (`cached`).
    cache_bytes: usize,
    /// Lower-bound constants: the whole model's GPU-seconds per sample at the best class, TP
    /// degree and micro-batch size of every layer (H_fast), and Σ over GPUs of 1/κ, κ being
    /// the smallest ratio of a GPU class's per-layer GPU-seconds to the best.
    pub(super) h_fast: f64,
    pub(super) speed: f64,
}

/// The most the memoising caches (`first_cache`, `room_cache`, `least_cache`) may hold before
/// they are emptied: at 4,096 GPUs their per-replica micro-batch vectors grew past 7 GiB in a
/// minute. They only memoise pure functions, so emptying them costs time, never a result.
const MAX_CACHE_BYTES: usize = 256 << 20;

impl Ctx<'_, '_> {
    /// Counts `bytes` more in the caches, emptying them first when that would pass
    /// `MAX_CACHE_BYTES`.
    pub(super) fn cached(&mut self, bytes: usize) {
        if self.cache_bytes + bytes > MAX_CACHE_BYTES {
            self.first_cache.clear();
            self.room_cache.clear();
            self.least_cache.clear();
            self.cache_bytes = 0;
        }
        self.cache_bytes += bytes;
    }
}

impl<'a, 'p> Ctx<'a, 'p> {
    pub(super) fn new(p: &'a Problem<'p>) -> Ctx<'a, 'p> {
        let cluster = p.cluster;
        let model = p.model;
        // Node classes: nodes that are interchangeable for a device group.
        let classes = cluster.node_classes();
        let mut node_class = vec![0; cluster.nodes.len()];
        for (c, class) in classes.iter().enumerate() {
            for &n in &class.nodes {
                node_class[n as usize] = c;
            }
        }
        let class_rep: Vec<u32> = classes.iter().map(|c| c.nodes[0]).collect();
        let layers = model.layers.len();
        let mut emb = vec![0u32; layers + 1];
        for (l, layer) in model.layers.iter().enumerate() {
            emb[l + 1] = emb[l] + u32::from(layer.kind == LayerKind::Embedding);
        }
        let mut tied_raw = vec![0.0; layers + 1];
        for (l, layer) in model.layers.iter().enumerate() {
            let t: f64 = layer
                .ops
                .iter()
                .filter(|o| o.tied)
                .map(|o| o.params as f64)
                .sum();
            tied_raw[l + 1] = tied_raw[l] + t;
        }
        let head_layers = (0..layers)
            .filter(|&l| model.layers[l].kind == LayerKind::Head)
            .collect();
        let (w, g, o) = memory::state_bytes(p.options.engine, p.options.precision);
        let elem = p.options.precision.element_bytes();
        let mut ctx = Ctx {
            p,
            layers,
            node_class,
            class_rep,
            tokens_per_sample: model.tokens_per_sample(p.seq_len) as f64,
            elem,
            // The engine's gradient type (Megatron reduces BF16 gradients in FP32).
            grad_elem: crate::plan::default_gradient_dtype(p.options.engine, p.options.precision)
                .element_bytes(),
            state_bytes: w + g + o,
            emb,
            tied_raw,
            head_layers,
            loads: Vec::new(),
            time_cache: Table::new(
                classes.len(),
                p.options.max_tp as usize + 1,
                p.options.max_micro_batch as usize + 1,
            ),
            tp_cache: Table::new(1, 1, p.options.max_tp as usize + 1),
            least_cache: HashMap::default(),
            shapes: HashMap::default(),
            first_cache: HashMap::default(),
            room_cache: HashMap::default(),
            ties: memory::ties_weights(p.model),
            cache_bytes: 0,
            h_fast: 0.0,
            speed: 0.0,
        };
        // Layer loads: the first GPU type's times at tp = 1, mbs = 1, normalised.
        let first = ctx.node_class[0];
        let raw = ctx.prefix(first, 1, 1).clone();
        let total = raw[layers].max(f64::MIN_POSITIVE);
        ctx.loads = raw.iter().map(|t| t / total).collect();
        ctx
    }

    pub(super) fn cluster(&self) -> &'p Cluster {
        self.p.cluster
    }

    /// Prefix sums over layers of one replica's per-micro-batch time on a node of `class` at
    /// (`tp`, `mbs`): forward + backward + TP all-reduces.
    pub(super) fn prefix(&mut self, class: usize, tp: u32, mbs: u64) -> &Vec<f64> {
        if self.time_cache.get(class, tp as u64, mbs).is_none() {
            let v = self.compute_prefix(class, tp, mbs);
            self.time_cache.insert(class, tp as u64, mbs, v);
        }
        self.time_cache
            .get(class, tp as u64, mbs)
            .expect("just inserted")
    }

    fn compute_prefix(&self, class: usize, tp: u32, mbs: u64) -> Vec<f64> {
        let p = self.p;
        let rep = self.class_rep[class];
        let tokens = mbs as f64 * self.tokens_per_sample;
        let elem = self.elem;
        let cluster = p.cluster;
        let gpu = &cluster.gpu_types[cluster.nodes[rep as usize].gpu_type.0];
        let group: Vec<GpuId> = (0..tp)
            .map(|l| GpuId {
                node: rep,
                local: l,
            })
            .collect();
        let shape = p.layer_shape(mbs, tp);
        let mut v = Vec::with_capacity(p.model.layers.len() + 1);
        v.push(0.0);
        let mut acc = 0.0;
        for (l, layer) in p.model.layers.iter().enumerate() {
            let lt = p.compute.layer_time(gpu, p.model, l, shape);
            let mut t = lt.forward.get() + lt.backward.get();
            if tp > 1 && !lt.includes_tp_comm {
                let bytes = Bytes(tokens * layer.tp_comm_bytes_per_token * elem / 2.0);
                let one =
                    collective_time(cluster, &group, bytes, Collective::AllReduce, &|_| 0).get();
                t += one * (layer.tp_allreduces_fwd + layer.tp_allreduces_bwd) as f64;
            }
            acc += t;
            v.push(acc);
        }
        v
    }

    pub(super) fn time(&mut self, class: usize, tp: u32, mbs: u64, a: usize, b: usize) -> f64 {
        let v = self.prefix(class, tp, mbs);
        v[b] - v[a]
    }

    pub(super) fn tp_prefix(&mut self, tp: u32) -> &TpPrefix {
        if self.tp_cache.get(0, 0, tp as u64).is_none() {
            let t = self.compute_tp_prefix(tp);
            self.tp_cache.insert(0, 0, tp as u64, t);
        }
        self.tp_cache.get(0, 0, tp as u64).expect("just inserted")
    }

    fn compute_tp_prefix(&self, tp: u32) -> TpPrefix {
        let p = self.p;
        {
            let model = p.model;
            let n = model.layers.len();
            let mut t = TpPrefix {
                params: vec![0.0; n + 1],
                tied: vec![0.0; n + 1],
                saved: vec![0.0; n + 1],
                transient: vec![0.0; n],
                bad: vec![0; n + 1],
            };
            let tpf = tp.max(1) as f64;
            for (l, layer) in model.layers.iter().enumerate() {
                let mut tied = 0.0;
                let mut bad = false;
                let mut trans: f64 = 0.0;
                for op in &layer.ops {
                    let shard = if op.params_sharded || matches!(op.kind, OpKind::Opaque { .. }) {
                        tpf
                    } else {
                        1.0
                    };
                    if op.tied {
                        tied += op.params as f64 / shard;
                    }
                    match op.kind {
                        OpKind::Attention {
                            heads, kv_heads, ..
                        } => {
                            let tpu = tp as u64;
                            if !heads.is_multiple_of(tpu)
                                || !crate::plan::validate::tp_fits_kv_heads(tpu, kv_heads)
                            {
                                bad = true;
                            }
                        }
                        OpKind::Gemm { n, split, .. }
                            if split == TpSplit::Column && layer.kind == LayerKind::Head =>
                        {
                            trans = trans.max(2.0 * n as f64 / tpf);
                        }
                        _ => {}
                    }
                }
                t.params[l + 1] = t.params[l] + memory::stage_params(model, l..l + 1, tp);
                t.tied[l + 1] = t.tied[l] + tied;
                t.saved[l + 1] = t.saved[l]
                    + memory::layer_saved_bytes(
                        layer,
                        1.0,
                        p.seq_len,
                        tp,
                        false,
                        false,
                        p.options.precision,
                        p.options.compiles_loss(),
                        memory::transformer_engine_fp8(p.options.precision, p.options.engine),
                    );
                t.transient[l] = trans;
                t.bad[l + 1] = t.bad[l] + u32::from(bad);
            }
            t
        }
    }

    /// Whether `tp` splits the attention heads of layers `a..b`.
    pub(super) fn tp_heads_ok(&mut self, tp: u32, a: usize, b: usize) -> bool {
        let t = self.tp_prefix(tp);
        t.bad[b] == t.bad[a]
    }

    /// Parameters of layers `a..b` on one TP rank.
    pub(super) fn params(&mut self, tp: u32, a: usize, b: usize) -> f64 {
        let has_emb = self.emb[b] > self.emb[a];
        let t = self.tp_prefix(tp);
        let tied = if has_emb { t.tied[b] - t.tied[a] } else { 0.0 };
        t.params[b] - t.params[a] - tied
    }
}
