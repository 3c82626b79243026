"""Per-operator cost terms: the single definition of what each fused operator costs.

For rows of (degrees, step token counts, incoming activation layout, per-operator choices)
:class:`OperatorTerms` prices every operator of a layer — its compute time (roofline), the
layout it needs and yields (:data:`learn_to_shard.parallel.ops.OPS`), and the collective that
converts between them (kind from :data:`learn_to_shard.cost.comm.TRANSITION_KIND`, bytes, group
and link) — plus the boundary terms (embedding, LM head, stage-to-stage send, host time) and
the memory terms (weights per layer, KV per sequence, workspace). Every formula is stated in
the module docstring of :mod:`learn_to_shard.cost.model` ("Operators", "Layouts", "MoE",
"Memory per device and stage"), with its source.

Two readers, one definition: :class:`learn_to_shard.cost.model.CostModel` (a subclass that adds
the pipeline, memory aggregation, limits and objective) walks the layer chain with
:meth:`OperatorTerms.layer` for ``evaluate_many`` and ``evaluate``'s breakdown, and the exact
solver's tables (:mod:`learn_to_shard.search.exact_tables`) call the same public methods on
structured rows. Every method is vectorised: arrays are ``[n]`` unless stated, seconds, bytes.

Extra per-layer terms: :data:`EXTRA_LAYER_TERMS` holds functions ``f(terms, env, dims, lin,
is_moe, window, ctx, rec) -> [n] seconds`` added to every layer's time by
:meth:`OperatorTerms.layer` (empty in the shipped model; the place where a toy or new
operator's price is registered, see ``docs/design.md`` "Adding an operator").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..engines import runs_two_batch_overlap
from ..engines.collectives import ENGINE_VENDORS
from ..errors import UnsupportedModelError
from ..hardware.fabric import compute_capability, scale_up_fabric
from ..hardware.spec import ClusterSpec, DeviceSpec
from ..model.spec import AttentionKind, ModelSpec
from ..parallel.mesh import Mesh
from ..parallel.ops import (
    LAYOUT_IN,
    LAYOUT_OUT,
    REPLICATED,
    Op,
)
from ..parallel.placement import RESOLVE, S0, S1, P, R
from ..workload import DType, Phase, Workload
from .comm import (
    ALL_REDUCE,
    AUTO_TIERS,
    GATHER_OR_SCATTER,
    NONE,
    TRANSITION_KIND,
    TRANSITION_REDUCE_SCATTER,
    CollectivePricer,
    all_to_all_v_time_s,
    collective_time_s,
    expected_destinations,
    expert_a2a_time_s,
    forced_tiers,
    rmsnorm_pass_time_s,
    transition_label,
)
from .config import CostModelConfig
from .routing import power_law_busiest_pairs
from .shapes import OpShapes

#: A per-layer operator term: ``term(terms, env, dims, lin, is_moe, window, ctx) -> [n]``
#: seconds, with the arguments of :meth:`OperatorTerms.layer` (no ``rec``). It must be a
#: non-negative time that depends on the choices only through ``attention`` / ``qkv_proj``
#: (with ``lin``) or through one FFN block, as the built-in terms do, so that the exact
#: solver's tables (:mod:`learn_to_shard.search.exact_tables`, checked by its ``verify``)
#: decompose it too.
LayerTerm = Callable[["OperatorTerms", dict, np.ndarray, np.ndarray, bool, "int | None", float],
                     np.ndarray]
#: Extra operator terms added to every layer by :meth:`OperatorTerms.layer`, by operator
#: name (the name becomes a key of ``Estimate.op_time_s``). Empty in the shipped model: the
#: registration point of a new operator's price (``docs/design.md``, "Adding an operator";
#: worked example ``tests/test_cost_extra_op.py``).
EXTRA_LAYER_TERMS: dict[str, LayerTerm] = {}


def _record_norm(rec: list | None, where: str, tp: np.ndarray, t: np.ndarray,
                 rows: np.ndarray) -> None:
    """Add an RMSNorm statistics all-reduce (4 bytes per token over the TP group, priced by
    :meth:`OperatorTerms._norm_stats`) to the breakdown ``rec`` of row 0 when it costs time."""
    if rec is not None and float(t[0]) > 0.0:
        rec.append((where, "all-reduce", int(tp[0]), float(t[0]), float(rows[0]) * 4.0))


def _layout_in(op: Op, choice: np.ndarray, arriving: np.ndarray) -> np.ndarray:
    """Layout operator ``op`` needs under ``choice`` when ``arriving`` arrives, ``[n]``
    (``ChoiceDef.layout_in`` of :data:`learn_to_shard.parallel.ops.OPS`)."""
    return LAYOUT_IN[op][choice, arriving]


def _layout_out(op: Op, choice: np.ndarray, ran_on: np.ndarray) -> np.ndarray:
    """Layout operator ``op`` yields under ``choice`` having run on ``ran_on``, ``[n]``
    (``ChoiceDef.layout_out``)."""
    return LAYOUT_OUT[op][choice, ran_on]


def _resolve(layout: np.ndarray) -> np.ndarray:
    """Layout after forcing complete values per token: P -> S(0), S(1) -> R, else unchanged
    (:func:`learn_to_shard.parallel.placement.resolve_layout`)."""
    return RESOLVE[layout]


def prompt_step_share(dec: np.ndarray | float, pf: np.ndarray | float,
                      pf_seqs: np.ndarray | float, dp: np.ndarray | float,
                      budget: int) -> np.ndarray:
    """Steps that carry prompt tokens, and so run outside the decode CUDA graphs, per step.

    Args:
        dec, pf, pf_seqs: decode sequences, prompt tokens and prompts completing per step and
            attention-DP rank.
        dp: attention-DP ranks.
        budget: tokens per step and rank (``max_num_batched_tokens``).

    Returns:
        A rank's share ``r = max(min(1, pf_seqs), pf / (budget − dec))`` where ``pf > 0`` —
        a serve step completing ``b/osl < 1`` prompts is a prompt step that often, a chunked
        prompt fills the budget the decodes leave, a serve step's ``pf`` prompt tokens above
        the budget take ``pf / budget`` budget-sized steps (``r > 1``, kept; a prefill plan's
        pass is one step, :meth:`OperatorTerms.host_time_s`) — and, with attention-DP,
        ``min(1, dp · r)`` of the serve steps: the ranks replay a CUDA graph only when none of
        them has prompt tokens (SGLang's DP attention agrees on one forward mode across its
        ranks). 0 where ``pf = 0`` (a decode step).
    """
    pf = np.asarray(pf, dtype=float)
    share = rank_prompt_share(dec, pf, pf_seqs, budget)
    share = np.where(share > 1.0, share, np.minimum(1.0, np.asarray(dp) * share))
    return np.where(pf > 0, share, 0.0)


def rank_prompt_share(dec: np.ndarray | float, pf: np.ndarray | float,
                      pf_seqs: np.ndarray | float, budget: int) -> np.ndarray:
    """The share of its steps in which one attention-DP rank carries prompt tokens,
    ``r = max(min(1, pf_seqs), pf / (budget − dec))`` (:func:`prompt_step_share`, which
    keeps ``r > 1`` for prefills longer than a step), ``dec``, ``pf`` and ``pf_seqs`` per step
    and rank, ``[n]``."""
    room = np.maximum(budget - np.asarray(dec, dtype=float), 1.0)
    return np.maximum(np.minimum(1.0, pf_seqs), np.asarray(pf, dtype=float) / room)


def busiest_rank_prompt_tokens(dec: np.ndarray | float, pf: np.ndarray | float,
                               pf_seqs: np.ndarray | float, dp: np.ndarray | float,
                               budget: int) -> np.ndarray:
    """Prompt tokens per step on the busiest of ``dp`` attention-DP ranks, in expectation.

    Each rank admits and prefills its own requests; over the steps a rank carries a prompt
    chunk in a share ``r`` of them (:func:`rank_prompt_share`, at most 1) and then ``pf / r``
    tokens of it (a
    whole prompt, or the room the decodes leave). With the ranks independent, a step has a
    rank carrying one with probability ``1 − (1 − r)^dp``, and since the ranks meet at every
    MoE layer that rank's tokens set the step's attention and dense time:
    ``pf_busy = (pf / r) · (1 − (1 − r)^dp)``. It equals ``pf`` at ``dp = 1`` or ``r = 1``
    (every step carries a chunk on every rank) and tends to ``dp · pf`` as ``r → 0`` (prompts
    rarely overlap). The busiest rank's tokens ``dec + pf_busy`` grow with the batch at fixed
    ``dp``; ``pf_busy`` alone can fall once prompts are longer than the room the decodes
    leave (the chunk shrinks as the decodes grow).

    Args:
        dec, pf, pf_seqs: decode sequences, prompt tokens and prompts completing per step and
            rank (the means), ``[n]``.
        dp: attention-DP ranks, ``[n]``.
        budget: tokens per step and rank (``max_num_batched_tokens``).

    Returns:
        ``[n]`` tokens (``pf`` where ``pf = 0``).
    """
    pf = np.asarray(pf, dtype=float)
    r = np.clip(rank_prompt_share(dec, pf, pf_seqs, budget), 1e-12, 1.0)
    busy = pf / r * (1.0 - (1.0 - r) ** np.asarray(dp, dtype=float))
    return np.where(pf > 0, np.maximum(busy, pf), pf)


def runs_trtllm_gen_moe(model: ModelSpec, device: DeviceSpec, weight_dtype: DType,
                        kernel: str, moe_a2a_kernel: str | None,
                        two_batch_overlap: bool) -> bool:
    """Whether a MoE's routed experts run on TensorRT-LLM-gen's fused block-scaled kernels
    (``CostModelConfig.block_fp8_moe_kernel`` ``trtllm-gen``): block-scaled FP8 weights
    (``ModelSpec.weight_block_size``) served in FP8, on datacenter Blackwell (compute
    capability 10.x, :mod:`learn_to_shard.hardware.fabric`; those kernels exist for it
    alone), and no DeepEP dispatch: the fused kernels route and combine inside (vLLM's table
    names them "...trtllmfp8expertsmonolithic"), so with ``moe_a2a_kernel`` or two-batch
    overlap (vLLM's ``--enable-dbo`` asserts a DeepEP dispatch) the engines run grouped
    expert GEMMs, priced as DeepGEMM's. The cost model prices by it and the exports launch
    by it."""
    return (model.moe is not None and model.weight_block_size is not None
            and weight_dtype is DType.FP8 and bool(device.peak_fp8_flops_per_s)
            and (scale_up_fabric(device).compute_capability or "").startswith("10.")
            and kernel == "trtllm-gen" and moe_a2a_kernel is None and not two_batch_overlap)


def runs_sm80_16bit_experts(model: ModelSpec, device: DeviceSpec, weight_dtype: DType) -> bool:
    """Whether ``model``'s routed experts run 16-bit GEMM math on an Ampere datacenter chip
    (CUDA compute capability 8.0, :func:`~learn_to_shard.hardware.fabric.compute_capability`:
    A100), where ``CostModelConfig.moe_sm80_efficiency`` scales their rate: a MoE model whose
    checkpoint does not pack its weights below 8 bits (``ModelSpec.quant``), served with
    16-bit weights or with FP8 weights, which a chip without FP8 math dequantises to 16 bits
    in the kernel (vLLM's Marlin W8A16 MoE). The fitted rows measure 16-bit weights; FP8
    weights there are priced at the same rate, not faster than the 16-bit math they run.
    Experts packed below 8 bits keep the device's own W4A16 fraction
    (``DeviceSpec.w4a16_expert_flops_efficiency``), and W8A8 INT8 checkpoints their INT8
    kernels."""
    q = model.quant
    return (model.is_moe and not (q is not None and (q.packed or q.int8_activations))
            and weight_dtype in (DType.BF16, DType.FP8)
            and compute_capability(device) == "8.0")


@dataclass(frozen=True)
class StepMix:
    """The two serve steps whose weighted sum prices the mean step
    (:meth:`OperatorTerms.prompt_step_mix`), ``[n]`` each: weight ``q`` on step a, which
    carries ``dec_a`` decodes, ``pf_a`` prompt tokens and ``seqs_a`` completing prompts per
    rank, and weight ``w_b`` on step b, which carries the row's decodes, ``pf_b`` and
    ``seqs_b``. ``mixed``: the rows priced as two steps; elsewhere step a alone (its
    content the mean's). ``busy_a``: where finite, the prompt tokens of the busiest
    attention-DP rank in step a (a MoE model's ranks mixed as one step,
    :meth:`OperatorTerms.prompt_step_mix`), which ``pf_a``, the ranks' mean, does not give
    (:meth:`OperatorTerms.rank_prompt_tokens`); NaN elsewhere.

    Decodes first (vLLM V1, TensorRT-LLM) both steps decode and ``w_b = 1 − q``: the mean
    step. Prefill first (SGLang) step a is a prefill-only step (``dec_a = 0``) and step b
    decodes alone, ``w_b = 1`` (0 at ``osl = 1``: no decode step) and ``q`` prefill-only steps
    per decode step: the mean time per decode step, prefills included, which is what a serve
    step's time stands for (tokens per second at the decodes per step, and TPOT)."""

    q: np.ndarray
    pf_a: np.ndarray
    seqs_a: np.ndarray
    pf_b: np.ndarray
    seqs_b: np.ndarray
    dec_a: np.ndarray
    w_b: np.ndarray
    mixed: np.ndarray
    busy_a: np.ndarray | None = None

    def blend(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``q·a + w_b·b`` per row, ``a`` itself where the row is not mixed; ``a`` and
        ``b`` are ``[n, ...]`` (weights broadcast over the trailing axes), priced for step
        a and step b. An unpriced (+inf) entry stays +inf (``q > 0`` where mixed; a step b
        of weight 0, prefill first at ``osl = 1``, adds nothing)."""
        a, b = np.asarray(a), np.asarray(b)
        shape = self.q.shape + (1,) * (a.ndim - self.q.ndim)
        wa, wb, on = self.q.reshape(shape), self.w_b.reshape(shape), self.mixed.reshape(shape)
        with np.errstate(invalid="ignore"):            # 0·inf in the branch not taken
            return np.where(on, wa * a + np.where(wb > 0.0, wb * b, 0.0), a)


@dataclass
class Link:
    """The link each row's group rides: achievable bus bandwidth ``bw`` (bytes/s) and
    per-step latency ``alpha`` (s), ``[n]`` each (:meth:`OperatorTerms.layer_env`; values
    from the device preset and ``CostModelConfig`` scale-up/-out efficiencies and
    latencies)."""

    bw: np.ndarray
    alpha: np.ndarray


class OperatorTerms:
    """The per-operator, boundary and memory terms of one (model, cluster, workload).

    Args:
        model: the model (shapes from :class:`~learn_to_shard.cost.shapes.OpShapes`).
        cluster: the cluster (device rates, links, node size).
        workload: the workload (dtypes, isl/osl, phase).
        config: the factors (:class:`~learn_to_shard.cost.config.CostModelConfig`).

    Raises:
        UnsupportedModelError: a window size used both as sliding and as chunked attention.

    Attributes:
        shapes: operator shapes; mesh: rank placement (:class:`~learn_to_shard.parallel.mesh.
            Mesh`); layer_types: distinct ``(is_moe, window)`` in order of appearance;
        layer_type_of: ``[num_layers]`` index into ``layer_types``.
        expert_dequant_efficiency: the fraction of the 16-bit rate the routed-expert GEMMs
            run at where they dequantise experts stored below 8 bits
            (``DeviceSpec.w4a16_expert_flops_efficiency``); ``None`` where that rate is not
            applied (8-bit or wider experts, FP4 GEMMs, no measurement on the device, or a
            dense model, which has no routed experts).
    """

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, workload: Workload,
                 config: CostModelConfig) -> None:
        self.model = model
        self.cluster = cluster
        self.workload = workload
        self.config = config
        self.shapes = OpShapes.of(model)
        dev = cluster.device
        # Weight bytes and GEMM rates follow the checkpoint (ModelSpec.quant, read by
        # model.hf_config.read_quant): a 4-bit checkpoint (GPTQ/AWQ/compressed-tensors int4,
        # NVFP4 4.5 bits, MXFP4 4.25 bits, scales included) keeps its size in memory and in
        # HBM traffic whatever the workload's dtype; FP8 and 16-bit checkpoints are stored as
        # the workload's dtype says (its FP8 choice is the checkpoint's by default).
        q = model.quant
        low = q is not None and q.packed
        bits_b = q.weight_bits / 8.0 if q is not None else 0.0
        self._wb = bits_b if low and q is not None and not q.experts_only \
            else float(workload.weight_dtype.bytes)
        self._kvb = float(workload.kv_dtype.bytes)
        self._ab = float(workload.activation_dtype.bytes)
        fp8 = workload.weight_dtype is DType.FP8 and dev.peak_fp8_flops_per_s
        c = self.config
        fp8_eff = c.fp8_flops_efficiency if c.fp8_flops_efficiency is not None \
            else c.flops_efficiency
        bf16_rate = dev.peak_bf16_flops_per_s * c.flops_efficiency
        fp8_rate = dev.peak_fp8_flops_per_s * fp8_eff if dev.peak_fp8_flops_per_s else bf16_rate
        # Block-scaled FP8 weights on a chip without block-scaled MMA (no FP4 math): the
        # scales are applied on CUDA cores in the main loop (CostModelConfig.
        # fp8_block_scale_efficiency). On datacenter Blackwell a MoE's routed experts may run
        # on TensorRT-LLM-gen's kernels instead (runs_trtllm_gen_moe), at
        # CostModelConfig.fp8_block_mma_efficiency (below); other chips with FP4 math
        # (RTX PRO 6000's SM 12.0, MI355X) keep the FP8 rate.
        block_fp8 = bool(fp8) and model.weight_block_size is not None
        trtllm_gen = runs_trtllm_gen_moe(model, dev, workload.weight_dtype,
                                         c.block_fp8_moe_kernel, c.moe_a2a_kernel,
                                         c.two_batch_overlap)
        if block_fp8 and not dev.peak_fp4_flops_per_s:
            fp8_rate *= c.fp8_block_scale_efficiency
        #: Per-step cost of each local expert of a routed-expert block, seconds
        #: (CostModelConfig.block_fp8_local_expert_overhead_s: block-scaled FP8 weights, not
        #: on TensorRT-LLM-gen's kernels).
        self._local_expert_s = c.block_fp8_local_expert_overhead_s \
            if block_fp8 and not trtllm_gen else 0.0
        #: Narrow-GEMM half-width of the routed-expert GEMMs (CostModelConfig.
        #: expert_shape_half): 0 on TensorRT-LLM-gen's block-scaled kernels, whose measured
        #: blocks (fidelity.kernels.fit_fp8_block_mma) are priced without it.
        self._expert_shape_half = 0.0 if trtllm_gen else c.expert_shape_half
        # FP4 (NVFP4 / MXFP4) GEMMs run on FP4 tensor cores where the chip has them (B200,
        # B300, MI355X; DeviceSpec.peak_fp4_flops_per_s), at the FP8 efficiency factor (no FP4
        # measurement to calibrate against); elsewhere (Hopper, MI300X) the weights are
        # dequantised in the kernel (vLLM Marlin / Triton) and the math is 16-bit. INT4
        # weight-only formats always run 16-bit math; W8A8 INT8 runs at the FP8 rate (the
        # INT8 and FP8 dense peaks are equal on H100/H200/B200/MI300X datasheets).
        fp4_rate = dev.peak_fp4_flops_per_s * fp8_eff \
            if q is not None and q.fp4 and dev.peak_fp4_flops_per_s else None
        if low and q is not None:
            quant_rate = fp4_rate or bf16_rate
        elif q is not None and q.int8_activations:
            quant_rate = fp8_rate
        else:
            quant_rate = fp8_rate if fp8 else bf16_rate
        self._gemm_flops = quant_rate if not (q is not None and q.experts_only) \
            else (fp8_rate if fp8 else bf16_rate)
        #: Routed-expert GEMM rate and bytes per weight (differ from the rest only for
        #: checkpoints that quantise the experts alone, gpt-oss MXFP4). Experts stored below
        #: 8 bits that do not run as FP4 GEMMs (no FP4 math on the chip, or integer 4-bit
        #: weights) run their dequantising grouped GEMMs at the chip's measured fraction of
        #: the 16-bit rate (DeviceSpec.w4a16_expert_flops_efficiency; unmeasured chips 1).
        w4a16 = dev.w4a16_expert_flops_efficiency
        self.expert_dequant_efficiency = w4a16 \
            if low and fp4_rate is None and model.is_moe else None
        self._expert_flops = quant_rate * self.expert_dequant_efficiency \
            if self.expert_dequant_efficiency is not None else quant_rate
        if trtllm_gen:
            # Fitted on those kernels' measured MoE blocks (fidelity.kernels.fit_fp8_block_mma):
            # the routed-expert GEMMs only; dense and shared-expert GEMMs keep the FP8 rate.
            self._expert_flops *= c.fp8_block_mma_efficiency
        if runs_sm80_16bit_experts(model, dev, workload.weight_dtype):
            # The engine's fused MoE on Ampere (CostModelConfig.moe_sm80_efficiency, fitted
            # on its measured A100 blocks by fidelity.kernels.fit_moe_sm80_efficiency).
            self._expert_flops *= c.moe_sm80_efficiency
        self._attn_flops = dev.peak_bf16_flops_per_s * (
            c.attention_flops_efficiency if c.attention_flops_efficiency is not None
            else c.flops_efficiency)
        self._attn_hbm = dev.hbm_bytes_per_s * (
            c.attention_hbm_efficiency if c.attention_hbm_efficiency is not None
            else c.hbm_efficiency)
        self._mla_hbm = self._attn_hbm if c.mla_attention_hbm_efficiency is None \
            else dev.hbm_bytes_per_s * c.mla_attention_hbm_efficiency
        # FP8 and 4-bit checkpoints keep the embedding and LM head in 16 bits (DeepSeek-V3
        # FP8, ModelOpt FP8/NVFP4 exclude lm_head); those two use 16-bit bytes and the 16-bit
        # GEMM rate.
        self._eb = max(self._wb, float(DType.BF16.bytes))
        self._ewb = bits_b if low else self._wb
        self._lm_flops = bf16_rate if (fp8 or q is not None) else self._gemm_flops
        self._hbm = dev.hbm_bytes_per_s * c.hbm_efficiency
        self._usable = max(dev.hbm_bytes * c.memory_utilization - c.runtime_reserved_bytes, 0.0)
        self._domain = cluster.devices_per_node
        #: Rank placement: group extents, node straddling, stage hops (one place).
        self.mesh = Mesh(cluster.num_devices, cluster.devices_per_node)
        # Layer types: unique (is_moe, window) in order of appearance.
        types: list[tuple[bool, int | None]] = []
        seq: list[int] = []
        for layer in model.layers:
            key = (layer.is_moe, layer.window)
            if key not in types:
                types.append(key)
            seq.append(types.index(key))
        #: The distinct layer types ``(is_moe, window)``, in order of first appearance.
        self.layer_types = types
        #: ``[num_layers]`` int64: each layer's index into :attr:`layer_types`.
        self.layer_type_of = np.asarray(seq, dtype=np.int64)
        # Window sizes used by chunked (not sliding) attention; a layer type is identified by
        # (is_moe, window), so one size cannot be both.
        self._chunked = frozenset(layer.window for layer in model.layers if layer.chunked)
        if any(layer.window in self._chunked and not layer.chunked for layer in model.layers):
            raise UnsupportedModelError(f"{model.name}: a window of the same size is used "
                                        f"both as sliding and as chunked attention")

    @property
    def usable_bytes(self) -> float:
        """Device memory a strategy may use, bytes: ``memory_utilization × HBM −
        runtime_reserved_bytes`` (``CostModelConfig``; at least 0)."""
        return self._usable

    # ------------------------------------------------------------------ helpers
    def _link(self, extent: np.ndarray) -> Link:
        """Link a group of ``extent`` consecutive ranks spans, ``[n]``: scale-up if every such
        group stays inside one domain, else scale-out (the slowest group sets the step).

        Groups are laid out back to back from rank 0 (TP innermost); whether one of them
        straddles a node is :meth:`learn_to_shard.parallel.mesh.Mesh.in_node` (the all-to-all
        asks the mesh the same): with 8-GPU nodes, TP6's second group holds ranks 6–11 and
        crosses a node. A group larger than a one-domain cluster stays on the scale-up link.
        """
        return self._link_of(self.mesh.in_node(extent))

    def _link_of(self, intra: np.ndarray) -> Link:
        """The scale-up link where ``intra`` is true, else the scale-out one (bandwidth times
        its efficiency; latency from the config, else the device preset), ``[n]``."""
        dev = self.cluster.device
        c = self.config
        bw = np.where(intra, dev.scale_up_bytes_per_s * c.scale_up_efficiency,
                      dev.scale_out_bytes_per_s * c.scale_out_efficiency)
        up_a = c.scale_up_latency_s if c.scale_up_latency_s is not None \
            else dev.scale_up_latency_s
        out_a = c.scale_out_latency_s if c.scale_out_latency_s is not None \
            else dev.scale_out_latency_s
        alpha = np.where(intra, up_a, out_a)
        return Link(bw=bw, alpha=alpha)

    def _act_pass(self, up_elems: np.ndarray) -> np.ndarray:
        """The FFN activation between the up and down GEMMs as its own memory-bound pass over
        the ``up_elems`` up-projection outputs a rank holds: reads them, writes half (gated:
        ``act(gate) · up``, SiluAndMul) or all (ungated); seconds. A separate kernel in vLLM
        (``SiluAndMul``; ``fused_experts`` runs it over the whole ``[tokens · top_k, N]`` cache,
        rows of other ranks' experts included)."""
        out = 0.5 if self.model.gated_mlp else 1.0
        return self._stream_pass(up_elems * (1.0 + out))

    def _stream_pass(self, elems: np.ndarray) -> np.ndarray:
        """An element-wise kernel moving ``elems`` 16-bit activations through HBM (reads plus
        writes): ``elems · bytes / (HBM · hbm_efficiency) + kernel_overhead``; seconds."""
        return elems * self._ab / self._hbm + self.config.kernel_overhead_s

    def _busiest_rank_factor(self, tokens: np.ndarray, ep: np.ndarray) -> np.ndarray:
        """Expected load of the busiest of ``ep`` expert-parallel ranks over the mean, for
        ``tokens`` tokens routed to ``top_k`` experts each (uniform random routing, and the
        power-law expert load below where that puts more on it).

        Balls into bins (Raab & Steger, "Balls into Bins — A Simple and Tight Analysis",
        RANDOM 1998): ``m`` balls in ``n`` bins, ``m ≥ n log n``, give a maximum of
        ``m/n + sqrt(2 (m/n) ln n)``. Here ``m = tokens · top_k`` pairs, ``n = ep``. Outside
        that regime the formula is a rough guide, so two hard bounds hold: the busiest rank
        carries at least one pair when there is one (``min(m, 1)``), and at most every token
        sending ``min(top_k, E/ep)`` pairs to it. Real routing is skewed beyond uniform
        (FC-28): with ``moe_routing_alpha`` set, the busiest rank carries at least what
        aiconfigurator's power-law expert load with that exponent puts on it
        (:func:`~learn_to_shard.cost.routing.power_law_busiest_pairs`; uniform probabilities
        minimise the expected maximum, so the larger of the two is taken), and
        ``moe_imbalance`` multiplies the load before the upper bound. With
        ``moe_balanced_routing`` (the measured kernel tables' balanced rows) the pairs are
        spread evenly instead: ``⌈m/n⌉``. 1 for ``ep == 1``; ``[k]``.
        """
        moe = self.model.moe
        assert moe is not None
        ep_f = np.maximum(ep, 1).astype(np.float64)
        pairs = tokens * moe.top_k
        mean = np.maximum(pairs / ep_f, 1e-12)
        if self.config.moe_balanced_routing:
            return np.where(ep_f > 1, np.ceil(mean * (1 - 1e-12)) / mean, 1.0)
        cap = np.maximum(tokens * np.minimum(float(moe.top_k), moe.num_experts / ep_f), mean)
        busiest = np.maximum(mean + np.sqrt(2.0 * mean * np.log(ep_f)), np.minimum(pairs, 1.0))
        if self.config.moe_routing_alpha is not None:
            busiest = np.maximum(busiest, power_law_busiest_pairs(
                tokens, ep, moe.num_experts, moe.top_k, self.config.moe_routing_alpha))
        busiest = np.minimum(busiest * self.config.moe_imbalance, cap)
        return np.where(ep_f > 1, busiest / mean, 1.0)

    @staticmethod
    def moe_input_layout(o_proj_out: np.ndarray, dp: np.ndarray) -> np.ndarray:
        """Layout of the MoE block's input (what the router, the dispatch and the shared
        experts read) given o_proj's output layout, ``[n]`` (``Layout`` codes): partial sums
        are all-reduced where one attention replica serves the stage (``dp = 1``) and
        reduce-scattered to token shards across attention-DP ranks (``dp > 1``: each rank
        dispatches its own tokens); other layouts resolve to complete values per token
        (:func:`~learn_to_shard.parallel.placement.resolve_layout`)."""
        return np.where(o_proj_out == P, np.where(dp == 1, R, S0), _resolve(o_proj_out))

    def dispatch_destinations(self, ep: np.ndarray) -> np.ndarray:
        """Expected number of distinct EP ranks one token's ``top_k`` experts land on, ``[n]``.

        With ``E`` experts spread evenly over ``ep`` ranks and the ``k`` experts of a token
        drawn uniformly without replacement, a given rank receives the token unless all ``k``
        fall outside its ``E/ep`` experts: ``ep · (1 − C(E − E/ep, k) / C(E, k))``
        (hypergeometric; DeepEP and the engines' all-to-all send a token once per destination
        rank). A function of ``ep`` alone, whatever the other candidates of the space; 1
        without MoE or for ``ep = 1``.
        """
        ep = np.asarray(ep, dtype=np.int64)
        moe = self.model.moe
        if moe is None:
            return np.ones(ep.shape)
        return expected_destinations(ep, moe.num_experts, moe.top_k).reshape(ep.shape)

    def _moe_a2a_s(self, send: np.ndarray, tokens_per_rank: np.ndarray, group: np.ndarray,
                   ep: np.ndarray, etp: np.ndarray, env: dict
                   ) -> tuple[np.ndarray, np.ndarray]:
        """MoE dispatch and combine times over the ``group`` ranks, seconds, ``[n]`` each.

        Without an expert all-to-all kernel (``config.moe_a2a_kernel`` None): both are
        :meth:`_all_to_all` of ``send`` bytes per rank (the activation dtype, one copy per
        destination rank). With DeepEP (``deepep_normal`` / ``deepep_low_latency`` /
        ``deepep_auto``: normal kernels for steps that prefill, low-latency ones for pure
        decode steps, SGLang ``--deepep-mode auto``), where experts are split by EP alone
        (``etp == 1``, ``ep == group``):
        :func:`~learn_to_shard.cost.comm.expert_a2a_time_s` of the ``tokens_per_rank`` with
        the dispatch payload ``config.moe_dispatch_payload`` (None: FP8 for FP8 weights, else
        BF16) and a BF16 combine; other layouts keep the default price.
        """
        base = self._all_to_all(send, group, env["link_g"])
        c = self.config
        if c.moe_a2a_kernel is None or self.model.moe is None:
            return base, base
        moe, dev = self.model.moe, self.cluster.device
        payload = c.moe_dispatch_payload or (
            "fp8" if self.workload.weight_dtype is DType.FP8 else "bf16")
        up = dev.scale_up_bytes_per_s * c.scale_up_efficiency
        out = dev.scale_out_bytes_per_s * c.scale_out_efficiency

        def kernel(mode: str, pl: str) -> np.ndarray:
            return expert_a2a_time_s(tokens_per_rank, ep, hidden=self.shapes.hidden,
                                     top_k=moe.top_k, experts=moe.num_experts, payload=pl,
                                     mode=mode, domain=self._domain,
                                     scale_up_bytes_per_s=up, scale_out_bytes_per_s=out)

        if c.moe_a2a_kernel == "deepep_auto":
            prefill = np.asarray(env["pf"]) > 0
            disp = np.where(prefill, kernel("normal", payload), kernel("low_latency", payload))
            comb = np.where(prefill, kernel("normal", "bf16"), kernel("low_latency", "bf16"))
        else:
            mode = "normal" if c.moe_a2a_kernel == "deepep_normal" else "low_latency"
            disp, comb = kernel(mode, payload), kernel(mode, "bf16")
        deepep = (etp == 1) & (ep == group)
        return np.where(deepep, disp, base), np.where(deepep, comb, base)

    def _all_to_all(self, send: np.ndarray, group: np.ndarray, link: Link) -> np.ndarray:
        """MoE dispatch / combine over ``group`` ranks, hierarchical across nodes
        (:func:`~learn_to_shard.cost.comm.all_to_all_v_time_s` with this cluster's domain)."""
        up = self.cluster.device.scale_up_bytes_per_s * self.config.scale_up_efficiency
        return all_to_all_v_time_s(send, group, link.bw, link.alpha, self._domain, up,
                                   self.cluster.num_devices)

    def all_to_all_time_s(self, send_bytes_per_rank: float, group: int) -> float:
        """One all-to-all over ``group`` consecutive ranks where each rank sends
        ``send_bytes_per_rank`` to its peers (own share excluded), priced exactly as the model
        prices MoE dispatch and combine; seconds."""
        g = np.array([group])
        return float(self._all_to_all(np.array([float(send_bytes_per_rank)]), g,
                                      self._link(g))[0])

    def gemm_time_s(self, m: int, n: int, k: int) -> float:
        """One GEMM ``[m, k] · [k, n]`` priced exactly as the model prices a weight-bearing
        operator (weights in the workload's dtype, 16-bit activations, shape factor included):
        ``max(2mnk / FLOP/s, (kn·w + m(k+n)·a) / HBM) + kernel_overhead``; seconds."""
        fl = np.array([2.0 * m * n * k])
        by = np.array([k * n * self._wb + m * (k + n) * self._ab])
        peak = self._gemm_flops * self._shape_eff(np.array([float(m)]), np.array([float(k)]),
                                                  np.array([float(n)]))
        return float(self._roofline(fl, by, peak)[0])

    def attention_time_s(self, batch: int, q_tokens: int, kv_len: float, heads: int,
                         kv_heads: int, head_dim: int) -> float:
        """One GQA attention call priced as in the layer model: decode ``q_tokens = 1`` over
        ``kv_len`` cached tokens (reads the KV cache), prefill ``q_tokens = isl`` with causal
        span ``kv_len = isl / 2`` (writes the new KV); seconds."""
        dec = q_tokens == 1
        fl = 2.0 * heads * 2 * head_dim * batch * q_tokens * kv_len
        kv_tok = batch * (kv_len if dec else q_tokens)
        by = kv_tok * kv_heads * 2 * head_dim * self._kvb \
            + batch * q_tokens * heads * 2 * head_dim * self._ab
        return float(self._roofline(np.array([fl]), np.array([by]), self._attn_flops,
                                    self._attn_hbm)[0])

    def link(self, group: int) -> tuple[float, float]:
        """The link a collective over ``group`` consecutive ranks is priced on.

        Returns:
            (achievable bus bandwidth in bytes/s, per-step latency in s) — the values every
            collective of the model uses for that group (scale-up inside one domain, else
            scale-out).
        """
        lk = self._link(np.array([group]))
        return float(lk.bw[0]), float(lk.alpha[0])

    def _shape_eff(self, *dims: np.ndarray, half: float | None = None) -> np.ndarray | float:
        """GEMM efficiency relative to ``flops_efficiency`` for a local shape ``[M, K, N]``:
        ``Π d / (d + x0)``, ``x0 = half`` if given, else ``gemm_shape_half`` (tile and wave
        quantisation make small dimensions run below the large-GEMM rate); 1 when ``x0`` is
        0. The routed experts also pass their ``K, N`` with ``half = expert_shape_half``."""
        x0 = self.config.gemm_shape_half if half is None else half
        if not x0:
            return 1.0
        eff: np.ndarray | float = 1.0
        for d in dims:
            eff = eff * d / (d + x0)
        return eff

    def _roofline(self, flops: np.ndarray, bytes_: np.ndarray, peak: float | np.ndarray,
                  hbm: float | None = None) -> np.ndarray:
        return np.maximum(flops / peak, bytes_ / (hbm or self._hbm)) \
            + self.config.kernel_overhead_s

    def host_time_s(self, dec: np.ndarray, pf: np.ndarray, pf_seqs: np.ndarray,
                    pp: np.ndarray, dp: np.ndarray) -> np.ndarray | None:
        """Engine host time per stage step not hidden behind the GPU, seconds, ``[n]``:
        ``host_step + host_seq · (dec + pf_seqs) + host_prefill · pf_seqs
        + eager_layer · (layers / pp) · prompt_steps``; None when all are 0.

        ``dec`` decode sequences, ``pf`` prompt tokens and ``pf_seqs`` prompts completing per
        step and DP rank, ``pp`` pipeline stages, ``dp`` attention-DP ranks (``[n]`` each;
        ``layers / pp`` is the stages' mean layer count); ``prompt_steps`` is
        :func:`prompt_step_share` at the engine's token budget, and 1 for a prefill plan's
        pass, which runs in one step (its exports raise the budget to the pass, and its
        workspace is the pass's: ``workspace_bytes``)."""
        c = self.config
        if not (c.host_step_overhead_s or c.host_seq_overhead_s or c.host_prefill_overhead_s
                or c.eager_layer_overhead_s):
            return None
        out = (c.host_step_overhead_s + c.host_seq_overhead_s * (dec + pf_seqs)
               + c.host_prefill_overhead_s * pf_seqs)
        if c.eager_layer_overhead_s:
            steps = np.where(np.asarray(pf) > 0, 1.0, 0.0) \
                if self.workload.phase is Phase.PREFILL \
                else prompt_step_share(dec, pf, pf_seqs, dp, c.token_budget)
            layers = self.model.num_layers / np.asarray(pp, dtype=float)
            out = out + c.eager_layer_overhead_s * layers * steps
        return out

    @property
    def serve_prefill_first(self) -> bool:
        """Whether the serve steps are priced prefill first (``config.runs_prefill_first``,
        SGLang): for a dense model, whose DP ranks are servers of their own. A MoE model
        keeps the decodes-first mix at every ``dp``: each SGLang attention-DP rank runs its
        own prefill first while the ranks meet at every MoE layer, which is not priced yet,
        and pricing ``dp = 1`` prefill first beside attention-DP decodes first tilted plans
        toward attention-DP (DeepSeek-V3 on 16 H200 under SGLang switched to it). False
        outside the serve phase."""
        return (self.config.runs_prefill_first and self.workload.phase is Phase.SERVE
                and self.model.moe is None)

    def prompt_step_mix(self, dec: np.ndarray, pf: np.ndarray, pf_seqs: np.ndarray,
                        dp: np.ndarray, m_mb: np.ndarray | float = 1.0) -> StepMix:
        """The two kinds of serve step the mean step is priced as (``config.serve_step_mix``):
        a share ``q`` carrying ``pf_a`` prompt tokens (``seqs_a`` prompts completing) and the
        rest ``pf_b`` (``seqs_b``), each ``[n]``, per step and rank, with the mean content
        ``q·pf_a + (1 − q)·pf_b = pf``.

        The prompts arriving per step follow the completions of the step's ``dec`` decodes,
        each finishing with probability ``λ / dec`` (``λ = pf_seqs``): binomial, mean ``λ``,
        variance ``v = λ·(1 − λ/dec)`` (a finished request's client sends its next prompt,
        or a new arrival takes its place, and joins the next step: vLLM V1 and TensorRT-LLM
        schedule a waiting prompt within the step budget after the decodes). The two steps
        match that mean and variance:

        * ``λ < 1``: a share ``q = λ² / (λ² + v)`` of the steps carries ``λ + v/λ`` prompts
          (``pf_a = pf·(1 + v/λ²)`` tokens; one whole prompt when ``dec = 1``), the rest
          decode alone; where that exceeds the room the decodes leave (``budget − dec``),
          the prompt steps fill the room, a share ``q = pf / room`` of them (a long prompt's
          chunks);
        * ``λ ≥ 1``: ``q = 1/2``, ``λ ± √v`` prompts: ``pf_a = pf·(1 + √v/λ)`` (at most the
          room) and ``pf_b = 2·pf − pf_a``;
        * one mean step (``q = 1``, ``pf_a = pf``) where the prompts fill every step's
          budget, where ``pf = 0``, outside the serve phase and with the mix off; a dense
          model's attention-DP ranks run apart and mix like one rank.

        A MoE model's attention-DP ranks (``dp > 1``) meet at every MoE layer, so a step runs
        at its busiest rank's content. Each rank carries a prompt chunk in a share ``r`` of
        its steps (:func:`rank_prompt_share`) and then ``pf / r`` tokens of it, independently
        of the others: step a, some rank carrying one, has weight ``q = 1 − (1 − r)^dp``, its
        busiest rank ``pf / r`` prompt tokens (``StepMix.busy_a``) and the ranks' mean
        ``pf / q`` (what the experts see, summed over the ranks); step b carries none. The
        busiest rank's mean over the steps is :func:`busiest_rank_prompt_tokens`'s and the
        ranks' mean is ``pf``; the two steps price what one mean step cannot: a step's time
        is not linear in its tokens (a few decode tokens touch few of a MoE's experts, the
        prompt chunks touch them all). Without the mix, or at ``r = 1`` (every rank carries
        a chunk every step), one step at the busiest rank's mean tokens. Unbalanced or
        balanced (``config.attention_dp_balanced``: every rank at the mean, one step) as
        :meth:`rank_prompt_tokens`; pipeline micro-batches do not raise ``q`` for these
        ranks (the busiest rank's content already sets the round).

        Pipeline micro-batches (``m_mb = min(pp, batch)`` in flight, decodes first): a prompt
        chunk rides in one micro-batch, and the round of ``m_mb`` micro-batch steps lasts at
        least that micro-batch's pass through every stage, since its next step waits for its
        last stage (balanced stages: ``pp`` of its stage times, where ``m_mb`` evenly
        spread steps would take ``m_mb`` mean stage times). A round therefore runs at step
        a's price when any of its micro-batches carries step a's prompts: the weight on step a
        is ``1 − (1 − q)^m_mb``, the chance that one of ``m_mb`` independent micro-batch steps
        does (the expected heaviest of them; ``q`` itself at ``m_mb = 1``). The simulation
        runs the same rule (:meth:`learn_to_shard.serving.steptime.StepTimeModel.
        pass_tokens`). Prefill first keeps its weights at any ``m_mb``: its round would run
        at the heavier of the prefill-only and the decode step unless every micro-batch runs
        the lighter, and which is heavier depends on the prices, not on anything the weights
        can read (a switch on token counts would let the step time fall as the batch grows,
        which the exact solver's batch bounds rule out).

        Prefill first (``config.runs_prefill_first``, SGLang: a prefill-only step whenever
        prompts wait, the decodes held back; :attr:`serve_prefill_first`) the prompts that join
        after a decode step are prefilled in steps of their own before the next decode step:
        step a carries no decodes and ``pf_a = pf / q`` prompt tokens, step b decodes alone,
        and ``q = max(1 − (1 − min(1, λ/d))^d, pf / budget)`` prefill-only steps run per
        decode step, ``d = max(1, dec)`` (the chance that a decode step finishes a request,
        whose successor is then prefilled in one step, or the budget-sized chunks the prompts
        need, whichever is more; ``dec`` is then every running request,
        :meth:`~learn_to_shard.cost.model.CostModel.phase_rows`). Priced as ``q·t(step a) +
        t(step b)`` (no step b at ``osl = 1``, whose one token comes from the prefill): the
        mean time per decode step. A request's own TPOT excludes its own prompt's prefill
        (``1/d`` of that work), so at small batches this prices TPOT high, by up to the
        prefill steps' whole share at batch 1 (Llama-3.1-8B at 4096/64, batch 1, 1024-token
        budget: 10.9 ms against 8.7 ms simulated; 6% at batch 8); tokens per second are
        right.
        """
        pf = np.asarray(pf, dtype=float)
        seqs = np.asarray(pf_seqs, dtype=float) * np.ones(np.shape(pf))
        one = np.ones(np.shape(pf))
        dec_f = np.asarray(dec, dtype=float) * one
        if not self.config.serve_step_mix or self.workload.phase is not Phase.SERVE:
            return StepMix(one, pf, seqs, pf, seqs, dec_f, 1.0 - one, one < 0.0)
        room = np.maximum(self.config.token_budget - dec_f, 1.0)
        on = (pf > 0) & (pf < room)
        ranks = np.zeros(np.shape(pf), dtype=bool)
        if self.model.moe is not None:
            ranks = on & (np.asarray(dp) > 1)
            on &= ~ranks
            if self.config.attention_dp_balanced:
                ranks &= False
        lam = np.maximum(seqs, 1e-12)
        # Binomial: each of the d decodes completes with probability λ / d.
        var = lam * np.maximum(1.0 - lam / np.maximum(dec_f, 1.0), 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            per_token = np.where(pf > 0, seqs / np.where(pf > 0, pf, 1.0), 0.0)
            lumps = pf * (1.0 + var / lam / lam)     # (λ + var/λ) prompts in a prompt step
            hi = pf * (1.0 + np.sqrt(var) / lam)     # λ + σ prompts
        full = on & (seqs < 1.0) & (lumps >= room)   # prompt steps fill the room
        few = on & (seqs < 1.0) & ~full
        many = on & (seqs >= 1.0)
        hi = np.minimum(room, hi)
        q = np.where(full, pf / room, np.where(few, lam * lam / (lam * lam + var),
                                               np.where(many, 0.5, 1.0)))
        q = np.maximum(q, 1e-12)
        pf_a = np.where(full, room, np.where(few, lumps, np.where(many, hi, pf)))
        pf_b = np.where(full | few, 0.0, np.where(many, 2.0 * pf - hi, pf))
        mixed = full | few | many                    # elsewhere both steps are the mean's
        seqs_a = np.where(mixed, pf_a * per_token, seqs)
        seqs_b = np.where(mixed, pf_b * per_token, seqs)
        # A round of m micro-batch steps runs at step a's price when any of them is step a.
        m = np.asarray(m_mb, dtype=float) * one
        q = np.where(mixed & (m > 1.0), 1.0 - (1.0 - q) ** m, q)
        w_b, dec_a, two = 1.0 - q, dec_f, q < 1.0
        first = (pf > 0) & self.serve_prefill_first
        if first.any():
            d = np.maximum(dec_f, 1.0)
            finish = 1.0 - (1.0 - np.minimum(lam / d, 1.0)) ** d
            r = np.maximum(np.maximum(finish, pf / float(self.config.token_budget)), 1e-12)
            q = np.where(first, r, q)
            with np.errstate(divide="ignore", invalid="ignore"):
                pf_a = np.where(first, pf / r, pf_a)
                seqs_a = np.where(first, seqs / r, seqs_a)
            pf_b = np.where(first, 0.0, pf_b)
            seqs_b = np.where(first, 0.0, seqs_b)
            dec_a = np.where(first, 0.0, dec_a)
            # One output token per request comes from its prefill: no decode step (osl 1).
            w_b = np.where(first, 0.0 if self.workload.osl <= 1 else 1.0, w_b)
            two = two | first
        busy_a = None
        if ranks.any():
            # A MoE's attention-DP ranks: step a when any rank carries a chunk.
            r = np.clip(rank_prompt_share(dec_f, pf, seqs, self.config.token_budget),
                        1e-12, 1.0)
            ranks &= r < 1.0
            # 1 − (1 − r)^dp, exact at tiny r (a prompt in millions of steps); r = 1 rows are
            # not mixed (log1p(−1) = −inf gives them 1)
            with np.errstate(divide="ignore"):
                q_any = np.maximum(-np.expm1(np.asarray(dp, dtype=float) * np.log1p(-r)),
                                   1e-12)
            q = np.where(ranks, q_any, q)
            w_b = np.where(ranks, 1.0 - q_any, w_b)
            pf_a = np.where(ranks, pf / q_any, pf_a)
            seqs_a = np.where(ranks, seqs / q_any, seqs_a)
            pf_b = np.where(ranks, 0.0, pf_b)
            seqs_b = np.where(ranks, 0.0, seqs_b)
            busy_a = np.where(ranks, pf / r, np.nan)
            two = two | ranks
        return StepMix(q, pf_a, seqs_a, pf_b, seqs_b, dec_a, w_b, two, busy_a)

    def layer_env(self, tp: np.ndarray, ep: np.ndarray, dp: np.ndarray, dec: np.ndarray,
                  pf: np.ndarray, cp: np.ndarray | None = None,
                  busy: np.ndarray | None = None) -> dict:
        """The per-row environment :meth:`layer` reads, from ``[n]`` degrees and the step's
        ``dec`` decode sequences and ``pf`` prompt tokens per attention-DP rank (the ranks'
        mean; ``busy``: the busiest rank's, where finite, see :meth:`rank_prompt_tokens`).

        Returns:
            ``t`` (tp as float), ``tp``, ``dp``, ``ep``, ``etp``, ``cp`` (decode context
            parallelism, default 1) and ``g = tp·dp`` (the stage group,
            :meth:`learn_to_shard.parallel.mesh.Mesh.axes`), ``rows = dec + pf``, ``dec``,
            ``pf`` (all ``[n]``: the busiest rank's, which the ranks wait for) and
            ``rows_mean`` (``[n]``: a rank's mean tokens, which the MoE experts see summed
            over the ranks), and the :class:`Link` of the TP, stage, ETP and CP groups
            (``link_tp``, ``link_g``, ``link_etp``, ``link_cp``). In the serve phase of a
            MoE model with ``dp > 1`` and no engine balancing
            (``CostModelConfig.attention_dp_balanced`` False), the busiest rank carries
            :func:`busiest_rank_prompt_tokens` prompt tokens; otherwise every rank the mean.
        """
        axes = Mesh.axes(tp, ep, np.ones_like(tp), dp, cp)
        g, etp = axes.stage, axes.etp
        rows_mean = dec + pf
        pf = self.rank_prompt_tokens(dec, pf, dp, busy)
        return dict(t=tp.astype(np.float64), tp=tp, dp=dp, ep=ep, etp=etp, g=g, cp=axes.cp,
                    rows=dec + pf, rows_mean=rows_mean, dec=dec, pf=pf,
                    link_tp=self._link(tp),
                    link_g=self._link(g), link_etp=self._link(etp),
                    link_cp=self._link(axes.cp))

    def rank_prompt_tokens(self, dec: np.ndarray, pf: np.ndarray, dp: np.ndarray,
                           busy: np.ndarray | None = None) -> np.ndarray:
        """Prompt tokens per step of the attention-DP rank the others wait for, ``[n]``:
        ``busy`` where given and finite (step a of a mix of the ranks' steps,
        ``StepMix.busy_a``), else :func:`busiest_rank_prompt_tokens` in the serve phase of a
        MoE model with ``dp > 1`` whose engine does not balance the ranks
        (``CostModelConfig.attention_dp_balanced`` False; the ranks meet at every MoE layer),
        else the mean ``pf``. ``dec`` and ``pf`` are a rank's mean decode sequences and
        prompt tokens per step; its prompts complete at ``pf / isl`` per step (every serve
        step of the cost model prefills whole prompts' shares)."""
        if self.model.moe is None or self.workload.phase is not Phase.SERVE \
                or self.config.attention_dp_balanced:
            return pf
        pf_seqs = np.asarray(pf, dtype=float) / float(max(self.workload.isl, 1))
        out = np.where(dp > 1, busiest_rank_prompt_tokens(
            dec, pf, pf_seqs, dp, self.config.token_budget), pf)
        if busy is not None:
            out = np.where(np.isfinite(busy), busy, out)
        return out

    def lm_head(self, lay: np.ndarray, c_lm: np.ndarray, tp: np.ndarray,
                lm_rows: np.ndarray) -> dict:
        """The LM head on the last stage: input conversion from the last layer's layout
        ``lay``, final-norm statistics, the GEMM and the logits gather, for ``lm_rows`` rows.

        Returns:
            ``t_conv, t_norm, t_lm, t_logits`` (seconds), ``req`` / ``out`` layouts, ``w_local``
            (parameters per device), ``w_bytes`` (their bytes, 16-bit for quantised
            checkpoints) and the volumes of the three collectives, ``b_conv``, ``b_norm``,
            ``b_logits`` (bytes, full tensors).
        """
        sh, c, ab = self.shapes, self.config, self._ab
        t_f = tp.astype(np.float64)
        link = self._link(tp)
        vpad = self._padded_vocab(tp)
        req = _layout_in(Op.LM_HEAD, c_lm, lay)
        b_conv = lm_rows * sh.hidden * ab
        t_conv = self._conv(lay, req, b_conv, tp, link, then_norm=True)
        t_norm = self._norm_stats(req, lm_rows, tp, link)
        rows_lm = np.where(req == S0, np.ceil(lm_rows / t_f), lm_rows)
        w_local = np.where(c_lm == 2, sh.hidden * vpad, sh.hidden * vpad / t_f)
        t_lm = self._roofline(2 * rows_lm * w_local,
                              w_local * self._eb + rows_lm * (sh.hidden + vpad) * ab,
                              self._lm_flops)
        out = _layout_out(Op.LM_HEAD, c_lm, req)
        b_logits = lm_rows * vpad * c.logits_bytes
        t_logits = self._conv(out, np.full(len(lay), R), b_logits, tp, link)
        return {"t_conv": t_conv, "t_norm": t_norm, "t_lm": t_lm, "t_logits": t_logits,
                "req": req, "out": out, "w_local": w_local, "w_bytes": w_local * self._eb,
                "b_conv": b_conv, "b_norm": lm_rows * 4.0, "b_logits": b_logits}

    def p2p_time_s(self, rows: np.ndarray, tp: np.ndarray, dp: np.ndarray,
                   pp: np.ndarray) -> np.ndarray:
        """Stage-to-stage send of one micro-batch's activations (each TP rank sends its
        ``1/tp`` slice), seconds, averaged over the ``pp − 1`` hops; 0 without pipelining.

        Stage ``s`` holds ranks ``[s·S, (s+1)·S)`` with ``S = tp·dp``; a hop runs on the
        scale-out link when stage ``s`` and ``s+1`` together span a node boundary, else on
        the scale-up link (:meth:`learn_to_shard.parallel.mesh.Mesh.hop_crossings`; TP4 PP4
        on 8-GPU nodes: hops 0→1 and 2→3 stay on NVLink, 1→2 crosses).
        """
        size = (tp * dp).astype(np.int64)
        hops = np.maximum(pp - 1, 1).astype(np.float64)
        n_cross = self.mesh.hop_crossings(size, pp)
        inside = self._link_of(np.ones(len(size), dtype=bool))
        outside = self._link_of(np.zeros(len(size), dtype=bool))
        vol = self.p2p_bytes(rows, tp)
        t_in, t_out = vol / inside.bw + inside.alpha, vol / outside.bw + outside.alpha
        mean = (n_cross * t_out + (hops - n_cross) * t_in) / hops
        return np.where(pp > 1, mean, 0.0)

    def p2p_bytes(self, rows: np.ndarray, tp: np.ndarray) -> np.ndarray:
        """Bytes each TP rank sends to the next stage for ``rows`` tokens: its ``1/tp`` slice
        of the ``hidden`` activations, ``[n]``."""
        return rows * self.shapes.hidden * self._ab / tp.astype(np.float64)

    # ------------------------------------------------------------------ boundary terms
    # Read by CostModel._step and by the exact solver's tables (search/exact_tables.py) alike.
    def embedding_time_s(self, rows: np.ndarray) -> np.ndarray:
        """The embedding lookup of ``rows`` tokens per rank: a memory-bound pass writing
        ``hidden`` activations per token (:meth:`_stream_pass`), seconds, ``[n]``."""
        return self._stream_pass(rows * self.shapes.hidden)

    def embedding_weight_bytes(self, choice: np.ndarray, tp: np.ndarray) -> np.ndarray:
        """Embedding table bytes per device, ``[n]``: the padded vocabulary × hidden, split by
        ``tp`` unless replicated, 16-bit for quantised checkpoints."""
        vpad, h = self._padded_vocab(tp), self.shapes.hidden
        return np.where(choice == REPLICATED, vpad * h,
                        vpad * h / tp.astype(np.float64)) * self._eb

    def first_stage_weight_bytes(self, choice: np.ndarray, tp: np.ndarray) -> np.ndarray:
        """Weights the first pipeline stage holds besides its layers, bytes per device,
        ``[n]``: the embedding table (:meth:`embedding_weight_bytes`, by its ``choice``) and
        a multimodal wrapper's vision tower, ``ModelSpec.vision_params`` in 16 bits (the
        tower as a BF16 checkpoint holds it; a checkpoint that quantises it is not told
        apart) split over ``tp`` (vLLM's ``mm_encoder_tp_mode`` default ``weights``, "split
        the weights of each layer across TP ranks": vllm/config/multimodal.py at v0.33.0).
        The cost model and the exact search's tables both read it."""
        vision = 2.0 * self.model.vision_params / tp.astype(np.float64)
        return self.embedding_weight_bytes(choice, tp) + vision

    @staticmethod
    def lm_head_rows(dec: np.ndarray, pf_seqs: np.ndarray) -> np.ndarray:
        """Rows the LM head computes per DP rank in a step: one per decoding sequence and per
        prompt completing its prefill (at least 1e-9, so empty steps stay finite), ``[n]``."""
        return np.maximum(dec + pf_seqs, 1e-9)

    @staticmethod
    def resident_sequences(batch: np.ndarray, dp: np.ndarray, tp: np.ndarray,
                           cp: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Sequences whose KV one rank holds, ``[n]`` each: ``ceil(batch / dp)``, and with
        attention split over sequences (``Shard(0)``) its ``ceil(· / (tp / cp))`` share (the
        ``cp`` ranks of a group hold token shards of the same sequences; ``cp`` default 1)."""
        s_all = np.ceil(batch / dp)
        grp = tp if cp is None else Mesh.head_groups(tp, cp)
        return s_all, np.ceil(s_all / grp.astype(np.float64))

    def workspace_bytes(self, dec: np.ndarray, pf: np.ndarray, pf_seqs: np.ndarray,
                        tp: np.ndarray, etp: np.ndarray) -> np.ndarray:
        """Activation workspace per device for a step of ``dec`` decode sequences, ``pf``
        prompt tokens and ``pf_seqs`` completing prompts per DP rank (:meth:`_workspace`),
        bytes, ``[n]``. Serve: sized for the scheduler's token budget whatever the batch
        (vLLM profiles the peak at ``max_num_batched_tokens``, FC-20); decode: at least that
        budget too, which the engine reserves at start however few tokens a decode step
        carries (vLLM 0.33.0 ``v1/worker/gpu_worker.py`` ``determine_available_memory`` runs
        ``profile_run``, a dummy step of ``max_num_tokens`` tokens, before sizing the KV
        pool; SGLang 0.5.23 ``sglang/srt/arg_groups/memory_hook.py``
        ``handle_gpu_memory_settings`` reserves activation memory in proportion to its
        ``chunked_prefill_size`` whatever the workload);
        prefill: the step's prompt tokens (the exports raise the budget to them)."""
        rows = dec + pf
        budget = float(self.config.token_budget)
        phase = self.workload.phase
        ws_rows = np.full(np.shape(rows), budget) if phase is Phase.SERVE \
            else np.maximum(rows, budget) if phase is Phase.DECODE else rows
        return self._workspace(ws_rows, self.lm_head_rows(dec, pf_seqs), tp, etp,
                               self._padded_vocab(tp))

    def _padded_vocab(self, tp: np.ndarray) -> np.ndarray:
        """Vocabulary as the engine pads it, ``[n]``: to a multiple of ``vocab_padding``
        (vLLM/SGLang; a split then needs it divisible by ``tp``, the ``vocab`` rule), or of
        ``vocab_padding × tp`` when the engine pads per rank (``vocab_split_divisible`` off)."""
        c = self.config
        q = c.vocab_padding * (np.ones_like(tp) if c.vocab_split_divisible else tp)
        return (np.ceil(self.shapes.vocab / q) * q).astype(np.float64)

    def kv_tokens_per_sequence(self) -> float:
        """Tokens of KV held per sequence: decode ``isl``; prefill ``isl``; serve ``isl + osl``
        when the scheduler reserves a request's whole KV on admission
        (``config.kv_reserve_full_request``, TRT-LLM's GUARANTEED_NO_EVICT), else the mean
        occupancy ``isl + osl/2`` of an on-demand paged cache."""
        wl = self.workload
        if wl.phase is not Phase.SERVE:
            return float(wl.isl)
        return float(wl.max_context) if self.config.kv_reserve_full_request \
            else float(wl.decode_context)

    def _conv(self, src: np.ndarray, dst: np.ndarray, full_bytes: np.ndarray, n: np.ndarray,
              link: Link, then_norm: bool = False) -> np.ndarray:
        """The collective converting layout ``src`` to ``dst`` over ``n`` ranks riding
        ``link`` (kind :data:`~learn_to_shard.cost.comm.TRANSITION_KIND`), ``full_bytes`` the
        full tensor, seconds, ``[n]``: :meth:`_collective_s`. ``then_norm``: a residual add +
        RMSNorm follows (the layer input and the post-attention norm, the final norm before
        the LM head), which the fused all-reduce + RMSNorm kernels absorb, or which
        ``config.sequence_parallel`` runs on token shards (:meth:`_conv_parts`)."""
        if then_norm and self.config.sequence_parallel:
            t_rs, t_ag, t_rest = self._conv_parts(src, dst, full_bytes, n, link, then_norm)
            return t_rs + t_ag + t_rest
        return self._collective_s(TRANSITION_KIND[src, dst], n, full_bytes, link, then_norm)

    def _conv_parts(self, src: np.ndarray, dst: np.ndarray, full_bytes: np.ndarray,
                    n: np.ndarray, link: Link, then_norm: bool = False
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_conv` split into ``(reduce-scatter, all-gather, rest)`` seconds, ``[n]``
        each (what ``gemm_overlap`` can hide behind a GEMM, and what it cannot).

        With ``config.sequence_parallel`` an all-reduce followed by a norm (``then_norm``: a
        row-parallel output before the residual add + RMSNorm) becomes a reduce-scatter, the
        norm on the ``1/n`` token shard, and an all-gather before the next GEMM (vLLM's
        sequence-parallel compile pass, Megatron-LM's sequence parallelism: Korthikanti et al.,
        "Reducing Activation Recomputation in Large Transformer Models", MLSys 2023): the two
        collectives move the all-reduce's ``2 (n−1)/n · S`` bytes, each priced by
        :meth:`_collective_s` as an all-gather / reduce-scatter of the full ``S``, and
        ``rest`` carries the norm pass's saving, ``−(1 − 1/n)`` of its ``4 S`` bytes of HBM
        traffic (:func:`~learn_to_shard.cost.comm.rmsnorm_pass_time_s`; the pass itself is
        not priced elsewhere, so only the difference enters).
        """
        kind = TRANSITION_KIND[src, dst]
        t = self._collective_s(kind, n, full_bytes, link, then_norm)
        gs = kind == GATHER_OR_SCATTER
        rs = gs & TRANSITION_REDUCE_SCATTER[src, dst]
        t_rs, t_ag, rest = np.where(rs, t, 0.0), np.where(gs & ~rs, t, 0.0), \
            np.where(gs, 0.0, t)
        if self.config.sequence_parallel and then_norm:
            sp = kind == ALL_REDUCE
            half = self._collective_s(np.where(sp, GATHER_OR_SCATTER, NONE), n, full_bytes,
                                      link)
            n_f = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
            saving = -4.0 * np.asarray(full_bytes, dtype=np.float64) * (1.0 - 1.0 / n_f) \
                / self._hbm
            t_rs, t_ag = np.where(sp, half, t_rs), np.where(sp, half, t_ag)
            rest = np.where(sp, saving, rest)
        return t_rs, t_ag, rest

    def _overlap_s(self, comm_s: np.ndarray, gemm_s: np.ndarray) -> np.ndarray:
        """A collective overlapped with the GEMM next to it (``config.gemm_overlap``: async
        TP / collective matmul), seconds, ``[n]``: ``min(comm + gemm, max(comm, gemm) / e)``
        with ``e = config.gemm_overlap_efficiency`` (bounded by the slower side; never
        slower than running them one after the other); ``gemm`` alone where there is no
        collective."""
        e = self.config.gemm_overlap_efficiency
        return np.where(comm_s > 0.0,
                        np.minimum(comm_s + gemm_s, np.maximum(comm_s, gemm_s) / e), gemm_s)

    def _collective_s(self, kind: np.ndarray, n: np.ndarray, full_bytes: np.ndarray,
                      link: Link, then_norm: bool = False) -> np.ndarray:
        """One collective per row, seconds, ``[n]``, as ``config.collective_algorithm`` says.

        ``alpha-beta``: :func:`~learn_to_shard.cost.comm.collective_time_s` on ``link``.
        Otherwise all-reduce, all-gather and reduce-scatter are priced by the algorithm the
        setting runs (:meth:`~learn_to_shard.cost.comm.CollectivePricer.time_s` with the
        config's tiers; the group spans one scale-up domain when
        :meth:`~learn_to_shard.parallel.mesh.Mesh.in_node` says so — the test ``link`` was
        chosen by — else ``max(ceil(n / domain), 2)`` domains); rows where no algorithm of
        the setting is available (an engine that does not run on the device) and
        all-to-alls keep the alpha-beta price. With ``then_norm`` the algorithms' price
        includes the RMSNorm pass (:func:`~learn_to_shard.cost.comm.rmsnorm_pass_time_s`,
        separate or fused); the cost model prices no separate norm pass elsewhere, so the
        separate pass is subtracted again: what remains is the collective plus, for a fused
        kernel, the saving of the fusion (one kernel launch and one activation pass).
        """
        base = collective_time_s(kind, n, full_bytes, link.bw, link.alpha)
        c = self.config
        if c.collective_algorithm == "alpha-beta":
            return base
        pricer = self._collective_pricer
        tiers = c.collective_tiers or (AUTO_TIERS if c.collective_algorithm == "auto"
                                       else forced_tiers(c.collective_algorithm))
        n_arr = np.broadcast_to(np.asarray(n), np.shape(base))
        nodes = np.where(self.mesh.in_node(n_arr), 1.0,
                         np.maximum(np.ceil(n_arr / float(self._domain)), 2.0))
        t, _ = pricer.time_s(kind, n_arr, full_bytes, nodes, tiers, then_norm)
        if then_norm:
            t = t - rmsnorm_pass_time_s(np.asarray(full_bytes, dtype=np.float64), pricer.hbm,
                                        False, c.kernel_overhead_s)
        return np.where(np.isfinite(t), t, base)

    @cached_property
    def _collective_pricer(self) -> CollectivePricer:
        """The :class:`~learn_to_shard.cost.comm.CollectivePricer` of this device and the
        config's engine (``None`` for a profile that is no engine of
        :data:`~learn_to_shard.engines.collectives.ENGINE_VENDORS`), built once."""
        engine = self.config.engine if self.config.engine in ENGINE_VENDORS else None
        return CollectivePricer(self.cluster.device, engine, self.config)

    def _norm_stats(self, layout: np.ndarray, rows: np.ndarray, n: np.ndarray,
                    link: Link) -> np.ndarray:
        """RMSNorm over a hidden-split activation: all-reduce of one fp32 per token
        (:meth:`_collective_s`)."""
        kind = np.where(layout == S1, ALL_REDUCE, 0)
        return self._collective_s(kind, n, rows * 4.0, link)

    # ------------------------------------------------------------------ one layer
    def layer(self, env: dict, dims: np.ndarray, lin: np.ndarray, is_moe: bool,
              window: int | None, ctx: float, rec: list | None
              ) -> tuple[np.ndarray, np.ndarray, dict]:
        """Price one layer of kind ``(is_moe, window)`` operator by operator, per row.

        Each weight-bearing operator converts its incoming layout to the one its choice
        needs (``ChoiceDef.layout_in``; the collective is
        :data:`~learn_to_shard.cost.comm.TRANSITION_KIND` of the pair, priced by
        :func:`~learn_to_shard.cost.comm.collective_time_s` on the group's link), runs its
        roofline compute and yields ``ChoiceDef.layout_out``; norms over a hidden split add
        their statistics all-reduce; attention adds the context-parallel K/V exchange; MoE
        layers add dispatch / combine all-to-alls (formulas: module docstring of
        :mod:`learn_to_shard.cost.model`).

        Args:
            env: :meth:`layer_env` of the rows, ``[n]`` arrays.
            dims: ``[n, NUM_OPS]`` per-operator choices (``Choice`` codes).
            lin: ``[n]`` incoming activation layout (``Layout`` codes).
            is_moe, window: the layer kind (an entry of :attr:`layer_types`).
            ctx: mean KV length of the decode sequences, tokens.
            rec: when a list, the collectives of row 0 are appended to it as
                ``(where, kind, group, time_s, bytes)`` (``bytes`` as
                :attr:`learn_to_shard.cost.model.CollectiveUse.bytes`).

        Returns:
            ``(time_s [n], out_layout [n], op_time)`` with ``op_time`` the compute time of
            each fused operator by name, ``[n]`` seconds each (conversions excluded), the
            terms of :data:`EXTRA_LAYER_TERMS` included (added to ``time_s`` too).
        """
        total, out, ops = self._layer_ops(env, dims, lin, is_moe, window, ctx, rec)
        for name, term in EXTRA_LAYER_TERMS.items():
            ops[name] = term(self, env, dims, lin, is_moe, window, ctx)
            total = total + ops[name]
        return total, out, ops

    def _layer_ops(self, env: dict, dims: np.ndarray, lin: np.ndarray, is_moe: bool,
                   window: int | None, ctx: float, rec: list | None
                   ) -> tuple[np.ndarray, np.ndarray, dict]:
        """The built-in operators of :meth:`layer` (same arguments and result)."""
        sh, m, c = self.shapes, self.model, self.config
        ab, wb = self._ab, self._wb
        t, rows = env["t"], env["rows"]
        link = env["link_tp"]
        H = sh.hidden
        ops: dict[str, np.ndarray] = {}

        split = c.sequence_parallel or c.gemm_overlap

        def conv_parts(where: str, src, dst, full_bytes, n, lk, then_norm=False):
            """``(reduce-scatter, all-gather, rest)`` seconds of one conversion
            (:meth:`_conv_parts`); the breakdown records each collective it issues."""
            parts = self._conv_parts(src, dst, full_bytes, n, lk, then_norm)
            if rec is not None and int(n[0]) > 1:
                label = transition_label(int(src[0]), int(dst[0]))
                nb = float(np.ravel(full_bytes)[0])
                if label == "all-reduce" and float(parts[0][0]) > 0.0:    # sequence parallel
                    rec.append((f"{where} (sequence parallel)", "reduce-scatter", int(n[0]),
                                float(parts[0][0]), nb))
                    rec.append((f"{where} (sequence parallel)", "all-gather", int(n[0]),
                                float(parts[1][0]), nb))
                elif label:
                    rec.append((where, label, int(n[0]),
                                float(parts[0][0] + parts[1][0] + parts[2][0]), nb))
            return parts

        def conv(where: str, src, dst, full_bytes, n, lk, then_norm=False) -> np.ndarray:
            if split:
                t_rs, t_ag, t_rest = conv_parts(where, src, dst, full_bytes, n, lk, then_norm)
                return t_rs + t_ag + t_rest
            tt = self._conv(src, dst, full_bytes, n, lk, then_norm)
            if rec is not None:
                label = transition_label(int(src[0]), int(dst[0]))
                if label and int(n[0]) > 1:
                    rec.append((where, label, int(n[0]), float(tt[0]),
                                float(np.ravel(full_bytes)[0])))
            return tt

        def linear(name, choice, src, k_dim, n_dim, params, n_grp, lk, rws=None,
                   peak=None, where=None, act=False, then_norm=False, after=None):
            """conv + compute of one weight-bearing op on the tp (or etp) axis; ``act`` adds
            the FFN activation pass over its output; ``then_norm``: a norm sits between the
            conversion and the op (:meth:`_conv`); ``after``: the compute of the GEMM that
            produced ``src`` (a reduce-scatter of its output overlaps it under
            ``gemm_overlap``, :meth:`_overlap_s`)."""
            op = Op[name.upper()]
            req = _layout_in(op, choice, src)
            r_all = rows if rws is None else rws
            if split:
                t_rs, t_ag, t_rest = conv_parts(where or f"-> {name}", src, req,
                                                r_all * k_dim * ab, n_grp, lk, then_norm)
            else:
                tt = conv(where or f"-> {name}", src, req, r_all * k_dim * ab, n_grp, lk,
                          then_norm)
            r_loc = np.where(req == S0, np.ceil(r_all / n_grp), r_all)
            w_loc = np.where(choice == 2, params, params / n_grp)
            k_loc = np.where(choice == 0, k_dim / n_grp, k_dim)
            n_loc = np.where(choice == 1, n_dim / n_grp, n_dim)
            fl = 2 * r_loc * w_loc
            by = w_loc * wb + r_loc * (k_loc + n_loc) * ab
            comp = self._roofline(fl, by, (peak or self._gemm_flops)
                                  * self._shape_eff(r_loc, k_loc, n_loc))
            gemm = comp
            if act:
                comp = comp + self._act_pass(r_loc * n_loc)
            ops[name] = comp
            if split:
                if c.gemm_overlap:
                    # all-gather -> this GEMM; reduce-scatter of the previous GEMM's output
                    tt = t_rest + (self._overlap_s(t_ag, gemm) - gemm) + (
                        self._overlap_s(t_rs, after) - after if after is not None else t_rs)
                else:
                    tt = t_rs + t_ag + t_rest
            return tt + comp, req, _layout_out(op, choice, req)

        total = np.zeros_like(rows)
        # ---- attention block
        c_qkv, c_att, c_o = dims[:, Op.QKV_PROJ], dims[:, Op.ATTENTION], dims[:, Op.O_PROJ]
        att = m.attention
        qkv_n = float(sh.qkv_out)
        if att.kind is AttentionKind.GQA:
            kv_loc = self._kv_heads_per_rank(env["tp"])
            split_params = H * (sh.q_out / t + kv_loc * sh.kv_out_per_head) * t
            qkv_params = np.where(c_qkv == 1, split_params, sh.qkv_params)
        else:
            kv_loc = np.ones_like(t)
            qkv_params = np.where(c_qkv == 1, sh.qkv_replicated_params * t
                                  + (sh.qkv_params - sh.qkv_replicated_params),
                                  float(sh.qkv_params))
        req_q = _layout_in(Op.QKV_PROJ, c_qkv, lin)
        t_nq = self._norm_stats(req_q, rows, env["tp"], link)
        _record_norm(rec, "input norm (hidden split)", env["tp"], t_nq, rows)
        total += t_nq
        tq, _, out_q = linear("qkv_proj", c_qkv, lin, H, qkv_n, qkv_params, t, link,
                              where="layer input -> qkv_proj", then_norm=True)
        total += tq
        # attention core
        req_a = _layout_in(Op.ATTENTION, c_att, lin)    # fixed by its own choice
        total += conv("qkv_proj -> attention", out_q, req_a, rows * qkv_n * ab, t, link)
        heads_loc = np.where(c_att == 1, att.num_heads / t, float(att.num_heads))
        kv_heads = np.where(c_att == 1, kv_loc, float(att.num_kv_heads))
        split_seq = c_att == 0
        # Sequence-split attention has two implementations: split the step's prompt tokens
        # evenly over the ranks and exchange K/V (context parallel, ``t_kvx``), or keep each
        # prompt whole on one rank (:meth:`whole_prompt_tokens` on the busiest rank, ranks
        # without a prompt idle). The cheaper one is priced (:meth:`_kv_exchange_time_s`);
        # both are non-decreasing in the batch, so the layer time is too.
        t_kvx = self._kv_exchange_time_s(split_seq, env)
        pf_whole = self.whole_prompt_tokens(env)
        pf_loc = np.where(split_seq, np.ceil(env["pf"] / t), env["pf"])
        # Decode attention over ``cp`` context-parallel ranks: ``tp / cp`` head (or sequence)
        # groups, each rank reading ``1/cp`` of every sequence's KV (:meth:`_dcp_time_s`).
        cp = env["cp"]
        a_grp = Mesh.head_groups(env["tp"], cp)
        a_f = a_grp.astype(np.float64)
        heads_dec = np.where(c_att == 1, att.num_heads / a_f, float(att.num_heads))
        dec_loc = np.where(split_seq, np.ceil(env["dec"] / a_f), env["dec"])
        span_dec, span_pf = self._spans(window, ctx)
        span_dec_r = span_dec / cp.astype(np.float64)
        kv_dec = np.where(c_att == 1, self._kv_heads_per_rank(a_grp), float(att.num_kv_heads)) \
            if att.kind is AttentionKind.GQA else kv_heads

        def core(pf_loc, heads_dec, dec_loc, span_dec_r, heads_loc, span_pf, kv_dec, kv_heads):
            """The attention kernel's roofline with ``pf_loc`` prompt tokens per rank."""
            if att.kind is AttentionKind.MLA:
                lat = float(sh.kv_elems_per_token)
                kv_lora = float(att.kv_lora_rank or 0)
                fl = 2 * (heads_dec * dec_loc * span_dec_r * (2 * kv_lora + att.qk_rope_head_dim)
                          + heads_loc * pf_loc * span_pf * (att.head_dim + att.v_head_dim))
                by = (dec_loc * span_dec_r + pf_loc) * lat * self._kvb
            else:
                fl = 2 * (att.head_dim + att.v_head_dim) * (heads_dec * dec_loc * span_dec_r
                                                            + heads_loc * pf_loc * span_pf)
                by = (dec_loc * span_dec_r * kv_dec + pf_loc * kv_heads) * sh.kv_out_per_head \
                    * self._kvb
            by = by + (dec_loc * heads_dec + pf_loc * heads_loc) \
                * (att.head_dim + att.v_head_dim) * ab
            out = self._roofline(fl, by, self._attn_flops,
                                 self._mla_hbm if att.kind is AttentionKind.MLA
                                 else self._attn_hbm)
            if att.kind is AttentionKind.MLA:   # the module's other kernels, once per layer
                out = out + np.where(dec_loc + pf_loc > 0, self.config.mla_module_overhead_s, 0.0)
            return out

        parts = (heads_dec, dec_loc, span_dec_r, heads_loc, span_pf, kv_dec, kv_heads)
        att_split = core(pf_loc, *parts)
        sel = np.flatnonzero(t_kvx > 0.0)       # rows whose split would exchange K/V
        if sel.size:
            n_rows = len(t)
            att_whole = core(pf_whole[sel], *(np.asarray(x)[sel] if np.shape(x) == (n_rows,)
                                               else x for x in parts))
            split_wins = att_split[sel] + t_kvx[sel] < att_whole
            att_split = np.array(att_split, dtype=np.float64, copy=True)
            att_split[sel] = np.where(split_wins, att_split[sel], att_whole)
            t_kvx = np.array(t_kvx, dtype=np.float64, copy=True)
            t_kvx[sel] = np.where(split_wins, t_kvx[sel], 0.0)
        ops["attention"] = att_split
        total += ops["attention"]
        t_dcp_q, t_dcp_o = self._dcp_time_s(dec_loc, heads_dec, env)
        if rec is not None and int(cp[0]) > 1 and float(dec_loc[0]) > 0.0:
            q_b, o_b = self.dcp_exchange_bytes(dec_loc, heads_dec)
            rec.append(("decode context parallel: queries", "all-gather", int(cp[0]),
                        float(t_dcp_q[0]), float(q_b[0])))
            rec.append(("decode context parallel: partial outputs + LSE", "reduce-scatter",
                        int(cp[0]), float(t_dcp_o[0]), float(o_b[0])))
        total += t_dcp_q + t_dcp_o
        if rec is not None and float(t_kvx[0]) > 0.0:
            rec.append(("attention K/V exchange (context parallel)", "all-gather",
                        int(env["tp"][0]), float(t_kvx[0]),
                        float(self.kv_exchange_bytes(env["pf"])[0])))
        total += t_kvx
        to, _, out_o = linear("o_proj", c_o, req_a, sh.attn_out, H, sh.o_params, t, link,
                              where="attention -> o_proj")
        total += to
        # ---- FFN block
        if not is_moe:
            c_up, c_dn = dims[:, Op.DENSE_UP], dims[:, Op.DENSE_DOWN]
            req_u = _layout_in(Op.DENSE_UP, c_up, out_o)
            tu, _, out_u = linear("dense_up", c_up, out_o, H, sh.dense_up_params / H,
                                  sh.dense_up_params, t, link, where="o_proj -> dense_up",
                                  act=True, then_norm=True, after=ops["o_proj"])
            t_nu = self._norm_stats(req_u, rows, env["tp"], link)
            _record_norm(rec, "post-attention norm (hidden split)", env["tp"], t_nu, rows)
            total += tu + t_nu
            td, _, out_d = linear("dense_down", c_dn, out_u, sh.dense_width, H,
                                  sh.dense_down_params, t, link, where="dense_up -> dense_down")
            total += td
            return total, out_d, ops
        # ---- MoE block
        moe = m.moe
        assert moe is not None
        dp, g, ep, etp = env["dp"], env["g"], env["ep"], env["etp"]
        x = self.moe_input_layout(out_o, dp)
        if c.gemm_overlap:      # the reduce-scatter of o_proj's output overlaps o_proj
            m_rs, m_ag, m_rest = conv_parts("o_proj -> moe", out_o, x, rows * H * ab, t, link,
                                            then_norm=True)
            total += self._overlap_s(m_rs, ops["o_proj"]) - ops["o_proj"] + m_ag + m_rest
        else:
            total += conv("o_proj -> moe", out_o, x, rows * H * ab, t, link, then_norm=True)
        # router
        c_r = dims[:, Op.ROUTER]
        tr, _, out_r = linear("router", c_r, x, H, float(moe.num_experts), sh.router_params,
                              t, link, where="moe input -> router")
        total += tr + conv("router -> top-k", out_r, x, rows * moe.num_experts * ab, t, link)
        # routed experts
        before_experts = np.array(total, dtype=np.float64, copy=True)   # total grows in place
        local = (x == R) & (dp == 1)
        g_f = g.astype(np.float64)
        rows_g = env["rows_mean"] * dp                        # tokens of the stage group
        d_ep = self.dispatch_destinations(ep)
        send = rows_g / g_f * d_ep * etp * H * ab * (1 - 1 / g_f)
        t_dispatch, t_combine = self._moe_a2a_s(send, rows_g / g_f, g, ep, etp, env)
        if rec is not None and not bool(local[0]) and g[0] > 1:
            rec.append(("moe dispatch", "all-to-all", int(g[0]), float(t_dispatch[0]),
                        float(send[0])))
            rec.append(("moe combine", "all-to-all", int(g[0]), float(t_combine[0]),
                        float(send[0])))
        t_comm = np.where(local, 0.0, t_dispatch + t_combine)
        tbo = self._two_batch_overlap(ep)
        total += np.where(tbo, 0.0, t_comm)
        # Token-expert pairs on the busiest EP rank; routing skew only unbalances ranks when
        # experts are spread over several (ep > 1): with ep = 1 every rank holds every expert.
        assign = rows_g * moe.top_k / ep * self._busiest_rank_factor(rows_g, ep)
        # Pairs whose output rows a rank writes: with tokens routed locally and
        # ``moe_dense_local_outputs`` (vLLM's Triton fused MoE), every pair of the step, the
        # ones of other ranks' experts as zeros; otherwise only its own.
        pairs_out = np.where(local & c.moe_dense_local_outputs, rows_g * moe.top_k, assign)
        c_eu, c_ed = dims[:, Op.EXPERT_UP], dims[:, Op.EXPERT_DOWN]
        e_loc = moe.num_experts / ep
        # Experts whose weights the busiest rank streams: with ep = 1 the experts the step's
        # tokens touch, E(1 - (1 - k/E)^N); with ep > 1 the distinct experts among its e_loc
        # that its `assign` pairs land on, e_loc(1 - (1 - 1/e_loc)^assign) (each pair picks
        # one of them uniformly).
        e_loc_f = np.maximum(e_loc, 1.0)
        touched = np.where(ep > 1, e_loc_f * (1 - (1 - 1 / e_loc_f) ** assign),
                           e_loc * (1 - (1 - moe.top_k / moe.num_experts) ** rows_g))
        etp_f = etp.astype(np.float64)
        lin_e = np.where(c_eu == 2, S0, R)
        link_e = env["link_etp"]

        def expert(name, choice, src, k_dim, n_dim, params, where, act=False, reduce=False):
            op = Op[name.upper()]
            req = _layout_in(op, choice, src)
            tt = conv(where, src, req, assign * k_dim * ab, etp, link_e)
            r_loc = np.where(req == S0, np.ceil(assign / etp_f), assign)
            w_loc = np.where(choice == 2, params, params / etp_f)
            k_loc = np.where(choice == 0, k_dim / etp_f, k_dim)
            n_loc = np.where(choice == 1, n_dim / etp_f, n_dim)
            fl = 2 * r_loc * w_loc
            r_out = np.where(req == S0, np.ceil(pairs_out / etp_f), pairs_out)
            by = touched * w_loc * self._ewb + (r_loc * k_loc + r_out * n_loc) * ab
            m_exp = r_loc / np.maximum(touched, 1.0)          # tokens per local expert
            narrow = self._shape_eff(k_loc, n_loc, half=self._expert_shape_half)
            comp = self._roofline(fl, by, self._expert_flops * narrow
                                  * self._shape_eff(m_exp, k_loc, n_loc))
            if act:         # the block's fixed cost once per layer, with its first GEMM
                comp = comp + self._act_pass(r_out * n_loc) + np.where(
                    r_loc > 0, c.moe_block_overhead_s + self._local_expert_s * e_loc, 0.0)
            if reduce:      # the top-k weighted sum: read every output row, write one per token
                comp = comp + self._stream_pass(r_out * n_loc * (1.0 + 1.0 / moe.top_k))
            ops[name] = comp
            return tt + comp, _layout_out(op, choice, req)

        tu, out_eu = expert("expert_up", c_eu, lin_e, H, sh.expert_up_params / H,
                            sh.expert_up_params, "dispatch -> expert_up", act=True)
        td, out_ed = expert("expert_down", c_ed, out_eu, sh.expert_width, H,
                            sh.expert_down_params, "expert_up -> expert_down", reduce=True)
        total += tu + td
        out_e = np.where(out_ed == S1, R, out_ed)
        total += conv("expert_down -> combine", out_ed, out_e, assign * H * ab, etp, link_e)
        l_moe = np.where(local, np.where(ep == 1, out_e, P), S0)
        # shared experts: a dense FFN branch from x, summed into l_moe
        if moe.num_shared_experts:
            c_su, c_sd = dims[:, Op.SHARED_EXPERT_UP], dims[:, Op.SHARED_EXPERT_DOWN]
            tsu, _, out_su = linear("shared_expert_up", c_su, x, H, sh.shared_up_params / H,
                                    sh.shared_up_params, t, link,
                                    where="moe input -> shared_expert_up", act=True)
            tsd, _, out_sd = linear("shared_expert_down", c_sd, out_su, sh.shared_width, H,
                                    sh.shared_down_params, t, link,
                                    where="shared_expert_up -> shared_expert_down")
            total += tsu + tsd + conv("shared_expert -> moe output", out_sd, l_moe,
                                      rows * H * ab, t, link)
        # dispatch/combine hidden behind the other half's experts
        total += np.where(tbo, np.maximum(t_comm - (total - before_experts), 0.0), 0.0)
        return total, l_moe, ops

    def _two_batch_overlap(self, ep: np.ndarray) -> np.ndarray:
        """``[n]`` bool: whether ``config.two_batch_overlap`` applies at each ``ep``, where the
        engine runs it (:func:`~learn_to_shard.engines.runs_two_batch_overlap`)."""
        c = self.config
        return np.full(np.shape(ep), bool(c.two_batch_overlap)) & runs_two_batch_overlap(
            c.engine, ep, c.moe_a2a_kernel is not None)

    def dcp_exchange_bytes(self, dec_loc: np.ndarray, heads_dec: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray]:
        """Full buffers of the two collectives of decode context parallelism per layer, bytes,
        ``[n]`` each: the queries all-gathered over the ``cp`` group, ``dec · h · d_q`` at the
        activation dtype, and the partial outputs reduce-scattered back with their
        log-sum-exp, ``dec · h · (d_o · act_bytes + 4)``; ``dec`` decode sequences and ``h``
        heads of the ``tp / cp`` head group a rank attends for. GQA ``d_q = head_dim``,
        ``d_o = v_head_dim``; MLA (absorbed decode) the latent widths ``kv_lora + rope`` and
        ``kv_lora``. vLLM ``--dcp-comm-backend ag_rs`` (query all-gather, output
        reduce-scatter with LSE correction; vllm-project/vllm
        docs/serving/context_parallel_deployment.md @ 020505c2af90 and the v0.33.0 flag
        snapshot); the ``a2a`` backend moves the same partial outputs."""
        att = self.model.attention
        if att.kind is AttentionKind.MLA:
            kv_lora = float(att.kv_lora_rank or 0)
            d_q, d_o = kv_lora + att.qk_rope_head_dim, kv_lora
        else:
            d_q, d_o = float(att.head_dim), float(att.v_head_dim)
        rows_h = dec_loc * heads_dec
        return rows_h * d_q * self._ab, rows_h * (d_o * self._ab + 4.0)

    def _dcp_time_s(self, dec_loc: np.ndarray, heads_dec: np.ndarray, env: dict
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Decode context-parallel exchange of one layer, seconds, ``[n]`` each: the query
        all-gather and the output reduce-scatter of :meth:`dcp_exchange_bytes` over ``cp``
        ranks on the CP group's link (:meth:`_collective_s`: the configured collective
        algorithm), not overlapped with compute; zero for ``cp = 1`` or no
        decode rows. Prefill tokens are attended as without ``cp`` (each rank computes the new
        tokens' K/V for its heads and keeps its ``1/cp`` of them); the attention of a later
        prefill chunk to its earlier, token-sharded chunks is priced the same way, without
        the gather it needs (an optimistic simplification)."""
        cp = env["cp"]
        kind = np.where((cp > 1) & (dec_loc > 0), GATHER_OR_SCATTER, 0)
        q_b, o_b = self.dcp_exchange_bytes(dec_loc, heads_dec)
        link = env["link_cp"]
        return (self._collective_s(kind, cp, q_b, link),
                self._collective_s(kind, cp, o_b, link))

    def kv_exchange_bytes(self, prompt_tokens: np.ndarray | float) -> np.ndarray:
        """K and V bytes of one layer for ``prompt_tokens`` prompt tokens, all KV heads
        (GQA ``kv_heads · (head_dim + v_head_dim)``, MLA the latent ``kv_lora + rope``
        elements per token, at the KV dtype): the full buffer a context-parallel all-gather
        assembles on every rank of the group (each receives ``(n − 1)/n`` of it)."""
        per_tok = float(self.shapes.kv_elems_per_token) * self._kvb
        return np.asarray(prompt_tokens, dtype=np.float64) * per_tok

    def step_prompts(self, env: dict) -> np.ndarray:
        """Prompts one attention-DP rank's step carries prompt tokens of, ``pf / isl``,
        ``[n]`` (fractional for a chunk or a share of one prompt)."""
        return env["pf"] / float(self.workload.isl)

    def whole_prompt_tokens(self, env: dict) -> np.ndarray:
        """Prompt tokens the busiest rank attends when attention ``Shard(0)`` keeps each of
        the step's prompts whole on one of the ``t`` ranks, ``[n]``.

        ``N`` whole prompts of ``isl`` tokens over ``t`` ranks put ``ceil(N / t) · isl`` on
        the busiest rank (whole sequences per rank inside the TP group, as attention-DP keeps
        them; the engines' attention-DP is the ``dp`` axis, priced by
        :func:`busiest_rank_prompt_tokens`; ranks with fewer prompts idle part of the step).
        The step's prompts :meth:`step_prompts` ``n = pf / isl`` are a mean (a chunk, a
        share of one prompt, a steady-state mix): the
        steps carry ``floor(n)`` or ``floor(n) + 1`` prompts in the proportion that gives
        the mean ``n``, so the price is the linear interpolation of ``ceil(N / t) · isl``
        between them, rounded up to whole tokens — ``pf`` itself below one prompt, one
        prompt's ``isl`` up to ``t`` prompts, and the even split ``pf / t`` at every
        multiple of ``t``. Non-decreasing in ``pf``.
        """
        isl = float(self.workload.isl)
        t = np.asarray(env["t"], dtype=np.float64)
        n = self.step_prompts(env)
        lo = np.floor(n)
        per_rank_lo, per_rank_hi = np.ceil(lo / t), np.ceil((lo + 1.0) / t)
        return np.ceil(isl * (per_rank_lo + (n - lo) * (per_rank_hi - per_rank_lo)))

    def _kv_exchange_time_s(self, split_seq: np.ndarray, env: dict) -> np.ndarray:
        """Context-parallel K/V exchange of one layer, seconds, ``[n]``.

        Attention ``Shard(0)`` splits the tokens of a step evenly over the ``tp`` ranks;
        decoding sequences are whole either way. An even split cuts the step's prompts
        (all of them when there are fewer prompts than ranks, prefill context parallelism),
        and each rank needs the keys and values of the other ranks' tokens of its prompts:
        the engines all-gather them per layer along the sequence dimension (vLLM PCP RFC,
        https://github.com/vllm-project/vllm/issues/25749:
        "we perform an AllGather op along the sequence dimension within the PCP group to
        obtain the complete KV values"; SGLang prefill CP,
        https://docs.sglang.io/docs/advanced_features/prefill_cp: "all-gather on the KV
        cache"). Priced as one all-gather over ``tp`` of :meth:`kv_exchange_bytes` of the
        step's ``pf`` prompt tokens, on the TP group's link (:meth:`_collective_s`), not
        overlapped with compute; at any number of prompts (an upper bound where fewer
        prompts are cut). Decode tokens are whole sequences and never exchange. The layer
        prices the cheaper of this split and whole prompts per rank
        (:meth:`whole_prompt_tokens`), which at a multiple of ``tp`` prompts is the even
        split with nothing exchanged.
        """
        t, pf = env["t"], env["pf"]
        split_prompt = split_seq & (t > 1) & (pf > 0)
        kind = np.where(split_prompt, GATHER_OR_SCATTER, 0)
        return self._collective_s(kind, env["tp"], self.kv_exchange_bytes(pf), env["link_tp"])

    # ------------------------------------------------------------------ memory terms
    def layer_weights(self, dims: np.ndarray, tp: np.ndarray, ep: np.ndarray,
                      etp: np.ndarray, is_moe: bool) -> np.ndarray:
        """Weight bytes per device of one dense (``is_moe`` false) or MoE layer, ``[n]``, for
        ``[n, NUM_OPS]`` choices ``dims`` and ``[n]`` degrees: one additive term per
        operator (replicated: all parameters; split: ``1/tp``, experts ``E/ep`` of them
        split by ``etp``; GQA KV heads replicated when ``tp`` exceeds them)."""
        sh, m, wb = self.shapes, self.model, self._wb
        t = tp.astype(np.float64)

        def split(choice, params, n=t):
            return np.where(choice == 2, params, params / n)

        att = m.attention
        c_qkv = dims[:, Op.QKV_PROJ]
        if att.kind is AttentionKind.GQA:
            kv_loc = self._kv_heads_per_rank(tp)
            qkv_col = sh.hidden * (sh.q_out / t + kv_loc * sh.kv_out_per_head)
        else:
            qkv_col = sh.qkv_replicated_params + (sh.qkv_params - sh.qkv_replicated_params) / t
        qkv = np.where(c_qkv == 1, qkv_col, split(c_qkv, sh.qkv_params))
        w = qkv + split(dims[:, Op.O_PROJ], sh.o_params)
        if not is_moe:
            w = w + split(dims[:, Op.DENSE_UP], sh.dense_up_params) \
                + split(dims[:, Op.DENSE_DOWN], sh.dense_down_params)
            return w * wb
        moe = m.moe
        assert moe is not None
        etp_f = etp.astype(np.float64)
        e_loc = moe.num_experts / ep
        w = w + split(dims[:, Op.ROUTER], sh.router_params)
        if moe.num_shared_experts:
            w = w + split(dims[:, Op.SHARED_EXPERT_UP], sh.shared_up_params) \
                + split(dims[:, Op.SHARED_EXPERT_DOWN], sh.shared_down_params)
        experts = e_loc * (split(dims[:, Op.EXPERT_UP], sh.expert_up_params, etp_f)
                           + split(dims[:, Op.EXPERT_DOWN], sh.expert_down_params, etp_f))
        return w * wb + experts * self._ewb

    def _spans(self, window: int | None, ctx: float) -> tuple[float, float]:
        """Mean keys a query attends to, tokens: ``(decode at context ctx, prefill of isl)``.

        Full attention: ``ctx`` and ``isl / 2`` (causal). Sliding window ``w``: ``min(ctx, w)``
        and the causal mean ``isl/2`` if ``isl <= w``, else ``w − w² / (2·isl)``. Chunked
        attention ``c`` (a token sees its own chunk's earlier tokens): decode ``ctx`` inside the
        first chunk, else ``c / 2`` (a sequence is on average half-way through its current
        chunk); prefill ``(q·c² + r²) / (2·isl)`` for ``isl = q·c + r``.
        """
        isl = float(self.workload.isl)
        if window is None:
            return ctx, isl / 2
        w = float(window)
        if window in self._chunked:
            q, r = divmod(isl, w)
            return (ctx if ctx < w else w / 2), (q * w * w + r * r) / (2 * isl)
        return min(ctx, w), (isl / 2 if isl <= w else w - w * w / (2 * isl))

    def _kv_heads_per_rank(self, group: np.ndarray) -> np.ndarray:
        """GQA KV heads one rank holds when ``group`` ranks split the heads, ``[n]`` float:
        ``kv / group`` where that divides, else one head replicated (``group > kv``, as
        vLLM/SGLang replicate KV heads; FC-02/FC-04)."""
        kv = self.model.attention.num_kv_heads
        return np.where(kv % group == 0, kv / np.asarray(group, dtype=np.float64), 1.0)

    def kv_per_seq(self, dims: np.ndarray, tp: np.ndarray, window: int | None,
                   tokens: float, cp: np.ndarray | None = None) -> np.ndarray:
        """KV bytes per device per resident sequence for one layer, ``[n]``.

        GQA head split: ``kv/tp`` heads, or 1 head replicated when ``tp > kv``; MLA head
        split: the whole latent (replicated, FC-23); sequence split / replicated: all heads
        (the per-rank sequence count is divided separately for a sequence split); a
        sparse-attention indexer's key cache (``AttentionSpec.indexer_key_bytes``) adds to
        the latent and is held as it is. Decode
        context parallelism (``cp``, default 1) keeps ``1/cp`` of every sequence's tokens per
        rank (vLLM DCP: the copies that ``tp > kv`` would replicate hold disjoint tokens
        instead).
        """
        att = self.model.attention
        capped = window is not None and self.config.window_kv_capped
        held = min(tokens, float(window)) if capped and window is not None else tokens
        # A sparse-attention indexer's key cache sits beside the latent, held like it.
        per_tok = float(self.shapes.kv_elems_per_token) * self._kvb \
            + float(att.indexer_key_bytes)
        c_att = dims[:, Op.ATTENTION]
        if att.kind is AttentionKind.GQA:
            kv_loc = self._kv_heads_per_rank(tp)
            head_split = kv_loc * self.shapes.kv_out_per_head * self._kvb
            per_tok_arr = np.where(c_att == 1, head_split, per_tok)
        else:
            per_tok_arr = np.full(len(dims), per_tok)
        if cp is None:
            return per_tok_arr * held
        return per_tok_arr * held / np.asarray(cp, dtype=np.float64)

    def _workspace(self, rows: np.ndarray, lm_rows: np.ndarray, tp: np.ndarray,
                   etp: np.ndarray, vpad: np.ndarray) -> np.ndarray:
        """Activation workspace per device, bytes: the step's tokens times the widest local
        activation times ``workspace_width_factor``, plus the logits buffer (FC-20/FC-21)."""
        sh, c = self.shapes, self.config
        t = tp.astype(np.float64)
        widest = np.maximum.reduce([
            np.full_like(t, float(sh.hidden)), sh.qkv_out / t,
            2.0 * sh.dense_width / t,
            2.0 * max(sh.expert_width, sh.shared_width) / etp.astype(np.float64)
            * (self.model.moe.top_k if self.model.moe else 1)])
        act = rows * widest * self._ab * c.workspace_width_factor
        logits = lm_rows * vpad / t * c.logits_bytes
        return act + logits

