//! A discrete-event engine over a task graph, with fluid sharing of links.
//!
//! Two kinds of activity: *compute* on an executor (one DP replica's TP group, whose GPUs move in
//! lock step) and *flows* (transfers and collectives) over resources (a GPU's link inside the
//! node, a node's network, a route between two nodes, a GPU's host link), each resource with
//! its capacity in bytes per second. A flow is one or more *edges* that move bytes at the same
//! time and finish together — a send is one edge per TP rank, a ring collective one edge per
//! ring hop, every hop carrying its share at once as NCCL's pipelined ring does. A task starts
//! when all its dependencies have finished. While running, every activity progresses at a rate:
//!
//! - compute: `1 / duration`, slowed by `COMPUTE_SLOWDOWN_UNDER_NCCL` while a flow of the same
//!   executor is active (Mist's interference model);
//! - flow: `1 / max(latency + max over edges of bytes / (efficiency · bandwidth), floor)`, the
//!   bandwidths max-min fair over every link and NIC the flows cross (progressive filling: all
//!   flows' paces rise together until a resource is full, whose flows then stop while the
//!   others go on — so a flow held back by a slow resource elsewhere leaves the rest of a
//!   shared one to the others, as congestion control does; a flow's edges move in proportion
//!   to their bytes, finishing together, and hold no more than that) — slowed by `NCCL_SLOWDOWN_UNDER_COMPUTE`
//!   while its executor computes. `floor` is the time the same transfer took when measured
//!   alone (a profile's collective curves): the hardware achieves no better, sharing adds to it. The time a flow takes is thus computed here, from bytes and capacities,
//!   not given to the engine.
//!
//! Time advances from one completion to the next; rates are recomputed after every event. Ties
//! are broken by task id, so the result does not depend on anything but the input.

use crate::cost::constants as k;

pub type TaskId = usize;

/// What a task is, for reports.
#[derive(Clone, Debug, PartialEq)]
pub enum Work {
    /// Runs on `exec` for `duration` seconds when alone.
    Compute { exec: usize, duration: f64 },
    /// Moves every edge's bytes at once, plus `latency` seconds of message start-ups, at
    /// `efficiency` of the bandwidth the edges get; `execs` are the executors whose GPUs run its
    /// kernels, for interference.
    Flow {
        edges: Vec<Edge>,
        latency: f64,
        efficiency: f64,
        execs: Vec<usize>,
        /// Seconds the flow takes at least, alone: what the same transfer took when measured
        /// (a profile's collectives); 0 without a measurement.
        floor: f64,
    },
}

/// Bytes crossing a path of resources.
#[derive(Clone, Debug, PartialEq)]
pub struct Edge {
    pub bytes: f64,
    pub resources: Vec<usize>,
}

impl Work {
    /// A share of a flow: of its bytes on every edge, its latency and its floor (a compute task
    /// is returned as it is).
    pub fn scaled(self, share: f64) -> Work {
        match self {
            Work::Flow {
                mut edges,
                latency,
                efficiency,
                execs,
                floor,
            } => {
                edges.iter_mut().for_each(|e| e.bytes *= share);
                Work::Flow {
                    edges,
                    latency: latency * share,
                    efficiency,
                    execs,
                    floor: floor * share,
                }
            }
            w => w,
        }
    }

    /// The resources a flow crosses, each once, in id order.
    pub fn resources(&self) -> Vec<usize> {
        match self {
            Work::Compute { .. } => Vec::new(),
            Work::Flow { edges, .. } => {
                let mut r: Vec<usize> = edges
                    .iter()
                    .flat_map(|e| e.resources.iter().copied())
                    .collect();
                r.sort_unstable();
                r.dedup();
                r
            }
        }
    }
}

#[derive(Clone, Debug)]
pub struct Task {
    pub work: Work,
    pub deps: Vec<TaskId>,
    pub start: f64,
    pub end: f64,
    /// The dependency that finished last (what this task waited for), if any.
    pub critical_dep: Option<TaskId>,
}

/// Why a run ended without finishing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    #[error("the simulation stopped after {0} events (the event limit); raise the limit or simulate a smaller plan")]
    EventLimit(u64),
    #[error("{0} tasks never became ready: the task graph has a cycle (a bug in the schedule)")]
    Deadlock(usize),
}

/// The task graph under construction and, after `run`, its timeline.
#[derive(Default)]
pub struct Graph {
    pub tasks: Vec<Task>,
    /// Capacity of each resource, bytes per second.
    pub capacity: Vec<f64>,
    pub executors: usize,
    /// Mist's interference between compute and communication of the same executor.
    pub interference: bool,
}

impl Graph {
    pub fn new(executors: usize, capacity: Vec<f64>) -> Graph {
        Graph {
            tasks: Vec::new(),
            capacity,
            executors,
            interference: true,
        }
    }

    pub fn add(&mut self, work: Work, deps: Vec<TaskId>) -> TaskId {
        self.tasks.push(Task {
            work,
            deps,
            start: f64::NAN,
            end: f64::NAN,
            critical_dep: None,
        });
        self.tasks.len() - 1
    }

    pub fn add_dep(&mut self, task: TaskId, dep: TaskId) {
        self.tasks[task].deps.push(dep);
    }

    /// Runs every task; returns the number of events processed.
    pub fn run(&mut self, max_events: u64) -> Result<u64, EngineError> {
        let n = self.tasks.len();
        let mut dependents: Vec<Vec<TaskId>> = vec![Vec::new(); n];
        let mut waiting: Vec<usize> = vec![0; n];
        for (t, task) in self.tasks.iter().enumerate() {
            let mut deps = task.deps.clone();
            deps.sort_unstable();
            deps.dedup();
            waiting[t] = deps.len();
            for d in deps {
                dependents[d].push(t);
            }
        }
        // Active activities: (task, remaining fraction of work).
        let mut active: Vec<(TaskId, f64)> = Vec::new();
        let mut ready: Vec<TaskId> = (0..n).filter(|&t| waiting[t] == 0).collect();
        let mut now = 0.0f64;
        let mut done = 0usize;
        let mut events = 0u64;
        let mut exec_flows = vec![0usize; self.executors];
        let mut exec_compute = vec![0usize; self.executors];
        let mut rates: Vec<f64> = Vec::new();
        let mut shares = FairShares::default();
        let mut finished: Vec<TaskId> = Vec::new();
        loop {
            // Start everything that is ready (in id order).
            ready.sort_unstable();
            for t in ready.drain(..) {
                self.tasks[t].start = now;
                match &self.tasks[t].work {
                    Work::Compute { exec, .. } => exec_compute[*exec] += 1,
                    Work::Flow { execs, .. } => {
                        for e in execs {
                            exec_flows[*e] += 1;
                        }
                    }
                }
                active.push((t, 1.0));
            }
            if active.is_empty() {
                break;
            }
            events += 1;
            if events > max_events {
                return Err(EngineError::EventLimit(max_events));
            }
            // Rates and the next completion.
            shares.fill(&self.tasks, &active, &self.capacity);
            rates.clear();
            let mut next = f64::INFINITY;
            for (i, &(t, left)) in active.iter().enumerate() {
                let rate = self.rate(t, &exec_flows, &exec_compute, shares.of(i));
                rates.push(rate);
                let eta = if rate.is_infinite() { 0.0 } else { left / rate };
                if eta < next {
                    next = eta;
                }
            }
            // Advance; finish what reaches zero (with a relative tolerance for rounding).
            let dt = next;
            now += dt;
            finished.clear();
            for (i, (t, left)) in active.iter_mut().enumerate() {
                let rate = rates[i];
                *left -= if rate.is_infinite() { *left } else { rate * dt };
                if *left <= 1e-12 {
                    finished.push(*t);
                }
            }
            active.retain(|(t, _)| !finished.contains(t));
            finished.sort_unstable();
            for &t in &finished {
                self.tasks[t].end = now;
                done += 1;
                match &self.tasks[t].work {
                    Work::Compute { exec, .. } => exec_compute[*exec] -= 1,
                    Work::Flow { execs, .. } => {
                        for e in execs {
                            exec_flows[*e] -= 1;
                        }
                    }
                }
                for &d in &dependents[t] {
                    waiting[d] -= 1;
                    // The last dependency to finish is what the task waited for.
                    self.tasks[d].critical_dep = Some(t);
                    if waiting[d] == 0 {
                        ready.push(d);
                    }
                }
            }
        }
        if done < n {
            return Err(EngineError::Deadlock(n - done));
        }
        Ok(events)
    }

    /// The rate of task `t`; `bandwidth` holds its edges' fair shares when it is a flow.
    fn rate(
        &self,
        t: TaskId,
        exec_flows: &[usize],
        exec_compute: &[usize],
        bandwidth: &[f64],
    ) -> f64 {
        match &self.tasks[t].work {
            Work::Compute { exec, duration } => {
                if *duration <= 0.0 {
                    return f64::INFINITY;
                }
                let slow = if self.interference && exec_flows[*exec] > 0 {
                    k::COMPUTE_SLOWDOWN_UNDER_NCCL
                } else {
                    1.0
                };
                1.0 / (duration * slow)
            }
            Work::Flow {
                edges,
                latency,
                efficiency,
                execs,
                floor,
            } => {
                let mut transfer = 0.0f64;
                for (e, &bw) in edges.iter().zip(bandwidth) {
                    if e.bytes <= 0.0 {
                        continue;
                    }
                    transfer = transfer.max(e.bytes / (bw * efficiency));
                }
                let duration = (latency + transfer).max(*floor);
                if duration <= 0.0 {
                    return f64::INFINITY;
                }
                let slow = if self.interference && execs.iter().any(|e| exec_compute[*e] > 0) {
                    k::NCCL_SLOWDOWN_UNDER_COMPUTE
                } else {
                    1.0
                };
                1.0 / (duration * slow)
            }
        }
    }
}

/// Max-min fair bandwidths of the active flows over the resources they cross, by progressive
/// filling, recomputed at every event. Only a full resource holds a flow back here: a flow
/// slowed by its latency, its measured floor or interference keeps the share it would move
/// at without them. A flow's edges finish together, so each moves at its
/// share of the flow's pace — `b · bytes / largest edge's bytes` — and a flow holds on each
/// resource what its edges there move at that pace, no more: a ring held back at one hop does
/// not take bandwidth at the others that it cannot use.
#[derive(Default)]
struct FairShares {
    /// Per active task, where its edges' bandwidths start in `bw` (and end: the next start).
    start: Vec<usize>,
    bw: Vec<f64>,
    /// The active flows that move bytes.
    flows: Vec<FairFlow>,
    /// Every flow's (resource index into `resources`, weight) pairs, flow after flow
    /// (`FairFlow::weights`): one buffer kept across events, so that filling allocates nothing
    /// once it has grown.
    weights: Vec<(usize, f64)>,
    /// The resources in use (sorted), their capacity left and the weight still rising on them.
    resources: Vec<usize>,
    left: Vec<f64>,
    rising: Vec<f64>,
}

/// A flow in [`FairShares`]: its index in the active list, its largest edge's bytes, its pace
/// (its largest edge's bandwidth), where its weights lie in `FairShares::weights` (the weight
/// it puts on each resource per unit of pace), and whether its pace has stopped rising.
struct FairFlow {
    active: usize,
    largest: f64,
    pace: f64,
    weights: std::ops::Range<usize>,
    frozen: bool,
}

impl FairShares {
    fn fill(&mut self, tasks: &[Task], active: &[(TaskId, f64)], capacity: &[f64]) {
        self.start.clear();
        self.bw.clear();
        self.resources.clear();
        self.flows.clear();
        self.weights.clear();
        for &(t, _) in active {
            self.start.push(self.bw.len());
            if let Work::Flow { edges, .. } = &tasks[t].work {
                for e in edges {
                    self.bw.push(f64::INFINITY);
                    if e.bytes > 0.0 {
                        self.resources.extend(&e.resources);
                    }
                }
            }
        }
        self.start.push(self.bw.len());
        self.resources.sort_unstable();
        self.resources.dedup();
        self.left.clear();
        self.left
            .extend(self.resources.iter().map(|&r| capacity[r]));
        self.rising.clear();
        self.rising.resize(self.resources.len(), 0.0);
        for (i, &(t, _)) in active.iter().enumerate() {
            let Work::Flow { edges, .. } = &tasks[t].work else {
                continue;
            };
            let largest = edges
                .iter()
                .filter(|e| !e.resources.is_empty())
                .map(|e| e.bytes)
                .fold(0.0f64, f64::max);
            if largest <= 0.0 {
                continue;
            }
            // (resource, weight) pairs, a resource crossed by several edges summed: sorted
            // by resource, then merged in one pass, in place at the buffer's end.
            let from = self.weights.len();
            for e in edges.iter().filter(|e| e.bytes > 0.0) {
                for r in &e.resources {
                    let ri = self.resources.binary_search(r).expect("collected above");
                    self.weights.push((ri, e.bytes / largest));
                }
            }
            self.weights[from..].sort_by_key(|&(ri, _)| ri);
            let mut kept = from;
            for k in from..self.weights.len() {
                let (ri, w) = self.weights[k];
                if k > from && self.weights[kept - 1].0 == ri {
                    self.weights[kept - 1].1 += w;
                } else {
                    self.weights[kept] = (ri, w);
                    kept += 1;
                }
            }
            self.weights.truncate(kept);
            for &(ri, w) in &self.weights[from..] {
                self.rising[ri] += w;
            }
            self.flows.push(FairFlow {
                active: i,
                largest,
                pace: 0.0,
                weights: from..kept,
                frozen: false,
            });
        }
        // Raise every rising flow's pace together until a resource fills; freeze the flows
        // crossing it; repeat. Each round freezes at least one resource's flows.
        loop {
            let step = self
                .rising
                .iter()
                .zip(&self.left)
                .filter(|(&w, _)| w > 1e-12)
                .map(|(&w, &l)| l.max(0.0) / w)
                .fold(f64::INFINITY, f64::min);
            if !step.is_finite() {
                break;
            }
            for f in self.flows.iter_mut().filter(|f| !f.frozen) {
                f.pace += step;
            }
            for (l, &w) in self.left.iter_mut().zip(&self.rising) {
                *l -= step * w;
            }
            for f in self.flows.iter_mut().filter(|f| !f.frozen) {
                let full = self.weights[f.weights.clone()].iter().any(|&(ri, _)| {
                    self.rising[ri] > 1e-12 && self.left[ri] <= 1e-9 * capacity[self.resources[ri]]
                });
                if full {
                    f.frozen = true;
                }
            }
            for ri in 0..self.rising.len() {
                self.rising[ri] = 0.0;
            }
            for f in self.flows.iter().filter(|f| !f.frozen) {
                for &(ri, w) in &self.weights[f.weights.clone()] {
                    self.rising[ri] += w;
                }
            }
        }
        for f in &self.flows {
            let (i, pace, largest) = (f.active, f.pace, f.largest);
            let t = active[i].0;
            let Work::Flow { edges, .. } = &tasks[t].work else {
                unreachable!("only flows are listed")
            };
            for (k, e) in edges.iter().enumerate() {
                if e.bytes > 0.0 && !e.resources.is_empty() {
                    self.bw[self.start[i] + k] = pace * e.bytes / largest;
                }
            }
        }
    }

    /// The edge bandwidths of the `i`-th active task (empty for compute).
    fn of(&self, i: usize) -> &[f64] {
        &self.bw[self.start[i]..self.start[i + 1]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One edge of `bytes` over `resources` (capacity 1 byte/s in these tests), no latency.
    fn flow(resources: &[usize], bytes: f64, execs: &[usize]) -> Work {
        Work::Flow {
            edges: vec![Edge {
                bytes,
                resources: resources.to_vec(),
            }],
            latency: 0.0,
            efficiency: 1.0,
            execs: execs.to_vec(),
            floor: 0.0,
        }
    }

    #[test]
    fn a_measured_floor_holds_alone_and_sharing_adds_to_the_modelled_time_only() {
        // 1 byte over 1 B/s takes 1 s modelled; measured alone it took 3 s: 3 s.
        let mut g = Graph::new(0, vec![1.0]);
        let mut slow = flow(&[0], 1.0, &[]);
        if let Work::Flow { floor, .. } = &mut slow {
            *floor = 3.0;
        }
        let a = g.add(slow.clone(), vec![]);
        g.run(100).unwrap();
        assert!((g.tasks[a].end - 3.0).abs() < 1e-12);
        // Beside a second flow on the resource the modelled time doubles to 2 s, still under
        // the floor: 3 s. Four flows make it 4 s, above it.
        let mut g = Graph::new(0, vec![1.0]);
        let a = g.add(slow.clone(), vec![]);
        g.add(flow(&[0], 10.0, &[]), vec![]);
        g.run(100).unwrap();
        assert!((g.tasks[a].end - 3.0).abs() < 1e-12, "{}", g.tasks[a].end);
        let mut g = Graph::new(0, vec![1.0]);
        let a = g.add(slow, vec![]);
        for _ in 0..3 {
            g.add(flow(&[0], 10.0, &[]), vec![]);
        }
        g.run(100).unwrap();
        assert!((g.tasks[a].end - 4.0).abs() < 1e-12, "{}", g.tasks[a].end);
    }

    #[test]
    fn a_ring_goes_at_its_slowest_edge_and_shares_it() {
        // Two edges of 1 byte in one flow: over a 2 B/s and a 1 B/s resource the flow takes 1 s.
        // A second flow on the slow resource halves that edge's share: both end at 2 s.
        let mut g = Graph::new(0, vec![2.0, 1.0]);
        let ring = Work::Flow {
            edges: vec![
                Edge {
                    bytes: 1.0,
                    resources: vec![0],
                },
                Edge {
                    bytes: 1.0,
                    resources: vec![1],
                },
            ],
            latency: 0.25,
            efficiency: 1.0,
            execs: vec![],
            floor: 0.0,
        };
        let a = g.add(ring, vec![]);
        let b = g.add(flow(&[1], 0.75, &[]), vec![]);
        g.run(100).unwrap();
        // Together: the ring's rate 1/(0.25 + 2) and the send's 1/1.5; the send ends at 1.5 s
        // with 1.5/2.25 of the ring done; the rest alone at rate 1/1.25: 0.75/2.25·1.25 s more.
        assert!((g.tasks[b].end - 1.5).abs() < 1e-12);
        let expect = 1.5 + (1.0 - 1.5 / 2.25) * 1.25;
        assert!(
            (g.tasks[a].end - expect).abs() < 1e-12,
            "{}",
            g.tasks[a].end
        );
    }

    #[test]
    fn a_chain_adds_up() {
        let mut g = Graph::new(1, vec![1.0]);
        g.interference = false;
        let a = g.add(
            Work::Compute {
                exec: 0,
                duration: 1.0,
            },
            vec![],
        );
        let b = g.add(flow(&[0], 0.5, &[]), vec![a]);
        let c = g.add(
            Work::Compute {
                exec: 0,
                duration: 2.0,
            },
            vec![b],
        );
        g.run(100).unwrap();
        assert_eq!(g.tasks[c].end, 3.5);
        assert_eq!(g.tasks[c].critical_dep, Some(b));
    }

    #[test]
    fn two_flows_share_a_link_fairly() {
        // Two 1-second transfers on one link, started together: both end at 2 s. A third on
        // another link is unaffected.
        let mut g = Graph::new(0, vec![1.0, 1.0]);
        let a = g.add(flow(&[0], 1.0, &[]), vec![]);
        let b = g.add(flow(&[0], 1.0, &[]), vec![]);
        let c = g.add(flow(&[1], 1.0, &[]), vec![]);
        g.run(100).unwrap();
        assert!((g.tasks[a].end - 2.0).abs() < 1e-12);
        assert!((g.tasks[b].end - 2.0).abs() < 1e-12);
        assert!((g.tasks[c].end - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_flow_held_back_elsewhere_leaves_the_rest_of_a_shared_link() {
        // Link 0 (1 byte/s) carries both; flow a also crosses link 1 (0.25 byte/s), which holds
        // it at 0.25: max-min fairness gives b the other 0.75, not half. 0.25 and 0.75 bytes:
        // both end at 1 s (an equal split would end b at 1.5 s).
        let mut g = Graph::new(0, vec![1.0, 0.25]);
        let a = g.add(flow(&[0, 1], 0.25, &[]), vec![]);
        let b = g.add(flow(&[0], 0.75, &[]), vec![]);
        g.run(100).unwrap();
        assert!((g.tasks[a].end - 1.0).abs() < 1e-9, "{}", g.tasks[a].end);
        assert!((g.tasks[b].end - 1.0).abs() < 1e-9, "{}", g.tasks[b].end);
    }

    #[test]
    fn a_short_flow_leaves_the_link_to_the_long_one() {
        // 1 s and 3 s alone: together at half speed until the short one ends at 2 s (it moved
        // 1 s of work), then the long one has 2 s of its 3 s left... it moved 1 s, so 2 s
        // remain at full speed: ends at 4 s.
        let mut g = Graph::new(0, vec![1.0]);
        let short = g.add(flow(&[0], 1.0, &[]), vec![]);
        let long = g.add(flow(&[0], 3.0, &[]), vec![]);
        g.run(100).unwrap();
        assert!((g.tasks[short].end - 2.0).abs() < 1e-12);
        assert!((g.tasks[long].end - 4.0).abs() < 1e-12);
    }

    #[test]
    fn interference_slows_overlapped_compute() {
        // 10 s of compute beside a 3 s flow of the same executor, both slowed by 1.1: Mist's
        // two-stream result (cost::overlap::co_run).
        let mut g = Graph::new(1, vec![1.0]);
        let c = g.add(
            Work::Compute {
                exec: 0,
                duration: 10.0,
            },
            vec![],
        );
        g.add(flow(&[0], 3.0, &[0]), vec![]);
        g.run(100).unwrap();
        let expect = crate::cost::overlap::co_run(10.0, 3.0);
        assert!(
            (g.tasks[c].end - expect).abs() < 1e-9,
            "{} vs {expect}",
            g.tasks[c].end
        );
    }

    #[test]
    fn cycles_are_reported() {
        let mut g = Graph::new(1, vec![]);
        let a = g.add(
            Work::Compute {
                exec: 0,
                duration: 1.0,
            },
            vec![],
        );
        let b = g.add(
            Work::Compute {
                exec: 0,
                duration: 1.0,
            },
            vec![a],
        );
        g.add_dep(a, b);
        assert_eq!(g.run(100), Err(EngineError::Deadlock(2)));
    }
}
