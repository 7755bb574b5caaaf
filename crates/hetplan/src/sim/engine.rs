//! A discrete-event engine over a task graph, with fluid sharing of links.
//!
//! Two kinds of activity: *compute* on an executor (one DP replica's TP group, whose GPUs move in
//! lock step) and *flows* (transfers and collectives) over resources (a GPU's link inside the
//! node, a node's network, a GPU's host link). A task starts when all its dependencies have
//! finished. While running, every activity progresses at a rate:
//!
//! - compute: `1 / duration`, slowed by `COMPUTE_SLOWDOWN_UNDER_NCCL` while a flow of the same
//!   executor is active (Mist's interference model);
//! - flow: `1 / duration_alone × min over its resources of 1 / (flows on that resource)` — fair
//!   sharing of every link and NIC it crosses — slowed by `NCCL_SLOWDOWN_UNDER_COMPUTE` while its
//!   executor computes.
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
    /// Crosses `resources`, `duration` seconds when alone; `execs` are the executors whose GPUs
    /// run its kernels, for interference.
    Flow {
        resources: Vec<usize>,
        duration: f64,
        execs: Vec<usize>,
    },
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
    pub resources: usize,
    pub executors: usize,
    /// Mist's interference between compute and communication of the same executor.
    pub interference: bool,
}

impl Graph {
    pub fn new(executors: usize, resources: usize) -> Graph {
        Graph {
            tasks: Vec::new(),
            resources,
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
        let mut res_flows = vec![0usize; self.resources];
        let mut rates: Vec<f64> = Vec::new();
        loop {
            // Start everything that is ready (in id order).
            ready.sort_unstable();
            for t in ready.drain(..) {
                self.tasks[t].start = now;
                match &self.tasks[t].work {
                    Work::Compute { exec, .. } => exec_compute[*exec] += 1,
                    Work::Flow {
                        resources, execs, ..
                    } => {
                        for r in resources {
                            res_flows[*r] += 1;
                        }
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
            rates.clear();
            let mut next = f64::INFINITY;
            for &(t, left) in &active {
                let rate = self.rate(t, &exec_flows, &exec_compute, &res_flows);
                rates.push(rate);
                let eta = if rate.is_infinite() { 0.0 } else { left / rate };
                if eta < next {
                    next = eta;
                }
            }
            // Advance; finish what reaches zero (with a relative tolerance for rounding).
            let dt = next;
            now += dt;
            let mut finished = Vec::new();
            for (i, (t, left)) in active.iter_mut().enumerate() {
                let rate = rates[i];
                *left -= if rate.is_infinite() { *left } else { rate * dt };
                if *left <= 1e-12 {
                    finished.push(*t);
                }
            }
            active.retain(|(t, _)| !finished.contains(t));
            finished.sort_unstable();
            for t in finished {
                self.tasks[t].end = now;
                done += 1;
                match &self.tasks[t].work {
                    Work::Compute { exec, .. } => exec_compute[*exec] -= 1,
                    Work::Flow {
                        resources, execs, ..
                    } => {
                        for r in resources {
                            res_flows[*r] -= 1;
                        }
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

    fn rate(
        &self,
        t: TaskId,
        exec_flows: &[usize],
        exec_compute: &[usize],
        res_flows: &[usize],
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
                resources,
                duration,
                execs,
            } => {
                if *duration <= 0.0 {
                    return f64::INFINITY;
                }
                let share = resources
                    .iter()
                    .map(|r| 1.0 / res_flows[*r].max(1) as f64)
                    .fold(1.0, f64::min);
                let slow = if self.interference && execs.iter().any(|e| exec_compute[*e] > 0) {
                    k::NCCL_SLOWDOWN_UNDER_COMPUTE
                } else {
                    1.0
                };
                share / (duration * slow)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_adds_up() {
        let mut g = Graph::new(1, 1);
        g.interference = false;
        let a = g.add(
            Work::Compute {
                exec: 0,
                duration: 1.0,
            },
            vec![],
        );
        let b = g.add(
            Work::Flow {
                resources: vec![0],
                duration: 0.5,
                execs: vec![],
            },
            vec![a],
        );
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
        let mut g = Graph::new(0, 2);
        let f = |r: usize| Work::Flow {
            resources: vec![r],
            duration: 1.0,
            execs: vec![],
        };
        let a = g.add(f(0), vec![]);
        let b = g.add(f(0), vec![]);
        let c = g.add(f(1), vec![]);
        g.run(100).unwrap();
        assert!((g.tasks[a].end - 2.0).abs() < 1e-12);
        assert!((g.tasks[b].end - 2.0).abs() < 1e-12);
        assert!((g.tasks[c].end - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_short_flow_leaves_the_link_to_the_long_one() {
        // 1 s and 3 s alone: together at half speed until the short one ends at 2 s (it moved
        // 1 s of work), then the long one has 2 s of its 3 s left... it moved 1 s, so 2 s
        // remain at full speed: ends at 4 s.
        let mut g = Graph::new(0, 1);
        let short = g.add(
            Work::Flow {
                resources: vec![0],
                duration: 1.0,
                execs: vec![],
            },
            vec![],
        );
        let long = g.add(
            Work::Flow {
                resources: vec![0],
                duration: 3.0,
                execs: vec![],
            },
            vec![],
        );
        g.run(100).unwrap();
        assert!((g.tasks[short].end - 2.0).abs() < 1e-12);
        assert!((g.tasks[long].end - 4.0).abs() < 1e-12);
    }

    #[test]
    fn interference_slows_overlapped_compute() {
        // 10 s of compute beside a 3 s flow of the same executor, both slowed by 1.1: Mist's
        // two-stream result (cost::overlap::co_run).
        let mut g = Graph::new(1, 1);
        let c = g.add(
            Work::Compute {
                exec: 0,
                duration: 10.0,
            },
            vec![],
        );
        g.add(
            Work::Flow {
                resources: vec![0],
                duration: 3.0,
                execs: vec![0],
            },
            vec![],
        );
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
        let mut g = Graph::new(1, 0);
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
