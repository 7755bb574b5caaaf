use hetplan::cost::Analytic;
use hetplan::planners::mist::Mist;
use hetplan::planners::{PlanOptions, Planner, Problem, Search};
use hetplan::scenario::scenario;

#[test]
fn explore_fig2() {
    let sc = scenario("mist-fig2-l4").unwrap();
    let mut cfg = sc.model.transformer.clone().unwrap();
    if std::env::var("TORCH").is_ok() { cfg.attn_impl = hetplan::model::AttnImpl::Torch; }
    let model = cfg.build();
    println!("{} layers {:?}", model.layers.len(), cfg.attn_impl);
    let p = Problem {
        model: &model,
        cluster: &sc.cluster,
        global_batch: sc.global_batch,
        seq_len: sc.seq_len,
        compute: &Analytic,
        options: PlanOptions::default(),
    };
    for m in [Mist::parallelism_only(), Mist::full_checkpointing(), Mist::default()] {
        let t = std::time::Instant::now();
        let o = m.plan(&p, &mut Search::unbounded());
        println!("{:?}", t.elapsed());
        match o {
            Ok(o) => {
                println!("{} est {:.3} explored {}", o.plan.summary(), o.estimate.iteration_time_s, o.explored);
                for n in &o.notes { println!("  {n}"); }
                let sim = hetplan::sim::simulate(hetplan::planners::common::workload(&p), &o.plan, &Analytic, &Default::default()).unwrap();
                println!("  sim {:.3}", sim.iteration_time_s);
            }
            Err(e) => println!("err {e}"),
        }
    }
}
