"""``l2s compare``'s run store: which output folders it refuses, and how it says so."""

from __future__ import annotations

import json

import numpy as np
import pytest

from learn_to_shard.errors import PlannerError
from learn_to_shard.report.compare import RUN_FORMAT, RunStore


def test_out_of_another_problem_is_named_as_such(tmp_path):
    """Without --resume, a folder holding runs of another problem is refused as that (not with
    a hint to resume it)."""
    a = RunStore(tmp_path, {"model": "a"})
    a.runs_dir.mkdir(parents=True)
    a.path("random", 0).write_text(json.dumps({"format": RUN_FORMAT,
                                               "fingerprint": {"model": "a"}, "result": {}}))
    with pytest.raises(PlannerError, match="add --resume"):
        a.check(resume=False)
    with pytest.raises(PlannerError, match="another problem; choose another --out"):
        RunStore(tmp_path, {"model": "b"}).check(resume=False)


def test_an_infeasible_comparison_says_why_and_counts_a_single_run_once(tmp_path):
    """Every method infeasible (TPOT SLO 1 ms): stderr names the closest candidate and the
    rule it breaks, as ``l2s plan`` does, and megatron's one run is not "2 of 2 runs"."""
    from typer.testing import CliRunner

    from learn_to_shard.cli import app
    r = CliRunner().invoke(app, ["compare", "-m", "llama-3.1-8b", "-c", "h100-sxm:2",
                                 "--phase", "serve", "--isl", "512", "--osl", "128",
                                 "--tpot-slo", "1ms", "--methods", "random,megatron",
                                 "--budget", "30", "--seeds", "2", "--out", str(tmp_path / "c")])
    assert r.exit_code == 1, r.output
    assert "megatron: its one run found no feasible strategy" in r.output
    assert "random: 2 of 2 runs found no feasible strategy" in r.output
    assert "no feasible strategy: closest candidate tp" in r.output and "TPOT" in r.output
    # The same reasons in compare.json and in the --report.
    data = json.loads((tmp_path / "c" / "compare.json").read_text())
    assert data["infeasible_reasons"][0].startswith("closest candidate tp")
    # the JSON lists the seed-independent method's one run once, as the table counts it
    meg, rnd = data["methods"]["megatron"], data["methods"]["random"]
    assert meg["seed_independent"] and len(meg["runs"]) == 1
    assert not rnd["seed_independent"] and len(rnd["runs"]) == 2
    r2 = CliRunner().invoke(app, ["compare", "-m", "llama-3.1-8b", "-c", "h100-sxm:2",
                                  "--phase", "serve", "--isl", "512", "--osl", "128",
                                  "--tpot-slo", "1ms", "--methods", "megatron", "--budget",
                                  "30", "--seeds", "1", "--out", str(tmp_path / "c2"),
                                  "--report", str(tmp_path / "rep")])
    assert r2.exit_code == 1, r2.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "No method found a feasible strategy: closest candidate tp" in md


def test_compare_with_an_engine_searches_what_the_engine_launches(tmp_path):
    """``compare --engine`` restricts the space as ``plan --engine`` does: the exact run's
    optimum is the engine's plan (the ratios against it compare launchable layouts), and
    every run's best breaks no rule of the engine's space (before, the optimum was a
    per-operator layout SGLang does not run, 33% above its plan on DeepSeek-V3)."""
    from typer.testing import CliRunner

    from learn_to_shard.api import make_cost_model, make_workload
    from learn_to_shard.cli import app

    problem = ["-m", "qwen3-30b-a3b", "-c", "h100-sxm:4", "--phase", "serve", "--isl", "2000",
               "--osl", "500", "--tpot-slo", "50ms", "--engine", "sglang"]
    r = CliRunner().invoke(app, ["compare", *problem, "--methods", "exact,random,sa",
                                 "--budget", "300", "--seeds", "1", "--out",
                                 str(tmp_path / "c"), "-q", "--json", "--no-timing"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout[:r.stdout.rindex("}") + 1])
    plan = json.loads(CliRunner().invoke(app, ["plan", *problem, "--json",
                                               "--no-timing"]).stdout)
    assert data["optimum_tokens_per_s_per_device"] == pytest.approx(
        plan["best"]["tokens_per_s_per_device"], rel=1e-9)
    cm = make_cost_model("qwen3-30b-a3b", "h100-sxm:4",
                         make_workload("serve", isl=2000, osl=500, tpot_slo_s=0.05),
                         engine="sglang")
    for method in data["methods"].values():
        for run in method["runs"]:
            if run["best_action"] is not None:
                action = np.asarray(run["best_action"])
                assert cm.space.violations(action) == (), run


def test_resume_names_a_fingerprint_field_an_earlier_l2s_did_not_write(tmp_path):
    """A run stored by an earlier l2s lacks a field the fingerprint has now (``space_engine``):
    --resume refuses it naming that field, in the singular."""
    store = RunStore(tmp_path, {"model": "a", "space_engine": None})
    store.runs_dir.mkdir(parents=True)
    store.path("random", 0).write_text(json.dumps({"format": RUN_FORMAT,
                                                   "fingerprint": {"model": "a"},
                                                   "result": {}}))
    with pytest.raises(PlannerError, match=r"\(space_engine differs\)"):
        store.check(resume=True)


def test_resume_refuses_a_run_file_under_another_runs_name(tmp_path):
    """A run file copied onto another seed's name (sa-seed0 as sa-seed1) was read as that
    seed, so the mean counted one run twice: --resume refuses it, naming what it holds."""
    from typer.testing import CliRunner

    from learn_to_shard.cli import app

    args = ["compare", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--phase",
            "serve", "--isl", "512", "--osl", "128", "--methods", "sa", "--seeds", "2",
            "--budget", "100", "--out", str(tmp_path / "c"), "-q"]
    assert CliRunner().invoke(app, args).exit_code == 0
    runs = tmp_path / "c" / "runs"
    (runs / "sa-seed1.json").write_text((runs / "sa-seed0.json").read_text())
    r = CliRunner().invoke(app, [*args, "--resume"])
    assert r.exit_code == 2 and "holds the run of sa seed 0, not sa seed 1" in r.output, \
        r.output
