"""The eviction-policy registry: one small file per policy, all with the same budget accounting."""

from __future__ import annotations

import inspect
from dataclasses import fields

from nexus.errors import NexusError
from nexus.runtime.policies.base import EvictionPolicy, LayerView
from nexus.runtime.policies.ada_snapkv import AdaSnapKVPolicy
from nexus.runtime.policies.dense import DensePolicy
from nexus.runtime.policies.h2o import H2OPolicy
from nexus.runtime.policies.morphkv import MorphKVPolicy
from nexus.runtime.policies.nexus import (NexusDraftPolicy, NexusKnobs, NexusPaperPolicy, NexusPolicy,
                                         NexusReservoirPolicy)
from nexus.runtime.policies.nexus_ht import NexusHTPolicy
from nexus.runtime.policies.pyramidkv import PyramidKVPolicy
from nexus.runtime.policies.random import RandomPolicy
from nexus.runtime.policies.snapkv import SnapKVPolicy
from nexus.runtime.policies.streaming_llm import StreamingLLMPolicy
from nexus.runtime.policies.tova import TOVAPolicy

REGISTRY: dict[str, type[EvictionPolicy]] = {
    cls.name: cls
    for cls in (DensePolicy, RandomPolicy, StreamingLLMPolicy, H2OPolicy, TOVAPolicy, SnapKVPolicy, PyramidKVPolicy,
                AdaSnapKVPolicy, MorphKVPolicy, NexusPolicy, NexusPaperPolicy, NexusDraftPolicy, NexusReservoirPolicy,
                NexusHTPolicy)
}


def policy_parameters(cls: type[EvictionPolicy]) -> dict[str, str]:
    """Parameter name -> type (as written in the code) along the constructor chain; nexus presets take the fields
    of their knobs dataclass."""
    found: dict[str, str] = {}
    if issubclass(cls, NexusPolicy):
        found.update({f.name: str(f.type) for f in fields(NexusKnobs)})
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None or klass is object:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.name == "self" or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                continue
            declared = p.annotation if p.annotation is not p.empty else type(p.default).__name__
            found.setdefault(p.name, str(declared))
    return found


def _fits(value: object, declared: str) -> bool:
    """Does a parameter value (parsed from KEY=VALUE: int, float or str) match a type such as "int | None"?"""
    names = {part.strip() for part in declared.split("|")}
    kind = "None" if value is None else type(value).__name__
    return kind in names or (kind == "int" and "float" in names) or not names & {"int", "float", "str", "bool"}


def _check_parameters(name: str, cls: type[EvictionPolicy], params: dict) -> None:
    known = policy_parameters(cls)
    listing = ", ".join(f"{key} ({declared})" for key, declared in sorted(known.items()))
    for key, value in params.items():
        if key not in known:
            raise NexusError(f"Policy {name!r} has no parameter {key!r}; its parameters: {listing}.")
        if not _fits(value, known[key]):
            raise NexusError(f"Policy {name!r} parameter {key} must be {known[key]}, got {value!r}; its "
                             f"parameters: {listing}.")


def make_policy(name: str, **params) -> EvictionPolicy:
    """Build a registered policy; unknown names and bad parameters get one clear sentence."""
    if name not in REGISTRY:
        raise NexusError(f"Unknown policy {name!r}; registered policies: {', '.join(sorted(REGISTRY))}.")
    cls = REGISTRY[name]
    params = {cls.aliases.get(key, key): value for key, value in params.items()}
    _check_parameters(name, cls, params)
    try:
        return cls(**params)
    except TypeError as exc:
        raise NexusError(f"Bad parameters for policy {name!r}: {exc}.") from exc


__all__ = ["REGISTRY", "EvictionPolicy", "LayerView", "make_policy"]
