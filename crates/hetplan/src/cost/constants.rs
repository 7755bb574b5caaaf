//! The physical constants of the analytic cost model, each with its source.
//!
//! There are few on purpose: an achievable fraction of peak per GPU architecture for large
//! matrix products, one saturation length for small GEMM dimensions, one for attention over
//! short sequences, an achievable fraction of HBM bandwidth, a kernel-launch overhead, a
//! collective-bandwidth efficiency, and the memory overheads. Those marked *calibrated* were set
//! once against `data/calibration/a100_80gb_fsdp_mpt.csv` (see `docs/validation.md`); the others
//! come from the cited measurements. Nothing is set per model, per size or per row.

use crate::gpu::Arch;
use crate::model::AttnImpl;
use crate::plan::Engine;

/// Achievable fraction of the dense tensor-core peak for a large BF16/FP16 GEMM (all dimensions
/// ≫ 1k), per architecture.
/// - Ampere 0.75: cuBLAS BF16 on A100-SXM reaches 230–260 TFLOP/s of 312 on large GEMMs (NVIDIA
///   "Matrix Multiplication Background User's Guide"; Narayanan et al. 2021 §5.1 report
///   Megatron-LM's GEMMs at 0.75–0.8 of peak) — *calibrated* within that range: it balances
///   the calibration rows with and without activation checkpointing (docs/validation.md).
/// - Volta 0.80: ~100 of 125 TFLOP/s on V100 for large FP16 GEMMs (Jia et al. 2018,
///   "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking", §4.2).
/// - Hopper 0.70: cuBLAS BF16 on H100-SXM ~ 660–750 of 989 TFLOP/s (NVIDIA Transformer Engine
///   GEMM benchmarks; power-capped clocks under sustained load). Measured on an H200: the
///   forward, input- and weight-gradient products of Llama-3-8B's and -70B's linear layers at
///   2,048–16,384 tokens, median 0.684 of the peak (0.60–0.78), at 665 W of its 700 W cap and
///   1,470 MHz (`data/measured/h200-sxm-141gb/kernels.json`).
/// - Turing 0.60: T4 at its 70 W cap sustains ~40 of 65 TFLOP/s FP16 (NVIDIA T4 inference
///   whitepaper; clocks throttle from 1590 MHz boost to ~1000 MHz under full load).
/// - Ada 0.70, Blackwell 0.70: as Hopper (same cuBLAS generation, clocks reduced under load),
///   no independent measurement in hand — an estimate.
/// - Pascal 0.80: no tensor cores; FP16 vector rate is reached as well as FP32 SGEMM (~80%).
/// - CDNA2 0.55, CDNA3 0.55: hipBLASLt BF16 on MI250X/MI300X reaches ~55% of the listed dense
///   peak (AMD ROCm performance notes; MI300X ~ 650–700 of 1307 TFLOP/s).
pub fn gemm_efficiency(arch: Arch) -> f64 {
    match arch {
        Arch::Ampere => 0.75,
        Arch::Volta => 0.80,
        Arch::Hopper => 0.70,
        Arch::Turing => 0.60,
        Arch::Ada => 0.70,
        Arch::Blackwell => 0.70,
        Arch::Pascal => 0.80,
        Arch::Cdna2 | Arch::Cdna3 => 0.55,
    }
}

/// GEMM dimensions below a few tiles waste part of every wave: the efficiency of a dimension x
/// is x / (x + GEMM_HALF_DIM), i.e. a 128-wide dimension runs at ~2/3 of a large one. 64 is
/// half of the 128×128 (×32) thread-block tile of cuBLAS/CUTLASS Ampere and Hopper kernels
/// (CUTLASS 2.x/3.x default tile shapes) — a tile half-empty on average at the edge.
pub const GEMM_HALF_DIM: f64 = 64.0;

/// Achievable fraction of the tensor peak of the attention core for long sequences (fwd + bwd
/// averaged over the FLOPs actually executed).
/// - FlashAttention-2: 0.55. Dao 2023 (FlashAttention-2, Fig. 5/6): fwd+bwd on A100 reaches
///   160–190 TFLOP/s of 312 for head dim 64–128, causal and not.
/// - Triton (MPT/llm-foundry's kernel, an earlier, slower port of FlashAttention v1): 0.33 —
///   *calibrated* on the 32k–64k-token rows of the calibration data, where the attention core
///   is 60–70% of the work (the other constants fixed by the short-sequence rows).
/// - Torch (unfused): its two products are batched GEMMs and run at the GPU's GEMM efficiency
///   (see [`attention_efficiency_on`]); the softmax traffic is charged to HBM separately.
fn flash_efficiency(imp: AttnImpl) -> f64 {
    match imp {
        AttnImpl::Flash => 0.55,
        AttnImpl::Triton => 0.33,
        AttnImpl::Torch => unreachable!("unfused attention runs at GEMM efficiency"),
    }
}

/// Attention kernels written for Ampere (FlashAttention-2, the Triton kernel) on Hopper and later
/// use the legacy `mma.sync` path, not Hopper's asynchronous warpgroup MMA (`wgmma`): "FlashAttention-2
/// achieves only 35% utilization on H100 GPUs compared to 70% on A100" (Shah et al. 2024,
/// FlashAttention-3, §1). Measured on an H200 (PyTorch 2.11's FlashAttention-2 backend, causal,
/// 128-wide heads, `data/measured/h200-sxm-141gb/kernels.json`, corrected for the gradient
/// accumulation the script timed with each call, docs/validation.md §5): forward + backward at
/// 0.32 of the BF16 peak at sequence 16,384, 0.33 saturated (`attention_half_seq`), 0.6 of the
/// 0.55 it reaches on Ampere. cuBLAS GEMMs use `wgmma` and are not affected.
pub const PRE_HOPPER_KERNEL_ON_HOPPER: f64 = 0.6;

/// Achievable fraction of the BF16 peak of an attention kernel written for Hopper — cuDNN's
/// fused attention, which Transformer Engine prefers on Hopper and later ("Disabling
/// FlashAttention to give FusedAttention preference on Hopper+ for performance reasons",
/// `transformer_engine/pytorch/attention` backend selection), and FlashAttention-3 — forward +
/// backward, saturated. Measured on an H200 through PyTorch 2.11's SDPA cuDNN backend
/// (corrected as above): 0.548 of the peak at sequence 16,384, 0.493 at 4,096, 0.230 at 512;
/// with `attention_half_seq` = 768 the model is within 0.015 of each of the six lengths
/// measured (docs/validation.md §5).
pub const NATIVE_HOPPER_ATTENTION: f64 = 0.58;

/// Achievable fraction of peak of an attention kernel on a GPU architecture, saturated (long
/// sequences). `native`: the engine runs a kernel written for Hopper there (see
/// [`NATIVE_HOPPER_ATTENTION`]); before Hopper it changes nothing.
pub fn attention_efficiency_on(imp: AttnImpl, arch: Arch, native: bool) -> f64 {
    let hopper_or_later = matches!(arch, Arch::Hopper | Arch::Blackwell);
    match imp {
        AttnImpl::Torch => gemm_efficiency(arch),
        AttnImpl::Flash | AttnImpl::Triton if hopper_or_later && native => NATIVE_HOPPER_ATTENTION,
        AttnImpl::Flash | AttnImpl::Triton if hopper_or_later => {
            flash_efficiency(imp) * PRE_HOPPER_KERNEL_ON_HOPPER
        }
        AttnImpl::Flash | AttnImpl::Triton => flash_efficiency(imp),
    }
}

/// Attention kernels run each query tile over its keys; a short sequence leaves each tile little
/// work beside its fixed cost (loading the queries, writing the output and the softmax
/// statistics). Efficiency scales by s / (s + attention_half_seq(arch)):
/// - before Hopper 256: FlashAttention-2 at sequence 512 runs at ~65–70% of its 8k throughput
///   (Dao 2023, Fig. 4);
/// - Hopper and later 768: measured on an H200 at a fixed 16,384 tokens (so the grid of query
///   tiles is the same at every length), forward + backward, both kernels alike — cuDNN 0.230,
///   0.345, 0.425, 0.493, 0.528, 0.548 of peak and FlashAttention-2 0.130, 0.189, 0.239,
///   0.276, 0.300, 0.320 at 512, 1,024 … 16,384 (`data/measured/h200-sxm-141gb/kernels.json`,
///   less the 0.28 ms of gradient accumulation the script timed with each call); the
///   half-length that fits each point is 697–819 at every length but the longest (957 for
///   cuDNN, 512 for FlashAttention-2, where both are within 0.01 of saturation). Hopper's
///   warpgroup kernels spend longer per tile outside the loop over keys.
pub fn attention_half_seq(arch: Arch) -> f64 {
    match arch {
        Arch::Hopper | Arch::Blackwell => 768.0,
        _ => 256.0,
    }
}

/// Backward/forward FLOP ratio of a flash attention core: the backward recomputes QKᵀ and runs
/// four more products, five against the forward's two (Dao 2023, §3.2).
pub const FLASH_BWD_RATIO: f64 = 2.5;

/// Achievable fraction of HBM bandwidth for streaming element-wise kernels, per architecture.
/// - 0.80 before Hopper: STREAM-like copies reach ~1.6–1.7 TB/s of 2.04 TB/s on A100-80GB
///   (Citadel, "Dissecting the Ampere GPU architecture"; NVIDIA babelstream results).
/// - Hopper and later 0.88: measured on an H200, a 2 GiB BF16 copy moved 4.20 TB/s and an
///   element-wise add 4.30 TB/s of the 4.8 TB/s datasheet rate (0.875, 0.897;
///   `data/measured/h200-sxm-141gb/kernels.json`); on an H100 a device-to-device copy moved
///   about 3.0 of 3.35 TB/s (this workplace's machine notes, 0.90).
pub fn hbm_efficiency(arch: Arch) -> f64 {
    match arch {
        Arch::Hopper | Arch::Blackwell => 0.88,
        _ => 0.80,
    }
}

/// Fixed cost of one GPU kernel in an eager PyTorch step (launch + tail effect), ~4 µs
/// (PyTorch profiler traces of small kernels on A100; CUDA launch latency 2–5 µs, NVIDIA
/// "CUDA C++ Best Practices Guide", §Kernel launch).
pub const KERNEL_OVERHEAD_S: f64 = 4e-6;

/// Host time per local expert of a MoE layer, per micro-batch (forward and backward), where the
/// engine issues each local expert's products from the host behind a synchronisation
/// (`Engine::loops_experts_on_host`). Megatron-Core's dropless dispatch copies the tokens per
/// expert to the host before the experts run (`tokens_per_expert.tolist()`,
/// megatron/core/transformer/moe/experts.py; the all-to-all's split sizes likewise in
/// token_dispatcher.py), which drains the GPU's queue; Transformer Engine's `GroupedLinear`
/// then takes that list and runs one product per expert, and under FP8 pads each expert's
/// segment first. The GPU runs each small product as soon as the host has issued it: the
/// "host-boundedness" of small expert GEMMs and their many launches (Yan et al. 2026,
/// "Scalable Training of Mixture-of-Experts Models with Megatron Core", arXiv:2603.07685, §1).
/// *Calibrated*: the four published NeMo (Megatron-Bridge) H100 MoE runs
/// (data/published/nemo_megatron_bridge.csv, no CUDA graphs) are slower than the estimate
/// without it by 0.50 ms (GPT-OSS 120B, BF16, 16 local experts), 0.69 ms (Qwen3-30B-A3B, FP8,
/// 16) and 0.67 and 0.77 ms (Qwen3-235B-A22B, FP8, 4 local experts, inter-node expert
/// parallelism) per local expert, MoE layer and micro-batch: in proportion to the local experts
/// and not to their width or tokens. 0.65 ms fits the four (docs/validation.md §8).
/// A third of it falls in the forward, two thirds in the backward, which issues a data- and a
/// weight-gradient product for each forward one.
pub const MOE_HOST_S_PER_LOCAL_EXPERT: f64 = 0.65e-3;

/// Expert parallelism: the busiest expert-parallel rank's share of a MoE layer's expert work
/// relative to the average. With a capacity factor C routers drop the tokens beyond C times an
/// expert's even share, so no rank does more than C times the average; Switch Transformer
/// trains with C = 1.25 (Fedus et al. 2021, "Switch Transformers", §2.2 and Table 1: 1.0–1.25
/// work best). Dropless routers under a load-balancing loss are taken to stay within it.
/// Without expert parallelism every GPU runs all experts on its own tokens: no imbalance.
pub const MOE_EP_LOAD_FACTOR: f64 = 1.25;

/// NCCL bus bandwidth reached by large all-reduce/all-gather/reduce-scatter relative to the
/// link rate: nccl-tests on DGX A100 report ~230 GB/s bus bandwidth on 300 GB/s-per-direction
/// NVLink, and ~90% of line rate across InfiniBand/RoCE rails (NVIDIA nccl-tests
/// PERFORMANCE.md; NVIDIA DGX A100 user guide). 0.80 for both.
pub const COLLECTIVE_EFFICIENCY: f64 = 0.80;

/// Point-to-point (pipeline send/recv) efficiency relative to link rate: NCCL send/recv reaches
/// ~85–90% of link bandwidth for MB-sized messages (nccl-tests sendrecv_perf).
pub const P2P_EFFICIENCY: f64 = 0.85;

/// Bytes moved per parameter by a fused mixed-precision Adam step: read fp32 master, m, v and
/// the gradient (16 B), write master, m, v (12 B) and the 16-bit copy (2 B): 30 B, HBM-bound
/// (PyTorch `fused=True` Adam / Apex FusedAdam are single-pass multi-tensor kernels).
pub const ADAM_BYTES_PER_PARAM: f64 = 30.0;

/// Host time per layer (with parameters) of a stage in each optimizer step of PyTorch's FSDP
/// (engine `fsdp`) sharded (ZeRO ≥ 1) over more than one rank. Under FSDP2 (torchtitan's)
/// every parameter is a DTensor of its own, and the step's AdamW and gradient-norm clipping
/// go through DTensor's dispatch tensor by tensor while the kernels they launch are small: the
/// GPU waits on the host. Measured elsewhere: AdamW 33% of a step under FSDP2 against 2.5%
/// under FSDP1 on one model, fused or foreach (187 ms of CPU time against 6 ms, with a
/// debugger attached; pytorch/pytorch#134191, torch 2.4); `foreach_norm` far slower on DTensor
/// lists than on tensors (pytorch/torchtitan#735, December 2024); ~0.9 ms of host time per
/// parameter tensor for a foreach AdamW step (microsoft/dion#63). *Calibrated*: 4 ms per layer
/// (about 0.45 ms per parameter tensor of a Llama block's nine) is what torchtitan's rows
/// leave unexplained per step, 0.11–0.24 s on 2–3 s steps of Llama 3 8B and Llama 2 13B on
/// 8–128 GPUs whatever their precision, compilation or GPU (docs/validation.md §8).
/// llm-foundry's multi-GPU rows (§1), set on nothing here, improve with it: 10.7% → 6.3%
/// (H100), 5.4% → 2.9% and 4.0% → 3.4% (A100). They ran FSDP1, whose flat parameters the
/// mechanism above spares: the time per step is there, and DTensor's dispatch may not be all
/// of it. Not charged on one rank: the one-GPU FSDP2 steps measured on an H200 (torch 2.11,
/// §5) show no such time, the host running ahead of a GPU no other rank holds back.
pub const FSDP_OPTIMIZER_HOST_S_PER_LAYER: f64 = 4.0e-3;

/// Mixed-precision Adam state per parameter before sharding (Rajbhandari et al. 2020, ZeRO §3):
/// 2 B 16-bit weights + 2 B 16-bit gradients + 12 B fp32 master weights, momentum and variance.
/// FP32 training: 4 B weights + 4 B gradients + 8 B momentum and variance: also 16 B.
pub const WEIGHT_BYTES_16: f64 = 2.0;
pub const GRAD_BYTES_16: f64 = 2.0;
pub const OPTIMIZER_BYTES_MIXED: f64 = 12.0;
pub const OPTIMIZER_BYTES_FP32: f64 = 8.0;

/// Memory the framework holds outside tensors before it communicates: the CUDA context and
/// cuBLAS/cuDNN workspaces, ~1.0 GiB on A100/H100 with PyTorch 2.x (`torch.cuda.mem_get_info`
/// right after initialisation vs. device total; PyTorch CUDA semantics notes). NCCL's buffers
/// come on top, per communicator (`NCCL_GROUP_BYTES`).
pub const RUNTIME_RESERVED_GIB: f64 = 1.0;

/// Device memory one NCCL communicator holds on each of its GPUs once it has run a collective:
/// its channels' FIFOs (4 MiB for the Simple protocol, 4.7 MiB LL128, 0.5 MiB LL per
/// connection, nccl src/init.cc `DEFAULT_*BUFFSIZE`), for every channel it opens. Measured on
/// A100s connected by NVLink with PyTorch, one process group per subset of 4 GPUs and a 4 MB
/// all-reduce in each: 688 MB per group of 3 or 4 GPUs, 544 MB per pair (NVIDIA/nccl issue
/// #964, 2023). NCCL opens channels to reach the link's bandwidth and its memory grows
/// linearly with them (NCCL's maintainer, issue #864: "we'll use more memory to reach H100
/// peak NVLink bandwidth than a PCI Gen3 peak bandwidth ... linearly tied to the number of
/// channels"), so `cost::memory::runtime_bytes` scales these by the GPU's intra-node link
/// against the A100's NVLink they were measured on (`NCCL_MEASURED_LINK_GB_S`). nvidia-smi
/// counts them; PyTorch's allocator statistics do not.
pub const NCCL_GROUP_BYTES: f64 = 688e6;
/// A two-GPU communicator (see `NCCL_GROUP_BYTES`).
pub const NCCL_PAIR_BYTES: f64 = 544e6;
/// The link `NCCL_GROUP_BYTES` was measured over: an A100 SXM's NVLink, 300 GB/s per
/// direction (the catalog's `a100-sxm4-*`).
pub const NCCL_MEASURED_LINK_GB_S: f64 = 300.0;

/// The caching allocator's fragmentation: reserved ≈ 1.07 × allocated at peak for transformer
/// training (PyTorch memory snapshots of Megatron/FSDP runs report 5–10%; Sailor's GH200
/// measurements, `docs/validation.md`, are consistent with it).
pub const ALLOCATOR_OVERHEAD: f64 = 0.07;

/// Parameters per second the host updates when optimizer states are offloaded (DeepSpeed
/// CPU-Adam, AVX-512, 2-socket Xeon): about 1 s per 10⁹ parameters (Ren et al. 2021,
/// "ZeRO-Offload", §4.1 and Fig. 8 — of that order; an estimate to be refined by profiling).
pub const CPU_ADAM_PARAMS_PER_S: f64 = 1.0e9;

/// Slowdown of compute kernels while NCCL kernels run beside them, and of NCCL while compute
/// runs (Mist's interference model, Zhu et al. 2025 §5.2.2, fits such factors per kernel pair
/// from profiles). NCCL's ring kernels occupy 8–32 SMs and part of HBM bandwidth; published
/// measurements of GEMMs overlapped with all-gather/reduce-scatter on A100/H100 report 5–20%
/// compute slowdown (Pati et al. 2024, "T3", §3; Jangda et al. 2022, "CoCoNet", §6). 1.10 each
/// is a documented default, to be refit from profile data.
pub const COMPUTE_SLOWDOWN_UNDER_NCCL: f64 = 1.10;
pub const NCCL_SLOWDOWN_UNDER_COMPUTE: f64 = 1.10;

/// The share of a pass's tensor-parallel collective bytes that TP communication overlap
/// (`Plan::tp_comm_overlap`) cannot hide behind its GEMMs: 1/(2·tp). With sequence
/// parallelism half of a pass's collectives are all-gathers feeding a GEMM and half
/// reduce-scatters of a GEMM's output (Korthikanti et al. 2022, §4.2.2: g and ḡ). Overlap
/// decomposes each into tp steps (Wang et al., ASPLOS '23, §3; Transformer Engine's
/// `split_overlap_ag` / `split_overlap_rs` userbuffers; torch's `fused_all_gather_matmul` /
/// `fused_matmul_reduce_scatter`): an all-gather's first step multiplies the local shard while
/// the next one arrives, so nothing waits; a reduce-scatter's last partial product leaves after
/// the last GEMM step, 1/tp of its bytes. A count of steps, not a fitted number.
pub fn tp_overlap_tail_share(tp: u32) -> f64 {
    1.0 / (2.0 * tp.max(1) as f64)
}

/// The share of the tensor-parallel collectives an engine's TP communication overlap
/// decomposes behind GEMMs; the rest stay blocking.
/// - Megatron (Transformer Engine's userbuffers): every all-gather and reduce-scatter of a
///   linear layer, forward and backward (`ModelParallelConfig`: `tp_comm_overlap_ag`,
///   `tp_comm_overlap_rs`, `tp_comm_bulk_wgrad`, `tp_comm_bulk_dgrad` all default on): 1.
/// - torchtitan (torch's async TP, an Inductor pass, `_inductor/fx_passes/micro_pipeline_tp.py`):
///   only all-gather→matmul and matmul→reduce-scatter patterns the pass matches in the compiled
///   graphs, at a cost it calls "the overhead associated with decomposition". 0.4 is fitted on
///   torchtitan's five published pairs of the same run with and without async TP
///   (`data/published/torchtitan.csv` rows 011/012, 019/020, 021/022, 025/026, 027/028): the
///   share of hetplan's TP communication the measured gain implies is 0.24, 0.49, 0.62, 0.39
///   and 0.33 (docs/validation.md §8).
/// - DeepSpeed, FSDP without torchtitan: no such overlap (`Runtime::why_not` refuses it): 0.
pub fn tp_overlap_decomposed_share(engine: Engine) -> f64 {
    match engine {
        Engine::Megatron => 1.0,
        Engine::Fsdp => 0.4,
        Engine::Deepspeed => 0.0,
    }
}

/// With TP communication overlap, the shares of a pass's TP collective bytes that flow beside
/// its compute and that flow after it: [`tp_overlap_decomposed_share`] less its reduce-scatter
/// tails ([`tp_overlap_tail_share`]) beside, the rest after. The estimate and the simulator
/// both split the bytes so.
pub fn tp_overlap_split(engine: Engine, tp: u32) -> (f64, f64) {
    let decomposed = tp_overlap_decomposed_share(engine);
    let beside = decomposed * (1.0 - tp_overlap_tail_share(tp));
    (beside, 1.0 - beside)
}

/// Parameters (on one rank, after TP) per gradient-reduction bucket, by engine; `None`: one
/// bucket per layer.
/// - Megatron-LM: `bucket_size = max(40_000_000, 1_000_000 × dp)` when the user gives none
///   (megatron/core/distributed/distributed_data_parallel.py: larger buckets at large dp "to
///   ensure that chunks used in NCCL ring-reduce implementations are large enough to remain
///   bandwidth-bound rather than latency-bound").
/// - DeepSpeed: ZeRO's `reduce_bucket_size` default 5e8 elements
///   (deepspeed/runtime/zero/config.py).
/// - PyTorch FSDP: reduce-scatters per wrapped unit, one transformer layer.
pub fn grad_bucket_params(engine: Engine, dp: u32) -> Option<f64> {
    match engine {
        Engine::Megatron => Some(40.0e6_f64.max(1.0e6 * dp as f64)),
        Engine::Deepspeed => Some(5.0e8),
        Engine::Fsdp => None,
    }
}

/// HBM bytes per element of casting a BF16 tensor to FP8 for an FP8 matrix product: read 2 B,
/// write the 1-byte FP8 tensor and its 1-byte transpose (Hopper's FP8 tensor cores take only
/// the TN layout, so the backward's products need the transposed operand). Transformer
/// Engine's `cast_transpose` kernel does exactly this in one pass, with the amax for the
/// per-tensor scale fused (transformer_engine/common/transpose/cast_transpose.cu); torchao's
/// Float8 casts likewise. A byte count, not a fitted number.
pub const FP8_CAST_BYTES_PER_ELEMENT: f64 = 4.0;

/// HBM bytes per element of one cast of torchao's rowwise FP8 recipe along an operand's rows
/// (its contiguous axis): read 2 B, write the 1-byte FP8 tensor, the row's amax reduced in
/// the same kernel (`hp_tensor_to_float8_dynamic`: `tensor_to_scale`, then
/// `hp_tensor_and_scale_to_float8`, torchao/float8/float8_scaling_utils.py, which
/// `torch.compile` fuses when the reduction runs along the contiguous axis). Rows longer than
/// Inductor's persistent-reduction limit (1,024 elements, torch/_inductor/choices.py) are
/// read twice in a looped kernel, the second time a row of 8–28 KB from L2, not HBM. A byte
/// count, for compiled casts: an eager torchao cast is several kernels through FP32 (the
/// amax, the scale, the clamp, the cast), which hetplan does not price, for either recipe.
pub const FP8_ROWWISE_CAST_BYTES_PER_ELEMENT: f64 = 3.0;

/// The same cast along an operand's columns (the backward's products: the output's gradient
/// for the weight gradient, the weight for the data gradient, the input for the weight
/// gradient): the amax reduced across rows in a pass of its own (read 2 B) before the cast
/// (read 2 B, write 1 B). A byte count.
pub const FP8_COLUMNWISE_CAST_BYTES_PER_ELEMENT: f64 = 5.0;

/// HBM bytes per element of a mixed-precision cast between FP32 and 16 bits: read 4 B and
/// write 2 (a weight to BF16), or read 2 and write 4 (a gradient to FP32). A byte count.
pub const MASTER_CAST_BYTES_PER_ELEMENT: f64 = 6.0;

/// HBM bytes per element of FSDP2's copy-out after an all-gather: read the gathered 16-bit
/// buffer, write the parameter (`foreach_all_gather_copy_out`,
/// torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py). A byte count. With the casts
/// above it prices FSDP2's own work: on an H200 one rank of FSDP2 over Llama-2 7B, blocks
/// compiled, ran 43 ms a step above autocast with the same blocks; these bytes give 22 ms, and
/// that rank's all-gathers and reduce-scatter, copies of 16 B per weight there, 25 ms more
/// (docs/validation.md §5).
pub const FSDP_COPY_OUT_BYTES_PER_ELEMENT: f64 = 4.0;

/// An FP8 GEMM's achievable fraction of the FP8 peak, relative to a BF16 GEMM's of the BF16
/// peak ([`gemm_efficiency`]): at twice the rate the same tiles spend a larger share in their
/// prologue, epilogue (the scaled BF16 output) and memory. Measured on an H200 with cuBLASLt
/// through `torch._scaled_mm` (E4M3, per-tensor scales, BF16 out — the call Transformer
/// Engine and torchao make) on Llama-3-8B's and -70B's forward products at 8,192–16,384
/// tokens: median 0.648 of 1,979 TFLOP/s against BF16's 0.685 of 989 on the same shapes
/// (`data/measured/h200-sxm-141gb/kernels.json`): 0.95.
pub const FP8_GEMM_RELATIVE_EFFICIENCY: f64 = 0.95;

/// torchao's rowwise FP8 products (`torch._scaled_mm` with a scale per row of each operand,
/// PyTorch's CUTLASS rowwise-scaled kernel on Hopper, not cuBLAS's per-tensor one) relative to
/// a BF16 GEMM's fraction of its peak — *fitted*, to torchtitan's commit 7a04053, which ran
/// one job (Llama 3 8B, 8 H100, FSDP2, per-op selective checkpointing, `torch.compile`, one
/// sample of 8,192 tokens per GPU) in BF16 and with the rowwise recipe: 5,760 and 6,412–6,424
/// tokens/s, 1.113–1.115×; hetplan estimates 1.113× with this value and the rowwise casts'
/// bytes (`tests/fp8.rs`; 0.72 before FSDP's per-step host time, which narrows every ratio on
/// this job, was priced). Checked against torchao's float8 README, the same job: 6,150 and
/// 6,768, 1.100×. Per-tensor FP8 is estimated at 1.26× on the same job where both sources
/// measured 1.25× with FP8 all-gathers; against per-tensor scaling's 0.95 this puts the
/// rowwise kernel at 0.78 of cuBLAS's rate.
pub const FP8_ROWWISE_GEMM_RELATIVE_EFFICIENCY: f64 = 0.745;

/// A GEMM's dimensions that are the rows of its operands (the inner `k` and the output width
/// `n`; not the tokens `m`) span a multiple of 16 bytes for cuBLAS's fastest kernels (NVIDIA's
/// "Matrix Multiplication Background" guide, Tensor Core requirements); below that it picks
/// kernels that load narrower vectors. What was measured is the narrowest case, rows aligned
/// to 2 bytes only (an odd width in a 16-bit type: GPT-2's 50,257-entry head), 5–7× slower
/// ([`UNALIGNED_GEMM_RELATIVE_EFFICIENCY`]). Rows aligned to 4 or 8 bytes (GPT-3 13B's
/// published d_model of 5,140: 10,280 B) have vectorised tensor-core kernels of their own,
/// not measured here: they are taken at the aligned rate, and a row below this many bytes'
/// alignment at the measured one.
pub const GEMM_ALIGN_BYTES: u64 = 4;

/// A GEMM with a row aligned below [`GEMM_ALIGN_BYTES`] relative to the aligned one. Measured on
/// an H200: GPT-2's 50,257-wide head at 16,384 tokens ran its forward, input- and
/// weight-gradient products at 99, 141 and 145 TFLOP/s where the 50,304-wide one (padded, as
/// Megatron pads the vocabulary) ran 689, 713 and 725 (`data/measured/h200-sxm-141gb/
/// alignment.json`): 0.144, 0.197 and 0.201, geometric mean 0.18. Hopper only was measured;
/// taken for every generation.
pub const UNALIGNED_GEMM_RELATIVE_EFFICIENCY: f64 = 0.18;

/// The head width of unfused attention's two batched products (QKᵀ reduces over it, PV writes
/// it) must span a multiple of 16 bytes, 8 16-bit elements, for cuBLAS's fast tensor-core
/// kernels (NVIDIA's "Matrix Multiplication Background" guide, Tensor Core requirements);
/// below it both run at [`UNALIGNED_BATCHED_GEMM_RELATIVE_EFFICIENCY`]. Unlike
/// [`GEMM_ALIGN_BYTES`] this covers 4- and 8-byte rows, because BigScience's BLOOM sizing runs
/// show them slow for these products (below); for the dense products 4- and 8-byte rows are not
/// measured.
pub const BATCHED_GEMM_ALIGN_BYTES: u64 = 16;

/// Unfused attention's batched products with heads not 16-byte aligned, as a fraction of the
/// GPU's large-GEMM rate, in place of the head's tile fill (`x / (x + GEMM_HALF_DIM)`): a kernel
/// without the tensor-core tiles does not waste them on a narrow head. FITTED on two
/// controlled pairs of BigScience's BLOOM sizing runs (A100 80GB, Megatron-DeepSpeed's
/// `baddbmm` attention, fp16, 2022; `bigscience_bloom_prequel.csv`): the same model and layout
/// with heads of 216 and of 108 (8-byte rows) ran 90 and 67 tokens/s per GPU (rows 034/036, TP
/// 8) and 106 and 74 (068/070, TP 4). With 0.05 the 108-wide rows are estimated +14.6% and
/// +7.4% where their 216-wide twins are +16.0% and +7.0% (at the dense products' 0.18,
/// [`UNALIGNED_GEMM_RELATIVE_EFFICIENCY`], times the head's fill, +34.5% and +28.6%). Checked
/// on rows not used to fit it, 002, 004 and 006 (heads of 150 and 450, 4-byte rows): +53%,
/// +45% and +56% before, +17.6%, +10.3% and +20.0% with it, as the TP-8 rows with aligned heads
/// (median +20%). Seen on A100 fp16 only; taken for every GPU and precision.
pub const UNALIGNED_BATCHED_GEMM_RELATIVE_EFFICIENCY: f64 = 0.05;
