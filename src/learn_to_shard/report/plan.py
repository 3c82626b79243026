"""The Plan: the chosen strategy with its estimate, the alternatives, the rejected, provenance."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import __version__
from ..cost.aggregate import SLO_REL_TOL
from ..cost.model import INVALID_BITS_ALL, CostModel, Estimate, stage_layer_counts
from ..engines.architectures import architecture_note, unsupported_degrees
from ..hardware.spec import ClusterSpec
from ..parallel.space import BATCH_HEAD, active_heads, canonical
from ..parallel.strategy import Strategy
from ..search.base import SearchResult, is_timing_key, nearness
from ..workload import DType, Phase, Workload


def _bit_name(bit: int) -> str:
    i = bit.bit_length() - 1
    return INVALID_BITS_ALL[i][0] if 0 <= i < len(INVALID_BITS_ALL) else f"bit{bit}"


def _signature(e: Estimate) -> tuple:
    """Strategies that predict the same numbers are shown once."""
    return (round(e.tokens_per_s_per_device, 6), round(e.tpot_s, 9) if e.tpot_s == e.tpot_s
            else None, round(e.memory.total_bytes))


@dataclass
class Plan:
    """What ``l2s plan`` answers.

    Attributes:
        model: model name; cluster: cluster label; workload: the workload.
        method: the searcher asked for; method_used: the one that ran (differs for ``auto``).
        feasible: a strategy met memory and SLOs.
        best: the chosen strategy's estimate (``None`` when infeasible).
        alternatives: the next best feasible strategies.
        rejected: up to three rejected strategies that would have beaten ``best``, with their
            reasons (the best rejected ones when nothing is feasible).
        reasons: when infeasible, why (the closest candidate's violations and rule counts).
        violation_counts: rule name -> evaluations that broke it.
        search: evaluations, wall time, seed, budget and searcher notes (``interrupted``:
            True when Ctrl-C stopped the search and ``best`` is the best found so far).
        engine: the engine profile the cost model assumed (``None``: the defaults).
        cost_model: every cost-model factor the estimates used (field -> value).
        expert_weight_bits: bits per routed-expert weight when the checkpoint stores its
            experts below the workload dtype (MXFP4: 4.25), else ``None``.
        linear_weight_bits: bits per weight, scales included, when the checkpoint stores
            every linear weight below 8 bits (NVFP4: 4.5; GPTQ/AWQ int4), else ``None``: the
            plan's headline says it in place of the workload dtype, which prices only the
            16-bit rest (embedding, norms).
        num_layers: the model's decoder layers (for the per-stage layer lists).
        model_source: the config file read and where it came from (shipped, a local file or
            folder — saying so when it shadows a shipped name of the same spelling — or the
            HuggingFace cache).
        weights: how the weights are stored and priced, and whether the workload's dtype
            differs from the checkpoint's (:func:`weights_note`).
        moe_routing: how tokens are assumed to spread over the experts of a MoE model
            (:func:`moe_routing_note`; ``""`` for a dense model).
        class_limits: the degrees the engine's implementation of the model's class cannot
            run, which the search left out (:func:`class_limits_note`; ``""``: none).
        cluster_spec: the cluster searched (its device, overrides of a cluster file
            included), which the launch export reads; ``None`` for a plan rebuilt from its
            JSON, whose ``cluster`` label is then parsed. Not in :meth:`to_dict`.
    """

    model: str
    cluster: str
    workload: Workload
    method: str
    method_used: str
    feasible: bool
    best: Estimate | None
    alternatives: list[Estimate] = field(default_factory=list)
    rejected: list[Estimate] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    violation_counts: dict[str, int] = field(default_factory=dict)
    search: dict[str, object] = field(default_factory=dict)
    engine: str | None = None
    cost_model: dict[str, object] = field(default_factory=dict)
    expert_weight_bits: float | None = None
    linear_weight_bits: float | None = None
    num_layers: int | None = None
    model_source: str = ""
    weights: str = ""
    moe_routing: str = ""
    class_limits: str = ""
    cluster_spec: ClusterSpec | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_search(cls, cm: CostModel, result: SearchResult, method: str,
                    engine: str | None = None) -> Plan:
        """Assemble a plan from a search result (re-evaluating the kept strategies in detail);
        ``engine`` names the profile ``cm.config`` was built with."""
        # Inactive heads as every printed strategy has them (absent operators ∅), whichever
        # encoding the searcher kept.
        active = active_heads(cm.space)
        best = cm.evaluate(canonical(result.best_action, active)) \
            if result.best_action is not None else None
        searched = best
        if best is not None:
            best = smallest_equal_batch(cm, best)
        alts: list[Estimate] = []
        # the searcher's own answer at its larger batch is the same plan, not a runner-up
        seen = set() if best is None or searched is None else \
            {_signature(best), _signature(searched)}
        for a, _ in result.top:
            if len(alts) == 4:
                break
            found = cm.evaluate(canonical(a, active))
            e = smallest_equal_batch(cm, found) if found.feasible else found
            # skip equivalent encodings of the same plan, and a batch beyond its plateau
            if _signature(e) not in seen and _signature(found) not in seen:
                seen.update((_signature(e), _signature(found)))
                alts.append(e)
        # Only rejected strategies that would have been faster than the answer explain it.
        rejected = [e for e in (cm.evaluate(canonical(a, active)) for a, _, _ in result.rejected)
                    if best is None or e.tokens_per_s_per_device
                    > best.tokens_per_s_per_device][:3]
        counts = {_bit_name(b): k for b, k in sorted(result.violation_counts.items())}
        reasons: list[str] = []
        if best is None:
            if result.closest is not None:
                # Inactive heads as every other printed strategy has them (absent operators ∅).
                kept = cm.evaluate(canonical(result.closest[0], active))
                near = nearest_batch(cm, nearest_layout(cm, kept)) if kept.violations \
                    else kept
                if near.violations:
                    reasons.append(f"closest candidate {near.strategy.short()}:")
                    reasons.extend(near.violations)
                    relax = slo_relaxation(near, cm.workload)
                    if relax:
                        reasons.append(f"{relax} {RELAXATION_TAIL}" + queue_clause(near))
                elif kept.violations:
                    # Its nearest layout or batch meets every limit (a window of batches
                    # between the searcher's grid points, a layout it did not reach): the
                    # search stepped over a plan.
                    how = "; ".join(what for what, moved in (
                        (f"a per-operator layout {method} did not reach",
                         near.strategy.dims != kept.strategy.dims),
                        (f"a batch between those {method} searched",
                         near.strategy.batch != kept.strategy.batch)) if moved)
                    reasons.append(f"closest candidate {near.strategy.short()} meets every "
                                   f"limit: {how}; plan with --method exact, which searches "
                                   f"every layout and batch, for the best such plan")
                else:
                    # Broken only at the encoding the searcher kept (a rule of a head that
                    # the canonical form sets aside): the rule counts below say which.
                    reasons.append(f"closest candidate {near.strategy.short()} (no rule "
                                   f"broken once its absent operators are ∅; the counts "
                                   f"below are the search's)")
            reasons.extend(f"{k} evaluations broke '{name}'" for name, k in
                           sorted(counts.items(), key=lambda kv: -kv[1]))
            refused = cm.space.engine_refused_degrees()
            if refused and cm.space.engine is not None:
                reasons.append(f"{refused} degree combinations were left out because "
                               f"{cm.space.engine.title} cannot launch them ('engine_degrees':"
                               f" its expert/attention-DP rules, or multi-node layouts this "
                               f"cluster's nodes do not hold); without --engine they are "
                               f"searched")
        return cls(model=cm.model.name, cluster=cm.cluster.name, workload=cm.workload,
                   method=method, method_used=result.method, feasible=best is not None,
                   best=best, alternatives=alts, rejected=rejected, reasons=reasons,
                   violation_counts=counts,
                   search={"evaluations": result.evaluations, "wall_s": result.wall_s,
                           "seed": result.seed, "budget": result.budget,
                           "space_size": cm.space.size,
                           **{k: v for k, v in result.notes.items()
                              if isinstance(v, (int, float, str, bool))}},
                   engine=engine, cost_model=dataclasses.asdict(cm.config),
                   expert_weight_bits=cm.model.expert_weight_bits,
                   linear_weight_bits=_linear_weight_bits(cm),
                   num_layers=cm.model.num_layers,
                   model_source=model_source(cm), weights=weights_note(cm, engine),
                   moe_routing=moe_routing_note(cm),
                   class_limits=class_limits_note(cm, engine), cluster_spec=cm.cluster)

    @property
    def interrupted(self) -> bool:
        """True if Ctrl-C stopped the search: ``best`` is the best found before it."""
        return bool(self.search.get("interrupted", False))

    @property
    def notes(self) -> list[str]:
        """Sentences about the best plan that the terminal prints under it (``note: ...``),
        the report carries and ``--json`` records under ``"notes"``: that the MoE all-to-all
        kernels asked for (``--moe-a2a``) go unused because the best plan has EP 1 (no
        tokens cross ranks; every plan with expert parallelism priced the exchange and
        ranked lower); the degrees the engine cannot run for the model's class
        (:attr:`class_limits`); first, that the plan was chosen under the load given
        (:meth:`chosen_under_load_note`). Empty where there is nothing to say (also where the
        cluster has one device, so no plan had expert parallelism)."""
        out = [note for note in (self.chosen_under_load_note(), self._admission_note(),
                                 self.class_limits) if note]
        a2a = (self.cost_model or {}).get("moe_a2a_kernel")
        e = self.best
        if not (a2a and self.moe_routing and e is not None and e.strategy.ep == 1
                and e.strategy.devices * max(e.instances, 1) + e.idle_devices > 1):
            return out
        return out + [f"MoE all-to-all {str(a2a).replace('_', ' ')} was asked for, but the "
                      f"best plan has EP 1, which sends no tokens between ranks: its experts "
                      f"are tensor-parallel, and every plan with expert parallelism priced "
                      f"that exchange and ranked lower"]

    @property
    def replaced_under_load(self) -> str | None:
        """The searched best's strategy where ``api.prefer_under_load`` chose another plan
        under the load (``search["chosen_under_load"]["over"]``), else ``None``."""
        chosen = self.search.get("chosen_under_load")
        return str(chosen["over"]) if isinstance(chosen, dict) else None

    def chosen_under_load_note(self) -> str:
        """The swap ``api.prefer_under_load`` made (``search["chosen_under_load"]``): which
        strategy the plan is, the searched best it replaced, and the SLO that one misses under
        the load or both strategies' simulated tokens/s per device; ``""`` where none was
        made."""
        chosen = self.search.get("chosen_under_load")
        if not isinstance(chosen, dict):
            return ""
        if chosen.get("missed"):
            return (f"chosen under this load: {chosen['strategy']} meets the SLOs in the "
                    f"simulation (mean, queue bounded), where the search's best "
                    f"{chosen['over']} misses them ({'; '.join(chosen['missed'])}); the search "
                    f"ranks strategies on steady-state means, where both meet them")
        tps = chosen.get("tokens_per_s_per_device") or {}
        slos = self.workload.ttft_slo_s is not None or self.workload.tpot_slo_s is not None
        return (f"chosen under this load: {chosen['strategy']} serves "
                f"{float(tps.get('chosen', 0.0)):,.1f} tokens/s per device in the simulation, "
                f"the search's best {chosen['over']} {float(tps.get('over', 0.0)):,.1f}"
                f"{' (both within the SLOs)' if slos else ''}; the search ranks strategies on "
                f"the steady state, the simulation runs the load given")

    def _admission_note(self) -> str | None:
        """That the engine's default cap on running requests (vLLM ``--max-num-seqs``, SGLang
        ``--max-running-requests``, TensorRT-LLM ``--max_batch_size``;
        :func:`~learn_to_shard.engines.default_max_num_seqs`) is below the best plan's
        batch per attention-DP rank (TensorRT-LLM: per pipeline micro-batch), so a server
        launched without it runs fewer at once; ``None`` where it is not, or without an
        engine, a best plan or the cluster."""
        from ..engines import ENGINES, default_max_num_seqs

        e, engine = self.best, self.engine
        if e is None or engine not in ENGINES or self.cluster_spec is None \
                or self.workload.phase is Phase.PREFILL:
            return None
        s, dev, wl = e.strategy, self.cluster_spec.device, self.workload
        ranks = max(1, s.dp)
        per_rank = -(-s.batch // ranks)
        want = -(-per_rank // max(1, s.pp)) if engine == "trtllm" else per_rank
        context = wl.isl + wl.osl if wl.phase is Phase.SERVE else wl.isl
        cap = default_max_num_seqs(engine, dev.names, dev.hbm_bytes,
                                   e.kv_capacity_tokens // ranks, context)
        if want <= cap:
            return None
        flag = {"vllm": "--max-num-seqs", "sglang": "--max-running-requests",
                "trtllm": "--max_batch_size"}[engine]
        per = "per pipeline micro-batch" if engine == "trtllm" else "per attention-DP rank" \
            if ranks > 1 else "per server"
        return (f"{engine}'s default {flag} on {dev.name} is {cap} {per}, below the plan's "
                f"{want}: launch with {flag} {want} or more (--export {engine} sets it), or "
                f"the server runs at most {cap} at once")

    def to_dict(self, timing: bool = True) -> dict[str, object]:
        """JSON-ready dictionary (SI units; keys carry units).

        Every wall-clock value (``search.wall_s`` and the searcher's ``*_wall_s`` notes, see
        :func:`~learn_to_shard.search.base.is_timing_key`) is under ``"timing"`` alone, the
        last key; ``timing=False`` leaves it out, and what remains is the same, byte for byte,
        for the same inputs and seed on the same machine.
        """
        wl = self.workload
        out: dict[str, object] = {
            "version": __version__,
            "model": self.model,
            "cluster": self.cluster,
            "workload": {"phase": wl.phase.value, "isl": wl.isl, "osl": wl.osl,
                         "weight_dtype": wl.weight_dtype.value, "kv_dtype": wl.kv_dtype.value,
                         "ttft_slo_s": wl.ttft_slo_s, "tpot_slo_s": wl.tpot_slo_s}
            | ({"images_per_request": wl.images_per_request,
                "tokens_per_image": wl.tokens_per_image} if wl.images_per_request else {}),
            "method": self.method,
            "method_used": self.method_used,
            "feasible": self.feasible,
            "best": estimate_to_dict(self.best, wl, self.num_layers) if self.best else None,
            "alternatives": [estimate_to_dict(e, wl) for e in self.alternatives],
            "rejected": [estimate_to_dict(e, wl) for e in self.rejected],
            "reasons": self.reasons,
            "notes": self.notes,
            "expected_error": expected_error(),
            "violation_counts": self.violation_counts,
            "search": {k: v for k, v in self.search.items() if not is_timing_key(k)},
            "engine": self.engine,
            "expert_weight_bits": self.expert_weight_bits,
            "linear_weight_bits": self.linear_weight_bits,
            "model_source": self.model_source,
            "weights": self.weights,
            "moe_routing": self.moe_routing,
            "cost_model": self.cost_model,
        }
        if timing:
            out["timing"] = {k: v for k, v in self.search.items() if is_timing_key(k)}
        return out


def moe_routing_note(cm: CostModel) -> str:
    """How the estimates spread a MoE model's tokens over its experts (what ``l2s plan
    --moe-routing`` sets, ``CostModelConfig.moe_routing_alpha``): ``"power-law expert load,
    exponent 1.2"`` or ``"uniform random routing"``; ``""`` for a dense model."""
    if cm.model.moe is None:
        return ""
    alpha = cm.config.moe_routing_alpha
    if alpha is None:
        return "uniform random routing"
    return f"power-law expert load, exponent {alpha:g}"


def model_source(cm: CostModel) -> str:
    """``"<file> (<kind>)"``: which config was read; a local file named like a shipped model
    says that it shadows it."""
    from ..model.hf_config import shipped_model_names

    m = cm.model
    if not m.source:
        return ""
    kind = {"shipped": "shipped config", "hf-cache": "HuggingFace cache"}.get(
        m.source_kind, "local file")
    if m.source_kind == "file" and m.name in shipped_model_names():
        kind += f"; shadows the shipped '{m.name}'"
    return f"{m.source} ({kind})"


#: Relative difference in tokens/s per device below which :func:`smallest_equal_batch`
#: counts two batches as a tie (float rounding of the same throughput; 1e-9 is far below any
#: difference the cost model resolves).
EQUAL_BATCH_REL_TOL = 1e-9


def weights_label(plan: Plan) -> str:
    """The weights of a plan's headline: ``4.5-bit`` where every linear weight is stored
    below 8 bits (:attr:`Plan.linear_weight_bits`), else the workload dtype (``bf16``)."""
    return f"{plan.linear_weight_bits:g}-bit" if plan.linear_weight_bits \
        else plan.workload.weight_dtype.value


def _linear_weight_bits(cm: CostModel) -> float | None:
    """:attr:`Plan.linear_weight_bits` of ``cm``'s checkpoint."""
    q = cm.model.quant
    return q.weight_bits if q is not None and q.packed and not q.experts_only else None


#: Batches :func:`smallest_equal_batch` prices together per round (one ``evaluate_many``
#: call: a round of 32 costs little more than one probe, so three rounds replace a dozen
#: bisection steps on a batch of thousands).
EQUAL_BATCH_PROBES = 32


def first_true(lo: int, hi: int, ok: Callable[[np.ndarray], np.ndarray],
               probes: int = EQUAL_BATCH_PROBES) -> int:
    """The smallest ``k`` in ``[lo, hi]`` with ``ok(k)``, for a predicate true from some
    ``k`` up and true at ``hi`` (taken, never probed): bisection's answer, by rounds of up to
    ``probes`` values priced in one call of ``ok`` (``[m]`` int → ``[m]`` bool), each round
    narrowing the interval to the gap before its first true probe."""
    while lo < hi:
        ks = np.unique(np.linspace(lo, hi - 1, min(probes, hi - lo)).round().astype(np.int64))
        true = np.flatnonzero(ok(ks))
        if len(true) == 0:
            lo = int(ks[-1]) + 1
            continue
        j = int(true[0])
        hi = int(ks[j])
        if j > 0:
            lo = int(ks[j - 1]) + 1
        elif ks[0] == lo:
            break
    return hi


def _at_batches(cm: CostModel, s: Strategy, batches: list[int]
                ) -> tuple[CostModel, np.ndarray] | None:
    """``cm`` with ``batches`` among its batch candidates, and ``s``'s action vector at each
    of them (``[len(batches), ACTION_LEN]``, for one ``evaluate_many``); ``None`` where ``s``
    is not in the space."""
    trial = copy.copy(cm)
    trial.space = cm.space.with_batches(batches)
    try:
        base = trial.space.encode(s)
    except ValueError:
        return None
    rows = np.repeat(base[None, :], len(batches), axis=0)
    rows[:, BATCH_HEAD] = np.searchsorted(np.asarray(trial.space.batch_values), batches)
    return trial, rows


def smallest_equal_batch(cm: CostModel, best: Estimate) -> Estimate:
    """``best`` at the smallest batch (a multiple of its DP degree) that is feasible with the
    same tokens/s per device, found by rounds of probes over the batch: above the batch a step's
    token budget keeps progressing (:meth:`~learn_to_shard.cost.model.CostModel.phase_rows`)
    a larger batch only holds more KV cache for the same throughput and step time, so the
    searchers' ties (within :data:`EQUAL_BATCH_REL_TOL`) go to the batch an engine should be
    launched with. ``best`` itself where no smaller batch ties.

    Args:
        cm: the problem ``best`` was evaluated on.
        best: a feasible estimate of ``cm``.
    """
    s = best.strategy
    target = best.tokens_per_s_per_device
    step = max(1, s.dp)
    top = s.batch // step                           # batches step·k, k in [1, top]
    if top <= 1:
        return best
    # Each probe priced without the breakdown (evaluate_many's numbers are evaluate's), the
    # breakdown only for the batch found.
    at = _at_batches(cm, s, list(range(step, top * step, step)))
    if at is None:
        return best
    trial, rows = at

    def ok(ks: np.ndarray) -> np.ndarray:
        e = trial.evaluate_many(rows[ks - 1])
        # equal to rounding: the plateau's throughput differs by an ulp from batch to batch
        return e.feasible & (e.tokens_per_s_per_device >= target * (1.0 - EQUAL_BATCH_REL_TOL))

    found_k = first_true(1, top, ok)
    if found_k == top:
        return best
    return trial.evaluate(dataclasses.replace(s, batch=int(found_k * step)))


#: Per-operator layouts :func:`nearest_layout` tries at once: every combination of the
#: active operators' choices (of the engine's block layouts, under an engine) where there
#: are at most this many, else one operator at a time.
NEAREST_LAYOUTS_EXHAUSTIVE = 6561


def _nearness(cm: CostModel, acts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per action row, ``(broken limits, overshoot)``
    (:func:`~learn_to_shard.search.base.nearness`, as the searchers rank rejected
    strategies)."""
    return nearness(cm, cm.evaluate_many(acts), np.arange(len(acts)))


def nearest_layout(cm: CostModel, e: Estimate) -> Estimate:
    """``e``'s degrees and batch with the per-operator layout that comes nearest to
    feasible (fewest broken limits, then least overshoot, :func:`_nearness`): every
    combination of the active operators' choices, or of the engine's block layouts, where
    there are at most :data:`NEAREST_LAYOUTS_EXHAUSTIVE`, else two rounds of one operator at
    a time; ``e`` itself where none comes nearer. An infeasible answer's closest candidate
    keeps the searcher's layout (smallest memory, or Megatron's), which for a latency SLO can
    be far from the fastest at its degrees: Llama-3.1-8B prefilling 8192 tokens on 8 H100s
    at TP8 takes 47 ms in Megatron's layout and 28 ms with the sequence split."""
    import itertools

    from ..engines import BLOCKS
    from ..parallel.ops import OP_NAMES
    from ..parallel.space import NUM_COARSE

    try:
        base = cm.space.encode(e.strategy)
    except ValueError:
        return e
    active = active_heads(cm.space)[NUM_COARSE:]
    eng = cm.space.engine
    if eng is not None:             # the engine's layouts, block by block
        groups = [([NUM_COARSE + OP_NAMES.index(o) for o in ops], eng.allowed(block))
                  for block, ops in BLOCKS.items() if cm.space.block_present(block)]
    else:
        heads = [NUM_COARSE + int(i) for i in np.flatnonzero(active)]
        groups = [([h], tuple((c,) for c in range(int(cm.space.nvec[h])))) for h in heads]
    def nearest(start: np.ndarray, picks: list[list[tuple[list[int], tuple[int, ...]]]]
                ) -> np.ndarray:
        """The row nearest to feasible of ``start`` with each pick's columns set."""
        acts = np.repeat(start[None, :], len(picks), axis=0)
        for r, pick in enumerate(picks):
            for cols, choice in pick:
                acts[r, cols] = choice
        nbits, far = _nearness(cm, acts)
        return acts[np.lexsort((far, nbits))[0]]

    best = base.copy()
    if math.prod(len(opts) for _, opts in groups) <= NEAREST_LAYOUTS_EXHAUSTIVE:
        cols_of = [cols for cols, _ in groups]
        best = nearest(base, [list(zip(cols_of, pick, strict=True)) for pick in
                              itertools.product(*(opts for _, opts in groups))])
    else:
        for _ in range(2):
            for cols, opts in groups:
                best = nearest(best, [[(cols, choice)] for choice in opts])
    nb, fb = _nearness(cm, np.stack([base, best]))
    if not np.isfinite(fb[1]) or (nb[1], fb[1]) >= (nb[0], fb[0]):
        return e
    return cm.evaluate(cm.space.decode(best))


#: Batches :func:`nearest_batch` tries one by one (every multiple of the plan's DP degree up
#: to this; the space's own grid above it).
NEAREST_BATCH_DENSE_UPTO = 2048


def nearest_batch(cm: CostModel, e: Estimate) -> Estimate:
    """``e``'s strategy at the batch that comes nearest to feasible, ranked as the searchers
    rank rejected strategies (:class:`~learn_to_shard.search.base.BudgetedEvaluator`): the
    fewest broken limits first (violation bits), then the least overshoot (largest of peak
    memory / usable memory and each SLO's latency / SLO,
    :func:`~learn_to_shard.search.base.overshoot`), over every multiple of its DP degree up to
    :data:`NEAREST_BATCH_DENSE_UPTO` and the space's batch grid above it, breaking no
    structural rule; ``e`` itself where none comes nearer or its strategy is not in the
    space. An infeasible answer's closest candidate: a searcher's is at a batch of its grid,
    and under a closed loop the smallest batches queue the longest, so its TTFT (and the SLO
    hint from it) can be several times that of a batch between. The batch found can be
    feasible where a budgeted searcher's grid stepped over a window of batches that meet both
    SLOs (the caller says so)."""
    s = e.strategy
    step = max(1, s.dp)
    top = max(cm.space.batch_values)
    batches = sorted({b for b in range(step, min(top, NEAREST_BATCH_DENSE_UPTO) + 1, step)}
                     | {b for b in cm.space.batch_values if b % step == 0} | {s.batch})
    at = _at_batches(cm, s, batches)
    if at is None:
        return e
    trial, rows = at
    nbits, far = _nearness(trial, rows)
    order = np.lexsort((far, nbits))           # fewest broken limits, then least overshoot
    k, here = int(order[0]), batches.index(s.batch)
    if not np.isfinite(far[k]) or (nbits[k], far[k]) >= (nbits[here], far[here]):
        return e
    return trial.evaluate(dataclasses.replace(s, batch=int(batches[k])))


#: How an infeasible answer's SLO hint ends (``"a TPOT SLO of 44.4 ms" + this``); ``l2s size``
#: finds it in a row's reasons to add what a fleet's queue adds.
RELAXATION_TAIL = "would make the closest candidate feasible"


def slo_relaxation(e: Estimate, wl: Workload) -> str:
    """The SLOs that would make ``e`` feasible where only SLOs break it (``"a TPOT SLO of
    44.4 ms"``, its latency rounded up to 0.1 ms; two joined by `` and ``), else ``""``;
    worded without a flag, so it reads the same in ``l2s plan``, ``l2s size`` and a sweep
    row."""
    if not e.violations or not all(v.startswith(("tpot_slo", "ttft_slo"))
                                   for v in e.violations):
        return ""
    flags = []
    for name, got, slo in (("tpot", e.tpot_s, wl.tpot_slo_s), ("ttft", e.ttft_s, wl.ttft_slo_s)):
        if slo and got == got and got > slo * (1.0 + SLO_REL_TOL):
            up = f"{math.ceil(got * 1e4) / 10:.1f}".removesuffix(".0")
            flags.append(f"a {name.upper()} SLO of {up} ms")
    return " and ".join(flags)


def queue_clause(e: Estimate) -> str:
    """``"; 338,073 ms of its TTFT is closed-loop clients waiting for a batch slot: more
    devices or fewer clients shorten it"`` where that wait is most of ``e``'s TTFT and a TTFT
    SLO breaks it (a looser SLO is then not the useful change), else ``""``."""
    if not any(v.startswith("ttft_slo") for v in e.violations) or not e.ttft_s > 0 \
            or not e.ttft_queue_s > 0.5 * e.ttft_s:
        return ""
    return (f"; {1e3 * e.ttft_queue_s:,.0f} ms of its TTFT is closed-loop clients waiting for "
            f"a batch slot: more devices or fewer clients shorten it")


def class_limits_note(cm: CostModel, engine: str | None) -> str:
    """A sentence naming the degrees ``engine``'s implementation of the model's class cannot
    run and the search therefore left out (pipeline parallelism; attention-DP of a MoE
    server), from the pinned snapshot
    (:func:`~learn_to_shard.engines.architectures.unsupported_degrees`; none on one device),
    and that the engine holds the model's sliding-window layers at full length where it does
    (``CostModelConfig.window_kv_capped`` off, :func:`~learn_to_shard.engines.caps_window_kv`);
    ``""`` where there is neither, or without an engine."""
    from ..engines import ENGINES

    arch = cm.model.config_architecture
    cannot = unsupported_degrees(engine, arch) if engine in ENGINES else ()
    if not cm.model.is_moe:
        cannot = tuple(c for c in cannot if c != "attention_dp")
    if not (cm.model.is_moe and cm.model.has_dense_ffn):
        cannot = tuple(c for c in cannot if c != "attention_dp_dense")
    if cm.cluster.num_devices < 2:
        cannot = ()
    # windows that can bind (shorter than the model's positions; Phi-3.5-MoE's never does)
    longest = cm.model.max_position_embeddings or 0
    windows = "" if engine not in ENGINES or cm.config.window_kv_capped or not any(
        w is not None and not (longest and w >= longest) for _, w in cm.layer_types) else (
        f"{ENGINES[engine].title} {ENGINES[engine].version} holds "
        f"{arch or cm.model.name}'s sliding-window layers at full length (the window limits "
        f"their attention, not their KV; engines.SGLANG_WINDOW_KV_CLASSES), and the plan "
        f"prices their KV so")
    if not cannot or arch is None or engine is None:
        return windows
    eng = ENGINES[engine]
    what = {"pp": "pipeline parallelism (its forward takes no pp_proxy_tensors, so a "
                  "--pp-size above 1 stops at start-up)",
            "attention_dp": "attention-DP (its model file does not both split attention "
                            "by the attention-TP group --attn-dp-size leaves and gather the "
                            "DP ranks' rows for the MoE: Mixtral's attention splits heads "
                            "over the whole --tp-size group, PhiMoE declares no layer "
                            "stages)",
            "attention_dp_dense": "attention-DP as l2s prices it (its dense MLP layers "
                                  "never run replicated: under --attn-dp-size they shard "
                                  "over the whole --tp-size group with the DP ranks' rows "
                                  "gathered, a layout l2s does not price)"}
    return (f"{eng.title} {eng.version}'s {arch} runs without "
            + " or ".join(what[c] for c in cannot)
            + ": the search left " + (" and ".join(
                {"pp": "PP > 1", "attention_dp": "attention-DP > 1",
                 "attention_dp_dense": "attention-DP > 1"}[c] for c in cannot))
            + " out" + (f"; {windows}" if windows else ""))


def weights_note(cm: CostModel, engine: str | None = None) -> str:
    """One phrase on the weight format: the checkpoint's quantisation (bits per weight with
    scales, FP4 math or dequantised), a warning when ``--dtype`` differs from the checkpoint's
    dtype (FP8 checkpoint planned at bf16, or bf16 quantised online to FP8), for a
    multimodal wrapper that its vision tower is in memory but its compute is not priced, and,
    planned for ``engine``, what that engine does with the model's class where it has no
    implementation of its own (:func:`~learn_to_shard.engines.architectures.
    architecture_note`)."""
    note = _weights_format(cm)
    arch = architecture_note(engine, cm.model.config_architecture) if engine else None
    if arch is not None:
        note += f"; {arch}"
    q = cm.model.quant
    if q is not None and q.kept_16bit:
        note += f"; the checkpoint keeps {', '.join(q.kept_16bit)} unquantised"
    if q is not None and q.kv_cache_fp8 and cm.workload.kv_dtype is not DType.FP8:
        note += "; it ships FP8 KV-cache scales (--kv-dtype fp8 plans the KV cache in FP8)"
    v = cm.model.vision_params
    if v:
        note += (f"; vision tower ({cm.model.wrapper}, ~{v / 1e9:.2f}B params) in memory "
                 f"(16-bit, split by TP on the first stage)")
    wl = cm.workload
    if wl.images_per_request:
        rule = cm.model.image_tokens
        how = rule.rule if rule is not None and rule.fixed is not None else "--image-tokens"
        note += (f"; prompt = {wl.isl - wl.image_prompt_tokens} text + "
                 f"{wl.images_per_request} image(s) x {wl.tokens_per_image} tokens ({how}) = "
                 f"{wl.isl} tokens prefilled; the vision encoder's compute is not priced")
    return note


def _weights_format(cm: CostModel) -> str:
    m, wl = cm.model, cm.workload
    q = m.quant
    dev = cm.cluster.device
    if q is not None and q.packed:
        scope = "routed experts" if q.experts_only else "linear weights"
        math = "FP4 tensor-core math" if q.fp4 and dev.peak_fp4_flops_per_s else \
            "dequantised to 16-bit math" + (" (no FP4 math on this device)" if q.fp4 else "")
        eff = cm.expert_dequant_efficiency
        if eff is not None:
            math += (f"; routed-expert GEMMs at {eff:g} of the 16-bit rate (this device's "
                     f"measured W4A16 MoE kernels)")
        return (f"{scope} {q.method} at {q.weight_bits:.4g} bits/weight incl. scales "
                f"(checkpoint), {math}")
    ckpt = m.checkpoint_dtype
    if wl.weight_dtype.value == ckpt:
        wide = m.native_dtype in ("bfloat16", "float16", "float32", "float64", "half", "float")
        what = f"{q.method} checkpoint" if q is not None else \
            f"{m.native_dtype} checkpoint" if wide else \
            f"torch_dtype {m.native_dtype} without a quantization config: priced as a 16-bit " \
            f"checkpoint" if m.native_dtype else \
            "the config states no torch_dtype (or auto): a 16-bit checkpoint assumed"
        return f"{ckpt} ({what})"
    if ckpt == "fp8":
        stored = q.method if q is not None else "fp8"
        return (f"{wl.weight_dtype.value} by --dtype: the checkpoint stores {stored} weights "
                f"(default would be fp8)")
    return f"{wl.weight_dtype.value} by --dtype: online quantisation of the {ckpt} checkpoint"


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _margin(slo_s: float | None, got_s: float) -> float | None:
    """``slo − latency`` in seconds, ``None`` without an SLO or a latency; a latency within
    :data:`~learn_to_shard.cost.aggregate.SLO_REL_TOL` above the SLO (which meets it) has
    margin 0, not a negative rounding residue."""
    if not slo_s or math.isnan(got_s):
        return None
    m = slo_s - got_s
    return 0.0 if m < 0 and got_s <= slo_s * (1.0 + SLO_REL_TOL) else m


#: A plan whose worst stage leaves less than this fraction of usable memory free is flagged
#: "marginal": the engines' own allocations (CUDA graphs, NCCL buffers, fragmentation) vary by
#: a few percent between versions and settings, so such a plan may not start.
MARGINAL_HEADROOM_FRACTION = 0.03


def expected_error() -> dict[str, object]:
    """The shipped cost model's held-out median |error| on published measurements
    (:func:`learn_to_shard.fidelity.accuracy.shipped`: ``steady_state``, ``under_load`` and
    ``under_load_by_engine``, fractions with their row counts), for the plan's JSON."""
    from ..fidelity.accuracy import shipped

    acc = shipped()
    return {"steady_state": acc["steady_state"], "under_load": acc["under_load"],
            "under_load_by_engine": acc.get("under_load_by_engine", {})}


def join_reasons(reasons: list[str] | tuple[str, ...]) -> str:
    """:attr:`Plan.reasons` as one line: ``; `` between reasons, a space after a heading that
    ends in ``:`` (``closest candidate …:``)."""
    out = ""
    for r in reasons:
        out += r if not out else (" " if out.endswith(":") else "; ") + r
    return out


def memory_headroom(e: Estimate) -> tuple[float, bool]:
    """Free bytes per device on the worst stage (usable − weights − KV − workspace) and whether
    that is below :data:`MARGINAL_HEADROOM_FRACTION` of the usable memory."""
    free = e.memory.usable_bytes - e.memory.total_bytes
    return free, free < MARGINAL_HEADROOM_FRACTION * e.memory.usable_bytes


def stage_rows(e: Estimate, num_layers: int) -> list[dict[str, Any]]:
    """Per pipeline stage: its layers ``[first, last]`` (0-based, inclusive), per-device
    memory (bytes) and time of one micro-batch (s)."""
    out: list[dict[str, Any]] = []
    start = 0
    for i, n in enumerate(stage_layer_counts(num_layers, e.strategy.pp)):
        out.append({"layers": [start, start + n - 1] if n else [],
                    "memory_bytes": e.stage_memory_bytes[i] if i < len(e.stage_memory_bytes)
                    else None,
                    "time_s": e.stage_time_s[i] if i < len(e.stage_time_s) else None})
        start += n
    return out


def one_output_token(wl: Workload) -> bool:
    """A serve workload of one output token per request (``osl = 1``): its token comes from
    the prefill, so it has no TPOT (the cost model's serve step time is then the mean step,
    not a time per output token)."""
    return wl.phase is Phase.SERVE and wl.osl <= 1


def estimate_to_dict(e: Estimate, wl: Workload, num_layers: int | None = None
                     ) -> dict[str, object]:
    """One estimate as a JSON-ready dictionary (``num_layers``: the model's, for the per-stage
    layer lists)."""
    s = e.strategy
    headroom, marginal = memory_headroom(e)
    extra: dict[str, object] = {
        # null where unbounded in tokens (every layer a fixed window per sequence)
        "kv_capacity_tokens": None if e.kv_capacity_unbounded else e.kv_capacity_tokens,
        "kv_capacity_unbounded": e.kv_capacity_unbounded,
        "max_context_tokens": e.max_context_tokens,
        "tokens_per_s_per_user": 1.0 / e.tpot_s
        if e.tpot_s > 0 and math.isfinite(e.tpot_s) and not one_output_token(wl) else None,
        "memory_headroom_bytes": headroom,
        "memory_marginal": marginal,
    }
    if num_layers is not None:
        extra["stages"] = stage_rows(e, num_layers)
    return {**_estimate_core(e, wl, s), **extra}


def _estimate_core(e: Estimate, wl: Workload, s: Strategy) -> dict[str, object]:
    return {
        "strategy": {"tp": s.tp, "ep": s.ep, "etp": s.etp, "pp": s.pp, "dp": s.dp,
                     "cp": s.cp, "batch": s.batch, "devices": s.devices,
                     "placements": s.placements()},
        "feasible": e.feasible,
        "violations": list(e.violations),
        "tokens_per_s_per_device": e.tokens_per_s_per_device,
        "instance_tokens_per_s": e.instance_tokens_per_s,
        "tpot_s": None if one_output_token(wl) else _num(e.tpot_s),
        "ttft_s": _num(e.ttft_s),
        "ttft_queue_s": _num(e.ttft_queue_s),
        "tpot_slo_margin_s": _margin(wl.tpot_slo_s, e.tpot_s),
        "ttft_slo_margin_s": _margin(wl.ttft_slo_s, e.ttft_s),
        "stage_time_s": list(e.stage_time_s),
        "micro_batches": e.micro_batches,
        "memory_per_device": {"stage": e.memory.stage, "weight_bytes": e.memory.weight_bytes,
                              "kv_cache_bytes": e.memory.kv_cache_bytes,
                              "workspace_bytes": e.memory.workspace_bytes,
                              "usable_bytes": e.memory.usable_bytes},
        "stage_memory_bytes": list(e.stage_memory_bytes),
        "max_batch": e.max_batch,
        "instances": e.instances,
        "idle_devices": e.idle_devices,
        "cluster_tokens_per_s": e.cluster_tokens_per_s,
        "collectives": [{"where": c.where, "kind": c.kind, "group": c.group,
                         "time_s": c.time_s, "per_pass": c.per_step} for c in e.collectives],
        "op_time_s": e.op_time_s,
    }
