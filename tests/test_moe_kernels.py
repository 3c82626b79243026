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
from learn_to_shard.fidelity.kernels import (
    MOE_CALIBRATION_MODELS,
    fit_fp8_block_scale,
    fit_moe_kernels,
    moe_kernel_report,
    moe_kernels,
    silicon_dir,
)

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
    """The same report with the block's fixed cost and the narrow-GEMM curve off."""
    cfg = CostModelConfig.for_engine("trtllm", moe_block_overhead_s=0.0, expert_shape_half=0.0)
    return {(s.split, s.preset, s.tokens): s for s in moe_kernel_report(cfg)}


#: The one (split, device, token class) group whose median error is outside 30%: H200's
#: calibration rows above 1,024 tokens, +30%. Its BF16 and per-tensor FP8 rows are priced too
#: slow (+71% and +24%); before block-scaled FP8 was priced (``fp8_block_scale_efficiency``)
#: its block-scaled rows, priced too fast, pulled the group's median to +13% while its median
#: |error| was 38% (now 31%). A defect of the expert GEMMs' compute-bound pricing, recorded here.
_KNOWN_OUTSIDE = ("calibration", "h200", ">1024")


def test_block_cost_and_curve_bring_the_groups_within_30_percent(shipped_report,
                                                                 report_without):
    """On the shipped table, calibration and held-out shapes alike: without the two terms the
    model prices <= 16-token blocks at about half their measured time; with them the median
    error of every (split, device, token class) group but :data:`_KNOWN_OUTSIDE` is within
    30% (that one: the strict xfail below)."""
    assert report_without.keys() == shipped_report.keys() and len(shipped_report) == 18
    for key, s in shipped_report.items():
        if key[2] == "<=16":
            assert report_without[key].median_error < -0.4, key
        if key != _KNOWN_OUTSIDE:
            assert abs(s.median_error) < 0.3, key


@pytest.mark.xfail(strict=True, reason="H200 calibration MoE rows above 1,024 tokens: median "
                   "error +30% (BF16 rows +71%, per-tensor FP8 +24%); the expert GEMMs' "
                   "compute-bound rate is priced too slow")
def test_known_outside_group_is_within_30_percent(shipped_report):
    """The same 30% bound on the group left out above."""
    assert abs(shipped_report[_KNOWN_OUTSIDE].median_error) < 0.3


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
    assert cal == pytest.approx(0.139, abs=0.005) and held == pytest.approx(0.142, abs=0.005)


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
    without the block cost, the curve and the block-scaled FP8 rate (the model before them)
    and 0.13 / 0.12 shipped."""
    def losses(cfg: CostModelConfig | None) -> tuple[float, float]:
        ks = moe_kernels(cfg)
        return tuple(statistics.median(abs(math.log(k.predicted_s / k.measured_s))
                                       for k in ks if (k.split == "calibration") == cal)
                     for cal in (True, False))

    before = losses(CostModelConfig.for_engine("trtllm", moe_block_overhead_s=0.0,
                                               expert_shape_half=0.0,
                                               fp8_block_scale_efficiency=1.0))
    assert before == pytest.approx((0.58, 0.60), abs=0.005)
    assert losses(None) == pytest.approx((0.13, 0.12), abs=0.005)


def test_report_lists_token_classes_smallest_first(tmp_path):
    """``moe_kernel_report`` (what ``l2s validate --fit-silicon`` prints) orders each
    device's rows by token class, ``<=16``, ``<=1024``, ``>1024`` (not as strings sort)."""
    rows = [dict(r, tokens=str(t)) for r in _rows((7168, 2048, 8, 256))[:2]
            for t in (8192, 1024, 1)]
    folder = _write(tmp_path / "silicon", rows)
    got = [(s.split, s.preset, s.tokens) for s in moe_kernel_report(folder=folder)]
    assert got == [("calibration", "h200", t) for t in ("<=16", "<=1024", ">1024")]
