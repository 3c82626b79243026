"""Long-context decode with and without decode context parallelism (``cp``), side by side.

For each case the exact optimum is found twice — over the full space and with ``cp`` fixed to 1
(``l2s plan --no-context-parallel``) — and the two plans are printed with what decides between
them: tokens/s per device, TPOT, the per-device memory split (weights, KV of the batch) and
the KV capacity. The cases (issue "Per-operator choices", item 3):

* Llama-4-Scout decoding one 10M-token context on 16 × H200 (its published maximum context;
  3 of 4 layers use 8,192-token chunked attention, so the 12 global layers hold the long KV);
* a dense GQA model at its longest context on 16 devices: Llama-3.1-405B at 131,072 tokens on
  16 × H100 (8 KV heads: TP16 keeps two copies of every KV head unless cp = 2).

Usage::

    python scripts/long_context.py            # ~10 s
"""

from __future__ import annotations

import dataclasses

from rich.console import Console
from rich.table import Table

from learn_to_shard.api import make_cost_model, make_workload, plan
from learn_to_shard.hardware.presets import parse_cluster
from learn_to_shard.model.hf_config import load_model
from learn_to_shard.parallel.space import StrategySpace
from learn_to_shard.units import to_gib

CASES = (
    ("llama-4-scout", "h200:16", 10_000_000),
    ("llama-3.1-405b", "h100-sxm:16", 131_072),
)


def row(label: str, p) -> list[str]:
    """One table row for plan ``p``."""
    if p.best is None or not p.best.feasible:
        return [label, "none feasible", "", "", "", "", ""]
    e = p.best
    return [label, e.strategy.short(), f"{e.tokens_per_s_per_device:.2f}",
            f"{e.tpot_s * 1e3:.1f}", f"{to_gib(e.memory.weight_bytes):.1f}",
            f"{to_gib(e.memory.kv_cache_bytes):.1f}", f"{e.kv_capacity_tokens:,}"]


def main() -> None:
    """Print the table of every case."""
    con = Console(width=150)
    for model, cluster, ctx in CASES:
        t = Table(title=f"{model} decode, context {ctx:,} tokens, {cluster} (exact optimum)")
        for col in ("space", "best strategy", "tok/s/device", "TPOT ms", "weights GiB/dev",
                    "KV GiB/dev", "KV capacity tokens"):
            t.add_column(col)
        with_cp = plan(model=model, cluster=cluster, phase="decode", context=ctx,
                       method="exact")
        no_cp = plan(model=model, cluster=cluster, phase="decode", context=ctx,
                     method="exact", context_parallel=False)
        t.add_row(*row("with cp", with_cp))
        t.add_row(*row("cp = 1", no_cp))
        best = with_cp.best
        if best is not None and best.strategy.cp > 1:
            cm = make_cost_model(model, cluster, make_workload("decode", context=ctx))
            e1 = cm.evaluate(dataclasses.replace(best.strategy, cp=1))
            why = "; ".join(e1.violations) or "feasible"
            t.add_row("its degrees, cp = 1", e1.strategy.short(),
                      f"{e1.tokens_per_s_per_device:.2f}", f"{e1.tpot_s * 1e3:.1f}",
                      f"{to_gib(e1.memory.weight_bytes):.1f}",
                      f"{to_gib(e1.memory.kv_cache_bytes):.1f}", f"{e1.kv_capacity_tokens:,}")
            t.caption = f"its degrees with cp = 1: {why}"
        con.print(t)
        m = load_model(model)
        sp = StrategySpace.build(m, parse_cluster(cluster))
        att = m.attention
        con.print(f"  {att.num_heads} heads, {att.num_kv_heads} KV heads; cp candidates "
                  f"{sp.cp_values} (cp ≤ tp / KV heads, and tp must divide the heads)")

if __name__ == "__main__":
    main()
