"""Suite 4, long stream: facts planted early in a long real haystack streamed chunk by chunk; do they survive?

Each item is one real code/shell haystack (corpus documents) with three facts at distinct keys:
- single: "the access code for K is N", planted at 5-25% of the stream, asked at the end.
- twohop: "service K keeps its settings in file F" early, "the file F holds the license key N" mid-stream;
          the question names only K, so the answer needs the bridge line.
- reref:  "the build number for K is N" early, and K mentioned again mid-stream in an unrelated-looking TODO
          line that never repeats N (a later query that touches the key: attention can re-find the fact).
The suite feeds the haystack itself, one stream chunk at a time, and after every chunk that lands past the budget
(an eviction event for an evicting policy; the same schedule for dense) reads which original positions each cache
layer still stores: the survival of each planted line. Then each question is asked on its own fork and scored like
retrieval: the answer's log-likelihood teacher forced (headline: policy minus dense) and greedy exact match.
A second pass ("qfirst") puts the questions in front of the haystack, which is what re-prefilling a transcript with
the task at its head gives a question-aware policy: the gap it closes is what `reprefill` can hope to recover.
"""

from __future__ import annotations

import random

import torch

from nexus.evals.kv.config import SuiteSize
from nexus.evals.kv.corpus import corpus, split_seed
from nexus.evals.kv.probe import feed_scored, fork, token_nll
from nexus.evals.kv.retrieval import HEADER, _key, haystack_lines
from nexus.evals.kv.suite import Item, Metric, QualitySuite
from nexus.errors import NexusError

KINDS = ("single", "twohop", "reref")
EARLY, BRIDGE, MENTION = (0.05, 0.25), (0.40, 0.60), (0.45, 0.75)  # depths, as fractions of the haystack
PLANTED_TOKENS = 96  # about what the five planted lines add: streams come out near --context-tokens
QFIRST_HEAD = "You will be asked these questions about the text below:\n"


def plant(kind: str, rng: random.Random, used: set[str]) -> tuple[list[dict], str, str, str]:
    """(lines to plant with their role and zone, question, answer prefix, answer); answers are 6-digit numbers."""
    key, value = _key(rng, used), str(rng.randrange(100000, 1000000))
    if kind == "single":
        return ([{"role": "single", "fact": True, "zone": EARLY,
                  "text": f"# Note: the access code for {key} is {value}."}],
                f"What is the access code for {key}?", f"The access code for {key} is", value)
    if kind == "twohop":
        filename = f"{_key(rng, used)}.cfg"
        return ([{"role": "twohop_key", "fact": True, "zone": EARLY,
                  "text": f"# Note: service {key} keeps its settings in file {filename}."},
                 {"role": "twohop_bridge", "fact": True, "zone": BRIDGE,
                  "text": f"# Note: the file {filename} holds the license key {value}."}],
                f"What license key is held by the file where service {key} keeps its settings?",
                "The license key is", value)
    if kind == "reref":
        return ([{"role": "reref", "fact": True, "zone": EARLY,
                  "text": f"# Note: the build number for {key} is {value}."},
                 {"role": "reref_mention", "fact": False, "zone": MENTION,
                  "text": f"# TODO: check {key} before release"}],
                f"What is the build number for {key}?", f"The build number for {key} is", value)
    raise ValueError(kind)


def place(lines: list[str], planted: list[dict], rng: random.Random) -> list[tuple[int, dict]]:
    """A distinct line slot per planted line, drawn in its zone by character depth (a proxy for token depth)."""
    ends, total = [], 0
    for line in lines:
        total += len(line) + 1
        ends.append(total)
    taken: set[int] = set()
    out = []
    for p in planted:
        lo, hi = (next(i for i, e in enumerate(ends) if e >= f * total) for f in p["zone"])
        free = [i for i in range(lo, max(hi, lo + 1)) if i not in taken] or [i for i in range(len(lines))
                                                                          if i not in taken]
        slot = rng.choice(free)
        taken.add(slot)
        out.append((slot, p))
    return sorted(out, key=lambda sp: sp[0])


def encode_planted(tokenizer, lines: list[str], placed: list[tuple[int, dict]]) -> tuple[list[int], list[dict]]:
    """Token ids of HEADER + lines with the planted lines inserted before their slots, and each planted line's
    token span. Each planted line is encoded on its own (its newline goes with the text after it), so its span
    holds exactly its tokens; the text between planted lines is encoded whole, as the haystack reads."""
    ids: list[int] = []
    spans = []
    text, prev = HEADER, 0
    for slot, p in placed:
        text += "".join(f"{line}\n" for line in lines[prev:slot])
        ids += tokenizer.encode(text, add_special_tokens=False)
        line_ids = tokenizer.encode(p["text"], add_special_tokens=False)
        spans.append({**{k: v for k, v in p.items() if k != "zone"}, "span": [len(ids), len(ids) + len(line_ids)]})
        ids += line_ids
        text, prev = "\n", slot
    ids += tokenizer.encode(text + "".join(f"{line}\n" for line in lines[prev:]), add_special_tokens=False)
    return ids, spans


def stored_fraction(stream, lo: int, hi: int) -> float:
    """Fraction of positions lo..hi-1 still stored, mean over layers (per-head layers: mean over their heads)."""
    want = torch.arange(lo, hi)
    fracs = []
    for layer in stream.cache.layers:
        pos = layer.positions.cpu()
        rows = pos[None] if pos.dim() == 1 else pos  # per-head padding repeats a real index: isin ignores it
        fracs.append(float(torch.stack([torch.isin(want, row).float().mean() for row in rows]).mean()))
    return sum(fracs) / len(fracs)


def score_answer(stream, answer_ids: list[int]) -> dict:
    """Answer log-likelihood (teacher forced) and greedy exact match from the same pass: greedy decoding starts
    with the answer exactly when the argmax at every answer position is the answer's token and the token after
    it is not a digit; that saves a fork and a decode per question (forks of a long dense cache cost seconds)."""
    rows = feed_scored(stream, answer_ids)  # [len + 1, V]: the last row predicts the token after the answer
    greedy = rows.argmax(-1).tolist()
    after = stream.tokenizer.decode(greedy[-1:])
    em = greedy[:-1] == list(answer_ids) and not after[:1].isdigit()
    return {"lp": -float(token_nll(rows[:-1], answer_ids).sum()), "em": float(em),
            "greedy": stream.tokenizer.decode(greedy)}


class LongStreamSuite(QualitySuite):
    name = "longstream"
    headline = "logprob_gap"
    metrics = (
        Metric("logprob_gap", "answer log-lik gap (policy - dense) nats", "higher"),
        Metric("logprob", "answer log-lik nats", "higher"),
        Metric("logprob_dense", "dense answer log-lik nats", "higher"),
        Metric("em", "exact match %", "higher", scale=100),
        Metric("em_dense", "dense exact match %", "higher", scale=100),
        Metric("survival", "final fact survival %", "higher", scale=100),
        Metric("survival_auc", "fact survival over events %", "higher", scale=100),
        Metric("logprob_gap_qfirst", "question-first log-lik gap nats", "higher"),
    )

    def build_items(self, size: SuiteSize, tokenizer, seed: int, split: str = "all") -> list[Item]:
        length = size.context_tokens
        docs = [(d.name, tokenizer.encode(d.text, add_special_tokens=False)) for d in corpus(seed, split)]
        docs = [(n, ids) for n, ids in docs if len(ids) >= length + 16]
        if not docs:
            raise NexusError(f"No haystack of {length} tokens was found; lower --context-tokens.")
        rng = random.Random(split_seed("longstream", seed, split))
        items = []
        for i in range(size.items):
            name, ids = docs[i % len(docs)]
            cut = max(64, length - PLANTED_TOKENS)
            lines = haystack_lines(ids, tokenizer, rng.randrange(len(ids) - cut - 8), cut)
            used: set[str] = set()
            facts = [plant(kind, rng, used) for kind in KINDS]
            placed = place(lines, [p for f in facts for p in f[0]], rng)
            haystack, planted = encode_planted(tokenizer, lines, placed)
            questions = [{"kind": kind, "answer": answer,
                          "question": tokenizer.encode(f"\nQuestion: {q}\nAnswer: {prefix}", add_special_tokens=False),
                          "answer_ids": tokenizer.encode(" " + answer, add_special_tokens=False)}
                         for kind, (_, q, prefix, answer) in zip(KINDS, facts)]
            qfirst = QFIRST_HEAD + "".join(f"- {q}\n" for _, q, _, _ in facts) + "\n"
            items.append(Item(id=f"long-{i:03d}", context_tokens=len(haystack),
                              data={"doc": name, "haystack": haystack, "planted": planted, "questions": questions,
                                    "qfirst_prefix": tokenizer.encode(qfirst, add_special_tokens=False)}))
        return items

    def _stream(self, stream, item: Item, prefix: list[int], curves: bool) -> dict:
        """Feed prefix + haystack a chunk at a time; survival of each fact line after every chunk past the budget
        (only once the line is in), then ask every question on its own fork."""
        facts = [p for p in item.data["planted"] if p["fact"]]
        survival: list[list[float]] = [[] for _ in facts]
        if prefix:
            stream.append(prefix)
        ids, off = item.data["haystack"], len(prefix)
        for start in range(0, len(ids), stream.chunk_size):
            stream.append(ids[start : start + stream.chunk_size])
            if not curves or stream.tokens_seen <= stream.budget:
                continue
            for curve, p in zip(survival, facts):
                if start + stream.chunk_size >= p["span"][1]:
                    curve.append(stored_fraction(stream, off + p["span"][0], off + p["span"][1]))
        final = [stored_fraction(stream, off + p["span"][0], off + p["span"][1]) for p in facts]
        answers = []
        for n, q in enumerate(item.data["questions"]):
            asked = stream if n == len(item.data["questions"]) - 1 else fork(stream)  # the last needs no copy
            asked.append(q["question"])
            answers.append(score_answer(asked, q["answer_ids"]))
            del asked
        return {"answers": answers, "survival": survival, "final": final}

    def observe(self, stream, item: Item):
        blank = fork(stream)  # the question-first pass gets a stream just like this one, still empty
        main = self._stream(stream, item, [], curves=True)
        main["qfirst"] = self._stream(blank, item, item.data["qfirst_prefix"], curves=False)
        return main

    def detail(self, item: Item, got) -> dict:
        roles = [p["role"] for p in item.data["planted"] if p["fact"]]
        return {"survival_curves": dict(zip(roles, got["survival"])),
                "greedy": [a["greedy"] for a in got["answers"]],
                "greedy_qfirst": [a["greedy"] for a in got["qfirst"]["answers"]]}

    def compare(self, item: Item, budget: int, ref, got) -> dict[str, list[float]]:
        m: dict[str, list[float]] = {k: [] for k in ("logprob_gap", "logprob", "logprob_dense", "em", "em_dense",
                                                      "survival", "survival_auc", "logprob_gap_qfirst", "em_qfirst",
                                                      "survival_qfirst")}
        for q, r, g, rq, gq in zip(item.data["questions"], ref["answers"], got["answers"],
                                   ref["qfirst"]["answers"], got["qfirst"]["answers"]):
            m["logprob_gap"].append(g["lp"] - r["lp"])
            m["logprob"].append(g["lp"])
            m["logprob_dense"].append(r["lp"])
            m["em"].append(g["em"])
            m["em_dense"].append(r["em"])
            m["logprob_gap_qfirst"].append(gq["lp"] - rq["lp"])
            m["em_qfirst"].append(gq["em"])
            m.setdefault(f"logprob_gap_{q['kind']}", []).append(g["lp"] - r["lp"])
            m.setdefault(f"em_{q['kind']}", []).append(m["em"][-1])
        facts = [p for p in item.data["planted"] if p["fact"]]
        for p, curve, final, final_q in zip(facts, got["survival"], got["final"], got["qfirst"]["final"]):
            m["survival"].append(final)
            m["survival_auc"].append(sum(curve) / len(curve) if curve else final)
            m["survival_qfirst"].append(final_q)
            m.setdefault(f"survival_{p['role'].split('_')[0]}", []).append(final)  # twohop: both of its lines
        return m
