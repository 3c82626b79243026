"""The command line: exit codes, one-line errors, JSON output."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from learn_to_shard.cli import app

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
      "--osl", "8", "--max-num-batched-tokens", "0"), "positive number of tokens"),
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
