"""The exact solver's shortcuts give the numbers of the paths they replace.

* ``exact_tables.feature_floor`` (the floors computed column by column from the tables) equals
  the per-group minimum over the allowed options of ``build_parts``' full arrays — the
  definition of the floor — element for element, on a dense and an MoE model with shared
  experts, with and without an engine's layout rule and the serve phase's TTFT step.
* ``exact.SettingCache``: a solve that finds every setting in the cache builds no table rows
  and returns the same solution as a fresh solve.
* ``exact_tables.needed_options``: with an engine, only the layouts it launches are priced;
  the certified optimum and its runners-up are those of a solve that prices every layout, on
  far fewer table rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from learn_to_shard.api import cost_config, make_cost_model, make_workload
from learn_to_shard.parallel.ops import NUM_CHOICES, REPLICATED
from learn_to_shard.parallel.space import ACTION_LEN, ENGINE_LAYOUT_BIT, NUM_COARSE
from learn_to_shard.search import exact_tables
from learn_to_shard.search.exact import SettingCache, coarse_grid, solve
from learn_to_shard.search.exact_tables import (
    HUB_A,
    Parts,
    Structure,
    build_parts,
    coarse_terms,
    feature_floor,
    mem_tables,
    needs_step2,
    step_tables,
)


def _floor_from_parts(pa: Parts) -> np.ndarray:
    """``[K, 3, F]``: the floor by its definition, from the full per-candidate arrays."""
    def floor(part: np.ndarray, ok: np.ndarray) -> np.ndarray:
        return np.where(ok[:, None, :, None], part, np.inf).min(axis=2)

    z = (np.where(pa.hub_ok[:, :, None], pa.hub, np.inf) + floor(pa.emb, pa.emb_ok)
         + floor(pa.dense, pa.dense_ok) + floor(pa.router, pa.router_ok)
         + floor(pa.group, pa.group_ok))
    z = z + np.where(pa.lm_ok[:, None, :, None], pa.lm, np.inf).min(axis=(1, 2))[:, None, :]
    return np.stack([z[:, HUB_A == a].min(axis=1) for a in range(NUM_CHOICES)], axis=1)


def _keys(cm, n: int, seed: int = 0):
    """``n`` random structurally valid settings of ``cm``'s exact degree grid."""
    coarse = coarse_grid(cm.space)
    full = np.full((len(coarse), ACTION_LEN), REPLICATED, dtype=np.int64)
    full[:, :NUM_COARSE] = coarse
    valid = (cm.space.rule_bits_many(full) & ~ENGINE_LAYOUT_BIT) == 0
    _, keys = coarse_terms(cm, coarse[valid])
    rng = np.random.default_rng(seed)
    return keys.take(np.sort(rng.choice(len(keys), min(n, len(keys)), replace=False)))


@pytest.mark.parametrize("model, cluster, engine, wl", [
    ("deepseek-v2-lite", "h100-sxm:8", None, dict(phase="serve", isl=1024, osl=256)),
    ("deepseek-v2-lite", "h100-sxm:8", "sglang",
     dict(phase="serve", isl=1024, osl=256, ttft_slo_s=2.0)),
    ("llama-3.1-8b", "h100-sxm:8", "vllm", dict(phase="decode", context=2048)),
    ("qwen3-30b-a3b", "h100-sxm:16", "trtllm", dict(phase="prefill", isl=2048)),
])
def test_feature_floor_equals_the_minimum_over_build_parts(model, cluster, engine, wl):
    cm = make_cost_model(model, cluster, make_workload(**wl), cost_config(engine),
                         engine=engine)
    st = Structure.of(cm)
    keys = _keys(cm, 40)
    mt = mem_tables(cm, st, keys)
    tabs = [step_tables(cm, st, keys)]
    if needs_step2(cm):
        tabs.append(step_tables(cm, st, keys, second=True))
    want = _floor_from_parts(build_parts(st, mt, tabs))
    got = feature_floor(st, mt, tabs)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert np.isfinite(got).any()               # not vacuous: some attention choice allowed


def test_a_fully_cached_solve_builds_no_tables_and_agrees():
    cm = make_cost_model("deepseek-v2-lite", "h100-sxm:8",
                         make_workload("serve", isl=1024, osl=256))
    cache = SettingCache()
    first = solve(cm, verify_samples=0, setting_cache=cache)
    assert first.certificate.table_rows > 0 and cache.floors and cache.cands
    again = solve(cm, verify_samples=0, setting_cache=cache)
    fresh = solve(cm, verify_samples=0)
    assert again.certificate.table_rows == 0
    for sol in (again, fresh):
        assert sol.best_objective == first.best_objective
        assert len(sol.top) == len(first.top)
        for a, b in zip(sol.top, first.top, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("model, engine", [("deepseek-v2-lite", "sglang"),
                                           ("qwen3-30b-a3b", "vllm"),
                                           ("llama-3.1-8b", "trtllm")])
def test_an_engine_prices_only_its_layouts_and_finds_the_same_optimum(model, engine,
                                                                       monkeypatch):
    cm = make_cost_model(model, "h100-sxm:8",
                         make_workload("serve", isl=1024, osl=256, ttft_slo_s=2.0),
                         cost_config(engine), engine=engine)
    st = Structure.of(cm)
    need = exact_tables.needed_options(st)
    assert need["qa"].sum() < NUM_CHOICES ** 2                # not vacuous: rows are skipped
    fast = solve(cm, verify_samples=64)
    every = {"qa": np.ones((NUM_CHOICES, NUM_CHOICES), dtype=bool),
             "router": np.arange(len(st.r_opts)), "group": np.arange(len(st.g_opts)),
             "dense": np.arange(len(st.d_opts))}
    monkeypatch.setattr(exact_tables, "needed_options", lambda st_: every)
    full = solve(cm, verify_samples=64)
    assert fast.best_objective > 0
    assert fast.best_objective == full.best_objective
    assert len(fast.top) == len(full.top)
    for a, b in zip(fast.top, full.top, strict=True):
        np.testing.assert_array_equal(a, b)
    assert fast.certificate.table_rows < full.certificate.table_rows / 2
