"""The search as a Gymnasium environment: one-step episodes over the elite history.

Each episode is one decision (paper-notes §2.3, a contextual bandit): the observation is the
elite history — the top-T distinct feasible strategies found so far, best first — the action
is a whole strategy (``MultiDiscrete(space.nvec)``, the layout of
:mod:`learn_to_shard.parallel.space`), the step evaluates it through the
:class:`~learn_to_shard.search.base.BudgetedEvaluator` (so every evaluation, invalid ones
included, counts toward the budget), returns the shaped reward of
:class:`~learn_to_shard.search.rl.config.RewardConfig` and ends the episode.

Heads that cannot change the estimate (:func:`~learn_to_shard.search.annealing.active_heads`:
operators the model lacks) are offered to the agent as one-choice heads and evaluated as ``∅``;
otherwise they would never converge (nothing rewards either choice) and the paper's early exit,
which needs every head confident, could not fire.

The elite history and the best-so-far are the search's memory and persist across episodes:
``reset()`` without a seed keeps them (the next observation reflects every strategy found so
far). ``reset(seed=...)`` restores them to the state the environment was built with, which is
what Gymnasium's seeding contract asks ("same seed, same episode") and what ``check_env`` tests.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ...parallel.space import active_heads, canonical
from ..base import BudgetedEvaluator
from .config import RewardConfig

#: Observation value of an elite slot not yet filled (the encoded strategies lie in [0, 1]).
EMPTY_SLOT = -1.0


class EliteBuffer:
    """The top-``size`` distinct feasible strategies by throughput, best first.

    A strategy enters when it is feasible, not already held, and beats the worst held one (or
    the buffer is not full) — the paper's "filter" (arXiv 2509.00217 §3). The sort key is raw
    throughput rather than the reward, whose moving baseline would reorder old entries.

    Args:
        size: T, the number of strategies held.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"elite size must be positive, got {size}")
        self.size = size
        self.entries: list[tuple[np.ndarray, float]] = []

    def offer(self, action: np.ndarray, objective: float) -> bool:
        """Insert a feasible ``action`` with ``objective`` if it qualifies; True if inserted."""
        if any(np.array_equal(a, action) for a, _ in self.entries):
            return False
        if len(self.entries) >= self.size and objective <= self.entries[-1][1]:
            return False
        self.entries.append((np.array(action, dtype=np.int64), float(objective)))
        self.entries.sort(key=lambda e: -e[1])
        del self.entries[self.size:]
        return True

    def copy(self) -> EliteBuffer:
        """An independent copy."""
        out = EliteBuffer(self.size)
        out.entries = [(a.copy(), o) for a, o in self.entries]
        return out

    def matrix(self, nvec: np.ndarray) -> np.ndarray:
        """Observation ``[T, A]`` float32: each held action as ``index / (choices − 1)`` in
        [0, 1] (0 for single-choice heads), empty slots :data:`EMPTY_SLOT`."""
        scale = np.maximum(np.asarray(nvec, dtype=np.float64) - 1.0, 1.0)
        out = np.full((self.size, len(nvec)), EMPTY_SLOT, dtype=np.float32)
        for i, (a, _) in enumerate(self.entries):
            out[i] = (a / scale).astype(np.float32)
        return out


class ShardingEnv(gym.Env[np.ndarray, np.ndarray]):
    """One-step episodes: propose a strategy, get its shaped reward (see module docstring).

    Args:
        evaluator: counts evaluations and enforces the budget; its cost model is the problem.
        reference: throughput (tokens/s per device) that normalises rewards to ``x = raw/ref``.
        elite: initial elite history (copied; default empty).
        best_x: initial best normalised throughput ``b`` (default: the best elite's, else 0).
        reward: reward shaping.
        elite_size: T when ``elite`` is not given.
        pin_inactive: offer inactive heads as one-choice heads (see module docstring).

    Raises:
        ValueError: if ``reference`` is not positive.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, evaluator: BudgetedEvaluator, reference: float,
                 elite: EliteBuffer | None = None, best_x: float | None = None,
                 reward: RewardConfig | None = None, elite_size: int = 3,
                 pin_inactive: bool = True) -> None:
        super().__init__()
        if not reference > 0:
            raise ValueError(f"reference throughput must be positive, got {reference}")
        self.evaluator = evaluator
        self.space_ = evaluator.cost_model.space
        self.nvec = self.space_.nvec
        self.reference = float(reference)
        self.reward_cfg = reward or RewardConfig()
        self._elite0 = elite.copy() if elite is not None else EliteBuffer(elite_size)
        if best_x is None:
            best_x = self._elite0.entries[0][1] / self.reference if self._elite0.entries else 0.0
        self._best0 = float(best_x)
        self.elite = self._elite0.copy()
        self.best_x = self._best0
        t = self._elite0.size
        self.observation_space = spaces.Box(low=EMPTY_SLOT, high=1.0,
                                            shape=(t, len(self.nvec)), dtype=np.float32)
        self.active = active_heads(self.space_) if pin_inactive else np.ones(len(self.nvec), bool)
        self.action_space = spaces.MultiDiscrete(np.where(self.active, self.nvec, 1))

    def _obs(self) -> np.ndarray:
        return self.elite.matrix(self.nvec)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode. With ``seed``, also restore the elite history and best to the
        state the environment was built with; without, keep them (the search's memory)."""
        super().reset(seed=seed)
        if seed is not None:
            self.elite = self._elite0.copy()
            self.best_x = self._best0
        return self._obs(), {"best_x": self.best_x}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Evaluate ``action`` (one budgeted evaluation) and end the episode.

        Returns:
            ``(observation, reward, terminated=True, truncated=False, info)``; ``info`` holds
            ``objective`` (tokens/s per device, 0 if invalid), ``feasible``, ``x`` and
            ``best_x``.

        Raises:
            RuntimeError: if the evaluation budget is already spent.
        """
        a = canonical(np.asarray(action, dtype=np.int64).reshape(-1), self.active)
        objective, feasible, _ = self.evaluator.evaluate_one(a)
        x = objective / self.reference
        reward = self.reward_cfg.reward(x, feasible, self.best_x)
        if feasible:
            self.best_x = max(self.best_x, x)
            self.elite.offer(a, objective)
        info = {"objective": objective, "feasible": feasible, "x": x, "best_x": self.best_x}
        return self._obs(), float(reward), True, False, info

    def action_masks(self) -> np.ndarray:
        """Per-head value masks, flattened over ``action_space.nvec`` (sb3-contrib
        ``MaskablePPO`` layout).

        All True: the space's candidate lists already drop every value that is invalid
        whatever the other heads say; the remaining rules couple heads (e.g. ``ep`` must divide
        ``tp × dp``) and cannot be expressed as independent per-head masks, so they are left to
        the reward, as in the paper.
        """
        space = self.action_space
        assert isinstance(space, spaces.MultiDiscrete)
        return np.ones(int(space.nvec.sum()), dtype=bool)
