"""Model layer: config.json -> :class:`ModelSpec`, and parameter counting."""

from .hf_config import load_model, shipped_model_names
from .params import ParamCount, count_params
from .spec import AttentionKind, AttentionSpec, LayerSpec, ModelSpec, MoESpec, QuantSpec

__all__ = [
    "AttentionKind",
    "AttentionSpec",
    "LayerSpec",
    "ModelSpec",
    "MoESpec",
    "QuantSpec",
    "ParamCount",
    "count_params",
    "load_model",
    "shipped_model_names",
]
