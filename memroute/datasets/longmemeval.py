"""LongMemEval loader: the released JSON list -> typed questions, per-question turn-pairs, gold ids.

Format (``longmemeval_s.json`` / ``_m`` / ``_oracle``, also written by
:mod:`memroute.datasets.generate.longmemeval`): a JSON list of questions, each ``{"question_id",
"question_type", "question", "answer", "question_date", "haystack_session_ids", "haystack_dates",
"haystack_sessions", "answer_session_ids"}``. ``haystack_sessions[i]`` is a list of ``{"role":
"user" | "assistant", "content", "has_answer"?}`` turns dated ``haystack_dates[i]`` (like
``"2023/05/20 (Sat) 02:21"``). Ids ending in ``_abs`` are abstention questions: the asked-about
fact is not in the haystack. Answers are sometimes numbers in the file; they are kept as text.
An optional ``stale_answer`` (memroute's generated files only: a knowledge update's superseded
value) lets the benchmark count stale answers.

Every question is its own user: its haystack is that user's whole history.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memroute.datasets.parsing import DatasetError, Where, read_json
from memroute.datasets.records import LMEPairRecord, LMEQuestion, LMETurn
from memroute.errors import InvalidRequest
from memroute.types import DATASET_SOURCE, USER_ID_RE, TurnPair, stable_id, validate_user_id

log = logging.getLogger(__name__)

QUESTION_TYPES: tuple[str, ...] = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
)
ROLES = ("user", "assistant")

# "2023/05/20 (Sat) 02:21"; the weekday and the time are optional, seconds are tolerated.
_LME_DATE = re.compile(
    r"\s*(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\([A-Za-z]+\))?"
    r"(?:\s+(\d{1,2}):(\d{2})(?::(\d{2}))?)?\s*"
)


def parse_lme_date(text: str) -> int:
    """``"2023/05/20 (Sat) 02:21"`` (or ISO 8601) -> epoch seconds; naive times are UTC.

    ValueError if it does not parse.
    """
    m = _LME_DATE.fullmatch(text)
    try:
        if m:
            y, mo, d, h, mi, s = (int(g) if g else 0 for g in m.groups())
            dt = datetime(y, mo, d, h, mi, s, tzinfo=UTC)
        else:
            dt = datetime.fromisoformat(text.strip())
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=UTC)
    except ValueError as exc:
        raise ValueError(
            f"cannot parse {text!r} (expected like '2023/05/20 (Sat) 02:21' or ISO 8601: {exc})"
        ) from None
    return int(dt.timestamp())


class _Where(Where):
    label = "question"

    def strings(self, obj: dict[str, Any], key: str) -> tuple[str, ...]:
        items = self.get(obj, key, list, key)
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise self.error(f"{key}[{i}]", f"expected str, got {type(item).__name__}")
        return tuple(items)

    def date(self, text: str, field: str) -> int:
        try:
            return parse_lme_date(text)
        except ValueError as exc:
            raise self.error(field, str(exc)) from None


def _answer_text(value: Any, where: _Where, field: str = "answer") -> str:
    if isinstance(value, bool):
        raise where.error(field, "expected str or number, got bool")
    if isinstance(value, (str, int, float)):
        return str(value)
    if isinstance(value, list) and value and all(
        isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value
    ):  # tolerated: a list of acceptable answers
        return ", ".join(str(v) for v in value)
    raise where.error(field, f"expected str or number, got {type(value).__name__}")


def _parse_turn(raw: Any, where: _Where, field: str) -> LMETurn:
    if not isinstance(raw, dict):
        raise where.error(field, f"expected an object, got {type(raw).__name__}")
    role = where.get(raw, "role", str, f"{field}.role")
    if role not in ROLES:
        raise where.error(f"{field}.role", f"expected 'user' or 'assistant', got {role!r}")
    content = raw.get("content")
    if not isinstance(content, str):  # empty text is fine, a missing one is a broken file
        got = "missing" if content is None else f"expected str, got {type(content).__name__}"
        raise where.error(f"{field}.content", got)
    flag = raw.get("has_answer", False)
    if flag is None:
        flag = False
    if not isinstance(flag, bool) and flag not in (0, 1):
        raise where.error(f"{field}.has_answer", f"expected a boolean, got {flag!r}")
    return LMETurn(role=role, content=content, has_answer=bool(flag))


def _stale_answer(raw: dict[str, Any], where: _Where) -> str | None:
    """memroute's generated files name a knowledge update's superseded answer; real ones do not."""
    value = raw.get("stale_answer")
    return None if value is None else _answer_text(value, where, "stale_answer")


def _parse_question(raw: Any, position: int, path: Path) -> LMEQuestion:
    where = _Where(path, position, None)
    if not isinstance(raw, dict):
        raise where.error("question", f"expected an object, got {type(raw).__name__}")
    qid = where.get(raw, "question_id", str, "question_id")
    where = _Where(path, position, qid)
    qtype = where.get(raw, "question_type", str, "question_type")
    if qtype not in QUESTION_TYPES:
        raise where.error(
            "question_type", f"unknown type {qtype!r}; expected one of {', '.join(QUESTION_TYPES)}"
        )
    if "answer" not in raw or raw["answer"] is None:
        raise where.error("answer", "missing")
    qdate_text = where.get(raw, "question_date", str, "question_date")

    session_ids = where.strings(raw, "haystack_session_ids")
    dates_text = where.strings(raw, "haystack_dates")
    sessions_raw = where.get(raw, "haystack_sessions", list, "haystack_sessions")
    if not len(session_ids) == len(dates_text) == len(sessions_raw):
        raise where.error(
            "haystack_sessions",
            f"{len(sessions_raw)} sessions but {len(session_ids)} haystack_session_ids and "
            f"{len(dates_text)} haystack_dates (they must be parallel lists)",
        )
    sessions = []
    for i, session in enumerate(sessions_raw):
        if not isinstance(session, list):
            raise where.error(
                f"haystack_sessions[{i}]", f"expected a list of turns, got {type(session).__name__}"
            )
        sessions.append(
            tuple(
                _parse_turn(t, where, f"haystack_sessions[{i}][{j}]") for j, t in enumerate(session)
            )
        )
    answer_ids = where.strings(raw, "answer_session_ids")
    unknown = sorted(set(answer_ids) - set(session_ids))
    if unknown:  # they can never be retrieved; say so rather than silently scoring zero
        log.info("%s: answer_session_ids not in the haystack: %s", where.prefix, ", ".join(unknown))
    return LMEQuestion(
        question_id=qid,
        question_type=qtype,
        question=where.get(raw, "question", str, "question"),
        answer=_answer_text(raw["answer"], where),
        question_date=where.date(qdate_text, "question_date"),
        question_date_text=qdate_text,
        haystack_session_ids=session_ids,
        haystack_dates=tuple(
            where.date(t, f"haystack_dates[{i}]") for i, t in enumerate(dates_text)
        ),
        haystack_dates_text=dates_text,
        haystack_sessions=tuple(sessions),
        answer_session_ids=answer_ids,
        is_abstention=qid.endswith("_abs"),
        stale_answer=_stale_answer(raw, where),
    )


def load_longmemeval(
    path: str | Path,
    *,
    question_types: Iterable[str] | None = None,
    limit: int | None = None,
    include_abstention: bool = True,
) -> list[LMEQuestion]:
    """Read a LongMemEval-format file (file order kept).

    ``question_types`` keeps those types (default: all six); ``include_abstention=False`` drops
    the ``_abs`` questions; ``limit`` keeps the first N questions left after filtering. Only the
    kept questions are parsed in full.
    """
    path = Path(path)
    if isinstance(question_types, str):  # a lone type, not an iterable of characters
        question_types = [question_types]
    types = None if question_types is None else tuple(dict.fromkeys(question_types))
    if types is not None:
        bad = [t for t in types if t not in QUESTION_TYPES]
        if bad:
            raise InvalidRequest(
                f"unknown question_types {bad}. Available: {', '.join(QUESTION_TYPES)}",
                field="question_types",
            )
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidRequest(f"limit must be a non-negative integer, got {limit!r}", field="limit")

    raw = read_json(path)
    if not isinstance(raw, list):
        raise DatasetError(
            f"{path}: expected a JSON list of questions, got {type(raw).__name__}", field="path"
        )
    ids = Counter(q.get("question_id") for q in raw if isinstance(q, dict))
    dupes = sorted(str(i) for i, n in ids.items() if i is not None and n > 1)
    if dupes:
        raise DatasetError(f"{path}: duplicate question_id {', '.join(dupes)}", field="question_id")

    out: list[LMEQuestion] = []
    for position, item in enumerate(raw, start=1):
        if limit is not None and len(out) >= limit:
            break
        # filter on the raw keys first: parsing 500 haystacks to keep 10 questions is wasted work
        if isinstance(item, dict):
            qtype, qid = item.get("question_type"), item.get("question_id")
            if types is not None and isinstance(qtype, str) and qtype not in types:
                continue
            if not include_abstention and isinstance(qid, str) and qid.endswith("_abs"):
                continue
        out.append(_parse_question(item, position, path))
    return out


def lme_user_id(question_id: str) -> str:
    """The question's user id: its id with characters a user id may not hold replaced by ``_``."""
    uid = re.sub(r"[^A-Za-z0-9_.:@-]", "_", question_id).lstrip("_.:@-")[:128]
    if not USER_ID_RE.fullmatch(uid):
        uid = f"lme-{stable_id(question_id):x}"
    return validate_user_id(uid)


def _pairs_of(turns: tuple[LMETurn, ...]) -> list[tuple[LMETurn | None, LMETurn | None]]:
    """A user turn with the assistant reply right after it; a stray turn pairs with nothing."""
    out: list[tuple[LMETurn | None, LMETurn | None]] = []
    i = 0
    while i < len(turns):
        turn = turns[i]
        if turn.role == "user":
            nxt = turns[i + 1] if i + 1 < len(turns) else None
            if nxt is not None and nxt.role == "assistant":
                out.append((turn, nxt))
                i += 2
                continue
            out.append((turn, None))
        else:
            out.append((None, turn))
        i += 1
    return out


def lme_turn_pairs(q: LMEQuestion, *, user_id: str | None = None) -> list[LMEPairRecord]:
    """The question's haystack as turn-pairs (user turn + assistant reply), session by session.

    The user is ``user_id`` or, by default, the question id made safe (:func:`lme_user_id`).
    Pairs whose two sides are both blank are skipped.
    """
    uid = lme_user_id(q.question_id) if user_id is None else validate_user_id(user_id)
    seen: Counter[str] = Counter()
    records: list[LMEPairRecord] = []
    for sid, epoch, turns in zip(
        q.haystack_session_ids, q.haystack_dates, q.haystack_sessions, strict=True
    ):
        seen[sid] += 1
        pair_sid = sid if seen[sid] == 1 else f"{sid}#{seen[sid]}"
        index = 0
        for user, asst in _pairs_of(turns):
            user_text = user.content if user else ""
            asst_text = asst.content if asst else ""
            if not user_text.strip() and not asst_text.strip():
                continue
            pair = TurnPair(
                user_id=uid,
                session_id=pair_sid,
                turn_index=index,
                user_text=user_text,
                assistant_text=asst_text,
                session_time=epoch,
                source_model=DATASET_SOURCE,
                created_at=float(epoch),
            )
            has_answer = bool((user and user.has_answer) or (asst and asst.has_answer))
            records.append(LMEPairRecord(pair=pair, session_id=sid, has_answer=has_answer))
            index += 1
    return records


def gold_session_ids(q: LMEQuestion) -> tuple[str, ...]:
    """The sessions holding the answer evidence (no repeats): the gold set for session recall."""
    return tuple(dict.fromkeys(q.answer_session_ids))


def gold_pair_ids(q: LMEQuestion, records: Iterable[LMEPairRecord]) -> tuple[int, ...]:
    """Ids of the question's turn-pairs marked ``has_answer`` (record order, no repeats): the gold
    set for pair-level retrieval metrics. ``records`` come from :func:`lme_turn_pairs` on ``q``;
    records of sessions outside ``q``'s haystack are ignored."""
    haystack = set(q.haystack_session_ids)
    return tuple(
        dict.fromkeys(r.pair.id for r in records if r.has_answer and r.session_id in haystack)
    )
