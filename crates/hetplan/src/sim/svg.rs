//! A Gantt chart of a simulated iteration as SVG.
//!
//! One row per GPU; above [`MAX_GPU_ROWS`] GPUs one per executor (a DP replica of a stage,
//! labelled with its device range: the GPUs of a TP group move in lock step); above
//! [`MAX_EXECUTOR_ROWS`] executors one per pipeline stage, showing one of its replicas (the one
//! with most time on the critical path, else the one that finished last). Boxes are coloured by
//! activity, with the micro-batch number inside where it fits; the gaps are waiting (for other
//! stages or for a transfer). Above them, a row with every task of the critical path (what the
//! end of the iteration waited for, back to the start); its boxes are also outlined where they
//! appear in the other rows. Below, one row per link with the flows that crossed it — sends,
//! gradient reduction, ZeRO, offload: the links that carry the critical path's transfers (at
//! most [`MAX_PATH_LINK_ROWS`]), then the busiest others, [`MAX_LINK_ROWS`] rows in all when
//! the path needs no more. Text is never smaller than [`MIN_FONT`] px: many rows make a taller
//! chart, not smaller text. A time axis, a legend and captions saying what a row stands for.
//! Plain SVG (rect, text, line), deterministic: coordinates are written with one decimal.

use super::build::Direction;
use super::trace::{depth, lanes, multi_replica, resource_name, span_name, Kind};
use super::{Label, Resource, Simulation, Span};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Above this many GPUs, one row per executor instead of one per GPU.
pub const MAX_GPU_ROWS: usize = 64;
/// Above this many executors, one row per pipeline stage instead of one per executor.
pub const MAX_EXECUTOR_ROWS: usize = 128;
/// Link rows: the critical path's, then the busiest up to this many in all.
pub const MAX_LINK_ROWS: usize = 32;
/// At most this many link rows are chosen for the critical path's transfers.
pub const MAX_PATH_LINK_ROWS: usize = 64;
/// The smallest font size, px.
pub const MIN_FONT: f64 = 9.0;
/// Overlapping flows on a link are drawn in at most this many lanes.
const MAX_LANES: usize = 4;

const PLOT_W: f64 = 1200.0;
const MARGIN: f64 = 16.0;
const FONT: f64 = 11.0;
const BACKGROUND: &str = "#eeeeee";
/// The outline of the critical path.
const PATH_INK: &str = "#000000";

fn colour(k: Kind) -> (&'static str, &'static str) {
    // (fill, text on it)
    match k {
        Kind::Forward => ("#4e79a7", "#ffffff"),
        Kind::Backward => ("#59a14f", "#ffffff"),
        Kind::Optimizer => ("#b07aa1", "#ffffff"),
        Kind::SendActivations => ("#e15759", "#ffffff"),
        Kind::SendGradients => ("#ff9da7", "#000000"),
        Kind::GradSync => ("#f28e2b", "#000000"),
        Kind::ParamGather => ("#edc948", "#000000"),
        Kind::ZeroGather => ("#76b7b2", "#000000"),
        Kind::ZeroScatter => ("#9c755f", "#ffffff"),
        Kind::TpAllReduce => ("#d37295", "#ffffff"),
        Kind::EpAllToAll => ("#8cd17d", "#000000"),
        Kind::CpComm => ("#86bcb6", "#000000"),
        Kind::Offload => ("#79706e", "#ffffff"),
        Kind::TiedSync => ("#b6992d", "#000000"),
    }
}

/// Escapes text for XML content and attribute values.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c => o.push(c),
        }
    }
    o
}

/// A coordinate with one decimal (no `-0.0`).
fn c(x: f64) -> String {
    let r = (x * 10.0).round() / 10.0;
    if r == 0.0 {
        "0".into()
    } else if r == r.trunc() {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// Approximate width of `n` characters of the monospace font at size `fs`.
fn text_w(n: usize, fs: f64) -> f64 {
    n as f64 * fs * 0.6
}

/// The time axis: unit and tick step.
struct Axis {
    factor: f64,
    unit: &'static str,
    step: f64,
    decimals: usize,
}

impl Axis {
    fn new(t: f64) -> Axis {
        let (factor, unit) = if t >= 1.0 {
            (1.0, "s")
        } else if t >= 1e-3 {
            (1e3, "ms")
        } else {
            (1e6, "µs")
        };
        let raw = t * factor / 8.0;
        let mag = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|m| m * mag)
            .find(|&s| s >= raw * (1.0 - 1e-9))
            .unwrap_or(10.0 * mag);
        let exp = (step.log10() + 1e-9).floor() as i32;
        Axis {
            factor,
            unit,
            step: step / factor,
            decimals: (-exp).max(0) as usize,
        }
    }

    fn fmt(&self, s: f64) -> String {
        format!("{:.*}", self.decimals, s * self.factor)
    }

    /// A time for a tooltip, in the axis unit with three more decimals.
    fn fmt_fine(&self, s: f64) -> String {
        format!("{:.*}", self.decimals + 3, s * self.factor)
    }
}

/// A box to draw: one span or consecutive spans of the same thing merged.
struct Bar {
    start: f64,
    end: f64,
    kind: Kind,
    lane: usize,
    text: Option<String>,
    tip: String,
    parts: usize,
    /// An odd model chunk of an interleaved stage: drawn lighter.
    light: bool,
}

/// What merges with what: the same activity of the same micro-batch and stage.
type MergeKey = (Kind, Option<u64>, Option<usize>);

fn merge_key(l: &Label) -> MergeKey {
    let k = Kind::of(l);
    match l {
        Label::Compute { stage, mb, .. } => (k, Some(*mb), Some(*stage)),
        Label::Optimizer { stage, .. } => (k, None, Some(*stage)),
        Label::Send { from_stage, mb, .. } => (k, Some(*mb), Some(*from_stage)),
        Label::GradSync { stage, .. } | Label::ParamGather { stage, .. } => (k, None, Some(*stage)),
        Label::ZeroGather { stage, mb, .. }
        | Label::ZeroScatter { stage, mb, .. }
        | Label::TpAllReduce { stage, mb, .. }
        | Label::EpAllToAll { stage, mb, .. }
        | Label::CpComm { stage, mb, .. }
        | Label::Offload { stage, mb, .. } => (k, Some(*mb), Some(*stage)),
        Label::TiedSync => (k, None, None),
    }
}

/// The number written inside a box, if any: the micro-batch.
fn bar_text(l: &Label) -> Option<String> {
    match l {
        Label::Compute { mb, .. } | Label::Send { mb, .. } | Label::Offload { mb, .. } => {
            Some(mb.to_string())
        }
        _ => None,
    }
}

/// A span's name without its layer (boxes merge a pass's layer slices).
fn base_name(sp: &Span, depth: usize, multi: bool) -> String {
    let name = span_name(sp, depth, multi);
    match &sp.label {
        Label::Compute {
            stage,
            replica,
            layer,
            ..
        } => {
            let name = match layer {
                Some(_) => name.split(" L").next().unwrap_or(&name).to_string(),
                None => name,
            };
            format!("{name} stage {stage} replica {replica}")
        }
        Label::Optimizer { stage, replica } => format!("optimizer stage {stage} replica {replica}"),
        _ => name,
    }
}

/// Boxes of spans on one row (in start order), merging consecutive ones of the same activity
/// closer than `gap` seconds, on the lanes given.
fn bars(spans: &[(&Span, usize)], gap: f64, axis: &Axis, depth: usize, multi: bool) -> Vec<Bar> {
    let mut out: Vec<Bar> = Vec::new();
    // Last bar of each lane, to merge into.
    let mut last_of_lane: Vec<Option<usize>> = Vec::new();
    let mut last_key: Vec<Option<MergeKey>> = Vec::new();
    for &(sp, lane) in spans {
        if last_of_lane.len() <= lane {
            last_of_lane.resize(lane + 1, None);
            last_key.resize(lane + 1, None);
        }
        let key = merge_key(&sp.label);
        if let Some(b) = last_of_lane[lane] {
            if last_key[lane] == Some(key) && sp.start_s - out[b].end <= gap {
                out[b].end = out[b].end.max(sp.end_s);
                out[b].parts += 1;
                continue;
            }
        }
        last_of_lane[lane] = Some(out.len());
        last_key[lane] = Some(key);
        out.push(Bar {
            start: sp.start_s,
            end: sp.end_s,
            kind: Kind::of(&sp.label),
            lane,
            text: bar_text(&sp.label),
            tip: base_name(sp, depth, multi),
            parts: 1,
            light: match sp.label {
                Label::Compute { stage, .. } => depth > 0 && (stage / depth) % 2 == 1,
                _ => false,
            },
        });
    }
    for b in &mut out {
        if b.parts > 1 {
            b.tip.push_str(&format!(" ({} parts)", b.parts));
        }
        b.tip.push_str(&format!(
            ": {}–{} {}",
            axis.fmt_fine(b.start),
            axis.fmt_fine(b.end),
            axis.unit
        ));
    }
    out
}

/// One row of the chart.
struct Row {
    label: String,
    bars: Vec<Bar>,
    lanes: usize,
    /// Stretches of the critical path on this row, `(lane, start, end)`: outlined.
    critical: Vec<(usize, f64, f64)>,
}

/// What a row of compute stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grouping {
    /// One row per GPU.
    Gpu,
    /// One row per executor: a DP replica of a stage, its TP group's GPUs in lock step.
    Executor,
    /// One row per pipeline stage, showing one of its DP replicas.
    Stage,
}

fn grouping(n_gpus: usize, n_executors: usize) -> Grouping {
    if n_gpus <= MAX_GPU_ROWS {
        Grouping::Gpu
    } else if n_executors <= MAX_EXECUTOR_ROWS {
        Grouping::Executor
    } else {
        Grouping::Stage
    }
}

/// What the chart draws, row by row (times in seconds; the SVG is this, placed).
struct Layout {
    grouping: Grouping,
    /// Compute rows: per GPU, executor or stage.
    rows: Vec<Row>,
    /// Every task on the critical path, in time order.
    path: Row,
    /// Link rows, in display order.
    links: Vec<Row>,
    /// Links some flow crossed.
    n_links: usize,
    /// Link rows chosen for the critical path's flows (the rest are the busiest).
    path_links: usize,
    /// Flows on the critical path that cross no link drawn (past `MAX_PATH_LINK_ROWS`).
    path_flows_off: usize,
    /// The most replicas a stage has.
    max_replicas: usize,
}

/// `n0g0..n0g7` or `n0g0`.
fn device_range(devices: &[crate::cluster::GpuId]) -> String {
    match (devices.first(), devices.last()) {
        (Some(a), Some(b)) if devices.len() > 1 => format!("{a}..{b}"),
        (Some(a), _) => a.to_string(),
        _ => String::new(),
    }
}

/// Time during which at least one of the intervals is active.
fn busy_time(intervals: &mut [(f64, f64)]) -> f64 {
    intervals.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut total = 0.0;
    let mut cur: Option<(f64, f64)> = None;
    for &(s, e) in intervals.iter() {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    if let Some((cs, ce)) = cur {
        total += ce - cs;
    }
    total
}

/// Orders resources for display: GPU links by GPU, then networks by node, then host links.
fn resource_order(r: &Resource) -> (u8, u64, u64, u8) {
    let d = |d: &Direction| match d {
        Direction::Out => 0,
        Direction::In => 1,
    };
    match r {
        Resource::GpuLink { gpu, direction } => {
            (0, gpu.node as u64, gpu.local as u64, d(direction))
        }
        Resource::Nic { node, direction } => (1, *node as u64, 0, d(direction)),
        Resource::Route { from, to } => (2, *from as u64, *to as u64, 0),
        Resource::HostLink { gpu } => (3, gpu.node as u64, gpu.local as u64, 0),
    }
}

/// The link rows: first, greedily, links that carry the critical path's flows (each pick the
/// link crossed by most of those not yet on a row, then the busiest, then the first), at most
/// [`MAX_PATH_LINK_ROWS`]; then the busiest others up to [`MAX_LINK_ROWS`] in all. Returns the
/// chosen resources (unordered), how many were chosen for the path, and how many of the path's
/// flows cross none of them.
fn choose_links(
    sim: &Simulation,
    busy: &[f64],
    used: &[usize],
    path_flows: &[usize],
) -> (Vec<usize>, usize, usize) {
    let n_res = busy.len();
    let mut chosen: Vec<usize> = Vec::new();
    let mut is_chosen = vec![false; n_res];
    let mut left: Vec<usize> = path_flows.to_vec();
    let mut count = vec![0usize; n_res];
    while !left.is_empty() && chosen.len() < MAX_PATH_LINK_ROWS {
        count.iter_mut().for_each(|c| *c = 0);
        for &i in &left {
            for &r in &sim.spans[i].resources {
                if r < n_res {
                    count[r] += 1;
                }
            }
        }
        let best = (0..n_res).filter(|&r| count[r] > 0).max_by(|&a, &b| {
            count[a]
                .cmp(&count[b])
                .then(busy[a].total_cmp(&busy[b]))
                .then(b.cmp(&a))
        });
        let Some(r) = best else { break };
        chosen.push(r);
        is_chosen[r] = true;
        left.retain(|&i| !sim.spans[i].resources.contains(&r));
    }
    let for_path = chosen.len();
    let mut rest: Vec<usize> = used.iter().copied().filter(|&r| !is_chosen[r]).collect();
    rest.sort_by(|&a, &b| busy[b].total_cmp(&busy[a]).then(a.cmp(&b)));
    let room = MAX_LINK_ROWS.saturating_sub(chosen.len());
    chosen.extend(rest.into_iter().take(room));
    (chosen, for_path, left.len())
}

/// Stretches of the critical path among spans `(span, lane)`, merging those on the same lane
/// closer than `gap` seconds.
fn outline(
    sim: &Simulation,
    on_path: &[bool],
    spans: &[(usize, usize)],
    gap: f64,
) -> Vec<(usize, f64, f64)> {
    let mut v: Vec<(usize, f64, f64)> = spans
        .iter()
        .filter(|&&(i, _)| on_path[i])
        .map(|&(i, l)| (l, sim.spans[i].start_s, sim.spans[i].end_s))
        .collect();
    v.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then(a.1.total_cmp(&b.1))
            .then(a.2.total_cmp(&b.2))
    });
    let mut out: Vec<(usize, f64, f64)> = Vec::new();
    for (l, s, e) in v {
        match out.last_mut() {
            Some(last) if last.0 == l && s - last.2 <= gap => last.2 = last.2.max(e),
            _ => out.push((l, s, e)),
        }
    }
    out
}

/// The rows of the chart of `sim`; `gap` seconds is what merges neighbouring boxes.
fn layout(sim: &Simulation, axis: &Axis, gap: f64) -> Layout {
    let depth = depth(sim);
    let multi = multi_replica(sim);
    let n_gpus: usize = sim.executors.iter().map(|e| e.devices.len()).sum();
    let grouping = grouping(n_gpus, sim.executors.len());
    let n_spans = sim.spans.len();
    let path_spans: Vec<usize> = sim
        .critical_spans
        .iter()
        .copied()
        .filter(|&i| i < n_spans)
        .collect();
    let mut on_path = vec![false; n_spans];
    for &i in &path_spans {
        on_path[i] = true;
    }
    let bars_of = |spans: &[(usize, usize)]| {
        let refs: Vec<(&Span, usize)> = spans.iter().map(|&(i, l)| (&sim.spans[i], l)).collect();
        bars(&refs, gap, axis, depth, multi)
    };

    // Compute rows.
    let mut by_exec: Vec<Vec<(usize, usize)>> = vec![Vec::new(); sim.executors.len()];
    for (i, sp) in sim.spans.iter().enumerate() {
        if let Some(v) = sp.executor.and_then(|e| by_exec.get_mut(e)) {
            v.push((i, 0));
        }
    }
    for v in &mut by_exec {
        v.sort_by(|a, b| sim.spans[a.0].start_s.total_cmp(&sim.spans[b.0].start_s));
    }
    let mut stages: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (e, ex) in sim.executors.iter().enumerate() {
        stages.entry(ex.stage).or_default().push(e);
    }
    let max_replicas = stages.values().map(Vec::len).max().unwrap_or(0);
    // The executors shown, with the replicas of their stage.
    let shown: Vec<(usize, usize)> = match grouping {
        Grouping::Gpu | Grouping::Executor => (0..sim.executors.len()).map(|e| (e, 1)).collect(),
        Grouping::Stage => stages
            .values()
            .filter_map(|es| {
                // The replica with most time on the critical path, else the last to finish.
                let on = |e: usize| -> f64 {
                    by_exec[e]
                        .iter()
                        .filter(|&&(i, _)| on_path[i])
                        .map(|&(i, _)| sim.spans[i].end_s - sim.spans[i].start_s)
                        .sum()
                };
                let last = |e: usize| {
                    by_exec[e]
                        .iter()
                        .map(|&(i, _)| sim.spans[i].end_s)
                        .fold(f64::NEG_INFINITY, f64::max)
                };
                let best = es.iter().copied().max_by(|&a, &b| {
                    on(a)
                        .total_cmp(&on(b))
                        .then(last(a).total_cmp(&last(b)))
                        .then(b.cmp(&a))
                })?;
                Some((best, es.len()))
            })
            .collect(),
    };
    let mut rows: Vec<Row> = Vec::new();
    for &(e, replicas) in &shown {
        let ex = &sim.executors[e];
        let spans = &by_exec[e];
        let suffix = format!("s{} r{}", ex.stage, ex.replica);
        let mut row = |label: String| {
            rows.push(Row {
                label,
                bars: bars_of(spans),
                lanes: 1,
                critical: outline(sim, &on_path, spans, gap),
            })
        };
        match grouping {
            Grouping::Gpu => {
                for g in &ex.devices {
                    row(format!("{g} {suffix}"));
                }
            }
            Grouping::Executor => row(format!("{} {suffix}", device_range(&ex.devices))),
            Grouping::Stage => row(format!(
                "{} {suffix} of {replicas}",
                device_range(&ex.devices)
            )),
        }
    }

    // The critical path: a chain, one task after the other.
    let chain: Vec<(usize, usize)> = path_spans.iter().map(|&i| (i, 0)).collect();
    let path = Row {
        label: "critical path".into(),
        bars: bars_of(&chain),
        lanes: 1,
        critical: Vec::new(),
    };

    // Link rows.
    let n_res = sim.resources.len();
    let mut on_resource: Vec<Vec<usize>> = vec![Vec::new(); n_res];
    for (i, sp) in sim.spans.iter().enumerate() {
        for &r in &sp.resources {
            if let Some(v) = on_resource.get_mut(r) {
                v.push(i);
            }
        }
    }
    let busy: Vec<f64> = on_resource
        .iter()
        .map(|v| {
            let mut iv: Vec<(f64, f64)> = v
                .iter()
                .map(|&i| (sim.spans[i].start_s, sim.spans[i].end_s))
                .collect();
            busy_time(&mut iv)
        })
        .collect();
    let used: Vec<usize> = (0..n_res).filter(|&r| !on_resource[r].is_empty()).collect();
    let path_flows: Vec<usize> = path_spans
        .iter()
        .copied()
        .filter(|&i| sim.spans[i].executor.is_none() && !sim.spans[i].resources.is_empty())
        .collect();
    let (mut chosen, path_links, path_flows_off) = choose_links(sim, &busy, &used, &path_flows);
    chosen.sort_by(|&a, &b| {
        resource_order(&sim.resources[a])
            .cmp(&resource_order(&sim.resources[b]))
            .then(a.cmp(&b))
    });
    let t_end = axis_end(sim);
    let mut links: Vec<Row> = Vec::new();
    for &r in &chosen {
        let mut spans = on_resource[r].clone();
        spans.sort_by(|&a, &b| sim.spans[a].start_s.total_cmp(&sim.spans[b].start_s));
        let iv: Vec<(f64, f64)> = spans
            .iter()
            .map(|&i| (sim.spans[i].start_s, sim.spans[i].end_s))
            .collect();
        let (lane, n) = lanes(&iv);
        let n = n.clamp(1, MAX_LANES);
        let with_lanes: Vec<(usize, usize)> = spans
            .iter()
            .zip(&lane)
            .map(|(&i, &l)| (i, l.min(MAX_LANES - 1)))
            .collect();
        links.push(Row {
            label: {
                let p = busy[r] / t_end * 100.0;
                let d = if p < 9.95 { 1 } else { 0 };
                format!("{} {p:.d$}%", resource_name(&sim.resources[r]))
            },
            bars: bars_of(&with_lanes),
            lanes: n,
            critical: outline(sim, &on_path, &with_lanes, gap),
        });
    }
    Layout {
        grouping,
        rows,
        path,
        links,
        n_links: used.len(),
        path_links,
        path_flows_off,
        max_replicas,
    }
}

/// The end of the time axis: the iteration, or the last span if later (1 s when there is none).
fn axis_end(sim: &Simulation) -> f64 {
    let t_end = sim
        .spans
        .iter()
        .map(|s| s.end_s)
        .fold(sim.iteration_time_s, f64::max);
    if t_end > 0.0 && t_end.is_finite() {
        t_end
    } else {
        1.0
    }
}

/// `text` in lines of at most `max` characters, broken between words (a longer word alone).
fn wrap(text: &str, max: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > max {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// What a legend entry shows.
enum Swatch {
    Kind(Kind),
    Gap,
    Path,
}

/// The simulation as an SVG Gantt chart.
pub fn gantt_svg(sim: &Simulation) -> String {
    let t_end = axis_end(sim);
    let axis = Axis::new(t_end);
    let px = PLOT_W / t_end;
    let gap = 0.5 / px;
    let depth = depth(sim);
    let n_gpus: usize = sim.executors.iter().map(|e| e.devices.len()).sum();
    let Layout {
        grouping,
        rows,
        path,
        links: link_rows,
        n_links,
        path_links,
        path_flows_off,
        max_replicas,
    } = layout(sim, &axis, gap);

    // Geometry: text never below MIN_FONT; many rows make a taller chart, not smaller text.
    let n_rows = rows.len() + 1 + link_rows.len();
    let (row_h, row_gap, fs) = if n_rows <= 40 {
        (18.0, 4.0, FONT)
    } else {
        (13.0, 2.0, MIN_FONT)
    };
    let label_chars = rows
        .iter()
        .chain(&link_rows)
        .chain(std::iter::once(&path))
        .map(|r| r.label.chars().count())
        .max()
        .unwrap_or(0);
    let label_w = (text_w(label_chars, fs) + 12.0).max(80.0);
    let x0 = MARGIN + label_w;
    let width = x0 + PLOT_W + 40.0;
    let x_of = |t: f64| x0 + t * px;

    // Legend entries: the activities present, the gap, the critical path.
    let mut legend: Vec<(Swatch, String)> = Kind::ALL
        .iter()
        .copied()
        .filter(|k| sim.spans.iter().any(|s| Kind::of(&s.label) == *k))
        .map(|k| (Swatch::Kind(k), k.description().to_string()))
        .collect();
    legend.push((Swatch::Gap, "waiting (gap)".into()));
    legend.push((Swatch::Path, "on the critical path".into()));
    let mut legend_pos = Vec::new();
    let (mut lx, mut ly) = (MARGIN, 0.0);
    for (_, text) in &legend {
        let w = 18.0 + text_w(text.chars().count(), FONT) + 18.0;
        if lx + w > width - MARGIN && lx > MARGIN {
            lx = MARGIN;
            ly += 18.0;
        }
        legend_pos.push((lx, ly));
        lx += w;
    }

    let mut y = MARGIN;
    let title_y = y + 14.0;
    let sub_y = title_y + 18.0;
    let legend_y = sub_y + 14.0;
    y = legend_y + ly + 18.0 + 10.0;
    let axis_label_y = y + 10.0;
    let path_y = axis_label_y + 6.0;
    let rows_top = path_y + row_h + row_gap + 8.0;
    let row_y = |i: usize| rows_top + i as f64 * (row_h + row_gap);
    let rows_bottom = row_y(rows.len());
    let links_head_y = rows_bottom + 16.0;
    let links_top = if link_rows.is_empty() {
        rows_bottom
    } else {
        links_head_y + 8.0
    };
    let link_y = |i: usize| links_top + i as f64 * (row_h + row_gap);
    let plot_bottom = link_y(link_rows.len());
    let bottom_labels_y = plot_bottom + 12.0;
    let axis_title_y = bottom_labels_y + 16.0;
    let mut captions: Vec<String> = Vec::new();
    let waiting =
        "a gap is waiting: for other stages (the pipeline bubble) or for a transfer it needs.";
    captions.push(match grouping {
        Grouping::Gpu => format!("Each row is a GPU's timeline; {waiting}"),
        Grouping::Executor => format!(
            "{n_gpus} GPUs: one row per executor (a DP replica of a stage: its TP group's GPUs \
             run in lock step), labelled with its GPUs; {waiting}"
        ),
        Grouping::Stage => format!(
            "{n_gpus} GPUs in {} executors: one row per pipeline stage, showing one of its DP \
             replicas (\"r3 of {max_replicas}\"): the one with most time on the critical path, \
             else the one that finished last; {waiting}",
            sim.executors.len()
        ),
    });
    if depth > 0
        && sim
            .spans
            .iter()
            .any(|s| matches!(s.label, Label::Compute { stage, .. } if stage >= depth))
    {
        captions.push(
            "Interleaved schedule: a stage's odd model chunks are drawn lighter (hover over a box \
             for its chunk)."
                .into(),
        );
    }
    captions.push(
        "Critical path: the chain of tasks the end of the iteration waited for, back to the \
         start, every task of it in the top row; outlined boxes in the other rows are on it."
            .into(),
    );
    if !link_rows.is_empty() {
        let mut s = "Link rows: the flows that crossed each link (overlapping flows share it, one \
                     lane each); the percentage is the time the link was busy."
            .to_string();
        if n_links > link_rows.len() {
            s.push_str(&format!(
                " Showing {} of {n_links} links: {path_links} for the critical path's \
                 transfers, the others the busiest.",
                link_rows.len()
            ));
        }
        if path_flows_off > 0 {
            s.push_str(&format!(
                " {path_flows_off} transfers of the critical path cross links not shown: they \
                 are in its row."
            ));
        }
        captions.push(s);
    }
    let per_line = ((width - 2.0 * MARGIN) / text_w(1, FONT)).floor() as usize;
    let captions: Vec<String> = captions.iter().flat_map(|p| wrap(p, per_line)).collect();
    let captions_y = axis_title_y + 20.0;
    let height = captions_y + captions.len() as f64 * 15.0 + MARGIN;

    let mut o = String::new();
    let _ = writeln!(
        o,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\" \
         font-size=\"{f}\">",
        w = c(width),
        h = c(height),
        f = c(FONT)
    );
    let _ = writeln!(
        o,
        "<title>hetplan simulation: iteration {} {}</title>",
        axis.fmt_fine(t_end),
        axis.unit
    );
    let _ = writeln!(
        o,
        "<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>",
        c(width),
        c(height)
    );
    // Title and summary.
    let _ = writeln!(
        o,
        "<text x=\"{}\" y=\"{}\" font-size=\"14\" font-weight=\"bold\">{}</text>",
        c(MARGIN),
        c(title_y),
        esc(&format!(
            "Simulated iteration: {} {}",
            axis.fmt_fine(t_end),
            axis.unit
        ))
    );
    let _ = writeln!(
        o,
        "<text x=\"{}\" y=\"{}\">{}</text>",
        c(MARGIN),
        c(sub_y),
        esc(&format!(
            "{n_gpus} GPUs in {} executors, {} tasks · bubble {:.1}% · {:.0} tokens/s per GPU",
            sim.executors.len(),
            sim.tasks,
            sim.bubble_fraction * 100.0,
            sim.tokens_per_s_per_gpu
        ))
    );
    // Legend.
    for ((swatch, text), &(lx, ly)) in legend.iter().zip(&legend_pos) {
        let (fill, stroke, sw) = match swatch {
            Swatch::Kind(k) => (colour(*k).0, "#999999", "0.5"),
            Swatch::Gap => (BACKGROUND, "#999999", "0.5"),
            Swatch::Path => ("#ffffff", PATH_INK, "1.5"),
        };
        let _ = writeln!(
            o,
            "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{fill}\" stroke=\"{stroke}\" \
             stroke-width=\"{sw}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            c(lx),
            c(legend_y + ly),
            c(lx + 17.0),
            c(legend_y + ly + 10.0),
            esc(text)
        );
    }
    // Row backgrounds and labels.
    let row_label = |o: &mut String, y: f64, label: &str, bold: bool| {
        let _ = writeln!(
            o,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{BACKGROUND}\"/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"{}\"{}>{}</text>",
            c(x0),
            c(y),
            c(PLOT_W),
            c(row_h),
            c(x0 - 6.0),
            c(y + row_h / 2.0 + fs * 0.35),
            c(fs),
            if bold { " font-weight=\"bold\"" } else { "" },
            esc(label)
        );
    };
    row_label(&mut o, path_y, &path.label, true);
    for (i, r) in rows.iter().enumerate() {
        row_label(&mut o, row_y(i), &r.label, false);
    }
    if !link_rows.is_empty() {
        let _ = writeln!(
            o,
            "<text x=\"{}\" y=\"{}\" font-weight=\"bold\">links</text>",
            c(MARGIN),
            c(links_head_y)
        );
    }
    for (i, r) in link_rows.iter().enumerate() {
        row_label(&mut o, link_y(i), &r.label, false);
    }
    // Grid and axis.
    let mut k = 0u64;
    loop {
        let t = k as f64 * axis.step;
        if t > t_end * (1.0 + 1e-9) {
            break;
        }
        let x = x_of(t);
        let _ = writeln!(
            o,
            "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"#cccccc\" stroke-width=\"0.5\"/>\
             <text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{t_label}</text>\
             <text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{t_label}</text>",
            c(path_y - 3.0),
            c(plot_bottom),
            c(axis_label_y),
            c(bottom_labels_y),
            x = c(x),
            t_label = axis.fmt(t)
        );
        k += 1;
    }
    let _ = writeln!(
        o,
        "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"#333333\" stroke-width=\"1\"/>",
        c(path_y - 3.0),
        c(plot_bottom),
        x = c(x_of(t_end))
    );
    let _ = writeln!(
        o,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">time ({})</text>",
        c(x0 + PLOT_W / 2.0),
        c(axis_title_y),
        axis.unit
    );
    // Boxes.
    let drawn_w = |w: f64| if w > 3.0 { w - 1.0 } else { w };
    let draw = |o: &mut String, y: f64, r: &Row| {
        let lane_h = row_h / r.lanes as f64;
        for b in &r.bars {
            let x = x_of(b.start);
            // A hairline between boxes that touch.
            let w_drawn = drawn_w(((b.end - b.start) * px).max(0.5));
            let by = y + b.lane as f64 * lane_h;
            let (fill, ink) = colour(b.kind);
            let ink = if b.light { "#000000" } else { ink };
            let _ = write!(
                o,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{fill}\"{}><title>{}</title></rect>",
                c(x),
                c(by),
                c(w_drawn),
                c(lane_h),
                if b.light { " fill-opacity=\"0.6\"" } else { "" },
                esc(&b.tip)
            );
            // Text inside a box only where MIN_FONT fits.
            let tfs = (lane_h - 4.0).min(fs - 1.0).max(MIN_FONT);
            if let Some(t) = &b.text {
                if lane_h - 4.0 >= MIN_FONT && text_w(t.chars().count(), tfs) + 4.0 <= w_drawn {
                    let _ = write!(
                        o,
                        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"{}\" fill=\"{ink}\">{}</text>",
                        c(x + w_drawn / 2.0),
                        c(by + lane_h / 2.0 + tfs * 0.35),
                        c(tfs),
                        esc(t)
                    );
                }
            }
            o.push('\n');
        }
    };
    draw(&mut o, path_y, &path);
    for (i, r) in rows.iter().enumerate() {
        draw(&mut o, row_y(i), r);
    }
    for (i, r) in link_rows.iter().enumerate() {
        draw(&mut o, link_y(i), r);
    }
    // The critical path outlined where it runs, over the boxes.
    let draw_outline = |o: &mut String, y: f64, r: &Row| {
        let lane_h = row_h / r.lanes as f64;
        for &(lane, s, e) in &r.critical {
            let _ = writeln!(
                o,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" \
                 stroke=\"{PATH_INK}\" stroke-width=\"1.5\"/>",
                c(x_of(s)),
                c(y + lane as f64 * lane_h),
                c(drawn_w(((e - s) * px).max(1.0))),
                c(lane_h)
            );
        }
    };
    for (i, r) in rows.iter().enumerate() {
        draw_outline(&mut o, row_y(i), r);
    }
    for (i, r) in link_rows.iter().enumerate() {
        draw_outline(&mut o, link_y(i), r);
    }
    // Captions.
    for (i, cap) in captions.iter().enumerate() {
        let _ = writeln!(
            o,
            "<text x=\"{}\" y=\"{}\" fill=\"#444444\">{}</text>",
            c(MARGIN),
            c(captions_y + i as f64 * 15.0),
            esc(cap)
        );
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::trace::tests::small;

    /// A tiny well-formedness check: every tag closes, in order, and attributes are quoted.
    fn well_formed(s: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = s;
        while let Some(i) = rest.find('<') {
            let text = &rest[..i];
            assert!(!text.contains('>'), "stray > in {text:?}");
            let j = rest[i..].find('>').expect("tag closes") + i;
            let tag = &rest[i + 1..j];
            assert!(!tag.contains('<'), "< inside a tag: {tag}");
            assert_eq!(tag.matches('"').count() % 2, 0, "unbalanced quotes: {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().unwrap().to_string();
                stack.push(name);
            }
            rest = &rest[j + 1..];
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        // Entities are the five XML ones.
        for (k, _) in s.match_indices('&') {
            let ent = &s[k..s[k..].find(';').unwrap() + k + 1];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].contains(&ent),
                "{ent}"
            );
        }
    }

    /// Attribute `name` of a tag's text.
    fn attr(tag: &str, name: &str) -> Option<f64> {
        let k = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        tag[k..k + tag[k..].find('"')?].parse().ok()
    }

    /// Every `font-size` in the SVG.
    fn font_sizes(svg: &str) -> Vec<f64> {
        svg.match_indices("font-size=\"")
            .map(|(k, _)| {
                let v = &svg[k + 11..];
                v[..v.find('"').unwrap()].parse::<f64>().unwrap()
            })
            .collect()
    }

    /// The chart's height.
    fn svg_height(svg: &str) -> f64 {
        attr(&svg[..svg.find('>').unwrap()], "height").unwrap()
    }

    /// The time intervals of the boxes drawn (rects with a tooltip) whose top is not `skip_y`.
    fn drawn(sim: &Simulation, svg: &str, skip_y: Option<f64>) -> (Vec<(f64, f64)>, f64) {
        let t_end = sim
            .spans
            .iter()
            .map(|s| s.end_s)
            .fold(sim.iteration_time_s, f64::max);
        let px = PLOT_W / t_end;
        let bg = svg.find("fill=\"#eeeeee\"/>").unwrap();
        let bg_tag = &svg[svg[..bg].rfind("<rect").unwrap()..bg];
        let x0 = attr(bg_tag, "x").unwrap();
        let mut out = Vec::new();
        for (k, _) in svg.match_indices("<rect ") {
            let end = k + svg[k..].find('>').unwrap();
            if !svg[end + 1..].starts_with("<title>") {
                continue;
            }
            let tag = &svg[k..end];
            let (x, y, w) = (
                attr(tag, "x").unwrap(),
                attr(tag, "y").unwrap(),
                attr(tag, "width").unwrap(),
            );
            if skip_y.is_some_and(|s| (s - y).abs() < 0.05) {
                continue;
            }
            out.push(((x - x0) / px, (x + w - x0) / px));
        }
        out.sort_by(|a, b| a.0.total_cmp(&b.0));
        (out, 1.5 / px)
    }

    /// Seconds of the critical path that no drawn box covers (within `slack` either side), and
    /// the last uncovered stretch.
    fn path_not_drawn(
        sim: &Simulation,
        boxes: &[(f64, f64)],
        slack: f64,
    ) -> (f64, Option<(f64, f64)>) {
        let mut merged: Vec<(f64, f64)> = Vec::new();
        for &(s, e) in boxes {
            let (s, e) = (s - slack, e + slack);
            match merged.last_mut() {
                Some(m) if s <= m.1 => m.1 = m.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        let mut total = 0.0;
        let mut last = None;
        for &i in &sim.critical_spans {
            let (s, e) = (sim.spans[i].start_s, sim.spans[i].end_s);
            let mut t = s;
            for m in &merged {
                if m.1 <= t || m.0 >= e {
                    continue;
                }
                if m.0 > t {
                    total += m.0 - t;
                    last = Some((t, m.0));
                }
                t = t.max(m.1);
            }
            if t < e {
                total += e - t;
                last = Some((t, e));
            }
        }
        (total, last)
    }

    /// The y of the critical-path row: the first row background.
    fn path_row_y(svg: &str) -> f64 {
        let bg = svg.find("fill=\"#eeeeee\"/>").unwrap();
        attr(&svg[svg[..bg].rfind("<rect").unwrap()..bg], "y").unwrap()
    }

    /// gpt3-125m on the benches' 256-GPU cluster: 16 nodes of A100, 8 of V100, 8 of T4.
    const THREE_TYPES_256: &str = "16x8xa100-80gb+8x8xv100-32gb+8x8xt4@100Gbps";

    /// Executor rows (128 TP groups); with DeepSpeed the parameter all-gather after the
    /// optimizer step ends the iteration, on links that are not the busiest.
    const ZERO1_TP2: &str = "tp=2,pp=2,dp=64,mbs=1,gbs=128,zero=1";
    /// Stage rows (256 executors).
    const ZERO1_PP2: &str = "pp=2,dp=128,mbs=1,gbs=256,zero=1";
    /// One stage of 256 replicas, ZeRO-3 gathers and reduce-scatters.
    const ZERO3_DP256: &str = "dp=256,mbs=1,gbs=256,zero=3";

    #[test]
    fn at_256_gpus_text_is_at_least_9_px_and_the_chart_under_4000_px() {
        for (spec, grouping) in [
            (ZERO1_TP2, Grouping::Executor),
            (ZERO1_PP2, Grouping::Stage),
            (ZERO3_DP256, Grouping::Stage),
        ] {
            let sim = small(THREE_TYPES_256, spec);
            let svg = gantt_svg(&sim);
            well_formed(&svg);
            let sizes = font_sizes(&svg);
            assert!(sizes.len() > 3, "{spec}");
            for f in sizes {
                assert!(f >= MIN_FONT, "{spec}: font-size {f}");
            }
            assert!(svg.ends_with("</svg>\n"));
            let h = svg_height(&svg);
            assert!(h < 4000.0, "{spec}: height {h}");
            let l = layout(&sim, &Axis::new(axis_end(&sim)), 0.0);
            assert_eq!(l.grouping, grouping, "{spec}");
            assert_eq!(svg, gantt_svg(&sim), "{spec}: deterministic");
        }
    }

    #[test]
    fn one_row_per_stage_above_128_executors() {
        assert_eq!(grouping(64, 64), Grouping::Gpu);
        assert_eq!(grouping(65, 65), Grouping::Executor);
        assert_eq!(grouping(256, MAX_EXECUTOR_ROWS), Grouping::Executor);
        assert_eq!(grouping(256, MAX_EXECUTOR_ROWS + 1), Grouping::Stage);
        let sim = small(THREE_TYPES_256, ZERO1_PP2);
        let svg = gantt_svg(&sim);
        assert!(
            svg.contains("one row per pipeline stage"),
            "the caption says so"
        );
        let l = layout(&sim, &Axis::new(axis_end(&sim)), 0.0);
        assert_eq!(l.rows.len(), 2);
        for (s, r) in l.rows.iter().enumerate() {
            assert!(r.label.contains(&format!(" s{s} r")), "{}", r.label);
            assert!(r.label.ends_with(" of 128"), "{}", r.label);
            assert!(svg.contains(&format!(">{}</text>", r.label)));
        }
    }

    /// Whether `bars` cover `[s, e]` (to within `slack` seconds) on any lane.
    fn covers(bars: &[Bar], s: f64, e: f64, slack: f64) -> bool {
        let mut iv: Vec<(f64, f64)> = bars.iter().map(|b| (b.start, b.end)).collect();
        iv.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut t = s;
        for (bs, be) in iv {
            if bs <= t + slack && be > t {
                t = be;
            }
        }
        t >= e - slack
    }

    #[test]
    fn the_critical_path_is_always_drawn() {
        for spec in [ZERO1_TP2, ZERO1_PP2, ZERO3_DP256] {
            let sim = small(THREE_TYPES_256, spec);
            assert!(!sim.critical_spans.is_empty());
            let t_end = axis_end(&sim);
            let l = layout(&sim, &Axis::new(t_end), 0.5 * t_end / PLOT_W);
            let slack = 1e-12 * t_end;
            let mut flows = 0;
            for &i in &sim.critical_spans {
                let sp = &sim.spans[i];
                // In the critical-path row.
                assert!(
                    covers(&l.path.bars, sp.start_s, sp.end_s, slack),
                    "{spec}: {i}"
                );
                // A transfer on a row of a link it crosses, outlined there.
                if sp.executor.is_none() && !sp.resources.is_empty() {
                    flows += 1;
                    let on_a_link = sp.resources.iter().any(|&r| {
                        let name = format!("{} ", resource_name(&sim.resources[r]));
                        l.links.iter().any(|row| {
                            row.label.starts_with(&name)
                                && covers(&row.bars, sp.start_s, sp.end_s, slack)
                                && row.critical.iter().any(|&(_, s, e)| {
                                    s <= sp.start_s + slack && e >= sp.end_s - slack
                                })
                        })
                    });
                    assert!(on_a_link, "{spec}: {}", span_name(sp, 0, true));
                }
                // Compute on its executor's row, outlined there.
                if let (Some(e), Grouping::Executor) = (sp.executor, l.grouping) {
                    let row = &l.rows[e];
                    assert!(
                        covers(&row.bars, sp.start_s, sp.end_s, slack),
                        "{spec}: {i}"
                    );
                    assert!(row
                        .critical
                        .iter()
                        .any(|&(_, s, e)| s <= sp.start_s + slack && e >= sp.end_s - slack));
                }
            }
            assert!(flows > 0, "{spec}: transfers on the critical path");
            assert_eq!(l.path_flows_off, 0, "{spec}");

            // In the picture: no stretch of the critical path is left blank, neither with the
            // critical-path row nor, with a row per executor, without it.
            let svg = gantt_svg(&sim);
            let (boxes, px_slack) = drawn(&sim, &svg, None);
            assert_eq!(path_not_drawn(&sim, &boxes, px_slack).0, 0.0, "{spec}");
            if l.grouping == Grouping::Executor {
                let (boxes, px_slack) = drawn(&sim, &svg, Some(path_row_y(&svg)));
                let (blank, last) = path_not_drawn(&sim, &boxes, px_slack);
                assert_eq!(blank, 0.0, "{spec}: {last:?}");
            }
        }
    }

    #[test]
    fn the_last_transfer_of_the_iteration_has_its_link_row() {
        // Before: the parameter all-gather that ends the iteration crossed none of the 32
        // busiest links, and its 4.7 ms were drawn as nothing. DeepSpeed gathers after the
        // step (Megatron ahead of the next forward).
        let sim = small(THREE_TYPES_256, &format!("{ZERO1_TP2},engine=deepspeed"));
        let last = &sim.spans[*sim.critical_spans.last().unwrap()];
        assert!(matches!(last.label, Label::ParamGather { .. }));
        assert!((last.end_s - sim.iteration_time_s).abs() < 1e-12);
        let svg = gantt_svg(&sim);
        let l = layout(&sim, &Axis::new(axis_end(&sim)), 0.0);
        assert!(l.path_links > 0);
        assert!(l.links.len() <= MAX_PATH_LINK_ROWS.max(MAX_LINK_ROWS));
        assert!(svg.contains("for the critical path&apos;s transfers"));
        assert!(svg.contains(">critical path</text>"));
        assert!(
            svg.contains("stroke=\"#000000\" stroke-width=\"1.5\"/>"),
            "outlines"
        );
    }

    #[test]
    fn link_rows_for_the_critical_path_come_first_and_are_capped() {
        let sim = small(THREE_TYPES_256, ZERO3_DP256);
        let n = sim.resources.len();
        let busy: Vec<f64> = (0..n).map(|r| r as f64).collect();
        let used: Vec<usize> = (0..n).collect();
        // Every flow of the iteration as if on the path: more links than the cap needs.
        let flows: Vec<usize> = (0..sim.spans.len())
            .filter(|&i| !sim.spans[i].resources.is_empty())
            .collect();
        let (chosen, for_path, off) = choose_links(&sim, &busy, &used, &flows);
        assert!(for_path <= MAX_PATH_LINK_ROWS);
        assert_eq!(chosen.len(), for_path.max(MAX_LINK_ROWS));
        let covered = |i: &usize| sim.spans[*i].resources.iter().any(|r| chosen.contains(r));
        assert_eq!(flows.iter().filter(|i| !covered(i)).count(), off);
        // No path: the busiest.
        let (chosen, for_path, off) = choose_links(&sim, &busy, &used, &[]);
        assert_eq!((for_path, off), (0, 0));
        assert_eq!(chosen, (n - MAX_LINK_ROWS..n).rev().collect::<Vec<_>>());
    }

    #[test]
    fn captions_wrap_between_words() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("aaaaaaa b", 5), ["aaaaaaa", "b"]);
        assert!(wrap("", 5).is_empty());
    }

    #[test]
    fn small_pipeline_one_row_per_gpu() {
        let sim = small("1x4xa100-80gb", "pp=4,dp=1,mbs=1,gbs=8");
        let svg = gantt_svg(&sim);
        assert!(svg.starts_with("<svg"));
        well_formed(&svg);
        for g in 0..4 {
            assert!(
                svg.contains(&format!(">n0g{g} s{g} r0</text>")),
                "row of n0g{g}"
            );
        }
        assert!(svg.contains("forward"));
        assert!(svg.contains("send activations"));
        assert!(svg.contains(">links</text>"));
        assert!(svg.contains(">time (ms)</text>"));
        // Micro-batch numbers inside boxes.
        assert!(svg.contains("fill=\"#ffffff\">7</text>"));
        assert_eq!(svg, gantt_svg(&sim), "deterministic");
    }

    #[test]
    fn many_gpus_one_row_per_executor() {
        let sim = small("10x8xa100-80gb", "tp=2,pp=2,dp=20,mbs=1,gbs=40");
        let svg = gantt_svg(&sim);
        well_formed(&svg);
        assert!(svg.contains(">n0g0..n0g1 s0 r0</text>"));
        assert!(svg.contains("one row per executor"));
        // The rows: the critical path's, the executors', the links'.
        let rows = svg.matches("fill=\"#eeeeee\"/>").count();
        assert_eq!(sim.executors.len(), 40);
        assert!(rows > 41 && rows <= 41 + MAX_LINK_ROWS, "{rows}");
    }

    #[test]
    fn escapes_and_axis() {
        assert_eq!(esc("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        let a = Axis::new(0.1234);
        assert_eq!(a.unit, "ms");
        assert!((a.step - 0.02).abs() < 1e-12);
        assert_eq!(a.fmt(0.04), "40");
        let a = Axis::new(3.0);
        assert_eq!(a.unit, "s");
        assert_eq!(a.fmt(0.5), "0.5");
        assert_eq!(c(-0.01), "0");
        assert_eq!(c(12.34), "12.3");
        assert_eq!(c(12.0), "12");
    }
}
