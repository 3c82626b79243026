"""`l2s validate`: the measurement table, per-row predictions, error targets, CLI outputs."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import Counter

import numpy as np
import pytest
from typer.testing import CliRunner

from learn_to_shard.cli import app
from learn_to_shard.cost import CostModel, CostModelConfig
from learn_to_shard.cost.config import ENGINE_PROFILES
from learn_to_shard.errors import ConfigError
from learn_to_shard.fidelity.fit import CALIBRATIONS, calibrate
from learn_to_shard.fidelity.measurements import METRIC_KIND, data_dir, load_table
from learn_to_shard.fidelity.predict import predict_row, row_config
from learn_to_shard.fidelity.stats import validate
from learn_to_shard.hardware import parse_cluster
from learn_to_shard.model import load_model
from learn_to_shard.parallel.space import StrategySpace
from learn_to_shard.parallel.strategy import Strategy
from learn_to_shard.workload import DType, Phase, Workload

runner = CliRunner()


@pytest.fixture(scope="module")
def report():
    t0 = time.perf_counter()
    rep = validate()
    rep.wall_s = time.perf_counter() - t0  # type: ignore[attr-defined]
    return rep


def test_table_holds_every_measurement_of_the_reference():
    rows = load_table()
    ids = [r.id for r in rows]
    assert len(ids) == len(set(ids))
    by_source = Counter(r.source for r in rows)
    # measurements.md: 71 TRT-LLM throughputs (§1.1), 38 Splitwise latencies (§2, incl.
    # BLOOM), 12 DeepEP low-latency times and 8 normal-mode bandwidths (§3).
    assert by_source == {"trtllm-v0.14": 71, "splitwise": 38, "deepep-v1": 20}
    assert all(r.metric in METRIC_KIND and r.value > 0 for r in rows)
    assert sum(r.calibration for r in rows) == 28


def test_held_out_latency_errors_meet_the_targets(report):
    """Issue targets: held-out median |error| ≤ 20% on latency rows (TTFT, TPOT, collective)."""
    assert report.stat("ttft", "held-out").median_abs <= 0.20
    assert report.stat("tpot", "held-out").median_abs <= 0.20
    assert report.stat("collective", "held-out").median_abs <= 0.20
    assert report.wall_s < 60  # type: ignore[attr-defined]


def test_held_out_throughput_error_meets_the_target(report):
    """Issue target: held-out median |error| ≤ 15% on throughput rows."""
    assert report.stat("throughput", "held-out").median_abs <= 0.15


def test_every_tp_sweep_is_predicted_in_the_measured_order(report):
    assert len(report.sweeps) == 12
    assert all(s.in_order for s in report.sweeps), [s.sweep for s in report.sweeps
                                                    if not s.in_order]


def test_inexpressible_rows_say_why(report):
    bloom = [r for r in report.results if r.row.model == "bloom-176b"]
    assert len(bloom) == 8
    assert all(r.predicted is None and r.status == "not expressible" and "bloom" in r.reason
               for r in bloom)
    assert sum(1 for r in report.results if r.predicted is not None) == 121


def test_serve_rows_use_the_concurrency_the_kv_cache_allows(report):
    """TRT-LLM max-throughput rows: batch = KV capacity / (isl + osl), capped at 4096."""
    r = next(x for x in report.results if x.row.id == "trt-llama70b-h100fp8-1000-1000-tp8")
    assert 1000 < r.batch_used < 4096
    short = next(x for x in report.results if x.row.id == "trt-llama70b-h200fp8-128-128-tp8")
    assert short.batch_used == 4096


def test_serve_rows_keep_the_step_within_the_bench_token_budget(report):
    """trtllm-bench builds max_num_tokens = batch × (1 + isl/osl), capped at 32,768: a
    2048/128 row whose KV would hold ~2,800 requests runs at most 32,768 / 17 = 1,927."""
    r = next(x for x in report.results if x.row.id == "trt-llama70b-h200fp8-2048-128-tp8")
    assert r.row.max_num_tokens == 32_768
    assert r.batch_used == 32_768 // 17
    kv_only = predict_row(dataclasses.replace(r.row, max_num_tokens=None))
    assert kv_only.batch_used < r.batch_used       # the default 8,192-token budget binds


def test_batch_max_decode_row_without_osl_is_predicted(tmp_path):
    """The token budget binds serve rows only: a batch = max decode row (osl empty) works."""
    table = tmp_path / "t.csv"
    table.write_text("id,model,hardware,batch,isl,metric,value\n"
                     "x,llama-3.1-8b,h100-sxm,max,512,decode_step_s,0.02\n")
    res = predict_row(load_table(table)[0])
    assert res.status == "ok" and res.predicted and res.batch_used > 1


def test_bench_token_budget_follows_trtllm_bench_rounding():
    from learn_to_shard.fidelity.predict import bench_tokens

    row = next(r for r in load_table() if r.id == "trt-llama70b-h200fp8-1000-1000-tp8")
    assert bench_tokens(row, 100) == 2048            # 200 tokens: the 2,048 floor
    assert bench_tokens(row, 1500) == 3072           # 3,000: next multiple of 256
    assert bench_tokens(row, 3000) == 6144           # 6,000: next multiple of 512
    assert bench_tokens(row, 4100) == 8192 + 1024    # 8,200: next multiple of 1,024
    assert bench_tokens(row, 20_000) == 32_768       # the cap


def test_cli_prints_table_and_writes_plot_and_json(tmp_path):
    plot, rep = tmp_path / "v.png", tmp_path / "v.json"
    res = runner.invoke(app, ["validate", "--plot", str(plot), "--report", str(rep)])
    assert res.exit_code == 0, res.output
    assert "trt-llama70b-h200fp8-1000-1000-tp8" in res.output
    assert "held-out median |error|" in res.output
    assert plot.stat().st_size > 10_000
    data = json.loads(rep.read_text())
    assert data["summary"].startswith("held-out median |error|")
    assert len(data["rows"]) == 129


def test_cli_takes_another_table_in_the_same_format(tmp_path):
    table = tmp_path / "mine.csv"
    table.write_text(
        "id,engine,model,hardware,devices,weight_dtype,tp,batch,max_batch,isl,osl,metric,"
        "value,calibration,source\n"
        "a,trtllm,llama-3.1-8b,h100-sxm,1,bf16,1,max,512,1000,1000,output_tokens_per_s,"
        "5000,0,mine\n"
        "b,,llama-3.1-8b,h100-sxm,1,bf16,1,8,,2048,,decode_step_s,0.008,0,mine\n")
    rep = tmp_path / "r.json"
    res = runner.invoke(app, ["validate", "--table", str(table), "--plot",
                              str(tmp_path / "p.png"), "--report", str(rep)])
    assert res.exit_code == 0, res.output
    rows = json.loads(rep.read_text())["rows"]
    assert [r["id"] for r in rows] == ["a", "b"]
    assert all(r["predicted"] and r["status"] == "ok" for r in rows)


def test_bad_table_is_a_one_line_error(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,model,metric\nx,llama-3.1-8b,tpot_s\n")
    res = runner.invoke(app, ["validate", "--table", str(bad)])
    assert res.exit_code == 2
    assert "missing column" in res.output and "value" in res.output


HEADER = "id,model,hardware,tp,devices,batch,isl,osl,metric,value,collective,message_bytes\n"


@pytest.mark.parametrize("row,needle", [
    ("x,llama-3.1-8b,h100-sxm,1,,0,1024,128,output_tokens_per_s,100,,", "'batch'"),
    ("x,llama-3.1-8b,h100-sxm,0,,1,1024,128,output_tokens_per_s,100,,", "'tp'"),
    ("x,llama-3.1-8b,h100-sxm,8,2,1,1024,128,output_tokens_per_s,100,,", "'devices'"),
    ("x,llama-3.1-8b,h100-sxm,8,,1,,,collective_s,1e-5,all_reduce,", "message_bytes"),
    ("x,llama-3.1-8b,h100-sxm,8,,1,,,collective_s,1e-5,,1024", "'collective'"),
    ("x,llama-3.1-8b,h100-sxm,8,,1,,,link_bytes_per_s,1e9,all_to_all,-5", "message_bytes"),
    ("", "no measurement rows"),
    # a row short of the header (a reordered or truncated file) was a traceback
    ("x,llama-3.1-8b,h100-sxm,1", "line 2: 4 fields where the header has 12"),
    ("x,llama-3.1-8b,h100-sxm,1,,1,1024,128,output_tokens_per_s,100,,,7",
     "13 fields where the header has 12"),
    # a collective over one rank moves nothing; it was scored at -100%
    ("x,llama-3.1-8b,h100-sxm,1,,1,,,collective_s,1e-4,all_reduce,1000000",
     "needs a group of 2 or more devices"),
    ("x,llama-3.1-8b,h100-sxm,1,,1,,,link_bytes_per_s,1e9,all_reduce,1000000",
     "needs a group of 2 or more devices"),
])
def test_bad_table_values_are_one_line_errors(tmp_path, row, needle):
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + row + ("\n" if row else ""))
    res = runner.invoke(app, ["validate", "--table", str(bad)])
    assert res.exit_code == 2, res.output
    assert needle in res.stderr and res.stderr.count("\n") == 1


def test_collective_rows_use_the_link_the_group_spans():
    rows = {r.id: r for r in load_table()}
    intra = predict_row(rows["deepep-normal-dispatch-ep8"]).predicted
    inter = predict_row(rows["deepep-normal-dispatch-ep16"]).predicted
    assert intra == pytest.approx(160e9 * 0.8) and inter == pytest.approx(50e9 * 0.8)


CASES = [
    ("llama-3.1-70b", "h100-sxm:16", Phase.SERVE, "trtllm"),
    ("llama-3.1-70b", "a100-80gb:8", Phase.PREFILL, "splitwise-dgx-a100"),
    ("qwen3-30b-a3b", "h100-sxm:8", Phase.DECODE, "splitwise-dgx-h100"),
    ("gpt-oss-20b", "h200:8", Phase.SERVE, None),
]


@pytest.mark.parametrize("name,cluster,phase,engine", CASES)
def test_new_factors_keep_evaluate_and_evaluate_many_identical(name, cluster, phase, engine):
    cfg = CostModelConfig.for_engine(engine, window_kv_capped=engine is not None,
                                     moe_imbalance=1.3)
    wl = Workload(phase, isl=2048, osl=256 if phase is Phase.SERVE else 0,
                  weight_dtype=DType.FP8)
    cm = CostModel(load_model(name), parse_cluster(cluster), wl, config=cfg)
    acts = cm.space.sample(np.random.default_rng(3), 48)
    b = cm.evaluate_many(acts)
    for i, a in enumerate(acts):
        e = cm.evaluate(a)
        assert e.feasible == bool(b.feasible[i])
        assert e.tokens_per_s_per_device == float(b.tokens_per_s_per_device[i])
        for x, y in ((e.tpot_s, b.tpot_s[i]), (e.ttft_s, b.ttft_s[i])):
            assert x == float(y) or (math.isnan(x) and math.isnan(y))
        assert e.max_batch == int(b.max_batch[i])
        assert e.kv_capacity_tokens == int(b.kv_capacity_tokens[i])


def test_engine_profiles_name_their_source():
    for name, prof in ENGINE_PROFILES.items():
        assert prof.get("_source"), name
        CostModelConfig.for_engine(name)
    with pytest.raises(ConfigError, match="known"):
        CostModelConfig.for_engine("nope")


@pytest.mark.slow
def test_declared_calibration_reproduces_the_shipped_factors():
    """Re-running the declared fits on the calibration rows lands on the shipped values."""
    shipped = {"defaults": CostModelConfig()}
    shipped |= {n: CostModelConfig.for_engine(n) for n in ENGINE_PROFILES}
    for fit in calibrate(specs=CALIBRATIONS):
        assert len(fit.row_ids) in (16, 6)
        for field, v in fit.values.items():
            assert getattr(shipped[fit.spec.name], field) == pytest.approx(v), (fit.spec.name,
                                                                                field)


def test_kernel_tables_are_small_and_every_operator_is_compared(report):
    from learn_to_shard.fidelity.kernels import silicon_dir

    compared = ["context_attention.csv", "custom_allreduce.csv", "gemm.csv",
                "generation_attention.csv", "moe_a2a.csv", "nccl.csv"]
    reference = ["mla.csv", "moe.csv", "moe_engines.csv"]   # derived, not yet compared
    files = sorted(p.name for p in silicon_dir().glob("*.csv"))
    assert files == sorted(compared + reference)
    assert sum((silicon_dir() / f).stat().st_size for f in compared) < 200_000
    assert sum(p.stat().st_size for p in silicon_dir().glob("*.csv")) < 1_000_000
    ops = {(s.op, s.preset) for s in report.operators}
    for preset in ("h100-sxm", "h200", "a100-80gb", "b200"):
        for op in ("gemm", "decode_attention", "prefill_attention", "all_reduce",
                   "all_gather", "reduce_scatter", "alltoall"):
            assert (op, preset) in ops
    assert sum(s.n for s in report.operators) == 768 + 480 + 133 + 24


# ------------------------------------------------------------------------------ kernel fits
def _synthetic_silicon(tmp_path, truth: CostModelConfig):
    """Kernel tables whose latencies are the model's own at ``truth``: a fit must recover it."""
    gemm = ["system,preset,source,dtype,m,n,k,latency_s"]
    for dt in ("bfloat16", "fp8"):
        for m in (1, 16, 64, 256, 1024, 4096):
            for n, k in ((1024, 4096), (8192, 8192), (28672, 8192)):
                gemm.append(f"h100,h100-sxm,syn,{dt},{m},{n},{k},1")
    gen = ["system,preset,source,kv_dtype,batch,kv_len,heads,kv_heads,head_dim,latency_s"]
    ctx = ["system,preset,source,kv_dtype,batch,isl,heads,kv_heads,head_dim,latency_s"]
    for b in (1, 8, 64):
        for length in (1024, 8192):
            gen.append(f"h100,h100-sxm,syn,bfloat16,{b},{length},64,8,128,1")
            ctx.append(f"h100,h100-sxm,syn,bfloat16,{b},{length},64,8,128,1")
    nccl = ["system,preset,source,op,num_gpus,message_bytes,latency_s"]
    for op in ("all_reduce", "all_gather", "alltoall"):
        for n in (2, 4, 8):
            for size in (4096, 1 << 20, 1 << 26):
                nccl.append(f"h100,h100-sxm,syn,{op},{n},{size},1")
    files = {"gemm.csv": gemm, "generation_attention.csv": gen,
             "context_attention.csv": ctx, "nccl.csv": nccl}
    for name, lines in files.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    from learn_to_shard.fidelity.kernels import silicon_kernels, silicon_tables
    truth_lat = iter(k[3] for k in silicon_kernels(truth, silicon_tables(tmp_path)))
    for name in ("gemm.csv", "generation_attention.csv", "context_attention.csv", "nccl.csv"):
        lines = files[name]
        out = [lines[0]] + [line.rsplit(",", 1)[0] + f",{next(truth_lat)!r}" for line in lines[1:]]
        (tmp_path / name).write_text("\n".join(out) + "\n")
    return tmp_path


def test_kernel_fits_recover_the_factors_the_kernels_were_made_with(tmp_path):
    truth = CostModelConfig(flops_efficiency=0.55, hbm_efficiency=0.65, gemm_shape_half=32.0,
                            fp8_flops_efficiency=0.45, attention_hbm_efficiency=0.5,
                            attention_flops_efficiency=0.4, scale_up_efficiency=0.6,
                            scale_up_latency_s=4e-6)
    from learn_to_shard.fidelity.kernels import fit_silicon
    fits = {f.spec.name: f for f in fit_silicon(folder=_synthetic_silicon(tmp_path, truth))}
    assert set(fits) == {"gemm bf16", "gemm fp8", "decode attention", "prefill attention",
                         "collectives (one node)"}
    for f in fits.values():
        assert f.preset == "h100-sxm"
        assert f.median_abs_after < 1e-9 < f.median_abs_before
    assert fits["gemm bf16"].values == {"flops_efficiency": 0.55, "hbm_efficiency": 0.65,
                                        "gemm_shape_half": 32.0}
    assert fits["gemm fp8"].values["fp8_flops_efficiency"] == 0.45
    assert fits["decode attention"].values == {"attention_hbm_efficiency": 0.5}
    assert fits["prefill attention"].values == {"attention_flops_efficiency": 0.4}
    assert fits["collectives (one node)"].values == {"scale_up_efficiency": 0.6,
                                                     "scale_up_latency_s": 4e-6}


# ------------------------------------------------------------------------------ robustness
def test_batch_max_with_attention_dp_sizes_the_whole_group(tmp_path):
    """dp = 8, batch = max: the batch counts the requests of all eight ranks (each holds its
    own KV), is a multiple of dp, and is the largest such multiple that fits."""
    table = tmp_path / "t.csv"
    table.write_text("id,engine,model,hardware,devices,tp,ep,dp,batch,isl,osl,metric,value\n"
                     "a,trtllm,qwen3-30b-a3b,h100-sxm,8,1,8,8,max,1024,1024,"
                     "output_tokens_per_s,10000\n")
    row = load_table(table)[0]
    res = predict_row(row)
    assert res.status == "ok" and res.predicted and res.batch_used % 8 == 0
    cfg = row_config(row)
    wl = Workload(Phase.SERVE, isl=1024, osl=1024)
    cl = parse_cluster("h100-sxm:8")
    m = load_model("qwen3-30b-a3b")

    def fits(batch: int) -> bool:
        cm = CostModel(m, cl, wl, config=cfg,
                       space=StrategySpace.build(m, cl, batch_values=(batch,)))
        e = cm.evaluate(Strategy(tp=1, ep=8, pp=1, dp=8, batch=batch))
        assert not [v for v in e.violations if not v.startswith("memory")]
        return not e.violations

    assert fits(res.batch_used) and not fits(res.batch_used + 8)
    # one rank's capacity would be an eighth of the group's
    assert res.batch_used > 8 * 100


def test_ep_that_does_not_divide_the_experts_is_not_expressible(tmp_path):
    """One bad row is reported like other unsupported rows; the rest of the table runs."""
    table = tmp_path / "t.csv"
    table.write_text("id,model,hardware,devices,tp,ep,dp,batch,isl,metric,value\n"
                     "bad,qwen3-30b-a3b,h100-sxm,8,1,7,8,8,1024,decode_step_s,0.02\n"
                     "good,qwen3-30b-a3b,h100-sxm,8,1,8,8,8,1024,decode_step_s,0.02\n")
    rep = validate(table=table, silicon=False)
    bad, good = rep.results
    assert bad.status == "not expressible" and bad.predicted is None
    assert "ep=7" in bad.reason and bad.reason.startswith("tp1 ep7")
    assert good.status == "ok" and good.predicted


def test_table_with_a_byte_order_mark_reads(tmp_path):
    table = tmp_path / "bom.csv"
    table.write_bytes(b"\xef\xbb\xbfid,model,hardware,batch,isl,metric,value\n"
                      b"x,llama-3.1-8b,h100-sxm,8,512,decode_step_s,0.02\n")
    assert [r.id for r in load_table(table)] == ["x"]


def test_missing_column_names_what_was_found(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("ident;model;metric\nx;llama-3.1-8b;tpot_s\n")
    with pytest.raises(ConfigError, match=r"missing column\(s\) id, model, hardware, metric, "
                                          r"value; found 'ident;model;metric'"):
        load_table(table)


def test_fit_without_calibration_rows_is_a_one_line_error(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("id,model,hardware,batch,isl,metric,value,calibration\n"
                     "x,llama-3.1-8b,h100-sxm,8,512,decode_step_s,0.02,0\n")
    res = runner.invoke(app, ["validate", "--table", str(table), "--fit", "--plot",
                              str(tmp_path / "p.png"), "--report", str(tmp_path / "r.json")])
    assert res.exit_code == 2, res.output
    assert "no calibration rows" in res.stderr and res.stderr.count("\n") == 1
    assert not (tmp_path / "r.json").exists()
    with pytest.raises(ConfigError, match="no calibration rows"):
        calibrate(load_table(table))


def test_moe_reference_table_holds_every_shape_and_the_ep_over_expert_tp_gap():
    """``moe.csv`` (derived by scripts/aiconfigurator_extract.py) holds the five MoE shapes of
    data/silicon/PROVENANCE.md on Hopper and B200, with balanced and power-law routing, and the
    facts PROVENANCE quotes: DeepSeek-V3's expert block at 128 tokens on H200 is faster at
    EP8 × TP1 than at TP8 × EP1; at 8192 tokens over EP >= 8, power-law routing takes a median
    of about 2× the balanced time (at small token counts it can be faster: fewer experts hold
    tokens, so fewer weights are read)."""
    import csv
    import statistics

    from learn_to_shard.fidelity.kernels import silicon_dir

    with open(silicon_dir() / "moe.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    shapes = {(r["hidden"], r["inter"], r["topk"], r["experts"]) for r in rows
              if r["system"] == "h200_sxm"}
    assert shapes == {("7168", "2048", "8", "256"), ("4096", "14336", "2", "8"),
                      ("2048", "768", "8", "128"), ("4096", "1536", "8", "128"),
                      ("2880", "2880", "4", "128")}
    t = {(r["system"], r["dtype"], r["hidden"], r["inter"], r["tokens"], r["moe_tp"],
          r["moe_ep"], r["distribution"]): float(r["latency_s"]) for r in rows}
    ds = ("h200_sxm", "fp8_block", "7168", "2048", "128")
    assert t[(*ds, "1", "8", "balanced")] < 0.8 * t[(*ds, "8", "1", "balanced")]
    skew = [v / t[(*k[:-1], "balanced")] for k, v in t.items()
            if k[-1] != "balanced" and (*k[:-1], "balanced") in t and k[4] == "8192"
            and int(k[6]) >= 8]
    assert len(skew) > 100 and statistics.median(skew) > 1.5


def _first_shipped_row() -> tuple[list[str], dict[str, str]]:
    """The shipped table's header and first row (a Llama-3.1-70B throughput row)."""
    import csv

    from learn_to_shard.fidelity.measurements import default_table_path

    with open(default_table_path(), newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), next(reader)


def _validate_rows(tmp_path, rows: list[dict[str, str]], name: str = "mine.csv"):
    """``l2s validate --table`` on a table of ``rows`` written to ``tmp_path / name``."""
    import csv

    fields, _ = _first_shipped_row()
    table = tmp_path / name
    table.parent.mkdir(parents=True, exist_ok=True)
    with open(table, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return table, CliRunner().invoke(app, ["validate", "--table", str(table), "--summary-only",
                                           "--plot", str(tmp_path / "p.png"), "--report",
                                           str(tmp_path / "r.json")])


def test_validate_table_with_no_predictable_row_is_bad_input(tmp_path):
    """A user's --table whose rows all name what l2s knows but none can be predicted (a
    model whose architecture it does not model) predicts nothing: one line naming the table,
    the first row and why, exit 2 (not an empty summary, exit 0)."""
    _, row = _first_shipped_row()
    table, r = _validate_rows(tmp_path, [{**row, "model": "bloom-176b"}])
    assert r.exit_code == 2, r.output
    assert f"--table {table}: none of its 1 rows can be predicted" in r.output
    assert "bloom" in r.output
    # A row the model calls infeasible is still predicted: the table is validated.
    _, r = _validate_rows(tmp_path, [{**row, "hardware": "l40s"}])
    assert r.exit_code == 0, r.output


def test_validate_table_row_naming_nothing_is_bad_input(tmp_path):
    """One row of a user's --table with a typo in its model or hardware (beside rows that
    predict) is bad input: one line naming the table, the row, the column and the close
    name (the validation configs' names among them), exit 2, not a "not predicted" row in a
    summary that exits 0; a missing config file or a folder for a device file likewise. A
    name close to none (``v100``: a device l2s does not have) is a not-expressible row."""
    _, row = _first_shipped_row()
    good = {**row, "id": "good"}
    for column, typo, said in (("model", "llama-3.1-7b", "did you mean llama-3.1-70b?"),
                               ("model", "llama-2-70bb", "did you mean llama-2-70b?"),
                               ("hardware", "h100-sxn", "did you mean h100-sxm?"),
                               ("hardware", "cfg/", "device file 'cfg'"),
                               ("model", "cfg/missing.json", "config file not found")):
        table, r = _validate_rows(tmp_path, [good, {**row, "id": "typo", column: typo}])
        assert r.exit_code == 2, r.output
        err = r.stderr.strip()
        assert err.startswith("error:") and "\n" not in err, err
        assert f"{table}: row typo, column '{column}'" in err and said in err, err
    _, r = _validate_rows(tmp_path, [good, {**row, "id": "v100", "hardware": "v100"}])
    assert r.exit_code == 0 and "1/2 rows predicted" in r.output, r.output


@pytest.mark.parametrize("column, typo, said", [
    ("weight_dtype", "bf61", "column 'weight_dtype' 'bf61' is not one of bf16"),
    ("kv_dtype", "fp9", "column 'kv_dtype' 'fp9' is not one of bf16"),
    ("calibration", "2", "column 'calibration' '2' is not 1 or 0"),
    ("engine", "vlm", "column 'engine' 'vlm' names no engine profile; did you mean vllm?")])
def test_validate_table_typo_in_a_value_column_is_bad_input(tmp_path, column, typo, said):
    """A value outside a column's documented vocabulary in one row of a user's table is one
    line naming the file, line and column, exit 2: not a row dropped as "not expressible",
    silently held out, or priced with another engine's defaults. An engine name far from
    every profile (``deepep-ll``) is still priced with the defaults."""
    _, row = _first_shipped_row()
    _, r = _validate_rows(tmp_path, [{**row, "id": "good"}, {**row, "id": "typo", column: typo}])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("error:") and "\n" not in err and "line 3" in err, err
    assert said in err, err
    _, r = _validate_rows(tmp_path, [{**row, "engine": "deepep-ll"}])
    assert r.exit_code == 0, r.output


def test_validate_table_names_in_any_case_and_empty_cells(tmp_path):
    """Model, device and engine names read in any case, as on the command line (a validation
    config's name too: ``Llama-2-70B``, ``H800``; ``VLLM`` is the vllm profile, not the
    defaults); an empty model or hardware cell is one line naming the file, line and column."""
    import csv

    from learn_to_shard.fidelity.measurements import default_table_path

    with open(default_table_path(), newline="") as f:
        shipped = {r["id"]: r for r in csv.DictReader(f)}
    l2 = next(r for r in shipped.values() if r["model"] == "llama-2-70b")
    h800 = next(r for r in shipped.values() if r["hardware"] == "h800")
    _, row = _first_shipped_row()
    rows = [{**l2, "model": "Llama-2-70B"}, {**h800, "hardware": "H800"},
            {**row, "engine": "TRTLLM-TensorRT"}]
    _, r = _validate_rows(tmp_path, rows)
    assert r.exit_code == 0 and "3/3 rows predicted" in r.output, r.output
    got = {x["id"]: x["predicted"] for x in json.loads((tmp_path / "r.json").read_text())["rows"]}
    _, r = _validate_rows(tmp_path, [l2, h800, row])
    want = {x["id"]: x["predicted"] for x in json.loads((tmp_path / "r.json").read_text())["rows"]}
    assert got == want
    for column in ("model", "hardware"):
        _, r = _validate_rows(tmp_path, [row, {**row, "id": "blank", column: " "}])
        err = r.stderr.strip()
        assert r.exit_code == 2 and err.startswith("error:") and "\n" not in err, r.output
        assert f"line 3: empty '{column}'" in err, err


def test_validate_table_paths_are_relative_to_the_table(tmp_path, monkeypatch):
    """A model (or device) path in a user's table is read beside the table, wherever l2s
    runs from, so a table and its configs travel together; the same model by name predicts
    the same value."""
    _, row = _first_shipped_row()
    cfg = tmp_path / "tables" / "cfg" / "my70b.json"
    cfg.parent.mkdir(parents=True)
    cfg.write_text((data_dir() / "models" / f"{row['model']}.json").read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    _, by_path = _validate_rows(tmp_path, [{**row, "model": "cfg/my70b.json"}],
                                "tables/rel.csv")
    assert by_path.exit_code == 0, by_path.output
    path_report = json.loads((tmp_path / "r.json").read_text())
    _, by_name = _validate_rows(tmp_path, [row])
    assert by_name.exit_code == 0, by_name.output
    name_report = json.loads((tmp_path / "r.json").read_text())
    # A user's table without TP sweeps has no sweep count, and no comparison of the
    # shipped kernel tables (which are not the table's) in the output or the report.
    assert "TP sweeps" not in by_name.output and name_report["operators"] == []
    assert path_report["rows"][0]["predicted"] == name_report["rows"][0]["predicted"] > 0
    # the row reads as written (the table travels with its report), not as resolved
    assert path_report["rows"][0]["model"] == "cfg/my70b.json"
    # A model folder beside the table, named bare, reads the same way from elsewhere.
    folder = tmp_path / "tables" / "m1"
    folder.mkdir()
    (folder / "config.json").write_text(cfg.read_text())
    _, by_folder = _validate_rows(tmp_path, [{**row, "model": "m1"}], "tables/folder.csv")
    assert by_folder.exit_code == 0, by_folder.output
    folder_report = json.loads((tmp_path / "r.json").read_text())
    assert folder_report["rows"][0]["predicted"] == name_report["rows"][0]["predicted"]


def test_validate_outputs_never_overwrite_a_config_the_table_reads(tmp_path):
    """``--report`` or ``--plot`` onto a model file a row of the table reads is refused
    before anything is written (as ``plan -o`` onto its ``--model``), and the file is kept."""
    _, row = _first_shipped_row()
    cfg = tmp_path / "cfg" / "x.json"
    cfg.parent.mkdir()
    text = (data_dir() / "models" / f"{row['model']}.json").read_text()
    cfg.write_text(text)
    _, _ = _validate_rows(tmp_path, [{**row, "model": "cfg/x.json"}])
    table = tmp_path / "mine.csv"
    for flag in ("--report", "--plot"):
        other = {"--report": ["--plot", str(tmp_path / "p.png")],
                 "--plot": ["--report", str(tmp_path / "r.json")]}[flag]
        r = CliRunner().invoke(app, ["validate", "--table", str(table), "--summary-only",
                                     *other, flag, str(cfg)])
        assert r.exit_code == 2, r.output
        err = r.stderr.strip()
        assert err.startswith("error:") and "\n" not in err, err
        assert f"{flag}: {cfg} is the --table row {row['id']}'s model input" in err, err
        assert cfg.read_text() == text


def test_the_pinned_accuracy_is_what_validate_measures_now(report):
    """Every plan prints the held-out medians of data/calibration/accuracy.json as its
    expected error; its steady-state part must be what ``l2s validate`` measures now (a
    change that moves a median fails here until scripts/accuracy_snapshot.py is re-run)."""
    from learn_to_shard.fidelity.accuracy import accuracy_line, shipped

    pinned = shipped()["steady_state"]
    for kind in ("throughput", "ttft", "tpot"):
        st = report.stat(kind, "held-out")
        assert pinned[kind] == {"median_abs_error": round(st.median_abs, 4), "n": st.n}
    line = accuracy_line(Phase.SERVE)
    assert f"steady-state throughput {100 * pinned['throughput']['median_abs_error']:.0f}%" \
        in line and "under a load (--concurrency / --request-rate / --trace, simulated) TTFT" \
        in line and f"decode step {100 * pinned['tpot']['median_abs_error']:.0f}%" in line


@pytest.mark.slow
def test_the_pinned_serving_accuracy_is_what_validate_serving_measures_now():
    """The under-load part of data/calibration/accuracy.json against a live
    ``l2s validate --serving`` (75 s; run with ``pytest -m slow``)."""
    from learn_to_shard.fidelity.accuracy import measure, shipped

    now, pinned = measure(), shipped()
    assert now["under_load"] == pinned["under_load"]
    assert now["under_load_by_engine"] == pinned["under_load_by_engine"]


def test_a_plan_states_its_engine_s_own_serving_error_beside_the_table_s():
    """The serving table's engines sit apart (held out, vLLM's rows are the worst): a plan
    for one engine prints that engine's held-out medians and counts beside the whole
    table's, in the line and in the JSON; a plan without an engine, or for a runtime the
    table does not measure (``trtllm-tensorrt``), prints the table's alone. The pinned
    per-engine counts add up to the table's."""
    from learn_to_shard.fidelity.accuracy import accuracy_line, shipped

    acc = shipped()
    by_engine = acc["under_load_by_engine"]
    assert set(by_engine) == {"vllm", "sglang", "trtllm"}
    for metric, whole in acc["under_load"].items():
        assert sum(e[metric]["n"] for e in by_engine.values() if metric in e) == whole["n"]
    vllm = by_engine["vllm"]
    line = accuracy_line(Phase.SERVE, "vllm")
    assert line.startswith(accuracy_line(Phase.SERVE))
    assert (f"; on vLLM's rows TTFT {100 * vllm['ttft']['median_abs_error']:.0f}% "
            f"(n={vllm['ttft']['n']}), TPOT {100 * vllm['tpot']['median_abs_error']:.0f}% "
            f"(n={vllm['tpot']['n']}), tokens/s "
            f"{100 * vllm['output_tok_s']['median_abs_error']:.0f}% "
            f"(n={vllm['output_tok_s']['n']})") in line
    assert "rows" not in accuracy_line(Phase.SERVE)
    assert accuracy_line(Phase.SERVE, "trtllm-tensorrt") == accuracy_line(Phase.SERVE)
    assert accuracy_line(Phase.DECODE, "vllm") == accuracy_line(Phase.DECODE)
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1",
                                 "--phase", "serve", "--isl", "512", "--osl", "128",
                                 "--engine", "sglang", "-q"])
    assert r.exit_code == 0, r.output
    assert "on SGLang's rows TTFT" in " ".join(r.stdout.split())
    doc = json.loads(CliRunner().invoke(app, [
        "plan", "--model", "llama-3.1-8b", "--cluster", "h100-sxm:1", "--phase", "serve",
        "--isl", "512", "--osl", "128", "--engine", "sglang", "--json"]).stdout)
    assert doc["expected_error"]["under_load_by_engine"] == by_engine


def test_validate_serving_report_holds_the_serving_rows_and_medians(monkeypatch):
    """``l2s validate --serving --report F``: the serving table's medians and rows go into
    the JSON (they were printed only); non-finite values are null, so it parses strictly."""
    import io
    import json
    import math

    from rich.console import Console

    import learn_to_shard.fidelity.serving as serving
    from learn_to_shard.cli import _render_serving_check
    from learn_to_shard.fidelity.serving import ServingRowResult

    rows = [ServingRowResult(id="a", split="held-out", engine="vllm", series="s", varies="",
                             measured={"ttft_ms": 100.0, "tpot_ms": 10.0,
                                       "output_tok_s": 1000.0},
                             predicted={"ttft_ms": 80.0, "tpot_ms": 11.0,
                                        "output_tok_s": 900.0},
                             statistic={"ttft_ms": "p50", "tpot_ms": "p50"}, x=math.inf),
            ServingRowResult(id="b", split="calibration", engine="vllm", series="", varies="",
                             reason="model not shipped")]
    monkeypatch.setattr(serving, "predict_table", lambda *a, **k: rows)
    doc = _render_serving_check(Console(file=io.StringIO()), rows=False)
    text = json.dumps(doc, allow_nan=False)
    back = json.loads(text)
    assert back["summary"]["held-out"]["ttft_ms_median_abs_err"] == pytest.approx(0.2)
    assert [r["id"] for r in back["rows"]] == ["a", "b"] and back["rows"][0]["x"] is None
    assert back["rows"][1]["reason"] == "model not shipped"


def test_table_errors_name_the_files_own_line_and_a_repeated_column(tmp_path):
    """The line an error names counts the blank lines and the quoted line breaks before the
    row (it counted rows); a column twice in the header is refused (the second value was
    read, silently)."""
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER.rstrip("\n") + ",notes\n"
                   + "a,llama-3.1-8b,h100-sxm,1,,1,1024,128,output_tokens_per_s,100,,,\"one\n"
                   + "two\"\n\nx,llama-3.1-8b,h100-sxm,0,,1,1024,128,output_tokens_per_s,"
                   + "100,,,\n")
    res = runner.invoke(app, ["validate", "--table", str(bad)])
    assert res.exit_code == 2 and "bad.csv line 5:" in res.stderr, res.output
    bad.write_text(HEADER.rstrip("\n") + ",value\n"
                   + "a,llama-3.1-8b,h100-sxm,1,,1,1024,128,output_tokens_per_s,100,,,5\n")
    res = runner.invoke(app, ["validate", "--table", str(bad)])
    assert res.exit_code == 2 and "column value appears more than once" in res.stderr
