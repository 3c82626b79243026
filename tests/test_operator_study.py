"""scripts/operator_study.py on two small scenarios: the orderings the restrictions imply,
the CSV columns, the mechanism columns, and that new coarse heads are read generically."""

from __future__ import annotations

import csv
import dataclasses
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import operator_study as st  # noqa: E402

from learn_to_shard.engines import ENGINES  # noqa: E402
from learn_to_shard.parallel.ops import MEGATRON_DIMS  # noqa: E402
from learn_to_shard.parallel.space import StrategySpace  # noqa: E402
from learn_to_shard.parallel.strategy import Strategy  # noqa: E402

#: A dense prefill at a tight TTFT (one prompt split inside TP wins there) and a small MoE
#: decode.
TINY = (
    st.Scenario("dense", "llama-3.1-8b", "h100-sxm:8", "prefill", isl=4096, ttft_slo_s=0.030,
                slo="tight"),
    st.Scenario("moe", "mixtral-8x7b", "h100-sxm:8", "decode", context=4096),
)


@pytest.fixture(scope="module")
def studied() -> list[tuple[st.Scenario, dict[str, st.Run], dict[str, object]]]:
    """Each tiny scenario's runs (searched once) and its CSV row."""
    out = []
    for sc in TINY:
        m, c, wl = st.problem(sc)
        cms = st.cost_models(m, c, wl)
        runs = st.search_all(cms)
        out.append((sc, runs, st.study_row(sc, m, wl, cms, runs)))
    return out


def test_restricted_spaces_never_beat_the_optimum(studied):
    """Every restriction is a subset of the full space, so optimum ÷ it is ≥ 1; the
    `megatron` searcher's grid batches are a subset of the Megatron layout's integers."""
    for sc, runs, row in studied:
        opt = runs["optimum"].objective
        assert opt > 0, sc.key
        for name in st.RUNS[1:]:
            assert runs[name].objective <= opt * (1 + 1e-12), (sc.key, name)
            assert float(row[f"opt_over_{name}"]) >= 1 - 1e-12, (sc.key, name)
        assert runs["megatron"].objective <= runs["megatron_layout"].objective * (1 + 1e-12)
        assert row["opt_over_best_engine"] == min(row[f"opt_over_{e}"] for e in ENGINES)
        assert not st.problems([row])


def test_ratios_are_the_objectives_divided(studied):
    """The row's ratios are the runs' objectives divided (the CSV restates nothing else)."""
    for _, runs, row in studied:
        for name in st.RUNS[1:]:
            want = st.ratio(runs["optimum"].objective, runs[name].objective)
            assert math.isclose(float(row[f"opt_over_{name}"]), want, rel_tol=1e-12)


def test_restricted_runs_stay_in_their_spaces(studied):
    """The Megatron-layout best uses Megatron's choice on every operator that is split; each
    engine's best breaks none of that engine's rules."""
    for sc, runs, _ in studied:
        m, c, _ = st.problem(sc)
        s = runs["megatron_layout"].strategy
        assert s is not None and st.differing_ops(m, s) == []
        for name, eng in ENGINES.items():
            s = runs[name].strategy
            assert s is not None
            assert StrategySpace.build(m, c, engine=eng).with_batches([s.batch]) \
                .violations(s) == (), (sc.key, name)


def test_mechanism_columns_are_consistent(studied):
    """Each operator whose choice differs from Megatron's gets one ablation entry; Megatron's
    dims at the optimum's degrees are in both the full and the Megatron-layout space, so
    optimum ÷ them is ≥ 1 and ≥ optimum ÷ the best Megatron layout."""
    for sc, runs, row in studied:
        opt = runs["optimum"].strategy
        m, _, _ = st.problem(sc)
        assert opt is not None
        ops = st.differing_ops(m, opt)
        entries = [e for e in str(row["ablation"]).split("; ") if e]
        assert [e.split(" ")[0] for e in entries] == [st.OP_NAMES[i] for i in ops]
        assert float(row["same_degrees_ratio"]) >= 1 - 1e-12
        assert float(row["opt_over_megatron_layout"]) <= float(row["same_degrees_ratio"]) \
            * (1 + 1e-12)


def test_csv_has_every_column(studied, tmp_path):
    """The CSV's header is :data:`COLUMNS` and each row's cells parse back."""
    path = tmp_path / "study.csv"
    st.write_csv([row for _, _, row in studied], path)
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(st.COLUMNS)
    assert [r["scenario"] for r in rows] == [sc.key for sc in TINY]
    for r in rows:
        for name in st.RUNS[1:]:
            assert float(r[f"opt_over_{name}"]) >= 1 - 1e-6
    dist = st.distribution([row for _, _, row in studied])
    assert all(d.n == len(TINY) and d.within_tie + d.above_win <= d.n for d in dist)


def test_coarse_fields_pick_up_new_heads():
    """A strategy with one more coarse field (a context-parallel degree, say) has it
    compared without a change to the study."""

    @dataclasses.dataclass(frozen=True, slots=True)
    class WithCp(Strategy):
        cp: int = 1

    a = WithCp(tp=4, ep=1, pp=1, dp=1, batch=2, dims=MEGATRON_DIMS, cp=2)
    b = WithCp(tp=8, ep=1, pp=1, dp=1, batch=2, dims=MEGATRON_DIMS, cp=1)
    assert st.coarse_diff(a, b) == "tp 8→4; cp 1→2"
    assert "cp" in st.coarse_fields(a)


def test_write_docs_replaces_only_the_block(tmp_path):
    """The generated block replaces the one between the markers; the text around stays."""
    doc = tmp_path / "results.md"
    doc.write_text(f"# R\n\nbefore\n\n{st.BEGIN}\nold\n{st.END}\n\nafter\n")
    st.write_docs(f"{st.BEGIN}\nnew\n{st.END}", doc)
    text = doc.read_text()
    assert "old" not in text and "new" in text
    assert text.startswith("# R\n\nbefore\n\n") and text.endswith("\n\nafter\n")


def test_run_scenario_is_search_then_row():
    """``run_scenario`` (what the script runs) gives the row built from the runs."""
    sc = st.Scenario("tiny", "llama-3.1-8b", "h100-sxm:8", "prefill", isl=1024,
                     ttft_slo_s=0.050)
    m, c, wl = st.problem(sc)
    cms = st.cost_models(m, c, wl)
    assert st.run_scenario(sc) == st.study_row(sc, m, wl, cms, st.search_all(cms))


def test_scenarios_cover_the_brief():
    """≥ 40 scenarios, unique keys, dense and MoE, 8–256 devices, every phase, tight and
    loose SLOs, a 1M-token context, 6 quick ones."""
    keys = [s.key for s in st.SCENARIOS]
    assert len(keys) >= 40 and len(set(keys)) == len(keys)
    assert {s.phase for s in st.SCENARIOS} == {"decode", "prefill", "serve"}
    assert {"tight", "loose", "none"} <= {s.slo for s in st.SCENARIOS}
    assert min(s.devices for s in st.SCENARIOS) == 8
    assert max(s.devices for s in st.SCENARIOS) == 256
    assert max(s.context or s.isl or 0 for s in st.SCENARIOS) == 1 << 20
    assert sum(s.quick for s in st.SCENARIOS) == 6


def test_strategies_print_absent_operators_as_absent(studied):
    """Every run's strategy string shows the operators a dense model lacks as ∅ (the
    ``megatron`` searcher keeps Megatron's dims there; the CSV printed them as expert
    placements of a dense model)."""
    sc, runs, row = studied[0]
    assert sc.model == "llama-3.1-8b"
    for name in st.RUNS:
        strategy = str(row[f"{name}_strategy"])
        dims = strategy[strategy.index("[") + 1:strategy.index("]")]
        assert dims[6:11] == "∅∅∅∅∅", (name, strategy)
