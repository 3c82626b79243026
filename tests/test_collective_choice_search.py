"""Collective launch settings as a searched, engine-level axis (issue 16, item 1, "as a
searched choice"): the settings' flags exist in the pinned snapshots, each setting prices what
the engine runs, ``--collectives search`` keeps the best setting, the exact solver still
equals brute force with algorithm pricing on, and the export prints the winner's flags."""

from __future__ import annotations

import dataclasses
import json

import pytest
from test_exact import brute_force, check_exact_equals_brute_force, moe_model
from typer.testing import CliRunner

from learn_to_shard.api import (
    COLLECTIVE_MODES,
    collectives_config,
    cost_config,
    make_cost_model,
    make_workload,
    search_collectives,
    search_plan,
)
from learn_to_shard.cli import app
from learn_to_shard.cost import CostModel
from learn_to_shard.cost.comm import ALGORITHMS, settings_for
from learn_to_shard.cost.config import CostModelConfig
from learn_to_shard.engines.collectives import COLLECTIVE_SETTINGS
from learn_to_shard.engines.flags import check_args, check_yaml_keys
from learn_to_shard.errors import ConfigError
from learn_to_shard.hardware import load_device, parse_cluster
from learn_to_shard.hardware.fabric import FABRICS
from learn_to_shard.hardware.spec import ClusterSpec
from learn_to_shard.model.spec import AttentionKind, AttentionSpec, LayerSpec, ModelSpec
from learn_to_shard.parallel import StrategySpace
from learn_to_shard.report.export import build_export
from learn_to_shard.search.exact_tables import verify
from learn_to_shard.workload import Phase, Workload


def test_every_setting_is_launchable_as_written() -> None:
    """Names never collide with the algorithm names or the modes; flags are exact option
    strings of the pinned snapshots; YAML keys are TorchLlmArgs fields; tiers name known
    algorithms."""
    for engine, settings in COLLECTIVE_SETTINGS.items():
        assert settings[0].name == "engine-default"
        for st in settings:
            assert st.engine == engine and st.source
            assert st.name not in ALGORITHMS and st.name not in COLLECTIVE_MODES
            assert check_args(engine, list(st.args)) == []
            assert all(a in ALGORITHMS for tier in st.tiers for a in tier)
            if st.yaml:
                assert engine == "trtllm"
                assert check_yaml_keys(dict(st.yaml)) == []


def test_settings_that_do_not_differ_on_a_device_are_not_searched() -> None:
    names = {d: [s.name for s in settings_for("sglang", FABRICS[d])]
             for d in ("h100-sxm", "a100-80gb", "l40s")}
    assert names["h100-sxm"] == ["engine-default", "enable-nccl-nvls", "no-allreduce-fusion",
                                 "nccl-only", "nccl-only+nvls"]
    assert names["a100-80gb"] == ["engine-default", "nccl-only"]   # no NVLS, no fusion
    assert names["l40s"] == ["engine-default"]                             # PCIe: NCCL only
    assert settings_for("trtllm", FABRICS["mi300x"]) == ()


def _toy(moe: bool = False) -> ModelSpec:
    if moe:
        return moe_model(0, 1, False)
    return ModelSpec(name="toy", architecture="Test", hidden_size=64, vocab_size=1000,
                     attention=AttentionSpec(AttentionKind.GQA, 8, 8, 16, 16),
                     dense_intermediate_size=128, gated_mlp=True, moe=None,
                     layers=tuple(LayerSpec(is_moe=False) for _ in range(3)))


def _real_device_problem(model: ModelSpec, cfg: CostModelConfig, phase: Phase) -> CostModel:
    """A toy model on 8 H100s (the preset's fabric: NVLS and the custom kernels exist) over a
    small explicit space, so brute force stays cheap (MoE: 3**10 choices, one degree
    combination per batch)."""
    dev = dataclasses.replace(load_device("h100-sxm"), hbm_bytes=2e9)
    cl = ClusterSpec(dev, 8, name="h100-sxm:8")
    heads = dict(tp_values=(8,), pp_values=(1,), batch_values=(64, 4096)) if model.is_moe \
        else dict(tp_values=(2, 8), pp_values=(1, 2), batch_values=(1, 64, 4096))
    sp = StrategySpace(model, cl, ep_values=(1,), dp_values=(1,), **heads)
    osl = 64 if phase is Phase.SERVE else 0
    return CostModel(model, cl, Workload(phase, isl=300, osl=osl), config=cfg, space=sp)


@pytest.mark.parametrize(("mode", "engine", "phase", "moe"), [
    ("auto", None, Phase.DECODE, False),
    ("engine-default", "trtllm", Phase.PREFILL, False),
    ("engine-default", "vllm", Phase.SERVE, True),
    ("two-shot+rmsnorm", None, Phase.DECODE, True),
])
def test_exact_equals_brute_force_with_algorithm_pricing(mode: str, engine: str | None,
                                                         phase: Phase, moe: bool) -> None:
    cl = parse_cluster("h100-sxm:8")
    cfg = collectives_config(CostModelConfig.for_engine(engine), mode, engine, cl)
    assert cfg.collective_algorithm != "alpha-beta"
    cm = _real_device_problem(_toy(moe), cfg, phase)
    assert verify(cm, n=64) > 0
    bf = brute_force(cm)
    assert bf[0] > 0
    check_exact_equals_brute_force(cm, describe=False, bf=bf)


def test_search_keeps_the_best_setting_and_certifies_each() -> None:
    """``search_collectives`` with ``exact`` returns the best of the per-setting exact
    optima, and says what each setting reached."""
    engine = "sglang"
    wl = make_workload("decode", context=2048, tpot_slo_s=0.02)
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:8", wl, cost_config(engine), engine=engine)
    plan = search_collectives(cm, method="exact", engine=engine)
    scores = plan.search["collective_settings"]
    assert isinstance(scores, dict)
    assert list(scores) == [s.name for s in settings_for(engine, FABRICS["h100-sxm"])]
    for name, value in scores.items():
        one = search_plan(make_cost_model(
            "llama-3.1-8b", "h100-sxm:8", wl,
            collectives_config(cost_config(engine), name, engine, cm.cluster), engine=engine),
            method="exact", engine=engine)
        assert one.best is not None and one.best.tokens_per_s_per_device == value
    assert plan.best is not None
    assert plan.best.tokens_per_s_per_device == max(scores.values())
    assert plan.search["collective_setting"] == plan.cost_model["collective_setting"]
    assert scores["nccl-only"] <= scores["engine-default"]     # custom kernels help here


def test_export_prints_the_winning_settings_flags() -> None:
    for engine in ("vllm", "sglang", "trtllm"):
        wl = make_workload("decode", context=2048, tpot_slo_s=0.02)
        cm = make_cost_model("llama-3.1-70b", "h100-sxm:8", wl, cost_config(engine),
                             engine=engine)
        for st in settings_for(engine, FABRICS["h100-sxm"]):
            cfg = collectives_config(cost_config(engine), st.name, engine, cm.cluster)
            p = search_plan(CostModel(cm.model, cm.cluster, wl, config=cfg, space=cm.space),
                            method="megatron", budget=200, engine=engine)
            ex = build_export(p, engine, model=cm.model, devices_per_node=8)
            assert check_args(engine, ex.args) == []
            for flag in st.args:
                assert flag in ex.args
            if engine == "trtllm":
                assert ex.yaml_config is not None and check_yaml_keys(ex.yaml_config) == []
                assert ex.yaml_config["allreduce_strategy"] == dict(st.yaml)["allreduce_strategy"]
        forced = collectives_config(cost_config(engine), "ring", engine, cm.cluster)
        p = search_plan(CostModel(cm.model, cm.cluster, wl, config=forced, space=cm.space),
                        method="megatron", budget=200, engine=engine)
        ex = build_export(p, engine, model=cm.model, devices_per_node=8)
        assert ex.env == {"NCCL_ALGO": "Ring"} and "export NCCL_ALGO=Ring" in ex.text()
        assert check_args(engine, ex.args) == []


def test_default_export_and_plan_have_no_collective_flags() -> None:
    wl = make_workload("decode", context=2048, tpot_slo_s=0.02)
    cm = make_cost_model("llama-3.1-70b", "h100-sxm:8", wl, cost_config("vllm"),
                         engine="vllm")
    p = search_plan(cm, method="megatron", budget=200, engine="vllm")
    ex = build_export(p, "vllm", model=cm.model, devices_per_node=8)
    assert ex.env == {} and "--disable-custom-all-reduce" not in ex.args
    assert "--compilation-config" not in ex.args


def test_cli_collectives_option() -> None:
    runner = CliRunner()
    base = ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:8", "--phase", "decode",
            "--context", "2048", "--tpot-slo", "20ms", "-q", "--json"]
    r = runner.invoke(app, [*base, "--engine", "sglang", "--collectives", "search"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["search"]["collective_setting"] in d["search"]["collective_settings"]
    r = runner.invoke(app, [*base, "--collectives", "bogus"])
    assert r.exit_code == 2 and "--collectives" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, [*base, "--collectives", "nccl-only"])   # needs --engine
    assert r.exit_code == 2 and "need --engine" in r.output
    with pytest.raises(ConfigError, match="--collectives"):
        collectives_config(CostModelConfig(), "search", None, parse_cluster("h100-sxm:8"))


def test_ctrl_c_inside_one_setting_carries_that_settings_cost_model() -> None:
    """An interrupt during one setting's search returns its best so far with the cost model
    it was priced under (the CLI re-evaluates the answer with it), not the alpha-beta one."""
    from learn_to_shard.api import CollectiveSearchInterrupted
    from learn_to_shard.search.base import interruptible

    seen = [0]

    def stop_late(k: int) -> None:
        seen[0] += k
        if seen[0] >= 1300:
            raise KeyboardInterrupt

    wl = make_workload("decode", context=2048)
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:8", wl, cost_config("trtllm"),
                         engine="trtllm")
    with pytest.raises(CollectiveSearchInterrupted) as info, interruptible("megatron", 0, 1000):
        search_collectives(cm, method="megatron", budget=1000, progress=stop_late,
                           engine="trtllm")
    stop = info.value
    assert stop.cost_model.config.collective_setting in ("engine-default", "strategy-nccl",
                                                         "strategy-oneshot", "strategy-twoshot")
    assert cm.config.collective_algorithm == "alpha-beta"
    assert stop.result.interrupted and stop.result.evaluations > 0
    assert stop.result.best_action is not None
    assert stop.cost_model.evaluate(stop.result.best_action).tokens_per_s_per_device == \
        pytest.approx(stop.result.best_objective, rel=1e-12)


@pytest.mark.parametrize("args, says", [
    (["--cluster", "a100-80gb:8", "--collectives", "nvls"], "needs NVLink SHARP"),
    (["--cluster", "l40s:8", "--collectives", "one-shot"], "fully connected peer-to-peer"),
    (["--cluster", "mi300x:8", "--engine", "sglang", "--collectives", "enable-nccl-nvls"],
     "changes nothing on mi300x"),
    (["--cluster", "h100-sxm:8", "--gemm-overlap"], "needs --sequence-parallel"),
])
def test_collective_options_the_hardware_cannot_run_are_one_line_errors(args, says) -> None:
    """A forced algorithm the device lacks, a setting that changes nothing on the device (its
    flags would turn on what the hardware does not have) and GEMM overlap without the
    sequence parallelism it overlaps are refused in one line, exit 2."""
    from typer.testing import CliRunner

    from learn_to_shard.cli import app

    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--phase", "decode",
                                 "--context", "4096", *args])
    assert r.exit_code == 2 and says in r.output and "Traceback" not in r.output


def test_collective_search_counts_every_settings_evaluations() -> None:
    """``--collectives search`` runs one search per launch setting: the plan's evaluation
    count is their sum (budget × settings for a budgeted searcher), the kept setting's alone
    recorded beside it."""
    cm = make_cost_model("llama-3.1-8b", "h100-sxm:2",
                         make_workload("serve", isl=1024, osl=256))
    plan = search_collectives(cm, method="random", budget=50, seed=0, engine="vllm")
    n = len(plan.search["collective_settings"])
    assert n > 1
    assert plan.search["evaluations_kept_setting"] == 50
    assert plan.search["evaluations"] == 50 * n
