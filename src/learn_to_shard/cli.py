"""Command line: argument parsing only; the work is in :mod:`learn_to_shard.api`.

Exit codes: 0 a plan was found, 1 no feasible plan (with reasons), 2 bad input (one line),
3 an internal consistency check failed (a bug to report; one line),
130 interrupted by Ctrl-C during the search (the best so far is printed; 128 + SIGINT, the
shell's convention).
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from .api import (
    DEFAULT_BUDGET,
    checkpoint_dtypes,
    cost_config,
    expected_evaluations,
    make_cost_model,
    make_workload,
    search_plan,
    simulate_plan,
)
from .cost.config import ENGINE_PROFILES, CostModelConfig
from .errors import InternalError, PlannerError
from .model.hf_config import load_model
from .search.base import SearchInterrupted, interruptible
from .serving import ServingLoad
from .units import parse_duration_s
from .workload import Phase, Workload

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Plan distributed LLM inference: parallelism degrees and per-operator "
                       "sharding (Learning to Shard, arXiv 2509.00217).")
err = Console(stderr=True, soft_wrap=True)


def _fail(exc: Exception) -> typer.Exit:
    """Print ``exc`` as one line on stderr; the exit for it: 3 for an
    :class:`~learn_to_shard.errors.InternalError` (a bug), else 2 (bad input)."""
    msg = str(exc).replace("\n", " ")
    if isinstance(exc, InternalError):
        err.print(f"internal error (a bug in l2s; please report it with this command line): "
                  f"{msg}", markup=False, highlight=False)
        return typer.Exit(code=3)
    err.print(f"error: {msg}", markup=False, highlight=False)
    return typer.Exit(code=2)


# Problem options shared by `plan` and `compare`.
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Shipped model name (e.g. "
                                       "llama-3.1-70b), config.json path, model folder, or a "
                                       "HuggingFace repo id in the local HF cache.")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="DEVICE:COUNT (e.g. "
                                         "h100-sxm:8) or a cluster JSON file.")]
PhaseOpt = Annotated[str, typer.Option(help="decode | prefill | serve.")]
IslOpt = Annotated[int | None, typer.Option(help="Prompt length in tokens (prefill/serve).")]
OslOpt = Annotated[int | None, typer.Option(help="Output length in tokens (serve).")]
ContextOpt = Annotated[int | None, typer.Option(help="Context length in tokens (decode).")]
TtftOpt = Annotated[str | None, typer.Option("--ttft-slo", help="TTFT limit, e.g. 2s, 500ms.")]
TpotOpt = Annotated[str | None, typer.Option("--tpot-slo", help="TPOT limit, e.g. 50ms.")]
DtypeOpt = Annotated[str | None, typer.Option(help="Weight precision: bf16 | fp8 (default: "
                                              "the checkpoint's).")]
KvDtypeOpt = Annotated[str | None, typer.Option("--kv-dtype", help="KV-cache precision "
                                                "(default: --dtype).")]
EngineOpt = Annotated[str | None, typer.Option(
    "--engine", help="Serving engine whose memory policy to assume: "
    f"{', '.join(ENGINE_PROFILES)} (default: vLLM memory accounting, KV reserved per whole "
    "request).")]
MemUtilOpt = Annotated[float | None, typer.Option(
    "--gpu-memory-utilization", help="Fraction of each device's memory the engine may use "
    "(vLLM's flag; default 0.9, trtllm 1.0).")]
ConcurrencyOpt = Annotated[int | None, typer.Option(
    "--concurrency", help="Serve: also simulate the top plans under this many closed-loop "
    "clients (vllm bench serve --max-concurrency), with TTFT/TPOT percentiles.")]
RateOpt = Annotated[float | None, typer.Option(
    "--request-rate", help="Serve: also simulate Poisson arrivals at this many requests/s "
    "across the cluster.")]
TraceOpt = Annotated[Path | None, typer.Option(
    "--trace", help="Serve: also simulate a request trace (CSV: arrival_s or TIMESTAMP, isl or "
    "ContextTokens, osl or GeneratedTokens).")]
NumPromptsOpt = Annotated[int | None, typer.Option(
    "--num-prompts", help="Requests per simulation (default 1000).")]
RangeRatioOpt = Annotated[float, typer.Option(
    "--range-ratio", help="Simulated isl/osl drawn uniformly within ±this fraction (vLLM's "
    "--random-range-ratio; default 0: fixed lengths).")]
BatchedTokensOpt = Annotated[int | None, typer.Option(
    "--max-num-batched-tokens", help="Tokens per engine step, serve phase (vLLM's flag; "
    "default 8192): bounds the step, the prefill chunk and the activation workspace.")]


def _workload(phase: str, isl: int | None, osl: int | None, context: int | None,
              ttft_slo: str | None, tpot_slo: str | None, dtype: str | None,
              kv_dtype: str | None):
    """Parse the SLO strings and build the workload (raises ConfigError on bad input)."""
    return make_workload(phase, isl=isl, osl=osl, context=context, dtype=dtype,
                         kv_dtype=kv_dtype,
                         ttft_slo_s=parse_duration_s(ttft_slo, field="--ttft-slo")
                         if ttft_slo is not None else None,
                         tpot_slo_s=parse_duration_s(tpot_slo, field="--tpot-slo")
                         if tpot_slo is not None else None)


def _serving_load(wl: Workload, concurrency: int | None, request_rate: float | None,
                  trace: Path | None, num_prompts: int | None, range_ratio: float,
                  seed: int) -> ServingLoad | None:
    """The simulated load of the flags, or ``None`` when none is given.

    Raises:
        PlannerError: a load outside the serve phase, several loads, or bad values.
    """
    if concurrency is None and request_rate is None and trace is None:
        if num_prompts is not None or range_ratio:
            raise PlannerError("--num-prompts/--range-ratio: only with --concurrency, "
                               "--request-rate or --trace")
        return None
    if wl.phase is not Phase.SERVE:
        raise PlannerError("--concurrency/--request-rate/--trace: a simulated load needs "
                           "--phase serve")
    if range_ratio and not 0.0 <= range_ratio < 1.0:
        raise PlannerError(f"--range-ratio: must be in [0, 1), got {range_ratio}")
    from .serving import load_trace

    return ServingLoad(concurrency=concurrency, request_rate_per_s=request_rate,
                       trace=load_trace(trace) if trace is not None else None,
                       num_prompts=num_prompts, range_ratio=range_ratio, seed=seed)


def _engine_config(wl: Workload, engine: str | None, gpu_memory_utilization: float | None,
                   max_num_batched_tokens: int | None) -> CostModelConfig:
    """The cost-model factors of the engine flags (``api.cost_config``); the step budget only
    exists in the serve phase (decode and prefill steps are not mixed), so it is refused
    elsewhere rather than silently ignored."""
    if max_num_batched_tokens is not None and wl.phase is not Phase.SERVE:
        raise PlannerError(f"--max-num-batched-tokens has no effect with --phase "
                           f"{wl.phase.value} (no mixed prefill/decode step); use --phase serve")
    return cost_config(engine, gpu_memory_utilization, max_num_batched_tokens)


def _check_output(path: Path | None, flag: str, *, directory: bool = False,
                  plot: bool = False) -> None:
    """Refuse an output path that cannot be written, before any work is done.

    Raises:
        PlannerError: the path is empty, is a directory where a file is wanted (or a file
            where a directory is wanted), its folder does not exist, or (``plot``) its suffix
            is not an image format matplotlib writes.
    """
    if path is None:
        return
    if not str(path).strip():
        raise PlannerError(f"{flag}: empty path")
    if directory:
        if path.exists() and not path.is_dir():
            raise PlannerError(f"{flag}: {path} exists and is not a directory")
        return
    if path.is_dir():
        raise PlannerError(f"{flag}: {path} is a directory; give a file name")
    if not path.parent.is_dir():
        raise PlannerError(f"{flag}: folder {path.parent} does not exist")
    if plot:
        from matplotlib.figure import Figure

        kinds = Figure().canvas.get_supported_filetypes()
        if path.suffix.lstrip(".").lower() not in kinds:
            raise PlannerError(f"{flag}: cannot write a {path.suffix or 'suffix-less'} image; "
                               f"use one of {', '.join('.' + k for k in sorted(kinds))}")


def _write(path: Path, text: str, flag: str) -> None:
    """Write ``text`` to ``path``; an OS error becomes one line and exit 2."""
    try:
        path.write_text(text)
    except OSError as exc:
        raise _fail(PlannerError(f"{flag}: cannot write {path}: {exc.strerror}")) from None


#: Exit code after Ctrl-C: 128 + SIGINT (2), what a shell reports for a command killed by
#: SIGINT (GNU Bash manual, 3.7.5 Exit Status:
#: https://www.gnu.org/software/bash/manual/bash.html#Exit-Status).
EXIT_INTERRUPTED = 130

TimingOpt = Annotated[bool, typer.Option(
    "--timing/--no-timing", help="Include the wall-clock values (the \"timing\" key) in the "
    "JSON; without them the JSON is byte-identical for the same inputs and seed.")]


def _progress(quiet: bool) -> Progress:
    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(), console=err, transient=True,
                    disable=quiet)


@app.command("plan")
def plan_cmd(
    model: ModelOpt, cluster: ClusterOpt, phase: PhaseOpt = "decode", isl: IslOpt = None,
    osl: OslOpt = None, context: ContextOpt = None, ttft_slo: TtftOpt = None,
    tpot_slo: TpotOpt = None, dtype: DtypeOpt = None, kv_dtype: KvDtypeOpt = None,
    engine: EngineOpt = None, gpu_memory_utilization: MemUtilOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    method: str = typer.Option("auto", help="Searcher: auto (exact if it finishes in time, "
                               "else rl), exact, rl, megatron, megatron-rule, sa, mcmc, random."),
    budget: int = typer.Option(DEFAULT_BUDGET, help="Evaluation budget (budgeted searchers)."),
    seed: int = typer.Option(0, min=0, help="Random seed (>= 0)."),
    json_out: bool = typer.Option(False, "--json", help="Print the plan as JSON on stdout."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write JSON here."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    timing: TimingOpt = True,
    concurrency: ConcurrencyOpt = None, request_rate: RateOpt = None, trace: TraceOpt = None,
    num_prompts: NumPromptsOpt = None, range_ratio: RangeRatioOpt = 0.0,
) -> None:
    """Find the strategy with the most tokens/s per device within memory and SLOs.

    Ctrl-C during the search prints the best plan found so far, marked interrupted, and exits
    130."""
    sims: list[dict[str, object]] = []
    try:
        _check_output(output, "--output")
        spec = load_model(model)
        wl = _workload(phase, isl, osl, context, ttft_slo, tpot_slo,
                       *checkpoint_dtypes(spec, dtype, kv_dtype))
        load = _serving_load(wl, concurrency, request_rate, trace, num_prompts, range_ratio,
                             seed)
        cfg = _engine_config(wl, engine, gpu_memory_utilization, max_num_batched_tokens)
        cm = make_cost_model(spec, cluster, wl, cfg)
        total = expected_evaluations(cm, method, budget)
        with _progress(quiet or json_out) as prog:
            task = prog.add_task(f"{method} search", total=total)
            try:
                with interruptible(method, seed, budget):
                    result = search_plan(cm, method=method, budget=budget, seed=seed,
                                         progress=lambda k: prog.advance(task, k),
                                         engine=engine)
            except SearchInterrupted as stop:
                from .report.plan import Plan

                result = Plan.from_search(cm, stop.result, method, engine=engine)
        if load is not None and result.feasible and not result.interrupted:
            sims = simulate_plan(cm, result, load)
    except (PlannerError, InternalError) as exc:
        raise _fail(exc) from None
    data = result.to_dict(timing=timing)
    if load is not None:
        last = data.pop("timing", None)        # "timing" stays the last key
        data["simulation"] = sims
        if last is not None:
            data["timing"] = last
    if output is not None:
        _write(output, json.dumps(data, indent=2), "--output")
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        from .report.render import render_plan

        # Piped output gets a wide console so the header and tables stay whole.
        con = Console() if sys.stdout.isatty() else Console(width=160)
        if result.interrupted:
            con.print(f"INTERRUPTED (Ctrl-C) after {result.search['evaluations']} "
                      f"evaluations: the best plan found so far", markup=False, highlight=False)
        render_plan(result, con)
        if sims:
            from .report.render import render_simulation

            render_simulation(sims, con)
    if result.interrupted:
        err.print(f"interrupted after {result.search['evaluations']} of "
                  f"{result.search['budget']} evaluations; the plan shown is the best found so "
                  f"far (exit {EXIT_INTERRUPTED})", markup=False, highlight=False)
        raise typer.Exit(code=EXIT_INTERRUPTED)
    raise typer.Exit(code=0 if result.feasible else 1)


@app.command("validate")
def validate_cmd(
    table: Path | None = typer.Option(None, "--table", help="Measurement CSV in the documented "
                                      "format (default: the shipped data/measurements.csv)."),
    plot: Path = typer.Option(Path("validation.png"), "--plot",
                              help="Where to save the predicted-vs-measured log-log plot."),
    report: Path = typer.Option(Path("validation.json"), "--report",
                                help="Where to save the JSON report."),
    rows: bool = typer.Option(True, "--rows/--summary-only",
                              help="Print every row and the per-operator kernel table."),
    fit: bool = typer.Option(False, "--fit", help="Also re-run the declared calibration fits "
                             "on the calibration rows and print the fitted factors (slow)."),
    fit_silicon: bool = typer.Option(False, "--fit-silicon", help="Also fit the operator "
                                     "factors on the measured kernel tables, per device, and "
                                     "print them beside the shipped ones (~5 s)."),
    serving: bool = typer.Option(False, "--serving", help="Also predict the published "
                                 "serving-under-load table (data/serving_measurements.csv) "
                                 "with the request-level simulation (~20 s)."),
) -> None:
    """Predict each published measurement with its stated configuration; print the errors."""
    from .report.validate import (
        calibrate,
        load_table,
        render_validation,
        save_json,
        save_plot,
        validate,
    )

    try:
        _check_output(plot, "--plot", plot=True)
        _check_output(report, "--report")
        measurements = load_table(table)
        result = validate(measurements, table=table)
    except (PlannerError, InternalError) as exc:
        raise _fail(exc) from None
    # Piped output gets a wide console so the row ids stay whole.
    con = Console() if sys.stdout.isatty() else Console(width=160)
    render_validation(result, con, rows=rows)
    try:
        save_plot(result, plot)
        save_json(result, report)
    except OSError as exc:
        raise _fail(PlannerError(f"--plot/--report: cannot write {exc.filename}: "
                                 f"{exc.strerror}")) from None
    con.print(f"plot: {plot}  report: {report}", highlight=False)
    if fit_silicon:
        from .report.validate import fit_silicon as run_kernel_fits
        from .report.validate import render_kernel_fits

        render_kernel_fits(run_kernel_fits(), con)
    if serving:
        _render_serving_check(con)
    if fit:
        for spec, values, loss, n in calibrate(measurements):
            con.print(f"fit {spec.name} on {n} calibration rows: mean |ln error| {loss:.3f}; "
                      f"{values}", highlight=False)


def _render_serving_check(con: Console) -> None:
    """Print ``serving.check``'s per-row table and held-out / calibration summaries."""
    from rich.table import Table

    from .serving.check import predict_table, summarize

    results = predict_table()
    t = Table(box=None, pad_edge=False, title="serving under load: measured → simulated")
    for col in ("id", "split", "TTFT ms", "TPOT ms", "output tok/s", "not predicted because"):
        t.add_column(col)
    for r in results:
        cells = [f"{r.measured[m]:.4g} → {r.predicted[m]:.4g}" if m in r.measured else ""
                 for m in ("ttft_ms", "tpot_ms", "output_tok_s")]
        t.add_row(r.id, r.split, *cells, r.reason or "")
    con.print(t)
    for split in ("held-out", "calibration"):
        s = summarize(results, split)
        con.print(f"serving {split} median |error|: TTFT {s['ttft_ms_median_abs_err']:.1%} "
                  f"(n={s['ttft_ms_n']}), TPOT {s['tpot_ms_median_abs_err']:.1%} "
                  f"(n={s['tpot_ms_n']}), output tok/s {s['output_tok_s_median_abs_err']:.1%} "
                  f"(n={s['output_tok_s_n']}); sweep directions {s['sweep_directions']}; "
                  f"{s['predicted']}/{s['rows']} rows predicted", highlight=False)


@app.command("compare")
def compare_cmd(
    model: ModelOpt, cluster: ClusterOpt, phase: PhaseOpt = "decode", isl: IslOpt = None,
    osl: OslOpt = None, context: ContextOpt = None, ttft_slo: TtftOpt = None,
    tpot_slo: TpotOpt = None, dtype: DtypeOpt = None, kv_dtype: KvDtypeOpt = None,
    engine: EngineOpt = None, gpu_memory_utilization: MemUtilOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    methods: str = typer.Option("rl,sa,mcmc,random,megatron",
                                help="Comma-separated searchers to compare."),
    budget: int = typer.Option(DEFAULT_BUDGET, help="Evaluations per run (invalid included)."),
    seeds: int = typer.Option(3, help="Runs per method, seeds --seed .. --seed+N-1."),
    seed: int = typer.Option(0, min=0, help="First seed (>= 0)."),
    out: Path = typer.Option(Path("l2s-compare"), "--out", "-o",
                             help="Directory for convergence.png, compare.json and runs/ "
                                  "(one file per finished run)."),
    json_out: bool = typer.Option(False, "--json", help="Print the JSON on stdout, no table."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    timing: TimingOpt = True,
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted compare in "
                                "--out: load its finished runs, run the rest."),
) -> None:
    """Run several searchers for N seeds on one problem; print mean/best and ratios.

    Each finished run is saved in --out/runs/ at once; Ctrl-C prints the table of the finished
    runs, says how to continue (--resume) and exits 130."""
    from .report.compare import (
        ComparisonInterrupted,
        RunStore,
        comparison_to_dict,
        is_seed_independent,
        plot_convergence,
        problem_fingerprint,
        render_comparison,
        run_comparison,
    )
    from .search import searcher_names

    names = [m.strip() for m in methods.split(",")]
    unknown = [m for m in names if m not in searcher_names()]
    try:
        _check_output(out, "--out", directory=True)
        if not names or unknown:
            raise PlannerError(f"--methods: {', '.join(repr(u) for u in unknown)} not among "
                               f"{', '.join(searcher_names())}")
        twice = sorted({m for m in names if names.count(m) > 1})
        if twice:
            raise PlannerError(f"--methods: {', '.join(twice)} given more than once")
        if seeds < 1 or budget < 1:
            raise PlannerError("--seeds and --budget must be positive")
        spec = load_model(model)
        wl = _workload(phase, isl, osl, context, ttft_slo, tpot_slo,
                       *checkpoint_dtypes(spec, dtype, kv_dtype))
        cm = make_cost_model(spec, cluster, wl, _engine_config(
            wl, engine, gpu_memory_utilization, max_num_batched_tokens))
        store = RunStore(out, problem_fingerprint(cm, budget))
        if store.check(resume):
            err.print(f"resuming: finished runs are loaded from {store.runs_dir}, not run "
                      "again", markup=False, highlight=False)
        with _progress(quiet or json_out) as prog:
            tasks: dict[str, TaskID] = {}

            def factory(method: str, _seed: int) -> Callable[[int], None]:
                if method not in tasks:     # one bar per method, over all its runs
                    runs = 1 if is_seed_independent(method) else seeds
                    per = expected_evaluations(cm, method, budget)
                    tasks[method] = prog.add_task(method, total=None if per is None
                                                  else per * runs)
                task = tasks[method]
                return lambda k: prog.advance(task, k)

            try:
                cmp = run_comparison(cm, names, budget, list(range(seed, seed + seeds)),
                                     factory, store=store)
            except ComparisonInterrupted as stop:
                cmp = stop.comparison
    except (PlannerError, InternalError) as exc:
        raise _fail(exc) from None
    except OSError as exc:
        raise _fail(PlannerError(f"--out: cannot save a run in {out}: {exc.strerror}")) \
            from None
    if cmp.interrupted:
        if json_out:
            sys.stdout.write(json.dumps(comparison_to_dict(cmp, cm, timing=timing), indent=2)
                             + "\n")
        else:
            render_comparison(cmp, Console() if sys.stdout.isatty() else Console(width=200))
        again = [a for a in sys.argv[1:] if a != "--resume"]
        finished = len(store.files())
        err.print(f"interrupted (Ctrl-C): {len(cmp.missing)} runs not finished; the table "
                  f"shows the finished ones, saved in {store.runs_dir} ({finished} files). "
                  f"Continue with: {shlex.join(['l2s', *again, '--resume'])}",
                  markup=False, highlight=False)
        raise typer.Exit(code=EXIT_INTERRUPTED)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(PlannerError(f"--out: cannot create {out}: {exc.strerror}")) from None
    data = comparison_to_dict(cmp, cm, timing=timing)
    _write(out / "compare.json", json.dumps(data, indent=2), "--out")
    plot = plot_convergence(cmp, out / "convergence.png")
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        # Piped output gets a wide console so the table's columns stay whole.
        render_comparison(cmp, Console() if sys.stdout.isatty() else Console(width=200))
    err.print(f"plot: {plot}  json: {out / 'compare.json'}", highlight=False)
    raise typer.Exit(code=0 if any(s.found for s in cmp.summaries) else 1)


@app.command("models")
def models_cmd() -> None:
    """List the shipped model configs."""
    from .model.hf_config import shipped_model_names

    for name in shipped_model_names():
        typer.echo(name)


@app.command("devices")
def devices_cmd() -> None:
    """List the device presets."""
    from .hardware.presets import device_names

    for name in device_names():
        typer.echo(name)


def main() -> None:
    """Console entry point (``l2s``)."""
    app()


if __name__ == "__main__":
    main()
