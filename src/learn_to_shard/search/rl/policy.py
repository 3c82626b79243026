"""The attention policy of the paper (arXiv 2509.00217 Fig. 2) as an SB3 features extractor.

``[batch, T, A]`` elite records → linear embedding to ``d`` → one Transformer encoder block →
mean pool over the T records → ``[batch, d]``. SB3's ``ActorCriticPolicy`` adds the "small
MLP" (``net_arch``) and, for a ``MultiDiscrete`` action space, one categorical head per action
component (``MultiCategoricalDistribution``: a linear layer to ``sum(nvec)`` logits split per
head); the value head shares the pooled features.

Left open by the paper, ours: 4 attention heads, feed-forward width 512, no dropout (one-step
bandit, deterministic runs), post-norm (PyTorch default), no positional encoding (the mean pool
makes the order of the records irrelevant anyway).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from stable_baselines3.common.distributions import Distribution, MultiCategoricalDistribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn


class EliteAttentionExtractor(BaseFeaturesExtractor):
    """Linear embedding → one ``nn.TransformerEncoderLayer`` → mean pool.

    Args:
        observation_space: ``Box`` of shape ``[T, A]``.
        features_dim: embedding width ``d`` (paper: 256), also the output size.
        attention_heads: heads of the encoder block.
        ff_dim: feed-forward width of the encoder block.
    """

    def __init__(self, observation_space: gym.spaces.Box, features_dim: int = 256,
                 attention_heads: int = 4, ff_dim: int = 512) -> None:
        super().__init__(observation_space, features_dim)
        if len(observation_space.shape) != 2:
            raise ValueError("observation must be [T, A] elite records, got shape "
                             f"{observation_space.shape}")
        record = int(observation_space.shape[1])
        self.embed = nn.Linear(record, features_dim)
        self.encoder = nn.TransformerEncoderLayer(
            d_model=features_dim, nhead=attention_heads, dim_feedforward=ff_dim, dropout=0.0,
            batch_first=True)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """``[batch, T, A]`` → ``[batch, features_dim]``."""
        z = self.encoder(self.embed(observations))
        return z.mean(dim=1)


class PaddedMultiCategorical(MultiCategoricalDistribution):
    """SB3's ``MultiCategoricalDistribution`` computed on one padded ``[batch, heads, max_n]``
    tensor instead of one ``torch.distributions.Categorical`` per head.

    Same distribution, same logits layout (the policy's ``action_net`` is unchanged): one
    categorical head per action component, independent given the observation. With 17 heads
    and 2-sample minibatches the per-head objects dominated the step time; this keeps the
    search within its time target. ``log_prob`` and ``entropy`` sum over heads as SB3 does.

    Args:
        action_dims: choices per head (``MultiDiscrete.nvec``).
    """

    def __init__(self, action_dims: list[int]) -> None:
        super().__init__(action_dims)
        dims = [int(d) for d in action_dims]
        width = max(dims)
        index = torch.zeros(len(dims), width, dtype=torch.long)
        valid = torch.zeros(len(dims), width, dtype=torch.bool)
        start = 0
        for h, n in enumerate(dims):
            index[h, :n] = torch.arange(start, start + n)
            valid[h, :n] = True
            start += n
        self._index = index
        self._valid = valid
        self.log_p: torch.Tensor | None = None

    def proba_distribution(self, action_logits: torch.Tensor) -> PaddedMultiCategorical:
        """Set the distribution from flat logits ``[batch, sum(nvec)]``."""
        x = action_logits[:, self._index].masked_fill(~self._valid, float("-inf"))
        self.log_p = torch.log_softmax(x, dim=-1)
        return self

    def _lp(self) -> torch.Tensor:
        if self.log_p is None:
            raise RuntimeError("proba_distribution() must be called first")
        return self.log_p

    def probs(self) -> torch.Tensor:
        """Per-head probabilities ``[batch, heads, max_n]`` (0 on padding)."""
        return self._lp().exp()

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Joint log-probability of ``actions`` ``[batch, heads]``: ``[batch]``."""
        lp = self._lp().gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        return lp.sum(dim=1)

    def entropy(self) -> torch.Tensor:
        """Sum of the heads' entropies: ``[batch]``."""
        lp = self._lp().masked_fill(~self._valid, 0.0)
        return -(lp.exp() * lp).sum(dim=(1, 2))

    def sample(self) -> torch.Tensor:
        """One action per row, ``[batch, heads]``."""
        p = self.probs()
        b, h, n = p.shape
        return torch.multinomial(p.reshape(b * h, n), 1).reshape(b, h)

    def mode(self) -> torch.Tensor:
        """Most likely value of every head, ``[batch, heads]``."""
        return torch.argmax(self._lp(), dim=-1)


class ElitePolicy(ActorCriticPolicy):
    """SB3's ``ActorCriticPolicy`` whose ``MultiDiscrete`` heads use
    :class:`PaddedMultiCategorical` (same network, same distribution, less overhead)."""

    def __init__(self, observation_space: gym.spaces.Space, action_space: gym.spaces.Space,
                 *args: Any, **kwargs: Any) -> None:
        super().__init__(observation_space, action_space, *args, **kwargs)
        if isinstance(action_space, gym.spaces.MultiDiscrete):
            self.action_dist = PaddedMultiCategorical(list(action_space.nvec))


def head_probabilities(dist: Distribution) -> list[torch.Tensor]:
    """Per-head probability vectors of the first row of a (multi-)categorical distribution."""
    if isinstance(dist, PaddedMultiCategorical):
        p = dist.probs()[0]
        return [p[h, : int(n)] for h, n in enumerate(dist.action_dims)]
    if isinstance(dist, MultiCategoricalDistribution):
        return [d.probs[0] for d in dist.distribution]
    raise TypeError(f"expected a multi-categorical distribution, got {type(dist).__name__}")
