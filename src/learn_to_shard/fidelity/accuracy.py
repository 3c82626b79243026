"""How far the shipped cost model is off on published measurements it was not fitted on: the
held-out medians of ``l2s validate`` and ``l2s validate --serving``, pinned in
``data/calibration/accuracy.json`` so that every plan can state them without re-running the
validations (75 s).

``scripts/accuracy_snapshot.py`` rewrites the file (``--check`` compares); the default test
suite checks its steady-state part against a live ``l2s validate`` (seconds), the slow suite
its serving part against a live ``l2s validate --serving``. A change of the cost model that
moves either median fails those tests until the file is regenerated, so a plan never prints a
stale figure.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from ..workload import Phase

#: The pinned file, inside the package data.
ACCURACY_FILE = "data/calibration/accuracy.json"


def measure() -> dict[str, Any]:
    """Run both validations and return the held-out medians (fractions) and counts:
    ``steady_state`` (``l2s validate``: ``throughput``, ``ttft``, ``tpot``) and
    ``under_load`` (``l2s validate --serving``: ``ttft``, ``tpot``, ``output_tok_s``)."""
    from .serving import predict_table, summarize
    from .stats import validate

    rep = validate()
    steady = {}
    for kind in ("throughput", "ttft", "tpot"):
        st = rep.stat(kind, "held-out")
        if st is not None:
            steady[kind] = {"median_abs_error": round(st.median_abs, 4), "n": st.n}
    summ = summarize(predict_table(), "held-out")
    load = {}
    for metric, key in (("ttft", "ttft_ms"), ("tpot", "tpot_ms"),
                        ("output_tok_s", "output_tok_s")):
        err, n = summ[f"{key}_median_abs_err"], summ[f"{key}_n"]
        assert isinstance(err, float) and isinstance(n, int)
        load[metric] = {"median_abs_error": round(err, 4), "n": n}
    return {"source": "held-out rows of data/measurements.csv (l2s validate) and "
                      "data/serving_measurements.csv (l2s validate --serving); "
                      "docs/validation.md",
            "steady_state": steady, "under_load": load}


@cache
def shipped() -> dict[str, Any]:
    """The pinned medians (:data:`ACCURACY_FILE`)."""
    text = resources.files("learn_to_shard").joinpath(ACCURACY_FILE).read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def accuracy_line(phase: Phase) -> str:
    """One line for a plan of ``phase``: the held-out median |error| of the figures it prints,
    from :func:`shipped` (steady-state throughput and step latencies; for serve also the
    serving simulation's TTFT, TPOT and tokens/s under a load, what a plan run with one
    prints)."""
    acc = shipped()
    st, ld = acc["steady_state"], acc["under_load"]

    def pct(d: dict[str, Any]) -> str:
        return f"{100 * d['median_abs_error']:.0f}%"

    head = "expected error (held-out median |error| on published measurements, l2s validate):"
    if phase is Phase.SERVE:
        return (f"{head} steady-state throughput {pct(st['throughput'])}, prefill time "
                f"{pct(st['ttft'])}, decode step {pct(st['tpot'])}; under a load "
                f"(--concurrency / --request-rate / --trace, simulated) TTFT {pct(ld['ttft'])}, "
                f"TPOT {pct(ld['tpot'])}, tokens/s {pct(ld['output_tok_s'])}")
    if phase is Phase.PREFILL:
        return f"{head} prefill time (TTFT) {pct(st['ttft'])}"
    return f"{head} decode step (TPOT) {pct(st['tpot'])}, throughput {pct(st['throughput'])}"
