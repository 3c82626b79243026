"""The 12 fused operators whose sharding dimension the strategy chooses, as data (DESIGN §2).

Each weight-bearing operator computes ``y = x · W`` with ``W: [K, N]``. Its choice is one of
:class:`Choice` ``SHARD0`` = ``Shard(0)`` (row-parallel: split K, input must be ``Shard(1)``,
output ``Partial``), ``SHARD1`` = ``Shard(1)`` (column-parallel: split N, input ``Replicate``,
output ``Shard(1)``), ``REPLICATE`` = ``∅`` / ``Replicate()`` (weight replicated; runs on the
input's token split). For ``attention`` (no weight) the choice splits its output:
``SHARD0`` = sequences (attention-DP inside the TP group), ``SHARD1`` = heads, ``REPLICATE`` =
replicated. The paper's fine-grained action (arXiv 2509.00217 §3, ``a_dim ∈ {0, 1, ∅}``) with
the 12 operators this project fixes.

Every operator is one :class:`OpDef` in :data:`OPS` — the model is DTensor's ``OpStrategy``
(``torch.distributed.tensor._op_schema``: per strategy, the input placements it needs and the
output placement it yields): the mesh axis it splits over, its weight shape read from the
:class:`~learn_to_shard.model.spec.ModelSpec`, whether the model has it, and per choice
(:class:`ChoiceDef`) the activation layout it requires (a :class:`~.placement.Layout` code,
a separate code space from :class:`Choice`), the layout it yields, the divisibility rules it
must meet (:class:`Need`) and the weight dims it shards (:class:`WeightShard`, for the
checkpoint-format rules). Derived from that list, never restated: :data:`MEGATRON_DIMS`, the
layout tables the cost model indexes (:data:`LAYOUT_IN`, :data:`LAYOUT_OUT`), the validity
rules and masks of :mod:`learn_to_shard.parallel.space`, and the option sets the exact solver
enumerates (:func:`block_options`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from ..model.spec import AttentionKind, ModelSpec
from .placement import Layout, resolve_layout


class Op(IntEnum):
    """Fused operators, in action-vector order."""

    EMBEDDING = 0
    QKV_PROJ = 1
    ATTENTION = 2
    O_PROJ = 3
    DENSE_UP = 4
    DENSE_DOWN = 5
    ROUTER = 6
    EXPERT_UP = 7
    EXPERT_DOWN = 8
    SHARED_EXPERT_UP = 9
    SHARED_EXPERT_DOWN = 10
    LM_HEAD = 11


class Choice(IntEnum):
    """Per-operator choice codes (the values of an action vector's operator heads)."""

    SHARD0 = 0
    SHARD1 = 1
    REPLICATE = 2


OP_NAMES: tuple[str, ...] = tuple(op.name.lower() for op in Op)
NUM_OPS = len(Op)
#: Choices per operator head (``len(Choice)``).
NUM_CHOICES = len(Choice)

# Choice codes as plain ints (for array code).
DIM0, DIM1, REPLICATED = int(Choice.SHARD0), int(Choice.SHARD1), int(Choice.REPLICATE)
CHOICE_NAMES = ("Shard(0)", "Shard(1)", "Replicate()")

#: Mesh axes an operator's choice can split over: the TP group, or the expert-TP group of
#: the MoE layers (``etp = tp · dp / ep``, :mod:`learn_to_shard.parallel.mesh`).
OP_AXES = ("tp", "etp")


@dataclass(frozen=True)
class Need:
    """A divisibility rule one choice must meet: ``size(model, vocab_multiple)`` divisible by
    the operator's group (``multiple_ok``: or the group a multiple of it, KV-head
    replication); ``size`` returns ``None`` where the rule does not apply to the model.

    Attributes:
        rule: the rule's name in :data:`learn_to_shard.parallel.space.RULES`.
        size: the dimension that must divide, from the model (and the engine's vocabulary
            padding multiple, 0 for none).
        multiple_ok: also valid when the group is a multiple of ``size``.
    """

    rule: str
    size: Callable[[ModelSpec, int], int | None]
    multiple_ok: bool = False


@dataclass(frozen=True)
class WeightShard:
    """One weight dimension a choice splits over the operator's group.

    Attributes:
        size: the dimension (elements), from the model.
        is_k: the weight's input dim (row parallel) rather than an output column.
        only_if_divides: the dim is split only where this many heads divide the group, else
            replicated (GQA KV heads under a ``tp`` above them); ``None``: always split.
    """

    size: Callable[[ModelSpec], int]
    is_k: bool
    only_if_divides: Callable[[ModelSpec], int] | None = None


@dataclass(frozen=True)
class ChoiceDef:
    """One choice of one operator (one DTensor ``PlacementStrategy``).

    Attributes:
        choice: its code.
        layout_in: the activation layout it needs; ``None``: it runs on the arriving token
            split (R and S(0) kept; P → S(0) by reduce-scatter, S(1) → R by all-gather).
        layout_out: the layout it yields; ``None``: the layout it ran on.
        needs: its divisibility rules.
        shards: the weight dims it splits (checked against the checkpoint's block / group
            quantisation, rules ``quant_block`` and ``quant_group``).
    """

    choice: Choice
    layout_in: Layout | None
    layout_out: Layout | None
    needs: tuple[Need, ...] = ()
    shards: Callable[[ModelSpec], tuple[WeightShard, ...]] = lambda m: ()


@dataclass(frozen=True)
class OpDef:
    """One fused operator.

    Attributes:
        op: its position in the action vector.
        axis: the mesh axis its choice splits over (:data:`OP_AXES`).
        block: the engine block it belongs to (a key of
            :data:`learn_to_shard.engines.BLOCKS`).
        weight_shape: ``[K, N]`` of its weight from the model (gated up-projections hold
            gate and up: ``N = 2 · width``), ``None`` without a weight.
        present: whether the model has it (absent operators are "don't care": no rule, no
            cost, inactive head).
        quantised: its weight is stored in the checkpoint's quantised format (the embedding,
            router and LM head stay 16-bit).
        megatron: Megatron-LM's choice (Shoeybi et al. 2019; Narayanan et al. SC'21).
        choices: one :class:`ChoiceDef` per :class:`Choice`, in code order.
    """

    op: Op
    axis: str
    block: str
    weight_shape: Callable[[ModelSpec], tuple[int, int] | None]
    present: Callable[[ModelSpec], bool]
    quantised: bool
    megatron: Choice
    choices: tuple[ChoiceDef, ChoiceDef, ChoiceDef]

    @property
    def name(self) -> str:
        """The operator's name (``OP_NAMES``)."""
        return OP_NAMES[self.op]


# ------------------------------------------------------------------------ model dimensions
def _hidden(m: ModelSpec, _q: int = 0) -> int:
    return m.hidden_size


def _heads(m: ModelSpec, _q: int = 0) -> int:
    return m.attention.num_heads


def _kv_heads(m: ModelSpec, _q: int = 0) -> int | None:
    return m.attention.num_kv_heads if m.attention.kind is AttentionKind.GQA else None


def _dense_width(m: ModelSpec, _q: int = 0) -> int:
    return m.dense_intermediate_size


def _expert_width(m: ModelSpec, _q: int = 0) -> int:
    return m.moe.expert_intermediate_size if m.moe is not None else 0


def _shared_width(m: ModelSpec, _q: int = 0) -> int:
    return m.moe.num_shared_experts * m.moe.shared_intermediate_size if m.moe is not None \
        else 0


def _experts(m: ModelSpec, _q: int = 0) -> int:
    return m.moe.num_experts if m.moe is not None else 1


def _padded_vocab(m: ModelSpec, q: int) -> int | None:
    """The vocabulary padded to the engine's multiple ``q``; ``None`` when the engine pads
    per rank (``q == 0``: any split divides)."""
    return -(-m.vocab_size // q) * q if q else None


def _up_mult(m: ModelSpec) -> int:
    return 2 if m.gated_mlp else 1


def _gqa(m: ModelSpec) -> bool:
    return m.attention.kind is AttentionKind.GQA


HIDDEN = Need("hidden", _hidden)
HEADS = Need("heads", _heads)
KV_HEADS = Need("kv_heads", _kv_heads, multiple_ok=True)
VOCAB = Need("vocab", _padded_vocab)


def _ffn_pair(up: Op, down: Op, width: Callable[[ModelSpec, int], int], axis: str,
              present: Callable[[ModelSpec], bool], block: str
              ) -> tuple[OpDef, OpDef]:
    """An up (``[H, up·I]``) / down (``[I, H]``) pair: column → row is Megatron's."""
    ffn = Need("ffn", width)

    def k_shard(size: Callable[[ModelSpec], int]) -> Callable[[ModelSpec],
                                                                tuple[WeightShard, ...]]:
        return lambda m: (WeightShard(size, True),)

    def n_shard(size: Callable[[ModelSpec], int]) -> Callable[[ModelSpec],
                                                                tuple[WeightShard, ...]]:
        return lambda m: (WeightShard(size, False),)

    w = lambda m: width(m, 0)  # noqa: E731
    up_def = OpDef(up, axis, block, lambda m: (m.hidden_size, _up_mult(m) * w(m)), present,
                   True, Choice.SHARD1, (
                       ChoiceDef(Choice.SHARD0, Layout.S1, Layout.P, (HIDDEN,),
                                 k_shard(_hidden)),
                       ChoiceDef(Choice.SHARD1, Layout.R, Layout.S1, (ffn,), n_shard(w)),
                       ChoiceDef(Choice.REPLICATE, None, None)))
    down_def = OpDef(down, axis, block, lambda m: (w(m), m.hidden_size), present, True,
                     Choice.SHARD0, (
                         ChoiceDef(Choice.SHARD0, Layout.S1, Layout.P, (ffn,), k_shard(w)),
                         ChoiceDef(Choice.SHARD1, Layout.R, Layout.S1, (HIDDEN,),
                                   n_shard(_hidden)),
                         ChoiceDef(Choice.REPLICATE, None, None)))
    return up_def, down_def


def _qkv_shards_col(m: ModelSpec) -> tuple[WeightShard, ...]:
    """GQA ``qkv_proj`` column split per projection: q (``heads · hd``) always, k/v
    (``kv · hd``) only where the KV heads divide the group (replicated otherwise)."""
    if not _gqa(m):
        return ()
    a = m.attention
    return (WeightShard(lambda m: a.num_heads * a.head_dim, False),
            WeightShard(lambda m: a.num_kv_heads * a.head_dim, False,
                        only_if_divides=lambda m: a.num_kv_heads))


def _gqa_only(shard: WeightShard) -> Callable[[ModelSpec], tuple[WeightShard, ...]]:
    return lambda m: (shard,) if _gqa(m) else ()


def _linear(op: Op, block: str, shape: Callable[[ModelSpec], tuple[int, int] | None],
            present: Callable[[ModelSpec], bool], quantised: bool, megatron: Choice,
            row: tuple[tuple[Need, ...], Callable[[ModelSpec], tuple[WeightShard, ...]]],
            col: tuple[tuple[Need, ...], Callable[[ModelSpec], tuple[WeightShard, ...]]],
            axis: str = "tp") -> OpDef:
    """A weight-bearing operator with the three linear choices (module docstring)."""
    return OpDef(op, axis, block, shape, present, quantised, megatron, (
        ChoiceDef(Choice.SHARD0, Layout.S1, Layout.P, row[0], row[1]),
        ChoiceDef(Choice.SHARD1, Layout.R, Layout.S1, col[0], col[1]),
        ChoiceDef(Choice.REPLICATE, None, None)))


def _always(m: ModelSpec) -> bool:
    return True


def _none(m: ModelSpec) -> tuple[WeightShard, ...]:
    return ()


_DENSE = _ffn_pair(Op.DENSE_UP, Op.DENSE_DOWN, _dense_width, "tp",
                   lambda m: m.has_dense_ffn, "dense")
_EXPERT = _ffn_pair(Op.EXPERT_UP, Op.EXPERT_DOWN, _expert_width, "etp",
                    lambda m: m.is_moe, "experts")
_SHARED = _ffn_pair(Op.SHARED_EXPERT_UP, Op.SHARED_EXPERT_DOWN, _shared_width, "tp",
                    lambda m: m.has_shared_experts, "shared")

#: Every fused operator, in action-vector order (the one definition; module docstring).
OPS: tuple[OpDef, ...] = (
    OpDef(Op.EMBEDDING, "tp", "embedding", lambda m: (m.vocab_size, m.hidden_size), _always,
          False, Choice.SHARD0, (
              # Token ids arrive replicated: a vocabulary split yields partial rows (P), a
              # hidden split S(1), a replicated table the full rows.
              ChoiceDef(Choice.SHARD0, Layout.R, Layout.P, (VOCAB,)),
              ChoiceDef(Choice.SHARD1, Layout.R, Layout.S1, (HIDDEN,)),
              ChoiceDef(Choice.REPLICATE, Layout.R, Layout.R))),
    _linear(Op.QKV_PROJ, "attention",
            lambda m: (m.hidden_size, m.attention.num_heads * m.attention.head_dim
                       + m.attention.num_kv_heads * (m.attention.head_dim
                                                     + m.attention.v_head_dim)),
            _always, True, Choice.SHARD1,
            row=((HIDDEN,), _gqa_only(WeightShard(_hidden, True))),
            col=((HEADS, KV_HEADS), _qkv_shards_col)),
    OpDef(Op.ATTENTION, "tp", "attention", lambda m: None, _always, False, Choice.SHARD1, (
        ChoiceDef(Choice.SHARD0, Layout.S0, Layout.S0),
        ChoiceDef(Choice.SHARD1, Layout.S1, Layout.S1, (HEADS, KV_HEADS)),
        ChoiceDef(Choice.REPLICATE, Layout.R, Layout.R))),
    _linear(Op.O_PROJ, "attention",
            lambda m: (m.attention.num_heads * m.attention.v_head_dim, m.hidden_size),
            _always, True, Choice.SHARD0,
            row=((HEADS,), _gqa_only(WeightShard(
                lambda m: m.attention.num_heads * m.attention.v_head_dim, True))),
            col=((HIDDEN,), _gqa_only(WeightShard(_hidden, False)))),
    *_DENSE,
    _linear(Op.ROUTER, "router",
            lambda m: (m.hidden_size, _experts(m)) if m.moe is not None else None,
            lambda m: m.is_moe, False, Choice.REPLICATE,
            row=((HIDDEN,), _none), col=((Need("router", _experts),), _none)),
    *_EXPERT,
    *_SHARED,
    _linear(Op.LM_HEAD, "lm_head", lambda m: (m.hidden_size, m.vocab_size), _always, False,
            Choice.SHARD1, row=((HIDDEN,), _none), col=((VOCAB,), _none)),
)
assert tuple(d.op for d in OPS) == tuple(Op), "OPS must follow the action-vector order"

#: Megatron-LM's per-operator dimensions (Shoeybi et al. 2019; Narayanan et al. SC'21):
#: vocab-parallel embedding, column→row pairs in attention and every FFN, head-parallel
#: attention, replicated router, vocab-parallel LM head.
MEGATRON_DIMS: tuple[int, ...] = tuple(int(d.megatron) for d in OPS)


def _layout_tables() -> tuple[np.ndarray, np.ndarray]:
    """``LAYOUT_IN[op, choice, arriving]`` and ``LAYOUT_OUT[op, choice, ran_on]``."""
    n_lay = len(Layout)
    lin = np.zeros((NUM_OPS, NUM_CHOICES, n_lay), dtype=np.int64)
    lout = np.zeros((NUM_OPS, NUM_CHOICES, n_lay), dtype=np.int64)
    for d in OPS:
        for c in d.choices:
            for lay in Layout:
                lin[d.op, c.choice, lay] = resolve_layout(lay) if c.layout_in is None \
                    else c.layout_in
                lout[d.op, c.choice, lay] = lay if c.layout_out is None else c.layout_out
    lin.setflags(write=False)
    lout.setflags(write=False)
    return lin, lout


#: ``[NUM_OPS, NUM_CHOICES, len(Layout)]`` int64: the layout operator ``op`` under ``choice``
#: needs when ``arriving`` arrives (``ChoiceDef.layout_in``).
#: ``LAYOUT_OUT[op, choice, ran_on]``: the layout it yields having run on ``ran_on``.
LAYOUT_IN, LAYOUT_OUT = _layout_tables()


def block_ops(block: str) -> tuple[Op, ...]:
    """The operators of one engine block (``OpDef.block``), in action-vector order."""
    return tuple(d.op for d in OPS if d.block == block)


def block_options(ops: tuple[Op, ...]) -> np.ndarray:
    """Every choice tuple of ``ops``, ``[NUM_CHOICES ** len(ops), len(ops)]`` int64, the last
    operator fastest (the option index is the tuple read as a base-``NUM_CHOICES`` number)."""
    if not ops:
        return np.zeros((1, 0), dtype=np.int64)
    return np.array(list(itertools.product(range(NUM_CHOICES), repeat=len(ops))),
                    dtype=np.int64)


def present_ops(model: ModelSpec) -> tuple[OpDef, ...]:
    """The operators ``model`` has (``OpDef.present``)."""
    return tuple(d for d in OPS if d.present(model))
