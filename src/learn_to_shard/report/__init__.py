"""Report layer: Plan, JSON and tables."""

from .plan import Plan, estimate_to_dict
from .render import render_plan

__all__ = ["Plan", "estimate_to_dict", "render_plan"]
