"""The analytical cost model: strategy -> latency, throughput, memory, feasibility (DESIGN §3).

One vectorised implementation serves both entry points: :meth:`CostModel.evaluate_many` takes
``[n, A]`` action vectors and returns arrays; :meth:`CostModel.evaluate` runs the same code on one
row and adds a readable breakdown. Element-wise NumPy guarantees the two agree exactly.

Model, per pipeline stage and micro-batch (all per device, SI units):

* **Operators** — roofline: ``max(FLOPs / (peak · flops_eff), bytes / (HBM · hbm_eff)) +
  kernel_overhead``; bytes = local weights + activations in and out; decode attention reads the
  KV cache (GQA: ``ctx · kv_local · (hd + v_hd)``; MLA absorbed: ``ctx · (kv_lora + rope)``, not
  divided by a head split) at ``attention_hbm_efficiency`` and does its math at
  ``attention_flops_efficiency``. FP8 weights use the FP8 peak where the chip has one (at
  ``fp8_flops_efficiency``); the embedding and LM head of an FP8 checkpoint stay 16-bit.
  Optional GEMM shape factor ``Π d / (d + gemm_shape_half)`` over the local ``[M, K, N]``.
* **Layouts** — activations ``[tokens, features]`` carry R / S(0) / S(1) / P along the TP group;
  each operator's choice fixes the layout it needs (column: R, row: S(1), replicated: R or S(0)
  as it arrives, P→S(0) by reduce-scatter, S(1)→R by all-gather) and the one it yields; the
  collective between is :func:`learn_to_shard.parallel.placement.redistribute`. A norm whose
  input is S(1) (hidden split) adds a statistics all-reduce of 4 bytes per token.
* **MoE** — the stage group ``g = tp·dp`` runs experts as ``ep × etp``. If tokens arrive
  replicated over the whole group (``dp == 1``) every rank routes locally and the output is a
  Partial sum (TRT-LLM's all-reduce MoE; FC-28). Otherwise tokens are dispatched and combined
  by all-to-all over ``g``: each of the ``N/g`` tokens a rank owns goes to the
  ``D(ep) = ep·(1 − C(E − E/ep, k)/C(E, k))`` EP ranks expected to host one of its experts,
  to all ``etp`` ranks of each; over a group spanning nodes the same-node share rides NVLink in
  parallel with the NIC share (:func:`~learn_to_shard.cost.comm.all_to_all_v_time_s`). Expert
  weight bytes read = experts touched ``E/ep · (1 − (1 − k/E)^N)``. The busiest EP rank
  computes ``m/ep + sqrt(2 (m/ep) ln ep)`` of the ``m = N·k`` pairs (balls into bins) times
  ``moe_imbalance``; with local routing and ``moe_dense_local_outputs`` (vLLM) it writes the
  output rows of all ``m`` pairs. The FFN activation is a memory-bound pass over the
  up-projection outputs (:meth:`CostModel._act_pass`), and the top-k weighted sum a pass that
  reads every expert output row the rank wrote and writes one row per token.
* **Pipeline** — layers split in explicit stage lists (remainder to the first stages; the last
  stage holds the LM head); ``m = min(pp, batch)`` micro-batches; decode step
  ``TPOT = max(Σ_s t_s + (pp − 1)·t_p2p, m · max_s t_s)``. Each stage's step also pays the
  engine's host time ``host_step + host_seq · sequences + host_prefill · prompts admitted``
  (0 by default; engine profiles in :mod:`learn_to_shard.cost.config`).
* **Memory per device and stage** — weights by placement (MoE: ``E/ep`` experts, split by
  ``etp``), embedding on the first stage, LM head on the last (a tied LM head with ``pp > 1``
  is a second copy, FC-16), KV cache by attention layout (head split divides GQA KV heads, with
  replication when ``tp`` exceeds them; MLA's latent cache is replicated under head split and
  divided under a sequence split; windowed layers hold at most ``window`` tokens, or the full
  context when ``window_kv_capped`` is off), activation workspace for the step's tokens (serve:
  for the scheduler's token budget ``max_num_batched_tokens``); weights + workspace +
  KV / ``kv_cache_free_fraction`` must fit ``memory_utilization × HBM − runtime_reserved`` on
  every stage. Reported
  too: the largest batch, the KV-cache capacity in tokens and the longest context per sequence.
* **Phases** — decode: ``batch`` sequences at context ``isl``; prefill: ``batch`` prompts of
  ``isl`` tokens, TTFT = pipeline makespan; serve: steady-state continuous batching with
  ``batch`` running requests — every step decodes ``batch`` tokens (mean context
  ``isl + osl/2``) and prefills ``batch · isl / osl`` prompt tokens (each request's prompt once
  per ``osl`` steps); each request holds KV for ``isl + osl`` tokens (reserved on admission,
  ``kv_reserve_full_request``) or ``isl + osl/2``; TTFT = ``⌈isl / chunk⌉`` steps carrying a
  prefill chunk of ``max_num_batched_tokens − batch`` tokens. A step carries at most
  ``max_num_batched_tokens`` tokens: when ``batch · (1 + isl/osl)`` per micro-batch and DP
  rank exceeds it, only that fraction of the requests progresses per step (the rest wait for
  their prefill), so throughput and step time saturate (:meth:`CostModel._step_share`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError, UnsupportedModelError
from ..hardware.spec import ClusterSpec
from ..model.spec import AttentionKind, ModelSpec
from ..parallel.mesh import Mesh
from ..parallel.ops import (
    CHOICE_NAMES,
    DIM0,
    LAYOUT_IN,
    LAYOUT_OUT,
    NUM_OPS,
    OP_NAMES,
    REPLICATED,
    Op,
)
from ..parallel.placement import LAYOUTS, RESOLVE, S0, S1, P, R
from ..parallel.space import ACTION_LEN, NUM_COARSE, RULE_BIT, RULES, StrategySpace
from ..parallel.strategy import Strategy
from ..workload import DType, Phase, Workload
from . import aggregate
from .comm import (
    GATHER_OR_SCATTER,
    TRANSITION_KIND,
    all_to_all_v_time_s,
    collective_time_s,
    expert_a2a_time_s,
    transition_label,
)
from .config import CostModelConfig
from .shapes import OpShapes

# Cost-side violation bits (after the structural RULES bits).
_COST_RULES = aggregate.LIMITS
_COST_BIT = {name: 1 << (len(RULES) + i) for i, (name, _) in enumerate(_COST_RULES)}
INVALID_BITS_ALL = tuple(RULES) + _COST_RULES
#: Cap on reported token capacities (models without full-attention layers hold unbounded
#: context at a fixed KV size).
_TOKENS_CAP = 2**62


def _record_norm(rec: list | None, where: str, tp: np.ndarray, t: np.ndarray) -> None:
    """Add an RMSNorm statistics all-reduce (4 bytes per token over the TP group, priced by
    :meth:`CostModel._norm_stats`) to the breakdown ``rec`` of row 0 when it costs time."""
    if rec is not None and float(t[0]) > 0.0:
        rec.append((where, "all-reduce", int(tp[0]), float(t[0])))


def stage_layer_counts(num_layers: int, pp: int) -> list[int]:
    """Layers per stage for ``pp`` stages: explicit, summing to ``num_layers`` (never a floor
    division that drops layers, FC-15); the remainder goes to the first stages. With ``pp``
    above the layer count the extra stages are empty (the strategy is invalid by the
    ``layers`` rule)."""
    base, rem = divmod(num_layers, pp)
    return [base + (1 if s < rem else 0) for s in range(pp)]


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


@dataclass
class _Link:
    """Achievable bus bandwidth (bytes/s) and per-step latency (s) per element."""

    bw: np.ndarray
    alpha: np.ndarray


@dataclass
class BatchEstimate:
    """Vectorised result of :meth:`CostModel.evaluate_many` (every array is ``[n]``).

    Attributes:
        feasible: valid structure, fits in memory, meets the SLOs.
        objective: the search objective — tokens/s per device of the whole cluster (output
            tokens for decode/serve, prompt tokens for prefill): one instance's tokens/s times
            the ``floor(N / (pp·tp·dp))`` replicas the ``N`` devices run, over ``N`` (idle
            devices count); 0 where infeasible.
        tokens_per_s_per_device: the same before zeroing infeasible rows.
        tpot_s: time per output token (decode/serve), seconds; NaN for prefill.
        ttft_s: time to first token (prefill/serve), seconds; NaN for decode.
        peak_memory_bytes: worst stage's per-device memory need, bytes.
        max_batch: largest batch that fits in memory at these degrees (linear extrapolation).
        violation_bits: bit-set of broken rules (structural RULES, then memory/SLOs).
        kv_capacity_tokens: tokens of KV cache one instance holds at this batch's workspace
            (windowed layers counted per the engine's page rule, see
            ``CostModelConfig.window_kv_capped``).
        max_context_tokens: longest context each of ``batch`` sequences can reach
            (``kv_capacity_tokens / batch``, at most the model's max positions).
    """

    feasible: np.ndarray
    objective: np.ndarray
    tokens_per_s_per_device: np.ndarray
    tpot_s: np.ndarray
    ttft_s: np.ndarray
    peak_memory_bytes: np.ndarray
    max_batch: np.ndarray
    violation_bits: np.ndarray
    kv_capacity_tokens: np.ndarray | None = None
    max_context_tokens: np.ndarray | None = None


@dataclass(frozen=True)
class CollectiveUse:
    """One collective in the plan: where it sits, what it is, how often and how long.

    Attributes:
        where: e.g. ``"o_proj -> dense_up"``.
        kind: ``"all-reduce"``, ``"all-gather"``, ``"reduce-scatter"``, ``"all-to-all"``,
            ``"send-recv"``.
        group: group size (ranks).
        time_s: one occurrence, seconds (for one micro-batch).
        per_step: occurrences per micro-batch pass through the model (e.g. number of layers).
    """

    where: str
    kind: str
    group: int
    time_s: float
    per_step: int


@dataclass(frozen=True)
class MemoryBreakdown:
    """Per-device memory of the worst stage, bytes.

    Attributes:
        stage: which pipeline stage (0-based) this is.
        weight_bytes, kv_cache_bytes, workspace_bytes: the three users.
        usable_bytes: ``memory_utilization × HBM − runtime_reserved_bytes``.
    """

    stage: int
    weight_bytes: float
    kv_cache_bytes: float
    workspace_bytes: float
    usable_bytes: float

    @property
    def total_bytes(self) -> float:
        """Weights + KV + workspace."""
        return self.weight_bytes + self.kv_cache_bytes + self.workspace_bytes


@dataclass(frozen=True)
class Estimate:
    """Everything the model predicts for one strategy.

    Attributes:
        strategy: the strategy.
        feasible: structurally valid, fits, meets SLOs.
        violations: one line per broken rule (empty when feasible).
        tokens_per_s_per_device: objective (see :class:`BatchEstimate`).
        output_tokens_per_s: per instance (decode/serve) or prompt tokens/s (prefill).
        tpot_s, ttft_s: latencies (NaN where the phase has none).
        stage_time_s: per-stage time of one micro-batch, seconds.
        micro_batches: micro-batches in flight.
        memory: worst stage's memory.
        stage_memory_bytes: per-stage per-device totals.
        max_batch: largest batch that fits at these degrees.
        collectives: the collectives one micro-batch pass issues.
        op_time_s: compute time per fused operator summed over the layers of one pass, s.
        instances: model replicas the cluster holds; idle_devices: devices left over.
        kv_capacity_tokens: KV-cache tokens one instance holds (see :class:`BatchEstimate`).
        max_context_tokens: longest context each of ``batch`` sequences can reach.
    """

    strategy: Strategy
    feasible: bool
    violations: tuple[str, ...]
    tokens_per_s_per_device: float
    output_tokens_per_s: float
    tpot_s: float
    ttft_s: float
    stage_time_s: tuple[float, ...]
    micro_batches: int
    memory: MemoryBreakdown
    stage_memory_bytes: tuple[float, ...]
    max_batch: int
    collectives: tuple[CollectiveUse, ...] = field(default_factory=tuple)
    op_time_s: dict[str, float] = field(default_factory=dict)
    instances: int = 1
    idle_devices: int = 0
    kv_capacity_tokens: int = 0
    max_context_tokens: int = 0


class CostModel:
    """Analytical performance model of one (model, cluster, workload) problem.

    Args:
        model: the model.
        cluster: the cluster.
        workload: the workload.
        config: tunable factors (defaults documented in :class:`CostModelConfig`).
        space: strategy space (default :meth:`StrategySpace.build`).

    Raises:
        ConfigError: a request (``isl + osl``) longer than the model's
            ``max_position_embeddings`` (no strategy can serve it; the engines refuse it).

    Example:
        >>> cm = CostModel(model, cluster, workload)          # doctest: +SKIP
        >>> cm.evaluate(Strategy(tp=8, ep=1, pp=1, dp=1, batch=64)).tpot_s  # doctest: +SKIP
    """

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, workload: Workload,
                 config: CostModelConfig | None = None,
                 space: StrategySpace | None = None) -> None:
        limit = model.max_position_embeddings
        if limit and workload.max_context > limit:
            flag = {Phase.DECODE: "--context", Phase.PREFILL: "--isl"}.get(
                workload.phase, "--isl + --osl")
            raise ConfigError(
                f"{flag}: a request of {workload.max_context} tokens exceeds {model.name}'s "
                f"max_position_embeddings {limit} ({model.source or 'config.json'}); use at "
                f"most {limit} tokens, or a config.json whose max_position_embeddings allows "
                f"more (RoPE scaling)")
        self.model = model
        self.cluster = cluster
        self.workload = workload
        self.config = config or CostModelConfig()
        vocab_multiple = self.config.vocab_padding if self.config.vocab_split_divisible else 0
        self.space = space or StrategySpace.build(model, cluster)
        if self.space.vocab_multiple != vocab_multiple:     # the engine's rule, not the space's
            self.space = dataclasses.replace(self.space, vocab_multiple=vocab_multiple)
        if self.space.max_concurrency != workload.concurrency:   # the load's rule, likewise
            self.space = dataclasses.replace(self.space, max_concurrency=workload.concurrency)
        self.shapes = OpShapes.of(model)
        dev = cluster.device
        # Weight bytes and GEMM rates follow the checkpoint (ModelSpec.quant, read by
        # model.hf_config.read_quant): a 4-bit checkpoint (GPTQ/AWQ/compressed-tensors int4,
        # NVFP4 4.5 bits, MXFP4 4.25 bits, scales included) keeps its size in memory and in
        # HBM traffic whatever the workload's dtype; FP8 and 16-bit checkpoints are stored as
        # the workload's dtype says (its FP8 choice is the checkpoint's by default).
        q = model.quant
        low = q is not None and q.below_8_bit
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
        #: checkpoints that quantise the experts alone, gpt-oss MXFP4).
        self._expert_flops = quant_rate
        self._attn_flops = dev.peak_bf16_flops_per_s * (
            c.attention_flops_efficiency if c.attention_flops_efficiency is not None
            else c.flops_efficiency)
        self._attn_hbm = dev.hbm_bytes_per_s * (
            c.attention_hbm_efficiency if c.attention_hbm_efficiency is not None
            else c.hbm_efficiency)
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
        self._build_stage_tables()

    # ------------------------------------------------------------------ tables
    def _build_stage_tables(self) -> None:
        """Per pp candidate: stage layer boundaries ``[n_pp, max_pp + 1]`` and type counts."""
        n_layers = self.model.num_layers
        pps = self.space.pp_values
        max_pp = max(pps)
        self._max_pp = max_pp
        bounds = np.full((len(pps), max_pp + 1), n_layers, dtype=np.int64)
        counts = np.zeros((len(pps), max_pp, len(self.layer_types)), dtype=np.float64)
        for i, pp in enumerate(pps):
            stages = self.stage_layers(pp)
            start = 0
            for s, n_s in enumerate(stages):
                bounds[i, s] = start
                for li in range(start, start + n_s):
                    counts[i, s, self.layer_type_of[li]] += 1
                start += n_s
            bounds[i, len(stages):] = n_layers
        self._bounds = bounds
        self._type_counts = counts

    @property
    def usable_bytes(self) -> float:
        """Device memory a strategy may use, bytes: ``memory_utilization × HBM −
        runtime_reserved_bytes`` (``CostModelConfig``; at least 0)."""
        return self._usable

    def stage_layers(self, pp: int) -> list[int]:
        """Layers per stage for ``pp`` stages (:func:`stage_layer_counts`)."""
        return stage_layer_counts(self.model.num_layers, pp)

    # ------------------------------------------------------------------ helpers
    def _link(self, extent: np.ndarray) -> _Link:
        """Link a group of ``extent`` consecutive ranks spans, ``[n]``: scale-up if every such
        group stays inside one domain, else scale-out (the slowest group sets the step).

        Groups are laid out back to back from rank 0 (TP innermost); whether one of them
        straddles a node is :meth:`learn_to_shard.parallel.mesh.Mesh.in_node` (the all-to-all
        asks the mesh the same): with 8-GPU nodes, TP6's second group holds ranks 6–11 and
        crosses a node. A group larger than a one-domain cluster stays on the scale-up link.
        """
        return self._link_of(self.mesh.in_node(extent))

    def _link_of(self, intra: np.ndarray) -> _Link:
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
        return _Link(bw=bw, alpha=alpha)

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
        ``tokens`` tokens routed uniformly at random to ``top_k`` experts each (no skew).

        Balls into bins (Raab & Steger, "Balls into Bins — A Simple and Tight Analysis",
        RANDOM 1998): ``m`` balls in ``n`` bins, ``m ≥ n log n``, give a maximum of
        ``m/n + sqrt(2 (m/n) ln n)``. Here ``m = tokens · top_k`` pairs, ``n = ep``. Outside
        that regime the formula is a rough guide, so two hard bounds hold: the busiest rank
        carries at least one pair when there is one (``min(m, 1)``), and at most every token
        sending ``min(top_k, E/ep)`` pairs to it. Real routing is skewed beyond uniform (FC-28):
        ``moe_imbalance`` multiplies the load before the upper bound. 1 for ``ep == 1``; ``[k]``.
        """
        moe = self.model.moe
        assert moe is not None
        ep_f = np.maximum(ep, 1).astype(np.float64)
        pairs = tokens * moe.top_k
        mean = np.maximum(pairs / ep_f, 1e-12)
        cap = np.maximum(tokens * np.minimum(float(moe.top_k), moe.num_experts / ep_f), mean)
        busiest = np.maximum(mean + np.sqrt(2.0 * mean * np.log(ep_f)), np.minimum(pairs, 1.0))
        busiest = np.minimum(busiest * self.config.moe_imbalance, cap)
        return np.where(ep_f > 1, busiest / mean, 1.0)

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
        e, k = moe.num_experts, moe.top_k
        uniq, inv = np.unique(ep, return_inverse=True)
        vals = np.array([u * (1.0 - math.comb(e - e // u, k) / math.comb(e, k)) if u > 1
                         else 1.0 for u in uniq.tolist()], dtype=np.float64)
        return vals[inv.reshape(ep.shape)]

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

    def _all_to_all(self, send: np.ndarray, group: np.ndarray, link: _Link) -> np.ndarray:
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

    def _shape_eff(self, *dims: np.ndarray) -> np.ndarray | float:
        """GEMM efficiency relative to ``flops_efficiency`` for a local shape ``[M, K, N]``:
        ``Π d / (d + gemm_shape_half)`` (tile and wave quantisation make small dimensions run
        below the large-GEMM rate); 1 when ``gemm_shape_half`` is 0."""
        x0 = self.config.gemm_shape_half
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

    # ------------------------------------------------------------------ public API
    def evaluate_many(self, actions: np.ndarray) -> BatchEstimate:
        """Evaluate ``[n, A]`` action vectors (see :mod:`learn_to_shard.parallel.space`).

        Returns:
            A :class:`BatchEstimate` of ``[n]`` arrays. Never raises for an infeasible
            strategy: it is reported through ``feasible`` and ``violation_bits``.
        """
        a = np.atleast_2d(np.asarray(actions, dtype=np.int64))
        if a.shape[1] != ACTION_LEN:
            raise ValueError(f"actions must be [n, {ACTION_LEN}], got {a.shape}")
        out = self._run(a, detail=False)
        return out["batch"]

    def evaluate(self, strategy: Strategy | np.ndarray) -> Estimate:
        """Evaluate one strategy, with a readable breakdown (same numbers as evaluate_many).

        Args:
            strategy: a :class:`Strategy` within this space, or its action vector.

        Raises:
            ValueError: if a Strategy's degrees are not candidates of ``self.space``.
        """
        if isinstance(strategy, Strategy):
            action = self.space.encode(strategy)
        else:
            action = np.asarray(strategy, dtype=np.int64)
            strategy = self.space.decode(action)
        out = self._run(action[None, :], detail=True)
        b: BatchEstimate = out["batch"]
        bits = int(b.violation_bits[0])
        names = tuple(f"{n}: {t}" for n, t in INVALID_BITS_ALL
                      if bits & (RULE_BIT.get(n) or _COST_BIT.get(n, 0)))
        violations = self._explain(names, out, strategy)
        pp = strategy.pp
        stage_mem = out["stage_mem"][0, :pp]
        worst = int(np.argmax(stage_mem))
        mem = MemoryBreakdown(stage=worst, weight_bytes=float(out["stage_w"][0, worst]),
                              kv_cache_bytes=float(out["stage_kv"][0, worst]),
                              workspace_bytes=float(out["ws"][0]), usable_bytes=self._usable)
        inst = self.cluster.num_devices // strategy.devices if strategy.devices else 0
        assert b.kv_capacity_tokens is not None and b.max_context_tokens is not None
        return Estimate(
            strategy=strategy, feasible=bool(b.feasible[0]), violations=violations,
            tokens_per_s_per_device=float(b.tokens_per_s_per_device[0]),
            output_tokens_per_s=float(out["instance_tps"][0]),
            tpot_s=float(b.tpot_s[0]), ttft_s=float(b.ttft_s[0]),
            stage_time_s=tuple(float(x) for x in out["stage_t"][0, :pp]),
            micro_batches=int(out["m"][0]), memory=mem,
            stage_memory_bytes=tuple(float(x) for x in stage_mem),
            max_batch=int(b.max_batch[0]), collectives=tuple(out["collectives"]),
            op_time_s=out["op_time"], instances=inst,
            idle_devices=self.cluster.num_devices - inst * strategy.devices,
            kv_capacity_tokens=int(b.kv_capacity_tokens[0]),
            max_context_tokens=int(b.max_context_tokens[0]))

    def _explain(self, names: tuple[str, ...], out: dict, s: Strategy) -> tuple[str, ...]:
        """Turn violation names into one specific line each (numbers where they help)."""
        lines = []
        from ..units import to_gib, to_ms
        for line in names:
            key = line.split(":")[0]
            if key == "memory":
                stage_mem = out["stage_mem"][0, :s.pp]
                worst = int(np.argmax(stage_mem))
                w = float(out["stage_w"][0, worst])
                what = "weights alone exceed" if w > self._usable else "needs"
                need = w if w > self._usable else stage_mem[worst]
                line = (f"memory: stage {worst} {what} {to_gib(need):.1f} GiB "
                        f"per device > {to_gib(self._usable):.1f} GiB usable "
                        f"(weights {to_gib(w):.1f}, KV {to_gib(out['stage_kv'][0, worst]):.1f}, "
                        f"workspace {to_gib(out['ws'][0]):.1f} GiB)")
            elif key == "tpot_slo":
                line = (f"tpot_slo: TPOT {to_ms(out['batch'].tpot_s[0]):.2f} ms > SLO "
                        f"{to_ms(self.workload.tpot_slo_s or 0):.2f} ms")
            elif key == "ttft_slo":
                line = (f"ttft_slo: TTFT {to_ms(out['batch'].ttft_s[0]):.1f} ms > SLO "
                        f"{to_ms(self.workload.ttft_slo_s or 0):.1f} ms")
            lines.append(line)
        return tuple(lines)

    # ------------------------------------------------------------------ core
    def _run(self, a: np.ndarray, detail: bool) -> dict:
        n = len(a)
        sp = self.space
        deg = sp.degrees_many(a)
        tp, _ep, pp, dp, batch = deg["tp"], deg["ep"], deg["pp"], deg["dp"], deg["batch"]
        dims = a[:, NUM_COARSE:]
        pp_idx = a[:, 2]
        bits = sp.rule_bits_many(a)
        wl = self.workload
        c = self.config

        ph = self.phase_rows(pp, dp, batch)
        m_mb = ph["m"]
        dec, pf, pf_seqs, ctx = ph["dec"], ph["pf"], ph["pf_seqs"], ph["ctx"]
        step = self._step(a, deg, dims, dec, ctx, pf, pf_seqs, detail)
        stage_t, p2p = step["stage_t"], step["p2p"]
        sum_t, max_t = aggregate.pipeline_sums(stage_t, p2p, pp)
        t2 = None
        if wl.phase is Phase.SERVE:
            st2 = self._step(a, deg, dims, dec, ctx, ph["pf2"], ph["pf_seqs2"], False)
            t2 = aggregate.pipeline_sums(st2["stage_t"], st2["p2p"], pp)[0]
        lat = aggregate.latency(wl, sum_t, max_t, m_mb, batch, ph["share"],
                                self.replica_fraction(tp * dp * pp), t2, ph["chunk_steps"])
        tpot, ttft = lat.tpot_s, lat.ttft_s
        instance_tps, tps_dev = lat.instance_tokens_per_s, lat.tokens_per_s_per_device

        # Memory.
        w_layer, kv_layer_per_seq = step["w_type"], step["kv_type_per_seq"]
        counts = self._type_counts[pp_idx]                        # [n, max_pp, types]
        stage_w = np.einsum("nst,nt->ns", counts, w_layer)
        seqs_rank = step["kv_seqs_rank"]                           # [n]
        stage_kv = np.einsum("nst,nt->ns", counts, kv_layer_per_seq) * seqs_rank[:, None]
        stage_ids = np.arange(self._max_pp)[None, :]
        first = stage_ids == 0
        last = stage_ids == (pp[:, None] - 1)
        stage_w = stage_w + first * step["emb_w"][:, None] + last * step["lm_w"][:, None]
        ws = step["ws"]
        in_use = stage_ids < pp[:, None]
        f = c.kv_cache_free_fraction
        stage_mem = np.where(in_use, aggregate.stage_memory_bytes(stage_w, stage_kv,
                                                                  ws[:, None], f), 0.0)
        peak = stage_mem.max(axis=1)
        # Largest batch that fits: KV and workspace scale with batch, weights do not.
        ws_fixed = wl.phase is Phase.SERVE           # budget-sized, does not grow with batch
        var = np.where(in_use, stage_kv / f + (0.0 if ws_fixed else ws[:, None]), 0.0)
        room = np.where(in_use, self._usable - stage_w - (ws[:, None] if ws_fixed else 0.0),
                        np.inf)
        per_b = var / batch[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(per_b > 0, room / per_b, np.inf)
        max_batch = np.floor(np.clip(ratio.min(axis=1), 0, 2**31 - 1)).astype(np.int64)
        # KV capacity in tokens at this batch's workspace (FC-17/FC-20): the worst stage's room
        # for KV over the bytes one token costs a rank (full-attention layers, and windowed
        # layers too when the engine does not cap them), times the ranks that hold disjoint
        # sequences (attention-DP, and a sequence split inside tp).
        tok_stage = np.einsum("nst,nt->ns", counts, step["kv_tok_type"])
        fixed_stage = np.einsum("nst,nt->ns", counts, step["kv_fixed_type"]) * seqs_rank[:, None]
        room_kv = np.maximum(f * (self._usable - stage_w - ws[:, None]) - fixed_stage, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            cap_rank = np.where(in_use & (tok_stage > 0), room_kv / tok_stage, np.inf).min(axis=1)
        holders = dp * np.where(dims[:, Op.ATTENTION] == 0, tp, 1)
        kv_capacity = np.floor(np.minimum(cap_rank * holders, float(_TOKENS_CAP)))
        max_context = np.floor(kv_capacity / batch)
        if self.model.max_position_embeddings:
            max_context = np.minimum(max_context, float(self.model.max_position_embeddings))

        for name, broken in aggregate.limits_broken(wl, self._usable, peak, tpot,
                                                     ttft).items():
            bits = bits | np.where(broken, _COST_BIT[name], 0)
        feasible = bits == 0
        batch_est = BatchEstimate(
            feasible=feasible, objective=aggregate.objective(feasible, tps_dev),
            tokens_per_s_per_device=tps_dev, tpot_s=tpot, ttft_s=ttft,
            peak_memory_bytes=peak, max_batch=max_batch, violation_bits=bits,
            kv_capacity_tokens=kv_capacity.astype(np.int64),
            max_context_tokens=max_context.astype(np.int64))
        out = {"batch": batch_est, "stage_mem": stage_mem, "stage_w": stage_w,
               "stage_kv": stage_kv, "ws": np.broadcast_to(ws, (n,)), "stage_t": stage_t,
               "m": m_mb, "instance_tps": instance_tps}
        if detail:
            out["collectives"] = step["collectives"]
            out["op_time"] = step["op_time"]
        return out

    # ------------------------------------------------------------------ shared pieces
    # These small blocks are also called by cost/decompose.py (the exact solver's tables), so
    # that the two cannot drift apart.
    def replica_fraction(self, devices: np.ndarray) -> np.ndarray:
        """Instances the cluster runs per cluster device, ``floor(N / devices) / N``, ``[n]``.

        One instance uses ``devices = pp · tp · dp`` devices; the cluster of ``N`` devices runs
        ``floor(N / devices)`` replicas of it and leaves the rest idle, so the objective
        (tokens/s per device of the whole cluster) is an instance's tokens/s times this. Idle
        devices count: TP4 on 7 GPUs is one replica over 7 devices, not 4. 0 where an
        instance needs more devices than the cluster has (the ``devices`` rule).
        """
        n_dev = float(self.cluster.num_devices)
        return np.floor(n_dev / np.maximum(devices, 1).astype(np.float64)) / n_dev

    def phase_rows(self, pp: np.ndarray, dp: np.ndarray, batch: np.ndarray) -> dict:
        """Micro-batching and the phase split, per row (module docstring, "Pipeline" and
        "Phases").

        Returns:
            ``m`` micro-batches; ``seq_dp`` sequences per micro-batch per DP rank; ``dec``
            decode sequences, ``pf`` prompt tokens and ``pf_seqs`` prompts completing, per step
            and DP rank; ``share`` the fraction of the running requests a step can carry
            (:meth:`_step_share`; 1 outside serve); ``ctx`` mean decode KV length (tokens);
            for serve the TTFT step's ``pf2``/``pf_seqs2`` (one chunk) and ``chunk_steps``
            (zeros otherwise).
        """
        wl, c = self.workload, self.config
        n = len(pp)
        m_mb = np.minimum(pp, batch)                      # micro-batches in flight
        mb = np.ceil(batch / m_mb)                        # sequences per micro-batch
        seq_dp = np.ceil(mb / dp)                         # per attention-DP rank
        isl, osl = float(wl.isl), float(wl.osl)
        zeros = np.zeros(n)
        if wl.phase is Phase.DECODE:
            dec, pf, pf_seqs, ctx = seq_dp, zeros, zeros, float(wl.isl)
        elif wl.phase is Phase.PREFILL:
            dec, pf, pf_seqs, ctx = zeros, seq_dp * isl, seq_dp, 0.0
        share = np.ones(n)
        if wl.phase is Phase.SERVE:
            share = self._step_share(seq_dp)
            dec = seq_dp * share
            pf_seqs, pf, ctx = dec / osl, dec * isl / osl, wl.decode_context
            chunk = np.minimum(np.maximum(c.max_num_batched_tokens - dec, 1.0), isl)
            pf2, pf_seqs2, chunk_steps = chunk, chunk / isl, np.ceil(isl / chunk)
        else:
            pf2, pf_seqs2, chunk_steps = zeros, zeros, zeros
        return {"m": m_mb, "seq_dp": seq_dp, "dec": dec, "pf": pf, "pf_seqs": pf_seqs,
                "share": share, "ctx": ctx, "pf2": pf2, "pf_seqs2": pf_seqs2,
                "chunk_steps": chunk_steps}

    def _step_share(self, seq_dp: np.ndarray) -> np.ndarray:
        """Serve phase: the fraction of the running requests a step can carry, ``[n]``.

        A steady-state step decodes one token for each of ``seq_dp`` running requests and
        prefills their share of prompts, ``seq_dp · isl / osl`` tokens (per micro-batch and DP
        rank, module docstring "Phases"). The scheduler caps a step at
        ``max_num_batched_tokens`` (vLLM ``--max-num-batched-tokens``, TensorRT-LLM
        ``max_num_tokens``; trtllm-bench sizes it with the same ``batch × (1 + isl/osl)``,
        tensorrt_llm/bench/build/tuning.py ``finetune_setting``), so only
        ``min(1, budget / (seq_dp · (1 + isl/osl)))`` of the requests progress per step: beyond
        that batch, throughput and step time stop growing (requests wait for their prefill),
        and a prompt longer than the budget takes several steps.
        """
        wl = self.workload
        need = seq_dp * (1.0 + float(wl.isl) / float(wl.osl))
        return np.minimum(1.0, self.config.max_num_batched_tokens / need)

    def _host_time(self, dec: np.ndarray, pf_seqs: np.ndarray) -> np.ndarray | None:
        """Engine host time per stage step not hidden behind the GPU:
        ``host_step + host_seq · (dec + pf_seqs) + host_prefill · pf_seqs``; None when 0."""
        c = self.config
        if not (c.host_step_overhead_s or c.host_seq_overhead_s or c.host_prefill_overhead_s):
            return None
        return (c.host_step_overhead_s + c.host_seq_overhead_s * (dec + pf_seqs)
                + c.host_prefill_overhead_s * pf_seqs)

    def _layer_env(self, tp: np.ndarray, ep: np.ndarray, dp: np.ndarray, dec: np.ndarray,
                   pf: np.ndarray) -> dict:
        """The per-row environment :meth:`_layer` reads: degrees, token counts and links."""
        axes = Mesh.axes(tp, ep, np.ones_like(tp), dp)
        g, etp = axes.stage, axes.etp
        return dict(t=tp.astype(np.float64), tp=tp, dp=dp, ep=ep, etp=etp, g=g,
                    rows=dec + pf, dec=dec, pf=pf, link_tp=self._link(tp),
                    link_g=self._link(g), link_etp=self._link(etp))

    def _lm_head(self, lay: np.ndarray, c_lm: np.ndarray, tp: np.ndarray,
                 lm_rows: np.ndarray) -> dict:
        """The LM head on the last stage: input conversion from the last layer's layout
        ``lay``, final-norm statistics, the GEMM and the logits gather, for ``lm_rows`` rows.

        Returns:
            ``t_conv, t_norm, t_lm, t_logits`` (seconds), ``req`` / ``out`` layouts, ``w_local``
            (parameters per device) and ``w_bytes`` (their bytes, 16-bit for quantised
            checkpoints).
        """
        sh, c, ab = self.shapes, self.config, self._ab
        t_f = tp.astype(np.float64)
        link = self._link(tp)
        vpad = self._padded_vocab(tp)
        req = _layout_in(Op.LM_HEAD, c_lm, lay)
        t_conv = self._conv(lay, req, lm_rows * sh.hidden * ab, tp, link)
        t_norm = self._norm_stats(req, lm_rows, tp, link)
        rows_lm = np.where(req == S0, np.ceil(lm_rows / t_f), lm_rows)
        w_local = np.where(c_lm == 2, sh.hidden * vpad, sh.hidden * vpad / t_f)
        t_lm = self._roofline(2 * rows_lm * w_local,
                              w_local * self._eb + rows_lm * (sh.hidden + vpad) * ab,
                              self._lm_flops)
        out = _layout_out(Op.LM_HEAD, c_lm, req)
        t_logits = self._conv(out, np.full(len(lay), R), lm_rows * vpad * c.logits_bytes, tp,
                              link)
        return {"t_conv": t_conv, "t_norm": t_norm, "t_lm": t_lm, "t_logits": t_logits,
                "req": req, "out": out, "w_local": w_local, "w_bytes": w_local * self._eb}

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
        vol = rows * self.shapes.hidden * self._ab / tp.astype(np.float64)
        t_in, t_out = vol / inside.bw + inside.alpha, vol / outside.bw + outside.alpha
        mean = (n_cross * t_out + (hops - n_cross) * t_in) / hops
        return np.where(pp > 1, mean, 0.0)

    # ------------------------------------------------------------------ one step
    def _step(self, a: np.ndarray, deg: dict, dims: np.ndarray, dec: np.ndarray, ctx: float,
              pf: np.ndarray, pf_seqs: np.ndarray, detail: bool) -> dict:
        """Per-stage time of one micro-batch step and per-device memory terms.

        Args:
            dec: decode sequences (1 token each) per attention-DP rank, ``[n]``.
            ctx: mean KV length those sequences attend over, tokens.
            pf: prompt tokens prefilled in the step per attention-DP rank, ``[n]``.
            pf_seqs: prompts completing their prefill in the step per DP rank (LM-head rows).
        """
        n = len(a)
        tp, ep, pp, dp = deg["tp"], deg["ep"], deg["pp"], deg["dp"]
        m, c = self.model, self.config
        env = self._layer_env(tp, ep, dp, dec, pf)
        rows, g, etp = env["rows"], env["g"], env["etp"]          # rows: tokens per DP rank
        link_tp, link_g, link_etp = env["link_tp"], env["link_g"], env["link_etp"]
        recs: list[tuple[str, str, int, float, int]] = []     # detail records
        op_time: dict[str, float] = {}

        # 4 incoming layouts stacked: index k*n + i is row i with incoming layout k.
        rep = lambda x: np.tile(x, 4) if np.ndim(x) else x  # noqa: E731
        L0 = np.repeat(np.arange(4), n)
        D4 = np.tile(dims, (4, 1))
        env4 = {k: _Link(rep(v.bw), rep(v.alpha)) if isinstance(v, _Link) else rep(v)
                for k, v in env.items()}
        type_t, type_out = [], []
        for is_moe, window in self.layer_types:
            t_layer, l_out, _ = self._layer(env4, D4, L0, is_moe, window, ctx, None)
            type_t.append(t_layer.reshape(4, n))
            type_out.append(l_out.reshape(4, n))

        # Embedding (stage 0) and its output layout.
        c_emb = dims[:, Op.EMBEDDING]
        l_emb = _layout_out(Op.EMBEDDING, c_emb, np.full(n, R))
        emb_t = self.embedding_time_s(rows)
        # Walk the layer sequence (layouts chain from layer to layer).
        idx = np.arange(n)
        layer_t = np.empty((n, self.model.num_layers))
        lay = l_emb
        walk: dict[tuple[int, int], int] = {}     # (layer type, incoming layout) -> layers
        for li, ti in enumerate(self.layer_type_of):
            if detail:
                key = (int(ti), int(lay[0]))
                walk[key] = walk.get(key, 0) + 1
            layer_t[:, li] = type_t[ti][lay, idx]
            lay = type_out[ti][lay, idx]
        # LM head on the last stage.
        c_lm = dims[:, Op.LM_HEAD]
        lm_rows = self.lm_head_rows(dec, pf_seqs)
        lm = self._lm_head(lay, c_lm, tp, lm_rows)
        t_conv, t_norm, t_lm, t_logits = lm["t_conv"], lm["t_norm"], lm["t_lm"], lm["t_logits"]
        req, out_lm = lm["req"], lm["out"]
        lm_total = t_conv + t_norm + t_lm + t_logits

        # Stage sums.
        cum = np.concatenate([np.zeros((n, 1)), np.cumsum(layer_t, axis=1)], axis=1)
        bnd = self._bounds[a[:, 2]]                                   # [n, max_pp+1]
        stage_t = np.take_along_axis(cum, bnd[:, 1:], 1) - np.take_along_axis(cum, bnd[:, :-1], 1)
        stage_ids = np.arange(self._max_pp)[None, :]
        stage_t = np.where(stage_ids < pp[:, None], stage_t, 0.0)
        stage_t[:, 0] += emb_t
        stage_t[idx, pp - 1] += lm_total
        # Engine host time not hidden behind the GPU: per step, and per sequence in the step.
        host = self._host_time(dec, pf_seqs)
        if host is not None:
            stage_t = np.where(stage_ids < pp[:, None], stage_t + host[:, None], 0.0)
        p2p = self.p2p_time_s(rows, tp, dp, pp)

        # Memory terms per layer type (weights, KV per sequence per rank).
        w_type = np.stack([self._layer_weights(dims, tp, ep, etp, is_moe)
                           for is_moe, _ in self.layer_types], axis=1)
        kv_type = np.stack([self._kv_per_seq(dims, tp, window, self.kv_tokens_per_sequence())
                            for _, window in self.layer_types], axis=1)
        capped = [w is not None and c.window_kv_capped for _, w in self.layer_types]
        kv_tok_type = np.stack([np.zeros(n) if cap else self._kv_per_seq(dims, tp, None, 1.0)
                                for cap in capped], axis=1)
        kv_fixed_type = np.where(np.asarray(capped)[None, :], kv_type, 0.0)
        c_att = dims[:, Op.ATTENTION]
        s_all, s_seq = self.resident_sequences(deg["batch"], dp, tp)
        kv_seqs_rank = np.where(c_att == DIM0, s_seq, s_all)
        emb_w = self.embedding_weight_bytes(c_emb, tp)
        lm_w = lm["w_bytes"]
        if m.tie_word_embeddings:
            lm_w = np.where(pp > 1, lm_w, 0.0)   # shared with the embedding on one stage
        ws = self.workspace_bytes(dec, pf, pf_seqs, tp, etp)
        out = {"stage_t": stage_t, "p2p": p2p, "w_type": w_type, "kv_type_per_seq": kv_type,
               "kv_seqs_rank": kv_seqs_rank, "emb_w": emb_w, "lm_w": lm_w, "ws": ws,
               "kv_tok_type": kv_tok_type, "kv_fixed_type": kv_fixed_type}
        if detail:
            self._detail(out, dims, tp, dp, ep, etp, g, rows, dec, pf, ctx, walk,
                         link_tp, link_g, link_etp, emb_t, (t_conv, t_norm, t_lm, t_logits),
                         lay, req, out_lm, p2p, pp, recs, op_time)
            out["collectives"] = [r for r in recs]
            out["op_time"] = op_time
        return out

    # ------------------------------------------------------------------ boundary terms
    # Read by _step and by the exact solver's tables (cost/decompose.py) alike.
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

    @staticmethod
    def lm_head_rows(dec: np.ndarray, pf_seqs: np.ndarray) -> np.ndarray:
        """Rows the LM head computes per DP rank in a step: one per decoding sequence and per
        prompt completing its prefill (at least 1e-9, so empty steps stay finite), ``[n]``."""
        return np.maximum(dec + pf_seqs, 1e-9)

    @staticmethod
    def resident_sequences(batch: np.ndarray, dp: np.ndarray, tp: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray]:
        """Sequences whose KV one rank holds, ``[n]`` each: ``ceil(batch / dp)``, and with
        attention split over sequences (``Shard(0)``) its ``ceil(· / tp)`` share."""
        s_all = np.ceil(batch / dp)
        return s_all, np.ceil(s_all / tp.astype(np.float64))

    def workspace_bytes(self, dec: np.ndarray, pf: np.ndarray, pf_seqs: np.ndarray,
                        tp: np.ndarray, etp: np.ndarray) -> np.ndarray:
        """Activation workspace per device for a step of ``dec`` decode sequences, ``pf``
        prompt tokens and ``pf_seqs`` completing prompts per DP rank (:meth:`_workspace`),
        bytes, ``[n]``. Serve: sized for the scheduler's token budget whatever the batch
        (vLLM profiles the peak at ``max_num_batched_tokens``, FC-20)."""
        rows = dec + pf
        ws_rows = np.full(np.shape(rows), float(self.config.max_num_batched_tokens)) \
            if self.workload.phase is Phase.SERVE else rows
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
              link: _Link) -> np.ndarray:
        kind = TRANSITION_KIND[src, dst]
        return collective_time_s(kind, n, full_bytes, link.bw, link.alpha)

    def _norm_stats(self, layout: np.ndarray, rows: np.ndarray, n: np.ndarray,
                    link: _Link) -> np.ndarray:
        """RMSNorm over a hidden-split activation: all-reduce of one fp32 per token."""
        from .comm import ALL_REDUCE
        kind = np.where(layout == S1, ALL_REDUCE, 0)
        return collective_time_s(kind, n, rows * 4.0, link.bw, link.alpha)

    # ------------------------------------------------------------------ one layer
    def _layer(self, env: dict, dims: np.ndarray, lin: np.ndarray, is_moe: bool,
               window: int | None, ctx: float, rec: list | None
               ) -> tuple[np.ndarray, np.ndarray, dict]:
        """Time of one layer for each row and incoming layout; returns (time, out layout,
        per-op compute times). ``rec`` collects (where, kind, group, time) when given."""
        sh, m, c = self.shapes, self.model, self.config
        ab, wb = self._ab, self._wb
        t, rows = env["t"], env["rows"]
        link = env["link_tp"]
        H = sh.hidden
        ops: dict[str, np.ndarray] = {}

        def conv(where: str, src, dst, full_bytes, n, lk) -> np.ndarray:
            tt = self._conv(src, dst, full_bytes, n, lk)
            if rec is not None:
                label = transition_label(int(src[0]), int(dst[0]))
                if label and int(n[0]) > 1:
                    rec.append((where, label, int(n[0]), float(tt[0])))
            return tt

        def local_rows(layout):
            return np.where(layout == S0, np.ceil(rows / t), rows)

        def linear(name, choice, src, k_dim, n_dim, params, n_grp, lk, rws=None,
                   peak=None, where=None, act=False):
            """conv + compute of one weight-bearing op on the tp (or etp) axis; ``act`` adds
            the FFN activation pass over its output."""
            op = Op[name.upper()]
            req = _layout_in(op, choice, src)
            r_all = rows if rws is None else rws
            tt = conv(where or f"-> {name}", src, req, r_all * k_dim * ab, n_grp, lk)
            r_loc = np.where(req == S0, np.ceil(r_all / n_grp), r_all)
            w_loc = np.where(choice == 2, params, params / n_grp)
            k_loc = np.where(choice == 0, k_dim / n_grp, k_dim)
            n_loc = np.where(choice == 1, n_dim / n_grp, n_dim)
            fl = 2 * r_loc * w_loc
            by = w_loc * wb + r_loc * (k_loc + n_loc) * ab
            comp = self._roofline(fl, by, (peak or self._gemm_flops)
                                  * self._shape_eff(r_loc, k_loc, n_loc))
            if act:
                comp = comp + self._act_pass(r_loc * n_loc)
            ops[name] = comp
            return tt + comp, req, _layout_out(op, choice, req)

        total = np.zeros_like(rows)
        # ---- attention block
        c_qkv, c_att, c_o = dims[:, Op.QKV_PROJ], dims[:, Op.ATTENTION], dims[:, Op.O_PROJ]
        att = m.attention
        qkv_n = float(sh.qkv_out)
        if att.kind is AttentionKind.GQA:
            kv_loc = np.where(att.num_kv_heads % env["tp"] == 0, att.num_kv_heads / t, 1.0)
            split_params = H * (sh.q_out / t + kv_loc * sh.kv_out_per_head) * t
            qkv_params = np.where(c_qkv == 1, split_params, sh.qkv_params)
        else:
            kv_loc = np.ones_like(t)
            qkv_params = np.where(c_qkv == 1, sh.qkv_replicated_params * t
                                  + (sh.qkv_params - sh.qkv_replicated_params),
                                  float(sh.qkv_params))
        req_q = _layout_in(Op.QKV_PROJ, c_qkv, lin)
        t_nq = self._norm_stats(req_q, rows, env["tp"], link)
        _record_norm(rec, "input norm (hidden split)", env["tp"], t_nq)
        total += t_nq
        tq, _, out_q = linear("qkv_proj", c_qkv, lin, H, qkv_n, qkv_params, t, link,
                              where="layer input -> qkv_proj")
        total += tq
        # attention core
        req_a = _layout_in(Op.ATTENTION, c_att, lin)    # fixed by its own choice
        total += conv("qkv_proj -> attention", out_q, req_a, rows * qkv_n * ab, t, link)
        heads_loc = np.where(c_att == 1, att.num_heads / t, float(att.num_heads))
        kv_heads = np.where(c_att == 1, kv_loc, float(att.num_kv_heads))
        split_seq = c_att == 0
        dec_loc = np.where(split_seq, np.ceil(env["dec"] / t), env["dec"])
        pf_loc = np.where(split_seq, np.ceil(env["pf"] / t), env["pf"])
        span_dec, span_pf = self._spans(window, ctx)
        if att.kind is AttentionKind.MLA:
            lat = float(sh.kv_elems_per_token)
            kv_lora = float(att.kv_lora_rank or 0)
            fl = 2 * heads_loc * (dec_loc * span_dec * (2 * kv_lora + att.qk_rope_head_dim)
                                  + pf_loc * span_pf * (att.head_dim + att.v_head_dim))
            by = (dec_loc * span_dec + pf_loc) * lat * self._kvb
        else:
            fl = 2 * heads_loc * (att.head_dim + att.v_head_dim) * (dec_loc * span_dec
                                                                    + pf_loc * span_pf)
            by = (dec_loc * span_dec + pf_loc) * kv_heads * sh.kv_out_per_head * self._kvb
        by = by + (dec_loc + pf_loc) * (heads_loc * (att.head_dim + att.v_head_dim)) * ab
        ops["attention"] = self._roofline(fl, by, self._attn_flops, self._attn_hbm)
        total += ops["attention"]
        t_kvx = self._kv_exchange_time_s(split_seq, env)
        if rec is not None and float(t_kvx[0]) > 0.0:
            rec.append(("attention K/V exchange (context parallel)", "all-gather",
                        int(env["tp"][0]), float(t_kvx[0])))
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
                                  act=True)
            t_nu = self._norm_stats(req_u, rows, env["tp"], link)
            _record_norm(rec, "post-attention norm (hidden split)", env["tp"], t_nu)
            total += tu + t_nu
            td, _, out_d = linear("dense_down", c_dn, out_u, sh.dense_width, H,
                                  sh.dense_down_params, t, link, where="dense_up -> dense_down")
            total += td
            return total, out_d, ops
        # ---- MoE block
        moe = m.moe
        assert moe is not None
        dp, g, ep, etp = env["dp"], env["g"], env["ep"], env["etp"]
        x = np.where(out_o == P, np.where(dp == 1, R, S0), _resolve(out_o))
        total += conv("o_proj -> moe", out_o, x, rows * H * ab, t, link)
        # router
        c_r = dims[:, Op.ROUTER]
        tr, _, out_r = linear("router", c_r, x, H, float(moe.num_experts), sh.router_params,
                              t, link, where="moe input -> router")
        total += tr + conv("router -> top-k", out_r, x, rows * moe.num_experts * ab, t, link)
        # routed experts
        before_experts = np.array(total, dtype=np.float64, copy=True)   # total grows in place
        local = (x == R) & (dp == 1)
        g_f = g.astype(np.float64)
        rows_g = rows * dp                                    # tokens of the stage group
        d_ep = self.dispatch_destinations(ep)
        send = rows_g / g_f * d_ep * etp * H * ab * (1 - 1 / g_f)
        t_dispatch, t_combine = self._moe_a2a_s(send, rows_g / g_f, g, ep, etp, env)
        if rec is not None and not bool(local[0]) and g[0] > 1:
            rec.append(("moe dispatch", "all-to-all", int(g[0]), float(t_dispatch[0])))
            rec.append(("moe combine", "all-to-all", int(g[0]), float(t_combine[0])))
        t_comm = np.where(local, 0.0, t_dispatch + t_combine)
        if not c.two_batch_overlap:
            total += t_comm
        # Token-expert pairs on the busiest EP rank; routing skew only unbalances ranks when
        # experts are spread over several (ep > 1): with ep = 1 every rank holds every expert.
        assign = rows_g * moe.top_k / ep * self._busiest_rank_factor(rows_g, ep)
        # Pairs whose output rows a rank writes: with tokens routed locally and
        # ``moe_dense_local_outputs`` (vLLM's Triton fused MoE), every pair of the step, the
        # ones of other ranks' experts as zeros; otherwise only its own.
        pairs_out = np.where(local & c.moe_dense_local_outputs, rows_g * moe.top_k, assign)
        c_eu, c_ed = dims[:, Op.EXPERT_UP], dims[:, Op.EXPERT_DOWN]
        e_loc = moe.num_experts / ep
        touched = e_loc * (1 - (1 - moe.top_k / moe.num_experts) ** rows_g)
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
            comp = self._roofline(fl, by,
                                  self._expert_flops * self._shape_eff(m_exp, k_loc, n_loc))
            if act:
                comp = comp + self._act_pass(r_out * n_loc)
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
        if c.two_batch_overlap:      # dispatch/combine hidden behind the other half's experts
            total += np.maximum(t_comm - (total - before_experts), 0.0)
        return total, l_moe, ops

    def kv_exchange_bytes(self, prompt_tokens: np.ndarray | float) -> np.ndarray:
        """K and V bytes of one layer for ``prompt_tokens`` prompt tokens, all KV heads
        (GQA ``kv_heads · (head_dim + v_head_dim)``, MLA the latent ``kv_lora + rope``
        elements per token, at the KV dtype): the full buffer a context-parallel all-gather
        assembles on every rank of the group (each receives ``(n − 1)/n`` of it)."""
        per_tok = float(self.shapes.kv_elems_per_token) * self._kvb
        return np.asarray(prompt_tokens, dtype=np.float64) * per_tok

    def _kv_exchange_time_s(self, split_seq: np.ndarray, env: dict) -> np.ndarray:
        """Context-parallel K/V exchange of one layer, seconds, ``[n]``.

        Attention ``Shard(0)`` splits the tokens of a step over the ``tp`` ranks. When the
        step's sequences per attention-DP rank, ``max(dec, pf / isl)``, are at least ``tp``,
        each rank gets whole sequences (attention-DP inside the TP group, SGLang's DP
        attention) and nothing is exchanged. With fewer, one prompt's tokens are split across
        ranks (prefill context parallelism) and each rank needs the keys and values of the
        other ranks' tokens of its prompt: the engines all-gather them per layer along the
        sequence dimension (vLLM PCP RFC, https://github.com/vllm-project/vllm/issues/25749:
        "we perform an AllGather op along the sequence dimension within the PCP group to
        obtain the complete KV values"; SGLang prefill CP,
        https://docs.sglang.io/docs/advanced_features/prefill_cp: "all-gather on the KV
        cache"). Priced as one all-gather over ``tp`` of :meth:`kv_exchange_bytes` of the
        step's ``pf`` prompt tokens, on the TP group's link, not overlapped with compute.
        Decode tokens are whole sequences and never exchange.
        """
        t, dec, pf = env["t"], env["dec"], env["pf"]
        seqs = np.maximum(dec, pf / float(self.workload.isl))
        split_prompt = split_seq & (t > 1) & (pf > 0) & (seqs < t)
        kind = np.where(split_prompt, GATHER_OR_SCATTER, 0)
        link = env["link_tp"]
        return collective_time_s(kind, env["tp"], self.kv_exchange_bytes(pf), link.bw,
                                 link.alpha)

    # ------------------------------------------------------------------ memory terms
    def _layer_weights(self, dims: np.ndarray, tp: np.ndarray, ep: np.ndarray,
                       etp: np.ndarray, is_moe: bool) -> np.ndarray:
        """Weight bytes per device of one layer of this kind, ``[n]``."""
        sh, m, wb = self.shapes, self.model, self._wb
        t = tp.astype(np.float64)

        def split(choice, params, n=t):
            return np.where(choice == 2, params, params / n)

        att = m.attention
        c_qkv = dims[:, Op.QKV_PROJ]
        if att.kind is AttentionKind.GQA:
            kv_loc = np.where(att.num_kv_heads % tp == 0, att.num_kv_heads / t, 1.0)
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

    def _kv_per_seq(self, dims: np.ndarray, tp: np.ndarray, window: int | None,
                    tokens: float) -> np.ndarray:
        """KV bytes per device per resident sequence for one layer, ``[n]``.

        GQA head split: ``kv/tp`` heads, or 1 head replicated when ``tp > kv``; MLA head
        split: the whole latent (replicated, FC-23); sequence split / replicated: all heads
        (the per-rank sequence count is divided separately for a sequence split).
        """
        att = self.model.attention
        t = tp.astype(np.float64)
        capped = window is not None and self.config.window_kv_capped
        held = min(tokens, float(window)) if capped and window is not None else tokens
        per_tok = float(self.shapes.kv_elems_per_token) * self._kvb
        c_att = dims[:, Op.ATTENTION]
        if att.kind is AttentionKind.GQA:
            kv_loc = np.where(att.num_kv_heads % tp == 0, att.num_kv_heads / t, 1.0)
            head_split = kv_loc * self.shapes.kv_out_per_head * self._kvb
            per_tok_arr = np.where(c_att == 1, head_split, per_tok)
        else:
            per_tok_arr = np.full(len(dims), per_tok)
        return per_tok_arr * held

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

    # ------------------------------------------------------------------ breakdown
    def _detail(self, out, dims, tp, dp, ep, etp, g, rows, dec, pf, ctx, walk, link_tp,
                link_g, link_etp, emb_t, lm_parts, lay, req_lm, out_lm, p2p, pp, recs,
                op_time) -> None:
        """Fill the breakdown of row 0: collectives per micro-batch pass and op times."""
        env1 = self._layer_env(tp, ep, dp, dec, pf)
        agg: dict[tuple[str, str, int], list] = {}
        for (ti, lay_in), count in walk.items():
            is_moe, window = self.layer_types[ti]
            rec: list = []
            _, _, ops = self._layer(env1, dims, np.array([lay_in]), is_moe, window, ctx, rec)
            for where, kind, grp, tt in rec:
                key = (where, kind, grp)
                agg.setdefault(key, [0.0, 0])
                agg[key][0] += tt * count          # total, averaged below
                agg[key][1] += count
            for name, arr in ops.items():
                op_time[name] = op_time.get(name, 0.0) + float(arr[0]) * count
        for (where, kind, grp), (tt, k) in agg.items():
            recs.append(CollectiveUse(where, kind, grp, tt / k, k))
        t_conv, t_norm, t_lm, t_logits = (float(x[0]) for x in lm_parts)
        if t_norm > 0.0:
            recs.append(CollectiveUse("final norm (hidden split)", "all-reduce", int(tp[0]),
                                      t_norm, 1))
        lab = transition_label(int(lay[0]), int(req_lm[0]))
        if lab and int(tp[0]) > 1:
            recs.append(CollectiveUse("last layer -> lm_head", lab, int(tp[0]), t_conv, 1))
        lab = transition_label(int(out_lm[0]), R)
        if lab and int(tp[0]) > 1:
            recs.append(CollectiveUse("lm_head -> logits", lab, int(tp[0]), t_logits, 1))
        if pp[0] > 1:
            recs.append(CollectiveUse("stage -> stage", "send-recv", 2, float(p2p[0]),
                                      int(pp[0]) - 1))
        op_time["embedding"] = float(emb_t[0])
        op_time["lm_head"] = t_lm


def placement_summary(strategy: Strategy) -> list[tuple[str, str]]:
    """(operator, placement) pairs for reports, e.g. ``("o_proj", "Shard(0)")``."""
    return [(OP_NAMES[i], CHOICE_NAMES[d]) for i, d in enumerate(strategy.dims)]


__all__ = ["BatchEstimate", "CollectiveUse", "CostModel", "Estimate", "MemoryBreakdown",
           "INVALID_BITS_ALL", "LAYOUTS", "NUM_OPS", "placement_summary"]
