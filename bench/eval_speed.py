"""Batched cost-model evaluations per second on the paper's GPT-MoE-1.6T scenario, one core.

Prints the rate of ``CostModel.evaluate_many`` on uniform random action vectors (the mix a
search sees) and, side by side in the same run, the rate of the scalar ``evaluate`` path, so
the ratio is measured under the same machine load. Target (issue 2): ≥ 50,000 batched
evaluations/s.

    .venv/bin/python bench/eval_speed.py [--batch 4096] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from learn_to_shard.api import make_cost_model, make_workload  # noqa: E402


def main() -> None:
    """Run the benchmark and print evaluations per second."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--context", type=int, default=16384)
    args = ap.parse_args()
    wl = make_workload("decode", context=args.context)
    cm = make_cost_model("gpt-moe-1.6t", "h100-sxm:24576", wl)
    rng = np.random.default_rng(0)
    acts = cm.space.sample(rng, args.batch)
    cm.evaluate_many(acts[:16])  # warm-up
    best = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        cm.evaluate_many(acts)
        best = min(best, time.perf_counter() - t0)
    batched = args.batch / best
    n_scalar = 200
    t0 = time.perf_counter()
    for a in acts[:n_scalar]:
        cm.evaluate_many(a[None, :])
    scalar = n_scalar / (time.perf_counter() - t0)
    print(f"scenario: gpt-moe-1.6t decode context={args.context} on h100-sxm:24576 "
          f"(space {cm.space.size:.3g})")
    print(f"batched evaluate_many: {batched:,.0f} evaluations/s (batch {args.batch}, best of "
          f"{args.repeat}); target >= 50,000/s: {'met' if batched >= 50_000 else 'NOT met'}")
    print(f"single-row evaluate_many: {scalar:,.0f} evaluations/s; batched/single = "
          f"{batched / scalar:.1f}x")


if __name__ == "__main__":
    main()
