"""Engine capability profiles restrict the strategy space, for every searcher (exact included)."""

from __future__ import annotations

import numpy as np
import pytest

from learn_to_shard.api import cost_config, make_cost_model, make_workload, search_plan
from learn_to_shard.engines import BLOCKS, ENGINES, MEGATRON
from learn_to_shard.parallel.ops import MEGATRON_DIMS, OP_NAMES
from learn_to_shard.parallel.space import NUM_COARSE, RULE_BIT
from learn_to_shard.parallel.strategy import Strategy
from learn_to_shard.search.exact import ExactSearcher
from learn_to_shard.search.megatron import MegatronSearcher


def _cm(model, cluster, engine, dtype="bf16"):
    wl = make_workload("serve", isl=1024, osl=256, dtype=dtype, tpot_slo_s=0.05,
                       ttft_slo_s=1.0)
    return make_cost_model(model, cluster, wl, cost_config(engine), engine=engine)


def test_megatron_blocks_match_the_operator_table():
    for block, ops in BLOCKS.items():
        assert MEGATRON[block] == tuple(MEGATRON_DIMS[OP_NAMES.index(o)] for o in ops)
    assert sorted(o for ops in BLOCKS.values() for o in ops) == sorted(OP_NAMES)


def test_vllm_refuses_tp3_for_64_heads():
    """The issue's case: 64 heads on 6 GPUs. Without an engine "TP3" can still be chosen by
    replicating every weight; vLLM's layout splits heads, so TP3 is refused."""
    free = _cm("llama-3.1-70b", "h100-sxm:6", None)
    vllm = _cm("llama-3.1-70b", "h100-sxm:6", "vllm")
    s = Strategy(tp=3, ep=1, pp=1, dp=1, batch=16, dims=(2,) * 12)
    assert not free.space.violations(s)
    assert any(v.startswith("engine_layout") for v in vllm.space.violations(s))
    meg = Strategy(tp=3, ep=1, pp=1, dp=1, batch=16)
    assert any(v.startswith("heads") for v in vllm.space.violations(meg))
    plan = search_plan(vllm, method="exact", engine="vllm")
    assert all(e.strategy.tp != 3 for e in [plan.best, *plan.alternatives])


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_exact_equals_exhaustive_megatron_where_the_engine_runs_only_megatron(engine):
    """vLLM and TensorRT-LLM implement Megatron's layout only, so the exact optimum over the
    engine's space must equal the exhaustive degree search with Megatron dims on it."""
    cm = _cm("qwen3-30b-a3b", "h100-sxm:8", engine)
    ex = ExactSearcher().search(cm, None, 0)
    mg = MegatronSearcher().search(cm, 10**6, 0)
    assert ex.best_objective == pytest.approx(mg.best_objective, rel=1e-9)
    best = cm.evaluate(ex.best_action)
    assert best.feasible and not cm.space.violations(best.strategy)


def test_engine_degree_rules():
    vllm = _cm("qwen3-30b-a3b", "h100-sxm:8", "vllm").space
    sgl = _cm("qwen3-30b-a3b", "h100-sxm:8", "sglang").space
    trt = _cm("qwen3-30b-a3b", "h100-sxm:8", "trtllm").space
    partial_ep = Strategy(tp=2, ep=2, pp=1, dp=2, batch=16)      # ep 2 of a 4-rank group
    assert any(v.startswith("engine_degrees") for v in vllm.violations(partial_ep))
    assert not sgl.violations(partial_ep)
    tp_and_adp = Strategy(tp=2, ep=4, pp=1, dp=2, batch=16)
    assert any(v.startswith("engine_degrees") for v in trt.violations(tp_and_adp))
    assert not vllm.violations(tp_and_adp) and not sgl.violations(tp_and_adp)


def test_sglang_offers_replicated_dense_mlp():
    sp = _cm("deepseek-v2-lite", "h100-sxm:8", "sglang").space
    d = list(MEGATRON_DIMS)
    d[OP_NAMES.index("dense_up")] = d[OP_NAMES.index("dense_down")] = 2
    s = Strategy(tp=1, ep=8, pp=1, dp=8, batch=64, dims=tuple(d))
    assert not sp.violations(s)
    assert _cm("deepseek-v2-lite", "h100-sxm:8", "vllm").space.violations(s)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_every_searcher_returns_engine_legal_strategies(engine):
    cm = _cm("mixtral-8x7b", "h100-sxm:8", engine)
    for method in ("exact", "megatron", "random"):
        plan = search_plan(cm, method=method, budget=200, seed=1, engine=engine)
        for e in [plan.best, *plan.alternatives]:
            if e is not None:
                assert not cm.space.violations(e.strategy), (method, e.strategy.short())


def test_layout_rule_is_the_only_joint_rule():
    """The exact search relies on it: every other rule is a disjunction over operators."""
    cm = _cm("qwen3-30b-a3b", "h100-sxm:8", "vllm")
    rng = np.random.default_rng(0)
    a = cm.space.sample(rng, 2000)
    a[:, NUM_COARSE:] = 2                                 # all replicated
    bits = cm.space.rule_bits_many(a)
    layout = (bits & RULE_BIT["engine_layout"]) != 0
    assert layout.all()            # Megatron shards attention: all-replicated is refused
