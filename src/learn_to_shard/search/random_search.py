"""Random search: the paper's random-walk baseline (arXiv 2509.00217 §4), read as uniform
sampling of the MultiDiscrete action vector at every step, as ArchGym's random walker does
(paper-notes §2.8), keeping the best feasible strategy."""

from __future__ import annotations

import numpy as np

from ..cost.model import CostModel
from .base import BudgetedEvaluator, ProgressFn, SearchResult

#: Samples per vectorised chunk.
CHUNK = 500


class RandomSearcher:
    """Uniform samples of the action vector, ``budget`` of them, seeded."""

    name = "random"

    def search(self, cost_model: CostModel, budget: int | None, seed: int,
               progress: ProgressFn | None = None) -> SearchResult:
        """Draw ``budget`` uniform action vectors with ``numpy.random.default_rng(seed)``.

        Raises:
            ValueError: if ``budget`` is None or not positive.
        """
        if not budget or budget <= 0:
            raise ValueError("random search needs a positive evaluation budget")
        rng = np.random.default_rng(seed)
        ev = BudgetedEvaluator(cost_model, budget, progress=progress)
        while not ev.exhausted:
            ev.evaluate_many(cost_model.space.sample(rng, min(CHUNK, ev.remaining or CHUNK)))
        return ev.result(self.name, seed)
