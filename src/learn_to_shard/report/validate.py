"""Rendering of fidelity results: tables, the predicted-vs-measured plot, the JSON report.

Everything measured, predicted, counted or fitted lives in :mod:`learn_to_shard.fidelity`;
this module only prints and draws it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..fidelity.kernels import KernelFit, MLAKernel, MoEStats, OperatorStats
from ..fidelity.measurements import KIND_LABEL, KINDS
from ..fidelity.predict import RowResult
from ..fidelity.stats import TIE_TOLERANCE, ValidationReport

__all__ = ["render_validation", "save_plot", "save_json", "render_silicon",
           "render_kernel_fits"]


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


def save_json(report: ValidationReport, path: str | Path,
              extra: dict[str, object] | None = None) -> Path:
    """Write :meth:`ValidationReport.to_dict` as JSON, with the keys of ``extra`` beside it
    (``l2s validate --serving``: ``serving``)."""
    out = Path(path)
    out.write_text(json.dumps({**report.to_dict(), **(extra or {})}, indent=2), encoding="utf-8")
    return out



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
    con.print(report.summary_line(), highlight=False, soft_wrap=True)   # one line, unwrapped



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


def render_moe_kernels(shipped: Sequence[MoEStats], without: Sequence[MoEStats],
                       console: Any = None) -> None:
    """Print the routed-expert block against ``moe.csv``: median signed error per (split,
    device, token class) at the shipped factors and ``without`` (the block's fixed cost and
    narrow-GEMM curve off), and the EP8-over-expert-TP8 time ratio, measured and predicted
    (shipped, and without)."""
    from rich.console import Console

    con = console or Console()
    t = _table("MoE expert block vs measured kernels (data/silicon/moe.csv, balanced routing; "
               "CostModelConfig.moe_block_overhead_s, expert_shape_half)",
               ("split", "device", "tokens", "kernels", "median error",
                "without block cost and curve", "EP8 / TP8 measured", "predicted",
                "predicted without"))
    before = {(s.split, s.preset, s.tokens): s for s in without}
    for s in shipped:
        b = before.get((s.split, s.preset, s.tokens))
        ratio, old = s.ep_over_tp, b.ep_over_tp if b else None
        t.add_row(s.split, s.preset, s.tokens, str(s.n), f"{100 * s.median_error:+.0f}%",
                  f"{100 * b.median_error:+.0f}%" if b else "",
                  f"{ratio[0]:.2f}" if ratio else "", f"{ratio[1]:.2f}" if ratio else "",
                  f"{old[1]:.2f}" if old else "")
    con.print(t)


def render_mla_kernels(shipped: Sequence[MLAKernel], without: Sequence[MLAKernel],
                       console: Any = None) -> None:
    """Print the MLA module against ``mla.csv``: median signed error per (device, module,
    batch class) at the shipped factors and ``without`` (the module's fixed cost off and its
    KV stream at the GQA attention's end-to-end bandwidth fraction, as before both were
    fitted)."""
    from rich.console import Console

    con = console or Console()
    t = _table("MLA module vs measured kernels (data/silicon/mla.csv; "
               "CostModelConfig.mla_module_overhead_s, mla_attention_hbm_efficiency)",
               ("device", "module", "batch", "kernels", "median error",
                "without module cost, at the GQA bandwidth"))

    def groups(ks: Sequence[MLAKernel]) -> dict[tuple[str, str, str], list[float]]:
        out: dict[tuple[str, str, str], list[float]] = {}
        for k in ks:
            key = (k.preset, k.module, "1–8" if k.batch <= 8 else ">= 64")
            out.setdefault(key, []).append(k.predicted_s / k.measured_s - 1)
        return out

    before = groups(without)
    for key, errs in sorted(groups(shipped).items()):
        b = before.get(key)
        t.add_row(*key, str(len(errs)), f"{100 * float(np.median(errs)):+.0f}%",
                  f"{100 * float(np.median(b)):+.0f}%" if b else "")
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
