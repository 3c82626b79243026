"""Property-based fuzzing (hypothesis) of every input the planner reads, and of the cost model.

Properties:

* **No traceback**: whatever the input (JSON text, config.json dicts, device and cluster files,
  measurement tables, durations, command-line flag combinations), the only exceptions that
  escape are the project's own (:class:`~learn_to_shard.errors.PlannerError` and subclasses),
  and the CLI exits 0, 1 or 2 with one ``error:`` line for bad input.
* **Estimates are numbers**: ``CostModel.evaluate_many`` over random actions on random (valid)
  problems gives a finite, non-negative objective and memory for every row, and finite,
  non-negative times and throughput for every feasible row.
* **Feasible fits**: a strategy reported feasible needs no more memory than the usable budget.
* **Monotone**: more link/HBM bandwidth never makes a strategy slower or infeasible; more
  device memory never makes a feasible strategy infeasible or slower.

The default run checks > 10,000 generated inputs in 30-40 s on a loaded 2-core machine
(deterministic: ``derandomize=True``). The long run (``@pytest.mark.slow``, ~10-15 min there)
draws 10x more:

    .venv/bin/python -m pytest -q -m slow tests/test_fuzz.py
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from learn_to_shard.api import make_workload
from learn_to_shard.cli import MAX_BUDGET, app
from learn_to_shard.cost.config import ENGINE_PROFILES, CostModelConfig
from learn_to_shard.cost.model import CostModel
from learn_to_shard.errors import PlannerError
from learn_to_shard.fidelity.measurements import default_table_path, load_table
from learn_to_shard.fidelity.stats import validate
from learn_to_shard.hardware.presets import (
    _RANGES,
    load_device,
    load_device_file,
    parse_cluster,
)
from learn_to_shard.hardware.spec import ClusterSpec, DeviceSpec
from learn_to_shard.jsonio import loads_strict
from learn_to_shard.model.hf_config import _shipped_files, load_model
from learn_to_shard.units import parse_duration_s

#: Multiplier of every ``max_examples`` below: 1 in the default run, 10 in the slow run
#: (the measurement-table property, ~0.1 s an example, gets a quarter of that).
SCALE = {"default": 1, "slow": 10}
_counter = itertools.count()
#: Examples each property actually ran (hypothesis stops early on an exhausted space).
RAN: dict[str, int] = {}


def _ran(name: str, k: int = 1) -> None:
    """Count ``k`` inputs checked by property ``name``."""
    RAN[name] = RAN.get(name, 0) + k


def _expect(name: str, n: int) -> None:
    """Assert that property ``name`` checked at least ``n`` inputs."""
    assert RAN.get(name, 0) >= n, (name, RAN.get(name, 0), n)


def _batch(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """1-8 inputs per hypothesis example: the engine's per-example cost (1-4 ms on a loaded
    2-core machine) dwarfs a parser's, so cheap properties check several inputs per example."""
    return st.lists(strategy, min_size=1, max_size=8)


def _cfg(n: int, scale: int) -> settings:
    """Deterministic hypothesis settings for ``n * scale`` examples, no deadline."""
    return settings(max_examples=n * scale, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _file(workdir: Path, text: str, suffix: str = ".json") -> Path:
    path = workdir / f"f{next(_counter)}{suffix}"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path


# ------------------------------------------------------------------ value strategies
# Pools of edge values drawn with ``sampled_from`` (cheap) rather than ``st.text`` or
# ``st.recursive`` (several ms per example on a loaded 2-core machine).
_EDGE_NUMBERS = [0, 1, -1, 2, 3, 7, 8, 64, 1000, 2**31, 2**40, 2**40 + 1, 2**63, 2**64 + 1,
                 10**30, 0.0, -0.0, 0.5, 1.5, 1e-300, 5e-324, 1e300, 1.7e308, 1e-9, 1e18,
                 -1e6, 3.0]
_EDGE_STRINGS = ["", " ", "x", "128", "1e3", "[/]", "[bold]x", "\x00", "llama", "mixtral",
                 "bf16", "fp8", "h100-sxm", "é", "\u202e", "a" * 300, "null", "None"]
_EDGE_VALUES: list[Any] = [None, True, False, *_EDGE_NUMBERS, *_EDGE_STRINGS, [], [1], [0, 0],
                           [1, 2, 3], ["a"], {}, {"a": 1}, {"model_type": "llama"}, [[[]]],
                           [None, None], {"": None}, [1] * 100, [2**70], {"x": [1e-300]}]
_weird_numbers = st.one_of(st.sampled_from(_EDGE_NUMBERS), st.integers(-10**7, 10**7),
                           st.floats(-1e7, 1e7))
_json_scalars = st.sampled_from([None, True, False, *_EDGE_NUMBERS, *_EDGE_STRINGS])
_json_values = st.one_of(st.sampled_from(_EDGE_VALUES), st.integers(-10**7, 10**7))
_FRAGMENTS = ["{", "}", "[", "]", '"a"', ":", ",", "1", "-1", "1e999", "NaN", "Infinity",
              "true", "null", '"\\ud800"', "-", ".", "e", "\ufeff", " ", '"x"',
              '"model_type"', "0", "\\", '"', "\n", "00", "1.", "\x00", "9" * 5000]


def _mutate(base: dict[str, Any], keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """``base`` with 1-4 of ``keys`` dropped, replaced by an edge value, or scaled by one."""
    text = json.dumps(base)

    def apply(edits: list[tuple[str, int, Any]]) -> dict[str, Any]:
        out = json.loads(text)
        for key, how, value in edits:
            old = out.get(key)
            if how == 0:
                out.pop(key, None)
            elif how == 1 or not isinstance(old, (int, float)) or isinstance(old, bool) \
                    or not isinstance(value, (int, float)) or isinstance(value, bool):
                out[key] = value
            else:
                scaled = old * value
                out[key] = int(scaled) if isinstance(old, int) and math.isfinite(scaled) \
                    else scaled
        return out
    edit = st.tuples(st.sampled_from(keys), st.integers(0, 2), _json_values)
    return st.lists(edit, min_size=1, max_size=4).map(apply)


def _dumps(data: Any) -> str:
    """JSON text of ``data``; non-finite floats as 1e999 (which the reader must refuse)."""
    return json.dumps(data, allow_nan=True).replace("Infinity", "1e999").replace("NaN", "1e999")


# ------------------------------------------------------------------ raw JSON text
def _check_json_text(scale: int) -> None:
    @_cfg(600, scale)
    @given(_batch(st.one_of(st.lists(st.sampled_from(_FRAGMENTS), max_size=10).map("".join),
                            _json_values.map(_dumps),
                            st.integers(1, 3000).map(lambda d: "[" * d + "]" * d),
                            st.integers(1, 3000).map(lambda d: '{"a":' * d + "1" + "}" * d))))
    def run(texts: list[str]) -> None:
        _ran("json_text", len(texts))
        for text in texts:
            try:
                loads_strict(text, "x.json")
            except PlannerError as exc:
                assert "x.json" in str(exc) and "\n" not in str(exc)
    run()
    _expect("json_text", 600 * scale)


def test_fuzz_json_text() -> None:
    _check_json_text(SCALE["default"])


# ------------------------------------------------------------------ config.json
_CONFIGS = ["llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v2-lite", "gpt-oss-20b",
            "llama-4-scout", "qwen3-32b"]


def _config_dicts() -> st.SearchStrategy[dict[str, Any]]:
    """Shipped configs with a few fields (top level or one level down) mutated."""
    def one(name: str) -> st.SearchStrategy[dict[str, Any]]:
        base = json.loads(_shipped_files()[name].read_text())
        keys = list(base)
        for sub in ("text_config", "quantization_config", "rope_scaling"):
            if isinstance(base.get(sub), dict):
                keys += list(base[sub])
        return _mutate(base, keys)
    return st.one_of(*[one(name) for name in _CONFIGS])


def _check_config(scale: int, workdir: Path) -> None:
    @_cfg(500, scale)
    @given(_batch(_config_dicts()))
    def run(configs: list[dict[str, Any]]) -> None:
        _ran("config", len(configs))
        for data in configs:
            path = _file(workdir, _dumps(data))
            try:
                spec = load_model(str(path))
            except PlannerError as exc:
                assert "\n" not in str(exc)
                continue
            assert spec.hidden_size > 0 and spec.layers
    run()
    _expect("config", 500 * scale)


def test_fuzz_config_json(workdir: Path) -> None:
    _check_config(SCALE["default"], workdir)


# ------------------------------------------------------------------ device and cluster files
_DEVICE_BASE = {
    "name": "x", "display_name": "X", "peak_bf16_flops_per_s": 1e15,
    "peak_fp8_flops_per_s": 2e15, "hbm_bytes": 80e9, "hbm_bytes_per_s": 3e12,
    "scale_up_domain": 8, "scale_up_bytes_per_s": 4.5e11, "scale_out_bytes_per_s": 5e10,
    "scale_up_latency_s": 2e-6, "scale_out_latency_s": 5e-6,
}


def _cluster_texts() -> st.SearchStrategy[str]:
    dev = _mutate(_DEVICE_BASE, [*_DEVICE_BASE, "sources", "notes", "bogus"])
    cluster = st.fixed_dictionaries({
        "device": st.one_of(st.sampled_from(["h100-sxm", "H100", "b200", "nope", ""]), dev,
                            _json_scalars),
        "num_devices": st.one_of(st.integers(-2, 2**21), _json_scalars),
    }, optional={
        "overrides": st.one_of(dev.map(lambda d: {k: d[k] for k in list(d)[:3]}),
                               _json_values),
        "name": st.one_of(st.sampled_from(["[/]", "a[bold]", "[link=x]y"]), _json_scalars),
        "notes": _json_scalars,
        "extra": _json_scalars,
    })
    return st.one_of(cluster.map(_dumps), _json_values.map(_dumps))


def _check_cluster(scale: int, workdir: Path) -> None:
    @_cfg(500, scale)
    @given(_batch(st.tuples(_cluster_texts(), st.booleans())))
    def run(files: list[tuple[str, bool]]) -> None:
        _ran("cluster", len(files))
        for text, as_device in files:
            path = _file(workdir, text)
            try:
                d = load_device_file(path) if as_device else parse_cluster(str(path)).device
            except PlannerError as exc:
                assert "\n" not in str(exc)
                continue
            for field, (low, high) in _RANGES.items():
                value = getattr(d, field)
                assert value is None or low <= value <= high, (field, value)
    run()
    _expect("cluster", 500 * scale)


def test_fuzz_cluster_and_device_files(workdir: Path) -> None:
    _check_cluster(SCALE["default"], workdir)


def _check_cluster_strings(scale: int) -> None:
    @_cfg(400, scale)
    @given(_batch(st.one_of(
        st.lists(st.sampled_from([*_EDGE_STRINGS, ":", "8", "h100", "-", "/", ".json"]),
                 max_size=4).map("".join),
        st.tuples(st.sampled_from(["h100-sxm", "h100", "A100", "b200", "mi300x", "zz", ""]),
                  st.one_of(st.integers(-5, 2**22).map(str), st.sampled_from(_EDGE_STRINGS))).map(
            lambda t: f"{t[0]}:{t[1]}"))))
    def run(texts: list[str]) -> None:
        _ran("cluster_strings", len(texts))
        for text in texts:
            try:
                c = parse_cluster(text)
            except PlannerError as exc:
                assert "\n" not in str(exc)
                continue
            assert c.num_devices >= 1
    run()
    _expect("cluster_strings", 400 * scale)


def test_fuzz_cluster_strings() -> None:
    _check_cluster_strings(SCALE["default"])


# ------------------------------------------------------------------ durations and workloads
def _check_workloads(scale: int) -> None:
    dur = st.one_of(st.none(), st.sampled_from(_EDGE_STRINGS),
                    st.tuples(_weird_numbers, st.sampled_from(["", "s", "ms", "us", "ns", "h"]))
                    .map(lambda t: f"{t[0]}{t[1]}"))
    size = st.one_of(st.none(), st.integers(-3, 2**40))

    @_cfg(500, scale)
    @given(_batch(st.tuples(st.sampled_from(["decode", "prefill", "serve", "train", ""]), size,
                            size, size, dur, dur,
                            st.sampled_from(["bf16", "fp8", "fp16", "int4", ""]),
                            st.sampled_from([None, "bf16", "fp8", "x"]))))
    def run(cases: list[tuple[Any, ...]]) -> None:
        _ran("workloads", len(cases))
        for phase, isl, osl, context, ttft, tpot, dtype, kv in cases:
            try:
                make_workload(phase, isl=isl, osl=osl, context=context, dtype=dtype,
                              kv_dtype=kv,
                              ttft_slo_s=None if ttft is None
                              else parse_duration_s(ttft, field="--ttft-slo"),
                              tpot_slo_s=None if tpot is None
                              else parse_duration_s(tpot, field="--tpot-slo"))
            except PlannerError as exc:
                assert "\n" not in str(exc)
    run()
    _expect("workloads", 500 * scale)


def test_fuzz_workloads_and_durations() -> None:
    _check_workloads(SCALE["default"])


# ------------------------------------------------------------------ measurement tables
def _table_rows() -> tuple[list[str], list[dict[str, str]]]:
    text = Path(default_table_path()).read_text(encoding="utf-8")
    reader = csv.DictReader(io.StringIO(text))
    rows = list(reader)
    # One row of each metric (throughput, latencies, collective), a few engines.
    picked: dict[str, dict[str, str]] = {}
    for r in rows:
        picked.setdefault(r["metric"], r)
    return list(reader.fieldnames or []), list(picked.values())


_HEADER, _ROWS = _table_rows()
_cell = st.one_of(st.sampled_from(_EDGE_STRINGS), st.sampled_from(
    ["0", "-1", "max", "1e400", "nan", "3", "7", "1024", "2.5", "", "fp8", "bf16", "h100-sxm",
     "llama-3.1-8b", "deepseek-v3", "trtllm", "vllm", "1", "64"]),
    _weird_numbers.map(str))

#: Tracebacks the fuzzer has found inside the validation code that are not fixed yet (a
#: message fragment each); the table fuzz discards inputs that hit one (``assume``), so any
#: other traceback still fails it. Empty: the one found (an EP degree that does not divide the
#: experts) is now reported "not expressible" (``test_fuzz_case_validate_ep_not_candidate``).
_VALIDATE_KNOWN: dict[str, str] = {}


def _table_text(edits: list[tuple[int, str, str]], bom: bool, drop: str | None) -> str:
    rows = [dict(r) for r in _ROWS]
    for i, col, value in edits:
        rows[i % len(rows)][col] = value
    header = [h for h in _HEADER if h != drop]
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=header, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return ("\ufeff" if bom else "") + out.getvalue()


def _check_tables(scale: int, workdir: Path) -> None:
    @_cfg(150, scale)
    @given(st.lists(st.tuples(st.integers(0, 10), st.sampled_from(_HEADER), _cell), max_size=3),
           st.integers(0, 9).map(lambda k: k == 9),
           st.integers(0, 9).flatmap(lambda k: st.sampled_from(_HEADER) if k == 9
                                     else st.none()))
    def run(edits: list[tuple[int, str, str]], bom: bool, drop: str | None) -> None:
        _ran("tables")
        path = _file(workdir, _table_text(edits, bom and drop is None, drop), ".csv")
        try:
            rows = load_table(path)
            report = validate(rows, table=path, silicon=False)
        except PlannerError as exc:
            assert "\n" not in str(exc)
            return
        except ValueError as exc:
            assume(not any(k in str(exc) for k in _VALIDATE_KNOWN.values()))
            raise
        for r in report.results:
            assert r.predicted is None or (math.isfinite(r.predicted) and r.predicted >= 0)
    run()
    _expect("tables", 150 * scale)


def test_fuzz_validate_tables(workdir: Path) -> None:
    _check_tables(SCALE["default"], workdir)


def test_fuzz_case_validate_ep_not_candidate(workdir: Path) -> None:
    """The case the fuzzer found: a row whose EP degree does not divide the experts is
    reported "not expressible" with the reason, and the rest of the table is predicted."""
    path = _file(workdir, _table_text([(0, "ep", "128")], False, None), ".csv")
    report = validate(load_table(path), table=path, silicon=False)
    first = report.results[0]
    assert first.predicted is None and first.status == "not expressible"
    assert "ep" in (first.reason or "").lower()
    assert any(r.predicted is not None for r in report.results[1:])


# ------------------------------------------------------------------ the cost model
_MODELS = ["llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v2-lite", "gpt-oss-20b"]


def _log_uniform(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(math.log10(low), math.log10(high)).map(lambda e: float(10.0 ** e)).map(
        lambda v: min(max(v, low), high))


@st.composite
def _devices(draw: st.DrawFn) -> DeviceSpec:
    """A device anywhere in the accepted ranges (half the time near a real H100)."""
    if draw(st.booleans()):
        base = load_device("h100-sxm")
        fields = {f: getattr(base, f) for f in _RANGES}
        fields["scale_up_domain"] = base.scale_up_domain
    else:
        fields = {f: draw(_log_uniform(lo, hi)) for f, (lo, hi) in _RANGES.items()}
        if draw(st.booleans()):
            fields["peak_fp8_flops_per_s"] = None
        fields["scale_up_domain"] = draw(st.sampled_from([1, 2, 4, 8, 16, 72]))
    return DeviceSpec(name="fuzz", display_name="fuzz", **fields)


@st.composite
def _problems(draw: st.DrawFn) -> tuple[str, ClusterSpec, Any, CostModelConfig]:
    model = draw(st.sampled_from(_MODELS))
    cluster = ClusterSpec(device=draw(_devices()), num_devices=draw(st.integers(1, 64)))
    phase = draw(st.sampled_from(["decode", "prefill", "serve"]))
    isl = draw(st.integers(1, 32768))
    osl = draw(st.integers(1, 4096))
    dtype = draw(st.sampled_from(["bf16", "fp8"]))
    slo = draw(st.one_of(st.none(), _log_uniform(1e-4, 10.0)))
    wl = make_workload(phase, isl=isl if phase != "decode" else None,
                       context=isl if phase == "decode" else None,
                       osl=osl if phase == "serve" else None, dtype=dtype,
                       tpot_slo_s=slo if phase == "decode" or (phase == "serve" and osl > 1)
                       else None,
                       ttft_slo_s=slo if phase == "prefill" or (phase == "serve" and osl == 1)
                       else None)
    engine = draw(st.sampled_from([None, *ENGINE_PROFILES]))
    util = draw(st.one_of(st.none(), st.floats(0.05, 1.0)))
    cfg = CostModelConfig.for_engine(engine, **({} if util is None
                                                else {"memory_utilization": util}))
    return model, cluster, wl, cfg


_SPEC_CACHE: dict[str, Any] = {}


def _cost_model(model: str, cluster: ClusterSpec, wl: Any, cfg: CostModelConfig) -> CostModel:
    spec = _SPEC_CACHE.get(model) or _SPEC_CACHE.setdefault(model, load_model(model))
    return CostModel(spec, cluster, wl, config=cfg)


def _scaled(cluster: ClusterSpec, **factors: float) -> ClusterSpec:
    d = cluster.device
    values = {f: getattr(d, f) * k for f, k in factors.items()}
    return ClusterSpec(device=DeviceSpec(**{**{f: getattr(d, f) for f in
                                               DeviceSpec.__dataclass_fields__}, **values}),
                       num_devices=cluster.num_devices)


def _check_estimates(scale: int) -> None:
    @_cfg(100, scale)
    @given(_problems(), st.integers(0, 2**32 - 1), st.floats(1.0, 100.0),
           st.sampled_from(["hbm_bytes_per_s", "scale_up_bytes_per_s", "scale_out_bytes_per_s",
                            "all"]), st.floats(1.0, 16.0))
    def run(problem: tuple[str, ClusterSpec, Any, CostModelConfig], seed: int, bw: float,
            which: str, mem: float) -> None:
        _ran("estimates")
        model, cluster, wl, cfg = problem
        try:
            cm = _cost_model(model, cluster, wl, cfg)
        except PlannerError:
            return                           # e.g. a context above max_position_embeddings
        actions = cm.space.sample(np.random.default_rng(seed), 128)
        est = cm.evaluate_many(actions)
        assert np.all(np.isfinite(est.objective)) and np.all(est.objective >= 0)
        assert np.all(np.isfinite(est.peak_memory_bytes)) and np.all(est.peak_memory_bytes >= 0)
        f = est.feasible
        assert np.all(est.objective[~f] == 0)
        tps = est.tokens_per_s_per_device[f]
        assert np.all(np.isfinite(tps)) and np.all(tps > 0)
        for times, used in ((est.tpot_s, wl.phase.value != "prefill"),
                            (est.ttft_s, wl.phase.value != "decode")):
            if used:
                assert np.all(np.isfinite(times[f])) and np.all(times[f] > 0)
        # Feasible fits: the memory a feasible row needs (KV counted as the pool it reserves,
        # ``kv / kv_cache_free_fraction``) is within the usable bytes the breakdown reports,
        # and so is the breakdown's own total.
        for i in np.flatnonzero(f)[:1]:
            e = cm.evaluate(actions[i])
            assert e.feasible
            assert est.peak_memory_bytes[i] <= e.memory.usable_bytes
            assert e.memory.total_bytes <= e.memory.usable_bytes
        # Monotone in bandwidth: never slower, never newly infeasible.
        fields = ["hbm_bytes_per_s", "scale_up_bytes_per_s", "scale_out_bytes_per_s"] \
            if which == "all" else [which]
        fast = _cost_model(model, _scaled(cluster, **{k: bw for k in fields}), wl, cfg)
        est2 = fast.evaluate_many(actions)
        assert np.all(est2.feasible[f]), "more bandwidth made a feasible strategy infeasible"
        assert np.all(est2.objective[f] >= est.objective[f] * (1 - 1e-9))
        # Monotone in memory: a feasible strategy stays feasible with the same throughput.
        big = _cost_model(model, _scaled(cluster, hbm_bytes=mem), wl, cfg)
        est3 = big.evaluate_many(actions)
        assert np.all(est3.feasible[f]), "more memory made a feasible strategy infeasible"
        assert np.all(est3.objective[f] >= est.objective[f] * (1 - 1e-9))
    run()
    _expect("estimates", 100 * scale)


def test_fuzz_cost_model_estimates() -> None:
    _check_estimates(SCALE["default"])


# ------------------------------------------------------------------ command-line flags
runner = CliRunner()


def _mostly(valid: list[str], invalid: list[str]) -> st.SearchStrategy[str]:
    """A valid value seven times in eight, else an invalid one."""
    return st.integers(0, 7).flatmap(
        lambda k: st.sampled_from(invalid if k == 7 and invalid else valid))


def _cli_args(workdir: Path) -> st.SearchStrategy[list[str]]:
    """``plan`` or ``compare`` with a random subset of flags, mostly valid values."""
    cluster_file = workdir / "cluster-ok.json"
    cluster_file.write_text(json.dumps({"device": "h100-sxm", "num_devices": 4,
                                        "name": "lab [/]"}))
    bad_num = ["0", "-1", "1e12", "1000000000000", "x", "", "nan", "99999999999999999999"]
    size = _mostly(["16", "128", "1024", "4096"], bad_num)
    opts: dict[str, st.SearchStrategy[str]] = {
        "--phase": _mostly(["decode", "prefill", "serve"], ["x", ""]),
        "--isl": size, "--osl": size, "--context": size,
        "--ttft-slo": _mostly(["1s", "50ms", "10s"], ["0s", "1e400s", "x", "5"]),
        "--tpot-slo": _mostly(["1s", "50ms", "200ms"], ["0ms", "-1ms", "inf"]),
        "--dtype": _mostly(["bf16", "fp8"], ["fp16", ""]),
        "--kv-dtype": _mostly(["bf16", "fp8"], [""]),
        "--engine": _mostly(list(ENGINE_PROFILES), ["", "tgi"]),
        "--gpu-memory-utilization": _mostly(["0.5", "1.0", "0.9"], ["0", "nan", "inf", "2"]),
        "--max-num-batched-tokens": _mostly(["512", "8192"], bad_num),
        "--budget": _mostly(["1", "8", "32"], bad_num),
        "--seed": _mostly(["0", "7", str(2**40), str(2**70)], ["-1", "x"]),
        "-o": _mostly([str(workdir / "o.json")],
                      ["", "/dev/full", str(workdir), str(cluster_file),
                       "/nonexistent/x.json", "x" * 300]),
    }
    model = _mostly(["llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v2-lite"],
                    ["", "nope", str(workdir), str(cluster_file)])
    cluster = _mostly(["h100-sxm:4", "h100:1", "b200:2", str(cluster_file)],
                      ["b200:0", "x:1", "h100-sxm:8:8", ""])
    chosen = st.lists(st.sampled_from(sorted(opts)), unique=True, max_size=5)

    @st.composite
    def build(draw: st.DrawFn) -> list[str]:
        command = draw(st.sampled_from(["plan", "plan", "plan", "compare"]))
        args = [command, "-q", "--model", draw(model), "--cluster", draw(cluster)]
        names = draw(chosen)
        if command == "plan":
            method = draw(_mostly(["random", "megatron-rule", "sa", "mcmc"], ["nope"]))
            args += ["--method", method]
        else:
            names = [n for n in names if n != "-o"]
            args += ["--methods", draw(_mostly(["random", "sa,random", "mcmc"],
                                               ["nope", "random,random", ""])),
                     "--seeds", draw(_mostly(["1", "2"], ["0", "1000000000"])),
                     "--out", str(workdir / "cmp")]
        if "--budget" not in names:
            args += ["--budget", "8"]
        if not {"--context", "--isl", "--phase"} & set(names):
            args += ["--context", "16"]
        phase = None
        for name in names:
            value = draw(opts[name])
            args += [name, value]
            phase = value if name == "--phase" else phase
        if phase in ("prefill", "serve") and "--isl" not in names:
            args += ["--isl", "64"]
        if phase == "serve" and "--osl" not in names:
            args += ["--osl", "16"]
        if draw(st.booleans()):
            args.append("--json")
        return args
    return build()


def _check_cli(scale: int, workdir: Path) -> None:
    @_cfg(60, scale)
    @given(_cli_args(workdir))
    def run(args: list[str]) -> None:
        _ran("cli")
        budget = args[args.index("--budget") + 1]
        if budget.isdigit() and 64 < int(budget) <= MAX_BUDGET:
            args[args.index("--budget") + 1] = "64"     # keep each search short
        r = runner.invoke(app, args)
        assert r.exception is None or isinstance(r.exception, SystemExit), (args, r.exception)
        assert r.exit_code in (0, 1, 2), (args, r.output)
        if r.exit_code == 2:
            err = r.stderr.strip()
            if err.startswith("error:"):
                assert "\n" not in err, (args, err)
            else:                              # the argument parser's usage message
                assert "Usage:" in r.output, (args, r.output)
        elif "--json" in args:
            data = json.loads(r.stdout)
            assert isinstance(data, dict)
    run()
    _expect("cli", 60 * scale)


def test_fuzz_cli_flags(workdir: Path) -> None:
    _check_cli(SCALE["default"], workdir)


def test_fuzz_total_inputs() -> None:
    """The default run checks at least 10,000 generated inputs (when every property ran)."""
    names = ("json_text", "config", "cluster", "cluster_strings", "workloads", "tables",
             "estimates", "cli")
    if not all(n in RAN for n in names):
        pytest.skip("run with the other fuzz tests")
    assert sum(RAN.values()) >= 10_000, RAN


# ------------------------------------------------------------------ long run
@pytest.mark.slow
def test_fuzz_long(workdir: Path) -> None:
    """Every property above with 10x the examples (the tables 2.5x)."""
    k = SCALE["slow"]
    _check_json_text(k)
    _check_config(k, workdir)
    _check_cluster(k, workdir)
    _check_cluster_strings(k)
    _check_workloads(k)
    _check_tables(max(1, k // 4), workdir)
    _check_estimates(k)
    _check_cli(k, workdir)


@pytest.mark.slow
@pytest.mark.parametrize("corner", [0, 1])
def test_exact_at_the_corners_of_the_device_ranges(corner: int) -> None:
    """``exact`` (whose decomposition verifies itself) solves problems on devices at the edges
    of the accepted ranges, slowest and fastest, without an error (minutes)."""
    from learn_to_shard.api import search_plan

    pick = 0 if corner == 0 else 1
    fields = {f: _RANGES[f][pick] for f in _RANGES}
    device = DeviceSpec(name="edge", display_name="edge", scale_up_domain=4, **fields)
    for model in ("qwen3-30b-a3b", "llama-3.1-8b"):
        wl = make_workload("serve", isl=1024, osl=128)
        cm = _cost_model(model, ClusterSpec(device=device, num_devices=16), wl,
                         CostModelConfig())
        plan = search_plan(cm, method="exact")
        assert plan.best is None or math.isfinite(plan.best.tokens_per_s_per_device)
