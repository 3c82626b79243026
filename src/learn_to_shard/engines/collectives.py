"""Which all-reduce / all-gather / reduce-scatter implementations each serving engine runs.

Data only (no pricing: :mod:`learn_to_shard.cost.comm` prices them). Each engine runs NCCL
(RCCL on AMD) for every collective, where NCCL itself chooses ring, tree or NVLS per call
(``NCCL_ALGO`` pins one: NCCL environment-variable docs); for the all-reduce after a
row-parallel layer it runs its own kernels below a size cap:

* **one-shot**: every rank reads all peers' whole buffers over NVLink and reduces locally;
* **two-shot**: a reduce-scatter then an all-gather, both by direct peer loads/stores;
* **fused all-reduce + RMSNorm**: the one-/two-shot kernel also adds the residual and applies
  the next RMSNorm before writing (TensorRT-LLM ``AllReduceFusionOp.RESIDUAL_RMS_NORM``,
  FlashInfer's ``trtllm_allreduce_fusion`` used by vLLM's ``fuse_allreduce_rms`` pass and
  SGLang's flashinfer all-reduce fusion).

Every fact names the engine file it was read from. The engine versions pinned in
:mod:`learn_to_shard.engines` (vLLM 0.33.0, SGLang 0.5.23, TensorRT-LLM 1.2.0rc2) could not all
be read at those exact tags; each source below names the commit that was read.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ALGORITHMS", "COLLECTIVE_SETTINGS", "CUSTOM_ALL_REDUCE", "CollectiveSetting",
           "CustomAllReduce", "ENGINE_VENDORS", "FUSED_RMSNORM", "FUSED_RMSNORM_CAPABILITIES",
           "NCCL_ALGORITHMS", "NVLS_IN_ENGINE", "SEQUENCE_PARALLEL_PASS", "collective_setting",
           "custom_all_reduce"]

MiB = 1024 * 1024

#: Collective algorithm names (priced by :mod:`learn_to_shard.cost.comm`): NCCL's ``ring``,
#: ``tree`` and ``nvls``, the engines' ``one-shot`` / ``two-shot`` kernels and those kernels
#: with the residual add + RMSNorm fused (``+rmsnorm``).
ALGORITHMS = ("ring", "tree", "nvls", "one-shot", "two-shot", "one-shot+rmsnorm",
              "two-shot+rmsnorm")
#: The algorithms NCCL (RCCL) chooses among by itself, what an engine falls back to.
NCCL_ALGORITHMS = ("ring", "tree", "nvls")

_VLLM_UTILS = ("vllm-project/vllm vllm/distributed/device_communicators/all_reduce_utils.py @ "
               "00d618aab60448acdf3fac3e9c4e2e22d0c6c753")
_VLLM_CUH = ("vllm-project/vllm csrc/custom_all_reduce.cuh @ "
             "c9eabec7d862b69d943f516580c883c20bea5a0e")
_VLLM_PY = ("vllm-project/vllm vllm/distributed/device_communicators/custom_all_reduce.py @ "
            "00d618aab60448acdf3fac3e9c4e2e22d0c6c753")
_SGL_PY = ("sgl-project/sglang "
           "python/sglang/srt/distributed/device_communicators/custom_all_reduce.py")
_SGL_ENV = "sgl-project/sglang python/sglang/srt/entrypoints/engine.py _set_envs_and_config"
_TRT_UTILS = ("NVIDIA/TensorRT-LLM cpp/tensorrt_llm/common/customAllReduceUtils.h @ "
              "005b299bd30992a58607c7628bb2009264970f37")
_TRT_ARGS = "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py TorchLlmArgs.allreduce_strategy"


@dataclass(frozen=True)
class CustomAllReduce:
    """One engine's own all-reduce kernels and when it runs them.

    Attributes:
        engine: ``vllm``, ``sglang`` or ``trtllm``.
        vendors: device vendors it runs on (``nvidia``, ``amd``).
        world_sizes: group sizes the kernels accept.
        max_bytes: largest message (bytes, exclusive) per vendor; the engine uses NCCL above.
        max_bytes_by_cc: tighter caps per (compute capability, world size) where the engine
            has them (vLLM with symmetric memory available: ``CUSTOM_ALL_REDUCE_MAX_SIZES``).
        one_shot_below: ``(world size limit, bytes)`` pairs in order: the engine runs
            one-shot when ``n <= limit`` and ``bytes < threshold`` (first match), else
            two-shot; empty when the strategy is a user choice (``selectable``).
        one_shot_always_at: world sizes that always run one-shot (vLLM: 2).
        selectable: the strategy can be pinned by the user (TensorRT-LLM
            ``allreduce_strategy: ONESHOT | TWOSHOT | NCCL | AUTO``), so every available
            kernel is a launchable choice, not only the one the engine's dispatch picks.
        flags: how to enable / pin it.
        source: where each fact was read.
    """

    engine: str
    vendors: tuple[str, ...]
    world_sizes: tuple[int, ...]
    max_bytes: dict[str, int]
    max_bytes_by_cc: dict[str, dict[int, int]]
    one_shot_below: tuple[tuple[int, int], ...]
    one_shot_always_at: tuple[int, ...]
    selectable: bool
    flags: str
    source: str

    def cap_bytes(self, vendor: str, compute_capability: str | None, n: int,
                  symmetric_memory: bool) -> int:
        """Largest message (exclusive, bytes) the custom kernels take for ``n`` ranks; 0 when
        the vendor is not supported. ``symmetric_memory``: vLLM runs with symmetric memory
        (``CustomAllreduce(symm_mem_enabled=True)``), which makes it apply its per-capability
        caps; callers pass "the device has NVLS multicast" (assumption: vLLM's symmetric-memory
        all-reduce is on wherever the hardware supports it)."""
        cap = self.max_bytes.get(vendor, 0)
        if symmetric_memory and compute_capability in self.max_bytes_by_cc:
            cap = min(cap, self.max_bytes_by_cc[compute_capability].get(n, cap))
        return cap

    def dispatch(self, n: int, message_bytes: float) -> str:
        """The kernel the engine's own dispatch runs: ``one-shot`` or ``two-shot``."""
        if n in self.one_shot_always_at:
            return "one-shot"
        for limit, below in self.one_shot_below:
            if n <= limit:
                return "one-shot" if message_bytes < below else "two-shot"
        return "two-shot"


#: Engine -> device vendors it runs on: vLLM and SGLang on CUDA and ROCm (their install docs:
#: docs.vllm.ai "GPU installation" lists NVIDIA CUDA and AMD ROCm; docs.sglang.ai "AMD GPUs"),
#: TensorRT-LLM on NVIDIA GPUs only (its README).
ENGINE_VENDORS: dict[str, tuple[str, ...]] = {"vllm": ("nvidia", "amd"),
                                              "sglang": ("nvidia", "amd"),
                                              "trtllm": ("nvidia",)}

#: Compute capabilities with fused all-reduce + RMSNorm kernels: TensorRT-LLM's strategy
#: table covers SM 90 and SM 100 (``customAllReduceUtils.h``), FlashInfer's all-reduce fusion
#: the same Hopper / Blackwell parts (10.3: B300, assumed like 10.0).
FUSED_RMSNORM_CAPABILITIES = ("9.0", "10.0", "10.3")

#: Engine -> its custom all-reduce kernels.
CUSTOM_ALL_REDUCE: dict[str, CustomAllReduce] = {
    "vllm": CustomAllReduce(
        engine="vllm", vendors=("nvidia", "amd"), world_sizes=(2, 4, 6, 8),
        max_bytes={"nvidia": 8 * MiB, "amd": 8 * MiB},
        max_bytes_by_cc={"9.0": {2: 64 * MiB, 4: 32 * MiB, 6: MiB // 2, 8: MiB // 4},
                         "10.0": {2: 2 * MiB, 4: 2 * MiB, 6: MiB, 8: MiB},
                         "10.3": {2: 4 * MiB, 4: 4 * MiB, 6: 8 * MiB, 8: 4 * MiB}},
        one_shot_below=((4, 512 * 1024), (8, 256 * 1024)), one_shot_always_at=(2,),
        selectable=False, flags="on by default; --disable-custom-all-reduce turns it off",
        source=(f"{_VLLM_PY} CustomAllreduce (_SUPPORTED_WORLD_SIZES 2, 4, 6, 8; max_size "
                f"8 MiB, capped by CUSTOM_ALL_REDUCE_MAX_SIZES when symm_mem_enabled; one node "
                f"only; fully NVLink-connected or 2 ranks; ROCm and CUDA); "
                f"{_VLLM_UTILS} CUSTOM_ALL_REDUCE_MAX_SIZES; "
                f"{_VLLM_CUH} allreduce (1-stage at world size 2, or below 512 KiB up to 4 "
                f"ranks / 256 KiB up to 8; else 2-stage)")),
    "sglang": CustomAllReduce(
        engine="sglang", vendors=("nvidia", "amd"), world_sizes=(2, 4, 6, 8),
        max_bytes={"nvidia": 8 * MiB, "amd": 16 * MiB}, max_bytes_by_cc={},
        one_shot_below=((4, 512 * 1024), (8, 256 * 1024)), one_shot_always_at=(2,),
        selectable=False, flags="on by default; --disable-custom-all-reduce turns it off",
        source=(f"{_SGL_PY} CustomAllreduce (_SUPPORTED_WORLD_SIZES 2, 4, 6, 8; _MAX_CAR_SIZE "
                "8 MiB, 16 MiB on ROCm); the one-/two-shot split is taken as vLLM's (its "
                "kernel is a port of vLLM's; assumption, not read in sgl-kernel)")),
    "trtllm": CustomAllReduce(
        engine="trtllm", vendors=("nvidia",), world_sizes=(2, 4, 8),
        max_bytes={"nvidia": 8 * 1000 * 1000}, max_bytes_by_cc={},
        one_shot_below=(), one_shot_always_at=(), selectable=True,
        flags="allreduce_strategy: ONESHOT | TWOSHOT | NCCL | AUTO in the --config YAML",
        source=(f"{_TRT_ARGS} (AUTO, NCCL, UB, MINLATENCY, ONESHOT, TWOSHOT, LOWPRECISION, "
                f"MNNVL; default AUTO); {_TRT_UTILS} getMaxRequiredWorkspaceSize (8 MB above "
                "2 ranks, 16 MB at 2) and the AUTO lookup table over TP 2, 4, 8")),
}

#: Engine -> (NVLS reachable, how, source). NCCL enables NVLS by default where the hardware
#: has it (``NCCL_NVLS_ENABLE``, NCCL environment-variable docs); SGLang overrides it.
NVLS_IN_ENGINE: dict[str, tuple[bool, str, str]] = {
    "vllm": (True, "NCCL's NVLS algorithm (NCCL_NVLS_ENABLE default; not checked: whether "
                   "vLLM's own NCCL environment leaves it on)",
             "NCCL environment-variable docs, NCCL_NVLS_ENABLE"),
    "sglang": (True, "only with --enable-nccl-nvls (SGLang sets NCCL_NVLS_ENABLE from it, "
                     "default off)", _SGL_ENV),
    "trtllm": (True, "allreduce_strategy NCCL (or AUTO's NCCL zone): NCCL's NVLS algorithm",
               _TRT_ARGS),
}

#: Engine -> (fused all-reduce + RMSNorm available, how, source).
FUSED_RMSNORM: dict[str, tuple[bool, str, str]] = {
    "vllm": (True, "--compilation-config '{\"pass_config\": {\"fuse_allreduce_rms\": true}}' "
                   "(FlashInfer all-reduce fusion)",
             "vllm-project/vllm vllm/config/compilation.py PassConfig.fuse_allreduce_rms"),
    "sglang": (True, "FlashInfer all-reduce fusion (--enforce-disable-flashinfer-allreduce-"
                     "fusion turns it off; --flashinfer-allreduce-fusion-backend picks the "
                     "kernel)", "SGLang 0.5.23 server flags (engines/data/sglang_flags.json)"),
    "trtllm": (True, "AllReduceFusionOp.RESIDUAL_RMS_NORM in the model code (one-/two-shot)",
               f"{_TRT_UTILS} (the AUTO table has a RESIDUAL_RMS_NORM fusion axis)"),
}


def custom_all_reduce(engine: str) -> CustomAllReduce | None:
    """The custom all-reduce kernels of ``engine`` (``None`` for an engine without them)."""
    return CUSTOM_ALL_REDUCE.get(engine)


# ---------------------------------------------------------------------------------------------
# Launch settings that decide which algorithm runs. An engine picks them once per server
# process (a flag, a YAML key, an NCCL environment variable), not per operator, so the planner
# searches them as an outer axis (``l2s plan --collectives search``: one search per setting,
# the best kept), never as a per-operator head.
# ---------------------------------------------------------------------------------------------

_CUSTOM = ("one-shot", "two-shot")
_FUSED = ("one-shot+rmsnorm", "two-shot+rmsnorm")
_SGL_ARGS = "sgl-project/sglang python/sglang/srt/server_args.py ServerArgs"


@dataclass(frozen=True)
class CollectiveSetting:
    """One launch setting of an engine's collectives and the algorithms it lets run.

    Attributes:
        name: the setting's name (``l2s plan --collectives NAME``; never an algorithm name
            or ``alpha-beta`` / ``auto`` / ``search``).
        engine: ``vllm``, ``sglang`` or ``trtllm``.
        tiers: algorithm names in order of preference: per collective, the first tier with an
            algorithm that can run is used and its cheapest one runs
            (:class:`learn_to_shard.cost.comm.CollectivePricer`). E.g. vLLM runs its custom
            kernel wherever the kernel takes the call (``should_custom_ar``) and NCCL
            elsewhere: ``((one-shot, two-shot), (ring, tree, nvls))``; NCCL's tuner and an
            engine's table-driven choice inside a tier are modelled as the cheapest.
        args: server flags that select it (checked against the pinned flag snapshots).
        yaml: TensorRT-LLM ``--config`` keys that select it.
        env: environment variables that select it.
        source: where the flags and the engine's behaviour were read.
    """

    name: str
    engine: str
    tiers: tuple[tuple[str, ...], ...]
    args: tuple[str, ...] = ()
    yaml: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    source: str = ""


#: Engine -> its collective launch settings, the engine's default first.
COLLECTIVE_SETTINGS: dict[str, tuple[CollectiveSetting, ...]] = {
    "vllm": (
        CollectiveSetting("engine-default", "vllm", (_CUSTOM, NCCL_ALGORITHMS),
                          source=f"{_VLLM_PY} should_custom_ar (custom kernel below its cap, "
                                 "else NCCL)"),
        CollectiveSetting("fuse-allreduce-rms", "vllm", (_FUSED, _CUSTOM, NCCL_ALGORITHMS),
                          args=("--compilation-config",
                                '{"pass_config": {"fuse_allreduce_rms": true}}'),
                          source=FUSED_RMSNORM["vllm"][2]),
        CollectiveSetting("disable-custom-ar", "vllm", (NCCL_ALGORITHMS,),
                          args=("--disable-custom-all-reduce",), source=_VLLM_PY),
    ),
    "sglang": (
        CollectiveSetting("engine-default", "sglang", (_FUSED, _CUSTOM, ("ring", "tree")),
                          source=f"{_SGL_PY}; {_SGL_ENV} (NCCL_NVLS_ENABLE off unless "
                                 "--enable-nccl-nvls); the FlashInfer all-reduce + RMSNorm "
                                 "fusion on where it applies (its enable flag is deprecated in "
                                 "the 0.5.23 snapshot, --enforce-disable-flashinfer-allreduce-"
                                 "fusion turns it off; engines/data/sglang_flags.json)"),
        CollectiveSetting("enable-nccl-nvls", "sglang", (_FUSED, _CUSTOM, NCCL_ALGORITHMS),
                          args=("--enable-nccl-nvls",), source=_SGL_ENV),
        CollectiveSetting("no-allreduce-fusion", "sglang", (_CUSTOM, ("ring", "tree")),
                          args=("--enforce-disable-flashinfer-allreduce-fusion",),
                          source=f"{_SGL_ARGS}.enforce_disable_flashinfer_allreduce_fusion"),
        CollectiveSetting("nccl-only", "sglang", (("ring", "tree"),),
                          args=("--disable-custom-all-reduce",
                                "--enforce-disable-flashinfer-allreduce-fusion"),
                          source=_SGL_PY),
        CollectiveSetting("nccl-only+nvls", "sglang", (NCCL_ALGORITHMS,),
                          args=("--disable-custom-all-reduce",
                                "--enforce-disable-flashinfer-allreduce-fusion",
                                "--enable-nccl-nvls"),
                          source=_SGL_ENV),
    ),
    "trtllm": (
        CollectiveSetting("engine-default", "trtllm", (ALGORITHMS,),
                          yaml=(("allreduce_strategy", "AUTO"),),
                          source=f"{_TRT_ARGS}; {_TRT_UTILS} (AUTO: a tuned table over TP "
                                 "size and message size, modelled as the cheapest)"),
        CollectiveSetting("strategy-nccl", "trtllm", (NCCL_ALGORITHMS,),
                          yaml=(("allreduce_strategy", "NCCL"),), source=_TRT_ARGS),
        CollectiveSetting("strategy-oneshot", "trtllm",
                          (("one-shot+rmsnorm", "one-shot"), NCCL_ALGORITHMS),
                          yaml=(("allreduce_strategy", "ONESHOT"),), source=_TRT_ARGS),
        CollectiveSetting("strategy-twoshot", "trtllm",
                          (("two-shot+rmsnorm", "two-shot"), NCCL_ALGORITHMS),
                          yaml=(("allreduce_strategy", "TWOSHOT"),), source=_TRT_ARGS),
    ),
}


def collective_setting(engine: str, name: str) -> CollectiveSetting | None:
    """The setting ``name`` of ``engine`` (``None`` when it has none of that name)."""
    return next((s for s in COLLECTIVE_SETTINGS.get(engine, ()) if s.name == name), None)


#: Engine -> ``(sequence_parallel, gemm_overlap)`` keys of its compile configuration's
#: ``pass_config`` that launch them (``--compilation-config '{"pass_config": {...}}'``); none
#: at the pinned versions. vLLM's sequence-parallelism and async-TP passes (``enable_sp``,
#: ``fuse_gemm_comms`` in earlier releases' ``PassConfig``) are gone from vLLM 0.33.0: its
#: ``vllm/config/compilation.py`` ``PassConfig`` has neither field, forbids unknown ones, and
#: ``vllm/compilation/passes`` has no such pass (the 0.33.0 wheel, commit g4ba787ec9).
#: SGLang 0.5.23 and TensorRT-LLM's ``trtllm-serve`` have no option for either among the
#: flags / YAML keys read here (engines/data/*_flags.json). The plan can still price them
#: without an engine; an export lists them as not expressible.
SEQUENCE_PARALLEL_PASS: dict[str, tuple[str, str]] = {}
