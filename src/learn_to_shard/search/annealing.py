"""Simulated annealing (``sa``): the paper's metaheuristic baseline (arXiv 2509.00217 §4, App. A).

Stated by the paper: initial temperature 100, cosine annealing, the same evaluation budget
(invalid evaluations included). Left open, ours (paper-notes §2.8 gives the usual reading):

* **State and start** — an action vector; the start is one uniform random sample (counted).
* **Neighbour** — one head chosen uniformly among the *active* ones (:func:`active_heads`:
  more than one choice, and an operator the model has), resampled uniformly among its *other*
  values (a move always changes the strategy). Heads of operators the model lacks (the dense
  FFN of an all-MoE model, absent shared experts) cannot change the estimate; they are pinned
  to ``∅`` so no move is wasted on them.
* **Energy** — the cost model's objective in raw tokens/s per device, 0 for an invalid strategy
  (the paper's simulator reports tokens/s/chip, and a temperature of 100 only has a meaning on
  a fixed scale; on these problems throughputs are tens to hundreds, so T₀ = 100 starts hot and
  the schedule cools to greedy).
* **Acceptance** — Metropolis: a move with ``Δ = f(new) − f(current) ≥ 0`` is always taken,
  a worse one with probability ``exp(Δ / T)``. Between two invalid states ``Δ = 0``: the walk
  drifts freely until it finds a valid strategy.
* **Schedule** — ``T_i = T₀ · ½ (1 + cos(π i / n))`` for move ``i`` of ``n = budget − 1``,
  floored at ``1e-9`` to keep ``exp`` defined on the last move.
* The answer is the best feasible strategy seen (the evaluator tracks it), not the final state.
"""

from __future__ import annotations

import math

import numpy as np

from ..cost.model import CostModel
from ..parallel.space import active_heads, canonical
from . import register
from .base import BudgetedEvaluator, ProgressFn, SearchResult

#: Initial temperature (paper App. A), in tokens/s per device.
INITIAL_TEMPERATURE = 100.0
#: Temperatures below this are treated as this (greedy but defined).
MIN_TEMPERATURE = 1e-9


def cosine_temperature(i: int, n: int, t0: float = INITIAL_TEMPERATURE) -> float:
    """Temperature at move ``i`` of ``n``: ``t0 · ½ (1 + cos(π i / n))``, at least 1e-9."""
    frac = min(max(i / max(n, 1), 0.0), 1.0)
    return max(t0 * 0.5 * (1.0 + math.cos(math.pi * frac)), MIN_TEMPERATURE)


def neighbour(action: np.ndarray, nvec: np.ndarray, rng: np.random.Generator,
              active: np.ndarray | None = None) -> np.ndarray:
    """Copy of ``action`` with one active multi-choice head resampled to a different value.

    Args:
        action: current action vector.
        nvec: choices per head.
        rng: random generator.
        active: heads allowed to move (default: every head with more than one choice).
    """
    movable = nvec > 1 if active is None else (active & (nvec > 1))
    heads = np.flatnonzero(movable)
    out = action.copy()
    if len(heads) == 0:
        return out
    h = int(heads[rng.integers(len(heads))])
    shift = int(rng.integers(1, nvec[h]))          # 1 .. n-1: never the current value
    out[h] = (out[h] + shift) % nvec[h]
    return out


class AnnealingSearcher:
    """Simulated annealing over the action vector (see module docstring).

    Args:
        initial_temperature: T₀ in tokens/s per device (paper: 100).
    """

    name = "sa"

    def __init__(self, initial_temperature: float = INITIAL_TEMPERATURE) -> None:
        self.initial_temperature = initial_temperature

    def search(self, cost_model: CostModel, budget: int | None, seed: int,
               progress: ProgressFn | None = None) -> SearchResult:
        """Anneal for ``budget`` evaluations, seeded by ``numpy.random.default_rng(seed)``.

        Raises:
            ValueError: if ``budget`` is None or not positive.
        """
        if not budget or budget <= 0:
            raise ValueError("simulated annealing needs a positive evaluation budget")
        rng = np.random.default_rng(seed)
        nvec = cost_model.space.nvec
        active = active_heads(cost_model.space)
        ev = BudgetedEvaluator(cost_model, budget, progress=progress)
        current = canonical(cost_model.space.sample(rng, 1)[0], active)
        f_cur, _, _ = ev.evaluate_one(current)
        moves = budget - 1
        accepted = 0
        for i in range(moves):
            cand = neighbour(current, nvec, rng, active)
            if cost_model.space.engine is not None:
                cand = cost_model.space.launchable(cand[None, :], rng)[0]
            f_new, _, _ = ev.evaluate_one(cand)
            delta = f_new - f_cur
            t = cosine_temperature(i, moves, self.initial_temperature)
            u = rng.random()       # always drawn: the random stream does not depend on Δ
            if delta >= 0 or u < math.exp(delta / t):
                current, f_cur = cand, f_new
                accepted += 1
        return ev.result(self.name, seed, notes={"accepted_moves": accepted,
                                                 "initial_temperature": self.initial_temperature})


register("sa", AnnealingSearcher)
