"""learn-to-shard: plan distributed LLM inference (degrees and per-operator sharding).

The main job is :func:`plan`; see the README.
"""

__version__ = "0.1.0"
