"""The paper's RL searcher (registered as ``rl``): Gymnasium env, attention policy, PPO driver.

Importing this package is cheap; torch and Stable-Baselines3 load on the first search.
``env`` and ``policy`` are imported explicitly where needed.
"""

from __future__ import annotations

from .. import register
from .config import RewardConfig, RLConfig
from .searcher import RLSearcher

register("rl", RLSearcher)

__all__ = ["RLConfig", "RLSearcher", "RewardConfig"]
