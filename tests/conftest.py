"""Shared fixtures: tiny synthetic models whose numbers can be worked out by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from learn_to_shard.model.spec import (
    AttentionKind,
    AttentionSpec,
    LayerSpec,
    ModelSpec,
    MoESpec,
)

#: A Granite-3.x-shaped config (HF GraniteForCausalLM): a class vLLM and SGLang register and
#: TensorRT-LLM's PyTorch runtime does not (engines/data/architectures.json).
GRANITE_CONFIG = {"architectures": ["GraniteForCausalLM"], "hidden_act": "silu",
                  "hidden_size": 2048, "intermediate_size": 8192, "model_type": "granite",
                  "num_attention_heads": 32, "num_hidden_layers": 40,
                  "num_key_value_heads": 8, "max_position_embeddings": 131072,
                  "tie_word_embeddings": True, "torch_dtype": "bfloat16", "vocab_size": 49155}


def granite_folder(parent: Path) -> Path:
    """``parent/granite`` holding :data:`GRANITE_CONFIG` as its ``config.json``."""
    folder = parent / "granite"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(GRANITE_CONFIG))
    return folder


def tiny_dense(layers: int = 2, heads: int = 8, kv: int = 8, hidden: int = 1024,
               ffn: int = 4096, vocab: int = 32000) -> ModelSpec:
    """A 2-layer Llama-shaped model (GQA, gated FFN)."""
    return ModelSpec(
        name="tiny-dense", architecture="LlamaForCausalLM", hidden_size=hidden, vocab_size=vocab,
        attention=AttentionSpec(AttentionKind.GQA, heads, kv, hidden // heads, hidden // heads),
        dense_intermediate_size=ffn, gated_mlp=True, moe=None,
        layers=tuple(LayerSpec(is_moe=False) for _ in range(layers)))


def tiny_moe(layers: int = 2, experts: int = 4, top_k: int = 2, hidden: int = 1024,
             expert_ffn: int = 512, shared: int = 0) -> ModelSpec:
    """A 2-layer Mixtral-shaped MoE model."""
    return ModelSpec(
        name="tiny-moe", architecture="MixtralForCausalLM", hidden_size=hidden, vocab_size=32000,
        attention=AttentionSpec(AttentionKind.GQA, 8, 8, hidden // 8, hidden // 8),
        dense_intermediate_size=0, gated_mlp=True,
        moe=MoESpec(num_experts=experts, top_k=top_k, expert_intermediate_size=expert_ffn,
                    num_shared_experts=shared, shared_intermediate_size=expert_ffn),
        layers=tuple(LayerSpec(is_moe=True) for _ in range(layers)))


@pytest.fixture
def dense_model() -> ModelSpec:
    return tiny_dense()


@pytest.fixture
def moe_model() -> ModelSpec:
    return tiny_moe()


#: Without the ``rl`` extra (a core-only install) the RL tests cannot import; CI installs it.
collect_ignore = [] if all(importlib.util.find_spec(m) for m in
                           ("torch", "stable_baselines3", "gymnasium")) else ["test_rl.py"]
