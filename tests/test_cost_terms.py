"""Golden tests of single cost terms that the end-to-end golden tests do not pin.

Each restates one documented formula by hand (module docstrings of ``cost/model.py`` and
``cost/comm.py``); together with ``tests/test_cost_model.py`` they kill every mutant of
``scripts/mutation_probe.py`` (docs/validation.md, "Mutation probe").
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from conftest import tiny_dense, tiny_moe

# The golden tests' explicit factors and hand formulas (roofline, linear, activation pass).
from test_cost_model import CFG, _act, _linear, _roof  # noqa: E402

from learn_to_shard.cost import CostModel
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


@pytest.mark.parametrize("attention,bound", [(2, "flops"), (1, "bytes")])
def test_golden_mla_absorbed_decode_attention(attention, bound):
    """DeepSeek-V3 decode over tp = 8: the absorbed MLA kernel does 2·h·ctx·(2·kv_lora + rope)
    FLOPs per sequence and reads the latent cache once, ctx·(kv_lora + rope) bytes (fp8; not
    divided by a head split), plus the q/o rows, and the module's fixed cost per layer.
    Replicated (all 128 heads on a rank) it is compute-bound and pins the FLOPs; head-split
    (16 heads a rank) it is bandwidth-bound and pins the bytes."""
    m = load_model("deepseek-v3")
    cl = parse_cluster("h200:8")
    dev = cl.device
    wl = Workload(Phase.DECODE, isl=4096, weight_dtype=DType.FP8, kv_dtype=DType.FP8)
    cm = CostModel(m, cl, wl, config=CFG)
    batch, ctx, att = 16, 4096, m.attention
    dims = list(MEGATRON_DIMS)
    dims[Op.ATTENTION] = attention
    e = cm.evaluate(Strategy(tp=8, ep=8, pp=1, dp=1, batch=batch, dims=tuple(dims)))
    heads = att.num_heads / (8 if attention == 1 else 1)
    kv_lora, rope = att.kv_lora_rank, att.qk_rope_head_dim
    flops = 2 * heads * batch * ctx * (2 * kv_lora + rope)
    nbytes = batch * ctx * (kv_lora + rope) * 1 + batch * heads * (att.head_dim
                                                                   + att.v_head_dim) * 2
    t_flops = flops / (dev.peak_bf16_flops_per_s * CFG.flops_efficiency)
    t_bytes = nbytes / (dev.hbm_bytes_per_s * CFG.hbm_efficiency)
    assert (t_flops > 2 * t_bytes) if bound == "flops" else (t_bytes > 2 * t_flops)
    per_layer = max(t_flops, t_bytes) + CFG.kernel_overhead_s + CFG.mla_module_overhead_s
    assert e.op_time_s["attention"] == pytest.approx(m.num_layers * per_layer, rel=1e-9)
    # MLA's own HBM efficiency, where set, prices the same bytes (GQA keeps the other one).
    cfg = dataclasses.replace(CFG, mla_attention_hbm_efficiency=0.5)
    e2 = CostModel(m, cl, wl, config=cfg).evaluate(
        Strategy(tp=8, ep=8, pp=1, dp=1, batch=batch, dims=tuple(dims)))
    t_bytes2 = nbytes / (dev.hbm_bytes_per_s * 0.5)
    per_layer2 = max(t_flops, t_bytes2) + CFG.kernel_overhead_s + CFG.mla_module_overhead_s
    assert e2.op_time_s["attention"] == pytest.approx(m.num_layers * per_layer2, rel=1e-9)


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
    # The step's GEMMs run on its 100 decode tokens plus 100 · 512/32 prompt tokens.
    dev, H = parse_cluster("h100-sxm:1").device, 1024
    assert small.op_time_s["o_proj"] == pytest.approx(
        2 * _linear(dev, 100 * (1 + 512 / 32), H, H, H * H), rel=1e-9)


#: Serve, batch 8 at 512/32: λ = 8/32 prompts join a step on average, binomially over the 8
#: decodes (variance v = λ(1 − λ/8)); the mean step is the mix of a share λ²/(λ² + v) of
#: steps carrying λ + v/λ prompts and steps decoding alone (OperatorTerms.prompt_step_mix),
#: so that share of the steps launches the prompt layers outside the CUDA graphs (0.205; the
#: binomial's P(k ≥ 1) is 0.224).
_LAM, _V = 0.25, 0.25 * (1 - 0.25 / 8)
_PROMPT_STEPS = _LAM**2 / (_LAM**2 + _V)


@pytest.mark.parametrize("phase,extra", [
    # host time per sequence and per prompt is linear in the step's content: the mean's
    (Phase.SERVE, lambda step, seq, pre, eager: step + seq * (8 + 0.25) + pre * 0.25
     + eager * _PROMPT_STEPS),
    (Phase.DECODE, lambda step, seq, pre, eager: step + seq * 8),
    # prefill of 8 prompts of 512 tokens: one step with prompt tokens
    (Phase.PREFILL, lambda step, seq, pre, eager: step + seq * 8 + pre * 8 + eager),
])
def test_host_time_per_step_sequence_and_prompt(phase, extra):
    """Engine host time per step: host_step + host_seq·(decodes + prompts) + host_prefill·
    prompts + eager_layer·layers·(share of steps with prompt tokens) (cost/model.py,
    "Pipeline"); one stage, so it adds to TPOT / TTFT once."""
    step, seq, pre, eager = 1e-3, 1e-4, 1e-2, 3e-4
    host = dataclasses.replace(CFG, host_step_overhead_s=step, host_seq_overhead_s=seq,
                               host_prefill_overhead_s=pre, eager_layer_overhead_s=eager)
    a, b = _serve(8, CFG, phase), _serve(8, host, phase)
    t = (lambda e: e.ttft_s) if phase is Phase.PREFILL else (lambda e: e.tpot_s)
    layers = tiny_dense().num_layers
    assert t(b) - t(a) == pytest.approx(extra(step, seq, pre, eager * layers), rel=1e-9)
    assert math.isfinite(t(b))


@pytest.mark.parametrize("prefill_first", [False, True])
def test_a_pipeline_round_runs_at_its_heaviest_micro_batch(prefill_first):
    """A prompt chunk rides one pipeline micro-batch, whose next step waits for its last
    stage, so a round of m micro-batch steps lasts the prompt step's pass when any of them
    carries one (OperatorTerms.prompt_step_mix): decodes first the prompt step's weight is
    1 − (1 − q)^m. Prefill first the weights stay those of one micro-batch: which of its two
    steps is heavier depends on their prices (token counts as a stand-in made the step time
    fall with the batch past the switch, and exact missed a plan 28% better). The steps'
    contents do not change, and one micro-batch is the unpipelined mix."""
    m = tiny_dense()
    cl = parse_cluster("h100-sxm:1")
    cfg = dataclasses.replace(CFG, prefill_first=prefill_first)
    cm = CostModel(m, cl, Workload(Phase.SERVE, isl=512, osl=32), config=cfg,
                   space=StrategySpace.build(m, cl, batch_values=(8,)))
    dp = np.array([1])
    for dec, pf, seqs in ((8.0, 128.0, 0.25), (250.0, 64.0, 0.5)):
        args = (np.array([dec]), np.array([pf]), np.array([seqs]), dp)
        one = cm.prompt_step_mix(*args)
        same = cm.prompt_step_mix(*args, np.array([1.0]))
        for f in one.__dataclass_fields__:
            np.testing.assert_array_equal(getattr(same, f), getattr(one, f))
        for mb in (2.0, 4.0):
            mix = cm.prompt_step_mix(*args, np.array([mb]))
            q = float(one.q[0])
            if prefill_first:
                assert float(mix.q[0]) == q and float(mix.w_b[0]) == float(one.w_b[0])
            else:
                assert 0.0 < q < 1.0
                assert float(mix.q[0]) == pytest.approx(1 - (1 - q) ** mb, rel=1e-12)
                assert float(mix.w_b[0]) == pytest.approx((1 - q) ** mb, rel=1e-12)
            for f in ("pf_a", "seqs_a", "pf_b", "seqs_b", "dec_a"):
                np.testing.assert_array_equal(getattr(mix, f), getattr(one, f))


def test_eager_launches_of_a_prefill_pass_count_once_whatever_the_budget():
    """A prefill plan runs its pass in one step (its exports raise the engine's token budget
    to the pass, and its workspace is the pass's), launched once outside the CUDA graphs:
    4 prompts of 4,096 tokens pay one launch per layer at the 8,192 budget as at a budget
    that holds them, where they once paid two."""
    eager = 5e-4
    for budget in (8192, 16384):
        base = dataclasses.replace(CFG, max_num_batched_tokens=budget)
        cfg = dataclasses.replace(base, eager_layer_overhead_s=eager)
        a = _serve(4, base, Phase.PREFILL, isl=4096)
        b = _serve(4, cfg, Phase.PREFILL, isl=4096)
        assert b.ttft_s - a.ttft_s == pytest.approx(eager * tiny_dense().num_layers,
                                                    rel=1e-9), budget


def test_golden_prefill_operators_are_compute_bound_and_priced_by_flops():
    """Prefill of 2,048 tokens on one H100 (tiny dense model, 2 layers): every GEMM and the
    attention core are compute-bound, so their FLOPs (2·rows·params; attention
    2·h·(d_qk + d_v)·isl·isl/2) set the time; op_time_s sums the layers."""
    m = tiny_dense()
    cl = parse_cluster("h100-sxm:1")
    dev = cl.device
    e = CostModel(m, cl, Workload(Phase.PREFILL, isl=2048), config=CFG).evaluate(
        Strategy(tp=1, ep=1, pp=1, dp=1, batch=1))
    H, qkv_n, rows = 1024, 8 * 128 + 8 * 256, 2048
    want = {
        "qkv_proj": _linear(dev, rows, H, qkv_n, H * qkv_n),
        "o_proj": _linear(dev, rows, H, H, H * H),
        "dense_up": _linear(dev, rows, H, 2 * 4096, 2 * H * 4096) + _act(dev, rows * 2 * 4096),
        "dense_down": _linear(dev, rows, 4096, H, 4096 * H),
        "attention": _roof(dev, 2 * 8 * 256 * rows * rows / 2,
                           rows * 8 * 256 * 2 + rows * 8 * 256 * 2),
    }
    for op, t in want.items():
        assert e.op_time_s[op] == pytest.approx(2 * t, rel=1e-9), op
    flops_s = dev.peak_bf16_flops_per_s * CFG.flops_efficiency
    assert _linear(dev, rows, H, H, H * H) == pytest.approx(
        2 * rows * H * H / flops_s + CFG.kernel_overhead_s, rel=1e-12)   # compute-bound


def test_replicated_operators_cost_every_rank_the_whole_operator():
    """Replicate() at tp = 2: each rank holds and streams the full weights and does the full
    GEMM on the replicated tokens, exactly as at tp = 1 (decode, batch 1)."""
    m = tiny_dense()
    wl = Workload(Phase.DECODE, isl=1000)
    rep = (2,) * 12
    one = CostModel(m, parse_cluster("h100-sxm:1"), wl, config=CFG).evaluate(
        Strategy(tp=1, ep=1, pp=1, dp=1, batch=1, dims=rep))
    two = CostModel(m, parse_cluster("h100-sxm:2"), wl, config=CFG).evaluate(
        Strategy(tp=2, ep=1, pp=1, dp=1, batch=1, dims=rep))
    for op in ("qkv_proj", "o_proj", "dense_up", "dense_down"):
        assert two.op_time_s[op] == pytest.approx(one.op_time_s[op], rel=1e-12), op
    assert two.memory.weight_bytes == pytest.approx(one.memory.weight_bytes, rel=1e-12)


@pytest.mark.parametrize("batch", [1, 8])
def test_pipeline_tpot_adds_pp_minus_one_hops_or_is_set_by_the_slowest_stage(batch):
    """TPOT = max(Σ stages + (pp − 1)·p2p, m·max stage), m = min(pp, batch) micro-batches:
    batch 1 walks both stages and one hop (hidden · 2 B on NVLink); batch 8 keeps two
    micro-batches in flight, so the slower stage sets the pace."""
    m = tiny_dense()
    cl = parse_cluster("h100-sxm:2")
    cm = CostModel(m, cl, Workload(Phase.DECODE, isl=1000), config=CFG)
    e = cm.evaluate(Strategy(tp=1, ep=1, pp=2, dp=1, batch=batch))
    bw, alpha = cm.link(1)
    micro = min(2, batch)
    hop = math.ceil(batch / micro) * 1024 * 2 / bw + alpha   # one micro-batch's activations
    assert e.micro_batches == micro
    want = max(sum(e.stage_time_s) + hop, micro * max(e.stage_time_s))
    assert e.tpot_s == pytest.approx(want, rel=1e-12)
    if batch == 1:
        assert e.tpot_s == pytest.approx(sum(e.stage_time_s) + hop, rel=1e-12)
    else:
        assert e.tpot_s == pytest.approx(2 * max(e.stage_time_s), rel=1e-12)


def test_kv_pool_counts_at_kv_over_its_free_fraction():
    """An engine whose KV pool may take only a fraction f of the free memory (TRT-LLM's
    kv_cache_free_gpu_mem_fraction) needs KV / f for it: at f = 0.5 the peak grows by the
    KV bytes once more."""
    m = tiny_dense()
    cl = parse_cluster("h100-sxm:1")
    wl = Workload(Phase.DECODE, isl=1000)
    s = Strategy(tp=1, ep=1, pp=1, dp=1, batch=4)
    full = CostModel(m, cl, wl, config=CFG)
    half = CostModel(m, cl, wl, config=dataclasses.replace(CFG, kv_cache_free_fraction=0.5))
    act = full.space.encode(s)[None, :]
    kv = full.evaluate(s).memory.kv_cache_bytes
    assert kv == pytest.approx(4 * 1000 * 2 * 8 * 256 * 2, rel=REL)
    peak = [cm.evaluate_many(act).peak_memory_bytes[0] for cm in (full, half)]
    grow = peak[1] - peak[0]
    assert grow == pytest.approx(kv, rel=1e-9)


def test_norm_all_reduces_appear_in_the_breakdown():
    """A hidden-split layout's RMSNorm statistics all-reduces (priced in the step) are listed in
    the plan's collectives, once per layer and once for the final norm; Megatron's has none."""
    from learn_to_shard.api import make_cost_model, make_workload
    from learn_to_shard.parallel.strategy import Strategy

    cm = make_cost_model("llama-3.1-8b", "h100-sxm:8", make_workload("decode", context=1024))
    hidden = cm.evaluate(Strategy(4, 1, 1, 1, 16, (2, 0, 1, 0, 0, 0, 2, 1, 0, 1, 0, 0)))
    norms = {c.where: c for c in hidden.collectives if "norm" in c.where}
    assert set(norms) == {"input norm (hidden split)", "post-attention norm (hidden split)",
                          "final norm (hidden split)"}
    assert norms["input norm (hidden split)"].per_step == cm.model.num_layers
    assert all(c.kind == "all-reduce" and c.group == 4 and c.time_s > 0
               for c in norms.values())
    megatron = cm.evaluate(Strategy(4, 1, 1, 1, 16, (0, 1, 1, 0, 1, 0, 2, 1, 0, 1, 0, 1)))
    assert not [c for c in megatron.collectives if "norm" in c.where]


def test_expert_dispatch_price_does_not_depend_on_the_space_candidates():
    """The all-to-all volume uses the expected number of destination EP ranks per token,
    ``ep · (1 − C(E − E/ep, k)/C(E, k))``; a space holding a single EP value must price the
    same strategy exactly as the full space does."""
    m = load_model("deepseek-v3")
    cl = parse_cluster("h200:16")
    wl = Workload(Phase.DECODE, isl=2000)
    s = Strategy(tp=1, ep=16, pp=1, dp=16, batch=64, dims=MEGATRON_DIMS)   # DP attention
    full = CostModel(m, cl, wl)
    sp = dataclasses.replace(full.space, tp_values=(1,), ep_values=(16,), pp_values=(1,),
                             dp_values=(16,), batch_values=(64,))
    one = CostModel(m, cl, wl, space=sp)
    a, b = full.evaluate(s), one.evaluate(s)
    assert b.tpot_s == pytest.approx(a.tpot_s, rel=REL)
    e, k = m.moe.num_experts, m.moe.top_k
    want = 16 * (1 - math.comb(e - e // 16, k) / math.comb(e, k))
    assert float(one.dispatch_destinations(np.array([16]))[0]) == pytest.approx(want, rel=REL)
    assert float(one.dispatch_destinations(np.array([1]))[0]) == 1.0


def test_collective_bytes_in_the_breakdown():
    """Each collective of the breakdown carries the volume it is priced on: Megatron TP2
    decode of one sequence all-reduces ``H`` 16-bit activations per token before each norm
    and all-gathers the fp32 logits; PP2 sends each rank's ``H / tp`` slice; with a sequence
    split the MoE dispatch sends ``N/g · D(ep) · etp · H · 2 · (1 − 1/g)`` bytes per rank."""
    H, vpad = 1024, 32000
    m = tiny_dense()
    cm = CostModel(m, parse_cluster("h100-sxm:4"), Workload(Phase.DECODE, isl=1000))
    e = cm.evaluate(Strategy(tp=2, ep=1, pp=2, dp=1, batch=2))
    by = {c.where: c for c in e.collectives}
    rows = 1.0                                    # 2 sequences over 2 micro-batches
    assert by["layer input -> qkv_proj"].bytes == rows * H * 2
    assert by["o_proj -> dense_up"].bytes == rows * H * 2
    assert by["lm_head -> logits"].bytes == rows * vpad * 4
    assert by["stage -> stage"].bytes == rows * H * 2 / 2
    for c in e.collectives:
        assert c.bytes > 0, c
    mm = tiny_moe()
    cm = CostModel(mm, parse_cluster("h100-sxm:2"), Workload(Phase.DECODE, isl=1000))
    e = cm.evaluate(Strategy(tp=1, ep=2, pp=1, dp=2, batch=2))
    d = {c.where: c for c in e.collectives}
    g, n_tok = 2, 2.0                                # tokens of the stage group
    d_ep = 2 * (1 - math.comb(2, 2) / math.comb(4, 2))
    send = n_tok / g * d_ep * 1 * H * 2 * (1 - 1 / g)
    assert d["moe dispatch"].bytes == pytest.approx(send, rel=1e-12)
    assert d["moe combine"].bytes == pytest.approx(send, rel=1e-12)


def test_redistribute_takes_placements_and_integer_codes_alike():
    """``redistribute`` accepts a placement, a Python int or a numpy integer code."""
    from learn_to_shard.parallel.placement import LAYOUTS, redistribute

    for i in range(len(LAYOUTS)):
        for j in range(len(LAYOUTS)):
            want = redistribute(LAYOUTS[i], LAYOUTS[j])
            assert redistribute(i, j) == want == redistribute(np.int64(i), np.int64(j))


def test_eager_launches_when_prompts_are_chunked():
    """Long prompts beside many decodes: every step carries a chunk of the budget the decodes
    leave (8,192 − 4,096 tokens), so TPOT pays the launch time of every layer once and TTFT
    once per chunk (16,384 / 4,096 = 4 steps)."""
    eager = 2e-4
    cfg = dataclasses.replace(CFG, eager_layer_overhead_s=eager)
    a = _serve(4096, CFG, Phase.SERVE, isl=16384, osl=16384)
    b = _serve(4096, cfg, Phase.SERVE, isl=16384, osl=16384)
    per_pass = eager * tiny_dense().num_layers
    assert b.tpot_s - a.tpot_s == pytest.approx(per_pass, rel=1e-9)
    assert b.ttft_s - a.ttft_s == pytest.approx(4 * per_pass, rel=1e-9)


def test_eager_launches_of_any_attention_dp_rank_hold_every_rank():
    """With attention-DP the ranks replay a CUDA graph only when none of them prefills: four
    ranks each completing a quarter of a prompt per step make every step a prompt step."""
    m, cl = tiny_dense(), parse_cluster("h100-sxm:4")
    cfg = dataclasses.replace(CFG, eager_layer_overhead_s=1e-4)
    cm = CostModel(m, cl, Workload(Phase.SERVE, isl=512, osl=32), config=cfg)
    one = np.ones(1)
    host = cm.host_time_s(8 * one, 32 * one, 0.25 * one, one, 4 * one)
    alone = cm.host_time_s(8 * one, 32 * one, 0.25 * one, one, one)
    assert host is not None and alone is not None
    assert float(host[0]) == pytest.approx(1e-4 * m.num_layers, rel=1e-12)
    assert float(alone[0]) == pytest.approx(0.25e-4 * m.num_layers, rel=1e-12)


def test_block_scaled_expert_block_pays_per_local_expert():
    """``block_fp8_local_expert_overhead_s`` (``trtllm`` profile): DeepSeek-V3's FP8
    checkpoint (128 × 128 block scales) decoding one token on 8 H200s pays 0.25 µs per local
    expert in every MoE layer's ``expert_up``: 256 experts per rank with experts
    tensor-parallel (EP1), 32 under EP8. BF16 weights pay nothing, nor do the ``vllm`` and
    ``sglang`` profiles (no measured kernels of theirs)."""
    from learn_to_shard.cost import CostModelConfig

    m = load_model("deepseek-v3")
    assert m.weight_block_size == (128, 128)
    cl = parse_cluster("h200:8")
    layers = sum(1 for layer in m.layers if layer.is_moe)

    def expert_up_s(engine, dtype, ep, **kw):
        wl = Workload(Phase.DECODE, isl=1024, weight_dtype=dtype)
        cm = CostModel(m, cl, wl, config=CostModelConfig.for_engine(engine, **kw))
        return cm.evaluate(Strategy(tp=8, ep=ep, pp=1, dp=1, batch=1,
                                    dims=MEGATRON_DIMS)).op_time_s["expert_up"]

    for ep, local in ((1, 256), (8, 32)):
        on = expert_up_s("trtllm", DType.FP8, ep)
        off = expert_up_s("trtllm", DType.FP8, ep, block_fp8_local_expert_overhead_s=0.0)
        assert on - off == pytest.approx(layers * local * 0.25e-6, rel=1e-9)
        assert expert_up_s("trtllm", DType.BF16, ep) == expert_up_s(
            "trtllm", DType.BF16, ep, block_fp8_local_expert_overhead_s=0.0)
    assert CostModelConfig.for_engine("vllm").block_fp8_local_expert_overhead_s == 0.0
    assert CostModelConfig.for_engine("sglang").block_fp8_local_expert_overhead_s == 0.0
