"""nexus joint_layers=true: one keep set per eviction event for every evicting layer, drawn from the mean of the
layers' weights, so a token is stored in all layers or in none (docs/results.md, "Layers that agree")."""

from __future__ import annotations

import pytest
import torch

from nexus.errors import NexusError
from nexus.runtime import InferenceStream, make_policy
from nexus.runtime.policies.base import LayerView
from nexus.runtime.policies.nexus import NexusReservoirPolicy
from tests.runtime.test_stream_exactness import random_ids


def stored_positions(stream) -> list[list[int]]:
    return [layer.positions.cpu().tolist() for layer in stream.cache.layers]


@pytest.mark.parametrize("policy", ["nexus", "nexus_reservoir"])
def test_every_layer_holds_the_same_tokens_and_bias_only_with_joint_layers(tiny_llama, policy):
    model, tok = tiny_llama
    ids = random_ids(900, len(tok), seed=4)
    held = {}
    for joint in (False, True):
        stream = InferenceStream(model, tok, make_policy(policy, joint_layers=joint), budget=160, chunk_size=32,
                                 seed=3)
        stream.append(ids)
        stream.generate(20, temperature=1.0, seed=1)
        assert stream.stats.eviction_events > 20
        held[joint] = stored_positions(stream)
        if joint and policy == "nexus":  # the same Hajek bias too: one draw, one set of inclusion probabilities
            biases = [layer.token_state["logit_bias"] for layer in stream.cache.layers]
            assert all(torch.equal(b, biases[0]) for b in biases)
    assert all(p == held[True][0] for p in held[True])
    assert any(p != held[False][0] for p in held[False])  # per-layer choices differ: the check above can fail


class FixedWeights(NexusReservoirPolicy):
    """The real selection on weights given per layer (one block's weight per layer index)."""

    table: dict[int, list[float]] = {}

    def weights(self, view: LayerView) -> torch.Tensor:
        return torch.tensor(self.table[view.layer_idx])


def layer(idx: int, positions: torch.Tensor, budget: int = 3) -> LayerView:
    keys = torch.zeros(1, positions.numel(), 1)
    return LayerView(layer_idx=idx, keys=keys, values=keys, positions=positions, queries=keys[:, -1:], budget=budget,
                     event=0, seed=0)


def test_the_joint_choice_follows_the_mean_of_the_layers_weights():
    """Two scored blocks, room for one: layer 0 prefers block 0 a little, layer 1 prefers block 1 a lot; each layer
    alone keeps its own favourite, together both keep block 1 (mean 0.45 against 0.55)."""
    FixedWeights.table = {0: [0.6, 0.4, 0.0], 1: [0.3, 0.7, 0.0]}
    knobs = dict(block_size=1, window=1, sink_tokens=0, recent_tokens=1, forced_cap=1.0, n="det")
    views = [layer(0, torch.arange(3), budget=2), layer(1, torch.arange(3), budget=2)]
    alone = FixedWeights(**knobs).select_event(views)
    assert [k.tolist() for k in alone] == [[0, 2], [1, 2]]
    joint = FixedWeights(**knobs, joint_layers=True).select_event(views)
    assert [k.tolist() for k in joint] == [[1, 2], [1, 2]]


def test_layers_holding_different_tokens_cannot_share_a_keep_set():
    policy = make_policy("nexus", joint_layers=True)
    views = [layer(0, torch.arange(64), budget=40), layer(1, torch.arange(1, 65), budget=40)]
    with pytest.raises(NexusError, match="joint_layers=true keeps one token set .* layer 1"):
        policy.select_event(views)


def test_joint_layers_needs_block_units():
    with pytest.raises(NexusError, match="joint_layers=true .* needs unit='block'"):
        make_policy("nexus_reservoir", unit="line", joint_layers=True)
    with pytest.raises(NexusError, match="joint_layers must be bool"):
        make_policy("nexus", joint_layers="yes")
