//! AMP (Li et al., NeurIPS 2022) against the paper's own findings, against the paper's
//! O(k·L⁴) dynamic program, against brute force over its space under its cost model, and
//! against the exhaustive oracle under hetplan's estimate.

mod shared;
use hetplan::cluster::spec::{catalog_cluster, parse_cluster_toml};
use hetplan::cost::Analytic;
use hetplan::model::catalog::catalog_model;
use hetplan::model::TransformerConfig;
use hetplan::plan::Precision;
use hetplan::planners::amp::{self, Amp, AmpCost, Candidate, Pipeline};
use hetplan::planners::{
    common, oracle::Oracle, Limits, NoClock, NoProgress, PlanOptions, Planner, PlannerError,
    Problem, Search, StopReason,
};
use hetplan::{Cluster, Model};

fn problem<'a>(model: &'a Model, cluster: &'a Cluster, global_batch: u64) -> Problem<'a> {
    Problem {
        model,
        cluster,
        global_batch,
        seq_len: 1024,
        compute: &Analytic,
        // AMP ran DeepSpeed with fp16 (§4.4); V100 and T4 have no bf16.
        options: PlanOptions {
            precision: Precision::Fp16,
            ..Default::default()
        },
    }
}

fn cluster(toml: &str) -> Cluster {
    parse_cluster_toml(toml).unwrap()
}

/// 2 V100 + 2 T4, 25 Gbps (the planners' small heterogeneous cluster).
fn hetero4() -> Cluster {
    shared::small_cluster()
}

/// Two p3.8xlarge-like nodes: 2 × 4 V100 on NVLink, 10 Gbps between them.
fn homo8() -> Cluster {
    cluster(
        r#"
name = "p3-x2"
[[node_group]]
gpu = "v100-sxm2-16gb"
gpus_per_node = 4
nodes = 2
inter_node_bandwidth = "10 Gbps"
"#,
    )
}

/// Half of AMP's heterogeneous cluster: one p3.8xlarge-like node and one g4dn.12xlarge-like.
fn hetero8() -> Cluster {
    cluster(
        r#"
name = "amp-hetero-half"
[[node_group]]
gpu = "v100-sxm2-16gb"
gpus_per_node = 4
nodes = 1
inter_node_bandwidth = "10 Gbps"
[[node_group]]
gpu = "t4"
gpus_per_node = 4
nodes = 1
intra_node_bandwidth = "50 Gbps"
inter_node_bandwidth = "10 Gbps"
"#,
    )
}

fn gpt(blocks: u64) -> Model {
    TransformerConfig::gpt("tiny-gpt", blocks, 1024, 16, 1024).build()
}

/// GPT-2 medium as AMP's §4.3 runs it: L = 24, H = 1024 (16 heads), sequence 1024.
fn gpt2_medium() -> Model {
    TransformerConfig::gpt("gpt2-medium", 24, 1024, 16, 1024).build()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-30)
}

fn find(record: &[amp::Scored], pp: u32, dp: u32, tp: u32, mbs: u64) -> (usize, &amp::Scored) {
    record
        .iter()
        .enumerate()
        .find(|(_, s)| s.candidate == Candidate { pp, dp, tp, mbs })
        .unwrap_or_else(|| panic!("pp={pp} dp={dp} tp={tp} mbs={mbs} not in AMP's space"))
}

// ------------------------------------------------------------------- the paper's findings

/// §4.5, heterogeneous cluster: Megatron picks dp = 16 because the model fits on one GPU
/// (measured 2.72 s/iteration); the best strategy is dp = 2, pp = 8, mbs = 1 (1.28 s). AMP's
/// cost model "penalizes this strategy heavily" (it ranks it 21st), since some GPUs reach the
/// others over 10 Gbps, and the measured best is its 2nd-ranked strategy (Fig. 2).
#[test]
fn amp_ranks_megatrons_dp16_far_below_dp2_pp8_on_its_heterogeneous_cluster() {
    let (m, c) = (gpt2_medium(), catalog_cluster("amp-hetero").unwrap());
    let p = problem(&m, &c, 32);
    let record = amp::rank_all(&p, &mut Search::unbounded());
    let (best_rank, best) = find(&record, 8, 2, 1, 1);
    // Megatron explores every micro-batch size as AMP does: take its best dp = 16 plan.
    let (mega_rank, mega) = [1, 2]
        .into_iter()
        .map(|mbs| find(&record, 1, 16, 1, mbs))
        .min_by(|a, b| a.1.cost.total_s.total_cmp(&b.1.cost.total_s))
        .unwrap();
    assert!(
        mega.cost.total_s > 1.5 * best.cost.total_s,
        "dp=16 {:?} vs dp=2 pp=8 {:?}",
        mega.cost,
        best.cost
    );
    // The penalty is the 16-way all-reduce over the 10 Gbps links (Eq. 3's slowest link).
    assert!(
        mega.cost.dp_sync_s > mega.cost.pipeline_s,
        "{:?}",
        mega.cost
    );
    assert!(mega_rank >= amp::TOP_K, "dp=16 ranked #{}", mega_rank + 1);
    assert!(best_rank < 3, "dp=2 pp=8 mbs=1 ranked #{}", best_rank + 1);

    // AMP's cost of Megatron's plan built by hand (not by AMP) is the same number.
    let devices = c.gpus();
    let megatron = common::make_plan(
        &p,
        vec![common::StageChoice {
            layers: hetplan::plan::LayerRange {
                start: 0,
                end: m.layers.len(),
            },
            devices,
            tp: 1,
            micro_batch_sizes: vec![mega.candidate.mbs; 16],
            zero: 0,
            recompute: Default::default(),
            offload: Default::default(),
        }],
        32 / (16 * mega.candidate.mbs),
    );
    let by_hand = amp::amp_cost(&p, &megatron).unwrap();
    assert!(close(by_hand.total_s, mega.cost.total_s));
}

/// §4.5, heterogeneous model (TransGAN: 12 blocks of width 1024, then 12 of width 16) on four
/// p3.8xlarge, global batch 64: a top strategy is mp = 1, pp = 4, dp = 4 (Fig. 3), and its DP
/// layer assignment beats the uniform one ("ours w/ uniform", Table 5).
#[test]
fn amp_balances_the_heterogeneous_model_unevenly() {
    let m = catalog_model("amp-hetero").unwrap();
    let c = cluster(
        r#"
name = "p3-x4"
[[node_group]]
gpu = "v100-sxm2-16gb"
gpus_per_node = 4
nodes = 4
inter_node_bandwidth = "10 Gbps"
"#,
    );
    let p = problem(&m, &c, 64);
    let record = amp::rank_all(&p, &mut Search::unbounded());
    let (rank, s) = find(&record, 4, 4, 1, 1);
    assert!(rank < 3, "pp=4 dp=4 mbs=1 ranked #{}", rank + 1);
    let lengths: Vec<usize> = s.plan.stages.iter().map(|st| st.layers.len()).collect();
    // The narrow blocks are cheap: the last stage takes many more layers than the others.
    assert!(
        lengths[3] > 2 * lengths[0],
        "AMP's assignment {lengths:?} should give the narrow blocks to one stage"
    );
    let uniform = amp::amp_plan(&p, s.candidate, &[7, 7, 6, 6]);
    let u = amp::amp_cost(&p, &uniform).unwrap();
    assert!(
        u.total_s > 1.1 * s.cost.total_s,
        "uniform {u:?} vs AMP {:?}",
        s.cost
    );
}

// ------------------------------------------------------------------- the DP

/// Deterministic pseudo-random numbers (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The paper's DP (§3.5, Eq. 6–8), as written: dp[i][j][m] the least
/// (gas−1)·max{0, max tᵢ − m} + Σ e over the assignments of layers 0..i to j+1 stages, m
/// ranging over every possible stage time. O(k·L⁴). Returns Eq. 5's optimum.
#[allow(clippy::needless_range_loop)] // indices as in the paper
fn paper_dp(t: &[f64], comm: &dyn Fn(usize, usize) -> f64, k: usize, gas: u64) -> f64 {
    let l = t.len();
    let seg = |a: usize, b: usize| t[a..b].iter().sum::<f64>();
    let mut possible = vec![0.0];
    for a in 0..l {
        for b in a + 1..=l {
            possible.push(seg(a, b));
        }
    }
    possible.sort_by(f64::total_cmp);
    possible.dedup();
    let idx = |v: f64| possible.binary_search_by(|p| p.total_cmp(&v)).unwrap();
    let w = (gas - 1) as f64;
    let pm = possible.len();
    // table[i][j][m], i = layers covered (1..=L).
    let mut table = vec![vec![vec![f64::INFINITY; pm]; k]; l + 1];
    for i in 1..=l {
        for (m, &mv) in possible.iter().enumerate() {
            table[i][0][m] = w * (seg(0, i) - mv).max(0.0);
        }
    }
    for j in 1..k {
        for i in j + 1..=l {
            for (m, &mv) in possible.iter().enumerate() {
                let mut best = f64::INFINITY;
                for cut in j..i {
                    let t2 = seg(cut, i);
                    let prev = table[cut][j - 1][idx(t2.max(mv))];
                    let g = prev + w * (t2 - mv).max(0.0) + comm(j - 1, cut);
                    best = best.min(g);
                }
                table[i][j][m] = best;
            }
        }
    }
    table[l][k - 1][idx(0.0)] + seg(0, l)
}

/// Eq. 5 by enumerating every assignment.
fn brute_dp(t: &[f64], comm: &dyn Fn(usize, usize) -> f64, k: usize, gas: u64) -> f64 {
    common::compositions(t.len(), k)
        .into_iter()
        .map(|lengths| {
            let mut start = 0;
            let (mut slowest, mut p2p) = (0.0f64, 0.0);
            for (j, len) in lengths.iter().enumerate() {
                slowest = slowest.max(t[start..start + len].iter().sum());
                if j + 1 < lengths.len() {
                    p2p += comm(j, start + len);
                }
                start += len;
            }
            (gas - 1) as f64 * slowest + p2p + t.iter().sum::<f64>()
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn the_dp_finds_the_papers_optimum() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut cases = 0;
    for trial in 0..150 {
        let l = 1 + rng.below(9) as usize;
        let k = 1 + rng.below(l as u64) as usize;
        let gas = [1, 2, 3, 8, 32][rng.below(5) as usize];
        // Integer times make ties (uniform models); some layers take no time at all.
        let t: Vec<f64> = (0..l)
            .map(|_| match trial % 3 {
                0 => rng.below(4) as f64,
                1 => rng.unit() * 10.0,
                _ => [1.0, 1.0, 1.0, 0.0, 5.0][rng.below(5) as usize],
            })
            .collect();
        let table: Vec<f64> = (0..k * (l + 1)).map(|_| rng.unit() * 3.0).collect();
        let comm = |j: usize, c: usize| table[j * (l + 1) + c];
        let no_sync = |_: usize, _: usize, _: usize| 0.0;
        let a = amp::assign_layers(
            &Pipeline {
                layer_times: &t,
                stages: k,
                micro_batches: gas,
                comm: &comm,
                sync: &no_sync,
            },
            &mut Search::unbounded(),
        )
        .unwrap();
        let paper = paper_dp(&t, &comm, k, gas);
        let brute = brute_dp(&t, &comm, k, gas);
        assert!(close(paper, brute), "the reference DP: {paper} vs {brute}");
        assert!(
            close(a.objective, paper),
            "L={l} k={k} gas={gas} t={t:?}: {} vs the paper's {paper}",
            a.objective
        );
        assert_eq!(a.lengths.len(), k);
        assert_eq!(a.lengths.iter().sum::<usize>(), l);
        assert!(a.lengths.iter().all(|&n| n >= 1));
        cases += 1;
    }
    assert_eq!(cases, 150);
}

#[test]
fn the_dp_breaks_ties_by_sync_time() {
    // Four equal layers in two stages, no communication: 2+2 balances Eq. 5. With gas = 1 every
    // split ties on Eq. 5, and the sync of stage 0 grows with its layers: 1+3 wins.
    let t = [1.0; 4];
    let comm = |_: usize, _: usize| 0.0;
    let sync = |j: usize, a: usize, b: usize| if j == 0 { (b - a) as f64 } else { 0.0 };
    let run = |gas| {
        amp::assign_layers(
            &Pipeline {
                layer_times: &t,
                stages: 2,
                micro_batches: gas,
                comm: &comm,
                sync: &sync,
            },
            &mut Search::unbounded(),
        )
        .unwrap()
    };
    assert_eq!(run(4).lengths, vec![2, 2]);
    let one = run(1);
    assert_eq!(one.lengths, vec![1, 3]);
    assert_eq!(one.sync, 1.0);
}

// ------------------------------------------------------------------- brute force, oracle

/// Every strategy of AMP's space with every layer assignment, under AMP's cost.
fn brute_force(p: &Problem<'_>) -> Vec<(Candidate, Vec<usize>, AmpCost)> {
    let mut out = Vec::new();
    for c in amp::candidates(p) {
        for lengths in common::compositions(p.model.layers.len(), c.pp as usize) {
            let plan = amp::amp_plan(p, c, &lengths);
            let cost = amp::amp_cost(p, &plan).unwrap();
            out.push((c, lengths, cost));
        }
    }
    out
}

/// AMP's answer is the minimum of its space under its own cost (Algorithm 1: every strategy,
/// each with the layer assignment minimising Eq. 5, ties to the least sync, ranked by Eq. 4).
#[test]
fn amp_is_the_minimum_of_its_space_under_its_own_cost() {
    for (m, c, gbs) in [
        (gpt(4), hetero4(), 8),
        (gpt(2), homo8(), 8),
        (gpt(4), hetero8(), 8),
    ] {
        let p = problem(&m, &c, gbs);
        let record = amp::rank_all(&p, &mut Search::unbounded());
        let all = brute_force(&p);
        assert_eq!(record.len(), amp::candidates(&p).len(), "{}", c.name);
        let mut algorithm1 = f64::INFINITY;
        for s in &record {
            let mine: Vec<&AmpCost> = all
                .iter()
                .filter(|(cand, _, _)| *cand == s.candidate)
                .map(|(_, _, cost)| cost)
                .collect();
            // The DP's assignment minimises Eq. 5 ...
            let eq5 = mine
                .iter()
                .map(|c| c.pipeline_s)
                .fold(f64::INFINITY, f64::min);
            assert!(
                close(s.cost.pipeline_s, eq5),
                "{} {}: Eq. 5 {} vs brute force {eq5}",
                c.name,
                s.candidate,
                s.cost.pipeline_s
            );
            // ... and among Eq. 5's optima, Eq. 4.
            let eq4 = mine
                .iter()
                .filter(|c| c.pipeline_s <= eq5 * (1.0 + 1e-9))
                .map(|c| c.total_s)
                .fold(f64::INFINITY, f64::min);
            assert!(close(s.cost.total_s, eq4), "{} {}", c.name, s.candidate);
            algorithm1 = algorithm1.min(eq4);
        }
        let top = Amp.plan(&p, &mut Search::unbounded()).unwrap();
        assert!(
            close(top.ranked[0].planner_cost_s, algorithm1),
            "{}",
            c.name
        );
        // Over the whole space (every assignment, Eq. 4) nothing is cheaper either, here.
        let whole = all
            .iter()
            .map(|(_, _, c)| c.total_s)
            .fold(f64::INFINITY, f64::min);
        assert!(
            close(whole, algorithm1),
            "{}: {whole} < {algorithm1}",
            c.name
        );
    }
}

/// AMP's space is part of the oracle's, so under hetplan's estimate no plan AMP ranks beats the
/// oracle.
#[test]
fn amp_never_beats_the_oracle_under_hetplans_estimate() {
    for (m, c, gbs) in [(gpt(4), hetero4(), 8), (gpt(2), homo8(), 8)] {
        let p = problem(&m, &c, gbs);
        let oracle = Oracle.plan(&p, &mut Search::unbounded()).unwrap();
        let o = Amp.plan(&p, &mut Search::unbounded()).unwrap();
        for r in o.ranked.iter().filter(|r| r.fits) {
            assert!(
                r.estimate_s >= oracle.estimate.iteration_time_s * (1.0 - 1e-9),
                "{}: AMP's {} beat the oracle: {} < {}",
                c.name,
                r.plan.summary(),
                r.estimate_s,
                oracle.estimate.iteration_time_s
            );
        }
    }
}

// ------------------------------------------------------------------- the planner

#[test]
fn the_ranked_list_is_amps_top_k_by_its_cost() {
    let (m, c) = (gpt2_medium(), catalog_cluster("amp-hetero").unwrap());
    let p = problem(&m, &c, 32);
    let o = Amp.plan(&p, &mut Search::unbounded()).unwrap();
    assert_eq!(o.stop_reason, StopReason::Exhausted);
    assert_eq!(o.ranked.len(), amp::TOP_K);
    assert_eq!(o.ranked[0].plan, o.plan);
    assert!(close(o.ranked[0].estimate_s, o.estimate.iteration_time_s));
    for w in o.ranked.windows(2) {
        assert!(w[0].planner_cost_s <= w[1].planner_cost_s);
    }
    let record = amp::rank_all(&p, &mut Search::unbounded());
    for (r, s) in o.ranked.iter().zip(&record) {
        assert_eq!(r.plan, s.plan);
        assert!(close(
            r.planner_cost_s,
            amp::amp_cost(&p, &r.plan).unwrap().total_s
        ));
        let est = common::evaluate(&p, &r.plan).unwrap();
        assert!(close(r.estimate_s, est.iteration_time_s));
        assert_eq!(r.fits, est.fits);
    }
}

#[test]
fn amp_is_deterministic() {
    let (m, c) = (gpt2_medium(), catalog_cluster("amp-hetero").unwrap());
    let p = problem(&m, &c, 32);
    let a = Amp.plan(&p, &mut Search::unbounded()).unwrap();
    let b = Amp.plan(&p, &mut Search::unbounded()).unwrap();
    assert_eq!(a.plan, b.plan);
    assert_eq!(a.notes, b.notes);
    assert_eq!(a.explored, b.explored);
    let costs = |o: &hetplan::planners::Outcome| -> Vec<(u64, u64)> {
        o.ranked
            .iter()
            .map(|r| (r.planner_cost_s.to_bits(), r.estimate_s.to_bits()))
            .collect()
    };
    assert_eq!(costs(&a), costs(&b));
}

#[test]
fn a_node_limit_stops_amp_with_its_reason() {
    let (m, c) = (gpt2_medium(), catalog_cluster("amp-hetero").unwrap());
    let p = problem(&m, &c, 32);
    let limited = |n| {
        let mut s = Search::new(
            Limits {
                max_nodes: Some(n),
                time: None,
            },
            &NoClock,
            &NoProgress,
        );
        Amp.plan(&p, &mut s)
    };
    assert_eq!(
        limited(0).unwrap_err(),
        PlannerError::Stopped(StopReason::NodeLimit)
    );
    let full = Amp.plan(&p, &mut Search::unbounded()).unwrap();
    let o = limited(60).unwrap();
    assert_eq!(o.stop_reason, StopReason::NodeLimit);
    assert!(o.explored <= 61, "{}", o.explored); // the refused tick counts
    assert!(!o.ranked.is_empty());
    // The best so far, no better than the whole search's.
    assert!(o.ranked[0].planner_cost_s >= full.ranked[0].planner_cost_s);
}

/// AMP has no memory model (§4.5, Limitations): on a fast network it prefers wide data
/// parallelism for a 1.3B model on 16 GB V100s, and its top plans run out of memory.
#[test]
fn top_plans_that_run_out_of_memory_are_noted() {
    let m = TransformerConfig::gpt("gpt-1.3b", 24, 2048, 16, 1024).build();
    let c = cluster(
        r#"
name = "v100-fast"
[[node_group]]
gpu = "v100-sxm2-16gb"
gpus_per_node = 4
nodes = 4
inter_node_bandwidth = "400 Gbps"
"#,
    );
    let p = problem(&m, &c, 32);
    let o = Amp.plan(&p, &mut Search::unbounded()).unwrap();
    let oom: Vec<usize> = (0..o.ranked.len()).filter(|&i| !o.ranked[i].fits).collect();
    assert!(!oom.is_empty());
    let note = o
        .notes
        .iter()
        .find(|n| n.contains("no memory model"))
        .expect("an OOM note");
    for i in &oom {
        assert!(note.contains(&format!("#{} ", i + 1)), "{note}");
    }
    for i in (0..o.ranked.len()).filter(|i| !oom.contains(i)) {
        assert!(!note.contains(&format!("#{} ", i + 1)), "{note}");
    }
    // AMP's own pick is its top plan even so, and its note names one that fits...
    let own = Amp.find(&p, &mut Search::unbounded()).unwrap();
    assert!(!own.estimate.fits);
    assert_eq!(own.plan, own.ranked[0].plan);
    let fits = o.ranked.iter().position(|r| r.fits).unwrap();
    assert!(
        o.notes.iter().any(|n| n.contains("top-ranked plan")
            && n.contains(&format!("the best-ranked plan that fits is #{} ", fits + 1))),
        "{:?}",
        o.notes
    );
    // ...but a plan that does not fit is never an answer (issue 9): the answer is that one.
    assert!(!o.ranked[0].fits);
    assert!(o.estimate.fits);
    assert_eq!(o.plan, o.ranked[fits].plan);
    assert!(
        o.notes
            .iter()
            .any(|n| n.contains("first choice does not fit (needs ")),
        "{:?}",
        o.notes
    );
}

#[test]
fn an_empty_space_is_infeasible_with_a_reason() {
    // 3 single-GPU nodes (tp = 1), a model of 2 layers (pp ≤ 2, so pp = 1 and dp = 3) and a
    // global batch of 2 (which dp = 3 does not divide): nothing is left.
    let c = cluster(
        r#"
name = "three"
[[node_group]]
gpu = "t4"
gpus_per_node = 1
nodes = 3
inter_node_bandwidth = "10 Gbps"
"#,
    );
    let mut m = gpt(1);
    m.layers.remove(1);
    let p = problem(&m, &c, 2);
    match Amp.plan(&p, &mut Search::unbounded()) {
        Err(PlannerError::Infeasible(msg)) => {
            assert!(msg.contains("AMP's space is empty"), "{msg}")
        }
        other => panic!("{:?}", other.map(|o| o.plan.summary())),
    }
}
