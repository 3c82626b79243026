"""Every tunable factor of the analytical cost model, with the source of its default.

Nothing in :mod:`learn_to_shard.cost` hard-codes an efficiency or latency: it reads them here.
Defaults are first-principles values from public sources, except the ones marked
*calibrated*: those were fitted on the declared calibration rows of
``learn_to_shard/data/measurements.csv`` (``calibration = 1``) and checked on the rest
(``l2s validate``; ``docs/validation.md``); their values are data, read on import from
``learn_to_shard/data/calibration/factors.json`` (:class:`FactorsFile`: values, rows fitted
on, loss, date and code commit), which ``l2s validate --fit --write-factors`` writes.
Engine-specific values (memory policy, host
overheads of one engine on one system) are not defaults: they live in :data:`ENGINE_PROFILES`
and are applied with :meth:`CostModelConfig.for_engine`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..engines import ENGINES as _ENGINE_SPECS
from ..engines import PREFILL_FIRST_ENGINES, default_max_num_batched_tokens
from ..engines.collectives import ALGORITHMS
from ..errors import ConfigError
from ..hardware.spec import DeviceSpec
from ..jsonio import loads_strict


class FittedFactors(BaseModel):
    """One calibration fit as recorded in the factors file.

    Attributes:
        engine: engine of the calibration rows fitted on (column ``engine``).
        values: fitted value per :class:`CostModelConfig` field (SI units, as each field's
            name says).
        rows: ids of the measurement rows fitted on (``calibration = 1`` of
            ``measurements.csv``, or ``split = calibration`` of ``serving_measurements.csv``).
        table: file name of the measurement table the rows are from.
        loss: at ``values``: mean ``|ln(predicted / measured)|`` over the rows
            (``measurements.csv`` fits), or its median over every (row, metric) pair
            (``serving_measurements.csv`` fits, :func:`learn_to_shard.fidelity.fit.
            serving_loss`).
        date: UTC date of the fit (ISO 8601).
        commit: git commit of the code that ran the fit (``+dirty``: with uncommitted
            changes; ``unknown``: not run from a checkout).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    engine: str
    values: dict[str, float]
    rows: list[str]
    table: str
    loss: float
    date: str
    commit: str


class FactorsFile(BaseModel):
    """The calibration data file: fit name (``defaults`` or an engine profile) -> fit.

    Written by :func:`learn_to_shard.fidelity.fit.write_factors` (``l2s validate --fit
    --write-factors FILE``); read by this module (:func:`load_fitted_factors`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    about: str = ("Cost-model factors fitted on the calibration rows of the measurement "
                  "table (learn_to_shard.fidelity.fit); read by learn_to_shard.cost.config: "
                  "'defaults' holds CostModelConfig defaults, every other fit the fitted "
                  "fields of the engine profile of that name.")
    fits: dict[str, FittedFactors]


def factors_path() -> Path:
    """The shipped calibration data file, ``learn_to_shard/data/calibration/factors.json``."""
    return Path(str(resources.files("learn_to_shard") / "data" / "calibration" /
                    "factors.json"))


def load_fitted_factors(path: str | Path | None = None) -> FactorsFile:
    """Read and check a factors file.

    Args:
        path: the file; default :func:`factors_path`.

    Raises:
        ConfigError: unreadable file, invalid JSON, or a document that does not match
            :class:`FactorsFile` (the message names the file and the first bad field).
    """
    p = Path(path) if path is not None else factors_path()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read the calibration factors: {exc}") from None
    try:
        return FactorsFile.model_validate(loads_strict(text, str(p)))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise ConfigError(f"{p}: field {where!r}: {err['msg']}") from None


def _fitted(fit: str, names: tuple[str, ...] | None = None) -> dict[str, float]:
    """The values of one fit of the shipped factors file.

    Args:
        fit: fit name (``defaults`` or an engine profile).
        names: the fields it must set, exactly (None: whatever it sets).

    Raises:
        ConfigError: the fit is absent, or sets other fields than ``names``.
    """
    fits = _FACTORS.fits
    if fit not in fits:
        raise ConfigError(f"{factors_path()}: no fit {fit!r}; it holds {', '.join(fits)}")
    values = dict(fits[fit].values)
    if names is not None and set(values) != set(names):
        raise ConfigError(f"{factors_path()}: fit {fit!r} sets {', '.join(sorted(values))}; "
                          f"the cost model reads exactly {', '.join(names)} from it")
    return values


#: The shipped calibration fits (``data/calibration/factors.json``), read once on import.
_FACTORS = load_fitted_factors()
#: Calibrated :class:`CostModelConfig` defaults (fit ``defaults``).
_DEFAULTS = _fitted("defaults", ("flops_efficiency", "attention_hbm_efficiency"))

#: Values of :attr:`CostModelConfig.collective_algorithm`: the calibrated formula, the
#: cheapest available algorithm, or one algorithm of
#: :data:`learn_to_shard.engines.collectives.ALGORITHMS`.
COLLECTIVE_ALGORITHMS: tuple[str, ...] = ("alpha-beta", "auto", *ALGORITHMS)

#: Fields that are fractions of a peak or of memory: each must lie in (0, 1].
_FRACTIONS = ("flops_efficiency", "hbm_efficiency", "scale_up_efficiency",
              "scale_out_efficiency", "memory_utilization", "kv_cache_free_fraction",
              "fp8_flops_efficiency", "attention_flops_efficiency", "attention_hbm_efficiency",
              "mla_attention_hbm_efficiency", "gemm_overlap_efficiency",
              "fp8_block_scale_efficiency", "fp8_block_mma_efficiency", "moe_sm80_efficiency")
#: The serve simulation's KV admission rules (``CostModelConfig.kv_admission``).
KV_ADMISSIONS = ("reserve", "on_demand", "no_future_oom")
#: Kernels that serve a block-scaled FP8 MoE block on a chip with block-scaled MMA
#: (``CostModelConfig.block_fp8_moe_kernel``).
BLOCK_FP8_MOE_KERNELS = ("trtllm-gen", "deepgemm")

#: Fields that are times, sizes or shape constants: each must be >= 0.
_NON_NEGATIVE = ("kernel_overhead_s", "moe_block_overhead_s",
                 "block_fp8_local_expert_overhead_s", "runtime_reserved_bytes",
                 "host_step_overhead_s", "host_seq_overhead_s", "host_prefill_overhead_s",
                 "eager_layer_overhead_s", "frontend_latency_s", "frontend_serial_s",
                 "scale_up_latency_s",
                 "scale_out_latency_s", "gemm_shape_half",
                 "expert_shape_half", "mla_module_overhead_s")
#: Fields that must be >= 1 (counts, multipliers of an expected maximum).
_AT_LEAST_ONE = ("max_num_batched_tokens", "logits_bytes", "vocab_padding", "moe_imbalance",
                 "decode_steps_per_schedule", "scheduler_recv_interval")


#: Largest power-law exponent ``moe_routing_alpha`` takes: beyond ~155 the inverse CDF's
#: ``0.01 ** (1 - α)`` overflows (:mod:`learn_to_shard.cost.routing`); 10 already puts almost
#: every pair on the heaviest experts.
MAX_ROUTING_ALPHA = 10.0

#: Expert all-to-all kernels :attr:`CostModelConfig.moe_a2a_kernel` may name (None: the
#: engines' default all-to-all).
MOE_A2A_KERNELS: tuple[str | None, ...] = (None, "deepep_normal", "deepep_low_latency",
                                           "deepep_auto")


@dataclass(frozen=True, slots=True)
class CostModelConfig:
    """Tunable factors.

    Attributes:
        flops_efficiency: achievable fraction of dense peak FLOP/s for GEMMs and attention.
            0.70, *calibrated* (read from ``data/calibration/factors.json``, fit
            ``defaults``): fitted (with ``attention_hbm_efficiency``) on the 16
            TensorRT-LLM v0.14 rows of Llama-3.1-70B at TP8 (H200/H100 FP8, H100/A100 FP16);
            the prior was 0.70 (large cuBLAS/CUTLASS GEMMs reach 70–80% of H100 dense peak).
            The fit gave 0.65 before the FFN activation pass was priced, 0.70 since.
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
            ``gpu_memory_utilization`` default 0.9).
        runtime_reserved_bytes: memory per device the engine's tensor allocator never sees
            (CUDA context, cuBLAS/NCCL workspaces), taken from the usable budget before
            weights, workspace and KV — vLLM subtracts it as "non-torch memory" inside
            ``gpu_memory_utilization`` (vllm/v1/worker/gpu_worker.py
            ``determine_available_memory``). 0.73 GiB: FC-20's two profiles (RTX 3090,
            utilisation 0.9 of 24 GiB = 21.6 GiB; torch peak 17.06 / 17.98 GiB; KV 3.81 / 2.89
            GiB) both leave 21.6 − peak − KV = 0.73 GiB. One GPU, so no NCCL buffers: a lower
            bound for TP groups.
        max_num_batched_tokens: tokens per engine step and rank under chunked prefill (vLLM
            ``--max-num-batched-tokens``, SGLang ``--chunked-prefill-size``, TensorRT-LLM
            ``max_num_tokens``); bounds the serve-phase prefill chunk and sizes the
            activation workspace. ``None``: the engine's default for the device
            (:func:`learn_to_shard.engines.default_max_num_batched_tokens`: e.g. vLLM 8192 on
            an H100, 2048 on an A100; 8192 without an engine), resolved when a
            :class:`~learn_to_shard.cost.model.CostModel` is built (:meth:`for_device`) and
            applied per rank (SGLang divides its own default over attention-DP ranks, so
            its exported launch states the budget: ``report.export``).
        logits_bytes: bytes per logit gathered for sampling (fp32, as vLLM/TRT-LLM gather).
        vocab_padding: the vocabulary is padded to a multiple of ``vocab_padding`` (vLLM
            ``DEFAULT_VOCAB_PADDING_SIZE = 64``); with ``vocab_split_divisible`` off, to a
            multiple of ``vocab_padding × tp``.
        vocab_split_divisible: a vocabulary split needs the padded vocabulary divisible by
            ``tp``: vLLM and SGLang pad with ``pad_vocab_size(vocab, 64)`` and then
            ``divide(padded, tp)`` asserts (``VocabParallelEmbedding``), which is FC-07's
            "151552 cannot be divided by 6". False: the engine pads per rank, no rule
            (TensorRT-LLM's checkpoint conversion pads the vocabulary to a multiple of
            ``tp_size``).
        moe_imbalance: routing skew: multiplies the busiest EP rank's load, which is already
            the expected maximum under uniform random routing (balls into bins,
            ``CostModel._busiest_rank_factor``). 1.0 = uniform routing (assumption; FC-28 shows
            skew matters — raise it to study skew).
        moe_routing_alpha: exponent of the power-law expert load the serving model assumes
            (:mod:`learn_to_shard.cost.routing`): the busiest EP rank carries at least the
            pairs that load puts on it; ``None`` = uniform random routing alone. 1.2:
            aiconfigurator's default for MoE models (ai-dynamo/aiconfigurator@095f58a51c4c
            ``sdk/models/moe.py``; it uses 1.01 for DeepSeek's, which no measured kernel
            here checks), and the exponent of the measured kernel tables' power-law rows
            (``data/silicon/moe.csv`` ``power_law_1.2``), which it prices at 0.93–1.27 of
            their measured time by token and EP class (EP ≥ 8 above 1,024 tokens: 1.14,
            where uniform routing gives 0.41; ``tests/test_moe_kernels.py``); at most
            :data:`MAX_ROUTING_ALPHA`. Ignored with ``moe_balanced_routing``.
        moe_balanced_routing: price routing as the kernel tables' ``balanced`` rows run it
            (``data/silicon/moe.csv``: every rank gets ``⌈pairs / ep⌉`` token-expert pairs, no
            skew) instead of uniform random routing; False for serving (what real routers do),
            True only where those measured rows are priced
            (``fidelity.kernels.moe_kernels``).
        workspace_width_factor: live activation tensors per token in a layer, in units of the
            widest local activation (hidden, QKV, FFN). 2, derived from FC-20: vLLM profiled
            Llama-3.1-8B's activation peak at 2.07 GiB for a 20,000-token budget and 2.99 GiB
            for 29,000 (~110 KB/token) = 1.9 × its widest activation (gate+up, 2 × 14,336 ×
            2 B). Was 4 (input, output and two temporaries, an assumption).
        fp8_flops_efficiency: fraction of the FP8 peak FP8 GEMMs reach; ``None`` = the same
            fraction as ``flops_efficiency``. Fitting a separate value on the calibration rows
            did not lower their error, so none is set.
        kv_reserve_full_request: serve phase: a running request holds KV for its whole
            ``isl + osl`` (the scheduler reserves it on admission: TRT-LLM's default
            GUARANTEED_NO_EVICT policy; trtllm-bench sizes its batch as KV tokens /
            (isl + osl)). False: the mean occupancy ``isl + osl/2`` of an on-demand paged
            cache that preempts when full.
        host_step_overhead_s: engine host time per step not hidden behind the GPU, seconds
            (added to every pipeline stage's step). 0 for CUDA-graph engines (assumption);
            engine profiles set it.
        host_seq_overhead_s: host time per sequence in a step (input preparation, sampling),
            seconds. 0 by default; engine profiles set it.
        host_prefill_overhead_s: host time per prompt admitted in a step (request setup),
            seconds. 0 by default; engine profiles set it.
        eager_layer_overhead_s: host time per transformer layer of a pipeline stage in a step
            that carries prompt tokens, seconds. The engines replay decode-only steps as CUDA
            graphs, but steps with a prompt chunk run outside them (SGLang and TensorRT-LLM
            capture decode batches only; vLLM's piecewise graphs leave attention and steps
            beyond the capture sizes to eager launches), so each of a layer's kernels is
            launched from Python, ~10–30 µs of dispatch apiece (PyTorch eager overhead), which
            the GPU does not hide when the kernels are short. 0 by default; engine profiles
            set it.
        frontend_latency_s: time each request spends in the serving front-end outside the
            engine's steps, seconds: the OpenAI-compatible HTTP server (request parsing,
            chat template, tokenisation), the hand-off to the engine loop, and the return of
            the first token (de-tokenising, streaming). It lengthens the serve phase's TTFT
            (analytical and simulated) and the simulated end-to-end latency, and in a closed
            loop delays each client's next request; it takes no GPU time, so steady-state
            throughput does not include it. The engines' separate front-end processes
            (vLLM's API server and engine core, SGLang's tokenizer manager and scheduler,
            ``trtllm-serve``) make it a per-request constant; aiconfigurator prices vLLM's as
            0.8 ms per layer per request (ai-dynamo/aiconfigurator@095f58a5,
            aic-core/src/aiconfigurator_core/sdk/backends/vllm_backend.py
            ``_prefill_dispatch_overhead_ms``). 0 by default; engine profiles set it (fitted
            on TTFT at low load, :mod:`learn_to_shard.fidelity.fit`).
        frontend_serial_s: the front-end's CPU time per request in its one process (chat
            template, tokenisation), seconds, taken one request at a time: in the simulation
            a request waits for the requests sent before it
            (:func:`learn_to_shard.serving.simulate.frontend_intake`), so a burst of ``N``
            reaches the engine over ``N ×`` this and an instance takes in at most its inverse
            in requests per second (vLLM runs one API server process per instance unless
            ``--api-server-count`` says more, because that process limits the request rate:
            vllm-project/vllm#17546; SGLang one tokenizer manager); the analytical model adds
            it to TTFT beside ``frontend_latency_s`` (:attr:`frontend_time_s`) and caps an
            instance's tokens/s at ``osl`` over it. 0 by default and in every engine profile:
            not fitted, since no calibration row queues in the front-end
            (:func:`learn_to_shard.fidelity.fit.calibrate_serving`); set it where a front-end
            was measured.
        kv_cache_free_fraction: the KV pool may use this fraction of the memory that weights
            and workspace leave inside ``memory_utilization × HBM``. 1.0 is vLLM's accounting
            (``gpu_memory_utilization`` of the whole device); TensorRT-LLM uses
            ``memory_utilization = 1`` and ``kv_cache_free_gpu_mem_fraction = 0.9``.
            Reported memory totals count the KV pool at ``KV / fraction``.
        window_kv_capped: sliding-window / chunked-attention layers hold at most ``window``
            tokens of KV (engines with per-layer-type KV managers, e.g. vLLM's hybrid
            allocator). False: they are charged the full context like any layer (engines that
            unify page sizes across layer groups; FC-22's 12.00 GiB vs 6.09 GiB). The two
            values bound the KV need from below and above.
        attention_flops_efficiency: fraction of the BF16 peak that attention (prefill) math
            reaches; ``None`` = ``flops_efficiency``. Engine profiles set it.
        attention_hbm_efficiency: fraction of peak HBM bandwidth that attention reaches when
            it streams the KV cache in decode; ``None`` = ``hbm_efficiency``. 0.25,
            *calibrated* (``factors.json``) with ``flops_efficiency`` on the same 16 rows
            (their decode-heavy workloads, 1000/1000 and 2048/2048, are otherwise
            over-predicted by 30–60%). Low for a bandwidth-bound kernel: it also absorbs what
            the model leaves out of long decode steps (paged-KV gathers, per-request kernel
            work, batch ramp-up).
        mla_attention_hbm_efficiency: the same fraction for MLA attention's bytes (decode's
            latent KV, read once per token for every head of the rank, and a prefill's); ``None``
            = ``attention_hbm_efficiency``. 0.9, *fitted on measured kernels* with
            ``mla_module_overhead_s`` (``fidelity.kernels.fit_mla_kernels``): the decode rows of
            ``data/silicon/mla.csv`` (TensorRT-LLM's DeepSeek-V3 MLA module, aiconfigurator-core
            0.12.0) at batch 1, 8, 64 and 256 on H100/H200; B200's held out. Unlike the GQA
            factor it is not an end-to-end fit (no calibration row of the tables runs MLA), so
            it absorbs nothing beyond the kernel (``docs/validation.md``, "MLA module").
        scale_up_latency_s, scale_out_latency_s: per-step collective latency overriding the
            device preset's ``scale_up_latency_s`` / ``scale_out_latency_s`` (``None`` = the
            preset's). Engine profiles set it where an engine's collectives are slower.
        gemm_shape_half: GEMM efficiency falls with the local shape ``[M, K, N]`` as
            ``Π d / (d + gemm_shape_half)``; 0 = shape-independent. Fitting it on the
            calibration rows raised the held-out error (16% vs 13% median on throughput:
            the dense rows cannot separate it from ``flops_efficiency`` and it then penalises
            the Mixtral expert GEMMs), so it stays 0.
        moe_dense_local_outputs: when tokens reach the MoE replicated on every rank (``dp == 1``)
            and are routed locally, each rank writes the expert outputs of *every* token-expert
            pair, zeros for experts it does not hold, and reduces all ``top_k`` rows per token:
            vLLM's Triton fused MoE with an ``expert_map`` (``fused_moe_kernel``: ``if
            off_experts == -1: write_zeros_to_output``; ``moe_sum`` over ``[tokens, top_k,
            hidden]``, vllm-project/vllm vllm/model_executor/layers/fused_moe/fused_moe.py).
            So EP there saves FLOPs but not output traffic (FC-26). False: a rank writes only
            its own pairs.
        engine: the serving engine (``vllm``, ``sglang``, ``trtllm``) whose scheduler defaults
            apply; set by its profile, ``None`` for the defaults and the Splitwise profiles.
        max_num_seqs: running requests one scheduler (one attention-DP rank) admits: vLLM
            ``--max-num-seqs``, SGLang ``--max-running-requests`` / attention-DP size,
            TensorRT-LLM ``max_batch_size`` (per pipeline micro-batch, so ``pp`` times this
            run per rank). ``None``: the engine's default
            (:func:`learn_to_shard.engines.default_max_num_seqs`; no cap without ``engine``).
            The request-level simulation admits at most this many; the analytical search does
            not read it.
        moe_a2a_kernel: the expert all-to-all kernels the engine runs: ``None`` (the engines'
            default: the activation dtype, one copy per destination rank, no fixed cost;
            :func:`~learn_to_shard.cost.comm.all_to_all_v_time_s`), ``deepep_normal``,
            ``deepep_low_latency`` or ``deepep_auto`` (normal kernels for steps that prefill,
            low-latency ones for pure decode steps): DeepEP as priced by
            :func:`~learn_to_shard.cost.comm.expert_a2a_time_s` (SGLang
            ``--moe-a2a-backend deepep --deepep-mode``, vLLM ``--all2all-backend
            deepep_high_throughput`` / ``deepep_low_latency``), where experts are split by EP
            alone.
        moe_dispatch_payload: DeepEP dispatch precision, ``bf16`` / ``fp8`` / ``nvfp4``
            (:data:`~learn_to_shard.cost.comm.A2A_PAYLOAD_BYTES`); ``None``: FP8 for FP8
            weights (SGLang's DeepEP path quantises dispatch to FP8 for its FP8 kernels), else
            BF16. Combine is BF16.
        two_batch_overlap: the step runs as two micro-batches whose MoE dispatch and combine
            overlap the other's compute (SGLang ``--enable-two-batch-overlap``, vLLM
            ``--enable-dbo``; under those engines' profiles only where they run it: EP > 1,
            and for SGLang with ``moe_a2a_kernel``): the routed and shared experts take
            ``max(their compute, dispatch + combine)`` instead of the sum (the overlap
            bounded by the slower side; only the experts' own compute counts as cover, not
            the attention's or the router's, which keeps the layer separable for the exact
            solver; running the GEMMs on half-size micro-batches is not priced).
        attention_dp_balanced: serve phase, MoE models with attention-DP (``dp > 1``): the
            engine spreads each step's prompt tokens evenly over the DP ranks. ``False`` (the
            engines' default): each rank admits and prefills its own requests, and since the
            ranks meet at every MoE layer, a step lasts as long as its busiest rank's
            attention and dense work (:func:`~learn_to_shard.cost.terms.
            busiest_rank_prompt_tokens`); TensorRT-LLM ``attention_dp_config.enable_balance``
            defaults to off (NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py
            ``AttentionDpConfig``), SGLang's DP controller and vLLM's DP engine cores hand a
            request to one rank whole. ``True`` prices every rank at the mean.
        serve_step_mix: serve phase: price the mean step as the mix of two steps an engine
            runs (:meth:`~learn_to_shard.cost.terms.OperatorTerms.prompt_step_mix`: steps
            carrying more and fewer whole prompts, or budget-filling chunks, beside the
            decodes, matching the mean and variance of the prompts that join a step),
            ``t = q·t(step a) + (1 − q)·t(step b)``; a MoE model's attention-DP ranks as a
            step in which some rank carries a prompt chunk and one in which none does. A
            step's time is not linear in its tokens
            (flat while the weights' read bounds it, then linear in the GEMMs' work; a
            MoE's experts touched rise steeply with the first tokens), so the mean content's
            time misprices the mean step; the request-level
            simulation, which runs those steps, measured TPOT 1.29× and tokens/s 0.77× the
            mean-content price of a Llama-3.1-70B TP2 PP2 plan at the same occupancy.
            ``False``: price the mean content (what
            :func:`~learn_to_shard.serving.steptime.fit_step_model` reads to fit per-step
            prices).
        prefill_first: serve phase: steps carry only prompt chunks while prompts are
            pending (SGLang's scheduler; vLLM V0 without chunked prefill), in the simulation
            and in the analytical serve step (``serve_step_mix``,
            :meth:`~learn_to_shard.cost.terms.OperatorTerms.prompt_step_mix`); ``None`` = the
            engine's default (:data:`learn_to_shard.engines.PREFILL_FIRST_ENGINES`).
        overlap_schedule: serve simulation: a step's contents are fixed while the previous
            step runs (SGLang's and TensorRT-LLM's overlap schedulers, vLLM
            ``--async-scheduling``), so new requests join one step later; ``None`` = the
            engine's default (:data:`learn_to_shard.engines.OVERLAP_SCHEDULE_ENGINES`).
        decode_steps_per_schedule: serve simulation: decode steps the engine runs per
            scheduler call with no admission between them (vLLM V0 ``--num-scheduler-steps``;
            1, every step, for current engines).
        scheduler_recv_interval: serve simulation: consecutive decode-only steps between the
            scheduler's polls for new requests (SGLang ``--scheduler-recv-interval``, default
            1: every step); a step that prefills, and an idle engine, poll at once (SGLang
            0.5.12 ``SchedulerRecvSkipper``: decode and idle iterations weigh 1, any other
            forward mode 1,000, ``sglang/srt/environ.py``).
        kv_admission: serve simulation: when the KV pool admits a request
            (:data:`KV_ADMISSIONS`): ``reserve`` its whole ``isl + osl`` on admission,
            ``on_demand`` a paged pool that grows a token per decode and preempts the newest
            requests when full, ``no_future_oom`` SGLang's check for requests of known length,
            which admits while no future step is expected to run out
            (:func:`learn_to_shard.serving.simulate.simulate`); ``None`` = the engine's
            default (:data:`learn_to_shard.engines.KV_ADMISSION`; without an engine
            ``reserve`` when ``kv_reserve_full_request``, else ``on_demand``).
        collective_algorithm: how all-reduce, all-gather and reduce-scatter are priced
            (:data:`COLLECTIVE_ALGORITHMS`): ``alpha-beta`` (the default) the calibrated
            formula :func:`~learn_to_shard.cost.comm.collective_time_s`; ``auto`` the
            algorithm the run picks, priced by :class:`~learn_to_shard.cost.comm.
            CollectivePricer` (the cheapest available one of ``collective_tiers``' first
            tier that has one; without tiers the cheapest of all that the device and
            ``engine`` have); an algorithm name (``ring``, ``nvls``, ``one-shot``,
            ``two-shot+rmsnorm``, ...) that algorithm where it can run, else NCCL's cheapest
            (:func:`~learn_to_shard.cost.comm.forced_tiers`). All-to-alls and sends keep
            their formulas. The algorithm is an engine-level setting (one per server
            process), searched as an outer axis by ``l2s plan --collectives search``, not a
            per-operator choice.
        collective_tiers: with ``auto``: algorithm names in order of preference, as an
            engine launch setting runs them (:data:`learn_to_shard.engines.collectives.
            COLLECTIVE_SETTINGS`: e.g. vLLM runs its custom kernel wherever it takes the
            call, NCCL elsewhere); ``None``: one tier of every algorithm.
        collective_setting: the name of the engine launch setting ``collective_tiers`` came
            from (``report.export`` prints its flags); ``None`` for none.
        sequence_parallel: the all-reduce of a row-parallel output before a norm runs as a
            reduce-scatter, the norm on the token shard, and an all-gather before the next
            GEMM (``OperatorTerms._conv_parts``; vLLM's ``pass_config.enable_sp`` before
            0.33; no engine launches it at its pinned version,
            ``engines.collectives.SEQUENCE_PARALLEL_PASS``). An engine-level compile option,
            like the collective algorithm.
        gemm_overlap: an all-gather into a GEMM, and the reduce-scatter of the attention
            output projection's result, overlap that GEMM (async TP / collective matmul,
            vLLM's ``pass_config.fuse_gemm_comms`` before 0.33), priced
            ``min(comm + gemm, max(comm, gemm) / gemm_overlap_efficiency)``; the
            reduce-scatter after a layer's last GEMM (into the next layer) is not overlapped,
            which keeps layers separable for the exact solver.
        gemm_overlap_efficiency: the overlapped pair runs at ``max(comm, gemm) / e``: the
            GEMM split into per-rank chunks runs below its whole-matrix rate and the first
            chunk cannot overlap. 0.8 is an assumption (no measurement of it here).
        moe_block_overhead_s: fixed time of one MoE layer's routed-expert block per step,
            beyond its two expert GEMMs' roofline and ``kernel_overhead_s`` (the routing,
            token permutation, expert-offset, activation-quantisation and finalize kernels a
            fused MoE launches), seconds; added where a rank holds tokens for its experts.
            20 µs, *fitted on measured kernels* together with the ``trtllm`` profile's
            ``expert_shape_half`` (``fidelity.kernels.fit_moe_kernels``): the balanced-routing
            rows of ``data/silicon/moe.csv`` (TensorRT-LLM's MoE block, aiconfigurator-core
            0.12.0) of DeepSeek-V3, Mixtral-8x7B and Qwen3-30B-A3B on H100/H200/B200 in
            bf16/fp8/fp8 block-scaled, median |ln error| 0.58 → 0.13 (with
            ``fp8_block_scale_efficiency``; refitted with it, the same values); held out,
            Qwen3-235B-A22B's rows, 0.60 → 0.12. One value for every device and dtype.
        block_fp8_local_expert_overhead_s: time of one MoE layer's routed-expert block per
            step per expert the rank holds (``experts / ep``, whether tokens reach it or not),
            for FP8 weights with block scales (``ModelSpec.weight_block_size``, DeepSeek's
            128 × 128), beyond ``moe_block_overhead_s``, seconds; added where the rank holds
            tokens for its experts. TensorRT-LLM's block-scaled MoE blocks at one token grow
            with the local experts while their weight traffic falls (``data/silicon/moe.csv``,
            aiconfigurator-core 0.12.0, DeepSeek-V3 shapes on H200 with experts
            tensor-parallel over 8 ranks: 115 µs with all 256 experts on every rank, 40 µs
            with 32 under EP8; on H100 and B200 alike), where per-tensor FP8 and BF16 blocks
            do not (Qwen3-235B-A22B's BF16 shapes at one token: 40 µs with all 128 experts on
            each of 8 ranks, 38 µs with 16 under EP8): the block-scaled grouped GEMMs handle
            every local expert's problem and scales, empty or not (the mechanism is an
            inference from the tables). A property of TensorRT-LLM's kernels, so engine
            profiles set it: ``trtllm`` 0.25 µs, *fitted on
            measured kernels* (``fidelity.kernels.fit_block_fp8_expert_overhead``, jointly
            with ``fp8_block_scale_efficiency``: the block-scaled rows of every device,
            calibration shapes as ``moe_block_overhead_s``'s; median |ln error| 0.145 →
            0.112, held out 0.166 → 0.144); 0 elsewhere (no measured block-scaled MoE kernels
            of vLLM or SGLang).
        expert_shape_half: the expert GEMMs' rate falls with their local ``K`` and ``N`` as
            ``K/(K + x) · N/(N + x)``: many narrow expert GEMMs (expert TP splits ``N`` of the
            up and ``K`` of the down projection) run below a few wide ones (EP), and grouped
            expert GEMMs below a dense GEMM of the same size; 0 = off. A property of the MoE
            kernels, so engine profiles set it: ``trtllm`` 1024, fitted with
            ``moe_block_overhead_s`` on TensorRT-LLM's kernels (the measured EP8 time is
            0.3–0.6 of expert-TP8's above 1,024 tokens; without the curve the model says
            0.5–0.75). 0 elsewhere: vLLM's Triton fused MoE shows no EP advantage on one
            H200 node (FC-26: prefill MoE 3.4 ms per layer with EP8, 3.1 ms with TP8), and
            SGLang's default MoE kernel is of the same Triton lineage (assumption).
        fp8_block_scale_efficiency: fraction of the FP8 GEMM rate that GEMMs of a
            block-scaled FP8 checkpoint (``ModelSpec.weight_block_size``, DeepSeek-style
            128 × 128 weight scales) reach on chips without block-scaled tensor-core MMA
            (those without FP4 math, ``DeviceSpec.peak_fp4_flops_per_s`` None: Hopper, Ada,
            MI300), where the kernels apply the scales in the main loop on CUDA cores
            (DeepGEMM README, deepseek-ai/DeepGEMM: FP8 GEMMs with fine-grained scaling
            promote partial sums on CUDA cores on Hopper); chips with FP4 math (Blackwell,
            MI355X) have block-scaled MMA (the OCP microscaling formats) and keep the FP8
            rate. It scales the compute rate only, so memory-bound GEMMs do not change.
            0.6, *fitted on measured kernels* (``fidelity.kernels.fit_fp8_block_scale``):
            the block-scaled rows of ``data/silicon/moe.csv`` on H100/H200 (TensorRT-LLM's
            MoE block, aiconfigurator-core 0.12.0; at > 1,024 tokens they take 1.85× the
            per-tensor FP8 rows' time at the same shape), calibration shapes as
            ``moe_block_overhead_s``'s, with the ``trtllm`` profile's
            ``block_fp8_local_expert_overhead_s`` (fitted jointly with it, the same 0.6):
            median |ln error| at 1.0 → 0.6: 0.141 → 0.115, held out 0.207 → 0.156. The
            ``vllm`` and ``sglang`` profiles fit it the same way on their own engines'
            measured fused-MoE kernels (``data/silicon/moe_engines.csv``, vLLM 0.24.0 and
            SGLang 0.5.14 in aiconfigurator-core 0.12.0; ``fit_fp8_block_scale(engine=...)``):
            vLLM 0.4 (median |ln error| at 0.6 → 0.4: 0.234 → 0.203, held out 0.144 →
            0.112), SGLang 0.3 (0.203 → 0.169, held out 0.114 → 0.093). The fitted value
            applies to every GEMM of such a checkpoint (no dense block-scaled GEMM table to
            check it on).
        fp8_block_mma_efficiency: fraction of the FP8 GEMM rate that the routed-expert GEMMs
            of a block-scaled FP8 MoE checkpoint (``ModelSpec.weight_block_size``) reach on
            TensorRT-LLM-gen's fused MoE kernels (``block_fp8_moe_kernel`` ``trtllm-gen``),
            on datacenter Blackwell (compute capability 10.x, ``hardware.fabric``: B200, B300,
            GB200; those kernels exist for it alone). There the three engines can serve such
            blocks with them: vLLM 0.24.0 and SGLang 0.5.14 through FlashInfer (their measured
            tables' ``kernel_source``, aiconfigurator-core 0.12.0:
            ``vllm_fp8moe_flashinfer_trtllm_...``, ``sglang_flashinfer_trtllm_moe``; the two
            agree within 3% on every shape read), TensorRT-LLM as its ``moe_config.backend``
            ``TRTLLM`` (what ``ModelConfig.resolve_moe_backend`` picks for
            ``FP8_BLOCK_SCALES`` on SM100 in 1.3.0rc20, as ai-dynamo/aiconfigurator 095f58a5
            collector/trtllm/collect_moe.py cites it). 0.25, *fitted on measured kernels*
            (``fidelity.kernels.fit_fp8_block_mma``): the ``fp8_block`` rows of
            ``data/silicon/moe_engines.csv`` on B200 at >= 1,024 tokens with experts
            tensor-parallel, where the expert GEMMs make the block's time, median |ln error|
            at 1.0 → 0.25: SGLang 0.80 → 0.20 (held out, Qwen3-235B-A22B's shape, 0.55 →
            0.27), vLLM 0.85 → 0.14 (0.55 → 0.16); both engines fit the same value. Dense,
            attention and shared-expert GEMMs keep the FP8 rate (no block-scaled dense GEMM
            of these engines on B200 was measured here).
        block_fp8_moe_kernel: the kernels that serve a block-scaled FP8 MoE's routed experts
            on datacenter Blackwell (:data:`BLOCK_FP8_MOE_KERNELS`): ``trtllm-gen``
            (TensorRT-LLM-gen's fused block-scaled MoE: the expert GEMMs at
            ``fp8_block_mma_efficiency``, no ``block_fp8_local_expert_overhead_s`` and no
            ``expert_shape_half`` curve, as its measured blocks are fitted; what vLLM 0.24.0
            and SGLang 0.5.14 run on B200 by their tables, SGLang's
            ``--moe-runner-backend flashinfer_trtllm``, TensorRT-LLM's ``moe_config.backend
            TRTLLM``) or ``deepgemm`` (grouped DeepGEMM GEMMs at the FP8 datasheet rate with
            the engine's per-local-expert cost and curve: TensorRT-LLM's ``DEEPGEMM``
            backend, what aiconfigurator's collector measures for ``fp8_block`` on SM100 in
            ``data/silicon/moe.csv`` and the backend TensorRT-LLM's DeepSeek-R1 deployment
            guide lists for FP8 on B200, NVIDIA/TensorRT-LLM
            docs/source/deployment-guide/quick-start-recipe-for-deepseek-r1-on-trtllm.md;
            the ``trtllm`` profile's, whose pinned 1.2.0rc2 default was not read here).
            Ignored on other chips (their block-scaled MoE keeps the FP8 rate, or Hopper's
            ``fp8_block_scale_efficiency``), for other weights, and with ``moe_a2a_kernel``
            or ``two_batch_overlap`` set (the fused kernels route and combine inside; a DeepEP
            dispatch, which two-batch overlap runs over, takes grouped DeepGEMM expert GEMMs,
            priced as ``deepgemm``: at EP = the group they are wide, and TensorRT-LLM's
            measured DeepGEMM blocks at EP8 run at or above that price).
        moe_sm80_efficiency: fraction of the 16-bit GEMM rate that the routed-expert GEMMs
            reach in the engine's fused MoE on compute capability 8.0 (A100) where their math
            is 16-bit: 16-bit weights, or FP8 weights, which a chip without FP8 math
            dequantises in the kernel
            (:func:`~learn_to_shard.cost.terms.runs_sm80_16bit_experts`); dense, attention
            and shared-expert GEMMs keep the rate. 1.0: TensorRT-LLM 1.0.0's own A100 blocks
            (power-law routing, aiconfigurator-core 0.12.0 ``moe.csv``) are priced at a
            median 0.97x of measured without it (0.91x with experts tensor-parallel). The
            ``vllm`` and ``sglang`` profiles take 0.65, *fitted on measured kernels*: both
            engines' own Triton fused-MoE blocks on A100 from 1,024 tokens, experts
            tensor-parallel, fitted together (``fidelity.kernels.fit_moe_sm80_efficiency``,
            ``data/silicon/moe_engines.csv``: vLLM 0.14.0 with power-law routing, SGLang
            0.5.10 with balanced routing; the two engines' blocks of the same shape and
            routing measure alike in the source tables), which the 16-bit rate prices at a
            median 0.66x / 0.64x of measured (the same engines' Hopper rows 0.87–0.92x /
            0.83–0.84x): median |ln error| at 1.0 → 0.65: 0.412 → 0.302, held out
            (Qwen3-235B-A22B's shape) 0.510 → 0.302. After it the median block is still
            priced at 0.74x of measured and single rows span 0.55–1.39x: DeepSeek-V3's wide
            blocks at 8,192 tokens stay under-priced (0.37x → 0.55–0.66x), Mixtral's eight
            wide experts go over (1.24–1.39x at 8,192 tokens over 2–8 ranks).
            FP8 weights on A100 (vLLM's Marlin W8A16 MoE) are not in the tables and are
            priced at the same rate.
        mla_module_overhead_s: fixed time of one MLA attention module per step beyond the
            three fused operators the model prices for it (``qkv_proj``, ``attention``,
            ``o_proj``): the LoRA norms, RoPE, the absorbed ``k_b`` / ``v_b`` batched GEMMs,
            the KV-cache write and activation quantisation are kernels of their own; seconds,
            added to ``attention`` where a rank attends to any token. 40 µs, *fitted on
            measured kernels* with ``mla_attention_hbm_efficiency`` (above; NVFP4-GEMM rows
            left out): median |ln error| of the H100/H200 decode rows 0.55 without either
            (the GQA factor 0.25) → 0.063; held out, the same rows on B200, 0.61 → 0.16.
    """

    flops_efficiency: float = _DEFAULTS["flops_efficiency"]
    hbm_efficiency: float = 0.80
    scale_up_efficiency: float = 0.80
    scale_out_efficiency: float = 0.80
    kernel_overhead_s: float = 2e-6
    memory_utilization: float = 0.90
    runtime_reserved_bytes: float = 0.73 * 2**30
    max_num_batched_tokens: int | None = None
    logits_bytes: int = 4
    vocab_padding: int = 64
    vocab_split_divisible: bool = True
    moe_imbalance: float = 1.0
    moe_routing_alpha: float | None = 1.2
    moe_balanced_routing: bool = False
    workspace_width_factor: float = 2.0
    fp8_flops_efficiency: float | None = None
    kv_reserve_full_request: bool = True
    host_step_overhead_s: float = 0.0
    host_seq_overhead_s: float = 0.0
    host_prefill_overhead_s: float = 0.0
    eager_layer_overhead_s: float = 0.0
    frontend_latency_s: float = 0.0
    frontend_serial_s: float = 0.0
    kv_cache_free_fraction: float = 1.0
    window_kv_capped: bool = True
    attention_flops_efficiency: float | None = None
    attention_hbm_efficiency: float | None = _DEFAULTS["attention_hbm_efficiency"]
    mla_attention_hbm_efficiency: float | None = 0.9
    scale_up_latency_s: float | None = None
    scale_out_latency_s: float | None = None
    gemm_shape_half: float = 0.0
    moe_dense_local_outputs: bool = True
    engine: str | None = None
    max_num_seqs: int | None = None
    moe_a2a_kernel: str | None = None
    moe_dispatch_payload: str | None = None
    two_batch_overlap: bool = False
    attention_dp_balanced: bool = False
    serve_step_mix: bool = True
    prefill_first: bool | None = None
    overlap_schedule: bool | None = None
    decode_steps_per_schedule: int = 1
    scheduler_recv_interval: int = 1
    kv_admission: str | None = None
    collective_algorithm: str = "alpha-beta"
    collective_tiers: tuple[tuple[str, ...], ...] | None = None
    collective_setting: str | None = None
    sequence_parallel: bool = False
    gemm_overlap: bool = False
    gemm_overlap_efficiency: float = 0.8
    moe_block_overhead_s: float = 20e-6
    block_fp8_local_expert_overhead_s: float = 0.0
    expert_shape_half: float = 0.0
    mla_module_overhead_s: float = 40e-6
    fp8_block_scale_efficiency: float = 0.6
    fp8_block_mma_efficiency: float = 0.25
    block_fp8_moe_kernel: str = "trtllm-gen"
    moe_sm80_efficiency: float = 1.0

    def __post_init__(self) -> None:
        """Reject values no engine or device can have.

        Raises:
            ConfigError: a fraction outside (0, 1], a negative time or size, a count or
                multiplier below 1, a non-positive ``workspace_width_factor``, or an
                ``engine`` that :mod:`learn_to_shard.engines` does not know (the message
                names the field and the valid range).
        """
        def bad(name: str, valid: str) -> ConfigError:
            return ConfigError(f"cost-model factor {name} = {getattr(self, name)!r}: "
                               f"must be {valid}")

        for name in _FRACTIONS:
            v = getattr(self, name)
            if v is not None and not 0.0 < v <= 1.0:
                raise bad(name, "in (0, 1]")
        for name in _NON_NEGATIVE:
            v = getattr(self, name)
            if v is not None and not v >= 0.0:
                raise bad(name, ">= 0")
        for name in _AT_LEAST_ONE:
            v = getattr(self, name)
            if not (v is None and name == "max_num_batched_tokens") and not v >= 1:
                raise bad(name, ">= 1")
        if not self.workspace_width_factor > 0.0:
            raise bad("workspace_width_factor", "> 0")
        for name in ("decode_steps_per_schedule", "scheduler_recv_interval"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise bad(name, "an integer >= 1")
        if self.moe_routing_alpha is not None and not (
                isinstance(self.moe_routing_alpha, (int, float))
                and 0.0 < self.moe_routing_alpha <= MAX_ROUTING_ALPHA):
            raise bad("moe_routing_alpha", f"a number in (0, {MAX_ROUTING_ALPHA:g}] "
                                           f"(or None for uniform routing)")
        if self.engine is not None and self.engine not in _ENGINE_SPECS:
            raise bad("engine", "one of " + ", ".join(_ENGINE_SPECS) + " or None")
        if self.max_num_seqs is not None and not self.max_num_seqs >= 1:
            raise bad("max_num_seqs", ">= 1 (or None for the engine's default)")
        if self.kv_admission not in (None, *KV_ADMISSIONS):
            raise bad("kv_admission", "one of " + ", ".join(KV_ADMISSIONS) + " or None")
        if self.block_fp8_moe_kernel not in BLOCK_FP8_MOE_KERNELS:
            raise bad("block_fp8_moe_kernel", "one of " + ", ".join(BLOCK_FP8_MOE_KERNELS))
        if self.moe_a2a_kernel not in MOE_A2A_KERNELS:
            raise bad("moe_a2a_kernel", "one of " + ", ".join(str(k) for k in MOE_A2A_KERNELS))
        if self.moe_dispatch_payload not in (None, "bf16", "fp8", "nvfp4"):
            raise bad("moe_dispatch_payload", "bf16, fp8, nvfp4 or None")
        if self.collective_algorithm not in COLLECTIVE_ALGORITHMS:
            raise bad("collective_algorithm", "one of " + ", ".join(COLLECTIVE_ALGORITHMS))
        if self.collective_tiers is not None:
            if self.collective_algorithm != "auto":
                raise bad("collective_tiers", "None unless collective_algorithm is 'auto'")
            if not self.collective_tiers or any(
                    not tier or a not in ALGORITHMS for tier in self.collective_tiers
                    for a in tier):
                raise bad("collective_tiers", "non-empty tiers of " + ", ".join(ALGORITHMS))

    @property
    def token_budget(self) -> int:
        """:attr:`max_num_batched_tokens` once resolved (tokens per step and rank).

        Raises:
            ConfigError: still ``None`` (the engine's default needs the device:
                :meth:`for_device`, which every :class:`~learn_to_shard.cost.model.CostModel`
                applies).
        """
        if self.max_num_batched_tokens is None:
            raise ConfigError("max_num_batched_tokens is the engine's default for the device, "
                              "not resolved yet: call CostModelConfig.for_device first")
        return self.max_num_batched_tokens

    def for_device(self, device: DeviceSpec) -> CostModelConfig:
        """This configuration with the engine defaults that depend on the device resolved:
        ``max_num_batched_tokens`` when it is ``None``
        (:func:`learn_to_shard.engines.default_max_num_batched_tokens` for :attr:`engine`,
        from the device's names and memory capacity).

        Args:
            device: the accelerator the configuration prices.
        """
        if self.max_num_batched_tokens is not None:
            return self
        return dataclasses.replace(self, max_num_batched_tokens=default_max_num_batched_tokens(
            self.engine, device.names, device.hbm_bytes))

    @property
    def runs_prefill_first(self) -> bool:
        """Whether the engine runs a prefill-only step whenever prompts wait (``prefill_first``,
        or where that is ``None`` the engine's default,
        :data:`learn_to_shard.engines.PREFILL_FIRST_ENGINES`)."""
        if self.prefill_first is not None:
            return bool(self.prefill_first)
        return self.engine in PREFILL_FIRST_ENGINES

    @property
    def frontend_time_s(self) -> float:
        """Seconds one request spends in the serving front-end when no other waits there:
        ``frontend_latency_s + frontend_serial_s`` (what the analytical model adds to TTFT;
        the simulation also queues the serial part)."""
        return self.frontend_latency_s + self.frontend_serial_s

    @classmethod
    def for_engine(cls, engine: str | None, **overrides: Any) -> CostModelConfig:
        """The default factors with an engine profile (and then ``overrides``) applied.

        Args:
            engine: a key of :data:`ENGINE_PROFILES`, or ``None``/``""`` for the defaults.
            overrides: further field values.

        Raises:
            ConfigError: unknown engine (the message lists the known ones), or an override
                out of range (see ``__post_init__``).
        """
        values: dict[str, Any] = {}
        if engine:
            if engine not in ENGINE_PROFILES:
                raise ConfigError(f"unknown engine profile {engine!r}; known: "
                               f"{', '.join(sorted(ENGINE_PROFILES))}")
            values.update({k: v for k, v in ENGINE_PROFILES[engine].items()
                           if not k.startswith("_")})
        values.update(overrides)
        return dataclasses.replace(cls(), **values)


#: The engine overheads an engine profile reads from its fit (:func:`_engine_fit`): per step,
#: per sequence in a step, per layer of a step with prompt tokens, and per request in the
#: front-end.
ENGINE_STEP_FIELDS: tuple[str, ...] = ("host_step_overhead_s", "host_seq_overhead_s",
                                       "eager_layer_overhead_s", "frontend_latency_s")


def _engine_fit(fit: str) -> dict[str, float]:
    """The fitted engine overheads of engine profile ``fit`` (its fit in the factors file: the
    fields of :data:`ENGINE_STEP_FIELDS`, fitted on that profile's calibration rows of the
    serving table), or none when the file holds no fit of that name (no calibration row of
    the profile could be predicted).

    Raises:
        ConfigError: the fit sets other fields than those of :data:`ENGINE_STEP_FIELDS`.
    """
    if fit not in _FACTORS.fits:
        return {}
    return _fitted(fit, ENGINE_STEP_FIELDS)


_TRTLLM_MEMORY_SOURCE = ("kv_cache_free_gpu_mem_fraction 0.9 of the memory left after the "
                         "engine loads; GUARANTEED_NO_EVICT capacity scheduler")

#: What TensorRT-LLM's two runtimes share: memory policy, vocabulary padding and MoE kernels.
_TRTLLM_FACTS: dict[str, Any] = {
    "memory_utilization": 1.0,
    "kv_cache_free_fraction": 0.9,
    "kv_reserve_full_request": True,
    # Checkpoint conversion pads the vocabulary to a multiple of tp_size
    # (tensorrt_llm/models/convert_utils.py pad_vocab_size), so any TP splits it.
    "vocab_split_divisible": False,
    # CUTLASS MoE (cpp/tensorrt_llm/kernels/mixtureOfExperts/moe_kernels.cu): expand,
    # gated activation and finalize loop only to expert_first_token_offset[experts per
    # node], the rows of this rank's experts.
    "moe_dense_local_outputs": False,
    # Its grouped expert GEMMs slow down with narrow local shapes (expert TP): fitted on
    # its measured MoE kernels with moe_block_overhead_s (fidelity.kernels.fit_moe_kernels,
    # data/silicon/moe.csv). vLLM's Triton fused MoE shows no such EP advantage (FC-26).
    "expert_shape_half": 1024.0,
    # Its block-scaled FP8 MoE blocks cost more with every local expert (experts
    # tensor-parallel, all of them on every rank): fitted on its measured MoE kernels
    # (fidelity.kernels.fit_block_fp8_expert_overhead, data/silicon/moe.csv).
    "block_fp8_local_expert_overhead_s": 0.25e-6,
    # On B200 its measured block-scaled MoE is DeepGEMM's (data/silicon/moe.csv; its
    # deployment guide's FP8 backend there); moe_config.backend TRTLLM selects "trtllm-gen".
    "block_fp8_moe_kernel": "deepgemm",
    "engine": "trtllm",
}

#: Engine profiles: field values describing one serving engine (and, for host overheads, the
#: system it ran on). ``_source`` says where each came from. The ``vllm``, ``sglang`` and
#: ``trtllm`` profiles read their engine overheads (:data:`ENGINE_STEP_FIELDS`) from the fits
#: of the same name in ``data/calibration/factors.json``, fitted on that engine's
#: calibration rows of the serving table (``fidelity.fit.SERVING_CALIBRATIONS``); an engine
#: without a fit there keeps the defaults' 0. ``trtllm-tensorrt`` is TensorRT-LLM's older
#: TensorRT-engine runtime, which ``measurements.csv``'s TensorRT-LLM v0.14 rows ran and the
#: ``defaults`` fit prices: no Python launches, so none of the ``trtllm`` fit's host terms.
#: The Splitwise profiles' fitted
#: fields are read from ``data/calibration/factors.json`` (the fits of the same name), fitted
#: on the six calibration rows per system of the Splitwise data (measurements.csv,
#: ``calibration = 1``): decode at TP2/TP8 batch 1 and TP8 batch 64, prefill of 512 tokens at
#: TP2/TP8 and of 8,192 tokens at TP8; the engine is not named by its source. Their
#: ``_devices`` name the device kind of the system they were fitted on, the only one they
#: price (``api.engine_refusal``).
ENGINE_PROFILES: dict[str, dict[str, Any]] = {
    "vllm": {
        "_source": "the defaults: gpu_memory_utilization 0.9, on-demand paged KV",
        "kv_reserve_full_request": False,
        # Its block-scaled FP8 fused MoE (Triton / FlashInfer-CUTLASS): fitted on its own
        # measured MoE kernels (fidelity.kernels.fit_fp8_block_scale(engine="vllm"),
        # data/silicon/moe_engines.csv, vLLM 0.24.0 on H100/H200).
        "fp8_block_scale_efficiency": 0.4,
        # Its 16-bit fused MoE on A100 (vllm_fused_moe, Triton): fitted on its own and
        # SGLang's measured A100 blocks (fidelity.kernels.fit_moe_sm80_efficiency,
        # data/silicon/moe_engines.csv: vLLM 0.14.0, SGLang 0.5.10).
        "moe_sm80_efficiency": 0.65,
        "engine": "vllm",
        **_engine_fit("vllm"),
    },
    "sglang": {
        "_source": "SGLang 0.5.23: --mem-fraction-static of the device holds weights and the "
                   "KV pool (l2s uses its memory_utilization for it, default 0.9); requests "
                   "are admitted on estimated KV use and retracted when the pool is full, so "
                   "KV is charged at mean occupancy as for vLLM "
                   "(sglang/srt/arg_groups/fields/schedule.py)",
        "kv_reserve_full_request": False,
        # Its block-scaled FP8 fused MoE (Triton): fitted on its own measured MoE kernels
        # (fidelity.kernels.fit_fp8_block_scale(engine="sglang"),
        # data/silicon/moe_engines.csv, SGLang 0.5.14 on H100/H200).
        "fp8_block_scale_efficiency": 0.3,
        # Its 16-bit fused MoE on A100 (Triton): fitted on its own and vLLM's measured A100
        # blocks (fidelity.kernels.fit_moe_sm80_efficiency, data/silicon/moe_engines.csv:
        # SGLang 0.5.10, vLLM 0.14.0).
        "moe_sm80_efficiency": 0.65,
        "engine": "sglang",
        **_engine_fit("sglang"),
    },
    "trtllm": {
        "_source": "TensorRT-LLM's PyTorch runtime (trtllm-serve and trtllm-bench since 1.0): "
                   + _TRTLLM_MEMORY_SOURCE,
        **_TRTLLM_FACTS,
        **_engine_fit("trtllm"),
    },
    "trtllm-tensorrt": {
        "_source": "TensorRT-LLM's TensorRT-engine runtime (compiled engines run by the C++ "
                   "executor, as TensorRT-LLM v0.14's trtllm-bench ran the measurements.csv "
                   "rows): the trtllm profile's facts without its fitted host terms, which "
                   "price the PyTorch runtime's Python launches, and without the PyTorch "
                   "runtime's overlap scheduler (its C++ executor plans each step after the "
                   "previous one); " + _TRTLLM_MEMORY_SOURCE,
        **_TRTLLM_FACTS,
        "overlap_schedule": False,
    },
    "splitwise-dgx-h100": {
        "_source": "fitted on Splitwise DGX-H100 calibration rows (Llama-2-70B FP16): GEMMs "
                   "near the default rate, attention far below it (no fused attention), "
                   "15 us per collective step, host time per step/sequence/prompt",
        "_devices": ("h100-sxm",),
        **_fitted("splitwise-dgx-h100"),
    },
    "splitwise-dgx-a100": {
        "_source": "fitted on Splitwise DGX-A100 calibration rows (Llama-2-70B FP16)",
        "_devices": ("a100-80gb",),
        **_fitted("splitwise-dgx-a100"),
    },
}

_unknown = sorted({name for fit in _FACTORS.fits.values() for name in fit.values}
                  - {f.name for f in dataclasses.fields(CostModelConfig)})
if _unknown:
    raise ConfigError(f"{factors_path()}: {', '.join(_unknown)} are not cost-model factors "
                      f"(CostModelConfig fields)")
