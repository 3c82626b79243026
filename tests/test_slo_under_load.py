"""The plan's SLOs checked against its request-level simulation (``api.slo_under_load``)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
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
    """Llama-70B on 8 H100 at 128 clients: the steady state, every client in a batch slot,
    meets TTFT 300 ms; the closed-loop simulation's waves of fixed-length prompts do not; the
    plan says so, the JSON records it, and with --json the warning reaches stderr (a
    script sees exit 4 and why)."""
    args = ["plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase", "serve",
            "--isl", "2000", "--osl", "500", "--ttft-slo", "300ms", "--tpot-slo", "60ms",
            "--concurrency", "128", "--num-prompts", "300", "--engine", "vllm"]
    r = CliRunner().invoke(app, [*args, "-q"])
    assert r.exit_code == 4, r.output           # and no simulated alternative meets them
    assert "warning: under this load the best plan misses its SLO: TTFT SLO 300 ms" in r.stdout
    j = CliRunner().invoke(app, [*args, "--json"])
    data = json.loads(j.stdout)
    assert data["best"]["ttft_s"] <= 0.3
    first = data["simulation"][0]["slo"]
    assert first["met"] is False and first["ttft_slo_s"] == 0.3
    assert j.exit_code == 4
    assert "warning (simulated load): under this load the best plan misses its SLO: TTFT " \
        "SLO 300 ms" in j.stderr


def test_clients_that_do_not_fill_every_replica_are_not_counted_twice():
    """Three clients on 8 H100s: two TP4 replicas of batch 2 hold only three sequences, so the
    cluster runs 1.5 replicas' worth of that batch, not 2 (the objective counted 4 clients),
    and the plan's answer is one TP8 replica serving all three; the JSON's cluster tokens/s
    is the objective times the devices, and a simulation of the two-replica plan credits
    3 / ceil(3 / 2) = 1.5 replicas."""
    import copy

    import pytest

    from learn_to_shard.api import make_cost_model, make_workload
    from learn_to_shard.parallel.strategy import Strategy
    from learn_to_shard.serving import ServingLoad, simulate_estimate

    cm = make_cost_model("llama-3.1-8b", "h100-sxm:8",
                         make_workload("serve", isl=1024, osl=256, concurrency=3))
    tp4 = Strategy(tp=4, ep=1, pp=1, dp=1, batch=2)
    cm2 = copy.copy(cm)
    cm2.space = cm.space.with_batches([2, 3])
    e = cm2.evaluate(tp4)
    assert e.instances == 2
    assert e.tokens_per_s_per_device == pytest.approx(e.output_tokens_per_s * 1.5 / 8,
                                                      rel=1e-12)
    doc = json.loads(CliRunner().invoke(app, [
        "plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--phase", "serve",
        "--isl", "1024", "--osl", "256", "--concurrency", "3", "--json", "-q",
        "--no-timing"]).stdout)
    best = doc["best"]
    assert (best["strategy"]["tp"], best["strategy"]["batch"]) == (8, 3)
    assert best["cluster_tokens_per_s"] == pytest.approx(8 * best["tokens_per_s_per_device"])
    sim = simulate_estimate(cm2, e, ServingLoad(concurrency=3, num_prompts=30))
    assert sim["replicas"] == 2 and sim["replicas_worth"] == pytest.approx(1.5)
    assert sim["cluster_output_tokens_per_s"] == pytest.approx(
        1.5 * sim["simulated"]["output_tokens_per_s"])


def test_an_open_loop_rate_above_capacity_is_flagged_overloaded():
    """20 requests/s of Llama-3.1-70B on 8 H100s under vLLM exceeds what its replicas serve:
    the simulation marks the plan overloaded (its last arrivals wait far longer than its
    first), it serves less than is offered, and the
    plan prints a warning that the percentiles describe the run's length; 1 request/s is
    not overloaded."""
    base = ["plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase", "serve",
            "--isl", "1024", "--osl", "256", "--engine", "vllm", "--tpot-slo", "50ms",
            "--num-prompts", "200"]
    r = CliRunner().invoke(app, [*base, "--request-rate", "20", "--json", "-q",
                                 "--no-timing"])
    sim = json.loads(r.stdout)["simulation"][0]
    assert sim["overloaded"] is True
    assert sim["simulated"]["requests_per_s"] < sim["offered_requests_per_s"]
    text = CliRunner().invoke(app, [*base, "--request-rate", "20", "-q"]).stdout
    flat = " ".join(text.split())
    assert "is overloaded: serves" in flat and "its queue growing through the run" in flat
    assert "This rate needs at least" in flat
    calm = CliRunner().invoke(app, [*base, "--request-rate", "1", "--json", "-q",
                                    "--no-timing"])
    assert json.loads(calm.stdout)["simulation"][0]["overloaded"] is False


def test_a_rate_above_capacity_is_overloaded_even_where_a_short_run_hides_it():
    """A Poisson rate 8% above what a replica completes at the plan's batch grows its queue
    without bound, but a run of 500 requests per replica ramps up and drains before the
    queue shows (the last quarter of arrivals waits no longer than twice the first): it is
    flagged overloaded from the steady state's capacity, with the reason printed; at 95% of
    capacity it is not overloaded but flagged as near saturation."""
    base = ["plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase", "serve",
            "--isl", "1024", "--osl", "256", "--tpot-slo", "50ms", "-q",
            "--num-prompts", "1000"]              # the fleet's benchmark: 500 per replica
    probe = json.loads(CliRunner().invoke(app, [*base, "--request-rate", "1", "--json",
                                                "--no-timing"]).stdout)["simulation"][0]
    replicas, capacity = probe["replicas"], probe["capacity_requests_per_s"]
    over = json.loads(CliRunner().invoke(
        app, [*base, "--request-rate", f"{1.08 * replicas * capacity:.6g}", "--json",
              "--no-timing"]).stdout)["simulation"][0]
    assert over["utilization"] == pytest.approx(1.08, rel=1e-4) and over["overloaded"] is True
    res = over["simulated"]
    assert res["requests_per_s"] > 0.8 * over["offered_requests_per_s"]   # the run hides it
    text = " ".join(CliRunner().invoke(
        app, [*base, "--request-rate", f"{1.08 * replicas * capacity:.6g}"]).stdout.split())
    assert "is overloaded: the" in text and "queue grows without bound" in text
    assert f"needs at least {math.ceil(1.08 * replicas - 1e-9)} replicas" in text
    # The count and the capacity it was counted with are said together.
    assert f"replicas of it at {capacity:.4g} requests/s each" in text
    near = CliRunner().invoke(app, [*base, "--request-rate",
                                    f"{0.95 * replicas * capacity:.6g}", "--json",
                                    "--no-timing"])
    sim = json.loads(near.stdout)["simulation"][0]
    assert sim["overloaded"] is False and sim["utilization"] == pytest.approx(0.95, rel=1e-4)
    text = " ".join(CliRunner().invoke(
        app, [*base, "--request-rate", f"{0.95 * replicas * capacity:.6g}"]).stdout.split())
    assert "runs at 95% of the" in text and "leave headroom" in text
    assert f"({math.ceil(0.95 * replicas / 0.9 - 1e-9)} replicas of it keep each at or " \
        f"below 90%; {replicas} now)" in text


def test_the_slo_warning_never_recommends_an_alternative_that_falls_behind_the_load():
    """The warning that the best plan misses its SLO names a simulated alternative that meets
    it only if that alternative also keeps up with the load: one whose queue grows through
    the run (``overloaded``) is passed over."""
    from learn_to_shard.report.render import simulation_notes

    def sim(name, met, overloaded):
        return {"strategy": name, "overloaded": overloaded, "offered_requests_per_s": 3.25,
                "simulated": {"requests_per_s": 1.83}, "lengths": {"dataset": "random"},
                "scheduler": {"kv_admission": "reserve", "preemptions": 0},
                "slo": {"met": met, "missed": [] if met else ["TPOT SLO 50 ms: ..."]}}

    best = sim("tp4 b64", False, False)
    behind, keeps_up = sim("tp2 b24", True, True), sim("tp8 b96", True, False)
    text = " ".join(t for _, t in simulation_notes([best, behind]))
    assert "no simulated alternative meets them" in text and "tp2 b24 meets" not in text
    text = " ".join(t for _, t in simulation_notes([best, behind, keeps_up]))
    assert ("the simulated alternative tp8 b96 meets them on the mean and its queue does not "
            "grow") in text


def test_replicas_needed_counts_instances_and_exceeds_an_overloaded_plan():
    """The replicas a warning asks for: the steady state's capacity, or what a replica served
    where its simulated queue grew (then more than it has, never "1 (1 now)"), and a dense
    model's DP ranks (simulated apart) grouped back into its instances."""
    from learn_to_shard.report.render import _replicas_needed, simulation_notes

    base = {"strategy": "tp1 b129", "offered_requests_per_s": 9.0, "replicas": 1,
            "capacity_requests_per_s": 9.46, "utilization": 9.0 / 9.46, "overloaded": True,
            "queue_grows": True, "simulated": {"requests_per_s": 7.27},
            "lengths": {"dataset": "random"}, "scheduler": {}, "replica_share": ""}
    assert _replicas_needed(base) == (2, 1, 7.27)      # what it served: below the capacity
    text = " ".join(t for _, t in simulation_notes([base]))
    assert ("needs at least 2 replicas of it at 7.27 requests/s each (what a replica served "
            "in the run; 1 now)") in text
    steady = {**base, "capacity_requests_per_s": 7.0, "utilization": 9.0 / 7.0}
    assert "of it at 7 requests/s each (the steady state's capacity; 1 now)" in " ".join(
        t for _, t in simulation_notes([steady]))
    assert "serves 7.27 (simulated) of the 9 requests/s offered" in " ".join(
        t for _, t in simulation_notes([steady]))
    # tp1 dp2 on 8 GPUs: 4 instances simulated as 8 ranks of 12.5 req/s each.
    dense = {**base, "offered_requests_per_s": 50.0, "replicas": 8, "dp_ranks_as_replicas": 2,
             "capacity_requests_per_s": 12.0, "utilization": 50.0 / 12.0, "queue_grows": False}
    assert _replicas_needed(dense) == (17, 4, 24.0)    # 34 ranks of 12 req/s: 17 instances
    # ... said in instances, whose rate is their ranks' together
    assert "needs at least 17 instances of it (2 DP ranks each) at 24 requests/s each (the " \
        "steady state's capacity, its ranks' together; 4 now)" in " ".join(
            t for _, t in simulation_notes([dense]))
    near = {**dense, "offered_requests_per_s": 11.4, "utilization": 0.95, "overloaded": False}
    assert _replicas_needed(near, 0.9)[:2] == (5, 4)    # 8 x 11.4 / (0.9 x 12) = 8.4 ranks


def test_an_exported_plan_carries_its_load_warnings_and_osl_1_has_no_tpot():
    """``--export`` under a load puts the best plan's warnings at the top of the commands as
    shell comments (``-q`` drops the terminal's notes); a TPOT SLO with ``--osl 1`` is bad
    input (no token follows the first), and such a plan reports no TPOT."""
    import subprocess

    base = ["plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase", "serve",
            "--isl", "1024", "--osl", "256", "--tpot-slo", "50ms", "--engine", "sglang"]
    out = CliRunner().invoke(app, [*base, "--request-rate", "30", "--export", "sglang",
                                   "-q"]).stdout
    first = out.splitlines()[0]
    assert first.startswith("# warning (simulated load): ") and "is overloaded" in first
    assert "replicas of it" in first
    assert subprocess.run(["bash", "-n"], input=out, text=True).returncode == 0
    assert "load balancer" in out                       # two servers of TP4
    bad = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster",
                                   "h100-sxm:1", "--phase", "serve", "--isl", "1024", "--osl",
                                   "1", "--tpot-slo", "50ms"])
    assert bad.exit_code == 2 and "--tpot-slo has no meaning with --osl 1" in bad.output
    one = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                                   "--phase", "serve", "--isl", "1024", "--osl", "1", "--json",
                                   "-q", "--no-timing"])
    best = json.loads(one.stdout)["best"]
    assert best["tpot_s"] is None and best["tokens_per_s_per_user"] is None


def test_closed_loop_clients_beyond_the_batch_wait_in_ttft():
    """64 clients on one TP8 replica of batch 32: each running request has one client waiting
    behind it, for one slot lifetime (osl · TPOT / share, Little's law), which the steady
    state's TTFT counts; at batch 64 nobody waits. The exact search prices the same (it
    checks its decomposition against the cost model), so a TTFT SLO it cannot meet with
    clients waiting makes it fill the batch."""
    from learn_to_shard.api import make_cost_model, make_workload
    from learn_to_shard.parallel.strategy import Strategy

    def est(concurrency, batch):
        cm = make_cost_model("llama-3.1-8b", "h100-sxm:8",
                             make_workload("serve", isl=1024, osl=256,
                                           concurrency=concurrency))
        cm.space = cm.space.with_batches([batch])
        return cm, cm.evaluate(Strategy(tp=8, ep=1, pp=1, dp=1, batch=batch))

    cm, half = est(64, 32)
    _, alone = est(None, 32)
    assert cm.closed_loop_queue(np.array([8]), np.array([32]))[0] == pytest.approx(1.0)
    assert half.tpot_s == pytest.approx(alone.tpot_s, rel=1e-12)
    assert half.ttft_s - alone.ttft_s == pytest.approx(256 * half.tpot_s, rel=1e-9)
    assert half.ttft_queue_s == pytest.approx(256 * half.tpot_s, rel=1e-9)
    _, full = est(64, 64)
    _, full_alone = est(None, 64)
    assert full.ttft_s == pytest.approx(full_alone.ttft_s, rel=1e-12)
    assert full.ttft_queue_s == 0.0 and alone.ttft_queue_s == 0.0
    # On 16 H200s at 256 clients and a 40 ms TPOT, no plan serves every client in a slot
    # within the TPOT SLO, and one with clients waiting misses the 1 s TTFT: the answer is
    # infeasible, and its closest candidate is one that is short on TPOT alone.
    r = CliRunner().invoke(app, [
        "plan", "--model", "qwen3-235b-a22b", "--cluster", "h200:16", "--phase", "serve",
        "--isl", "2048", "--osl", "512", "--tpot-slo", "40ms", "--ttft-slo", "1s",
        "--engine", "sglang", "--concurrency", "256", "-q"])
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    i = next(k for k, ln in enumerate(lines) if "closest candidate" in ln)
    assert "tpot_slo: TPOT" in lines[i + 1] and "ttft_slo: TTFT" not in lines[i + 2]
    # Without the TTFT SLO the plan keeps clients waiting, and says how long in its TTFT.
    args = ["plan", "--model", "qwen3-235b-a22b", "--cluster", "h200:16", "--phase", "serve",
            "--isl", "2048", "--osl", "512", "--tpot-slo", "40ms", "--engine", "sglang",
            "--concurrency", "256", "-q"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "waiting for a batch slot: 256 clients" in r.stdout
    doc = json.loads(CliRunner().invoke(app, [*args, "--json", "--no-timing"]).stdout)
    best = doc["best"]
    assert 0 < best["ttft_queue_s"] < best["ttft_s"]
    # The simulation's mean TTFT over the steady state's, the wait in both: near 1.
    assert 0.7 < doc["simulation"][0]["sim_over_analytic"]["mean_ttft"] < 1.4


def test_closest_candidate_is_one_that_can_run():
    """A closed loop's wait makes every runnable plan miss a 5 s TTFT; a plan needing more
    devices than the cluster has waits for nothing, but it is no nearer to feasible: the
    closest candidate breaks no structural rule."""
    r = CliRunner().invoke(app, [
        "plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase", "serve",
        "--isl", "4000", "--osl", "1", "--concurrency", "512", "--num-prompts", "2000",
        "--ttft-slo", "5s", "--method", "random", "--budget", "2000", "-q"])
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    i = next(k for k, ln in enumerate(lines) if "closest candidate" in ln)
    assert "devices:" not in lines[i + 1] and "evaluations broke" not in lines[i + 1]


def test_steady_comparison_adds_no_wait_where_every_client_has_a_slot():
    """64 clients on a plan of batch 64: nobody waits for a slot, so the steady state the
    simulation is compared with (at its mean running count, a little below 64) adds no wait
    either (it charged 64/63 - 1 of a slot lifetime, tripling the TTFT compared)."""
    doc = json.loads(CliRunner().invoke(app, [
        "plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase", "serve",
        "--isl", "1024", "--osl", "256", "--tpot-slo", "50ms", "--concurrency", "64", "-q",
        "--json", "--no-timing"]).stdout)
    best, sim = doc["best"], doc["simulation"][0]
    assert best["strategy"]["batch"] * sim["replicas"] >= 64 and best["ttft_queue_s"] == 0
    assert sim["analytic"]["ttft_s"] < 1.1 * best["ttft_s"]


def test_a_best_plan_that_meets_its_slo_on_the_mean_only_is_warned_about_its_p90():
    """slo_under_load lists SLOs whose simulated mean holds and p90 does not
    (``p90_missed``), and the simulation notes warn about them: an operator's SLO is
    usually a percentile."""
    from learn_to_shard.api import slo_under_load
    from learn_to_shard.report.render import simulation_notes
    from learn_to_shard.workload import Phase, Workload

    wl = Workload(Phase.SERVE, isl=2000, osl=500, tpot_slo_s=0.040)
    stats = {"mean_ttft_s": 0.5, "p90_ttft_s": 1.0, "p99_ttft_s": 2.0,
             "mean_tpot_s": 0.0378, "p90_tpot_s": 0.0408, "p99_tpot_s": 0.0435}
    slo = slo_under_load(wl, {"simulated": stats})
    assert slo["met"] and not slo["p90_met"] and not slo["missed"]
    assert slo["p90_missed"] == ["TPOT SLO 40 ms: simulated mean 37.8 ms, p90 40.8 ms, "
                                 "p99 43.5 ms"]
    sim = {"strategy": "tp4 b96", "overloaded": False, "simulated": stats,
           "lengths": {"dataset": "random"}, "scheduler": {}, "slo": slo}
    text = " ".join(t for _, t in simulation_notes([sim]))
    assert "meets its SLO on the simulated mean but not at p90: TPOT SLO 40 ms" in text
    ok = slo_under_load(wl, {"simulated": {**stats, "p90_tpot_s": 0.039}})
    assert ok["p90_met"] and not ok["p90_missed"]
    assert "not at p90" not in " ".join(t for _, t in simulation_notes([{**sim, "slo": ok}]))


def test_a_missed_slo_never_reads_as_met_after_rounding():
    """A p90 (or mean) just above its SLO is printed with the decimals that show it above:
    TPOT p90 50.013 ms against 50 ms reads 50.01, not 50.0."""
    from learn_to_shard.api import make_workload, slo_under_load

    wl = make_workload("serve", isl=128, osl=64, tpot_slo_s=0.050)
    sim = {"simulated": {"mean_tpot_s": 0.0490, "p90_tpot_s": 0.050013, "p99_tpot_s": 0.0512,
                         "mean_ttft_s": 0.1, "p90_ttft_s": 0.2, "p99_ttft_s": 0.3}}
    out = slo_under_load(wl, sim)
    assert out["met"] and not out["p90_met"]
    assert "p90 50.01 ms" in out["p90_missed"][0]
    sim["simulated"]["mean_tpot_s"] = 0.0500004
    out = slo_under_load(wl, sim)
    assert not out["met"] and "mean 50.0004 ms" in out["missed"][0]


def test_a_plan_that_misses_its_slos_under_the_load_exits_4():
    """Llama-70B on 8 H100s offered 1,000 requests/s: every simulated plan is overloaded and
    misses its SLOs, so the plan (found, feasible on the steady state) exits 4 with the
    warning, plain, as JSON and with --export (its commands still written); the same
    plan at a load it serves exits 0."""
    base = ["plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase", "serve",
            "--isl", "1024", "--osl", "256", "--tpot-slo", "50ms", "--ttft-slo", "1s",
            "--engine", "sglang", "--num-prompts", "300"]
    r = CliRunner().invoke(app, [*base, "--request-rate", "1000", "-q"])
    assert r.exit_code == 4, r.output
    assert "no simulated alternative meets them" in " ".join(r.output.split())
    j = CliRunner().invoke(app, [*base, "--request-rate", "1000", "--json", "--no-timing"])
    assert j.exit_code == 4 and json.loads(j.stdout)["feasible"] is True
    e = CliRunner().invoke(app, [*base, "--request-rate", "1000", "--export", "sglang", "-q"])
    assert e.exit_code == 4 and "python -m sglang.launch_server" in e.stdout
    assert "# warning (simulated load): under this load the best plan misses its SLO" \
        in e.stdout
    ok = CliRunner().invoke(app, [*base, "--request-rate", "2", "-q"])
    assert ok.exit_code == 0, ok.output


def test_an_alternative_the_simulation_has_serving_more_is_named():
    """The search ranks on the steady state; where the simulation has an alternative serving
    2% or more beyond the best plan under the load, a note names it and both figures."""
    from learn_to_shard.report.render import simulation_notes

    base = {"slo": {"met": True, "missed": []}, "lengths": {}, "scheduler": {},
            "replica_share": "", "simulated": {"requests_per_s": 1.0}}
    best = {**base, "strategy": "tp2 b64", "tokens_per_s_per_device": 1000.0}
    close = {**base, "strategy": "tp4 b96", "tokens_per_s_per_device": 1015.0}
    ahead = {**base, "strategy": "tp1 b32", "tokens_per_s_per_device": 1100.0}
    said = [t for _, t in simulation_notes([best, close])]
    assert not any("serving more than the best plan" in t for t in said)
    said = [t for _, t in simulation_notes([best, close, ahead], best_only=True)]
    assert "under this load the simulation has tp1 b32 serving more than the best plan: " \
           "1,100.0 against 1,000.0 tokens/s per device" in " ".join(said)
    # An open loop the best plan keeps up with: both serve what is offered, and the gap is
    # how each run drains (Llama-3.1-8B at 20 requests/s on 2 H100 named an alternative at
    # 2,432 against 2,377 tokens/s per device, the other way round at --num-prompts 8000).
    rate = {"offered_requests_per_s": 10.0, "capacity_requests_per_s": 13.0}
    said = [t for _, t in simulation_notes([{**best, **rate}, {**ahead, **rate}])]
    assert not any("serving more than the best plan" in t for t in said)
    said = [t for _, t in simulation_notes([{**best, **rate, "overloaded": True,
                                            "utilization": 1.2, "replicas": 1,
                                            "queue_grows": True},
                                           {**ahead, **rate}])]
    assert any("tp1 b32 serving more than the best plan" in t for t in said)


def test_an_overloaded_best_plan_misses_its_ttft_slo_whatever_the_runs_length():
    """200 requests/s at one H100 running Llama-3.1-8B: the queue grows through the run, so
    the run's mean TTFT (34 s at 1,000 requests, 127 s at 3,000) says how long the run was;
    against a 60 s TTFT SLO the plan exits 4 at any --num-prompts, as an overloaded
    alternative is never counted as meeting an SLO."""
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--phase", "serve",
            "--isl", "1024", "--osl", "256", "--engine", "vllm", "--ttft-slo", "60s",
            "--request-rate", "200", "-q"]
    for n in ("200", "600"):
        r = CliRunner().invoke(app, [*base, "--num-prompts", n])
        assert r.exit_code == 4, r.output
        flat = " ".join(r.output.split())
        assert "TTFT SLO 60000 ms: overloaded, its queue grows without bound" in flat


def test_a_closed_loop_of_few_rounds_says_its_ttft_is_the_first_rounds():
    """1,000 clients of one Llama-3.1-8B H100 replica that runs 165 at once, over 1,500
    prompts: each client sends 1.5 requests, so the run is mostly every client's first
    request arriving at time 0 and its mean TTFT is below a steady loop's; the plan says so
    and names the --num-prompts that shows the steady state; the default run (4 per client)
    says nothing of it."""
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--phase", "serve",
            "--isl", "1024", "--osl", "256", "--tpot-slo", "60ms", "--concurrency", "1000"]
    short = CliRunner().invoke(app, [*base, "--num-prompts", "1500"])
    text = " ".join(short.output.split())
    assert short.exit_code in (0, 4), short.output
    assert "clients per replica send 1.5 requests each in this run, so it is mostly its " \
        "first round" in text, text
    assert "--num-prompts 4,000 or more shows the steady state" in text
    full = CliRunner().invoke(app, base)
    assert full.exit_code in (0, 4), full.output
    assert "mostly its first round" not in " ".join(full.output.split())


def test_a_simulated_alternative_that_meets_the_slo_becomes_the_plan():
    """Llama-70B on 8 H100 at 128 clients, TTFT SLO 1.3 s: the search's best (TP4 × 2
    replicas, batch 64) misses it in the closed-loop simulation, TP8 at batch 128 meets it
    on the mean with its queue bounded. That alternative is the plan: a note says which it
    replaced and why, the JSON records the swap, the simulation rows lead with it, --export
    launches it, and the command exits 0 (no SLO missed by the plan)."""
    args = ["plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase", "serve",
            "--isl", "1024", "--osl", "1024", "--ttft-slo", "1300ms", "--concurrency", "128",
            "--engine", "vllm"]
    j = CliRunner().invoke(app, [*args, "--json"])
    assert j.exit_code == 0, j.output
    data = json.loads(j.stdout)
    chosen = data["search"]["chosen_under_load"]
    assert chosen["strategy"].startswith("tp8 ep1 pp1 dp1 b128")
    assert chosen["over"].startswith("tp4 ep1 pp1 dp1 b64")
    assert chosen["missed"][0].startswith("TTFT SLO 1300 ms: simulated mean")
    assert data["best"]["strategy"]["tp"] == 8 and data["best"]["strategy"]["batch"] == 128
    sims = data["simulation"]
    assert sims[0]["strategy"] == chosen["strategy"] and sims[0]["chosen_under_load"]
    assert sims[0]["slo"]["met"] and not sims[1]["slo"]["met"]
    assert sims[1]["strategy"] == chosen["over"]
    assert any(n.startswith("chosen under this load: tp8") for n in data["notes"])
    r = CliRunner().invoke(app, [*args, "--export", "vllm", "-q"])
    assert r.exit_code == 0, r.output
    assert "# note (simulated load): chosen under this load: tp8" in r.stdout
    assert "--tensor-parallel-size 8 --max-num-seqs 128" in r.stdout
    t = CliRunner().invoke(app, args)
    assert t.exit_code == 0, t.output
    assert "note: chosen under this load: tp8" in t.stdout
    assert "│ degrees       │ TP=8  PP=1  DP=1  batch=128" in t.stdout
    assert "serving more than the best plan" not in t.stdout    # the faster one misses it
    # Without --engine (256 clients: TP8 at batch 256 misses, TP4 at 128 meets) the engine
    # table stays beside the search's steady-state optimum, which it names.
    free = ["plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase", "serve",
            "--isl", "1024", "--osl", "1024", "--ttft-slo", "1300ms", "--concurrency", "256",
            "--json"]
    e = CliRunner().invoke(app, free)
    assert e.exit_code == 0, e.output
    doc = json.loads(e.stdout)
    assert doc["search"]["chosen_under_load"]["strategy"].startswith("tp4 ep1 pp1 dp1 b128")
    assert doc["engine_optima_beside"] == doc["search"]["chosen_under_load"]["over"]
    optimum = doc["alternatives"][0]
    assert optimum["strategy"]["tp"] == 8 and optimum["strategy"]["batch"] == 256
    rows = [row for row in doc["engine_optima"] if row["strategy"]]
    assert rows
    for row in rows:
        assert row["ratio_to_unrestricted"] == pytest.approx(
            row["tokens_per_s_per_device"] / optimum["tokens_per_s_per_device"], rel=1e-3)
    shown = CliRunner().invoke(app, free[:-1])
    assert "(vs the search's unrestricted steady-state optimum, tp8 ep1 pp1 dp1 b256" in \
        " ".join(shown.stdout.split())


def test_no_swap_where_the_best_meets_the_slo_or_no_alternative_does():
    """``prefer_under_load`` leaves the plan as searched where the best plan meets the
    SLOs under the load, and where it misses them but no alternative meets them (exit 4)."""
    from learn_to_shard.api import plan as make_plan
    from learn_to_shard.api import prefer_under_load

    p = make_plan("llama-3.1-8b", "h100-sxm:2", phase="serve", isl=512, osl=128,
                  ttft_slo_s=2.0, engine="vllm")
    assert p.best is not None and p.alternatives
    met = [{"strategy": "a", "slo": {"met": True, "missed": []}},
           {"strategy": "b", "slo": {"met": True, "missed": []}}]
    assert prefer_under_load(p, met) == (p, met)
    none = [{"strategy": p.best.strategy.short(), "slo": {"met": False, "missed": ["x"]}},
            {"strategy": p.alternatives[0].strategy.short(),
             "slo": {"met": False, "missed": ["y"]}}]
    assert prefer_under_load(p, none) == (p, none)
    # An alternative that meets them but whose queue grows is passed over as well.
    grows = [none[0], {**none[1], "slo": {"met": True, "missed": []}, "overloaded": True}]
    assert prefer_under_load(p, grows) == (p, grows)
    swap = [none[0], {**none[1], "slo": {"met": True, "missed": []}}]
    q, s = prefer_under_load(p, swap)
    assert q.best is p.alternatives[0] and q.alternatives[0] is p.best
    assert s[0]["strategy"] == none[1]["strategy"] and s[1] is none[0]
    assert p.search.get("chosen_under_load") is None          # the plan given is unchanged


def _swap_rows(plan, tps: tuple[float, float, float], met: tuple[bool, bool, bool],
               dataset: str = "random", overloaded: bool = False) -> list[dict]:
    """Simulation rows for ``plan``'s best and first two alternatives (tokens/s, SLO met)."""
    names = [plan.best.strategy.short()] + [a.strategy.short() for a in plan.alternatives[:2]]
    return [{"strategy": n, "tokens_per_s_per_device": t, "overloaded": overloaded and i > 0,
             "lengths": {"dataset": dataset},
             "slo": {"met": m, "missed": [] if m else [f"TTFT SLO 1 ms: {n}"]}}
            for i, (n, t, m) in enumerate(zip(names, tps, met, strict=True))]


def test_the_swap_picks_the_alternative_serving_most_and_records_it():
    """Of two alternatives meeting the SLOs the one serving more under the load is chosen
    (not the first in the search's order), so no note names one serving more than the plan;
    ``search.chosen_under_load`` names both plans and the missed SLO, and the chosen row is
    marked. Within 2% (``SIM_AHEAD``) the search's order decides."""
    from learn_to_shard.api import plan as make_plan
    from learn_to_shard.api import prefer_under_load
    from learn_to_shard.report.render import simulation_notes

    p = make_plan("llama-3.1-8b", "h100-sxm:2", phase="serve", isl=512, osl=128,
                  ttft_slo_s=2.0, engine="vllm")
    assert len(p.alternatives) >= 2
    rows = _swap_rows(p, (400.0, 380.0, 450.0), (False, True, True))
    q, s = prefer_under_load(p, rows)
    assert q.best is p.alternatives[1] and s[0]["strategy"] == rows[2]["strategy"]
    assert s[0]["chosen_under_load"] is True and "chosen_under_load" not in s[1]
    assert q.search["chosen_under_load"] == {
        "strategy": rows[2]["strategy"], "over": rows[0]["strategy"],
        "missed": rows[0]["slo"]["missed"],
        "tokens_per_s_per_device": {"chosen": 450.0, "over": 400.0}}
    assert not any("serving more than the best plan" in t for _, t in simulation_notes(s))
    q, _ = prefer_under_load(p, _swap_rows(p, (400.0, 445.0, 450.0), (False, True, True)))
    assert q.best is p.alternatives[0]


def test_a_trace_alternative_is_judged_on_its_replay_for_the_swap():
    """Under a trace (its whole load, judged on its replay) an alternative whose mean rate is
    at its capacity but whose replay meets the SLOs can replace the best; under a request
    rate such an overloaded alternative cannot (its queue grows without bound)."""
    from learn_to_shard.api import plan as make_plan
    from learn_to_shard.api import prefer_under_load

    p = make_plan("llama-3.1-8b", "h100-sxm:2", phase="serve", isl=512, osl=128,
                  ttft_slo_s=2.0, engine="vllm")
    trace = _swap_rows(p, (400.0, 380.0, 300.0), (False, True, False), "trace", True)
    assert prefer_under_load(p, trace)[0].best is p.alternatives[0]
    rate = _swap_rows(p, (400.0, 380.0, 300.0), (False, True, False), "random", True)
    assert prefer_under_load(p, rate) == (p, rate)


def test_no_swap_when_the_first_row_is_not_the_plans_best():
    """``simulate_plan`` skips a strategy whose KV pool cannot hold the longest request, so
    its first row can be an alternative: then there is no simulated best to replace."""
    from learn_to_shard.api import plan as make_plan
    from learn_to_shard.api import prefer_under_load

    p = make_plan("llama-3.1-8b", "h100-sxm:2", phase="serve", isl=512, osl=128,
                  ttft_slo_s=2.0, engine="vllm")
    rows = _swap_rows(p, (400.0, 380.0, 450.0), (False, True, True))[1:]
    rows[0] = {**rows[0], "slo": {"met": False, "missed": ["x"]}}
    assert prefer_under_load(p, rows) == (p, rows)


def test_an_alternative_serving_more_within_the_slos_becomes_the_plan():
    """Where the searched best meets the SLOs (or none is given) and an alternative within
    them serves 10% more under the load or more, the alternative is the plan and the note
    gives both figures; under 10% nothing changes (the note names a gap above 2%), nor under
    an open loop the best keeps up with (both serve what is offered), nor for an alternative
    that misses the SLOs."""
    from learn_to_shard.api import plan as make_plan
    from learn_to_shard.api import prefer_under_load
    from learn_to_shard.report.render import simulation_notes

    p = make_plan("llama-3.1-8b", "h100-sxm:2", phase="serve", isl=512, osl=128,
                  engine="vllm")
    rows = _swap_rows(p, (400.0, 380.0, 450.0), (True, True, True))
    q, s = prefer_under_load(p, rows)
    assert q.best is p.alternatives[1] and s[0]["strategy"] == rows[2]["strategy"]
    chosen = q.search["chosen_under_load"]
    assert chosen["missed"] == [] and chosen["tokens_per_s_per_device"] == {
        "chosen": 450.0, "over": 400.0}
    assert q.notes[0].startswith(f"chosen under this load: {rows[2]['strategy']} serves "
                                 f"450.0 tokens/s per device in the simulation, the search's "
                                 f"best {rows[0]['strategy']} 400.0; ")
    close = _swap_rows(p, (400.0, 380.0, 437.0), (True, True, True))     # +9%: kept
    assert prefer_under_load(p, close) == (p, close)
    # 407 within 2% of 415, the first of them in the search's order, 1.75% ahead: kept; the
    # note names the one serving more and says why the plan stays
    edge = _swap_rows(p, (400.0, 407.0, 415.0), (True, True, True))
    assert prefer_under_load(p, edge) == (p, edge)
    said = " ".join(t for _, t in simulation_notes(edge))
    assert "serving more than the best plan: 415.0 against 400.0" in said
    assert "the plan changes for 10% or more within the SLOs" in said
    missing = _swap_rows(p, (400.0, 380.0, 450.0), (True, True, False))
    assert prefer_under_load(p, missing) == (p, missing)
    kept_up = [{**r, "offered_requests_per_s": 2.0} for r in rows]
    assert prefer_under_load(p, kept_up) == (p, kept_up)


def test_the_plans_json_says_whether_its_slos_hold_under_the_load():
    """``slos_met_under_load`` in the JSON says what exit 4 says: False where the simulated
    plan misses an SLO on the mean with no alternative meeting them, True where the plan
    meets them (``feasible`` is the steady state's, True in both)."""
    base = ["plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase", "serve",
            "--isl", "2000", "--osl", "500", "--tpot-slo", "60ms", "--concurrency", "128",
            "--num-prompts", "300", "--engine", "vllm", "--json"]
    miss = CliRunner().invoke(app, [*base, "--ttft-slo", "300ms"])
    assert miss.exit_code == 4
    doc = json.loads(miss.stdout)
    assert doc["feasible"] is True and doc["slos_met_under_load"] is False
    met = CliRunner().invoke(app, [*base, "--ttft-slo", "60s"])
    assert met.exit_code == 0
    assert json.loads(met.stdout)["slos_met_under_load"] is True
