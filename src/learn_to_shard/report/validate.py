"""Cost-model fidelity: predict every row of a table of published measurements.

The table (``learn_to_shard/data/measurements.csv``, columns documented in the ``README.md``
beside it) holds one measurement per row with the configuration it was taken under. Each row
is predicted with *that* configuration (never a searched one) by the same
:class:`~learn_to_shard.cost.model.CostModel` the planner uses:

* ``output_tokens_per_s`` — the serve phase (continuous batching, prefill of new requests
  interleaved with the decode of running ones, :mod:`learn_to_shard.cost.model`) at a batch of
  ``batch`` running requests, or with ``batch = max`` as many as the KV cache holds at the
  stated engine cap ``max_batch``; the value is output tokens/s of one model instance (the
  whole TP group);
* ``prefill_s`` / ``ttft_s`` — the prefill phase, ``batch`` prompts of ``isl`` tokens;
* ``decode_step_s`` / ``tpot_s`` — the decode phase, ``batch`` sequences at context ``isl``;
* ``collective_s`` — one collective over ``ep`` (or ``tp``) ranks priced by the model's
  alpha-beta collective formulas on the link the group spans (``message_bytes`` as defined in
  the README);
* ``link_bytes_per_s`` — the achievable bus bandwidth the model assumes on that link.

Rows whose model or metric the product cannot express are reported as such, with the reason.
Errors are signed relative errors ``predicted / measured − 1``; summaries give the median and
worst absolute error per metric kind, separately for the declared calibration rows
(``calibration = 1``) and the held-out rest.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..cost.comm import ALL_REDUCE, ALL_TO_ALL, GATHER_OR_SCATTER, collective_time_s
from ..cost.config import ENGINE_PROFILES, CostModelConfig
from ..cost.model import CostModel, Estimate
from ..errors import ConfigError, PlannerError
from ..hardware.presets import load_device, load_device_file
from ..hardware.spec import ClusterSpec, DeviceSpec
from ..model.hf_config import load_model, shipped_model_names
from ..model.spec import ModelSpec
from ..parallel.space import StrategySpace
from ..parallel.strategy import Strategy
from ..workload import DType, Phase, Workload

__all__ = [
    "COLUMNS", "KINDS", "Measurement", "RowResult", "ValidationReport", "load_table",
    "predict_row", "validate", "save_plot", "save_json", "default_table_path",
    "calibration_loss", "fit_factors", "calibrate", "calibration_rows", "row_config",
    "CALIBRATIONS",
    "render_validation", "silicon_report", "render_silicon", "OperatorStats",
    "KERNEL_FITS", "KernelFitSpec", "KernelFit", "fit_silicon", "render_kernel_fits",
]

#: Columns of the measurement CSV, in order (see data/README.md).
COLUMNS: tuple[str, ...] = (
    "id", "engine", "model", "hardware", "devices", "weight_dtype", "kv_dtype", "tp", "pp",
    "ep", "dp", "batch", "max_batch", "max_num_tokens", "isl", "osl", "metric", "value",
    "collective", "message_bytes", "sweep", "calibration", "source", "notes",
)
_REQUIRED = ("id", "model", "hardware", "metric", "value")

#: metric -> kind (the four kinds the summary reports).
METRIC_KIND: dict[str, str] = {
    "output_tokens_per_s": "throughput",
    "prefill_s": "ttft",
    "ttft_s": "ttft",
    "decode_step_s": "tpot",
    "tpot_s": "tpot",
    "collective_s": "collective",
    "link_bytes_per_s": "collective",
}
KINDS: tuple[str, ...] = ("throughput", "ttft", "tpot", "collective")
KIND_LABEL = {"throughput": "throughput", "ttft": "TTFT / prefill", "tpot": "decode step / TPOT",
              "collective": "collective"}
_COLLECTIVES = {"all_reduce": ALL_REDUCE, "all_gather": GATHER_OR_SCATTER,
                "reduce_scatter": GATHER_OR_SCATTER, "all_to_all": ALL_TO_ALL}
#: Measured values closer than this (relative) count as a tie in the TP-sweep order check:
#: the measured medians themselves vary by more than this run to run.
TIE_TOLERANCE = 0.02


def _data_dir() -> Any:
    return resources.files("learn_to_shard") / "data"


def default_table_path() -> Path:
    """The shipped table, ``learn_to_shard/data/measurements.csv``."""
    return Path(str(_data_dir() / "measurements.csv"))


# ------------------------------------------------------------------------------ the table
@dataclass(frozen=True)
class Measurement:
    """One row of the table (SI units; see data/README.md for every column)."""

    id: str
    engine: str
    model: str
    hardware: str
    devices: int
    weight_dtype: str
    kv_dtype: str
    tp: int
    pp: int
    ep: int
    dp: int
    batch: int | None          # None = as many as the KV cache holds ("max")
    max_batch: int | None      # engine cap for batch = max
    max_num_tokens: int | None  # engine cap on tokens per step (None: the profile's budget)
    isl: int
    osl: int
    metric: str
    value: float
    collective: str
    message_bytes: float
    sweep: str
    calibration: bool
    source: str
    notes: str

    @property
    def kind(self) -> str:
        """Metric kind: throughput, ttft, tpot or collective."""
        return METRIC_KIND[self.metric]


def _int(row: dict[str, str], key: str, default: int | None, where: str,
         minimum: int = 0) -> int | None:
    text = (row.get(key) or "").strip()
    if not text:
        return default
    try:
        value = int(float(text))
    except (ValueError, OverflowError):
        raise ConfigError(f"{where}: column '{key}' must be an integer, got {text!r}") from None
    if value < minimum or value != float(text):
        raise ConfigError(f"{where}: column '{key}' must be an integer >= {minimum}, "
                          f"got {text!r}")
    return value


def _finite(text: str) -> float | None:
    """``text`` as a finite float, or None when it is not one."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def load_table(path: str | Path | None = None) -> list[Measurement]:
    """Read a measurement table (CSV with the :data:`COLUMNS` header).

    Args:
        path: CSV file (UTF-8, a leading byte-order mark allowed); default the shipped
            ``data/measurements.csv``.

    Raises:
        ConfigError: unreadable file, missing columns, or a bad value (names row and column).
    """
    p = Path(path) if path is not None else default_table_path()
    try:
        text = p.read_text(encoding="utf-8-sig")     # a spreadsheet's BOM is not a column
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read measurement table: {exc}") from None
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or []
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        raise ConfigError(f"{p}: missing column(s) {', '.join(missing)}; found "
                          f"{', '.join(map(repr, header)) or 'no header'}; the header must "
                          f"hold {', '.join(_REQUIRED)} among {', '.join(COLUMNS)} "
                          f"(data/README.md)")
    unknown = [c for c in header if c not in COLUMNS]
    if unknown:
        raise ConfigError(f"{p}: unknown column(s) {', '.join(unknown)}; allowed: "
                          f"{', '.join(COLUMNS)}")
    rows: list[Measurement] = []
    seen: set[str] = set()
    for i, row in enumerate(reader, start=2):
        where = f"{p} line {i}"
        rid = (row.get("id") or "").strip()
        if not rid:
            raise ConfigError(f"{where}: empty 'id'")
        if rid in seen:
            raise ConfigError(f"{where}: id {rid!r} appears twice")
        seen.add(rid)
        metric = (row.get("metric") or "").strip()
        if metric not in METRIC_KIND:
            raise ConfigError(f"{where}: metric {metric!r} is not one of "
                              f"{', '.join(METRIC_KIND)}")
        try:
            value = float(row["value"])
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: column 'value' must be a number") from None
        if not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"{where}: column 'value' must be positive and finite")
        batch_text = (row.get("batch") or "").strip().lower()
        batch = None if batch_text == "max" else _int(row, "batch", 1, where, 1)
        tp = _int(row, "tp", 1, where, 1) or 1
        pp = _int(row, "pp", 1, where, 1) or 1
        ep = _int(row, "ep", 1, where, 1) or 1
        dp = _int(row, "dp", 1, where, 1) or 1
        devices = _int(row, "devices", tp * pp * dp, where, 1) or 1
        if devices < tp * pp * dp:
            raise ConfigError(f"{where}: column 'devices' = {devices} is fewer than tp × pp × "
                              f"dp = {tp * pp * dp}")
        coll = (row.get("collective") or "").strip()
        if coll and coll not in _COLLECTIVES:
            raise ConfigError(f"{where}: collective {coll!r} is not one of "
                              f"{', '.join(_COLLECTIVES)}")
        mb = (row.get("message_bytes") or "").strip()
        message_bytes = _finite(mb) if mb else 0.0
        if metric == "collective_s":
            if not coll:
                raise ConfigError(f"{where}: a collective_s row needs column 'collective' "
                                  f"({', '.join(_COLLECTIVES)})")
            if not (message_bytes and message_bytes > 0):
                raise ConfigError(f"{where}: a collective_s row needs a positive "
                                  f"'message_bytes', got {mb!r}")
        elif message_bytes is None or message_bytes < 0:
            raise ConfigError(f"{where}: column 'message_bytes' must be a non-negative "
                              f"number, got {mb!r}")
        rows.append(Measurement(
            id=rid, engine=(row.get("engine") or "").strip(), model=row["model"].strip(),
            hardware=row["hardware"].strip(),
            devices=devices,
            weight_dtype=(row.get("weight_dtype") or "bf16").strip().lower(),
            kv_dtype=(row.get("kv_dtype") or "").strip().lower(),
            tp=tp, pp=pp, ep=ep, dp=dp, batch=batch,
            max_batch=_int(row, "max_batch", None, where),
            max_num_tokens=_int(row, "max_num_tokens", None, where) or None,
            isl=_int(row, "isl", 0, where) or 0, osl=_int(row, "osl", 0, where) or 0,
            metric=metric, value=value, collective=coll,
            message_bytes=message_bytes,
            sweep=(row.get("sweep") or "").strip(),
            calibration=(row.get("calibration") or "0").strip() in ("1", "true", "yes"),
            source=(row.get("source") or "").strip(), notes=(row.get("notes") or "").strip()))
    if not rows:
        raise ConfigError(f"{p}: no measurement rows under the header")
    return rows


# ------------------------------------------------------------------------------ resolution
def _dtype(text: str, where: str) -> DType:
    """fp16 runs at the bf16 rate and size on every shipped device, so it maps to BF16."""
    if text in ("fp16", "bf16", "float16", "bfloat16", ""):
        return DType.BF16
    if text == "fp8":
        return DType.FP8
    raise ConfigError(f"{where}: precision {text!r} is not expressible (fp16, bf16, fp8)")


def _resolve_model(name: str) -> ModelSpec:
    """A shipped model, a config under data/validation/models, or a config.json path."""
    if name in shipped_model_names():
        return load_model(name)
    extra = _data_dir() / "validation" / "models" / f"{name}.json"
    if extra.is_file():
        spec = load_model(str(extra))
        return dataclasses.replace(spec, name=name)
    return load_model(name)


def _resolve_device(name: str) -> DeviceSpec:
    """A device preset, a device file under data/validation/devices, or a device JSON path."""
    extra = _data_dir() / "validation" / "devices" / f"{name}.json"
    if extra.is_file():
        return load_device_file(str(extra))
    if name.endswith(".json"):
        return load_device_file(name)
    return load_device(name)


# ------------------------------------------------------------------------------ prediction
@dataclass(frozen=True)
class RowResult:
    """Prediction for one row.

    Attributes:
        row: the measurement.
        predicted: the model's value in the row's metric (SI), None when not expressible.
        status: ``ok``, ``not expressible`` or ``infeasible`` (the model says the stated
            configuration does not fit; the value is still predicted where one exists).
        reason: why the row is not expressible / infeasible.
        batch_used: running requests the prediction used (serve rows with ``batch = max``).
    """

    row: Measurement
    predicted: float | None
    status: str
    reason: str = ""
    batch_used: int | None = None

    @property
    def error(self) -> float | None:
        """Signed relative error ``predicted / measured − 1`` (None when not predicted)."""
        if self.predicted is None:
            return None
        return self.predicted / self.row.value - 1.0


def _strategy(r: Measurement, batch: int) -> Strategy:
    return Strategy(tp=r.tp, ep=r.ep, pp=r.pp, dp=r.dp, batch=batch)


def _cost_model(m: ModelSpec, cluster: ClusterSpec, wl: Workload, batch: int,
                config: CostModelConfig) -> CostModel:
    """The cost model of one row. A measured request may run past the model's
    ``max_position_embeddings`` (Splitwise prefilled 8,192 tokens on Llama-2-70B's 4,096): a
    planner refuses that, but the row measured it, so the limit is lifted for the row."""
    if m.max_position_embeddings and wl.max_context > m.max_position_embeddings:
        m = dataclasses.replace(m, max_position_embeddings=0)
    space = StrategySpace.build(m, cluster, batch_values=(batch,))
    return CostModel(m, cluster, wl, config=config, space=space)


def _evaluate(r: Measurement, m: ModelSpec, cluster: ClusterSpec, wl: Workload, batch: int,
              config: CostModelConfig) -> Estimate:
    """The row's stated strategy at ``batch`` evaluated by its cost model.

    Raises:
        ConfigError: the row's degrees are not candidates of the strategy space (an EP degree
            that does not divide the routed experts, a TP that is neither a power of two nor a
            divisor of the device count, ...): the product cannot express that configuration.
    """
    cm = _cost_model(m, cluster, wl, batch, config)
    try:
        return cm.evaluate(_strategy(r, batch))
    except ValueError as exc:
        raise ConfigError(f"row {r.id}: {exc}") from None


def _workload(r: Measurement, where: str) -> Workload:
    wd = _dtype(r.weight_dtype, where)
    kd = _dtype(r.kv_dtype, where) if r.kv_dtype else wd
    if r.kind == "throughput":
        if r.isl <= 0 or r.osl <= 0:
            raise ConfigError(f"{where}: a throughput row needs isl and osl")
        return Workload(Phase.SERVE, isl=r.isl, osl=r.osl, weight_dtype=wd, kv_dtype=kd)
    if r.kind == "ttft":
        return Workload(Phase.PREFILL, isl=r.isl, weight_dtype=wd, kv_dtype=kd)
    return Workload(Phase.DECODE, isl=r.isl, weight_dtype=wd, kv_dtype=kd)


def _predict_collective(r: Measurement, m: ModelSpec, cluster: ClusterSpec,
                        config: CostModelConfig) -> float:
    n = max(r.ep, r.tp)
    wl = Workload(Phase.DECODE, isl=1)
    cm = _cost_model(m, cluster, wl, 1, config)
    bw, alpha = cm.link(n)
    if r.metric == "link_bytes_per_s":
        return bw
    kind = _COLLECTIVES[r.collective or "all_to_all"]
    if kind == ALL_TO_ALL:
        # message_bytes = what each rank sends, own share included; the remote part travels.
        return cm.all_to_all_time_s(r.message_bytes * (n - 1) / n, n)
    return float(collective_time_s(np.array([kind]), np.array([n]), np.array([r.message_bytes]),
                                   np.array([bw]), np.array([alpha]))[0])


def row_config(r: Measurement, base: CostModelConfig | None = None) -> CostModelConfig:
    """The factors a row is predicted with: ``base`` (default :class:`CostModelConfig`) with
    the row's engine profile (:data:`~learn_to_shard.cost.config.ENGINE_PROFILES`) applied;
    an engine without a profile uses ``base`` unchanged."""
    cfg = base or CostModelConfig()
    profile = ENGINE_PROFILES.get(r.engine, {})
    return dataclasses.replace(cfg, **{k: v for k, v in profile.items() if not k.startswith("_")})


def _budget_batch(r: Measurement, budget: int) -> int:
    """Largest batch whose serve step fits ``budget`` tokens: ``ceil(ceil(b / m) / dp) ·
    (1 + isl/osl) <= budget`` with ``m = min(pp, b)`` micro-batches
    (``CostModel._step_share`` is 1 up to it)."""
    per = max(1, int(budget // (1.0 + r.isl / r.osl)))
    return per * r.dp * max(r.pp, 1)


def _bench_tokens(r: Measurement, batch: int) -> int:
    """The step budget trtllm-bench builds for ``batch`` requests: ``batch / pp · (1 +
    isl/osl)`` rounded up (to 256 below 4,096, 512 below 8,192, else 1,024; at least 2,048)
    and capped by the row's ``max_num_tokens`` (tensorrt_llm/bench/build/tuning.py
    ``finetune_setting``, whose cap is 32,768)."""
    raw = batch / max(r.pp, 1) * (1.0 + r.isl / r.osl)
    step = 256 if raw < 4096 else 512 if raw < 8192 else 1024
    tokens = max(2048, step * math.ceil(raw / step))
    return min(tokens, r.max_num_tokens or tokens)


def _max_batch(r: Measurement, m: ModelSpec, cluster: ClusterSpec, wl: Workload,
               cfg: CostModelConfig) -> tuple[int, Estimate]:
    """``batch = max``: as many running requests as the KV cache holds, within the engine cap
    ``max_batch`` and, when the row states ``max_num_tokens`` (``cfg`` already carries it as
    the budget), within the token budget the engine builds for that batch (trtllm-bench,
    :func:`_bench_tokens`; the activation workspace is sized for it). The token budget only
    binds serve (throughput) rows. Returns the batch and its estimate.

    With attention-DP (``dp > 1``) the batch counts the requests of the whole instance: each
    of the ``dp`` ranks holds its own ``batch / dp`` requests, so the probe runs one request
    per rank (``batch = dp``, the smallest valid batch), its ``max_batch`` is the group's
    capacity, and every candidate is rounded down to a multiple of ``dp`` (the strategy rule
    ``batch`` of :mod:`learn_to_shard.parallel.space`)."""
    serve = wl.phase is Phase.SERVE
    dp = max(1, r.dp)

    def whole(b: int) -> int:
        """``b`` rounded down to a multiple of ``dp``, at least ``dp``."""
        return max(dp, b // dp * dp)

    batch = dp
    for _ in range(3):             # the budget sizes the workspace, which sizes the KV room
        probe = _evaluate(r, m, cluster, wl, dp, cfg)
        batch = whole(probe.max_batch)
        if r.max_batch:
            batch = whole(min(batch, r.max_batch))
        if not (r.max_num_tokens and serve):
            break
        tokens = _bench_tokens(r, batch)
        if tokens == cfg.max_num_batched_tokens:
            break
        cfg = dataclasses.replace(cfg, max_num_batched_tokens=tokens)
    if serve:
        batch = whole(min(batch, _budget_batch(r, cfg.max_num_batched_tokens)))
    # The linear extrapolation can overshoot by a request; step down until it fits.
    for _ in range(4):
        e = _evaluate(r, m, cluster, wl, batch, cfg)
        if batch == dp or not any(v.startswith("memory") for v in e.violations):
            break
        batch = whole(min(batch - dp, e.max_batch))
    return batch, e


def predict_row(r: Measurement, config: CostModelConfig | None = None, *,
                apply_profile: bool = True) -> RowResult:
    """Predict one row with its stated configuration.

    Args:
        r: the measurement.
        config: cost-model factors (default :class:`CostModelConfig`).
        apply_profile: apply the row's engine profile on top of ``config`` (see
            :func:`row_config`); calibration turns it off to fit the profile's own fields.

    Returns:
        A :class:`RowResult`; never raises for an inexpressible row.
    """
    cfg = row_config(r, config) if apply_profile else (config or CostModelConfig())
    where = f"row {r.id}"
    try:
        m = _resolve_model(r.model)
        dev = _resolve_device(r.hardware)
        cluster = ClusterSpec(dev, max(r.devices, r.tp * r.pp * r.dp, r.ep),
                              name=f"{dev.name}:{r.devices}")
        if r.kind == "collective":
            return RowResult(r, _predict_collective(r, m, cluster, cfg), "ok")
        wl = _workload(r, where)
    except PlannerError as exc:
        why = str(exc).split(";")[0].split(": not a shipped")[0]
        return RowResult(r, None, "not expressible", f"{why} ({r.notes})" if r.notes else why)
    if r.max_num_tokens:
        cfg = dataclasses.replace(cfg, max_num_batched_tokens=r.max_num_tokens)
    batch = r.batch if r.batch is not None else 1
    try:
        if r.batch is None:
            batch, e = _max_batch(r, m, cluster, wl, cfg)
        else:
            e = _evaluate(r, m, cluster, wl, batch, cfg)
    except PlannerError as exc:
        return RowResult(r, None, "not expressible", str(exc).removeprefix(f"{where}: "))
    structural = [v for v in e.violations
                  if not v.startswith(("memory", "tpot_slo", "ttft_slo"))]
    if structural:
        return RowResult(r, None, "not expressible", "; ".join(structural), batch)
    if r.kind == "throughput":
        value = e.output_tokens_per_s
    elif r.kind == "ttft":
        value = e.ttft_s
    else:
        value = e.tpot_s
    mem = [v for v in e.violations if v.startswith("memory")]
    status = "infeasible" if mem else "ok"
    return RowResult(r, float(value), status, mem[0] if mem else "", batch)


# ------------------------------------------------------------------------------ summary
@dataclass(frozen=True)
class KindStats:
    """Error summary of one metric kind on one split."""

    kind: str
    split: str
    n: int
    median_abs: float
    worst_abs: float
    worst_id: str


@dataclass(frozen=True)
class SweepCheck:
    """Whether a TP sweep is predicted in the measured order."""

    sweep: str
    tps: tuple[int, ...]
    measured: tuple[float, ...]
    predicted: tuple[float, ...]
    in_order: bool
    ties: tuple[tuple[int, int], ...] = ()


@dataclass
class ValidationReport:
    """All row results plus the per-kind statistics and the sweep-order checks."""

    table: str
    results: list[RowResult]
    stats: list[KindStats] = field(default_factory=list)
    sweeps: list[SweepCheck] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    operators: list[OperatorStats] = field(default_factory=list)

    def stat(self, kind: str, split: str) -> KindStats | None:
        """The statistics of ``kind`` on ``split`` (``held-out``, ``calibration``, ``all``)."""
        for s in self.stats:
            if s.kind == kind and s.split == split:
                return s
        return None

    def summary_line(self) -> str:
        """One line: held-out median |error| per kind and the sweep-order count."""
        parts = []
        for k in KINDS:
            s = self.stat(k, "held-out")
            if s is not None:
                parts.append(f"{KIND_LABEL[k]} {100 * s.median_abs:.1f}% (n={s.n})")
        ok = sum(1 for s in self.sweeps if s.in_order)
        n_expr = sum(1 for r in self.results if r.predicted is not None)
        return (f"held-out median |error|: {', '.join(parts)}; TP sweeps in measured order: "
                f"{ok}/{len(self.sweeps)}; {n_expr}/{len(self.results)} rows predicted")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready document (SI units)."""
        return {
            "table": self.table,
            "summary": self.summary_line(),
            "config": self.config,
            "stats": [dataclasses.asdict(s) for s in self.stats],
            "sweeps": [dataclasses.asdict(s) for s in self.sweeps],
            "operators": [dataclasses.asdict(s) for s in self.operators],
            "rows": [{
                "id": r.row.id, "model": r.row.model, "hardware": r.row.hardware,
                "engine": r.row.engine, "metric": r.row.metric, "kind": r.row.kind,
                "calibration": r.row.calibration, "measured": r.row.value,
                "predicted": r.predicted, "error": r.error, "status": r.status,
                "reason": r.reason, "batch_used": r.batch_used,
            } for r in self.results],
        }


def _stats(results: Sequence[RowResult]) -> list[KindStats]:
    out = []
    for split, keep in (("held-out", lambda r: not r.row.calibration),
                        ("calibration", lambda r: r.row.calibration), ("all", lambda r: True)):
        for k in KINDS:
            errs = [(abs(r.error), r.row.id) for r in results
                    if r.error is not None and r.row.kind == k and keep(r)]
            if not errs:
                continue
            worst = max(errs)
            out.append(KindStats(k, split, len(errs), statistics.median(e for e, _ in errs),
                                 worst[0], worst[1]))
    return out


def _sweeps(results: Sequence[RowResult]) -> list[SweepCheck]:
    groups: dict[str, list[RowResult]] = {}
    for r in results:
        if r.row.sweep and r.predicted is not None:
            groups.setdefault(r.row.sweep, []).append(r)
    out = []
    for name, rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: r.row.tp)
        if len(rs) < 2:
            continue
        ties = []
        ok = True
        for i in range(len(rs)):
            for j in range(i + 1, len(rs)):
                mi, mj = rs[i].row.value, rs[j].row.value
                if abs(mi - mj) <= TIE_TOLERANCE * max(mi, mj):
                    ties.append((rs[i].row.tp, rs[j].row.tp))
                    continue
                pi, pj = rs[i].predicted or 0.0, rs[j].predicted or 0.0
                if (mi < mj) != (pi < pj):
                    ok = False
        out.append(SweepCheck(name, tuple(r.row.tp for r in rs),
                              tuple(r.row.value for r in rs),
                              tuple(float(r.predicted or 0.0) for r in rs), ok, tuple(ties)))
    return out


def validate(rows: Iterable[Measurement] | None = None, config: CostModelConfig | None = None,
             table: str | Path | None = None, silicon: bool = True) -> ValidationReport:
    """Predict every row and summarise.

    Args:
        rows: measurements (default: read ``table``).
        config: cost-model factors (default :class:`CostModelConfig`).
        table: CSV path when ``rows`` is None (default the shipped table).
        silicon: also compare the per-operator formulas with the kernel tables in
            ``data/silicon`` (:func:`silicon_report`).
    """
    cfg = config or CostModelConfig()
    rs = list(rows) if rows is not None else load_table(table)
    results = [predict_row(r, cfg) for r in rs]
    return ValidationReport(table=str(table or default_table_path()), results=results,
                            stats=_stats(results), sweeps=_sweeps(results),
                            config=dataclasses.asdict(cfg),
                            operators=silicon_report(cfg) if silicon else [])


def save_plot(report: ValidationReport, path: str | Path) -> Path:
    """Predicted-vs-measured log-log scatter, one panel per metric kind, saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[str, str, str | None]] = [(KIND_LABEL[k], k, None) for k in KINDS
                                                 if k != "collective"]
    panels += [("collective time", "collective", "collective_s"),
               ("link bandwidth", "collective", "link_bytes_per_s")]

    def members(kind: str, metric: str | None) -> list[RowResult]:
        return [r for r in report.results if r.row.kind == kind and r.predicted is not None
                and (metric is None or r.row.metric == metric)]

    panels = [p for p in panels if members(p[1], p[2])]
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(4.2 * max(1, len(panels)), 4.2))
    axes = np.atleast_1d(axes)
    for ax, (title, k, metric) in zip(axes, panels, strict=False):
        rs = members(k, metric)
        for cal, marker, label in ((False, "o", "held-out"), (True, "s", "calibration")):
            pts = [(r.row.value, r.predicted) for r in rs if r.row.calibration == cal]
            if pts:
                x, y = zip(*pts, strict=True)
                ax.scatter(x, y, marker=marker, s=18, alpha=0.75, label=label)
        vals = [v for r in rs for v in (r.row.value, float(r.predicted or 0.0))]
        lo, hi = min(vals) / 1.5, max(vals) * 1.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.plot([lo, hi], [lo * 1.2, hi * 1.2], "k:", lw=0.6)
        ax.plot([lo, hi], [lo / 1.2, hi / 1.2], "k:", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        unit = ("tokens/s" if k == "throughput" else "bytes/s" if metric == "link_bytes_per_s"
                else "s")
        ax.set_title(title)
        ax.set_xlabel(f"measured ({unit})")
        ax.set_ylabel(f"predicted ({unit})")
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle("learn-to-shard cost model vs published measurements (dotted: ±20%)",
                 fontsize=9)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def save_json(report: ValidationReport, path: str | Path) -> Path:
    """Write :meth:`ValidationReport.to_dict` as JSON."""
    out = Path(path)
    out.write_text(json.dumps(report.to_dict(), indent=2))
    return out


# ------------------------------------------------------------------------------ calibration
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
    return _coordinate_descent(lambda cfg: calibration_loss(rows, cfg), base, grid, rounds)


def _coordinate_descent(loss: Callable[[CostModelConfig], float], start: CostModelConfig,
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


#: The fits behind the shipped factors (docs/validation.md). The defaults are fitted through
#: the ``trtllm`` profile (its memory policy applied), the Splitwise profiles from the
#: defaults. ``hbm_efficiency`` keeps its prior 0.8: fitted too, it drops to 0.4 and the
#: held-out error rises (docs/validation.md).
CALIBRATIONS: tuple[CalibrationSpec, ...] = (
    CalibrationSpec("defaults", "trtllm", {
        "flops_efficiency": (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8),
        "attention_hbm_efficiency": (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.8)}),
    CalibrationSpec("splitwise-dgx-h100", "splitwise-dgx-h100", {
        "flops_efficiency": (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9),
        "attention_flops_efficiency": (0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.07, 0.1),
        "scale_up_latency_s": (1e-5, 1.25e-5, 1.5e-5, 2e-5, 2.5e-5, 3e-5, 3.5e-5),
        "host_step_overhead_s": (0.0, 1e-3, 2e-3, 4e-3, 6e-3, 8e-3, 1e-2),
        "host_seq_overhead_s": (1e-4, 2e-4, 3e-4, 4e-4, 5e-4),
        "host_prefill_overhead_s": (0.0, 5e-3, 1e-2, 1.5e-2, 2e-2, 3e-2)}),
    CalibrationSpec("splitwise-dgx-a100", "splitwise-dgx-a100", {
        "flops_efficiency": (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9),
        "attention_flops_efficiency": (0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.07, 0.1),
        "scale_up_latency_s": (1e-5, 1.25e-5, 1.5e-5, 2e-5, 2.5e-5, 3e-5, 3.5e-5),
        "host_step_overhead_s": (0.0, 1e-3, 2e-3, 4e-3, 6e-3, 8e-3, 1e-2),
        "host_seq_overhead_s": (1e-4, 2e-4, 3e-4, 4e-4, 5e-4),
        "host_prefill_overhead_s": (0.0, 5e-3, 1e-2, 1.5e-2, 2e-2, 3e-2)}),
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


def calibrate(rows: Sequence[Measurement] | None = None,
              specs: Sequence[CalibrationSpec] = CALIBRATIONS
              ) -> list[tuple[CalibrationSpec, dict[str, float], float, int]]:
    """Re-run the declared fits on the calibration rows (``calibration = 1``) only.

    Starts each fit from the shipped values, so it reports whether they are still a local
    optimum of the grid. Returns (spec, fitted values, loss, rows used) per spec that has
    calibration rows of its engine; a spec without any is left out (there is nothing to fit).

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
        start = row_config(cal[0]) if cal else CostModelConfig()
        cfg, loss = fit_factors(cal, start, spec.grid)
        out.append((spec, {k: getattr(cfg, k) for k in spec.grid}, loss, len(cal)))
    return out


# ------------------------------------------------------------------------------ rendering
def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return "—"
    if metric == "output_tokens_per_s":
        return f"{value:,.0f} tok/s"
    if metric == "link_bytes_per_s":
        return f"{value / 1e9:,.0f} GB/s"
    if value < 1e-3:
        return f"{value * 1e6:,.1f} µs"
    return f"{value * 1e3:,.1f} ms"


def render_validation(report: ValidationReport, console: Any = None, rows: bool = True) -> None:
    """Print the per-row and per-operator tables (when ``rows``), the per-kind error summary
    and the sweep checks."""
    from rich.console import Console
    from rich.table import Table

    con = console or Console()
    if rows:
        t = Table(title=f"predicted vs measured ({report.table})", show_lines=False)
        for col in ("row", "model", "hardware", "kind", "cal", "measured", "predicted",
                    "error"):
            t.add_column(col, justify="right" if col in ("measured", "predicted", "error")
                         else "left")
        for r in report.results:
            err = "—" if r.error is None else f"{100 * r.error:+.1f}%"
            if r.status != "ok":
                err += f" ({r.status})"
            t.add_row(r.row.id, r.row.model, r.row.hardware, r.row.kind,
                      "yes" if r.row.calibration else "", _fmt(r.row.value, r.row.metric),
                      _fmt(r.predicted, r.row.metric), err)
        con.print(t)
        skipped = [r for r in report.results if r.predicted is None]
        for r in skipped:
            con.print(f"not expressible: {r.row.id}: {r.reason}", highlight=False)
    s = Table(title="absolute error per metric kind")
    for col in ("kind", "split", "rows", "median |error|", "worst |error|", "worst row"):
        s.add_column(col)
    for st in report.stats:
        s.add_row(KIND_LABEL[st.kind], st.split, str(st.n), f"{100 * st.median_abs:.1f}%",
                  f"{100 * st.worst_abs:.1f}%", st.worst_id)
    con.print(s)
    for sw in report.sweeps:
        mark = "in order" if sw.in_order else "OUT OF ORDER"
        tie = f" (ties within {100 * TIE_TOLERANCE:.0f}%: {sw.ties})" if sw.ties else ""
        con.print(f"TP sweep {sw.sweep}: tp {list(sw.tps)} {mark}{tie}", highlight=False)
    if report.operators and rows:
        render_silicon(report.operators, con)
    con.print(report.summary_line(), highlight=False)


# ------------------------------------------------------------------------------ silicon
@dataclass(frozen=True)
class OperatorStats:
    """Error of the analytical per-operator formulas against one group of measured kernels.

    Attributes:
        op: ``gemm``, ``decode_attention``, ``prefill_attention`` or a collective name.
        preset: device preset.
        variant: dtype, or the size class (``m<=64`` memory-bound GEMMs, ``<1MB`` latency-bound
            messages, …).
        n: kernels compared.
        median_error: median signed error ``predicted / measured − 1``.
        median_abs, worst_abs: median and worst absolute error.
    """

    op: str
    preset: str
    variant: str
    n: int
    median_error: float
    median_abs: float
    worst_abs: float


def silicon_dir() -> Path:
    """Where the derived kernel tables live (``data/silicon``, see its PROVENANCE.md)."""
    return Path(str(_data_dir() / "silicon"))


def _read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))


_Kernel = tuple[str, str, str, float, float]   # op, preset, variant, predicted_s, measured_s
_SILICON_FILES = ("gemm.csv", "generation_attention.csv", "context_attention.csv", "nccl.csv")


def _silicon_tables(root: Path) -> dict[str, list[dict[str, str]]]:
    """The kernel tables under ``root`` that exist, by file name (read once per report/fit)."""
    return {name: _read_csv(root / name) for name in _SILICON_FILES
            if (root / name).is_file()}


def _silicon_kernels(cfg: CostModelConfig, tables: dict[str, list[dict[str, str]]],
                     ops: Sequence[str] | None = None,
                     preset: str | None = None) -> list[_Kernel]:
    """Every kernel of ``tables`` (optionally only operators ``ops`` on ``preset``) priced
    with the model's own operator formulas at ``cfg``; kernels without a positive time on both
    sides are left out (they say nothing about a rate)."""
    stub = load_model("llama-3.1-8b")
    cms: dict[tuple[str, str, str, int], CostModel] = {}

    def cm(dev: str, wdt: str = "bf16", kvdt: str = "bf16", n: int = 1) -> CostModel:
        key = (dev, wdt, kvdt, n)
        if key not in cms:
            wl = Workload(Phase.DECODE, isl=1, weight_dtype=DType(wdt), kv_dtype=DType(kvdt))
            cl = ClusterSpec(load_device(dev), n)
            cms[key] = CostModel(stub, cl, wl, config=cfg,
                                 space=StrategySpace.build(stub, cl, (1,)))
        return cms[key]

    def rows(name: str, op: str | None = None) -> list[dict[str, str]]:
        return [r for r in tables.get(name, [])
                if (ops is None or (op or r["op"]) in ops)
                and (preset is None or r["preset"] == preset)]

    out: list[_Kernel] = []
    for r in rows("gemm.csv", "gemm"):
        dt = "fp8" if r["dtype"] == "fp8" else "bf16"
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        out.append(("gemm", r["preset"], f"{dt} m<=64" if m <= 64 else f"{dt} m>64",
                    cm(r["preset"], wdt=dt).gemm_time_s(m, n, k), float(r["latency_s"])))
    for r in rows("generation_attention.csv", "decode_attention"):
        kvdt = "fp8" if r["kv_dtype"] == "fp8" else "bf16"
        pred = cm(r["preset"], kvdt=kvdt).attention_time_s(
            int(r["batch"]), 1, float(r["kv_len"]), int(r["heads"]), int(r["kv_heads"]),
            int(r["head_dim"]))
        out.append(("decode_attention", r["preset"], f"kv {kvdt}", pred, float(r["latency_s"])))
    for r in rows("context_attention.csv", "prefill_attention"):
        isl = int(r["isl"])
        pred = cm(r["preset"]).attention_time_s(int(r["batch"]), isl, isl / 2, int(r["heads"]),
                                                int(r["kv_heads"]), int(r["head_dim"]))
        out.append(("prefill_attention", r["preset"], "bf16", pred, float(r["latency_s"])))
    kinds = {"all_reduce": ALL_REDUCE, "all_gather": GATHER_OR_SCATTER,
             "reduce_scatter": GATHER_OR_SCATTER}
    for r in rows("nccl.csv"):
        n, size = int(r["num_gpus"]), float(r["message_bytes"])
        model = cm(r["preset"], n=8)
        if r["op"] == "alltoall":      # nccl-tests size: what each rank sends
            pred = model.all_to_all_time_s(size * (n - 1) / n, n)
        else:
            bw, alpha = model.link(n)
            pred = float(collective_time_s(np.array([kinds[r["op"]]]), np.array([n]),
                                           np.array([size]), np.array([bw]),
                                           np.array([alpha]))[0])
        out.append((r["op"], r["preset"], "<1MB" if size < 1e6 else ">=1MB", pred,
                    float(r["latency_s"])))
    return [k for k in out if k[3] > 0 and k[4] > 0]


def silicon_report(config: CostModelConfig | None = None,
                   folder: str | Path | None = None) -> list[OperatorStats]:
    """Predict every kernel of the aiconfigurator-derived tables with the model's own operator
    formulas (:meth:`CostModel.gemm_time_s`, :meth:`CostModel.attention_time_s`,
    :meth:`CostModel.all_to_all_time_s`, the collective formulas on :meth:`CostModel.link`)
    and summarise the errors per operator, device and variant. Empty when the tables are
    absent."""
    tables = _silicon_tables(Path(folder) if folder is not None else silicon_dir())
    groups: dict[tuple[str, str, str], list[float]] = {}
    for op, preset, variant, pred, meas in _silicon_kernels(config or CostModelConfig(), tables):
        groups.setdefault((op, preset, variant), []).append(pred / meas - 1.0)
    out = []
    for (op, preset, variant), errs in sorted(groups.items()):
        a = [abs(e) for e in errs]
        out.append(OperatorStats(op, preset, variant, len(errs), statistics.median(errs),
                                 statistics.median(a), max(a)))
    return out


@dataclass(frozen=True)
class KernelFitSpec:
    """One kernel-level fit: which operators of the silicon tables, which factors, which grids.

    Attributes:
        name: label of the operator group.
        ops: operator names in the tables (``gemm``, ``decode_attention``, ...).
        variant_prefix: keep only kernels whose variant starts with this (``bf16``, ``fp8``).
        grid: factor -> candidate values (coordinate descent, as :func:`fit_factors`).
    """

    name: str
    ops: tuple[str, ...]
    variant_prefix: str
    grid: dict[str, tuple[float, ...]]


_EFF = tuple(round(0.05 * i, 2) for i in range(2, 21))         # 0.10 .. 1.00
#: The kernel-level fits ``l2s validate --fit-silicon`` runs, per device. The GEMM shape curve
#: ``Π d / (d + gemm_shape_half)`` is fitted together with the GEMM rates.
KERNEL_FITS: tuple[KernelFitSpec, ...] = (
    KernelFitSpec("gemm bf16", ("gemm",), "bf16", {
        "flops_efficiency": _EFF, "hbm_efficiency": _EFF,
        "gemm_shape_half": (0.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)}),
    KernelFitSpec("gemm fp8", ("gemm",), "fp8", {
        "fp8_flops_efficiency": _EFF, "hbm_efficiency": _EFF,
        "gemm_shape_half": (0.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)}),
    KernelFitSpec("decode attention", ("decode_attention",), "", {
        "attention_hbm_efficiency": _EFF}),
    KernelFitSpec("prefill attention", ("prefill_attention",), "", {
        "attention_flops_efficiency": _EFF}),
    KernelFitSpec("collectives (one node)", ("all_reduce", "all_gather", "reduce_scatter",
                                             "alltoall"), "", {
        "scale_up_efficiency": _EFF,
        "scale_up_latency_s": (1e-6, 2e-6, 3e-6, 4e-6, 5e-6, 6e-6, 8e-6, 1e-5, 1.5e-5)}),
)


@dataclass(frozen=True)
class KernelFit:
    """Result of one :class:`KernelFitSpec` on one device.

    Attributes:
        spec: the fit.
        preset: device preset.
        n: kernels fitted.
        values: fitted factor values; ``shipped``: the values in effect in the shipped model
            (a ``None`` factor resolved to what it falls back to).
        median_abs_before, median_abs_after: median |predicted / measured − 1| at the shipped
            and at the fitted values.
    """

    spec: KernelFitSpec
    preset: str
    n: int
    values: dict[str, float]
    shipped: dict[str, float]
    median_abs_before: float
    median_abs_after: float


def _effective(cfg: CostModelConfig, name: str, preset: str) -> float:
    """The value a factor has in effect: ``None`` means "as another factor" or "the device
    preset's" (see :class:`CostModelConfig`)."""
    v = getattr(cfg, name)
    if v is not None:
        return float(v)
    fallback = {"fp8_flops_efficiency": "flops_efficiency",
                "attention_flops_efficiency": "flops_efficiency",
                "attention_hbm_efficiency": "hbm_efficiency"}
    if name in fallback:
        return float(getattr(cfg, fallback[name]))
    return float(getattr(load_device(preset), name))


def fit_silicon(config: CostModelConfig | None = None, folder: str | Path | None = None,
                specs: Sequence[KernelFitSpec] = KERNEL_FITS) -> list[KernelFit]:
    """Fit the operator factors on the measured kernels, per device (item 5 of issue 3).

    For each spec (in order) and device, coordinate descent over the spec's grids (loss: mean
    ``|ln(predicted / measured)|`` over the kernels), starting from the shipped factors with
    the earlier specs' fits for that device applied (prefill attention reads the KV-stream
    efficiency the decode-attention fit found). What it reports
    is a check of the shipped end-to-end factors against kernels, not a replacement for them:
    the end-to-end calibration (:data:`CALIBRATIONS`) decides what ships. Empty when the
    tables are absent.
    """
    base = config or CostModelConfig()
    tables = _silicon_tables(Path(folder) if folder is not None else silicon_dir())
    presets = sorted({r["preset"] for rows in tables.values() for r in rows})
    out: list[KernelFit] = []
    carried = {dev: base for dev in presets}   # later fits start from earlier ones' values
    for spec in specs:
        for dev in presets:
            def kernels(cfg: CostModelConfig, spec: KernelFitSpec = spec,
                        dev: str = dev) -> list[_Kernel]:
                return [k for k in _silicon_kernels(cfg, tables, spec.ops, dev)
                        if k[2].startswith(spec.variant_prefix)]

            def loss(cfg: CostModelConfig) -> float:
                ks = kernels(cfg)
                return sum(abs(math.log(p / m)) for _, _, _, p, m in ks) / max(1, len(ks))

            first = kernels(base)
            if not first:
                continue
            cfg, _ = _coordinate_descent(loss, carried[dev], spec.grid)
            carried[dev] = cfg

            def med(ks: list[_Kernel]) -> float:
                return statistics.median(abs(p / m - 1.0) for _, _, _, p, m in ks)

            out.append(KernelFit(spec, dev, len(first),
                                 {k: _effective(cfg, k, dev) for k in spec.grid},
                                 {k: _effective(base, k, dev) for k in spec.grid},
                                 med(first), med(kernels(cfg))))
    return out


def _table(title: str, columns: Sequence[str]) -> Any:
    """A rich table with these column headers."""
    from rich.table import Table

    t = Table(title=title)
    for col in columns:
        t.add_column(col)
    return t


def render_kernel_fits(fits: Sequence[KernelFit], console: Any = None) -> None:
    """Print the kernel-level fits: fitted vs shipped factors and the error before/after."""
    from rich.console import Console

    con = console or Console()
    t = _table("operator factors fitted on measured kernels (per device; a check of the "
               "shipped end-to-end factors, not adopted)",
               ("operators", "device", "kernels", "factor", "shipped", "fitted",
                "median |error|"))
    for f in fits:
        for i, (name, value) in enumerate(f.values.items()):
            t.add_row(f.spec.name if i == 0 else "", f.preset if i == 0 else "",
                      str(f.n) if i == 0 else "", name, f"{f.shipped[name]:g}", f"{value:g}",
                      f"{100 * f.median_abs_before:.0f}% -> {100 * f.median_abs_after:.0f}%"
                      if i == 0 else "")
    con.print(t)


def render_silicon(stats: Sequence[OperatorStats], console: Any = None) -> None:
    """Print the per-operator error table."""
    from rich.console import Console

    con = console or Console()
    t = _table("per-operator error vs measured kernels (aiconfigurator-core tables, "
               "data/silicon)", ("operator", "device", "variant", "kernels", "median error",
                                 "median |error|", "worst |error|"))
    for s in stats:
        t.add_row(s.op, s.preset, s.variant, str(s.n), f"{100 * s.median_error:+.0f}%",
                  f"{100 * s.median_abs:.0f}%", f"{100 * s.worst_abs:.0f}%")
    con.print(t)
