"""The paper's searcher: PPO over one-step episodes with early exit and restarts.

Procedure (arXiv 2509.00217 §3, App. A; the parts the paper leaves open are marked *ours*):

1. *Ours:* evaluate ``init_samples`` uniform random strategies (counted in the budget). The best
   feasible throughput among them is the reward reference ``ref``; if none is feasible, the
   largest raw throughput any of them would reach ignoring memory/SLOs; failing that, 1. They
   also fill the elite history (so the first observation is informative) and set ``b``.
2. The remaining budget is split into ``chunks`` (5) equal parts. Agent ``k`` (fresh weights,
   seeded from ``(seed, k)``) trains with SB3 ``PPO`` until the end of chunk ``k`` (*ours*:
   an agent never runs past its chunk, so at least 5 agents run; one that exits early hands
   the rest of its chunk to the next; agents after the 5th share the last chunk). The cosine
   learning-rate schedule spans the agent's own allowance (*ours*).
3. Early exit (paper): once every head's top probability at the current observation is at
   least ``tau`` (0.95), the agent stops and a fresh one starts, keeping the elite history and
   ``b`` (they live in the environment). The check runs after each rollout's last step, on
   the policy that just acted, so no evaluation is spent by a policy known to have converged.
4. The budget stop and the early exit are SB3 callbacks (``_on_step`` returning False).
5. *Ours:* heads of operators the model lacks are one-choice heads for the agent (see
   :mod:`learn_to_shard.search.rl.env`), and the per-head categoricals are computed on one
   padded tensor (:class:`~learn_to_shard.search.rl.policy.PaddedMultiCategorical`, the same
   distribution as SB3's, for speed).

Every evaluation goes through :class:`~learn_to_shard.search.base.BudgetedEvaluator`; the
answer is the best feasible strategy seen, as in the paper.

Determinism: torch runs on one thread; each agent's weights and sampling come from SB3's
``set_random_seed`` (which seeds Python's, NumPy's global and torch's generators) with a seed
derived from ``(seed, k)``; the initial samples come from ``numpy.random.default_rng(seed)``.
Identical seeds give identical results on the same machine and library versions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ...cost.model import CostModel
from ...errors import ConfigError
from ...parallel.space import active_heads, canonical
from ..base import BudgetedEvaluator, ProgressFn, SearchResult
from .config import RLConfig


class RLExtraMissingError(ConfigError, ImportError):
    """``--method rl`` without the ``rl`` extra (torch, Stable-Baselines3, Gymnasium).

    A :class:`ConfigError` (the CLI prints one line, exit 2) and an :class:`ImportError` (so
    ``--method auto`` falls back to another searcher, as for any missing optional module).
    """


def require_rl_extra() -> Any:
    """Import and return ``torch`` after checking the RL searcher's optional dependencies.

    Raises:
        RLExtraMissingError: torch, stable_baselines3 or gymnasium is not installed; the
            message names the missing module and the install command.
    """
    import importlib

    mods = {}
    for name in ("torch", "stable_baselines3", "gymnasium"):
        try:
            mods[name] = importlib.import_module(name)
        except ImportError as exc:
            raise RLExtraMissingError(
                f"--method rl: needs the rl extra ({name} is not installed): pip install "
                f"'learn-to-shard[rl]'; every other method runs without it") from exc
    return mods["torch"]


def cosine_schedule(initial: float, final: float = 0.0) -> Callable[[float], float]:
    """SB3 schedule (``progress_remaining`` 1 → 0) annealing ``initial`` → ``final`` by cosine."""

    def schedule(progress_remaining: float) -> float:
        done = 1.0 - float(progress_remaining)
        return final + 0.5 * (initial - final) * (1.0 + math.cos(math.pi * done))

    return schedule


def agent_seed(seed: int, k: int) -> int:
    """Seed of agent ``k`` of a search seeded ``seed`` (32-bit, from ``SeedSequence``)."""
    return int(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, k]).generate_state(1)[0])


def head_confidence(model: Any, obs: np.ndarray) -> np.ndarray:
    """Top probability of every head of ``model``'s policy at observation ``obs`` (``[A]``)."""
    import torch

    from .policy import head_probabilities

    policy = model.policy
    with torch.no_grad():
        obs_t, _ = policy.obs_to_tensor(obs)
        dist = policy.get_distribution(obs_t)
        return np.array([float(p.max()) for p in head_probabilities(dist)])


def _make_callback(evaluator: BudgetedEvaluator, stop_at: int, tau: float, n_steps: int,
                   state: dict[str, Any]) -> Any:
    """SB3 callback: stop at ``stop_at`` evaluations; stop when every head is ``tau``-sure."""
    from stable_baselines3.common.callbacks import BaseCallback

    class SearchCallback(BaseCallback):
        def _on_step(self) -> bool:
            if evaluator.evaluations >= stop_at:
                return False
            if self.n_calls % n_steps == 0:
                conf = head_confidence(self.model, self.locals["new_obs"])
                if bool((conf >= tau).all()):
                    state["early_exit"] = True
                    return False
            return True

    return SearchCallback()


def _reference(est_obj: np.ndarray, est_raw: np.ndarray) -> tuple[float, str]:
    """Reward reference from the initial samples, and which rule set it."""
    if len(est_obj) and est_obj.max() > 0:
        return float(est_obj.max()), "best feasible initial sample"
    raw = np.nan_to_num(est_raw, nan=0.0, posinf=0.0, neginf=0.0)
    if len(raw) and raw.max() > 0:
        return float(raw.max()), "best raw throughput of the (infeasible) initial samples"
    return 1.0, "1 (no initial sample had a throughput)"


class RLSearcher:
    """Learning to Shard's PPO searcher (see module docstring).

    Args:
        config: hyperparameters (defaults: the paper's where stated, documented otherwise).
    """

    name = "rl"

    def __init__(self, config: RLConfig | None = None) -> None:
        self.config = config or RLConfig()

    def search(self, cost_model: CostModel, budget: int | None, seed: int,
               progress: ProgressFn | None = None) -> SearchResult:
        """Run the search with ``budget`` evaluations.

        Raises:
            ConfigError: if ``budget`` is None or smaller than 4 (one initial sample and one
                PPO rollout need at least that).
        """
        if budget is None or budget < 4:
            raise ConfigError(f"--budget: the rl searcher needs at least 4 evaluations, "
                             f"got {budget}")
        torch = require_rl_extra()

        # Small networks: one thread is fastest (no contention) and keeps runs reproducible.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._search(cost_model, budget, seed, progress)
        finally:
            torch.set_num_threads(threads)

    def _search(self, cm: CostModel, budget: int, seed: int,
                progress: ProgressFn | None) -> SearchResult:
        from stable_baselines3 import PPO
        from stable_baselines3.common.logger import Logger
        from stable_baselines3.common.utils import set_random_seed
        from stable_baselines3.common.vec_env import DummyVecEnv

        from .env import EliteBuffer, ShardingEnv
        from .policy import EliteAttentionExtractor, ElitePolicy

        cfg = self.config
        rng = np.random.default_rng(seed)
        ev = BudgetedEvaluator(cm, budget, progress=progress)

        # 1. Initial samples: reference and elite history.
        n_init = max(1, min(cfg.init_samples, budget // 10))
        init = cm.space.sample(rng, n_init)
        if cfg.pin_inactive:
            init = canonical(init, active_heads(cm.space))
        est = ev.evaluate_many(init)
        ref, ref_rule = _reference(est.objective, est.tokens_per_s_per_device)
        elite = EliteBuffer(cfg.elite_size)
        for j in np.flatnonzero(est.feasible)[np.argsort(-est.objective[est.feasible],
                                                         kind="stable")]:
            elite.offer(init[j], float(est.objective[j]))
        env = ShardingEnv(ev, ref, elite=elite, reward=cfg.reward,
                          pin_inactive=cfg.pin_inactive)
        env.reset(seed=seed)
        vec_env = DummyVecEnv([lambda: env])

        # 2.–4. Agents over chunks.
        start = ev.evaluations
        chunk = (budget - start) / cfg.chunks
        policy_kwargs = {
            "features_extractor_class": EliteAttentionExtractor,
            "features_extractor_kwargs": {"features_dim": cfg.embed_dim,
                                          "attention_heads": cfg.attention_heads,
                                          "ff_dim": cfg.ff_dim},
            "net_arch": {"pi": list(cfg.mlp), "vf": list(cfg.mlp)},
            # Fused Adam: one kernel for all parameters, ~3x faster steps on CPU than the loop.
            "optimizer_kwargs": {"fused": True},
            "share_features_extractor": cfg.share_features,
        }
        agents: list[dict[str, Any]] = []
        k = 0
        while not ev.exhausted:
            stop_at = budget if k >= cfg.chunks - 1 else start + round((k + 1) * chunk)
            allowance = stop_at - ev.evaluations
            if allowance < cfg.n_steps:      # too little left for one rollout: next chunk
                stop_at = budget if k + 1 >= cfg.chunks - 1 else start + round((k + 2) * chunk)
                allowance = stop_at - ev.evaluations
            set_random_seed(agent_seed(seed, k))
            model = PPO(ElitePolicy, vec_env, learning_rate=cosine_schedule(
                            cfg.learning_rate, cfg.final_learning_rate),
                        n_steps=cfg.n_steps, batch_size=cfg.batch_size, n_epochs=cfg.n_epochs,
                        normalize_advantage=cfg.normalize_advantage, ent_coef=cfg.ent_coef,
                        vf_coef=cfg.vf_coef,
                        policy_kwargs=policy_kwargs, device="cpu", verbose=0, seed=None)
            # A logger of no outputs: SB3's default one makes a folder SB3-<date> in the
            # temporary directory on every learn() (stable_baselines3 common/logger.py
            # configure), though nothing is logged.
            model.set_logger(Logger(folder=None, output_formats=[]))
            state: dict[str, Any] = {"early_exit": False}
            first = ev.evaluations
            callback = _make_callback(ev, stop_at, cfg.tau, cfg.n_steps, state)
            # SB3 types log_interval as int but reads None as "never log"
            # (stable_baselines3 2.9 OnPolicyAlgorithm.learn: ``if log_interval is not None``).
            model.learn(total_timesteps=allowance, callback=callback,
                        log_interval=None,  # type: ignore[arg-type]
                        reset_num_timesteps=True)
            agents.append({"start": first, "evaluations": ev.evaluations - first,
                           "early_exit": state["early_exit"]})
            if ev.evaluations == first:      # defensive: an agent that cannot step ends it
                break
            k += 1
        notes = {"reference_tokens_per_s_per_device": ref, "reference_rule": ref_rule,
                 "init_samples": n_init, "agents": len(agents),
                 "early_exits": sum(a["early_exit"] for a in agents), "agent_log": agents}
        return ev.result(self.name, seed, notes=notes)
