"""Expert routing skew: the busiest expert-parallel rank's token-expert pairs when some experts
are more popular than others.

A router does not spread tokens evenly: per step, a few experts receive many more tokens than
the mean, and under expert parallelism the rank holding them sets the MoE block's time. NVIDIA's
aiconfigurator measures and prices MoE kernels under a *power-law* expert load
(ai-dynamo/aiconfigurator@095f58a51c4c ``collector/helper.py``
``_generate_power_law_distribution``; its SDK's default ``workload_distribution`` is
``"power_law"``, exponent 1.2 for generic MoE models, ``sdk/models/moe.py``, and 1.01 for
DeepSeek's, ``sdk/models/deepseek.py``). Its load model, restated here:

* each of the ``E`` experts draws a weight from the bounded power law ``p(x) ∝ x^(−α)`` on
  ``[1, 0.8 T]`` when the step's ``T`` tokens make more pairs than there are experts
  (``T k > E``), else on ``[0.01, 2]`` (inverse-CDF sampling);
* the weights are scaled to the step's ``T k`` pairs, and no expert takes more than ``T``
  (a token picks an expert at most once; the excess goes to the experts below that bound);
* experts are laid out ``E / ep`` per rank in index order (the draws are independent, so
  the order is random), and the busiest rank's pairs are what its kernels process.

:func:`power_law_busiest_pairs` gives the expected pairs of the busiest of ``ep`` ranks under
that load: the mean over :data:`SAMPLES` seeded draws at every power of two of ``T`` up to
:data:`GRID_MAX_TOKENS`, made non-decreasing in ``T`` and interpolated linearly between them
(proportionally beyond the grid), so it never falls as the batch grows (the exact solver's
batch-cell bounds need that). Checked against the measured kernel tables'
``power_law_1.2`` rows (``data/silicon/moe.csv``, TensorRT-LLM's routed-expert block under
that load; ``fidelity.kernels.moe_kernels``, ``tests/test_moe_kernels.py``): uniform routing
prices EP ≥ 8 blocks above 1,024 tokens at 0.41 of their measured time, this load at 1.14
(balanced rows with balanced routing: 0.94).
"""

from __future__ import annotations

import functools

import numpy as np

#: Seeded draws of the expert weights averaged at each grid point.
SAMPLES = 64
#: Largest token count of the grid (``2**20``); beyond it the busiest share is held.
GRID_MAX_TOKENS = 1 << 20
#: Seed of the draws (the result is a fixed table per ``(E, k, α, ep)``).
SEED = 20260921
#: The grid's token counts, powers of two ``1 … GRID_MAX_TOKENS``, ``[G]``.
_GRID_TOKENS = 2.0 ** np.arange(GRID_MAX_TOKENS.bit_length())
#: Rounds of moving the pairs above an expert's ``T`` cap to the experts below it.
_CLAMP_ROUNDS = 32


def _bounded_power_law(u: np.ndarray, alpha: float, lo: np.ndarray, hi: np.ndarray
                       ) -> np.ndarray:
    """Inverse CDF of ``p(x) ∝ x^(−α)`` on ``[lo, hi]`` at uniform quantiles ``u``
    (broadcast); ``α = 1`` is the log-uniform law."""
    if abs(alpha - 1.0) < 1e-12:
        return lo * (hi / lo) ** u
    a = 1.0 - alpha
    return ((hi ** a - lo ** a) * u + lo ** a) ** (1.0 / a)


@functools.lru_cache(maxsize=32)
def _expert_pairs(num_experts: int, top_k: int, alpha: float) -> np.ndarray:
    """Pairs per expert of every draw at every grid token count, ``[G, SAMPLES, E]`` float
    (``G`` = powers of two ``1 … GRID_MAX_TOKENS``); each draw sums to ``T · top_k``."""
    tokens = _GRID_TOKENS
    u = np.random.default_rng(SEED).random((len(tokens), SAMPLES, num_experts))
    many = (tokens * top_k > num_experts)[:, None, None]
    lo = np.where(many, 1.0, 0.01)
    hi = np.where(many, np.maximum(0.8 * tokens[:, None, None], 1.0 + 1e-9), 2.0)
    w = _bounded_power_law(u, alpha, lo, hi)
    cap = tokens[:, None, None]
    x = w / w.sum(axis=2, keepdims=True) * (tokens * top_k)[:, None, None]
    for _ in range(_CLAMP_ROUNDS):
        over = np.maximum(x - cap, 0.0).sum(axis=2, keepdims=True)
        if not (over > 1e-9 * cap).any():
            break
        x = np.minimum(x, cap)
        room = cap - x
        x = x + over * room / np.maximum(room.sum(axis=2, keepdims=True), 1e-300)
    return x


@functools.lru_cache(maxsize=128)
def _busiest_grid(num_experts: int, top_k: int, alpha: float, ep: int) -> np.ndarray:
    """Expected pairs of the busiest of ``ep`` ranks at every grid token count, ``[G]``,
    non-decreasing."""
    x = _expert_pairs(num_experts, top_k, alpha)
    g, s, e = x.shape
    per_rank = x.reshape(g, s, ep, e // ep).sum(axis=3)
    return np.maximum.accumulate(per_rank.max(axis=2).mean(axis=1))


def power_law_busiest_pairs(tokens: np.ndarray, ep: np.ndarray, num_experts: int, top_k: int,
                            alpha: float) -> np.ndarray:
    """Expected token-expert pairs on the busiest of ``ep`` expert-parallel ranks when
    ``tokens`` tokens pick ``top_k`` of ``num_experts`` experts under aiconfigurator's
    power-law load with exponent ``alpha`` (module docstring).

    Args:
        tokens: tokens entering the MoE block of the EP group, ``[n]`` (any non-negative
            real: interpolated between powers of two).
        ep: expert-parallel ranks, ``[n]`` (broadcast with ``tokens``); ranks that do not
            divide the experts evenly, and ``ep <= 1``, get 0 (no power-law bound).
        num_experts, top_k: the model's routed experts and experts per token.
        alpha: the power law's exponent, in ``(0, 150]`` (beyond, the inverse CDF overflows).

    Returns:
        Pairs, ``[n]`` float: non-decreasing in ``tokens`` at fixed ``ep``, at most
        ``tokens · top_k``.

    Raises:
        ValueError: ``alpha`` outside ``(0, 150]``.
    """
    if not 0 < alpha <= 150:
        raise ValueError(f"the power law's exponent must be in (0, 150], got {alpha}")
    t, e = np.broadcast_arrays(np.asarray(tokens, dtype=np.float64),
                               np.asarray(ep, dtype=np.int64))
    out = np.zeros(t.shape)
    xs = np.concatenate([[0.0], _GRID_TOKENS])
    for v in np.unique(e):
        if v <= 1 or num_experts % int(v):
            continue
        ys = np.concatenate([[0.0], _busiest_grid(num_experts, top_k, float(alpha), int(v))])
        sel = e == v
        tv = t[sel]
        # Beyond the grid the busiest rank keeps its share of the pairs.
        far = tv * ys[-1] / xs[-1]
        out[sel] = np.where(tv > xs[-1], far, np.interp(tv, xs, ys))
    return np.minimum(out, t * top_k)
