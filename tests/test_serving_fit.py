"""Engine step overheads and admission caps in the serving simulation: the fit behind the
shipped per-engine values and its provenance, the step-time model seeing the overheads as the
cost model does, and the engines' default ``max_num_seqs`` in admission and in the plan."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

import learn_to_shard
from learn_to_shard.api import make_cost_model, make_workload
from learn_to_shard.cli import app
from learn_to_shard.cost.config import CostModelConfig, load_fitted_factors
from learn_to_shard.cost.model import CostModel
from learn_to_shard.engines import default_max_num_batched_tokens, default_max_num_seqs
from learn_to_shard.errors import ConfigError
from learn_to_shard.fidelity.fit import (
    SERVING_CALIBRATIONS,
    STEP_METRICS,
    calibrate_serving,
    serving_loss,
)
from learn_to_shard.fidelity.serving import load_rows, predict_row
from learn_to_shard.parallel.ops import MEGATRON_DIMS
from learn_to_shard.parallel.strategy import Strategy
from learn_to_shard.serving import ServingLoad, fit_step_model, simulate_estimate
from learn_to_shard.serving.steptime import priced
from learn_to_shard.workload import Phase

STEP_FIELDS = {"host_step_overhead_s", "host_seq_overhead_s", "eager_layer_overhead_s",
               "frontend_latency_s"}


def _calibration(engine: str) -> list[dict[str, str]]:
    return [r for r in load_rows() if r["split"] == "calibration" and r["engine"] == engine]


def test_serving_fits_record_their_rows_and_the_profiles_load_them():
    """Every serving fit in the factors file names exactly its engine's calibration rows of
    the serving table, sets the four engine-overhead fields to values on the declared grid,
    and is what the engine profile carries."""
    fits = {n: f for n, f in load_fitted_factors().fits.items()
            if f.table == "serving_measurements.csv"}
    specs = {s.name: s for s in SERVING_CALIBRATIONS}
    assert set(fits) == {"sglang", "trtllm", "vllm"}
    for name, fit in fits.items():
        spec = specs[name]
        assert fit.engine == spec.engine and set(fit.values) == STEP_FIELDS
        assert fit.rows == [r["id"] for r in _calibration(spec.engine)]
        assert re.fullmatch(r"[0-9a-f]{40}", fit.commit)
        cfg = CostModelConfig.for_engine(name)
        for field, v in fit.values.items():
            assert v in spec.grid[field]
            assert getattr(cfg, field) == v
    # SGLang's and vLLM's fitted step overheads are not zero; vLLM's calibration rows (ShareGPT
    # runs without token totals) are predicted at the means the other ShareGPT rows state.
    assert fits["sglang"].values["host_step_overhead_s"] > 0
    assert all(predict_row(r).reason is None for r in _calibration("vllm"))
    assert fits["vllm"].values["host_seq_overhead_s"] > 0


def test_readme_states_the_shipped_overheads():
    """The README's serving paragraph gives each engine's fitted overheads (per step, per
    sequence, per layer of a prompt step, front-end per request) as the factors file has them
    (it once still gave values from before a refit), and no fit sits on the top edge of its
    grid."""
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    fits = load_fitted_factors().fits
    specs = {s.name: s for s in SERVING_CALIBRATIONS}
    for name, title in (("vllm", "vLLM"), ("sglang", "SGLang"), ("trtllm", "TensorRT-LLM")):
        v = fits[name].values
        eager_ms = v["eager_layer_overhead_s"] * 1e3
        per_layer = f"{eager_ms:g} ms" if eager_ms else "0"
        front_ms = v["frontend_latency_s"] * 1e3
        front = f"{front_ms:g} ms" if front_ms else "0"
        assert (f"{title} {v['host_step_overhead_s'] * 1e3:g} ms + "
                f"{v['host_seq_overhead_s'] * 1e6:g} µs per sequence, {per_layer} per "
                f"layer, {front} front-end") in text
        for field, x in v.items():
            assert x < max(specs[name].grid[field])


def test_fitted_overheads_lower_the_calibration_loss():
    """The shipped SGLang values beat no overhead on the rows they were fitted on."""
    cal = _calibration("sglang")
    shipped = CostModelConfig.for_engine("sglang")
    with_fit = serving_loss(cal, {f: getattr(shipped, f) for f in STEP_FIELDS}, STEP_METRICS)
    without = serving_loss(cal, {f: 0.0 for f in STEP_FIELDS}, STEP_METRICS)
    assert with_fit < without


def test_the_step_fit_scores_only_the_step_metrics(monkeypatch):
    """serving_loss counts only the metrics it is given: the step overheads are fitted on
    TPOT / ITL and throughput (STEP_METRICS), so a TTFT error does not enter their loss."""
    import learn_to_shard.fidelity.serving as fs
    from learn_to_shard.fidelity.serving import ServingRowResult

    def fake(row: dict, overrides: object = None) -> ServingRowResult:
        return ServingRowResult(id="x", split="calibration", engine="sglang", series="",
                                varies="", measured={"ttft_ms": 1.0, "tpot_ms": 1.0},
                                predicted={"ttft_ms": float(np.e), "tpot_ms": 1.0})

    monkeypatch.setattr(fs, "predict_row", fake)
    assert STEP_METRICS == ("tpot_ms", "output_tok_s")
    assert serving_loss([{}], {}, STEP_METRICS) == 0.0
    assert serving_loss([{}], {}) == pytest.approx(0.5)        # median of |ln e| and 0


def test_the_frontend_time_is_fitted_on_ttft_alone(monkeypatch):
    """calibrate_serving's third search puts into ``frontend_latency_s`` the TTFT the step
    and launch terms leave: rows whose TPOT the step fields match and whose TTFT is 38 ms
    short beside them get 38 ms of front-end time; the step fields stay where TPOT put them,
    and a launch time per layer, which would lengthen TPOT as well, stays 0."""
    import learn_to_shard.fidelity.serving as fs
    from learn_to_shard.fidelity.fit import CalibrationSpec
    from learn_to_shard.fidelity.serving import ServingRowResult

    def fake(row: dict, overrides: dict | None = None) -> ServingRowResult:
        o = dict(overrides or {})
        step_ms = 1e3 * o.get("host_step_overhead_s", 0.0)
        return ServingRowResult(
            id=row["id"], split="calibration", engine="vllm", series="", varies="",
            measured={"ttft_ms": 100.0, "tpot_ms": 12.0},
            predicted={"ttft_ms": 60.0 + step_ms + 1e3 * o.get("frontend_latency_s", 0.0)
                       + 1e5 * o.get("eager_layer_overhead_s", 0.0),
                       "tpot_ms": 10.0 + step_ms + 1e5 * o.get("eager_layer_overhead_s", 0.0)})

    monkeypatch.setattr(fs, "predict_row", fake)
    rows = [{"id": f"r{i}", "split": "calibration", "engine": "vllm"} for i in range(3)]
    spec = CalibrationSpec("vllm", "vllm", {
        "host_step_overhead_s": (0.0, 1e-3, 2e-3, 3e-3),
        "eager_layer_overhead_s": (0.0, 1e-4),
        "frontend_latency_s": (0.0, 2e-2, 3.8e-2, 5e-2)})
    (res,) = calibrate_serving(rows, [spec])
    assert res.values == {"host_step_overhead_s": 2e-3, "eager_layer_overhead_s": 0.0,
                          "frontend_latency_s": 3.8e-2}
    assert res.loss == pytest.approx(0.0, abs=1e-12)


def test_tensorrt_engine_runtime_is_trtllm_without_its_host_terms():
    """``trtllm-tensorrt`` (TensorRT-LLM's TensorRT-engine runtime) is the ``trtllm`` profile
    (its PyTorch runtime) with every fitted host term at 0 and without the PyTorch runtime's
    overlap scheduler; measurements.csv's TensorRT-LLM v0.14 rows and the ``defaults`` fit
    name it, so the serving fit's launch time per prompt step never prices them."""
    from learn_to_shard.fidelity.fit import CALIBRATIONS
    from learn_to_shard.fidelity.measurements import load_table

    torch_rt = CostModelConfig.for_engine("trtllm")
    engine_rt = CostModelConfig.for_engine("trtllm-tensorrt")
    assert torch_rt.eager_layer_overhead_s > 0
    assert all(getattr(engine_rt, f) == 0 for f in STEP_FIELDS)
    assert engine_rt.overlap_schedule is False and torch_rt.overlap_schedule is None
    assert dataclasses.replace(
        engine_rt, overlap_schedule=None,
        **{f: getattr(torch_rt, f) for f in STEP_FIELDS}) == torch_rt
    assert {r.engine for r in load_table() if r.source == "trtllm-v0.14"} == {"trtllm-tensorrt"}
    assert next(s for s in CALIBRATIONS if s.name == "defaults").engine == "trtllm-tensorrt"


@pytest.mark.slow
def test_serving_fit_reproduces_the_shipped_values():
    """``calibrate_serving`` on the shipped table lands on the shipped values (50–80 min on one
    core: ``pytest -m slow tests/test_serving_fit.py -k reproduces``)."""
    fits = load_fitted_factors().fits
    for res in calibrate_serving():
        assert res.values == fits[res.spec.name].values
        assert res.loss == pytest.approx(fits[res.spec.name].loss)


@pytest.fixture(scope="module")
def sglang_70b():
    """Llama-3.1-70B serving on 8 H100 with host overheads on every term."""
    cm = make_cost_model("llama-3.1-70b", "h100-sxm:8",
                         make_workload("serve", isl=1024, osl=256),
                         config=CostModelConfig.for_engine("sglang"), engine="sglang")
    cfg = dataclasses.replace(cm.config, host_step_overhead_s=3e-3, host_seq_overhead_s=4e-5,
                              host_prefill_overhead_s=1e-3, eager_layer_overhead_s=2e-4)
    return CostModel(cm.model, cm.cluster, cm.workload, config=cfg, space=cm.space)


@pytest.mark.parametrize("tp,pp,dp", [(8, 1, 1), (4, 2, 1), (2, 1, 4)])
def test_step_model_sees_the_host_time_as_the_cost_model(sglang_70b, tp, pp, dp):
    """Decode steps of the step-time model equal the cost model's, host time included (per
    step, per sequence, with attention-DP ranks and pipeline micro-batches as the cost model
    counts them); its serve step agrees with the cost model's; and a prompt chunk costs one
    sequence's host time, not one per token."""
    cm = sglang_70b
    s = Strategy(tp=tp, ep=1, pp=pp, dp=dp, batch=64, dims=MEGATRON_DIMS)
    step, rel = fit_step_model(cm, s)
    for b in (8, 64, 512):
        model = priced(cm, s, Phase.DECODE, 1152, (b,))[0][0]
        fit = float(step.step_time_s(b, b * 1152, 0.0, b))
        assert fit == pytest.approx(model, rel=2e-3)
    assert rel < 0.05
    assert step.prompt_host_s > 0
    one = float(step.step_time_s(4096, 0.0, 0.0, 1))
    per_token = float(step.step_time_s(4096, 0.0, 0.0, 4096))
    no_host = dataclasses.replace(step, seq_host_s=None)
    assert one - float(no_host.step_time_s(4096, 0.0, 0.0)) == pytest.approx(
        float(step.step_time_s(1, 0.0, 0.0, 1)) - float(no_host.step_time_s(1, 0.0, 0.0)))
    assert per_token - one > 4000 * cm.config.host_seq_overhead_s / (dp * 1.01)
    # A step with prompt tokens launches every layer outside the CUDA graphs: a lone prompt
    # all of them, a full pipeline one stage's share (the micro-batch that carries the
    # prompt, as the cost model prices it); a decode step none.
    assert step.eager_step_s == pytest.approx(2e-4 * cm.model.num_layers, rel=1e-9)
    assert float(step.step_time_s(64, 0.0, 0.0, 64, 0, 1.0)) - float(
        step.step_time_s(64, 0.0, 0.0, 64)) == pytest.approx(step.eager_step_s / pp)
    assert float(step.step_time_s(16, 0.0, 0.0, 1, 1, 1.0)) - float(
        step.step_time_s(16, 0.0, 0.0, 1, 1)) == pytest.approx(step.eager_step_s)


def test_simulated_tpot_at_one_client_carries_the_step_overhead(sglang_70b):
    """One client: the simulated TPOT is the cost model's decode step at batch 1 — with the
    fixed per-step cost in it."""
    cm = sglang_70b
    s = Strategy(tp=8, ep=1, pp=1, dp=1, batch=1, dims=MEGATRON_DIMS)
    est = cm.evaluate(s)
    sim = simulate_estimate(cm, est, ServingLoad(concurrency=1, num_prompts=3))
    tpot = sim["simulated"]["mean_tpot_s"]
    assert sim["sim_over_analytic"]["mean_tpot"] == pytest.approx(1.0, rel=0.05)
    zero = dataclasses.replace(cm.config, host_step_overhead_s=0.0, host_seq_overhead_s=0.0,
                               host_prefill_overhead_s=0.0, eager_layer_overhead_s=0.0)
    bare = CostModel(cm.model, cm.cluster, cm.workload, config=zero, space=cm.space)
    sim0 = simulate_estimate(bare, bare.evaluate(s), ServingLoad(concurrency=1, num_prompts=3))
    gap = tpot - sim0["simulated"]["mean_tpot_s"]
    assert gap == pytest.approx(3e-3 + 4e-5, rel=0.02)


def test_engine_default_caps():
    """The pinned engines' default admission caps (sources in engines.ADMISSION_SOURCES)."""
    gib = 2**30
    assert default_max_num_seqs("vllm", "h100-sxm", 79.6 * gib, 10**6, 2048) == 1024
    assert default_max_num_seqs("vllm", "b200", 179 * gib, 10**6, 2048) == 1024
    assert default_max_num_seqs("vllm", "a100-80gb", 80 * gib, 10**6, 2048) == 256
    assert default_max_num_seqs("vllm", "l40s", 45.0 * gib, 10**6, 2048) == 256
    # SGLang: KV tokens / context x 512 clamped to [2048, 4096], at most KV tokens // 2.
    assert default_max_num_seqs("sglang", "h200", 140 * gib, 100_000, 2048) == 4096
    assert default_max_num_seqs("sglang", "h200", 140 * gib, 12_000_000, 2_000_000) == 3072
    assert default_max_num_seqs("sglang", "h200", 140 * gib, 2_000_000, 1_000_000) == 2048
    assert default_max_num_seqs("sglang", "h200", 140 * gib, 2_000, 128) == 1000
    assert default_max_num_seqs("trtllm", "h200", 140 * gib, 10**6, 2048) == 2048
    with pytest.raises(ConfigError, match="unknown engine"):
        default_max_num_seqs("tgi", "h200", 140 * gib, 10**6, 2048)


def test_engine_default_token_budgets():
    """The pinned engines' default token budget per step (sources in
    engines.TOKEN_BUDGET_SOURCES): vLLM by memory and the A100 exception, SGLang by memory,
    TensorRT-LLM's BuildConfig; 8192 without an engine."""
    gib = 2**30
    assert default_max_num_batched_tokens("vllm", "h100-sxm", 79.6 * gib) == 8192
    assert default_max_num_batched_tokens("vllm", "h200", 140 * gib) == 8192
    assert default_max_num_batched_tokens("vllm", "b200", 179 * gib) == 16384
    assert default_max_num_batched_tokens("vllm", "a100-80gb", 80 * gib) == 2048
    assert default_max_num_batched_tokens("vllm", "l40s", 45.0 * gib) == 2048
    assert default_max_num_batched_tokens("sglang", "rtx-4080", 16 * gib) == 2048
    assert default_max_num_batched_tokens("sglang", "l40s", 45.0 * gib) == 4096
    assert default_max_num_batched_tokens("sglang", "a100-80gb", 80 * gib) == 8192
    assert default_max_num_batched_tokens("sglang", "h200", 140 * gib) == 8192
    assert default_max_num_batched_tokens("sglang", "b300", 268 * gib) == 16384
    assert default_max_num_batched_tokens("trtllm", "a100-80gb", 80 * gib) == 8192
    assert default_max_num_batched_tokens(None, "a100-80gb", 80 * gib) == 8192
    with pytest.raises(ConfigError, match="unknown engine"):
        default_max_num_batched_tokens("tgi", "h200", 140 * gib)


def test_cost_model_resolves_the_engine_token_budget_for_its_device():
    """CostModelConfig.max_num_batched_tokens None is the engine's default for the cluster's
    device, resolved when the cost model is built and recorded in the plan; a stated budget
    stays."""
    wl = make_workload("serve", isl=1024, osl=128)
    budget = {}
    for device in ("a100-80gb", "h100-sxm"):
        cm = make_cost_model("llama-3.1-8b", f"{device}:1", wl,
                             config=CostModelConfig.for_engine("vllm"), engine="vllm")
        budget[device] = cm.config.max_num_batched_tokens
    assert budget == {"a100-80gb": 2048, "h100-sxm": 8192}
    cm = make_cost_model("llama-3.1-8b", "a100-80gb:1", wl,
                         config=CostModelConfig.for_engine("vllm", max_num_batched_tokens=4096),
                         engine="vllm")
    assert cm.config.max_num_batched_tokens == 4096
    # The plan's recorded factors say which budget it ran.
    plan = learn_to_shard.plan("llama-3.1-8b", "a100-80gb:1", "serve", isl=1024, osl=128,
                               engine="vllm", method="megatron")
    assert plan.cost_model["max_num_batched_tokens"] == 2048


def test_clients_above_the_cap_wait_in_the_queue():
    """A plan whose batch exceeds what the engine admits runs only ``max_num_seqs`` requests;
    the rest wait, which the simulated TTFT shows and the replica share names."""
    wl = make_workload("serve", isl=128, osl=64)
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:1", wl,
                         config=CostModelConfig.for_engine("vllm"), engine="vllm")
    s = Strategy(tp=1, ep=1, pp=1, dp=1, batch=64, dims=MEGATRON_DIMS)
    load = ServingLoad(concurrency=64, num_prompts=256)
    free = simulate_estimate(cm, cm.evaluate(s), load)
    capped_cfg = dataclasses.replace(cm.config, max_num_seqs=16)
    cm16 = CostModel(cm.model, cm.cluster, cm.workload, config=capped_cfg, space=cm.space)
    capped = simulate_estimate(cm16, cm16.evaluate(s), load)
    assert free["engine_max_num_seqs"] == 1024 and free["max_num_seqs"] == 64
    assert "wait" not in str(free["replica_share"])
    assert capped["max_num_seqs"] == 16
    assert "48 wait in the queue" in str(capped["replica_share"])
    assert capped["clients_queued"] == 48 and free["clients_queued"] is None
    from learn_to_shard.report.render import simulation_notes
    note = " ".join(t for _, t in simulation_notes([{**capped, "strategy": "tp1 b64"}]))
    assert "tp1 b64: per replica, 48 clients wait in the queue (16 running)" in note
    assert capped["simulated"]["mean_running"] <= 16 + 1e-9
    assert capped["simulated"]["mean_ttft_s"] > 3 * free["simulated"]["mean_ttft_s"]
    assert capped["simulated"]["mean_tpot_s"] < free["simulated"]["mean_tpot_s"]
    with pytest.raises(ConfigError, match="max_num_seqs"):
        CostModelConfig(max_num_seqs=0)


def test_plan_simulates_its_batch_and_the_api_the_engine_default_cap():
    """``l2s plan --engine vllm --concurrency 600`` on an A100 plans a batch of 600 and
    simulates the server its export launches (``--max-num-seqs 600``), though vLLM's default
    cap there is 256; ``simulate_plan`` without the export's caps runs a server launched
    without the flag: 256 running and the other 344 clients waiting."""
    args = ["plan", "--model", "llama-3.1-8b", "--cluster", "a100-80gb:1", "--phase", "serve",
            "--isl", "128", "--osl", "128", "--engine", "vllm", "--concurrency", "600",
            "--num-prompts", "1200"]
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    sim = doc["simulation"][0]
    batch = doc["best"]["strategy"]["batch"]
    assert batch > 256 and sim["max_num_seqs"] == batch
    res = CliRunner().invoke(app, [*args, "--export", "vllm", "-q"])
    assert f"--max-num-seqs {batch}" in res.stdout
    from learn_to_shard.api import cost_config, search_plan, simulate_plan
    cm = make_cost_model("llama-3.1-8b", "a100-80gb:1",
                         make_workload("serve", isl=128, osl=128, concurrency=600),
                         cost_config("vllm"), engine="vllm")
    plan = search_plan(cm, engine="vllm")
    sim = simulate_plan(cm, plan, ServingLoad(concurrency=600, num_prompts=1200), top=1)[0]
    assert sim["engine_max_num_seqs"] == 256 and sim["max_num_seqs"] == 256
    assert "344 wait in the queue" in sim["replica_share"]
    assert sim["clients_queued"] == 344
    assert np.isfinite(sim["simulated"]["mean_ttft_s"])


def test_simulate_estimate_runs_the_engines_order_and_the_loads_lengths(sglang_70b, monkeypatch):
    """simulate_estimate reads engines.PREFILL_FIRST_ENGINES for the profile's engine (SGLang:
    prefill-first steps, so a step never carries a decode beside a prompt chunk; without the
    entry the same plan runs decode-first mixed steps and simulates otherwise), a dense
    model's DP ranks simulate as the replicas they are (each its own scheduler, prefill
    first), and a ``dataset="sharegpt"`` load draws ShareGPT's lengths (not the fixed
    isl/osl)."""
    import learn_to_shard.cost.config as config_mod
    import learn_to_shard.serving.load as load_mod

    cm = sglang_70b
    s = Strategy(tp=8, ep=1, pp=1, dp=1, batch=16, dims=MEGATRON_DIMS)
    est = cm.evaluate(s)
    load = ServingLoad(request_rate_per_s=4.0, num_prompts=60)
    assert cm.config.engine == "sglang"
    first = simulate_estimate(cm, est, load)["simulated"]
    monkeypatch.setattr(config_mod, "PREFILL_FIRST_ENGINES", ())
    mixed = simulate_estimate(cm, est, load)["simulated"]
    assert first["mean_tpot_s"] != pytest.approx(mixed["mean_tpot_s"], rel=1e-3)
    monkeypatch.setattr(config_mod, "PREFILL_FIRST_ENGINES", ("sglang",))
    assert simulate_estimate(cm, est, load)["simulated"] == first
    # TP4 DP2 at batch 16 is two TP4 servers of batch 8: the same simulation, prefill first.
    dp2 = simulate_estimate(cm, cm.evaluate(Strategy(tp=4, ep=1, pp=1, dp=2, batch=16,
                                                     dims=MEGATRON_DIMS)), load)
    two = simulate_estimate(cm, cm.evaluate(Strategy(tp=4, ep=1, pp=1, dp=1, batch=8,
                                                     dims=MEGATRON_DIMS)), load)
    assert dp2["scheduler"]["prefill_first"] and dp2["replicas"] == two["replicas"] == 2
    assert dp2["simulated"] == two["simulated"]
    assert "2 DP ranks" in dp2["replica_share"]
    # 20,000 draws: the sd of the mean is 1.65 / sqrt(20,000) = 1.2% for the prompts (ShareGPT's
    # coefficient of variation 1.65) and 0.6% for the outputs (0.82); 5% is four sd.
    req, _, _, _ = load_mod._instance_requests(cm, ServingLoad(concurrency=4, num_prompts=20_000,
                                                            dataset="sharegpt"), 1)
    assert len(set(req.isl.tolist())) > 50 and len(set(req.osl.tolist())) > 50
    assert req.isl.mean() == pytest.approx(cm.workload.isl, rel=0.05)
    assert req.osl.mean() == pytest.approx(cm.workload.osl, rel=0.05)


def test_simulate_estimate_runs_the_engines_overlap_scheduler(sglang_70b, monkeypatch):
    """The profile's engine decides the overlap scheduler (engines.OVERLAP_SCHEDULE_ENGINES:
    SGLang's is on, so under a Poisson load arrivals wait one more step and TTFT grows);
    ``overlap_schedule`` and ``prefill_first`` in the config override the engine's defaults,
    and ``decode_steps_per_schedule`` reaches the simulation."""

    cm = sglang_70b
    s = Strategy(tp=8, ep=1, pp=1, dp=1, batch=16, dims=MEGATRON_DIMS)
    est = cm.evaluate(s)
    load = ServingLoad(request_rate_per_s=4.0, num_prompts=60)
    on = simulate_estimate(cm, est, load)["simulated"]

    def with_config(**kw: object) -> dict:
        cm2 = CostModel(cm.model, cm.cluster, cm.workload,
                        config=dataclasses.replace(cm.config, **kw), space=cm.space)
        return simulate_estimate(cm2, cm2.evaluate(s), load)["simulated"]

    off = with_config(overlap_schedule=False)
    assert on["mean_ttft_s"] > off["mean_ttft_s"]
    assert simulate_estimate(cm, est, load)["scheduler"] == {
        "prefill_first": True, "overlap_schedule": True, "decode_steps_per_schedule": 1,
        "recv_interval": 1, "kv_admission": "reserve", "preemptions": 0}
    import learn_to_shard.engines as engines_mod
    monkeypatch.setattr(engines_mod, "OVERLAP_SCHEDULE_ENGINES", ())
    assert simulate_estimate(cm, est, load)["simulated"] == off
    assert with_config(overlap_schedule=True) == on
    import learn_to_shard.cost.config as config_mod
    monkeypatch.setattr(config_mod, "PREFILL_FIRST_ENGINES", ())
    assert with_config(prefill_first=True) == off
    burst = with_config(decode_steps_per_schedule=8, prefill_first=True)
    assert burst["mean_ttft_s"] > off["mean_ttft_s"]


def test_rows_run_the_scheduler_of_their_engine_version():
    """fidelity.serving.row_scheduler: SGLang before v0.4 without the overlap scheduler, vLLM's
    stated --async-scheduling with it, vLLM V0 --num-scheduler-steps as multi-step
    prefill-first decoding, SGLang's --disable-radix-cache with the no-future-OOM admission
    of its benchmark's fixed-length requests; an unstated version keeps the profile's
    defaults."""
    from learn_to_shard.fidelity.serving import row_scheduler

    rows = {r["id"]: r for r in load_rows()}
    assert row_scheduler(rows["sgl060-8b-sglang-sharegpt-rps4"]) == {
        "overlap_schedule": False, "kv_admission": "no_future_oom"}
    # --max_model_len 4096: V0's unchunked budget max(4096, 2048).
    assert row_scheduler(rows["sgl060-8b-vllm-sharegpt-rps4"]) == {
        "decode_steps_per_schedule": 10, "prefill_first": True, "max_num_batched_tokens": 4096}
    assert row_scheduler({**rows["sgl060-8b-vllm-sharegpt-rps4"], "notes": (
        "--num-scheduler-steps 8 --max-model-len 1024")})["max_num_batched_tokens"] == 2048
    assert row_scheduler(rows["gs-gptoss120b-h100-vllm-tp2-async-sharegpt"]) == {
        "overlap_schedule": True}
    assert row_scheduler(rows["gs-dsr1-h200-sglang-tp8-sharegpt"]) == {}
    assert row_scheduler(rows["dc-70b-random-rps1"]) == {"kv_admission": "no_future_oom"}
    assert row_scheduler(rows["gs-dsr1-h200-vllm-tp8-sharegpt"]) == {}
    # Stated switches: the overlap scheduler turned off, and a flag named only to say it is
    # absent.
    assert row_scheduler({**rows["dc-70b-random-rps1"],
                          "notes": "--disable-overlap-schedule"}) == {"overlap_schedule": False}
    assert row_scheduler({**rows["dc-70b-random-rps1"], "notes": "--tp-size 4"}) == {}
    assert row_scheduler({**rows["trt5929-fp8-h200-c1-isl1600-ep8"],
                          "notes": "disable_overlap_scheduler: true"}) == {
        "overlap_schedule": False}
    assert row_scheduler({**rows["gs-dsr1-h200-vllm-tp8-sharegpt"],
                          "notes": "without --async-scheduling"}) == {}
    # TensorRT-LLM's balanced attention-DP ranks (perf-overview's DeepSeek R1 llm_options).
    assert row_scheduler(rows["trtperf-dsr1-h200-dep8-1024-1024"]) == {
        "attention_dp_balanced": True}
    assert row_scheduler(rows["trtperf-qwen3-235b-h200-dep4-1024-1024"]) == {}


def test_a_median_itl_is_predicted_by_the_pooled_gaps(monkeypatch):
    """A row's median ITL is set beside the simulation's pooled-gap median (SGLang's and vLLM's
    benchmark clients), except under LLMPerf, whose ITL is a per-request mean (then the median
    TPOT); a stated TPOT is preferred to either, its median to its mean."""
    import learn_to_shard.fidelity.serving as fs

    stats = {f"{s}_{m}_s": v for m, base in (("ttft", 1.0), ("tpot", 2.0), ("itl", 3.0),
                                             ("e2e", 4.0))
             for s, v in (("mean", base), ("p50", base + 0.5))}
    monkeypatch.setattr(fs, "simulate_estimate", lambda *a, **k: {
        "simulated": stats, "cluster_output_tokens_per_s": 1.0})
    rows = {r["id"]: r for r in load_rows()}
    pooled = fs.predict_row(rows["dc-70b-offline-4096-1024-run1"])
    assert pooled.predicted["tpot_ms"] == pytest.approx(3500.0)          # p50_itl_s
    llmperf = fs.predict_row(rows["trt5929-fp8-h200-c1-isl1600-ep8"])
    assert llmperf.predicted["tpot_ms"] == pytest.approx(2500.0)         # p50_tpot_s
    stated = fs.predict_row(rows["gs-dsr1-h200-vllm-tp8-sharegpt-c4"])
    assert stated.predicted["tpot_ms"] == pytest.approx(2500.0)          # p50_tpot_s
    mean_only = fs.predict_row({**rows["gs-dsr1-h200-vllm-tp8-sharegpt-c4"],
                                "tpot_ms_median": ""})
    assert mean_only.predicted["tpot_ms"] == pytest.approx(2000.0)       # mean_tpot_s


def test_rows_run_the_engine_limits_their_launch_sets():
    """fidelity.serving.row_launch_limits: the token budget, running requests per rank and
    memory fractions a row's launch states are the cost-model fields it runs with; a flag
    that only shares a prefix with another is not read as it."""
    from learn_to_shard.fidelity.serving import row_launch_limits

    rows = {r["id"]: r for r in load_rows()}
    assert row_launch_limits(rows["trtdsr1-h200-fp8-c1024"]) == {
        "max_num_batched_tokens": 1151, "max_num_seqs": 128, "kv_cache_free_fraction": 0.8}
    assert row_launch_limits(rows["gs-qwen3-235b-h100-vllm-tp4-fp8-mnbt16384-sharegpt"]) == {
        "max_num_batched_tokens": 16384}
    assert row_launch_limits(rows["sgl060-70b-sglang-sharegpt-rpsinf"]) == {
        "memory_utilization": 0.88}
    assert row_launch_limits(rows["gs-dsr1-h200-vllm-tp8-sharegpt"]) == {}
    sgl = {**rows["dc-70b-random-rps1"],
           "notes": "--mem-fraction-static 0.8 --chunked-prefill-size 4096"}
    assert row_launch_limits(sgl) == {"memory_utilization": 0.8,
                                      "max_num_batched_tokens": 4096}
    # SGLang's budget and running requests are per instance: DP attention divides them.
    assert row_launch_limits({**sgl, "attention_dp": "4"}) == {
        "memory_utilization": 0.8, "max_num_batched_tokens": 1024}
    # A value with a unit or an exponent is not a plain number: not read.
    assert row_launch_limits({**rows["gs-dsr1-h200-vllm-tp8-sharegpt"],
                              "notes": "--max-num-seqs 8k --max-num-batched-tokens 1e4"}) == {}
    # vLLM's flags are not TensorRT-LLM's: a row is read with its own engine's.
    assert row_launch_limits({**rows["gs-dsr1-h200-vllm-tp8-sharegpt"],
                              "notes": "--max_num_tokens 1024"}) == {}


def test_inferencex_rows_run_their_yaml_kv_fraction_and_their_length_range():
    """An InferenceX TensorRT-LLM row states its KV fraction as trtllm-serve's YAML does
    (``free_gpu_memory_fraction: 0.75``) and its budget as a flag; its client draws lengths
    from ``int(0.8 × nominal)`` to the nominal one, which the row's ``length_dist`` says."""
    from learn_to_shard.fidelity.serving import _random_draw, row_launch_limits
    from learn_to_shard.serving.simulate import fixed_requests

    rows = {r["id"]: r for r in load_rows()}
    trt = rows["ix-dsr1-h200-trt-tp8ep8-8k1k-c8"]
    assert row_launch_limits(trt) == {"max_num_batched_tokens": 8320,
                                      "kv_cache_free_fraction": 0.75}
    draw = _random_draw(trt["length_dist"])
    assert draw == {"up_to_nominal": True, "range_ratio": 0.8}
    req = fixed_requests(2000, 8192, 1024, draw["range_ratio"], 0, draw["up_to_nominal"])
    assert req.isl.min() >= int(0.8 * 8192) and req.isl.max() <= 8192
    assert req.osl.min() >= int(0.8 * 1024) and req.osl.max() <= 1024
    assert abs(req.isl.mean() / (0.9 * 8192) - 1) < 0.01
    # SGLang's scheduler receive interval is read, and not divided over attention-DP ranks
    # (only its budget and running requests are per instance).
    sgl = rows["ix-dsr1-b200-sgl-tp8ep1-1k1k-c16"]
    assert row_launch_limits(sgl) == {"max_num_batched_tokens": 32768, "max_num_seqs": 128,
                                      "memory_utilization": 0.82,
                                      "scheduler_recv_interval": 30}
    assert row_launch_limits({**sgl, "attention_dp": "8"})["scheduler_recv_interval"] == 30
    # SGLang's own random dataset ([1, nominal]) and fixed lengths read as before.
    assert _random_draw("uniform integers in [1, nominal] (bench_serving)") == {
        "up_to_nominal": True, "range_ratio": 0.0}
    assert _random_draw("fixed") == {"up_to_nominal": False}


def test_token_budget_follows_the_device_display_name_and_rejects_unknown_engines(tmp_path):
    """vLLM's A100 rule tests the CUDA device name: a custom device named otherwise but
    displayed as an A100 gets vLLM's A100 budget; a config naming no known engine is bad
    input, not a silent 8192."""
    import dataclasses as dc

    from learn_to_shard.hardware.presets import load_device
    from learn_to_shard.hardware.spec import ClusterSpec

    a100 = load_device("a100-80gb")
    lab = dc.replace(a100, name="lab-gpu", display_name="NVIDIA A100-SXM4-80GB")
    wl = make_workload("serve", isl=1024, osl=128)
    cm = make_cost_model("llama-3.1-8b", ClusterSpec(lab, 1, name="lab-gpu:1"), wl,
                         config=CostModelConfig.for_engine("vllm"), engine="vllm")
    assert cm.config.max_num_batched_tokens == 2048
    with pytest.raises(ConfigError, match="engine"):
        CostModelConfig(engine="tgi")


def test_v0_row_without_max_model_len_runs_the_models_length_as_its_budget(monkeypatch):
    """A vLLM V0 multi-step row that states no --max-model-len runs V0's unchunked budget
    max(max_model_len, 2048) at vLLM's default max_model_len, the model's
    max_position_embeddings (Llama-3.1-8B: 131072); with it stated, that length."""
    import learn_to_shard.fidelity.serving as fs

    seen = []

    def spy(cm, est, load, **kw):
        seen.append(cm.config.max_num_batched_tokens)
        return simulate_estimate(cm, est, load, **kw)

    monkeypatch.setattr(fs, "simulate_estimate", spy)
    row = {r["id"]: r for r in load_rows()}["sgl060-8b-vllm-sharegpt-rps4"]
    predict_row({**row, "notes": "server: --num-scheduler-steps 10"})
    predict_row(row)                                    # --max_model_len 4096
    assert seen == [131072, 4096]


def test_sglang_runs_no_overlap_scheduler_under_pipeline_parallelism():
    """SGLang turns its overlap scheduler off when pp > 1 (v0.5.23
    ``_pipeline_parallel_overlap_disable``): the simulation of a PP plan runs the synchronous
    loop, a TP plan the overlapped one; TensorRT-LLM keeps its overlap under PP."""
    wl = make_workload("serve", isl=256, osl=64)
    load = ServingLoad(concurrency=8, num_prompts=32)
    for engine, pp, want in (("sglang", 1, True), ("sglang", 2, False), ("trtllm", 2, True)):
        cm = make_cost_model("llama-3.1-8b", "h100-sxm:2", wl,
                             config=CostModelConfig.for_engine(engine), engine=engine)
        s = Strategy(tp=2 // pp, ep=1, pp=pp, dp=1, batch=8, dims=MEGATRON_DIMS)
        sim = simulate_estimate(cm, cm.evaluate(s), load)
        assert sim["scheduler"]["overlap_schedule"] is want, (engine, pp)
