"""Calibration fits: the declared fits behind the shipped factors, and the factors file.

A fit minimises the mean absolute log error over the table's calibration rows
(``calibration = 1``) by coordinate descent over declared grids. :func:`write_factors` records
the fitted values with their provenance in ``data/calibration/factors.json``, the file
:mod:`learn_to_shard.cost.config` reads its calibrated defaults and fitted engine profiles
from.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import itertools
import json
import math
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cost.config import CostModelConfig, FactorsFile, FittedFactors, factors_path
from ..errors import ConfigError
from .measurements import Measurement, load_table
from .predict import predict_row, row_config

__all__ = ["calibration_loss", "fit_factors", "coordinate_descent", "CalibrationSpec",
           "CALIBRATIONS", "calibration_rows", "calibrate", "CalibrationResult",
           "write_factors", "SERVING_CALIBRATIONS", "STEP_METRICS", "serving_loss",
           "calibrate_serving"]


def calibration_loss(rows: Sequence[Measurement], config: CostModelConfig) -> float:
    """Mean absolute log error ``mean |ln(predicted / measured)|`` over ``rows`` (rows that
    cannot be predicted count as a large error, so a fit never buys accuracy by dropping rows)."""
    total = 0.0
    for r in rows:
        res = predict_row(r, config, apply_profile=False)
        total += abs(math.log(res.predicted / r.value)) if res.predicted else 5.0
    return total / max(1, len(rows))


def fit_factors(rows: Sequence[Measurement], base: CostModelConfig,
                grid: Mapping[str, Sequence[float]], rounds: int = 3
                ) -> tuple[CostModelConfig, float]:
    """Fit the factors named in ``grid`` on ``rows`` by coordinate descent over the grids.

    Args:
        rows: the calibration rows (only these are looked at).
        base: starting factors; fields not in ``grid`` stay as they are.
        grid: field name -> candidate values.
        rounds: passes over the fields.

    Returns:
        (fitted config, its :func:`calibration_loss`).
    """
    return coordinate_descent(lambda cfg: calibration_loss(rows, cfg), base, grid, rounds)


def coordinate_descent(loss: Callable[[CostModelConfig], float], start: CostModelConfig,
                        grid: Mapping[str, Sequence[float]],
                        rounds: int = 3) -> tuple[CostModelConfig, float]:
    """Minimise ``loss(config)`` one factor at a time over its grid values, ``rounds`` passes
    (stops early when a pass changes nothing). Returns (best config, its loss)."""
    cfg, best = start, loss(start)
    for _ in range(rounds):
        changed = False
        for name, values in grid.items():
            for v in values:
                change: dict[str, Any] = {name: v}
                trial = dataclasses.replace(cfg, **change)
                trial_loss = loss(trial)
                if trial_loss < best - 1e-12:
                    cfg, best, changed = trial, trial_loss, True
        if not changed:
            break
    return cfg, best


def grid_search(loss: Callable[[CostModelConfig], float], start: CostModelConfig,
                grid: Mapping[str, Sequence[float]]) -> tuple[CostModelConfig, float]:
    """Minimise ``loss(config)`` over every combination of the grid values (the global
    optimum on the grid; for fits of few factors, where coordinate descent of a median loss
    can stop in a worse corner). Ties go to the first combination in grid order. Returns
    (best config, its loss)."""
    names = list(grid)
    best_cfg, best = start, math.inf
    for values in itertools.product(*(grid[n] for n in names)):
        change: dict[str, Any] = dict(zip(names, values, strict=True))
        trial = dataclasses.replace(start, **change)
        trial_loss = loss(trial)
        if trial_loss < best - 1e-12:
            best_cfg, best = trial, trial_loss
    return best_cfg, best


@dataclass(frozen=True)
class CalibrationSpec:
    """One declared fit: which calibration rows, starting from which factors, which grids.

    Attributes:
        name: what the fit produces (``defaults`` or an engine profile name).
        engine: rows of this engine with ``calibration = 1`` are fitted.
        grid: field -> candidate values (coordinate descent, :func:`fit_factors`).
    """

    name: str
    engine: str
    grid: dict[str, tuple[float, ...]]


#: The grids of the two Splitwise system profiles (the same factors on either system).
_SPLITWISE_GRID: dict[str, tuple[float, ...]] = {
    "flops_efficiency": (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9),
    "attention_flops_efficiency": (0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.07, 0.1),
    "scale_up_latency_s": (1e-5, 1.25e-5, 1.5e-5, 2e-5, 2.5e-5, 3e-5, 3.5e-5),
    "host_step_overhead_s": (0.0, 1e-3, 2e-3, 4e-3, 6e-3, 8e-3, 1e-2),
    "host_seq_overhead_s": (1e-4, 2e-4, 3e-4, 4e-4, 5e-4),
    "host_prefill_overhead_s": (0.0, 5e-3, 1e-2, 1.5e-2, 2e-2, 3e-2)}

#: The fits behind the shipped factors (docs/validation.md). The defaults are fitted through
#: the ``trtllm-tensorrt`` profile (TensorRT-LLM's memory policy, the TensorRT-engine runtime
#: its v0.14 rows ran, no host terms), the Splitwise profiles from the
#: defaults. ``hbm_efficiency`` keeps its prior 0.8: fitted too, it drops to 0.4 and the
#: held-out error rises (docs/validation.md).
CALIBRATIONS: tuple[CalibrationSpec, ...] = (
    CalibrationSpec("defaults", "trtllm-tensorrt", {
        "flops_efficiency": (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8),
        "attention_hbm_efficiency": (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.8)}),
    CalibrationSpec("splitwise-dgx-h100", "splitwise-dgx-h100", _SPLITWISE_GRID),
    CalibrationSpec("splitwise-dgx-a100", "splitwise-dgx-a100", _SPLITWISE_GRID),
)


def calibration_rows(rows: Iterable[Measurement]) -> list[Measurement]:
    """The rows marked ``calibration = 1``.

    Raises:
        ConfigError: there are none (a fit on no rows would only print its starting values).
    """
    cal = [r for r in rows if r.calibration]
    if not cal:
        raise ConfigError("--fit: the table has no calibration rows (column 'calibration' = 1"
                          "); mark the rows to fit on, or leave --fit out")
    return cal


@dataclass(frozen=True)
class CalibrationResult:
    """One declared fit, run.

    Attributes:
        spec: the fit.
        values: fitted value per factor of ``spec.grid`` (SI units, as the factor's name says).
        loss: :func:`calibration_loss` at the fitted values (mean ``|ln(pred / measured)|``).
        row_ids: ids of the calibration rows it was fitted on.
        table: file name of the table those rows are from (``None``: the one
            :func:`write_factors` is given).
    """

    spec: CalibrationSpec
    values: dict[str, float]
    loss: float
    row_ids: tuple[str, ...]
    table: str | None = None


def calibrate(rows: Sequence[Measurement] | None = None,
              specs: Sequence[CalibrationSpec] = CALIBRATIONS) -> list[CalibrationResult]:
    """Re-run the declared fits on the calibration rows (``calibration = 1``) only.

    Starts each fit from the shipped values, so it reports whether they are still a local
    optimum of the grid. Returns one :class:`CalibrationResult` per spec that has calibration
    rows of its engine; a spec without any is left out (there is nothing to fit).

    Raises:
        ConfigError: no row has ``calibration = 1`` (a fit on no rows would only print the
            starting values).
    """
    rs = calibration_rows(rows if rows is not None else load_table())
    out = []
    for spec in specs:
        cal = [r for r in rs if r.engine == spec.engine]
        if not cal:
            continue
        cfg, loss = fit_factors(cal, row_config(cal[0]), spec.grid)
        out.append(CalibrationResult(spec, {k: getattr(cfg, k) for k in spec.grid}, loss,
                                     tuple(r.id for r in cal)))
    return out


def _code_commit() -> str:
    """The git commit of the source tree this package runs from (``+dirty`` when it has
    uncommitted changes), or ``unknown`` outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=here, capture_output=True, text=True, timeout=10,
                               check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def write_factors(results: Sequence[CalibrationResult], path: str | Path | None = None,
                  table: str | Path | None = None) -> Path:
    """Write fitted factors with their provenance as the calibration data file.

    The document (schema :class:`learn_to_shard.cost.config.FactorsFile`) holds, per fit
    name (``defaults`` or an engine profile), the fitted ``values``, the ids of the
    ``rows`` fitted on, the ``table`` they came from, the ``loss``, the UTC ``date`` and the
    code ``commit`` (:func:`_code_commit`). :mod:`learn_to_shard.cost.config` reads its
    calibrated defaults and the fitted engine-profile fields from the shipped copy,
    ``learn_to_shard/data/calibration/factors.json``.

    Args:
        results: :func:`calibrate`'s output.
        path: where to write (default: the shipped file, :func:`~learn_to_shard.cost.config.
            factors_path`).
        table: the measurement table the rows came from (recorded by file name; default the
            shipped ``measurements.csv``), for results that do not name their own
            (:attr:`CalibrationResult.table`).

    Raises:
        ConfigError: the file cannot be written (names the path and the OS reason).
    """
    out = Path(path) if path is not None else factors_path()
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    commit = _code_commit()
    default_table = Path(table).name if table is not None else "measurements.csv"
    doc = FactorsFile(fits={r.spec.name: FittedFactors(
        engine=r.spec.engine, values=r.values, rows=list(r.row_ids),
        table=r.table or default_table, loss=r.loss, date=date, commit=commit)
        for r in results})
    try:
        out.write_text(json.dumps(doc.model_dump(), indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{out}: cannot write the factors file: {exc.strerror}") from None
    return out


#: Engine step overheads: a fixed host time per engine step (scheduling, input preparation,
#: launches; ``host_step_overhead_s``) and a host time per sequence in the step (sampling,
#: per-request bookkeeping; ``host_seq_overhead_s``). Published: the CPU work between forward
#: passes (scheduling, input preparation, de-tokenising, streaming) is comparable with a small
#: model's ~5 ms GPU step on H100 (vLLM blog, "vLLM V1: A Major Upgrade to vLLM's Core
#: Architecture", 2025-01-27, section 1), and vLLM's scheduling overhead, mostly tensor pre-
#: and post-processing that grows with the batch, took up to half the inference time in
#: 2024 measurements while SGLang's was much lower (https://mlsys.wuklab.io/posts/
#: scheduling_overhead). The grids span 0–20 ms per step and 0–300 µs per sequence (at 256
#: running sequences, up to 97 ms: several whole decode steps, so no fit sits on an edge); 0
#: is on each, so a fit can say "none".
_STEP_GRID: dict[str, tuple[float, ...]] = {
    "host_step_overhead_s": (0.0, 5e-4, 1e-3, 1.5e-3, 2e-3, 3e-3, 4e-3, 6e-3, 8e-3, 1e-2, 1.2e-2,
                             1.6e-2, 2e-2),
    "host_seq_overhead_s": (0.0, 5e-6, 1e-5, 2e-5, 3e-5, 5e-5, 7.5e-5, 1e-4, 1.5e-4, 2e-4, 3e-4)}

#: Eager launch time per layer of a step carrying prompt tokens
#: (``eager_layer_overhead_s``): 0–1 ms. PyTorch eager dispatch is ~10–30 µs per operator and a
#: layer's prefill launches 10–40 operators (more for MoE and MLA layers), so 0.1–1 ms spans
#: what launches can cost; 0 is on the grid, so a fit can say "none".
_EAGER_GRID: tuple[float, ...] = (0.0, 1e-4, 2e-4, 3e-4, 4e-4, 5e-4, 6e-4, 8e-4, 1e-3)

#: The serving front-end's time per request (``frontend_latency_s``): 0–100 ms. Its parts —
#: HTTP parsing, chat template and tokenisation, the hand-off to the engine process, the
#: first token's de-tokenising and streaming — are each a few ms; aiconfigurator prices vLLM's
#: as 0.8 ms per layer (29–64 ms for 36–80 layers, ai-dynamo/aiconfigurator@095f58a5
#: ``vllm_backend.py``), so 100 ms leaves room above; 0 is on the grid, so a fit can say
#: "none".
_FRONTEND_GRID: tuple[float, ...] = (0.0, 5e-3, 1e-2, 1.5e-2, 2e-2, 2.5e-2, 3e-2, 3.5e-2, 4e-2,
                                     4.5e-2, 5e-2, 6e-2, 7e-2, 8e-2, 1e-1)

#: The serving fits: per engine profile, fitted on that engine's ``split = calibration`` rows
#: of ``data/serving_measurements.csv`` (the table's declared subset, ``data/README.md``).
_SERVING_GRID: dict[str, tuple[float, ...]] = {
    **_STEP_GRID, "eager_layer_overhead_s": _EAGER_GRID, "frontend_latency_s": _FRONTEND_GRID}
SERVING_CALIBRATIONS: tuple[CalibrationSpec, ...] = (
    CalibrationSpec("vllm", "vllm", _SERVING_GRID),
    CalibrationSpec("sglang", "sglang", _SERVING_GRID),
    CalibrationSpec("trtllm", "trtllm", _SERVING_GRID))

#: Loss of a serving row the simulation cannot predict (counted once per row).
_UNPREDICTED_LOSS = 5.0


#: The metrics the per-step and per-sequence overheads are fitted on: the step-time ones
#: (TTFT at low load is mostly the prompt's own step, which ``eager_layer_overhead_s`` prices;
#: with TTFT in this loss the SGLang fit went to 12 ms per step and 10 µs per sequence, its own
#: calibration rows' ITL +52% to +79% at 1–4 requests/s, where step time is all ITL measures).
STEP_METRICS: tuple[str, ...] = ("tpot_ms", "output_tok_s")
#: The metrics ``eager_layer_overhead_s`` is fitted on: all three (a prompt step's launches
#: lengthen TTFT, and the decodes that share or wait for that step).
SERVING_METRICS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "output_tok_s")
#: The metric ``frontend_latency_s`` is fitted on: TTFT, the only one it lengthens beside a
#: closed loop's throughput.
FRONTEND_METRICS: tuple[str, ...] = ("ttft_ms",)


def serving_loss(rows: Sequence[Mapping[str, str]], overrides: Mapping[str, Any],
                 metrics: Sequence[str] = SERVING_METRICS) -> float:
    """Median ``|ln(simulated / measured)|`` over every (row, metric) pair of ``rows`` of the
    serving table (each of ``metrics`` the row gives: ``ttft_ms``, ``tpot_ms`` — TPOT or
    ITL — ``output_tok_s``), predicted with each row's engine profile and then
    ``overrides``; a row that cannot be predicted counts once as :data:`_UNPREDICTED_LOSS`.
    The median, as ``l2s validate --serving`` reports: a row at the edge of saturation,
    whose TTFT moves by orders of magnitude with a percent of capacity, does not decide the
    fit alone.

    Raises:
        ConfigError: ``rows`` is empty, or no row gives any of ``metrics``.
    """
    from .serving import predict_row

    if not rows:
        raise ConfigError("serving fit: no rows to fit on")
    metrics = tuple(metrics)
    terms: list[float] = []
    for r in rows:
        res = predict_row(dict(r), overrides)
        if res.reason is not None:
            terms.append(_UNPREDICTED_LOSS)
            continue
        terms += [abs(math.log(res.predicted[m] / v)) for m, v in res.measured.items()
                  if m in metrics and v > 0 and res.predicted.get(m, 0.0) > 0]
    if not terms:
        raise ConfigError(f"serving fit: no row gives {', '.join(metrics)}")
    terms.sort()
    mid = len(terms) // 2
    return terms[mid] if len(terms) % 2 else 0.5 * (terms[mid - 1] + terms[mid])


def calibrate_serving(rows: Sequence[Mapping[str, str]] | None = None,
                      specs: Sequence[CalibrationSpec] = SERVING_CALIBRATIONS
                      ) -> list[CalibrationResult]:
    """Re-run the serving fits (:data:`SERVING_CALIBRATIONS`) on the serving table's
    calibration rows (``split = calibration``) of its engine only.

    Each fit runs three searches in turn, the other fields at their current values (first the
    engine profile's, with ``eager_layer_overhead_s`` and ``frontend_latency_s`` at 0):

    1. every combination of the step and sequence grids (:func:`grid_search`) for the least
       :func:`serving_loss` over the step-time metrics (:data:`STEP_METRICS`);
    2. ``eager_layer_overhead_s`` over its grid (:data:`_EAGER_GRID`) for the least loss over
       all three metrics (:data:`SERVING_METRICS`; over the step-time ones where the rows
       give no TTFT);
    3. ``frontend_latency_s`` over its grid (:data:`_FRONTEND_GRID`) for the least loss over
       TTFT (:data:`FRONTEND_METRICS`; kept at 0 where the rows give no TTFT).

    The front-end's serial time (``frontend_serial_s``) is not fitted: only TTFT under a
    queue in the front-end tells it apart from ``frontend_latency_s``, and no calibration row
    has one (searched with the latency on the rows at 4–8 requests/s it took 20 ms only
    because the two summed fall between the latency grid's points; ``docs/validation.md``).

    It stops when a round leaves ``eager_layer_overhead_s`` and ``frontend_latency_s`` where
    the step fields were fitted; after three rounds without that, the step fields are
    refitted at the last values, so the values returned are always step-optimal at their
    eager and front-end values. A spec whose grid has neither of those two fields runs the
    step search alone. A spec whose calibration rows are all unpredictable is left out:
    nothing can be fitted, and the profile keeps no fitted overhead.

    Args:
        rows: the serving table's rows (default: the shipped table).
        specs: the fits to run.

    Returns:
        One :class:`CalibrationResult` per fitted spec, with ``table`` =
        ``serving_measurements.csv``; its ``loss`` is the loss over all three metrics (the
        step-time ones where the rows give no TTFT) at the fitted values.
    """
    from .serving import load_rows, predict_row

    table = load_rows() if rows is None else list(rows)
    out = []
    for spec in specs:
        cal = [r for r in table if r.get("split") == "calibration"
               and r.get("engine") == spec.engine]
        predicted = [predict_row(dict(r)) for r in cal]
        if all(res.reason is not None for res in predicted):
            continue
        late = ("eager_layer_overhead_s", "frontend_latency_s")
        eager_grid = {k: v for k, v in spec.grid.items() if k == late[0]}
        front_grid = {k: v for k, v in spec.grid.items() if k == late[1]}
        step_grid = {k: v for k, v in spec.grid.items() if k not in late}
        names = tuple(spec.grid)
        gives_ttft = any("ttft_ms" in res.measured for res in predicted)

        def loss(cfg: CostModelConfig, cal: list[Mapping[str, str]] = cal,
                 names: tuple[str, ...] = names,
                 metrics: tuple[str, ...] = STEP_METRICS) -> float:
            return serving_loss(cal, {k: getattr(cfg, k) for k in names}, metrics)

        # serving_loss counts only the metrics a row gives: rows without TTFT are scored on
        # the step-time ones.
        eager_loss = functools.partial(loss, metrics=SERVING_METRICS)
        front_loss = functools.partial(loss, metrics=FRONTEND_METRICS)

        cfg = CostModelConfig.for_engine(spec.name)
        zero: dict[str, Any] = dict.fromkeys((*eager_grid, *front_grid), 0.0)
        cfg = dataclasses.replace(cfg, **zero)
        cfg, best = grid_search(loss, cfg, step_grid)
        for _ in range(3 if eager_grid or front_grid else 0):
            at = tuple(getattr(cfg, k) for k in late)
            if eager_grid:
                cfg, _ = grid_search(eager_loss, cfg, eager_grid)
            if front_grid and gives_ttft:
                cfg, _ = grid_search(front_loss, cfg, front_grid)
            if tuple(getattr(cfg, k) for k in late) == at:
                break                   # the step fields were fitted at these values: settled
            cfg, _ = grid_search(loss, cfg, step_grid)
        if eager_grid or front_grid:
            best = eager_loss(cfg)
        out.append(CalibrationResult(spec, {k: getattr(cfg, k) for k in names}, best,
                                     tuple(r["id"] for r in cal),
                                     table="serving_measurements.csv"))
    return out
