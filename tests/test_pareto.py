"""``l2s pareto``: the frontier of tokens/s per device against tokens/s per user."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from learn_to_shard.api import cost_config, make_cost_model, make_workload
from learn_to_shard.cli import app
from learn_to_shard.report.pareto import frontier_mask, pareto


def test_frontier_mask_against_brute_force():
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 20, 300).astype(float), rng.integers(0, 20, 300).astype(float)
    keep = frontier_mask(x, y)
    dominated = np.array([((x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i]))).any()
                          for i in range(len(x))])
    # Exact duplicates of a frontier point are kept once.
    assert not (keep & dominated).any()
    pts = {(a, b) for a, b, d in zip(x, y, dominated, strict=True) if not d}
    assert {(a, b) for a, b, k in zip(x, y, keep, strict=True) if k} == pts


def test_frontier_is_monotone_and_contains_the_slo_optimum():
    wl = make_workload("serve", isl=1024, osl=256, tpot_slo_s=0.05)
    cm = make_cost_model("llama-3.1-70b", "h100-sxm:8", wl, cost_config("vllm"), engine="vllm")
    res = pareto(cm)
    user = [1 / e.tpot_s for e in res.frontier]
    dev = [e.tokens_per_s_per_device for e in res.frontier]
    assert user == sorted(user) and dev == sorted(dev, reverse=True)
    # The best point meeting the SLO equals the exhaustive Megatron search under the SLO
    # (vLLM runs Megatron's layout only).
    from learn_to_shard.search.megatron import MegatronSearcher

    best = MegatronSearcher().search(cm, 10**6, 0).best_objective
    ok = [d for u, d in zip(user, dev, strict=True) if u >= 1 / 0.05]
    assert max(ok) == pytest.approx(best, rel=1e-12)


def test_cli_pareto_writes_png_json_table(tmp_path):
    r = CliRunner().invoke(app, ["pareto", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8",
                                 "--isl", "1024", "--osl", "256", "--tpot-slo", "50ms",
                                 "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "pareto.json").read_text())
    assert data["frontier"] and all(row["export"].startswith("vllm serve")
                                    for row in data["frontier"])
    # Points of several servers on the node are placed as plan --export places them: each
    # on its own devices and port (the bare command alone launched one server on all 8).
    several = [row for row in data["frontier"] if row["servers"] > 1]
    assert several
    for row in several:
        lines = [ln for ln in row["launch"] if ln.startswith("CUDA_VISIBLE_DEVICES=")]
        assert len(lines) == min(row["servers"], 8) and row["launch"][-1] == "wait"
        assert [ln.split("--port ")[1].split()[0] for ln in lines] == \
            [str(8000 + 10 * k) for k in range(len(lines))]
    img = Image.open(tmp_path / "pareto.png")
    assert img.size[0] > 600 and "tp" in r.stdout


@pytest.mark.parametrize("engine, command", [("trtllm-tensorrt", "trtllm-serve"),
                                             ("sglang", "python -m sglang.launch_server"),
                                             ("splitwise-dgx-h100", "vllm serve")])
def test_cli_pareto_prints_the_commands_of_the_engine_its_profile_describes(tmp_path, engine,
                                                                            command):
    """Without ``--export`` the table's commands are the profile's engine (TensorRT-LLM for
    its TensorRT-engine profile, not vLLM with TensorRT-LLM's memory fraction); vLLM for a
    profile that names no engine."""
    r = CliRunner().invoke(app, ["pareto", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:2",
                                 "--isl", "1000", "--osl", "200", "--engine", engine,
                                 "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "pareto.json").read_text())["frontier"]
    assert rows and all(str(row["export"]).startswith(command) for row in rows), \
        [row["export"] for row in rows][:2]


def test_cli_pareto_with_nothing_that_fits_says_why(tmp_path):
    """Llama-3.1-405B on two RTX 4090s: no candidate fits, so the frontier is empty, exit 1,
    and the last line names the closest candidate's broken limits (memory); the JSON
    (``no_fit``) and the report say the same, where the report's table would be empty."""
    r = CliRunner().invoke(app, ["pareto", "--model", "llama-3.1-405b", "--cluster",
                                 "rtx-4090:2", "--isl", "1024", "--osl", "256", "--out",
                                 str(tmp_path / "p"), "--report", str(tmp_path / "rep")])
    assert r.exit_code == 1, r.output
    flat = " ".join(r.output.split())
    assert "no strategy fits: none of the " in flat
    assert "candidates; an exact search's closest candidate" in flat
    assert "memory: stage 0 weights alone exceed" in r.output
    why = json.loads((tmp_path / "p" / "pareto.json").read_text())["no_fit"]
    assert why.startswith("no strategy fits") and why in flat
    md = (tmp_path / "rep" / "report.md").read_text()
    assert why in md and "| strategy |" not in md


def test_cli_pareto_prints_no_launch_command_where_no_engine_runs(tmp_path):
    """On Trainium2 (no exported engine runs there) the frontier is priced, but its rows carry
    no launch command instead of a 'vllm serve' for hardware vLLM's CUDA build lacks."""
    r = CliRunner().invoke(app, ["pareto", "--model", "llama-3.1-8b", "--cluster",
                                 "trainium2:16", "--isl", "1024", "--osl", "256", "--out",
                                 str(tmp_path / "p"), "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["frontier"]
    assert rows and all(x["export"] is None and x["servers"] is None for x in rows)


def test_cli_pareto_says_what_its_unrestricted_numbers_are_and_prints_canonical_layouts(
        tmp_path):
    """Without --engine the frontier's numbers carry no engine's host time while its launch
    commands are vLLM's: a line under the table says so and how to price them as vLLM runs
    them (--engine vllm gives fewer tokens/s); with --engine there is no such line. A dense
    model's strategies print its absent MoE operators as ∅, as plan prints them."""
    base = ["pareto", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase",
            "serve", "--isl", "1024", "--osl", "256", "--tpot-slo", "50ms"]
    r = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "priced without an engine's host and front-end time (no --engine)" in text
    assert "--engine vllm prices them as vllm runs them" in text
    free = json.loads((tmp_path / "a" / "pareto.json").read_text())["frontier"]
    # router, expert_up, expert_down, shared_expert_up, shared_expert_down: absent
    assert free and all(str(row["strategy"]).split("[")[1][6:11] == "∅∅∅∅∅" for row in free)
    r = CliRunner().invoke(app, [*base, "--engine", "vllm", "-o", str(tmp_path / "b")])
    assert r.exit_code == 0 and "priced without an engine" not in r.output
    vllm = json.loads((tmp_path / "b" / "pareto.json").read_text())["frontier"]
    assert max(x["tokens_per_s_per_device"] for x in vllm) < \
        max(x["tokens_per_s_per_device"] for x in free)


def test_cli_pareto_launch_lines_hold_what_each_row_needs_to_start(tmp_path):
    """A TensorRT-LLM row's launch lines write the --config YAML they name (attention-DP
    and the MoE split live there: without it the server runs another layout, or does not
    start); every row's JSON carries the whole script plan --export prints; a row the
    engine cannot express says so in its lines and in the report's table, whose scripts
    section holds every row's script as written."""
    r = CliRunner().invoke(app, ["pareto", "--model", "qwen3-30b-a3b", "--cluster",
                                 "h100-sxm:8", "--isl", "2000", "--osl", "500", "--tpot-slo",
                                 "50ms", "--engine", "trtllm", "-o", str(tmp_path / "t"),
                                 "--report", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "t" / "pareto.json").read_text())["frontier"]
    assert rows
    for row in rows:
        assert "--config extra_llm_api_options.yaml" in row["launch"][-1] or \
            row["launch"][-1] == "wait"
        heredoc = row["launch"].index("cat > extra_llm_api_options.yaml <<'EOF'")
        assert "moe_expert_parallel_size:" in row["launch"][heredoc + 1]
        assert row["script"].count("extra_llm_api_options.yaml <<'EOF'") == 1
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Launch scripts" in md and md.count("```sh") == len(rows)
    # the report's table has the terminal's columns, TPOT and servers among them
    assert "| strategy | tokens/s/user | tokens/s/device | TPOT | meets TPOT SLO | servers |" \
        in md and all(f"{row['tpot_s'] * 1e3:.3g} ms" in md for row in rows)
    # without --engine the vLLM commands: a row vLLM cannot express is marked
    r = CliRunner().invoke(app, ["pareto", "--model", "deepseek-v3", "--cluster", "h200:16",
                                 "--isl", "2000", "--osl", "500", "--tpot-slo", "50ms",
                                 "-o", str(tmp_path / "v"), "--report", str(tmp_path / "rv")])
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "v" / "pareto.json").read_text())["frontier"]
    odd = [row for row in rows if row["not_expressible"]]
    assert odd                       # EP 2 of tp2 ep2 pp4 dp2: vLLM splits over all 4 ranks
    for row in odd:
        assert any(ln.startswith("# NOT EXPRESSIBLE:") for ln in row["launch"])
    md = (tmp_path / "rv" / "report.md").read_text()
    assert md.count("(NOT EXPRESSIBLE: see its script)") == len(odd)
    assert f"({len(odd)} of them with what vllm cannot express" in " ".join(r.output.split())
    # a server over several nodes: its lines say what the other nodes run, as the script does
    spanning = [row for row in rows if "on every other node run it" in row["script"]]
    assert spanning
    for row in spanning:
        assert any("on every other node run it" in ln for ln in row["launch"]), row["launch"]
