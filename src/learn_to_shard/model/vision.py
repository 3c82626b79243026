"""Vision tokens a multimodal wrapper adds to the language model's prompt.

Each image a request carries becomes a run of embedding vectors that the language model
prefills like prompt tokens (they take positions and KV cache like text). How many depends on
the wrapper:

* **fixed by the config**: Gemma-3 ``mm_tokens_per_image`` (256: SigLIP's 4096 patch
  embeddings of an 896-px image average-pooled to 256, Gemma 3 report arXiv 2503.19786 §2.1;
  HF ``Gemma3Config``); LLaVA-1.5 ``(image_size / patch_size)²`` from ``vision_config``
  (576 for 336-px images and 14-px patches; HF ``LlavaProcessor`` drops the CLS token under
  ``vision_feature_select_strategy`` ``default``);
* **set by the image resolution**: Qwen2-VL / Qwen2.5-VL / Qwen3-VL (one token per
  ``patch_size · spatial_merge_size`` pixels along each side: HF ``Qwen2VLImageProcessor``
  ``smart_resize`` rounds H and W to multiples of it, then ``(H/p)·(W/p)`` tokens), Llama-4
  (``(image_size / patch_size)² · pixel_shuffle_ratio²`` = 144 tokens per 336-px tile, up to
  ``max_patches`` tiles plus a global view, HF ``Llama4Processor``), InternVL (256 per 448-px
  tile, dynamic tiling), LLaVA-NeXT (any-resolution grids) and Mistral-3 / Pixtral (one token
  per 28 px plus row breaks). For these the user gives the count (``--image-tokens``) and
  the message shows the wrapper's rule.

The vision encoder's own compute is not priced by the cost model; its weights are counted
in :class:`~learn_to_shard.model.params.ParamCount` and held in the first stage's memory
(``OperatorTerms.first_stage_weight_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ImageTokens", "image_tokens"]


@dataclass(frozen=True, slots=True)
class ImageTokens:
    """How many prompt tokens one image adds for a wrapper.

    Attributes:
        fixed: tokens per image when the config fixes them, else ``None``.
        rule: one sentence naming the config key or formula (with its values) that gives
            the count, for the plan and for the message asking for ``--image-tokens``.
    """

    fixed: int | None
    rule: str


def _int(d: Any, key: str) -> int | None:
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _num(d: Any, key: str) -> float | None:
    v = d.get(key) if isinstance(d, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 \
        else None


def image_tokens(wrapper: str, data: dict[str, Any]) -> ImageTokens:
    """Tokens per image of a multimodal wrapper's config (sources in the module docstring).

    Args:
        wrapper: the wrapper's ``model_type`` (``gemma3``, ``llava``, ``qwen3_vl``, ...).
        data: the whole config.json object (``vision_config`` and top-level keys).

    Returns:
        The fixed count, or ``None`` with the resolution rule.
    """
    v = data.get("vision_config")
    if wrapper == "gemma3":
        n = _int(data, "mm_tokens_per_image")
        if n is not None:
            return ImageTokens(n, f"mm_tokens_per_image {n} (config.json)")
    size, patch = _int(v, "image_size"), _int(v, "patch_size")
    if wrapper == "llava" and size is not None and patch is not None:
        side = size // patch
        cls = 1 if data.get("vision_feature_select_strategy") == "full" else 0
        n = side * side + cls
        return ImageTokens(n, f"(vision_config.image_size {size} / patch_size {patch})^2"
                              f"{' + 1 (CLS)' if cls else ''} = {n}")
    if wrapper in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"):
        patch = _int(v, "patch_size") or 14
        merge = _int(v, "spatial_merge_size") or 2
        p = patch * merge
        return ImageTokens(None, f"ceil(H/{p})*ceil(W/{p}) for an HxW-pixel image (vision_config"
                                 f" patch_size {patch} x spatial_merge_size {merge}); "
                                 f"1024x1024 px -> {(-(-1024 // p)) ** 2}")
    if wrapper == "llama4":
        size = size or 336
        patch = patch or 14
        ratio = _num(v, "pixel_shuffle_ratio") or 0.5
        tile = int((size // patch) ** 2 * ratio * ratio)
        return ImageTokens(None, f"{tile} per {size}-px tile ((image_size/patch_size)^2 x "
                                 f"pixel_shuffle_ratio^2), up to max_patches tiles plus a "
                                 f"global view")
    if wrapper in ("internvl", "internvl_chat"):
        return ImageTokens(None, "256 per 448-px tile, dynamic tiling (1 to "
                                 "max_dynamic_patch tiles plus a thumbnail)")
    return ImageTokens(None, "set by the image resolution (any-resolution tiling)")
