"""Capacity: how many devices of each kind serve a request rate within the SLOs.

The answer to "fewest devices of kind K, or lowest cost at a price per device-hour, that
serve R requests/s of this workload within the SLOs" (what aiconfigurator's ``recommend``
answers for its engines), computed from sweep rows: every feasible row is a plan whose
instance of ``D = pp·tp·dp`` devices meets the SLOs; replicating it ``k`` times serves
``k × r`` requests/s, where ``r`` is :func:`requests_per_s` of the instance.

    devices(plan, R) = ceil(R / r) × D,      cost_per_hour = devices × price_per_device_hour

(a prefill fleet adds replicas for its queue, below).

For each device kind the fleet is the row with the fewest devices (ties: the higher
throughput per device); kinds are ranked by cost per hour where they have a price, then the
unpriced ones by devices.

Assumptions (steady state, as the cost model's serve phase):

* arrivals at ``R`` requests/s are spread evenly over the replicas (a load balancer), and each
  replica runs the plan's batch continuously, so it completes ``r`` requests/s;
* the latencies are those of the plan at its full batch: a replica loaded below capacity runs
  smaller batches, which this cost model never predicts slower, so the SLOs still hold;
* serve: no queueing delay is modelled here: bursts above the mean rate wait, and only the
  SLO margin absorbs that wait (``l2s size`` then replays Poisson arrivals at a replica's
  share of the rate through the serving simulation and says how many replicas keep up,
  which a fleet sized near capacity needs more of);
* prefill (a prefill-only fleet, whose TTFT is all it serves): Poisson arrivals queue for a
  replica, which :func:`prefill_replicas` prices as an M/D/1 queue — the mean wait of the
  Pollaczek–Khinchine formula with a deterministic service time ``1 / r`` per request,
  ``W = ρ / (2 r (1 − ρ))`` at utilisation ``ρ = R / (k r)`` (Kleinrock, *Queueing Systems*
  vol. 1, §5.6) — on top of the plan's pass at its full batch (``ttft_s``, an upper bound of
  a request's own prefill); replicas are added until that TTFT meets the workload's TTFT SLO
  and ``ρ`` is at most :data:`PREFILL_MAX_UTILIZATION`, up to
  :data:`PREFILL_MAX_REPLICA_FACTOR` times the steady-state count;
* replicas of a plan smaller than a node share nodes, as many whole replicas as a node holds
  (:func:`fleet_nodes`); a replica larger than a node takes whole nodes of its own.

The candidate plans are those of the sweep's rows (one best plan per cluster size searched),
so the answer is the best over the searched sizes, not a proof that no smaller fleet exists.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import ConfigError, PlannerError
from ..hardware.presets import MAX_DEVICES
from ..workload import Phase, Workload


def requests_per_s(instance_tokens_per_s: float, workload: Workload) -> float | None:
    """Requests/s one instance completes: its throughput over the tokens a request needs.

    Args:
        instance_tokens_per_s: output tokens/s (serve) or prompt tokens/s (prefill) of one
            instance (``Estimate.output_tokens_per_s``).
        workload: the workload; serve requests emit ``osl`` output tokens, prefill requests
            are ``isl`` prompt tokens.

    Returns:
        ``instance_tokens_per_s / osl`` (serve), ``/ isl`` (prefill); ``None`` for decode
        (steady decoding at a fixed context has no request boundary).
    """
    if workload.phase is Phase.SERVE:
        return instance_tokens_per_s / workload.osl
    if workload.phase is Phase.PREFILL:
        return instance_tokens_per_s / workload.isl
    return None


#: The highest utilisation a prefill fleet is sized at: near saturation an M/D/1 queue's mean
#: wait grows as ``ρ / (1 − ρ)`` (9 service times at 0.95), so the last percent of throughput
#: costs whole seconds of TTFT; the serve side's simulation check warns from the same load
#: (``report.render.NEAR_CAPACITY``).
PREFILL_MAX_UTILIZATION = 0.9
#: How many times the steady-state replica count :func:`prefill_replicas` tries before it
#: gives up on the TTFT SLO (and sizes at :data:`PREFILL_MAX_UTILIZATION` alone).
PREFILL_MAX_REPLICA_FACTOR = 4
#: The TTFT budgets, as fractions of ``--ttft-slo``, at which ``l2s size --phase prefill``
#: searches each cluster size: the whole SLO (most throughput per replica) and tighter ones
#: (a shorter pass, more room for the queue of :func:`prefill_replicas`); the fleet with the
#: fewest devices over them is the answer. Each search keeps its budget's highest-throughput
#: plan only, so budgets apart by a factor of 2 miss a plan whose pass falls just over one of
#: them (a 25.1 ms pass under a 50 ms SLO: searched at 50 and 25 ms, its 12-device answer
#: where that plan needs 8); steps of about 1.4 leave less between them. A sweep searches its
#: grid's SLO alone.
PREFILL_TTFT_BUDGETS = (1.0, 0.75, 0.5, 0.35, 0.25)


def budget_fractions_text(fractions: tuple[float, ...] = PREFILL_TTFT_BUDGETS[1:]) -> str:
    """``"0.75, 0.5, 0.35 and 0.25"``: the tighter budgets of :data:`PREFILL_TTFT_BUDGETS`
    as a list for a sentence."""
    words = [f"{k:g}" for k in fractions]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def prefill_wait_s(rate_rps: float, replicas: int, replica_requests_per_s: float) -> float:
    """Mean queueing delay (seconds) of a request at one of ``replicas`` prefill replicas that
    share ``rate_rps`` Poisson arrivals evenly, each completing ``replica_requests_per_s`` at
    its full batch: the M/D/1 mean wait ``ρ / (2 r (1 − ρ))`` with ``ρ = R / (k r)``
    (Pollaczek–Khinchine with a deterministic service time ``1 / r``; Kleinrock, *Queueing
    Systems* vol. 1, §5.6); ``inf`` at ``ρ >= 1``."""
    rho = rate_rps / (replicas * replica_requests_per_s)
    if rho >= 1.0:
        return math.inf
    return rho / (2.0 * replica_requests_per_s * (1.0 - rho))


def prefill_replicas(rate_rps: float, replica_requests_per_s: float, pass_s: float,
                     ttft_slo_s: float | None) -> tuple[int, bool]:
    """Replicas of a prefill plan that serve ``rate_rps`` with its queue: the fewest ``k``
    from the steady-state ``ceil(R / r)`` on whose utilisation is at most
    :data:`PREFILL_MAX_UTILIZATION` and whose TTFT, the plan's pass ``pass_s`` plus the mean
    wait :func:`prefill_wait_s`, meets ``ttft_slo_s`` (when given).

    Returns:
        ``(k, slo_met)``: ``slo_met`` False where no ``k`` up to
        :data:`PREFILL_MAX_REPLICA_FACTOR` times the steady-state count meets the SLO (the
        pass alone leaves too little of it for a queue); ``k`` is then the count at the
        utilisation cap.
    """
    r = replica_requests_per_s
    base = max(1, math.ceil(rate_rps / r - 1e-9))
    capped = max(base, math.ceil(rate_rps / (PREFILL_MAX_UTILIZATION * r) - 1e-9))
    if ttft_slo_s is None:
        return capped, True
    # pass + ρ / (2 r (1 − ρ)) <= SLO  ⇔  ρ <= 2 r w / (1 + 2 r w), w = SLO − pass
    room = 2.0 * r * (ttft_slo_s - pass_s)
    if not room > 0:
        return capped, False
    k = max(capped, math.ceil(rate_rps * (1.0 + room) / (r * room) - 1e-9))
    while pass_s + prefill_wait_s(rate_rps, k, r) > ttft_slo_s:   # rounding at the edge
        k += 1
    if k > PREFILL_MAX_REPLICA_FACTOR * capped:
        return capped, False
    return k, True


@dataclass(frozen=True)
class Fleet:
    """The smallest fleet of one device kind found for a rate.

    Attributes:
        model, workload: what is served (workload label).
        device: device kind; node_size: devices per node (per host,
            ``DeviceSpec.host_devices``).
        rate_rps: the requests/s to serve.
        strategy: the replicated plan (``Strategy.short()``); instance_devices: its ``D``.
        instance_requests_per_s: ``r`` of one replica; replicas: ``k = ceil(R / r)`` (a
            prefill fleet's with its queue, :func:`prefill_replicas`).
        devices: ``k × D``; nodes: :func:`fleet_nodes`.
        price_per_device_hour: the kind's price, or ``None``; cost_per_hour: ``devices ×
            price`` or ``None``.
        tokens_per_s_per_device, tpot_s, ttft_s: the plan's estimate.
        searched_cluster: the cluster the plan was searched on; searcher: its searcher.
        utilization: ``R / (k r)``, the busy fraction of each replica.
        queue_wait_s: prefill fleets: the mean queueing delay at that load
            (:func:`prefill_wait_s`), which adds to ``ttft_s``; ``None`` for serve (the
            simulation check of ``l2s size`` replays the queue).
        queue_slo_met: prefill fleets: whether ``ttft_s + queue_wait_s`` meets the TTFT SLO
            (:func:`prefill_replicas`); True where there is none, and for serve.
        engine: the sweep row's engine label (``EngineSpec.label``: ``default`` without a
            profile, ``vllm``, ``sglang(mem=0.8)``…; ``None`` in rows that carry none).
        steady_replicas: where the serving simulation raised ``replicas`` (a replica at
            the steady-state count falls behind or misses an SLO under Poisson arrivals,
            :func:`with_replicas`), the steady-state count; ``None`` otherwise.
        falls_behind: the serving simulation found no count up to a few replicas more that
            keeps up (ranked after the fleets that do, :func:`rank_key`).
        searched_ttft_slo_s: the TTFT limit the plan was searched under where it is tighter
            than the SLO the fleet is sized against (``l2s size --phase prefill`` searches
            tighter budgets too); ``None`` otherwise.
    """

    model: str
    workload: str
    device: str
    node_size: int
    rate_rps: float
    strategy: str
    instance_devices: int
    instance_requests_per_s: float
    replicas: int
    devices: int
    nodes: int
    price_per_device_hour: float | None
    cost_per_hour: float | None
    tokens_per_s_per_device: float
    tpot_s: float | None
    ttft_s: float | None
    searched_cluster: str
    searcher: str
    utilization: float = 1.0
    queue_wait_s: float | None = None
    queue_slo_met: bool = True
    engine: str | None = None
    steady_replicas: int | None = None
    falls_behind: bool = False
    searched_ttft_slo_s: float | None = None

    @property
    def meets_slos(self) -> bool:
        """The fleet serves its rate within the SLOs: its prefill queue within the TTFT SLO
        and, where simulated, a replica keeping up (what ``l2s size`` answers with)."""
        return self.queue_slo_met and not self.falls_behind


def fleet_nodes(replicas: int, instance_devices: int, node_size: int) -> int:
    """Nodes that ``replicas`` replicas of ``instance_devices`` devices occupy on nodes of
    ``node_size`` devices: a replica is never split over nodes it shares, so a node holds
    ``floor(node_size / instance_devices)`` whole replicas (5 replicas of 3 devices need 3
    nodes of 8, not ``ceil(15 / 8) = 2``), and a replica larger than a node spans
    ``ceil(instance_devices / node_size)`` nodes of its own, as its plan was priced on
    (its first node full, the rest on the next).

    Raises:
        ValueError: a count below 1.
    """
    if replicas < 1 or instance_devices < 1 or node_size < 1:
        raise ValueError(f"replicas, instance devices and node size must be positive, got "
                         f"{replicas}, {instance_devices}, {node_size}")
    if instance_devices > node_size:
        return replicas * math.ceil(instance_devices / node_size)
    return math.ceil(replicas / (node_size // instance_devices))


def with_replicas(fleet: Fleet, replicas: int) -> Fleet:
    """``fleet`` at ``replicas`` replicas (the count the serving simulation finds keeps up):
    its devices, nodes, cost per hour and load follow, and ``steady_replicas`` keeps the
    steady-state count where it differs.

    Raises:
        ValueError: ``replicas`` is not positive.
    """
    if replicas < 1:
        raise ValueError(f"replicas must be positive, got {replicas}")
    if replicas == fleet.replicas:
        return fleet
    devices = replicas * fleet.instance_devices
    return dataclasses.replace(
        fleet, replicas=replicas, devices=devices,
        nodes=fleet_nodes(replicas, fleet.instance_devices, fleet.node_size),
        cost_per_hour=None if fleet.price_per_device_hour is None
        else devices * fleet.price_per_device_hour,
        utilization=fleet.rate_rps / (replicas * fleet.instance_requests_per_s),
        steady_replicas=fleet.steady_replicas or fleet.replicas)


def price_table(prices: Iterable[tuple[str, float]]) -> dict[str, float]:
    """``(device kind, price per device-hour)`` pairs keyed by the kind's preset name (an
    alias such as ``h100`` becomes ``h100-sxm``, the name sweep rows carry).

    Raises:
        ConfigError: an unknown kind (naming it and the valid presets), or a kind priced
            twice (under two spellings too).
    """
    from ..hardware.presets import load_device

    out: dict[str, float] = {}
    for kind, price in prices:
        try:
            name = load_device(kind).name
        except PlannerError as exc:
            raise ConfigError(f"{kind!r}: {exc}") from None
        if name in out:
            raise ConfigError(f"{name} priced twice")
        out[name] = price
    return out


def fleet_for(row: Mapping[str, object], rate_rps: float, node_size: int,
              price_per_device_hour: float | None) -> Fleet | None:
    """The fleet that replicates the plan of ``row`` to serve ``rate_rps`` (None if the row
    has no feasible plan or no request rate, e.g. decode).

    Raises:
        ConfigError: ``rate_rps`` is not positive and finite, or needs more than
            :data:`~learn_to_shard.hardware.presets.MAX_DEVICES` devices.
    """
    if not 0 < rate_rps < math.inf:
        raise ConfigError(f"rate: must be a positive number of requests/s, got {rate_rps}")
    r = row.get("instance_requests_per_s")
    if not row.get("feasible") or not isinstance(r, float) or not r > 0:
        return None
    d = int(row["instance_devices"])                     # type: ignore[call-overload]
    k = max(1, math.ceil(rate_rps / r - 1e-9))           # one replica serves any lower rate
    wait: float | None = None
    slo_met = True
    ttft = row.get("ttft_s")
    if row.get("phase") == Phase.PREFILL.value and isinstance(ttft, float) \
            and math.isfinite(ttft):
        slo = row.get("ttft_slo_s")
        k, slo_met = prefill_replicas(rate_rps, r, ttft,
                                      float(slo) if isinstance(slo, (int, float)) else None)
        wait = prefill_wait_s(rate_rps, k, r)
    devices = k * d
    if devices > MAX_DEVICES:
        raise ConfigError(f"rate: {rate_rps:g} requests/s needs {_count(devices)} × "
                          f"{row['device']} ({_count(k)} replicas of {d}), more than the "
                          f"{MAX_DEVICES:,} devices a cluster may have")
    return Fleet(model=str(row["model"]), workload=str(row["workload"]),
                 device=str(row["device"]), node_size=node_size, rate_rps=rate_rps,
                 strategy=str(row["strategy"]), instance_devices=d, instance_requests_per_s=r,
                 replicas=k, devices=devices, nodes=fleet_nodes(k, d, node_size),
                 price_per_device_hour=price_per_device_hour,
                 cost_per_hour=None if price_per_device_hour is None
                 else devices * price_per_device_hour,
                 tokens_per_s_per_device=float(row["tokens_per_s_per_device"]),  # type: ignore[arg-type]
                 tpot_s=row.get("tpot_s"), ttft_s=row.get("ttft_s"),  # type: ignore[arg-type]
                 searched_cluster=str(row["cluster"]), searcher=str(row["searcher"]),
                 utilization=rate_rps / (k * r), queue_wait_s=wait, queue_slo_met=slo_met,
                 engine=str(row["engine"]) if row.get("engine") else None,
                 searched_ttft_slo_s=_tighter(row.get("searched_ttft_slo_s"),
                                              row.get("ttft_slo_s")))


def _tighter(searched: object, slo: object) -> float | None:
    """``searched`` where it is a TTFT limit below ``slo``, else ``None``."""
    if isinstance(searched, (int, float)) and isinstance(slo, (int, float)) \
            and searched < slo:
        return float(searched)
    return None


def _count(n: int) -> str:
    """A whole count with thousands separators, or in scientific notation beyond 10^12 (a
    rate of 1e300 requests/s needs a 300-digit device count)."""
    return f"{n:,}" if n < 10**12 else f"{float(n):.3g}"


def size_fleets(rows: Iterable[Mapping[str, object]], rate_rps: float | None = None,
                prices: Mapping[str, float] | None = None,
                node_sizes: Mapping[str, int] | None = None,
                skip_oversized: bool = False,
                oversized: list[tuple[str, str, str]] | None = None) -> list[Fleet]:
    """The smallest fleet per (model, workload, device kind) over the feasible rows: the first
    of each kind's :func:`fleet_options`.

    Args:
        rows, rate_rps, prices, node_sizes, skip_oversized, oversized: as
            :func:`fleet_options`.

    Returns:
        Fleets sorted by (model, workload, then cost when priced, else devices).

    Raises:
        ConfigError: as :func:`fleet_options`.
    """
    options = fleet_options(rows, rate_rps, prices, node_sizes, skip_oversized, oversized)
    return sorted((fleets[0] for fleets in options.values()), key=rank_key)


def fleet_options(rows: Iterable[Mapping[str, object]], rate_rps: float | None = None,
                  prices: Mapping[str, float] | None = None,
                  node_sizes: Mapping[str, int] | None = None,
                  skip_oversized: bool = False,
                  oversized: list[tuple[str, str, str]] | None = None
                  ) -> dict[tuple[str, str, str], list[Fleet]]:
    """Every feasible row's fleet, per (model, workload, device kind), smallest first: those
    whose queue meets the TTFT SLO first (:attr:`Fleet.queue_slo_met`; a prefill fleet's
    queue may miss it only where none meets it), then fewest devices, then most tokens/s per
    device. ``l2s size`` checks them with the serving simulation in that order, since a
    fleet the simulation re-sizes may end larger than the next one.

    Args:
        rows: sweep rows (:data:`learn_to_shard.sweep.cells.COLUMNS`).
        rate_rps: requests/s to serve; default: each row's own ``rate_rps`` (rows without
            one are skipped).
        prices: device kind → price per device-hour.
        node_sizes: device kind → devices per node (default 1 where unknown).
        skip_oversized: leave out a row whose fleet would exceed
            :data:`~learn_to_shard.hardware.presets.MAX_DEVICES` (a sweep's summary) instead
            of raising.
        oversized: with ``skip_oversized``, each row left out so is appended here as
            ``(model, workload, why)``.

    Returns:
        ``{(model, workload, device): [fleet, ...]}``, each list non-empty.

    Raises:
        ConfigError: a rate that is not positive and finite, or (without
            ``skip_oversized``) one that needs more than ``MAX_DEVICES`` devices.
    """
    prices = prices or {}
    node_sizes = node_sizes or {}
    out: dict[tuple[str, str, str], list[Fleet]] = {}
    for row in rows:
        rate = rate_rps if rate_rps is not None else row.get("rate_rps")
        if not isinstance(rate, (int, float)) or row.get("error"):
            continue
        dev = str(row.get("device"))
        try:
            f = fleet_for(row, float(rate), node_sizes.get(dev, 1), prices.get(dev))
        except ConfigError as exc:
            if not skip_oversized:
                raise
            if oversized is not None:
                oversized.append((str(row.get("model")), str(row.get("workload")),
                                  f"{row.get('cluster')}: {exc}"))
            continue                      # a fleet beyond MAX_DEVICES: no answer for this row
        if f is not None:
            same = out.setdefault((f.model, f.workload, f.device), [])
            # clusters whose plans leave devices idle give the same fleet: kept once
            if not any((g.strategy, g.replicas, g.devices) == (f.strategy, f.replicas,
                                                              f.devices) for g in same):
                same.append(f)
    for fleets in out.values():          # stable: equal keys keep the rows' order
        fleets.sort(key=option_key)
    return out


def option_key(f: Fleet) -> tuple[bool, bool, int, float]:
    """Order of one kind's fleets (:func:`fleet_options`): queue within the TTFT SLO first,
    then kept up with in the serving simulation (:attr:`Fleet.falls_behind`), then fewest
    devices, then most tokens/s per device."""
    return (not f.queue_slo_met, f.falls_behind, f.devices, -f.tokens_per_s_per_device)


def rank_key(f: Fleet) -> tuple[str, str, bool, bool, float, int, float, float]:
    """Sort key: model, workload, fleets that meet the SLOs with their queue first
    (:attr:`Fleet.queue_slo_met`), then those the serving simulation found keeping up
    (:attr:`Fleet.falls_behind`), then cost per hour (unpriced last), then devices, then
    the lighter load per replica (:attr:`Fleet.utilization`: of two kinds at the same
    devices, the one with headroom, since near saturation the queueing delay grows as
    1 / (1 − load)), then most tokens/s per device."""
    cost = f.cost_per_hour if f.cost_per_hour is not None else math.inf
    return (f.model, f.workload, not f.queue_slo_met, f.falls_behind, cost, f.devices,
            f.utilization, -f.tokens_per_s_per_device)
