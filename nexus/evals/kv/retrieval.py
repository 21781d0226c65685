"""Suite 2, retrieval (RULER-style, generated): needles hidden in real code/shell haystacks, asked for at the end.

Tasks (cycled over items):
- single:   one "special magic number" needle.
- multikey: four needles with different keys; one is asked for.
- vartrack: a chain VAR A = n, VAR B = A, VAR C = B scattered through the haystack; asked for C's value.
- bridge:   two-hop chain: "service A's settings live in file B" ... "file B holds code C"; asked for A's code.
            The middle link B never appears in the question, so it is attended only indirectly.
Every needle is a comment line between real lines. Scored by exact match of a greedy answer and by the answer's
log-likelihood (teacher forced), both beside dense's on the same item.
"""

from __future__ import annotations

import random
import re

from nexus.evals.kv.config import SuiteSize
from nexus.evals.kv.corpus import corpus
from nexus.evals.kv.probe import fork, kl_per_position, predictive_logprobs, token_nll
from nexus.evals.kv.suite import Item, Metric, QualitySuite
from nexus.errors import NexusError

TASKS = ("single", "multikey", "vartrack", "bridge")
WORDS_A = ("amber", "brisk", "calm", "dusty", "eager", "faint", "gentle", "hollow", "icy", "jolly", "keen", "lucky",
           "mellow", "noble", "olive", "proud", "quiet", "rapid", "silver", "tidy", "vivid", "witty", "young", "zesty")
WORDS_B = ("anchor", "badger", "canyon", "dolphin", "ember", "falcon", "garden", "harbor", "island", "jungle",
           "kettle", "lantern", "meadow", "nectar", "orchid", "pepper", "quartz", "river", "saddle", "tunnel",
           "velvet", "walnut", "yonder", "zephyr")
HEADER = "Read the following text carefully; some lines hold notes you will be asked about.\n\n"


def _key(rng: random.Random, used: set[str]) -> str:
    while True:
        k = f"{rng.choice(WORDS_A)}-{rng.choice(WORDS_B)}"
        if k not in used:
            used.add(k)
            return k


def _ident(rng: random.Random, used: set[str]) -> str:
    while True:
        k = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(3))
        if k not in used:
            used.add(k)
            return k


def make_task(kind: str, rng: random.Random) -> tuple[list[str], str, str, str]:
    """(needle lines in haystack order, question, answer prefix, answer)."""
    used: set[str] = set()
    number = lambda: str(rng.randrange(100000, 1000000))  # noqa: E731
    if kind == "single":
        key, value = _key(rng, used), number()
        return ([f"# Note: the special magic number for {key} is {value}."],
                f"What is the special magic number for {key}?", f"The special magic number for {key} is", value)
    if kind == "multikey":
        keys = [_key(rng, used) for _ in range(4)]
        values = [number() for _ in keys]
        target = rng.randrange(len(keys))
        lines = [f"# Note: the special magic number for {k} is {v}." for k, v in zip(keys, values)]
        key = keys[target]
        return lines, f"What is the special magic number for {key}?", \
            f"The special magic number for {key} is", values[target]
    if kind == "vartrack":
        names = [_ident(rng, used) for _ in range(3)]
        value = number()
        lines = [f"# VAR {names[0]} = {value}"] + [f"# VAR {b} = VAR {a}" for a, b in zip(names, names[1:])]
        return lines, f"Following the VAR assignments, what number does VAR {names[-1]} hold?", \
            f"VAR {names[-1]} holds the number", value
    if kind == "bridge":
        service, filename, value = _key(rng, used), f"{_key(rng, used)}.cfg", number()
        lines = [f"# Note: the settings for service {service} live in the file {filename}.",
                 f"# Note: the file {filename} holds the access code {value}."]
        return lines, f"What is the access code held by the file where the settings for service {service} live?", \
            "The access code is", value
    raise ValueError(kind)


def haystack_lines(ids: list[int], tokenizer, start: int, length: int) -> list[str]:
    """Whole lines of a real text, about `length` tokens from token `start` (cut partial first/last lines)."""
    text = tokenizer.decode(ids[start : start + length])
    lines = text.split("\n")
    return lines[1:-1] if len(lines) > 2 else lines


def insert_needles(lines: list[str], needles: list[str], rng: random.Random) -> list[str]:
    """Put the needles, in order, at seeded depths spread over 5%..95% of the haystack."""
    n = len(lines)
    depths = sorted(rng.sample(range(int(0.05 * n), max(int(0.95 * n), int(0.05 * n) + len(needles))), len(needles)))
    out = list(lines)
    for offset, (depth, needle) in enumerate(zip(depths, needles)):
        out.insert(depth + offset, needle)
    return out


class RetrievalSuite(QualitySuite):
    name = "retrieval"
    headline = "logprob_gap"
    metrics = (
        Metric("em", "exact match %", "higher", scale=100),
        Metric("em_dense", "dense exact match %", "higher", scale=100),
        Metric("same_answer", "same answer as dense %", "higher", scale=100),
        Metric("logprob_gap", "answer log-lik gap (policy - dense) nats", "higher"),
        Metric("kl", "KL(dense||policy) on answer tokens", "lower"),
    )

    def build_items(self, size: SuiteSize, tokenizer, seed: int) -> list[Item]:
        docs = [(d.name, tokenizer.encode(d.text, add_special_tokens=False)) for d in corpus(seed)]
        docs = [(n, ids) for n, ids in docs if len(ids) >= size.max_context_tokens + 16]
        if not docs:
            raise NexusError(f"No haystack of {size.max_context_tokens} tokens was found; lower --max-context-tokens.")
        rng = random.Random(f"retrieval-{seed}")
        lo, hi = size.context_tokens, max(size.context_tokens, size.max_context_tokens)
        items = []
        for i in range(size.items):
            kind = TASKS[i % len(TASKS)]
            # lengths cycle over a grid between lo and hi, so every task meets every length
            steps = max(1, min(4, size.items // len(TASKS)))
            length = lo if steps == 1 else lo + (hi - lo) * ((i // len(TASKS)) % steps) // (steps - 1)
            name, ids = docs[i % len(docs)]
            start = rng.randrange(len(ids) - length - 8)
            needles, question, prefix, answer = make_task(kind, rng)
            lines = insert_needles(haystack_lines(ids, tokenizer, start, length), needles, rng)
            prompt = f"{HEADER}{chr(10).join(lines)}\n\nQuestion: {question}\nAnswer: {prefix}"
            prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
            answer_ids = tokenizer.encode(" " + answer, add_special_tokens=False)
            items.append(Item(id=f"ret-{i:03d}-{kind}", context_tokens=len(prompt_ids),
                              data={"task": kind, "doc": name, "haystack_tokens": length, "answer": answer,
                                    "prompt": prompt_ids, "answer_ids": answer_ids}))
        return items

    def observe(self, stream, item: Item):
        stream.append(item.data["prompt"])
        scored = fork(stream)
        logprobs = predictive_logprobs(scored, item.data["answer_ids"])
        del scored
        gen = stream.generate(len(item.data["answer_ids"]) + 4, stop=["\n"])
        found = re.search(r"\d+", gen.text)
        return {"logprobs": logprobs, "text": gen.text, "answer": found.group(0) if found else ""}

    def compare(self, item: Item, budget: int, ref, got) -> dict[str, float]:
        answer = item.data["answer_ids"]
        lp_ref = -float(token_nll(ref["logprobs"], answer).sum())
        lp_got = -float(token_nll(got["logprobs"], answer).sum())
        return {
            "em": float(got["answer"] == item.data["answer"]),
            "em_dense": float(ref["answer"] == item.data["answer"]),
            "same_answer": float(got["answer"] == ref["answer"]),
            "logprob_gap": lp_got - lp_ref,
            "logprob_dense": lp_ref,
            "kl": float(kl_per_position(ref["logprobs"], got["logprobs"]).mean()),
        }
