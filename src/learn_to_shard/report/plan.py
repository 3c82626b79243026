"""The Plan: the chosen strategy with its estimate, the alternatives, the rejected, provenance."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from .. import __version__
from ..cost.model import INVALID_BITS_ALL, CostModel, Estimate
from ..search.base import SearchResult
from ..workload import Workload


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
        search: evaluations, wall time, seed, budget and searcher notes.
        engine: the engine profile the cost model assumed (``None``: the defaults).
        cost_model: every cost-model factor the estimates used (field -> value).
        expert_weight_bits: bits per routed-expert weight when the checkpoint stores its
            experts below the workload dtype (MXFP4: 4.25), else ``None``.
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

    @classmethod
    def from_search(cls, cm: CostModel, result: SearchResult, method: str,
                    engine: str | None = None) -> Plan:
        """Assemble a plan from a search result (re-evaluating the kept strategies in detail);
        ``engine`` names the profile ``cm.config`` was built with."""
        best = cm.evaluate(result.best_action) if result.best_action is not None else None
        alts: list[Estimate] = []
        seen = set() if best is None else {_signature(best)}
        for a, _ in result.top:
            e = cm.evaluate(a)
            if _signature(e) not in seen:   # skip equivalent encodings of the same plan
                seen.add(_signature(e))
                alts.append(e)
        alts = alts[:4]
        # Only rejected strategies that would have been faster than the answer explain it.
        rejected = [e for e in (cm.evaluate(a) for a, _, _ in result.rejected)
                    if best is None or e.tokens_per_s_per_device
                    > best.tokens_per_s_per_device][:3]
        counts = {_bit_name(b): k for b, k in sorted(result.violation_counts.items())}
        reasons: list[str] = []
        if best is None:
            if result.closest is not None:
                near = cm.evaluate(result.closest[0])
                reasons.append(f"closest candidate {near.strategy.short()}:")
                reasons.extend(near.violations)
            reasons.extend(f"{k} evaluations broke '{name}'" for name, k in
                           sorted(counts.items(), key=lambda kv: -kv[1]))
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
                   expert_weight_bits=cm.model.expert_weight_bits)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dictionary (SI units; keys carry units)."""
        wl = self.workload
        return {
            "version": __version__,
            "model": self.model,
            "cluster": self.cluster,
            "workload": {"phase": wl.phase.value, "isl": wl.isl, "osl": wl.osl,
                         "weight_dtype": wl.weight_dtype.value, "kv_dtype": wl.kv_dtype.value,
                         "ttft_slo_s": wl.ttft_slo_s, "tpot_slo_s": wl.tpot_slo_s},
            "method": self.method,
            "method_used": self.method_used,
            "feasible": self.feasible,
            "best": estimate_to_dict(self.best, wl) if self.best else None,
            "alternatives": [estimate_to_dict(e, wl) for e in self.alternatives],
            "rejected": [estimate_to_dict(e, wl) for e in self.rejected],
            "reasons": self.reasons,
            "violation_counts": self.violation_counts,
            "search": self.search,
            "engine": self.engine,
            "expert_weight_bits": self.expert_weight_bits,
            "cost_model": self.cost_model,
        }


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def estimate_to_dict(e: Estimate, wl: Workload) -> dict[str, object]:
    """One estimate as a JSON-ready dictionary."""
    s = e.strategy
    return {
        "strategy": {"tp": s.tp, "ep": s.ep, "etp": s.etp, "pp": s.pp, "dp": s.dp,
                     "batch": s.batch, "devices": s.devices, "placements": s.placements()},
        "feasible": e.feasible,
        "violations": list(e.violations),
        "tokens_per_s_per_device": e.tokens_per_s_per_device,
        "instance_tokens_per_s": e.output_tokens_per_s,
        "tpot_s": _num(e.tpot_s),
        "ttft_s": _num(e.ttft_s),
        "tpot_slo_margin_s": _num(wl.tpot_slo_s - e.tpot_s) if wl.tpot_slo_s and
        not math.isnan(e.tpot_s) else None,
        "ttft_slo_margin_s": _num(wl.ttft_slo_s - e.ttft_s) if wl.ttft_slo_s and
        not math.isnan(e.ttft_s) else None,
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
        "cluster_tokens_per_s": e.output_tokens_per_s * e.instances,
        "collectives": [{"where": c.where, "kind": c.kind, "group": c.group,
                         "time_s": c.time_s, "per_pass": c.per_step} for c in e.collectives],
        "op_time_s": e.op_time_s,
    }
