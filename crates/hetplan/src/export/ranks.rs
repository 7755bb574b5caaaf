//! Where each rank of an exported job runs: the node order (`torchrun --node_rank`) and each
//! node's `CUDA_VISIBLE_DEVICES` that put every pipeline stage on the GPUs the plan gave it.
//!
//! The engines hetplan exports to build their process groups from the global rank alone, in
//! one order: pipeline stage outermost, then the data-parallel rank, tensor-parallel rank
//! fastest — Megatron-Core's default `tp-cp-ep-dp-pp` (stage `s` holds global ranks
//! `[s·TP·DP, (s+1)·TP·DP)`, `../shared/engines.md`), torchtitan's device mesh with `pp`
//! outermost and `tp` innermost, DeepSpeed's `PipeModelDataParallelTopology` (axes pipe, data,
//! model). torchrun numbers ranks node by node: a node's processes take the global ranks after
//! those of every node with a lower `--node_rank` (torch elastic's `_assign_worker_ranks`: the
//! offset is the sum of the lower nodes' local world sizes, so nodes may run different process
//! counts), local rank `i` on the `i`-th GPU of `CUDA_VISIBLE_DEVICES`.
//!
//! So a plan can be launched when its GPUs, listed in the engine's rank order, visit every
//! node in one contiguous run. The data-parallel order inside a stage is free (replicas are
//! interchangeable), and so is the order of the GPUs inside a TP group: replicas on a node the
//! previous stage ended on go first, those on nodes the next stage uses go last, the rest by
//! node. What cannot be made contiguous is reported, node by node.

use crate::cluster::GpuId;
use crate::plan::Plan;
use serde::Serialize;

/// One node's part of the job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct NodeLaunch {
    /// The cluster's node index (`n3` is 3).
    pub node: u32,
    /// `torchrun --node_rank`.
    pub node_rank: u32,
    /// The global rank of its first process.
    pub first_rank: u32,
    /// `CUDA_VISIBLE_DEVICES`: the node's GPUs in local-rank order.
    pub gpus: Vec<u32>,
    /// The pipeline stages (physical, in plan order) whose GPUs are on it.
    pub stages: Vec<usize>,
}

/// Every rank's place.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RankLayout {
    /// In `node_rank` order.
    pub nodes: Vec<NodeLaunch>,
    /// Global rank → GPU.
    pub ranks: Vec<GpuId>,
}

impl RankLayout {
    pub fn world_size(&self) -> usize {
        self.ranks.len()
    }
}

/// The rank layout of `plan` for a stage-major, TP-fastest engine; every reason it cannot be
/// made (one per node whose GPUs are split) otherwise.
pub fn stage_major(plan: &Plan) -> Result<RankLayout, Vec<String>> {
    let depth = plan.pipeline_depth().max(1);
    // Planners ask before they validate: a plan whose stages do not hold their replicas, or
    // that puts one GPU in two stages, is a reason, never a panic.
    let mut why = Vec::new();
    for (g, st) in plan.stages.iter().enumerate().take(depth) {
        let need: usize = (0..st.dp as usize).map(|r| st.tp_of(r) as usize).sum();
        let empty_replica = (0..st.dp as usize).any(|r| st.tp_of(r) == 0);
        if st.dp == 0 || st.tp == 0 || empty_replica || need != st.devices.len() {
            why.push(format!(
                "stage {g} has {} GPUs for {} replicas of TP {}",
                st.devices.len(),
                st.dp,
                st.tp
            ));
        }
    }
    if plan.stages.len() < depth {
        why.push("the plan has fewer stages than its pipeline depth".into());
    }
    let mut all: Vec<GpuId> = (plan.stages.iter().take(depth))
        .flat_map(|s| s.devices.iter().copied())
        .collect();
    all.sort_unstable_by_key(|d| (d.node, d.local));
    if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
        why.push(format!(
            "GPU {} is in two pipeline stages; an engine runs one rank, one stage, per GPU",
            w[0]
        ));
    }
    if !why.is_empty() {
        return Err(why);
    }
    let stage_nodes = |g: usize| -> Vec<u32> {
        plan.stages
            .get(g)
            .map(|s| s.devices.iter().map(|d| d.node).collect())
            .unwrap_or_default()
    };
    let mut ranks: Vec<GpuId> = Vec::new();
    let mut rank_stage: Vec<usize> = Vec::new();
    for g in 0..depth {
        let st = &plan.stages[g];
        let next = stage_nodes(g + 1);
        let last_node = ranks.last().map(|d| d.node);
        let mut replicas: Vec<(u8, u32, usize)> = (0..st.dp as usize)
            .map(|r| {
                let node = st.replica(r)[0].node;
                let class = if Some(node) == last_node {
                    0
                } else if next.contains(&node) {
                    2
                } else {
                    1
                };
                (class, node, r)
            })
            .collect();
        replicas.sort_unstable();
        for (_, _, r) in replicas {
            for &d in st.replica(r) {
                ranks.push(d);
                rank_stage.push(g);
            }
        }
    }
    // Runs of one node in rank order.
    let mut runs: Vec<(u32, usize, usize)> = Vec::new(); // node, first rank, end
    for (i, d) in ranks.iter().enumerate() {
        match runs.last_mut() {
            Some(run) if run.0 == d.node => run.2 = i + 1,
            _ => runs.push((d.node, i, i + 1)),
        }
    }
    let mut why = Vec::new();
    let mut seen: Vec<u32> = Vec::new();
    for &(node, _, _) in &runs {
        if seen.contains(&node) {
            if !why
                .iter()
                .any(|w: &String| w.starts_with(&format!("node n{node}:")))
            {
                let stages: Vec<String> = runs
                    .iter()
                    .filter(|r| r.0 == node)
                    .map(|r| format!("stage {}", rank_stage[r.1]))
                    .collect();
                why.push(format!(
                    "node n{node}: its GPUs fall in {} runs of the stage-major rank order ({}); \
                     torchrun gives each node one contiguous block of ranks",
                    stages.len(),
                    stages.join(", ")
                ));
            }
        } else {
            seen.push(node);
        }
    }
    if !why.is_empty() {
        return Err(why);
    }
    let nodes = runs
        .iter()
        .enumerate()
        .map(|(k, &(node, start, end))| {
            let mut stages: Vec<usize> = rank_stage[start..end].to_vec();
            stages.dedup();
            NodeLaunch {
                node,
                node_rank: k as u32,
                first_rank: start as u32,
                gpus: ranks[start..end].iter().map(|d| d.local).collect(),
                stages,
            }
        })
        .collect();
    Ok(RankLayout { nodes, ranks })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{LayerRange, Recompute, Schedule, Stage};

    fn g(node: u32, local: u32) -> GpuId {
        GpuId { node, local }
    }

    fn stage(layers: (usize, usize), devices: Vec<GpuId>, tp: u32) -> Stage {
        let dp = devices.len() as u32 / tp;
        Stage {
            etp: None,
            ep: 1,
            cp: 1,
            layers: LayerRange {
                start: layers.0,
                end: layers.1,
            },
            devices,
            tp,
            replica_tp: Vec::new(),
            dp,
            micro_batch_sizes: vec![1; dp as usize],
            zero: 0,
            recompute: Recompute::None,
            offload: Default::default(),
            sequence_parallel: false,
            replica_samples: Vec::new(),
        }
    }

    fn plan(stages: Vec<Stage>) -> Plan {
        Plan {
            global_batch: 8,
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
    fn stages_take_consecutive_ranks_and_nodes_follow_them() {
        // Stage 0 on node 2, stage 1 on node 0: node 2 launches first.
        let p = plan(vec![
            stage((0, 3), vec![g(2, 1), g(2, 0), g(2, 3), g(2, 2)], 2),
            stage((3, 6), vec![g(0, 0), g(0, 1), g(0, 2), g(0, 3)], 2),
        ]);
        let l = stage_major(&p).unwrap();
        assert_eq!(l.world_size(), 8);
        assert_eq!(l.nodes[0].node, 2);
        assert_eq!(
            l.nodes[0].gpus,
            vec![1, 0, 3, 2],
            "TP pairs keep their order"
        );
        assert_eq!((l.nodes[1].node, l.nodes[1].first_rank), (0, 4));
        assert_eq!(l.nodes[1].stages, vec![1]);
    }

    #[test]
    fn a_node_shared_by_two_stages_sits_between_them() {
        // Node 1 holds a replica of stage 0 and one of stage 1; listed first in stage 0, it
        // would split. Its stage-0 replica goes last, its stage-1 replica first.
        let p = plan(vec![
            stage((0, 3), vec![g(1, 0), g(1, 1), g(0, 0), g(0, 1)], 2),
            stage((3, 6), vec![g(2, 0), g(2, 1), g(1, 2), g(1, 3)], 2),
        ]);
        let l = stage_major(&p).unwrap();
        let order: Vec<u32> = l.nodes.iter().map(|n| n.node).collect();
        assert_eq!(order, vec![0, 1, 2]);
        assert_eq!(l.nodes[1].stages, vec![0, 1]);
        assert_eq!(l.nodes[1].gpus, vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_node_split_by_another_stage_is_refused_with_its_name() {
        // Node 0 holds stages 0 and 2 around stage 1 on node 1.
        let p = plan(vec![
            stage((0, 2), vec![g(0, 0), g(0, 1)], 2),
            stage((2, 4), vec![g(1, 0), g(1, 1)], 2),
            stage((4, 6), vec![g(0, 2), g(0, 3)], 2),
        ]);
        let why = stage_major(&p).unwrap_err();
        assert_eq!(why.len(), 1);
        assert!(why[0].starts_with("node n0:"), "{why:?}");
        assert!(why[0].contains("stage 0, stage 2"), "{why:?}");
    }

    #[test]
    fn malformed_plans_are_reasons_not_panics() {
        // Too few GPUs for the replicas, and one GPU in two stages.
        let mut short = stage((0, 3), vec![g(0, 0)], 1);
        short.dp = 2;
        let why = stage_major(&plan(vec![short, stage((3, 6), vec![g(0, 1)], 1)])).unwrap_err();
        assert!(why[0].contains("1 GPUs for 2 replicas"), "{why:?}");
        let why = stage_major(&plan(vec![
            stage((0, 3), vec![g(0, 0)], 1),
            stage((3, 6), vec![g(0, 0)], 1),
        ]))
        .unwrap_err();
        assert!(why[0].contains("two pipeline stages"), "{why:?}");
    }
}
