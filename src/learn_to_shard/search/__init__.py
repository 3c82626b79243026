"""Search layer: one Searcher protocol, many methods."""

from __future__ import annotations

from .base import BudgetedEvaluator, Searcher, SearchResult
from .megatron import MegatronRuleSearcher, MegatronSearcher
from .random_search import RandomSearcher

_REGISTRY: dict[str, type] = {
    "megatron": MegatronSearcher,
    "megatron-rule": MegatronRuleSearcher,
    "random": RandomSearcher,
}


def register(name: str, cls: type) -> None:
    """Add a searcher class under ``name`` (used by optional searchers)."""
    _REGISTRY[name] = cls


def searcher_names() -> list[str]:
    """Names accepted by :func:`get_searcher`."""
    _load_optional()
    return sorted(_REGISTRY)


def get_searcher(name: str) -> Searcher:
    """A fresh searcher instance by name.

    Raises:
        KeyError: for an unknown name (the message lists the valid ones).
    """
    _load_optional()
    if name not in _REGISTRY:
        raise KeyError(f"unknown method {name!r}; valid: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]()


def _load_optional() -> None:
    """Import searchers that live in their own modules (they register themselves)."""
    import importlib

    for mod in ("annealing", "mcmc", "exact", "rl"):
        try:
            importlib.import_module(f"{__name__}.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith(f"{__name__}.{mod}"):
                continue
            raise


__all__ = ["BudgetedEvaluator", "MegatronRuleSearcher", "MegatronSearcher", "RandomSearcher",
           "SearchResult", "Searcher", "get_searcher", "register", "searcher_names"]
