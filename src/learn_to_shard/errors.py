"""The error hierarchy.

Bad input raises a :class:`PlannerError` subclass whose message is one line that names the
file or field and what would be valid; the CLI prints it and exits with code 2. An infeasible
*strategy* is never an exception: it is an :class:`~learn_to_shard.cost.Estimate` with
``feasible=False`` and named violations. A broken internal invariant (a bug, not bad input)
raises an :class:`InternalError`; the CLI prints it as one line and exits with code 3.
"""

from __future__ import annotations


class PlannerError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(PlannerError):
    """A malformed input (config.json, cluster file, CLI value); the message names the field."""


class EngineRefusalError(ConfigError):
    """A serving engine cannot serve the model on the device (a vendor it does not run on, a
    checkpoint or KV-cache format it cannot load there): bad input to a command that names
    the engine (exit 2), an infeasible cell with the reason in a sweep over engines."""


class ContextLengthError(ConfigError):
    """A request longer than the model's positions (``cost.model.check_context``): bad input
    to a command (exit 2), an infeasible cell with the reason in a sweep whose grid pairs a
    long workload with a short-context model."""


class UnsupportedModelError(PlannerError):
    """A well-formed model config whose architecture the planner cannot model."""


class NoFeasiblePlanError(PlannerError):
    """No strategy satisfies memory and SLO limits; carries the reasons (an expected outcome)."""

    def __init__(self, message: str, reasons: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.reasons = reasons


class InternalError(Exception):
    """A check of the planner's own consistency failed: a bug to report, never bad input and
    never a reason to fall back silently to another searcher (CLI exit code 3)."""
