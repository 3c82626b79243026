"""Compare searchers on one problem over several seeds: table, convergence plot, JSON.

``l2s compare`` parses its arguments and calls :func:`run_comparison`, then
:func:`render_comparison`, :func:`plot_convergence` and :func:`comparison_to_dict`.

Per method the summary holds the mean and the best (best-of-N) of each run's best feasible
throughput (tokens/s per device; a run that found nothing feasible counts as 0), the ratios of
the mean to ``random``'s mean (the paper's Table 1) and of the best to ``megatron``'s best (the
paper's Fig. 3), the mean evaluations spent (invalid ones included) and the mean wall time.

Seed-independent searchers (``megatron``, ``megatron-rule``, and any searcher whose class sets
``deterministic = True``) run once; that run stands for every seed.

Interruption and resumption: with a :class:`RunStore` every finished (method, seed) run is
written to ``DIR/runs/<method>-seed<seed>.json`` as soon as it finishes (temporary file, then
``os.replace``, so a file is whole or absent), with a fingerprint of the problem
(:func:`problem_fingerprint`). A Ctrl-C raises :class:`ComparisonInterrupted` carrying the
comparison of the runs finished so far; a later :func:`run_comparison` with the same store loads
those runs instead of running them again, so it reaches the result of an uninterrupted run
(searches are deterministic for a given seed on one machine, see docs/design.md).

Wall-clock values are the only ones that differ between two comparisons with the same inputs;
:func:`comparison_to_dict` keeps all of them under one ``"timing"`` key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from .. import __version__
from ..cost.model import CostModel
from ..errors import PlannerError
from ..search import get_searcher
from ..search.base import ProgressFn, SearchResult, is_timing_key

#: Searchers whose result does not depend on the seed (run once per comparison).
SEED_INDEPENDENT = frozenset({"megatron", "megatron-rule"})
#: Points kept per convergence curve in the JSON (evenly spaced over the budget).
CURVE_POINTS = 200

#: ``factory(method, seed)`` → progress callback for that run (or None).
ProgressFactory = Callable[[str, int], ProgressFn | None]


def is_seed_independent(method: str) -> bool:
    """True if ``method`` gives the same result for every seed (it is run once)."""
    if method in SEED_INDEPENDENT:
        return True
    return bool(getattr(get_searcher(method), "deterministic", False))


@dataclass
class MethodSummary:
    """One row of the comparison table.

    Attributes:
        method: searcher name.
        runs: one result per seed (a seed-independent method repeats its single result).
        mean: mean over seeds of the best feasible throughput, tokens/s per device.
        best: best over seeds (best-of-N), tokens/s per device.
        evaluations: mean evaluations spent per run (invalid ones included).
        wall_s: mean wall-clock seconds per run.
        found: runs that found a feasible strategy.
    """

    method: str
    runs: list[SearchResult]
    mean: float
    best: float
    evaluations: float
    wall_s: float
    found: int
    ratios: dict[str, float | None] = field(default_factory=dict)


@dataclass
class Comparison:
    """Result of :func:`run_comparison`.

    Attributes:
        problem: model, cluster, workload and space size (for reports).
        budget: evaluation budget per run.
        seeds: seeds used.
        summaries: one per method, in the order asked (when interrupted: the methods with
            at least one finished run, summarised over those runs).
        wall_s: wall time of this call, seconds (runs loaded from a store cost none).
        optimum: the exact optimum, tokens/s per device (``None``: unknown).
        optimum_note: how the optimum was obtained, or why it is unknown.
        optimum_wall_s: seconds spent computing the optimum (``None``: not computed here).
        missing: (method, seed) runs not finished (non-empty only when interrupted).
        interrupted: Ctrl-C stopped the comparison before every run finished.
    """

    problem: dict[str, object]
    budget: int
    seeds: list[int]
    summaries: list[MethodSummary]
    wall_s: float
    optimum: float | None = None
    optimum_note: str = ""
    optimum_wall_s: float | None = None
    missing: list[tuple[str, int]] = field(default_factory=list)
    interrupted: bool = False

    def summary(self, method: str) -> MethodSummary | None:
        """The summary of ``method``, if it was run."""
        return next((s for s in self.summaries if s.method == method), None)


def _problem(cm: CostModel) -> dict[str, object]:
    wl = cm.workload
    return {"model": cm.model.name, "cluster": cm.cluster.name,
            "devices": cm.cluster.num_devices, "phase": wl.phase.value, "isl": wl.isl,
            "osl": wl.osl, "weight_dtype": wl.weight_dtype.value,
            "kv_dtype": wl.kv_dtype.value, "tpot_slo_s": wl.tpot_slo_s,
            "ttft_slo_s": wl.ttft_slo_s, "space_size": float(cm.space.size)}


def _ratio(a: float, b: float | None) -> float | None:
    return None if b is None or not b > 0 else a / b


def summarise(method: str, runs: list[SearchResult]) -> MethodSummary:
    """Mean/best/evaluations/wall of one method's runs (ratios are filled by the caller)."""
    best = np.array([r.best_objective for r in runs], dtype=np.float64)
    return MethodSummary(method=method, runs=runs, mean=float(best.mean()),
                         best=float(best.max()),
                         evaluations=float(np.mean([r.evaluations for r in runs])),
                         wall_s=float(np.mean([r.wall_s for r in runs])),
                         found=int(sum(r.best_action is not None for r in runs)))


def add_ratios(summaries: list[MethodSummary], optimum: float | None = None) -> None:
    """Fill ``ratios``: ``mean/random``, ``best/random``, ``mean/megatron``, ``best/megatron``
    and, when the exact optimum is known, ``mean/optimum`` and ``best/optimum`` (the fraction
    of the optimum each searcher reaches)."""
    ref = {s.method: s for s in summaries}
    rnd, meg = ref.get("random"), ref.get("megatron")
    for s in summaries:
        s.ratios = {
            "mean/random": _ratio(s.mean, rnd.mean if rnd else None),
            "best/random": _ratio(s.best, rnd.best if rnd else None),
            "mean/megatron": _ratio(s.mean, meg.best if meg else None),
            "best/megatron": _ratio(s.best, meg.best if meg else None),
            "mean/optimum": _ratio(s.mean, optimum),
            "best/optimum": _ratio(s.best, optimum),
        }


def exact_optimum(cm: CostModel, time_limit_s: float | None = None,
                  summaries: list[MethodSummary] | None = None) -> tuple[float | None, str]:
    """The exact optimum of ``cm`` (reusing an ``exact`` run among ``summaries``), or None with
    the reason when it needs more than the exact search's default work limit
    (:data:`~learn_to_shard.search.exact.DEFAULT_WORK_LIMIT`, a deterministic count) or, if
    given, more than ``time_limit_s`` seconds."""
    for s in summaries or []:
        if s.method == "exact":
            return s.best, "from the exact run"
    from ..search.exact import DEFAULT_WORK_LIMIT, try_exact

    res = try_exact(cm, time_limit_s)
    if res is None:
        limit = f"{DEFAULT_WORK_LIMIT:,} units of work" + (
            "" if time_limit_s is None else f" or {time_limit_s:g} s")
        return None, f"exact not tractable within {limit}"
    return res.best_objective, f"exact optimum ({res.notes['exact_work']:,} units of work)"


# ---------------------------------------------------------------------------- run store
#: Sub-directory of ``--out`` holding one file per finished run.
RUNS_DIR = "runs"
#: Layout version of a run file.
RUN_FORMAT = 1


def _digest(value: object) -> str:
    text = json.dumps(_jsonable(value), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def problem_fingerprint(cm: CostModel, budget: int) -> dict[str, object]:
    """What a stored run depends on besides its method and seed: the package version, the
    budget, a SHA-256 prefix (16 hex digits) of each of model, cluster, workload and
    cost-model factors (every field of their dataclasses), and the engine whose launchable
    layouts the search space holds (``None``: every layout)."""
    return {"version": __version__, "budget": budget,
            "model": _digest(dataclasses.asdict(cm.model)),
            "cluster": _digest(dataclasses.asdict(cm.cluster)),
            "workload": _digest(dataclasses.asdict(cm.workload)),
            "cost_model": _digest(dataclasses.asdict(cm.config)),
            "space_engine": cm.space.engine.name if cm.space.engine is not None else None}


class RunStore:
    """The finished runs of one comparison, one JSON file each in ``directory/runs/``.

    Args:
        directory: the comparison's output directory (``l2s compare --out``).
        fingerprint: :func:`problem_fingerprint` of the problem being compared.
    """

    def __init__(self, directory: Path, fingerprint: dict[str, object]) -> None:
        self.directory = Path(directory)
        self.fingerprint = fingerprint

    @property
    def runs_dir(self) -> Path:
        """Where the run files are."""
        return self.directory / RUNS_DIR

    def path(self, method: str, seed: int) -> Path:
        """The file of run (``method``, ``seed``)."""
        return self.runs_dir / f"{method}-seed{seed}.json"

    def files(self) -> list[Path]:
        """Run files present, sorted (temporary files of an unfinished write excluded)."""
        if not self.runs_dir.is_dir():
            return []
        return sorted(p for p in self.runs_dir.glob("*.json") if not p.name.startswith("."))

    def _read(self, path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PlannerError(f"--resume: cannot read run file {path} ({exc}); delete it to "
                               "run that seed again") from None
        if not isinstance(data, dict) or data.get("format") != RUN_FORMAT \
                or not isinstance(data.get("result"), dict):
            raise PlannerError(f"--resume: {path} is not an l2s compare run file (format "
                               f"{RUN_FORMAT}); delete it or use another --out")
        return data

    def _fingerprint_of(self, path: Path) -> object:
        """The fingerprint a run file records; None when it is unreadable."""
        try:
            return self._read(path).get("fingerprint")
        except PlannerError:
            return None

    def check(self, resume: bool) -> int:
        """Refuse a directory that cannot be used; return how many run files it holds.

        Raises:
            PlannerError: without ``resume``, the directory already holds run files (they
                would be mixed with new ones); with it, a run file is unreadable or belongs to
                another problem (its fingerprint differs: the message names the fields).
        """
        files = self.files()
        if files and not resume:
            same = all(self._fingerprint_of(f) == self.fingerprint for f in files)
            raise PlannerError(f"--out: {self.directory} holds {len(files)} finished runs of "
                               + ("an earlier compare of this problem; add --resume to "
                                  "continue it, or choose another --out" if same else
                                  "a compare of another problem; choose another --out or "
                                  "delete that folder"))
        for f in files:
            other = self._read(f).get("fingerprint")
            if other != self.fingerprint:
                # a key the stored run lacks (written by an earlier l2s) counts as differing
                differ = sorted(k for k in {*self.fingerprint,
                                            *(other if isinstance(other, dict) else {})}
                                if not isinstance(other, dict) or k not in other
                                or k not in self.fingerprint
                                or other[k] != self.fingerprint[k])
                raise PlannerError(f"--resume: {f} is a run of a different problem "
                                   f"({', '.join(differ) or 'fingerprint'} "
                                   f"{'differs' if len(differ) == 1 else 'differ'}); use "
                                   "another --out or leave out --resume")
        return len(files)

    def load(self, method: str, seed: int) -> SearchResult | None:
        """The stored run (``method``, ``seed``), or None if it has not finished.

        Raises:
            PlannerError: the file is unreadable or of another problem.
        """
        path = self.path(method, seed)
        if not path.exists():
            return None
        data = self._read(path)
        if data.get("fingerprint") != self.fingerprint:
            raise PlannerError(f"--resume: {path} is a run of a different problem; use "
                               "another --out or leave out --resume")
        try:
            result = SearchResult.from_dict(data["result"])
        except (KeyError, TypeError, ValueError) as exc:
            raise PlannerError(f"--resume: {path}: bad run record ({exc}); delete it to run "
                               "that seed again") from None
        if result.method != method or result.seed != seed:
            # a file copied or renamed onto another run's name would count one run twice
            raise PlannerError(f"--resume: {path} holds the run of {result.method} seed "
                               f"{result.seed}, not {method} seed {seed}; delete it to run "
                               f"that seed again")
        return result

    def save(self, result: SearchResult) -> Path:
        """Write ``result`` atomically (temporary file in the same folder, then
        ``os.replace``); returns its path.

        Raises:
            OSError: the folder cannot be created or written.
        """
        path = self.path(result.method, result.seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(_jsonable({"format": RUN_FORMAT, "fingerprint": self.fingerprint,
                                     "result": result.to_dict()}), separators=(",", ":"))
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")   # hidden: not a run file
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path


class ComparisonInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_comparison`; a ``KeyboardInterrupt`` subclass.

    Attributes:
        comparison: the runs finished before the interrupt (``interrupted`` True, ``missing``
            the runs still to do, no optimum).
    """

    def __init__(self, comparison: Comparison) -> None:
        super().__init__(f"comparison interrupted, {len(comparison.missing)} runs missing")
        self.comparison = comparison


def run_comparison(cm: CostModel, methods: Sequence[str], budget: int, seeds: Sequence[int],
                   progress: ProgressFactory | None = None,
                   optimum_time_limit_s: float | None = None,
                   store: RunStore | None = None) -> Comparison:
    """Run every method for every seed on ``cm``.

    Args:
        cm: the problem.
        methods: searcher names (see :func:`learn_to_shard.search.searcher_names`).
        budget: evaluations per run (exhaustive searchers ignore it and report their count).
        seeds: seeds; seed-independent methods run once.
        progress: optional factory of per-run progress callbacks (a run loaded from ``store``
            advances its callback by its evaluations at once).
        optimum_time_limit_s: time allowed for the exact optimum that every method is measured
            against ("fraction of optimum"); 0 skips it; ``None`` (default): only the exact
            search's deterministic work limit applies, so the column does not depend on load.
        store: where finished runs are saved as they finish and loaded from instead of being
            run again (see :class:`RunStore`); ``None``: nothing is saved.

    Raises:
        KeyError: for an unknown method (the message lists the valid ones).
        ValueError: for an empty method or seed list or a non-positive budget.
        ComparisonInterrupted: on Ctrl-C; carries the comparison of the finished runs.
        PlannerError: a stored run file is unreadable or of another problem.
        OSError: a finished run cannot be saved.
    """
    if not methods:
        raise ValueError("no methods to compare")
    if not seeds:
        raise ValueError("no seeds")
    if budget <= 0:
        raise ValueError(f"budget must be positive, got {budget}")
    for m in methods:
        get_searcher(m)          # fail fast on a typo, before any run
    t0 = time.perf_counter()
    plan = [(m, s) for m in methods for s in (seeds[:1] if is_seed_independent(m) else seeds)]
    done: dict[tuple[str, int], SearchResult] = {}

    def summaries_of_done() -> list[MethodSummary]:
        out = []
        for m in methods:
            if is_seed_independent(m):
                runs = [done[(m, seeds[0])]] * len(seeds) if (m, seeds[0]) in done else []
            else:
                runs = [done[(m, s)] for s in seeds if (m, s) in done]
            if runs:
                out.append(summarise(m, runs))
        return out

    try:
        for m, s in plan:
            cb = progress(m, s) if progress else None
            r = store.load(m, s) if store is not None else None
            if r is None:
                r = get_searcher(m).search(cm, budget, s, cb)
                if store is not None:
                    store.save(r)
            elif cb is not None:
                cb(r.evaluations)
            done[(m, s)] = r
        summaries = summaries_of_done()
        t_opt = time.perf_counter()
        optimum, note = (None, "not computed") if optimum_time_limit_s == 0 \
            else exact_optimum(cm, optimum_time_limit_s, summaries)
        opt_wall = None if optimum_time_limit_s == 0 else time.perf_counter() - t_opt
        ran = [x for x in summaries if x.method == "exact"]
        if ran and note == "from the exact run":
            opt_wall = ran[0].wall_s          # the run's time, not the time to read its result
    except KeyboardInterrupt:
        partial = summaries_of_done()
        add_ratios(partial, None)
        raise ComparisonInterrupted(Comparison(
            problem=_problem(cm), budget=budget, seeds=list(seeds), summaries=partial,
            wall_s=time.perf_counter() - t0, optimum=None,
            optimum_note="not computed: interrupted",
            missing=[k for k in plan if k not in done], interrupted=True)) from None
    add_ratios(summaries, optimum)
    return Comparison(problem=_problem(cm), budget=budget, seeds=list(seeds),
                      summaries=summaries, wall_s=time.perf_counter() - t0, optimum=optimum,
                      optimum_note=note, optimum_wall_s=opt_wall)


# ---------------------------------------------------------------------------- table
def _fmt_ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×"


def _fmt_frac(x: float | None) -> str:
    return "–" if x is None else f"{x:.4f}"


def comparison_table(cmp: Comparison) -> Table:
    """A rich table, one row per method."""
    p = cmp.problem
    n = len(cmp.seeds)
    length = "context" if p["phase"] == "decode" else "isl"
    title = (f"{p['model']} on {p['cluster']}, {p['phase']} {length}={p['isl']}"
             f"{' osl=' + str(p['osl']) if p['osl'] else ''}: budget {cmp.budget}, {n} seeds")
    t = Table(title=title, title_justify="left")
    t.add_column("method")
    t.add_column("mean tok/s/dev", justify="right")
    t.add_column(f"best of {n}", justify="right")
    t.add_column("mean ÷ random", justify="right")
    t.add_column("best ÷ megatron", justify="right")
    t.add_column("mean ÷ optimum", justify="right")
    t.add_column("best ÷ optimum", justify="right")
    t.add_column("evaluations", justify="right")
    t.add_column("wall s/run", justify="right")
    for s in cmp.summaries:
        once = " (once)" if _ran_once(s) else ""
        if len(s.runs) < n:
            once = f" ({len(s.runs)} of {n} runs)"
        t.add_row(s.method + once, f"{s.mean:,.2f}", f"{s.best:,.2f}",
                  _fmt_ratio(s.ratios.get("mean/random")),
                  _fmt_ratio(s.ratios.get("best/megatron")),
                  _fmt_frac(s.ratios.get("mean/optimum")),
                  _fmt_frac(s.ratios.get("best/optimum")),
                  f"{s.evaluations:,.0f}", f"{s.wall_s:,.1f}")
    return t


def _ran_once(s: MethodSummary) -> bool:
    """Whether a seed-independent method's single run stands for every seed (``runs``
    repeats one result)."""
    return len(s.runs) > 1 and all(r is s.runs[0] for r in s.runs)


def render_comparison(cmp: Comparison, console: Console) -> None:
    """Print the comparison table and a line on runs that found nothing feasible."""
    console.print(comparison_table(cmp))
    opt = ("none feasible" if cmp.optimum == 0 else f"{cmp.optimum:,.4f} tok/s/dev") \
        if cmp.optimum is not None else "unknown"
    took = "" if cmp.optimum_wall_s is None or cmp.optimum is None \
        else f" in {cmp.optimum_wall_s:.1f} s"
    console.print(f"optimum: {opt} ({cmp.optimum_note}{took})", highlight=False)
    for s in cmp.summaries:
        if s.found < len(s.runs):
            console.print(f"{s.method}: its one run found no feasible strategy (counted as 0)"
                          if _ran_once(s) else
                          f"{s.method}: {len(s.runs) - s.found} of {len(s.runs)} runs found no "
                          "feasible strategy (counted as 0)")


# ---------------------------------------------------------------------------- plot
def _padded_curves(s: MethodSummary, budget: int) -> np.ndarray:
    """Best-so-far curves ``[runs, budget]`` (short curves extended with their last value)."""
    out = np.zeros((len(s.runs), budget))
    for i, r in enumerate(s.runs):
        c = np.asarray(r.curve, dtype=np.float64)[:budget]
        if len(c):
            out[i, :len(c)] = c
            out[i, len(c):] = c[-1]
    return out


def plot_convergence(cmp: Comparison, path: str | Path) -> Path:
    """Save best-so-far vs evaluations (median line, min–max band over seeds) as an image.

    Searchers that spend more than the budget (exhaustive ``megatron``) are drawn as a dashed
    horizontal line at their result, labelled with their evaluation count.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    x = np.arange(1, cmp.budget + 1)
    for s in cmp.summaries:
        if s.evaluations > cmp.budget:
            ax.axhline(s.best, linestyle="--", linewidth=1.2, color="black",
                       label=f"{s.method} (exhaustive, {s.evaluations:,.0f} evals)")
            continue
        c = _padded_curves(s, cmp.budget)
        (line,) = ax.plot(x, np.median(c, axis=0), linewidth=1.5, label=f"{s.method} (median)")
        if len(c) > 1:
            ax.fill_between(x, c.min(axis=0), c.max(axis=0), alpha=0.2,
                            color=line.get_color(), linewidth=0)
    p = cmp.problem
    length = "context" if p["phase"] == "decode" else "isl"
    ax.set_title(f"{p['model']}, {p['cluster']}, {p['phase']} {length}={p['isl']} "
                 f"({len(cmp.seeds)} seeds; band = min–max)", fontsize=10)
    ax.set_xlabel("evaluations (invalid included)")
    ax.set_ylabel("best feasible tokens/s per device")
    ax.set_xlim(1, cmp.budget)
    top = max((s.best for s in cmp.summaries), default=0.0)
    ax.set_ylim(0, top * 1.08 if top > 0 else 1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------- JSON
def _jsonable(v: object) -> object:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return _jsonable(v.tolist())
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, (np.bool_,)):
        return bool(v)
    return v


def comparison_to_dict(cmp: Comparison, cm: CostModel | None = None,
                       timing: bool = True) -> dict[str, object]:
    """JSON-ready dictionary: problem, summaries with ratios, per-run results, curves, and
    (with ``cm``) the cost-model factors the runs were priced with.

    Curves are sampled at :data:`CURVE_POINTS` evenly spaced evaluation counts (``curve_at``).
    With ``cm``, each run's best strategy is also given in the short readable form. A
    seed-independent method (``seed_independent``: Megatron's rule, ``exact``) lists its one
    run once, and ``runs_with_feasible`` counts runs, not seeds.
    ``interrupted`` and ``missing_runs`` (``[method, seed]`` pairs) tell a partial comparison.

    Every wall-clock value (total, optimum, per method and per run, and the searchers'
    ``*_wall_s`` notes) is under ``"timing"`` alone, the last key; ``timing=False`` leaves it
    out, and what remains is the same, byte for byte, for the same inputs and seeds on the
    same machine, whether the runs ran in one call or were resumed from a :class:`RunStore`.
    """
    step = max(1, cmp.budget // CURVE_POINTS)
    at = list(range(step, cmp.budget + 1, step))
    if not at or at[-1] != cmp.budget:
        at.append(cmp.budget)
    idx = np.asarray(at) - 1
    methods = {}
    clock: dict[str, object] = {}
    for s in cmp.summaries:
        curves = _padded_curves(s, cmp.budget)
        runs = []
        run_clock = []
        # A seed-independent method ran once; its summary repeats that run per seed (for the
        # means), the JSON lists it once.
        shown = s.runs[:1] if _ran_once(s) else s.runs
        for r, c in zip(shown, curves, strict=False):
            runs.append({
                "seed": r.seed, "best_tokens_per_s_per_device": r.best_objective,
                "best_action": None if r.best_action is None else r.best_action.tolist(),
                "best_strategy": None if r.best_action is None or cm is None
                else cm.space.decode(r.best_action).short(),
                "evaluations": r.evaluations, "curve": c[idx].tolist(),
                "notes": {k: v for k, v in r.notes.items() if not is_timing_key(k)}})
            run_clock.append({"seed": r.seed, "wall_s": r.wall_s,
                              **{k: v for k, v in r.notes.items() if is_timing_key(k)}})
        methods[s.method] = {
            "mean_tokens_per_s_per_device": s.mean, "best_tokens_per_s_per_device": s.best,
            "ratios": s.ratios, "evaluations_mean": s.evaluations,
            "runs_with_feasible": sum(r.best_action is not None for r in shown),
            "seed_independent": is_seed_independent(s.method),
            "runs": runs}
        clock[s.method] = {"wall_s_mean": s.wall_s, "runs": run_clock}
    out: dict[str, object] = {
        "version": __version__, "problem": cmp.problem, "budget": cmp.budget,
        "seeds": cmp.seeds, "curve_at": at, "optimum_tokens_per_s_per_device": cmp.optimum,
        "optimum_note": cmp.optimum_note, "interrupted": cmp.interrupted,
        "missing_runs": [[m, s] for m, s in cmp.missing],
        "cost_model": None if cm is None else dataclasses.asdict(cm.config),
        "methods": methods}
    if timing:
        out["timing"] = {"wall_s": cmp.wall_s, "optimum_wall_s": cmp.optimum_wall_s,
                         "methods": clock}
    return _jsonable(out)  # type: ignore[return-value]
