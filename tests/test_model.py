"""Tests of config loading (``load_model``) and parameter counting (``count_params``).

Expected figures are the "Params, computed" column of ``data/models/SOURCES.md``.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from learn_to_shard.errors import ConfigError, UnsupportedModelError
from learn_to_shard.model import (
    AttentionKind,
    count_params,
    load_model,
    shipped_model_names,
)
from learn_to_shard.model.params import (
    attention_params,
    dense_mlp_params,
    expert_params,
    router_params,
    shared_expert_params,
)

B = 1e9

# name -> (total, active) from SOURCES.md; active None where SOURCES.md gives none (dense models:
# active == total there). SOURCES.md quotes active *with* the input embedding, except gpt-oss
# ("active counts the unembedding but not the embedding"), which matches ParamCount.active;
# see ACTIVE_EXCLUDES_EMBEDDING.
SOURCES: dict[str, tuple[float, float | None]] = {
    "llama-3.1-8b": (8.03 * B, None),
    "llama-3.1-70b": (70.55 * B, None),
    "llama-3.1-405b": (405.85 * B, None),
    "qwen3-8b": (8.19 * B, None),
    "qwen3-32b": (32.76 * B, None),
    "qwen3-30b-a3b": (30.53 * B, 3.35 * B),
    "qwen3-235b-a22b": (235.09 * B, 22.19 * B),
    "mixtral-8x7b": (46.70 * B, 12.88 * B),
    "mixtral-8x22b": (140.62 * B, 39.15 * B),
    "deepseek-v2-lite": (15.71 * B, 2.66 * B),
    "deepseek-v3": (671.0 * B, 37.5 * B),  # main model; MTP layer excluded
    "kimi-k2": (1026.4 * B, 32.9 * B),
    "gpt-oss-20b": (20.91 * B, 3.61 * B),
    "gpt-oss-120b": (116.83 * B, 5.13 * B),
    "llama-4-scout": (107.8 * B, 17.2 * B),  # text-only
    "llama-4-maverick": (400.7 * B, 17.2 * B),  # text-only
    "gpt-moe-1.2t": (1182.0 * B, None),
    "gpt-moe-1.6t": (1575.0 * B, None),
    # Families and checkpoint formats added for issue 14 (published figures, SOURCES.md).
    "qwen2.5-7b-instruct": (7.61 * B, None),          # model card "7.61B"
    "mistral-nemo-instruct-2407": (12.2 * B, None),   # HF "12.2B params"
    "deepseek-v3.2": (671.0 * B, None),               # main model + indexer; MTP excluded
    "minimax-m2.5": (230.0 * B, None),                # model card "230B total, 10B active"
    "glm-5": (744.0 * B, None),                       # model card "744B (40B active)"
    "qwen3-vl-235b-a22b-instruct": (235.0 * B, 22.0 * B),  # model name 235B-A22B
    "qwen3-32b-fp8": (32.76 * B, None),               # same shape as qwen3-32b
    "qwen3-30b-a3b-fp8": (30.53 * B, 3.35 * B),
    "qwen3-235b-a22b-nvfp4": (235.09 * B, 22.19 * B),
    "llama-3.1-70b-instruct-fp8": (70.55 * B, None),
    # Gemma-2/3, Phi-3, Qwen2-MoE, GLM-4.5 (published figures and where, SOURCES.md).
    "gemma-2-9b-it": (9.2417 * B, None),               # Gemma 2 report, Table 1
    "gemma-3-12b-it": (12.188 * B, None),              # Gemma 3 report, Table 1 (+ vision)
    "phi-3-mini-4k-instruct": (3.8 * B, None),         # Phi-3 report: "3.8 billion"
    "qwen2-57b-a14b": (57.0 * B, None),                # "57B" total, "A14B" active (name)
    "glm-4.5-air": (106.0 * B, None),                  # model card "106B total, 12B active"
    "phi-3.5-moe-instruct": (41.9 * B, 6.6 * B),       # 41.9B; "6.6B active parameters"
    # ModelOpt NVFP4 checkpoints (real config.json + hf_quant_config.json, SOURCES.md).
    "deepseek-v3.1-nvfp4": (671.0 * B, 37.5 * B),     # DeepSeek-V3 shape: 671B / 37B
    "glm-5.1-nvfp4": (744.0 * B, None),               # the GLM-5 shape (744B)
    "minimax-m2.5-nvfp4": (230.0 * B, None),          # as minimax-m2.5
}
#: Shipped models whose only published size is rounded to one significant figure: their
#: count is checked against that figure's rounding (SOURCES.md), not to 1%.
ROUNDED_ONLY: dict[str, int] = {"falcon-7b-instruct": 7,   # model card "7B parameters"
                                 "qwen3-vl-32b-instruct": 33}  # "~33B", see SOURCES.md
ACTIVE_EXCLUDES_EMBEDDING = {"gpt-oss-20b", "gpt-oss-120b"}
#: MoE models whose active count is not published separately (only the total is tested).
ACTIVE_UNPUBLISHED = {"deepseek-v3.2", "minimax-m2.5", "glm-5", "glm-5.1-nvfp4",
                      "minimax-m2.5-nvfp4",
                      # only rounded ("A14B", "12B active"); computed figures in SOURCES.md
                      "qwen2-57b-a14b", "glm-4.5-air"}


def _shipped_json(name: str) -> dict[str, Any]:
    text = (resources.files("learn_to_shard") / "data" / "models" / f"{name}.json").read_text()
    return json.loads(text)


def _write(tmp_path: Path, data: Any, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_shipped_names_are_exactly_the_supported_models() -> None:
    assert shipped_model_names() == sorted(SOURCES | ROUNDED_ONLY)


@pytest.mark.parametrize("name", sorted(ROUNDED_ONLY))
def test_total_params_round_to_the_published_figure(name: str) -> None:
    """Falcon-7B: 6.92B computed; the model card states only "7B"."""
    assert round(count_params(load_model(name)).total / B) == ROUNDED_ONLY[name]


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_total_and_active_params_match_sources(name: str) -> None:
    spec = load_model(name)
    counts = count_params(spec)
    total, active = SOURCES[name]
    assert counts.total == pytest.approx(total, rel=0.01)
    components = (
        counts.embedding,
        counts.lm_head,
        counts.attention,
        counts.dense_mlp,
        counts.router,
        counts.routed_experts,
        counts.shared_experts,
        counts.norms,
        counts.vision,
    )
    assert sum(components) == counts.total
    if active is None and name in ACTIVE_UNPUBLISHED:
        return
    if active is None:
        assert spec.moe is None or spec.num_moe_layers == spec.num_layers
        if spec.moe is None:   # a tied matrix is both the (inactive) embedding and the head
            tied = counts.embedding if spec.tie_word_embeddings else 0
            assert counts.active_with_embedding == counts.total - counts.vision + tied
        return
    measured = counts.active if name in ACTIVE_EXCLUDES_EMBEDDING else counts.active_with_embedding
    assert measured == pytest.approx(active, rel=0.01)


def test_per_layer_helpers_llama_8b() -> None:
    spec = load_model("llama-3.1-8b")
    h, kv = 4096, 8 * 128
    assert attention_params(spec) == h * h + 2 * h * kv + h * h
    assert dense_mlp_params(spec) == 3 * h * 14336
    assert expert_params(spec) == shared_expert_params(spec) == router_params(spec) == 0


def test_per_layer_helpers_moe() -> None:
    v3 = load_model("deepseek-v3")
    assert expert_params(v3) == 3 * 7168 * 2048
    assert shared_expert_params(v3) == 3 * 7168 * 2048
    assert router_params(v3) == 7168 * 256 + 256  # e_score_correction_bias (noaux_tc)
    oss = load_model("gpt-oss-20b")
    assert expert_params(oss) == 3 * 2880 * 2880 + 2 * 2880 + 2880
    assert router_params(oss) == 2880 * 32 + 32
    # q/k/v/o weights + biases + 64 sinks
    assert attention_params(oss) == 2880 * (4096 + 1024) + 4096 * 2880 + (4096 + 1024) + 2880 + 64


# ---------------------------------------------------------------------------------------------
# Layer structure
# ---------------------------------------------------------------------------------------------


def test_deepseek_v3_structure() -> None:
    spec = load_model("deepseek-v3")
    assert [layer.is_moe for layer in spec.layers] == [False] * 3 + [True] * 58
    a = spec.attention
    assert a.kind is AttentionKind.MLA
    assert (a.q_lora_rank, a.kv_lora_rank, a.head_dim, a.v_head_dim) == (1536, 512, 192, 128)
    assert spec.moe is not None and spec.moe.num_shared_experts == 1
    assert spec.weight_block_size == (128, 128)
    assert spec.dense_intermediate_size == 18432


def test_deepseek_v2_lite_has_no_q_lora() -> None:
    spec = load_model("deepseek-v2-lite")
    assert spec.attention.q_lora_rank is None
    assert spec.num_moe_layers == 26 and not spec.layers[0].is_moe
    assert spec.moe is not None and spec.moe.router_bias is False  # topk_method greedy


def test_llama4_maverick_alternates_dense_and_moe() -> None:
    spec = load_model("llama-4-maverick")
    assert [layer.is_moe for layer in spec.layers] == [False, True] * 24
    assert spec.dense_intermediate_size == 16384
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.top_k, spec.moe.num_shared_experts) == (128, 1, 1)
    # chunked attention on RoPE layers, every 4th (NoPE) layer global
    assert [layer.window for layer in spec.layers[:8]] == [8192, 8192, 8192, None] * 2


def test_llama4_scout_all_moe() -> None:
    spec = load_model("llama-4-scout")
    assert spec.num_moe_layers == 48 and spec.dense_intermediate_size == 0
    assert sum(layer.window is None for layer in spec.layers) == 12


def test_gpt_oss_20b_alternating_windows() -> None:
    spec = load_model("gpt-oss-20b")
    assert [layer.window for layer in spec.layers] == [128, None] * 12
    assert spec.attention.sinks and spec.attention.qkv_bias and spec.attention.o_bias
    assert spec.moe is not None and spec.moe.top_k == 4 and spec.moe.expert_bias


def test_gpt_oss_mxfp4_experts_are_4_25_bits() -> None:
    """gpt-oss ships its experts in MXFP4 (4-bit values + an 8-bit scale per 32)."""
    assert load_model("gpt-oss-120b").expert_weight_bits == 4.25
    assert load_model("llama-3.1-70b").expert_weight_bits is None
    assert load_model("deepseek-v3").expert_weight_bits is None      # fp8: --dtype fp8


def test_modelopt_unknown_algorithm_is_refused_naming_it(tmp_path: Path) -> None:
    data = _shipped_json("llama-3.1-8b")
    data["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "W4A8_QQQ"}
    with pytest.raises(UnsupportedModelError) as exc:
        load_model(str(_write(tmp_path, data)))
    assert "W4A8_QQQ" in _one_line(exc)


@pytest.mark.parametrize("method", ["hqq", "eetq", "bitsandbytes"])
def test_unpriced_quantisation_is_refused(tmp_path: Path, method: str) -> None:
    data = _shipped_json("llama-3.1-8b")
    data["quantization_config"] = {"quant_method": method, "bits": 4}
    with pytest.raises(UnsupportedModelError) as exc:
        load_model(str(_write(tmp_path, data)))
    assert method in _one_line(exc) and "supported" in _one_line(exc)


@pytest.mark.parametrize("qc", [
    {"quant_method": "fbgemm_fp8"},
    {"quant_method": "modelopt", "quant_algo": "FP8"},
    {"quant_method": "modelopt", "quant_algo": "FP8_PB_WO"},
    {"quant_method": "modelopt", "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN"},
    {"quant_method": "compressed-tensors", "format": "float-quantized"},
    {"quant_method": "compressed-tensors",
     "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}}},
])
def test_fp8_checkpoint_formats_load(tmp_path: Path, qc: dict) -> None:
    """FP8 checkpoints in the common formats load (planned with --dtype fp8)."""
    data = _shipped_json("llama-3.1-8b")
    data["quantization_config"] = qc
    assert load_model(str(_write(tmp_path, data))).expert_weight_bits is None


def test_qwen3_30b_a3b_all_moe() -> None:
    spec = load_model("qwen3-30b-a3b")
    assert spec.num_moe_layers == spec.num_layers == 48
    assert spec.attention.qk_norm and spec.attention.head_dim == 128
    assert spec.dense_intermediate_size == 0


def test_qwen3_moe_sparse_step_and_mlp_only_layers(tmp_path: Path) -> None:
    data = _shipped_json("qwen3-30b-a3b")
    data.update(num_hidden_layers=6, decoder_sparse_step=2, mlp_only_layers=[3])
    spec = load_model(str(_write(tmp_path, data)))
    assert [layer.is_moe for layer in spec.layers] == [False, True, False, False, False, True]
    assert spec.dense_intermediate_size == 6144


def test_qwen3_moe_without_intermediate_size(tmp_path: Path) -> None:
    """A Qwen3-MoE config whose layers are all MoE needs no ``intermediate_size`` (no layer
    reads it): it loads as the same model; with a dense layer it is required, named."""
    data = _shipped_json("qwen3-30b-a3b")
    del data["intermediate_size"]
    spec = load_model(str(_write(tmp_path, data)))
    shipped = load_model("qwen3-30b-a3b")
    assert spec.layers == shipped.layers and spec.moe == shipped.moe
    assert spec.attention == shipped.attention and spec.dense_intermediate_size == 0
    data["mlp_only_layers"] = [0]
    with pytest.raises(ConfigError, match="missing required field 'intermediate_size'"):
        load_model(str(_write(tmp_path, data)))


@pytest.mark.parametrize("name, key", [
    ("deepseek-v2-lite", "n_shared_experts"), ("deepseek-v2-lite", "first_k_dense_replace"),
    ("deepseek-v3", "n_shared_experts"), ("deepseek-v3", "first_k_dense_replace"),
    ("glm-4.5-air", "n_shared_experts"), ("glm-4.5-air", "first_k_dense_replace"),
    ("kimi-k2", "n_routed_experts"), ("qwen2-57b-a14b", "shared_expert_intermediate_size")])
def test_moe_shape_fields_whose_class_defaults_differ_are_required(
        tmp_path: Path, name: str, key: str) -> None:
    """A DeepSeek-style, GLM-4.5 or Qwen2-MoE config that leaves out a field whose default
    the engines' config classes set to a shape (transformers' DeepseekV2Config: 2 shared
    experts; DeepseekV3Config: 1 shared expert, 3 dense layers first; Qwen2MoeConfig: a
    5,632-wide shared expert; DeepSeek's remote code: none), where l2s would otherwise plan
    another model, is refused, naming the field; null states "none" and loads."""
    data = _shipped_json(name)
    del data[key]
    with pytest.raises(ConfigError, match=f"missing required field '{key}' "):
        load_model(str(_write(tmp_path, data)))
    if key != "n_routed_experts":
        spec = load_model(str(_write(tmp_path, data | {key: None})))
        shared = spec.moe is not None and spec.moe.num_shared_experts
        first = sum(1 for layer in spec.layers[:5] if not layer.is_moe)
        assert (shared == 0) if "shared" in key else (first == 0)


def test_a_dense_deepseek_style_config_needs_no_moe_fields(tmp_path: Path) -> None:
    """With ``n_routed_experts`` null (a dense model) the shared-expert count and the dense
    layers first are moot: left out, or given as 0, the config loads dense; left out
    altogether, ``n_routed_experts`` is named with what it takes."""
    data = _shipped_json("deepseek-v2-lite")
    for key in ("n_shared_experts", "first_k_dense_replace", "num_experts_per_tok",
                "moe_intermediate_size"):
        data.pop(key, None)
    data["n_routed_experts"] = None
    spec = load_model(str(_write(tmp_path, data)))
    assert spec.moe is None and not any(layer.is_moe for layer in spec.layers)
    assert load_model(str(_write(tmp_path, data | {"n_shared_experts": 0}))).moe is None
    del data["n_routed_experts"]
    with pytest.raises(ConfigError, match="missing required field 'n_routed_experts' "
                                          r"\(an integer >= 1, or null for a dense model"):
        load_model(str(_write(tmp_path, data)))


def test_mixtral_sliding_window_int(tmp_path: Path) -> None:
    data = _shipped_json("mixtral-8x7b")
    data["sliding_window"] = 4096
    spec = load_model(str(_write(tmp_path, data)))
    assert all(layer.window == 4096 for layer in spec.layers)
    assert load_model("mixtral-8x7b").layers[0].window is None


def test_head_dim_defaults_to_hidden_over_heads() -> None:
    assert load_model("llama-3.1-70b").attention.head_dim == 8192 // 64


def test_path_and_directory_loading(tmp_path: Path) -> None:
    model_dir = tmp_path / "my-llama"
    model_dir.mkdir()
    path = _write(model_dir, _shipped_json("llama-3.1-8b"))
    by_dir, by_file = load_model(str(model_dir)), load_model(str(path))
    assert by_dir == by_file
    assert by_file.name == "my-llama" and by_file.source == str(path)
    assert count_params(by_file) == count_params(load_model("llama-3.1-8b"))


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def test_switch_c_is_rejected_as_encoder_decoder() -> None:
    with pytest.raises(UnsupportedModelError) as exc:
        load_model("switch-c-2048")
    msg = _one_line(exc)
    assert "encoder-decoder" in msg and "switch-c-2048.json" in msg and "llama" in msg


def test_deepseek_v4_is_rejected_naming_its_attention() -> None:
    with pytest.raises(UnsupportedModelError) as exc:
        load_model("deepseek-v4-pro")
    msg = _one_line(exc)
    assert "DeepSeek-V4" in msg and "compress_ratios" in msg and "deepseek_v3" in msg


def test_unknown_model_type(tmp_path: Path) -> None:
    data = _shipped_json("llama-3.1-8b") | {"model_type": "mamba"}
    path = _write(tmp_path, data)
    with pytest.raises(UnsupportedModelError) as exc:
        load_model(str(path))
    msg = _one_line(exc)
    assert str(path) in msg and "'mamba'" in msg and "qwen3_moe" in msg


def test_encoder_decoder_flag(tmp_path: Path) -> None:
    path = _write(tmp_path, _shipped_json("llama-3.1-8b") | {"is_encoder_decoder": True})
    with pytest.raises(UnsupportedModelError, match="encoder-decoder"):
        load_model(str(path))


def test_malformed_json(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"model_type": "llama",', name="bad.json")
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    msg = _one_line(exc)
    assert str(path) in msg and "invalid JSON" in msg


def test_missing_hidden_size(tmp_path: Path) -> None:
    data = _shipped_json("llama-3.1-8b")
    del data["hidden_size"]
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    msg = _one_line(exc)
    assert str(path) in msg and "'hidden_size'" in msg and "integer" in msg


def test_wrong_type_field(tmp_path: Path) -> None:
    data = _shipped_json("qwen3-30b-a3b") | {"num_experts": "128"}
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    msg = _one_line(exc)
    assert str(path) in msg and "'num_experts'" in msg and "'128'" in msg


def test_zero_positions_is_refused(tmp_path: Path) -> None:
    """``max_position_embeddings: 0`` was read as 'no limit' (the context check skipped); a
    stated limit must be a positive length; null is vLLM's assumed 2048 (no length found),
    absent the config class's default (the next test)."""
    data = _shipped_json("llama-3.1-8b") | {"max_position_embeddings": 0}
    with pytest.raises(ConfigError, match=r"'max_position_embeddings' must be an integer >= 1, "
                                          r"got 0"):
        load_model(str(_write(tmp_path, data)))
    data["max_position_embeddings"] = None
    assert load_model(str(_write(tmp_path, data))).max_position_embeddings == 2048


def test_nested_field_is_named(tmp_path: Path) -> None:
    data = _shipped_json("llama-4-scout")
    del data["text_config"]["num_local_experts"]
    with pytest.raises(ConfigError, match=r"'text_config\.num_local_experts'"):
        load_model(str(_write(tmp_path, data)))


def test_bad_layer_types_length(tmp_path: Path) -> None:
    data = _shipped_json("gpt-oss-20b")
    data["layer_types"] = data["layer_types"][:-1]
    with pytest.raises(ConfigError, match="'layer_types'.*list of 24"):
        load_model(str(_write(tmp_path, data)))


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    assert str(path) in _one_line(exc)


def test_unknown_shipped_name_lists_names() -> None:
    with pytest.raises(ConfigError) as exc:
        load_model("llama-9")
    msg = _one_line(exc)
    assert "'llama-9'" in msg and "llama-3.1-70b" in msg and "switch-c-2048" not in msg


def test_torch_dtype_must_name_a_torch_dtype_and_its_absence_is_said(tmp_path):
    """``torch_dtype: "banana"`` is refused naming the field and the valid names; a config
    without one loads with ``native_dtype`` empty, and the plan's weights line says a 16-bit
    checkpoint was assumed rather than quoting a dtype the config never stated."""
    from typer.testing import CliRunner

    from learn_to_shard.cli import app

    data = json.loads(resources.files("learn_to_shard").joinpath(
        "data", "models", "qwen3-8b.json").read_text())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**data, "torch_dtype": "banana"}))
    with pytest.raises(ConfigError, match="field 'torch_dtype' is 'banana'; expected a torch "
                                          "dtype name: .*bfloat16"):
        load_model(str(bad))
    plain = {k: v for k, v in data.items() if k not in ("torch_dtype", "dtype")}
    none = tmp_path / "none.json"
    none.write_text(json.dumps(plain))
    assert load_model(str(none)).native_dtype == ""
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({**plain, "torch_dtype": "torch.float16"}))
    assert load_model(str(ok)).native_dtype == "float16"
    r = CliRunner().invoke(app, ["plan", "--model", str(none), "--cluster", "h100-sxm:1",
                                 "--phase", "serve", "--isl", "1000", "--osl", "200", "-q"])
    assert r.exit_code == 0, r.output
    assert "the config states no torch_dtype (or auto): a 16-bit checkpoint assumed" in \
        " ".join(r.stdout.split())
    auto = tmp_path / "auto.json"
    auto.write_text(json.dumps({**plain, "torch_dtype": "auto"}))
    assert load_model(str(auto)).native_dtype == ""
    f8 = tmp_path / "f8.json"
    f8.write_text(json.dumps({**plain, "torch_dtype": "float8_e4m3fn"}))
    r = CliRunner().invoke(app, ["plan", "--model", str(f8), "--cluster", "h100-sxm:1",
                                 "--phase", "serve", "--isl", "1000", "--osl", "200", "-q"])
    assert "torch_dtype float8_e4m3fn without a quantization config: priced as a 16-bit" \
        in " ".join(r.stdout.split())


@pytest.mark.parametrize(("shipped", "positions"), [
    ("llama-3.1-8b", 2048), ("qwen2.5-7b-instruct", 32768), ("qwen3-32b", 32768),
    ("falcon-7b-instruct", 2048)])
def test_a_config_without_max_positions_gets_its_config_class_default(tmp_path, shipped,
                                                                      positions):
    """A config.json that leaves max_position_embeddings out gets what transformers' config
    class gives it (the engines read it through transformers), not an unbounded context:
    a top-level llama config planned a million-token context and exported
    --max-model-len 501000, where LlamaConfig's default is 2048. Remote-code families must
    state the field."""
    from learn_to_shard.model.hf_config import TRANSFORMERS_MAX_POSITIONS, _shipped_files

    data = json.loads(_shipped_files()[shipped].read_text())
    data.pop("max_position_embeddings", None)
    m = load_model(str(_write(tmp_path, data)))
    assert m.max_position_embeddings == positions
    assert TRANSFORMERS_MAX_POSITIONS[data["model_type"]][0] == positions
    kimi = json.loads(_shipped_files()["kimi-k2"].read_text())
    kimi.pop("max_position_embeddings")
    with pytest.raises(ConfigError, match=r"missing required field 'max_position_embeddings' "
                                          r"\(the context length in tokens: the kimi_k2"):
        load_model(str(_write(tmp_path, kimi, "kimi.json")))
    from typer.testing import CliRunner

    from learn_to_shard.cli import app
    r = CliRunner().invoke(app, ["plan", "--model", str(_write(tmp_path, data, "m.json")),
                                 "--cluster", "h100-sxm:8", "--context", "1000000"])
    assert r.exit_code == 2 and str(positions) in r.output.replace(",", "")
    assert "config class's default: the config leaves max_position_embeddings out" in \
        " ".join(r.output.split())


def test_a_deepseek_config_with_moe_fields_but_no_expert_count_is_refused(tmp_path):
    """A DeepSeek-V3 config without ``n_routed_experts`` (or spelling it ``num_experts``)
    but with its other MoE fields planned as a dense 37B model, silently; it is refused,
    naming the field and the MoE fields given without it."""
    data = json.loads(resources.files("learn_to_shard").joinpath(
        "data", "models", "deepseek-v3.json").read_text())
    data.pop("n_routed_experts")
    for extra in ({}, {"num_experts": 256}):
        path = tmp_path / f"ds{len(extra)}.json"
        path.write_text(json.dumps(data | extra))
        with pytest.raises(ConfigError, match="missing required field 'n_routed_experts' "
                                              "\\(the routed-expert count; num_experts_per_tok"):
            load_model(str(path))
