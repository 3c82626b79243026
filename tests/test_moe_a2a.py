"""DeepEP expert all-to-all and two-batch overlap as engine options (``--moe-a2a``,
``--two-batch-overlap``; ``CostModelConfig.moe_a2a_kernel`` / ``two_batch_overlap``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from typer.testing import CliRunner

from learn_to_shard.api import cost_config, make_cost_model, make_workload
from learn_to_shard.cli import app
from learn_to_shard.cost.comm import expert_a2a_time_s
from learn_to_shard.engines.flags import check_args
from learn_to_shard.errors import ConfigError
from learn_to_shard.parallel import MEGATRON_DIMS, Strategy
from learn_to_shard.report.export import build_export

WL = make_workload("serve", isl=2000, osl=500, dtype="fp8")
EP32 = Strategy(tp=1, ep=32, pp=1, dp=32, batch=2048, dims=MEGATRON_DIMS)


def _cm(**opts):
    return make_cost_model("deepseek-v3", "h200:32", WL,
                           dataclasses.replace(cost_config("sglang"), **opts))


def _moe(e):
    return {c.where: c.time_s for c in e.collectives if c.where.startswith("moe ")}


def test_deepep_prices_dispatch_and_combine_with_the_kernel_model():
    """DeepSeek-V3 at EP32 over 4 nodes, serve: dispatch is expert_a2a_time_s with the FP8
    payload of an FP8 checkpoint, combine with BF16, of the ranks' mean tokens in each of the
    two steps of the serve mix (``OperatorTerms.prompt_step_mix``): ``auto`` runs the normal
    kernels in the steps where some rank carries a prompt chunk and the low-latency ones in
    the decode-only rest; the default all-to-all prices both the same."""
    base, deepep = _cm(), _cm(moe_a2a_kernel="deepep_auto")
    b, d = _moe(base.evaluate(EP32)), _moe(deepep.evaluate(EP32))
    assert b["moe dispatch"] == b["moe combine"]
    dev, c = deepep.cluster.device, deepep.config
    one = np.ones(1, dtype=np.int64)
    ph = deepep.phase_rows(one, 32 * one, 2048 * one)
    assert float(ph["dec"][0] + ph["pf"][0]) == pytest.approx(2048 / 32 * (1 + 2000 / 500) * float(
        deepep._step_share(np.array([2048 / 32.0]))[0]))
    mix = deepep.prompt_step_mix(ph["dec"], ph["pf"], ph["pf_seqs"], 32 * one, ph["m"])
    assert bool(mix.mixed[0]) and 0.0 < float(mix.q[0]) < 1.0
    assert float(mix.pf_b[0]) == 0.0
    steps = ((float(mix.q[0]), float(mix.dec_a[0] + mix.pf_a[0]), "normal"),
             (float(mix.w_b[0]), float(ph["dec"][0]), "low_latency"))
    kw = dict(hidden=7168, top_k=8, experts=256, domain=8,
              scale_up_bytes_per_s=dev.scale_up_bytes_per_s * c.scale_up_efficiency,
              scale_out_bytes_per_s=dev.scale_out_bytes_per_s * c.scale_out_efficiency)
    for where, payload in (("moe dispatch", "fp8"), ("moe combine", "bf16")):
        want = sum(w * float(expert_a2a_time_s(t, 32, payload=payload, mode=mode, **kw)[0])
                   for w, t, mode in steps)
        assert d[where] == pytest.approx(want, rel=1e-9), where
    assert deepep.evaluate(EP32).tpot_s < base.evaluate(EP32).tpot_s


def test_two_batch_overlap_hides_communication_up_to_the_experts_compute():
    """With the overlap the layer pays max(experts, dispatch + combine) instead of the sum:
    TPOT falls by at most the communication it hides, and never below the run without
    communication."""
    on = _cm(moe_a2a_kernel="deepep_auto", two_batch_overlap=True).evaluate(EP32)
    off = _cm(moe_a2a_kernel="deepep_auto").evaluate(EP32)
    comm = sum(_moe(off).values())
    moe_layers = 58
    assert off.tpot_s - moe_layers * comm - 1e-9 <= on.tpot_s < off.tpot_s


def test_options_are_checked_and_exported():
    with pytest.raises(ConfigError, match="moe_a2a_kernel"):
        dataclasses.replace(cost_config(), moe_a2a_kernel="pplx")
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h200:8",
                                 "--context", "2048", "--moe-a2a", "deepep"])
    assert r.exit_code == 2 and "is dense" in r.output
    r = CliRunner().invoke(app, ["plan", "--model", "deepseek-v3", "--cluster", "h200:16",
                                 "--context", "2048", "--moe-a2a", "deepep", "--engine",
                                 "trtllm"])
    assert r.exit_code == 2 and "not expressible" in r.output
    cm = _cm(moe_a2a_kernel="deepep_auto", two_batch_overlap=True)
    from learn_to_shard.api import search_plan

    # The export of the options is what is checked, on the best plan with EP: under the
    # power-law expert load (moe_routing_alpha) SGLang's unrestricted optimum here runs the
    # experts tensor-parallel, where no all-to-all is issued.
    cm.space = dataclasses.replace(cm.space, ep_values=tuple(e for e in cm.space.ep_values
                                                             if e > 1))
    plan = search_plan(cm, method="exact", engine="sglang")
    assert plan.best is not None and plan.best.strategy.ep > 1
    for engine, want in (("sglang", ["--moe-a2a-backend", "deepep", "--deepep-mode", "auto",
                                     "--enable-two-batch-overlap"]),
                         ("vllm", ["--all2all-backend", "deepep_high_throughput",
                                   "--enable-dbo"])):
        ex = build_export(plan, engine, model=cm.model, devices_per_node=8)
        assert all(w in ex.args for w in want), ex.args
        assert check_args(engine, ex.args) == []


def test_plan_says_when_the_asked_all_to_all_goes_unused(tmp_path):
    """``--moe-a2a`` with a best plan at EP 1 (no token exchange: the priced DeepEP plans
    ranked lower) says so under the plan; SGLang, whose DeepEP backend keeps EP = the group,
    has nothing to say."""
    import json

    base = ["plan", "--model", "qwen3-30b-a3b", "--cluster", "h200:8", "--phase", "serve",
            "--isl", "1024", "--osl", "1024", "--tpot-slo", "50ms", "--moe-a2a", "deepep"]
    # vLLM runs one DeepEP mode per server (test below): its serve plans name one.
    vllm = [*base[:-1], "deepep-normal", "--engine", "vllm"]
    r = CliRunner().invoke(app, [*vllm, "--json"])
    assert r.exit_code == 0, r.output
    # vLLM's DeepEP plans lose to EP 1 on one H200 node (the priced kernels at EP 8)
    doc = json.loads(r.stdout)
    assert doc["best"]["strategy"]["ep"] == 1
    assert len(doc["notes"]) == 1 and doc["notes"][0].startswith(
        "MoE all-to-all deepep normal was asked for, but the best plan has EP 1")
    r = CliRunner().invoke(app, [*vllm, "--report", str(tmp_path)])
    assert "was asked for, but the best plan has EP 1" in " ".join(r.output.split())
    assert "was asked for, but the best plan has EP 1" in (tmp_path / "report.md").read_text()
    r = CliRunner().invoke(app, [*base, "--engine", "sglang"])
    assert r.exit_code == 0, r.output
    assert "best plan has EP 1" not in " ".join(r.output.split())
    doc = json.loads(CliRunner().invoke(app, [*base, "--engine", "sglang", "--json"]).stdout)
    assert doc["notes"] == []
    # one GPU: no plan had expert parallelism, nothing ranked lower
    one = [a if a != "h200:8" else "h200:1" for a in vllm]
    r = CliRunner().invoke(app, one)
    assert r.exit_code == 0, r.output
    assert "best plan has EP 1" not in " ".join(r.output.split())


def test_vllm_refuses_deepep_auto_mode_in_the_serve_phase():
    """DeepEP's auto mode prices the normal kernels for steps that prefill and the
    low-latency ones for pure decode steps, which SGLang runs (``--deepep-mode auto``) and
    vLLM does not: a vLLM server runs one ``--all2all-backend``. A serve plan for vLLM under
    ``--moe-a2a deepep`` is refused (exit 2) with the two modes it can price; a decode plan,
    every step of which decodes, keeps it (the low-latency kernels, exported as such), and
    ``--export vllm`` implies the engine."""
    base = ["plan", "-m", "deepseek-v3", "-c", "h100-sxm:16", "-q"]
    serve = [*base, "--phase", "serve", "--isl", "1024", "--osl", "1024", "--moe-a2a",
             "deepep"]
    for engine in (["--engine", "vllm"], ["--export", "vllm"]):
        r = CliRunner().invoke(app, [*serve, *engine])
        assert r.exit_code == 2, r.output
        said = " ".join(r.output.split())
        assert "--moe-a2a deepep with --engine vllm: vLLM runs one DeepEP mode per server" \
            in said and "--moe-a2a deepep-normal" in said and "deepep-ll" in said
        assert "Traceback" not in r.output
    r = CliRunner().invoke(app, [*serve, "--engine", "sglang"])
    assert r.exit_code == 0, r.output
    # The API refuses the same launch (config.moe_a2a_kernel deepep_auto under vllm).
    from learn_to_shard import api

    cfg = dataclasses.replace(api.cost_config("vllm"), moe_a2a_kernel="deepep_auto")
    with pytest.raises(ConfigError, match="vLLM runs one DeepEP mode per server"):
        api.make_cost_model("deepseek-v3", "h100-sxm:16",
                            api.make_workload("serve", isl=1024, osl=1024), cfg, engine="vllm")
    r = CliRunner().invoke(app, [*base, "--phase", "decode", "--context", "2048", "--moe-a2a",
                                 "deepep", "--export", "vllm"])
    assert r.exit_code == 0, r.output
    assert "--all2all-backend deepep_low_latency" in r.stdout
