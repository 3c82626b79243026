"""``l2s plan`` and NVIDIA's aiconfigurator on the same eight serving cases, side by side.

Each case (model, cluster, isl/osl, TTFT and TPOT SLOs) is planned by both tools for
aggregated serving with TensorRT-LLM: l2s with ``--engine trtllm`` (its default ``auto``
search), aiconfigurator 0.12.0 with ``aiconfigurator cli default --serving-mode agg --backend
trtllm`` (its TensorRT-LLM perf database). Both read the same ``config.json``: the one l2s
ships, written into a scratch folder for aiconfigurator. Per case the script prints each tool's
pick (degrees and batch), its predicted output tokens/s per GPU of the cluster, TTFT and TPOT,
and its wall time; then l2s's own price of aiconfigurator's pick (the same degrees and batch,
l2s's best per-operator dims: an exact search over that one point), so a disagreement can be
read as "different pick" or "different price". Every number is a prediction of one tool or
the other; neither is a measurement.

The cases are those of the outside comparison of 2026-12-01 (eight serving cases, TTFT <= 1 s,
TPOT <= 50 ms, 30 ms for Qwen3-32B), with two differences: Qwen3-235B-A22B and Llama-3.1-405B
run in BF16 (the checkpoints l2s ships) where that comparison used FP8 checkpoints.

aiconfigurator (Apache-2.0, PyPI) goes in its own environment; it is not a dependency of this
project::

    python3 -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator==0.12.0 \\
        aiconfigurator-core==0.12.0
    .venv/bin/python bench/vs_aiconfigurator.py --aic /tmp/aic/bin/aiconfigurator [--case NAME]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

from learn_to_shard.api import (
    checkpoint_dtypes,
    cost_config,
    make_cost_model,
    make_workload,
    search_plan,
)
from learn_to_shard.cost import CostModel
from learn_to_shard.model import load_model

#: (label, l2s model, l2s cluster, aiconfigurator system, isl, osl, TTFT SLO ms, TPOT SLO ms)
CASES: tuple[tuple[str, str, str, str, int, int, float, float], ...] = (
    ("a", "llama-3.1-70b", "h100-sxm:8", "h100_sxm", 1024, 256, 1000, 50),
    ("b", "deepseek-v3", "h200:16", "h200_sxm", 1024, 256, 1000, 50),
    ("c", "mixtral-8x7b", "h100-sxm:8", "h100_sxm", 1024, 256, 1000, 50),
    ("d", "qwen3-235b-a22b", "h200:8", "h200_sxm", 1024, 256, 1000, 50),
    ("e", "llama-3.1-8b", "h100-sxm:8", "h100_sxm", 1024, 256, 1000, 50),
    ("f", "qwen3-32b", "h100-sxm:8", "h100_sxm", 4096, 512, 1000, 30),
    ("g", "gpt-oss-120b", "h100-sxm:8", "h100_sxm", 1024, 256, 1000, 50),
    ("h", "llama-3.1-405b", "h100-sxm:16", "h100_sxm", 1024, 256, 1000, 50),
)
ENGINE = "trtllm"


@dataclasses.dataclass
class Pick:
    """One tool's answer to one case: ``pick`` (its strategy, or why there is none), the
    predicted output tokens/s per GPU of the cluster, TTFT and TPOT (ms), its wall time (s),
    and for aiconfigurator the degrees (``tp, pp, dp, moe_tp, moe_ep``) and batch."""

    pick: str
    wall_s: float
    tok_s_gpu: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    degrees: dict[str, int] | None = None
    batch: int | None = None


def _l2s(model: str, cluster: str, isl: int, osl: int, ttft_ms: float, tpot_ms: float
         ) -> tuple[CostModel, Pick]:
    """l2s's plan of one case: its cost model and pick (strategy, tokens/s/GPU, TTFT, TPOT)."""
    t0 = time.perf_counter()
    spec = load_model(model)
    wd, kd = checkpoint_dtypes(spec, None, None, ENGINE)
    wl = make_workload("serve", isl=isl, osl=osl, dtype=wd, kv_dtype=kd,
                       ttft_slo_s=ttft_ms / 1e3, tpot_slo_s=tpot_ms / 1e3)
    cm = make_cost_model(spec, cluster, wl, cost_config(ENGINE), engine=ENGINE)
    plan = search_plan(cm, engine=ENGINE)
    wall = time.perf_counter() - t0
    if plan.best is None:
        return cm, Pick("infeasible: " + " ".join(plan.reasons[:2])[:110], wall)
    b = plan.best
    return cm, Pick(b.strategy.short(), wall, b.tokens_per_s_per_device, b.ttft_s * 1e3,
                    b.tpot_s * 1e3)


def _aic(exe: str, model: str, system: str, gpus: int, isl: int, osl: int, ttft_ms: float,
         tpot_ms: float, work: Path) -> Pick:
    """aiconfigurator's best aggregated configuration of one case (its ``best_config_topn.csv``
    rank 1), or the tail of its log when it finds none."""
    src = Path(str(resources.files("learn_to_shard") / "data" / "models" / f"{model}.json"))
    mdir = work / model
    mdir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, mdir / "config.json")
    out = work / f"out-{model}"
    cmd = [exe, "cli", "default", "--model", str(mdir), "--total-gpus", str(gpus),
           "--system", system, "--backend", ENGINE, "--serving-mode", "agg",
           "--isl", str(isl), "--osl", str(osl), "--ttft", f"{ttft_ms:g}",
           "--tpot", f"{tpot_ms:g}", "--save-dir", str(out)]
    t0 = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    found = sorted(out.glob("*/agg/best_config_topn.csv"))
    if run.returncode or not found:
        lines = (run.stdout + run.stderr).strip().splitlines()
        errors = [re.sub(r"^.*\[E\] \[[^\]]*\] ", "", ln) for ln in lines if "[E]" in ln]
        why = (errors or lines[-1:] or ["no output"])[0]
        return Pick(f"none (exit {run.returncode}: {why[:110]})", wall)
    with found[0].open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        return Pick("none (empty result)", wall)
    r = rows[0]
    deg = {k: int(float(r[k])) for k in ("tp", "pp", "dp", "moe_tp", "moe_ep")}
    batch = int(float(r["global_bs"]))
    return Pick(f"tp{deg['tp']} ep{deg['moe_ep']} pp{deg['pp']} dp{deg['dp']} "
                f"etp{deg['moe_tp']} b{batch}", wall, float(r["tokens/s/gpu_cluster"]),
                float(r["ttft"]), float(r["tpot"]), deg, batch)


def _l2s_prices(cm: CostModel, deg: dict[str, int], batch: int) -> str:
    """l2s's tokens/s/GPU, TTFT and TPOT of a fixed pick (degrees and batch) with its best
    per-operator dims at that point (an exact search over the one point, the SLOs lifted so
    that the price shows even where l2s says the pick breaks them, which it then names), or
    why l2s cannot run the pick at all (memory, a structural rule)."""
    sp = dataclasses.replace(cm.space, tp_values=(deg["tp"],), ep_values=(deg["moe_ep"],),
                             pp_values=(deg["pp"],), dp_values=(deg["dp"],), cp_values=(1,),
                             batch_values=(batch,), any_batch=False)
    wl = dataclasses.replace(cm.workload, ttft_slo_s=None, tpot_slo_s=None)
    plan = search_plan(CostModel(cm.model, cm.cluster, wl, cm.config, space=sp),
                       method="exact", engine=ENGINE)
    if plan.best is None:
        return "cannot run it: " + " ".join(plan.reasons[:2])[:110]
    b = plan.best
    slo = cm.workload
    broken = [f"{name} SLO" for name, v, lim in (("TTFT", b.ttft_s, slo.ttft_slo_s),
                                                 ("TPOT", b.tpot_s, slo.tpot_slo_s))
              if lim is not None and v > lim]
    return (f"{b.tokens_per_s_per_device:8.0f} tok/s/GPU  TTFT {b.ttft_s * 1e3:6.0f} ms  "
            f"TPOT {b.tpot_s * 1e3:5.1f} ms" + (f"  (breaks the {', '.join(broken)})"
                                                 if broken else ""))


def main() -> None:
    """Plan every case with both tools and print the picks side by side."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic", default=shutil.which("aiconfigurator"),
                    help="the aiconfigurator executable (default: the one on PATH)")
    ap.add_argument("--case", action="append", help="case label a-h or model name")
    ap.add_argument("--json", action="store_true", help="print one JSON line per case too")
    args = ap.parse_args()
    if not args.aic or not Path(args.aic).exists():
        print("error: --aic: no aiconfigurator executable found; install it in its own "
              "environment (see this script's docstring) and pass its path", file=sys.stderr)
        raise SystemExit(2)
    cases = [c for c in CASES if not args.case or c[0] in args.case or c[1] in args.case]
    print(f"l2s plan --engine {ENGINE} vs aiconfigurator cli default --serving-mode agg "
          f"--backend {ENGINE} (predictions of each tool; tokens/s per GPU of the cluster)")
    with tempfile.TemporaryDirectory(prefix="l2s-aic-") as tmp:
        for label, model, cluster, system, isl, osl, ttft, tpot in cases:
            gpus = int(cluster.split(":")[1])
            cm, mine = _l2s(model, cluster, isl, osl, ttft, tpot)
            theirs = _aic(args.aic, model, system, gpus, isl, osl, ttft, tpot, Path(tmp))
            print(f"\n({label}) {model} {cluster} {isl}/{osl} TTFT<={ttft:g} ms "
                  f"TPOT<={tpot:g} ms")
            for name, r in (("l2s", mine), ("aic", theirs)):
                if r.tok_s_gpu is not None:
                    print(f"  {name} pick {r.pick:<38} {r.tok_s_gpu:8.0f} tok/s/GPU"
                          f"  TTFT {r.ttft_ms:6.0f} ms  TPOT {r.tpot_ms:5.1f} ms"
                          f"  ({r.wall_s:.1f} s)")
                else:
                    print(f"  {name} pick {r.pick}  ({r.wall_s:.1f} s)")
            if mine.tok_s_gpu is not None and theirs.tok_s_gpu is not None:
                print(f"  l2s / aic tokens/s/GPU {mine.tok_s_gpu / theirs.tok_s_gpu:.2f}; "
                      f"wall time aic / l2s {theirs.wall_s / mine.wall_s:.0f}x")
            if theirs.degrees is not None and theirs.batch is not None:
                print(f"  l2s prices aic's pick: "
                      f"{_l2s_prices(cm, theirs.degrees, theirs.batch)}")
            if args.json:
                print(json.dumps({"case": label, "l2s": dataclasses.asdict(mine),
                                  "aic": dataclasses.asdict(theirs)}))

if __name__ == "__main__":
    main()
