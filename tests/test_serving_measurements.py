"""Integrity of ``data/serving_measurements.csv``: published serving-under-load measurements.

Every check follows from the table's definition (documented in ``data/README.md``, section
"Serving measurements"): column set and units, provenance on every row, the coverage the table
is declared to have, identities between columns that the benchmark tools define (tokens /
duration = tokens/s, per-GPU × GPUs = total, percentile order, TTFT ≤ end-to-end latency), the
series convention (rows of one series differ only in the column the series varies, in
increasing order) and the stated calibration rule. Nothing here is fitted or tuned.
"""

from __future__ import annotations

import csv
import math
import re
from collections import Counter, defaultdict
from importlib import resources

import pytest

DATA = resources.files("learn_to_shard") / "data"
TABLE = "serving_measurements.csv"

COLUMNS = (
    "id source_key engine engine_version model_hf l2s_model model_kind hardware gpus nodes "
    "tp pp ep attention_dp weight_dtype kv_dtype dataset isl osl length_dist num_prompts completed "
    "concurrency request_rate_per_s ttft_ms_mean ttft_ms_median ttft_ms_p99 tpot_ms_mean "
    "tpot_ms_median tpot_ms_p99 itl_ms_mean itl_ms_median itl_ms_p99 e2e_ms_mean e2e_ms_median "
    "output_tok_s output_tok_s_per_gpu total_tok_s request_throughput_per_s total_input_tokens "
    "total_output_tokens duration_s series varies split source quote notes"
).split()

#: Columns that describe one measured point rather than the configuration it ran under.
PER_POINT = {
    "id", "num_prompts", "completed", "quote", "notes", "total_input_tokens",
    "total_output_tokens", "duration_s",
} | {c for c in COLUMNS if c.endswith(("_ms_mean", "_ms_median", "_ms_p99", "_tok_s",
                                        "_tok_s_per_gpu", "_per_s")) and c != "request_rate_per_s"}
LATENCY = [c for c in COLUMNS if re.fullmatch(r"(ttft|tpot|itl|e2e)_ms_(mean|median|p99)", c)]
THROUGHPUT = ["output_tok_s", "output_tok_s_per_gpu", "total_tok_s", "request_throughput_per_s"]
HOPPER = {"h100", "h100-sxm", "h200"}
SOURCE_RE = re.compile(r"^([\w.-]+/[\w.-]+@[0-9a-f]{40}:\S+|https://\S+)$")


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    with (DATA / TABLE).open(newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == COLUMNS
        return list(reader)


def _num(v: str) -> float:
    return float(v)  # "inf" parses to math.inf


def test_columns_are_the_documented_ones():
    readme = (DATA / "README.md").read_text()
    section = readme.split("# Serving measurements", 1)[1].split("## Calibration subset", 1)[0]
    first_cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    documented = [name for cell in first_cells for name in re.findall(r"`([a-z0-9_]+)`", cell)]
    assert documented == COLUMNS


def test_coverage_declared_by_the_table(rows):
    assert len(rows) >= 60
    assert len({r["id"] for r in rows}) == len(rows)
    assert {r["engine"] for r in rows} == {"vllm", "sglang", "trtllm"}
    kinds = {r["hardware"].split("-")[0] for r in rows}  # h100 and h100-sxm are one kind
    assert len(kinds) >= 3
    assert {r["model_kind"] for r in rows} == {"dense", "moe"}
    moe_ep_engines = {r["engine"] for r in rows if r["model_kind"] == "moe" and int(r["ep"]) > 1}
    assert len(moe_ep_engines) >= 2
    sweep_x = {r["varies"] for r in rows if r["series"]}
    assert {"concurrency", "request_rate_per_s"} <= sweep_x
    assert any(r["ttft_ms_median"] or r["ttft_ms_mean"] for r in rows)
    assert any(r["tpot_ms_median"] or r["tpot_ms_mean"] or r["itl_ms_median"] for r in rows)


def test_every_row_names_its_source_and_where_the_numbers_are(rows):
    for r in rows:
        assert SOURCE_RE.match(r["source"]), r["id"]
        assert r["quote"].strip() and r["source_key"].strip(), r["id"]


def test_configuration_is_stated_and_consistent(rows):
    models = (DATA / "models").iterdir()
    shipped = {p.name.removesuffix(".json") for p in models if p.name.endswith(".json")}
    for r in rows:
        gpus, tp, pp, ep, adp = (int(r[c]) for c in ("gpus", "tp", "pp", "ep", "attention_dp"))
        assert min(gpus, tp, pp, ep, adp, int(r["nodes"])) >= 1, r["id"]
        # EP and attention-DP ranks are carved out of one TP x PP instance (all three engines).
        assert gpus == tp * pp and gpus % ep == 0 and tp % adp == 0, r["id"]
        assert r["weight_dtype"] in {"bf16", "fp8", "fp4", "mxfp4"}, r["id"]
        assert r["kv_dtype"] in {"bf16", "fp16", "fp8", "n/s"}, r["id"]
        assert r["dataset"] in {"random", "sharegpt"} and r["length_dist"], r["id"]
        if r["dataset"] == "random":
            assert int(r["isl"]) >= 1 and int(r["osl"]) >= 1, r["id"]
        assert r["concurrency"] or r["request_rate_per_s"], r["id"]
        if r["concurrency"]:
            assert int(r["concurrency"]) >= 1, r["id"]
        if r["request_rate_per_s"]:
            assert _num(r["request_rate_per_s"]) > 0, r["id"]
        assert r["engine"] and r["model_hf"] and r["hardware"], r["id"]
        assert r["l2s_model"] == "" or r["l2s_model"] in shipped, r["id"]


def test_values_are_positive_and_in_their_units(rows):
    for r in rows:
        assert any(r[c] for c in LATENCY + THROUGHPUT), r["id"]
        for c in LATENCY + THROUGHPUT + ["duration_s"]:
            if r[c]:
                v = _num(r[c])
                assert 0 < v < math.inf, (r["id"], c)
        # TPOT/ITL are stored in ms: a value < 0.05 would be a value left in seconds.
        for c in LATENCY:
            if r[c] and c.startswith(("tpot", "itl")):
                assert _num(r[c]) > 0.05, (r["id"], c)


def test_identities_the_benchmark_tools_define(rows):
    for r in rows:
        for m in ("ttft", "tpot", "itl", "e2e"):
            if r[f"{m}_ms_median"] and r.get(f"{m}_ms_p99"):
                assert _num(r[f"{m}_ms_p99"]) >= _num(r[f"{m}_ms_median"]), (r["id"], m)
        for stat in ("mean", "median"):  # every request's e2e latency includes its TTFT
            if r[f"ttft_ms_{stat}"] and r[f"e2e_ms_{stat}"]:
                assert _num(r[f"e2e_ms_{stat}"]) >= _num(r[f"ttft_ms_{stat}"]), r["id"]
        if r["output_tok_s"] and r["duration_s"] and r["total_output_tokens"]:
            rate = int(r["total_output_tokens"]) / _num(r["duration_s"])
            assert _num(r["output_tok_s"]) == pytest.approx(rate, rel=5e-3), r["id"]
        if r["output_tok_s"] and r["output_tok_s_per_gpu"]:
            per_gpu = _num(r["output_tok_s"]) / int(r["gpus"])
            assert _num(r["output_tok_s_per_gpu"]) == pytest.approx(per_gpu, rel=1e-3), r["id"]
        if r["output_tok_s"] and r["total_tok_s"] and r["total_input_tokens"]:
            tin, tout = int(r["total_input_tokens"]), int(r["total_output_tokens"])
            share = _num(r["output_tok_s"]) / _num(r["total_tok_s"])
            assert share == pytest.approx(tout / (tin + tout), rel=5e-3), r["id"]
        if r["completed"]:
            assert 1 <= int(r["completed"]) <= int(r["num_prompts"]), r["id"]


def test_series_vary_one_column_in_increasing_order(rows):
    by_series: dict[str, list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        if r["series"]:
            by_series[r["series"]].append(r)
        else:
            assert r["varies"] == "", r["id"]
    assert by_series
    for name, members in by_series.items():
        assert len(members) >= 2, name
        varies = {m["varies"] for m in members}
        assert len(varies) == 1, name
        (x,) = varies
        same = [c for c in COLUMNS if c not in PER_POINT | {x, "isl", "osl"}]
        if x != "isl_osl":
            same += ["isl", "osl"]
        for c in same:
            assert len({m[c] for m in members}) == 1, (name, c)
        if x == "isl_osl":
            pairs = [(m["isl"], m["osl"]) for m in members]
            assert len(set(pairs)) == len(pairs), name
        else:
            xs = [_num(m[x]) for m in members]
            assert all(a < b for a, b in zip(xs[:-1], xs[1:], strict=True)), (name, xs)


def test_calibration_subset_follows_the_stated_rule(rows):
    """Per engine, the dense-model series on a Hopper GPU with the most rows (first in file
    order on a tie) among the table's first 135 rows is the calibration subset; an engine
    whose series measures no TTFT adds its later dense Hopper rows that measure it outside a
    burst (at a stated concurrency or a finite request rate); every other row is held out
    (data/README.md)."""
    first = rows[:135]
    assert first[-1]["id"] != "gs-qwen3-8b-h100-vllm-c1" and \
        rows[135]["id"] == "gs-qwen3-8b-h100-vllm-c1"
    size = Counter(r["series"] for r in first if r["series"])
    best: dict[str, str] = {}
    for r in first:
        if r["series"] and r["model_kind"] == "dense" and r["hardware"] in HOPPER:
            e, s = r["engine"], r["series"]
            if e not in best or size[s] > size[best[e]]:
                best[e] = s
    assert set(best) == {"vllm", "sglang", "trtllm"}
    no_ttft = {e for e, s in best.items()
               if not any(r["ttft_ms_mean"] or r["ttft_ms_median"] for r in first
                          if r["series"] == s)}
    assert no_ttft == {"trtllm"}
    added = {r["id"] for r in rows[135:] if r["engine"] in no_ttft
             and r["model_kind"] == "dense" and r["hardware"] in HOPPER
             and (r["ttft_ms_mean"] or r["ttft_ms_median"])
             and (r["concurrency"] or (r["request_rate_per_s"]
                                       and math.isfinite(_num(r["request_rate_per_s"]))))}
    assert added == {"gs-qwen3-8b-h100-trtllm-c4"}
    for r in rows:
        expected = "calibration" if r["series"] in set(best.values()) or r["id"] in added \
            else "held-out"
        assert r["split"] == expected, r["id"]
    held_out = [r for r in rows if r["split"] == "held-out"]
    assert len(held_out) > 2 * (len(rows) - len(held_out))
