"""nexus: a runtime for memory-bounded coding agents (one continuous KV-cache stream per task)."""

__version__ = "0.1.0"
