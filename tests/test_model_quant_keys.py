"""Every key of a known quantisation section is read or refused (``model/quant_keys.py``).

Real sections: the shipped ModelOpt NVFP4 folders (``deepseek-v3.1-nvfp4``, ``glm-5.1-nvfp4``,
``minimax-m2.5-nvfp4``, ``qwen3-235b-a22b-nvfp4``), the block-FP8 configs (DeepSeek-V3/V3.2,
Qwen3-FP8, MiniMax-M2.5) and gpt-oss MXFP4, all copied byte for byte (data/models/SOURCES.md).
The others are the published key sets with one key changed.
"""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from learn_to_shard.errors import PlannerError, UnsupportedModelError
from learn_to_shard.model import load_model, shipped_model_names
from learn_to_shard.model.quant_keys import FORMAT_KEYS, exclusion_scope
from learn_to_shard.model.spec import ModelSpec, QuantSpec

MODELS = resources.files("learn_to_shard") / "data" / "models"

#: TheBloke/TinyLlama-1.1B-Chat-v1.0-GPTQ quantize_config.json keys (AutoGPTQ), plus
#: quant_method as transformers writes it into config.json.
GPTQ_AUTOGPTQ = {"bits": 4, "group_size": 128, "damp_percent": 0.1, "desc_act": True,
                 "static_groups": False, "sym": True, "true_sequential": True,
                 "model_name_or_path": None, "model_file_base_name": "model",
                 "quant_method": "gptq"}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
       "version": "gemm", "modules_to_not_convert": None}
CT_W4A16 = {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "quantization_status": "compressed", "global_compression_ratio": None,
            "kv_cache_scheme": None, "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"], "output_activations": None,
                                          "input_activations": None, "weights": {
                                              "num_bits": 4, "type": "int", "strategy": "group",
                                              "group_size": 128, "symmetric": True,
                                              "dynamic": False, "actorder": None,
                                              "observer": "minmax", "observer_kwargs": {}}}}}


def _shipped(name: str) -> dict[str, Any]:
    return json.loads((MODELS / f"{name}.json").read_text())


def _with_quant(tmp_path: Path, name: str, qc: dict[str, Any]) -> ModelSpec:
    path = tmp_path / f"{name}-q.json"
    path.write_text(json.dumps(_shipped(name) | {"quantization_config": qc}))
    return load_model(str(path))


def _refusal(tmp_path: Path, name: str, qc: dict[str, Any]) -> str:
    with pytest.raises(PlannerError) as exc:
        _with_quant(tmp_path, name, qc)
    msg = str(exc.value)
    assert "\n" not in msg and "-q.json" in msg, msg
    return msg


def _quant(spec: ModelSpec) -> QuantSpec:
    assert spec.quant is not None
    return spec.quant


def test_every_shipped_quantised_config_uses_known_keys_only() -> None:
    """The real configs load: their keys are all in the read / metadata sets."""
    quantised = [n for n in shipped_model_names() if load_model(n).quant is not None]
    assert {"deepseek-v3", "deepseek-v3.2", "minimax-m2.5", "qwen3-30b-a3b-fp8",
            "gpt-oss-120b", "deepseek-v3.1-nvfp4", "glm-5.1-nvfp4",
            "minimax-m2.5-nvfp4"} <= set(quantised)


@pytest.mark.parametrize("name, kept", [
    # attention excluded per layer (q_a/q_b/kv_a/kv_b of layers 0-60) + layer 61 (MTP)
    ("deepseek-v3.1-nvfp4", {"attention", "MTP layers", "embedding / LM head"}),
    # 'model.layers.0*' .. dense layers whole, shared experts, self_attn* per layer
    ("glm-5.1-nvfp4", {"attention", "dense FFN layers", "shared experts", "MTP layers"}),
    ("minimax-m2.5-nvfp4", {"attention", "router"}),
])
def test_real_modelopt_nvfp4_exclusions_are_experts_only(name: str, kept: set[str]) -> None:
    q = _quant(load_model(name))
    assert q.fp4 and q.weight_bits == 4.5 and q.experts_only
    assert kept <= set(q.kept_16bit)
    assert q.kv_cache_fp8           # kv_cache_quant_algo "FP8"


def test_real_exclusions_that_keep_nothing_priced_quantise_every_linear() -> None:
    """Qwen3-235B NVFP4 excludes only routers and the LM head; Qwen3-30B-A3B-FP8 only norms,
    routers and the LM head: every linear layer is quantised."""
    nv = _quant(load_model("qwen3-235b-a22b-nvfp4"))
    assert not nv.experts_only and set(nv.kept_16bit) == {"router", "embedding / LM head"}
    fp8 = _quant(load_model("qwen3-30b-a3b-fp8"))
    assert not fp8.experts_only and "norms" in fp8.kept_16bit
    oss = _quant(load_model("gpt-oss-120b"))
    assert oss.experts_only and "attention" in oss.kept_16bit


def test_modelopt_config_json_form_reads_the_same(tmp_path: Path) -> None:
    """GLM-5.1-NVFP4's config.json alone (quant_method modelopt, ignore, kv_cache_scheme,
    config_groups, producer) gives the hf_quant_config.json reading."""
    folder = tmp_path / "glm"
    folder.mkdir()
    shutil.copyfile(str(MODELS / "glm-5.1-nvfp4" / "config.json"), folder / "config.json")
    alone, both = _quant(load_model(str(folder))), _quant(load_model("glm-5.1-nvfp4"))
    assert (alone.weight_bits, alone.experts_only, alone.kv_cache_fp8) == \
        (both.weight_bits, both.experts_only, both.kv_cache_fp8)


def test_metadata_keys_do_not_change_the_reading(tmp_path: Path) -> None:
    bare = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    a = _quant(_with_quant(tmp_path, "llama-3.1-8b", GPTQ_AUTOGPTQ))
    b = _quant(_with_quant(tmp_path, "llama-3.1-8b", bare))
    assert a.weight_bits == b.weight_bits and a.group_size == b.group_size == 128
    assert _quant(_with_quant(tmp_path, "llama-3.1-8b", AWQ)).group_size == 128
    assert _quant(_with_quant(tmp_path, "llama-3.1-8b", CT_W4A16)).weight_bits == 4 + 16 / 128


@pytest.mark.parametrize("qc, key", [
    # a custom GPTQ exporter's per-layer mixed precision (keys seen in public export scripts)
    (GPTQ_AUTOGPTQ | {"mixed_precision": True, "layer_bits": {"0": 16}}, "layer_bits"),
    (AWQ | {"modules_to_preserve": ["mlp"]}, "modules_to_preserve"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
      "weight_block_layout": "col"}, "weight_block_layout"),
    ({"quant_method": "mxfp4", "group_size": 16}, "group_size"),
    ({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0, "weight_bits": 8},
     "weight_bits"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
      "quantized_layers": {}}, "quantized_layers"),
    (CT_W4A16 | {"weight_packing": "int32"}, "weight_packing"),
])
def test_unknown_key_is_refused_naming_file_and_key(tmp_path: Path, qc: dict, key: str) -> None:
    msg = _refusal(tmp_path, "llama-3.1-8b", qc)
    assert f"key {key!r}" in msg and "read:" in msg and "known metadata:" in msg


def test_unknown_key_inside_a_compressed_tensors_group_is_refused(tmp_path: Path) -> None:
    qc = json.loads(json.dumps(CT_W4A16))
    qc["config_groups"]["group_0"]["weights"]["hadamard"] = True
    assert "key 'hadamard'" in _refusal(tmp_path, "llama-3.1-8b", qc)


def test_unknown_key_in_hf_quant_config_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    shutil.copyfile(str(MODELS / "qwen3-235b-a22b-nvfp4" / "config.json"),
                    folder / "config.json")
    quant = json.loads((MODELS / "qwen3-235b-a22b-nvfp4" / "hf_quant_config.json").read_text())
    quant["quantization"]["awq_block_size"] = 64
    (folder / "hf_quant_config.json").write_text(json.dumps(quant))
    with pytest.raises(UnsupportedModelError, match="hf_quant_config.json.*'awq_block_size'"):
        load_model(str(folder))


@pytest.mark.parametrize("qc, needle", [
    (GPTQ_AUTOGPTQ | {"lm_head": True}, "lm_head"),
    (GPTQ_AUTOGPTQ | {"dynamic": {"-:.*mlp.*": {}}}, "dynamic"),
    (GPTQ_AUTOGPTQ | {"modules_in_block_to_quantize": [["self_attn.q_proj"]]},
     "modules_in_block_to_quantize"),
    (GPTQ_AUTOGPTQ | {"checkpoint_format": "bitblas"}, "checkpoint_format"),
    (AWQ | {"version": "quick"}, "version"),
    ({"quant_method": "fp8", "activation_scheme": "per-group"}, "activation_scheme"),
    ({"quant_method": "fp8", "fmt": "e5m2"}, "fmt"),
    ({"quant_method": "fp8", "scale_fmt": "e4m3"}, "scale_fmt"),
    (CT_W4A16 | {"sparsity_config": {"format": "sparse-24-bitmask"}}, "sparsity_config"),
    (CT_W4A16 | {"transform_config": {"config_groups": {}}}, "transform_config"),
    (CT_W4A16 | {"kv_cache_scheme": {"num_bits": 8, "type": "int"}}, "kv_cache_scheme"),
    (CT_W4A16 | {"format": "marlin-24"}, "format"),          # 2:4 sparse packing
    (CT_W4A16 | {"format": "naive-quantized"}, "format"),    # 4-bit values in int8 slots
    ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "NVFP4"},
     "kv_cache_quant_algo"),
])
def test_values_that_change_what_is_stored_are_refused(tmp_path: Path, qc: dict,
                                                       needle: str) -> None:
    msg = _refusal(tmp_path, "llama-3.1-8b", qc)
    assert needle in msg and "supported" in msg


def test_fp8_kv_cache_scheme_is_read() -> None:
    assert _quant(load_model("llama-3.1-70b-instruct-fp8")).kv_cache_fp8
    assert not _quant(load_model("deepseek-v3")).kv_cache_fp8


@pytest.mark.parametrize("name, qc, needle", [
    # dense model whose FP8 list keeps attention in 16 bits (the cost model would price it
    # at 8 bits): refused
    ("llama-3.1-8b", {"quant_method": "fbgemm_fp8", "modules_to_not_convert": [
        "model.layers.0.self_attn.q_proj", "lm_head"]}, "dense model"),
    # Meta's Llama-3.1-405B-Instruct-FP8 style: one layer's FFN projection kept in 16 bits
    # (refused as what it is, part of a dense model kept, not as a kind of no name)
    ("llama-3.1-8b", {"quant_method": "fbgemm_fp8", "modules_to_not_convert": [
        "model.layers.0.mlp.down_proj", "model.layers.0.mlp.gate_proj"]},
     "keeps part of a dense model in 16 bits"),
    # 4-bit MoE with attention kept in some layers only
    ("qwen3-30b-a3b", {"quant_method": "modelopt", "quant_algo": "NVFP4",
                       "exclude_modules": ["model.layers.0.self_attn*"]}, "some layers only"),
    # routed experts kept in 16 bits
    ("qwen3-30b-a3b", {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.mlp.experts"]}, "routed experts"),
    # shared experts kept while attention is quantised
    ("qwen2-57b-a14b", {"quant_method": "modelopt", "quant_algo": "NVFP4",
                        "exclude_modules": ["model.layers.*.mlp.shared_expert"]},
     "while attention is quantised"),
    # a whole MoE layer kept (layer 3 of an all-MoE model)
    ("qwen3-30b-a3b", {"quant_method": "modelopt", "quant_algo": "NVFP4",
                       "exclude_modules": ["model.layers.3*"]}, "MoE layer 3"),
    # an 8-bit MoE checkpoint that keeps attention in 16 bits
    ("qwen3-30b-a3b", {"quant_method": "fp8", "modules_to_not_convert": ["re:.*self_attn.*"]},
     "8-bit checkpoint"),
    # an entry of no known kind
    ("llama-3.1-8b", {"quant_method": "mxfp4", "modules_to_not_convert": ["mixer.conv1d"]},
     "no module kind"),
])
def test_exclusions_the_cost_model_cannot_price_are_refused(
        tmp_path: Path, name: str, qc: dict, needle: str) -> None:
    msg = _refusal(tmp_path, name, qc)
    assert needle in msg and "entry" in msg


def test_glob_layer_entries_match_like_fnmatch() -> None:
    """ModelOpt matches exclude_modules with fnmatch: 'model.layers.1*' also names layers
    10-19, so on a model whose layer 1 is dense and 10-19 are MoE it keeps MoE layers."""
    moe = [False, False, False] + [True] * 20
    ok = exclusion_scope(["model.layers.*.self_attn*", "model.layers.0*"], key="k", source="s",
                         moe_layers=moe, below_8_bit=True)
    assert ok.experts_only and "dense FFN layers" in ok.kept
    with pytest.raises(UnsupportedModelError, match="MoE layer 10"):
        exclusion_scope(["model.layers.*.self_attn*", "model.layers.1*"], key="k",
                        source="s", moe_layers=moe, below_8_bit=True)


def test_compressed_tensors_groups_targeting_experts_only(tmp_path: Path) -> None:
    qc = json.loads(json.dumps(CT_W4A16))
    qc["config_groups"]["group_0"]["targets"] = ["re:.*mlp.experts.*"]
    spec = _with_quant(tmp_path, "qwen3-30b-a3b", qc)
    assert _quant(spec).experts_only and spec.expert_weight_bits == 4 + 16 / 128
    qc["config_groups"]["group_0"]["targets"] = ["re:.*self_attn.*"]
    assert "targets" in _refusal(tmp_path, "qwen3-30b-a3b", qc)


def test_every_format_lists_read_and_metadata_keys_apart() -> None:
    for name, keys in FORMAT_KEYS.items():
        assert "quant_method" in keys.known, name
        assert not keys.read & keys.metadata, name


SCOUT_FP8 = Path(__file__).parent / "data" / "llama-4-scout-17b-16e-instruct-fp8-dynamic"


def test_real_fp8_checkpoint_keeping_attention_16_bit_is_refused() -> None:
    """RedHatAI Llama-4-Scout FP8-dynamic (tests/data/README.md) ignores every layer's
    q/k/v/o projections: an 8-bit MoE whose attention stays 16-bit is not priced (the cost
    model would count that attention at 8 bits), so it is refused naming the entry."""
    with pytest.raises(UnsupportedModelError) as exc:
        load_model(str(SCOUT_FP8))
    msg = str(exc.value)
    assert "\n" not in msg and "config.json (quantization_config)" in msg
    assert "ignore entry 'language_model.model.layers.0.self_attn.q_proj'" in msg
    assert "8-bit checkpoint" in msg


def test_regex_entries_are_read_without_anchors_and_escapes(tmp_path: Path) -> None:
    """llm-compressor writes routers as ``re:.*mlp.gate$`` and escaped forms: read as the
    router (harmless), so a W4A16 Qwen3-MoE quantises every linear layer."""
    qc = json.loads(json.dumps(CT_W4A16))
    qc["ignore"] = ["lm_head", "re:.*mlp.gate$", r"re:.*mlp\.gate$"]
    q = _quant(_with_quant(tmp_path, "qwen3-30b-a3b", qc))
    assert not q.experts_only and set(q.kept_16bit) == {"embedding / LM head", "router"}
    qc["ignore"] = ["lm_head", r"re:^model\.layers\.\d+\.self_attn\..*$"]
    assert _quant(_with_quant(tmp_path, "qwen3-30b-a3b", qc)).experts_only


def test_modelopt_awq_zero_points_are_read(tmp_path: Path) -> None:
    """ModelOpt W4A16_AWQ exports write has_zero_point / pre_quant_scale: zero points add a
    4-bit entry per group of 128; pre_quant_scale is metadata."""
    base = {"quant_method": "modelopt", "quant_algo": "W4A16_AWQ", "group_size": 128,
            "pre_quant_scale": True, "kv_cache_quant_algo": None,
            "exclude_modules": ["lm_head", "model.visual*"]}
    sym = _quant(_with_quant(tmp_path, "llama-3.1-8b", base | {"has_zero_point": False}))
    asym = _quant(_with_quant(tmp_path, "llama-3.1-8b", base | {"has_zero_point": True}))
    assert sym.weight_bits == 4 + 16 / 128 and asym.weight_bits == 4 + 20 / 128
    nv = {"quant_method": "modelopt", "quant_algo": "NVFP4", "has_zero_point": True}
    assert "has_zero_point" in _refusal(tmp_path, "llama-3.1-8b", nv)


@pytest.mark.parametrize("algo, group", [("W4A16_AWQ", 0), ("W4A16_AWQ", "64"),
                                         ("NVFP4", 32.0), ("NVFP4", "32"), ("NVFP4", 32)])
def test_a_modelopt_group_size_that_is_not_a_valid_integer_is_refused(
        tmp_path: Path, algo: str, group: object) -> None:
    """A ModelOpt ``group_size`` of 0, a string or a float was priced at the default (128
    for AWQ, 16 for NVFP4) while the integer 32 was refused for NVFP4: every one is refused,
    naming the field."""
    from learn_to_shard.errors import ConfigError

    qc = {"quant_method": "modelopt", "quant_algo": algo, "group_size": group}
    with pytest.raises(ConfigError, match="group_size must be"):
        _with_quant(tmp_path, "llama-3.1-8b", qc)


def test_engines_plan_the_kv_cache_as_their_auto_loads_the_checkpoint() -> None:
    """TensorRT-LLM's ``kv_cache_config.dtype`` ``auto``, vLLM's and SGLang's
    ``--kv-cache-dtype auto`` take a ModelOpt checkpoint's ``kv_cache_quant_algo``; no
    engine keeps 16 bits, and so do vLLM and SGLang for FP8 KV scales outside a ModelOpt
    export (a compressed-tensors ``kv_cache_scheme``); a given ``--kv-dtype`` wins
    everywhere (api.checkpoint_dtypes)."""
    from learn_to_shard.api import checkpoint_dtypes
    from learn_to_shard.engines import default_kv_dtype

    fp8_kv = load_model("llama-3.1-70b-instruct-fp8")          # kv_cache_quant_algo FP8
    for engine in ("trtllm", "vllm", "sglang"):
        assert checkpoint_dtypes(fp8_kv, None, None, engine) == ("fp8", "fp8")
        assert checkpoint_dtypes(fp8_kv, None, "bf16", engine) == ("fp8", "bf16")
    assert checkpoint_dtypes(fp8_kv, None, None, None) == ("fp8", "bf16")
    assert checkpoint_dtypes(fp8_kv, None, None, "trtllm-tensorrt") == ("fp8", "fp8")
    assert [default_kv_dtype(e, True, modelopt=False) for e in ("trtllm", "vllm", "sglang")] \
        == ["fp8", "bf16", "bf16"]
    # a checkpoint without KV scales keeps 16 bits under TensorRT-LLM too
    assert checkpoint_dtypes(load_model("deepseek-v3"), None, None, "trtllm")[1] == "bf16"
    assert checkpoint_dtypes(load_model("llama-3.1-8b"), None, None, "trtllm") == \
        ("bf16", "bf16")


def test_plan_under_trtllm_prices_the_checkpoint_fp8_kv_cache() -> None:
    """The plan's workload carries the engine's KV dtype: more KV tokens fit in FP8."""
    from learn_to_shard.api import plan

    kw = dict(phase="serve", isl=1024, osl=1024, method="megatron", budget=4)
    trt = plan("llama-3.1-70b-instruct-fp8", "h100-sxm:4", engine="trtllm", **kw)
    bf16 = plan("llama-3.1-70b-instruct-fp8", "h100-sxm:4", engine="trtllm",
                kv_dtype="bf16", **kw)
    assert trt.workload.kv_dtype.value == "fp8" and bf16.workload.kv_dtype.value == "bf16"
    # the engine given as its cost_config (api.plan's config=) loads the checkpoint alike
    from learn_to_shard.api import cost_config

    cfg = plan("llama-3.1-70b-instruct-fp8", "h100-sxm:4", config=cost_config("trtllm"), **kw)
    assert cfg.workload.kv_dtype.value == "fp8"


def test_internlm2_module_names_in_exclusion_lists() -> None:
    """InternLM2 names its LM head ``output`` and its FFN ``feed_forward.w1/w2/w3``: an
    exclusion of the head is harmless (priced 16-bit anyway), one of a layer's FFN
    projection is refused as keeping part of a dense model, not as a kind of no name."""
    dense = [False] * 32
    ok = exclusion_scope(["output"], key="modules_to_not_convert", source="s",
                         moe_layers=dense, below_8_bit=True)
    assert "embedding / LM head" in ok.kept
    with pytest.raises(UnsupportedModelError, match="keeps part of a dense model in 16 bits"):
        exclusion_scope(["model.layers.0.feed_forward.w2"], key="modules_to_not_convert",
                        source="s", moe_layers=dense, below_8_bit=False)
