"""Megatron baselines.

* ``megatron`` — the paper's strong baseline (arXiv 2509.00217 §4): Megatron-LM's per-operator
  dimensions (:data:`~learn_to_shard.parallel.ops.MEGATRON_DIMS`) fixed, every combination of
  degrees and batch enumerated exhaustively. It ignores the budget (it is exhaustive) and
  reports how many evaluations that took.
* ``megatron-rule`` — the rule of thumb (Narayanan et al. SC'21): TP as large as one node allows,
  PP across nodes only as much as memory needs, no EP/attention-DP; the batch is still searched.
"""

from __future__ import annotations

import numpy as np

from ..cost.model import CostModel
from ..parallel.ops import MEGATRON_DIMS
from ..parallel.space import ACTION_LEN, NUM_COARSE
from .base import BudgetedEvaluator, ProgressFn, SearchResult

#: Evaluations per vectorised chunk (keeps memory bounded and the progress bar moving).
CHUNK = 8192


def coarse_grid(cost_model: CostModel, dims: tuple[int, ...] = MEGATRON_DIMS) -> np.ndarray:
    """Every combination of coarse indices with fixed per-op ``dims``: ``[k, ACTION_LEN]``."""
    nvec = cost_model.space.nvec[:NUM_COARSE]
    grids = np.meshgrid(*[np.arange(v) for v in nvec], indexing="ij")
    coarse = np.stack([g.ravel() for g in grids], axis=1)
    out = np.empty((len(coarse), ACTION_LEN), dtype=np.int64)
    out[:, :NUM_COARSE] = coarse
    out[:, NUM_COARSE:] = np.asarray(dims, dtype=np.int64)
    return out


class MegatronSearcher:
    """Exhaustive degrees with Megatron's per-operator dims (the paper's baseline)."""

    name = "megatron"

    def search(self, cost_model: CostModel, budget: int | None, seed: int,
               progress: ProgressFn | None = None) -> SearchResult:
        """Evaluate every degree/batch combination (``budget`` is not applied)."""
        ev = BudgetedEvaluator(cost_model, None, progress=progress)
        grid = coarse_grid(cost_model)
        # Structurally invalid rows are still evaluated (and counted) in order to keep the
        # count honest; they are cheap.
        for start in range(0, len(grid), CHUNK):
            ev.evaluate_many(grid[start:start + CHUNK])
        return ev.result(self.name, seed, notes={"grid_size": len(grid)})


class MegatronRuleSearcher:
    """TP inside the node, PP across nodes as memory requires, batch searched."""

    name = "megatron-rule"

    def search(self, cost_model: CostModel, budget: int | None, seed: int,
               progress: ProgressFn | None = None) -> SearchResult:
        """Pick the largest structurally valid TP within a node, then the smallest PP that
        makes any batch feasible; return the best batch there."""
        sp = cost_model.space
        ev = BudgetedEvaluator(cost_model, None, progress=progress)
        node = cost_model.cluster.devices_per_node
        dims = np.asarray(MEGATRON_DIMS, dtype=np.int64)
        ep_i, dp_i = sp.ep_values.index(1), sp.dp_values.index(1)
        tps = [i for i, v in enumerate(sp.tp_values) if v <= node]
        chosen_tp = None
        for i in sorted(tps, key=lambda i: -sp.tp_values[i]):
            a = np.concatenate([[i, ep_i, 0, dp_i, 0, 0], dims])     # cp 1, first batch
            if sp.rule_bits_many(a[None, :])[0] == 0:
                chosen_tp = i
                break
        if chosen_tp is None:
            return ev.result(self.name, seed, notes={"rule": "no valid TP inside one node"})
        for pp_i in range(len(sp.pp_values)):
            rows = np.array([np.concatenate([[chosen_tp, ep_i, pp_i, dp_i, 0, b], dims])
                             for b in range(len(sp.batch_values))])
            est = ev.evaluate_many(rows)
            if est.feasible.any():
                break
        return ev.result(self.name, seed, notes={"tp": sp.tp_values[chosen_tp]})
