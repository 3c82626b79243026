"""The routed-expert block against TensorRT-LLM's measured MoE kernels (``data/silicon/moe.csv``).

``fidelity.kernels.moe_kernels`` prices each measured block through the cost model's MoE layer;
``fit_moe_kernels`` fits the block's fixed cost (``CostModelConfig.moe_block_overhead_s``) and
the expert GEMMs' narrow-shape curve (the ``trtllm`` profile's ``expert_shape_half``) on the
calibration shapes. The full fit over the shipped table takes minutes and is a slow test:
``.venv/bin/python -m pytest -q -m slow tests/test_moe_kernels.py``.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import statistics
from pathlib import Path

import pytest

from learn_to_shard.cost.config import CostModelConfig
from learn_to_shard.cost.model import CostModel
from learn_to_shard.cost.terms import runs_sm80_16bit_experts
from learn_to_shard.errors import ConfigError
from learn_to_shard.fidelity.kernels import (
    FP8_BLOCK_FIT_DEVICES,
    FP8_BLOCK_MMA_FIT_DEVICES,
    MOE_CALIBRATION_MODELS,
    _block_scaled_rows,
    _engine_moe_rows,
    fit_block_fp8_expert_overhead,
    fit_fp8_block_mma,
    fit_fp8_block_scale,
    fit_moe_kernels,
    fit_moe_sm80_efficiency,
    fit_w4a16_expert_efficiency,
    moe_kernel_report,
    moe_kernels,
    moe_sm80_kernels,
    moe_sm80_rows,
    silicon_dir,
    silicon_tables,
    w4a16_expert_kernels,
)
from learn_to_shard.hardware.presets import load_device
from learn_to_shard.hardware.spec import ClusterSpec
from learn_to_shard.model.hf_config import load_model
from learn_to_shard.parallel.ops import MEGATRON_DIMS
from learn_to_shard.parallel.space import StrategySpace
from learn_to_shard.parallel.strategy import Strategy
from learn_to_shard.workload import DType, Phase, Workload

_COLUMNS = ("system", "preset", "source", "dtype", "hidden", "inter", "topk", "experts",
            "tokens", "moe_tp", "moe_ep", "distribution", "latency_s")


def _rows(shape: tuple[int, int, int, int]) -> list[dict[str, str]]:
    h, i, k, e = shape
    return [dict(system="h200_sxm", preset="h200", source="synthetic", dtype="fp8_block",
                 hidden=str(h), inter=str(i), topk=str(k), experts=str(e), tokens=str(t),
                 moe_tp=str(tp), moe_ep=str(ep), distribution="balanced", latency_s="1")
            for t in (1, 16, 1024) for tp, ep in ((1, 8), (8, 1))]


def _write(folder: Path, rows: list[dict[str, str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "moe.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return folder


def test_fit_recovers_the_block_cost_a_synthetic_table_was_made_with(tmp_path):
    """Kernel times made by the model itself at a 12 µs block cost (DeepSeek-V3's shape to
    fit on, Qwen3-235B-A22B's held out) are fitted back to 12 µs with zero loss, starting from
    no block cost."""
    rows = _rows((7168, 2048, 8, 256)) + _rows((4096, 1536, 8, 128))
    truth = CostModelConfig.for_engine("trtllm", moe_block_overhead_s=12e-6)
    made = moe_kernels(truth, {"moe.csv": rows})
    assert len(made) == len(rows)
    by_key = {(k.model, k.tokens, k.moe_tp, k.moe_ep): k.predicted_s for k in made}
    names = {(7168, 2048): "deepseek-v3", (4096, 1536): "qwen3-235b-a22b"}
    for r in rows:
        r["latency_s"] = repr(by_key[(names[(int(r["hidden"]), int(r["inter"]))],
                                      int(r["tokens"]), int(r["moe_tp"]), int(r["moe_ep"]))])
    folder = _write(tmp_path / "silicon", rows)
    start = dataclasses.replace(truth, moe_block_overhead_s=0.0)
    values, cal, held = fit_moe_kernels(start, folder)
    assert values["moe_block_overhead_s"] == pytest.approx(12e-6)
    assert cal == pytest.approx(0.0, abs=1e-9) and held == pytest.approx(0.0, abs=1e-9)


@pytest.fixture(scope="module")
def shipped_report():
    """``moe_kernel_report`` at the shipped factors, keyed by (split, device, token class)."""
    return {(s.split, s.preset, s.tokens): s for s in moe_kernel_report()}


@pytest.fixture(scope="module")
def report_without():
    """The same report with the block's fixed cost, its block-scaled cost per local expert
    and the narrow-GEMM curve off."""
    cfg = CostModelConfig.for_engine("trtllm", moe_block_overhead_s=0.0, expert_shape_half=0.0,
                                     block_fp8_local_expert_overhead_s=0.0)
    return {(s.split, s.preset, s.tokens): s for s in moe_kernel_report(cfg)}


def test_block_cost_and_curve_bring_the_groups_within_30_percent(shipped_report,
                                                                 report_without):
    """On the shipped table, calibration and held-out shapes alike: without the block terms
    and the curve the model prices <= 16-token blocks over 40% below their measured time; with
    them the median error of every (split, device, token class) group is within 30%. The
    highest, H200's calibration rows above 1,024 tokens at +26%, is its BF16 and per-tensor
    FP8 rows priced too slow (+71%, +24%): the expert GEMMs' compute-bound rate."""
    assert report_without.keys() == shipped_report.keys() and len(shipped_report) == 18
    for key, s in shipped_report.items():
        if key[2] == "<=16":
            assert report_without[key].median_error < -0.4, key
        assert abs(s.median_error) < 0.3, key


def test_block_scaled_fp8_is_priced_below_per_tensor_fp8_on_hopper_only():
    """``fp8_block_scale_efficiency``: on H100/H200, above 1,024 tokens, the table's
    block-scaled rows take ~1.85x the per-tensor rows' time and the model priced them alike
    (median error -33% to -39%); with the fitted factor each (split, device) group of those
    rows is within 15%. BF16, per-tensor FP8 and every B200 row are priced as before (B200
    has block-scaled MMA)."""
    off = CostModelConfig.for_engine("trtllm", fp8_block_scale_efficiency=1.0)
    ks, ks_off = moe_kernels(), moe_kernels(off)
    assert len(ks) == len(ks_off)
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for k, k0 in zip(ks, ks_off, strict=True):
        assert (k.model, k.preset, k.dtype, k.tokens) == (k0.model, k0.preset, k0.dtype,
                                                          k0.tokens)
        if k.dtype != "fp8_block" or k.preset == "b200":
            assert k.predicted_s == k0.predicted_s
        elif k.tokens > 1024:
            groups.setdefault((k.split, k.preset), []).append(
                (k.predicted_s / k.measured_s - 1, k0.predicted_s / k0.measured_s - 1))
    assert set(groups) == {(s, d) for s in ("calibration", "held-out")
                           for d in ("h100-sxm", "h200")}
    for key, errs in groups.items():
        assert statistics.median(e0 for _, e0 in errs) < -0.3, key
        assert abs(statistics.median(e for e, _ in errs)) < 0.15, key


@pytest.mark.slow
def test_shipped_fp8_block_scale_is_the_fit_on_the_shipped_table():
    """Re-running ``fit_fp8_block_scale`` gives the shipped value (~20 s)."""
    values, cal, held = fit_fp8_block_scale()
    shipped = CostModelConfig.for_engine("trtllm").fp8_block_scale_efficiency
    assert values["fp8_block_scale_efficiency"] == pytest.approx(shipped)
    assert cal == pytest.approx(0.115, abs=0.005) and held == pytest.approx(0.156, abs=0.005)


def test_ep_over_expert_tp_follows_the_kernels(shipped_report, report_without):
    """Above 1,024 tokens the kernels put EP8 at 0.3–0.6 of expert-TP8's time; without the
    narrow-GEMM curve (and the block cost) the model said 0.46–0.85 (every group's predicted
    ratio more than 15% above the measured one: B200's calibration rows 19%, the others
    29–90%), with it every group is within 30% (|ln| < 0.3)."""
    for key, s in shipped_report.items():
        if key[2] == ">1024":
            assert s.ep_over_tp is not None and report_without[key].ep_over_tp is not None
            measured, predicted = s.ep_over_tp
            assert measured < 0.65, key
            assert report_without[key].ep_over_tp[1] > 1.15 * measured, key
            assert abs(math.log(predicted / measured)) < 0.3, key


@pytest.mark.slow
def test_shipped_block_cost_is_the_fit_on_the_shipped_table():
    """Re-running the fit on ``data/silicon/moe.csv`` from zero gives the shipped values
    (~8 min)."""
    shipped = CostModelConfig.for_engine("trtllm")
    start = CostModelConfig.for_engine("trtllm", moe_block_overhead_s=0.0, expert_shape_half=0.0)
    values, cal, held = fit_moe_kernels(start, silicon_dir())
    assert values["moe_block_overhead_s"] == pytest.approx(shipped.moe_block_overhead_s)
    assert values["expert_shape_half"] == pytest.approx(shipped.expert_shape_half)
    assert cal < 0.2 and held < 0.2
    assert set(MOE_CALIBRATION_MODELS) <= {k.model for k in moe_kernels()}
    assert statistics.median(abs(k.predicted_s / k.measured_s - 1) for k in moe_kernels()) < 0.25


def test_documented_losses_before_and_after_the_block_terms():
    """docs/validation.md's 'MoE expert block' table and ``CostModelConfig``'s docstring:
    median |ln(predicted / measured)| over the calibration / held-out rows is 0.58 / 0.60
    without the block cost, the curve, the block-scaled FP8 rate and cost per local expert
    (the model before them) and 0.114 / 0.119 shipped."""
    def losses(cfg: CostModelConfig | None) -> tuple[float, float]:
        ks = moe_kernels(cfg)
        return tuple(statistics.median(abs(math.log(k.predicted_s / k.measured_s))
                                       for k in ks if (k.split == "calibration") == cal)
                     for cal in (True, False))

    before = losses(CostModelConfig.for_engine("trtllm", moe_block_overhead_s=0.0,
                                               expert_shape_half=0.0,
                                               fp8_block_scale_efficiency=1.0,
                                               block_fp8_local_expert_overhead_s=0.0))
    assert before == pytest.approx((0.58, 0.60), abs=0.005)
    assert losses(None) == pytest.approx((0.114, 0.119), abs=0.005)


def test_report_lists_token_classes_smallest_first(tmp_path):
    """``moe_kernel_report`` (what ``l2s validate --fit-silicon`` prints) orders each
    device's rows by token class, ``<=16``, ``<=1024``, ``>1024`` (not as strings sort)."""
    rows = [dict(r, tokens=str(t)) for r in _rows((7168, 2048, 8, 256))[:2]
            for t in (8192, 1024, 1)]
    folder = _write(tmp_path / "silicon", rows)
    got = [(s.split, s.preset, s.tokens) for s in moe_kernel_report(folder=folder)]
    assert got == [("calibration", "h200", t) for t in ("<=16", "<=1024", ">1024")]


def test_block_scaled_blocks_pay_for_every_local_expert():
    """``block_fp8_local_expert_overhead_s``: DeepSeek-V3's block-scaled blocks at one token
    on H200 take 115 µs with experts tensor-parallel over 8 ranks (all 256 on every rank)
    and 40 µs under EP8 (32 per rank), though expert TP reads fewer weight bytes. Without
    the term the model priced both at ~40 µs; with it expert TP8 is within 15% of its
    measured time and over twice EP8's. Per-tensor FP8 and BF16 blocks are priced as
    without the term."""
    rows = [r for r in silicon_tables(silicon_dir())["moe.csv"]
            if r["preset"] == "h200" and r["tokens"] == "1" and r["hidden"] in ("7168", "4096")
            and (r["moe_tp"], r["moe_ep"]) in (("8", "1"), ("1", "8"))]
    off = CostModelConfig.for_engine("trtllm", block_fp8_local_expert_overhead_s=0.0)
    on, without = moe_kernels(None, {"moe.csv": rows}), moe_kernels(off, {"moe.csv": rows})
    assert len(on) == len(without) > 0
    dsv3 = {(k.moe_tp, k.moe_ep): (k, k0) for k, k0 in zip(on, without, strict=True)
            if k.model == "deepseek-v3" and k.dtype == "fp8_block"}
    (tp8, tp8_off), (ep8, ep8_off) = dsv3[(8, 1)], dsv3[(1, 8)]
    assert tp8.measured_s > 2.5 * ep8.measured_s
    assert tp8_off.predicted_s < 1.1 * ep8_off.predicted_s
    assert abs(tp8.predicted_s / tp8.measured_s - 1) < 0.15
    assert tp8.predicted_s > 2 * ep8.predicted_s
    for k, k0 in zip(on, without, strict=True):
        if k.dtype != "fp8_block":
            assert k.predicted_s == k0.predicted_s


@pytest.mark.slow
def test_shipped_block_fp8_expert_overhead_is_the_fit_on_the_shipped_table():
    """Re-running ``fit_block_fp8_expert_overhead`` (the cost per local expert and the
    block-scaled rate jointly) gives the shipped values (~4 min)."""
    values, cal, held = fit_block_fp8_expert_overhead()
    shipped = CostModelConfig.for_engine("trtllm")
    assert values["block_fp8_local_expert_overhead_s"] == pytest.approx(
        shipped.block_fp8_local_expert_overhead_s)
    assert values["fp8_block_scale_efficiency"] == pytest.approx(
        shipped.fp8_block_scale_efficiency)
    assert cal == pytest.approx(0.112, abs=0.005) and held == pytest.approx(0.144, abs=0.005)


def _split_losses(cfg: CostModelConfig, rows: dict) -> dict[str, float]:
    by: dict[str, list[float]] = {}
    for k in moe_kernels(cfg, rows):
        by.setdefault(k.split, []).append(abs(math.log(k.predicted_s / k.measured_s)))
    return {s: statistics.median(v) for s, v in by.items()}


def test_each_engine_fits_its_block_scaled_rate_on_its_own_kernels():
    """vLLM's and SGLang's block-scaled FP8 rates come from their own measured fused-MoE
    kernels (``moe_engines.csv``), not TensorRT-LLM's (``moe.csv``): each engine's rows are
    its own, and its profile's rate prices them closer than TensorRT-LLM's 0.6 does, on the
    calibration shapes and on the held-out Qwen3-235B-A22B alike."""
    trt = CostModelConfig.for_engine("trtllm").fp8_block_scale_efficiency
    with pytest.raises(ConfigError, match="no measured MoE kernels"):
        _block_scaled_rows(None, engine="lmdeploy")
    assert {r["source"].split("-")[0] for r in _block_scaled_rows(None)["moe.csv"]} == {
        "trtllm"}
    for engine in ("vllm", "sglang"):
        rows = _block_scaled_rows(None, FP8_BLOCK_FIT_DEVICES, engine)
        assert rows["moe.csv"] and all(r["source"].startswith(f"{engine}-")
                                       for r in rows["moe.csv"])
        cfg = CostModelConfig.for_engine(engine)
        assert cfg.fp8_block_scale_efficiency < trt
        own = _split_losses(cfg, rows)
        other = _split_losses(dataclasses.replace(cfg, fp8_block_scale_efficiency=trt), rows)
        assert set(own) == {"calibration", "held-out"}
        for split in own:
            assert own[split] < other[split] - 0.02, (engine, split, own, other)


@pytest.mark.slow
@pytest.mark.parametrize("engine, cal, held", [("vllm", 0.203, 0.112),
                                               ("sglang", 0.169, 0.093)])
def test_engine_block_scale_is_the_fit_on_its_own_kernels(engine, cal, held):
    """Re-running ``fit_fp8_block_scale(engine=...)`` gives the profile's value and the
    documented losses (~20 s each)."""
    values, c, h = fit_fp8_block_scale(engine=engine)
    shipped = CostModelConfig.for_engine(engine).fp8_block_scale_efficiency
    assert values["fp8_block_scale_efficiency"] == pytest.approx(shipped)
    assert c == pytest.approx(cal, abs=0.005) and h == pytest.approx(held, abs=0.005)


def _ratio(kernels, keep) -> float:
    """Geometric median of ``predicted / measured`` over the kernels ``keep`` selects."""
    return math.exp(statistics.median(math.log(k.predicted_s / k.measured_s)
                                      for k in kernels if keep(k)))


@pytest.mark.parametrize("preset", ["h100-sxm", "h200"])
def test_16_bit_expert_blocks_of_vllm_and_sglang_against_their_own_kernels(preset):
    """The 16-bit routed-expert block priced with each engine's profile against that engine's
    own measured fused-MoE kernels (``moe_engines.csv`` ``bfloat16`` rows: balanced routing,
    experts tensor-parallel): from 1,024 tokens, where the expert GEMMs make the block's
    time, the model is a median 0.83–0.92x of the measured time on Hopper for both engines,
    and at one token a median within 20% (single rows 0.65–1.61x), so neither engine's 16-bit
    MoE kernels call for a rate of their own (``docs/validation.md``)."""
    for engine in ("vllm", "sglang"):
        rows = _engine_moe_rows(None, (preset,), engine, "bfloat16")
        assert rows["moe.csv"] and {r["dtype"] for r in rows["moe.csv"]} == {"bfloat16"}
        assert {r["moe_ep"] for r in rows["moe.csv"]} == {"1"}
        kernels = moe_kernels(CostModelConfig.for_engine(engine), rows)
        big = _ratio(kernels, lambda k: k.tokens >= 1024)
        one = _ratio(kernels, lambda k: k.tokens == 1)
        assert 0.8 <= big <= 0.95, (engine, big)
        assert 0.8 <= one <= 1.2, (engine, one)


@pytest.mark.parametrize("engine, dist", [("vllm", "power_law_1.2"),
                                          ("sglang", "balanced")])
def test_16_bit_expert_blocks_on_a100_against_each_engines_own_kernels(engine, dist):
    """Each engine's own 16-bit fused MoE on A100 (``moe_engines.csv``: vLLM 0.14.0 measured
    power-law routing only, SGLang 0.5.10 balanced routing) from 1,024 tokens, experts
    tensor-parallel: at the 16-bit rate the model prices them at about 0.65x of measured
    (Hopper's rows of the same engines 0.83–0.92x, above); the profile's fitted
    ``moe_sm80_efficiency`` brings them closer, the median block still fast (0.74–0.75x)."""
    rows = moe_sm80_rows(engine)["moe.csv"]
    assert rows and {r["distribution"] for r in rows} == {dist}
    assert {r["moe_ep"] for r in rows} == {"1"} and min(int(r["tokens"]) for r in rows) >= 1024
    shipped = CostModelConfig.for_engine(engine)
    assert shipped.moe_sm80_efficiency == 0.65
    at_16_bit = moe_sm80_kernels(dataclasses.replace(shipped, moe_sm80_efficiency=1.0), engine)
    fitted = moe_sm80_kernels(shipped, engine)
    assert 0.6 <= _ratio(at_16_bit, lambda k: True) <= 0.7
    assert 0.7 <= _ratio(fitted, lambda k: True) <= 0.8


@pytest.mark.slow
def test_ampere_rate_is_the_joint_fit_and_its_documented_losses():
    """``fit_moe_sm80_efficiency`` on both engines' A100 blocks together (~10 s) gives the
    profiles' 0.65 and the losses ``CostModelConfig`` documents (median |ln error|: at 1.0
    0.412 / held out 0.510, at 0.65 0.302 / 0.302)."""
    values, cal, held = fit_moe_sm80_efficiency()
    assert values == {"moe_sm80_efficiency": 0.65}
    for engine in ("vllm", "sglang"):
        assert CostModelConfig.for_engine(engine).moe_sm80_efficiency == 0.65
    assert (cal, held) == pytest.approx((0.302, 0.302), abs=0.005)
    _, cal1, held1 = fit_moe_sm80_efficiency(grid={"moe_sm80_efficiency": (1.0,)})
    assert (cal1, held1) == pytest.approx((0.412, 0.510), abs=0.005)


def test_ampere_fit_without_its_rows_is_a_config_error(tmp_path):
    """A folder without the engines' 16-bit A100 rows: one ConfigError naming what is
    missing, not a statistics error from an empty median."""
    with pytest.raises(ConfigError, match="no 16-bit a100-80gb MoE rows"):
        fit_moe_sm80_efficiency(folder=tmp_path)


def test_tensorrt_llm_16_bit_blocks_on_a100_need_no_ampere_rate():
    """TensorRT-LLM 1.0.0's own A100 blocks (``moe.csv``, power-law routing only), priced
    with its profile (``moe_sm80_efficiency`` 1.0) and the routing they were measured with:
    a median within 10% of measured from 1,024 tokens, so the Ampere rate is the Triton
    kernels' of vLLM and SGLang, not the chip's."""
    trt = CostModelConfig.for_engine("trtllm")
    assert trt.moe_sm80_efficiency == 1.0
    rows = _engine_moe_rows(None, ("a100-80gb",), "trtllm", "bfloat16")
    kernels = moe_kernels(trt, rows, distribution="power_law_1.2",
                          devices={"a100-80gb": load_device("a100-80gb")})
    assert kernels
    assert 0.9 <= _ratio(kernels, lambda k: k.tokens >= 1024) <= 1.1


def test_ampere_rate_applies_to_16_bit_experts_on_a100_only():
    """``runs_sm80_16bit_experts``: experts with 16-bit math of a MoE model on A100 — 16-bit
    weights (an FP8 checkpoint served in 16 bits included) and FP8 weights, which A100
    dequantises in the kernel; not on Hopper, not 4-bit experts (gpt-oss MXFP4, the device's
    W4A16 fraction), not a dense model. Where it applies only the routed-expert GEMMs slow
    down."""
    a100, h100 = load_device("a100-80gb"), load_device("h100-sxm")
    qwen, dsv3 = load_model("qwen3-235b-a22b"), load_model("deepseek-v3")
    assert runs_sm80_16bit_experts(qwen, a100, DType.BF16)
    assert runs_sm80_16bit_experts(dsv3, a100, DType.BF16)
    assert not runs_sm80_16bit_experts(qwen, h100, DType.BF16)
    assert runs_sm80_16bit_experts(qwen, a100, DType.FP8)
    assert not runs_sm80_16bit_experts(qwen, h100, DType.FP8)
    assert not runs_sm80_16bit_experts(load_model("gpt-oss-20b"), a100, DType.BF16)
    assert not runs_sm80_16bit_experts(load_model("llama-3.1-8b"), a100, DType.BF16)

    def times(efficiency: float) -> dict[str, float]:
        cfg = CostModelConfig.for_engine("vllm", moe_sm80_efficiency=efficiency)
        cluster = ClusterSpec(a100, 8)
        space = dataclasses.replace(StrategySpace.build(qwen, cluster), tp_values=(8,),
                                    ep_values=(1,), pp_values=(1,), dp_values=(1,),
                                    batch_values=(64,))
        cm = CostModel(qwen, cluster, Workload(Phase.PREFILL, isl=2048), config=cfg,
                       space=space)
        return cm.evaluate(Strategy(tp=8, ep=1, pp=1, dp=1, batch=64,
                                    dims=MEGATRON_DIMS)).op_time_s
    full, slow = times(1.0), times(0.5)
    assert slow["expert_up"] > 1.5 * full["expert_up"]
    assert slow["expert_down"] > 1.5 * full["expert_down"]
    assert all(slow[op] == pytest.approx(full[op]) for op in full
               if not op.startswith("expert_"))


@pytest.mark.parametrize("engine, cal, held", [("vllm", 0.142, 0.159),
                                               ("sglang", 0.202, 0.265)])
def test_blackwell_block_scale_is_the_fit_on_the_engines_own_kernels(engine, cal, held):
    """``fp8_block_mma_efficiency``: on B200 vLLM's and SGLang's block-scaled MoE rows (both
    FlashInfer's TensorRT-LLM-gen kernels) at >= 1,024 tokens with experts tensor-parallel
    fit 0.25 of the FP8 rate, the shipped value of both profiles (~3 s each); the datasheet
    rate (1.0) prices them 2.2x too fast (median |ln error| above 0.8). TensorRT-LLM's own
    B200 block-scaled rows are DeepGEMM's: no fit of this term there."""
    values, c, h = fit_fp8_block_mma(engine=engine)
    cfg = CostModelConfig.for_engine(engine)
    assert cfg.block_fp8_moe_kernel == "trtllm-gen"
    assert values["fp8_block_mma_efficiency"] == pytest.approx(cfg.fp8_block_mma_efficiency)
    assert c == pytest.approx(cal, abs=0.005) and h == pytest.approx(held, abs=0.005)
    _, c1, h1 = fit_fp8_block_mma(dataclasses.replace(cfg, fp8_block_mma_efficiency=1.0),
                                  engine=engine, grid={"fp8_block_mma_efficiency": (1.0,)})
    assert c1 > 0.8 and h1 > 0.5
    rows = _block_scaled_rows(None, FP8_BLOCK_MMA_FIT_DEVICES, engine)["moe.csv"]
    assert rows and {r["preset"] for r in rows} == {"b200"}
    with pytest.raises(ConfigError, match="DeepGEMM"):
        fit_fp8_block_mma(engine="trtllm")


def test_blackwell_block_fp8_kernel_choice_prices_each_kernel_as_measured():
    """On B200 a block-scaled FP8 MoE block is priced as the kernel that serves it:
    ``deepgemm`` (the ``trtllm`` profile: TensorRT-LLM's measured DeepGEMM blocks, the FP8
    rate with the per-local-expert cost and the narrow-GEMM curve) or ``trtllm-gen`` (0.25 of
    the FP8 rate, neither of the two). DeepSeek-V3 at one token, experts tensor-parallel
    over 8 ranks: DeepGEMM's measured 98 µs against TensorRT-LLM-gen's 36 µs (SGLang's
    table), each priced within 30% by its own setting; at 8,192 tokens 1.44 against 1.20 ms.
    On H200 the setting changes nothing, and neither does it for BF16 weights."""
    tabs = silicon_tables(silicon_dir())

    def pick(table: str, src: str, preset: str, dtype: str) -> dict[str, list[dict[str, str]]]:
        return {"moe.csv": [r for r in tabs[table] if r["source"].startswith(src)
                            and r["preset"] == preset and r["dtype"] == dtype
                            and r["hidden"] == "7168" and r["distribution"] == "balanced"
                            and (r["moe_tp"], r["moe_ep"]) == ("8", "1")
                            and r["tokens"] in ("1", "8192")]}

    trt = CostModelConfig.for_engine("trtllm")
    gen = dataclasses.replace(trt, block_fp8_moe_kernel="trtllm-gen")
    assert trt.block_fp8_moe_kernel == "deepgemm"
    deepgemm = {k.tokens: k for k in moe_kernels(trt, pick("moe.csv", "trtllm", "b200",
                                                           "fp8_block"))}
    trtllm_gen = {k.tokens: k for k in moe_kernels(gen, pick("moe_engines.csv", "sglang",
                                                             "b200", "fp8_block"))}
    assert deepgemm[1].measured_s > 2.5 * trtllm_gen[1].measured_s
    for k in (*deepgemm.values(), *trtllm_gen.values()):
        assert abs(math.log(k.predicted_s / k.measured_s)) < math.log(1.3), k
    wrong = {k.tokens: k for k in moe_kernels(trt, pick("moe_engines.csv", "sglang", "b200",
                                                        "fp8_block"))}
    assert wrong[1].predicted_s > 2 * wrong[1].measured_s
    for table, src, preset, dtype in (("moe.csv", "trtllm", "h200", "fp8_block"),
                                      ("moe.csv", "trtllm", "b200", "bfloat16")):
        rows = pick(table, src, preset, dtype)
        assert [k.predicted_s for k in moe_kernels(trt, rows)] == \
            [k.predicted_s for k in moe_kernels(gen, rows)]


def test_block_fp8_moe_kernel_is_checked():
    with pytest.raises(ConfigError, match="block_fp8_moe_kernel"):
        CostModelConfig(block_fp8_moe_kernel="cutlass")


def _ratio_by_class(cfg: CostModelConfig, distribution: str) -> dict[tuple[str, str], float]:
    """Median predicted / measured per (token class, EP class) of the table's rows."""
    groups: dict[tuple[str, str], list[float]] = {}
    for k in moe_kernels(cfg, distribution=distribution):
        tc = "<=16" if k.tokens <= 16 else ("<=1024" if k.tokens <= 1024 else ">1024")
        ec = "ep1" if k.moe_ep == 1 else ("ep2-4" if k.moe_ep <= 4 else "ep8+")
        groups.setdefault((tc, ec), []).append(math.log(k.predicted_s / k.measured_s))
    return {key: math.exp(statistics.median(v)) for key, v in groups.items()}


def test_power_law_routing_prices_the_power_law_kernels():
    """The table's power_law_1.2 rows (TensorRT-LLM's routed-expert block under
    aiconfigurator's power-law expert load): with the shipped moe_routing_alpha (1.2) every
    (token, EP) class is within the balanced rows' own range of error (0.8–1.4 of measured);
    with uniform routing alone, EP >= 8 above 1,024 tokens is priced at under 0.6 of its
    measured time (0.41 when written)."""
    shipped = CostModelConfig.for_engine("trtllm")
    assert shipped.moe_routing_alpha == 1.2
    skewed = _ratio_by_class(shipped, "power_law_1.2")
    uniform = _ratio_by_class(dataclasses.replace(shipped, moe_routing_alpha=None),
                              "power_law_1.2")
    assert all(0.8 < r < 1.4 for r in skewed.values()), skewed
    assert uniform[(">1024", "ep8+")] < 0.6 < skewed[(">1024", "ep8+")]
    # Balanced rows are priced with balanced routing whatever the exponent.
    assert _ratio_by_class(shipped, "balanced") == _ratio_by_class(
        dataclasses.replace(shipped, moe_routing_alpha=None), "balanced")


# ---------------------------------------------------------------- W4A16 experts on Hopper
@pytest.mark.slow
@pytest.mark.parametrize("preset", ["h100-sxm", "h200"])
def test_shipped_w4a16_expert_efficiency_is_the_fit_on_the_shipped_table(preset):
    """Re-running ``fit_w4a16_expert_efficiency`` gives the device file's value (~4 s): the
    table's W4A16 MXFP4 blocks at 1,024+ tokens run at 0.6–0.65 of the 16-bit price, and
    the fit halves the error there."""
    value, loss_at_1, loss = fit_w4a16_expert_efficiency(preset)
    assert value == pytest.approx(load_device(preset).w4a16_expert_flops_efficiency)
    assert loss < 0.6 * loss_at_1


def test_w4a16_efficiency_slows_the_measured_blocks_toward_the_table():
    """At the shipped efficiency the compute-bound rows (8,192 tokens, EP ≤ 8) on H200 are
    priced nearer their measured times than at 1, and slower: the factor only lowers a
    rate."""
    def big(value):
        return {(k.moe_ep, k.tokens): k for k in w4a16_expert_kernels("h200", value)
                if k.tokens == 8192 and k.moe_ep <= 8}
    at_1, shipped = big(1.0), big(None)
    assert at_1 and at_1.keys() == shipped.keys()
    for key, k in shipped.items():
        assert k.predicted_s > at_1[key].predicted_s
    err = [abs(math.log(k.predicted_s / k.measured_s)) for k in shipped.values()]
    err_1 = [abs(math.log(k.predicted_s / k.measured_s)) for k in at_1.values()]
    assert statistics.median(err) < statistics.median(err_1)


def test_w4a16_fit_refuses_a_chip_with_fp4_math():
    with pytest.raises(ConfigError, match="FP4 math"):
        fit_w4a16_expert_efficiency("b200")


def test_w4a16_kernels_take_aliases_and_refuse_bad_efficiencies(tmp_path):
    """A preset alias or another spelling reads the preset's rows (``h100`` is ``h100-sxm``);
    an efficiency outside (0, 1], a missing table folder and an empty grid are refused."""
    assert len(w4a16_expert_kernels("H200")) == len(w4a16_expert_kernels("h200")) > 0
    assert len(w4a16_expert_kernels("h100")) == len(w4a16_expert_kernels("h100-sxm")) > 0
    for bad in (0.0, -0.5, 1.5, float("nan")):
        with pytest.raises(ConfigError, match=r"must be in \(0, 1\]"):
            w4a16_expert_kernels("h200", bad)
    with pytest.raises(ConfigError, match="not a directory"):
        w4a16_expert_kernels("h200", folder=tmp_path / "absent")
    with pytest.raises(ConfigError, match="empty grid"):
        fit_w4a16_expert_efficiency("h200", grid=())


def test_the_blackwell_moe_rate_prices_routed_experts_on_sm100_alone():
    """``fp8_block_mma_efficiency`` is TensorRT-LLM-gen's fused-MoE rate: it moves the routed
    experts of a block-scaled FP8 MoE on B200 and nothing else: not a dense block-scaled
    checkpoint (Qwen3-32B-FP8), not the dense or shared-expert GEMMs of DeepSeek-V3, not
    chips with FP4 math that have no such kernels (MI355X, RTX PRO 6000's SM 12.0), and not
    experts behind a DeepEP dispatch."""
    from learn_to_shard.api import make_cost_model, make_workload
    from learn_to_shard.parallel.ops import MEGATRON_DIMS
    from learn_to_shard.parallel.strategy import Strategy

    def ops(model: str, cluster: str, tp: int, eff: float,
            a2a: str | None = None) -> dict[str, float]:
        cfg = dataclasses.replace(CostModelConfig.for_engine("vllm"),
                                  fp8_block_mma_efficiency=eff, moe_a2a_kernel=a2a)
        cm = make_cost_model(model, cluster, make_workload("prefill", isl=4096, dtype="fp8"),
                             cfg)
        return cm.evaluate(Strategy(tp=tp, ep=1, pp=1, dp=1, batch=4,
                                    dims=MEGATRON_DIMS)).op_time_s

    for model, cluster, tp in (("qwen3-32b-fp8", "b200:1", 1), ("deepseek-v3", "mi355x:8", 8),
                               ("qwen3-32b-fp8", "rtx-pro-6000:1", 1)):
        assert ops(model, cluster, tp, 0.25) == ops(model, cluster, tp, 1.0), (model, cluster)
    # Under a DeepEP dispatch the engines run grouped expert GEMMs, not the fused kernels.
    assert ops("deepseek-v3", "b200:8", 8, 0.25, "deepep_normal") == \
        ops("deepseek-v3", "b200:8", 8, 1.0, "deepep_normal")
    slow, fast = ops("deepseek-v3", "b200:8", 8, 0.25), ops("deepseek-v3", "b200:8", 8, 1.0)
    for op in slow:
        if op in ("expert_up", "expert_down"):
            assert slow[op] > 1.2 * fast[op], op
        else:
            assert slow[op] == fast[op], op


def test_two_batch_overlap_is_priced_only_where_the_engine_runs_it():
    """vLLM's --enable-dbo needs a DeepEP / NIXL all-to-all (so EP > 1), SGLang's two-batch
    overlap an all-to-all backend and EP: at EP 1 neither profile prices the overlap, and
    SGLang without --moe-a2a prices none at all; without an engine it is priced anywhere."""
    from learn_to_shard.api import make_cost_model, make_workload
    from learn_to_shard.parallel.ops import MEGATRON_DIMS
    from learn_to_shard.parallel.strategy import Strategy
    wl = make_workload("serve", isl=1024, osl=1024, dtype="fp8")

    def tpot(engine: str | None, tbo: bool, ep: int, a2a: str | None = None) -> float:
        base = CostModelConfig.for_engine(engine) if engine else CostModelConfig()
        cfg = dataclasses.replace(base, two_batch_overlap=tbo, moe_a2a_kernel=a2a)
        cm = make_cost_model("deepseek-v3", "h200:8", wl, cfg)
        return cm.evaluate(Strategy(tp=1, ep=ep, pp=1, dp=8, batch=256,
                                    dims=MEGATRON_DIMS)).tpot_s

    assert tpot("vllm", True, 1) == tpot("vllm", False, 1)
    assert tpot("vllm", True, 8) < tpot("vllm", False, 8)
    assert tpot("sglang", True, 8) == tpot("sglang", False, 8)
    assert tpot("sglang", True, 8, "deepep_normal") < tpot("sglang", False, 8, "deepep_normal")
    assert tpot(None, True, 1) < tpot(None, False, 1)
