"""Strategy representation: placements, the 12 fused operators, Strategy and StrategySpace."""

from .ops import CHOICE_NAMES, MEGATRON_DIMS, NUM_OPS, OP_NAMES, Op
from .placement import Collective, Partial, Replicate, Shard, redistribute
from .space import ACTION_LEN, RULES, StrategySpace
from .strategy import Strategy

__all__ = ["ACTION_LEN", "CHOICE_NAMES", "Collective", "MEGATRON_DIMS", "NUM_OPS", "OP_NAMES",
           "Op", "Partial", "RULES", "Replicate", "Shard", "Strategy", "StrategySpace",
           "redistribute"]
