//! A Gantt chart of a simulated iteration as SVG.
//!
//! One row per GPU (per executor, labelled with its device range, when there are more than
//! [`MAX_GPU_ROWS`] GPUs: the GPUs of a TP group move in lock step), boxes coloured by activity
//! with the micro-batch number inside where it fits; the gaps are waiting (for other stages or
//! for a transfer). Below, one row per link with the flows that crossed it — sends, gradient
//! reduction, ZeRO, offload — the busiest [`MAX_LINK_ROWS`] when there are more. A time axis,
//! a legend and captions. Plain SVG (rect, text, line), deterministic: coordinates are written
//! with one decimal.

use super::build::Direction;
use super::trace::{depth, lanes, multi_replica, resource_name, span_name, Kind};
use super::{Label, Resource, Simulation, Span};
use std::fmt::Write;

/// Above this many GPUs, one row per executor instead of one per GPU.
pub const MAX_GPU_ROWS: usize = 64;
/// At most this many link rows (the busiest).
pub const MAX_LINK_ROWS: usize = 32;
/// Overlapping flows on a link are drawn in at most this many lanes.
const MAX_LANES: usize = 4;

const PLOT_W: f64 = 1200.0;
const MARGIN: f64 = 16.0;
const FONT: f64 = 11.0;
const BACKGROUND: &str = "#eeeeee";

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
        Label::GradSync { stage, .. } | Label::ParamGather { stage } => (k, None, Some(*stage)),
        Label::ZeroGather { stage, mb, .. }
        | Label::ZeroScatter { stage, mb, .. }
        | Label::TpAllReduce { stage, mb, .. }
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

/// The simulation as an SVG Gantt chart.
pub fn gantt_svg(sim: &Simulation) -> String {
    let t_end = sim
        .spans
        .iter()
        .map(|s| s.end_s)
        .fold(sim.iteration_time_s, f64::max);
    let t_end = if t_end > 0.0 && t_end.is_finite() {
        t_end
    } else {
        1.0
    };
    let axis = Axis::new(t_end);
    let px = PLOT_W / t_end;
    let gap = 0.5 / px;
    let depth = depth(sim);
    let multi = multi_replica(sim);
    let n_gpus: usize = sim.executors.iter().map(|e| e.devices.len()).sum();
    let grouped = n_gpus > MAX_GPU_ROWS;

    // Compute rows.
    let mut by_exec: Vec<Vec<(&Span, usize)>> = vec![Vec::new(); sim.executors.len()];
    for sp in &sim.spans {
        if let Some(e) = sp.executor {
            if let Some(v) = by_exec.get_mut(e) {
                v.push((sp, 0));
            }
        }
    }
    let mut rows: Vec<Row> = Vec::new();
    for (e, ex) in sim.executors.iter().enumerate() {
        let spans = &mut by_exec[e];
        spans.sort_by(|a, b| a.0.start_s.total_cmp(&b.0.start_s));
        let suffix = format!("s{} r{}", ex.stage, ex.replica);
        if grouped {
            rows.push(Row {
                label: format!("{} {suffix}", device_range(&ex.devices)),
                bars: bars(spans, gap, &axis, depth, multi),
                lanes: 1,
            });
        } else {
            for g in &ex.devices {
                rows.push(Row {
                    label: format!("{g} {suffix}"),
                    bars: bars(spans, gap, &axis, depth, multi),
                    lanes: 1,
                });
            }
        }
    }

    // Link rows: the busiest, in a stable order.
    let mut on_resource: Vec<Vec<&Span>> = vec![Vec::new(); sim.resources.len()];
    for sp in &sim.spans {
        for &r in &sp.resources {
            if let Some(v) = on_resource.get_mut(r) {
                v.push(sp);
            }
        }
    }
    let mut used: Vec<(usize, f64)> = on_resource
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(r, v)| {
            let mut iv: Vec<(f64, f64)> = v.iter().map(|s| (s.start_s, s.end_s)).collect();
            (r, busy_time(&mut iv))
        })
        .collect();
    let n_links = used.len();
    if used.len() > MAX_LINK_ROWS {
        used.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        used.truncate(MAX_LINK_ROWS);
    }
    used.sort_by(|a, b| {
        resource_order(&sim.resources[a.0])
            .cmp(&resource_order(&sim.resources[b.0]))
            .then(a.0.cmp(&b.0))
    });
    let mut link_rows: Vec<Row> = Vec::new();
    for &(r, busy) in &used {
        let mut spans = on_resource[r].clone();
        spans.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
        let iv: Vec<(f64, f64)> = spans.iter().map(|s| (s.start_s, s.end_s)).collect();
        let (lane, n) = lanes(&iv);
        let n = n.clamp(1, MAX_LANES);
        let with_lanes: Vec<(&Span, usize)> = spans
            .iter()
            .zip(&lane)
            .map(|(s, &l)| (*s, l.min(MAX_LANES - 1)))
            .collect();
        link_rows.push(Row {
            label: {
                let p = busy / t_end * 100.0;
                let d = if p < 9.95 { 1 } else { 0 };
                format!("{} {p:.d$}%", resource_name(&sim.resources[r]))
            },
            bars: bars(&with_lanes, gap, &axis, depth, multi),
            lanes: n,
        });
    }

    // Geometry.
    let n_rows = rows.len() + link_rows.len();
    let (row_h, row_gap, fs) = if n_rows <= 40 {
        (18.0, 4.0, FONT)
    } else if n_rows <= 160 {
        (11.0, 2.0, 9.0)
    } else {
        (7.0, 1.0, 6.0)
    };
    let label_chars = rows
        .iter()
        .chain(&link_rows)
        .map(|r| r.label.chars().count())
        .max()
        .unwrap_or(0);
    let label_w = (text_w(label_chars, fs) + 12.0).max(80.0);
    let x0 = MARGIN + label_w;
    let width = x0 + PLOT_W + 40.0;
    let x_of = |t: f64| x0 + t * px;

    // Legend entries: the activities present, then the gap.
    let kinds: Vec<Kind> = Kind::ALL
        .iter()
        .copied()
        .filter(|k| sim.spans.iter().any(|s| Kind::of(&s.label) == *k))
        .collect();
    let mut legend: Vec<(Option<Kind>, String)> = kinds
        .iter()
        .map(|&k| (Some(k), k.description().to_string()))
        .collect();
    legend.push((None, "waiting (gap)".into()));
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
    let rows_top = axis_label_y + 6.0;
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
    captions.push(
        "Each row is a GPU's timeline; a gap is waiting: for other stages (the pipeline bubble) \
         or for a transfer it needs."
            .into(),
    );
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
    if grouped {
        captions.push(format!(
            "{n_gpus} GPUs: one row per executor (a DP replica of a stage: its TP group's GPUs \
             run in lock step), labelled with its GPUs."
        ));
    }
    if !link_rows.is_empty() {
        let mut s = "Link rows: the flows that crossed each link (overlapping flows share it, one \
                     lane each); the percentage is the time the link was busy."
            .to_string();
        if n_links > link_rows.len() {
            s.push_str(&format!(
                " Showing the {} busiest of {n_links} links.",
                link_rows.len()
            ));
        }
        captions.push(s);
    }
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
    for ((kind, text), &(lx, ly)) in legend.iter().zip(&legend_pos) {
        let fill = kind.map_or(BACKGROUND, |k| colour(k).0);
        let _ = writeln!(
            o,
            "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{fill}\" stroke=\"#999999\" \
             stroke-width=\"0.5\"/><text x=\"{}\" y=\"{}\">{}</text>",
            c(lx),
            c(legend_y + ly),
            c(lx + 17.0),
            c(legend_y + ly + 10.0),
            esc(text)
        );
    }
    // Row backgrounds and labels.
    let row_label = |o: &mut String, y: f64, label: &str| {
        let _ = writeln!(
            o,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{BACKGROUND}\"/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"{}\">{}</text>",
            c(x0),
            c(y),
            c(PLOT_W),
            c(row_h),
            c(x0 - 6.0),
            c(y + row_h / 2.0 + fs * 0.35),
            c(fs),
            esc(label)
        );
    };
    for (i, r) in rows.iter().enumerate() {
        row_label(&mut o, row_y(i), &r.label);
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
        row_label(&mut o, link_y(i), &r.label);
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
            c(rows_top - 3.0),
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
        c(rows_top - 3.0),
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
    let draw = |o: &mut String, y: f64, r: &Row| {
        let lane_h = row_h / r.lanes as f64;
        for b in &r.bars {
            let x = x_of(b.start);
            let w = ((b.end - b.start) * px).max(0.5);
            // A hairline between boxes that touch.
            let w_drawn = if w > 3.0 { w - 1.0 } else { w };
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
            let tfs = (lane_h - 4.0).min(fs - 1.0);
            if let Some(t) = &b.text {
                if tfs >= 6.0 && text_w(t.chars().count(), tfs) + 4.0 <= w_drawn {
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
    for (i, r) in rows.iter().enumerate() {
        draw(&mut o, row_y(i), r);
    }
    for (i, r) in link_rows.iter().enumerate() {
        draw(&mut o, link_y(i), r);
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
        let rows = svg.matches("fill=\"#eeeeee\"/>").count();
        assert_eq!(sim.executors.len(), 40);
        assert!(rows > 40 && rows <= 40 + MAX_LINK_ROWS, "{rows}");
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
