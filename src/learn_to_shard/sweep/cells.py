"""One cell of a sweep, run in a worker process or a Ray task: the search and its row.

:func:`run_cell` never raises for a problem with the cell itself: bad input or a crash becomes
a row with ``error`` set, so one failing cell does not stop the sweep. An infeasible problem is
not an error: its row has ``feasible = False`` and the reasons; so is a cell whose engine cannot
serve the model on its device (an engine × device grid meets such pairs).

Row columns (:data:`COLUMNS`; SI units, names carry units):

* inputs: ``key`` (:meth:`Cell.key`), ``inputs`` (:attr:`Cell.inputs`: the hash of the model
  and cluster files read, null for shipped names and ``DEVICE:COUNT``; rows of a file before
  and after an edit differ in it), ``model``, ``cluster``, ``device`` (kind),
  ``cluster_devices``, ``workload`` (label), ``phase``, ``isl`` (the prompt priced: with
  ``images_per_request``, the images' tokens included), ``osl``, ``dtype``,
  ``kv_dtype``, ``ttft_slo_s``, ``tpot_slo_s``, ``rate_rps``, ``concurrency``,
  ``images_per_request``, ``engine``,
  ``gpu_memory_utilization``, ``max_num_batched_tokens`` (the budget the cell ran: unset,
  the engine's default for the device), ``searcher``, ``budget``, ``seed``;
* answer: ``feasible``, ``method_used``, ``strategy`` (``Strategy.short()``), ``tp``, ``ep``,
  ``etp``, ``pp``, ``dp``, ``cp`` (decode context parallelism: ranks of the TP group that
  split each sequence's KV cache; adds no devices), ``batch``, ``instance_devices``
  (``pp·tp·dp``), ``instances``,
  ``placements`` (JSON: operator → ``Shard(d)``/``Replicate()``), ``export_command``;
* estimate: ``tokens_per_s_per_device``, ``instance_tokens_per_s``, ``cluster_tokens_per_s``
  (``instances × instance_tokens_per_s``), ``instance_requests_per_s`` (see
  :func:`learn_to_shard.sweep.sizing.requests_per_s`), ``tpot_s``, ``ttft_s``,
  ``memory_per_device_bytes`` (worst stage), ``reasons`` (why infeasible);
* run: ``evaluations``, ``search_wall_s`` (the searcher's), ``wall_s`` (the whole cell:
  loading, search, plan assembly), ``error`` (``Type: message``, else null), ``version``.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time

from .. import __version__
from ..api import check_engine_serves, cost_config, make_cost_model, search_plan
from ..cost.model import CostModel
from ..errors import ContextLengthError, EngineRefusalError, PlannerError
from ..hardware.presets import parse_cluster
from ..model.hf_config import load_model
from ..report.plan import Plan, join_reasons, one_output_token
from ..search import get_searcher
from ..search.base import SearchResult
from .grid import Cell
from .sizing import requests_per_s

#: (column, type) of every row, in order; types are ``str``, ``int``, ``float``, ``bool``.
COLUMNS: tuple[tuple[str, type], ...] = (
    ("key", str), ("inputs", str), ("model", str), ("cluster", str), ("device", str),
    ("cluster_devices", int), ("workload", str), ("phase", str), ("isl", int), ("osl", int),
    ("dtype", str), ("kv_dtype", str), ("ttft_slo_s", float), ("tpot_slo_s", float),
    ("rate_rps", float), ("concurrency", int), ("images_per_request", int), ("engine", str),
    ("gpu_memory_utilization", float), ("max_num_batched_tokens", int), ("searcher", str),
    ("budget", int), ("seed", int),
    ("feasible", bool), ("method_used", str), ("strategy", str), ("tp", int), ("ep", int),
    ("etp", int), ("pp", int), ("dp", int), ("cp", int), ("batch", int),
    ("instance_devices", int),
    ("instances", int), ("placements", str), ("export_command", str),
    ("tokens_per_s_per_device", float), ("instance_tokens_per_s", float),
    ("cluster_tokens_per_s", float), ("instance_requests_per_s", float), ("tpot_s", float),
    ("ttft_s", float), ("memory_per_device_bytes", float), ("reasons", str),
    ("evaluations", int), ("search_wall_s", float), ("wall_s", float), ("error", str),
    ("version", str),
)


def _one_thread() -> None:
    """One intra-op thread per worker (the pool or Ray gives each cell one core)."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


@functools.lru_cache(maxsize=8)
def _cost_model(cell_problem: str) -> CostModel:
    """The cost model of a cell's problem (model, cluster, workload, engine), cached per
    process: cells that differ only in searcher, budget or seed share it."""
    cell = Cell.model_validate_json(cell_problem)
    e = cell.engine
    spec = load_model(cell.model)
    cm = make_cost_model(spec, cell.cluster, cell.workload.workload(spec, e.name),
                           cost_config(e.name, e.gpu_memory_utilization,
                                       e.max_num_batched_tokens), engine=e.name)
    check_engine_serves(e.name, "engine", cm)
    return cm


def cost_model_of(cell: Cell) -> CostModel:
    """The (per-process cached) cost model of ``cell``.

    Raises:
        ConfigError, UnsupportedModelError: the model, cluster or workload is refused.
    """
    problem = cell.model_copy(update={"searcher": "auto", "budget": 1, "seed": 0})
    return _cost_model(problem.model_dump_json())


def search_cell(cell: Cell) -> SearchResult:
    """Run the cell's searcher and return its raw :class:`SearchResult` (with the convergence
    curve; ``bench/paper_table1.py`` uses it). ``auto`` is not accepted here (it is a plan
    policy, not one searcher; use :func:`run_cell`).

    Raises:
        ConfigError, UnsupportedModelError: bad cell inputs; KeyError: unknown searcher.
    """
    searcher = get_searcher(cell.searcher)         # may import torch (rl)
    _one_thread()
    return searcher.search(cost_model_of(cell), cell.budget, cell.seed)


def export_command(plan: Plan, cell: Cell, cm: CostModel) -> str | None:
    """The launch script of ``plan`` for the cell's engine (``report.export``: the same text
    as ``l2s plan --export ENGINE``), for the ``export_command`` column; None when the cell's
    engine is not one the exporter serves (no engine, or a fitted profile such as
    ``splitwise-dgx-h100``) or nothing is feasible."""
    from ..report.export import EXPORT_ENGINES, build_export

    engine = cell.engine.name
    if engine not in EXPORT_ENGINES or plan.best is None:
        return None
    return build_export(plan, engine, model=cm.model,
                        devices_per_node=cm.cluster.device.host_devices,
                        cost_model=cm).text()


def _inputs(cell: Cell) -> dict[str, object]:
    wl, e = cell.workload, cell.engine
    try:
        w = wl.workload(load_model(cell.model), e.name)
    except PlannerError:
        w = wl.workload()
    budget = e.max_num_batched_tokens
    try:
        c = parse_cluster(cell.cluster)
        device, count = c.device.name, c.num_devices
        if budget is None:          # the engine's default for this device, as the cell runs
            budget = cost_config(e.name, e.gpu_memory_utilization).for_device(
                c.device).token_budget
    except PlannerError:
        device, count = None, None
    return {"key": cell.key(), "inputs": cell.inputs, "model": cell.model,
            "cluster": cell.cluster,
            "device": device, "cluster_devices": count, "workload": wl.label,
            "phase": wl.phase, "isl": w.isl, "osl": w.osl, "dtype": w.weight_dtype.value,
            "kv_dtype": w.kv_dtype.value, "ttft_slo_s": w.ttft_slo_s,
            "tpot_slo_s": w.tpot_slo_s, "rate_rps": wl.rate_rps,
            "concurrency": wl.concurrency, "images_per_request": wl.images_per_request,
            "engine": e.label,
            "gpu_memory_utilization": e.gpu_memory_utilization,
            "max_num_batched_tokens": budget, "searcher": cell.searcher,
            "budget": cell.budget, "seed": cell.seed, "version": __version__}


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def empty_row(cell: Cell) -> dict[str, object]:
    """A row with the cell's inputs and every other column null."""
    row: dict[str, object] = dict.fromkeys(name for name, _ in COLUMNS)
    row.update(_inputs(cell))
    return row


def error_row(cell: Cell, exc: BaseException, wall_s: float = 0.0) -> dict[str, object]:
    """The row of a cell that failed: inputs, ``error = "Type: message"`` (one line)."""
    row = empty_row(cell)
    row["error"] = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    row["wall_s"] = wall_s
    return row


def plan_row(cell: Cell, plan: Plan, cm: CostModel, wall_s: float) -> dict[str, object]:
    """The row of a finished cell (see the module docstring for the columns)."""
    row = empty_row(cell)
    row.update(feasible=plan.feasible, method_used=plan.method_used,
               evaluations=int(plan.search["evaluations"]),    # type: ignore[call-overload]
               search_wall_s=float(plan.search["wall_s"]),     # type: ignore[arg-type]
               wall_s=wall_s, reasons=join_reasons(plan.reasons) or None)
    b = plan.best
    if b is not None:
        s = b.strategy
        row.update(strategy=s.short(), tp=s.tp, ep=s.ep, etp=s.etp, pp=s.pp, dp=s.dp, cp=s.cp,
                   batch=s.batch, instance_devices=s.devices, instances=b.instances,
                   placements=json.dumps(s.placements(), sort_keys=True),
                   export_command=export_command(plan, cell, cm),
                   tokens_per_s_per_device=_finite(b.tokens_per_s_per_device),
                   instance_tokens_per_s=_finite(b.instance_tokens_per_s),
                   cluster_tokens_per_s=_finite(b.cluster_tokens_per_s),
                   instance_requests_per_s=_finite(requests_per_s(b.instance_tokens_per_s,
                                                                  cm.workload)),
                   # One output token per request has no TPOT (as the plan says).
                   tpot_s=None if one_output_token(cm.workload) else _finite(b.tpot_s),
                   ttft_s=_finite(b.ttft_s),
                   memory_per_device_bytes=_finite(b.memory.total_bytes))
    return row


def _grid_field_names(message: str) -> str:
    """A :class:`~learn_to_shard.errors.ContextLengthError`'s message with ``l2s plan``'s flags
    spelled as the grid's workload fields (``--isl + --osl`` → ``isl + osl``)."""
    for flag, field in (("--isl + --osl", "isl + osl"), ("--context", "context"),
                        ("--images-per-request", "images_per_request"), ("--isl", "isl")):
        message = message.replace(flag, field)
    return message


def run_cell(cell: Cell) -> dict[str, object]:
    """Run one cell: build (or reuse) its cost model, search, assemble the plan, make the row.

    Returns:
        The row (a dict over :data:`COLUMNS`): an infeasible row with the reason where the
        cell's requests exceed the model's positions
        (:class:`~learn_to_shard.errors.ContextLengthError`, in the grid's field names) or its
        engine cannot serve the model on its device
        (:class:`~learn_to_shard.errors.EngineRefusalError`), as ``l2s size`` leaves such a
        device out; on any other exception the row of :func:`error_row`, never a raise.
    """
    t0 = time.perf_counter()
    try:
        _one_thread()
        cm = cost_model_of(cell)
        plan = search_plan(cm, method=cell.searcher, budget=cell.budget, seed=cell.seed,
                           engine=cell.engine.name)
        return plan_row(cell, plan, cm, time.perf_counter() - t0)
    except (EngineRefusalError, ContextLengthError) as exc:   # no strategy serves it: an answer
        row = empty_row(cell)
        why = _grid_field_names(str(exc)) if isinstance(exc, ContextLengthError) else str(exc)
        row.update(feasible=False, reasons=why, wall_s=time.perf_counter() - t0)
        return row
    except Exception as exc:   # noqa: BLE001 -- a failing cell is recorded, the sweep goes on
        return error_row(cell, exc, time.perf_counter() - t0)
