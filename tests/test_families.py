"""Model families beyond Llama/Qwen3/Mixtral/DeepSeek/gpt-oss: one family-specific rule each,
read from the shipped real configs (provenance in ``data/models/SOURCES.md``; the parameter
counts are checked against the published figures in ``tests/test_model.py``)."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from learn_to_shard.cost.shapes import OpShapes, kv_cache_bytes_per_token
from learn_to_shard.errors import ConfigError, UnsupportedModelError
from learn_to_shard.model import count_params, load_model
from learn_to_shard.model.params import (
    attention_params,
    expert_params,
    layer_norm_params,
    router_params,
    shared_expert_params,
)


def _shipped_json(name: str) -> dict[str, Any]:
    text = (resources.files("learn_to_shard") / "data" / "models" / f"{name}.json").read_text()
    return json.loads(text)

def _load_inline(tmp_path: Path, cfg: dict[str, Any]) -> Any:
    """Load a config written inline (the families' tests: transcribed hub configs)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return load_model(str(path))



def _write(tmp_path: Path, data: dict[str, Any], name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_qwen2_qkv_bias_is_counted() -> None:
    """Qwen2/2.5: q/k/v carry biases, o_proj does not (HF Qwen2Attention)."""
    spec = load_model("qwen2.5-7b-instruct")
    a = spec.attention
    assert a.qkv_bias and not a.o_bias
    h, q, kv = 3584, 28 * 128, 4 * 128
    assert attention_params(spec) == h * (q + 2 * kv) + q * h + (q + 2 * kv)


def test_mistral_head_dim_is_not_hidden_over_heads() -> None:
    """Mistral-Nemo: head_dim 128 although hidden / heads = 160; q_proj is 5120 x 4096."""
    spec = load_model("mistral-nemo-instruct-2407")
    assert spec.hidden_size // spec.attention.num_heads == 160
    assert spec.attention.head_dim == 128
    assert attention_params(spec) == 5120 * (4096 + 2 * 8 * 128) + 4096 * 5120
    assert all(layer.window is None for layer in spec.layers)   # sliding_window null


def test_mistral_sliding_window_applies_to_every_layer(tmp_path: Path) -> None:
    """HF MistralAttention: an int sliding_window limits every layer (Mistral-7B: 4096)."""
    data = _shipped_json("mistral-nemo-instruct-2407") | {"sliding_window": 4096}
    assert {layer.window for layer in load_model(_write(tmp_path, data)).layers} == {4096}


@pytest.mark.parametrize("name", ["qwen2.5-7b-instruct", "mistral-nemo-instruct-2407"])
def test_llama_shaped_families_share_the_llama_builder(tmp_path: Path, name: str) -> None:
    """Relabelled as ``llama``, the same config gives the same spec except for the family's
    one flag (Qwen2's q/k/v bias): one code path, not a copy."""
    data = _shipped_json(name)
    own = load_model(name)
    as_llama = load_model(_write(tmp_path, data | {"model_type": "llama",
                                                   "attention_bias": own.attention.qkv_bias}))
    same_attention = dataclasses.replace(own.attention, o_bias=as_llama.attention.o_bias)
    assert as_llama.attention == same_attention
    assert as_llama.layers == own.layers
    o_bias = own.hidden_size if as_llama.attention.o_bias else 0   # Llama biases o_proj too
    assert count_params(as_llama).total - count_params(own).total == o_bias * own.num_layers


def test_deepseek_v32_counts_its_lightning_indexer() -> None:
    """DeepSeek-V3.2 = V3 shape + indexer (wq_b, wk, k_norm, weights_proj) per layer; its
    sparse attention keeps index_topk keys; its FP8 block checkpoint plans at fp8."""
    v32, v3 = load_model("deepseek-v3.2"), load_model("deepseek-v3")
    per_layer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert v32.attention.indexer_params == per_layer
    assert attention_params(v32) - attention_params(v3) == per_layer
    assert count_params(v32).total - count_params(v3).total == 61 * per_layer
    assert v32.attention.sparse_topk == 2048
    assert v32.weight_block_size == (128, 128) and v32.checkpoint_dtype == "fp8"


def test_glm5_is_read_by_the_deepseek_builder(tmp_path: Path) -> None:
    """GLM-5 (glm_moe_dsa) has DeepSeek-V3.2's layout (MLA 192+64 / 256, indexer, 3 dense
    layers then MoE): relabelled deepseek_v32 it gives the same spec."""
    glm = load_model("glm-5")
    relabelled = load_model(_write(tmp_path, _shipped_json("glm-5")
                                   | {"model_type": "deepseek_v32"}))
    assert relabelled.attention == glm.attention and relabelled.layers == glm.layers
    assert relabelled.moe == glm.moe
    assert glm.attention.head_dim == 256 and glm.attention.indexer_params > 0
    assert glm.num_layers - glm.num_moe_layers == 3


def test_minimax_m2_full_width_qk_norm_and_biased_router() -> None:
    """MiniMax-M2: q/k RMSNorm over all heads (qk_norm_type per_layer), sigmoid router with a
    correction bias, every layer MoE, FP8 128x128 blocks (no torch_dtype: fp8 checkpoint)."""
    spec = load_model("minimax-m2.5")
    assert spec.attention.qk_norm_full_width
    assert layer_norm_params(spec) == 2 * 3072 + (48 + 8) * 128
    assert spec.moe is not None and spec.moe.router_bias and spec.moe.num_experts == 256
    assert spec.num_moe_layers == spec.num_layers == 62
    assert spec.weight_block_size == (128, 128) and spec.checkpoint_dtype == "fp8"


def test_vision_language_wrapper_reads_text_config() -> None:
    """Qwen3-VL: the language model comes from text_config (qwen3_vl_text -> the Qwen3
    builder, q/k norm); the vision tower is estimated (27 blocks of a 1152-wide ViT, 0.41B,
    its 2,304 learned positions and four patch mergers of 4,608 → 5,120, one per deepstack
    layer and the last: 0.60B) and counted in the total and in memory (split by TP), not in
    time."""
    vl = load_model("qwen3-vl-32b-instruct")
    assert vl.wrapper == "qwen3_vl" and vl.attention.qk_norm
    assert (vl.hidden_size, vl.num_layers, vl.dense_intermediate_size) == (5120, 64, 25600)
    counts = count_params(vl)
    assert counts.vision == pytest.approx(0.595e9, rel=0.01)
    # the same text model as Qwen3-32B, plus the vision tower
    assert counts.total == count_params(load_model("qwen3-32b")).total + counts.vision
    moe = load_model("qwen3-vl-235b-a22b-instruct")
    assert moe.wrapper == "qwen3_vl_moe" and moe.num_moe_layers == 94


def test_wrapper_with_llm_config_and_language_config(tmp_path: Path) -> None:
    """InternVL's llm_config and DeepSeek-VL2's language_config are read like text_config."""
    text = _shipped_json("qwen2.5-7b-instruct")
    for key, wrapper in (("llm_config", "internvl_chat"), ("language_config", "llava")):
        spec = load_model(_write(tmp_path, {"model_type": wrapper, "architectures": ["X"],
                                            key: text, "vision_config": {"hidden_size": 1024,
                                                                         "num_hidden_layers": 24,
                                                                         "intermediate_size": 4096,
                                                                         "patch_size": 14}}))
        assert spec.wrapper == wrapper and spec.attention.qkv_bias
        assert count_params(spec).vision > 0


def test_hybrid_linear_attention_is_refused_naming_the_layer_type() -> None:
    """Qwen3.5: 48 Gated-DeltaNet layers keep a recurrent state, not a KV cache."""
    with pytest.raises(UnsupportedModelError) as exc:
        load_model("qwen3.5-27b")
    msg = str(exc.value)
    assert "\n" not in msg and "linear_attention (Gated DeltaNet)" in msg
    assert "48 of 64 layers" in msg


@pytest.mark.parametrize("model_type, layer", [("jamba", "mamba"), ("qwen3_next",
                                                                     "linear_attention")])
def test_hybrid_families_are_refused(tmp_path: Path, model_type: str, layer: str) -> None:
    data = _shipped_json("mixtral-8x7b") | {"model_type": model_type}
    with pytest.raises(UnsupportedModelError) as exc:
        load_model(_write(tmp_path, data))
    assert layer in str(exc.value) and "recurrent state" in str(exc.value)


def test_l2s_models_lists_every_family() -> None:
    from typer.testing import CliRunner

    from learn_to_shard.cli import app

    out = CliRunner().invoke(app, ["models"]).stdout.split()
    for name in ("qwen2.5-7b-instruct", "mistral-nemo-instruct-2407", "deepseek-v3.2",
                 "minimax-m2.5", "glm-5", "qwen3-vl-32b-instruct", "qwen3-30b-a3b-fp8",
                 "qwen3-235b-a22b-nvfp4", "llama-3.1-70b-instruct-fp8", "mixtral-8x7b",
                 "deepseek-v2-lite", "gpt-oss-120b", "llama-4-scout", "gemma-2-9b-it",
                 "gemma-3-12b-it", "phi-3-mini-4k-instruct", "qwen2-57b-a14b", "glm-4.5-air",
                 "falcon-7b-instruct"):
        assert name in out
    assert "qwen3.5-27b" not in out          # shipped only to show the hybrid refusal


# --- Gemma-2/3, Phi-3, Qwen2-MoE, GLM-4.5, Falcon (real configs, SOURCES.md) ---------------


def test_gemma2_head_dim_alternating_windows_softcap_and_tied_head() -> None:
    """Gemma-2-9B: head_dim 256 although hidden 3584 / 16 heads = 224; even layers slide over
    4096 tokens, odd layers are global (HF Gemma2Config); four norms per layer; the LM head
    is the embedding; soft caps 50 (attention) and 30 (logits)."""
    spec = load_model("gemma-2-9b-it")
    a = spec.attention
    assert spec.hidden_size // a.num_heads == 224 and a.head_dim == 256
    assert attention_params(spec) == 3584 * (4096 + 2 * 8 * 256) + 4096 * 3584
    assert [layer.window for layer in spec.layers] == [4096, None] * 21
    assert layer_norm_params(spec) == 4 * 3584
    assert spec.tie_word_embeddings and count_params(spec).lm_head == 0
    assert a.logit_softcap == 50.0 and spec.final_logit_softcap == 30.0


def test_gemma2_sliding_layers_hold_at_most_their_window_of_kv() -> None:
    """At 8192 tokens the 21 sliding layers keep 4096 tokens each: 3/4 of full-attention KV
    (the same window path as gpt-oss and Llama-4 chunked attention)."""
    spec = load_model("gemma-2-9b-it")
    full = kv_cache_bytes_per_token(spec, 2.0)
    assert kv_cache_bytes_per_token(spec, 2.0, context=8192) == pytest.approx(0.75 * full)
    assert kv_cache_bytes_per_token(spec, 2.0, context=4096) == pytest.approx(full)


def test_gemma3_text_config_wrapper_and_five_to_one_pattern() -> None:
    """Gemma-3-12B: the language model is ``text_config`` (gemma3_text); every 6th layer is
    global, the others slide over 1024 tokens (sliding_window_pattern 6); per-head q/k norms;
    the SigLIP tower is counted in the total only."""
    spec = load_model("gemma-3-12b-it")
    assert spec.wrapper == "gemma3" and spec.hidden_size == 3840
    globals_ = [i for i, layer in enumerate(spec.layers) if layer.window is None]
    assert globals_ == list(range(5, 48, 6))
    assert {layer.window for layer in spec.layers} == {1024, None}
    assert layer_norm_params(spec) == 4 * 3840 + 2 * 256
    assert spec.attention.logit_softcap is None
    counts = count_params(spec)
    assert counts.vision > 0 and counts.active == counts.total - counts.vision


def test_gemma3_hub_configs_trimmed_to_what_differs_from_transformers_defaults(
        tmp_path: Path) -> None:
    """The hub's Gemma-3 configs leave out what Gemma3TextConfig defaults
    (huggingface/transformers@008f5c8c configuration_gemma3.py): gemma-3-27b-it's text_config
    has no vocab_size (262,208) or max_position_embeddings (131,072), gemma-3-4b-it's no head
    counts either (8 heads, 4 KV heads of 256). They load with those defaults (they were
    refused, 'missing required field text_config.vocab_size'): 27B's language model is
    ~27.0B parameters (27.4B published with its 0.4B SigLIP tower), 52 of 62 layers slide over
    1,024 tokens, and a context beyond 131,072 is refused."""
    vision = {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
              "model_type": "siglip_vision_model", "num_attention_heads": 16,
              "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False}

    def hub(name: str, text: dict[str, Any]) -> Any:
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps({
            "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
            "mm_tokens_per_image": 256, "torch_dtype": "bfloat16", "vision_config": vision,
            "text_config": {"model_type": "gemma3_text", "sliding_window": 1024,
                            "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, **text}}))
        return load_model(str(d / "config.json"))

    big = hub("gemma-3-27b-it", {"head_dim": 128, "hidden_size": 5376,
                                 "intermediate_size": 21504, "num_attention_heads": 32,
                                 "num_hidden_layers": 62, "num_key_value_heads": 16,
                                 "query_pre_attn_scalar": 168})
    assert big.vocab_size == 262_208 and big.max_position_embeddings == 131_072
    assert sum(layer.window == 1024 for layer in big.layers) == 52
    counts = count_params(big)
    assert 26.5e9 < counts.total - counts.vision < 27.5e9
    small = hub("gemma-3-4b-it", {"hidden_size": 2560, "intermediate_size": 10240,
                                  "num_hidden_layers": 34})
    assert (small.attention.num_heads, small.attention.num_kv_heads,
            small.attention.head_dim) == (8, 4, 256)
    assert 3.6e9 < count_params(small).total < 4.6e9
    # an explicit null is kept (no window on any layer), not replaced by the 4096 default
    nowin = hub("gemma-3-nowindow", {"hidden_size": 2560, "intermediate_size": 10240,
                                     "num_hidden_layers": 34, "sliding_window": None})
    assert {layer.window for layer in nowin.layers} == {None}
    from typer.testing import CliRunner

    from learn_to_shard.cli import app

    r = CliRunner().invoke(app, ["plan", "--model", str(tmp_path / "gemma-3-27b-it" /
                                                       "config.json"),
                                 "--cluster", "h100-sxm:8", "--phase", "serve", "--isl",
                                 "200000", "--osl", "100", "-q"])
    assert r.exit_code == 2 and "131072" in r.output.replace(",", ""), r.output


def test_llama4_empty_no_rope_layers_means_the_default_pattern(tmp_path: Path) -> None:
    """RedHatAI's Scout FP8 config (tests/data/README.md) writes ``no_rope_layers: []``; HF
    Llama4TextConfig reads an empty list as the default (NoPE every 4th layer), so its layers
    are those of the shipped Scout."""
    src = Path(__file__).parent / "data" / "llama-4-scout-17b-16e-instruct-fp8-dynamic"
    data = json.loads((src / "config.json").read_text())
    assert data["text_config"]["no_rope_layers"] == []
    del data["quantization_config"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    spec = load_model(str(path))
    assert spec.layers == load_model("llama-4-scout").layers
    assert [layer.window for layer in spec.layers][:4] == [8192, 8192, 8192, None]


def test_phi35_moe_is_the_mixtral_layout_with_attention_biases() -> None:
    """Phi-3.5-MoE (``phimoe``): every layer routes to 2 of 16 SiLU-gated experts of width
    6400 (HF PhimoeSparseMoeBlock, as Mixtral's); q/k/v/o carry biases (attention_bias); the
    LM head is its own matrix (tie_word_embeddings false); GQA 32 / 8 heads of 128."""
    spec = load_model("phi-3.5-moe-instruct")
    assert spec.moe is not None and (spec.moe.num_experts, spec.moe.top_k) == (16, 2)
    assert spec.num_moe_layers == spec.num_layers == 32 and not spec.has_dense_ffn
    a = spec.attention
    assert a.qkv_bias and a.o_bias and (a.num_heads, a.num_kv_heads, a.head_dim) == (32, 8, 128)
    weights = 4096 * (4096 + 2 * 1024) + 4096 * 4096
    biases = 4096 + 2 * 1024 + 4096
    assert attention_params(spec) == weights + biases
    counts = count_params(spec)
    assert counts.routed_experts == 32 * 16 * 3 * 4096 * 6400
    assert counts.lm_head == counts.embedding == 32064 * 4096


def test_phi3_fused_projections_split_into_q_k_v_and_gate_up(tmp_path: Path) -> None:
    """Phi-3: ``qkv_proj`` (3072 -> 3 x 32 x 96) and ``gate_up_proj`` (3072 -> 2 x 8192) are
    the Llama q/k/v and gate/up matrices side by side; the cost model splits them per head
    and per column under TP like Llama's. Relabelled as ``mistral`` (the same builder with
    sliding_window on every layer), the config gives the same spec."""
    spec = load_model("phi-3-mini-4k-instruct")
    shapes = OpShapes.of(spec)
    assert shapes.qkv_out == 3 * 32 * 96 and shapes.qkv_params == 3072 * 9216
    assert shapes.dense_up_params == 3072 * 2 * 8192 and shapes.dense_down_params == 8192 * 3072
    assert {layer.window for layer in spec.layers} == {2047}
    as_mistral = load_model(_write(tmp_path, _shipped_json("phi-3-mini-4k-instruct")
                                   | {"model_type": "mistral"}))
    assert as_mistral.attention == spec.attention and as_mistral.layers == spec.layers
    assert count_params(as_mistral) == count_params(spec)


def test_qwen2_moe_shared_expert_has_its_own_width_and_a_sigmoid_gate() -> None:
    """Qwen2-57B-A14B: 64 routed experts of 2560 plus one shared expert of 20480 whose output
    is scaled by sigmoid(H x 1 gate); q/k/v biases (HF Qwen2MoeSparseMoeBlock)."""
    spec = load_model("qwen2-57b-a14b")
    moe = spec.moe
    assert moe is not None and moe.expert_intermediate_size == 2560
    assert moe.num_shared_experts == 1 and moe.shared_intermediate_size == 20480
    assert moe.shared_expert_gate
    assert shared_expert_params(spec) == 3 * 3584 * 20480
    assert router_params(spec) == 3584 * 64 + 3584
    assert spec.attention.qkv_bias and not spec.attention.o_bias
    assert spec.num_moe_layers == spec.num_layers == 28


def test_glm45_first_dense_layer_then_moe_with_gqa_attention() -> None:
    """GLM-4.5-Air: layer 0 dense (width 10944), then 45 MoE layers of 128 experts + 1
    shared (width 1408), router with e_score_correction_bias; GQA 96/8 heads of 128 with
    q/k/v biases and an unbiased o_proj (HF Glm4MoeAttention)."""
    spec = load_model("glm-4.5-air")
    assert [layer.is_moe for layer in spec.layers] == [False] + [True] * 45
    assert spec.dense_intermediate_size == 10944
    a = spec.attention
    assert (a.num_heads, a.num_kv_heads, a.head_dim) == (96, 8, 128)
    assert a.qkv_bias and not a.o_bias
    q, kv = 96 * 128, 8 * 128
    assert attention_params(spec) == 4096 * (q + 2 * kv) + q * 4096 + (q + 2 * kv)
    assert router_params(spec) == 4096 * 128 + 128
    assert shared_expert_params(spec) == expert_params(spec) == 3 * 4096 * 1408


def test_falcon_multi_query_and_new_decoder_architecture(tmp_path: Path) -> None:
    """Falcon-7B: ``multi_query`` on the old architecture is MQA (1 KV head) although the
    config says num_kv_heads 71 (HF FalconAttention ignores it there); fused
    query_key_value = 4544 + 2 x 64 wide; parallel attention; non-gated 4H MLP; tied head.
    With ``new_decoder_architecture`` (Falcon-40B/180B) ``num_kv_heads`` is read (GQA). Its
    config states no ``max_position_embeddings``: FalconConfig's 2,048, which the engines
    read, limits requests (it was unlimited); a stated one is kept."""
    spec = load_model("falcon-7b-instruct")
    assert "max_position_embeddings" not in _shipped_json("falcon-7b-instruct")
    assert spec.max_position_embeddings == 2048
    stated = _shipped_json("falcon-7b-instruct") | {"max_position_embeddings": 8192}
    assert load_model(_write(tmp_path, stated)).max_position_embeddings == 8192
    a = spec.attention
    assert (a.num_heads, a.num_kv_heads, a.head_dim) == (71, 1, 64)
    assert OpShapes.of(spec).qkv_out == 4544 + 2 * 64
    assert spec.parallel_attn and not spec.gated_mlp and spec.dense_intermediate_size == 4 * 4544
    assert spec.tie_word_embeddings
    data = _shipped_json("falcon-7b-instruct") | {"new_decoder_architecture": True,
                                                  "num_kv_heads": 71}
    assert load_model(_write(tmp_path, data)).attention.num_kv_heads == 71


def test_gemma3_wrapper_level_untied_embeddings_are_read(tmp_path: Path) -> None:
    """A top-level ``tie_word_embeddings: false`` of the gemma3 wrapper unties the head."""
    data = _shipped_json("gemma-3-12b-it") | {"tie_word_embeddings": False}
    spec = load_model(_write(tmp_path, data))
    assert not spec.tie_word_embeddings
    assert count_params(spec).lm_head == 3840 * 262208


@pytest.mark.parametrize("rope, field", [
    ({"rope_type": "yarn", "factor": "4", "original_max_position_embeddings": 32768},
     "rope_scaling.factor"),
    ({"rope_type": "yarn", "factor": 0, "original_max_position_embeddings": 32768},
     "rope_scaling.factor"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768.5},
     "rope_scaling.original_max_position_embeddings"),
    ("yarn", "rope_scaling"),
])
def test_a_yarn_value_of_the_wrong_kind_is_named(tmp_path: Path, rope: dict | str,
                                                 field: str) -> None:
    """YaRN sets the context the plan admits: a factor or original length of the wrong kind
    is a ConfigError naming it (it was ignored, and the context silently not extended)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_shipped_json("qwen3-32b") | {"rope_scaling": rope}))
    with pytest.raises(ConfigError, match=f"field '{field}' must be"):
        load_model(str(path))


def test_yarn_rope_scaling_extends_the_context(tmp_path: Path) -> None:
    """Qwen2.5 / Qwen3 model cards add a YaRN ``rope_scaling`` (factor 4 over 32,768
    positions) for 131,072 tokens: the planner reads the context as
    original_max_position_embeddings × factor (a 60,000-token prompt plans, where it was
    refused at max_position_embeddings 40,960); another scaling type keeps the config's
    positions; the shipped DeepSeek-V3 (YaRN 40 × 4,096) keeps its 163,840. The pinned vLLM
    and SGLang take max_position_embeddings as written for YaRN and refuse a longer limit
    unless told: the exports set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 /
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 where the requests need it, and only
    there; TensorRT-LLM lowers its length limit to the config's, so its export is NOT
    EXPRESSIBLE until the config says more."""
    from typer.testing import CliRunner

    from learn_to_shard.cli import app

    base = _shipped_json("qwen3-32b")
    for name, rope, positions in (
            ("yarn", {"rope_type": "yarn", "factor": 4.0,
                      "original_max_position_embeddings": 32768}, 131072),
            ("yarn-old-key", {"type": "yarn", "factor": 4.0,
                              "original_max_position_embeddings": 32768}, 131072),
            ("linear", {"rope_type": "linear", "factor": 4.0}, 40960),
            ("shrink", {"rope_type": "yarn", "factor": 0.5,
                        "original_max_position_embeddings": 32768}, 16384)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(base | {"rope_scaling": rope}))
        assert load_model(str(path)).max_position_embeddings == positions, name
    # transformers v5 keeps it in rope_parameters
    path = tmp_path / "v5.json"
    path.write_text(json.dumps(base | {"rope_scaling": None, "rope_parameters": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
        "rope_theta": 1e6}}))
    assert load_model(str(path)).max_position_embeddings == 131072
    assert load_model("deepseek-v3").max_position_embeddings == 163840
    r = CliRunner().invoke(app, ["plan", "--model", str(tmp_path / "yarn.json"), "--cluster",
                                 "h200:8", "--phase", "serve", "--isl", "60000", "--osl",
                                 "1000", "-q"])
    assert r.exit_code == 0, r.output
    assert load_model(str(tmp_path / "yarn.json")).config_max_positions == 40960
    assert load_model("deepseek-v3").config_max_positions == 0
    base_cmd = ["plan", "--model", str(tmp_path / "yarn.json"), "--cluster", "h200:8",
                "--phase", "serve", "--osl", "1000", "-q", "--export"]
    for engine, var in (("vllm", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
                        ("sglang", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")):
        long = CliRunner().invoke(app, [*base_cmd, engine, "--isl", "60000"])
        assert long.exit_code == 0, long.output
        launch = [ln for ln in long.stdout.splitlines() if ln and not ln.startswith("#")]
        assert any(var in ln for ln in launch), long.stdout
        assert "YaRN rope_scaling extends to 131072" in long.stdout
        short = CliRunner().invoke(app, [*base_cmd, engine, "--isl", "30000"])
        assert short.exit_code == 0 and var not in short.stdout, short.stdout
    over = CliRunner().invoke(app, [*base_cmd[:-1], "--isl", "140000"])
    assert over.exit_code == 2 and "exceeds the 131072 positions yarn's YaRN rope_scaling " \
        "extends its max_position_embeddings 40960 to" in over.output, over.output
    trt = CliRunner().invoke(app, [*base_cmd, "trtllm", "--isl", "60000"])
    assert trt.exit_code == 0 and "# NOT EXPRESSIBLE: requests of 61000 tokens" in trt.stdout
    assert "lowers --max_seq_len to the length it infers from the config (40960)" in \
        " ".join(trt.stdout.split())
    r = CliRunner().invoke(app, ["plan", "--model", str(tmp_path / "linear.json"), "--cluster",
                                 "h200:8", "--phase", "serve", "--isl", "60000", "--osl",
                                 "1000", "-q"])
    assert r.exit_code == 2, r.output


def test_granite_is_the_llama_decoder_with_scalar_multipliers(tmp_path: Path) -> None:
    """IBM Granite 3.x 8B (``granite``, HF GraniteForCausalLM: Llama's modules plus
    embedding / attention / residual multipliers and logits scaling, which change no shape):
    its config (hidden 4096, 40 layers, 32 / 8 heads, FFN 12,800, vocabulary 49,159, tied;
    as a public parameter-shape dump lists it: q (4096, 4096), k / v (1024, 4096), gate / up
    (12800, 4096)) is 8.17B parameters, as IBM publishes, and KV of 40 × 8 × 128 × 2 × 2
    bytes per token; it was refused as an unknown model_type."""
    cfg = {"architectures": ["GraniteForCausalLM"], "attention_bias": False,
           "attention_multiplier": 0.0078125, "embedding_multiplier": 12.0,
           "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12800,
           "logits_scaling": 16.0, "max_position_embeddings": 131072, "mlp_bias": False,
           "model_type": "granite", "num_attention_heads": 32, "num_hidden_layers": 40,
           "num_key_value_heads": 8, "residual_multiplier": 0.22, "rms_norm_eps": 1e-05,
           "rope_scaling": None, "rope_theta": 10000000.0, "tie_word_embeddings": True,
           "torch_dtype": "bfloat16", "vocab_size": 49159}
    spec = _load_inline(tmp_path, cfg)
    assert spec.tie_word_embeddings and spec.attention.num_kv_heads == 8
    assert count_params(spec).total == pytest.approx(8.17e9, rel=0.01)
    assert kv_cache_bytes_per_token(spec, 2) == 40 * 8 * 128 * 2 * 2


def test_gemma_1_is_the_llama_decoder_with_a_256_head_dim_and_tied_embeddings(
        tmp_path: Path) -> None:
    """Gemma 1 (``gemma``, HF GemmaForCausalLM): Gemma-2B's config (18 layers, hidden 2048,
    8 heads and 1 KV head of 256, GeGLU FFN 16,384, vocabulary 256,000; GemmaConfig ties the
    embeddings by default) is 2,506,172,416 parameters, the count a public table of hub
    models gives for google/gemma-2b; it was refused as an unknown model_type."""
    cfg = {"architectures": ["GemmaForCausalLM"], "bos_token_id": 2, "eos_token_id": 1,
           "head_dim": 256, "hidden_act": "gelu", "hidden_size": 2048,
           "intermediate_size": 16384, "max_position_embeddings": 8192, "model_type": "gemma",
           "num_attention_heads": 8, "num_hidden_layers": 18, "num_key_value_heads": 1,
           "pad_token_id": 0, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
           "torch_dtype": "bfloat16", "vocab_size": 256000}
    spec = _load_inline(tmp_path, cfg)
    assert spec.tie_word_embeddings and spec.attention.head_dim == 256
    assert count_params(spec).total == pytest.approx(2_506_172_416, rel=0.001)


def test_olmo2_is_the_llama_decoder_with_full_width_qk_norms(tmp_path: Path) -> None:
    """OLMo 2 (``olmo2``, HF Olmo2ForCausalLM): allenai/OLMo-2-1124-7B's config (as mirrored in
    a public test fixture: hidden 4096, 32 layers of 32 heads, FFN 11,008, vocabulary
    100,352, untied) is 7.30B parameters, as AI2 publishes; its q/k RMSNorms span the whole
    q (4096) and k projections (a public weight dump: q_norm (hidden), k_norm (kv_hidden));
    it was refused as an unknown model_type."""
    cfg = {"architectures": ["Olmo2ForCausalLM"], "attention_bias": False,
           "attention_dropout": 0.0, "eos_token_id": 100257, "hidden_act": "silu",
           "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008,
           "max_position_embeddings": 4096, "model_type": "olmo2", "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 32, "pad_token_id": 100277,
           "rms_norm_eps": 1e-06, "rope_theta": 500000.0, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 100352}
    spec = _load_inline(tmp_path, cfg)
    assert spec.attention.qk_norm and spec.attention.qk_norm_full_width
    assert not spec.tie_word_embeddings
    assert count_params(spec).total == pytest.approx(7.30e9, rel=0.005)


def test_glm4_0414_is_the_llama_decoder_with_sandwich_norms_and_qkv_biases(
        tmp_path: Path) -> None:
    """GLM-4-0414 (``glm4``, HF Glm4ForCausalLM): GLM-4-9B-0414's shape (40 layers, hidden
    4096, 32 heads and 2 KV heads of 128, FFN 13,696 in a fused gate/up, vocabulary 151,552,
    untied, q/k/v biases; transcribed from its hub config, not compared byte for byte) is
    9.40B parameters (the model card's 9.4B); four norms per layer,
    no o_proj bias, KV of 40 × 2 × 128 × 2 × 2 bytes a token; it was refused as an unknown
    model_type."""
    cfg = {"architectures": ["Glm4ForCausalLM"], "attention_bias": True, "head_dim": 128,
           "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 13696,
           "max_position_embeddings": 32768, "model_type": "glm4", "num_attention_heads": 32,
           "num_hidden_layers": 40, "num_key_value_heads": 2, "partial_rotary_factor": 0.5,
           "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16", "vocab_size": 151552}
    spec = _load_inline(tmp_path, cfg)
    assert spec.attention.qkv_bias and not spec.attention.o_bias and spec.post_norms
    assert count_params(spec).total == pytest.approx(9.40e9, rel=0.005)
    assert kv_cache_bytes_per_token(spec, 2) == 40 * 2 * 128 * 2 * 2


@pytest.mark.parametrize("cfg, published", [
    # internlm/internlm2_5-7b-chat (transcribed from its hub config): 7.74B
    ({"architectures": ["InternLM2ForCausalLM"], "auto_map": {
        "AutoConfig": "configuration_internlm2.InternLM2Config",
        "AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"},
      "bias": False, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
      "max_position_embeddings": 32768, "model_type": "internlm2", "num_attention_heads": 32,
      "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
      "rope_scaling": {"factor": 2.0, "type": "dynamic"}, "rope_theta": 1000000,
      "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 92544}, 7.74e9),
    # CohereForAI/c4ai-command-r-v01 (transcribed): 35B, tied embeddings
    ({"architectures": ["CohereForCausalLM"], "hidden_size": 8192,
      "intermediate_size": 22528, "logit_scale": 0.0625, "max_position_embeddings": 8192,
      "model_type": "cohere", "num_attention_heads": 64, "num_hidden_layers": 40,
      "num_key_value_heads": 64, "rope_theta": 8000000.0, "torch_dtype": "float16",
      "use_qk_norm": False, "vocab_size": 256000}, 35.0e9),
])
def test_internlm2_and_cohere_are_llama_shaped(tmp_path: Path, cfg: dict[str, Any],
                                                published: float) -> None:
    """InternLM2 (fused wqkv, w1/w3/w2: the Llama matrices) and Command-R (parallel attention
    and FFN: the same matrices, tied embeddings by default) load through the Llama builder
    at their published sizes; both were refused as unknown model_types."""
    spec = _load_inline(tmp_path, cfg)
    assert count_params(spec).total == pytest.approx(published, rel=0.01)
    assert spec.tie_word_embeddings is (cfg["model_type"] == "cohere")
    if cfg["model_type"] == "internlm2":       # bias: true biases wqkv and wo alike
        biased = _load_inline(tmp_path, cfg | {"bias": True}).attention
        assert biased.qkv_bias and biased.o_bias


@pytest.mark.parametrize("cfg, published", [
    # CohereLabs/c4ai-command-r7b-12-2024: 8.03B on its model card
    ({"architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2", "hidden_size": 4096,
      "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 8, "vocab_size": 256000, "max_position_embeddings": 132096,
      "sliding_window": 4096, "sliding_window_pattern": 4, "layer_norm_eps": 1e-05,
      "logit_scale": 0.25, "rope_theta": 50000.0, "use_qk_norm": False,
      "torch_dtype": "bfloat16"}, 8.03e9),
    # CohereLabs/c4ai-command-a-03-2025: 111B on its model card
    ({"architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2", "hidden_size": 12288,
      "intermediate_size": 36864, "num_hidden_layers": 64, "num_attention_heads": 96,
      "num_key_value_heads": 8, "vocab_size": 256000, "max_position_embeddings": 131072,
      "sliding_window": 4096, "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
      "torch_dtype": "bfloat16"}, 111e9),
])
def test_cohere2_has_three_windowed_layers_to_one_global(tmp_path: Path, cfg: dict[str, Any],
                                                         published: float) -> None:
    """Command-R7B and Command-A (``cohere2``, HF Cohere2ForCausalLM): Command-R's Llama
    matrices with tied embeddings, at their published sizes; layer i is global iff
    ``(i + 1) % sliding_window_pattern == 0`` (default 4) or as ``layer_types`` says, the
    others slide over ``sliding_window`` tokens (transformers' Cohere2Config builds
    ``layer_types`` that way); it was refused as an unknown model_type."""
    if "layer_types" in cfg:
        cfg = cfg | {"layer_types": cfg["layer_types"] * (cfg["num_hidden_layers"] // 4)}
    spec = _load_inline(tmp_path, cfg)
    assert count_params(spec).total == pytest.approx(published, rel=0.01)
    assert spec.tie_word_embeddings
    windows = [layer.window for layer in spec.layers]
    assert windows == [None if (i + 1) % 4 == 0 else 4096 for i in range(len(windows))]
    default = {k: v for k, v in cfg.items() if k not in ("sliding_window", "layer_types",
                                                          "sliding_window_pattern")}
    assert [layer.window for layer in _load_inline(tmp_path, default).layers] == windows
    # Cohere2Config's 8,192 positions where the config states none
    bare = {k: v for k, v in cfg.items() if k != "max_position_embeddings"}
    assert _load_inline(tmp_path, bare).max_position_embeddings == 8192


@pytest.mark.parametrize("cfg, published", [
    # nvidia/Minitron-4B-Base (the config TensorRT-LLM's tests carry as Nemotron_4_4B_CONFIG):
    # 4.19B
    ({"architectures": ["NemotronForCausalLM"], "hidden_act": "relu2", "hidden_size": 3072,
      "intermediate_size": 9216, "max_position_embeddings": 4096, "model_type": "nemotron",
      "num_attention_heads": 24, "num_hidden_layers": 32, "num_key_value_heads": 8,
      "norm_eps": 1e-05, "rope_theta": 10000, "partial_rotary_factor": 0.5,
      "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 256000,
      "kv_channels": 128}, 4.19e9),
    # nvidia/Nemotron-4-340B: hidden 18432, 96 layers, 96 / 8 heads, FFN 73728: 340B
    ({"architectures": ["NemotronForCausalLM"], "hidden_act": "relu2", "hidden_size": 18432,
      "intermediate_size": 73728, "model_type": "nemotron", "num_attention_heads": 96,
      "num_hidden_layers": 96, "num_key_value_heads": 8, "max_position_embeddings": 4096,
      "tie_word_embeddings": False, "vocab_size": 256000}, 340e9),
])
def test_nemotron_has_a_non_gated_squared_relu_ffn(tmp_path: Path, cfg: dict[str, Any],
                                                  published: float) -> None:
    """Nemotron-4 / Minitron (``nemotron``, HF NemotronForCausalLM): Llama's attention and an
    FFN of two matrices (up, squared ReLU, down; HF NemotronMLP), untied embeddings, at their
    published sizes (a gated FFN of three matrices would count Minitron-4B at 5.1B); it was
    refused as an unknown model_type."""
    spec = _load_inline(tmp_path, cfg)
    assert not spec.gated_mlp and not spec.tie_word_embeddings
    assert count_params(spec).total == pytest.approx(published, rel=0.01)
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    assert kv_cache_bytes_per_token(spec, 2) == \
        cfg["num_hidden_layers"] * 8 * (hidden // heads) * 2 * 2


def test_vision_towers_count_gated_ffns_and_projectors(tmp_path: Path) -> None:
    """Qwen2-VL's ViT (``embed_dim`` 1280, 32 blocks, ``mlp_ratio`` 4, its ``hidden_size``
    the merger's 3,584 output) is the ~675M parameters its paper gives (arXiv 2409.12191);
    Qwen2.5-VL's (SiLU: a gated FFN of three matrices, 3,420 wide) about the same; Pixtral in
    Mistral-Small-3.1 (1,024 wide, 24 gated blocks, 2D rotary positions, a 2 × 2 patch merger
    and a two-layer projector into 5,120) ~0.44B (the tower's memory:
    ``tests/test_cost_model.py -k vision``)."""
    text = _shipped_json("qwen2.5-7b-instruct")
    qwen2 = {**text, "model_type": "qwen2_vl",
             "architectures": ["Qwen2VLForConditionalGeneration"],
             "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4,
                                       "num_heads": 16, "in_chans": 3, "hidden_size": 3584,
                                       "patch_size": 14, "spatial_merge_size": 2,
                                       "temporal_patch_size": 2, "hidden_act": "quick_gelu"}}
    qwen25 = {**text, "model_type": "qwen2_5_vl", "architectures": [
        "Qwen2_5_VLForConditionalGeneration"], "vision_config": {
            "depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
            "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2,
            "temporal_patch_size": 2, "hidden_act": "silu", "in_chans": 3}}
    for cfg in (qwen2, qwen25):
        spec = load_model(_write(tmp_path, cfg))
        assert spec.vision_params == pytest.approx(675e6, rel=0.01), cfg["model_type"]
    mistral_text = {"model_type": "mistral", "hidden_size": 5120, "intermediate_size": 32768,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                    "num_hidden_layers": 40, "vocab_size": 131072,
                    "max_position_embeddings": 131072}
    pixtral = {"model_type": "mistral3", "architectures": ["Mistral3ForConditionalGeneration"],
               "spatial_merge_size": 2, "text_config": mistral_text, "vision_config": {
                   "model_type": "pixtral", "hidden_size": 1024, "intermediate_size": 4096,
                   "num_hidden_layers": 24, "num_attention_heads": 16, "patch_size": 14,
                   "image_size": 1540, "hidden_act": "silu", "num_channels": 3}}
    assert load_model(_write(tmp_path, pixtral)).vision_params == pytest.approx(0.44e9,
                                                                                rel=0.01)


def test_the_vision_estimate_matches_a_listed_qwen3_vl_size(tmp_path: Path) -> None:
    """Qwen3-VL-30B-A3B is Qwen3-30B-A3B (30.53B) with the Qwen3-VL vision tower merged into
    2,048: the estimate gives 31.07B, the figure listed for it (free2aitools.com/model/qwen/
    qwen3-vl-30b-a3b-instruct, SOURCES.md)."""
    cfg = _shipped_json("qwen3-vl-32b-instruct")
    cfg |= {"model_type": "qwen3_vl_moe", "architectures": [
        "Qwen3VLMoeForConditionalGeneration"],
        "text_config": _shipped_json("qwen3-30b-a3b") | {"model_type": "qwen3_vl_moe_text"},
        "vision_config": cfg["vision_config"] | {"out_hidden_size": 2048}}
    assert count_params(load_model(_write(tmp_path, cfg))).total == pytest.approx(31.07e9,
                                                                                 rel=0.001)


def test_llava_text_config_takes_llama_defaults(tmp_path: Path) -> None:
    """llava-hf/llava-1.5-7b-hf's ``text_config`` states only what differs from
    transformers' LlamaConfig (the LLaMA-7B shape: 4,096 wide, 32 layers and heads, FFN
    11,008): the planner fills the rest in as LlavaConfig does, and the model (Vicuna-7B
    with a 32,064-token vocabulary, CLIP ViT-L/14 at 336 and a two-layer projector) is
    ~7.06B; it was refused for a missing ``text_config.hidden_size``."""
    cfg = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
           "image_token_index": 32000, "projector_hidden_act": "gelu",
           "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
           "text_config": {"_name_or_path": "lmsys/vicuna-7b-v1.5",
                           "architectures": ["LlamaForCausalLM"],
                           "max_position_embeddings": 4096, "model_type": "llama",
                           "rms_norm_eps": 1e-05, "torch_dtype": "float16",
                           "vocab_size": 32064},
           "vision_config": {"hidden_size": 1024, "image_size": 336,
                             "intermediate_size": 4096, "model_type": "clip_vision_model",
                             "num_attention_heads": 16, "num_hidden_layers": 24,
                             "patch_size": 14, "projection_dim": 768, "vocab_size": 32000},
           "torch_dtype": "float16"}
    spec = load_model(_write(tmp_path, cfg))
    assert (spec.hidden_size, spec.num_layers, spec.dense_intermediate_size) == \
        (4096, 32, 11008)
    assert spec.attention.num_kv_heads == 32 and spec.max_position_embeddings == 4096
    assert count_params(spec).total == pytest.approx(7.06e9, rel=0.01)
    # a plain Llama config stays strict: the defaults are the wrapper's, not every config's
    bare = {k: v for k, v in _shipped_json("llama-3.1-8b").items() if k != "hidden_size"}
    with pytest.raises(ConfigError, match="hidden_size"):
        load_model(_write(tmp_path, bare))


def test_llama4_vision_tower_counts_its_pixel_shuffle_mlp_and_projector(tmp_path: Path) -> None:
    """Llama-4 Scout with its vision_config (34 blocks of a 1,408-wide ViT, the pixel-shuffle
    MLP 5,632 → 4,096 → 4,096 and a 4,096 → 5,120 projector: HF Llama4VisionModel,
    Llama4MultiModalProjector): ~0.87B, which with the 107.8B language model makes the
    109B its model card gives with vision (the shipped config is text-only)."""
    cfg = _shipped_json("llama-4-scout") | {"vision_config": {
        "hidden_act": "gelu", "hidden_size": 1408, "image_size": 336,
        "intermediate_size": 5632, "model_type": "llama4_vision_model",
        "num_attention_heads": 16, "num_channels": 3, "num_hidden_layers": 34,
        "patch_size": 14, "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096,
        "projector_output_dim": 4096, "vision_output_dim": 4096}}
    spec = load_model(_write(tmp_path, cfg))
    assert spec.vision_params == pytest.approx(0.872e9, rel=0.01)
    assert count_params(spec).total == pytest.approx(109e9, rel=0.01)


def test_llava_next_mistral_text_config_takes_mistral_defaults(tmp_path: Path) -> None:
    """llava-hf/llava-v1.6-mistral-7b-hf's ``text_config`` leaves the width, depth and head
    counts to transformers' MistralConfig (the Mistral-7B shape): filled in as
    LlavaNextConfig does, the model is ~7.57B (Mistral-7B with a CLIP ViT-L/14-336 tower and
    its projector); it was refused for a missing ``text_config.hidden_size``."""
    cfg = {"architectures": ["LlavaNextForConditionalGeneration"], "model_type": "llava_next",
           "image_grid_pinpoints": [[336, 672], [672, 336], [672, 672]],
           "text_config": {"architectures": ["MistralForCausalLM"],
                           "intermediate_size": 14336, "max_position_embeddings": 32768,
                           "model_type": "mistral", "num_key_value_heads": 8,
                           "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
                           "sliding_window": None, "vocab_size": 32064},
           "vision_config": {"hidden_size": 1024, "image_size": 336,
                             "intermediate_size": 4096, "model_type": "clip_vision_model",
                             "num_attention_heads": 16, "num_hidden_layers": 24,
                             "patch_size": 14, "projection_dim": 768}}
    spec = load_model(_write(tmp_path, cfg))
    assert (spec.hidden_size, spec.num_layers, spec.attention.num_kv_heads) == (4096, 32, 8)
    assert all(layer.window is None for layer in spec.layers)      # sliding_window: null
    assert count_params(spec).total == pytest.approx(7.57e9, rel=0.01)
