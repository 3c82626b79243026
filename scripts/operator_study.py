"""Per-operator gains over real scenarios: the exact optimum against Megatron's layout and
against what each serving engine can launch (issue 16, item 5).

For every scenario of :data:`SCENARIOS` (shipped real models, dense and MoE, 8–256 devices,
decode / prefill / serve, no, loose and tight SLOs, contexts up to 1M tokens where the
model's ``max_position_embeddings`` allows) the exact searcher (``--method exact``, the
certified optimum over every integer batch) runs on five strategy spaces built with
:meth:`StrategySpace.build`:

* ``optimum``: the full space;
* ``megatron_layout``: the full space restricted to Megatron's per-operator layout
  (:data:`learn_to_shard.engines.MEGATRON` for every block) by an engine profile with no
  layout variants and no degree rules (:func:`megatron_layout_profile`): every degree, every
  integer batch, every future coarse head, only the per-operator choices fixed;
* ``vllm``, ``sglang``, ``trtllm``: the space an engine can launch
  (:func:`learn_to_shard.api.make_cost_model` with ``engine=``, what ``l2s plan --engine``
  searches).

and the ``megatron`` searcher (the paper's baseline: Megatron's dims, every degree and
*grid* batch, ``--method megatron``) runs on the full space. All six runs share one
cost-model configuration (the default memory policy, :func:`learn_to_shard.api.cost_config`
of ``None``), so a ratio measures the space alone; ``l2s plan --engine`` also switches the
memory policy, which this study leaves out on purpose.

Per scenario the CSV holds each run's objective (tokens/s per device) and strategy, the
ratios optimum ÷ each, the degrees and per-operator choices where the optimum differs from the
best Megatron-layout strategy (read generically from the :class:`Strategy` fields, so new
coarse heads such as a ``cp`` degree appear without a change here), and the mechanism: for
each operator whose choice differs from Megatron's at the optimum's degrees, the optimum ÷ the
optimum with that one operator set back to Megatron's choice, and the optimum against
Megatron's dims at the same degrees (collective and compute time per pass of each).

Run (the committed CSV and the block of ``docs/results.md`` between the ``operator-study``
markers; 4–6 minutes on one core; 4.1 min pinned to one core with one BLAS thread here)::

    .venv/bin/python scripts/operator_study.py --write-docs
    .venv/bin/python scripts/operator_study.py --quick          # 6 scenarios, a smoke test

Exit code 0 when every run finished; 1 when a restricted space beat the full one (a bug:
the restriction is a subset); 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from learn_to_shard.api import checkpoint_dtypes, cost_config, make_cost_model, make_workload
from learn_to_shard.cost.model import CostModel, Estimate
from learn_to_shard.engines import BLOCKS, ENGINES, EngineProfile
from learn_to_shard.hardware.presets import parse_cluster
from learn_to_shard.hardware.spec import ClusterSpec
from learn_to_shard.model.hf_config import load_model
from learn_to_shard.model.spec import ModelSpec
from learn_to_shard.parallel.ops import CHOICE_NAMES, MEGATRON_DIMS, OP_NAMES, OPS
from learn_to_shard.parallel.space import StrategySpace, active_heads, canonical
from learn_to_shard.parallel.strategy import Strategy
from learn_to_shard.search import get_searcher
from learn_to_shard.workload import Workload

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSV = ROOT / "docs" / "data" / "operator_study.csv"
RESULTS_MD = ROOT / "docs" / "results.md"
BEGIN, END = "<!-- operator-study:begin -->", "<!-- operator-study:end -->"
#: A ratio within this of 1 counts as a tie (the issue's threshold: "within 1.003×").
TIE = 1.003
#: A gain above this counts as a win of the richer space (the brief's "> 1%").
WIN = 1.01
#: The engines whose launchable spaces are compared (keys of ``engines.ENGINES``).
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)
#: Runs in CSV order; ``megatron`` is the ``megatron`` searcher, the others ``exact``.
RUNS: tuple[str, ...] = ("optimum", "megatron_layout", "megatron", *ENGINE_NAMES)


@dataclass(frozen=True)
class Scenario:
    """One planning problem of the study.

    Attributes:
        key: short unique id (CSV ``scenario``).
        model: shipped model name (``l2s models``).
        cluster: ``DEVICE:COUNT``.
        phase: ``decode``, ``prefill`` or ``serve``.
        isl, osl: prompt and output tokens (prefill/serve).
        context: decode context, tokens.
        dtype: weight dtype, ``None``: the checkpoint's (:func:`checkpoint_dtypes`).
        ttft_slo_s, tpot_slo_s: latency limits, seconds.
        slo: ``none``, ``loose`` or ``tight`` (tight: near the lowest latency the model
            reaches there, the set of rows 44–61 of the outside study it comes from).
        quick: part of the ``--quick`` smoke set.
    """

    key: str
    model: str
    cluster: str
    phase: str
    isl: int | None = None
    osl: int | None = None
    context: int | None = None
    dtype: str | None = None
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    slo: str = "none"
    quick: bool = False

    @property
    def devices(self) -> int:
        """Devices in the cluster (the count after the colon)."""
        return int(self.cluster.rsplit(":", 1)[1])

    def label(self) -> str:
        """One line: model, cluster, phase, lengths, dtype and SLOs."""
        parts = [self.model, self.cluster, self.phase]
        if self.context is not None:
            parts.append(f"ctx {_tokens(self.context)}")
        if self.isl is not None:
            parts.append(f"isl {_tokens(self.isl)}" + (f"/osl {_tokens(self.osl)}"
                                                         if self.osl else ""))
        if self.dtype:
            parts.append(self.dtype)
        if self.ttft_slo_s is not None:
            parts.append(f"TTFT≤{self.ttft_slo_s * 1e3:g}ms")
        if self.tpot_slo_s is not None:
            parts.append(f"TPOT≤{self.tpot_slo_s * 1e3:g}ms")
        return " ".join(parts)


def _tokens(n: int) -> str:
    """``1048576 -> 1M``, ``131072 -> 128k``, ``2048 -> 2k``, ``1000 -> 1000``."""
    if n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n % 1024 == 0:
        return f"{n // 1024}k"
    return str(n)


_S = Scenario
K = 1024
#: The study's scenarios. Rows ``g*`` and ``t*`` are the grid and tight-SLO scenarios of the
#: outside review of search quality (its Q2, rows 1–61, minus the two where nothing fits);
#: ``l*`` are long contexts up to 1M tokens (each within the model's
#: ``max_position_embeddings``: Llama-4 Scout 10M, Maverick 1M, Llama-3.1 128k, Qwen3 40k,
#: GLM-4.5-Air 128k); ``x*`` add shipped models the review did not cover.
SCENARIOS: tuple[Scenario, ...] = (
    _S("g01", "llama-3.1-8b", "h100-sxm:8", "decode", context=4 * K, quick=True),
    _S("g02", "llama-3.1-8b", "a100-80gb:8", "decode", context=32 * K, tpot_slo_s=0.020,
       slo="loose"),
    _S("g03", "llama-3.1-8b", "h100-sxm:8", "serve", isl=1024, osl=1024, tpot_slo_s=0.020,
       slo="loose"),
    _S("g04", "llama-3.1-8b", "mi300x:8", "prefill", isl=8 * K, ttft_slo_s=0.5, slo="loose"),
    _S("g05", "llama-3.1-8b", "h100-sxm:256", "decode", context=4 * K, tpot_slo_s=0.005,
       slo="tight"),
    _S("g06", "llama-3.1-70b", "h100-sxm:8", "serve", isl=1024, osl=256, ttft_slo_s=1.0,
       tpot_slo_s=0.050, slo="loose", quick=True),
    _S("g07", "llama-3.1-70b", "h100-sxm:8", "decode", context=8 * K, tpot_slo_s=0.020,
       slo="loose"),
    _S("g08", "llama-3.1-70b", "h200:16", "decode", context=128 * K),
    _S("g09", "llama-3.1-70b", "a100-80gb:16", "serve", isl=2 * K, osl=512, tpot_slo_s=0.050,
       slo="loose"),
    _S("g10", "llama-3.1-70b", "b200:8", "prefill", isl=32 * K, dtype="fp8", ttft_slo_s=5.0,
       slo="loose"),
    _S("g11", "llama-3.1-70b", "h100-sxm:64", "prefill", isl=2 * K, ttft_slo_s=0.2,
       slo="tight"),
    _S("g12", "llama-3.1-405b", "h100-sxm:16", "decode", context=8 * K),
    _S("g13", "llama-3.1-405b", "h200:8", "decode", context=32 * K, dtype="fp8"),
    _S("g14", "llama-3.1-405b", "b200:16", "serve", isl=4 * K, osl=1024, dtype="fp8",
       tpot_slo_s=0.030, slo="loose"),
    _S("g15", "llama-3.1-405b", "mi300x:8", "serve", isl=1024, osl=1024, tpot_slo_s=0.100,
       slo="loose"),
    _S("g16", "llama-3.1-405b", "h100-sxm:64", "prefill", isl=8 * K, ttft_slo_s=2.0,
       slo="loose"),
    _S("g17", "qwen3-32b", "h100-sxm:8", "serve", isl=8 * K, osl=1024, tpot_slo_s=0.020,
       slo="loose"),
    _S("g18", "qwen3-32b", "a100-80gb:8", "decode", context=32 * K),
    _S("g19", "qwen3-32b", "h200:8", "prefill", isl=4 * K, dtype="fp8", ttft_slo_s=0.3,
       slo="loose"),
    _S("g20", "qwen3-32b", "mi300x:8", "serve", isl=1024, osl=1024, tpot_slo_s=0.010,
       slo="tight"),
    _S("g21", "mixtral-8x7b", "h100-sxm:8", "decode", context=4 * K, quick=True),
    _S("g22", "mixtral-8x7b", "a100-80gb:8", "serve", isl=2 * K, osl=256, tpot_slo_s=0.020,
       slo="loose"),
    _S("g23", "mixtral-8x7b", "mi300x:8", "prefill", isl=8 * K, ttft_slo_s=1.0, slo="loose"),
    _S("g24", "mixtral-8x7b", "h100-sxm:64", "decode", context=8 * K, tpot_slo_s=0.010,
       slo="tight"),
    _S("g25", "qwen3-235b-a22b", "h100-sxm:16", "decode", context=16 * K, dtype="fp8"),
    _S("g26", "qwen3-235b-a22b", "h200:8", "serve", isl=4 * K, osl=1024, tpot_slo_s=0.050,
       slo="loose"),
    _S("g27", "qwen3-235b-a22b", "b200:32", "prefill", isl=32 * K, ttft_slo_s=3.0,
       slo="loose"),
    _S("g28", "qwen3-235b-a22b", "h100-sxm:64", "serve", isl=1024, osl=1024, dtype="fp8",
       tpot_slo_s=0.020, slo="loose"),
    _S("g29", "deepseek-v3", "h100-sxm:32", "decode", context=4 * K, dtype="fp8"),
    _S("g30", "deepseek-v3", "h200:16", "serve", isl=2 * K, osl=2 * K, dtype="fp8",
       tpot_slo_s=0.050, slo="loose"),
    _S("g31", "deepseek-v3", "b200:64", "decode", context=64 * K, dtype="fp8",
       tpot_slo_s=0.030, slo="loose"),
    _S("g32", "deepseek-v3", "h100-sxm:256", "serve", isl=4 * K, osl=1024, dtype="fp8",
       tpot_slo_s=0.050, slo="loose"),
    _S("g33", "deepseek-v3", "mi300x:16", "prefill", isl=8 * K, dtype="fp8", ttft_slo_s=2.0,
       slo="loose"),
    _S("g34", "kimi-k2", "h200:32", "decode", context=32 * K, dtype="fp8"),
    _S("g35", "kimi-k2", "b200:16", "serve", isl=8 * K, osl=1024, dtype="fp8",
       tpot_slo_s=0.100, slo="loose"),
    _S("g36", "kimi-k2", "h100-sxm:128", "prefill", isl=4 * K, dtype="fp8", ttft_slo_s=0.5,
       slo="loose"),
    _S("g37", "gpt-oss-120b", "h100-sxm:8", "serve", isl=1024, osl=1024, tpot_slo_s=0.020,
       slo="loose"),
    _S("g38", "gpt-oss-120b", "a100-80gb:8", "decode", context=128 * K),
    _S("g39", "gpt-oss-120b", "h100-sxm:8", "decode", context=4 * K, tpot_slo_s=0.010,
       slo="tight"),
    _S("g40", "llama-4-maverick", "h100-sxm:16", "decode", context=128 * K, dtype="fp8"),
    _S("g41", "llama-4-maverick", "h200:8", "serve", isl=2 * K, osl=512, dtype="fp8",
       tpot_slo_s=0.030, slo="loose"),
    _S("g42", "llama-4-maverick", "b200:8", "prefill", isl=16 * K, ttft_slo_s=2.0,
       slo="loose"),
    _S("t45", "llama-3.1-70b", "h100-sxm:8", "decode", context=8 * K, tpot_slo_s=0.010,
       slo="tight"),
    _S("t48", "llama-3.1-8b", "h100-sxm:8", "decode", context=4 * K, tpot_slo_s=0.002,
       slo="tight"),
    _S("t51", "qwen3-235b-a22b", "h100-sxm:16", "decode", context=8 * K, dtype="fp8",
       tpot_slo_s=0.008, slo="tight"),
    _S("t53", "llama-3.1-70b", "h100-sxm:8", "serve", isl=1024, osl=256, tpot_slo_s=0.015,
       slo="tight"),
    _S("t55", "llama-3.1-70b", "h100-sxm:8", "prefill", isl=2 * K, ttft_slo_s=0.100,
       slo="tight", quick=True),
    _S("t58", "llama-3.1-8b", "h100-sxm:8", "prefill", isl=4 * K, ttft_slo_s=0.030,
       slo="tight"),
    _S("t60", "deepseek-v3", "h200:16", "prefill", isl=4 * K, dtype="fp8", ttft_slo_s=0.200,
       slo="tight", quick=True),
    _S("l01", "llama-4-scout", "h200:16", "decode", context=1 << 20),
    _S("l02", "llama-4-maverick", "h200:16", "decode", context=1 << 20, quick=True),
    _S("l03", "llama-4-scout", "h200:16", "prefill", isl=1 << 20, ttft_slo_s=60.0,
       slo="loose"),
    _S("l04", "llama-3.1-8b", "h100-sxm:16", "decode", context=128 * K),
    _S("l05", "llama-3.1-70b", "b200:16", "prefill", isl=128 * K, ttft_slo_s=10.0,
       slo="loose"),
    _S("l06", "qwen3-32b", "h200:16", "decode", context=40 * K, tpot_slo_s=0.020,
       slo="loose"),
    _S("l07", "glm-4.5-air", "h200:8", "decode", context=128 * K),
    _S("x01", "qwen3-30b-a3b", "h100-sxm:8", "serve", isl=2 * K, osl=512, tpot_slo_s=0.010,
       slo="tight"),
    _S("x02", "minimax-m2.5", "h200:8", "serve", isl=4 * K, osl=1024, tpot_slo_s=0.030,
       slo="loose"),
    _S("x03", "gemma-3-12b-it", "l40s:8", "serve", isl=2 * K, osl=512, tpot_slo_s=0.050,
       slo="loose"),
    _S("x04", "mistral-nemo-instruct-2407", "h100-sxm:8", "prefill", isl=8 * K,
       ttft_slo_s=0.150, slo="tight"),
    _S("x05", "phi-3.5-moe-instruct", "a100-80gb:8", "decode", context=16 * K,
       tpot_slo_s=0.015, slo="tight"),
)


def megatron_layout_profile() -> EngineProfile:
    """A profile that allows only Megatron-LM's per-operator layout in every block
    (:data:`learn_to_shard.engines.MEGATRON`, the layout ``parallel.ops.MEGATRON_DIMS``
    spells) and restricts no degree (``ep_full_or_none`` and ``adp_all_or_none`` off; decode
    context parallelism allowed), with vLLM's vocabulary padding (64, the space's default). A
    space built with it is the full space with the per-operator choices fixed to Megatron's."""
    return EngineProfile(name="megatron-layout", title="Megatron layout", version="-",
                         source="learn_to_shard.engines.MEGATRON", memory_profile="vllm",
                         vocab_multiple=64, ep_full_or_none=False, adp_all_or_none=False,
                         decode_context_parallel=True)


@dataclass
class Run:
    """One search of one scenario.

    Attributes:
        objective: best feasible tokens/s per device (0 when nothing is feasible).
        strategy: the best strategy, ``None`` when nothing is feasible.
        estimate: its full estimate on the run's cost model, ``None`` likewise.
    """

    objective: float
    strategy: Strategy | None
    estimate: Estimate | None


def _search(cm: CostModel, method: str) -> Run:
    """Run searcher ``method`` (``exact`` or ``megatron``) on ``cm``; the best it found."""
    res = get_searcher(method).search(cm, None, 0)
    if res.best_action is None or res.best_objective <= 0:
        return Run(0.0, None, None)
    # Absent operators as every printed strategy has them (∅), whichever encoding the
    # searcher kept (the megatron searcher keeps Megatron's dims for a dense model's experts).
    est = cm.evaluate(canonical(res.best_action, active_heads(cm.space)))
    return Run(float(res.best_objective), est.strategy, est)


def problem(sc: Scenario) -> tuple[ModelSpec, ClusterSpec, Workload]:
    """``(model, cluster, workload)`` of a scenario, dtypes as ``l2s plan`` picks them.

    Raises:
        ConfigError, UnsupportedModelError: a scenario the planner refuses (a bug in
            :data:`SCENARIOS`).
    """
    m = load_model(sc.model)
    wd, kd = checkpoint_dtypes(m, sc.dtype, None)
    wl = make_workload(sc.phase, isl=sc.isl, osl=sc.osl, context=sc.context, dtype=wd,
                       kv_dtype=kd, ttft_slo_s=sc.ttft_slo_s, tpot_slo_s=sc.tpot_slo_s)
    return m, parse_cluster(sc.cluster), wl


#: ``--collectives``: the settings every unrestricted run (optimum, Megatron layout,
#: ``megatron``) takes the best of — each collective at its cheapest available algorithm
#: (``collective_algorithm="auto"``), without and with sequence parallelism and GEMM overlap
#: (Megatron-LM has sequence parallelism too); the engine runs search each engine's own
#: launch settings (:func:`learn_to_shard.api.search_collectives`).
COLLECTIVE_VARIANTS = ({}, {"sequence_parallel": True},
                       {"sequence_parallel": True, "gemm_overlap": True})
#: Whether :func:`cost_models` / :func:`search_all` run the ``--collectives`` study.
COLLECTIVES = {"on": False}


def cost_models(m: ModelSpec, c: ClusterSpec, wl: Workload
                ) -> dict[str, tuple[CostModel, str]]:
    """The cost model and searcher of each run of :data:`RUNS`, all on the default cost
    configuration (with ``--collectives``: collective algorithms ``auto``); the spaces as the
    module docstring lists them."""
    cfg = cost_config(None)
    if COLLECTIVES["on"]:
        cfg = dataclasses.replace(cfg, collective_algorithm="auto")
    meg_space = StrategySpace.build(m, c, engine=megatron_layout_profile())
    out: dict[str, tuple[CostModel, str]] = {
        "optimum": (make_cost_model(m, c, wl, cfg), "exact"),
        "megatron_layout": (CostModel(m, c, wl, config=cfg, space=meg_space), "exact"),
        "megatron": (make_cost_model(m, c, wl, cfg), "megatron"),
    }
    for name in ENGINE_NAMES:
        out[name] = (make_cost_model(m, c, wl, cfg, engine=name), "exact")
    return out


def coarse_fields(s: Strategy) -> dict[str, object]:
    """Every field of ``s`` but the per-operator ``dims`` (degrees, batch and any coarse head
    the space grows), in declaration order."""
    return {f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.name != "dims"}


def coarse_diff(a: Strategy, b: Strategy) -> str:
    """The coarse fields where ``a`` and ``b`` differ, ``"tp 8→4; batch 1→2"`` (``b``'s value
    first, then ``a``'s); empty when the same."""
    fa, fb = coarse_fields(a), coarse_fields(b)
    return "; ".join(f"{k} {fb[k]}→{fa[k]}" for k in fa if fa[k] != fb.get(k))


def group_of(s: Strategy, axis: str) -> int:
    """Ranks an operator on mesh axis ``axis`` (``tp``, ``etp``) is split over in ``s``."""
    return int(getattr(s, axis, 1))


def differing_ops(model: ModelSpec, s: Strategy) -> list[int]:
    """Operators (indices into ``OP_NAMES``) the model has, split over more than one rank in
    ``s``, whose choice in ``s`` is not Megatron's."""
    return [int(od.op) for od in OPS
            if od.present(model) and group_of(s, od.axis) > 1
            and s.dims[int(od.op)] != MEGATRON_DIMS[int(od.op)]]


def ops_text(ops: Iterable[int], s: Strategy) -> str:
    """``"attention Shard(1)→Shard(0); o_proj Shard(0)→Replicate()"`` (Megatron's choice →
    ``s``'s)."""
    return "; ".join(f"{OP_NAMES[i]} {CHOICE_NAMES[MEGATRON_DIMS[i]]}→"
                     f"{CHOICE_NAMES[s.dims[i]]}" for i in ops)


def _objective(cm: CostModel, s: Strategy) -> float:
    """Objective of ``s`` on ``cm`` (0 when infeasible)."""
    return float(cm.evaluate_many(cm.space.encode(s)[None, :]).objective[0])


def ratio(a: float, b: float) -> float:
    """``a / b``; ``inf`` when only ``a`` is positive, ``nan`` when ``a`` is 0."""
    if a <= 0:
        return math.nan
    return a / b if b > 0 else math.inf


def comm_s(est: Estimate) -> float:
    """Collective time of one micro-batch pass, seconds (sum of ``time_s × per_step``)."""
    return float(sum(c.time_s * c.per_step for c in est.collectives))


def compute_s(est: Estimate) -> float:
    """Operator compute time of one pass, seconds (sum of ``Estimate.op_time_s``)."""
    return float(sum(est.op_time_s.values()))


def mechanism(model: ModelSpec, cm: CostModel, opt: Run) -> dict[str, object]:
    """Why the optimum's per-operator choices pay, on the full space's cost model ``cm``.

    Returns:
        ``diff_ops`` (operators differing from Megatron's at the optimum's degrees),
        ``ablation`` (per such operator, optimum ÷ the optimum with only that operator set
        back to Megatron's choice; ``inf`` where that is infeasible), ``block_ablation``
        (the same per engine block of :data:`learn_to_shard.engines.BLOCKS`, the block's
        operators set back together), ``same_degrees_ratio``
        (optimum ÷ Megatron's dims at the optimum's degrees and batch), ``same_degrees_why``
        (the rules that strategy breaks, when infeasible), and the collective and compute
        seconds per pass of both.
    """
    s, est = opt.strategy, opt.estimate
    assert s is not None and est is not None
    ops = differing_ops(model, s)
    abl = []
    for i in ops:
        dims = list(s.dims)
        dims[i] = MEGATRON_DIMS[i]
        r = ratio(opt.objective, _objective(cm, dataclasses.replace(s, dims=tuple(dims))))
        abl.append(f"{OP_NAMES[i]} {_fmt_ratio(r)}")
    blocks = []
    for block, names in BLOCKS.items():
        idx = [OP_NAMES.index(n) for n in names]
        if not any(i in ops for i in idx):
            continue
        dims = list(s.dims)
        for i in idx:
            dims[i] = MEGATRON_DIMS[i]
        r = ratio(opt.objective, _objective(cm, dataclasses.replace(s, dims=tuple(dims))))
        blocks.append(f"{block} {_fmt_ratio(r)}")
    meg = cm.evaluate(dataclasses.replace(s, dims=MEGATRON_DIMS))
    return {"diff_ops": ops_text(ops, s), "ablation": "; ".join(abl),
            "block_ablation": "; ".join(blocks),
            "same_degrees_ratio": ratio(opt.objective, meg.tokens_per_s_per_device
                                        if meg.feasible else 0.0),
            "same_degrees_why": "" if meg.feasible else " | ".join(
                v.split(":")[0] for v in meg.violations),
            "opt_comm_ms": comm_s(est) * 1e3, "opt_compute_ms": compute_s(est) * 1e3,
            "same_degrees_comm_ms": comm_s(meg) * 1e3,
            "same_degrees_compute_ms": compute_s(meg) * 1e3}


def _fmt_ratio(r: float) -> str:
    """A ratio as ``1.0123×``, ``inf`` or ``nan``."""
    return f"{r:.4f}×" if math.isfinite(r) else str(r)


#: CSV columns, in order.
COLUMNS: tuple[str, ...] = (
    "scenario", "label", "model", "moe", "cluster", "devices", "phase", "isl", "osl", "context",
    "weight_dtype", "ttft_slo_ms", "tpot_slo_ms", "slo",
    *(f"{r}_tps_per_device" for r in RUNS), *(f"{r}_strategy" for r in RUNS),
    *(f"opt_over_{r}" for r in RUNS[1:]), "opt_over_best_engine", "best_engine",
    "opt_tpot_ms", "opt_ttft_ms",
    *(f"megatron_layout_over_{e}" for e in ENGINE_NAMES),
    "diff_coarse_vs_megatron_layout", "diff_coarse_vs_best_engine",
    *(f"diff_coarse_{e}_vs_megatron_layout" for e in ENGINE_NAMES),
    "diff_ops", "ablation", "block_ablation",
    "same_degrees_ratio",
    "same_degrees_why", "opt_comm_ms", "opt_compute_ms", "same_degrees_comm_ms",
    "same_degrees_compute_ms",
)

StageFn = Callable[[str], None]


def search_all(cms: dict[str, tuple[CostModel, str]], stage: StageFn | None = None
               ) -> dict[str, Run]:
    """Run each searcher of :func:`cost_models` on its cost model, in :data:`RUNS` order.

    Args:
        cms: run name -> (cost model, searcher name); with ``--collectives`` an unrestricted
            run's entry is replaced by the variant whose optimum won.
        stage: called with each run's name before it starts.
    """
    runs: dict[str, Run] = {}
    for name in RUNS:
        if stage is not None:
            stage(name)
        cm, method = cms[name]
        if not COLLECTIVES["on"]:
            runs[name] = _search(cm, method)
        elif name in ENGINE_NAMES:
            runs[name] = _engine_collectives(cm, name)
        else:
            tried = [(_search(vcm, method), vcm)
                     for vcm in (_variant(cm, v) for v in COLLECTIVE_VARIANTS)]
            runs[name], best_cm = max(tried, key=lambda t: t[0].objective)
            cms[name] = (best_cm, method)       # the ablations re-price on the winner's model
    return runs


def _variant(cm: CostModel, overrides: dict[str, bool]) -> CostModel:
    """``cm`` with the cost-model options ``overrides`` (same space)."""
    return CostModel(cm.model, cm.cluster, cm.workload,
                     config=dataclasses.replace(cm.config, **overrides), space=cm.space)


def _engine_collectives(cm: CostModel, engine: str) -> Run:
    """The best exact plan over ``engine``'s collective launch settings
    (:func:`learn_to_shard.api.search_collectives`)."""
    from learn_to_shard.api import search_collectives

    p = search_collectives(cm, method="exact", engine=engine)
    if p.best is None or not p.feasible:
        return Run(0.0, None, None)
    return Run(float(p.best.tokens_per_s_per_device), p.best.strategy, p.best)


def run_scenario(sc: Scenario, stage: StageFn | None = None) -> dict[str, object]:
    """Every run of :data:`RUNS` on one scenario, as one CSV row (keys :data:`COLUMNS`).

    Args:
        sc: the scenario.
        stage: called with each run's name before it starts (progress display).

    Raises:
        ConfigError, UnsupportedModelError: the planner refuses the scenario.
    """
    m, c, wl = problem(sc)
    cms = cost_models(m, c, wl)
    return study_row(sc, m, wl, cms, search_all(cms, stage))


def study_row(sc: Scenario, m: ModelSpec, wl: Workload, cms: dict[str, tuple[CostModel, str]],
              runs: dict[str, Run]) -> dict[str, object]:
    """The CSV row (keys :data:`COLUMNS`) of scenario ``sc`` from its runs
    (:func:`search_all` on :func:`cost_models` of :func:`problem`)."""
    opt = runs["optimum"]
    row: dict[str, object] = {
        "scenario": sc.key, "label": sc.label(), "model": sc.model, "moe": m.is_moe,
        "cluster": sc.cluster, "devices": sc.devices, "phase": sc.phase, "isl": sc.isl or "",
        "osl": sc.osl or "", "context": sc.context or "", "weight_dtype": wl.weight_dtype.value,
        "ttft_slo_ms": "" if sc.ttft_slo_s is None else sc.ttft_slo_s * 1e3,
        "tpot_slo_ms": "" if sc.tpot_slo_s is None else sc.tpot_slo_s * 1e3, "slo": sc.slo}
    for name, r in runs.items():
        row[f"{name}_tps_per_device"] = r.objective
        row[f"{name}_strategy"] = r.strategy.short() if r.strategy else ""
    for name in RUNS[1:]:
        row[f"opt_over_{name}"] = ratio(opt.objective, runs[name].objective)
    best_engine = max(ENGINE_NAMES, key=lambda e: runs[e].objective)
    row["best_engine"] = best_engine if runs[best_engine].objective > 0 else ""
    row["opt_over_best_engine"] = ratio(opt.objective, runs[best_engine].objective)
    ml = runs["megatron_layout"]
    for e in ENGINE_NAMES:
        row[f"megatron_layout_over_{e}"] = ratio(ml.objective, runs[e].objective)
        es = runs[e].strategy
        row[f"diff_coarse_{e}_vs_megatron_layout"] = \
            coarse_diff(ml.strategy, es) if ml.strategy and es else ""
    blank = {k: "" for k in COLUMNS if k not in row}
    row.update(blank)
    if opt.strategy is not None and opt.estimate is not None:
        for key, v in (("opt_tpot_ms", opt.estimate.tpot_s), ("opt_ttft_ms", opt.estimate.ttft_s)):
            if math.isfinite(v):
                row[key] = v * 1e3
        for col, other in (("diff_coarse_vs_megatron_layout", ml.strategy),
                           ("diff_coarse_vs_best_engine", runs[best_engine].strategy)):
            row[col] = coarse_diff(opt.strategy, other) if other else ""
        row.update(mechanism(m, cms["optimum"][0], opt))
    return row


# ----------------------------------------------------------------------------- summary
def num(v: object) -> float:
    """A numeric CSV-row cell as a float; ``nan`` for a blank or non-numeric one."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


@dataclass(frozen=True)
class Spread:
    """The distribution of one ``opt_over_*`` column over the scenarios where the optimum
    fits.

    Attributes:
        comparison: the column.
        n: scenarios where the optimum fits.
        nothing_fits: of those, where the restricted space fits nothing (ratio ``inf``).
        min, median, p90, max: of the finite ratios (numpy ``median`` / ``percentile``,
            linear interpolation); ``nan`` when there are none.
        within_tie: ratios ≤ :data:`TIE`.
        above_win: ratios > :data:`WIN` (``inf`` included).
    """

    comparison: str
    n: int
    nothing_fits: int
    min: float
    median: float
    p90: float
    max: float
    within_tie: int
    above_win: int


def distribution(rows: Sequence[dict[str, object]]) -> list[Spread]:
    """One :class:`Spread` per comparison column (each ``opt_over_*`` of :data:`COLUMNS`)."""
    out = []
    for col in (*(f"opt_over_{r}" for r in RUNS[1:]), "opt_over_best_engine"):
        v = np.asarray([num(r[col]) for r in rows], dtype=np.float64)
        v = v[~np.isnan(v)]
        fin = v[np.isfinite(v)]
        lo, med, p90, hi = (float(fin.min()), float(np.median(fin)),
                            float(np.percentile(fin, 90)), float(fin.max())) \
            if len(fin) else (math.nan,) * 4
        out.append(Spread(col, len(v), int(np.isinf(v).sum()), lo, med, p90, hi,
                          within_tie=int((v <= TIE).sum()), above_win=int((v > WIN).sum())))
    return out


def winners(rows: Sequence[dict[str, object]], column: str) -> list[dict[str, object]]:
    """Rows where optimum ÷ ``column`` exceeds :data:`WIN`, largest first."""
    sel = [r for r in rows if num(r[column]) > WIN]
    return sorted(sel, key=lambda r: -num(r[column]))


def problems(rows: Sequence[dict[str, object]]) -> list[str]:
    """Rows where a restricted space beat the full one (never, unless a bug): one line each."""
    bad = []
    for r in rows:
        for name in RUNS[1:]:
            v = num(r[f"opt_over_{name}"])
            if v < 1 - 1e-9:
                bad.append(f"{r['scenario']}: {name} beats the optimum ({v:.6f})")
    return bad


_NAMES = {"opt_over_megatron_layout": "optimum ÷ best Megatron layout (exact)",
          "opt_over_megatron": "optimum ÷ `megatron` searcher (grid batch)",
          "opt_over_vllm": "optimum ÷ best vLLM-launchable",
          "opt_over_sglang": "optimum ÷ best SGLang-launchable",
          "opt_over_trtllm": "optimum ÷ best TensorRT-LLM-launchable",
          "opt_over_best_engine": "optimum ÷ best of the three engines"}


def markdown(rows: Sequence[dict[str, object]], command: str, code: str, wall_s: float
             ) -> str:
    """The generated block of ``docs/results.md``: provenance, distribution table, winners."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    feas = sum(1 for r in rows if num(r["optimum_tps_per_device"]) > 0)
    out = [BEGIN, "", f"Generated by `{command}` ({stamp}, code {code}, {platform.machine()}, "
           f"total wall {wall_s / 60:.1f} min): {len(rows)} scenarios, {feas} where something "
           f"fits; data in `docs/data/operator_study.csv`.", "",
           "| comparison | scenarios | restricted space: nothing fits | min | median | p90 | "
           f"max | within {TIE}× | above {WIN}× |", "|---|---|---|---|---|---|---|---|---|"]
    for d in distribution(rows):
        out.append(f"| {_NAMES[d.comparison]} | {d.n} | {d.nothing_fits} | {d.min:.4f} | "
                   f"{d.median:.5f} | {d.p90:.4f} | {d.max:.4f} | {d.within_tie} | "
                   f"{d.above_win} |")
    for col, title in (("opt_over_megatron_layout",
                        "Scenarios where the optimum beats the best Megatron-layout strategy "
                        f"by more than {(WIN - 1) * 100:g} %"),
                       ("opt_over_best_engine",
                        "Scenarios where the optimum beats the best strategy any of the three "
                        f"engines can launch by more than {(WIN - 1) * 100:g} %")):
        out += ["", f"**{title}** (ablation: optimum ÷ the optimum with that one operator set "
                "back to Megatron's choice):", "",
                "| scenario | ratio | optimum | best restricted | degrees (restricted → "
                "optimum) | operators ≠ Megatron | ablation per operator | per block | "
                "Megatron dims at the optimum's degrees |", "|---|---|---|---|---|---|---|---|---|"]
        meg = col == "opt_over_megatron_layout"
        for r in winners(rows, col):
            o = "megatron_layout" if meg else str(r["best_engine"])
            rs = r[f"{o}_strategy"] or "nothing fits"
            sd = r["same_degrees_ratio"]
            sdt = (_fmt_ratio(num(sd)) if isinstance(sd, float) else "") + (
                f" ({r['same_degrees_why']})" if r["same_degrees_why"] else "")
            diff = r["diff_coarse_vs_megatron_layout" if meg else "diff_coarse_vs_best_engine"]
            out.append(f"| {r['scenario']} {r['label']} | {_fmt_ratio(num(r[col]))} | "
                       f"`{r['optimum_strategy']}` | {o}: `{rs}` | {diff} | "
                       f"{r['diff_ops']} | {r['ablation']} | {r['block_ablation']} | {sdt} |")
    out += ["", f"**Where an engine's degree rules cost more than {(WIN - 1) * 100:g} %** "
            "(the best Megatron-layout strategy ÷ the best the engine can launch; vLLM and "
            "TensorRT-LLM run Megatron's layout, so the gap is their degree rules; SGLang's "
            "space contains the Megatron layout's):", "",
            "| scenario | engine | Megatron layout ÷ engine | optimum ÷ engine | best Megatron "
            "layout | engine's best | degrees (engine → Megatron layout) |",
            "|---|---|---|---|---|---|---|"]
    for e in ENGINE_NAMES:
        for r in winners(rows, f"megatron_layout_over_{e}"):
            out.append(f"| {r['scenario']} {r['label']} | {e} | "
                       f"{_fmt_ratio(num(r[f'megatron_layout_over_{e}']))} | "
                       f"{_fmt_ratio(num(r[f'opt_over_{e}']))} | "
                       f"`{r['megatron_layout_strategy']}` | "
                       f"`{r[f'{e}_strategy'] or 'nothing fits'}` | "
                       f"{r[f'diff_coarse_{e}_vs_megatron_layout']} |")
    out += ["", END]
    return "\n".join(out)


def write_docs(block: str, path: Path = RESULTS_MD) -> None:
    """Replace the block between :data:`BEGIN` and :data:`END` in ``path`` (append it when
    absent).

    Raises:
        OSError: the file cannot be read or written.
    """
    text = path.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def write_csv(rows: Sequence[dict[str, object]], path: Path) -> None:
    """Write ``rows`` with :data:`COLUMNS` (floats to 6 significant digits after the point
    for ratios, 4 decimals otherwise; ``inf``/``nan`` spelled so)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        for r in rows:
            w.writerow({k: _cell(k, r[k]) for k in COLUMNS})


def _cell(key: str, v: object) -> object:
    """One CSV cell: ratios with 6 decimals, other floats with 4."""
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.6f}" if key.startswith("opt_over") or key == "same_degrees_ratio" \
            else f"{v:.4f}"
    return v


def code_version() -> str:
    """The checkout's short commit, with ``+changes`` when ``src/`` or ``scripts/`` differ
    from it (what the numbers depend on); ``unknown`` without git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--", "src", "scripts"],
                                 cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if changed else "")


def print_summary(console: Console, rows: Sequence[dict[str, object]]) -> None:
    """The distribution and the winners, as rich tables."""
    t = Table(title="optimum ÷ restricted best (scenarios where the optimum fits)")
    for h in ("comparison", "n", "nothing fits", "min", "median", "p90", "max",
              f"≤ {TIE}×", f"> {WIN}×"):
        t.add_column(h)
    for d in distribution(rows):
        t.add_row(_NAMES[d.comparison], str(d.n), str(d.nothing_fits),
                  *(f"{x:.4f}" for x in (d.min, d.median, d.p90, d.max)),
                  str(d.within_tie), str(d.above_win))
    console.print(t)
    for col in ("opt_over_megatron_layout", "opt_over_best_engine"):
        w = Table(title=f"{_NAMES[col]} > {WIN}×")
        for h in ("scenario", "ratio", "optimum", "operators ≠ Megatron", "ablation",
                  "per block", "degrees (Megatron layout → optimum)"):
            w.add_column(h, overflow="fold")
        for r in winners(rows, col):
            w.add_row(str(r["scenario"]), _fmt_ratio(num(r[col])),
                      str(r["optimum_strategy"]), str(r["diff_ops"]), str(r["ablation"]),
                      str(r["block_ablation"]), str(r["diff_coarse_vs_megatron_layout"]))
        console.print(w)


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="only the scenarios marked quick (6), a smoke test; writes no CSV "
                         "unless --out is given")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"CSV path (default {DEFAULT_CSV.relative_to(ROOT)} for the full run)")
    ap.add_argument("--only", default=None,
                    help="comma-separated scenario keys (e.g. g11,t55) instead of all")
    ap.add_argument("--collectives", action="store_true",
                    help="price collectives at their cheapest available algorithm and take "
                         "the best with and without sequence parallelism / GEMM overlap; the "
                         "engine runs search their own collective launch settings (default "
                         "CSV docs/data/operator_study_collectives.csv; no --write-docs)")
    ap.add_argument("--write-docs", action="store_true",
                    help="rewrite the operator-study block of docs/results.md (full run only)")
    args = ap.parse_args(argv)
    chosen: list[Scenario] = [s for s in SCENARIOS if s.quick] if args.quick \
        else list(SCENARIOS)
    if args.only:
        keys = args.only.split(",")
        unknown = [k for k in keys if k not in {s.key for s in SCENARIOS}]
        if unknown:
            print(f"error: --only: unknown scenario key(s) {', '.join(unknown)}; valid: "
                  f"{', '.join(s.key for s in SCENARIOS)}", file=sys.stderr)
            return 2
        chosen = [s for s in SCENARIOS if s.key in keys]
    partial = args.quick or bool(args.only)
    COLLECTIVES["on"] = args.collectives
    if args.write_docs and args.collectives:
        print("error: --write-docs: not with --collectives (its summary is written by hand)",
              file=sys.stderr)
        return 2
    if args.write_docs and partial:
        print("error: --write-docs: only with the full run (drop --quick / --only)",
              file=sys.stderr)
        return 2
    default = DEFAULT_CSV.with_name("operator_study_collectives.csv") if args.collectives \
        else DEFAULT_CSV
    out = args.out if args.out is not None else (None if partial else default)
    console = Console(stderr=True)
    rows: list[dict[str, object]] = []
    t0 = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("scenarios", total=len(chosen))
        for sc in chosen:
            def stage(name: str, sc: Scenario = sc) -> None:
                bar.update(task, description=f"{sc.key} {sc.label()}: {name}")
            rows.append(run_scenario(sc, stage))
            bar.advance(task)
    wall = time.perf_counter() - t0
    if out is not None:
        write_csv(rows, out)
        console.print(f"wrote {out}")
    print_summary(Console(width=None if sys.stdout.isatty() else 200), rows)
    print(f"{len(rows)} scenarios in {wall:.0f} s, code {code_version()}")
    if args.write_docs:
        cmd = "python scripts/operator_study.py --write-docs"
        write_docs(markdown(rows, cmd, code_version(), wall))
        console.print(f"rewrote the operator-study block of {RESULTS_MD}")
    bad = problems(rows)
    for line in bad:
        print(f"error: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
