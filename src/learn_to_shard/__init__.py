"""learn-to-shard: plan distributed LLM inference (degrees and per-operator sharding).

The main job is :func:`plan`; see the README.
"""

__version__ = "0.1.0"

from .api import make_cost_model, make_workload, plan  # noqa: E402

__all__ = ["__version__", "make_cost_model", "make_workload", "plan"]
