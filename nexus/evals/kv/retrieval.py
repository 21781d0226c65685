"""Suite 2, retrieval (RULER-style, generated): needles hidden in real code/shell haystacks, asked for at the end.

Each item is one haystack (real source files or command transcripts) holding the needles of four tasks:
- single:   a "special magic number" needle (the only line of that wording).
- multikey: three "locker code" needles with other keys (distractors for each other); one is asked for.
- vartrack: one hop, VAR A = n ... VAR B = VAR A; asked for B's value (three hops were 0/24 for dense).
- bridge:   two hops: "service A's settings live in file B" ... "file B holds code C"; asked for A's code.
            The middle link B never appears in the question, so it is attended only indirectly.
Keys share no word within an item, and each answer prefix repeats the needle's words up to the value.
Every needle is a comment line between real lines. The haystack is streamed first (the policy evicts without
knowing the questions, as an agent's stream would); then each question is asked on its own fork and scored by
exact match of a greedy answer and by the answer's log-likelihood (teacher forced), beside dense's on the same item.
One prefill serves four questions; the question is the unit of the intervals.
"""

from __future__ import annotations

import random
import re

from nexus.evals.kv.config import SuiteSize
from nexus.evals.kv.corpus import corpus, split_seed
from nexus.evals.kv.probe import fork, kl_per_position, predictive_logprobs, token_nll
from nexus.evals.kv.suite import Item, Metric, QualitySuite
from nexus.errors import NexusError

TASKS = ("single", "multikey", "vartrack", "bridge")
WORDS_A = ("amber", "brisk", "calm", "dusty", "eager", "faint", "gentle", "hollow", "icy", "jolly", "keen", "lucky",
           "mellow", "noble", "olive", "proud", "quiet", "rapid", "silver", "tidy", "vivid", "witty", "young", "zesty")
WORDS_B = ("anchor", "badger", "canyon", "dolphin", "ember", "falcon", "garden", "harbor", "island", "jungle",
           "kettle", "lantern", "meadow", "nectar", "orchid", "pepper", "quartz", "river", "saddle", "tunnel",
           "velvet", "walnut", "yonder", "zephyr")
MULTIKEYS = 3  # the target and two distractors of the same wording
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


def _fresh_key(rng: random.Random, used: set[str]) -> str:
    """A key neither of whose words any other key of the item uses (`used` holds keys and words): the 135M model
    confuses keys that share a word (measured: it copies the value of "olive-saddle" when asked "olive-badger")."""
    while True:
        a, b = rng.choice(WORDS_A), rng.choice(WORDS_B)
        if a not in used and b not in used:
            used.update((a, b, f"{a}-{b}"))
            return f"{a}-{b}"


def make_task(kind: str, rng: random.Random, used: set[str] | None = None) -> tuple[list[str], str, str, str]:
    """(needle lines, question, answer prefix, answer); `used` keeps keys (and their words) unique across the tasks
    of one item. Each task has its own wording, and the answer prefix repeats the needle's words up to the value,
    so the prompt ends where the value starts: a format the 135M model can copy from (docs/results.md)."""
    used = set() if used is None else used
    number = lambda: str(rng.randrange(100000, 1000000))  # noqa: E731
    if kind == "single":
        key, value = _fresh_key(rng, used), number()
        return ([f"# Note: the special magic number for {key} is {value}."],
                f"What is the special magic number for {key}?", f"the special magic number for {key} is", value)
    if kind == "multikey":
        keys = [_fresh_key(rng, used) for _ in range(MULTIKEYS)]
        values = [number() for _ in keys]
        target = rng.randrange(len(keys))
        lines = [f"# Note: the locker code of {k} is {v}." for k, v in zip(keys, values)]
        key = keys[target]
        return lines, f"What is the locker code of {key}?", f"the locker code of {key} is", values[target]
    if kind == "vartrack":
        names = [_ident(rng, used) for _ in range(2)]
        value = number()
        lines = [f"# VAR {names[0]} = {value}", f"# VAR {names[1]} = VAR {names[0]}"]
        return lines, f"Following the VAR assignments, what number does VAR {names[-1]} hold?", \
            f"VAR {names[-1]} holds the number", value
    if kind == "bridge":
        service, filename, value = _fresh_key(rng, used), f"{_fresh_key(rng, used)}.cfg", number()
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


def insert_needles(lines: list[str], needles: list[str], rng: random.Random,
                   order: list[int] | None = None) -> list[str]:
    """Put the needles at seeded depths over 5%..95% of the haystack; `order` (a permutation of the needles)
    says which needle goes to which depth, from the shallowest (default: list order). Answers never depend on
    the order of a chain's lines, only on their content."""
    n = len(lines)
    lo = int(0.05 * n)
    slots = sorted(rng.sample(range(lo, max(int(0.95 * n), lo + len(needles))), len(needles)))
    order = order if order is not None else list(range(len(needles)))
    out = list(lines)
    for offset, (slot, idx) in enumerate(zip(slots, order)):
        out.insert(slot + offset, needles[idx])
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

    def build_items(self, size: SuiteSize, tokenizer, seed: int, split: str = "all") -> list[Item]:
        docs = [(d.name, tokenizer.encode(d.text, add_special_tokens=False)) for d in corpus(seed, split)]
        docs = [(n, ids) for n, ids in docs if len(ids) >= size.max_context_tokens + 16]
        if not docs:
            raise NexusError(f"No haystack of {size.max_context_tokens} tokens was found; lower --max-context-tokens.")
        rng = random.Random(split_seed("retrieval", seed, split))
        lo, hi = size.context_tokens, max(size.context_tokens, size.max_context_tokens)
        steps = max(1, min(4, size.items))
        items = []
        for i in range(size.items):
            # haystack lengths cycle over a grid between lo and hi
            length = lo if steps == 1 else lo + (hi - lo) * (i % steps) // (steps - 1)
            name, ids = docs[i % len(docs)]
            start = rng.randrange(len(ids) - length - 8)
            used: set[str] = set()
            tasks = [make_task(kind, rng, used) for kind in TASKS]
            needles = [line for task in tasks for line in task[0]]
            order = list(range(len(needles)))
            rng.shuffle(order)  # the tasks' needles interleave over the haystack
            placed = insert_needles(haystack_lines(ids, tokenizer, start, length), needles, rng, order)
            haystack = f"{HEADER}{chr(10).join(placed)}\n"
            haystack_ids = tokenizer.encode(haystack, add_special_tokens=False)
            questions = []
            for kind, (_, question, prefix, answer) in zip(TASKS, tasks):
                q_ids = tokenizer.encode(f"\nQuestion: {question}\nAnswer: {prefix}", add_special_tokens=False)
                questions.append({"task": kind, "answer": answer, "question": q_ids,
                                  "answer_ids": tokenizer.encode(" " + answer, add_special_tokens=False)})
            items.append(Item(id=f"ret-{i:03d}", context_tokens=len(haystack_ids),
                              data={"doc": name, "haystack_tokens": length, "haystack": haystack_ids,
                                    "questions": questions}))
        return items

    def observe(self, stream, item: Item):
        stream.append(item.data["haystack"])
        out = []
        for q in item.data["questions"]:
            asked = fork(stream)
            asked.append(q["question"])
            scored = fork(asked)
            logprobs = predictive_logprobs(scored, q["answer_ids"])
            del scored
            gen = asked.generate(len(q["answer_ids"]) + 4, stop=["\n"])
            found = re.search(r"\d+", gen.text)
            out.append({"logprobs": logprobs, "text": gen.text, "answer": found.group(0) if found else ""})
        return out

    def compare(self, item: Item, budget: int, ref, got) -> dict[str, list[float]]:
        m: dict[str, list[float]] = {k: [] for k in ("em", "em_dense", "same_answer", "logprob_gap",
                                                      "logprob_dense", "kl")}
        for q, r, g in zip(item.data["questions"], ref, got):
            lp_ref = -float(token_nll(r["logprobs"], q["answer_ids"]).sum())
            lp_got = -float(token_nll(g["logprobs"], q["answer_ids"]).sum())
            m["em"].append(float(g["answer"] == q["answer"]))
            m["em_dense"].append(float(r["answer"] == q["answer"]))
            m["same_answer"].append(float(g["answer"] == r["answer"]))
            m["logprob_gap"].append(lp_got - lp_ref)
            m["logprob_dense"].append(lp_ref)
            m["kl"].append(float(kl_per_position(r["logprobs"], g["logprobs"]).mean()))
        for q, gap, em in zip(item.data["questions"], m["logprob_gap"], m["em"]):  # per task, for the JSON
            m.setdefault(f"logprob_gap_{q['task']}", []).append(gap)
            m.setdefault(f"em_{q['task']}", []).append(em)
        return m
