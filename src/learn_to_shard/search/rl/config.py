"""Settings of the RL searcher: reward shaping and PPO/policy hyperparameters.

The paper (arXiv 2509.00217 §3, App. A) fixes some values and leaves others open. Each field says
which: *paper* values are stated there; *ours* fill a gap, and the reason is given. The same
list, with the reasoning, is in ``docs/results.md`` ("Open choices").
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RewardConfig:
    """Reward ``r(a) = α·x(a) + β·(x(a) − b)`` (paper Eq. 1) on normalised throughput.

    ``x(a) = raw(a) / ref`` where ``raw`` is the cost model's tokens/s per device and ``ref`` a
    per-problem reference (the best feasible throughput among the searcher's initial random
    samples, see :class:`RLConfig.init_samples`); ``b`` is the best ``x`` seen so far (0 before
    any feasible strategy). Normalising makes one setting of α, β and the penalty work on every
    problem: a strategy as good as the reference scores about 1.

    Attributes:
        alpha: weight of the absolute term (ours: 1.0; the paper says only α > 0).
        beta: weight of the improvement term (ours: 1.0; the paper says only β > 0). Equal
            weights make a new best worth twice its throughput gain.
        invalid_x: the normalised throughput an invalid strategy (structure, memory or SLO) is
            scored as (ours: -1.0), i.e. its reward is ``α·invalid_x + β·(invalid_x − b)``.
            Because it is below the ``x = 0`` of any valid strategy, an invalid strategy always
            scores ``(α + β)`` below the worst valid one, however large ``b`` has grown — the
            paper's "large negative reward", kept relative to ``b`` so it stays large.
    """

    alpha: float = 1.0
    beta: float = 1.0
    invalid_x: float = -1.0

    def reward(self, x: float, valid: bool, best: float) -> float:
        """Reward of a strategy with normalised throughput ``x`` given the best ``best``."""
        v = x if valid else self.invalid_x
        return self.alpha * v + self.beta * (v - best)


@dataclass(frozen=True)
class RLConfig:
    """Hyperparameters of :class:`~learn_to_shard.search.rl.searcher.RLSearcher`.

    Attributes:
        elite_size: T, strategies in the elite history (paper: 3).
        embed_dim: width of the record embedding and of the encoder (paper: 256).
        attention_heads: heads of the one Transformer encoder block (ours: 4; paper: unstated).
        ff_dim: feed-forward width inside the encoder block (ours: 512; paper: unstated).
        mlp: hidden layers of the "small MLP" between the pooled features and the heads, used
            for both the policy and the value branch (ours: one layer of 128).
        learning_rate: initial PPO learning rate (paper: 1e-3).
        final_learning_rate: end of the cosine annealing (ours: 0, the textbook cosine).
        n_steps: rollout buffer size (paper: 2).
        batch_size: PPO minibatch size (paper's "step size": 2).
        n_epochs: gradient passes per update (paper: 2).
        normalize_advantage: SB3 default (True). With 2-sample minibatches it turns the
            update into "raise the better of the two, lower the worse".
        ent_coef: entropy bonus (SB3 default 0.0).
        vf_coef: value-loss weight (SB3 default 0.5).
        share_features: policy and value share the attention extractor (SB3 default True).
        tau: early-exit confidence: restart once every head's top probability is at least
            this (paper: 0.95).
        chunks: equal parts of the budget; each agent may use at most one, plus what earlier
            agents left unused (paper: 5; the hand-over rule is ours).
        init_samples: uniform random strategies evaluated first (counted in the budget) to set
            the reward reference and fill the elite history (ours: 64, 1.6 % of 4000).
        pin_inactive: offer heads that cannot change the estimate (operators the model lacks)
            as one-choice heads (ours; see :mod:`learn_to_shard.search.rl.env`).
        reward: reward shaping.
    """

    elite_size: int = 3
    embed_dim: int = 256
    attention_heads: int = 4
    ff_dim: int = 512
    mlp: tuple[int, ...] = (128,)
    learning_rate: float = 1e-3
    final_learning_rate: float = 0.0
    n_steps: int = 2
    batch_size: int = 2
    n_epochs: int = 2
    normalize_advantage: bool = True
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    share_features: bool = True
    tau: float = 0.95
    chunks: int = 5
    init_samples: int = 64
    pin_inactive: bool = True
    reward: RewardConfig = field(default_factory=RewardConfig)
