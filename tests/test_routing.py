"""The power-law expert load (``cost.routing``) and the busiest EP rank it sets."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from learn_to_shard.cost.config import CostModelConfig
from learn_to_shard.cost.model import CostModel
from learn_to_shard.cost.routing import GRID_MAX_TOKENS, power_law_busiest_pairs
from learn_to_shard.errors import ConfigError
from learn_to_shard.hardware.presets import parse_cluster
from learn_to_shard.model import load_model
from learn_to_shard.workload import Phase, Workload


@pytest.mark.parametrize("experts, top_k, ep", [(256, 8, 8), (128, 8, 4), (8, 2, 2),
                                                (128, 4, 32)])
def test_busiest_pairs_are_bounded_and_never_fall(experts, top_k, ep):
    """Between the mean rank's pairs and every pair of the step, non-decreasing in tokens
    (inside and beyond the grid), the same table on every call."""
    t = np.concatenate([np.linspace(0, 40, 401), np.geomspace(40, 4 * GRID_MAX_TOKENS, 400)])
    b = power_law_busiest_pairs(t, ep, experts, top_k, 1.2)
    pairs = t * top_k
    assert (np.diff(b) >= 0).all()
    assert (b <= pairs + 1e-9).all()
    assert (b[t >= 1] >= pairs[t >= 1] / ep * (1 - 1e-12)).all()
    np.testing.assert_array_equal(b, power_law_busiest_pairs(t, ep, experts, top_k, 1.2))


def test_skew_grows_with_ep_and_tokens_and_vanishes_without_ep():
    """More ranks, or more tokens (the load's range grows with them), put a larger share on
    the busiest rank; one rank, or ranks that do not divide the experts, get no bound."""
    t = np.array([1024.0, 65536.0])
    share = {ep: power_law_busiest_pairs(t, ep, 256, 8, 1.2) / (t * 8 / ep) for ep in (2, 8, 32)}
    assert (share[2] < share[8]).all() and (share[8] < share[32]).all()
    assert (share[8][1] > share[8][0]) and share[8][1] > 1.5
    assert (power_law_busiest_pairs(t, 1, 256, 8, 1.2) == 0).all()
    assert (power_law_busiest_pairs(t, 3, 256, 8, 1.2) == 0).all()
    with pytest.raises(ValueError, match="exponent"):
        power_law_busiest_pairs(t, 8, 256, 8, 0.0)
    with pytest.raises(ValueError, match="exponent"):
        power_law_busiest_pairs(t, 8, 256, 8, 200.0)


def test_cost_model_takes_the_larger_of_uniform_and_power_law():
    """DeepSeek-V3's busiest EP8 rank: uniform balls into bins at one token (the power law
    puts fewer pairs there), the power law at a large step; EP1 and balanced routing are
    untouched; a non-positive exponent is refused naming the field."""
    m = load_model("deepseek-v3")
    cl = parse_cluster("h200:8")
    wl = Workload(Phase.DECODE, isl=1024)
    skewed = CostModel(m, cl, wl, config=CostModelConfig())
    uniform = CostModel(m, cl, wl, config=CostModelConfig(moe_routing_alpha=None))
    tokens, ep = np.array([1.0, 8192.0]), np.array([8, 8])
    f_s, f_u = skewed._busiest_rank_factor(tokens, ep), uniform._busiest_rank_factor(tokens, ep)
    assert f_s[0] == pytest.approx(f_u[0])
    mean = 8192 * 8 / 8
    assert f_s[1] == pytest.approx(
        power_law_busiest_pairs(np.array([8192.0]), 8, 256, 8, 1.2)[0] / mean)
    assert f_s[1] > 1.5 > f_u[1]
    one = np.array([1])
    assert skewed._busiest_rank_factor(np.array([8192.0]), one)[0] == 1.0
    even = CostModel(m, cl, wl, config=dataclasses.replace(CostModelConfig(),
                                                           moe_balanced_routing=True))
    assert even._busiest_rank_factor(tokens, ep)[1] == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="moe_routing_alpha"):
        CostModelConfig(moe_routing_alpha=-1.0)
    with pytest.raises(ConfigError, match="moe_routing_alpha"):
        CostModelConfig(moe_routing_alpha=200.0)
