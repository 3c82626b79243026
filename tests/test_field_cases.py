"""Field cases (shared/reference/field-cases.md) as tests: each checks what the case says a
planner should do — reject with the named reason, reproduce the stated KV bytes / capacity, or
rank the measured winner first. Cases the product cannot express are listed, with the reason,
in docs/validation.md.

Model shapes not shipped (LLaMA-33B, Qwen2-7B, Qwen2.5-3B, Qwen3-4B) are written as
``config.json`` files from the fields each case states plus the public HF config values.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from learn_to_shard.cost import CostModel, CostModelConfig
from learn_to_shard.cost.shapes import kv_cache_bytes_per_token
from learn_to_shard.fidelity.predict import resolve_model
from learn_to_shard.hardware import parse_cluster
from learn_to_shard.hardware.spec import ClusterSpec, DeviceSpec
from learn_to_shard.model import load_model
from learn_to_shard.model.spec import ModelSpec
from learn_to_shard.parallel import MEGATRON_DIMS, Strategy, StrategySpace
from learn_to_shard.parallel.ops import Op
from learn_to_shard.workload import DType, Phase, Workload

GIB = 2**30


def _config(tmp_path: Path, name: str, **fields) -> ModelSpec:
    data = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "torch_dtype": "bfloat16", "tie_word_embeddings": False} | fields
    path = tmp_path / name / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return load_model(str(path))


def _device(name: str, **fields) -> DeviceSpec:
    base = parse_cluster("h100-sxm:1").device
    return dataclasses.replace(base, name=name, display_name=name, **fields)


def _ev(model: ModelSpec, cluster: ClusterSpec | str, wl: Workload, s: Strategy,
        config: CostModelConfig | None = None):
    cl = parse_cluster(cluster) if isinstance(cluster, str) else cluster
    space = StrategySpace.build(model, cl, batch_values=(s.batch,))
    return CostModel(model, cl, wl, config=config, space=space).evaluate(s)


def _names(violations) -> set[str]:
    return {v.split(":")[0] for v in violations}


def _dims(**choices: int) -> tuple[int, ...]:
    d = list(MEGATRON_DIMS)
    for name, v in choices.items():
        d[Op[name.upper()]] = v
    return tuple(d)


# ------------------------------------------------------------------------------ FC-01
@pytest.fixture
def llama33b(tmp_path):
    # LLaMA-33B: 52 heads (MHA), 60 layers, hidden 6656 (FC-01); FFN 17920, vocab 32000.
    return _config(tmp_path, "llama-33b", hidden_size=6656, num_attention_heads=52,
                   num_key_value_heads=52, num_hidden_layers=60, intermediate_size=17920,
                   vocab_size=32000, torch_dtype="float16")


def test_fc01_52_heads_reject_tp3_and_tp8_propose_pp3(llama33b):
    v100 = _device("v100-32gb", peak_bf16_flops_per_s=125e12, peak_fp8_flops_per_s=None,
                   hbm_bytes=32 * GIB, hbm_bytes_per_s=900e9)
    three = ClusterSpec(v100, 3)
    sp = StrategySpace.build(llama33b, three)
    assert "heads" in _names(sp.violations(Strategy(tp=3, ep=1, pp=1, dp=1, batch=1)))
    eight = StrategySpace.build(llama33b, ClusterSpec(v100, 8))
    valid = [t for t in eight.tp_values
             if not eight.violations(Strategy(tp=t, ep=1, pp=1, dp=1, batch=1))]
    assert valid == [1, 2, 4]                                    # divisors of 52 up to 8
    wl = Workload(Phase.SERVE, isl=512, osl=128)
    tp2 = _ev(llama33b, three, wl, Strategy(tp=2, ep=1, pp=1, dp=1, batch=1))
    assert not tp2.feasible and any("weights alone exceed" in v for v in tp2.violations)
    pp3 = _ev(llama33b, three, wl, Strategy(tp=1, ep=1, pp=3, dp=1, batch=1))
    assert pp3.feasible
    assert CostModel(llama33b, three, wl).stage_layers(3) == [20, 20, 20]
    # ~21.7 GB of fp16 weights per stage (case arithmetic), first/last add embedding/LM head.
    assert 21e9 < pp3.memory.weight_bytes < 23e9


# ------------------------------------------------------------------------------ FC-02
def test_fc02_28_heads_4_kv_heads_tp_1_2_4_only(tmp_path):
    m = _config(tmp_path, "qwen2-7b", hidden_size=3584, num_attention_heads=28,
                num_key_value_heads=4, num_hidden_layers=28, intermediate_size=18944,
                vocab_size=152064)
    sp = StrategySpace.build(m, parse_cluster("h100-sxm:28"))
    ok = [t for t in sp.tp_values if t <= 8
          and not sp.violations(Strategy(tp=t, ep=1, pp=1, dp=1, batch=4))]
    assert ok == [1, 2, 4]
    assert "heads" in _names(sp.violations(Strategy(tp=8, ep=1, pp=1, dp=1, batch=4)))
    # 28 % 7 == 0, but 4 KV heads neither divide by 7 nor divide 7 (the FFN, 18944, does not
    # divide by 7 either).
    tp7 = _names(sp.violations(Strategy(tp=7, ep=1, pp=1, dp=1, batch=4)))
    assert "kv_heads" in tp7 and "heads" not in tp7


# ------------------------------------------------------------------------------ FC-04/06
def test_fc06_tp_above_kv_heads_replicates_one_kv_head_per_rank(tmp_path):
    m = _config(tmp_path, "qwen2.5-3b", hidden_size=2048, num_attention_heads=16,
                num_key_value_heads=2, num_hidden_layers=36, intermediate_size=11008,
                vocab_size=151936, tie_word_embeddings=True)
    wl = Workload(Phase.DECODE, isl=1000)
    tp8 = _ev(m, "h100-sxm:8", wl, Strategy(tp=8, ep=1, pp=1, dp=1, batch=8))
    assert tp8.feasible
    # KV per rank = 1 replicated head (K and V, 128 each) × 36 layers × 2 B per token.
    assert tp8.memory.kv_cache_bytes == pytest.approx(8 * 1000 * 36 * 1 * 256 * 2)
    # ... and TP=8 for a 3B model is dominated by replicas (DP=8 of TP=1).
    dp = _ev(m, "h100-sxm:8", wl, Strategy(tp=1, ep=1, pp=1, dp=1, batch=8))
    assert dp.tokens_per_s_per_device > 2 * tp8.tokens_per_s_per_device


# ------------------------------------------------------------------------------ FC-07
def _glm_vocab_model():
    """A Llama-shaped stand-in with GLM-4.5's vocabulary (151,552 = 37 × 4,096) and head
    counts that divide by 6, so only the vocabulary can refuse TP=6 (as in the case)."""
    from conftest import tiny_dense

    return dataclasses.replace(tiny_dense(layers=24, heads=48, kv=2, hidden=6144, ffn=16128,
                                          vocab=151_552), name="glm-vocab-stand-in")


def test_fc07_vocab_not_divisible_by_six_refuses_tp6_under_vllm_rules():
    m = _glm_vocab_model()
    wl = Workload(Phase.DECODE, isl=4096)
    tp6 = Strategy(tp=6, ep=1, pp=1, dp=1, batch=8, dims=MEGATRON_DIMS)
    vllm = _ev(m, "h100-sxm:6", wl, tp6)
    assert "vocab" in _names(vllm.violations) and not vllm.feasible
    # An engine that pads the vocabulary per rank (TensorRT-LLM) accepts it.
    trt = _ev(m, "h100-sxm:6", wl, tp6, CostModelConfig.for_engine("trtllm"))
    assert "vocab" not in _names(trt.violations)
    # Splitting embedding and LM head along hidden instead is not a vocabulary split.
    d = list(MEGATRON_DIMS)
    d[Op.EMBEDDING], d[Op.LM_HEAD] = 1, 0
    assert "vocab" not in _names(_ev(m, "h100-sxm:6", wl,
                                     dataclasses.replace(tp6, dims=tuple(d))).violations)
    # The planner, with the engines' own (Megatron) sharding, proposes no TP of 3 or 6.
    from learn_to_shard.search import get_searcher

    cl = parse_cluster("h100-sxm:6")
    cm = CostModel(m, cl, wl)
    best = cm.evaluate(get_searcher("megatron").search(cm, 4000, 0).best_action)
    assert best.feasible and best.strategy.tp in (1, 2)


# ------------------------------------------------------------------------------ FC-09
def test_fc09_fp8_blocks_reject_tp32_accept_tp16():
    m = load_model("deepseek-v3")                     # DeepSeek-R1's architecture and blocks
    sp = StrategySpace.build(m, parse_cluster("a100-80gb:32"))
    assert "quant_block" in _names(sp.violations(Strategy(tp=32, ep=1, pp=1, dp=1, batch=32)))
    assert "quant_block" not in _names(sp.violations(Strategy(tp=16, ep=1, pp=1, dp=1,
                                                              batch=32)))


# ------------------------------------------------------------------------------ FC-11
def test_fc11_shared_expert_replicated_under_ep_passes_and_is_charged():
    m = load_model("deepseek-v3")
    cl = parse_cluster("h200:32")
    sp = StrategySpace.build(m, cl, batch_values=(32,))
    dense_rep = {"dense_up": 2, "dense_down": 2}
    split = Strategy(tp=32, ep=32, pp=1, dp=1, batch=32, dims=_dims(**dense_rep))
    rep = Strategy(tp=32, ep=32, pp=1, dp=1, batch=32,
                   dims=_dims(**dense_rep, shared_expert_up=2, shared_expert_down=2))
    assert "quant_block" in _names(sp.violations(split))      # 2048 / 32 = 64, not 128k
    assert "quant_block" not in _names(sp.violations(rep))
    wl = Workload(Phase.DECODE, isl=1024, weight_dtype=DType.FP8)
    cm = CostModel(m, cl, wl, space=sp)
    extra = cm.evaluate(rep).memory.weight_bytes - cm.evaluate(split).memory.weight_bytes
    shared = 3 * 7168 * 2048                                  # one shared expert, gated
    assert extra == pytest.approx(m.num_moe_layers * shared * (1 - 1 / 32) * 1)


# ------------------------------------------------------------------------------ FC-13/38
def test_fc13_fc38_ep_divides_experts_and_fits_the_stage_group():
    m = load_model("qwen3-235b-a22b")                          # 128 routed experts
    assert all(128 % e == 0 for e in StrategySpace.build(m, parse_cluster("h100-sxm:6"))
               .ep_values)
    assert 6 not in StrategySpace.build(m, parse_cluster("h100-sxm:6")).ep_values
    sp = StrategySpace.build(m, parse_cluster("h100-sxm:8"))
    # EP8 × PP2 on 8 GPUs: the instance needs 16 devices.
    assert "devices" in _names(sp.violations(Strategy(tp=8, ep=8, pp=2, dp=1, batch=8)))
    # moe_tp × moe_ep = tp × attention_dp: ep must divide the stage group.
    assert "ep_group" in _names(sp.violations(Strategy(tp=2, ep=8, pp=1, dp=2, batch=8)))
    s = Strategy(tp=2, ep=2, pp=1, dp=4, batch=8)
    assert s.etp * s.ep == s.tp * s.dp


# ------------------------------------------------------------------------------ FC-15
@pytest.mark.parametrize("name,pp,expected", [
    ("deepseek-v3", 4, [16, 15, 15, 15]),                     # 61 layers
    ("llama-3.1-8b", 3, [11, 11, 10]),
])
def test_fc15_stage_lists_never_drop_layers(name, pp, expected):
    m = load_model(name)
    stages = CostModel(m, parse_cluster("h100-sxm:8"), Workload(Phase.DECODE, isl=64)) \
        .stage_layers(pp)
    assert stages == expected and sum(stages) == m.num_layers


# ------------------------------------------------------------------------------ FC-16
def test_fc16_tied_embeddings_last_stage_holds_its_own_copy(tmp_path):
    m = _config(tmp_path, "qwen3-4b", model_type="qwen3", architectures=["Qwen3ForCausalLM"],
                hidden_size=2560, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                num_hidden_layers=36, intermediate_size=9728, vocab_size=151936,
                tie_word_embeddings=True)
    wl = Workload(Phase.DECODE, isl=1024)
    pp1 = _ev(m, "h100-sxm:2", wl, Strategy(tp=1, ep=1, pp=1, dp=1, batch=1))
    pp2 = _ev(m, "h100-sxm:2", wl, Strategy(tp=1, ep=1, pp=2, dp=1, batch=1))
    ws = pp1.memory.workspace_bytes
    extra = sum(pp2.stage_memory_bytes) - 2 * ws - (pp1.stage_memory_bytes[0] - ws)
    assert extra == pytest.approx(151936 * 2560 * 2)          # ~0.78 GB, the case's figure


# ------------------------------------------------------------------------------ FC-17
def _fc17(n, model="llama-3.1-70b"):
    m = resolve_model(model)
    wl = Workload(Phase.SERVE, isl=1024, osl=1024)
    return _ev(m, f"a100-80gb:{n}", wl, Strategy(tp=n, ep=1, pp=1, dp=1, batch=1))


def test_fc17_llama70b_two_a100_fit_but_starved_four_rank_first():
    m = load_model("llama-3.1-70b")
    assert kv_cache_bytes_per_token(m, 2) == 320 * 1024       # 320 KiB/token
    wl = Workload(Phase.SERVE, isl=1024, osl=1024)
    tp2, tp4 = _fc17(2), _fc17(4)
    # 2×80 GB: fits, but KV-starved — fewer than ten 4k requests ("about seven").
    assert tp2.feasible and 0 < tp2.kv_capacity_tokens < 10 * 4096
    assert tp4.kv_capacity_tokens > 10 * tp2.kv_capacity_tokens   # the case: 13.2×
    # Throughput per device at the batch each holds: TP4 ranks first.
    def best(n):
        cl = parse_cluster(f"a100-80gb:{n}")
        probe = _ev(m, cl, wl, Strategy(tp=n, ep=1, pp=1, dp=1, batch=1))
        b = max(1, probe.max_batch)
        return _ev(m, cl, wl, Strategy(tp=n, ep=1, pp=1, dp=1, batch=b))
    assert best(4).tokens_per_s_per_device > best(2).tokens_per_s_per_device


def test_fc17_kv_token_capacity_on_two_a100():
    """TGI warmed up to a 30,816-token budget on 2x A100-80GB (issue #2744); with vLLM's
    accounting (0.9 utilisation, non-torch memory) the model holds about the same."""
    assert _fc17(2).kv_capacity_tokens == pytest.approx(30_816, rel=0.15)


@pytest.mark.xfail(strict=True, reason="FC-17 4-GPU capacity not reproduced: the model holds "
                   "507,423 tokens of Llama-2-70B (+25%) against the 406,560 TGI 1.0 reported "
                   "(issue #832, launcher arguments not given); TGI sizes KV from free memory "
                   "measured with its warm-up batch still cached (docs/validation.md)")
def test_fc17_kv_token_capacity_on_four_a100():
    # The 4-GPU report ran Llama-2-70B (same 320 KiB/token, 1.6 B fewer embedding weights).
    assert _fc17(4, "llama-2-70b").kv_capacity_tokens == pytest.approx(406_560, rel=0.15)


# ------------------------------------------------------------------------------ FC-20
def test_fc20_kv_capacity_follows_the_token_budget():
    m = load_model("llama-3.1-8b")
    assert kv_cache_bytes_per_token(m, 2) == 128 * 1024       # 128 KiB/token
    rtx3090 = _device("rtx-3090", peak_bf16_flops_per_s=71e12, peak_fp8_flops_per_s=None,
                      hbm_bytes=24 * GIB, hbm_bytes_per_s=936e9, scale_up_domain=1)
    cl = ClusterSpec(rtx3090, 1)
    wl = Workload(Phase.SERVE, isl=1024, osl=256)

    def cap(budget: int) -> int:
        cfg = CostModelConfig(max_num_batched_tokens=budget)
        return _ev(m, cl, wl, Strategy(tp=1, ep=1, pp=1, dp=1, batch=1), cfg).kv_capacity_tokens

    c20, c29, c_chunked = cap(20_000), cap(29_000), cap(2_048)
    # Reported: 31,232 tokens at max_model_len 20k and 23,648 at 29k; 35k started again
    # (chunked prefill, small budget). A consistency check, not a held-out one: the
    # workspace width and the 0.73 GiB of non-torch memory were derived from this case.
    assert c20 == pytest.approx(31_232, rel=0.05)
    assert c29 == pytest.approx(23_648, rel=0.05)
    assert c29 < c20 < c_chunked


# ------------------------------------------------------------------------------ FC-21
def test_fc21_single_pass_prefill_workspace_grows_chunked_does_not():
    m = load_model("llama-3.1-70b")
    ws = {isl: _ev(m, "h100-sxm:4", Workload(Phase.PREFILL, isl=isl),
                   Strategy(tp=4, ep=1, pp=1, dp=1, batch=1)).memory.workspace_bytes
          for isl in (65_536, 131_072)}
    assert ws[131_072] == pytest.approx(2 * ws[65_536], rel=0.01)
    # Serve requests stay within the 131,072 positions: isl + osl <= max_position_embeddings.
    serve = {isl: _ev(m, "h100-sxm:4", Workload(Phase.SERVE, isl=isl, osl=256),
                      Strategy(tp=4, ep=1, pp=1, dp=1, batch=1)).memory.workspace_bytes
             for isl in (65_536, 130_816)}
    assert serve[130_816] == pytest.approx(serve[65_536], rel=0.01)
    assert serve[130_816] < ws[131_072] / 10


def test_request_longer_than_the_model_allows_is_refused():
    """A context beyond max_position_embeddings is not a plan of any strategy: it is refused
    with the flag and the limit named (vLLM refuses such a max_model_len at start-up)."""
    from learn_to_shard.errors import ConfigError

    m = load_model("llama-3.1-70b")
    cl = parse_cluster("h100-sxm:8")
    for wl, flag in ((Workload(Phase.DECODE, isl=131_073), "--context"),
                     (Workload(Phase.PREFILL, isl=200_000), "--isl"),
                     (Workload(Phase.SERVE, isl=131_000, osl=100), "--isl + --osl")):
        with pytest.raises(ConfigError, match=re.escape(flag) + ".*131072"):
            CostModel(m, cl, wl)
    CostModel(m, cl, Workload(Phase.SERVE, isl=130_000, osl=1_072))     # exactly the limit


# ------------------------------------------------------------------------------ FC-22
@pytest.mark.parametrize("capped,gib", [(True, 6.09), (False, 12.00)])
def test_fc22_sliding_window_kv_both_bounds(capped, gib):
    m = load_model("gpt-oss-20b")
    assert kv_cache_bytes_per_token(m, 2) == 48 * 1024        # 24 × 8 × 64 × 2 × 2 B
    e = _ev(m, "h100-sxm:1", Workload(Phase.DECODE, isl=8192),
            Strategy(tp=1, ep=1, pp=1, dp=1, batch=32), CostModelConfig(window_kv_capped=capped))
    assert e.memory.kv_cache_bytes / GIB == pytest.approx(gib, abs=0.01)


# ------------------------------------------------------------------------------ FC-23
def test_fc23_mla_attention_dp_multiplies_kv_capacity_and_wins_when_kv_bound():
    """DeepSeek-V3 (MLA stand-in for V4-Flash) on 8x B200, FP8 KV: attention-DP8 holds
    5-8x the KV of TP8 (the case: 7.7x), and where that capacity is what binds — long
    contexts decoded at length, 32,768-token prompts with 8,192-token outputs — DP8 gives
    more tokens/s per GPU at its maximum batch. With 1,024-token outputs the prompts'
    prefill dominates, and with the engines' default of each rank prefilling its own
    requests every rank waits at each MoE layer for the rank that carries a prompt chunk
    (``CostModelConfig.attention_dp_balanced``): the model then prefers TP8 (146 against
    108 tok/s per GPU), and DP8 wins only where the engine spreads the prompts over the
    ranks (TensorRT-LLM ``attention_dp_config.enable_balance``), as tested last. The case's
    measured TTFT (1M-token prompts at c = 8, DP8 3.4x faster) is not reproduced: V4-Flash's
    sparse-attention indexer is not in the stand-in."""
    m = load_model("deepseek-v3")                             # MLA stand-in for V4-Flash
    cl = parse_cluster("b200:8")
    tp = Strategy(tp=8, ep=8, pp=1, dp=1, batch=8)
    dp = Strategy(tp=1, ep=8, pp=1, dp=8, batch=8)

    def wl(osl):
        return Workload(Phase.SERVE, isl=32_768, osl=osl, weight_dtype=DType.FP8,
                        kv_dtype=DType.FP8)
    e_tp, e_dp = _ev(m, cl, wl(1024), tp), _ev(m, cl, wl(1024), dp)
    ratio = e_dp.kv_capacity_tokens / e_tp.kv_capacity_tokens
    assert 5.0 < ratio <= 8.0                                 # the case: 7.7x ("roughly 8x")

    def at_max(s, w, cfg=None):
        b = max(8, _ev(m, cl, w, s, cfg).max_batch // 8 * 8)
        return _ev(m, cl, w, dataclasses.replace(s, batch=b), cfg).tokens_per_s_per_device
    assert at_max(dp, wl(8192)) > at_max(tp, wl(8192))
    assert at_max(tp, wl(1024)) > at_max(dp, wl(1024))       # ranks wait on the prompt chunk
    balanced = CostModelConfig(attention_dp_balanced=True)
    assert at_max(dp, wl(1024), balanced) > at_max(tp, wl(1024), balanced)


# ------------------------------------------------------------------------------ FC-26
@pytest.mark.parametrize("concurrency", [8, 16])
def test_fc26_ep_not_faster_than_tp_on_one_h200_node(concurrency):
    """vLLM, DeepSeek-R1 FP8, 8x H200, ISL 1600 / OSL 600: TP8 545.6 / 683.8 ms mean TTFT at
    c = 8 / 16, EP8 (Triton MoE) 641.8 / 823.3 ms, and lower throughput. The model has it for
    the two reasons vLLM's Triton backend gives: with tokens replicated (dp = 1) every rank
    still writes and activates every token-expert pair's output row (zeros for experts it
    lacks), and the busiest EP rank carries more than the mean."""
    m = load_model("deepseek-v3")
    wl = Workload(Phase.SERVE, isl=1600, osl=600, weight_dtype=DType.FP8)
    tp = _ev(m, "h200:8", wl, Strategy(tp=8, ep=1, pp=1, dp=1, batch=concurrency))
    ep = _ev(m, "h200:8", wl, Strategy(tp=8, ep=8, pp=1, dp=1, batch=concurrency))
    assert ep.ttft_s > tp.ttft_s
    assert ep.tokens_per_s_per_device < tp.tokens_per_s_per_device


def test_fc26_trtllm_moe_writes_only_its_own_pairs():
    assert not CostModelConfig.for_engine("trtllm").moe_dense_local_outputs
    assert CostModelConfig.for_engine("vllm").moe_dense_local_outputs


def test_fc26_ep_gain_needs_a_backend_that_skips_other_ranks_pairs():
    """The same comparison with a MoE backend that writes only its own pairs: EP then saves
    the TP-sliced experts' per-pair traffic and wins, which is why the result is a property of
    the backend (the case's point), not of EP."""
    m = load_model("deepseek-v3")
    wl = Workload(Phase.SERVE, isl=1600, osl=600, weight_dtype=DType.FP8)
    cfg = CostModelConfig(moe_dense_local_outputs=False)
    tp = _ev(m, "h200:8", wl, Strategy(tp=8, ep=1, pp=1, dp=1, batch=8), cfg)
    ep = _ev(m, "h200:8", wl, Strategy(tp=8, ep=8, pp=1, dp=1, batch=8), cfg)
    assert ep.ttft_s < tp.ttft_s


# ------------------------------------------------------------------------------ FC-28
def test_fc28_replicated_router_saves_its_collective_and_time():
    m = load_model("mixtral-8x7b")
    wl = Workload(Phase.DECODE, isl=512)
    rep = _ev(m, "a100-80gb:2", wl, Strategy(tp=2, ep=1, pp=1, dp=1, batch=4))
    split = _ev(m, "a100-80gb:2", wl,
                Strategy(tp=2, ep=1, pp=1, dp=1, batch=4, dims=_dims(router=1)))
    assert split.tpot_s > rep.tpot_s
    assert len(split.collectives) > len(rep.collectives)


def test_fc28_skewed_routing_slows_ep_not_tp():
    m = load_model("mixtral-8x7b")
    wl = Workload(Phase.PREFILL, isl=2048)
    skew = CostModelConfig(moe_imbalance=2.0)
    tp = Strategy(tp=2, ep=1, pp=1, dp=1, batch=4)
    ep = Strategy(tp=2, ep=2, pp=1, dp=1, batch=4)
    cl = "a100-80gb:2"
    assert _ev(m, cl, wl, tp, skew).ttft_s == pytest.approx(_ev(m, cl, wl, tp).ttft_s)
    assert _ev(m, cl, wl, ep, skew).ttft_s > _ev(m, cl, wl, tp, skew).ttft_s


# ------------------------------------------------------------------------------ FC-30
def test_fc30_pipeline_with_one_request_is_slower_than_tp():
    m = load_model("llama-3.1-8b")
    wl = Workload(Phase.DECODE, isl=1024)
    tp = _ev(m, "a100-80gb:2", wl, Strategy(tp=2, ep=1, pp=1, dp=1, batch=1))
    pp = _ev(m, "a100-80gb:2", wl, Strategy(tp=1, ep=1, pp=2, dp=1, batch=1))
    assert pp.tpot_s > 1.5 * tp.tpot_s


# ------------------------------------------------------------------------------ FC-32
def test_fc32_tp_over_pcie_loses_to_replicas():
    m = load_model("qwen3-30b-a3b")
    dev = parse_cluster("h200:4").device
    pcie = ClusterSpec(dataclasses.replace(dev, scale_up_bytes_per_s=64e9,
                                           scale_up_latency_s=10e-6), 4)
    wl = Workload(Phase.DECODE, isl=2048)
    tp4 = _ev(m, pcie, wl, Strategy(tp=4, ep=1, pp=1, dp=1, batch=16))
    tp1 = _ev(m, pcie, wl, Strategy(tp=1, ep=1, pp=1, dp=1, batch=16))
    assert tp1.tokens_per_s_per_device > 2 * tp4.tokens_per_s_per_device
    nvlink = _ev(m, "h200:4", wl, Strategy(tp=4, ep=1, pp=1, dp=1, batch=16))
    assert nvlink.tpot_s < tp4.tpot_s


# ------------------------------------------------------------------------------ FC-36
def test_fc36_memory_gates_every_estimate():
    m = load_model("llama-3.1-405b")
    e = _ev(m, "h100-sxm:1", Workload(Phase.SERVE, isl=1024, osl=1024),
            Strategy(tp=1, ep=1, pp=1, dp=1, batch=128))
    assert not e.feasible
    assert any(v.startswith("memory") and "weights alone exceed" in v for v in e.violations)
    cm = CostModel(m, parse_cluster("h100-sxm:1"), Workload(Phase.SERVE, isl=1024, osl=1024))
    assert float(cm.evaluate_many(cm.space.encode(
        Strategy(tp=1, ep=1, pp=1, dp=1, batch=128))[None, :]).objective[0]) == 0.0


def test_a_decode_plan_reserves_the_engines_step_budget():
    """The engine profiles a step of its whole token budget before sizing the KV pool (vLLM's
    ``profile_run``), however few tokens a decode step carries: a decode plan's workspace is
    the budget's, not the batch's, and grows with ``max_num_batched_tokens``. gpt-oss-120b on
    one H100 at 8,192 tokens of context: batch 35 at a 0.03 GiB workspace was planned where
    the exported server, reserving 0.73 GiB for its 8,192-token budget, holds 33."""
    import dataclasses

    from learn_to_shard.api import make_cost_model, make_workload

    def ws(batch: int, budget: int | None) -> float:
        cm = make_cost_model("llama-3.1-8b", "h100-sxm:1", make_workload("decode",
                                                                         context=4096))
        cfg = dataclasses.replace(cm.config, max_num_batched_tokens=budget)
        cm = CostModel(cm.model, cm.cluster, cm.workload, config=cfg,
                       space=cm.space.with_batches((batch,)))
        return cm.evaluate(Strategy(tp=1, ep=1, pp=1, dp=1, batch=batch)).memory.workspace_bytes

    # the batch adds only its logits rows
    assert ws(8, 8192) < ws(64, 8192) < 1.05 * ws(8, 8192)
    assert ws(8, 16384) > 1.9 * ws(8, 8192)
    assert ws(8, 8192) > 50 * ws(8, 8)          # the batch's own 8 rows: a budget of 8
