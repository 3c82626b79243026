"""The strategy space: candidate values of each head, the integer action vector, validity rules.

Action vector (``A = 6 + 12`` integers, gymnasium ``MultiDiscrete``):
``[tp_idx, ep_idx, pp_idx, dp_idx, cp_idx, batch_idx, dim_0, ..., dim_11]`` — the paper's four
coarse heads (TP, EP, PP, batch; arXiv 2509.00217 §3) plus attention-DP and decode context
parallelism (``cp``: the KV cache of every sequence split by tokens over ``cp`` ranks of the TP
group), then one ``{0, 1, ∅}`` head per fused operator. Candidate degrees are powers of two and
divisors of the device count (so 6-GPU boxes get TP=2 × PP=3), capped by the model (heads,
experts, layers; ``cp`` by the TP degree over the KV heads).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from ..engines import (
    BLOCKS,
    EngineProfile,
    dp_ranks_fit_nodes,
    node_ranks_cover,
    servers_fit_nodes,
)
from ..engines.architectures import unsupported_degrees
from ..hardware.spec import ClusterSpec
from ..model.spec import ModelSpec
from .mesh import Mesh
from .ops import MEGATRON_DIMS, NUM_CHOICES, NUM_OPS, OP_NAMES, OPS, REPLICATED, OpDef, present_ops
from .strategy import Strategy

NUM_COARSE = 6
TP_HEAD, EP_HEAD, PP_HEAD, DP_HEAD, CP_HEAD, BATCH_HEAD = range(NUM_COARSE)
#: Names of the coarse heads, in action-vector order (the :class:`Strategy` fields they set).
COARSE_HEADS = ("tp", "ep", "pp", "dp", "cp", "batch")
ACTION_LEN = NUM_COARSE + NUM_OPS

#: Largest TP degree considered: beyond one NVL72-class scale-up domain TP is never useful.
MAX_TP = 64
#: Largest batch (sequences per instance) considered: 2**16.
MAX_BATCH_LOG2 = 16
#: Every batch up to this is a candidate; above it the grid has BATCH_STEPS_PER_OCTAVE values
#: per octave (see :func:`batch_grid`).
BATCH_DENSE_UPTO = 16
#: Geometric batch candidates per octave above BATCH_DENSE_UPTO: ``2^k · {1, 1.5}``.
BATCH_STEPS_PER_OCTAVE = 2

# Validity rules: (bit, name, explanation). Names are what users see.
RULES: tuple[tuple[str, str], ...] = (
    ("devices", "pp × tp × dp exceeds the cluster's device count"),
    ("heads", "a head-split operator needs num_attention_heads divisible by tp"),
    ("kv_heads", "head split needs num_key_value_heads divisible by tp, or tp a multiple of it "
     "(KV-head replication)"),
    ("hidden", "an operator split on the hidden dim needs hidden_size divisible by its group"),
    ("ffn", "an FFN split on its intermediate dim needs intermediate_size divisible by its group"),
    ("experts", "ep must divide the number of routed experts (and be 1 for dense models)"),
    ("ep_group", "ep must divide the stage group tp × dp (moe_tp × moe_ep = tp × attention_dp)"),
    ("layers", "pp cannot exceed the number of layers"),
    ("batch", "batch must be a multiple of dp"),
    ("router", "a router split on its expert dim needs num_experts divisible by tp"),
    ("quant_block",
     "every sharded dim of a block-quantised weight must be a multiple of its block"),
    ("vocab", "a vocabulary split (embedding Shard(0), lm_head Shard(1)) needs the vocabulary, "
     "padded to the engine's multiple (vLLM/SGLang: 64), divisible by tp"),
    ("quant_group",
     "an input-dim (row-parallel) shard of a group-quantised weight must hold whole scale "
     "groups (GPTQ/AWQ/compressed-tensors group_size, NVFP4 16), and INT4 Marlin kernels need "
     "every shard's K % 128 == 0 and N % 64 == 0"),
    ("concurrency", "batch above what one replica can receive, ceil(--concurrency / replicas) "
     "with replicas = devices // (pp × tp × dp)"),
    ("engine_degrees", "the engine cannot launch these degrees (vLLM: ep is 1 or tp × dp; "
     "SGLang over several nodes: every stage started by its per-node rank ranges, on nodes "
     "the cluster has with the devices each runs; "
     "TensorRT-LLM: attention-DP covers the whole group, tp == 1 or dp == 1; SGLang's "
     "implementation of the model's class: no pp > 1 for a class without pipeline "
     "parallelism, e.g. Gemma 2/3, and no attention-DP, dp > 1 of a MoE server, for a class "
     "not written for it, e.g. Mixtral, PhiMoE, or whose dense MLP layers never replicate, "
     "Llama-4 Maverick), or would place "
     "them on other links than priced (vLLM's DP-outermost ranks with pp > 1 and dp > 1 "
     "over several nodes, TensorRT-LLM's EP-innermost ranks with 1 < ep < tp on a stage "
     "across nodes, SGLang's even split of a server over its nodes)"),
    ("engine_layout", "the engine's kernels do not implement this per-operator layout "
     "(engines run Megatron's layout plus the variants their profile lists)"),
    ("context_parallel", "cp must divide tp and be at most tp / num_key_value_heads (MLA: tp): "
     "decode context parallelism shards the KV cache by tokens over the ranks that would "
     "otherwise hold the same KV heads (vLLM --decode-context-parallel-size)"),
    ("engine_dense_adp", "under attention-DP with attention TP > 1 the engine runs a MoE "
     "model's dense MLP layers replicated (SGLang --moe-dense-tp-size 1) or over the whole "
     "TP group with the DP ranks' rows gathered, never split within the attention-TP group "
     "as Megatron's layout prices them: only Replicate() is launchable there"),
)
RULE_BIT = {name: 1 << i for i, (name, _) in enumerate(RULES)}
#: The one rule that depends on several operators' choices jointly (per block, see
#: :data:`learn_to_shard.engines.BLOCKS`); every other choice-dependent rule is a disjunction
#: over single operators that ``Replicate()`` never breaks. Searchers that reason per operator
#: (``search.exact``) apply it per block with :meth:`StrategySpace.block_ok` instead.
ENGINE_LAYOUT_BIT = RULE_BIT["engine_layout"]


#: Clusters of at most this many devices whose size is not a power of two take every integer
#: degree up to their size (TP, PP, DP and the EP degrees that divide the experts): there one
#: idle device is 12% or more of the cluster, and layouts of 3, 5 or 6 devices fill it where
#: powers of two and the cluster's divisors cannot (7 GPUs: TP2 x PP3 on 6 of them, +25% over
#: the best layout of those; or TP5, +11%). A power-of-two cluster is tiled by powers of two
#: already, and the larger budgeted searches of its wider space (every degree on 8 GPUs)
#: found fewer feasible strategies in the same evaluations. Larger clusters keep powers of
#: two and their size's divisors: every integer up to 16 made the exact search of a 16-GPU
#: MoE plan 10-16x slower (``bench/plan_speed.py``: DeepSeek-V3 on 16 H200s 2.7 s -> 45 s),
#: where one idle device is a smaller share.
ALL_DEGREES_UPTO = 8


def _candidates(limit: int, n_devices: int) -> tuple[int, ...]:
    """Powers of two and divisors of ``n_devices``, all ``<= limit`` (at least ``(1,)``); on a
    cluster of at most :data:`ALL_DEGREES_UPTO` devices that is not a power of two, every
    integer ``1 … limit``."""
    if n_devices <= ALL_DEGREES_UPTO and n_devices & (n_devices - 1):
        return tuple(range(1, max(1, min(limit, n_devices)) + 1))
    vals = {1 << i for i in range(0, 31) if (1 << i) <= limit}
    vals |= {d for d in range(1, min(limit, n_devices) + 1) if n_devices % d == 0}
    return tuple(sorted(v for v in vals if v <= limit))


def batch_grid(dp_values: tuple[int, ...] = (1,), max_log2: int = MAX_BATCH_LOG2,
               dense_upto: int = BATCH_DENSE_UPTO,
               steps_per_octave: int = BATCH_STEPS_PER_OCTAVE) -> tuple[int, ...]:
    """The batch head's candidates (sequences per instance), sorted.

    Every integer ``1 … dense_upto``; above, ``steps_per_octave`` geometric values per octave
    (by default ``2^k`` and ``1.5 · 2^k``: steps of at most 50 %); and ``o · 2^k`` for the
    odd part ``o`` of every DP candidate, so that every DP degree has candidates that are
    multiples of it in every octave (the ``batch`` rule). All ``≤ 2^max_log2``. The exact
    searcher certifies its optimum over *every* integer batch ``1 … 2^max_log2``, not only
    these (:func:`learn_to_shard.search.exact.solve_any_batch`); the grid is what the
    budgeted searchers' batch head samples and enumerates.

    Args:
        dp_values: the DP candidates (their odd parts add multiples).
        max_log2: the largest batch is ``2**max_log2``.
        dense_upto: every integer up to this is a candidate.
        steps_per_octave: geometric candidates per octave above ``dense_upto`` (>= 1).
    """
    top = 1 << max_log2
    vals = set(range(1, min(dense_upto, top) + 1))
    k = max(dense_upto.bit_length() - 1, 0)
    while (1 << k) <= top:
        for j in range(steps_per_octave):
            vals.add(round((1 << k) * (1 + j / steps_per_octave)))
        k += 1
    for d in dp_values:
        odd = d
        while odd and odd % 2 == 0:
            odd //= 2
        v = odd
        while odd > 1 and v <= top:
            vals.add(v)
            v *= 2
    return tuple(sorted(v for v in vals if v <= top))


def dp_outer_differs(tp: np.ndarray | int, dp: np.ndarray | int, pp: np.ndarray | int,
                     domain: int) -> np.ndarray:
    """``[n]`` bool: MoE servers that vLLM's DP-outermost rank order (``dp × pp × tp``,
    ``engines.EngineProfile.dp_outer_ranks``) places on other links than the mesh's
    PP-outermost one: ``pp > 1`` and ``dp > 1`` over more than one scale-up domain of
    ``domain`` devices, unless each TP group is whole domains (``tp`` a multiple of the
    domain), where every group and hop lands alike in both."""
    tp, dp, pp = (np.asarray(a, dtype=np.int64) for a in (tp, dp, pp))
    return (pp > 1) & (dp > 1) & (tp * pp * dp > domain) & (tp % domain != 0)


def ep_inner_differs(group: np.ndarray | int, ep: np.ndarray | int, mesh: Mesh) -> np.ndarray:
    """``[n]`` bool: MoE stages of ``group`` ranks that TensorRT-LLM's EP-innermost order
    (``engines.EngineProfile.ep_inner_ranks``) places on other links than the mesh's
    expert-TP-innermost one: ``1 < ep < group`` on a stage that crosses a node boundary
    somewhere in the cluster (:meth:`Mesh.in_node` of the stage: wider than a domain, or
    straddling one, as stages of 6 laid back to back on nodes of 8 do)."""
    g, e = np.asarray(group, dtype=np.int64), np.asarray(ep, dtype=np.int64)
    return (e > 1) & (e < g) & ~mesh.in_node(g)


def even_split_differs(tp: np.ndarray | list[int], ep: np.ndarray | list[int],
                       pp: np.ndarray | list[int], group: np.ndarray | list[int],
                       host_devices: int, domain: int, moe: bool) -> np.ndarray:
    """``[n]`` bool: servers whose links differ between SGLang's placement and the mesh's.

    SGLang runs the same number of a server's ranks on each of its ``nnodes = ceil(world /
    host_devices)`` nodes (rank ranges of ``world / nnodes``: sgl-project/sglang v0.5.23
    ``sglang/srt/entrypoints/engine.py`` ``_calculate_rank_ranges``; ``world = group × pp``,
    ``group`` its ``--tp-size``), where :class:`~learn_to_shard.parallel.mesh.Mesh` fills each
    scale-up domain of ``domain`` devices first. The two agree for a server inside one domain
    or over whole domains; otherwise (non-power-of-two degrees: TP2 × attention-DP3 × PP3 on
    24 GPUs runs 6 + 6 + 6, one stage per node, where the mesh's 8 + 8 + 2 straddles two
    stages) this compares, per distinct layout, whether the TP groups, a MoE stage's
    expert groups (its all-to-all and expert TP) and the pipeline hops stay inside a node
    under each, and says where any differs: the price would be another placement's.
    """
    tp, ep, pp = (np.asarray(a, dtype=np.int64) for a in (tp, ep, pp))
    group = np.asarray(group, dtype=np.int64)
    world = group * pp
    out = np.zeros(len(tp), dtype=bool)
    cand = (world > domain) & (world % domain != 0)
    if not cand.any():
        return out
    rows = np.flatnonzero(cand)
    keys = np.stack([tp[rows], ep[rows], pp[rows], group[rows]], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    differs = np.zeros(len(uniq), dtype=bool)
    for i, (t, e, p, g) in enumerate(uniq.tolist()):
        w = g * p
        nnodes = -(-w // max(host_devices, 1))
        if w % nnodes:
            continue                           # node_ranks_cover refuses it already
        # SGLang's share of each host; a domain of several hosts (GB200 NVL72's) holds
        # domain // host of them
        fill = Mesh(w, domain)
        even = Mesh(w, (w // nnodes) * max(domain // max(host_devices, 1), 1))
        extents = [t] + ([g, max(g // max(e, 1), 1)] if moe else [])
        ext = np.array(extents)
        differs[i] = bool(
            (fill.in_node(ext) != even.in_node(ext)).any()
            or (moe and fill.local_ranks(np.array([g]))[0] != even.local_ranks(
                np.array([g]))[0])
            or fill.hop_crossings(np.array([g]), np.array([p]))[0]
            != even.hop_crossings(np.array([g]), np.array([p]))[0])
    out[rows] = differs[inv.reshape(-1)]
    return out


@dataclass(frozen=True)
class StrategySpace:
    """Candidate values per head for one (model, cluster) pair, and the validity rules.

    Attributes:
        model: the model.
        cluster: the cluster.
        tp_values, ep_values, pp_values, dp_values, batch_values: candidate values per head.
        max_concurrency: closed-loop clients across the cluster (``Workload.concurrency``), or
            ``None``; a batch above ``ceil(max_concurrency / replicas)`` breaks the
            ``concurrency`` rule.
        vocab_multiple: the engine pads the vocabulary to a multiple of this and then splits
            it evenly, so a vocabulary split needs the padded size divisible by ``tp`` (vLLM
            and SGLang ``VocabParallelEmbedding``: ``pad_vocab_size(vocab, 64)`` then
            ``divide(padded, tp)`` asserts; FC-07). 0: the engine pads to a multiple of the
            group itself (TensorRT-LLM ``pad_vocab_size(vocab, tp_size)``), no rule.
        engine: restrict the space to what this serving engine can launch (rules
            ``engine_degrees`` and ``engine_layout``); ``None``: every strategy.
        any_batch: the batch may be any integer ``1 … max(batch_values)``; ``batch_values``
            is then the grid the budgeted searchers sample, and the exact searcher certifies
            over every integer (set by :meth:`build` when no ``batch_values`` are given). False:
            the batch is one of ``batch_values`` exactly.
        cp_values: decode context-parallel candidates (:meth:`build`: the TP candidates up to
            ``max(tp) / num_key_value_heads``; ``(1,)``: no context parallelism). A ``cp``
            needs ``tp`` a multiple of ``cp · num_key_value_heads`` (the ``context_parallel``
            rule).
    """

    model: ModelSpec
    cluster: ClusterSpec
    tp_values: tuple[int, ...]
    ep_values: tuple[int, ...]
    pp_values: tuple[int, ...]
    dp_values: tuple[int, ...]
    batch_values: tuple[int, ...]
    vocab_multiple: int = 64
    max_concurrency: int | None = None
    engine: EngineProfile | None = None
    any_batch: bool = False
    cp_values: tuple[int, ...] = (1,)

    @classmethod
    def build(cls, model: ModelSpec, cluster: ClusterSpec,
              batch_values: tuple[int, ...] | None = None,
              vocab_multiple: int = 64, engine: EngineProfile | None = None) -> StrategySpace:
        """Candidate lists for ``model`` on ``cluster``.

        Args:
            model: the model.
            cluster: the cluster (its device count bounds every degree).
            batch_values: override the batch candidates (default :func:`batch_grid`).
            vocab_multiple: the engine's vocabulary padding rule (see the attribute).
            engine: restrict to what this engine can launch (see the attribute); its
                ``vocab_multiple`` then replaces the argument.
        """
        if engine is not None:
            vocab_multiple = engine.vocab_multiple
        n = cluster.num_devices
        tp = _candidates(min(MAX_TP, n), n)
        if model.is_moe and model.moe is not None:
            e = model.moe.num_experts
            ep = tuple(v for v in _candidates(min(e, n), n) if e % v == 0)
        else:
            ep = (1,)
        pp = _candidates(min(model.num_layers, n), n)
        dp = _candidates(n, n)
        batch = batch_values or batch_grid(dp)
        cp_max = max(tp) // max(model.attention.num_kv_heads, 1)
        if engine is not None and not engine.decode_context_parallel:
            cp_max = 1
        cp = tuple(v for v in tp if v <= cp_max) or (1,)
        return cls(model, cluster, tp, ep, pp, dp, tuple(batch), vocab_multiple, engine=engine,
                   any_batch=not batch_values, cp_values=cp)

    def with_batches(self, extra: tuple[int, ...] | list[int]) -> StrategySpace:
        """This space with the batches ``extra`` added to the batch candidates (sorted union;
        the other heads unchanged). Batch indices of action vectors shift: re-encode them."""
        merged = tuple(sorted(set(self.batch_values) | {int(b) for b in extra}))
        return dataclasses.replace(self, batch_values=merged)

    # ---------------------------------------------------------------- encoding
    @property
    def nvec(self) -> np.ndarray:
        """Number of choices per action component, shape ``[ACTION_LEN]`` (MultiDiscrete)."""
        coarse = [len(self.tp_values), len(self.ep_values), len(self.pp_values),
                  len(self.dp_values), len(self.cp_values), len(self.batch_values)]
        return np.array(coarse + [NUM_CHOICES] * NUM_OPS, dtype=np.int64)

    @property
    def size(self) -> int:
        """Number of distinct action vectors (product of ``nvec``)."""
        return int(np.prod(self.nvec.astype(object)))

    def encode(self, s: Strategy) -> np.ndarray:
        """Strategy -> action vector ``[ACTION_LEN]`` of indices.

        Raises:
            ValueError: if a degree or the batch is not among this space's candidates.
        """
        why = {"tp": "powers of two and divisors of the device count, up to 64",
               "ep": "powers of two and divisors of the device count that divide the "
                     "routed experts; 1 for dense models",
               "pp": "powers of two and divisors of the device count, up to the layers",
               "dp": "powers of two and divisors of the device count",
               "cp": "TP candidates up to the largest tp over the KV heads",
               "batch": "the space's batch candidates"}
        coarse = []
        for head, values in (("tp", self.tp_values), ("ep", self.ep_values),
                             ("pp", self.pp_values), ("dp", self.dp_values),
                             ("cp", self.cp_values), ("batch", self.batch_values)):
            v = getattr(s, head)
            if v not in values:
                shown = ", ".join(map(str, values[:12])) + (", …" if len(values) > 12 else "")
                raise ValueError(f"{s.short()}: {head}={v} is not a candidate of this "
                                 f"strategy space ({why[head]}: {shown})")
            coarse.append(values.index(v))
        return np.array(coarse + list(s.dims), dtype=np.int64)

    def decode(self, action: np.ndarray) -> Strategy:
        """Action vector -> Strategy (indices are clipped to the head sizes)."""
        a = np.asarray(action, dtype=np.int64)
        return Strategy(tp=self.tp_values[int(a[TP_HEAD])], ep=self.ep_values[int(a[EP_HEAD])],
                        pp=self.pp_values[int(a[PP_HEAD])], dp=self.dp_values[int(a[DP_HEAD])],
                        batch=self.batch_values[int(a[BATCH_HEAD])],
                        dims=tuple(int(d) for d in a[NUM_COARSE:]),
                        cp=self.cp_values[int(a[CP_HEAD])])

    def degrees_many(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        """Vectorised decode of the coarse heads: arrays ``tp, ep, pp, dp, cp, batch``,
        ``[n]``."""
        a = np.asarray(actions, dtype=np.int64)
        return {
            "tp": np.asarray(self.tp_values, dtype=np.int64)[a[:, TP_HEAD]],
            "ep": np.asarray(self.ep_values, dtype=np.int64)[a[:, EP_HEAD]],
            "pp": np.asarray(self.pp_values, dtype=np.int64)[a[:, PP_HEAD]],
            "dp": np.asarray(self.dp_values, dtype=np.int64)[a[:, DP_HEAD]],
            "cp": np.asarray(self.cp_values, dtype=np.int64)[a[:, CP_HEAD]],
            "batch": np.asarray(self.batch_values, dtype=np.int64)[a[:, BATCH_HEAD]],
        }

    # ---------------------------------------------------------------- validity
    def rule_bits_many(self, actions: np.ndarray) -> np.ndarray:
        """Structural validity of many action vectors.

        Args:
            actions: ``[n, ACTION_LEN]`` integer array.

        Returns:
            ``[n]`` int64 bit-set of broken rules (``RULE_BIT``); 0 means structurally valid.
            Memory and SLOs are the cost model's business, not this.
        """
        a = np.asarray(actions, dtype=np.int64)
        d = self.degrees_many(a)
        tp, ep, pp, dp, batch = d["tp"], d["ep"], d["pp"], d["dp"], d["batch"]
        dims = a[:, NUM_COARSE:]
        m = self.model
        axes = Mesh.axes(tp, ep, pp, dp)
        g, etp = axes.stage, axes.etp
        bits = np.zeros(len(a), dtype=np.int64)

        def flag(name: str, broken: np.ndarray) -> None:
            nonlocal bits
            bits = bits | np.where(broken, RULE_BIT[name], 0)

        flag("devices", tp * dp * pp > self.cluster.num_devices)
        # Per-operator divisibility rules (ops.OPS: ChoiceDef.needs): for each (rule, size,
        # axis) the choices that need it, then one divisibility test over the group.
        for (rule, size, axis, multiple_ok), mask in self._needs(dims).items():
            grp = axes.extent(axis)
            ok = (size % grp) == 0
            if multiple_ok:
                ok |= (grp % size) == 0
            flag(rule, (grp > 1) & mask & ~ok)
        moe = m.moe
        if m.is_moe and moe is not None:
            flag("experts", (moe.num_experts % ep) != 0)
            flag("ep_group", (g % ep) != 0)
        else:
            flag("experts", ep != 1)
        flag("layers", pp > m.num_layers)
        flag("batch", (batch % dp) != 0)
        flag("context_parallel", ~self.cp_ok(tp, d["cp"]))
        if self.max_concurrency is not None:
            replicas = np.maximum(self.cluster.num_devices // np.maximum(tp * dp * pp, 1), 1)
            flag("concurrency", batch > -(-self.max_concurrency // replicas))
        if m.weight_block_size is not None:
            flag("quant_block", self._quant_block_bad(dims, tp, etp))
        quant = m.quant
        if quant is not None and (quant.group_size is not None or quant.packed) \
                and quant.method != "mxfp4":
            flag("quant_group", self._quant_group_bad(dims, tp, etp))
        if self.engine is not None:
            flag("engine_degrees", self._engine_degrees_bad(tp, ep, dp, pp))
            ok = np.ones(len(a), dtype=bool)
            for block, ops in BLOCKS.items():
                cols = [OP_NAMES.index(o) for o in ops]
                ok &= self.block_ok(block, dims[:, cols])
            flag("engine_layout", ~ok)
            if self.engine.replicates_dense_under_adp(m.is_moe, m.has_dense_ffn):
                cols = [OP_NAMES.index(o) for o in BLOCKS["dense"]]
                split = (dims[:, cols] != REPLICATED).any(axis=1)
                flag("engine_dense_adp", split & (tp > 1) & (dp > 1))
        return bits

    def engine_refused_degrees(self) -> int:
        """How many degree combinations (tp, ep, pp, dp; Megatron's layout, the smallest
        batch each allows, cp 1) only the engine's degree rules (``engine_degrees``) refuse:
        0 without an engine. What a plan with nothing feasible under an engine says was
        left out, e.g. SGLang's multi-node layouts on a cluster whose nodes hold none."""
        if self.engine is None:
            return 0
        grids = np.meshgrid(*(np.arange(len(v)) for v in (self.tp_values, self.ep_values,
                                                           self.pp_values, self.dp_values)),
                            indexing="ij")
        a = np.zeros((grids[0].size, len(self.nvec)), dtype=np.int64)
        for head, g in zip((TP_HEAD, EP_HEAD, PP_HEAD, DP_HEAD), grids, strict=True):
            a[:, head] = g.ravel()
        dp = np.asarray(self.dp_values, dtype=np.int64)[a[:, DP_HEAD]]
        batches = np.asarray(self.batch_values, dtype=np.int64)
        # the smallest batch that is a multiple of dp (the batch rule), else the largest
        a[:, BATCH_HEAD] = np.argmax(batches[None, :] % dp[:, None] == 0, axis=1)
        a[:, CP_HEAD] = int(np.argmin(self.cp_values))
        a[:, NUM_COARSE:] = np.asarray(MEGATRON_DIMS, dtype=np.int64)
        bits = self.rule_bits_many(a) & ~RULE_BIT["engine_layout"]
        return int(np.count_nonzero(bits == RULE_BIT["engine_degrees"]))

    def cp_ok(self, tp: np.ndarray, cp: np.ndarray) -> np.ndarray:
        """Whether each ``(tp, cp)`` pair meets the ``context_parallel`` rule (broadcast, bool):
        ``cp = 1``, or ``tp`` a multiple of ``cp · num_key_value_heads`` (vLLM's decode
        context parallelism: ``cp`` divides ``tp`` and is at most ``tp / num_kv_heads``)."""
        kv = max(self.model.attention.num_kv_heads, 1)
        tp, cp = np.asarray(tp, dtype=np.int64), np.asarray(cp, dtype=np.int64)
        return (cp == 1) | ((tp % (cp * kv)) == 0)

    def _engine_degrees_bad(self, tp: np.ndarray, ep: np.ndarray,
                            dp: np.ndarray, pp: np.ndarray) -> np.ndarray:
        """``[n]`` bool: degrees the space's engine cannot launch (its profile's
        ``ep_full_or_none``, ``ep_whole_group``, ``adp_all_or_none``, ``node_rank_ranges``,
        over one server's ``tp × dp`` ranks per stage of a MoE model, ``tp`` of a dense one,
        whose DP ranks are separate servers, and ``dp_ranks_in_nodes``, ``dp_outer_ranks``
        and ``ep_inner_ranks``, over a MoE server's ranks), the degrees the engine's
        implementation of the model's class cannot run
        (:func:`~learn_to_shard.engines.architectures.unsupported_degrees`: ``pp > 1``, and
        ``dp > 1`` of a MoE server, or of one with dense MLP layers), and, for every engine,
        servers
        that do not fit the cluster's node boundaries, each inside a node or on nodes of its own
        (:func:`~learn_to_shard.engines.servers_fit_nodes`); sources in
        :mod:`learn_to_shard.engines`."""
        eng = self.engine
        assert eng is not None
        bad = np.zeros(len(tp), dtype=bool)
        n = self.cluster.num_devices
        dev = self.cluster.device
        moe = self.model.is_moe
        # a MoE instance is one server; a dense one's DP ranks are servers of their own
        servers = (n // np.maximum(tp * dp * pp, 1)) * (1 if moe else dp)
        if eng.node_rank_ranges:
            group = tp * dp if moe else tp
            bad |= ~node_ranks_cover(group, pp, min(dev.host_devices, n), n, servers)
            bad |= even_split_differs(tp, ep, pp, group, min(dev.host_devices, n),
                                      self.cluster.devices_per_node, moe)
        # Every engine: servers keep to node boundaries (an NVLink domain of several hosts,
        # GB200 NVL72's, where the devices have one).
        unit = dev.scale_up_domain if dev.devices_per_host is not None else dev.host_devices
        bad |= ~servers_fit_nodes(tp * pp * (dp if moe else 1), servers, min(unit, n), n)
        if eng.dp_ranks_in_nodes and moe:
            bad |= ~dp_ranks_fit_nodes(tp * pp, dp, min(dev.host_devices, n), n)
        if eng.dp_outer_ranks and moe:
            bad |= dp_outer_differs(tp, dp, pp, self.cluster.devices_per_node)
        if eng.ep_inner_ranks and moe:
            bad |= ep_inner_differs(tp * dp, ep, Mesh(n, self.cluster.devices_per_node))
        if eng.ep_full_or_none and self.model.is_moe:
            bad |= (ep != 1) & (ep != tp * dp)
        if eng.ep_whole_group and self.model.is_moe:
            bad |= ep != tp * dp
        if eng.adp_all_or_none:
            bad |= (tp > 1) & (dp > 1)
        # What the engine's implementation of this model class runs (its pinned snapshot).
        cannot = unsupported_degrees(eng.name, self.model.config_architecture)
        if "pp" in cannot:
            bad |= pp > 1
        if "attention_dp" in cannot and moe:
            bad |= dp > 1
        if "attention_dp_dense" in cannot and moe and self.model.has_dense_ffn:
            bad |= dp > 1
        return bad

    def block_present(self, block: str) -> bool:
        """Whether the model has the operators of ``block`` (a key of ``engines.BLOCKS``);
        absent ones are ignored by the layout rule, as by :func:`active_heads`."""
        return any(od.present(self.model) for od in OPS if od.block == block)

    def block_ok(self, block: str, choices: np.ndarray) -> np.ndarray:
        """Whether the engine implements each row of choices of one operator block.

        Args:
            block: a key of :data:`learn_to_shard.engines.BLOCKS`.
            choices: ``[n, len(BLOCKS[block])]`` choice codes, in the block's operator order.

        Returns:
            ``[n]`` bool; all True without an engine or for a block the model lacks.
        """
        c = np.asarray(choices, dtype=np.int64).reshape(len(choices), -1)
        if self.engine is None or not self.block_present(block):
            return np.ones(len(c), dtype=bool)
        ok = np.zeros(len(c), dtype=bool)
        for tup in self.engine.allowed(block):
            ok |= (c == np.asarray(tup, dtype=np.int64)).all(axis=1)
        return ok

    @functools.cached_property
    def _need_table(self) -> tuple[tuple[tuple[str, int, str, bool],
                                         tuple[tuple[int, int], ...]], ...]:
        """Per divisibility rule ``(rule, size, axis, multiple_ok)``, the ``(operator, choice)``
        pairs whose :class:`~learn_to_shard.parallel.ops.Need` names it, over the model's
        operators (sizes from the model and this space's vocabulary multiple; rules that do not
        apply to the model are left out). Fixed for the space, so built once."""
        out: dict[tuple[str, int, str, bool], list[tuple[int, int]]] = {}
        for od in present_ops(self.model):
            for ch in od.choices:
                for need in ch.needs:
                    size = need.size(self.model, self.vocab_multiple)
                    if size is not None:
                        key = (need.rule, size, od.axis, need.multiple_ok)
                        out.setdefault(key, []).append((int(od.op), int(ch.choice)))
        return tuple((key, tuple(pairs)) for key, pairs in out.items())

    def _needs(self, dims: np.ndarray) -> dict[tuple[str, int, str, bool], np.ndarray]:
        """Which rows need each divisibility rule of :attr:`_need_table`, ``[n]`` bool each."""
        out: dict[tuple[str, int, str, bool], np.ndarray] = {}
        for key, pairs in self._need_table:
            mask = dims[:, pairs[0][0]] == pairs[0][1]
            for op, choice in pairs[1:]:
                mask |= dims[:, op] == choice
            out[key] = mask
        return out

    def _split_dims(self, dims: np.ndarray, tp: np.ndarray, etp: np.ndarray, *,
                    experts_only: bool = False
                    ) -> list[tuple[np.ndarray, int, np.ndarray, bool]]:
        """Every (is-split mask, full size, group, is-K) of the sharded weight dims of the
        checkpoint's quantised operators (``OpDef.quantised``; ``experts_only``: the routed
        experts alone), from each choice's :class:`~learn_to_shard.parallel.ops.WeightShard`.

        ``is-K`` marks a split of a weight's input dim (row parallel); the others split output
        columns. GQA ``qkv_proj`` column splits are checked per projection (q: heads·d, k/v:
        KV heads·d, replicated when the KV heads do not divide the group).
        """
        m = self.model
        group = {"tp": tp, "etp": etp}
        out: list[tuple[np.ndarray, int, np.ndarray, bool]] = []
        for od in present_ops(m):
            if not od.quantised or (experts_only and od.block != "experts"):
                continue
            grp = group[od.axis]
            col = dims[:, int(od.op)]
            for ch in od.choices:
                for sh in ch.shards(m):
                    mask = col == int(ch.choice)
                    if sh.only_if_divides is not None:
                        mask = mask & ((sh.only_if_divides(m) % np.maximum(grp, 1)) == 0)
                    out.append((mask, sh.size(m), grp, sh.is_k))
        return out

    def _quant_group_bad(self, dims: np.ndarray, tp: np.ndarray, etp: np.ndarray
                         ) -> np.ndarray:
        """Group-quantised checkpoints: each K shard holds whole groups (vLLM
        ``gptq_marlin.py`` / ``awq_marlin.py`` and ModelOpt NVFP4 ``create_weights``:
        ``input_size_per_partition % group_size``); INT4 and INT8 Marlin kernels also need
        ``K_shard % 128`` and ``N_shard % 64`` (vLLM ``marlin_utils.py``
        ``GPTQ_MARLIN_MIN_THREAD_K = 128``, ``GPTQ_MARLIN_MIN_THREAD_N = 64``,
        ``check_marlin_supports_shape``)."""
        q = self.model.quant
        assert q is not None
        marlin = not q.fp4 and q.packed
        out = np.zeros(len(dims), dtype=bool)
        for mask, size, t, is_k in self._split_dims(dims, tp, etp,
                                                    experts_only=q.experts_only):
            tt = np.maximum(t, 1)
            loc = size // tt
            bad = (size % tt) != 0
            if is_k and q.group_size is not None:
                bad |= (loc % q.group_size) != 0
            if marlin:
                bad |= (loc % (128 if is_k else 64)) != 0
            out |= mask & (t > 1) & bad
        return out

    def _quant_block_bad(self, dims: np.ndarray, tp: np.ndarray, etp: np.ndarray) -> np.ndarray:
        """Block-quantised checkpoints (DeepSeek / Qwen3 / MiniMax FP8, 128×128), any family:
        each sharded weight dim divided by its group must stay a multiple of the block
        (vLLM ``fp8.py`` ``validate_fp8_block_shape``: output and input partition sizes
        divisible by ``weight_block_size``; SGLang issue 3345, FC-09). E.g. Qwen3-30B-A3B-FP8
        expert width 768 over 8 ranks = 96 columns is refused."""
        m = self.model
        assert m.weight_block_size is not None
        blk_n, blk_k = m.weight_block_size
        out = np.zeros(len(dims), dtype=bool)
        for mask, size, t, is_k in self._split_dims(dims, tp, etp):
            tt = np.maximum(t, 1)
            blk = blk_k if is_k else blk_n
            bad = ((size % tt) != 0) | (((size // tt) % blk) != 0)
            out |= mask & (t > 1) & bad
        return out

    def violations(self, s: Strategy | np.ndarray) -> tuple[str, ...]:
        """Names and explanations of the structural rules ``s`` breaks (empty if valid)."""
        a = self.encode(s) if isinstance(s, Strategy) else np.asarray(s, dtype=np.int64)
        bits = int(self.rule_bits_many(a[None, :])[0])
        return tuple(f"{name}: {text}" for name, text in RULES if bits & RULE_BIT[name])

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` uniform action vectors, ``[n, ACTION_LEN]`` (the paper's random walk draws).

        With an engine, each operator block the model has takes one of the layouts the engine
        implements (:meth:`EngineProfile.allowed`), uniformly: the engine's space is those
        layouts, and a uniform draw over all ``3^12`` choices would almost never hit one (the
        ``engine_layout`` rule), leaving the budgeted searchers with nothing launchable. The
        draw over the coarse heads, and without an engine the whole draw, is unchanged.
        """
        a = rng.integers(0, self.nvec, size=(n, ACTION_LEN), dtype=np.int64)
        if self.engine is None:
            return a
        for block in BLOCKS:
            if self.block_present(block):
                self._redraw_block(a, block, np.arange(n), rng)
        return a

    def _redraw_block(self, a: np.ndarray, block: str, rows: np.ndarray,
                      rng: np.random.Generator) -> None:
        """Set ``block``'s operator heads of ``a[rows]`` (in place) to layouts drawn uniformly
        among those the engine implements."""
        assert self.engine is not None
        allowed = np.asarray(self.engine.allowed(block), dtype=np.int64)
        pick = allowed[rng.integers(0, len(allowed), size=len(rows))]
        for j, op in enumerate(BLOCKS[block]):
            a[rows, NUM_COARSE + OP_NAMES.index(op)] = pick[:, j]

    def launchable(self, actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``actions`` (``[n, ACTION_LEN]``) with every operator block the engine does not
        implement redrawn uniformly among the layouts it does (the ``engine_layout`` rule;
        :meth:`sample`); unchanged, and no random number drawn, without an engine. The
        local-move searchers (``sa``, ``mcmc``) apply it to their proposals, so that a move
        of one operator head becomes a move between launchable block layouts."""
        a = np.array(actions, dtype=np.int64, copy=True)
        if self.engine is None:
            return a
        for block, ops in BLOCKS.items():
            cols = [NUM_COARSE + OP_NAMES.index(o) for o in ops]
            bad = np.flatnonzero(~self.block_ok(block, a[:, cols]))
            if len(bad):
                self._redraw_block(a, block, bad, rng)
        return a


def active_heads(space: StrategySpace) -> np.ndarray:
    """Heads that can change an estimate, ``[ACTION_LEN]`` bool.

    A head is inactive if it has one choice, or if it is the per-operator dimension of an
    operator the model does not have (``OpDef.present``): ``dense_up``/``dense_down`` when
    every layer is MoE, ``router``/``expert_*`` for a dense model, ``shared_expert_*`` without
    shared experts (the validity rules and the cost model skip exactly these; a test checks
    it).
    """
    nvec = space.nvec
    active = nvec > 1
    od: OpDef
    for od in OPS:
        if not od.present(space.model):
            active[NUM_COARSE + int(od.op)] = False
    return active


def canonical(actions: np.ndarray, active: np.ndarray) -> np.ndarray:
    """``actions`` (``[n, A]`` or ``[A]``) with inactive operator heads set to ``∅`` and
    inactive coarse heads to 0, so equivalent strategies have one encoding."""
    out = np.array(actions, dtype=np.int64, copy=True)
    fill = np.zeros(len(active), dtype=np.int64)
    fill[NUM_COARSE:] = REPLICATED
    out[..., ~active] = fill[~active]
    return out
