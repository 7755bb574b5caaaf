//! Chrome trace event format (opens in Perfetto and chrome://tracing): one track per GPU and per
//! link.
//!
//! Processes are nodes (`pid` = node number + 1, named "node N") with one thread per GPU (`tid` =
//! the GPU's index in its node + 1, named "n0g3 stage 1 replica 0"): Perfetto treats pid and tid
//! 0 as the kernel's, so numbering starts at 1. An executor's compute appears on
//! every GPU of its TP group, which moves in lock step. A last process, "links", has a track per
//! resource flows cross (a GPU's link in its node, a node's network, a replica's host link).
//! Flows sharing a link overlap in time, and a track must hold nested slices only, so a link
//! whose flows overlap gets more tracks ("node 0 NIC #2"), each flow on the first that is free.
//!
//! Times are microseconds rounded to the nanosecond, so that the output is byte-identical for the
//! same simulation.

use super::build::Direction;
use super::{Label, Pass, Resource, Simulation, Span};
use serde::Serialize;
use std::collections::BTreeMap;

/// What a span is, for colours and categories.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    Forward,
    Backward,
    Optimizer,
    SendActivations,
    SendGradients,
    GradSync,
    ParamGather,
    ZeroGather,
    ZeroScatter,
    TpAllReduce,
    EpAllToAll,
    CpComm,
    Offload,
    TiedSync,
}

impl Kind {
    pub(crate) fn of(l: &Label) -> Kind {
        match l {
            Label::Compute { pass, .. } => match pass {
                Pass::Forward => Kind::Forward,
                Pass::Backward => Kind::Backward,
            },
            Label::Optimizer { .. } => Kind::Optimizer,
            Label::Send { pass, .. } => match pass {
                Pass::Forward => Kind::SendActivations,
                Pass::Backward => Kind::SendGradients,
            },
            Label::GradSync { .. } => Kind::GradSync,
            Label::ParamGather { .. } => Kind::ParamGather,
            Label::ZeroGather { .. } => Kind::ZeroGather,
            Label::ZeroScatter { .. } => Kind::ZeroScatter,
            Label::TpAllReduce { .. } => Kind::TpAllReduce,
            Label::EpAllToAll { .. } => Kind::EpAllToAll,
            Label::CpComm { .. } => Kind::CpComm,
            Label::Offload { .. } => Kind::Offload,
            Label::TiedSync => Kind::TiedSync,
        }
    }

    /// The trace category.
    pub(crate) fn category(self) -> &'static str {
        match self {
            Kind::Forward => "forward",
            Kind::Backward => "backward",
            Kind::Optimizer => "optimizer",
            Kind::SendActivations => "send-activations",
            Kind::SendGradients => "send-gradients",
            Kind::GradSync => "grad-sync",
            Kind::ParamGather => "param-gather",
            Kind::ZeroGather => "zero-gather",
            Kind::ZeroScatter => "zero-reduce-scatter",
            Kind::TpAllReduce => "tp-all-reduce",
            Kind::EpAllToAll => "ep-all-to-all",
            Kind::CpComm => "cp-comm",
            Kind::Offload => "offload",
            Kind::TiedSync => "tied-embedding-sync",
        }
    }

    /// Words for a legend.
    pub(crate) fn description(self) -> &'static str {
        match self {
            Kind::Forward => "forward",
            Kind::Backward => "backward (with recomputation)",
            Kind::Optimizer => "optimizer step",
            Kind::SendActivations => "send activations",
            Kind::SendGradients => "send gradients",
            Kind::GradSync => "gradient reduction",
            Kind::ParamGather => "parameter all-gather",
            Kind::ZeroGather => "ZeRO-3 gather",
            Kind::ZeroScatter => "ZeRO reduce-scatter",
            Kind::TpAllReduce => "tensor-parallel all-reduce",
            Kind::EpAllToAll => "expert-parallel all-to-all",
            Kind::CpComm => "context-parallel transfers (ring or all-to-all)",
            Kind::Offload => "offload copy",
            Kind::TiedSync => "tied-embedding all-reduce",
        }
    }

    pub(crate) const ALL: [Kind; 14] = [
        Kind::Forward,
        Kind::Backward,
        Kind::Optimizer,
        Kind::SendActivations,
        Kind::SendGradients,
        Kind::GradSync,
        Kind::ParamGather,
        Kind::ZeroGather,
        Kind::ZeroScatter,
        Kind::TpAllReduce,
        Kind::EpAllToAll,
        Kind::CpComm,
        Kind::Offload,
        Kind::TiedSync,
    ];
}

fn pass_letter(p: Pass) -> char {
    match p {
        Pass::Forward => 'F',
        Pass::Backward => 'B',
    }
}

/// A short name of a span: "F3", "B3 L12", "F3 c1" (a later chunk of an interleaved stage),
/// "optimizer", "send F3 s0→s1", "grad sync L7", "ZeRO gather L4", …
/// `multi_replica` adds replica numbers to sends; `depth` is the pipeline depth.
pub(crate) fn span_name(sp: &Span, depth: usize, multi_replica: bool) -> String {
    let chunk = |stage: usize| {
        if depth > 0 && stage >= depth {
            format!(" c{}", stage / depth)
        } else {
            String::new()
        }
    };
    match &sp.label {
        Label::Compute {
            stage,
            mb,
            pass,
            layer,
            ..
        } => {
            let mut s = format!("{}{mb}{}", pass_letter(*pass), chunk(*stage));
            if let Some(l) = layer {
                s.push_str(&format!(" L{l}"));
            }
            s
        }
        Label::Optimizer { .. } => "optimizer".into(),
        Label::Send {
            from_stage,
            from_replica,
            to_stage,
            to_replica,
            mb,
            pass,
        } => {
            if multi_replica {
                format!(
                    "send {}{mb} s{from_stage}r{from_replica}→s{to_stage}r{to_replica}",
                    pass_letter(*pass)
                )
            } else {
                format!("send {}{mb} s{from_stage}→s{to_stage}", pass_letter(*pass))
            }
        }
        Label::GradSync { layer, .. } => format!("grad sync L{layer}"),
        Label::ParamGather { stage, layer } => match layer {
            Some(l) => format!("param gather L{l}"),
            None => format!("param gather s{stage}"),
        },
        Label::ZeroGather {
            mb, layer, pass, ..
        } => format!("ZeRO gather L{layer} {}{mb}", pass_letter(*pass)),
        Label::ZeroScatter { mb, layer, .. } => format!("ZeRO reduce-scatter L{layer} B{mb}"),
        Label::TpAllReduce {
            mb, pass, layer, ..
        } => match layer {
            Some(l) => format!("TP all-reduce {}{mb} L{l}", pass_letter(*pass)),
            None => format!("TP all-reduce {}{mb}", pass_letter(*pass)),
        },
        Label::EpAllToAll {
            mb, pass, layer, ..
        } => match layer {
            Some(l) => format!("EP all-to-all {}{mb} L{l}", pass_letter(*pass)),
            None => format!("EP all-to-all {}{mb}", pass_letter(*pass)),
        },
        Label::CpComm {
            mb, pass, layer, ..
        } => match layer {
            Some(l) => format!("CP comm {}{mb} L{l}", pass_letter(*pass)),
            None => format!("CP comm {}{mb}", pass_letter(*pass)),
        },
        Label::Offload { mb, pass, .. } => format!("offload {}{mb}", pass_letter(*pass)),
        Label::TiedSync => "tied-embedding all-reduce".into(),
    }
}

fn dir_word(d: Direction) -> &'static str {
    match d {
        Direction::Out => "out",
        Direction::In => "in",
    }
}

/// A resource's name: "n0g3 link out", "node 0 NIC in", "route 0→1", "n1g0 host link".
pub(crate) fn resource_name(r: &Resource) -> String {
    match r {
        Resource::GpuLink { gpu, direction } => format!("{gpu} link {}", dir_word(*direction)),
        Resource::Nic { node, direction } => format!("node {node} NIC {}", dir_word(*direction)),
        Resource::Route { from, to } => format!("route {from}→{to}"),
        Resource::HostLink { gpu } => format!("{gpu} host link"),
    }
}

/// The pipeline depth: physical stages (executors' stage numbers).
pub(crate) fn depth(sim: &Simulation) -> usize {
    sim.executors.iter().map(|e| e.stage + 1).max().unwrap_or(0)
}

/// Whether any physical stage has more than one replica.
pub(crate) fn multi_replica(sim: &Simulation) -> bool {
    sim.executors.iter().any(|e| e.replica > 0)
}

/// Greedy lanes for intervals on one track: each interval (in start order) goes on the first
/// lane that is free by its start. Returns the lane of each interval and the number of lanes.
pub(crate) fn lanes(intervals: &[(f64, f64)]) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..intervals.len()).collect();
    order.sort_by(|&a, &b| {
        intervals[a]
            .0
            .total_cmp(&intervals[b].0)
            .then(intervals[b].1.total_cmp(&intervals[a].1))
            .then(a.cmp(&b))
    });
    let mut lane_end: Vec<f64> = Vec::new();
    let mut lane = vec![0; intervals.len()];
    for i in order {
        let (s, e) = intervals[i];
        let l = match lane_end.iter().position(|&end| end <= s) {
            Some(l) => l,
            None => {
                lane_end.push(f64::NEG_INFINITY);
                lane_end.len() - 1
            }
        };
        lane_end[l] = e;
        lane[i] = l;
    }
    (lane, lane_end.len())
}

/// The trace process of a node and thread of a GPU (0 is the kernel's in Perfetto).
fn pid_of(node: u32) -> u64 {
    node as u64 + 1
}

fn tid_of(local: u32) -> u64 {
    local as u64 + 1
}

/// Seconds to microseconds, rounded to the nanosecond.
fn micros(s: f64) -> f64 {
    let us = (s * 1e9).round() / 1e3;
    if us == 0.0 {
        0.0 // no -0
    } else {
        us
    }
}

#[derive(Serialize)]
struct Trace {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<Event>,
    #[serde(rename = "displayTimeUnit")]
    display_time_unit: &'static str,
    #[serde(rename = "otherData")]
    other_data: OtherData,
}

#[derive(Serialize)]
struct OtherData {
    generator: &'static str,
    iteration_time_s: f64,
    tokens_per_s_per_gpu: f64,
    bubble_fraction: f64,
}

#[derive(Serialize)]
struct Event {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u64,
    tid: u64,
    args: Args,
}

#[derive(Serialize, Default)]
struct Args {
    /// Metadata events: the name or sort index.
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sort_index: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stage: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replica: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    micro_batch: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    layer: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pass: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    to_stage: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    to_replica: Option<usize>,
    /// Flows: every resource the flow crosses.
    #[serde(skip_serializing_if = "Option::is_none")]
    resources: Option<Vec<String>>,
}

fn pass_word(p: Pass) -> &'static str {
    match p {
        Pass::Forward => "forward",
        Pass::Backward => "backward",
    }
}

fn span_args(sp: &Span) -> Args {
    let mut a = Args::default();
    match &sp.label {
        Label::Compute {
            stage,
            replica,
            mb,
            pass,
            layer,
        }
        | Label::TpAllReduce {
            stage,
            replica,
            mb,
            pass,
            layer,
        }
        | Label::EpAllToAll {
            stage,
            replica,
            mb,
            pass,
            layer,
        }
        | Label::CpComm {
            stage,
            replica,
            mb,
            pass,
            layer,
        } => {
            a.stage = Some(*stage);
            a.replica = Some(*replica);
            a.micro_batch = Some(*mb);
            a.pass = Some(pass_word(*pass));
            a.layer = *layer;
        }
        Label::Optimizer { stage, replica } => {
            a.stage = Some(*stage);
            a.replica = Some(*replica);
        }
        Label::Send {
            from_stage,
            from_replica,
            to_stage,
            to_replica,
            mb,
            pass,
        } => {
            a.stage = Some(*from_stage);
            a.replica = Some(*from_replica);
            a.to_stage = Some(*to_stage);
            a.to_replica = Some(*to_replica);
            a.micro_batch = Some(*mb);
            a.pass = Some(pass_word(*pass));
        }
        Label::GradSync { stage, layer } => {
            a.stage = Some(*stage);
            a.layer = Some(*layer);
        }
        Label::ParamGather { stage, layer } => {
            a.stage = Some(*stage);
            a.layer = *layer;
        }
        Label::ZeroGather {
            stage,
            mb,
            layer,
            pass,
        } => {
            a.stage = Some(*stage);
            a.micro_batch = Some(*mb);
            a.layer = Some(*layer);
            a.pass = Some(pass_word(*pass));
        }
        Label::ZeroScatter { stage, mb, layer } => {
            a.stage = Some(*stage);
            a.micro_batch = Some(*mb);
            a.layer = Some(*layer);
        }
        Label::Offload {
            stage,
            replica,
            mb,
            pass,
        } => {
            a.stage = Some(*stage);
            a.replica = Some(*replica);
            a.micro_batch = Some(*mb);
            a.pass = Some(pass_word(*pass));
        }
        Label::TiedSync => {}
    }
    a
}

fn metadata(name: &'static str, pid: u64, tid: u64, args: Args) -> Event {
    Event {
        name: name.into(),
        cat: None,
        ph: "M",
        ts: None,
        dur: None,
        pid,
        tid,
        args,
    }
}

/// The simulation as a Chrome trace (JSON).
pub fn chrome_trace(sim: &Simulation) -> String {
    let depth = depth(sim);
    let multi = multi_replica(sim);
    let mut events = Vec::new();

    // Nodes and their GPUs.
    let mut nodes: BTreeMap<u32, Vec<(u32, String)>> = BTreeMap::new();
    for ex in &sim.executors {
        for g in &ex.devices {
            nodes.entry(g.node).or_default().push((
                g.local,
                format!("{g} stage {} replica {}", ex.stage, ex.replica),
            ));
        }
    }
    let links_pid = nodes.keys().next_back().map_or(1, |&n| pid_of(n) + 1);
    for (&node, gpus) in &nodes {
        let pid = pid_of(node);
        events.push(metadata(
            "process_name",
            pid,
            0,
            Args {
                name: Some(format!("node {node}")),
                ..Args::default()
            },
        ));
        events.push(metadata(
            "process_sort_index",
            pid,
            0,
            Args {
                sort_index: Some(pid),
                ..Args::default()
            },
        ));
        let mut gpus = gpus.clone();
        gpus.sort();
        for (local, name) in gpus {
            events.push(metadata(
                "thread_name",
                pid,
                tid_of(local),
                Args {
                    name: Some(name),
                    ..Args::default()
                },
            ));
            events.push(metadata(
                "thread_sort_index",
                pid,
                tid_of(local),
                Args {
                    sort_index: Some(tid_of(local)),
                    ..Args::default()
                },
            ));
        }
    }

    // Links: the flows on each resource, spread over lanes where they overlap.
    let mut on_resource: Vec<Vec<usize>> = vec![Vec::new(); sim.resources.len()];
    for (i, sp) in sim.spans.iter().enumerate() {
        for &r in &sp.resources {
            if let Some(v) = on_resource.get_mut(r) {
                v.push(i);
            }
        }
    }
    // (span, tid) of every flow event.
    let mut flow_events: Vec<(usize, u64)> = Vec::new();
    let mut next_tid = 1u64;
    let mut link_threads = Vec::new();
    for (r, spans) in on_resource.iter().enumerate() {
        let intervals: Vec<(f64, f64)> = spans
            .iter()
            .map(|&i| (sim.spans[i].start_s, sim.spans[i].end_s))
            .collect();
        let (lane, n_lanes) = lanes(&intervals);
        let base = next_tid;
        for l in 0..n_lanes.max(1) {
            let mut name = resource_name(&sim.resources[r]);
            if l > 0 {
                name.push_str(&format!(" #{}", l + 1));
            }
            link_threads.push((base + l as u64, name));
        }
        next_tid += n_lanes.max(1) as u64;
        for (k, &i) in spans.iter().enumerate() {
            flow_events.push((i, base + lane[k] as u64));
        }
    }
    if !sim.resources.is_empty() {
        events.push(metadata(
            "process_name",
            links_pid,
            0,
            Args {
                name: Some("links".into()),
                ..Args::default()
            },
        ));
        events.push(metadata(
            "process_sort_index",
            links_pid,
            0,
            Args {
                sort_index: Some(links_pid),
                ..Args::default()
            },
        ));
        for (tid, name) in link_threads {
            events.push(metadata(
                "thread_name",
                links_pid,
                tid,
                Args {
                    name: Some(name),
                    ..Args::default()
                },
            ));
            events.push(metadata(
                "thread_sort_index",
                links_pid,
                tid,
                Args {
                    sort_index: Some(tid),
                    ..Args::default()
                },
            ));
        }
    }

    // Complete events: compute on every GPU of its executor, flows on their link lanes.
    let complete = |sp: &Span, pid: u64, tid: u64, resources: Option<Vec<String>>| {
        let ts = micros(sp.start_s);
        let dur = (micros(sp.end_s) - ts).max(0.0);
        Event {
            name: span_name(sp, depth, multi),
            cat: Some(Kind::of(&sp.label).category()),
            ph: "X",
            ts: Some(ts),
            dur: Some((dur * 1e3).round() / 1e3),
            pid,
            tid,
            args: Args {
                resources,
                ..span_args(sp)
            },
        }
    };
    for sp in &sim.spans {
        if let Some(e) = sp.executor {
            if let Some(ex) = sim.executors.get(e) {
                for g in &ex.devices {
                    events.push(complete(sp, pid_of(g.node), tid_of(g.local), None));
                }
            }
        }
    }
    flow_events.sort_by_key(|&(i, tid)| (tid, i));
    for (i, tid) in flow_events {
        let sp = &sim.spans[i];
        let names = sp
            .resources
            .iter()
            .filter_map(|&r| sim.resources.get(r).map(resource_name))
            .collect();
        events.push(complete(sp, links_pid, tid, Some(names)));
    }

    let trace = Trace {
        trace_events: events,
        display_time_unit: "ms",
        other_data: OtherData {
            generator: "hetplan simulate",
            iteration_time_s: sim.iteration_time_s,
            tokens_per_s_per_gpu: sim.tokens_per_s_per_gpu,
            bubble_fraction: sim.bubble_fraction,
        },
    };
    let mut s = serde_json::to_string(&trace).expect("a trace serialises");
    s.push('\n');
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cluster::spec::catalog_cluster;
    use crate::cost::{Analytic, Workload};
    use crate::model::catalog::catalog_model;
    use crate::plan::inline::parse_inline_plan;
    use crate::plan::ValidPlan;
    use crate::sim::{simulate, SimOptions};

    /// A small simulation: gpt3-125m on `cluster` with the inline plan `spec`.
    pub(crate) fn small(cluster: &str, spec: &str) -> Simulation {
        let model = catalog_model("gpt3-125m").unwrap();
        let cluster = catalog_cluster(cluster).unwrap();
        let plan = parse_inline_plan(spec, &model, &cluster).unwrap();
        let plan = ValidPlan::new(plan, &model, &cluster).unwrap();
        let w = Workload {
            model: &model,
            cluster: &cluster,
            seq_len: 512,
        };
        simulate(w, &plan, &Analytic, &SimOptions::default()).unwrap()
    }

    #[test]
    fn one_track_per_gpu_and_every_compute_span_on_each() {
        let sim = small("1x8xa100-80gb", "tp=2,pp=2,dp=2,mbs=1,gbs=8");
        let text = chrome_trace(&sim);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["displayTimeUnit"], "ms");
        let events = v["traceEvents"].as_array().unwrap();
        let threads: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == 1)
            .collect();
        assert_eq!(threads.len(), 8);
        assert!(threads
            .iter()
            .any(|t| t["args"]["name"] == "n0g3 stage 0 replica 1"));
        let compute = sim.spans.iter().filter(|s| s.executor.is_some()).count();
        let x_on_gpus = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == 1)
            .count();
        assert_eq!(x_on_gpus, compute * 2, "tp = 2: each compute span twice");
        // Flows on the links process, with names and categories.
        let links: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == 2)
            .collect();
        assert!(links.iter().any(|e| e["cat"] == "send-activations"
            && e["name"].as_str().unwrap().starts_with("send F0 s0r0→s1r")));
        assert!(links.iter().any(|e| e["cat"] == "grad-sync"));
        assert!(events
            .iter()
            .any(|e| e["name"] == "F0" && e["args"]["micro_batch"] == 0));
        assert!(events.iter().any(|e| e["name"] == "optimizer"));
        // Times in microseconds: the last event ends at the iteration time.
        let end = events
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap())
            .fold(0.0, f64::max);
        assert!((end - sim.iteration_time_s * 1e6).abs() < 0.01, "{end}");
    }

    #[test]
    fn slices_on_a_track_do_not_overlap() {
        let sim = small("1x8xa100-80gb", "pp=2,dp=4,mbs=1,gbs=16,zero=3");
        let v: serde_json::Value = serde_json::from_str(&chrome_trace(&sim)).unwrap();
        let mut tracks: BTreeMap<(u64, u64), Vec<(f64, f64)>> = BTreeMap::new();
        for e in v["traceEvents"].as_array().unwrap() {
            if e["ph"] == "X" {
                let ts = e["ts"].as_f64().unwrap();
                tracks
                    .entry((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()))
                    .or_default()
                    .push((ts, ts + e["dur"].as_f64().unwrap()));
            }
        }
        for (k, mut t) in tracks {
            t.sort_by(|a, b| a.0.total_cmp(&b.0));
            for w in t.windows(2) {
                assert!(
                    w[1].0 >= w[0].1 - 1e-3,
                    "{k:?}: {:?} overlaps {:?}",
                    w[0],
                    w[1]
                );
            }
        }
        assert!(v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["cat"] == "zero-gather"));
    }

    #[test]
    fn deterministic() {
        let a = chrome_trace(&small("1x4xa100-80gb", "pp=4,dp=1,mbs=1,gbs=8"));
        let b = chrome_trace(&small("1x4xa100-80gb", "pp=4,dp=1,mbs=1,gbs=8"));
        assert_eq!(a, b);
    }

    #[test]
    fn lanes_separate_overlaps() {
        let (lane, n) = lanes(&[(0.0, 2.0), (1.0, 3.0), (2.0, 4.0), (3.5, 5.0)]);
        assert_eq!(lane, [0, 1, 0, 1]);
        assert_eq!(n, 2);
    }
}
