"""One aggregation of per-stage totals into what a strategy is judged by.

``CostModel._run`` (every action vector, :meth:`~learn_to_shard.cost.model.CostModel.
evaluate_many`) and the exact solver's feature vectors
(:func:`learn_to_shard.search.exact_tables.evaluate_z`,
:func:`~learn_to_shard.search.exact_tables.peak_z`, which hold stages as classes with
multiplicities) both turn per-stage times and memory into the pipeline latencies, throughput,
memory peak, limit checks and objective through these functions, so the formulas exist once
(module docstring of :mod:`learn_to_shard.cost.model`, "Pipeline", "Memory", "Phases"):

* one pass of a micro-batch: ``Σ_s t_s + (pp − 1)·t_p2p``; the slowest stage ``max_s t_s``;
* decode / serve: ``TPOT = max(Σ_s t_s + (pp − 1)·t_p2p, m · max_s t_s)`` with ``m``
  micro-batches in flight, an instance's output tokens/s ``batch · share / TPOT``; serve TTFT
  ``⌈isl / chunk⌉`` passes of the TTFT step plus the serving front-end's time per request
  (``CostModelConfig.frontend_latency_s``);
* prefill: makespan ``Σ_s t_s + (pp − 1)·t_p2p + (m − 1)·max_s t_s`` = TTFT, prompt tokens/s
  ``batch · isl / makespan``;
* tokens/s per device of the whole cluster: an instance's times ``floor(N / devices) / N``;
  with a closed loop of ``C`` clients, at most ``C · osl / (f + L)`` over the ``N`` devices,
  where ``f`` is the front-end time and ``L = osl · TPOT / share`` a request's time in its
  batch slot (each client's cycle, Little's law), and a client's wait for a slot
  ``max(0, q · L − f)`` with ``q`` clients waiting per running request;
* per-device memory of a stage: ``weights + KV / kv_cache_free_fraction + workspace``; it
  fits when the worst stage is at most the usable memory;
* feasible = structurally valid, fits, TPOT and TTFT within their SLOs (where the phase has
  them); objective = tokens/s per device where feasible, else 0.

Every array argument broadcasts (rows ``[n]``, or the solver's ``[..., C]`` candidates).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..workload import Phase, Workload


def pipeline_sums(stage_t: np.ndarray, p2p: np.ndarray, pp: np.ndarray,
                  mult: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One micro-batch's pass through the pipeline and its slowest stage, seconds.

    Args:
        stage_t: ``[..., S]`` stage times, seconds (stages a strategy lacks: 0).
        p2p: ``[...]`` mean stage-to-stage send, seconds.
        pp: ``[...]`` pipeline degree.
        mult: ``[S]`` stages each column stands for (stage classes), or ``None``: one each.

    Returns:
        ``(Σ_s t_s + (pp − 1)·p2p, max_s t_s)``, each ``[...]``.
    """
    total = stage_t.sum(axis=-1) if mult is None else stage_t @ mult
    return total + (pp - 1) * p2p, stage_t.max(axis=-1)


@dataclass(frozen=True)
class Latency:
    """Latencies and throughput of rows (arrays broadcast to one shape).

    Attributes:
        tpot_s: time per output token (decode/serve), seconds; NaN for prefill.
        ttft_s: time to first token (prefill; serve when its TTFT step is priced), seconds;
            NaN otherwise.
        instance_tokens_per_s: one instance's output tokens/s (prompt tokens/s for prefill).
        tokens_per_s_per_device: the same over the whole cluster's devices.
        ttft_queue_s: the part of ``ttft_s`` a closed-loop client waits for a batch slot,
            seconds (0 where none waits or TTFT is not priced).
    """

    tpot_s: np.ndarray
    ttft_s: np.ndarray
    instance_tokens_per_s: np.ndarray
    tokens_per_s_per_device: np.ndarray
    ttft_queue_s: np.ndarray | float = 0.0


def latency(workload: Workload, sum_t: np.ndarray, max_t: np.ndarray, m_mb: np.ndarray,
            batch: np.ndarray, share: np.ndarray, replica_frac: np.ndarray,
            ttft_pass_s: np.ndarray | None = None,
            chunk_steps: np.ndarray | None = None,
            frontend_latency_s: float = 0.0,
            queued: np.ndarray | float = 0.0,
            clients_per_device: float = 0.0,
            frontend_serial_s: float = 0.0) -> Latency:
    """Pipeline latencies and throughput (module docstring).

    Args:
        workload: the phase and ``isl``.
        sum_t, max_t: :func:`pipeline_sums` of the main step, seconds.
        m_mb: micro-batches in flight.
        batch: sequences per instance.
        share: fraction of the running requests a serve step carries (1 elsewhere).
        replica_frac: instances per cluster device, ``floor(N / devices) / N``.
        ttft_pass_s: serve: one pass of the TTFT step (:func:`pipeline_sums`); ``None``: TTFT
            not priced (NaN).
        chunk_steps: serve: TTFT steps ``⌈isl / chunk⌉``.
        frontend_latency_s: serve: the serving front-end's time per request, added to TTFT
            (:attr:`~learn_to_shard.cost.config.CostModelConfig.frontend_latency_s`).
        queued: serve: closed-loop clients waiting for a batch slot, per running request
            (:meth:`~learn_to_shard.cost.model.CostModel.closed_loop_queue`); each waits
            ``queued`` slot lifetimes less the front-end time it spends outside the engine,
            ``max(0, queued · L − f)`` seconds with ``L = osl · TPOT / share`` (Little's law
            on a replica's ``batch`` slots: a slot turns over once per ``L``; a client's
            cycle is ``f + wait + L``), added to TTFT.
        clients_per_device: serve: a closed loop's clients over the cluster's devices
            (``Workload.concurrency / N``; 0 without one). Each client sends its next request
            when the previous one finishes, so the cluster completes at most
            ``C / (f + L)`` requests per second whatever its batch slots: tokens/s per device
            is at most ``clients_per_device · osl / (f + L)`` (the asymptotic bound of a
            closed queueing network, ``X ≤ N / (D + Z)`` with ``Z`` the clients' time outside
            the server: Lazowska et al., *Quantitative System Performance*, 1984, ch. 5; the
            slots' bound ``replica_frac · batch · share / TPOT`` is the other). With
            ``f = 0`` the slots' bound is always the lower one.
        frontend_serial_s: serve: the front-end's serial time per request
            (:attr:`~learn_to_shard.cost.config.CostModelConfig.frontend_serial_s`): an
            instance takes in at most ``1 / frontend_serial_s`` requests per second, so its
            tokens/s is at most ``osl / frontend_serial_s`` (and per device that times
            ``replica_frac``); 0: no such bound. It adds to TTFT through
            ``frontend_latency_s``, which callers pass as the front-end's whole time.

    Returns:
        The :class:`Latency`.
    """
    wait: np.ndarray | float = 0.0
    tps_dev: np.ndarray | None = None
    if workload.phase is Phase.PREFILL:
        makespan = sum_t + (m_mb - 1) * max_t
        ttft = makespan
        tpot = np.full(np.broadcast_shapes(np.shape(sum_t), np.shape(batch)), np.nan)
        inst = batch * float(workload.isl) / makespan
    else:
        tpot = np.maximum(sum_t, m_mb * max_t)
        inst = batch * share / tpot
        slot_s = float(workload.osl) * tpot / share          # a request's time in its slot
        if workload.phase is Phase.SERVE and clients_per_device > 0:
            tps_dev = np.minimum(inst * replica_frac, clients_per_device * float(workload.osl)
                                 / (frontend_latency_s + slot_s))
        if workload.phase is Phase.SERVE and ttft_pass_s is not None:
            assert chunk_steps is not None
            wait = np.maximum(np.asarray(queued, dtype=np.float64) * slot_s
                              - frontend_latency_s, 0.0)
            ttft = chunk_steps * ttft_pass_s + frontend_latency_s + wait
        else:
            ttft = np.full(np.broadcast_shapes(np.shape(sum_t), np.shape(batch)), np.nan)
        if workload.phase is Phase.SERVE and frontend_serial_s > 0:
            cap = float(workload.osl) / frontend_serial_s
            tps_dev = np.minimum(inst * replica_frac if tps_dev is None else tps_dev,
                                 cap * replica_frac)
            inst = np.minimum(inst, cap)
    return Latency(tpot_s=tpot, ttft_s=ttft, instance_tokens_per_s=inst,
                   tokens_per_s_per_device=inst * replica_frac if tps_dev is None else tps_dev,
                   ttft_queue_s=wait)


def stage_memory_bytes(weight_bytes: np.ndarray, kv_bytes: np.ndarray,
                       workspace_bytes: np.ndarray, kv_free_fraction: float) -> np.ndarray:
    """Per-device memory of each stage: ``weights + KV / f + workspace``, bytes (the KV pool
    may take only a fraction ``f`` of what weights and workspace leave, TRT-LLM's
    ``kv_cache_free_gpu_mem_fraction``; ``f = 1`` is vLLM's accounting)."""
    return weight_bytes + kv_bytes / kv_free_fraction + workspace_bytes


#: The limits a structurally valid strategy can break, in violation-bit order after the
#: structural rules of :data:`learn_to_shard.parallel.space.RULES`.
LIMITS: tuple[tuple[str, str], ...] = (
    ("memory", "does not fit in device memory"),
    ("tpot_slo", "TPOT above the SLO"),
    ("ttft_slo", "TTFT above the SLO"),
)


#: Relative tolerance of the SLO checks: a latency within ``1e-9`` of its SLO meets it. The
#: cost model sums stage times and the exact solver sums per-operator tables, mixes of two
#: steps included, and the two round differently in the last bits; an SLO set at a
#: strategy's own latency must not flip with them.
SLO_REL_TOL = 1e-9


def slo_limits(workload: Workload) -> dict[str, float]:
    """The latency SLOs the workload's phase checks, ``{"tpot_slo": s, "ttft_slo": s}``
    (seconds; absent where the workload has none, and decode has no TTFT, prefill no TPOT).
    :func:`limits_broken` checks them; the searches rank rejected strategies by them."""
    out = {}
    if workload.tpot_slo_s is not None and workload.phase is not Phase.PREFILL:
        out["tpot_slo"] = workload.tpot_slo_s
    if workload.ttft_slo_s is not None and workload.phase is not Phase.DECODE:
        out["ttft_slo"] = workload.ttft_slo_s
    return out


def limits_broken(workload: Workload, usable_bytes: float, peak_bytes: np.ndarray,
                  tpot_s: np.ndarray, ttft_s: np.ndarray) -> dict[str, np.ndarray]:
    """Which rows break each limit of :data:`LIMITS` (bool arrays; a limit the workload or
    phase does not have is absent): memory when the worst stage is not within
    ``usable_bytes``, an SLO of :func:`slo_limits` when the latency is not within it (within
    :data:`SLO_REL_TOL`)."""
    out = {"memory": ~(peak_bytes <= usable_bytes)}
    got = {"tpot_slo": tpot_s, "ttft_slo": ttft_s}
    for name, slo in slo_limits(workload).items():
        out[name] = ~(got[name] <= slo * (1.0 + SLO_REL_TOL))
    return out


def objective(feasible: np.ndarray, tokens_per_s_per_device: np.ndarray) -> np.ndarray:
    """The search objective: tokens/s per device where feasible, else 0."""
    return np.where(feasible, tokens_per_s_per_device, 0.0)
