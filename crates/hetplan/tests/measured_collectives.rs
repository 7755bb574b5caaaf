//! Measured collective bandwidths (a profile database's `collectives`, as `python -m
//! hetplan.profile --collectives` writes them) in the estimate: where a GPU type has a curve
//! for a collective among as many GPUs over the same kind of link, the collective takes at
//! least the measured time; where the model is already slower, or nothing was measured, the
//! α–β model's time stays.

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{estimate, Analytic, Estimate, Profiled, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::profile::{ProfileDb, ProfileIndex};

/// A database with one all-reduce curve among `group` A100s over `link` at `gbps` GB/s.
fn db_on(gbps: f64, group: u32, link: &str) -> ProfileDb {
    let samples: Vec<String> = [1u64 << 20, 1 << 26, 1 << 32]
        .iter()
        .map(|m| {
            format!(
                r#"{{"op": "all-reduce", "group_size": {group}, "link": "{link}", "message": {m}, "bandwidth": {}}}"#,
                gbps * 1e9
            )
        })
        .collect();
    ProfileDb::parse(&format!(
        r#"{{"format_version": 1, "profiles": [{{"gpu": "a100-sxm4-80gb", "model": "gpt3-1.3b",
            "source": "test", "layers": [], "collectives": [{}]}}]}}"#,
        samples.join(",")
    ))
    .unwrap()
}

/// ... among 8 in a node.
fn db(gbps: f64, group: u32) -> ProfileDb {
    db_on(gbps, group, "intra-node")
}

fn run(db: Option<&ProfileDb>) -> Estimate {
    run_on("1x8xa100-80gb", db)
}

fn run_on(cluster: &str, db: Option<&ProfileDb>) -> Estimate {
    let model = catalog_model("gpt3-1.3b").unwrap();
    let cluster = catalog_cluster(cluster).unwrap();
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 2048,
    };
    let plan = parse_inline_plan("dp=8,mbs=2,gbs=64", &model, &cluster).unwrap();
    let valid = w.validate(&plan).unwrap();
    match db {
        None => estimate(w, &valid, &Analytic),
        Some(db) => {
            let index = ProfileIndex::new(db);
            let profiled = Profiled {
                index: &index,
                interpolation: Default::default(),
            };
            estimate(w, &valid, &profiled)
        }
    }
}

#[test]
fn a_measured_all_reduce_slower_than_the_links_sets_the_gradient_reduction() {
    let model = run(None);
    let slow = run(Some(&db(1.0, 8)));
    // 1.3B parameters' 2-byte gradients at 1 GB/s: about 2.6 s, far above NVLink's time.
    let (m, s) = (model.stages[0].dp_sync.get(), slow.stages[0].dp_sync.get());
    assert!(s > 10.0 * m, "model {m} s, measured {s} s");
    assert!(s > 2.0 && s < 3.5, "{s}");
    assert!(slow.iteration_time_s > model.iteration_time_s);
    // A curve faster than the links leaves the model's time (the model adds what sharing costs).
    let fast = run(Some(&db(1e4, 8)));
    assert_eq!(fast.stages[0].dp_sync, model.stages[0].dp_sync);
    // A curve for another group size does not apply.
    let other = run(Some(&db(1.0, 4)));
    assert_eq!(other.stages[0].dp_sync, model.stages[0].dp_sync);
}

#[test]
fn a_curve_applies_to_groups_of_its_gpu_type_over_its_link_only() {
    let across = db_on(1.0, 8, "inter-node");
    let same = "2x4xa100-sxm4-80gb@100Gbps";
    let mixed = "1x4xa100-sxm4-80gb@100Gbps+1x4xa100-sxm4-40gb@100Gbps";
    let dp = |c: &str, d: Option<&ProfileDb>| run_on(c, d).stages[0].dp_sync.get();
    assert!(dp(same, Some(&across)) > 2.0 * dp(same, None));
    // Half the ring is of another type: the A100-80GB curve says nothing about it.
    assert_eq!(dp(mixed, Some(&across)), dp(mixed, None));
    // An intra-node curve does not price a ring across nodes.
    assert_eq!(dp(same, Some(&db(1.0, 8))), dp(same, None));
}
