"""Command line: argument parsing only; the work is in :mod:`learn_to_shard.api`.

Exit codes: 0 a plan was found, 1 no feasible plan (with reasons), 2 bad input (one line),
3 an internal consistency check failed (a bug to report; one line),
130 interrupted by Ctrl-C (during the search the best so far is printed, after it the plan
without what the interrupt cut short, each with a line saying so; 128 + SIGINT, the shell's
convention).
Every message that can carry user text (file names, a cluster's ``name``) is printed with rich
markup off, so ``[/]`` in it is text, not a tag.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import os
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, cast

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
from typer.core import TyperGroup

from .api import (
    DEFAULT_BUDGET,
    MAX_BUDGET,
    CollectiveSearchInterrupted,
    check_engine_serves,
    check_method,
    checkpoint_dtypes,
    collectives_config,
    cost_config,
    engine_model_refusal,
    engine_refusal,
    engine_runtime,
    exact_optimum,
    expected_evaluations,
    make_cost_model,
    make_workload,
    moe_a2a_refusal,
    prefer_under_load,
    search_collectives,
    search_plan,
    simulate_plan,
    with_images,
)
from .cost.config import (
    ENGINE_PROFILES,
    ENGINE_STEP_FIELDS,
    KV_ADMISSIONS,
    MAX_ROUTING_ALPHA,
    CostModelConfig,
)
from .cost.model import CostModel, check_context
from .errors import ConfigError, InternalError, PlannerError
from .hardware.fabric import scale_up_fabric
from .hardware.presets import MAX_DEVICES, load_device
from .model.hf_config import load_model
from .model.spec import ModelSpec
from .report.plan import Plan, join_reasons
from .search.base import SearchInterrupted, interruptible
from .serving import Requests, ServingLoad, load_trace, trace_mean_lengths
from .serving.load import refuse_beyond_context
from .units import MIN_DURATION_S, format_ms, parse_duration_s, to_ms
from .workload import DType, Phase, Workload

if TYPE_CHECKING:
    from .fidelity.serving import ServingRowResult
    from .report.export import Export
    from .sweep.sizing import Fleet

def _click_class(name: str) -> type[Exception]:
    """The click exception class ``name`` (``UsageError``, ``ClickException``) as typer
    raises it (its own vendored click in recent releases, the click package in older ones),
    found through the public ``typer.BadParameter``'s bases."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


class _OnceGroup(TyperGroup):
    """The command group whose subcommands refuse an option given more than once
    (``--isl 100 … --isl 5``): click keeps the last value without a word, so a repeated
    flag would silently plan something else than the line reads. Options that collect a
    list (``multiple``) and counters may repeat."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """click's resolution, then the repeated-option check on the subcommand's own
        arguments.

        Raises:
            click.UsageError: an option of the subcommand given twice or more (its flag
                names, or a flag and its ``--no-`` form), naming it and what each gave.
        """
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None:       # the error's context is the subcommand's (its --help)
            _refuse_repeated_options(cmd, rest, type(ctx)(cmd, parent=ctx, info_name=name))
        return name, cmd, rest


def _refuse_repeated_options(cmd: Any, args: list[str], ctx: Any) -> None:
    """Raise click's ``UsageError`` where ``args`` (a subcommand's, before parsing) give one
    of ``cmd``'s single-valued options twice or more, in any of click's spellings
    (``--isl 5``, ``--isl=5``, ``-m x``, ``-mx``, bundled flags ``-qo file``); ``--`` ends
    the options, and a line asking for ``--help`` is left to it."""
    by_flag: dict[str, Any] = {}
    for p in cmd.params:
        if p.param_type_name == "option" and not p.multiple and not p.count:
            for flag in (*p.opts, *p.secondary_opts):
                by_flag[flag] = p
    given: dict[str, list[str]] = {}

    def note(opt: Any, shown: str) -> None:
        given.setdefault(str(opt.name), []).append(shown)

    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            break
        if token in ("--help", "-h"):
            return
        if token.startswith("--"):
            flag, eq, value = token.partition("=")
            opt = by_flag.get(flag)
            if opt is not None:
                if opt.is_flag:
                    note(opt, flag)
                elif eq:
                    note(opt, f"{flag} {value}")
                else:
                    note(opt, f"{flag} {args[i + 1]}" if i + 1 < len(args) else flag)
                    i += 1                                 # the option's value
        elif token.startswith("-") and len(token) > 1:
            # click's short options: a value attached (-mx) or the next argument, and flags
            # bundled (-qj), the last of a bundle taking a value
            for k in range(1, len(token)):
                flag = "-" + token[k]
                opt = by_flag.get(flag)
                if opt is None:
                    break
                if opt.is_flag:
                    note(opt, flag)
                    continue
                rest = token[k + 1:]
                if rest:
                    note(opt, f"{flag} {rest}")
                else:
                    note(opt, f"{flag} {args[i + 1]}" if i + 1 < len(args) else flag)
                    i += 1
                break
        i += 1
    for said in given.values():
        if len(said) > 1:
            raise _click_class("UsageError")(f"{said[0].split()[0]} given {len(said)} times "
                                 f"({', '.join(said)}); give it once", ctx)


app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  cls=_OnceGroup,
                  help="Plan distributed LLM inference: parallelism degrees and per-operator "
                       "sharding (Learning to Shard, arXiv 2509.00217).")
err = Console(stderr=True, soft_wrap=True, markup=False)


def _pipe_width(default: int) -> int:
    """Width of tables written to a pipe or file: ``$COLUMNS`` where it is set to a positive
    whole number (``COLUMNS=80 l2s plan … | less``), else ``default``, wide enough that a
    plan's strategy strings are not cut (a terminal uses its own width)."""
    text = os.environ.get("COLUMNS", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else default

#: Most evaluations one search may be given: 2,500x the paper's 4,000 (arXiv 2509.00217 §4).
#: The search records one float64 per evaluation (the convergence curve: 80 MB here), and
#: random search, the fastest, evaluates about 1e5 strategies/s on one CPU core (measured
#: with ``l2s plan --method random --budget 200000``), so the cap is minutes of work; 1e12
#: would be months and terabytes, which looked like a hang.
#: Most runs per method in ``compare`` (the paper uses 10): the run list is built up front.
MAX_SEEDS = 1000


def _fail(exc: Exception) -> typer.Exit:
    """Print ``exc`` as one line on stderr (markup off); the exit for it: 3 for an
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
def _lower(value: str | None) -> str | None:
    """Option values are matched case-insensitively (``--phase SERVE``, ``--engine VLLM``)."""
    return value.lower() if isinstance(value, str) else value


PhaseOpt = Annotated[str, typer.Option(help="decode | prefill | serve.", callback=_lower)]
#: ``l2s size``'s phases: a request rate sizes prompts (prefill) or whole requests (serve);
#: steady decoding at one context has none.
SizePhaseOpt = Annotated[str, typer.Option(
    "--phase", help="prefill | serve (decode has no request rate to size for).",
    callback=_lower)]
IslOpt = Annotated[int | None, typer.Option(help="Prompt length in tokens (prefill/serve).")]
OslOpt = Annotated[int | None, typer.Option(help="Output length in tokens (serve).")]
ContextOpt = Annotated[int | None, typer.Option(help="Context length in tokens (decode).")]
ImagesOpt = Annotated[int | None, typer.Option(
    "--images-per-request", help="Vision-language models (prefill/serve): images per prompt; "
    "each adds its vision tokens to the prompt the language model prefills (the vision "
    "encoder's own compute is not priced).")]
ImageTokensOpt = Annotated[int | None, typer.Option(
    "--image-tokens", help="Prompt tokens per image, where the image size sets them (Qwen-VL: "
    "ceil(H/32)*ceil(W/32); Llama-4: 144 per 336-px tile); fixed by Gemma-3 / LLaVA configs.")]
TtftOpt = Annotated[str | None, typer.Option("--ttft-slo", help="TTFT limit, e.g. 2s, 500ms.")]
TpotOpt = Annotated[str | None, typer.Option("--tpot-slo", help="TPOT limit, e.g. 50ms.")]
DtypeOpt = Annotated[str | None, typer.Option(help="Weight precision: bf16 | fp8 (default: "
                                              "the checkpoint's).", callback=_lower)]
KvDtypeOpt = Annotated[str | None, typer.Option("--kv-dtype", callback=_lower,
                                                help="KV-cache precision "
                                                "(default: as the engine's auto loads the "
                                                "checkpoint: bf16, or fp8 where the "
                                                "checkpoint ships FP8 KV scales, with "
                                                "--engine trtllm, or vllm / sglang for a "
                                                "ModelOpt export).")]
EngineOpt = Annotated[str | None, typer.Option(
    "--engine", callback=_lower, help="Serving engine: vllm, sglang and trtllm restrict the "
    "search to what that engine can launch; each sets its memory policy: "
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
    "ContextTokens, osl or GeneratedTokens; replayed in arrival order). Without --isl/--osl "
    "the search ranks at the trace's mean lengths.")]
NumPromptsOpt = Annotated[int | None, typer.Option(
    "--num-prompts", help="Requests of the whole benchmark, shared over the plan's replicas "
    "(default: 1000 per simulated replica, or 4 per client of a replica's share of a "
    "--concurrency above 250).")]
RangeRatioOpt = Annotated[float, typer.Option(
    "--range-ratio", help="Simulated isl/osl drawn uniformly within ±this fraction (vLLM's "
    "--random-range-ratio; default 0: fixed lengths).")]
DatasetOpt = Annotated[str, typer.Option(
    "--dataset", help="Simulated lengths: random (isl/osl, with --range-ratio) or sharegpt "
    "(ShareGPT's joint length distribution scaled to means of --isl/--osl; its own means are "
    "116/346 tokens).")]
KvAdmissionOpt = Annotated[str | None, typer.Option(
    "--kv-admission", help="Simulated KV admission: reserve (a request's whole isl + osl on "
    "admission; the simulation's default for every engine, vLLM included: its on-demand rule "
    "fits the published rows worse, docs/validation.md), on_demand (vLLM's paged pool: "
    "preempts the newest requests when full, recomputed later), no_future_oom (SGLang with "
    "the radix cache off: admits while no future step runs out). Memory is sized by the "
    "engine's policy either way (the plan's engine line: KV sized per whole request or at "
    "mean occupancy).")]
MoeRoutingOpt = Annotated[str | None, typer.Option(
    "--moe-routing", help="How tokens spread over a MoE model's experts: power-law (the "
    "default: aiconfigurator's expert load, exponent 1.2; the busiest EP rank carries what "
    "it puts there), power-law:ALPHA (another exponent > 0), or uniform (random routing "
    "alone, e.g. an engine balancing experts with EPLB).")]
BatchedTokensOpt = Annotated[int | None, typer.Option(
    "--max-num-batched-tokens", help="Tokens per engine step, serve phase (vLLM's flag; "
    "default: the engine's for the device, e.g. vLLM 8192 on H100, 2048 on A100; 8192 without "
    "--engine): bounds the step, the prefill chunk and the activation workspace. Refused "
    "with --phase decode, whose plans reserve the workspace of a step of the default "
    "budget, as engines do.")]


ReportOpt = typer.Option(None, "--report", help="Also write a self-contained HTML report "
                        "and the same as Markdown into this directory.")


def _workload(phase: str, isl: int | None, osl: int | None, context: int | None,
              ttft_slo: str | None, tpot_slo: str | None, dtype: str | None,
              kv_dtype: str | None, concurrency: int | None = None,
              loads: tuple[str, ...] = ()):
    """Parse the SLO strings and build the workload (raises ConfigError on bad input).

    On the command line ``--isl`` is a prompt length: with ``--phase decode`` (``plan``'s and
    ``compare``'s default, not ``pareto``'s) it is refused, naming ``--context`` and
    ``--phase serve``, where the Python API reads it as the decode context. ``loads``: the
    load flags given (``--request-rate``, ``--trace``), refused first outside the serve
    phase, so a forgotten ``--phase serve`` is what the error names."""
    ph = phase.strip().lower()
    if ph != Phase.SERVE.value and loads:
        raise ConfigError(f"{'/'.join(loads)}: a simulated load needs --phase serve")
    if ph == Phase.DECODE.value and isl is not None and context is None:
        raise ConfigError("--isl is a prompt length (prefill/serve); the decode phase "
                          "takes --context: give --context N, or --phase serve with --isl "
                          "and --osl")
    return make_workload(phase, isl=isl, osl=osl, context=context, dtype=dtype,
                         kv_dtype=kv_dtype, concurrency=concurrency,
                         ttft_slo_s=parse_duration_s(ttft_slo, field="--ttft-slo")
                         if ttft_slo is not None else None,
                         tpot_slo_s=parse_duration_s(tpot_slo, field="--tpot-slo")
                         if tpot_slo is not None else None)


def _serving_load(wl: Workload, concurrency: int | None, request_rate: float | None,
                  trace: Requests | None, num_prompts: int | None, range_ratio: float,
                  seed: int, dataset: str = "random") -> ServingLoad | None:
    """The simulated load of the flags (``trace``: the requests ``load_trace`` read), or
    ``None`` when none is given.

    Raises:
        PlannerError: a load outside the serve phase, several loads, or bad values.
    """
    if concurrency is None and request_rate is None and trace is None:
        given = [flag for flag, on in (("--num-prompts", num_prompts is not None),
                                       ("--range-ratio", bool(range_ratio)),
                                       ("--dataset", dataset != "random")) if on]
        if given:
            raise PlannerError(f"{'/'.join(given)}: only with --concurrency or "
                               "--request-rate, whose simulated load it shapes (a --trace "
                               "brings its own requests and lengths)")
        return None
    if concurrency is not None and num_prompts is not None and 1 <= num_prompts < concurrency:
        raise PlannerError(f"--num-prompts {num_prompts} < --concurrency {concurrency}: the "
                           f"clients could never all be busy; give at least {concurrency} "
                           f"prompts (benchmark clients send several per client)")
    if wl.phase is not Phase.SERVE:
        raise PlannerError("--concurrency/--request-rate/--trace: a simulated load needs "
                           "--phase serve")
    return ServingLoad(concurrency=concurrency, request_rate_per_s=request_rate, trace=trace,
                       num_prompts=num_prompts, range_ratio=range_ratio, dataset=dataset,
                       seed=seed)


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


def _shipped_data_dir() -> Path:
    """The package's shipped data folder (model configs, device presets, measurements,
    calibration factors): ``src/learn_to_shard/data`` in an editable install."""
    return _resolve(Path(__file__).parent / "data")


def _try_create(path: Path, flag: str, directory: bool = False) -> None:
    """Create ``path`` (a file, or with ``directory`` every missing folder of it) and remove
    what was created again: where permission bits say yes but the file system says no
    (``/proc``, a read-only mount seen by root, a name too long), the refusal comes before the
    work, not after it.

    Raises:
        PlannerError: naming ``flag``, ``path`` and the OS's reason.
    """
    made: list[Path] = []                 # folders created by the probe, outermost first
    try:
        if directory:
            missing = [p for p in (path, *path.parents) if not p.exists()]
            for folder in reversed(missing):
                folder.mkdir()
                made.append(folder)
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            path.unlink()
    except OSError as exc:
        raise PlannerError(f"{flag}: cannot create {path}: "
                           f"{exc.strerror or type(exc).__name__}") from None
    finally:
        for folder in reversed(made):
            folder.rmdir()


def _check_output(path: Path | None, flag: str, *, directory: bool = False,
                  plot: bool = False, inputs: tuple[tuple[Path | None, str], ...] = (),
                  shipped_ok: str | None = None) -> None:
    """Refuse an output path that cannot be written, before any work is done.

    Args:
        path: the output file (or, with ``directory``, the output folder); ``None``: no output.
        flag: the option's name, for the message.
        directory: ``path`` is a folder (created if missing).
        plot: ``path`` is an image; its suffix must be a format matplotlib writes.
        inputs: ``(file, flag)`` of each input file of the command (``None`` entries are
            skipped); the output may not be one of them.
        shipped_ok: a subfolder of the package's shipped data folder
            (:func:`_shipped_data_dir`) the output may lie in (``--write-factors`` writes
            the calibration file, ``calibration``); nowhere else in it.

    Raises:
        PlannerError: the path is empty or unusable (NUL byte, name too long), is a directory
            where a file is wanted (or a file where a directory is wanted), its folder does not
            exist or is not writable, the file exists and is not writable, it is one of the
            ``inputs``, it lies in the shipped data folder (a shipped model config or device
            preset named by ``--model llama-3.1-70b`` is read from there, and an editable
            install makes it writable), or (``plot``) its suffix is not an image format
            matplotlib writes.
    """
    if path is None:
        return
    if not str(path).strip():
        raise PlannerError(f"{flag}: empty path")
    data = _shipped_data_dir()
    where = _resolve(path)
    allowed = data / shipped_ok if shipped_ok else None
    if (where == data or data in where.parents) and not (
            allowed is not None and allowed in where.parents and not directory):
        raise PlannerError(f"{flag}: {path} is inside l2s's shipped data ({data}); writing "
                           f"there would change a shipped model, device or measurement file, "
                           f"choose a path outside it")
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
            _try_create(path, flag, directory=True)
        return
    if is_dir:
        raise PlannerError(f"{flag}: {path} is a directory; give a file name")
    if not path.parent.is_dir():
        raise PlannerError(f"{flag}: folder {path.parent} does not exist")
    if exists and not os.access(path, os.W_OK):
        raise PlannerError(f"{flag}: {path} exists and is not writable")
    if not exists and not os.access(path.parent, os.W_OK | os.X_OK):
        raise PlannerError(f"{flag}: folder {path.parent} is not writable")
    if not exists and not path.is_symlink():   # a dangling link is written through
        _try_create(path, flag)
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


def _json_sim(sim: dict) -> dict:
    """A simulated plan (``api.simulate_plan``) as the plan's JSON records it: where every
    request has one output token (no TPOT ratio), its TPOT and ITL statistics are ``null``,
    as the plan's own ``tpot_s`` is, not the simulation's 0."""
    if sim.get("sim_over_analytic", {}).get("mean_tpot") is not None:
        return sim
    summ = {k: (None if ("_tpot_" in k or "_itl_" in k) else v)
            for k, v in sim["simulated"].items()}
    return {**sim, "simulated": summ}


def _check_workers(workers: int) -> None:
    """Refuse a negative ``--workers`` (0 means the CPU count).

    Raises:
        PlannerError: naming ``--workers``.
    """
    if workers < 0:
        raise PlannerError(f"--workers: must be >= 0 (0: the CPU count), got {workers}")


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
    _saved(lambda: path.write_text(text, encoding="utf-8"), path, flag)


def _saved(save: Callable[[], object], path: Path, flag: str) -> None:
    """Run ``save`` (which writes ``path``); an OS error becomes one line naming ``flag`` and
    ``path`` (the OS's own error often names no file, e.g. a full disk), and exit 2."""
    try:
        save()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise _fail(PlannerError(f"{flag}: cannot write {path}: {reason}")) from None


#: Exit code after Ctrl-C: 128 + SIGINT (2), what a shell reports for a command killed by
#: SIGINT (GNU Bash manual, 3.7.5 Exit Status:
#: https://www.gnu.org/software/bash/manual/bash.html#Exit-Status).
EXIT_INTERRUPTED = 130


#: Set once a command has said that Ctrl-C interrupted it (:func:`_exit_interrupted`), so
#: :func:`main` adds its own "interrupted" line only where nothing said so.
_INTERRUPT_SAID: list[bool] = [False]


def _exit_interrupted(message: str) -> NoReturn:
    """Print ``message`` (what the interrupt left done, and how to go on) and exit 130."""
    err.print(message, markup=False, highlight=False)
    _INTERRUPT_SAID[0] = True
    raise typer.Exit(code=EXIT_INTERRUPTED)

TimingOpt = Annotated[bool, typer.Option(
    "--timing/--no-timing", metavar="",
    help="Include the wall-clock values (the \"timing\" key) in the "
    "JSON; without them the JSON is byte-identical for the same inputs and seed.")]


def _progress(quiet: bool) -> Progress:
    """A progress bar on stderr: shown where stderr is a terminal, whatever stdout is (so
    ``--json > file`` keeps it), off with ``-q`` and where stderr is a file or pipe (whose
    readers get no bar's stray lines)."""
    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(), console=err, transient=True,
                    disable=quiet or not err.is_terminal)


def _status(quiet: bool, text: str) -> contextlib.AbstractContextManager[object]:
    """A spinner with ``text`` on stderr for work without a count (the engine table, the
    serving simulation), under the same rule as :func:`_progress`."""
    if quiet or not err.is_terminal:
        return contextlib.nullcontext()
    return err.status(text)


@app.command("plan",
             short_help="Find the strategy with the most "
                        "tokens/s per device within memory and SLOs.")
def plan_cmd(
    model: ModelOpt, cluster: ClusterOpt, phase: PhaseOpt = "decode", isl: IslOpt = None,
    osl: OslOpt = None, context: ContextOpt = None, ttft_slo: TtftOpt = None,
    tpot_slo: TpotOpt = None, dtype: DtypeOpt = None, kv_dtype: KvDtypeOpt = None,
    engine: EngineOpt = None, gpu_memory_utilization: MemUtilOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    method: str = typer.Option("auto", callback=_lower,
                               help="Searcher: auto (exact where its counted work, table rows and "
                               "evaluations, stays within a fixed limit, never timed; else "
                               "rl), "
                               "exact, rl, megatron, megatron-rule, sa, mcmc, random."),
    budget: int = typer.Option(DEFAULT_BUDGET, help="Evaluation budget (budgeted searchers), "
                               f"at most {MAX_BUDGET:,}."),
    seed: int = typer.Option(0, min=0, help="Random seed (>= 0)."),
    json_out: bool = typer.Option(False, "--json", metavar="",
                                  help="Print the plan as JSON on stdout (a flag: no value)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write JSON here "
                                       "(with --export: the launch script instead)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", metavar="",
                               help="No progress bar; with --export, no plan on stderr either "
                               "(the launch script on stdout, and on stderr only its "
                               "warnings: what it cannot express, the simulated load's)."),
    timing: TimingOpt = True,
    concurrency: ConcurrencyOpt = None, request_rate: RateOpt = None, trace: TraceOpt = None,
    num_prompts: NumPromptsOpt = None, range_ratio: RangeRatioOpt = 0.0,
    dataset: DatasetOpt = "random", kv_admission: KvAdmissionOpt = None,
    moe_routing: MoeRoutingOpt = None,
    export: str | None = typer.Option(None, "--export", help="Print the launch command that "
                                      "realises the plan: vllm | sglang | trtllm (with "
                                      "TensorRT-LLM's --config YAML) on stdout, the plan on "
                                      "stderr. Implies --engine X: the search keeps to what X "
                                      "can launch, under X's memory policy."),
    report: Path | None = ReportOpt,
    images_per_request: ImagesOpt = None, image_tokens: ImageTokensOpt = None,
    moe_a2a: str | None = typer.Option(None, "--moe-a2a", help="Expert all-to-all kernels "
                                       "of a MoE server: deepep (normal kernels for prefill, "
                                       "low-latency for decode; SGLang's auto mode, not "
                                       "vLLM's in the serve phase), deepep-normal, deepep-ll; "
                                       "default: the engine's own all-to-all."),
    two_batch_overlap: bool = typer.Option(False, "--two-batch-overlap", metavar="",
                                           help="Overlap MoE "
                                           "dispatch/combine with the other micro-batch's "
                                           "experts (SGLang --enable-two-batch-overlap, vLLM "
                                           "--enable-dbo)."),
    collectives: str = typer.Option("alpha-beta", "--collectives", help="How all-reduce / "
                                    "all-gather / reduce-scatter are priced: alpha-beta (the "
                                    "calibrated formula, default); auto (the cheapest "
                                    "algorithm the device and engine have); an algorithm "
                                    "(ring, tree, nvls, one-shot, two-shot, one-shot+rmsnorm, "
                                    "two-shot+rmsnorm); a launch setting of --engine (e.g. "
                                    "engine-default, nccl-only, enable-nccl-nvls, "
                                    "fuse-allreduce-rms, strategy-oneshot); or "
                                    "search: one search per setting of the engine, the best "
                                    "kept (--export prints its flags)."),
    sequence_parallel: bool = typer.Option(False, "--sequence-parallel", metavar="",
                                           help="Price the all-reduce before each norm as "
                                           "reduce-scatter, norm on token shards, all-gather "
                                           "(no engine launches it at its pinned version; "
                                           "vLLM dropped pass_config enable_sp by 0.33)."),
    gemm_overlap: bool = typer.Option(False, "--gemm-overlap", metavar="",
                                      help="Price the all-gathers / "
                                      "reduce-scatters of --sequence-parallel (which it needs) "
                                      "overlapped with the adjacent GEMM (async TP; no engine "
                                      "launches it at its pinned version)."),
    context_parallel: bool = typer.Option(True, "--context-parallel/--no-context-parallel",
                                          metavar="",
                                          help="Search decode context parallelism (cp: each "
                                          "sequence's KV split by tokens over cp ranks of "
                                          "the TP group, vLLM/SGLang "
                                          "--decode-context-parallel-size)."),
) -> None:
    """Find the strategy with the most tokens/s per device within memory and SLOs.

    Exit 0: a plan; 1: no feasible plan (the reasons are printed); 2: bad input (one error
    line); 3: an internal error (a bug); 4: a plan, but under the load given (--concurrency,
    --request-rate, --trace) the simulation has it missing an SLO with no simulated
    alternative meeting them. Under such a load a simulated alternative is the plan (a note
    says so, and --export launches it) where it meets the SLOs the searched best misses, or
    meets them (or none is given) and serves 10% more tokens/s per device or more. Ctrl-C
    during the search prints the best plan found so far, marked interrupted, and exits
    130."""
    sims: list[dict[str, object]] = []
    try:
        _check_budget(budget)
        check_method(method)
        _check_output(report, "--report", directory=True)
        _check_output(output, "--output", inputs=((_model_file(model), "--model"),
                                                  (_cluster_file(cluster), "--cluster"),
                                                  (trace, "--trace")))
        if report is not None and output is not None and _same_file(report, output):
            raise PlannerError(f"--report and --output are the same path ({output}); the "
                               f"report is a folder, give the output another name")
        _check_export(export)
        engine = _export_engine(export, engine)
        spec = load_model(model)
        loads = tuple(f for f, on in (("--concurrency", concurrency is not None),
                                      ("--request-rate", request_rate is not None),
                                      ("--trace", trace is not None)) if on)
        if len(loads) > 1 and phase.strip().lower() == Phase.SERVE.value:
            # before the trace is read: the flags conflict whatever it holds (outside the
            # serve phase _workload names the phase they need first)
            raise ConfigError("--concurrency, --request-rate, --trace: give exactly one")
        trace_req = load_trace(trace) if trace is not None else None
        if trace_req is not None:
            # Before the workload: the trace's longest request names the trace, not the
            # --isl/--osl (its means) that were never given.
            refuse_beyond_context(spec, trace_req, f"--trace: {trace}")
        from_trace: list[str] = []
        if trace_req is not None and (isl is None or osl is None) \
                and phase.strip().lower() == Phase.SERVE.value:
            # The search prices one length pair: rank at the trace's means.
            mean_isl, mean_osl = trace_mean_lengths(trace_req)
            if isl is None:
                isl, from_trace = mean_isl, [*from_trace, f"--isl {mean_isl}"]
            if osl is None:
                osl, from_trace = mean_osl, [*from_trace, f"--osl {mean_osl}"]
        wl = _workload(phase, isl, osl, context, ttft_slo, tpot_slo,
                       *checkpoint_dtypes(spec, dtype, kv_dtype, engine), concurrency=concurrency,
                       loads=loads)
        wl = with_images(wl, spec, images_per_request, image_tokens)
        if trace is not None and wl.images_per_request:
            raise ConfigError("--images-per-request with --trace: the trace's isl column is "
                              "the prompt as prefilled; add the image tokens to it instead")
        load = _serving_load(wl, concurrency, request_rate, trace_req, num_prompts,
                             range_ratio, seed, dataset)
        cfg = _moe_options(_engine_config(wl, engine, gpu_memory_utilization,
                                          max_num_batched_tokens),
                           spec, engine, moe_a2a, two_batch_overlap, wl.phase)
        cfg = _moe_routing(cfg, spec, moe_routing)
        if gemm_overlap and not sequence_parallel:
            raise ConfigError("--gemm-overlap: overlaps the all-gathers / reduce-scatters of "
                              "sequence parallelism, so it needs --sequence-parallel too")
        if engine is not None and (sequence_parallel or gemm_overlap):
            from .engines.collectives import SEQUENCE_PARALLEL_PASS
            if engine_runtime(engine) not in SEQUENCE_PARALLEL_PASS:
                flag = "--sequence-parallel" if sequence_parallel else "--gemm-overlap"
                have = (f"only {', '.join(SEQUENCE_PARALLEL_PASS)} have one"
                        if SEQUENCE_PARALLEL_PASS else
                        "no engine at its pinned version has one: vLLM 0.33.0 dropped its "
                        "sequence-parallelism and async-TP passes")
                raise ConfigError(f"{flag}: {engine} has no launch option for it ({have}); "
                                  f"drop it or the --engine")
        cfg = dataclasses.replace(cfg, sequence_parallel=sequence_parallel,
                                  gemm_overlap=gemm_overlap)
        if kv_admission is not None:
            if load is None:
                raise ConfigError("--kv-admission: applies to the serving simulation; give "
                                  "--concurrency, --request-rate or --trace")
            if kv_admission not in KV_ADMISSIONS:
                raise ConfigError(f"--kv-admission: {kv_admission!r} is not one of "
                                  f"{', '.join(KV_ADMISSIONS)}")
            cfg = dataclasses.replace(cfg, kv_admission=kv_admission)
        cm = make_cost_model(spec, cluster, wl, cfg, engine=engine,
                             context_parallel=context_parallel)
        check_engine_serves(engine, "--export" if export else "--engine", cm)
        if moe_a2a is not None and \
                scale_up_fabric(cm.cluster.device).vendor not in ("nvidia", "unknown"):
            raise ConfigError(f"--moe-a2a {moe_a2a}: DeepEP runs on NVIDIA GPUs (NVSHMEM), "
                              f"and {cm.cluster.device.name} is not one; leave --moe-a2a out")
        if collectives not in ("alpha-beta", "search"):
            cm = make_cost_model(spec, cm.cluster, wl,
                                 collectives_config(cfg, collectives, engine, cm.cluster),
                                 engine=engine, context_parallel=context_parallel)
        total = expected_evaluations(cm, method, budget)
        with _progress(quiet) as prog:
            task = prog.add_task(f"{method} search", total=total)
            try:
                with interruptible(method, seed, budget):
                    run = search_collectives if collectives == "search" else search_plan
                    result = run(cm, method=method, budget=budget, seed=seed,
                                 progress=lambda k: prog.advance(task, k), engine=engine)
            except SearchInterrupted as stop:
                cm_stop = stop.cost_model if isinstance(stop, CollectiveSearchInterrupted) \
                    else cm
                result = Plan.from_search(cm_stop, stop.result, method, engine=engine)
        # A Ctrl-C after the search (the engine table, the simulation) keeps the plan found:
        # it is printed without what the interrupt cut short, and the command exits 130.
        stage = "the engine table"
        optima = []
        try:
            if export is None and not result.interrupted:
                with _status(quiet, "pricing each engine's best strategy"):
                    optima = _engine_optima(cm, result, engine, gpu_memory_utilization,
                                            max_num_batched_tokens, kv_dtype)
            stage = "the simulation"
            if load is not None and result.feasible and not result.interrupted:
                # The server the plan recommends: --max-num-seqs at the plan's batch, as the
                # export writes it (an engine's default cap could run another batch).
                with _status(quiet, f"simulating the load ({load.describe()})"):
                    sims = simulate_plan(cm, result, load, export_caps=True)
                # Under the load given, a simulated alternative that keeps the SLOs the
                # searched best misses, or serves SWAP_AHEAD more within them, is the plan
                # (and what --export launches). The engine table stays a steady-state
                # comparison: each engine beside the search's unrestricted optimum, which a
                # swap names.
                result, sims = prefer_under_load(result, sims)
            stage = ""
        except KeyboardInterrupt:
            sims = []
            if stage == "the engine table" and load is not None and result.feasible \
                    and not result.interrupted:
                stage = "the engine table and the simulation"    # it comes after the table
        late_interrupt = stage
        left_out = _engines_left_out(cm, kv_dtype) if optima else []
        longest = load.longest_request_tokens(wl.isl, wl.osl) if load is not None else None
        built = _export_of(result, export, cm, longest) if export and result.feasible \
            else None
        launch = built.text() if built is not None else None
        if sims:
            if from_trace:
                for sim in sims:
                    lengths = sim["lengths"]
                    assert isinstance(lengths, dict)
                    lengths["ranked_at"] = {
                        "isl": wl.isl, "osl": wl.osl,
                        "trace_means": [f.split()[0].lstrip("-") for f in from_trace]}
    except (PlannerError, InternalError) as exc:
        raise _fail(exc) from None
    if from_trace and not (json_out or (quiet and export is not None)):
        err.print(f"note: --trace without {' / '.join(f.split()[0] for f in from_trace)}: "
                  f"strategies are ranked at the trace's mean lengths ({', '.join(from_trace)}); "
                  f"the simulation replays every request as recorded", highlight=False)
    data = result.to_dict(timing=timing)
    last = data.pop("timing", None)        # "timing" stays the last key
    if optima:
        data["engine_optima"] = [row for row, _ in optima]
        if result.replaced_under_load is not None:
            # the steady-state optimum the engines are set beside, which the plan replaced
            data["engine_optima_beside"] = result.replaced_under_load
        if left_out:
            data["engine_optima_left_out"] = left_out
    from .report.render import misses_slo_under_load

    exit_code = EXIT_SLO_UNDER_LOAD if misses_slo_under_load(sims) else 0
    if load is not None and not late_interrupt:
        data["simulation"] = [_json_sim(sim) for sim in sims]
        if sims:
            # What exit 4 says, for a script that reads the JSON: the plan meets the SLOs
            # given on the simulated mean under the load (True without SLOs).
            data["slos_met_under_load"] = exit_code != EXIT_SLO_UNDER_LOAD
    if late_interrupt:
        data["interrupted_during"] = late_interrupt
    if last is not None:
        data["timing"] = last
    load_warnings: list[str] = []
    if launch is not None and sims and result.best is not None \
            and sims[0]["strategy"] == result.best.strategy.short():
        from .report.render import simulation_notes

        # The exported plan's load warnings travel with its commands (-q and --output drop
        # the terminal's notes; the report's Launch section holds the same text).
        load_warnings = [t for kind, t in simulation_notes(sims, best_only=True)
                         if kind == "warning"]
        chosen = result.chosen_under_load_note()
        launch = (f"# note (simulated load): {chosen}\n" if chosen else "") + "".join(
            f"# warning (simulated load): {t}\n" for t in load_warnings) + launch
    if report is not None:
        from .report.html import plan_sections

        _write_report(report, f"l2s plan: {cm.model.name} on {cm.cluster.name}",
                      plan_sections(result, cm.model.is_moe, [r for r, _ in optima], sims,
                                    launch))
    if export is not None:
        if not (quiet or json_out):
            from .report.render import render_plan, render_simulation

            plan_con = Console(stderr=True) if sys.stderr.isatty() \
                else Console(stderr=True, width=_pipe_width(160))
            render_plan(result, plan_con)
            if sims:
                render_simulation(sims, plan_con)
        if launch is None:
            if json_out:                    # the infeasible plan's reasons, as without --export
                data["export"] = None
                sys.stdout.write(json.dumps(data, indent=2) + "\n")
            err.print("error: --export: no feasible strategy to export", highlight=False)
            if quiet and not json_out and result.reasons:
                # -q prints no plan, so the reasons it would give go on this line's heels
                err.print(f"no feasible strategy: {join_reasons(list(result.reasons))}",
                          markup=False, highlight=False)
            raise typer.Exit(code=1)
        if output is not None:
            # a script to run as written: a shebang, and, where l2s creates the file, executable
            # by whoever may read it (an existing file, a link or a device keeps its mode)
            created = not output.exists() and not output.is_symlink()
            _write(output, "#!/usr/bin/env bash\n" + launch, "--output")
            if created and output.is_file():
                _saved(lambda: output.chmod(output.stat().st_mode
                                            | ((output.stat().st_mode & 0o444) >> 2)),
                       output, "--output")
        assert built is not None
        if quiet or json_out:
            # What the launch cannot run as planned, and what its simulated load warns of,
            # reach the terminal even where the plan's tables do not (-q, --json); the launch
            # text carries them too.
            for line in load_warnings:
                err.print(f"warning (simulated load): {line}", highlight=False)
            for line in built.warnings:
                err.print(f"warning: --export {export}: {line}", highlight=False)
            for line in built.unexpressed:
                err.print(f"warning: --export {export} cannot express: {line}",
                          highlight=False)
        if json_out:
            data["export"] = {"engine": export, "text": launch,
                              "not_expressible": list(built.unexpressed),
                              "warnings": list(built.warnings),
                              "load_warnings": load_warnings, "notes": list(built.notes),
                              "env": dict(built.env)}
            sys.stdout.write(json.dumps(data, indent=2) + "\n")
        else:
            sys.stdout.write(launch)
        _late_interrupt_exit(late_interrupt)
        raise typer.Exit(code=exit_code)
    if output is not None:
        _write(output, json.dumps(data, indent=2), "--output")
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        if sims and result.best is not None:
            from .report.render import simulation_notes

            # The terminal's load warnings (an SLO missed under the load: exit 4) reach
            # stderr, as --export's do; the JSON holds them under "simulation".
            for kind, line in simulation_notes(sims, best_only=True):
                if kind == "warning":
                    err.print(f"warning (simulated load): {line}", highlight=False,
                              markup=False)
    else:
        from .report.render import render_plan

        # Piped output gets a wide console so the header and tables stay whole.
        con = Console() if sys.stdout.isatty() else Console(width=_pipe_width(160))
        if result.interrupted:
            con.print(f"INTERRUPTED (Ctrl-C) after {result.search['evaluations']} "
                      f"evaluations: the best plan found so far", markup=False, highlight=False)
        render_plan(result, con)
        _render_optima(optima, con, result.replaced_under_load)
        for gone in left_out:
            con.print(f"{gone['engine']}: left out of the table: {gone['reason']}",
                      markup=False, highlight=False)
        if sims:
            from .report.render import render_simulation

            render_simulation(sims, con)
    if result.interrupted:
        done = result.search["evaluations"]
        of = f" of {result.search['budget']:,}" if result.method_used != "exact" \
            and result.search.get("budget") else ""
        _exit_interrupted(f"interrupted after {done:,}{of} evaluations; "
                          + ("the plan shown is the best found so far"
                             if result.best is not None
                             else "no feasible strategy was found before it")
                          + f" (exit {EXIT_INTERRUPTED})")
    _late_interrupt_exit(late_interrupt)
    raise typer.Exit(code=exit_code if result.feasible else 1)


#: ``l2s plan``'s exit status where a plan was found but, under the load given
#: (``--concurrency``, ``--request-rate``, ``--trace``), the simulation has the best plan
#: missing an SLO on the mean and no simulated alternative meeting them: the plan, its export
#: and the warning are printed, and a script sees that the SLOs do not hold under that load.
EXIT_SLO_UNDER_LOAD = 4

#: Infeasible cells ``l2s sweep`` names on stderr; the rest are counted.
SWEEP_INFEASIBLE_SHOWN = 5


def _late_interrupt_exit(stage: str) -> None:
    """After a Ctrl-C that cut ``stage`` short (``the engine table``, ``the simulation``;
    ``""``: none), one line saying the plan printed is complete without it, and exit 130."""
    if stage:
        _exit_interrupted(f"interrupted during {stage}: the plan is the search's complete "
                          f"answer, printed without {stage} (exit {EXIT_INTERRUPTED})")


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


def _launch_engine(engine: str | None) -> str:
    """The engine whose launch commands a table prints without ``--export``: ``--engine``, or
    the engine its cost profile describes (``trtllm-tensorrt``: TensorRT-LLM), else vLLM."""
    from .report.export import EXPORT_ENGINES

    described = engine_runtime(engine) if engine is not None else None
    return described if described in EXPORT_ENGINES else "vllm"


def _check_export(export: str | None) -> None:
    """Refuse an unknown ``--export`` engine before any work is done."""
    from .report.export import EXPORT_ENGINES

    if export is not None and export not in EXPORT_ENGINES:
        raise PlannerError(f"--export: {export!r} is not one of {', '.join(EXPORT_ENGINES)}")


#: ``--moe-a2a`` value -> ``CostModelConfig.moe_a2a_kernel``.
MOE_A2A_FLAGS = {"deepep": "deepep_auto", "deepep-normal": "deepep_normal",
                 "deepep-ll": "deepep_low_latency"}


def _moe_options(cfg: CostModelConfig, model: ModelSpec, engine: str | None,
                 moe_a2a: str | None, two_batch_overlap: bool, phase: Phase) -> CostModelConfig:
    """``cfg`` with the MoE communication options of ``--moe-a2a`` / ``--two-batch-overlap``.

    Raises:
        PlannerError: an unknown ``--moe-a2a``, either option on a dense model, or on
            TensorRT-LLM (its DeepEP / overlap settings are not among the flags this planner
            checks exports against); ``deepep`` (normal kernels for steps that prefill,
            low-latency ones for pure decode steps) with ``--engine vllm`` in the serve phase,
            whose steps are of both kinds: a vLLM server runs one DeepEP mode
            (``--all2all-backend deepep_high_throughput`` or ``deepep_low_latency``, vLLM
            0.33.0 ``ParallelConfig.all2all_backend``), so the plan would price a launch no
            flag gives.
    """
    if moe_a2a is None and not two_batch_overlap:
        return cfg
    flag = "--moe-a2a" if moe_a2a is not None else "--two-batch-overlap"
    if moe_a2a is not None and moe_a2a not in MOE_A2A_FLAGS:
        raise PlannerError(f"--moe-a2a: {moe_a2a!r} is not one of {', '.join(MOE_A2A_FLAGS)}")
    if not model.is_moe:
        raise PlannerError(f"{flag}: {model.name} is dense (no expert all-to-all)")
    if engine in ("trtllm", "trtllm-tensorrt"):
        raise PlannerError(f"{flag} with --engine {engine}: not expressible in TensorRT-LLM's "
                           f"launch settings; use --engine sglang or vllm")
    refusal = moe_a2a_refusal(engine, MOE_A2A_FLAGS.get(moe_a2a or ""), phase)
    if refusal is not None:
        raise PlannerError(f"--moe-a2a {moe_a2a} with --engine {engine}: {refusal}")
    return dataclasses.replace(cfg, moe_a2a_kernel=MOE_A2A_FLAGS.get(moe_a2a or "", None),
                               two_batch_overlap=two_batch_overlap)


def _moe_routing(cfg: CostModelConfig, model: ModelSpec, routing: str | None
                 ) -> CostModelConfig:
    """``cfg`` with ``--moe-routing``: ``power-law`` (the default exponent,
    ``CostModelConfig.moe_routing_alpha``), ``power-law:ALPHA`` or ``uniform`` (``None``).

    Raises:
        PlannerError: another value, an exponent that is not a number > 0, or a dense model.
    """
    if routing is None:
        return cfg
    if not model.is_moe:
        raise PlannerError(f"--moe-routing: {model.name} is dense (no experts to route to)")
    if routing == "uniform":
        return dataclasses.replace(cfg, moe_routing_alpha=None)
    if routing == "power-law":
        return dataclasses.replace(cfg, moe_routing_alpha=CostModelConfig().moe_routing_alpha)
    head, _, tail = routing.partition(":")
    try:
        alpha = float(tail) if head == "power-law" and tail else math.nan
    except ValueError:
        alpha = math.nan
    if not 0 < alpha <= MAX_ROUTING_ALPHA:
        raise PlannerError(f"--moe-routing: {routing!r} is not power-law, power-law:ALPHA "
                           f"(ALPHA a number in (0, {MAX_ROUTING_ALPHA:g}]) or uniform")
    return dataclasses.replace(cfg, moe_routing_alpha=alpha)


def _export_engine(export: str | None, engine: str | None) -> str | None:
    """The engine profile a plan with ``--export`` searches under: the exported engine (so the
    command launches as printed); ``--engine`` naming another profile is refused."""
    if export is None or engine == export:
        return engine
    if engine is None:
        return export
    raise PlannerError(f"--engine {engine} with --export {export}: the exported strategy must "
                       f"be one {export} launches; drop --engine, or use --engine {export}")


def _export_of(plan: Plan, engine: str, cm: CostModel, max_model_len: int | None = None
               ) -> Export:
    """The launch settings of ``plan`` for ``engine`` (``report.export.build_export``)."""
    from .report.export import build_export

    return build_export(plan, engine, model=cm.model, max_model_len=max_model_len,
                        devices_per_node=cm.cluster.device.host_devices, cost_model=cm)


def _engine_optima(cm: CostModel, plan: Plan, engine: str | None,
                   gpu_memory_utilization: float | None,
                   max_num_batched_tokens: int | None,
                   kv_dtype: str | None = None) -> list[tuple[dict, Plan]]:
    """Without ``--engine``: the best strategy each engine can launch (its own memory policy
    and strategy restriction, its exact optimum without runners-up), beside the unrestricted
    optimum ``plan``.

    Returns ``(row, plan)`` pairs; ``row`` is JSON-ready: engine, version, feasible, strategy,
    tokens/s/device, its ratio to the unrestricted optimum, the choices of the
    unrestricted optimum that engine cannot express, and the unrestricted optimum's own
    strategy priced under that engine's profile (``unrestricted_under_engine_*``: its
    tokens/s/device and the rules it then breaks beside the engine's layout and degree
    rules; ``None`` where the engine's space has not its degrees) and ``architecture_note``
    (:func:`~learn_to_shard.engines.architectures.architecture_note`: e.g. the engine runs the
    model class only on its Transformers backend, slower than priced). The unrestricted optimum
    is priced without any engine's host and front-end time, so the ratio mixes what the
    engine's restriction costs with what its profile costs; the strategy priced under the
    engine separates them. Both engine prices use the profile's config alone
    (:func:`_engine_config`): the plan's collective, sequence-parallel, GEMM-overlap and MoE
    all-to-all options are not carried into them. Empty with ``--engine``, when the
    unrestricted answer is not the exact optimum (budgeted answers are not optima; an
    engine's space is a subset, so its exact search is no slower), or when it is infeasible;
    engines that cannot serve the checkpoint on the device (:func:`engine_refusal`: another
    vendor's device, or weights they cannot load there) are left out. Without
    ``kv_dtype`` (``--kv-dtype``) each engine prices the KV cache its ``auto`` gives the
    checkpoint (:func:`~learn_to_shard.engines.default_kv_dtype`), as ``--engine`` does."""
    from .engines import ENGINES
    from .engines.architectures import architecture_note
    from .report.export import build_export

    if engine is not None or plan.method_used != "exact" or plan.best is None:
        return []
    rows = []
    for name, prof in ENGINES.items():
        wl_e = dataclasses.replace(cm.workload, kv_dtype=_engine_kv_dtype(cm, name, kv_dtype))
        if engine_refusal(name, cm.cluster.device, cm.model, wl_e.kv_dtype is DType.FP8):
            continue
        cfg = dataclasses.replace(
            _engine_config(cm.workload, name, gpu_memory_utilization, max_num_batched_tokens),
            moe_routing_alpha=cm.config.moe_routing_alpha)          # --moe-routing
        cm_e = make_cost_model(cm.model, cm.cluster, wl_e, cfg, engine=name,
                               context_parallel=max(cm.space.cp_values) > 1)
        p = exact_optimum(cm_e, engine=name)
        ex = build_export(plan, name, model=cm.model,
                          devices_per_node=cm.cluster.device.host_devices, cost_model=cm)
        best = p.best
        try:                         # the exact optimum's batch may lie off the grid
            cm_same = copy.copy(cm_e)
            cm_same.space = cm_e.space.with_batches([plan.best.strategy.batch])
            same = cm_same.evaluate(plan.best.strategy)
            same_tps: float | None = same.tokens_per_s_per_device
            same_broken: list[str] | None = [
                v for v in same.violations
                if not v.startswith(("engine_layout", "engine_degrees"))]
        except ValueError:           # the engine's space has not these degrees
            same_tps, same_broken = None, None
        rows.append(({
            "engine": name, "version": prof.version, "kv_dtype": wl_e.kv_dtype.value,
            "feasible": best is not None,
            "strategy": best.strategy.short() if best else None,
            "tokens_per_s_per_device": best.tokens_per_s_per_device if best else 0.0,
            "ratio_to_unrestricted": (best.tokens_per_s_per_device
                                      / plan.best.tokens_per_s_per_device) if best else 0.0,
            "unrestricted_not_expressible": ex.unexpressed,
            "unrestricted_under_engine_tokens_per_s_per_device": same_tps,
            "unrestricted_under_engine_violations": same_broken,
            "architecture_note": architecture_note(engine_runtime(name),
                                                   cm.model.config_architecture),
        }, p))
    return rows


def _engine_kv_dtype(cm: CostModel, engine: str, kv_dtype: str | None) -> DType:
    """The KV dtype the engine table prices for ``engine``: the plan's where ``--kv-dtype``
    (``kv_dtype``) set it or the checkpoint is not quantised, else what the engine's
    ``auto`` gives the checkpoint (:func:`~learn_to_shard.engines.default_kv_dtype`)."""
    from .engines import default_kv_dtype

    q = cm.model.quant
    if kv_dtype is not None or q is None:
        return cm.workload.kv_dtype
    return DType(default_kv_dtype(engine, q.kv_cache_fp8, q.modelopt))


def _engines_left_out(cm: CostModel, kv_dtype: str | None = None) -> list[dict[str, str]]:
    """The engines :func:`_engine_optima` leaves out, each with why (:func:`engine_refusal`,
    under the KV dtype the table would price, :func:`_engine_kv_dtype`):
    ``{"engine", "reason"}``."""
    from .engines import ENGINES

    return [{"engine": name, "reason": why} for name in ENGINES
            if (why := engine_refusal(name, cm.cluster.device, cm.model,
                                      _engine_kv_dtype(cm, name, kv_dtype) is DType.FP8))]


def _render_optima(optima: list[tuple[dict, Plan]], con: Console,
                   replaced: str | None = None) -> None:
    """The engine-legal optima beside the unrestricted one (see :func:`_engine_optima`);
    ``replaced``: that optimum's strategy where the plan shown was chosen under the load in
    its place (``api.prefer_under_load``), which the title then names."""
    if not optima:
        return
    from rich.table import Table

    from .report.html import at_engine_costs, not_upper_bound_note

    beside = "the unrestricted optimum above" if replaced is None else \
        (f"the search's unrestricted steady-state optimum, {replaced}, which the plan above "
         f"replaced under the load")
    t = Table(title=f"Best strategy each engine can launch (vs {beside})")
    for col in ("engine", "strategy", "tok/s/device", "× unrestricted",
                "unrestricted strategy at the engine's costs",
                "what the unrestricted optimum needs beyond the engine"):
        t.add_column(col)
    for row, _ in optima:
        same_txt = at_engine_costs(row, sep="\n")
        ok = bool(row["strategy"])
        t.add_row(f"{row['engine']} {row['version']}", row["strategy"] or "none feasible",
                  f"{row['tokens_per_s_per_device']:,.1f}" if ok else "–",
                  f"{row['ratio_to_unrestricted']:.4f}" if ok else "–", same_txt,
                  "\n".join(row["unrestricted_not_expressible"]) or "nothing (launchable as is)")
    con.print(t)
    for row, _ in optima:
        if row.get("architecture_note"):
            con.print(f"{row['engine']}: {row['architecture_note']}", markup=False,
                      highlight=False)
    con.print("× unrestricted: over the optimum priced without an engine's host and front-end "
              "time. Each engine row, its own best and the unrestricted strategy alike, is "
              "priced with that engine's profile (host and front-end time, memory policy, "
              "its kernel factors, the KV dtype its auto gives the checkpoint) and without "
              "this plan's --collectives, --sequence-parallel, "
              "--gemm-overlap, --moe-a2a and --two-batch-overlap; the unrestricted strategy's "
              "price there shows how much of the gap is the profile rather than the layouts "
              "the engine cannot launch.")
    note = not_upper_bound_note([row for row, _ in optima])
    if note:
        con.print(note, highlight=False)


@app.command("validate",
             short_help="Predict published measurements at their "
                        "stated configurations; print the errors.")
def validate_cmd(
    table: Path | None = typer.Option(None, "--table", help="Measurement CSV in the documented "
                                      "format (default: the shipped data/measurements.csv)."),
    plot: Path = typer.Option(Path("validation.png"), "--plot",
                              help="Where to save the predicted-vs-measured log-log plot."),
    report: Path = typer.Option(Path("validation.json"), "--report",
                                help="Where to save the JSON report."),
    rows: bool = typer.Option(True, "--rows/--summary-only", metavar="",
                              help="Print every row and (with the shipped table) the "
                              "per-operator kernel table."),
    fit: bool = typer.Option(False, "--fit", metavar="",
                             help="Also re-run the declared calibration fits on the "
                             "calibration rows (and the engines' step overheads on the "
                             "serving table's) and print the fitted factors (slow)."),
    fit_silicon: bool = typer.Option(False, "--fit-silicon", metavar="",
                                     help="Also fit the operator factors on the measured "
                                     "kernel tables, per device, and print them beside the "
                                     "shipped ones, and the MoE expert block and the MLA "
                                     "module against their measured kernels (~45 s)."),
    write_factors: Path | None = typer.Option(
        None, "--write-factors", help="With --fit: write the fitted factors with their "
        "provenance (rows, loss, date, commit) to this JSON file; the shipped copy the cost "
        "model reads is src/learn_to_shard/data/calibration/factors.json."),
    serving: bool = typer.Option(False, "--serving", metavar="", help="Also predict the "
                                 "published serving-under-load table "
                                 "(data/serving_measurements.csv) with the request-level "
                                 "simulation, with and without the engines' fitted step "
                                 "overheads (about a minute on two cores)."),
) -> None:
    """Predict each published measurement with its stated configuration; print the errors."""
    from .fidelity.fit import calibrate, calibration_rows
    from .fidelity.fit import write_factors as save_factors
    from .fidelity.measurements import default_table_path, load_table
    from .fidelity.predict import row_files
    from .fidelity.stats import validate
    from .report.validate import render_validation, save_json, save_plot

    try:
        measurements = load_table(table)
        # The files read: --table, or the shipped one, and the model and device files its
        # rows name (no output may overwrite any of them).
        files = [(r.id, row_files(r)) for r in measurements]
        inputs: tuple[tuple[Path | None, str], ...] = (
            (table if table is not None else default_table_path(), "--table"),
            *((m, f"--table row {rid}'s model") for rid, (m, _) in files),
            *((d, f"--table row {rid}'s hardware") for rid, (_, d) in files))
        _check_output(plot, "--plot", plot=True, inputs=inputs)
        _check_output(report, "--report", inputs=inputs)
        _check_distinct(((plot, "--plot"), (report, "--report")))
        if write_factors is not None and not fit:
            raise PlannerError("--write-factors: needs --fit (it writes what the fit found)")
        _check_output(write_factors, "--write-factors", inputs=inputs,
                      shipped_ok="calibration")
        if write_factors is not None:
            for flag, other in (("--table", table), ("--plot", plot), ("--report", report)):
                if other is not None and write_factors.resolve() == other.resolve():
                    raise PlannerError(f"--write-factors: {write_factors} is also {flag}; "
                                       f"give another file")
        if fit:
            calibration_rows(measurements)       # nothing to fit is bad input, before any work
        # The per-operator kernel comparison is the shipped kernel tables', not a user
        # table's: printed (and reported) with the shipped measurement table only.
        result = validate(measurements, table=table, silicon=table is None)
        if table is not None and result.results and \
                all(x.predicted is None for x in result.results):
            first = result.results[0]
            raise PlannerError(
                f"--table {table}: none of its {len(result.results)} rows can be predicted "
                f"(row {first.row.id}: {first.status}: {first.reason}); see "
                "l2s models and l2s devices, and the columns in "
                "src/learn_to_shard/data/README.md")
    except (PlannerError, InternalError) as exc:
        raise _fail(exc) from None
    # Piped output gets a wide console so the row ids stay whole; markup off: row ids and
    # file names are user text.
    con = Console(markup=False) if sys.stdout.isatty() \
        else Console(width=_pipe_width(160), markup=False)
    render_validation(result, con, rows=rows)
    _saved(lambda: save_plot(result, plot), plot, "--plot")
    _saved(lambda: save_json(result, report), report, "--report")
    con.print(f"plot: {plot}  report: {report}", highlight=False)
    if fit_silicon:
        from .fidelity.kernels import fit_silicon as run_kernel_fits
        from .fidelity.kernels import mla_kernels, moe_kernel_report
        from .report.validate import render_kernel_fits, render_mla_kernels, render_moe_kernels

        render_kernel_fits(run_kernel_fits(), con)
        render_moe_kernels(moe_kernel_report(), moe_kernel_report(CostModelConfig.for_engine(
            "trtllm", moe_block_overhead_s=0.0, expert_shape_half=0.0,
            block_fp8_local_expert_overhead_s=0.0)), con)
        render_mla_kernels(mla_kernels(), mla_kernels(CostModelConfig.for_engine(
            "trtllm", mla_module_overhead_s=0.0, mla_attention_hbm_efficiency=None)), con)
    if serving:
        serving_doc = _render_serving_check(con, rows=rows)
        _saved(lambda: save_json(result, report, {"serving": serving_doc}), report, "--report")
    if fit:
        from .fidelity.fit import calibrate_serving

        fits = calibrate(measurements) + calibrate_serving()
        for f in fits:
            stat = "median" if f.table == "serving_measurements.csv" else "mean"
            con.print(f"fit {f.spec.name} on {len(f.row_ids)} calibration rows: {stat} |ln "
                      f"error| {f.loss:.3f}; {f.values}", highlight=False)
        if write_factors is not None:
            try:
                con.print(f"factors: {save_factors(fits, write_factors, table)}",
                          highlight=False)
            except PlannerError as exc:
                raise _fail(exc) from None


def _render_serving_check(con: Console, rows: bool = True) -> dict[str, object]:
    """Print ``fidelity.serving``'s per-row table (with ``rows``; ``--summary-only`` leaves
    it out), the held-out rows' errors per source and GPU, and held-out / calibration
    summaries; return them for the ``--report`` JSON (``summary``: split → the medians, with
    and without the engines' step overheads; ``rows``: each row's measured and predicted
    values, or why it was not predicted)."""
    import dataclasses

    from .fidelity.serving import load_rows, predict_table, summarize

    with _progress(False) as prog:
        # Each row simulated twice: with the engines' fitted step overheads and without.
        table = load_rows()
        task = prog.add_task("serving table: simulating each row", total=2 * len(table))
        results = predict_table(on_row=lambda: prog.advance(task), rows=table)
        without = predict_table(overrides=dict.fromkeys(ENGINE_STEP_FIELDS, 0.0),
                                on_row=lambda: prog.advance(task), rows=table)
    if rows:
        _render_serving_rows(con, results)
    _render_serving_sources(con, results)
    summaries = {f"{split}{label}": summarize(res, split)
                 for label, res in (("", results), (" without engine step overheads", without))
                 for split in ("held-out", "calibration")}
    for key, s in summaries.items():
        con.print(f"serving {key} median |error|: TTFT "
                  f"{s['ttft_ms_median_abs_err']:.1%} (n={s['ttft_ms_n']}), TPOT "
                  f"{s['tpot_ms_median_abs_err']:.1%} (n={s['tpot_ms_n']}), output tok/s "
                  f"{s['output_tok_s_median_abs_err']:.1%} (n={s['output_tok_s_n']}); "
                  f"sweep directions {s['sweep_directions']}"
                  + (f" ({s['sweep_ends_unlike']} left out: their ends compare different "
                     "statistics)" if s["sweep_ends_unlike"] else "") + "; "
                  f"{s['predicted']}/{s['rows']} rows predicted", highlight=False,
                  soft_wrap=True)

    def finite(v: object) -> object:
        """``v`` with every non-finite float as None (strict JSON)."""
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [finite(x) for x in v]
        return v

    doc = {"summary": summaries, "rows": [dataclasses.asdict(r) for r in results]}
    return cast("dict[str, object]", finite(doc))


def _render_serving_sources(con: Console, results: Sequence[ServingRowResult]) -> None:
    """Print the held-out rows' median |error| and median signed error per source and GPU
    (``fidelity.serving.summarize_by_source``)."""
    from rich.table import Table

    from .fidelity.serving import summarize_by_source

    t = Table(box=None, pad_edge=False,
              title="serving held out, per source and GPU: median |error| (signed)")
    for col in ("source", "GPU", "rows", "TTFT", "TPOT", "output tok/s"):
        t.add_column(col, no_wrap=col in ("source", "GPU"))
    for g in summarize_by_source(list(results)):
        cells = [f"{g[f'{m}_median_abs_err']:.0%} ({g[f'{m}_median_signed_err']:+.0%}, "
                 f"n={g[f'{m}_n']})" if g[f"{m}_n"] else ""
                 for m in ("ttft_ms", "tpot_ms", "output_tok_s")]
        t.add_row(str(g["source_key"]), str(g["hardware"]), str(g["rows"]), *cells)
    con.print(t)


def _render_serving_rows(con: Console, results: Sequence[ServingRowResult]) -> None:
    """Print one line per serving row: measured → simulated TTFT, TPOT and output tokens/s,
    or why the row is not predicted."""
    from rich.table import Table

    t = Table(box=None, pad_edge=False, title="serving under load: measured → simulated")
    for col in ("id", "split", "TTFT ms", "TPOT ms", "output tok/s", "not predicted because"):
        t.add_column(col)
    for r in results:
        cells = [f"{r.measured[m]:.4g} → {r.predicted[m]:.4g}" if m in r.measured else ""
                 for m in ("ttft_ms", "tpot_ms", "output_tok_s")]
        t.add_row(r.id, r.split, *cells, r.reason or "")
    con.print(t)


@app.command("compare",
             short_help="Run several searchers for N seeds on "
                        "one problem; print mean, best and ratios.")
def compare_cmd(
    model: ModelOpt, cluster: ClusterOpt, phase: PhaseOpt = "decode", isl: IslOpt = None,
    osl: OslOpt = None, context: ContextOpt = None, ttft_slo: TtftOpt = None,
    tpot_slo: TpotOpt = None, dtype: DtypeOpt = None, kv_dtype: KvDtypeOpt = None,
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
                             help="Directory for convergence.png, compare.json and runs/ "
                                  "(one file per finished run)."),
    json_out: bool = typer.Option(False, "--json", metavar="",
                                  help="Print the JSON on stdout, no table (a flag: no value)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", metavar="", help="No progress bars."),
    timing: TimingOpt = True,
    resume: bool = typer.Option(False, "--resume", metavar="",
                                help="Continue an interrupted compare in "
                                "--out: load its finished runs, run the rest."),
    report: Path | None = ReportOpt,
    images_per_request: ImagesOpt = None, image_tokens: ImageTokensOpt = None,
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
        _check_output(report, "--report", directory=True)
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
        spec = load_model(model)
        wl = _workload(phase, isl, osl, context, ttft_slo, tpot_slo,
                       *checkpoint_dtypes(spec, dtype, kv_dtype, engine))
        wl = with_images(wl, spec, images_per_request, image_tokens)
        # --engine restricts the space to what the engine launches, as l2s plan does: the
        # optimum every ratio is measured against is one the engine can run
        cm = make_cost_model(spec, cluster, wl, _engine_config(
            wl, engine, gpu_memory_utilization, max_num_batched_tokens), engine=engine)
        check_engine_serves(engine, "--engine", cm)
        store = RunStore(out, problem_fingerprint(cm, budget))
        if store.check(resume):
            err.print(f"resuming: finished runs are loaded from {store.runs_dir}, not run "
                      "again", markup=False, highlight=False)
        with _progress(quiet) as prog:
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
            render_comparison(cmp, Console() if sys.stdout.isatty()
                              else Console(width=_pipe_width(200)))
        again = [a for a in sys.argv[1:] if a != "--resume"]
        finished = len(store.files())
        _exit_interrupted(f"interrupted (Ctrl-C): {len(cmp.missing)} runs not finished; the "
                          f"table shows the finished ones, saved in {store.runs_dir} "
                          f"({finished} files). Continue with: "
                          f"{shlex.join(['l2s', *again, '--resume'])}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(PlannerError(f"--out: cannot create {out}: {exc.strerror}")) from None
    data = comparison_to_dict(cmp, cm, timing=timing)
    if not any(s.found for s in cmp.summaries):
        # Why nothing is feasible: the closest candidate of a run, as l2s plan explains it
        # (an exhaustive searcher's first: its closest is the nearest).
        from .report.plan import Plan

        exhaustive = ("exact", "megatron", "megatron-rule")
        runs = sorted((r for s in cmp.summaries for r in s.runs if r.closest is not None),
                      key=lambda r: r.method not in exhaustive)
        if runs:
            data["infeasible_reasons"] = Plan.from_search(cm, runs[0], runs[0].method).reasons
    _write(out / "compare.json", json.dumps(data, indent=2), "--out")
    plot = out / "convergence.png"
    _saved(lambda: plot_convergence(cmp, plot), plot, "--out")
    if report is not None:
        from .report.html import compare_sections

        _write_report(report, f"l2s compare: {cm.model.name} on {cm.cluster.name}",
                      compare_sections(data, plot))
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        # Piped output gets a wide console so the table's columns stay whole; markup off:
        # the table holds user text (model and cluster names).
        render_comparison(cmp, Console(markup=False) if sys.stdout.isatty()
                          else Console(width=_pipe_width(200), markup=False))
    err.print(f"plot: {plot}  json: {out / 'compare.json'}", highlight=False)
    why = data.get("infeasible_reasons")
    if isinstance(why, list) and why and not json_out:
        from .report.plan import join_reasons

        err.print(f"no feasible strategy: {join_reasons(why)}", markup=False,
                  highlight=False)
    raise typer.Exit(code=0 if any(s.found for s in cmp.summaries) else 1)


@app.command("pareto",
             short_help="Frontier of tokens/s per device against "
                        "tokens/s per user, with the TPOT SLO.")
def pareto_cmd(
    model: ModelOpt, cluster: ClusterOpt, phase: PhaseOpt = "serve", isl: IslOpt = None,
    osl: OslOpt = None, context: ContextOpt = None, ttft_slo: TtftOpt = None,
    tpot_slo: TpotOpt = None, dtype: DtypeOpt = None, kv_dtype: KvDtypeOpt = None,
    engine: EngineOpt = None, gpu_memory_utilization: MemUtilOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    export: str | None = typer.Option(None, "--export", help="Engine of the frontier table's "
                                      "launch commands: vllm | sglang | trtllm (default: "
                                      "--engine, or the engine its profile describes, "
                                      "else vllm)."),
    out: Path = typer.Option(Path("l2s-pareto"), "--out", "-o",
                             help="Directory for pareto.png and pareto.json."),
    json_out: bool = typer.Option(False, "--json", metavar="",
                                  help="Print the JSON on stdout, no table."),
    report: Path | None = ReportOpt,
    images_per_request: ImagesOpt = None, image_tokens: ImageTokensOpt = None,
) -> None:
    """Frontier of output tokens/s per device against tokens/s per user (1/TPOT) over every
    degree combination on the batch grid (every batch up to 16, then 2^k and 1.5·2^k), with the
    TPOT SLO line; PNG, table and JSON. Without --engine the numbers are the unrestricted
    model's (no engine's host time): add --engine to price the launch commands' engine.

    Exit 0: a frontier (it spans TPOT, so --tpot-slo marks its points, "meets TPOT SLO",
    rather than removing them); 1: no strategy fits memory and --ttft-slo (a filter), the
    reasons on stderr; 2: bad input."""
    from .report.pareto import frontier_rows, pareto, plot_pareto

    try:
        _check_output(out, "--out", directory=True)
        _check_output(report, "--report", directory=True)
        _check_export(export)
        if export is not None and engine is not None and engine != export:
            _export_engine(export, engine)          # refuses: priced for one, launched by another
        spec = load_model(model)
        wl = _workload(phase, isl, osl, context, ttft_slo, tpot_slo,
                       *checkpoint_dtypes(spec, dtype, kv_dtype, engine))
        wl = with_images(wl, spec, images_per_request, image_tokens)
        if wl.phase is Phase.PREFILL:
            raise PlannerError("--phase prefill has no TPOT: the frontier is for decode/serve")
        cfg = _engine_config(wl, engine, gpu_memory_utilization, max_num_batched_tokens)
        cm = make_cost_model(spec, cluster, wl, cfg, engine=engine)
        check_engine_serves(engine, "--engine", cm)
        if export:
            check_engine_serves(export, "--export", cm)
        res = pareto(cm)
        launch_engine: str | None = export or _launch_engine(engine)
        no_launch = "no exported engine runs on this device"
        if launch_engine is not None and (refusal := engine_refusal(
                launch_engine, cm.cluster.device, cm.model,
                cm.workload.kv_dtype is DType.FP8)):
            # no launch command for hardware, weights or a model class it lacks
            no_launch, launch_engine = refusal, None
        rows = frontier_rows(res, cm, engine, launch_engine)
    except (PlannerError, InternalError) as exc:
        raise _fail(exc) from None
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(PlannerError(f"--out: cannot create {out}: {exc.strerror}")) from None
    lengths = f"context={wl.isl}" if wl.phase is Phase.DECODE else f"isl={wl.isl} osl={wl.osl}"
    title = (f"{cm.model.name} on {cm.cluster.name}, {wl.phase.value} {lengths}, "
             f"{wl.weight_dtype.value}" + (f", engine {engine}" if engine else ""))
    plot = plot_pareto(res, out / "pareto.png", title)
    no_fit = None
    if not rows:                     # why: the exact search's closest candidate and counts
        try:
            why = exact_optimum(cm, engine=engine).reasons
        except (PlannerError, InternalError, SearchInterrupted, KeyboardInterrupt):
            why = []
        no_fit = (f"no strategy fits: none of the {res.candidates:,} candidates"
                  + (f"; an exact search's {join_reasons(why)}" if why else ""))
    data = {"model": cm.model.name, "cluster": cm.cluster.name, "engine": engine,
            "workload": {"phase": wl.phase.value, "isl": wl.isl, "osl": wl.osl,
                         "tpot_slo_s": wl.tpot_slo_s, "ttft_slo_s": wl.ttft_slo_s},
            "candidates": res.candidates, "feasible": len(res.points_user_tps),
            "frontier": rows, "no_fit": no_fit}
    _write(out / "pareto.json", json.dumps(data, indent=2), "--out")
    if report is not None:
        from .report.html import pareto_sections

        _write_report(report, f"l2s pareto: {title}",
                      pareto_sections(title, rows, plot, no_fit=no_fit))
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        from rich.table import Table

        con = Console() if sys.stdout.isatty() else Console(width=_pipe_width(200))
        t = Table(title=f"Pareto frontier: {title} ({res.candidates:,} candidates, "
                        f"{len(res.points_user_tps):,} fit)")
        for col in ("strategy", "tok/s/user", "tok/s/device", "TPOT", "meets TPOT SLO",
                    "servers", "launch (one node's lines)"):
            t.add_column(col)
        for r in rows:
            t.add_row(str(r["strategy"]), f"{r['tokens_per_s_per_user']:.1f}",
                      f"{r['tokens_per_s_per_device']:,.1f}",
                      f"{float(str(r['tpot_s'])) * 1e3:.2f} ms",
                      "yes" if r["meets_tpot_slo"] else "no",
                      "—" if r["servers"] is None else str(r["servers"]),
                      f"— ({no_launch})" if r["launch"] is None
                      else "\n".join(cast("list[str]", r["launch"])))
        con.print(t)
        if engine is None and launch_engine is not None and rows:
            odd = sum(1 for r in rows if r["not_expressible"])
            con.print(f"priced without an engine's host and front-end time (no --engine); the "
                      f"{launch_engine} commands launch each layout"
                      + (f" ({odd} of them with what {launch_engine} cannot express: their "
                         f"NOT EXPRESSIBLE lines)" if odd else "")
                      + f", and --engine {launch_engine} prices them as {launch_engine} runs "
                      f"them (lower tokens/s, higher TPOT)", markup=False, highlight=False)
    err.print(f"plot: {plot}  json: {out / 'pareto.json'}", highlight=False)
    if no_fit is not None:
        err.print(no_fit, markup=False, highlight=False)
    raise typer.Exit(code=0 if rows else 1)


@app.command("models",
             short_help="List the shipped model "
                        "configs (--long: their shapes).")
def models_cmd(long: bool = typer.Option(False, "--long", "-l", metavar="",
                                         help="A table: architecture, "
                                          "parameters, layers, attention, experts, context, "
                                          "checkpoint weight format.")) -> None:
    """List the shipped model configs (names, one per line; --long: a table of their
    shapes)."""
    from .model.hf_config import shipped_model_names

    if not long:
        for name in shipped_model_names():
            typer.echo(name)
        return
    from rich.table import Table

    from .model.params import count_params

    t = Table(title="Shipped models (params in billions; active: per token, LM head "
                    "included, input embedding not)")
    for col in ("name", "architecture", "params", "active", "layers", "attention",
                "experts (routed top-k + shared)", "context", "weights"):
        t.add_column(col, justify="right" if col in ("params", "active", "layers", "context")
                     else "left")
    for name in shipped_model_names():
        m = load_model(name)
        pc = count_params(m)
        a = m.attention
        kind = "MQA" if a.num_kv_heads == 1 else "MHA" if a.num_kv_heads == a.num_heads \
            else "GQA"
        att = (f"MLA {a.num_heads} heads, latent {a.kv_lora_rank}" if a.kind.value == "mla"
               else f"{kind} {a.num_heads}/{a.num_kv_heads} heads × {a.head_dim}")
        moe = (f"{m.moe.num_experts} top-{m.moe.top_k}"
               + (f" + {m.moe.num_shared_experts}" if m.moe.num_shared_experts else "")
               if m.moe is not None else "dense")
        q = m.quant
        weights = (f"{q.method}{' (experts)' if q.experts_only else ''}" if q is not None
                   else m.checkpoint_dtype)
        context = f"{m.max_position_embeddings:,}" if m.max_position_embeddings else "—"
        t.add_row(name, m.architecture, f"{pc.total / 1e9:.1f}", f"{pc.active / 1e9:.1f}",
                  str(m.num_layers), att, moe, context, weights)
    (Console() if sys.stdout.isatty() else Console(width=_pipe_width(200))).print(t)


@app.command("devices",
             short_help="List the device presets "
                        "(--long: their datasheet figures).")
def devices_cmd(long: bool = typer.Option(False, "--long", "-l", metavar="",
                                          help="A table: memory, "
                                           "peak FLOP/s per precision, HBM and link "
                                           "bandwidths, devices per scale-up domain.")) -> None:
    """List the device presets (names, one per line; --long: a table of their datasheet
    figures, each cited in the preset's sources)."""
    from .hardware.presets import ALIASES, device_names

    if not long:
        for name in device_names():
            typer.echo(name)
        return
    from rich.table import Table

    t = Table(title="Device presets (dense peaks; link bandwidths per device, one direction)")
    for col in ("name", "device", "aliases", "memory GiB", "BF16 TFLOP/s", "FP8 TFLOP/s",
                "FP4 TFLOP/s", "HBM TB/s", "scale-up domain", "scale-up GB/s",
                "scale-out GB/s"):
        t.add_column(col, justify="left" if col in ("name", "device", "aliases") else "right")

    def tf(x: float | None) -> str:
        return "—" if x is None else f"{x / 1e12:,.0f}"

    for name in device_names():
        d = load_device(name)
        aliases = ", ".join(sorted(a for a, target in ALIASES.items() if target == name))
        t.add_row(name, d.display_name, aliases or "—", f"{d.hbm_bytes / 2**30:,.0f}",
                  tf(d.peak_bf16_flops_per_s), tf(d.peak_fp8_flops_per_s),
                  tf(d.peak_fp4_flops_per_s), f"{d.hbm_bytes_per_s / 1e12:.2f}",
                  str(d.scale_up_domain) + (f" (hosts of {d.devices_per_host})"
                                            if d.devices_per_host else ""),
                  f"{d.scale_up_bytes_per_s / 1e9:,.0f}",
                  f"{d.scale_out_bytes_per_s / 1e9:,.1f}")
    (Console() if sys.stdout.isatty() else Console(width=_pipe_width(200))).print(t)


@app.command("engines",
             short_help="List the serving-engine profiles and "
                        "the source of every fact.")
def engines_cmd() -> None:
    """List the serving-engine profiles: pinned version, what l2s assumes each can launch,
    and the source of every fact."""
    from rich.table import Table

    from .engines import ENGINES
    from .engines.architectures import load_architectures

    con = Console(markup=False) if sys.stdout.isatty() \
        else Console(width=_pipe_width(160), markup=False)
    for eng in ENGINES.values():
        t = Table(title=f"{eng.title} {eng.version} ({eng.launcher})", show_lines=True)
        t.add_column("fact")
        t.add_column("source")
        for fact, src in eng.facts:
            t.add_row(fact, src)
        snap = load_architectures(eng.name)
        if snap is not None:
            extent = (f"{len(snap.native)} model classes registered" if snap.complete else
                      f"{len(snap.native)} of the planner's model classes registered, "
                      f"{len(snap.unverified)} not read at this release")
            t.add_row(f"model classes ({extent}); not registered among the planner's: "
                      f"{', '.join(sorted(snap.planner_absent)) or 'none'}",
                      f"engines/data/architectures.json: {snap.source}")
            for classes, what in ((snap.pp_unsupported, "no pipeline parallelism (forward "
                                   "takes no pp_proxy_tensors; --pp-size > 1 stops at "
                                   "start-up), so the search leaves PP out"),
                                  (snap.attention_dp_unsupported, "no attention-DP "
                                   "(attention not split by --attn-dp-size's attention-TP "
                                   "group, so it would run the wrong heads, or no layer "
                                   "stages to gather the DP ranks' rows for the MoE), so the "
                                   "search leaves attention-DP out of the MoE servers among "
                                   "them (a dense model's DP ranks are servers of their "
                                   "own)"),
                                  (snap.dense_mlp_whole_group, "dense MLP layers that never "
                                   "replicate (no is_dense_ffn_fully_dp: under --attn-dp-size "
                                   "a MoE model's dense layers shard over the whole --tp-size "
                                   "group, which l2s does not price), so the search leaves "
                                   "attention-DP out of the MoE servers with dense layers "
                                   "among them")):
                if classes:
                    t.add_row(f"the planner's classes with {what}: "
                              f"{', '.join(sorted(classes))}",
                              f"engines/data/architectures.json: {snap.source} "
                              f"(scripts/engine_architectures.py)")
        con.print(t)


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


@app.command("sweep",
             short_help="Run every cell of a grid "
                        "of models, clusters, workloads, engines and searchers.")
def sweep_cmd(
    grid: Path = typer.Argument(..., help="Grid YAML file (schema: learn_to_shard.sweep.grid; "
                                "example: examples/sweep-small.yaml)."),
    out: Path = typer.Option(Path("l2s-sweep"), "--out", "-o", help="Results folder: "
                             "rows.jsonl, results.parquet, results.csv, plots."),
    workers: WorkersOpt = 0, ray_address: RayOpt = None,
    retry_errors: bool = typer.Option(False, "--retry-errors", metavar="",
                                      help="Run again the cells "
                                      "whose recorded row has an error."),
    plots: bool = typer.Option(True, "--plots/--no-plots", metavar="",
                               help="Write tokens_per_device.png "
                               "and cheapest.png."),
    quiet: bool = typer.Option(False, "--quiet", "-q", metavar="",
                               help="No progress bar, no tables."),
) -> None:
    """Run every cell of a grid (models × clusters × workloads × engines × searchers ×
    budgets × seeds); cells already in the results are skipped. Exit 0: every cell has a row
    without error; 1: some cells failed (their rows say why); 2: bad input (the grid, a
    flag); 130: interrupted."""
    import os

    from .sweep import load_grid, run_sweep
    from .sweep.report import cheapest, plot_cheapest, plot_tokens_per_device, render_sweep

    try:
        _check_output(out, "--out", directory=True)
        _check_workers(workers)
        spec = load_grid(grid)
        prog, on_start, on_row = _sweep_progress(quiet, "sweep cells")
        with prog:
            res = run_sweep(spec, out, workers=workers or os.cpu_count() or 1,
                            ray_address=ray_address, retry_errors=retry_errors,
                            on_start=on_start, on_row=on_row)
    except PlannerError as exc:
        raise _fail(exc) from None
    rows = res.grid_rows                  # this grid's cells; the folder may hold others
    if not quiet:
        render_sweep(rows, spec.prices_per_device_hour,
                     Console() if sys.stdout.isatty() else Console(width=_pipe_width(200)))
    if plots and rows:
        plot_tokens_per_device(rows, out / "tokens_per_device.png")
        plot_cheapest(cheapest(rows, spec.prices_per_device_hour), out / "cheapest.png")
    failed = sum(bool(r.get("error")) for r in rows)
    infeasible = [r for r in rows if not r.get("error") and r.get("feasible") is False]
    others = (f" (they also hold {res.other_rows} rows of cells not in this grid, from "
              f"earlier runs into {out}; the tables and plots above are this grid's)"
              if res.other_rows else "")
    err.print(f"{len(res.ran)} cells run, {res.skipped} skipped, {failed} failed, "
              f"{len(infeasible)} infeasible; results: {res.parquet}, {res.csv}{others}",
              highlight=False)
    for r in infeasible[:SWEEP_INFEASIBLE_SHOWN]:
        err.print(f"infeasible: {r.get('model')} on {r.get('cluster')} "
                  f"({r.get('workload')}" + (f", engine {r['engine']}" if r.get("engine")
                                              else "")
                  + f", {r.get('searcher')}): {r.get('reasons')}", highlight=False)
    if len(infeasible) > SWEEP_INFEASIBLE_SHOWN:
        err.print(f"... and {len(infeasible) - SWEEP_INFEASIBLE_SHOWN} more infeasible cells "
                  f"(rows with feasible false in {res.csv})", highlight=False)
    if res.interrupted:
        _exit_interrupted("interrupted: run the same command again to resume")
    raise typer.Exit(code=1 if failed else 0)


#: ``l2s size`` searches every cluster size up to this (then powers of two): a fleet of one
#: small instance is as small as its layout, and layouts of 3, 5, 6 or 7 devices
#: (``parallel.space.ALL_DEGREES_UPTO``) fill such clusters where powers of two leave
#: devices over.
SIZE_EVERY_COUNT_UPTO = 8


def size_counts(max_devices: int) -> list[int]:
    """The cluster sizes ``l2s size`` searches per device kind: every count
    ``1 … min(max_devices, SIZE_EVERY_COUNT_UPTO)``, then powers of two, and ``max_devices``
    itself, sorted."""
    every = set(range(1, min(max_devices, SIZE_EVERY_COUNT_UPTO) + 1))
    powers = {2 ** i for i in range(max_devices.bit_length()) if 2 ** i <= max_devices}
    return sorted(every | powers | {max_devices})


def _csv_list(text: str, flag: str) -> list[str]:
    """A comma-separated flag value -> its items, stripped.

    Raises:
        PlannerError: an empty list, or an empty item (``a,,b``, a trailing comma: an item
            deleted or a comma typed for another, not to be dropped silently)."""
    items = [t.strip() for t in text.split(",")]
    if not any(items):
        raise PlannerError(f"{flag}: empty list")
    if not all(items):
        raise PlannerError(f"{flag}: an empty item in {text!r}; give the items separated by "
                           f"single commas")
    return items


def _prices(text: str | None) -> dict[str, float]:
    """``h100-sxm=2.49,h200=3.5`` → {preset name: price per device-hour} (an alias such as
    ``h100`` is its preset's name).

    Raises:
        PlannerError: an item that is not KIND=PRICE with a positive finite price, an unknown
            kind, or a kind priced twice."""
    from .sweep.sizing import price_table

    pairs: list[tuple[str, float]] = []
    for item in _csv_list(text, "--price") if text else []:
        kind, eq, value = item.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = float("nan")
        if not eq or not kind.strip() or not 0 < price < float("inf"):
            raise PlannerError(f"--price: {item!r} is not KIND=PRICE with a positive price per "
                               "device-hour, e.g. h100-sxm=2.49")
        pairs.append((kind.strip(), price))
    try:
        return price_table(pairs)
    except PlannerError as exc:
        raise PlannerError(f"--price: {exc}") from None


@app.command("size",
             short_help="Fewest devices of each kind (or lowest "
                        "cost) that serve a request rate within SLOs.")
def size_cmd(
    model: ModelOpt,
    rate: float = typer.Option(..., "--rate", help="Requests/s to serve."),
    devices: str = typer.Option("h100-sxm,h200,b200", "--devices", help="Comma-separated "
                                "device kinds to size (l2s devices)."),
    max_devices: int = typer.Option(64, "--max-devices", help="Largest cluster searched per "
                                    "kind; clusters of 1 to 8 devices, then 16, 32, … up to "
                                    "it are searched."),
    price: str | None = typer.Option(None, "--price", help="Prices per device-hour, "
                                     "KIND=PRICE,… (rank by cost; unpriced kinds by devices)."),
    phase: SizePhaseOpt = "serve", isl: IslOpt = None, osl: OslOpt = None,
    ttft_slo: TtftOpt = None, tpot_slo: TpotOpt = None, dtype: DtypeOpt = None,
    kv_dtype: KvDtypeOpt = None, engine: EngineOpt = None,
    gpu_memory_utilization: MemUtilOpt = None, max_num_batched_tokens: BatchedTokensOpt = None,
    images_per_request: ImagesOpt = None, image_tokens: ImageTokensOpt = None,
    method: str = typer.Option("auto", callback=_lower,
                               help="Searcher per cluster size (see l2s plan)."),
    budget: int = typer.Option(DEFAULT_BUDGET, help="Evaluation budget (budgeted searchers)."),
    seed: int = typer.Option(0, min=0, help="Random seed (>= 0)."),
    out: Path = typer.Option(Path("l2s-size"), "--out", "-o", help="Results folder (resumable, "
                             "as l2s sweep)."),
    workers: WorkersOpt = 0, ray_address: RayOpt = None,
    quiet: bool = typer.Option(False, "--quiet", "-q", metavar="", help="No progress bar."),
) -> None:
    """Fewest devices of each kind (or lowest cost at --price) that serve --rate requests/s of
    the workload within the SLOs: replicas of the best plan found per cluster size
    (formula and assumptions: learn_to_shard.sweep.sizing). Exit 0: a fleet serves the
    rate; 1: no plan up to --max-devices meets the SLOs (stderr says why); 2: bad input; 4:
    the best fleet found misses a TTFT/TPOT SLO under the rate (its prefill queue, or the
    serving simulation even with extra replicas): printed as the closest, with why; 130:
    interrupted."""
    import os

    from .sweep import grid_from_data, run_sweep
    from .sweep.report import fleet_table, node_sizes
    from .sweep.sizing import (
        PREFILL_TTFT_BUDGETS,
        fleet_options,
        option_key,
        rank_key,
        with_replicas,
    )

    try:
        _check_output(out, "--out", directory=True)
        check_method(method)
        if not 0 < rate < float("inf"):
            raise PlannerError(f"--rate: must be a positive number of requests/s, got {rate}")
        if not 1 <= max_devices <= MAX_DEVICES:
            raise PlannerError(f"--max-devices: must be in [1, {MAX_DEVICES:,}], got "
                               f"{max_devices:,}")
        _check_budget(budget)
        _check_workers(workers)
        if phase == Phase.DECODE.value:
            raise PlannerError("--phase decode has no request rate (steady decoding at a fixed "
                               "context); use --phase serve with --isl/--osl")
        spec_model = load_model(model)
        wl = _workload(phase, isl, osl, None, ttft_slo, tpot_slo,
                       *checkpoint_dtypes(spec_model, dtype, kv_dtype, engine))
        wl = with_images(wl, spec_model, images_per_request, image_tokens)
        check_context(spec_model, wl)               # as plan: before any cluster is searched
        _engine_config(wl, engine, gpu_memory_utilization, max_num_batched_tokens)
        kinds = _csv_list(devices, "--devices")
        names = []
        refused: dict[str, str] = {}          # device kind -> why the engine cannot serve it
        if (why := engine_model_refusal(engine, spec_model)) is not None:
            # the model's class: no device would do, so said once
            raise ConfigError(f"--engine {engine}: {why}; size {spec_model.name} with another "
                              f"engine")
        for kind in kinds:
            try:
                dev = load_device(kind)
            except PlannerError as exc:
                raise PlannerError(f"--devices: {kind!r}: {exc}") from None
            # an engine that cannot serve the checkpoint there (vendor, weights' math,
            # model class): left out here, not one failed search per cluster size
            why = engine_refusal(engine, dev, spec_model, wl.kv_dtype is DType.FP8) \
                if engine is not None else None
            if why is None:
                names.append(dev.name)
            else:
                refused[dev.name] = why
        if refused and not names:
            reasons = "; ".join(f"{d}: {why}" for d, why in refused.items())
            raise ConfigError(f"--engine {engine}: {reasons}; size with another engine, or "
                              f"other --devices")
        prices = _prices(price)
        unknown = sorted(set(prices) - set(names) - set(refused))
        if unknown:
            raise PlannerError(f"--price: {', '.join(unknown)} not among --devices {devices}")
        prices = {k: v for k, v in prices.items() if k in names}
        counts = size_counts(max_devices)
        # the presets' own names (an alias typed, e.g. h100, is searched and shown as
        # h100-sxm), each kind once
        data = {"models": [model], "clusters": [{"device": k, "counts": counts}
                                                for k in dict.fromkeys(names)],
                "workloads": [{k: v for k, v in (("phase", phase), ("isl", isl), ("osl", osl),
                                                 ("ttft_slo", ttft_slo), ("tpot_slo", tpot_slo),
                                                 ("dtype", dtype), ("kv_dtype", kv_dtype),
                                                 ("rate_rps", rate),
                                                 ("images_per_request", images_per_request or None),
                                                 ("image_tokens", image_tokens))
                               if v is not None}],
                "engines": [{k: v for k, v in (("name", engine),
                                               ("gpu_memory_utilization", gpu_memory_utilization),
                                               ("max_num_batched_tokens", max_num_batched_tokens))
                             if v is not None}],
                "searchers": [method], "budgets": [budget], "seeds": [seed]}
        user_ttft_s = parse_duration_s(ttft_slo, field="--ttft-slo") if ttft_slo else None
        if phase == Phase.PREFILL.value and user_ttft_s is not None:
            # A prefill fleet's TTFT is the plan's pass plus its queue: the plan with the most
            # throughput at the whole SLO leaves no room for a queue, so each cluster size is
            # also searched at tighter budgets, whose shorter passes may need fewer replicas
            # (sized below against the SLO asked).
            (base,) = cast(list[dict[str, object]], data["workloads"])
            data["workloads"] = [base] + [
                base | {"ttft_slo": f"{1e3 * user_ttft_s * k:.6g}ms"}
                for k in PREFILL_TTFT_BUDGETS[1:] if user_ttft_s * k >= MIN_DURATION_S]
        spec = grid_from_data(data, "l2s size")
        for d, why in refused.items():
            err.print(f"left out: {d}: {why}", markup=False, highlight=False)
        prog, on_start, on_row = _sweep_progress(quiet, "size: cluster searches")
        with prog:
            res = run_sweep(spec, out, workers=workers or os.cpu_count() or 1,
                            ray_address=ray_address, on_start=on_start, on_row=on_row)
    except PlannerError as exc:
        raise _fail(exc) from None
    rows = res.grid_rows                  # this run's clusters only, not the folder's others
    if len(spec.workloads) > 1:
        # the tighter budgets' plans, sized against the SLO asked, under its label
        label = spec.workloads[0].label
        rows = [r | {"workload": label, "ttft_slo_s": user_ttft_s,
                     "searched_ttft_slo_s": r.get("ttft_slo_s")} for r in rows]
    try:
        options = fleet_options(rows, rate_rps=rate, prices=prices,
                                node_sizes=node_sizes(rows))
        fleets = sorted((fl[0] for fl in options.values()), key=rank_key)
    except PlannerError as exc:                       # "rate: ..." is this command's --rate
        raise _fail(ConfigError(f"--{exc}" if str(exc).startswith("rate:") else str(exc))) \
            from None
    con = Console() if sys.stdout.isatty() else Console(width=_pipe_width(200))
    if res.interrupted:
        # The table and the pick below come from the cells finished before Ctrl-C only.
        con.print(f"INTERRUPTED (Ctrl-C): {len(rows)} of {len(res.cells)} cluster searches "
                  f"finished; what follows is from those alone", markup=False,
                  highlight=False)
    if fleets:
        checks: dict[str, str] = {}
        if wl.phase is Phase.SERVE and not res.interrupted:
            # Each kind's fleet through the serving simulation, re-sized to the replicas that
            # keep up and re-ranked, so the answer below is the simulation-checked one. A
            # re-sized fleet may end larger than the kind's next cluster size's: that one is
            # checked too (the simulation only adds replicas, so a fleet whose steady state
            # is already no smaller than the best checked one cannot win).
            checked = []
            with _status(quiet, "simulating each device kind's fleet under Poisson arrivals"):
                for first_f in fleets:
                    best_f: Fleet | None = None
                    for f in options[(first_f.model, first_f.workload, first_f.device)][
                            :SIZE_SIMULATED_OPTIONS]:
                        if best_f is not None and option_key(f) >= option_key(best_f):
                            break
                        try:
                            line, keep, behind = _simulated_fleet(
                                f, model, wl, engine, gpu_memory_utilization,
                                max_num_batched_tokens, method, budget, seed)
                        except (PlannerError, InternalError) as exc:
                            # the simulation's load is this command's --rate
                            why = str(exc).replace("--request-rate", "--rate")
                            line, keep, behind = f"not simulated: {why}", None, False
                        f = with_replicas(f, keep) if keep else f
                        if behind:
                            f = dataclasses.replace(f, falls_behind=True)
                        if best_f is None or option_key(f) < option_key(best_f):
                            best_f, checks[f.device] = f, line
                    assert best_f is not None
                    checked.append(best_f)
            fleets = sorted(checked, key=rank_key)
        con.print(fleet_table(fleets))
        best = fleets[0]
        what = "lowest cost" if best.cost_per_hour is not None else "fewest devices"
        if res.interrupted:
            what += " among the searches finished"
        cost = "" if best.cost_per_hour is None else f", {best.cost_per_hour:,.2f} per hour"
        # Ranked SLO-meeting first (rank_key): a best fleet that misses is the closest only.
        met = best.meets_slos
        fleet_text = (f"{best.devices:,} × {best.device} ({best.replicas:,} "
                      f"{'replica' if best.replicas == 1 else 'replicas'} of "
                      f"{best.strategy}{cost})")
        if met:
            con.print(f"{what}: {fleet_text} serve {rate:g} req/s", highlight=False)
        else:
            con.print(f"no fleet found serves {rate:g} req/s within the SLOs under this "
                      f"load: the closest, {fleet_text}, "
                      + ("keeps a prefill queue that puts TTFT over the SLO"
                         if not best.queue_slo_met else
                         "falls behind or misses an SLO in the serving simulation")
                      + f" (below; exit {EXIT_SLO_UNDER_LOAD})", highlight=False)
        if engine is None:
            con.print("sized without an engine (no --engine): any per-operator layout, "
                      "priced without an engine's host and front-end time; --engine vllm "
                      "(or sglang, trtllm) sizes the layouts that engine launches, as it "
                      "runs them (usually more devices)", markup=False, highlight=False)
        if best.queue_wait_s is not None:
            from .sweep.sizing import PREFILL_MAX_REPLICA_FACTOR, PREFILL_MAX_UTILIZATION

            con.print(f"prefill queue: each replica at {100 * best.utilization:.0f}% load "
                      f"(at most {100 * PREFILL_MAX_UTILIZATION:.0f}%), a mean wait of "
                      f"{format_ms(best.queue_wait_s, 1)} before the plan's "
                      f"{format_ms(best.ttft_s or 0.0, 1)} pass (M/D/1, Poisson arrivals)"
                      + ("" if best.queue_slo_met else
                         f"; over the TTFT SLO even at "
                         f"{PREFILL_MAX_REPLICA_FACTOR}x the replicas: the plan's pass "
                         f"leaves too little of the SLO for a queue (a tighter "
                         f"--ttft-slo plans a shorter pass)"),
                      markup=False, highlight=False)
        if best.device in checks:
            con.print(checks[best.device], markup=False, highlight=False)
        for f in fleets[1:]:              # the other kinds' checks, below the answer's
            if f.device in checks:
                con.print(f"{f.device}: {checks[f.device]}", markup=False, highlight=False)
    failed = [r for r in rows if r.get("error")]
    for r in failed[:3]:
        err.print(f"failed: {r['cluster']}: {r['error']}", markup=False, highlight=False)
    if not fleets:
        err.print(f"no plan on {', '.join(dict.fromkeys(names))} up to {max_devices} "
                  f"devices meets the SLOs"
                  + (" among the searches finished before the interrupt" if res.interrupted
                     else ""), highlight=False)
        for name in dict.fromkeys(names):  # why, on the largest cluster of each kind
            mine = [r for r in rows if r.get("device") == name and not r.get("error")]
            if mine:
                big = max(mine, key=lambda r: int(str(r.get("cluster_devices") or 0)))
                why = str(big.get("reasons") or "no feasible strategy")
                if wl.phase is Phase.PREFILL:
                    from .report.plan import RELAXATION_TAIL

                    # the plan's SLO hint prices one pass; the fleet's requests also queue
                    why = why.replace(RELAXATION_TAIL, f"{RELAXATION_TAIL} (its pass alone: "
                                      f"the queue at --rate adds to the TTFT, so the fleet "
                                      f"needs a looser SLO still)")
                err.print(f"  {name}:{big.get('cluster_devices')}: {why}",
                          markup=False, highlight=False)
    if res.interrupted:
        _exit_interrupted(f"interrupted: {len(res.cells) - len(rows)} cluster searches not "
                          f"run; run the same command again to resume "
                          f"(exit {EXIT_INTERRUPTED})")
    if fleets and not fleets[0].meets_slos:
        raise typer.Exit(code=EXIT_SLO_UNDER_LOAD)
    raise typer.Exit(code=0 if fleets else 1)



#: Replicas beyond the steady-state count that ``l2s size`` simulates before it gives up.
SIZE_EXTRA_REPLICAS = 3

#: Fleets per device kind (cluster sizes, smallest steady-state fleet first) that ``l2s size``
#: checks with the serving simulation while the one checked grew past the next: Mixtral-8x7B
#: at 0.2 req/s on L40S, one PP3 replica on 3 falls behind (two: 6 devices), while the
#: steady state's next, 4 devices, keeps up.
SIZE_SIMULATED_OPTIONS = 4


def _simulated_fleet(fleet: Fleet, model: str, wl: Workload, engine: str | None,
                     gpu_memory_utilization: float | None, max_num_batched_tokens: int | None,
                     method: str, budget: int, seed: int
                     ) -> tuple[str, int | None, bool]:
    """``l2s size``'s steady-state answer checked with the serving simulation: the fleet's
    plan (searched again on its cluster, as the sweep searched it) under Poisson arrivals at
    its share of the rate, and, where a replica falls behind (its queue grows) or misses an
    SLO on the simulated mean, the fewest replicas up to :data:`SIZE_EXTRA_REPLICAS` more
    that keep up.

    Returns:
        ``(line, replicas, falls_behind)``: one line saying what the simulation found, the
        replicas that keep up (``None`` where none up to the limit does, or the plan was not
        simulated), and whether none up to the limit does.

    Raises:
        PlannerError: the plan cannot be rebuilt or simulated.
    """
    cm = make_cost_model(load_model(model), fleet.searched_cluster, wl,
                         _engine_config(wl, engine, gpu_memory_utilization,
                                        max_num_batched_tokens), engine=engine)
    plan = search_plan(cm, method=method, budget=budget, seed=seed, engine=engine)
    if plan.best is None or plan.best.strategy.short() != fleet.strategy:
        return "not simulated: the plan searched again differs from the sweep's", None, False
    inst = max(1, plan.best.instances)

    def why(sim: dict[str, object]) -> str:
        slo = sim["slo"]
        missed = [m.split(":")[0] for m in (slo["missed"] if isinstance(slo, dict) else [])]
        parts = (["falls behind (its queue grows)"] if sim["overloaded"] else []) + \
            [f"misses the {m}" for m in missed]
        return " and ".join(parts)

    first = ""
    for k in range(fleet.replicas, fleet.replicas + SIZE_EXTRA_REPLICAS + 1):
        per = fleet.rate_rps / k
        sim = simulate_plan(cm, plan, ServingLoad(request_rate_per_s=per * inst), top=1)[0]
        first = first or why(sim)
        if not why(sim):
            break
    summ = cast("dict[str, float]", sim["simulated"])
    stats = (f"TTFT mean {to_ms(summ['mean_ttft_s']):.0f} ms (p99 "
             f"{to_ms(summ['p99_ttft_s']):.0f}), TPOT mean {to_ms(summ['mean_tpot_s']):.1f} ms")
    if why(sim):
        return (f"warning: simulated, a replica {why(sim)} even at "
                f"{fleet.replicas + SIZE_EXTRA_REPLICAS:,} replicas ({per:.3g} req/s each: "
                f"{stats}); the steady-state answer above is optimistic for this load"), \
            None, True
    from .report.render import NEAR_CAPACITY, replicas_for_rate

    util = sim.get("utilization")
    near = ""
    if isinstance(util, float) and util >= NEAR_CAPACITY:
        extra = replicas_for_rate(sim, fleet.rate_rps, NEAR_CAPACITY)
        near = (f"; at {100 * util:.0f}% of a replica's capacity, near saturation: a few "
                f"percent of throughput error moves the latencies by half or more"
                + (f" ({extra:,} replicas keep each at or below {100 * NEAR_CAPACITY:.0f}%)"
                   if extra else ""))
    # The SLOs are met on the simulated mean (what `why` checks, as the search does); where
    # the p90 misses one, say so, as a plan's simulation warning does.
    slo = sim.get("slo")
    p90 = slo.get("p90_missed") if isinstance(slo, dict) else None
    if p90:
        near += (f"; within the SLOs on the mean only, not at p90: "
                 f"{'; '.join(str(m) for m in p90)}")
    if k == fleet.replicas:
        return (f"simulated (Poisson arrivals, {per:.3g} req/s per replica): keeps up "
                f"within the SLOs{' on the mean' if p90 else ''}, {stats}{near}"), k, False
    n = fleet.replicas
    return (f"simulated (Poisson arrivals): with {n} replica{'s' if n != 1 else ''} "
            f"(the steady state's count) at {fleet.rate_rps / n:.3g} req/s each a replica "
            f"{first}; {k} replicas ({k * fleet.instance_devices} × {fleet.device}, "
            f"{per:.3g} req/s each) keep up, and the answer above counts them: "
            f"{stats}{near}"), k, False


def _click_message(exc: Exception) -> str:
    """The message click would print for ``exc`` (its ``format_message``), one string."""
    fmt = getattr(exc, "format_message", None)
    return str(fmt()) if callable(fmt) else str(exc)


def _flag_value_message(msg: str, argv: list[str]) -> str:
    """Click's "Got unexpected extra argument(s) (X)" names only ``X``; where ``X`` follows an
    option on the command line (``--json true``), the message names that option and says it
    takes no value. Any other message comes back unchanged."""
    if not msg.startswith("Got unexpected extra argument"):
        return msg
    extra = msg[msg.rfind("(") + 1:msg.rfind(")")].split()
    for i, token in enumerate(argv):
        if extra and token == extra[0] and i > 0 and argv[i - 1].startswith("-"):
            return (f"{argv[i - 1]}: a flag, it takes no value; got {token!r} after it "
                    f"(drop the value)")
    return msg


def main() -> None:
    """Console entry point (``l2s``).

    A malformed command line (an unknown option, a value that does not parse, a value given
    to a flag such as ``--json true``, a missing required option) is one ``error:`` line that
    names the option and points to ``--help``, exit 2, like every other bad input; Ctrl-C
    where no command says what it left done prints ``interrupted`` and exits 130.
    """
    usage_error, click_exception = _click_class("UsageError"), _click_class("ClickException")
    for stream in (sys.stdout, sys.stderr):
        # A terminal whose encoding cannot hold the plans' symbols (∅, ×, ≤ under an ASCII
        # locale) gets them as escapes rather than a UnicodeEncodeError; files l2s writes
        # are UTF-8 whatever the locale.
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    if hasattr(signal, "SIGPIPE"):
        # A reader that closes stdout early (`l2s plan ... | head`) ends l2s as it ends other
        # Unix tools, by SIGPIPE (exit 141 in the shell), not as click's exit 1, which is
        # "no strategy fits".
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        code = app(standalone_mode=False)
        if code == EXIT_INTERRUPTED and not _INTERRUPT_SAID[0]:
            # typer turns a KeyboardInterrupt that no command caught (start-up, printing)
            # into exit 130 with nothing said.
            err.print("interrupted", markup=False, highlight=False)
    except usage_error as exc:
        ctx = getattr(exc, "ctx", None)
        path = str(getattr(ctx, "command_path", "l2s"))
        where = f"l2s {path.split(' ', 1)[1]}" if " " in path else "l2s"
        msg = _flag_value_message(_click_message(exc).replace("\n", " "), sys.argv[1:])
        if msg.strip():                  # empty: no arguments at all, the help was printed
            err.print(f"error: {msg} (see {where} --help)", markup=False, highlight=False)
        sys.exit(2)
    except typer.Abort:
        err.print("interrupted", markup=False, highlight=False)
        sys.exit(EXIT_INTERRUPTED)
    except click_exception as exc:
        err.print(f"error: {_click_message(exc)}", markup=False, highlight=False)
        sys.exit(int(getattr(exc, "exit_code", 1)))
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
