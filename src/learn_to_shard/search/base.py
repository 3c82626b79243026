"""The one interface every searcher implements, and the budgeted evaluator they all use.

Every searcher receives a :class:`~learn_to_shard.cost.CostModel` (the problem), an evaluation
budget and a seed, and returns a :class:`SearchResult`: the best feasible strategy seen, the
best-so-far curve and the number of evaluations spent. Invalid evaluations count toward the
budget, as in the paper (arXiv 2509.00217 §4: "4000 agent-forward + simulator calls").

Interruption (Ctrl-C) is handled here once for every searcher: a search run inside
:func:`interruptible` that receives ``KeyboardInterrupt`` raises :class:`SearchInterrupted`
carrying the state of the last :class:`BudgetedEvaluator` created inside it, frozen into a
:class:`SearchResult` (best so far, evaluations spent, ``notes["interrupted"] = True``).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..cost.aggregate import slo_limits
from ..cost.model import BatchEstimate, CostModel
from ..parallel.space import RULES

#: Called with the number of evaluations just spent (drives progress bars).
ProgressFn = Callable[[int], None]


def is_timing_key(key: str) -> bool:
    """True for a result/note key that holds a wall-clock duration (``wall_s``, ``*_wall_s``):
    the one value of a search that differs between two runs with the same inputs and seed."""
    return key == "wall_s" or key.endswith("_wall_s")


@dataclass
class SearchResult:
    """Outcome of one search.

    Attributes:
        method: searcher name.
        seed: RNG seed used.
        budget: evaluations allowed (``None`` for exhaustive searchers).
        evaluations: evaluations spent (invalid ones included).
        wall_s: wall-clock seconds.
        best_action: action vector of the best feasible strategy, ``None`` if none was found.
        best_objective: its objective (tokens/s per device), 0 if none.
        curve: best feasible objective after each evaluation, ``[evaluations]``.
        top: up to ``keep`` best distinct feasible actions with objectives, best first.
        rejected: up to ``keep`` infeasible actions with the highest raw throughput, with their
            violation bits — "why the best rejected ones failed".
        violation_counts: how many evaluations broke each rule bit (bit -> count).
        notes: free-form facts a searcher wants reported (e.g. restarts, certificate).
        closest: the rejected strategy that came closest to feasible (fewest broken rules,
            then least memory), with its violation bits — the answer to "why nothing fits".
    """

    method: str
    seed: int
    budget: int | None
    evaluations: int
    wall_s: float
    best_action: np.ndarray | None
    best_objective: float
    curve: np.ndarray
    top: list[tuple[np.ndarray, float]] = field(default_factory=list)
    rejected: list[tuple[np.ndarray, float, int]] = field(default_factory=list)
    violation_counts: dict[int, int] = field(default_factory=dict)
    notes: dict[str, object] = field(default_factory=dict)
    closest: tuple[np.ndarray, int] | None = None

    @property
    def interrupted(self) -> bool:
        """True if the search was stopped by Ctrl-C before its end (see :func:`interruptible`)."""
        return bool(self.notes.get("interrupted", False))

    def to_dict(self) -> dict[str, Any]:
        """Everything in the result as JSON-ready values (arrays as lists, ``curve`` whole), so
        that :meth:`from_dict` rebuilds an equal result; Python's float ``repr`` round-trips
        every float64 exactly."""
        def act(a: np.ndarray | None) -> list[int] | None:
            return None if a is None else [int(x) for x in np.asarray(a).tolist()]

        return {"method": self.method, "seed": self.seed, "budget": self.budget,
                "evaluations": self.evaluations, "wall_s": self.wall_s,
                "best_action": act(self.best_action), "best_objective": self.best_objective,
                "curve": [float(x) for x in np.asarray(self.curve, dtype=np.float64)],
                "top": [[act(a), float(o)] for a, o in self.top],
                "rejected": [[act(a), float(r), int(b)] for a, r, b in self.rejected],
                "violation_counts": [[int(b), int(k)] for b, k in self.violation_counts.items()],
                "notes": self.notes,
                "closest": None if self.closest is None
                else [act(self.closest[0]), int(self.closest[1])]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SearchResult:
        """Inverse of :meth:`to_dict`.

        Raises:
            KeyError, TypeError, ValueError: ``d`` is not the output of :meth:`to_dict`.
        """
        def act(a: list[int] | None) -> np.ndarray | None:
            return None if a is None else np.asarray(a, dtype=np.int64)

        def need(a: list[int] | None) -> np.ndarray:
            if a is None:
                raise ValueError("missing action")
            return np.asarray(a, dtype=np.int64)

        closest = d["closest"]
        return cls(method=str(d["method"]), seed=int(d["seed"]),
                   budget=None if d["budget"] is None else int(d["budget"]),
                   evaluations=int(d["evaluations"]), wall_s=float(d["wall_s"]),
                   best_action=act(d["best_action"]),
                   best_objective=float(d["best_objective"]),
                   curve=np.asarray(d["curve"], dtype=np.float64),
                   top=[(need(a), float(o)) for a, o in d["top"]],
                   rejected=[(need(a), float(r), int(b)) for a, r, b in d["rejected"]],
                   violation_counts={int(b): int(k) for b, k in d["violation_counts"]},
                   notes=dict(d["notes"]),
                   closest=None if closest is None else (need(closest[0]), int(closest[1])))


class SearchInterrupted(KeyboardInterrupt):
    """Ctrl-C arrived during a search run inside :func:`interruptible`.

    A subclass of ``KeyboardInterrupt``, so code that does not know it still stops as on any
    Ctrl-C.

    Attributes:
        result: the best found before the interrupt (``result.interrupted`` is True).
    """

    def __init__(self, result: SearchResult) -> None:
        super().__init__(f"{result.method} search interrupted after {result.evaluations} "
                         "evaluations")
        self.result = result


#: Evaluators created inside the innermost :func:`interruptible` block (None outside one).
_WATCH: contextvars.ContextVar[list[BudgetedEvaluator] | None] = contextvars.ContextVar(
    "learn_to_shard_evaluators", default=None)


@contextmanager
def interruptible(method: str, seed: int, budget: int | None) -> Iterator[None]:
    """Turn a Ctrl-C inside the block into :class:`SearchInterrupted` with the best so far.

    Every :class:`BudgetedEvaluator` created inside the block registers itself; on
    ``KeyboardInterrupt`` the last one (the search that was running: for ``auto``, the exact
    search or the fallback after it) is frozen with :meth:`BudgetedEvaluator.result`, its notes
    set to ``{"interrupted": True}``. No evaluator yet: an empty result (nothing found, 0
    evaluations). One mechanism for every searcher, the SB3 learning loop of ``rl`` included
    (SB3 lets the ``KeyboardInterrupt`` through; torch ops finish before Python sees it).

    Args:
        method: name for the frozen result (the searcher asked for).
        seed: the search's seed.
        budget: the search's budget (for the empty result).

    Raises:
        SearchInterrupted: on ``KeyboardInterrupt`` inside the block (``from None``).
    """
    watch: list[BudgetedEvaluator] = []
    token = _WATCH.set(watch)
    t0 = time.perf_counter()
    try:
        yield
    except SearchInterrupted:
        raise
    except KeyboardInterrupt:
        if watch:
            res = watch[-1].result(method, seed, notes={"interrupted": True})
        else:
            res = SearchResult(method=method, seed=seed, budget=budget, evaluations=0,
                               wall_s=time.perf_counter() - t0, best_action=None,
                               best_objective=0.0, curve=np.zeros(0),
                               notes={"interrupted": True})
        raise SearchInterrupted(res) from None
    finally:
        _WATCH.reset(token)


class Searcher(Protocol):
    """A search method. ``search`` must not exceed ``budget`` evaluations when one is given."""

    name: str

    def search(self, cost_model: CostModel, budget: int | None, seed: int,
               progress: ProgressFn | None = None) -> SearchResult:
        """Search ``cost_model.space`` and return the best feasible strategy found."""
        ...


def overshoot(cm: CostModel, est: BatchEstimate, rows: np.ndarray) -> np.ndarray:
    """How far each row of ``est`` (at ``rows``) is past its limits: the largest of peak
    memory / usable memory, TPOT / TPOT SLO and TTFT / TTFT SLO (those the workload's phase
    checks, :func:`~learn_to_shard.cost.aggregate.slo_limits`),
    ``[len(rows)]``; NaN, and a broken structural rule (:data:`~learn_to_shard.parallel.
    space.RULES`), count as infinitely far. Used to rank rejected strategies by how near they
    came to feasible."""
    got = {"tpot_slo": est.tpot_s, "ttft_slo": est.ttft_s}
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = [np.asarray(est.peak_memory_bytes[rows], dtype=np.float64) / cm.usable_bytes]
        ratios += [np.asarray(got[name][rows], dtype=np.float64) / slo
                   for name, slo in slo_limits(cm.workload).items()]
    worst = np.max(np.stack(ratios), axis=0)
    # A structural rule (more devices than the cluster has, a degree that does not divide)
    # is no nearer for small latencies: it cannot run at all.
    structural = (np.asarray(est.violation_bits[rows]).astype(np.int64)
                  & ((1 << len(RULES)) - 1)) != 0
    return np.where(np.isnan(worst) | structural, np.inf, worst)


def nearness(cm: CostModel, est: BatchEstimate, rows: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """How near each row of ``est`` (at ``rows``) came to feasible, as rejected strategies
    are ranked (fewest first, then least): the number of rules and limits it breaks (its
    violation bits set) and :func:`overshoot`; two ``[len(rows)]`` arrays."""
    bits = np.asarray(est.violation_bits[rows]).astype(np.int64)
    return np.array([bin(int(b)).count("1") for b in bits]), overshoot(cm, est, rows)


class BudgetedEvaluator:
    """Wraps a cost model: counts evaluations, enforces the budget, tracks the best.

    Args:
        cost_model: the problem.
        budget: maximum evaluations (``None`` = unlimited).
        keep: how many top feasible / best rejected strategies to remember.
        progress: optional callback receiving evaluation counts.
    """

    def __init__(self, cost_model: CostModel, budget: int | None, keep: int = 5,
                 progress: ProgressFn | None = None) -> None:
        self.cost_model = cost_model
        self.budget = budget
        self.keep = keep
        self.progress = progress
        self.evaluations = 0
        self.best_objective = 0.0
        self.best_action: np.ndarray | None = None
        self._curve: list[np.ndarray] = []
        self._top: dict[bytes, tuple[np.ndarray, float]] = {}
        self._rej: dict[int, tuple[np.ndarray, float, int]] = {}
        self.violation_counts: dict[int, int] = {}
        self._closest: tuple[tuple[int, float, float], np.ndarray, int] | None = None
        self._t0 = time.perf_counter()
        watch = _WATCH.get()
        if watch is not None:
            watch.append(self)

    @property
    def remaining(self) -> int | None:
        """Evaluations left, ``None`` if unlimited."""
        return None if self.budget is None else self.budget - self.evaluations

    @property
    def exhausted(self) -> bool:
        """True once the budget is spent."""
        return self.budget is not None and self.evaluations >= self.budget

    def evaluate_many(self, actions: np.ndarray) -> BatchEstimate:
        """Evaluate up to the remaining budget of ``actions`` (``[n, A]``); rows past the
        budget are dropped, so the result may be shorter than the input."""
        a = np.atleast_2d(np.asarray(actions, dtype=np.int64))
        if self.remaining is not None:
            a = a[: max(self.remaining, 0)]
        est = self.cost_model.evaluate_many(a)
        self._record(a, est)
        return est

    def evaluate_one(self, action: np.ndarray) -> tuple[float, bool, float]:
        """Evaluate one action: (objective, feasible, raw tokens/s per device).

        Raises:
            RuntimeError: if the budget is already spent.
        """
        if self.exhausted:
            raise RuntimeError("evaluation budget exhausted")
        est = self.evaluate_many(np.asarray(action)[None, :])
        return float(est.objective[0]), bool(est.feasible[0]), \
            float(est.tokens_per_s_per_device[0])

    def _record(self, a: np.ndarray, est: BatchEstimate) -> None:
        n = len(a)
        if n == 0:
            return
        obj = est.objective
        running = np.maximum.accumulate(np.concatenate([[self.best_objective], obj]))[1:]
        i = int(np.argmax(obj))
        # Best, curve and count first, in adjacent statements: a Ctrl-C (see `interruptible`)
        # arriving during the bookkeeping below leaves them consistent; that bookkeeping
        # (alternatives, rejected strategies, violation counts) may then miss this batch.
        if obj[i] > self.best_objective:
            self.best_objective, self.best_action = float(obj[i]), a[i].copy()
        self._curve.append(running)
        self.evaluations += n
        # Top feasible (distinct).
        feas = np.flatnonzero(est.feasible)
        if len(feas):
            order = feas[np.argsort(-obj[feas], kind="stable")][: self.keep * 4]
            for j in order:
                self._top.setdefault(a[j].tobytes(), (a[j].copy(), float(obj[j])))
            if len(self._top) > self.keep * 4:
                best = sorted(self._top.items(), key=lambda kv: -kv[1][1])[: self.keep * 4]
                self._top = dict(best)
        bits = est.violation_bits
        infeas = np.flatnonzero(~est.feasible)
        if len(infeas):
            # Keep, per distinct set of broken rules, the rejected strategy with the highest
            # raw throughput: a varied answer to "why not something faster?".
            raw = np.nan_to_num(est.tokens_per_s_per_device[infeas], nan=0.0)
            order = infeas[np.argsort(-raw, kind="stable")]
            ub, first = np.unique(bits[order], return_index=True)
            for b, j in zip(ub.tolist(), order[first].tolist(), strict=True):
                r = float(np.nan_to_num(est.tokens_per_s_per_device[j]))
                if b not in self._rej or r > self._rej[b][1]:
                    self._rej[b] = (a[j].copy(), r, int(b))
            nbits, over = nearness(self.cost_model, est, infeas)
            # Fewest broken rules, then the least overshoot of its limits, then the least peak
            # memory (np.lexsort: last key first; a weighted sum such as nbits·1e30 + bytes
            # loses the bytes to float rounding).
            pick = np.lexsort((est.peak_memory_bytes[infeas], over, nbits))[0]
            j = int(infeas[pick])
            k = (int(nbits.min()), float(over[pick]), float(est.peak_memory_bytes[j]))
            if self._closest is None or k < self._closest[0]:
                self._closest = (k, a[j].copy(), int(bits[j]))
            ub, cnt = np.unique(bits[infeas], return_counts=True)
            for b, k in zip(ub.tolist(), cnt.tolist(), strict=True):
                bit = 1
                while bit <= b:
                    if b & bit:
                        self.violation_counts[bit] = self.violation_counts.get(bit, 0) + k
                    bit <<= 1
        if self.progress is not None:
            self.progress(n)

    def result(self, method: str, seed: int, notes: dict | None = None) -> SearchResult:
        """Freeze what was seen into a :class:`SearchResult`."""
        curve = np.concatenate(self._curve) if self._curve else np.zeros(0)
        top = sorted(self._top.values(), key=lambda t: -t[1])[: self.keep]
        structural = (1 << len(RULES)) - 1   # strategies that break no structural rule first
        rej = sorted(self._rej.values(),
                     key=lambda t: (bool(t[2] & structural), -t[1]))[: self.keep]
        return SearchResult(method=method, seed=seed, budget=self.budget,
                            evaluations=self.evaluations,
                            wall_s=time.perf_counter() - self._t0,
                            best_action=self.best_action, best_objective=self.best_objective,
                            curve=curve, top=top, rejected=rej,
                            violation_counts=dict(self.violation_counts), notes=notes or {},
                            closest=None if self._closest is None
                            else (self._closest[1], self._closest[2]))
