use hetplan::calibration::published::{parse, Outcome, BUILTIN};
use hetplan::cost::{self, Analytic, Workload};
fn main() {
    let want: Vec<String> = std::env::args().skip(1).collect();
    for (source, text) in BUILTIN {
        for o in parse(source, text).unwrap() {
            let Outcome::Case(c) = o else { continue };
            if !want.is_empty() && !want.iter().any(|w| c.id.contains(w.as_str())) {
                continue;
            }
            let w = Workload {
                model: &c.model,
                cluster: &c.cluster,
                seq_len: c.seq,
            };
            let p = w.validate(&c.plan).unwrap();
            let e = cost::estimate(w, &p, &Analytic);
            let s = &e.stages[0];
            println!("{} meas {:?} est {:.0} iter {:.3}s | fwd {:.4} bwd {:.4} rec {:.4} tp {:.4} cp {:.4} p2p {:.4} exp {:.4} mb {:.4} dp {:.4}/{:.4} opt {:.4} extra {:.4} start {:.4} nmb {}",
              c.id, c.measured_tokens_per_s_per_gpu, e.tokens_per_s_per_gpu, e.iteration_time_s,
              s.forward.get(), s.backward.get(), s.recompute.get(), s.tp_comm.get(), s.cp_comm.get(), s.p2p.get(), s.exposed_per_micro_batch.get(), s.micro_batch_time.get(), s.dp_sync.get(), s.dp_sync_exposed.get(), s.optimizer.get(), s.extra.get(), s.start.get(), s.micro_batch_sizes.len());
        }
    }
}
