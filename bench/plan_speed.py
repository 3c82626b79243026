"""Wall time of the main job, ``l2s plan`` (default ``auto`` search), on eight cases, one core.

Each case is planned as ``l2s plan`` does without ``--engine``: the unrestricted search, then
the best strategy each engine (vLLM, SGLang, TensorRT-LLM) can launch under its own memory
policy (three more exact searches, optimum only; ``cli._engine_optima``). The same four
searches then run on the previous batch grid (powers of two ``1 … 2**16``, certified over
that grid only), and the ratio of the two wall times is printed per case, measured side by
side in the same process under the same machine load. Issue 12's goal: each plan <= 2 s on one core.

The process pins itself to one CPU and one BLAS/OpenMP thread. Model loading and cost-model
construction are inside the timed region (they are part of what a user waits for); Python
start-up and imports are not.

With ``--against REV`` the same plans (default grid only) run on this tree and on an older
commit (a ``git worktree`` of it, ``bench/_against.py``), alternating in child processes under
the same load; per case the new and old wall times, the speed-up (old / new) and whether the
two trees found the same optimum (objective and strategy) are printed.

    .venv/bin/python bench/plan_speed.py [--repeat 3] [--case llama-3.1-8b ...] [--against REV]
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

from learn_to_shard.api import (  # noqa: E402
    checkpoint_dtypes,
    cost_config,
    make_cost_model,
    make_workload,
    search_plan,
)
from learn_to_shard.cost import CostModel  # noqa: E402
from learn_to_shard.engines import ENGINES  # noqa: E402
from learn_to_shard.model import load_model  # noqa: E402
from learn_to_shard.parallel import StrategySpace  # noqa: E402

try:        # the engine optima as this tree's CLI finds them (older trees: a full exact plan)
    from learn_to_shard.api import exact_optimum
except ImportError:                                     # pragma: no cover - --against only
    def exact_optimum(cm: CostModel, engine: str | None = None):  # type: ignore[misc]
        """An older tree's engine optimum: ``search_plan(method="exact")``."""
        return search_plan(cm, method="exact", engine=engine)

#: Issue 12's goal for one plan, seconds.
TARGET_S = 2.0

#: (model, cluster, phase, isl, osl): dense and MoE, 8–32 GPUs, the three phases.
CASES: tuple[tuple[str, str, str, int, int], ...] = (
    ("llama-3.1-8b", "h100-sxm:8", "serve", 1000, 1000),
    ("llama-3.1-70b", "h100-sxm:8", "serve", 2048, 128),
    ("qwen3-32b", "h200:8", "decode", 8192, 1),
    ("llama-3.1-405b", "h100-sxm:16", "prefill", 4096, 1),
    ("mixtral-8x7b", "h100-sxm:8", "serve", 1000, 1000),
    ("qwen3-30b-a3b", "h100-sxm:16", "serve", 4096, 1024),
    ("deepseek-v3", "h200:16", "serve", 1000, 1000),
    ("gpt-oss-120b", "h100-sxm:32", "decode", 4096, 1),
)

POW2 = tuple(1 << i for i in range(17))


def _pin_one_core() -> str:
    """Restrict this process to one CPU (Linux); returns a description."""
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    return "not pinned (no sched_setaffinity)"


def _plan(case: tuple[str, str, str, int, int], pow2: bool) -> tuple[float, float, str]:
    """One ``l2s plan`` as the CLI runs it; returns (wall s, best tokens/s/device, strategy)."""
    name, cluster, phase, isl, osl = case
    t0 = time.perf_counter()
    spec = load_model(name)
    wd, kd = checkpoint_dtypes(spec, None, None)
    kw = {"context": isl} if phase == "decode" else {"isl": isl, "osl": osl}
    if phase == "prefill":
        kw = {"isl": isl}
    wl = make_workload(phase, dtype=wd, kv_dtype=kd, **kw)
    best, short = 0.0, "-"
    for engine in (None, *ENGINES):
        cm = make_cost_model(spec, cluster, wl, cost_config(engine), engine=engine)
        if pow2:
            cm = CostModel(cm.model, cm.cluster, cm.workload, cm.config,
                           space=StrategySpace.build(cm.model, cm.cluster, batch_values=POW2,
                                                     engine=ENGINES.get(engine or "")))
        p = search_plan(cm, method="auto", engine=engine) if engine is None else \
            exact_optimum(cm, engine=engine)
        if engine is None and p.best is not None:
            best, short = p.best.tokens_per_s_per_device, p.best.strategy.short()
    return time.perf_counter() - t0, best, short


def main() -> None:
    """Time every case on both grids ``--repeat`` times; print best times and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each; the best time counts")
    ap.add_argument("--case", action="append", help="model name of a case (default: all)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin to one CPU")
    ap.add_argument("--against", metavar="REV", default=None,
                    help="run the same plans on this older commit too; print old/new")
    ap.add_argument("--rounds", type=int, default=2, help="with --against: runs per tree")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    pin = "not pinned" if args.no_pin else _pin_one_core()
    cases = [c for c in CASES if not args.case or c[0] in args.case]
    if args.child:
        out: dict[str, float | str] = {}
        for case in cases:
            runs = [_plan(case, pow2=False) for _ in range(args.repeat)]
            out[f"{case[0]}/s"] = min(r[0] for r in runs)
            out[f"{case[0]}/objective"] = runs[-1][1]
            out[f"{case[0]}/strategy"] = runs[-1][2]
        print(json.dumps(out))
        return
    if args.against:
        _against_main(args, cases, pin)
        return
    print(f"l2s plan wall time, auto search + 3 engine optima ({pin}; best of {args.repeat})")
    print(f"{'case':<44} {'any-int s':>9} {'pow2 s':>7} {'ratio':>6} {'goal':>5}  "
          f"optimum gain  strategy")
    met = 0
    for case in cases:
        t_new = t_old = float("inf")
        new = old = 0.0
        short = "-"
        for _ in range(args.repeat):
            t, new, short = _plan(case, pow2=False)
            t_new = min(t_new, t)
            t, old, _ = _plan(case, pow2=True)
            t_old = min(t_old, t)
        met += t_new <= TARGET_S
        label = f"{case[0]} {case[1]} {case[2]} {case[3]}/{case[4]}"
        gain = f"{new / old - 1:+.2%}" if old else "-"
        print(f"{label:<44} {t_new:9.2f} {t_old:7.2f} {t_new / t_old:5.2f}x "
              f"{'met' if t_new <= TARGET_S else 'NOT':>5}  {gain:>12}  {short}")
    print(f"goal <= {TARGET_S:g} s met on {met}/{len(cases)} cases")


def _against_main(args: argparse.Namespace, cases: list[tuple[str, str, str, int, int]],
                  pin: str) -> None:
    """``--against REV``: each case on this tree and on ``REV``, alternating child runs."""
    from _against import run_against

    child = ["--repeat", str(args.repeat)] + [a for c in cases for a in ("--case", c[0])] \
        + (["--no-pin"] if args.no_pin else [])
    best = {f"{c[0]}/{k}": how for c in cases
            for k, how in (("s", "min"), ("objective", "max"), ("strategy", "max"))}
    new, old = run_against(args.against, Path(__file__).resolve(), child, args.rounds, best)
    print(f"l2s plan wall time, auto search + 3 engine optima: this tree vs {args.against}, "
          f"alternating, best of {args.rounds} x {args.repeat} each ({pin})")
    print(f"{'case':<44} {'new s':>6} {'old s':>6} {'old/new':>7} {'goal':>5}  same optimum")
    met = 0
    for case in cases:
        n_s, o_s = float(new[f"{case[0]}/s"]), float(old[f"{case[0]}/s"])
        same = all(new[f"{case[0]}/{k}"] == old[f"{case[0]}/{k}"]
                   for k in ("objective", "strategy"))
        met += n_s <= TARGET_S
        label = f"{case[0]} {case[1]} {case[2]} {case[3]}/{case[4]}"
        print(f"{label:<44} {n_s:6.2f} {o_s:6.2f} {o_s / n_s:6.2f}x "
              f"{'met' if n_s <= TARGET_S else 'NOT':>5}  "
              f"{'yes' if same else 'NO'}  {new[f'{case[0]}/strategy']}")
    print(f"goal <= {TARGET_S:g} s met on {met}/{len(cases)} cases (this tree)")


if __name__ == "__main__":
    main()
