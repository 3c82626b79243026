"""Cost model: hand-computed golden estimates, redistribution, memory, batched == scalar."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from conftest import tiny_dense, tiny_moe

from learn_to_shard.cost import CostModel, CostModelConfig
from learn_to_shard.cost.shapes import kv_cache_bytes_per_token
from learn_to_shard.errors import ConfigError
from learn_to_shard.hardware import parse_cluster
from learn_to_shard.model import load_model
from learn_to_shard.parallel import MEGATRON_DIMS, Strategy, StrategySpace
from learn_to_shard.parallel.ops import Op
from learn_to_shard.workload import DType, Phase, Workload

# Explicit factors so the golden numbers pin the formulas, not a calibration.
CFG = CostModelConfig(flops_efficiency=0.7, hbm_efficiency=0.8, scale_up_efficiency=0.8,
                      scale_out_efficiency=0.8, kernel_overhead_s=2e-6,
                      attention_hbm_efficiency=None,   # attention streams KV at hbm_efficiency
                      mla_attention_hbm_efficiency=None)
REL = 1e-9  # the hand computation follows the documented formulas exactly


def _roof(dev, flops, n_bytes, fp8=False):
    peak = (dev.peak_fp8_flops_per_s if fp8 else dev.peak_bf16_flops_per_s) * CFG.flops_efficiency
    return max(flops / peak, n_bytes / (dev.hbm_bytes_per_s * CFG.hbm_efficiency)) \
        + CFG.kernel_overhead_s


def _linear(dev, rows, k, n, params):
    return _roof(dev, 2 * rows * params, params * 2 + rows * (k + n) * 2)


def _expert_roof(dev, flops, n_bytes, k, n):
    """An expert GEMM of local shape ``[·, k] · [k, n]``: the roofline at the rate times the
    narrow-GEMM factor ``k/(k + x) · n/(n + x)``, ``x = expert_shape_half``."""
    x = CFG.expert_shape_half
    peak = dev.peak_bf16_flops_per_s * CFG.flops_efficiency * k / (k + x) * n / (n + x)
    return max(flops / peak, n_bytes / (dev.hbm_bytes_per_s * CFG.hbm_efficiency)) \
        + CFG.kernel_overhead_s


def _act(dev, up_elems):
    """Gated activation pass: read the gate+up outputs, write half (SiluAndMul), 2 B each."""
    return up_elems * 1.5 * 2 / (dev.hbm_bytes_per_s * CFG.hbm_efficiency) + CFG.kernel_overhead_s


def _allreduce(dev, n, nbytes):
    bw = dev.scale_up_bytes_per_s * CFG.scale_up_efficiency
    return 2 * (n - 1) / n * nbytes / bw + 2 * math.ceil(math.log2(n)) * dev.scale_up_latency_s


def test_golden_dense_tp1_decode():
    """2-layer dense model, one H100, batch 1, context 1000, Megatron dims: every term by hand."""
    m = tiny_dense()
    cl = parse_cluster("h100-sxm:1")
    dev = cl.device
    wl = Workload(Phase.DECODE, isl=1000)
    cm = CostModel(m, cl, wl, config=CFG)
    e = cm.evaluate(Strategy(tp=1, ep=1, pp=1, dp=1, batch=1))
    H, qkv_n = 1024, 8 * 128 + 8 * 256
    layer = (_linear(dev, 1, H, qkv_n, H * qkv_n)
             + _roof(dev, 2 * 8 * 256 * 1000, 1000 * 8 * 256 * 2 + 8 * 256 * 2)  # attention
             + _linear(dev, 1, H, H, H * H)                                         # o_proj
             + _linear(dev, 1, H, 2 * 4096, 2 * H * 4096)                           # gate+up
             + _act(dev, 2 * 4096)                                                  # SiluAndMul
             + _linear(dev, 1, 4096, H, 4096 * H))                                  # down
    emb = CFG.kernel_overhead_s + H * 2 / (dev.hbm_bytes_per_s * CFG.hbm_efficiency)
    lm = _linear(dev, 1, H, 32000, H * 32000)
    expected = 2 * layer + emb + lm
    assert e.feasible
    assert e.tpot_s == pytest.approx(expected, rel=REL)
    assert e.tokens_per_s_per_device == pytest.approx(1 / expected, rel=REL)
    assert e.collectives == ()                         # nothing to communicate at tp=1
    # Memory: all weights + 1 sequence × 1000 tokens × 2 layers × 8 KV heads × 256 × 2 B.
    weights = (2 * (H * qkv_n + H * H + 3 * H * 4096) + 2 * 32000 * H) * 2
    assert e.memory.weight_bytes == pytest.approx(weights, rel=REL)
    assert e.memory.kv_cache_bytes == pytest.approx(1000 * 2 * 8 * 256 * 2, rel=REL)


def test_golden_dense_tp2_adds_two_allreduces_per_layer():
    """Megatron at tp=2: compute halves per rank, plus one all-reduce before each norm."""
    m = tiny_dense()
    cl = parse_cluster("h100-sxm:2")
    dev = cl.device
    cm = CostModel(m, cl, Workload(Phase.DECODE, isl=1000), config=CFG)
    e = cm.evaluate(Strategy(tp=2, ep=1, pp=1, dp=1, batch=1))
    H, qkv_n = 1024, 8 * 128 + 8 * 256
    ar = _allreduce(dev, 2, 1 * H * 2)
    layer = (ar + _roof(dev, 2 * H * qkv_n / 2, H * qkv_n + (H + qkv_n / 2) * 2)
             + _roof(dev, 2 * 4 * 256 * 1000, 1000 * 4 * 256 * 2 + 4 * 256 * 2)
             + _roof(dev, 2 * H * H / 2, H * H + (H / 2 + H) * 2)
             + ar + _roof(dev, 2 * 2 * H * 4096 / 2, 2 * H * 4096 + (H + 4096) * 2)
             + _act(dev, 4096)
             + _roof(dev, 2 * 4096 * H / 2, 4096 * H + (2048 + H) * 2))
    emb = CFG.kernel_overhead_s + H * 2 / (dev.hbm_bytes_per_s * CFG.hbm_efficiency)
    vpad = 32000  # already a multiple of 64 × 2
    lm = (ar + _roof(dev, 2 * H * vpad / 2, H * vpad + (H + vpad) * 2)
          + (1 / 2 * 1 * vpad * 4 / (dev.scale_up_bytes_per_s * 0.8)
             + 1 * dev.scale_up_latency_s))                 # logits all-gather (fp32)
    assert e.tpot_s == pytest.approx(2 * layer + emb + lm, rel=REL)
    kinds = {(c.where, c.kind): c.per_step for c in e.collectives}
    assert kinds[("layer input -> qkv_proj", "all-reduce")] == 2
    assert kinds[("o_proj -> dense_up", "all-reduce")] == 2


def test_golden_moe_local_routing_and_all_to_all():
    """MoE: tp=1 routes locally (no collective), the expert block with its fixed cost and the
    narrow-GEMM rate; ep=2, dp=2 dispatches by all-to-all whose
    volume is N/g · D(ep) · etp · H · bytes · (1 − 1/g), D(2) = 2·(1 − C(2,2)/C(4,2)) = 5/3."""
    m = tiny_moe()
    cl = parse_cluster("h100-sxm:2")
    dev = cl.device
    wl = Workload(Phase.DECODE, isl=1000)
    cm = CostModel(m, cl, wl, config=CFG)
    e1 = cm.evaluate(Strategy(tp=1, ep=1, pp=1, dp=1, batch=1))
    assert e1.collectives == ()
    # Expert compute at batch 1: 2 token-expert pairs, 2 of 4 experts touched.
    H, FFN = 1024, 512
    up = (_expert_roof(dev, 2 * 2 * 2 * H * FFN, 2 * 2 * H * FFN * 2 + 2 * (H + 2 * FFN) * 2,
                       H, 2 * FFN)
          + _act(dev, 2 * 2 * FFN) + CFG.moe_block_overhead_s)
    assert e1.op_time_s["expert_up"] == pytest.approx(2 * up, rel=REL)
    e2 = cm.evaluate(Strategy(tp=1, ep=2, pp=1, dp=2, batch=2))
    a2a = [c for c in e2.collectives if c.where == "moe dispatch"]
    assert len(a2a) == 1 and a2a[0].kind == "all-to-all" and a2a[0].per_step == 2
    send = 2 / 2 * (5 / 3) * 1 * H * 2 * (1 - 1 / 2)
    bw = dev.scale_up_bytes_per_s * CFG.scale_up_efficiency
    assert a2a[0].time_s == pytest.approx(send / bw + dev.scale_up_latency_s, rel=REL)


def test_golden_busiest_ep_rank_and_dense_local_outputs():
    """ep=2 with tokens replicated (tp=2, dp=1): the busiest rank carries
    m/n + sqrt(2 (m/n) ln n) pairs (balls into bins) and streams the weights of the distinct
    experts among its two that they land on, and vLLM's fused MoE writes (and activates) the
    output rows of all pairs, its own and the other rank's (zeros)."""
    m = tiny_moe()
    cl = parse_cluster("h100-sxm:2")
    dev = cl.device
    cm = CostModel(m, cl, Workload(Phase.DECODE, isl=1000), config=CFG)
    e = cm.evaluate(Strategy(tp=2, ep=2, pp=1, dp=1, batch=8))
    H, FFN = 1024, 512
    pairs = 8 * 2                                   # 8 tokens, top-2
    mean = pairs / 2
    busiest = mean + math.sqrt(2 * mean * math.log(2))
    touched = 2 * (1 - (1 - 1 / 2) ** busiest)      # of the rank's 2 experts
    up = (_expert_roof(dev, 2 * busiest * 2 * H * FFN,
                       touched * 2 * H * FFN * 2 + (busiest * H + pairs * 2 * FFN) * 2, H, 2 * FFN)
          + _act(dev, pairs * 2 * FFN) + CFG.moe_block_overhead_s)
    assert e.op_time_s["expert_up"] == pytest.approx(2 * up, rel=REL)
    own = CostModel(m, cl, Workload(Phase.DECODE, isl=1000),
                    config=dataclasses.replace(CFG, moe_dense_local_outputs=False))
    e_own = own.evaluate(Strategy(tp=2, ep=2, pp=1, dp=1, batch=8))
    up_own = (_expert_roof(dev, 2 * busiest * 2 * H * FFN,
                           touched * 2 * H * FFN * 2 + busiest * (H + 2 * FFN) * 2, H, 2 * FFN)
              + _act(dev, busiest * 2 * FFN) + CFG.moe_block_overhead_s)
    assert e_own.op_time_s["expert_up"] == pytest.approx(2 * up_own, rel=REL)
    # expert_down writes the same rows (H wide), then the top-k sum reads them all and writes
    # one row per token.
    down = (_expert_roof(dev, 2 * busiest * FFN * H,
                         touched * FFN * H * 2 + (busiest * FFN + pairs * H) * 2, FFN, H)
            + _stream(dev, pairs * H * (1 + 1 / 2)))
    assert e.op_time_s["expert_down"] == pytest.approx(2 * down, rel=REL)


def _stream(dev, elems):
    return elems * 2 / (dev.hbm_bytes_per_s * CFG.hbm_efficiency) + CFG.kernel_overhead_s


def test_busiest_rank_bounds():
    """At least one pair when there is one; never more than every token can send; skew
    (moe_imbalance) scales the load but not past that bound."""
    m = tiny_moe()                                   # 4 experts, top-2
    cl = parse_cluster("h100-sxm:4")
    wl = Workload(Phase.DECODE, isl=100)
    cm = CostModel(m, cl, wl, config=CFG)
    one, four = np.array([1.0]), np.array([4])
    # 1 token, 2 pairs over 4 ranks: mean 0.5 -> the busiest carries 1, twice the mean.
    assert cm._busiest_rank_factor(one, four)[0] == pytest.approx(2.0, rel=REL)
    skew = CostModel(m, cl, wl, config=dataclasses.replace(CFG, moe_imbalance=1.5))
    two = np.array([2])
    # ep=2: mean 1, uniform max 1 + sqrt(2 ln 2) = 2.18, ×1.5 = 3.3 > 2 pairs of the token.
    assert skew._busiest_rank_factor(one, two)[0] == pytest.approx(2.0, rel=REL)
    assert cm._busiest_rank_factor(np.array([0.0]), two)[0] == 1.0
    # The kernel tables' balanced routing: pairs spread evenly, ⌈mean⌉ on the busiest rank.
    even = CostModel(m, cl, wl, config=dataclasses.replace(CFG, moe_balanced_routing=True))
    assert even._busiest_rank_factor(one, four)[0] == pytest.approx(2.0, rel=REL)   # ⌈0.5⌉
    assert even._busiest_rank_factor(one, two)[0] == pytest.approx(1.0, rel=REL)    # ⌈1⌉
    assert even._busiest_rank_factor(np.array([3.0]), four)[0] == pytest.approx(
        2 / 1.5, rel=REL)                                                           # ⌈1.5⌉


def test_cross_node_all_to_all_splits_nvlink_and_nic_traffic():
    """EP16 over two 8-GPU nodes: 7 of 15 peers are on NVLink, 8 behind the NIC; the two
    shares move in parallel and the NIC share sets the time (DeepEP's layout)."""
    m = tiny_moe()
    cl = parse_cluster("h100-sxm:16")
    dev = cl.device
    cm = CostModel(m, cl, Workload(Phase.DECODE, isl=1000), config=CFG)
    send = 1e7
    nic = send * 8 / 15 / (dev.scale_out_bytes_per_s * CFG.scale_out_efficiency)
    nvl = send * 7 / 15 / (dev.scale_up_bytes_per_s * CFG.scale_up_efficiency)
    assert nic > nvl
    assert cm.all_to_all_time_s(send, 16) == pytest.approx(
        nic + 4 * dev.scale_out_latency_s, rel=REL)
    # 12 ranks over nodes of 8: the worst-placed rank (on the 4-rank node) has 3 NVLink peers
    # and sends 8 of its 11 shares over the NIC.
    cl12 = parse_cluster("h100-sxm:16")
    cm12 = CostModel(m, cl12, Workload(Phase.DECODE, isl=1000), config=CFG)
    assert cm12.all_to_all_time_s(send, 12) == pytest.approx(
        send * 8 / 11 / (dev.scale_out_bytes_per_s * CFG.scale_out_efficiency)
        + 4 * dev.scale_out_latency_s, rel=REL)
    # Inside one node every byte rides NVLink.
    assert cm.all_to_all_time_s(send, 8) == pytest.approx(
        send / (dev.scale_up_bytes_per_s * CFG.scale_up_efficiency)
        + 3 * dev.scale_up_latency_s, rel=REL)


def _layer_collectives(e):
    return {(c.where, c.kind) for c in e.collectives if c.per_step >= 2}


def test_megatron_mlp_is_one_allreduce_and_hidden_split_down_uses_allgathers():
    """DESIGN §2 / paper Fig. 4: column→row costs one all-reduce of the MLP output; putting the
    down projection on the hidden dim (Shard(1)) replaces it with all-gathers."""
    m = load_model("llama-3.1-8b")
    cl = parse_cluster("h100-sxm:8")
    cm = CostModel(m, cl, Workload(Phase.DECODE, isl=4096), config=CFG)
    meg = cm.evaluate(Strategy(tp=8, ep=1, pp=1, dp=1, batch=8))
    mlp_in, mlp_out = ("o_proj -> dense_up", "all-reduce"), ("layer input -> qkv_proj",
                                                            "all-reduce")
    assert _layer_collectives(meg) == {mlp_in, mlp_out}
    dims = list(MEGATRON_DIMS)
    dims[Op.DENSE_DOWN] = 1
    paper = cm.evaluate(Strategy(tp=8, ep=1, pp=1, dp=1, batch=8, dims=tuple(dims)))
    got = _layer_collectives(paper)
    assert ("dense_up -> dense_down", "all-gather") in got
    assert ("layer input -> qkv_proj", "all-gather") in got
    assert not any(kind == "all-reduce" and "qkv" in where for where, kind in got)


def test_llama70b_kv_is_320_kib_per_token_and_tp_divides_it():
    m = load_model("llama-3.1-70b")
    assert kv_cache_bytes_per_token(m, 2) == 320 * 1024
    cl = parse_cluster("h100-sxm:8")
    cm = CostModel(m, cl, Workload(Phase.DECODE, isl=4096))
    for tp in (1, 2, 4, 8):
        e = cm.evaluate(Strategy(tp=tp, ep=1, pp=1, dp=1, batch=1))
        assert e.memory.kv_cache_bytes == 320 * 1024 * 4096 / tp


def test_kv_head_replication_and_mla_latent_replication():
    """GQA with tp > kv heads holds one (replicated) head per rank; MLA's latent cache is not
    divided by a head split but is by a sequence split (FC-23)."""
    m = tiny_dense(heads=8, kv=2)
    cl = parse_cluster("h100-sxm:8")
    cm = CostModel(m, cl, Workload(Phase.DECODE, isl=1000))
    e = cm.evaluate(Strategy(tp=8, ep=1, pp=1, dp=1, batch=8))
    assert e.memory.kv_cache_bytes == 8 * 1000 * 2 * 1 * 256 * 2   # 1 head per rank
    ds = load_model("deepseek-v2-lite")
    cm = CostModel(ds, cl, Workload(Phase.DECODE, isl=1000))
    per_tok = kv_cache_bytes_per_token(ds, 2)
    heads = cm.evaluate(Strategy(tp=8, ep=1, pp=1, dp=1, batch=8))
    assert heads.memory.kv_cache_bytes == pytest.approx(8 * 1000 * per_tok)
    dims = list(MEGATRON_DIMS)
    dims[Op.ATTENTION] = 0
    seqs = cm.evaluate(Strategy(tp=8, ep=1, pp=1, dp=1, batch=8, dims=tuple(dims)))
    assert seqs.memory.kv_cache_bytes == pytest.approx(1 * 1000 * per_tok)


def test_a_sparse_attention_indexer_holds_its_fp8_keys_beside_the_latent():
    """DeepSeek-V3.2 and GLM-5 keep the lightning indexer's keys per token and layer beside
    the MLA latent: FP8 keys of index_head_dim 128 and one 4-byte scale, 132 bytes
    (vLLM's DeepseekV32IndexerCache, SGLang's DSA indexer pool), whatever the KV dtype; held
    as the latent is (replicated under a head split), so DeepSeek-V3.2's 61 layers hold
    61 × (576·2 + 132) = 78,324 bytes per token in BF16 (70,272 without them: its KV
    capacity read 11.5% high)."""
    ds = load_model("deepseek-v3.2")
    assert ds.attention.indexer_key_bytes == 132
    assert kv_cache_bytes_per_token(ds, 2) == 61 * (576 * 2 + 132) == 78_324
    assert kv_cache_bytes_per_token(ds, 1) == 61 * (576 + 132)
    assert load_model("deepseek-v3").attention.indexer_key_bytes == 0
    cm = CostModel(ds, parse_cluster("h200:8"), Workload(Phase.DECODE, isl=1000))
    e = cm.evaluate(Strategy(tp=8, ep=8, pp=1, dp=1, batch=8))
    assert e.memory.kv_cache_bytes == pytest.approx(8 * 1000 * 78_324)


def test_sliding_window_layers_hold_at_most_the_window():
    m = load_model("gpt-oss-20b")          # 12 sliding (128) + 12 full layers
    per_layer = 8 * 64 * 2 * 2
    assert kv_cache_bytes_per_token(m, 2) == 24 * per_layer   # 48 KiB/token (FC-22)
    cm = CostModel(m, parse_cluster("h100-sxm:1"), Workload(Phase.DECODE, isl=8192))
    e = cm.evaluate(Strategy(tp=1, ep=1, pp=1, dp=1, batch=1))
    assert e.memory.kv_cache_bytes == (12 * 8192 + 12 * 128) * per_layer


def test_a_window_as_long_as_the_models_positions_holds_every_token():
    """Phi-3.5-MoE slides every layer over 131,072 tokens, its whole position range: the
    window never binds, so the KV capacity in tokens is the pool over the bytes per token,
    as for full attention, not unbounded (a window shorter than the positions, gpt-oss's,
    still caps its layers)."""
    import dataclasses

    from learn_to_shard.cost.model import KV_TOKENS_UNBOUNDED

    m = load_model("phi-3.5-moe-instruct")
    assert m.max_position_embeddings == 131_072
    assert {w for _, w in CostModel(m, parse_cluster("h100-sxm:8"), Workload(
        Phase.SERVE, isl=2048, osl=512)).layer_types} == {131_072}
    wl = Workload(Phase.SERVE, isl=2048, osl=512)
    s = Strategy(tp=8, ep=8, pp=1, dp=1, batch=16)
    e = CostModel(m, parse_cluster("h100-sxm:8"), wl).evaluate(s)
    full = CostModel(m, parse_cluster("h100-sxm:8"), wl, dataclasses.replace(
        CostModelConfig(), window_kv_capped=False)).evaluate(s)
    assert e.kv_capacity_tokens < KV_TOKENS_UNBOUNDED
    assert e.kv_capacity_tokens == full.kv_capacity_tokens
    assert e.memory.kv_cache_bytes == full.memory.kv_cache_bytes
    oss = CostModel(load_model("gpt-oss-20b"), parse_cluster("h100-sxm:1"), wl)
    one = Strategy(tp=1, ep=1, pp=1, dp=1, batch=16)
    assert oss.evaluate(one).kv_capacity_tokens > CostModel(
        oss.model, oss.cluster, wl, dataclasses.replace(CostModelConfig(),
                                                        window_kv_capped=False)
    ).evaluate(one).kv_capacity_tokens


def test_a_window_longer_than_the_planned_sequences_does_not_bound_their_context():
    """Phi-3-mini slides a 2,047-token window over 4,096 positions: serving 512 + 256 tokens
    the window does not bind, so each sequence holds every token and the KV capacity is the
    pool's tokens, the longest context that pool over the batch (it was "unbounded, 4,096 at
    any batch", where at 4,000 tokens a third of the batch fits); at 2,048 + 512 the window
    binds and the pool bounds sequences, not tokens."""
    from learn_to_shard.cost.model import KV_TOKENS_UNBOUNDED

    m = load_model("phi-3-mini-4k-instruct")
    short = CostModel(m, parse_cluster("h100-sxm:1"), Workload(Phase.SERVE, isl=512, osl=256))
    e = short.evaluate(Strategy(tp=1, ep=1, pp=1, dp=1, batch=192))
    assert e.kv_capacity_tokens < KV_TOKENS_UNBOUNDED
    assert e.max_context_tokens == e.kv_capacity_tokens // 192 < 2047
    few = short.evaluate(Strategy(tp=1, ep=1, pp=1, dp=1, batch=8))
    assert few.max_context_tokens == 4096            # fits at the window: any context
    long = CostModel(m, parse_cluster("h100-sxm:1"), Workload(Phase.SERVE, isl=2048, osl=512))
    assert long.evaluate(Strategy(tp=1, ep=1, pp=1, dp=1, batch=8)).kv_capacity_unbounded


def test_weights_per_device_shrink_with_tp_and_pp():
    m = load_model("llama-3.1-70b")
    cm = CostModel(m, parse_cluster("h100-sxm:8"), Workload(Phase.DECODE, isl=1024))
    w = [cm.evaluate(Strategy(tp=t, ep=1, pp=1, dp=1, batch=1)).memory.weight_bytes
         for t in (1, 2, 4, 8)]
    assert all(a > b for a, b in zip(w, w[1:], strict=False))
    w_pp = [max(cm.evaluate(Strategy(tp=1, ep=1, pp=p, dp=1, batch=1)).stage_memory_bytes)
            for p in (1, 2, 4, 8)]
    assert all(a > b for a, b in zip(w_pp, w_pp[1:], strict=False))


def test_405b_on_one_gpu_is_infeasible_with_a_memory_reason():
    m = load_model("llama-3.1-405b")
    cm = CostModel(m, parse_cluster("h100-sxm:1"), Workload(Phase.DECODE, isl=4096))
    e = cm.evaluate(Strategy(tp=1, ep=1, pp=1, dp=1, batch=1))
    assert not e.feasible
    assert any(v.startswith("memory: stage 0 weights alone exceed") for v in e.violations)


def test_tied_embeddings_charge_the_last_stage_under_pp():
    """FC-16: with tied embeddings and PP > 1 the last stage holds its own vocab × hidden."""
    import dataclasses

    m = dataclasses.replace(tiny_dense(layers=4), tie_word_embeddings=True)
    cm = CostModel(m, parse_cluster("h100-sxm:2"), Workload(Phase.DECODE, isl=100))
    one = cm.evaluate(Strategy(tp=1, ep=1, pp=1, dp=1, batch=1))
    two = cm.evaluate(Strategy(tp=1, ep=1, pp=2, dp=1, batch=1))
    emb = 32000 * 1024 * 2
    layers = one.memory.weight_bytes - emb                  # tied: stored once at pp=1
    stage_w = [two.stage_memory_bytes[i] - (one.memory.kv_cache_bytes / 2)
               - two.memory.workspace_bytes for i in (0, 1)]
    assert stage_w[0] == pytest.approx(layers / 2 + emb)
    assert stage_w[1] == pytest.approx(layers / 2 + emb)


def test_slo_violation_is_a_named_reason_not_an_exception():
    m = load_model("llama-3.1-70b")
    cm = CostModel(m, parse_cluster("h100-sxm:8"),
                   Workload(Phase.DECODE, isl=4096, tpot_slo_s=1e-4))
    e = cm.evaluate(Strategy(tp=8, ep=1, pp=1, dp=1, batch=1))
    assert not e.feasible and any(v.startswith("tpot_slo") for v in e.violations)


@pytest.mark.parametrize("name,cluster,phase", [
    ("llama-3.1-70b", "h100-sxm:16", Phase.SERVE),
    ("deepseek-v3", "h200:32", Phase.DECODE),
    ("gpt-oss-20b", "b200:8", Phase.PREFILL),
    ("llama-4-maverick", "h100-sxm:16", Phase.SERVE),
])
def test_evaluate_many_equals_evaluate_exactly(name, cluster, phase):
    m = load_model(name)
    wl = Workload(phase, isl=2048, osl=256 if phase is Phase.SERVE else 0,
                  weight_dtype=DType.FP8, kv_dtype=DType.BF16, tpot_slo_s=0.1, ttft_slo_s=5.0
                  ) if phase is not Phase.DECODE else Workload(phase, isl=2048, tpot_slo_s=0.1)
    if phase is Phase.PREFILL:
        wl = Workload(phase, isl=2048, ttft_slo_s=5.0)
    cm = CostModel(m, parse_cluster(cluster), wl)
    rng = np.random.default_rng(7)
    acts = cm.space.sample(rng, 64)
    batch = cm.evaluate_many(acts)
    for i, a in enumerate(acts):
        e = cm.evaluate(a)
        assert e.feasible == bool(batch.feasible[i])
        assert e.tokens_per_s_per_device == float(batch.tokens_per_s_per_device[i])
        assert (e.tpot_s == float(batch.tpot_s[i])) or (math.isnan(e.tpot_s)
                                                       and math.isnan(batch.tpot_s[i]))
        assert e.max_batch == int(batch.max_batch[i])


def test_space_encode_decode_roundtrip():
    m = load_model("qwen3-30b-a3b")
    sp = StrategySpace.build(m, parse_cluster("h100-sxm:64"))
    rng = np.random.default_rng(0)
    for a in sp.sample(rng, 200):
        assert np.array_equal(sp.encode(sp.decode(a)), a)
    assert sp.size == int(np.prod(sp.nvec.astype(object)))


@pytest.mark.parametrize("field, value", [
    ("runtime_reserved_bytes", -1.0), ("memory_utilization", 0.0), ("memory_utilization", 1.2),
    ("flops_efficiency", 1.5), ("attention_hbm_efficiency", 0.0), ("kernel_overhead_s", -1e-6),
    ("max_num_batched_tokens", 0), ("moe_imbalance", 0.5), ("workspace_width_factor", 0.0),
    ("kv_cache_free_fraction", float("nan")),
])
def test_config_rejects_impossible_factors(field, value):
    with pytest.raises(ConfigError, match=field):
        CostModelConfig(**{field: value})



def test_serve_throughput_saturates_at_the_token_budget():
    """A serve step carries batch × (1 + isl/osl) tokens but at most max_num_batched_tokens:
    512/32 needs 17 tokens a request, so past 481 requests (8,192 / 17) the step, TPOT and
    throughput stop growing; a prompt longer than the budget still gets served."""
    m = load_model("llama-3.1-8b")
    cl = parse_cluster("h100-sxm:1")

    def ev(batch, isl=512, osl=32, budget=8192):
        space = StrategySpace.build(m, cl, batch_values=(batch,))
        cfg = CostModelConfig(max_num_batched_tokens=budget)
        return CostModel(m, cl, Workload(Phase.SERVE, isl=isl, osl=osl), config=cfg,
                         space=space).evaluate(Strategy(tp=1, ep=1, pp=1, dp=1, batch=batch))

    at, past, far = ev(481), ev(482), ev(800)
    assert at.feasible and far.feasible, (at.violations, far.violations)
    assert far.tokens_per_s_per_device == pytest.approx(at.tokens_per_s_per_device, rel=3e-3)
    assert far.tpot_s == pytest.approx(at.tpot_s, rel=3e-3)
    assert past.tokens_per_s_per_device == pytest.approx(far.tokens_per_s_per_device)
    # Below the budget more requests still buy throughput (here until the step is
    # compute-bound, well before 481).
    assert ev(8).tokens_per_s_per_device < 0.9 * at.tokens_per_s_per_device
    # A bigger budget lifts the ceiling.
    assert ev(800, budget=17 * 800).tokens_per_s_per_device > far.tokens_per_s_per_device
    # isl / osl above the budget: one request's prefill spans several steps, not "infeasible".
    long = ev(1, isl=20_000, osl=2)
    assert long.feasible and long.tokens_per_s_per_device > 0


def test_tp_group_that_straddles_nodes_is_priced_on_the_network():
    """With 8-GPU nodes, TP6 groups laid out back to back put ranks 6–11 across two nodes: on
    12 GPUs their all-reduces run at the scale-out rate; on one 6-GPU node they stay on
    NVLink. TP4 tiles the node and stays on NVLink on any cluster."""
    m = tiny_dense(heads=24, kv=24, hidden=1536, ffn=6144)
    wl = Workload(Phase.DECODE, isl=1024)

    def allreduce_s(cluster, tp, dp):          # 6 sequences per DP rank in every case
        cl = parse_cluster(cluster)
        space = StrategySpace.build(m, cl, batch_values=(6 * dp,))
        e = CostModel(m, cl, wl, space=space).evaluate(
            Strategy(tp=tp, ep=1, pp=1, dp=dp, batch=6 * dp))
        return max(c.time_s for c in e.collectives if c.kind == "all-reduce")

    one_node = allreduce_s("h100-sxm:6", 6, 1)
    straddling = allreduce_s("h100-sxm:12", 6, 2)
    assert straddling > 2 * one_node
    assert allreduce_s("h100-sxm:16", 4, 4) == pytest.approx(allreduce_s("h100-sxm:4", 4, 1))


def test_mxfp4_experts_make_gpt_oss_120b_fit_one_h100():
    """gpt-oss-120b is served on one 80 GB GPU: 36 × 128 × 3 × 2880² = 114.66 B expert
    weights at 4.25 bits (60.9 GB) plus the other weights at 2 B (4.3 GB) ≈ 60.7 GiB, under
    the 71 GiB usable. (The cost model leaves out the 40 M expert biases, 0.07 GiB, and the
    0.5 M norm weights, 1 MB: hence the 1e-4.)"""
    from learn_to_shard.model import count_params

    m = load_model("gpt-oss-120b")
    cl = parse_cluster("h100-sxm:1")
    space = StrategySpace.build(m, cl, batch_values=(8,))
    e = CostModel(m, cl, Workload(Phase.SERVE, isl=1024, osl=1024), space=space).evaluate(
        Strategy(tp=1, ep=1, pp=1, dp=1, batch=8))
    assert e.feasible
    matrices = 36 * 128 * 3 * 2880 * 2880
    biases = 36 * 128 * (2 * 2880 + 2880)
    expected = matrices * 4.25 / 8 + (count_params(m).total - matrices - biases) * 2
    assert e.memory.weight_bytes == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("model, cluster, scaled", [
    ("gpt-oss-20b", "h100-sxm:1", True),      # MXFP4 experts, no FP4 math: dequantised
    ("gpt-oss-20b", "b200:1", False),          # FP4 math: FP4 GEMMs, the field is not read
    ("qwen3-30b-a3b", "h100-sxm:1", False),    # 16-bit experts
])
def test_w4a16_expert_efficiency_scales_only_dequantised_4_bit_experts(model, cluster,
                                                                       scaled):
    """``DeviceSpec.w4a16_expert_flops_efficiency`` lowers the routed experts' GEMM rate of a
    weight-only 4-bit checkpoint on a chip without FP4 math, and nothing else: a
    compute-bound prefill's expert time grows by about 1 / e there (the other operators
    unchanged), and is untouched on a chip with FP4 math or for 16-bit experts."""
    m = load_model(model)
    base = parse_cluster(cluster)
    slow = dataclasses.replace(base, device=dataclasses.replace(
        base.device, w4a16_expert_flops_efficiency=0.25))
    one = dataclasses.replace(base, device=dataclasses.replace(
        base.device, w4a16_expert_flops_efficiency=None))
    wl = Workload(Phase.PREFILL, isl=8192)
    s = Strategy(tp=1, ep=1, pp=1, dp=1, batch=1)
    e_slow = CostModel(m, slow, wl).evaluate(s)
    e_one = CostModel(m, one, wl).evaluate(s)
    for op, t in e_one.op_time_s.items():
        if op.startswith("expert_") and scaled:
            assert e_slow.op_time_s[op] > 2.5 * t, op
        else:
            assert e_slow.op_time_s[op] == pytest.approx(t), op


def test_plan_weights_note_names_the_w4a16_expert_rate():
    """The plan's weights line says at what rate dequantised experts run where the device
    measures it (gpt-oss on H100: 0.65), and says nothing of it where FP4 GEMMs run (B200)
    or where no measurement exists (A100)."""
    from learn_to_shard.report.plan import weights_note

    m = load_model("gpt-oss-20b")
    wl = Workload(Phase.DECODE, isl=1024)
    assert "0.65 of the 16-bit rate" in weights_note(CostModel(m, parse_cluster("h100-sxm:1"),
                                                                wl))
    for cluster in ("b200:1", "a100-80gb:1"):
        assert "of the 16-bit rate" not in weights_note(CostModel(m, parse_cluster(cluster), wl))
    # a dense 4-bit checkpoint has no routed experts to name
    import json
    import tempfile
    from importlib import resources
    from pathlib import Path
    with tempfile.TemporaryDirectory() as tmp:
        cfg = json.loads((resources.files("learn_to_shard") / "data" / "models"
                          / "llama-3.1-8b.json").read_text())
        cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128,
                                      "zero_point": True, "version": "gemm"}
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(cfg))
        dense = CostModel(load_model(str(path)), parse_cluster("h100-sxm:1"), wl)
        note = weights_note(dense)
    assert "linear weights awq at" in note and "routed-expert" not in note


def test_chunked_and_sliding_attention_spans():
    """Mean keys per query: chunked attention (Llama-4, 8,192-token chunks) sees on average
    half a chunk; a sliding window the last w tokens (causal mean w − w²/2·isl in prefill)."""
    scout = load_model("llama-4-scout")
    assert {la.window for la in scout.layers if la.chunked} == {8192}
    cl = parse_cluster("h100-sxm:8")
    cm = CostModel(scout, cl, Workload(Phase.PREFILL, isl=32768))
    dec, pf = cm._spans(8192, 32768.0)
    assert dec == 4096 and pf == pytest.approx(4096)          # 4 whole chunks: c/2
    assert cm._spans(8192, 100.0)[0] == 100                    # inside the first chunk
    assert cm._spans(None, 32768.0) == (32768.0, 16384.0)      # the NoPE (global) layers
    oss = load_model("gpt-oss-20b")
    cm2 = CostModel(oss, cl, Workload(Phase.PREFILL, isl=32768))
    assert not any(la.chunked for la in oss.layers)
    dec2, pf2 = cm2._spans(128, 32768.0)
    assert dec2 == 128 and pf2 == pytest.approx(128 - 128 * 128 / (2 * 32768))
    cm3 = CostModel(oss, cl, Workload(Phase.PREFILL, isl=100))
    assert cm3._spans(128, 100.0)[1] == 50                     # prompt shorter than the window


def test_pipeline_hops_inside_a_node_use_nvlink():
    """TP4 × PP4 on 8-GPU nodes: hops 0→1 and 2→3 stay in a node, 1→2 crosses; TP8 × PP2
    crosses on its one hop; on one 8-GPU node TP2 × PP4 never leaves NVLink."""
    m = load_model("llama-3.1-70b")
    wl = Workload(Phase.DECODE, isl=1024)
    one = np.array([1])

    def hop(cluster, tp, pp, rows=64.0):
        cm = CostModel(m, parse_cluster(cluster), wl)
        return float(cm.p2p_time_s(np.array([rows]), one * tp, one, one * pp)[0])

    cm = CostModel(m, parse_cluster("h100-sxm:16"), wl)
    vol = 64.0 * m.hidden_size * 2 / 4
    nv, ib = cm._link(one), cm._link(one * 9)
    t_in = vol / nv.bw[0] + nv.alpha[0]
    t_out = vol / ib.bw[0] + ib.alpha[0]
    assert hop("h100-sxm:16", 4, 4) == pytest.approx((2 * t_in + t_out) / 3)
    assert hop("h100-sxm:16", 8, 2, rows=128.0) == pytest.approx(t_out)
    assert hop("h100-sxm:8", 2, 4, rows=32.0) == pytest.approx(t_in)


def test_all_to_all_of_a_straddling_group_splits_its_bytes_by_node():
    """EP6 on 8-GPU nodes: the worst-placed rank (rank 6 or 7 of group 1) has one same-node
    peer, so 4 of its 5 shares cross the NIC, not all 5 (and not 0, as inside a node)."""
    from learn_to_shard.cost.comm import worst_local_ranks

    assert [worst_local_ranks(n, 8, 24) for n in (1, 2, 3, 4, 6, 8, 12, 24)] == \
        [1, 2, 1, 4, 2, 8, 4, 8]
    assert worst_local_ranks(6, 8, 6) == 6                  # one 6-GPU node: no straddle
    # Only whole groups count: on 21 ranks the one 14-rank group puts >= 6 on each node.
    assert worst_local_ranks(14, 8, 21) == 6 and worst_local_ranks(6, 8, 9) == 6
    # The link and the all-to-all ask the same question: on 9 GPUs the one whole 6-rank group
    # sits in node 0, so both stay on NVLink.
    nine = CostModel(tiny_moe(experts=24), parse_cluster("h100-sxm:9"),
                     Workload(Phase.DECODE, isl=128))
    assert nine.link(6) == nine.link(1)
    cm = CostModel(tiny_moe(experts=24), parse_cluster("h100-sxm:12"),
                   Workload(Phase.DECODE, isl=128))
    send = 64e6
    nic, nv = cm._link(np.array([6])), cm._link(np.array([1]))
    expected = max(send * 1 / 5 / nv.bw[0], send * 4 / 5 / nic.bw[0]) + 3 * nic.alpha[0]
    assert cm.all_to_all_time_s(send, 6) == pytest.approx(expected)


def test_serve_ttft_step_carries_the_prompts_mean_chunk():
    """Serve, isl 16,384 with the default budget of 8,192 tokens and 8 running requests per
    rank: the chunk is 8,192 − 8 = 8,184 tokens, so the prompt takes ⌈16,384 / 8,184⌉ = 3
    steps, and the TTFT step carries 16,384 / 3 of its tokens and a third of the prompt (its
    tokens priced once over the three steps), beside the other 7 running requests' prompt
    tokens of a steady-state step, 7 · 16,384 / 1,000; TTFT is three of those steps. A lone
    request's steps carry its own tokens alone."""
    m = load_model("llama-3.1-8b")
    wl = Workload(Phase.SERVE, isl=16384, osl=1000)
    cm = CostModel(m, parse_cluster("h100-sxm:1"), wl)
    one = np.array([1])
    ph = cm.phase_rows(one, one, np.array([8]))
    assert float(ph["chunk_steps"][0]) == 3.0
    pf2 = 16384 / 3 + 7 * 16384 / 1000
    assert float(ph["pf2"][0]) == pytest.approx(pf2, rel=1e-15)
    assert float(ph["pf_seqs2"][0]) == pytest.approx(pf2 / 16384, rel=1e-15)
    assert float(ph["dec"][0]) == 8.0
    ph = cm.phase_rows(one, one, one)               # 8,191-token chunks: three steps
    assert float(ph["pf2"][0]) == pytest.approx(16384 / 3, rel=1e-15)


def test_a_vision_tower_is_in_the_first_stage_memory_split_by_tp():
    """Qwen3-VL-32B holds Qwen3-32B's language model and a ~0.6B vision tower: planned at the
    same degrees its weights per device are Qwen3-32B's plus the tower in 16 bits over TP
    (vLLM's mm_encoder_tp_mode ``weights``), on the first pipeline stage only."""
    vl, text = load_model("qwen3-vl-32b-instruct"), load_model("qwen3-32b")
    wl = Workload(Phase.DECODE, isl=1024)
    for tp, pp in ((1, 1), (4, 1), (2, 2)):
        s = Strategy(tp=tp, ep=1, pp=pp, dp=1, batch=1)
        a = CostModel(vl, parse_cluster(f"h100-sxm:{tp * pp}"), wl).evaluate(s)
        b = CostModel(text, parse_cluster(f"h100-sxm:{tp * pp}"), wl).evaluate(s)
        tower = 2.0 * vl.vision_params / tp
        assert a.stage_memory_bytes[0] - b.stage_memory_bytes[0] == pytest.approx(tower)
        if pp > 1:
            assert a.stage_memory_bytes[1] == pytest.approx(b.stage_memory_bytes[1])


def test_a_vision_language_model_plans_with_the_exact_search():
    """The exact search's memory tables hold the vision tower as the cost model does (its
    self-check compares the two): Qwen3-VL-32B and Gemma-3-12B plan with the default
    searcher, and the chosen strategy's first stage holds the tower over its TP."""
    from learn_to_shard.api import cost_config, make_cost_model
    from learn_to_shard.api import plan as l2s_plan

    for name, cluster in (("qwen3-vl-32b-instruct", "h100-sxm:4"),
                          ("gemma-3-12b-it", "h100-sxm:2")):
        p = l2s_plan(name, cluster, "serve", isl=2000, osl=500)
        assert p.best is not None and p.method_used == "exact", (name, p.method_used)
        m = load_model(name)
        s = dataclasses.replace(p.best.strategy, batch=1)   # the chosen degrees and dims
        cm, bare = (make_cost_model(spec, parse_cluster(cluster), p.workload, cost_config(None))
                    for spec in (m, dataclasses.replace(m, vision_params=0)))
        gap = cm.evaluate(s).stage_memory_bytes[0] - bare.evaluate(s).stage_memory_bytes[0]
        assert gap == pytest.approx(2.0 * m.vision_params / s.tp)
