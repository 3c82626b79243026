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
  parallel with the NIC share (:func:`~learn_to_shard.cost.comm.all_to_all_v_time_s`). The
  busiest EP rank computes ``a = m/ep + sqrt(2 (m/ep) ln ep)`` of the ``m = N·k`` pairs (balls
  into bins), or more where a power-law expert load puts more on it (``moe_routing_alpha``,
  :mod:`learn_to_shard.cost.routing`: aiconfigurator's load model, checked on the measured
  kernels' ``power_law_1.2`` rows), times ``moe_imbalance`` (``⌈m/ep⌉`` with
  ``moe_balanced_routing``) and reads the
  weights of the experts of its own they land on, ``E/ep · (1 − (1 − ep/E)^a)`` (with
  ``ep = 1`` the experts touched, ``E · (1 − (1 − k/E)^N)``); with local routing and
  ``moe_dense_local_outputs`` (vLLM) it writes the output rows of all ``m`` pairs. The FFN
  activation is a memory-bound pass over the up-projection outputs
  (:meth:`CostModel._act_pass`), and the top-k weighted sum a pass that reads every expert
  output row the rank wrote and writes one row per token.
* **Pipeline** — layers split in explicit stage lists (remainder to the first stages; the last
  stage holds the LM head); ``m = min(pp, batch)`` micro-batches; decode step
  ``TPOT = max(Σ_s t_s + (pp − 1)·t_p2p, m · max_s t_s)``. Each stage's step also pays the
  engine's host time ``host_step + host_seq · sequences + host_prefill · prompts admitted
  + eager_layer · layers per stage · prompt steps`` (0 by default; engine profiles in
  :mod:`learn_to_shard.cost.config`; :meth:`OperatorTerms.host_time_s`).
* **Memory per device and stage** — weights by placement (MoE: ``E/ep`` experts, split by
  ``etp``), embedding (and a multimodal wrapper's vision tower, 16-bit over ``tp``) on the
  first stage, LM head on the last (a tied LM head with ``pp > 1``
  is a second copy, FC-16), KV cache by attention layout (head split divides GQA KV heads, with
  replication when ``tp`` exceeds them; MLA's latent cache is replicated under head split and
  divided under a sequence split; windowed layers hold at most ``window`` tokens, or the full
  context when ``window_kv_capped`` is off), activation workspace for the step's tokens (serve,
  and decode at least: the scheduler's token budget ``max_num_batched_tokens``, which the
  engine reserves at start); weights + workspace +
  KV / ``kv_cache_free_fraction`` must fit ``memory_utilization × HBM − runtime_reserved`` on
  every stage. Reported
  too: the largest batch, the KV-cache capacity in tokens and the longest context per sequence.
* **Phases** — decode: ``batch`` sequences at context ``isl``; prefill: ``batch`` prompts of
  ``isl`` tokens, TTFT = pipeline makespan; serve: steady-state continuous batching with
  ``batch`` running requests — every step decodes ``batch`` tokens (mean context
  ``isl + osl/2``) and prefills ``batch · isl / osl`` prompt tokens (each request's prompt once
  per ``osl`` steps); each request holds KV for ``isl + osl`` tokens (reserved on admission,
  ``kv_reserve_full_request``) or ``isl + osl/2``; TTFT = ``k = ⌈isl / chunk⌉`` steps (chunk
  ``max_num_batched_tokens − batch`` tokens, at most ``isl``), each carrying the decodes and
  the prompt's mean chunk ``isl / k``, so the prompt's tokens are priced once (decodes
  first, with the other running requests' prompt tokens of a step, ``(batch − 1) · isl /
  osl``, up to the step's room: the prompt shares its steps with them). A step
  carries at most ``max_num_batched_tokens`` tokens: when ``batch · (1 + isl/osl)`` per
  micro-batch and DP rank exceeds it, only that fraction of the requests progresses per step
  (the rest wait for their prefill), so throughput and step time saturate
  (:meth:`CostModel._step_share`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..errors import ContextLengthError
from ..hardware.spec import ClusterSpec
from ..model.spec import ModelSpec
from ..parallel.mesh import Mesh
from ..parallel.ops import (
    CHOICE_NAMES,
    DIM0,
    LAYOUT_OUT,
    NUM_OPS,
    OP_NAMES,
    Op,
)
from ..parallel.placement import LAYOUTS, R
from ..parallel.space import ACTION_LEN, NUM_COARSE, PP_HEAD, RULE_BIT, RULES, StrategySpace
from ..parallel.strategy import Strategy
from ..workload import Phase, Workload
from . import aggregate
from .comm import transition_label
from .config import CostModelConfig
from .terms import Link, OperatorTerms, StepMix

# Cost-side violation bits (after the structural RULES bits).
_COST_RULES = aggregate.LIMITS
_COST_BIT = {name: 1 << (len(RULES) + i) for i, (name, _) in enumerate(_COST_RULES)}
INVALID_BITS_ALL = tuple(RULES) + _COST_RULES
#: The KV capacity reported where it is unbounded in tokens: a model without full-attention
#: layers whose windowed layers the engine caps (``CostModelConfig.window_kv_capped``) keeps
#: a fixed KV per sequence however long its context, so the pool bounds the sequences
#: (``max_batch``), not the tokens (:attr:`Estimate.kv_capacity_unbounded`).
KV_TOKENS_UNBOUNDED = 2**62


def stage_layer_counts(num_layers: int, pp: int) -> list[int]:
    """Layers per stage for ``pp`` stages: explicit, summing to ``num_layers`` (never a floor
    division that drops layers, FC-15); the remainder goes to the first stages. With ``pp``
    above the layer count the extra stages are empty (the strategy is invalid by the
    ``layers`` rule)."""
    base, rem = divmod(num_layers, pp)
    return [base + (1 if s < rem else 0) for s in range(pp)]


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
        max_batch: largest batch that fits in memory at these degrees (linear extrapolation),
            a multiple of ``dp``: whole requests on every DP rank.
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
        bytes: the volume one occurrence is priced on (mean over the layers it occurs in):
            the full tensor for all-reduce, all-gather, reduce-scatter and a layout
            all-to-all (nccl-tests' size, :func:`learn_to_shard.cost.comm.
            collective_time_s`); what each rank sends for the MoE dispatch / combine; one
            rank's slice for the stage-to-stage send-recv.
    """

    where: str
    kind: str
    group: int
    time_s: float
    per_step: int
    bytes: float = 0.0


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
        ttft_queue_s: the part of ``ttft_s`` a closed-loop client waits for a batch slot
            (:meth:`CostModel.closed_loop_queue`), seconds; 0 where none waits.
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
    ttft_queue_s: float = 0.0

    @property
    def kv_capacity_unbounded(self) -> bool:
        """Whether the KV pool is unbounded in tokens (``kv_capacity_tokens`` is then
        :data:`KV_TOKENS_UNBOUNDED`): every attention layer keeps a fixed window per
        sequence, so ``max_batch`` sequences fit at any context up to the model's maximum
        positions."""
        return self.kv_capacity_tokens >= KV_TOKENS_UNBOUNDED

    @property
    def cluster_tokens_per_s(self) -> float:
        """The whole cluster's tokens/s: the objective times the cluster's devices (replicas
        and idle ones; :meth:`CostModel.replica_fraction` says how replicas count)."""
        return self.tokens_per_s_per_device * (self.instances * self.strategy.devices
                                               + self.idle_devices)

    @property
    def instance_tokens_per_s(self) -> float:
        """What one instance serves, tokens/s: :attr:`cluster_tokens_per_s` over the
        instances. Below :attr:`output_tokens_per_s`, its batch slots' rate, where a closed
        loop's clients bound it (each spends the front-end time outside the engine, or there
        are fewer of them than slots; ``aggregate.latency``)."""
        return self.cluster_tokens_per_s / max(self.instances, 1)


def check_context(model: ModelSpec, workload: Workload) -> None:
    """Refuse a workload whose longest request exceeds the model's positions (no strategy can
    serve it; the engines refuse it), before any search.

    Raises:
        ContextLengthError: naming the flag (``--context``, ``--isl`` or ``--isl + --osl``, with
            ``--images-per-request`` where images fill the prompt), the request's tokens and
            the limit (the YaRN-extended one where the config's ``rope_scaling`` sets it).
    """
    limit = model.max_position_embeddings
    if limit and workload.max_context > limit:
        flag = {Phase.DECODE: "--context", Phase.PREFILL: "--isl"}.get(
            workload.phase, "--isl + --osl")
        if workload.images_per_request:
            flag += f" with --images-per-request {workload.images_per_request}"
        what = (f"the {limit} positions {model.name}'s YaRN rope_scaling extends its "
                f"max_position_embeddings {model.config_max_positions} to"
                if model.config_max_positions
                else f"{model.name}'s max_position_embeddings {limit}")
        if model.positions_default:
            what += f" ({model.positions_default})"
        if model.rope_not_followed:
            # The engines would start with max_position_embeddings x factor; l2s keeps the
            # length the checkpoint was trained for (hf_config._yarn_positions).
            what += (f"; its {model.rope_not_followed}, which vLLM and SGLang multiply it "
                     f"by, is not followed")
        raise ContextLengthError(
            f"{flag}: a request of {workload.max_context} tokens exceeds {what} "
            f"({model.source or 'config.json'}); use at most {limit} tokens, or a "
            f"config.json whose max_position_embeddings (or YaRN rope_scaling) allows more")


class CostModel(OperatorTerms):
    """Analytical performance model of one (model, cluster, workload) problem.

    The per-operator, boundary and memory terms are :class:`~learn_to_shard.cost.terms.
    OperatorTerms`' (inherited, the one definition the exact solver's tables read too); this
    class walks the layer chain with them and aggregates stages, pipeline, memory, limits and
    the objective (:mod:`learn_to_shard.cost.aggregate`).

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
        check_context(model, workload)
        self.model = model
        self.cluster = cluster
        self.workload = workload
        self.config = (config or CostModelConfig()).for_device(cluster.device)
        vocab_multiple = self.config.vocab_padding if self.config.vocab_split_divisible else 0
        self.space = space or StrategySpace.build(model, cluster)
        if self.space.vocab_multiple != vocab_multiple:     # the engine's rule, not the space's
            self.space = dataclasses.replace(self.space, vocab_multiple=vocab_multiple)
        if self.space.max_concurrency != workload.concurrency:   # the load's rule, likewise
            self.space = dataclasses.replace(self.space, max_concurrency=workload.concurrency)
        OperatorTerms.__init__(self, model, cluster, workload, self.config)
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

    def stage_layers(self, pp: int) -> list[int]:
        """Layers per stage for ``pp`` stages (:func:`stage_layer_counts`)."""
        return stage_layer_counts(self.model.num_layers, pp)

    # ------------------------------------------------------------------ public API
    def evaluate_many(self, actions: np.ndarray) -> BatchEstimate:
        """Evaluate ``[n, A]`` action vectors (see :mod:`learn_to_shard.parallel.space`).

        Returns:
            A :class:`BatchEstimate` of ``[n]`` arrays. Never raises for an infeasible
            strategy: it is reported through ``feasible`` and ``violation_bits``.
        """
        return self._run(_action_rows(actions), detail=False)["batch"]

    def lm_head_time_many(self, actions: np.ndarray) -> np.ndarray:
        """The LM head's time on the last stage for ``[n, A]`` action vectors, seconds,
        ``[n]``: its input conversion, final-norm statistics, GEMM and logits gather for the
        step's rows (:meth:`~learn_to_shard.cost.terms.OperatorTerms.lm_head`; of a serve
        mix, its step a's), as the stage times include it.

        Raises:
            ValueError: ``actions`` not ``[n, A]``.
        """
        return np.asarray(self._run(_action_rows(actions), detail=False)["lm_t"],
                          dtype=np.float64)

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
                              workspace_bytes=float(out["ws"][0]), usable_bytes=self.usable_bytes)
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
            max_context_tokens=int(b.max_context_tokens[0]),
            ttft_queue_s=float(out["ttft_queue"][0]))

    def _explain(self, names: tuple[str, ...], out: dict, s: Strategy) -> tuple[str, ...]:
        """Turn violation names into one specific line each (numbers where they help)."""
        lines = []
        from ..units import format_ms, to_gib
        for line in names:
            key = line.split(":")[0]
            if key == "memory":
                stage_mem = out["stage_mem"][0, :s.pp]
                worst = int(np.argmax(stage_mem))
                w = float(out["stage_w"][0, worst])
                what = "weights alone exceed" if w > self.usable_bytes else "needs"
                need = w if w > self.usable_bytes else stage_mem[worst]
                line = (f"memory: stage {worst} {what} {to_gib(need):.1f} GiB "
                        f"per device > {to_gib(self.usable_bytes):.1f} GiB usable "
                        f"(weights {to_gib(w):.1f}, KV {to_gib(out['stage_kv'][0, worst]):.1f}, "
                        f"workspace {to_gib(out['ws'][0]):.1f} GiB)")
            elif key in ("tpot_slo", "ttft_slo"):
                name = key.split("_")[0]
                got = float(getattr(out["batch"], f"{name}_s")[0])
                slo = getattr(self.workload, f"{name}_slo_s") or 0.0
                # Enough digits that a latency just above its SLO does not print as equal.
                digits = next((d for d in range(2 if name == "tpot" else 1, 7)
                               if format_ms(got, d) != format_ms(slo, d)), 6)
                line = (f"{key}: {name.upper()} {format_ms(got, digits)} > SLO "
                        f"{format_ms(slo, digits)}")
                wait = float(out["ttft_queue"][0])
                if name == "ttft" and wait > 0 and self.workload.concurrency is not None:
                    slots = (self.cluster.num_devices // s.devices) * s.batch
                    line += (f", {format_ms(wait, 1)} of it waiting for a batch slot "
                             f"({self.workload.concurrency} clients, {slots} slots)")
            lines.append(line)
        return tuple(lines)

    # ------------------------------------------------------------------ core
    def _run(self, a: np.ndarray, detail: bool) -> dict:
        n = len(a)
        sp = self.space
        deg = sp.degrees_many(a)
        tp, _ep, pp, dp, batch = deg["tp"], deg["ep"], deg["pp"], deg["dp"], deg["batch"]
        dims = a[:, NUM_COARSE:]
        pp_idx = a[:, PP_HEAD]
        bits = sp.rule_bits_many(a)
        wl = self.workload
        c = self.config

        ph = self.phase_rows(pp, dp, batch)
        m_mb = ph["m"]
        dec, pf, pf_seqs, ctx = ph["dec"], ph["pf"], ph["pf_seqs"], ph["ctx"]
        # The mean step as the mix of the steps an engine runs (serve_step_mix); a row not
        # mixed has the mean content in step a.
        mix = self.prompt_step_mix(dec, pf, pf_seqs, dp, m_mb)
        step = self._step(a, deg, dims, mix.dec_a, ctx, mix.pf_a, mix.seqs_a, detail,
                          mix.busy_a)
        if mix.mixed.any():
            other = self._step(a, deg, dims, dec, ctx, mix.pf_b, mix.seqs_b, detail)
            step = self._mix_steps(step, other, mix, detail)
        stage_t, p2p = step["stage_t"], step["p2p"]
        sum_t, max_t = aggregate.pipeline_sums(stage_t, p2p, pp)
        t2 = None
        if wl.phase is Phase.SERVE:
            st2 = self._step(a, deg, dims, ph["dec2"], ctx, ph["pf2"], ph["pf_seqs2"], False)
            t2 = aggregate.pipeline_sums(st2["stage_t"], st2["p2p"], pp)[0]
        lat = aggregate.latency(wl, sum_t, max_t, m_mb, batch, ph["share"],
                                self.replica_fraction(tp * dp * pp, batch), t2,
                                ph["chunk_steps"],
                                self.config.frontend_time_s,
                                self.closed_loop_queue(tp * dp * pp, batch),
                                self.clients_per_device, self.config.frontend_serial_s)
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
        room = np.where(in_use, self.usable_bytes - stage_w - (ws[:, None] if ws_fixed else 0.0),
                        np.inf)
        per_b = var / batch[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(per_b > 0, room / per_b, np.inf)
        # Whole requests per DP rank: each of the dp ranks holds batch / dp sequences (the
        # ``batch`` rule), so the instance fits dp × floor(ratio / dp), not floor(ratio).
        max_batch = (dp * np.floor(np.clip(ratio.min(axis=1), 0, 2**31 - 1) / dp)
                     ).astype(np.int64)
        # KV capacity in tokens at this batch's workspace (FC-17/FC-20): the worst stage's room
        # for KV over the bytes one token costs a rank (full-attention layers, and windowed
        # layers too when the engine does not cap them), times the ranks that hold disjoint
        # sequences (attention-DP, and a sequence split inside tp).
        tok_stage = np.einsum("nst,nt->ns", counts, step["kv_tok_type"])
        fixed_stage = np.einsum("nst,nt->ns", counts, step["kv_fixed_type"]) * seqs_rank[:, None]
        room_kv = np.maximum(f * (self.usable_bytes - stage_w - ws[:, None]) - fixed_stage, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            cap_rank = np.where(in_use & (tok_stage > 0), room_kv / tok_stage, np.inf).min(axis=1)
        # (``kv_tok_type`` is already the 1/cp share of a token, so cp adds no holders.)
        holders = dp * np.where(dims[:, Op.ATTENTION] == 0, Mesh.head_groups(tp, deg["cp"]), 1)
        kv_capacity = np.floor(np.minimum(cap_rank * holders, float(KV_TOKENS_UNBOUNDED)))
        max_context = np.floor(kv_capacity / batch)
        # Every layer windowed (and the windows held to size) but longer than the planned
        # sequences: a sequence's KV stops growing at the window, so once the batch fits at
        # the window it fits at any context.
        windows = [w for _, w in self.layer_types]
        if c.window_kv_capped and windows and all(w is not None for w in windows):
            widest = float(max(w for w in windows if w is not None))
            max_context = np.where(max_context >= widest, float(KV_TOKENS_UNBOUNDED),
                                   max_context)
        if self.model.max_position_embeddings:
            max_context = np.minimum(max_context, float(self.model.max_position_embeddings))

        for name, broken in aggregate.limits_broken(wl, self.usable_bytes, peak, tpot,
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
               "m": m_mb, "instance_tps": instance_tps, "lm_t": step["lm_t"],
               "ttft_queue": np.broadcast_to(np.asarray(lat.ttft_queue_s, dtype=np.float64),
                                             (n,))}
        if detail:
            out["collectives"] = step["collectives"]
            out["op_time"] = step["op_time"]
        return out

    # ------------------------------------------------------------------ shared pieces
    # These small blocks are also called by search/exact_tables.py (the exact solver's tables), so
    # that the two cannot drift apart.
    def replica_fraction(self, devices: np.ndarray, batch: np.ndarray | None = None
                         ) -> np.ndarray:
        """Instances the cluster runs at a full batch per cluster device, ``[n]``:
        ``floor(N / devices) / N``, or with a closed-loop load of ``C`` clients
        (``Workload.concurrency``) ``min(floor(N / devices), C / batch) / N``.

        One instance uses ``devices = pp · tp · dp`` devices; the cluster of ``N`` devices runs
        ``floor(N / devices)`` replicas of it and leaves the rest idle, so the objective
        (tokens/s per device of the whole cluster) is an instance's tokens/s at ``batch``
        times this. Idle devices count: TP4 on 7 GPUs is one replica over 7 devices, not 4.
        With ``C`` clients over ``r`` replicas at most ``C`` sequences run in all, so only
        ``C / batch`` replicas' worth run the plan's batch (3 clients on two replicas of
        batch 2 are 1.5 of them, not 2); a replica with fewer clients runs a shorter step, so
        this slightly undercounts it. 0 where an instance needs more devices than the
        cluster has (the ``devices`` rule). Non-increasing in ``batch``.
        """
        n_dev = float(self.cluster.num_devices)
        full = np.floor(n_dev / np.maximum(devices, 1).astype(np.float64))
        c = self.workload.concurrency
        if c is not None and batch is not None:
            full = np.minimum(full, float(c) / np.maximum(np.asarray(batch, dtype=np.float64),
                                                          1.0))
        return full / n_dev

    @property
    def clients_per_device(self) -> float:
        """A serve workload's closed-loop clients over the cluster's devices
        (``Workload.concurrency / N``), 0 without a closed loop or outside serve: with the
        front-end time it bounds the cluster's throughput (:func:`~learn_to_shard.cost.
        aggregate.latency`)."""
        c = self.workload.concurrency
        if c is None or self.workload.phase is not Phase.SERVE:
            return 0.0
        return float(c) / float(self.cluster.num_devices)

    def closed_loop_queue(self, devices: np.ndarray, batch: np.ndarray) -> np.ndarray:
        """Closed-loop clients waiting for a batch slot per running request, ``[n]``:
        ``max(0, C / (r · batch) − 1)`` with ``C`` clients (``Workload.concurrency``) over
        ``r = floor(N / devices)`` replicas; 0 without a closed-loop load, outside serve, or
        where no replica fits.

        A plan whose batch holds fewer requests than its replica's share of the clients keeps
        the rest waiting (vLLM's, SGLang's and TensorRT-LLM's benchmark clients send the next
        request when one completes, and the engine queues what its batch cannot admit): each
        running request has that many waiting behind it, and
        :func:`~learn_to_shard.cost.aggregate.latency` adds their wait to TTFT.
        """
        c = self.workload.concurrency
        b = np.maximum(np.asarray(batch, dtype=np.float64), 1.0)
        if c is None or self.workload.phase is not Phase.SERVE:
            return np.zeros(np.shape(b))
        r = np.floor(float(self.cluster.num_devices)
                     / np.maximum(np.asarray(devices, dtype=np.float64), 1.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(r > 0, float(c) / (np.maximum(r, 1.0) * b) - 1.0, 0.0)
        return np.maximum(q, 0.0)

    def phase_rows(self, pp: np.ndarray, dp: np.ndarray, batch: np.ndarray) -> dict:
        """Micro-batching and the phase split, per row (module docstring, "Pipeline" and
        "Phases").

        Returns:
            ``m`` micro-batches; ``seq_dp`` sequences per micro-batch per DP rank; ``dec``
            decode sequences, ``pf`` prompt tokens and ``pf_seqs`` prompts completing, per step
            and DP rank; ``share`` the fraction of the running requests a step can carry
            (:meth:`_step_share`; 1 outside serve); ``ctx`` mean decode KV length (tokens);
            for serve the TTFT step's ``pf2``/``pf_seqs2`` (the prompt's mean chunk,
            ``isl / chunk_steps`` tokens and ``1 / chunk_steps`` of the prompt; decodes first,
            plus the other running requests' prompt tokens of a steady-state step,
            ``(dec − 1) · isl / osl``, up to the step's room: ``pf_seqs2 = pf2 / isl``), its
            decodes
            ``dec2`` (``dec``; 0 where the engine runs prefill first,
            :attr:`~learn_to_shard.cost.terms.OperatorTerms.serve_prefill_first`) and
            ``chunk_steps`` (zeros otherwise). Prefill first, ``dec`` is every running
            request (the decode-only steps carry them all) and a chunk has the whole budget.
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
        dec2 = zeros
        if wl.phase is Phase.SERVE:
            # Prefill first, every running request decodes in the decode-only steps (the
            # budget bounds the prefill-only steps alone) and a prompt's chunk has the whole
            # budget; decodes first, the budget bounds the step (:meth:`_step_requests`).
            first = self.serve_prefill_first
            dec = seq_dp if first else self._step_requests(seq_dp)
            share = dec / seq_dp
            pf_seqs, pf, ctx = dec / osl, dec * isl / osl, wl.decode_context
            room = np.full(n, float(c.token_budget)) if first else c.token_budget - dec
            chunk = np.minimum(np.maximum(room, 1.0), isl)
            chunk_steps = np.ceil(isl / chunk)
            # The TTFT step carries the prompt's mean chunk: its isl tokens over the
            # ceil(isl / chunk) steps it takes (the last chunk is the remainder), so the steps
            # price the prompt's tokens once; prefill first, it carries no decodes. Decodes
            # first, the prompt shares its steps with the prompts of the other running
            # requests, (dec - 1) · isl / osl tokens per step in the steady state (several
            # prompts per step at a batch large against osl; none beside a lone request),
            # up to the step's room.
            own = isl / chunk_steps
            others = np.maximum(dec - 1.0, 0.0) * isl / osl
            pf2 = own if first else np.maximum(own, np.minimum(own + others,
                                                               np.maximum(room, 1.0)))
            pf_seqs2 = pf2 / isl
            dec2 = zeros if first else dec
        else:
            pf2, pf_seqs2, chunk_steps = zeros, zeros, zeros
        return {"m": m_mb, "seq_dp": seq_dp, "dec": dec, "pf": pf, "pf_seqs": pf_seqs,
                "share": share, "ctx": ctx, "pf2": pf2, "pf_seqs2": pf_seqs2,
                "chunk_steps": chunk_steps, "dec2": dec2}

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
        return self._step_requests(seq_dp) / seq_dp

    def _step_requests(self, seq_dp: np.ndarray) -> np.ndarray:
        """Serve phase: the requests a step carries, ``min(seq_dp, budget / (1 + isl/osl))``,
        ``[n]`` (:meth:`_step_share`). Computed directly, not as ``seq_dp · share``, which
        differs by an ulp from batch to batch once the budget binds and flips the ceilings of
        per-rank token counts."""
        wl = self.workload
        return np.minimum(seq_dp, self.config.token_budget
                          / (1.0 + float(wl.isl) / float(wl.osl)))

    def _mix_steps(self, prompt: dict, alone: dict, mix: StepMix, detail: bool) -> dict:
        """``prompt`` (step a, carrying more prompt tokens, ``StepMix.pf_a``) weighted ``q``
        and ``alone`` (step b: fewer, or none) weighted ``w_b`` (:meth:`StepMix.blend`):
        the stage times, the stage send and, with ``detail``, the breakdown's operator and
        collective times (row 0). Memory terms are the first step's but for the workspace,
        the larger of the two steps' (the peak the engine must hold: step a's LM-head rows
        of the prompts it completes; a prefill-only step a may hold fewer rows than step
        b's decodes)."""
        out = dict(prompt)
        out["stage_t"] = mix.blend(prompt["stage_t"], alone["stage_t"])
        out["p2p"] = mix.blend(prompt["p2p"], alone["p2p"])
        out["ws"] = np.maximum(prompt["ws"], alone["ws"])
        if detail:
            q0, w0 = float(mix.q[0]), float(mix.w_b[0])
            out["op_time"] = {k: q0 * v + w0 * alone["op_time"].get(k, 0.0)
                              for k, v in prompt["op_time"].items()}
            by_key = {(c.where, c.kind, c.group): c for c in alone["collectives"]}
            out["collectives"] = [
                dataclasses.replace(c, time_s=q0 * c.time_s + w0 * by_key[
                    (c.where, c.kind, c.group)].time_s)
                if (c.where, c.kind, c.group) in by_key else c
                for c in prompt["collectives"]]
        return out

    # ------------------------------------------------------------------ one step
    def _step(self, a: np.ndarray, deg: dict, dims: np.ndarray, dec: np.ndarray, ctx: float,
              pf: np.ndarray, pf_seqs: np.ndarray, detail: bool,
              busy: np.ndarray | None = None) -> dict:
        """Per-stage time of one micro-batch step and per-device memory terms.

        Args:
            dec: decode sequences (1 token each) per attention-DP rank, ``[n]``.
            ctx: mean KV length those sequences attend over, tokens.
            pf: prompt tokens prefilled in the step per attention-DP rank, ``[n]``.
            pf_seqs: prompts completing their prefill in the step per DP rank (LM-head rows).
            busy: the busiest attention-DP rank's prompt tokens where finite (``StepMix.busy_a``;
                :meth:`~learn_to_shard.cost.terms.OperatorTerms.rank_prompt_tokens`).
        """
        n = len(a)
        tp, ep, pp, dp, cp = deg["tp"], deg["ep"], deg["pp"], deg["dp"], deg["cp"]
        m, c = self.model, self.config
        env = self.layer_env(tp, ep, dp, dec, pf, cp, busy)
        rows, g, etp = env["rows"], env["g"], env["etp"]          # rows: tokens per DP rank
        link_tp, link_g, link_etp = env["link_tp"], env["link_g"], env["link_etp"]
        recs: list[tuple[str, str, int, float, int]] = []     # detail records
        op_time: dict[str, float] = {}

        # 4 incoming layouts stacked: index k*n + i is row i with incoming layout k.
        rep = lambda x: np.tile(x, 4) if np.ndim(x) else x  # noqa: E731
        L0 = np.repeat(np.arange(4), n)
        D4 = np.tile(dims, (4, 1))
        env4 = {k: Link(rep(v.bw), rep(v.alpha)) if isinstance(v, Link) else rep(v)
                for k, v in env.items()}
        type_t, type_out = [], []
        for is_moe, window in self.layer_types:
            t_layer, l_out, _ = self.layer(env4, D4, L0, is_moe, window, ctx, None)
            type_t.append(t_layer.reshape(4, n))
            type_out.append(l_out.reshape(4, n))

        # Embedding (stage 0) and its output layout.
        c_emb = dims[:, Op.EMBEDDING]
        l_emb = LAYOUT_OUT[Op.EMBEDDING][c_emb, np.full(n, R)]
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
        lm = self.lm_head(lay, c_lm, tp, lm_rows)
        t_conv, t_norm, t_lm, t_logits = lm["t_conv"], lm["t_norm"], lm["t_lm"], lm["t_logits"]
        req, out_lm = lm["req"], lm["out"]
        lm_total = t_conv + t_norm + t_lm + t_logits

        # Stage sums.
        cum = np.concatenate([np.zeros((n, 1)), np.cumsum(layer_t, axis=1)], axis=1)
        bnd = self._bounds[a[:, PP_HEAD]]                                   # [n, max_pp+1]
        stage_t = np.take_along_axis(cum, bnd[:, 1:], 1) - np.take_along_axis(cum, bnd[:, :-1], 1)
        stage_ids = np.arange(self._max_pp)[None, :]
        stage_t = np.where(stage_ids < pp[:, None], stage_t, 0.0)
        stage_t[:, 0] += emb_t
        stage_t[idx, pp - 1] += lm_total
        # Engine host time not hidden behind the GPU: per step, and per sequence in the step.
        host = self.host_time_s(dec, pf, pf_seqs, pp, dp)
        if host is not None:
            stage_t = np.where(stage_ids < pp[:, None], stage_t + host[:, None], 0.0)
        p2p = self.p2p_time_s(rows, tp, dp, pp)

        # Memory terms per layer type (weights, KV per sequence per rank).
        w_type = np.stack([self.layer_weights(dims, tp, ep, etp, is_moe)
                           for is_moe, _ in self.layer_types], axis=1)
        held = self.kv_tokens_per_sequence()
        kv_type = np.stack([self.kv_per_seq(dims, tp, window, held, cp)
                            for _, window in self.layer_types], axis=1)
        # A window binds only where the sequences outgrow it: shorter sequences hold every
        # token in such a layer, as full attention does, and grow until the window (a
        # window as long as the model's positions, Phi-3.5-MoE's 131,072, never binds).
        capped = [w is not None and c.window_kv_capped and w <= held
                  for _, w in self.layer_types]
        kv_tok_type = np.stack([np.zeros(n) if cap
                                else self.kv_per_seq(dims, tp, None, 1.0, cp)
                                for cap in capped], axis=1)
        kv_fixed_type = np.where(np.asarray(capped)[None, :], kv_type, 0.0)
        c_att = dims[:, Op.ATTENTION]
        s_all, s_seq = self.resident_sequences(deg["batch"], dp, tp, cp)
        kv_seqs_rank = np.where(c_att == DIM0, s_seq, s_all)
        emb_w = self.first_stage_weight_bytes(c_emb, tp)
        lm_w = lm["w_bytes"]
        if m.tie_word_embeddings:
            lm_w = np.where(pp > 1, lm_w, 0.0)   # shared with the embedding on one stage
        ws = self.workspace_bytes(dec, pf, pf_seqs, tp, etp)
        out = {"stage_t": stage_t, "p2p": p2p, "w_type": w_type, "kv_type_per_seq": kv_type,
               "kv_seqs_rank": kv_seqs_rank, "emb_w": emb_w, "lm_w": lm_w, "ws": ws,
               "kv_tok_type": kv_tok_type, "kv_fixed_type": kv_fixed_type, "lm_t": lm_total}
        if detail:
            self._detail(out, dims, tp, dp, ep, etp, cp, g, rows, dec, pf, busy, ctx, walk,
                         link_tp, link_g, link_etp, emb_t,
                         (t_conv, t_norm, t_lm, t_logits, lm["b_conv"], lm["b_norm"],
                          lm["b_logits"]),
                         lay, req, out_lm, p2p, pp, recs, op_time)
            out["collectives"] = [r for r in recs]
            out["op_time"] = op_time
        return out

    # ------------------------------------------------------------------ breakdown
    def _detail(self, out, dims, tp, dp, ep, etp, cp, g, rows, dec, pf, busy, ctx, walk,
                link_tp, link_g, link_etp, emb_t, lm_parts, lay, req_lm, out_lm, p2p, pp, recs,
                op_time) -> None:
        """Fill the breakdown of row 0: collectives per micro-batch pass and op times."""
        env1 = self.layer_env(tp, ep, dp, dec, pf, cp, busy)
        agg: dict[tuple[str, str, int], list] = {}
        for (ti, lay_in), count in walk.items():
            is_moe, window = self.layer_types[ti]
            rec: list = []
            _, _, ops = self.layer(env1, dims, np.array([lay_in]), is_moe, window, ctx, rec)
            for where, kind, grp, tt, nbytes in rec:
                key = (where, kind, grp)
                agg.setdefault(key, [0.0, 0, 0.0])
                agg[key][0] += tt * count          # totals, averaged below
                agg[key][1] += count
                agg[key][2] += nbytes * count
            for name, arr in ops.items():
                op_time[name] = op_time.get(name, 0.0) + float(arr[0]) * count
        for (where, kind, grp), (tt, k, nb) in agg.items():
            recs.append(CollectiveUse(where, kind, grp, tt / k, k, nb / k))
        t_conv, t_norm, t_lm, t_logits, b_conv, b_norm, b_logits = (float(x[0])
                                                                    for x in lm_parts)
        if t_norm > 0.0:
            recs.append(CollectiveUse("final norm (hidden split)", "all-reduce", int(tp[0]),
                                      t_norm, 1, b_norm))
        lab = transition_label(int(lay[0]), int(req_lm[0]))
        if lab and int(tp[0]) > 1:
            recs.append(CollectiveUse("last layer -> lm_head", lab, int(tp[0]), t_conv, 1,
                                      b_conv))
        lab = transition_label(int(out_lm[0]), R)
        if lab and int(tp[0]) > 1:
            recs.append(CollectiveUse("lm_head -> logits", lab, int(tp[0]), t_logits, 1,
                                      b_logits))
        if pp[0] > 1:
            recs.append(CollectiveUse("stage -> stage", "send-recv", 2, float(p2p[0]),
                                      int(pp[0]) - 1, float(self.p2p_bytes(rows, tp)[0])))
        op_time["embedding"] = float(emb_t[0])
        op_time["lm_head"] = t_lm


def _action_rows(actions: np.ndarray) -> np.ndarray:
    """``actions`` as ``[n, A]`` int64 action vectors (one vector becomes one row).

    Raises:
        ValueError: not ``A`` (``ACTION_LEN``) heads per row.
    """
    a = np.atleast_2d(np.asarray(actions, dtype=np.int64))
    if a.shape[1] != ACTION_LEN:
        raise ValueError(f"actions must be [n, {ACTION_LEN}], got {a.shape}")
    return a


def placement_summary(strategy: Strategy) -> list[tuple[str, str]]:
    """(operator, placement) pairs for reports, e.g. ``("o_proj", "Shard(0)")``."""
    return [(OP_NAMES[i], CHOICE_NAMES[d]) for i, d in enumerate(strategy.dims)]


__all__ = ["BatchEstimate", "CollectiveUse", "CostModel", "Estimate", "MemoryBreakdown",
           "INVALID_BITS_ALL", "LAYOUTS", "NUM_OPS", "check_context", "placement_summary"]
