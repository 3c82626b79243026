"""The device mesh of one instance: named axes, rank order, group extents and node straddling.

One instance spans ``pp × dp × tp`` ranks, numbered **TP innermost, then DP, then PP**::

    rank(pp_i, dp_i, tp_i) = (pp_i · dp + dp_i) · tp + tp_i

so a TP group is ``tp`` consecutive ranks, a pipeline stage ``g = tp · dp`` consecutive ranks
(the stage group), and stage ``s`` holds ranks ``[s·g, (s+1)·g)``. MoE layers run the same
``g`` ranks of a stage as ``ep × etp`` with ``etp = g / ep`` innermost (the degrees of
TRT-LLM / aiconfigurator's ``tp × attention_dp = moe_tp × moe_ep``, FC-38; SGLang's MoE groups
are numbered so, ``moe_tp`` consecutive), so an expert-TP group is ``etp`` consecutive ranks.
TensorRT-LLM numbers EP innermost instead (``engines.EngineProfile.ep_inner_ranks``): the two
orders agree inside one scale-up domain and where ``ep`` is 1 or ``g``. ``cp`` (decode context
parallelism) re-splits the TP group of the
attention for decode: ``tp / cp`` head groups of ``cp`` ranks, each rank holding ``1/cp`` of every
sequence's KV tokens (vLLM's interleaved DCP groups; the cp group is priced on the link of
``cp`` consecutive ranks, which a TP group inside one node always is). Instances are laid out
back to back from rank 0 of the cluster, whose nodes (scale-up domains) hold
``devices_per_node`` consecutive ranks.

:class:`Mesh` answers, vectorised over rows of degrees: each axis's group extent, whether every
group of an axis stays inside one node (else it rides the scale-out link), how many ranks of its
own group the worst-placed rank shares its node with (hierarchical all-to-all), and how many
stage-to-stage hops cross a node boundary. The cost model prices links from these answers
(:mod:`learn_to_shard.cost.model`); nothing else reasons about rank placement, except that an
engine numbering its ranks otherwise (vLLM: DP outermost) keeps to the layouts where the two
orders agree (``engines.EngineProfile.dp_outer_ranks`` and ``ep_inner_ranks``,
``parallel.space``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..arrays import unique_rows

#: Named mesh axes, outermost first. ``ep`` and ``etp`` re-split the stage group ``tp · dp``
#: of the MoE layers; ``cp`` re-splits the TP group for decode attention.
AXES: tuple[str, ...] = ("pp", "dp", "tp", "ep", "etp", "cp")


@functools.lru_cache(maxsize=4096)
def worst_local_ranks(n: int, domain: int, total: int) -> int:
    """Fewest ranks of its own group that any rank shares its node with (itself included),
    for the whole groups of ``n`` consecutive ranks laid out back to back from rank 0 over
    ``total`` ranks in nodes of ``domain``. ``n`` when every group stays inside a node.

    Example: ``n = 6`` on 8-rank nodes: ranks 6–7 share node 0 with no more of group 1, so 2.
    """
    if total <= domain or n <= 1:
        return max(n, 1)                 # one domain (or one rank): no group can straddle
    worst = n
    period = n * domain // math.gcd(n, domain)           # the layout repeats every lcm
    # Whole groups only (a trailing fragment of fewer than n ranks is not a group); a cluster
    # smaller than one group holds the one group it can.
    last = max(total - n, 0)
    for start in range(0, min(last, period - 1) + 1, n):
        r, end = start, min(start + n, total)
        while r < end:
            stop = min(end, (r // domain + 1) * domain)
            worst = min(worst, stop - r)
            r = stop
    return worst


def worst_local_ranks_many(n: np.ndarray, domain: int, total: int | None = None) -> np.ndarray:
    """:func:`worst_local_ranks` element-wise over group sizes ``n`` (any shape; computed once
    per distinct size); ``total`` defaults to ``n · domain`` (groups tile the layout)."""
    n_i = np.maximum(np.asarray(n), 1).astype(np.int64)
    uniq, inv = np.unique(n_i, return_inverse=True)
    local = np.array([float(worst_local_ranks(int(u), domain,
                                              total if total is not None else int(u) * domain))
                      for u in uniq])
    return local[inv.reshape(n_i.shape)]


@dataclass(frozen=True)
class MeshAxes:
    """Group extent per named axis for rows of degrees (every array ``[n]`` int64).

    Attributes:
        pp, dp, tp, ep: the strategy's degrees.
        etp: expert-TP extent ``max(tp · dp // ep, 1)``.
        cp: decode context-parallel extent (a divisor of ``tp``; 1: none).
    """

    pp: np.ndarray
    dp: np.ndarray
    tp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    cp: np.ndarray

    @property
    def stage(self) -> np.ndarray:
        """Ranks of one pipeline stage, the group MoE dispatch runs over: ``tp · dp``."""
        return self.tp * self.dp

    @property
    def devices(self) -> np.ndarray:
        """Ranks of one instance: ``pp · tp · dp``."""
        return self.pp * self.tp * self.dp

    def extent(self, axis: str) -> np.ndarray:
        """The group extent of a named axis (:data:`AXES`, or ``stage``)."""
        if axis not in AXES and axis != "stage":
            raise ValueError(f"unknown mesh axis {axis!r}; known: {', '.join(AXES)}, stage")
        return np.asarray(getattr(self, axis))


@dataclass(frozen=True)
class Mesh:
    """The cluster's ranks as nodes of ``devices_per_node`` (module docstring).

    Attributes:
        num_devices: ranks in the cluster.
        devices_per_node: ranks per scale-up domain.
    """

    num_devices: int
    devices_per_node: int

    @staticmethod
    def axes(tp: np.ndarray, ep: np.ndarray, pp: np.ndarray, dp: np.ndarray,
             cp: np.ndarray | None = None) -> MeshAxes:
        """Group extents of every axis for rows of degrees, ``[n]`` each (``cp`` default 1)."""
        tp, ep = np.asarray(tp, dtype=np.int64), np.asarray(ep, dtype=np.int64)
        pp, dp = np.asarray(pp, dtype=np.int64), np.asarray(dp, dtype=np.int64)
        etp = np.maximum((tp * dp) // np.maximum(ep, 1), 1)
        cpa = np.ones_like(tp) if cp is None else np.asarray(cp, dtype=np.int64)
        return MeshAxes(pp=pp, dp=dp, tp=tp, ep=ep, etp=etp, cp=cpa)

    @staticmethod
    def head_groups(tp: np.ndarray, cp: np.ndarray) -> np.ndarray:
        """Groups the TP group's decode attention runs in, ``tp / cp`` per row, ``[n]`` int64
        (at least 1: ``cp > tp`` occurs only in rows the ``context_parallel`` rule refuses):
        head groups under a head split, sequence groups under a sequence split, each of
        ``cp`` ranks holding token shards of the same sequences."""
        return np.maximum(np.asarray(tp, dtype=np.int64) // np.asarray(cp, dtype=np.int64), 1)

    @staticmethod
    def rank(pp_i: int, dp_i: int, tp_i: int, dp: int, tp: int) -> int:
        """The rank of coordinates ``(pp_i, dp_i, tp_i)`` in an instance of ``dp × tp`` ranks
        per stage: TP innermost, then DP, then PP."""
        return (pp_i * dp + dp_i) * tp + tp_i

    def local_ranks(self, extent: np.ndarray) -> np.ndarray:
        """Fewest ranks of its own group any rank shares its node with, for groups of
        ``extent`` consecutive ranks (:func:`worst_local_ranks`), ``[n]`` float."""
        return worst_local_ranks_many(extent, self.devices_per_node, self.num_devices)

    def in_node(self, extent: np.ndarray) -> np.ndarray:
        """``[n]`` bool: every group of ``extent`` consecutive ranks stays inside one node
        (with 8-rank nodes, TP6's second group holds ranks 6–11 and straddles). A group larger
        than a one-node cluster stays on the scale-up link."""
        ext = np.asarray(extent)
        return (ext <= self.devices_per_node) & (self.local_ranks(ext) >= ext)

    def hop_crossings(self, stage: np.ndarray, pp: np.ndarray) -> np.ndarray:
        """``[n]`` int: how many of the ``pp − 1`` stage-to-stage hops cross a node boundary.

        Hop ``s`` joins stage ``s`` (ranks ``[s·S, (s+1)·S)``, ``S = stage``) and ``s + 1``; it
        crosses when the two together span a node boundary (TP4 PP4 on 8-rank nodes: hops
        0→1 and 2→3 stay inside, 1→2 crosses). The instance starts on a node boundary; on a
        one-node cluster nothing crosses. Computed once per distinct ``(stage, pp)``.
        """
        d = self.devices_per_node
        size = np.asarray(stage, dtype=np.int64)
        pairs, _, inv, _ = unique_rows(np.stack([size, np.asarray(pp, dtype=np.int64)], axis=1))
        u_size, u_pp = pairs[:, 0], pairs[:, 1]
        s = np.arange(max(int(u_pp.max(initial=1)) - 1, 1))[None, :]        # hop index
        first = s * u_size[:, None]
        last = (s + 2) * u_size[:, None] - 1
        crosses = (first // d != last // d) & (self.num_devices > d)
        return np.where(s < (u_pp - 1)[:, None], crosses, False).sum(axis=1)[inv.reshape(-1)]
