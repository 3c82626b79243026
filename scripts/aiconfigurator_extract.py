"""Derive the small silicon tables in ``src/learn_to_shard/data/silicon/`` from NVIDIA's
``aiconfigurator-core`` package (Apache-2.0), which ships measured kernel latencies as Parquet.

Install the optional extra first (it pins the package version this script was written for)::

    .venv/bin/pip install -e '.[silicon]'
    .venv/bin/python scripts/aiconfigurator_extract.py

or point ``--source`` at an unpacked wheel's ``aiconfigurator_core`` folder. For each of the
systems below it takes the newest TensorRT-LLM (``trtllm``) table of each operator and keeps a
fixed grid of shapes (see the constants), writing one CSV per operator with latencies in
seconds. Re-running it with the same package version reproduces the committed files exactly.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: aiconfigurator system folder -> learn-to-shard device preset.
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "a100_sxm": "a100-80gb",
           "b200_sxm": "b200"}
PINNED = "0.12.0"
GEMM_M = (1, 8, 64, 256, 1024, 4096, 16384)
GEMM_NK = (1024, 4096, 8192, 16384)
GEMM_DTYPES = ("bfloat16", "fp8")
NCCL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")
NCCL_GPUS = (2, 4, 8)
NCCL_ELEMS = tuple(4 ** i for i in range(5, 15))          # 1 Ki .. 256 Mi half elements
ATTN_HEADS = ((64, 8), (8, 1))                            # Llama-70B at TP1 and at TP8
ATTN_BATCH = (1, 8, 64, 256)
ATTN_STEPS = (1023, 4095, 16383)                          # KV length = step + 1
CTX_ISL = (1024, 4096, 16384)
#: The engines' own (custom) all-reduce tables, ``comm/<engine>/<newest>/custom_allreduce_perf``:
#: CUDA-graph rows only (what a decode step replays); bf16, 256 .. 64 Mi elements (powers of 4).
CUSTOM_AR_ENGINES = ("trtllm", "vllm", "sglang")
CUSTOM_AR_ELEMS = tuple(4 ** i for i in range(4, 14))
OUT = Path(__file__).resolve().parents[1] / "src" / "learn_to_shard" / "data" / "silicon"


def _newest(folder: Path, file: str) -> Path | None:
    """The newest version folder under ``folder`` that holds ``file``."""
    from packaging.version import InvalidVersion, Version

    def key(p: Path):
        try:
            return (1, Version(p.name))
        except InvalidVersion:
            return (0, p.name)

    dirs = sorted((p for p in folder.iterdir() if (p / file).is_file()), key=key) \
        if folder.is_dir() else []
    return dirs[-1] if dirs else None


def _source(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    try:
        import aiconfigurator_core  # type: ignore[import-not-found]
    except ImportError:
        sys.exit("aiconfigurator-core is not installed: pip install -e '.[silicon]' "
                 "or pass --source PATH/aiconfigurator_core")
    version = getattr(aiconfigurator_core, "__version__", None)
    if version and version != PINNED:
        print(f"warning: aiconfigurator-core {version}, tables were derived from {PINNED}")
    return Path(aiconfigurator_core.__file__).parent


def main() -> None:
    import pandas as pd

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", help="path of the aiconfigurator_core package folder")
    ap.add_argument("--out", default=str(OUT), help="output folder")
    args = ap.parse_args()
    data = _source(args.source) / "systems" / "data"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gemm, nccl, gen, ctx, car = [], [], [], [], []
    for system, preset in SYSTEMS.items():
        base = data / system
        d = _newest(base / "gemm" / "trtllm", "gemm_perf.parquet")
        if d is not None:
            df = pd.read_parquet(d / "gemm_perf.parquet")
            df = df[df.gemm_dtype.isin(GEMM_DTYPES) & df.m.isin(GEMM_M) & df.n.isin(GEMM_NK)
                    & df.k.isin(GEMM_NK)]
            df = df.groupby(["gemm_dtype", "m", "n", "k"], as_index=False).latency.median()
            for r in df.itertuples():
                gemm.append((system, preset, f"trtllm-{d.name}", r.gemm_dtype, r.m, r.n, r.k,
                             r.latency * 1e-3))
        d = _newest(base / "comm" / "nccl", "nccl_perf.parquet")
        if d is not None:
            df = pd.read_parquet(d / "nccl_perf.parquet")
            df = df[(df.nccl_dtype == "half") & df.op_name.isin(NCCL_OPS)
                    & df.num_gpus.isin(NCCL_GPUS) & df.message_size.isin(NCCL_ELEMS)]
            df = df.groupby(["op_name", "num_gpus", "message_size"], as_index=False) \
                .latency.median()
            for r in df.itertuples():
                nccl.append((system, preset, f"nccl-{d.name}", r.op_name, r.num_gpus,
                             r.message_size * 2, r.latency * 1e-3))
        for engine in CUSTOM_AR_ENGINES:
            d = _newest(base / "comm" / engine, "custom_allreduce_perf.parquet")
            if d is None:
                continue
            df = pd.read_parquet(d / "custom_allreduce_perf.parquet")
            # vLLM / SGLang tables hold eager and CUDA-graph rows (``backend``); TRT-LLM's
            # hold one implementation. Keep what a captured decode step runs.
            label = df["backend"] if "backend" in df.columns else pd.Series("trtllm",
                                                                            index=df.index)
            df = df.assign(label=label)
            df = df[(df.allreduce_dtype == "bfloat16") & df.num_gpus.isin(NCCL_GPUS)
                    & df.message_size.isin(CUSTOM_AR_ELEMS)
                    & ((df.label == "trtllm") | df.label.str.endswith("_graph"))]
            df = df.groupby(["label", "num_gpus", "message_size"], as_index=False) \
                .latency.median()
            for r in df.itertuples():
                car.append((system, preset, f"{engine}-{d.name}", engine, r.label, r.num_gpus,
                            r.message_size * 2, r.latency * 1e-3))
        d = _newest(base / "attention" / "trtllm", "context_attention_perf.parquet")
        if d is not None:
            df = pd.read_parquet(d / "generation_attention_perf.parquet")
            for heads, kv in ATTN_HEADS:
                sel = df[(df.num_heads == heads) & (df.num_key_value_heads == kv)
                         & (df.head_dim == 128) & (df.window_size == 0) & (df.isl == 1)
                         & df.batch_size.isin(ATTN_BATCH) & df.step.isin(ATTN_STEPS)]
                sel = sel.groupby(["kv_cache_dtype", "batch_size", "step"], as_index=False) \
                    .latency.median()
                for r in sel.itertuples():
                    gen.append((system, preset, f"trtllm-{d.name}", r.kv_cache_dtype,
                                r.batch_size, r.step + 1, heads, kv, 128, r.latency * 1e-3))
            df = pd.read_parquet(d / "context_attention_perf.parquet")
            for heads, kv in ATTN_HEADS:
                sel = df[(df.num_heads == heads) & (df.num_key_value_heads == kv)
                         & (df.head_dim == 128) & (df.window_size == 0)
                         & (df.kv_cache_dtype == "bfloat16") & (df.batch_size == 1)
                         & df.isl.isin(CTX_ISL)]
                sel = sel.groupby(["isl"], as_index=False).latency.median()
                for r in sel.itertuples():
                    ctx.append((system, preset, f"trtllm-{d.name}", "bfloat16", 1, r.isl,
                                heads, kv, 128, r.latency * 1e-3))
    tables = {
        "gemm.csv": (("system", "preset", "source", "dtype", "m", "n", "k", "latency_s"),
                     gemm),
        "nccl.csv": (("system", "preset", "source", "op", "num_gpus", "message_bytes",
                      "latency_s"), nccl),
        "custom_allreduce.csv": (("system", "preset", "source", "engine", "kernel",
                                  "num_gpus", "message_bytes", "latency_s"), car),
        "generation_attention.csv": (("system", "preset", "source", "kv_dtype", "batch",
                                      "kv_len", "heads", "kv_heads", "head_dim", "latency_s"),
                                     gen),
        "context_attention.csv": (("system", "preset", "source", "kv_dtype", "batch", "isl",
                                   "heads", "kv_heads", "head_dim", "latency_s"), ctx),
    }
    for name, (cols, rows) in tables.items():
        lines = [",".join(cols)]
        lines += [",".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in row)
                  for row in sorted(rows)]
        (out / name).write_text("\n".join(lines) + "\n")
        print(f"{out / name}: {len(rows)} rows")


if __name__ == "__main__":
    main()
