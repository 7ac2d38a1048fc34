"""Replay traces by source: :func:`generate_trace`; here ``locomo`` and ``longmemeval``.

A dataset fixes what is said and asked, so the trace only orders it in time: each conversation
(LoCoMo sample, LongMemEval question) is one user whose dataset turns are ``statement`` s at their
sessions' dates (a minute apart), followed by its questions -- each first as ``novel`` (the answer
as the reference), then ``repeat`` s and rule-based ``paraphrase`` s in the configured mix, spread
over ``days`` after the history. Users are merged on ``ts`` like the synthetic trace's;
``general_share`` and ``update_share`` do not apply; ``num_users`` caps the conversations,
``num_requests`` (0: all) the rows.
"""

from __future__ import annotations

import heapq
import itertools
import random
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memroute.config.make_trace import MakeTraceConfig
from memroute.datasets.generate.trace import (
    DAY_S,
    Fact,
    _deficit_pick,
    _times,
    number,
    synthetic_trace,
)
from memroute.datasets.records import QA, Conversation, LMEQuestion, TraceRequest
from memroute.types import Message

_TURN_GAP_S = 60
Item = tuple[float, dict[str, Any]]


def _row(ts: float, cfg: MakeTraceConfig, uid: str, session: str, text: str, kind: str,
         fact_id: str, refs: tuple[str, ...] = (), stale: tuple[str, ...] = ()) -> Item:
    return ts, {"ts": float(ts), "tenant": cfg.tenant, "user_id": uid, "session_id": session,
                "messages": (Message(role="user", content=text),), "references": refs,
                "stale_references": stale, "kind": kind, "fact_id": fact_id,
                "domain": "personal"}


def _questions(cfg: MakeTraceConfig, uid: str, qas: list[tuple[str, str, str, str | None]],
               after: float, rng: random.Random) -> Iterator[Item]:
    """Novel questions (id, text, answer, stale answer) with their repeats and paraphrases."""
    shares = {k: getattr(cfg.mix, k) / 100 for k in ("novel", "repeat", "paraphrase")}
    total = round(len(qas) * 100 / cfg.mix.novel) if qas else 0
    start = (int(after) // DAY_S + 1) * DAY_S  # from the next day on
    pending = list(qas)
    asked: list[Fact] = []
    counts: Counter[str] = Counter()
    for n, (ts, day) in enumerate(_times(rng, total, cfg.days, start)):
        feasible = (["novel"] if pending else []) + (["repeat", "paraphrase"] if asked else [])
        kind = _deficit_pick(rng, shares, counts, n, feasible) or feasible[0]
        counts[kind] += 1
        if kind == "novel":
            qid, text, answer, stale = pending.pop(0)
            template = text.replace("{", "{{").replace("}", "}}")
            fact = Fact(qid, "personal", (template,), {}, answer,
                        stale=[stale] if stale else [])
            asked.append(fact)
        else:
            fact = rng.choice(asked)
        query = fact.ask(rng, kind)
        yield _row(ts, cfg, uid, f"{uid}-q{day + 1:03d}", query, kind, fact.fact_id,
                   (fact.value,), tuple(fact.stale))


def _locomo_user(cfg: MakeTraceConfig, conv: Conversation) -> Iterator[Item]:
    uid = conv.sample_id
    rng = random.Random(f"trace:{cfg.seed}:{uid}")
    last = 0.0
    for session in conv.sessions:
        for k, turn in enumerate(session.turns):
            last = session.date_time + k * _TURN_GAP_S
            yield _row(last, cfg, uid, f"{uid}-s{session.index}", turn.render(), "statement",
                       f"{uid}/{turn.dia_id}")
    qas = [(qa.qid, qa.question, qa.answer, qa.stale_answer) for qa in conv.qa if _answered(qa)]
    yield from _questions(cfg, uid, qas, last, rng)


def _answered(qa: QA) -> bool:
    return bool(qa.answer and qa.answer.strip())


def _lme_user(cfg: MakeTraceConfig, q: LMEQuestion) -> Iterator[Item]:
    from memroute.datasets.longmemeval import lme_user_id

    uid = lme_user_id(q.question_id)
    rng = random.Random(f"trace:{cfg.seed}:{uid}")
    last = 0.0
    order = sorted(range(len(q.haystack_sessions)), key=lambda i: (q.haystack_dates[i], i))
    for i in order:
        users = [t for t in q.haystack_sessions[i] if t.role == "user" and t.content.strip()]
        for k, turn in enumerate(users):
            last = max(last, q.haystack_dates[i] + k * _TURN_GAP_S)
            yield _row(last, cfg, uid, f"{uid}-{q.haystack_session_ids[i]}", turn.content,
                       "statement", f"{uid}/{q.haystack_session_ids[i]}")
    after = max(last, q.question_date - DAY_S)
    yield from _questions(cfg, uid, [(q.question_id, q.question, q.answer, None)], after, rng)


def _conversations(cfg: MakeTraceConfig) -> list[Conversation]:
    from memroute.datasets.locomo import load_locomo

    assert cfg.path
    return load_locomo(cfg.path)[: cfg.num_users]


def _lme_questions(cfg: MakeTraceConfig) -> list[LMEQuestion]:
    from memroute.datasets.longmemeval import load_longmemeval

    if cfg.path:
        return load_longmemeval(cfg.path, include_abstention=False, limit=cfg.num_users)
    from memroute.datasets.generate.longmemeval import generate_longmemeval, write_json

    records = generate_longmemeval(size="small", seed=cfg.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_json(records, Path(tmp) / "lme.json")
        return load_longmemeval(path, include_abstention=False, limit=cfg.num_users)


def generate_trace(cfg: MakeTraceConfig) -> Iterator[TraceRequest]:
    """The trace ``cfg.source`` asks for (synthetic, locomo, longmemeval), lazily, in time order."""
    cfg.validate()
    if cfg.source == "synthetic":
        return synthetic_trace(cfg)
    if cfg.source == "locomo":
        streams = [_locomo_user(cfg, c) for c in _conversations(cfg)]
    else:
        streams = [_lme_user(cfg, q) for q in _lme_questions(cfg)]
    merged = heapq.merge(*streams, key=lambda item: item[0])
    if cfg.num_requests:
        merged = itertools.islice(merged, cfg.num_requests)
    return number(merged)
