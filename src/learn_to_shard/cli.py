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
from .cost.model import CostModel
from .errors import PlannerError
from .report.plan import Plan
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
    "--engine", help="Serving engine: vllm, sglang and trtllm restrict the search to what "
    "that engine can launch; each sets its memory policy: "
    f"{', '.join(ENGINE_PROFILES)} (default: vLLM memory accounting, KV reserved per whole "
    "request).")]
MemUtilOpt = Annotated[float | None, typer.Option(
    "--gpu-memory-utilization", help="Fraction of each device's memory the engine may use "
    "(vLLM's flag; default 0.9, trtllm 1.0).")]
BatchedTokensOpt = Annotated[int | None, typer.Option(
    "--max-num-batched-tokens", help="Tokens per engine step, serve phase (vLLM's flag; "
    "default 8192): bounds the step, the prefill chunk and the activation workspace.")]


ReportOpt = typer.Option(None, "--report", help="Also write a self-contained HTML report "
                        "and the same as Markdown into this directory.")


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
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write JSON here "
                                       "(with --export: the launch script instead)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    export: str | None = typer.Option(None, "--export", help="Print the launch command that "
                                      "realises the plan: vllm | sglang | trtllm (with "
                                      "TensorRT-LLM's --config YAML); choices the engine "
                                      "cannot express are listed. Pair with --engine X to "
                                      "search only what X can launch."),
    report: Path | None = ReportOpt,
) -> None:
    """Find the strategy with the most tokens/s per device within memory and SLOs."""
    try:
        _check_output(report, "--report", directory=True)
        _check_output(output, "--output")
        _check_export(export)
        wl = _workload(phase, isl, osl, context, ttft_slo, tpot_slo, dtype, kv_dtype)
        cfg = _engine_config(wl, engine, gpu_memory_utilization, max_num_batched_tokens)
        cm = make_cost_model(model, cluster, wl, cfg, engine=engine)
        total = expected_evaluations(cm, method, budget)
        with _progress(quiet or json_out) as prog:
            task = prog.add_task(f"{method} search", total=total)
            result = search_plan(cm, method=method, budget=budget, seed=seed,
                                 progress=lambda k: prog.advance(task, k), engine=engine)
        optima = _engine_optima(cm, result, engine, budget, seed,
                                gpu_memory_utilization, max_num_batched_tokens) \
            if export is None else []
        launch = _export_text(result, export, cm) if export and result.feasible else None
    except PlannerError as exc:
        raise _fail(exc) from None
    data = result.to_dict()
    if optima:
        data["engine_optima"] = [row for row, _ in optima]
    if report is not None:
        from .report.html import plan_sections

        _write_report(report, f"l2s plan: {cm.model.name} on {cm.cluster.name}",
                      plan_sections(result, cm.model.is_moe, [r for r, _ in optima]))
    if export is not None:
        if launch is None:
            err.print("error: --export: no feasible strategy to export", highlight=False)
            raise typer.Exit(code=1)
        if output is not None:
            _write(output, launch, "--output")
        if json_out:
            data["export"] = {"engine": export, "text": launch}
            sys.stdout.write(json.dumps(data, indent=2) + "\n")
        else:
            sys.stdout.write(launch)
        raise typer.Exit(code=0)
    if output is not None:
        _write(output, json.dumps(data, indent=2), "--output")
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        from .report.render import render_plan

        # Piped output gets a wide console so the header and tables stay whole.
        con = Console() if sys.stdout.isatty() else Console(width=160)
        render_plan(result, con)
        _render_optima(optima, con)
    raise typer.Exit(code=0 if result.feasible else 1)


def _write_report(directory: Path, title: str, sections: list) -> None:
    """``report.html`` + ``report.md`` (``report.html.write_report``); an OS error is one
    line and exit 2."""
    from .report.html import write_report

    try:
        paths = write_report(directory, title, sections)
    except OSError as exc:
        raise _fail(PlannerError(f"--report: cannot write {directory}: {exc.strerror}")) \
            from None
    err.print(f"report: {paths[0]}  {paths[1]}", highlight=False)


def _check_export(export: str | None) -> None:
    """Refuse an unknown ``--export`` engine before any work is done."""
    from .report.export import EXPORT_ENGINES

    if export is not None and export not in EXPORT_ENGINES:
        raise PlannerError(f"--export: {export!r} is not one of {', '.join(EXPORT_ENGINES)}")


def _export_text(plan: Plan, engine: str, cm: CostModel) -> str:
    """The launch script of ``plan`` for ``engine`` (``report.export.export_command``)."""
    from .report.export import export_command

    return export_command(plan, engine, model=cm.model,
                          devices_per_node=cm.cluster.device.scale_up_domain)


def _engine_optima(cm: CostModel, plan: Plan, engine: str | None, budget: int,
                   seed: int, gpu_memory_utilization: float | None,
                   max_num_batched_tokens: int | None) -> list[tuple[dict, Plan]]:
    """Without ``--engine``: the best strategy each engine can launch (its own memory policy
    and strategy restriction, same searcher), beside the unrestricted optimum ``plan``.

    Returns ``(row, plan)`` pairs; ``row`` is JSON-ready: engine, version, feasible, strategy,
    tokens/s/device, its ratio to the unrestricted optimum and the choices of the
    unrestricted optimum that engine cannot express. Empty with ``--engine``, unless the
    unrestricted answer is the exact optimum (budgeted answers are not optima, and an
    engine's space is a subset, so its exact search is no slower), or when it is infeasible.
    """
    from .engines import ENGINES
    from .report.export import build_export

    if engine is not None or plan.method_used != "exact" or plan.best is None:
        return []
    rows = []
    for name, prof in ENGINES.items():
        cfg = _engine_config(cm.workload, name, gpu_memory_utilization, max_num_batched_tokens)
        cm_e = make_cost_model(cm.model, cm.cluster, cm.workload, cfg, engine=name)
        p = search_plan(cm_e, method="exact", budget=budget, seed=seed, engine=name)
        ex = build_export(plan, name, model=cm.model,
                          devices_per_node=cm.cluster.device.scale_up_domain)
        best = p.best
        rows.append(({
            "engine": name, "version": prof.version, "feasible": best is not None,
            "strategy": best.strategy.short() if best else None,
            "tokens_per_s_per_device": best.tokens_per_s_per_device if best else 0.0,
            "ratio_to_unrestricted": (best.tokens_per_s_per_device
                                      / plan.best.tokens_per_s_per_device) if best else 0.0,
            "unrestricted_not_expressible": ex.unexpressed,
        }, p))
    return rows


def _render_optima(optima: list[tuple[dict, Plan]], con: Console) -> None:
    """The engine-legal optima beside the unrestricted one (see :func:`_engine_optima`)."""
    if not optima:
        return
    from rich.table import Table

    t = Table(title="Best strategy each engine can launch (vs the unrestricted optimum above)")
    for col in ("engine", "strategy", "tok/s/device", "× unrestricted",
                "what the unrestricted optimum needs beyond the engine"):
        t.add_column(col)
    for row, _ in optima:
        t.add_row(f"{row['engine']} {row['version']}", row["strategy"] or "none feasible",
                  f"{row['tokens_per_s_per_device']:,.1f}",
                  f"{row['ratio_to_unrestricted']:.4f}",
                  "\n".join(row["unrestricted_not_expressible"]) or "nothing (launchable as is)")
    con.print(t)


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
    report: Path | None = ReportOpt,
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
        _check_output(report, "--report", directory=True)
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
    if report is not None:
        from .report.html import compare_sections

        _write_report(report, f"l2s compare: {cm.model.name} on {cm.cluster.name}",
                      compare_sections(data, plot))
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        # Piped output gets a wide console so the table's columns stay whole.
        render_comparison(cmp, Console() if sys.stdout.isatty() else Console(width=200))
    err.print(f"plot: {plot}  json: {out / 'compare.json'}", highlight=False)
    raise typer.Exit(code=0 if any(s.found for s in cmp.summaries) else 1)


@app.command("pareto")
def pareto_cmd(
    model: ModelOpt, cluster: ClusterOpt, phase: PhaseOpt = "serve", isl: IslOpt = None,
    osl: OslOpt = None, context: ContextOpt = None, ttft_slo: TtftOpt = None,
    tpot_slo: TpotOpt = None, dtype: DtypeOpt = "bf16", kv_dtype: KvDtypeOpt = None,
    engine: EngineOpt = None, gpu_memory_utilization: MemUtilOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    export: str | None = typer.Option(None, "--export", help="Engine of the frontier table's "
                                      "launch commands: vllm | sglang | trtllm (default: "
                                      "--engine, else vllm)."),
    out: Path = typer.Option(Path("l2s-pareto"), "--out", "-o",
                             help="Directory for pareto.png and pareto.json."),
    json_out: bool = typer.Option(False, "--json", help="Print the JSON on stdout, no table."),
    report: Path | None = ReportOpt,
) -> None:
    """Frontier of output tokens/s per device against tokens/s per user (1/TPOT) over every
    degree combination and batch, with the TPOT SLO line; PNG, table and JSON."""
    from .report.pareto import frontier_rows, pareto, plot_pareto

    try:
        _check_output(out, "--out", directory=True)
        _check_output(report, "--report", directory=True)
        _check_export(export)
        wl = _workload(phase, isl, osl, context, ttft_slo, tpot_slo, dtype, kv_dtype)
        if wl.phase is Phase.PREFILL:
            raise PlannerError("--phase prefill has no TPOT: the frontier is for decode/serve")
        cfg = _engine_config(wl, engine, gpu_memory_utilization, max_num_batched_tokens)
        cm = make_cost_model(model, cluster, wl, cfg, engine=engine)
        res = pareto(cm)
        launch_engine = export or (engine if engine in ("vllm", "sglang", "trtllm") else "vllm")
        rows = frontier_rows(res, cm, engine, launch_engine)
    except PlannerError as exc:
        raise _fail(exc) from None
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(PlannerError(f"--out: cannot create {out}: {exc.strerror}")) from None
    title = (f"{cm.model.name} on {cm.cluster.name}, {wl.phase.value} isl={wl.isl} "
             f"osl={wl.osl}, {wl.weight_dtype.value}" + (f", engine {engine}" if engine else ""))
    plot = plot_pareto(res, out / "pareto.png", title)
    data = {"model": cm.model.name, "cluster": cm.cluster.name, "engine": engine,
            "workload": {"phase": wl.phase.value, "isl": wl.isl, "osl": wl.osl,
                         "tpot_slo_s": wl.tpot_slo_s, "ttft_slo_s": wl.ttft_slo_s},
            "candidates": res.candidates, "feasible": len(res.points_user_tps),
            "frontier": rows}
    _write(out / "pareto.json", json.dumps(data, indent=2), "--out")
    if report is not None:
        from .report.html import pareto_sections

        _write_report(report, f"l2s pareto: {title}", pareto_sections(title, rows, plot))
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        from rich.table import Table

        con = Console() if sys.stdout.isatty() else Console(width=200)
        t = Table(title=f"Pareto frontier: {title} ({res.candidates:,} candidates, "
                        f"{len(res.points_user_tps):,} fit)")
        for col in ("strategy", "tok/s/user", "tok/s/device", "TPOT", "meets TPOT SLO",
                    "servers", "launch (each server)"):
            t.add_column(col)
        for r in rows:
            t.add_row(str(r["strategy"]), f"{r['tokens_per_s_per_user']:.1f}",
                      f"{r['tokens_per_s_per_device']:,.1f}",
                      f"{float(str(r['tpot_s'])) * 1e3:.2f} ms",
                      "yes" if r["meets_tpot_slo"] else "no", str(r["servers"]),
                      str(r["export"]))
        con.print(t)
    err.print(f"plot: {plot}  json: {out / 'pareto.json'}", highlight=False)
    raise typer.Exit(code=0 if rows else 1)


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
