//! [`DittoExhaustive`], Ditto's optimal baseline (§3, Eq. 1–4): Oobleck's divide and conquer
//! extended to heterogeneous GPUs, `T(S', u, v, x)` over every per-type GPU-count vector `x`,
//! with a dense memo indexed by `x` in mixed radix (`Radix`, `Slot`, `Exhaustive`).

use super::{finish, stage_models, Candidate, Model, RealStage, Summary};
use crate::planners::{Outcome, Planner, PlannerError, Problem, Search, StopReason};
use crate::units::Seconds;

/// Ditto's optimal baseline: Oobleck's divide and conquer extended to heterogeneous GPUs (§3).
#[derive(Clone, Copy, Debug)]
pub struct DittoExhaustive {
    /// Its own cap on explored nodes, on top of the caller's limits: Eq. 4 is exponential in
    /// the number of GPU types. 20 M nodes take a few seconds in a release build.
    pub max_nodes: u64,
    /// Its cap on the memo's memory (`StopReason::MemoryLimit` when reached).
    pub max_memo_bytes: usize,
    pub micro_batch: Option<u64>,
}

impl Default for DittoExhaustive {
    fn default() -> Self {
        DittoExhaustive {
            max_nodes: 20_000_000,
            max_memo_bytes: MAX_MEMO_BYTES,
            micro_batch: None,
        }
    }
}

/// Per-type GPU-count vectors `x ≤ G` in mixed radix, with what the search asks of each.
struct Radix {
    stride: Vec<usize>,
    digits: Vec<Vec<usize>>,
    /// GPUs in `x`, and the fewest stages that can hold them (one type, ≤ M GPUs per stage).
    total: Vec<usize>,
    min_stages: Vec<usize>,
    /// Every split `x = x' + (x − x')`: (index of x', index of x − x'), filled on first use
    /// (all of them at once would be quadratic in the vector count).
    subs: Vec<Vec<(usize, usize)>>,
}

impl Radix {
    #[cfg(test)]
    fn new(max: &[usize], per_node: &[usize]) -> Radix {
        Radix::build(max, per_node, || true).expect("not interrupted")
    }

    /// How many count vectors `x ≤ max` there are, and the bytes the table and one memo row
    /// over them take (`None` past `usize`).
    fn size(max: &[usize]) -> Option<(usize, usize)> {
        let count = max.iter().try_fold(1usize, |a, &m| a.checked_mul(m + 1))?;
        // Per vector: its digits (a Vec and its heap block), total, min_stages, the subs Vec,
        // and one memo slot.
        let per = 3 * std::mem::size_of::<Vec<usize>>()
            + 8 * max.len()
            + 16
            + 2 * std::mem::size_of::<usize>()
            + std::mem::size_of::<Slot>();
        Some((count, count.checked_mul(per)?))
    }

    /// The table, or `None` when `keep_going` (asked every 65,536 vectors) says stop.
    fn build(
        max: &[usize],
        per_node: &[usize],
        mut keep_going: impl FnMut() -> bool,
    ) -> Option<Radix> {
        let mut stride = Vec::with_capacity(max.len());
        let mut count = 1;
        for &m in max {
            stride.push(count);
            count *= m + 1;
        }
        let mut digits: Vec<Vec<usize>> = Vec::with_capacity(count);
        for i in 0..count {
            if i % 65_536 == 0 && !keep_going() {
                return None;
            }
            let mut rest = i;
            digits.push(
                max.iter()
                    .map(|&m| {
                        let d = rest % (m + 1);
                        rest /= m + 1;
                        d
                    })
                    .collect(),
            );
        }
        let total = digits.iter().map(|d| d.iter().sum()).collect();
        let min_stages = digits
            .iter()
            .map(|d| {
                d.iter()
                    .zip(per_node)
                    .map(|(&c, &p)| c.div_ceil(p.max(1)))
                    .sum()
            })
            .collect();
        let subs = vec![Vec::new(); count];
        Some(Radix {
            stride,
            digits,
            total,
            min_stages,
            subs,
        })
    }
    fn index(&self, d: &[usize]) -> usize {
        d.iter().zip(&self.stride).map(|(a, s)| a * s).sum()
    }
    /// Fills `subs[xi]`: every x' ≤ x, in mixed-radix order of x'.
    fn fill_subs(&mut self, xi: usize) {
        if !self.subs[xi].is_empty() {
            return;
        }
        let x = self.digits[xi].clone();
        let mut xl = vec![0usize; x.len()];
        let mut out = Vec::new();
        loop {
            let xr: Vec<usize> = x.iter().zip(&xl).map(|(a, b)| a - b).collect();
            out.push((self.index(&xl), self.index(&xr)));
            let mut i = 0;
            loop {
                if i == x.len() {
                    out.sort_unstable();
                    self.subs[xi] = out;
                    return;
                }
                if xl[i] < x[i] {
                    xl[i] += 1;
                    break;
                }
                xl[i] = 0;
                i += 1;
            }
        }
    }
    /// `sp` stages can hold `x` exactly (each at least one GPU, at most one node of one type).
    fn feasible(&self, sp: usize, xi: usize) -> bool {
        sp >= 1 && sp <= self.total[xi] && sp >= self.min_stages[xi]
    }
}

/// One memo cell of §3's divide and conquer, `T(sp, u, v, x)`: its summary (Eq. 1–3; the stage
/// count is `sp`) and how it was split (`s = 0`: one stage on type `xl`, config `cfg`;
/// otherwise `s` left stages ending at layer `k` on the left sub-vector `xl`).
#[derive(Clone, Copy)]
struct Slot {
    t1: f64,
    t3: f64,
    klat: f64,
    kstar: u32,
    xl: u32,
    k: u16,
    s: u16,
    cfg: u16,
    state: u8,
}

const UNSOLVED: u8 = 0;
const NONE: u8 = 1;
const SOME: u8 = 2;

impl Slot {
    const EMPTY: Slot = Slot {
        t1: 0.0,
        t3: 0.0,
        klat: 0.0,
        kstar: 0,
        xl: 0,
        k: 0,
        s: 0,
        cfg: 0,
        state: UNSOLVED,
    };

    fn summary(&self, sp: usize) -> Summary {
        Summary {
            t1: self.t1,
            t3: self.t3,
            kstar: self.kstar as usize,
            klat: self.klat,
            stages: sp,
        }
    }
}

/// The exhaustive search's state. The memo is dense: one row of `radix.digits.len()` slots per
/// `(sp, u, v)`, allocated when first reached, indexed by the count vector `x`. Because the
/// vectors are in mixed radix, `index(x − x') = index(x) − index(x')`, so the right half of a
/// split is found by a subtraction and both halves are contiguous walks of their rows.
struct Exhaustive<'m, 'p> {
    m: &'m Model<'p>,
    radix: Radix,
    l1: usize,
    rows: Vec<Option<Box<[Slot]>>>,
    solved: usize,
    memo_bytes: usize,
    max_memo_bytes: usize,
    cap: u64,
    /// The planner's own cap that stopped the search (nodes or memo memory), if any.
    capped: Option<StopReason>,
}

/// The most memory the exhaustive search's memo may take; reaching it stops the search like
/// [`DittoExhaustive::max_nodes`] (`StopReason::NodeLimit`).
const MAX_MEMO_BYTES: usize = 4 << 30;

impl<'m, 'p> Exhaustive<'m, 'p> {
    fn new(m: &'m Model<'p>, radix: Radix, cap: u64, max_memo_bytes: usize) -> Exhaustive<'m, 'p> {
        let l1 = m.layers + 1;
        let max_sp = m.gpus.min(m.layers);
        Exhaustive {
            m,
            radix,
            l1,
            rows: vec![None; (max_sp + 1) * l1 * l1],
            solved: 0,
            memo_bytes: 0,
            max_memo_bytes,
            cap,
            capped: None,
        }
    }

    fn row(&self, sp: usize, u: usize, v: usize) -> usize {
        (sp * self.l1 + u) * self.l1 + v
    }

    fn slot(&self, sp: usize, u: usize, v: usize, xi: usize) -> &Slot {
        match &self.rows[self.row(sp, u, v)] {
            Some(r) => &r[xi],
            None => &Slot::EMPTY,
        }
    }

    fn tick(&mut self, search: &mut Search<'_>) -> bool {
        if search.explored() >= self.cap {
            self.capped = Some(StopReason::NodeLimit);
            return false;
        }
        search.tick()
    }

    /// Solves `T(sp, u, v, x)` into its slot; `Err(())` when the search stopped.
    fn solve(
        &mut self,
        sp: usize,
        u: usize,
        v: usize,
        xi: usize,
        search: &mut Search<'_>,
    ) -> Result<(), ()> {
        let r = self.row(sp, u, v);
        if let Some(row) = &self.rows[r] {
            if row[xi].state != UNSOLVED {
                return Ok(());
            }
        } else {
            // The dense rows' memory is capped like the node count (the 256-GPU cluster has
            // 545k count vectors: 22 MB a row).
            let bytes = self.radix.digits.len() * std::mem::size_of::<Slot>();
            if self.memo_bytes + bytes > self.max_memo_bytes {
                self.capped = Some(StopReason::MemoryLimit);
                return Err(());
            }
            self.memo_bytes += bytes;
            self.rows[r] = Some(vec![Slot::EMPTY; self.radix.digits.len()].into_boxed_slice());
        }
        let m = self.m;
        let mut out = Slot {
            state: NONE,
            ..Slot::EMPTY
        };
        if sp == 1 {
            let x = &self.radix.digits[xi];
            let mut nz = (0..x.len()).filter(|&i| x[i] > 0);
            if let (Some(ty), None) = (nz.next(), nz.next()) {
                let left = (m.layers - v).min(m.gpus - x[ty]);
                if let Some((lat, cfg)) = m.stage(ty, x[ty], u, v, m.inflight(left)) {
                    out = Slot {
                        t1: lat,
                        t3: 0.0,
                        klat: lat,
                        kstar: 1,
                        xl: ty as u32,
                        k: 0,
                        s: 0,
                        cfg: cfg as u16,
                        state: SOME,
                    };
                }
            }
        } else if v - u >= sp {
            self.radix.fill_subs(xi);
            let mut best = f64::INFINITY;
            let mut lis: Vec<usize> = Vec::new();
            for s in 1..sp {
                // The sub-vectors both halves can hold, once per s (the original order: x').
                lis.clear();
                lis.extend(
                    self.radix.subs[xi]
                        .iter()
                        .filter(|&&(li, ri)| {
                            self.radix.feasible(s, li) && self.radix.feasible(sp - s, ri)
                        })
                        .map(|&(li, _)| li),
                );
                if lis.is_empty() {
                    continue;
                }
                for kk in u + s..=v - (sp - s) {
                    // Every candidate ticks and has both halves solved, in the original order.
                    let (rl, rr) = (self.row(s, u, kk), self.row(sp - s, kk, v));
                    let state = |rows: &[Option<Box<[Slot]>>], r: usize, i: usize| {
                        rows[r].as_deref().map_or(UNSOLVED, |row| row[i].state)
                    };
                    for &li in &lis {
                        if !self.tick(search) {
                            return Err(());
                        }
                        let mut left = state(&self.rows, rl, li);
                        if left == UNSOLVED {
                            self.solve(s, u, kk, li, search)?;
                            left = state(&self.rows, rl, li);
                        }
                        if left == SOME && state(&self.rows, rr, xi - li) == UNSOLVED {
                            self.solve(sp - s, kk, v, xi - li, search)?;
                        }
                    }
                    let (Some(lrow), Some(rrow)) =
                        (self.rows[rl].as_deref(), self.rows[rr].as_deref())
                    else {
                        continue;
                    };
                    for &li in &lis {
                        let (l, r) = (&lrow[li], &rrow[xi - li]);
                        if l.state != SOME || r.state != SOME {
                            continue;
                        }
                        let sum = Summary::combine(&l.summary(s), &r.summary(sp - s));
                        let t = sum.total(m.nb);
                        if t < best {
                            best = t;
                            out = Slot {
                                t1: sum.t1,
                                t3: sum.t3,
                                klat: sum.klat,
                                kstar: sum.kstar as u32,
                                xl: li as u32,
                                k: kk as u16,
                                s: s as u16,
                                cfg: 0,
                                state: SOME,
                            };
                        }
                    }
                }
            }
        }
        self.solved += 1;
        if let Some(row) = self.rows[r].as_deref_mut() {
            row[xi] = out;
        }
        Ok(())
    }

    fn unwind(&self, sp: usize, u: usize, v: usize, xi: usize, out: &mut Vec<RealStage>) {
        let e = self.slot(sp, u, v, xi);
        if e.state != SOME {
            return;
        }
        let (s, k, xl) = (e.s as usize, e.k as usize, e.xl as usize);
        if s == 0 {
            out.push(RealStage {
                u,
                v,
                ty: xl,
                x: self.radix.digits[xi][xl],
                cfg: e.cfg as usize,
                lat: e.klat,
            });
        } else {
            self.unwind(s, u, k, xl, out);
            self.unwind(sp - s, k, v, xi - xl, out);
        }
    }
}

impl Planner for DittoExhaustive {
    fn name(&self) -> &'static str {
        "ditto-exhaustive"
    }

    fn description(&self) -> &'static str {
        "Ditto's optimal baseline (§3): Oobleck's divide and conquer over every per-type GPU split (small clusters)"
    }

    fn find(
        &self,
        problem: &Problem<'_>,
        search: &mut Search<'_>,
    ) -> Result<Outcome, PlannerError> {
        let models = stage_models(problem, self.micro_batch)?;
        let mut cands = Vec::new();
        let mut capped: Option<StopReason> = None;
        let mut states = 0usize;
        let mut too_large: Option<usize> = None;
        'outer: for m in &models {
            let full: Vec<usize> = m.types.iter().map(|t| t.gpus.len()).collect();
            let per_node: Vec<usize> = m.types.iter().map(|t| t.per_node).collect();
            // The table of per-type GPU splits and one memo row over it must fit the memo cap
            // (34 M splits at 1,024 GPUs of three types: 27 s and gigabytes to build), and
            // building it must stop at the time limit.
            match Radix::size(&full) {
                Some((_, bytes)) if bytes <= self.max_memo_bytes => {}
                size => {
                    capped = Some(StopReason::MemoryLimit);
                    too_large = size.map(|(n, _)| n);
                    break 'outer;
                }
            }
            let Some(radix) = Radix::build(&full, &per_node, || search.within_time()) else {
                capped = Some(StopReason::TimeLimit);
                break 'outer;
            };
            let top = radix.index(&full);
            let mut ex = Exhaustive::new(m, radix, self.max_nodes, self.max_memo_bytes);
            for sp in 1..=m.gpus.min(m.layers) {
                if !ex.radix.feasible(sp, top) {
                    continue;
                }
                match ex.solve(sp, 0, m.layers, top, search) {
                    Ok(()) if ex.slot(sp, 0, m.layers, top).state == SOME => {
                        let mut stages = Vec::new();
                        ex.unwind(sp, 0, m.layers, top, &mut stages);
                        cands.push(Candidate {
                            cost: m.cost(&stages),
                            stages,
                            b: m.b,
                            how: "exhaustive heterogeneous divide and conquer (§3)",
                        });
                    }
                    Ok(()) => {}
                    Err(()) => {
                        capped = capped.or(ex.capped);
                        states += ex.solved;
                        break 'outer;
                    }
                }
            }
            states += ex.solved;
        }
        for c in &cands {
            search.offer(Seconds(c.cost));
        }
        let stop = capped.unwrap_or_else(|| search.stop_reason());
        let mut notes = vec![format!(
            "{} subproblems T(S', u, v, x) solved over {} micro-batch size(s){}",
            states,
            models.len(),
            if stop != StopReason::Exhausted {
                format!("; stopped ({stop}) before the space was exhausted: the answer is the best found so far")
            } else {
                String::new()
            }
        )];
        if let Some(n) = too_large {
            notes.push(format!(
                "the {n} per-type GPU splits of this cluster need more memory than the memo's cap \
                 of {}; ditto-exhaustive is for small clusters (`ditto` folds large ones)",
                crate::units::Bytes(self.max_memo_bytes as f64)
            ));
        }
        finish(problem, &models, cands, search, stop, notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radix_round_trips() {
        let r = Radix::new(&[2, 3], &[2, 2]);
        assert_eq!(r.digits.len(), 12);
        for i in 0..r.digits.len() {
            assert_eq!(r.index(&r.digits[i]), i);
        }
        // (2, 3): 3 × 4 sub-vectors; at least 1 + 2 stages, at most 5.
        let top = r.index(&[2, 3]);
        let mut r = r;
        r.fill_subs(top);
        assert_eq!(r.subs[top].len(), 12);
        assert!(!r.feasible(2, top) && r.feasible(3, top) && r.feasible(5, top));
        assert!(!r.feasible(6, top));
    }

    // The exhaustive search as first written (a hash-map memo, one candidate at a time): the
    // reference the dense search must reproduce exactly.
    use std::collections::HashMap;
    /// A small multiplicative hasher for the memo (a cache, never iterated).
    #[derive(Default)]
    struct MemoHasher(u64);

    impl std::hash::Hasher for MemoHasher {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.write_u64(b as u64);
            }
        }
        fn write_u64(&mut self, i: u64) {
            // SplitMix64's finaliser (Steele, Lea and Flood, OOPSLA 2014): every key bit reaches
            // the low bits the table indexes with.
            let mut z = (self.0 ^ i).wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            self.0 = z ^ (z >> 31);
        }
    }

    type Memo = HashMap<u64, Option<XEntry>, std::hash::BuildHasherDefault<MemoHasher>>;

    /// Memo entry of §3's divide and conquer: summary, split (`s = 0`: one stage of type `xl`).
    #[derive(Clone, Copy)]
    struct XEntry {
        sum: Summary,
        k: usize,
        s: usize,
        xl: usize,
        cfg: usize,
    }

    struct RefExhaustive<'m, 'p> {
        m: &'m Model<'p>,
        radix: Radix,
        memo: Memo,
        cap: u64,
        capped: bool,
    }

    fn key(sp: usize, u: usize, v: usize, xi: usize) -> u64 {
        ((sp as u64) << 56) | ((u as u64) << 44) | ((v as u64) << 32) | xi as u64
    }

    impl RefExhaustive<'_, '_> {
        fn tick(&mut self, search: &mut Search<'_>) -> bool {
            if search.explored() >= self.cap {
                self.capped = true;
                return false;
            }
            search.tick()
        }

        /// `T(sp, u, v, x)`; `Err(())` when the search stopped.
        fn solve(
            &mut self,
            sp: usize,
            u: usize,
            v: usize,
            xi: usize,
            search: &mut Search<'_>,
        ) -> Result<Option<XEntry>, ()> {
            if let Some(e) = self.memo.get(&key(sp, u, v, xi)) {
                return Ok(*e);
            }
            let m = self.m;
            let mut best: Option<(f64, XEntry)> = None;
            if sp == 1 {
                let x = &self.radix.digits[xi];
                let nz: Vec<usize> = (0..x.len()).filter(|&i| x[i] > 0).collect();
                if nz.len() == 1 {
                    let ty = nz[0];
                    let left = (m.layers - v).min(m.gpus - x[ty]);
                    if let Some((lat, cfg)) = m.stage(ty, x[ty], u, v, m.inflight(left)) {
                        best = Some((
                            0.0,
                            XEntry {
                                sum: Summary::base(lat),
                                k: 0,
                                s: 0,
                                xl: ty,
                                cfg,
                            },
                        ));
                    }
                }
            } else if v - u >= sp {
                self.radix.fill_subs(xi);
                for s in 1..sp {
                    for kk in u + s..=v - (sp - s) {
                        for j in 0..self.radix.subs[xi].len() {
                            let (li, ri) = self.radix.subs[xi][j];
                            if !self.radix.feasible(s, li) || !self.radix.feasible(sp - s, ri) {
                                continue;
                            }
                            if !self.tick(search) {
                                return Err(());
                            }
                            let Some(l) = self.solve(s, u, kk, li, search)? else {
                                continue;
                            };
                            let Some(r) = self.solve(sp - s, kk, v, ri, search)? else {
                                continue;
                            };
                            let sum = Summary::combine(&l.sum, &r.sum);
                            let t = sum.total(m.nb);
                            if best.as_ref().is_none_or(|(b, _)| t < *b) {
                                best = Some((
                                    t,
                                    XEntry {
                                        sum,
                                        k: kk,
                                        s,
                                        xl: li,
                                        cfg: 0,
                                    },
                                ));
                            }
                        }
                    }
                }
            }
            let e = best.map(|(_, e)| e);
            self.memo.insert(key(sp, u, v, xi), e);
            Ok(e)
        }

        fn unwind(&self, sp: usize, u: usize, v: usize, xi: usize, out: &mut Vec<RealStage>) {
            let Some(Some(e)) = self.memo.get(&key(sp, u, v, xi)) else {
                return;
            };
            if e.s == 0 {
                out.push(RealStage {
                    u,
                    v,
                    ty: e.xl,
                    x: self.radix.digits[xi][e.xl],
                    cfg: e.cfg,
                    lat: e.sum.klat,
                });
            } else {
                let (x, xl) = (&self.radix.digits[xi], &self.radix.digits[e.xl]);
                let xr: Vec<usize> = x.iter().zip(xl).map(|(a, b)| a - b).collect();
                self.unwind(e.s, u, e.k, e.xl, out);
                self.unwind(sp - e.s, e.k, v, self.radix.index(&xr), out);
            }
        }
    }

    #[test]
    fn dense_exhaustive_equals_the_hash_map_reference() {
        use crate::cluster::spec::parse_cluster_toml;
        let model = crate::model::TransformerConfig::gpt("tiny-gpt-6", 6, 1024, 16, 1024).build();
        let cluster = parse_cluster_toml(
            r#"
name = "three-types"
[[node_group]]
gpu = "v100-sxm2-32gb"
gpus_per_node = 2
nodes = 1
inter_node_bandwidth = "100 Gbps"
[[node_group]]
gpu = "t4"
gpus_per_node = 2
nodes = 1
inter_node_bandwidth = "100 Gbps"
[[node_group]]
gpu = "a100-sxm4-80gb"
gpus_per_node = 1
nodes = 2
inter_node_bandwidth = "100 Gbps"
"#,
        )
        .unwrap();
        let problem = Problem {
            model: &model,
            cluster: &cluster,
            global_batch: 16,
            seq_len: 1024,
            compute: &crate::cost::Analytic,
            options: Default::default(),
        };
        for b in [1, 4] {
            let m = Model::new(&problem, b);
            let full: Vec<usize> = m.types.iter().map(|t| t.gpus.len()).collect();
            let per_node: Vec<usize> = m.types.iter().map(|t| t.per_node).collect();
            let top = Radix::new(&full, &per_node).index(&full);
            let mut dense =
                Exhaustive::new(&m, Radix::new(&full, &per_node), u64::MAX, MAX_MEMO_BYTES);
            let mut reference = RefExhaustive {
                m: &m,
                radix: Radix::new(&full, &per_node),
                memo: Memo::default(),
                cap: u64::MAX,
                capped: false,
            };
            let (mut s1, mut s2) = (Search::unbounded(), Search::unbounded());
            let mut answers = 0;
            for sp in 1..=m.gpus.min(m.layers) {
                if !dense.radix.feasible(sp, top) {
                    continue;
                }
                dense.solve(sp, 0, m.layers, top, &mut s1).unwrap();
                let r = reference.solve(sp, 0, m.layers, top, &mut s2).unwrap();
                let (mut a, mut c) = (Vec::new(), Vec::new());
                dense.unwind(sp, 0, m.layers, top, &mut a);
                reference.unwind(sp, 0, m.layers, top, &mut c);
                assert_eq!(a, c, "b {b}, {sp} stages");
                answers += usize::from(r.is_some());
            }
            assert!(answers > 2, "b {b}: {answers}");
            // Same candidates evaluated, same subproblems, and every memo entry identical.
            assert_eq!(s1.explored(), s2.explored());
            assert_eq!(dense.solved, reference.memo.len());
            for (&key, e) in &reference.memo {
                let (sp, u, v, xi) = (
                    (key >> 56) as usize,
                    ((key >> 44) & 0xfff) as usize,
                    ((key >> 32) & 0xfff) as usize,
                    (key & 0xffff_ffff) as usize,
                );
                let d = dense.slot(sp, u, v, xi);
                match e {
                    None => assert_eq!(d.state, NONE),
                    Some(e) => {
                        assert_eq!(d.state, SOME);
                        assert_eq!(d.summary(sp), e.sum);
                        let split = (d.s as usize, d.k as usize, d.xl as usize);
                        assert_eq!(split, (e.s, if e.s == 0 { 0 } else { e.k }, e.xl));
                    }
                }
            }
        }
    }
}
