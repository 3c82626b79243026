"""Which model classes each serving engine runs, from a pinned snapshot of its registry.

An engine picks the class that runs a checkpoint from its config's ``architectures[0]``
(HF's class name, e.g. ``Qwen3ForCausalLM``). ``data/architectures.json`` holds, per engine:

* ``native``: the classes its pinned release implements itself (vLLM's registry also maps some
  to its Transformers backend by design: ``transformers_backend``);
* ``planner_absent``: the classes of the families ``l2s`` loads that the release does not
  register;
* ``removed`` (vLLM): classes it supported until an earlier release and now refuses
  (``_PREVIOUSLY_SUPPORTED_MODELS``);
* ``unverified`` (TensorRT-LLM): classes a later source registers whose presence in the pinned
  release was not read;
* ``complete``: ``native`` is the whole registry (vLLM's and SGLang's, read from their wheels),
  not only the planner's classes searched for (TensorRT-LLM's; see its ``source``);
* ``pp_unsupported`` (SGLang): the planner's classes whose implementation cannot run
  pipeline parallelism (its ``forward`` takes no ``pp_proxy_tensors``; SGLang's
  ``ModelRunner`` asserts it at start-up when ``--pp-size`` > 1);
* ``attention_dp_unsupported`` (SGLang): the planner's classes whose model files do not
  both split attention over the attention-TP group ``--attn-dp-size`` leaves each rank
  (``attn_tp_size``; Mixtral's splits heads over the whole ``--tp-size`` group, so
  attention-DP would run the wrong heads) and declare the layer stages whose communicator
  gathers the DP ranks' rows for the MoE (``append_stages``; PhiMoE declares none);
* ``dense_mlp_whole_group`` (SGLang): the planner's classes whose model files never read
  ``is_dense_ffn_fully_dp``: a MoE model's dense MLP layers there shard over the whole
  ``--tp-size`` group under attention-DP, the DP ranks' rows gathered for them
  (``models/llama4.py``: ``LlamaMLP`` with its default ``parallel_group="tp"``), a layout
  ``l2s`` does not price; the other classes replicate them with ``--moe-dense-tp-size 1``
  (``models/deepseek_v2.py``: ``"replicated" if is_dense_ffn_fully_dp() else "tp"``).

:func:`unsupported_degrees` turns the last three into the degrees the search leaves out.

``scripts/engine_architectures.py`` regenerates it from the engines' own files.

What an unregistered class means differs by engine:

* TensorRT-LLM's PyTorch runtime has no fallback: ``AutoModelForCausalLM.from_config`` raises
  "Unknown architecture for AutoModelForCausalLM" (``tensorrt_llm/_torch/models/
  modeling_auto.py``), so the launch is refused (:func:`architecture_refusal`); vLLM refuses a
  removed class ("was supported in vLLM until v…", ``ModelRegistry._raise_for_unsupported``);
* otherwise vLLM and SGLang fall back to their Transformers backends when transformers (or
  the checkpoint's ``auto_map`` code) provides a compatible class, and refuse to start if not
  (vLLM ``ModelRegistry.inspect_model_cls`` → ``_try_resolve_transformers``; SGLang
  ``model_loader/utils.py`` ``resolve_transformers_arch``): the launch stands with a note
  (:func:`architecture_note`), since the backend runs the model without the engine's own
  fused kernels, slower than the plan prices.

A config that names no ``architectures`` is not checked (``ModelSpec.config_architecture``
``None``): the engines then resolve a class from its ``model_type`` by rules of their own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = ["ArchitectureSnapshot", "architecture_note", "architecture_refusal",
           "engines_registering", "load_architectures", "unsupported_degrees"]

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
        removed: classes an earlier release supported, refused now (vLLM), with that
            release.
        unverified: classes a later source registers, not read at the pinned release.
        complete: ``native`` is the whole registry (else only the classes searched for).
        pp_unsupported: classes the release cannot run with pipeline parallelism.
        attention_dp_unsupported: classes whose attention the release does not split by
            attention-DP's attention-TP group.
        dense_mlp_whole_group: classes whose dense MLP layers of a MoE model the release
            runs over the whole TP group under attention-DP, never replicated.
    """

    engine: str
    version: str
    source: str
    native: frozenset[str]
    transformers_backend: frozenset[str]
    planner_absent: frozenset[str]
    removed: dict[str, str]
    unverified: frozenset[str]
    complete: bool
    pp_unsupported: frozenset[str] = frozenset()
    attention_dp_unsupported: frozenset[str] = frozenset()
    dense_mlp_whole_group: frozenset[str] = frozenset()

    def registers(self, architecture: str) -> bool:
        """The release runs ``architecture`` (its own implementation or, by its registry's
        design, its Transformers backend)."""
        return architecture in self.native or architecture in self.transformers_backend

    def lacks(self, architecture: str) -> bool:
        """The release is known not to register ``architecture``: listed absent or removed,
        or missing from a complete registry (an unverified or unsearched class of an
        incomplete one is not known either way)."""
        if self.registers(architecture) or architecture in self.unverified:
            return False
        return architecture in self.planner_absent or architecture in self.removed \
            or self.complete


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
        planner_absent=frozenset(d["planner_absent"]),
        removed={str(k): str(v) for k, v in d.get("removed", {}).items()},
        unverified=frozenset(d.get("unverified", ())), complete=bool(d["complete"]),
        pp_unsupported=frozenset(d.get("pp_unsupported", ())),
        attention_dp_unsupported=frozenset(d.get("attention_dp_unsupported", ())),
        dense_mlp_whole_group=frozenset(d.get("dense_mlp_whole_group", ())))


def unsupported_degrees(engine: str, architecture: str | None) -> tuple[str, ...]:
    """The parallel degrees ``engine``'s implementation of the class ``architecture`` cannot
    run: ``"pp"`` (no pipeline parallelism), ``"attention_dp"`` (no attention-DP) and
    ``"attention_dp_dense"`` (no attention-DP that ``l2s`` prices for a MoE model with dense
    MLP layers: they would run over the whole TP group; left out where ``"attention_dp"``
    is there), from the pinned snapshot (the module docstring says how each was read); empty
    for a config that names no class or an engine without such facts."""
    snap = load_architectures(engine) if architecture is not None else None
    if snap is None:
        return ()
    out = tuple(name for name, classes in (("pp", snap.pp_unsupported),
                                           ("attention_dp", snap.attention_dp_unsupported),
                                           ("attention_dp_dense", snap.dense_mlp_whole_group))
                if architecture in classes)
    return out if "attention_dp" not in out else tuple(c for c in out
                                                       if c != "attention_dp_dense")


def engines_registering(architecture: str) -> list[str]:
    """Display names and versions of the engines whose snapshot registers
    ``architecture`` (``["vLLM 0.33.0", "SGLang 0.5.23"]``), in vLLM, SGLang, TensorRT-LLM
    order."""
    out = []
    for engine, title in _TITLES.items():
        snap = load_architectures(engine)
        if snap is not None and snap.registers(architecture):
            out.append(f"{title} {snap.version}")
    return out


def architecture_refusal(engine: str, architecture: str | None) -> str | None:
    """Why ``engine`` cannot start a checkpoint whose ``architectures[0]`` is
    ``architecture``, or ``None`` (``architecture`` ``None``: the config names no class, not
    checked): TensorRT-LLM's PyTorch runtime for a class it does not register (no
    fallback), vLLM for a class it has removed. The reason names the engines that do run
    it."""
    snap = load_architectures(engine) if architecture is not None else None
    if snap is None or architecture is None:
        return None
    others = [e for e in engines_registering(architecture)
              if not e.startswith(_TITLES[engine])]
    runs = (f"; {' and '.join(others)} "
            f"{'registers' if len(others) == 1 else 'register'} it") if others else ""
    if engine == "vllm" and architecture in snap.removed:
        return (f"vLLM {snap.version} no longer runs {architecture} (supported until "
                f"v{snap.removed[architecture]}; its registry refuses the class){runs}")
    if engine == "trtllm" and snap.lacks(architecture):
        return (f"TensorRT-LLM {snap.version}'s PyTorch runtime has no model class "
                f"{architecture} (no register_auto_model names it; trtllm-serve stops with "
                f"'Unknown architecture for AutoModelForCausalLM: {architecture}'){runs}")
    return None


def architecture_note(engine: str, architecture: str | None) -> str | None:
    """What the launch of ``engine`` should know about the class ``architecture``, or
    ``None``:

    * vLLM and SGLang run a class they have no implementation of on their Transformers
      backend, where transformers or the checkpoint's own ``auto_map`` code provides a
      compatible class, without the engine's fused kernels (slower than the plan prices),
      and refuse to start otherwise; vLLM's registry maps some classes to that backend by
      design (``_TRANSFORMERS_SUPPORTED_MODELS``);
    * TensorRT-LLM's snapshot was read by searching for the planner's classes: a class it
      does not list, or lists as registered only in sources later than the pinned release,
      was not checked, and the note says so.
    """
    snap = load_architectures(engine) if architecture is not None else None
    if snap is None or architecture is None or architecture_refusal(engine, architecture):
        return None
    title = _TITLES[engine]
    if engine == "trtllm":
        if snap.registers(architecture):
            return None
        known = "a later source registers it" if architecture in snap.unverified \
            else "it is not among the classes searched for"
        return (f"whether TensorRT-LLM {snap.version}'s PyTorch runtime registers "
                f"{architecture} was not read ({known}): if trtllm-serve stops with "
                f"'Unknown architecture', serve it with another engine")
    if architecture in snap.transformers_backend:
        return (f"{title} {snap.version} runs {architecture} on its Transformers backend "
                f"(its registry maps the class there): without {title}'s own fused "
                f"kernels, so slower than this plan prices")
    if not snap.lacks(architecture):
        return None
    return (f"{title} {snap.version} has no implementation of {architecture}: it runs the "
            f"checkpoint only on its Transformers backend, where transformers or the "
            f"checkpoint's own code (auto_map) provides a compatible class, slower than this "
            f"plan prices, and refuses to start otherwise")
