"""The throughput/interactivity frontier (``l2s pareto``): output tokens/s per device against
tokens/s per user (``1 / TPOT``) over every degree combination and batch.

Candidates are every (tp, ep, pp, dp, batch) of the strategy space with each per-operator
layout an engine implements (Megatron's, plus the profile's variants when the space has an
engine; :mod:`learn_to_shard.engines`), evaluated by the cost model with the TPOT limit lifted
(the TPOT SLO is drawn as a line instead; memory and the TTFT SLO still apply). A point is on
the frontier when no other point has both more tokens/s per device and more tokens/s per user
(aiconfigurator's view of the same trade-off: tokens/s/gpu against tokens/s/user).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..cost.model import CostModel, Estimate
from ..engines import BLOCKS, MEGATRON
from ..parallel.ops import NUM_OPS, OP_NAMES
from ..parallel.space import ACTION_LEN, NUM_COARSE, active_heads, canonical
from .plan import Plan


@dataclass
class ParetoResult:
    """The frontier of one problem.

    Attributes:
        points_user_tps: ``[n]`` tokens/s per user (``1/TPOT``) of every feasible candidate.
        points_device_tps: ``[n]`` output tokens/s per device of the same.
        frontier: the frontier's estimates, by increasing tokens/s per user.
        tpot_slo_s: the TPOT limit drawn as a line (``None``: none given).
        candidates: candidates evaluated (feasible or not).
        layouts: per-operator layouts tried per degree combination.
    """

    points_user_tps: np.ndarray
    points_device_tps: np.ndarray
    frontier: list[Estimate]
    tpot_slo_s: float | None
    candidates: int
    layouts: int


def _layouts(cm: CostModel) -> np.ndarray:
    """``[L, 12]``: Megatron's per-operator choices, times the engine's variants per block."""
    eng = cm.space.engine
    per_block = [eng.allowed(b) if eng is not None else (MEGATRON[b],) for b in BLOCKS]
    rows = []
    for combo in itertools.product(*per_block):
        dims = [2] * NUM_OPS
        for (_, ops), choice in zip(BLOCKS.items(), combo, strict=True):
            for o, c in zip(ops, choice, strict=True):
                dims[OP_NAMES.index(o)] = c
        rows.append(dims)
    return np.array(rows, dtype=np.int64)


def frontier_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[n]`` bool: points not dominated (another point ``>=`` in both and ``>`` in one).

    Sorting by ``x`` descending then sweeping the running maximum of ``y`` finds them in
    ``O(n log n)``; ties in ``x`` keep only the highest ``y``.
    """
    order = np.lexsort((-y, -x))
    keep = np.zeros(len(x), dtype=bool)
    best = -np.inf
    for i in order:
        if y[i] > best:
            keep[i] = True
            best = y[i]
    return keep


def pareto(cm: CostModel) -> ParetoResult:
    """Evaluate every degree combination and batch with the engine layouts; the frontier.

    Args:
        cm: the problem (its workload's TPOT SLO is lifted for the candidates and kept for
            the line; a decode or serve workload).

    Returns:
        A :class:`ParetoResult` (empty frontier when nothing fits).
    """
    slo = cm.workload.tpot_slo_s
    free = CostModel(cm.model, cm.cluster, dataclasses.replace(cm.workload, tpot_slo_s=None),
                     config=cm.config, space=cm.space)
    sp = free.space
    nvec = sp.nvec[:NUM_COARSE]
    grids = np.meshgrid(*[np.arange(v) for v in nvec], indexing="ij")
    coarse = np.stack([g.ravel() for g in grids], axis=1).astype(np.int64)
    lay = _layouts(free)
    acts = np.zeros((len(coarse) * len(lay), ACTION_LEN), dtype=np.int64)
    acts[:, :NUM_COARSE] = np.repeat(coarse, len(lay), axis=0)
    acts[:, NUM_COARSE:] = np.tile(lay, (len(coarse), 1))
    est = free.evaluate_many(acts)
    ok = est.feasible & np.isfinite(est.tpot_s) & (est.tpot_s > 0)
    idx = np.flatnonzero(ok)
    user = 1.0 / est.tpot_s[idx]
    dev = est.tokens_per_s_per_device[idx]
    keep = frontier_mask(user, dev)
    front = idx[keep][np.argsort(user[keep])]
    return ParetoResult(points_user_tps=user, points_device_tps=dev,
                        frontier=[cm.evaluate(canonical(acts[i], active_heads(sp)))
                                  for i in front], tpot_slo_s=slo,
                        candidates=len(acts), layouts=len(lay))


def point_plan(cm: CostModel, e: Estimate, engine: str | None) -> Plan:
    """A one-strategy :class:`Plan` of a frontier point (for its export command)."""
    return Plan(model=cm.model.name, cluster=cm.cluster.name, workload=cm.workload,
                method="pareto", method_used="pareto", feasible=e.feasible, best=e,
                engine=engine, cost_model=dataclasses.asdict(cm.config))


def plot_pareto(res: ParetoResult, path: str | Path, title: str) -> Path:
    """Save the frontier as an image: every feasible candidate (grey), the frontier (line
    and markers), the TPOT SLO as a vertical line at ``1/TPOT``; labelled axes with units
    and a legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    ax.scatter(res.points_user_tps, res.points_device_tps, s=8, color="0.7",
               label=f"strategies ({len(res.points_user_tps):,} that fit)")
    fx = [1.0 / e.tpot_s for e in res.frontier]
    fy = [e.tokens_per_s_per_device for e in res.frontier]
    ax.plot(fx, fy, "-o", color="tab:blue", markersize=4, label="Pareto frontier")
    if res.tpot_slo_s:
        ax.axvline(1.0 / res.tpot_slo_s, color="tab:red", linestyle="--",
                   label=f"TPOT SLO {res.tpot_slo_s * 1e3:g} ms "
                         f"(= {1.0 / res.tpot_slo_s:.1f} tokens/s/user)")
    ax.set_xlabel("tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per device")
    ax.set_title(title, fontsize=10)
    if len(res.points_user_tps):
        ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def frontier_rows(res: ParetoResult, cm: CostModel, engine: str | None,
                  export_engine: str | None) -> list[dict[str, object]]:
    """The frontier as JSON-ready rows: strategy, tokens/s per user and per device, TPOT,
    TTFT, whether it meets the TPOT SLO, and the export command for ``export_engine``
    (``export``: one server's command; ``launch``: what one node runs,
    :meth:`~learn_to_shard.report.export.Export.launch_lines`: warnings, what the engine
    cannot express, TensorRT-LLM's YAML heredoc, the environment and each server on its own
    devices and port; ``script``: the whole text ``plan --export`` prints, notes included;
    ``None``: no engine to launch on this device; ``servers``, ``export``, ``launch``,
    ``script`` and ``not_expressible`` are then ``None``)."""
    from .export import build_export

    rows: list[dict[str, object]] = []
    for e in res.frontier:
        base = {
            "strategy": e.strategy.short(), "tokens_per_s_per_user": 1.0 / e.tpot_s,
            "tokens_per_s_per_device": e.tokens_per_s_per_device, "tpot_s": e.tpot_s,
            "ttft_s": None if math.isnan(e.ttft_s) else e.ttft_s,
            "meets_tpot_slo": res.tpot_slo_s is None or e.tpot_s <= res.tpot_slo_s}
        if export_engine is None:
            rows.append({**base, "servers": None, "export": None, "launch": None,
                         "script": None, "not_expressible": None})
            continue
        ex = build_export(point_plan(cm, e, engine), export_engine, model=cm.model,
                          devices_per_node=cm.cluster.device.host_devices, cost_model=cm)
        rows.append({
            "strategy": e.strategy.short(), "tokens_per_s_per_user": 1.0 / e.tpot_s,
            "tokens_per_s_per_device": e.tokens_per_s_per_device, "tpot_s": e.tpot_s,
            "ttft_s": None if math.isnan(e.ttft_s) else e.ttft_s,
            "meets_tpot_slo": res.tpot_slo_s is None or e.tpot_s <= res.tpot_slo_s,
            "servers": ex.servers, "export": ex.command(),
            "launch": ex.launch_lines(), "script": ex.text(),
            "not_expressible": ex.unexpressed})
    return rows
