"""Which model classes each serving engine runs, from a pinned snapshot of its registry.

An engine picks the class that runs a checkpoint from its config's ``architectures[0]``
(HF's class name, e.g. ``Qwen3ForCausalLM``). ``data/architectures.json`` holds, per engine,
the classes its pinned release registers (``native``; vLLM also ``transformers_backend``, the
classes it runs on its Transformers backend by design) and ``planner_absent``, the classes of
the families ``l2s`` loads that the engine does not register. ``scripts/engine_architectures.py``
regenerates it from the engines' own files (vLLM's ``model_executor/models/registry.py`` and
SGLang's ``EntryClass`` declarations in their release wheels, TensorRT-LLM's
``register_auto_model`` names in its source); ``complete`` is false where the list was read
from searches rather than the whole registry (see the entry's ``source``).

What an absent class means differs by engine:

* TensorRT-LLM's PyTorch runtime has no fallback: ``AutoModelForCausalLM.from_config`` raises
  "Unknown architecture for AutoModelForCausalLM" (``tensorrt_llm/_torch/models/
  modeling_auto.py``), so the launch is refused (:func:`architecture_refusal`);
* vLLM and SGLang fall back to their Transformers backends when transformers (or the
  checkpoint's ``auto_map`` code) provides a compatible class, and refuse to start otherwise
  (vLLM ``ModelRegistry.inspect_model_cls`` → ``_try_resolve_transformers``; SGLang
  ``model_loader/utils.py`` ``resolve_transformers_arch``): the launch stands with a note
  (:func:`architecture_note`), since the backend runs the model without the engine's own
  fused kernels, slower than the plan prices.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = ["ArchitectureSnapshot", "architecture_note", "architecture_refusal",
           "load_architectures"]

#: Engine display names (the profiles' ``title``; repeated here so this module stays data).
_TITLES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


@dataclass(frozen=True)
class ArchitectureSnapshot:
    """One engine's registered model classes at its pinned version.

    Attributes:
        engine: ``vllm``, ``sglang`` or ``trtllm``.
        version: the release the classes were read from.
        source: where and how they were read.
        native: classes the engine implements itself.
        transformers_backend: classes it maps to its Transformers backend (vLLM).
        planner_absent: classes of ``l2s``'s families the engine does not register.
        complete: ``native`` is the whole registry (else only the classes searched for).
    """

    engine: str
    version: str
    source: str
    native: frozenset[str]
    transformers_backend: frozenset[str]
    planner_absent: frozenset[str]
    complete: bool


@cache
def load_architectures(engine: str) -> ArchitectureSnapshot | None:
    """The pinned registry snapshot of ``engine`` (``None`` for an engine without one)."""
    data = json.loads(resources.files(__package__).joinpath(
        "data", "architectures.json").read_text())
    d = data.get(engine)
    if d is None:
        return None
    return ArchitectureSnapshot(
        engine=engine, version=str(d["version"]), source=str(d["source"]),
        native=frozenset(d["native"]),
        transformers_backend=frozenset(d.get("transformers_backend", ())),
        planner_absent=frozenset(d["planner_absent"]), complete=bool(d["complete"]))


def _unregistered(engine: str, architecture: str) -> ArchitectureSnapshot | None:
    """The snapshot of ``engine`` when it is known not to register ``architecture``: listed
    absent, or missing from a complete registry; else ``None`` (registered, or not known)."""
    snap = load_architectures(engine)
    if snap is None or architecture in snap.native \
            or architecture in snap.transformers_backend:
        return None
    if architecture in snap.planner_absent or snap.complete:
        return snap
    return None


def architecture_refusal(engine: str, architecture: str) -> str | None:
    """Why ``engine`` cannot start a checkpoint whose ``architectures[0]`` is
    ``architecture``, or ``None``: only an engine without a fallback refuses (TensorRT-LLM's
    PyTorch runtime, whose ``AutoModelForCausalLM`` raises "Unknown architecture" for a class
    no ``register_auto_model`` names)."""
    if engine != "trtllm":
        return None
    snap = _unregistered(engine, architecture)
    if snap is None:
        return None
    return (f"TensorRT-LLM {snap.version}'s PyTorch runtime has no model class "
            f"{architecture} (no register_auto_model names it; trtllm-serve stops with "
            f"'Unknown architecture for AutoModelForCausalLM: {architecture}')")


def architecture_note(engine: str, architecture: str) -> str | None:
    """What ``engine`` does with a class it has no implementation of, or ``None``:

    vLLM and SGLang run it on their Transformers backend where transformers or the
    checkpoint's own ``auto_map`` code provides a compatible class, without the engine's
    fused kernels (slower than the plan prices), and refuse to start otherwise; vLLM's
    registry maps some classes to that backend by design (``_TRANSFORMERS_SUPPORTED_MODELS``).
    """
    if engine not in ("vllm", "sglang"):
        return None
    snap = load_architectures(engine)
    if snap is None:
        return None
    title = _TITLES[engine]
    if architecture in snap.transformers_backend:
        return (f"{title} {snap.version} runs {architecture} on its Transformers backend "
                f"(its registry maps the class there): without {title}'s own fused "
                f"kernels, so slower than this plan prices")
    if _unregistered(engine, architecture) is None:
        return None
    return (f"{title} {snap.version} has no implementation of {architecture}: it runs the "
            f"checkpoint only on its Transformers backend, where transformers or the "
            f"checkpoint's own code (auto_map) provides a compatible class, slower than this "
            f"plan prices, and refuses to start otherwise")
