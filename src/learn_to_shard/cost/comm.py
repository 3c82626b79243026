"""Collective costs: alpha-beta with nccl-tests bus-bandwidth factors (vectorised).

For a collective over ``n`` ranks on a link of bus bandwidth ``bw`` (bytes/s) and per-step
latency ``alpha`` (s), with ``S`` the full logical buffer in bytes (nccl-tests convention,
github.com/NVIDIA/nccl-tests doc/PERFORMANCE.md):

* all-reduce:     ``2 (n-1)/n · S / bw + 2 ⌈log2 n⌉ α``
* all-gather / reduce-scatter: ``(n-1)/n · S / bw + ⌈log2 n⌉ α``
* all-to-all:     ``(n-1)/n · (S/n) / bw + ⌈log2 n⌉ α``  (each rank exchanges its S/n share)
* send-recv:      ``S / bw + α``
* all-to-all-v over nodes (MoE dispatch/combine, :func:`all_to_all_v_time_s`): the traffic to
  peers in the same scale-up domain rides NVLink while the rest crosses the NIC, in parallel;
  the slower share sets the time (hierarchical pricing, the layout of DeepEP's kernels:
  ``deepseek-ai/DeepEP`` README / docs/legacy.md).

The logarithmic latency term stands for NCCL's tree/NVLS algorithms at small messages
(assumption; calibrated in issue 3).
"""

from __future__ import annotations

import numpy as np

# Rank placement is the mesh's (parallel/mesh.py); worst_local_ranks is re-exported here.
from ..parallel.mesh import worst_local_ranks as worst_local_ranks
from ..parallel.mesh import worst_local_ranks_many
from ..parallel.placement import LAYOUTS, Collective, redistribute

# Kind codes for vectorised tables.
NONE, ALL_REDUCE, GATHER_OR_SCATTER, ALL_TO_ALL = 0, 1, 2, 3
KIND_NAMES = ("none", "all-reduce", "all-gather/reduce-scatter", "all-to-all")


_KIND_CODE = {None: NONE, Collective.ALL_REDUCE: ALL_REDUCE,
              Collective.ALL_GATHER: GATHER_OR_SCATTER,
              Collective.REDUCE_SCATTER: GATHER_OR_SCATTER, Collective.ALL_TO_ALL: ALL_TO_ALL}

#: ``[4, 4]`` collective kind codes for layout src -> dst, derived from
#: :func:`learn_to_shard.parallel.placement.redistribute` (the one place the rules live).
TRANSITION_KIND = np.array([[_KIND_CODE[redistribute(s, d)] for d in range(len(LAYOUTS))]
                            for s in range(len(LAYOUTS))], dtype=np.int64)


def transition_label(src: int, dst: int) -> str | None:
    """Human name of the collective for layout codes ``src -> dst`` (None if free)."""
    coll = redistribute(int(src), int(dst))
    return None if coll is None else coll.value


def collective_time_s(kind: np.ndarray, n: np.ndarray, full_bytes: np.ndarray,
                      bw_bytes_per_s: np.ndarray, alpha_s: np.ndarray) -> np.ndarray:
    """Time of one collective per element (vectorised).

    Args:
        kind: kind codes (NONE, ALL_REDUCE, GATHER_OR_SCATTER, ALL_TO_ALL), ``[k]``.
        n: ranks in the group, ``[k]``.
        full_bytes: full logical buffer S, bytes, ``[k]``.
        bw_bytes_per_s: achievable bus bandwidth of the link the group spans, ``[k]``.
        alpha_s: per-step latency, seconds, ``[k]``.

    Returns:
        Seconds, ``[k]``; zero where ``kind == NONE`` or ``n == 1``.
    """
    n_f = np.maximum(n, 1).astype(np.float64)
    frac = (n_f - 1.0) / n_f
    steps = np.ceil(np.log2(n_f))
    bus = np.select(
        [kind == ALL_REDUCE, kind == GATHER_OR_SCATTER, kind == ALL_TO_ALL],
        [2.0 * frac * full_bytes, frac * full_bytes, frac * full_bytes / n_f],
        0.0,
    )
    lat = np.select([kind == ALL_REDUCE, kind != NONE], [2.0 * steps, steps], 0.0) * alpha_s
    return np.where((kind == NONE) | (n_f <= 1), 0.0, bus / bw_bytes_per_s + lat)


def all_to_all_v_time_s(send_bytes_per_rank: np.ndarray, n: np.ndarray,
                        bw_bytes_per_s: np.ndarray, alpha_s: np.ndarray, domain: int,
                        scale_up_bw_bytes_per_s: np.ndarray | float,
                        total: int | None = None) -> np.ndarray:
    """All-to-all with an explicit per-rank send volume (MoE dispatch/combine).

    Args:
        send_bytes_per_rank: bytes each rank sends to its ``n - 1`` peers (own share
            excluded), spread evenly over them, ``[k]``.
        n: ranks in the group, ``[k]``.
        bw_bytes_per_s: bandwidth of the link the group spans (:meth:`CostModel.link`),
            ``[k]``.
        alpha_s: per-step latency of that link, seconds, ``[k]``.
        domain: ranks per scale-up domain. When a group spans nodes (``bw`` then being the
            scale-out link), a rank's share for its same-node peers goes over
            ``scale_up_bw_bytes_per_s`` in parallel with the share that crosses the NIC; the
            slower of the two sets the time. Groups are consecutive ranks laid out back to
            back from rank 0 and the worst-placed rank is priced: with ``local`` ranks of its
            group on its node (:func:`worst_local_ranks`) it has ``local - 1`` same-node
            peers and sends ``(n - local)/(n - 1)`` of its bytes over the NIC. A group inside
            one domain prices every byte on ``bw``.
        scale_up_bw_bytes_per_s: the scale-up link's bandwidth.
        total: ranks in the cluster (default: enough for every group to tile the layout).

    Returns:
        Seconds, ``[k]``: ``max(intra / bw_up, inter / bw) + ⌈log2 n⌉ α``; zero for ``n == 1``.
        DeepEP's low-latency kernels on H800 (measurements.csv; "pure RDMA", yet EP16 moves
        ~60 GB/s per rank on one 50 GB/s NIC, so same-node traffic does not all cross it) are
        within −3% to +15% of this at EP16–EP256 (``l2s validate``).
    """
    n_f = np.maximum(np.asarray(n), 1).astype(np.float64)
    send = np.asarray(send_bytes_per_rank, dtype=np.float64)
    peers = np.maximum(n_f - 1.0, 1.0)
    local = worst_local_ranks_many(n, domain, total)
    t_split = np.maximum(send * (local - 1.0) / peers / scale_up_bw_bytes_per_s,
                         send * (n_f - local) / peers / bw_bytes_per_s)
    t_bw = np.where(local < n_f, t_split, send / bw_bytes_per_s)
    t = t_bw + np.ceil(np.log2(n_f)) * alpha_s
    return np.where(n_f <= 1, 0.0, t)
