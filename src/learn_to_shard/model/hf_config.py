"""HuggingFace ``config.json`` -> :class:`ModelSpec`.

Supported ``model_type`` values and the HF fields each one reads:

* ``llama``, ``qwen3`` (dense, GQA; Qwen3 adds per-head q/k RMSNorm);
* ``mixtral`` (every layer MoE, ``sliding_window`` null or int);
* ``qwen3_moe`` (``decoder_sparse_step``, ``mlp_only_layers``, explicit ``head_dim``);
* ``deepseek_v2``, ``deepseek_v3``, ``kimi_k2`` (MLA attention, ``first_k_dense_replace`` dense
  layers then an MoE layer every ``moe_layer_freq``, shared experts, FP8 weight blocks);
* ``gpt_oss`` (``layer_types`` sliding/full attention, biases, attention sinks);
* ``llama4`` (multimodal wrapper; only ``text_config`` is read) and ``llama4_text``.

The layer-pattern rules are those of the HF ``transformers`` modelling code for each family
(cited at the functions below). Encoder-decoder models (T5 / Switch Transformers) and
DeepSeek-V4's compressed sparse attention are rejected with :class:`UnsupportedModelError`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, UnsupportedModelError
from ..jsonio import loads_strict
from .spec import AttentionKind, AttentionSpec, LayerSpec, ModelSpec, MoESpec

if TYPE_CHECKING:
    from importlib.abc import Traversable

__all__ = ["SUPPORTED_MODEL_TYPES", "load_model", "shipped_model_names"]

SUPPORTED_MODEL_TYPES: tuple[str, ...] = (
    "llama",
    "qwen3",
    "qwen3_moe",
    "mixtral",
    "deepseek_v2",
    "deepseek_v3",
    "kimi_k2",
    "gpt_oss",
    "llama4",
    "llama4_text",
)
"""``model_type`` values :func:`load_model` accepts."""

_MISSING: Any = object()
_ENCODER_DECODER_TYPES = frozenset(
    {"t5", "mt5", "umt5", "switch_transformers", "bart", "mbart", "pegasus", "longt5", "whisper"}
)
_GIN_ENCODER_DECODER_KEYS = ("NUM_ENCODER_LAYERS", "NUM_DECODER_LAYERS", "EXPERT_MLP_DIM")
_DEEPSEEK_V4_KEYS = ("compress_ratios", "o_lora_rank", "hc_mult", "o_groups", "index_topk")


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
    return {
        f.name[: -len(".json")]: f
        for f in _models_dir().iterdir()
        if f.name.endswith(".json") and f.is_file()
    }


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


def shipped_model_names() -> list[str]:
    """Names of the supported model configs shipped in ``learn_to_shard/data/models``.

    Returns:
        Sorted file stems (e.g. ``"llama-3.1-70b"``) that :func:`load_model` accepts. The shipped
        configs of unsupported architectures (``switch-c-2048``, ``deepseek-v4-pro``) are left out.
    """
    return list(_supported_shipped())


def _read(name_or_path: str) -> tuple[dict[str, Any], str, str]:
    """Returns ``(json object, source label, short name)``; raises ConfigError."""
    shipped = _shipped_files()
    if name_or_path in shipped:
        resource = shipped[name_or_path]
        source, name = str(resource), name_or_path
        try:
            text = resource.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{source}: cannot read shipped config: {exc}") from exc
    else:
        if not name_or_path.strip():
            raise ConfigError("--model: empty; give a shipped model name or a config.json path")
        path = Path(name_or_path)
        looks_like_path = path.suffix == ".json" or "/" in name_or_path or "\\" in name_or_path
        if path.is_dir():
            path = path / "config.json"
        elif not path.exists() and not looks_like_path:
            raise ConfigError(
                f"unknown model '{name_or_path}': not a shipped model or an existing file; "
                f"shipped models: {', '.join(shipped_model_names())} (or pass a config.json path)"
            )
        source = str(path)
        name = path.parent.name if path.stem == "config" and path.parent.name else path.stem
        if not path.is_file():
            what = "not a regular file" if path.exists() else "config file not found"
            raise ConfigError(f"{source}: {what} (expected an HF config.json)")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{source}: cannot read config file: {exc}") from exc
    data = loads_strict(text, source)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: top level must be a JSON object (an HF config.json), "
            f"got {type(data).__name__}"
        )
    return data, source, name


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
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedModelError(
            f"{source}: model_type {_short(model_type)} is not supported; {supported}"
        )


# ---------------------------------------------------------------------------------------------
# Shared field readers
# ---------------------------------------------------------------------------------------------


def _gqa_attention(f: _Fields, hidden: int, *, qk_norm: bool, sinks: bool = False) -> AttentionSpec:
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
        qkv_bias=bias,
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


def _common(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """Fields every family shares (``data`` is the top-level object, for dtype/architectures)."""
    archs = data.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    dtype = data.get("torch_dtype", data.get("dtype", f.data.get("torch_dtype")))
    return {
        "architecture": arch or str(data["model_type"]),
        "hidden_size": f.integer("hidden_size"),
        "vocab_size": f.integer("vocab_size"),
        "tie_word_embeddings": f.flag("tie_word_embeddings", False),
        "native_dtype": dtype if isinstance(dtype, str) else "bfloat16",
        "max_position_embeddings": f.integer("max_position_embeddings", 0, minimum=0),
        "expert_weight_bits": _expert_weight_bits(f),
    }


#: Bits per routed-expert weight of checkpoints whose experts are quantised below 8 bits:
#: MXFP4 is 4-bit E2M1 values with one 8-bit E8M0 scale per 32 (OCP Microscaling Formats
#: spec v1.0), 4 + 8/32 = 4.25 bits; gpt-oss quantises only its experts (its
#: ``modules_to_not_convert`` lists attention, router, embedding and LM head).
_EXPERT_BITS = {"mxfp4": 4.25}
#: Quantisation methods whose weights the workload's ``--dtype fp8`` describes: FP8
#: checkpoints (DeepSeek ``fp8``, Meta's ``fbgemm_fp8``; ModelOpt and compressed-tensors are
#: checked for 8-bit float weights in :func:`_is_fp8`).
_DTYPE_QUANT = ("fp8", "fbgemm_fp8")


def _is_fp8(method: object, q: dict[str, Any]) -> bool:
    """Whether a ModelOpt / compressed-tensors ``quantization_config`` stores 8-bit floats."""
    if method == "modelopt":     # FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO (128×128 blocks)
        return str(q.get("quant_algo", "")).upper().startswith("FP8")
    if method == "compressed-tensors":
        if q.get("format") == "float-quantized":
            return True
        groups = q.get("config_groups")
        if isinstance(groups, dict) and groups:
            weights = [g.get("weights") for g in groups.values() if isinstance(g, dict)]
            return all(isinstance(w, dict) and w.get("num_bits") == 8
                       and w.get("type") == "float" for w in weights) and bool(weights)
    return False


def _expert_weight_bits(f: _Fields) -> float | None:
    """``quantization_config.quant_method`` -> bits per expert weight (None: the dtype's).

    Raises:
        UnsupportedModelError: a method the cost model cannot price (AWQ, GPTQ, bitsandbytes,
            …): planning it at 16 or 8 bits would misstate what fits.
    """
    if not f.has("quantization_config"):
        return None
    q = f.obj("quantization_config")
    method = q.data.get("quant_method")
    if method in _EXPERT_BITS:
        return _EXPERT_BITS[method]
    if method is None or method in _DTYPE_QUANT or _is_fp8(method, q.data):
        return None
    algo = q.data.get("quant_algo")
    what = f"{method!r}" + (f" (quant_algo {algo!r})" if algo is not None else "")
    raise UnsupportedModelError(
        f"{f.source}: quantization_config.quant_method {what} is not modelled; supported: "
        f"FP8 checkpoints (fp8, fbgemm_fp8, ModelOpt FP8, compressed-tensors float8; plan "
        f"with --dtype fp8), mxfp4 (expert weights at 4.25 bits), or none (16-bit weights)")


def _weight_block_size(f: _Fields) -> tuple[int, int] | None:
    if not f.has("quantization_config"):
        return None
    q = f.obj("quantization_config")
    if not q.has("weight_block_size"):
        return None
    block = q.items(
        "weight_block_size",
        2,
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
        "positive integers",
    )
    return (block[0], block[1])


# ---------------------------------------------------------------------------------------------
# Per-family builders
# ---------------------------------------------------------------------------------------------


def _dense(f: _Fields, data: dict[str, Any], *, qk_norm: bool) -> dict[str, Any]:
    """Llama / Qwen3. Windows: ``layer_types`` if present, else Qwen's ``use_sliding_window``
    rule (HF Qwen3Config: layer i slides iff i >= ``max_window_layers``)."""
    common = _common(f, data)
    num_layers = f.integer("num_hidden_layers", maximum=MAX_LAYERS)
    window = f.opt_integer("sliding_window")
    windows = _windows_from_layer_types(
        f, num_layers, {"full_attention": None, "sliding_attention": window}
    )
    if windows is None:
        start = f.integer("max_window_layers", num_layers, minimum=0)
        slide = window if f.flag("use_sliding_window", False) else None
        windows = [slide if i >= start else None for i in range(num_layers)]
    return common | {
        "attention": _gqa_attention(f, common["hidden_size"], qk_norm=qk_norm),
        "dense_intermediate_size": f.integer("intermediate_size"),
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


def _qwen3_moe(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """Qwen3-MoE (HF Qwen3MoeDecoderLayer): layer i is MoE iff i not in ``mlp_only_layers``
    and ``(i + 1) % decoder_sparse_step == 0``; the other layers use a dense FFN of width
    ``intermediate_size``."""
    spec = _dense(f, data, qk_norm=True)
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
    return spec | {
        "dense_intermediate_size": spec["dense_intermediate_size"] if has_dense else 0,
        "moe": MoESpec(num_experts, top_k, f.integer("moe_intermediate_size")),
        "layers": layers,
    }


def _deepseek(f: _Fields, data: dict[str, Any]) -> dict[str, Any]:
    """DeepSeek-V2/V3 and Kimi-K2 (HF DeepseekV3DecoderLayer): layer i is MoE iff
    ``n_routed_experts`` is set, ``i >= first_k_dense_replace`` and ``i % moe_layer_freq == 0``.

    Only the main model is described: the multi-token-prediction layers counted by
    ``num_nextn_predict_layers`` are ignored (they are not used for ordinary decoding).
    """
    common = _common(f, data)
    num_layers = f.integer("num_hidden_layers", maximum=MAX_LAYERS)
    heads = f.integer("num_attention_heads")
    rope = f.integer("qk_rope_head_dim", minimum=0)
    bias = f.flag("attention_bias", False)
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
    )
    num_experts = f.opt_integer("n_routed_experts")
    first_dense = f.integer("first_k_dense_replace", 0, minimum=0)
    freq = f.integer("moe_layer_freq", 1)
    is_moe = [
        num_experts is not None and i >= first_dense and i % freq == 0 for i in range(num_layers)
    ]
    moe = None
    if num_experts is not None:
        top_k = f.integer("num_experts_per_tok")
        _moe_check(f, num_experts, top_k, "num_experts_per_tok")
        width = f.integer("moe_intermediate_size")
        shared = f.integer("n_shared_experts", 0, minimum=0)
        topk_method = f.string("topk_method", "greedy")
        moe = MoESpec(
            num_experts=num_experts,
            top_k=top_k,
            expert_intermediate_size=width,
            num_shared_experts=shared,
            shared_intermediate_size=width if shared else 0,
            router_bias=topk_method == "noaux_tc",  # e_score_correction_bias
        )
    return common | {
        "attention": attention,
        "dense_intermediate_size": 0 if all(is_moe) else f.integer("intermediate_size"),
        "gated_mlp": True,
        "moe": moe,
        "layers": tuple(LayerSpec(is_moe=m) for m in is_moe),
        "weight_block_size": _weight_block_size(f),
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
    layer i uses RoPE; its default makes every 4th layer (``(i + 1) % 4 == 0``) NoPE.
    ``layer_types`` (``chunked_attention`` / ``full_attention``), when present, wins.
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
        rope = f.items("no_rope_layers", num_layers, lambda v: v in (0, 1), "0/1 flags") or [
            int((i + 1) % 4 != 0) for i in range(num_layers)
        ]
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


def load_model(name_or_path: str) -> ModelSpec:
    """Reads a model config and returns its :class:`ModelSpec`.

    Args:
        name_or_path: a shipped model name (file stem in ``learn_to_shard/data/models``, see
            :func:`shipped_model_names`, e.g. ``"llama-3.1-70b"``), a path to an HF
            ``config.json``, or a directory holding one.

    Returns:
        The model's spec. ``name`` is the shipped name or the file stem (the parent directory's
        name for a file called ``config.json``); ``source`` is the file read. For DeepSeek-style
        configs only the main model is described (MTP layers are ignored); for Llama-4 only the
        text model.

    Raises:
        ConfigError: unknown shipped name (the message lists the shipped names), missing or
            unreadable file, invalid JSON, or a missing / wrongly typed required field (the
            message names the file and the field and says what would be valid).
        UnsupportedModelError: a well-formed config of an architecture the planner cannot model
            (unknown ``model_type``, encoder-decoder such as Switch-C, DeepSeek-V4 attention);
            the message lists the supported ``model_type`` values.
    """
    data, source, name = _read(name_or_path)
    _reject_unsupported(data, source)
    top = _Fields(data, source)
    model_type = data["model_type"]
    if model_type in ("llama", "qwen3"):
        fields = _dense(top, data, qk_norm=model_type == "qwen3")
    elif model_type == "mixtral":
        fields = _mixtral(top, data)
    elif model_type == "qwen3_moe":
        fields = _qwen3_moe(top, data)
    elif model_type in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        fields = _deepseek(top, data)
    elif model_type == "gpt_oss":
        fields = _gpt_oss(top, data)
    elif model_type == "llama4":
        fields = _llama4(top.obj("text_config"), data)
    else:  # llama4_text
        fields = _llama4(top, data)
    return ModelSpec(name=name, source=source, **fields)
