"""Engine step time of one strategy as a function of the step's contents, read off the cost model.

The analytical cost model prices whole phases (a decode step of ``batch`` sequences at one
context, a prefill of ``batch`` prompts). A continuous-batching engine runs steps whose
contents change every iteration: some sequences decode one token each at their own context,
some prompts contribute a chunk of prefill tokens. :class:`StepTimeModel` turns one strategy's
cost-model prices into a function of that content:

``t_step = T_tokens(n_decode + n_prefill) + max(a_kv · kv_tokens_read, a_pf · prefill_pairs)
+ H_seq(n_seqs) + h_prompt · n_prompts + h_eager · [n_prefill > 0] / min(pp, n_seqs)
+ a_rank · (busiest rank's prompt tokens − n_prefill / dp)``

* ``T_tokens(n)``: the step time of ``n`` tokens at (almost) no context — decode steps of ``n``
  sequences at context 1, priced by :meth:`~learn_to_shard.cost.model.CostModel.evaluate_many`
  on a grid of ``n`` (powers of two up to the token budget) and interpolated linearly between
  grid points (every term of the cost model is a roofline of affine terms in ``n``, so the
  interpolation is exact at the grid and close between; tested against the model itself).
  It includes weights read, GEMMs, collectives, pipeline micro-batching and the engine's fixed
  host time per step (``host_step_overhead_s``), priced with the per-sequence and per-prompt
  host terms set to 0: a prompt chunk of 8,000 tokens is one sequence to the scheduler.
* ``H_seq(n)``: the engine's host time for ``n`` sequences in a step (``host_seq_overhead_s``:
  input preparation, sampling), the cost model's decode step at ``n`` sequences with the term
  minus without it, on the same grid (so attention-DP ranks sharing the sequences and pipeline
  micro-batches are accounted as the cost model accounts them). ``n_seqs`` counts the decoding
  sequences and the prompts whose prefill completes in the step (they are sampled: the cost
  model's LM-head rows).
* ``h_prompt``: host time per prompt completing its prefill in the step beyond its sequence
  share (``host_prefill_overhead_s``), the least-squares slope of the cost model's serve step
  with the term minus without it over the prompts completing per step.
* ``h_eager``: host time of a step that carries prompt tokens through every layer
  (``eager_layer_overhead_s`` × layers: such a step runs outside the decode CUDA graphs). With
  ``pp`` stages and ``n_seqs`` sequences in the step, ``min(pp, n_seqs)`` micro-batches share
  the pipeline and one of them carries the prompt chunk, so the step lengthens by that
  stage's share — a lone prompt by every layer, a full pipeline by one stage's layers, as the
  cost model prices its micro-batches (:meth:`~learn_to_shard.cost.terms.OperatorTerms.
  host_time_s`).
* ``a_rank``: with attention-DP ranks that each prefill their own requests and meet at every
  MoE layer (``CostModelConfig.attention_dp_balanced`` False), seconds per prompt token the
  busiest rank carries beyond the ranks' mean — the least-squares slope of the cost model's
  serve step unbalanced minus balanced over
  :func:`~learn_to_shard.cost.terms.busiest_rank_prompt_tokens` minus the mean, at the
  probes of ``a_pf``. A simulated step's busiest rank carries its largest prompt chunk (a
  request lives on one rank), at most the room its share of the decodes leaves in its
  budget, and at least the mean.
* ``a_kv``: seconds per key/value token a decode step reads — the least-squares slope of the
  cost model's decode step time over context at the grid's batches.
* ``a_pf``: seconds per (prompt token, earlier token) pair of causal prefill attention, read
  off the cost model's attention time of prompt-only passes at long prompts (one prompt per
  attention-DP rank, ``Estimate.op_time_s["attention"]``; :func:`_pair_price_s`). Prompt-only
  passes, not the serve step: there the decodes' KV read bounds the one attention roofline
  and hides the prompts' compute, which a lone long prompt pays in full, so the simulated
  prefill of one prompt is the cost model's prefill of it. With pipeline stages the step's
  micro-batches in flight share the pairs (a lone prompt's chunk is one pass).
* Decode and prompt attention share one kernel's roofline in a step, ``max`` of the two
  terms, as the cost model prices a serve step's attention.
* The LM head (its part of ``T_tokens``, ``StepTimeModel.lm_head_s``) is priced at the rows
  the step samples, decodes and prompts completing, not at every prompt token.

The fit is re-checked against the cost model's own serve-phase step of the mean content
(:func:`fit_step_model` returns the relative difference), so the simulation and the analytical
model price each step alike. The analytical steady state mixes steps that carry prompts with
decode-only steps (``CostModelConfig.serve_step_mix``), as the simulation runs them; they
differ in what the steady state leaves out (arrivals, queueing, how prompts cluster in steps).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..cost.config import CostModelConfig
from ..cost.model import CostModel
from ..cost.terms import busiest_rank_prompt_tokens, prompt_step_share
from ..parallel.space import BATCH_HEAD, NUM_COARSE
from ..parallel.strategy import Strategy
from ..workload import Phase, Workload


@dataclass(frozen=True)
class StepTimeModel:
    """Step time of one model instance under one strategy, from the step's contents.

    Attributes:
        token_grid: ``[G]`` token counts at which ``token_time_s`` was priced (increasing).
        token_time_s: ``[G]`` step time of that many tokens at context ~1, seconds.
        kv_read_s: seconds per key/value token read by decode attention (per instance step).
        prefill_pair_s: seconds per causal (prompt token, earlier token) pair of prefill
            attention.
        seq_host_s: ``[G]`` engine host time of ``token_grid`` sequences in one step, seconds
            (``None``: no per-sequence host time).
        prompt_host_s: engine host time per prompt completing its prefill in a step, beyond
            its share in ``seq_host_s``, seconds.
        eager_step_s: engine host time of a prompt pass through every layer outside the
            decode CUDA graphs, seconds (a step pays it over ``min(stages, n_seqs)``).
        stages: pipeline stages of the strategy.
        ranks: attention-DP ranks whose busiest one sets the step (1: none).
        rank_prompt_s: seconds per prompt token on the busiest rank beyond the ranks' mean.
        rank_budget: tokens per step and rank (``max_num_batched_tokens``).
        dp_ranks: attention-DP ranks of the instance (the token grid spreads a step's tokens
            over them).
        lm_head_s: ``[G]`` the LM head's part of ``token_time_s`` (its GEMM over
            ``token_grid`` rows, as the cost model prices it), or ``None``: the token time
            prices an LM-head row for every token of the step.
    """

    token_grid: np.ndarray
    token_time_s: np.ndarray
    kv_read_s: float
    prefill_pair_s: float
    seq_host_s: np.ndarray | None = None
    prompt_host_s: float = 0.0
    eager_step_s: float = 0.0
    stages: int = 1
    ranks: int = 1
    rank_prompt_s: float = 0.0
    rank_budget: int = 1
    dp_ranks: int = 1
    lm_head_s: np.ndarray | None = None

    def pass_tokens(self, n_decode: np.ndarray | float, prompt_tokens: np.ndarray | float,
                    n_seqs: np.ndarray | float) -> np.ndarray:
        """Tokens of the step's heaviest pipeline micro-batch, in the token grid's units
        (an instance step's tokens over every DP rank), ``[...]``; 0 without pipeline stages
        or prompt tokens. ``prompt_tokens``: that micro-batch's
        (:func:`learn_to_shard.serving.simulate.heaviest_micro_batch`).

        A prompt's chunk rides in one micro-batch of one DP rank, beside that micro-batch's
        share of the decodes (``n_decode`` over ``min(stages, n_seqs)``
        micro-batches and ``dp_ranks`` ranks), and passes through every stage in turn. The
        token grid prices ``n`` tokens as ``min(stages, n)`` micro-batches of ``n / stages``
        in flight, whose time is one micro-batch's pass through every stage (balanced
        stages: ``m · max_s t_s ≈ Σ_s t_s``), so a pass of ``k`` tokens per rank is the
        grid at ``stages · dp_ranks · k``."""
        chunk = np.asarray(prompt_tokens, dtype=float)
        if self.stages <= 1:
            return np.zeros(np.shape(chunk))
        m = np.minimum(self.stages, np.maximum(np.asarray(n_seqs, dtype=float), 1.0))
        per_rank = chunk + np.asarray(n_decode, dtype=float) / (m * self.dp_ranks)
        return np.where(chunk > 0, self.stages * self.dp_ranks * per_rank, 0.0)

    def rank_excess_tokens(self, n_decode: np.ndarray | float, n_prefill: np.ndarray | float,
                           max_chunk: np.ndarray | float) -> np.ndarray:
        """Prompt tokens on the busiest attention-DP rank beyond the ranks' mean, ``[...]``:
        ``max(0, min(max_chunk, rank_budget − n_decode / ranks) − n_prefill / ranks)`` (a
        chunk lives on one rank and fits the room its decodes leave)."""
        r = float(self.ranks)
        room = np.maximum(self.rank_budget - np.asarray(n_decode, dtype=float) / r, 1.0)
        busy = np.minimum(np.asarray(max_chunk, dtype=float), room)
        return np.maximum(busy - np.asarray(n_prefill, dtype=float) / r, 0.0)

    def step_time_s(self, n_tokens: np.ndarray | float, kv_tokens_read: np.ndarray | float,
                    prefill_pairs: np.ndarray | float, n_seqs: np.ndarray | float = 0.0,
                    n_prompts: np.ndarray | float = 0.0,
                    eager_steps: np.ndarray | float = 0.0,
                    rank_excess: np.ndarray | float = 0.0,
                    pass_tokens: np.ndarray | float = 0.0,
                    lm_rows: np.ndarray | float | None = None,
                    chunks: np.ndarray | float = 0.0) -> np.ndarray:
        """Step time, seconds (element-wise over arrays of equal shape).

        Args:
            n_tokens: tokens the step processes (decode tokens + prefill chunk tokens).
            kv_tokens_read: sum over decoding sequences of their context length.
            prefill_pairs: sum over prefill chunks of (chunk tokens × mean earlier tokens each
                attends to).
            n_seqs: sequences the engine samples in the step (decoding ones + prompts whose
                prefill completes); prices ``seq_host_s`` (none: 0).
            n_prompts: prompts whose prefill completes in the step; prices ``prompt_host_s``.
            eager_steps: 1 for a step that carries prompt tokens, 0 for a decode-only one (a
                fraction: the share of such steps); prices ``eager_step_s`` over
                ``min(stages, max(1, n_seqs))``, or whole in the heaviest micro-batch's pass
                (``pass_tokens``), which launches its layers on every stage in turn.
            rank_excess: prompt tokens on the busiest attention-DP rank beyond the ranks'
                mean (:meth:`rank_excess_tokens`); prices ``rank_prompt_s``.
            pass_tokens: the heaviest pipeline micro-batch's tokens
                (:meth:`pass_tokens`): the token time is at least the grid there, so a
                prompt chunk passes through every stage (0: the tokens spread evenly over
                the micro-batches, as the cost model's steady state spreads them).
            lm_rows: rows the LM head computes (the sequences sampled: decodes and prompts
                completing); ``None``: one per token, as the token grid prices them. The
                engines compute logits for a sequence's last position only, so a prompt chunk
                of thousands of tokens runs the LM head over one row, or none before its
                last chunk (vLLM ``logits_indices``); with :attr:`lm_head_s` the LM head is
                priced at ``lm_rows``.
            chunks: prompts with a chunk in the step (each rides one pipeline micro-batch):
                with ``n_seqs`` they set the micro-batches that share the step's prompt
                pairs, ``min(stages, max(n_seqs, chunks, 1))``.

        Beyond the grid's largest count the token time and the sequences' host time are
        extrapolated linearly from the last two grid points.
        """
        tok = _interp(np.asarray(n_tokens, dtype=float), self.token_grid, self.token_time_s)
        if self.lm_head_s is not None and lm_rows is not None:
            rows = np.asarray(lm_rows, dtype=float)
            tok = tok - _interp(np.asarray(n_tokens, dtype=float), self.token_grid,
                                self.lm_head_s) \
                + np.where(rows > 0, _interp(rows, self.token_grid, self.lm_head_s), 0.0)
        eager = np.asarray(eager_steps, dtype=float) * self.eager_step_s
        passes = np.minimum(self.stages, np.maximum(np.asarray(n_seqs, dtype=float), 1.0))
        tok = tok + eager / passes
        heavy = np.asarray(pass_tokens, dtype=float)
        if np.any(heavy > 0):
            # The heaviest micro-batch launches its layers on every stage in turn.
            tok = np.maximum(tok, np.where(heavy > 0, _interp(heavy, self.token_grid,
                                                              self.token_time_s) + eager, 0.0))
        # One attention kernel's roofline over the step's decodes (memory: their KV read) and
        # prompt chunks (compute: their pairs), as the cost model prices a serve step's
        # attention (OperatorTerms: one roofline over decode and prompt tokens together).
        # The pair price is of one pass through every layer: with pipeline stages the
        # step's micro-batches share it, min(stages, sequences or chunks) in flight, as the
        # cost model spreads a step's prompt tokens over them (a lone prompt is one pass).
        t_kv = self.kv_read_s * np.asarray(kv_tokens_read, dtype=float)
        carriers = np.maximum(np.asarray(n_seqs, dtype=float), np.asarray(chunks, dtype=float))
        t_pf = self.prefill_pair_s * np.asarray(prefill_pairs, dtype=float) \
            / np.minimum(self.stages, np.maximum(carriers, 1.0))
        out = tok + np.maximum(t_kv, t_pf)
        if self.seq_host_s is not None:
            seqs = np.asarray(n_seqs, dtype=float)
            out = out + np.where(seqs > 0, _interp(seqs, self.token_grid, self.seq_host_s), 0.0)
        return out + self.prompt_host_s * np.asarray(n_prompts, dtype=float) \
            + self.rank_prompt_s * np.asarray(rank_excess, dtype=float)


def _interp(n: np.ndarray, g: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``t`` at ``n``: linear between the grid points ``g``, extrapolated linearly from the last
    two points beyond the last one, and ``t[0]`` below the first."""
    slope = (t[-1] - t[-2]) / (g[-1] - g[-2]) if len(g) > 1 else 0.0
    return np.where(n <= g[-1], np.interp(n, g, t), t[-1] + slope * (n - g[-1]))


def _rank_excess(dec: np.ndarray | float, pf: np.ndarray | float, isl: int, dp: int,
                 budget: int) -> np.ndarray:
    """The cost model's expected prompt tokens on the busiest attention-DP rank beyond the
    mean (:func:`~learn_to_shard.cost.terms.busiest_rank_prompt_tokens` − ``pf``), ``dec`` and
    ``pf`` per rank."""
    pf = np.asarray(pf, dtype=float)
    return busiest_rank_prompt_tokens(dec, pf, pf / max(isl, 1), dp, budget) - pf


def _sub_model(cm: CostModel, s: Strategy, phase: Phase, isl: int, batches: tuple[int, ...],
               osl: int, config: CostModelConfig) -> tuple[CostModel, np.ndarray]:
    """The problem ``cm`` restricted to strategy ``s``'s degrees at ``phase``/``isl``/``osl``
    and ``batches``, and the ``[len(batches)]`` action vectors of ``s`` at each batch."""
    wl = Workload(phase, isl=isl, osl=osl, weight_dtype=cm.workload.weight_dtype,
                  kv_dtype=cm.workload.kv_dtype)
    space = dataclasses.replace(cm.space, tp_values=(s.tp,), ep_values=(s.ep,),
                                pp_values=(s.pp,), dp_values=(s.dp,), cp_values=(s.cp,),
                                batch_values=tuple(batches))
    sub = CostModel(cm.model, cm.cluster, wl, config=config, space=space)
    a = np.zeros((len(batches), len(space.nvec)), dtype=np.int64)
    a[:, BATCH_HEAD] = np.arange(len(batches))
    a[:, NUM_COARSE:] = np.asarray(s.dims, dtype=np.int64)
    return sub, a


def priced(cm: CostModel, s: Strategy, phase: Phase, isl: int, batches: tuple[int, ...],
           osl: int = 0, config: CostModelConfig | None = None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Strategy ``s`` priced by the cost model at other batches and lengths.

    Args:
        cm: the problem (model, cluster, dtypes and factors are taken from it; no SLOs).
        s: degrees and per-operator choices (its batch is ignored).
        phase, isl, osl: the workload to price.
        batches: sequences per instance to price.
        config: factors to price with instead of ``cm.config``.

    Returns:
        ``(tpot_s, ttft_s, output_tokens_per_s)`` per batch, ``[len(batches)]`` each
        (one instance's throughput before memory and SLO checks: the cluster's tokens/s per
        device over :meth:`~learn_to_shard.cost.model.CostModel.replica_fraction`, so the
        devices a layout leaves idle do not lower it).
    """
    sub, a = _sub_model(cm, s, phase, isl, batches, osl, config or cm.config)
    est = sub.evaluate_many(a)
    frac = sub.replica_fraction(np.full(len(batches), s.devices))
    return est.tpot_s, est.ttft_s, est.tokens_per_s_per_device / frac


def _lm_head_s(cm: CostModel, s: Strategy, batches: tuple[int, ...],
               config: CostModelConfig) -> np.ndarray:
    """The LM head's time in the cost model's decode steps of strategy ``s`` at context 1 and
    each of ``batches`` sequences per instance, seconds, ``[len(batches)]``
    (:meth:`~learn_to_shard.cost.model.CostModel.lm_head_time_many`: conversion, norm
    statistics, GEMM and logits gather, as the token grid's stage times hold them)."""
    sub, a = _sub_model(cm, s, Phase.DECODE, 1, batches, 0, config)
    return sub.lm_head_time_many(a)


def _prefill_attention_s(cm: CostModel, s: Strategy, isl: int,
                         config: CostModelConfig) -> float:
    """The cost model's attention time, summed over the layers, of a prefill pass of one
    ``isl``-token prompt per attention-DP rank (``s.dp`` prompts) under strategy ``s``,
    seconds (``Estimate.op_time_s["attention"]``)."""
    sub, a = _sub_model(cm, s, Phase.PREFILL, isl, (max(1, s.dp),), 0, config)
    return float(sub.evaluate(a[0]).op_time_s.get("attention", 0.0))


#: Prompt lengths at which the price of a prompt-attention pair is read off the cost model
#: (:func:`_pair_price_s`, the two longest of these, the workload's ``isl`` and ``2·isl``
#: that the model's positions hold), tokens: long enough that the pairs' FLOPs outweigh the
#: attention's bytes per token, so a trace of prompts far longer than the planned ones is
#: priced at the long prompts' rate.
PAIR_PROBE_TOKENS = (1024, 4096, 16384, 65536)


def _pair_price_s(cm: CostModel, s: Strategy, config: CostModelConfig) -> float:
    """The price of one (prompt token, earlier token) pair of prompt attention under
    strategy ``s``, seconds per pair of the instance (``dp`` prompts at a time, one per
    attention-DP rank).

    Read off the cost model's attention time of prompt-only passes ``y(i)`` (less a
    one-token prompt's: the kernel's fixed time per pass, which the token time holds) at the
    two longest of :data:`PAIR_PROBE_TOKENS`, the workload's ``isl`` and ``2·isl`` within
    ``max_position_embeddings``: per prompt token ``y(i)/i = α + β·i/2``, so ``β`` is the
    slope of ``y/i`` over ``i/2`` between them. ``α`` — the attention's bytes per prompt
    token, which bound short prompts (the roofline's memory side), and the linear cost of
    sliding-window layers — drops out, so a long prompt's pairs are not priced at a short
    prompt's rate. 0 where fewer than two lengths fit or the slope is negative.
    """
    wl = cm.workload
    limit = cm.model.max_position_embeddings or 2**62
    lengths = sorted({i for i in (*PAIR_PROBE_TOKENS, wl.isl, 2 * wl.isl) if 16 <= i <= limit})
    if len(lengths) < 2:
        return 0.0
    a0 = _prefill_attention_s(cm, s, 1, config)
    lo, hi = lengths[-2], lengths[-1]
    per_lo = (_prefill_attention_s(cm, s, lo, config) - a0) / (s.dp * lo)
    per_hi = (_prefill_attention_s(cm, s, hi, config) - a0) / (s.dp * hi)
    return max(2.0 * (per_hi - per_lo) / (hi - lo), 0.0)


def step_token_budget(cm: CostModel, s: Strategy) -> int:
    """Tokens one simulated step of strategy ``s`` may carry: ``max_num_batched_tokens`` per
    attention-DP rank and per pipeline micro-batch in flight (``min(pp, batch)``, as the
    cost model's ``phase_rows`` applies it): a simulated step is one pass of every
    micro-batch, and the engines schedule each micro-batch within the budget (vLLM's
    scheduler runs once per micro-batch of its batch queue)."""
    return int(cm.config.token_budget * s.dp * max(1, min(s.pp, s.batch)))


def fit_step_model(cm: CostModel, s: Strategy, max_tokens: int | None = None
                   ) -> tuple[StepTimeModel, float]:
    """Fit :class:`StepTimeModel` for strategy ``s`` of problem ``cm`` (see the module doc).

    Args:
        cm: the problem (serve phase; its workload's ``isl``/``osl`` set the contexts probed).
        s: the strategy (degrees and per-operator choices; its batch is ignored).
        max_tokens: largest step token count to price (default: the engine's token budget
            per instance step, ``max_num_batched_tokens × dp × min(pp, batch)``).

    Returns:
        The model and its relative difference from the cost model's own serve-phase step time
        of the mean content at ``s`` (``|t_fit − t_model| / t_model``, with
        ``serve_step_mix`` off; NaN outside the serve phase).
    """
    wl = cm.workload
    budget = int(max_tokens or step_token_budget(cm, s))
    # Step token counts probed: whole rows per attention-DP rank (dp · 2^k, so any dp has an
    # octave-spaced grid, not only a power of two), the counts below dp (idle ranks), and the
    # budget itself.
    dp = max(1, s.dp)
    grid = sorted({1 << i for i in range(int(np.log2(dp)) + 1) if 1 << i < dp}
                  | {dp << i for i in range(int(np.log2(max(budget // dp, 1))) + 1)}
                  | {budget})
    # Per-step prices: the serve probes price one step of the mean content, not the mix of
    # prompt and decode-only steps the analytical steady state uses (``serve_step_mix``;
    # the simulation runs those steps itself).
    c = dataclasses.replace(cm.config, serve_step_mix=False)
    # Token time: the fixed host time per step stays in, the per-sequence and per-prompt host
    # terms are priced apart (a prompt chunk is many tokens but one sequence).
    tok_cfg = dataclasses.replace(c, host_seq_overhead_s=0.0, host_prefill_overhead_s=0.0,
                                  eager_layer_overhead_s=0.0)
    t_tok = priced(cm, s, Phase.DECODE, 1, tuple(grid), config=tok_cfg)[0]
    seq_host = None
    if c.host_seq_overhead_s:
        seq_cfg = dataclasses.replace(c, host_prefill_overhead_s=0.0)
        seq_host = priced(cm, s, Phase.DECODE, 1, tuple(grid), config=seq_cfg)[0] - t_tok
    # Decode attention: slope of step time over context at several batches.
    ctx_hi = max(2, wl.max_context)
    small = tuple(g for g in grid if g <= 256) or (grid[0],)
    t_hi = priced(cm, s, Phase.DECODE, ctx_hi, small, config=tok_cfg)[0]
    t_lo = t_tok[: len(small)]
    reads = np.asarray(small, dtype=float) * (ctx_hi - 1)
    kv_read_s = max(float(np.dot(reads, t_hi - t_lo) / np.dot(reads, reads)), 0.0)
    model = StepTimeModel(np.asarray(grid, dtype=float), np.asarray(t_tok, dtype=float),
                          kv_read_s, 0.0, None if seq_host is None
                          else np.asarray(seq_host, dtype=float), 0.0)
    limit = cm.model.max_position_embeddings or 2**62
    osl = max(1, wl.osl)
    isls = sorted({i for i in (wl.isl // 4, wl.isl // 2, wl.isl, 2 * wl.isl)
                   if i >= 16 and i + osl <= limit} or {wl.isl})
    # Prefill attention is fitted on balanced ranks; the busiest rank's excess apart.
    noprompt_cfg = dataclasses.replace(c, host_prefill_overhead_s=0.0,
                                       eager_layer_overhead_s=0.0, attention_dp_balanced=True)
    prompt_cfg = dataclasses.replace(noprompt_cfg,
                                     host_prefill_overhead_s=c.host_prefill_overhead_s)
    unbalanced = not c.attention_dp_balanced and s.dp > 1 and cm.model.moe is not None
    rank_cfg = dataclasses.replace(noprompt_cfg, attention_dp_balanced=False)
    pf_pairs_s = _pair_price_s(cm, s, noprompt_cfg)
    # The host time per prompt and the busiest attention-DP rank's excess: the cost model's
    # serve steps (decode of ``b`` requests plus ``b·isl/osl`` prompt tokens and ``b/osl``
    # prompts completing) with the term minus without it, at a few batches and lengths.
    prompts_l, phost_l, excess_l, rank_l = [], [], [], []
    for i in isls if c.host_prefill_overhead_s or unbalanced else ():
        bs = tuple(b for b in (s.dp * 4, s.dp * 16, s.dp * 64) if b * (1 + i / osl) <= budget)
        if not bs:
            continue
        t_serve = priced(cm, s, Phase.SERVE, i, bs, osl=osl, config=noprompt_cfg)[0]
        b_arr = np.asarray(bs, dtype=float)
        pf_arr = b_arr * i / osl
        done = b_arr / osl
        if c.host_prefill_overhead_s:
            prompts_l.append(done)
            phost_l.append(priced(cm, s, Phase.SERVE, i, bs, osl=osl, config=prompt_cfg)[0]
                           - t_serve)
        if unbalanced:
            excess_l.append(_rank_excess(b_arr / s.dp, pf_arr / s.dp, i, s.dp,
                                         c.token_budget))
            rank_l.append(priced(cm, s, Phase.SERVE, i, bs, osl=osl, config=rank_cfg)[0]
                          - t_serve)
    prompt_host_s = 0.0
    if prompts_l:
        pr, ph = np.concatenate(prompts_l), np.concatenate(phost_l)
        prompt_host_s = max(float(np.dot(pr, ph) / np.dot(pr, pr)), 0.0)
    rank_prompt_s = 0.0
    if excess_l:
        ex, dr = np.concatenate(excess_l), np.concatenate(rank_l)
        if float(np.dot(ex, ex)) > 0.0:
            rank_prompt_s = max(float(np.dot(ex, dr) / np.dot(ex, ex)), 0.0)
    # The LM head's part of the token time, so a step prices it at the rows it samples.
    # With pipeline stages it runs on the last one, which it makes the slowest: a step of
    # m micro-batches pays it m times a micro-batch's rows, the whole step's rows once.
    lm_head = _lm_head_s(cm, s, tuple(grid), tok_cfg)
    model = dataclasses.replace(model, prefill_pair_s=pf_pairs_s, prompt_host_s=prompt_host_s,
                                lm_head_s=lm_head,
                                eager_step_s=c.eager_layer_overhead_s * cm.model.num_layers,
                                stages=s.pp, ranks=s.dp if unbalanced else 1,
                                rank_prompt_s=rank_prompt_s,
                                rank_budget=c.token_budget, dp_ranks=s.dp)
    if wl.phase is not Phase.SERVE:
        return model, float("nan")
    # The cost model's serve step at the plan's batch: ``n_dec`` decodes, ``n_pf`` prompt
    # tokens and ``n_done`` prompts completing per step, ``eager`` of the steps carrying
    # prompt tokens (as ``OperatorTerms.host_time_s`` counts them).
    b = max(s.batch, 1)
    share = min(1.0, budget / (b * (1 + wl.isl / wl.osl)))
    n_dec = b * share
    n_pf = b * wl.isl / wl.osl * share
    n_done = b / wl.osl * share
    eager = float(prompt_step_share(n_dec / s.dp, n_pf / s.dp, n_done / s.dp, s.dp,
                                    c.token_budget))
    t_model = float(priced(cm, s, Phase.SERVE, wl.isl, (b,), osl=wl.osl, config=c)[0][0])
    excess = _rank_excess(n_dec / s.dp, n_pf / s.dp, wl.isl, s.dp, c.token_budget) \
        if unbalanced else 0.0
    fit = float(model.step_time_s(n_dec + n_pf, n_dec * wl.decode_context,
                                  n_pf * wl.isl / 2, n_dec + n_done, n_done, eager, excess,
                                  lm_rows=n_dec + n_done))
    rel = abs(fit - t_model) / t_model if t_model > 0 else float("nan")
    return model, rel
