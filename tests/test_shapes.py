"""The cost model's operator shapes agree with the independent parameter count."""

from __future__ import annotations

import pytest

from learn_to_shard.cost.shapes import OpShapes
from learn_to_shard.model import count_params, load_model, shipped_model_names


@pytest.mark.parametrize("name", shipped_model_names())
def test_operator_weights_sum_to_the_parameter_count(name):
    """Σ per-layer operator weights + embedding + LM head = count_params().total, up to the
    norms and biases the cost model leaves out (< 0.1%)."""
    m = load_model(name)
    sh = OpShapes.of(m)
    total = 0
    for layer in m.layers:
        total += sh.qkv_params + sh.o_params
        if layer.is_moe:
            assert m.moe is not None
            total += sh.router_params + m.moe.num_experts * (sh.expert_up_params
                                                             + sh.expert_down_params)
            total += sh.shared_up_params + sh.shared_down_params
        else:
            total += sh.dense_up_params + sh.dense_down_params
    total += sh.vocab * sh.hidden * (1 if m.tie_word_embeddings else 2)
    counts = count_params(m)   # a wrapper's vision tower is not an operator of the LM
    assert total == pytest.approx(counts.total - counts.vision, rel=1e-3)


def test_qkv_output_width_is_what_attention_receives():
    """GQA: q + k + v heads; MLA: the queries (heads × qk_head_dim) and the 576-wide latent
    (DeepSeek-V3: 128 × 192 + 512 + 64 = 25,152), not the projection parameters over H."""
    from learn_to_shard.cost.shapes import OpShapes
    from learn_to_shard.model import load_model

    assert OpShapes.of(load_model("llama-3.1-70b")).qkv_out == 64 * 128 + 8 * 256
    assert OpShapes.of(load_model("deepseek-v3")).qkv_out == 128 * 192 + 576
