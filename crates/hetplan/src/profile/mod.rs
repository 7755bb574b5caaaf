//! Profile database: measured per-layer times, and how to read them at any micro-batch size.
//!
//! A [`ProfileDb`] is a versioned JSON document (`"format_version": 1`) of [`ModelProfile`]s, one
//! per (GPU type, model, sequence length, precision): the forward, backward and optimizer time of
//! each layer at the measured tensor-parallel degrees (and, for mixture-of-experts layers,
//! expert-parallel degrees: `ep`) and micro-batch sizes, and optionally measured collective
//! bandwidths. All quantities are in base units: seconds, bytes, bytes per
//! second. Times are per GPU of a TP group for one micro-batch, tensor-parallel collectives
//! included (that is what a profiler running the layer under TP measures).
//!
//! ```json
//! { "format_version": 1,
//!   "profiles": [ { "gpu": "a100-sxm4-40gb", "model": "opt-350m", "seq_len": 2048,
//!                   "precision": "fp32", "source": "…",
//!                   "layers": [ { "layer": 0, "tp": 1, "mbs": 1, "forward": 0.0004,
//!                                 "backward": 3e-6, "optimizer": 0.0006 },
//!                               { "layer": "transformer", "tp": 1, "mbs": 2,
//!                                 "forward": 0.0046, "backward": 0.0116 } ],
//!                   "collectives": [ { "op": "all-reduce", "group_size": 8,
//!                                      "link": "intra-node", "message": 67108864,
//!                                      "bandwidth": 1.2e11 } ] } ] }
//! ```
//!
//! Lookup ([`ProfileDb::layer_time`], [`ProfileIndex`]): GPU and model names compare after
//! [`names::normalize`], and a GPU also by any catalog alias; a sample keyed by the layer's index
//! wins over one keyed by its kind; only the TP degree asked is used (`None` otherwise: the cost
//! model then falls back to its analytic times); micro-batch sizes between, above and below the
//! measured ones are read as [`Interpolation`] says (rules in `interp`).
//!
//! Importers turn other tools' profile files into a database: [`import_sailor`] (Sailor,
//! SOSP '25), [`import_metis`] (Metis, ATC '24), [`import_oobleck`] (Oobleck, SOSP '23). Like the
//! rest of the library they take file *contents*; the CLI reads the files.

mod interp;
pub mod metis;
pub mod oobleck;
pub mod sailor;

pub use metis::import_metis;
pub use oobleck::import_oobleck;
pub use sailor::import_sailor;

use crate::error::InputError;
use crate::gpu;
use crate::model::layerlist::{layer_kind, layer_kind_name};
use crate::model::LayerKind;
use crate::names;
use crate::parse::MAX_BATCH;
use crate::plan::Precision;
use crate::units::{Bytes, BytesPerSec, Seconds};
use interp::{Curve, Point};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

/// The only `format_version` this hetplan reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// A set of measured profiles.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileDb {
    pub format_version: u32,
    #[serde(default)]
    pub profiles: Vec<ModelProfile>,
}

impl Default for ProfileDb {
    fn default() -> Self {
        ProfileDb {
            format_version: FORMAT_VERSION,
            profiles: Vec::new(),
        }
    }
}

/// The measurements of one model on one GPU type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelProfile {
    /// GPU type: a catalog name ([`ProfileDb::parse`] and the importers write the canonical
    /// one, e.g. `a100-sxm4-80gb`), or a name the catalog does not know, kept as written.
    pub gpu: String,
    /// The model whose layer indices `layers` refers to (a catalog name such as `opt-350m`).
    pub model: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_positive_u64"
    )]
    pub seq_len: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
    /// Where the numbers come from, and how an importer converted them.
    #[serde(default)]
    pub source: String,
    pub layers: Vec<LayerSample>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collectives: Vec<CollectiveSample>,
}

/// One layer at one TP degree and micro-batch size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerSample {
    pub layer: LayerKey,
    #[serde(deserialize_with = "positive_u32")]
    pub tp: u32,
    /// Expert-parallel degree a mixture-of-experts layer was measured at (its GPU's `1/ep` of
    /// the experts, on the tokens `ep` ranks route to them); 1, and left out, for dense layers.
    #[serde(
        default = "one",
        skip_serializing_if = "is_one",
        deserialize_with = "positive_u32"
    )]
    pub ep: u32,
    /// Micro-batch size (samples) of the measurement.
    #[serde(deserialize_with = "positive_u64")]
    pub mbs: u64,
    /// Forward time of one micro-batch, seconds.
    #[serde(serialize_with = "ser", deserialize_with = "seconds")]
    pub forward: Seconds,
    /// Backward time of one micro-batch, seconds.
    #[serde(serialize_with = "ser", deserialize_with = "seconds")]
    pub backward: Seconds,
    /// This layer's share of one optimizer step, seconds (does not depend on `mbs`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_opt",
        deserialize_with = "opt_seconds"
    )]
    pub optimizer: Option<Seconds>,
    /// Activations kept for backward at this `mbs`, per GPU of the TP group, bytes.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_opt",
        deserialize_with = "opt_bytes"
    )]
    pub activation_memory: Option<Bytes>,
    /// Most GPU memory allocated over the layer's forward and backward above what was
    /// allocated before its forward (activations, temporaries, gradients created), per GPU of
    /// the TP group, bytes (`python -m hetplan.profile` on a GPU: `torch.cuda`'s peak).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_opt",
        deserialize_with = "opt_bytes"
    )]
    pub peak_memory: Option<Bytes>,
    /// All GPU memory attributed to the layer (weights, gradients, optimizer states and
    /// activations), bytes, when the profiler only reports that total (Metis).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_opt",
        deserialize_with = "opt_bytes"
    )]
    pub total_memory: Option<Bytes>,
    /// Parameters of the layer held by one GPU of the TP group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<u64>,
}

/// Which layers a sample describes: one index of the model's layer list, or every layer of a
/// kind (a number or a kind string in JSON: `3`, `"transformer"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKey {
    Index(usize),
    Kind(LayerKind),
}

/// A measured collective.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveSample {
    pub op: CollectiveOp,
    /// GPUs taking part (2 for point-to-point).
    #[serde(deserialize_with = "positive_u32")]
    pub group_size: u32,
    pub link: LinkKind,
    /// Bytes of the message (the per-GPU buffer for all-reduce).
    #[serde(serialize_with = "ser", deserialize_with = "positive_bytes")]
    pub message: Bytes,
    /// Algorithm bandwidth: message ÷ measured time, bytes per second.
    #[serde(serialize_with = "ser", deserialize_with = "positive_bandwidth")]
    pub bandwidth: BytesPerSec,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CollectiveOp {
    AllReduce,
    AllGather,
    ReduceScatter,
    /// Every GPU sends 1/n of its buffer to each (expert parallelism, Ulysses); `message` is
    /// the per-GPU send buffer.
    AllToAll,
    P2p,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkKind {
    IntraNode,
    InterNode,
}

/// How to read a micro-batch size that was not measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Interpolation {
    /// Monotone cubic (PCHIP) interpolation of the times over micro-batch size (Poplar fits a
    /// cubic spline over batch size; the monotone variant cannot overshoot).
    #[default]
    MonotoneCubic,
    /// Metis: the sum of measured sizes, `t(6) = t(4) + t(2)`.
    MetisPowersOfTwo,
}

impl std::str::FromStr for Interpolation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match names::normalize(s).as_str() {
            "monotone-cubic" | "cubic" | "pchip" | "poplar" => Ok(Interpolation::MonotoneCubic),
            "metis-powers-of-two" | "powers-of-two" | "metis" => {
                Ok(Interpolation::MetisPowersOfTwo)
            }
            other => Err(format!(
                "interpolation `{other}`: expected `monotone-cubic` or `metis-powers-of-two`"
            )),
        }
    }
}

/// The times of one layer at the micro-batch size asked.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProfiledTime {
    pub forward: Seconds,
    pub backward: Seconds,
    pub optimizer: Option<Seconds>,
    pub how: Provenance,
}

/// Whether a time was measured or derived, and from which measured micro-batch sizes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Provenance {
    Measured,
    /// Inside the measured range: the two sizes around it (monotone cubic), or the measured
    /// sizes summed (Metis; each piece listed, at most 64 entries).
    Interpolated {
        from: Vec<u64>,
    },
    /// Outside the measured range: the sizes it was extrapolated from (or summed, with Metis).
    Extrapolated {
        from: Vec<u64>,
    },
}

// ---------------------------------------------------------------------------------------------
// Serde helpers: field checks inside deserialisation, so that serde_json reports line and column.

impl Serialize for LayerKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            LayerKey::Index(i) => s.serialize_u64(*i as u64),
            LayerKey::Kind(k) => k.serialize(s),
        }
    }
}

fn kind_rank(k: LayerKind) -> u8 {
    match k {
        LayerKind::Embedding => 0,
        LayerKind::Transformer => 1,
        LayerKind::Head => 2,
        LayerKind::Other => 3,
    }
}

impl LayerKey {
    /// Sort key: indices first, in order, then kinds.
    fn rank(self) -> (u8, usize) {
        match self {
            LayerKey::Index(i) => (0, i),
            LayerKey::Kind(k) => (1, kind_rank(k) as usize),
        }
    }
}

impl fmt::Display for LayerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayerKey::Index(i) => write!(f, "layer {i}"),
            LayerKey::Kind(k) => write!(f, "every {} layer", layer_kind_name(*k)),
        }
    }
}

impl<'de> Deserialize<'de> for LayerKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const EXPECTED: &str =
            "a layer index (0, 1, ...) or a layer kind (\"embedding\", \"transformer\", \"head\", \"other\")";
        impl serde::de::Visitor<'_> for V {
            type Value = LayerKey;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<LayerKey, E> {
                usize::try_from(v)
                    .map(LayerKey::Index)
                    .map_err(|_| E::custom(format!("layer index {v} is too large")))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<LayerKey, E> {
                if v < 0 {
                    Err(E::custom(format!("layer {v}: expected {EXPECTED}")))
                } else {
                    self.visit_u64(v as u64)
                }
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<LayerKey, E> {
                layer_kind(v).map(LayerKey::Kind).ok_or_else(|| {
                    E::custom(format!("unknown layer kind `{v}`; expected {EXPECTED}"))
                })
            }
        }
        d.deserialize_any(V)
    }
}

fn one() -> u32 {
    1
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

fn positive_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = u32::deserialize(d)?;
    if v == 0 {
        return Err(serde::de::Error::custom("must be at least 1"));
    }
    Ok(v)
}

/// A micro-batch size: `1..=MAX_BATCH`.
fn positive_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = u64::deserialize(d)?;
    if v == 0 {
        return Err(serde::de::Error::custom("must be at least 1"));
    }
    if v > MAX_BATCH {
        return Err(serde::de::Error::custom(format!(
            "micro-batch size {v} is more than the {MAX_BATCH} hetplan accepts"
        )));
    }
    Ok(v)
}

fn opt_positive_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<u64>::deserialize(d)? {
        Some(0) => Err(serde::de::Error::custom("must be at least 1")),
        v => Ok(v),
    }
}

fn non_negative<E: serde::de::Error>(v: f64, what: &str) -> Result<f64, E> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(E::custom(format!(
            "{what} {v} must be finite and not negative"
        )))
    }
}

fn seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Seconds, D::Error> {
    non_negative(f64::deserialize(d)?, "time (seconds)").map(Seconds)
}

fn opt_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Seconds>, D::Error> {
    Option::<f64>::deserialize(d)?
        .map(|v| non_negative(v, "time (seconds)").map(Seconds))
        .transpose()
}

fn opt_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Bytes>, D::Error> {
    Option::<f64>::deserialize(d)?
        .map(|v| non_negative(v, "size (bytes)").map(Bytes))
        .transpose()
}

fn positive_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
    let v = f64::deserialize(d)?;
    if v.is_finite() && v > 0.0 {
        Ok(Bytes(v))
    } else {
        Err(serde::de::Error::custom(format!(
            "message size {v} must be positive (bytes)"
        )))
    }
}

fn positive_bandwidth<'de, D: Deserializer<'de>>(d: D) -> Result<BytesPerSec, D::Error> {
    let v = f64::deserialize(d)?;
    if v.is_finite() && v > 0.0 {
        Ok(BytesPerSec(v))
    } else {
        Err(serde::de::Error::custom(format!(
            "bandwidth {v} must be positive (bytes per second)"
        )))
    }
}

/// `v` rounded to 15 significant digits. serde_json (without its `float_roundtrip` feature)
/// reads numbers of 16–17 significant digits to within one unit in the last place only, but
/// reads ones of up to 15 digits (and decimal exponents down to -22) exactly. Written values go
/// through this, and importers store their derived values through it, so that a database
/// written by `to_json` reads back equal. (15 digits are far beyond any measurement's precision.)
pub(crate) fn tidy(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    format!("{v:.14e}").parse().unwrap_or(v)
}

trait Raw: Copy {
    fn raw(self) -> f64;
}
impl Raw for Seconds {
    fn raw(self) -> f64 {
        self.0
    }
}
impl Raw for Bytes {
    fn raw(self) -> f64 {
        self.0
    }
}
impl Raw for BytesPerSec {
    fn raw(self) -> f64 {
        self.0
    }
}

fn ser<T: Raw, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(tidy(v.raw()))
}

fn ser_opt<T: Raw, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_some(&tidy(v.raw())),
        None => s.serialize_none(),
    }
}

// ---------------------------------------------------------------------------------------------
// Names.

/// `names::normalize(a) == names::normalize(b)`.
pub(crate) fn same_name(a: &str, b: &str) -> bool {
    a == b || names::normalize(a) == names::normalize(b)
}

/// The catalog's canonical name of a GPU, or the name as written when the catalog does not know
/// it (with `false`).
pub(crate) fn canonical_gpu(name: &str) -> (String, bool) {
    match gpu::lookup(name) {
        Ok(spec) => (spec.name, true),
        Err(_) => (name.trim().to_string(), false),
    }
}

thread_local! {
    /// Memo of catalog look-ups (name as given → canonical name, if the catalog knows it): a
    /// look-up builds the whole catalog, too slow for every layer of every plan.
    static CANONICAL: std::cell::RefCell<BTreeMap<String, Option<String>>> =
        const { std::cell::RefCell::new(BTreeMap::new()) };
}

/// Whether two names designate the same GPU: equal after normalising, or catalog names or
/// aliases of the same catalog entry.
pub(crate) fn same_gpu(a: &str, b: &str) -> bool {
    if same_name(a, b) {
        return true;
    }
    CANONICAL.with(|memo| {
        let mut memo = memo.borrow_mut();
        if memo.len() > 4096 {
            memo.clear();
        }
        for n in [a, b] {
            if !memo.contains_key(n) {
                memo.insert(n.to_string(), gpu::lookup(n).ok().map(|s| s.name));
            }
        }
        match (memo.get(a), memo.get(b)) {
            (Some(Some(x)), Some(Some(y))) => x == y,
            _ => false,
        }
    })
}

// ---------------------------------------------------------------------------------------------
// The database.

impl ProfileDb {
    /// An empty database of the current format.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a database. JSON errors carry line and column; a `format_version` other than 1 is
    /// rejected before anything else is read. GPU names the catalog knows are rewritten to the
    /// canonical name; samples must be unique per (layer, tp, mbs) within a profile.
    pub fn parse(src: &str) -> Result<ProfileDb, InputError> {
        #[derive(Deserialize)]
        #[serde(rename = "profile database")]
        struct Probe {
            format_version: Option<serde_json::Value>,
        }
        let probe: Probe = serde_json::from_str(src).map_err(|e| InputError::from_json(&e))?;
        let at_version = |err: InputError| match src.find("\"format_version\"") {
            Some(off) => err.at_offset(src, off),
            None => err,
        };
        match probe.format_version {
            None => {
                return Err(InputError::new(
                    "missing `format_version`: this is not a hetplan profile database",
                )
                .field("format_version")
                .hint(Some(format!(
                    "start the file with `\"format_version\": {FORMAT_VERSION}`; other tools' profiles (Sailor, Metis, Oobleck) go through an importer first"
                ))))
            }
            Some(v) if v.as_u64() == Some(FORMAT_VERSION as u64) => {}
            Some(v) => {
                return Err(at_version(
                    InputError::new(format!(
                        "profile database format_version {v} is not supported; this hetplan reads format_version {FORMAT_VERSION}"
                    ))
                    .field("format_version")
                    .hint(Some(
                        "re-export the profiles with this hetplan version, or upgrade hetplan".into(),
                    )),
                ))
            }
        }
        let mut db: ProfileDb = serde_json::from_str(src).map_err(|e| InputError::from_json(&e))?;
        for p in &mut db.profiles {
            p.gpu = canonical_gpu(&p.gpu).0;
        }
        db.validate()?;
        Ok(db)
    }

    /// Checks what the field parsers cannot (names present, samples unique) and, for a
    /// database built in memory (the importers call this before returning one), what they
    /// check: every number in range, so that [`to_json`](ProfileDb::to_json) writes a
    /// database that [`parse`](ProfileDb::parse) reads back.
    pub fn validate(&self) -> Result<(), InputError> {
        if self.format_version != FORMAT_VERSION {
            return Err(InputError::new(format!(
                "format_version {} is not supported; expected {FORMAT_VERSION}",
                self.format_version
            ))
            .field("format_version"));
        }
        for (i, p) in self.profiles.iter().enumerate() {
            if p.gpu.trim().is_empty() {
                return Err(InputError::new("empty GPU name").field(format!("profiles[{i}].gpu")));
            }
            if p.model.trim().is_empty() {
                return Err(
                    InputError::new("empty model name").field(format!("profiles[{i}].model"))
                );
            }
            if p.seq_len == Some(0) {
                return Err(InputError::new("sequence length 0; it must be at least 1")
                    .field(format!("profiles[{i}].seq_len")));
            }
            for (j, s) in p.layers.iter().enumerate() {
                let at = |k: &str| format!("profiles[{i}].layers[{j}].{k}");
                if s.tp == 0 {
                    return Err(InputError::new("tp 0; it must be at least 1").field(at("tp")));
                }
                if s.mbs == 0 || s.mbs > MAX_BATCH {
                    return Err(InputError::new(format!(
                        "micro-batch size {}; it must lie in 1..={MAX_BATCH}",
                        s.mbs
                    ))
                    .field(at("mbs")));
                }
                let values = [
                    ("forward", Some(s.forward.get())),
                    ("backward", Some(s.backward.get())),
                    ("optimizer", s.optimizer.map(Seconds::get)),
                    ("activation_memory", s.activation_memory.map(Bytes::get)),
                    ("peak_memory", s.peak_memory.map(Bytes::get)),
                    ("total_memory", s.total_memory.map(Bytes::get)),
                ];
                for (k, v) in values {
                    if let Some(v) = v {
                        if !(v.is_finite() && v >= 0.0) {
                            return Err(InputError::new(format!(
                                "{v} must be finite and not negative"
                            ))
                            .field(at(k)));
                        }
                    }
                }
            }
            for (j, c) in p.collectives.iter().enumerate() {
                let at = |k: &str| format!("profiles[{i}].collectives[{j}].{k}");
                if c.group_size == 0 {
                    return Err(InputError::new("group size 0; it must be at least 1")
                        .field(at("group_size")));
                }
                for (k, v) in [
                    ("message", c.message.get()),
                    ("bandwidth", c.bandwidth.get()),
                ] {
                    if !(v.is_finite() && v > 0.0) {
                        return Err(InputError::new(format!("{v} must be positive and finite"))
                            .field(at(k)));
                    }
                }
            }
            let mut seen: BTreeMap<((u8, usize), u32, u32, u64), usize> = BTreeMap::new();
            for (j, s) in p.layers.iter().enumerate() {
                if let Some(first) = seen.insert((s.layer.rank(), s.tp, s.ep, s.mbs), j) {
                    let ep = if s.ep > 1 {
                        format!(", ep {}", s.ep)
                    } else {
                        String::new()
                    };
                    return Err(InputError::new(format!(
                        "a second sample for {}, tp {}{ep}, mbs {} (the first is layers[{first}])",
                        s.layer, s.tp, s.mbs
                    ))
                    .field(format!("profiles[{i}].layers[{j}]"))
                    .hint(Some("keep one sample per layer, tp, ep and mbs".into())));
                }
            }
        }
        Ok(())
    }

    /// Pretty JSON, fields in declaration order, samples in the order stored; floats rounded to
    /// 15 significant digits, which read back exactly (see `tidy`).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a profile database serialises");
        s.push('\n');
        s
    }

    /// Adds `other`'s profiles. A profile for the same GPU, model, sequence length and precision
    /// is merged sample by sample: `other`'s sample replaces one for the same (layer, tp, mbs),
    /// or collective (op, group, link, message); new samples are added and the samples re-sorted.
    pub fn merge(&mut self, other: ProfileDb) {
        for p in other.profiles {
            let mine = self.profiles.iter_mut().find(|m| {
                same_gpu(&m.gpu, &p.gpu)
                    && same_name(&m.model, &p.model)
                    && m.seq_len == p.seq_len
                    && m.precision == p.precision
            });
            match mine {
                Some(m) => m.absorb(p),
                None => self.profiles.push(p),
            }
        }
    }

    /// The times of layer `layer` (of kind `kind`) of `model` on `gpu` at TP degree `tp` and
    /// micro-batch size `mbs`, from samples without expert parallelism (`ep = 1`); `None` when
    /// nothing was measured for that layer (by index, else by kind) at that TP degree. Scans the matching profiles on each call (a few small
    /// allocations for the one curve it builds, catalog look-ups memoised); for many lookups a
    /// [`ProfileIndex`] built once is faster.
    ///
    /// Samples for the same (layer, tp, mbs) in several matching profiles (other sequence
    /// lengths or precisions): the first profile's wins; [`ProfileIndex::for_setup`] filters.
    #[allow(clippy::too_many_arguments)]
    pub fn layer_time(
        &self,
        gpu: &str,
        model: &str,
        layer: usize,
        kind: LayerKind,
        tp: u32,
        mbs: u64,
        how: Interpolation,
    ) -> Option<ProfiledTime> {
        let profiles = self.matching(gpu, model);
        if profiles.is_empty() {
            return None;
        }
        let collect = |key: LayerKey| -> Vec<Point> {
            profiles
                .iter()
                .flat_map(|p| p.layers.iter())
                .filter(|s| s.tp == tp && s.ep == 1 && s.layer == key)
                .map(LayerSample::point)
                .collect()
        };
        let mut points = collect(LayerKey::Index(layer));
        if points.is_empty() {
            points = collect(LayerKey::Kind(kind));
        }
        Curve::new(points).map(|c| c.eval(mbs, how))
    }

    /// Measured bandwidth of a collective on `gpu` (any model's profile), interpolated linearly
    /// in log₂(message size) between measured sizes and held at the nearest one outside;
    /// `None` without a sample for that op, group size and link.
    pub fn collective_bandwidth(
        &self,
        gpu: &str,
        op: CollectiveOp,
        group_size: u32,
        link: LinkKind,
        message: Bytes,
    ) -> Option<BytesPerSec> {
        let samples = (self.gpu_profiles(gpu).into_iter()).flat_map(|p| p.collectives.iter());
        let pts = curve_points(
            samples.filter(|c| (c.op, c.group_size, c.link) == (op, group_size, link)),
        );
        bandwidth_at(&pts, message)
    }

    /// The profiles of `model` on `gpu`: names compare normalised, the GPU also by catalog alias.
    fn matching(&self, gpu: &str, model: &str) -> Vec<&ModelProfile> {
        self.profiles
            .iter()
            .filter(|p| same_name(&p.model, model) && same_gpu(&p.gpu, gpu))
            .collect()
    }

    fn gpu_profiles(&self, gpu: &str) -> Vec<&ModelProfile> {
        self.profiles
            .iter()
            .filter(|p| same_gpu(&p.gpu, gpu))
            .collect()
    }
}

impl LayerSample {
    fn point(&self) -> Point {
        Point {
            mbs: self.mbs,
            forward: self.forward.get(),
            backward: self.backward.get(),
            optimizer: self.optimizer.map(Seconds::get),
        }
    }
}

impl ModelProfile {
    /// Sorts the samples: layers by (index, then kind), tp, mbs; collectives by op, link,
    /// group size, message.
    pub fn sort(&mut self) {
        self.layers
            .sort_by_key(|s| (s.layer.rank(), s.tp, s.ep, s.mbs));
        self.collectives.sort_by(|a, b| {
            (a.op, a.link, a.group_size)
                .cmp(&(b.op, b.link, b.group_size))
                .then(a.message.get().total_cmp(&b.message.get()))
        });
    }

    fn absorb(&mut self, other: ModelProfile) {
        for s in other.layers {
            match self
                .layers
                .iter_mut()
                .find(|m| m.layer == s.layer && m.tp == s.tp && m.ep == s.ep && m.mbs == s.mbs)
            {
                Some(m) => *m = s,
                None => self.layers.push(s),
            }
        }
        for c in other.collectives {
            match self.collectives.iter_mut().find(|m| {
                m.op == c.op
                    && m.group_size == c.group_size
                    && m.link == c.link
                    && m.message == c.message
            }) {
                Some(m) => *m = c,
                None => self.collectives.push(c),
            }
        }
        if !other.source.is_empty() && !self.source.contains(&other.source) {
            if !self.source.is_empty() {
                self.source.push_str("; ");
            }
            self.source.push_str(&other.source);
        }
        self.sort();
    }
}

// ---------------------------------------------------------------------------------------------
// The index.

/// Every curve of a database, built once: lookups are two map searches and one curve
/// evaluation. Deterministic (ordered maps throughout).
#[derive(Clone, Debug, Default)]
pub struct ProfileIndex {
    /// Normalised GPU name or alias → GPU slot.
    gpus: BTreeMap<String, usize>,
    /// (GPU slot, normalised model name) → curves.
    models: BTreeMap<(usize, String), ProfiledModel>,
    /// (GPU slot, op, group size, link) → its measured curve (any model's profile), as
    /// `curve_points` gives it: built once, so a lookup is a map search and a bisection.
    collectives: BTreeMap<CurveKey, Vec<(f64, f64)>>,
}

/// A measured collective curve's key: (GPU slot, op, group size, link).
type CurveKey = (usize, CollectiveOp, u32, LinkKind);

/// The points of one model on one GPU, by (layer index, tp, ep) and by (kind rank, tp, ep).
type ModelPoints = (
    BTreeMap<(usize, u32, u32), Vec<Point>>,
    BTreeMap<(u8, u32, u32), Vec<Point>>,
);

/// The measured bandwidth among `samples` for (op, group size, link), interpolated linearly in
/// log₂(message size) between measured sizes and held at the nearest one outside (the first of
/// equal sizes kept); `None` without such a sample.
/// A collective's measured points, (log₂ message, bandwidth), sorted by size, one per size
/// (the first sample's).
fn curve_points<'a>(samples: impl Iterator<Item = &'a CollectiveSample>) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = samples
        .map(|c| (c.message.get().log2(), c.bandwidth.get()))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts.dedup_by(|a, b| a.0 == b.0);
    pts
}

/// The bandwidth at `message` on a curve of `curve_points`: linear in log₂ size between the
/// measured sizes, held at the nearest one outside; `None` without a point.
fn bandwidth_at(pts: &[(f64, f64)], message: Bytes) -> Option<BytesPerSec> {
    if pts.is_empty() {
        return None;
    }
    let x = message.get().max(1.0).log2();
    let k = pts.partition_point(|p| p.0 <= x);
    let bw = if k == 0 {
        pts[0].1
    } else if k == pts.len() {
        pts[k - 1].1
    } else {
        let (a, b) = (pts[k - 1], pts[k]);
        a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0)
    };
    Some(BytesPerSec(bw))
}

/// The curves of one model on one GPU type.
#[derive(Clone, Debug, Default)]
pub struct ProfiledModel {
    /// (layer, tp, ep) → curve over micro-batch size.
    by_index: BTreeMap<(usize, u32, u32), Curve>,
    /// (kind, tp, ep) → curve.
    by_kind: BTreeMap<(u8, u32, u32), Curve>,
}

impl ProfileIndex {
    /// Indexes every profile. Of samples for the same GPU, model, layer key, tp and mbs the
    /// first one in database order is kept (ep counts too).
    pub fn new(db: &ProfileDb) -> ProfileIndex {
        Self::build(db, |_| true)
    }

    /// Indexes the profiles that fit a set-up: those whose sequence length and precision are
    /// either unset or equal to the ones given (`None` given: any). FP32 and TF32 are one
    /// precision on a GPU without TF32 (Volta, Turing, ...: `gpu::tf32_peak`), where PyTorch's
    /// switch changes nothing.
    pub fn for_setup(db: &ProfileDb, seq_len: Option<u64>, precision: Option<Precision>) -> Self {
        let same = |p: &ModelProfile, want: Precision| match p.precision {
            None => true,
            Some(have) if have == want => true,
            Some(have) => {
                have.is_fp32()
                    && want.is_fp32()
                    && gpu::lookup(&p.gpu).is_ok_and(|s| gpu::tf32_peak(&s).is_none())
            }
        };
        Self::build(db, |p| {
            (seq_len.is_none() || p.seq_len.is_none() || p.seq_len == seq_len)
                && precision.is_none_or(|want| same(p, want))
        })
    }

    fn build(db: &ProfileDb, keep: impl Fn(&ModelProfile) -> bool) -> Self {
        let mut gpus: BTreeMap<String, usize> = BTreeMap::new();
        let mut slots: BTreeMap<String, usize> = BTreeMap::new(); // canonical → slot
        let mut points: BTreeMap<(usize, String), ModelPoints> = BTreeMap::new();
        let mut samples: BTreeMap<CurveKey, Vec<&CollectiveSample>> = BTreeMap::new();
        for p in db.profiles.iter().filter(|p| keep(p)) {
            let spec = gpu::lookup(&p.gpu).ok();
            let canonical = match &spec {
                Some(s) => names::normalize(&s.name),
                None => names::normalize(&p.gpu),
            };
            let next = slots.len();
            let slot = *slots.entry(canonical.clone()).or_insert(next);
            gpus.entry(canonical).or_insert(slot);
            gpus.entry(names::normalize(&p.gpu)).or_insert(slot);
            if let Some(s) = &spec {
                for a in &s.aliases {
                    gpus.entry(names::normalize(a)).or_insert(slot);
                }
            }
            for c in &p.collectives {
                (samples
                    .entry((slot, c.op, c.group_size, c.link))
                    .or_default())
                .push(c);
            }
            let entry = points
                .entry((slot, names::normalize(&p.model)))
                .or_default();
            for s in &p.layers {
                match s.layer {
                    LayerKey::Index(i) => {
                        entry.0.entry((i, s.tp, s.ep)).or_default().push(s.point())
                    }
                    LayerKey::Kind(k) => entry
                        .1
                        .entry((kind_rank(k), s.tp, s.ep))
                        .or_default()
                        .push(s.point()),
                }
            }
        }
        let models = points
            .into_iter()
            .map(|(key, (by_index, by_kind))| {
                let m = ProfiledModel {
                    by_index: by_index
                        .into_iter()
                        .filter_map(|(k, pts)| Curve::new(pts).map(|c| (k, c)))
                        .collect(),
                    by_kind: by_kind
                        .into_iter()
                        .filter_map(|(k, pts)| Curve::new(pts).map(|c| (k, c)))
                        .collect(),
                };
                (key, m)
            })
            .collect();
        let collectives = (samples.into_iter())
            .map(|(k, v)| (k, curve_points(v.into_iter())))
            .collect();
        ProfileIndex {
            gpus,
            models,
            collectives,
        }
    }

    /// Same contract as [`ProfileDb::collective_bandwidth`], over the indexed profiles.
    pub fn collective_bandwidth(
        &self,
        gpu: &str,
        op: CollectiveOp,
        group_size: u32,
        link: LinkKind,
        message: Bytes,
    ) -> Option<BytesPerSec> {
        let slot = *self.gpus.get(&names::normalize(gpu))?;
        bandwidth_at(
            self.collectives.get(&(slot, op, group_size, link))?,
            message,
        )
    }

    /// The curves of `model` on `gpu` (names normalised; the GPU by any catalog alias of a
    /// profiled GPU): hold on to it to look up many layers without comparing names again.
    pub fn model(&self, gpu: &str, model: &str) -> Option<&ProfiledModel> {
        let slot = *self.gpus.get(&names::normalize(gpu))?;
        self.models.get(&(slot, names::normalize(model)))
    }

    /// Same contract as [`ProfileDb::layer_time`].
    #[allow(clippy::too_many_arguments)]
    pub fn layer_time(
        &self,
        gpu: &str,
        model: &str,
        layer: usize,
        kind: LayerKind,
        tp: u32,
        mbs: u64,
        how: Interpolation,
    ) -> Option<ProfiledTime> {
        self.layer_time_ep(gpu, model, layer, kind, tp, 1, mbs, how)
    }

    /// [`ProfileIndex::layer_time`] from samples measured at expert-parallel degree `ep`.
    #[allow(clippy::too_many_arguments)]
    pub fn layer_time_ep(
        &self,
        gpu: &str,
        model: &str,
        layer: usize,
        kind: LayerKind,
        tp: u32,
        ep: u32,
        mbs: u64,
        how: Interpolation,
    ) -> Option<ProfiledTime> {
        self.model(gpu, model)?
            .layer_time_ep(layer, kind, tp, ep, mbs, how)
    }
}

impl ProfiledModel {
    /// The times of layer `layer` (of kind `kind`) at `tp` and `mbs`: by index, else by kind
    /// (samples without expert parallelism).
    pub fn layer_time(
        &self,
        layer: usize,
        kind: LayerKind,
        tp: u32,
        mbs: u64,
        how: Interpolation,
    ) -> Option<ProfiledTime> {
        self.layer_time_ep(layer, kind, tp, 1, mbs, how)
    }

    /// [`ProfiledModel::layer_time`] from samples measured at expert-parallel degree `ep`.
    pub fn layer_time_ep(
        &self,
        layer: usize,
        kind: LayerKind,
        tp: u32,
        ep: u32,
        mbs: u64,
        how: Interpolation,
    ) -> Option<ProfiledTime> {
        self.by_index
            .get(&(layer, tp, ep))
            .or_else(|| self.by_kind.get(&(kind_rank(kind), tp, ep)))
            .map(|c| c.eval(mbs, how))
    }

    /// TP degrees measured for a layer (by index, else by kind), ascending.
    pub fn tp_degrees(&self, layer: usize, kind: LayerKind) -> Vec<u32> {
        let by_index: Vec<u32> = self
            .by_index
            .range((layer, 0, 0)..=(layer, u32::MAX, u32::MAX))
            .filter(|((_, _, ep), _)| *ep == 1)
            .map(|((_, tp, _), _)| *tp)
            .collect();
        if !by_index.is_empty() {
            return by_index;
        }
        let r = kind_rank(kind);
        self.by_kind
            .range((r, 0, 0)..=(r, u32::MAX, u32::MAX))
            .filter(|((_, _, ep), _)| *ep == 1)
            .map(|((_, tp, _), _)| *tp)
            .collect()
    }
}

#[cfg(test)]
mod tests;
