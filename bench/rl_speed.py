"""Wall time of one RL search on the paper's scenario, pinned to one CPU core.

One ``rl`` search with the paper's budget (4000 evaluations) on GPT-MoE-1.6T, decode at 32k
context, H100 × 24,576. Prints the wall time, the time per evaluation and, for scale, how long
the cost model alone takes for the same number of single-strategy evaluations (the part of
each step that is not learning). Target (issue 4): ≤ 60 s on one core; the paper reports
under 10 minutes.

    .venv/bin/python bench/rl_speed.py [--budget 4000] [--seed 0] [--context 32768]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from learn_to_shard.api import make_cost_model, make_workload  # noqa: E402
from learn_to_shard.search import get_searcher  # noqa: E402


def pin_one_core() -> str:
    """Restrict this process to one CPU core where the OS allows it; say which."""
    if hasattr(os, "sched_setaffinity"):
        core = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})
        return f"pinned to core {core}"
    return "not pinned (no sched_setaffinity)"


def main() -> None:
    """Run one search and print the timings."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="gpt-moe-1.6t")
    ap.add_argument("--context", type=int, default=32768)
    args = ap.parse_args()
    where = pin_one_core()
    cm = make_cost_model(args.model, "h100-sxm:24576", make_workload("decode",
                                                                    context=args.context))
    searcher = get_searcher("rl")
    searcher.search(cm, 16, args.seed)             # warm-up: imports, first torch calls
    t0 = time.perf_counter()
    r = searcher.search(cm, args.budget, args.seed)
    wall = time.perf_counter() - t0
    rows = cm.space.sample(np.random.default_rng(args.seed), args.budget)
    t1 = time.perf_counter()
    for a in rows:
        cm.evaluate_many(a[None, :])
    cost_only = time.perf_counter() - t1
    print(f"scenario: {args.model} decode context={args.context} on h100-sxm:24576, "
          f"budget {args.budget}, seed {args.seed}, {where}")
    print(f"rl search: {r.evaluations} evaluations in {wall:.1f} s "
          f"({1e3 * wall / max(r.evaluations, 1):.2f} ms/evaluation; "
          f"{r.notes['agents']} agents, {r.notes['early_exits']} early exits); "
          f"best {r.best_objective:.2f} tokens/s/device")
    print(f"cost model alone, {args.budget} single-strategy evaluations: {cost_only:.1f} s "
          f"({100 * cost_only / wall:.0f} % of the search)")
    print(f"target <= 60 s: {'met' if wall <= 60 else 'NOT met'}")


if __name__ == "__main__":
    main()
