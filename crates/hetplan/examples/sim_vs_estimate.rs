//! Prints the estimate-vs-simulation table of docs/validation.md §3:
//! `cargo run --release -p hetplan --example sim_vs_estimate`.

#[path = "../tests/sim_cases/mod.rs"]
mod sim_cases;

fn main() {
    println!("| model | cluster | plan | estimate (s) | simulate (s) | difference | why |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for case in sim_cases::cases() {
        let row = case.run();
        let (_, why) = case.bound();
        println!(
            "| {} | {} | `{}` | {:.4} | {:.4} | {:+.1}% | {} |",
            row.model,
            row.cluster,
            row.plan,
            row.estimate_s,
            row.simulate_s,
            row.difference() * 100.0,
            why
        );
    }
}
