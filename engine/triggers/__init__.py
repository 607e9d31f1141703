"""Constraints that start on a trigger: reasoning first, then the constraint; tool calls
inside free text (plan.py says how a request becomes phases, matcher.py walks them)."""

from .matcher import TriggeredConstraint, TriggeredMatcher
from .plan import Plan, TriggerOptions, build_plan

__all__ = ["Plan", "TriggerOptions", "TriggeredConstraint", "TriggeredMatcher", "build_plan"]
