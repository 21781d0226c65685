"""Run settings for the KV-eviction suites: which policies, which budgets, how many items of what size."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field

from nexus.errors import NexusError

SUITES = ("fidelity", "retrieval", "traces", "longstream", "speed")


@dataclass(frozen=True)
class Budget:
    """A cache budget: a density (fraction of the item's context tokens) or an absolute token count."""

    density: float | None = None
    tokens: int | None = None

    @property
    def label(self) -> str:
        return f"{self.density:.0%}" if self.density is not None else f"{self.tokens}tok"

    def resolve(self, context_tokens: int) -> int:
        if self.tokens is not None:
            return self.tokens
        return max(1, math.ceil(self.density * context_tokens))


def parse_budgets(spec: str) -> list[Budget]:
    """"10%,20%,0.5" -> densities; "512,1024" -> token counts (a value >= 1 without % is a token count)."""
    out: list[Budget] = []
    for raw in (s.strip() for s in spec.split(",")):
        if not raw:
            continue
        try:
            if raw.endswith("%"):
                value = float(raw[:-1]) / 100
                ok = 0 < value <= 1
                budget = Budget(density=value)
            elif "." in raw or float(raw) < 1:
                value = float(raw)
                ok = 0 < value <= 1
                budget = Budget(density=value)
            else:
                budget = Budget(tokens=int(raw))
                ok = budget.tokens >= 1
        except ValueError:
            ok = False
        if not ok:
            raise NexusError(
                f"Budget {raw!r} is neither a density (20% or 0.2, in (0, 1]) nor a token count (512); "
                "pass e.g. --budgets 10%,20%,50% or --budgets 512,1024."
            )
        out.append(budget)
    if not out:
        raise NexusError("No budgets given; pass e.g. --budgets 10%,20%,50%.")
    return out


def parse_policies(spec: str, registry: dict) -> list[str]:
    """"all" or a comma list of registered names; dense is always run (it is what everything is judged against)."""
    names = list(registry) if spec.strip() in ("", "all") else [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise NexusError(
            f"Unknown policy {', '.join(map(repr, unknown))}; registered policies: {', '.join(registry)} (or 'all')."
        )
    if "dense" not in names:
        names = ["dense", *names]
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class SuiteSize:
    """How much work one suite does; presets below, every field overridable from the CLI."""

    items: int
    # fidelity: context length; retrieval: smallest haystack; traces: output cap (chars/4); longstream: haystack
    context_tokens: int
    max_context_tokens: int  # retrieval: largest haystack (lengths spread between the two)
    continuation_tokens: int = 64  # fidelity: held-out tokens scored
    checkpoints: tuple[int, ...] = (1024, 2048, 4096, 8192)  # speed: tokens seen at which to measure
    # speed: tokens decoded at each checkpoint; a multiple of tau (16), so each checkpoint ends on an eviction
    decode_tokens: int = 32


SIZES: dict[str, dict[str, SuiteSize]] = {
    # CI: asserts the sanity properties in well under 5 minutes on 2 cores
    "ci": {
        "fidelity": SuiteSize(items=3, context_tokens=2048, max_context_tokens=2048, continuation_tokens=64),
        "retrieval": SuiteSize(items=4, context_tokens=1024, max_context_tokens=1024),
        "traces": SuiteSize(items=1, context_tokens=200, max_context_tokens=200),
        "longstream": SuiteSize(items=3, context_tokens=1024, max_context_tokens=1024),
        "speed": SuiteSize(items=1, context_tokens=0, max_context_tokens=0, checkpoints=(512, 1024, 2048),
                           decode_tokens=16),
    },
    # the embedded model's results table on a 2-core CPU (about 20 minutes for all policies)
    "small": {
        "fidelity": SuiteSize(items=10, context_tokens=2048, max_context_tokens=2048, continuation_tokens=48),
        "retrieval": SuiteSize(items=16, context_tokens=2048, max_context_tokens=2048),
        "traces": SuiteSize(items=3, context_tokens=300, max_context_tokens=300),
        "longstream": SuiteSize(items=12, context_tokens=2200, max_context_tokens=2200),
        "speed": SuiteSize(items=1, context_tokens=0, max_context_tokens=0, checkpoints=(1024, 2048, 4096, 8192),
                           decode_tokens=16),
    },
    # what the issue asks for at full size (1K-8K haystacks): meant for a GPU or a long CPU run
    "full": {
        "fidelity": SuiteSize(items=40, context_tokens=4096, max_context_tokens=4096, continuation_tokens=64),
        "retrieval": SuiteSize(items=64, context_tokens=1024, max_context_tokens=8192),
        "traces": SuiteSize(items=8, context_tokens=600, max_context_tokens=600),
        "longstream": SuiteSize(items=12, context_tokens=4096, max_context_tokens=4096),
        "speed": SuiteSize(items=1, context_tokens=0, max_context_tokens=0, checkpoints=(1024, 2048, 4096, 8192),
                           decode_tokens=32),
    },
}


@dataclass
class RunConfig:
    suite: str
    policies: list[str]
    budgets: list[Budget]
    size: SuiteSize
    size_name: str = "small"
    model: str = "embedded"
    device: str | None = None
    dtype: str | None = None
    seed: int = 0
    chunk_size: int = 128  # prefill chunk; lowered per run where the budget leaves less room above forced tokens
    policy_params: dict[str, dict] = field(default_factory=dict)
    split: str = "all"  # item set: "dev" / "test" are disjoint (corpus.split_packages); "all" = the historical items

    def fingerprint(self) -> str:
        """What a resumed run must agree on (policies and budgets may grow: new cells are simply added)."""
        key = {"suite": self.suite, "size": asdict(self.size), "model": self.model, "dtype": self.dtype,
               "seed": self.seed, "chunk_size": self.chunk_size, "policy_params": self.policy_params}
        if self.split != "all":  # left out for "all", so output dirs written before splits existed still resume
            key["split"] = self.split
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]

    def as_dict(self) -> dict:
        d = asdict(self)
        d["budgets"] = [b.label for b in self.budgets]
        return d


def size_for(suite: str, size_name: str, **overrides) -> SuiteSize:
    if size_name not in SIZES:
        raise NexusError(f"Unknown size {size_name!r}; use one of {', '.join(SIZES)}.")
    base = SIZES[size_name][suite]
    clean = {k: v for k, v in overrides.items() if v is not None}
    for key, value in clean.items():
        if key != "checkpoints" and (not isinstance(value, int) or value < 1):
            raise NexusError(f"--{key.replace('_', '-')} must be a positive integer, got {value!r}.")
    return SuiteSize(**{**asdict(base), **clean})
