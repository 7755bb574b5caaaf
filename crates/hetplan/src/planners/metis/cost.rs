//! What Metis prices a plan with: Eq. 1 (per replica, a stage's compute and TP time with its
//! pipeline sends; the DP gradient and tied-embedding all-reduces), DetectOOM's memory of a
//! stage, and [`Metis::cost`], Eq. 1 of any plan in Metis's space.

use super::ctx::Ctx;
use super::groups::Group;
use super::search::State;
use super::Metis;
use crate::cluster::GpuId;
use crate::cost::comm::{collective_time, p2p_time, Collective};
use crate::cost::memory;
use crate::plan::{Plan, Recompute, Schedule};
use crate::planners::Problem;
use crate::units::Bytes;
use std::collections::BTreeMap;

impl Ctx<'_, '_> {
    /// Peak bytes of one GPU of a replica holding layers `a..b` at (`tp`, `mbs`) with
    /// `inflight` micro-batches of activations beside `runtime` bytes outside the allocator
    /// (hetplan's memory model, no ZeRO, no recomputation, no offloading).
    fn memory(
        &mut self,
        tp: u32,
        mbs: u64,
        (a, b): (usize, usize),
        inflight: f64,
        runtime: f64,
    ) -> f64 {
        let states = self.params(tp, a, b) * self.state_bytes;
        let tokens = mbs as f64 * self.tokens_per_sample;
        let t = self
            .tp_cache
            .get(0, 0, tp as u64)
            .expect("params() filled it");
        let act = (t.saved[b] - t.saved[a]) * tokens * inflight;
        let trans = self
            .head_layers
            .iter()
            .filter(|&&l| l >= a && l < b)
            .map(|&l| t.transient[l] * tokens)
            .fold(0.0, f64::max);
        memory::device_bytes(states + act + trans, runtime)
    }

    /// DetectOOM for stage i of `s` stages with `b` micro-batches.
    pub(super) fn oom(&mut self, g: &Group, st: &State, i: usize, b: u64) -> bool {
        let s = st.tp.len();
        let inflight = memory::in_flight(Schedule::OneFOneB, s, i, b);
        let (lo, hi) = (st.bounds[i], st.bounds[i + 1]);
        let tp = st.tp[i];
        let cluster = self.cluster();
        let world = cluster.num_gpus() as u32;
        let dp = (g.devices.len() / tp as usize) as u32;
        let layout =
            memory::RankLayout::stage(self.p.options.engine, self.ties, (tp, dp), (i, s), world);
        // Replicas on nodes of one class with the same micro-batch size need the same memory
        // against the same capacity: each such run is checked once.
        let mut checked: Option<(usize, u64)> = None;
        for (r, &m) in st.mbs[i].iter().enumerate() {
            let gpu = g.devices[r * tp as usize];
            let class = self.node_class[gpu.node as usize];
            if checked == Some((class, m)) {
                continue;
            }
            checked = Some((class, m));
            let cap = cluster.gpu(gpu).memory.get();
            let runtime = memory::gpu_runtime_bytes(cluster, gpu, &layout);
            if self.memory(tp, m, (lo, hi), inflight, runtime) > cap {
                return true;
            }
        }
        false
    }

    /// The gradient all-reduce of stage i over its DP group.
    pub(super) fn stage_dp(&mut self, g: &Group, st: &State, i: usize) -> f64 {
        let tp = st.tp[i] as usize;
        let dp = g.devices.len() / tp;
        if dp <= 1 {
            return 0.0;
        }
        let (a, b) = (st.bounds[i], st.bounds[i + 1]);
        let bytes = Bytes(self.params(st.tp[i], a, b) * self.grad_elem);
        let group: Vec<GpuId> = (0..dp).map(|r| g.devices[r * tp]).collect();
        let conc = |node: u32| g.on_node(node);
        collective_time(self.cluster(), &group, bytes, Collective::AllReduce, &conc).get()
    }

    /// The tied embedding's gradient all-reduce between the first and the last stage, as stage
    /// i takes part in it (the same pairing hetplan's estimate uses; Megatron runs it with the
    /// DP gradient reduction).
    pub(super) fn stage_tied(&mut self, groups: &[Group], st: &State, i: usize) -> f64 {
        let s = groups.len();
        let (a, b) = (st.bounds[i], st.bounds[i + 1]);
        let embedding_here = self.emb[b] > self.emb[a];
        let tied_here = self.tied_raw[b] - self.tied_raw[a];
        let tied = if tied_here > 0.0 && !embedding_here {
            tied_here
        } else if embedding_here && i == 0 {
            self.tied_raw[self.layers] - self.tied_raw[b]
        } else {
            0.0
        };
        if tied <= 0.0 {
            return 0.0;
        }
        let other = if embedding_here { s - 1 } else { 0 };
        let g = &groups[i];
        let pair = [g.devices[0], groups[other].devices[0]];
        let bytes = Bytes(tied / st.tp[i].max(1) as f64 * self.grad_elem);
        let conc = |node: u32| g.on_node(node);
        collective_time(self.cluster(), &pair, bytes, Collective::AllReduce, &conc).get()
    }

    /// Metis's Eq. 1 for a complete plan.
    pub(super) fn eq1(&mut self, groups: &[Group], st: &State, b: u64) -> f64 {
        let mut sum = 0.0;
        let mut max: f64 = 0.0;
        let mut dp_all: f64 = 0.0;
        for i in 0..groups.len() {
            let own = self.replica_times(groups, st, i, false);
            let next = self.replica_times(groups, st, i, true);
            let ti = own
                .iter()
                .zip(&next)
                .map(|(a, b)| a + b)
                .fold(0.0, f64::max);
            sum += ti;
            max = max.max(ti);
            let sync = self.stage_dp(&groups[i], st, i) + self.stage_tied(groups, st, i);
            dp_all = dp_all.max(sync);
        }
        sum + (b as f64 - 1.0) * max + dp_all
    }

    /// Per replica of stage i: its compute and TP time plus its send to the previous stage, or
    /// (`next`) its send to the next stage. Eq. 1's tᵢ of a replica is the sum of the two.
    pub(super) fn replica_times(
        &mut self,
        groups: &[Group],
        st: &State,
        i: usize,
        next: bool,
    ) -> Vec<f64> {
        let mut out = Vec::with_capacity(st.mbs[i].len());
        self.replica_times_into(groups, st, i, next, &mut out);
        out
    }

    /// [`Ctx::replica_times`] into `out` (cleared first), without allocating once it is large
    /// enough.
    pub(super) fn replica_times_into(
        &mut self,
        groups: &[Group],
        st: &State,
        i: usize,
        next: bool,
        out: &mut Vec<f64>,
    ) {
        out.clear();
        let s = groups.len();
        let model = self.p.model;
        let cluster = self.cluster();
        let g = &groups[i];
        let tp = st.tp[i];
        let tpu = tp as usize;
        let (lo, hi) = (st.bounds[i], st.bounds[i + 1]);
        let conc = |node: u32| g.on_node(node);
        for (r, &m) in st.mbs[i].iter().enumerate() {
            let tokens = m as f64 * self.tokens_per_sample;
            let from = g.devices[r * tpu];
            let mut t = 0.0;
            if next {
                if i + 1 < s {
                    let nx = &groups[i + 1];
                    let ntp = st.tp[i + 1] as usize;
                    let ndp = nx.devices.len() / ntp;
                    let out_b = model.layers[hi - 1].output_bytes_per_token;
                    let bytes = Bytes(tokens * out_b * self.elem / 2.0 / tp as f64);
                    let to = nx.devices[(r % ndp) * ntp];
                    t += p2p_time(cluster, from, to, bytes, conc(from.node) as f64).get();
                }
            } else {
                let c = self.replica_class(g, tp, r);
                t += self.time(c, tp, m, lo, hi);
                if i > 0 {
                    let pv = &groups[i - 1];
                    let ptp = st.tp[i - 1] as usize;
                    let pdp = pv.devices.len() / ptp;
                    let out_b = model.layers[lo - 1].output_bytes_per_token;
                    let bytes = Bytes(tokens * out_b * self.elem / 2.0 / tp as f64);
                    let to = pv.devices[(r % pdp) * ptp];
                    t += p2p_time(cluster, from, to, bytes, conc(from.node) as f64).get();
                }
            }
            out.push(t);
        }
    }
}

impl Metis {
    /// Metis's cost (Eq. 1, as this module computes it) of any plan in Metis's space: 1F1B, no
    /// ZeRO, recomputation, offloading or sequence parallelism, every TP group inside a node.
    /// `None` for other plans and for plans that do not validate. Memory is not checked.
    pub fn cost(problem: &Problem<'_>, plan: &Plan) -> Option<f64> {
        if plan.schedule != Schedule::OneFOneB || plan.stages.is_empty() {
            return None;
        }
        crate::plan::validate::validate(plan, problem.model, problem.cluster).ok()?;
        let p = Problem {
            options: crate::planners::PlanOptions {
                engine: plan.engine,
                precision: plan.precision,
                ..problem.options
            },
            ..*problem
        };
        let mut ctx = Ctx::new(&p);
        ctx.grad_elem = plan.collective_element_bytes().1;
        let cluster = problem.cluster;
        let mut groups = Vec::with_capacity(plan.stages.len());
        let mut st = State {
            tp: Vec::new(),
            mbs: Vec::new(),
            bounds: vec![plan.stages[0].layers.start],
            caps: Vec::new(),
        };
        for s in &plan.stages {
            if s.zero != 0
                || s.recompute != Recompute::None
                || !s.offload.is_none()
                || s.sequence_parallel
            {
                return None;
            }
            let tp = s.tp.max(1) as usize;
            if s.devices
                .chunks(tp)
                .any(|r| r.iter().any(|d| d.node != r[0].node))
            {
                return None;
            }
            let mut per_node: BTreeMap<u32, u32> = BTreeMap::new();
            for d in &s.devices {
                *per_node.entry(d.node).or_insert(0) += 1;
            }
            let t0 = cluster.gpu_type_of(s.devices[0]);
            let per_node: Vec<(u32, u32)> = per_node.into_iter().collect();
            groups.push(Group {
                devices: s.devices.clone(),
                shape: ctx.shape_of(&per_node),
                per_node,
                hetero: s.devices.iter().any(|&d| cluster.gpu_type_of(d) != t0),
            });
            st.tp.push(s.tp);
            st.mbs.push(s.micro_batch_sizes.clone());
            st.bounds.push(s.layers.end);
        }
        Some(ctx.eq1(&groups, &st, plan.micro_batches))
    }
}
