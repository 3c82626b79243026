"""Cost layer: analytical compute, communication, memory and serving model."""

from .config import CostModelConfig
from .model import BatchEstimate, CollectiveUse, CostModel, Estimate, MemoryBreakdown

__all__ = ["BatchEstimate", "CollectiveUse", "CostModel", "CostModelConfig", "Estimate",
           "MemoryBreakdown"]
