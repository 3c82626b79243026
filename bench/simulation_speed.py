"""Wall time of the serving simulation as the load grows, one core.

Simulates one replica of Llama-3.1-8B on one H100 (the plan's best strategy, vLLM's
scheduler) under closed loops of 10,000, 100,000 and 1,000,000 clients (two requests per
client, ``l2s plan --concurrency N``'s default) and prints each wall time and the time per
simulated request, side by side in one run: a step looks only at the requests it can run or
admit, so the time per request should stay about flat (it grew with the queue before, a
million clients taking hours).

With ``--against REV`` the same loads (default: the two smaller ones, as an older tree may
be quadratic) run on this tree and on an older commit (a ``git worktree`` of it,
``bench/_against.py``), alternating in child processes under the same load, and the
old / new ratio is printed per load.

    .venv/bin/python bench/simulation_speed.py [--clients 10000 100000 1000000] [--against REV]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from learn_to_shard.api import make_cost_model, make_workload, search_plan  # noqa: E402
from learn_to_shard.serving import ServingLoad  # noqa: E402
from learn_to_shard.serving.load import simulate_estimate  # noqa: E402


def measure(clients: list[int]) -> dict[str, float]:
    """Seconds to simulate each closed loop (key: the client count)."""
    wl = make_workload("serve", isl=1024, osl=256)
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:1", wl)
    best = search_plan(cm, method="megatron-rule").best
    assert best is not None
    out = {}
    for n in clients:
        t0 = time.perf_counter()
        simulate_estimate(cm, best, ServingLoad(concurrency=n))
        out[str(n)] = time.perf_counter() - t0
    return out


def main() -> None:
    """Run the benchmark and print the wall times (and the old/new ratios)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=None)
    ap.add_argument("--against", metavar="REV", default=None,
                    help="also run on this older commit and print the old/new ratios")
    ap.add_argument("--rounds", type=int, default=1, help="with --against: runs per tree")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.clients)))
        return
    if args.against:
        from _against import run_against

        clients = args.clients or [10_000, 100_000]
        new, old = run_against(args.against, Path(__file__).resolve(),
                               ["--clients", *map(str, clients)], args.rounds,
                               {str(n): "min" for n in clients})
        print(f"closed loops on one H100 (llama-3.1-8b, 1024/256); this tree vs "
              f"{args.against}, alternating, best of {args.rounds} each")
        for n in clients:
            k = str(n)
            print(f"{n:>9,} clients: new {new[k]:7.2f} s, old {old[k]:7.2f} s, "
                  f"old/new = {old[k] / new[k]:.1f}x")
        return
    clients = args.clients or [10_000, 100_000, 1_000_000]
    times = measure(clients)
    print("closed loops on one H100 (llama-3.1-8b, 1024/256, two requests per client)")
    base = times[str(clients[0])] / (2 * clients[0])
    for n in clients:
        per = times[str(n)] / (2 * n)
        print(f"{n:>9,} clients: {times[str(n)]:7.2f} s, {per * 1e6:6.1f} µs per request "
              f"({per / base:.2f}x the smallest load's)")


if __name__ == "__main__":
    main()
