"""The 12 fused operators whose sharding dimension the strategy chooses (DESIGN §2).

Each weight-bearing operator computes ``y = x · W`` with ``W: [K, N]``. Its choice is one of
``0`` = ``Shard(0)`` (row-parallel: split K, input must be ``Shard(1)``, output ``Partial``),
``1`` = ``Shard(1)`` (column-parallel: split N, input ``Replicate``, output ``Shard(1)``),
``2`` = ``∅`` / ``Replicate()`` (weight replicated; runs on the input's token split).
For ``attention`` (no weight) the choice splits its output: ``0`` = sequences (attention-DP
inside the TP group), ``1`` = heads, ``2`` = replicated. The paper's fine-grained action
(arXiv 2509.00217 §3, ``a_dim ∈ {0, 1, ∅}``) with the 12 operators this project fixes.
"""

from __future__ import annotations

from enum import IntEnum


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


OP_NAMES: tuple[str, ...] = tuple(op.name.lower() for op in Op)
NUM_OPS = len(Op)

# Choice codes.
DIM0, DIM1, REPLICATED = 0, 1, 2
CHOICE_NAMES = ("Shard(0)", "Shard(1)", "Replicate()")

#: Megatron-LM's per-operator dimensions (Shoeybi et al. 2019; Narayanan et al. SC'21):
#: vocab-parallel embedding, column→row pairs in attention and every FFN, head-parallel
#: attention, replicated router, vocab-parallel LM head.
MEGATRON_DIMS: tuple[int, ...] = (
    DIM0,  # embedding: vocab-parallel
    DIM1,  # qkv_proj: column (heads)
    DIM1,  # attention: heads
    DIM0,  # o_proj: row
    DIM1,  # dense_up: column
    DIM0,  # dense_down: row
    REPLICATED,  # router
    DIM1,  # expert_up: column
    DIM0,  # expert_down: row
    DIM1,  # shared_expert_up: column
    DIM0,  # shared_expert_down: row
    DIM1,  # lm_head: column (vocab)
)
