"""The cost model at fixed degrees, decomposed into per-operator tables (for the exact solver).

For one choice of degrees and batch, :class:`~learn_to_shard.cost.model.CostModel` prices the
12 per-operator choices as a chain of layouts (module docstring there). This module turns that
chain into small tables, **evaluating the per-operator term definitions**
(:class:`learn_to_shard.cost.terms.OperatorTerms`: ``layer``, ``layer_weights``,
``kv_per_seq``, ``workspace_bytes``, public methods of every ``CostModel``) on structured
rows, so that the exact solver (:mod:`learn_to_shard.search.exact`) sees the same numbers as
``evaluate_many``:

* **Layer time.** For layer type ``t`` (MoE or dense, window) with incoming layout ``L`` and the
  hub ``h = (qkv_proj, attention, o_proj)``, the time is
  ``T_t(L, h, φ) = A_t[L, h] + F_t[(attention, o_proj), φ]`` where ``φ`` is the layer's FFN
  choice — for dense layers ``d = (dense_up, dense_down)``; for MoE layers the router ``r`` and
  the expert group ``g = (expert_up, expert_down, shared_up, shared_down)``, additively
  (``F = R[(a,o), r] + G[(a,o), g]``). It holds because the attention core requires a layout
  fixed by its own choice, so o_proj's input, and hence the FFN input, depend on
  ``(attention, o_proj)`` only. The tables are obtained by differencing ``layer`` rows
  against a reference (all-replicated) FFN; the hub table itself is built as
  ``X(L, q, a) + Y(a, o)`` (45 rows instead of 108) for the same reason. The FFN rows are
  priced once per class of ``(a, o)`` options with equal FFN terms: those with the same
  o_proj run (:data:`AO_FFN_CLASS`, 4 of the 9), or for a MoE layer the same MoE input layout
  (:func:`_ffn_classes`, 2 per key). A layer type whose attention window an earlier type
  shares takes that type's ``X`` plus the difference of their reference rows ``Y(a, 2)``
  (the attention block does not read the layer's kind). The layer's output layout is
  ``out_t[(a,o), φ]``. These separations are facts of ``OperatorTerms.layer``'s code, checked by
  :func:`verify`.
* **Chain across layers.** Layer ``i``'s incoming layout is the embedding's layout for the first
  layer and layer ``i−1``'s output otherwise, so each layer is a *pair* ``(type, previous
  type)``; a pipeline stage holds counts of pairs.
* **Boundary terms.** Embedding time and the pipeline send are choice-independent; the LM head's
  time depends on (last layer's output layout, lm_head choice).
* **Called, not restated.** The layer (``layer``), its environment (``layer_env``), the
  LM-head block (``lm_head``), host time (``host_time_s``), the stage-to-stage send
  (``p2p_time_s``) and the boundary terms (``embedding_time_s``, ``first_stage_weight_bytes``,
  ``lm_head_rows``, ``resident_sequences``, ``workspace_bytes``, and the busiest
  attention-DP rank's prompt tokens ``rank_prompt_tokens``) are public methods of
  :class:`~learn_to_shard.cost.terms.OperatorTerms`, and the micro-batching / phase split
  (``phase_rows``) of ``CostModel``, called here; the embedding's output
  layout and the option sets come from :data:`learn_to_shard.parallel.ops.OPS`; the pipeline,
  memory and limit formulas are :mod:`learn_to_shard.cost.aggregate`'s, which ``CostModel``
  calls too (:func:`evaluate_z`, :func:`peak_z`). :func:`verify` compares the whole
  decomposition with ``evaluate_many`` on random strategies — the exact searcher runs it on
  every problem and raises :class:`DecompositionError` on a mismatch — and
  ``tests/test_exact.py`` does so across random models, configurations and phases, so a
  cost-model change that this module does not follow fails loudly instead of silently.
* **Memory.** Per-layer weights are additive over operators (``layer_weights``: one term per
  operator choice); KV per sequence depends on the attention choice only (``kv_per_seq``);
  workspace is choice-independent (``workspace_bytes``); embedding and LM head weights depend
  on their own choice.

What breaks a pure chain (and how :mod:`~learn_to_shard.search.exact` handles it, exactly):
see :data:`CHAIN_BREAKS`.

Every candidate strategy becomes a *feature vector* ``z`` (per-pair layer times, LM time,
per-type layer weights, embedding/LM weights, KV per sequence), and :func:`evaluate_z` computes
TPOT/TTFT, peak memory, feasibility and the objective from ``z`` for any degrees. Every
coefficient that ``z`` enters with is non-negative and the objective/feasibility are monotone,
so a candidate whose ``z`` is component-wise no smaller than another's can never be better:
this is what makes Pareto pruning of the per-operator choices exact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from ..arrays import unique_rows
from ..cost import aggregate
from ..cost.model import CostModel
from ..cost.terms import Link
from ..errors import InternalError
from ..parallel.ops import (
    DIM0,
    LAYOUT_IN,
    LAYOUT_OUT,
    NUM_CHOICES,
    NUM_OPS,
    REPLICATED,
    Op,
    block_ops,
    block_options,
)
from ..parallel.placement import Layout, R
from ..parallel.space import (
    CP_HEAD,
    DP_HEAD,
    ENGINE_LAYOUT_BIT,
    EP_HEAD,
    NUM_COARSE,
    PP_HEAD,
    TP_HEAD,
)
from ..workload import Phase

#: Terms of the cost model that break a pure per-operator chain, and how the exact solver
#: treats each one (all exactly; none is bounded or approximated).
CHAIN_BREAKS: tuple[str, ...] = (
    "layer loop: every layer reuses the same 12 choices and feeds its output layout to the "
    "next layer's qkv_proj (a cycle, not a chain) -> the hub (qkv_proj, attention, o_proj) is "
    "enumerated (27 values); given the hub every other operator group is independent",
    "layer kinds: dense and MoE layers share the attention operators and chain in model order "
    "-> each layer is priced as a (type, previous type) pair; an FFN choice carries the cost "
    "its output layout causes in the layers that follow it",
    "pipeline: TPOT = max(sum of stage times + sends, micro-batches x slowest stage) and peak "
    "memory = max over stages are not sums -> each candidate keeps a per-pair/per-type feature "
    "vector; Pareto pruning on that vector is exact because every stage time and memory is a "
    "non-negative combination of it",
    "memory and SLO limits -> constraints checked on the exact per-stage totals of every "
    "surviving candidate; KV depends on the attention choice, which is part of the hub",
    "LM head depends on the last layer's output layout -> priced jointly with the FFN group of "
    "the last layer's kind",
    "serve TTFT (second step with a prefill chunk) -> a second set of time features, pruned "
    "jointly with the first",
)

#: Incoming layout of the first layer for each embedding choice (``ChoiceDef.layout_out`` of
#: the embedding in :data:`learn_to_shard.parallel.ops.OPS`; token ids arrive replicated).
EMB_LAYOUT = np.ascontiguousarray(LAYOUT_OUT[Op.EMBEDDING][:, R])
#: Activation layouts an operator can receive (``len(Layout)``).
N_LAYOUTS = len(Layout)
NC = NUM_CHOICES
#: The hub: the attention block's operators (``qkv_proj, attention, o_proj``), every choice
#: tuple ``HUB [N_HUB, 3]`` (option index ``h = (q·NC + a)·NC + o``, ``block_options``).
HUB_OPS = block_ops("attention")
assert HUB_OPS == (Op.QKV_PROJ, Op.ATTENTION, Op.O_PROJ), "the hub is qkv -> attention -> o"
HUB = block_options(HUB_OPS)
N_HUB = len(HUB)
HUB_Q, HUB_A, HUB_O = (np.ascontiguousarray(HUB[:, j]) for j in range(len(HUB_OPS)))
#: ``(attention, o_proj)`` options (``ao = h % N_AO``): what the FFN input depends on.
AO = block_options(HUB_OPS[1:])
N_AO = len(AO)
#: The ``(attention, o_proj)`` option of each hub, ``[N_HUB]``.
_HUB_AO = np.arange(N_HUB) % N_AO
assert N_AO not in (1, N_HUB), "feature_floor tells (a, o) columns by their length"
# The layout o_proj runs on per ``(attention, o_proj)`` option (``ChoiceDef`` layouts of
# :data:`learn_to_shard.parallel.ops.OPS`; the attention core's input is fixed by its own
# choice, so the incoming layout ``R`` stands for any).
_O_RAN = LAYOUT_IN[Op.O_PROJ][AO[:, 1], LAYOUT_IN[Op.ATTENTION][AO[:, 0], R]]
#: o_proj's output layout per ``(attention, o_proj)`` option, ``[N_AO]``.
AO_O_OUT = LAYOUT_OUT[Op.O_PROJ][AO[:, 1], _O_RAN]
#: What the FFN block reads of the attention block, per ``(attention, o_proj)`` option,
#: ``[N_AO]``: o_proj's choice, the layout it runs on and its output layout as one code.
#: Options with equal codes have equal FFN terms: the FFN converts o_proj's output, and under
#: ``gemm_overlap`` hides a reduce-scatter behind o_proj's GEMM, whose time these fix.
AO_FFN_CLASS = (AO[:, 1] * len(Layout) + _O_RAN) * len(Layout) + AO_O_OUT
#: One option of each class of :data:`AO_FFN_CLASS` (the one priced) and each option's class.
_, _AO_REP, _AO_CLS = np.unique(AO_FFN_CLASS, return_index=True, return_inverse=True)


def _options(block: str, present: bool) -> np.ndarray:
    """The choice tuples of an engine block's operators, ``[NC**n, n]`` (``block_options``),
    or the single all-replicated tuple where the model lacks the block."""
    ops = block_ops(block)
    return block_options(ops) if present else np.full((1, len(ops)), REPLICATED,
                                                      dtype=np.int64)


@dataclass
class Structure:
    """Static structure of one cost model: layer types, pairs, stage classes, option sets.

    Attributes:
        types: ``(is_moe, window)`` per layer type (the cost model's ``layer_types``).
        pairs: ``(type, previous type)`` per distinct pair, previous ``-1`` for the first layer.
        first_pair: index of the first layer's pair.
        last_type: type of the last layer.
        has_dense, has_moe, has_shared: which operator groups are relevant for this model.
        d_opts: dense FFN options ``[nD, 2]`` (dense_up, dense_down); ``[[2, 2]]`` if irrelevant.
        r_opts: router options ``[nR]``.
        g_opts: expert-group options ``[nG, 4]`` (expert_up, expert_down, shared_up,
            shared_down); irrelevant members fixed to 2.
        classes: per pp index, ``(cnt [S, P], ntyp [S, T], first [S], last [S], mult [S])``:
            distinct stages and how many stages share each; ``None`` for pp > layers.
        engine_ok: the serving engine's layout rule per option set (``hub [27]``,
            ``emb [3]``, ``dense [nD]``, ``router [nR]``, ``group [nG]``, ``lm [3]``; from
            ``StrategySpace.block_ok``), empty when the space has no engine. The rule is
            joint within a block, so it is applied to these option sets rather than through
            the per-operator ``MemTables.allowed``.
    """

    types: list[tuple[bool, int | None]]
    pairs: list[tuple[int, int]]
    first_pair: int
    last_type: int
    has_dense: bool
    has_moe: bool
    has_shared: bool
    d_opts: np.ndarray
    r_opts: np.ndarray
    g_opts: np.ndarray
    classes: list[tuple[np.ndarray, ...] | None] = field(default_factory=list)
    engine_ok: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, cm: CostModel) -> Structure:
        """Read the structure of ``cm`` (its layer types and stage partition).

        Args:
            cm: the cost model.

        Returns:
            The :class:`Structure`.
        """
        types = list(cm.layer_types)
        lt = [int(x) for x in cm.layer_type_of]
        pair_of_layer, pairs = [], []
        for i, t in enumerate(lt):
            key = (t, lt[i - 1] if i else -1)
            if key not in pairs:
                pairs.append(key)
            pair_of_layer.append(pairs.index(key))
        m = cm.model
        has_dense, has_moe, has_shared = m.has_dense_ffn, m.is_moe, m.has_shared_experts
        d_opts = _options("dense", has_dense)
        r_opts = _options("router", has_moe)[:, 0]
        eg, sg = _options("experts", has_moe), _options("shared", has_moe and has_shared)
        g_opts = np.array([[*x, *y] for x in eg for y in sg], dtype=np.int64)
        n_pairs, n_types = len(pairs), len(types)
        classes: list[tuple[np.ndarray, ...] | None] = []
        for pp in cm.space.pp_values:
            if pp > m.num_layers:
                classes.append(None)
                continue
            rows = []
            start = 0
            for s, n_s in enumerate(cm.stage_layers(pp)):
                cnt = np.zeros(n_pairs)
                nt = np.zeros(n_types)
                for li in range(start, start + n_s):
                    cnt[pair_of_layer[li]] += 1
                    nt[lt[li]] += 1
                start += n_s
                rows.append(np.concatenate([cnt, nt, [s == 0, s == pp - 1]]))
            uniq, _, _, mult = unique_rows(np.array(rows))
            classes.append((uniq[:, :n_pairs], uniq[:, n_pairs:n_pairs + n_types],
                            uniq[:, -2], uniq[:, -1], mult.astype(np.float64)))
        engine_ok: dict[str, np.ndarray] = {}
        sp = cm.space
        if sp.engine is not None:
            three = np.arange(NC)[:, None]
            engine_ok = {
                "hub": sp.block_ok("attention", np.stack([HUB_Q, HUB_A, HUB_O], axis=1)),
                "emb": sp.block_ok("embedding", three),
                "dense": sp.block_ok("dense", d_opts),
                "router": sp.block_ok("router", r_opts[:, None]),
                "group": sp.block_ok("experts", g_opts[:, :2]) & sp.block_ok("shared",
                                                                             g_opts[:, 2:]),
                "lm": sp.block_ok("lm_head", three),
            }
        return cls(types=types, pairs=pairs, first_pair=pair_of_layer[0], last_type=lt[-1],
                   has_dense=has_dense, has_moe=has_moe, has_shared=has_shared, d_opts=d_opts,
                   r_opts=r_opts, g_opts=g_opts, classes=classes, engine_ok=engine_ok)

    @property
    def n_pairs(self) -> int:
        """Number of distinct (type, previous type) pairs."""
        return len(self.pairs)

    @property
    def n_types(self) -> int:
        """Number of layer types."""
        return len(self.types)


@dataclass(frozen=True)
class ZLayout:
    """Column layout of a feature vector ``z``.

    Attributes:
        n_pairs, n_types: sizes.
        step2: whether the serve phase's second (TTFT) step is priced.
    """

    n_pairs: int
    n_types: int
    step2: bool

    @property
    def tx(self) -> slice:
        """Per-pair layer time of the main step, seconds."""
        return slice(0, self.n_pairs)

    @property
    def lm(self) -> int:
        """LM-head time of the main step, seconds."""
        return self.n_pairs

    @property
    def tx2(self) -> slice:
        """Per-pair layer time of the TTFT step (serve), seconds."""
        o = self.n_pairs + 1
        return slice(o, o + (self.n_pairs if self.step2 else 0))

    @property
    def lm2(self) -> int:
        """LM-head time of the TTFT step (serve); only when ``step2``."""
        return 2 * self.n_pairs + 1

    @property
    def w(self) -> slice:
        """Per-layer weight bytes per device, per type."""
        o = self.n_pairs + 1 + ((self.n_pairs + 1) if self.step2 else 0)
        return slice(o, o + self.n_types)

    @property
    def ew(self) -> int:
        """Embedding weight bytes per device (first stage)."""
        return self.w.stop

    @property
    def lw(self) -> int:
        """LM-head weight bytes per device (last stage; zero with tied embeddings, pp = 1)."""
        return self.w.stop + 1

    @property
    def kv(self) -> slice:
        """KV bytes per resident sequence per layer, per type, when attention is not
        sequence-split (scaled by all resident sequences of the rank)."""
        return slice(self.w.stop + 2, self.w.stop + 2 + self.n_types)

    @property
    def kv_seq(self) -> slice:
        """The same when attention is sequence-split (scaled by the rank's share)."""
        return slice(self.kv.stop, self.kv.stop + self.n_types)

    @property
    def size(self) -> int:
        """Length of ``z``."""
        return self.kv_seq.stop


@dataclass
class Keys:
    """Distinct (tp, ep, dp, cp, per-rank tokens) settings: what the per-operator tables depend
    on.

    Attributes:
        tp_idx, ep_idx, dp_idx, cp_idx: indices into the space's candidate lists, ``[K]``.
        tp, ep, dp, cp: degrees, ``[K]``.
        dec, pf, pf_seqs: decode sequences, prefill tokens and completing prompts per attention
            DP rank in one main step (as ``CostModel._run``), ``[K]``.
        pf2, pf_seqs2, dec2: the serve TTFT step's prefill chunk, completing prompts and
            decodes, ``[K]``.
        m_mb: pipeline micro-batches in flight, ``[K]`` (the serve mix weighs a round by its
            heaviest micro-batch, ``OperatorTerms.prompt_step_mix``).
        pf_busy: the busiest attention-DP rank's prompt tokens where finite, ``[K]``, for the
            keys of a mix's step a (``StepMix.busy_a``); ``None``: every rank's from ``pf``
            (``OperatorTerms.rank_prompt_tokens``).
    """

    tp_idx: np.ndarray
    ep_idx: np.ndarray
    dp_idx: np.ndarray
    cp_idx: np.ndarray
    tp: np.ndarray
    ep: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    dec: np.ndarray
    pf: np.ndarray
    pf_seqs: np.ndarray
    pf2: np.ndarray
    pf_seqs2: np.ndarray
    dec2: np.ndarray
    m_mb: np.ndarray
    pf_busy: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.tp)

    def take(self, idx: np.ndarray) -> Keys:
        """The keys at ``idx``."""
        taken: dict[str, Any] = {}
        for k in self.__dataclass_fields__:
            v = getattr(self, k)
            taken[k] = v if v is None else v[idx]
        return Keys(**taken)


@dataclass
class Coarse:
    """Per-row quantities of degree/batch combinations that do not depend on the choices.

    Attributes:
        actions: ``[M, 5]`` coarse indices (tp, ep, pp, dp, batch).
        pp_idx, pp, batch, devices, m_mb: pipeline index and degree, batch, devices per
            instance, micro-batches in flight, ``[M]``.
        replica_frac: full-batch replicas per cluster device (``CostModel.replica_fraction``
            at the row's batch: ``floor(N / devices) / N``, fewer under a closed-loop load
            that cannot fill them), ``[M]``.
        key: index into the :class:`Keys` built alongside, ``[M]``.
        p2p, p2p2: stage-to-stage send time of the main / TTFT step, seconds, ``[M]``.
        s_all, s_seq: resident sequences per rank without / with a sequence split of attention.
        chunk_steps: serve TTFT steps ``ceil(isl / chunk)``.
        lw_factor: 0 where a tied LM head shares the embedding (pp = 1), else 1.
        host, host2: host time added to every stage of the main / TTFT step, seconds.
        share: fraction of the running requests a serve step carries
            (``CostModel._step_share``; 1 outside serve), ``[M]``.
        queued: closed-loop clients waiting per running request
            (``CostModel.closed_loop_queue``), ``[M]``.
    """

    actions: np.ndarray
    pp_idx: np.ndarray
    pp: np.ndarray
    batch: np.ndarray
    devices: np.ndarray
    replica_frac: np.ndarray
    m_mb: np.ndarray
    key: np.ndarray
    p2p: np.ndarray
    p2p2: np.ndarray
    s_all: np.ndarray
    s_seq: np.ndarray
    chunk_steps: np.ndarray
    lw_factor: np.ndarray
    host: np.ndarray
    host2: np.ndarray
    share: np.ndarray
    queued: np.ndarray

    def __len__(self) -> int:
        return len(self.pp)

    def take(self, idx: np.ndarray) -> Coarse:
        """The rows at ``idx``."""
        return Coarse(**{k: getattr(self, k)[idx] for k in self.__dataclass_fields__})


def _host_time(cm: CostModel, dec: np.ndarray, pf: np.ndarray, pf_seqs: np.ndarray,
               pp: np.ndarray, dp: np.ndarray) -> np.ndarray:
    """Host time added to every stage's step (``OperatorTerms.host_time_s``; zeros when none)."""
    host = cm.host_time_s(dec, pf, pf_seqs, pp, dp)
    return np.zeros(np.shape(dec)) if host is None else host


def coarse_terms(cm: CostModel, coarse: np.ndarray) -> tuple[Coarse, Keys]:
    """Choice-independent quantities of coarse index rows, and their distinct table keys.

    Uses ``CostModel.phase_rows`` (micro-batching, phase split) and ``CostModel.p2p_time_s``.

    Args:
        cm: the cost model.
        coarse: ``[M, NUM_COARSE]`` coarse indices (tp, ep, pp, dp, cp, batch),
            structurally valid.

    Returns:
        ``(Coarse, Keys)``; ``Coarse.key`` indexes the keys.
    """
    sp = cm.space
    a = np.asarray(coarse, dtype=np.int64)
    d = sp.degrees_many(a)
    tp, ep, pp, dp, cp, batch = d["tp"], d["ep"], d["pp"], d["dp"], d["cp"], d["batch"]
    ph = cm.phase_rows(pp, dp, batch)
    m_mb, dec, pf, pf_seqs = ph["m"], ph["dec"], ph["pf"], ph["pf_seqs"]
    pf2, pf_seqs2, chunk_steps = ph["pf2"], ph["pf_seqs2"], ph["chunk_steps"]
    dec2 = ph["dec2"]

    def p2p_of(dec_: np.ndarray, pf_: np.ndarray, busy: np.ndarray | None = None
               ) -> np.ndarray:
        """The stage send of the busiest rank's tokens (``OperatorTerms.layer_env``)."""
        return cm.p2p_time_s(dec_ + cm.rank_prompt_tokens(dec_, pf_, dp, busy), tp, dp, pp)

    # The main step as the mix of two steps (``CostModel._mix_steps``).
    mix = cm.prompt_step_mix(dec, pf, pf_seqs, dp, m_mb)
    mixed = mix.blend

    s_all, s_seq = cm.resident_sequences(batch, dp, tp, cp)
    # Micro-batches matter to the tables only through the serve mix's weights.
    m_key = m_mb if cm.workload.phase is Phase.SERVE else np.ones_like(m_mb)
    key_cols = np.stack([a[:, TP_HEAD], a[:, EP_HEAD], a[:, DP_HEAD], a[:, CP_HEAD], dec, pf,
                         pf_seqs, m_key], axis=1)
    _, first, inv, _ = unique_rows(key_cols)
    keys = Keys(tp_idx=a[first, TP_HEAD], ep_idx=a[first, EP_HEAD], dp_idx=a[first, DP_HEAD],
                cp_idx=a[first, CP_HEAD], tp=tp[first], ep=ep[first], dp=dp[first],
                cp=cp[first], dec=dec[first], pf=pf[first],
                pf_seqs=pf_seqs[first], pf2=pf2[first], pf_seqs2=pf_seqs2[first],
                dec2=dec2[first], m_mb=m_key[first].astype(np.float64))
    tie = cm.model.tie_word_embeddings
    co = Coarse(actions=a, pp_idx=a[:, PP_HEAD], pp=pp, batch=batch,
                devices=(tp * dp * pp).astype(np.float64),
                replica_frac=cm.replica_fraction(tp * dp * pp, batch),
                m_mb=m_mb.astype(np.float64),
                key=inv.reshape(-1),
                p2p=mixed(p2p_of(mix.dec_a, mix.pf_a, mix.busy_a), p2p_of(dec, mix.pf_b)),
                p2p2=p2p_of(dec2, pf2),
                s_all=s_all, s_seq=s_seq, chunk_steps=chunk_steps,
                lw_factor=np.where(tie & (pp == 1), 0.0, 1.0),
                host=mixed(_host_time(cm, mix.dec_a, mix.pf_a, mix.seqs_a, pp, dp),
                           _host_time(cm, dec, mix.pf_b, mix.seqs_b, pp, dp)),
                host2=_host_time(cm, dec2, pf2, pf_seqs2, pp, dp),
                share=ph["share"],
                queued=cm.closed_loop_queue(tp * dp * pp, batch))
    return co, keys


# ---------------------------------------------------------------------------------- tables
def _env(cm: CostModel, keys: Keys, pf: np.ndarray) -> dict:
    """The per-row environment ``OperatorTerms.layer`` reads (``OperatorTerms.layer_env``)."""
    return cm.layer_env(keys.tp, keys.ep, keys.dp, keys.dec, pf, keys.cp, keys.pf_busy)


def _take_env(env: dict, idx: np.ndarray | slice) -> dict:
    """The rows ``idx`` of an environment (:meth:`OperatorTerms.layer_env`)."""
    return {k: (Link(v.bw[idx], v.alpha[idx]) if isinstance(v, Link) else v[idx])
            for k, v in env.items()}


def _repeat_env(env: dict, reps: int) -> dict:
    out: dict[str, Any] = {}
    for k, v in env.items():
        if isinstance(v, Link):
            out[k] = Link(np.repeat(v.bw, reps), np.repeat(v.alpha, reps))
        else:
            out[k] = np.repeat(v, reps)
    return out


#: Rows per call of ``OperatorTerms.layer`` in :func:`_layer_rows`: its ~100 elementwise
#: passes then work on arrays that stay in the core's cache (measured 1.7x faster per row than
#: 200,000-row calls on the project's machines; ``bench/plan_speed.py``).
LAYER_CHUNK_ROWS = 16_384


def _layer_rows(cm: CostModel, env: dict, dims: np.ndarray, lin: np.ndarray, is_moe: bool,
                window: int | None, ctx: float) -> tuple[np.ndarray, np.ndarray]:
    """``OperatorTerms.layer`` on every (key, row) pair: times and output layouts ``[K, R]``."""
    k = len(env["tp"])
    r = len(dims)
    t_out = np.empty((k, r))
    l_out = np.empty((k, r), dtype=np.int64)
    step = max(1, LAYER_CHUNK_ROWS // max(r, 1))
    for s in range(0, k, step):
        e = _take_env(env, slice(s, s + step))
        kc = len(e["tp"])
        er = _repeat_env(e, r)
        tt, lo, _ = cm.layer(er, np.tile(dims, (kc, 1)), np.tile(lin, kc), is_moe, window,
                              ctx, None)
        t_out[s:s + kc] = tt.reshape(kc, r)
        l_out[s:s + kc] = lo.reshape(kc, r)
    return t_out, l_out


@dataclass
class StepTables:
    """Per-key time tables of one step (main or serve TTFT).

    Attributes:
        A: per type, ``[K, 4, 27]``: layer time with incoming layout L and hub h, reference FFN.
        FR: per MoE type, ``[K, 9, nR]``: router term by (attention, o_proj) and router choice.
        FG: per MoE type, ``[K, 9, nG]``: expert-group term.
        FD: per dense type, ``[K, 9, nD]``: dense FFN term.
        out: per type, ``[K, 9, nφ]``: the layer's output layout by (a, o) and FFN option
            (``nG`` options for MoE types, ``nD`` for dense types).
        LM: ``[K, 4, 3]``: LM-head time by incoming layout and lm_head choice.
        emb_t: ``[K]``: embedding time.
        rows: number of table rows evaluated through ``OperatorTerms.layer``.
    """

    A: list[np.ndarray]
    FR: list[np.ndarray | None]
    FG: list[np.ndarray | None]
    FD: list[np.ndarray | None]
    out: list[np.ndarray]
    LM: np.ndarray
    emb_t: np.ndarray
    rows: int


def _lm_table(cm: CostModel, keys: Keys, dec: np.ndarray, pf_seqs: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """LM-head time ``[K, 4, 3]`` and untied LM weight bytes ``[K, 3]`` (``OperatorTerms.lm_head``
    for every incoming layout and choice, in one call on ``K · 12`` rows)."""
    k = len(keys.tp)
    n = N_LAYOUTS * NC
    lm_rows = np.broadcast_to(cm.lm_head_rows(dec, pf_seqs), (k,))
    lay_code = np.tile(np.repeat(np.arange(N_LAYOUTS, dtype=np.int64), NC), k)
    ch = np.tile(np.arange(NC, dtype=np.int64), k * N_LAYOUTS)
    lm = cm.lm_head(lay_code, ch, np.repeat(keys.tp, n), np.repeat(lm_rows, n))
    out = (lm["t_conv"] + lm["t_norm"] + lm["t_lm"] + lm["t_logits"]).reshape(k, N_LAYOUTS, NC)
    lw = np.broadcast_to(lm["w_bytes"], (k * n,)).reshape(k, N_LAYOUTS, NC)[:, -1, :].copy()
    return out, lw


def _ffn_classes(cm: CostModel, dp: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Classes of ``(attention, o_proj)`` options with equal MoE-FFN terms, per key group.

    A MoE block reads the attention block only through its input layout
    (:meth:`~learn_to_shard.cost.terms.OperatorTerms.moe_input_layout` of o_proj's output and
    the group's ``dp``; the conversion to it is the same for every FFN choice and cancels in
    the FFN tables' differences), so the options with the same input layout share their FFN
    rows. Each class is priced at an option whose input layout is that layout in every
    group.

    Args:
        dp: ``[G]`` attention-DP degree of each key group.

    Returns:
        ``(rep [C], sel [G, N_AO])``: the option priced for each class and each group's class
        of each option; ``None`` when some layout has no option that gives it in every group
        (then :data:`AO_FFN_CLASS` classes are used).
    """
    x = cm.moe_input_layout(AO_O_OUT[None, :], np.asarray(dp)[:, None])     # [G, N_AO]
    same = (x == x[:1]).all(axis=0)                 # options whose input layout is fixed
    vals = np.unique(x)
    rep = [np.flatnonzero(same & (x[0] == v)) for v in vals]
    if any(not len(r) for r in rep):
        return None
    return np.array([int(r[0]) for r in rep]), np.searchsorted(vals, x)


def _every_option(st: Structure) -> dict[str, np.ndarray]:
    """Every option index of each option-bearing group (:data:`GROUPS`)."""
    return {"emb": np.arange(NC), "router": np.arange(len(st.r_opts)),
            "group": np.arange(len(st.g_opts)), "dense": np.arange(len(st.d_opts))}


def needed_options(st: Structure) -> dict[str, np.ndarray]:
    """The options :func:`step_tables` prices: those some strategy of the space can use.

    Without an engine, every option. With one (``st.engine_ok``), an option the engine's
    layout rule excludes enters no candidate, no feature floor and no check (every consumer
    masks it by :func:`_allowed`; :func:`verify` draws launchable strategies), so its rows are
    not priced and its table entries are ``+inf`` (layouts: ``R``). Priced: ``qa``, the
    ``(qkv_proj, attention)`` pairs of the allowed hubs (rows ``X(L, q, a)``; ``Y(a, o)``,
    9 rows, is priced whole, since every ``A`` entry subtracts the reference
    ``Y(a, REPLICATED)``), and the allowed router, expert-group and dense options plus the
    all-replicated one, which every FFN difference is taken against.

    Returns:
        ``qa``: ``[NC, NC]`` bool; ``router``, ``group``, ``dense``: sorted option indices
        into ``st.r_opts``, ``st.g_opts``, ``st.d_opts``.
    """
    ok = st.engine_ok
    if not ok:
        return {"qa": np.ones((NC, NC), dtype=bool), **_every_option(st)}
    qa = np.zeros((NC, NC), dtype=bool)
    qa[HUB_Q[ok["hub"]], HUB_A[ok["hub"]]] = True
    return {"qa": qa,
            "router": np.flatnonzero(ok["router"] | (st.r_opts == REPLICATED)),
            "group": np.flatnonzero(ok["group"] | (st.g_opts == REPLICATED).all(axis=1)),
            "dense": np.flatnonzero(ok["dense"] | (st.d_opts == REPLICATED).all(axis=1))}


def _scatter(a: np.ndarray, idx: np.ndarray, n: int, fill: float | int = np.inf) -> np.ndarray:
    """``a [..., len(idx)]`` placed at columns ``idx`` of a ``[..., n]`` array of ``fill``
    (``a`` itself when ``idx`` is every column)."""
    if len(idx) == n:
        return a
    out = np.full((*a.shape[:-1], n), fill, dtype=a.dtype)
    out[..., idx] = a
    return out


def step_tables(cm: CostModel, st: Structure, keys: Keys, second: bool = False) -> StepTables:
    """Time tables of the main step (or, ``second=True``, the serve TTFT step) per key.

    Args:
        cm: the cost model.
        st: its structure.
        keys: the distinct settings.
        second: price the serve TTFT step (prefill chunk ``keys.pf2``, decodes ``keys.dec2``)
            instead of the main one.

    Returns:
        The :class:`StepTables`.
    """
    wl = cm.workload
    if second:                      # the TTFT step's decodes (none where prefill first)
        keys = dataclasses.replace(keys, dec=keys.dec2, pf_busy=None)
    pf = keys.pf2 if second else keys.pf
    pf_seqs = keys.pf_seqs2 if second else keys.pf_seqs
    ctx = float(wl.isl) if wl.phase is Phase.DECODE else \
        (0.0 if wl.phase is Phase.PREFILL else float(wl.decode_context))
    env = _env(cm, keys, pf)
    k = len(keys)
    # The FFN rows enter only as differences within a key (attention's time cancels), and
    # nothing else of a key reaches them through ``cp``: price them once per key group that
    # differs only in cp (``verify`` checks the whole decomposition against the cost model).
    cols = [keys.tp_idx, keys.ep_idx, keys.dp_idx, keys.dec, pf]
    if keys.pf_busy is not None:            # a mix's step a: the busiest rank's tokens too
        cols.append(np.nan_to_num(keys.pf_busy, nan=-1.0))
    grp_cols = np.stack(cols, axis=1)
    _, g_first, g_inv, _ = unique_rows(grp_cols)
    g_inv = g_inv.reshape(-1)
    env_g = _take_env(env, g_first)
    base = np.full(NUM_OPS, REPLICATED, dtype=np.int64)
    # Hub rows with the reference (replicated) FFN. The attention block is
    # X(L, qkv, attention) + Y(attention, o_proj) (the attention core requires a layout fixed by
    # its own choice), so 36 rows (L, q, a; o = 2) and 9 rows (a, o; L = R, q = 2) give all
    # 4 x 27: A[L, q, a, o] = X[L, q, a] + Y[a, o] - Y[a, 2].
    lqa = np.stack(np.meshgrid(np.arange(N_LAYOUTS), np.arange(NC), np.arange(NC),
                               indexing="ij"), axis=-1).reshape(-1, 3)
    # Only the options some allowed strategy uses are priced (all of them without an engine);
    # the others stay +inf (:func:`needed_options`).
    need = needed_options(st)
    x_cols = np.flatnonzero(need["qa"][lqa[:, 1], lqa[:, 2]])    # flat (L, q, a) indices
    lqa = lqa[x_cols]
    n_x = len(lqa)
    hub = np.tile(base, (n_x + N_AO, 1))
    hub[:n_x, Op.QKV_PROJ], hub[:n_x, Op.ATTENTION] = lqa[:, 1], lqa[:, 2]
    hub[n_x:, Op.ATTENTION], hub[n_x:, Op.O_PROJ] = AO[:, 0], AO[:, 1]
    lin_hub = np.concatenate([lqa[:, 0], np.full(N_AO, R)])
    A: list[np.ndarray] = []
    FR: list[np.ndarray | None] = []
    FG: list[np.ndarray | None] = []
    FD: list[np.ndarray | None] = []
    outs: list[np.ndarray] = []
    rows = 0
    g = len(g_first)
    x_by_window: dict[int | None, tuple[np.ndarray, np.ndarray]] = {}
    for is_moe, window in st.types:
        # FFN rows for one representative (a, o) of each class; ``sel [G, N_AO]`` gives every
        # (a, o) of a key group its class (``verify`` checks it).
        classes = _ffn_classes(cm, env_g["dp"]) if is_moe else None
        rep, sel = classes or (_AO_REP, np.broadcast_to(_AO_CLS.reshape(1, -1), (g, N_AO)))
        n_cls = len(rep)
        if is_moe:
            r_idx, g_idx = need["router"], need["group"]
            nr, ng = len(r_idx), len(g_idx)
            ffn = np.tile(base, (n_cls * (nr + ng), 1))
            ao = np.concatenate([np.repeat(rep, nr), np.repeat(rep, ng)])
            ffn[:n_cls * nr, Op.ROUTER] = np.tile(st.r_opts[r_idx], n_cls)
            gcols = (Op.EXPERT_UP, Op.EXPERT_DOWN, Op.SHARED_EXPERT_UP, Op.SHARED_EXPERT_DOWN)
            for j, col in enumerate(gcols):
                ffn[n_cls * nr:, col] = np.tile(st.g_opts[g_idx, j], n_cls)
        else:
            d_idx = need["dense"]
            nd = len(d_idx)
            ffn = np.tile(base, (n_cls * nd, 1))
            ao = np.repeat(rep, nd)
            ffn[:, Op.DENSE_UP] = np.tile(st.d_opts[d_idx, 0], n_cls)
            ffn[:, Op.DENSE_DOWN] = np.tile(st.d_opts[d_idx, 1], n_cls)
        ffn[:, Op.ATTENTION] = AO[ao, 0]
        ffn[:, Op.O_PROJ] = AO[ao, 1]
        # A layer type whose window an earlier type shares differs from it only in the FFN
        # (the attention block does not read the layer's kind): X of this type is that
        # type's X plus the difference of their reference-FFN rows, Y[a, 2].
        donor = x_by_window.get(window)
        if donor is None:
            tt, _ = _layer_rows(cm, env, hub, lin_hub, is_moe, window, ctx)
            rows += k * len(hub)
            x_flat = np.full((k, N_LAYOUTS * NC * NC), np.inf)
            x_flat[:, x_cols] = tt[:, :n_x]
            x = x_flat.reshape(k, N_LAYOUTS, NC, NC)             # [K, L, q, a]
            y = tt[:, n_x:n_x + N_AO].reshape(k, NC, NC)          # [K, a, o]
            x_by_window[window] = (x, y)
        else:
            tt, _ = _layer_rows(cm, env, hub[n_x:], lin_hub[n_x:], is_moe, window, ctx)
            rows += k * N_AO
            y = tt.reshape(k, NC, NC)
            x = donor[0] + (y - donor[1])[:, None, None, :, REPLICATED]
        f_t, f_o = _layer_rows(cm, env_g, ffn, np.full(len(ffn), R), is_moe, window, ctx)
        f_t, f_o = f_t[g_inv], f_o[g_inv]
        rows += len(g_first) * len(ffn)
        pick = (np.arange(k)[:, None], sel[g_inv])            # [K, N_AO] -> class rows
        a_full = x[:, :, :, :, None] \
            + (y - y[:, :, REPLICATED:REPLICATED + 1])[:, None, None, :, :]
        A.append(a_full.reshape(k, N_LAYOUTS, N_HUB))
        if is_moe:
            tr = _scatter(f_t[:, :n_cls * nr].reshape(k, n_cls, nr), r_idx, len(st.r_opts))
            tg = _scatter(f_t[:, n_cls * nr:].reshape(k, n_cls, ng), g_idx, len(st.g_opts))
            r_ref = int(np.flatnonzero(st.r_opts == REPLICATED)[0])
            g_ref = int(np.flatnonzero((st.g_opts == REPLICATED).all(axis=1))[0])
            FR.append((tr - tr[:, :, r_ref:r_ref + 1])[pick])
            FG.append((tg - tg[:, :, g_ref:g_ref + 1])[pick])
            FD.append(None)
            outs.append(_scatter(f_o[:, n_cls * nr:].reshape(k, n_cls, ng), g_idx,
                                 len(st.g_opts), R)[pick])
        else:
            d_ref = int(np.flatnonzero((st.d_opts == REPLICATED).all(axis=1))[0])
            td = _scatter(f_t.reshape(k, n_cls, nd), d_idx, len(st.d_opts))
            FD.append((td - td[:, :, d_ref:d_ref + 1])[pick])
            FR.append(None)
            FG.append(None)
            outs.append(_scatter(f_o.reshape(k, n_cls, nd), d_idx, len(st.d_opts), R)[pick])
    lm, _ = _lm_table(cm, keys, keys.dec, pf_seqs)
    emb_t = cm.embedding_time_s(keys.dec + cm.rank_prompt_tokens(keys.dec, pf, keys.dp,
                                                                 keys.pf_busy))
    return StepTables(A=A, FR=FR, FG=FG, FD=FD, out=outs, LM=lm, emb_t=emb_t, rows=rows)


def main_step_tables(cm: CostModel, st: Structure, keys: Keys) -> StepTables:
    """Time tables of the main step per key: :func:`step_tables` at the keys' mean content, or,
    where the serve phase prices the mean step as a mix (``OperatorTerms.prompt_step_mix``,
    ``StepMix.mixed``, as ``CostModel._mix_steps``), ``q`` times the tables of step a
    (``dec_a`` decodes, ``pf_a`` prompt tokens) plus ``w_b`` times those of step b (the
    decodes, ``pf_b``). Every table is a sum of per-operator times, so the mix keeps the
    decomposition exact (``verify``); the layouts (``out``) do not depend on the content."""
    m = cm.prompt_step_mix(keys.dec, keys.pf, keys.pf_seqs, keys.dp, keys.m_mb)
    if not m.mixed.any():
        return step_tables(cm, st, keys)
    prompt = step_tables(cm, st, dataclasses.replace(keys, dec=m.dec_a, pf=m.pf_a,
                                                     pf_seqs=m.seqs_a, pf_busy=m.busy_a))
    alone = step_tables(cm, st, dataclasses.replace(keys, pf=m.pf_b, pf_seqs=m.seqs_b))
    mix = m.blend

    def mix_opt(x: np.ndarray | None, y: np.ndarray | None) -> np.ndarray | None:
        return None if x is None or y is None else mix(x, y)

    return StepTables(A=[mix(x, y) for x, y in zip(prompt.A, alone.A, strict=True)],
                      FR=[mix_opt(x, y) for x, y in zip(prompt.FR, alone.FR, strict=True)],
                      FG=[mix_opt(x, y) for x, y in zip(prompt.FG, alone.FG, strict=True)],
                      FD=[mix_opt(x, y) for x, y in zip(prompt.FD, alone.FD, strict=True)],
                      out=prompt.out, LM=mix(prompt.LM, alone.LM),
                      emb_t=mix(prompt.emb_t, alone.emb_t), rows=prompt.rows + alone.rows)


@dataclass
class MemTables:
    """Per-key memory tables and structural validity of each operator choice.

    Attributes:
        W0: per type, ``[K]``: per-layer weight bytes with every operator replicated.
        dW: per type, ``[K, 12, 3]``: change of the per-layer weight bytes when one operator
            takes a choice (additive across operators).
        KV: per type, ``[K, 3]``: KV bytes per resident sequence per layer by attention choice.
        EW: ``[K, 3]``: embedding weight bytes by embedding choice.
        LW: ``[K, 3]``: LM-head weight bytes by lm_head choice (before tying).
        ws: ``[K]``: workspace bytes.
        allowed: ``[K, 12, 3]``: the choice breaks no structural rule at these degrees.
    """

    W0: list[np.ndarray]
    dW: list[np.ndarray]
    KV: list[np.ndarray]
    EW: np.ndarray
    LW: np.ndarray
    ws: np.ndarray
    allowed: np.ndarray


def mem_tables(cm: CostModel, st: Structure, keys: Keys) -> MemTables:
    """Memory tables and per-choice validity for each key (via the cost model's own terms).

    Args:
        cm: the cost model.
        st: its structure.
        keys: the distinct settings.

    Returns:
        The :class:`MemTables`.
    """
    k = len(keys)
    tp, ep, dp, cp = keys.tp, keys.ep, keys.dp, keys.cp
    g = tp * dp
    etp = np.maximum(g // np.maximum(ep, 1), 1)
    # Choice-dependent terms depend on the degrees only: build them per distinct
    # (tp, ep, dp, cp).
    deg = np.stack([keys.tp_idx, keys.ep_idx, keys.dp_idx, keys.cp_idx], axis=1)
    _, first, inv, _ = unique_rows(deg)
    inv = inv.reshape(-1)
    u = len(first)
    # Row 0: all replicated; row 1 + 3*op + c: operator op takes choice c.
    var = np.full((1 + NC * NUM_OPS, NUM_OPS), REPLICATED, dtype=np.int64)
    for op in range(NUM_OPS):
        var[1 + NC * op:1 + NC * (op + 1), op] = np.arange(NC)
    nv = len(var)

    def rep(x: np.ndarray) -> np.ndarray:
        return np.repeat(x[first], nv)

    dims = np.tile(var, (u, 1))
    W0, dW, KV = [], [], []
    tokens = cm.kv_tokens_per_sequence()
    a0 = 1 + NC * int(Op.ATTENTION)
    for is_moe, window in st.types:
        w = cm.layer_weights(dims, rep(tp), rep(ep), rep(etp), is_moe).reshape(u, nv)[inv]
        W0.append(w[:, 0])
        dW.append((w[:, 1:] - w[:, :1]).reshape(k, NUM_OPS, NC))
        kv = cm.kv_per_seq(dims, rep(tp), window, tokens, rep(cp)).reshape(u, nv)[inv]
        KV.append(kv[:, a0:a0 + NC])
    # Structural validity per choice: rule bits of the variant minus those of all-replicated
    # (every choice-dependent rule is a disjunction over operators, and replicated breaks none).
    act = np.zeros((u * nv, NUM_COARSE + NUM_OPS), dtype=np.int64)
    act[:, TP_HEAD], act[:, EP_HEAD] = rep(keys.tp_idx), rep(keys.ep_idx)
    act[:, DP_HEAD], act[:, CP_HEAD] = rep(keys.dp_idx), rep(keys.cp_idx)
    act[:, NUM_COARSE:] = dims
    # The engine's layout rule is joint per block: Structure.engine_ok applies it instead.
    bits = (cm.space.rule_bits_many(act) & ~ENGINE_LAYOUT_BIT).reshape(u, nv)[inv]
    allowed = (bits[:, 1:] == bits[:, :1]).reshape(k, NUM_OPS, NC)
    ew = np.stack([cm.first_stage_weight_bytes(np.full(k, c), tp) for c in range(NC)],
                  axis=1)
    _, lw = _lm_table(cm, keys, keys.dec, keys.pf_seqs)
    # The larger workspace of the two steps of the mix (``CostModel._mix_steps``).
    m = cm.prompt_step_mix(keys.dec, keys.pf, keys.pf_seqs, keys.dp, keys.m_mb)
    ws = cm.workspace_bytes(m.dec_a, m.pf_a, m.seqs_a, tp, etp)
    if m.mixed.any():
        ws = np.maximum(ws, cm.workspace_bytes(keys.dec, m.pf_b, m.seqs_b, tp, etp))
    return MemTables(W0=W0, dW=dW, KV=KV, EW=ew, LW=lw, ws=np.broadcast_to(ws, (k,)).copy(),
                     allowed=allowed)


# ---------------------------------------------------------------------------------- features
@dataclass
class Parts:
    """Feature contributions of each operator group, per key and hub (see module docstring).

    Shapes: ``K`` keys, 27 hubs, ``F = layout.size`` features.

    Attributes:
        layout: the feature layout.
        hub: ``[K, 27, F]`` hub (qkv_proj, attention, o_proj) part, incl. KV per sequence.
        hub_ok: ``[K, 27]`` the hub's choices are structurally allowed.
        emb: ``[K, 27, 3, F]``; emb_ok ``[K, 3]``.
        dense: ``[K, 27, nD, F]``; dense_ok ``[K, nD]``.
        router: ``[K, 27, nR, F]``; router_ok ``[K, nR]``.
        group: ``[K, 27, nG, F]``; group_ok ``[K, nG]``.
        lm: ``[K, 4, 3, F]`` by the last layer's output layout; lm_ok ``[K, 3]``.
        last_out: ``[K, 9, nφ]`` output layout of the last layer by (a, o) and the FFN option
            of its kind (dense options if the last layer is dense, else expert-group options).
        last_dense: whether the last layer is dense.
    """

    layout: ZLayout
    hub: np.ndarray
    hub_ok: np.ndarray
    emb: np.ndarray
    emb_ok: np.ndarray
    dense: np.ndarray
    dense_ok: np.ndarray
    router: np.ndarray
    router_ok: np.ndarray
    group: np.ndarray
    group_ok: np.ndarray
    lm: np.ndarray
    lm_ok: np.ndarray
    last_out: np.ndarray
    last_dense: bool


#: Option-bearing groups of :class:`Parts` (each ``[K, 27, n, F]``), in the order their
#: floors are summed by :func:`feature_floor`.
GROUPS = ("emb", "dense", "router", "group")


def _group_terms(st: Structure, mt: MemTables, tabs: list[StepTables], lay: ZLayout,
                 opts: dict[str, np.ndarray] | None = None, by_ao: bool = False
                 ) -> Iterator[tuple[str, int, np.ndarray, bool]]:
    """The entries of the option-bearing groups' feature arrays, one column at a time.

    Yields ``(group, column, values, add)``: ``values`` broadcasts to ``[K, 27, n]`` (key,
    hub, the group's option); ``add`` False sets the column (the arrays start at zero),
    True adds to it. Applied in order, these give :func:`build_parts`'s ``emb``, ``dense``,
    ``router`` and ``group`` arrays; :func:`feature_floor` minimises the same values per
    column without building the arrays. Columns never yielded stay zero.

    ``opts`` (group name -> option indices) yields only those options of each group
    (``n = len(opts[group])``); default every option. ``by_ao``: the FFN terms, which
    depend on the hub only through its ``(attention, o_proj)`` option, come as ``[K, 9, n]``
    (``ao = h % 9``) instead of repeated over the 27 hubs.
    """
    k = len(mt.ws)
    ao = np.arange(N_HUB) % N_AO
    ffn_ao = slice(None) if by_ao else ao
    hi = np.arange(N_HUB)
    sel = _every_option(st) if opts is None else opts
    r_opts, g_opts, d_opts = st.r_opts[sel["router"]], st.g_opts[sel["group"]], \
        st.d_opts[sel["dense"]]
    for t, (is_moe, _) in enumerate(st.types):
        wcol = lay.w.start + t
        dw = mt.dW[t]
        if is_moe:
            yield "router", wcol, dw[:, Op.ROUTER][:, r_opts][:, None, :], False
            g_sum = sum(dw[:, op][:, g_opts[:, j]] for j, op in enumerate(
                (Op.EXPERT_UP, Op.EXPERT_DOWN, Op.SHARED_EXPERT_UP,
                 Op.SHARED_EXPERT_DOWN)))
            yield "group", wcol, cast(np.ndarray, g_sum)[:, None, :], False
        else:
            yield "dense", wcol, (dw[:, Op.DENSE_UP][:, d_opts[:, 0]]
                                  + dw[:, Op.DENSE_DOWN][:, d_opts[:, 1]])[:, None, :], False
    yield "emb", lay.ew, mt.EW[:, None, sel["emb"]], False
    for si, tb in enumerate(tabs):
        tx0 = lay.tx.start if si == 0 else lay.tx2.start
        for p, (t, pt) in enumerate(st.pairs):
            col = tx0 + p
            is_moe = st.types[t][0]
            a_t = tb.A[t]                                     # [K, 4, 27]
            fr, fg, fd = tb.FR[t], tb.FG[t], tb.FD[t]
            if is_moe:
                assert fr is not None and fg is not None
                yield "router", col, fr[:, ffn_ao][:, :, sel["router"]], True
                yield "group", col, fg[:, ffn_ao][:, :, sel["group"]], True
            else:
                assert fd is not None
                yield "dense", col, fd[:, ffn_ao][:, :, sel["dense"]], True
            if pt < 0:
                yield "emb", col, np.transpose(a_t[:, EMB_LAYOUT[sel["emb"]], :], (0, 2, 1)), True
                continue
            prev = "group" if st.types[pt][0] else "dense"
            o = tb.out[pt][:, ao][:, :, sel[prev]]            # [K, 27, nφ] layouts
            # a_t[k, o[k, h, j], h]: the next layer's hub time given this output layout (one
            # gather along the flattened (layout, hub) axis).
            val = np.take_along_axis(a_t.reshape(k, -1), (o * N_HUB + hi[None, :, None])
                                     .reshape(k, -1), axis=1).reshape(o.shape)
            yield prev, col, val, True


def _hub_lm(st: Structure, mt: MemTables, tabs: list[StepTables], lay: ZLayout
            ) -> tuple[np.ndarray, np.ndarray]:
    """The hub part ``[K, 27, F]`` and the LM-head part ``[K, 4, 3, F]`` of :class:`Parts`."""
    k = len(mt.ws)
    hub = np.zeros((k, N_HUB, lay.size))
    lm = np.zeros((k, N_LAYOUTS, NC, lay.size))
    for t in range(st.n_types):
        wcol = lay.w.start + t
        dw = mt.dW[t]
        hub[:, :, wcol] = (mt.W0[t][:, None] + dw[:, Op.QKV_PROJ][:, HUB_Q]
                           + dw[:, Op.ATTENTION][:, HUB_A] + dw[:, Op.O_PROJ][:, HUB_O])
        kv = mt.KV[t][:, HUB_A]
        hub[:, :, lay.kv.start + t] = np.where(HUB_A == DIM0, 0.0, kv)      # DIM0: sequences
        hub[:, :, lay.kv_seq.start + t] = np.where(HUB_A == DIM0, kv, 0.0)
    lm[:, :, :, lay.lw] = mt.LW[:, None, :]
    for si, tb in enumerate(tabs):
        lm[:, :, :, lay.lm if si == 0 else lay.lm2] = tb.LM
    return hub, lm


def _allowed(st: Structure, mt: MemTables) -> dict[str, np.ndarray]:
    """Per group, ``[K, n]`` whether each option breaks no structural (or engine) rule:
    ``hub``, ``emb``, ``dense``, ``router``, ``group``, ``lm``."""
    k = len(mt.ws)
    ok = mt.allowed
    out = {"hub": ok[:, Op.QKV_PROJ][:, HUB_Q] & ok[:, Op.ATTENTION][:, HUB_A]
           & ok[:, Op.O_PROJ][:, HUB_O],
           "emb": ok[:, Op.EMBEDDING],
           "dense": ok[:, Op.DENSE_UP][:, st.d_opts[:, 0]]
           & ok[:, Op.DENSE_DOWN][:, st.d_opts[:, 1]],
           "router": ok[:, Op.ROUTER][:, st.r_opts],
           "lm": ok[:, Op.LM_HEAD]}
    group_ok = np.ones((k, len(st.g_opts)), dtype=bool)
    for j, op in enumerate((Op.EXPERT_UP, Op.EXPERT_DOWN, Op.SHARED_EXPERT_UP,
                            Op.SHARED_EXPERT_DOWN)):
        group_ok &= ok[:, op][:, st.g_opts[:, j]]
    out["group"] = group_ok
    if st.engine_ok:
        out = {name: v & st.engine_ok[name] for name, v in out.items()}
    return out


def build_parts(st: Structure, mt: MemTables, tabs: list[StepTables]) -> Parts:
    """Assemble the per-group feature contributions from the tables.

    Args:
        st: structure.
        mt: memory tables (validity included).
        tabs: ``[main]`` or ``[main, ttft]`` step tables for the same keys.

    Returns:
        The :class:`Parts`.
    """
    lay = ZLayout(st.n_pairs, st.n_types, len(tabs) > 1)
    k = len(mt.ws)
    f = lay.size
    n_opt = {"emb": NC, "dense": len(st.d_opts), "router": len(st.r_opts),
             "group": len(st.g_opts)}
    arrays = {name: np.zeros((k, N_HUB, n, f)) for name, n in n_opt.items()}
    for name, col, val, add in _group_terms(st, mt, tabs, lay):
        if add:
            arrays[name][:, :, :, col] += val
        else:
            arrays[name][:, :, :, col] = val
    hub, lm = _hub_lm(st, mt, tabs, lay)
    ok = _allowed(st, mt)
    return Parts(layout=lay, hub=hub, hub_ok=ok["hub"], emb=arrays["emb"], emb_ok=ok["emb"],
                 dense=arrays["dense"], dense_ok=ok["dense"], router=arrays["router"],
                 router_ok=ok["router"], group=arrays["group"], group_ok=ok["group"],
                 lm=lm, lm_ok=ok["lm"], last_out=tabs[0].out[st.last_type],
                 last_dense=not st.types[st.last_type][0])


def _by_hub(a: np.ndarray) -> np.ndarray:
    """``a [K, 9, ...]`` (by ``(attention, o_proj)`` option) repeated over the 27 hubs; any
    other second axis (27, or 1 for hub-independent terms) unchanged."""
    return a[:, _HUB_AO] if a.shape[1] == N_AO else a


def feature_floor(st: Structure, mt: MemTables, tabs: list[StepTables]) -> np.ndarray:
    """``[K, 3, F]``: per attention choice, a component-wise lower bound on the features of
    every allowed candidate (hub plus each group's smallest allowed contribution, plus the
    LM head's smallest), infinite where the choice has no allowed hub.

    The same numbers as minimising :func:`build_parts`'s arrays over each group's allowed
    options, computed column by column from :func:`_group_terms` without building the
    ``[K, 27, n, F]`` arrays (the columns a group never writes are zero; a group with no
    allowed option is infinite everywhere).

    Args:
        st: structure.
        mt: memory tables (validity included).
        tabs: ``[main]`` or ``[main, ttft]`` step tables for the same keys.
    """
    lay = ZLayout(st.n_pairs, st.n_types, len(tabs) > 1)
    k = len(mt.ws)
    ok = _allowed(st, mt)
    # An option allowed at no key is never the minimum: its columns are not formed.
    opts = {name: np.flatnonzero(ok[name].any(axis=0)) for name in GROUPS}
    ok = {name: (v[:, opts[name]] if name in opts else v) for name, v in ok.items()}
    cols: dict[str, dict[int, np.ndarray]] = {name: {} for name in GROUPS}
    for name, col, val, add in _group_terms(st, mt, tabs, lay, opts, by_ao=True):
        acc = cols[name]
        if add and col in acc:                      # [K, 27, 9 or 1, n]: 9 by (a, o)
            prev = acc[col]
            if N_HUB in (prev.shape[1], val.shape[1]):  # a hub-resolved term: widen the other
                prev, val = _by_hub(prev), _by_hub(val)
            acc[col] = prev + val
        else:
            acc[col] = val
    hub, lm = _hub_lm(st, mt, tabs, lay)
    z = np.where(ok["hub"][:, :, None], hub, np.inf)
    for name in GROUPS:
        g_ok = ok[name]
        fl = np.empty((k, N_HUB, lay.size))
        fl[:] = np.where(g_ok.any(axis=1), 0.0, np.inf)[:, None, None]
        for col, val in cols[name].items() if g_ok.shape[1] else ():
            # hub-independent columns are minimised once, (a, o) ones once per option
            fl[:, :, col] = _by_hub(np.where(g_ok[:, None, :], val, np.inf).min(axis=2))
        z = z + fl
    lm_fl = np.where(ok["lm"][:, None, :, None], lm, np.inf).min(axis=(1, 2))   # [K, F]
    z = z + lm_fl[:, None, :]
    return np.stack([z[:, HUB_A == a].min(axis=1) for a in range(NC)], axis=1)


# ---------------------------------------------------------------------------------- evaluation
def evaluate_z(cm: CostModel, st: Structure, lay: ZLayout, pp_idx: int, co: Coarse,
               z: np.ndarray, emb_t: np.ndarray, ws: np.ndarray,
               emb_t2: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Objective, latencies, peak memory and feasibility of feature vectors at one pp.

    Maps ``z`` to per-stage-class totals and runs them through the cost model's own
    aggregation (:mod:`learn_to_shard.cost.aggregate`: pipeline, memory, limits, objective),
    the functions ``CostModel._run`` calls.

    Args:
        cm: the cost model.
        st: structure.
        lay: feature layout of ``z``.
        pp_idx: pipeline-degree index shared by every row.
        co: coarse rows; each array must broadcast against ``z.shape[:-1]``.
        z: ``[..., F]`` feature vectors.
        emb_t, ws: embedding time and workspace bytes (from the keys), broadcastable.
        emb_t2: embedding time of the serve TTFT step, if ``lay.step2``.

    Returns:
        Dict of arrays shaped ``z.shape[:-1]``: ``objective`` (0 if infeasible), ``raw``
        (tokens/s per device), ``tpot``, ``ttft``, ``peak``, ``feasible``.
    """
    wl = cm.workload
    cls = st.classes[pp_idx]
    assert cls is not None
    cnt, ntyp, first, last, mult = cls

    def stage_times(tx: np.ndarray, lm_t: np.ndarray, e_t: np.ndarray, host: np.ndarray,
                    p2p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = tx @ cnt.T + first * e_t[..., None] + last * lm_t[..., None] + host[..., None]
        return aggregate.pipeline_sums(t, p2p, co.pp, mult)

    sum_t, max_t = stage_times(z[..., lay.tx], z[..., lay.lm], emb_t, co.host, co.p2p)
    s2 = None
    if lay.step2:
        assert emb_t2 is not None
        s2, _ = stage_times(z[..., lay.tx2], z[..., lay.lm2], emb_t2, co.host2, co.p2p2)
    lat = aggregate.latency(wl, sum_t, max_t, co.m_mb, co.batch, co.share, co.replica_frac,
                            s2, co.chunk_steps, cm.config.frontend_time_s, co.queued,
                            cm.clients_per_device, cm.config.frontend_serial_s)
    peak = peak_z(st, lay, pp_idx, co, z, ws, kv_free(cm))
    feas = np.ones(np.shape(peak), dtype=bool)
    for broken in aggregate.limits_broken(wl, cm.usable_bytes, peak, lat.tpot_s,
                                          lat.ttft_s).values():
        feas = feas & ~broken
    raw = lat.tokens_per_s_per_device
    return {"objective": aggregate.objective(feas, raw), "raw": raw, "tpot": lat.tpot_s,
            "ttft": lat.ttft_s, "peak": peak, "feasible": feas}


def kv_free(cm: CostModel) -> float:
    """``CostModelConfig.kv_cache_free_fraction`` (1 where the config has none)."""
    return float(getattr(cm.config, "kv_cache_free_fraction", 1.0) or 1.0)


def peak_z(st: Structure, lay: ZLayout, pp_idx: int, co: Coarse, z: np.ndarray,
           ws: np.ndarray, kv_free: float = 1.0) -> np.ndarray:
    """Worst stage's per-device memory of feature vectors at one pp (``CostModel._run``).

    Args:
        st: structure.
        lay: feature layout.
        pp_idx: pipeline-degree index shared by every row.
        co: coarse rows (arrays broadcastable against ``z.shape[:-1]``).
        z: ``[..., F]`` feature vectors (only the memory columns are read).
        ws: workspace bytes, broadcastable.
        kv_free: the fraction of free memory the KV pool may take
            (``CostModelConfig.kv_cache_free_fraction``); KV bytes are divided by it.

    Returns:
        Bytes, shaped ``z.shape[:-1]``.
    """
    cls = st.classes[pp_idx]
    assert cls is not None
    _, ntyp, first, last, _ = cls
    w = z[..., lay.w] @ ntyp.T + first * z[..., lay.ew][..., None] \
        + last * (z[..., lay.lw] * co.lw_factor)[..., None]
    kv = (z[..., lay.kv] @ ntyp.T) * co.s_all[..., None] \
        + (z[..., lay.kv_seq] @ ntyp.T) * co.s_seq[..., None]
    return aggregate.stage_memory_bytes(w, kv, ws[..., None], kv_free).max(axis=-1)


# ---------------------------------------------------------------------------------- checking
def part_indices(st: Structure, dims: np.ndarray) -> dict[str, np.ndarray]:
    """Map per-operator choices ``[n, 12]`` to the option indices of each group.

    Operators irrelevant to the model (e.g. expert operators of a dense model) map to the
    group's only option; they change neither time, memory nor validity.

    Args:
        st: structure.
        dims: ``[n, 12]`` choices.

    Returns:
        Dict with ``hub, emb, dense, router, group, lm`` index arrays ``[n]``.
    """
    d = np.asarray(dims, dtype=np.int64)
    n = len(d)
    hub = (d[:, Op.QKV_PROJ] * NC + d[:, Op.ATTENTION]) * NC + d[:, Op.O_PROJ]
    dense = d[:, Op.DENSE_UP] * NC + d[:, Op.DENSE_DOWN] if st.has_dense else np.zeros(n, int)
    router = d[:, Op.ROUTER] if st.has_moe else np.zeros(n, int)
    if st.has_moe:
        group = d[:, Op.EXPERT_UP] * NC + d[:, Op.EXPERT_DOWN]
        if st.has_shared:
            group = (group * NC + d[:, Op.SHARED_EXPERT_UP]) * NC + d[:, Op.SHARED_EXPERT_DOWN]
    else:
        group = np.zeros(n, int)
    return {"hub": hub, "emb": d[:, Op.EMBEDDING], "dense": dense, "router": router,
            "group": group, "lm": d[:, Op.LM_HEAD]}


def assemble_z(pa: Parts, k: np.ndarray, ix: dict[str, np.ndarray]) -> np.ndarray:
    """Feature vectors ``[n, F]`` of the candidates (key ``k``, group option indices ``ix``).

    Args:
        pa: the parts of the keys.
        k: key index per candidate, ``[n]``.
        ix: option indices as returned by :func:`part_indices`.

    Returns:
        ``z`` as the sum of the group contributions.
    """
    h = ix["hub"]
    phi = ix["dense"] if pa.last_dense else ix["group"]
    ell = pa.last_out[k, h % N_AO, phi]
    return (pa.hub[k, h] + pa.emb[k, h, ix["emb"]] + pa.dense[k, h, ix["dense"]]
            + pa.router[k, h, ix["router"]] + pa.group[k, h, ix["group"]]
            + pa.lm[k, ell, ix["lm"]])


def candidate_ok(pa: Parts, k: np.ndarray, ix: dict[str, np.ndarray]) -> np.ndarray:
    """Whether each candidate's choices break no structural rule at its key's degrees."""
    return (pa.hub_ok[k, ix["hub"]] & pa.emb_ok[k, ix["emb"]] & pa.dense_ok[k, ix["dense"]]
            & pa.router_ok[k, ix["router"]] & pa.group_ok[k, ix["group"]]
            & pa.lm_ok[k, ix["lm"]])


def needs_step2(cm: CostModel) -> bool:
    """Whether the serve TTFT step must be priced (serve phase with a TTFT SLO)."""
    return cm.workload.phase is Phase.SERVE and cm.workload.ttft_slo_s is not None


def predict_many(cm: CostModel, actions: np.ndarray, st: Structure | None = None,
                 step2: bool | None = None) -> dict[str, np.ndarray]:
    """What the decomposition predicts for full action vectors (for checking it).

    Uses exactly the solver's path: tables, :func:`build_parts`, :func:`assemble_z`,
    :func:`evaluate_z`. With an engine, a layout it cannot launch is not priced
    (:func:`needed_options`): such a strategy's times come out infinite or NaN (an infinite
    layer time times a stage's zero count), its objective 0.

    Args:
        cm: the cost model.
        actions: ``[n, 17]`` action vectors.
        st: structure (built if omitted).
        step2: price the serve TTFT step (default: always in the serve phase).

    Returns:
        Dict of ``[n]`` arrays: ``valid`` (structure), ``objective`` (0 unless valid and
        feasible), ``raw``, ``tpot``, ``ttft``, ``peak``, ``feasible``.
    """
    st = st or Structure.of(cm)
    a = np.atleast_2d(np.asarray(actions, dtype=np.int64))
    n = len(a)
    if step2 is None:
        step2 = cm.workload.phase is Phase.SERVE
    neutral = a.copy()
    neutral[:, NUM_COARSE:] = REPLICATED
    coarse_ok = (cm.space.rule_bits_many(neutral) & ~ENGINE_LAYOUT_BIT) == 0
    out = {"valid": np.zeros(n, bool), "objective": np.zeros(n), "raw": np.full(n, np.nan),
           "tpot": np.full(n, np.nan), "ttft": np.full(n, np.nan),
           "peak": np.full(n, np.nan), "feasible": np.zeros(n, bool)}
    rows = np.flatnonzero(coarse_ok)
    if not len(rows):
        return out
    co, keys = coarse_terms(cm, a[rows, :NUM_COARSE])
    mt = mem_tables(cm, st, keys)
    tabs = [main_step_tables(cm, st, keys)]
    if step2:
        tabs.append(step_tables(cm, st, keys, second=True))
    pa = build_parts(st, mt, tabs)
    ix = part_indices(st, a[rows, NUM_COARSE:])
    z = assemble_z(pa, co.key, ix)
    ok = candidate_ok(pa, co.key, ix)
    for p in np.unique(co.pp_idx):
        sel = np.flatnonzero(co.pp_idx == p)
        c = co.take(sel)
        kk = c.key
        r = evaluate_z(cm, st, pa.layout, int(p), c, z[sel], tabs[0].emb_t[kk], mt.ws[kk],
                       tabs[1].emb_t[kk] if step2 else None)
        tgt = rows[sel]
        for name in ("raw", "tpot", "ttft", "peak"):
            out[name][tgt] = r[name]
        out["valid"][tgt] = ok[sel]
        out["feasible"][tgt] = r["feasible"] & ok[sel]
        out["objective"][tgt] = np.where(out["feasible"][tgt], r["raw"], 0.0)
    return out


class DecompositionError(InternalError):
    """The decomposition disagrees with ``CostModel.evaluate_many`` (the cost model changed in
    a way :mod:`learn_to_shard.search.exact_tables` does not follow): a bug, surfaced as such."""


def verify(cm: CostModel, n: int = 128, seed: int = 0, rel: float = 1e-9,
           st: Structure | None = None) -> int:
    """Check the decomposition against ``evaluate_many`` on random structurally valid degrees.

    Args:
        cm: the cost model.
        n: strategies to sample (coarse part uniform over structurally valid combinations,
            choices uniform; with an engine, uniform among the layouts it launches,
            :meth:`~learn_to_shard.parallel.space.StrategySpace.launchable`, the only ones
            its tables price: :func:`needed_options`).
        seed: RNG seed.
        rel: relative tolerance on TPOT/TTFT, peak memory and objective.
        st: structure (built if omitted).

    Returns:
        The number of strategies compared.

    Raises:
        DecompositionError: on any disagreement (the message names the strategy and values).
    """
    rng = np.random.default_rng(seed)
    sp = cm.space
    nvec = sp.nvec
    cand = sp.launchable(rng.integers(0, nvec, size=(8 * n, len(nvec))), rng)
    neutral = cand.copy()
    neutral[:, NUM_COARSE:] = REPLICATED
    cand = cand[(sp.rule_bits_many(neutral) & ~ENGINE_LAYOUT_BIT) == 0][:n]
    if not len(cand):
        return 0
    # The TTFT step is priced only where TTFT is checked below (or limits feasibility).
    pred = predict_many(cm, cand, st, step2=needs_step2(cm))
    ref = cm.evaluate_many(cand)
    valid_ref = (ref.violation_bits & ((1 << len(_rules())) - 1)) == 0

    def close(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        both_nan = np.isnan(x) & np.isnan(y)
        return both_nan | (np.abs(x - y) <= rel * np.maximum(np.abs(y), 1e-300))

    usable = cm.usable_bytes
    near = np.abs(ref.peak_memory_bytes - usable) <= rel * usable
    checks = {
        "structure": pred["valid"] == valid_ref,
        "tpot_s": close(pred["tpot"], ref.tpot_s),
        "peak_memory": close(pred["peak"], ref.peak_memory_bytes),
        "objective": close(pred["objective"], ref.objective) | near,
        "feasible": (pred["feasible"] == ref.feasible) | near,
    }
    if needs_step2(cm) or cm.workload.phase is Phase.PREFILL:
        checks["ttft_s"] = close(pred["ttft"], ref.ttft_s)
    for name, good in checks.items():
        if not good.all():
            i = int(np.flatnonzero(~good)[0])
            s = sp.decode(cand[i]).short()
            vals = {k: (pred[k][i] if k in pred else None) for k in ("tpot", "ttft", "peak",
                                                                      "objective")}
            raise DecompositionError(
                f"exact decomposition disagrees with evaluate_many on {name} for {s}: "
                f"predicted {vals}, cost model tpot={ref.tpot_s[i]!r} ttft={ref.ttft_s[i]!r} "
                f"peak={ref.peak_memory_bytes[i]!r} objective={ref.objective[i]!r}")
    return len(cand)


def _rules() -> tuple:
    from ..parallel.space import RULES

    return RULES
