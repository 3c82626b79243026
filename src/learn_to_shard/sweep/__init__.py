"""Fleet sweeps: many plans at once, on local processes or a Ray cluster.

``grid`` (the YAML schema and its cells) → ``cells`` (one search → one row, in a worker) →
``execute`` (process pool or Ray tasks, one code path) → ``store`` (journal, Parquet, CSV) →
``runner`` (:func:`run_sweep`: resume, incremental rows) → ``sizing`` (fleets for a request
rate) and ``report`` (tables, plots). ``l2s sweep`` and ``l2s size`` are thin wrappers.
"""

from __future__ import annotations

from .grid import Cell, SweepGrid, expand, grid_from_data, load_grid
from .runner import SweepResult, run_sweep
from .sizing import Fleet, requests_per_s, size_fleets

__all__ = ["Cell", "Fleet", "SweepGrid", "SweepResult", "expand", "grid_from_data",
           "load_grid", "requests_per_s", "run_sweep", "size_fleets"]
