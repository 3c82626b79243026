"""The request-level serving simulation: scheduler semantics by hand, the step-time fit against
the cost model, directions under load, traces, and the CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from learn_to_shard.api import make_cost_model, make_workload, search_plan, simulate_plan
from learn_to_shard.cli import app
from learn_to_shard.cost.config import CostModelConfig
from learn_to_shard.errors import ConfigError
from learn_to_shard.parallel.strategy import Strategy
from learn_to_shard.serving import (
    Requests,
    ServingLoad,
    StepTimeModel,
    fit_step_model,
    fixed_requests,
    load_trace,
    poisson_arrivals,
    simulate,
    simulate_estimate,
)
from learn_to_shard.serving.steptime import priced
from learn_to_shard.workload import Phase

#: A step model with round numbers: 10 ms per step + 1 µs per token, 1 ns per KV token read.
TOY = StepTimeModel(np.array([1.0, 1e6]), np.array([0.010 + 1e-6, 0.010 + 1.0]), 1e-9, 0.0)


def _toy_step(tokens: float, kv: float) -> float:
    return 0.010 + 1e-6 * tokens + 1e-9 * kv


def test_one_client_by_hand():
    """Concurrency 1: the prompt is one step (it fits the budget), then osl − 1 decode steps
    whose context grows by one each step; the next request starts when this one ends."""
    req = fixed_requests(2, isl=100, osl=4)
    r = simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=1000,
                 kv_capacity_tokens=10_000, concurrency=1)
    prefill = _toy_step(100, 0)
    decodes = [_toy_step(1, 100 + g) for g in (1, 2, 3)]
    assert r.ttft_s[0] == pytest.approx(prefill, rel=1e-12)
    assert r.finish_s[0] == pytest.approx(prefill + sum(decodes), rel=1e-12)
    assert r.tpot_s[0] == pytest.approx(sum(decodes) / 3, rel=1e-12)
    assert r.arrival_s[1] == pytest.approx(r.finish_s[0], rel=1e-12)     # closed loop
    assert r.ttft_s[1] == pytest.approx(prefill, rel=1e-12)
    assert r.steps == 8


def test_chunked_prefill_and_decode_first():
    """A prompt longer than the token budget takes ceil(isl / budget) steps; a running decode
    takes its token first, so the chunk next to it is one token shorter."""
    req = Requests(isl=np.array([10, 250]), osl=np.array([50, 2]),
                   arrival_s=np.array([0.0, 0.0]))
    r = simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=100,
                 kv_capacity_tokens=10_000)
    # Step 1: prompt 0 (10 tokens) + 90 tokens of prompt 1; then prompt 1 gets 99 per step
    # beside request 0's decode: 90 + 99 = 189, 189 + 61 = 250 -> its first token at step 3.
    assert r.ttft_s[0] == pytest.approx(_toy_step(100, 0))
    t2 = _toy_step(100, 0) + _toy_step(100, 11) + _toy_step(62, 12)
    assert r.ttft_s[1] == pytest.approx(t2)


def test_prefill_first_stalls_decodes_while_prompts_are_pending():
    """SGLang's order: while a prompt is pending a step is a prefill batch alone (the running
    decode waits; the budget is all the prompt's), then decode-only steps."""
    req = Requests(isl=np.array([10, 250]), osl=np.array([3, 2]),
                   arrival_s=np.array([0.0, 0.0]))
    r = simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=100,
                 kv_capacity_tokens=10_000, prefill_first=True)
    # Steps 1-3 prefill 100 + 100 + 60 tokens (prompt 0 done in step 1, prompt 1 in step 3);
    # request 0 decodes only from step 4, beside request 1.
    t1, t3 = _toy_step(100, 0), _toy_step(100, 0) * 2 + _toy_step(60, 0)
    assert r.ttft_s[0] == pytest.approx(t1) and r.ttft_s[1] == pytest.approx(t3)
    t5 = t3 + _toy_step(2, 11 + 251) + _toy_step(1, 12)
    assert r.finish_s[0] == pytest.approx(t5)
    assert r.finish_s[1] == pytest.approx(t3 + _toy_step(2, 11 + 251))
    from learn_to_shard.engines import PREFILL_FIRST_ENGINES, SCHEDULING_SOURCES
    assert PREFILL_FIRST_ENGINES == ("sglang",) and set(SCHEDULING_SOURCES) == {"sglang"}


def test_admission_waits_for_a_slot_and_for_kv():
    """With one slot, the second request's TTFT includes the whole first request; with a KV
    pool that holds one request at a time, the same."""
    req = Requests(isl=np.array([50, 50]), osl=np.array([10, 10]),
                   arrival_s=np.array([0.0, 0.0]))
    slot = simulate(TOY, req, max_num_seqs=1, max_num_batched_tokens=1000,
                    kv_capacity_tokens=10_000)
    kv = simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=1000,
                  kv_capacity_tokens=60)
    for r in (slot, kv):
        assert r.first_token_s[1] > r.finish_s[0]
        assert r.ttft_s[1] == pytest.approx(r.finish_s[0] + _toy_step(50, 0))
    both = simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=1000,
                    kv_capacity_tokens=10_000)
    assert both.ttft_s[1] == pytest.approx(both.ttft_s[0])    # one step prefills both


def test_refuses_what_can_never_run():
    req = fixed_requests(3, isl=100, osl=10)
    with pytest.raises(ConfigError, match="KV pool"):
        simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=1000, kv_capacity_tokens=50,
                 concurrency=1)
    with pytest.raises(ConfigError, match="--concurrency"):
        simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=1000,
                 kv_capacity_tokens=1000)
    with pytest.raises(ConfigError, match="exactly one"):
        ServingLoad(concurrency=4, request_rate_per_s=1.0)
    with pytest.raises(ConfigError, match="--request-rate"):
        poisson_arrivals(10, 0.0)


def test_poisson_arrivals_and_low_load():
    arr = poisson_arrivals(20_000, 5.0, seed=3)
    assert arr[0] == 0.0 and np.all(np.diff(arr) >= 0)
    assert np.mean(np.diff(arr)) == pytest.approx(0.2, rel=0.03)     # 3.5 sigma at n=20,000
    # Arrivals 10 s apart never queue: every TTFT is one prefill step.
    req = Requests(isl=np.full(5, 100), osl=np.full(5, 5), arrival_s=np.arange(5) * 10.0)
    r = simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=1000,
                 kv_capacity_tokens=10_000)
    np.testing.assert_allclose(r.ttft_s, _toy_step(100, 0), rtol=1e-12)


@pytest.fixture(scope="module")
def llama_serve():
    cm = make_cost_model("llama-3.1-70b", "h100-sxm:8", make_workload("serve", isl=1024,
                                                                        osl=256))
    return cm, search_plan(cm, method="exact")


def test_step_fit_matches_the_cost_model(llama_serve):
    """The step-time model reproduces the cost model's decode steps at its grid and close to
    it in between, and the cost model's own serve step within 10%."""
    cm, plan = llama_serve
    s = plan.best.strategy
    step, rel = fit_step_model(cm, s)
    for b in (1, 64, 512):
        model = priced(cm, s, Phase.DECODE, 1152, (b,))[0][0]
        assert float(step.step_time_s(b, b * 1152, 0.0)) == pytest.approx(model, rel=0.02)
    assert rel < 0.10


@pytest.mark.parametrize(("cluster", "isl"), [("h100-sxm:1", 65536), ("h100-sxm:2", 32768)])
def test_a_lone_long_prompt_prefills_as_the_cost_model_prices_it(cluster, isl):
    """One client sending one long prompt at a time: its simulated TTFT is the cost model's
    prefill of that prompt (chunked over steps, the attention of every chunk over its
    prefix included), not below it: the prompt's attention pairs are priced from prompt-only
    passes, which the serve step's decodes do not hide, and the LM head at the one row it
    samples. Above it by what chunking adds: the simulation's 8,192-token steps each read
    the weights and pay a step's fixed costs (6% at TP2 on 32k tokens): within 10%."""
    cm = make_cost_model("llama-3.1-8b", cluster, make_workload("serve", isl=isl, osl=128))
    plan = search_plan(cm, method="exact")
    s = plan.best.strategy
    step, _ = fit_step_model(cm, s)
    assert step.prefill_pair_s > 0.0
    prefill = float(priced(cm, s, Phase.PREFILL, isl, (1,))[1][0])
    sim = simulate_plan(cm, plan, ServingLoad(concurrency=1, num_prompts=4), top=1)[0]
    ttft = sim["simulated"]["mean_ttft_s"]
    assert prefill <= ttft <= 1.10 * prefill


def test_the_pair_price_is_the_long_prompts_whatever_the_planned_isl():
    """The price of a prompt-attention pair is read off long prompt-only passes, so a plan
    ranked at 128-token prompts prices a trace's 16,000-token prompt as one planned at
    8,192 does (the attention's bytes per token, which dominate short prompts and which the
    token grid prices, would otherwise be booked as pairs: 8.6x at isl 128)."""
    from learn_to_shard.parallel.ops import MEGATRON_DIMS

    s = Strategy(tp=1, ep=1, pp=1, dp=1, batch=8, dims=MEGATRON_DIMS)
    price = [fit_step_model(make_cost_model("llama-3.1-8b", "h100-sxm:1",
                                            make_workload("serve", isl=isl, osl=16)),
                            s)[0].prefill_pair_s for isl in (2, 128, 8192)]
    assert price[2] > 0.0
    assert price[0] == pytest.approx(price[2], rel=0.02)
    assert price[1] == pytest.approx(price[2], rel=0.02)


def test_pipeline_micro_batches_share_a_steps_prompt_pairs():
    """With four stages, a serve step's prompt pairs ride the micro-batches in flight, as
    the cost model spreads a step's prompt tokens: the fitted step is within 20% of the cost
    model's serve step at long prompts (2.3x when each step paid every pair in full; the
    rest is the pipelined token grid's, priced from decode steps whose last stage carries
    an LM-head row per token), and a lone prompt still pays them whole (one pass)."""
    from learn_to_shard.parallel.ops import MEGATRON_DIMS

    cm = make_cost_model("llama-3.1-8b", "h100-sxm:4", make_workload("serve", isl=32768,
                                                                       osl=16))
    s = Strategy(tp=1, ep=1, pp=4, dp=1, batch=16, dims=MEGATRON_DIMS)
    step, rel = fit_step_model(cm, s)
    assert rel < 0.2
    lone = float(step.step_time_s(8192, 0.0, 8192 * 4096, 0.0, chunks=1))
    spread = float(step.step_time_s(8192, 0.0, 8192 * 4096, 0.0, chunks=4))
    assert lone - spread == pytest.approx(step.prefill_pair_s * 8192 * 4096 * 0.75, rel=1e-6)


def test_directions_under_load(llama_serve):
    """More closed-loop clients: higher TTFT and TPOT, more throughput (until saturation)."""
    cm, plan = llama_serve
    rows = [simulate_plan(cm, plan, ServingLoad(concurrency=c, num_prompts=200), top=1)[0]
            for c in (4, 32, 128)]
    ttft = [r["simulated"]["mean_ttft_s"] for r in rows]
    tpot = [r["simulated"]["mean_tpot_s"] for r in rows]
    tps = [r["tokens_per_s_per_device"] for r in rows]
    assert ttft == sorted(ttft) and tpot == sorted(tpot) and tps == sorted(tps)
    s = rows[1]["simulated"]
    assert s["p50_ttft_s"] <= s["p90_ttft_s"] <= s["p99_ttft_s"]
    assert rows[0]["sim_over_analytic"]["mean_tpot"] == pytest.approx(1.0, rel=0.1)


def test_trace_formats(tmp_path):
    azure = tmp_path / "azure.csv"
    azure.write_text("\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900,374,44\n"
                     "2023-11-16 18:15:50.9951690,396,109\n", encoding="utf-8")
    tr = load_trace(azure)
    assert list(tr.isl) == [374, 396] and list(tr.osl) == [44, 109]
    assert tr.arrival_s is not None
    assert tr.arrival_s[1] == pytest.approx(4.314579, abs=1e-6)
    plain = tmp_path / "plain.csv"
    plain.write_text("arrival_s,isl,osl\n0.5,10,3\n", encoding="utf-8")
    assert load_trace(plain).arrival_s[0] == 0.0
    bad = tmp_path / "bad.csv"
    bad.write_text("when,isl,osl\n0,1,1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="no arrival column"):
        load_trace(bad)


def test_trace_column_names_match_in_any_case_and_spacing(tmp_path):
    """A header written ``arrival_s, isl, osl`` or ``Arrival_S,ISL,OSL`` is the same
    columns; one that names a column twice in two cases is refused."""
    for head in ("arrival_s, isl, osl", "Arrival_S,ISL,OSL", " timestamp ,Input_Tokens,osl"):
        path = tmp_path / "t.csv"
        path.write_text(f"{head}\n0,10,3\n1.5,20,4\n", encoding="utf-8")
        tr = load_trace(path)
        assert list(tr.isl) == [10, 20] and list(tr.osl) == [3, 4], head
    path.write_text("isl,ISL,osl,arrival_s\n1,1,1,0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="more than once"):
        load_trace(path)
    # Two names of one quantity: which one is meant is the user's to say.
    path.write_text("timestamp,isl,osl,arrival_s,input_tokens\n0,10,10,0,5000\n",
                    encoding="utf-8")
    with pytest.raises(ConfigError, match=r"2 arrival columns \('arrival_s', 'timestamp'\)"):
        load_trace(path)
    path.write_text("arrival_s,isl,osl,input_tokens\n0,10,10,5000\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"2 prompt length columns \('isl', 'input_tokens'\)"):
        load_trace(path)


def test_a_trace_longer_than_one_simulation_is_refused(tmp_path, monkeypatch):
    import learn_to_shard.serving.load as load_mod

    monkeypatch.setattr(load_mod, "MAX_LOAD_REQUESTS", 3)
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,isl,osl\n" + "0,1,1\n" * 4, encoding="utf-8")
    with pytest.raises(ConfigError, match="holds 4 requests, more than the 3"):
        load_trace(path)


def test_a_trace_is_read_in_arrival_order_and_dealt_so(tmp_path):
    """Rows out of time order are sorted by arrival (ties keep file order), so replicas are
    dealt the requests as they arrive, not as the file lists them: with two replicas, one
    gets the 1st, 3rd, ... arrivals and the other, simulated as the busier (606 tokens
    against 353), the 2nd, 4th, ...; the cluster's output is 9 of its 6 tokens."""
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,isl,osl\n3,400,4\n1,200,2\n1,250,2\n0,100,1\n",
                 encoding="utf-8")
    tr = load_trace(f)
    assert list(tr.arrival_s) == [0.0, 1.0, 1.0, 3.0]
    assert list(tr.isl) == [100, 200, 250, 400] and list(tr.osl) == [1, 2, 2, 4]
    from learn_to_shard.serving.load import _instance_requests
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:2", make_workload("serve", isl=200, osl=2))
    req, _, _, worth = _instance_requests(cm, ServingLoad(trace=tr), 2)
    assert list(req.isl) == [200, 400] and list(req.arrival_s) == [1.0, 3.0]
    assert worth == pytest.approx(9 / 6)


def test_the_busiest_replica_of_a_trace_is_simulated_wherever_its_rows_fall():
    """Round-robin over four replicas, the replica whose rows are long is the one simulated
    whichever rows of the trace are long: every fourth request short (100/10) and the rest
    long (2000/800) at 40 requests/s overloads the replicas that get the long ones, whether
    the short ones are rows 1, 5, ... or rows 2, 6, ... (the simulated share was rows 1, 5,
    ..., so the first trace simulated the short requests alone: 0.02 of a replica's
    capacity and no warning, against overloaded for the second)."""
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:4", make_workload("serve", isl=1500,
                                                                     osl=600))
    plan = search_plan(cm, method="megatron")
    assert plan.best is not None and plan.best.instances == 4
    n = 2000
    arrival = np.arange(n) / 40.0
    sims = []
    for short_at in (0, 1):
        short = np.arange(n) % 4 == short_at
        tr = Requests(np.where(short, 100, 2000), np.where(short, 10, 800), arrival)
        sims.append(simulate_plan(cm, plan, ServingLoad(trace=tr), top=1)[0])
    assert all(sim["overloaded"] for sim in sims)
    assert "busiest share (rows 2, 6," in sims[0]["replica_share"]
    assert "busiest share (rows 1, 5," in sims[1]["replica_share"]
    assert sims[0]["tokens_per_s_per_device"] == pytest.approx(
        sims[1]["tokens_per_s_per_device"], rel=1e-9)


def test_trace_times_too_far_apart_to_resolve_are_refused(tmp_path):
    """Arrival times beyond 1e11 s (of 0 or of each other) are refused: float64 seconds there
    are coarser than a step, so every request would share one instant."""
    for times in (("1e300", "1e300"), ("0", "2e11"), ("-1e12", "0")):
        f = tmp_path / "t.csv"
        f.write_text(f"arrival_s,isl,osl\n{times[0]},10,2\n{times[1]},10,2\n", encoding="utf-8")
        with pytest.raises(ConfigError, match="within 1e\\+11 s"):
            load_trace(f)


def test_a_trace_without_isl_osl_ranks_at_its_means(tmp_path):
    """--trace without --isl/--osl ranks strategies at the trace's mean lengths (rounded),
    says so on stderr and records it in the JSON; an --isl given is kept."""
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,isl,osl\n0,1000,200\n0.5,3000,100\n0.2,500,401\n",
                 encoding="utf-8")
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--phase", "serve",
            "--method", "megatron", "--trace", str(f)]
    r = CliRunner().invoke(app, [*base, "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert (data["workload"]["isl"], data["workload"]["osl"]) == (1500, 234)
    assert data["simulation"][0]["lengths"]["ranked_at"] == {
        "isl": 1500, "osl": 234, "trace_means": ["isl", "osl"]}
    r = CliRunner().invoke(app, [*base, "-q"])
    assert r.exit_code == 0 and "ranked at the trace's mean lengths (--isl 1500, --osl 234)" \
        in r.output
    r = CliRunner().invoke(app, [*base, "-q", "--export", "vllm"])   # the launch script alone
    assert r.exit_code == 0 and r.stdout.startswith("# vllm") and r.stderr == "", r.stderr
    r = CliRunner().invoke(app, [*base, "--isl", "800", "--json"])
    data = json.loads(r.stdout)
    assert (data["workload"]["isl"], data["workload"]["osl"]) == (800, 234)
    assert data["simulation"][0]["lengths"]["ranked_at"]["trace_means"] == ["osl"]
    # Outside the serve phase the trace gives no lengths: the load is refused as before.
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                                 "--context", "1000", "--trace", str(f)])
    assert r.exit_code == 2 and "a simulated load needs --phase serve" in r.output


def test_a_trace_faster_than_the_replica_is_flagged(tmp_path):
    """A trace whose mean rate exceeds what the replica completes at the plan's batch is
    flagged as overloaded; one that arrives slowly is not, nor one whose mean rate the
    replica serves but which ends in a burst (its burst queues, the trace is not
    overloaded)."""
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:1", make_workload("serve", isl=2000, osl=200))
    plan = search_plan(cm, method="megatron")
    n = 400
    fast = Requests(np.full(n, 2000), np.full(n, 200), np.arange(n) * 0.005)
    slow = Requests(np.full(64, 2000), np.full(64, 200), np.arange(64) * 10.0)
    hot = simulate_plan(cm, plan, ServingLoad(trace=fast), top=1)[0]
    cold = simulate_plan(cm, plan, ServingLoad(trace=slow), top=1)[0]
    assert hot["overloaded"] and hot["offered_requests_per_s"] == pytest.approx(200.0)
    assert not cold["overloaded"] and cold["offered_requests_per_s"] == pytest.approx(0.1)
    assert hot["capacity_requests_per_s"] < 200.0
    arr = np.concatenate([np.arange(300) * 2.0, np.full(300, 600.0)])
    burst = Requests(np.full(600, 2000), np.full(600, 200), arr)
    tail = simulate_plan(cm, plan, ServingLoad(trace=burst), top=1)[0]
    assert tail["offered_requests_per_s"] < tail["capacity_requests_per_s"]
    assert not tail["overloaded"]


def test_cli_simulates_top_plans(tmp_path):
    runner = CliRunner()
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:2", "--phase", "serve",
            "--isl", "512", "--osl", "128"]
    r = runner.invoke(app, [*base, "--concurrency", "16", "--num-prompts", "64", "--json"])
    assert r.exit_code == 0, r.output
    sims = json.loads(r.stdout)["simulation"]
    assert 1 <= len(sims) <= 3 and sims[0]["load"] == "closed loop, concurrency 16"
    assert sims[0]["simulated"]["p99_ttft_s"] >= sims[0]["simulated"]["p50_ttft_s"] > 0
    r = runner.invoke(app, [*base, "--request-rate", "4", "--num-prompts", "64", "-q"])
    assert r.exit_code == 0 and "Simulated serving" in r.stdout
    r = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:2",
                            "--context", "512", "--concurrency", "4"])
    assert r.exit_code == 2 and "--phase serve" in r.output
    r = runner.invoke(app, [*base, "--num-prompts", "5"])
    assert r.exit_code == 2 and "--num-prompts" in r.output


def test_published_serving_rows_are_predicted_or_explained():
    """Rows of the shipped serving table: one calibration row is predicted with finite
    TTFT/TPOT/throughput; an FP4 row of a model with a shipped NVFP4 checkpoint is predicted
    with it, one without (Llama-3.3-70B) is named as not expressible."""
    import csv

    from learn_to_shard.fidelity.serving import default_table, predict_row, summarize

    with default_table().open(newline="", encoding="utf-8") as fh:
        rows = {r["id"]: r for r in csv.DictReader(fh)}
    r = predict_row(rows["dc-70b-random-rps1"])
    assert r.reason is None and set(r.measured) == {"ttft_ms", "tpot_ms", "output_tok_s"}
    assert all(np.isfinite(v) and v > 0 for v in r.predicted.values())
    fp4_llama = next(x for x in rows.values()
                     if x["weight_dtype"] == "fp4" and x["l2s_model"] == "llama-3.1-70b")
    assert "no NVFP4 checkpoint" in (predict_row(fp4_llama).reason or "")
    fp4_dsr1 = predict_row(rows["trtperf-dsr1-b200-dep4-1024-1024"])   # via deepseek-v3.1-nvfp4
    assert fp4_dsr1.reason is None and fp4_dsr1.predicted["output_tok_s"] > 0
    s = summarize([r], "calibration")
    assert s["predicted"] == 1 and s["ttft_ms_n"] == 1


def test_summary_per_source_and_gpu_gives_count_and_both_medians():
    """``summarize_by_source`` groups the predicted rows of one split by (source, GPU): row
    count, and per metric the value count, median |error| and median signed error; rows of
    the other split and unpredicted rows are left out, and a metric no row gives is nan."""
    from learn_to_shard.fidelity.serving import ServingRowResult, summarize_by_source

    def row(rid, src, gpu, ttft=None, tps=None, split="held-out", reason=None):
        m = {k: 100.0 for k, v in (("ttft_ms", ttft), ("output_tok_s", tps)) if v is not None}
        p = {k: v for k, v in (("ttft_ms", ttft), ("output_tok_s", tps)) if v is not None}
        return ServingRowResult(rid, split, "vllm", "", "", source_key=src, hardware=gpu,
                                measured=m, predicted=p, reason=reason)

    res = [row("a", "lab", "h100", ttft=50.0, tps=110.0), row("b", "lab", "h100", ttft=70.0),
           row("c", "lab", "h100", ttft=130.0), row("d", "lab", "a100-80gb", tps=90.0),
           row("e", "lab", "a100-80gb", ttft=10.0, split="calibration"),
           row("f", "other", "h200", reason="model not shipped")]
    by = {(g["source_key"], g["hardware"]): g for g in summarize_by_source(res)}
    assert set(by) == {("lab", "h100"), ("lab", "a100-80gb")}
    h100 = by[("lab", "h100")]
    assert h100["rows"] == 3 and h100["ttft_ms_n"] == 3 and h100["output_tok_s_n"] == 1
    assert h100["ttft_ms_median_abs_err"] == pytest.approx(0.3)      # |-50%|, |-30%|, |+30%|
    assert h100["ttft_ms_median_signed_err"] == pytest.approx(-0.3)
    assert h100["output_tok_s_median_signed_err"] == pytest.approx(0.1)
    a100 = by[("lab", "a100-80gb")]
    assert a100["ttft_ms_n"] == 0 and math.isnan(a100["ttft_ms_median_abs_err"])
    assert a100["output_tok_s_median_signed_err"] == pytest.approx(-0.1)


def test_a_row_stating_mean_and_median_is_compared_on_the_median():
    """A row that states both a mean and a median TTFT / TPOT is compared on the medians
    (InferenceX's heavy-tailed first requests move the mean, not the median); one that
    states only the mean on the mean; the statistic is recorded per metric."""
    from learn_to_shard.fidelity.serving import default_table, load_rows, predict_row

    rows = {r["id"]: r for r in load_rows(default_table())}
    both = rows["ix-dsr1-h200-sgl-tp8ep1-1k1k-c4"]
    assert float(both["ttft_ms_mean"]) > 1.5 * float(both["ttft_ms_median"])
    r = predict_row(both)
    assert r.measured["ttft_ms"] == float(both["ttft_ms_median"])
    assert r.measured["tpot_ms"] == float(both["tpot_ms_median"])
    assert r.statistic == {"ttft_ms": "p50", "tpot_ms": "p50"}
    mean_only = dict(both, ttft_ms_median="", tpot_ms_median="", itl_ms_median="")
    r = predict_row(mean_only)
    assert r.measured["ttft_ms"] == float(both["ttft_ms_mean"])
    assert r.measured["tpot_ms"] == float(both["tpot_ms_mean"])
    assert r.statistic == {"ttft_ms": "mean", "tpot_ms": "mean"}
    itl_only = dict(mean_only, ttft_ms_mean="", tpot_ms_mean="",
                    itl_ms_median=both["itl_ms_median"])
    assert predict_row(itl_only).statistic == {"tpot_ms": "itl p50"}


def test_a_sweep_direction_counts_only_where_its_ends_compare_one_statistic():
    """The sweep check compares a metric from the sweep's first point to its last only where
    both compare the same statistic: a mean at one end and a median at the other is not a
    direction."""
    from learn_to_shard.fidelity.serving import ServingRowResult, summarize

    def pt(x, ttft, stat):
        return ServingRowResult(f"p{x}", "held-out", "sglang", "s", "concurrency",
                                measured={"ttft_ms": ttft}, predicted={"ttft_ms": x * 10.0},
                                statistic={"ttft_ms": stat}, x=x)

    assert summarize([pt(1, 100.0, "p50"), pt(8, 200.0, "p50")])["sweep_directions"] == "1/1"
    assert summarize([pt(1, 100.0, "p50"), pt(8, 50.0, "p50")])["sweep_directions"] == "0/1"
    mixed = summarize([pt(1, 300.0, "mean"), pt(8, 200.0, "p50")])
    assert mixed["sweep_directions"] == "0/0" and mixed["sweep_ends_unlike"] == 1


def test_unstated_kv_dtype_follows_the_engine_and_the_checkpoint():
    """A row whose source does not state the KV dtype runs as its engine's ``auto`` loads
    the checkpoint: TensorRT-LLM with an NVIDIA ModelOpt export (``nvidia/``) in FP8, with
    DeepSeek's own FP8 checkpoint in 16 bits, with the row's own checkpoint as it states, and
    with a stand-in checkpoint of the same shape in 16 bits; vLLM and SGLang with a ModelOpt
    export in FP8 too, with DeepSeek's own FP8 checkpoint in 16 bits; a stated dtype as
    stated."""
    from learn_to_shard.fidelity.serving import _kv_dtype
    from learn_to_shard.model.hf_config import load_model
    from learn_to_shard.workload import DType

    dense, nvfp4 = load_model("llama-3.1-70b"), load_model("qwen3-235b-a22b-nvfp4")
    row = {"engine": "trtllm", "kv_dtype": "n/s", "model_hf": "nvidia/Llama-3.3-70B-Instruct-FP8"}
    assert _kv_dtype(row, dense) is DType.FP8
    assert _kv_dtype(row | {"engine": "vllm"}, dense) is DType.FP8
    assert _kv_dtype(row | {"engine": "sglang"}, dense) is DType.FP8
    ds = {"kv_dtype": "n/s", "model_hf": "deepseek-ai/DeepSeek-R1-0528"}
    for engine in ("vllm", "sglang", "trtllm"):
        assert _kv_dtype(ds | {"engine": engine}, load_model("deepseek-v3")) is DType.BF16
    assert _kv_dtype(row | {"kv_dtype": "bf16"}, dense) is DType.BF16
    assert _kv_dtype(row | {"model_hf": "nvidia/Qwen3-235B-A22B-FP4"}, nvfp4,
                     stand_in=True) is DType.FP8
    # a stand-in NVFP4 folder's KV scales say nothing about a checkpoint the row does not name
    fp4_ds = {"engine": "trtllm", "kv_dtype": "n/s", "model_hf": "DeepSeek-R1 (FP4)"}
    assert _kv_dtype(fp4_ds, load_model("deepseek-v3.1-nvfp4"), stand_in=True) is DType.BF16
    assert _kv_dtype(fp4_ds, load_model("deepseek-v3.1-nvfp4")) is DType.FP8
    ds = {"engine": "trtllm", "kv_dtype": "n/s", "model_hf": "deepseek-ai/DeepSeek-R1-0528"}
    assert _kv_dtype(ds, load_model("deepseek-v3")) is DType.BF16
    assert _kv_dtype(ds | {"kv_dtype": "fp8"}, load_model("deepseek-v3")) is DType.FP8


def test_sglang_random_lengths_are_uniform_up_to_the_nominal():
    """SGLang's random dataset with random_range_ratio 0 draws from 1 to the nominal length
    (mean ≈ half of it); vLLM's with range ratio 0 is fixed."""
    r = fixed_requests(20_000, isl=1024, osl=512, up_to_nominal=True, seed=1)
    assert r.isl.min() >= 1 and r.isl.max() <= 1024 and r.osl.max() <= 512
    assert r.isl.mean() == pytest.approx(512.5, rel=0.01)    # sd of the mean ≈ 0.4%
    assert set(fixed_requests(10, isl=1024, osl=512).isl) == {1024}


def test_a_trace_request_beyond_the_context_limit_is_refused(tmp_path):
    """A trace row longer than the model's max_position_embeddings is bad input (exit 2, one
    line), as the engines refuse it, not simulated."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,isl,osl\n0,100,10\n0.1,200000,10\n", encoding="utf-8")
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:2",
                                 "--phase", "serve", "--isl", "512", "--osl", "128",
                                 "--trace", str(trace), "-q"])
    assert r.exit_code == 2 and "max_position_embeddings" in r.output


def test_sharegpt_lengths_are_vllms_filtered_first_turns():
    """The shipped ShareGPT table: 10,000 (prompt, output) pairs within ``vllm bench serve``'s
    ShareGPT filter (each ≥ 4 tokens, prompt ≤ 1,024, prompt + output ≤ 2,048), long-tailed
    outputs (the p99 several times the median)."""
    from learn_to_shard.serving.simulate import sharegpt_lengths

    isl, osl = sharegpt_lengths()
    assert len(isl) == len(osl) == 10_000
    assert isl.min() >= 4 and osl.min() >= 4 and isl.max() <= 1024 and (isl + osl).max() <= 2048
    assert 100 < isl.mean() < 130 and 320 < osl.mean() < 370
    assert np.percentile(osl, 99) > 4 * np.median(osl)


def test_sharegpt_requests_keep_the_shape_at_the_requested_means():
    """Scaled to a run's stated means; the draw is seeded; a load names its lengths, refuses
    --range-ratio with them, and its longest request bounds every drawn one."""
    from learn_to_shard.serving.simulate import sharegpt_requests, sharegpt_scaled

    r = sharegpt_requests(50_000, 219, 200, seed=3)
    assert r.isl.mean() == pytest.approx(219, rel=0.02)     # 50k draws: sd of the mean ~0.5%
    assert r.osl.mean() == pytest.approx(200, rel=0.02)
    assert r.osl.min() >= 1 and np.percentile(r.osl, 99) > 3 * np.median(r.osl)
    again = sharegpt_requests(100, 219, 200, seed=3)
    assert (again.isl == sharegpt_requests(100, 219, 200, seed=3).isl).all()
    load = ServingLoad(concurrency=8, dataset="sharegpt")
    assert "ShareGPT" in load.describe()
    i, o = sharegpt_scaled(219, 200)
    assert load.longest_request_tokens(219, 200) == int((i + o).max())
    with pytest.raises(ConfigError, match="--range-ratio"):
        ServingLoad(concurrency=8, dataset="sharegpt", range_ratio=0.5)
    with pytest.raises(ConfigError, match="--dataset"):
        ServingLoad(concurrency=8, dataset="alpaca")


def test_sharegpt_script_reads_lengths_and_refuses_code(tmp_path):
    """scripts/sharegpt_lengths.py applies vLLM's filter to a pickle of (isl, osl) pairs and
    refuses a pickle that names a global (it would run code when loaded)."""
    import pickle
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "sharegpt_lengths.py"
    main = runpy.run_path(str(script))["main"]
    pairs = [(10, 20)] * 10_050 + [(2, 50), (2000, 10), (1000, 1500)]
    pkl, out = tmp_path / "p.pkl", tmp_path / "out.csv"
    pkl.write_bytes(pickle.dumps(pairs))
    assert main([str(pkl), "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0] == "isl,osl" and len(lines) == 10_001 and set(lines[1:]) == {"10,20"}
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(pickle.dumps(Path("x")))
    with pytest.raises(pickle.UnpicklingError, match="refusing global"):
        main([str(bad), "--out", str(out)])


def test_cli_simulates_sharegpt_lengths():
    """l2s plan --dataset sharegpt names the lengths in the simulation line; without a load
    the flag is refused with one line."""
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--phase", "serve",
            "--isl", "200", "--osl", "200", "-q", "--method", "megatron"]
    r = CliRunner().invoke(app, base + ["--concurrency", "16", "--dataset", "sharegpt"])
    assert r.exit_code == 0 and "ShareGPT lengths" in r.output
    r = CliRunner().invoke(app, base[:-3] + ["--concurrency", "16", "--dataset", "sharegpt",
                                             "--num-prompts", "32", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["workload"]["kv_dtype"] == "bf16"
    lengths = data["simulation"][0]["lengths"]
    assert {k: lengths[k] for k in ("dataset", "range_ratio", "up_to_nominal")} == {
        "dataset": "sharegpt", "range_ratio": 0.0, "up_to_nominal": False}
    assert (lengths["planned_isl"], lengths["planned_osl"]) == (200, 200)
    assert not lengths["apart_from_planned"]          # only a trace is judged apart
    r = CliRunner().invoke(app, base + ["--dataset", "sharegpt"])
    assert r.exit_code == 2 and "--dataset" in r.output


def test_sharegpt_rows_without_totals_run_at_the_stated_means():
    """A ShareGPT row that states no token totals runs at the medians of the means the
    table's other ShareGPT rows state, each prompt set once (all within 215-233 / 187-221
    tokens)."""
    from learn_to_shard.fidelity.serving import _lengths, load_rows, stated_sharegpt_means

    means = stated_sharegpt_means()
    assert means is not None
    isl, osl = means
    stated = [m for r in load_rows() if r["dataset"] == "sharegpt"
              and (m := _lengths(r)) is not None]
    assert len(stated) >= 20
    assert min(m[0] for m in stated) <= isl <= max(m[0] for m in stated)
    assert min(m[1] for m in stated) <= osl <= max(m[1] for m in stated)
    assert 200 < isl < 240 and 180 < osl < 215


def test_random_rows_whose_outputs_end_at_eos_run_at_the_means_of_their_totals():
    """A random-prompt row run without --ignore-eos (``length_dist`` says its outputs end at
    EOS) runs at the means of its token totals, not at the nominal lengths; the same row
    without that clause, or with the clause but no totals, runs at the nominal lengths."""
    from learn_to_shard.fidelity.serving import _lengths, load_rows

    row = {"isl": "4000", "osl": "200", "completed": "500", "total_input_tokens": "1999249",
           "total_output_tokens": "52309",
           "length_dist": "fixed prompts; outputs end at EOS (no --ignore-eos)"}
    assert _lengths(row) == (3998, 105)
    assert _lengths({**row, "length_dist": "fixed"}) == (4000, 200)
    assert _lengths({**row, "total_output_tokens": ""}) == (4000, 200)
    # the shipped gpt-oss-20b rows say so: their outputs average 94-107 of 100-200 tokens
    eos = [r for r in load_rows() if "end at EOS" in r["length_dist"]
           and r["l2s_model"] == "gpt-oss-20b" and r["osl"] == "200"]
    assert eos and all(_lengths(r)[1] < 120 for r in eos)


def test_a_trace_refuses_the_length_flags_it_overrides():
    """A trace gives the requests and their lengths: --dataset sharegpt, --range-ratio and
    --num-prompts beside it would be ignored, so they are refused with one line naming them
    (they were silently dropped: the simulation ran the trace's own lengths)."""
    tr = Requests(isl=np.array([100, 200]), osl=np.array([100, 50]),
                  arrival_s=np.array([0.0, 0.1]))
    for kw, flag in ((dict(dataset="sharegpt"), "--dataset sharegpt"),
                     (dict(range_ratio=0.5), "--range-ratio"),
                     (dict(num_prompts=5), "--num-prompts")):
        with pytest.raises(ConfigError, match=f"{flag} with --trace"):
            ServingLoad(trace=tr, **kw)
    assert ServingLoad(trace=tr).describe() == "trace of 2 requests"


def test_cli_refuses_sharegpt_with_a_trace(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,isl,osl\n0,100,100\n0.1,200,50\n")
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                                 "--phase", "serve", "--isl", "200", "--osl", "200", "-q",
                                 "--method", "megatron", "--trace", str(trace),
                                 "--dataset", "sharegpt"])
    assert r.exit_code == 2 and "--dataset sharegpt with --trace" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_a_drawn_request_beyond_the_context_limit_names_the_length_flag():
    """The context-limit refusal names the flag whose lengths went too long (it said --trace
    for every load): ShareGPT's tail scaled to a 1,000-token mean prompt passes Phi-3-mini's
    4,096 positions."""
    base = ["plan", "--model", "phi-3-mini-4k-instruct", "--cluster", "h100-sxm:1", "--phase",
            "serve", "-q", "--method", "megatron", "--concurrency", "4"]
    r = CliRunner().invoke(app, base + ["--isl", "1000", "--osl", "500", "--dataset", "sharegpt"])
    assert r.exit_code == 2 and "--dataset sharegpt: a request of" in r.output
    assert "max_position_embeddings 4096" in r.output
    r = CliRunner().invoke(app, base + ["--isl", "2000", "--osl", "2000", "--range-ratio", "0.5"])
    assert r.exit_code == 2 and "--range-ratio: a request of" in r.output


def test_pooled_itl_counts_a_prefill_stall_once():
    """ITL pools every request's token gaps (the benchmark scripts' median ITL): a prefill-only
    step that stalls a decode lengthens that request's one gap, not every gap, so the median
    ITL stays a decode step where the mean TPOT carries the stall."""
    req = Requests(isl=np.array([10, 250]), osl=np.array([3, 2]),
                   arrival_s=np.array([0.0, 0.0]))
    r = simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=100,
                 kv_capacity_tokens=10_000, prefill_first=True)
    t1, t3 = _toy_step(100, 0), _toy_step(100, 0) * 2 + _toy_step(60, 0)
    t4 = t3 + _toy_step(2, 11 + 251)
    t5 = t4 + _toy_step(1, 12)
    gaps = sorted([t4 - t1, t5 - t4, t4 - t3])          # request 0: two gaps; request 1: one
    assert r.itl_weight.sum() == 3
    assert r.itl_percentile_s(50) == pytest.approx(gaps[1], rel=1e-6)
    assert r.itl_percentile_s(99) == pytest.approx(gaps[2], rel=1e-6)
    summary = r.summary()
    assert summary["mean_itl_s"] == pytest.approx(sum(gaps) / 3, rel=1e-6)
    assert summary["p50_itl_s"] < summary["mean_tpot_s"]


def test_pooled_itl_of_a_decode_run_is_its_steps():
    """One client: the gaps are the decode steps themselves (one block of decode-only steps);
    their mean is the request's TPOT."""
    r = simulate(TOY, fixed_requests(1, isl=100, osl=4), max_num_seqs=8,
                 max_num_batched_tokens=1000, kv_capacity_tokens=10_000, concurrency=1)
    decodes = [_toy_step(1, 100 + g) for g in (1, 2, 3)]
    assert r.itl_weight.sum() == 3
    assert r.itl_percentile_s(50) == pytest.approx(decodes[1], rel=1e-6)
    assert r.summary()["mean_itl_s"] == pytest.approx(r.tpot_s[0], rel=1e-6)


def _joiner(**kw: object) -> object:
    """Request 0 decodes alone; request 1 (20 prompt tokens) arrives halfway through request
    0's second decode step."""
    a = _toy_step(10, 0) + _toy_step(1, 11) + 0.5 * _toy_step(1, 12)
    req = Requests(isl=np.array([10, 20]), osl=np.array([50, 5]), arrival_s=np.array([0.0, a]))
    return simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=1000,
                    kv_capacity_tokens=10_000, **kw)


def test_overlap_schedule_admits_an_arrival_one_step_later():
    """Under an overlap scheduler the step after the one an arrival lands in was fixed while
    that one ran: the prompt waits one more decode step (request 0's third)."""
    sync, ovl = _joiner(), _joiner(overlap_schedule=True)
    p0 = _toy_step(10, 0)
    end_d2 = p0 + _toy_step(1, 11) + _toy_step(1, 12)
    assert sync.first_token_s[1] == pytest.approx(end_d2 + _toy_step(21, 13), rel=1e-9)
    assert ovl.first_token_s[1] == pytest.approx(end_d2 + _toy_step(1, 13)
                                                 + _toy_step(21, 14), rel=1e-9)


def test_overlap_schedule_costs_nothing_on_an_idle_engine():
    """One client: each request finds the engine idle, so the overlap scheduler sees it at once
    and the run is the synchronous one."""
    kw = dict(max_num_seqs=8, max_num_batched_tokens=1000, kv_capacity_tokens=10_000,
              concurrency=1)
    req = fixed_requests(3, isl=100, osl=4)
    a, b = simulate(TOY, req, **kw), simulate(TOY, req, overlap_schedule=True, **kw)
    assert np.allclose(a.first_token_s, b.first_token_s, rtol=1e-12)
    assert np.allclose(a.finish_s, b.finish_s, rtol=1e-12)


def test_a_scheduler_receive_interval_admits_at_the_next_poll():
    """SGLang ``--scheduler-recv-interval 5``: after request 0's prompt step the scheduler polls
    at once, then only every fifth decode step, so request 1 (arriving during the second
    decode step) joins after the fifth; with an interval of 1 it joins after the second."""
    every, five = _joiner(), _joiner(recv_interval=5)
    p0 = _toy_step(10, 0)
    end_d2 = p0 + _toy_step(1, 11) + _toy_step(1, 12)
    end_d5 = p0 + sum(_toy_step(1, c) for c in range(11, 16))
    assert every.first_token_s[1] == pytest.approx(end_d2 + _toy_step(21, 13), rel=1e-9)
    assert five.first_token_s[1] == pytest.approx(end_d5 + _toy_step(21, 16), rel=1e-9)
    # the next poll after a prompt step is immediate: request 0 is untouched
    assert five.first_token_s[0] == pytest.approx(every.first_token_s[0], rel=1e-12)


def test_a_scheduler_receive_interval_costs_nothing_on_an_idle_engine():
    """One client: each request finds the engine idle, and an idle SGLang scheduler polls at
    once, so the run is the one without the interval."""
    kw = dict(max_num_seqs=8, max_num_batched_tokens=1000, kv_capacity_tokens=10_000,
              concurrency=1)
    req = fixed_requests(3, isl=100, osl=4)
    a, b = simulate(TOY, req, **kw), simulate(TOY, req, recv_interval=30, **kw)
    assert np.allclose(a.first_token_s, b.first_token_s, rtol=1e-12)
    assert np.allclose(a.finish_s, b.finish_s, rtol=1e-12)
    with pytest.raises(ConfigError, match="recv_interval"):
        simulate(TOY, req, recv_interval=0, **kw)
    with pytest.raises(ConfigError, match="do not combine"):
        simulate(TOY, req, recv_interval=2, decode_steps_per_schedule=4, **kw)


def test_multi_step_decoding_admits_at_the_end_of_a_burst():
    """vLLM V0 ``--num-scheduler-steps 4``: an arrival during the first decode step of a burst
    is admitted after the burst's fourth step."""
    a = _toy_step(10, 0) + 0.5 * _toy_step(1, 11)
    req = Requests(isl=np.array([10, 20]), osl=np.array([50, 5]), arrival_s=np.array([0.0, a]))
    r = simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=1000,
                 kv_capacity_tokens=10_000, decode_steps_per_schedule=4)
    burst = sum(_toy_step(1, 10 + g) for g in (1, 2, 3, 4))
    assert r.first_token_s[1] == pytest.approx(_toy_step(10, 0) + burst + _toy_step(21, 15),
                                               rel=1e-9)
    with pytest.raises(ConfigError, match="decode_steps_per_schedule"):
        simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=1000,
                 kv_capacity_tokens=10_000, decode_steps_per_schedule=0)


def test_multi_step_finish_inside_a_burst_does_not_end_it():
    """vLLM V0 multi-step: the scheduler runs again only when a burst's steps are done
    (``LLMEngine._has_remaining_steps``), so a request that reaches its last token at the
    burst's second step is computed to the fourth (the wasted steps still carry it), its
    tokens reach the client at the burst's end, and an arrival during the first step waits for
    the fourth, not for the finish."""
    pre = _toy_step(20, 0)                          # both prompts (10 tokens each), one step
    a = pre + 0.5 * _toy_step(2, 22)
    req = Requests(isl=np.array([10, 10, 20]), osl=np.array([50, 3, 5]),
                   arrival_s=np.array([0.0, 0.0, a]))
    r = simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=1000,
                 kv_capacity_tokens=10_000, decode_steps_per_schedule=4)
    # Four decode steps of both requests (contexts 11 + 11, then +2 per step).
    burst_end = pre + sum(_toy_step(2, 22 + 2 * g) for g in range(4))
    assert r.finish_s[1] == pytest.approx(burst_end, rel=1e-9)
    assert r.first_token_s[2] == pytest.approx(burst_end + _toy_step(21, 15), rel=1e-9)
    # Single-step scheduling: the short request ends after two steps, the arrival is
    # admitted at the next step.
    one = simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=1000,
                   kv_capacity_tokens=10_000)
    assert one.finish_s[1] < r.finish_s[1] and one.first_token_s[2] < r.first_token_s[2]


def test_multi_step_bursts_are_one_gap_each_and_run_as_one_block():
    """Under ``--num-scheduler-steps 4`` a burst's tokens stream together: one client decoding
    12 tokens after its first sees three gaps of four steps each (the ITL the vLLM 0.6.0 rows
    measure as 10-token bursts); no arrival is pending, so the run is one vectorised block
    and ends at the same time as the single-step run."""
    req = fixed_requests(1, isl=100, osl=13)
    kw = dict(max_num_seqs=8, max_num_batched_tokens=1000, kv_capacity_tokens=10_000,
              concurrency=1)
    one, four = simulate(TOY, req, **kw), simulate(TOY, req, decode_steps_per_schedule=4, **kw)
    d = [_toy_step(1, 100 + g) for g in range(1, 13)]
    assert four.finish_s[0] == pytest.approx(one.finish_s[0], rel=1e-12)
    assert four.itl_weight.sum() == 3 and one.itl_weight.sum() == 12
    assert sorted(four.itl_s) == pytest.approx([sum(d[0:4]), sum(d[4:8]), sum(d[8:12])],
                                               rel=1e-6)
    with pytest.raises(ConfigError, match="integer"):
        simulate(TOY, req, decode_steps_per_schedule=2.5, **kw)    # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="decode_steps_per_schedule"):
        CostModelConfig(decode_steps_per_schedule=2.5)              # type: ignore[arg-type]


# ------------------------------------------------------------------ KV admission
def test_on_demand_pool_admits_by_the_prompt_and_preempts_the_newest():
    """A 300-token pool, two requests of 100 + 100 tokens arriving together. Reserving
    whole requests (TensorRT-LLM) admits one, and the second waits for its finish. A paged pool
    (vLLM) admits both (101 tokens each) and, when the decodes outgrow it, preempts the
    newest, which recomputes prompt and output so far when readmitted: its first token is
    unchanged, both finish with all their tokens, and it finishes after the other."""
    req = Requests(isl=np.array([100, 100]), osl=np.array([100, 100]),
                   arrival_s=np.array([0.0, 0.0]))
    kw = dict(max_num_seqs=8, max_num_batched_tokens=1000, kv_capacity_tokens=300)
    whole = simulate(TOY, req, **kw)
    paged = simulate(TOY, req, kv_admission="on_demand", **kw)
    assert whole.first_token_s[1] > whole.finish_s[0] and whole.preemptions == 0
    assert paged.first_token_s[1] == pytest.approx(paged.first_token_s[0])  # one step, both
    assert paged.preemptions >= 1
    assert np.isfinite(paged.finish_s).all() and paged.finish_s[1] > paged.finish_s[0]
    # The preempted request's gap (waiting, then recomputing 100 + g tokens) is one ITL.
    assert paged.itl_s.max() > 10 * _toy_step(2, 300)
    assert paged.finish_s.max() < whole.finish_s.max()        # it overlapped the first
    with pytest.raises(ConfigError, match="kv_admission"):
        simulate(TOY, req, kv_admission="lazy", **kw)


def test_no_future_oom_check_by_hand():
    """Two requests with 2 and 5 tokens to go, holding 3 and 4: when the first finishes the
    pool has free − 2·2 tokens, when the second does free + 3 − 5; each must exceed one per
    request still running (2, then 1)."""
    from learn_to_shard.serving.simulate import no_future_oom

    left, held = np.array([5, 2]), np.array([4, 3])
    assert no_future_oom(10, left, held)            # 10 − 4 = 6 > 2; 10 + 3 − 5 = 8 > 1
    assert not no_future_oom(6, left, held)         # 6 − 4 = 2, not > 2
    assert no_future_oom(7, left, held)             # 3 > 2; 5 > 1


def test_no_future_oom_admits_more_than_reserving_and_never_preempts():
    """Requests of mixed lengths arriving over time on a tight pool, prompts within the step
    budget: SGLang's check for fixed-length requests keeps more running than reserving whole
    requests and never runs out (no preemption), and every request completes."""
    rng = np.random.default_rng(0)
    n = 60
    req = Requests(isl=rng.integers(20, 200, n), osl=rng.integers(10, 300, n),
                   arrival_s=np.sort(rng.uniform(0.0, 2.0, n)))
    kw = dict(max_num_seqs=64, max_num_batched_tokens=512, kv_capacity_tokens=2000)
    whole = simulate(TOY, req, **kw)
    check = simulate(TOY, req, kv_admission="no_future_oom", **kw)
    assert check.preemptions == 0 and np.isfinite(check.finish_s).all()
    assert check.mean_running > whole.mean_running
    assert check.ttft_s.mean() < whole.ttft_s.mean()


def test_engines_kv_admission_defaults_and_row_overrides():
    """Every engine reserves whole requests by default (vLLM's paged pool, ``on_demand``, fits
    its calibration rows worse, so it is an override); SGLang with the radix cache off runs
    the no-future-OOM check of its benchmark's fixed-length requests; without an engine the
    cost model's ``kv_reserve_full_request`` decides. A bad value names the field."""
    from learn_to_shard.engines import KV_ADMISSION, KV_ADMISSION_SOURCES
    from learn_to_shard.fidelity.serving import row_scheduler
    from learn_to_shard.serving.load import kv_admission

    assert {e: kv_admission(CostModelConfig.for_engine(e)) for e in ("vllm", "sglang",
                                                                     "trtllm")} == \
        {"vllm": "reserve", "sglang": "reserve", "trtllm": "reserve"}
    assert set(KV_ADMISSION) == set(KV_ADMISSION_SOURCES)
    assert kv_admission(CostModelConfig()) == "reserve"
    assert kv_admission(CostModelConfig(kv_reserve_full_request=False)) == "on_demand"
    assert kv_admission(CostModelConfig.for_engine("vllm", kv_admission="on_demand")) == \
        "on_demand"
    row = {"engine": "sglang", "engine_version": "", "notes": "server: --tp-size 4 "
           "--disable-radix-cache --enable-torch-compile"}
    assert row_scheduler(row)["kv_admission"] == "no_future_oom"
    assert "kv_admission" not in row_scheduler(dict(row, notes="server: --tp-size 4"))
    with pytest.raises(ConfigError, match="kv_admission"):
        CostModelConfig(kv_admission="lazy")


def test_cli_kv_admission_flag():
    """``l2s plan --kv-admission``: the rule the simulation runs, recorded in the plan's
    simulation (with its preemptions); a bad value or no load is one line, exit 2."""
    runner = CliRunner()
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--phase", "serve",
            "--isl", "2000", "--osl", "2000"]
    load = ["--engine", "vllm", "--request-rate", "20", "--num-prompts", "200"]
    r = runner.invoke(app, [*base, *load, "--kv-admission", "on_demand", "--json"])
    assert r.exit_code == 0, r.output
    sched = json.loads(r.stdout)["simulation"][0]["scheduler"]
    assert sched["kv_admission"] == "on_demand" and sched["preemptions"] > 0
    r = runner.invoke(app, [*base, *load, "--json"])
    assert json.loads(r.stdout)["simulation"][0]["scheduler"] == {
        **sched, "kv_admission": "reserve", "preemptions": 0}
    r = runner.invoke(app, [*base, *load, "--kv-admission", "lazy"])
    assert r.exit_code == 2 and "--kv-admission" in r.output and "on_demand" in r.output
    r = runner.invoke(app, [*base, "--kv-admission", "on_demand"])
    assert r.exit_code == 2 and "--concurrency" in r.output


def test_no_future_oom_rechecks_after_every_decode_step():
    """A (1 + 10 tokens) and B (1 + 20) arrive together on a 24-token pool: the check refuses B
    beside A at first (20 − 10·2 = 0, not > 2) and passes after A's first decodes, so B is
    admitted while A still runs (a block of decode steps would have skipped past that), and
    the run equals one simulated a step at a time with every admission checked."""
    req = Requests(isl=np.array([1, 1]), osl=np.array([10, 20]), arrival_s=np.array([0.0, 0.0]))
    r = simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=100, kv_capacity_tokens=24,
                 kv_admission="no_future_oom")
    assert r.first_token_s[1] < r.finish_s[0] and r.preemptions == 0
    assert np.isfinite(r.finish_s).all()


def test_no_future_oom_refuses_a_request_its_check_can_never_pass():
    """Alone, SGLang's check needs 2 tokens beyond the request (its first token's and one per
    running request): a pool of isl + osl + 2 can never admit it and is refused up front,
    one more token runs."""
    req = fixed_requests(2, isl=10, osl=10)
    kw = dict(max_num_seqs=8, max_num_batched_tokens=100, concurrency=1,
              kv_admission="no_future_oom")
    with pytest.raises(ConfigError, match="could never be admitted"):
        simulate(TOY, req, kv_capacity_tokens=22, **kw)
    assert np.isfinite(simulate(TOY, req, kv_capacity_tokens=23, **kw).finish_s).all()
    simulate(TOY, req, max_num_seqs=8, max_num_batched_tokens=100, concurrency=1,
             kv_capacity_tokens=20)                      # reserving needs just isl + osl


def test_frontend_latency_by_hand():
    """The serving front-end's time per request (``frontend_latency_s``) is waited before the
    engine sees a request: one client's TTFT and end-to-end latency grow by it, its TPOT does
    not, and its next request reaches the engine that long after the previous one finished, so
    the run lasts one front-end time longer per request."""
    lat = 0.040
    req = fixed_requests(3, isl=100, osl=4)
    kw = dict(max_num_seqs=8, max_num_batched_tokens=1000, kv_capacity_tokens=10_000,
              concurrency=1)
    base = simulate(TOY, req, **kw)
    r = simulate(TOY, req, frontend_latency_s=lat, **kw)
    np.testing.assert_allclose(r.ttft_s, base.ttft_s + lat, rtol=1e-12)
    np.testing.assert_allclose(r.e2e_s, base.e2e_s + lat, rtol=1e-12)
    np.testing.assert_allclose(r.tpot_s, base.tpot_s, rtol=1e-12)
    assert r.arrival_s[0] == 0.0                         # measured from the client's send
    assert r.arrival_s[1] == pytest.approx(r.finish_s[0], rel=1e-12)
    assert r.busy_s == pytest.approx(base.busy_s + 3 * lat, rel=1e-12)
    # Open loop: the arrivals are the sends; the engine sees each one lat later.
    req_open = Requests(isl=np.array([100, 100]), osl=np.array([4, 4]),
                        arrival_s=np.array([0.0, 1.0]))
    kw.pop("concurrency")
    a = simulate(TOY, req_open, **kw)
    b = simulate(TOY, req_open, frontend_latency_s=lat, **kw)
    np.testing.assert_allclose(b.first_token_s, a.first_token_s + lat, rtol=1e-12)
    np.testing.assert_allclose(b.ttft_s, a.ttft_s + lat, rtol=1e-12)
    with pytest.raises(ConfigError, match="frontend_latency_s"):
        simulate(TOY, req_open, frontend_latency_s=-1e-3, **kw)


def test_frontend_intake_by_hand():
    """A front-end that takes in one request at a time (``frontend_serial_s``) finishes the
    i-th of requests sent together at (i + 1) · serial, one sent after it was idle at its send
    plus serial, and one sent while it works when the work before it is done."""
    from learn_to_shard.serving.simulate import frontend_intake

    np.testing.assert_allclose(frontend_intake(np.zeros(3), 0.01), [0.01, 0.02, 0.03])
    np.testing.assert_allclose(frontend_intake(np.array([0.0, 0.005, 1.0, 1.0]), 0.01),
                               [0.01, 0.02, 1.01, 1.02])
    np.testing.assert_allclose(frontend_intake(np.array([0.0]), 0.01, free_s=0.5), [0.51])
    np.testing.assert_allclose(frontend_intake(np.array([0.0, 2.0]), 0.0), [0.0, 2.0])


def test_frontend_serial_time_spreads_a_burst_and_caps_the_request_rate():
    """With a serial front-end time, a burst of N requests reaches the engine one per serial
    time: on an engine far faster than that, the k-th request's TTFT is about k · serial
    (on top of its prefill), the run lasts about N · serial, and a lone client's TTFT grows by
    exactly the serial time (no queue); a negative value is refused."""
    serial = 0.010
    n = 200
    req = fixed_requests(n, isl=10, osl=2)
    kw = dict(max_num_seqs=n, max_num_batched_tokens=100_000, kv_capacity_tokens=1_000_000)
    fast = simulate(TOY, req, concurrency=n, **kw)
    slow = simulate(TOY, req, concurrency=n, frontend_serial_s=serial, **kw)
    assert fast.busy_s < 0.1 < n * serial
    assert slow.busy_s == pytest.approx(n * serial, rel=0.1)
    # every request waits for the ones before it in the front-end
    assert np.all(slow.ttft_s >= (np.arange(n) + 1) * serial - 1e-9)
    assert np.median(slow.ttft_s) == pytest.approx(n * serial / 2, rel=0.15)
    assert slow.summary()["requests_per_s"] <= 1.0 / serial * (1 + 1e-9)
    one = fixed_requests(3, isl=100, osl=4)
    kw1 = dict(max_num_seqs=8, max_num_batched_tokens=1000, kv_capacity_tokens=10_000,
               concurrency=1)
    a = simulate(TOY, one, **kw1)
    b = simulate(TOY, one, frontend_serial_s=serial, frontend_latency_s=0.02, **kw1)
    np.testing.assert_allclose(b.ttft_s, a.ttft_s + serial + 0.02, rtol=1e-12)
    np.testing.assert_allclose(b.tpot_s, a.tpot_s, rtol=1e-12)
    # Open loop: sends 1 s apart never queue; sends together do.
    spaced = Requests(isl=np.array([10, 10]), osl=np.array([2, 2]),
                      arrival_s=np.array([1.0, 0.0]))
    together = Requests(isl=np.array([10, 10]), osl=np.array([2, 2]),
                        arrival_s=np.array([0.0, 0.0]))
    kw.pop("max_num_seqs")
    c = simulate(TOY, spaced, max_num_seqs=2, frontend_serial_s=serial, **kw)
    d = simulate(TOY, spaced, max_num_seqs=2, **kw)
    np.testing.assert_allclose(c.ttft_s, d.ttft_s + serial, rtol=1e-9)
    e = simulate(TOY, together, max_num_seqs=2, frontend_serial_s=serial, **kw)
    assert sorted(e.ttft_s)[1] >= 2 * serial
    with pytest.raises(ConfigError, match="frontend_serial_s"):
        simulate(TOY, spaced, max_num_seqs=2, frontend_serial_s=-1e-3, **kw)


def test_a_rate_above_the_frontends_intake_is_overloaded():
    """150 requests/s against a front-end that takes in one per 10 ms (100/s): the plan's
    throughput is capped at 100 requests' tokens per second, and the simulated load says it is
    overloaded at utilisation 1.5, however fast the engine."""
    import dataclasses

    from learn_to_shard.cost.model import CostModel
    from learn_to_shard.serving import simulate_estimate

    cm = make_cost_model("llama-3.1-8b", "h100-sxm:1",
                         make_workload("serve", isl=128, osl=16))
    cm = CostModel(cm.model, cm.cluster, cm.workload,
                   dataclasses.replace(cm.config, frontend_serial_s=0.01), cm.space)
    est = search_plan(cm, method="megatron").best
    assert est.output_tokens_per_s == pytest.approx(100 * 16, rel=1e-9)
    r = simulate_estimate(cm, est, ServingLoad(request_rate_per_s=150.0, num_prompts=1500))
    assert r["capacity_requests_per_s"] == pytest.approx(100.0)
    assert r["overloaded"] and r["utilization"] == pytest.approx(1.5)


def test_frontend_serial_time_lengthens_the_analytical_ttft_like_the_latency():
    """The cost model's serve-phase TTFT carries the serial front-end time as it carries the
    front-end latency (one request's time in the front-end, ``frontend_time_s``)."""
    import dataclasses

    wl = make_workload("serve", isl=1000, osl=200, ttft_slo_s=0.5)
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:1", wl)
    s = search_plan(cm, method="megatron").best.strategy
    cfg = dataclasses.replace(cm.config, frontend_serial_s=0.007, frontend_latency_s=0.01)
    assert cfg.frontend_time_s == pytest.approx(0.017)
    b = make_cost_model("llama-3.1-8b", "h100-sxm:1", wl, config=cfg).evaluate(s)
    a = cm.evaluate(s)
    assert b.ttft_s == pytest.approx(a.ttft_s + 0.017, rel=1e-9)
    assert b.tpot_s == a.tpot_s and b.output_tokens_per_s == a.output_tokens_per_s
    # ... and caps an instance at osl / serial tokens/s where that binds (one request per
    # 0.5 s of 200 tokens: 400 tokens/s), its TPOT and TTFT unchanged by the cap.
    capped = make_cost_model("llama-3.1-8b", "h100-sxm:1", wl, config=dataclasses.replace(
        cm.config, frontend_serial_s=0.5)).evaluate(s)
    assert a.output_tokens_per_s > 400.0
    assert capped.output_tokens_per_s == pytest.approx(400.0, rel=1e-9)
    assert capped.tokens_per_s_per_device == pytest.approx(400.0, rel=1e-9)
    assert capped.tpot_s == a.tpot_s


def test_frontend_latency_lengthens_the_analytical_ttft_only():
    """The cost model's serve-phase TTFT carries the front-end's time per request as the
    simulation does; its TPOT and throughput do not (the front-end takes no GPU time)."""
    import dataclasses

    cm = make_cost_model("llama-3.1-8b", "h100-sxm:1",
                         make_workload("serve", isl=1000, osl=200, ttft_slo_s=0.5))
    s = search_plan(cm, method="megatron").best.strategy
    late = dataclasses.replace(cm.config, frontend_latency_s=0.050)
    cm2 = make_cost_model("llama-3.1-8b", "h100-sxm:1",
                          make_workload("serve", isl=1000, osl=200, ttft_slo_s=0.5),
                          config=late)
    a, b = cm.evaluate(s), cm2.evaluate(s)
    assert b.ttft_s == pytest.approx(a.ttft_s + 0.050, rel=1e-9)
    assert b.tpot_s == a.tpot_s and b.output_tokens_per_s == a.output_tokens_per_s


def test_a_long_run_of_decode_steps_simulates_rather_than_hitting_the_step_bound():
    """A thousand requests of ~10,000 output tokens at batch 1 need ~1e7 engine steps; the
    decode runs between events are priced as vectorised blocks, so this simulates (it hit
    a 1e7-step bound and told the user to lower --num-prompts)."""
    n = 1000
    req = Requests(np.full(n, 100), np.full(n, 10_000))
    res = simulate(TOY, req, max_num_seqs=1, max_num_batched_tokens=8192,
                   kv_capacity_tokens=20_000, concurrency=1)
    assert res.steps == n * 10_000
    with pytest.raises(ConfigError, match="more than 1,000 engine steps"):
        simulate(TOY, req, max_num_seqs=1, max_num_batched_tokens=8192,
                 kv_capacity_tokens=20_000, concurrency=1, max_steps=1000)
    # Steps priced one by one (every one admits or finishes a request) have their own bound.
    short = Requests(np.full(5000, 8), np.full(5000, 2))
    with pytest.raises(ConfigError, match="more than 2,000 steps that admit"):
        simulate(TOY, short, max_num_seqs=1, max_num_batched_tokens=8192,
                 kv_capacity_tokens=20_000, concurrency=1, max_events=2000)


@pytest.mark.parametrize("tp,pp,batch,engine", [(2, 2, 122, None), (2, 4, 120, None),
                                                (4, 1, 104, None), (2, 2, 122, "vllm"),
                                                (2, 4, 120, "trtllm")])
def test_the_steady_state_agrees_with_the_simulation_at_full_occupancy(tp, pp, batch, engine):
    """A closed loop that keeps the plan's batch full, with lengths spread (no lock-step
    waves) over many requests (no start-up transient), is the steady state the analytical
    model prices: at the occupancy reached, mean TPOT and tokens/s agree within 5%. Pricing
    the mean step's content once (serve_step_mix off) put a TP2 PP2 plan's TPOT 1.29x and
    tokens/s 0.77x the simulation's, and plans and ``l2s size`` promised that capacity.
    Under PP a prompt chunk rides one micro-batch and holds the round for its pass through
    every stage (``prompt_step_mix``, ``StepTimeModel.pass_tokens``, ``heaviest_micro_batch``):
    spreading it over the micro-batches priced TP2 PP4 at 0.64x the TPOT both models now
    give, and the simulation of TP2 PP2 at 1.22x the analytical TPOT while only it held the
    round; TensorRT-LLM's launches of a prompt step ride that micro-batch's pass too (0.86x
    while the simulation spread them over the stages). SGLang's pipeline is not in this
    test: the simulation holds every micro-batch's decodes during a prefill-only step,
    where SGLang holds one micro-batch's (docs/design.md)."""
    from learn_to_shard.cost.model import CostModel
    from learn_to_shard.parallel.ops import MEGATRON_DIMS
    from learn_to_shard.parallel.strategy import Strategy
    from learn_to_shard.serving import simulate_estimate

    cm = make_cost_model("llama-3.1-70b", "h100-sxm:8",
                         make_workload("serve", isl=1024, osl=256),
                         config=CostModelConfig.for_engine(engine), engine=engine)
    cm = CostModel(cm.model, cm.cluster, cm.workload, config=cm.config,
                   space=cm.space.with_batches((batch,)))
    est = cm.evaluate(Strategy(tp=tp, ep=1, pp=pp, dp=1, batch=batch, dims=MEGATRON_DIMS))
    load = ServingLoad(concurrency=batch * est.instances, range_ratio=0.5, num_prompts=3000)
    sim = simulate_estimate(cm, est, load)
    ratio = sim["sim_over_analytic"]
    assert sim["analytic"]["at_running"] >= 0.95 * batch
    assert ratio["mean_tpot"] == pytest.approx(1.0, abs=0.05)
    assert ratio["output_tokens_per_s"] == pytest.approx(1.0, abs=0.05)
    import dataclasses
    unmixed = CostModel(cm.model, cm.cluster, cm.workload, space=cm.space,
                        config=dataclasses.replace(cm.config, serve_step_mix=False))
    if pp > 1 and engine is None:
        # The mean content priced once is the optimistic price the mix corrects.
        assert unmixed.evaluate(est.strategy).tpot_s < 0.85 * est.tpot_s


@pytest.mark.parametrize("model,cluster,tp,pp,isl", [
    ("llama-3.1-405b", "h100-sxm:16", 8, 2, 4096),
    ("llama-3.1-70b", "h100-sxm:8", 2, 4, 2048),
    ("llama-3.1-70b", "h100-sxm:8", 1, 8, 2048),
])
def test_a_lone_prompt_passes_through_every_pipeline_stage(model, cluster, tp, pp, isl):
    """One client: its prompt's chunk rides one micro-batch through every stage in turn, as
    the analytical TTFT prices it (one pass per chunk). The simulation priced the chunk as
    spread over ``pp`` micro-batches in flight: 0.51x (405B TP8 PP2), 0.28x (TP2 PP4) and
    0.15x (TP1 PP8) the analytical TTFT. The pass is priced from the step grid at balanced
    stages, so stages with the embedding or the LM head leave it up to ~11% above."""
    from learn_to_shard.cost.model import CostModel
    from learn_to_shard.parallel.ops import MEGATRON_DIMS
    from learn_to_shard.parallel.strategy import Strategy
    from learn_to_shard.serving import simulate_estimate

    cm = make_cost_model(model, cluster, make_workload("serve", isl=isl, osl=64))
    cm = CostModel(cm.model, cm.cluster, cm.workload, config=cm.config,
                   space=cm.space.with_batches((1,)))
    est = cm.evaluate(Strategy(tp=tp, ep=1, pp=pp, dp=1, batch=1, dims=MEGATRON_DIMS))
    sim = simulate_estimate(cm, est, ServingLoad(concurrency=est.instances, num_prompts=20))
    assert 0.95 <= sim["sim_over_analytic"]["mean_ttft"] <= 1.15


def test_a_pipeline_plan_whose_step_budget_binds_agrees_with_the_simulation():
    """The step budget applies per pipeline micro-batch in the analytical model (each
    micro-batch is scheduled within max_num_batched_tokens) and now in the simulation too
    (``step_token_budget``): a TP4 PP2 plan at 16000/300 with a 2048-token budget simulated
    at 0.54x the analytical TPOT when the simulated step shared one budget."""
    import dataclasses

    from learn_to_shard.cost.model import CostModel
    from learn_to_shard.parallel.ops import MEGATRON_DIMS
    from learn_to_shard.parallel.strategy import Strategy
    from learn_to_shard.serving import simulate_estimate
    from learn_to_shard.serving.steptime import step_token_budget

    cm = make_cost_model("llama-3.1-70b", "h100-sxm:8",
                         make_workload("serve", isl=16000, osl=300))
    cfg = dataclasses.replace(cm.config, max_num_batched_tokens=2048)
    cm = CostModel(cm.model, cm.cluster, cm.workload, config=cfg,
                   space=cm.space.with_batches((72,)))
    est = cm.evaluate(Strategy(tp=4, ep=1, pp=2, dp=1, batch=72, dims=MEGATRON_DIMS))
    assert step_token_budget(cm, est.strategy) == 2 * 2048
    sim = simulate_estimate(cm, est, ServingLoad(concurrency=72 * est.instances,
                                                 range_ratio=0.5, num_prompts=600))
    assert sim["sim_over_analytic"]["mean_tpot"] == pytest.approx(1.0, abs=0.06)
    assert sim["step_fit_rel_err"] < 0.05


@pytest.mark.parametrize("model,cluster,wl,deg", [
    ("llama-3.1-70b", "h100-sxm:8", dict(isl=1024, osl=256), (4, 1, 1, 1, 122)),
    ("llama-3.1-8b", "h100-sxm:2", dict(isl=2000, osl=200), (1, 1, 1, 2, 128)),
])
def test_sglang_plans_price_its_prefill_only_steps_as_the_simulation_runs_them(model, cluster,
                                                                             wl, deg):
    """SGLang runs a prefill-only step whenever prompts wait and holds the decodes meanwhile;
    the analytical serve step prices that (a prefill-only step per decode step that
    finishes a request, ``prompt_step_mix``), so the simulation of the plan at full
    occupancy agrees within 5%. Priced decodes first, as vLLM runs them, these plans
    simulated at 1.05-1.08x their TPOT (a dense model's DP ranks are each their own
    prefill-first server). Not within 5% yet: a TP2 PP2 plan of the same 70B model
    simulates at 1.04x the TPOT and 0.94x the tokens/s (1.12x and 0.87x decodes first). A
    MoE model stays priced decodes first at every dp, so that its dp = 1 and attention-DP
    plans compare alike (each SGLang attention-DP rank prefills first on its own, which is
    not priced); its dp = 1 plans simulate prefill first at 1.05-1.08x the TPOT."""
    import dataclasses

    from learn_to_shard.api import search_plan as plan_of
    from learn_to_shard.cost.config import CostModelConfig
    from learn_to_shard.cost.model import CostModel
    from learn_to_shard.parallel.ops import MEGATRON_DIMS
    from learn_to_shard.parallel.strategy import Strategy
    from learn_to_shard.serving import simulate_estimate

    tp, ep, pp, dp, batch = deg
    cm = make_cost_model(model, cluster, make_workload("serve", **wl),
                         config=CostModelConfig.for_engine("sglang"), engine="sglang")
    dims = plan_of(cm, method="auto").best.strategy.dims if cm.model.moe else MEGATRON_DIMS
    cm = CostModel(cm.model, cm.cluster, cm.workload, config=cm.config,
                   space=cm.space.with_batches((batch,)))
    s = Strategy(tp=tp, ep=ep, pp=pp, dp=dp, batch=batch, dims=dims)
    est = cm.evaluate(s)
    assert est.feasible
    clients = batch * est.instances
    sim = simulate_estimate(cm, est, ServingLoad(concurrency=clients, range_ratio=0.5,
                                                 num_prompts=max(1500, 6 * clients)))
    assert sim["scheduler"]["prefill_first"]
    assert sim["analytic"]["at_running"] >= 0.9 * batch / dp
    assert sim["sim_over_analytic"]["mean_tpot"] == pytest.approx(1.0, abs=0.05)
    assert sim["sim_over_analytic"]["output_tokens_per_s"] == pytest.approx(1.0, abs=0.05)
    decodes_first = CostModel(cm.model, cm.cluster, cm.workload, space=cm.space,
                              config=dataclasses.replace(cm.config, prefill_first=False))
    assert decodes_first.evaluate(s).tpot_s < 0.96 * est.tpot_s
    moe = make_cost_model("deepseek-v3", "h200:8",
                          make_workload("serve", isl=2000, osl=500, dtype="fp8"),
                          config=CostModelConfig.for_engine("sglang"), engine="sglang")
    assert moe.config.runs_prefill_first
    assert not moe.serve_prefill_first


def test_sglang_decodes_every_running_request_and_prefills_with_the_whole_budget():
    """SGLang's decode-only steps carry every running request (its chunked-prefill size
    bounds the prefill-only steps alone), so where prompts need more than one budget-sized
    step per decode step the steady state prices several (``q > 1``), as the simulation
    runs them: Llama-3.1-8B at 4000/200 with a 2048-token budget and 220 running simulated
    at 1.33x the TPOT while the decodes were capped at vLLM's budget share. The TTFT step
    is a prefill-only step with the whole budget, so TTFT does not depend on the batch
    (it jumped when the decodes left the prompt a second chunk). At ``osl = 1`` there is no
    decode step: the one token comes from the prefill."""
    import dataclasses

    from learn_to_shard.cost.config import CostModelConfig
    from learn_to_shard.cost.model import CostModel
    from learn_to_shard.parallel.ops import MEGATRON_DIMS
    from learn_to_shard.parallel.strategy import Strategy
    from learn_to_shard.serving import simulate_estimate

    cfg = CostModelConfig.for_engine("sglang", max_num_batched_tokens=2048)
    cm = make_cost_model("llama-3.1-8b", "h200:1", make_workload("serve", isl=4000, osl=200),
                         config=cfg, engine="sglang")
    cm = CostModel(cm.model, cm.cluster, cm.workload, config=cfg,
                   space=cm.space.with_batches((42, 43, 220)))
    s = Strategy(tp=1, ep=1, pp=1, dp=1, batch=220, dims=MEGATRON_DIMS)
    est = cm.evaluate(s)
    ph = cm.phase_rows(np.array([1]), np.array([1]), np.array([220]))
    assert ph["dec"][0] == 220 and ph["share"][0] == 1.0 and ph["dec2"][0] == 0.0
    mix = cm.prompt_step_mix(ph["dec"], ph["pf"], ph["pf_seqs"], np.array([1]))
    assert mix.q[0] == pytest.approx(220 * 4000 / 200 / 2048) and mix.pf_a[0] == 2048
    sim = simulate_estimate(cm, est, ServingLoad(concurrency=600, range_ratio=0.5,
                                                 num_prompts=3000))
    assert sim["sim_over_analytic"]["mean_tpot"] == pytest.approx(1.0, abs=0.05)
    assert sim["sim_over_analytic"]["output_tokens_per_s"] == pytest.approx(1.0, abs=0.05)
    ttft = [cm.evaluate(dataclasses.replace(s, batch=b)).ttft_s for b in (42, 43, 220)]
    assert ttft[0] == ttft[1] == ttft[2]
    one = make_cost_model("llama-3.1-8b", "h100-sxm:1", make_workload("serve", isl=1, osl=1),
                          config=CostModelConfig.for_engine("sglang"), engine="sglang")
    ph = one.phase_rows(np.array([1]), np.array([1]), np.array([64]))
    mix = one.prompt_step_mix(ph["dec"], ph["pf"], ph["pf_seqs"], np.array([1]))
    assert mix.mixed[0] and mix.w_b[0] == 0.0 and mix.q[0] == 1.0
    one = CostModel(one.model, one.cluster, one.workload, config=one.config,
                    space=one.space.with_batches((64,)))
    e1 = one.evaluate(Strategy(tp=1, ep=1, pp=1, dp=1, batch=64, dims=MEGATRON_DIMS))
    sim = simulate_estimate(one, e1, ServingLoad(concurrency=64, num_prompts=3000))
    assert sim["sim_over_analytic"]["output_tokens_per_s"] == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("ep", [8, 4])
def test_a_moe_plan_with_about_one_prompt_per_step_agrees_with_the_simulation(ep):
    """DeepSeek-V3 TP8 on 8 H200 at 2000/500 with ~496 requests running: about one prompt
    joins each step (λ ≈ 1), and real steps carry 0, 1, 2 or more. The mix matches the
    binomial mean and variance of that count (half the steps at λ + σ prompts, half at
    λ − σ); with a {0, 1}-prompt Bernoulli mix it priced every step at the mean and the
    simulation's TPOT was 1.21x the analytical."""
    from learn_to_shard.api import search_plan as plan_of
    from learn_to_shard.cost.model import CostModel
    from learn_to_shard.parallel.strategy import Strategy
    from learn_to_shard.serving import simulate_estimate

    cm = make_cost_model("deepseek-v3", "h200:8",
                         make_workload("serve", isl=2000, osl=500, dtype="fp8"))
    dims = plan_of(cm, method="auto").best.strategy.dims
    cm = CostModel(cm.model, cm.cluster, cm.workload, config=cm.config,
                   space=cm.space.with_batches((496,)))
    est = cm.evaluate(Strategy(tp=8, ep=ep, pp=1, dp=1, batch=496, dims=dims))
    assert est.feasible
    sim = simulate_estimate(cm, est, ServingLoad(concurrency=496, range_ratio=0.5,
                                                 num_prompts=1500))
    assert sim["sim_over_analytic"]["mean_tpot"] == pytest.approx(1.0, abs=0.05)


def test_trace_times_with_offsets_fractions_and_no_zone(tmp_path, monkeypatch):
    """ISO date-times with a fraction and an offset, 'Z', or none (read as UTC, as the Azure
    traces' timestamps are): the gaps do not depend on the machine's time zone; a file mixing
    seconds and date-times, or a length no model holds, is one error naming --trace."""
    import time

    f = tmp_path / "t.csv"
    f.write_text("arrival_s,isl,osl\n2023-11-16T18:15:46.5+02:00,10,2\n"
                 "2023-11-16T18:15:47.1234567Z,10,2\n2023-11-16 16:15:48,10,2\n"
                 "2023-11-16 16:15:49,5,2\n", encoding="utf-8")
    gaps = []
    for tz in ("UTC", "America/New_York", "Asia/Kolkata"):
        monkeypatch.setenv("TZ", tz)
        if hasattr(time, "tzset"):
            time.tzset()
        gaps.append(list(load_trace(f).arrival_s))
    monkeypatch.delenv("TZ")
    if hasattr(time, "tzset"):
        time.tzset()
    assert gaps[0] == gaps[1] == gaps[2]
    assert gaps[0] == pytest.approx([0.0, 1.5, 2.5, 7200.623456], abs=1e-6)
    forms = tmp_path / "f.csv"          # an hours-only offset, a lowercase t, basic format
    forms.write_text("arrival_s,isl,osl\n2023-11-16 18:15:46+05,10,2\n"
                     "2023-11-16t13:15:47,10,2\n20231116T131548Z,10,2\n", encoding="utf-8")
    assert list(load_trace(forms).arrival_s) == [0.0, 1.0, 2.0]
    mixed = tmp_path / "m.csv"
    mixed.write_text("arrival_s,isl,osl\n0,10,2\n2023-11-16 18:15:46,10,2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="--trace: .*row 3: arrival_s mixes seconds"):
        load_trace(mixed)
    junk = tmp_path / "j.csv"
    junk.write_text("arrival_s,isl,osl\nyesterday,10,2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="--trace: .*row 2: arrival time 'yesterday'"):
        load_trace(junk)
    big = tmp_path / "b.csv"
    big.write_text("arrival_s,isl,osl\n0,99999999999999999999,50\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="--trace: .*row 2: isl .* more tokens than any"):
        load_trace(big)


def test_load_flags_out_of_range_are_one_line_errors(tmp_path):
    """A client count, a rate or a trace request the tool cannot simulate is refused with the
    flag named (exit 2), never a traceback: a concurrency beyond a million, a rate so low its
    Poisson arrivals outrun float seconds or so high no replica count prints, and a trace
    request longer than the model's context names --trace, not --isl/--osl never given."""
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--phase", "serve",
            "-q"]
    huge = tmp_path / "huge.csv"
    huge.write_text("arrival_s,isl,osl\n0,500000,50\n1,100,10\n", encoding="utf-8")
    for extra, needle in (
            (["--isl", "100", "--osl", "10", "--concurrency", "99999999999999999999"],
             "--concurrency: must be a whole number of clients in 1..1,000,000"),
            (["--isl", "100", "--osl", "10", "--request-rate", "1e-15"],
             "--request-rate: 1e-15 requests/s spreads 1000 requests"),
            (["--isl", "100", "--osl", "10", "--request-rate", "1e300"],
             "--request-rate: must be a positive rate of at most"),
            (["--trace", str(huge)], "--trace: ")):
        r = CliRunner().invoke(app, [*base, *extra])
        assert r.exit_code == 2, (extra, r.output)
        err = r.stderr.strip()
        assert err.startswith("error: ") and "\n" not in err and needle in err, err
        assert "Traceback" not in r.output
    assert "--isl + --osl" not in r.stderr and "500050 tokens" in r.stderr


def test_default_prompts_keep_every_client_busy():
    """With more clients than a quarter of the default 1,000 prompts, each client sends four:
    2,000 clients on one replica simulate 8,000 requests, and the TTFT grows with the clients
    (it was the same for 2,000 and 20,000, only 1,000 of them ever sending)."""
    from learn_to_shard.serving.load import default_num_prompts

    assert default_num_prompts(None) == 1000 and default_num_prompts(64) == 1000
    assert default_num_prompts(250) == 1000 and default_num_prompts(300) == 1200
    assert default_num_prompts(2000) == 8000 and default_num_prompts(10**6) == 10**6
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:1",
                         make_workload("serve", isl=200, osl=20, concurrency=2000))
    plan = search_plan(cm, method="exact")
    sim = simulate_plan(cm, plan, ServingLoad(concurrency=2000), top=1)[0]
    assert sim["requests_simulated"] == 8000


def test_one_token_outputs_have_no_simulated_tpot_in_the_json():
    doc = json.loads(CliRunner().invoke(app, [
        "plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--phase", "serve",
        "--isl", "1000", "--osl", "1", "--concurrency", "8", "--json", "-q",
        "--no-timing"]).stdout)
    s = doc["simulation"][0]["simulated"]
    assert doc["best"]["tpot_s"] is None
    assert all(v is None for k, v in s.items() if "_tpot_" in k or "_itl_" in k)
    assert s["mean_ttft_s"] > 0


def test_a_replicas_share_of_a_trace_is_judged_at_its_own_lengths(tmp_path):
    """Round-robin over two replicas deals every 16,000-token prompt to one and every
    1,000-token output to the other, though the trace's means are the planned 8,050 / 505.
    The replica simulated (the busiest) is priced at its share's lengths: 10 requests/s of
    16,000-token prompts overload one H100, as replaying that share alone as a trace says
    (it was judged at the planned lengths' capacity over its 10-token outputs, 57 requests/s:
    utilization 0.18, "not overloaded")."""
    f = tmp_path / "alt.csv"
    f.write_text("arrival_s,isl,osl\n" + "".join(
        f"{i * 0.05:.2f},{'16000,10' if i % 2 == 0 else '100,1000'}\n" for i in range(400)),
        encoding="utf-8")
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:2", make_workload("serve", isl=8050,
                                                                       osl=505))
    est = cm.evaluate(Strategy(tp=1, ep=1, pp=1, dp=1, batch=48, dims=(0,) * 12))
    assert est.feasible and est.instances == 2
    sim = simulate_estimate(cm, est, ServingLoad(trace=load_trace(f)))
    assert sim["lengths"]["apart_from_planned"] is False     # the whole trace's means
    assert sim["lengths"]["replica_apart_from_planned"] is True
    assert (sim["lengths"]["replica_mean_isl"], sim["lengths"]["replica_mean_osl"]) == \
        (16000, 10)
    share = f.with_name("share.csv")
    share.write_text("arrival_s,isl,osl\n" + "".join(
        f"{i * 0.1:.2f},16000,10\n" for i in range(200)), encoding="utf-8")
    alone = simulate_estimate(cm, dataclasses.replace(est, instances=1),
                              ServingLoad(trace=load_trace(share)))
    assert sim["overloaded"] and alone["overloaded"]
    assert sim["utilization"] == pytest.approx(alone["utilization"], rel=0.05)
    assert sim["utilization"] > 2.0


def test_a_trace_arriving_at_once_is_flagged(tmp_path):
    """3,000 requests at one instant: no mean rate, so no overload, but they queue behind each
    other for minutes; the plan warns."""
    f = tmp_path / "burst.csv"
    f.write_text("arrival_s,isl,osl\n" + "0,1000,200\n" * 3000, encoding="utf-8")
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                                 "--phase", "serve", "-q", "--trace", str(f)])
    assert r.exit_code == 0, r.output
    assert "the trace's bursts queue" in r.stdout and "arrive at one instant" in r.stdout


def test_a_trace_is_judged_against_its_slos_on_its_own_replay(tmp_path):
    """Two requests 1 ms apart are, over their span, 1,000 requests/s: above a replica's
    capacity. But the replica takes both in at once, so no queue can grow (not overloaded,
    no replicas asked for), and the trace is the whole load, its replay serving them in
    milliseconds: the TTFT SLO is met on what it measured (exit 0), where an open loop at a
    rate above capacity misses it whatever its run's mean (a longer run grows it)."""
    f = tmp_path / "two.csv"
    f.write_text("arrival_s,isl,osl\n0,100,10\n0.001,100,10\n", encoding="utf-8")
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                                 "--phase", "serve", "--tpot-slo", "30ms", "--ttft-slo", "1s",
                                 "--trace", str(f), "--json"])
    assert r.exit_code == 0, r.output
    sim = json.loads(r.stdout)["simulation"][0]
    assert sim["offered_requests_per_s"] > sim["capacity_requests_per_s"]
    assert sim["overloaded"] is False and sim["slo"]["met"] is True, sim["slo"]
    assert sim["simulated"]["mean_ttft_s"] < 1.0
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                                 "--phase", "serve", "--trace", str(f)])
    assert "overloaded" not in r.stdout and "replicas of it" not in r.stdout


def test_a_trace_arrival_time_that_is_not_finite_names_its_row(tmp_path):
    """``nan`` or ``inf`` as an arrival time is one error naming the row and the value, as a
    prompt length that is not a whole number is."""
    for bad in ("nan", "inf", "-Infinity"):
        f = tmp_path / "t.csv"
        f.write_text(f"arrival_s,isl,osl\n0,10,2\n{bad},10,2\n", encoding="utf-8")
        with pytest.raises(ConfigError, match=f"row 3: arrival_s '{bad}' is not a finite "
                                              f"number of seconds"):
            load_trace(f)


def test_trace_arrival_times_take_no_digit_separators(tmp_path):
    """``1_0`` is not an arrival time (Python's float() reads it as 10), as ``1_000`` is not a
    prompt length: one error line naming the row."""
    f = tmp_path / "us.csv"
    f.write_text("arrival_s,isl,osl\n1_0,10,10\n0,10,10\n", encoding="utf-8")
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                                 "--phase", "serve", "--trace", str(f)])
    assert r.exit_code == 2, r.output
    assert "row 2: arrival time '1_0' is neither seconds nor an ISO date-time" in r.output


def test_a_trace_apart_from_the_planned_lengths_is_priced_at_its_own(tmp_path):
    """A trace replayed beside --isl/--osl far from its own lengths (120k-token prompts
    against --isl 1024) is judged at the trace's lengths: a replica that completes ~0.1
    requests/s of them is overloaded at 0.5 requests/s, not "within capacity" at the
    planned lengths' 11 requests/s with its queue blamed on bursts, and the plan says its
    ranking was at other lengths. The same trace alone ranks at its means: no such warning."""
    f = tmp_path / "even.csv"
    f.write_text("arrival_s,isl,osl\n" + "".join(f"{2 * i},{120000 + 100 * i},600\n"
                                                   for i in range(20)), encoding="utf-8")
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:2", "--phase", "serve",
            "--tpot-slo", "50ms", "--trace", str(f)]
    r = CliRunner().invoke(app, [*base, "--isl", "1024", "--osl", "256", "--json"])
    assert r.exit_code == 4, r.output           # the TPOT SLO missed under the trace's load
    sim = json.loads(r.stdout)["simulation"][0]
    assert sim["lengths"]["apart_from_planned"] and sim["overloaded"]
    assert sim["capacity_requests_per_s"] < sim["offered_requests_per_s"]
    # A trace has no queue-growth test of its own (its bursts queue without overloading it).
    assert sim["queue_grows"] is None
    # The ratios beside the steady state take it at the lengths the simulation ran, not at
    # the planned 1024 / 256 (whose TPOT is a fraction of a 120k-token context's).
    a = sim["analytic"]
    best = json.loads(r.stdout)["best"]["strategy"]
    code = {"Shard(0)": 0, "Shard(1)": 1, "Replicate()": 2}
    st = Strategy(tp=best["tp"], ep=best["ep"], pp=best["pp"], dp=best["dp"],
                  batch=best["batch"], cp=best["cp"],
                  dims=tuple(code[v] for v in best["placements"].values()))
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:2", make_workload("serve", isl=1024,
                                                                      osl=256))
    args = (cm, st, Phase.SERVE)
    at_trace = priced(*args, round(sim["lengths"]["mean_isl"]), (a["at_running"],), osl=600)
    at_plan = priced(*args, 1024, (a["at_running"],), osl=256)
    assert a["tpot_s"] == pytest.approx(float(at_trace[0][0]), rel=1e-9)
    assert float(at_plan[0][0]) < 0.8 * a["tpot_s"]
    r = CliRunner().invoke(app, [*base, "--isl", "1024", "--osl", "256"])
    text = " ".join(r.output.split())
    assert "are not the --isl 1024 / --osl 256 the search ranked strategies at" in text
    assert "bursts queue" not in text
    r = CliRunner().invoke(app, [*base, "--json"])
    assert r.exit_code == 0, r.output
    assert not json.loads(r.stdout)["simulation"][0]["lengths"]["apart_from_planned"]
    # A trace alone over several replicas: each gets a round-robin share whose means differ
    # from the whole trace's (alternating short and long rows); it ranked at the trace's
    # means, so nothing is apart.
    alt = tmp_path / "alt.csv"
    alt.write_text("arrival_s,isl,osl\n" + "".join(
        f"{0.05 * i},{200 if i % 2 == 0 else 4000},{50 if i % 2 == 0 else 400}\n"
        for i in range(40)), encoding="utf-8")
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:4",
                                 "--phase", "serve", "--trace", str(alt), "--json"])
    assert r.exit_code == 0, r.output
    sim = json.loads(r.stdout)["simulation"][0]
    assert sim["replicas"] > 1 and not sim["lengths"]["apart_from_planned"]


def test_prompts_that_need_more_steps_than_a_simulation_runs_are_refused_at_once():
    """A token budget so small that the prompts alone take more steps than the simulation's
    bound is refused before any step runs, naming --max-num-batched-tokens (it ran a minute
    and then blamed --num-prompts only)."""
    req = Requests(isl=np.full(10, 1000), osl=np.full(10, 4), arrival_s=None)
    with pytest.raises(ConfigError, match=r"take at least 10,000 prefill steps of at most 1 "
                                          r"tokens \(--max-num-batched-tokens\)"):
        simulate(TOY, req, max_num_seqs=4, max_num_batched_tokens=1,
                 kv_capacity_tokens=100_000, concurrency=2, max_events=5_000)


def test_a_lone_requests_ttft_is_its_own_prompt_whatever_its_output_length():
    """Decodes first, the TTFT steps carry the other running requests' prompts beside the
    prompt's own: at batch 1 there are none, so a 9,000-token prompt (two chunks of the
    8,192-token budget) prices its own 9,000 tokens at osl 1 as at osl 2 (osl 1 had priced
    two full steps, 470 ms against the simulation's 278 ms)."""
    import dataclasses

    from learn_to_shard.api import cost_config
    from learn_to_shard.parallel.ops import MEGATRON_DIMS
    from learn_to_shard.parallel.strategy import Strategy

    ttft = {}
    for osl in (1, 2):
        cm = make_cost_model("llama-3.1-8b", "h100-sxm:1", make_workload("serve", isl=9000,
                             osl=osl), cost_config("vllm"), engine="vllm")
        s = Strategy(tp=1, ep=1, pp=1, dp=1, batch=1, dims=MEGATRON_DIMS)
        ttft[osl] = cm.evaluate(dataclasses.replace(s)).ttft_s
        ph = cm.phase_rows(np.array([1]), np.array([1]), np.array([1]))
        assert ph["pf2"][0] == pytest.approx(4500.0)
    assert ttft[1] == pytest.approx(ttft[2], rel=0.01)


def test_priced_instance_throughput_leaves_idle_devices_out():
    """The steady state the simulation compares with is one instance's: the same TP4 plan on
    7 devices (one instance, 3 idle) and on 8 (two instances) prices the same instance
    tokens/s (the cluster's tokens/s per device counts idle devices; an instance's does not)."""
    from learn_to_shard.parallel import MEGATRON_DIMS, Strategy

    s = Strategy(tp=4, ep=1, pp=1, dp=1, batch=64, dims=MEGATRON_DIMS)
    out = []
    for cluster in ("h100-sxm:7", "h100-sxm:8"):
        cm = make_cost_model("llama-3.1-70b", cluster, make_workload("serve", isl=1024,
                                                                     osl=256))
        out.append(float(priced(cm, s, Phase.SERVE, 1024, (64,), osl=256)[2][0]))
    assert out[0] == pytest.approx(out[1], rel=1e-9)


def test_num_prompts_is_the_fleets_and_the_default_each_replicas():
    """--num-prompts is a benchmark's total over the fleet, shared over the replicas, and
    said when a replica's share is short of the default run; without it every simulated
    replica runs the default 1,000 (a fleet's share of 1,000 is too short a run for a queue
    near saturation to show)."""
    from learn_to_shard.report.render import simulation_notes
    from learn_to_shard.serving.load import DEFAULT_NUM_PROMPTS

    cm = make_cost_model("llama-3.1-8b", "h100-sxm:8", make_workload("serve", isl=1024,
                                                                     osl=128))
    plan = search_plan(cm)
    assert plan.best is not None and plan.best.instances > 1
    rate = 2.0 * plan.best.instances
    fleet = simulate_plan(cm, plan, ServingLoad(request_rate_per_s=rate, num_prompts=400),
                          top=1)[0]
    own = simulate_plan(cm, plan, ServingLoad(request_rate_per_s=rate), top=1)[0]
    assert fleet["requests_simulated"] == -(-400 // fleet["replicas"])
    assert fleet["fleet_num_prompts"] == 400
    assert own["requests_simulated"] == DEFAULT_NUM_PROMPTS and own["fleet_num_prompts"] is None
    said = [t for _, t in simulation_notes([fleet])]
    assert any(f"the fleet's --num-prompts 400 over its {fleet['replicas']} replicas gives the "
               f"busiest {fleet['requests_simulated']}:" in t
               and f"each replica runs {DEFAULT_NUM_PROMPTS})" in t for t in said), said
    assert not any("the fleet's --num-prompts" in t for _, t in simulation_notes([own]))
    # Fewer prompts than replicas: some replicas get none, and the note says how many.
    few = simulate_plan(cm, plan, ServingLoad(request_rate_per_s=rate, num_prompts=3),
                        top=1)[0]
    idle = few["replicas"] - 3
    assert any(f"gives the busiest 1 and {idle} none" in t for _, t in simulation_notes([few]))
    # A closed loop's default per replica is 4 per client of its share when that is more.
    conc = 8000
    big = simulate_plan(cm, plan, ServingLoad(concurrency=conc, num_prompts=10_000), top=1)[0]
    per_client = -(-conc // big["replicas"])
    assert big["default_requests_per_replica"] == max(DEFAULT_NUM_PROMPTS, 4 * per_client)
    assert any("the fleet's --num-prompts 10000" in t for _, t in simulation_notes([big]))


def test_a_closed_loop_of_few_clients_is_bounded_by_their_front_end_time():
    """One client sending 1,024-token prompts for one output token to vLLM on one H100: each
    request spends the profile's front-end time (60 ms) outside the engine and ~27 ms in it,
    so one client completes a request per ~87 ms, whatever the batch slots could take. The
    plan's tokens/s per device was the slot's rate (37.6, 3.3x the simulated 11.4) and the
    simulation's ratio to it read 0.30x with both models agreeing; now the plan prices the
    client's cycle (``aggregate.latency``: at most ``C · osl / (f + L)``) and the ratio is
    taken at the occupancy the simulation reached (0.3 running)."""
    from learn_to_shard.api import cost_config
    from learn_to_shard.cost.model import CostModel
    from learn_to_shard.parallel.ops import MEGATRON_DIMS
    from learn_to_shard.parallel.strategy import Strategy
    from learn_to_shard.serving import simulate_estimate

    wl = make_workload("serve", isl=1024, osl=1, concurrency=1)
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:1", wl, config=cost_config("vllm"))
    f = cm.config.frontend_latency_s
    assert f >= 0.05
    s = Strategy(tp=1, ep=1, pp=1, dp=1, batch=1, dims=MEGATRON_DIMS)
    est = cm.evaluate(s)
    free = CostModel(cm.model, cm.cluster, make_workload("serve", isl=1024, osl=1),
                     config=cm.config).evaluate(s)
    # The slots alone would run a request per engine pass; the client's cycle adds f.
    assert est.tokens_per_s_per_device == pytest.approx(1.0 / est.ttft_s, rel=0.02)
    assert est.tokens_per_s_per_device < 0.5 * free.tokens_per_s_per_device
    sim = simulate_estimate(cm, est, ServingLoad(concurrency=1, num_prompts=200))
    assert sim["simulated"]["mean_running"] < 0.5
    assert sim["tokens_per_s_per_device"] == pytest.approx(est.tokens_per_s_per_device,
                                                           rel=0.05)
    assert sim["sim_over_analytic"]["output_tokens_per_s"] == pytest.approx(1.0, abs=0.05)
    # Long outputs: the front-end is a small part of a client's cycle, and the bound is
    # within 1% of the slots' rate.
    long_wl = make_workload("serve", isl=1024, osl=1024, concurrency=1)
    a = make_cost_model("llama-3.1-8b", "h100-sxm:1", long_wl, config=cost_config("vllm"))
    b = CostModel(a.model, a.cluster, make_workload("serve", isl=1024, osl=1024),
                  config=a.config)
    ratio = a.evaluate(s).tokens_per_s_per_device / b.evaluate(s).tokens_per_s_per_device
    assert 0.99 < ratio < 1.0


def test_the_simulations_steady_state_ttft_counts_the_front_end_as_the_plan_does():
    """Eight clients, 2,048-token prompts for 8 tokens on one H100 (vLLM, 60 ms front-end):
    a client's wait for a slot is what its cycle leaves beyond the front-end time
    (``max(0, q·L − f)``, 0 here), in the plan and in the steady state the simulation is
    compared with (which added the whole q·L: 189 ms against the plan's 146, so ÷ steady
    read 0.99 where the simulation is 1.3x the plan)."""
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                                 "--phase", "serve", "--isl", "2048", "--osl", "8",
                                 "--engine", "vllm", "--concurrency", "8", "--json",
                                 "--no-timing"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    sim = data["simulation"][0]
    assert data["best"]["ttft_queue_s"] == 0.0
    assert sim["analytic"]["ttft_s"] == pytest.approx(data["best"]["ttft_s"], rel=0.1)
    assert sim["sim_over_analytic"]["mean_ttft"] > 1.15


def test_the_heaviest_micro_batch_takes_prompts_as_independent_draws():
    """A round's prompts, mostly consecutive requests, fall on the pipeline micro-batches as
    independent uniform draws (the binomial counts the analytical round prices the heaviest
    of): 8 consecutive requests on 8 micro-batches put 2.60 on the heaviest on average, as
    the multinomial does (a multiplicative hash spread them evenly: 1.39). A micro-batch
    holds at most its room and at least the largest chunk; one micro-batch holds them all."""
    from learn_to_shard.serving.simulate import heaviest_micro_batch

    ones = np.ones(8)
    mean = np.mean([heaviest_micro_batch(ones, np.arange(k, k + 8), 8, 1e9)
                    for k in range(0, 20_000, 10)])
    assert mean == pytest.approx(2.60, abs=0.1)
    chunks = np.array([300.0, 500.0, 200.0])
    req = np.arange(3)
    assert heaviest_micro_batch(chunks, req, 1, 1e9) == 1000.0
    assert heaviest_micro_batch(chunks, req, 4, 10.0) == 500.0       # at least the largest
    assert heaviest_micro_batch(chunks, req, 4, 1e9) <= 1000.0


def test_a_trace_in_epoch_milliseconds_is_refused_with_the_likely_cause(tmp_path):
    """Unix times in milliseconds lie beyond the arrival-time range: one error line that
    says so and names the likely cause."""
    f = tmp_path / "ms.csv"
    f.write_text("arrival_s,isl,osl\n1733600000000,100,10\n1733600000500,100,10\n",
                 encoding="utf-8")
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                                 "--phase", "serve", "--trace", str(f)])
    assert r.exit_code == 2, r.output
    assert "(milliseconds since the epoch? give seconds)" in r.output
