"""Serving under load: a request-level simulation of continuous batching that checks plans.

The search ranks strategies with the analytical steady-state model (:mod:`learn_to_shard.cost`);
this package replays a workload of individual requests — closed-loop concurrency, Poisson
arrivals or a trace — through one engine instance of a chosen strategy and reports TTFT, TPOT
and end-to-end latency as the engines' benchmark scripts do (mean and percentiles).
"""

from __future__ import annotations

from .load import (
    ServingLoad,
    engine_max_num_seqs,
    grows_without_bound,
    keeps_up_with_open_loop,
    load_trace,
    simulate_estimate,
    trace_mean_lengths,
)
from .simulate import PERCENTILES, Requests, SimResult, fixed_requests, poisson_arrivals, simulate
from .steptime import StepTimeModel, fit_step_model

__all__ = ["PERCENTILES", "Requests", "ServingLoad", "SimResult", "StepTimeModel",
           "engine_max_num_seqs", "grows_without_bound", "keeps_up_with_open_loop",
           "fit_step_model", "fixed_requests", "load_trace", "poisson_arrivals", "simulate",
           "simulate_estimate", "trace_mean_lengths"]
