"""``l2s sweep``: run every cell of a grid that is not in the results yet, and record it.

:func:`run_sweep` expands the grid, skips the cells whose key is already in the journal
(resume), runs the rest through :func:`learn_to_shard.sweep.execute.execute` (local
processes or Ray tasks) with :func:`learn_to_shard.sweep.cells.run_cell`, appends each row to
the journal as it arrives, and rewrites ``results.parquet``/``results.csv`` at the end, also
when interrupted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from .cells import error_row, run_cell
from .execute import execute
from .grid import Cell, SweepGrid, expand
from .store import JOURNAL, Journal, read_journal, write_tables


@dataclass
class SweepResult:
    """What one :func:`run_sweep` call did.

    Attributes:
        cells: every cell of the grid, in grid order.
        rows: the results: one row per key (the latest), grid cells first in grid order,
            then rows of cells no longer in the grid.
        ran: keys of the cells run by this call, in completion order.
        skipped: cells whose rows were already in the journal.
        parquet, csv: the files written.
        interrupted: the run was stopped (Ctrl-C) before every cell ran.
    """

    cells: list[Cell]
    rows: list[dict[str, object]]
    ran: list[str] = field(default_factory=list)
    skipped: int = 0
    parquet: Path | None = None
    csv: Path | None = None
    interrupted: bool = False

    @property
    def grid_rows(self) -> list[dict[str, object]]:
        """The rows of this grid's cells, in grid order: what a summary of this run reads
        (``rows`` also holds the folder's rows of other grids, which the result files keep)."""
        keys = {c.key() for c in self.cells}
        return [r for r in self.rows if str(r["key"]) in keys]

    @property
    def other_rows(self) -> int:
        """Rows in the folder of cells not in this grid (an earlier run's, kept)."""
        return len(self.rows) - len(self.grid_rows)


def ordered_rows(cells: list[Cell], journal_rows: list[dict[str, object]]
                 ) -> list[dict[str, object]]:
    """One row per key (the last written wins), in grid order, then the journal's others.
    A row of one of ``cells`` carries that cell's workload label: the label is not part of
    the key, so a row run under another grid's ``name`` for the same settings is shown under
    this grid's."""
    latest: dict[str, dict[str, object]] = {}
    for row in journal_rows:
        latest[str(row["key"])] = row
    label = {c.key(): c.workload.label for c in cells}
    keys = list(label)
    return [latest[k] | {"workload": label[k]} for k in keys if k in latest] + \
        [r for k, r in latest.items() if k not in label]


def run_sweep(grid: SweepGrid, out: Path, *, workers: int = 1, ray_address: str | None = None,
              retry_errors: bool = False, on_start: Callable[[int, int], None] | None = None,
              on_row: Callable[[dict[str, object]], None] | None = None) -> SweepResult:
    """Run the grid's missing cells and write the results into folder ``out``.

    Args:
        grid: the validated grid.
        out: results folder (``rows.jsonl``, ``results.parquet``, ``results.csv``).
        workers: local worker processes; ray_address: run as Ray tasks on this cluster instead
            (see :func:`~learn_to_shard.sweep.execute.execute`).
        retry_errors: run again the cells whose recorded row has an error.
        on_start: called with (cells to run, cells skipped) before any runs.
        on_row: called with each new row as it is written (drives the progress bar).

    Returns:
        A :class:`SweepResult`.

    Raises:
        ConfigError: unreadable journal, unwritable folder, bad ``workers``, Ray missing or
            unreachable.
    """
    if workers < 1:
        raise ConfigError(f"--workers: must be >= 1, got {workers}")
    cells = expand(grid)
    done = {str(r["key"]): r for r in read_journal(out / JOURNAL)}
    todo = [c for c in cells if c.key() not in done
            or (retry_errors and done[c.key()].get("error"))]
    result = SweepResult(cells=cells, rows=[], skipped=len(cells) - len(todo))
    if on_start is not None:
        on_start(len(todo), result.skipped)
    journal = Journal(out)

    def record(cell: Cell, row: dict[str, object]) -> None:
        journal.append(row)
        result.ran.append(str(row["key"]))
        if on_row is not None:
            on_row(row)

    try:
        execute(run_cell, todo, workers=workers, ray_address=ray_address, on_result=record,
                on_error=lambda cell, exc: error_row(cell, exc))
    except KeyboardInterrupt:
        result.interrupted = True
    finally:
        journal.close()
        result.rows = ordered_rows(cells, read_journal(out / JOURNAL))
        if result.rows:
            result.parquet, result.csv = write_tables(result.rows, out)
    return result
