"""FlexFlow's Metropolis–Hastings search (``mcmc``), adapted to the action vector.

FlexFlow (Jia, Zaharia, Aiken, MLSys 2019, §5; legacy ``FFModel::mcmc_optimize``; paper-notes
§4.2) samples strategies from ``p(S) ∝ exp(−β · cost(S))``:

* **Proposal** — one operator chosen uniformly gets a uniformly random new configuration; here
  one *active* head (:func:`~learn_to_shard.search.annealing.active_heads`) chosen uniformly
  is resampled to a different value (symmetric, so the Metropolis rule is exact MH).
* **Acceptance** — ``min(1, exp(−β · (cost(new) − cost(current))))``.
* **Resets** — every ``reset_span = clamp(budget / 100, 1, 1000)`` iterations the current
  strategy goes back to the best found, as in the legacy C++ code.
* **Best** — tracked throughout (the evaluator does).

Left open by the adaptation, ours:

* **Cost** — FlexFlow's cost is simulated iteration time in milliseconds. The analogue here is
  device time per generated token, ``cost = 1000 / objective`` ms (objective in tokens/s per
  device), so halving the per-device throughput doubles the cost; an invalid strategy costs
  ``+inf`` (never accepted from a valid state; between two invalid states the move is accepted,
  so the chain walks until it finds a valid one).
* **β** — 0.05 per ms, the default in FlexFlow's search documentation
  (https://flexflow.ai/search/). On these problems costs are tens of ms per token, so β = 0.05
  accepts a 10 % worse move often; the periodic reset to the best keeps the chain near it.
* **Start** — FlexFlow starts from data parallelism or an expert strategy; a pure data-parallel
  strategy does not fit a trillion-parameter model and an expert start would hand MCMC the
  Megatron baseline, so the chain starts from one uniform random sample (counted), like ``sa``.
"""

from __future__ import annotations

import math

import numpy as np

from ..cost.model import CostModel
from ..parallel.space import active_heads, canonical
from . import register
from .annealing import neighbour
from .base import BudgetedEvaluator, ProgressFn, SearchResult

#: FlexFlow's default MCMC β ("alpha" in its docs), per millisecond of cost.
DEFAULT_BETA = 0.05


def reset_span(budget: int) -> int:
    """FlexFlow's reset period: ``clamp(budget / 100, 1, 1000)`` iterations."""
    return int(min(max(budget // 100, 1), 1000))


def token_cost_ms(objective: float) -> float:
    """Device time per generated token (ms) for tokens/s per device; ``inf`` if 0 (invalid)."""
    return 1000.0 / objective if objective > 0 else math.inf


class MCMCSearcher:
    """FlexFlow-style Metropolis–Hastings over the action vector (see module docstring).

    Args:
        beta: inverse temperature per millisecond of per-token cost.
    """

    name = "mcmc"

    def __init__(self, beta: float = DEFAULT_BETA) -> None:
        self.beta = beta

    def search(self, cost_model: CostModel, budget: int | None, seed: int,
               progress: ProgressFn | None = None) -> SearchResult:
        """Run the chain for ``budget`` evaluations, seeded by ``default_rng(seed)``.

        Raises:
            ValueError: if ``budget`` is None or not positive.
        """
        if not budget or budget <= 0:
            raise ValueError("mcmc needs a positive evaluation budget")
        rng = np.random.default_rng(seed)
        nvec = cost_model.space.nvec
        active = active_heads(cost_model.space)
        ev = BudgetedEvaluator(cost_model, budget, progress=progress)
        current = canonical(cost_model.space.sample(rng, 1)[0], active)
        f, _, _ = ev.evaluate_one(current)
        c_cur = token_cost_ms(f)
        best, c_best = current.copy(), c_cur
        span = reset_span(budget)
        accepted = resets = 0
        for i in range(1, budget):
            if i % span == 0 and c_best < c_cur:
                current, c_cur = best.copy(), c_best
                resets += 1
            cand = neighbour(current, nvec, rng, active)
            if cost_model.space.engine is not None:
                cand = cost_model.space.launchable(cand[None, :], rng)[0]
            f, _, _ = ev.evaluate_one(cand)
            c_new = token_cost_ms(f)
            u = rng.random()       # always drawn: the random stream does not depend on costs
            if math.isinf(c_new) and math.isinf(c_cur):
                take = True
            elif c_new <= c_cur:
                take = True
            else:
                take = u < math.exp(-self.beta * (c_new - c_cur))
            if take:
                current, c_cur = cand, c_new
                accepted += 1
            if c_cur < c_best:
                best, c_best = current.copy(), c_cur
        return ev.result(self.name, seed, notes={"accepted_moves": accepted, "resets": resets,
                                                 "beta_per_ms": self.beta,
                                                 "reset_span": span})


register("mcmc", MCMCSearcher)
