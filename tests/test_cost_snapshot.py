"""The cost model equals its pinned snapshot (``tests/data/cost_snapshot.npz``) at rel 1e-12.

Every shipped model × decode/prefill/serve × two configurations (defaults; an engine profile
with host time, GEMM shape factor, routing skew and uncapped windows), 96 recorded action
vectors each (random per-operator choices, Megatron's on some rows; most infeasible), every
``evaluate_many`` field, and the plan breakdown (``evaluate``) of up to three rows per case.
This is the guard of behaviour-preserving changes to ``cost/`` and ``parallel/``: a change that
means to alter prices regenerates the file with ``scripts/cost_snapshot.py`` and says so.
The snapshot records each case's full configuration, so new factors with neutral defaults do
not disturb it; a change to a shipped model's parsing or a device preset does, by design.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("cost_snapshot",
                                                  ROOT / "scripts" / "cost_snapshot.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cost_model_equals_the_pinned_snapshot():
    cs = _script()
    snap = cs.load(cs.OUT)
    assert len(snap["cases"]) >= 3 * 2 * 30           # every shipped model, phase, variant
    assert snap["arrays"]["feasible"].any() and not snap["arrays"]["feasible"].all()
    bad = cs.compare(snap, rel=1e-12)
    assert not bad, f"{len(bad)} mismatches, first: " + "\n".join(bad[:10])


def test_snapshot_comparison_catches_a_change():
    cs = _script()
    snap = cs.load(cs.OUT)
    one = {"cases": snap["cases"][:1], "plans": snap["plans"][:1],
           "values": snap["values"][:1],
           "arrays": {f: a[:1].copy() for f, a in snap["arrays"].items()}}
    assert cs.compare(one) == []
    one["arrays"]["tpot_s"][0, 0] *= 1 + 1e-10
    one["plans"][0][0]["stage_time_s"][0] *= 1 + 1e-10
    bad = cs.compare(one)
    assert len(bad) == 2 and "tpot_s row 0" in bad[0] and "stage_time_s" in bad[1]
    assert np.isnan(snap["arrays"]["tpot_s"]).any()      # prefill rows: NaN == NaN holds
