"""Batched cost-model evaluations per second on the paper's GPT-MoE-1.6T scenario, one core.

Prints the rate of ``CostModel.evaluate_many`` on uniform random action vectors (the mix a
search sees) and, side by side in the same run, the rate of the scalar ``evaluate`` path, so
the ratio is measured under the same machine load. Target (issue 2): ≥ 50,000 batched
evaluations/s.

With ``--against REV`` the same measurement also runs on an older commit (a ``git worktree``
of it, ``bench/_against.py``), alternating with this tree in child processes under the same
load, and the new/old ratio of the batched and single-row rates is printed (issue 11: at
least 0.8).

    .venv/bin/python bench/eval_speed.py [--batch 4096] [--repeat 5] [--against REV]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from learn_to_shard.api import make_cost_model, make_workload  # noqa: E402


def measure(batch: int, repeat: int, context: int) -> tuple[float, float, float]:
    """Batched and single-row ``evaluate_many`` rates (evaluations/s) and the space size."""
    wl = make_workload("decode", context=context)
    cm = make_cost_model("gpt-moe-1.6t", "h100-sxm:24576", wl)
    rng = np.random.default_rng(0)
    acts = cm.space.sample(rng, batch)
    cm.evaluate_many(acts[:16])  # warm-up
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        cm.evaluate_many(acts)
        best = min(best, time.perf_counter() - t0)
    n_scalar = 200
    t0 = time.perf_counter()
    for a in acts[:n_scalar]:
        cm.evaluate_many(a[None, :])
    return batch / best, n_scalar / (time.perf_counter() - t0), float(cm.space.size)


def main() -> None:
    """Run the benchmark and print evaluations per second (and the new/old ratios)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--context", type=int, default=16384)
    ap.add_argument("--against", metavar="REV", default=None,
                    help="also run on this older commit and print the new/old ratios")
    ap.add_argument("--rounds", type=int, default=3, help="with --against: runs per tree")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        batched, scalar, _ = measure(args.batch, args.repeat, args.context)
        print(json.dumps({"batched": batched, "single": scalar}))
        return
    if args.against:
        from _against import run_against

        new, old = run_against(args.against, Path(__file__).resolve(),
                               ["--batch", str(args.batch), "--repeat", str(args.repeat),
                                "--context", str(args.context)], args.rounds,
                               {"batched": "max", "single": "max"})
        print(f"scenario: gpt-moe-1.6t decode context={args.context} on h100-sxm:24576; "
              f"this tree vs {args.against}, alternating, best of {args.rounds} each")
        for key in ("batched", "single"):
            print(f"{key} evaluate_many: new {new[key]:,.0f}/s, old {old[key]:,.0f}/s, "
                  f"new/old = {new[key] / old[key]:.2f}x")
        return
    batched, scalar, size = measure(args.batch, args.repeat, args.context)
    print(f"scenario: gpt-moe-1.6t decode context={args.context} on h100-sxm:24576 "
          f"(space {size:.3g})")
    print(f"batched evaluate_many: {batched:,.0f} evaluations/s (batch {args.batch}, best of "
          f"{args.repeat}); target >= 50,000/s: {'met' if batched >= 50_000 else 'NOT met'}")
    print(f"single-row evaluate_many: {scalar:,.0f} evaluations/s; batched/single = "
          f"{batched / scalar:.1f}x")


if __name__ == "__main__":
    main()
