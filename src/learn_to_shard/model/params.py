"""Parameter counts of a :class:`ModelSpec`, total and active per token.

Counts follow the HF ``transformers`` module layout of each family, tensor by tensor:

* GQA attention: ``q_proj`` H x (n_h d), ``k_proj``/``v_proj`` H x (n_kv d), ``o_proj``
  (n_h d_v) x H, plus their biases when configured, plus one sink logit per head (gpt-oss).
* MLA attention (DeepSeek-V2/V3 ``DeepseekV3Attention``): ``q_a_proj`` H x r_q and ``q_b_proj``
  r_q x n_h d (or ``q_proj`` H x n_h d when ``q_lora_rank`` is null), ``kv_a_proj_with_mqa``
  H x (r_kv + d_rope), ``kv_b_proj`` r_kv x n_h (d_nope + d_v), ``o_proj`` n_h d_v x H.
* FFNs: gated (SwiGLU) 3 H I, else 2 H I; with biases 2 I + H (gated) or I + H.
* Router: H x E, plus E for a router bias (gpt-oss) or DeepSeek's ``e_score_correction_bias``,
  plus H for Qwen2-MoE's sigmoid ``shared_expert_gate`` (H x 1).
* Norms (RMSNorm weights): two per layer (input, post-attention), the final norm, per-head q/k
  norms of width d (Qwen3), MLA's ``q_a_layernorm`` (r_q) and ``kv_a_layernorm`` (r_kv).
  Llama-4's q/k norm is a weightless L2 norm and adds nothing. MiniMax-M2's full-width q/k
  norms hold ``n_h d`` and ``n_kv d`` weights; Gemma-2/3 (``post_norms``) have four per-layer
  norms.
* DeepSeek-V3.2's lightning indexer: ``AttentionSpec.indexer_params`` per layer, counted with
  the attention.
* Multimodal wrappers: the vision tower estimate ``ModelSpec.vision_params`` (in ``total``
  and ``vision``; not active per text token).

Weights are counted in parameters; multiply by bytes per parameter for memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from .spec import AttentionKind, ModelSpec

__all__ = [
    "ParamCount",
    "attention_params",
    "count_params",
    "dense_mlp_params",
    "expert_params",
    "layer_norm_params",
    "router_params",
    "shared_expert_params",
]


@dataclass(frozen=True, slots=True)
class ParamCount:
    """Parameter counts of one model (all in parameters, summed over layers).

    Convention for ``active`` (parameters touched by one token in a forward pass): attention,
    norms, dense FFNs, routers, ``top_k`` routed experts and the shared experts of every MoE
    layer, and the LM head (the unembedding matrix, counted even when it is tied to the
    embedding). The input embedding is a table lookup and is *not* active; it counts in
    ``total`` only. ``SOURCES.md`` quotes most active figures *with* the input embedding (use
    :attr:`active_with_embedding` for those) and the gpt-oss ones without it (== ``active``).

    Attributes:
        total: every stored parameter (a tied embedding/LM-head matrix once).
        active: parameters used per token, as above.
        embedding: input embedding V x H.
        lm_head: untied output head V x H (0 when tied).
        attention: attention projections, their biases and sinks, all layers (norms excluded).
        dense_mlp: FFNs of the dense layers.
        router: MoE routers (weights and biases).
        routed_experts: all routed experts of all MoE layers.
        shared_experts: all shared experts of all MoE layers.
        norms: every norm weight (per-layer, final, q/k norms, MLA latent norms).
        vision: the vision tower of a multimodal wrapper (an estimate; 0 for plain LMs).
    """

    total: int
    active: int
    embedding: int
    lm_head: int
    attention: int
    dense_mlp: int
    router: int
    routed_experts: int
    shared_experts: int
    norms: int
    vision: int = 0

    @property
    def active_with_embedding(self) -> int:
        """``active`` plus the input embedding (the convention of most published figures)."""
        return self.active + self.embedding


def _ffn_params(hidden: int, width: int, *, gated: bool, bias: bool) -> int:
    mats = 3 if gated else 2
    biases = ((2 if gated else 1) * width + hidden) if bias else 0
    return mats * hidden * width + biases


def attention_params(spec: ModelSpec) -> int:
    """Attention weights of one layer: projections, their biases and sinks (norms excluded).

    Args:
        spec: the model.

    Returns:
        Parameter count of one layer's attention block (every layer has the same shape).
    """
    a, h = spec.attention, spec.hidden_size
    if a.kind is AttentionKind.MLA:
        kv_rank = a.kv_lora_rank or 0
        nope = a.head_dim - a.qk_rope_head_dim
        if a.q_lora_rank:
            q = h * a.q_lora_rank + a.q_lora_rank * a.num_heads * a.head_dim
            q += a.q_lora_rank if a.qkv_bias else 0  # q_a_proj bias
        else:
            q = h * a.num_heads * a.head_dim  # q_proj, never biased in HF
        kv = h * (kv_rank + a.qk_rope_head_dim) + kv_rank * a.num_heads * (nope + a.v_head_dim)
        kv += (kv_rank + a.qk_rope_head_dim) if a.qkv_bias else 0  # kv_a_proj_with_mqa bias
        o = a.num_heads * a.v_head_dim * h + (h if a.o_bias else 0)
        return q + kv + o + a.indexer_params
    q_out = a.num_heads * a.head_dim
    kv_out = a.num_kv_heads * (a.head_dim + a.v_head_dim)
    weights = h * (q_out + kv_out) + a.num_heads * a.v_head_dim * h
    biases = (q_out + kv_out if a.qkv_bias else 0) + (h if a.o_bias else 0)
    return weights + biases + (a.num_heads if a.sinks else 0) + a.indexer_params


def layer_norm_params(spec: ModelSpec) -> int:
    """Norm weights of one layer: input and post-attention RMSNorm (H each), per-head q/k norms
    (head_dim each; none for Llama-4, whose L2 q/k norm has no weight) and MLA's
    ``q_a_layernorm`` / ``kv_a_layernorm``.

    Args:
        spec: the model.

    Returns:
        Parameter count of one layer's norms (the final norm is not included).
    """
    a = spec.attention
    n = (4 if spec.post_norms else 2) * spec.hidden_size
    if a.qk_norm and a.qk_norm_full_width:
        n += (a.num_heads + a.num_kv_heads) * a.head_dim
    elif a.qk_norm and "llama4" not in spec.architecture.lower():
        n += 2 * a.head_dim
    if a.kind is AttentionKind.MLA:
        n += (a.q_lora_rank or 0) + (a.kv_lora_rank or 0)
    return n


def dense_mlp_params(spec: ModelSpec) -> int:
    """FFN weights (and biases) of one dense layer; 0 if the model has no dense layers.

    Args:
        spec: the model.

    Returns:
        Parameter count of one dense FFN of width ``spec.dense_intermediate_size``.
    """
    return _ffn_params(
        spec.hidden_size, spec.dense_intermediate_size, gated=spec.gated_mlp, bias=spec.mlp_bias
    )


def expert_params(spec: ModelSpec) -> int:
    """Weights (and biases) of one routed expert; 0 for dense models.

    Args:
        spec: the model.

    Returns:
        Parameter count of one expert FFN of width ``moe.expert_intermediate_size``.
    """
    if spec.moe is None:
        return 0
    return _ffn_params(
        spec.hidden_size,
        spec.moe.expert_intermediate_size,
        gated=spec.gated_mlp,
        bias=spec.moe.expert_bias,
    )


def shared_expert_params(spec: ModelSpec) -> int:
    """Weights of all shared experts of one MoE layer (fused width
    ``num_shared_experts * shared_intermediate_size``); 0 if none.

    Args:
        spec: the model.

    Returns:
        Parameter count of one MoE layer's shared FFN (no biases in any supported model).
    """
    if spec.moe is None:
        return 0
    width = spec.moe.num_shared_experts * spec.moe.shared_intermediate_size
    return _ffn_params(spec.hidden_size, width, gated=spec.gated_mlp, bias=False)


def router_params(spec: ModelSpec) -> int:
    """Router (gate) of one MoE layer: H x E, plus E for its bias / correction bias, plus H
    for a sigmoid shared-expert gate (Qwen2-MoE ``shared_expert_gate``, an H x 1 linear).

    Args:
        spec: the model.

    Returns:
        Parameter count of one router; 0 for dense models.
    """
    if spec.moe is None:
        return 0
    e = spec.moe.num_experts
    gate = spec.hidden_size if spec.moe.shared_expert_gate else 0
    return spec.hidden_size * e + (e if spec.moe.router_bias else 0) + gate


def count_params(spec: ModelSpec) -> ParamCount:
    """Counts the parameters of a model, total and active per token.

    Formulas: see the module docstring; the active-parameter convention is that of
    :class:`ParamCount`. DeepSeek MTP layers are not part of a :class:`ModelSpec` and are not
    counted (DeepSeek-V3: 671.0B main model, as in SOURCES.md).

    Args:
        spec: the model.

    Returns:
        The totals and a per-component breakdown; the components (``vision`` included) sum to
        ``total``.
    """
    h, v = spec.hidden_size, spec.vocab_size
    n_layers, n_moe = spec.num_layers, spec.num_moe_layers
    embedding = v * h
    lm_head = 0 if spec.tie_word_embeddings else v * h
    attention = n_layers * attention_params(spec)
    norms = n_layers * layer_norm_params(spec) + h
    dense_mlp = (n_layers - n_moe) * dense_mlp_params(spec)
    router = n_moe * router_params(spec)
    routed = n_moe * (spec.moe.num_experts if spec.moe else 0) * expert_params(spec)
    shared = n_moe * shared_expert_params(spec)
    routed_active = n_moe * (spec.moe.top_k if spec.moe else 0) * expert_params(spec)
    total = embedding + lm_head + attention + norms + dense_mlp + router + routed + shared \
        + spec.vision_params
    active = attention + norms + dense_mlp + router + routed_active + shared + v * h
    return ParamCount(
        total=total,
        active=active,
        embedding=embedding,
        lm_head=lm_head,
        attention=attention,
        dense_mlp=dense_mlp,
        router=router,
        routed_experts=routed,
        shared_experts=shared,
        norms=norms,
        vision=spec.vision_params,
    )
