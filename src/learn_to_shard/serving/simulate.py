"""Request-level discrete-event simulation of one continuous-batching engine instance.

What it models (the scheduler of vLLM V1 / SGLang with chunked prefill, as documented in
vLLM's ``docs/configuration/optimization.md`` "Chunked Prefill" and its scheduler
``vllm/v1/core/sched/scheduler.py``):

* **Arrivals.** Closed loop — ``concurrency`` clients, each sending its next request the moment
  its previous one finishes (what ``vllm bench serve --max-concurrency N`` and SGLang's
  ``bench_serving --max-concurrency`` do with all prompts queued at time 0) — or open loop with
  given arrival times (Poisson: ``--request-rate``; a trace).
* **Admission.** First come, first served: a waiting request is admitted while the running set
  is below ``max_num_seqs`` and the KV pool admits it by the engine's rule (``kv_admission``:
  the whole ``isl + osl`` reserved; a paged pool that grows a token per decode and preempts
  the newest requests when full, which recompute when readmitted; or SGLang's check that no
  future step runs out). The head of the queue blocks the rest.
* **Steps.** Every step decodes one token of every running request whose prompt is done, then
  fills the remaining token budget (``max_num_batched_tokens``) with prompt chunks of running
  requests in admission order (chunked prefill; decode first, as vLLM schedules). With
  ``prefill_first`` (SGLang's scheduler) a step carries only prompt chunks while any running
  request has prompt left, and the decodes wait. A request's first token comes at the end of
  the step that finishes its prompt; it then needs ``osl − 1`` more decode steps.
* **Time.** Each step's duration is :meth:`StepTimeModel.step_time_s` of its contents (tokens,
  KV read, prefill pairs, and the sequences the engine samples — decoding ones and prompts
  completing — for its host time, and with attention-DP ranks the busiest rank's prompt
  tokens beyond the mean, :meth:`StepTimeModel.rank_excess_tokens`; a request's chunk is
  then at most the room its rank's budget leaves beside that rank's share of the decodes), so
  a step that carries a prompt chunk stalls every decode in it, and waiting for admission
  counts in TTFT.

With ``overlap_schedule`` a step's contents are fixed while the previous step runs, so a
request that arrives during a step is admitted one step later; with
``decode_steps_per_schedule`` > 1 decode-only steps run in bursts with no admission between
them, a request that finishes inside one computed to its end (vLLM V0 multi-step).
Inter-token latencies are pooled over all requests, as the
benchmark scripts print ITL (:meth:`SimResult.itl_percentile_s`).

Runs of decode-only steps (no prompt to prefill, no admission possible) are advanced in one
vectorised block up to the next finish or arrival, so a simulation of thousands of requests
takes well under a second; and with the requests in first-come-first-served order, a step
looks only at those it can run or admit (from the first unfinished one to the admission
frontier plus ``max_num_seqs``), not at the queue behind them, so the work grows with the
requests, not with their square (a million-client closed loop in ~20 s on one core,
``bench/simulation_speed.py``).

With ``frontend_latency_s`` each request reaches the engine that long after the client sent
it (the serving front-end's time, :attr:`~learn_to_shard.cost.config.CostModelConfig.
frontend_latency_s`): it waits in no queue and takes no step, but counts in its TTFT and
end-to-end latency, and a closed-loop client's next request reaches the engine that long
after the previous one finished. With ``frontend_serial_s`` the front-end also takes in the
requests one at a time, that long each (its CPU time per request in one process: the chat
template and tokenisation): a request reaches the engine ``frontend_serial_s`` after the
front-end took it up, and it takes up the next only then, so a burst of ``N`` requests reaches
the engine over ``N × frontend_serial_s`` and one instance takes in at most
``1 / frontend_serial_s`` requests per second (:func:`frontend_intake`).

Metrics follow the engines' benchmark scripts (``vllm/benchmarks/serve.py``): TTFT = first
token − arrival; TPOT = (finish − first token) / (osl − 1) per request with ``osl > 1``;
end-to-end latency = finish − arrival; output throughput = output tokens / (last finish − first
arrival).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from ..cost.config import KV_ADMISSIONS
from ..errors import ConfigError
from .steptime import StepTimeModel

#: Percentiles reported (the engines' benchmark scripts print mean, median, p90 and p99).
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Requests:
    """The requests of one simulation.

    Attributes:
        isl: ``[n]`` prompt tokens per request.
        osl: ``[n]`` output tokens per request (≥ 1).
        arrival_s: ``[n]`` arrival times, seconds, for an open-loop run; ``None`` for a closed
            loop (arrivals follow completions).
    """

    isl: np.ndarray
    osl: np.ndarray
    arrival_s: np.ndarray | None = None

    def __post_init__(self) -> None:
        if len(self.isl) != len(self.osl) or len(self.isl) == 0:
            raise ConfigError("requests: isl and osl need the same, non-zero length")
        if (np.asarray(self.isl) < 1).any() or (np.asarray(self.osl) < 1).any():
            raise ConfigError("requests: every isl and osl must be >= 1 token")
        if self.arrival_s is not None:
            arr = np.asarray(self.arrival_s, dtype=float)
            if len(arr) != len(self.isl) or not np.isfinite(arr).all() or (arr < 0).any():
                raise ConfigError("requests: arrival times must be finite, >= 0 and one per "
                                  "request")


def fixed_requests(n: int, isl: int, osl: int, range_ratio: float = 0.0, seed: int = 0,
                   up_to_nominal: bool = False) -> Requests:
    """``n`` closed-loop requests of ``isl``/``osl`` tokens, optionally spread uniformly over
    ``[x·(1 − r), x·(1 + r)]`` (vLLM's random dataset ``--random-range-ratio r``), or, with
    ``up_to_nominal``, over ``[max(1, x·r), x]`` (SGLang's ``bench_serving`` random dataset:
    ``random_range_ratio`` 0, its default, draws uniformly from 1 to the nominal length).

    Raises:
        ConfigError: ``n < 1`` or ``range_ratio`` outside [0, 1).
    """
    if n < 1:
        raise ConfigError(f"--num-prompts: must be >= 1, got {n}")
    if not 0.0 <= range_ratio < 1.0:
        raise ConfigError(f"--range-ratio: must be in [0, 1), got {range_ratio}")
    rng = np.random.default_rng(seed)

    def draw(x: int) -> np.ndarray:
        if range_ratio == 0.0 and not up_to_nominal:
            return np.full(n, x, dtype=np.int64)
        lo, hi = length_range(x, range_ratio, up_to_nominal)
        return rng.integers(lo, hi + 1, size=n)

    return Requests(isl=draw(isl), osl=draw(osl))


@functools.lru_cache(maxsize=1)
def sharegpt_lengths() -> tuple[np.ndarray, np.ndarray]:
    """``([m], [m])`` prompt and output tokens of ShareGPT first turns as ``vllm bench serve``
    samples them (``data/sharegpt_lengths.csv``: 10,000 pairs tokenized with the OPT
    tokenizer, within vLLM's filter — prompt and output ≥ 4, prompt ≤ 1,024, prompt + output
    ≤ 2,048; mean 116 / 346 tokens; derivation and source in ``scripts/sharegpt_lengths.py``
    and ``data/README.md``)."""
    path = resources.files("learn_to_shard") / "data" / "sharegpt_lengths.csv"
    table = np.loadtxt(str(path), delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    return table[:, 0].copy(), table[:, 1].copy()


def sharegpt_scaled(isl_mean: int, osl_mean: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`sharegpt_lengths` with each dimension scaled so its mean is ``isl_mean`` /
    ``osl_mean`` tokens (rounded, at least 1): a run's own tokenizer, chat template and early
    stops shift the means; the shape of the distribution stays ShareGPT's. The floor of 1
    token lifts the mean of very short targets: a mean of 1 draws 1.54 prompt / 1.28 output
    tokens on average, 4 draws 4.21 / 4.06, from 8 tokens up the mean is within 1%.

    Raises:
        ConfigError: a mean below 1.
    """
    if isl_mean < 1 or osl_mean < 1:
        raise ConfigError(f"--dataset sharegpt: isl and osl means must be >= 1, got "
                          f"{isl_mean}/{osl_mean}")
    i, o = sharegpt_lengths()
    return (np.maximum(1, np.rint(i * (isl_mean / i.mean()))).astype(np.int64),
            np.maximum(1, np.rint(o * (osl_mean / o.mean()))).astype(np.int64))


def sharegpt_requests(n: int, isl_mean: int, osl_mean: int, seed: int = 0) -> Requests:
    """``n`` closed-loop requests with ShareGPT's joint distribution of prompt and output
    lengths, pairs of :func:`sharegpt_scaled` drawn with replacement.

    Raises:
        ConfigError: ``n < 1`` or a mean below 1.
    """
    if n < 1:
        raise ConfigError(f"--num-prompts: must be >= 1, got {n}")
    i, o = sharegpt_scaled(isl_mean, osl_mean)
    pick = np.random.default_rng(seed).integers(0, len(i), size=n)
    return Requests(isl=i[pick], osl=o[pick])


def length_range(x: int, range_ratio: float, up_to_nominal: bool = False) -> tuple[int, int]:
    """The lengths :func:`fixed_requests` draws around a nominal ``x`` tokens, inclusive:
    ``[max(1, x·(1 − r)), max(1, x·(1 + r))]``, or ``[max(1, x·r), x]`` with
    ``up_to_nominal`` (both rounded down, as the benchmark scripts do)."""
    if up_to_nominal:
        return max(1, int(x * range_ratio)), x
    return max(1, int(x * (1 - range_ratio))), max(1, int(x * (1 + range_ratio)))


def poisson_arrivals(n: int, rate_per_s: float, seed: int = 0) -> np.ndarray:
    """``[n]`` arrival times of a Poisson process of ``rate_per_s`` (exponential gaps, first
    request at 0), as ``vllm bench serve --request-rate`` draws them.

    Raises:
        ConfigError: a rate that is not positive and finite.
    """
    if not 0.0 < rate_per_s < np.inf:
        raise ConfigError(f"--request-rate: must be a positive number of requests/s, got "
                          f"{rate_per_s}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_per_s, size=n)
    return np.concatenate([[0.0], np.cumsum(gaps[1:])])


@dataclass(frozen=True)
class SimResult:
    """Per-request outcome of :func:`simulate` (arrays ``[n]``, seconds) and totals.

    Attributes:
        arrival_s, first_token_s, finish_s: times per request.
        isl, osl: the requests' lengths.
        steps: engine steps simulated.
        busy_s: time from the first arrival to the last finish.
        mean_running: time-weighted mean number of running (admitted) requests.
        preemptions: requests preempted because the KV pool ran out (``kv_admission``
            ``on_demand`` / ``no_future_oom``).
        itl_s, itl_weight: the inter-token latencies of all requests pooled, as distinct
            values in ascending order ``[m]`` (seconds) and how many token gaps have each
            ``[m]``: the gap between
            a request's consecutive output tokens (or bursts of tokens streamed together,
            ``decode_steps_per_schedule`` > 1), the first counted from its first token. A
            decode step that follows a prefill-only step (``prefill_first``) gives its decodes
            one long gap; a mixed step gives them its own, longer, duration.
    """

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    steps: int
    busy_s: float
    mean_running: float
    itl_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    itl_weight: np.ndarray = field(default_factory=lambda: np.zeros(0))
    preemptions: int = 0

    @property
    def ttft_s(self) -> np.ndarray:
        """``[n]`` time to first token, waiting included."""
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """``[m]`` time per output token after the first, requests with ``osl > 1``."""
        more = self.osl > 1
        return (self.finish_s[more] - self.first_token_s[more]) / (self.osl[more] - 1)

    def itl_percentile_s(self, q: float) -> float:
        """The ``q``-th percentile (0–100) of the pooled inter-token latencies, seconds: the
        statistic ``vllm bench serve`` and SGLang's ``bench_serving`` print as ITL (every
        streamed gap of every request in one list; ``vllm/benchmarks/serve.py``
        ``calculate_metrics``). The lower weighted percentile (a value that is a gap); 0.0
        with no gaps (every ``osl`` 1)."""
        if not len(self.itl_s):
            return 0.0
        cum = np.cumsum(self.itl_weight)
        i = int(np.searchsorted(cum, q / 100.0 * cum[-1], side="left"))
        return float(self.itl_s[min(i, len(cum) - 1)])

    @property
    def e2e_s(self) -> np.ndarray:
        """``[n]`` end-to-end latency."""
        return self.finish_s - self.arrival_s

    @property
    def output_tokens_per_s(self) -> float:
        """Output tokens over the busy time (one instance)."""
        return float(self.osl.sum() / self.busy_s) if self.busy_s > 0 else 0.0

    def summary(self) -> dict[str, float]:
        """Mean and :data:`PERCENTILES` of TTFT, TPOT, end-to-end latency and the pooled
        inter-token latency (``*_s`` keys; ``*_itl_s``: :meth:`itl_percentile_s`),
        output tokens/s, requests/s, steps and mean running requests."""
        out: dict[str, float] = {}
        for name, v in (("ttft", self.ttft_s), ("tpot", self.tpot_s), ("e2e", self.e2e_s)):
            v = v if len(v) else np.zeros(1)
            out[f"mean_{name}_s"] = float(v.mean())
            for q in PERCENTILES:
                out[f"p{q}_{name}_s"] = float(np.percentile(v, q))
        w = self.itl_weight
        out["mean_itl_s"] = float((self.itl_s * w).sum() / w.sum()) if w.sum() > 0 else 0.0
        for q in PERCENTILES:
            out[f"p{q}_itl_s"] = self.itl_percentile_s(q)
        out["output_tokens_per_s"] = self.output_tokens_per_s
        out["requests_per_s"] = float(len(self.isl) / self.busy_s) if self.busy_s > 0 else 0.0
        out["steps"] = float(self.steps)
        out["mean_running"] = self.mean_running
        return out


def heaviest_micro_batch(chunk: np.ndarray, request: np.ndarray, microbatches: int,
                         room_tokens: float) -> float:
    """Prompt tokens of the heaviest pipeline micro-batch of an instance step (a scalar).

    The step stands for a round of ``microbatches`` schedules, one per micro-batch (vLLM V1
    schedules a micro-batch whenever its batch queue has room, SGLang's pipeline loop one per
    micro-batch), each taking the prompts waiting then: which micro-batch a prompt rides is
    where its request happened to arrive in the round, here a hash of the request's index
    (splitmix64, Steele, Lea and Flood, OOPSLA 2014: a prompt's chunks stay in one
    micro-batch, and the prompts of a round, mostly consecutive indices, fall on the
    micro-batches as independent uniform draws, the binomial counts the cost model's round
    prices the heaviest of, :meth:`~learn_to_shard.cost.terms.OperatorTerms.
    prompt_step_mix`; a multiplicative hash spread consecutive indices evenly instead). A
    micro-batch holds at most ``room_tokens`` prompt tokens (its share of the step budget
    beside the decodes) and at least its largest chunk.

    Args:
        chunk: prompt tokens each prefilling request runs this step, ``[k]``.
        request: each one's request index, ``[k]``.
        microbatches: micro-batches in the round (>= 1).
        room_tokens: one micro-batch's prompt-token room.
    """
    if not len(chunk) or microbatches <= 1:
        return float(chunk.sum())
    z = request.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)     # splitmix64
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    bins = ((z >> np.uint64(32)) * np.uint64(microbatches) >> np.uint64(32)).astype(np.int64)
    per = np.bincount(bins, weights=chunk.astype(np.float64), minlength=microbatches)
    return float(max(min(float(per.max()), room_tokens), float(chunk.max())))


def simulate(step: StepTimeModel, requests: Requests, *, max_num_seqs: int,
             max_num_batched_tokens: int, kv_capacity_tokens: int,
             concurrency: int | None = None, max_steps: int = 200_000_000,
             max_events: int = 1_000_000,
             prefill_first: bool = False, overlap_schedule: bool = False,
             decode_steps_per_schedule: int = 1, kv_admission: str = "reserve",
             dp_ranks: int = 1, frontend_latency_s: float = 0.0,
             frontend_serial_s: float = 0.0,
             recv_interval: int = 1, microbatches: int = 1) -> SimResult:
    """Simulate one engine instance serving ``requests`` (see the module docstring).

    Args:
        step: the instance's step-time model.
        requests: the requests; with ``arrival_s=None`` a closed loop of ``concurrency``.
        max_num_seqs: most requests running at once (the engine's ``--max-num-seqs``).
        max_num_batched_tokens: tokens per step (decode tokens + prompt chunk).
        kv_capacity_tokens: KV-cache tokens the instance holds.
        concurrency: closed-loop clients (required without arrival times).
        max_steps: safety bound on simulated engine steps (decode runs between events are
            priced as one vectorised block, so the cost is the number of events, not of steps:
            2e8 steps, e.g. 1,000 requests of 15,000 output tokens at concurrency 1 needing
            1.5e7, simulate in seconds).
        max_events: safety bound on the steps priced one by one (each admits, prefills or
            finishes a request; about 1e4 per second): a million prompts of two output
            tokens are two million such steps.
        prefill_first: while any running request has prompt tokens left, a step carries only
            prompt chunks and the decodes wait (SGLang's scheduler: a new prefill batch runs
            whenever one can be formed, decode otherwise; prefill and decode are not mixed
            unless ``--enable-mixed-chunk``). False: every step decodes first and fills the
            rest of the budget with prompt chunks (vLLM V1, TensorRT-LLM in-flight batching).
        overlap_schedule: the engine fixes each step's contents while the previous step runs
            (the host prepares step n + 1 during step n: SGLang's and TensorRT-LLM's overlap
            schedulers, vLLM ``--async-scheduling``), so admission sees only the requests that
            arrived by the start of the previous step; an idle engine sees them at once.
        decode_steps_per_schedule: decode-only steps run per scheduler call, with no
            admission between them (vLLM V0 multi-step ``--num-scheduler-steps``: the
            scheduler runs again only when a burst's steps are done, ``LLMEngine.
            _has_remaining_steps``, so a request that reaches its last token inside a burst
            stays in the batch to its end and finishes there; an on-demand pool that runs out
            inside a burst still stops the run there, where vLLM V0 reserves the burst's slots
            when it schedules, and the vLLM rows admit by reservation); a burst's tokens reach
            the client together, so each burst is one inter-token gap (the rows' "ITL counts
            10-token bursts"). 1: the scheduler runs before every step.
        frontend_latency_s: seconds from a client's sending a request to the engine's seeing
            it (see the module doc); TTFT and end-to-end latency are measured from the send.
        frontend_serial_s: seconds of the front-end's one process per request, taken one
            request at a time in the order sent (:func:`frontend_intake`), before
            ``frontend_latency_s``; 0: no intake queue.
        recv_interval: the scheduler polls for new requests only after this many consecutive
            decode-only steps (SGLang ``--scheduler-recv-interval``); after a step that
            prefills, and when idle, it polls at once. A request is admissible from the first
            poll at or after its arrival (with ``overlap_schedule``, after the start of the
            step before the poll). 1: every step. Not combined with
            ``decode_steps_per_schedule`` > 1.
        dp_ranks: the instance's DP ranks, each with ``max_num_batched_tokens / dp_ranks``
            tokens per step: a request lives on one of them, so its chunk is at most the room
            that rank's budget leaves beside its share of the decodes.
        microbatches: pipeline micro-batches a step carries (``min(pp, batch)``), each with
            its own share of ``max_num_batched_tokens`` (vLLM schedules every micro-batch of
            its batch queue within the budget): a request's chunk rides in one of them, so it
            is at most one micro-batch's room, and the step lasts at least the heaviest
            micro-batch's pass through every stage (:func:`heaviest_micro_batch`,
            :meth:`StepTimeModel.pass_tokens`; not where the step model prices the busiest
            attention-DP rank of a MoE model, whose prompt tokens the cost model prices that
            way instead, nor in a prefill-first engine's prefill step that holds decodes
            back, which stands for one micro-batch's prefill among the others' decodes).
        kv_admission: when the KV pool admits a request (sources per engine:
            :data:`learn_to_shard.engines.KV_ADMISSION_SOURCES`):

            * ``reserve``: its whole ``isl + osl`` is reserved on admission and held until
              it finishes (TensorRT-LLM's GUARANTEED_NO_EVICT; SGLang charging a benchmark's
              fixed-length requests their whole output).
            * ``on_demand``: a paged pool (vLLM). A request is admitted when its prompt and
              first token fit beside one token for every running decode; each decode then
              takes one token per step. When the pool runs out, the most recently admitted
              running requests are preempted: their KV is freed and, back in the queue, they
              recompute prompt and output so far when readmitted (vLLM V1's recompute
              preemption).
            * ``no_future_oom``: the pool as ``on_demand``, and a request is admitted only
              while no future step can run out: with the running requests sorted by tokens
              left ``r`` (``osl`` − generated) and holding ``o``, for every ``i`` the free
              tokens when the ``i``-th finishes, ``free + Σ_{k<i} o_k − r_i · (n − i)``,
              exceed one token per request still running (SGLang's
              ``add_one_req_ignore_eos``, for requests of known length with the radix
              cache off). The check counts a prompt still being chunked beside decodes
              (``prefill_first`` False) as finishing ``r`` steps from now, so the pool can
              still run out there; it then preempts as ``on_demand`` (SGLang retracts).
              A waiting request is rechecked after every decode step.

    Returns:
        A :class:`SimResult`.

    Raises:
        ConfigError: a request larger than the whole KV pool (it could never be admitted), a
            closed loop without ``concurrency``, non-positive limits, prompts whose tokens
            alone need more than ``max_events`` steps of ``max_num_batched_tokens``, or a run
            past ``max_steps`` / ``max_events``.
    """
    isl = np.asarray(requests.isl, dtype=np.int64)
    osl = np.asarray(requests.osl, dtype=np.int64)
    n = len(isl)
    if not isinstance(decode_steps_per_schedule, (int, np.integer)):
        raise ConfigError(f"simulation: decode_steps_per_schedule must be an integer >= 1, "
                          f"got {decode_steps_per_schedule!r}")
    if max_num_seqs < 1 or max_num_batched_tokens < 1 or decode_steps_per_schedule < 1 \
            or dp_ranks < 1 or not isinstance(recv_interval, (int, np.integer)) \
            or recv_interval < 1 or microbatches < 1:
        raise ConfigError("simulation: max_num_seqs, max_num_batched_tokens, "
                          "decode_steps_per_schedule, dp_ranks, recv_interval and "
                          "microbatches must be >= 1")
    if recv_interval > 1 and decode_steps_per_schedule > 1:
        raise ConfigError("simulation: recv_interval > 1 (SGLang) and "
                          "decode_steps_per_schedule > 1 (vLLM V0) do not combine")
    for name, value in (("frontend_latency_s", frontend_latency_s),
                        ("frontend_serial_s", frontend_serial_s)):
        if not (math.isfinite(value) and value >= 0.0):
            raise ConfigError(f"simulation: {name} must be finite and >= 0, got {value!r}")
    if kv_admission not in KV_ADMISSIONS:
        raise ConfigError(f"simulation: kv_admission {kv_admission!r}: must be one of "
                          f"{', '.join(KV_ADMISSIONS)}")
    need = isl + osl
    # SGLang's check admits a lone request only into a pool of more than isl + osl + 2
    # tokens (its first token's, and one beyond for the request still running).
    spare = 3 if kv_admission == "no_future_oom" else 0
    if (need + spare > kv_capacity_tokens).any():
        worst = int(need.max())
        raise ConfigError(f"simulation: a request of {worst} tokens exceeds the instance's KV "
                          f"pool of {kv_capacity_tokens} tokens"
                          + (" less the 3 SGLang's admission check needs beside it" if spare
                             else "") + "; it could never be admitted")
    # Every prompt token is prefilled in some step of at most max_num_batched_tokens: a
    # lower bound on the steps priced one by one, checked before any is run.
    prefill_steps = -(-int(isl.sum()) // int(max_num_batched_tokens))
    if prefill_steps > max_events:
        raise ConfigError(f"simulation: {n:,} prompts of {int(isl.sum()):,} tokens take at "
                          f"least {prefill_steps:,} prefill steps of at most "
                          f"{max_num_batched_tokens:,} tokens (--max-num-batched-tokens), more "
                          f"than the {max_events:,} one simulation runs; raise "
                          f"--max-num-batched-tokens or lower --num-prompts")
    closed = requests.arrival_s is None
    if closed:
        if concurrency is None or concurrency < 1:
            raise ConfigError("--concurrency: a closed-loop simulation needs >= 1 client")
        sent = np.full(n, np.inf)
        arrival = np.full(n, np.inf)
        next_issue, intake_free = 0, -np.inf

        def issue(k: int, at_s: float) -> None:
            """Clients send the next ``k`` requests at ``at_s``; the front-end takes them in
            after the ones before (:func:`frontend_intake`) and the engine sees each
            ``frontend_latency_s`` later."""
            nonlocal next_issue, intake_free
            taken = frontend_intake(np.full(k, at_s), frontend_serial_s, intake_free)
            intake_free = float(taken[-1])
            sent[next_issue:next_issue + k] = at_s
            arrival[next_issue:next_issue + k] = taken + frontend_latency_s
            next_issue += k

        issue(min(concurrency, n), 0.0)
    else:
        sent = np.asarray(requests.arrival_s, dtype=float)
        by_send = np.argsort(sent, kind="stable")
        arrival = np.empty(n)
        arrival[by_send] = frontend_intake(sent[by_send], frontend_serial_s) \
            + frontend_latency_s
        next_issue = n
    # ``arrival``: when the engine sees each request; the client sent it (``sent``) the
    # front-end's time earlier, and the metrics count from the send.
    # Requests in first-come-first-served order (arrival; a closed loop's issue order), so a
    # request's index is its queue position. The queue is FCFS with its head blocking, so the
    # requests ever admitted are an index prefix [0, frontier) and the ones below ``lo`` are
    # done; each step looks only at [lo, frontier + max_num_seqs), the most it can run or
    # admit, which keeps a step's work independent of how many requests wait behind them.
    # Arrival times are non-decreasing in this order (a closed loop issues its requests in
    # index order at non-decreasing times; those not yet issued are at infinity).
    order = np.argsort(arrival, kind="stable") if not closed else np.arange(n)
    isl, osl, need, arrival = isl[order], osl[order], need[order], arrival[order]
    sent = sent[order]
    admitted = np.zeros(n, dtype=bool)
    done = np.zeros(n, dtype=bool)
    prompt_done = np.zeros(n, dtype=np.int64)
    generated = np.zeros(n, dtype=np.int64)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    admit_seq = np.full(n, np.iinfo(np.int64).max)
    plen = isl.copy()                 # prompt tokens to compute (+ output so far once preempted)
    held = np.zeros(n, dtype=np.int64)              # KV tokens each request holds
    preemptions = 0
    on_demand = kv_admission != "reserve"
    last_token = np.full(n, np.nan)                 # time of each request's latest token
    itl_vals: list[np.ndarray] = []
    itl_wts: list[np.ndarray] = []
    kv_free = int(kv_capacity_tokens)
    t = float(np.min(arrival))
    steps = 0
    running_time = 0.0
    admissions = 0
    lo = 0                          # every request below is done
    frontier = 0                    # every request below has been admitted (at some time)
    smallest_isl, smallest_need = int(isl.min()), int(need.min())
    step_start = -np.inf        # start of the latest step when the engine ran without a gap
    # The scheduler's polls for new requests (recv_interval): what arrived by ``seen_t`` is
    # visible; ``since_poll`` decode-only steps ran since the last poll; ``poll_now``: the
    # last step prefilled, or the engine was idle or just started, so it polls at once.
    seen_t = -np.inf
    since_poll = 0
    poll_now = True
    events = 0

    def after(time: float) -> int:
        """The first request (index) that arrives after ``time``: none of those from it on
        has been admitted (an admitted request arrived by the poll that admitted it)."""
        return int(np.searchsorted(arrival, time, side="right"))

    while True:
        while lo < n and done[lo]:
            lo += 1
        if lo == n:
            break
        hi = min(n, frontier + max_num_seqs)
        w = slice(lo, hi)
        if steps >= max_steps:
            raise ConfigError(f"simulation: more than {max_steps:,} engine steps; lower "
                              f"--num-prompts or the output lengths")
        events += 1
        if events > max_events:
            raise ConfigError(f"simulation: more than {max_events:,} steps that admit, "
                              f"prefill or finish requests; lower --num-prompts (or raise "
                              f"--max-num-batched-tokens, {max_num_batched_tokens:,} tokens "
                              f"per step)")
        grow = 0                          # KV tokens this step's decodes take (on demand)
        if on_demand:
            running = admitted[w] & ~done[w]
            prefilling = (running & (prompt_done[w] < plen[w])).any()
            grow = 0 if prefill_first and prefilling else \
                int((running & (prompt_done[w] == plen[w])).sum())
            if kv_free < grow:            # preempt the newest until the decodes fit
                run = lo + np.flatnonzero(running)
                for i in run[np.argsort(-admit_seq[run], kind="stable")]:
                    if kv_free >= grow:
                        break
                    grow -= int(prompt_done[i] == plen[i])
                    kv_free += int(held[i])
                    held[i] = 0
                    admitted[i] = False
                    plen[i] = isl[i] + generated[i]
                    prompt_done[i] = 0
                    preemptions += 1
        # Admission, first come first served; the head of the queue blocks.
        decided = step_start if overlap_schedule and step_start > -np.inf else t
        if recv_interval == 1 or poll_now:
            seen_t, since_poll, poll_now = decided, 0, False
        waiting = lo + np.flatnonzero(~admitted[w] & (arrival[w] <= seen_t) & ~done[w])
        if len(waiting):
            slots = max_num_seqs - int((admitted[w] & ~done[w]).sum())
            take_kv = plen[waiting] + 1 if on_demand else need[waiting]
            fits = np.cumsum(take_kv) <= kv_free - grow
            k = min(slots, int(np.argmin(fits)) if not fits.all() else len(waiting))
            if kv_admission == "no_future_oom" and k > 0:
                run = lo + np.flatnonzero(admitted[w] & ~done[w])
                rem, occ = osl[run] - generated[run], held[run]
                free = kv_free
                for q in range(k):
                    c = waiting[q]
                    rem = np.append(rem, osl[c] - generated[c])
                    occ = np.append(occ, take_kv[q])
                    free -= int(take_kv[q])
                    if not no_future_oom(free, rem, occ):
                        k = q
                        break
            if k > 0:
                take = waiting[:k]
                admitted[take] = True
                admit_seq[take] = admissions + np.arange(k)
                admissions += k
                held[take] = take_kv[:k]
                kv_free -= int(take_kv[:k].sum())
                frontier = max(frontier, int(take[-1]) + 1)
        run_w = admitted[w] & ~done[w]
        n_running = int(run_w.sum())
        pf = lo + np.flatnonzero(run_w & (prompt_done[w] < plen[w]))
        pf = pf[np.argsort(admit_seq[pf], kind="stable")]
        dec = lo + np.flatnonzero(run_w & (prompt_done[w] == plen[w]))
        held_back = prefill_first and len(pf) > 0 and len(dec) > 0
        if prefill_first and len(pf):
            dec = dec[:0]                           # a prefill batch: the decodes wait
        n_dec = len(dec)
        left = max_num_batched_tokens - n_dec
        chunk = np.zeros(len(pf), dtype=np.int64)
        if len(pf) and left > 0:
            rem = plen[pf] - prompt_done[pf]
            if dp_ranks * microbatches > 1:
                # a request lives on one rank and rides in one micro-batch: its chunk fits
                # that micro-batch's room on that rank
                rem = np.minimum(rem, max(1, int((max_num_batched_tokens - n_dec)
                                                 / (dp_ranks * microbatches))))
            before = np.concatenate([[0], np.cumsum(rem)[:-1]])
            chunk = np.clip(left - before, 0, rem)
        n_pf = int(chunk.sum())
        if n_dec == 0 and n_pf == 0:
            poll_now = True                 # idle: the scheduler polls at once, and
            if seen_t < t:                  # sees what arrived by now (seen_t <= decided)
                step_start = -np.inf
                continue
            nxt = after(t)
            if nxt == n or not np.isfinite(arrival[nxt]):
                raise ConfigError("simulation: requests wait but none can be admitted (the "
                                  "KV pool or max_num_seqs is too small)")
            t = float(arrival[nxt])
            continue
        if n_pf == 0:
            # A run of decode-only steps: nothing to prefill, admission only at an arrival
            # or a finish. Advance up to the first finish (with bursts, the end of the burst
            # it falls in), in one block.
            k = int((osl[dec] - generated[dec]).min())
            burst = decode_steps_per_schedule
            # A finish ends no burst: the scheduler runs again only when the burst's steps
            # are done, the finished sequences' last steps wasted (vLLM V0 multi-step:
            # LLMEngine._has_remaining_steps).
            k = -(-k // burst) * burst
            if on_demand:                   # up to the step the pool runs out
                k = max(1, min(k, kv_free // n_dec))
            if kv_admission == "no_future_oom" and n_running < max_num_seqs and (
                    (~admitted[w] & ~done[w] & (arrival[w] <= t)).any()
                    or (hi < n and arrival[hi] <= t)):
                k = 1       # the check can pass after any decode step: one step at a time
            ctx = isl[dec] + generated[dec]
            s0 = float(ctx.sum())
            j = np.arange(k)
            dts = step.step_time_s(np.full(k, n_dec), s0 + j * n_dec, 0.0, n_dec)
            ends = t + np.cumsum(dts)
            nxt = after(seen_t)
            smallest = smallest_isl + 1 if on_demand else smallest_need
            if nxt < n and np.isfinite(arrival[nxt]) and kv_free >= smallest \
                    and n_running < max_num_seqs:
                cut = int(np.searchsorted(ends, float(arrival[nxt])))
                # up to the step the arrival lands in, or the end of that step's burst
                stop = burst * (cut // burst + 1)
                # ... or the first poll after it (every recv_interval decode steps)
                stop += (-(since_poll + stop)) % recv_interval
                k = max(1, min(k, stop))
            # Tokens reach the client at the end of each burst (every step when burst = 1):
            # one gap per burst and request, as the clients log one per streamed chunk.
            out = np.arange(burst - 1, k, burst)
            if not len(out) or out[-1] != k - 1:
                out = np.append(out, k - 1)
            itl_vals.append(ends[out[0]] - last_token[dec])
            itl_wts.append(np.ones(n_dec))
            if len(out) > 1:
                itl_vals.append(dts[1:k] if burst == 1 else np.diff(ends[out]))
                itl_wts.append(np.full(len(out) - 1, float(n_dec)))
            t_new = float(ends[k - 1])
            step_start = float(ends[k - 2]) if k > 1 else t
            if recv_interval > 1:           # the block's last poll, if it reached one
                polls = (since_poll + k) // recv_interval
                if polls:
                    m = polls * recv_interval - since_poll          # steps to that poll
                    seen_t = (float(ends[m - 2]) if m > 1 else t) if overlap_schedule \
                        else float(ends[m - 1])
                since_poll = (since_poll + k) % recv_interval
            last_token[dec] = t_new
            running_time += n_running * (t_new - t)
            t = t_new
            generated[dec] = np.minimum(generated[dec] + k, osl[dec])
            if on_demand:
                held[dec] += k
                kv_free -= n_dec * k
            steps += k
        else:
            ctx_sum = float((isl[dec] + generated[dec]).sum())
            pairs = float((chunk * (prompt_done[pf] + (chunk + 1) / 2)).sum())
            n_done = int((prompt_done[pf] + chunk == plen[pf]).sum())   # sampled this step
            excess = float(step.rank_excess_tokens(n_dec, n_pf, int(chunk.max()))) \
                if step.ranks > 1 else 0.0
            heavy = 0.0
            # Prefill first with decodes held back, the step is an instance-wide prefill
            # round here where SGLang's pipeline holds one micro-batch's decodes: priced
            # spread, as the cost model's prefill-first mix is (a lone prompt's is a pass).
            if step.stages > 1 and step.ranks == 1 and not held_back:
                heavy = float(step.pass_tokens(n_dec, heaviest_micro_batch(
                    chunk, pf, min(microbatches, max(1, n_dec + len(pf))),
                    (max_num_batched_tokens - n_dec) / (dp_ranks * microbatches)),
                    n_dec + n_done))
            dt = float(step.step_time_s(n_dec + n_pf, ctx_sum, pairs, n_dec + n_done, n_done,
                                        1.0, excess, heavy, lm_rows=n_dec + n_done,
                                        chunks=int((chunk > 0).sum())))
            running_time += n_running * dt
            step_start = t
            t += dt
            steps += 1
            poll_now = True                 # a step that prefills: the scheduler polls next
            generated[dec] += 1
            if on_demand:
                held[dec] += 1
                kv_free -= n_dec
            if n_dec:
                itl_vals.append(t - last_token[dec])
                itl_wts.append(np.ones(n_dec))
                last_token[dec] = t
            prompt_done[pf] += chunk
            newly = pf[prompt_done[pf] == plen[pf]]
            resumed = newly[~np.isnan(first[newly])]        # recomputed after a preemption
            if len(resumed):
                itl_vals.append(t - last_token[resumed])
                itl_wts.append(np.ones(len(resumed)))
                generated[resumed] += 1
            fresh = newly[np.isnan(first[newly])]
            first[fresh] = t
            generated[fresh] = 1
            last_token[newly] = t
        fin = lo + np.flatnonzero(run_w & (generated[w] >= osl[w]) & (prompt_done[w] == plen[w]))
        if len(fin):
            finish[fin] = t
            done[fin] = True
            kv_free += int(held[fin].sum())
            held[fin] = 0
            if closed:
                k = min(len(fin), n - next_issue)
                if k:
                    issue(k, t)
    back = np.empty(n, dtype=np.int64)             # to the caller's order
    back[order] = np.arange(n)
    busy = float(np.nanmax(finish) - np.min(sent))
    sent = sent[back]
    first, finish = first[back], finish[back]
    isl, osl = isl[back], osl[back]
    return SimResult(arrival_s=sent, first_token_s=first, finish_s=finish, isl=isl,
                     osl=osl, steps=steps, busy_s=busy,
                     mean_running=running_time / busy if busy > 0 else 0.0,
                     preemptions=preemptions, **_pooled(itl_vals, itl_wts))


def frontend_intake(sent_s: np.ndarray, serial_s: float, free_s: float = -np.inf
                    ) -> np.ndarray:
    """When a front-end that takes in one request at a time, ``serial_s`` each, first come
    first served, is done with requests sent at ``sent_s`` (non-decreasing, seconds): done_i =
    max(sent_i, done_{i-1}) + serial_s, with done_{-1} = ``free_s`` (when it is done with the
    requests before these), i.e. ``(i + 1) · serial_s + max(free_s, max_{j <= i}(sent_j −
    j · serial_s))``. With ``serial_s = 0`` the sends themselves (no queue).

    The model of the serving front-ends: vLLM's OpenAI-compatible API server and SGLang's
    tokenizer manager are one process each per instance that applies the chat template and
    tokenises every request (vLLM added ``--api-server-count`` to run several because one
    API server process limits an instance's request rate: vllm-project/vllm#17546)."""
    sent_s = np.asarray(sent_s, dtype=float)
    if serial_s <= 0.0 or not len(sent_s):
        return sent_s.copy()
    j = np.arange(len(sent_s))
    start = np.maximum(np.maximum.accumulate(sent_s - j * serial_s), free_s)
    return start + (j + 1) * serial_s


def no_future_oom(free_tokens: int, tokens_left: np.ndarray, tokens_held: np.ndarray) -> bool:
    """Whether requests of known length fit the KV pool until the last finishes: SGLang's
    ``PrefillAdder.add_one_req_ignore_eos`` (sgl-project/sglang v0.5.23
    ``sglang/srt/managers/schedule_policy.py``, ``IGNORE_EOS_RESERVE_TOKENS = 1``).

    With the requests sorted by tokens still to generate ``r`` (ascending) and ``o`` the
    tokens each holds now, the ``i``-th finishes after ``r_i`` more steps, by which time
    every request still running (``n − i``) has taken ``r_i`` tokens and those finished
    before it have freed theirs: the pool then has ``free + Σ_{k<i} o_k − r_i (n − i)``
    tokens, which must exceed one per request still running, for every ``i``.

    Args:
        free_tokens: free tokens of the pool now (the candidate's prompt taken).
        tokens_left: ``[n]`` tokens each request (candidate included) has still to generate.
        tokens_held: ``[n]`` KV tokens each holds now.
    """
    order = np.argsort(tokens_left, kind="stable")
    r = tokens_left[order].astype(np.int64)
    freed = np.concatenate([[0], np.cumsum(tokens_held[order])[:-1]])
    still = len(r) - np.arange(len(r))
    return bool((free_tokens + freed - r * still > still).all())


def _pooled(vals: list[np.ndarray], wts: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The inter-token gaps of a run as distinct values, ascending, and their counts
    (``itl_s`` and ``itl_weight`` of :class:`SimResult`); gaps equal to 1 ns are merged."""
    if not vals:
        return {"itl_s": np.zeros(0), "itl_weight": np.zeros(0)}
    v = np.round(np.concatenate(vals), 9)
    u, inv = np.unique(v, return_inverse=True)
    return {"itl_s": u, "itl_weight": np.bincount(inv, weights=np.concatenate(wts))}
