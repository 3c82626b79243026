"""What a plan prints and records besides the headline: KV capacity, longest context, stages,
headroom (and the "marginal" flag), tokens/s per user."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from learn_to_shard.api import make_cost_model, make_workload, search_plan
from learn_to_shard.cli import app
from learn_to_shard.parallel.strategy import Strategy
from learn_to_shard.report.plan import MARGINAL_HEADROOM_FRACTION, memory_headroom, stage_rows


def test_stage_rows_cover_every_layer_once():
    cm = make_cost_model("llama-3.1-405b", "h100-sxm:16", make_workload("decode", context=4096))
    e = cm.evaluate(Strategy(tp=4, ep=1, pp=4, dp=1, batch=64, dims=(0, 1, 1, 0, 1, 0, 2, 1,
                                                                       0, 1, 0, 1)))
    rows = stage_rows(e, cm.model.num_layers)
    assert [r["layers"] for r in rows] == [[0, 31], [32, 63], [64, 94], [95, 125]]
    assert [r["memory_bytes"] for r in rows] == list(e.stage_memory_bytes)


def _one(cm, batch: int):
    """``cm`` restricted to TP1, batch ``batch``, every operator replicated: its estimate."""
    import dataclasses

    from learn_to_shard.cost.model import CostModel

    sp = dataclasses.replace(cm.space, tp_values=(1,), ep_values=(1,), pp_values=(1,),
                             dp_values=(1,), batch_values=(batch,))
    sub = CostModel(cm.model, cm.cluster, cm.workload, config=cm.config, space=sp)
    return sub.evaluate(Strategy(1, 1, 1, 1, batch, (2,) * 12))


def test_a_layout_at_the_memory_limit_is_flagged_marginal():
    """Llama-3.1-8B decoding 13 sequences at 32k on one H100 needs 67.8 GiB (its 8,192-token
    step budget's workspace included); with ``--gpu-memory-utilization 0.87`` 68.6 GiB are
    usable, so it fits with 0.7 GiB (1.1%) to spare — the engine's CUDA graphs and
    communication buffers come out of its KV pool, so it may hold fewer than 13 at once: it
    is flagged, as a pool the batch fills (it starts either way); at 0.9 the same layout has
    3.1 GiB (4.4%) and is not. Llama-3.1-70B FP8 on one H100 at 0.9: weights and workspace
    leave 1.5 GiB, flagged as a server that may not start."""
    from learn_to_shard.api import cost_config

    wl = make_workload("decode", context=32768)
    tight = _one(make_cost_model("llama-3.1-8b", "h100-sxm:1", wl, cost_config(
        gpu_memory_utilization=0.87)), 13)
    free, marginal = memory_headroom(tight)
    assert tight.feasible and marginal
    assert 0 < free < MARGINAL_HEADROOM_FRACTION * tight.memory.usable_bytes
    roomy = _one(make_cost_model("llama-3.1-8b", "h100-sxm:1", wl), 13)
    assert roomy.feasible and not memory_headroom(roomy)[1]
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                                 "--context", "32768", "--gpu-memory-utilization", "0.87",
                                 "--method", "megatron"])
    assert r.exit_code == 0
    text = " ".join(r.output.replace("│", " ").split())
    assert "marginal: under 3% of usable; the batch fills the KV pool" in text
    assert "fewer than the 13 sequences planned at once" in text and "may not start" not in text
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-70b-instruct-fp8", "--cluster",
                                 "h100-sxm:1", "--context", "2048", "--method", "megatron"])
    assert r.exit_code == 0
    text = " ".join(r.output.replace("│", " ").split())
    assert "marginal: under 3% of usable; weights and workspace leave 1.5 GiB for the KV " \
        "pool" in text and "the server may not start" in text


@pytest.mark.parametrize("phase,kw", [("serve", {"isl": 1024, "osl": 256}),
                                      ("decode", {"context": 4096})])
def test_json_and_table_carry_capacity_and_per_user(phase, kw):
    cm = make_cost_model("llama-3.1-70b", "h100-sxm:8", make_workload(phase, **kw))
    best = search_plan(cm, method="exact").to_dict()["best"]
    assert best["kv_capacity_tokens"] > 0 and best["max_context_tokens"] > 0
    assert best["kv_capacity_unbounded"] is False
    assert best["tokens_per_s_per_user"] == pytest.approx(1 / best["tpot_s"])
    assert isinstance(best["memory_marginal"], bool) and best["memory_headroom_bytes"] >= 0
    assert sum(r["layers"][1] - r["layers"][0] + 1 for r in best["stages"]) == 80
    args = ["plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8", "--phase", phase,
            *[x for k, v in kw.items() for x in (f"--{k}", str(v))], "-q"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0
    for row in ("headroom", "KV capacity", "KV of this batch", "per user"):
        assert row in r.stdout
    r = CliRunner().invoke(app, [*args, "--json"])
    assert json.loads(r.stdout)["best"]["stages"]


def test_trtllm_plan_says_what_its_kv_pool_fraction_holds_back():
    """Under TensorRT-LLM's profile the KV pool is 0.9 of the free memory, so a batch's KV needs
    KV / 0.9 of it: the memory line says how much more must be free beside the batch's KV,
    the headroom line how much of the free memory lies outside the pool (0.1 of what weights
    and workspace leave), and the stage line
    that it counts KV as the memory limit does. The numbers agree: stage 0's total is the
    memory line's plus the held-back share."""
    args = ["plan", "--model", "deepseek-v3", "--cluster", "h100-sxm:32", "--phase", "decode",
            "--context", "4096", "--dtype", "fp8", "--engine", "trtllm", "-q"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.replace("│", " ").split())
    assert "the engine's KV pool is 0.9 of the free memory, so this batch's KV also needs" \
        in text and "GiB free outside the pool (not in the" in text
    mem0 = json.loads(CliRunner().invoke(app, [*args, "--json", "--no-timing"]).stdout)[
        "best"]["memory_per_device"]
    kept = 0.1 * (mem0["usable_bytes"] - mem0["weight_bytes"] - mem0["workspace_bytes"])
    free = mem0["usable_bytes"] - mem0["weight_bytes"] - mem0["kv_cache_bytes"] \
        - mem0["workspace_bytes"]
    assert f"{min(kept, free) / 2**30:.1f} of it outside the KV pool, which takes 0.9" in text
    doc = json.loads(CliRunner().invoke(app, [*args, "--json", "--no-timing"]).stdout)
    best = doc["best"]
    mem = best["memory_per_device"]
    if best["strategy"]["pp"] > 1:
        assert "counted as the limit counts them: weights, workspace and KV ÷ 0.9" in text
    held = mem["kv_cache_bytes"] * (1 / 0.9 - 1)
    worst = max(best["stage_memory_bytes"])
    total = mem["weight_bytes"] + mem["kv_cache_bytes"] + mem["workspace_bytes"]
    assert worst == pytest.approx(total + held, rel=1e-9)
    # vLLM's accounting (fraction 1) says none of it.
    plain = CliRunner().invoke(app, [a if a != "trtllm" else "vllm" for a in args])
    assert "the engine's KV pool is" not in plain.stdout \
        and "keeps out of its KV pool" not in plain.stdout


def test_a_dense_models_dp_ranks_are_shown_as_replicas():
    """A dense model's DP ranks share nothing, so the plan shows them as replicas (as the
    export launches them), not as attention-DP with an expert-TP degree."""
    import dataclasses
    import io

    from rich.console import Console

    from learn_to_shard.cost.model import CostModel
    from learn_to_shard.parallel.strategy import Strategy
    from learn_to_shard.report.render import render_plan

    cm = make_cost_model("llama-3.1-70b", "h100-sxm:12",
                         make_workload("serve", isl=1024, osl=256))
    plan = search_plan(cm, method="megatron")
    assert plan.best is not None and plan.moe_routing == ""
    cm = CostModel(cm.model, cm.cluster, cm.workload, config=cm.config,
                   space=cm.space.with_batches((96,)))
    est = cm.evaluate(Strategy(tp=4, ep=1, pp=1, dp=3, batch=96, dims=plan.best.strategy.dims))
    buf = io.StringIO()
    render_plan(dataclasses.replace(plan, best=est, alternatives=[]),
                Console(file=buf, width=200))
    text = " ".join(buf.getvalue().replace("│", " ").split())
    assert "TP=4 PP=1 DP=3 batch=96 (3 replicas of 32: a dense model has no attention-DP)" \
        in text
    assert "12 per instance, 3 replicas of 4 × 1 instance" in text
    assert "attention-DP=3" not in text and "ETP" not in text


def test_a_pool_of_windowed_layers_only_is_unbounded_in_tokens_not_a_huge_number():
    """Phi-3-mini slides a 2,047-token window on every layer: each sequence keeps a fixed
    KV, so the pool bounds the sequences, not the tokens. The plan says so (the terminal
    line, JSON ``kv_capacity_tokens`` null and ``kv_capacity_unbounded`` true) instead of
    printing the internal cap 2**62 as a capacity; the longest context is the model's
    maximum positions and ``max_batch`` the sequences that fit."""
    args = ["plan", "--model", "phi-3-mini-4k-instruct", "--cluster", "h100-sxm:1",
            "--phase", "serve", "--isl", "2048", "--osl", "512", "--tpot-slo", "40ms"]
    r = CliRunner().invoke(app, [*args, "-q"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.replace("│", " ").split())
    assert "KV capacity unbounded in tokens: every attention layer keeps a fixed window per " \
        "sequence" in text and "4,611,686" not in text
    best = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)["best"]
    assert best["kv_capacity_tokens"] is None and best["kv_capacity_unbounded"] is True
    assert best["max_context_tokens"] == 4096 and 0 < best["max_batch"] < 10_000


def test_max_batch_counts_whole_requests_on_every_attention_dp_rank():
    """With attention-DP each rank holds batch / dp requests of its own KV pool: the largest
    batch is dp × the whole requests one rank fits (Qwen3-235B TP2 × DP8 on 16 H100s,
    2,500-token requests: 8 × 163 = 1,304), not the pool's tokens over a request's
    (1,308 before: 163.5 requests a rank), which no rank could hold; it fits, and dp more
    does not."""
    from learn_to_shard.cost.model import CostModel
    from learn_to_shard.parallel.strategy import Strategy

    wl = make_workload("serve", isl=2000, osl=500)
    cm = make_cost_model("qwen3-235b-a22b", "h100-sxm:16", wl)
    dims = search_plan(cm, method="megatron").best.strategy.dims

    def at(batch: int):
        c = CostModel(cm.model, cm.cluster, wl, config=cm.config,
                      space=cm.space.with_batches((batch,)))
        return c.evaluate(Strategy(tp=2, ep=8, pp=1, dp=8, batch=batch, dims=dims))

    e = at(8)
    assert e.max_batch == 8 * (e.kv_capacity_tokens // 8 // 2500) and e.max_batch % 8 == 0
    assert e.kv_capacity_tokens / 8 / 2500 % 1 > 0.2        # a fraction of a request left
    fits, over = at(e.max_batch), at(e.max_batch + 8)
    assert not any(v.startswith("memory") for v in fits.violations), fits.violations
    assert any(v.startswith("memory") for v in over.violations)


def test_a_batch_beyond_the_token_budget_is_not_chosen():
    """With short requests and no SLO, every batch above what a step's token budget keeps
    progressing gives the same tokens/s (requests wait for their prefill): the plan takes
    the smallest of them (it took the largest that fits, 4,262 per replica, at 70.9 of 71
    GiB, and exported --max-num-seqs 4262), checked against the steady state a batch below."""
    import copy
    import dataclasses

    from learn_to_shard.api import cost_config

    wl = make_workload("serve", isl=100, osl=10)
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:1", wl, cost_config("vllm"), engine="vllm")
    p = search_plan(cm, method="exact", engine="vllm")
    best = p.best
    assert best is not None
    # 8192 tokens per step over 1 + isl/osl = 11 tokens per running request: 745 progress
    assert best.strategy.batch == 745, best.strategy.short()
    trial = copy.copy(cm)
    trial.space = cm.space.with_batches([744])
    below = trial.evaluate(dataclasses.replace(best.strategy, batch=744))
    assert below.tokens_per_s_per_device < best.tokens_per_s_per_device
    assert best.memory.total_bytes < 0.5 * best.memory.usable_bytes


def test_a_4_bit_checkpoint_headline_says_its_bits():
    r = CliRunner().invoke(app, ["plan", "--model", "qwen3-235b-a22b-nvfp4", "--cluster",
                                 "b200:4", "--phase", "serve", "--isl", "1000", "--osl", "100",
                                 "--method", "megatron-rule"])
    assert r.exit_code == 0, r.output
    headline = next(ln for ln in r.output.splitlines() if " · serve isl=" in ln)
    assert "weights 4.5-bit, KV" in headline, headline
    doc = json.loads(CliRunner().invoke(app, [
        "plan", "--model", "qwen3-235b-a22b-nvfp4", "--cluster", "b200:4", "--phase", "serve",
        "--isl", "1000", "--osl", "100", "--method", "megatron-rule", "--json"]).stdout)
    assert doc["linear_weight_bits"] == 4.5


def test_a_batch_above_the_engines_default_cap_is_noted():
    """vLLM admits 256 running requests by default on an A100 (its get_batch_defaults): a
    plan of 683 says a server launched without --max-num-seqs runs at most 256 at once (the
    export sets it), in the terminal and the JSON; a plan within the cap says nothing."""
    base = ["plan", "--model", "llama-3.1-8b", "--phase", "serve", "--isl", "512", "--osl",
            "256", "--engine", "vllm"]
    r = CliRunner().invoke(app, [*base, "--cluster", "a100-80gb:1", "--json", "--no-timing"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["best"]["strategy"]["batch"] > 256
    note = next(n for n in data["notes"] if "--max-num-seqs" in n)
    assert note.startswith("vllm's default --max-num-seqs on a100-80gb is 256 per server, "
                           f"below the plan's {data['best']['strategy']['batch']}")
    r = CliRunner().invoke(app, [*base, "--cluster", "a100-80gb:1", "--tpot-slo", "15ms",
                                 "--json", "--no-timing"])
    data = json.loads(r.stdout)
    assert data["best"]["strategy"]["batch"] <= 256
    assert not any("--max-num-seqs" in n for n in data["notes"])


def test_the_instance_rate_is_the_clients_bounded_one_where_they_bind_it():
    """Mixtral-8x7B on 4 A100s under vLLM with 64 closed-loop clients, each spending the
    front-end time outside the engine: the plan's per-device figure counts that bound, and
    so do the per-instance figure in the text and the JSON (it was the batch slots' rate:
    2,152 per instance beside 536.9 per device on 4 devices, 2,148); the slots' rate is
    the one in parentheses."""
    base = ["plan", "--model", "mixtral-8x7b", "--cluster", "a100-80gb:4", "--phase",
            "serve", "--isl", "1024", "--osl", "1024", "--concurrency", "64", "--engine",
            "vllm"]
    r = CliRunner().invoke(app, [*base, "--json", "-q", "--no-timing"])
    assert r.exit_code == 0, r.output
    b = json.loads(r.stdout)["best"]
    devices = b["strategy"]["devices"] * b["instances"]
    assert b["instance_tokens_per_s"] * b["instances"] == pytest.approx(
        b["cluster_tokens_per_s"], rel=1e-12)
    assert b["cluster_tokens_per_s"] == pytest.approx(b["tokens_per_s_per_device"] * devices,
                                                      rel=1e-12)
    text = " ".join(CliRunner().invoke(app, base).output.split())
    assert "in the front-end per request bound it (the batch slots alone:" in text
    assert f"({b['instance_tokens_per_s']:,.0f} per instance;" in text


def test_an_infeasible_plan_names_the_slos_its_closest_candidate_would_meet():
    """Llama-4-Scout on 8 H100 at 8192/1024 with 128 clients, TPOT <= 40 ms: nothing meets
    it; the closest candidate (at its nearest layout and batch, 123) misses only the TPOT SLO
    (42.99 ms), so the answer names the SLO that admits it, rounded up to 0.1 ms, and
    planning with it finds that plan; its violations print under it."""
    base = ["plan", "--model", "llama-4-scout", "--cluster", "h100-sxm:8", "--phase", "serve",
            "--isl", "8192", "--osl", "1024", "--ttft-slo", "2s", "--concurrency", "128"]
    r = CliRunner().invoke(app, [*base, "--tpot-slo", "40ms"])
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    at = next(i for i, ln in enumerate(lines) if "• closest candidate" in ln)
    assert lines[at + 1].startswith("      – tpot_slo: TPOT 42.99 ms > SLO 40.00 ms")
    assert "• a TPOT SLO of 43 ms would make the closest candidate feasible" in r.output
    ok = CliRunner().invoke(app, [*base, "--tpot-slo", "43ms", "--json", "-q",
                                  "--no-timing"])
    # exit 4: feasible as searched (the analytical model), the simulation's mean misses
    assert ok.exit_code in (0, 4), ok.output
    assert json.loads(ok.stdout)["best"]["tpot_s"] <= 0.043


def test_the_closest_candidate_under_a_closed_loop_is_at_its_nearest_batch():
    """Llama-3.1-8B on one H100 with 200 clients, TPOT <= 50 ms and TTFT <= 2 s: nothing
    meets both. The searcher's nearest strategy sat at a batch of its grid (128), whose 72
    waiting clients put TTFT at 5.8 s, and the SLO hint said 5.8 s where a batch near 175
    comes within 6% of one SLO; the answer's candidate is the same layout at its nearest
    batch (176: only TPOT, 53 ms), and planning with the SLO its hint names finds that
    plan."""
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--phase", "serve",
            "--isl", "1024", "--osl", "256", "--concurrency", "200", "--ttft-slo", "2s"]
    r = CliRunner().invoke(app, [*base, "--tpot-slo", "50ms"])
    assert r.exit_code == 1, r.output
    text = " ".join(r.output.split())
    assert "closest candidate tp1 ep1 pp1 dp1 b176 " in text, text
    assert "• a TPOT SLO of 53 ms would make the closest candidate feasible" in text
    ok = CliRunner().invoke(app, [*base, "--tpot-slo", "53ms", "--json", "-q",
                                  "--no-timing"])
    # exit 4: feasible as searched (the analytical model), the simulation's mean misses
    assert ok.exit_code in (0, 4), ok.output
    plan = json.loads(ok.stdout)
    assert plan["feasible"] and plan["best"]["strategy"]["batch"] >= 176


def test_the_nearest_batch_breaks_the_fewest_limits_and_says_when_it_meets_them_all():
    """The nearest batch ranks as the searchers rank rejected strategies: fewest broken
    limits, then overshoot. Llama-3.1-70B on 16 H100s with 3,000 clients, TTFT <= 1 s: a
    batch that breaks only the TTFT SLO, not a larger one over memory and both SLOs with a
    smaller overshoot. And where Megatron's batch grid steps over the window of batches that
    meet both SLOs (Llama-3.1-8B, 200 clients, TTFT <= 2 s, TPOT <= 55 ms: 128 and 192 on
    the grid, about 170-174 meet them), the answer says its candidate meets every limit and
    points at --method exact, which finds it."""
    r = CliRunner().invoke(app, ["plan", "-m", "llama-3.1-70b", "-c", "h100-sxm:16",
                                 "--phase", "serve", "--isl", "2000", "--osl", "300",
                                 "--concurrency", "3000", "--ttft-slo", "1s", "--tpot-slo",
                                 "40ms"])
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    at = next(i for i, ln in enumerate(lines) if "• closest candidate" in ln)
    assert lines[at + 1].lstrip().startswith("– ttft_slo:"), lines[at:at + 3]
    assert not lines[at + 2].lstrip().startswith("–"), lines[at:at + 3]
    base = ["plan", "-m", "llama-3.1-8b", "-c", "h100-sxm:1", "--phase", "serve", "--isl",
            "1000", "--osl", "200", "--concurrency", "200", "--ttft-slo", "2s",
            "--tpot-slo", "55ms"]
    r = CliRunner().invoke(app, [*base, "--method", "megatron"])
    text = " ".join(r.output.split())
    assert r.exit_code == 1, r.output
    assert "meets every limit: a batch between those megatron searched; plan with --method " \
        "exact" in text, text
    ok = CliRunner().invoke(app, [*base, "--method", "exact", "--json", "-q", "--no-timing"])
    assert json.loads(ok.stdout)["feasible"], ok.output


def test_a_ttft_that_is_mostly_clients_waiting_names_that_wait_beside_the_looser_slo():
    """5,000 closed-loop clients on 8 H100s under a 2 s TTFT SLO: the closest candidate's
    TTFT is almost all clients waiting for a batch slot (about 338 s), so the hint says so
    and that more devices or fewer clients shorten it, not only the SLO that would pass; a
    TTFT that is its own prefill (the prefill test below) has no such clause."""
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-70b", "--cluster", "h100-sxm:8",
                                 "--phase", "serve", "--isl", "1024", "--osl", "256",
                                 "--tpot-slo", "50ms", "--ttft-slo", "2s", "--concurrency",
                                 "5000"])
    text = " ".join(r.output.split())
    assert r.exit_code == 1, r.output
    assert "would make the closest candidate feasible; " in text
    assert "ms of its TTFT is closed-loop clients waiting for a batch slot: more devices or " \
           "fewer clients shorten it" in text, text


def test_the_closest_prefill_candidate_takes_its_fastest_layout():
    """Llama-3.1-8B prefilling 8192 tokens on 8 H100s within 5 ms: nothing meets it. The
    searcher's nearest candidate, TP8 in Megatron's layout, takes 47 ms; its nearest layout
    (the sequence split) takes 28.3 ms, the TTFT of the plan a 30 ms SLO finds, so the hint
    names the least TTFT this cluster reaches, and planning with it finds that plan."""
    base = ["plan", "-m", "llama-3.1-8b", "-c", "h100-sxm:8", "--phase", "prefill", "--isl",
            "8192"]
    r = CliRunner().invoke(app, [*base, "--ttft-slo", "5ms"])
    text = " ".join(r.output.split())
    assert r.exit_code == 1, r.output
    assert "ttft_slo: TTFT 28.3 ms > SLO 5.0 ms" in text, text
    assert "a TTFT SLO of 28.4 ms would make the closest candidate feasible" in text
    assert "waiting for a batch slot" not in text
    ok = CliRunner().invoke(app, [*base, "--ttft-slo", "28.4ms", "--json", "-q",
                                  "--no-timing"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["best"]["ttft_s"] <= 0.0284


def test_the_slo_suggestion_is_never_below_the_latency_it_admits():
    """The SLOs an infeasible answer suggests round the closest candidate's latency up to
    0.1 ms whatever its size (a TTFT of 154.9612 s suggests 154961.2 ms, not the 154961 ms
    six significant digits would give, below it)."""
    import dataclasses

    from learn_to_shard.report.plan import slo_relaxation
    from learn_to_shard.workload import Phase, Workload

    cm = make_cost_model("llama-3.1-8b", "h100-sxm:1", make_workload("serve", isl=512,
                                                                      osl=128))
    e = cm.evaluate(Strategy(tp=1, ep=1, pp=1, dp=1, batch=8))
    wl = Workload(Phase.SERVE, isl=512, osl=128, ttft_slo_s=0.001, tpot_slo_s=0.001)
    for ttft, want in ((154.9612, "154961.2ms"), (123.45612, "123456.2ms"),
                       (159848.1317, "159848131.7ms"), (0.04431, "44.4ms")):
        slow = dataclasses.replace(e, ttft_s=ttft, tpot_s=0.0005,
                                   violations=("ttft_slo: over",))
        got = slo_relaxation(slow, wl)
        assert got == f"a TTFT SLO of {want[:-2]} ms", got
        assert float(want[:-2]) / 1e3 >= ttft * (1 - 1e-12)
    both = dataclasses.replace(e, ttft_s=0.5, tpot_s=0.02,
                               violations=("ttft_slo: over", "tpot_slo: over"))
    assert slo_relaxation(both, wl) == "a TPOT SLO of 20 ms and a TTFT SLO of 500 ms"
    assert slo_relaxation(dataclasses.replace(e, violations=("memory: over",)), wl) == ""



@pytest.mark.parametrize("model, cluster, phase, lengths", [
    ("llama-3.1-70b", "h100-sxm:8", "serve", {"isl": 2048, "osl": 128}),
    ("mixtral-8x7b", "h100-sxm:8", "serve", {"isl": 1000, "osl": 1000}),
    ("qwen3-32b", "h200:8", "decode", {"context": 8192}),
])
def test_the_plan_batch_is_the_smallest_that_ties_by_a_full_scan(model, cluster, phase,
                                                                 lengths):
    """``smallest_equal_batch`` (rounds of probes priced together) finds the batch a scan of
    every multiple of the optimum's DP degree below it finds: the first that is feasible
    with the optimum's tokens/s per device (to rounding)."""
    import copy

    import numpy as np

    from learn_to_shard.parallel.space import BATCH_HEAD, active_heads, canonical
    from learn_to_shard.report.plan import EQUAL_BATCH_REL_TOL, smallest_equal_batch
    from learn_to_shard.search import get_searcher

    cm = make_cost_model(model, cluster, make_workload(phase, **lengths))
    result = get_searcher("exact").search(cm, None, 0)
    opt = cm.evaluate(canonical(result.best_action, active_heads(cm.space)))
    s, step = opt.strategy, max(1, opt.strategy.dp)
    found = smallest_equal_batch(cm, opt).strategy.batch
    batches = list(range(step, s.batch + 1, step))
    trial = copy.copy(cm)
    trial.space = cm.space.with_batches(batches)
    act = np.repeat(trial.space.encode(s)[None, :], len(batches), axis=0)
    act[:, BATCH_HEAD] = np.searchsorted(np.asarray(trial.space.batch_values), batches)
    e = trial.evaluate_many(act)
    ties = e.feasible & (e.tokens_per_s_per_device
                         >= opt.tokens_per_s_per_device * (1 - EQUAL_BATCH_REL_TOL))
    assert found == batches[int(np.flatnonzero(ties)[0])], (s.short(), found)


def test_first_true_finds_what_bisection_finds():
    """The rounds of probes behind the printed batch find, for every threshold of a
    monotone predicate on [lo, hi], the threshold itself (hi where it lies at hi), with few
    calls."""
    import numpy as np

    from learn_to_shard.report.plan import first_true

    for lo, hi in ((1, 1), (1, 2), (1, 33), (1, 34), (3, 1000), (1, 4992)):
        for t in sorted({lo, lo + 1, (lo + hi) // 2, hi - 1, hi, *range(lo, min(hi, lo + 70))}):
            if not lo <= t <= hi:
                continue
            calls = []

            def ok(ks, t=t, calls=calls):
                calls.append(len(ks))
                return np.asarray(ks) >= t

            assert first_true(lo, hi, ok) == t, (lo, hi, t)
            assert len(calls) <= 4 and max(calls, default=0) <= 32


def test_a_closest_candidate_made_feasible_by_its_layout_says_so():
    """Megatron's layouts are its own: Llama-3.1-8B prefilling 8192 tokens on 8 H100s within
    30 ms is out of its reach (47 ms at TP8), while the sequence split at the same degrees
    takes 28.3 ms. The nearest layout meets every limit; the answer says a layout the
    searcher did not reach does, and points at --method exact, which finds it (it said no
    rule was broken once absent operators are ∅, which is not why)."""
    base = ["plan", "-m", "llama-3.1-8b", "-c", "h100-sxm:8", "--phase", "prefill", "--isl",
            "8192", "--ttft-slo", "30ms"]
    r = CliRunner().invoke(app, [*base, "--method", "megatron"])
    text = " ".join(r.output.split())
    assert r.exit_code == 1, r.output
    assert "meets every limit: a per-operator layout megatron did not reach; plan with " \
        "--method exact" in text, text
    assert "absent operators are ∅" not in text
    ok = CliRunner().invoke(app, [*base, "--method", "exact", "--json", "-q", "--no-timing"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["feasible"]


def test_an_open_loop_below_capacity_says_its_tokens_per_s_are_the_offered_load():
    """Under --request-rate a replica that keeps up serves what it is offered: the plan says
    so, with the offered tokens/s and the replica's full-load capacity, so the simulated
    column (here well below the plan's throughput) is not read as the replica's speed."""
    from typer.testing import CliRunner

    from learn_to_shard.cli import app

    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                                 "--phase", "serve", "--isl", "1024", "--osl", "256",
                                 "--request-rate", "5", "--engine", "vllm", "-q"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "under the open loop each replica serves what it is offered, 5 requests/s × 256 " \
        "output tokens = 1,280 tokens/s" in flat
    assert "a replica serves at full load (the plan's throughput per instance)" in flat
