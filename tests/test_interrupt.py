"""Ctrl-C keeps what finished, and the same inputs give the same bytes (issue 10, items 3, 6).

``compare`` and ``plan`` are interrupted with a real SIGINT in a subprocess; the searchers
themselves (the SB3 learning loop of ``rl`` included) are interrupted in-process by a progress
callback that raises ``KeyboardInterrupt``, which is what Python's SIGINT handler does at the
next bytecode boundary.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from learn_to_shard.api import make_cost_model, make_workload
from learn_to_shard.cli import app
from learn_to_shard.search import get_searcher
from learn_to_shard.search.base import SearchInterrupted, interruptible

PROBLEM = ["--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "4096"]
# sa is the slow one (one evaluation per step); megatron is seed-independent (run once).
COMPARE = ["compare", *PROBLEM, "--methods", "sa,random,megatron", "--seeds", "3",
           "--budget", "80", "--quiet", "--no-timing"]
#: Runs a (method, seed) comparison of COMPARE holds.
RUN_FILES = {"sa-seed0.json", "sa-seed1.json", "sa-seed2.json", "random-seed0.json",
             "random-seed1.json", "random-seed2.json", "megatron-seed0.json"}
# Runs the CLI in a subprocess, telling the test on stderr when the imports are done
# ("ready") and when a search has spent SEARCHING evaluations ("searching"), so the SIGINT
# lands where the test means it to, however loaded the machine. The child takes SIGINT as
# a command started from a terminal does (Python's KeyboardInterrupt): a parent that ignores
# SIGINT, as a non-interactive shell does for the commands it starts with &, would pass the
# ignoring down and the test's Ctrl-C would never land.
SEARCHING = 50
WRAP = f"""
import signal
import sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from learn_to_shard.cli import app
from learn_to_shard.search import base, searcher_names
searcher_names()
sys.stderr.write("ready\\n"); sys.stderr.flush()
_record = base.BudgetedEvaluator._record
def _announce(self, a, est):
    _record(self, a, est)
    if self.evaluations >= {SEARCHING} and not getattr(self, "_told", False):
        self._told = True
        sys.stderr.write("searching\\n"); sys.stderr.flush()
base.BudgetedEvaluator._record = _announce
app(prog_name="l2s")
"""


def _l2s(args: list[str], hashseed: int = 0, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONHASHSEED": str(hashseed)}
    return subprocess.Popen([sys.executable, "-c", WRAP, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **kw)


def _wait_ready(p: subprocess.Popen) -> None:
    assert p.stderr is not None
    line = p.stderr.readline()
    assert line.strip() == "ready", line


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[bytes, bytes]:
    """``compare --json --no-timing`` run through once, in its own process: (stdout,
    compare.json) bytes."""
    out = tmp_path_factory.mktemp("whole")
    p = _l2s([*COMPARE, "--json", "--out", str(out)], hashseed=2)
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 0, stderr
    return stdout.encode(), (out / "compare.json").read_bytes()


def test_sigint_during_compare_then_resume_gives_the_uninterrupted_result(tmp_path,
                                                                           uninterrupted):
    out = tmp_path / "cmp"
    p = _l2s([*COMPARE, "--out", str(out)], hashseed=1)
    _wait_ready(p)
    first = out / "runs" / "sa-seed0.json"
    deadline = time.monotonic() + 120
    while not first.exists():
        assert p.poll() is None and time.monotonic() < deadline, "no run finished"
        time.sleep(0.005)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 130, stderr
    # The partial table: the finished sa run(s), not the rest.
    rows = [line.split("│")[1].strip() for line in stdout.splitlines()
            if line.startswith("│")]
    assert rows and all(r.startswith("sa (") and r.endswith(" of 3 runs)") for r in rows), stdout
    assert "interrupted (Ctrl-C)" in stderr and "Traceback" not in stderr
    # Only whole run files, no compare.json of a partial comparison.
    before = {f.name: f.stat().st_mtime_ns for f in (out / "runs").iterdir()}
    assert set(before) <= RUN_FILES and "sa-seed0.json" in before
    assert len(before) < len(RUN_FILES)
    assert not (out / "compare.json").exists()
    # The printed continuation command resumes it.
    again = shlex.split(stderr.split("Continue with: ")[1].strip())
    assert again[0] == "l2s" and again[-1] == "--resume"
    r = CliRunner().invoke(app, [*again[1:], "--json"])
    assert r.exit_code == 0, r.output
    # No finished run was run again (its file is untouched), none is missing.
    after = {f.name: f.stat().st_mtime_ns for f in (out / "runs").iterdir()}
    assert set(after) == RUN_FILES
    assert all(after[k] == v for k, v in before.items())
    # Byte for byte the uninterrupted result (another process, another hash seed).
    whole_stdout, whole_file = uninterrupted
    assert (out / "compare.json").read_bytes() == whole_file
    assert r.stdout_bytes == whole_stdout


def _keys(v: object) -> set[str]:
    if isinstance(v, dict):
        return set(v).union(*(_keys(x) for x in v.values()))
    if isinstance(v, list):
        return set().union(*(_keys(x) for x in v))
    return set()


def test_compare_json_byte_identical_across_runs(tmp_path, uninterrupted):
    """A second run (another process, timing on): every wall-clock value is under "timing",
    the last key, and the rest is byte for byte the first run's ``--no-timing`` output."""
    r = CliRunner().invoke(app, [*COMPARE[:-1], "--json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    timed = json.loads(r.stdout)
    assert list(timed)[-1] == "timing"
    clock = timed.pop("timing")
    assert clock["methods"]["sa"]["runs"][0]["wall_s"] >= 0 and clock["wall_s"] > 0
    assert (json.dumps(timed, indent=2) + "\n").encode() == uninterrupted[0]
    assert timed["interrupted"] is False and timed["missing_runs"] == []
    assert not any("wall" in k for k in _keys(timed))


def test_resume_refuses_another_problem_and_fresh_run_refuses_old_runs(tmp_path):
    runs = tmp_path / "runs"
    small = ["compare", *PROBLEM, "--methods", "random", "--seeds", "1", "--budget", "50",
             "--quiet", "--out", str(tmp_path)]
    assert CliRunner().invoke(app, small).exit_code == 0
    assert [f.name for f in runs.iterdir()] == ["random-seed0.json"]
    r = CliRunner().invoke(app, small)               # would mix old and new runs
    assert r.exit_code == 2 and "--resume" in r.output and "Traceback" not in r.output
    other = [a if a != "50" else "60" for a in small]
    r = CliRunner().invoke(app, [*other, "--resume"])
    assert r.exit_code == 2 and "different problem" in r.output and "budget" in r.output
    assert len(r.output.strip().splitlines()) == 1
    other = [a if a != "4096" else "2048" for a in small]
    r = CliRunner().invoke(app, [*other, "--resume"])
    assert r.exit_code == 2 and "workload" in r.output
    (runs / "random-seed0.json").write_text("{not json")
    r = CliRunner().invoke(app, [*small, "--resume"])
    assert r.exit_code == 2 and "random-seed0.json" in r.output


def test_sigint_during_budgeted_plan_prints_best_so_far(tmp_path):
    budget = 10**6        # far more than the search spends before the SIGINT
    p = _l2s(["plan", *PROBLEM, "--method", "sa", "--budget", str(budget), "--json",
              "--no-timing"])
    _wait_ready(p)
    assert p.stderr is not None and p.stderr.readline().strip() == "searching"
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 130, stderr
    plan = json.loads(stdout)
    assert plan["search"]["interrupted"] is True
    assert SEARCHING <= plan["search"]["evaluations"] < budget
    assert plan["feasible"] and plan["best"]["tokens_per_s_per_device"] > 0
    assert "interrupted after" in stderr and "best found so far" in stderr
    assert "Traceback" not in stderr


def test_plan_json_byte_identical_across_processes():
    """Same inputs and seed, in another process with another hash seed: the same bytes."""
    args = ["plan", *PROBLEM, "--method", "mcmc", "--budget", "150", "--json", "--no-timing"]
    p = _l2s(args, hashseed=1)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0, stderr
    here = CliRunner().invoke(app, args)
    assert here.exit_code == 0, here.output
    assert here.stdout_bytes == stdout.encode()
    assert "timing" not in json.loads(stdout)


@pytest.mark.parametrize("method", ["exact", "auto", "sa"])
def test_plan_timing_is_one_key(method):
    r = CliRunner().invoke(app, ["plan", *PROBLEM, "--method", method, "--budget", "100",
                                 "--json", "-q"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    timing = data.pop("timing")
    assert list(timing)[0] == "wall_s" and all(k.endswith("wall_s") for k in timing)
    assert not any(k.endswith("wall_s") for k in data["search"])
    r2 = CliRunner().invoke(app, ["plan", *PROBLEM, "--method", method, "--budget", "100",
                                  "--json", "-q", "--no-timing"])
    assert json.loads(r2.stdout) == data


class _StopAt:
    """Progress callback raising KeyboardInterrupt (as a SIGINT does) once ``n`` evaluations
    are spent."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0

    def __call__(self, k: int) -> None:
        self.seen += k
        if self.seen >= self.n:
            raise KeyboardInterrupt


@pytest.mark.parametrize("method,budget,stop", [("random", 1200, 500), ("sa", 300, 100),
                                                ("mcmc", 300, 100), ("rl", 100, 40)])
def test_interrupted_search_returns_best_of_what_it_evaluated(method, budget, stop):
    """Every budgeted searcher, rl's SB3 learning loop included: the frozen result is the
    best of exactly the evaluations made, a prefix of the uninterrupted run's."""
    import torch

    cm = make_cost_model("llama-3.1-8b", "h100-sxm:8", make_workload("decode", context=4096))
    threads = torch.get_num_threads()
    cb = _StopAt(stop)
    with pytest.raises(SearchInterrupted) as info, interruptible(method, 3, budget):
        get_searcher(method).search(cm, budget, 3, cb)
    res = info.value.result
    assert res.interrupted and res.method == method and res.seed == 3
    assert res.evaluations == cb.seen and stop <= res.evaluations < budget
    assert len(res.curve) == res.evaluations
    assert res.best_objective == res.curve[-1] > 0 and res.best_action is not None
    assert torch.get_num_threads() == threads            # rl restores its thread count
    whole = get_searcher(method).search(cm, budget, 3)
    np.testing.assert_array_equal(res.curve, whole.curve[:res.evaluations])
    assert cm.evaluate(res.best_action).tokens_per_s_per_device == pytest.approx(
        res.best_objective, rel=1e-12)


def test_interrupt_before_any_evaluation_is_an_empty_result():
    with pytest.raises(SearchInterrupted) as info, interruptible("sa", 0, 10):
        raise KeyboardInterrupt
    res = info.value.result
    assert res.interrupted and res.evaluations == 0 and res.best_action is None
    assert isinstance(info.value, KeyboardInterrupt)


def test_no_stray_files_after_resume(tmp_path):
    """Run files are written whole (temporary file, then rename): none is left behind."""
    r = CliRunner().invoke(app, ["compare", *PROBLEM, "--methods", "random", "--seeds", "2",
                                 "--budget", "40", "--quiet", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert sorted(f.name for f in Path(tmp_path, "runs").iterdir()) == [
        "random-seed0.json", "random-seed1.json"]


@pytest.mark.parametrize("stage, target", [("the simulation", "simulate_plan"),
                                           ("the engine table", "_engine_optima")])
def test_ctrl_c_after_the_search_prints_the_plan_and_says_what_was_cut(monkeypatch, stage,
                                                                       target):
    """A Ctrl-C that lands after the search (in the engine table or the load simulation)
    keeps the plan found: it is printed (terminal and --json), one line says what the
    interrupt left out, exit 130 (typer turned it into a silent exit 130 with nothing
    printed)."""
    import learn_to_shard.cli as cli

    def stop(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, target, stop)
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:2", "--phase", "serve",
            "--isl", "1024", "--osl", "256", "--concurrency", "8", "-q"]
    r = CliRunner().invoke(app, base)
    assert r.exit_code == 130, r.output
    assert "Best strategy" in r.stdout and "Simulated serving" not in r.stdout
    assert f"interrupted during {stage}" in r.output
    assert "the plan is the search's complete answer" in r.output
    doc = json.loads(CliRunner().invoke(app, [*base, "--json", "--no-timing"]).stdout)
    said = stage if stage == "the simulation" else "the engine table and the simulation"
    assert doc["feasible"] and doc["interrupted_during"] == said
    assert "simulation" not in doc


def test_ctrl_c_during_size_marks_the_partial_answer(monkeypatch, tmp_path):
    """``l2s size`` interrupted prints the answer of the cluster searches that finished
    under a line saying so, and a line telling how to resume, exit 130 (it printed a
    complete-looking answer and exited 130 silently)."""
    import learn_to_shard.sweep.runner as runner

    real = runner.execute

    def some_then_stop(fn, todo, **kw):
        real(fn, todo[:2], **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "execute", some_then_stop)
    r = CliRunner().invoke(app, ["size", "--model", "llama-3.1-8b", "--rate", "2", "--isl",
                                 "1024", "--osl", "256", "--devices", "h100-sxm,h200",
                                 "--max-devices", "4", "--out", str(tmp_path / "s"), "-j",
                                 "1", "-q"])
    assert r.exit_code == 130, r.output
    # clusters of 1, 2, 3 and 4 devices of two kinds
    assert "INTERRUPTED (Ctrl-C): 2 of 8 cluster searches finished" in r.stdout
    assert "fewest devices among the searches finished:" in r.stdout
    assert "interrupted: 6 cluster searches not run; run the same command again" in r.output


def test_main_says_interrupted_where_no_command_did(monkeypatch, capsys):
    """typer turns a KeyboardInterrupt no command caught into exit 130 with nothing printed:
    the console entry point then prints ``interrupted``; where a command said what the
    interrupt left, nothing is added."""
    import learn_to_shard.cli as cli

    monkeypatch.setattr(cli, "app", lambda standalone_mode: 130)
    monkeypatch.setattr(cli, "_INTERRUPT_SAID", [False])
    with pytest.raises(SystemExit) as stop:
        cli.main()
    assert stop.value.code == 130 and capsys.readouterr().err.strip() == "interrupted"
    monkeypatch.setattr(cli, "_INTERRUPT_SAID", [True])
    with pytest.raises(SystemExit) as stop:
        cli.main()
    assert stop.value.code == 130 and capsys.readouterr().err == ""
