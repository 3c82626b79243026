"""Command line: argument parsing only; the work is in :mod:`learn_to_shard.api`.

Exit codes: 0 a plan was found, 1 no feasible plan (with reasons), 2 bad input (one line).
"""

from __future__ import annotations

import json
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
    cost_config,
    expected_evaluations,
    make_cost_model,
    make_workload,
    search_plan,
)
from .cost.config import ENGINE_PROFILES, CostModelConfig
from .errors import PlannerError
from .units import parse_duration_s
from .workload import Phase, Workload

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Plan distributed LLM inference: parallelism degrees and per-operator "
                       "sharding (Learning to Shard, arXiv 2509.00217).")
err = Console(stderr=True, soft_wrap=True)


def _fail(exc: Exception) -> typer.Exit:
    msg = str(exc).replace("\n", " ")
    err.print(f"error: {msg}", markup=False, highlight=False)
    return typer.Exit(code=2)


# Problem options shared by `plan` and `compare`.
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Shipped model name (e.g. "
                                       "llama-3.1-70b) or config.json path.")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="DEVICE:COUNT (e.g. "
                                         "h100-sxm:8) or a cluster JSON file.")]
PhaseOpt = Annotated[str, typer.Option(help="decode | prefill | serve.")]
IslOpt = Annotated[int | None, typer.Option(help="Prompt length in tokens (prefill/serve).")]
OslOpt = Annotated[int | None, typer.Option(help="Output length in tokens (serve).")]
ContextOpt = Annotated[int | None, typer.Option(help="Context length in tokens (decode).")]
TtftOpt = Annotated[str | None, typer.Option("--ttft-slo", help="TTFT limit, e.g. 2s, 500ms.")]
TpotOpt = Annotated[str | None, typer.Option("--tpot-slo", help="TPOT limit, e.g. 50ms.")]
DtypeOpt = Annotated[str, typer.Option(help="Weight precision: bf16 | fp8.")]
KvDtypeOpt = Annotated[str | None, typer.Option("--kv-dtype", help="KV-cache precision "
                                                "(default: --dtype).")]
EngineOpt = Annotated[str | None, typer.Option(
    "--engine", help="Serving engine whose memory policy to assume: "
    f"{', '.join(ENGINE_PROFILES)} (default: vLLM memory accounting, KV reserved per whole "
    "request).")]
MemUtilOpt = Annotated[float | None, typer.Option(
    "--gpu-memory-utilization", help="Fraction of each device's memory the engine may use "
    "(vLLM's flag; default 0.9, trtllm 1.0).")]
BatchedTokensOpt = Annotated[int | None, typer.Option(
    "--max-num-batched-tokens", help="Tokens per engine step, serve phase (vLLM's flag; "
    "default 8192): bounds the step, the prefill chunk and the activation workspace.")]


def _workload(phase: str, isl: int | None, osl: int | None, context: int | None,
              ttft_slo: str | None, tpot_slo: str | None, dtype: str, kv_dtype: str | None):
    """Parse the SLO strings and build the workload (raises ConfigError on bad input)."""
    return make_workload(phase, isl=isl, osl=osl, context=context, dtype=dtype,
                         kv_dtype=kv_dtype,
                         ttft_slo_s=parse_duration_s(ttft_slo, field="--ttft-slo")
                         if ttft_slo is not None else None,
                         tpot_slo_s=parse_duration_s(tpot_slo, field="--tpot-slo")
                         if tpot_slo is not None else None)


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


def _progress(quiet: bool) -> Progress:
    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(), console=err, transient=True,
                    disable=quiet)


@app.command("plan")
def plan_cmd(
    model: ModelOpt, cluster: ClusterOpt, phase: PhaseOpt = "decode", isl: IslOpt = None,
    osl: OslOpt = None, context: ContextOpt = None, ttft_slo: TtftOpt = None,
    tpot_slo: TpotOpt = None, dtype: DtypeOpt = "bf16", kv_dtype: KvDtypeOpt = None,
    engine: EngineOpt = None, gpu_memory_utilization: MemUtilOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    method: str = typer.Option("auto", help="Searcher: auto (exact if it finishes in time, "
                               "else rl), exact, rl, megatron, megatron-rule, sa, mcmc, random."),
    budget: int = typer.Option(DEFAULT_BUDGET, help="Evaluation budget (budgeted searchers)."),
    seed: int = typer.Option(0, min=0, help="Random seed (>= 0)."),
    json_out: bool = typer.Option(False, "--json", help="Print the plan as JSON on stdout."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write JSON here."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Find the strategy with the most tokens/s per device within memory and SLOs."""
    try:
        _check_output(output, "--output")
        wl = _workload(phase, isl, osl, context, ttft_slo, tpot_slo, dtype, kv_dtype)
        cfg = _engine_config(wl, engine, gpu_memory_utilization, max_num_batched_tokens)
        cm = make_cost_model(model, cluster, wl, cfg)
        total = expected_evaluations(cm, method, budget)
        with _progress(quiet or json_out) as prog:
            task = prog.add_task(f"{method} search", total=total)
            result = search_plan(cm, method=method, budget=budget, seed=seed,
                                 progress=lambda k: prog.advance(task, k), engine=engine)
    except PlannerError as exc:
        raise _fail(exc) from None
    data = result.to_dict()
    if output is not None:
        _write(output, json.dumps(data, indent=2), "--output")
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        from .report.render import render_plan

        # Piped output gets a wide console so the header and tables stay whole.
        render_plan(result, Console() if sys.stdout.isatty() else Console(width=160))
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
    except PlannerError as exc:
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
    if fit:
        for spec, values, loss, n in calibrate(measurements):
            con.print(f"fit {spec.name} on {n} calibration rows: mean |ln error| {loss:.3f}; "
                      f"{values}", highlight=False)


@app.command("compare")
def compare_cmd(
    model: ModelOpt, cluster: ClusterOpt, phase: PhaseOpt = "decode", isl: IslOpt = None,
    osl: OslOpt = None, context: ContextOpt = None, ttft_slo: TtftOpt = None,
    tpot_slo: TpotOpt = None, dtype: DtypeOpt = "bf16", kv_dtype: KvDtypeOpt = None,
    engine: EngineOpt = None, gpu_memory_utilization: MemUtilOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    methods: str = typer.Option("rl,sa,mcmc,random,megatron",
                                help="Comma-separated searchers to compare."),
    budget: int = typer.Option(DEFAULT_BUDGET, help="Evaluations per run (invalid included)."),
    seeds: int = typer.Option(3, help="Runs per method, seeds --seed .. --seed+N-1."),
    seed: int = typer.Option(0, min=0, help="First seed (>= 0)."),
    out: Path = typer.Option(Path("l2s-compare"), "--out", "-o",
                             help="Directory for convergence.png and compare.json."),
    json_out: bool = typer.Option(False, "--json", help="Print the JSON on stdout, no table."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Run several searchers for N seeds on one problem; print mean/best and ratios."""
    from .report.compare import (
        comparison_to_dict,
        is_seed_independent,
        plot_convergence,
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
        wl = _workload(phase, isl, osl, context, ttft_slo, tpot_slo, dtype, kv_dtype)
        cm = make_cost_model(model, cluster, wl, _engine_config(
            wl, engine, gpu_memory_utilization, max_num_batched_tokens))
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

            cmp = run_comparison(cm, names, budget, list(range(seed, seed + seeds)), factory)
    except PlannerError as exc:
        raise _fail(exc) from None
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(PlannerError(f"--out: cannot create {out}: {exc.strerror}")) from None
    data = comparison_to_dict(cmp, cm)
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


def _sweep_progress(quiet: bool, label: str):
    """A progress bar over cells and the two callbacks :func:`run_sweep` drives it with."""
    prog = _progress(quiet)
    task = prog.add_task(label, total=None)

    def on_start(todo: int, skipped: int) -> None:
        prog.update(task, total=todo)
        if skipped and not quiet:
            err.print(f"{skipped} cells already in the results: skipped", highlight=False)

    return prog, on_start, lambda _row: prog.advance(task, 1)


WorkersOpt = Annotated[int, typer.Option(
    "--workers", "-j", help="Local worker processes (0: the CPU count); ignored with "
    "--ray-address.")]
RayOpt = Annotated[str | None, typer.Option(
    "--ray-address", help="Run the cells as Ray tasks on this running cluster: 'auto' or "
    "HOST:PORT (needs Ray: the package's 'ray' extra).")]


@app.command("sweep")
def sweep_cmd(
    grid: Path = typer.Argument(..., help="Grid YAML file (schema: learn_to_shard.sweep.grid; "
                                "example: examples/sweep-small.yaml)."),
    out: Path = typer.Option(Path("l2s-sweep"), "--out", "-o", help="Results folder: "
                             "rows.jsonl, results.parquet, results.csv, plots."),
    workers: WorkersOpt = 0, ray_address: RayOpt = None,
    retry_errors: bool = typer.Option(False, "--retry-errors", help="Run again the cells "
                                      "whose recorded row has an error."),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write tokens_per_device.png "
                               "and cheapest.png."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar, no tables."),
) -> None:
    """Run every cell of a grid (models × clusters × workloads × engines × searchers ×
    budgets × seeds); cells already in the results are skipped. Exit 0: every cell has a row
    without error; 1: some cells failed (their rows say why); 130: interrupted."""
    import os

    from .sweep import load_grid, run_sweep
    from .sweep.report import cheapest, plot_cheapest, plot_tokens_per_device, render_sweep

    try:
        _check_output(out, "--out", directory=True)
        spec = load_grid(grid)
        prog, on_start, on_row = _sweep_progress(quiet, "sweep cells")
        with prog:
            res = run_sweep(spec, out, workers=workers or os.cpu_count() or 1,
                            ray_address=ray_address, retry_errors=retry_errors,
                            on_start=on_start, on_row=on_row)
    except PlannerError as exc:
        raise _fail(exc) from None
    if not quiet:
        render_sweep(res.rows, spec.prices_per_device_hour,
                     Console() if sys.stdout.isatty() else Console(width=200))
    if plots and res.rows:
        plot_tokens_per_device(res.rows, out / "tokens_per_device.png")
        plot_cheapest(cheapest(res.rows, spec.prices_per_device_hour), out / "cheapest.png")
    failed = sum(bool(r.get("error")) for r in res.rows)
    err.print(f"{len(res.ran)} cells run, {res.skipped} skipped, {failed} failed; results: "
              f"{res.parquet}, {res.csv}", highlight=False)
    if res.interrupted:
        err.print("interrupted: run the same command again to resume", highlight=False)
        raise typer.Exit(code=130)
    raise typer.Exit(code=1 if failed else 0)


def _csv_list(text: str, flag: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise PlannerError(f"{flag}: empty list")
    return items


def _prices(text: str | None) -> dict[str, float]:
    """``h100-sxm=2.49,h200=3.5`` → {kind: price per device-hour}."""
    out: dict[str, float] = {}
    for item in _csv_list(text, "--price") if text else []:
        kind, eq, value = item.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = float("nan")
        if not eq or not kind.strip() or not 0 < price < float("inf"):
            raise PlannerError(f"--price: {item!r} is not KIND=PRICE with a positive price per "
                               "device-hour, e.g. h100-sxm=2.49")
        out[kind.strip()] = price
    return out


@app.command("size")
def size_cmd(
    model: ModelOpt,
    rate: float = typer.Option(..., "--rate", help="Requests/s to serve."),
    devices: str = typer.Option("h100-sxm,h200,b200", "--devices", help="Comma-separated "
                                "device kinds to size (l2s devices)."),
    max_devices: int = typer.Option(64, "--max-devices", help="Largest cluster searched per "
                                    "kind; clusters of 1, 2, 4, … up to it are searched."),
    price: str | None = typer.Option(None, "--price", help="Prices per device-hour, "
                                     "KIND=PRICE,… (rank by cost; unpriced kinds by devices)."),
    phase: PhaseOpt = "serve", isl: IslOpt = None, osl: OslOpt = None,
    ttft_slo: TtftOpt = None, tpot_slo: TpotOpt = None, dtype: DtypeOpt = "bf16",
    kv_dtype: KvDtypeOpt = None, engine: EngineOpt = None,
    gpu_memory_utilization: MemUtilOpt = None, max_num_batched_tokens: BatchedTokensOpt = None,
    method: str = typer.Option("auto", help="Searcher per cluster size (see l2s plan)."),
    budget: int = typer.Option(DEFAULT_BUDGET, help="Evaluation budget (budgeted searchers)."),
    seed: int = typer.Option(0, min=0, help="Random seed (>= 0)."),
    out: Path = typer.Option(Path("l2s-size"), "--out", "-o", help="Results folder (resumable, "
                             "as l2s sweep)."),
    workers: WorkersOpt = 0, ray_address: RayOpt = None,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Fewest devices of each kind (or lowest cost at --price) that serve --rate requests/s of
    the workload within the SLOs: replicas of the best plan found per cluster size
    (formula and assumptions: learn_to_shard.sweep.sizing)."""
    import os

    from .sweep import grid_from_data, run_sweep, size_fleets
    from .sweep.report import fleet_table, node_sizes

    try:
        _check_output(out, "--out", directory=True)
        if not 0 < rate < float("inf"):
            raise PlannerError(f"--rate: must be a positive number of requests/s, got {rate}")
        if max_devices < 1:
            raise PlannerError(f"--max-devices: must be >= 1, got {max_devices}")
        wl = _workload(phase, isl, osl, None, ttft_slo, tpot_slo, dtype, kv_dtype)
        if wl.phase is Phase.DECODE:
            raise PlannerError("--phase decode has no request rate (steady decoding at a fixed "
                               "context); use --phase serve with --isl/--osl")
        _engine_config(wl, engine, gpu_memory_utilization, max_num_batched_tokens)
        kinds = _csv_list(devices, "--devices")
        prices = _prices(price)
        unknown = sorted(set(prices) - set(kinds))
        if unknown:
            raise PlannerError(f"--price: {', '.join(unknown)} not among --devices {devices}")
        counts = sorted({2 ** i for i in range(max_devices.bit_length())
                         if 2 ** i <= max_devices} | {max_devices})
        data = {"models": [model], "clusters": [{"device": k, "counts": counts} for k in kinds],
                "workloads": [{k: v for k, v in (("phase", phase), ("isl", isl), ("osl", osl),
                                                 ("ttft_slo", ttft_slo), ("tpot_slo", tpot_slo),
                                                 ("dtype", dtype), ("kv_dtype", kv_dtype),
                                                 ("rate_rps", rate)) if v is not None}],
                "engines": [{k: v for k, v in (("name", engine),
                                               ("gpu_memory_utilization", gpu_memory_utilization),
                                               ("max_num_batched_tokens", max_num_batched_tokens))
                             if v is not None}],
                "searchers": [method], "budgets": [budget], "seeds": [seed]}
        spec = grid_from_data(data, "l2s size")
        prog, on_start, on_row = _sweep_progress(quiet, "size: cluster searches")
        with prog:
            res = run_sweep(spec, out, workers=workers or os.cpu_count() or 1,
                            ray_address=ray_address, on_start=on_start, on_row=on_row)
    except PlannerError as exc:
        raise _fail(exc) from None
    fleets = size_fleets(res.rows, rate_rps=rate, prices=prices, node_sizes=node_sizes(res.rows))
    con = Console() if sys.stdout.isatty() else Console(width=200)
    if fleets:
        con.print(fleet_table(fleets))
        best = fleets[0]
        what = "lowest cost" if best.cost_per_hour is not None else "fewest devices"
        cost = "" if best.cost_per_hour is None else f", {best.cost_per_hour:,.2f} per hour"
        con.print(f"{what}: {best.devices} × {best.device} ({best.replicas} replicas of "
                  f"{best.strategy}{cost}) serve {rate:g} req/s", highlight=False)
    failed = [r for r in res.rows if r.get("error")]
    for r in failed[:3]:
        err.print(f"failed: {r['cluster']}: {r['error']}", markup=False, highlight=False)
    if not fleets:
        err.print(f"no plan on {devices} up to {max_devices} devices meets the SLOs",
                  highlight=False)
    if res.interrupted:
        raise typer.Exit(code=130)
    raise typer.Exit(code=0 if fleets else 1)


def main() -> None:
    """Console entry point (``l2s``)."""
    app()


if __name__ == "__main__":
    main()
