"""What the planner reads from each checkpoint format's quantisation section.

A ``quantization_config`` (config.json) or ModelOpt ``hf_quant_config.json`` is only planned
when every key in it is known. Each format's keys fall in two sets:

* **read**: keys that change what the checkpoint stores (bits, group size, block shape,
  exclusion lists, KV-cache scheme, sparsity, per-module overrides). Their values are
  checked; a value the cost model cannot price is refused in one line naming the file and
  the key.
* **metadata**: keys that do not change the stored bytes (calibration settings, producer
  versions, kernel / runtime switches). They are accepted as they are.

Any other key is refused (:func:`check_keys`): an unknown key may change what is stored, and
planning it as if it were absent would misstate what fits.

Key sets, from the formats' own definitions and the real configs they were checked against:

* ``fp8``: HF transformers ``FineGrainedFP8Config`` (``activation_scheme``,
  ``weight_block_size``, ``modules_to_not_convert``;
  https://github.com/huggingface/transformers/blob/main/src/transformers/utils/quantization_config.py),
  vLLM ``Fp8Config.from_config`` (``ignored_layers``;
  https://github.com/vllm-project/vllm/blob/main/vllm/model_executor/layers/quantization/fp8.py);
  ``fmt`` and ``scale_fmt`` as written in DeepSeek-V3/V3.2, Qwen3-FP8, MiniMax-M2.5/M2.7,
  GLM-5-FP8 and Step-3.7-Flash-FP8 config.json files (ai-dynamo/aiconfigurator
  095f58a51c4ca8e61b66ec108d86f223f8d559ce, ``aic-core/src/aiconfigurator_core/model_configs/``).
* ``fbgemm_fp8``: HF ``FbgemmFp8Config`` (``activation_scale_ub``, ``modules_to_not_convert``).
* ``gptq``: HF ``GPTQConfig`` fields (optimum serialisation), AutoGPTQ ``quantize_config.json``
  (``damp_percent``, ``static_groups``, ``true_sequential``, ``model_name_or_path``,
  ``model_file_base_name``, ``is_marlin_format``; e.g. TheBloke/TinyLlama-1.1B-Chat-v1.0-GPTQ
  ``quantize_config.json``), GPTQModel (``checkpoint_format``, ``lm_head``, ``dynamic``,
  ``pack_dtype``, ``meta``).
* ``awq``: HF ``AwqConfig`` (``bits``, ``group_size``, ``zero_point``, ``version``,
  ``backend``, ``do_fuse``, ``fuse_max_seq_len``, ``modules_to_fuse``,
  ``modules_to_not_convert``, ``exllama_config``) and AutoAWQ's ``w_bit`` /
  ``q_group_size`` spelling.
* ``compressed-tensors``: compressed-tensors ``QuantizationConfig`` / HF
  ``CompressedTensorsConfig`` (``config_groups``, ``format``, ``ignore``, ``kv_cache_scheme``,
  ``quantization_status``, ``global_compression_ratio``, ``sparsity_config``,
  ``transform_config``, ``version``, ``run_compressed``), as in Kimi-K2.5 and
  RedHatAI Llama-4-Scout FP8-dynamic (inference-sim/inference-sim
  f90a1e3a6787da17c2cd463dab6fb2660b1b1760,
  ``model_configs/llama-4-scout-17b-16e-instruct-fp8-dynamic/config.json``).
* ``modelopt``: ``hf_quant_config.json`` ``quantization`` (``quant_algo``,
  ``kv_cache_quant_algo``, ``group_size``, ``exclude_modules``) and the config.json form
  (``quant_method``, ``quant_algo``, ``kv_cache_scheme``, ``config_groups``, ``ignore``,
  ``producer``), as in nvidia/Qwen3-235B-A22B-NVFP4, nvidia/DeepSeek-V3.1-NVFP4,
  nvidia/GLM-5.1-NVFP4, nvidia/Kimi-K2.6-NVFP4 (aiconfigurator, commit above); ModelOpt's
  AWQ exports add ``has_zero_point`` (zero points stored per group) and ``pre_quant_scale``
  (one smoothing vector per linear layer's input, negligible bytes), as in the
  ``hf_quant_config.json`` of a ModelOpt 0.45 W4A16_AWQ export reproduced in a published
  TensorRT-Edge-LLM recipe log (found by the code index; repository not resolved).
* ``mxfp4``: HF ``Mxfp4Config`` (``modules_to_not_convert``, ``dequantize``), as in
  openai/gpt-oss-20b/120b.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UnsupportedModelError

__all__ = ["FORMAT_KEYS", "GROUP_KEYS", "QUANT_ARGS_KEYS", "ExclusionScope", "FormatKeys",
           "check_keys", "exclusion_scope", "kv_cache_is_fp8"]


@dataclass(frozen=True, slots=True)
class FormatKeys:
    """The keys of one format's quantisation section (see the module docstring).

    Attributes:
        read: keys whose values change what is stored; the loader reads and checks them.
        metadata: keys that leave the stored bytes unchanged.
    """

    read: frozenset[str]
    metadata: frozenset[str]

    @property
    def known(self) -> frozenset[str]:
        """``read | metadata``."""
        return self.read | self.metadata


def _keys(read: str, metadata: str = "") -> FormatKeys:
    return FormatKeys(frozenset(read.split()), frozenset(metadata.split()))


#: ``quant_method`` (or ``hf_quant_config.json``'s ``quantization`` section, under
#: ``"modelopt"``) -> its keys. Sources in the module docstring.
FORMAT_KEYS: Mapping[str, FormatKeys] = {
    "fp8": _keys("quant_method activation_scheme weight_block_size fmt scale_fmt "
                 "modules_to_not_convert ignored_layers"),
    "fbgemm_fp8": _keys("quant_method modules_to_not_convert", "activation_scale_ub"),
    "gptq": _keys(
        "quant_method bits group_size checkpoint_format lm_head dynamic "
        "modules_in_block_to_quantize",
        "desc_act sym damp_percent damp_auto_increment static_groups true_sequential "
        "model_name_or_path model_file_base_name is_marlin_format meta pack_dtype tokenizer "
        "dataset use_cuda_fp16 model_seqlen block_name_to_quantize "
        "module_name_preceding_first_block batch_size pad_token_id use_exllama "
        "max_input_length exllama_config cache_block_outputs backend"),
    "awq": _keys("quant_method bits w_bit group_size q_group_size zero_point version "
                 "modules_to_not_convert",
                 "backend do_fuse fuse_max_seq_len modules_to_fuse exllama_config"),
    "compressed-tensors": _keys(
        "quant_method config_groups format ignore kv_cache_scheme sparsity_config "
        "transform_config",
        "quantization_status global_compression_ratio version run_compressed provider"),
    "modelopt": _keys("quant_method quant_algo kv_cache_quant_algo kv_cache_scheme group_size "
                      "exclude_modules ignore has_zero_point",
                      "producer config_groups pre_quant_scale"),
    "mxfp4": _keys("quant_method modules_to_not_convert", "dequantize"),
}
#: Keys of one compressed-tensors ``config_groups`` entry (compressed-tensors
#: ``QuantizationScheme``): ``targets`` names the layers it quantises; ``format`` restates
#: the top level.
GROUP_KEYS = _keys("weights input_activations output_activations targets", "format")
#: Keys of compressed-tensors ``QuantizationArgs`` (``weights`` / ``input_activations``):
#: ``actorder`` adds a ``g_idx`` of one int32 per input row (under 0.01 bit per weight),
#: observers are calibration settings.
QUANT_ARGS_KEYS = _keys("num_bits type symmetric strategy group_size block_structure dynamic",
                        "actorder observer observer_kwargs scale_dtype zp_dtype")


def check_keys(data: Mapping[str, Any], keys: FormatKeys, what: str, source: str) -> None:
    """Refuses any key of ``data`` outside ``keys``.

    Args:
        data: the quantisation section (a JSON object).
        keys: the format's known keys.
        what: the format's name as users see it, e.g. ``"quant_method 'gptq'"``.
        source: the file and section, used as the message prefix.

    Raises:
        UnsupportedModelError: one line naming the first unknown key, what it is inside and
            the keys that are read and those that are known as metadata.
    """
    unknown = sorted(k for k in data if k not in keys.known)
    if unknown:
        raise UnsupportedModelError(
            f"{source}: key {unknown[0]!r} of {what} is not modelled (it may change what the "
            f"checkpoint stores); read: {', '.join(sorted(keys.read))}; known metadata: "
            f"{', '.join(sorted(keys.metadata)) or 'none'}")


def kv_cache_is_fp8(value: Any, key: str, source: str) -> bool:
    """Whether a checkpoint's KV-cache scheme is FP8 (it ships FP8 K/V scales).

    ``value`` is ModelOpt ``kv_cache_quant_algo`` (``"FP8"`` or null) or a
    ``kv_cache_scheme`` (compressed-tensors ``QuantizationArgs`` with ``num_bits`` 8 and
    ``type`` ``"float"``, ModelOpt's config.json ``{"num_bits": 8, "type": "float"}``, or the
    string ``"FP8"``). Null: no KV quantisation.

    Raises:
        UnsupportedModelError: any other scheme (INT8 / FP4 KV caches are not priced).
    """
    if value is None:
        return False
    if isinstance(value, str) and value.upper() == "FP8":
        return True
    if isinstance(value, dict) and value.get("num_bits") == 8 and value.get("type") == "float":
        return True
    raise UnsupportedModelError(
        f"{source}: {key} {value!r} is not modelled; supported: FP8 (planned with "
        f"--kv-dtype fp8) or null")


@dataclass(frozen=True, slots=True)
class ExclusionScope:
    """What an exclusion list (``modules_to_not_convert`` / ``ignore`` / ``exclude_modules``
    / ``ignored_layers``) keeps unquantised, in the cost model's terms.

    Attributes:
        experts_only: attention is kept in 16 bits in every layer, so only the routed
            experts are quantised; the cost model then also keeps dense and shared-expert
            FFNs in 16 bits (an over-estimate of their bytes where the checkpoint quantises
            them, e.g. nvidia/DeepSeek-V3.1-NVFP4's shared experts).
        kept: the module kinds the list names, for the plan (``"attention"``,
            ``"shared experts"``, ``"dense FFN layers"``, ``"router"``, ``"embedding / LM
            head"``, ``"norms"``, ``"vision tower"``, ``"MTP layers"``, ``"sparse-attention
            indexer"``).
    """

    experts_only: bool
    kept: tuple[str, ...]


#: Entry patterns (searched in the lower-cased entry) -> the kind they name. Kinds the cost
#: model prices in 16 bits whatever the checkpoint says (embedding / LM head, routers,
#: norms), or does not price (vision tower, MTP layers), or that hold under 0.2% of the
#: weights (DeepSeek-V3.2 / GLM-5 lightning indexer: 0.85B of 672B) are harmless.
_HARMLESS = (
    (r"lm_head|embed_tokens|embedding|word_embeddings|(^|\.)wte($|\.)|(^|\.)head$|"
     r"^output$|(^|\.)tok_embeddings($|\.)", "embedding / LM head"),     # InternLM2: output
    (r"(^|[.*])gate($|[.*])|router|e_score_correction_bias|shared_expert_gate",
     "router"),
    (r"norm", "norms"),
    (r"vision|visual|mm_projector|multi_modal_projector|patch_merge|merger", "vision tower"),
    (r"mtp|eh_proj|shared_head", "MTP layers"),
    (r"indexer", "sparse-attention indexer"),
)
_ATTENTION = (r"self_attn|attention|(^|[.*_])attn|q_proj|k_proj|v_proj|o_proj|qkv_proj|"
              r"q_a_proj|q_b_proj|kv_a_proj|kv_b_proj|query_key_value")
_SHARED = r"shared_expert"
_LAYER = re.compile(r"layers\\?\.(\d+)(\*?)")


def _entry_layers(entry: str, num_layers: int) -> set[int] | None:
    """Decoder layers an entry names: ``layers.3.`` -> {3}; a glob ``layers.1*`` also
    matches layers 10-19 (ModelOpt matches ``exclude_modules`` with ``fnmatch``); ``None``
    when it names no layer index (every layer)."""
    m = _LAYER.search(entry)
    if m is None:
        return None
    n = m.group(1)
    if not m.group(2):
        return {int(n)}
    return {i for i in range(num_layers + 1) if str(i).startswith(n)}


def _whole_layer(entry: str) -> bool:
    """``model.layers.3``, ``model.layers.3*``, ``model.layers.3.*``: the whole layer."""
    return re.search(r"layers\\?\.\d+(\*|\.\*|\.\.\*)?$", entry) is not None


def exclusion_scope(entries: Any, *, key: str, source: str, moe_layers: Sequence[bool],
                    below_8_bit: bool) -> ExclusionScope:
    """Reads an exclusion list against the model's layers.

    Args:
        entries: the list (module names, ``*`` globs or ``re:`` regexes), or null.
        key: its key, for messages.
        source: file and section, for messages.
        moe_layers: ``[num_layers]`` whether each decoder layer is an MoE layer.
        below_8_bit: the format stores weights below 8 bits (only then can the cost model
            keep attention in 16 bits while quantising the experts).

    Returns:
        The scope: :attr:`ExclusionScope.experts_only` when attention is excluded in every
        layer of an MoE model.

    Raises:
        UnsupportedModelError: one line naming the entry, when the list keeps in 16 bits
            something the cost model would price quantised: attention or FFNs of a dense
            model, attention of only some layers, attention or shared experts of an 8-bit
            checkpoint, routed experts, shared experts while attention is quantised, a
            whole MoE layer, or an entry of no known kind.
    """
    if entries is None:
        return ExclusionScope(False, ())
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise UnsupportedModelError(f"{source}: {key} must be a list of module names, got "
                                    f"{type(entries).__name__}")
    num_layers = len(moe_layers)
    is_moe = any(moe_layers)
    kept: dict[str, None] = {}
    attn_layers: set[int] = set()
    attn_all = False
    first_16bit: str | None = None
    shared: str | None = None

    def refuse(entry: str, why: str) -> UnsupportedModelError:
        return UnsupportedModelError(
            f"{source}: {key} entry {entry!r} {why}; not modelled (the cost model prices "
            f"every linear layer at the checkpoint's bits, or, for an MoE checkpoint below 8 "
            f"bits that keeps attention in 16 bits in every layer, only the routed experts)")

    for raw in entries:
        # ``re:`` entries (compressed-tensors) are matched by their text without regex
        # anchors and escapes: ``re:.*mlp\.gate$`` names the router like ``mlp.gate``.
        e = raw.lower().removeprefix("re:").replace("\\", "").lstrip("^").rstrip("$")
        layers = _entry_layers(e, num_layers)
        if layers is not None and min(layers) >= num_layers:
            kept["MTP layers"] = None          # DeepSeek / GLM MTP layers follow the decoder
            continue
        kind = next((k for pat, k in _HARMLESS if re.search(pat, e)), None)
        if kind is not None:
            kept[kind] = None
            continue
        if re.search(_SHARED, e):
            kept["shared experts"] = None
            shared = shared or raw
            continue
        if re.search(_ATTENTION, e):
            kept["attention"] = None
            first_16bit = first_16bit or raw
            if layers is None:
                attn_all = True
            else:
                attn_layers |= layers
            continue
        whole = _whole_layer(e)
        # a layer's FFN, whole or one of its projections (Meta's Llama-3.1-405B FP8 keeps
        # layer 0's and layer 125's ``mlp.down_proj`` etc. in 16 bits)
        if layers is not None and (whole or re.search(r"\.mlp($|\.?\*$)", e) or re.search(
                r"\.mlp\.(gate_up|gate|up|down)_proj$|\.feed_forward\.w[123]$", e)):
            moe = sorted(i for i in layers if i < num_layers and moe_layers[i])
            if moe:
                raise refuse(raw, f"keeps the routed experts of MoE layer {moe[0]} in 16 "
                                  f"bits")
            kept["dense FFN layers"] = None
            if whole:
                kept["attention"] = None
                attn_layers |= layers
            first_16bit = first_16bit or raw
            continue
        if "expert" in e:
            raise refuse(raw, "keeps routed experts in 16 bits")
        raise refuse(raw, "names no module kind the planner knows (attention, shared "
                          "experts, dense FFN, router, norms, embedding / LM head, vision "
                          "tower, MTP)")
    if first_16bit is None and shared is None:
        return ExclusionScope(False, tuple(kept))
    culprit = first_16bit or shared or ""
    if not is_moe:
        raise refuse(culprit, "keeps part of a dense model in 16 bits while its other "
                              "linear layers are quantised")
    if not below_8_bit:
        raise refuse(culprit, "keeps attention or FFNs of an 8-bit checkpoint in 16 bits")
    if not attn_all and not attn_layers:
        raise refuse(culprit, "keeps shared experts or dense FFNs in 16 bits while attention "
                              "is quantised")
    if not attn_all and not set(range(num_layers)) <= attn_layers:
        missing = sorted(set(range(num_layers)) - attn_layers)
        raise refuse(culprit, f"keeps attention in 16 bits in some layers only (not in "
                              f"layer {missing[0]})")
    return ExclusionScope(True, tuple(kept))

