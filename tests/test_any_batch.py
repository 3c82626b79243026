"""The cluster objective (replicas, idle devices), any-integer batches and the context-parallel
K/V exchange (issue 12 items 6 and 7)."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

import learn_to_shard.search.exact as exact_mod
from learn_to_shard.api import make_cost_model, make_workload
from learn_to_shard.cost import CostModel, CostModelConfig
from learn_to_shard.cost.comm import GATHER_OR_SCATTER, collective_time_s
from learn_to_shard.hardware import parse_cluster
from learn_to_shard.hardware.spec import ClusterSpec, DeviceSpec
from learn_to_shard.model.spec import (
    AttentionKind,
    AttentionSpec,
    LayerSpec,
    ModelSpec,
    MoESpec,
)
from learn_to_shard.parallel import StrategySpace
from learn_to_shard.parallel.ops import Op
from learn_to_shard.parallel.space import NUM_COARSE, active_heads, batch_grid
from learn_to_shard.parallel.strategy import Strategy
from learn_to_shard.search.exact import ExactSearcher, solve_any_batch
from learn_to_shard.workload import Phase, Workload

MEGATRON = (0, 1, 1, 0, 1, 0, 2, 1, 0, 1, 0, 1)


def _device(hbm: float, domain: int = 8) -> DeviceSpec:
    """H100-like, ``hbm`` usable bytes after the engine's reservation."""
    h = parse_cluster("h100-sxm:1").device
    c = CostModelConfig()
    return dataclasses.replace(h, name="t", hbm_bytes=hbm / c.memory_utilization
                               + c.runtime_reserved_bytes / c.memory_utilization,
                               scale_up_domain=domain)


def _tiny(layers: int = 1) -> ModelSpec:
    return ModelSpec(
        name="t", architecture="LlamaForCausalLM", hidden_size=256, vocab_size=2048,
        attention=AttentionSpec(AttentionKind.GQA, 4, 2, 64, 64),
        dense_intermediate_size=512, gated_mlp=True, moe=None,
        layers=tuple(LayerSpec(is_moe=False) for _ in range(layers)))


# ------------------------------------------------------------------ item 7a: replicas
def test_objective_counts_idle_devices():
    """tokens/s per device = one instance's tokens/s × floor(N / devices) / N."""
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:7", make_workload("decode", context=4096))
    for tp, reps in ((4, 1), (2, 3), (1, 7)):
        e = cm.evaluate(Strategy(tp=tp, ep=1, pp=1, dp=1, batch=16, dims=MEGATRON))
        assert e.instances == reps and e.idle_devices == 7 - reps * tp
        assert e.tokens_per_s_per_device == pytest.approx(e.output_tokens_per_s * reps / 7,
                                                          rel=1e-12)


def test_seven_gpus_are_filled():
    """Llama-3.1-70B serving on 7 H100s: the optimum leaves no device idle, and beats the
    TP4 plan that ranked first when only the instance's own devices counted (1 replica, 3
    GPUs idle) by more than 40 % in cluster tokens/s per device."""
    wl = make_workload("serve", isl=1024, osl=256, tpot_slo_s=0.05)
    cm = make_cost_model("llama-3.1-70b", "h100-sxm:7", wl)
    res = ExactSearcher().search(cm, None, 0)
    best = cm.evaluate(res.best_action)
    assert best.idle_devices == 0 and best.instances * best.strategy.devices == 7
    old = cm.evaluate(Strategy(tp=4, ep=1, pp=1, dp=1, batch=64,
                               dims=(2, 1, 1, 1, 1, 0, 2, 2, 2, 2, 2, 1)))
    assert old.feasible and old.idle_devices == 3
    assert best.tokens_per_s_per_device > 1.4 * old.tokens_per_s_per_device


# ------------------------------------------------------------------ item 7b: any batch
def test_batch_grid_is_dense_then_geometric():
    g = batch_grid()
    assert g[:16] == tuple(range(1, 17)) and g[-1] == 2**16
    assert {24, 32, 48, 96, 6144} <= set(g) and not {20, 40, 112} & set(g)
    assert max(b / a for a, b in zip(g[:-1], g[1:], strict=True) if a >= 16) <= 1.5
    assert {9, 18, 36, 72, 9 * 2**12} <= set(batch_grid((1, 72)))   # multiples of each dp


def _serve_problem(slo_batch: int, n_dev: int = 2) -> tuple[CostModel, CostModel]:
    """A tiny serve problem whose TPOT SLO sits at the step time of ``slo_batch`` sequences
    (TP1), with the batch grid up to 128 (any integer) and, for reference, every integer
    1..128 as explicit candidates."""
    m = _tiny()
    cl = ClusterSpec(_device(4e7), n_dev, name="t")
    base = Workload(Phase.SERVE, isl=64, osl=16)
    probe = CostModel(m, cl, base, space=StrategySpace.build(m, cl, batch_values=(slo_batch,)))
    slo = probe.evaluate(Strategy(1, 1, 1, 1, slo_batch, dims=(2,) * 12)).tpot_s * (1 + 1e-9)
    wl = dataclasses.replace(base, tpot_slo_s=slo)
    sp = StrategySpace.build(m, cl)
    grid = dataclasses.replace(sp, batch_values=batch_grid(sp.dp_values, 7), any_batch=True)
    every = dataclasses.replace(sp, batch_values=tuple(range(1, 129)), any_batch=False)
    return CostModel(m, cl, wl, space=grid), CostModel(m, cl, wl, space=every)


@pytest.mark.parametrize("slo_batch", [37, 53, 90])
def test_any_batch_matches_every_integer(slo_batch):
    """The grid search plus its cell refinement finds the optimum over every integer batch
    1..128 (the same solver over an all-integer space), here at a batch off the grid."""
    cm, ref = _serve_problem(slo_batch)
    sol, space = solve_any_batch(cm)
    want = ExactSearcher().search(ref, None, 0)
    assert sol.best_objective == pytest.approx(want.best_objective, rel=1e-9)
    got = space.decode(sol.best_action)
    assert got.batch not in cm.space.batch_values          # a non-grid optimum, certified
    assert sol.certificate.any_batch and sol.certificate.batch_cells_open >= 1


@pytest.mark.parametrize("phase", [Phase.DECODE, Phase.PREFILL])
def test_any_batch_memory_or_ttft_bound(phase):
    """Decode limited by memory (b35, PP2) and prefill (b71) on 4 devices: the optimum over
    the grid plus its refinement equals the optimum over every integer batch 1..128, off
    the grid."""
    m = _tiny(layers=2)
    cl = ClusterSpec(_device(1.5e7 if phase is Phase.DECODE else 4e7), 4, name="t")
    wl = Workload(phase, isl=700 if phase is Phase.DECODE else 96,
                  ttft_slo_s=None if phase is Phase.DECODE else 2.3e-4)
    sp = StrategySpace.build(m, cl)
    grid = CostModel(m, cl, wl, space=dataclasses.replace(
        sp, batch_values=batch_grid(sp.dp_values, 7), any_batch=True))
    every = CostModel(m, cl, wl, space=dataclasses.replace(
        sp, batch_values=tuple(range(1, 129)), any_batch=False))
    sol, space = solve_any_batch(grid)
    want = ExactSearcher().search(every, None, 0)
    assert want.best_objective > 0
    assert sol.best_objective == pytest.approx(want.best_objective, rel=1e-9)
    assert space.decode(sol.best_action).batch not in grid.space.batch_values   # off the grid


def test_first_pass_grid_changes_the_work_not_the_optimum(monkeypatch):
    """solve_any_batch's coarse first pass (every integer to 4, then one per octave) keeps
    the largest batch and a multiple of every DP degree in every octave, and certifies the
    same optimum as a first pass over every integer 1..128 (no cells left to split)."""
    cm, _ = _serve_problem(53, n_dev=4)
    first = exact_mod._first_pass_space(cm.space).batch_values
    assert first[-1] == max(cm.space.batch_values) and len(first) < len(cm.space.batch_values)
    for d in cm.space.dp_values:
        k = d
        while k <= 128:
            assert any(b % d == 0 for b in first if k <= b < 2 * k), (d, k)
            k *= 2
    sol, space = solve_any_batch(cm)
    monkeypatch.setattr(exact_mod, "FIRST_PASS_DENSE_UPTO", 128)
    dense, dense_space = solve_any_batch(cm)
    assert dense.certificate.batch_cells_open == 0 < sol.certificate.batch_cells_open
    assert sol.best_objective == pytest.approx(dense.best_objective, rel=1e-12)
    assert space.decode(sol.best_action) == dense_space.decode(dense.best_action)


def test_first_pass_keeps_every_dp_degree_below_an_odd_top():
    """A space whose largest batch (7) is no power of two and whose only DP degree (6) lies
    above the power of two below it: the first pass still holds a batch DP 6 allows, and the
    optimum equals the all-integer one (tp1 ep3 dp6 b6)."""
    m = ModelSpec(name="t", architecture="Test", hidden_size=256, vocab_size=512,
                  attention=AttentionSpec(AttentionKind.GQA, 4, 2, 64, 64),
                  dense_intermediate_size=0, gated_mlp=True,
                  moe=MoESpec(num_experts=6, top_k=2, expert_intermediate_size=2048,
                              num_shared_experts=0, shared_intermediate_size=0),
                  layers=(LayerSpec(is_moe=True),))
    cl = ClusterSpec(_device(1e8), 6, name="t")
    wl = Workload(Phase.DECODE, isl=64)
    sp = dataclasses.replace(StrategySpace.build(m, cl), dp_values=(6,))
    grid = CostModel(m, cl, wl, space=dataclasses.replace(
        sp, batch_values=tuple(range(1, 8)), any_batch=True))
    every = CostModel(m, cl, wl, space=dataclasses.replace(
        sp, batch_values=tuple(range(1, 8)), any_batch=False))
    assert 6 in exact_mod._first_pass_space(grid.space).batch_values
    sol, space = solve_any_batch(grid)
    want = ExactSearcher().search(every, None, 0)
    assert want.best_objective > 0
    assert sol.best_objective == pytest.approx(want.best_objective, rel=1e-9)
    assert space.decode(sol.best_action).batch == 6


def test_runner_up_solve_past_a_limit_keeps_the_certified_optimum(monkeypatch):
    """The runners-up's grid solve comes after the optimum is certified: when it would pass
    the time or work limit, solve_any_batch returns the optimum (and the runners-up found)
    instead of failing."""
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:8",
                         make_workload("serve", isl=1000, osl=200, tpot_slo_s=0.05))
    sol, space = solve_any_batch(cm)
    real = exact_mod.solve
    refused = []

    def limited(*args, **kw):
        if kw.get("only") is not None and not kw.get("cells"):     # the runner-up solve
            refused.append(1)
            raise exact_mod.ExactWorkLimit("past the limit")
        return real(*args, **kw)

    monkeypatch.setattr(exact_mod, "solve", limited)
    capped, capped_space = solve_any_batch(cm)
    assert refused and len(sol.top) > 1 and len(capped.top) > 1
    assert capped.best_objective == pytest.approx(sol.best_objective, rel=1e-12)
    assert capped_space.decode(capped.best_action) == space.decode(sol.best_action)


def test_runner_up_solve_bounded_by_the_worst_runner_up_finds_the_same(monkeypatch):
    """The runners-up's grid solve skips batches whose bound lies below the worst runner-up
    (none of them can improve one): the reported optimum and runners-up (strategies and
    objectives) equal those of the same solve without that incumbent."""
    cm = make_cost_model("mixtral-8x7b", "h100-sxm:8",
                         make_workload("serve", isl=1000, osl=1000))
    sol, space = solve_any_batch(cm)
    real = exact_mod.solve
    seen = []

    def unbounded(*args, **kw):
        if kw.get("only") is not None and not kw.get("cells"):     # the runner-up solve
            seen.append(kw.pop("incumbent"))
        return real(*args, **kw)

    monkeypatch.setattr(exact_mod, "solve", unbounded)
    full, full_space = solve_any_batch(cm)
    assert seen and seen[0] > 0 and len(sol.top) == len(full.top) > 2
    assert [space.decode(a) for a in sol.top] == [full_space.decode(a) for a in full.top]
    def objectives(s, sp):
        return CostModel(cm.model, cm.cluster, cm.workload, cm.config,
                         space=sp).evaluate_many(np.array(s.top)).objective

    got = objectives(sol, space)
    assert (got > 0).all()
    np.testing.assert_allclose(got, objectives(full, full_space), rtol=1e-12)


def test_exact_optimum_alone_is_the_optimum():
    """``ExactSearcher(keep=1)`` (the engine optima of ``l2s plan``, without runners-up)
    reports the same certified optimum as the full search, and only it."""
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:8",
                         make_workload("serve", isl=1000, osl=200, tpot_slo_s=0.05))
    full = ExactSearcher().search(cm, None, 0)
    best_full = cm.space.decode(full.best_action)
    cm1 = make_cost_model("llama-3.1-8b", "h100-sxm:8",
                          make_workload("serve", isl=1000, osl=200, tpot_slo_s=0.05))
    alone = ExactSearcher(keep=1).search(cm1, None, 0)
    assert alone.best_objective == pytest.approx(full.best_objective, rel=1e-12)
    assert cm1.space.decode(alone.best_action) == best_full
    assert len(alone.top) == 1 < len(full.top)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="keep"):
            ExactSearcher(keep=bad)


def test_any_batch_brute_force():
    """Every action vector with every integer batch 1..48, enumerated (all degrees, every
    relevant per-operator choice): the exact searcher's optimum equals the brute-force one."""
    m = _tiny()
    cl = ClusterSpec(_device(4e7), 2, name="t")
    cm, _ = _serve_problem(29)
    wl = cm.workload
    sp = StrategySpace.build(m, cl)
    every = CostModel(m, cl, wl, space=dataclasses.replace(
        sp, batch_values=tuple(range(1, 49)), any_batch=False))
    grid = CostModel(m, cl, wl, space=dataclasses.replace(
        sp, batch_values=batch_grid(sp.dp_values, 5)[:-1] + (48,), any_batch=True))
    act = active_heads(every.space)
    heads = [range(n) if act[i] else [0 if i < NUM_COARSE else 2]
             for i, n in enumerate(every.space.nvec)]
    rows = np.array(list(itertools.product(*heads)), dtype=np.int64)
    brute = float(every.evaluate_many(rows).objective.max())
    res = ExactSearcher().search(grid, None, 0)
    assert res.best_objective == pytest.approx(brute, rel=1e-9)
    assert grid.space.decode(res.best_action).batch not in batch_grid(sp.dp_values, 5)


# ------------------------------------------------------------------ item 6: context parallel
def test_kv_exchange_bytes_golden():
    """Llama-3.1-8B, 4,096-token prompt: K and V of 8 KV heads × 128 dims, bf16, per layer:
    4096 × 8 × (128 + 128) × 2 B = 16,777,216 B; the all-gather over TP4 is priced on it."""
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:8",
                         make_workload("prefill", isl=4096, ttft_slo_s=0.03))
    assert float(cm.kv_exchange_bytes(4096.0)) == 16_777_216.0
    s = Strategy(tp=4, ep=1, pp=1, dp=1, batch=1, dims=(0, 2, 0, 2, 2, 2, 2, 2, 2, 2, 2, 1))
    e = cm.evaluate(s)
    kvx = [c for c in e.collectives if c.where.startswith("attention K/V exchange")]
    assert len(kvx) == 1 and kvx[0].kind == "all-gather" and kvx[0].group == 4
    assert kvx[0].per_step == 32
    bw, alpha = cm.link(4)
    want = collective_time_s(np.array([GATHER_OR_SCATTER]), np.array([4]),
                             np.array([16_777_216.0]), np.array([bw]), np.array([alpha]))[0]
    assert kvx[0].time_s == pytest.approx(float(want), rel=1e-12)
    # Four prompts over TP4 are whole sequences per rank: nothing is exchanged.
    e4 = cm.evaluate(dataclasses.replace(s, batch=4))
    assert not [c for c in e4.collectives if c.where.startswith("attention K/V exchange")]


def test_split_prompt_gain_was_the_unpriced_exchange(monkeypatch):
    """Llama-3.1-8B prefill of 1,024 tokens at TTFT ≤ 10 ms on 8 H100s: without the K/V
    exchange the optimum splits three prompts over TP8 (attention Shard(0)) at no cost.
    Priced, that split pays 32 all-gathers, so the model keeps the prompts whole, one per
    rank (five ranks idle in attention): the same strategy's TTFT rises, no exchange is
    left in it, and the optimum's objective falls."""
    wl = make_workload("prefill", isl=1024, ttft_slo_s=0.01)
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:8", wl)
    priced = ExactSearcher().search(cm, None, 0)
    monkeypatch.setattr(CostModel, "_kv_exchange_time_s",
                        lambda self, split, env: np.zeros_like(env["t"]))
    free = make_cost_model("llama-3.1-8b", "h100-sxm:8", wl)
    unpriced = ExactSearcher().search(free, None, 0)
    s_free = free.space.decode(unpriced.best_action)
    assert s_free.tp == 8 and s_free.batch < 8 and s_free.dims[Op.ATTENTION] == 0
    free_e = free.evaluate(s_free)
    monkeypatch.undo()
    again = cm.evaluate(s_free)
    assert again.ttft_s > free_e.ttft_s
    assert not [c for c in again.collectives if c.where.startswith("attention K/V exchange")]
    # Whole prompts: the busiest rank attends one whole prompt, as with eight prompts on
    # eight ranks, where nothing is split.
    eight = cm.evaluate(dataclasses.replace(s_free, batch=8))
    assert again.op_time_s["attention"] == pytest.approx(eight.op_time_s["attention"],
                                                         rel=1e-12)
    assert again.op_time_s["attention"] > free_e.op_time_s["attention"]
    assert priced.best_objective < unpriced.best_objective


def test_seq_split_attention_takes_the_cheaper_of_split_and_whole():
    """Attention Shard(0) with fewer prompts than TP ranks (Llama-3.1-8B, TP8, 1,024-token
    prefill): one prompt is split over the eight ranks and pays the K/V all-gather (cheaper
    than one rank attending it whole); from two prompts on, whole prompts per rank are
    cheaper than splitting and exchanging, and the attention time stays that of one whole
    prompt up to eight prompts. TTFT never falls as prompts are added."""
    wl = make_workload("prefill", isl=1024)
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:8", wl)
    s = Strategy(tp=8, ep=1, pp=1, dp=1, batch=1, dims=(0, 2, 0, 2, 2, 2, 2, 2, 2, 2, 2, 1))
    es = [cm.evaluate(dataclasses.replace(s, batch=b)) for b in range(1, 17)]

    def kvx(e):
        return [c for c in e.collectives if c.where.startswith("attention K/V exchange")]

    assert len(kvx(es[0])) == 1 and not any(kvx(e) for e in es[1:])
    assert es[0].op_time_s["attention"] + kvx(es[0])[0].time_s * 32 \
        < es[7].op_time_s["attention"]
    assert len({round(e.op_time_s["attention"], 15) for e in es[1:8]}) == 1
    ttft = [e.ttft_s for e in es]
    assert all(b >= a for a, b in zip(ttft, ttft[1:], strict=False))


def test_whole_prompts_beyond_tp_cost_the_busiest_ranks_prompts():
    """Attention Shard(0) with more prompts than TP ranks (Llama-3.1-8B, TP8, 1,024-token
    prefill): nine whole prompts put two on the busiest rank, so attention costs what 16
    prompts cost (two per rank), not 9/8 of one prompt as an even split with nothing
    exchanged would; splitting them evenly and all-gathering their K/V costs more here. At
    8 and 16 prompts the even split is whole prompts and nothing is exchanged. TTFT never
    falls as prompts are added."""
    wl = make_workload("prefill", isl=1024)
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:8", wl)
    s = Strategy(tp=8, ep=1, pp=1, dp=1, batch=1, dims=(0, 2, 0, 2, 2, 2, 2, 2, 2, 2, 2, 1))
    es = {b: cm.evaluate(dataclasses.replace(s, batch=b)) for b in range(8, 17)}
    att = {b: e.op_time_s["attention"] for b, e in es.items()}
    assert all(att[b] == pytest.approx(att[16], rel=1e-12) for b in range(9, 17))
    assert att[16] > 1.9 * att[8]
    assert not [c for e in es.values() for c in e.collectives
                if c.where.startswith("attention K/V exchange")]
    ttft = [es[b].ttft_s for b in range(8, 17)]
    assert all(b >= a for a, b in zip(ttft, ttft[1:], strict=False))


def test_whole_prompt_tokens_interpolates_between_whole_counts():
    """A step's prompts are a mean: 8.5 prompts over 8 ranks are steps of 8 (one per rank)
    and 9 (two on the busiest) in equal shares, 1.5 prompts on the busiest rank on average;
    below one prompt the share itself; one prompt up to 8; 2 at 16; 3 at 16.25 and 24."""
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:8", make_workload("prefill", isl=1000))
    n = np.array([0.25, 1.0, 3.0, 8.0, 8.5, 16.0, 16.25, 24.0])
    env = {"t": np.full(n.shape, 8.0), "pf": n * 1000.0}
    got = cm.whole_prompt_tokens(env)
    np.testing.assert_array_equal(got, [250, 1000, 1000, 1000, 1500, 2000, 2250, 3000])
    assert np.all(np.diff(cm.whole_prompt_tokens(
        {"t": np.full(400, 8.0), "pf": np.linspace(0, 40_000, 400)})) >= 0)


def test_serve_latency_does_not_fall_with_batch_under_seq_split_attention():
    """Mixtral-8x7B on 8 H100s, serve 1,000 / 500, TP2 EP8 DP4 with attention Shard(0):
    from batch 4 (one sequence per DP rank) to 5 (two on the busiest) TPOT and TTFT must
    not fall. Pricing the split by the step's decoding sequences had dropped the prompt's
    K/V exchange at batch 5 (TPOT 7.098 → 7.054 ms), which the exact solver's batch-cell
    bounds (latency non-decreasing in the batch) cannot allow; random strategies of four
    models, three phases and three profiles checked the same way showed 114 such dips in
    1,920 batch sweeps (1–64) before, none after."""
    wl = make_workload("serve", isl=1000, osl=500)
    cm = make_cost_model("mixtral-8x7b", "h100-sxm:8", wl)
    dims = (1, 0, 0, 1, 2, 2, 0, 1, 0, 2, 2, 1)
    es = [cm.evaluate(Strategy(tp=2, ep=8, pp=1, dp=4, batch=b, dims=dims))
          for b in range(1, 17)]
    for key in ("tpot_s", "ttft_s"):
        v = [getattr(e, key) for e in es]
        assert all(b >= a for a, b in zip(v, v[1:], strict=False)), key


def _every_batch(cm: CostModel, hi: int) -> CostModel:
    """``cm`` with every batch 1..``hi`` a candidate."""
    return CostModel(cm.model, cm.cluster, cm.workload, cm.config,
                     space=dataclasses.replace(cm.space, batch_values=tuple(range(1, hi + 1)),
                                               any_batch=False))


def test_serve_ttft_prices_the_prompts_tokens_once_and_never_falls():
    """Phi-3.5-MoE on 16 H100s, serve 16,384 / 4,000, TP16 EP4 CP2 with attention Shard(0):
    the prompt takes k = ⌈isl / (budget − decodes)⌉ steps, and the TTFT step carries its mean
    chunk isl / k (beside the other running requests' prompt tokens). Priced with the whole
    chunk instead, k chunks overcount the prompt (3 × 8,000 tokens for 16,384), and the
    overcount shrinks as decodes shrink the chunk, so TTFT fell from batch 176 to 240 by 0.14%
    (whole prompts on one rank make a chunk token cost a whole token)."""
    wl = make_workload("serve", isl=16384, osl=4000)
    cm = _every_batch(make_cost_model("phi-3.5-moe-instruct", "h100-sxm:16", wl), 256)
    dims = (1, 2, 0, 2, 1, 1, 0, 0, 0, 0, 2, 2)
    batches = range(160, 258, 4)
    ttft = [cm.evaluate(Strategy(16, 4, 1, 1, b, dims=dims, cp=2)).ttft_s for b in batches]
    assert all(b >= a for a, b in zip(ttft, ttft[1:], strict=False))
    ph = cm.phase_rows(np.array([1]), np.array([1]), np.array([192]))
    assert float(ph["chunk_steps"][0]) == 3.0
    # its mean chunk, beside the other 191 running requests' prompt tokens of a step
    pf2 = 16384 / 3 + 191 * 16384 / 4000
    assert float(ph["pf2"][0]) == pytest.approx(pf2, rel=1e-15)
    assert float(ph["pf_seqs2"][0]) == pytest.approx(pf2 / 16384, rel=1e-15)


def test_serve_latency_is_flat_once_the_token_budget_binds():
    """Llama-3.1-8B on 16 H100s, serve 1,000 / 7, TP16 with attention Shard(0): beyond
    ⌊8,192 / (1 + 1000/7)⌋ = 57 requests the budget binds, so a step carries the same
    requests and TPOT is the same at every batch. It alternated by 5e-5 (relative): the
    decodes were ``seq_dp · share``, an ulp apart from batch to batch, and the whole-prompt
    share ``⌈pf / max(pf / isl, 1)⌉`` rounded to isl + 1 for some."""
    wl = make_workload("serve", isl=1000, osl=7)
    cm = _every_batch(make_cost_model("llama-3.1-8b", "h100-sxm:16", wl), 80)
    dims = (0, 2, 0, 2, 2, 2, 2, 2, 2, 2, 2, 1)
    tpot = {cm.evaluate(Strategy(16, 1, 1, 1, b, dims=dims)).tpot_s for b in range(58, 80)}
    assert len(tpot) == 1


@pytest.mark.parametrize("parts", [2, 3, 4, 7])
def test_cell_split_tiles_each_cell(parts):
    """_split_cells cuts each open cell (lo, hi] at multiples of its dp into pieces that
    start at an exactly solved batch and together cover every multiple of dp from lo to hi
    once; two parts is the middle multiple of dp."""
    rng = np.random.default_rng(parts)
    dp = rng.integers(1, 9, 200)
    lo = dp * rng.integers(1, 40, 200)
    hi = lo + dp * rng.integers(1, 70, 200)
    b, top, cell = exact_mod._split_cells(lo, hi, dp, parts)
    for i in range(len(lo)):
        pieces = sorted(zip(b[cell == i], top[cell == i], strict=True))
        assert pieces[0][0] == lo[i] and len(pieces) <= parts
        covered = [x for s, t in pieces for x in range(s, t + 1, dp[i])]
        assert covered == list(range(lo[i], hi[i] + 1, dp[i]))
        assert all(s % dp[i] == lo[i] % dp[i] for s, _ in pieces)
    if parts == 2:
        mid = lo + -(-(hi - lo) // (2 * dp)) * dp
        np.testing.assert_array_equal(b, np.concatenate([lo, mid]))
        np.testing.assert_array_equal(top, np.concatenate([mid - dp, hi]))
    with pytest.raises(ValueError, match="at least 2"):
        exact_mod._split_cells(lo, hi, dp, 1)


@pytest.mark.parametrize("parts", [2, 3, 8])
def test_any_batch_certifies_the_same_optimum_whatever_the_cell_split(monkeypatch, parts):
    """The branch and bound's split size changes the work, not the optimum: each certifies
    the optimum over every integer batch 1..128."""
    cm, ref = _serve_problem(53)
    want = ExactSearcher().search(ref, None, 0)
    monkeypatch.setattr(exact_mod, "CELL_SPLIT", parts)
    sol, space = solve_any_batch(cm)
    assert sol.best_objective == pytest.approx(want.best_objective, rel=1e-9)
    assert sol.certificate.batch_cells_open >= 1


def test_any_batch_certifies_a_closed_loop_window():
    """A closed loop of 200 clients on 2 devices, TPOT SLO at TP1's batch 80 and TTFT SLO at
    its batch 70: TTFT falls as the batch grows (fewer clients wait for a slot) while TPOT
    rises, so TP1's feasible batches are the window 70..80, between the grid's 64 and 96. The
    cell bounds take the wait at each cell's top, so the refinement finds the window and
    matches the optimum over every integer batch."""
    m = _tiny()
    cl = ClusterSpec(_device(4e8), 2, name="t")
    base = Workload(Phase.SERVE, isl=64, osl=16, concurrency=200)

    def at(b: int, wl: Workload) -> tuple[float, float]:
        cm = CostModel(m, cl, wl, space=StrategySpace.build(m, cl, batch_values=(b,)))
        e = cm.evaluate(Strategy(1, 1, 1, 1, b, dims=(2,) * 12))
        return e.tpot_s, e.ttft_s

    tpot_slo = at(80, base)[0] * (1 + 1e-9)
    ttft_slo = at(70, base)[1] * (1 + 1e-9)
    assert at(64, base)[1] > ttft_slo                 # below the window: too many wait
    wl = dataclasses.replace(base, tpot_slo_s=tpot_slo, ttft_slo_s=ttft_slo)
    sp = StrategySpace.build(m, cl)
    grid = CostModel(m, cl, wl, space=dataclasses.replace(
        sp, batch_values=batch_grid(sp.dp_values, 7), any_batch=True))
    every = CostModel(m, cl, wl, space=dataclasses.replace(
        sp, batch_values=tuple(range(1, 129)), any_batch=False))
    want = ExactSearcher().search(every, None, 0)
    assert want.best_objective > 0
    sol, space = solve_any_batch(grid)
    assert sol.best_objective == pytest.approx(want.best_objective, rel=1e-9)
    assert space.decode(sol.best_action).batch not in grid.space.batch_values
