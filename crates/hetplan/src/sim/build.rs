//! From a validated plan to the task graph the engine executes.
//!
//! Executors are DP replicas of physical pipeline stages (a TP group moves in lock step; its
//! blocking TP all-reduces are part of its layer times). Each executor runs its schedule's
//! operations in order — GPipe, 1F1B or Megatron's interleaved 1F1B — as compute tasks, one per
//! micro-batch pass, split into one task per layer where layer-level timing matters (ZeRO-2/3
//! transfers, the gradient buckets of the last backward). Transfers are flows: pipeline sends
//! (blocking for the sender, as Megatron's batched send/recv), tensor-parallel all-reduces,
//! gradient buckets, ZeRO gathers and reduce-scatters, offload copies on the host link, the
//! tied-embedding all-reduce.
//!
//! The builder takes from the cost model only what is measured or counted — per-layer compute
//! times, the optimizer step, byte counts — never a communication time: a transfer is bytes on
//! the resources it crosses, and a collective is executed as NCCL's ring (one edge per hop, every
//! hop carrying `passes·(n−1)/n` of the buffer, docs/cost-model.md §3), so the engine finds how
//! long it takes from the capacities of the links and NICs and from whatever else uses them.

use super::engine::{Edge, Graph, TaskId, Work};
use crate::cluster::GpuId;
use crate::cost::comm::Collective;
use crate::cost::constants as k;
use crate::cost::{self, ComputeTimes, LayerCost, Workload};
use crate::plan::{Plan, Schedule, Stage};
use crate::profile::CollectiveOp;
use crate::units::Bytes;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Forward or backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pass {
    Forward,
    Backward,
}

/// What a task is.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Label {
    /// A pass of micro-batch `mb` through stage (chunk) `stage`, or through its layer `layer`.
    Compute {
        stage: usize,
        replica: usize,
        mb: u64,
        pass: Pass,
        layer: Option<usize>,
    },
    Optimizer {
        stage: usize,
        replica: usize,
    },
    /// Activations (forward) or gradients (backward) from one stage's replica to the next's.
    Send {
        from_stage: usize,
        from_replica: usize,
        to_stage: usize,
        to_replica: usize,
        mb: u64,
        pass: Pass,
    },
    /// Data-parallel gradient reduction of one bucket (a layer) after the last backward.
    GradSync {
        stage: usize,
        layer: usize,
    },
    /// ZeRO-1/2 parameter all-gather of the optimizer step's result: after the step (`layer`
    /// none), or bucket by bucket ahead of the first forward where the engine overlaps it
    /// (`Engine::gathers_params_during_forward`; `layer`: the bucket's first).
    ParamGather {
        stage: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        layer: Option<usize>,
    },
    /// ZeRO-3 per-layer gather (forward or backward) and ZeRO-2/3 gradient reduce-scatter.
    ZeroGather {
        stage: usize,
        mb: u64,
        layer: usize,
        pass: Pass,
    },
    ZeroScatter {
        stage: usize,
        mb: u64,
        layer: usize,
    },
    /// Tensor-parallel all-reduces of a pass (or of one layer of it), inside a replica.
    TpAllReduce {
        stage: usize,
        replica: usize,
        mb: u64,
        pass: Pass,
        layer: Option<usize>,
    },
    /// Expert-parallel all-to-alls (token dispatch and combine) of a pass (or of one layer of
    /// it), between the replica and the others of its expert-parallel group.
    EpAllToAll {
        stage: usize,
        replica: usize,
        mb: u64,
        pass: Pass,
        layer: Option<usize>,
    },
    /// Context-parallel transfers of a pass (or of one layer of it): the ring's keys and values
    /// (and their gradients) to the next replica of the group, or the all-to-alls (Ulysses)
    /// among the group.
    CpComm {
        stage: usize,
        replica: usize,
        mb: u64,
        pass: Pass,
        layer: Option<usize>,
    },
    /// Offload traffic over a replica's host links for one pass.
    Offload {
        stage: usize,
        replica: usize,
        mb: u64,
        pass: Pass,
    },
    /// The tied embedding's gradient all-reduce between the first and last stage.
    TiedSync,
}

impl Label {
    pub fn is_compute(&self) -> bool {
        matches!(self, Label::Compute { .. } | Label::Optimizer { .. })
    }
}

/// Which way a transfer crosses a full-duplex link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    Out,
    In,
}

/// A resource flows share. Links are full duplex: each direction is its own resource.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Resource {
    /// A GPU's link inside its node (NVLink or PCIe peer), one direction.
    GpuLink { gpu: GpuId, direction: Direction },
    /// A node's network (all its NICs), one direction.
    Nic { node: u32, direction: Direction },
    /// The route from one node to another where the cluster sets a per-pair bandwidth (AMP's
    /// matrix), one direction.
    Route { from: u32, to: u32 },
    /// A GPU's host link (PCIe to the CPU), for offloading.
    HostLink { gpu: GpuId },
}

/// One executor: a DP replica of a physical stage.
#[derive(Clone, Debug, Serialize)]
pub struct Executor {
    pub stage: usize,
    pub replica: usize,
    pub devices: Vec<GpuId>,
}

pub struct Built {
    pub graph: Graph,
    pub labels: Vec<Label>,
    pub resources: Vec<Resource>,
    pub executors: Vec<Executor>,
}

struct Builder<'a> {
    w: Workload<'a>,
    plan: &'a Plan,
    /// For measured collective times (floors under the flows), not for the flows' model.
    compute: &'a dyn ComputeTimes,
    depth: usize,
    graph: Graph,
    labels: Vec<Label>,
    resources: Vec<Resource>,
    /// Capacity of each resource, bytes per second.
    capacity: Vec<f64>,
    /// Lookups only (ids follow first use), so a hash map's order never shows.
    resource_ids: HashMap<Resource, usize>,
    /// (physical stage, replica) → executor.
    exec_of: BTreeMap<(usize, usize), usize>,
    executors: Vec<Executor>,
    /// Last compute task of each executor so far (program order).
    last: Vec<Option<TaskId>>,
    /// Flows the executor's next compute must wait for (its own blocking sends).
    pending_sends: Vec<Vec<TaskId>>,
}

/// One operation of an executor's program.
#[derive(Clone, Copy, Debug)]
struct Op {
    chunk: usize,
    mb: u64,
    pass: Pass,
}

/// The tasks of one pass: its first compute task, its last task (compute or the TP all-reduces
/// after it), and, if split per layer, each layer's compute task and last task.
#[derive(Clone, Debug)]
struct PassTasks {
    first: TaskId,
    last: TaskId,
    last_compute: TaskId,
    layers: Vec<TaskId>,
    layer_ends: Vec<TaskId>,
}

/// Megatron's order of operations on physical stage `p` of `s` for `m` micro-batches and `v`
/// model chunks (`chunk` is the local chunk index 0..v).
fn program(schedule: Schedule, s: usize, p: usize, m: u64) -> Vec<(usize, u64, Pass)> {
    let mut ops = Vec::new();
    match schedule {
        Schedule::Gpipe => {
            ops.extend((0..m).map(|j| (0, j, Pass::Forward)));
            ops.extend((0..m).rev().map(|j| (0, j, Pass::Backward)));
        }
        Schedule::OneFOneB => {
            let warmup = ((s - p - 1) as u64).min(m);
            ops.extend((0..warmup).map(|j| (0, j, Pass::Forward)));
            for k in 0..m - warmup {
                ops.push((0, warmup + k, Pass::Forward));
                ops.push((0, k, Pass::Backward));
            }
            ops.extend((m - warmup..m).map(|j| (0, j, Pass::Backward)));
        }
        Schedule::Interleaved { virtual_stages } => {
            let v = virtual_stages.max(1) as usize;
            let (s64, v64) = (s as u64, v as u64);
            let total = m * v64;
            // Virtual step k ↦ (chunk, micro-batch), as Megatron's get_model_chunk_id.
            let step = |k: u64, forward: bool| {
                let in_group = k % (s64 * v64);
                let mut chunk = (in_group / s64) as usize;
                if !forward {
                    chunk = v - 1 - chunk;
                }
                let mb = (k / (s64 * v64)) * s64 + k % s64;
                (chunk, mb)
            };
            let warmup = ((s - p - 1) as u64 * 2 + (v64 - 1) * s64).min(total);
            for k in 0..warmup {
                let (c, j) = step(k, true);
                ops.push((c, j, Pass::Forward));
            }
            for k in 0..total - warmup {
                let (c, j) = step(warmup + k, true);
                ops.push((c, j, Pass::Forward));
                let (c, j) = step(k, false);
                ops.push((c, j, Pass::Backward));
            }
            for k in total - warmup..total {
                let (c, j) = step(k, false);
                ops.push((c, j, Pass::Backward));
            }
        }
    }
    ops
}

/// Samples of a micro-batch each replica holds, `[offset, offset + size)`, and which of the
/// `cp` chunks of their sequences: a context-parallel group's replicas share one range.
fn sample_ranges(st: &Stage) -> Vec<(u64, u64, usize)> {
    let cp = st.cp.max(1) as usize;
    let mut off = 0;
    st.micro_batch_sizes
        .iter()
        .enumerate()
        .map(|(r, &b)| {
            let range = (off, off + b, r % cp);
            if r % cp == cp - 1 {
                off += b;
            }
            range
        })
        .collect()
}

impl<'a> Builder<'a> {
    fn resource(&mut self, r: Resource) -> usize {
        if let Some(&id) = self.resource_ids.get(&r) {
            return id;
        }
        let cluster = self.w.cluster;
        let capacity = match &r {
            Resource::GpuLink { gpu, .. } => cluster.node(*gpu).intra_bandwidth.get(),
            // A per-pair bandwidth may exceed the NICs' (AMP's matrix states what the pair
            // achieves): the NIC then carries at least that.
            Resource::Nic { node, .. } => cluster
                .pair_bandwidth
                .iter()
                .filter(|((a, b), _)| a == node || b == node)
                .map(|(_, bw)| bw.get())
                .fold(
                    cluster.nodes[*node as usize].inter_bandwidth.get(),
                    f64::max,
                ),
            Resource::Route { from, to } => cluster.node_pair_bandwidth(*from, *to).get(),
            Resource::HostLink { gpu } => cluster.gpu(*gpu).pcie_bandwidth.get(),
        };
        let id = self.resources.len();
        self.resources.push(r.clone());
        self.capacity.push(capacity);
        self.resource_ids.insert(r, id);
        id
    }

    fn task(&mut self, work: Work, deps: Vec<TaskId>, label: Label) -> TaskId {
        let id = self.graph.add(work, deps);
        self.labels.push(label);
        id
    }

    /// Seconds one `op` on `bytes` among `group` took when measured alone, 0 without a
    /// measurement (`cost::measured_transfer_time`): a flow's floor.
    fn measured(&self, group: &[GpuId], op: CollectiveOp, bytes: f64) -> f64 {
        cost::measured_transfer_time(self.compute, self.w.cluster, group, op, Bytes(bytes))
            .map_or(0.0, |t| t.get())
    }

    /// `bytes` from one GPU to another: the sender's outgoing and the receiver's incoming side
    /// of their links (inside a node) or networks (across nodes, and the route between the two
    /// where the cluster sets its bandwidth).
    fn hop(&mut self, from: GpuId, to: GpuId, bytes: f64) -> Edge {
        let resources = if from.node == to.node {
            vec![
                self.resource(Resource::GpuLink {
                    gpu: from,
                    direction: Direction::Out,
                }),
                self.resource(Resource::GpuLink {
                    gpu: to,
                    direction: Direction::In,
                }),
            ]
        } else {
            let mut r = vec![
                self.resource(Resource::Nic {
                    node: from.node,
                    direction: Direction::Out,
                }),
                self.resource(Resource::Nic {
                    node: to.node,
                    direction: Direction::In,
                }),
            ];
            let key = (from.node.min(to.node), from.node.max(to.node));
            if self.w.cluster.pair_bandwidth.contains_key(&key) {
                r.push(self.resource(Resource::Route {
                    from: from.node,
                    to: to.node,
                }));
            }
            r
        };
        Edge { bytes, resources }
    }

    /// A pipeline send of `bytes` from one replica to another: each TP rank sends its `1/tp`
    /// share to its counterpart (Megatron's scatter-gather), all at once.
    fn send(&mut self, from: &[GpuId], to: &[GpuId], bytes: f64, execs: Vec<usize>) -> Work {
        let share = bytes / from.len() as f64;
        let floor = self.measured(&[from[0], to[0]], CollectiveOp::P2p, share);
        let edges = from
            .iter()
            .enumerate()
            .map(|(i, &f)| self.hop(f, to[i % to.len()], share))
            .collect();
        // Nothing to send is no message.
        let latency = if bytes > 0.0 {
            self.w.cluster.link_latency(from[0], to[0]).get()
        } else {
            0.0
        };
        Work::Flow {
            edges,
            latency,
            efficiency: k::P2P_EFFICIENCY,
            execs,
            floor,
        }
    }

    /// `messages` collectives of `kind` on a buffer of `bytes` over each of `groups` at once, as
    /// NCCL's ring: the members in topology order (node by node), every hop carrying
    /// `passes·(n−1)/n` of the buffer, `passes·(n−1)` message latencies per collective.
    fn ring(
        &mut self,
        groups: &[Vec<GpuId>],
        bytes: f64,
        kind: Collective,
        messages: u32,
        execs: Vec<usize>,
    ) -> Work {
        let mut edges = Vec::new();
        let mut latency = 0.0f64;
        let mut floor = 0.0f64;
        for group in groups {
            let mut ring = group.clone();
            ring.sort_unstable();
            ring.dedup();
            let n = ring.len();
            if n < 2 || bytes <= 0.0 {
                continue;
            }
            let steps = kind.passes() * (n - 1) as f64;
            let volume = steps / n as f64 * bytes * messages as f64;
            for i in 0..n {
                edges.push(self.hop(ring[i], ring[(i + 1) % n], volume));
            }
            let spans = ring.iter().any(|g| g.node != ring[0].node);
            let cl = self.w.cluster;
            let alpha = if spans {
                cl.inter_latency
            } else {
                cl.intra_latency
            };
            latency = latency.max(steps * messages as f64 * alpha.get());
            let measured = self.measured(&ring, kind.measured_op(), bytes);
            floor = floor.max(messages as f64 * measured);
        }
        Work::Flow {
            edges,
            latency,
            efficiency: k::COLLECTIVE_EFFICIENCY,
            execs,
            floor,
        }
    }

    /// A collective over the DP groups of stage `si` — one per parameter shard (TP rank), all
    /// running at once; with replicas at different TP degrees a GPU holds several shards and
    /// takes part in as many rings (`Stage::shard_group`).
    fn dp_collective(
        &mut self,
        si: usize,
        bytes: f64,
        kind: Collective,
        deps: Vec<TaskId>,
        label: Label,
    ) -> TaskId {
        let st = &self.plan.stages[si];
        let groups: Vec<Vec<GpuId>> = (0..st.tp.max(1) as usize)
            .map(|k| st.shard_group(k))
            .collect();
        let p = si % self.depth;
        let execs: Vec<usize> = (0..st.dp as usize).map(|r| self.exec_of[&(p, r)]).collect();
        let work = self.ring(&groups, bytes, kind, 1, execs);
        self.task(work, deps, label)
    }

    /// The context-parallel ring transfers of executor `e` that start after task `after`,
    /// beside the attention-core compute that follows it: this replica sends `chunk_rounds` (its chunk's bytes times
    /// the rounds, summed over layers) `n − 1` times to the next replica of its group, TP rank
    /// by TP rank, `rounds·(n − 1)` message latencies. Every replica of the group adds its own
    /// sends, so the ring's traffic is complete. The executor's next compute waits.
    fn cp_ring(&mut self, e: usize, after: TaskId, chunk_rounds: f64, rounds: u32, label: Label) {
        let (si, r) = (self.executors[e].stage, self.executors[e].replica);
        let st = &self.plan.stages[si];
        let group = st.cp_group(r);
        let n = group.len();
        if chunk_rounds <= 0.0 || rounds == 0 || n < 2 {
            return;
        }
        let next = group.start + (r - group.start + 1) % n;
        let pairs: Vec<(GpuId, GpuId)> = (0..st.tp_of(r) as usize)
            .map(|k| (st.replica(r)[k], st.replica(next)[k]))
            .collect();
        let spans = group
            .clone()
            .flat_map(|q| st.replica(q).iter())
            .any(|g| g.node != st.replica(r)[0].node);
        let edges: Vec<Edge> = pairs
            .into_iter()
            .map(|(from, to)| self.hop(from, to, chunk_rounds * (n - 1) as f64))
            .collect();
        let cl = self.w.cluster;
        let alpha = if spans {
            cl.inter_latency
        } else {
            cl.intra_latency
        };
        // A round moves what an all-gather of the group's chunks moves; the estimate prices
        // it with the same measured curve.
        let members: Vec<GpuId> = group.clone().map(|q| st.replica(q)[0]).collect();
        let round = self.measured(
            &members,
            CollectiveOp::AllGather,
            chunk_rounds / rounds as f64 * n as f64,
        );
        let work = Work::Flow {
            edges,
            latency: (rounds as usize * (n - 1)) as f64 * alpha.get(),
            efficiency: k::COLLECTIVE_EFFICIENCY,
            execs: vec![e],
            floor: rounds as f64 * round,
        };
        let t = self.task(work, vec![after], label);
        self.pending_sends[e].push(t);
    }

    /// Adds a compute task to executor `e`, after its previous one and its pending sends.
    fn compute(&mut self, e: usize, duration: f64, mut deps: Vec<TaskId>, label: Label) -> TaskId {
        if let Some(prev) = self.last[e] {
            deps.push(prev);
        }
        deps.append(&mut self.pending_sends[e]);
        let t = self.task(Work::Compute { exec: e, duration }, deps, label);
        self.last[e] = Some(t);
        t
    }

    /// The blocking TP all-reduces that follow compute task `after` of executor `e` (`count` of
    /// `bytes` each, over the replica's GPUs); the executor's next compute waits for them.
    /// Returns the task that ends the work: the all-reduces, or `after` when there are none.
    fn tp_allreduces(
        &mut self,
        e: usize,
        after: TaskId,
        bytes: f64,
        count: u32,
        label: Label,
    ) -> TaskId {
        let width = self.executors[e].devices.len();
        self.allreduces_within(e, after, width, bytes, count, label)
    }

    /// What compute task `compute` of executor `e` waits for before it starts: its program
    /// predecessor and the flows pending on the executor (`compute` drains them).
    fn start_deps(&self, e: usize) -> Vec<TaskId> {
        let mut deps: Vec<TaskId> = self.last[e].into_iter().collect();
        deps.extend(self.pending_sends[e].iter().copied());
        deps
    }

    /// TP communication overlap (`Plan::tp_comm_overlap`): the `count` all-reduces of `bytes`
    /// over executor `e`'s replica, as far as the engine decomposes them, behind compute task
    /// `compute`, which started after `start`. The beside share of the bytes
    /// (`cost::constants::tp_overlap_split`) flows beside it from its start (slowing it, and
    /// slowed by it, as any flow beside compute); the rest — what stays blocking and each
    /// reduce-scatter's last step, after the last GEMM step — after both. The executor's next
    /// compute waits for both. Returns the task that ends the work.
    fn tp_allreduces_beside(
        &mut self,
        e: usize,
        start: Vec<TaskId>,
        compute: TaskId,
        bytes: f64,
        count: u32,
        label: Label,
    ) -> TaskId {
        let width = self.executors[e].devices.len();
        if bytes <= 0.0 || count == 0 || width < 2 {
            return compute;
        }
        let (beside, after) =
            crate::cost::constants::tp_overlap_split(self.plan.engine, width as u32);
        let groups = vec![self.executors[e].devices.clone()];
        // Each part is a share of the same collectives: of their bytes, and of their steps'
        // latencies and measured floors.
        let ring = self.ring(&groups, bytes, Collective::AllReduce, count, vec![e]);
        let (beside, after) = (ring.clone().scaled(beside), ring.scaled(after));
        let beside = self.task(beside, start, label.clone());
        let t = self.task(after, vec![compute, beside], label);
        self.pending_sends[e].push(beside);
        self.pending_sends[e].push(t);
        t
    }

    /// The all-reduces among the GPUs of each expert rank of executor `e` (`etp` consecutive
    /// ones of the replica; expert tensor parallelism below TP) that follow task `after`.
    fn etp_allreduces(
        &mut self,
        e: usize,
        after: TaskId,
        bytes: f64,
        count: u32,
        label: Label,
    ) -> TaskId {
        let etp = self.plan.stages[self.executors[e].stage].expert_tp() as usize;
        self.allreduces_within(e, after, etp, bytes, count, label)
    }

    /// `count` all-reduces of `bytes` within each run of `width` consecutive GPUs of executor
    /// `e` (its TP group, or its expert ranks), all at once, after task `after`; the executor's
    /// next compute waits. Returns the task that ends them, or `after` when there are none.
    fn allreduces_within(
        &mut self,
        e: usize,
        after: TaskId,
        width: usize,
        bytes: f64,
        count: u32,
        label: Label,
    ) -> TaskId {
        if bytes <= 0.0 || count == 0 || width < 2 {
            return after;
        }
        let groups: Vec<Vec<GpuId>> = (self.executors[e].devices.chunks(width))
            .map(|c| c.to_vec())
            .collect();
        let work = self.ring(&groups, bytes, Collective::AllReduce, count, vec![e]);
        let t = self.task(work, vec![after], label);
        self.pending_sends[e].push(t);
        t
    }

    /// The expert-parallel all-to-alls that follow compute task `after` of executor `e`
    /// (`count` of them, each GPU sending `bytes`, 1/n to each member of its group): this
    /// replica's sends to the others of its expert-parallel group, GPU by GPU of the same TP
    /// rank. Every replica of the group adds its own, so the group's traffic is complete; the
    /// replicas are not made to wait for each other here (they run in step, and the estimate
    /// and this share the group's slowest compute). The executor's next compute waits.
    fn ep_alltoalls(
        &mut self,
        e: usize,
        after: TaskId,
        bytes: f64,
        count: u32,
        label: Label,
    ) -> TaskId {
        let (si, r) = (self.executors[e].stage, self.executors[e].replica);
        let st = &self.plan.stages[si];
        let groups: Vec<Vec<GpuId>> = (0..st.tp_of(r) as usize)
            .map(|k| st.expert_peers(r, k))
            .collect();
        self.alltoalls(e, after, &groups, bytes, count, label)
    }

    /// The context-parallel all-to-alls (Ulysses) that follow compute task `after` of
    /// executor `e`, among the replicas of its context-parallel group, as `ep_alltoalls`.
    fn cp_alltoalls(
        &mut self,
        e: usize,
        after: TaskId,
        bytes: f64,
        count: u32,
        label: Label,
    ) -> TaskId {
        let (si, r) = (self.executors[e].stage, self.executors[e].replica);
        let st = &self.plan.stages[si];
        let groups: Vec<Vec<GpuId>> = (0..st.tp_of(r) as usize)
            .map(|k| st.cp_group(r).map(|q| st.replica(q)[k]).collect())
            .collect();
        self.alltoalls(e, after, &groups, bytes, count, label)
    }

    /// `count` all-to-alls after task `after`, each GPU of executor `e` (its TP rank k) sending
    /// `bytes`, 1/n to each member of `groups[k]` (itself among them): this replica's sends;
    /// every replica of a group adds its own. The executor's next compute waits.
    fn alltoalls(
        &mut self,
        e: usize,
        after: TaskId,
        groups: &[Vec<GpuId>],
        bytes: f64,
        count: u32,
        label: Label,
    ) -> TaskId {
        let n = groups.iter().map(|g| g.len()).max().unwrap_or(0);
        if bytes <= 0.0 || count == 0 || n <= 1 {
            return after;
        }
        let devices = self.executors[e].devices.clone();
        let pairs: Vec<(GpuId, GpuId)> = (devices.iter().zip(groups))
            .flat_map(|(&me, group)| {
                group
                    .iter()
                    .filter(move |&&g| g != me)
                    .map(move |&g| (me, g))
            })
            .collect();
        let spans = (groups.iter().flatten()).any(|g| g.node != devices[0].node);
        let edges: Vec<Edge> = pairs
            .into_iter()
            .map(|(from, to)| self.hop(from, to, bytes / n as f64 * count as f64))
            .collect();
        let cl = self.w.cluster;
        let alpha = if spans {
            cl.inter_latency
        } else {
            cl.intra_latency
        };
        let measured = (groups.iter())
            .map(|g| self.measured(g, CollectiveOp::AllToAll, bytes))
            .fold(0.0, f64::max);
        let work = Work::Flow {
            edges,
            latency: count as f64 * alpha.get(),
            efficiency: k::COLLECTIVE_EFFICIENCY,
            execs: vec![e],
            floor: count as f64 * measured,
        };
        let t = self.task(work, vec![after], label);
        self.pending_sends[e].push(t);
        t
    }
}

/// How many tasks `build` makes for `plan`, counted from the plan's shape without building
/// anything (saturating: a plan with 10⁸ micro-batches answers at once).
pub fn task_count(plan: &Plan) -> u64 {
    let depth = plan.pipeline_depth().max(1);
    let m = plan.micro_batches.max(1);
    let mut n: u64 = 0;
    let add = |n: &mut u64, x: u64| *n = n.saturating_add(x);
    let mul = |a: u64, b: u64| a.saturating_mul(b);
    for (si, st) in plan.stages.iter().enumerate() {
        let layers = st.layers.len() as u64;
        let dp = st.dp as u64;
        // Per pass: its compute (per layer where split), the TP all-reduces after each, the
        // expert-parallel all-to-alls, the context-parallel ring beside a second compute task
        // (at most: layers without attention have none), offload.
        let per = |split: bool| {
            let units = if split { layers } else { 1 };
            let tp = if st.tp > 1 { 2 } else { 1 };
            let ep = if st.ep > 1 { 2 } else { 1 };
            let cp = if st.cp > 1 { 2 } else { 0 };
            let etp = u64::from(st.etp.is_some_and(|e| e > 1 && e != st.tp));
            mul(units, tp + ep - 1 + cp + etp) + u64::from(!st.offload.is_none())
        };
        for r in 0..st.dp as usize {
            let steps = st.replica_steps(r, m).0;
            let passes = mul(steps, 2);
            if st.dp > 1 && st.zero >= 2 {
                add(&mut n, mul(passes, per(true)));
            } else if st.dp > 1 {
                // The last backward split, and the first forward where it waits for the gather.
                let whole = if gathers_during_forward(plan, st) {
                    2
                } else {
                    1
                };
                add(
                    &mut n,
                    mul(passes - whole, per(false)).saturating_add(mul(whole, per(true))),
                );
            } else {
                add(&mut n, mul(passes, per(false)));
            }
        }
        if st.dp > 1 {
            // ZeRO-3 gathers (both passes) and ZeRO-2/3 reduce-scatters per layer and
            // micro-batch; gradient buckets; the parameter gather (per bucket where it runs
            // ahead of the first forward): buckets counted as layers, at most one each.
            let zero = match st.zero {
                3 => 3,
                2 => 1,
                _ => 0,
            };
            let gathers = if gathers_during_forward(plan, st) {
                layers
            } else {
                1
            };
            add(
                &mut n,
                mul(mul(m, layers), zero).saturating_add(layers + gathers),
            );
        }
        // Sends to the next chunk: at most one per pair of replicas whose samples overlap.
        if let Some(nx) = plan.stages.get(si + 1) {
            add(&mut n, mul(mul(m, 2), dp + nx.dp as u64));
        }
    }
    // Optimizer steps and the tied-embedding all-reduces.
    let executors: u64 = plan.stages[..depth].iter().map(|s| s.dp as u64).sum();
    add(&mut n, mul(executors, 2));
    n
}

/// Builds the task graph of one iteration.
pub fn build(w: Workload<'_>, plan: &Plan, compute: &dyn ComputeTimes) -> Built {
    let depth = plan.pipeline_depth().max(1);
    let m = plan.micro_batches.max(1);
    let model = w.model;
    let elem = plan.precision.element_bytes();
    let (pg_bytes, gg_bytes) = plan.collective_element_bytes();
    let tokens_per_sample = model.tokens_per_sample(w.seq_len) as f64;

    let mut b = Builder {
        w,
        plan,
        compute,
        depth,
        graph: Graph::new(0, Vec::new()),
        labels: Vec::new(),
        resources: Vec::new(),
        capacity: Vec::new(),
        resource_ids: HashMap::new(),
        exec_of: BTreeMap::new(),
        executors: Vec::new(),
        last: Vec::new(),
        pending_sends: Vec::new(),
    };
    for p in 0..depth {
        let st = &plan.stages[p];
        for r in 0..st.dp as usize {
            b.exec_of.insert((p, r), b.executors.len());
            b.executors.push(Executor {
                stage: p,
                replica: r,
                devices: st.replica(r).to_vec(),
            });
        }
    }
    let n_exec = b.executors.len();
    b.last = vec![None; n_exec];
    b.pending_sends = vec![Vec::new(); n_exec];

    // Per (chunk, replica): layer costs and pass totals.
    let costs: Vec<Vec<Vec<LayerCost>>> = (0..plan.stages.len())
        .map(|si| {
            (0..plan.stages[si].dp as usize)
                .map(|r| cost::layer_costs(w, plan, compute, si, r))
                .collect()
        })
        .collect();
    // Replicas running different numbers of micro-batches (`Stage::replica_samples`): per
    // replica its count and, when smaller than its size, the last micro-batch's layer costs.
    let steps_of = |si: usize, r: usize| plan.stages[si].replica_steps(r, m);
    let last_costs: Vec<Vec<Option<Vec<LayerCost>>>> = (0..plan.stages.len())
        .map(|si| {
            let st = &plan.stages[si];
            (0..st.dp as usize)
                .map(|r| {
                    let (_, last) = steps_of(si, r);
                    (last != st.micro_batch_sizes[r]).then(|| {
                        let mut lp = plan.clone();
                        lp.stages[si].micro_batch_sizes[r] = last;
                        cost::layer_costs(w, &lp, compute, si, r)
                    })
                })
                .collect()
        })
        .collect();
    // Compute only: the TP all-reduces are flows of their own.
    let compute_of = |c: &LayerCost, pass: Pass| match pass {
        Pass::Forward => c.forward,
        Pass::Backward => c.backward + c.recompute,
    };
    let tp_count = |c: &LayerCost, pass: Pass| match pass {
        Pass::Forward => c.tp_allreduces_forward,
        Pass::Backward => c.tp_allreduces_backward,
    };
    // TP communication overlap on this replica's stage.
    let tp_beside = |si: usize, r: usize| plan.overlaps_tp(&plan.stages[si], r);
    let etp_count = |c: &LayerCost, pass: Pass| match pass {
        Pass::Forward => c.etp_allreduces_forward,
        Pass::Backward => c.etp_allreduces_backward,
    };
    let ep_count = |c: &LayerCost, pass: Pass| match pass {
        Pass::Forward => c.ep_alltoalls_forward,
        Pass::Backward => c.ep_alltoalls_backward,
    };
    // Context parallelism: rounds of the ring and the compute they run beside; all-to-alls.
    let cp_of = |c: &LayerCost, pass: Pass| match pass {
        Pass::Forward => (c.cp_rounds_forward, c.cp_overlap_forward),
        Pass::Backward => (c.cp_rounds_backward, c.cp_overlap_backward),
    };
    let cp_a2a_count = |c: &LayerCost, pass: Pass| match pass {
        Pass::Forward => c.cp_alltoalls_forward,
        Pass::Backward => c.cp_alltoalls_backward,
    };

    // Which passes are split per layer: ZeRO-2/3 stages (per-layer transfers), the last
    // micro-batch's backward when its gradients are reduced in buckets after it, and the first
    // forward when it waits for the parameter gather layer by layer.
    let split = |si: usize, r: usize, mb: u64, pass: Pass| {
        let st = &plan.stages[si];
        let lb = last_backward_mb(plan, depth, steps_of(si, r).0);
        st.dp > 1
            && (st.zero >= 2
                || (pass == Pass::Backward && mb == lb)
                || (pass == Pass::Forward && mb == 0 && gathers_during_forward(plan, st)))
    };

    // Compute tasks, executor by executor, in program order; flows attached afterwards. A pass
    // depends on flows that are created later, so first record every pass's tasks.
    let mut passes: BTreeMap<(usize, usize, u64, Pass), PassTasks> = BTreeMap::new();
    // Interleave executors' programs op by op so task ids follow time roughly (cheaper ties).
    let programs: Vec<Vec<Op>> = b
        .executors
        .iter()
        .map(|ex| {
            let steps = steps_of(ex.stage, ex.replica).0;
            program(plan.schedule, depth, ex.stage, steps)
                .into_iter()
                .map(|(c, mb, pass)| Op {
                    chunk: c * depth + ex.stage,
                    mb,
                    pass,
                })
                .collect()
        })
        .collect();
    let longest = programs.iter().map(|p| p.len()).max().unwrap_or(0);
    for i in 0..longest {
        for (e, prog) in programs.iter().enumerate() {
            let Some(&op) = prog.get(i) else {
                continue;
            };
            let r = b.executors[e].replica;
            let lc = match &last_costs[op.chunk][r] {
                Some(last) if op.mb + 1 == steps_of(op.chunk, r).0 => last,
                _ => &costs[op.chunk][r],
            };
            let label = |layer: Option<usize>| Label::Compute {
                stage: op.chunk,
                replica: r,
                mb: op.mb,
                pass: op.pass,
                layer,
            };
            let tp_label = |layer: Option<usize>| Label::TpAllReduce {
                stage: op.chunk,
                replica: r,
                mb: op.mb,
                pass: op.pass,
                layer,
            };
            let ep_label = |layer: Option<usize>| Label::EpAllToAll {
                stage: op.chunk,
                replica: r,
                mb: op.mb,
                pass: op.pass,
                layer,
            };
            let cp_label = |layer: Option<usize>| Label::CpComm {
                stage: op.chunk,
                replica: r,
                mb: op.mb,
                pass: op.pass,
                layer,
            };
            let tasks = if split(op.chunk, r, op.mb, op.pass) {
                let order: Vec<usize> = match op.pass {
                    Pass::Forward => (0..lc.len()).collect(),
                    Pass::Backward => (0..lc.len()).rev().collect(),
                };
                let start = plan.stages[op.chunk].layers.start;
                let mut layers = vec![0; lc.len()];
                let mut layer_ends = vec![0; lc.len()];
                let mut last_compute = 0;
                for &l in &order {
                    let c = &lc[l];
                    // With context parallelism the attention core (but its first block) runs
                    // beside the ring's transfers, after the rest of the layer.
                    let (rounds, overlap) = cp_of(c, op.pass);
                    let overlap = if rounds > 0 { overlap } else { 0.0 };
                    let beside = tp_beside(op.chunk, r) && etp_count(c, op.pass) == 0;
                    let start_deps = if beside { b.start_deps(e) } else { Vec::new() };
                    let t = b.compute(
                        e,
                        compute_of(c, op.pass) - overlap,
                        vec![],
                        label(Some(start + l)),
                    );
                    layers[l] = t;
                    last_compute = t;
                    if rounds > 0 {
                        last_compute = b.compute(e, overlap, vec![], label(Some(start + l)));
                        let chunk_rounds = c.cp_chunk_bytes.get() * rounds as f64;
                        b.cp_ring(e, t, chunk_rounds, rounds, cp_label(Some(start + l)));
                    }
                    let tp_end = if beside {
                        b.tp_allreduces_beside(
                            e,
                            start_deps,
                            last_compute,
                            c.tp_allreduce_bytes.get(),
                            tp_count(c, op.pass),
                            tp_label(Some(start + l)),
                        )
                    } else {
                        b.tp_allreduces(
                            e,
                            last_compute,
                            c.tp_allreduce_bytes.get(),
                            tp_count(c, op.pass),
                            tp_label(Some(start + l)),
                        )
                    };
                    let tp_end = b.etp_allreduces(
                        e,
                        tp_end,
                        c.tp_allreduce_bytes.get(),
                        etp_count(c, op.pass),
                        tp_label(Some(start + l)),
                    );
                    let ep_end = b.ep_alltoalls(
                        e,
                        tp_end,
                        c.ep_alltoall_bytes.get(),
                        ep_count(c, op.pass),
                        ep_label(Some(start + l)),
                    );
                    // Ulysses' all-to-alls: half of a forward's buffer each, on average.
                    let n = cp_a2a_count(c, op.pass);
                    layer_ends[l] = b.cp_alltoalls(
                        e,
                        ep_end,
                        c.cp_alltoall_bytes.get() / 2.0,
                        n,
                        cp_label(Some(start + l)),
                    );
                }
                let final_layer = *order.last().expect("a stage has layers");
                PassTasks {
                    first: layers[order[0]],
                    last: layer_ends[final_layer],
                    last_compute,
                    layers,
                    layer_ends,
                }
            } else {
                let d: f64 = lc.iter().map(|c| compute_of(c, op.pass)).sum();
                // The ring's transfers of all the pass's layers beside their attention cores,
                // after the rest of the pass.
                let (mut rounds, mut overlap, mut chunk_rounds) = (0u32, 0.0, 0.0);
                for c in lc {
                    let (n, o) = cp_of(c, op.pass);
                    if n > 0 {
                        rounds += n;
                        overlap += o;
                        chunk_rounds += c.cp_chunk_bytes.get() * n as f64;
                    }
                }
                // As the estimate: a pass with expert-rank collectives keeps its TP blocking.
                let beside =
                    tp_beside(op.chunk, r) && lc.iter().all(|c| etp_count(c, op.pass) == 0);
                let start_deps = if beside { b.start_deps(e) } else { Vec::new() };
                let t = b.compute(e, d - overlap, vec![], label(None));
                let mut last_compute = t;
                if rounds > 0 {
                    last_compute = b.compute(e, overlap, vec![], label(None));
                    b.cp_ring(e, t, chunk_rounds, rounds, cp_label(None));
                }
                // One flow per kind of collective for the pass: the layers' messages, each of
                // their mean size, with every message's latency.
                let pass = op.pass;
                let (tp_per, tp_n) =
                    messages(lc, |c| (tp_count(c, pass), c.tp_allreduce_bytes.get()));
                let tp_end = if beside {
                    b.tp_allreduces_beside(
                        e,
                        start_deps,
                        last_compute,
                        tp_per,
                        tp_n,
                        tp_label(None),
                    )
                } else {
                    b.tp_allreduces(e, last_compute, tp_per, tp_n, tp_label(None))
                };
                // Expert ranks' all-reduces and the MoE layers' all-to-alls likewise.
                let (etp_per, etp_n) =
                    messages(lc, |c| (etp_count(c, pass), c.tp_allreduce_bytes.get()));
                let (ep_per, ep_n) =
                    messages(lc, |c| (ep_count(c, pass), c.ep_alltoall_bytes.get()));
                let tp_end = b.etp_allreduces(e, tp_end, etp_per, etp_n, tp_label(None));
                let ep_end = b.ep_alltoalls(e, tp_end, ep_per, ep_n, ep_label(None));
                // Ulysses' all-to-alls likewise (each layer's forward buffer covers two).
                let (cp_per, cp_n) = messages(lc, |c| {
                    (cp_a2a_count(c, pass), c.cp_alltoall_bytes.get() / 2.0)
                });
                let end = b.cp_alltoalls(e, ep_end, cp_per, cp_n, cp_label(None));
                PassTasks {
                    first: t,
                    last: end,
                    last_compute,
                    layers: vec![],
                    layer_ends: vec![],
                }
            };
            // Offloading: the pass's host-link traffic runs beside it; the next pass waits.
            let st = &plan.stages[op.chunk];
            if !st.offload.is_none() {
                let (fwd_b, bwd_b) = cost::offload_bytes(w, plan, op.chunk, r);
                let bytes = match op.pass {
                    Pass::Forward => fwd_b,
                    Pass::Backward => bwd_b,
                };
                // Each GPU moves its own shard over its own host link.
                let devices = b.executors[e].devices.clone();
                let edges = devices
                    .iter()
                    .map(|&gpu| Edge {
                        bytes,
                        resources: vec![b.resource(Resource::HostLink { gpu })],
                    })
                    .collect();
                let deps = b.graph.tasks[tasks.first].deps.clone();
                let f = b.task(
                    Work::Flow {
                        edges,
                        latency: 0.0,
                        efficiency: 1.0,
                        execs: vec![e],
                        floor: 0.0,
                    },
                    deps,
                    Label::Offload {
                        stage: op.chunk,
                        replica: r,
                        mb: op.mb,
                        pass: op.pass,
                    },
                );
                b.pending_sends[e].push(f);
            }
            passes.insert((op.chunk, r, op.mb, op.pass), tasks);
        }
    }

    // The compute task that follows each one on its executor (for blocking sends).
    let mut next_compute: Vec<Option<TaskId>> = vec![None; b.graph.tasks.len()];
    {
        let mut prev_of_exec: Vec<Option<TaskId>> = vec![None; n_exec];
        for (t, task) in b.graph.tasks.iter().enumerate() {
            if let Work::Compute { exec, .. } = task.work {
                if let Some(p) = prev_of_exec[exec] {
                    next_compute[p] = Some(t);
                }
                prev_of_exec[exec] = Some(t);
            }
        }
    }

    // Each pass's first compute task ↦ its last and which pass it is (lookups only: the
    // order never shows).
    let last_of_pass: HashMap<TaskId, (TaskId, Pass)> = if plan.overlaps_pipeline_sends() {
        (passes.iter())
            .map(|(&(_, _, _, pass), p)| (p.first, (p.last_compute, pass)))
            .collect()
    } else {
        HashMap::new()
    };

    // Pipeline sends between consecutive chunks, routed by the samples each replica holds.
    for si in 0..plan.stages.len().saturating_sub(1) {
        let (a, z) = (&plan.stages[si], &plan.stages[si + 1]);
        let (ra, rz) = (sample_ranges(a), sample_ranges(z));
        let out = model.layers[a.layers.end - 1].output_bytes_per_token;
        for j in 0..m {
            for (x, &(xa, xb, xc)) in ra.iter().enumerate() {
                for (y, &(ya, yb, yc)) in rz.iter().enumerate() {
                    let overlap = xb.min(yb).saturating_sub(xa.max(ya));
                    // The same chunk of the same samples (every stage has one cp).
                    if overlap == 0 || xc != yc {
                        continue;
                    }
                    let bytes =
                        overlap as f64 * tokens_per_sample / a.cp.max(1) as f64 * out * elem / 2.0;
                    for pass in [Pass::Forward, Pass::Backward] {
                        let (fs, fr, ts, tr) = match pass {
                            Pass::Forward => (si, x, si + 1, y),
                            Pass::Backward => (si + 1, y, si, x),
                        };
                        let src_pass = &passes[&(fs, fr, j, pass)];
                        let (src, src_compute) = (src_pass.last, src_pass.last_compute);
                        let dst = passes[&(ts, tr, j, pass)].first;
                        let fe = b.exec_of[&(fs % depth, fr)];
                        let te = b.exec_of[&(ts % depth, tr)];
                        if fe == te {
                            b.graph.add_dep(dst, src);
                            continue;
                        }
                        let from = plan.stages[fs].replica(fr);
                        let to = plan.stages[ts].replica(tr);
                        let work = b.send(from, to, bytes, vec![fe]);
                        let f = b.task(
                            work,
                            vec![src],
                            Label::Send {
                                from_stage: fs,
                                from_replica: fr,
                                to_stage: ts,
                                to_replica: tr,
                                mb: j,
                                pass,
                            },
                        );
                        b.graph.add_dep(dst, f);
                        // The sender waits for its send before its next pass; under
                        // Megatron's interleaved schedule a backward's gradients go on while
                        // the next forward and backward compute (in the steady state, where
                        // the two alternate), and are waited for before the pass after them.
                        let mut next = next_compute[src_compute];
                        if pass == Pass::Backward {
                            let after = |t: TaskId| last_of_pass.get(&t).copied();
                            if let Some((l1, Pass::Forward)) = next.and_then(after) {
                                if let Some((l2, Pass::Backward)) = next_compute[l1].and_then(after)
                                {
                                    next = next_compute[l2];
                                }
                            }
                        }
                        match next {
                            Some(next) => b.graph.add_dep(next, f),
                            None => b.pending_sends[fe].push(f),
                        }
                    }
                }
            }
        }
    }

    // ZeRO-2/3 per-layer transfers of each micro-batch, collectives across the DP group.
    for (si, st) in plan.stages.iter().enumerate() {
        if st.dp <= 1 || st.zero < 2 {
            continue;
        }
        let start = st.layers.start;
        for j in 0..m {
            for pass in [Pass::Forward, Pass::Backward] {
                let layers: Vec<Vec<TaskId>> = (0..st.dp as usize)
                    .map(|r| passes[&(si, r, j, pass)].layers.clone())
                    .collect();
                let ends: Vec<Vec<TaskId>> = (0..st.dp as usize)
                    .map(|r| passes[&(si, r, j, pass)].layer_ends.clone())
                    .collect();
                let n = layers[0].len();
                let order: Vec<usize> = match pass {
                    Pass::Forward => (0..n).collect(),
                    Pass::Backward => (0..n).rev().collect(),
                };
                let mut prev_gather: Option<TaskId> = None;
                for (pos, &l) in order.iter().enumerate() {
                    // The layer's share of the stage's parameters: a tied head weight counts
                    // once per stage, as in the gradient buckets.
                    let params = cost::memory::layer_gpu_params(
                        model,
                        st.layers.start..st.layers.end,
                        start + l,
                        st.tp,
                        st.expert_shards(),
                    );
                    if st.zero >= 3 {
                        // Gather layer l while the layer before it computes (prefetch 1): it
                        // may start once the one before that is done.
                        let mut deps: Vec<TaskId> = prev_gather.into_iter().collect();
                        if pos >= 2 {
                            deps.extend(layers.iter().map(|ls| ls[order[pos - 2]]));
                        } else {
                            deps.extend(layers.iter().filter_map(|ls| {
                                b.graph.tasks[ls[order[0]]].deps.first().copied()
                            }));
                        }
                        let g = b.dp_collective(
                            si,
                            params * pg_bytes,
                            Collective::AllGather,
                            deps,
                            Label::ZeroGather {
                                stage: si,
                                mb: j,
                                layer: start + l,
                                pass,
                            },
                        );
                        for ls in &layers {
                            b.graph.add_dep(ls[l], g);
                        }
                        prev_gather = Some(g);
                    }
                    if pass == Pass::Backward {
                        let deps: Vec<TaskId> = ends.iter().map(|ls| ls[l]).collect();
                        let rs = b.dp_collective(
                            si,
                            params * gg_bytes,
                            Collective::ReduceScatter,
                            deps,
                            Label::ZeroScatter {
                                stage: si,
                                mb: j,
                                layer: start + l,
                            },
                        );
                        // The optimizer waits for every reduce-scatter.
                        for r in 0..st.dp as usize {
                            let e = b.exec_of[&(si % depth, r)];
                            b.pending_sends[e].push(rs);
                        }
                        // An engine that reduces on the compute stream (DeepSpeed's ZeRO-2
                        // hooks) computes nothing more until the reduce-scatter is done.
                        if !plan.engine.overlaps_grad_reduce(st.zero) {
                            for r in 0..st.dp as usize {
                                let next = match order.get(pos + 1) {
                                    Some(&k) => Some(layers[r][k]),
                                    None => next_compute[passes[&(si, r, j, pass)].last_compute],
                                };
                                if let Some(next) = next {
                                    b.graph.add_dep(next, rs);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    // End of the iteration: gradient buckets of the last backward, the tied embedding, the
    // optimizer, the ZeRO-1/2 parameter gather.
    let lb = |si: usize, r: usize| last_backward_mb(plan, depth, steps_of(si, r).0);
    let mut sync_of_stage: Vec<Vec<TaskId>> = vec![Vec::new(); plan.stages.len()];
    for (si, st) in plan.stages.iter().enumerate() {
        if st.dp <= 1 || st.zero >= 2 {
            continue;
        }
        let start = st.layers.start;
        // An engine that reduces after the backward (DeepSpeed below ZeRO-3,
        // `Engine::overlaps_grad_reduce`) starts every bucket once the whole pass is done.
        let beside = plan.engine.overlaps_grad_reduce(st.zero);
        let layers: Vec<Vec<TaskId>> = (0..st.dp as usize)
            .map(|r| {
                let pass = &passes[&(si, r, lb(si, r), Pass::Backward)];
                if beside {
                    pass.layer_ends.clone()
                } else {
                    vec![pass.last; pass.layer_ends.len()]
                }
            })
            .collect();
        let mut prev: Option<TaskId> = None;
        // One collective per bucket, once the backward of its first layer (the last it
        // computes) is done on every replica, after the bucket before it.
        for bucket in cost::grad_buckets(model, plan, st) {
            let params = cost::bucket_params(model, st, &bucket);
            let l = bucket.start - start;
            let mut deps: Vec<TaskId> = layers.iter().map(|ls| ls[l]).collect();
            deps.extend(prev);
            let kind = if st.zero == 0 {
                Collective::AllReduce
            } else {
                Collective::ReduceScatter
            };
            let f = b.dp_collective(
                si,
                params * gg_bytes,
                kind,
                deps,
                Label::GradSync {
                    stage: si,
                    layer: start + l,
                },
            );
            prev = Some(f);
        }
        sync_of_stage[si].extend(prev);
    }
    // Tied embedding: first and last stage all-reduce the shared weight's gradient.
    let tied_params = cost::tied_params_across_stages(model, plan);
    if tied_params > 0.0 && plan.stages.len() > 1 {
        let (first, lastst) = (0, plan.stages.len() - 1);
        let deps: Vec<TaskId> = [first, lastst]
            .iter()
            .flat_map(|&si| {
                let st = &plan.stages[si];
                (0..st.dp as usize).map(move |r| (si, r))
            })
            .map(|(si, r)| passes[&(si, r, lb(si, r), Pass::Backward)].last)
            .collect();
        // Every replica of the first stage all-reduces with its counterpart on the last stage,
        // shard by shard (the finer of the two TP splits), all at once: a GPU that holds
        // several shards takes part in several pairs.
        let (fs, ls) = (&plan.stages[first], &plan.stages[lastst]);
        let mut flows = Vec::new();
        for r in 0..fs.dp as usize {
            let rl = r % ls.dp.max(1) as usize;
            let (a, z) = (fs.replica(r), ls.replica(rl));
            let shards = a.len().max(z.len());
            let bytes = tied_params / shards as f64 * gg_bytes;
            let pairs: Vec<Vec<GpuId>> = (0..shards)
                .map(|k| vec![a[k * a.len() / shards], z[k * z.len() / shards]])
                .collect();
            let execs = vec![b.exec_of[&(0, r)], b.exec_of[&(lastst % depth, rl)]];
            let work = b.ring(&pairs, bytes, Collective::AllReduce, 1, execs);
            flows.push(b.task(work, deps.clone(), Label::TiedSync));
        }
        sync_of_stage[first].extend(flows.iter().copied());
        sync_of_stage[lastst].extend(flows);
    }
    for e in 0..n_exec {
        let (p, r) = (b.executors[e].stage, b.executors[e].replica);
        let chunks: Vec<usize> = (p..plan.stages.len()).step_by(depth).collect();
        let deps: Vec<TaskId> = chunks
            .iter()
            .flat_map(|&si| sync_of_stage[si].iter().copied())
            .collect();
        let duration: f64 = chunks
            .iter()
            .map(|&si| cost::optimizer_seconds(w, plan, si, r))
            .sum();
        let opt = b.compute(
            e,
            duration,
            deps,
            Label::Optimizer {
                stage: p,
                replica: r,
            },
        );
        let _ = opt;
    }
    // ZeRO-1/2: the step's parameters gathered. Where the engine overlaps the gather with the
    // next forward, this iteration's first forward waits for the previous step's gather bucket
    // by bucket — the gradient buckets (`cost::grad_buckets`: Megatron's buffers serve both;
    // FSDP's units are layers) — one gather after the other, each dispatched when the bucket
    // before it starts its forward (Megatron's `finish_param_sync` in a bucket's forward
    // pre-hook waits for that bucket's gather and dispatches the next one's).
    let aligned = plan.aligns_param_gather();
    let mut last_gather: Vec<Option<TaskId>> = vec![None; plan.stages.len()];
    for (si, st) in plan.stages.iter().enumerate() {
        if st.dp <= 1 || !gathers_during_forward(plan, st) {
            continue;
        }
        let start = st.layers.start;
        let layers: Vec<Vec<TaskId>> = (0..st.dp as usize)
            .map(|r| passes[&(si, r, 0, Pass::Forward)].layers.clone())
            .collect();
        // Where each layer's forward ends (its collectives included).
        let ends: Vec<Vec<TaskId>> = (0..st.dp as usize)
            .map(|r| passes[&(si, r, 0, Pass::Forward)].layer_ends.clone())
            .collect();
        // In forward order, each dispatched as the forward reaches it; Megatron's aligned
        // gathers go all at once, in the order the backward filled them (last layers first).
        let mut buckets = cost::grad_buckets(model, plan, st);
        if !aligned {
            buckets.reverse();
        }
        let mut prev: Option<TaskId> = None;
        for (k, bucket) in buckets.iter().enumerate() {
            let params = cost::bucket_params(model, st, bucket);
            // The first bucket's is dispatched when the forward could start (Megatron's
            // pre-hook): once what that forward waits for is done; the second's when the
            // first's forward starts, after its gather; later ones when the forward has done
            // the layer before the previous bucket.
            // Where every stage gathers at the start of the step (Megatron's aligned gather,
            // `Plan::aligns_param_gather`), a chunk's buckets go one after the other on its
            // communicator: a device's first two chunks' from the start, the second's after
            // the first's; a later chunk's after the chunk before it on the device and once
            // that chunk's first forward could start.
            let mut deps: Vec<TaskId> = prev.into_iter().collect();
            if aligned {
                if k == 0 && si >= depth {
                    deps.extend(last_gather[si - depth]);
                }
                if k == 0 && si >= 2 * depth {
                    for r in 0..st.dp as usize {
                        let first = passes[&(si - depth, r, 0, Pass::Forward)].first;
                        deps.extend(b.graph.tasks[first].deps.iter().copied());
                    }
                    deps.sort_unstable();
                    deps.dedup();
                }
            } else if k == 0 {
                for ls in &layers {
                    deps.extend(b.graph.tasks[ls[0]].deps.iter().copied());
                }
                deps.sort_unstable();
                deps.dedup();
            } else if k >= 2 {
                let before = buckets[k - 1].start - 1 - start;
                deps.extend(ends.iter().map(|ls| ls[before]));
            }
            let g = b.dp_collective(
                si,
                params * pg_bytes,
                Collective::AllGather,
                deps,
                Label::ParamGather {
                    stage: si,
                    layer: Some(bucket.start),
                },
            );
            for ls in &layers {
                for l in bucket.iter() {
                    b.graph.add_dep(ls[l - start], g);
                }
            }
            prev = Some(g);
        }
        last_gather[si] = prev;
    }
    // Otherwise after the step (each stage's group once all its replicas stepped).
    for (si, st) in plan.stages.iter().enumerate() {
        if st.dp <= 1 || !(st.zero == 1 || st.zero == 2) || gathers_during_forward(plan, st) {
            continue;
        }
        let params = cost::memory::gpu_params(model, st.layers.iter(), st.tp, st.expert_shards());
        let deps: Vec<TaskId> = (0..st.dp as usize)
            .filter_map(|r| b.last[b.exec_of[&(si % depth, r)]])
            .collect();
        b.dp_collective(
            si,
            params * pg_bytes,
            Collective::AllGather,
            deps,
            Label::ParamGather {
                stage: si,
                layer: None,
            },
        );
    }
    b.graph.executors = n_exec;
    b.graph.capacity = b.capacity;
    Built {
        graph: b.graph,
        labels: b.labels,
        resources: b.resources,
        executors: b.executors,
    }
}

/// Whether a stage's ZeRO-1/2 parameter gather runs ahead of its first forward, layer by layer.
/// The mean size of a pass's messages of one kind and their number, from each layer's
/// (messages, bytes per message): the layers' buffers (equal within a stage of one kind of
/// layer) sent as one flow.
fn messages(lc: &[LayerCost], of: impl Fn(&LayerCost) -> (u32, f64)) -> (f64, u32) {
    let (n, bytes) = lc
        .iter()
        .map(&of)
        .fold((0u32, 0.0), |(n, b), (k, per)| (n + k, b + per * k as f64));
    (if n > 0 { bytes / n as f64 } else { 0.0 }, n)
}

fn gathers_during_forward(plan: &Plan, st: &Stage) -> bool {
    (st.zero == 1 || st.zero == 2) && plan.engine.gathers_params_during_forward()
}

/// The micro-batch whose backward comes last on every stage (its gradients complete the
/// accumulation): the highest index for 1F1B and interleaving, 0 for GPipe (reverse order).
fn last_backward_mb(plan: &Plan, _depth: usize, m: u64) -> u64 {
    match plan.schedule {
        Schedule::Gpipe => 0,
        _ => m - 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_f_one_b_programs() {
        // 2 stages, 4 micro-batches: stage 0 warms up with one forward.
        let p0 = program(Schedule::OneFOneB, 2, 0, 4);
        let names: Vec<String> = p0
            .iter()
            .map(|(_, j, p)| format!("{}{j}", if *p == Pass::Forward { 'F' } else { 'B' }))
            .collect();
        assert_eq!(names, ["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"]);
        let p1 = program(Schedule::OneFOneB, 2, 1, 4);
        assert_eq!(p1[0].2, Pass::Forward);
        assert_eq!(p1[1].2, Pass::Backward);
    }

    #[test]
    fn interleaved_program_visits_every_chunk_and_micro_batch_once() {
        for p in 0..2 {
            let prog = program(Schedule::Interleaved { virtual_stages: 2 }, 2, p, 4);
            assert_eq!(prog.len(), 2 * 4 * 2);
            let mut f: Vec<(usize, u64)> = prog
                .iter()
                .filter(|o| o.2 == Pass::Forward)
                .map(|o| (o.0, o.1))
                .collect();
            f.sort();
            let want: Vec<(usize, u64)> =
                (0..2).flat_map(|c| (0..4).map(move |j| (c, j))).collect();
            assert_eq!(f, want);
        }
    }
}
