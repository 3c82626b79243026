"""The command line: exit codes, one-line errors, JSON output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import learn_to_shard
from learn_to_shard.cli import app
from learn_to_shard.errors import ConfigError

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, list(args))


def test_plan_serve_llama70b_is_feasible_and_json_matches():
    r = _run("plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase", "serve",
             "--isl", "1024", "--osl", "1024", "--tpot-slo", "50ms", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["feasible"] and data["best"]["tpot_s"] <= 0.050
    best = data["best"]
    assert best["strategy"]["devices"] <= 8
    assert set(best["memory_per_device"]) >= {"weight_bytes", "kv_cache_bytes",
                                              "workspace_bytes", "usable_bytes"}
    assert len(best["strategy"]["placements"]) == 12
    assert best["tpot_slo_margin_s"] == pytest.approx(0.050 - best["tpot_s"])


def test_plan_prints_table():
    r = _run("plan", "--model", "deepseek-v3", "--cluster", "h100-sxm:32", "--phase", "decode",
             "--context", "4096", "--dtype", "fp8", "--quiet")
    assert r.exit_code == 0, r.output
    for word in ("Best strategy", "TPOT", "memory/device", "Per-operator placement",
                 "Collectives", "moe dispatch"):
        assert word in r.stdout


def test_no_feasible_plan_exits_1_with_reason():
    r = _run("plan", "--model", "llama-3.1-405b", "--cluster", "h100-sxm:1", "--phase",
             "decode", "--context", "4096", "--quiet")
    assert r.exit_code == 1
    assert "No feasible plan" in r.stdout and "weights alone exceed" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (("--model", "switch-c-2048", "--cluster", "h100-sxm:8", "--context", "10"),
     "encoder-decoder"),
    (("--model", "deepseek-v4-pro", "--cluster", "h100-sxm:8", "--context", "10"),
     "deepseek-v4-pro"),
    (("--model", "no-such-model", "--cluster", "h100-sxm:8", "--context", "10"), "no-such"),
    (("--model", "llama-3.1-8b", "--cluster", "h999:8", "--context", "10"), "h999"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:0", "--context", "10"), "count"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10", "--isl", "5"),
     "--context"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--phase", "serve", "--isl", "5"),
     "--osl"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10",
      "--tpot-slo", "fast"), "--tpot-slo"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10",
      "--dtype", "int3"), "--dtype"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10",
      "--method", "magic"), "--method"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10",
      "--engine", "tgi"), "--engine"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10",
      "--gpu-memory-utilization", "1.5"), "--gpu-memory-utilization"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--phase", "serve", "--isl", "8",
      "--osl", "8", "--max-num-batched-tokens", "0"), "positive whole number of tokens"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10",
      "--max-num-batched-tokens", "4096"), "no effect with --phase decode"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10",
      "--engine", ""), "--engine"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10",
      "--tpot-slo", "50"), "no unit"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10",
      "--tpot-slo", "1e400s"), "finite"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "200000"),
     "max_position_embeddings"),
    # ShareGPT's longest scaled pair beyond the positions: the model's limit, not the KV pool
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--phase", "serve", "--isl",
      "100000", "--osl", "2000", "--dataset", "sharegpt", "--concurrency", "4"),
     "exceeds llama-3.1-8b's max_position_embeddings 131072"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:99999999999999999999", "--context",
      "10"), "at most"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10",
      "--method", "rl", "--budget", "2"), "--budget"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10",
      "-o", "/nonexistent-dir/x.json"), "--output"),
    (("--model", "", "--cluster", "h100-sxm:8", "--context", "10"), "--model"),
    (("--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--phase", "prefill", "--isl",
      "1024", "--osl", "5"), "--osl"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    r = _run("plan", *args, "--quiet")
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.count("\n") == 0 and err.startswith("error:")
    assert needle.lower() in err.lower()
    assert "Traceback" not in r.output


def test_malformed_config_file(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", "hidden_size": "big"}')
    r = _run("plan", "--model", str(bad), "--cluster", "h100-sxm:8", "--context", "10", "-q")
    assert r.exit_code == 2 and "hidden_size" in r.stderr and str(bad) in r.stderr


def test_python_api_matches_cli():
    import learn_to_shard

    p = learn_to_shard.plan("llama-3.1-70b", "h100-sxm:8", "serve", isl=1024, osl=1024,
                            tpot_slo_s=0.05)
    r = _run("plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase", "serve",
             "--isl", "1024", "--osl", "1024", "--tpot-slo", "50ms", "--json")
    assert p.feasible and p.best is not None
    assert json.loads(r.stdout)["best"]["tokens_per_s_per_device"] == \
        p.best.tokens_per_s_per_device


def test_engine_memory_settings_reach_the_plan():
    """--gpu-memory-utilization sets the usable memory per device; --engine is recorded."""
    from learn_to_shard.hardware import parse_cluster

    hbm = parse_cluster("a100:4").device.hbm_bytes
    common = ("plan", "--model", "llama-3.1-70b", "--cluster", "a100:4", "--phase", "serve",
              "--isl", "1024", "--osl", "512", "--method", "megatron", "--json")
    full = json.loads(_run(*common, "--engine", "vllm").stdout)
    half = json.loads(_run(*common, "--engine", "vllm", "--gpu-memory-utilization",
                           "0.6").stdout)
    assert full["engine"] == "vllm" and full["cost_model"]["memory_utilization"] == 0.9
    assert half["cost_model"]["memory_utilization"] == 0.6
    for plan, util in ((full, 0.9), (half, 0.6)):
        usable = plan["best"]["memory_per_device"]["usable_bytes"]
        reserved = plan["cost_model"]["runtime_reserved_bytes"]
        assert usable == pytest.approx(util * hbm - reserved)
    # Less memory for the same weights: fewer sequences fit.
    assert half["best"]["max_batch"] < full["best"]["max_batch"]


@pytest.mark.parametrize("cfg,needle", [
    ('{"model_type": "llama", "hidden_size": 4096, "hidden_size": 8192}', "appears twice"),
    ('{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, '
     '"num_hidden_layers": 2, "intermediate_size": 100000000000000000000, '
     '"vocab_size": 32000}', "intermediate_size"),
    ('{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, '
     '"num_hidden_layers": 1000000000, "intermediate_size": 11008, "vocab_size": 32000}',
     "num_hidden_layers"),
])
def test_config_json_out_of_range_or_duplicated_is_one_line(tmp_path, cfg, needle):
    path = tmp_path / "config.json"
    path.write_text(cfg)
    r = _run("plan", "--model", str(path), "--cluster", "h100-sxm:8", "--context", "10", "-q")
    assert r.exit_code == 2, r.output
    assert needle in r.stderr and r.stderr.count("\n") == 1


def test_unwritable_outputs_are_refused_before_any_work(tmp_path):
    r = runner.invoke(app, ["validate", "--plot", str(tmp_path / "p.xyz")])
    assert r.exit_code == 2 and "--plot" in r.stderr
    r = runner.invoke(app, ["validate", "--report", str(tmp_path)])
    assert r.exit_code == 2 and "directory" in r.stderr
    f = tmp_path / "file"
    f.write_text("x")
    r = _run("compare", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context",
             "10", "--methods", "random", "--out", str(f), "-q")
    assert r.exit_code == 2 and "not a directory" in r.stderr
    r = _run("compare", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context",
             "10", "--methods", "random,random", "-q")
    assert r.exit_code == 2 and "more than once" in r.stderr


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_an_output_the_file_system_refuses_is_refused_before_any_work(tmp_path):
    """/proc takes no new files even where permission bits (root) say it does: -o and
    --report there are refused up front, and nothing is left behind where they can be
    written."""
    for flag, where in (("-o", "/proc/l2s-test.json"), ("--report", "/proc/l2s-test-rep")):
        r = _run("plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--context",
                 "10", flag, where, "-q")
        assert r.exit_code == 2 and r.stderr.strip().startswith("error:") and \
            "cannot create" in r.stderr and "Traceback" not in r.output, r.output
    r = _run("plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--context", "10",
             "--report", str(tmp_path / "a" / "b"), "-o", str(tmp_path / "p.json"), "-q")
    assert r.exit_code == 0 and (tmp_path / "p.json").exists()
    assert (tmp_path / "a" / "b" / "report.md").exists()


# ---------------------------------------------------------------- issue 10: known tracebacks
PLAN = ("plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10", "-q")


def _one_line_error(r, *needles: str) -> None:
    """Exit 2, one ``error:`` line on stderr naming every needle, no traceback."""
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("error:") and "\n" not in err, err
    for needle in needles:
        assert needle in err, err
    assert r.exception is None or isinstance(r.exception, SystemExit)


@pytest.mark.parametrize("where", ["model", "cluster"])
def test_deeply_nested_json_is_one_line(tmp_path, where):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    args = ["plan", "--model", str(deep) if where == "model" else "llama-3.1-8b",
            "--cluster", str(deep) if where == "cluster" else "h100-sxm:8", "--context", "10",
            "-q"]
    _one_line_error(_run(*args), str(deep), "nested too deeply")


def test_markup_in_cluster_name_is_printed_as_text(tmp_path):
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps({"device": "h100-sxm", "num_devices": 8,
                                   "name": "lab [/] [bold]x"}))
    r = _run("plan", "--model", "llama-3.1-8b", "--cluster", str(cluster), "--context", "10",
             "-q", "--method", "megatron")
    assert r.exit_code == 0, r.output
    assert "lab [/] [bold]x" in r.stdout
    # Also when nothing fits (the reasons are printed) and in compare's table.
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"device": "h100-sxm", "num_devices": 1, "name": "[/]"}))
    r = _run("plan", "--model", "llama-3.1-405b", "--cluster", str(one), "--context", "10",
             "-q", "--method", "megatron")
    assert r.exit_code == 1, r.output
    assert "on [/]" in r.stdout and "No feasible plan" in r.stdout
    r = _run("compare", "--model", "llama-3.1-8b", "--cluster", str(cluster), "--context",
             "10", "--methods", "random", "--budget", "20", "--seeds", "1", "-q",
             "--out", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("method", ["auto", "exact"])
@pytest.mark.parametrize("field,value", [("scale_up_bytes_per_s", 1e-300),
                                         ("scale_out_bytes_per_s", 1e300),
                                         ("scale_up_latency_s", 1e-300),
                                         ("hbm_bytes", 1e-3)])
def test_absurd_device_numbers_are_refused_naming_the_field(tmp_path, method, field, value):
    cluster = tmp_path / "slow.json"
    cluster.write_text(json.dumps({"device": "h100-sxm", "num_devices": 8,
                                   "overrides": {field: value}}))
    r = _run("plan", "--model", "llama-3.1-8b", "--cluster", str(cluster), "--context", "10",
             "-q", "--method", method)
    _one_line_error(r, str(cluster), field, "between")


def test_too_many_seeds_and_too_big_budget_are_refused():
    r = _run("compare", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context",
             "10", "--seeds", "1000000000", "-q")
    _one_line_error(r, "--seeds", "1000")
    r = _run("compare", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context",
             "10", "--seeds", "0", "-q")
    _one_line_error(r, "--seeds")
    for method in ("auto", "random"):
        r = _run(*PLAN, "--budget", "1000000000000", "--method", method)
        _one_line_error(r, "--budget", "10,000,000")
    r = _run("compare", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context",
             "10", "--budget", "1000000000000", "-q")
    _one_line_error(r, "--budget")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_full_disk_names_the_path():
    r = _run(*PLAN, "--method", "megatron", "-o", "/dev/full")
    _one_line_error(r, "--output", "/dev/full", "No space left")


def test_full_disk_in_validate_and_compare_names_the_path(tmp_path, monkeypatch):
    import errno

    from learn_to_shard.fidelity import stats as stats_mod
    from learn_to_shard.fidelity.measurements import default_table_path
    from learn_to_shard.report import compare as compare_mod
    from learn_to_shard.report import validate as validate_mod

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")   # no filename, like write(2)

    table = tmp_path / "t.csv"                  # two rows: the write is what is tested
    table.write_text("".join(Path(default_table_path()).read_text()
                             .splitlines(keepends=True)[:3]))
    monkeypatch.setattr(validate_mod, "save_json", full)
    monkeypatch.setattr(stats_mod, "silicon_report", lambda *_a, **_k: [])
    r = runner.invoke(app, ["validate", "--summary-only", "--table", str(table),
                            "--plot", str(tmp_path / "v.png"),
                            "--report", str(tmp_path / "v.json")])
    _one_line_error(r, "--report", str(tmp_path / "v.json"), "No space left")
    assert "None" not in r.stderr
    monkeypatch.setattr(compare_mod, "plot_convergence", full)
    r = _run("compare", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context",
             "10", "--methods", "random", "--budget", "20", "--seeds", "1", "-q",
             "--out", str(tmp_path / "out"))
    _one_line_error(r, "--out", "convergence.png", "No space left")


def test_flags_take_no_value_and_help_says_so():
    r = _run("plan", "--help")
    line = next(ln for ln in r.stdout.splitlines() if "--json" in ln)
    assert "<bool>" not in line
    # No flag of any command is shown taking a <bool> value, --help included.
    for cmd in ("plan", "validate", "compare", "pareto", "sweep", "size", "models", "devices",
                "engines"):
        shown = [ln for ln in _run(cmd, "--help").stdout.splitlines() if "<bool>" in ln]
        assert not shown, (cmd, shown)
    top = _run("--help")
    assert top.exit_code == 0 and "<bool>" not in top.stdout
    # The command list gives each command's one-line summary whole, not a docstring's first
    # lines broken where the source wraps them.
    listing = " ".join(top.stdout.split())
    assert "size Fewest devices of each kind (or lowest cost) that serve a request rate" in listing
    assert "pareto Frontier of tokens/s per device against tokens/s per user" in listing
    r = _run(*PLAN, "--json", "true")
    assert r.exit_code == 2 and "true" in r.output


# ---------------------------------------------------------------- issue 10: nothing overwritten
def test_output_may_not_be_an_input(tmp_path):
    from learn_to_shard.model.hf_config import _shipped_files

    model = tmp_path / "m.json"
    model.write_text(_shipped_files()["llama-3.1-8b"].read_text())
    before = model.read_text()
    r = _run("plan", "--model", str(model), "--cluster", "h100-sxm:8", "--context", "10",
             "-q", "-o", str(model))
    _one_line_error(r, "--output", "--model")
    folder = tmp_path / "llama"                       # a directory means its config.json
    folder.mkdir()
    (folder / "config.json").write_text(before)
    r = _run("plan", "--model", str(folder), "--cluster", "h100-sxm:8", "--context", "10",
             "-q", "-o", str(folder / "config.json"))
    _one_line_error(r, "--output", "--model")
    cluster = tmp_path / "c.json"
    cluster.write_text('{"device": "h100-sxm", "num_devices": 8}')
    r = _run("plan", "--model", "llama-3.1-8b", "--cluster", str(cluster), "--context", "10",
             "-q", "-o", str(tmp_path / "." / "c.json"))
    _one_line_error(r, "--output", "--cluster")
    link = tmp_path / "link.json"                     # the same file under another name
    link.symlink_to(model)
    r = _run("plan", "--model", str(model), "--cluster", "h100-sxm:8", "--context", "10",
             "-q", "-o", str(link))
    _one_line_error(r, "--output", "--model")
    assert model.read_text() == before
    out = tmp_path / "out"
    out.mkdir()
    (out / "compare.json").symlink_to(model)
    r = _run("compare", "--model", str(model), "--cluster", "h100-sxm:8", "--context", "10",
             "-q", "--out", str(out))
    _one_line_error(r, "compare.json", "--model")
    assert model.read_text() == before


def test_output_may_not_land_in_the_shipped_data(tmp_path):
    """A shipped name (``--model llama-3.1-8b``) reads a file of the package's data folder,
    which an editable install leaves writable: no output may land there."""
    from learn_to_shard.model.hf_config import _shipped_files

    shipped = _shipped_files()["llama-3.1-8b"]
    before = shipped.read_text()
    r = _run("plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10",
             "-q", "-o", str(shipped))
    _one_line_error(r, "--output", "shipped data")
    r = _run("plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10",
             "-q", "--export", "vllm", "-o", str(shipped.parent / ".." / "devices" / "x.sh"))
    _one_line_error(r, "--output", "shipped data")
    r = _run("pareto", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--phase", "serve",
             "--out", str(shipped.parent / "pareto-out"))
    _one_line_error(r, "--out", "shipped data")
    assert shipped.read_text() == before
    assert not (shipped.parent / "pareto-out").exists()
    # --write-factors may write the calibration folder's factors, and nothing else there
    # (the default --table, data/measurements.csv, is its input).
    from learn_to_shard.cli import _check_output
    from learn_to_shard.errors import PlannerError
    from learn_to_shard.fidelity.measurements import default_table_path

    inputs = ((default_table_path(), "--table"),)
    data = shipped.parent.parent
    _check_output(data / "calibration" / "factors.json", "--write-factors", inputs=inputs,
                  shipped_ok="calibration")
    for bad in (default_table_path(), shipped, data / "devices" / "h100-sxm.json"):
        with pytest.raises(PlannerError, match="--write-factors: .*shipped data"):
            _check_output(bad, "--write-factors", inputs=inputs, shipped_ok="calibration")


def test_validate_outputs_distinct_from_table_and_each_other(tmp_path):
    from learn_to_shard.fidelity.measurements import default_table_path

    table = tmp_path / "t.csv"
    table.write_text(Path(default_table_path()).read_text())
    r = runner.invoke(app, ["validate", "--table", str(table), "--report", str(table)])
    _one_line_error(r, "--report", "--table")
    r = runner.invoke(app, ["validate", "--plot", str(tmp_path / "x.png"),
                            "--report", str(tmp_path / "x.png")])
    _one_line_error(r, "--plot", "--report", "same file")


def test_unwritable_output_refused_before_work(tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root may write anywhere")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        r = _run(*PLAN, "-o", str(locked / "p.json"))
        _one_line_error(r, "--output", "not writable")
        r = _run("compare", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context",
                 "10", "-q", "--out", str(locked / "sub"))
        _one_line_error(r, "--out", "writable")
    finally:
        locked.chmod(0o700)


def test_unusable_output_name_is_one_line():
    r = _run(*PLAN, "-o", "x" * 5000 + ".json")
    _one_line_error(r, "--output")


def test_malformed_command_lines_are_one_line_exit_2():
    """Through the real entry point (``l2s``): an unknown option, a value for a flag, an
    unparsable number, a missing option and an option given twice are one ``error:`` line
    naming it, exit 2."""
    import subprocess
    import sys

    cases = [(["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "64",
               "--json", "true"], "--json: a flag, it takes no value"),
             (["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--budget", "1e12"],
              "--budget"),
             (["plan", "--bogus"], "--bogus"),
             (["plan", "--cluster", "h100-sxm:8"], "--model"),
             # click keeps a repeated option's last value without a word: refused
             (["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--phase",
               "serve", "--isl", "100", "--osl", "100", "-q", "--isl=5"],
              "--isl given 2 times (--isl 100, --isl 5); give it once (see l2s plan --help)"),
             (["plan", "-m", "llama-3.1-8b", "--model", "llama-3.1-70b", "--cluster",
               "h100-sxm:8"], "-m given 2 times (-m llama-3.1-8b, --model llama-3.1-70b)"),
             (["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--timing",
               "--no-timing"], "--timing given 2 times (--timing, --no-timing)"),
             # click's short spellings: a value attached, flags bundled
             (["plan", "-mllama-3.1-8b", "-m", "llama-3.1-70b", "-c", "h100-sxm:8"],
              "-m given 2 times (-m llama-3.1-8b, -m llama-3.1-70b)"),
             (["plan", "-m", "llama-3.1-8b", "-c", "h100-sxm:1", "-qo", "a.json", "-o",
               "b.json"], "-o given 2 times (-o a.json, -o b.json)")]
    for args, needle in cases:
        r = subprocess.run([sys.executable, "-c", "from learn_to_shard.cli import main; main()",
                            *args], capture_output=True, text=True, timeout=120)
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert r.returncode == 2, (args, r.stderr)
        assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
        assert "Traceback" not in r.stderr


def test_moe_routing_option_sets_the_expert_load():
    """--moe-routing: uniform routing alone, the default power law (exponent 1.2) or another
    exponent, recorded in the JSON's cost_model; a bad value or a dense model is one line
    naming the flag, exit 2."""
    base = ["plan", "--model", "mixtral-8x7b", "--cluster", "h100-sxm:8", "--phase", "serve",
            "--isl", "1000", "--osl", "1000", "--json", "--no-timing", "-q"]
    got = {}
    for value in ("uniform", "power-law", "power-law:2.5"):
        r = runner.invoke(app, [*base, "--moe-routing", value])
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        got[value] = doc
    assert got["uniform"]["cost_model"]["moe_routing_alpha"] is None
    assert got["power-law"]["cost_model"]["moe_routing_alpha"] == 1.2
    assert got["power-law:2.5"]["cost_model"]["moe_routing_alpha"] == 2.5
    assert got["uniform"]["moe_routing"] == "uniform random routing"
    assert got["power-law:2.5"]["moe_routing"] == "power-law expert load, exponent 2.5"
    # The text plan says it too, on the engine line.
    text = runner.invoke(app, [a for a in base if a not in ("--json", "--no-timing")]
                         + ["--moe-routing", "power-law:2.5"])
    assert "experts: power-law expert load, exponent 2.5" in text.stdout
    default = json.loads(runner.invoke(app, base).stdout)
    assert default["best"] == got["power-law"]["best"]
    # Skew costs the EP strategies, so uniform routing finds at least as much throughput.
    assert (got["uniform"]["best"]["tokens_per_s_per_device"]
            >= got["power-law"]["best"]["tokens_per_s_per_device"])
    for bad in ("bogus", "power-law:0", "power-law:x", "power-law:200"):
        r = runner.invoke(app, [*base, "--moe-routing", bad])
        assert r.exit_code == 2 and "--moe-routing" in r.output
        assert "Traceback" not in r.output
    r = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8",
                            "--context", "1024", "--moe-routing", "uniform"])
    assert r.exit_code == 2 and "dense" in r.output
    dense = json.loads(runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster",
                                           "h100-sxm:8", "--context", "1024", "--json",
                                           "-q"]).stdout)
    assert dense["moe_routing"] == ""


def test_validate_serving_summary_only_leaves_out_the_rows(tmp_path, monkeypatch):
    """``l2s validate --serving --summary-only`` prints the serving summaries without the
    per-row table; without ``--summary-only`` the table is there, one line per row."""
    from learn_to_shard.fidelity import serving as serving_mod
    from learn_to_shard.fidelity import stats as stats_mod
    from learn_to_shard.fidelity.measurements import default_table_path
    from learn_to_shard.fidelity.serving import ServingRowResult

    rows = [ServingRowResult("row-one", "held-out", "vllm", "", "", source_key="lab-a",
                             hardware="a100-80gb",
                             measured={"ttft_ms": 100.0}, predicted={"ttft_ms": 120.0}),
            ServingRowResult("row-two", "calibration", "sglang", "", "",
                             reason="no such model")]
    monkeypatch.setattr(serving_mod, "predict_table", lambda *_a, **_k: rows)
    monkeypatch.setattr(stats_mod, "silicon_report", lambda *_a, **_k: [])
    table = tmp_path / "t.csv"
    table.write_text("".join(Path(default_table_path()).read_text()
                             .splitlines(keepends=True)[:3]))
    common = ["validate", "--serving", "--table", str(table), "--plot",
              str(tmp_path / "v.png"), "--report", str(tmp_path / "v.json")]
    short = runner.invoke(app, [*common, "--summary-only"])
    assert short.exit_code == 0, short.output
    assert "serving held-out median |error|: TTFT 20.0% (n=1)" in short.stdout
    # the held-out rows per source and GPU: lab-a's one TTFT, 20% long
    line = next(ln for ln in short.stdout.splitlines() if ln.strip().startswith("lab-a"))
    assert line.split()[:4] == ["lab-a", "a100-80gb", "1", "20%"] and "(+20%, n=1)" in line
    assert "row-one" not in short.stdout and "measured → simulated" not in short.stdout
    full = runner.invoke(app, common)
    assert full.exit_code == 0, full.output
    assert "row-one" in full.stdout and "no such model" in full.stdout


def test_engine_line_names_the_serial_frontend_time_and_its_rate_cap():
    """The engine line's front-end clause gives the latency in TTFT and the serial time per
    request with the request rate it caps an instance at; neither when both are 0."""
    from learn_to_shard.report.render import _frontend_clause

    assert _frontend_clause({"frontend_latency_s": 0.02, "frontend_serial_s": 0.005}) == (
        ", front-end 20 ms per request in TTFT + 5 ms per request taken in one at a time "
        "(at most 200 requests/s per instance)")
    assert _frontend_clause({"frontend_latency_s": 0.0, "frontend_serial_s": 0.0}) == ""
    assert _frontend_clause({"frontend_latency_s": 0.06}) == \
        ", front-end 60 ms per request in TTFT"


def test_plan_names_the_engines_frontend_time_in_ttft():
    """With --engine the plan's engine line names the front-end time per request its TTFT
    carries (the profile's fitted ``frontend_latency_s``) and the JSON records it; without
    --engine (no front-end time), or in the prefill phase, the line does not name one."""
    from learn_to_shard.cost.config import CostModelConfig

    fe = CostModelConfig.for_engine("vllm").frontend_latency_s
    assert fe > 0
    base = ["plan", "--model", "qwen3-8b", "--cluster", "h100-sxm:1", "--phase", "serve",
            "--isl", "1000", "--osl", "200", "--engine", "vllm"]
    text = runner.invoke(app, base)
    assert text.exit_code == 0, text.output
    assert f"front-end {fe * 1e3:g} ms per request in TTFT" in " ".join(text.stdout.split())
    doc = json.loads(runner.invoke(app, [*base, "--json", "--no-timing", "-q"]).stdout)
    assert doc["cost_model"]["frontend_latency_s"] == fe
    plain = runner.invoke(app, [a for a in base if a not in ("--engine", "vllm")])
    flat = " ".join(plain.stdout.split())            # the engine line may wrap
    assert "front-end" not in flat[flat.index("engine defaults:"):flat.index(" searched ")]
    # The prefill phase's TTFT does not carry it (a prefill pool's own time), so its plan
    # does not name it.
    prefill = runner.invoke(app, ["plan", "--model", "qwen3-8b", "--cluster", "h100-sxm:1",
                                  "--phase", "prefill", "--isl", "1000", "--engine", "vllm"])
    assert prefill.exit_code == 0 and "front-end" not in prefill.stdout


def test_plan_names_the_engines_host_time():
    """With --engine the engine line names the host time the profile's steps carry: each of
    its fitted per-step, per-sequence and per-prompt-layer terms that is not 0, and no other;
    the decode phase (no prompt steps) not the per-layer term of a prompt step. The
    TensorRT-engine profile and the defaults carry none, so their lines name none."""
    from learn_to_shard.cost.config import CostModelConfig

    base = ["plan", "--model", "qwen3-8b", "--cluster", "h100-sxm:1"]
    serve = [*base, "--phase", "serve", "--isl", "1000", "--osl", "200"]
    phrases = {"host_step_overhead_s": (1e3, "ms per step"),
               "host_seq_overhead_s": (1e6, "µs per sequence"),
               "eager_layer_overhead_s": (1e3, "ms per layer of a prompt step")}
    named = 0
    for engine in ("vllm", "sglang", "trtllm"):
        cfg = CostModelConfig.for_engine(engine)
        out = runner.invoke(app, [*serve, "--engine", engine])
        assert out.exit_code == 0, out.output
        text = " ".join(out.stdout.split())          # the engine line may wrap
        line = text[text.index(f"engine {engine}:"):text.index(" searched ")]
        for field, (scale, unit) in phrases.items():
            value = getattr(cfg, field)
            assert (f"{value * scale:g} {unit}" in line) == (value > 0), (engine, field)
            named += value > 0
    assert named >= 3                # the shipped fits carry host time on every engine
    for args in (serve, [*serve, "--engine", "trtllm-tensorrt"]):
        out = runner.invoke(app, args)
        assert out.exit_code == 0, out.output
        flat = " ".join(out.stdout.split())          # the engine line may wrap
        line = flat[flat.index("engine "):flat.index(" searched ")]
        assert "host time" not in line and "front-end" not in line
    decode = runner.invoke(app, [*base, "--phase", "decode", "--context", "1200",
                                 "--engine", "trtllm"])
    assert decode.exit_code == 0, decode.output
    assert "per layer of a prompt step" not in decode.stdout


def test_engine_optima_price_the_unrestricted_strategy_at_each_engines_costs():
    """Without --engine the plan sets each engine's best launchable strategy beside the
    unrestricted optimum, and prices the unrestricted optimum's own strategy under each
    engine's profile: host and front-end time only add, so on a dense BF16 model it is never
    above the unrestricted optimum; and an engine's exact optimum, searched over its space,
    is never below that same strategy when the engine can launch it as is and it breaks
    nothing at the engine's costs."""
    r = _run("plan", "--model", "qwen3-8b", "--cluster", "h100-sxm:2", "--phase", "serve",
             "--isl", "1000", "--osl", "200", "--tpot-slo", "40ms", "--json", "-q",
             "--no-timing")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    best = doc["best"]["tokens_per_s_per_device"]
    rows = doc["engine_optima"]
    assert {row["engine"] for row in rows} == {"vllm", "sglang", "trtllm"}
    for row in rows:
        same = row["unrestricted_under_engine_tokens_per_s_per_device"]
        assert same is not None and 0 < same <= best * (1 + 1e-9), row
        assert row["ratio_to_unrestricted"] == pytest.approx(
            row["tokens_per_s_per_device"] / best)
        if not row["unrestricted_not_expressible"] and \
                not row["unrestricted_under_engine_violations"]:
            assert row["tokens_per_s_per_device"] >= same * (1 - 1e-9), row
    # The engines' host and front-end time, not their layouts, is what separates them here.
    assert any(row["unrestricted_under_engine_tokens_per_s_per_device"] < best * 0.99
               for row in rows)
    text = _run("plan", "--model", "qwen3-8b", "--cluster", "h100-sxm:2", "--phase", "serve",
                "--isl", "1000", "--osl", "200", "--tpot-slo", "40ms")
    assert "unrestricted strategy at the" in text.stdout


def test_engines_are_refused_on_devices_they_do_not_run_on():
    """TensorRT-LLM runs on NVIDIA GPUs only, vLLM and SGLang on NVIDIA and AMD: --export or
    --engine on another vendor's device is one line naming the flag and the vendors, exit 2
    (no launch command for hardware the engine cannot use), and a plan without --engine
    leaves those engines out of its engine table."""
    base = ["plan", "--model", "llama-3.1-8b", "--phase", "serve", "--isl", "1024", "--osl",
            "256", "-q"]
    for cluster, flag, engine, vendor in (("mi300x:8", "--export", "trtllm", "an AMD device"),
                                          ("trainium2:16", "--export", "vllm",
                                           "an AWS Neuron device"),
                                          ("mi300x:8", "--engine", "trtllm", "an AMD device")):
        r = _run(*base, "--cluster", cluster, flag, engine)
        assert r.exit_code == 2, (cluster, flag, r.output)
        assert f"{flag} {engine}: {engine} runs on" in r.output and vendor in r.output
        assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
    # TensorRT-LLM's other runtime's profile is refused the same way.
    r = _run(*base, "--cluster", "mi300x:8", "--engine", "trtllm-tensorrt")
    assert r.exit_code == 2 and "trtllm runs on NVIDIA GPUs" in r.output
    ok = _run(*base, "--cluster", "mi300x:8", "--export", "vllm")
    assert ok.exit_code == 0 and "vllm serve" in ok.stdout
    doc = json.loads(_run(*base, "--cluster", "mi300x:8", "--json", "--no-timing").stdout)
    assert {row["engine"] for row in doc["engine_optima"]} == {"vllm", "sglang"}


def test_engines_that_cannot_load_the_checkpoint_are_refused_and_left_out_of_the_table():
    """An NVFP4 checkpoint on H100: TensorRT-LLM (either runtime's profile) is refused by
    --engine and by the API's plan(engine=...), one line, exit 2 / ConfigError, and the
    engine table of a plan without --engine lists only vLLM and SGLang (W4A16 Marlin there);
    on B200 all three are listed."""
    base = ["plan", "--model", "qwen3-235b-a22b-nvfp4", "--phase", "serve", "--isl", "1024",
            "--osl", "256", "-q"]
    r = _run(*base, "--cluster", "h100-sxm:8", "--engine", "trtllm-tensorrt")
    assert r.exit_code == 2 and "NVFP4 weights only with FP4 math" in r.output, r.output
    with pytest.raises(ConfigError, match=r"^engine trtllm: TensorRT-LLM 1\.2\.0rc2 runs NVFP4"):
        learn_to_shard.plan("qwen3-235b-a22b-nvfp4", "h100-sxm:8", "serve", isl=1024,
                            osl=256, engine="trtllm")
    doc = json.loads(_run(*base, "--cluster", "h100-sxm:8", "--json", "--no-timing").stdout)
    assert {row["engine"] for row in doc["engine_optima"]} == {"vllm", "sglang"}
    [gone] = doc["engine_optima_left_out"]          # and the table says why
    assert gone["engine"] == "trtllm" and "NVFP4 weights only with FP4 math" in gone["reason"]
    table = _run(*base, "--cluster", "h100-sxm:8")
    assert "trtllm: left out of the table: TensorRT-LLM 1.2.0rc2 runs NVFP4" in \
        " ".join(table.stdout.split())
    doc = json.loads(_run(*base, "--cluster", "b200:8", "--json", "--no-timing").stdout)
    assert "engine_optima_left_out" not in doc
    assert {row["engine"] for row in doc["engine_optima"]} == {"vllm", "sglang", "trtllm"}
    # on a device the engine does not run on at all, the vendor is the reason given
    r = _run(*base, "--cluster", "mi300x:8", "--engine", "trtllm")
    assert r.exit_code == 2 and "trtllm runs on NVIDIA GPUs" in r.output, r.output


def test_engine_table_prices_each_engine_with_the_kv_cache_its_auto_gives():
    """A ModelOpt FP8 checkpoint with FP8 KV scales: every engine's auto takes the FP8 KV,
    so each engine row of the table is the plan --engine gives (it was priced with the
    unrestricted plan's 16-bit KV, unlike --engine vllm)."""
    base = ["plan", "--model", "llama-3.1-70b-instruct-fp8", "--cluster", "h100-sxm:8",
            "--phase", "serve", "--isl", "1024", "--osl", "1024", "--json", "--no-timing",
            "-q"]
    rows = {r["engine"]: r for r in json.loads(_run(*base).stdout)["engine_optima"]}
    for engine in ("vllm", "sglang", "trtllm"):
        best = json.loads(_run(*base, "--engine", engine).stdout)["best"]
        assert rows[engine]["tokens_per_s_per_device"] == \
            pytest.approx(best["tokens_per_s_per_device"]), engine


def test_bad_lengths_name_the_flag_given_and_tiny_slos_print_in_microseconds():
    """``--isl 0`` names --isl (not --isl/--context), ``--osl -1`` in the serve phase says a
    positive length is needed (0 is refused too), and a 1 µs TPOT SLO prints as 1.00 µs in the
    reasons, not 0.00 ms."""
    base = ["plan", "--model", "qwen3-8b", "--cluster", "h100-sxm:1", "-q"]
    r = _run(*base, "--phase", "prefill", "--isl", "0")
    assert r.exit_code == 2 and "error: --isl: must be a positive token count, got 0" in r.output
    r = _run(*base, "--phase", "decode", "--context", "0")
    assert r.exit_code == 2 and "--context (or --isl): must be a positive" in r.output
    for osl in ("-1", "0"):
        r = _run(*base, "--phase", "serve", "--isl", "100", "--osl", osl)
        assert r.exit_code == 2
        assert f"--osl: the serve phase needs a positive output length, got {osl}" in r.output
    r = _run(*base, "--phase", "serve", "--isl", "100", "--osl", "10", "--tpot-slo", "1us")
    assert r.exit_code == 1 and "> SLO 1.00 µs" in r.output


def test_trace_values_and_outputs_onto_inputs_are_one_line_errors(tmp_path):
    """A trace row with ``inf``, a fractional or underscored token count, fewer or more
    fields than the header (an unused column's too), or a header naming a column twice (the
    last one was read), is one error line
    naming the file, row and column (no traceback); -o onto the --trace file, or onto
    the --report folder, is refused before anything is written."""
    head = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--phase", "serve",
            "--isl", "100", "--osl", "10", "-q"]
    for body, want in (("0,inf,10\n", "row 2: ContextTokens 'inf' is not a whole number"),
                       ("0,100.5,10\n", "row 2: ContextTokens '100.5' is not a whole number"),
                       ("0,100\n", "row 2 has fewer fields than the header (3)"),
                       ("0,100,10,7\n", "row 2 has more fields than the header (3)"),
                       ("ragged", "row 3 has fewer fields than the header (4)"),
                       ("0,1_000,10\n", "row 2: ContextTokens '1_000' is not a whole"),
                       ("dup", "the header names 'isl' more than once")):
        f = tmp_path / "t.csv"
        f.write_text("arrival_s,isl,osl,isl\n0,100,10,7\n" if body == "dup" else
                     "arrival_s,isl,osl,user\n0,100,10,a\n1,100,10\n" if body == "ragged"
                     else head + body)
        r = _run(*base, "--trace", str(f))
        assert r.exit_code == 2 and want in r.output and "Traceback" not in r.output, r.output
    f = tmp_path / "ok.csv"
    f.write_text(head + "0,100,10\n1,100,10\n")
    r = _run(*base, "--trace", str(f), "-o", str(f))
    assert r.exit_code == 2 and "is the --trace input" in r.output
    assert f.read_text().startswith("TIMESTAMP")
    rep = tmp_path / "rep"
    r = _run(*base, "--report", str(rep), "-o", str(rep))
    assert r.exit_code == 2 and "--report and --output are the same path" in r.output


def test_a_load_whose_longest_request_no_strategy_can_hold_names_its_flag():
    """Llama-3.1-8B on one RTX 4090 under vLLM (KV on demand, so the plan fits its mean
    occupancy) with requests up to 60,000 tokens (--range-ratio 0.5 around 30,000 + 10,000):
    no strategy's KV pool (46,556 tokens) holds the longest, so the command says so
    naming --range-ratio and the pools, exit 2, instead of a simulation error."""
    r = _run("plan", "--model", "llama-3.1-8b", "--cluster", "rtx-4090:1", "--phase", "serve",
             "--isl", "30000", "--osl", "10000", "--concurrency", "2", "--range-ratio", "0.5",
             "--engine", "vllm", "-q")
    assert r.exit_code == 2, r.output
    assert "--range-ratio: the load's longest request (60,000 tokens) does not fit the KV " \
           "pool" in " ".join(r.output.split())


def test_python_api_refuses_bad_arguments_with_its_own_error():
    """learn_to_shard.plan with arguments of the wrong kind raises ConfigError naming the
    argument, never a bare AttributeError / TypeError, and a budget beyond the CLI's range
    is refused before any search (it would run for hours)."""
    import learn_to_shard
    from learn_to_shard.errors import ConfigError

    ok = {"context": 1024, "method": "random"}
    for kw, name in (({"budget": "10"}, "budget"), ({"budget": 10.5}, "budget"),
                     ({"budget": 10**8}, "budget"), ({"seed": "a"}, "seed"),
                     ({"progress": 5}, "progress"), ({"config": {"a": 1}}, "config"),
                     ({"context_parallel": "no"}, "context_parallel")):
        with pytest.raises(ConfigError, match=name):
            learn_to_shard.plan("qwen3-8b", "h100-sxm:1", "decode", **{**ok, **kw})
    with pytest.raises(ConfigError, match="model"):
        learn_to_shard.plan(None, "h100-sxm:1", "decode", **ok)      # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="cluster"):
        learn_to_shard.plan("qwen3-8b", 8, "decode", **ok)            # type: ignore[arg-type]


def test_load_flags_name_themselves_and_engine_specific_passes_are_refused():
    """--range-ratio without a load names --range-ratio alone; --num-prompts below
    --concurrency is refused (the clients could never all be busy); --sequence-parallel under
    an engine that has no launch option for it is refused, not priced and dropped."""
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:2", "--phase", "serve",
            "--isl", "100", "--osl", "10", "-q"]
    r = _run(*base, "--range-ratio", "0.5")
    assert r.exit_code == 2 and "error: --range-ratio: only with --concurrency or " \
        "--request-rate, whose simulated load it shapes" in " ".join(r.output.split())
    r = _run(*base, "--concurrency", "64", "--num-prompts", "10")
    assert r.exit_code == 2 and "--num-prompts 10 < --concurrency 64" in r.output
    r = _run(*base, "--concurrency", "64", "--num-prompts", "-5")    # its own range first
    assert r.exit_code == 2 and "--num-prompts: must be in 1..1,000,000, got -5" in r.output
    r = _run(*base, "--engine", "sglang", "--sequence-parallel")
    assert r.exit_code == 2 and "--sequence-parallel: sglang has no launch option" in r.output
    r = _run(*base, "--engine", "vllm", "--sequence-parallel")
    assert r.exit_code == 2 and "vLLM 0.33.0 dropped its sequence-parallelism" in r.output


def test_phase_and_engine_values_are_case_insensitive():
    """--phase SERVE --engine VLLM plans as --phase serve --engine vllm (device names were
    already case-insensitive)."""
    base = ["plan", "--model", "qwen3-8b", "--cluster", "H100-SXM:1", "--isl", "100",
            "--osl", "10", "--json", "-q", "--no-timing"]
    upper = _run(*base, "--phase", "SERVE", "--engine", "VLLM")
    lower = _run(*base, "--phase", "serve", "--engine", "vllm")
    assert upper.exit_code == 0 and lower.exit_code == 0, upper.output
    assert json.loads(upper.stdout)["best"] == json.loads(lower.stdout)["best"]


def _table_rows(*args: str) -> dict[str, list[str]]:
    """The rows of the rich table ``l2s ARGS`` prints: first cell -> the other cells."""
    r = _run(*args)
    assert r.exit_code == 0, r.output
    return {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in r.output.splitlines()
            if line.startswith("│") and line.split("│")[1].strip()}


def test_models_and_devices_list_names_or_a_table_with_long():
    """``l2s models`` / ``l2s devices`` print one name per line (for scripts); ``--long`` a
    table of each one's shape or datasheet figures, read from the same specs the planner
    uses (a parameter count, the weight format of a 4-bit checkpoint, the context limit; a
    device's memory in GiB and its aliases)."""
    from learn_to_shard.hardware.presets import device_names
    from learn_to_shard.model.hf_config import shipped_model_names

    r = _run("models")
    assert r.exit_code == 0 and r.output.split() == shipped_model_names()
    rows = _table_rows("models", "--long")
    assert set(shipped_model_names()) <= set(rows)
    assert rows["llama-3.1-70b"][1:4] == ["70.6", "69.5", "80"]
    assert rows["gpt-oss-120b"][-1] == "mxfp4 (experts)" and rows["deepseek-v3"][-1] == "fp8"
    assert rows["deepseek-v3"][4].startswith("MLA 128 heads") and rows["qwen3-8b"][5] == "dense"
    # Falcon's config states no limit: FalconConfig's default 2,048, as the engines read it
    assert rows["falcon-7b-instruct"][-2] == "2,048" and rows["qwen3-8b"][-2] == "40,960"
    r = _run("devices")
    assert r.exit_code == 0 and r.output.split() == device_names()
    rows = _table_rows("devices", "-l")
    assert set(device_names()) <= set(rows)
    assert rows["h100-sxm"][1:4] == ["h100", "80", "989"]
    assert rows["rtx-4090"][2] == "24" and rows["mi300x"][4] == "2,615"
    assert "72 (hosts of 4)" in " ".join(rows["gb200-nvl72"])



def test_fp8_weights_of_a_16_bit_checkpoint_under_tensorrt_llm_are_refused():
    """TensorRT-LLM has no online FP8 quantisation: --dtype fp8 on a BF16 checkpoint under
    --export trtllm (or --engine trtllm) priced FP8 weights, then exported BF16 servers
    that run out of memory. It is one line, exit 2; an FP8 checkpoint, or vLLM (which
    quantises at load), plans as before."""
    base = ["plan", "--cluster", "h100-sxm:8", "--phase", "serve", "--isl", "1024", "--osl",
            "256", "--method", "megatron", "-q"]
    for flag in (["--export", "trtllm"], ["--engine", "trtllm"]):
        r = _run(*base, "--model", "llama-3.1-70b", "--dtype", "fp8", *flag)
        assert r.exit_code == 2 and "TensorRT-LLM has no online FP8 quantisation" in r.output
        assert "Traceback" not in r.output
    r = _run(*base, "--model", "llama-3.1-70b-instruct-fp8", "--dtype", "fp8", "--export",
             "trtllm")
    assert r.exit_code == 0 and "trtllm-serve" in r.output
    r = _run(*base, "--model", "llama-3.1-70b", "--dtype", "fp8", "--export", "vllm")
    assert r.exit_code == 0 and "--quantization fp8" in r.output


def test_an_unknown_method_is_refused_before_any_work():
    """--method foo is one error line before the progress bar starts (it left a blank line
    above the error), in plan and size alike; a one-request trace is 'trace of 1 request'."""
    for cmd in (["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1"],
                ["size", "--model", "llama-3.1-8b", "--rate", "1", "--devices", "h100-sxm"]):
        r = _run(*cmd, "--phase", "serve", "--isl", "100", "--osl", "10", "--method", "foo")
        assert r.exit_code == 2
        assert r.output.startswith("error: --method: 'foo' is not one of auto, exact")
    import numpy as np

    from learn_to_shard.serving import Requests, ServingLoad
    one = Requests(np.array([10]), np.array([2]), np.array([0.0]))
    assert ServingLoad(trace=one).describe() == "trace of 1 request"


def test_a_value_after_a_flag_names_the_flag():
    """Click says only "Got unexpected extra argument(s) (true)"; after an option the line
    names the option (the README's promise for --json true)."""
    from learn_to_shard.cli import _flag_value_message

    msg = "Got unexpected extra argument(s) (true)"
    got = _flag_value_message(msg, ["plan", "--model", "m", "--json", "true"])
    assert got.startswith("--json: a flag, it takes no value; got 'true'")
    assert _flag_value_message(msg, ["plan", "--context", "10", "true"]) == msg
    assert _flag_value_message("No such option: --jsn", ["plan", "--jsn"]) == \
        "No such option: --jsn"


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGPIPE"), reason="POSIX only")
def test_a_reader_that_closes_early_ends_l2s_by_sigpipe():
    """`l2s plan ... | head -1`: SIGPIPE (the shell's 141), not click's exit 1, which the
    README's table reserves for "no strategy fits"."""
    import signal
    import subprocess
    import sys

    p = subprocess.Popen(
        [sys.executable, "-c", "from learn_to_shard.cli import main; main()", "plan",
         "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "10", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()                   # closed before l2s writes its first byte
    err = p.stderr.read()
    p.wait(timeout=120)
    assert p.returncode == -signal.SIGPIPE, (p.returncode, err)
    assert b"Traceback" not in err


def test_engine_table_says_the_unrestricted_optimum_is_no_upper_bound_when_an_engine_beats_it():
    """An engine row above 1.0000 × unrestricted (its profile's memory policy fits a larger
    batch) is explained under the table; without one, nothing is added."""
    import io

    from rich.console import Console

    from learn_to_shard.cli import _render_optima

    def row(engine: str, ratio: float) -> dict:
        return {"engine": engine, "version": "x", "strategy": "tp8 b100",
                "tokens_per_s_per_device": 100.0 * ratio, "ratio_to_unrestricted": ratio,
                "unrestricted_not_expressible": [],
                "unrestricted_under_engine_tokens_per_s_per_device": None,
                "unrestricted_under_engine_violations": None}

    def text(rows: list[dict]) -> str:
        buf = io.StringIO()
        _render_optima([(r, None) for r in rows], Console(file=buf, width=200))
        return buf.getvalue()

    assert "Not an upper bound: trtllm (1.0980)" in text([row("vllm", 0.9),
                                                          row("trtllm", 1.098)])
    assert "Not an upper bound" not in text([row("vllm", 0.9), row("trtllm", 1.0)])
    # The HTML / Markdown report's Engines section carries the same line.
    from learn_to_shard.report.html import not_upper_bound_note
    assert not_upper_bound_note([row("trtllm", 1.098)]).startswith(
        "Not an upper bound: trtllm (1.0980)")
    assert not_upper_bound_note([row("vllm", 0.5)]) is None


def test_osl_zero_and_a_non_integer_context_are_refused_naming_their_flag():
    """``--osl 0`` is refused for decode and prefill as any --osl is (it was ignored as "not
    given"), and a non-integer decode context names ``--context``, not ``--isl``."""
    from learn_to_shard.api import make_workload
    from learn_to_shard.errors import ConfigError
    for phase, extra in (("decode", ["--context", "512"]), ("prefill", ["--isl", "512"])):
        r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster",
                                     "h100-sxm:1", "--phase", phase, *extra, "--osl", "0"])
        assert r.exit_code == 2 and f"--osl has no meaning for --phase {phase}" in r.output
    for bad in (True, 1.5):
        with pytest.raises(ConfigError, match="^--context: must be a whole number"):
            make_workload("decode", context=bad)


def test_pareto_refuses_an_export_for_another_engine_than_it_prices(tmp_path):
    """``l2s pareto --engine vllm --export trtllm`` priced the frontier with vLLM's profile
    and printed trtllm-serve commands; it is refused as ``l2s plan`` refuses it."""
    r = CliRunner().invoke(app, ["pareto", "-m", "llama-3.1-8b", "-c", "h100-sxm:1",
                                 "--phase", "serve", "--isl", "512", "--osl", "128",
                                 "--engine", "vllm", "--export", "trtllm",
                                 "--out", str(tmp_path / "p")])
    assert r.exit_code == 2 and "--engine vllm with --export trtllm" in r.output


def test_a_config_json_with_a_byte_order_mark_is_read(tmp_path):
    """A config.json saved with a UTF-8 byte-order mark (some Windows editors) reads as
    without one, as traces and cluster files do."""
    from learn_to_shard.model.hf_config import load_model
    src = Path(__file__).resolve().parents[1] / "src/learn_to_shard/data/models/llama-3.1-8b.json"
    bom = tmp_path / "config.json"
    bom.write_bytes(b"\xef\xbb\xbf" + src.read_bytes())
    assert load_model(str(bom)).hidden_size == load_model("llama-3.1-8b").hidden_size


def test_an_slo_under_a_microsecond_is_refused():
    """``--tpot-slo 0.0001us`` printed 'SLO 0.00 µs'; an SLO under 1 µs (shorter than any
    kernel) is refused naming the flag, 1us itself is read."""
    from learn_to_shard.errors import ConfigError
    from learn_to_shard.units import parse_duration_s
    with pytest.raises(ConfigError, match="^--tpot-slo: '0.0001us' is under 1us"):
        parse_duration_s("0.0001us", field="--tpot-slo")
    assert parse_duration_s("1us", field="--tpot-slo") == pytest.approx(1e-6)


def test_the_same_slo_in_any_unit_is_the_same_seconds_and_json():
    """``51ms``, ``0.051s`` and ``51000us`` are one float (the decimal value rounded once,
    not ``51 * 1e-3``), so the same question asked in two units gives byte-identical JSON."""
    from learn_to_shard.errors import ConfigError
    from learn_to_shard.units import parse_duration_s
    for huge in ("1e1000000s", "1e-1000000s"):          # past decimal's exponent range
        with pytest.raises(ConfigError, match="must be positive and finite"):
            parse_duration_s(huge, field="--tpot-slo")
    for v in range(1, 1001):
        secs = {parse_duration_s(f"{v}{u}", field="--tpot-slo")
                for u in ("ms", "e3us", "e6ns")}
        secs.add(parse_duration_s(f"{v}e-3s", field="--tpot-slo"))
        assert secs == {float(f"{v}e-3")}, (v, secs)
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--phase", "serve",
            "--isl", "1024", "--osl", "256", "--json", "--no-timing", "-q", "--tpot-slo"]
    docs = [_run(*base, slo).stdout for slo in ("51ms", "0.051s", "51000us")]
    assert docs[0] == docs[1] == docs[2]
    assert json.loads(docs[0])["workload"]["tpot_slo_s"] == 0.051


def test_python_api_takes_numpy_numbers_and_its_plan_is_json():
    """NumPy integers and floats are taken for lengths, SLOs, budget and seed (as Python
    ints and floats are), and the plan's to_dict() serialises as it stands; an SLO under
    1 µs is refused from Python as on the command line."""
    import numpy as np

    import learn_to_shard
    from learn_to_shard.errors import ConfigError

    p = learn_to_shard.plan("llama-3.1-8b", "h100-sxm:1", "decode", context=np.int64(1024),
                            tpot_slo_s=np.float32(0.05), budget=np.int64(50),
                            seed=np.int64(3), method="random")
    doc = json.loads(json.dumps(p.to_dict()))
    assert doc["workload"]["isl"] == 1024 and doc["search"]["seed"] == 3
    p = learn_to_shard.plan("llama-3.1-8b", "h100-sxm:1", "serve", isl=np.int32(512),
                            osl=np.int16(64))
    assert type(p.workload.isl) is int and type(p.workload.osl) is int
    json.dumps(p.to_dict())
    # paths as pathlib.Path, as open() takes them
    from importlib import resources
    cfg = Path(str(resources.files("learn_to_shard") / "data" / "models" / "llama-3.1-8b.json"))
    assert learn_to_shard.plan(cfg, "h100-sxm:1", "serve", isl=512, osl=64).feasible
    with pytest.raises(ConfigError, match="^--tpot-slo: tpot_slo_s 1e-09 is under 1 µs"):
        learn_to_shard.plan("llama-3.1-8b", "h100-sxm:1", "serve", isl=10, osl=10,
                            tpot_slo_s=1e-9)


def test_names_are_case_insensitive_on_the_command_line_and_in_the_api():
    """--phase and --engine took any case, --dtype, --kv-dtype and --method did not, nor did
    the API's phase and dtypes: all do now, and give the lower-case answer byte for byte;
    an upper-case FP8 still meets TensorRT-LLM's refusal of online FP8."""
    import learn_to_shard
    from learn_to_shard.errors import ConfigError

    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--isl", "100",
            "--osl", "10", "--json", "--no-timing", "-q"]
    low = _run(*base, "--phase", "serve", "--dtype", "bf16", "--kv-dtype", "fp8",
               "--method", "exact").stdout
    up = _run(*base, "--phase", "SERVE", "--dtype", "BF16", "--kv-dtype", "FP8",
              "--method", "EXACT").stdout
    assert low == up and json.loads(low)["workload"]["kv_dtype"] == "fp8"
    p = learn_to_shard.plan("llama-3.1-8b", "h100-sxm:1", "SERVE", isl=100, osl=10,
                            dtype="BF16", kv_dtype="Fp8")
    assert (p.workload.phase.value, p.workload.kv_dtype.value) == ("serve", "fp8")
    with pytest.raises(ConfigError, match="TensorRT-LLM has no online FP8"):
        learn_to_shard.plan("llama-3.1-8b", "h100-sxm:1", "serve", isl=100, osl=10,
                            dtype="FP8", engine="trtllm")
    p = learn_to_shard.plan("llama-3.1-8b", "h100-sxm:1", "serve", isl=100, osl=10,
                            method="EXACT", engine="VLLM")
    assert (p.method_used, p.engine) == ("exact", "vllm")
    from learn_to_shard.sweep import grid_from_data
    g = grid_from_data({"models": ["llama-3.1-8b"], "clusters": ["h100-sxm:1"],
                        "workloads": [{"phase": "SERVE", "isl": 10, "osl": 10,
                                       "dtype": "BF16"}],
                        "engines": ["VLLM", "Default", {"name": "SGLang"}]}, "g.yaml")
    assert g.workloads[0].phase == "serve" and g.workloads[0].dtype == "bf16"
    assert [e.name for e in g.engines] == ["vllm", None, "sglang"]


def test_python_api_engine_and_config_together_and_wrong_kinds():
    """``plan(engine=E, config=cost_config(E, ...))`` searches what E launches with the
    config's settings (the way to set the memory fraction from Python); a config made for
    another engine, an engine on a device it does not run on, and arguments of the wrong
    kind raise ConfigError naming the argument, never AttributeError / TypeError."""
    import learn_to_shard
    from learn_to_shard.api import cost_config, make_cost_model
    from learn_to_shard.errors import ConfigError

    args = ("llama-3.1-70b", "h100-sxm:8", "serve")
    kw = {"isl": 1024, "osl": 1024, "tpot_slo_s": 0.05}
    p = learn_to_shard.plan(*args, **kw, engine="vllm",
                            config=cost_config("vllm", gpu_memory_utilization=0.8))
    assert p.engine == "vllm" and p.cost_model["memory_utilization"] == 0.8
    assert p.best is not None and p.best.strategy.dims[0] != 2     # embedding not replicated
    with pytest.raises(ConfigError, match="config: made for engine 'sglang', not 'vllm'"):
        learn_to_shard.plan(*args, **kw, engine="vllm", config=cost_config("sglang"))
    with pytest.raises(ConfigError, match="engine trtllm: .* mi300x is an AMD device"):
        learn_to_shard.plan("llama-3.1-8b", "mi300x:1", "serve", isl=100, osl=10,
                            engine="trtllm")
    bad = [(lambda: learn_to_shard.plan(*args, **kw, engine=3), "engine"),      # type: ignore
           (lambda: learn_to_shard.plan("qwen3-vl-235b-a22b-instruct", "h200:8", "serve",
                                        isl=100, osl=10, images_per_request="2"),
            "--images-per-request"),
           (lambda: learn_to_shard.plan("qwen3-vl-235b-a22b-instruct", "h200:8", "serve",
                                        isl=100, osl=10, images_per_request=1,
                                        image_tokens="1000"), "--image-tokens"),
           (lambda: cost_config("vllm", gpu_memory_utilization="0.9"),
            "--gpu-memory-utilization"),
           (lambda: cost_config("vllm", max_num_batched_tokens=100.5),
            "--max-num-batched-tokens"),
           (lambda: make_cost_model("llama-3.1-8b", "h100-sxm:1", None), "workload")]
    for call, name in bad:
        with pytest.raises(ConfigError, match=name):
            call()
    # NumPy scalars are numbers too; a pricing-only profile takes its own config
    import numpy as np
    assert cost_config("vllm", max_num_batched_tokens=np.int64(8192)).max_num_batched_tokens \
        == 8192
    assert cost_config("vllm", gpu_memory_utilization=np.float64(0.8)).memory_utilization == 0.8
    p = learn_to_shard.plan("llama-3.1-8b", "h100-sxm:1", "serve", isl=128, osl=64,
                            engine="trtllm-tensorrt",
                            config=cost_config("trtllm-tensorrt", gpu_memory_utilization=0.8))
    assert p.engine == "trtllm-tensorrt"


def test_output_probes_leave_nothing_and_keep_what_exists(tmp_path, monkeypatch):
    """The up-front probe of a --report folder creates and removes every missing folder (a
    name too long is refused before the search, with no folder left); a dangling link as -o
    is written through, as before; an existing launch file or device keeps its mode."""
    monkeypatch.chdir(tmp_path)
    long = "d/" + "a" * 300 + "/x"
    r = _run("plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--context", "10",
             "--report", long, "-q")
    assert r.exit_code == 2 and "cannot create" in r.stderr and not (tmp_path / "d").exists()
    (tmp_path / "dang.json").symlink_to("target.json")
    r = _run("plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--context", "10",
             "-o", "dang.json", "-q")
    assert r.exit_code == 0 and (tmp_path / "target.json").exists(), r.output
    mine = tmp_path / "mine.sh"
    mine.write_text("")
    mine.chmod(0o600)
    r = _run("plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--context", "10",
             "--export", "vllm", "-o", str(mine), "-q")
    assert r.exit_code == 0 and mine.read_text().startswith("#!/usr/bin/env bash")
    assert mine.stat().st_mode & 0o777 == 0o600


def test_the_engine_line_says_where_two_batch_overlap_is_not_priced():
    """--two-batch-overlap is priced only where the engine runs it (expert parallelism; for
    SGLang an all-to-all backend too): the plan's engine line says so where the best plan is
    not such a layout, instead of naming a feature its numbers do not include."""
    base = ["plan", "--model", "qwen3-30b-a3b", "--phase", "serve", "--isl", "1024",
            "--osl", "256", "-q", "--two-batch-overlap"]
    r = CliRunner().invoke(app, [*base, "--cluster", "h100-sxm:2", "--engine", "sglang"])
    assert r.exit_code == 0, r.output
    assert "two-batch overlap (not priced: SGLang runs it only with --moe-a2a)" in \
        " ".join(r.output.split())
    r = CliRunner().invoke(app, [*base, "--cluster", "h100-sxm:1", "--engine", "vllm"])
    assert r.exit_code == 0, r.output
    assert "two-batch overlap (not priced: the best plan has EP 1, and it needs EP)" in \
        " ".join(r.output.split())
    r = CliRunner().invoke(app, [*base, "--cluster", "h100-sxm:2", "--engine", "vllm"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "two-batch overlap," in flat and "not priced" not in flat


def test_the_engine_line_names_the_step_budget_and_kv_policy_only_for_serve():
    """The token budget and the KV sizing policy shape only serve steps: a decode plan prices
    steady decoding at its context and a prefill plan whole prompts, so their engine lines
    do not name a budget they do not apply."""
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--engine", "vllm",
            "-q"]
    for phase in (["--phase", "decode", "--context", "4096"],
                  ["--phase", "prefill", "--isl", "4096"]):
        r = CliRunner().invoke(app, [*base, *phase])
        assert r.exit_code == 0, r.output
        line = " ".join(next(ln for ln in r.output.splitlines()
                             if ln.startswith("engine vllm")).split())
        assert "batched tokens" not in line and "KV sized" not in line, line
    r = CliRunner().invoke(app, [*base, "--phase", "serve", "--isl", "1024", "--osl", "128"])
    assert "max 8192 batched tokens, KV sized at mean occupancy (paged)" in \
        " ".join(r.output.split())


def _idle_throughput(args: list[str], devices: str) -> tuple[float, float, float, str]:
    """Plan ``args`` (serve, 1024/256), check its devices line says ``devices``, and read its
    throughput line: (tokens/s per device, per instance, per device in use, the line)."""
    r = CliRunner().invoke(app, ["plan", "--phase", "serve", "--isl", "1024", "--osl", "256",
                                 "-q", *args])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.replace("│", " ").split())
    assert devices in flat, flat
    line = flat.split(f"{devices} throughput")[1].split("TPOT")[0]
    per_dev, per_inst, in_use = (float(x.replace(",", "")) for x in (
        line.split()[0], line.split("(")[1].split()[0], line.split("idle: ")[1].split()[0]))
    return per_dev, per_inst, in_use, line


def test_a_plan_with_idle_devices_says_what_its_devices_in_use_run_at():
    """Tokens/s per device counts the cluster's idle devices (the objective of issue 12 item
    7); a plan that leaves some idle says so on its throughput line and gives the rate of the
    devices in use, so the two per-device figures a user can compute do not disagree
    unexplained."""
    per_dev, per_inst, in_use, line = _idle_throughput(
        ["--model", "llama-3.1-70b", "--cluster", "h100-sxm:7", "--tpot-slo", "50ms",
         "--method", "megatron"], "4 per instance × 1 instance (3 idle)")
    assert "over all 7 devices, 3 idle" in line
    assert per_dev == pytest.approx(per_inst / 7, rel=2e-3)
    assert in_use == pytest.approx(per_inst / 4, rel=2e-3)


def test_devices_in_use_with_partly_loaded_replicas():
    """Two TP2 replicas on five GPUs (one idle) under 3 closed-loop clients: the replicas are
    not both full (1.5 replicas' worth, CostModel's replica_fraction), so the rate of the
    devices in use is the cluster's tokens/s over the 4 of them, not one instance's tokens/s
    over its 2 devices (which said 58.2 where the cluster runs 43.6 per device in use)."""
    import dataclasses

    from rich.console import Console

    from learn_to_shard.api import make_cost_model, make_workload, search_plan
    from learn_to_shard.report.render import render_plan

    cm = make_cost_model("llama-3.1-70b", "h100-sxm:5",
                         make_workload("serve", isl=1024, osl=256, dtype="fp8", concurrency=3))
    cm.space = dataclasses.replace(cm.space, tp_values=(2,), pp_values=(1,), dp_values=(1,),
                                   batch_values=(2,), any_batch=False)
    plan = search_plan(cm, method="exact")
    e = plan.best
    assert (e.strategy.tp, e.strategy.batch, e.instances, e.idle_devices) == (2, 2, 2, 1)
    con = Console(record=True, width=200)
    render_plan(plan, con)
    flat = " ".join(con.export_text().replace("│", " ").split())
    line = flat.split("(1 idle) throughput")[1].split("TPOT")[0]
    in_use = float(line.split("idle: ")[1].split()[0].replace(",", ""))
    # 1.5 replicas' worth over the 4 devices in use, from the unrounded figure
    assert in_use == pytest.approx(e.tokens_per_s_per_device * 5 / 4, abs=0.05)
    assert in_use == pytest.approx(e.output_tokens_per_s * 1.5 / 4, abs=0.05)


@pytest.mark.parametrize("engine", ["trtllm", "trtllm-tensorrt"])
@pytest.mark.parametrize("flag", [["--two-batch-overlap"], ["--moe-a2a", "deepep"]])
def test_moe_communication_options_are_refused_on_both_tensorrt_llm_runtimes(engine, flag):
    """TensorRT-LLM's launch settings this planner checks exports against hold neither
    DeepEP nor two-batch overlap, on its PyTorch runtime or its TensorRT-engine one: both
    refuse the options (the TensorRT-engine profile priced the overlap and named it)."""
    r = CliRunner().invoke(app, ["plan", "--model", "qwen3-30b-a3b", "--cluster", "h100-sxm:2",
                                 "--phase", "serve", "--isl", "1024", "--osl", "256", "-q",
                                 "--engine", engine, *flag])
    assert r.exit_code == 2, r.output
    assert f"with --engine {engine}: not expressible in TensorRT-LLM's launch settings" in \
        " ".join(r.output.split())


def test_an_engine_without_a_feasible_plan_shows_no_numbers(tmp_path):
    """An engine whose profile meets no plan (vLLM's 60 ms front-end under a 40 ms TTFT SLO)
    is 'none feasible' with no tokens/s or ratio in the console table and in the report
    (the report printed a Python None beside 0.0 tok/s/device and x 0.0000)."""
    rep = tmp_path / "rep"
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                                 "--phase", "serve", "--isl", "1024", "--osl", "128",
                                 "--ttft-slo", "40ms", "-q", "--report", str(rep)])
    assert r.exit_code == 0, r.output
    row = next(ln for ln in r.output.splitlines() if ln.startswith("│ vllm"))
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells[1:4] == ["none feasible", "–", "–"], cells
    md = (rep / "report.md").read_text(encoding="utf-8")
    line = next(ln for ln in md.splitlines() if ln.startswith("| vllm"))
    assert "| none feasible | – | – |" in line and "None" not in line


def test_a_prefill_report_says_prompt_tokens(tmp_path):
    """A prefill plan's throughput is prompt tokens/s, as the console says; the report said
    'tokens/s per device' beside a TPOT of '—'."""
    rep = tmp_path / "rep"
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                                 "--phase", "prefill", "--isl", "4096", "-q", "--report",
                                 str(rep)])
    assert r.exit_code == 0, r.output
    md = (rep / "report.md").read_text(encoding="utf-8")
    assert "prompt tokens/s per device" in md


def test_durations_read_units_in_any_case_and_refuse_negatives_as_such():
    """``50MS`` is 50 ms (units in any case, as device names); ``-50ms`` and ``-50`` are
    refused as not positive (they read as 'cannot read duration' and 'no unit')."""
    from learn_to_shard.errors import ConfigError
    from learn_to_shard.units import parse_duration_s
    assert parse_duration_s("50MS", field="--tpot-slo") == parse_duration_s(
        "50ms", field="--tpot-slo")
    for text in ("-50ms", "-50"):
        with pytest.raises(ConfigError, match="^--tpot-slo: duration must be positive"):
            parse_duration_s(text, field="--tpot-slo")


def test_shipped_model_names_in_any_case_and_a_suggestion_for_a_typo():
    """``--model Llama-3.1-8B`` is the shipped ``llama-3.1-8b`` (cluster presets were read in
    any case, model names were not), and ``llama3.1-8b`` names the closest shipped model."""
    from learn_to_shard.errors import ConfigError
    from learn_to_shard.model.hf_config import load_model
    assert load_model("Llama-3.1-8B") == load_model("llama-3.1-8b")
    with pytest.raises(ConfigError, match="did you mean llama-3.1-8b\\?"):
        load_model("llama3.1-8b")


def test_size_says_when_its_fleet_meets_the_slos_on_the_mean_only():
    """``l2s size`` checks its fleet by simulation on the mean, as the search does; where the
    p90 misses an SLO it says so, as ``l2s plan``'s simulation warning does for the same
    replica (it said 'keeps up within the SLOs' beside a p99 TTFT three times the SLO)."""
    r = CliRunner().invoke(app, ["size", "--model", "llama-3.1-70b", "--rate", "20", "--isl",
                                 "2048", "--osl", "512", "--tpot-slo", "40ms", "--ttft-slo",
                                 "2s", "--devices", "h100-sxm", "--max-devices", "16",
                                 "--engine", "vllm"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "keeps up within the SLOs on the mean" in flat
    assert "within the SLOs on the mean only, not at p90: TTFT SLO 2000 ms" in flat


def test_quiet_export_of_an_infeasible_plan_says_why(tmp_path):
    # -q prints no plan, so the line that says why nothing was exported carries the reasons
    r = _run("plan", "--model", "llama-3.1-405b", "--cluster", "h100-sxm:4", "--phase",
             "serve", "--isl", "1024", "--osl", "256", "--export", "vllm", "-q", "-o",
             str(tmp_path / "x.sh"))
    assert r.exit_code == 1, r.output
    assert "no feasible strategy to export" in r.stderr
    assert "weights alone exceed" in r.stderr and "memory" in r.stderr
    assert not (tmp_path / "x.sh").exists()


def test_progress_follows_stderr_not_json(monkeypatch):
    # The bar goes to stderr: --json (stdout) keeps it where stderr is a terminal, and a
    # stderr that is a file gets no bar at all (not even its closing line).
    import io

    from rich.console import Console

    import learn_to_shard.cli as cli_mod

    args = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "512",
            "--method", "random", "--budget", "200", "--json"]
    tty = io.StringIO()
    monkeypatch.setattr(cli_mod, "err", Console(file=tty, force_terminal=True, width=120))
    r = _run(*args)
    assert r.exit_code == 0 and json.loads(r.stdout)["best"]
    assert "random search" in tty.getvalue()
    quiet_tty = io.StringIO()
    monkeypatch.setattr(cli_mod, "err", Console(file=quiet_tty, force_terminal=True))
    assert _run(*args, "-q").exit_code == 0
    assert "random search" not in quiet_tty.getvalue()
    piped = io.StringIO()
    monkeypatch.setattr(cli_mod, "err", Console(file=piped, force_terminal=False))
    assert _run(*args).exit_code == 0
    assert piped.getvalue() == ""


@pytest.mark.parametrize("rope,says", [
    ({"type": "linear", "factor": 4.0}, "its rope_scaling type 'linear' (factor 4), which "
                                        "vLLM and SGLang multiply it by, is not followed"),
    ({"rope_type": "dynamic", "factor": 2.0}, "type 'dynamic' (factor 2)"),
    ({"type": "linear", "factor": 1.0}, None),
])
def test_a_longer_request_than_an_unfollowed_rope_scaling_says_why(tmp_path, rope, says):
    """A config whose linear or dynamic ``rope_scaling`` the engines would apply (vLLM and
    SGLang multiply ``max_position_embeddings`` by its factor) and l2s does not: the refusal
    says so, instead of suggesting a rope_scaling the config already has."""
    shipped = Path(__file__).resolve().parents[1] / "src/learn_to_shard/data/models"
    cfg = json.loads((shipped / "llama-3.1-8b.json").read_text())
    cfg["rope_scaling"] = rope
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = _run("plan", "--model", str(path), "--cluster", "h100-sxm:8", "--phase", "serve",
             "--isl", "200000", "--osl", "256", "--quiet")
    assert r.exit_code == 2
    err = " ".join(r.stderr.split())
    assert "exceeds" in err and "131072" in err and "(or YaRN rope_scaling)" in err
    if says is None:
        assert "not followed" not in err
    else:
        assert says in err


def test_piped_tables_follow_columns():
    """Written to a pipe or file the tables are 160 columns wide unless ``$COLUMNS`` says
    otherwise (``COLUMNS=80 l2s plan … | less``); a value that is not a positive whole
    number is ignored."""
    args = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--context", "4096"]
    widths = {}
    for columns in ("80", "abc", None):
        env = {"COLUMNS": columns} if columns is not None else {}
        r = runner.invoke(app, args, env=env)
        assert r.exit_code == 0, r.output
        widths[columns] = max(len(line) for line in r.stdout.splitlines())
    assert widths["80"] <= 80 < widths[None] <= 160
    assert widths["abc"] == widths[None]


def test_conflicting_load_flags_are_named_before_the_trace_is_read(tmp_path):
    """Two load flags at once is the error, whatever the trace file holds (or whether it
    exists): not the trace's read error, which would send the user to fix the wrong flag."""
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--phase", "serve",
            "--isl", "100", "--osl", "10"]
    for flags in (["--concurrency", "8", "--trace", str(tmp_path / "missing.csv")],
                  ["--request-rate", "2", "--trace", str(tmp_path / "missing.csv")],
                  ["--concurrency", "8", "--request-rate", "2"]):
        _one_line_error(runner.invoke(app, [*base, *flags]),
                        "--concurrency, --request-rate, --trace: give exactly one")
    # outside the serve phase the phase they need is named first (one round of fixes)
    decode = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--context", "1000"]
    _one_line_error(runner.invoke(app, [*decode, "--concurrency", "8", "--request-rate", "5"]),
                    "a simulated load needs --phase serve")


def test_a_forgotten_phase_serve_is_named_not_planned_as_decode(tmp_path):
    """``--isl`` without ``--phase serve`` planned decode at a context of --isl, exit 0 (a
    newcomer's mistake, silently answered); it is refused naming --context and --phase
    serve. A load flag without --phase serve names the phase before decode's --context."""
    base = ["plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8"]
    r = CliRunner().invoke(app, [*base, "--isl", "1024", "--tpot-slo", "50ms"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "--isl is a prompt length (prefill/serve); the decode phase " \
        "takes --context" in " ".join(r.output.split())
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,isl,osl\n0,100,10\n")
    for flags, named in ((["--trace", str(trace)], "--trace"),
                         (["--request-rate", "2"], "--request-rate"),
                         (["--concurrency", "4"], "--concurrency")):
        r = CliRunner().invoke(app, [*base, *flags])
        assert r.exit_code == 2 and f"{named}: a simulated load needs --phase serve" in \
            r.output, r.output
    ok = CliRunner().invoke(app, [*base, "--context", "1024", "--tpot-slo", "50ms", "-q"])
    assert ok.exit_code == 0, ok.output


def test_make_cost_model_refuses_what_it_would_ignore():
    """``make_cost_model`` with an unknown engine name restricted nothing, silently (a
    mis-cased one too); a non-string model raised AttributeError from deep inside, and a
    list dtype TypeError. Names fold case as ``plan`` folds them; a path may be os.PathLike."""
    from pathlib import Path

    from learn_to_shard.api import make_cost_model, make_workload

    wl = make_workload("serve", isl=1024, osl=256)
    assert make_cost_model("qwen3-30b-a3b", "h100-sxm:8", wl,
                           engine="VLLM").space.engine.name == "vllm"
    with pytest.raises(ConfigError, match="'vlm' is not an engine profile"):
        make_cost_model("qwen3-30b-a3b", "h100-sxm:8", wl, engine="vlm")
    for bad in (5, None):
        with pytest.raises(ConfigError, match="model: a shipped name, a config.json path"):
            make_cost_model(bad, "h100-sxm:8", wl)                  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="cluster: 'DEVICE:COUNT'"):
        make_cost_model("llama-3.1-8b", 8, wl)                     # type: ignore[arg-type]
    shipped = Path(learn_to_shard.__file__).parent / "data" / "models" / "llama-3.1-8b.json"
    assert make_cost_model(shipped, "h100-sxm:1", wl).model.name == "llama-3.1-8b"
    with pytest.raises(ConfigError, match="--dtype: \\['bf16'\\] is not one of"):
        learn_to_shard.plan("llama-3.1-8b", "h100-sxm:1", "serve", isl=10, osl=10,
                            dtype=["bf16"])                        # type: ignore[arg-type]
