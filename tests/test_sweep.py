"""Fleet sweeps: the grid schema, local and Ray runs giving the same rows, resume after a kill,
failing cells, and the fleet-sizing formula."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from conftest import granite_folder
from typer.testing import CliRunner

from learn_to_shard.cli import app
from learn_to_shard.errors import ConfigError
from learn_to_shard.sweep import expand, grid_from_data, load_grid, run_sweep, size_fleets
from learn_to_shard.sweep.cells import COLUMNS, run_cell
from learn_to_shard.sweep.grid import Cell
from learn_to_shard.sweep.sizing import fleet_for
from learn_to_shard.sweep.store import JOURNAL, read_journal, read_parquet

ROOT = Path(__file__).resolve().parents[1]

#: 2 models × 2 clusters × 2 searchers × 2 seeds = 16 cells, each well under a second.
SMALL = {
    "models": ["llama-3.1-8b", "qwen3-30b-a3b"],
    "clusters": ["h100-sxm:4", "h200:8"],
    "workloads": [{"name": "chat", "phase": "serve", "isl": 1024, "osl": 256,
                   "tpot_slo": "50ms", "rate_rps": 20}],
    "searchers": ["random", "sa"],
    "budgets": [100],
    "seeds": [0, 1],
    "prices_per_device_hour": {"h100-sxm": 2.5, "h200": 3.5},
}
#: Columns that measure time, not results.
TIMING = {"wall_s", "search_wall_s"}


def _results(rows: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(r["key"]): {k: v for k, v in r.items() if k not in TIMING} for r in rows}


def _write_grid(folder: Path, data: dict) -> Path:
    path = folder / "grid.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    grid = load_grid(_write_grid(out, SMALL))
    return grid, out, run_sweep(grid, out / "results", workers=2)


def test_local_sweep_writes_one_row_per_cell_and_resumes(local_run):
    grid, out, res = local_run
    cells = expand(grid)
    assert len(cells) == 16 and len({c.key() for c in cells}) == 16
    assert res.skipped == 0 and sorted(res.ran) == sorted(c.key() for c in cells)
    assert [r["key"] for r in res.rows] == [c.key() for c in cells]      # grid order
    assert all(r["error"] is None for r in res.rows)
    feasible = [r for r in res.rows if r["feasible"]]
    assert len(feasible) >= 14                  # a 100-evaluation search may find nothing
    for r in feasible:
        assert r["instance_devices"] == r["tp"] * r["pp"] * r["dp"]
        assert math.isclose(r["instance_requests_per_s"] * 256, r["instance_tokens_per_s"])
        assert r["tpot_s"] <= 0.050
    # Parquet and CSV hold the same rows, every column, in order.
    parquet = read_parquet(res.parquet)
    assert _results(parquet) == _results(res.rows)
    header = res.csv.read_text().splitlines()[0]
    assert header.replace('"', "").split(",") == [n for n, _ in COLUMNS]
    assert len(res.csv.read_text().splitlines()) == 17
    # Seeds matter for random search: not every cell gives the same plan.
    assert len({(r["model"], r["cluster"], r["strategy"]) for r in res.rows}) > 4
    # Running again skips every cell.
    again = run_sweep(grid, out / "results", workers=2)
    assert again.ran == [] and again.skipped == 16
    assert _results(again.rows) == _results(res.rows)


def test_cli_sweep_summary_plots_and_exit_code(local_run, tmp_path):
    _, out, res = local_run
    target = tmp_path / "copy"
    shutil.copytree(out / "results", target)
    r = CliRunner().invoke(app, ["sweep", str(out / "grid.yaml"), "--out", str(target),
                                 "--quiet"])
    assert r.exit_code == 0, r.output
    assert "0 cells run, 16 skipped, 0 failed" in r.output
    assert (target / "tokens_per_device.png").stat().st_size > 0
    assert (target / "cheapest.png").stat().st_size > 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ray_head(monkeypatch):
    """A Ray head on loopback only (dashboard off, small object store), stopped afterwards.

    Ray replaces 127.0.0.1 by the host's routable address unless
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (ray/_private/services.py, get_node_ip_address);
    with it every Ray server listens on 127.0.0.1. ``--block`` keeps the head's processes
    children of one process group, which teardown ends (SIGTERM, the graceful ``ray stop``).
    """
    # Read by Ray when it is imported: set before the import.
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    if "ray" in sys.modules:
        pytest.skip("ray was imported before this test could set it to loopback")
    pytest.importorskip("ray")
    ray_bin = Path(sys.executable).with_name("ray")
    if not ray_bin.exists():
        pytest.skip("the ray command is not installed next to this Python")
    port = _free_port()
    tmp = Path(tempfile.mkdtemp(prefix="l2sray"))        # short: Ray's socket paths are limited
    log = (tmp / "head.log").open("w")
    proc = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
         "--port", str(port), "--include-dashboard=false", "--object-store-memory", "80000000",
         "--num-cpus", "2", "--disable-usage-stats", "--temp-dir", str(tmp / "r")],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 90
        while "Ray runtime started" not in (tmp / "head.log").read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("ray head did not start:\n" + (tmp / "head.log").read_text()[-2000:])
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.terminate()                        # the head stops the processes it started
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def test_ray_sweep_gives_the_local_results(local_run, ray_head, tmp_path):
    grid, _, local = local_run
    res = run_sweep(grid, tmp_path / "ray", ray_address=ray_head)
    assert res.skipped == 0 and len(res.ran) == 16
    assert _results(res.rows) == _results(local.rows)


def test_killed_sweep_resumes_without_running_a_cell_twice(tmp_path):
    # 8 cells of ~0.3 s or more each: the kill after 2 rows lands part-way.
    grid_data = dict(SMALL, models=["qwen3-30b-a3b"])
    path = _write_grid(tmp_path, grid_data)
    out = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "learn_to_shard.cli", "sweep", str(path),
                             "--out", str(out), "--workers", "1", "--quiet", "--no-plots"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    journal = out / JOURNAL
    deadline = time.monotonic() + 120
    while not (journal.exists() and journal.read_text().count("\n") >= 2):
        assert proc.poll() is None, "the sweep ended before it could be killed"
        assert time.monotonic() < deadline, "no rows written"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)                 # the sweep and its worker
    proc.wait()
    before = [r["key"] for r in read_journal(journal)]
    grid = grid_from_data(grid_data, "test")
    keys = [c.key() for c in expand(grid)]
    assert 2 <= len(before) < len(keys), "the kill must land part-way"
    res = run_sweep(grid, out, workers=1)
    assert res.skipped == len(before)
    assert not set(res.ran) & set(before)                # nothing that was done ran again
    lines = journal.read_text().splitlines()
    assert len(lines) == len(keys)                       # every run appends: no second run
    assert sorted(json.loads(line)["key"] for line in lines) == sorted(keys)   # none lost
    assert [r["key"] for r in read_parquet(res.parquet)] == keys


def test_failing_cell_is_recorded_and_the_rest_go_on(tmp_path):
    # a config file gone by the time its cell runs fails that cell alone
    from learn_to_shard.model.hf_config import _shipped_files

    bad = tmp_path / "bad.json"
    bad.write_text(_shipped_files()["llama-3.1-8b"].read_text())
    grid = grid_from_data({"models": ["llama-3.1-8b", str(bad)], "clusters": ["h100-sxm:1"],
                           "workloads": [{"isl": 1024, "osl": 128}],
                           "searchers": ["megatron"]}, "test")
    cells = expand(grid)
    bad.unlink()
    rows = [run_cell(c) for c in cells]
    assert rows[0]["error"] is None and rows[0]["feasible"]
    assert rows[1]["error"].startswith("ConfigError:") and "bad.json" in rows[1]["error"]
    assert rows[1]["isl"] == 1024 and rows[1]["device"] == "h100-sxm"


def test_a_grid_request_beyond_a_models_positions_is_an_infeasible_row():
    """As l2s plan refuses --isl beyond the model's positions, a grid cell whose request is
    longer than its model's context is an infeasible row that says why in the grid's field
    names (it was an error row naming CLI flags); the grid's other pairs run."""
    grid = grid_from_data({"models": ["llama-3.1-8b"], "clusters": ["h100-sxm:1"],
                           "workloads": [{"isl": 1024, "osl": 128},
                                         {"isl": 200_000, "osl": 128}],
                           "searchers": ["megatron"]}, "test")
    ok, long = (run_cell(c) for c in expand(grid))
    assert ok["feasible"] and ok["error"] is None
    assert long["feasible"] is False and long["error"] is None
    assert str(long["reasons"]).startswith("isl + osl: a request of 200128 tokens exceeds "
                                           "llama-3.1-8b's max_position_embeddings 131072")
    assert "--" not in str(long["reasons"])


def test_an_infeasible_rows_slo_hint_names_no_flag():
    """The closest candidate's SLO hint of an infeasible cell names the SLO without l2s
    plan's flag (a grid writes it ``tpot_slo:``), as the case of
    test_plan_output.py::test_an_infeasible_plan_names_the_slos_its_closest_candidate_would_meet
    reads in a sweep row."""
    grid = grid_from_data({"models": ["llama-4-scout"], "clusters": ["h100-sxm:8"],
                           "workloads": [{"phase": "serve", "isl": 8192, "osl": 1024,
                                          "ttft_slo": "2s", "tpot_slo": "40ms",
                                          "concurrency": 128}]}, "test")
    (row,) = (run_cell(c) for c in expand(grid))
    assert row["feasible"] is False and row["error"] is None
    assert "a TPOT SLO of 43 ms would make the closest candidate feasible" in row["reasons"]
    assert "--tpot-slo" not in row["reasons"]


@pytest.mark.parametrize("change, field", [
    ({"workloads": [{"isl": -1, "osl": 8}]}, "workloads[0].isl"),
    ({"workloads": [{"isl": 8, "osl": 8, "tpot_slo": 50}]}, "tpot_slo"),
    ({"workloads": [{"isl": 8, "osl": 8, "tpo_slo": "50ms"}]}, "tpo_slo"),
    ({"workloads": [{"phase": "prefill", "isl": 8, "osl": 8}]}, "--osl"),
    ({"searchers": ["annealing"]}, "searchers"),
    ({"clusters": ["h100-sxm:0"]}, "clusters"),
    ({"clusters": [{"device": "h200", "counts": []}]}, "clusters[0].counts"),
    ({"engines": ["vllm2"]}, "engines[0]"),
    ({"models": ["no-such-model"]}, "models[0]"),
    ({"budgets": [0]}, "budgets[0]"),
    ({"budgets": [100_000_000]}, "budgets[0]"),
    ({"workloads": [{"isl": True, "osl": 8}]}, "workloads[0].isl"),
    ({"workloads": [{"isl": "512", "osl": 8}]}, "workloads[0].isl"),
    ({"workloads": [{"isl": 8, "osl": 8, "rate_rps": float("inf")}]}, "workloads[0].rate_rps"),
    ({"workloads": [{"isl": 8, "osl": 8, "rate_rps": True}]}, "workloads[0].rate_rps"),
    ({"workloads": [{"isl": 8, "osl": 8}, {"phase": "prefill", "isl": 8}],
      "engines": ["vllm", {"name": "sglang", "max_num_batched_tokens": 2048}]},
     "engines[1].max_num_batched_tokens: applies to serve workloads only, and workloads[1] "
     "is prefill"),
    ({"workloads": [{"phase": "decode", "context": 8}],
      "engines": [{"name": "vllm", "max_num_batched_tokens": 64}]},
     "engines[0].max_num_batched_tokens: applies to serve workloads only"),
    ({"prices_per_device_hour": {"h100-sxm": True}}, "prices_per_device_hour"),
    ({"workloads": [{"isl": 8, "osl": 8, "rate_rps": "1_0"}]}, "workloads[0].rate_rps"),
    ({"engines": [{"name": "vllm", "gpu_memory_utilization": True}]},
     "engines[0].gpu_memory_utilization"),
    ({"workloads": [{"isl": 8, "osl": 8, "rate_rps": 100, "concurrency": 4}]},
     "rate_rps and concurrency: give one load"),
    ({"workloads": [{"phase": "decode", "context": 8, "rate_rps": 2}]},
     "rate_rps: phase decode has no request rate"),
    ({"workloads": [{"phase": "decode", "isl": 1024}]},
     "isl: a prompt length (prefill/serve); phase decode takes context"),
    ({"prices_per_device_hour": {"h100-sxm": float("inf")}}, "prices_per_device_hour"),
    ({"prices_per_device_hour": {"nope": 3.0}}, "prices_per_device_hour"),
    ({"foo": 1}, "foo: not a valid key here; valid: models, clusters"),
    ({"engines": [{"name": "vllm", "max_num_batched_tokens": 2048.0}]},
     "engines[0].max_num_batched_tokens"),
    ({"workloads": [{"isl": 8, "osl": 8, "fo": 1}]}, "valid: name, phase, isl"),
    ({"prices_per_device_hour": {"h100": 2.0, "h100-sxm": 3.0}}, "priced twice"),
])
def test_bad_grid_is_one_line_naming_the_field(change, field):
    with pytest.raises(ConfigError) as exc:
        grid_from_data(dict(SMALL, **change), "grid.yaml")
    msg = str(exc.value)
    assert msg.startswith("grid.yaml: ") and field in msg and "\n" not in msg


def test_grid_prices_take_device_aliases():
    grid = grid_from_data(dict(SMALL, prices_per_device_hour={"h100": 2.0}), "grid.yaml")
    assert grid.prices_per_device_hour == {"h100-sxm": 2.0}


def test_cli_refuses_bad_grid_file_with_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [llama-3.1-8b\n")
    r = CliRunner().invoke(app, ["sweep", str(bad), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "not valid YAML" in r.output and "Traceback" not in r.output


def test_cell_key_is_stable_and_ignores_the_label():
    cell = expand(grid_from_data(SMALL, "grid"))[0]
    renamed = cell.model_copy(update={"workload": cell.workload.model_copy(
        update={"name": "other"})})
    assert renamed.key() == cell.key()
    assert Cell.model_validate_json(cell.model_dump_json()).key() == cell.key()
    assert cell.model_copy(update={"seed": 7}).key() != cell.key()


def test_example_grid_loads():
    grid = load_grid(ROOT / "examples" / "sweep-small.yaml")
    assert len(expand(grid)) == 36          # megatron runs once per problem, random per seed


def test_fleet_formula():
    row = {"feasible": True, "instance_requests_per_s": 6.0, "instance_devices": 2,
           "model": "m", "workload": "w", "device": "h100-sxm", "strategy": "tp2",
           "tokens_per_s_per_device": 100.0, "cluster": "h100-sxm:8", "searcher": "sa"}
    f = fleet_for(row, 20.0, node_size=8, price_per_device_hour=2.5)
    assert (f.replicas, f.devices, f.nodes, f.cost_per_hour) == (4, 8, 1, 20.0)
    assert fleet_for(row, 18.0, 8, None).replicas == 3          # exactly 3 × 6 req/s
    assert fleet_for(dict(row, feasible=False), 20.0, 8, None) is None
    # The smaller instance wins when it needs fewer devices.
    small = dict(row, instance_requests_per_s=3.5, instance_devices=1, tokens_per_s_per_device=90.0)
    fleets = size_fleets([row, small], rate_rps=7.0)
    assert [(f.devices, f.instance_devices) for f in fleets] == [(2, 1)]
    # Any rate below one replica's takes one replica (1e-12 once gave 0 devices).
    assert fleet_for(row, 1e-12, 8, None).replicas == 1
    with pytest.raises(ConfigError, match="more than the 1,048,576 devices"):
        fleet_for(row, 1e12, 8, None)
    # an absurd rate's count in scientific notation, not 300 digits
    with pytest.raises(ConfigError, match=r"needs \d\.\d+e\+\d+ × ") as exc:
        fleet_for(row, 1e300, 8, None)
    assert len(str(exc.value)) < 200


def test_cli_size_answers_fewest_devices_and_cost(tmp_path):
    r = CliRunner().invoke(app, [
        "size", "--model", "llama-3.1-8b", "--rate", "30", "--devices", "h100-sxm,h200",
        "--max-devices", "2", "--isl", "1024", "--osl", "256", "--tpot-slo", "50ms",
        "--method", "megatron", "--price", "h100=2.5,h200=3.5", "--workers", "1",
        "--out", str(tmp_path / "size"), "--quiet"])
    assert r.exit_code == 0, r.output                  # h100: the alias of h100-sxm
    assert "lowest cost:" in r.output and "serve 30 req/s" in r.output
    # no --engine: the answer says what it leaves out (layouts and host time of an engine)
    assert "sized without an engine (no --engine)" in r.output
    rows = read_parquet(tmp_path / "size" / "results.parquet")
    assert {(x["device"], x["cluster_devices"]) for x in rows} == {
        ("h100-sxm", 1), ("h100-sxm", 2), ("h200", 1), ("h200", 2)}
    fleets = size_fleets(rows, rate_rps=30.0, prices={"h100-sxm": 2.5, "h200": 3.5})
    best = min(fleets, key=lambda f: f.cost_per_hour)
    assert f"{best.devices} × {best.device}" in r.output
    for f in fleets:
        assert f.replicas * f.instance_requests_per_s >= 30.0
        assert (f.replicas - 1) * f.instance_requests_per_s < 30.0
    with_engine = CliRunner().invoke(app, [
        "size", "--model", "llama-3.1-8b", "--rate", "30", "--devices", "h100-sxm",
        "--max-devices", "1", "--isl", "1024", "--osl", "256", "--tpot-slo", "50ms",
        "--method", "megatron", "--engine", "vllm", "--workers", "1",
        "--out", str(tmp_path / "size-vllm"), "--quiet"])
    assert with_engine.exit_code == 0, with_engine.output
    assert "sized without an engine" not in with_engine.output


def test_cli_size_refuses_decode(tmp_path):
    r = CliRunner().invoke(app, ["size", "--model", "llama-3.1-8b", "--rate", "3", "--phase",
                                 "decode", "--isl", "1024", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "has no request rate" in r.output


def test_grid_and_size_plan_in_the_checkpoint_dtype_as_plan_does():
    """A grid workload without ``dtype`` plans DeepSeek-V3 in its FP8 checkpoint dtype with a
    16-bit KV cache (as ``l2s plan``), and ``l2s size`` answers 8 H200 for it, not the 16 a
    16-bit plan needs; a cell with an engine that exports records its launch script."""
    g = grid_from_data({"models": ["deepseek-v3"], "clusters": [{"device": "h200",
                                                               "counts": [8]}],
                        "workloads": [{"phase": "serve", "isl": 1024, "osl": 256}],
                        "engines": ["vllm"]})
    (cell,) = expand(g)
    row = run_cell(cell)
    assert row["error"] is None and row["feasible"], row
    assert (row["dtype"], row["kv_dtype"]) == ("fp8", "bf16")
    assert str(row["export_command"]).count("vllm serve deepseek-ai/DeepSeek-V3") == 1
    r = CliRunner().invoke(app, ["size", "--model", "deepseek-v3", "--rate", "5", "--isl",
                                 "1024", "--osl", "256", "--tpot-slo", "50ms", "--devices",
                                 "h200", "--max-devices", "16", "-o",
                                 str(Path(tempfile.mkdtemp()) / "s"), "-q"])
    assert r.exit_code == 0, r.output
    # any per-operator layout on 1-8 and 16 H200s: TP7 with the attention replicated fills 7
    assert "fewest devices: 7 × h200" in r.output


def test_size_answers_from_this_run_only_and_says_why_none_fits(tmp_path):
    """``l2s size`` into a folder holding another run's rows (another model and device)
    answers from its own clusters: Llama-3.1-405B on up to 2 RTX 4090s fits nowhere, so it
    exits 1 and says why on the largest cluster, not "fewest devices" from the 8B rows the
    folder keeps."""
    out = str(tmp_path / "size")
    first = CliRunner().invoke(app, [
        "size", "--model", "llama-3.1-8b", "--rate", "5", "--devices", "h100-sxm",
        "--max-devices", "1", "--isl", "1024", "--osl", "256", "--tpot-slo", "50ms",
        "--method", "megatron", "--workers", "1", "--out", out, "--quiet"])
    assert first.exit_code == 0 and "fewest devices: 1 × h100-sxm" in first.output
    alias = CliRunner().invoke(app, [
        "size", "--model", "llama-3.1-405b", "--rate", "5", "--devices", "H100",
        "--max-devices", "1", "--isl", "1024", "--osl", "256", "--tpot-slo", "50ms",
        "--method", "megatron", "--workers", "1", "--out", str(tmp_path / "alias"),
        "--quiet"])
    # the alias typed is searched and shown as the preset's own name
    assert alias.exit_code == 1 and "h100-sxm:1: closest candidate" in alias.output
    assert "H100:1" not in alias.output
    again = CliRunner().invoke(app, [
        "size", "--model", "llama-3.1-405b", "--rate", "5", "--devices", "rtx-4090",
        "--max-devices", "2", "--isl", "1024", "--osl", "256", "--tpot-slo", "50ms",
        "--method", "megatron", "--workers", "1", "--out", out, "--quiet"])
    assert again.exit_code == 1, again.output
    assert "fewest devices" not in again.output
    assert "no plan on rtx-4090 up to 2 devices meets the SLOs" in again.output
    assert "rtx-4090:2:" in again.output and "memory" in again.output
    assert len(read_parquet(tmp_path / "size" / "results.parquet")) == 3   # the folder keeps all


def test_size_whose_best_fleet_misses_the_ttft_slo_under_its_queue_exits_4(tmp_path):
    """Llama-3.1-8B prefilling 8192-token prompts at 40 req/s within a 30 ms TTFT on up to 8
    H100s: the fastest pass (TP8, about 28 ms) leaves under 2 ms for the M/D/1 queue, which
    waits longer even at 4x the replicas. The answer is the closest fleet, said to miss the
    SLO, with exit 4 (as l2s plan's SLO miss under load), not "fewest devices … serve"."""
    r = CliRunner().invoke(app, [
        "size", "--model", "llama-3.1-8b", "--rate", "40", "--phase", "prefill", "--isl",
        "8192", "--ttft-slo", "30ms", "--devices", "h100-sxm", "--max-devices", "8",
        "--workers", "1", "--out", str(tmp_path / "size"), "--quiet"])
    text = " ".join(r.output.split())
    assert r.exit_code == 4, r.output
    assert "fewest devices:" not in text
    assert "no fleet found serves 40 req/s within the SLOs under this load: the closest" \
        in text and "keeps a prefill queue that puts TTFT over the SLO" in text
    assert "over the TTFT SLO even at 4x the replicas" in text


def test_size_prefill_slo_hint_says_the_queue_adds_to_it(tmp_path):
    """Llama-3.1-70B prefilling 8192 tokens within 20 ms fits no H100 cluster up to 8; the
    reason names the TTFT SLO that would admit the closest candidate's pass (331 ms), and,
    as l2s size serves a rate, that the queue adds to it; no flag spelled as a grid field."""
    r = CliRunner().invoke(app, [
        "size", "--model", "llama-3.1-70b", "--rate", "5", "--phase", "prefill", "--isl",
        "8192", "--ttft-slo", "20ms", "--devices", "h100-sxm", "--max-devices", "8",
        "--method", "megatron", "--workers", "1", "--out", str(tmp_path / "size"), "--quiet"])
    text = " ".join(r.output.split())
    assert r.exit_code == 1, r.output
    assert "a TTFT SLO of " in text and " ms would make the closest candidate feasible (its " \
        "pass alone: the queue at --rate adds to the TTFT" in text
    assert "ttft_slo: TTFT" in text and "with ttft_slo:" not in text


def test_sweep_summarises_its_own_grid_in_a_shared_folder(local_run, tmp_path):
    """A second grid run into the first grid's folder prints and plots only its own cells,
    and says how many rows of other cells the result files keep."""
    _, out, res = local_run
    target = tmp_path / "shared"
    shutil.copytree(out / "results", target)
    one = {**SMALL, "models": ["llama-3.1-8b"], "clusters": ["h100-sxm:2"],
           "searchers": ["megatron"], "seeds": [0]}
    r = CliRunner().invoke(app, ["sweep", str(_write_grid(tmp_path, one)), "--out",
                                 str(target), "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert "1 cells run, 0 skipped, 0 failed" in r.output
    assert "they also hold 16 rows of cells not in this grid" in " ".join(r.output.split())
    assert "qwen3-30b-a3b" not in r.output and "h200" not in r.output
    assert len(read_parquet(target / "results.parquet")) == 17


def test_grid_cell_of_an_engine_on_a_device_it_does_not_run_on_is_an_infeasible_row():
    """A grid cell with TensorRT-LLM on AMD GPUs records why it cannot run as an infeasible
    answer (as ``l2s size`` leaves the device out), not an error, and the sweep goes on."""
    g = grid_from_data({"models": ["llama-3.1-8b"], "clusters": ["mi300x:8"],
                        "workloads": [{"phase": "serve", "isl": 1024, "osl": 256}],
                        "engines": ["trtllm"]})
    (cell,) = expand(g)
    row = run_cell(cell)
    assert row["error"] is None and row["feasible"] is False, row
    assert "trtllm runs on NVIDIA GPUs" in str(row["reasons"]), row


def test_cli_sweep_over_engines_exits_0_where_an_engine_cannot_serve_a_device(tmp_path):
    """An engine × device grid meets pairs that cannot run (TensorRT-LLM's FP8 KV cache on an
    A100): those cells are infeasible with the engine's reason, the others run, exit 0."""
    grid = {"models": ["llama-3.1-8b"], "clusters": ["a100-80gb:1"],
            "workloads": [{"phase": "serve", "isl": 1024, "osl": 256, "kv_dtype": "fp8"}],
            "engines": ["vllm", "trtllm"], "searchers": ["megatron"]}
    r = CliRunner().invoke(app, ["sweep", str(_write_grid(tmp_path, grid)), "--out",
                                 str(tmp_path / "out"), "--workers", "1", "--no-plots"])
    assert r.exit_code == 0, r.output
    rows = {row["engine"]: row for row in read_parquet(tmp_path / "out" / "results.parquet")}
    assert rows["vllm"]["feasible"] and rows["vllm"]["error"] is None
    assert rows["trtllm"]["feasible"] is False and rows["trtllm"]["error"] is None
    assert "runs an FP8 KV cache only with FP8 math" in rows["trtllm"]["reasons"]
    assert "infeasible: llama-3.1-8b on a100-80gb:1 (serve-1024/256 kv=fp8, engine trtllm, " \
        "megatron): " in " ".join(r.output.split())


def test_cli_sweep_counts_the_infeasible_cells_it_does_not_name(tmp_path):
    """stderr names the first five infeasible cells and counts the rest (it dropped them)."""
    grid = {"models": ["llama-3.1-8b"], "clusters": ["a100-80gb:1"],
            "workloads": [{"phase": "serve", "isl": 128 * k, "osl": 64, "tpot_slo": "1ms"}
                          for k in range(1, 8)], "searchers": ["megatron"]}
    r = CliRunner().invoke(app, ["sweep", str(_write_grid(tmp_path, grid)), "--out",
                                 str(tmp_path / "out"), "--workers", "1", "--no-plots"])
    assert r.exit_code == 0, r.output
    assert r.output.count("infeasible: llama-3.1-8b") == 5
    assert "... and 2 more infeasible cells" in r.output


def test_cli_size_checks_its_answer_with_the_serving_simulation(tmp_path):
    """size's fleet is the steady state's ceil(R / r) replicas; the serving simulation then
    replays Poisson arrivals at each replica's share. Well below capacity the line says it
    keeps up; at the edge of the replicas' steady-state capacity (15.2 req/s on two replicas
    that complete 7.61 each) a replica falls behind, and the line says so, names the
    replicas that keep up, and the answer and its table count them (it said nothing, then
    warned under an answer that kept the steady state's count)."""
    base = ["size", "--model", "llama-3.1-70b", "--isl", "1024", "--osl", "256",
            "--tpot-slo", "50ms", "--devices", "h100-sxm", "--max-devices", "8", "-q"]
    r = CliRunner().invoke(app, [*base, "--rate", "9", "-o", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    # one replica on 7 GPUs (every cluster size up to 8 is searched, every degree on them)
    assert "fewest devices: 7 × h100-sxm (1 replica of" in text
    assert "simulated (Poisson arrivals, 9 req/s per replica): keeps up within the SLOs" \
        in text
    r = CliRunner().invoke(app, [*base, "--rate", "15.2", "-o", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "fewest devices: 12 × h100-sxm (3 replicas of" in text
    assert "simulated (Poisson arrivals): with 2 replicas (the steady state's count) at 7.6 " \
           "req/s each a replica " in text
    assert "; 3 replicas (12 × h100-sxm, 5.07 req/s each) keep up, and the answer above " \
           "counts them" in text
    assert "falls behind (its queue grows)" in text or "misses the TPOT SLO" in text
    # 2 replicas at 7.2 req/s each: 95% of the 7.61 a replica completes, flagged as near
    # saturation with the replicas that keep each at or below 90%.
    r = CliRunner().invoke(app, [*base, "--rate", "14.4", "-o", str(tmp_path / "c")])
    text = " ".join(r.output.split())
    assert "near saturation" in text and "(3 replicas keep each at or below 90%)" in text


@pytest.mark.parametrize("extra, says", [
    (["--max-devices", "100000000"], "--max-devices: must be in [1, 1,048,576]"),
    (["--budget", "0"], "--budget: must be a number of evaluations"),
    (["--workers", "-1"], "--workers: must be >= 0 (0: the CPU count)"),
    (["--phase", "decode"], "--phase decode has no request rate"),
    (["--price", "nope=2"], "--price: 'nope'"),
    (["--devices", "h100-sxm,,h200"], "--devices: an empty item in 'h100-sxm,,h200'"),
    (["--price", "h100-sxm=2,"], "--price: an empty item in 'h100-sxm=2,'"),
])
def test_cli_size_bad_options_name_their_flag(tmp_path, extra, says):
    devices = [] if "--devices" in extra else ["--devices", "h100-sxm"]
    r = CliRunner().invoke(app, ["size", "--model", "llama-3.1-8b", "--rate", "5", "--isl",
                                 "512", "--osl", "128", *devices, "-q",
                                 "--out", str(tmp_path / "s"), *extra])
    assert r.exit_code == 2 and says in r.output and "Traceback" not in r.output, r.output


def test_rows_record_decode_context_parallelism():
    """A plan with decode context parallelism (DeepSeek-V3 on 16 H200s under SGLang: cp 2)
    records ``cp`` beside the other degrees; a dense plan records 1."""
    from learn_to_shard.sweep.cells import COLUMNS
    assert "cp" in dict(COLUMNS)
    grid = grid_from_data({"models": ["deepseek-v3", "llama-3.1-8b"],
                           "clusters": ["h200:16"],
                           "workloads": [{"isl": 1024, "osl": 256, "tpot_slo": "50ms",
                                          "dtype": "fp8"}],
                           "engines": ["sglang"], "searchers": ["auto"]}, "test")
    rows = {r["model"]: r for r in (run_cell(c) for c in expand(grid))}
    ds = rows["deepseek-v3"]
    assert ds["error"] is None and ds["feasible"]
    assert " cp2 " in ds["strategy"] and ds["cp"] == 2, ds["strategy"]
    assert rows["llama-3.1-8b"]["cp"] == 1


def test_a_grid_rate_beyond_any_cluster_leaves_its_fleet_out_of_the_summary(tmp_path):
    """A grid rate needing more than 2^20 devices ended the sweep in a traceback after every
    cell ran; its summary now has no fleet for it (``l2s size`` refuses such a --rate)."""
    grid = tmp_path / "g.yaml"
    grid.write_text("models: [llama-3.1-8b]\nclusters: [h100-sxm:1]\nsearchers: [megatron]\n"
                    "workloads: [{phase: serve, isl: 512, osl: 128, rate_rps: 1.0e12}]\n")
    r = CliRunner().invoke(app, ["sweep", str(grid), "--out", str(tmp_path / "o"),
                                 "--no-plots"])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    rows = read_parquet(tmp_path / "o" / "results.parquet")
    with pytest.raises(ConfigError, match="more than the 1,048,576 devices"):
        size_fleets(rows)
    assert size_fleets(rows, skip_oversized=True) == []


def test_node_size_is_the_device_kinds_not_the_cluster_searched():
    """A fleet's nodes count nodes of the device kind (8 H100s each), whatever cluster its
    cells were searched on: 4 H100s from cells on ``h100-sxm:2`` are one node, not two."""
    from learn_to_shard.sweep.report import node_sizes

    rows = [{"device": "h100-sxm", "cluster": "h100-sxm:2"},
            {"device": "h100-sxm", "cluster": "h100-sxm:1"}]
    assert node_sizes(rows) == {"h100-sxm": 8}
    row = {"feasible": True, "instance_requests_per_s": 20.0, "instance_devices": 2,
           "model": "m", "workload": "w", "device": "h100-sxm", "strategy": "tp2",
           "tokens_per_s_per_device": 100.0, "cluster": "h100-sxm:2", "searcher": "sa"}
    [f] = size_fleets([row], rate_rps=40.0, node_sizes=node_sizes([row]))
    assert (f.devices, f.nodes) == (4, 1)


def test_replicas_are_not_split_over_the_nodes_they_share():
    """A node holds whole replicas only: 5 replicas of a 3-device plan take 3 nodes of 8 (two
    per node), not ``ceil(15 / 8) = 2``; a replica larger than a node takes whole nodes of
    its own; the count follows a fleet grown by the simulation."""
    from learn_to_shard.sweep.sizing import fleet_nodes, with_replicas

    assert fleet_nodes(5, 3, 8) == 3
    assert fleet_nodes(2, 4, 8) == 1 and fleet_nodes(3, 4, 8) == 2
    assert fleet_nodes(1, 12, 8) == 2 and fleet_nodes(2, 12, 8) == 4
    assert fleet_nodes(2, 16, 8) == 4 and fleet_nodes(9, 1, 8) == 2
    with pytest.raises(ValueError):
        fleet_nodes(0, 3, 8)
    row = {"feasible": True, "instance_requests_per_s": 12.0, "instance_devices": 3,
           "model": "m", "workload": "w", "device": "h100-sxm", "strategy": "tp3",
           "tokens_per_s_per_device": 100.0, "cluster": "h100-sxm:3", "searcher": "sa"}
    f = fleet_for(row, 60.0, node_size=8, price_per_device_hour=None)
    assert (f.replicas, f.devices, f.nodes) == (5, 15, 3)
    assert with_replicas(f, 6).nodes == 3 and with_replicas(f, 7).nodes == 4


def test_workloads_that_differ_get_distinct_labels_and_one_label_twice_is_refused():
    """The summary tables group rows by workload label: unnamed workloads alike but for
    their SLOs get labels naming them, and two workloads under one name are refused (one
    summary row once merged a 30 ms and a 5 ms TPOT workload and showed a plan missing 5 ms
    as the cheapest meeting it)."""
    base = {"models": ["llama-3.1-8b"], "clusters": ["h100-sxm:1"]}
    g = grid_from_data(dict(base, workloads=[
        {"phase": "serve", "isl": 1024, "osl": 256, "tpot_slo": "30ms"},
        {"phase": "serve", "isl": 1024, "osl": 256, "tpot_slo": "30ms", "ttft_slo": "1s"},
        {"phase": "serve", "isl": 1024, "osl": 256}]), "g.yaml")
    assert [w.label for w in g.workloads] == [
        "serve-1024/256 tpot=30ms", "serve-1024/256 ttft=1s tpot=30ms", "serve-1024/256"]
    with pytest.raises(ConfigError, match=r"workloads\[1\] is labelled 'w' like workloads\[0\]"):
        grid_from_data(dict(base, workloads=[
            {"name": "w", "phase": "serve", "isl": 1024, "osl": 256, "tpot_slo": "30ms"},
            {"name": "w", "phase": "serve", "isl": 1024, "osl": 256, "tpot_slo": "5ms"}]),
            "g.yaml")
    # a device alias and the preset's name are one cluster (one cell, not two)
    g = grid_from_data(dict(base, clusters=["h100:2", "h100-sxm:2", {"device": "H100",
                                                                      "counts": [1, 2]}],
                            workloads=[{"phase": "serve", "isl": 10, "osl": 10}]), "g.yaml")
    assert g.cluster_names() == ["h100-sxm:2", "h100-sxm:1"]
    # the count as a number: H100:02 is h100-sxm:2 too
    g = grid_from_data(dict(base, clusters=["h100-sxm:2", "H100:02", {"device": "h100",
                                                                       "counts": [2, 2]}],
                            workloads=[{"phase": "serve", "isl": 10, "osl": 10}]), "g.yaml")
    assert g.cluster_names() == ["h100-sxm:2"] and len(expand(g)) == 1
    # two unnamed workloads alike are one cell: said so first (not "give each a name")
    with pytest.raises(ConfigError, match=r"workloads\[1\] \('serve-1024/256'\) has the "
                                          r"settings of workloads\[0\] \('serve-1024/256'\): "
                                          r"they are one cell"):
        grid_from_data(dict(base, workloads=[{"phase": "serve", "isl": 1024, "osl": 256}] * 2),
                       "g.yaml")
    # two names for one workload's settings would be one cell: refused
    with pytest.raises(ConfigError, match=r"workloads\[1\] \('chat-b'\) has the settings of "
                                          r"workloads\[0\] \('chat-a'\) under another name"):
        grid_from_data(dict(base, workloads=[
            {"name": "chat-a", "phase": "serve", "isl": 1024, "osl": 256},
            {"name": "chat-b", "phase": "serve", "isl": 1024, "osl": 256}]), "g.yaml")


def test_a_cached_row_is_shown_under_this_grids_workload_name(tmp_path):
    """The workload's name is not part of a cell's key: a row run under one name and found
    again by a grid that names the same settings otherwise is shown under the new name."""
    base = {"models": ["llama-3.1-8b"], "clusters": ["h100-sxm:1"], "searchers": ["megatron"]}
    wl = {"phase": "serve", "isl": 1024, "osl": 256}
    first = run_sweep(grid_from_data(dict(base, workloads=[wl | {"name": "chat-a"}]), "a"),
                      tmp_path, workers=1)
    assert [r["workload"] for r in first.grid_rows] == ["chat-a"]
    again = run_sweep(grid_from_data(dict(base, workloads=[wl | {"name": "chat-b"}]), "b"),
                      tmp_path, workers=1)
    assert again.skipped == 1 and [r["workload"] for r in again.grid_rows] == ["chat-b"]


def test_grid_and_journal_that_are_not_utf8_are_one_line(tmp_path):
    """A grid file or a results journal with bytes that are not UTF-8 is one error line,
    exit 2, naming the file (not a UnicodeDecodeError traceback)."""
    grid = tmp_path / "latin1.yaml"
    grid.write_bytes(b"models: [llama-3.1-8b]\nclusters: [h100-sxm:1]\n"
                     b"workloads: [{phase: serve, isl: 1024, osl: 256}]\nname: caf\xe9\n")
    r = CliRunner().invoke(app, ["sweep", str(grid), "--out", str(tmp_path / "o"),
                                 "--no-plots"])
    assert r.exit_code == 2 and "not UTF-8 text (byte 0xe9" in r.output, r.output
    assert "Traceback" not in r.output
    ok = tmp_path / "ok.yaml"
    ok.write_text("models: [llama-3.1-8b]\nclusters: [h100-sxm:1]\n"
                  "workloads: [{phase: serve, isl: 1024, osl: 256}]\nsearchers: [megatron]\n")
    out = tmp_path / "res"
    assert CliRunner().invoke(app, ["sweep", str(ok), "--out", str(out),
                                    "--no-plots"]).exit_code == 0
    with (out / "rows.jsonl").open("ab") as fh:
        fh.write(b"\xff\xfe\n")
    r = CliRunner().invoke(app, ["sweep", str(ok), "--out", str(out), "--no-plots"])
    assert r.exit_code == 2 and "line 2 is not UTF-8 text" in r.output, r.output


@pytest.mark.parametrize("seeds", [[True], ["3"], [2.0]])
def test_grid_seeds_are_whole_numbers(seeds):
    """A seed written as a bool, a string or a float is refused, as budgets and counts are
    (``seeds: [true]`` was read as seed 1)."""
    with pytest.raises(ConfigError, match="seeds"):
        grid_from_data(dict(SMALL, seeds=seeds), "g.yaml")


def test_a_grid_key_given_twice_is_refused(tmp_path):
    """YAML keeps the last of two equal keys: a second ``models:`` would replace the first
    without a word; it is one error line naming the key and line, exit 2."""
    dup = tmp_path / "dup.yaml"
    dup.write_text("models: [llama-3.1-8b]\nmodels: [qwen3-8b]\nclusters: [h100-sxm:1]\n"
                   "workloads: [{phase: serve, isl: 1024, osl: 256, isl: 512}]\n")
    r = CliRunner().invoke(app, ["sweep", str(dup), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    assert "not valid YAML (line 2): key 'models' given twice in one mapping" in r.output
    # an unhashable key is PyYAML's own one-line error, and a count in other digits is
    # refused as a count, not a traceback
    odd = tmp_path / "odd.yaml"
    odd.write_text("models: [llama-3.1-8b]\nclusters: [h100:1]\n[a, b]: 1\n")
    r = CliRunner().invoke(app, ["sweep", str(odd), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "found unhashable key" in r.output, r.output
    odd.write_text("models: [llama-3.1-8b]\nclusters: ['h100:\u00b2']\n"
                   "workloads: [{phase: serve, isl: 1024, osl: 256}]\n", encoding="utf-8")
    r = CliRunner().invoke(app, ["sweep", str(odd), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "device count must be a positive integer" in r.output, r.output
    assert "Traceback" not in r.output


def test_prefill_wait_is_the_m_d_1_mean_wait():
    """prefill_wait_s against an M/D/1 queue run by Lindley's recursion (Poisson arrivals at
    the replica's share of the rate, one deterministic service of 1 / r per request): the
    closed form is within 3% of 200,000 simulated requests at 50% and 85% load."""
    import numpy as np

    from learn_to_shard.sweep.sizing import prefill_wait_s

    rng = np.random.default_rng(0)
    r = 10.0                                   # requests/s one replica completes
    for rho in (0.5, 0.85):
        gaps = rng.exponential(1.0 / (rho * r), 200_000)
        wait = np.zeros(len(gaps))
        for i in range(1, len(gaps)):
            wait[i] = max(0.0, wait[i - 1] + 1.0 / r - gaps[i])
        assert prefill_wait_s(2 * rho * r, 2, r) == pytest.approx(wait[1000:].mean(), rel=0.03)
    assert prefill_wait_s(20.0, 2, 10.0) == math.inf          # saturated


def test_prefill_fleet_leaves_room_for_its_queue():
    """A prefill fleet is not sized at the steady-state count ceil(R / r) alone, where a
    replica can run at ~100% and its queue never settles: at most 90% load, and with a TTFT
    SLO enough replicas that the plan's pass plus the M/D/1 mean wait meets it; where no
    count up to 4x does, the fleet says so."""
    from learn_to_shard.sweep.sizing import (
        PREFILL_MAX_UTILIZATION,
        prefill_replicas,
        prefill_wait_s,
    )

    row = {"feasible": True, "instance_requests_per_s": 10.0, "instance_devices": 1,
           "model": "m", "workload": "w", "device": "h100-sxm", "strategy": "tp1",
           "tokens_per_s_per_device": 100.0, "cluster": "h100-sxm:8", "searcher": "sa",
           "phase": "prefill", "ttft_s": 0.5, "ttft_slo_s": None}
    f = fleet_for(row, 29.5, 8, None)        # steady state: 3 replicas at 98%
    assert f.replicas == 4 and f.utilization <= PREFILL_MAX_UTILIZATION
    assert f.queue_wait_s == pytest.approx(prefill_wait_s(29.5, 4, 10.0)) and f.queue_slo_met
    # a TTFT SLO of 0.55 s leaves 50 ms for the queue: more replicas
    k, met = prefill_replicas(29.5, 10.0, 0.5, 0.55)
    assert met and 0.5 + prefill_wait_s(29.5, k, 10.0) <= 0.55 < \
        0.5 + prefill_wait_s(29.5, k - 1, 10.0)
    assert fleet_for(dict(row, ttft_slo_s=0.55), 29.5, 8, None).replicas == k > 4
    # a pass that uses the whole SLO leaves none: flagged, sized at the load cap
    f = fleet_for(dict(row, ttft_slo_s=0.5), 29.5, 8, None)
    assert not f.queue_slo_met and f.replicas == 4
    # serve rows keep the steady-state count (their queue is the simulation's business)
    f = fleet_for(dict(row, phase="serve"), 29.5, 8, None)
    assert f.replicas == 3 and f.queue_wait_s is None
    # a fleet whose queue misses the SLO loses to one that meets it, though it is smaller,
    # and the sweep's cheapest-cluster table leaves it out
    tight = dict(row, ttft_slo_s=0.5, instance_devices=1)            # misses: 4 devices
    roomy = dict(row, ttft_s=0.3, ttft_slo_s=0.5, instance_devices=2, strategy="tp2",
                 cluster="h100-sxm:2")                                # meets it
    (best,) = size_fleets([tight, roomy], rate_rps=29.5)
    assert best.strategy == "tp2" and best.queue_slo_met and best.devices > 4
    from learn_to_shard.sweep.report import cheapest

    rows = [dict(x, rate_rps=29.5, cluster_devices=8, error=None) for x in (tight, roomy)]
    assert [c.strategy for c in cheapest(rows, {})] == ["tp2"]
    assert cheapest(rows[:1], {}) == []
    # a rate beyond any cluster is refused (the replica count is solved in closed form, not
    # searched one count at a time, which took minutes at this rate)
    with pytest.raises(ConfigError, match="more than the 1,048,576 devices"):
        fleet_for(dict(row, ttft_slo_s=0.55), 1e10, 8, None)


def test_cli_size_prefill_prints_its_queue(tmp_path):
    r = CliRunner().invoke(app, [
        "size", "--model", "llama-3.1-8b", "--rate", "43", "--phase", "prefill", "--isl",
        "2048", "--ttft-slo", "1s", "--devices", "h100-sxm", "--max-devices", "1",
        "--method", "megatron", "--workers", "1", "--out", str(tmp_path / "size"), "--quiet"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "prefill queue: each replica at" in text and "(M/D/1, Poisson arrivals)" in text
    load = int(text.split("prefill queue: each replica at ")[1].split("%")[0])
    assert load <= 90


def test_cli_size_leaves_out_devices_the_engine_cannot_serve(tmp_path):
    """An engine that cannot serve the checkpoint on a device kind (NVFP4 weights under
    TensorRT-LLM before Blackwell) leaves that kind out with the reason, once, instead of a
    failed search per cluster size; where it serves no kind asked for (a model class
    TensorRT-LLM does not register), one line names --engine, exit 2."""
    base = ["size", "--rate", "5", "--isl", "1000", "--osl", "100", "--max-devices", "1",
            "--method", "megatron", "--engine", "trtllm", "--workers", "1", "--quiet"]
    r = CliRunner().invoke(app, [*base, "--model", "qwen3-235b-a22b-nvfp4", "--devices",
                                 "h100-sxm,b200", "--out", str(tmp_path / "nvfp4")])
    assert r.exit_code == 0, r.output
    assert "left out: h100-sxm: TensorRT-LLM 1.2.0rc2 runs NVFP4 weights only" in r.output
    assert "failed:" not in r.output
    kv = CliRunner().invoke(app, [*base, "--model", "llama-3.1-8b", "--kv-dtype", "fp8",
                                  "--devices", "a100-80gb,h100-sxm", "--out",
                                  str(tmp_path / "kv")])
    assert kv.exit_code == 0, kv.output
    assert "left out: a100-80gb: TensorRT-LLM 1.2.0rc2 runs an FP8 KV cache only" in kv.output
    assert "1 × a100-80gb" not in kv.output
    g = CliRunner().invoke(app, [*base, "--model", str(granite_folder(tmp_path)), "--devices",
                                 "h100-sxm,h200", "--out", str(tmp_path / "g")])
    assert g.exit_code == 2, g.output
    text = " ".join(g.output.split())
    # the model's class, whatever the device: said once, without "or other --devices"
    assert "--engine trtllm: TensorRT-LLM 1.2.0rc2's PyTorch runtime has no model class " \
        "GraniteForCausalLM" in text and "Traceback" not in text
    assert text.count("GraniteForCausalLM (") == 1 and "--devices" not in text
    both = CliRunner().invoke(app, [*base, "--model", "llama-3.1-8b", "--kv-dtype", "fp8",
                                    "--devices", "a100-80gb,mi300x", "--out",
                                    str(tmp_path / "both")])
    assert both.exit_code == 2 and "a100-80gb: TensorRT-LLM" in both.output \
        and "mi300x: trtllm does not run on mi300x" in both.output \
        and "or other --devices" in " ".join(both.output.split()), both.output


def test_grid_workload_with_images_prices_their_tokens(tmp_path):
    """A grid workload may carry images for a vision-language model, as l2s plan
    --images-per-request: Gemma-3's 256 tokens per image join the prompt (isl 512 + 2 x 256),
    the row records the count, the label says it, and a cell without images keeps the key it
    had before the field existed (a resumed sweep does not run it again)."""
    base = {"models": ["gemma-3-12b-it"], "clusters": ["h100-sxm:1"],
            "searchers": ["megatron"]}
    g = grid_from_data({**base, "workloads": [{"phase": "serve", "isl": 512, "osl": 64,
                                               "images_per_request": 2}]})
    (cell,) = expand(g)
    row = run_cell(cell)
    assert row["error"] is None and row["feasible"], row
    assert row["isl"] == 1024 and row["images_per_request"] == 2
    assert row["workload"] == "serve-512/64 img=2"
    plain = grid_from_data({**base, "workloads": [{"phase": "serve", "isl": 512, "osl": 64}]})
    (p,) = expand(plain)
    data = p.model_dump(mode="json")
    for k in ("name", "images_per_request", "image_tokens"):
        data["workload"].pop(k)
    assert data.pop("inputs") is None       # a shipped model: no file hash, nor its field
    import hashlib
    old_key = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":"))
                             .encode()).hexdigest()[:16]
    assert p.key() == old_key and p.key() != cell.key()
    # a text-only model is refused with the grid, before any cell runs, as plan's flag is
    with pytest.raises(ConfigError, match=r"workloads\[0\] under models\[0\] \(llama-3.1-8b\): "
                                          r"images_per_request: llama-3.1-8b is not a "
                                          r"vision-language model"):
        grid_from_data({**base, "models": ["llama-3.1-8b"], "workloads": [
            {"phase": "serve", "isl": 512, "osl": 64, "images_per_request": 1}]})
    # 0 images is none, as --images-per-request 0: the cell of the workload without them
    zero = grid_from_data({**base, "workloads": [{"phase": "serve", "isl": 512, "osl": 64,
                                                  "images_per_request": 0}]})
    assert expand(zero)[0].key() == p.key()
    with pytest.raises(ConfigError, match="image_tokens: give images_per_request too"):
        grid_from_data({**base, "workloads": [{"phase": "serve", "isl": 512, "osl": 64,
                                               "image_tokens": 100}]})


def test_cli_size_takes_the_image_flags(tmp_path):
    base = ["size", "--rate", "2", "--isl", "512", "--osl", "64", "--max-devices", "1",
            "--devices", "h100-sxm", "--method", "megatron", "--workers", "1", "--quiet"]
    r = CliRunner().invoke(app, [*base, "--model", "gemma-3-12b-it", "--images-per-request",
                                 "2", "--out", str(tmp_path / "g")])
    assert r.exit_code == 0, r.output
    rows = read_parquet(tmp_path / "g" / "results.parquet")
    assert rows and all(row["isl"] == 1024 and row["images_per_request"] == 2 for row in rows)
    r = CliRunner().invoke(app, [*base, "--model", "llama-3.1-8b", "--images-per-request", "1",
                                 "--out", str(tmp_path / "t")])
    assert r.exit_code == 2 and "not a vision-language model" in r.output, r.output


def test_a_rate_no_fleet_serves_is_said_not_dropped(tmp_path):
    """A workload whose rate_rps needs more devices than a cluster may have gets a line
    saying so where the cheapest table would have its row (it vanished silently)."""
    grid = {"models": ["llama-3.1-8b"], "clusters": ["h100-sxm:1"], "searchers": ["megatron"],
            "workloads": [{"name": "w", "phase": "serve", "isl": 512, "osl": 128,
                           "tpot_slo": "50ms", "rate_rps": 1e12}]}
    r = CliRunner().invoke(app, ["sweep", str(_write_grid(tmp_path, grid)), "--out",
                                 str(tmp_path / "out"), "--workers", "1", "--no-plots"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "no fleet for llama-3.1-8b (w): h100-sxm:1: rate: 1e+12 requests/s needs" in text
    assert "more than the 1,048,576 devices a cluster may have" in text


@pytest.mark.parametrize("address", ["127.0.0.1:1", "no-such-host.invalid:6379"])
def test_an_unreachable_ray_address_is_one_line_not_a_hang(tmp_path, address):
    """ray.init retries an address nobody answers at without end; the sweep probes it first
    (before importing Ray, so this runs without it) and refuses it in one line, exit 2."""
    r = CliRunner().invoke(app, ["sweep", str(ROOT / "examples" / "sweep-small.yaml"), "--out",
                                 str(tmp_path / "o"), "--ray-address", address])
    assert r.exit_code == 2, r.output
    assert f"--ray-address {address}: no Ray cluster answers there" in " ".join(
        r.output.split())


def test_cli_size_refuses_a_request_beyond_the_context_before_searching(tmp_path):
    """As l2s plan: one error line naming --isl + --osl, exit 2 (it failed every cluster
    search and blamed the SLOs, exit 1)."""
    r = CliRunner().invoke(app, ["size", "--model", "llama-3.1-8b", "--rate", "1", "--isl",
                                 "200000", "--osl", "100", "--devices", "h100-sxm",
                                 "--max-devices", "2", "--out", str(tmp_path / "s")])
    assert r.exit_code == 2, r.output
    assert "--isl + --osl: a request of 200100 tokens exceeds" in " ".join(r.output.split())
    assert "failed:" not in r.output


def test_the_cheapest_table_names_the_engine_of_its_answer():
    """A grid of several engines compares them: the cheapest cluster per workload is one
    engine's plan, and the table (and its entries) say which, where a row without the
    engine read like a claim about every engine."""
    from learn_to_shard.sweep.report import cheapest, cheapest_table

    base = dict(model="llama-3.1-8b", workload="chat", device="h100-sxm", feasible=True,
                phase="serve", instance_requests_per_s=2.0, tpot_s=0.02, ttft_s=0.2,
                ttft_slo_s=None, searcher="exact", error=None)
    rows = [dict(base, engine="vllm", cluster="h100-sxm:2", cluster_devices=2,
                 instance_devices=2, strategy="tp2", tokens_per_s_per_device=900.0),
            dict(base, engine="sglang", cluster="h100-sxm:1", cluster_devices=1,
                 instance_devices=1, strategy="tp1", tokens_per_s_per_device=1100.0)]
    (best,) = cheapest(rows, {})
    assert (best.engine, best.devices, best.how) == ("sglang", 1, "cluster h100-sxm:1")
    (fleet,) = cheapest([dict(r, rate_rps=5.0) for r in rows], {})
    assert fleet.engine == "sglang" and fleet.devices == 3
    from rich.console import Console

    con = Console(width=200, record=True)
    con.print(cheapest_table([best]))
    text = con.export_text()
    assert "engine" in text and "sglang" in text


def test_a_fleet_at_the_replicas_the_simulation_needs_is_re_ranked():
    """with_replicas: devices, nodes, cost and load follow the simulated count, and the
    steady state's stays named; re-ranked, a kind the simulation enlarged past another's
    cost falls behind it (l2s size printed the steady state's cheapest, then warned that it
    needed more devices than the runner-up cost)."""
    from learn_to_shard.sweep.report import fleet_table
    from learn_to_shard.sweep.sizing import Fleet, rank_key, with_replicas

    def fleet(device: str, price: float, replicas: int, d: int, r: float) -> Fleet:
        return Fleet(model="m", workload="w", device=device, node_size=8, rate_rps=20.0,
                     strategy="tp2", instance_devices=d, instance_requests_per_s=r,
                     replicas=replicas, devices=replicas * d, nodes=1,
                     price_per_device_hour=price, cost_per_hour=replicas * d * price,
                     tokens_per_s_per_device=1.0, tpot_s=0.02, ttft_s=0.1,
                     searched_cluster=f"{device}:{d}", searcher="auto",
                     utilization=20.0 / (replicas * r))
    h200, b200 = fleet("h200", 3.49, 5, 2, 4.3), fleet("b200", 5.99, 3, 2, 9.09)
    assert sorted([h200, b200], key=rank_key)[0] is h200
    more = with_replicas(h200, 7)
    assert (more.devices, more.nodes, more.steady_replicas) == (14, 2, 5)
    assert more.cost_per_hour == pytest.approx(14 * 3.49)
    assert more.utilization == pytest.approx(20.0 / (7 * 4.3))
    assert sorted([more, b200], key=rank_key)[0] is b200
    assert with_replicas(b200, 3) is b200
    # A kind the simulation found falling behind even with more replicas ranks after the
    # kinds that keep up, whatever its steady-state cost.
    import dataclasses

    behind = dataclasses.replace(h200, falls_behind=True)
    assert sorted([behind, b200], key=rank_key)[0] is b200
    with pytest.raises(ValueError):
        with_replicas(b200, 0)
    from rich.console import Console

    con = Console(width=300, record=True)
    con.print(fleet_table([b200, more]))
    assert "7 × tp2 (steady state: 5)" in con.export_text()


def test_a_grid_error_names_the_other_errors_not_the_union_branches(tmp_path):
    """One line for a grid error: the most specific error, then the others by where they
    stand; a union's branches not taken (a cluster entry that is not a string either) are
    not counted as errors of their own."""
    from learn_to_shard.errors import ConfigError
    from learn_to_shard.sweep import load_grid

    path = tmp_path / "g.yaml"
    path.write_text("models: [llama-3.1-8b]\nclusters: [{device: h100-sxm, counts: [0, 4]}]\n"
                    "workloads: [{phase: decode, context: 1024}]\n")
    with pytest.raises(ConfigError) as e:
        load_grid(path)
    assert str(e.value).endswith("clusters[0].counts[0]: Input should be greater than 0")
    path.write_text("models: [llama-3.1-8b]\nclusters: [{device: h100-sxm, counts: [0, -4]}]\n"
                    "workloads: [{phase: decode, context: 1024}]\n")
    with pytest.raises(ConfigError) as e:
        load_grid(path)
    assert "(also clusters[0].counts[1]: Input should be greater than 0)" in str(e.value)
    # An entry that no branch of the union takes is one error, not one per branch.
    path.write_text("models: [llama-3.1-8b]\nclusters: [{device: h100-sxm, counts: [4], "
                    "bogus: 1}, 5]\nworkloads: [{phase: decode, context: 1024}]\n")
    with pytest.raises(ConfigError) as e:
        load_grid(path)
    assert str(e.value).endswith("clusters[0].bogus: not a valid key here; valid: device, "
                                 "counts (also clusters[1]: Input should be a valid string)")


def test_a_closed_loop_without_a_ttft_slo_is_said_to_rank_by_size_alone():
    """A concurrency workload with no TTFT SLO: the cheapest cluster is the smallest whose
    plan meets the other limits, however long its clients wait; the sweep says so where its
    answer keeps clients waiting (it picked 4 A100s whose clients waited 20 s over 8 H100s
    without a word), and not where every client has a slot."""
    from learn_to_shard.sweep.report import Cheapest, unbounded_wait

    def row(workload: str, conc: int | None, ttft: float | None, batch: int = 32) -> dict:
        return {"model": "m", "workload": workload, "concurrency": conc, "ttft_slo_s": ttft,
                "device": "a100-80gb", "cluster_devices": 4, "strategy": "tp4",
                "batch": batch, "instances": 1, "feasible": True, "error": None,
                "tokens_per_s_per_device": 1.0}

    items = [Cheapest("m", w, "a100-80gb", 4, None, "tp4", 1.0, "cluster a100-80gb:4", None)
             for w in ("c64", "c64-slo", "rate", "c64-fits")]
    rows = [row("c64", 64, None), row("c64-slo", 64, 2.0), row("rate", None, None),
            row("c64-fits", 64, None, batch=64)]
    assert unbounded_wait(rows, items) == [("m", "c64")]


def test_editing_a_model_or_cluster_file_runs_its_cells_again(tmp_path):
    """A cell's key holds what it reads from files (Cell.inputs): a resumed sweep skips a
    cell only while its config.json and cluster file are unchanged (it reused the row of a
    20 GB device's cluster file after the file said 80 GB, and of a model file rewritten
    to another shape). Shipped names and DEVICE:COUNT clusters keep their keys."""
    from learn_to_shard.model.hf_config import _shipped_files

    model = tmp_path / "model.json"
    shipped = json.loads(_shipped_files()["llama-3.1-8b"].read_text())
    model.write_text(json.dumps(shipped))
    cluster = tmp_path / "cf.json"
    cluster.write_text(json.dumps({"device": "h100-sxm", "num_devices": 2}))
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump({
        "models": [str(model)], "clusters": [str(cluster)],
        "workloads": [{"phase": "decode", "context": 1024}], "searchers": ["megatron"]}))
    args = ["sweep", str(grid), "--out", str(tmp_path / "out"), "--workers", "1",
            "--no-plots", "--quiet"]

    def run() -> tuple[str, dict]:
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0, r.output
        rows = [json.loads(x) for x in (tmp_path / "out" / "rows.jsonl").read_text()
                .splitlines()]
        return r.output, rows[-1]

    out, first = run()
    assert "1 cells run, 0 skipped" in out
    out, _ = run()
    assert "0 cells run, 1 skipped" in out
    cluster.write_text(json.dumps({"device": "h100-sxm", "num_devices": 2,
                                   "overrides": {"hbm_bytes": 20e9}}))
    out, small = run()
    assert "1 cells run, 0 skipped" in out
    assert small["key"] != first["key"]
    assert small["memory_per_device_bytes"] < 20e9 < first["memory_per_device_bytes"]
    model.write_text(json.dumps(shipped | {"num_hidden_layers": 16}))
    out, shallow = run()
    assert "1 cells run, 0 skipped" in out and shallow["key"] != small["key"]
    assert shallow["inputs"] and shallow["inputs"] != small["inputs"]   # a column of its own
    # shipped names (in any case) and DEVICE:COUNT clusters: no inputs hash, the keys of
    # before; the hash is of the files' contents, not where they lie (an HF cache's or a
    # results folder's path differs between machines)
    cell = expand(grid_from_data(SMALL, "grid"))[0]
    assert cell.inputs is None
    from learn_to_shard.sweep.grid import _cluster_digest, _model_digest

    assert _model_digest("LLAMA-3.1-8B") is None
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "config.json").write_text(model.read_text())
        (tmp_path / sub / "c.json").write_text(cluster.read_text())
    assert _model_digest(str(tmp_path / "a" / "config.json")) == \
        _model_digest(str(tmp_path / "b" / "config.json"))
    assert _cluster_digest(str(tmp_path / "a" / "c.json")) == \
        _cluster_digest(str(tmp_path / "b" / "c.json"))


def test_cli_size_prefill_looser_slo_never_needs_more_devices(tmp_path):
    """A prefill fleet's TTFT is the plan's pass plus its queue: sizing only the plan with the
    most throughput at the whole SLO answered 16 H100s at 300 ms and 12 at 500 ms where 6
    do (b1, a 94 ms pass), and 8 at 150 ms. Each cluster size is also searched at tighter
    budgets (sweep.sizing.PREFILL_TTFT_BUDGETS) and sized against the SLO asked."""
    from learn_to_shard.sweep.sizing import PREFILL_TTFT_BUDGETS

    assert PREFILL_TTFT_BUDGETS[0] == 1.0 and min(PREFILL_TTFT_BUDGETS) < 1.0

    def devices(slo: str) -> int:
        r = CliRunner().invoke(app, [
            "size", "--model", "llama-3.1-8b", "--rate", "50", "--phase", "prefill", "--isl",
            "4096", "--ttft-slo", slo, "--devices", "h100-sxm", "--max-devices", "2",
            "--workers", "1", "--out", str(tmp_path / slo), "--quiet"])
        assert r.exit_code == 0, r.output
        text = " ".join(r.output.split())
        assert f"ttft={slo}" in text                  # the answer is labelled by the SLO asked
        wait, pass_ = (float(x.split(" ms")[0]) for x in (
            text.split("a mean wait of ")[1], text.split("before the plan's ")[1]))
        assert wait + pass_ <= float(slo.removesuffix("ms"))
        return int(text.split("fewest devices: ")[1].split(" ")[0])

    tight, loose = devices("300ms"), devices("500ms")
    assert loose <= tight <= 6
    # the answer names the budget its plan was searched under where it is a tighter one
    r = CliRunner().invoke(app, [
        "size", "--model", "llama-3.1-8b", "--rate", "50", "--phase", "prefill", "--isl",
        "4096", "--ttft-slo", "150ms", "--devices", "h100-sxm", "--max-devices", "2",
        "--workers", "1", "--out", str(tmp_path / "150"), "--quiet"])
    text = " ".join(r.output.split())
    assert r.exit_code == 0 and "with TTFT ≤ 75.0 ms (a shorter pass" in text, text
    # a budget under 1 us is not searched (the SLO's own minimum is 1 us)
    r = CliRunner().invoke(app, [
        "size", "--model", "llama-3.1-8b", "--rate", "50", "--phase", "prefill", "--isl",
        "4096", "--ttft-slo", "3us", "--devices", "h100-sxm", "--max-devices", "1",
        "--workers", "1", "--out", str(tmp_path / "3us"), "--quiet"])
    assert r.exit_code == 1 and "workloads[" not in r.output, r.output


def test_cli_size_prefill_finds_a_plan_whose_pass_is_just_over_half_the_slo(tmp_path):
    """50 requests/s of 4,096-token prompts under a 50 ms TTFT SLO: two TP4 replicas (a
    25.1 ms pass, just over half the SLO, with a 21 ms queue) serve it on 8 H100s. Searched
    at the whole SLO and at 1/2 and 1/4 of it, the plan was never a candidate (25.1 > 25 ms)
    and the answer was 12; the budgets between them find it."""
    r = CliRunner().invoke(app, [
        "size", "--model", "llama-3.1-8b", "--rate", "50", "--phase", "prefill", "--isl",
        "4096", "--ttft-slo", "50ms", "--devices", "h100-sxm", "--max-devices", "4",
        "--workers", "1", "--out", str(tmp_path / "o"), "--quiet"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "fewest devices: 8 × h100-sxm (2 replicas of tp4" in text, text
    assert "with TTFT ≤ 37.5 ms (a shorter pass" in text


def _one_client_one_token_row(cluster: str, isl: int) -> dict[str, object]:
    """The sweep row of Llama-3.1-8B under vLLM on ``cluster``: one client (a closed loop)
    asking ``isl``-token prompts for one output token, exact search."""
    grid = grid_from_data({
        "models": ["llama-3.1-8b"], "clusters": [cluster], "engines": ["vllm"],
        "workloads": [{"name": "c1", "phase": "serve", "isl": isl, "osl": 1,
                       "concurrency": 1}],
        "searchers": ["exact"]})
    (cell,) = expand(grid)
    return run_cell(cell)


def test_a_cell_of_one_client_and_one_output_token():
    """A closed loop of one client asking for one output token: the cluster completes one
    request per client cycle (front-end time plus the request's TTFT in the engine), not one
    per engine pass, and the row has no TPOT (no token follows the first), as ``l2s plan``
    says. The row said 36 requests/s on three GPUs where one client can send 11."""
    row = _one_client_one_token_row("h100-sxm:3", 2048)
    assert row["error"] is None and row["feasible"]
    assert row["tpot_s"] is None and row["ttft_s"] > 0
    assert row["cluster_tokens_per_s"] == pytest.approx(1.0 / row["ttft_s"], rel=0.02)


def test_size_searches_every_cluster_size_up_to_8_then_powers_of_two():
    from learn_to_shard.cli import size_counts

    assert size_counts(64) == [1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64]
    assert size_counts(5) == [1, 2, 3, 4, 5]
    assert size_counts(12) == [1, 2, 3, 4, 5, 6, 7, 8, 12]


def test_size_checks_the_next_cluster_size_when_the_simulation_grows_a_fleet(tmp_path):
    """Mixtral-8x7B at 0.2 req/s on L40S: the smallest steady-state fleet is one PP3 replica
    on 3 devices (a cluster size searched since every size up to 8 is), which the simulation
    finds falling behind (two replicas: 6 devices); the next steady-state fleet, one replica
    on 4 devices, keeps up, so the answer is 4, not 6 (nor the 4 of searching 1, 2, 4, 8
    only, by luck)."""
    r = CliRunner().invoke(app, ["size", "--model", "mixtral-8x7b", "--rate", "0.2", "--isl",
                                 "1024", "--osl", "256", "--tpot-slo", "60ms", "--devices",
                                 "l40s", "--max-devices", "8", "-q", "-o",
                                 str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "fewest devices: 4 × l40s (1 replica of" in text
    assert "simulated (Poisson arrivals, 0.2 req/s per replica): keeps up" in text
    every = read_parquet(next((tmp_path / "s").glob("*.parquet")))
    rows = [row for row in every if row["cluster"] == "l40s:3"]
    assert rows and rows[0]["feasible"] and rows[0]["instance_devices"] == 3
    # clusters whose plans leave devices idle give the same fleet; the simulation checks
    # each fleet once
    from learn_to_shard.sweep.sizing import fleet_options

    (fleets,) = fleet_options(every, rate_rps=0.2).values()
    kinds = [(f.strategy, f.replicas, f.devices) for f in fleets]
    assert len(kinds) == len(set(kinds)) and len(fleets) < len(every)


def test_the_sweep_tables_cluster_requests_follow_the_clients_bound():
    """The sweep summary's "cluster req/s" is the cluster's tokens/s over ``osl`` (bounded by
    a closed loop's clients), not the instances' slot rate times their number: one client
    asking for one token completes ~1 / TTFT requests/s (it printed 37.58 where the row's
    tokens/s said 11.5)."""
    from rich.console import Console

    from learn_to_shard.sweep.report import summary_table

    row = _one_client_one_token_row("h100-sxm:1", 1024)
    con = Console(record=True, width=200)
    con.print(summary_table([row]))
    text = con.export_text()
    assert f"{row['cluster_tokens_per_s']:,.2f}" in text
    assert row["cluster_tokens_per_s"] == pytest.approx(1.0 / row["ttft_s"], rel=0.02)


def test_fleets_of_equal_devices_rank_the_one_with_headroom_first():
    """Two kinds serving the rate on 2 devices each, unpriced: the fleet whose replicas run
    at 79% of capacity ranks before the one at 99%, whose queueing delay near saturation
    moves with a few percent of throughput error (the first listed kind won the tie)."""
    import dataclasses

    from learn_to_shard.sweep.sizing import Fleet, rank_key

    busy = Fleet(model="m", workload="w", device="h100-sxm", node_size=8, rate_rps=26.0,
                 strategy="tp2", instance_devices=2, instance_requests_per_s=26.3,
                 replicas=1, devices=2, nodes=1, price_per_device_hour=None,
                 cost_per_hour=None, tokens_per_s_per_device=1700.0, tpot_s=0.03,
                 ttft_s=0.05, searched_cluster="h100-sxm:2", searcher="auto",
                 utilization=0.99)
    roomy = dataclasses.replace(busy, device="h200", strategy="tp1", replicas=2,
                                instance_devices=1, tokens_per_s_per_device=1650.0,
                                utilization=0.79)
    assert [f.device for f in sorted([busy, roomy], key=rank_key)] == ["h200", "h100-sxm"]
    # fewer devices still come first, whatever their load
    small = dataclasses.replace(busy, devices=1, utilization=0.99)
    assert sorted([roomy, small], key=rank_key)[0] is small


def test_a_sweeps_prefill_fleet_says_size_also_searches_tighter_ttft_budgets(tmp_path):
    """A grid's prefill workload with a rate and a TTFT SLO is sized on the grid's SLO alone,
    where ``l2s size`` also searches at tighter budgets and can need fewer devices: the
    sweep's summary says so (a serve workload's does not)."""
    grid = tmp_path / "g.yaml"
    grid.write_text("models: [llama-3.1-8b]\nclusters: [h100-sxm:1]\nsearchers: [megatron]\n"
                    "workloads: [{phase: prefill, isl: 2048, ttft_slo: 1s, rate_rps: 20},\n"
                    "            {phase: serve, isl: 512, osl: 128, rate_rps: 2}]\n")
    r = CliRunner().invoke(app, ["sweep", str(grid), "--out", str(tmp_path / "o"),
                                 "--no-plots"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert text.count("l2s size also searches at 0.75, 0.5, 0.35 and 0.25 of the SLO") == 1, \
        text
    assert "the prefill fleet is sized on plans searched at the grid's TTFT SLO" in text
