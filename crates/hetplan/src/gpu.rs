//! The GPU catalog: peak rates, memory and links of each GPU type, every value with its source.
//!
//! Conventions (see `units`): bandwidths per direction; `peak_tensor` is the dense (no sparsity)
//! BF16 tensor-core rate, or FP16 on GPUs without BF16 (V100, T4, P100 has no tensor cores and
//! lists its FP16 vector rate); `peak_fp32` the non-tensor FP32 rate.

use crate::names;
use crate::units::{Bytes, BytesPerSec, FlopPerSec};
use serde::{Deserialize, Serialize};

/// GPU micro-architecture: the cost model's achievable fractions of peak depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arch {
    Pascal,
    Volta,
    Turing,
    Ampere,
    Ada,
    Hopper,
    Blackwell,
    Cdna2,
    Cdna3,
}

/// One GPU type. Values may be overridden per cluster (see `cluster`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuSpec {
    /// Canonical catalog name, e.g. `a100-sxm4-80gb`.
    pub name: String,
    /// Other accepted spellings (compared after `names::normalize`).
    pub aliases: Vec<String>,
    pub arch: Arch,
    /// Device memory as the vendor states it.
    pub memory: Bytes,
    /// Dense BF16 (or FP16) tensor-core peak.
    pub peak_tensor: FlopPerSec,
    /// Non-tensor FP32 peak.
    pub peak_fp32: FlopPerSec,
    pub hbm_bandwidth: BytesPerSec,
    /// GPU-to-GPU NVLink/Infinity Fabric bandwidth per GPU, per direction; `None` without one.
    pub nvlink_bandwidth: Option<BytesPerSec>,
    /// Host link (PCIe) bandwidth per direction.
    pub pcie_bandwidth: BytesPerSec,
    /// Where the numbers come from.
    pub source: String,
}

impl GpuSpec {
    /// Default intra-node GPU-to-GPU bandwidth: NVLink when present, otherwise PCIe.
    pub fn default_intra_node_bandwidth(&self) -> BytesPerSec {
        self.nvlink_bandwidth.unwrap_or(self.pcie_bandwidth)
    }
}

/// A catalog name that matched nothing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("unknown GPU `{name}`{}", names::hint_suffix(.hint))]
pub struct UnknownGpu {
    pub name: String,
    pub hint: Option<String>,
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

#[allow(clippy::too_many_arguments)]
fn spec(
    name: &str,
    aliases: &[&str],
    arch: Arch,
    memory: Bytes,
    tensor_tflops: f64,
    fp32_tflops: f64,
    hbm_gb_s: f64,
    nvlink_gb_s_per_dir: Option<f64>,
    pcie_gb_s_per_dir: f64,
    source: &str,
) -> GpuSpec {
    GpuSpec {
        name: name.to_string(),
        aliases: aliases.iter().map(|a| a.to_string()).collect(),
        arch,
        memory,
        peak_tensor: FlopPerSec::tflops(tensor_tflops),
        peak_fp32: FlopPerSec::tflops(fp32_tflops),
        hbm_bandwidth: BytesPerSec::gb_s(hbm_gb_s),
        nvlink_bandwidth: nvlink_gb_s_per_dir.map(BytesPerSec::gb_s),
        pcie_bandwidth: BytesPerSec::gb_s(pcie_gb_s_per_dir),
        source: source.to_string(),
    }
}

/// PCIe host-link bandwidth per direction, x16: Gen3 15.75 GB/s, Gen4 31.5 GB/s, Gen5 63 GB/s
/// (PCI-SIG base specifications 3.0/4.0/5.0: 8/16/32 GT/s per lane, 128b/130b encoding).
const PCIE3: f64 = 15.75;
const PCIE4: f64 = 31.5;
const PCIE5: f64 = 63.0;

/// Every GPU type hetplan knows, in a fixed order (listing order of `hetplan gpus`).
pub fn catalog() -> Vec<GpuSpec> {
    use Arch::*;
    vec![
        // NVIDIA V100 datasheet (2020): SXM2 125 TFLOPS tensor, 15.7 FP32, 900 GB/s HBM2,
        // NVLink 300 GB/s total (150 GB/s per direction).
        spec(
            "v100-sxm2-16gb",
            &["v100", "v100-16gb", "v100-sxm2", "v100-16", "tesla-v100"],
            Volta,
            Bytes(16.0 * GIB),
            125.0,
            15.7,
            900.0,
            Some(150.0),
            PCIE3,
            "NVIDIA V100 Tensor Core GPU datasheet (2020)",
        ),
        // NVIDIA A100 datasheet (2021): 312 TFLOPS BF16 dense, 19.5 FP32, 80GB SXM 2039 GB/s,
        // NVLink 600 GB/s total (300 GB/s per direction), PCIe Gen4.
        spec(
            "a100-sxm4-80gb",
            &["a100-80gb", "a100_80gb", "a100-80", "a100-sxm-80gb"],
            Ampere,
            Bytes(80.0 * GIB),
            312.0,
            19.5,
            2039.0,
            Some(300.0),
            PCIE4,
            "NVIDIA A100 Tensor Core GPU datasheet (2021)",
        ),
        // Same datasheet: A100 40GB SXM, 1555 GB/s HBM2.
        spec(
            "a100-sxm4-40gb",
            &["a100", "a100-40gb", "a100-40", "a100-sxm-40gb"],
            Ampere,
            Bytes(40.0 * GIB),
            312.0,
            19.5,
            1555.0,
            Some(300.0),
            PCIE4,
            "NVIDIA A100 Tensor Core GPU datasheet (2021)",
        ),
        // NVIDIA H100 datasheet: SXM5 989 TFLOPS BF16 dense (1979 with sparsity), 67 FP32,
        // 3.35 TB/s HBM3, NVLink 900 GB/s total (450 per direction), PCIe Gen5.
        spec(
            "h100-sxm5-80gb",
            &["h100", "h100-sxm", "h100-80gb", "h100-sxm5"],
            Hopper,
            Bytes(80.0 * GIB),
            989.0,
            67.0,
            3350.0,
            Some(450.0),
            PCIE5,
            "NVIDIA H100 Tensor Core GPU datasheet (2023)",
        ),
        // NVIDIA T4 datasheet: 65 TFLOPS FP16 tensor, 8.1 FP32, 320 GB/s GDDR6, PCIe Gen3.
        spec(
            "t4",
            &["t4-16gb", "tesla-t4"],
            Turing,
            Bytes(16.0 * GIB),
            65.0,
            8.1,
            320.0,
            None,
            PCIE3,
            "NVIDIA T4 Tensor Core GPU datasheet",
        ),
    ]
}

/// Finds a GPU by canonical name or alias (case, `_` and spaces ignored).
pub fn lookup(name: &str) -> Result<GpuSpec, UnknownGpu> {
    let n = names::normalize(name);
    let all = catalog();
    if let Some(g) = all
        .iter()
        .find(|g| names::normalize(&g.name) == n || g.aliases.iter().any(|a| names::normalize(a) == n))
    {
        return Ok(g.clone());
    }
    let candidates: Vec<&str> = all
        .iter()
        .flat_map(|g| std::iter::once(g.name.as_str()).chain(g.aliases.iter().map(|a| a.as_str())))
        .collect();
    Err(UnknownGpu {
        name: name.to_string(),
        hint: names::nearest(name, candidates.iter().copied()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve() {
        assert_eq!(lookup("V100").unwrap().name, "v100-sxm2-16gb");
        assert_eq!(lookup("a100_80gb").unwrap().name, "a100-sxm4-80gb");
    }

    #[test]
    fn unknown_names_get_a_hint() {
        let e = lookup("a100-sxm4-80g").unwrap_err();
        assert_eq!(e.hint.as_deref(), Some("a100-sxm4-80gb"));
    }
}
