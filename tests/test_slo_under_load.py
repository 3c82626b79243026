"""The plan's SLOs checked against its request-level simulation (``api.slo_under_load``)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from learn_to_shard.api import slo_under_load
from learn_to_shard.cli import app
from learn_to_shard.workload import Phase, Workload


def _sim(ttft_s: float, tpot_s: float) -> dict[str, object]:
    q = {f"{k}_{n}_s": v for n, v in (("ttft", ttft_s), ("tpot", tpot_s))
         for k in ("mean", "p50", "p90", "p99")}
    return {"simulated": q}


def test_each_slo_is_checked_on_the_simulated_mean_and_p90():
    wl = Workload(Phase.SERVE, isl=1000, osl=100, ttft_slo_s=0.3, tpot_slo_s=0.04)
    ok = slo_under_load(wl, _sim(0.2, 0.03))
    assert ok["met"] and ok["p90_met"] and ok["missed"] == []
    bad = slo_under_load(wl, _sim(1.046, 0.03))
    assert not bad["met"] and len(bad["missed"]) == 1
    assert bad["missed"][0].startswith("TTFT SLO 300 ms: simulated mean 1046.0 ms")
    none = slo_under_load(Workload(Phase.SERVE, isl=1000, osl=100), _sim(9.0, 9.0))
    assert none["met"] and none["missed"] == []


def test_plan_warns_when_the_simulation_misses_the_slo():
    """Llama-70B on 8 H100 at 128 clients: the steady state meets TTFT 300 ms, the closed-loop
    simulation's queueing does not; the plan says so and the JSON records it."""
    args = ["plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase", "serve",
            "--isl", "2000", "--osl", "500", "--ttft-slo", "300ms", "--tpot-slo", "40ms",
            "--concurrency", "128", "--num-prompts", "300", "--engine", "vllm"]
    r = CliRunner().invoke(app, [*args, "-q"])
    assert r.exit_code == 0, r.output
    assert "warning: under this load the best plan misses its SLO: TTFT SLO 300 ms" in r.stdout
    j = CliRunner().invoke(app, [*args, "--json"])
    data = json.loads(j.stdout)
    assert data["best"]["ttft_s"] <= 0.3
    first = data["simulation"][0]["slo"]
    assert first["met"] is False and first["ttft_slo_s"] == 0.3
