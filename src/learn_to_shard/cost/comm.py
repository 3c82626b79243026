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

Each collective algorithm on its own (NCCL ring / tree / NVLS, the engines' one-shot / two-shot
kernels, the fused all-reduce + RMSNorm) is priced by :func:`collective_options` and the
functions before it at the end of this module, with availability per device
(:mod:`learn_to_shard.hardware.fabric`) and engine (:mod:`learn_to_shard.engines.collectives`);
:class:`CollectivePricer` is their vectorised twin, which the cost model calls when
``CostModelConfig.collective_algorithm`` is not ``alpha-beta`` (``OperatorTerms._collective_s``
in :mod:`learn_to_shard.cost.terms`). Which algorithm runs is an engine launch setting
(:data:`learn_to_shard.engines.collectives.COLLECTIVE_SETTINGS`, :func:`settings_for`),
searched as an outer axis around the strategy search (``l2s plan --collectives search``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import overload

import numpy as np

from ..engines.collectives import ALGORITHMS as _ALGORITHMS
from ..engines.collectives import (
    COLLECTIVE_SETTINGS,
    CUSTOM_ALL_REDUCE,
    ENGINE_VENDORS,
    FUSED_RMSNORM,
    FUSED_RMSNORM_CAPABILITIES,
    NCCL_ALGORITHMS,
    NVLS_IN_ENGINE,
    CollectiveSetting,
)
from ..errors import ConfigError
from ..hardware.fabric import ScaleUpFabric, scale_up_fabric
from ..hardware.spec import ClusterSpec, DeviceSpec

# Rank placement is the mesh's (parallel/mesh.py); worst_local_ranks is re-exported here.
from ..parallel.mesh import worst_local_ranks as worst_local_ranks
from ..parallel.mesh import worst_local_ranks_many
from ..parallel.placement import LAYOUTS, Collective, redistribute
from .config import CostModelConfig

# Kind codes for vectorised tables.
NONE, ALL_REDUCE, GATHER_OR_SCATTER, ALL_TO_ALL = 0, 1, 2, 3
#: Per kind code: bus-byte multiple of ``frac · S`` and latency steps in units of ⌈log2 n⌉.
_BUS_FACTOR = np.array([0.0, 2.0, 1.0, 1.0])
_STEP_FACTOR = np.array([0.0, 2.0, 1.0, 1.0])
#: Group sizes below this are looked up in :func:`collective_time_s` (``n``, ``(n − 1)/n`` and
#: ``⌈log2 n⌉`` computed once, index 0 unused).
_GROUP_TABLE_SIZE = 1 << 17
_N_F = np.maximum(np.arange(_GROUP_TABLE_SIZE), 1).astype(np.float64)
_FRAC = (_N_F - 1.0) / _N_F
_STEPS = np.ceil(np.log2(_N_F))
#: Group sizes below this take :func:`collective_time_s`'s one-lookup path: per ``(kind, n)``
#: (flat index ``kind · _PAIR_TABLE_SIZE + n``) the bus-byte coefficient of ``S``, the latency
#: coefficient of ``α``, and whether anything moves (not NONE, more than one rank); the same
#: products, in the same order, as the general path.
_PAIR_TABLE_SIZE = 1 << 15
_BUS_COEF = (_BUS_FACTOR[:, None] * np.where(
    np.arange(4)[:, None] == ALL_TO_ALL, _FRAC[:_PAIR_TABLE_SIZE] / _N_F[:_PAIR_TABLE_SIZE],
    _FRAC[:_PAIR_TABLE_SIZE])).ravel()
_LAT_COEF = (_STEP_FACTOR[:, None] * _STEPS[None, :_PAIR_TABLE_SIZE]).ravel()
_LIVE = ((np.arange(4)[:, None] != NONE) & (_N_F[None, :_PAIR_TABLE_SIZE] > 1)).ravel()
KIND_NAMES = ("none", "all-reduce", "all-gather/reduce-scatter", "all-to-all")


_KIND_CODE = {None: NONE, Collective.ALL_REDUCE: ALL_REDUCE,
              Collective.ALL_GATHER: GATHER_OR_SCATTER,
              Collective.REDUCE_SCATTER: GATHER_OR_SCATTER, Collective.ALL_TO_ALL: ALL_TO_ALL}

#: ``[4, 4]`` collective kind codes for layout src -> dst, derived from
#: :func:`learn_to_shard.parallel.placement.redistribute` (the one place the rules live).
TRANSITION_KIND = np.array([[_KIND_CODE[redistribute(s, d)] for d in range(len(LAYOUTS))]
                            for s in range(len(LAYOUTS))], dtype=np.int64)


#: ``[4, 4]`` True where layout src -> dst is a reduce-scatter (the other
#: ``GATHER_OR_SCATTER`` transitions are all-gathers).
TRANSITION_REDUCE_SCATTER = np.array(
    [[redistribute(s, d) is Collective.REDUCE_SCATTER for d in range(len(LAYOUTS))]
     for s in range(len(LAYOUTS))], dtype=bool)


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
        Seconds, ``[k]``; zero where ``kind == NONE`` or ``n == 1`` (whatever ``alpha_s``);
        a zero-byte buffer costs its latency steps alone (no division by the bandwidth).
    """
    code = np.asarray(kind, dtype=np.int64)
    n_i = np.maximum(np.asarray(n), 1)
    if n_i.dtype.kind in "iu" and n_i.size and int(n_i.max()) < _PAIR_TABLE_SIZE:
        flat = code * _PAIR_TABLE_SIZE + n_i
        live = _LIVE[flat]
        if not live.any():
            return np.zeros(np.broadcast_shapes(live.shape, np.shape(full_bytes),
                                                np.shape(bw_bytes_per_s), np.shape(alpha_s)))
        bus = _BUS_COEF[flat] * full_bytes
        bw = np.asarray(bw_bytes_per_s, dtype=np.float64)
        t = np.divide(bus, bw, out=np.zeros(np.broadcast_shapes(bus.shape, bw.shape)),
                      where=bus != 0) + _LAT_COEF[flat] * alpha_s
        return np.where(live, t, 0.0)
    if not ((code != NONE) & (n_i > 1)).any():      # nothing to move: skip the passes below
        return np.zeros(np.broadcast_shapes(code.shape, n_i.shape, np.shape(full_bytes),
                                            np.shape(bw_bytes_per_s), np.shape(alpha_s)))
    if n_i.dtype.kind in "iu" and n_i.size and int(n_i.max()) < _GROUP_TABLE_SIZE:
        n_f, frac, steps = _N_F[n_i], _FRAC[n_i], _STEPS[n_i]     # the same values, looked up
    else:
        n_f = n_i.astype(np.float64)
        frac = (n_f - 1.0) / n_f              # 0 for one rank: no bytes, no steps
        steps = np.ceil(np.log2(n_f))
    # bus bytes 2·frac·S (all-reduce), frac·S (all-gather / reduce-scatter), frac·S/n
    # (all-to-all); steps 2⌈log2 n⌉ for all-reduce, ⌈log2 n⌉ otherwise; nothing for NONE.
    per_n = np.where(code == ALL_TO_ALL, frac / n_f, frac)
    bus = _BUS_FACTOR[code] * per_n * full_bytes
    lat = _STEP_FACTOR[code] * steps * alpha_s
    bus, bw = np.broadcast_arrays(bus, np.asarray(bw_bytes_per_s, dtype=np.float64))
    # no bytes, no division: a group without a link to price (bandwidth 0) costs nothing
    # (NaN or negative bytes are divided, so they show); NONE or one rank is 0 whatever alpha
    t = np.divide(bus, bw, out=np.zeros(bus.shape), where=bus != 0) + lat
    return np.where((code == NONE) | (n_f <= 1), 0.0, t)


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


# ---------------------------------------------------------------------------------------------
# Expert all-to-all as DeepEP runs it (issue "Serving under load", item 4): the payload in the
# precision the engine sends, tokens sent once per destination node in the normal
# (high-throughput) kernels, and the kernels' fixed cost. Priced beside the cost model's
# :func:`all_to_all_v_time_s` and checked against the measured DeepEP tables
# (``data/silicon/moe_a2a.csv``, :func:`learn_to_shard.fidelity.kernels.expert_a2a_report`);
# the cost model does not call it yet.
# ---------------------------------------------------------------------------------------------

#: Bytes per hidden element of a dispatched / combined token, scales included:
#: BF16; FP8 e4m3 with one FP32 scale per 128 channels (DeepEP's FP8 dispatch; SGLang's DeepEP
#: path quantises dispatch this way unless ``SGLANG_DEEPEP_BF16_DISPATCH`` is set,
#: sgl-project/sglang ``sglang_per_token_group_quant_fp8(hidden_states, 128)``); NVFP4 with one
#: FP8 scale per 16 elements (TensorRT-LLM's ``moe_a2a`` ``nvfp4`` payload). Combine runs in
#: BF16 in every kernel of the tables (their ``nvfp4`` / ``fp8`` combine rows measure as the
#: BF16 ones: ``moe_a2a.csv``).
A2A_PAYLOAD_BYTES = {"bf16": 2.0, "fp8": 1.0 + 4.0 / 128.0, "nvfp4": 0.5 + 1.0 / 16.0}

#: DeepEP kernel modes: ``normal`` (high-throughput: across nodes a token crosses the NIC once
#: per destination node and is forwarded over NVLink, DeepEP's internode kernels) and
#: ``low_latency`` (one RDMA write per destination rank, no forwarding; DeepEP's
#: low-latency kernels). deepseek-ai/DeepEP README, "Normal kernels with NVLink and RDMA
#: forwarding" / "Low-latency kernels with pure RDMA".
A2A_MODES = ("normal", "low_latency")

#: Fixed cost of one DeepEP dispatch or combine, seconds, per mode: the median over the
#: one-node (EP8, H100 / H200) rows of ``moe_a2a.csv`` of measured time minus the transfer time
#: :func:`expert_a2a_time_s` prices (its calibration subset; the multi-node rows are held out).
#: ``tests/test_collectives.py`` recomputes both from the table.
A2A_FLOOR_S = {"normal": 6.2e-05, "low_latency": 4.8e-05}


def expected_destinations(bins: np.ndarray | int, experts: int, top_k: int) -> np.ndarray:
    """Expected number of the ``bins`` equal groups of experts (ranks, or nodes) that receive a
    token routed to ``top_k`` of ``experts`` experts drawn uniformly without replacement:
    ``b · (1 − C(E − E/b, k) / C(E, k))`` (hypergeometric; ``1`` for ``b = 1``). Group-limited
    routing (DeepSeek-V3 ``topk_group``) is not modelled: it can only lower the count.

    Args:
        bins: ``[n]`` groups (each holding ``experts / bins`` experts).
        experts, top_k: the model's routed experts and experts per token.
    """
    b = np.atleast_1d(np.asarray(bins, dtype=np.int64))
    uniq, inv = np.unique(b, return_inverse=True)
    vals = np.array([u * (1.0 - math.comb(experts - experts // u, top_k)
                          / math.comb(experts, top_k)) if u > 1 else 1.0
                     for u in uniq.tolist()], dtype=np.float64)
    return vals[inv.reshape(b.shape)]


def expert_a2a_time_s(tokens_per_rank: np.ndarray | float, ep: np.ndarray | int, *,
                      hidden: int, top_k: int, experts: int, payload: str, mode: str,
                      domain: int, scale_up_bytes_per_s: float,
                      scale_out_bytes_per_s: float) -> np.ndarray:
    """One MoE dispatch (or combine) over ``ep`` expert-parallel ranks as DeepEP runs it,
    seconds, ``[n]``.

    Each rank holds ``tokens_per_rank`` tokens of ``hidden`` elements, sent in ``payload``
    precision (:data:`A2A_PAYLOAD_BYTES`) to the ranks holding their ``top_k`` experts, once
    per destination rank (``d_r`` = :func:`expected_destinations` over the ``ep`` ranks). The
    ranks fill nodes of ``domain`` devices (``N = ceil(ep / domain)`` nodes).

    * one node, or ``low_latency``: a rank sends ``T · d_r · (ep−1)/ep`` tokens; the share for
      its ``local − 1`` same-node peers over NVLink and the rest over the NIC in parallel,
      the slower setting the time (as :func:`all_to_all_v_time_s`);
    * ``normal`` across nodes: a token crosses the NIC once per remote destination node
      (``d_n`` = :func:`expected_destinations` over the ``N`` nodes, ``T · d_n · (N−1)/N``
      tokens), and every (token, destination rank) pair but the rank's own is carried over
      NVLink (directly or forwarded), ``T · d_r · (ep−1)/ep`` tokens; the slower link sets
      the time;

    plus the kernel's fixed cost :data:`A2A_FLOOR_S`. Bandwidths are the effective
    per-direction link rates (preset × efficiency, as :meth:`CostModel.link`).

    Raises:
        ConfigError: unknown ``payload`` or ``mode``.
    """
    if payload not in A2A_PAYLOAD_BYTES:
        raise ConfigError(f"payload: {payload!r} is not one of {', '.join(A2A_PAYLOAD_BYTES)}")
    if mode not in A2A_MODES:
        raise ConfigError(f"mode: {mode!r} is not one of {', '.join(A2A_MODES)}")
    t = np.atleast_1d(np.asarray(tokens_per_rank, dtype=np.float64))
    ep_i = np.broadcast_to(np.atleast_1d(np.asarray(ep, dtype=np.int64)), t.shape)
    ep_f = ep_i.astype(np.float64)
    per_token = hidden * A2A_PAYLOAD_BYTES[payload]
    local = np.minimum(ep_f, float(domain))
    nodes = np.ceil(ep_f / domain)
    d_r = expected_destinations(ep_i, experts, top_k)
    pairs = t * d_r * (ep_f - 1.0) / np.maximum(ep_f, 1.0) * per_token     # bytes off-rank
    peers = np.maximum(ep_f - 1.0, 1.0)
    direct = np.maximum(pairs * (local - 1.0) / peers / scale_up_bytes_per_s,
                        pairs * (ep_f - local) / peers / scale_out_bytes_per_s)
    if mode == "normal":
        d_n = expected_destinations(nodes.astype(np.int64), experts, top_k)
        nic = t * d_n * (nodes - 1.0) / np.maximum(nodes, 1.0) * per_token
        forwarded = np.maximum(nic / scale_out_bytes_per_s, pairs / scale_up_bytes_per_s)
        transfer = np.where(nodes > 1, forwarded, direct)
    else:
        transfer = direct
    return np.where(ep_f <= 1, 0.0, transfer + A2A_FLOOR_S[mode])


# ---------------------------------------------------------------------------------------------
# Collective algorithms, priced one by one (issue 16, item 1): ring, tree, NVLS, the engines'
# one-shot / two-shot kernels and the fused all-reduce + RMSNorm. The cost model prices
# collectives with :func:`collective_time_s` by default and with :class:`CollectivePricer`
# (below, the same formulas vectorised) when ``CostModelConfig.collective_algorithm`` asks.
#
# Alpha-beta per algorithm, ``t = latency + S / algbw`` with ``S`` the full buffer in bytes
# (nccl-tests convention), ``n`` ranks over ``nodes`` scale-up domains, ``B`` the link's
# per-direction bandwidth times its efficiency (``CostModelConfig.scale_up_efficiency`` /
# ``scale_out_efficiency``, the same "bus bandwidth" the cost model uses):
#
# * ring (NCCL ``RING``): ``steps = 2(n-1)`` (all-reduce) or ``n-1`` (all-gather /
#   reduce-scatter), ``latency = base + (steps - inter) · intra_step + inter · net_step`` with
#   ``inter = 2·nodes`` (all-reduce over several domains) or ``nodes - 1``; bandwidth term
#   ``steps / n · S / (f · B)`` (2(n-1)/n for all-reduce: Patarasuk & Yuan, "Bandwidth optimal
#   all-reduce algorithms for clusters of workstations", JPDC 69(2), 2009);
# * tree (NCCL ``TREE``, all-reduce only: a chain inside a node, NCCL 2.4's double binary tree
#   across nodes, Sanders, Speck & Träff, "Two-tree algorithms for full bandwidth broadcast,
#   reduction and scan", Parallel Computing 35(12), 2009): ``latency = base + 2 ((n/nodes - 1)
#   intra_step + log2(nodes) net_step)``, bandwidth term ``2 S / (f · B)``;
# * each NCCL algorithm is priced at its cheapest protocol (LL, LL128, Simple), as NCCL's own
#   tuner picks one per call: base latencies, per-step latencies and bandwidth fractions ``f``
#   are NCCL's tuning model (``src/graph/tuning.cc``: NVIDIA/nccl @ b6475625fbca for ring and
#   tree, whose values the v2.28.3 copy zhanglin496/nccl-2.28.3-1 @ 850a18f5a2d1 keeps; LL's
#   bandwidth is also capped at ``llMaxBws``);
# * NVLS (in-switch reduction, one NVLink domain only): all-reduce ``latency + S / (e · link)``
#   — every rank sends ``S`` up and receives ``S`` down once, against ring's ``2(n-1)/n S`` —
#   with NCCL's NVLS latency (25 µs, tuning.cc v2.28.3) and ``e`` the measured NVLS all-reduce
#   efficiency (:data:`NVLS_ALLREDUCE_EFFICIENCY`); all-gather / reduce-scatter move the ring's
#   ``(n-1)/n S`` per rank and are assumed at the ring's bus efficiency;
# * one-shot (vLLM ``cross_device_reduce_1stage``, TensorRT-LLM ``ONESHOT``): every rank reads
#   the ``n - 1`` peers' whole buffers and reduces locally: ``α_k + (n-1) S / B``;
# * two-shot (vLLM ``cross_device_reduce_2stage``, TensorRT-LLM ``TWOSHOT``): reduce-scatter
#   then all-gather by direct peer loads and stores: ``2 α_k + 2(n-1)/n S / B``;
#   ``α_k`` (:data:`CUSTOM_KERNEL_LATENCY_S`) is one barrier-synchronised pass of these kernels;
# * RMSNorm after an all-reduce (``then_rmsnorm``): unfused, a separate kernel reads the reduced
#   row and the residual and writes both back (``4 S`` of HBM traffic plus one kernel launch);
#   fused into the one-/two-shot kernel (TensorRT-LLM ``RESIDUAL_RMS_NORM``, FlashInfer's
#   all-reduce fusion) the reduced row stays on chip: ``3 S`` (residual in, residual and
#   normed row out), no launch. The HBM traffic counts are this module's assumption.
# ---------------------------------------------------------------------------------------------

#: Algorithm names, in the order they are reported (defined with the engines' data,
#: :data:`learn_to_shard.engines.collectives.ALGORITHMS`).
ALGORITHMS = _ALGORITHMS
#: Collectives each algorithm implements.
ALGORITHM_COLLECTIVES: dict[str, tuple[str, ...]] = {
    "ring": ("all-reduce", "all-gather", "reduce-scatter"),
    "tree": ("all-reduce",),
    "nvls": ("all-reduce", "all-gather", "reduce-scatter"),
    "one-shot": ("all-reduce",), "two-shot": ("all-reduce",),
    "one-shot+rmsnorm": ("all-reduce",), "two-shot+rmsnorm": ("all-reduce",),
}


@dataclass(frozen=True)
class NcclProtocol:
    """One NCCL protocol's cost terms for one algorithm (NCCL ``src/graph/tuning.cc``).

    Attributes:
        name: ``LL``, ``LL128`` or ``Simple``.
        base_latency_s: ``baseLat``, seconds per call.
        nvlink_step_s, pcie_step_s, net_step_s: ``hwLat`` per step on NVLink, PCIe and the
            network, seconds.
        bus_fraction: fraction of the bus bandwidth the protocol reaches inside one domain.
        bus_fraction_multi_node: the same across domains.
        ll_capped: the bandwidth is also capped at ``llMaxBws`` (:data:`NCCL_LL_MAX_BYTES_PER_S`).
    """

    name: str
    base_latency_s: float
    nvlink_step_s: float
    pcie_step_s: float
    net_step_s: float
    bus_fraction: float
    bus_fraction_multi_node: float
    ll_capped: bool


#: Ring protocols (tuning.cc: baseLat ring {6.6, 14.0, 8.4} µs; hwLat NVLink {0.6, 1.9, 3.4},
#: PCI {1.0, 2.5, 5.7}, NET {2.7, 4.0, 14.0} µs; LL at half the bus bandwidth (v2.28.3), LL128
#: at 0.92).
RING_PROTOCOLS = (
    NcclProtocol("LL", 6.6e-6, 0.6e-6, 1.0e-6, 2.7e-6, 0.5, 0.5, True),
    NcclProtocol("LL128", 14.0e-6, 1.9e-6, 2.5e-6, 4.0e-6, 0.92, 0.92, False),
    NcclProtocol("Simple", 8.4e-6, 3.4e-6, 5.7e-6, 14.0e-6, 1.0, 1.0, False),
)
#: Tree protocols (tuning.cc: baseLat tree {6.8, 14.0, 8.4} µs; hwLat NVLink {0.6, 1.25, 4.0},
#: PCI {1.0, 1.9, 4.0}, NET {5.0, 8.5, 14} µs (v2.28.3); bus bandwidth × 0.92, LL × 1/3.8,
#: LL128 × 7/9 in one node and × 120/128 across nodes).
TREE_PROTOCOLS = (
    NcclProtocol("LL", 6.8e-6, 0.6e-6, 1.0e-6, 5.0e-6, 0.92 / 3.8, 0.92 / 3.8, True),
    NcclProtocol("LL128", 14.0e-6, 1.25e-6, 1.9e-6, 8.5e-6, 0.92 * 7 / 9, 0.92 * 120 / 128,
                 False),
    NcclProtocol("Simple", 8.4e-6, 4.0e-6, 4.0e-6, 14.0e-6, 0.92, 0.92, False),
)
#: LL's bandwidth cap ``llMaxBws`` (tuning.cc v2.28.3), bytes/s, for one node by GPU
#: generation; across nodes NCCL indexes it by host CPU, and the AMD-host row is used here
#: (22.5 GB/s for 2 nodes, 19.0 beyond; Intel hosts: 39.0 / 20.4).
NCCL_LL_MAX_BYTES_PER_S: dict[str, float] = {"ampere": 87.7e9, "hopper": 141.0e9,
                                             "blackwell": 282.0e9}
NCCL_LL_MAX_MULTI_NODE_BYTES_PER_S = (22.5e9, 19.0e9)
#: NCCL's NVLS latency on NVLink (tuning.cc v2.28.3 ``hwLatencies`` NVLINK NVLS Simple, base
#: 0), seconds.
NVLS_LATENCY_S = 25e-6
#: NVLS all-reduce algorithm bandwidth ÷ the scale-up link's per-direction bandwidth. Hopper
#: 0.565: measured, 8×H100 NCCL 2.29.2 all-reduce of 512 MiB in 2111 µs = 254 GB/s of 450 GB/s
#: (data/silicon/nccl.csv, the largest message: latency-free). Blackwell 0.49: the Hopper value
#: × NCCL's own nvlsEfficiency ratio 0.74 / 0.85 (tuning.cc v2.28.3), not fitted on B200.
NVLS_ALLREDUCE_EFFICIENCY: dict[str, float] = {"hopper": 0.565, "blackwell": 0.565 * 0.74 / 0.85}
#: One barrier-synchronised pass of the engines' one-/two-shot kernels, seconds. Measured: the
#: TensorRT-LLM custom all-reduce of 512 bytes on 8×H100 takes 3.17 µs (vLLM's 4.6 µs, SGLang's
#: 3.3 µs: data/silicon/custom_allreduce.csv, CUDA-graph rows).
CUSTOM_KERNEL_LATENCY_S = 3.2e-6


@dataclass(frozen=True)
class AlgorithmTime:
    """The price of one collective algorithm for one message.

    Attributes:
        algorithm: a name of :data:`ALGORITHMS`.
        collective: ``all-reduce``, ``all-gather`` or ``reduce-scatter``.
        time_s: total seconds (``latency_s + bandwidth_s``, plus the RMSNorm pass if asked).
        latency_s: the size-independent part, seconds.
        bandwidth_s: the size-proportional part, seconds.
        detail: NCCL protocol, fused epilogue, flags or the engine's selection rule.
    """

    algorithm: str
    collective: str
    time_s: float
    latency_s: float
    bandwidth_s: float
    detail: str = ""


@dataclass(frozen=True)
class CollectiveOptions:
    """Every algorithm available for one collective on one group, priced.

    Attributes:
        collective: ``all-reduce``, ``all-gather`` or ``reduce-scatter``.
        n: ranks in the group.
        message_bytes: the full buffer, bytes (nccl-tests size).
        engine: the engine whose availability applies (``None``: what the hardware has).
        options: the available algorithms, cheapest first.
        unavailable: ``(algorithm, reason)`` for each algorithm that is not.
    """

    collective: str
    n: int
    message_bytes: float
    engine: str | None
    options: tuple[AlgorithmTime, ...]
    unavailable: tuple[tuple[str, str], ...]

    @property
    def best(self) -> AlgorithmTime | None:
        """The cheapest available algorithm (``None`` if none is available)."""
        return self.options[0] if self.options else None

    def time_s(self, algorithm: str) -> float | None:
        """Seconds of ``algorithm`` (``None`` if it is not available)."""
        return next((o.time_s for o in self.options if o.algorithm == algorithm), None)


def _generation(fabric: ScaleUpFabric) -> str:
    """``ampere``, ``hopper`` or ``blackwell`` for NCCL's per-generation tables (compute
    capability 10+ is Blackwell, 9.x Hopper, older or unknown Ampere)."""
    cc = float(fabric.compute_capability) if fabric.compute_capability else 8.0
    return "blackwell" if cc >= 10.0 else "hopper" if cc >= 9.0 else "ampere"


def _nccl_time(protocols: tuple[NcclProtocol, ...], latency_of: dict[str, float],
               fraction_of: dict[str, float], bus_bytes_per_s: float, volume_bytes: float,
               ll_cap_bytes_per_s: float) -> tuple[float, float, str]:
    """Cheapest protocol: ``(latency_s, bandwidth_s, protocol name)``."""
    best = (math.inf, 0.0, "")
    for p in protocols:
        bw = fraction_of[p.name] * bus_bytes_per_s
        if p.ll_capped:
            bw = min(bw, ll_cap_bytes_per_s)
        lat, beta = latency_of[p.name], volume_bytes / bw
        if lat + beta < best[0] + best[1]:
            best = (lat, beta, p.name)
    return best


def ring_time_s(collective: str, n: int, message_bytes: float, bus_bytes_per_s: float,
                nodes: int = 1, fabric_kind: str = "nvswitch",
                generation: str = "hopper") -> AlgorithmTime:
    """NCCL's ring, at its cheapest protocol (formula in the section comment above).

    Args:
        collective: ``all-reduce``, ``all-gather`` or ``reduce-scatter``.
        n: ranks (>= 2); ``nodes``: scale-up domains the group spans (``n`` divisible by it).
        message_bytes: full buffer S, bytes.
        bus_bytes_per_s: bus bandwidth of the bottleneck link (scale-out when ``nodes > 1``).
        fabric_kind: ``pcie`` uses NCCL's PCI step latencies, anything else NVLink's.
        generation: ``ampere`` / ``hopper`` / ``blackwell`` (LL bandwidth cap).

    Raises:
        ConfigError: a collective the ring does not implement, or ``n < 2``.
    """
    if collective not in ALGORITHM_COLLECTIVES["ring"] or n < 2:
        raise ConfigError(f"ring: no {collective} over {n} ranks")
    steps = 2 * (n - 1) if collective == "all-reduce" else n - 1
    inter = (2 * nodes if nodes > 1 else 0) if collective == "all-reduce" else nodes - 1
    cap = (NCCL_LL_MAX_BYTES_PER_S[generation] if nodes == 1 else
           NCCL_LL_MAX_MULTI_NODE_BYTES_PER_S[0 if nodes == 2 else 1])
    lat = {p.name: p.base_latency_s + (steps - inter) * (p.pcie_step_s if fabric_kind == "pcie"
                                                         else p.nvlink_step_s)
           + inter * p.net_step_s for p in RING_PROTOCOLS}
    frac = {p.name: p.bus_fraction if nodes == 1 else p.bus_fraction_multi_node
            for p in RING_PROTOCOLS}
    a, b, proto = _nccl_time(RING_PROTOCOLS, lat, frac, bus_bytes_per_s,
                             steps / n * message_bytes, cap)
    return AlgorithmTime("ring", collective, a + b, a, b, f"NCCL ring, {proto} protocol")


def tree_time_s(n: int, message_bytes: float, bus_bytes_per_s: float, nodes: int = 1,
                fabric_kind: str = "nvswitch", generation: str = "hopper") -> AlgorithmTime:
    """NCCL's tree all-reduce (a chain in each domain, a double binary tree across domains),
    at its cheapest protocol; arguments as :func:`ring_time_s`.

    Raises:
        ConfigError: ``n < 2``.
    """
    if n < 2:
        raise ConfigError(f"tree: no all-reduce over {n} ranks")
    per_node = max(n // nodes, 1)
    cap = (NCCL_LL_MAX_BYTES_PER_S[generation] if nodes == 1 else
           NCCL_LL_MAX_MULTI_NODE_BYTES_PER_S[0 if nodes == 2 else 1])
    log_nodes = math.log2(nodes) if nodes > 1 else 0.0
    lat = {p.name: p.base_latency_s + 2 * ((per_node - 1) * (
        p.pcie_step_s if fabric_kind == "pcie" else p.nvlink_step_s) + log_nodes * p.net_step_s)
        for p in TREE_PROTOCOLS}
    frac = {p.name: p.bus_fraction if nodes == 1 else p.bus_fraction_multi_node
            for p in TREE_PROTOCOLS}
    a, b, proto = _nccl_time(TREE_PROTOCOLS, lat, frac, bus_bytes_per_s, 2.0 * message_bytes,
                             cap)
    return AlgorithmTime("tree", "all-reduce", a + b, a, b, f"NCCL tree, {proto} protocol")


def nvls_time_s(collective: str, n: int, message_bytes: float, link_bytes_per_s: float,
                bus_bytes_per_s: float, generation: str = "hopper") -> AlgorithmTime:
    """NCCL's NVLS (NVLink SHARP) inside one NVLink domain.

    Args:
        collective: ``all-reduce`` (``S / (e · link)``), ``all-gather`` or ``reduce-scatter``
            (``(n-1)/n · S / bus``).
        n: ranks (>= 2).
        message_bytes: full buffer S, bytes.
        link_bytes_per_s: the scale-up link's per-direction bandwidth (datasheet).
        bus_bytes_per_s: the link's bus bandwidth (link × scale-up efficiency).
        generation: ``hopper`` or ``blackwell`` (:data:`NVLS_ALLREDUCE_EFFICIENCY`).

    Raises:
        ConfigError: an unknown collective, ``n < 2`` or a generation without NVLS.
    """
    if collective not in ALGORITHM_COLLECTIVES["nvls"] or n < 2 \
            or generation not in NVLS_ALLREDUCE_EFFICIENCY:
        raise ConfigError(f"nvls: no {collective} over {n} ranks on {generation}")
    if collective == "all-reduce":
        beta = message_bytes / (NVLS_ALLREDUCE_EFFICIENCY[generation] * link_bytes_per_s)
    else:
        beta = (n - 1) / n * message_bytes / bus_bytes_per_s
    return AlgorithmTime("nvls", collective, NVLS_LATENCY_S + beta, NVLS_LATENCY_S, beta,
                         "NCCL NVLS (in-switch reduction)")


def one_shot_time_s(n: int, message_bytes: float, bus_bytes_per_s: float,
                    latency_s: float = CUSTOM_KERNEL_LATENCY_S) -> AlgorithmTime:
    """One-shot all-reduce: ``α + (n-1) S / B`` (every rank reads every peer's buffer).

    Raises:
        ConfigError: ``n < 2``.
    """
    if n < 2:
        raise ConfigError(f"one-shot: no all-reduce over {n} ranks")
    beta = (n - 1) * message_bytes / bus_bytes_per_s
    return AlgorithmTime("one-shot", "all-reduce", latency_s + beta, latency_s, beta)


def two_shot_time_s(n: int, message_bytes: float, bus_bytes_per_s: float,
                    latency_s: float = CUSTOM_KERNEL_LATENCY_S) -> AlgorithmTime:
    """Two-shot all-reduce: ``2 α + 2(n-1)/n S / B`` (reduce-scatter, then all-gather).

    Raises:
        ConfigError: ``n < 2``.
    """
    if n < 2:
        raise ConfigError(f"two-shot: no all-reduce over {n} ranks")
    beta = 2.0 * (n - 1) / n * message_bytes / bus_bytes_per_s
    return AlgorithmTime("two-shot", "all-reduce", 2 * latency_s + beta, 2 * latency_s, beta)


@overload
def rmsnorm_pass_time_s(message_bytes: float, hbm_bytes_per_s: float, fused: bool,
                        kernel_overhead_s: float) -> float: ...
@overload
def rmsnorm_pass_time_s(message_bytes: np.ndarray, hbm_bytes_per_s: float, fused: bool,
                        kernel_overhead_s: float) -> np.ndarray: ...
def rmsnorm_pass_time_s(message_bytes: float | np.ndarray, hbm_bytes_per_s: float,
                        fused: bool, kernel_overhead_s: float) -> float | np.ndarray:
    """Seconds the residual add + RMSNorm after an all-reduce adds: ``3 S / HBM`` fused into
    the all-reduce kernel, ``4 S / HBM + kernel_overhead_s`` as its own kernel (traffic counts
    in the section comment above; ``hbm_bytes_per_s`` already times its efficiency); ``S``
    a number of bytes or an array of them (the result has its shape)."""
    return (3.0 if fused else 4.0) * message_bytes / hbm_bytes_per_s \
        + (0.0 if fused else kernel_overhead_s)


def collective_options(where: ClusterSpec | DeviceSpec, collective: str | Collective, n: int,
                       message_bytes: float, engine: str | None = None,
                       then_rmsnorm: bool = False,
                       config: CostModelConfig | None = None) -> CollectiveOptions:
    """Every algorithm ``engine`` can run for one collective on hardware ``where``, priced.

    Args:
        where: the cluster (a group of ``n`` consecutive ranks spans ``ceil(n / domain)``
            scale-up domains) or one device type (the group must fit one domain).
        collective: ``all-reduce``, ``all-gather`` or ``reduce-scatter`` (or the
            :class:`~learn_to_shard.parallel.placement.Collective`).
        n: ranks in the group (>= 1; 1 has no options: nothing to exchange).
        message_bytes: full buffer, bytes (> 0).
        engine: ``vllm``, ``sglang``, ``trtllm`` (what that engine can launch, its size caps
            and selection rules: :mod:`learn_to_shard.engines.collectives`), or ``None``
            (every algorithm the hardware has, no engine caps).
        then_rmsnorm: the all-reduce is followed by a residual add + RMSNorm (after every
            row-parallel layer): every option then includes that pass, separate or fused.
        config: link and HBM efficiencies and the kernel launch cost (default
            :class:`CostModelConfig`).

    Returns:
        :class:`CollectiveOptions` with the available algorithms cheapest first and the
        reason each other one is not available.

    Raises:
        ConfigError: an unknown collective or engine, ``n < 1``, a device group larger than
            one domain, or a message that is not positive.
    """
    coll = collective.value if isinstance(collective, Collective) else str(collective)
    if coll not in ("all-reduce", "all-gather", "reduce-scatter"):
        raise ConfigError(f"collective {coll!r}: one of all-reduce, all-gather, reduce-scatter")
    if engine is not None and engine not in ENGINE_VENDORS:
        raise ConfigError(f"engine {engine!r}: one of {', '.join(ENGINE_VENDORS)} or None")
    if n < 1 or not message_bytes > 0:
        raise ConfigError(f"need n >= 1 and message_bytes > 0, got {n}, {message_bytes}")
    device = where.device if isinstance(where, ClusterSpec) else where
    if isinstance(where, DeviceSpec) and n > device.scale_up_domain:
        raise ConfigError(f"{n} ranks exceed one {device.name} domain of "
                         f"{device.scale_up_domain}; pass the ClusterSpec")
    cfg = config or CostModelConfig()
    fabric = scale_up_fabric(device)
    gen = _generation(fabric)
    domain = device.scale_up_domain
    nodes = -(-n // domain)
    one_domain = nodes == 1
    up_bus = device.scale_up_bytes_per_s * cfg.scale_up_efficiency
    bus = up_bus if one_domain else device.scale_out_bytes_per_s * cfg.scale_out_efficiency
    hbm = device.hbm_bytes_per_s * cfg.hbm_efficiency
    avail: list[AlgorithmTime] = []
    missing: list[tuple[str, str]] = []
    names = [a for a in ALGORITHMS if coll in ALGORITHM_COLLECTIVES[a]
             and (then_rmsnorm or not a.endswith("+rmsnorm"))]

    def gone(algo: str, why: str) -> None:
        missing.append((algo, why))

    if n == 1:
        return CollectiveOptions(coll, n, float(message_bytes), engine, (),
                                 tuple((a, "one rank: nothing to exchange") for a in names))
    runs = engine is None or fabric.vendor in ENGINE_VENDORS[engine]
    if not runs:
        return CollectiveOptions(coll, n, float(message_bytes), engine, (), tuple(
            (a, f"{engine} does not run on {fabric.vendor} devices ({device.name})")
            for a in names))
    norm_sep = (rmsnorm_pass_time_s(message_bytes, hbm, False, cfg.kernel_overhead_s)
                if then_rmsnorm else 0.0)
    norm_fused = rmsnorm_pass_time_s(message_bytes, hbm, True, 0.0) if then_rmsnorm else 0.0

    def add(t: AlgorithmTime, extra: float, detail: str) -> None:
        avail.append(AlgorithmTime(t.algorithm, coll, t.time_s + extra, t.latency_s,
                                   t.bandwidth_s, detail))

    sep_note = " + separate RMSNorm kernel" if then_rmsnorm else ""
    for algo in names:
        if algo == "ring":
            t = ring_time_s(coll, n, message_bytes, bus, nodes, fabric.kind, gen)
            add(t, norm_sep, t.detail + sep_note)
        elif algo == "tree":
            t = tree_time_s(n, message_bytes, bus, nodes, fabric.kind, gen)
            add(t, norm_sep, t.detail + sep_note)
        elif algo == "nvls":
            if not fabric.nvls:
                gone(algo, f"{device.name} has no NVLink SHARP ({fabric.kind}; "
                           "NVLS needs NVSwitch generation 3 or later)")
            elif not one_domain:
                gone(algo, f"the group spans {nodes} NVLink domains")
            else:
                t = nvls_time_s(coll, n, message_bytes, device.scale_up_bytes_per_s, up_bus,
                                gen)
                how = f"; {NVLS_IN_ENGINE[engine][1]}" if engine else ""
                add(t, norm_sep, t.detail + how + sep_note)
        else:
            kernel = algo.split("+")[0]
            fused = algo.endswith("+rmsnorm")
            why = _custom_unavailable(kernel, fused, fabric, device, engine, n, message_bytes,
                                      one_domain)
            if why:
                gone(algo, why)
                continue
            fn = one_shot_time_s if kernel == "one-shot" else two_shot_time_s
            t = fn(n, message_bytes, up_bus)
            t = AlgorithmTime(algo, coll, t.time_s, t.latency_s, t.bandwidth_s)
            detail = (f"{engine} custom all-reduce" if engine else "custom all-reduce kernel")
            if fused:
                add(t, norm_fused, detail + ", RMSNorm fused"
                    + (f": {FUSED_RMSNORM[engine][1]}" if engine else ""))
            else:
                add(t, norm_sep, detail + sep_note)
    avail.sort(key=lambda o: (o.time_s, ALGORITHMS.index(o.algorithm)))
    return CollectiveOptions(coll, n, float(message_bytes), engine, tuple(avail),
                             tuple(missing))


def _custom_unavailable(kernel: str, fused: bool, fabric: ScaleUpFabric, device: DeviceSpec,
                        engine: str | None, n: int, message_bytes: float,
                        one_domain: bool) -> str:
    """Why the one-/two-shot kernel (optionally with the fused RMSNorm) cannot run here
    (empty string: it can)."""
    if not one_domain:
        return "the group spans scale-up domains (peer loads need one NVLink/xGMI domain)"
    if not fabric.p2p_full_mesh:
        return (f"{device.name} is not a fully connected peer-to-peer domain ({fabric.kind})")
    if fused and (fabric.vendor != "nvidia"
                  or fabric.compute_capability not in FUSED_RMSNORM_CAPABILITIES):
        return (f"the fused all-reduce + RMSNorm kernels need compute capability "
                f"{'/'.join(FUSED_RMSNORM_CAPABILITIES)} (FlashInfer / TensorRT-LLM builds)")
    if engine is None:
        return ""
    spec = CUSTOM_ALL_REDUCE[engine]
    if fabric.vendor not in spec.vendors:
        return f"{engine}'s custom all-reduce does not run on {fabric.vendor} devices"
    if n not in spec.world_sizes:
        return (f"{engine}'s custom all-reduce takes {', '.join(map(str, spec.world_sizes))} "
                f"ranks, not {n}")
    cap = spec.cap_bytes(fabric.vendor, fabric.compute_capability, n, fabric.nvls)
    if message_bytes >= cap:
        return f"{engine} runs NCCL at {message_bytes:.0f} bytes (custom cap {cap} bytes)"
    if not spec.selectable and spec.dispatch(n, message_bytes) != kernel:
        return (f"{engine} runs {spec.dispatch(n, message_bytes)} at {message_bytes:.0f} "
                f"bytes over {n} ranks (not selectable)")
    return ""


# ---------------------------------------------------------------------------------------------
# The same algorithms, vectorised over rows of (kind, ranks, bytes, domains), for the cost model
# (``CostModelConfig.collective_algorithm`` other than ``alpha-beta``). Every formula and
# availability rule is the one of the scalar functions above; ``tests/test_collective_choice.py``
# checks the two element by element on a grid of sizes, groups and devices.
# ---------------------------------------------------------------------------------------------

#: Algorithm tiers of ``auto``: one tier holding every algorithm (the cheapest available runs).
AUTO_TIERS: tuple[tuple[str, ...], ...] = (ALGORITHMS,)


def forced_tiers(algorithm: str) -> tuple[tuple[str, ...], ...]:
    """Tiers of a forced algorithm: ``algorithm`` where it can run, else NCCL's cheapest of
    :data:`~learn_to_shard.engines.collectives.NCCL_ALGORITHMS` (what an engine runs when its
    own kernel does not take the call: vLLM's ``should_custom_ar`` falls back to NCCL;
    ``NCCL_ALGO`` naming an algorithm a call cannot use lets NCCL pick another)."""
    return ((algorithm,), NCCL_ALGORITHMS)


class CollectivePricer:
    """Every collective algorithm priced over rows at once, with its availability (the
    vectorised twin of :func:`collective_options`).

    Args:
        device: the device type (its fabric, :func:`~learn_to_shard.hardware.fabric.
            scale_up_fabric`, decides NVLS and the custom kernels; its links and HBM the
            rates).
        engine: ``vllm``, ``sglang``, ``trtllm`` (that engine's kernels, caps and dispatch,
            :mod:`learn_to_shard.engines.collectives`) or ``None`` (every algorithm the
            hardware has).
        config: link and HBM efficiencies and the kernel launch cost.

    Raises:
        ConfigError: an unknown engine.
    """

    def __init__(self, device: DeviceSpec, engine: str | None,
                 config: CostModelConfig) -> None:
        if engine is not None and engine not in ENGINE_VENDORS:
            raise ConfigError(f"engine {engine!r}: one of {', '.join(ENGINE_VENDORS)} or None")
        self.device, self.engine, self.config = device, engine, config
        self.fabric = scale_up_fabric(device)
        self.generation = _generation(self.fabric)
        self.runs = engine is None or self.fabric.vendor in ENGINE_VENDORS[engine]
        self.up_bus = device.scale_up_bytes_per_s * config.scale_up_efficiency
        self.out_bus = device.scale_out_bytes_per_s * config.scale_out_efficiency
        self.hbm = device.hbm_bytes_per_s * config.hbm_efficiency

    # -------------------------------------------------------------- per algorithm, [k]
    def _nccl(self, protocols: tuple[NcclProtocol, ...], steps: np.ndarray, inter: np.ndarray,
              chain: np.ndarray, volume: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """Cheapest protocol of one NCCL algorithm: ``base + chain · hw_step + inter · net +
        volume / bw`` per protocol (as :func:`_nccl_time`), minimum over protocols."""
        one = nodes <= 1
        bus = np.where(one, self.up_bus, self.out_bus)
        cap = np.where(one, NCCL_LL_MAX_BYTES_PER_S[self.generation],
                       np.where(nodes == 2, NCCL_LL_MAX_MULTI_NODE_BYTES_PER_S[0],
                                NCCL_LL_MAX_MULTI_NODE_BYTES_PER_S[1]))
        pcie = self.fabric.kind == "pcie"
        best = np.full(np.shape(volume), np.inf)
        for p in protocols:
            bw = np.where(one, p.bus_fraction, p.bus_fraction_multi_node) * bus
            if p.ll_capped:
                bw = np.minimum(bw, cap)
            lat = p.base_latency_s + chain * (p.pcie_step_s if pcie else p.nvlink_step_s) \
                + inter * p.net_step_s
            best = np.minimum(best, lat + volume / bw)
        return best

    def _ring(self, ar: np.ndarray, n: np.ndarray, s: np.ndarray,
              nodes: np.ndarray) -> np.ndarray:
        steps = np.where(ar, 2.0 * (n - 1.0), n - 1.0)
        inter = np.where(ar, np.where(nodes > 1, 2.0 * nodes, 0.0), nodes - 1.0)
        return self._nccl(RING_PROTOCOLS, steps, inter, steps - inter, steps / n * s, nodes)

    def _tree(self, n: np.ndarray, s: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        per_node = np.maximum(np.floor(n / nodes), 1.0)
        log_nodes = np.where(nodes > 1, np.log2(np.maximum(nodes, 1.0)), 0.0)
        return self._nccl(TREE_PROTOCOLS, np.zeros_like(n), 2.0 * log_nodes,
                          2.0 * (per_node - 1.0), 2.0 * s, nodes)

    def _nvls(self, ar: np.ndarray, n: np.ndarray, s: np.ndarray) -> np.ndarray:
        eff = NVLS_ALLREDUCE_EFFICIENCY[self.generation]
        beta = np.where(ar, s / (eff * self.device.scale_up_bytes_per_s),
                        (n - 1.0) / n * s / self.up_bus)
        return NVLS_LATENCY_S + beta

    def _custom_ok(self, kernel: str, fused: bool, n: np.ndarray,
                   s: np.ndarray) -> np.ndarray | bool:
        """Rows where the one-/two-shot kernel (optionally fused) can run, given one domain
        (:func:`_custom_unavailable`'s rules)."""
        f = self.fabric
        if not f.p2p_full_mesh:
            return False
        if fused and (f.vendor != "nvidia"
                      or f.compute_capability not in FUSED_RMSNORM_CAPABILITIES):
            return False
        if self.engine is None:
            return True
        spec = CUSTOM_ALL_REDUCE[self.engine]
        if f.vendor not in spec.vendors:
            return False
        ok = np.zeros(np.shape(n), dtype=bool)
        for w in spec.world_sizes:
            at = n == w
            ok |= at & (s < spec.cap_bytes(f.vendor, f.compute_capability, w, f.nvls))
        if not spec.selectable:
            one = np.isin(n, spec.one_shot_always_at)
            done = one.copy()
            for limit, below in spec.one_shot_below:
                hit = ~done & (n <= limit)
                one |= hit & (s < below)
                done |= hit
            ok &= one if kernel == "one-shot" else ~one
        return ok

    def algorithm_times_s(self, kind: np.ndarray, n: np.ndarray, full_bytes: np.ndarray,
                          nodes: np.ndarray, then_rmsnorm: bool = False) -> np.ndarray:
        """Seconds of each algorithm of :data:`ALGORITHMS` per row, ``[len(ALGORITHMS), k]``;
        ``inf`` where it is not available (the rules of :func:`collective_options`).

        Args:
            kind: ``ALL_REDUCE`` or ``GATHER_OR_SCATTER`` (all-gather and reduce-scatter cost
                the same in every algorithm here), ``[k]``; other kinds have no algorithm.
            n: ranks in the group, ``[k]`` (rows with ``n < 2`` have none available).
            full_bytes: full buffer S, bytes, ``[k]``.
            nodes: scale-up domains the group spans, ``[k]`` (>= 1).
            then_rmsnorm: the all-reduce is followed by a residual add + RMSNorm: every
                option includes that pass (:func:`rmsnorm_pass_time_s`), separate or fused;
                without it the fused algorithms are unavailable.
        """
        kind = np.asarray(kind)
        n_f = np.asarray(n, dtype=np.float64)
        s = np.asarray(full_bytes, dtype=np.float64)
        nodes_f = np.maximum(np.asarray(nodes, dtype=np.float64), 1.0)
        shape = np.broadcast(kind, n_f, s, nodes_f).shape
        kind, n_f, s, nodes_f = (np.broadcast_to(a, shape) for a in (kind, n_f, s, nodes_f))
        ar, ag = kind == ALL_REDUCE, kind == GATHER_OR_SCATTER
        live = (ar | ag) & (n_f >= 2) & self.runs
        n_safe = np.maximum(n_f, 2.0)
        one_domain = nodes_f <= 1
        sep = rmsnorm_pass_time_s(s, self.hbm, False, self.config.kernel_overhead_s) \
            if then_rmsnorm else 0.0
        fused_norm = rmsnorm_pass_time_s(s, self.hbm, True, 0.0) if then_rmsnorm else 0.0
        out = np.full((len(ALGORITHMS), *shape), np.inf)
        out[0] = np.where(live, self._ring(ar, n_safe, s, nodes_f) + sep, np.inf)
        out[1] = np.where(live & ar, self._tree(n_safe, s, nodes_f) + sep, np.inf)
        if self.fabric.nvls and self.generation in NVLS_ALLREDUCE_EFFICIENCY:
            out[2] = np.where(live & one_domain, self._nvls(ar, n_safe, s) + sep, np.inf)
        custom = live & ar & one_domain
        for i, algo in enumerate(ALGORITHMS[3:], start=3):
            kernel, fused = algo.split("+")[0], algo.endswith("+rmsnorm")
            if fused and not then_rmsnorm:
                continue
            ok = custom & self._custom_ok(kernel, fused, n_f, s)
            k_lat = CUSTOM_KERNEL_LATENCY_S
            t = k_lat + (n_safe - 1.0) * s / self.up_bus if kernel == "one-shot" \
                else 2.0 * k_lat + 2.0 * (n_safe - 1.0) / n_safe * s / self.up_bus
            out[i] = np.where(ok, t + (fused_norm if fused else sep), np.inf)
        return out

    def time_s(self, kind: np.ndarray, n: np.ndarray, full_bytes: np.ndarray,
               nodes: np.ndarray, tiers: tuple[tuple[str, ...], ...] = AUTO_TIERS,
               then_rmsnorm: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The algorithm a setting runs per row and its seconds.

        Args:
            kind, n, full_bytes, nodes, then_rmsnorm: as :meth:`algorithm_times_s`.
            tiers: algorithm names in order of preference: the first tier with an available
                algorithm is used, its cheapest algorithm runs (NCCL's tuner and the engines'
                dispatch modelled as picking the cheapest inside a tier). :data:`AUTO_TIERS`:
                the cheapest available of all.

        Returns:
            ``(seconds [k], algorithm index [k])``: ``inf`` and ``-1`` where nothing in the
            tiers is available.
        """
        times = self.algorithm_times_s(kind, n, full_bytes, nodes, then_rmsnorm)
        best = np.full(times.shape[1:], np.inf)
        pick = np.full(times.shape[1:], -1, dtype=np.int64)
        for tier in tiers:
            idx = [ALGORITHMS.index(a) for a in tier]
            sub = times[idx]
            j = np.argmin(sub, axis=0)
            t = np.take_along_axis(sub, j[None], axis=0)[0]
            take = ~np.isfinite(best) & np.isfinite(t)
            best = np.where(take, t, best)
            pick = np.where(take, np.asarray(idx)[j], pick)
        return best, pick


# ------------------------------------------------------------- which launch settings differ
_CUSTOM_KERNELS = ("one-shot", "two-shot")
_FUSED_KERNELS = ("one-shot+rmsnorm", "two-shot+rmsnorm")


def hardware_algorithms(fabric: ScaleUpFabric, engine: str | None) -> tuple[str, ...]:
    """Algorithms of :data:`ALGORITHMS` that ``engine`` (``None``: any) can run on some group
    and message on a device with ``fabric``: ring and tree wherever the engine runs, NVLS on
    NVLink SHARP, the custom kernels on a fully connected peer-to-peer domain of a vendor the
    engine's kernels support, the fused ones also at :data:`FUSED_RMSNORM_CAPABILITIES`
    (the static part of the rules :func:`collective_options` applies; sizes and group sizes
    narrow them further per call)."""
    if engine is not None and fabric.vendor not in ENGINE_VENDORS.get(engine, ()):
        return ()
    out = ["ring", "tree"] + (["nvls"] if fabric.nvls else [])
    spec = CUSTOM_ALL_REDUCE.get(engine) if engine is not None else None
    if fabric.p2p_full_mesh and (spec is None or fabric.vendor in spec.vendors):
        out += list(_CUSTOM_KERNELS)
        if fabric.vendor == "nvidia" and fabric.compute_capability in \
                FUSED_RMSNORM_CAPABILITIES:
            out += list(_FUSED_KERNELS)
    return tuple(a for a in ALGORITHMS if a in out)


def settings_for(engine: str, fabric: ScaleUpFabric) -> tuple[CollectiveSetting, ...]:
    """The launch settings of ``engine`` (:data:`~learn_to_shard.engines.collectives.
    COLLECTIVE_SETTINGS`) that differ on a device with ``fabric``: each setting's tiers
    reduced to :func:`hardware_algorithms` (empty tiers dropped), and a setting whose
    reduced tiers equal an earlier one's left out (e.g. SGLang's ``--enable-nccl-nvls`` on
    a device without NVLS); empty when the engine does not run there."""
    have = set(hardware_algorithms(fabric, engine))
    seen: set[tuple[tuple[str, ...], ...]] = set()
    out = []
    for s in COLLECTIVE_SETTINGS.get(engine, ()):
        reduced = tuple(t for t in (tuple(a for a in tier if a in have) for tier in s.tiers)
                        if t)
        if reduced and reduced not in seen:
            seen.add(reduced)
            out.append(s)
    return tuple(out)
