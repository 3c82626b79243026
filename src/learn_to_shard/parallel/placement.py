"""DTensor-style placements and the layout changes between producer and consumer.

An activation is viewed as a 2-D tensor ``[tokens, features]`` spread over one parallel group.
Its placement along that group is one of ``Replicate()``, ``Shard(0)`` (tokens split),
``Shard(1)`` (features split) or ``Partial()`` (every rank holds a partial sum), the same
vocabulary as ``torch.distributed.tensor``. :func:`redistribute` names the collective that turns
one into another; pricing is :mod:`learn_to_shard.cost.comm`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

import numpy as np


@dataclass(frozen=True, slots=True)
class Shard:
    """Tensor split evenly along ``dim`` over the group."""

    dim: int

    def __str__(self) -> str:
        return f"S({self.dim})"


@dataclass(frozen=True, slots=True)
class Replicate:
    """Every rank holds the whole tensor."""

    def __str__(self) -> str:
        return "R"


@dataclass(frozen=True, slots=True)
class Partial:
    """Every rank holds a partial value awaiting a reduction (``reduce_op``)."""

    reduce_op: str = "sum"

    def __str__(self) -> str:
        return "P"


Placement = Shard | Replicate | Partial

class Layout(IntEnum):
    """Activation layout codes used by the vectorised cost model (index into
    :data:`LAYOUTS`); a code space of its own, apart from the per-operator
    :class:`~learn_to_shard.parallel.ops.Choice` codes."""

    R = 0
    S0 = 1
    S1 = 2
    P = 3


# The codes as plain ints (for array code).
R, S0, S1, P = int(Layout.R), int(Layout.S0), int(Layout.S1), int(Layout.P)
LAYOUTS: tuple[Placement, ...] = (Replicate(), Shard(0), Shard(1), Partial())


def resolve_layout(layout: int) -> Layout:
    """The layout an operator that runs on the arriving token split (a replicated weight)
    works on: complete values per token, so ``P`` → ``S(0)`` (a reduce-scatter: cheaper than
    an all-reduce, and it splits the work) and ``S(1)`` → ``R`` (an all-gather); ``R`` and
    ``S(0)`` are kept."""
    lay = Layout(layout)
    return {Layout.P: Layout.S0, Layout.S1: Layout.R}.get(lay, lay)


#: ``[len(Layout)]`` int64: :func:`resolve_layout` as a table for array code.
RESOLVE = np.array([resolve_layout(x) for x in Layout], dtype=np.int64)
RESOLVE.setflags(write=False)


class Collective(str, Enum):
    """Collective communication kinds (nccl-tests names)."""

    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_TO_ALL = "all-to-all"
    SEND_RECV = "send-recv"


# TRANSITION[src][dst] -> collective or None (free: identity, or a local slice of a replica,
# or writing zeros elsewhere to form a Partial). Partial is never *required* by a consumer.
_TRANSITION: dict[tuple[int, int], Collective | None] = {}
for _s in range(4):
    for _d in range(4):
        if _s == _d or _s == R or _d == P:
            _TRANSITION[(_s, _d)] = None
        elif _s == P:
            _TRANSITION[(_s, _d)] = Collective.ALL_REDUCE if _d == R else Collective.REDUCE_SCATTER
        elif _d == R:
            _TRANSITION[(_s, _d)] = Collective.ALL_GATHER
        else:
            _TRANSITION[(_s, _d)] = Collective.ALL_TO_ALL


def redistribute(src: Placement | int, dst: Placement | int) -> Collective | None:
    """The collective that turns placement ``src`` into ``dst`` along one group.

    Rules (DESIGN §2): Partial→Replicate all-reduce; Partial→Shard reduce-scatter;
    Shard→Replicate all-gather; Shard(i)→Shard(j) all-to-all; Replicate→Shard is a local slice
    and X→Partial writes zeros on all ranks but one (both free).

    Args:
        src: producer placement (a Placement or its integer code).
        dst: consumer placement.

    Returns:
        The collective, or ``None`` when no communication is needed.
    """
    def code(p: Placement | int) -> int:
        return LAYOUTS.index(p) if isinstance(p, Placement) else int(p)   # numpy ints too

    return _TRANSITION[(code(src), code(dst))]
