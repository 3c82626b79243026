"""``--report DIR``: HTML (self-contained) and Markdown reports of plan, compare and pareto.

The browser test opens the HTML in headless Chromium (Debian's ``chromium`` package; skipped
when it is not installed): the screenshot must not be blank and every image must decode.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from learn_to_shard.cli import app

PROBLEM = ["--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--phase", "serve",
           "--isl", "1024", "--osl", "256", "--tpot-slo", "50ms"]


@pytest.fixture(scope="module")
def plan_report(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("plan-report")
    r = CliRunner().invoke(app, ["plan", *PROBLEM, "-q", "--report", str(d)])
    assert r.exit_code == 0, r.output
    return d


def test_plan_report_files(plan_report):
    html = (plan_report / "report.html").read_text()
    md = (plan_report / "report.md").read_text()
    assert html.count("src='data:image/png;base64,") == 2          # layer and memory
    for name in ("layer", "memory"):
        assert f"({name}.png)" in md and (plan_report / f"{name}.png").stat().st_size > 1000
    for text in ("Strategy per layer", "Memory", "Engines", "tokens/s per device"):
        assert text in html and text in md
    assert "Serving under load" not in md
    assert "serve, isl 1024, osl 256," in md
    # the expected error the terminal prints, in both files (no engine: the table's alone)
    import html as html_lib

    from learn_to_shard.fidelity.accuracy import accuracy_line
    from learn_to_shard.workload import Phase

    line = accuracy_line(Phase.SERVE)
    assert line in md and html_lib.escape(line) in html


def test_a_decode_report_names_its_context(tmp_path):
    """A decode plan's report says ``decode, context N`` as the terminal does, not ``isl N,
    osl 0``."""
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:2",
                                 "--phase", "decode", "--context", "4096", "-q", "--report",
                                 str(tmp_path)])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "report.md").read_text()
    assert "decode, context 4096," in md and "osl 0" not in md


def test_a_simulated_load_has_its_report_section(tmp_path):
    """With --concurrency, the report carries the simulation the terminal prints: the load,
    one table row per simulated plan with the same cells as the terminal table, the notes,
    and the latency figure; without a load there is no such section."""
    d = tmp_path / "r"
    r = CliRunner().invoke(app, ["plan", *PROBLEM, "--concurrency", "16", "--json", "--report",
                                 str(d)])
    assert r.exit_code == 0, r.output
    import json

    from learn_to_shard.report.render import simulation_rows
    sims = json.loads(r.stdout[r.stdout.index("{"):])["simulation"]
    md = (d / "report.md").read_text()
    html = (d / "report.html").read_text()
    assert "## Serving under load" in md and "closed loop, concurrency 16" in md
    for row in simulation_rows(sims):
        assert "| " + " | ".join(row) + " |" in md
    assert "KV admission in the simulation" in md and "(latency.png)" in md
    assert (d / "latency.png").stat().st_size > 1000
    assert "Serving under load" in html and html.count("src='data:image/png;base64,") == 3


def test_layer_drawing_puts_the_moe_combine_after_the_experts():
    """The MoE dispatch is drawn after the router and the combine after the expert
    down-projection (it was drawn beside the router too); pipeline sends under no operator."""
    from learn_to_shard.api import plan
    from learn_to_shard.report.html import collectives_by_operator

    p = plan("qwen3-30b-a3b", "h100-sxm:8", "serve", isl=1024, osl=256, method="megatron")
    assert p.best is not None
    kinds = {c.where for c in p.best.collectives}
    assert {"moe dispatch", "moe combine"} <= kinds
    _, by_op = collectives_by_operator(p.best, is_moe=True)
    assert any(line.startswith("moe dispatch:") for line in by_op["router"])
    assert any(line.startswith("moe combine:") for line in by_op["expert_down"])
    assert not any(line.startswith("moe combine:") for line in by_op["router"])


def test_pareto_and_compare_reports(tmp_path):
    r = CliRunner().invoke(app, ["pareto", *PROBLEM, "-o", str(tmp_path / "p"), "--report",
                                 str(tmp_path / "pr")])
    assert r.exit_code == 0, r.output
    assert "vllm serve" in (tmp_path / "pr" / "report.md").read_text()
    r = CliRunner().invoke(app, ["compare", *PROBLEM, "--methods", "random,megatron",
                                 "--budget", "50", "--seeds", "1", "-q", "-o",
                                 str(tmp_path / "c"), "--report", str(tmp_path / "cr")])
    assert r.exit_code == 0, r.output
    assert "convergence.png" in (tmp_path / "cr" / "report.md").read_text()


def test_report_path_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "x"
    f.write_text("")
    r = CliRunner().invoke(app, ["plan", *PROBLEM, "-q", "--report", str(f)])
    assert r.exit_code == 2 and "--report" in r.output


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("headless Chromium not installed (Debian package `chromium`)")
    return exe


def test_report_renders_in_headless_chromium(plan_report, tmp_path):
    exe = _chromium()
    url = (plan_report / "report.html").resolve().as_uri()
    base = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000"]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True,
                         timeout=120).stdout
    loaded = re.search(r'data-images-loaded="(\d+)/(\d+)"', dom)
    assert loaded and loaded.group(1) == loaded.group(2) == "2", dom[:300]
    shot = tmp_path / "shot.png"
    subprocess.run([*base, f"--screenshot={shot}", "--window-size=1200,1600", url],
                   capture_output=True, timeout=120)
    img = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert img.shape == (1600, 1200)
    assert (img < 200).mean() > 0.02 and img.std() > 20      # text, tables and figures drawn


def test_a_plan_report_with_export_holds_the_launch_script(tmp_path):
    """``plan --export E --report DIR``: the report ends with the text --export prints, as
    written (a code block in the Markdown, <pre> in the HTML)."""
    r = CliRunner().invoke(app, ["plan", *PROBLEM, "-q", "--export", "vllm", "--report",
                                 str(tmp_path)])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "report.md").read_text()
    html = (tmp_path / "report.html").read_text()
    assert "## Launch" in md and "```sh" in md
    command = next(ln for ln in r.stdout.splitlines() if "vllm serve" in ln)
    assert command in md and "<pre>" in html and "vllm serve" in html


def test_the_launch_section_carries_the_simulated_load_warnings(tmp_path):
    """An overloaded plan's export starts with the simulation's warnings (what --output and
    --json carry); the report's Launch section holds the same text, warnings included."""
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8",
                                 "--phase", "serve", "--isl", "1024", "--osl", "256",
                                 "--request-rate", "500", "--num-prompts", "400", "--export",
                                 "vllm", "--report", str(tmp_path / "r"), "--output",
                                 str(tmp_path / "o.sh"), "-q"])
    assert r.exit_code == 0, r.output
    script = (tmp_path / "o.sh").read_text().removeprefix("#!/usr/bin/env bash\n")
    assert script.startswith("# warning (simulated load):")
    md = (tmp_path / "r" / "report.md").read_text()
    assert script.rstrip("\n") in md


def test_the_report_summary_is_the_consoles(tmp_path):
    """The report's plan table is the console's summary, row for row (one function builds
    both): idle devices and the throughput per device in use, KV capacity in tokens and the
    longest context, tokens/s per user and the largest batch are in both."""
    import re

    from learn_to_shard.report.render import estimate_summary

    args = ["plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:7", "--phase",
            "serve", "--isl", "1024", "--osl", "256", "--tpot-slo", "50ms", "--engine", "vllm"]
    r = CliRunner().invoke(app, [*args, "-q", "--report", str(tmp_path)])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "report.md").read_text()
    from learn_to_shard.api import plan as make_plan

    plan = make_plan("llama-3.1-70b", "h100-sxm:7", "serve", isl=1024, osl=256,
                     tpot_slo_s=0.05, engine="vllm")
    rows = estimate_summary(plan, plan.best)
    assert [k for k, _ in rows][:3] == ["degrees", "devices", "throughput"]
    for quantity in ("KV capacity", "per user", "max batch"):
        assert quantity in dict(rows)
    for quantity, value in rows:
        assert f"| {quantity} | {value} |" in md, quantity
    assert "(1 idle)" in dict(rows)["devices"] and "per device in use" in dict(rows)["throughput"]
    # Sized at mean occupancy, the batch's whole requests would not all fit: said.
    s, wl = plan.best.strategy, plan.workload
    assert s.batch * (wl.isl + wl.osl) > plan.best.kv_capacity_tokens
    assert (f"whole requests of isl + osl = {wl.isl + wl.osl:,} tokens need "
            f"{s.batch * (wl.isl + wl.osl):,} at this batch") in dict(rows)["KV capacity"]
    console = CliRunner().invoke(app, args).stdout
    flat = re.sub(r"[│\s]+", " ", console)
    assert re.sub(r"\s+", " ", dict(rows)["KV capacity"])[:60] in flat


def test_an_engine_cell_says_what_the_unrestricted_strategy_breaks_there():
    """The engine table's cell for the unrestricted strategy at an engine's costs gives its
    tokens/s and, where that engine's costs make it infeasible, the limits with their
    numbers (it used to read "281.6 tok/s/device breaks tpot_slo", a rate beside a verdict)."""
    from learn_to_shard.report.html import at_engine_costs

    row = {"unrestricted_under_engine_tokens_per_s_per_device": 281.64,
           "unrestricted_under_engine_violations": [
               "tpot_slo: TPOT 56.76 ms > SLO 44.40 ms"]}
    assert at_engine_costs(row) == \
        "281.6 tok/s/device, infeasible there; TPOT 56.76 ms > SLO 44.40 ms"
    row["unrestricted_under_engine_violations"] = []
    assert at_engine_costs(row) == "281.6 tok/s/device"
    assert at_engine_costs({}) == "degrees not in the engine's space"


def test_an_ascii_locale_prints_and_writes_reports_without_an_encoding_error(tmp_path):
    """Under LC_ALL=C without Python's UTF-8 mode the report files were written in the
    locale's encoding (a UnicodeEncodeError on the strategies' ∅, an empty report.html left
    behind) and the terminal raised on the same symbols: the files are UTF-8 whatever the
    locale, the terminal gets escapes, exit 0."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0",
           "PYTHONIOENCODING": ""}
    r = subprocess.run([sys.executable, "-c", "from learn_to_shard.cli import main; main()",
                        "plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:2",
                        "--phase", "serve", "--isl", "512", "--osl", "128", "--report",
                        str(tmp_path / "r")], env=env, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode("utf-8", "replace")[-2000:]
    html = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert "∅" in html and "charset='utf-8'" in html.replace('"', "'")
