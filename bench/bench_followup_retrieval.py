"""Retrieval inside a conversation: LoCoMo questions asked as follow-ups, with and without
:func:`memroute.retrieval.followup.retrieval_query`.

    python bench/bench_followup_retrieval.py [--locomo PATH/locomo10.json] [--samples conv-26 ...]

Data: LoCoMo (categories 1-4, questions with gold evidence); each conversation is one user whose
memories are its turn-pairs (``memroute.datasets.locomo.turn_pairs``), embedded once (MiniLM from
the offline assets) into one Milvus Lite file in a temporary directory; the retriever is the
router's (``HybridRetriever``, conf/retrieval/hybrid.yaml). Metric: evidence turn-pair Recall@5 and
@10 (fraction of the question's gold turn-pairs in the top k), mean over questions.

Follow-up cases: every question that names exactly one of the conversation's two speakers becomes
a follow-up by replacing the name with a pronoun: ``X's`` -> his/her, ``X`` after a preposition or
a verb -> him/her, else he/she (they/them/their if the speaker's gender is unknown). A name at the end of a clause
or after an -ing word is an object too. A speaker's gender is read off the dataset's own questions: the majority of she/her/hers vs he/him/his in the
questions naming only that speaker. The history is ``[system, user: Q', assistant: A']`` where Q'
is the previous question of the same conversation naming the same speaker (and not the other; the
next one for the first) and A' its gold answer. So the follow-up's antecedent (the name) is in the
history, but Q' is about something else: its topic words are a distractor, as in a real chat
where a new question about the same person follows.

Rows: (a) the original question, no history (the upper bound); (b) the follow-up alone (what the
router searched with before); (c) ``retrieval_query(follow-up, history)`` with the default rule
and alternatives; (d) the original (self-contained) questions passed with the same history through
each rule, to show what a rule costs questions that need no help; (e) topic ellipsis: every
question, then a short follow-up ("Are you sure?", "Tell me more.", "Why, though?") after
``[user: the question, assistant: its gold answer]``, scored on the question's evidence (with
``assistant=True`` the gold answer is in the query: an optimistic row, marked).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info

from memroute import build
from memroute.config import AssetsConfig, EmbedderConfig, to_object
from memroute.config.schema import MemoryConfig, RetrievalConfig
from memroute.datasets.locomo import evidence_pair_ids, load_locomo, turn_pairs
from memroute.datasets.records import QA, Conversation
from memroute.eval.metrics import recall_at_k
from memroute.retrieval.followup import retrieval_query
from memroute.types import Message, TurnPair

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LOCOMO = os.environ.get("MEMROUTE_LOCOMO_PATH", str(REPO.parent / "shared/data/locomo/locomo10.json"))
SYSTEM = Message("system", "You are a helpful assistant with a memory of past conversations.")
ELLIPSES = ("Are you sure?", "Tell me more.", "Why, though?")

# ---------------------------------------------------------------------------- follow-ups
FEMALE, MALE = ("she", "her", "her"), ("he", "him", "his")  # subject, object, possessive
THEY = ("they", "them", "their")
# A name right after one of these is an object (him/her), else a subject (he/she).
_OBJECT_AFTER = frozenset(
    str.split("""
    to for with about from by of at on in into like than between among without toward towards
    give gave given tell told help helped helps inspire inspired inspires make made makes motivate
    motivated motivates ask asked asks meet met visit visited visits call called calls bring
    brought support supported supports encourage encouraged encourages teach taught teaches
    show showed shown send sent surprise surprised remind reminded invite invited thank thanked
    """)
)


def names_in(text: str, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", text) is not None


def speaker_genders(conv: Conversation) -> dict[str, tuple[str, str, str]]:
    """Each speaker's pronouns by the majority of she/her/hers vs he/him/his in the dataset's
    questions naming only that speaker (they/them/their on a tie)."""
    out = {}
    for name, other in ((conv.speaker_a, conv.speaker_b), (conv.speaker_b, conv.speaker_a)):
        fem = masc = 0
        for qa in conv.qa:
            if names_in(qa.question, name) and not names_in(qa.question, other):
                words = re.findall(r"[a-z]+", qa.question.lower())
                fem += sum(w in ("she", "her", "hers") for w in words)
                masc += sum(w in ("he", "him", "his") for w in words)
        out[name] = FEMALE if fem > masc else MALE if masc > fem else THEY
    return out


def pronominalize(question: str, name: str, pronouns: tuple[str, str, str]) -> str:
    """``question`` with every mention of ``name`` replaced by the matching pronoun."""
    subj, obj, poss = pronouns

    def repl(m: re.Match[str]) -> str:
        before = question[: m.start()].split()
        prev = before[-1].lower().strip(",;:") if before else ""
        clause_end = re.match(r"\s*([?.,!;:]|$)", question[m.end() :]) is not None
        if m.group(2):
            word = poss
        elif prev in _OBJECT_AFTER or prev.endswith("ing") or clause_end:
            word = obj  # "to Caroline", "meeting John", "... adopt Ned?"
        else:
            word = subj
        at_start = not before or before[-1].endswith((".", "?", "!"))
        return word.capitalize() if at_start else word

    # "X's" and the slip "X' dogs" are possessive
    return re.sub(rf"\b({re.escape(name)})(['\u2019]s\b|['\u2019](?=\s))?", repl, question)


@dataclass
class Case:
    user_id: str
    original: str
    followup: str  # the pronoun version ("" if the question names no single speaker)
    history: list[Message]  # for the follow-up: [system, user: Q', assistant: A']
    gold: tuple[int, ...]
    answer: str


def build_cases(convs: Sequence[Conversation]) -> tuple[list[TurnPair], list[Case], list[Case], dict[str, dict]]:
    """(all turn-pairs, follow-up cases, every question with gold (for the ellipsis rows),
    the pronouns per conversation and speaker)."""
    pairs: list[TurnPair] = []
    followups: list[Case] = []
    everyone: list[Case] = []
    genders: dict[str, dict] = {}
    for conv in convs:
        records = turn_pairs(conv)
        pairs.extend(r.pair for r in records)
        genders[conv.sample_id] = g = speaker_genders(conv)
        gold_of = {qa.qid: evidence_pair_ids(qa, records) for qa in conv.qa}
        only: dict[str, list[QA]] = {conv.speaker_a: [], conv.speaker_b: []}
        for qa in conv.qa:
            a, b = names_in(qa.question, conv.speaker_a), names_in(qa.question, conv.speaker_b)
            if a != b:
                only[conv.speaker_a if a else conv.speaker_b].append(qa)
        for qa in conv.qa:
            gold = gold_of[qa.qid]
            if not gold:
                continue
            everyone.append(Case(conv.sample_id, qa.question, "", [], gold, str(qa.answer)))
            speaker = next((s for s, qs in only.items() if qa in qs), None)
            if speaker is None or len(only[speaker]) < 2:
                continue
            same = only[speaker]
            i = same.index(qa)
            prior = same[i - 1] if i > 0 else same[1]
            history = [SYSTEM, Message("user", prior.question), Message("assistant", str(prior.answer))]
            followups.append(Case(conv.sample_id, qa.question, pronominalize(qa.question, speaker, g[speaker]),
                                  history, gold, str(qa.answer)))
    return pairs, followups, everyone, genders


# ---------------------------------------------------------------------------- retrieval
class CachedEncoder:
    """The real encoder, each distinct text embedded once (variants share many query texts)."""

    def __init__(self, real) -> None:  # type: ignore[no-untyped-def]
        self.real, self.dim = real, real.dim
        self._vectors: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            for t, v in zip(missing, self.real.encode(missing)):
                self._vectors[t] = v
        return np.stack([self._vectors[t] for t in texts]).astype(np.float32)


def recalls(retriever, cases: Sequence[Case], queries: Sequence[str], ks: Sequence[int]) -> dict[int, list[float]]:  # type: ignore[no-untyped-def]
    out: dict[int, list[float]] = {k: [] for k in ks}
    for lo in range(0, len(cases), 256):
        chunk, qs = cases[lo : lo + 256], queries[lo : lo + 256]
        ranked = retriever.retrieve_many([c.user_id for c in chunk], list(qs), top_k=max(ks))
        for case, hits in zip(chunk, ranked):
            ids = [h.memory.id for h in hits]
            for k in ks:
                out[k].append(recall_at_k(ids, case.gold, k))
    return out


# name -> keyword arguments of retrieval_query
RULES: dict[str, dict[str, object]] = {
    "auto, names (default)": {},
    "auto, first name only": {"max_names": 1},
    "auto, previous user turn": {"referent": "turns"},
    "auto, previous user + assistant turns": {"referent": "turns", "assistant": True},
    "always: + previous user turn": {"when": "always"},
    "always: + previous user + assistant turns": {"when": "always", "assistant": True},
}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--locomo", default=DEFAULT_LOCOMO)
    ap.add_argument("--samples", nargs="*", default=None, help="sample ids (default: all)")
    ap.add_argument("--retrieval", type=Path, default=REPO / "conf/retrieval/hybrid.yaml")
    ap.add_argument("--ks", type=int, nargs="+", default=[5, 10])
    ap.add_argument("--examples", type=int, default=3, help="follow-ups printed as examples")
    args = ap.parse_args(argv)
    from omegaconf import OmegaConf

    started = time.perf_counter()
    info = machine_info(("torch", "pymilvus", "milvus-lite", "bm25s", "sentence-transformers"))
    print("machine:", ", ".join(f"{k}={v}" for k, v in info.items()))
    rcfg = to_object(OmegaConf.load(args.retrieval), RetrievalConfig)
    convs = load_locomo(args.locomo, sample_ids=args.samples, categories=(1, 2, 3, 4))
    pairs, followups, everyone, genders = build_cases(convs)
    print(f"data: {len(convs)} conversations, {len(pairs)} turn-pairs, {len(everyone)} questions with gold, "
          f"{len(followups)} follow-up cases; retrieval {args.retrieval.relative_to(REPO)} "
          f"({rcfg.strategy}, {rcfg.fusion}, alpha {rcfg.alpha})")
    print("pronouns: " + "; ".join(f"{sid} " + ", ".join(f"{n} {p[0]}" for n, p in g.items())
                                   for sid, g in genders.items()))
    for c in followups[: args.examples]:
        print(f"  e.g. {c.original!r} -> {c.followup!r} after {c.history[1].content!r}")

    tmp = Path(tempfile.mkdtemp(prefix="bench_followup_"))
    try:
        encoder = CachedEncoder(build.encoder(EmbedderConfig(), build.asset_store(AssetsConfig())))
        store = build.store(MemoryConfig(uri=str(tmp / "memories.db"), collection="followup"), encoder.dim)
        retriever = build.retriever(encoder, store, rcfg)
        t = time.perf_counter()
        retriever.remember(pairs)
        store.flush()
        embed_s = time.perf_counter() - t
        print(f"memories embedded and stored in {embed_s:.0f}s")

        ks = args.ks
        rows: list[tuple[str, str, int, dict[int, float], float]] = []

        def row(section: str, name: str, cases: Sequence[Case], queries: Sequence[str]) -> None:
            r = recalls(retriever, cases, queries, ks)
            idx26 = [i for i, c in enumerate(cases) if c.user_id == "conv-26"]
            r26 = statistics.fmean(r[ks[0]][i] for i in idx26) if idx26 else float("nan")
            rows.append((section, name, len(cases), {k: statistics.fmean(v) for k, v in r.items()}, r26))

        t = time.perf_counter()
        fu = followups
        row("(a) original question, no history", "upper bound", fu, [c.original for c in fu])
        row("(b) follow-up alone", "today", fu, [c.followup for c in fu])
        for name, kw in RULES.items():
            row("(c) retrieval_query(follow-up, history)", name, fu,
                [retrieval_query(c.followup, c.history, **kw) for c in fu])  # type: ignore[arg-type]
        for name, kw in RULES.items():
            row("(d) original question + the same history", name, fu,
                [retrieval_query(c.original, c.history, **kw) for c in fu])  # type: ignore[arg-type]
        ev = everyone
        short = [ELLIPSES[i % len(ELLIPSES)] for i in range(len(ev))]
        hist = [[SYSTEM, Message("user", c.original), Message("assistant", c.answer)] for c in ev]
        row("(e) short follow-up after the question", "original question (upper bound)", ev, [c.original for c in ev])
        row("(e) short follow-up after the question", "follow-up alone", ev, short)
        for name, kw in (("auto (default)", {}), ("auto + assistant turn (gold answer: optimistic)",
                                                   {"assistant": True})):
            row("(e) short follow-up after the question", name, ev,
                [retrieval_query(s, h, **kw) for s, h in zip(short, hist)])  # type: ignore[arg-type]
        query_s = time.perf_counter() - t

        # The rule's own cost, per call.
        t = time.perf_counter()
        reps = 20
        for _ in range(reps):
            for c in fu:
                retrieval_query(c.followup, c.history)
        per_call_us = 1e6 * (time.perf_counter() - t) / (reps * len(fu))
        changed = sum(retrieval_query(c.original, c.history) != c.original for c in fu)
        store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    kcols = " | ".join(f"Recall@{k}" for k in ks)
    print(f"\n## follow-up retrieval, {len(convs)} LoCoMo conversations (evidence turn-pair recall)\n")
    print(f"| rows | query | n | {kcols} | conv-26 Recall@{ks[0]} |")
    print("|---|---|---|" + "---|" * len(ks) + "---|")
    for section, name, n, r, r26 in rows:
        vals = " | ".join(f"{r[k]:.3f}" for k in ks)
        print(f"| {section} | {name} | {n} | {vals} | {r26:.3f} |")
    print(f"\nretrieval_query: {per_call_us:.1f} us per call (follow-up cases, default rule); "
          f"the default rule changed {changed} of {len(fu)} self-contained originals")
    print(f"runtime: {time.perf_counter() - started:.0f}s (embedding {len(pairs)} turn-pairs {embed_s:.0f}s, "
          f"queries {query_s:.0f}s); load average (1 min) at start {info['load_avg_1m_at_start']}, "
          f"at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
