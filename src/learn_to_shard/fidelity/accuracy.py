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


#: The serving metrics the pinned file holds: its name -> the serving summary's key.
_LOAD_METRICS = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("output_tok_s", "output_tok_s"))


def _load_medians(summ: dict[str, object]) -> dict[str, dict[str, Any]]:
    """The held-out medians and counts of one serving summary
    (:func:`~learn_to_shard.fidelity.serving.summarize`), metrics without a row left out."""
    load = {}
    for metric, key in _LOAD_METRICS:
        err, n = summ[f"{key}_median_abs_err"], summ[f"{key}_n"]
        assert isinstance(err, float) and isinstance(n, int)
        if n:
            load[metric] = {"median_abs_error": round(err, 4), "n": n}
    return load


def measure() -> dict[str, Any]:
    """Run both validations and return the held-out medians (fractions) and counts:
    ``steady_state`` (``l2s validate``: ``throughput``, ``ttft``, ``tpot``),
    ``under_load`` (``l2s validate --serving``: ``ttft``, ``tpot``, ``output_tok_s``) and
    ``under_load_by_engine``: the same over each engine's rows of the serving table
    (``vllm``, ``sglang``, ``trtllm``; the rows of one engine's sources sit apart from the
    others', docs/validation.md), which a plan for that engine prints beside the whole
    table's."""
    from .serving import predict_table, summarize
    from .stats import validate

    rep = validate()
    steady = {}
    for kind in ("throughput", "ttft", "tpot"):
        st = rep.stat(kind, "held-out")
        if st is not None:
            steady[kind] = {"median_abs_error": round(st.median_abs, 4), "n": st.n}
    results = predict_table()
    by_engine = {engine: _load_medians(summarize([r for r in results if r.engine == engine],
                                                 "held-out"))
                 for engine in sorted({r.engine for r in results})}
    return {"source": "held-out rows of data/measurements.csv (l2s validate) and "
                      "data/serving_measurements.csv (l2s validate --serving); "
                      "docs/validation.md",
            "steady_state": steady, "under_load": _load_medians(summarize(results, "held-out")),
            "under_load_by_engine": {e: m for e, m in by_engine.items() if m}}


@cache
def shipped() -> dict[str, Any]:
    """The pinned medians (:data:`ACCURACY_FILE`)."""
    text = resources.files("learn_to_shard").joinpath(ACCURACY_FILE).read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


#: Engine profile -> the name its rows go by in the accuracy line.
_ENGINE_TITLES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


def accuracy_line(phase: Phase, engine: str | None = None) -> str:
    """One line for a plan of ``phase``: the held-out median |error| of the figures it prints,
    from :func:`shipped` (steady-state throughput and step latencies; for serve also the
    serving simulation's TTFT, TPOT and tokens/s under a load, what a plan run with one
    prints). ``engine`` (the plan's engine profile): for serve, also the medians over that
    engine's rows (``under_load_by_engine``) where the file holds them, with their counts;
    only the engine runtimes the serving table measures (``vllm``, ``sglang``, ``trtllm``)
    have them (``trtllm-tensorrt``, the TensorRT-engine runtime, has none)."""
    acc = shipped()
    st, ld = acc["steady_state"], acc["under_load"]

    def pct(d: dict[str, Any]) -> str:
        return f"{100 * d['median_abs_error']:.0f}%"

    head = "expected error (held-out median |error| on published measurements, l2s validate):"
    if phase is Phase.SERVE:
        line = (f"{head} steady-state throughput {pct(st['throughput'])}, prefill time "
                f"{pct(st['ttft'])}, decode step {pct(st['tpot'])}; under a load "
                f"(--concurrency / --request-rate / --trace, simulated) TTFT {pct(ld['ttft'])}, "
                f"TPOT {pct(ld['tpot'])}, tokens/s {pct(ld['output_tok_s'])}")
        own = acc.get("under_load_by_engine", {}).get(engine or "")
        if own:
            parts = [f"{label} {pct(own[m])} (n={own[m]['n']})"
                     for m, label in (("ttft", "TTFT"), ("tpot", "TPOT"),
                                      ("output_tok_s", "tokens/s")) if m in own]
            line += f"; on {_ENGINE_TITLES.get(str(engine), engine)}'s rows " + \
                ", ".join(parts)
        return line
    if phase is Phase.PREFILL:
        return f"{head} prefill time (TTFT) {pct(st['ttft'])}"
    return f"{head} decode step (TPOT) {pct(st['tpot'])}, throughput {pct(st['throughput'])}"
