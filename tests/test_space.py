"""Strategy-space validity rules and placements."""

from __future__ import annotations

import pytest
from conftest import tiny_dense, tiny_moe

from learn_to_shard.hardware import parse_cluster
from learn_to_shard.model import load_model
from learn_to_shard.parallel import (
    MEGATRON_DIMS,
    Collective,
    Partial,
    Replicate,
    Shard,
    Strategy,
    StrategySpace,
    redistribute,
)
from learn_to_shard.parallel.ops import Op


def _rules(space, s):
    return {v.split(":")[0] for v in space.violations(s)}


def test_redistribute_rules():
    assert redistribute(Partial(), Replicate()) is Collective.ALL_REDUCE
    assert redistribute(Partial(), Shard(0)) is Collective.REDUCE_SCATTER
    assert redistribute(Shard(1), Replicate()) is Collective.ALL_GATHER
    assert redistribute(Shard(0), Shard(1)) is Collective.ALL_TO_ALL
    assert redistribute(Replicate(), Shard(1)) is None
    for p in (Replicate(), Shard(0), Shard(1), Partial()):
        assert redistribute(p, p) is None


def test_tp8_rejected_for_28_heads_4_kv_heads():
    """FC-02 (Qwen2-7B shape): TP ∈ {1, 2, 4}; TP=8 breaks the head rule."""
    m = tiny_dense(heads=28, kv=4, hidden=3584, ffn=18944)
    sp = StrategySpace.build(m, parse_cluster("h100-sxm:8"))
    assert "heads" in _rules(sp, Strategy(tp=8, ep=1, pp=1, dp=1, batch=8))
    for tp in (1, 2, 4):
        assert _rules(sp, Strategy(tp=tp, ep=1, pp=1, dp=1, batch=8)) == set()


def test_kv_heads_rule_allows_replication_only_for_multiples():
    m = tiny_dense(heads=24, kv=4, hidden=3072)       # 24 % 6 == 0 but 6 is not a kv multiple
    sp = StrategySpace.build(m, parse_cluster("h100-sxm:6"))
    assert "kv_heads" in _rules(sp, Strategy(tp=6, ep=1, pp=1, dp=1, batch=8))
    sp8 = StrategySpace.build(m, parse_cluster("h100-sxm:8"))
    assert _rules(sp8, Strategy(tp=8, ep=1, pp=1, dp=1, batch=8)) == set()  # 2× replication


def test_expert_layer_and_device_rules():
    m = tiny_moe(experts=4)
    sp = StrategySpace.build(m, parse_cluster("h100-sxm:8"))
    assert "ep_group" in _rules(sp, Strategy(tp=1, ep=4, pp=1, dp=2, batch=2))
    assert _rules(sp, Strategy(tp=2, ep=4, pp=1, dp=2, batch=2)) == set()
    assert "devices" in _rules(sp, Strategy(tp=8, ep=1, pp=2, dp=1, batch=2))
    assert max(sp.pp_values) <= m.num_layers      # more stages than layers is never offered
    assert "batch" in _rules(sp, Strategy(tp=1, ep=1, pp=1, dp=2, batch=1))


def test_dense_model_has_no_expert_parallelism():
    sp = StrategySpace.build(tiny_dense(), parse_cluster("h100-sxm:8"))
    assert sp.ep_values == (1,)


def test_fp8_block_rule_deepseek_tp32():
    """FC-09: DeepSeek FP8 blocks of 128: dense FFN 18432 / 32 = 576 is not a multiple."""
    m = load_model("deepseek-v3")
    sp = StrategySpace.build(m, parse_cluster("h100-sxm:32"))
    assert "quant_block" in _rules(sp, Strategy(tp=32, ep=1, pp=1, dp=1, batch=32))
    dims = list(MEGATRON_DIMS)
    dims[Op.EXPERT_UP] = dims[Op.EXPERT_DOWN] = 2        # experts replicated within etp
    ok = Strategy(tp=16, ep=16, pp=1, dp=1, batch=16, dims=tuple(dims))
    assert "quant_block" not in _rules(sp, ok)


def test_six_gpu_box_offers_tp2_pp3():
    """FC-07: on six devices the space contains TP=2 × PP=3."""
    sp = StrategySpace.build(load_model("llama-3.1-8b"), parse_cluster("h100-sxm:6"))
    assert 3 in sp.pp_values and 2 in sp.tp_values and 6 in sp.tp_values


@pytest.mark.parametrize("bad", [(0, 1, 2), tuple([3] * 12)])
def test_strategy_rejects_bad_dims(bad):
    with pytest.raises(ValueError):
        Strategy(tp=1, ep=1, pp=1, dp=1, batch=1, dims=bad)
