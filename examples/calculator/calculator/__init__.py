"""A tiny calculator: the example repository that `nexus demo` asks the agent to fix."""

from calculator.ops import add, mean, subtract

__all__ = ["add", "subtract", "mean"]
