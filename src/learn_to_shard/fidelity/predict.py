"""Prediction: one measurement row -> the cost model's value for it.

Each row is predicted with *the configuration it was measured under* (never a searched one)
by the same :class:`~learn_to_shard.cost.model.CostModel` the planner uses:

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

Rows whose model or metric the product cannot express are reported as such, with the reason;
a model or hardware cell that looks like a mistake (a typo of a known name, a path that cannot
be read) is bad input (:func:`check_names`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..cost.comm import ALL_TO_ALL, collective_time_s
from ..cost.config import ENGINE_PROFILES, CostModelConfig
from ..cost.model import CostModel, Estimate
from ..errors import ConfigError, PlannerError, UnsupportedModelError
from ..hardware.presets import ALIASES, device_names, load_device, load_device_file
from ..hardware.spec import ClusterSpec, DeviceSpec
from ..model.hf_config import load_model, shipped_model_names
from ..model.spec import ModelSpec
from ..parallel.space import StrategySpace
from ..parallel.strategy import Strategy
from ..workload import DType, Phase, Workload
from .measurements import COLLECTIVES, Measurement, data_dir, looks_like_path

__all__ = ["RowResult", "predict_row", "row_config", "resolve_model", "resolve_device",
           "check_names", "known_names", "row_files", "bench_tokens"]


def _dtype(text: str, where: str) -> DType:
    """fp16 runs at the bf16 rate and size on every shipped device, so it maps to BF16."""
    if text in ("fp16", "bf16", "float16", "bfloat16", ""):
        return DType.BF16
    if text == "fp8":
        return DType.FP8
    raise ConfigError(f"{where}: precision {text!r} is not expressible (fp16, bf16, fp8)")


def _validation_file(kind: str, key: str) -> Path | None:
    """``data/validation/<kind>/<key>.json`` (``kind``: ``models`` or ``devices``) where it
    exists: the configs the shipped measurement table names beside the shipped ones."""
    path = Path(str(data_dir() / "validation" / kind / f"{key}.json"))
    return path if path.is_file() else None


def resolve_model(name: str) -> ModelSpec:
    """A shipped model, a config under data/validation/models (either in any case, as
    ``--model`` takes shipped names), or a config.json path."""
    if name in shipped_model_names():
        return load_model(name)
    extra = _validation_file("models", name.lower())
    if extra is not None:
        spec = load_model(str(extra))
        return dataclasses.replace(spec, name=name)
    return load_model(name)


def resolve_device(name: str) -> DeviceSpec:
    """A device preset, a device file under data/validation/devices, or a device JSON path
    (:func:`~.measurements.looks_like_path`)."""
    extra = _validation_file("devices", name.strip().lower())
    if extra is not None:
        return load_device_file(str(extra))
    if looks_like_path(name):
        return load_device_file(name)
    return load_device(name)


def row_files(r: Measurement) -> tuple[Path | None, Path | None]:
    """The local model config and device file a row reads, as :func:`resolve_model` and
    :func:`resolve_device` find them (``None`` for a shipped or validation name, a preset, or
    a path that names no file): what an output of ``l2s validate`` may not overwrite."""
    def file_of(path: Path) -> Path | None:
        try:
            return path / "config.json" if path.is_dir() else path if path.is_file() else None
        except (OSError, ValueError):
            return None

    model, device = r.model_ref, r.hardware_ref
    model_file = None if model in shipped_model_names() \
        or _validation_file("models", model.lower()) else file_of(Path(model))
    device_file = None if _validation_file("devices", device.strip().lower()) \
        or not looks_like_path(device) else file_of(Path(device))
    return model_file, device_file


def known_names(column: str) -> list[str]:
    """The names a table's ``model`` (``column`` ``"model"``) or ``hardware`` cell may give
    without a path: shipped models and the configs under ``data/validation/models``, or
    device presets, their aliases and the files under ``data/validation/devices``; sorted."""
    if column == "model":
        names = set(shipped_model_names())
        folder = data_dir() / "validation" / "models"
    else:
        names = set(device_names()) | set(ALIASES)
        folder = data_dir() / "validation" / "devices"
    names |= {e.name.removesuffix(".json") for e in folder.iterdir() if e.name.endswith(".json")}
    return sorted(names)


def check_names(rows: Iterable[Measurement], table: str | Path) -> None:
    """Refuse a row whose ``model`` or ``hardware`` cell looks like a mistake.

    A cell that :func:`resolve_model` / :func:`resolve_device` cannot read is a mistake
    when it is a path (it holds ``/`` or ``\\`` or ends in ``.json``: a missing or malformed
    file) or a name close to one l2s knows (:func:`known_names`; ``difflib`` ratio >= 0.8,
    the loader's rule for ``--model``): a typo. A name close to none (the shipped table's
    ``bloom-176b``, a device such as ``v100``) is a model or device l2s does not have, and the
    row is listed "not expressible" with the reason, as is a model it reads but cannot
    model (:class:`~learn_to_shard.errors.UnsupportedModelError`).

    Raises:
        ConfigError: the first such row, naming ``table``, the row's id, the column and the
            close name or the loader's reason.
    """
    seen: set[tuple[str, str]] = set()
    for r in rows:
        for column, name in (("model", r.model_ref), ("hardware", r.hardware_ref)):
            if (column, name) in seen:
                continue
            seen.add((column, name))
            try:
                resolve_model(name) if column == "model" else resolve_device(name)
            except UnsupportedModelError:
                continue
            except ConfigError as exc:
                where = f"{table}: row {r.id}, column '{column}'"
                if looks_like_path(name):
                    # the loader words it for the --model flag; here the cell is the input
                    raise ConfigError(f"{where}: {str(exc).removeprefix('--model ')}") from None
                near = difflib.get_close_matches(name.lower(), known_names(column), n=1,
                                                 cutoff=0.8)
                if near:
                    raise ConfigError(
                        f"{where}: {name!r} names no {column} l2s has; did you mean "
                        f"{near[0]}? (l2s {'models' if column == 'model' else 'devices'} "
                        f"lists them; a name close to none is listed as not expressible)"
                    ) from None


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
    kind = COLLECTIVES[r.collective or "all_to_all"]
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


def bench_tokens(r: Measurement, batch: int) -> int:
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
    :func:`bench_tokens`; the activation workspace is sized for it). The token budget only
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
        tokens = bench_tokens(r, batch)
        if tokens == cfg.max_num_batched_tokens:
            break
        cfg = dataclasses.replace(cfg, max_num_batched_tokens=tokens)
    if serve:
        batch = whole(min(batch, _budget_batch(r, cfg.token_budget)))
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
        m = resolve_model(r.model_ref)
        dev = resolve_device(r.hardware_ref)
        cfg = cfg.for_device(dev)
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


