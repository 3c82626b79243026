"""``l2s compare``'s run store: which output folders it refuses, and how it says so."""

from __future__ import annotations

import json

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
    r2 = CliRunner().invoke(app, ["compare", "-m", "llama-3.1-8b", "-c", "h100-sxm:2",
                                  "--phase", "serve", "--isl", "512", "--osl", "128",
                                  "--tpot-slo", "1ms", "--methods", "megatron", "--budget",
                                  "30", "--seeds", "1", "--out", str(tmp_path / "c2"),
                                  "--report", str(tmp_path / "rep")])
    assert r2.exit_code == 1, r2.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "No method found a feasible strategy: closest candidate tp" in md
