"""HuggingFace ``config.json`` -> :class:`ModelSpec`.

Supported ``model_type`` values and the HF fields each one reads:

* ``llama``, ``qwen3`` (dense, GQA; Qwen3 adds per-head q/k RMSNorm);
* ``mixtral`` (every layer MoE, ``sliding_window`` null or int) and ``phimoe`` (Phi-3.5-MoE:
  the same layout, HF PhimoeDecoderLayer, with q/k/v/o biases from ``attention_bias``; its
  LayerNorm and LM-head biases, 0.3M of 41.9B, are not counted);
* ``qwen3_moe`` (``decoder_sparse_step``, ``mlp_only_layers``, explicit ``head_dim``);
* ``deepseek_v2``, ``deepseek_v3``, ``kimi_k2`` (MLA attention, ``first_k_dense_replace`` dense
  layers then an MoE layer every ``moe_layer_freq``, shared experts, FP8 weight blocks);
* ``gpt_oss`` (``layer_types`` sliding/full attention, biases, attention sinks);
* ``llama4`` (multimodal wrapper; only ``text_config`` is read) and ``llama4_text``;
* ``qwen2`` (Qwen2/2.5: Llama-shaped with q/k/v biases) and ``mistral`` (Llama-shaped,
  ``sliding_window`` on every layer, explicit ``head_dim``): read by the Llama builder;
* ``minimax_m2`` (every layer MoE, biased sigmoid router, full-width q/k RMSNorm);
* ``gemma2``, ``gemma3_text`` and the ``gemma3`` wrapper (Llama-shaped with four norms per
  layer, tied embeddings, explicit ``head_dim``, alternating sliding-window / global layers,
  attention-logit soft-capping): the Llama builder plus the Gemma layer pattern;
* ``phi3`` (fused ``qkv_proj`` / ``gate_up_proj``, which hold exactly the Llama q/k/v and
  gate/up matrices side by side): the Llama builder;
* ``gemma`` (Gemma 1: HF GemmaForCausalLM is the Llama decoder with a GeGLU FFN, an explicit
  ``head_dim`` and tied embeddings unless ``tie_word_embeddings`` is false, GemmaConfig's
  default): the Llama builder;
* ``olmo2`` (OLMo 2: HF Olmo2ForCausalLM is the Llama decoder with its two norms after the
  attention and the FFN instead of before, and full-width q/k RMSNorms over the whole q and
  k projections, as MiniMax-M2's): the Llama builder;
* ``glm4`` (GLM-4-0414: HF Glm4ForCausalLM is the Llama decoder with q/k/v biases from
  ``attention_bias`` and none on o_proj, a fused gate/up projection of the same weights,
  four norms per layer like Gemma's, partial rotary embeddings that change no weight or KV
  shape): the Llama builder;
* ``internlm2`` (InternLM2 / 2.5, remote code InternLM2ForCausalLM: the Llama decoder with q/k/v
  fused in ``wqkv`` and the FFN in ``w1``/``w3``/``w2``, the same matrices; biases from
  ``bias``) and ``cohere`` (Command-R, HF CohereForCausalLM: attention and FFN side by side
  from one LayerNorm, tied embeddings unless ``tie_word_embeddings`` is false, per-head q/k
  norms with ``use_qk_norm``): the Llama builder;
* ``cohere2`` (Command-R7B, Command-A, HF Cohere2ForCausalLM: Command-R's parallel block with
  three sliding-window layers to one global layer): the Llama builder plus that pattern;
* ``nemotron`` (Nemotron-4, Minitron, Nemotron-Mini, HF NemotronForCausalLM: Llama's attention
  and a non-gated squared-ReLU FFN of two matrices): the Llama builder;
* ``granite`` (IBM Granite 3.x: HF GraniteForCausalLM is the Llama decoder with four scalar
  multipliers, ``embedding_multiplier``, ``attention_multiplier``, ``residual_multiplier``
  and ``logits_scaling``, which change no weight or KV shape): the Llama builder;
* ``qwen2_moe`` (the Qwen3-MoE layer rule, q/k/v biases, a shared expert of its own width
  ``shared_expert_intermediate_size`` behind a sigmoid gate): the Qwen-MoE builder;
* ``glm4_moe`` (GLM-4.5: the DeepSeek-V3 dense-then-MoE layer rule, shared expert and biased
  sigmoid router, with GQA attention instead of MLA);
* ``falcon`` (fused ``query_key_value`` with MQA / GQA ``num_kv_heads``,
  ``new_decoder_architecture``, parallel attention, non-gated GELU MLP, biases ``bias``);
* ``deepseek_v32`` (DeepSeek-V3 shape plus the sparse-attention lightning indexer) and
  ``glm_moe_dsa`` (GLM-5: the same MLA + indexer + MoE layout, read by the same builder);
* multimodal wrappers (``qwen3_vl``, ``qwen3_vl_moe``, ``llava``, ``qwen2_vl``, InternVL, ...):
  the language model is read from ``text_config`` / ``llm_config`` / ``language_config``
  (or, for Qwen2-VL's flat layout, from the top level) and its vision tower estimated from
  ``vision_config``.

Checkpoint formats (``quantization_config`` in config.json, or ModelOpt's
``hf_quant_config.json`` next to it) are read by :func:`read_quant`; every key in them must be
known (:mod:`learn_to_shard.model.quant_keys`). Hybrid models whose
layers keep a recurrent state instead of a KV cache (Gated-DeltaNet linear attention of
Qwen3-Next / Qwen3.5, Mamba layers of Jamba / Nemotron-H / Falcon-H1) are refused naming the
layer type.

``--model`` may also be a HuggingFace repo id (``org/name``), resolved offline from the local
HuggingFace cache (:func:`hf_cache_dir`); a local file or folder is read before a shipped name
of the same spelling.

The layer-pattern rules are those of the HF ``transformers`` modelling code for each family
(cited at the functions below). Encoder-decoder models (T5 / Switch Transformers) and
DeepSeek-V4's compressed sparse attention are rejected with :class:`UnsupportedModelError`.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Callable, Sequence
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, UnsupportedModelError
from ..jsonio import loads_strict
from .quant_keys import (
    FORMAT_KEYS,
    GROUP_KEYS,
    QUANT_ARGS_KEYS,
    ExclusionScope,
    FormatKeys,
    check_keys,
    exclusion_scope,
    kv_cache_is_fp8,
)
from .spec import AttentionKind, AttentionSpec, LayerSpec, ModelSpec, MoESpec, QuantSpec
from .vision import image_tokens

if TYPE_CHECKING:
    from importlib.abc import Traversable

__all__ = ["SUPPORTED_MODEL_TYPES", "load_model", "shipped_model_names"]

SUPPORTED_MODEL_TYPES: tuple[str, ...] = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "mixtral",
    "phimoe",
    "deepseek_v2",
    "deepseek_v3",
    "kimi_k2",
    "gpt_oss",
    "llama4",
    "llama4_text",
    "minimax_m2",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "phi3",
    "gemma",
    "granite",
    "olmo2",
    "glm4",
    "internlm2",
    "cohere",
    "cohere2",
    "nemotron",
    "qwen2_moe",
    "glm4_moe",
    "falcon",
    "deepseek_v32",
    "glm_moe_dsa",
    "qwen3_vl",
    "qwen3_vl_moe",
    "qwen2_vl",
    "qwen2_5_vl",
    "llava",
    "llava_next",
    "mistral3",
    "internvl_chat",
    "internvl",
)
"""``model_type`` values :func:`load_model` accepts (wrappers: if their language model is one
of the text families)."""

#: ``Gemma3TextConfig``'s defaults for the fields the builder reads, which transformers fills in
#: when a config leaves them out (huggingface/transformers@008f5c8c29be84d4721dc6d1e0fcd72300580be4
#: ``src/transformers/models/gemma3/configuration_gemma3.py``). The hub's Gemma-3 configs are
#: trimmed to what differs from them: google/gemma-3-27b-it's ``text_config`` has no
#: ``vocab_size`` or ``max_position_embeddings``, gemma-3-4b-it's no head counts either.
_GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216,
    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "max_position_embeddings": 131_072, "sliding_window": 4096,
    "sliding_window_pattern": 6}

#: ``LlamaConfig``'s defaults for the fields the builder reads (transformers
#: ``models/llama/configuration_llama.py``: the LLaMA-7B shape; ``num_key_value_heads``
#: None means one per head), which a LLaVA wrapper's trimmed ``text_config`` leaves to
#: transformers (``LlavaConfig`` builds it as ``CONFIG_MAPPING["llama"](**text_config)``;
#: llava-hf/llava-1.5-7b-hf states only the vocabulary, positions and norm epsilon).
_LLAMA_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
    "num_hidden_layers": 32, "num_attention_heads": 32, "max_position_embeddings": 2048}
#: ``MistralConfig``'s (transformers ``models/mistral/configuration_mistral.py``: the
#: Mistral-7B shape, 8 KV heads, 4096 × 32 positions, a 4,096-token window), for the same
#: trimmed text configs of LLaVA-NeXT's Mistral checkpoints (llava-hf/llava-v1.6-mistral-7b-hf).
_MISTRAL_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 4096 * 32, "sliding_window": 4096}

_TF = "huggingface/transformers@008e574391258935f3ecc3035c882e73bbcac419"
#: The ``max_position_embeddings`` that transformers' config class of each family gives a
#: config.json which leaves it out (the class default, which the engines read through
#: transformers: vLLM's ``_get_and_verify_max_len`` takes the config attribute first), with
#: where each is defined (``src/transformers/models/<dir>/configuration_<dir>.py``). Without
#: it a config that omits the field would plan and export any context length. Families whose
#: config class is remote code (``kimi_k2``, ``internlm2``) are absent: such a config must
#: state the field. Gemma-3's default comes with the rest of :data:`_GEMMA3_TEXT_DEFAULTS`.
TRANSFORMERS_MAX_POSITIONS: dict[str, tuple[int, str]] = {
    "llama": (2048, f"{_TF} llama"),
    "mistral": (4096 * 32, f"{_TF} mistral"),
    "qwen2": (32768, f"{_TF} qwen2 (qwen2_vl / qwen2_5_vl text configs alike: "
                     "huggingface/transformers@018c8e0394c47749c55861e11f5f7e2a577973d7)"),
    "qwen3": (32768, f"{_TF} qwen3"),
    "qwen3_moe": (32768, f"{_TF} qwen3_moe"),
    "qwen2_moe": (32768, f"{_TF} qwen2_moe"),
    "mixtral": (4096 * 32, f"{_TF} mixtral"),
    "phimoe": (4096 * 32, "huggingface/transformers@23925e160765f64e73942fe794d73a753c4b5732 "
                          "phimoe"),
    "deepseek_v2": (2048, f"{_TF} deepseek_v2"),
    "deepseek_v3": (4096, f"{_TF} deepseek_v3"),
    "deepseek_v32": (163840, f"{_TF} deepseek_v32"),
    "glm_moe_dsa": (202752, f"{_TF} glm_moe_dsa"),
    "gpt_oss": (131072, "huggingface/transformers@02b8f42b4240dddea1b27c45d2dc95fb2682f841 "
                        "gpt_oss"),
    "llama4_text": (4096 * 32, f"{_TF} llama4 (Llama4TextConfig)"),
    "minimax_m2": (196608, f"{_TF} minimax_m2"),
    "gemma": (8192, f"{_TF} gemma"),
    "gemma2": (8192, f"{_TF} gemma2"),
    "phi3": (4096, f"{_TF} phi3"),
    "granite": (2048, f"{_TF} granite"),
    "olmo2": (2048, f"{_TF} olmo2"),
    "glm4": (131072, f"{_TF} glm4"),
    "glm4_moe": (131072, f"{_TF} glm4_moe"),
    "cohere": (8192, f"{_TF} cohere"),
    "cohere2": (8192, f"{_TF} cohere2"),
    "nemotron": (4096, "huggingface/transformers@ae005ce12a086176742fbf6c8364782a27085c85 "
                       "nemotron"),
    "falcon": (2048, "huggingface/transformers@5fd8edad2a672d6a10d6352b62b823d56c3032bf "
                     "falcon (FalconConfig: 'Pretrained Falcon models with RoPE support up to "
                     "2048 tokens')"),
}
#: The context vLLM assumes for a config with no length field (or one that is null):
#: ``_get_and_verify_max_len``'s ``default_max_len`` ("Assuming the model's maximum length is
#: 2048"; vllm-project/vllm@0052a5b818980ce8a0477706aaf9f75bd5af72cd vllm/config/model.py).
VLLM_DEFAULT_MAX_LEN = 2048
#: Qwen3-VL's text configs (``qwen3_vl_text``, ``qwen3_vl_moe_text``), which the builders
#: read as ``qwen3`` / ``qwen3_moe`` but whose classes default to 128,000 positions.
_VL_TEXT_MAX_POSITIONS: dict[str, tuple[int, str]] = {
    "qwen3_vl_text": (128000, "huggingface/transformers@000c33fdfde12e1ffafbfcdb3c926df5727a00b6 "
                              "qwen3_vl (Qwen3VLTextConfig)"),
    "qwen3_vl_moe_text": (128000, f"{_TF} qwen3_vl_moe (Qwen3VLMoeTextConfig)"),
}

#: Language-model ``model_type`` spellings inside wrappers -> the family builder's key.
_TEXT_ALIASES = {"qwen3_vl_text": "qwen3", "qwen3_vl_moe_text": "qwen3_moe",
                 "qwen2_vl_text": "qwen2", "qwen2_5_vl_text": "qwen2"}
#: Keys holding a wrapper's language-model config (HF LLaVA / Qwen-VL: ``text_config``;
#: InternVL ``llm_config``; DeepSeek-VL2 ``language_config``).
_WRAPPER_KEYS = ("text_config", "llm_config", "language_config")
#: Wrappers whose language model sits at the top level when no wrapper key is present
#: (HF Qwen2VLConfig before transformers 4.53 kept the text fields flat).
_FLAT_WRAPPERS = {"qwen2_vl": "qwen2", "qwen2_5_vl": "qwen2"}
#: Hybrid families whose non-attention layers keep a recurrent state per sequence (not a KV
#: cache) -> the layer type, as named in their HF configs / modelling code.
_HYBRID_TYPES = {
    "qwen3_next": "linear_attention (Gated DeltaNet)",
    "qwen3_5": "linear_attention (Gated DeltaNet)",
    "qwen3_5_moe": "linear_attention (Gated DeltaNet)",
    "qwen3_5_text": "linear_attention (Gated DeltaNet)",
    "qwen3_5_moe_text": "linear_attention (Gated DeltaNet)",
    "jamba": "mamba (Mamba SSM)",
    "nemotron_h": "mamba (Mamba-2 SSM)",
    "falcon_h1": "mamba (Mamba-2 SSM)",
    "bamba": "mamba (Mamba-2 SSM)",
    "granitemoehybrid": "mamba (Mamba-2 SSM)",
    "zamba2": "mamba (Mamba-2 SSM)",
    "minimax": "linear_attention (lightning attention)",
}
#: ``layer_types`` entries that are recurrent-state layers.
_STATE_LAYER_TYPES = ("linear_attention", "mamba", "mamba2", "conv", "recurrent")

_MISSING: Any = object()
_ENCODER_DECODER_TYPES = frozenset(
    {"t5", "mt5", "umt5", "switch_transformers", "bart", "mbart", "pegasus", "longt5", "whisper"}
)
_GIN_ENCODER_DECODER_KEYS = ("NUM_ENCODER_LAYERS", "NUM_DECODER_LAYERS", "EXPERT_MLP_DIM")
_DEEPSEEK_V4_KEYS = ("compress_ratios", "o_lora_rank", "hc_mult", "o_groups")


#: Largest integer a config field may hold (2**40): real sizes are below 2**31.
_MAX_INT = 2**40
#: Most decoder layers a config may declare (the largest real models have ~130).
MAX_LAYERS = 10_000


def _supported_list() -> str:
    return ", ".join(SUPPORTED_MODEL_TYPES)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Fields:
    """Typed, error-reporting access to one JSON object of a config file."""

    def __init__(self, data: dict[str, Any], source: str, prefix: str = "") -> None:
        self.data = data
        self.source = source
        self.prefix = prefix

    def error(self, key: str, expected: str, value: Any = _MISSING) -> ConfigError:
        field = f"{self.prefix}{key}"
        if value is _MISSING:
            return ConfigError(f"{self.source}: missing required field '{field}' ({expected})")
        return ConfigError(
            f"{self.source}: field '{field}' must be {expected}, got {_short(value)}"
            f" ({type(value).__name__})"
        )

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def integer(self, key: str, default: Any = _MISSING, *, minimum: int = 1,
                maximum: int = _MAX_INT) -> int:
        """Integer in ``[minimum, maximum]``; absent or null -> ``default`` (an error if none
        given). The default ``maximum`` (2**40) is far above any real size and keeps NumPy's
        64-bit arithmetic exact."""
        expected = f"an integer in [{minimum}, {maximum}]" if maximum < _MAX_INT \
            else f"an integer >= {minimum}"
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                raise self.error(key, expected)
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(key, expected, value)
        if value > maximum:
            raise self.error(key, f"an integer <= {maximum}", value)
        return value

    def opt_number(self, key: str) -> float | None:
        """A positive number (int or float), or ``None`` when absent or null."""
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise self.error(key, "a positive number or null", value)
        return float(value)

    def opt_integer(self, key: str, *, minimum: int = 1) -> int | None:
        """Integer >= ``minimum``, or ``None`` when absent or null."""
        return self.integer(key, None, minimum=minimum)

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, "true or false", value)
        return value

    def string(self, key: str, default: Any = _MISSING) -> str:
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                raise self.error(key, "a string")
            return default
        if not isinstance(value, str):
            raise self.error(key, "a string", value)
        return value

    def items(self, key: str, length: int, item_ok: Callable[[Any], bool], what: str) -> list[Any]:
        """A list of exactly ``length`` items each satisfying ``item_ok``; absent/null -> []."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or len(value) != length or not all(map(item_ok, value)):
            raise self.error(key, f"a list of {length} {what}", value)
        return value

    def obj(self, key: str) -> _Fields:
        value = self.data.get(key)
        if not isinstance(value, dict):
            if value is None:
                raise self.error(key, "a JSON object")
            raise self.error(key, "a JSON object", value)
        return _Fields(value, self.source, f"{self.prefix}{key}.")


# ---------------------------------------------------------------------------------------------
# Locating and reading config files
# ---------------------------------------------------------------------------------------------


def _models_dir() -> Traversable:
    return resources.files("learn_to_shard") / "data" / "models"


def _shipped_files() -> dict[str, Traversable]:
    """Shipped configs: ``<name>.json`` files and ``<name>/config.json`` folders (the folder
    form also holds a ModelOpt ``hf_quant_config.json``)."""
    out: dict[str, Traversable] = {}
    for f in _models_dir().iterdir():
        if f.name.endswith(".json") and f.is_file():
            out[f.name[: -len(".json")]] = f
        elif f.is_dir() and (f / "config.json").is_file():
            out[f.name] = f / "config.json"
    return out


@lru_cache(maxsize=1)
def _supported_shipped() -> tuple[str, ...]:
    names = []
    for name in sorted(_shipped_files()):
        try:
            load_model(name)
        except UnsupportedModelError:
            continue
        names.append(name)
    return tuple(names)


@cache
def shipped_repo_ids() -> dict[str, str]:
    """Shipped config name -> the HuggingFace repository id it was copied from, from
    ``data/models/SOURCES.md``'s table (rows of single files ``name.json`` and of model
    folders ``name/config.json, ...``), read once (callers must not change the dict)."""
    text = (_models_dir() / "SOURCES.md").read_text(encoding="utf-8")
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or "/" not in cells[1]:
            continue
        first = cells[0].split(",")[0].strip()
        if first.endswith("/config.json"):
            out[first.removesuffix("/config.json")] = cells[1].split()[0]
        elif first.endswith(".json") and "/" not in first:
            out[first.removesuffix(".json")] = cells[1].split()[0]
    return out


def hub_repo_id(repo_id: str) -> str:
    """``repo_id`` under the name the hub serves it by today: Meta's Llama 3.1 repositories
    were renamed without the ``Meta-`` prefix (``meta-llama/Meta-Llama-3.1-8B`` is now
    ``meta-llama/Llama-3.1-8B``; the hub redirects the old id to the new,
    huggingface.co/meta-llama/Meta-Llama-3.1-8B); every other id is returned unchanged.

    Args:
        repo_id: a HuggingFace repository id ``org/name``.

    Returns:
        The id with its case kept, e.g. ``"meta-llama/Llama-3.1-70B"``.
    """
    org, sep, name = repo_id.partition("/")
    if org.lower() == "meta-llama" and name.lower().startswith("meta-llama-3.1-"):
        name = name[len("Meta-"):]
    return f"{org}{sep}{name}"


def _hub_name(repo_id: str) -> str:
    """``repo_id`` as the hub resolves it, for comparing ids: :func:`hub_repo_id`,
    case-folded."""
    return hub_repo_id(repo_id).lower()


def shipped_model_names() -> list[str]:
    """Names of the supported model configs shipped in ``learn_to_shard/data/models``.

    Returns:
        Sorted names (file stems such as ``"llama-3.1-70b"``, or folder names such as
        ``"qwen3-235b-a22b-nvfp4"``) that :func:`load_model` accepts. The shipped configs of
        unsupported architectures (``switch-c-2048``, ``deepseek-v4-pro``, ``qwen3.5-27b``) are
        left out.
    """
    return list(_supported_shipped())


def hf_cache_dir() -> Path:
    """The HuggingFace hub cache folder, computed from the environment at call time.

    Rule of ``huggingface_hub.constants`` (huggingface_hub 0.23+): ``$HF_HUB_CACHE`` if set,
    else ``$HF_HOME/hub``, with ``HF_HOME`` defaulting to ``$XDG_CACHE_HOME/huggingface`` and
    ``XDG_CACHE_HOME`` to ``~/.cache``. (The library reads these once at import; reading them
    here lets a caller point the planner at another cache without re-importing it.)
    """
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    home = os.environ.get("HF_HOME") or os.path.join(xdg, "huggingface")
    return Path(home).expanduser() / "hub"


def _looks_like_repo_id(text: str) -> bool:
    """``org/name`` with one slash, no ``.json`` suffix and no path syntax."""
    parts = text.split("/")
    return (len(parts) == 2 and all(parts) and not text.endswith(".json")
            and not text.startswith((".", "~")) and "\\" not in text)


def _from_hf_cache(repo_id: str) -> tuple[Path, Path | None]:
    """``(config.json, hf_quant_config.json or None)`` of ``repo_id`` in the local HF cache.

    Uses ``huggingface_hub.try_to_load_from_cache`` (offline: it only reads the cache's
    ``refs/`` and ``snapshots/`` folders, never the network), which follows ``refs/main``.
    A repository downloaded at a pinned revision (``hf download --revision <commit>``) has no
    ``refs/main``: where exactly one snapshot holds a ``config.json``, that one is read.

    Raises:
        ConfigError: ``repo_id`` is not a valid HuggingFace repo id (huggingface_hub's rule:
            letters, digits, ``-``, ``_``, ``.``, at most 96 characters; no revision
            suffix), or the cache holds no ``config.json`` for the repo, or several snapshots
            do and no ``refs/main`` says which (the messages name the cache folder and what
            to pass instead).
    """
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    cache = hf_cache_dir()
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache)
    except HFValidationError as exc:
        reason = str(exc).split(":")[0].rstrip(".")
        raise ConfigError(f"--model {repo_id!r}: not a shipped model, a local path or a valid "
                          f"HuggingFace repo id ({reason}); a revision cannot be given "
                          f"here: pass the snapshot's config.json path "
                          f"(.../snapshots/<commit>/config.json)") from None
    quant_name = "hf_quant_config.json"
    if not isinstance(found, str):
        # Only a repository without refs/main (pinned-commit downloads) falls back to its
        # snapshots; one whose refs/main names a snapshot without config.json has none.
        snaps = [] if (folder / "refs" / "main").exists() else \
            sorted(folder.glob("snapshots/*/config.json"))
        if len(snaps) > 1:
            raise ConfigError(
                f"--model {repo_id}: the HuggingFace cache holds {len(snaps)} snapshots of it "
                f"({', '.join(p.parent.name[:12] for p in snaps)}) and no refs/main saying "
                f"which to read; pass one's config.json path")
        if not snaps:
            loadable = set(shipped_model_names())
            same = sorted(n for n, r in shipped_repo_ids().items()
                          if _hub_name(r) == _hub_name(repo_id) and n in loadable)
            raise ConfigError(
                f"--model {repo_id}: not a shipped model or a local path, and no config.json "
                f"for it in the HuggingFace cache (looked in {folder}; cache from "
                f"HF_HUB_CACHE / HF_HOME); nothing is downloaded: "
                + (f"the shipped {same[0]!r} is that repository's config (--model "
                   f"{same[0]}), or run " if same else "run ")
                + f"`hf download {repo_id} config.json` first (`huggingface-cli download` "
                f"before huggingface_hub 0.34), or pass a config.json path")
        quant_file = snaps[0].parent / quant_name
        return snaps[0], quant_file if quant_file.is_file() else None
    quant = try_to_load_from_cache(repo_id, quant_name, cache_dir=cache)
    return Path(found), Path(quant) if isinstance(quant, str) else None


def _read_text(path: Path | Traversable, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc}") from exc


def _json_object(text: str, source: str, what: str) -> dict[str, Any]:
    data = loads_strict(text, source)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: top level must be a JSON object ({what}), got {type(data).__name__}")
    return data


class _Source:
    """Where a config was read from.

    Attributes:
        data: the config.json object; source: its path; name: the short model name.
        kind: ``shipped``, ``file`` (a local file or folder) or ``hf-cache``.
        quant: the ``hf_quant_config.json`` object next to it, or ``None``.
        quant_source: that file's path.
        repo_id: the HF repository id of an ``hf-cache`` source.
    """

    def __init__(self, data: dict[str, Any], source: str, name: str, kind: str,
                 quant: dict[str, Any] | None = None, quant_source: str = "",
                 repo_id: str | None = None) -> None:
        self.data, self.source, self.name, self.kind = data, source, name, kind
        self.quant, self.quant_source, self.repo_id = quant, quant_source, repo_id


def _sibling_quant(config: Path | Traversable) -> tuple[dict[str, Any] | None, str]:
    """ModelOpt's ``hf_quant_config.json`` beside a config.json, if there is one."""
    sibling = (config.parent if isinstance(config, Path) else None)
    if sibling is None:
        return None, ""
    path = sibling / "hf_quant_config.json"
    if not path.is_file():
        return None, ""
    return _json_object(_read_text(path, "hf_quant_config.json"), str(path),
                        "a ModelOpt hf_quant_config.json"), str(path)


def _read(name_or_path: str) -> _Source:
    """Locate and parse a model config: a local file/folder first (it shadows a shipped name
    of the same spelling), then a shipped name, then an ``org/name`` repo id in the local
    HuggingFace cache. Raises ConfigError."""
    shipped = _shipped_files()
    if not name_or_path.strip():
        raise ConfigError("--model: empty; give a shipped model name, a config.json path, a "
                          "model folder or a HuggingFace repo id")
    path = Path(name_or_path)
    local = path.exists()
    if not local and name_or_path not in shipped and name_or_path.lower() in shipped:
        name_or_path = name_or_path.lower()      # shipped names in any case, as device names
    if not local and name_or_path in shipped:
        resource = shipped[name_or_path]
        data = _json_object(_read_text(resource, "shipped config"), str(resource),
                            "an HF config.json")
        quant, quant_source = None, ""
        if resource.name == "config.json":
            q = _models_dir() / name_or_path / "hf_quant_config.json"
            if q.is_file():
                quant_source = str(q)
                quant = _json_object(_read_text(q, "hf_quant_config.json"), quant_source,
                                     "a ModelOpt hf_quant_config.json")
        return _Source(data, str(resource), name_or_path, "shipped", quant, quant_source)
    looks_like_path = path.suffix == ".json" or "/" in name_or_path or "\\" in name_or_path
    if not local and _looks_like_repo_id(name_or_path):
        config, quant_path = _from_hf_cache(name_or_path)
        data = _json_object(_read_text(config, "config file"), str(config), "an HF config.json")
        quant = None if quant_path is None else _json_object(
            _read_text(quant_path, "hf_quant_config.json"), str(quant_path),
            "a ModelOpt hf_quant_config.json")
        return _Source(data, str(config), name_or_path.split("/")[1], "hf-cache", quant,
                       str(quant_path or ""), repo_id=name_or_path)
    if path.is_dir():
        path = path / "config.json"
    elif not local and not looks_like_path:
        names = shipped_model_names()
        close = difflib.get_close_matches(name_or_path.lower(), names, n=1, cutoff=0.8)
        raise ConfigError(
            f"unknown model '{name_or_path}': not a shipped model, an existing file or an "
            f"org/name HuggingFace repo id; "
            + (f"did you mean {close[0]}? " if close else "")
            + f"shipped models: {', '.join(names)} (or pass a config.json path)"
        )
    source = str(path)
    name = path.parent.name if path.stem == "config" and path.parent.name else path.stem
    if not path.is_file():
        what = "not a regular file" if path.exists() else "config file not found"
        shadow = (f"; the local '{name_or_path}' shadows the shipped model of that name: run "
                  f"from another folder to plan the shipped one"
                  if local and name_or_path in shipped else "")
        raise ConfigError(f"{source}: {what} (expected an HF config.json){shadow}")
    data = _json_object(_read_text(path, "config file"), source, "an HF config.json")
    quant, quant_source = _sibling_quant(path)
    return _Source(data, source, name, "file", quant, quant_source)


def _reject_hybrid(data: dict[str, Any], source: str, prefix: str = "") -> None:
    """Refuse models whose layers keep a recurrent state instead of a KV cache.

    Raises:
        UnsupportedModelError: a hybrid ``model_type`` (:data:`_HYBRID_TYPES`) or a
            ``layer_types`` list with recurrent-state layers; the message names the layer type
            and how many layers have it.
    """
    model_type = data.get("model_type")
    types = data.get("layer_types")
    state = [t for t in types if isinstance(t, str) and t.startswith(_STATE_LAYER_TYPES)] \
        if isinstance(types, list) else []
    pattern = data.get("hybrid_override_pattern")
    if isinstance(pattern, str) and "M" in pattern:
        state = ["mamba"] * pattern.count("M")
    if not state and model_type not in _HYBRID_TYPES:
        return
    kind = _HYBRID_TYPES.get(str(model_type), state[0] if state else "recurrent")
    count = f"{len(state)} of {len(types) if isinstance(types, list) else '?'} layers" \
        if isinstance(types, list) and state else "its non-attention layers"
    raise UnsupportedModelError(
        f"{source}: {prefix}model_type {model_type!r} is a hybrid model: layer type {kind} "
        f"({count}) keeps a fixed-size recurrent state per sequence, not a KV cache, and the "
        f"planner does not model that state; supported: attention-only decoders "
        f"({_supported_list()})")


def _reject_unsupported(data: dict[str, Any], source: str) -> None:
    supported = f"supported model_types: {_supported_list()}"
    model_type = data.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise ConfigError(f"{source}: field 'model_type' must be a string, got "
                          f"{_short(model_type)}; {supported}")
    gin_keys = [k for k in _GIN_ENCODER_DECODER_KEYS if k in data]
    if data.get("is_encoder_decoder") is True or model_type in _ENCODER_DECODER_TYPES or gin_keys:
        what = f"model_type '{model_type}'" if model_type else f"fields {', '.join(gin_keys)}"
        raise UnsupportedModelError(
            f"{source}: encoder-decoder models (T5 / Switch Transformers; {what}) are not "
            f"supported, only decoder-only LLMs; {supported}"
        )
    v4_keys = [k for k in _DEEPSEEK_V4_KEYS if k in data]
    if model_type == "deepseek_v4" or v4_keys:
        keys = ", ".join(v4_keys) or "model_type deepseek_v4"
        raise UnsupportedModelError(
            f"{source}: DeepSeek-V4 compressed/sparse attention and hyper-connections ({keys}) "
            f"are not supported, only GQA and MLA attention; {supported}"
        )
    if model_type is None:
        raise ConfigError(f"{source}: missing required field 'model_type' ({supported})")
    for key in _WRAPPER_KEYS:      # the language model's own layer list is the most specific
        if isinstance(data.get(key), dict):
            _reject_hybrid(data[key], source, f"{key}.")
    _reject_hybrid(data, source)
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedModelError(
            f"{source}: model_type {_short(model_type)} is not supported; {supported}"
        )


# ---------------------------------------------------------------------------------------------
# Shared field readers
# ---------------------------------------------------------------------------------------------


def _gqa_attention(f: _Fields, hidden: int, *, qk_norm: bool, sinks: bool = False,
                   qkv_bias: bool | None = None) -> AttentionSpec:
    """GQA/MHA/MQA attention fields; ``qkv_bias`` forces q/k/v biases (Qwen2: always on, o_proj
    unbiased, HF Qwen2Attention) instead of ``attention_bias`` (q/k/v/o alike)."""
    heads = f.integer("num_attention_heads")
    kv_heads = f.integer("num_key_value_heads", heads)
    if heads % kv_heads:
        raise ConfigError(
            f"{f.source}: field '{f.prefix}num_key_value_heads' ({kv_heads}) must divide "
            f"'{f.prefix}num_attention_heads' ({heads})"
        )
    if f.has("head_dim"):
        head_dim = f.integer("head_dim")
    elif hidden % heads == 0:
        head_dim = hidden // heads
    else:
        raise ConfigError(
            f"{f.source}: missing field '{f.prefix}head_dim' (needed because hidden_size "
            f"{hidden} is not a multiple of num_attention_heads {heads})"
        )
    bias = f.flag("attention_bias", False)
    return AttentionSpec(
        kind=AttentionKind.GQA,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=head_dim,
        qkv_bias=bias if qkv_bias is None else qkv_bias,
        o_bias=bias,
        qk_norm=qk_norm,
        sinks=sinks,
    )


def _windows_from_layer_types(
    f: _Fields, num_layers: int, windowed: dict[str, int | None]
) -> list[int | None] | None:
    """Per-layer windows from an HF ``layer_types`` list, or ``None`` when it is absent.

    ``windowed`` maps each accepted type name to its window (``None`` = full attention).
    """
    if not f.has("layer_types"):
        return None
    what = "of " + " / ".join(repr(t) for t in windowed)
    types = f.items("layer_types", num_layers, lambda t: t in windowed, what)
    return [windowed[t] for t in types]


def _moe_check(f: _Fields, num_experts: int, top_k: int, top_k_key: str) -> None:
    if top_k > num_experts:
        raise ConfigError(
            f"{f.source}: field '{f.prefix}{top_k_key}' ({top_k}) must be <= the number of "
            f"experts ({num_experts})"
        )


#: The ``torch_dtype`` names a checkpoint's config may state (torch's dtype attribute names;
#: ``auto`` as ``transformers`` writes it for a dtype left to the loader).
_TORCH_DTYPES = frozenset({"bfloat16", "float16", "float32", "float64", "half", "float",
                           "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                           "int8", "uint8", "auto"})


def _common(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """Fields every family shares (``data`` is the top-level object, for dtype/architectures;
    a wrapper's ``text_config`` may carry its own ``dtype``)."""
    archs = data.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    key = next((k for k in ("torch_dtype", "dtype") if k in data), None)
    where, obj = ("", data) if key is not None else (f.prefix, f.data)
    key = key or next((k for k in ("torch_dtype", "dtype") if k in f.data), None)
    dtype = obj.get(key) if key is not None else None
    if key is not None and dtype is not None and (
            not isinstance(dtype, str) or dtype.removeprefix("torch.") not in _TORCH_DTYPES):
        raise ConfigError(f"{f.source}: field '{where}{key}' is {dtype!r}; expected a torch "
                          f"dtype name: {', '.join(sorted(_TORCH_DTYPES))}")
    written = f.integer("max_position_embeddings", 0, minimum=1)
    ropes = _rope_fields(f, data)
    extended = _yarn_positions(f, ropes, written)
    return {
        "architecture": arch or str(data["model_type"]),
        "config_architecture": arch,
        "hidden_size": f.integer("hidden_size"),
        "vocab_size": f.integer("vocab_size"),
        "tie_word_embeddings": f.flag("tie_word_embeddings",
                                      data.get("tie_word_embeddings") is True),
        "native_dtype": "" if not isinstance(dtype, str) or dtype == "auto"
        else dtype.removeprefix("torch."),
        "max_position_embeddings": extended,
        "config_max_positions": written if extended > written else 0,
        "rope_not_followed": _unfollowed_rope(ropes),
    }


def _rope_fields(f: _Fields, data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The config's ``rope_scaling`` / ``rope_parameters`` objects (where transformers v5
    configs keep it), in the model's own fields (``f``, a wrapper's ``text_config``) and then
    the top level, each with its key as written (``text_config.rope_scaling``).

    Raises:
        ConfigError: one that is not an object (or null), named with the file and its key.
    """
    found = [(prefix + key, obj.get(key)) for key in ("rope_scaling", "rope_parameters")
             for obj, prefix in ((f.data, f.prefix), (data, ""))]
    for key, value in found:
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"{f.source}: field '{key}' must be a JSON object (e.g. "
                              f"{{\"rope_type\": \"yarn\", \"factor\": 4.0, "
                              f"\"original_max_position_embeddings\": 32768}}) or null, got "
                              f"{_short(value)} ({type(value).__name__})")
    return [(key, value) for key, value in found if isinstance(value, dict)]


def _unfollowed_rope(ropes: list[tuple[str, dict[str, Any]]]) -> str:
    """``"rope_scaling type 'linear' (factor 4)"`` where one of the config's rope objects
    (:func:`_rope_fields`) is ``linear`` or ``dynamic`` with a factor above 1: vLLM and
    SGLang multiply ``max_position_embeddings`` by it, and this planner does not (see
    :func:`_yarn_positions`); empty otherwise."""
    for key, rope in ropes:
        kind, factor = rope.get("rope_type", rope.get("type")), rope.get("factor")
        if kind in ("linear", "dynamic") and isinstance(factor, (int, float)) \
                and not isinstance(factor, bool) and factor > 1:
            return f"{key} type '{kind}' (factor {factor:g})"
    return ""


def _yarn_positions(f: _Fields, ropes: list[tuple[str, dict[str, Any]]],
                    positions: int) -> int:
    """The positions a YaRN ``rope_scaling`` extends the model to:
    ``original_max_position_embeddings × factor`` for ``rope_type`` (or ``type``) ``yarn`` in
    ``rope_scaling`` (or ``rope_parameters``, where transformers v5 configs keep it), which
    replaces ``max_position_embeddings`` (``positions``); else ``positions``. ``ropes``: the
    config's rope objects (:func:`_rope_fields`), the first of which is read. Qwen2.5 /
    Qwen3's model cards add ``{"type": "yarn", "factor": 4.0,
    "original_max_position_embeddings": 32768}`` to serve 131,072 tokens, which earlier vLLM
    releases derived as ``max_model_len``; the pinned vLLM 0.33.0 and SGLang 0.5.23 keep
    ``max_position_embeddings`` for YaRN (vllm/config/model.py ``_get_and_verify_max_len``
    skips the factor for ``yarn``; sglang/srt/utils/hf_transformers/common.py
    ``get_context_length`` sets it to 1 where ``original_max_position_embeddings`` is given)
    and start with a longer length only when told to (the export sets their override, see
    :attr:`ModelSpec.config_max_positions`). Other scaling types keep
    ``max_position_embeddings``: for ``linear`` and ``dynamic`` both engines multiply it by
    ``factor`` (vLLM skips ``llama3``, ``longrope``, ``su`` and the YaRN variants; SGLang
    skips ``llama3`` and any type with ``original_max_position_embeddings``), which this
    planner does not follow: a longer context stays refused rather than planned past what
    the checkpoint was trained for.

    Raises:
        ConfigError: a YaRN ``factor`` that is not a number in (0, 1024], or an
            ``original_max_position_embeddings`` that is not a positive integer (named with
            the file and the key that holds them).
    """
    key, rope = ropes[0] if ropes else ("", None)
    if rope is None or rope.get("rope_type", rope.get("type")) != "yarn":
        return positions
    factor, original = rope.get("factor"), rope.get("original_max_position_embeddings")
    if factor is None or original is None:       # transformers' defaults: nothing extended
        return positions
    yarn = _Fields(rope, f.source, f"{key}.")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) \
            or not 0 < factor <= 1024:
        raise yarn.error("factor", "a number in (0, 1024] (YaRN's context multiplier)", factor)
    original = yarn.integer("original_max_position_embeddings")
    return max(1, int(original * factor))


#: Bits of one scale or zero-point entry: FP16/BF16 scales (GPTQ, AWQ, compressed-tensors
#: int), FP8 E4M3 scales per 16 values (NVFP4, NVIDIA "Introducing NVFP4", 2025), E8M0 scales
#: per 32 values (MXFP4, OCP Microscaling Formats spec v1.0).
_SCALE16_BITS = 16.0
#: Formats and the words users see in refusals.
_SUPPORTED_QUANT = ("fp8 (per-tensor, per-channel, 128x128 blocks), fbgemm_fp8, ModelOpt "
                    "FP8 / NVFP4 / W4A16_AWQ, gptq and awq (2/3/4/8-bit), compressed-tensors "
                    "(int4/int8 weight-only, W8A8 int8, fp8, nvfp4), mxfp4")


#: Top-level keys of ModelOpt's ``hf_quant_config.json`` (nvidia/Qwen3-235B-A22B-NVFP4,
#: nvidia/MiniMax-M3-NVFP4 also repeats ``quant_method``; aiconfigurator commit in
#: :mod:`learn_to_shard.model.quant_keys`).
_HF_QUANT_KEYS = FormatKeys(frozenset({"quantization"}),
                            frozenset({"producer", "quant_method"}))


def _group_bits(bits: int, group: int | None, *, zero_point: bool) -> float:
    """Stored bits per weight of a group-quantised integer format: the packed value, one
    16-bit scale per ``group`` input elements and, with zero points, one packed ``bits``-bit
    zero point per group (GPTQ/AWQ ``qweight``/``scales``/``qzeros`` layout, AutoGPTQ and
    AutoAWQ; vLLM ``gptq.py``/``awq.py``). ``group`` None: one scale per output channel
    (negligible per weight)."""
    if group is None:
        return float(bits)
    return bits + (_SCALE16_BITS + (bits if zero_point else 0)) / group


def _one_of(q: dict[str, Any], key: str, allowed: tuple[Any, ...], source: str) -> None:
    """Refuses ``q[key]`` (absent = null) unless it is one of ``allowed`` (strings compared
    lower-cased)."""
    value = q.get(key)
    probe = value.lower() if isinstance(value, str) else value
    if probe not in allowed:
        shown = ", ".join("null" if a is None else repr(a) for a in allowed)
        raise UnsupportedModelError(f"{source}: {key} {_short(value)} is not modelled; "
                                    f"supported: {shown}")


def _scope(q: dict[str, Any], keys: tuple[str, ...], source: str, moe_layers: Sequence[bool],
           below_8_bit: bool) -> ExclusionScope:
    """The exclusion list under the first of ``keys`` present (see :func:`exclusion_scope`)."""
    key = next((k for k in keys if q.get(k) is not None), keys[0])
    return exclusion_scope(q.get(key), key=key, source=source, moe_layers=moe_layers,
                           below_8_bit=below_8_bit)


def _modelopt_quant(algo: Any, q: dict[str, Any], source: str,
                    moe_layers: Sequence[bool]) -> QuantSpec:
    """A ModelOpt ``quant_algo`` (``hf_quant_config.json`` ``quantization.quant_algo``, or
    config.json ``quantization_config`` with ``quant_method`` ``modelopt``).

    Raises:
        UnsupportedModelError: an algorithm the cost model does not price, an unknown key,
            a KV-cache scheme other than FP8, or an exclusion list it cannot price.
        ConfigError: a ``group_size`` that is not a positive integer, or an NVFP4 one
            other than 16.
    """
    name = str(algo).upper()
    fp8 = name.startswith("FP8")      # FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO
    if not fp8 and name not in ("NVFP4", "W4A16_AWQ", "W4A8_AWQ", "INT4_AWQ"):
        raise UnsupportedModelError(
            f"{source}: ModelOpt quant_algo {_short(algo)} is not modelled; supported: "
            f"{_SUPPORTED_QUANT}")
    check_keys(q, FORMAT_KEYS["modelopt"], "ModelOpt quantisation", source)
    zero = q.get("has_zero_point") is True
    if zero and name not in ("W4A16_AWQ", "W4A8_AWQ", "INT4_AWQ"):
        raise UnsupportedModelError(f"{source}: has_zero_point true with quant_algo {name} is "
                                    f"not modelled; supported: false (zero points only with "
                                    f"the AWQ algorithms)")
    kv_key = "kv_cache_quant_algo" if q.get("kv_cache_quant_algo") is not None \
        else "kv_cache_scheme"
    kv = kv_cache_is_fp8(q.get(kv_key), kv_key, source)
    scope = _scope(q, ("exclude_modules", "ignore"), source, moe_layers, not fp8)
    if fp8:
        return QuantSpec(f"modelopt:{name}", 8.0, fp8=True, kv_cache_fp8=kv,
                         kept_16bit=scope.kept, source=source)
    group = q.get("group_size")
    given = group is not None
    if given and (not isinstance(group, int) or isinstance(group, bool) or group <= 0):
        raise ConfigError(f"{source}: group_size must be a positive integer (NVFP4: 16; the "
                          f"AWQ algorithms: e.g. 128), got {_short(group)}")
    if name == "NVFP4":
        if given and group != 16:
            raise ConfigError(f"{source}: NVFP4 group_size must be 16 (one FP8 scale per 16 "
                              f"FP4 values), got {_short(group)}")
        return QuantSpec("modelopt:NVFP4", 4.0 + 8.0 / 16, fp4=True, group_size=16,
                         experts_only=scope.experts_only, kv_cache_fp8=kv,
                         kept_16bit=scope.kept, source=source)
    g = group if given else 128
    return QuantSpec(f"modelopt:{name}", _group_bits(4, g, zero_point=zero),
                     group_size=g, experts_only=scope.experts_only, kv_cache_fp8=kv,
                     kept_16bit=scope.kept, source=source)


def _int_group(q: _Fields, key: str, default: Any) -> int | None:
    """A ``group_size`` entry: a positive integer, or -1 / null for per-channel scales."""
    value = q.data.get(key, default)
    if value is None or value == -1:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise q.error(key, "a positive integer or -1 (per-channel)", value)
    return value


def _ct_targets_experts(targets: Any, source: str) -> bool:
    """compressed-tensors ``targets``: ``True`` when they name routed experts only (``re:``
    patterns containing ``experts``), ``False`` for ``Linear`` (every linear layer).

    Raises:
        UnsupportedModelError: any other target list.
    """
    if targets is None or (isinstance(targets, list) and "Linear" in targets):
        return False
    if isinstance(targets, list) and targets and all(
            isinstance(t, str) and "expert" in t and "shared" not in t for t in targets):
        return True
    raise UnsupportedModelError(
        f"{source}: config_groups.*.targets {_short(targets)} is not modelled; supported: "
        f"['Linear'] (every linear layer) or patterns naming the routed experts only")


def _compressed_tensors(q: _Fields, source: str, moe_layers: Sequence[bool]) -> QuantSpec:
    """compressed-tensors (llm-compressor) ``config_groups``: every group must quantise its
    weights the same way (``num_bits``, ``type``, ``strategy``, ``group_size``). A MoE model
    whose ``ignore`` list keeps attention unquantised in every layer (or whose groups target
    the experts only) stores only its experts that way."""
    check_keys(q.data, FORMAT_KEYS["compressed-tensors"], "quant_method 'compressed-tensors'",
               source)
    for key in ("sparsity_config", "transform_config"):
        if q.data.get(key) not in (None, {}):
            raise UnsupportedModelError(
                f"{source}: {key} is set (sparse or rotated weights change what is stored "
                f"and how it is multiplied); not modelled; supported: null")
    kv = kv_cache_is_fp8(q.data.get("kv_cache_scheme"), "kv_cache_scheme", source)
    groups = q.data.get("config_groups")
    if q.data.get("format") == "float-quantized" and not groups:
        scope = _scope(q.data, ("ignore",), source, moe_layers, False)
        return QuantSpec("compressed-tensors:float-quantized", 8.0, fp8=True,
                         kv_cache_fp8=kv, kept_16bit=scope.kept, source=source)
    if not isinstance(groups, dict) or not groups:
        raise q.error("config_groups", "a non-empty object of quantisation groups", groups)
    schemes = set()
    targets_experts = set()
    for name, group in groups.items():
        w = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(w, dict):
            raise q.error(f"config_groups.{name}.weights", "a JSON object", w)
        where = f"{source} config_groups.{name}"
        check_keys(group, GROUP_KEYS, "a compressed-tensors quantisation group", where)
        if group.get("output_activations") is not None:
            raise UnsupportedModelError(f"{where}: output_activations are quantised; not "
                                        f"modelled; supported: null")
        a = group.get("input_activations")
        check_keys(w, QUANT_ARGS_KEYS, "compressed-tensors weights", f"{where}.weights")
        if isinstance(a, dict):
            check_keys(a, QUANT_ARGS_KEYS, "compressed-tensors input_activations",
                       f"{where}.input_activations")
        targets_experts.add(_ct_targets_experts(group.get("targets"), where))
        schemes.add((w.get("num_bits"), w.get("type"), w.get("strategy"), w.get("group_size"),
                     w.get("symmetric", True) is not False,
                     a.get("num_bits") if isinstance(a, dict) else None,
                     a.get("type") if isinstance(a, dict) else None))
    if len(schemes) != 1 or len(targets_experts) != 1:
        raise UnsupportedModelError(f"{source}: compressed-tensors config_groups mix weight "
                                    f"schemes {sorted(map(str, schemes))}; not modelled")
    bits, kind, strategy, group, sym, a_bits, a_kind = schemes.pop()
    fmt = q.data.get("format")
    low = isinstance(bits, int) and bits < 8
    for where in [q.data, *groups.values()]:
        # compressed-tensors CompressionFormat: sparse (marlin-24, sparse-*-bitmask) and
        # unpacked (naive-quantized: one int8 per value) layouts store other bytes.
        _one_of(where, "format", (None, "pack-quantized", "int-quantized", "float-quantized",
                                  "nvfp4-pack-quantized")
                + (("naive-quantized",) if not low else ()), source)
    scope = _scope(q.data, ("ignore",), source, moe_layers, low)
    experts_only = scope.experts_only or targets_experts.pop()
    if experts_only and not (low and any(moe_layers)):
        raise UnsupportedModelError(f"{source}: config_groups target the routed experts only, "
                                    f"but the checkpoint is not a 4-bit MoE; not modelled")
    if kind == "float" and bits == 8:
        return QuantSpec(f"compressed-tensors:{fmt}", 8.0, fp8=True, kv_cache_fp8=kv,
                         kept_16bit=scope.kept, source=source)
    if kind == "float" and bits == 4 and group == 16:
        return QuantSpec(f"compressed-tensors:{fmt}", 4.5, fp4=True, group_size=16,
                         experts_only=experts_only, kv_cache_fp8=kv, kept_16bit=scope.kept,
                         source=source)
    if kind == "int" and bits in (4, 8):
        g = group if strategy == "group" and isinstance(group, int) and group > 0 else None
        if strategy == "group" and g is None:
            raise q.error("config_groups.*.weights.group_size",
                          "a positive integer for strategy 'group'", group)
        w8a8 = bits == 8 and a_bits == 8 and a_kind == "int"
        return QuantSpec(f"compressed-tensors:{fmt}", _group_bits(bits, g, zero_point=not sym),
                         int8_activations=w8a8, group_size=g,
                         experts_only=experts_only and bits == 4, kv_cache_fp8=kv,
                         kept_16bit=scope.kept, source=source)
    raise UnsupportedModelError(
        f"{source}: compressed-tensors weights num_bits {bits!r} type {kind!r} strategy "
        f"{strategy!r} are not modelled; supported: {_SUPPORTED_QUANT}")


def _gptq_awq(q: _Fields, method: str, source: str, moe_layers: Sequence[bool]) -> QuantSpec:
    """GPTQ / AWQ integer weights (bits, group size, zero points); the keys that change what
    is stored beyond those (a quantised LM head, per-module ``dynamic`` overrides, a partial
    ``modules_in_block_to_quantize``, an AWQ ``modules_to_not_convert`` list) are read and
    refused where the cost model cannot price them.

    The bits and the group size are required, as the engines' loaders require them
    (vllm-project/vllm v0.11.0 ``model_executor/layers/quantization/gptq.py``
    ``GPTQConfig.from_config``: ``bits``, ``group_size``; ``awq.py`` ``AWQConfig.from_config``:
    ``w_bit`` or ``bits``, ``q_group_size`` or ``group_size``; ``get_from_keys`` raises
    without them): a config without them names no format an engine would load.

    Raises:
        ConfigError: bits or group size missing or out of range (names the field).
    """
    check_keys(q.data, FORMAT_KEYS[method], f"quant_method {method!r}", source)
    bits_key = "bits" if "bits" in q.data or method == "gptq" else "w_bit"
    needs = "the engines' GPTQ/AWQ loaders require it"
    if q.data.get(bits_key) is None:
        alias = ", as 'w_bit' or 'bits'" if bits_key == "w_bit" else ""
        raise q.error(bits_key, f"2, 3, 4 or 8{alias}; {needs}")
    bits = q.integer(bits_key, maximum=8)
    if bits not in (2, 3, 4, 8):
        raise q.error(bits_key, "2, 3, 4 or 8", bits)
    group_key = "group_size" if "group_size" in q.data or method == "gptq" \
        else "q_group_size"
    if group_key not in q.data:
        alias = ", as 'q_group_size' or 'group_size'" if group_key == "q_group_size" else ""
        raise q.error(group_key, f"a positive integer or -1 (per-channel){alias}; {needs}")
    group = _int_group(q, group_key, None)
    kept: tuple[str, ...] = ()
    experts_only = False
    if method == "gptq":
        if q.data.get("lm_head") not in (None, False):
            raise UnsupportedModelError(f"{source}: lm_head {_short(q.data['lm_head'])}: a "
                                        f"quantised LM head is not modelled (the cost model "
                                        f"keeps it in 16 bits); supported: false")
        for key in ("dynamic", "modules_in_block_to_quantize"):
            if q.data.get(key) not in (None, {}, []):
                raise UnsupportedModelError(
                    f"{source}: {key} is set (per-module bits or a subset of the layers "
                    f"quantised); not modelled; supported: null")
        _one_of(q.data, "checkpoint_format", (None, "gptq", "gptq_v2", "marlin",
                                              "gptq_marlin"), source)
    else:
        _one_of(q.data, "version", (None, "gemm", "gemv", "gemv_fast", "exllama", "marlin",
                                    "ipex"), source)
        scope = _scope(q.data, ("modules_to_not_convert",), source, moe_layers, bits < 8)
        kept, experts_only = scope.kept, scope.experts_only
    # GPTQ checkpoints store qzeros even when symmetric (AutoGPTQ layout); AWQ only with
    # zero_point (its default).
    zero = method == "gptq" or q.data.get("zero_point", True) is not False
    return QuantSpec(method, _group_bits(bits, group, zero_point=zero), group_size=group,
                     experts_only=experts_only, kept_16bit=kept, source=source)


def read_quant(f: _Fields, hf_quant: dict[str, Any] | None, hf_quant_source: str,
               moe_layers: Sequence[bool]) -> QuantSpec | None:
    """The checkpoint's weight format, or ``None`` for a 16-bit checkpoint.

    Bits per weight (scales included): FP8 8; NVFP4 4 + 8/16 = 4.5 (E2M1 values, one E4M3
    scale per 16); MXFP4 4 + 8/32 = 4.25 (E8M0 scale per 32, OCP MX spec v1.0); GPTQ / AWQ /
    compressed-tensors integer ``b`` bits with group ``g``: ``b + (16 + b)/g`` with zero
    points, ``b + 16/g`` symmetric (:func:`_group_bits`). Per-tensor/channel/128×128-block
    scales add under 0.01 bit and are not counted.

    Every key of the section must be known (:mod:`learn_to_shard.model.quant_keys` lists,
    per format, the keys read and those known as metadata, with sources); exclusion lists
    are read by :func:`~learn_to_shard.model.quant_keys.exclusion_scope` and a KV-cache
    scheme by :func:`~learn_to_shard.model.quant_keys.kv_cache_is_fp8`.

    Args:
        f: the config.json (or wrapper) fields holding ``quantization_config``.
        hf_quant: ModelOpt ``hf_quant_config.json`` next to config.json, if present (wins).
        hf_quant_source: its path.
        moe_layers: ``[num_layers]`` whether each decoder layer is an MoE layer (4-bit MoE
            checkpoints that keep attention in 16 bits quantise only the experts).

    Raises:
        UnsupportedModelError: bitsandbytes, a method / algorithm not modelled, or a key or
            value that changes what is stored in a way the cost model does not price (the
            message names the file, the key and what is supported).
        ConfigError: a ``quantization_config`` without ``quant_method`` or with malformed
            fields (the message names the field).
    """
    if hf_quant is not None:
        check_keys(hf_quant, _HF_QUANT_KEYS, "a ModelOpt hf_quant_config.json", hf_quant_source)
        section = hf_quant.get("quantization")
        if not isinstance(section, dict) or "quant_algo" not in section:
            raise ConfigError(f"{hf_quant_source}: missing 'quantization.quant_algo' (a "
                              f"ModelOpt hf_quant_config.json)")
        if section["quant_algo"] is not None:
            return _modelopt_quant(section["quant_algo"], section,
                                   f"{hf_quant_source} (quantization)", moe_layers)
    if not f.has("quantization_config"):
        return None
    q = f.obj("quantization_config")
    source = f"{f.source} ({f.prefix}quantization_config)"
    method = q.data.get("quant_method")
    bnb_keys = [k for k in ("load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type")
                if k in q.data]
    if method == "bitsandbytes" or bnb_keys:
        raise UnsupportedModelError(
            f"{source}: bitsandbytes checkpoints are not modelled (their 4/8-bit kernels "
            f"dequantise on every forward and shard unlike the formats below); re-quantise "
            f"with AWQ / GPTQ / FP8, or plan the 16-bit original; supported: {_SUPPORTED_QUANT}")
    if method is None:
        raise ConfigError(
            f"{source}: has no 'quant_method', so the stored weight format is unknown (planning "
            f"it at 16 bits would misstate what fits); give quant_method, one of: "
            f"{_SUPPORTED_QUANT}")
    if method in ("fp8", "fbgemm_fp8"):
        check_keys(q.data, FORMAT_KEYS[method], f"quant_method {method!r}", source)
        if method == "fp8":
            _one_of(q.data, "activation_scheme", (None, "dynamic", "static"), source)
            _one_of(q.data, "fmt", (None, "e4m3", "float8_e4m3fn"), source)
            _one_of(q.data, "scale_fmt", (None, "ue8m0"), source)
        scope = _scope(q.data, ("modules_to_not_convert", "ignored_layers"), source,
                       moe_layers, False)
        return QuantSpec(str(method), 8.0, fp8=True, kept_16bit=scope.kept, source=source)
    if method == "mxfp4":
        check_keys(q.data, FORMAT_KEYS["mxfp4"], "quant_method 'mxfp4'", source)
        scope = _scope(q.data, ("modules_to_not_convert",), source, moe_layers, True)
        return QuantSpec("mxfp4", 4.0 + 8.0 / 32, fp4=True, group_size=32,
                         experts_only=scope.experts_only, kept_16bit=scope.kept,
                         source=source)
    if method in ("gptq", "awq"):
        return _gptq_awq(q, str(method), source, moe_layers)
    if method == "compressed-tensors":
        return _compressed_tensors(q, source, moe_layers)
    if method == "modelopt":
        return _modelopt_quant(q.data.get("quant_algo"), q.data, source, moe_layers)
    raise UnsupportedModelError(
        f"{source}: quant_method {_short(method)} is not modelled; supported: "
        f"{_SUPPORTED_QUANT}")


def _weight_block_size(f: _Fields) -> tuple[int, int] | None:
    """``quantization_config.weight_block_size`` (DeepSeek / Qwen / MiniMax block FP8), or a
    compressed-tensors ``block_structure``, in any family; ``None`` when not block-scaled."""
    if not f.has("quantization_config"):
        return None
    q = f.obj("quantization_config")
    key = "weight_block_size"
    if not q.has(key):
        groups = q.data.get("config_groups")
        for g in (groups.values() if isinstance(groups, dict) else ()):
            w = g.get("weights") if isinstance(g, dict) else None
            if isinstance(w, dict) and w.get("strategy") == "block":
                q = _Fields(w, f.source, f"{q.prefix}config_groups.*.weights.")
                key = "block_structure"
                break
        else:
            return None
    block = q.items(
        key,
        2,
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
        "positive integers",
    )
    return (block[0], block[1])


# ---------------------------------------------------------------------------------------------
# Per-family builders
# ---------------------------------------------------------------------------------------------


def _dense(f: _Fields, data: dict[str, Any], *, qk_norm: bool, qkv_bias: bool | None = None,
           window_all: bool = False, ffn_optional: bool = False) -> dict[str, Any]:
    """Llama / Mistral / Qwen2 / Qwen3 (one builder: they differ only in the flags).
    Windows: ``layer_types`` if present; else with ``window_all`` (Mistral, HF MistralAttention)
    ``sliding_window`` on every layer; else Qwen's ``use_sliding_window`` rule (HF
    Qwen2Config / Qwen3Config: layer i slides iff i >= ``max_window_layers``).
    ``ffn_optional``: ``intermediate_size`` may be absent (``dense_intermediate_size`` 0 then),
    for a caller whose layers may all be MoE and which requires it where one is dense."""
    common = _common(f, data)
    num_layers = f.integer("num_hidden_layers", maximum=MAX_LAYERS)
    window = f.opt_integer("sliding_window")
    windows = _windows_from_layer_types(
        f, num_layers, {"full_attention": None, "sliding_attention": window}
    )
    if windows is None and window_all:
        windows = [window] * num_layers
    if windows is None:
        start = f.integer("max_window_layers", num_layers, minimum=0)
        slide = window if f.flag("use_sliding_window", False) else None
        windows = [slide if i >= start else None for i in range(num_layers)]
    return common | {
        "attention": _gqa_attention(f, common["hidden_size"], qk_norm=qk_norm,
                                    qkv_bias=qkv_bias),
        "dense_intermediate_size": (f.opt_integer("intermediate_size") or 0) if ffn_optional
        else f.integer("intermediate_size"),
        "gated_mlp": True,
        "mlp_bias": f.flag("mlp_bias", False),
        "moe": None,
        "layers": tuple(LayerSpec(is_moe=False, window=w) for w in windows),
    }


def _mixtral(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """Mixtral: every layer is MoE; ``sliding_window`` (null or int) applies to all layers."""
    common = _common(f, data)
    num_layers = f.integer("num_hidden_layers", maximum=MAX_LAYERS)
    num_experts = f.integer("num_local_experts")
    top_k = f.integer("num_experts_per_tok")
    _moe_check(f, num_experts, top_k, "num_experts_per_tok")
    window = f.opt_integer("sliding_window")
    return common | {
        "attention": _gqa_attention(f, common["hidden_size"], qk_norm=False),
        "dense_intermediate_size": 0,
        "gated_mlp": True,
        "moe": MoESpec(num_experts, top_k, f.integer("intermediate_size")),
        "layers": tuple(LayerSpec(is_moe=True, window=window) for _ in range(num_layers)),
    }


def _qwen_moe(f: _Fields, data: dict[str, Any], *, qwen2: bool = False) -> dict[str, Any]:
    """Qwen3-MoE and Qwen2-MoE (HF Qwen3MoeDecoderLayer / Qwen2MoeDecoderLayer): layer i is
    MoE iff i not in ``mlp_only_layers`` and ``(i + 1) % decoder_sparse_step == 0``; the other
    layers use a dense FFN of width ``intermediate_size``.

    ``qwen2`` (HF Qwen2MoeAttention / Qwen2MoeSparseMoeBlock): q/k/v biases and no q/k norm;
    each MoE layer adds one shared expert of width ``shared_expert_intermediate_size`` whose
    output is scaled by ``sigmoid(shared_expert_gate(x))`` (an H x 1 linear).
    ``intermediate_size`` is required only where a layer is dense: a config whose layers
    are all MoE may leave it out (no layer reads it; HF's config class would fill in its
    default)."""
    spec = _dense(f, data, qk_norm=not qwen2, qkv_bias=True if qwen2 else None,
                  ffn_optional=True)
    num_layers = len(spec["layers"])
    num_experts = f.integer("num_experts")
    top_k = f.integer("num_experts_per_tok")
    _moe_check(f, num_experts, top_k, "num_experts_per_tok")
    step = f.integer("decoder_sparse_step", 1)
    mlp_only = f.data.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < num_layers for i in mlp_only
    ):
        raise f.error("mlp_only_layers", f"a list of layer indices in [0, {num_layers})", mlp_only)
    layers = tuple(
        LayerSpec(is_moe=i not in mlp_only and (i + 1) % step == 0, window=layer.window)
        for i, layer in enumerate(spec["layers"])
    )
    has_dense = not all(layer.is_moe for layer in layers)
    if qwen2:
        # Qwen2MoeConfig defaults it to 5632 (transformers@008e574391258935f3ecc3035c882e73b
        # bcac419): a config that leaves it out is not taken as having no shared expert.
        _stated(f, {"shared_expert_intermediate_size": "an integer >= 0, or null for none"},
                "qwen2_moe", "transformers' Qwen2MoeConfig would take a 5,632-wide shared "
                "expert")
    shared = f.integer("shared_expert_intermediate_size", 0, minimum=0) if qwen2 else 0
    return spec | {
        "dense_intermediate_size": f.integer("intermediate_size") if has_dense else 0,
        "moe": MoESpec(num_experts, top_k, f.integer("moe_intermediate_size"),
                       num_shared_experts=1 if shared else 0, shared_intermediate_size=shared,
                       shared_expert_gate=shared > 0),
        "layers": layers,
    }


#: The MoE fields a config of the DeepSeek MoE layout (``deepseek_v2``, ``deepseek_v3``,
#: ``deepseek_v32``, ``glm_moe_dsa``, ``kimi_k2``, ``glm4_moe``) must state, with what each
#: takes: the classes the engines may read it with default them to other shapes
#: (huggingface/transformers@008e574391258935f3ecc3035c882e73bbcac419: ``DeepseekV2Config``
#: 64 routed experts, 2 shared, no dense layers first; ``DeepseekV3Config`` 256, 1, 3;
#: ``Glm4MoeConfig`` 128, 1, 1; DeepSeek's remote ``configuration_deepseek.py``, which
#: ``trust_remote_code`` loads instead: none, none, 0), so l2s takes none of them. Null
#: counts as stated (a dense model, no shared expert, no dense layers first); with
#: ``n_routed_experts`` null the other two are not read.
DEEPSEEK_STATED_MOE_FIELDS: dict[str, str] = {
    "n_routed_experts": "an integer >= 1, or null for a dense model",
    "n_shared_experts": "an integer >= 0, or null for none",
    "first_k_dense_replace": "an integer >= 0, or null for none",
}


def _stated(f: _Fields, fields: dict[str, str], model_type: str, why: str) -> None:
    """Refuse a config that leaves out one of ``fields`` (field -> what it takes; null
    counts as given), saying ``why`` it is not defaulted.

    Raises:
        ConfigError: naming the first missing field, what it takes and ``why``.
    """
    for key, takes in fields.items():
        if key not in f.data:
            raise f.error(key, f"{takes}: a {model_type} config states it, as {why}; l2s "
                               f"does not guess")


def _deepseek_moe(f: _Fields, num_layers: int, topk_method_default: str,
                  model_type: str) -> tuple[list[bool], MoESpec | None]:
    """The DeepSeek-V3 MoE layout (HF DeepseekV3DecoderLayer, also HF Glm4MoeDecoderLayer):
    layer i is MoE iff ``n_routed_experts`` is set, ``i >= first_k_dense_replace`` and
    ``i % moe_layer_freq == 0``; ``n_shared_experts`` shared experts of the routed width; the
    router carries ``e_score_correction_bias`` under ``topk_method`` ``noaux_tc``. The config
    must state :data:`DEEPSEEK_STATED_MOE_FIELDS` (``model_type`` names it in the message).

    Raises:
        ConfigError: a stated field missing, or MoE fields without ``n_routed_experts``."""
    num_experts = f.opt_integer("n_routed_experts")
    why = "the engines' config classes default it to other shapes"
    if num_experts is None:     # a dense model: the shared experts and dense layers are moot
        routed = [k for k in ("num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
                              "num_experts") if f.data.get(k)]
        if routed:
            # MoE fields without the expert count: a dense model would be planned silently
            raise f.error("n_routed_experts", f"the routed-expert count; {', '.join(routed)} "
                          f"{'is' if len(routed) == 1 else 'are'} given without it")
        _stated(f, {"n_routed_experts": DEEPSEEK_STATED_MOE_FIELDS["n_routed_experts"]},
                model_type, why)
        return [False] * num_layers, None
    _stated(f, DEEPSEEK_STATED_MOE_FIELDS, model_type, why)
    first_dense = f.integer("first_k_dense_replace", 0, minimum=0)
    freq = f.integer("moe_layer_freq", 1)
    is_moe = [i >= first_dense and i % freq == 0 for i in range(num_layers)]
    top_k = f.integer("num_experts_per_tok")
    _moe_check(f, num_experts, top_k, "num_experts_per_tok")
    width = f.integer("moe_intermediate_size")
    shared = f.integer("n_shared_experts", 0, minimum=0)
    topk_method = f.string("topk_method", topk_method_default)
    return is_moe, MoESpec(
        num_experts=num_experts,
        top_k=top_k,
        expert_intermediate_size=width,
        num_shared_experts=shared,
        shared_intermediate_size=width if shared else 0,
        router_bias=topk_method == "noaux_tc",  # e_score_correction_bias
    )


def _deepseek(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """DeepSeek-V2/V3/V3.2 and Kimi-K2 (HF DeepseekV3DecoderLayer): layer i is MoE iff
    ``n_routed_experts`` is set, ``i >= first_k_dense_replace`` and ``i % moe_layer_freq == 0``.

    DeepSeek-V3.2 (``index_topk``) adds a lightning indexer per layer (deepseek-ai/
    DeepSeek-V3.2-Exp ``inference/model.py`` class ``Indexer``): ``wq_b`` q_lora_rank x
    (index_n_heads * index_head_dim), ``wk`` H x index_head_dim, ``k_norm`` LayerNorm
    (weight + bias, index_head_dim each), ``weights_proj`` H x index_n_heads.

    Only the main model is described: the multi-token-prediction layers counted by
    ``num_nextn_predict_layers`` are ignored (they are not used for ordinary decoding).
    """
    common = _common(f, data)
    num_layers = f.integer("num_hidden_layers", maximum=MAX_LAYERS)
    heads = f.integer("num_attention_heads")
    rope = f.integer("qk_rope_head_dim", minimum=0)
    bias = f.flag("attention_bias", False)
    indexer, topk, key_bytes = 0, None, 0
    if f.has("index_topk"):
        topk = f.integer("index_topk")
        n_idx, d_idx = f.integer("index_n_heads"), f.integer("index_head_dim")
        hidden = f.integer("hidden_size")
        indexer = (f.integer("q_lora_rank") * n_idx * d_idx + hidden * d_idx + 2 * d_idx
                   + hidden * n_idx)
        # FP8 keys with a 4-byte scale per 128 (AttentionSpec.indexer_key_bytes).
        key_bytes = d_idx + 4 * (d_idx // 128)
    attention = AttentionSpec(
        kind=AttentionKind.MLA,
        num_heads=heads,
        num_kv_heads=1,
        head_dim=f.integer("qk_nope_head_dim") + rope,
        v_head_dim=f.integer("v_head_dim"),
        q_lora_rank=f.opt_integer("q_lora_rank"),
        kv_lora_rank=f.integer("kv_lora_rank"),
        qk_rope_head_dim=rope,
        qkv_bias=bias,
        o_bias=bias,
        indexer_params=indexer,
        sparse_topk=topk,
        indexer_key_bytes=key_bytes,
    )
    is_moe, moe = _deepseek_moe(f, num_layers, "greedy",
                                str(f.data.get("model_type") or "DeepSeek"))
    return common | {
        "attention": attention,
        "dense_intermediate_size": 0 if all(is_moe) else f.integer("intermediate_size"),
        "gated_mlp": True,
        "moe": moe,
        "layers": tuple(LayerSpec(is_moe=m) for m in is_moe),
    }


def _gpt_oss(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """gpt-oss: all layers MoE (biased router and experts), attention with q/k/v/o biases and
    per-head sinks; ``layer_types`` ``sliding_attention`` -> ``window = sliding_window``
    (HF GptOssConfig default when absent: even layers slide)."""
    common = _common(f, data)
    num_layers = f.integer("num_hidden_layers", maximum=MAX_LAYERS)
    window = f.integer("sliding_window")
    windows = _windows_from_layer_types(
        f, num_layers, {"full_attention": None, "sliding_attention": window}
    )
    if windows is None:
        windows = [window if i % 2 == 0 else None for i in range(num_layers)]
    num_experts = f.integer("num_local_experts")
    key = "num_experts_per_tok" if f.has("num_experts_per_tok") else "experts_per_token"
    top_k = f.integer(key)
    _moe_check(f, num_experts, top_k, key)
    attention = _gqa_attention(f, common["hidden_size"], qk_norm=False, sinks=True)
    return common | {
        "attention": attention,
        "dense_intermediate_size": 0,
        "gated_mlp": True,
        "moe": MoESpec(
            num_experts, top_k, f.integer("intermediate_size"), router_bias=True, expert_bias=True
        ),
        "layers": tuple(LayerSpec(is_moe=True, window=w) for w in windows),
    }


def _llama4(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """Llama-4 text model (HF Llama4TextConfig / Llama4TextDecoderLayer).

    MoE layers: ``moe_layers`` if given, else layer i is MoE iff
    ``(i + 1) % interleave_moe_layer_step == 0``. MoE layers hold ``num_local_experts`` routed
    experts and one shared expert, both of width ``intermediate_size``; dense layers use
    ``intermediate_size_mlp``. Attention: RoPE layers use chunked attention (``window =
    attention_chunk_size``, ``chunked``); NoPE layers are global. ``no_rope_layers[i] == 1`` means
    layer i uses RoPE; absent, null or empty (``[]``, as RedHatAI's Scout FP8 config writes
    it) it defaults, as in HF ``Llama4TextConfig``, to NoPE every ``no_rope_layer_interval``
    (default 4) layers: ``(i + 1) % interval == 0``. ``layer_types`` (``chunked_attention`` /
    ``full_attention``), when present, wins.
    """
    common = _common(f, data)
    num_layers = f.integer("num_hidden_layers", maximum=MAX_LAYERS)
    step = f.integer("interleave_moe_layer_step", 1)
    if f.has("moe_layers"):
        moe_idx = f.data["moe_layers"]
        if not isinstance(moe_idx, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < num_layers for i in moe_idx
        ):
            raise f.error("moe_layers", f"a list of layer indices in [0, {num_layers})", moe_idx)
        is_moe = [i in moe_idx for i in range(num_layers)]
    else:
        is_moe = [(i + 1) % step == 0 for i in range(num_layers)]
    chunk = f.opt_integer("attention_chunk_size")
    windows = _windows_from_layer_types(
        f, num_layers, {"full_attention": None, "chunked_attention": chunk}
    )
    if windows is None:
        interval = f.integer("no_rope_layer_interval", 4)
        rope = [] if f.data.get("no_rope_layers") == [] else \
            f.items("no_rope_layers", num_layers, lambda v: v in (0, 1), "0/1 flags")
        rope = rope or [int((i + 1) % interval != 0) for i in range(num_layers)]
        windows = [chunk if r else None for r in rope]
    num_experts = f.integer("num_local_experts")
    top_k = f.integer("num_experts_per_tok")
    _moe_check(f, num_experts, top_k, "num_experts_per_tok")
    width = f.integer("intermediate_size")
    return common | {
        "attention": _gqa_attention(f, common["hidden_size"], qk_norm=f.flag("use_qk_norm", True)),
        "dense_intermediate_size": 0 if all(is_moe) else f.integer("intermediate_size_mlp"),
        "gated_mlp": True,
        "moe": MoESpec(num_experts, top_k, width, 1, width),
        "layers": tuple(
            LayerSpec(is_moe=m, window=w, chunked=w is not None)
            for m, w in zip(is_moe, windows, strict=True)
        ),
    }


def _minimax_m2(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """MiniMax-M2 (MiniMaxAI/MiniMax-M2 ``modeling_minimax_m2.py``): every layer is MoE with
    ``num_local_experts`` experts of width ``intermediate_size``, a sigmoid router with an
    ``e_score_correction_bias`` (``use_routing_bias``), GQA attention with q/k RMSNorm over all
    heads (``qk_norm_type: per_layer``). The MTP modules (``use_mtp``) are not part of the
    main model and are not counted."""
    common = _common(f, data)
    num_layers = f.integer("num_hidden_layers", maximum=MAX_LAYERS)
    num_experts = f.integer("num_local_experts")
    top_k = f.integer("num_experts_per_tok")
    _moe_check(f, num_experts, top_k, "num_experts_per_tok")
    shared = f.integer("shared_intermediate_size", 0, minimum=0)
    qk_norm = f.flag("use_qk_norm", False)
    attention = _gqa_attention(f, common["hidden_size"], qk_norm=qk_norm)
    full = qk_norm and f.string("qk_norm_type", "per_layer") == "per_layer"
    return common | {
        "attention": dataclasses.replace(attention, qk_norm_full_width=full),
        "dense_intermediate_size": 0,
        "gated_mlp": True,
        "moe": MoESpec(num_experts, top_k, f.integer("intermediate_size"),
                       num_shared_experts=1 if shared else 0, shared_intermediate_size=shared,
                       router_bias=f.flag("use_routing_bias", False)),
        "layers": tuple(LayerSpec(is_moe=True) for _ in range(num_layers)),
    }


def _tied_unless_false(f: _Fields, data: dict[str, Any]) -> bool:
    """``tie_word_embeddings`` of a family whose HF config class ties by default (Gemma,
    Gemma-2/3, Cohere, Cohere2): the text config's value, else the top level's, true unless
    false."""
    return f.flag("tie_word_embeddings", data.get("tie_word_embeddings") is not False)


def _interleaved_windows(f: _Fields, num_layers: int, window: int | None,
                         global_every: int) -> list[int | None]:
    """Per-layer windows of a model that interleaves sliding-window and global layers
    (Gemma-2/3, Cohere2): ``layer_types`` where the config has it, else layer i is global
    iff ``(i + 1) % global_every == 0`` and slides over ``window`` tokens otherwise (the rule
    their transformers config classes build ``layer_types`` by)."""
    windows = _windows_from_layer_types(
        f, num_layers, {"full_attention": None, "sliding_attention": window})
    if windows is None:
        windows = [None if (i + 1) % global_every == 0 else window for i in range(num_layers)]
    return windows


def _cohere2(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """Command-R7B / Command-A (HF Cohere2ForCausalLM): Command-R's layer (attention and FFN
    side by side from one LayerNorm, Llama's matrices; q/k norms only with ``use_qk_norm``),
    embeddings tied unless ``tie_word_embeddings`` is false (Cohere2Config's default), and
    windows: ``layer_types`` if present, else layer i is global iff
    ``(i + 1) % sliding_window_pattern == 0`` (default 4) and slides over ``sliding_window``
    tokens otherwise, 4096 where the config leaves it out (and 8,192 positions, the class's
    ``max_position_embeddings``) (huggingface/transformers@008e574391258935f3ecc3035c882e73bbcac419
    ``models/cohere2/configuration_cohere2.py``, which builds ``layer_types`` that way). The
    global layers apply no rotary embedding, which changes no weight or KV shape."""
    spec = _dense(f, data, qk_norm=f.flag("use_qk_norm", False))
    num_layers = len(spec["layers"])
    window = f.opt_integer("sliding_window") if f.has("sliding_window") else 4096
    windows = _interleaved_windows(f, num_layers, window,
                                   f.integer("sliding_window_pattern", 4))
    positions = {} if f.has("max_position_embeddings") else {"max_position_embeddings": 8192}
    return spec | positions | {
        "layers": tuple(LayerSpec(is_moe=False, window=w) for w in windows),
        "tie_word_embeddings": _tied_unless_false(f, data)}


def _nemotron(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """Nemotron-4 / Minitron / Nemotron-Mini (HF NemotronForCausalLM): Llama's attention
    (q/k/v/o, biases from ``attention_bias``; an explicit ``head_dim`` where heads do not
    divide the width, Minitron-8B's 48 heads of 128 over 4096) and a non-gated FFN,
    ``down_proj(relu(up_proj(x))²)`` of two matrices (HF NemotronMLP, ``hidden_act``
    ``relu2``), biased by ``mlp_bias``; untied embeddings unless ``tie_word_embeddings``.
    Its LayerNorm1P norms hold a weight and a bias (< 0.01% of the model, counted as one
    weight) and ``partial_rotary_factor`` changes no weight or KV shape."""
    return _dense(f, data, qk_norm=False) | {"gated_mlp": False}


def _olmo2(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """OLMo 2 (HF Olmo2ForCausalLM): the Llama builder with q/k RMSNorms over the whole q and
    k projections (``q_norm`` of ``num_heads × head_dim``, ``k_norm`` of
    ``num_kv_heads × head_dim``; HF Olmo2Attention); its two norms per layer sit after the
    attention and the FFN instead of before, which changes no weight count."""
    spec = _dense(f, data, qk_norm=True)
    return spec | {"attention": dataclasses.replace(spec["attention"],
                                                    qk_norm_full_width=True)}


def _internlm2(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """InternLM2 / 2.5 (remote code ``modeling_internlm2.py`` InternLM2ForCausalLM): the Llama
    builder; q/k/v live in one ``wqkv`` and the FFN in ``w1``/``w3``/``w2`` (the same
    matrices), and ``bias`` biases ``wqkv`` and ``wo`` alike."""
    bias = f.flag("bias", False)
    spec = _dense(f, data, qk_norm=False, qkv_bias=bias)
    return spec | {"attention": dataclasses.replace(spec["attention"], o_bias=bias)}


def _glm4(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """GLM-4-0414 (HF Glm4ForCausalLM): the Llama builder with q/k/v biases when
    ``attention_bias`` (o_proj has none: HF Glm4Attention), four RMSNorms per layer
    (``input_layernorm``, ``post_self_attn_layernorm``, ``post_attention_layernorm``,
    ``post_mlp_layernorm``: HF Glm4DecoderLayer's sandwich norms) and a fused ``gate_up_proj``
    holding the gate and up matrices; ``partial_rotary_factor`` (0.5) rotates half of each
    head and changes no weight or KV shape."""
    spec = _dense(f, data, qk_norm=False, qkv_bias=f.flag("attention_bias", False))
    return spec | {"attention": dataclasses.replace(spec["attention"], o_bias=False),
                   "post_norms": True}


def _gemma(f: _Fields, data: dict[str, Any], *, global_every: int,
           qk_norm: bool) -> dict[str, Any]:
    """Gemma-2 / Gemma-3 text model: the Llama builder (GeGLU is a gated FFN of 3 matrices;
    explicit ``head_dim``, Gemma-2-9B: 256 with hidden 3584 / 16 heads = 224) plus

    * four RMSNorms per layer (pre/post attention, pre/post FFN: HF Gemma2DecoderLayer);
    * tied embeddings unless ``tie_word_embeddings`` (in the text config, else at the top
      level) is false (HF Gemma2Config / Gemma3TextConfig default);
    * windows: ``layer_types`` if present, else layer i is global iff
      ``(i + 1) % global_every == 0`` and slides over ``sliding_window`` tokens otherwise
      (HF Gemma2Config: every 2nd layer global; Gemma3TextConfig: ``sliding_window_pattern``,
      default 6);
    * ``attn_logit_softcapping`` / ``final_logit_softcapping`` (Gemma-2 50 / 30; null in
      Gemma-3, which has per-head q/k RMSNorms instead: ``qk_norm``).
    """
    spec = _dense(f, data, qk_norm=qk_norm)
    num_layers = len(spec["layers"])
    windows = _interleaved_windows(f, num_layers, f.opt_integer("sliding_window"),
                                   global_every)
    attention = dataclasses.replace(spec["attention"],
                                    logit_softcap=f.opt_number("attn_logit_softcapping"))
    return spec | {
        "attention": attention,
        "layers": tuple(LayerSpec(is_moe=False, window=w) for w in windows),
        "post_norms": True,
        "tie_word_embeddings": _tied_unless_false(f, data),
        "final_logit_softcap": f.opt_number("final_logit_softcapping"),
    }


def _glm4_moe(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """GLM-4.5 / GLM-4.5-Air (HF Glm4MoeForCausalLM): the DeepSeek-V3 MoE layout
    (:func:`_deepseek_moe`; Glm4MoeTopkRouter always holds ``e_score_correction_bias``) with
    GQA attention: q/k/v biased by ``attention_bias``, o_proj unbiased, optional per-head q/k
    RMSNorm (``use_qk_norm``). ``partial_rotary_factor`` (0.5) changes neither weights nor
    the KV cache (keys are cached at full ``head_dim``). The MTP layers
    (``num_nextn_predict_layers``) are not counted."""
    common = _common(f, data)
    num_layers = f.integer("num_hidden_layers", maximum=MAX_LAYERS)
    attention = _gqa_attention(f, common["hidden_size"], qk_norm=f.flag("use_qk_norm", False),
                               qkv_bias=f.flag("attention_bias", False))
    is_moe, moe = _deepseek_moe(f, num_layers, "noaux_tc", "glm4_moe")
    return common | {
        "attention": dataclasses.replace(attention, o_bias=False),
        "dense_intermediate_size": 0 if all(is_moe) else f.integer("intermediate_size"),
        "gated_mlp": True,
        "moe": moe,
        "layers": tuple(LayerSpec(is_moe=m) for m in is_moe),
    }


def _falcon(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """Falcon (HF FalconConfig / FalconAttention / FalconDecoderLayer).

    KV heads: ``num_kv_heads`` with ``new_decoder_architecture`` (Falcon-40B/180B GQA) or
    without ``multi_query``; 1 (MQA) for ``multi_query`` on the old architecture (Falcon-7B,
    whose config also says ``num_kv_heads: 71``, which HF ignores there). ``query_key_value``
    is the fused q/k/v projection, H x (heads + 2 kv) · head_dim with head_dim = H / heads.
    The MLP is non-gated (``dense_h_to_4h`` H x ``ffn_hidden_size``, default 4H, GELU) and
    every linear carries a bias iff ``bias``. Embeddings are tied unless
    ``tie_word_embeddings`` is false (FalconConfig default). Norms are LayerNorms
    (weight + bias): one per layer in Falcon-7B's parallel block (2H, the same count as two
    RMSNorm weights), two in the new architecture (4H, counted as 2H: < 0.01% of the model).
    """
    common = _common(f, data)      # positions: TRANSFORMERS_MAX_POSITIONS where left out
    hidden = common["hidden_size"]
    num_layers = f.integer("num_hidden_layers", maximum=MAX_LAYERS)
    heads = f.integer("num_attention_heads")
    if hidden % heads:
        raise ConfigError(f"{f.source}: field '{f.prefix}hidden_size' ({hidden}) must be a "
                          f"multiple of '{f.prefix}num_attention_heads' ({heads})")
    new_arch = f.flag("new_decoder_architecture", False)
    multi_query = f.flag("multi_query", True)
    kv_heads = f.integer("num_kv_heads", heads) if new_arch or not multi_query else 1
    if heads % kv_heads:
        raise ConfigError(f"{f.source}: field '{f.prefix}num_kv_heads' ({kv_heads}) must "
                          f"divide '{f.prefix}num_attention_heads' ({heads})")
    bias = f.flag("bias", False)
    head_dim = hidden // heads
    attention = AttentionSpec(kind=AttentionKind.GQA, num_heads=heads, num_kv_heads=kv_heads,
                              head_dim=head_dim, v_head_dim=head_dim, qkv_bias=bias,
                              o_bias=bias)
    return common | {
        "attention": attention,
        "dense_intermediate_size": f.integer("ffn_hidden_size", 4 * hidden),
        "gated_mlp": False,
        "mlp_bias": bias,
        "moe": None,
        "layers": tuple(LayerSpec(is_moe=False) for _ in range(num_layers)),
        "tie_word_embeddings": f.flag("tie_word_embeddings", True),
        "parallel_attn": f.flag("parallel_attn", True),
    }


def _vision_params(data: dict[str, Any], source: str, wrapper: str | None,
                   text_hidden: int) -> int:
    """Estimated parameters of a wrapper's vision tower from ``vision_config`` (0 if absent):
    its ViT blocks, patch and position embeddings, and the projector into the language
    model's width ``text_hidden``.

    * ViT width ``H``: ``hidden_size`` (``embed_dim`` where Qwen2-VL gives it, whose
      ``hidden_size`` is the merger's output), ``depth`` / ``num_hidden_layers`` blocks,
      FFN width ``intermediate_size`` (or ``mlp_ratio × H``).
    * Per block: q/k/v/o ``4 H² + 4 H``, two norms ``4 H``, and the FFN: three matrices where
      the activation is SiLU (gated: HF Qwen2_5_VLMLP, PixtralMLP), else two (fc1/fc2: HF
      CLIPMLP, SiglipMLP, Qwen3VLVisionMLP), with biases.
    * Patch embedding ``C · P² · T · H``; position embeddings ``num_position_embeddings``
      (or ``(image_size / P)²``) × ``H``, none for Pixtral's 2D rotary positions.
    * Projector: Qwen-VL's patch mergers (``out_hidden_size`` or Qwen2-VL's
      ``hidden_size``; ``spatial_merge_size`` m: LayerNorm and two linears
      ``(m² H)² + m² H · out``), one plus one per ``deepstack_visual_indexes`` entry
      (Qwen3-VL); Gemma-3's one ``H × text_hidden`` projection; Llama-4's pixel-shuffle MLP
      (HF Llama4VisionMLP2: ``intermediate_size`` → ``projector_input_dim``, then
      ``projector_output_dim`` square) and its ``vision_output_dim × text_hidden``
      projector; otherwise LLaVA's two-layer
      MLP ``w H × text_hidden + text_hidden²`` over ``w`` = ``H`` (LLaVA), 4 ``H`` (InternVL's
      ``downsample_ratio`` 0.5 pixel shuffle) or Mistral3's patch merger ``m² H × H`` first.

    Raises:
        ConfigError: ``vision_config`` is not an object, or a field read here is present but
            not what it must be (sizes positive integers, ``depth`` at most
            :data:`MAX_LAYERS`, ``mlp_ratio`` a positive number, ``downsample_ratio`` in
            [1/16, 1]); the message names ``source`` and the field, as for the text config.
    """
    if data.get("vision_config") is None:
        return 0
    vf = _Fields(data, source).obj("vision_config")
    v, top = vf.data, _Fields(data, source)

    def num(*keys: str, default: int = 0, maximum: int = _MAX_INT) -> int:
        for k in keys:                # the first key present is read, and must be valid
            if vf.has(k):
                return vf.integer(k, maximum=maximum)
        return default

    qwen2_vl = num("embed_dim") > 0
    h = num("embed_dim") if qwen2_vl else num("hidden_size", "width")
    depth = num("depth", "num_hidden_layers", "layers", maximum=MAX_LAYERS)
    ratio = vf.opt_number("mlp_ratio")
    default_inter = int(ratio * h) if ratio is not None else 4 * h
    inter = num("intermediate_size", "mlp_dim", default=default_inter)
    patch = num("patch_size", default=14)
    act = vf.string("hidden_act", vf.string("hidden_activation", "")).lower()
    gated = "silu" in act or "swiglu" in act
    ffn = (3 * h * inter + 2 * inter + h) if gated else (2 * h * inter + inter + h)
    blocks = depth * (4 * h * h + 4 * h + ffn + 4 * h)
    embed = num("in_channels", "num_channels", default=3) * patch * patch \
        * num("temporal_patch_size", default=1) * h
    image = num("image_size")
    # Pixtral (Mistral3) and Qwen-VL rotate positions (2D RoPE): no learned table
    positions = 0 if wrapper == "mistral3" else num(
        "num_position_embeddings", default=(image // patch) ** 2 if image else 0) * h
    # Mistral3 states the merge at the top level
    merge = num("spatial_merge_size", default=top.integer("spatial_merge_size", 1))
    out = num("out_hidden_size", default=num("hidden_size") if qwen2_vl else 0)
    if out:                                   # Qwen-VL patch mergers
        wide = merge * merge * h
        deep = v.get("deepstack_visual_indexes")
        if deep is not None and not (isinstance(deep, list) and all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in deep)):
            raise vf.error("deepstack_visual_indexes", "a list of layer indices", deep)
        count = 1 + (len(deep) if deep else 0)
        projector = count * (2 * wide + wide * wide + wide + wide * out + out)
    elif wrapper == "gemma3":
        projector = h * text_hidden
    elif wrapper == "llama4":                 # pixel-shuffle MLP, then the projector
        p_in, p_out = num("projector_input_dim", default=h), num("projector_output_dim",
                                                                  default=h)
        projector = inter * p_in + p_out * p_out \
            + num("vision_output_dim", default=p_out) * text_hidden
    else:
        ratio_ds = top.opt_number("downsample_ratio")
        if ratio_ds is not None and not 1 / 16 <= ratio_ds <= 1:
            raise top.error("downsample_ratio", "a number in [0.0625, 1] (InternVL's pixel "
                            "shuffle keeps this fraction of each image side)", ratio_ds)
        wide = h * merge * merge if wrapper == "mistral3" else \
            int(round(h / ratio_ds ** 2)) if ratio_ds is not None else h
        merger = wide * h if wrapper == "mistral3" else 0
        w_in = h if wrapper == "mistral3" else wide
        projector = merger + w_in * text_hidden + text_hidden * text_hidden
    return blocks + embed + positions + projector


def load_model(name_or_path: str) -> ModelSpec:
    """Reads a model config and returns its :class:`ModelSpec`.

    Args:
        name_or_path: a path to an HF ``config.json`` or a model folder holding one (and
            optionally ModelOpt's ``hf_quant_config.json``), read first so that a local copy
            shadows a shipped name; a shipped model name (see :func:`shipped_model_names`,
            e.g. ``"llama-3.1-70b"``); or a HuggingFace repo id ``org/name`` found in the
            local HF cache (:func:`hf_cache_dir`; nothing is downloaded).

    Returns:
        The model's spec. ``name`` is the shipped name, the file stem (the parent directory's
        name for a file called ``config.json``) or the repo id's name; ``source`` is the file
        read and ``source_kind`` which of the three places it came from. For DeepSeek-style
        configs only the main model is described (MTP layers are ignored); for multimodal
        wrappers the language model (``vision_params`` estimates the vision tower).

    Raises:
        ConfigError: unknown shipped name (the message lists the shipped names), missing or
            unreadable file, invalid JSON, or a missing / wrongly typed required field (the
            message names the file and the field and says what would be valid).
        UnsupportedModelError: a well-formed config of an architecture the planner cannot model
            (unknown ``model_type``, encoder-decoder such as Switch-C, DeepSeek-V4 attention,
            hybrid linear-attention / Mamba layers, an unpriced quantisation format); the
            message lists what is supported.
    """
    src = _read(name_or_path)
    data, source = src.data, src.source
    _reject_unsupported(data, source)
    top = _Fields(data, source)
    model_type = data["model_type"]
    wrapper: str | None = None
    f, text_type = top, model_type
    key = next((k for k in _WRAPPER_KEYS if isinstance(data.get(k), dict)), None)
    if key is not None and model_type not in ("llama4_text",):
        f = top.obj(key)
        wrapper = model_type
        text_type = f.data.get("model_type", _FLAT_WRAPPERS.get(
            model_type, "gemma3_text" if model_type == "gemma3" else "llama"))
        if model_type == "llama4":
            text_type = "llama4_text"
    elif model_type in _FLAT_WRAPPERS:
        wrapper, text_type = model_type, _FLAT_WRAPPERS[model_type]
    elif model_type in ("llava", "llava_next", "mistral3", "internvl_chat", "internvl",
                        "qwen3_vl", "qwen3_vl_moe", "gemma3"):
        # present but not an object names its value; absent, the field
        given = next((k for k in _WRAPPER_KEYS if data.get(k) is not None), "text_config")
        raise top.error(given, "a JSON object (the wrapper's language model)",
                        *((data[given],) if given in data else ()))
    spelled = str(text_type)
    text_type = _TEXT_ALIASES.get(str(text_type), text_type)
    if text_type == "llama4":
        text_type = "llama4_text"
    if text_type == "gemma3_text":       # the fields a trimmed config leaves to transformers
        # only absent keys: an explicit null (sliding_window: null, no window) stays one
        f = _Fields({**_GEMMA3_TEXT_DEFAULTS, **f.data}, f.source, f.prefix)
    elif text_type in ("llama", "mistral") and wrapper in ("llava", "llava_next") \
            and f is not top:
        defaults = _LLAMA_TEXT_DEFAULTS if text_type == "llama" else _MISTRAL_TEXT_DEFAULTS
        f = _Fields({**defaults, **f.data}, f.source, f.prefix)
    positions_default = ""
    if "max_position_embeddings" in f.data and f.data["max_position_embeddings"] is None:
        # null: transformers keeps None, and vLLM, finding no length, assumes 2048
        f = _Fields({**f.data, "max_position_embeddings": VLLM_DEFAULT_MAX_LEN}, f.source,
                    f.prefix)
        positions_default = (f"vLLM's assumed length: the config's "
                             f"{f.prefix}max_position_embeddings is null")
    elif not f.has("max_position_embeddings"):
        # the config class's default, as transformers gives it to the engines
        known = _VL_TEXT_MAX_POSITIONS.get(spelled) or TRANSFORMERS_MAX_POSITIONS.get(
            str(text_type))
        if known is not None:
            f = _Fields({**f.data, "max_position_embeddings": known[0]}, f.source, f.prefix)
            positions_default = (f"the {spelled} config class's default: the config leaves "
                                 f"{f.prefix}max_position_embeddings out")
        elif text_type in ("kimi_k2", "internlm2"):
            raise f.error("max_position_embeddings",
                          f"the context length in tokens: the {text_type} config class is "
                          f"remote code, whose default l2s does not know")
    builders: dict[str, Callable[[], dict[str, Any]]] = {
        "llama": lambda: _dense(f, data, qk_norm=False),
        "mistral": lambda: _dense(f, data, qk_norm=False, window_all=True),
        "qwen2": lambda: _dense(f, data, qk_norm=False, qkv_bias=True),
        "qwen3": lambda: _dense(f, data, qk_norm=True),
        "mixtral": lambda: _mixtral(f, data),
        "phimoe": lambda: _mixtral(f, data),     # Phi-3.5-MoE: the Mixtral layout + biases
        "qwen3_moe": lambda: _qwen_moe(f, data),
        "qwen2_moe": lambda: _qwen_moe(f, data, qwen2=True),
        "phi3": lambda: _dense(f, data, qk_norm=False, window_all=True),
        "granite": lambda: _dense(f, data, qk_norm=False),
        "olmo2": lambda: _olmo2(f, data),
        "glm4": lambda: _glm4(f, data),
        "internlm2": lambda: _internlm2(f, data),
        "cohere": lambda: _dense(f, data, qk_norm=f.flag("use_qk_norm", False)) | {
            "tie_word_embeddings": _tied_unless_false(f, data)},
        "cohere2": lambda: _cohere2(f, data),
        "nemotron": lambda: _nemotron(f, data),
        "gemma": lambda: _dense(f, data, qk_norm=False) | {
            "tie_word_embeddings": _tied_unless_false(f, data)},
        "gemma2": lambda: _gemma(f, data, global_every=2, qk_norm=False),
        "gemma3_text": lambda: _gemma(
            f, data, global_every=f.integer("sliding_window_pattern", 6), qk_norm=True),
        "glm4_moe": lambda: _glm4_moe(f, data),
        "falcon": lambda: _falcon(f, data),
        "deepseek_v2": lambda: _deepseek(f, data),
        "deepseek_v3": lambda: _deepseek(f, data),
        "deepseek_v32": lambda: _deepseek(f, data),
        "glm_moe_dsa": lambda: _deepseek(f, data),     # GLM-5: the DeepSeek-V3.2 layout
        "kimi_k2": lambda: _deepseek(f, data),
        "gpt_oss": lambda: _gpt_oss(f, data),
        "llama4_text": lambda: _llama4(f, data),
        "minimax_m2": lambda: _minimax_m2(f, data),
    }
    if text_type not in builders:
        raise UnsupportedModelError(
            f"{source}: {key or 'model'}.model_type {_short(text_type)} (the language model of "
            f"wrapper {model_type!r}) is not supported; supported language models: "
            f"{', '.join(builders)}")
    fields = builders[str(text_type)]()
    moe_layers = [layer.is_moe for layer in fields["layers"]] if fields["moe"] is not None \
        else [False] * len(fields["layers"])
    # quantization_config sits at the top level (or, rarely, inside the text config).
    qf = top if top.has("quantization_config") or not f.has("quantization_config") else f
    quant = read_quant(qf, src.quant, src.quant_source, moe_layers)
    block = _weight_block_size(qf)
    expert_bits = quant.weight_bits if quant is not None and quant.packed \
        and quant.experts_only else None
    return ModelSpec(name=src.name, source=source, source_kind=src.kind, repo_id=src.repo_id,
                     remote_code=isinstance(data.get("auto_map"), dict), quant=quant,
                     weight_block_size=block, expert_weight_bits=expert_bits,
                     wrapper=wrapper,
                     vision_params=_vision_params(data, source, wrapper, fields["hidden_size"])
                     if wrapper else 0,
                     image_tokens=image_tokens(wrapper, data) if wrapper else None,
                     positions_default=positions_default, **fields)
