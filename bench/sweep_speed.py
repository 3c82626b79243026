"""Speed-up of a 2-worker sweep over a 1-worker sweep on the same grid, side by side.

The grid (2 models × 2 clusters × 2 searchers × 4 seeds = 32 cells, budgets of 400
evaluations) is run with 1 and with 2 local worker processes in alternation (A B A B …), each
run into a fresh folder so no cell is skipped, and the wall time of every run (worker start-up
included) is printed with the 1-worker/2-worker ratio of each pair and of the medians. On a
machine whose cores are shared with other work the ratio moves with that load; the alternation
exposes both variants to it alike.

    .venv/bin/python bench/sweep_speed.py [--pairs 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from learn_to_shard.sweep import expand, grid_from_data, run_sweep

GRID = {
    "models": ["llama-3.1-8b", "qwen3-30b-a3b"],
    "clusters": ["h100-sxm:8", "h200:16"],
    "workloads": [{"name": "chat", "phase": "serve", "isl": 1024, "osl": 256,
                   "tpot_slo": "50ms"}],
    "searchers": ["random", "sa"],
    "budgets": [400],
    "seeds": [0, 1, 2, 3],
}


def _timed(workers: int) -> float:
    """Wall seconds of one full sweep of :data:`GRID` with ``workers`` processes."""
    grid = grid_from_data(GRID, "bench/sweep_speed.py")
    with tempfile.TemporaryDirectory(prefix="l2s-sweep-speed") as tmp:
        t0 = time.perf_counter()
        res = run_sweep(grid, Path(tmp), workers=workers)
        wall = time.perf_counter() - t0
    assert len(res.ran) == len(expand(grid)) and not any(r["error"] for r in res.rows)
    return wall


def main() -> None:
    """Alternate 1- and 2-worker sweeps and print the ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, help="A/B pairs to run")
    args = ap.parse_args()
    cells = len(expand(grid_from_data(GRID, "bench/sweep_speed.py")))
    print(f"{cells} cells per sweep; {args.pairs} pairs of (1 worker, 2 workers)")
    one, two = [], []
    for i in range(args.pairs):
        a = _timed(1)
        b = _timed(2)
        one.append(a)
        two.append(b)
        print(f"pair {i + 1}: 1 worker {a:.2f} s, 2 workers {b:.2f} s, speed-up {a / b:.2f}x",
              flush=True)
    ratios = [a / b for a, b in zip(one, two, strict=True)]
    m1, m2 = statistics.median(one), statistics.median(two)
    print(f"median: 1 worker {m1:.2f} s, 2 workers {m2:.2f} s, speed-up {m1 / m2:.2f}x "
          f"(per-pair {min(ratios):.2f}–{max(ratios):.2f}x)")


if __name__ == "__main__":
    main()
