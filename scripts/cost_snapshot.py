"""Pinned snapshot of the cost model's outputs: the equivalence harness of a refactor.

Writes ``tests/data/cost_snapshot.npz``: for every shipped model (``data/models``) × the three
phases × two configurations (the defaults, and one engine profile with extra factors so that
host time, GEMM shape factor, routing skew, the KV free fraction, uncapped windows, the
engine's rules and per-rank vocabulary padding are all exercised), and SGLang's profile in the
serve phase (its prefill-only and decode-only steps), ``N`` seeded random action vectors
(uniform over the space, so most are infeasible and the per-operator choices are mostly not
Megatron's, plus Megatron's dims on random degrees so that feasible rows are present) and every
``BatchEstimate`` field ``evaluate_many`` returns for them; and, for a few strategies per
phase, the plan's breakdown (``CostModel.evaluate``: stage times, micro-batches, memory,
collectives, operator times, KV capacity).

``tests/test_cost_snapshot.py`` rebuilds each case from the recorded description (model name,
cluster, workload, every ``CostModelConfig`` field value, engine) and compares the working tree
with the snapshot at a relative tolerance of 1e-12. The snapshot is regenerated only when a
change *means* to alter prices (say which in the commit)::

    .venv/bin/python scripts/cost_snapshot.py            # rewrite tests/data/cost_snapshot.npz
    .venv/bin/python scripts/cost_snapshot.py --check    # compare only (exit 1 on a mismatch)

Actions are stored as decoded values (degrees, batch, per-operator choices), not as indices
into one space's candidate lists, so that a change of the candidate lists does not shift them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "cost_snapshot.npz"
#: Action vectors per case (random + Megatron-dims rows).
N_RANDOM, N_MEGATRON = 64, 32
SEED = 20261201
#: BatchEstimate fields recorded (every one evaluate_many returns).
FIELDS = ("feasible", "objective", "tokens_per_s_per_device", "tpot_s", "ttft_s",
          "peak_memory_bytes", "max_batch", "violation_bits", "kv_capacity_tokens",
          "max_context_tokens")
#: Phase workloads: decode context, prefill prompt, serve prompt/output (all within every
#: shipped model's max_position_embeddings, the smallest being 4096), with SLOs that bind
#: for part of the rows.
PHASES: dict[str, dict[str, Any]] = {
    "decode": dict(phase="decode", context=2048, tpot_slo_s=0.05),
    "prefill": dict(phase="prefill", isl=2048, ttft_slo_s=2.0),
    "serve": dict(phase="serve", isl=1024, osl=256, tpot_slo_s=0.05, ttft_slo_s=4.0),
}
#: The second configuration: an engine profile plus factors the defaults leave at 0 / 1; the
#: third, SGLang's profile, in the serve phase only.
VARIANTS: tuple[dict[str, Any], ...] = (
    {"engine": None, "overrides": {}},
    {"engine": "trtllm", "overrides": dict(host_step_overhead_s=1e-5, host_seq_overhead_s=1e-6,
                                           host_prefill_overhead_s=2e-6, gemm_shape_half=64.0,
                                           moe_imbalance=1.3, window_kv_capped=False)},
    # SGLang's serve steps (prefill-only and decode-only steps, its DP ranks).
    {"engine": "sglang", "overrides": {}, "phases": ("serve",)},
)


def cluster_for(model: Any) -> str:
    """A cluster that holds the model's weights in 16 bits a few times over: 8, 32 or 256
    H100s (so degrees up to TP8 × PP·DP are in the space and some strategies fit)."""
    from learn_to_shard.model.params import count_params

    total = count_params(model).total
    if total * 2 <= 300e9:
        return "h100-sxm:8"
    if total * 2 <= 1.5e12:
        return "h100-sxm:32"
    return "h100-sxm:256"


def build(case: dict[str, Any]) -> Any:
    """The cost model of one recorded case (a dict as stored in the snapshot)."""
    from learn_to_shard.api import make_cost_model, make_workload
    from learn_to_shard.cost.config import CostModelConfig

    fields = {f.name for f in dataclasses.fields(CostModelConfig)}
    cfg = CostModelConfig(**{k: v for k, v in case["config"].items() if k in fields})
    wl = make_workload(**case["workload"])
    return make_cost_model(case["model"], case["cluster"], wl, config=cfg,
                           engine=case["engine"])


def encode_values(cm: Any, values: np.ndarray) -> np.ndarray:
    """Decoded action rows ``[n, A]`` (the coarse heads' values in ``COARSE_HEADS`` order,
    then the per-operator choices) -> index rows of ``cm.space`` (a batch missing from the
    grid is added to the space)."""
    from learn_to_shard.parallel.space import BATCH_HEAD, COARSE_HEADS

    sp = cm.space
    extra = sorted({int(b) for b in values[:, BATCH_HEAD]} - set(sp.batch_values))
    if extra:
        cm.space = sp = sp.with_batches(extra)
    out = values.copy()
    for col, head in enumerate(COARSE_HEADS):
        lookup = {v: i for i, v in enumerate(getattr(sp, f"{head}_values"))}
        out[:, col] = [lookup[int(v)] for v in values[:, col]]
    return out


def decode_values(cm: Any, actions: np.ndarray) -> np.ndarray:
    """Index rows of ``cm.space`` -> decoded value rows (see :func:`encode_values`)."""
    from learn_to_shard.parallel.space import COARSE_HEADS

    d = cm.space.degrees_many(actions)
    out = actions.copy()
    for col, name in enumerate(COARSE_HEADS):
        out[:, col] = d[name]
    return out


def breakdown(est: Any) -> dict[str, Any]:
    """The plan's breakdown of one ``Estimate`` as JSON-ready values (floats exact)."""
    return {
        "feasible": est.feasible, "violations": list(est.violations),
        "tokens_per_s_per_device": est.tokens_per_s_per_device,
        "output_tokens_per_s": est.output_tokens_per_s, "tpot_s": est.tpot_s,
        "ttft_s": est.ttft_s, "stage_time_s": list(est.stage_time_s),
        "micro_batches": est.micro_batches,
        "memory": dataclasses.asdict(est.memory),
        "stage_memory_bytes": list(est.stage_memory_bytes), "max_batch": est.max_batch,
        "collectives": sorted([c.where, c.kind, c.group, c.time_s, c.per_step]
                              for c in est.collectives),
        "op_time_s": dict(sorted(est.op_time_s.items())), "instances": est.instances,
        "idle_devices": est.idle_devices, "kv_capacity_tokens": est.kv_capacity_tokens,
        "max_context_tokens": est.max_context_tokens,
    }


def cases() -> list[dict[str, Any]]:
    """Every (model, phase, variant) case, in a fixed order."""
    from learn_to_shard.api import checkpoint_dtypes
    from learn_to_shard.cost.config import CostModelConfig
    from learn_to_shard.model.hf_config import load_model, shipped_model_names

    out = []
    for name in shipped_model_names():
        m = load_model(name)
        dtype, kv = checkpoint_dtypes(m, None, None)
        for phase, wl in PHASES.items():
            for vi, var in enumerate(VARIANTS):
                if phase not in var.get("phases", PHASES):
                    continue
                cfg = CostModelConfig.for_engine(var["engine"], **var["overrides"])
                out.append({"model": name, "cluster": cluster_for(m), "phase": phase,
                            "variant": vi, "engine": var["engine"],
                            "workload": {**wl, "dtype": dtype, "kv_dtype": kv},
                            "config": dataclasses.asdict(cfg)})
    return out


def sample(cm: Any, rng: np.random.Generator) -> np.ndarray:
    """``N_RANDOM`` action vectors with uniform per-operator choices — half uniform over the
    space, half among degrees that fit the cluster's device count — and ``N_MEGATRON`` with
    Megatron's dims on degrees that fit; as decoded values."""
    from learn_to_shard.parallel.ops import MEGATRON_DIMS
    from learn_to_shard.parallel.space import NUM_COARSE, RULE_BIT

    pool = cm.space.sample(rng, 16 * (N_RANDOM + N_MEGATRON))
    fits = (cm.space.rule_bits_many(pool) & RULE_BIT["devices"]) == 0
    half = N_RANDOM // 2
    need = N_RANDOM - half + N_MEGATRON
    placed = np.concatenate([pool[fits], pool[~fits]])[:need]      # unplaceable ones last
    a = np.concatenate([pool[:half], placed])
    a[N_RANDOM:, NUM_COARSE:] = np.asarray(MEGATRON_DIMS)
    return decode_values(cm, a)


def evaluate(case: dict[str, Any], values: np.ndarray) -> tuple[dict[str, np.ndarray],
                                                                list[dict[str, Any]]]:
    """``evaluate_many`` fields of the rows, and the breakdowns of the plan rows (the
    structurally valid row of highest throughput, the first feasible row and the first row,
    at most three distinct)."""
    from learn_to_shard.parallel.space import RULES

    cm = build(case)
    acts = encode_values(cm, values)
    est = cm.evaluate_many(acts)
    arrays = {f: np.asarray(getattr(est, f)) for f in FIELDS}
    structural = (est.violation_bits & ((1 << len(RULES)) - 1)) == 0
    picks = [0, int(np.argmax(np.where(structural, est.tokens_per_s_per_device, -1.0)))]
    feas = np.flatnonzero(est.feasible)
    if len(feas):
        picks.append(int(feas[0]))
    plans = []
    for i in sorted(set(picks)):
        plans.append({"row": i, **breakdown(cm.evaluate(acts[i]))})
    return arrays, plans


def snapshot() -> dict[str, Any]:
    """Compute the snapshot (see the module docstring)."""
    rng = np.random.default_rng(SEED)
    all_cases, values, arrays, plans = [], [], {f: [] for f in FIELDS}, []
    for case in cases():
        cm = build(case)
        v = sample(cm, rng)
        a, p = evaluate(case, v)
        all_cases.append(case)
        values.append(v)
        for f in FIELDS:
            arrays[f].append(a[f])
        plans.append(p)
    return {"cases": all_cases, "values": values, "arrays": arrays, "plans": plans}


def save(snap: dict[str, Any], path: Path) -> None:
    """Write the snapshot as one compressed ``.npz``: ``values`` ``[cases, N, A]``, one
    array per field ``[cases, N]``, and ``meta`` (JSON: the cases and plan breakdowns)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = json.dumps({"cases": snap["cases"], "plans": snap["plans"]})
    np.savez_compressed(path, values=np.stack(snap["values"]),
                        meta=np.array(meta),
                        **{f: np.stack(snap["arrays"][f]) for f in FIELDS})


def load(path: Path) -> dict[str, Any]:
    """Read a snapshot written by :func:`save`."""
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        return {"cases": meta["cases"], "plans": meta["plans"], "values": z["values"],
                "arrays": {f: z[f] for f in FIELDS}}


def close(got: Any, want: Any, rel: float) -> bool:
    """``got`` equals ``want`` within ``rel`` (floats; NaN equals NaN), exactly otherwise;
    recursive over lists and dicts."""
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(
            close(got[k], want[k], rel) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(
            close(g, w, rel) for g, w in zip(got, want, strict=True))
    if isinstance(want, float) and not isinstance(want, bool):
        return bool(np.isclose(float(got), want, rtol=rel, atol=0.0, equal_nan=True))
    return bool(got == want)


def compare(snap: dict[str, Any], rel: float = 1e-12) -> list[str]:
    """Mismatches of the working tree against a loaded snapshot, one line each (empty: equal).

    Float fields are compared at relative tolerance ``rel`` (NaN equals NaN, infinities
    exactly); integer and boolean fields exactly.
    """
    bad: list[str] = []
    for ci, case in enumerate(snap["cases"]):
        tag = f"{case['model']} {case['phase']} variant {case['variant']}"
        arrays, plans = evaluate(case, snap["values"][ci])
        for f in FIELDS:
            want, got = snap["arrays"][f][ci], arrays[f]
            if want.dtype.kind == "f":
                ok = np.isclose(got, want, rtol=rel, atol=0.0, equal_nan=True) \
                    | (got == want)
            else:
                ok = got == want
            if not ok.all():
                i = int(np.flatnonzero(~ok)[0])
                bad.append(f"{tag}: {f} row {i}: {got[i]!r} != snapshot {want[i]!r}")
        for want_p, got_p in zip(snap["plans"][ci], plans, strict=False):
            got_p = json.loads(json.dumps(got_p))
            if not close(got_p, want_p, rel):
                keys = [k for k in want_p if not close(got_p.get(k), want_p[k], rel)]
                bad.append(f"{tag}: plan of row {want_p['row']} differs in {keys}")
        if len(plans) != len(snap["plans"][ci]):
            bad.append(f"{tag}: {len(plans)} plan rows != snapshot {len(snap['plans'][ci])}")
    return bad


def main() -> int:
    """Write (default) or check the snapshot; exit 1 when ``--check`` finds a mismatch."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only, write nothing")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.check:
        bad = compare(load(args.out))
        print("\n".join(bad) if bad else f"equal to {args.out} at rel 1e-12")
        return 1 if bad else 0
    snap = snapshot()
    save(snap, args.out)
    n = sum(len(v) for v in snap["values"])
    print(f"wrote {args.out}: {len(snap['cases'])} cases, {n} action vectors, "
          f"{sum(len(p) for p in snap['plans'])} plan breakdowns "
          f"({args.out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
