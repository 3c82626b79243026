"""Weight shapes of the 12 fused operators, derived from a :class:`ModelSpec`.

Counts are parameters (multiply by bytes per weight). Norm weights and biases are left out:
they are < 0.1% of every supported model and live on every rank anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.spec import AttentionKind, ModelSpec


@dataclass(frozen=True, slots=True)
class OpShapes:
    """Per-layer operator sizes.

    Attributes:
        hidden: H.
        vocab: V (unpadded).
        q_out: query projection output width (heads × head_dim).
        kv_out_per_head: K+V projection output width per KV head (GQA: head_dim + v_head_dim).
        qkv_params: all attention input projections of one layer (GQA: H·(q_out + 2·kv·hd);
            MLA: q_a + q_b (or q) + kv_a + kv_b, plus a sparse-attention indexer).
        qkv_out: width of what the input projections hand to attention, per token (GQA:
            ``q_out + kv·(hd + v_hd)``; MLA: the queries ``heads × qk_head_dim`` plus the
            latent ``kv_lora_rank + qk_rope_head_dim``: 25,152 for DeepSeek-V3).
        qkv_replicated_params: the part of ``qkv_params`` that a head split cannot divide
            (MLA's q_a and kv_a down-projections; 0 for GQA, whose K/V replication is handled
            per degree).
        attn_out: attention output width (heads × v_head_dim).
        o_params: output projection parameters.
        dense_up_params, dense_down_params: dense FFN (gate+up, down); dense_width = I.
        expert_up_params, expert_down_params: one routed expert; expert_width = I_e.
        shared_up_params, shared_down_params: fused shared experts; shared_width.
        router_params: H × E.
        kv_bytes_factor: KV-cache elements per token per layer for the *whole* layer
            (GQA: 2·kv·hd-ish = kv·(hd + v_hd); MLA: kv_lora_rank + qk_rope_head_dim).
    """

    hidden: int
    vocab: int
    q_out: int
    kv_out_per_head: int
    qkv_params: int
    qkv_out: int
    qkv_replicated_params: int
    attn_out: int
    o_params: int
    dense_width: int
    dense_up_params: int
    dense_down_params: int
    expert_width: int
    expert_up_params: int
    expert_down_params: int
    shared_width: int
    shared_up_params: int
    shared_down_params: int
    router_params: int
    kv_elems_per_token: int

    @classmethod
    def of(cls, m: ModelSpec) -> OpShapes:
        """Shapes of ``m``'s operators (formulas: the HF modeling code of each family)."""
        a = m.attention
        h = m.hidden_size
        up_mult = 2 if m.gated_mlp else 1
        if a.kind is AttentionKind.MLA:
            qk = a.head_dim  # nope + rope
            kv_lora = a.kv_lora_rank or 0
            if a.q_lora_rank:
                q_a, q_b = h * a.q_lora_rank, a.q_lora_rank * a.num_heads * qk
            else:
                q_a, q_b = 0, h * a.num_heads * qk
            kv_a = h * (kv_lora + a.qk_rope_head_dim)
            kv_b = kv_lora * a.num_heads * (qk - a.qk_rope_head_dim + a.v_head_dim)
            # DeepSeek-V3.2's lightning indexer (ModelSpec.attention.indexer_params) is
            # replicated on every rank (vLLM deepseek_v2.py Indexer: ReplicatedLinear).
            qkv = q_a + q_b + kv_a + kv_b + a.indexer_params
            qkv_rep = q_a + kv_a + a.indexer_params
            kv_elems = kv_lora + a.qk_rope_head_dim
            qkv_out = a.num_heads * qk + kv_elems
            kv_per_head = 0
        else:
            kv_per_head = a.head_dim + a.v_head_dim
            qkv = h * (a.num_heads * a.head_dim + a.num_kv_heads * kv_per_head)
            qkv_rep = 0
            kv_elems = a.num_kv_heads * kv_per_head
            qkv_out = a.num_heads * a.head_dim + kv_elems
        attn_out = a.num_heads * a.v_head_dim
        moe = m.moe
        e_w = moe.expert_intermediate_size if moe else 0
        s_w = (moe.num_shared_experts * moe.shared_intermediate_size) if moe else 0
        return cls(
            hidden=h, vocab=m.vocab_size, q_out=a.num_heads * a.head_dim,
            kv_out_per_head=kv_per_head, qkv_params=qkv, qkv_out=qkv_out,
            qkv_replicated_params=qkv_rep,
            attn_out=attn_out, o_params=attn_out * h,
            dense_width=m.dense_intermediate_size,
            dense_up_params=up_mult * h * m.dense_intermediate_size,
            dense_down_params=m.dense_intermediate_size * h,
            expert_width=e_w, expert_up_params=up_mult * h * e_w, expert_down_params=e_w * h,
            shared_width=s_w, shared_up_params=up_mult * h * s_w, shared_down_params=s_w * h,
            router_params=h * moe.num_experts if moe else 0,
            kv_elems_per_token=kv_elems,
        )


def kv_cache_bytes_per_token(model: ModelSpec, kv_bytes: float, *,
                             context: int | None = None) -> float:
    """KV-cache bytes one token of one sequence occupies, summed over all layers, unsharded.

    GQA: ``layers × kv_heads × (head_dim + v_head_dim) × bytes`` (K and V);
    MLA: ``layers × (kv_lora_rank + qk_rope_head_dim) × bytes`` (the latent cache), plus a
    sparse-attention indexer's key cache (``AttentionSpec.indexer_key_bytes`` per layer).
    With ``context`` given, windowed layers count only ``min(context, window) / context`` of a
    token on average, i.e. the result is total bytes at that context divided by ``context``.

    Example: Llama-3.1-70B in bf16: 80 × 8 × 256 × 2 = 327,680 B = 320 KiB (FC-17).
    """
    per_layer = OpShapes.of(model).kv_elems_per_token * kv_bytes \
        + model.attention.indexer_key_bytes
    if context is None:
        return per_layer * model.num_layers
    held = sum(context if layer.window is None else min(context, layer.window)
               for layer in model.layers)
    return per_layer * held / context
