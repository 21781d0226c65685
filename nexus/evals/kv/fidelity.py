"""Suite 1, fidelity: real long texts streamed in chunks; how far each policy's next-token predictions on a
held-out continuation drift from dense's (KL(dense || policy), top-1 agreement, NLL gap)."""

from __future__ import annotations

import random

from nexus.evals.kv.config import SuiteSize
from nexus.evals.kv.corpus import corpus, split_seed
from nexus.evals.kv.probe import kl_per_position, predictive_logprobs, token_nll
from nexus.evals.kv.suite import Item, Metric, QualitySuite
from nexus.errors import NexusError


class FidelitySuite(QualitySuite):
    name = "fidelity"
    headline = "kl"
    metrics = (
        Metric("kl", "KL(dense||policy) nats/token", "lower"),
        Metric("top1", "top-1 agreement %", "higher", scale=100),
        Metric("nll_gap", "NLL gap nats/token", "lower"),
        Metric("nll_dense", "dense NLL nats/token", "lower"),
    )

    def build_items(self, size: SuiteSize, tokenizer, seed: int, split: str = "all") -> list[Item]:
        need = size.context_tokens + size.continuation_tokens
        docs = []
        for doc in corpus(seed, split):
            ids = tokenizer.encode(doc.text, add_special_tokens=False)
            if len(ids) >= need:
                docs.append((doc.name, ids))
        if not docs:
            raise NexusError(f"No text of {need} tokens was found for the fidelity suite; lower --context-tokens.")
        rng = random.Random(split_seed("fidelity", seed, split))
        items = []
        for i in range(size.items):
            name, ids = docs[i % len(docs)]
            start = rng.randrange(len(ids) - need + 1)
            window = ids[start : start + need]
            items.append(Item(
                id=f"fid-{i:03d}", context_tokens=size.context_tokens,
                data={"doc": name, "offset": start, "context": window[: size.context_tokens],
                      "continuation": window[size.context_tokens :]},
            ))
        return items

    def observe(self, stream, item: Item):
        stream.append(item.data["context"])
        return predictive_logprobs(stream, item.data["continuation"])

    def compare(self, item: Item, budget: int, ref, got) -> dict[str, float]:
        cont = item.data["continuation"]
        nll_ref, nll_got = token_nll(ref, cont), token_nll(got, cont)
        return {
            "kl": float(kl_per_position(ref, got).mean()),
            "top1": float((ref.argmax(-1) == got.argmax(-1)).float().mean()),
            "nll_gap": float(nll_got.mean() - nll_ref.mean()),
            "nll_dense": float(nll_ref.mean()),
        }
