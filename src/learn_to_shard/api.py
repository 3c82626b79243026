"""The main job as one Python call: :func:`plan`."""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from typing import TypeVar, cast

import numpy as np

from .cost.config import ENGINE_PROFILES, CostModelConfig
from .cost.model import CostModel
from .engines import caps_window_kv, default_kv_dtype, kv_cache_refusal
from .engines.architectures import architecture_refusal
from .engines.collectives import ENGINE_VENDORS
from .errors import ConfigError, EngineRefusalError
from .hardware.fabric import scale_up_fabric
from .hardware.presets import parse_cluster
from .hardware.spec import ClusterSpec, DeviceSpec
from .model.hf_config import load_model
from .model.spec import ModelSpec
from .parallel.strategy import Strategy
from .report.export import checkpoint_refusal
from .report.plan import Plan
from .search import get_searcher, searcher_names
from .search.base import ProgressFn, SearchInterrupted, SearchResult, interruptible
from .serving import ServingLoad, grows_without_bound, keeps_up_with_open_loop
from .units import to_ms
from .workload import DType, Phase, Workload

#: Default evaluation budget (the paper's 4000 simulator calls per search).
DEFAULT_BUDGET = 4000


_T = TypeVar("_T")


def _folded(value: _T) -> _T:
    """A name as the API matches it: case-insensitively, as on the command line
    (``phase="SERVE"``, ``dtype="BF16"``, ``engine="VLLM"``); anything but a string as is."""
    return cast(_T, value.lower()) if isinstance(value, str) else value


def make_workload(phase: str = "decode", isl: int | None = None, osl: int | None = None,
                  context: int | None = None, dtype: str | None = None,
                  kv_dtype: str | None = None,
                  ttft_slo_s: float | None = None, tpot_slo_s: float | None = None,
                  concurrency: int | None = None) -> Workload:
    """Build and check a :class:`Workload` from user-level options.

    Args:
        phase: ``decode``, ``prefill`` or ``serve``.
        isl: prompt tokens (prefill/serve; for decode the same as ``context``).
        osl: output tokens (serve).
        context: decode context length (tokens); exclusive with ``isl``.
        dtype: weight (and default KV) precision, ``bf16`` or ``fp8``; ``None``: ``bf16``
            (:func:`plan` passes the checkpoint's, ``ModelSpec.checkpoint_dtype``).
        kv_dtype: KV-cache precision (default: ``dtype``).
        ttft_slo_s, tpot_slo_s: latency limits, seconds.
        concurrency: serve: closed-loop clients across the cluster; batches one replica can
            never reach are then refused (:attr:`Workload.concurrency`).

    Raises:
        ConfigError: on unknown values or contradictory options.
    """
    phase, dtype, kv_dtype = _folded(phase), _folded(dtype), _folded(kv_dtype)
    dtype = dtype or "bf16"
    try:
        ph = Phase(phase)
    except ValueError:
        raise ConfigError(f"--phase: {phase!r} is not one of decode, prefill, serve") from None
    valid = ", ".join(d.value for d in DType)
    for flag, text in (("--dtype", dtype), ("--kv-dtype", kv_dtype)):
        if text is not None and (not isinstance(text, str)
                                 or text not in {d.value for d in DType}):
            hint = " (fp16 runs like bf16: use bf16)" if text == "fp16" else ""
            raise ConfigError(f"{flag}: {text!r} is not one of {valid}{hint}")
    wd = DType(dtype)
    kd = DType(kv_dtype) if kv_dtype else wd
    if context is not None and isl is not None:
        raise ConfigError("--context and --isl both given: use --context for decode, --isl "
                          "for prefill/serve")
    if concurrency is not None and ph is not Phase.SERVE:
        raise ConfigError("--concurrency: a closed-loop load needs --phase serve")
    if ph is Phase.DECODE:
        length = context if context is not None else isl
        if length is None:
            raise ConfigError("--context: the decode phase needs a context length, e.g. "
                              "--context 16384")
        if context is not None and (isinstance(context, bool)
                                    or not isinstance(context, (int, np.integer))):
            raise ConfigError(f"--context: must be a whole number of tokens, got {context!r}")
        if osl is not None:
            raise ConfigError("--osl has no meaning for --phase decode (steady decoding at "
                              "--context); use --phase serve for isl/osl workloads")
        if ttft_slo_s is not None:
            raise ConfigError("--ttft-slo has no meaning for --phase decode; use --phase serve")
        return Workload(ph, isl=length, osl=0, weight_dtype=wd, kv_dtype=kd,
                        tpot_slo_s=tpot_slo_s)
    if context is not None:
        raise ConfigError(f"--context is for --phase decode; use --isl with --phase {ph.value}")
    if isl is None:
        raise ConfigError(f"--isl: the {ph.value} phase needs a prompt length, e.g. --isl 1024")
    if ph is Phase.PREFILL:
        if tpot_slo_s is not None:
            raise ConfigError("--tpot-slo has no meaning for --phase prefill; use --ttft-slo")
        if osl is not None:
            raise ConfigError("--osl has no meaning for --phase prefill (a prefill holds only "
                              "the prompt's KV); use --phase serve for isl/osl requests")
        return Workload(ph, isl=isl, osl=0, weight_dtype=wd, kv_dtype=kd,
                        ttft_slo_s=ttft_slo_s)
    if osl is None:
        raise ConfigError("--osl: the serve phase needs an output length, e.g. --osl 1024")
    if osl == 1 and tpot_slo_s is not None:
        raise ConfigError("--tpot-slo has no meaning with --osl 1 (a request's one token "
                          "comes from its prefill: no token follows it); use --ttft-slo")
    return Workload(ph, isl=isl, osl=osl, weight_dtype=wd, kv_dtype=kd,
                    ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s, concurrency=concurrency)


def checkpoint_dtypes(model: ModelSpec, dtype: str | None, kv_dtype: str | None,
                      engine: str | None = None) -> tuple[str | None, str | None]:
    """The weight and KV dtypes to plan with, as the engine loads the checkpoint.

    The weights as given, else as the checkpoint stores them (``ModelSpec.checkpoint_dtype``:
    ``fp8`` for FP8 checkpoints). The KV cache as given, else what the engine's default
    ``auto`` makes of the checkpoint (:func:`~learn_to_shard.engines.default_kv_dtype`:
    TensorRT-LLM takes the checkpoint's FP8 KV quantisation where it states one, vLLM and
    SGLang where a ModelOpt export states it; no engine keeps 16 bits). So typing the
    checkpoint's own
    ``--dtype`` changes nothing. ``engine`` may name a cost profile: the engine it describes
    applies (``trtllm-tensorrt``: TensorRT-LLM's; the Splitwise profiles: none).

    Raises:
        ConfigError: ``fp8`` weights of a checkpoint not stored in FP8 (16-bit, or 4-bit
            experts beside 16-bit layers) under TensorRT-LLM, which has no online FP8
            quantisation (vLLM and SGLang quantise at load, ``--quantization
            fp8``): the plan would price weights the server cannot load, and its launch
            command would run out of memory.
    """
    dtype, kv_dtype = _folded(dtype), _folded(kv_dtype)
    profile = ENGINE_PROFILES.get(engine or "", {})
    runtime = profile.get("engine", engine)
    if dtype == "fp8" and runtime == "trtllm" and model.checkpoint_dtype != "fp8":
        stored = "16-bit" if model.quant is None else f"{model.quant.method}"
        raise ConfigError(f"--dtype fp8 with --engine/--export {engine}: TensorRT-LLM has no "
                          f"online FP8 quantisation of {model.name}'s {stored} checkpoint; "
                          f"plan an FP8 checkpoint (e.g. the shipped "
                          f"llama-3.1-70b-instruct-fp8, qwen3-32b-fp8) or drop --dtype fp8")
    if kv_dtype is None:
        quant = model.quant
        kv_dtype = default_kv_dtype(profile.get("engine", engine),
                                    quant is not None and quant.kv_cache_fp8,
                                    quant is not None and quant.modelopt)
    return dtype or model.checkpoint_dtype, kv_dtype


#: Most images one request may carry (engines cap them per prompt, e.g. vLLM
#: ``--limit-mm-per-prompt``; 10,000 is far above any served setting).
MAX_IMAGES_PER_REQUEST = 10_000


def _check_engine_name(engine: object, flag: str) -> None:
    """Refuse an ``engine`` that is neither a name nor ``None``.

    Raises:
        ConfigError: naming ``flag``.
    """
    if engine is not None and not isinstance(engine, str):
        raise ConfigError(f"{flag}: an engine name (vllm, sglang, trtllm) or None, got "
                          f"{engine!r}")


def _model_and_cluster(model: object, cluster: object
                       ) -> tuple[str | ModelSpec, str | ClusterSpec]:
    """``model`` and ``cluster`` as the API reads them: a path given as ``os.PathLike`` as
    its string.

    Raises:
        ConfigError: either is of another type (naming it and what would be valid).
    """
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if isinstance(cluster, os.PathLike):
        cluster = os.fspath(cluster)
    if not isinstance(model, (str, ModelSpec)):
        raise ConfigError(f"model: a shipped name, a config.json path or a ModelSpec, got "
                          f"{model!r}")
    if not isinstance(cluster, (str, ClusterSpec)):
        raise ConfigError(f"cluster: 'DEVICE:COUNT', a cluster JSON path or a ClusterSpec, "
                          f"got {cluster!r}")
    return model, cluster


def _is_int(value: object) -> bool:
    """A whole number given as an integer (Python's or NumPy's; not a bool, float or
    string)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _is_real(value: object) -> bool:
    """A finite real number (Python's or NumPy's; not a bool or string)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) \
        and math.isfinite(float(value))


def with_images(workload: Workload, model: ModelSpec, images_per_request: int | None,
                image_tokens: int | None) -> Workload:
    """The workload with each prompt carrying ``images_per_request`` images: every image adds
    its vision tokens to the prompt the language model prefills (``isl`` becomes text +
    images; KV cache and positions count them too). Tokens per image come from the config
    where it fixes them (``ModelSpec.image_tokens``, e.g. Gemma-3 ``mm_tokens_per_image``
    256), else from ``image_tokens`` (``--image-tokens``; the rule per wrapper is in
    :mod:`learn_to_shard.model.vision`). The vision encoder's compute is not priced.

    Args:
        workload: the text workload (``isl`` = text tokens).
        model: the model; must be a multimodal wrapper when images are given.
        images_per_request: images per prompt, ``None`` or 0 for none.
        image_tokens: tokens per image, needed where the resolution sets them.

    Raises:
        ConfigError: one line naming the flag: images for a text-only model or for the
            decode phase, a negative or too large count, ``--image-tokens`` without images,
            missing where the resolution sets it (the message gives the rule), or different
            from the count the config fixes.
    """
    if images_per_request is not None and not _is_int(images_per_request):
        raise ConfigError(f"--images-per-request: a whole number of images, got "
                          f"{images_per_request!r}")
    if image_tokens is not None and not _is_int(image_tokens):
        raise ConfigError(f"--image-tokens: a whole number of tokens per image, got "
                          f"{image_tokens!r}")
    n = int(images_per_request or 0)
    image_tokens = None if image_tokens is None else int(image_tokens)
    if n < 0 or n > MAX_IMAGES_PER_REQUEST:
        raise ConfigError(f"--images-per-request: must be in [0, {MAX_IMAGES_PER_REQUEST}], "
                          f"got {n}")
    if image_tokens is not None and image_tokens < 1:
        raise ConfigError(f"--image-tokens: must be a positive number of tokens per image, "
                          f"got {image_tokens}")
    if n == 0:
        if image_tokens is not None:
            raise ConfigError("--image-tokens: give --images-per-request too (tokens per "
                              "image mean nothing without images)")
        return workload
    rule = model.image_tokens
    if rule is None:
        raise ConfigError(f"--images-per-request: {model.name} is not a vision-language model "
                          f"({model.source or 'its config'} has no vision wrapper); drop the "
                          f"flag, or use the wrapper's config (Gemma-3, Qwen-VL, Llama-4, "
                          f"LLaVA, InternVL)")
    if rule.fixed is not None and image_tokens is not None and image_tokens != rule.fixed:
        raise ConfigError(f"--image-tokens: {model.name}'s config fixes {rule.fixed} tokens "
                          f"per image ({rule.rule}); drop the flag or give {rule.fixed}")
    per_image = rule.fixed if rule.fixed is not None else image_tokens
    if per_image is None:
        raise ConfigError(f"--image-tokens: {model.name}'s tokens per image depend on the "
                          f"image size ({model.wrapper}: {rule.rule}); give the count with "
                          f"--image-tokens")
    return dataclasses.replace(workload, isl=workload.isl + n * per_image,
                               images_per_request=n, tokens_per_image=per_image)


def cost_config(engine: str | None = None, gpu_memory_utilization: float | None = None,
                max_num_batched_tokens: int | None = None) -> CostModelConfig:
    """The cost-model factors for a serving engine, with the engine's two most used memory
    settings overridden.

    Args:
        engine: a key of :data:`~learn_to_shard.cost.config.ENGINE_PROFILES` (``vllm``,
            ``trtllm``, …) or ``None`` for the defaults (vLLM's memory accounting with the KV
            of a whole request reserved on admission; :class:`CostModelConfig`).
        gpu_memory_utilization: fraction of each device's HBM the engine may use (vLLM
            ``--gpu-memory-utilization``; for ``trtllm`` the profile's 1.0 × its KV fraction).
        max_num_batched_tokens: tokens per engine step (vLLM ``--max-num-batched-tokens``,
            TRT-LLM ``max_num_tokens``); bounds the prefill chunk and the activation workspace.

    Raises:
        ConfigError: unknown engine, or a value out of range (the message names the option).
    """
    _check_engine_name(engine, "--engine")
    if engine is not None and not engine.strip():
        raise ConfigError("--engine: empty; give one of the engine profiles or leave it out")
    overrides: dict[str, float | int] = {}
    if gpu_memory_utilization is not None:
        if not _is_real(gpu_memory_utilization) or not 0.0 < gpu_memory_utilization <= 1.0:
            raise ConfigError(f"--gpu-memory-utilization: must be a number in (0, 1], got "
                              f"{gpu_memory_utilization!r}")
        overrides["memory_utilization"] = float(gpu_memory_utilization)
    if max_num_batched_tokens is not None:
        if not _is_int(max_num_batched_tokens) or max_num_batched_tokens < 1:
            raise ConfigError(f"--max-num-batched-tokens: must be a positive whole number of "
                              f"tokens, got {max_num_batched_tokens!r}")
        overrides["max_num_batched_tokens"] = int(max_num_batched_tokens)
    try:
        return CostModelConfig.for_engine(engine, **overrides)
    except ConfigError as exc:
        raise ConfigError(f"--engine: {exc}") from None


def moe_a2a_refusal(engine: str | None, kernel: str | None, phase: Phase) -> str | None:
    """Why ``engine`` cannot launch the expert all-to-all ``kernel``
    (``CostModelConfig.moe_a2a_kernel``) in ``phase``, or ``None``: DeepEP's auto mode
    (``deepep_auto``: normal kernels for steps that prefill, low-latency ones for pure decode
    steps) is SGLang's ``--deepep-mode auto``; a vLLM server runs one
    ``--all2all-backend`` (``deepep_high_throughput`` or ``deepep_low_latency``, vLLM 0.33.0
    ``ParallelConfig.all2all_backend``), so its serve steps, of both kinds, cannot switch."""
    if engine == "vllm" and kernel == "deepep_auto" and phase is Phase.SERVE:
        return ("vLLM runs one DeepEP mode per server, so serve-phase steps cannot switch "
                "between the normal and the low-latency kernels; use --moe-a2a deepep-normal "
                "(--all2all-backend deepep_high_throughput) or deepep-ll (deepep_low_latency)")
    return None


def make_cost_model(model: str | ModelSpec, cluster: str | ClusterSpec, workload: Workload,
                    config: CostModelConfig | None = None,
                    engine: str | None = None, context_parallel: bool = True) -> CostModel:
    """Load model and cluster (names, paths or specs) and build the cost model.

    Args:
        model, cluster: names, paths or specs.
        workload: the workload.
        config: cost-model factors.
        engine: a serving engine of :data:`learn_to_shard.engines.ENGINES` (``vllm``,
            ``sglang``, ``trtllm``): the strategy space is restricted to what it can launch
            (SGLang with ``config.moe_a2a_kernel`` set: EP = the whole stage group, as its
            DeepEP backend runs). Other names (e.g. the fitted ``splitwise-*`` profiles)
            restrict nothing.
        context_parallel: whether the space has decode context parallelism (``cp > 1``,
            :attr:`~learn_to_shard.parallel.space.StrategySpace.cp_values`); False: ``cp = 1``.

    Raises:
        ConfigError, UnsupportedModelError: on bad model or cluster input (a path may be
            a ``str`` or ``os.PathLike``), or a workload, config or engine of the wrong kind
            or name.
    """
    import dataclasses

    from .engines import ENGINES
    from .parallel.space import StrategySpace

    if not isinstance(workload, Workload):
        raise ConfigError(f"workload: a Workload (make_workload(...)), got {workload!r}")
    if config is not None and not isinstance(config, CostModelConfig):
        raise ConfigError(f"config: a CostModelConfig (cost_config(...)), got {config!r}")
    _check_engine_name(engine, "engine")
    engine = _folded(engine)
    if engine is not None and engine not in ENGINES and engine not in ENGINE_PROFILES:
        # an unknown (or mis-cased) name would restrict nothing, silently
        raise ConfigError(f"engine: {engine!r} is not an engine profile; one of "
                          f"{', '.join(sorted(set(ENGINES) | set(ENGINE_PROFILES)))}, or None")
    kernel = config.moe_a2a_kernel if config is not None else None
    refusal = moe_a2a_refusal(engine, kernel, workload.phase)
    if refusal is not None:
        raise ConfigError(f"config.moe_a2a_kernel {kernel} with engine {engine}: {refusal}")
    model, cluster = _model_and_cluster(model, cluster)
    m = model if isinstance(model, ModelSpec) else load_model(model)
    c = cluster if isinstance(cluster, ClusterSpec) else parse_cluster(cluster)
    profile = ENGINES.get(engine or "")
    if profile is not None and engine == "sglang" and config is not None \
            and config.moe_a2a_kernel is not None:
        # SGLang with an all-to-all backend (--moe-a2a-backend deepep) sets --ep-size to
        # --tp-size (sglang/srt/server_args.py ServerArgs._handle_a2a_moe): every rank holds
        # whole experts, whatever --ep-size the launch names.
        profile = dataclasses.replace(profile, ep_whole_group=True)
    space = StrategySpace.build(m, c, engine=profile) if profile is not None else None
    if not context_parallel:
        space = dataclasses.replace(space or StrategySpace.build(m, c), cp_values=(1,))
    if any(layer.window is not None for layer in m.layers) \
            and not caps_window_kv(engine, m.config_architecture):
        # the engine holds a windowed layer's KV at full length (engines.caps_window_kv)
        config = dataclasses.replace(config or CostModelConfig(), window_kv_capped=False)
    return CostModel(m, c, workload, config=config, space=space)


#: The largest evaluation budget a search accepts (``--budget``'s range).
MAX_BUDGET = 10_000_000


def plan(model: str | os.PathLike[str] | ModelSpec, cluster: str | os.PathLike[str] | ClusterSpec,
         phase: str = "decode", *,
         isl: int | None = None, osl: int | None = None, context: int | None = None,
         dtype: str | None = None, kv_dtype: str | None = None,
         ttft_slo_s: float | None = None, tpot_slo_s: float | None = None, method: str = "auto",
         budget: int = DEFAULT_BUDGET, seed: int = 0, engine: str | None = None,
         config: CostModelConfig | None = None, progress: ProgressFn | None = None,
         images_per_request: int | None = None, image_tokens: int | None = None,
         context_parallel: bool = True) -> Plan:
    """Find the best parallel strategy for serving ``model`` on ``cluster``.

    Args:
        model: shipped model name (e.g. ``"llama-3.1-70b"``), path to a ``config.json`` or
            model folder (a ``str`` or ``os.PathLike``), or a :class:`ModelSpec`.
        cluster: ``"<device>:<count>"`` (e.g. ``"h100-sxm:8"``), a cluster JSON file (a
            ``str`` or ``os.PathLike``), or a :class:`ClusterSpec`.
        phase, isl, osl, context, dtype, kv_dtype, ttft_slo_s, tpot_slo_s: the workload
            (see :func:`make_workload`); SLOs in seconds. ``dtype`` None: the checkpoint's
            (``fp8`` for FP8 checkpoints, else ``bf16``; KV as ``engine``, or the engine of
            ``config``, loads the checkpoint unless ``kv_dtype`` is given;
            :func:`checkpoint_dtypes`;
            ``Plan.weights`` says which).
        method: searcher name (``exact``, ``rl``, ``megatron``, …; see ``searcher_names()``),
            or ``auto`` (default): the exact optimum when it needs at most
            :data:`~learn_to_shard.search.exact.DEFAULT_WORK_LIMIT` units of work (counted,
            not timed: the same problem gives the same plan on any machine and load), else
            the RL search (``megatron`` where ``rl`` is not available);
            ``Plan.method_used`` says which ran.
        budget: evaluation budget for budgeted searchers.
        seed: RNG seed.
        engine: serving engine whose memory policy and overheads to assume (see
            :func:`cost_config`) and whose launchable layouts to search (``vllm``,
            ``sglang``, ``trtllm``; other profiles price only).
        config: cost-model factors (default: :func:`cost_config` of ``engine``); with
            ``engine``, it must be made for that engine (``cost_config(engine, ...)``, e.g.
            to set ``gpu_memory_utilization``).
        progress: optional callback receiving evaluation counts.
        images_per_request, image_tokens: images per prompt of a vision-language model and,
            where the image size sets it, tokens per image (:func:`with_images`).
        context_parallel: search decode context parallelism (``cp``; default on).

    Returns:
        A :class:`Plan`; ``plan.feasible`` is False (with ``plan.reasons``) when nothing fits.

    Raises:
        ConfigError, UnsupportedModelError: on bad input (also: ``config`` made for another
            engine than ``engine``, or ``engine`` on a device it does not run on).
        InternalError: the exact search's self-check failed (a bug; never hidden by a
            fallback to another searcher).
    """
    _check_engine_name(engine, "engine")
    engine, method = _folded(engine), _folded(method)
    if engine is not None and isinstance(config, CostModelConfig) and \
            config.engine != cost_config(engine).engine:
        made = f"engine {config.engine!r}" if config.engine else "no engine"
        raise ConfigError(f"config: made for {made}, not {engine!r}; build it with "
                          f"cost_config({engine!r}, ...)")
    model, cluster = _model_and_cluster(model, cluster)
    if config is not None and not isinstance(config, CostModelConfig):
        raise ConfigError(f"config: a CostModelConfig (cost_config(...)), got {config!r}")
    if not isinstance(context_parallel, bool):
        raise ConfigError(f"context_parallel: True or False, got {context_parallel!r}")
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    # The engine whose auto KV dtype applies: ``engine``, or the one ``config`` was made for.
    wd, kd = checkpoint_dtypes(spec, dtype, kv_dtype,
                               engine or (config.engine if config is not None else None))
    wl = make_workload(phase, isl=isl, osl=osl, context=context, dtype=wd, kv_dtype=kd,
                       ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s)
    wl = with_images(wl, spec, images_per_request, image_tokens)
    cm = make_cost_model(spec, cluster, wl, config or cost_config(engine), engine=engine,
                         context_parallel=context_parallel)
    check_engine_serves(engine, "engine", cm)
    return search_plan(cm, method=method, budget=budget, seed=seed, progress=progress,
                       engine=engine)


def search_plan(cm: CostModel, method: str = "auto", budget: int = DEFAULT_BUDGET,
                seed: int = 0, progress: ProgressFn | None = None,
                auto_work_limit: int | None = None, engine: str | None = None) -> Plan:
    """Run searcher ``method`` on an already built cost model and assemble the :class:`Plan`.

    Args:
        cm: the problem.
        method: searcher name, or ``auto`` (see :func:`plan`).
        budget: evaluation budget for budgeted searchers.
        seed: RNG seed.
        progress: optional callback receiving evaluation counts.
        auto_work_limit: for ``auto``, the work the exact search may do (default
            :data:`~learn_to_shard.search.exact.DEFAULT_WORK_LIMIT`).
        engine: the engine profile ``cm.config`` was built with (recorded in the plan).

    Raises:
        ConfigError: unknown method, a budget outside ``[1, MAX_BUDGET]`` or not a whole
            number, a negative or non-integer seed, a ``progress`` that is not callable.
        InternalError: the exact search's self-check failed (a bug).
    """
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) \
            or not 1 <= budget <= MAX_BUDGET:
        raise ConfigError(f"budget (--budget): must be a whole number of evaluations in "
                          f"[1, {MAX_BUDGET:,}], got {budget!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed (--seed): must be a whole number >= 0, got {seed!r}")
    if progress is not None and not callable(progress):
        raise ConfigError(f"progress: must be a callable taking an evaluation count, got "
                          f"{progress!r}")
    check_method(method)
    budget, seed = int(budget), int(seed)       # NumPy integers: Python ints for the JSON
    if method == "auto":
        return Plan.from_search(cm, _auto_search(cm, budget, seed, progress, auto_work_limit),
                                "auto", engine=engine)
    searcher = get_searcher(method)
    result = searcher.search(cm, budget, seed, progress)
    return Plan.from_search(cm, result, method, engine=engine)


def check_method(method: str) -> None:
    """Refuse a searcher name that is neither ``auto`` nor one of
    :func:`~learn_to_shard.search.searcher_names` (before any work starts).

    Raises:
        ConfigError: naming ``--method`` and the valid names.
    """
    if method != "auto" and method not in searcher_names():
        raise ConfigError(f"--method: {method!r} is not one of "
                          f"{', '.join(['auto', *searcher_names()])}")


def exact_optimum(cm: CostModel, engine: str | None = None) -> Plan:
    """The certified optimum of ``cm`` alone, as a :class:`Plan` (``method="exact"`` without
    the runners-up: :class:`~learn_to_shard.search.exact.ExactSearcher` with ``keep=1``, which
    skips solving them at every batch). For the best strategy of each engine beside the
    unrestricted plan, where only the optimum is shown.

    Raises:
        InternalError: the exact search's self-check failed (a bug).
    """
    from .search.exact import ExactSearcher

    return Plan.from_search(cm, ExactSearcher(keep=1).search(cm, None, 0), "exact",
                            engine=engine)


#: ``--collectives`` values besides the engines' settings and the algorithm names:
#: ``alpha-beta`` (the calibrated formula, the default), ``auto`` (the cheapest algorithm the
#: device and engine have, per collective) and ``search`` (:func:`search_collectives`).
COLLECTIVE_MODES = ("alpha-beta", "auto", "search")


def collectives_config(cfg: CostModelConfig, value: str, engine: str | None,
                       cluster: ClusterSpec) -> CostModelConfig:
    """``cfg`` with the collective pricing of ``l2s plan --collectives value``.

    Args:
        cfg: the factors (their ``engine`` decides which settings exist).
        value: ``alpha-beta``, ``auto``, an algorithm of
            :data:`~learn_to_shard.cost.comm.ALGORITHMS` (forced where it can run, NCCL's
            cheapest elsewhere), or a launch setting of ``engine``
            (:data:`~learn_to_shard.engines.collectives.COLLECTIVE_SETTINGS`). ``search`` is
            not a single configuration: see :func:`search_collectives`.
        engine: the engine profile.
        cluster: the cluster (the settings that differ on its device).

    Raises:
        ConfigError: an unknown value (the message lists the valid ones for the engine), an
            algorithm the device does not have (NVLS without NVLink SHARP; one-/two-shot
            without a fully connected peer-to-peer domain), or a setting that does not differ
            on the device (its flags would be exported for hardware that lacks what they turn
            on).
    """
    from .cost.comm import ALGORITHMS, settings_for
    from .engines.collectives import collective_setting
    from .hardware.fabric import scale_up_fabric

    if value == "alpha-beta":
        return dataclasses.replace(cfg, collective_algorithm="alpha-beta",
                                   collective_tiers=None, collective_setting=None)
    fabric = scale_up_fabric(cluster.device)
    if value in ALGORITHMS:
        lacks = ("NVLink SHARP (NVSwitch generation 3 or later)" if value == "nvls"
                 and not fabric.nvls else
                 "a fully connected peer-to-peer domain" if "shot" in value
                 and not fabric.p2p_full_mesh else "")
        if lacks:
            raise ConfigError(f"--collectives: {value!r} needs {lacks}, which "
                              f"{cluster.device.name} does not have; use auto, or one of the "
                              "algorithms it has")
    if value == "auto" or value in ALGORITHMS:
        return dataclasses.replace(cfg, collective_algorithm=value, collective_tiers=None,
                                   collective_setting=None)
    setting = collective_setting(engine, value) if engine else None
    differs = {st.name for st in settings_for(engine, fabric)} if engine else set()
    if setting is not None and value != "search" and setting.name not in differs:
        raise ConfigError(f"--collectives: {value!r} changes nothing on {cluster.device.name} "
                          f"({engine}'s settings that do: "
                          f"{', '.join(sorted(differs)) or 'none'})")
    if setting is None or value == "search":
        names = [st.name for st in settings_for(engine, scale_up_fabric(cluster.device))] \
            if engine else []
        where = f"{engine} on {cluster.device.name}" if engine else "without --engine"
        hint = "" if engine else "; engine settings need --engine"
        raise ConfigError(f"--collectives: {value!r} is not one of "
                          f"{', '.join([*COLLECTIVE_MODES, *names, *ALGORITHMS])} "
                          f"({where}{hint})")
    return dataclasses.replace(cfg, collective_algorithm="auto",
                               collective_tiers=setting.tiers,
                               collective_setting=setting.name)


class CollectiveSearchInterrupted(SearchInterrupted):
    """Ctrl-C during one setting's search of :func:`search_collectives`.

    Attributes:
        result: that search's best before the interrupt.
        cost_model: the cost model (that setting's configuration) it was searched under, to
            re-evaluate ``result`` with (:meth:`Plan.from_search`).
    """

    def __init__(self, result: SearchResult, cost_model: CostModel) -> None:
        super().__init__(result)
        self.cost_model = cost_model


def search_collectives(cm: CostModel, method: str = "auto", budget: int = DEFAULT_BUDGET,
                       seed: int = 0, progress: ProgressFn | None = None,
                       auto_work_limit: int | None = None, engine: str | None = None) -> Plan:
    """``l2s plan --collectives search``: searcher ``method`` once per collective launch
    setting of the engine that differs on this device
    (:func:`~learn_to_shard.cost.comm.settings_for`) and, where the engine can launch them
    (:data:`~learn_to_shard.engines.collectives.SEQUENCE_PARALLEL_PASS`) and ``cm.config``
    does not fix them, with sequence parallelism off, on, and on with GEMM overlap; the best
    plan is kept.

    These are engine-level settings (one per server process: a flag, a ``--config`` key, a
    compile pass), so they are an outer axis around the per-strategy search, not
    per-operator heads: every searcher sees the same space, and ``exact`` certifies the
    optimum within each setting (hence over all). Without an engine there is one setting,
    ``auto`` (the cheapest algorithm the device has).

    Returns:
        The best variant's :class:`Plan` (highest tokens/s per device; ties keep the earlier
        one, the engine's default first); ``plan.search["collective_settings"]`` holds each
        variant's best tokens/s per device (0 where nothing is feasible; names ``SETTING``,
        ``SETTING+sp``, ``SETTING+sp+overlap``) and ``plan.search["collective_setting"]``
        the winner; ``plan.search["evaluations"]`` counts every setting's evaluations
        (``evaluations_kept_setting`` the winner's alone).

    Raises:
        As :func:`search_plan`; Ctrl-C raises :class:`CollectiveSearchInterrupted` (the
        interrupted setting's best so far, each setting's search runs in its own
        :func:`~learn_to_shard.search.base.interruptible` block).
    """
    from .cost.comm import settings_for
    from .engines.collectives import SEQUENCE_PARALLEL_PASS
    from .hardware.fabric import scale_up_fabric

    settings = settings_for(engine, scale_up_fabric(cm.cluster.device)) if engine else ()
    names = [st.name for st in settings] or ["auto"]
    fixed = cm.config.sequence_parallel or cm.config.gemm_overlap
    sp_opts = [(cm.config.sequence_parallel, cm.config.gemm_overlap, "")]
    if engine in SEQUENCE_PARALLEL_PASS and not fixed:
        sp_opts += [(True, False, "+sp"), (True, True, "+sp+overlap")]
    best: Plan | None = None
    best_name = ""
    scores: dict[str, float] = {}
    evaluations = 0                          # over every setting's search, not the kept one's
    for name in names:
        for sp, overlap, suffix in sp_opts:
            cfg = dataclasses.replace(collectives_config(cm.config, name, engine, cm.cluster),
                                      sequence_parallel=sp, gemm_overlap=overlap)
            cm_s = CostModel(cm.model, cm.cluster, cm.workload, config=cfg, space=cm.space)
            try:
                with interruptible(method, seed, budget):    # this setting's own evaluators
                    p = search_plan(cm_s, method=method, budget=budget, seed=seed,
                                    progress=progress, auto_work_limit=auto_work_limit,
                                    engine=engine)
            except SearchInterrupted as stop:
                raise CollectiveSearchInterrupted(stop.result, cm_s) from None
            scores[name + suffix] = p.best.tokens_per_s_per_device if p.best else 0.0
            evaluations += int(str(p.search.get("evaluations", 0)))
            if best is None or (p.best is not None and (
                    best.best is None
                    or p.best.tokens_per_s_per_device > best.best.tokens_per_s_per_device)):
                best, best_name = p, name + suffix
    assert best is not None
    best.search["collective_settings"] = scores
    best.search["collective_setting"] = best_name
    best.search["evaluations_kept_setting"] = best.search.get("evaluations", 0)
    best.search["evaluations"] = evaluations
    return best


def _auto_search(cm: CostModel, budget: int, seed: int, progress: ProgressFn | None,
                 work_limit: int | None) -> SearchResult:
    """``auto``: the exact optimum if it needs at most ``work_limit`` units of work, else
    ``rl`` (else ``megatron``); ``notes["auto"]`` says what happened. The choice depends only
    on the problem (work is counted, not timed). A failed self-check of the exact search
    (:class:`~learn_to_shard.search.exact_tables.DecompositionError`) propagates."""
    from .search.exact import DEFAULT_WORK_LIMIT, ExactSearcher, ExactWorkLimit

    limit = DEFAULT_WORK_LIMIT if work_limit is None else work_limit
    try:
        result = ExactSearcher(work_limit=limit).search(cm, None, seed, progress)
        result.notes["auto"] = (f"exact optimum found with {result.notes['exact_work']:,} "
                                f"units of work (limit {limit:,})")
        return result
    except ExactWorkLimit as exc:
        why = str(exc)
    for fallback in ("rl", "megatron"):
        if fallback not in searcher_names():
            continue
        try:
            result = get_searcher(fallback).search(cm, budget, seed, progress)
        except ImportError as exc:           # rl without its optional dependencies
            why += f"; {fallback} unavailable ({exc})"
            continue
        result.notes["auto"] = f"exact not used ({why}); ran {fallback}"
        return result
    raise ConfigError(f"--method auto: no searcher could run ({why})")


def expected_evaluations(cm: CostModel, method: str, budget: int) -> int | None:
    """How many evaluations ``method`` will spend (for progress bars); None if unknown."""
    import numpy as np

    from .parallel.space import NUM_COARSE

    if method == "megatron":
        return int(np.prod(cm.space.nvec[:NUM_COARSE]))
    if method in ("megatron-rule", "exact", "auto"):
        return None
    return budget


def exported_max_num_seqs(cm: CostModel, s: Strategy) -> int:
    """Running requests per instance the server ``l2s plan --export`` launches for ``s``
    admits: the plan's batch, or for TensorRT-LLM with pipeline stages its per-micro-batch
    ``--max_batch_size`` times ``pp`` per attention-DP rank
    (:func:`learn_to_shard.report.export.trtllm_max_batch_size`: the batch rounded up to whole
    micro-batches), or for SGLang with pipeline stages its ``--max-running-requests``
    (:func:`learn_to_shard.report.export.sglang_max_running_requests`, likewise whole
    micro-batches)."""
    from .report.export import sglang_max_running_requests, trtllm_max_batch_size

    if cm.config.engine == "trtllm" and s.pp > 1:
        # Per attention-DP rank, or per server for a dense model's DP (export's servers).
        return trtllm_max_batch_size(s.batch // s.dp, s.pp) * s.pp * s.dp
    if cm.config.engine == "sglang" and s.pp > 1:
        # A dense model's DP ranks are servers of their own (export's dense_dp).
        servers, dp = (s.dp, 1) if not cm.model.is_moe else (1, s.dp)
        return sglang_max_running_requests(s.batch // servers, dp, s.pp) * servers
    return s.batch


def simulate_plan(cm: CostModel, plan: Plan, load: ServingLoad, top: int = 3,
                  export_caps: bool = False) -> list[dict[str, object]]:
    """Check the plan's best ``top`` feasible strategies under a request-level simulation of
    continuous batching (:func:`learn_to_shard.serving.simulate_estimate`).

    Args:
        cm: the problem the plan was searched on (serve phase).
        plan: the plan.
        load: closed-loop concurrency, Poisson rate or trace.
        top: how many strategies to simulate (the best, then the alternatives).
        export_caps: the engine runs with the launch settings ``--export`` writes (its
            ``max_num_seqs`` = the plan's batch); False: with the engine's default admission
            cap (``serving.load.engine_max_num_seqs``), as a server launched without it.

    Returns:
        One JSON-ready dict per simulated strategy, best first, each with its ``strategy`` and
        ``slo`` (:func:`slo_under_load`).

    Raises:
        ConfigError: not the serve phase, a request longer than the model's
            ``max_position_embeddings``, or one no plan's KV pool can hold.
    """
    from .serving import simulate_estimate

    out: list[dict[str, object]] = []
    skipped: list[str] = []
    longest = load.longest_request_tokens(cm.workload.isl, cm.workload.osl)
    limit = cm.model.max_position_embeddings
    if limit and longest > limit:
        # Before the KV pool: no memory admits a request the model cannot position.
        raise ConfigError(f"{load.lengths_flag()}: a request of {longest} tokens (isl + osl) "
                          f"exceeds {cm.model.name}'s max_position_embeddings {limit}; the "
                          f"engines refuse it")
    for est in ([plan.best] if plan.best is not None else []) + list(plan.alternatives):
        if len(out) >= top:
            break
        if not est.feasible:
            continue
        if longest > est.kv_capacity_tokens:
            skipped.append(f"{est.strategy.short()} (KV pool {est.kv_capacity_tokens:,})")
            continue
        sim = simulate_estimate(cm, est, load, max_num_seqs=exported_max_num_seqs(
            cm, est.strategy) if export_caps else None)
        out.append({"strategy": est.strategy.short(), **sim,
                    "slo": slo_under_load(cm.workload, sim)})
    if not out and skipped:
        raise ConfigError(f"{load.lengths_flag()}: the load's longest request ({longest:,} "
                          f"tokens) does not fit the KV pool of any of the plan's strategies "
                          f"({'; '.join(skipped)}): the engine could never admit it; shorten "
                          f"the requests or plan with more memory per instance")
    return out


def prefer_under_load(plan: Plan, sims: list[dict[str, object]]
                      ) -> tuple[Plan, list[dict[str, object]]]:
    """The plan to recommend under the simulated load (``sims``, :func:`simulate_plan`'s
    rows, best first). The search ranks strategies on the steady state; the load given
    decides between the strategies simulated. Of the alternatives that meet the SLOs on the
    simulated mean with their queue bounded
    (:func:`~learn_to_shard.report.render.simulated_alternatives_meeting_slo`; every one
    where no SLO is given), the one serving the most simulated tokens/s per device (the
    first in the search's order within :data:`~learn_to_shard.report.render.SIM_AHEAD` of
    the most) replaces the searched best where that best misses an SLO on the simulated
    mean, or where it meets them and the alternative serves
    :data:`~learn_to_shard.report.render.SWAP_AHEAD` times its tokens/s or more (smaller
    gaps are within what the run's settings move), unless the load is an open loop the best
    keeps up with (both then serve what is offered, and their tokens/s differ by how each
    run drains). After a swap the searched best is the first
    alternative, the simulation rows follow that order, the chosen row carries
    ``"chosen_under_load": True``, and ``search["chosen_under_load"]`` records
    ``{"strategy", "over", "missed", "tokens_per_s_per_device"}``: the strategy chosen, the
    searched best, the SLO lines that one misses (empty where it meets them) and both
    strategies' simulated tokens/s per device (``{"chosen", "over"}``). ``--export`` then
    launches the plan chosen.

    Returns:
        ``(plan, sims)``, unchanged where no swap is made; ``plan`` itself is not modified.
    """
    from .report.render import SIM_AHEAD, SWAP_AHEAD, simulated_alternatives_meeting_slo

    searched = plan.best
    # The first row is the plan's best unless its KV pool could not hold the load's longest
    # request (simulate_plan skips it): then there is no simulated best to replace.
    if not sims or searched is None or sims[0]["strategy"] != searched.strategy.short():
        return plan, sims
    first = sims[0]
    slo = first.get("slo")
    if not isinstance(slo, dict):
        return plan, sims
    ok = simulated_alternatives_meeting_slo(sims)
    if not ok:
        return plan, sims
    missed = list(cast("list[str]", slo.get("missed") or []))
    tps = {str(sim["strategy"]): float(cast(float, sim.get("tokens_per_s_per_device") or 0.0))
           for sim in sims}
    top = max(tps[name] for name in ok)
    pick = next(name for name in ok if tps[name] * SIM_AHEAD >= top)
    ahead = tps[pick] >= SWAP_AHEAD * tps[str(first["strategy"])] \
        and not keeps_up_with_open_loop(first)
    if not (missed or ahead):
        return plan, sims
    chosen = next((e for e in plan.alternatives if e.feasible
                   and e.strategy.short() == pick), None)
    if chosen is None:
        return plan, sims
    swapped = dataclasses.replace(
        plan, best=chosen, alternatives=[searched] + [e for e in plan.alternatives
                                                      if e is not chosen],
        search={**plan.search, "chosen_under_load": {
            "strategy": pick, "over": searched.strategy.short(), "missed": missed,
            "tokens_per_s_per_device": {"chosen": tps[pick],
                                        "over": tps[str(first["strategy"])]}}})
    row = next(sim for sim in sims if sim["strategy"] == pick)
    return swapped, [{**row, "chosen_under_load": True}] + [sim for sim in sims
                                                             if sim is not row]


def slo_under_load(workload: Workload, sim: dict[str, object]) -> dict[str, object]:
    """The workload's latency SLOs checked against one simulation (``simulate_estimate``).

    The search checks the SLOs on steady-state means; under a load with queueing and prefill
    stalls the simulated latencies can exceed them. Each SLO is compared with the simulated
    mean (what the search promised) and the p90 (what a percentile SLO of a serving benchmark
    reads).

    Returns:
        ``{"ttft_slo_s", "tpot_slo_s", "met", "p90_met", "missed", "p90_missed"}``: ``met``
        is True when every given SLO holds on the simulated mean (``True`` when none is
        given), ``p90_met`` likewise on the p90; ``missed`` lists one line per SLO whose mean
        is exceeded, ``p90_missed`` one per SLO whose mean holds and whose p90 does not. An
        overloaded open loop at a request rate (``sim["overloaded"]``: its queue grows
        through the run) misses a TTFT SLO whatever this run's mean, which only says how long
        the run was; a trace is judged on its replay, which is its whole load (an
        overloaded trace's queue ends with the trace, and its replay measures it).
    """
    s = cast("dict[str, float]", sim["simulated"])
    met, p90_met = True, True
    missed: list[str] = []
    p90_missed: list[str] = []

    def above(value_s: float, slo_s: float) -> str:
        """``value_s`` in ms with as many decimals (up to 4) as show it above ``slo_s``: a
        missed 50 ms SLO at 50.013 ms reads 50.01, not a 50.0 that looks met."""
        for digits in range(1, 5):
            text = f"{to_ms(value_s):.{digits}f}"
            if float(text) > to_ms(slo_s):
                return text
        return f"{to_ms(value_s):.4f}"

    for name, slo in (("ttft", workload.ttft_slo_s), ("tpot", workload.tpot_slo_s)):
        if slo is None:
            continue
        mean, p90 = float(s[f"mean_{name}_s"]), float(s[f"p90_{name}_s"])
        p99 = float(s[f"p99_{name}_s"])
        if mean > slo:
            met = False
            missed.append(f"{name.upper()} SLO {to_ms(slo):g} ms: simulated mean "
                          f"{above(mean, slo)} ms, p99 {to_ms(p99):.1f} ms")
        elif name == "ttft" and grows_without_bound(sim):
            # A queue that grows through the run: the mean is the run's length, not a level
            # the TTFT settles at, so a longer run (more --num-prompts) exceeds any SLO. A
            # trace's replay is its whole load: its TTFT is what the trace gets.
            met = p90_met = False
            missed.append(f"TTFT SLO {to_ms(slo):g} ms: overloaded, its queue grows without "
                          f"bound (simulated mean {to_ms(mean):.1f} ms over this run's "
                          f"requests, p99 {to_ms(p99):.1f} ms, both growing with the run)")
            continue
        elif p90 > slo:
            p90_missed.append(f"{name.upper()} SLO {to_ms(slo):g} ms: simulated mean "
                              f"{to_ms(mean):.1f} ms, p90 {above(p90, slo)} ms, p99 "
                              f"{to_ms(p99):.1f} ms")
        p90_met = p90_met and p90 <= slo
    return {"ttft_slo_s": workload.ttft_slo_s, "tpot_slo_s": workload.tpot_slo_s, "met": met,
            "p90_met": p90_met, "missed": missed, "p90_missed": p90_missed}


_VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "aws": "AWS Neuron"}


def engine_runs_on(engine: str, device: DeviceSpec) -> bool:
    """Whether ``engine`` runs on ``device``'s vendor
    (:data:`~learn_to_shard.engines.collectives.ENGINE_VENDORS`; an engine not listed there,
    or a device of unknown vendor such as a cluster file's own, passes)."""
    engine = engine_runtime(engine)
    vendor = scale_up_fabric(device).vendor
    return engine not in ENGINE_VENDORS or vendor == "unknown" \
        or vendor in ENGINE_VENDORS[engine]


def engine_runtime(engine: str) -> str:
    """The engine a profile describes (``trtllm-tensorrt`` is TensorRT-LLM's other runtime):
    its ``ENGINE_PROFILES`` entry's ``engine`` where it names one, else the name itself."""
    return str(ENGINE_PROFILES.get(engine, {}).get("engine", engine))


def engine_checkpoint_refusal(engine: str | None, device: DeviceSpec,
                              model: ModelSpec | None) -> str | None:
    """Why ``engine`` (a profile name) cannot load ``model``'s checkpoint on ``device``, or
    ``None`` where nothing known stops it: quantised weights on a chip that lacks the math
    the engine's kernels need, or a checkpoint format the engine does not load
    (:func:`~learn_to_shard.report.export.checkpoint_refusal`, the export's own check;
    ``trtllm-tensorrt`` is passed as itself, the other profiles as their engine runtime)."""
    if engine is None:
        return None
    runtime = engine if engine == "trtllm-tensorrt" else engine_runtime(engine)
    return checkpoint_refusal(runtime, device, model)


def profile_device_refusal(engine: str | None, device: DeviceSpec) -> str | None:
    """Why the profile ``engine`` does not price ``device``, or ``None``: a profile fitted on
    one system (the Splitwise DGX profiles, :data:`~learn_to_shard.cost.config.
    ENGINE_PROFILES` ``_devices``) describes that system's device kind alone."""
    kinds = ENGINE_PROFILES.get(engine or "", {}).get("_devices")
    if kinds and device.name not in kinds:
        return (f"the {engine} profile is fitted on measurements of {' and '.join(kinds)} "
                f"systems, not {device.name}; price {device.name} with vllm, sglang or "
                f"trtllm, or without --engine")
    return None


def engine_model_refusal(engine: str | None, model: ModelSpec | None) -> str | None:
    """Why ``engine`` (a profile name) cannot load ``model`` on any device — a model class
    it does not register and cannot fall back from
    (:func:`~learn_to_shard.engines.architectures.architecture_refusal`, the config's
    ``architectures[0]``) — or ``None``: the part of :func:`engine_checkpoint_refusal` that
    does not depend on the device."""
    if engine is None or model is None:
        return None
    runtime = engine if engine == "trtllm-tensorrt" else engine_runtime(engine)
    return architecture_refusal(runtime, model.config_architecture)


def engine_refusal(engine: str, device: DeviceSpec, model: ModelSpec | None,
                   kv_fp8: bool = False) -> str | None:
    """Why ``engine`` cannot serve ``model`` on ``device`` — a device of a vendor it does
    not run on (:func:`engine_runs_on`), a device its fitted profile does not describe
    (:func:`profile_device_refusal`), a checkpoint it cannot load there
    (:func:`engine_checkpoint_refusal`), or, with ``kv_fp8``, an FP8 KV cache it cannot hold
    there (:func:`~learn_to_shard.engines.kv_cache_refusal`) — or ``None``."""
    if not engine_runs_on(engine, device):
        return f"{engine_runtime(engine)} does not run on {device.name}"
    if (why := profile_device_refusal(engine, device)) is not None:
        return why
    return engine_checkpoint_refusal(engine, device, model) or kv_cache_refusal(
        engine, kv_fp8, device.name, bool(device.peak_fp8_flops_per_s))


def check_engine_serves(engine: str | None, flag: str, cm: CostModel) -> None:
    """:func:`check_engine_device` for the problem ``cm`` describes: its device, its model,
    and an FP8 KV cache where its workload stores one; and, for a prefill workload, a prompt
    that leaves room for its first output token within the model's positions (a prefill of
    the whole context is priced without an engine, as Splitwise measured one, but vLLM,
    SGLang and TensorRT-LLM refuse prompt + max_tokens above their length limit,
    ``report.export.engine_command``).

    Raises:
        EngineRefusalError: as :func:`check_engine_device`, or naming ``--isl`` and the
            longest prompt the engine takes.
    """
    check_engine_device(engine, flag, cm.cluster.device, cm.model,
                        cm.workload.kv_dtype is DType.FP8)
    wl, limit = cm.workload, cm.model.max_position_embeddings
    if engine is not None and engine_runtime(engine) in ("vllm", "sglang", "trtllm") \
            and wl.phase is Phase.PREFILL and limit and wl.isl + 1 > limit:
        images = wl.image_prompt_tokens
        raise EngineRefusalError(
            f"{flag} {engine}: a prompt of {wl.isl} tokens"
            + (f" ({images} of them images')" if images else "")
            + f" leaves no room for its first output token within {cm.model.name}'s {limit} "
            f"positions, and the engine refuses prompt + max_tokens above its length limit; "
            f"use --isl {limit - 1 - images}, or plan without an engine")


def check_engine_device(engine: str | None, flag: str, device: DeviceSpec,
                        model: ModelSpec | None = None, kv_fp8: bool = False) -> None:
    """Refuse an engine (``--engine``, ``--export``, a grid's engine) on a device it does not
    run on (:func:`engine_runs_on`) or its fitted profile does not describe
    (:func:`profile_device_refusal`), or, given ``model``, for a checkpoint it cannot load
    there (:func:`engine_checkpoint_refusal`), or, with ``kv_fp8``, for an FP8 KV cache it
    cannot hold there (:func:`~learn_to_shard.engines.kv_cache_refusal`).

    Raises:
        EngineRefusalError: (a ConfigError) naming ``flag``, the engine, and the device's
            vendor and the vendors the engine runs on, or what the engine lacks for the
            checkpoint or the KV cache and what would run.
    """
    if engine is None:
        return
    if not engine_runs_on(engine, device):
        runtime = engine_runtime(engine)
        runs = " and ".join(_VENDOR_NAMES.get(v, v) for v in ENGINE_VENDORS[runtime])
        vendor = scale_up_fabric(device).vendor
        raise EngineRefusalError(
            f"{flag} {engine}: {runtime} runs on {runs} GPUs, and {device.name} is "
            f"{'an' if vendor in ('amd', 'aws') else 'a'} {_VENDOR_NAMES.get(vendor, vendor)} "
            f"device; run without it, or with an engine that runs there")
    if (why := profile_device_refusal(engine, device)) is not None:
        raise EngineRefusalError(f"{flag} {engine}: {why}")
    why = engine_checkpoint_refusal(engine, device, model)
    if why is not None and model is not None:
        raise EngineRefusalError(f"{flag} {engine}: {why}; plan {model.name} with another "
                                 f"engine, or another checkpoint")
    why = kv_cache_refusal(engine, kv_fp8, device.name, bool(device.peak_fp8_flops_per_s))
    if why is not None:
        raise EngineRefusalError(f"{flag} {engine}: {why}")
