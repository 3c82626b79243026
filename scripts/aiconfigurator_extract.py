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
#: MoE layer shapes (hidden, moe intermediate, top-k, experts) of shipped models:
#: DeepSeek-V3/R1, Mixtral-8x7B, Qwen3-30B-A3B, Qwen3-235B-A22B, gpt-oss-120b.
MOE_SHAPES = ((7168, 2048, 8, 256), (4096, 14336, 2, 8), (2048, 768, 8, 128),
              (4096, 1536, 8, 128), (2880, 2880, 4, 128))
MOE_TOKENS = (1, 16, 128, 1024, 8192)
MOE_TP = (1, 2, 4, 8)
MOE_EP = (1, 2, 4, 8, 16, 32, 64)
MOE_DIST = ("balanced", "power_law_1.2")
#: Engines whose own fused-MoE tables (``moe/<engine>/``) go to ``moe_engines.csv``: their
#: block-scaled FP8 rows with balanced routing on the Hopper systems, what
#: ``fidelity.kernels.fit_fp8_block_scale(engine=...)`` fits on, and on B200, where both
#: engines run FlashInfer's TensorRT-LLM-gen block-scaled MoE (the tables' ``kernel_source``)
#: and ``fidelity.kernels.fit_fp8_block_mma`` fits on (the tables stay small); and their BF16
#: rows with balanced routing and experts tensor-parallel (EP 1), which check the 16-bit expert
#: pricing against the engines' own kernels and fit their Ampere rate
#: (``fidelity.kernels.fit_moe_sm80_efficiency``; ``tests/test_moe_kernels.py``). On A100
#: only SGLang's table has balanced rows: vLLM's (0.14.0) measures power-law routing alone,
#: so its ``power_law_1.2`` rows are taken there (:data:`MOE_ENGINE_BF16_DIST`).
MOE_ENGINES = ("vllm", "sglang")
MOE_ENGINE_SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm")
MOE_ENGINE_DTYPES = ("fp8_block",)
MOE_ENGINE_DIST = ("balanced",)
MOE_ENGINE_BF16_SYSTEMS = ("a100_sxm", "h100_sxm", "h200_sxm")
MOE_ENGINE_BF16_EP = (1,)
#: Routing of the 16-bit rows per (system, engine) where not :data:`MOE_ENGINE_DIST`.
MOE_ENGINE_BF16_DIST = {("a100_sxm", "vllm"): ("power_law_1.2",)}
MOE_ENGINE_BF16_TOKENS = (1, 1024, 8192)
A2A_TOKENS = (1, 16, 128, 1024, 4096, 16384)
#: DeepSeek-V3 MLA module tables: heads per rank, batch, prompt / KV length.
MLA_HEADS = (128, 64, 32, 16, 8)
MLA_BATCH = (1, 8, 64, 256)
MLA_LEN = (1024, 4096, 16384)
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


def _versions(folder: Path, file: str) -> list[Path]:
    """Version folders under ``folder`` that hold ``file``, newest first."""
    newest = _newest(folder, file)
    if newest is None:
        return []
    rest = [p for p in folder.iterdir() if (p / file).is_file() and p != newest]
    rest.sort(key=lambda p: p.name, reverse=True)
    return [newest, *rest]


def _moe_rows(pd, base: Path, system: str, preset: str, rows: list[tuple],
              framework: str = "trtllm", dtypes: tuple[str, ...] | None = None,
              dists: tuple[str, ...] = MOE_DIST, eps: tuple[int, ...] = MOE_EP,
              tokens: tuple[int, ...] = MOE_TOKENS) -> None:
    """Fused MoE layer latencies (``moe/<framework>/*/moe_perf.parquet``): per shape of
    :data:`MOE_SHAPES`, the newest version that measured it; every dtype measured, tokens
    :data:`MOE_TOKENS`, expert TP/EP degrees with ``tp · ep <= 64``, balanced and power-law
    routing (or only ``dtypes`` / ``dists`` / expert-parallel degrees ``eps`` / ``tokens``).
    Latency is for the whole routed-expert block of one layer on one measured rank,
    milliseconds in the source; a shape measured with several kernels (vLLM's tables hold
    Triton and FlashInfer-CUTLASS rows) keeps the median."""
    done: set[tuple[int, int, int, int]] = set()
    for d in _versions(base / "moe" / framework, "moe_perf.parquet"):
        df = pd.read_parquet(d / "moe_perf.parquet")
        for shape in MOE_SHAPES:
            if shape in done:
                continue
            h, i, k, e = shape
            sel = df[(df.hidden_size == h) & (df.inter_size == i) & (df.topk == k)
                     & (df.num_experts == e) & df.num_tokens.isin(tokens)
                     & df.moe_tp_size.isin(MOE_TP) & df.moe_ep_size.isin(eps)
                     & (df.moe_tp_size * df.moe_ep_size <= 64)
                     & df.distribution.isin(dists)
                     & (df.moe_dtype.isin(dtypes) if dtypes else True)]
            if sel.empty:
                continue
            done.add(shape)
            sel = sel.groupby(["moe_dtype", "num_tokens", "moe_tp_size", "moe_ep_size",
                               "distribution"], as_index=False).latency.median()
            for r in sel.itertuples():
                rows.append((system, preset, f"{framework}-{d.name}", r.moe_dtype, h, i, k, e,
                             r.num_tokens, r.moe_tp_size, r.moe_ep_size, r.distribution,
                             r.latency * 1e-3))


def _a2a_rows(pd, base: Path, system: str, preset: str, rows: list[tuple]) -> None:
    """DeepEP dispatch / combine latencies: TensorRT-LLM's ``comm/trtllm/*/moe_a2a_perf``
    (EP8 on one node, high-throughput and low-latency kernels, bf16 / fp8 / nvfp4 payloads)
    and SGLang's ``comm/sglang/*/wideep_deepep_{ll,normal}_perf`` (1–8 nodes of 8 GPUs;
    ``normal`` at 20 SMs, ``transmit_us``), DeepSeek-V3's hidden size 7168 with top-8 of 256
    experts. Microseconds in the source; ``ep`` = 8 × nodes for the SGLang tables."""
    d = _newest(base / "comm" / "trtllm", "moe_a2a_perf.parquet")
    if d is not None:
        df = pd.read_parquet(d / "moe_a2a_perf.parquet")
        sel = df[(df.hidden_size == 7168) & (df.topk == 8) & (df.num_experts == 256)
                 & df.num_tokens.isin(A2A_TOKENS)]
        sel = sel.groupby(["comm_backend", "phase", "comm_dtype", "ep_size", "node_num",
                           "num_tokens"], as_index=False).latency.median()
        for r in sel.itertuples():
            rows.append((system, preset, f"trtllm-{d.name}", r.comm_backend, r.phase,
                         r.comm_dtype, r.ep_size, r.node_num, 7168, 8, 256, r.num_tokens,
                         r.latency * 1e-6))
    for kind, file in (("ll", "wideep_deepep_ll_perf.parquet"),
                       ("normal", "wideep_deepep_normal_perf.parquet")):
        for d in _versions(base / "comm" / "sglang", file):
            df = pd.read_parquet(d / file)
            sel = df[(df.hidden_size == 7168) & (df.num_topk == 8) & (df.num_experts == 256)
                     & df.num_token.isin(A2A_TOKENS)]
            if kind == "normal":
                sel = sel[(sel.dispatch_sms == 20) & (sel.combine_sms == 20)]
            if sel.empty or sel.node_num.nunique() < 2:
                continue                        # the version that measured several nodes
            cols = {"dispatch": "dispatch_avg_t_us" if kind == "ll" else "dispatch_transmit_us",
                    "combine": "combine_avg_t_us" if kind == "ll" else "combine_transmit_us"}
            for phase, col in cols.items():
                g = sel.groupby(["node_num", "num_token"], as_index=False)[col].median()
                for r in g.itertuples():
                    rows.append((system, preset, f"sglang-{d.name}", f"deepep_{kind}", phase,
                                 "default", 8 * int(r.node_num), int(r.node_num), 7168, 8, 256,
                                 int(r.num_token), float(getattr(r, col)) * 1e-6))
            break


def _mla_rows(pd, base: Path, system: str, preset: str, rows: list[tuple]) -> None:
    """DeepSeek-V3 MLA module latencies (``mla/trtllm/*/mla_{context,generation}_module``:
    the attention block from the compressed-KV projections to the output projection, one
    rank with ``heads`` of the 128 heads): context at batch 1–256 over prompts of
    :data:`MLA_LEN`, generation over KV lengths :data:`MLA_LEN` (``step``), KV bf16 / fp8,
    GEMMs bf16 / fp8 block-scaled. Milliseconds in the source."""
    for module, file, length in (
            ("context", "mla_context_module_perf.parquet", "isl"),
            ("generation", "mla_generation_module_perf.parquet", "step")):
        d = _newest(base / "mla" / "trtllm", file)
        if d is None:
            continue
        df = pd.read_parquet(d / file)
        sel = df[df.num_heads.isin(MLA_HEADS) & df.batch_size.isin(MLA_BATCH)
                 & df[length].isin(MLA_LEN)]
        sel = sel.groupby(["kv_cache_dtype", "gemm_type", "num_heads", "batch_size", length],
                          as_index=False).latency.median()
        for r in sel.itertuples():
            rows.append((system, preset, f"trtllm-{d.name}", module, r.kv_cache_dtype,
                         r.gemm_type, r.num_heads, r.batch_size, int(getattr(r, length)),
                         r.latency * 1e-3))


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
    moe: list[tuple] = []
    moe_engines: list[tuple] = []
    a2a: list[tuple] = []
    mla: list[tuple] = []
    for system, preset in SYSTEMS.items():
        base = data / system
        _moe_rows(pd, base, system, preset, moe)
        for framework in MOE_ENGINES:
            if system in MOE_ENGINE_SYSTEMS:
                _moe_rows(pd, base, system, preset, moe_engines, framework,
                          MOE_ENGINE_DTYPES, MOE_ENGINE_DIST)
            if system in MOE_ENGINE_BF16_SYSTEMS:
                _moe_rows(pd, base, system, preset, moe_engines, framework,
                          ("bfloat16",), MOE_ENGINE_BF16_DIST.get((system, framework),
                                                                  MOE_ENGINE_DIST),
                          MOE_ENGINE_BF16_EP, MOE_ENGINE_BF16_TOKENS)
        _a2a_rows(pd, base, system, preset, a2a)
        _mla_rows(pd, base, system, preset, mla)
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
        "moe.csv": (("system", "preset", "source", "dtype", "hidden", "inter", "topk",
                     "experts", "tokens", "moe_tp", "moe_ep", "distribution", "latency_s"), moe),
        "moe_engines.csv": (("system", "preset", "source", "dtype", "hidden", "inter",
                             "topk", "experts", "tokens", "moe_tp", "moe_ep", "distribution",
                             "latency_s"), moe_engines),
        "moe_a2a.csv": (("system", "preset", "source", "backend", "phase", "dtype", "ep",
                         "nodes", "hidden", "topk", "experts", "tokens", "latency_s"), a2a),
        "mla.csv": (("system", "preset", "source", "module", "kv_dtype", "gemm_dtype", "heads",
                     "batch", "length", "latency_s"), mla),
    }
    for name, (cols, rows) in tables.items():
        lines = [",".join(cols)]
        lines += [",".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in row)
                  for row in sorted(rows)]
        (out / name).write_text("\n".join(lines) + "\n")
        print(f"{out / name}: {len(rows)} rows")


if __name__ == "__main__":
    main()
