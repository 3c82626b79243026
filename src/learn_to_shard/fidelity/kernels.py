"""Kernel checks: the model's per-operator formulas against measured kernel tables.

The tables under ``data/silicon`` (derived from NVIDIA aiconfigurator-core, see its
PROVENANCE.md) hold measured GEMM, attention and NCCL kernel times; every kernel is priced
with the cost model's own operator functions (:meth:`CostModel.gemm_time_s`,
:meth:`CostModel.attention_time_s`, :meth:`CostModel.all_to_all_time_s`, the collective
formulas on :meth:`CostModel.link`), and the operator factors can be fitted on them per device.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from ..cost.comm import (
    ALL_REDUCE,
    GATHER_OR_SCATTER,
    collective_options,
    collective_time_s,
    one_shot_time_s,
    two_shot_time_s,
)
from ..cost.config import CostModelConfig
from ..cost.model import CostModel
from ..engines.collectives import CUSTOM_ALL_REDUCE
from ..errors import ConfigError
from ..hardware.presets import load_device
from ..hardware.spec import ClusterSpec, DeviceSpec
from ..model.hf_config import load_model
from ..parallel.ops import MEGATRON_DIMS
from ..parallel.space import StrategySpace
from ..parallel.strategy import Strategy
from ..workload import DType, Phase, Workload
from .fit import coordinate_descent
from .measurements import data_dir

__all__ = ["AlgorithmStats", "ExpertA2AStats", "expert_a2a_kernels", "expert_a2a_report",
           "collective_algorithm_kernels", "collective_algorithm_report",
           "OperatorStats", "silicon_dir", "silicon_tables", "silicon_kernels",
           "silicon_report", "KernelFitSpec", "KERNEL_FITS", "KernelFit", "fit_silicon",
           "MOE_SHAPES", "MOE_CALIBRATION_MODELS", "MOE_FIT_GRID", "MoEKernel", "moe_kernels",
           "MoEStats", "moe_kernel_report", "fit_moe_kernels", "FP8_BLOCK_FIT_GRID",
           "FP8_BLOCK_FIT_DEVICES", "fit_fp8_block_scale", "FP8_BLOCK_MMA_FIT_GRID",
           "FP8_BLOCK_MMA_FIT_DEVICES", "FP8_BLOCK_MMA_FIT_MIN_TOKENS", "FP8_BLOCK_MMA_FIT_EP",
           "fit_fp8_block_mma", "MOE_SM80_FIT_GRID", "MOE_SM80_FIT_DEVICE",
           "MOE_SM80_DISTRIBUTION", "moe_sm80_rows", "moe_sm80_kernels",
           "fit_moe_sm80_efficiency", "BLOCK_FP8_EXPERT_FIT_GRID",
           "fit_block_fp8_expert_overhead", "MLA_FIT_GRID", "MLA_FIT_BATCHES",
           "MLA_HELD_OUT_DEVICES", "MLAKernel", "mla_kernels", "fit_mla_kernels",
           "W4A16_SHAPES", "W4A16_FIT_GRID",
           "W4A16_FIT_MIN_TOKENS", "W4A16_FIT_MAX_EP", "w4a16_expert_kernels",
           "fit_w4a16_expert_efficiency"]


@dataclass(frozen=True)
class OperatorStats:
    """Error of the analytical per-operator formulas against one group of measured kernels.

    Attributes:
        op: ``gemm``, ``decode_attention``, ``prefill_attention`` or a collective name.
        preset: device preset.
        variant: dtype, or the size class (``m<=64`` memory-bound GEMMs, ``<1MB`` latency-bound
            messages, …).
        n: kernels compared.
        median_error: median signed error ``predicted / measured − 1``.
        median_abs, worst_abs: median and worst absolute error.
    """

    op: str
    preset: str
    variant: str
    n: int
    median_error: float
    median_abs: float
    worst_abs: float


def silicon_dir() -> Path:
    """Where the derived kernel tables live (``data/silicon``, see its PROVENANCE.md)."""
    return Path(str(data_dir() / "silicon"))


def _read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))


_Kernel = tuple[str, str, str, float, float]   # op, preset, variant, predicted_s, measured_s
_SILICON_FILES = ("gemm.csv", "generation_attention.csv", "context_attention.csv", "nccl.csv",
                  "custom_allreduce.csv", "moe_a2a.csv", "moe.csv", "moe_engines.csv",
                  "mla.csv")
#: Engines whose own fused-MoE kernels ``moe_engines.csv`` holds (``moe.csv``: TensorRT-LLM's).
MOE_ENGINE_TABLES: tuple[str, ...] = ("vllm", "sglang")


def silicon_tables(root: Path) -> dict[str, list[dict[str, str]]]:
    """The kernel tables under ``root`` that exist, by file name (read once per report/fit)."""
    return {name: _read_csv(root / name) for name in _SILICON_FILES
            if (root / name).is_file()}


def silicon_kernels(cfg: CostModelConfig, tables: dict[str, list[dict[str, str]]],
                     ops: Sequence[str] | None = None,
                     preset: str | None = None) -> list[_Kernel]:
    """Every kernel of ``tables`` (optionally only operators ``ops`` on ``preset``) priced
    with the model's own operator formulas at ``cfg``; kernels without a positive time on both
    sides are left out (they say nothing about a rate)."""
    stub = load_model("llama-3.1-8b")
    cms: dict[tuple[str, str, str, int], CostModel] = {}

    def cm(dev: str, wdt: str = "bf16", kvdt: str = "bf16", n: int = 1) -> CostModel:
        key = (dev, wdt, kvdt, n)
        if key not in cms:
            wl = Workload(Phase.DECODE, isl=1, weight_dtype=DType(wdt), kv_dtype=DType(kvdt))
            cl = ClusterSpec(load_device(dev), n)
            cms[key] = CostModel(stub, cl, wl, config=cfg,
                                 space=StrategySpace.build(stub, cl, (1,)))
        return cms[key]

    def rows(name: str, op: str | None = None) -> list[dict[str, str]]:
        return [r for r in tables.get(name, [])
                if (ops is None or (op or r["op"]) in ops)
                and (preset is None or r["preset"] == preset)]

    out: list[_Kernel] = []
    for r in rows("gemm.csv", "gemm"):
        dt = "fp8" if r["dtype"] == "fp8" else "bf16"
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        out.append(("gemm", r["preset"], f"{dt} m<=64" if m <= 64 else f"{dt} m>64",
                    cm(r["preset"], wdt=dt).gemm_time_s(m, n, k), float(r["latency_s"])))
    for r in rows("generation_attention.csv", "decode_attention"):
        kvdt = "fp8" if r["kv_dtype"] == "fp8" else "bf16"
        pred = cm(r["preset"], kvdt=kvdt).attention_time_s(
            int(r["batch"]), 1, float(r["kv_len"]), int(r["heads"]), int(r["kv_heads"]),
            int(r["head_dim"]))
        out.append(("decode_attention", r["preset"], f"kv {kvdt}", pred, float(r["latency_s"])))
    for r in rows("context_attention.csv", "prefill_attention"):
        isl = int(r["isl"])
        pred = cm(r["preset"]).attention_time_s(int(r["batch"]), isl, isl / 2, int(r["heads"]),
                                                int(r["kv_heads"]), int(r["head_dim"]))
        out.append(("prefill_attention", r["preset"], "bf16", pred, float(r["latency_s"])))
    kinds = {"all_reduce": ALL_REDUCE, "all_gather": GATHER_OR_SCATTER,
             "reduce_scatter": GATHER_OR_SCATTER}
    for r in rows("nccl.csv"):
        n, size = int(r["num_gpus"]), float(r["message_bytes"])
        model = cm(r["preset"], n=8)
        if r["op"] == "alltoall":      # nccl-tests size: what each rank sends
            pred = model.all_to_all_time_s(size * (n - 1) / n, n)
        else:
            bw, alpha = model.link(n)
            pred = float(collective_time_s(np.array([kinds[r["op"]]]), np.array([n]),
                                           np.array([size]), np.array([bw]),
                                           np.array([alpha]))[0])
        out.append((r["op"], r["preset"], "<1MB" if size < 1e6 else ">=1MB", pred,
                    float(r["latency_s"])))
    return [k for k in out if k[3] > 0 and k[4] > 0]


def silicon_report(config: CostModelConfig | None = None,
                   folder: str | Path | None = None) -> list[OperatorStats]:
    """Predict every kernel of the aiconfigurator-derived tables with the model's own operator
    formulas (:meth:`CostModel.gemm_time_s`, :meth:`CostModel.attention_time_s`,
    :meth:`CostModel.all_to_all_time_s`, the collective formulas on :meth:`CostModel.link`)
    and summarise the errors per operator, device and variant. Empty when the tables are
    absent."""
    tables = silicon_tables(Path(folder) if folder is not None else silicon_dir())
    groups: dict[tuple[str, str, str], list[float]] = {}
    for op, preset, variant, pred, meas in silicon_kernels(config or CostModelConfig(), tables):
        groups.setdefault((op, preset, variant), []).append(pred / meas - 1.0)
    out = []
    for (op, preset, variant), errs in sorted(groups.items()):
        a = [abs(e) for e in errs]
        out.append(OperatorStats(op, preset, variant, len(errs), statistics.median(errs),
                                 statistics.median(a), max(a)))
    return out


@dataclass(frozen=True)
class KernelFitSpec:
    """One kernel-level fit: which operators of the silicon tables, which factors, which grids.

    Attributes:
        name: label of the operator group.
        ops: operator names in the tables (``gemm``, ``decode_attention``, ...).
        variant_prefix: keep only kernels whose variant starts with this (``bf16``, ``fp8``).
        grid: factor -> candidate values (coordinate descent, as :func:`fit_factors`).
    """

    name: str
    ops: tuple[str, ...]
    variant_prefix: str
    grid: dict[str, tuple[float, ...]]


_EFF = tuple(round(0.05 * i, 2) for i in range(2, 21))         # 0.10 .. 1.00
#: The kernel-level fits ``l2s validate --fit-silicon`` runs, per device. The GEMM shape curve
#: ``Π d / (d + gemm_shape_half)`` is fitted together with the GEMM rates.
KERNEL_FITS: tuple[KernelFitSpec, ...] = (
    KernelFitSpec("gemm bf16", ("gemm",), "bf16", {
        "flops_efficiency": _EFF, "hbm_efficiency": _EFF,
        "gemm_shape_half": (0.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)}),
    KernelFitSpec("gemm fp8", ("gemm",), "fp8", {
        "fp8_flops_efficiency": _EFF, "hbm_efficiency": _EFF,
        "gemm_shape_half": (0.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)}),
    KernelFitSpec("decode attention", ("decode_attention",), "", {
        "attention_hbm_efficiency": _EFF}),
    KernelFitSpec("prefill attention", ("prefill_attention",), "", {
        "attention_flops_efficiency": _EFF}),
    KernelFitSpec("collectives (one node)", ("all_reduce", "all_gather", "reduce_scatter",
                                             "alltoall"), "", {
        "scale_up_efficiency": _EFF,
        "scale_up_latency_s": (1e-6, 2e-6, 3e-6, 4e-6, 5e-6, 6e-6, 8e-6, 1e-5, 1.5e-5)}),
)


@dataclass(frozen=True)
class KernelFit:
    """Result of one :class:`KernelFitSpec` on one device.

    Attributes:
        spec: the fit.
        preset: device preset.
        n: kernels fitted.
        values: fitted factor values; ``shipped``: the values in effect in the shipped model
            (a ``None`` factor resolved to what it falls back to).
        median_abs_before, median_abs_after: median |predicted / measured − 1| at the shipped
            and at the fitted values.
    """

    spec: KernelFitSpec
    preset: str
    n: int
    values: dict[str, float]
    shipped: dict[str, float]
    median_abs_before: float
    median_abs_after: float


def _effective(cfg: CostModelConfig, name: str, preset: str) -> float:
    """The value a factor has in effect: ``None`` means "as another factor" or "the device
    preset's" (see :class:`CostModelConfig`)."""
    v = getattr(cfg, name)
    if v is not None:
        return float(v)
    fallback = {"fp8_flops_efficiency": "flops_efficiency",
                "attention_flops_efficiency": "flops_efficiency",
                "attention_hbm_efficiency": "hbm_efficiency"}
    if name in fallback:
        return float(getattr(cfg, fallback[name]))
    return float(getattr(load_device(preset), name))


def fit_silicon(config: CostModelConfig | None = None, folder: str | Path | None = None,
                specs: Sequence[KernelFitSpec] = KERNEL_FITS) -> list[KernelFit]:
    """Fit the operator factors on the measured kernels, per device (item 5 of issue 3).

    For each spec (in order) and device, coordinate descent over the spec's grids (loss: mean
    ``|ln(predicted / measured)|`` over the kernels), starting from the shipped factors with
    the earlier specs' fits for that device applied (prefill attention reads the KV-stream
    efficiency the decode-attention fit found). What it reports
    is a check of the shipped end-to-end factors against kernels, not a replacement for them:
    the end-to-end calibration (:data:`CALIBRATIONS`) decides what ships. Empty when the
    tables are absent.
    """
    base = config or CostModelConfig()
    tables = silicon_tables(Path(folder) if folder is not None else silicon_dir())
    presets = sorted({r["preset"] for rows in tables.values() for r in rows})
    out: list[KernelFit] = []
    carried = {dev: base for dev in presets}   # later fits start from earlier ones' values
    for spec in specs:
        for dev in presets:
            def kernels(cfg: CostModelConfig, spec: KernelFitSpec = spec,
                        dev: str = dev) -> list[_Kernel]:
                return [k for k in silicon_kernels(cfg, tables, spec.ops, dev)
                        if k[2].startswith(spec.variant_prefix)]

            def loss(cfg: CostModelConfig) -> float:
                ks = kernels(cfg)
                return sum(abs(math.log(p / m)) for _, _, _, p, m in ks) / max(1, len(ks))

            first = kernels(base)
            if not first:
                continue
            cfg, _ = coordinate_descent(loss, carried[dev], spec.grid)
            carried[dev] = cfg

            def med(ks: list[_Kernel]) -> float:
                return statistics.median(abs(p / m - 1.0) for _, _, _, p, m in ks)

            out.append(KernelFit(spec, dev, len(first),
                                 {k: _effective(cfg, k, dev) for k in spec.grid},
                                 {k: _effective(base, k, dev) for k in spec.grid},
                                 med(first), med(kernels(cfg))))
    return out




@dataclass(frozen=True)
class AlgorithmStats:
    """Error of one collective algorithm's price against the measured kernels it explains.

    Attributes:
        table: ``nccl`` (NCCL's own choice per call, priced as the cheapest of the NCCL
            algorithms the hardware has) or the engine of a custom all-reduce table
            (``vllm``, ``sglang``: the kernel its dispatch runs at that size; ``trtllm``: its
            ``AUTO`` strategy, priced as the cheapest of one-shot, two-shot and NCCL).
        op: ``all_reduce``, ``all_gather`` or ``reduce_scatter``.
        algorithm: the algorithm the model prices the kernel with (``ring``, ``nvls``,
            ``one-shot``, ...).
        preset: device preset.
        n: kernels compared.
        median_error: median signed error ``predicted / measured − 1``.
        median_abs, worst_abs: median and worst absolute error.
    """

    table: str
    op: str
    algorithm: str
    preset: str
    n: int
    median_error: float
    median_abs: float
    worst_abs: float


_AlgoKernel = tuple[str, str, str, str, int, float, float, float]
# table, op, algorithm, preset, ranks, message_bytes, predicted_s, measured_s


def collective_algorithm_kernels(config: CostModelConfig | None = None,
                                 tables: dict[str, list[dict[str, str]]] | None = None
                                 ) -> list[_AlgoKernel]:
    """Every measured collective of ``nccl.csv`` and ``custom_allreduce.csv`` priced by the
    per-algorithm layer (:func:`learn_to_shard.cost.comm.collective_options`): NCCL rows by
    the cheapest NCCL algorithm (ring, tree, NVLS where the hardware has it), vLLM / SGLang
    rows by the kernel their dispatch runs at that size (one-shot or two-shot, whatever the
    engine's size cap: the tables were collected by calling the kernel directly), TensorRT-LLM
    rows (``AUTO``) by the cheapest of one-shot, two-shot and NCCL below its workspace cap and
    NCCL above. Alltoall rows are left out (no algorithm choice is priced for them)."""
    cfg = config or CostModelConfig()
    tabs = tables if tables is not None else silicon_tables(silicon_dir())
    devices: dict[str, ClusterSpec] = {}

    def cluster(preset: str) -> ClusterSpec:
        if preset not in devices:
            devices[preset] = ClusterSpec(load_device(preset), 8)
        return devices[preset]

    nccl_algos = ("ring", "tree", "nvls")
    out: list[_AlgoKernel] = []
    for r in tabs.get("nccl.csv", []):
        if r["op"] == "alltoall":
            continue
        n, size = int(r["num_gpus"]), float(r["message_bytes"])
        opts = collective_options(cluster(r["preset"]), r["op"].replace("_", "-"), n, size,
                                  config=cfg)
        best = next(o for o in opts.options if o.algorithm in nccl_algos)
        out.append(("nccl", r["op"], best.algorithm, r["preset"], n, size, best.time_s,
                    float(r["latency_s"])))
    for r in tabs.get("custom_allreduce.csv", []):
        n, size, engine = int(r["num_gpus"]), float(r["message_bytes"]), r["engine"]
        cl = cluster(r["preset"])
        bus = cl.device.scale_up_bytes_per_s * cfg.scale_up_efficiency
        if engine == "trtllm":
            chosen = collective_options(cl, "all-reduce", n, size, engine="trtllm",
                                        config=cfg).best
            if chosen is None:
                continue
            algo, pred = chosen.algorithm, chosen.time_s
        else:
            algo = CUSTOM_ALL_REDUCE[engine].dispatch(n, size)
            fn = one_shot_time_s if algo == "one-shot" else two_shot_time_s
            pred = fn(n, size, bus).time_s
        out.append((engine, "all_reduce", algo, r["preset"], n, size, pred,
                    float(r["latency_s"])))
    return [k for k in out if k[6] > 0 and k[7] > 0]


def collective_algorithm_report(config: CostModelConfig | None = None,
                                folder: str | Path | None = None) -> list[AlgorithmStats]:
    """The errors of :func:`collective_algorithm_kernels` per (table, op, algorithm, device):
    the fidelity of each collective algorithm's price where measured points exist. Empty
    when the tables are absent."""
    tables = silicon_tables(Path(folder) if folder is not None else silicon_dir())
    groups: dict[tuple[str, str, str, str], list[float]] = {}
    for table, op, algo, preset, _, _, pred, meas in collective_algorithm_kernels(config,
                                                                                  tables):
        groups.setdefault((table, op, algo, preset), []).append(pred / meas - 1.0)
    out = []
    for (table, op, algo, preset), errs in sorted(groups.items()):
        a = [abs(e) for e in errs]
        out.append(AlgorithmStats(table, op, algo, preset, len(errs), statistics.median(errs),
                                  statistics.median(a), max(a)))
    return out


#: ``moe_a2a.csv`` backend -> DeepEP kernel mode (:data:`learn_to_shard.cost.comm.A2A_MODES`).
_A2A_MODE = {"trtllm_deepep_ht": "normal", "deepep_normal": "normal",
             "trtllm_deepep_ll": "low_latency", "deepep_ll": "low_latency"}
#: ``moe_a2a.csv`` payload label of a dispatch row -> priced payload. SGLang's rows say
#: ``default``: its DeepEP path dispatches FP8 (``A2A_PAYLOAD_BYTES``); TensorRT-LLM's ``fp4``
#: low-latency label is its NVFP4 payload. Combine rows are priced in BF16 whatever the label.
_A2A_PAYLOAD = {"bfloat16": "bf16", "fp8": "fp8", "nvfp4": "nvfp4", "fp4": "nvfp4",
                "default": "fp8"}


@dataclass(frozen=True)
class ExpertA2AStats:
    """Error of :func:`learn_to_shard.cost.comm.expert_a2a_time_s` (and, beside it, of the cost
    model's current all-to-all price) on one group of measured DeepEP kernels.

    Attributes:
        split: ``calibration`` (one-node rows, where the kernels' fixed cost is fitted) or
            ``held-out`` (several nodes).
        mode, phase: DeepEP kernel mode and ``dispatch`` / ``combine``.
        n: kernels compared.
        median_error: median signed ``predicted / measured − 1`` of ``expert_a2a_time_s``.
        median_abs: its median absolute error.
        model_median_error: the same for the cost model's all-to-all price
            (:meth:`CostModel.all_to_all_time_s`, BF16 payload, no fixed cost).
    """

    split: str
    mode: str
    phase: str
    n: int
    median_error: float
    median_abs: float
    model_median_error: float


def expert_a2a_kernels(config: CostModelConfig | None = None,
                       tables: dict[str, list[dict[str, str]]] | None = None,
                       floor: bool = True) -> list[tuple[str, str, str, float, float, float]]:
    """Every H100 / H200 row of ``moe_a2a.csv`` priced by
    :func:`~learn_to_shard.cost.comm.expert_a2a_time_s` (DeepSeek-V3's hidden 7168, top-8 of
    256 experts, the row's EP, tokens, kernel mode and payload; links as the cost model's:
    device preset × ``scale_up_efficiency`` / ``scale_out_efficiency``) and by the cost model's
    all-to-all (:meth:`CostModel.all_to_all_time_s` with the send volume its MoE layer uses).

    Returns:
        ``(split, mode, phase, predicted_s, model_s, measured_s)`` per row; ``floor=False``
        leaves out the fixed cost (the transfer alone, from which it is fitted).
    """
    from ..cost import comm

    cfg = config or CostModelConfig()
    tabs = tables if tables is not None else silicon_tables(silicon_dir())
    stub = load_model("deepseek-v3")
    assert stub.moe is not None
    hidden, k, e = stub.hidden_size, stub.moe.top_k, stub.moe.num_experts
    out = []
    cms: dict[tuple[str, int], CostModel] = {}
    for r in tabs.get("moe_a2a.csv", []):
        if r["preset"] not in ("h100-sxm", "h200") or int(r["hidden"]) != hidden:
            continue
        dev = load_device(r["preset"])
        ep, tokens = int(r["ep"]), float(r["tokens"])
        mode = _A2A_MODE[r["backend"]]
        payload = _A2A_PAYLOAD[r["dtype"]] if r["phase"] == "dispatch" else "bf16"
        pred = float(comm.expert_a2a_time_s(
            tokens, ep, hidden=hidden, top_k=k, experts=e, payload=payload, mode=mode,
            domain=dev.scale_up_domain,
            scale_up_bytes_per_s=dev.scale_up_bytes_per_s * cfg.scale_up_efficiency,
            scale_out_bytes_per_s=dev.scale_out_bytes_per_s * cfg.scale_out_efficiency)[0])
        if not floor:
            pred -= comm.A2A_FLOOR_S[mode]
        key = (r["preset"], ep)
        if key not in cms:
            cl = ClusterSpec(dev, max(ep, dev.scale_up_domain))
            cms[key] = CostModel(stub, cl, Workload(Phase.DECODE, isl=1), config=cfg,
                                 space=StrategySpace.build(stub, cl, (1,)))
        cm = cms[key]
        d = float(cm.dispatch_destinations(np.array([ep]))[0])
        model = cm.all_to_all_time_s(tokens * d * hidden * 2.0 * (1 - 1 / ep), ep)
        split = "calibration" if int(r["nodes"]) == 1 else "held-out"
        out.append((split, mode, r["phase"], pred, model, float(r["latency_s"])))
    return out


def expert_a2a_report(config: CostModelConfig | None = None,
                      folder: str | Path | None = None) -> list[ExpertA2AStats]:
    """:func:`expert_a2a_kernels`' errors per (split, mode, phase). Empty when the table is
    absent."""
    tables = silicon_tables(Path(folder) if folder is not None else silicon_dir())
    groups: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for split, mode, phase, pred, model, meas in expert_a2a_kernels(config, tables):
        groups.setdefault((split, mode, phase), []).append((pred / meas - 1, model / meas - 1))
    return [ExpertA2AStats(split, mode, phase, len(v), statistics.median(p for p, _ in v),
                           statistics.median(abs(p) for p, _ in v),
                           statistics.median(m for _, m in v))
            for (split, mode, phase), v in sorted(groups.items())]


#: Devices whose MoE and MLA kernel rows are priced (the presets the tables share).
_KERNEL_DEVICES = ("h100-sxm", "h200", "b200")
#: The MoE shapes of ``moe.csv`` (hidden, expert width, top-k, experts) and the shipped config
#: of each; ``moe_kernels`` prices a row through that model's MoE layer.
MOE_SHAPES: dict[tuple[int, int, int, int], str] = {
    (7168, 2048, 8, 256): "deepseek-v3",
    (4096, 14336, 2, 8): "mixtral-8x7b",
    (2048, 768, 8, 128): "qwen3-30b-a3b",
    (4096, 1536, 8, 128): "qwen3-235b-a22b",
}
#: Shapes whose rows the MoE block constants are fitted on; the others are held out.
MOE_CALIBRATION_MODELS: tuple[str, ...] = ("deepseek-v3", "mixtral-8x7b", "qwen3-30b-a3b")
#: The table's weight dtypes the model prices (NVFP4 and MXFP4 rows need the 4-bit
#: checkpoints of the same shapes and are left out).
_MOE_DTYPES = {"bfloat16": DType.BF16, "fp8": DType.FP8, "fp8_block": DType.FP8}
#: Grid of :func:`fit_moe_kernels`: the fixed cost per MoE block (s) and the narrow-GEMM
#: half-width of the expert GEMMs' local K and N (what ships in ``CostModelConfig``).
MOE_FIT_GRID: dict[str, tuple[float, ...]] = {
    "moe_block_overhead_s": tuple(x * 1e-6 for x in (0, 4, 8, 12, 16, 20, 24, 28, 32)),
    "expert_shape_half": (0.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0),
}


@dataclass(frozen=True)
class MoEKernel:
    """One measured routed-expert block (``moe.csv``) beside the cost model's price of it.

    Attributes:
        model: shipped config of the row's shape; preset: device; dtype: the table's weight
            dtype; tokens: tokens entering the layer (all of them, before dispatch);
            moe_tp, moe_ep: expert TP and EP degrees; split: ``calibration`` or ``held-out``
            (:data:`MOE_CALIBRATION_MODELS`).
        predicted_s: the model's ``expert_up + expert_down`` time of one layer (act pass,
            top-k reduce and the block's fixed cost included), seconds.
        measured_s: the table's latency, seconds.
    """

    model: str
    preset: str
    dtype: str
    tokens: int
    moe_tp: int
    moe_ep: int
    split: str
    predicted_s: float
    measured_s: float


def moe_kernels(config: CostModelConfig | None = None,
                tables: dict[str, list[dict[str, str]]] | None = None,
                distribution: str = "balanced",
                shapes: Mapping[tuple[int, int, int, int], str] | None = None,
                dtypes: Mapping[str, DType] | None = None,
                devices: Mapping[str, DeviceSpec] | None = None) -> list[MoEKernel]:
    """Every H100 / H200 / B200 row of ``moe.csv`` (or of ``tables["moe.csv"]``: another
    engine's rows, :func:`fit_fp8_block_scale`) with ``distribution`` routing, in a dtype the
    model prices, predicted by the cost model's MoE layer: the row's shape (its shipped config,
    :data:`MOE_SHAPES`), TP ``moe_tp · moe_ep`` with EP ``moe_ep`` (expert TP ``moe_tp``),
    Megatron's dims, a decode step of ``tokens`` sequences, ``expert_up + expert_down`` of one
    MoE layer. ``config`` defaults to the ``trtllm`` profile (the table's kernels are
    TensorRT-LLM's: each rank writes only its own pairs).

    The table's ``balanced`` rows spread tokens evenly over the experts, so they are priced
    with ``moe_balanced_routing`` (the busiest rank holds ``⌈pairs / ep⌉`` pairs, not the
    balls-into-bins maximum of random routing).

    ``shapes`` and ``dtypes`` (default :data:`MOE_SHAPES` and the FP8 / BF16 dtypes) name the
    rows priced and the workload dtype of each table dtype; ``devices`` replaces the preset
    of a row's device (a preset key's :class:`DeviceSpec`, e.g. with another
    ``w4a16_expert_flops_efficiency``) and admits the rows of a preset it names beyond
    H100 / H200 / B200 (A100: :func:`fit_moe_sm80_efficiency`).
    """
    cfg = replace(config or CostModelConfig.for_engine("trtllm"),
                  moe_balanced_routing=distribution == "balanced")
    tabs = tables if tables is not None else silicon_tables(silicon_dir())
    shapes = MOE_SHAPES if shapes is None else shapes
    dtypes = _MOE_DTYPES if dtypes is None else dtypes
    groups: dict[tuple, list[dict[str, str]]] = {}
    for r in tabs.get("moe.csv", []):
        shape = (int(r["hidden"]), int(r["inter"]), int(r["topk"]), int(r["experts"]))
        if (r["distribution"] != distribution or shape not in shapes
                or r["dtype"] not in dtypes
                or r["preset"] not in _KERNEL_DEVICES
                and (devices is None or r["preset"] not in devices)):
            continue
        key = (shapes[shape], r["preset"], r["dtype"], int(r["moe_tp"]), int(r["moe_ep"]))
        groups.setdefault(key, []).append(r)
    models = {name: load_model(name) for name in {k[0] for k in groups}}
    out = []
    for (name, preset, dtype, etp, ep), rows in sorted(groups.items()):
        # The row's weight scaling, whatever the shape's shipped checkpoint uses: per-tensor
        # FP8, or 128 x 128 block scales (the table's fp8_block, DeepSeek-V3's format).
        model = replace(models[name], weight_block_size=(128, 128) if dtype == "fp8_block"
                        else None)
        g = etp * ep
        device = devices[preset] if devices is not None and preset in devices \
            else load_device(preset)
        cluster = ClusterSpec(device, max(g, 8))
        tokens = tuple(sorted({int(r["tokens"]) for r in rows}))
        space = StrategySpace.build(model, cluster)
        space = replace(space, tp_values=(g,), ep_values=(ep,), pp_values=(1,), dp_values=(1,),
                        batch_values=tokens)
        cm = CostModel(model, cluster, Workload(Phase.DECODE, isl=128,
                                                weight_dtype=dtypes[dtype]),
                       config=cfg, space=space)
        layers = sum(1 for layer in model.layers if layer.is_moe)
        split = "calibration" if name in MOE_CALIBRATION_MODELS else "held-out"
        for r in rows:
            est = cm.evaluate(Strategy(tp=g, ep=ep, pp=1, dp=1, batch=int(r["tokens"]),
                                       dims=MEGATRON_DIMS))
            pred = (est.op_time_s["expert_up"] + est.op_time_s["expert_down"]) / layers
            out.append(MoEKernel(name, preset, dtype, int(r["tokens"]), etp, ep, split, pred,
                                 float(r["latency_s"])))
    return out


@dataclass(frozen=True)
class MoEStats:
    """:func:`moe_kernels`' error on one group of rows.

    Attributes:
        split, preset: the group; tokens: ``<=16``, ``<=1024`` or ``>1024``.
        n: rows; median_error: median signed ``predicted / measured − 1``; median_abs: median
        absolute error; ep_over_tp: median over (device, dtype, shape, tokens) of the
        measured EP-only time over the expert-TP-only time at 8 ranks, beside the predicted
        ratio (``(measured, predicted)``; ``None`` where the group has no such pair).
    """

    split: str
    preset: str
    tokens: str
    n: int
    median_error: float
    median_abs: float
    ep_over_tp: tuple[float, float] | None


#: Token classes of :class:`MoEStats`, smallest first (the report's order).
_TOKEN_CLASSES = ("<=16", "<=1024", ">1024")


def _token_class(tokens: int) -> str:
    return _TOKEN_CLASSES[0 if tokens <= 16 else 1 if tokens <= 1024 else 2]


def moe_kernel_report(config: CostModelConfig | None = None,
                      folder: str | Path | None = None) -> list[MoEStats]:
    """:func:`moe_kernels`' errors per (split, device, token class), token classes smallest
    first. Empty without the table."""
    tables = silicon_tables(Path(folder) if folder is not None else silicon_dir())
    ks = moe_kernels(config, tables)
    groups: dict[tuple[str, str, str], list[MoEKernel]] = {}
    for k in ks:
        groups.setdefault((k.split, k.preset, _token_class(k.tokens)), []).append(k)
    at8 = {(k.model, k.preset, k.dtype, k.tokens, k.moe_ep): k for k in ks
           if k.moe_tp * k.moe_ep == 8 and k.moe_ep in (1, 8)}
    out = []
    for (split, preset, tok), rows in sorted(
            groups.items(), key=lambda kv: (kv[0][0], kv[0][1], _TOKEN_CLASSES.index(kv[0][2]))):
        pairs = [(at8[(m, p, d, t, 8)], at8[(m, p, d, t, 1)])
                 for (m, p, d, t, e) in at8 if e == 8 and (m, p, d, t, 1) in at8
                 and p == preset and _token_class(t) == tok
                 and (m in MOE_CALIBRATION_MODELS) == (split == "calibration")]
        ratio = (statistics.median(a.measured_s / b.measured_s for a, b in pairs),
                 statistics.median(a.predicted_s / b.predicted_s for a, b in pairs)) \
            if pairs else None
        errs = [k.predicted_s / k.measured_s - 1 for k in rows]
        out.append(MoEStats(split, preset, tok, len(rows), statistics.median(errs),
                            statistics.median(abs(e) for e in errs), ratio))
    return out


def fit_moe_kernels(config: CostModelConfig | None = None, folder: str | Path | None = None,
                    grid: dict[str, tuple[float, ...]] | None = None
                    ) -> tuple[dict[str, float], float, float]:
    """Fit the MoE block factors of ``grid`` (default :data:`MOE_FIT_GRID`) on the calibration
    rows of ``moe.csv`` (:data:`MOE_CALIBRATION_MODELS`, balanced routing, every device and
    dtype the model prices), starting from ``config`` (default: the ``trtllm`` profile):
    coordinate descent, loss median ``|ln(predicted / measured)|``. ~10 s per trial value
    (the default grid, from zero, ~8 min).

    Returns:
        (fitted values, calibration loss, held-out loss at those values).
    """
    tables = silicon_tables(Path(folder) if folder is not None else silicon_dir())
    return _fit_on_split(lambda cfg: moe_kernels(cfg, tables), config, grid or MOE_FIT_GRID)


#: Grid of :func:`fit_fp8_block_scale`.
FP8_BLOCK_FIT_GRID: dict[str, tuple[float, ...]] = {
    "fp8_block_scale_efficiency": (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7,
                                   0.8, 0.9, 1.0),
}
#: Devices whose block-scaled rows fit ``fp8_block_scale_efficiency``: the chips without
#: block-scaled MMA among the table's (the factor does not apply to B200).
FP8_BLOCK_FIT_DEVICES: tuple[str, ...] = ("h100-sxm", "h200")


def fit_fp8_block_scale(config: CostModelConfig | None = None,
                        folder: str | Path | None = None,
                        grid: dict[str, tuple[float, ...]] | None = None,
                        engine: str = "trtllm") -> tuple[dict[str, float], float, float]:
    """Fit ``fp8_block_scale_efficiency`` (grid default :data:`FP8_BLOCK_FIT_GRID`) on the
    ``fp8_block`` rows of ``engine``'s measured MoE kernels (``moe.csv`` for ``trtllm``,
    ``moe_engines.csv`` for :data:`MOE_ENGINE_TABLES`) on :data:`FP8_BLOCK_FIT_DEVICES`
    (balanced routing; calibration shapes :data:`MOE_CALIBRATION_MODELS`, Qwen3-235B-A22B's
    held out), starting from ``config`` (default: ``engine``'s profile): coordinate descent of
    the median ``|ln(predicted / measured)|`` (~20 s).

    Returns:
        (fitted values, calibration loss, held-out loss at those values).

    Raises:
        ConfigError: an engine with no measured MoE kernels here.
    """
    block = _block_scaled_rows(folder, FP8_BLOCK_FIT_DEVICES, engine)
    return _fit_on_split(lambda cfg: moe_kernels(cfg, block),
                         config or CostModelConfig.for_engine(engine),
                         grid or FP8_BLOCK_FIT_GRID)


#: Grid of :func:`fit_fp8_block_mma`.
FP8_BLOCK_MMA_FIT_GRID: dict[str, tuple[float, ...]] = {
    "fp8_block_mma_efficiency": (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6,
                                 0.65, 0.7, 0.8, 0.9, 1.0),
}
#: Devices whose block-scaled rows fit ``fp8_block_mma_efficiency``: the chips with
#: block-scaled MMA (FP4 math) among the tables'.
FP8_BLOCK_MMA_FIT_DEVICES: tuple[str, ...] = ("b200",)
#: Rows that fit ``fp8_block_mma_efficiency``: at least this many tokens, experts
#: tensor-parallel (EP 1), where the rank's expert GEMMs are compute-bound and make the
#: block's time. With experts split by EP the same blocks at 1,024 and 8,192 tokens take
#: 1.4–3.3x the EP-1 time at the same FLOPs per rank (DeepSeek-V3's shape at 8,192 tokens:
#: 1.20 ms at TP8, 4.01 ms at EP8, SGLang 0.5.14; 1.23 / 4.08 ms in vLLM 0.24.0's table of the
#: same kernel), a cost of the EP path the model does not price and not a GEMM rate.
FP8_BLOCK_MMA_FIT_MIN_TOKENS = 1024
FP8_BLOCK_MMA_FIT_EP = 1


def fit_fp8_block_mma(config: CostModelConfig | None = None,
                      folder: str | Path | None = None,
                      grid: dict[str, tuple[float, ...]] | None = None,
                      engine: str = "sglang") -> tuple[dict[str, float], float, float]:
    """Fit ``fp8_block_mma_efficiency`` (grid default :data:`FP8_BLOCK_MMA_FIT_GRID`) on the
    ``fp8_block`` rows of ``engine``'s own measured MoE kernels (``moe_engines.csv``,
    :data:`MOE_ENGINE_TABLES`) on :data:`FP8_BLOCK_MMA_FIT_DEVICES` with at least
    :data:`FP8_BLOCK_MMA_FIT_MIN_TOKENS` tokens at EP :data:`FP8_BLOCK_MMA_FIT_EP` (balanced
    routing; calibration shapes :data:`MOE_CALIBRATION_MODELS`, Qwen3-235B-A22B's held out),
    starting from ``config`` (default: ``engine``'s profile): coordinate descent of the median
    ``|ln(predicted / measured)|`` (~15 s). On B200 both engines' rows are FlashInfer's
    TensorRT-LLM-gen block-scaled MoE (the source tables' ``kernel_source``:
    ``sglang_flashinfer_trtllm_moe``, ``vllm_fp8moe_flashinfer_trtllm_...``).

    Returns:
        (fitted values, calibration loss, held-out loss at those values).

    Raises:
        ConfigError: an engine with no measured MoE kernels of its own here (``trtllm``'s
            B200 block-scaled rows are DeepGEMM's, ``block_fp8_moe_kernel`` ``"deepgemm"``).
    """
    if engine not in MOE_ENGINE_TABLES:
        raise ConfigError(f"engine {engine!r}: no measured TensorRT-LLM-gen block-scaled MoE "
                          f"kernels of its own on {', '.join(FP8_BLOCK_MMA_FIT_DEVICES)} "
                          f"(known: {', '.join(MOE_ENGINE_TABLES)}; TensorRT-LLM's B200 "
                          f"block-scaled rows are DeepGEMM's)")
    block = _block_scaled_rows(folder, FP8_BLOCK_MMA_FIT_DEVICES, engine)
    block = {"moe.csv": [r for r in block["moe.csv"]
                         if int(r["tokens"]) >= FP8_BLOCK_MMA_FIT_MIN_TOKENS
                         and int(r["moe_ep"]) == FP8_BLOCK_MMA_FIT_EP]}
    return _fit_on_split(lambda cfg: moe_kernels(cfg, block),
                         config or CostModelConfig.for_engine(engine),
                         grid or FP8_BLOCK_MMA_FIT_GRID)


#: Grid of :func:`fit_moe_sm80_efficiency`.
MOE_SM80_FIT_GRID: dict[str, tuple[float, ...]] = {
    "moe_sm80_efficiency": (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85,
                            0.9, 0.95, 1.0),
}
#: The Ampere chip whose engines' 16-bit MoE blocks fit ``moe_sm80_efficiency``.
MOE_SM80_FIT_DEVICE = "a100-80gb"
#: Routing of each engine's 16-bit A100 rows in ``moe_engines.csv``: SGLang 0.5.10 measured
#: balanced routing, vLLM 0.14.0 power-law routing only (``scripts/aiconfigurator_extract.py``
#: takes its ``power_law_1.2`` rows, priced with the profile's ``moe_routing_alpha``).
MOE_SM80_DISTRIBUTION: dict[str, str] = {"sglang": "balanced", "vllm": "power_law_1.2"}


def moe_sm80_rows(engine: str, folder: str | Path | None = None
                  ) -> dict[str, list[dict[str, str]]]:
    """``engine``'s 16-bit routed-expert blocks on :data:`MOE_SM80_FIT_DEVICE` with at least
    :data:`FP8_BLOCK_MMA_FIT_MIN_TOKENS` tokens (experts tensor-parallel, EP 1, as the table
    holds them: where the expert GEMMs are compute-bound and make the block's time), as a
    table set for :func:`moe_kernels`.

    Raises:
        ConfigError: an engine without 16-bit A100 rows of its own fused MoE here."""
    if engine not in MOE_SM80_DISTRIBUTION:
        raise ConfigError(f"engine {engine!r}: no measured 16-bit MoE kernels of its own on "
                          f"{MOE_SM80_FIT_DEVICE} (known: {', '.join(MOE_SM80_DISTRIBUTION)})")
    rows = _engine_moe_rows(folder, (MOE_SM80_FIT_DEVICE,), engine, "bfloat16")
    return {"moe.csv": [r for r in rows["moe.csv"]
                        if int(r["tokens"]) >= FP8_BLOCK_MMA_FIT_MIN_TOKENS
                        and r["distribution"] == MOE_SM80_DISTRIBUTION[engine]]}


def moe_sm80_kernels(config: CostModelConfig | None = None, engine: str = "sglang",
                     folder: str | Path | None = None) -> list[MoEKernel]:
    """:func:`moe_sm80_rows` of ``engine`` priced by :func:`moe_kernels` with ``config``
    (default: ``engine``'s profile) and the routing they were measured with.

    Raises:
        ConfigError: as :func:`moe_sm80_rows`."""
    rows = moe_sm80_rows(engine, folder)
    return moe_kernels(config or CostModelConfig.for_engine(engine), rows,
                       distribution=MOE_SM80_DISTRIBUTION[engine],
                       devices={MOE_SM80_FIT_DEVICE: load_device(MOE_SM80_FIT_DEVICE)})


def fit_moe_sm80_efficiency(config: CostModelConfig | None = None,
                            folder: str | Path | None = None,
                            grid: dict[str, tuple[float, ...]] | None = None,
                            engines: tuple[str, ...] = tuple(MOE_SM80_DISTRIBUTION)
                            ) -> tuple[dict[str, float], float, float]:
    """Fit ``moe_sm80_efficiency`` (grid default :data:`MOE_SM80_FIT_GRID`) on ``engines``'
    own 16-bit fused-MoE blocks on A100 together (:func:`moe_sm80_rows`:
    ``moe_engines.csv``, SGLang 0.5.10's Triton kernel with balanced routing, vLLM 0.14.0's
    ``vllm_fused_moe`` with power-law routing; aiconfigurator-core 0.12.0; the two engines'
    A100 blocks of the same shape and routing measure alike, a median ratio of 1.00 in the
    source tables), each row priced with its engine's profile at the trial value, from
    ``config``'s value (default: 1.0, the 16-bit rate): coordinate descent of the median
    ``|ln(predicted / measured)|`` over the calibration shapes
    :data:`MOE_CALIBRATION_MODELS`, Qwen3-235B-A22B's held out (~10 s).

    Returns:
        (fitted values, calibration loss, held-out loss at those values).

    Raises:
        ConfigError: an engine without 16-bit A100 rows of its own here, or no such rows in
            ``folder``.
    """
    for engine in engines:
        if not moe_sm80_rows(engine, folder)["moe.csv"]:
            raise ConfigError(f"engine {engine!r}: no 16-bit {MOE_SM80_FIT_DEVICE} MoE rows of "
                              f"{MOE_SM80_DISTRIBUTION[engine]} routing from "
                              f"{FP8_BLOCK_MMA_FIT_MIN_TOKENS:,} tokens in "
                              f"{Path(folder) if folder is not None else silicon_dir()}")

    def price(cfg: CostModelConfig) -> list[MoEKernel]:
        return [k for engine in engines for k in moe_sm80_kernels(
            replace(CostModelConfig.for_engine(engine),
                    moe_sm80_efficiency=cfg.moe_sm80_efficiency), engine, folder)]

    start = config or CostModelConfig(moe_sm80_efficiency=1.0)
    return _fit_on_split(price, start, grid or MOE_SM80_FIT_GRID)


def _block_scaled_rows(folder: str | Path | None, devices: tuple[str, ...] | None = None,
                       engine: str = "trtllm") -> dict[str, list[dict[str, str]]]:
    """The ``fp8_block`` rows of ``engine``'s MoE kernels (:func:`_engine_moe_rows`).

    Raises:
        ConfigError: an engine with no measured MoE kernels here."""
    return _engine_moe_rows(folder, devices, engine, "fp8_block")


def _engine_moe_rows(folder: str | Path | None, devices: tuple[str, ...] | None,
                     engine: str, dtype: str) -> dict[str, list[dict[str, str]]]:
    """The ``dtype`` rows of ``engine``'s MoE kernels (``moe.csv`` for ``trtllm``, its rows of
    ``moe_engines.csv`` otherwise; on ``devices``, None: every device) as a table set for
    :func:`moe_kernels`: only those rows are priced (it groups them on their own).

    Raises:
        ConfigError: an engine with no measured MoE kernels here."""
    if engine != "trtllm" and engine not in MOE_ENGINE_TABLES:
        raise ConfigError(f"engine {engine!r}: no measured MoE kernels (known: trtllm, "
                          f"{', '.join(MOE_ENGINE_TABLES)})")
    tables = silicon_tables(Path(folder) if folder is not None else silicon_dir())
    rows = tables.get("moe.csv", []) if engine == "trtllm" else [
        r for r in tables.get("moe_engines.csv", []) if r["source"].startswith(f"{engine}-")]
    return {"moe.csv": [r for r in rows if r["dtype"] == dtype
                        and (devices is None or r["preset"] in devices)]}


#: Grid of :func:`fit_block_fp8_expert_overhead`: the block-scaled blocks' cost per local
#: expert (seconds) and, jointly with it, the block-scaled FP8 rate.
BLOCK_FP8_EXPERT_FIT_GRID: dict[str, tuple[float, ...]] = {
    **FP8_BLOCK_FIT_GRID,
    "block_fp8_local_expert_overhead_s": tuple(x * 1e-6 for x in (0, 0.1, 0.15, 0.2, 0.25,
                                                                   0.3, 0.35, 0.4, 0.5)),
}


def fit_block_fp8_expert_overhead(config: CostModelConfig | None = None,
                                  folder: str | Path | None = None,
                                  grid: dict[str, tuple[float, ...]] | None = None
                                  ) -> tuple[dict[str, float], float, float]:
    """Fit ``block_fp8_local_expert_overhead_s`` jointly with ``fp8_block_scale_efficiency``
    (grid default :data:`BLOCK_FP8_EXPERT_FIT_GRID`) on the ``fp8_block`` rows of ``moe.csv``
    on every device (balanced routing; the efficiency changes only the rows of chips without
    block-scaled MMA; calibration shapes :data:`MOE_CALIBRATION_MODELS`, Qwen3-235B-A22B's
    held out), starting from ``config`` (default: the ``trtllm`` profile): coordinate descent
    of the median ``|ln(predicted / measured)|`` (~4 min).

    Returns:
        (fitted values, calibration loss, held-out loss at those values).
    """
    block = _block_scaled_rows(folder)
    return _fit_on_split(lambda cfg: moe_kernels(cfg, block), config,
                         grid or BLOCK_FP8_EXPERT_FIT_GRID)


#: ``moe.csv``'s weight-only MXFP4 rows (``w4a16_mxfp4``: TensorRT-LLM's W4A16 MoE block,
#: 4-bit E2M1 weights with E8M0 scales per 32, BF16 activations) are all of one shape,
#: gpt-oss-120b's routed experts; priced through that checkpoint (MXFP4 experts, the rest
#: 16-bit) with BF16 activations.
W4A16_SHAPES: dict[tuple[int, int, int, int], str] = {(2880, 2880, 4, 128): "gpt-oss-120b"}
_W4A16_DTYPES = {"w4a16_mxfp4": DType.BF16}
#: Grid of :func:`fit_w4a16_expert_efficiency`.
W4A16_FIT_GRID: tuple[float, ...] = (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65,
                                     0.7, 0.8, 0.9, 1.0)
#: Rows that fit ``DeviceSpec.w4a16_expert_flops_efficiency``: at least this many tokens and
#: at most this EP degree, where the rank's expert GEMMs are compute-bound and make the
#: block's time. At one to 128 tokens the block's fixed cost dominates (74 µs on H100 at
#: every EP degree, where the model's fixed costs say ~33 µs), and at EP ≥ 16 a per-token
#: cost of the block over every token entering it (~70 ns each on H100/H200, whatever the
#: rank's share of the pairs); neither is priced, and neither is a GEMM rate.
W4A16_FIT_MIN_TOKENS = 1024
W4A16_FIT_MAX_EP = 8


def w4a16_expert_kernels(preset: str, efficiency: float | None = None,
                         folder: str | Path | None = None,
                         config: CostModelConfig | None = None) -> list[MoEKernel]:
    """The balanced-routing ``w4a16_mxfp4`` rows of ``moe.csv`` on ``preset`` (a preset name
    or alias) priced by the cost model's MoE layer (:func:`moe_kernels`: gpt-oss-120b's
    experts, MXFP4 weights, BF16 activations, the ``trtllm`` profile by default), with the
    preset's ``w4a16_expert_flops_efficiency`` replaced by ``efficiency`` when given. Empty
    where the table has no such rows on ``preset``.

    Raises:
        ConfigError: an unknown preset, an ``efficiency`` outside (0, 1], or a ``folder``
            that is not a directory."""
    device, rows = _w4a16_rows(preset, folder)
    return _price_w4a16(device, rows, efficiency, config)


def _w4a16_rows(preset: str, folder: str | Path | None
                ) -> tuple[DeviceSpec, dict[str, list[dict[str, str]]]]:
    """``preset``'s device and its ``w4a16_mxfp4`` rows of ``moe.csv``, as a table set for
    :func:`moe_kernels` (read once; :func:`w4a16_expert_kernels`).

    Raises:
        ConfigError: an unknown preset, or a ``folder`` that is not a directory."""
    if folder is not None and not Path(folder).is_dir():
        raise ConfigError(f"{folder}: not a directory of kernel tables")
    tables = silicon_tables(Path(folder) if folder is not None else silicon_dir())
    device = load_device(preset)
    return device, {"moe.csv": [r for r in tables.get("moe.csv", [])
                                if r["preset"] == device.name and r["dtype"] in _W4A16_DTYPES]}


def _price_w4a16(device: DeviceSpec, rows: dict[str, list[dict[str, str]]],
                 efficiency: float | None, config: CostModelConfig | None = None
                 ) -> list[MoEKernel]:
    """:func:`w4a16_expert_kernels` on rows already read (:func:`_w4a16_rows`).

    Raises:
        ConfigError: an ``efficiency`` outside (0, 1]."""
    if efficiency is not None and not 0.0 < efficiency <= 1.0:     # NaN fails too
        raise ConfigError(f"w4a16_expert_flops_efficiency must be in (0, 1], got "
                          f"{efficiency!r}")
    if efficiency is not None:
        device = replace(device, w4a16_expert_flops_efficiency=efficiency)
    return moe_kernels(config, rows, shapes=W4A16_SHAPES, dtypes=_W4A16_DTYPES,
                       devices={device.name: device})


def fit_w4a16_expert_efficiency(preset: str, folder: str | Path | None = None,
                                grid: Sequence[float] = W4A16_FIT_GRID
                                ) -> tuple[float, float, float]:
    """Fit ``DeviceSpec.w4a16_expert_flops_efficiency`` of ``preset`` on its measured W4A16
    MoE blocks (:func:`w4a16_expert_kernels`, the rows of :data:`W4A16_FIT_MIN_TOKENS` tokens
    or more at EP ≤ :data:`W4A16_FIT_MAX_EP`): the grid value of least median
    ``|ln(predicted / measured)|`` (the first of equal ones). ~0.3 s per grid value.

    Returns:
        (fitted value, loss at 1.0, loss at the fitted value).

    Raises:
        ConfigError: ``preset`` has no such rows in the table, has FP4 math (the model
            prices the table's MXFP4 experts there as FP4 GEMMs, which these weight-only
            kernels do not measure), or is not a preset; an empty ``grid`` or a value of it
            outside (0, 1].
    """
    if not grid:
        raise ConfigError("fit_w4a16_expert_efficiency: empty grid")
    device, rows = _w4a16_rows(preset, folder)
    if device.peak_fp4_flops_per_s:
        raise ConfigError(f"device {preset!r} has FP4 math: the model prices MXFP4 experts "
                          f"there as FP4 GEMMs, which the table's W4A16 kernels do not measure")

    def loss(value: float) -> float:
        ks = [k for k in _price_w4a16(device, rows, value)
              if k.tokens >= W4A16_FIT_MIN_TOKENS and k.moe_ep <= W4A16_FIT_MAX_EP]
        if not ks:
            raise ConfigError(f"device {preset!r}: no measured W4A16 MoE kernels of "
                              f"{W4A16_FIT_MIN_TOKENS}+ tokens at EP <= {W4A16_FIT_MAX_EP} "
                              f"in moe.csv")
        return statistics.median(abs(math.log(k.predicted_s / k.measured_s)) for k in ks)

    losses = {v: loss(v) for v in grid}
    best = min(grid, key=lambda v: losses[v])
    return best, loss(1.0), losses[best]


class _SplitKernel(Protocol):
    """A priced kernel row with a fit split (:class:`MoEKernel`, :class:`MLAKernel`)."""

    @property
    def split(self) -> str: ...
    @property
    def predicted_s(self) -> float: ...
    @property
    def measured_s(self) -> float: ...


def _fit_on_split(price: Callable[[CostModelConfig], Sequence[_SplitKernel]],
                  config: CostModelConfig | None, grid: dict[str, tuple[float, ...]]
                  ) -> tuple[dict[str, float], float, float]:
    """Coordinate descent (:func:`~learn_to_shard.fidelity.fit.coordinate_descent`) of the
    median ``|ln(predicted / measured)|`` over the ``calibration`` rows ``price(config)``
    returns, from ``config`` (default: the ``trtllm`` profile) over ``grid``.

    Returns:
        (fitted values of ``grid``'s fields, calibration loss, ``held-out`` loss at them; NaN
        without held-out rows).
    """
    def losses(cfg: CostModelConfig) -> tuple[float, float]:
        by: dict[str, list[float]] = {"calibration": [], "held-out": []}
        for k in price(cfg):
            if k.split in by:
                by[k.split].append(abs(math.log(k.predicted_s / k.measured_s)))
        return (statistics.median(by["calibration"]),
                statistics.median(by["held-out"]) if by["held-out"] else math.nan)

    cfg, loss = coordinate_descent(lambda c: losses(c)[0],
                                   config or CostModelConfig.for_engine("trtllm"), grid)
    return {k: float(getattr(cfg, k)) for k in grid}, loss, losses(cfg)[1]


#: Grid of :func:`fit_mla_kernels`: the fixed cost per MLA module (s) and the fraction of peak
#: HBM bandwidth MLA attention's latent-KV stream reaches.
MLA_FIT_GRID: dict[str, tuple[float, ...]] = {
    "mla_module_overhead_s": tuple(x * 1e-6 for x in (0, 10, 15, 20, 25, 30, 35, 40, 50, 60)),
    "mla_attention_hbm_efficiency": (0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
}
#: Decode batches whose rows fit the module: 1 and 8, where the module's own kernels dominate,
#: and 64 and 256, where the KV stream does; devices held out.
MLA_FIT_BATCHES: tuple[int, ...] = (1, 8, 64, 256)
MLA_HELD_OUT_DEVICES: tuple[str, ...] = ("b200",)
#: The table's GEMM dtypes the model prices (fp8 block-scaled as FP8); NVFP4 rows need 4-bit
#: weights the model does not have and are left out.
_MLA_GEMM_DTYPES = {"bfloat16": DType.BF16, "fp8_block": DType.FP8}


@dataclass(frozen=True)
class MLAKernel:
    """One measured DeepSeek-V3 MLA module (``mla.csv``) beside the cost model's price.

    Attributes:
        preset: device; module: ``generation`` (decode) or ``context`` (prefill); heads:
            query heads on the rank (128 / TP); batch: sequences; length: KV length (decode)
            or prompt length (prefill), tokens; kv_dtype, gemm_dtype: the table's dtypes.
        split: ``calibration`` (decode, batch in :data:`MLA_FIT_BATCHES`, device not held
            out), ``held-out`` (the same rows on :data:`MLA_HELD_OUT_DEVICES`) or ``other``.
        predicted_s: ``qkv_proj + attention + o_proj`` of one layer, seconds.
        measured_s: the table's latency, seconds.
    """

    preset: str
    module: str
    heads: int
    batch: int
    length: int
    kv_dtype: str
    gemm_dtype: str
    split: str
    predicted_s: float
    measured_s: float


def mla_kernels(config: CostModelConfig | None = None,
                tables: dict[str, list[dict[str, str]]] | None = None,
                fit_batches: tuple[int, ...] = MLA_FIT_BATCHES) -> list[MLAKernel]:
    """Every H100 / H200 / B200 row of ``mla.csv`` predicted by the cost model: DeepSeek-V3 at
    TP ``128 / heads``, a decode step of ``batch`` sequences at context ``length`` or a prefill
    of ``batch`` prompts of ``length`` tokens, ``qkv_proj + attention + o_proj`` of one layer
    (Megatron's dims), weights and KV in the row's dtypes (fp8 block-scaled GEMMs as FP8;
    NVFP4-GEMM rows are left out, :data:`_MLA_GEMM_DTYPES`); in the table's row order, one
    cost model per (device, module, dtypes, heads, length). ``fit_batches``: the decode
    batches :attr:`MLAKernel.split` marks for a fit."""
    cfg = config or CostModelConfig.for_engine("trtllm")
    tabs = tables if tables is not None else silicon_tables(silicon_dir())
    model = load_model("deepseek-v3")
    layers = len(model.layers)
    groups: dict[tuple[str, str, str, str, int, int], list[tuple[int, dict[str, str]]]] = {}
    for i, r in enumerate(tabs.get("mla.csv", [])):
        if r["preset"] in _KERNEL_DEVICES and r["gemm_dtype"] in _MLA_GEMM_DTYPES:
            key = (r["preset"], r["module"], r["kv_dtype"], r["gemm_dtype"], int(r["heads"]),
                   int(r["length"]))
            groups.setdefault(key, []).append((i, r))
    out: dict[int, MLAKernel] = {}           # by row, so the result keeps the table's order
    for (preset, module, kv_dtype, gemm_dtype, heads, length), rows in groups.items():
        tp = model.attention.num_heads // heads
        cluster = ClusterSpec(load_device(preset), max(tp, 8))
        gen = module == "generation"
        wl = Workload(Phase.DECODE if gen else Phase.PREFILL, isl=length,
                      weight_dtype=_MLA_GEMM_DTYPES[gemm_dtype],
                      kv_dtype=DType.FP8 if kv_dtype == "fp8" else DType.BF16)
        batches = tuple(sorted({int(r["batch"]) for _, r in rows}))
        space = replace(StrategySpace.build(model, cluster), tp_values=(tp,), ep_values=(1,),
                        pp_values=(1,), dp_values=(1,), batch_values=batches)
        cm = CostModel(model, cluster, wl, config=cfg, space=space)
        for i, r in rows:
            batch = int(r["batch"])
            est = cm.evaluate(Strategy(tp=tp, ep=1, pp=1, dp=1, batch=batch, dims=MEGATRON_DIMS))
            pred = sum(est.op_time_s[k] for k in ("qkv_proj", "attention", "o_proj")) / layers
            fit_row = gen and batch in fit_batches
            split = ("held-out" if preset in MLA_HELD_OUT_DEVICES else "calibration") \
                if fit_row else "other"
            out[i] = MLAKernel(preset, module, heads, batch, length, kv_dtype, gemm_dtype,
                               split, pred, float(r["latency_s"]))
    return [out[i] for i in sorted(out)]


def fit_mla_kernels(config: CostModelConfig | None = None, folder: str | Path | None = None,
                    grid: dict[str, tuple[float, ...]] | None = None,
                    fit_batches: tuple[int, ...] = MLA_FIT_BATCHES
                    ) -> tuple[dict[str, float], float, float]:
    """Fit ``mla_module_overhead_s`` and ``mla_attention_hbm_efficiency`` (default grid
    :data:`MLA_FIT_GRID`) on the calibration rows of :func:`mla_kernels` (decode at
    ``fit_batches``, default :data:`MLA_FIT_BATCHES`) by
    coordinate descent of the median ``|ln(predicted / measured)|``, starting from ``config``
    (default: the ``trtllm`` profile).

    Returns:
        (fitted values, calibration loss, held-out loss at those values).
    """
    tables = silicon_tables(Path(folder) if folder is not None else silicon_dir())
    return _fit_on_split(lambda cfg: mla_kernels(cfg, tables, fit_batches), config,
                         grid or MLA_FIT_GRID)

