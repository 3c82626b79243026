"""Published serving-under-load measurements predicted by the simulation, row by row.

Each row of ``data/serving_measurements.csv`` (format and sources in ``data/README.md``) states
a deployment — model, GPU kind and count, TP/PP/EP/attention-DP, dtypes, lengths — and a load
(closed-loop concurrency, a request rate, or all requests at once). The row's strategy is
fixed (Megatron's per-operator dims, the stated degrees), priced by the cost model, and served
by :func:`~learn_to_shard.serving.simulate.simulate` under that load; the simulated TTFT, TPOT
and output throughput are set beside the measured ones with the statistic the source reports:
the median where it states one, else the mean (:func:`predict_row`). Lengths follow the row's
dataset: fixed (vLLM's and TensorRT-LLM's random datasets), uniform up to the nominal length
(SGLang's), or ShareGPT's joint distribution scaled to the means of the source's token totals
(``ServingLoad(dataset="sharegpt")``).

A row is "not expressible" (with the reason) when it needs what the planner does not model:
a model or device it does not ship, FP4 weights of a model without a shipped NVFP4
checkpoint (:data:`_FP4_CHECKPOINT`), or a dataset whose lengths the source does not state
(ShareGPT rows without token totals run at the means the other ShareGPT rows state,
:func:`stated_sharegpt_means`).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..cost.config import CostModelConfig
from ..cost.model import CostModel, Estimate
from ..engines import default_kv_dtype
from ..errors import PlannerError
from ..hardware.presets import parse_cluster
from ..model.hf_config import load_model
from ..model.spec import ModelSpec
from ..parallel.ops import MEGATRON_DIMS
from ..parallel.space import StrategySpace
from ..parallel.strategy import Strategy
from ..serving.load import ServingLoad, engine_max_num_seqs, simulate_estimate
from ..workload import DType, Phase, Workload

#: Running requests of a row whose load has no client count (a request rate) and whose
#: engine sets no cap: more than any row's load reaches (the KV pool limits it further).
_UNCAPPED = 4096
#: Requests simulated for an "all at once" (rate = inf) row that does not state its count.
DEFAULT_OFFLINE_PROMPTS = 1000
#: Device names of the table that the presets spell differently.
_DEVICE_ALIASES = {"h100": "h100-sxm", "gb200": "gb200-nvl72"}
#: FP4 rows: the shipped ModelOpt NVFP4 checkpoint a row's base model is predicted with. The
#: rows' own checkpoints (nvidia/DeepSeek-R1-FP4, nvidia/DeepSeek-R1-0528-NVFP4-v2,
#: nvidia/Qwen3-235B-A22B-FP4) are not shipped; these folders have the same architecture
#: (DeepSeek-V3.1 = DeepSeek-V3/R1 layers and shapes) and the same format (NVFP4, 16-element
#: groups with FP8 scales, router / LM head in 16 bits: their ``hf_quant_config.json``), so
#: weight bytes and FP4 GEMM rates follow; per-layer exclusions may differ. Llama-3.3-70B FP4
#: has no shipped NVFP4 folder and stays unpredicted.
_FP4_CHECKPOINT = {"deepseek-v3": "deepseek-v3.1-nvfp4",
                   "qwen3-235b-a22b": "qwen3-235b-a22b-nvfp4"}
#: Engine of the table -> cost-model engine profile (memory policy, fitted step overheads,
#: default admission cap).
_ENGINE_PROFILE = {"vllm": "vllm", "trtllm": "trtllm", "sglang": "sglang"}


@dataclass
class ServingRowResult:
    """One row predicted (or why not).

    Attributes:
        id, split, engine, series, varies: the row's own columns.
        source_key, hardware: the row's source and GPU (its ``source_key`` and
            ``hardware`` columns), for :func:`summarize_by_source`.
        reason: why it was not predicted, ``None`` when it was.
        measured, predicted: metric -> value (``ttft_ms``, ``tpot_ms``, ``output_tok_s``).
        statistic: metric -> the statistic compared: ``"p50"``, ``"mean"``, ``"itl p50"``
            (a pooled median ITL standing in for TPOT, beside the simulated pooled gaps) or
            ``"itl p50 per request"`` (LLMPerf's median of per-request mean ITLs, beside the
            simulated median TPOT); ``output_tok_s`` has none.
        x: the swept value (concurrency or rate) for sweep-direction checks.
    """

    id: str
    split: str
    engine: str
    series: str
    varies: str
    source_key: str = ""
    hardware: str = ""
    reason: str | None = None
    measured: dict[str, float] = field(default_factory=dict)
    predicted: dict[str, float] = field(default_factory=dict)
    statistic: dict[str, str] = field(default_factory=dict)
    x: float = math.nan


def _per_request_itl(row: dict[str, str]) -> bool:
    """Whether the row's ITL is a per-request mean (then the median over requests is a TPOT
    median): LLMPerf divides each request's summed gaps by its output tokens
    (ray-project/llmperf@f1d6bed4 ``token_benchmark_ray.py``, ``INTER_TOKEN_LAT /=
    num_output_tokens``). The rows measured with it say so in ``length_dist`` or ``notes``."""
    return "llmperf" in (row.get("length_dist", "") + " " + row.get("notes", "")).lower()


def _version(text: str | None) -> tuple[int, ...] | None:
    """``"0.3.0"`` -> ``(0, 3, 0)``; ``None`` for an unstated or non-numeric version."""
    m = re.match(r"v?(\d+(?:\.\d+)*)", (text or "").strip())
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def row_scheduler(row: dict[str, str], model: ModelSpec | None = None) -> dict[str, Any]:
    """Cost-model fields of the scheduler a row's engine version and stated launch flags
    ran, where they differ from the engine profile's defaults (the current engines; see
    :data:`learn_to_shard.engines.OVERLAP_SCHEDULE_ENGINES`):

    * SGLang before v0.4 had no overlap scheduler (it became the default in v0.4:
      https://lmsys.org/blog/2024-12-04-sglang-v0-4/#zero-overhead-batch-scheduler).
    * vLLM ``--async-scheduling`` in the row's launch (``notes``): the overlap scheduler;
      SGLang ``--disable-overlap-schedule`` and TensorRT-LLM ``disable_overlap_scheduler:
      true``: none.
    * vLLM ``--num-scheduler-steps N`` (V0 multi-step): decode bursts of N steps, and V0's
      default scheduler, which runs waiting prompts first in prompt-only steps when chunked
      prefill is off (multi-step and chunked prefill did not combine in V0;
      vllm-project/vllm v0.6.0 ``vllm/core/scheduler.py`` ``_schedule_default``), with V0's
      token budget for unchunked prompts, ``max(max_model_len, 2048)`` (``vllm/config.py``
      ``SchedulerConfig``): the launch's ``--max-model-len``, else ``model``'s
      ``max_position_embeddings`` (vLLM's default ``max_model_len``; no budget without
      either); other rows run the engine's default budget for the device
      (:func:`learn_to_shard.engines.default_max_num_batched_tokens`).
    * SGLang ``--disable-radix-cache``: its benchmark's fixed-length (ignore-EOS) requests
      are admitted by the no-future-OOM check (``kv_admission = "no_future_oom"``,
      :data:`learn_to_shard.engines.KV_ADMISSION_SOURCES`).
    * TensorRT-LLM ``attention_dp_config`` ``enable_balance: true``: the attention-DP ranks
      are balanced (``attention_dp_balanced``).
    * TensorRT-LLM ``moe_config`` ``backend`` ``TRTLLM`` / ``DEEPGEMM``: the kernels of a
      block-scaled FP8 MoE on Blackwell (``block_fp8_moe_kernel``).

    Rows with no stated version run the profile's defaults."""
    out: dict[str, Any] = {}
    notes = row.get("notes", "")
    version = _version(row.get("engine_version"))
    if row["engine"] == "sglang" and (version is not None and version < (0, 4)
                                      or "--disable-overlap-schedule" in notes):
        out["overlap_schedule"] = False
    if row["engine"] == "trtllm" and re.search(r"disable_overlap_scheduler:\s*true", notes):
        out["overlap_schedule"] = False
    if row["engine"] == "trtllm" and re.search(r"enable_balance:\s*true", notes):
        out["attention_dp_balanced"] = True
    if row["engine"] == "vllm":
        if re.search(r"(?<!without )--async-scheduling", notes):
            out["overlap_schedule"] = True
        m = re.search(r"--num-scheduler-steps[ =](\d+)", notes)
        if m and int(m.group(1)) > 1:
            out["decode_steps_per_schedule"] = int(m.group(1))
            out["prefill_first"] = True
            # V0 without prompt chunking: a step's budget is max(max_model_len, 2048)
            # (vllm-project/vllm v0.6.0 vllm/config.py SchedulerConfig.__init__)
            stated = re.search(r"--max[-_]model[-_]len[ =](\d+)", notes)
            length = int(stated.group(1)) if stated else (
                model.max_position_embeddings if model is not None else 0)
            if length:
                out["max_num_batched_tokens"] = max(length, 2048)
    if row["engine"] == "sglang" and "--disable-radix-cache" in notes:
        out["kv_admission"] = "no_future_oom"
    m = re.search(r"moe_config[ :(]+backend:?\s*(TRTLLM|DEEPGEMM)\b", notes)
    if row["engine"] == "trtllm" and m:
        out["block_fp8_moe_kernel"] = "trtllm-gen" if m.group(1) == "TRTLLM" else "deepgemm"
    return out


#: Launch flags of the rows' notes that set engine limits, per engine: flag -> the
#: cost-model field it sets and the type of its value. vLLM (vllm/engine/arg_utils.py):
#: ``--max-num-batched-tokens`` / ``--max-num-seqs`` / ``--gpu-memory-utilization``;
#: SGLang (sglang/srt/server_args.py): ``--chunked-prefill-size`` /
#: ``--max-running-requests`` / ``--mem-fraction-static`` (``--mem-frac`` its prefix, which
#: argparse accepts), per instance: with DP attention SGLang divides the token budget and the
#: running requests over the ``attn_dp`` ranks (sglang/srt/server_args.py), so the row's
#: ``attention_dp`` divides them here; TensorRT-LLM ``trtllm-bench`` / ``trtllm-serve``:
#: ``--max_num_tokens`` / ``--max_batch_size`` (per rank with attention DP, as the sources'
#: ``--concurrency`` of ``max_batch_size × ranks`` shows) / ``--kv_cache_free_gpu_mem_fraction``.
LAUNCH_LIMIT_FLAGS: dict[str, dict[str, tuple[str, type]]] = {
    "vllm": {"--max-num-batched-tokens": ("max_num_batched_tokens", int),
             "--max-num-seqs": ("max_num_seqs", int),
             "--gpu-memory-utilization": ("memory_utilization", float)},
    "sglang": {"--chunked-prefill-size": ("max_num_batched_tokens", int),
               "--max-running-requests": ("max_num_seqs", int),
               "--mem-fraction-static": ("memory_utilization", float),
               "--mem-frac": ("memory_utilization", float),
               "--scheduler-recv-interval": ("scheduler_recv_interval", int)},
    "trtllm": {"--max_num_tokens": ("max_num_batched_tokens", int),
               "--max_batch_size": ("max_num_seqs", int),
               "--kv_cache_free_gpu_mem_fraction": ("kv_cache_free_fraction", float),
               # the same fraction as trtllm-serve's --extra_llm_api_options YAML states it
               # (kv_cache_config.free_gpu_memory_fraction)
               "free_gpu_memory_fraction:": ("kv_cache_free_fraction", float)},
}


#: SGLang launch values stated per instance and divided over its attention-DP ranks.
_PER_INSTANCE = ("max_num_batched_tokens", "max_num_seqs")


def row_launch_limits(row: dict[str, str]) -> dict[str, Any]:
    """Cost-model fields of the engine limits a row's launch sets in its ``notes``
    (:data:`LAUNCH_LIMIT_FLAGS`: token budget per step and rank, running requests per rank,
    memory fractions, SGLang's scheduler receive interval); the rest keep the engine
    profile's defaults. A flag is read as
    ``--flag N`` or ``--flag=N`` with a plain number (not ``8k``); of YAML keys only the ones
    :data:`LAUNCH_LIMIT_FLAGS` lists with their colon (``key: N``)."""
    out: dict[str, Any] = {}
    notes = row.get("notes", "")
    engine = row.get("engine", "")
    dp = max(1, int(row.get("attention_dp") or 1))
    for flag, (name, kind) in LAUNCH_LIMIT_FLAGS.get(engine, {}).items():
        m = re.search(re.escape(flag) + r"(?![\w-])[ =]([0-9]+(?:\.[0-9]+)?)(?![\w.])", notes)
        if m:
            value = float(m.group(1))
            if kind is int:
                # SGLang's budget and running requests are per instance
                per = dp if engine == "sglang" and name in _PER_INSTANCE else 1
                out[name] = max(1, int(value) // per)
            else:
                out[name] = value
    return out


def _num(text: str | None) -> float | None:
    """A finite float from a cell, ``None`` for an empty one; ``inf`` stays ``inf``."""
    if text is None or not text.strip():
        return None
    v = float(text)
    return v if not math.isnan(v) else None


def default_table() -> Path:
    """The shipped table, ``data/serving_measurements.csv``."""
    return Path(str(resources.files("learn_to_shard") / "data" / "serving_measurements.csv"))


#: ``length_dist`` of rows whose random lengths are drawn uniformly from ``r`` times the
#: nominal length to the nominal length, prompts and outputs alike: SGLang's bench_serving
#: (``[1, nominal]``, its ``random_range_ratio`` 0.0 default) and the ``benchmark_serving.py``
#: of SemiAnalysisAI/InferenceX (``int(r · nominal)`` to ``nominal``, ``--random-range-ratio``
#: 0.8: ``utils/bench_serving/benchmark_serving.py`` ``sample_uniform``).
_UP_TO_NOMINAL = re.compile(r"^uniform integers in \[(?:1|([0-9.]+) × nominal), nominal\]")


def _random_draw(length_dist: str) -> dict[str, Any]:
    """:class:`~learn_to_shard.serving.load.ServingLoad` length fields of a random-prompt row:
    ``up_to_nominal`` with its ``range_ratio`` where ``length_dist`` states a range up to the
    nominal length (:data:`_UP_TO_NOMINAL`), else the nominal lengths (fixed)."""
    m = _UP_TO_NOMINAL.match(length_dist)
    if m is None:
        return {"up_to_nominal": False}
    return {"up_to_nominal": True, "range_ratio": float(m.group(1) or 0.0)}


def _lengths(row: dict[str, str]) -> tuple[int, int] | None:
    """(isl, osl) stated, or the means of the source's token totals; ``None`` if neither.

    A row whose ``length_dist`` says its outputs end at EOS (a random-prompt run without
    ``--ignore-eos``: the nominal output length is only a cap) runs at the means of its
    totals when it states them."""
    isl, osl = _num(row.get("isl")), _num(row.get("osl"))
    n = _num(row.get("completed")) or _num(row.get("num_prompts"))
    ti, to = _num(row.get("total_input_tokens")), _num(row.get("total_output_tokens"))
    means = (max(1, round(ti / n)), max(1, round(to / n))) if n and ti and to else None
    if isl and osl and not (means and "end at EOS" in row.get("length_dist", "")):
        return int(isl), int(osl)
    return means


def _kv_dtype(row: dict[str, str], model: ModelSpec, stand_in: bool = False) -> DType:
    """The KV-cache dtype a row ran with: as stated, else as its engine's default ``auto``
    loads the row's checkpoint.

    A stated ``fp8`` / ``bf16`` / ``fp16`` is taken as is. Where the source does not state it
    (``n/s``), the checkpoint's FP8 KV scales are taken to be

    * present for the NVIDIA ModelOpt exports the rows name (``model_hf`` ``nvidia/...``, e.g.
      nvidia/Llama-3.3-70B-Instruct-FP8, whose files are not shipped): ModelOpt's export
      script quantises the KV cache to FP8 unless told otherwise (``--kv_cache_qformat``
      default ``fp8``, NVIDIA/TensorRT-Model-Optimizer@42bb0236e34a11b5fb3860369fa0c68e14c784a0
      ``examples/llm_ptq/hf_ptq.py``), and every NVIDIA ModelOpt export shipped here
      (``data/models/*/hf_quant_config.json``) says FP8 — an assumption about files not read;
    * otherwise what ``model`` states (``QuantSpec.kv_cache_fp8``) when it is the row's own
      checkpoint, and none when it is a ``stand_in`` of the same shape
      (:data:`_FP4_CHECKPOINT`: its KV scales say nothing about the row's checkpoint);

    then the engine's rule (:func:`~learn_to_shard.engines.default_kv_dtype`: TensorRT-LLM
    takes FP8 KV scales; vLLM and SGLang those of a ModelOpt export, which the NVIDIA exports
    are)."""
    stated = row.get("kv_dtype", "n/s")
    if stated in ("fp8", "bf16", "fp16"):
        return DType.FP8 if stated == "fp8" else DType.BF16
    if row.get("model_hf", "").startswith("nvidia/"):
        kv_fp8 = modelopt = True            # an NVIDIA ModelOpt export (above)
    else:
        kv_fp8 = not stand_in and model.quant is not None and model.quant.kv_cache_fp8
        modelopt = model.quant is not None and model.quant.modelopt
    return DType(default_kv_dtype(row.get("engine"), kv_fp8, modelopt))


@functools.lru_cache(maxsize=1)
def stated_sharegpt_means() -> tuple[int, int] | None:
    """Mean prompt and output tokens of a ShareGPT run whose source states no token totals:
    the medians of the means that the shipped table's ShareGPT rows with totals state, each
    prompt set once (every benchmark client samples the first two turns of the same ShareGPT
    file: those rows, five tokenizers and two clients, state 215–233 prompt and 187–221 output
    tokens; the runs of one page that sent the same prompts — the same number of prompts and
    the same prompt-token total — count once, so a page's many launch variants do not outweigh
    the other sources); ``None`` when no row states them."""
    sets: dict[tuple[str, str], tuple[int, int]] = {}
    for r in load_rows():
        if r.get("dataset") == "sharegpt" and (m := _lengths(r)) is not None:
            key = (r.get("completed") or r.get("num_prompts") or "",
                   r.get("total_input_tokens") or r["id"])
            sets.setdefault(key, m)
    means = list(sets.values())
    if not means:
        return None
    return (round(float(np.median([m[0] for m in means]))),
            round(float(np.median([m[1] for m in means]))))


def predict_row(row: dict[str, str], overrides: Mapping[str, Any] | None = None
                ) -> ServingRowResult:
    """Predict one row (see the module docstring).

    The row runs with its engine's profile (:data:`_ENGINE_PROFILE`), the scheduler of its
    engine version and launch flags (:func:`row_scheduler`), the engine limits its launch
    sets (:func:`row_launch_limits`), then ``overrides`` (cost-model fields, e.g. trial
    values of a fit). The running batch is the row's concurrency within what the engine
    admits (:func:`~learn_to_shard.serving.load.engine_max_num_seqs`: the launch's
    ``max_num_seqs`` per rank, else the engine's default).

    TTFT and TPOT are compared as the median where the row states one, else as the mean
    (TPOT last as the median ITL, :func:`_per_request_itl`), beside the simulation's same
    statistic. The median first, for two reasons: the calibration rows every engine's
    step overheads are fitted on state medians (all but one state nothing else), and a
    source that states both can differ between them nearly 2x where a few requests stall on
    what the simulation does not run (InferenceX's DeepSeek-R1 rows: median TTFT 85 ms, mean
    158 ms, p99 811 ms at four clients; one-off kernel compilation or warm-up in the first
    requests), which moves the mean of 10–40 requests and not their median. One capture of
    InferenceX's API states the mean of some runs of a sweep and not of others, so the mean
    first compared a mean at one end of a sweep with a median at the other."""
    res = ServingRowResult(id=row["id"], split=row.get("split", ""), engine=row["engine"],
                           series=row.get("series", ""), varies=row.get("varies", ""),
                           source_key=row.get("source_key", ""),
                           hardware=row.get("hardware", ""))

    def skip(why: str) -> ServingRowResult:
        res.reason = why
        return res

    if not row.get("l2s_model"):
        return skip("model not shipped")
    name = row["l2s_model"]
    if row.get("weight_dtype") == "fp4":
        if name not in _FP4_CHECKPOINT:
            return skip(f"no NVFP4 checkpoint of {name} shipped")
        name = _FP4_CHECKPOINT[name]
    elif row.get("weight_dtype") not in ("bf16", "fp8", "mxfp4"):
        return skip(f"weights {row.get('weight_dtype')} not modelled")
    lengths = _lengths(row)
    if lengths is None and row.get("dataset") == "sharegpt":
        lengths = stated_sharegpt_means()
    if lengths is None:
        return skip(f"{row.get('dataset')} lengths not stated")
    isl, osl = lengths
    device = _DEVICE_ALIASES.get(row["hardware"], row["hardware"])
    try:
        model = load_model(name)
        cluster = parse_cluster(f"{device}:{int(row['gpus'])}")
    except PlannerError as exc:
        return skip(str(exc).split(";")[0])
    tp_row, pp, ep = int(row["tp"]), int(row.get("pp") or 1), int(row.get("ep") or 1)
    dp = int(row.get("attention_dp") or 1)
    if tp_row % dp:
        return skip(f"attention-DP {dp} does not divide TP {tp_row}")
    tp = tp_row // dp
    wd = DType.FP8 if row["weight_dtype"] == "fp8" else DType.BF16
    if row["weight_dtype"] == "fp4":        # the 4-bit bytes and rates come from model.quant
        wd = DType(model.checkpoint_dtype)
    kd = _kv_dtype(row, model, stand_in=name != row["l2s_model"])
    # ShareGPT rows (lengths: the means of the source's token totals) draw ShareGPT's joint
    # length distribution scaled to those means, as the benchmark clients sample the dataset;
    # random rows draw as their length_dist says (:func:`_random_draw`).
    draw: dict[str, Any] = {"dataset": "sharegpt"} if row.get("dataset") == "sharegpt" \
        else _random_draw(row.get("length_dist", ""))
    conc = _num(row.get("concurrency"))
    rate = _num(row.get("request_rate_per_s"))
    n_prompts = _num(row.get("num_prompts"))
    if conc:
        load = ServingLoad(concurrency=int(conc), num_prompts=int(n_prompts or max(
            10 * conc, 200)), **draw)
        res.x = conc
    elif rate is not None and math.isfinite(rate):
        load = ServingLoad(request_rate_per_s=rate, num_prompts=int(n_prompts or 1000),
                           **draw)
        res.x = rate
    elif rate is not None:
        n = int(n_prompts or DEFAULT_OFFLINE_PROMPTS)
        load = ServingLoad(concurrency=n, num_prompts=n, **draw)   # all at time 0
        res.x = math.inf
    else:
        return skip("no load stated")
    try:
        wl = Workload(Phase.SERVE, isl=isl, osl=osl, weight_dtype=wd, kv_dtype=kd)
        cfg = CostModelConfig.for_engine(_ENGINE_PROFILE.get(row["engine"]),
                                         **{**row_scheduler(row, model),
                                            **row_launch_limits(row),
                                            **dict(overrides or {})})
        space = StrategySpace.build(model, cluster)

        def at(batch: int) -> tuple[CostModel, Strategy, Estimate]:
            sp = dataclasses.replace(space, tp_values=(tp,), ep_values=(ep,), pp_values=(pp,),
                                     dp_values=(dp,), batch_values=(batch,))
            cm = CostModel(model, cluster, wl, config=cfg, space=sp)
            s = Strategy(tp=tp, ep=ep, pp=pp, dp=dp, batch=batch, dims=MEGATRON_DIMS)
            return cm, s, cm.evaluate(s)

        want = dp * math.ceil((load.concurrency or _UNCAPPED) / dp)
        cm, s, est = at(want)
        cap = engine_max_num_seqs(cm, dp, est.kv_capacity_tokens, pp)
        if cap is not None and cap < want:
            cm, s, est = at(cap)
        if est.violations and any(not v.startswith("memory") for v in est.violations):
            return skip("; ".join(est.violations)[:160])
        if est.kv_capacity_tokens < isl + osl:
            return skip("the KV pool cannot hold one request at these degrees")
        sim = simulate_estimate(cm, est, load)
    except PlannerError as exc:
        return skip(str(exc)[:160])
    simulated = sim["simulated"]
    assert isinstance(simulated, dict)
    for metric, cols in (("ttft_ms", ("ttft_ms_median", "ttft_ms_mean")),
                         ("tpot_ms", ("tpot_ms_median", "tpot_ms_mean", "itl_ms_median"))):
        for col in cols:
            v = _num(row.get(col))
            if v is not None:
                stat = "mean" if col.endswith("mean") else "p50"
                # A median ITL is the median of every streamed gap of every request pooled
                # (SGLang's bench_serving and vllm bench serve calculate_metrics: itls +=
                # outputs[i].itl; sgl-project/sglang@0033168f python/sglang/bench_serving.py),
                # which a prefill that stalls the decodes lengthens for one gap only, where it
                # lengthens the whole request's TPOT; LLMPerf's is per request.
                pooled = col == "itl_ms_median" and not _per_request_itl(row)
                key = f"{stat}_{'itl' if pooled else metric.split('_')[0]}_s"
                res.measured[metric] = v
                res.predicted[metric] = float(simulated[key]) * 1e3
                res.statistic[metric] = "itl p50" if pooled else \
                    "itl p50 per request" if col == "itl_ms_median" else stat
                break
    tps = _num(row.get("output_tok_s"))
    per_gpu = _num(row.get("output_tok_s_per_gpu"))
    cluster_tps = float(sim["cluster_output_tokens_per_s"])      # type: ignore[arg-type]
    if tps is not None:
        res.measured["output_tok_s"] = tps
        res.predicted["output_tok_s"] = cluster_tps
    elif per_gpu is not None:
        res.measured["output_tok_s"] = per_gpu * cluster.num_devices
        res.predicted["output_tok_s"] = cluster_tps
    return res


def load_rows(path: str | Path | None = None) -> list[dict[str, str]]:
    """The rows of the serving table (default: the shipped one), as CSV dicts."""
    p = Path(path) if path is not None else default_table()
    with p.open(newline="", encoding="utf-8-sig") as fh:
        return list(csv.DictReader(fh))


def predict_table(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
                  on_row: Callable[[], None] | None = None,
                  rows: list[dict[str, str]] | None = None) -> list[ServingRowResult]:
    """Predict every row of the serving table (default: the shipped one; ``rows``: its rows
    already read, :func:`load_rows`), each with its engine profile and then ``overrides``
    (:func:`predict_row`); ``on_row`` is called after each row (a progress bar's advance)."""
    out = []
    for r in load_rows(path) if rows is None else rows:
        out.append(predict_row(r, overrides))
        if on_row is not None:
            on_row()
    return out


def _relative_errors(rows: list[ServingRowResult], metric: str) -> np.ndarray:
    """``predicted / measured − 1`` of ``metric`` over the predicted rows that measure it."""
    return np.array([r.predicted[metric] / r.measured[metric] - 1 for r in rows
                     if r.reason is None and metric in r.measured and r.measured[metric] > 0])


def summarize(results: list[ServingRowResult], split: str = "held-out") -> dict[str, object]:
    """Median |relative error| per metric over the rows of ``split``, how many rows were
    predicted, and, per sweep (rows of one ``series`` varying concurrency or rate), whether the
    predicted TTFT and TPOT move in the measured direction from the sweep's first to its last
    point (a metric counts where both points compare the same statistic;
    ``sweep_ends_unlike`` counts the (sweep, metric) pairs left out because they do not)."""
    rows = [r for r in results if r.split == split]
    out: dict[str, object] = {"rows": len(rows),
                              "predicted": sum(r.reason is None for r in rows)}
    for metric in ("ttft_ms", "tpot_ms", "output_tok_s"):
        errs = _relative_errors(rows, metric)
        out[f"{metric}_median_abs_err"] = float(np.median(np.abs(errs))) if errs.size \
            else math.nan
        out[f"{metric}_n"] = int(errs.size)
    sweeps: dict[str, list[ServingRowResult]] = {}
    for r in rows:
        if r.reason is None and r.varies in ("concurrency", "request_rate_per_s") and r.series:
            sweeps.setdefault(r.series, []).append(r)
    agree = total = unlike = 0
    for pts in sweeps.values():
        pts = sorted(pts, key=lambda r: r.x)
        if len(pts) < 2:
            continue
        for metric in ("ttft_ms", "tpot_ms"):
            a, b = pts[0], pts[-1]
            if metric in a.measured and metric in b.measured:
                if a.statistic.get(metric) != b.statistic.get(metric):
                    unlike += 1
                    continue
                total += 1
                agree += (np.sign(b.measured[metric] - a.measured[metric])
                          == np.sign(b.predicted[metric] - a.predicted[metric]))
    out["sweep_directions"] = f"{agree}/{total}"
    out["sweep_ends_unlike"] = unlike
    return out


def summarize_by_source(results: list[ServingRowResult], split: str = "held-out"
                        ) -> list[dict[str, object]]:
    """Per (source, GPU) of the rows of ``split`` that were predicted: how many rows, and per
    metric (``ttft_ms``, ``tpot_ms``, ``output_tok_s``) the number of values, the median
    |relative error| and the median signed relative error (``nan`` where no row gives the
    metric). Where the medians of :func:`summarize` come from: one lab's machines can sit
    apart from the rest. Sorted by source, then GPU."""
    groups: dict[tuple[str, str], list[ServingRowResult]] = {}
    for r in results:
        if r.split == split and r.reason is None:
            groups.setdefault((r.source_key, r.hardware), []).append(r)
    out: list[dict[str, object]] = []
    for (source, gpu), rows in sorted(groups.items()):
        entry: dict[str, object] = {"source_key": source, "hardware": gpu, "rows": len(rows)}
        for metric in ("ttft_ms", "tpot_ms", "output_tok_s"):
            errs = _relative_errors(rows, metric)
            entry[f"{metric}_n"] = int(errs.size)
            entry[f"{metric}_median_abs_err"] = float(np.median(np.abs(errs))) \
                if errs.size else math.nan
            entry[f"{metric}_median_signed_err"] = float(np.median(errs)) \
                if errs.size else math.nan
        out.append(entry)
    return out
