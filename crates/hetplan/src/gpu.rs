//! The GPU catalog: peak rates, memory and links of each GPU type, every value with its source.
//!
//! Conventions (see `units`): bandwidths per direction; `peak_tensor` is the dense (no sparsity)
//! BF16 tensor-core rate, or FP16 on GPUs without BF16 (V100, T4, P100 has no tensor cores and
//! lists its FP16 vector rate); `peak_fp32` the non-tensor FP32 rate.

use crate::names;
use crate::units::{Bytes, BytesPerSec, FlopPerSec};
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;

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
    /// Device memory as CUDA reports it (`cudaDeviceProp::totalGlobalMem`, what
    /// `torch.cuda.get_device_properties(d).total_memory` returns; HIP's on AMD parts): what a
    /// plan's memory must fit in. Less than the datasheet's figure, see `catalog`.
    pub memory: Bytes,
    /// The vendor's datasheet capacity in its own "GB" (`80` for an "80GB" H100), for display
    /// only: it is neither the usable capacity nor, for every part, a power of two.
    pub datasheet_memory_gb: u32,
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

/// A GPU's memory: the datasheet's "GB" and the MiB CUDA reports.
struct Mem {
    datasheet_gb: u32,
    cuda_mib: u32,
}

fn mem(datasheet_gb: u32, cuda_mib: u32) -> Mem {
    Mem {
        datasheet_gb,
        cuda_mib,
    }
}

#[allow(clippy::too_many_arguments)]
fn spec(
    name: &str,
    aliases: &[&str],
    arch: Arch,
    memory: Mem,
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
        memory: Bytes::mib(memory.cuda_mib as f64),
        datasheet_memory_gb: memory.datasheet_gb,
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
///
/// Memory is what CUDA (HIP on AMD) reports as the device's total, `cudaDeviceProp::
/// totalGlobalMem`, in MiB as deviceQuery prints it, from published outputs on CUDA 12 or later
/// drivers where one was found (the smaller when drivers differ); each entry says where its
/// figure comes from, and those marked DERIVED say how they were derived. It is less than the
/// datasheet's "GB" (kept in `datasheet_memory_gb`): ECC on GDDR parts (a T4 shows 14,918 MiB
/// of its 16 GiB), the driver's reserved region (an H100 80GB shows 81,079 MiB to CUDA, 81,559
/// to nvidia-smi, whose `memory.total` since the R510 drivers includes that region), and HBM
/// capacity the vendor does not expose (an H200 "141 GB"). What the framework itself holds
/// after that (the CUDA context, workspaces) the cost model charges separately
/// (`cost::constants::RUNTIME_RESERVED_GIB`). `peak_tensor` on GeForce/Quadro/workstation parts is the FP16
/// tensor rate *with FP32 accumulate* (what mixed-precision training uses), from NVIDIA's
/// architecture whitepapers, since their datasheets quote the sparse or FP16-accumulate rate.
pub fn catalog() -> Vec<GpuSpec> {
    use Arch::*;
    vec![
        // ---------------------------------------------------------------- Volta (V100)
        // NVIDIA V100 Tensor Core GPU datasheet (2020): SXM2 125 TFLOPS tensor (FP16), 15.7
        // FP32, 900 GB/s HBM2, NVLink 300 GB/s total (150 GB/s per direction), PCIe Gen3.
        spec(
            "v100-sxm2-16gb",
            &[
                "v100",
                "v100-16gb",
                "v100-sxm2",
                "v100-16",
                "tesla-v100",
                "v100-sxm-16gb",
            ],
            Volta,
            // Memory as CUDA sees it: 16,144 MiB (16,928,342,016 B): CUDA deviceQuery, driver CUDA 12.4 (16,128 MiB under
            // CUDA 11.0); nvidia-smi memory.total 16,160 MiB.
            mem(16, 16144),
            125.0,
            15.7,
            900.0,
            Some(150.0),
            PCIE3,
            "NVIDIA V100 Tensor Core GPU datasheet (2020)",
        ),
        // Same datasheet: the 32 GB SXM2 part has the same rates and links.
        spec(
            "v100-sxm2-32gb",
            &["v100-32gb", "v100-32", "v100-sxm-32gb", "v100-sxm2-32"],
            Volta,
            // Memory as CUDA sees it: 32,494 MiB (34,072,559,616 B): CUDA deviceQuery, driver CUDA 12.9 (32,510 MiB under
            // 11.2-11.4, 32,480 under 10.0).
            mem(32, 32494),
            125.0,
            15.7,
            900.0,
            Some(150.0),
            PCIE3,
            "NVIDIA V100 Tensor Core GPU datasheet (2020)",
        ),
        // Same datasheet: V100 PCIe 112 TFLOPS tensor, 14 FP32, 900 GB/s, no NVLink.
        spec(
            "v100-pcie-16gb",
            &["v100-pcie", "v100-pcie-16"],
            Volta,
            // Memory as CUDA sees it: DERIVED: 16,144 MiB, the SXM2 16 GB part's CUDA 12.4 figure (same four HBM2 stacks).
            // The only published deviceQuery found is 16,152 MiB under a CUDA 9.0 driver, and newer
            // drivers reserve more (the SXM2 part went 16,160 -> 16,144), so the smaller value.
            mem(16, 16144),
            112.0,
            14.0,
            900.0,
            None,
            PCIE3,
            "NVIDIA V100 Tensor Core GPU datasheet (2020)",
        ),
        spec(
            "v100-pcie-32gb",
            &["v100-pcie-32"],
            Volta,
            // Memory as CUDA sees it: DERIVED: 32,494 MiB, the SXM2 32 GB part's CUDA 12.9 figure; published deviceQuery
            // outputs of this card are 32,480-32,510 MiB under CUDA 10.x drivers.
            mem(32, 32494),
            112.0,
            14.0,
            900.0,
            None,
            PCIE3,
            "NVIDIA V100 Tensor Core GPU datasheet (2020)",
        ),
        // --------------------------------------------------------------- Pascal (P100)
        // NVIDIA Tesla P100 PCIe datasheet (2016): 16 GB HBM2, 732 GB/s, 18.7 TFLOPS FP16
        // (no tensor cores: the FP16 vector rate), 9.3 FP32, PCIe Gen3, no NVLink. The PCIe
        // card is the one clouds rent (e.g. Google Cloud's `nvidia-tesla-p100`); the SXM2 part
        // (21.2 FP16, 10.6 FP32, NVLink 160 GB/s total) is not in the catalog.
        spec(
            "p100-pcie-16gb",
            &["p100", "p100-16gb", "p100-pcie", "p100-16", "tesla-p100"],
            Pascal,
            // Memory as CUDA sees it: 16,281 MiB (17,071,734,784 B): CUDA deviceQuery, drivers CUDA 11.2 and 11.4.
            mem(16, 16281),
            18.7,
            9.3,
            732.0,
            None,
            PCIE3,
            "NVIDIA Tesla P100 PCIe datasheet (2016)",
        ),
        // ---------------------------------------------------------------- Turing (T4)
        // NVIDIA T4 Tensor Core GPU datasheet (2019): 65 TFLOPS FP16 tensor (mixed precision),
        // 8.1 FP32, 16 GB GDDR6 at 320 GB/s, PCIe Gen3.
        spec(
            "t4",
            &["t4-16gb", "tesla-t4", "nvidia-t4"],
            Turing,
            // Memory as CUDA sees it: 14,918 MiB (15,642,329,088 B): CUDA deviceQuery, driver CUDA 12.5 (15,109-15,110 MiB
            // under 11.x); nvidia-smi memory.total 15,360 MiB. ECC, on by default, takes 1/16.
            mem(16, 14918),
            65.0,
            8.1,
            320.0,
            None,
            PCIE3,
            "NVIDIA T4 Tensor Core GPU datasheet (2019)",
        ),
        // ------------------------------------------------------------------- Ada (L4)
        // NVIDIA L4 Tensor Core GPU datasheet (2023): BF16 tensor 242 TFLOPS with sparsity
        // (121 dense), 30.3 FP32, 24 GB GDDR6 at 300 GB/s, PCIe Gen4 x16, no NVLink.
        spec(
            "l4",
            &["l4-24gb", "nvidia-l4"],
            Ada,
            // Memory as CUDA sees it: 22,518 MiB (23,612,293,120 B): CUDA deviceQuery, driver CUDA 12.0; nvidia-smi
            // memory.total 23,034 MiB (Modal, "Why does an NVIDIA H100 80GB card offer 85.52 GB?").
            mem(24, 22518),
            121.0,
            30.3,
            300.0,
            None,
            PCIE4,
            "NVIDIA L4 Tensor Core GPU datasheet (2023)",
        ),
        // ------------------------------------------------------------ Ampere (A10, A10G)
        // NVIDIA A10 Tensor Core GPU datasheet (2021): BF16 tensor 125 TFLOPS dense (250
        // sparse), 31.2 FP32, 24 GB GDDR6 at 600 GB/s, PCIe Gen4, no NVLink.
        spec(
            "a10",
            &["a10-24gb", "nvidia-a10"],
            Ampere,
            // Memory as CUDA sees it: 22,516 MiB (23,609,475,072 B): CUDA deviceQuery, driver CUDA 12.2 (22,599 MiB under
            // 12.8: the smaller); nvidia-smi memory.total 23,028 MiB (Modal, as for the L4).
            mem(24, 22516),
            125.0,
            31.2,
            600.0,
            None,
            PCIE4,
            "NVIDIA A10 Tensor Core GPU datasheet (2021)",
        ),
        // A10G (AWS EC2 G5 only; NVIDIA publishes no datasheet): GA102 with 80 SMs at a
        // 1.71 GHz boost: 35 TFLOPS FP32 and a GeForce-like half-rate FP32-accumulate tensor
        // path, 70 TFLOPS BF16 dense; 24 GB GDDR6 at 600 GB/s; PCIe Gen4. Numbers as tabulated
        // in Baseten, "NVIDIA A10 vs A10G for ML model inference" (2023).
        spec(
            "a10g",
            &["a10g-24gb", "nvidia-a10g"],
            Ampere,
            // Memory as CUDA sees it: DERIVED: no deviceQuery published; nvidia-smi shows 23,028 MiB, exactly the A10's, so
            // the A10's CUDA figure, 22,516 MiB.
            mem(24, 22516),
            70.0,
            35.0,
            600.0,
            None,
            PCIE4,
            "AWS EC2 G5 / NVIDIA A10G (GA102, 80 SMs at 1.71 GHz), as tabulated by Baseten (2023)",
        ),
        // ----------------------------------------------------------------- Ampere (A100)
        // NVIDIA A100 Tensor Core GPU datasheet (2021): 312 TFLOPS BF16 dense, 19.5 FP32, 40GB
        // SXM 1555 GB/s HBM2, NVLink 600 GB/s total (300 GB/s per direction), PCIe Gen4.
        spec(
            "a100-sxm4-40gb",
            &["a100", "a100-40gb", "a100-40", "a100-sxm-40gb", "a100-sxm4"],
            Ampere,
            // Memory as CUDA sees it: 40,339 MiB (42,298,834,944 B): CUDA deviceQuery, driver CUDA 12.2, published in
            // bottlerocket-os/bottlerocket PR #3873; nvidia-smi memory.total 40,960 MiB (Modal).
            mem(40, 40339),
            312.0,
            19.5,
            1555.0,
            Some(300.0),
            PCIE4,
            "NVIDIA A100 Tensor Core GPU datasheet (2021)",
        ),
        // Same datasheet: A100 80GB SXM, 2039 GB/s HBM2e.
        spec(
            "a100-sxm4-80gb",
            &["a100-80gb", "a100-80", "a100-sxm-80gb", "a100-sxm4-80"],
            Ampere,
            // Memory as CUDA sees it: 81,051 MiB (84,987,740,160 B): CUDA deviceQuery, driver CUDA 12.2 (81,158 MiB under
            // 12.5); nvidia-smi memory.total 81,920 MiB (Modal).
            mem(80, 81051),
            312.0,
            19.5,
            2039.0,
            Some(300.0),
            PCIE4,
            "NVIDIA A100 Tensor Core GPU datasheet (2021)",
        ),
        // Same datasheet: A100 40GB PCIe, 1555 GB/s. Its optional NVLink bridge joins only
        // pairs of cards, so the intra-node default is PCIe (override per cluster if bridged).
        spec(
            "a100-pcie-40gb",
            &["a100-pcie", "a100-pcie-40", "a100-40gb-pcie"],
            Ampere,
            // Memory as CUDA sees it: DERIVED: 40,339 MiB, the SXM4 40 GB part's CUDA 12.2 figure (same 40 GiB of HBM2).
            mem(40, 40339),
            312.0,
            19.5,
            1555.0,
            None,
            PCIE4,
            "NVIDIA A100 Tensor Core GPU datasheet (2021)",
        ),
        // Same datasheet: A100 80GB PCIe, 1935 GB/s HBM2e; NVLink bridge pairs only, as above.
        spec(
            "a100-pcie-80gb",
            &["a100-pcie-80", "a100-80gb-pcie"],
            Ampere,
            // Memory as CUDA sees it: 81,049 MiB: "Total global mem" under driver CUDA 12.3, published in ekondis/mixbench
            // issue #47 ("NVIDIA A100 80GB PCIe").
            mem(80, 81049),
            312.0,
            19.5,
            1935.0,
            None,
            PCIE4,
            "NVIDIA A100 Tensor Core GPU datasheet (2021)",
        ),
        // NVIDIA A800 40GB/80GB SXM datasheet (2022): the A100 80GB SXM with NVLink cut to
        // 400 GB/s total (200 GB/s per direction); 312 TFLOPS BF16, 19.5 FP32, 2039 GB/s.
        spec(
            "a800-sxm4-80gb",
            &["a800", "a800-80gb", "a800-80", "a800-sxm"],
            Ampere,
            // Memory as CUDA sees it: DERIVED: nvidia-smi shows 81,920 MiB (dexmal/dexbotic issue #41), exactly the A100 80GB
            // SXM's, so the A100-SXM4-80GB's CUDA figure, 81,051 MiB.
            mem(80, 81051),
            312.0,
            19.5,
            2039.0,
            Some(200.0),
            PCIE4,
            "NVIDIA A800 Tensor Core GPU datasheet (2022)",
        ),
        // ---------------------------------------------------------------- Hopper (H100)
        // NVIDIA H100 Tensor Core GPU datasheet (2023): SXM5 989 TFLOPS BF16 dense (1979 with
        // sparsity), 67 FP32, 3.35 TB/s HBM3, NVLink 900 GB/s total (450 per direction), Gen5.
        spec(
            "h100-sxm5-80gb",
            &[
                "h100",
                "h100-sxm",
                "h100-80gb",
                "h100-sxm5",
                "h100-80",
                "h100-sxm-80gb",
                "h100-80gb-hbm3",
            ],
            Hopper,
            // Memory as CUDA sees it: 81,079 MiB (85,017,755,648 B): CUDA deviceQuery, driver CUDA 13.0 (81,090 MiB under
            // 12.8, 81,106 under 12.7; PyTorch total_memory 81,082-81,090 MiB). nvidia-smi
            // memory.total is 81,559 MiB (wilicc/gpu-burn issue #114, NVIDIA/nccl issue #1264):
            // since the R510 drivers it also counts the driver's reserved region, CUDA does not.
            mem(80, 81079),
            989.0,
            67.0,
            3350.0,
            Some(450.0),
            PCIE5,
            "NVIDIA H100 Tensor Core GPU datasheet (2023)",
        ),
        // Same datasheet: H100 PCIe 756 TFLOPS BF16 dense (1513 sparse), 51 FP32, 2 TB/s
        // HBM2e, PCIe Gen5; its NVLink bridge joins only pairs, so the default is PCIe.
        spec(
            "h100-pcie-80gb",
            &["h100-pcie", "h100-pcie-80"],
            Hopper,
            // Memory as CUDA sees it: DERIVED: the H100 SXM5's CUDA figure, 81,079 MiB (nvidia-smi reports the same 81,559 MiB
            // for both parts).
            mem(80, 81079),
            756.0,
            51.0,
            2000.0,
            None,
            PCIE5,
            "NVIDIA H100 Tensor Core GPU datasheet (2023)",
        ),
        // NVIDIA H200 Tensor Core GPU datasheet (2024): H200 SXM 141 GB HBM3e at 4.8 TB/s,
        // 989 TFLOPS BF16 dense (1979 sparse), 67 FP32, NVLink 900 GB/s total, PCIe Gen5.
        spec(
            "h200-sxm-141gb",
            &["h200", "h200-141gb", "h200-sxm", "h200-141"],
            Hopper,
            // Memory as CUDA sees it: DERIVED: nvidia-smi memory.total is 143,771 MiB (Modal, as for the L4); no deviceQuery
            // found, so less the H100's gap between nvidia-smi and CUDA (81,559 - 81,079 = 480 MiB):
            // 143,291 MiB.
            mem(141, 143291),
            989.0,
            67.0,
            4800.0,
            Some(450.0),
            PCIE5,
            "NVIDIA H200 Tensor Core GPU datasheet (2024)",
        ),
        // NVIDIA H800 SXM5 datasheet (2023): the H100 SXM5 with NVLink cut to 400 GB/s total
        // (200 per direction); 989 TFLOPS BF16 dense, 67 FP32, 3.35 TB/s HBM3, PCIe Gen5.
        spec(
            "h800-sxm5-80gb",
            &[
                "h800",
                "h800-80gb",
                "h800-sxm",
                "h800-sxm5",
                "h800-80",
                "h800-80gb-hbm3",
            ],
            Hopper,
            // Memory as CUDA sees it: DERIVED: the H100 SXM5's CUDA figure, 81,079 MiB (the same GH100 board and 80 GB HBM3).
            mem(80, 81079),
            989.0,
            67.0,
            3350.0,
            Some(200.0),
            PCIE5,
            "NVIDIA H800 Tensor Core GPU datasheet (2023)",
        ),
        // ------------------------------------------------------------- Blackwell (B200)
        // NVIDIA HGX B200 datasheet (2024), per GPU (the 8-GPU board's totals / 8): 2.25
        // PFLOPS BF16 dense (4.5 sparse), 75 TFLOPS FP32, 180 GB HBM3e at 8 TB/s, NVLink 5
        // 1.8 TB/s total (900 GB/s per direction). Host link: PCIe Gen5 (HGX B200 hosts).
        spec(
            "b200-sxm-180gb",
            &["b200", "b200-180gb", "hgx-b200", "b200-180"],
            Blackwell,
            // Memory as CUDA sees it: 182,642 MiB: CUDA total reported beside nvidia-smi's 183,359 MiB (driver 570.172.08,
            // CUDA 12.8) in a published B200 environment dump; nvidia-smi 183,359 MiB in many more.
            mem(180, 182642),
            2250.0,
            75.0,
            8000.0,
            Some(900.0),
            PCIE5,
            "NVIDIA HGX B200 datasheet (2024)",
        ),
        // ------------------------------------------------------ GeForce / workstation
        // NVIDIA Ampere GA102 GPU architecture whitepaper (2020), RTX 3090: FP16 tensor with
        // FP32 accumulate 71 TFLOPS dense (142 with FP16 accumulate), 35.6 FP32, 24 GB GDDR6X at
        // 936 GB/s, PCIe Gen4. Its NVLink bridge joins only pairs: PCIe by default.
        spec(
            "rtx-3090",
            &["3090", "rtx3090", "geforce-rtx-3090", "rtx-3090-24gb"],
            Ampere,
            // Memory as CUDA sees it: 24,238 MiB (25,414,860,800 B): CUDA deviceQuery, drivers CUDA 12.1 and 12.2 (24,265-
            // 24,268 MiB under 11.8); nvidia-smi memory.total 24,576 MiB.
            mem(24, 24238),
            71.0,
            35.6,
            936.0,
            None,
            PCIE4,
            "NVIDIA Ampere GA102 GPU architecture whitepaper (2020)",
        ),
        // NVIDIA Ada Lovelace GPU architecture whitepaper (2022), RTX 4090: FP16 tensor with
        // FP32 accumulate 165.2 TFLOPS dense, 82.6 FP32, 24 GB GDDR6X at 1008 GB/s, PCIe Gen4,
        // no NVLink.
        spec(
            "rtx-4090",
            &["4090", "rtx4090", "geforce-rtx-4090", "rtx-4090-24gb"],
            Ada,
            // Memory as CUDA sees it: 24,081 MiB (25,250,627,584 B): CUDA deviceQuery, driver CUDA 13.0 (24,564 MiB under
            // 12.1: the smaller).
            mem(24, 24081),
            165.2,
            82.6,
            1008.0,
            None,
            PCIE4,
            "NVIDIA Ada Lovelace GPU architecture whitepaper (2022)",
        ),
        // NVIDIA Ampere GA102 whitepaper (2020) / RTX A6000 datasheet (2021): FP16 tensor with
        // FP32 accumulate 154.8 TFLOPS dense (309.7 sparse), 38.7 FP32, 48 GB GDDR6 at
        // 768 GB/s, PCIe Gen4; NVLink bridge pairs only: PCIe by default.
        spec(
            "rtx-a6000",
            &["a6000", "rtxa6000", "rtx-a6000-48gb"],
            Ampere,
            // Memory as CUDA sees it: 48,790 MiB (51,160,023,040 B): CUDA deviceQuery, driver CUDA 12.7.
            mem(48, 48790),
            154.8,
            38.7,
            768.0,
            None,
            PCIE4,
            "NVIDIA RTX A6000 datasheet (2021); Ampere GA102 whitepaper (2020)",
        ),
        // NVIDIA L40S GPU datasheet (2023): BF16 tensor 362.05 TFLOPS dense (733 sparse),
        // 91.6 FP32, 48 GB GDDR6 at 864 GB/s, PCIe Gen4, no NVLink.
        spec(
            "l40s",
            &["l40s-48gb", "nvidia-l40s"],
            Ada,
            // Memory as CUDA sees it: 45,373 MiB (47,576,711,168 B): cuda-device-query, driver CUDA 12.4; nvidia-smi
            // memory.total 46,068 MiB (Modal, as for the L4).
            mem(48, 45373),
            362.05,
            91.6,
            864.0,
            None,
            PCIE4,
            "NVIDIA L40S GPU datasheet (2023)",
        ),
        // ------------------------------------------------------------------------ AMD
        // AMD Instinct MI250X datasheet (2021), per card: 383 TFLOPS FP16/BF16 matrix, 47.9
        // FP32 vector, 128 GB HBM2e at 3.2768 TB/s, 8 Infinity Fabric links, 800 GB/s peak
        // aggregate P2P (both directions). ROCm exposes each of the two GCDs as a GPU, so this
        // entry is one GCD: half of each (191.5, 23.95, 64 GB, 1638.4 GB/s, 200 GB/s per
        // direction, which is also the in-package GCD-GCD quad link, 4 x 50 GB/s each way:
        // OLCF Frontier user guide). Host link PCIe Gen4 x16.
        spec(
            "mi250x-gcd",
            &["mi250x", "mi250x-64gb", "instinct-mi250x", "mi250x-half"],
            Cdna2,
            // Memory as CUDA sees it: 65,520 MiB (68,702,699,520 B): HIP's total per GCD as Cray's OpenACC runtime reports it
            // ("Total GPU memory 68702699520") and the KFD topology's mem_banks size_in_bytes.
            mem(64, 65520),
            191.5,
            23.95,
            1638.4,
            Some(200.0),
            PCIE4,
            "AMD Instinct MI250X datasheet (2021), halved per GCD; OLCF Frontier user guide",
        ),
        // AMD Instinct MI300X datasheet (2023): 1307.4 TFLOPS BF16 dense (2614.9 sparse),
        // 163.4 FP32 vector, 192 GB HBM3 at 5.3 TB/s, 7 Infinity Fabric links of 128 GB/s
        // (both directions) = 896 GB/s total, 448 GB/s per direction; PCIe Gen5 x16.
        spec(
            "mi300x",
            &["mi300x-192gb", "instinct-mi300x", "mi300x-192"],
            Cdna3,
            // Memory as CUDA sees it: 196,288 MiB (205,822,885,888 B): rocm-smi "VRAM Total Memory (B)" and HIP
            // totalGlobalMem, as published in several MI300X environment reports.
            mem(192, 196288),
            1307.4,
            163.4,
            5300.0,
            Some(448.0),
            PCIE5,
            "AMD Instinct MI300X datasheet (2023)",
        ),
        // ------------------------------------------------------------ Grace Hopper (GH200)
        // NVIDIA GH200 Grace Hopper Superchip datasheet (2023), 96 GB HBM3 version: the H100
        // SXM compute (989 TFLOPS BF16 dense, 67 FP32), 4 TB/s HBM3, NVLink 900 GB/s total
        // (450 per direction). The host link is NVLink-C2C to the Grace CPU, 900 GB/s total
        // (450 per direction), not PCIe: that is what `pcie_bandwidth` holds here, since it is
        // the bandwidth offloading to host memory sees. Sailor's measured profiles use it.
        // nvidia-smi names this part "NVIDIA GH200 480GB" (480 GB is the Grace's LPDDR5X).
        spec(
            "gh200-96gb",
            &[
                "gh200",
                "gh-96",
                "gh200-96",
                "gh-200",
                "grace-hopper",
                "gh200-480gb",
            ],
            Hopper,
            // Memory as CUDA sees it: DERIVED: nvidia-smi memory.total is 97,871 MiB (many published "NVIDIA GH200 480GB"
            // outputs); no deviceQuery found, so less the H100's 480 MiB gap: 97,391 MiB.
            mem(96, 97391),
            989.0,
            67.0,
            4000.0,
            Some(450.0),
            450.0,
            "NVIDIA GH200 Grace Hopper Superchip datasheet (2023)",
        ),
        // ------------------------------------------------- Turing desktop (Sailor profiles)
        // NVIDIA Titan RTX (2018; Turing TU102, NVIDIA Turing architecture whitepaper 2018):
        // 130 TFLOPS FP16 tensor with FP32 accumulate (full rate on Titan), 16.3 FP32, 24 GB
        // GDDR6 at 672 GB/s, PCIe Gen3; NVLink bridge pairs only: PCIe by default.
        spec(
            "titan-rtx",
            &["titanrtx", "titan-rtx-24gb", "nvidia-titan-rtx"],
            Turing,
            // Memory as CUDA sees it: DERIVED: no published CUDA figure found; the RTX 3090's (24 GiB of GDDR, no ECC, driver
            // reserve 338 MiB): 24,238 MiB.
            mem(24, 24238),
            130.0,
            16.3,
            672.0,
            None,
            PCIE3,
            "NVIDIA Titan RTX product page (2018); Turing architecture whitepaper (2018)",
        ),
        // NVIDIA Turing architecture whitepaper (2018), GeForce RTX 2080 (reference clocks):
        // FP16 tensor with FP32 accumulate 40.3 TFLOPS (GeForce half rate; 80.5 with FP16
        // accumulate), 10.1 FP32, 8 GB GDDR6 at 448 GB/s, PCIe Gen3; no NVLink by default.
        spec(
            "rtx-2080",
            &["2080", "rtx2080", "geforce-rtx-2080", "rtx-2080-8gb"],
            Turing,
            // Memory as CUDA sees it: DERIVED: no published CUDA figure found; 8,192 MiB less the RTX 3090's 338 MiB driver
            // reserve: 7,854 MiB.
            mem(8, 7854),
            40.3,
            10.1,
            448.0,
            None,
            PCIE3,
            "NVIDIA Turing GPU architecture whitepaper (2018)",
        ),
    ]
}

/// The catalog, built once: lookups run per node group, and a cluster may have many.
static CATALOG: LazyLock<Vec<GpuSpec>> = LazyLock::new(catalog);

/// Vendor and brand words that nvidia-smi, deviceQuery and `torch.cuda.get_device_name` put
/// before the part name (`NVIDIA A100-SXM4-80GB`, `Tesla T4`, `NVIDIA GeForce RTX 4090`,
/// `AMD Instinct MI300X`): a name that matches nothing is tried again without them.
const BRAND_PREFIXES: &[&str] = &[
    "nvidia-",
    "tesla-",
    "geforce-",
    "quadro-",
    "amd-",
    "instinct-",
];

/// Aliases that fit more than one catalog entry (a memory size or a form factor left out),
/// after `names::normalize`: each resolves to the entry that lists it, and this says how to
/// write the others. Kept beside the catalog so that `hetplan gpus` can mark them.
const AMBIGUOUS: &[(&str, &str)] = &[
    (
        "a100",
        "write `a100-80gb` for the 80 GB card, `a100-pcie` for the PCIe one",
    ),
    ("a100-sxm4", "write `a100-sxm4-80gb` for the 80 GB card"),
    ("a100-40gb", "write `a100-pcie-40gb` for the PCIe card"),
    ("a100-40", "write `a100-pcie-40gb` for the PCIe card"),
    ("a100-80gb", "write `a100-pcie-80gb` for the PCIe card"),
    ("a100-80", "write `a100-pcie-80gb` for the PCIe card"),
    (
        "v100",
        "write `v100-32gb` for the 32 GB card, `v100-pcie` for the PCIe one",
    ),
    (
        "tesla-v100",
        "write `v100-32gb` for the 32 GB card, `v100-pcie` for the PCIe one",
    ),
    ("v100-sxm2", "write `v100-sxm2-32gb` for the 32 GB card"),
    ("v100-16gb", "write `v100-pcie-16gb` for the PCIe card"),
    ("v100-16", "write `v100-pcie-16gb` for the PCIe card"),
    ("v100-32gb", "write `v100-pcie-32gb` for the PCIe card"),
    ("v100-32", "write `v100-pcie-32gb` for the PCIe card"),
    ("h100", "write `h100-pcie` for the PCIe card"),
    ("h100-80gb", "write `h100-pcie` for the PCIe card"),
    ("h100-80", "write `h100-pcie` for the PCIe card"),
];

/// How to name the other cards an ambiguous alias could mean; `None` for unambiguous names.
pub fn ambiguity_hint(alias: &str) -> Option<&'static str> {
    let n = names::normalize(alias);
    AMBIGUOUS.iter().find(|(a, _)| *a == n).map(|(_, h)| *h)
}

/// A name that could mean several cards, and the one it was taken to mean.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AliasNote {
    /// The name as written.
    pub written: String,
    /// The catalog entry it resolved to.
    pub chosen: String,
    /// How to name the other cards, e.g. "write `a100-80gb` for the 80 GB card".
    pub hint: String,
}

impl std::fmt::Display for AliasNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` means {}; {}",
            self.written.trim(),
            self.chosen,
            self.hint
        )
    }
}

/// A found GPU, with a note when the name was ambiguous.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub spec: GpuSpec,
    pub note: Option<AliasNote>,
}

fn find(n: &str) -> Option<&'static GpuSpec> {
    CATALOG.iter().find(|g| {
        names::normalize(&g.name) == n || g.aliases.iter().any(|a| names::normalize(a) == n)
    })
}

/// Finds a GPU by canonical name, alias or the name nvidia-smi prints (case, `_` and spaces
/// ignored; vendor and brand words such as `NVIDIA`, `Tesla`, `GeForce` dropped when the full
/// name matches nothing), and says which card an ambiguous short name (`A100`) was taken for.
pub fn resolve(name: &str) -> Result<Resolved, UnknownGpu> {
    let mut n = names::normalize(name);
    loop {
        if let Some(g) = find(&n) {
            let note = ambiguity_hint(&n).map(|hint| AliasNote {
                written: name.trim().to_string(),
                chosen: g.name.clone(),
                hint: hint.to_string(),
            });
            return Ok(Resolved {
                spec: g.clone(),
                note,
            });
        }
        match BRAND_PREFIXES.iter().find_map(|p| n.strip_prefix(p)) {
            Some(rest) if !rest.is_empty() => n = rest.to_string(),
            _ => break,
        }
    }
    let candidates: Vec<&str> = CATALOG
        .iter()
        .flat_map(|g| std::iter::once(g.name.as_str()).chain(g.aliases.iter().map(|a| a.as_str())))
        .collect();
    Err(UnknownGpu {
        name: name.to_string(),
        hint: names::nearest(name, candidates.iter().copied()),
    })
}

/// Finds a GPU as `resolve` does, without the note.
/// Dense FP8 tensor-core peak (E4M3/E5M2 inputs, FP32 accumulation), where the GPU has FP8
/// tensor cores: twice its 16-bit tensor peak on every generation that has them — H100 SXM
/// 1,979 vs 989 TFLOP/s (NVIDIA H100 datasheet, 2023), L4 242 vs 121 and L40S 733 vs 366
/// (NVIDIA L4 and L40S datasheets), RTX 4090 330.3 vs 165.2, both with FP32 accumulation (NVIDIA Ada
/// Lovelace architecture whitepaper, appendix A), B200 4.5 vs 2.25 PFLOP/s (NVIDIA DGX B200
/// datasheet). `None` before Ada (Ampere, Volta, ... have no FP8) and on AMD's CDNA 2; CDNA 3
/// (MI300X) has FP8 at twice its BF16 rate too (AMD Instinct MI300X data sheet).
pub fn fp8_peak(gpu: &GpuSpec) -> Option<FlopPerSec> {
    match gpu.arch {
        Arch::Ada | Arch::Hopper | Arch::Blackwell | Arch::Cdna3 => {
            Some(FlopPerSec(2.0 * gpu.peak_tensor.get()))
        }
        Arch::Pascal | Arch::Volta | Arch::Turing | Arch::Ampere | Arch::Cdna2 => None,
    }
}

/// Dense TF32 tensor-core peak (FP32 operands rounded to TF32 inside the tensor cores, FP32
/// accumulation), where PyTorch's `allow_tf32` runs FP32 products on it: half the GPU's 16-bit
/// tensor peak on every NVIDIA generation that has TF32 — A100 156 vs 312 TFLOP/s (NVIDIA A100
/// Tensor Core GPU architecture whitepaper, 2020), RTX 3090 35.6 vs 71 with FP32 accumulation
/// (NVIDIA Ampere GA102 whitepaper), RTX A6000 77.4 vs 154.8 (its datasheet), L4 60 vs 121 and
/// L40S 183 vs 362 (their datasheets), RTX 4090 82.6 vs 165.2 (NVIDIA Ada Lovelace architecture
/// whitepaper, appendix A), H100 SXM 495 vs 989 (NVIDIA H100 datasheet), B200 1.1 vs 2.25
/// PFLOP/s (NVIDIA HGX B200 datasheet). `None` before Ampere (Pascal has no tensor cores,
/// Volta's and Turing's take 16-bit inputs only) and on AMD's CDNA parts: ROCm's PyTorch ignores
/// `allow_tf32` unless hipBLASLt is told otherwise (`HIPBLASLT_ALLOW_TF32=1`), and CDNA 2 has
/// no TF32.
pub fn tf32_peak(gpu: &GpuSpec) -> Option<FlopPerSec> {
    match gpu.arch {
        Arch::Ampere | Arch::Ada | Arch::Hopper | Arch::Blackwell => {
            Some(FlopPerSec(0.5 * gpu.peak_tensor.get()))
        }
        Arch::Pascal | Arch::Volta | Arch::Turing | Arch::Cdna2 | Arch::Cdna3 => None,
    }
}

/// Maximum board power (TDP) of a catalog GPU in watts, from the same vendor datasheets the
/// catalog cites (NVIDIA V100, P100, T4, L4, A10, A100, H100, H200, HGX B200, RTX A6000, L40S
/// datasheets; GeForce/TITAN product pages for the total graphics power; AMD's MI300X data
/// sheet). `None` where the part's power is configurable or not published per GPU (A10G, an
/// MI250X die, GH200's module).
pub fn board_power_w(gpu_name: &str) -> Option<f64> {
    Some(match gpu_name {
        "v100-sxm2-16gb" | "v100-sxm2-32gb" => 300.0,
        "v100-pcie-16gb" | "v100-pcie-32gb" | "p100-pcie-16gb" | "a100-pcie-40gb" => 250.0,
        "t4" => 70.0,
        "l4" => 72.0,
        "a10" => 150.0,
        "a100-sxm4-40gb" | "a100-sxm4-80gb" | "a800-sxm4-80gb" => 400.0,
        "a100-pcie-80gb" | "rtx-a6000" => 300.0,
        "h100-sxm5-80gb" | "h200-sxm-141gb" | "h800-sxm5-80gb" => 700.0,
        "h100-pcie-80gb" | "l40s" | "rtx-3090" => 350.0,
        "b200-sxm-180gb" => 1000.0,
        "rtx-4090" => 450.0,
        "mi300x" => 750.0,
        "titan-rtx" => 280.0,
        "rtx-2080" => 215.0,
        _ => return None,
    })
}

/// How a power cap below the board power slows the compute units: clock ∝ (cap / TDP)^x.
/// Dynamic CMOS power is C·V²·f (Rabaey et al., "Digital Integrated Circuits", §5.5). Were the
/// voltage to track the clock from zero and static power nil, a tensor-core-bound kernel
/// that holds its board at the TDP would draw ∝ f³ (x = 1/3); with the voltage at its floor
/// it draws ∝ f (x = 1): two idealised cases, not bounds. Between them the voltage rises
/// from an offset and part of the board's power (idle draw, memory) does not follow the SM
/// clock: the H200 measured here drew 77 W idle and 685 W running GEMMs at 1,455 MHz
/// (data/measured/h200-sxm-141gb/). *Calibrated*: x = 2/3 (power ∝ f^1.5), a round value,
/// brings torchtitan's nine BF16 H100 rows at 500 W (`../shared/calibration/torchtitan.csv`,
/// the only capped runs in the data; its FP8 rows follow) to the optimism of the same
/// framework's uncapped A100 rows (mean +9.5% against +8.0%, docs/validation.md §8; +4.5%
/// against +3.5% since FSDP's per-step host time and FP32 reductions, which both pay, were
/// priced), so that
/// the cap is charged with what sets the capped GPUs apart and not with what every torchtitan
/// row shares. 500 W of 700 W: 0.799 of the clock (0.894 at x = 1/3). Memory clocks do not
/// follow the cap.
pub const POWER_CLOCK_EXPONENT: f64 = 2.0 / 3.0;

/// Why a power cap cannot be applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PowerCapError {
    #[error("no board power on record for `{0}`")]
    UnknownBoardPower(String),
    #[error("a power cap of {cap} W is not in (0, {tdp}] W, the board power of `{gpu}`")]
    OutOfRange { gpu: String, cap: f64, tdp: f64 },
}

/// `gpu` run under a power cap of `watts`: its tensor and FP32 peaks scaled by the clock the
/// cap leaves ([`POWER_CLOCK_EXPONENT`]); memory and links unchanged.
pub fn power_capped(gpu: &GpuSpec, watts: f64) -> Result<GpuSpec, PowerCapError> {
    let tdp = board_power_w(&gpu.name)
        .ok_or_else(|| PowerCapError::UnknownBoardPower(gpu.name.clone()))?;
    if !(watts.is_finite() && watts > 0.0 && watts <= tdp) {
        return Err(PowerCapError::OutOfRange {
            gpu: gpu.name.clone(),
            cap: watts,
            tdp,
        });
    }
    let clock = (watts / tdp).powf(POWER_CLOCK_EXPONENT);
    let mut out = gpu.clone();
    out.peak_tensor = FlopPerSec(gpu.peak_tensor.get() * clock);
    out.peak_fp32 = FlopPerSec(gpu.peak_fp32.get() * clock);
    out.source = format!(
        "{}; capped at {watts} W of {tdp} W: compute clock ×{clock:.3}",
        gpu.source
    );
    Ok(out)
}

pub fn lookup(name: &str) -> Result<GpuSpec, UnknownGpu> {
    resolve(name).map(|r| r.spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_power_cap_slows_compute_by_its_calibrated_power_and_leaves_memory() {
        let h100 = lookup("h100").unwrap();
        let capped = power_capped(&h100, 500.0).unwrap();
        let f = capped.peak_tensor.get() / h100.peak_tensor.get();
        assert!(
            (f - (500.0f64 / 700.0).powf(2.0 / 3.0)).abs() < 1e-12,
            "{f}"
        );
        // Between the two idealised cases: V ∝ f from zero (1/3) and V at its floor (1).
        assert!(f < (500.0f64 / 700.0).cbrt() && f > 500.0 / 700.0, "{f}");
        assert_eq!(capped.hbm_bandwidth, h100.hbm_bandwidth);
        assert_eq!(capped.memory, h100.memory);
        assert_eq!(
            power_capped(&h100, 700.0).unwrap().peak_tensor,
            h100.peak_tensor
        );
        assert!(matches!(
            power_capped(&h100, 800.0),
            Err(PowerCapError::OutOfRange { .. })
        ));
        assert!(power_capped(&h100, 0.0).is_err());
        let gh = lookup("gh200").unwrap();
        assert!(matches!(
            power_capped(&gh, 500.0),
            Err(PowerCapError::UnknownBoardPower(_))
        ));
        // Every catalog part but the documented exceptions has a board power.
        for g in catalog() {
            let known = board_power_w(&g.name).is_some();
            let exception = ["a10g", "mi250x-gcd", "gh200-96gb"].contains(&g.name.as_str());
            assert_eq!(known, !exception, "{}", g.name);
        }
    }

    #[test]
    fn aliases_resolve() {
        let cases = [
            ("V100", "v100-sxm2-16gb"),
            ("v100_16gb", "v100-sxm2-16gb"),
            ("V100-16", "v100-sxm2-16gb"),
            ("V100 32GB", "v100-sxm2-32gb"),
            ("v100-pcie", "v100-pcie-16gb"),
            ("P100", "p100-pcie-16gb"),
            ("Tesla-T4", "t4"),
            ("L4", "l4"),
            ("A10G", "a10g"),
            ("A100", "a100-sxm4-40gb"),
            ("A100-40", "a100-sxm4-40gb"),
            ("A100-80", "a100-sxm4-80gb"),
            ("a100_80gb", "a100-sxm4-80gb"),
            ("A100-PCIe-80GB", "a100-pcie-80gb"),
            ("A800", "a800-sxm4-80gb"),
            ("H100", "h100-sxm5-80gb"),
            ("h100 pcie", "h100-pcie-80gb"),
            ("H200", "h200-sxm-141gb"),
            ("H800", "h800-sxm5-80gb"),
            ("B200", "b200-sxm-180gb"),
            ("RTX-3090", "rtx-3090"),
            ("RTX 4090", "rtx-4090"),
            ("A6000", "rtx-a6000"),
            ("L40S", "l40s"),
            ("MI250X", "mi250x-gcd"),
            ("MI300X", "mi300x"),
            ("GH-96", "gh200-96gb"),
            ("GH200", "gh200-96gb"),
            ("Titan-RTX", "titan-rtx"),
            ("RTX-2080", "rtx-2080"),
        ];
        for (alias, name) in cases {
            assert_eq!(lookup(alias).unwrap().name, name, "alias {alias}");
        }
    }

    #[test]
    fn common_and_nvidia_smi_names_resolve() {
        let cases = [
            ("h100-sxm-80gb", "h100-sxm5-80gb"),
            ("a100-80gb", "a100-sxm4-80gb"),
            ("a100_40gb", "a100-sxm4-40gb"),
            ("rtx4090", "rtx-4090"),
            ("H100-SXM", "h100-sxm5-80gb"),
            ("V100", "v100-sxm2-16gb"),
            // nvidia-smi / torch.cuda.get_device_name / deviceQuery.
            ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
            ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
            ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
            ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
            ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
            ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
            ("Tesla V100-PCIE-16GB", "v100-pcie-16gb"),
            ("Tesla P100-PCIE-16GB", "p100-pcie-16gb"),
            ("NVIDIA GeForce RTX 4090", "rtx-4090"),
            ("NVIDIA GeForce RTX 3090", "rtx-3090"),
            ("NVIDIA GeForce RTX 2080", "rtx-2080"),
            ("NVIDIA TITAN RTX", "titan-rtx"),
            ("NVIDIA RTX A6000", "rtx-a6000"),
            ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"),
            ("NVIDIA H100 PCIe", "h100-pcie-80gb"),
            ("NVIDIA H200", "h200-sxm-141gb"),
            ("NVIDIA H800", "h800-sxm5-80gb"),
            ("NVIDIA A800-SXM4-80GB", "a800-sxm4-80gb"),
            ("NVIDIA B200", "b200-sxm-180gb"),
            ("NVIDIA GH200 480GB", "gh200-96gb"),
            ("NVIDIA L4", "l4"),
            ("NVIDIA L40S", "l40s"),
            ("NVIDIA A10G", "a10g"),
            ("NVIDIA A10", "a10"),
            ("Tesla T4", "t4"),
            ("AMD Instinct MI300X", "mi300x"),
        ];
        for (written, name) in cases {
            assert_eq!(lookup(written).unwrap().name, name, "{written}");
        }
        // Brand words alone are no GPU.
        assert!(lookup("NVIDIA").is_err());
        assert!(lookup("nvidia-").is_err());
    }

    #[test]
    fn ambiguous_names_say_which_card_they_chose() {
        let r = resolve("A100").unwrap();
        assert_eq!(r.spec.name, "a100-sxm4-40gb");
        let note = r.note.expect("A100 is ambiguous");
        assert_eq!(
            note.to_string(),
            "`A100` means a100-sxm4-40gb; write `a100-80gb` for the 80 GB card, `a100-pcie` \
             for the PCIe one"
        );
        assert_eq!(
            resolve("V100").unwrap().note.unwrap().chosen,
            "v100-sxm2-16gb"
        );
        assert_eq!(
            resolve("h100").unwrap().note.unwrap().chosen,
            "h100-sxm5-80gb"
        );
        // Full names and nvidia-smi's are not.
        for n in [
            "a100-sxm4-80gb",
            "NVIDIA A100-SXM4-80GB",
            "t4",
            "Tesla T4",
            "h100-sxm",
        ] {
            assert_eq!(resolve(n).unwrap().note, None, "{n}");
        }
        // Every ambiguous alias is an alias of the entry it picks, and every name its hint
        // suggests resolves to another entry.
        for (alias, hint) in AMBIGUOUS {
            let chosen = lookup(alias).unwrap().name;
            assert!(
                catalog()
                    .iter()
                    .any(|g| g.name == chosen && g.aliases.iter().any(|a| a == alias)),
                "{alias}"
            );
            for suggested in hint.split('`').skip(1).step_by(2) {
                let other = lookup(suggested).unwrap().name;
                assert_ne!(other, chosen, "{alias}: {suggested}");
            }
        }
    }

    #[test]
    fn every_name_and_alias_resolves_to_its_own_entry() {
        for g in catalog() {
            assert_eq!(lookup(&g.name).unwrap().name, g.name);
            for a in &g.aliases {
                assert_eq!(lookup(a).unwrap().name, g.name, "alias {a}");
            }
        }
    }

    #[test]
    fn unknown_names_get_a_hint() {
        let e = lookup("a100-sxm4-80g").unwrap_err();
        assert_eq!(e.hint.as_deref(), Some("a100-sxm4-80gb"));
        let e = lookup("h100-sxm5-80").unwrap_err();
        assert_eq!(e.hint.as_deref(), Some("h100-sxm5-80gb"));
        let e = lookup("rtx-309").unwrap_err();
        assert_eq!(e.hint.as_deref(), Some("rtx-3090"));
        let e = lookup("mi300").unwrap_err();
        assert_eq!(e.hint.as_deref(), Some("mi300x"));
        assert!(e.to_string().contains("did you mean `mi300x`"));
        assert_eq!(lookup("zzzzzzzzzzzzzz").unwrap_err().hint, None);
    }

    #[test]
    fn names_and_aliases_are_unique_across_the_catalog() {
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for g in catalog() {
            for n in std::iter::once(&g.name).chain(g.aliases.iter()) {
                let key = names::normalize(n);
                if let Some(prev) = seen.insert(key.clone(), g.name.clone()) {
                    panic!("`{n}` of `{}` clashes with an entry of `{prev}`", g.name);
                }
            }
        }
    }

    #[test]
    fn canonical_names_are_normalized() {
        for g in catalog() {
            assert_eq!(names::normalize(&g.name), g.name);
            assert!(!g.name.contains("--") && !g.name.starts_with('-'));
        }
    }

    #[test]
    fn every_spec_is_physical_and_sourced() {
        for g in catalog() {
            let n = &g.name;
            assert!(g.memory.get() > 0.0 && g.memory.is_finite(), "{n}");
            assert!(
                g.peak_tensor.get() > 0.0 && g.peak_tensor.is_finite(),
                "{n}"
            );
            assert!(g.peak_fp32.get() > 0.0 && g.peak_fp32.is_finite(), "{n}");
            assert!(g.hbm_bandwidth.get() > 0.0, "{n}");
            assert!(g.pcie_bandwidth.get() > 0.0, "{n}");
            if let Some(nv) = g.nvlink_bandwidth {
                assert!(nv.get() > 0.0, "{n}");
                assert!(
                    nv >= g.pcie_bandwidth,
                    "{n}: NVLink slower than the host link"
                );
            }
            // The tensor (or FP16) path is never slower than plain FP32.
            assert!(g.peak_tensor >= g.peak_fp32, "{n}");
            // Between 4 GiB and 256 GiB, between 100 GB/s and 10 TB/s: catches unit slips.
            assert!((4.0..=256.0).contains(&g.memory.as_gib()), "{n}");
            assert!((100e9..=10e12).contains(&g.hbm_bandwidth.get()), "{n}");
            assert!(!g.source.trim().is_empty(), "{n}");
            assert!(g.default_intra_node_bandwidth().get() > 0.0, "{n}");
        }
    }

    /// CUDA sees less than the datasheet's "GB" read as GiB, but not much less: ECC on a T4
    /// takes the most, 1/16.
    #[test]
    fn cuda_capacity_is_a_little_below_the_datasheet() {
        for g in catalog() {
            let ds = g.datasheet_memory_gb as f64;
            let gib = g.memory.as_gib();
            assert!(gib < ds, "{}: {gib} GiB, datasheet {ds} GB", g.name);
            assert!(gib > 0.9 * ds, "{}: {gib} GiB, datasheet {ds} GB", g.name);
        }
        let mib = |n: &str| lookup(n).unwrap().memory.get() / 1048576.0;
        assert_eq!(mib("h100-sxm5-80gb"), 81079.0);
        assert_eq!(mib("a100-sxm4-80gb"), 81051.0);
        assert_eq!(mib("a100-sxm4-40gb"), 40339.0);
        assert_eq!(mib("v100-sxm2-16gb"), 16144.0);
        assert_eq!(mib("t4"), 14918.0);
        assert_eq!(mib("l4"), 22518.0);
        assert_eq!(lookup("h100").unwrap().datasheet_memory_gb, 80);
    }

    #[test]
    fn nvlink_values_are_per_direction() {
        let bw = |n: &str| lookup(n).unwrap().nvlink_bandwidth.unwrap().get();
        assert_eq!(bw("a100-sxm4-80gb"), 300e9);
        assert_eq!(bw("h100-sxm5-80gb"), 450e9);
        assert_eq!(bw("v100-sxm2-16gb"), 150e9);
        assert_eq!(lookup("t4").unwrap().nvlink_bandwidth, None);
        assert_eq!(
            lookup("t4").unwrap().default_intra_node_bandwidth(),
            BytesPerSec::gb_s(PCIE3)
        );
    }
}
