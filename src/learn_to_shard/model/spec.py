"""Typed description of a decoder-only transformer, as the cost model needs it.

A :class:`ModelSpec` is built from a HuggingFace ``config.json`` by
:func:`learn_to_shard.model.load_model`. Shapes follow the HF module layout; weights are counted
in parameters (multiply by the weight dtype's bytes for memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .vision import ImageTokens


class AttentionKind(str, Enum):
    """Attention variant. ``GQA`` covers MHA (kv == heads) and MQA (kv == 1); ``MLA`` is
    DeepSeek's multi-head latent attention (one shared latent KV "head")."""

    GQA = "gqa"
    MLA = "mla"


@dataclass(frozen=True, slots=True)
class AttentionSpec:
    """Attention block shape (identical in every layer; per-layer windows live in LayerSpec).

    Attributes:
        kind: GQA (incl. MHA/MQA) or MLA.
        num_heads: query heads.
        num_kv_heads: KV heads for GQA; 1 for MLA (the latent cache is shared by all heads).
        head_dim: query/key head dimension (for MLA: qk_nope_head_dim + qk_rope_head_dim).
        v_head_dim: value head dimension (== head_dim for GQA).
        q_lora_rank: MLA query low-rank dimension, ``None`` when q is projected directly.
        kv_lora_rank: MLA latent KV dimension (``None`` for GQA).
        qk_rope_head_dim: MLA decoupled RoPE key dimension (0 for GQA).
        qkv_bias: whether q/k/v projections carry a bias.
        o_bias: whether the output projection carries a bias.
        qk_norm: per-head RMSNorm on q and k (Qwen3, Llama-4 with use_qk_norm).
        sinks: per-head learned attention sinks (gpt-oss).
        qk_norm_full_width: the q/k RMSNorms span all heads at once (MiniMax-M2
            ``qk_norm_type: per_layer``: weights of ``num_heads * head_dim`` and
            ``num_kv_heads * head_dim``) rather than one head (``head_dim`` each, Qwen3).
        indexer_params: weights of a sparse-attention indexer per layer (DeepSeek-V3.2's
            lightning indexer: ``wq_b``, ``wk``, ``k_norm``, ``weights_proj``); 0 if none.
        sparse_topk: keys each query attends to under DeepSeek sparse attention
            (``index_topk``); ``None`` for dense attention. Informational: the cost model
            prices attention as dense MLA (an upper bound on attention time at contexts
            above ``sparse_topk``).
        indexer_key_bytes: bytes per token and layer of the sparse-attention indexer's key
            cache, held beside the KV cache whatever its dtype: FP8 keys of
            ``index_head_dim`` with one 4-byte scale per 128 of them, ``d + 4·d/128`` (132 for
            DeepSeek-V3.2 and GLM-5: vLLM 0.33.0 ``model_executor/models/deepseek_v2.py``
            ``DeepseekV32IndexerCache``, SGLang 0.5.23 ``pool_configurator``
            ``_compute_dsa_indexer_cell_size``); 0 without an indexer.
        logit_softcap: attention-logit soft cap ``c`` (scores become ``c·tanh(s/c)``;
            Gemma-2 ``attn_logit_softcapping`` 50.0), ``None`` when uncapped. It adds no
            weights or KV cache; the serving kernels apply it inside the fused attention
            kernel (FlashAttention-2 >= 2.6 ``softcap``, FlashInfer ``logits_soft_cap``), so
            the cost model prices a capped layer with the same attention kernel.
    """

    kind: AttentionKind
    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int = 0
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    sinks: bool = False
    qk_norm_full_width: bool = False
    indexer_params: int = 0
    sparse_topk: int | None = None
    logit_softcap: float | None = None
    indexer_key_bytes: int = 0


@dataclass(frozen=True, slots=True)
class QuantSpec:
    """How a checkpoint stores its linear-layer weights (from ``quantization_config`` in
    ``config.json`` or ModelOpt's ``hf_quant_config.json``).

    Attributes:
        method: ``quant_method`` (``fp8``, ``gptq``, ``awq``, ``compressed-tensors``,
            ``mxfp4``, ``modelopt``, ``fbgemm_fp8``) with the ModelOpt ``quant_algo`` or the
            compressed-tensors format after a colon, e.g. ``"modelopt:NVFP4"``.
        weight_bits: stored bits per quantised weight, scales and zero points included
            (formulas at :func:`learn_to_shard.model.hf_config.read_quant`).
        fp8: the weights are 8-bit floats (FP8 GEMM math where the chip has it).
        fp4: the weights are FP4 E2M1 with block scales (NVFP4, MXFP4): FP4 tensor-core
            math where the chip has it (``DeviceSpec.peak_fp4_flops_per_s``), else the
            weights are dequantised and the math runs at the workload's rate.
        int8_activations: weights and activations are INT8 (compressed-tensors W8A8).
        group_size: input-dimension (K) elements per scale of group-quantised weights
            (GPTQ/AWQ/compressed-tensors ``group_size``, NVFP4 16, MXFP4 32); ``None`` for
            per-tensor / per-channel / 2-D block scales. A row-parallel shard (a split of K)
            must hold whole groups.
        experts_only: only the routed experts are quantised (gpt-oss MXFP4 leaves attention,
            router, embedding and LM head in 16 bits).
        kv_cache_fp8: the checkpoint ships FP8 KV-cache scales (ModelOpt
            ``kv_cache_quant_algo`` / compressed-tensors ``kv_cache_scheme`` FP8); the KV
            cache is planned in FP8 with ``--kv-dtype fp8``, or by default under
            ``--engine trtllm``, whose ``auto`` KV dtype follows the checkpoint (vLLM and
            SGLang ``--kv-cache-dtype auto`` keep 16 bits;
            :func:`learn_to_shard.api.checkpoint_dtypes`).
        kept_16bit: module kinds the checkpoint's exclusion list keeps unquantised
            (:class:`learn_to_shard.model.quant_keys.ExclusionScope`), for the plan.
        source: the file the quantisation was read from.
    """

    method: str
    weight_bits: float
    fp8: bool = False
    fp4: bool = False
    int8_activations: bool = False
    group_size: int | None = None
    experts_only: bool = False
    kv_cache_fp8: bool = False
    kept_16bit: tuple[str, ...] = ()
    source: str = ""

    @property
    def below_8_bit(self) -> bool:
        """True for 4-bit formats (weights stored below the FP8 workload dtype)."""
        return self.weight_bits < 8.0

    @property
    def packed(self) -> bool:
        """Weights stored at :attr:`weight_bits` whatever the workload's dtype: every format
        below 8 bits, and 8-bit integer weights beside 16-bit activations (GPTQ / AWQ 8-bit,
        compressed-tensors W8A16), whose GEMMs dequantise to 16-bit math (vLLM's Marlin
        kernels take ``uint8b128`` as they take ``uint4b8``: ``marlin_utils.py``
        ``query_marlin_supported_quant_types``). FP8 and W8A8 INT8 checkpoints are stored as
        the workload's dtype says (``ModelSpec.checkpoint_dtype`` fp8)."""
        return self.below_8_bit or (not self.fp8 and not self.fp4 and not self.int8_activations
                                    and self.weight_bits < 16.0)

    @property
    def modelopt(self) -> bool:
        """True for an NVIDIA ModelOpt export (``method`` ``modelopt:*``), whose FP8 KV
        scales vLLM's and SGLang's ``auto`` KV dtype takes
        (:func:`learn_to_shard.engines.default_kv_dtype`)."""
        return self.method.startswith("modelopt")


@dataclass(frozen=True, slots=True)
class MoESpec:
    """Mixture-of-experts block shape (used by the layers with ``LayerSpec.is_moe``).

    Attributes:
        num_experts: routed experts per MoE layer.
        top_k: routed experts per token.
        expert_intermediate_size: FFN width of one routed expert (gated: 3 matrices).
        num_shared_experts: always-active shared experts (0 if none); they are fused into one
            shared FFN of width ``num_shared_experts * shared_intermediate_size``.
        shared_intermediate_size: FFN width of one shared expert.
        router_bias: router (gate) linear carries a bias (gpt-oss) or a correction bias
            vector (DeepSeek-V3 ``e_score_correction_bias``).
        expert_bias: expert linears carry biases (gpt-oss).
        shared_expert_gate: the shared expert's output is scaled by a sigmoid gate, a
            ``H x 1`` linear (Qwen2-MoE ``shared_expert_gate``, HF Qwen2MoeSparseMoeBlock).
    """

    num_experts: int
    top_k: int
    expert_intermediate_size: int
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0
    router_bias: bool = False
    expert_bias: bool = False
    shared_expert_gate: bool = False


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """One decoder layer's kind.

    Attributes:
        is_moe: MoE FFN (routed + optional shared experts) rather than a dense FFN.
        window: attention span limit in tokens (sliding window or chunked attention), ``None``
            for full attention. The KV cache of such a layer holds at most ``window`` tokens.
        chunked: the window is chunked attention (Llama-4 ``attention_chunk_size``: a token
            attends to the earlier tokens of its own ``window``-token chunk, on average half a
            chunk) rather than a sliding window (the last ``window`` tokens).
    """

    is_moe: bool
    window: int | None = None
    chunked: bool = False


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only LLM as the planner sees it.

    Attributes:
        name: short name (shipped config name or file stem).
        architecture: HF ``architectures[0]`` (or ``model_type``), for messages.
        hidden_size: model width H.
        vocab_size: vocabulary V (unpadded).
        attention: the attention block.
        dense_intermediate_size: FFN width of the dense (non-MoE) layers; 0 if there are none.
        gated_mlp: FFNs have gate+up+down (SwiGLU, 3 matrices) rather than up+down.
        mlp_bias: dense FFN linears carry biases.
        moe: the MoE block, ``None`` for dense models.
        layers: one :class:`LayerSpec` per decoder layer, in order.
        tie_word_embeddings: LM head shares the embedding matrix.
        weight_block_size: quantisation block (rows, cols) of block-quantised checkpoints
            (DeepSeek FP8: (128, 128)); every sharded weight dim must be a multiple of it.
        native_dtype: ``torch_dtype`` of the checkpoint (informational; ``""`` when the
            config states none or ``auto``).
        max_position_embeddings: longest context the model supports (tokens): the config's
            ``max_position_embeddings``, or the length a YaRN ``rope_scaling`` extends it to;
            where the config leaves it out, its transformers config class's default
            (``hf_config.TRANSFORMERS_MAX_POSITIONS``), where it is null vLLM's assumed 2048.
            0 (no limit) only for specs built by hand.
        positions_default: where ``max_position_embeddings`` is not the config's own value,
            whose it is (e.g. ``"LlamaConfig's default: the config leaves
            max_position_embeddings out"``), for the messages that state the limit; empty
            where the config states it.
        rope_not_followed: a ``rope_scaling`` other than YaRN that the engines apply to
            ``max_position_embeddings`` and the planner does not (e.g. ``"rope_scaling type
            'linear' (factor 4)"``, :func:`learn_to_shard.model.hf_config._unfollowed_rope`),
            for the message that refuses a longer request; empty otherwise.
        config_max_positions: where a YaRN ``rope_scaling`` extends the context beyond the
            config's ``max_position_embeddings``, that field as written (the engines' default
            length limit, :func:`learn_to_shard.model.hf_config.load_model`); 0 otherwise.
        expert_weight_bits: bits per routed-expert weight, scales included, when the
            checkpoint stores its experts below the workload's dtype (MXFP4: 4.25); ``None``:
            experts are stored like the other weights.
        source: path of the config file read (for a HuggingFace repo id: the cached
            snapshot file; for a shipped name shadowed by a local file: that file).
        quant: the checkpoint's weight quantisation, ``None`` for 16-bit checkpoints.
        post_norms: each layer has four RMSNorms (Gemma-2/3: pre/post attention and
            pre/post FFN) rather than two.
        vision_params: parameters of the vision tower of a multimodal wrapper (estimated
            from ``vision_config`` by ``load_model``); counted in
            :class:`~learn_to_shard.model.params.ParamCount` and in the cost model's memory
            (16-bit, split by TP on the first stage), not in its time (the plan says so).
        wrapper: ``model_type`` of the multimodal wrapper the language model was taken from
            (``qwen3_vl``, ``llava``, ...), ``None`` for a plain LM.
        source_kind: ``shipped`` (a config in the package), ``file`` (a local file or
            folder, which is read before a shipped name of the same spelling) or
            ``hf-cache`` (a HuggingFace repo id found in the local HF cache).
        parallel_attn: attention and FFN read the same normed input and their outputs are
            summed (Falcon ``parallel_attn``, HF FalconDecoderLayer). Informational: the cost
            model prices the two blocks one after the other (two TP all-reduces per layer,
            where an engine that fuses the parallel block's reductions needs one), an upper
            bound on the layer's communication.
        image_tokens: prompt tokens one image adds, for a multimodal wrapper (fixed by
            the config, or the resolution rule; :mod:`learn_to_shard.model.vision`); ``None``
            for a plain LM.
        final_logit_softcap: soft cap on the LM-head logits (Gemma-2
            ``final_logit_softcapping`` 30.0), ``None`` if none; elementwise on the logits,
            no weights, not priced separately.
        repo_id: the HuggingFace repository id ``org/name`` of a config read from the local
            HF cache (``source_kind`` ``hf-cache``), ``None`` otherwise.
        remote_code: the config names code of its own (an ``auto_map`` of configuration,
            model or tokenizer classes in the checkpoint's repository, e.g. Kimi-K2's
            ``kimi_k2`` config and tokenizer), which the engines load only with
            ``--trust-remote-code``; the exports pass it.
        config_architecture: the config's ``architectures[0]``, the class name the engines
            pick their implementation by; ``None`` where the config names none (then
            ``architecture`` holds the ``model_type``, for messages).
    """

    name: str
    architecture: str
    hidden_size: int
    vocab_size: int
    attention: AttentionSpec
    dense_intermediate_size: int
    gated_mlp: bool
    moe: MoESpec | None
    layers: tuple[LayerSpec, ...]
    tie_word_embeddings: bool = False
    mlp_bias: bool = False
    weight_block_size: tuple[int, int] | None = None
    native_dtype: str = "bfloat16"
    max_position_embeddings: int = 0
    config_max_positions: int = 0
    positions_default: str = ""
    rope_not_followed: str = ""
    expert_weight_bits: float | None = None
    source: str = ""
    quant: QuantSpec | None = None
    post_norms: bool = False
    vision_params: int = 0
    wrapper: str | None = None
    source_kind: str = "file"
    parallel_attn: bool = False
    final_logit_softcap: float | None = None
    image_tokens: ImageTokens | None = None
    repo_id: str | None = None
    remote_code: bool = False
    config_architecture: str | None = None

    @property
    def checkpoint_dtype(self) -> str:
        """Workload weight dtype the checkpoint implies: ``"fp8"`` for FP8 checkpoints (and
        W8A8), else ``"bf16"`` (16-bit checkpoints; 4-bit ones, whose stored size the cost
        model takes from :attr:`quant` whatever the dtype)."""
        q = self.quant
        return "fp8" if q is not None and (q.fp8 or q.int8_activations) else "bf16"

    @property
    def num_layers(self) -> int:
        """Number of decoder layers."""
        return len(self.layers)

    @property
    def num_moe_layers(self) -> int:
        """Number of MoE layers."""
        return sum(1 for layer in self.layers if layer.is_moe)

    @property
    def is_moe(self) -> bool:
        """True if any layer is an MoE layer."""
        return self.moe is not None and self.num_moe_layers > 0

    @property
    def has_dense_ffn(self) -> bool:
        """True if any layer has a dense FFN (``dense_up``/``dense_down`` exist)."""
        return any(not layer.is_moe for layer in self.layers)

    @property
    def has_shared_experts(self) -> bool:
        """True if the MoE layers have always-active shared experts
        (``shared_expert_up``/``shared_expert_down`` exist)."""
        return self.is_moe and self.moe is not None and self.moe.num_shared_experts > 0
