"""What a sweep prints and draws: the summary table, the cheapest cluster per workload, the
fleet sizes for request rates, and two plots.

* ``tokens_per_device.png``: best feasible tokens/s per device against the device count, one
  line per device kind, one panel per (model, workload);
* ``cheapest.png``: per (model, workload), the cheapest cluster meeting the SLOs — the fleet
  for the workload's ``rate_rps`` when it has one (:mod:`learn_to_shard.sweep.sizing`), else
  the smallest searched cluster with a feasible plan; cost per hour where the grid prices the
  device kind, else devices.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..errors import PlannerError
from ..hardware.presets import parse_cluster
from .sizing import Fleet, budget_fractions_text, size_fleets

Row = Mapping[str, object]


@functools.lru_cache(maxsize=256)
def _node_size(cluster: str) -> int:
    try:
        return parse_cluster(cluster).device.host_devices
    except PlannerError:
        return 1


def node_sizes(rows: Sequence[Row]) -> dict[str, int]:
    """Device kind → devices per node: its host size (``DeviceSpec.host_devices``), read
    from the rows' clusters
    (the kind's node, not the cluster searched: a fleet of 4 H100s is one node of 8, though
    its cells were searched on 2-device clusters)."""
    out: dict[str, int] = {}
    for r in rows:
        if r.get("device"):
            out[str(r["device"])] = max(out.get(str(r["device"]), 1),
                                        _node_size(str(r["cluster"])))
    return out


def _ok(r: Row) -> bool:
    return bool(r.get("feasible")) and not r.get("error")


def _tps(r: Row) -> float:
    v = r.get("tokens_per_s_per_device")
    return float(v) if isinstance(v, (int, float)) else 0.0


def _ms(v: object) -> str:
    return f"{float(v) * 1e3:.1f}" if isinstance(v, (int, float)) and math.isfinite(v) else "–"


def best_rows(rows: Sequence[Row]) -> dict[tuple[str, str, str, str], tuple[Row | None, int, int,
                                                                          int]]:
    """Per (model, workload, engine, cluster): the best feasible row (or None) and the counts
    of cells, feasible cells and failed cells."""
    out: dict[tuple[str, str, str, str], tuple[Row | None, int, int, int]] = {}
    for r in rows:
        k = (str(r["model"]), str(r["workload"]), str(r["engine"]), str(r["cluster"]))
        best, n, feas, err = out.get(k, (None, 0, 0, 0))
        if _ok(r) and (best is None or _tps(r) > _tps(best)):
            best = r
        out[k] = (best, n + 1, feas + _ok(r), err + bool(r.get("error")))
    return out


@dataclass(frozen=True)
class Cheapest:
    """The cheapest way found to serve one (model, workload) within its SLOs.

    Attributes:
        model, workload: what is served.
        device: device kind; devices: how many; cost_per_hour: ``devices × price`` (None
            when the kind has no price).
        strategy: the plan (one instance); tokens_per_s_per_device: its throughput.
        how: ``"cluster h100-sxm:8"`` (smallest searched cluster with a feasible plan) or
            ``"3 × 2 devices for 20 req/s"`` (a fleet, :class:`~.sizing.Fleet`).
        engine: the sweep row's engine label (``EngineSpec.label``: ``default`` without a
            profile, ``vllm``, ``sglang(mem=0.8)``…; ``None`` in rows that carry none); a grid
            of several engines compares them, so the answer names the one it runs.
    """

    model: str
    workload: str
    device: str
    devices: int
    cost_per_hour: float | None
    strategy: str
    tokens_per_s_per_device: float
    how: str
    engine: str | None = None


def _cost_key(c: Cheapest) -> tuple[float, int, float]:
    return (c.cost_per_hour if c.cost_per_hour is not None else math.inf, c.devices,
            -c.tokens_per_s_per_device)


def cheapest(rows: Sequence[Row], prices: Mapping[str, float],
             oversized: list[tuple[str, str, str]] | None = None) -> list[Cheapest]:
    """Per (model, workload), the cheapest cluster meeting the SLOs (see the module
    docstring): cost per hour first where priced, then devices, then throughput. Rows whose
    fleet for the workload's ``rate_rps`` would exceed the largest cluster are appended to
    ``oversized`` as ``(model, workload, why)`` (:func:`~.sizing.size_fleets`)."""
    fleets = size_fleets(rows, prices=prices, node_sizes=node_sizes(rows), skip_oversized=True,
                         oversized=oversized)
    found: dict[tuple[str, str], Cheapest] = {}

    def offer(c: Cheapest) -> None:
        k = (c.model, c.workload)
        if k not in found or _cost_key(c) < _cost_key(found[k]):
            found[k] = c

    for f in fleets:
        if not f.queue_slo_met:           # a prefill fleet whose queue misses the TTFT SLO
            continue
        offer(Cheapest(f.model, f.workload, f.device, f.devices, f.cost_per_hour, f.strategy,
                       f.tokens_per_s_per_device,
                       f"{f.replicas} × {f.instance_devices} devices for {f.rate_rps:g} req/s",
                       f.engine))
    rated = {(f.model, f.workload) for f in fleets}
    for r in rows:
        if not _ok(r) or (str(r["model"]), str(r["workload"])) in rated \
                or r.get("rate_rps") is not None:
            continue
        n = int(r["cluster_devices"])                    # type: ignore[call-overload]
        price = prices.get(str(r["device"]))
        offer(Cheapest(str(r["model"]), str(r["workload"]), str(r["device"]), n,
                       None if price is None else n * price, str(r["strategy"]), _tps(r),
                       f"cluster {r['cluster']}", str(r["engine"]) if r.get("engine") else None))
    return sorted(found.values(), key=lambda c: (c.model, c.workload))


def prefill_rate_fleets(rows: Sequence[Row], items: Sequence[Cheapest]
                        ) -> list[tuple[str, str]]:
    """The ``(model, workload)`` answers of :func:`cheapest` that size a prefill fleet for a
    ``rate_rps`` under a TTFT SLO: sized on the grid's own SLO, where ``l2s size`` also
    searches tighter TTFT budgets (:data:`~.sizing.PREFILL_TTFT_BUDGETS`), so its answer can be
    smaller."""
    out = []
    for c in items:
        if any(str(r.get("model")) == c.model and str(r.get("workload")) == c.workload
               and r.get("phase") == "prefill" and r.get("rate_rps") is not None
               and r.get("ttft_slo_s") is not None for r in rows):
            out.append((c.model, c.workload))
    return out


def unbounded_wait(rows: Sequence[Row], items: Sequence[Cheapest]) -> list[tuple[str, str]]:
    """The ``(model, workload)`` answers of :func:`cheapest` that rank clusters of a closed
    loop (``concurrency``) without a TTFT SLO and whose answer keeps clients waiting for a
    batch slot (more clients than its instances' batches): a smaller cluster serves the same
    clients with more of them waiting, which only a TTFT SLO would refuse."""
    out = []
    for c in items:
        mine = [r for r in rows if str(r.get("model")) == c.model
                and str(r.get("workload")) == c.workload]
        if not mine or any(r.get("ttft_slo_s") is not None for r in mine):
            continue
        picked = [r for r in mine if _ok(r) and str(r.get("device")) == c.device
                  and r.get("cluster_devices") == c.devices
                  and str(r.get("strategy")) == c.strategy]
        waits = [int(str(r["concurrency"])) > int(str(r.get("batch") or 0))
                 * int(str(r.get("instances") or 0)) for r in picked
                 if r.get("concurrency") is not None]
        if any(waits):
            out.append((c.model, c.workload))
    return out


def _compact_table(title: str) -> Table:
    """The sweep's and sizing's tables: a rule under the header and no other lines, one space
    between columns, so that they fit a terminal of ~100 columns."""
    return Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                 show_edge=False)


def _add_column(t: Table, header: str, *, numeric: bool) -> None:
    """A right-aligned numeric column, or a text column (names, strategies) that a narrow
    terminal wraps at its spaces and then folds, never cut to an ellipsis."""
    t.add_column(header, justify="right" if numeric else "left",
                 overflow="ellipsis" if numeric else "fold")


def summary_table(rows: Sequence[Row]) -> Table:
    """One line per (model, workload, engine, cluster): the best feasible plan over the
    searchers, budgets and seeds, and how many cells ran, were feasible, failed."""
    t = _compact_table("sweep: best feasible plan per model, workload, engine and cluster")
    for col in ("model", "workload", "engine", "cluster", "best\ntok/s/dev", "strategy",
                "TPOT\nms", "TTFT\nms", "cluster\nreq/s", "by", "cells ok/\ninfeasible/\nerror"):
        _add_column(t, col, numeric=col[0].isupper() or "tok" in col or "req" in col)
    for (model, wl, eng, cluster), (b, n, feas, err) in best_rows(rows).items():
        if b is None:
            t.add_row(model, wl, eng, cluster, "–", "none feasible" if n > err else "failed",
                      "–", "–", "–", "–", f"{feas}/{n - feas - err}/{err}")
            continue
        # The cluster's requests/s from its tokens/s (bounded by a closed loop's clients,
        # aggregate.latency), not the instances' slot rate times their number.
        ctps = b.get("cluster_tokens_per_s")
        per = b.get({"serve": "osl", "prefill": "isl"}.get(str(b.get("phase")), ""))
        creq = f"{float(ctps) / int(per):,.2f}" if isinstance(ctps, float) and \
            isinstance(per, int) and per > 0 else "–"
        t.add_row(model, wl, eng, cluster, f"{_tps(b):,.1f}", str(b["strategy"]),
                  _ms(b.get("tpot_s")), _ms(b.get("ttft_s")), creq,
                  f"{b['searcher']} s{b['seed']}", f"{feas}/{n - feas - err}/{err}")
    return t


def cheapest_table(items: Sequence[Cheapest]) -> Table:
    """The cheapest cluster (or fleet) meeting each workload's SLOs."""
    t = _compact_table("cheapest cluster meeting the SLOs, per model and workload")
    for col in ("model", "workload", "engine", "device", "devices", "cost\n/hour", "how",
                "strategy", "tok/s\n/dev"):
        _add_column(t, col, numeric=col in ("devices", "cost\n/hour", "tok/s\n/dev"))
    for c in items:
        t.add_row(c.model, c.workload, c.engine or "default", c.device, str(c.devices),
                  "–" if c.cost_per_hour is None else f"{c.cost_per_hour:,.2f}", c.how,
                  c.strategy, f"{c.tokens_per_s_per_device:,.1f}")
    return t


def fleet_table(fleets: Sequence[Fleet]) -> Group:
    """Fleet sizes per device kind (``l2s size``), cheapest (or smallest) first: a table of
    the numbers, then one line per kind with its replicas of the plan (a fleet the serving
    simulation enlarged names its steady-state replica count,
    :attr:`~.sizing.Fleet.steady_replicas`) and the cluster it was searched on. The model,
    workload and rate that every row shares are named in the title, not repeated per row, and
    the strategies are below the table, so its numbers fit a terminal of 100 columns without
    wrapping; fleets of several sizings get model, workload and rate columns."""
    shared = {(f.model, f.workload, f.rate_rps) for f in fleets}
    apart = len(shared) > 1
    title = "fewest devices per kind serving the rate within the SLOs"
    if not apart and fleets:
        f0 = fleets[0]
        title = (f"fewest devices per kind serving {f0.rate_rps:g} req/s of {f0.model} "
                 f"({f0.workload}) within the SLOs")
    t = _compact_table(title)
    queued = any(f.queue_wait_s is not None for f in fleets)
    left = ("model", "workload", "device")
    # two-line headers: the columns are as wide as their numbers
    for col in (*(("model", "workload", "req/s") if apart else ()), "device", "devices",
                "nodes", "cost\n/hour", "replicas", "req/s per\nreplica", "load", "tok/s\n/dev",
                "TPOT\nms", "TTFT\nms", *(("+ queue\nms",) if queued else ())):
        _add_column(t, col, numeric=col not in left)
    plans = []
    for f in fleets:
        wait = () if not queued else (
            "–" if f.queue_wait_s is None
            else _ms(f.queue_wait_s) + ("" if f.queue_slo_met else " (over SLO)"),)
        t.add_row(*((f.model, f.workload, f"{f.rate_rps:g}") if apart else ()), f.device,
                  f"{f.devices:,}", f"{f.nodes:,}",
                  "–" if f.cost_per_hour is None else f"{f.cost_per_hour:,.2f}",
                  f"{f.replicas:,}", f"{f.instance_requests_per_s:,.2f}",
                  f"{100 * f.utilization:.0f}%",
                  f"{f.tokens_per_s_per_device:,.1f}", _ms(f.tpot_s), _ms(f.ttft_s), *wait)
        plans.append(Text(
            f"{f.device}{f' ({f.model}, {f.workload})' if apart else ''}: {f.replicas:,} × "
            f"{f.strategy}"
            + (f" (steady state: {f.steady_replicas:,})" if f.steady_replicas else "")
            + f", searched on {f.searched_cluster} ({f.searcher})"
            + (f" with TTFT ≤ {_ms(f.searched_ttft_slo_s)} ms (a shorter pass leaves the "
               f"queue more of the SLO)" if f.searched_ttft_slo_s is not None else "")))
    return Group(t, *plans)


def render_sweep(rows: Sequence[Row], prices: Mapping[str, float], console: Console) -> None:
    """Print the summary table, the cheapest-cluster table and the first failures."""
    console.print(summary_table(rows))
    oversized: list[tuple[str, str, str]] = []
    items = cheapest(rows, prices, oversized)
    if items:
        console.print(cheapest_table(items))
        for model, workload in unbounded_wait(rows, items):
            console.print(f"note: {model} ({workload}): a closed loop with no TTFT SLO, so "
                          f"the cheapest cluster is the smallest whose plan meets the other "
                          f"limits, however long its clients wait for a batch slot (their "
                          f"wait is in its TTFT); set ttft_slo in the grid to bound it",
                          markup=False, highlight=False)
        tighter = budget_fractions_text()
        for model, workload in prefill_rate_fleets(rows, items):
            console.print(f"note: {model} ({workload}): the prefill fleet is sized on plans "
                          f"searched at the grid's TTFT SLO, whose queue must fit in what the "
                          f"pass leaves of it; l2s size also searches at {tighter} of the "
                          f"SLO (a shorter pass leaves the queue more) and can need fewer "
                          f"devices", markup=False, highlight=False)
    answered = {(c.model, c.workload) for c in items}
    said: set[tuple[str, str]] = set()
    for model, workload, why in oversized:       # a rate no fleet of the grid serves
        if (model, workload) not in answered and (model, workload) not in said:
            said.add((model, workload))
            console.print(f"no fleet for {model} ({workload}): {why}", markup=False,
                          highlight=False)
    errors = [r for r in rows if r.get("error")]
    for r in errors[:5]:
        console.print(f"failed: {r['model']} {r['cluster']} {r['workload']} {r['searcher']} "
                      f"seed {r['seed']}: {r['error']}", markup=False, highlight=False)
    if len(errors) > 5:
        console.print(f"… and {len(errors) - 5} more failed cells (column 'error')")


def _figure(nrows: int, ncols: int, width_in: float, height_in: float):  # -> (fig, axes)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=(width_in, height_in), squeeze=False)
    return plt, fig, axes


def plot_tokens_per_device(rows: Sequence[Row], path: Path) -> Path:
    """Best feasible tokens/s per device against device count, a line per device kind and a
    panel per (model, workload); saved to ``path``."""
    panels: dict[tuple[str, str], dict[str, dict[int, float]]] = {}
    for r in rows:
        if not r.get("device") or r.get("cluster_devices") is None:
            continue
        lines = panels.setdefault((str(r["model"]), str(r["workload"])), {})
        pts = lines.setdefault(str(r["device"]), {})
        n = int(r["cluster_devices"])                    # type: ignore[call-overload]
        pts[n] = max(pts.get(n, 0.0), _tps(r) if _ok(r) else 0.0)
    keys = sorted(panels)
    cols = min(3, max(1, len(keys)))
    nrow = max(1, math.ceil(len(keys) / cols))
    plt, fig, axes = _figure(nrow, cols, 4.6 * cols, 3.4 * nrow)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, keys, strict=False):
        for device, pts in sorted(panels[key].items()):
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], marker="o", label=device)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{key[0]}, {key[1]}", fontsize=9)
        ax.set_xlabel("devices in the cluster")
        ax.set_ylabel("best tokens/s per device")
        top = max((v for pts in panels[key].values() for v in pts.values()), default=0.0)
        ax.set_ylim(0, top * 1.25 if top > 0 else 1.0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_cheapest(items: Sequence[Cheapest], path: Path) -> Path:
    """One bar per (model, workload): the cost per hour of the cheapest cluster meeting the
    SLOs when every bar is priced, else its device count; labelled with device, engine and
    plan."""
    priced = bool(items) and all(c.cost_per_hour is not None for c in items)
    plt, fig, axes = _figure(1, 1, 8.0, 0.9 + 0.45 * max(1, len(items)))
    ax = axes[0, 0]
    ys = list(range(len(items)))
    vals = [float(c.cost_per_hour) if priced else float(c.devices)  # type: ignore[arg-type]
            for c in items]
    ax.barh(ys, vals, color="tab:blue")
    ax.set_yticks(ys, [f"{c.model}\n{c.workload}" for c in items], fontsize=7)
    for y, v, c in zip(ys, vals, items, strict=True):
        ax.text(v, y, f"  {c.device}, {c.engine or 'default'}: {c.how}", va="center",
                fontsize=7)
    ax.set_xlabel("cost per hour" if priced else "devices")
    ax.set_title("cheapest cluster meeting the SLOs", fontsize=10)
    ax.set_xlim(0, max(vals, default=1.0) * 1.9 or 1.0)
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
