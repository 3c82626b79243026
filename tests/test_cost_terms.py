"""Golden tests of single cost terms that the end-to-end golden tests do not pin.

Each restates one documented formula by hand (module docstrings of ``cost/model.py`` and
``cost/comm.py``); together with ``tests/test_cost_model.py`` they kill every mutant of
``scripts/mutation_probe.py`` (docs/validation.md, "Mutation probe").
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import tiny_dense

from learn_to_shard.cost import CostModel, CostModelConfig
from learn_to_shard.cost.comm import (
    ALL_REDUCE,
    ALL_TO_ALL,
    GATHER_OR_SCATTER,
    NONE,
    collective_time_s,
)
from learn_to_shard.hardware import parse_cluster
from learn_to_shard.model import load_model
from learn_to_shard.parallel import MEGATRON_DIMS, Strategy, StrategySpace
from learn_to_shard.parallel.ops import Op
from learn_to_shard.parallel.placement import S1, R
from learn_to_shard.workload import DType, Phase, Workload

# Explicit factors so the numbers pin the formulas, not a calibration.
CFG = CostModelConfig(flops_efficiency=0.7, hbm_efficiency=0.8, scale_up_efficiency=0.8,
                      scale_out_efficiency=0.8, kernel_overhead_s=2e-6,
                      attention_hbm_efficiency=None)
REL = 1e-12


def test_collective_time_of_every_kind():
    """Alpha-beta with nccl-tests bus factors: all-reduce 2(n−1)/n·S, all-gather and
    reduce-scatter (n−1)/n·S, the layout all-to-all S(i)→S(j) (n−1)/n·S/n (each rank keeps
    1/n of its 1/n slice); 2⌈log2 n⌉ latency steps for all-reduce, ⌈log2 n⌉ otherwise."""
    kinds = np.array([ALL_REDUCE, GATHER_OR_SCATTER, ALL_TO_ALL, NONE, ALL_REDUCE])
    n = np.array([4, 4, 4, 4, 1])
    size, bw, alpha = 1e6, 1e11, 1e-6
    got = collective_time_s(kinds, n, np.full(5, size), np.full(5, bw), np.full(5, alpha))
    want = [2 * 0.75 * size / bw + 4 * alpha, 0.75 * size / bw + 2 * alpha,
            0.75 * size / 4 / bw + 2 * alpha, 0.0, 0.0]
    np.testing.assert_allclose(got, want, rtol=REL, atol=0)
    six = collective_time_s(np.array([GATHER_OR_SCATTER]), np.array([6]), np.array([size]),
                            np.array([bw]), np.array([alpha]))
    assert six[0] == pytest.approx(5 / 6 * size / bw + 3 * alpha, rel=REL)   # ⌈log2 6⌉ = 3


def test_norm_over_a_hidden_split_activation_all_reduces_one_fp32_per_token():
    """RMSNorm statistics of an S(1) activation: an all-reduce of 4 bytes per token over the
    group (nothing for a replicated input). This prices the hidden-split layouts."""
    cl = parse_cluster("h100-sxm:8")
    cm = CostModel(tiny_dense(), cl, Workload(Phase.DECODE, isl=1000), config=CFG)
    n = np.array([8, 8])
    t = cm._norm_stats(np.array([S1, R]), np.array([64.0, 64.0]), n, cm._link(n))
    bw, alpha = cm.link(8)
    assert t[0] == pytest.approx(2 * 7 / 8 * 64 * 4 / bw + 2 * 3 * alpha, rel=REL)
    assert t[1] == 0.0


def test_golden_mla_absorbed_decode_attention():
    """DeepSeek-V3 decode, attention replicated on each of tp = 8 ranks (all 128 heads): the
    absorbed MLA kernel does 2·h·ctx·(2·kv_lora + rope) FLOPs per sequence and reads the
    latent cache once, ctx·(kv_lora + rope) bytes (fp8), plus the q/o rows; with all heads
    on a rank it is compute-bound, so the FLOPs term is what the time pins."""
    m = load_model("deepseek-v3")
    cl = parse_cluster("h200:8")
    dev = cl.device
    wl = Workload(Phase.DECODE, isl=4096, weight_dtype=DType.FP8, kv_dtype=DType.FP8)
    cm = CostModel(m, cl, wl, config=CFG)
    batch, ctx, att = 16, 4096, m.attention
    dims = list(MEGATRON_DIMS)
    dims[Op.ATTENTION] = 2
    e = cm.evaluate(Strategy(tp=8, ep=8, pp=1, dp=1, batch=batch, dims=tuple(dims)))
    heads = att.num_heads
    kv_lora, rope = att.kv_lora_rank, att.qk_rope_head_dim
    flops = 2 * heads * batch * ctx * (2 * kv_lora + rope)
    nbytes = batch * ctx * (kv_lora + rope) * 1 + batch * heads * (att.head_dim
                                                                   + att.v_head_dim) * 2
    t_flops = flops / (dev.peak_bf16_flops_per_s * CFG.flops_efficiency)
    t_bytes = nbytes / (dev.hbm_bytes_per_s * CFG.hbm_efficiency)
    assert t_flops > t_bytes                                    # the FLOPs term is pinned
    per_layer = max(t_flops, t_bytes) + CFG.kernel_overhead_s
    assert e.op_time_s["attention"] == pytest.approx(m.num_layers * per_layer, rel=1e-9)


def _serve(batch, cfg=CFG, phase=Phase.SERVE, isl=512, osl=32):
    m = tiny_dense()
    cl = parse_cluster("h100-sxm:1")
    space = StrategySpace.build(m, cl, batch_values=(batch,))
    wl = Workload(phase, isl=isl, osl=osl if phase is Phase.SERVE else 0)
    return CostModel(m, cl, wl, config=cfg, space=space).evaluate(
        Strategy(tp=1, ep=1, pp=1, dp=1, batch=batch))


def test_serve_step_carries_exactly_the_token_budget_share():
    """A serve step needs batch·(1 + isl/osl) tokens; above the budget only
    budget / (batch·(1 + isl/osl)) of the requests progress, so output tokens per step are
    exactly budget / (1 + isl/osl) = 8192 / 17 at 512/32, whatever the batch."""
    for batch in (800, 2000):
        e = _serve(batch)
        assert e.tokens_per_s_per_device * e.tpot_s == pytest.approx(8192 / 17, rel=REL)
    small = _serve(100)                                    # under the budget: every request
    assert small.tokens_per_s_per_device * small.tpot_s == pytest.approx(100, rel=REL)


@pytest.mark.parametrize("phase,extra", [
    # serve, batch 8 at 512/32: 8 decodes and 8/32 prompts completing per step
    (Phase.SERVE, lambda step, seq, pre: step + seq * (8 + 0.25) + pre * 0.25),
    (Phase.DECODE, lambda step, seq, pre: step + seq * 8),
    (Phase.PREFILL, lambda step, seq, pre: step + seq * 8 + pre * 8),
])
def test_host_time_per_step_sequence_and_prompt(phase, extra):
    """Engine host time per step: host_step + host_seq·(decodes + prompts) + host_prefill·
    prompts (cost/model.py, "Pipeline"); one stage, so it adds to TPOT / TTFT once."""
    step, seq, pre = 1e-3, 1e-4, 1e-2
    host = CostModelConfig(**{**{f: getattr(CFG, f) for f in CFG.__slots__},
                              "host_step_overhead_s": step, "host_seq_overhead_s": seq,
                              "host_prefill_overhead_s": pre})
    a, b = _serve(8, CFG, phase), _serve(8, host, phase)
    t = (lambda e: e.ttft_s) if phase is Phase.PREFILL else (lambda e: e.tpot_s)
    assert t(b) - t(a) == pytest.approx(extra(step, seq, pre), rel=1e-9)
    assert math.isfinite(t(b))
