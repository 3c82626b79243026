"""Statistics of a validation run: errors per metric kind and split, TP-sweep order.

Errors are signed relative errors ``predicted / measured − 1``; summaries give the median and
worst absolute error per metric kind, separately for the declared calibration rows
(``calibration = 1``) and the held-out rest.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cost.config import CostModelConfig
from .kernels import OperatorStats, silicon_report
from .measurements import KIND_LABEL, KINDS, Measurement, default_table_path, load_table
from .predict import RowResult, check_names, predict_row

__all__ = ["KindStats", "SweepCheck", "ValidationReport", "validate", "TIE_TOLERANCE"]

#: Measured values closer than this (relative) count as a tie in the TP-sweep order check:
#: the measured medians themselves vary by more than this run to run.
TIE_TOLERANCE = 0.02


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
        """One line: held-out median |error| per kind, the sweep-order count (where the table
        has TP sweeps) and the rows predicted."""
        parts = []
        for k in KINDS:
            s = self.stat(k, "held-out")
            if s is not None:
                parts.append(f"{KIND_LABEL[k]} {100 * s.median_abs:.1f}% (n={s.n})")
        ok = sum(1 for s in self.sweeps if s.in_order)
        n_expr = sum(1 for r in self.results if r.predicted is not None)
        sweeps = f"; TP sweeps in measured order: {ok}/{len(self.sweeps)}" \
            if self.sweeps else ""
        errors = ", ".join(parts) or "no held-out row predicted"
        return (f"held-out median |error|: {errors}{sweeps}; "
                f"{n_expr}/{len(self.results)} rows predicted")

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

    Raises:
        ConfigError: the table cannot be read, or a row's model or hardware cell looks like
            a mistake (a missing file, a typo of a known name: :func:`~.predict.check_names`).
    """
    cfg = config or CostModelConfig()
    rs = list(rows) if rows is not None else load_table(table)
    check_names(rs, table if table is not None else "the rows given" if rows is not None
                else default_table_path())
    results = [predict_row(r, cfg) for r in rs]
    return ValidationReport(table=str(table or default_table_path()), results=results,
                            stats=_stats(results), sweeps=_sweeps(results),
                            config=dataclasses.asdict(cfg),
                            operators=silicon_report(cfg) if silicon else [])


