"""The fidelity layer's calibration data file and what the cost model reads from it."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from learn_to_shard.cli import app
from learn_to_shard.cost import CostModel, CostModelConfig
from learn_to_shard.cost.config import ENGINE_PROFILES, factors_path, load_fitted_factors
from learn_to_shard.errors import ConfigError
from learn_to_shard.fidelity.fit import CALIBRATIONS, CalibrationResult, write_factors
from learn_to_shard.fidelity.measurements import load_table
from learn_to_shard.hardware import parse_cluster
from learn_to_shard.model import load_model
from learn_to_shard.workload import DType, Phase, Workload

#: The factors as they were typed into cost/config.py before they became data (commit
#: 08a3b6b): the file must hold exactly these, so every estimate stays the same.
LITERALS = {
    "defaults": {"flops_efficiency": 0.70, "attention_hbm_efficiency": 0.25},
    "splitwise-dgx-h100": {"flops_efficiency": 0.80, "attention_flops_efficiency": 0.02,
                           "scale_up_latency_s": 1.5e-5, "host_step_overhead_s": 8e-3,
                           "host_seq_overhead_s": 3e-4, "host_prefill_overhead_s": 1e-2},
    "splitwise-dgx-a100": {"flops_efficiency": 0.70, "attention_flops_efficiency": 0.05,
                           "scale_up_latency_s": 3e-5, "host_step_overhead_s": 1e-3,
                           "host_seq_overhead_s": 4e-4, "host_prefill_overhead_s": 1e-2},
}


def test_loaded_factors_are_the_literals_they_replace():
    fits = load_fitted_factors().fits
    assert {k: v.values for k, v in fits.items()
            if v.table == "measurements.csv"} == LITERALS   # serving fits: test_serving_fit
    assert CostModelConfig().flops_efficiency == 0.70
    assert CostModelConfig().attention_hbm_efficiency == 0.25
    for name in ("splitwise-dgx-h100", "splitwise-dgx-a100"):
        prof = {k: v for k, v in ENGINE_PROFILES[name].items() if not k.startswith("_")}
        assert prof == LITERALS[name]


@pytest.mark.parametrize("name,cluster,phase,engine", [
    ("llama-3.1-70b", "h100-sxm:16", Phase.SERVE, None),
    ("qwen3-30b-a3b", "h200:8", Phase.DECODE, "splitwise-dgx-h100"),
    ("llama-3.1-8b", "a100-80gb:8", Phase.PREFILL, "splitwise-dgx-a100"),
])
def test_evaluate_is_identical_with_the_file_and_with_the_literals(name, cluster, phase,
                                                                   engine):
    # the Splitwise profiles hold only fitted fields (and _source)
    literal = CostModelConfig(**(LITERALS["defaults"] | (LITERALS[engine] if engine else {})))
    loaded = CostModelConfig.for_engine(engine)
    assert literal == loaded
    wl = Workload(phase, isl=2048, osl=256 if phase is Phase.SERVE else 0,
                  weight_dtype=DType.FP8)
    m, cl = load_model(name), parse_cluster(cluster)
    a = CostModel(m, cl, wl, config=loaded)
    b = CostModel(m, cl, wl, config=literal)
    acts = a.space.sample(np.random.default_rng(5), 64)
    x, y = a.evaluate_many(acts), b.evaluate_many(acts)
    for f in ("tokens_per_s_per_device", "tpot_s", "ttft_s", "peak_memory_bytes",
              "max_batch", "violation_bits"):
        np.testing.assert_array_equal(getattr(x, f), getattr(y, f))


def test_factors_file_records_its_provenance():
    rows = load_table()
    for name, fit in load_fitted_factors().fits.items():
        if fit.table == "serving_measurements.csv":
            continue                # the serving fits: tests/test_serving_fit.py
        spec = next(s for s in CALIBRATIONS if s.name == name)
        assert fit.engine == spec.engine and set(fit.values) == set(spec.grid)
        assert fit.rows == [r.id for r in rows if r.calibration and r.engine == spec.engine]
        assert fit.table == "measurements.csv"
        assert math.isfinite(fit.loss) and 0 < fit.loss < 0.1
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", fit.date)
        assert re.fullmatch(r"[0-9a-f]{40}", fit.commit)


def test_write_factors_round_trips(tmp_path):
    spec = CALIBRATIONS[0]
    res = CalibrationResult(spec, {"flops_efficiency": 0.6, "attention_hbm_efficiency": 0.3},
                            0.05, ("a", "b"))
    out = write_factors([res], tmp_path / "f.json", table="mine.csv")
    fit = load_fitted_factors(out).fits["defaults"]
    assert fit.values == res.values and fit.rows == ["a", "b"] and fit.table == "mine.csv"
    assert fit.loss == 0.05 and fit.commit


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["fits"]["defaults"].pop("commit"), "commit"),
    (lambda d: d["fits"]["defaults"]["values"].update(flops_efficiency="0.7"), "values"),
    (lambda d: d.update(extra=1), "extra"),
])
def test_bad_factors_file_is_a_one_line_error(tmp_path, mutate, needle):
    doc = json.loads(factors_path().read_text())
    mutate(doc)
    bad = tmp_path / "f.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=needle) as exc:
        load_fitted_factors(bad)
    assert str(bad) in str(exc.value) and "\n" not in str(exc.value)


def test_write_factors_needs_fit(tmp_path):
    res = CliRunner().invoke(app, ["validate", "--write-factors", str(tmp_path / "f.json")])
    assert res.exit_code == 2 and "--write-factors" in res.stderr


def test_write_factors_may_not_overwrite_another_input_or_output(tmp_path):
    rep = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["validate", "--fit", "--report", str(rep),
                                   "--write-factors", str(rep)])
    assert res.exit_code == 2 and "also --report" in res.stderr
    assert not rep.exists()
