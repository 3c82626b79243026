"""Checkpoint formats: what each ``quantization_config`` / ``hf_quant_config.json`` means for
bits per weight, GEMM rates and the sharding rules, and what is refused."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from learn_to_shard.cost.model import CostModel
from learn_to_shard.errors import ConfigError, UnsupportedModelError
from learn_to_shard.hardware import parse_cluster
from learn_to_shard.model import load_model
from learn_to_shard.model.spec import ModelSpec
from learn_to_shard.parallel.space import StrategySpace
from learn_to_shard.parallel.strategy import Strategy
from learn_to_shard.workload import DType, Phase, Workload

GPTQ_G128 = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False,
             "sym": True}
AWQ_G128 = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
            "version": "gemm"}
CT_W4A16 = {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                "num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                "symmetric": True}}}}
CT_W8A8 = {"quant_method": "compressed-tensors", "format": "int-quantized",
           "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "int",
                                                     "strategy": "channel"},
                                         "input_activations": {"num_bits": 8,
                                                               "type": "int"}}}}


def _shipped_json(name: str) -> dict[str, Any]:
    text = (resources.files("learn_to_shard") / "data" / "models" / f"{name}.json").read_text()
    return json.loads(text)


def _with_quant(tmp_path: Path, name: str, qc: dict[str, Any]) -> ModelSpec:
    path = tmp_path / f"{name}-q.json"
    path.write_text(json.dumps(_shipped_json(name) | {"quantization_config": qc}))
    return load_model(str(path))


def _rules(spec: ModelSpec, cluster: str, s: Strategy) -> set[str]:
    space = StrategySpace.build(spec, parse_cluster(cluster))
    return {v.split(":")[0] for v in space.violations(s)}


@pytest.mark.parametrize("qc, bits", [
    (GPTQ_G128, 4 + 20 / 128),          # int4 + fp16 scale + int4 zero point per 128
    (AWQ_G128, 4 + 20 / 128),
    (CT_W4A16, 4 + 16 / 128),           # symmetric: no zero point
    ({"quant_method": "gptq", "bits": 8, "group_size": -1}, 8.0),
])
def test_int_weight_only_bits_include_scales(tmp_path: Path, qc: dict, bits: float) -> None:
    q = _with_quant(tmp_path, "llama-3.1-8b", qc).quant
    assert q is not None and q.weight_bits == pytest.approx(bits)
    assert not q.fp8 and not q.fp4


@pytest.mark.parametrize("qc, bits", [
    (GPTQ_G128, 4 + 20 / 128),
    ({"quant_method": "gptq", "bits": 8, "group_size": 128, "sym": True, "desc_act": False},
     8 + 24 / 128),                      # GPTQ stores its zero points even when symmetric
    ({"quant_method": "awq", "bits": 8, "group_size": 128, "zero_point": True,
      "version": "gemm"}, 8 + 24 / 128),
])
def test_int_weight_only_weights_are_priced_at_their_real_bytes(tmp_path: Path, qc: dict,
                                                                bits: float) -> None:
    """Per-device weight bytes of an integer weight-only Llama-3.1-8B: the linear layers at
    their stored bits, the 16-bit embedding and LM head unchanged. 8-bit GPTQ/AWQ keep
    16-bit activations (Marlin dequantises to 16-bit math), so the workload stays bf16, and
    were priced at 16 bits (16.06 GB where about 9.2 GB are stored)."""
    bf16 = load_model("llama-3.1-8b")
    q = _with_quant(tmp_path, "llama-3.1-8b", qc)
    assert q.quant is not None and q.quant.packed and q.checkpoint_dtype == "bf16"
    assert q.quant.weight_bits == pytest.approx(bits)
    cluster = parse_cluster("h100-sxm:1")
    wl = Workload(Phase.DECODE, isl=1024)
    s = Strategy(tp=1, ep=1, pp=1, dp=1, batch=1)
    w16 = CostModel(bf16, cluster, wl).evaluate(s).memory.weight_bytes
    wq = CostModel(q, cluster, wl).evaluate(s).memory.weight_bytes
    emb = 2 * 128256 * 4096 * 2.0                    # embedding + untied LM head, bf16
    assert wq - emb == pytest.approx((w16 - emb) * bits / 16, rel=1e-9)


def test_gptq_group_rule_refuses_qwen25_tp8(tmp_path: Path) -> None:
    """Qwen2.5-7B int4 g128: down_proj K = 18944 / 8 = 2368 is not a multiple of 128
    (vLLM gptq_marlin refuses TP8); TP4 (4736 = 37 x 128) is valid."""
    spec = _with_quant(tmp_path, "qwen2.5-7b-instruct", GPTQ_G128)
    assert "quant_group" in _rules(spec, "h100-sxm:8", Strategy(tp=8, ep=1, pp=1, dp=1,
                                                                 batch=8))
    assert "quant_group" not in _rules(spec, "h100-sxm:8", Strategy(tp=4, ep=1, pp=1, dp=1,
                                                                     batch=8))
    bf16 = load_model("qwen2.5-7b-instruct")
    assert "quant_group" not in _rules(bf16, "h100-sxm:8", Strategy(tp=8, ep=1, pp=1, dp=1,
                                                                     batch=8))


def test_block_fp8_divisibility_in_qwen3_moe() -> None:
    """Qwen3-30B-A3B-FP8: expert width 768 over 8 ranks = 96, not a multiple of the
    128-column block: refused; experts whole per rank (EP8) are valid."""
    spec = load_model("qwen3-30b-a3b-fp8")
    assert spec.weight_block_size == (128, 128)
    etp8 = Strategy(tp=8, ep=1, pp=1, dp=1, batch=8)
    ep8 = Strategy(tp=8, ep=8, pp=1, dp=1, batch=8)
    assert "quant_block" in _rules(spec, "h100-sxm:8", etp8)
    assert "quant_block" not in _rules(spec, "h100-sxm:8", ep8)
    assert "quant_block" not in _rules(load_model("qwen3-30b-a3b"), "h100-sxm:8", etp8)


def test_block_fp8_checks_attention_projections(tmp_path: Path) -> None:
    """The block rule covers o_proj's input too: 64 heads x 64 dims over TP 64 = 64 columns."""
    data = _shipped_json("qwen3-32b-fp8") | {"head_dim": 64}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    spec = load_model(str(path))
    dims = list(Strategy(tp=1, ep=1, pp=1, dp=1, batch=1).dims)
    s = Strategy(tp=64, ep=1, pp=1, dp=1, batch=64, dims=tuple(
        2 if i >= 4 else d for i, d in enumerate(dims)))        # FFN replicated
    assert "quant_block" in _rules(spec, "h100-sxm:64", s)


def test_nvfp4_bits_and_fp4_math_where_the_device_has_it() -> None:
    """ModelOpt NVFP4 (hf_quant_config.json): 4 + 8/16 = 4.5 bits; B200 runs the GEMMs on
    FP4 tensor cores, H100 dequantises (16-bit math)."""
    spec = load_model("qwen3-235b-a22b-nvfp4")
    assert spec.quant is not None and spec.quant.method == "modelopt:NVFP4"
    assert spec.quant.weight_bits == 4.5 and spec.quant.fp4 and spec.quant.group_size == 16
    wl = Workload(Phase.DECODE, isl=1024)
    b200 = CostModel(spec, parse_cluster("b200:8"), wl)
    h100 = CostModel(spec, parse_cluster("h100-sxm:8"), wl)
    dev_b, dev_h = b200.cluster.device, h100.cluster.device
    assert dev_b.peak_fp4_flops_per_s is not None and dev_h.peak_fp4_flops_per_s is None
    eff = b200.config.fp8_flops_efficiency or b200.config.flops_efficiency
    assert b200._gemm_flops == pytest.approx(dev_b.peak_fp4_flops_per_s * eff)
    assert h100._gemm_flops == pytest.approx(dev_h.peak_bf16_flops_per_s
                                             * h100.config.flops_efficiency)
    assert b200._wb == b200._ewb == 4.5 / 8


def test_mxfp4_experts_only_on_gpt_oss_all_linears_on_a_dense_model(tmp_path: Path) -> None:
    """gpt-oss keeps attention in 16 bits (modules_to_not_convert): only experts are 4.25
    bits; an mxfp4 header on a dense model quantises its linear layers (no 'experts' claim,
    no 8-bit plan)."""
    oss = load_model("gpt-oss-120b")
    assert oss.quant is not None and oss.quant.experts_only
    dense = _with_quant(tmp_path, "llama-3.1-8b", {"quant_method": "mxfp4"})
    assert dense.quant is not None and not dense.quant.experts_only
    assert dense.expert_weight_bits is None
    cm = CostModel(dense, parse_cluster("b200:1"), Workload(Phase.DECODE, isl=1024,
                                                             weight_dtype=DType.FP8))
    assert cm._wb == pytest.approx(4.25 / 8)


def test_w8a8_int8_and_fp8_checkpoints_default_to_fp8(tmp_path: Path) -> None:
    assert _with_quant(tmp_path, "llama-3.1-8b", CT_W8A8).checkpoint_dtype == "fp8"
    assert load_model("llama-3.1-70b-instruct-fp8").checkpoint_dtype == "fp8"
    assert load_model("deepseek-v3").checkpoint_dtype == "fp8"
    assert load_model("llama-3.1-8b").checkpoint_dtype == "bf16"


def test_bitsandbytes_is_refused_clearly(tmp_path: Path) -> None:
    for qc in ({"quant_method": "bitsandbytes", "load_in_4bit": True},
               {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}):
        with pytest.raises(UnsupportedModelError) as exc:
            _with_quant(tmp_path, "llama-3.1-8b", qc)
        assert "bitsandbytes" in str(exc.value) and "\n" not in str(exc.value)


def test_quantization_config_without_method_is_an_error(tmp_path: Path) -> None:
    """A 4-bit config with no quant_method is an error, never a silent 16-bit plan."""
    with pytest.raises(ConfigError) as exc:
        _with_quant(tmp_path, "llama-3.1-8b", {"bits": 4, "group_size": 128})
    assert "quant_method" in str(exc.value)


@pytest.mark.parametrize("qc, field", [
    ({"quant_method": "gptq", "bits": 5, "group_size": 128}, "bits"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 0}, "group_size"),
    # The engines' loaders require the bits and the group size (vLLM GPTQConfig /
    # AWQConfig.from_config): a config without them was read as 4-bit, group 128.
    ({"quant_method": "gptq", "group_size": 128}, "'quantization_config.bits'"),
    ({"quant_method": "gptq", "bits": None, "group_size": 128},
     "'quantization_config.bits'"),
    ({"quant_method": "awq", "group_size": 128, "zero_point": True},
     "'quantization_config.w_bit'"),
    ({"quant_method": "gptq", "bits": 4}, "'quantization_config.group_size'"),
    ({"quant_method": "awq", "w_bit": 4, "zero_point": True},
     "'quantization_config.q_group_size'"),
    ({"quant_method": "compressed-tensors", "config_groups": {
        "a": {"weights": {"num_bits": 4, "type": "int", "strategy": "group",
                          "group_size": 128}},
        "b": {"weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}},
     "mix"),
])
def test_malformed_quantisation_names_the_field(tmp_path: Path, qc: dict, field: str) -> None:
    with pytest.raises((ConfigError, UnsupportedModelError)) as exc:
        _with_quant(tmp_path, "llama-3.1-8b", qc)
    assert field in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("name, cluster, qc", [
    ("qwen3-235b-a22b-nvfp4", "b200:16", None),        # FP4 math, 4.5-bit weights
    ("gpt-oss-120b", "b200:8", None),                  # MXFP4 experts only, FP4 experts math
    ("qwen2.5-7b-instruct", "h100-sxm:8", GPTQ_G128),  # INT4 weights, group rule
    ("qwen3-30b-a3b-fp8", "h100-sxm:8", None),         # block FP8 rule on experts
])
def test_exact_searcher_tables_price_formats_like_the_cost_model(
        tmp_path: Path, name: str, cluster: str, qc: dict | None) -> None:
    """The exact searcher's decomposed tables restate the cost model's weight bytes and GEMM
    rates (exact_tables.verify compares them with evaluate_many on sampled strategies)."""
    from learn_to_shard.search.exact_tables import verify

    spec = load_model(name) if qc is None else _with_quant(tmp_path, name, qc)
    cm = CostModel(spec, parse_cluster(cluster), Workload(Phase.DECODE, isl=4096,
                                                          weight_dtype=DType.FP8))
    assert verify(cm, n=200) > 0


def test_compressed_tensors_nvfp4_moe_with_attention_ignored_is_experts_only(
        tmp_path: Path) -> None:
    """llm-compressor NVFP4 (float 4-bit, group 16) on a MoE that ignores self_attn: the
    experts are 4.5 bits, attention stays 16-bit."""
    qc = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
          "ignore": ["lm_head", "re:.*self_attn.*"],
          "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float",
                                                    "group_size": 16}}}}
    spec = _with_quant(tmp_path, "qwen3-30b-a3b", qc)
    assert spec.quant is not None and spec.quant.fp4 and spec.quant.experts_only
    assert spec.expert_weight_bits == 4.5
    cm = CostModel(spec, parse_cluster("b200:8"), Workload(Phase.DECODE, isl=1024))
    assert cm._wb == 2.0 and cm._ewb == 4.5 / 8
