//! Human-readable output: aligned tables and the estimate report. Printing lives only here and in
//! `main`; the library returns values.

use hetplan::calibration::Report;
use hetplan::cost::Estimate;
use hetplan::gpu::GpuSpec;
use hetplan::plan::{Precision, Schedule};
use hetplan::sim::{Executor, Simulation};
use hetplan::units::{Bytes, Seconds};
use hetplan::{Cluster, GpuId, Model, Plan};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Column alignment.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A plain-text table: a header, a rule, and rows, columns two spaces apart.
pub struct Table {
    headers: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(columns: &[(&str, Align)]) -> Table {
        Table {
            headers: columns.iter().map(|(h, _)| h.to_string()).collect(),
            align: columns.iter().map(|(_, a)| *a).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.headers.len());
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let width = |s: &str| s.chars().count();
        let n = self.headers.len();
        let mut w: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(width(c));
            }
        }
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            let mut s = String::new();
            for (i, (&wi, &align)) in w.iter().zip(&self.align).enumerate() {
                let c = cells.get(i).map(|c| c.as_str()).unwrap_or("");
                let pad = wi - width(c);
                if i > 0 {
                    s.push_str("  ");
                }
                match align {
                    Align::Left => {
                        s.push_str(c);
                        s.push_str(&" ".repeat(pad));
                    }
                    Align::Right => {
                        s.push_str(&" ".repeat(pad));
                        s.push_str(c);
                    }
                }
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(&self.headers, &mut out);
        let rule: Vec<String> = w.iter().map(|&k| "-".repeat(k)).collect();
        line(&rule, &mut out);
        for r in &self.rows {
            line(r, &mut out);
        }
        out
    }
}

use Align::{Left, Right};

/// `174.6B`, `1.3B`, `350.0M`, `25.6K`.
pub fn fmt_count(n: f64) -> String {
    let a = n.abs();
    if a >= 1e12 {
        format!("{:.1}T", n / 1e12)
    } else if a >= 1e9 {
        format!("{:.1}B", n / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}K", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

/// `12,345` for large values, `12.35` for small ones.
pub fn fmt_rate(x: f64) -> String {
    if !x.is_finite() {
        return "-".to_string();
    }
    if x.abs() < 100.0 {
        return format!("{x:.2}");
    }
    let s = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

pub fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:.1}%", x * 100.0)
    } else {
        "-".to_string()
    }
}

fn secs(s: Seconds) -> String {
    if s.get() == 0.0 {
        "0".to_string()
    } else {
        s.to_string()
    }
}

fn gib(b: Bytes) -> String {
    format!("{:.2}", b.as_gib())
}

/// `4 × v100-sxm2-16gb, 2 × t4`.
pub fn gpu_mix(cluster: &Cluster) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for n in &cluster.nodes {
        let name = &cluster.gpu_types[n.gpu_type.0].name;
        match counts.iter_mut().find(|(g, _)| g == name) {
            Some((_, c)) => *c += n.num_gpus as usize,
            None => counts.push((name.clone(), n.num_gpus as usize)),
        }
    }
    counts
        .iter()
        .map(|(g, c)| format!("{c} × {g}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn schedule_name(s: Schedule) -> String {
    match s {
        Schedule::Gpipe => "gpipe".into(),
        Schedule::OneFOneB => "1f1b".into(),
        Schedule::Interleaved { virtual_stages } => {
            format!("interleaved-1f1b (v={virtual_stages})")
        }
    }
}

fn precision_name(p: Precision) -> &'static str {
    p.name()
}

fn layer_span(start: usize, end: usize) -> String {
    if end <= start + 1 {
        format!("{start}")
    } else {
        format!("{start}-{}", end - 1)
    }
}

/// `2` when every replica has the same size, else `2,2,3,1` (at most 6 listed).
fn mbs_list(sizes: &[u64]) -> String {
    if let Some(&first) = sizes.first() {
        if sizes.iter().all(|&s| s == first) {
            return first.to_string();
        }
    }
    let mut parts: Vec<String> = sizes.iter().take(6).map(|s| s.to_string()).collect();
    if sizes.len() > 6 {
        parts.push("…".into());
    }
    parts.join(",")
}

/// What produced the layer times: shown in the report header.
pub struct ComputeSource {
    pub description: String,
}

/// The lines on what is costed or simulated: model, cluster, plan, compute times.
fn header(
    model: &Model,
    cluster: &Cluster,
    plan: &Plan,
    seq_len: u64,
    num_gpus: usize,
    compute: &ComputeSource,
) -> String {
    let mut o = String::new();
    let layers = model.layers.len();
    let seq = if model.per_sample {
        "per-sample model".to_string()
    } else {
        format!("seq {seq_len}")
    };
    let _ = writeln!(
        o,
        "model    {}: {} parameters, {}, {seq}",
        model.name,
        fmt_count(model.params() as f64),
        plural(layers, "layer", "layers")
    );
    let _ = writeln!(
        o,
        "cluster  {}: {} ({}) in {}",
        cluster.name,
        plural(cluster.num_gpus(), "GPU", "GPUs"),
        gpu_mix(cluster),
        plural(cluster.nodes.len(), "node", "nodes")
    );
    let _ = writeln!(o, "plan     {}", plan.summary());
    let _ = writeln!(
        o,
        "         global batch {}, {}, {}, {}, {} of {} GPUs used",
        plan.global_batch,
        schedule_name(plan.schedule),
        plan.engine.name(),
        precision_name(plan.precision),
        num_gpus,
        cluster.num_gpus()
    );
    let _ = writeln!(o, "compute  {}", compute.description);
    o
}

/// The report of `hetplan estimate`.
pub fn estimate(
    model: &Model,
    cluster: &Cluster,
    plan: &Plan,
    seq_len: u64,
    est: &Estimate,
    compute: &ComputeSource,
) -> String {
    let mut o = header(model, cluster, plan, seq_len, est.num_gpus, compute);
    o.push('\n');
    let per_sample = model.per_sample;

    // Time per micro-batch.
    let mut t = Table::new(&[
        ("stage", Right),
        ("layers", Left),
        ("devices", Left),
        ("dp×tp", Left),
        ("mbs", Right),
        ("forward", Right),
        ("backward", Right),
        ("TP comm", Right),
        ("p2p", Right),
        ("exposed", Right),
        ("per μbatch", Right),
        ("DP sync", Right),
        ("DP exposed", Right),
    ]);
    for (s, ps) in est.stages.iter().zip(&plan.stages) {
        let first = ps
            .devices
            .first()
            .map(|g| g.to_string())
            .unwrap_or_default();
        let last = ps.devices.last().map(|g| g.to_string()).unwrap_or_default();
        let devices = if ps.devices.len() <= 1 {
            first
        } else {
            format!("{first}..{last}")
        };
        t.row(vec![
            s.index.to_string(),
            layer_span(s.layers.start, s.layers.end),
            devices,
            if s.replica_tp.is_empty() {
                format!("{}×{}", s.dp, s.tp)
            } else {
                // Replicas at different TP degrees: each one's.
                let t: Vec<String> = s.replica_tp.iter().map(|t| t.to_string()).collect();
                format!("{}×[{}]", s.dp, t.join(","))
            },
            mbs_list(&s.micro_batch_sizes),
            secs(s.forward),
            secs(s.backward),
            secs(s.tp_comm),
            secs(s.p2p),
            secs(s.exposed_per_micro_batch),
            secs(s.micro_batch_time),
            secs(s.dp_sync),
            secs(s.dp_sync_exposed),
        ]);
    }
    o.push_str(
        "time per micro-batch (slowest replica of each stage; backward includes recomputation)\n",
    );
    o.push_str(&t.render());
    o.push('\n');

    // Memory of each stage's most loaded GPU.
    let mut by_stage: BTreeMap<usize, (f64, bool)> = BTreeMap::new();
    for g in &est.per_gpu {
        let e = by_stage.entry(g.stage).or_insert((f64::INFINITY, true));
        e.0 = e.0.min(g.capacity_bytes);
        e.1 &= g.fits;
    }
    let mut m = Table::new(&[
        ("stage", Right),
        ("weights", Right),
        ("grads", Right),
        ("optimizer", Right),
        ("activations", Right),
        ("temp", Right),
        ("frag.", Right),
        ("runtime", Right),
        ("total", Right),
        ("capacity", Right),
        ("fits", Left),
    ]);
    // A device holds all its chunks (interleaving): one row per device, under the stage of its
    // first chunk, whose estimate counts them all.
    let mut chunks = false;
    for s in &est.stages {
        let Some(&(cap, fits)) = by_stage.get(&s.index) else {
            chunks = true;
            continue;
        };
        m.row(vec![
            s.index.to_string(),
            gib(s.memory.weights),
            gib(s.memory.gradients),
            gib(s.memory.optimizer),
            gib(s.memory.activations),
            gib(s.memory.temporary),
            gib(Bytes(s.memory.overhead.get() - s.memory.runtime.get())),
            gib(s.memory.runtime),
            gib(s.memory.total),
            gib(Bytes(cap)),
            if fits { "ok".into() } else { "OOM".into() },
        ]);
    }
    o.push_str(if chunks {
        "memory per GPU in GiB (most loaded GPU of each stage; a device's row, under its first \
         chunk, holds all its chunks)\n"
    } else {
        "memory per GPU in GiB (most loaded GPU of each stage)\n"
    });
    o.push_str(&m.render());
    o.push_str(
        "frag.: the allocator's fragmentation; runtime: the CUDA context and NCCL's buffers, which \
         nvidia-smi counts and torch.cuda.max_memory_reserved does not\n",
    );
    o.push('\n');

    // Totals.
    let mut rows: Vec<(&str, String)> = vec![
        ("iteration time", Seconds(est.iteration_time_s).to_string()),
        ("samples/s", fmt_rate(est.samples_per_s)),
    ];
    // Per-sample models (layer lists) have no tokens: their "tokens" are samples.
    if !per_sample {
        rows.push(("tokens/s", fmt_rate(est.tokens_per_s)));
        rows.push(("tokens/s per GPU", fmt_rate(est.tokens_per_s_per_gpu)));
    }
    rows.extend([("MFU", pct(est.mfu)), ("HFU", pct(est.hfu))]);
    if est.idle_gpus > 0 {
        rows.push((
            "MFU of the cluster",
            format!(
                "{} ({} of {} GPUs idle)",
                pct(est.mfu_cluster),
                est.idle_gpus,
                est.num_gpus + est.idle_gpus
            ),
        ));
    }
    rows.extend([
        ("bubble", pct(est.bubble_fraction)),
        ("memory", memory_verdict(est)),
    ]);
    for (k, v) in rows {
        let _ = writeln!(o, "{k:<18}{v}");
    }
    if !est.notes.is_empty() {
        o.push_str("notes\n");
        for n in &est.notes {
            let _ = writeln!(o, "  - {n}");
        }
    }
    o
}

/// What `hetplan simulate` reports on.
pub struct SimReport<'a> {
    pub model: &'a Model,
    pub cluster: &'a Cluster,
    pub plan: &'a Plan,
    pub seq_len: u64,
    pub sim: &'a Simulation,
    pub estimate: &'a Estimate,
    pub compute: &'a ComputeSource,
    pub interference: bool,
}

/// Above this many GPUs the time table has a row per executor, above this many executors a row
/// per stage.
const MAX_TABLE_ROWS: usize = 64;
/// The critical path in at most this many lines.
const MAX_PATH_LINES: usize = 8;

/// `n0g0..n0g7`, or `n0g0`.
fn device_range(devices: &[GpuId]) -> String {
    match (devices.first(), devices.last()) {
        (Some(a), Some(b)) if devices.len() > 1 => format!("{a}..{b}"),
        (Some(a), _) => a.to_string(),
        _ => String::new(),
    }
}

/// The report of `hetplan simulate`.
pub fn simulation(r: &SimReport<'_>) -> String {
    let sim = r.sim;
    let n_gpus = sim.per_gpu.len();
    let mut o = header(r.model, r.cluster, r.plan, r.seq_len, n_gpus, r.compute);
    let _ = writeln!(
        o,
        "simulated {} tasks, {} events; interference of compute and communication {}",
        fmt_rate(sim.tasks as f64),
        fmt_rate(sim.events as f64),
        if r.interference {
            "on"
        } else {
            "off (--no-interference)"
        }
    );
    o.push('\n');

    // Totals.
    let est = r.estimate.iteration_time_s;
    let diff = if est > 0.0 {
        format!("{:+.1}%", (sim.iteration_time_s - est) / est * 100.0)
    } else {
        "-".into()
    };
    let mut rows: Vec<(&str, String)> = vec![
        (
            "iteration time",
            format!(
                "{}  (estimate {}, simulation {diff})",
                Seconds(sim.iteration_time_s),
                Seconds(est)
            ),
        ),
        ("samples/s", fmt_rate(sim.samples_per_s)),
    ];
    if !r.model.per_sample {
        rows.push(("tokens/s", fmt_rate(sim.tokens_per_s)));
        rows.push(("tokens/s per GPU", fmt_rate(sim.tokens_per_s_per_gpu)));
    }
    rows.push(("bubble", pct(sim.bubble_fraction)));
    for (k, v) in rows {
        let _ = writeln!(o, "{k:<18}{v}");
    }
    o.push('\n');

    // Where each GPU's time goes.
    let cols = |first: &[(&'static str, Align)]| {
        let mut c: Vec<(&str, Align)> = first.to_vec();
        c.extend([("busy", Right), ("comm-wait", Right), ("idle", Right)]);
        Table::new(&c)
    };
    let fracs = |b: f64, c: f64, i: f64| [pct(b), pct(c), pct(i)];
    if n_gpus <= MAX_TABLE_ROWS {
        let mut t = cols(&[("gpu", Left), ("stage", Right), ("replica", Right)]);
        for g in &sim.per_gpu {
            let mut row = vec![
                g.gpu.to_string(),
                g.stage.to_string(),
                g.replica.to_string(),
            ];
            row.extend(fracs(g.busy, g.comm_wait, g.idle));
            t.row(row);
        }
        o.push_str("time per GPU (share of the iteration)\n");
        o.push_str(&t.render());
    } else {
        // Every GPU of an executor spends its time alike.
        let of_exec = |ex: &Executor| {
            ex.devices
                .first()
                .and_then(|d| sim.per_gpu.iter().find(|g| g.gpu == *d))
                .map_or((0.0, 0.0, 0.0), |g| (g.busy, g.comm_wait, g.idle))
        };
        if sim.executors.len() <= MAX_TABLE_ROWS {
            let mut t = cols(&[("stage", Right), ("replica", Right), ("devices", Left)]);
            for ex in &sim.executors {
                let (b, c, i) = of_exec(ex);
                let mut row = vec![
                    ex.stage.to_string(),
                    ex.replica.to_string(),
                    device_range(&ex.devices),
                ];
                row.extend(fracs(b, c, i));
                t.row(row);
            }
            o.push_str(
                "time per executor (share of the iteration; the GPUs of a TP group alike)\n",
            );
            o.push_str(&t.render());
        } else {
            let mut t = cols(&[("stage", Right), ("replicas", Right), ("GPUs", Right)]);
            let mut by_stage: BTreeMap<usize, (usize, usize, f64, f64, f64)> = BTreeMap::new();
            for ex in &sim.executors {
                let (b, c, i) = of_exec(ex);
                let e = by_stage.entry(ex.stage).or_default();
                e.0 += 1;
                e.1 += ex.devices.len();
                e.2 += b;
                e.3 += c;
                e.4 += i;
            }
            for (stage, (n, g, b, c, i)) in by_stage {
                let k = n.max(1) as f64;
                let mut row = vec![stage.to_string(), n.to_string(), g.to_string()];
                row.extend(fracs(b / k, c / k, i / k));
                t.row(row);
            }
            o.push_str("time per stage (share of the iteration, mean over its replicas)\n");
            o.push_str(&t.render());
        }
    }
    o.push_str(
        "busy: computing; comm-wait: waiting for a transfer it needs; idle: waiting for other \
         stages or done\n\n",
    );

    // The critical path: its time by activity and stage, in the order first met on it; the
    // largest groups when there are many.
    let path = &sim.critical_path;
    let mut groups: Vec<(String, Option<usize>, usize, f64)> = Vec::new();
    for seg in path {
        match groups
            .iter_mut()
            .find(|g| g.0 == seg.what && g.1 == seg.stage)
        {
            Some(g) => {
                g.2 += seg.tasks;
                g.3 += seg.seconds;
            }
            None => groups.push((seg.what.clone(), seg.stage, seg.tasks, seg.seconds)),
        }
    }
    let mut keep: Vec<usize> = (0..groups.len()).collect();
    let mut rest = (0usize, 0usize, 0.0f64);
    if groups.len() > MAX_PATH_LINES {
        keep.sort_by(|&a, &b| groups[b].3.total_cmp(&groups[a].3).then(a.cmp(&b)));
        for &i in &keep[MAX_PATH_LINES - 1..] {
            rest.0 += 1;
            rest.1 += groups[i].2;
            rest.2 += groups[i].3;
        }
        keep.truncate(MAX_PATH_LINES - 1);
        keep.sort_unstable();
    }
    let mut t = Table::new(&[
        ("what", Left),
        ("stage", Right),
        ("tasks", Right),
        ("time", Right),
        ("share", Right),
    ]);
    let share = |s: f64| pct(s / sim.iteration_time_s);
    for i in keep {
        let (what, stage, tasks, seconds) = &groups[i];
        t.row(vec![
            what.clone(),
            stage.map_or("-".into(), |x| x.to_string()),
            tasks.to_string(),
            secs(Seconds(*seconds)),
            share(*seconds),
        ]);
    }
    if rest.0 > 0 {
        t.row(vec![
            format!("other ({} kinds)", rest.0),
            String::new(),
            rest.1.to_string(),
            secs(Seconds(rest.2)),
            share(rest.2),
        ]);
    }
    let _ = writeln!(
        o,
        "critical path ({} tasks, what the iteration waited for): time by activity and stage, \
         in the order first met",
        path.iter().map(|s| s.tasks).sum::<usize>()
    );
    o.push_str(&t.render());
    o
}

/// `fits: peak 35.21 GiB on n0g0 (44% of 80.00 GiB)` or the worst OOM.
fn memory_verdict(est: &Estimate) -> String {
    if est.fits {
        let g = est
            .per_gpu
            .iter()
            .max_by(|a, b| a.peak_memory_bytes.total_cmp(&b.peak_memory_bytes));
        return match g {
            Some(g) => format!(
                "fits: peak {} on {} ({} of {})",
                Bytes(g.peak_memory_bytes),
                g.gpu,
                pct(g.peak_memory_bytes / g.capacity_bytes),
                Bytes(g.capacity_bytes)
            ),
            None => "fits".into(),
        };
    }
    let over: Vec<_> = est.per_gpu.iter().filter(|g| !g.fits).collect();
    let worst = over.iter().max_by(|a, b| {
        (a.peak_memory_bytes - a.capacity_bytes)
            .total_cmp(&(b.peak_memory_bytes - b.capacity_bytes))
    });
    match worst {
        Some(g) => {
            let more = if over.len() > 1 {
                format!(" ({} GPUs out of memory in all)", over.len())
            } else {
                String::new()
            };
            format!(
                "OOM: {} ({}, stage {}) needs {} of {}, over by {}{more}",
                g.gpu,
                g.gpu_type,
                g.stage,
                Bytes(g.peak_memory_bytes),
                Bytes(g.capacity_bytes),
                Bytes(g.peak_memory_bytes - g.capacity_bytes)
            )
        }
        None => "OOM".into(),
    }
}

fn arch_name(g: &GpuSpec) -> String {
    serde_json::to_value(g.arch)
        .ok()
        .and_then(|v| v.as_str().map(|s| s.to_string()))
        .unwrap_or_else(|| format!("{:?}", g.arch).to_ascii_lowercase())
}

/// `hetplan gpus`.
pub fn gpus(catalog: &[GpuSpec]) -> String {
    let mut t = Table::new(&[
        ("name", Left),
        ("arch", Left),
        ("datasheet", Right),
        ("memory GiB", Right),
        ("BF16 TFLOP/s", Right),
        ("FP32 TFLOP/s", Right),
        ("HBM GB/s", Right),
        ("NVLink GB/s", Right),
        ("PCIe GB/s", Right),
        ("source", Left),
    ]);
    let num = |x: f64| {
        if (x - x.round()).abs() < 1e-9 {
            format!("{x:.0}")
        } else {
            let s = format!("{x:.2}");
            s.trim_end_matches('0').to_string()
        }
    };
    for g in catalog {
        t.row(vec![
            g.name.clone(),
            arch_name(g),
            format!("{} GB", g.datasheet_memory_gb),
            num(g.memory.as_gib()),
            num(g.peak_tensor.get() / 1e12),
            num(g.peak_fp32.get() / 1e12),
            num(g.hbm_bandwidth.get() / 1e9),
            g.nvlink_bandwidth
                .map(|b| num(b.get() / 1e9))
                .unwrap_or_else(|| "-".into()),
            num(g.pcie_bandwidth.get() / 1e9),
            g.source.clone(),
        ]);
    }
    let mut o = t.render();
    o.push_str(
        "\ndatasheet: the vendor's memory size; memory GiB: what CUDA (HIP) reports as the device's \
         total, what plans must fit in.\nBF16: dense tensor-core peak (FP16 where there is no \
         BF16); bandwidths per direction.\n",
    );
    o.push_str("\naliases (* means several cards; the note printed on use says which is taken):\n");
    for g in catalog {
        let aliases: Vec<String> = g
            .aliases
            .iter()
            .map(|a| match hetplan::gpu::ambiguity_hint(a) {
                Some(_) => format!("{a}*"),
                None => a.clone(),
            })
            .collect();
        o.push_str(&format!("  {:<16} {}\n", g.name, aliases.join(", ")));
    }
    o.push_str(
        "nvidia-smi's names resolve too, with or without the vendor word: `NVIDIA A100-SXM4-80GB`, \
         `Tesla T4`, `NVIDIA GeForce RTX 4090`, `NVIDIA H100 80GB HBM3`.\n",
    );
    o
}

/// One row of `hetplan models`.
#[derive(serde::Serialize)]
pub struct ModelRow {
    pub name: String,
    pub params: u64,
    pub layers: usize,
    pub default_seq_len: u64,
    pub description: String,
    pub source: String,
}

/// `hetplan models`.
pub fn models(rows: &[ModelRow]) -> String {
    let mut t = Table::new(&[
        ("name", Left),
        ("params", Right),
        ("layers", Right),
        ("seq", Right),
        ("description", Left),
    ]);
    for r in rows {
        t.row(vec![
            r.name.clone(),
            fmt_count(r.params as f64),
            r.layers.to_string(),
            r.default_seq_len.to_string(),
            r.description.clone(),
        ]);
    }
    t.render()
}

/// One row of `hetplan clusters`.
#[derive(serde::Serialize)]
pub struct ClusterRow {
    pub name: String,
    pub nodes: usize,
    pub gpus: usize,
    pub gpu_types: Vec<GpuCount>,
}

#[derive(serde::Serialize)]
pub struct GpuCount {
    pub gpu: String,
    pub count: usize,
}

impl ClusterRow {
    pub fn of(c: &Cluster) -> ClusterRow {
        let mut gpu_types: Vec<GpuCount> = Vec::new();
        for n in &c.nodes {
            let name = &c.gpu_types[n.gpu_type.0].name;
            match gpu_types.iter_mut().find(|g| &g.gpu == name) {
                Some(g) => g.count += n.num_gpus as usize,
                None => gpu_types.push(GpuCount {
                    gpu: name.clone(),
                    count: n.num_gpus as usize,
                }),
            }
        }
        ClusterRow {
            name: c.name.clone(),
            nodes: c.nodes.len(),
            gpus: c.num_gpus(),
            gpu_types,
        }
    }
}

/// `hetplan clusters`.
pub fn clusters(rows: &[ClusterRow]) -> String {
    let mut t = Table::new(&[
        ("name", Left),
        ("nodes", Right),
        ("GPUs", Right),
        ("GPU types", Left),
    ]);
    for r in rows {
        t.row(vec![
            r.name.clone(),
            r.nodes.to_string(),
            r.gpus.to_string(),
            r.gpu_types
                .iter()
                .map(|g| format!("{} × {}", g.count, g.gpu))
                .collect::<Vec<_>>()
                .join(", "),
        ]);
    }
    let mut o = t.render();
    o.push_str("\nAlso: any uniform cluster as NxGxGPU[@BANDWIDTH], e.g. 2x8xa100-80gb or 4x8xh100@3200Gbps.\n");
    o
}

/// `hetplan calibrate`.
pub fn calibration(r: &Report) -> String {
    let mut t = Table::new(&[
        ("model", Left),
        ("seq", Right),
        ("gpus", Right),
        ("mbs", Right),
        ("ckpt", Left),
        ("measured tok/s/GPU", Right),
        ("estimated", Right),
        ("error", Right),
        ("", Left),
    ]);
    for c in &r.rows {
        t.row(vec![
            c.row.model.clone(),
            c.row.seq.to_string(),
            c.row.gpus.to_string(),
            c.row.mbs.to_string(),
            if c.row.ckpt {
                "yes".into()
            } else {
                "no".into()
            },
            fmt_rate(c.row.tokens_per_s_per_gpu),
            fmt_rate(c.estimated_tokens_per_s_per_gpu),
            format!("{:+.1}%", c.error * 100.0),
            if c.fits { String::new() } else { "OOM".into() },
        ]);
    }
    let mut o = t.render();
    let _ = writeln!(
        o,
        "\n{} rows: median |error| {}, worst |error| {}",
        r.rows.len(),
        pct(r.median_abs_error),
        pct(r.worst_abs_error)
    );
    o
}

/// `hetplan calibrate --published`: each published row beside the estimate and the simulation
/// of its plan, memory as its source measured it, then the median and 90th percentile |error|.
pub fn published(
    rows: &[hetplan::calibration::published::Checked],
    skipped: &[(String, usize, String)],
) -> String {
    use hetplan::calibration::published::{median_p90, MemoryQuantity};
    let signed = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:+.1}%", x * 100.0));
    let mut t = Table::new(&[
        ("row", Left),
        ("gpu", Left),
        ("precision", Left),
        ("seq", Right),
        ("measured tok/s/GPU", Right),
        ("estimated", Right),
        ("error", Right),
        ("simulated", Right),
        ("measured memory", Right),
        ("estimated", Right),
        ("error", Right),
        ("verdict", Left),
    ]);
    for c in rows {
        let measured_mem = match c.measured_memory {
            Some(m) => match m.quantity {
                MemoryQuantity::TorchReserved => format!("{:.1} GiB reserved", m.bytes.as_gib()),
                MemoryQuantity::NvidiaSmi => format!("{:.0} GB nvidia-smi", m.bytes.get() / 1e9),
            },
            None if c.oom => "OOM".into(),
            None => "-".into(),
        };
        t.row(vec![
            c.id.clone(),
            c.gpu.clone(),
            c.precision.name().to_string(),
            c.seq.to_string(),
            c.measured_tokens_per_s_per_gpu.map_or("-".into(), fmt_rate),
            fmt_rate(c.estimated_tokens_per_s_per_gpu),
            signed(c.time_error()),
            signed(c.sim_error()),
            measured_mem,
            format!("{:.1} GiB", c.estimated_memory.as_gib()),
            signed(c.memory_error()),
            c.verdict().to_string(),
        ]);
    }
    let mut o = t.render();
    let summary = |errs: Vec<f64>| match median_p90(&errs) {
        Some((m, p)) => format!(
            "median |error| {}, p90 {} over {}",
            pct(m),
            pct(p),
            errs.len()
        ),
        None => "no rows".to_string(),
    };
    let ooms = rows.iter().filter(|c| c.oom).count();
    let caught = rows.iter().filter(|c| c.oom && !c.fits).count();
    let _ = writeln!(
        o,
        "\nthroughput: {}\nsimulation: {}\nmemory: {}\nout of memory: {caught} of {ooms} predicted",
        summary(rows.iter().filter_map(|c| c.time_error()).collect()),
        summary(rows.iter().filter_map(|c| c.sim_error()).collect()),
        summary(rows.iter().filter_map(|c| c.memory_error()).collect()),
    );
    for (id, line, why) in skipped {
        let _ = writeln!(o, "not checked: {id} (line {line}): {why}");
    }
    o
}

/// `hetplan profile compare`: each sample, measured beside the model, and the median error.
pub fn profile_checks(checks: &[hetplan::cost::profiled::SampleCheck]) -> String {
    let ms = |s: Seconds| format!("{:.3}", s.get() * 1e3);
    let mib = |b: Bytes| format!("{:.1}", b.get() / (1u64 << 20) as f64);
    let signed = |x: f64| format!("{:+.1}%", 100.0 * x);
    let mut t = Table::new(&[
        ("gpu", Align::Left),
        ("seq", Align::Right),
        ("layer", Align::Left),
        ("tp", Align::Right),
        ("ep", Align::Right),
        ("mbs", Align::Right),
        ("fwd ms", Align::Right),
        ("model", Align::Right),
        ("bwd ms", Align::Right),
        ("model", Align::Right),
        ("time err", Align::Right),
        ("act MiB", Align::Right),
        ("model", Align::Right),
        ("act err", Align::Right),
        ("peak MiB", Align::Right),
    ]);
    for c in checks {
        t.row(vec![
            c.gpu.clone(),
            c.seq_len.to_string(),
            c.layer.clone(),
            c.tp.to_string(),
            c.ep.to_string(),
            c.mbs.to_string(),
            ms(c.measured_forward),
            ms(c.model_forward),
            ms(c.measured_backward),
            ms(c.model_backward),
            signed(c.time_error()),
            c.measured_activations.map_or("-".into(), mib),
            mib(c.model_activations),
            c.activation_error().map_or("-".into(), signed),
            c.measured_peak.map_or("-".into(), mib),
        ]);
    }
    let median = |mut xs: Vec<f64>| -> Option<f64> {
        xs.sort_by(f64::total_cmp);
        (!xs.is_empty()).then(|| xs[xs.len() / 2])
    };
    let mut out = t.render();
    let time = median(checks.iter().map(|c| c.time_error().abs()).collect());
    let act = median(
        checks
            .iter()
            .filter_map(|c| c.activation_error())
            .map(f64::abs)
            .collect(),
    );
    let _ = writeln!(
        out,
        "\n{} samples; median |time error| {}, median |activation error| {} \
         (error: model over measured, minus one; forward + backward)",
        checks.len(),
        time.map_or("-".into(), pct),
        act.map_or("-".into(), pct),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_rates() {
        assert_eq!(fmt_count(174.6e9), "174.6B");
        assert_eq!(fmt_count(125_000_000.0), "125.0M");
        assert_eq!(fmt_rate(1234567.4), "1,234,567");
        assert_eq!(fmt_rate(123.0), "123");
        assert_eq!(fmt_rate(12.345), "12.35");
        assert_eq!(pct(0.4567), "45.7%");
    }

    #[test]
    fn tables_align() {
        let mut t = Table::new(&[("a", Left), ("bb", Right)]);
        t.row(vec!["xyz".into(), "1".into()]);
        assert_eq!(t.render(), "a    bb\n---  --\nxyz   1\n");
    }
}
