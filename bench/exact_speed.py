"""Wall time of the exact searcher on the paper's largest setting, one core.

GPT-MoE 1.6T, decode at 16k context, over ``h100-sxm:24576`` (issue 5 target: exact finishes in
<= 10 s on one core). Megatron's exhaustive degree search runs side by side in the same process,
as a reference ratio under the same machine load; both optima and the exact certificate are
printed. The same exact search also runs on the previous batch grid (powers of two 1 … 2**16,
certified over that grid only) and the ratio of the two wall times is printed: the default
space's grid plus the integer refinement certifies over every batch 1 … 2**16. The process pins
itself to one CPU and one BLAS/OpenMP thread.

With ``--against REV`` the exact search alone runs on this tree and on an older commit (a
``git worktree`` of it, ``bench/_against.py``), alternating in child processes under the same
load, and the new/old speed ratio (old wall time / new wall time; issue 11: at least 0.8) and
both optima are printed.

    .venv/bin/python bench/exact_speed.py [--context 16384] [--repeat 3] [--against REV]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

from learn_to_shard.api import make_cost_model, make_workload  # noqa: E402
from learn_to_shard.cost import CostModel  # noqa: E402
from learn_to_shard.parallel import StrategySpace  # noqa: E402
from learn_to_shard.search.exact import ExactSearcher  # noqa: E402
from learn_to_shard.search.megatron import MegatronSearcher  # noqa: E402

#: Issue 5's time limit for this case, seconds.
TARGET_S = 10.0


def _pin_one_core() -> str:
    """Restrict this process to one CPU (Linux); returns a description."""
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    return "not pinned (no sched_setaffinity)"


def main() -> None:
    """Run both searches ``--repeat`` times and print the best wall times and their ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt-moe-1.6t")
    ap.add_argument("--cluster", default="h100-sxm:24576")
    ap.add_argument("--context", type=int, default=16384)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each; the best time counts")
    ap.add_argument("--no-pin", action="store_true", help="do not pin to one CPU")
    ap.add_argument("--against", metavar="REV", default=None,
                    help="run the exact search on this older commit too; print new/old")
    ap.add_argument("--rounds", type=int, default=2, help="with --against: runs per tree")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    pin = "not pinned" if args.no_pin else _pin_one_core()
    cm = make_cost_model(args.model, args.cluster, make_workload("decode", context=args.context))
    if args.child:
        t_best, obj = float("inf"), 0.0
        grid = cm.space
        for _ in range(args.repeat):
            cm.space = grid
            t0 = time.perf_counter()
            obj = ExactSearcher().search(cm, None, 0).best_objective
            t_best = min(t_best, time.perf_counter() - t0)
        print(json.dumps({"exact_s": t_best, "objective": obj}))
        return
    if args.against:
        from _against import run_against

        child = ["--model", args.model, "--cluster", args.cluster, "--context",
                 str(args.context), "--repeat", str(args.repeat)] + \
            (["--no-pin"] if args.no_pin else [])
        new, old = run_against(args.against, Path(__file__).resolve(), child, args.rounds,
                               {"exact_s": "min", "objective": "max"})
        print(f"scenario: {args.model} decode context={args.context} on {args.cluster}; "
              f"this tree vs {args.against}, alternating, best of {args.rounds} x "
              f"{args.repeat} each ({pin})")
        print(f"exact: new {new['exact_s']:.2f} s, old {old['exact_s']:.2f} s, new/old speed = "
              f"{old['exact_s'] / new['exact_s']:.2f}x; optimum new {new['objective']:.6f}, "
              f"old {old['objective']:.6f} tokens/s/device")
        return
    pow2 = tuple(1 << i for i in range(17))
    old = CostModel(cm.model, cm.cluster, cm.workload, cm.config,
                    space=StrategySpace.build(cm.model, cm.cluster, batch_values=pow2))
    grid = cm.space
    t_exact = t_meg = t_old = float("inf")
    ex = mg = ox = None
    ex_short = "-"
    for _ in range(args.repeat):
        cm.space = grid                  # the search adds off-grid optimum batches to it
        t0 = time.perf_counter()
        ex = ExactSearcher().search(cm, None, 0)
        t_exact = min(t_exact, time.perf_counter() - t0)
        ex_short = cm.space.decode(ex.best_action).short() if ex.best_action is not None else "-"
        t0 = time.perf_counter()
        ox = ExactSearcher().search(old, None, 0)
        t_old = min(t_old, time.perf_counter() - t0)
        cm.space = grid
        t0 = time.perf_counter()
        mg = MegatronSearcher().search(cm, None, 0)
        t_meg = min(t_meg, time.perf_counter() - t0)
    assert ex is not None and mg is not None and ox is not None
    n = ex.notes
    print(f"scenario: {args.model} decode context={args.context} on {args.cluster} "
          f"(space {cm.space.size:.3g} action vectors; {pin}; best of {args.repeat})")
    print(f"exact:    {t_exact:6.2f} s   optimum {ex.best_objective:.4f} tokens/s/device  "
          f"{ex_short}")
    print(f"megatron: {t_meg:6.2f} s   best    {mg.best_objective:.4f} tokens/s/device  "
          f"({mg.evaluations} evaluations; {mg.best_objective / ex.best_objective:.4f} of the "
          f"optimum)" if ex.best_objective else f"megatron: {t_meg:6.2f} s")
    ox_short = old.space.decode(ox.best_action).short() if ox.best_action is not None else "-"
    print(f"exact, powers-of-two grid: {t_old:6.2f} s   optimum {ox.best_objective:.4f} "
          f"tokens/s/device  {ox_short}")
    print(f"exact any-integer / powers-of-two wall time = {t_exact / t_old:.2f}x; optimum gain "
          f"{ex.best_objective / ox.best_objective - 1:+.2%}" if ox.best_objective else "")
    print(f"exact / megatron wall time = {t_exact / t_meg:.2f}x; target exact <= {TARGET_S:g} s: "
          f"{'met' if t_exact <= TARGET_S else 'NOT met'}")
    print("certificate: " + ", ".join(
        f"{k.removeprefix('exact_')}={v}" for k, v in n.items()
        if k.startswith("exact_") and k not in ("exact_chain_breaks", "exact_wall_s")))


if __name__ == "__main__":
    main()
