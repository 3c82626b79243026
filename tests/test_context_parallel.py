"""Decode context parallelism (the ``cp`` head): the KV cache of every sequence split by tokens
over ``cp`` ranks of the TP group (vLLM / SGLang ``--decode-context-parallel-size``).

What it must show (issue "Per-operator choices", item 3): ``cp = 2`` halves the KV bytes per
rank and prices the exchange (query all-gather, output reduce-scatter over ``cp``); the rule
``cp ≤ tp / num_kv_heads``; exact equals brute force with the axis (``test_exact.py``'s random
problems draw ``cp`` too, and one fixed problem here); the exports carry the flag.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_exact import brute_force, check_exact_equals_brute_force, device

from learn_to_shard.api import make_cost_model, make_workload
from learn_to_shard.cost.model import CostModel
from learn_to_shard.engines import ENGINES
from learn_to_shard.hardware.spec import ClusterSpec
from learn_to_shard.model.hf_config import load_model
from learn_to_shard.parallel.space import StrategySpace
from learn_to_shard.parallel.strategy import Strategy
from learn_to_shard.workload import Phase, Workload


def _llama70b_decode(ctx: int = 32768):
    return make_cost_model("llama-3.1-70b", "h100-sxm:16",
                           make_workload("decode", context=ctx, dtype="bf16"))


def test_cp2_halves_kv_per_rank_and_prices_the_exchange() -> None:
    """Llama-3.1-70B (8 KV heads) at TP16: TP alone keeps two copies of every KV head;
    cp = 2 turns them into two token shards: half the KV bytes per rank, twice the KV
    capacity, less attention time (half the cache read), and two collectives over the cp
    pair whose bytes follow the formula."""
    cm = _llama70b_decode()
    s1 = Strategy(tp=16, ep=1, pp=1, dp=1, batch=8)
    e1, e2 = cm.evaluate(s1), cm.evaluate(dataclasses.replace(s1, cp=2))
    assert e2.memory.kv_cache_bytes == pytest.approx(e1.memory.kv_cache_bytes / 2, rel=1e-12)
    assert e2.memory.weight_bytes == e1.memory.weight_bytes
    assert e2.kv_capacity_tokens == pytest.approx(2 * e1.kv_capacity_tokens, abs=2)
    assert e2.op_time_s["attention"] < 0.6 * e1.op_time_s["attention"]
    got = {c.where: c for c in e2.collectives if c.where.startswith("decode context")}
    assert set(got) == {"decode context parallel: queries",
                        "decode context parallel: partial outputs + LSE"}
    att = cm.model.attention
    heads_per_rank = att.num_heads / (16 // 2)            # the tp / cp head group
    q = got["decode context parallel: queries"]
    o = got["decode context parallel: partial outputs + LSE"]
    assert (q.kind, q.group, o.kind, o.group) == ("all-gather", 2, "reduce-scatter", 2)
    assert q.bytes == pytest.approx(8 * heads_per_rank * att.head_dim * 2, rel=1e-12)
    assert o.bytes == pytest.approx(8 * heads_per_rank * (att.v_head_dim * 2 + 4), rel=1e-12)
    assert q.time_s > 0 and o.time_s > 0
    assert not any(c.where.startswith("decode context") for c in e1.collectives)


def test_mla_latent_is_split_by_cp() -> None:
    """DeepSeek-V3 (MLA: one latent shared by every head) at TP8: TP replicates the latent on
    all 8 ranks; cp = 8 keeps 1/8 of every sequence's tokens per rank (vLLM's DeepSeek-R1
    case study). The KV stream splits 8 ways, the math does not (all 128 heads over 1/8 of
    the tokens = 16 heads over all of them): at the measured MLA kernels' bandwidth the
    attention goes from KV-bound to compute-bound, faster but by less than 8x."""
    cm = make_cost_model("deepseek-v3", "h200:8",
                         make_workload("decode", context=65536, dtype="fp8"))
    s1 = Strategy(tp=8, ep=8, pp=1, dp=1, batch=16)
    e1, e8 = cm.evaluate(s1), cm.evaluate(dataclasses.replace(s1, cp=8))
    assert e8.memory.kv_cache_bytes == pytest.approx(e1.memory.kv_cache_bytes / 8, rel=1e-12)
    assert e8.kv_capacity_tokens == pytest.approx(8 * e1.kv_capacity_tokens, rel=1e-6)
    assert e1.op_time_s["attention"] / 3 < e8.op_time_s["attention"] \
        < e1.op_time_s["attention"] / 1.5


def test_cp_candidates_and_rule() -> None:
    """cp lies in [1, tp / num_kv_heads] and divides tp; MHA models and TensorRT-LLM get none."""
    m = load_model("llama-3.1-70b")
    cl = make_cost_model("llama-3.1-70b", "h100-sxm:16",
                         make_workload("decode", context=4096)).cluster
    sp = StrategySpace.build(m, cl)
    assert sp.cp_values == (1, 2)                       # 16 GPUs, 8 KV heads
    bad = sp.violations(Strategy(tp=8, ep=1, pp=1, dp=1, batch=8, cp=2))
    assert any(v.startswith("context_parallel") for v in bad)
    assert not sp.violations(Strategy(tp=16, ep=1, pp=1, dp=1, batch=8, cp=2))
    assert StrategySpace.build(m, cl, engine=ENGINES["trtllm"]).cp_values == (1,)
    assert StrategySpace.build(m, cl, engine=ENGINES["vllm"]).cp_values == (1, 2)
    mha = load_model("phi-3-mini-4k-instruct")                # 32 KV heads: MHA
    assert mha.attention.num_kv_heads == mha.attention.num_heads == 32
    assert StrategySpace.build(mha, cl).cp_values == (1,)
    ds = load_model("deepseek-v3")
    assert StrategySpace.build(ds, cl).cp_values == (1, 2, 4, 8, 16)


def test_exact_equals_brute_force_with_cp() -> None:
    """Llama-3.1-8B (8 KV heads) at TP16 decoding 128k-token contexts on devices whose
    memory binds, under a TPOT limit, with cp ∈ {1, 2}: the brute-force optimum over every
    action vector uses cp = 2 (the KV copies of TP16 become token shards, so twice the
    sequences fit), and the exact searcher's optimum equals it."""
    m = load_model("llama-3.1-8b")
    cl = ClusterSpec(device(12e9, 16), 16, name="test")
    sp = StrategySpace(m, cl, tp_values=(16,), ep_values=(1,), pp_values=(1,),
                       dp_values=(1,), batch_values=(1, 2, 4, 8, 16), cp_values=(1, 2))
    cm = CostModel(m, cl, Workload(Phase.DECODE, isl=131072, tpot_slo_s=0.01), space=sp)
    best, arg, raw = brute_force(cm)
    assert best > 0 and arg is not None and sp.decode(arg).cp == 2
    check_exact_equals_brute_force(cm, describe=False, bf=(best, arg, raw))


def test_long_context_needs_cp_to_fit() -> None:
    """Llama-3.1-70B with one 128k-token request per GPU pair at TP16: without cp the
    replicated KV heads need more memory than cp = 2, and cp lets a larger batch fit."""
    cm = _llama70b_decode(ctx=131072)
    s = Strategy(tp=16, ep=1, pp=1, dp=1, batch=1)
    m1 = cm.evaluate(s).max_batch
    m2 = cm.evaluate(dataclasses.replace(s, cp=2)).max_batch
    assert m2 >= 2 * m1 - 1 and m2 > m1


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_export_carries_decode_context_parallel(engine: str) -> None:
    """The exported command has ``--decode-context-parallel-size cp`` for a cp plan, and it is
    a flag of the engine's pinned parser snapshot."""
    from learn_to_shard.api import plan
    from learn_to_shard.engines.flags import check_args
    from learn_to_shard.report.export import build_export

    p = plan(model="llama-3.1-405b", cluster="h100-sxm:16", phase="decode", context=131072,
             method="exact", engine=engine)
    assert p.best is not None and p.best.feasible
    s = p.best.strategy
    ex = build_export(p, engine, model=load_model("llama-3.1-405b"), devices_per_node=8)
    text = " ".join(ex.args)
    assert s.cp == 2                   # TP16 over 8 KV heads: the two copies become shards
    assert f"--decode-context-parallel-size {s.cp} --dcp-comm-backend ag_rs" in text
    assert check_args(engine, ex.args) == []


def test_coarse_grid_is_the_filtered_product() -> None:
    """The exact searcher's degree grid is the full product of the heads, in its order, less
    exactly the rows that break the ``context_parallel`` rule."""
    from learn_to_shard.parallel.space import NUM_COARSE, RULE_BIT
    from learn_to_shard.search.exact import coarse_grid

    m = load_model("llama-3.1-70b")
    cl = make_cost_model("llama-3.1-70b", "h100-sxm:32",
                         make_workload("decode", context=4096)).cluster
    sp = StrategySpace.build(m, cl, batch_values=(1, 3, 8))
    nvec = sp.nvec[:NUM_COARSE]
    grids = np.meshgrid(*[np.arange(v) for v in nvec], indexing="ij")
    full = np.stack([g.ravel() for g in grids], axis=1)
    a = np.full((len(full), len(sp.nvec)), 2, dtype=np.int64)
    a[:, :NUM_COARSE] = full
    keep = (sp.rule_bits_many(a) & RULE_BIT["context_parallel"]) == 0
    assert len(sp.cp_values) > 2
    np.testing.assert_array_equal(coarse_grid(sp), full[keep])


def test_long_context_cases_with_and_without_cp() -> None:
    """The issue's long-context cases (``scripts/long_context.py`` prints them). Llama-3.1-405B
    at 131,072 tokens on 16 × H100: the optimum uses TP16 with cp = 2 and beats the best
    plan without cp (TP8 × PP2), and at its degrees cp = 1 does not fit (the KV copies).
    Llama-4-Scout at 10M tokens on 16 × H200: cp cannot apply (TP16 does not divide its 40
    heads, TP8 holds no KV copies), so both plans are the same."""
    from learn_to_shard.api import plan

    kw = dict(phase="decode", method="exact")
    big = plan(model="llama-3.1-405b", cluster="h100-sxm:16", context=131072, **kw)
    big1 = plan(model="llama-3.1-405b", cluster="h100-sxm:16", context=131072,
                context_parallel=False, **kw)
    assert big.best is not None and big1.best is not None
    assert big.best.strategy.cp == 2 and big1.best.strategy.cp == 1
    assert big.best.tokens_per_s_per_device > big1.best.tokens_per_s_per_device
    cm = make_cost_model("llama-3.1-405b", "h100-sxm:16",
                         make_workload("decode", context=131072))
    assert not cm.evaluate(dataclasses.replace(big.best.strategy, cp=1)).feasible
    scout = plan(model="llama-4-scout", cluster="h200:16", context=10_000_000, **kw)
    scout1 = plan(model="llama-4-scout", cluster="h200:16", context=10_000_000,
                  context_parallel=False, **kw)
    assert scout.best is not None and scout.best.feasible
    assert scout.best.strategy == scout1.best.strategy and scout.best.strategy.cp == 1
