"""DeepSeek-V3's MLA attention module against TensorRT-LLM's measured kernels
(``data/silicon/mla.csv``): ``fidelity.kernels.mla_kernels`` prices each measured module through
the cost model; ``fit_mla_kernels`` fits the module's fixed cost
(``CostModelConfig.mla_module_overhead_s``) and its latent-KV stream's fraction of peak HBM
bandwidth (``mla_attention_hbm_efficiency``) on the decode rows of H100/H200, B200's held
out."""

from __future__ import annotations

import csv
import dataclasses
import statistics
from pathlib import Path

import pytest

from learn_to_shard.cost.config import CostModelConfig
from learn_to_shard.fidelity.kernels import fit_mla_kernels, mla_kernels

_COLUMNS = ("system", "preset", "source", "module", "kv_dtype", "gemm_dtype", "heads", "batch",
            "length", "latency_s")


def _write(folder: Path, rows: list[dict[str, str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "mla.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return folder


def test_fit_recovers_the_module_cost_a_synthetic_table_was_made_with(tmp_path):
    """Module times made by the model at a 20 µs module cost and 0.6 of peak HBM bandwidth are
    fitted back to both with zero loss, starting from neither (H200 rows fitted, B200 rows
    held out)."""
    rows = [dict(system="x", preset=dev, source="synthetic", module="generation",
                 kv_dtype="bfloat16", gemm_dtype="fp8_block", heads=str(h), batch=str(b),
                 length=str(n), latency_s="1")
            for dev in ("h200", "b200") for h in (16, 128) for b in (1, 8, 64, 256)
            for n in (1024, 4096)]
    truth = CostModelConfig.for_engine("trtllm", mla_module_overhead_s=20e-6,
                                       mla_attention_hbm_efficiency=0.6)
    made = mla_kernels(truth, {"mla.csv": rows})
    assert len(made) == len(rows)
    for r, k in zip(rows, made, strict=True):
        r["latency_s"] = repr(k.predicted_s)
    folder = _write(tmp_path / "silicon", rows)
    values, cal, held = fit_mla_kernels(
        dataclasses.replace(truth, mla_module_overhead_s=0.0, mla_attention_hbm_efficiency=1.0),
        folder)
    assert values["mla_module_overhead_s"] == pytest.approx(20e-6)
    assert values["mla_attention_hbm_efficiency"] == pytest.approx(0.6)
    assert cal == pytest.approx(0.0, abs=1e-9) and held == pytest.approx(0.0, abs=1e-9)


def test_the_module_cost_brings_small_batch_decode_within_25_percent():
    """On the shipped table: without the module cost the model prices the batch-1/8 decode
    modules 31–51% below their measured time (median per device); with the shipped 40 µs every
    device's median is within 25%, the held-out B200 rows included."""
    without = mla_kernels(CostModelConfig.for_engine("trtllm", mla_module_overhead_s=0.0,
                                                     mla_attention_hbm_efficiency=None))
    shipped = mla_kernels()
    for dev in ("h100-sxm", "h200", "b200"):
        def med(ks, dev=dev):
            return statistics.median(k.predicted_s / k.measured_s - 1 for k in ks
                                     if k.preset == dev and k.split != "other"
                                     and k.batch <= 8)
        assert med(without) < -0.25, dev
        assert abs(med(shipped)) < 0.25, dev


def test_the_kv_stream_brings_large_batch_decode_within_25_percent():
    """At batch 64 and 256 the latent-KV stream dominates: at the GQA attention's end-to-end
    factor (0.25 of peak HBM bandwidth) the model prices these modules 64–134% too slow
    (median per device); at the fitted 0.9 every device's median is within 25%, B200's (held
    out) included."""
    gqa = mla_kernels(CostModelConfig.for_engine("trtllm", mla_attention_hbm_efficiency=None))
    shipped = mla_kernels()
    for dev in ("h100-sxm", "h200", "b200"):
        def med(ks, dev=dev):
            return statistics.median(k.predicted_s / k.measured_s - 1 for k in ks
                                     if k.preset == dev and k.split != "other"
                                     and k.batch >= 64)
        assert med(gqa) > 0.5, dev
        assert abs(med(shipped)) < 0.25, dev


def test_rows_of_gemm_dtypes_the_model_cannot_price_are_left_out():
    """An NVFP4-GEMM row (B200 in the shipped table) is not priced as a BF16 module: the model
    has no 4-bit weights, so the row is skipped, as ``moe_kernels`` skips its 4-bit rows."""
    rows = [dict(system="x", preset="b200", source="synthetic", module="generation",
                 kv_dtype="fp8", gemm_dtype=g, heads="16", batch="1", length="1024",
                 latency_s="1e-4") for g in ("bfloat16", "fp8_block", "nvfp4")]
    ks = mla_kernels(CostModelConfig.for_engine("trtllm"), {"mla.csv": rows})
    assert [k.gemm_dtype for k in ks] == ["bfloat16", "fp8_block"]
