"""Every tunable factor of the analytical cost model, with the source of its default.

Nothing in :mod:`learn_to_shard.cost` hard-codes an efficiency or latency: it reads them here.
Defaults are first-principles values from public sources; calibration against measurements
(issue 3) may replace them, only on a declared calibration subset.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CostModelConfig:
    """Tunable factors.

    Attributes:
        flops_efficiency: achievable fraction of dense peak FLOP/s for GEMMs and attention.
            0.70: large cuBLAS/CUTLASS BF16 GEMMs reach 70–80% of H100 dense peak (NVIDIA
            Hopper tuning guide; nvidia.github.io/TensorRT-LLM perf notes). Assumption.
        hbm_efficiency: achievable fraction of peak HBM bandwidth for weight/KV streaming.
            0.80: STREAM-like copies reach ~80–90% of HBM3 peak (H100 whitepaper). Assumption.
        scale_up_efficiency: nccl-tests bus bandwidth / link bandwidth inside a domain. 0.80:
            H100 NVLink4 all-reduce busbw ≈ 360 GB/s of 450 GB/s unidirectional (nccl-tests
            results published by NVIDIA). Assumption.
        scale_out_efficiency: the same across domains. 0.80: DeepEP reaches 43–58 GB/s RDMA
            of 50 GB/s per CX7 NIC (measurements.md §3), ~0.8–1.0.
        kernel_overhead_s: fixed cost per fused-operator kernel, seconds. 2 µs: kernel launch
            with CUDA graphs is ~1–3 µs (CUDA programming guide, "CUDA Graphs"). Assumption.
        memory_utilization: fraction of HBM an engine may use (vLLM's
            ``gpu_memory_utilization`` default 0.9); the rest covers the CUDA context and
            fragmentation.
        max_num_batched_tokens: tokens per engine step under chunked prefill (vLLM V1 default
            for online serving: 8192); bounds the serve-phase prefill chunk.
        logits_bytes: bytes per logit gathered for sampling (fp32, as vLLM/TRT-LLM gather).
        vocab_padding: vocabulary padded to a multiple of ``vocab_padding × tp`` when split
            (vLLM ``DEFAULT_VOCAB_PADDING_SIZE = 64``).
        moe_imbalance: busiest EP rank's token load / mean load. 1.0 = perfectly balanced
            routing (assumption; FC-28 shows skew matters — raise it to study skew).
        workspace_width_factor: live activation tensors per token in a layer, in units of the
            widest local activation (hidden, QKV, FFN). 4: input, output and two temporaries.
            Assumption, bounded by FC-20/FC-21 (activation peak follows the token budget).
    """

    flops_efficiency: float = 0.70
    hbm_efficiency: float = 0.80
    scale_up_efficiency: float = 0.80
    scale_out_efficiency: float = 0.80
    kernel_overhead_s: float = 2e-6
    memory_utilization: float = 0.90
    max_num_batched_tokens: int = 8192
    logits_bytes: int = 4
    vocab_padding: int = 64
    moe_imbalance: float = 1.0
    workspace_width_factor: float = 4.0
