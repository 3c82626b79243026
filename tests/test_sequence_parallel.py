"""Sequence parallelism and GEMM/collective overlap (issue 16, item 2) as cost-model options:
the layout moves the same bytes as the all-reduce it replaces, the norm runs on token shards,
overlap is bounded by the slower side, the exact solver still equals brute force, and vLLM's
compile passes are exported."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_collective_choice_search import _real_device_problem, _toy
from test_exact import brute_force, check_exact_equals_brute_force

from learn_to_shard.api import (
    collectives_config,
    cost_config,
    make_cost_model,
    make_workload,
    search_collectives,
    search_plan,
)
from learn_to_shard.cost.comm import ALL_REDUCE, GATHER_OR_SCATTER, collective_time_s
from learn_to_shard.cost.config import CostModelConfig
from learn_to_shard.engines.flags import check_args
from learn_to_shard.errors import ConfigError
from learn_to_shard.hardware import parse_cluster
from learn_to_shard.parallel.strategy import Strategy
from learn_to_shard.report.export import build_export
from learn_to_shard.search.exact_tables import verify
from learn_to_shard.workload import Phase

TP = 8


def _estimate(**kw: object):
    cfg = dataclasses.replace(cost_config(None), **kw)
    cm = make_cost_model("llama-3.1-8b", f"h100-sxm:{TP}", make_workload("prefill", isl=4096),
                         cfg)
    return cm, cm.evaluate(Strategy(tp=TP, ep=1, pp=1, dp=1, batch=2))


def test_sequence_parallel_moves_the_same_bytes_as_the_all_reduce_it_replaces() -> None:
    """Each all-reduce before a norm becomes a reduce-scatter and an all-gather of the same
    full tensor: (n-1)/n S each, 2 (n-1)/n S together — the all-reduce's bus bytes — and under
    the alpha-beta formula their times add up to the all-reduce's exactly. What changes is
    the norm, run on 1/n of the tokens: TTFT drops by exactly that pass's saving."""
    cm, base = _estimate()
    _, sp = _estimate(sequence_parallel=True)
    ars = {c.where: c for c in base.collectives if c.kind == "all-reduce" and c.per_step > 1}
    assert set(ars) == {"layer input -> qkv_proj", "o_proj -> dense_up"}
    saving = 0.0
    for where, ar in ars.items():
        rs, ag = (next(c for c in sp.collectives if c.where == f"{where} (sequence parallel)"
                       and c.kind == k) for k in ("reduce-scatter", "all-gather"))
        assert rs.bytes == ag.bytes == ar.bytes and rs.per_step == ar.per_step
        frac = (TP - 1) / TP
        assert frac * rs.bytes + frac * ag.bytes == pytest.approx(2 * frac * ar.bytes,
                                                                  rel=1e-15)
        assert rs.time_s + ag.time_s == pytest.approx(ar.time_s, rel=1e-12)
        saving += ar.per_step * 4.0 * ar.bytes * frac / (
            cm.cluster.device.hbm_bytes_per_s * cm.config.hbm_efficiency)
    lm = next(c for c in base.collectives if c.where == "last layer -> lm_head")
    saving += 4.0 * lm.bytes * (TP - 1) / TP / (cm.cluster.device.hbm_bytes_per_s
                                                * cm.config.hbm_efficiency)
    assert base.ttft_s - sp.ttft_s == pytest.approx(saving, rel=1e-9)
    assert sp.op_time_s == base.op_time_s


def test_sequence_parallel_with_algorithms_prices_each_half_as_its_own_collective() -> None:
    """Under algorithm pricing the halves are NCCL reduce-scatter / all-gather (ring or NVLS):
    no one-shot kernel or fused all-reduce + RMSNorm exists for them."""
    cm, sp = _estimate(sequence_parallel=True, collective_algorithm="auto")
    rs = next(c for c in sp.collectives if c.kind == "reduce-scatter")
    pricer = cm._collective_pricer
    want, pick = pricer.time_s(np.array([GATHER_OR_SCATTER]), np.array([TP]),
                               np.array([rs.bytes]), np.array([1.0]))
    assert rs.time_s == pytest.approx(float(want[0]), rel=1e-12)
    assert pick[0] in (0, 2)                           # ring or nvls


def test_gemm_overlap_is_bounded_by_the_slower_side() -> None:
    cm, _ = _estimate(gemm_overlap=True, gemm_overlap_efficiency=0.8)
    comm = np.array([0.0, 1.0, 5.0, 10.0, 1.0])
    gemm = np.array([3.0, 10.0, 10.0, 5.0, 1.0])
    got = cm._overlap_s(comm, gemm)
    assert got[0] == 3.0                          # nothing to hide: the GEMM alone
    assert got[1] == pytest.approx(11.0)          # never slower than one after the other
    assert got[2] == pytest.approx(10.0 / 0.8)    # max(comm, gemm) / e
    assert got[3] == pytest.approx(10.0 / 0.8)    # the slower side bounds it either way
    assert got[4] == pytest.approx(1.0 / 0.8)
    assert np.all(got >= np.maximum(comm, gemm)) and np.all(got <= comm + gemm)
    _, sp = _estimate(sequence_parallel=True)
    _, both = _estimate(sequence_parallel=True, gemm_overlap=True)
    assert both.ttft_s < sp.ttft_s
    # Perfect efficiency and collectives shorter than their GEMMs: only the GEMMs remain
    # for the overlapped pairs, so the layer gets cheaper by at most the overlapped times.
    hidden = sum(c.time_s * c.per_step for c in sp.collectives
                 if c.where.startswith("o_proj -> dense_up") or (
                     c.where.startswith("layer input") and c.kind == "all-gather"))
    assert sp.ttft_s - both.ttft_s <= hidden + 1e-12


@pytest.mark.parametrize(("phase", "moe", "kw"), [
    (Phase.PREFILL, False, dict(sequence_parallel=True)),
    (Phase.SERVE, False, dict(sequence_parallel=True, gemm_overlap=True,
                              collective_algorithm="auto")),
    (Phase.DECODE, True, dict(sequence_parallel=True, gemm_overlap=True)),
])
def test_exact_equals_brute_force_with_sequence_parallel(phase: Phase, moe: bool,
                                                         kw: dict) -> None:
    cm = _real_device_problem(_toy(moe), CostModelConfig(**kw), phase)  # type: ignore[arg-type]
    assert verify(cm, n=64) > 0
    bf = brute_force(cm)
    assert bf[0] > 0
    check_exact_equals_brute_force(cm, describe=False, bf=bf)


def test_no_engine_exports_the_passes_at_its_pinned_version() -> None:
    """vLLM 0.33.0 has no sequence-parallelism / async-TP pass (its PassConfig lost
    enable_sp and fuse_gemm_comms and forbids unknown fields), so every engine's export of a
    plan priced with them lists them as not expressible and emits no pass for them."""
    wl = make_workload("prefill", isl=4096)
    for engine in ("vllm", "sglang", "trtllm"):
        cfg = dataclasses.replace(cost_config(engine), sequence_parallel=True,
                                  gemm_overlap=True)
        cm = make_cost_model("llama-3.1-70b", "h100-sxm:8", wl, cfg)
        p = search_plan(cm, method="megatron", budget=200)
        assert p.best is not None and p.best.strategy.tp > 1
        ex = build_export(p, engine, model=cm.model, devices_per_node=8)
        assert check_args(engine, ex.args) == []
        assert any("sequence parallel" in u for u in ex.unexpressed)
        assert "enable_sp" not in " ".join(ex.args)


def test_an_engine_with_the_passes_gets_them_merged_into_one_compile_config(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where an engine has the passes (none at the pinned versions; a mapping stands in), the
    export writes them into the same --compilation-config as the collective setting's own
    pass."""
    import learn_to_shard.engines.collectives as coll

    monkeypatch.setitem(coll.SEQUENCE_PARALLEL_PASS, "vllm", ("sp_pass", "overlap_pass"))
    wl = make_workload("prefill", isl=4096)
    cl = parse_cluster("h100-sxm:8")
    cfg = dataclasses.replace(collectives_config(cost_config("vllm"), "fuse-allreduce-rms",
                                                 "vllm", cl), sequence_parallel=True,
                              gemm_overlap=True)
    cm = make_cost_model("llama-3.1-70b", "h100-sxm:8", wl, cfg, engine="vllm")
    ex = build_export(search_plan(cm, method="megatron", budget=200, engine="vllm"), "vllm",
                      model=cm.model, devices_per_node=8)
    assert ex.args.count("--compilation-config") == 1
    text = ex.args[ex.args.index("--compilation-config") + 1]
    assert '"fuse_allreduce_rms": true' in text and '"sp_pass": true' in text
    assert '"overlap_pass": true' in text


def test_search_tries_sequence_parallel_where_the_engine_offers_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    wl = make_workload("prefill", isl=4096, ttft_slo_s=1.0)
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:8", wl, cost_config("vllm"), engine="vllm")
    # At the pinned versions no engine launches it, so the search does not try it.
    assert not any("+sp" in k for k in search_collectives(
        cm, method="megatron", budget=100, engine="vllm").search["collective_settings"])
    import learn_to_shard.engines.collectives as coll

    monkeypatch.setitem(coll.SEQUENCE_PARALLEL_PASS, "vllm", ("sp_pass", "overlap_pass"))
    p = search_collectives(cm, method="exact", engine="vllm")
    scores = p.search["collective_settings"]
    assert isinstance(scores, dict)
    assert {"engine-default", "engine-default+sp", "engine-default+sp+overlap"} <= set(scores)
    assert p.best is not None and p.best.tokens_per_s_per_device == max(scores.values())
    cm_s = make_cost_model("llama-3.1-8b", "h100-sxm:8", wl, cost_config("sglang"),
                           engine="sglang")
    assert not any("+sp" in k for k in search_collectives(
        cm_s, method="megatron", budget=100, engine="sglang").search["collective_settings"])


def test_bad_efficiency_is_refused() -> None:
    with pytest.raises(ConfigError, match="gemm_overlap_efficiency"):
        CostModelConfig(gemm_overlap_efficiency=1.5)
    assert collective_time_s(np.array([ALL_REDUCE]), np.array([1]), np.array([1.0]),
                             np.array([1.0]), np.array([0.0]))[0] == 0.0
