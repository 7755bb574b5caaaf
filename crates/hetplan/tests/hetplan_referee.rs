//! hetplan's planner against the referee (`planners::referee`), the exhaustive search of the
//! whole union of the seed planners' spaces, on *generated* tiny problems (2 to 4 GPUs of at
//! most two types, 3 to 6 layers) and on two fixed 4-GPU, 6-layer problems. On each:
//!
//! (a) the referee's optimum is never below the certified lower bound (`planners::bound`), and
//!     on two types the referee's optimum on each type's GPUs alone is never below that
//!     type's bound (`Bound::alone_s`);
//! (b) hetplan's answer fits and, when it lies in the referee's space, is not faster than the
//!     referee's optimum (and hetplan answers whenever the referee finds a plan);
//! (c) hetplan is never worse than any seed planner's answer;
//! (d) no seed answer in the referee's space beats the referee;
//! (e) hetplan's distance to the optimum is within the gap it certifies against the bound; the
//!     distribution of hetplan's time over the optimum is printed (`--nocapture`: MISS lines
//!     give both plans), and regression guards hold it to what was measured (`GUARD_*`).
//!
//! The referee runs with `Enumeration::Undominated` (the same optimum from far fewer
//! candidates); `both_enumerations_find_the_same_optimum` checks that against
//! `Enumeration::Every` on generated problems small enough for it. Generated problems are kept
//! to `MAX_STAGE_OPTIONS` (about a second of the referee each at the test profile's opt-level
//! 1); the fixed 4-GPU problems take 5 and 21 s. The file runs in about 30 s on two cores.
//!
//! `PROPTEST_CASES` sets the number of generated problems (default 40); `PROPTEST_RNG_SEED=N`
//! draws others. The guards are measured on the default draw and hold only there: other draws
//! find worse misses (on seed 1, 150 problems: 2.29× at worst, the optimum on 126), which is
//! what they are for.

use hetplan::cluster::spec::parse_cluster_toml;
use hetplan::cost::Analytic;
use hetplan::model::TransformerConfig;
use hetplan::plan::{Recompute, Schedule};
use hetplan::planners::referee::{self, Enumeration, RefereeAnswer, SpaceSize};
use hetplan::planners::{self, hetplan::Hetplan, PlanOptions, Planner, Problem, Search};
use hetplan::{Cluster, Model, Plan};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{TestCaseError, TestRunner};
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Instant;

/// GPU types of different speed and memory (16 to 40 GiB).
const GPUS: &[&str] = &["t4", "v100-sxm2-16gb", "l4", "a100-sxm4-40gb", "a10g"];
const NETWORKS: &[&str] = &["10 Gbps", "25 Gbps", "100 Gbps"];

/// Generated problems have at most this many stage options over the skeletons of the referee's
/// space (`SpaceSize::stage_options`, what `Enumeration::Undominated` estimates about
/// `2^(stages with DP)` times): about a second each.
const MAX_STAGE_OPTIONS: u64 = 250_000;

/// Relative tolerance of time comparisons (the estimate's sums round differently).
const TOL: f64 = 1e-9;

/// Regression guards, not goals: hetplan's iteration time over the referee's optimum at most,
/// and the share of generated problems on which hetplan finds the optimum at least. Measured
/// when this test was written: 1.4997× at worst and the optimum on 35 of 40 generated problems
/// (default draw), 1.36× and 1.445× on the fixed ones. hetplan misses the optimum by up to half
/// on a few problems (`report`'s MISS lines): tighten these as its search improves. The worst
/// went to 1.5217× when the estimate began to charge the ZeRO-1/2 parameter gather before the
/// first forward (the missed optimum, one TP group across two nodes with offloading, did not
/// move; hetplan's best, a pipeline with a ZeRO-1 stage, got slower): hence 1.55.
const GUARD_RATIO: f64 = 1.55;
const GUARD_OPTIMAL_SHARE: f64 = 0.85;

#[derive(Clone, Debug)]
struct Group {
    gpu: &'static str,
    gpus_per_node: u32,
    nodes: u32,
}

#[derive(Clone, Debug)]
struct Spec {
    groups: Vec<Group>,
    network: &'static str,
    blocks: u64,
    hidden: u64,
    heads: u64,
    seq_len: u64,
    global_batch: u64,
}

impl Spec {
    fn gpus(&self) -> u32 {
        self.groups.iter().map(|g| g.gpus_per_node * g.nodes).sum()
    }

    fn types(&self) -> BTreeSet<&'static str> {
        self.groups.iter().map(|g| g.gpu).collect()
    }

    fn layers(&self) -> u64 {
        // The embedding, the blocks and the head.
        self.blocks + 2
    }

    fn cluster(&self) -> Cluster {
        let mut s = String::from("name = \"generated\"\n");
        for g in &self.groups {
            s.push_str(&format!(
                "[[node_group]]\ngpu = \"{}\"\ngpus_per_node = {}\nnodes = {}\n\
                 inter_node_bandwidth = \"{}\"\n",
                g.gpu, g.gpus_per_node, g.nodes, self.network
            ));
        }
        parse_cluster_toml(&s).expect("generated clusters are valid")
    }

    fn model(&self) -> Model {
        TransformerConfig::gpt("generated-gpt", self.blocks, self.hidden, self.heads, 2048).build()
    }

    fn describe(&self) -> String {
        let groups: Vec<String> = (self.groups.iter())
            .map(|g| format!("{}x{}x{}", g.nodes, g.gpus_per_node, g.gpu))
            .collect();
        format!(
            "{} at {}, GPT {} blocks hidden {} heads {}, seq {}, global batch {}",
            groups.join(" + "),
            self.network,
            self.blocks,
            self.hidden,
            self.heads,
            self.seq_len,
            self.global_batch
        )
    }
}

/// A problem of a spec's model and cluster (default options: any runtime, TP ≤ 8, micro-batches
/// ≤ 64).
fn problem<'a>(spec: &Spec, model: &'a Model, cluster: &'a Cluster) -> Problem<'a> {
    Problem {
        model,
        cluster,
        global_batch: spec.global_batch,
        seq_len: spec.seq_len,
        compute: &Analytic,
        options: PlanOptions::default(),
    }
}

fn space_size(spec: &Spec) -> SpaceSize {
    let (model, cluster) = (spec.model(), spec.cluster());
    referee::space_size(&problem(spec, &model, &cluster))
}

fn group() -> impl Strategy<Value = Group> {
    (
        prop::sample::select(GPUS),
        prop::sample::select(&[1u32, 2, 4][..]),
        1u32..=2,
    )
        .prop_map(|(gpu, gpus_per_node, nodes)| Group {
            gpu,
            gpus_per_node,
            nodes,
        })
}

/// Tiny problems: one or two node groups (at most two GPU types), 2 to 4 GPUs, a GPT of 1 to 4
/// blocks (3 to 6 layers) whose states alone take 0.3 to 58 GiB, sequences of 1,024 or 2,048
/// tokens, 2 to 8 samples; at most `MAX_CANDIDATES` candidates.
fn spec() -> impl Strategy<Value = Spec> {
    (
        // Two node groups (mostly of two GPU types) more often than one.
        prop_oneof![
            1 => prop::collection::vec(group(), 1),
            3 => prop::collection::vec(group(), 2),
        ],
        prop::sample::select(NETWORKS),
        1u64..=4,
        // Wide models more often: memory binds on them.
        prop_oneof![
            1 => Just((1024u64, 16u64)),
            1 => Just((2048, 16)),
            2 => Just((4096, 32)),
            3 => Just((8192, 64)),
        ],
        prop::sample::select(&[1024u64, 2048][..]),
        // Small batches more often: larger ones multiply the sample splits.
        prop_oneof![
            3 => Just(2u64),
            2 => Just(4),
            1 => Just(6),
            1 => Just(8),
        ],
    )
        .prop_map(
            |(groups, network, blocks, (hidden, heads), seq_len, global_batch)| Spec {
                groups,
                network,
                blocks,
                hidden,
                heads,
                seq_len,
                global_batch,
            },
        )
        .prop_filter("2 to 4 GPUs", |s| (2..=4).contains(&s.gpus()))
        .prop_filter("a space the referee exhausts in about a second", |s| {
            space_size(s).stage_options <= MAX_STAGE_OPTIONS
        })
}

fn cases() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(40),
        failure_persistence: None,
        // The same problems on every run, so that CI's time and verdict do not depend on the
        // draw; `PROPTEST_RNG_SEED=N` (with `PROPTEST_CASES`) explores others.
        rng_seed: match std::env::var("PROPTEST_RNG_SEED") {
            Ok(_) => ProptestConfig::default().rng_seed,
            Err(_) => proptest::test_runner::RngSeed::Fixed(10),
        },
        ..ProptestConfig::default()
    }
}

/// What one problem showed.
#[derive(Clone, Debug)]
struct Case {
    problem: String,
    gpus: u32,
    space: SpaceSize,
    candidates: u64,
    seconds: f64,
    /// The referee's optimum (plan summary, time); `None` when nothing fits.
    referee: Option<(String, f64)>,
    /// Only plans with memory options fit.
    memory_binds: bool,
    /// The referee's optimum uses memory options.
    optimum_uses_memory_options: bool,
    /// hetplan's answer (summary, time, in the referee's space).
    hetplan: Option<(String, f64, bool)>,
    /// The certified gap hetplan reports against the bound.
    certified_gap: f64,
    /// Seed answers in the referee's space.
    seeds_in_space: usize,
}

impl Case {
    /// hetplan's time over the referee's optimum.
    fn ratio(&self) -> Option<f64> {
        match (&self.referee, &self.hetplan) {
            (Some((_, r)), Some((_, h, _))) => Some(h / r),
            _ => None,
        }
    }
}

/// `plan.summary()`, the schedule and each stage's memory options.
fn describe(plan: &Plan) -> String {
    let stages: Vec<String> = (plan.stages.iter())
        .map(|s| {
            let mut o = format!(
                "zero {} ckpt {} mbs {:?}",
                s.zero,
                serde_json::to_string(&s.recompute).unwrap_or_default(),
                s.micro_batch_sizes
            );
            if s.sequence_parallel {
                o.push_str(" sp");
            }
            if !s.offload.is_none() {
                o.push_str(&format!(" offload {:?}", s.offload));
            }
            o
        })
        .collect();
    format!(
        "{} {:?} [{}]",
        plan.summary(),
        plan.schedule,
        stages.join("; ")
    )
}

fn uses_memory_options(plan: &Plan) -> bool {
    plan.stages.iter().any(|s| {
        s.zero > 0 || s.recompute != Recompute::None || !s.offload.is_none() || s.sequence_parallel
    })
}

/// Properties (a) to (e) on one problem; the referee's answer and what the case showed.
fn check(spec: &Spec) -> Result<(Case, RefereeAnswer), TestCaseError> {
    let (model, cluster) = (spec.model(), spec.cluster());
    let p = problem(spec, &model, &cluster);
    let started = Instant::now();
    let r = referee::optimum_with(&p, &mut Search::unbounded(), Enumeration::Undominated).map_err(
        |e| TestCaseError::fail(format!("the referee refused {}: {e}", spec.describe())),
    )?;
    let seconds = started.elapsed().as_secs_f64();
    let what = spec.describe();
    prop_assert_eq!(r.stop_reason, planners::StopReason::Exhausted);
    prop_assert_eq!(r.invalid, 0, "the referee built invalid plans on {}", what);
    prop_assert_eq!(
        r.independence_violations,
        0,
        "a stage's memory options moved another stage's numbers on {}",
        what
    );
    let bound = planners::bound::lower_bound(&p);
    let best = r.best.as_ref().map(|(plan, e)| (plan, e.iteration_time_s));
    if let Some((plan, t)) = best {
        prop_assert!(referee::contains(&p, plan), "{what}: {}", plan.summary());
        // (a) The bound is valid.
        prop_assert!(
            t >= bound.iteration_time_s * (1.0 - TOL),
            "the referee's optimum {t} ({}) is below the lower bound {bound:?} on {what}",
            plan.summary()
        );
    }

    // (a') On a cluster of several types, no plan on one type's GPUs alone beats that type's
    // bound (`Bound::alone_s`, which lets hetplan set such starts aside unevaluated).
    if spec.types().len() > 1 {
        for gpu in spec.types() {
            let alone = Spec {
                groups: (spec.groups.iter())
                    .filter(|g| g.gpu == gpu)
                    .cloned()
                    .collect(),
                ..spec.clone()
            };
            let (m, c) = (alone.model(), alone.cluster());
            let q = problem(&alone, &m, &c);
            let at = (cluster.gpu_types.iter())
                .position(|t| t.name == gpu)
                .expect("the generated GPU names are the catalog's");
            let floor = bound.alone_s[at].expect("a type with GPUs has a bound");
            // The same sum as the whole bound of that type alone (less the LP's slack).
            let own = planners::bound::lower_bound(&q).uniform_s * (1.0 - 1e-4);
            prop_assert!(
                (floor - own).abs() <= 1e-9 * own,
                "{gpu} alone: bound {floor} within the cluster, {own} on its own, on {what}"
            );
            let sub = referee::optimum_with(&q, &mut Search::unbounded(), Enumeration::Undominated)
                .map_err(|e| {
                    TestCaseError::fail(format!("the referee refused {gpu} alone: {e}"))
                })?;
            if let Some((plan, e)) = &sub.best {
                prop_assert!(
                    e.iteration_time_s >= floor * (1.0 - TOL),
                    "on {gpu} alone the referee's optimum {} ({}) is below that type's bound \
                     {floor} on {what}",
                    e.iteration_time_s,
                    plan.summary()
                );
            }
        }
    }

    // (b) hetplan's answer fits, and in the referee's space does not beat it.
    let h = Hetplan.plan(&p, &mut Search::unbounded());
    let hetplan = match (&h, best) {
        (Ok(o), _) => {
            prop_assert!(o.estimate.fits, "hetplan's answer does not fit on {what}");
            let inside = referee::contains(&p, &o.plan);
            let ht = o.estimate.iteration_time_s;
            if inside {
                let Some((plan, t)) = best else {
                    return Err(TestCaseError::fail(format!(
                        "hetplan found {} in the referee's space, where the referee found nothing, \
                         on {what}",
                        o.plan.summary()
                    )));
                };
                prop_assert!(
                    ht >= t * (1.0 - TOL),
                    "hetplan {ht} ({}) beat the referee {t} ({}) in its space on {what}",
                    o.plan.summary(),
                    plan.summary()
                );
            }
            Some((describe(&o.plan), ht, inside))
        }
        (Err(e), Some((plan, t))) => {
            return Err(TestCaseError::fail(format!(
                "hetplan found no plan ({e}) where the referee found {} ({t}) on {what}",
                plan.summary()
            )));
        }
        (Err(_), None) => None,
    };
    // (e) hetplan's distance to the optimum is within the gap it certifies: (h − opt) / h ≤
    // (h − bound) / h.
    let certified_gap = hetplan
        .as_ref()
        .map_or(0.0, |(_, ht, _)| bound.gap(hetplan::Seconds(*ht)));
    if let (Some((_, ht, _)), Some((_, t))) = (&hetplan, best) {
        prop_assert!(
            (ht - t) / ht <= certified_gap + TOL,
            "hetplan {ht} is further from the optimum {t} than its certified gap {certified_gap} \
             on {what}"
        );
    }

    // (c) and (d): the seeds.
    let mut seeds_in_space = 0;
    for planner in planners::all() {
        if matches!(planner.name(), "hetplan" | "oracle") {
            continue;
        }
        let Ok(o) = planner.plan(&p, &mut Search::unbounded()) else {
            continue;
        };
        let st = o.estimate.iteration_time_s;
        let Some((_, ht, _)) = &hetplan else {
            return Err(TestCaseError::fail(format!(
                "{} answered {} and hetplan did not on {what}",
                planner.name(),
                o.plan.summary()
            )));
        };
        // The simulator breaks ties of the estimate among hetplan's best candidates, a seed's
        // answer among them: hetplan's estimate may be that much above it.
        prop_assert!(
            *ht <= st * (1.0 + hetplan::planners::hetplan::SIMULATOR_BREAKS_TIES_WITHIN),
            "hetplan {ht} is worse than {} {st} ({}) on {what}",
            planner.name(),
            o.plan.summary()
        );
        if referee::contains(&p, &o.plan) {
            seeds_in_space += 1;
            let Some((plan, t)) = best else {
                return Err(TestCaseError::fail(format!(
                    "{} found {} in the referee's space, where the referee found nothing, on \
                     {what}",
                    planner.name(),
                    o.plan.summary()
                )));
            };
            prop_assert!(
                st >= t * (1.0 - TOL),
                "{} {st} ({}) beat the referee {t} ({}) on {what}",
                planner.name(),
                o.plan.summary(),
                plan.summary()
            );
        }
    }
    let case = Case {
        problem: what,
        gpus: spec.gpus(),
        space: space_size(spec),
        candidates: r.candidates,
        seconds,
        referee: best.map(|(plan, t)| (describe(plan), t)),
        memory_binds: best.is_some() && r.fitting_plain == 0,
        optimum_uses_memory_options: best.is_some_and(|(plan, _)| uses_memory_options(plan)),
        hetplan,
        certified_gap,
        seeds_in_space,
    };
    Ok((case, r))
}

/// The distribution of hetplan's time over the referee's optimum, printed; (problems on which
/// hetplan finds the optimum, problems both solved, the worst ratio).
fn report(name: &str, cases: &[Case]) -> (usize, usize, f64) {
    let ratios: Vec<f64> = cases.iter().filter_map(Case::ratio).collect();
    let optimal = ratios.iter().filter(|&&x| x <= 1.0 + TOL).count();
    let worst = ratios.iter().copied().fold(1.0, f64::max);
    let outside = (cases.iter())
        .filter(|c| c.hetplan.as_ref().is_some_and(|h| !h.2))
        .count();
    eprintln!(
        "{name}: {} problems, the referee solved {}; hetplan equals its optimum on {optimal} of \
         {}, worst ratio {worst:.4}; hetplan's answer outside the referee's space on {outside}",
        cases.len(),
        cases.iter().filter(|c| c.referee.is_some()).count(),
        ratios.len()
    );
    for c in cases {
        let ratio = c.ratio();
        let missed = ratio.is_some_and(|x| x > 1.0 + TOL);
        eprintln!(
            "  {}{} GPUs, {} candidates ({} stage options, {} in all) in {:.2} s, ratio {}, \
             certified gap {:.1}%{}{} — {}",
            if missed { "MISS " } else { "" },
            c.gpus,
            c.candidates,
            c.space.stage_options,
            c.space.candidates,
            c.seconds,
            ratio.map_or("-".to_string(), |x| format!("{x:.4}")),
            c.certified_gap * 100.0,
            if c.memory_binds {
                ", only memory options fit"
            } else {
                ""
            },
            if c.optimum_uses_memory_options {
                ", optimum uses memory options"
            } else {
                ""
            },
            c.problem
        );
        if missed || ratio.is_some_and(|x| x < 1.0 - TOL) {
            let (r, h) = (c.referee.as_ref().unwrap(), c.hetplan.as_ref().unwrap());
            eprintln!("      referee {} {}", r.1, r.0);
            eprintln!("      hetplan {} {}", h.1, h.0);
        }
    }
    (optimal, ratios.len(), worst)
}

/// The regression guards on what `report` measured.
fn guard(name: &str, (optimal, judged, worst): (usize, usize, f64)) {
    assert!(
        worst <= GUARD_RATIO,
        "{name}: hetplan is {worst:.4}× the referee's optimum on a problem (guard {GUARD_RATIO})"
    );
    assert!(
        optimal as f64 >= GUARD_OPTIMAL_SHARE * judged as f64,
        "{name}: hetplan finds the optimum on only {optimal} of {judged} problems (guard \
         {GUARD_OPTIMAL_SHARE})"
    );
}

/// (a)–(e) on generated tiny problems.
#[test]
fn hetplan_against_the_referee_on_generated_problems() {
    let config = cases();
    let n = config.cases as usize;
    let mut runner = TestRunner::new(config);
    let seen: Mutex<Vec<Case>> = Mutex::new(Vec::new());
    let result = runner.run(&spec(), |spec| {
        let (case, _) = check(&spec)?;
        seen.lock().unwrap().push(case);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let cases = seen.into_inner().unwrap();
    let measured = report("generated problems", &cases);
    let default_draw =
        std::env::var("PROPTEST_CASES").is_err() && std::env::var("PROPTEST_RNG_SEED").is_err();
    if default_draw {
        guard("generated problems", measured);
    }
    let solved = cases.iter().filter(|c| c.referee.is_some()).count();
    assert!(
        solved * 4 >= n * 3,
        "the referee solved only {solved} of {n}"
    );
    // The generated problems are varied where it matters: memory binds on some (only plans with
    // ZeRO, checkpointing or offloading fit), the optimum needs memory options on more, some
    // have 4 GPUs, seed plans are compared with the referee.
    let binds = cases.iter().filter(|c| c.memory_binds).count();
    let uses = (cases.iter())
        .filter(|c| c.optimum_uses_memory_options)
        .count();
    assert!(binds >= 2, "memory binds on only {binds} of {n}");
    assert!(
        uses >= 4,
        "the optimum uses memory options on only {uses} of {n}"
    );
    assert!(cases.iter().filter(|c| c.gpus == 4).count() >= 2);
    let compared: usize = cases.iter().map(|c| c.seeds_in_space).sum();
    assert!(
        compared >= 2 * solved,
        "{compared} seed plans compared on {solved}"
    );
}

/// The two enumerations find the same optimum (and the same plans without memory options), on
/// generated problems small enough for `Enumeration::Every`; every candidate is valid and in the
/// referee's space.
#[test]
fn both_enumerations_find_the_same_optimum() {
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 10,
        ..cases()
    });
    let small = spec().prop_filter("small enough to estimate every candidate", |s| {
        space_size(s).candidates <= 200_000
    });
    let result = runner.run(&small, |spec| {
        let (model, cluster) = (spec.model(), spec.cluster());
        let p = problem(&spec, &model, &cluster);
        let every = referee::optimum(&p, &mut Search::unbounded()).unwrap();
        let undominated =
            referee::optimum_with(&p, &mut Search::unbounded(), Enumeration::Undominated).unwrap();
        let what = spec.describe();
        prop_assert_eq!(
            every.candidates,
            referee::space_size(&p).candidates,
            "{}",
            what
        );
        prop_assert_eq!(every.invalid + undominated.invalid, 0, "{}", what);
        prop_assert_eq!(undominated.independence_violations, 0, "{}", what);
        prop_assert_eq!(every.fitting_plain, undominated.fitting_plain, "{}", what);
        prop_assert!(undominated.candidates < every.candidates, "{what}");
        let t = |a: &RefereeAnswer| a.best.as_ref().map(|(_, e)| e.iteration_time_s);
        match (t(&every), t(&undominated)) {
            (None, None) => {}
            (Some(a), Some(b)) => prop_assert!(
                (a - b).abs() <= a * TOL,
                "every candidate: {a} ({}); undominated: {b} ({}) on {what}",
                every.best.as_ref().unwrap().0.summary(),
                undominated.best.as_ref().unwrap().0.summary()
            ),
            (a, b) => {
                return Err(TestCaseError::fail(format!(
                    "every candidate: {a:?}; undominated: {b:?} on {what}"
                )))
            }
        }
        if let Some((plan, _)) = &every.best {
            prop_assert!(referee::contains(&p, plan));
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// (a)–(e) on the largest tiny problems: 4 GPUs of two types, 6 layers, a GPT whose states
/// take 58 GiB: on two nodes of two 16 GiB GPUs only plans with memory options fit.
#[test]
fn hetplan_against_the_referee_on_four_gpus_and_six_layers() {
    let spec = |groups: Vec<Group>| Spec {
        groups,
        network: "25 Gbps",
        blocks: 4,
        hidden: 8192,
        heads: 64,
        seq_len: 1024,
        global_batch: 2,
    };
    let g = |gpu, gpus_per_node, nodes| Group {
        gpu,
        gpus_per_node,
        nodes,
    };
    let specs = [
        (spec(vec![g("t4", 2, 1), g("v100-sxm2-16gb", 2, 1)]), true),
        (spec(vec![g("t4", 1, 2), g("a100-sxm4-40gb", 1, 2)]), false),
    ];
    let mut cases = Vec::new();
    for (s, binds) in &specs {
        let (case, r) = check(s).unwrap_or_else(|e| panic!("{e}"));
        assert!(case.referee.is_some(), "{}", case.problem);
        assert_eq!(case.memory_binds, *binds, "{}", case.problem);
        eprintln!(
            "{}: {:?}; {} estimated ({} fit, {} without memory options) in {:.1} s",
            case.problem,
            space_size(s),
            r.candidates,
            r.fitting,
            r.fitting_plain,
            case.seconds
        );
        cases.push(case);
    }
    let (optimal, judged, worst) = report("4 GPUs, 6 layers", &cases);
    assert!(
        worst <= GUARD_RATIO,
        "hetplan is {worst:.4}× the referee's optimum (guard {GUARD_RATIO}); {optimal} of {judged} optimal"
    );
}

/// `contains` merges only what the estimate cannot tell apart, and leaves out what the referee
/// does not enumerate.
#[test]
fn contains_merges_equivalent_forms_and_leaves_out_the_rest() {
    let spec = Spec {
        groups: vec![
            Group {
                gpu: "t4",
                gpus_per_node: 2,
                nodes: 1,
            },
            Group {
                gpu: "v100-sxm2-16gb",
                gpus_per_node: 2,
                nodes: 1,
            },
        ],
        network: "25 Gbps",
        blocks: 2,
        hidden: 2048,
        heads: 16,
        seq_len: 1024,
        global_batch: 4,
    };
    let (model, cluster) = (spec.model(), spec.cluster());
    let p = problem(&spec, &model, &cluster);
    let est = |plan: &Plan| planners::common::evaluate(&p, plan).expect("valid");
    let same = |a: &Plan, b: &Plan| {
        let (x, y) = (est(a), est(b));
        assert_eq!(x.iteration_time_s, y.iteration_time_s);
        assert_eq!(x.fits, y.fits);
        assert_eq!(x.peak_memory_bytes, y.peak_memory_bytes);
    };
    let inline = |s: &str| hetplan::plan::inline::parse_inline_plan(s, &model, &cluster).unwrap();
    // Two stages: two T4 replicas, then one V100 pair at TP 2.
    let mut base = inline("gbs=4,mbs=1,pp=2,tp=1,dp=2");
    base.stages[1].devices = vec![
        hetplan::GpuId { node: 1, local: 0 },
        hetplan::GpuId { node: 1, local: 1 },
    ];
    base.stages[1].tp = 2;
    base.stages[1].dp = 1;
    base.stages[1].micro_batch_sizes = vec![2];
    base.micro_batches = 2;
    base.stages[0].micro_batch_sizes = vec![1, 1];
    assert!(referee::contains(&p, &base), "{}", base.summary());

    // GPUs of one node in another order.
    let mut q = base.clone();
    q.stages[0].devices.reverse();
    q.stages[1].devices.reverse();
    assert!(referee::contains(&p, &q));
    same(&base, &q);
    // Layers(0) is no checkpointing, Layers(len) full.
    let mut a = base.clone();
    let mut b = base.clone();
    a.stages[0].recompute = Recompute::Full;
    b.stages[0].recompute = Recompute::Layers(a.stages[0].layers.len() as u32);
    assert!(referee::contains(&p, &b));
    same(&a, &b);
    let mut b = base.clone();
    b.stages[1].recompute = Recompute::Layers(0);
    assert!(referee::contains(&p, &b));
    same(&base, &b);
    // ZeRO 1 and 2 without data parallelism are ZeRO 0; ZeRO 3 is not (it holds gathered
    // layers) and is outside.
    for zero in [1, 2] {
        let mut b = base.clone();
        b.stages[1].zero = zero;
        assert!(referee::contains(&p, &b));
        same(&base, &b);
    }
    let mut b = base.clone();
    b.stages[1].zero = 3;
    assert!(!referee::contains(&p, &b));
    // Weights, gradients and optimizer states all in host memory are inside.
    let mut b = base.clone();
    b.stages[1].offload = hetplan::plan::Offload {
        weights: 1.0,
        gradients: 1.0,
        optimizer: 1.0,
        activations: 0.0,
    };
    assert!(referee::contains(&p, &b));
    // One TP degree listed for every replica is that degree.
    let mut b = base.clone();
    b.stages[0].replica_tp = vec![1, 1];
    assert!(referee::contains(&p, &b));
    same(&base, &b);

    // Outside: offload ratios other than 0 and 1 (Mist's), offloaded activations, sequence
    // parallelism at TP 1, another batch, per-replica sample counts (Poplar's), 4 virtual
    // stages.
    let outside = |f: &dyn Fn(&mut Plan)| {
        let mut b = base.clone();
        f(&mut b);
        b
    };
    let mut cases = vec![
        outside(&|b| b.stages[0].offload.optimizer = 0.25),
        outside(&|b| b.stages[1].offload.weights = 0.5),
        outside(&|b| b.stages[1].offload.activations = 1.0),
        outside(&|b| b.stages[0].sequence_parallel = true),
        outside(&|b| {
            b.global_batch = 8;
            b.micro_batches = 4;
        }),
        outside(&|b| {
            b.stages.truncate(1);
            b.stages[0].layers.end = model.layers.len();
            b.stages[0].replica_samples = vec![1, 3];
            b.stages[0].micro_batch_sizes = vec![1, 2];
        }),
    ];
    // TP groups across nodes are inside: stage 0 on one T4 and one V100 as a TP pair, stage 1
    // on the other two.
    let mut across = base.clone();
    across.stages[0].devices = vec![
        hetplan::GpuId { node: 0, local: 0 },
        hetplan::GpuId { node: 1, local: 0 },
    ];
    across.stages[0].tp = 2;
    across.stages[0].dp = 1;
    across.stages[0].micro_batch_sizes = vec![2];
    across.stages[1].devices = vec![
        hetplan::GpuId { node: 0, local: 1 },
        hetplan::GpuId { node: 1, local: 1 },
    ];
    assert!(referee::contains(&p, &across), "{}", across.summary());
    // Interleaved: 2 virtual stages are inside, 4 are not.
    let interleave = |pp: usize, v: usize| {
        let mut b = base.clone();
        b.schedule = Schedule::Interleaved {
            virtual_stages: v as u32,
        };
        b.stages = (0..pp * v)
            .map(|j| {
                let mut s = base.stages[j % pp].clone();
                s.layers = hetplan::plan::LayerRange {
                    start: j,
                    end: j + 1,
                };
                s.recompute = Recompute::None;
                s
            })
            .collect();
        b
    };
    let v2 = interleave(2, 2);
    assert!(referee::contains(&p, &v2), "{}", v2.summary());
    cases.push(interleave(1, 4));
    for b in &cases {
        // Valid plans, left out for what they choose.
        assert!(est(b).iteration_time_s > 0.0);
        assert!(
            !referee::contains(&p, b),
            "{} {:?}",
            b.summary(),
            b.schedule
        );
    }
}

/// The generator yields varied problems: GPU types, mixed clusters, node shapes, layer counts,
/// batches, sequence lengths, model widths, 2 to 4 GPUs.
#[test]
fn the_generator_yields_varied_problems() {
    let mut runner = TestRunner::deterministic();
    let strategy = spec();
    let specs: Vec<Spec> = (0..64)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect();
    let types: BTreeSet<&str> = specs.iter().flat_map(Spec::types).collect();
    let mixed = specs.iter().filter(|s| s.types().len() == 2).count();
    let shapes: BTreeSet<Vec<(u32, u32)>> = (specs.iter())
        .map(|s| {
            s.groups
                .iter()
                .map(|g| (g.gpus_per_node, g.nodes))
                .collect()
        })
        .collect();
    let layers: BTreeSet<u64> = specs.iter().map(Spec::layers).collect();
    let batches: BTreeSet<u64> = specs.iter().map(|s| s.global_batch).collect();
    let widths: BTreeSet<u64> = specs.iter().map(|s| s.hidden).collect();
    let seqs: BTreeSet<u64> = specs.iter().map(|s| s.seq_len).collect();
    let sizes: BTreeSet<u32> = specs.iter().map(Spec::gpus).collect();
    assert!(types.len() >= 4, "{types:?}");
    assert!(mixed >= 16, "{mixed} of 64 mixed");
    assert!(shapes.len() >= 5, "{shapes:?}");
    eprintln!(
        "{mixed} mixed, {} with 4 GPUs, {} with 6 layers, {} batches above 4",
        specs.iter().filter(|s| s.gpus() == 4).count(),
        specs.iter().filter(|s| s.layers() == 6).count(),
        specs.iter().filter(|s| s.global_batch > 4).count()
    );
    assert_eq!(layers, (3..=6).collect(), "{layers:?}");
    assert_eq!(batches.len(), 4, "{batches:?}");
    assert_eq!(widths.len(), 4, "{widths:?}");
    assert_eq!(seqs.len(), 2, "{seqs:?}");
    assert_eq!(sizes, (2..=4).collect(), "{sizes:?}");
    assert!(specs
        .iter()
        .all(|s| s.gpus() <= 4 && s.types().len() <= 2 && s.layers() <= 6));
}

/// The referee counts one node per candidate and stops at a node limit with the best plan so
/// far, in either enumeration.
#[test]
fn the_referee_stops_at_a_node_limit() {
    let spec = Spec {
        groups: vec![Group {
            gpu: "l4",
            gpus_per_node: 2,
            nodes: 1,
        }],
        network: "25 Gbps",
        blocks: 2,
        hidden: 1024,
        heads: 16,
        seq_len: 1024,
        global_batch: 4,
    };
    let (model, cluster) = (spec.model(), spec.cluster());
    let p = problem(&spec, &model, &cluster);
    for enumeration in [Enumeration::Every, Enumeration::Undominated] {
        let limits = planners::Limits {
            max_nodes: Some(500),
            time: None,
        };
        let mut search = Search::new(limits, &planners::NoClock, &planners::NoProgress);
        let r = referee::optimum_with(&p, &mut search, enumeration).unwrap();
        assert_eq!(r.stop_reason, planners::StopReason::NodeLimit);
        assert_eq!(r.candidates, 500);
        assert!(r.best.is_some());
        let all = referee::optimum_with(&p, &mut Search::unbounded(), enumeration).unwrap();
        assert_eq!(all.stop_reason, planners::StopReason::Exhausted);
        assert!(all.candidates > 500);
        let t = |a: &RefereeAnswer| a.best.as_ref().unwrap().1.iteration_time_s;
        assert!(t(&all) <= t(&r));
    }
}
