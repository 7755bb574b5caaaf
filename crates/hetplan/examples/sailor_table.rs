//! Prints docs/validation.md §2's table: Sailor's measured GH200 iterations against hetplan's
//! estimate from Sailor's imported per-layer profiles.
//! `cargo run --release -p hetplan --example sailor_table`

use hetplan::calibration::sailor::check_sailor;
use hetplan::profile::import_sailor;

fn main() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/sailor");
    let read =
        |p: &str| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("cannot read {p}: {e}"));
    let profiles = read(&format!("{dir}/profiles_tmp.json"));
    let info = read(&format!("{dir}/llm_info.json"));
    let db = import_sailor(&profiles, Some(&info)).expect("Sailor's profiles import");
    let mut runs: Vec<(String, String)> = std::fs::read_dir(format!("{dir}/validation-gh200"))
        .expect("data/sailor/validation-gh200 is there")
        .map(|e| {
            let e = e.expect("a directory entry");
            (
                e.file_name().to_string_lossy().into_owned(),
                read(&e.path().to_string_lossy()),
            )
        })
        .collect();
    runs.sort();
    let r = check_sailor(&runs, &db).expect("the runs parse");
    println!(
        "| run | measured s | estimated s | error | measured peak GiB | estimated GiB | error |"
    );
    println!("|---|---|---|---|---|---|---|");
    let gib = |b: f64| b / 1073741824.0;
    for c in &r.runs {
        println!(
            "| {} | {:.3} | {:.3} | {:+.1}% | {:.1} | {:.1} | {:+.1}% |",
            c.file.trim_end_matches(".json").replace("_plan_config", ""),
            c.measured_iteration_s,
            c.estimated_iteration_s,
            c.time_error * 100.0,
            gib(c.measured_max_mem_bytes),
            gib(c.estimated_max_mem_bytes),
            c.memory_error * 100.0
        );
    }
    println!();
    for (model, err) in &r.mean_abs_time_error {
        println!("{model}: mean |time error| {:.1}%", err * 100.0);
    }
    for (model, err) in &r.mean_abs_memory_error {
        println!("{model}: mean |memory error| {:.1}%", err * 100.0);
    }
    for s in &r.skipped {
        println!("skipped: {s:?}");
    }
}
