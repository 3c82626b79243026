"""Command line: argument parsing only; the work is in :mod:`learn_to_shard.api`.

Exit codes: 0 a plan was found, 1 no feasible plan (with reasons), 2 bad input (one line).
Every message that can carry user text (file names, a cluster's ``name``) is printed with rich
markup off, so ``[/]`` in it is text, not a tag.
"""

from __future__ import annotations

import json
import os
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
err = Console(stderr=True, soft_wrap=True, markup=False)

#: Most evaluations one search may be given: 2,500x the paper's 4,000 (arXiv 2509.00217 §4).
#: The search records one float64 per evaluation (the convergence curve: 80 MB here), and
#: random search, the fastest, evaluates about 1e5 strategies/s on one CPU core (measured
#: with ``l2s plan --method random --budget 200000``), so the cap is minutes of work; 1e12
#: would be months and terabytes, which looked like a hang.
MAX_BUDGET = 10_000_000
#: Most runs per method in ``compare`` (the paper uses 10): the run list is built up front.
MAX_SEEDS = 1000


def _fail(exc: Exception) -> typer.Exit:
    """Print ``exc`` as one ``error:`` line on stderr (markup off) and return exit code 2."""
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


def _resolve(path: Path) -> Path:
    """``path`` made absolute with symlinks followed as far as they exist; unusable names
    (NUL bytes, too long) come back unchanged, to be refused by whoever opens them."""
    try:
        return path.resolve()
    except (OSError, ValueError, RuntimeError):
        return path


def _same_file(a: Path, b: Path) -> bool:
    """True if ``a`` and ``b`` name the same file (same resolved path, or the same inode
    through a hard link)."""
    if _resolve(a) == _resolve(b):
        return True
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def _model_file(model: str) -> Path | None:
    """The local file ``--model`` reads, if it names one (a shipped name is no local file).

    Follows ``model.hf_config.load_model``'s path rule: a directory means its ``config.json``.
    """
    from .model.hf_config import shipped_model_names

    if model in shipped_model_names():
        return None
    path = Path(model)
    try:
        return path / "config.json" if path.is_dir() else path if path.is_file() else None
    except (OSError, ValueError):
        return None


def _cluster_file(cluster: str) -> Path | None:
    """The local file ``--cluster`` reads, if it names one (not ``DEVICE:COUNT``)."""
    path = Path(cluster.strip())
    try:
        return path if path.is_file() else None
    except (OSError, ValueError):
        return None


def _check_output(path: Path | None, flag: str, *, directory: bool = False,
                  plot: bool = False, inputs: tuple[tuple[Path | None, str], ...] = ()) -> None:
    """Refuse an output path that cannot be written, before any work is done.

    Args:
        path: the output file (or, with ``directory``, the output folder); ``None``: no output.
        flag: the option's name, for the message.
        directory: ``path`` is a folder (created if missing).
        plot: ``path`` is an image; its suffix must be a format matplotlib writes.
        inputs: ``(file, flag)`` of each input file of the command (``None`` entries are
            skipped); the output may not be one of them.

    Raises:
        PlannerError: the path is empty or unusable (NUL byte, name too long), is a directory
            where a file is wanted (or a file where a directory is wanted), its folder does not
            exist or is not writable, the file exists and is not writable, it is one of the
            ``inputs``, or (``plot``) its suffix is not an image format matplotlib writes.
    """
    if path is None:
        return
    if not str(path).strip():
        raise PlannerError(f"{flag}: empty path")
    try:
        is_dir, exists = path.is_dir(), path.exists()
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise PlannerError(f"{flag}: unusable path {str(path)[:80]!r} ({reason})") from None
    if directory:
        if exists and not is_dir:
            raise PlannerError(f"{flag}: {path} exists and is not a directory")
        if is_dir and not os.access(path, os.W_OK | os.X_OK):
            raise PlannerError(f"{flag}: folder {path} is not writable")
        if not is_dir:
            parent = _resolve(path).parent
            while not parent.exists() and parent != parent.parent:
                parent = parent.parent
            if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
                raise PlannerError(f"{flag}: cannot create {path}: {parent} is not a "
                                   f"writable folder")
        return
    if is_dir:
        raise PlannerError(f"{flag}: {path} is a directory; give a file name")
    if not path.parent.is_dir():
        raise PlannerError(f"{flag}: folder {path.parent} does not exist")
    if exists and not os.access(path, os.W_OK):
        raise PlannerError(f"{flag}: {path} exists and is not writable")
    if not exists and not os.access(path.parent, os.W_OK | os.X_OK):
        raise PlannerError(f"{flag}: folder {path.parent} is not writable")
    for source, source_flag in inputs:
        if source is not None and _same_file(path, source):
            raise PlannerError(f"{flag}: {path} is the {source_flag} input; writing it would "
                               f"overwrite the input, choose another file name")
    if plot:
        from matplotlib.figure import Figure

        kinds = Figure().canvas.get_supported_filetypes()
        if path.suffix.lstrip(".").lower() not in kinds:
            raise PlannerError(f"{flag}: cannot write a {path.suffix or 'suffix-less'} image; "
                               f"use one of {', '.join('.' + k for k in sorted(kinds))}")


def _check_distinct(outputs: tuple[tuple[Path, str], ...]) -> None:
    """Refuse two outputs of one command that name the same file.

    Raises:
        PlannerError: naming both flags.
    """
    for i, (a, flag_a) in enumerate(outputs):
        for b, flag_b in outputs[i + 1:]:
            if _same_file(a, b):
                raise PlannerError(f"{flag_a} and {flag_b} are the same file ({a}); one would "
                                   f"overwrite the other, give two names")


def _check_budget(budget: int) -> None:
    """Refuse a budget outside ``[1, MAX_BUDGET]``.

    Raises:
        PlannerError: naming ``--budget`` and the valid range.
    """
    if not 1 <= budget <= MAX_BUDGET:
        raise PlannerError(f"--budget: must be a number of evaluations in [1, {MAX_BUDGET:,}] "
                           f"(the paper uses 4,000), got {budget:,}")


def _write(path: Path, text: str, flag: str) -> None:
    """Write ``text`` to ``path``; an OS error (full disk included) becomes one line naming
    ``flag`` and ``path``, and exit 2."""
    _saved(lambda: path.write_text(text), path, flag)


def _saved(save: Callable[[], object], path: Path, flag: str) -> None:
    """Run ``save`` (which writes ``path``); an OS error becomes one line naming ``flag`` and
    ``path`` (the OS's own error often names no file, e.g. a full disk), and exit 2."""
    try:
        save()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise _fail(PlannerError(f"{flag}: cannot write {path}: {reason}")) from None


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
    budget: int = typer.Option(DEFAULT_BUDGET, help="Evaluation budget (budgeted searchers), "
                               f"at most {MAX_BUDGET:,}."),
    seed: int = typer.Option(0, min=0, help="Random seed (>= 0)."),
    json_out: bool = typer.Option(False, "--json", metavar="",
                                  help="Print the plan as JSON on stdout (a flag: no value)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write JSON here."),
    quiet: bool = typer.Option(False, "--quiet", "-q", metavar="", help="No progress bar."),
) -> None:
    """Find the strategy with the most tokens/s per device within memory and SLOs."""
    try:
        _check_budget(budget)
        _check_output(output, "--output", inputs=((_model_file(model), "--model"),
                                                  (_cluster_file(cluster), "--cluster")))
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
    rows: bool = typer.Option(True, "--rows/--summary-only", metavar="",
                              help="Print every row and the per-operator kernel table."),
    fit: bool = typer.Option(False, "--fit", metavar="",
                             help="Also re-run the declared calibration fits on the "
                             "calibration rows and print the fitted factors (slow)."),
    fit_silicon: bool = typer.Option(False, "--fit-silicon", metavar="",
                                     help="Also fit the operator factors on the measured "
                                     "kernel tables, per device, and print them beside the "
                                     "shipped ones (~5 s)."),
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
        inputs = ((table, "--table"),)
        _check_output(plot, "--plot", plot=True, inputs=inputs)
        _check_output(report, "--report", inputs=inputs)
        _check_distinct(((plot, "--plot"), (report, "--report")))
        measurements = load_table(table)
        result = validate(measurements, table=table)
    except PlannerError as exc:
        raise _fail(exc) from None
    # Piped output gets a wide console so the row ids stay whole; markup off: row ids and
    # file names are user text.
    con = Console(markup=False) if sys.stdout.isatty() else Console(width=160, markup=False)
    render_validation(result, con, rows=rows)
    _saved(lambda: save_plot(result, plot), plot, "--plot")
    _saved(lambda: save_json(result, report), report, "--report")
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
    budget: int = typer.Option(DEFAULT_BUDGET, help="Evaluations per run (invalid included), "
                               f"at most {MAX_BUDGET:,}."),
    seeds: int = typer.Option(3, help="Runs per method, seeds --seed .. --seed+N-1 "
                              f"(at most {MAX_SEEDS})."),
    seed: int = typer.Option(0, min=0, help="First seed (>= 0)."),
    out: Path = typer.Option(Path("l2s-compare"), "--out", "-o",
                             help="Directory for convergence.png and compare.json."),
    json_out: bool = typer.Option(False, "--json", metavar="",
                                  help="Print the JSON on stdout, no table (a flag: no value)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", metavar="", help="No progress bars."),
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
        inputs = ((_model_file(model), "--model"), (_cluster_file(cluster), "--cluster"))
        if out.is_dir():        # a folder still to be created holds nothing to overwrite
            for name in ("compare.json", "convergence.png"):
                _check_output(out / name, f"--out ({name})", inputs=inputs)
        if not names or unknown:
            raise PlannerError(f"--methods: {', '.join(repr(u) for u in unknown)} not among "
                               f"{', '.join(searcher_names())}")
        twice = sorted({m for m in names if names.count(m) > 1})
        if twice:
            raise PlannerError(f"--methods: {', '.join(twice)} given more than once")
        if not 1 <= seeds <= MAX_SEEDS:
            raise PlannerError(f"--seeds: must be a number of runs in [1, {MAX_SEEDS}], "
                               f"got {seeds:,}")
        _check_budget(budget)
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
    plot = out / "convergence.png"
    _saved(lambda: plot_convergence(cmp, plot), plot, "--out")
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        # Piped output gets a wide console so the table's columns stay whole; markup off:
        # the table holds user text (model and cluster names).
        render_comparison(cmp, Console(markup=False) if sys.stdout.isatty()
                          else Console(width=200, markup=False))
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
