"""A serving load (concurrency, request rate or trace) and the simulation of one plan under it."""

from __future__ import annotations

import csv
import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..cost.config import CostModelConfig
from ..cost.model import CostModel, Estimate
from ..engines import (
    KV_ADMISSION,
    default_max_num_seqs,
    runs_overlap_schedule,
)
from ..errors import ConfigError
from ..model.spec import ModelSpec
from ..workload import MAX_CONCURRENCY, Phase
from .simulate import (
    Requests,
    fixed_requests,
    length_range,
    poisson_arrivals,
    sharegpt_requests,
    sharegpt_scaled,
    simulate,
)
from .steptime import fit_step_model, priced, step_token_budget

#: Length sources of a load without a trace (:class:`ServingLoad` ``dataset``).
DATASETS = ("random", "sharegpt")
#: Requests per simulation when none is given (``vllm bench serve --num-prompts`` default);
#: a closed loop of more than a :data:`PROMPTS_PER_CLIENT`-th as many clients sends
#: :data:`PROMPTS_PER_CLIENT` per client instead, so every client is busy and sends again
#: (:func:`default_num_prompts`).
DEFAULT_NUM_PROMPTS = 1000
#: Requests per client of a closed loop whose clients outnumber a quarter of
#: :data:`DEFAULT_NUM_PROMPTS`: four rounds, so the first (every client's first request at
#: time 0, whose wait is about half a steady loop's) moves the run's mean TTFT by about an
#: eighth (two rounds had Llama-3.1-8B's 5,000 clients of one H100 at 0.78× the steady
#: state's, four at 0.90×; ``report.render.SHORT_CLOSED_LOOP_ROUNDS``).
PROMPTS_PER_CLIENT = 4
#: Largest ``--request-rate``, requests/s (a billion: far beyond any cluster's capacity, and
#: small enough that the replicas it asks for print as a number).
MAX_REQUEST_RATE = 1e9
#: Most closed-loop clients and simulated requests a load may have: the workload's
#: ``MAX_CONCURRENCY``, a million (a simulation step looks only at the requests it can run or
#: admit; a closed loop of a million clients, two million requests, takes about 20 s on one
#: core here: bench/simulation_speed.py).
MAX_LOAD_REQUESTS = MAX_CONCURRENCY


def default_num_prompts(concurrency: int | None) -> int:
    """Requests a simulation runs when ``--num-prompts`` is not given:
    :data:`DEFAULT_NUM_PROMPTS`, or :data:`PROMPTS_PER_CLIENT` per client of a closed loop
    where that is more (over 250 clients), at most :data:`MAX_LOAD_REQUESTS`."""
    if concurrency is None:
        return DEFAULT_NUM_PROMPTS
    return min(max(DEFAULT_NUM_PROMPTS, PROMPTS_PER_CLIENT * concurrency), MAX_LOAD_REQUESTS)

_ARRIVAL = ("arrival_s", "timestamp", "arrival_time")
_ISL = ("isl", "input_tokens", "ContextTokens", "prompt_tokens")
_OSL = ("osl", "output_tokens", "GeneratedTokens", "completion_tokens")


@dataclass(frozen=True)
class ServingLoad:
    """How requests reach the cluster.

    Exactly one of ``concurrency`` (closed loop), ``request_rate_per_s`` (open loop, Poisson)
    or ``trace`` (open loop, recorded arrivals and lengths) is set.

    Attributes:
        concurrency: clients in flight across the cluster (``--max-concurrency`` of the
            engines' benchmark scripts).
        request_rate_per_s: mean arrivals per second across the cluster.
        trace: requests of a CSV trace (:func:`load_trace`).
        num_prompts: requests of the whole benchmark, shared over the replicas a plan runs
            (:func:`_instance_requests`; default :func:`default_num_prompts` per replica; a
            trace's own).
        range_ratio: lengths drawn uniformly within ``±range_ratio`` of ``isl``/``osl``.
        up_to_nominal: lengths drawn uniformly from ``range_ratio·x`` (at least 1) to the
            nominal ``x`` instead (SGLang's random dataset, :func:`fixed_requests`).
        dataset: where lengths come from: ``random`` (``isl``/``osl``, with ``range_ratio``
            and ``up_to_nominal``) or ``sharegpt`` (ShareGPT's joint length distribution
            scaled to means of ``isl``/``osl``,
            :func:`~learn_to_shard.serving.simulate.sharegpt_requests`).
        seed: seed of arrivals and lengths.

    Raises:
        ConfigError: none or several of the three set, values out of range, or a trace with
            ``dataset``, ``range_ratio``/``up_to_nominal`` or ``num_prompts`` (the trace gives
            the requests).
    """

    concurrency: int | None = None
    request_rate_per_s: float | None = None
    trace: Requests | None = None
    num_prompts: int | None = None
    range_ratio: float = 0.0
    up_to_nominal: bool = False
    dataset: str = "random"
    seed: int = 0

    def __post_init__(self) -> None:
        given = [x is not None for x in (self.concurrency, self.request_rate_per_s, self.trace)]
        if sum(given) != 1:
            raise ConfigError("--concurrency, --request-rate, --trace: give exactly one")
        if self.concurrency is not None and not 1 <= self.concurrency <= MAX_LOAD_REQUESTS:
            raise ConfigError(f"--concurrency: must be in 1..{MAX_LOAD_REQUESTS:,} clients, "
                              f"got {self.concurrency}")
        if self.request_rate_per_s is not None:
            rate = self.request_rate_per_s
            if not 0 < rate <= MAX_REQUEST_RATE:
                raise ConfigError(f"--request-rate: must be a positive rate of at most "
                                  f"{MAX_REQUEST_RATE:.0e} requests/s, got {rate}")
            # Poisson arrivals of n requests span about n / rate seconds; float seconds stop
            # resolving a millisecond far beyond that (MAX_ARRIVAL_S, with room for the tail).
            n = self.num_prompts or default_num_prompts(self.concurrency)
            if n / rate > MAX_ARRIVAL_S / 100:
                raise ConfigError(f"--request-rate: {rate:g} requests/s spreads {n} requests "
                                  f"over about {n / rate:.3g} s, too long to simulate in "
                                  f"milliseconds; give at least "
                                  f"{100 * n / MAX_ARRIVAL_S:.3g} requests/s")
        if not 0.0 <= self.range_ratio < 1.0:
            raise ConfigError(f"--range-ratio: must be in [0, 1), got {self.range_ratio}")
        if self.dataset not in DATASETS:
            raise ConfigError(f"--dataset: one of {', '.join(DATASETS)}, got {self.dataset!r}")
        if self.dataset != "random" and (self.range_ratio or self.up_to_nominal):
            raise ConfigError("--range-ratio: only with --dataset random")
        if self.trace is not None:
            # The trace gives every request's lengths and the number of requests.
            extra = [flag for flag, on in (
                (f"--dataset {self.dataset}", self.dataset != "random"),
                ("--range-ratio", bool(self.range_ratio or self.up_to_nominal)),
                ("--num-prompts", self.num_prompts is not None)) if on]
            if extra:
                raise ConfigError(f"{', '.join(extra)} with --trace: the trace gives the "
                                  f"requests and their lengths; drop {', '.join(extra)}")
        if self.num_prompts is not None and not 1 <= self.num_prompts <= MAX_LOAD_REQUESTS:
            raise ConfigError(f"--num-prompts: must be in 1..{MAX_LOAD_REQUESTS:,}, got "
                              f"{self.num_prompts}")

    def longest_request_tokens(self, isl: int, osl: int) -> int:
        """Longest request (prompt + output tokens) this load sends around a nominal
        ``isl``/``osl``: a trace's longest, else the top of the drawn lengths
        (:func:`~learn_to_shard.serving.simulate.length_range`, or the longest scaled
        ShareGPT pair), at least ``isl + osl``."""
        if self.trace is not None:
            return max(isl + osl, int((self.trace.isl + self.trace.osl).max()))
        if self.dataset == "sharegpt":
            i, o = sharegpt_scaled(isl, osl)
            return max(isl + osl, int((i + o).max()))
        r, up = self.range_ratio, self.up_to_nominal
        return max(isl + osl, length_range(isl, r, up)[1] + length_range(osl, r, up)[1])

    def lengths_flag(self) -> str:
        """The flag whose lengths this load draws, for messages: ``--trace``, ``--dataset
        sharegpt``, ``--range-ratio`` or ``--isl/--osl``."""
        if self.trace is not None:
            return "--trace"
        if self.dataset != "random":
            return f"--dataset {self.dataset}"
        return "--range-ratio" if self.range_ratio or self.up_to_nominal else "--isl/--osl"

    def describe(self) -> str:
        """One line naming the load, e.g. ``closed loop, concurrency 64``."""
        lengths = ", ShareGPT lengths" if self.dataset == "sharegpt" else ""
        if self.concurrency is not None:
            return f"closed loop, concurrency {self.concurrency}{lengths}"
        if self.request_rate_per_s is not None:
            return f"Poisson arrivals, {self.request_rate_per_s:g} requests/s{lengths}"
        assert self.trace is not None
        n = len(self.trace.isl)
        return f"trace of {n} request{'s' if n != 1 else ''}"


#: Largest arrival time, and span of arrival times, a trace may have, seconds (1e11 s, about
#: 3,200 years; epoch seconds of today's date-times are 1.7e9). float64 seconds are spaced
#: 1.5e-5 s at 1e11 and coarser beyond, too coarse for step times of milliseconds.
MAX_ARRIVAL_S = 1e11


#: Longest prompt or output a trace row may give, tokens (2^31 − 1: beyond every model's
#: context by orders of magnitude, and within the int64 arithmetic of the simulation).
MAX_TRACE_TOKENS = 2**31 - 1

#: An ISO 8601 date-time as traces write it, for Pythons whose ``datetime.fromisoformat``
#: reads less (3.10): date, ``T`` or a space, hours and minutes, optional seconds and
#: fraction (any number of digits), optional ``Z`` or ``±HH[[:]MM]``.
_ISO_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}(?::\d{2})?)(?:[.,](\d+))?"
                       r"\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?")


def _parse_time(text: str, path: Path, row: int) -> tuple[float, bool]:
    """Seconds from a number or an ISO date-time, and whether it was a date-time.

    A date-time without an offset is read as UTC (the Azure LLM inference traces' timestamps
    carry none), so a trace's gaps do not depend on the machine's time zone; fractions
    beyond microseconds are dropped.

    Raises:
        ConfigError: neither a number nor such a date-time (naming ``--trace``, the file and
            the row).
    """
    try:
        if "_" not in text:                                # float() reads 1_0 as 10
            return float(text), False
    except ValueError:
        pass
    forms = [text.strip()]          # Python 3.11+ reads most ISO 8601 forms itself
    m = _ISO_TIME.fullmatch(text.strip())
    if m is not None:
        date, clock, frac, tz = m.groups()
        iso = f"{date} {clock}" + (f".{(frac + '000000')[:6]}" if frac else "")
        if tz and tz not in ("Z", "z"):
            iso += tz if ":" in tz else f"{tz[:3]}:{tz[3:] or '00'}"
        forms.append(iso)
    for form in forms:
        try:
            t = datetime.fromisoformat(form)
        except ValueError:
            continue
        return (t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)).timestamp(), True
    raise ConfigError(f"--trace: {path}: row {row}: arrival time {text!r} is neither seconds "
                      f"nor an ISO date-time (e.g. 2023-11-16 18:15:46.123 or "
                      f"2023-11-16T18:15:46Z)")


def load_trace(path: str | Path) -> Requests:
    """Read a request trace: a CSV with an arrival column (seconds, or ISO date-times as in the
    Azure LLM inference traces, ``TIMESTAMP``), a prompt-length column and an output-length
    column (``isl``/``osl``, ``input_tokens``/``output_tokens``, or the Azure traces'
    ``ContextTokens``/``GeneratedTokens``). Arrivals are shifted to start at 0 and the
    requests put in arrival order (rows with equal times keep their file order), so a trace
    whose rows are not sorted is dealt to replicas as it arrives.

    Column names are matched whatever their case and surrounding spaces.

    Raises:
        ConfigError: unreadable file, more rows than :data:`MAX_LOAD_REQUESTS`, a column
            named twice in the header (in any case), two columns of one quantity (e.g.
            ``isl`` and ``input_tokens``), a row with more or
            fewer fields than the header, a missing column (the message lists the accepted names),
            a non-numeric, non-positive or implausibly long (> :data:`MAX_TRACE_TOKENS`)
            length, arrival times mixing seconds and date-times, or ones that are not finite or lie
            beyond :data:`MAX_ARRIVAL_S` of 0 or of each other (float seconds there no longer
            resolve a millisecond: float64's spacing at 1e11 is 1.5e-5 s).
    """
    p = Path(path)
    try:
        with p.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            header = list(reader.fieldnames or [])
    except OSError as exc:
        raise ConfigError(f"--trace: cannot read {p}: {exc.strerror}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"--trace: {p} is not a CSV text file ({exc})") from None
    if not rows:
        raise ConfigError(f"--trace: {p} has no requests")
    if len(rows) > MAX_LOAD_REQUESTS:
        raise ConfigError(f"--trace: {p} holds {len(rows):,} requests, more than the "
                          f"{MAX_LOAD_REQUESTS:,} one simulation runs (as --num-prompts); "
                          f"give a part of it")
    # Column names match whatever their case and surrounding spaces ("arrival_s, isl, osl")
    names = [(c or "").strip().lower() for c in header]
    twice = sorted({c for c in header if names.count((c or "").strip().lower()) > 1})
    if twice:
        raise ConfigError(f"--trace: {p}: the header names {', '.join(map(repr, twice))} "
                          f"more than once; give each column once")
    cols = {n: c for n, c in zip(names, header, strict=True) if c is not None}

    def pick(accepted: tuple[str, ...], what: str) -> str:
        found = [cols[n] for n in dict.fromkeys(a.lower() for a in accepted) if n in cols]
        if len(found) > 1:
            raise ConfigError(f"--trace: {p}: the header has {len(found)} {what} columns "
                              f"({', '.join(map(repr, found))}); keep one of them")
        if found:
            return found[0]
        raise ConfigError(f"--trace: {p} has no {what} column (one of "
                          f"{', '.join(dict.fromkeys(a.lower() for a in accepted))}, in any "
                          f"case; found {', '.join(sorted(c for c in header if c)) or 'none'})")

    ca, ci, co = pick(_ARRIVAL, "arrival"), pick(_ISL, "prompt length"), pick(_OSL, "output "
                                                                               "length")
    arr: list[float] = []
    isl: list[int] = []
    osl: list[int] = []
    kinds: set[bool] = set()
    for i, r in enumerate(rows, start=2):
        if r.get(None):                      # DictReader keeps extra fields under None
            raise ConfigError(f"--trace: {p}: row {i} has more fields than the header "
                              f"({len(header)})")
        if any(v is None for k, v in r.items() if k is not None):   # restval: missing
            raise ConfigError(f"--trace: {p}: row {i} has fewer fields than the header "
                              f"({len(header)})")
        t, is_date = _parse_time(r[ca] or "", p, i)
        kinds.add(is_date)
        if len(kinds) > 1:
            raise ConfigError(f"--trace: {p}: row {i}: {ca} mixes seconds and ISO date-times "
                              f"(the rows before it are the other kind); give one kind")
        arr.append(t)
        for col, out in ((ci, isl), (co, osl)):
            text = r[col] or ""
            try:
                if "_" in text:                            # float() reads 1_000
                    raise ValueError(text)
                x = float(text or "")
                v = int(x)
                if x != v:                                 # 100.5 tokens
                    raise ValueError(text)
            except (ValueError, OverflowError):            # junk, a fraction, inf
                raise ConfigError(f"--trace: {p}: row {i}: {col} {text!r} is not a whole "
                                  f"number of tokens") from None
            if v < 1:
                raise ConfigError(f"--trace: {p}: row {i}: {col} must be >= 1, got {v}")
            if v > MAX_TRACE_TOKENS:
                raise ConfigError(f"--trace: {p}: row {i}: {col} {text!r} is more tokens than "
                                  f"any model's context (at most {MAX_TRACE_TOKENS:,})")
            out.append(v)
    a = np.asarray(arr, dtype=float)
    if not np.isfinite(a).all():
        bad = int(np.flatnonzero(~np.isfinite(a))[0])
        raise ConfigError(f"--trace: {p}: row {bad + 2}: {ca} {rows[bad][ca]!r} is not a "
                          f"finite number of seconds")
    if float(np.abs(a).max()) > MAX_ARRIVAL_S or float(a.max() - a.min()) > MAX_ARRIVAL_S:
        # Unix time in milliseconds (~1.7e12 today) is the usual cause: say so.
        ms = " (milliseconds since the epoch? give seconds)" \
            if 1e11 < float(np.abs(a).max()) < 1e14 else ""
        raise ConfigError(f"--trace: {p}: arrival times must lie within {MAX_ARRIVAL_S:.0e} s "
                          f"of 0 and of each other (seconds or ISO date-times), got "
                          f"{float(a.min())!r} .. {float(a.max())!r}{ms}")
    order = np.argsort(a, kind="stable")
    return Requests(isl=np.asarray(isl, dtype=np.int64)[order],
                    osl=np.asarray(osl, dtype=np.int64)[order], arrival_s=(a - a.min())[order])


#: A trace's mean prompt or output length more than this fraction away from the ``--isl`` /
#: ``--osl`` the search ranked at: its capacity is priced at the trace's lengths, and the
#: plan says the lengths differ (:func:`simulate_estimate`).
TRACE_LENGTHS_APART = 0.25


def refuse_beyond_context(model: ModelSpec, requests: Requests, flag: str) -> None:
    """Refuse requests longer than the model's ``max_position_embeddings`` (the engines
    refuse them).

    Raises:
        ConfigError: naming ``flag`` (the source of the lengths), the longest request
            (``isl + osl`` tokens) and the limit.
    """
    limit = model.max_position_embeddings
    worst = int((requests.isl + requests.osl).max())
    if limit and worst > limit:
        raise ConfigError(f"{flag}: a request of {worst} tokens (isl + osl) exceeds "
                          f"{model.name}'s max_position_embeddings {limit}; the engines "
                          f"refuse it")


def trace_mean_lengths(trace: Requests) -> tuple[int, int]:
    """The trace's mean prompt and output lengths, tokens, rounded (each >= 1): the
    ``isl``/``osl`` the search ranks strategies at when ``--trace`` is given without them
    (the analytical model prices one length pair; the simulation replays every request)."""
    return (max(1, round(float(np.mean(trace.isl)))),
            max(1, round(float(np.mean(trace.osl)))))


def replica_num_prompts(load: ServingLoad, replicas: int) -> int:
    """Requests one of ``replicas`` replicas runs without ``--num-prompts``:
    :func:`default_num_prompts` of its share of a closed loop's clients (``ceil(C /
    replicas)``), or of none for an open loop."""
    clients = None if load.concurrency is None else max(1, math.ceil(load.concurrency
                                                                      / replicas))
    return default_num_prompts(clients)


def _instance_requests(cm: CostModel, load: ServingLoad, replicas: int
                       ) -> tuple[Requests, int | None, str, float]:
    """The requests one (the most loaded) replica sees: clients or arrivals are spread
    round-robin over ``replicas`` instances (a load balancer in front of identical servers).
    A given ``num_prompts`` is the fleet's (a benchmark's ``--num-prompts``), its share per
    replica; without one each replica runs :func:`default_num_prompts` of its own clients.

    Returns:
        (its requests, its clients (closed loop) or ``None``, a description of its share,
        the cluster's load in units of that replica's: ``C / ceil(C / r)`` clients, a
        trace's output tokens over those of the rows the busiest replica gets (the one whose
        rows hold the most prompt and output tokens), ``r`` for a rate split evenly; the
        cluster's tokens/s is the replica's times this, a replica with less load counted in
        proportion).
    """
    wl = cm.workload
    if load.trace is not None:
        tr = load.trace
        n = len(tr.isl)
        # Round-robin, replica k gets rows k, k + r, ...: the one with the most tokens
        # (prompt and output) is simulated, and the cluster's output tokens are counted in
        # units of its own (a replica that keeps up serves what it is sent).
        tokens = (tr.isl + tr.osl).astype(np.float64)
        k = int(np.argmax(np.bincount(np.arange(n) % replicas, weights=tokens,
                                      minlength=replicas)))
        idx = np.arange(k, n, replicas)
        assert tr.arrival_s is not None
        return (Requests(tr.isl[idx], tr.osl[idx], tr.arrival_s[idx]), None,
                f"one request in {replicas} of the trace, the busiest share (rows "
                f"{k + 1}, {k + 1 + replicas}, ...)" if replicas > 1 else "the trace",
                float(tr.osl.sum()) / float(tr.osl[idx].sum()))
    # --num-prompts is a benchmark's total over the fleet; without it, every simulated replica
    # runs the default of its own (a fleet's share of 1,000 would be too short a run for a
    # queue to show).
    n = max(1, math.ceil(load.num_prompts / replicas)) if load.num_prompts \
        else replica_num_prompts(load, replicas)
    base = sharegpt_requests(n, wl.isl, wl.osl, load.seed) if load.dataset == "sharegpt" \
        else fixed_requests(n, wl.isl, wl.osl, load.range_ratio, load.seed, load.up_to_nominal)
    if load.concurrency is not None:
        c = max(1, math.ceil(load.concurrency / replicas))
        return base, c, f"{c} of {load.concurrency} clients", load.concurrency / c
    assert load.request_rate_per_s is not None
    rate = load.request_rate_per_s / replicas
    if n / rate > MAX_ARRIVAL_S / 100:       # as ServingLoad checks the whole load's
        raise ConfigError(f"--request-rate: {load.request_rate_per_s:g} requests/s over "
                          f"{replicas} replicas spreads a replica's {n} requests over about "
                          f"{n / rate:.3g} s, too long to simulate in milliseconds; give at "
                          f"least {100 * n * replicas / MAX_ARRIVAL_S:.3g} requests/s")
    arr = poisson_arrivals(n, rate, load.seed)
    return (Requests(base.isl, base.osl, arr), None,
            f"{rate:g} of {load.request_rate_per_s:g} requests/s", float(replicas))


def kv_admission(config: CostModelConfig) -> str:
    """The KV admission rule the simulation runs for ``config``
    (:data:`~learn_to_shard.cost.config.KV_ADMISSIONS`): its ``kv_admission``, else its
    engine's (:data:`~learn_to_shard.engines.KV_ADMISSION`), else ``reserve`` when it
    reserves whole requests (``kv_reserve_full_request``) and ``on_demand`` when not."""
    if config.kv_admission is not None:
        return config.kv_admission
    if config.engine in KV_ADMISSION:
        return KV_ADMISSION[config.engine]
    return "reserve" if config.kv_reserve_full_request else "on_demand"


def engine_max_num_seqs(cm: CostModel, dp: int, kv_capacity_tokens: int, pp: int = 1
                        ) -> int | None:
    """Running requests one instance of ``dp`` attention-DP ranks and ``pp`` pipeline stages
    admits: the per-rank cap ``cm.config.max_num_seqs``, or the engine's default for it
    (:func:`learn_to_shard.engines.default_max_num_seqs`, from the device and, for SGLang, the
    rank's share of the instance's ``kv_capacity_tokens`` and the served context
    ``isl + osl``), times ``dp``, and for TensorRT-LLM times ``pp`` (its cap is per pipeline
    micro-batch, :data:`learn_to_shard.engines.ADMISSION_SOURCES`; vLLM's and SGLang's caps
    count the requests of every micro-batch in flight); ``None`` when neither is set (no
    engine named).

    Raises:
        ConfigError: ``cm.config.engine`` is not an engine of :mod:`learn_to_shard.engines`.
    """
    c = cm.config
    per_rank = c.max_num_seqs
    if per_rank is None and c.engine:
        dev = cm.cluster.device
        per_rank = default_max_num_seqs(c.engine, dev.names, dev.hbm_bytes,
                                        kv_capacity_tokens // max(1, dp),
                                        cm.workload.isl + cm.workload.osl)
    if per_rank is None:
        return None
    return per_rank * max(1, dp) * (max(1, pp) if c.engine == "trtllm" else 1)


def grows_without_bound(sim: Mapping[str, object]) -> bool:
    """Whether a simulated load (:func:`simulate_estimate`'s dict) leaves a queue that grows
    without bound: an overloaded open loop at a request rate. An overloaded trace's queue
    ends with the trace, which its replay measures, so it is judged on that replay."""
    lengths = sim.get("lengths")
    return bool(sim.get("overloaded")) and not (
        isinstance(lengths, Mapping) and lengths.get("dataset") == "trace")


def keeps_up_with_open_loop(sim: Mapping[str, object]) -> bool:
    """Whether a simulated load is an open loop (a request rate or a trace) the strategy
    keeps up with: it then serves what is offered, and its tokens/s differs from another's
    that keeps up by how each run drains, not by capacity."""
    return bool(sim.get("offered_requests_per_s")) and not sim.get("overloaded")


def simulate_estimate(cm: CostModel, est: Estimate, load: ServingLoad,
                      max_num_seqs: int | None = None) -> dict[str, object]:
    """Simulate the plan ``est`` of ``cm`` under ``load`` and set it beside the analytical
    estimate.

    One replica is simulated (the most loaded one, see :func:`_instance_requests`) with the
    engine limits the plan implies: ``max_num_seqs`` running requests per instance (given:
    what the launch settings set, ``l2s plan --export`` writes the plan's batch; else the
    plan's batch within what the engine admits by default, :func:`engine_max_num_seqs`), a
    token budget of ``max_num_batched_tokens`` per DP rank, and the plan's KV capacity.
    Closed-loop clients beyond ``max_num_seqs`` wait in the queue, and their waiting counts in
    TTFT (``replica_share`` says how many and why, and ``clients_queued`` counts the waiting
    clients per replica, ``None`` where none waits). Cluster figures are that replica's times
    the number of replicas; per device, divided by all devices of the cluster (idle ones included).
    A dense model's DP ranks share no layer, so each is simulated as a replica (its share of
    the plan's batch, KV capacity and ``max_num_seqs``; the per-rank figures are what the cost
    model prices): ``dp_ranks_as_replicas`` is then the instance's DP, ``replicas`` counts
    ranks, and ``analytic``'s plan batch and tokens/s per instance are one rank's. Steps follow
    the engine's order (:data:`~learn_to_shard.engines.PREFILL_FIRST_ENGINES`: SGLang's
    prefill-only steps) for one scheduler; with a MoE model's attention-DP (``dp > 1``) every
    rank schedules its own batch, so ranks without a prompt keep decoding while another
    prefills: the single-scheduler simulation then runs mixed steps, decodes first, which is
    closer to that than holding every rank's decodes. The engine's overlap scheduler
    (:data:`~learn_to_shard.engines.OVERLAP_SCHEDULE_ENGINES`) fixes each step while the one
    before it runs; ``cm.config.prefill_first`` / ``overlap_schedule`` override the engine's
    defaults and ``decode_steps_per_schedule`` sets multi-step decoding.

    Returns:
        A JSON-ready dict: the load (``load``, one line; ``lengths``: where the lengths come
        from, ``dataset`` ``random`` / ``sharegpt`` / ``trace``, with ``range_ratio`` and
        ``up_to_nominal``), the replica's share, the scheduler simulated (``scheduler``:
        ``prefill_first``, ``overlap_schedule``, ``decode_steps_per_schedule`` as run), the
        simulated summary (seconds,
        tokens/s), the analytical TPOT/TTFT/tokens/s of the plan at its batch and at the mean
        number of running requests the simulation reached (``analytic``), ``sim / analytic``
        ratios at that occupancy, the step-time fit's relative difference from the
        analytical step, the cluster's load in replicas' worth (``replicas_worth``, see
        :func:`_instance_requests`) and the tokens/s it gives, and for a request rate the
        rate offered to the replica and whether its queue grows through the run
        (``offered_requests_per_s``, for a trace its mean rate, requests over the span of their
        arrivals, ``None`` when all arrive at once; ``overloaded``: the offered rate reaches
        ``capacity_requests_per_s`` (a queue at full load does not settle), the requests/s the
        replica completes at the plan's batch, the analytical tokens/s over the mean output
        length; a trace also needs more requests than the replica runs at once, its batch
        within the sequences its KV pool holds at the simulated replica's mean lengths (for
        a replica whose share of the trace has mean lengths more than
        :data:`TRACE_LENGTHS_APART` away from the workload's ``isl``/``osl``, priced at its
        share's mean lengths with the sequences the KV pool holds at them:
        ``lengths.replica_apart_from_planned``, with ``replica_mean_isl`` /
        ``replica_mean_osl``; ``apart_from_planned`` and ``mean_isl`` / ``mean_osl`` are the
        whole trace's), or,
        for a rate, the last quarter of arrivals waits for its first token more
        than twice as long as the first quarter, plus 1 s (``queue_grows``; ``None`` for a
        trace, whose bursts queue without overloading it); ``utilization``: the offered rate
        over that capacity, ``None`` without a rate or for a trace the replica takes in
        whole). Where the simulated replica's share of a trace is apart from the workload's
        lengths, ``analytic`` and the ratios take the steady state at that share's mean
        lengths.

    Raises:
        ConfigError: the workload is not the serve phase, a request is longer than the model's
            ``max_position_embeddings``, or the plan cannot hold a request.
    """
    if cm.workload.phase is not Phase.SERVE:
        raise ConfigError("--concurrency/--request-rate/--trace: simulate the serve phase "
                          "(--phase serve)")
    ranks_apart = 1
    if cm.model.moe is None and est.strategy.dp > 1:
        # A dense model's DP ranks share no layer: each is a server of its own (SGLang --dp
        # and vLLM -dp run one scheduler per rank), priced per rank by the cost model, and
        # simulated as a replica with its share of the batch, KV and admission cap.
        ranks_apart = est.strategy.dp
        est = dataclasses.replace(
            est, strategy=dataclasses.replace(est.strategy, dp=1,
                                              batch=-(-est.strategy.batch // ranks_apart)),
            instances=max(1, est.instances) * ranks_apart,
            kv_capacity_tokens=est.kv_capacity_tokens // ranks_apart,
            output_tokens_per_s=est.output_tokens_per_s / ranks_apart)
        if max_num_seqs is not None:
            max_num_seqs = -(-max_num_seqs // ranks_apart)
    s = est.strategy
    replicas = max(1, est.instances)
    req, conc, share, worth = _instance_requests(cm, load, replicas)
    refuse_beyond_context(cm.model, req, load.lengths_flag())
    step, fit_rel = fit_step_model(cm, s)
    cap = engine_max_num_seqs(cm, s.dp, est.kv_capacity_tokens, s.pp) \
        if max_num_seqs is None else max_num_seqs
    seqs = max(1, s.batch if cap is None else min(s.batch, cap))
    queue = None
    if conc is not None and conc > seqs:
        why = (f"the engine's max_num_seqs {cap}" if cap is not None and cap < s.batch
               else f"the plan's batch {seqs}" if ranks_apart == 1
               else f"the plan's {seqs} per DP rank")
        queue = conc - seqs
        share += f"; {queue} wait in the queue ({seqs} running: {why})"
    c = cm.config
    prefill_first = c.runs_prefill_first and s.dp == 1
    overlap = runs_overlap_schedule(c.engine, s.pp) if c.overlap_schedule is None \
        else c.overlap_schedule
    admission = kv_admission(c)
    res = simulate(step, req, max_num_seqs=seqs,
                   max_num_batched_tokens=step_token_budget(cm, s),
                   kv_capacity_tokens=max(1, est.kv_capacity_tokens), concurrency=conc,
                   prefill_first=prefill_first, overlap_schedule=overlap,
                   decode_steps_per_schedule=c.decode_steps_per_schedule,
                   recv_interval=c.scheduler_recv_interval,
                   kv_admission=admission, dp_ranks=s.dp,
                   frontend_latency_s=c.frontend_latency_s,
                   frontend_serial_s=c.frontend_serial_s,
                   microbatches=max(1, min(s.pp, s.batch)))
    summ = res.summary()
    inst_tps = summ["output_tokens_per_s"]
    devices = cm.cluster.num_devices
    # The steady-state model at the occupancy the simulation reached, to compare like with like:
    # at the lengths simulated where a trace's are apart from the planned ones.
    occ = max(1, round(summ["mean_running"]))
    wl = cm.workload
    mean_isl, mean_osl = float(np.mean(req.isl)), float(np.mean(req.osl))
    # The whole trace's means (the ranked lengths come from them; the simulated replica
    # gets its round-robin share, whose means may differ).
    trace_isl = float(np.mean(load.trace.isl)) if load.trace is not None else mean_isl
    trace_osl = float(np.mean(load.trace.osl)) if load.trace is not None else mean_osl
    def apart(isl: float, osl: float) -> bool:
        """A trace's mean lengths more than TRACE_LENGTHS_APART from the planned ones."""
        return load.trace is not None and (
            abs(isl / max(wl.isl, 1) - 1.0) > TRACE_LENGTHS_APART
            or abs(osl / max(wl.osl, 1) - 1.0) > TRACE_LENGTHS_APART)

    lengths_apart = apart(trace_isl, trace_osl)
    # The simulated replica's share of a trace is priced at its own means where they are
    # apart from the planned lengths: round-robin can deal one replica the long prompts
    # and another the long outputs of a trace whose means are the planned ones.
    share_apart = apart(mean_isl, mean_osl)
    a_isl, a_osl = (max(1, round(mean_isl)), max(1, round(mean_osl))) if share_apart \
        else (wl.isl, wl.osl)
    a_tpot, a_ttft, a_tps = (float(x[0]) for x in priced(cm, s, Phase.SERVE, a_isl, (occ,),
                                                             osl=a_osl))
    if summ["mean_running"] < 1.0:
        # Fewer than one request in the engine on average: it runs one request's rate for the
        # share of the time it holds one and idles the rest (a closed loop's clients in the
        # front-end, an open loop's gaps), so the steady state at one running is scaled by
        # that share, not compared with the idle time in it.
        a_tps *= float(summ["mean_running"])
    if conc is not None and conc > seqs and a_tps > 0:
        # A closed loop's clients beyond the replica's batch slots wait in TTFT, as in the
        # plan (CostModel.closed_loop_queue, aggregate.latency): q = clients / slots - 1
        # waiting per running request, each for q slot lifetimes, osl / (tokens/s per
        # running request), less the front-end time it spends outside the engine.
        a_ttft += max((conc / seqs - 1.0) * float(a_osl) * occ / a_tps
                      - c.frontend_time_s, 0.0)
    analytic = {"plan_batch": s.batch, "plan_tpot_s": est.tpot_s, "plan_ttft_s": est.ttft_s,
                "plan_output_tokens_per_s_per_instance": est.output_tokens_per_s,
                "at_running": occ, "tpot_s": a_tpot, "ttft_s": a_ttft,
                "output_tokens_per_s_per_instance": a_tps}

    def over(x: float, y: float) -> float:
        return x / y if y > 0 else math.nan

    # One output token per request has no TPOT: no ratio (None in the JSON).
    tpot_ratio = over(summ["mean_tpot_s"], a_tpot) if float(req.osl.max()) > 1 else None
    ratio = {"mean_tpot": tpot_ratio,
             "mean_ttft": over(summ["mean_ttft_s"], a_ttft),
             "output_tokens_per_s": over(inst_tps, a_tps)}
    # An open-loop load above what the replica serves: its queue grows through the run, so
    # the last quarter of arrivals waits far longer than the first.
    offered = None if load.request_rate_per_s is None else load.request_rate_per_s / replicas
    if load.trace is not None and req.arrival_s is not None:
        span = float(req.arrival_s.max() - req.arrival_s.min())
        # The trace's mean rate at this replica: its requests over the span they arrive in.
        offered = (len(req.isl) - 1) / span if span > 0 else None
    overloaded = whole = False
    queue_grows: bool | None = None if load.trace is not None else False
    capacity = est.output_tokens_per_s / mean_osl
    # Requests the replica runs at once at the load's mean lengths: its batch, within the
    # sequences its KV pool holds at them.
    held = mean_isl + (mean_osl if c.kv_reserve_full_request else mean_osl / 2.0)
    at_once = max(1, min(seqs, int(est.kv_capacity_tokens // max(held, 1.0))))
    # A trace replayed beside other --isl/--osl (the lengths the search ranked at), or whose
    # share at this replica is: the replica's capacity at its share's mean lengths, with the
    # sequences its KV pool holds at them, not the plan's steady state at lengths the
    # replica is not sent.
    if share_apart:
        tps_at = priced(cm, s, Phase.SERVE, max(1, round(mean_isl)), (at_once,),
                        osl=max(1, round(mean_osl)))[2]
        capacity = float(tps_at[0]) / mean_osl
    if c.frontend_serial_s > 0:
        # the front-end takes in one request per serial time, whatever the engine could run
        capacity = min(capacity, 1.0 / c.frontend_serial_s)
    if load.trace is not None:
        # A trace's bursts queue without overloading it: only a mean rate above what the
        # replica completes at the plan's batch grows the queue through the whole trace, and
        # only a trace of more requests than the replica runs at once (its batch, within
        # what its KV pool holds at the trace's mean lengths): one it takes in whole never
        # queues beyond the batch, however short its span (two requests 1 ms apart).
        whole = len(req.isl) <= at_once
        overloaded = offered is not None and offered >= capacity and not whole
    elif offered is not None:
        # Above the steady state's capacity the queue grows without bound, whether or not a
        # run of this length shows it (it ramps up and drains, so a short run may not).
        if len(res.arrival_s) >= 8:
            order = np.argsort(res.arrival_s, kind="stable")
            wait = (res.first_token_s - res.arrival_s)[order]
            q = len(wait) // 4
            early, late = float(wait[:q].mean()), float(wait[-q:].mean())
            queue_grows = late > 2.0 * early + 1.0
        overloaded = queue_grows or offered >= capacity
    # A trace the replica takes in whole has no sustained rate to load it with.
    utilization = offered / capacity if offered is not None and capacity > 0 \
        and not (load.trace is not None and whole) else None
    if ranks_apart > 1:
        share += f" (each of the instance's {ranks_apart} DP ranks schedules its own)"
    return {"load": load.describe(),
            "offered_requests_per_s": offered, "overloaded": overloaded,
            "queue_grows": queue_grows,
            "capacity_requests_per_s": capacity, "utilization": utilization,
            "lengths": {"dataset": "trace" if load.trace is not None else load.dataset,
                        "range_ratio": load.range_ratio, "up_to_nominal": load.up_to_nominal,
                        "mean_isl": trace_isl, "mean_osl": trace_osl,
                        "planned_isl": wl.isl, "planned_osl": wl.osl,
                        "apart_from_planned": lengths_apart,
                        "replica_mean_isl": mean_isl, "replica_mean_osl": mean_osl,
                        "replica_apart_from_planned": share_apart},
            "replicas": replicas, "replica_share": share, "clients_queued": queue,
            "dp_ranks_as_replicas": ranks_apart,
            "requests_simulated": len(req.isl),
            "fleet_num_prompts": load.num_prompts if load.num_prompts and replicas > 1
            and load.trace is None else None,
            "default_requests_per_replica": None if load.trace is not None
            else replica_num_prompts(load, replicas),
            "max_num_seqs": seqs,
            "engine_max_num_seqs": cap,
            "scheduler": {"prefill_first": prefill_first, "overlap_schedule": overlap,
                          "decode_steps_per_schedule": c.decode_steps_per_schedule,
                          "recv_interval": c.scheduler_recv_interval,
                          "kv_admission": admission, "preemptions": res.preemptions},
            "simulated": summ,
            "replicas_worth": worth,
            "cluster_output_tokens_per_s": inst_tps * worth,
            "tokens_per_s_per_device": inst_tps * worth / devices,
            "analytic": analytic, "sim_over_analytic": ratio,
            "step_fit_rel_err": fit_rel}
