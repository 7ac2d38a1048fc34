"""LoCoMo loader: the canonical list-of-samples JSON -> typed conversations, QA and turn-pairs.

Format (``locomo10.json``, also written by :mod:`memroute.datasets.generate.synthetic`): a JSON list of samples,
each ``{"sample_id", "conversation": {"speaker_a", "speaker_b", "session_N": [turn...],
"session_N_date_time": "1:56 pm on 8 May, 2023", ...}, "qa": [{"question", "answer" |
"adversarial_answer", "evidence": [dia_id...], "category"}, ...]}``; turns are
``{"speaker", "dia_id", "text"}`` plus ``blip_caption``/``img_url`` when a photo was shared.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memroute.datasets.parsing import DatasetError, Where, read_json
from memroute.datasets.records import QA, Conversation, PairRecord, Session, Turn
from memroute.errors import InvalidRequest
from memroute.types import DATASET_SOURCE, TurnPair, validate_user_id

log = logging.getLogger(__name__)

CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

_SESSION_KEY = re.compile(r"session_(\d+)")
_DATE_RE = re.compile(
    r"\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})\s*",
    re.IGNORECASE,
)
_MONTHS = {
    m: i
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for m in names
}
# Evidence ids in the released file are mostly "D3:12", with a few slips ("D:11:26", "D30:05",
# "D8:6; D9:17", "D9:1 D4:4"); normalize those instead of losing the question's gold evidence.
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")


def parse_locomo_date(text: str) -> int:
    """``"1:56 pm on 8 May, 2023"`` -> epoch seconds (UTC); ValueError if it does not parse."""
    m = _DATE_RE.fullmatch(text)
    if not m:
        raise ValueError(f"cannot parse {text!r} (expected like '1:56 pm on 8 May, 2023')")
    hour, minute, ampm, day, month_name, year = m.groups()
    month = _MONTHS.get(month_name.lower())
    h = int(hour)
    if month is None or not 1 <= h <= 12:
        raise ValueError(f"cannot parse {text!r} (bad month or hour)")
    h = h % 12 + (12 if ampm.lower() == "p" else 0)
    try:
        dt = datetime(int(year), month, int(day), h, int(minute), tzinfo=UTC)
    except ValueError as exc:
        raise ValueError(f"cannot parse {text!r} ({exc})") from None
    return int(dt.timestamp())


class _Where(Where):
    label = "sample"


def _parse_turn(raw: Any, where: _Where, field: str) -> Turn:
    if not isinstance(raw, dict):
        raise where.error(field, f"expected an object, got {type(raw).__name__}")
    caption = raw.get("blip_caption")
    return Turn(
        speaker=where.get(raw, "speaker", str, f"{field}.speaker"),
        dia_id=where.get(raw, "dia_id", str, f"{field}.dia_id"),
        text=where.get(raw, "text", str, f"{field}.text"),
        caption=caption if isinstance(caption, str) and caption.strip() else None,
    )


def _parse_sessions(conv: dict[str, Any], where: _Where) -> tuple[Session, ...]:
    indices = sorted(
        int(m.group(1)) for key in conv if (m := _SESSION_KEY.fullmatch(key))
    )  # the file also has date keys for sessions that have no turns: those are ignored
    if not indices:
        raise where.error("conversation", "no session_N turn lists")
    sessions = []
    seen: set[str] = set()
    for n in indices:
        key = f"session_{n}"
        turns_raw = where.get(conv, key, list, key)
        date_key = f"{key}_date_time"
        date_text = where.get(conv, date_key, str, date_key)
        try:
            epoch = parse_locomo_date(date_text)
        except ValueError as exc:
            raise where.error(date_key, str(exc)) from None
        turns = tuple(_parse_turn(t, where, f"{key}[{i}]") for i, t in enumerate(turns_raw))
        for i, turn in enumerate(turns):
            if turn.dia_id in seen:
                raise where.error(f"{key}[{i}].dia_id", f"duplicate dia_id {turn.dia_id!r}")
            seen.add(turn.dia_id)
        sessions.append(Session(index=n, date_time=epoch, date_text=date_text, turns=turns))
    return tuple(sessions)


def _normalize_evidence(raw: list[Any], where: _Where, field: str) -> tuple[str, ...]:
    out: list[str] = []
    for i, item in enumerate(raw):
        if not isinstance(item, str):
            raise where.error(f"{field}[{i}]", f"expected str, got {type(item).__name__}")
        for token in re.split(r"[;,\s]+", item.strip()):
            m = _EVIDENCE_ID.fullmatch(token)
            if m is None:
                if token:
                    log.debug("%s: %s: dropping evidence fragment %r", where.prefix, field, token)
                continue
            dia_id = f"D{int(m.group(1))}:{int(m.group(2))}"
            if dia_id not in out:
                out.append(dia_id)
    return tuple(out)


def _answer_text(value: Any, where: _Where, field: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise where.error(field, f"expected str or number, got {type(value).__name__}")
    return str(value)


def _parse_qa(raw: Any, position: int, sample_id: str, where: _Where) -> QA:
    field = f"qa[{position}]"
    if not isinstance(raw, dict):
        raise where.error(field, f"expected an object, got {type(raw).__name__}")
    adversarial = raw.get("adversarial_answer")
    if raw.get("answer") is not None:
        answer = _answer_text(raw["answer"], where, f"{field}.answer")
    elif adversarial is not None:
        answer = _answer_text(adversarial, where, f"{field}.adversarial_answer")
    else:
        raise where.error(f"{field}.answer", "missing (and no adversarial_answer)")
    category = where.get(raw, "category", int, f"{field}.category")
    if category not in CATEGORY_NAMES:
        raise where.error(f"{field}.category", f"must be 1-5, got {category}")
    fact_type = raw.get("fact_type")
    stale = raw.get("stale_answer")
    return QA(
        question=where.get(raw, "question", str, f"{field}.question"),
        answer=answer,
        evidence=_normalize_evidence(
            where.get(raw, "evidence", list, f"{field}.evidence"), where, f"{field}.evidence"
        ),
        category=category,
        fact_type=str(fact_type) if fact_type is not None else None,
        qid=f"{sample_id}:q{position}",
        stale_answer=(
            _answer_text(stale, where, f"{field}.stale_answer") if stale is not None else None
        ),
        adversarial_answer=(
            _answer_text(adversarial, where, f"{field}.adversarial_answer")
            if adversarial is not None
            else None
        ),
    )


def _parse_sample(raw: Any, position: int, path: Path) -> Conversation:
    where = _Where(path, position, None)
    if not isinstance(raw, dict):
        raise where.error("sample", f"expected an object, got {type(raw).__name__}")
    sample_id = where.get(raw, "sample_id", str, "sample_id")
    where = _Where(path, position, sample_id)
    conv = where.get(raw, "conversation", dict, "conversation")
    sessions = _parse_sessions(conv, where)
    qa = tuple(
        _parse_qa(q, i, sample_id, where)
        for i, q in enumerate(where.get(raw, "qa", list, "qa"))
    )
    known = {t.dia_id for s in sessions for t in s.turns}
    unknown = sorted({e for q in qa for e in q.evidence} - known)
    if unknown:  # a handful in the released file; they can never be retrieved
        log.info("%s: evidence ids not in the conversation: %s", where.prefix, ", ".join(unknown))
    return Conversation(
        sample_id=sample_id,
        speaker_a=where.get(conv, "speaker_a", str, "conversation.speaker_a"),
        speaker_b=where.get(conv, "speaker_b", str, "conversation.speaker_b"),
        sessions=sessions,
        qa=qa,
    )


def _sample_id_of(raw: Any) -> str | None:
    return raw.get("sample_id") if isinstance(raw, dict) else None


def load_locomo(
    path: str | Path,
    *,
    sample_ids: Iterable[str] | None = None,
    categories: Iterable[int] | None = (1, 2, 3, 4),
    limit: int | None = None,
) -> list[Conversation]:
    """Read a LoCoMo-format file.

    ``sample_ids`` keeps those conversations (in file order); ``categories`` keeps those question
    categories (default, or None: the paper's 1-4, no adversarial); ``limit`` keeps the first N questions
    overall, dropping the conversations after the one where the limit was reached.
    """
    path = Path(path)
    cats = (1, 2, 3, 4) if categories is None else tuple(categories)
    bad = [c for c in cats if isinstance(c, bool) or c not in CATEGORY_NAMES]
    if bad:
        raise InvalidRequest(f"categories must be among 1-5, got {bad}", field="categories")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidRequest(f"limit must be a non-negative integer, got {limit!r}", field="limit")
    if isinstance(sample_ids, str):  # a lone id, not an iterable of characters
        sample_ids = [sample_ids]
    wanted = None if sample_ids is None else list(dict.fromkeys(sample_ids))

    raw = read_json(path)
    if not isinstance(raw, list):
        raise DatasetError(
            f"{path}: expected a JSON list of samples, got {type(raw).__name__}", field="path"
        )
    ids_in_file = [_sample_id_of(s) for s in raw]
    dupes = sorted({i for i in ids_in_file if i is not None and ids_in_file.count(i) > 1})
    if dupes:
        raise DatasetError(f"{path}: duplicate sample_id {', '.join(dupes)}", field="sample_id")
    if wanted is not None:
        missing = [s for s in wanted if s not in ids_in_file]
        if missing:
            available = ", ".join(str(i) for i in ids_in_file)
            raise InvalidRequest(
                f"{path}: unknown sample_ids {missing}. Available: {available}", field="sample_ids"
            )

    out: list[Conversation] = []
    remaining = limit
    for position, sample in enumerate(raw, start=1):
        if wanted is not None and _sample_id_of(sample) not in wanted:
            continue
        if remaining == 0:
            break
        conv = _parse_sample(sample, position, path)
        qa = tuple(q for q in conv.qa if q.category in cats)
        if remaining is not None:
            qa = qa[:remaining]
            remaining -= len(qa)
        out.append(
            Conversation(conv.sample_id, conv.speaker_a, conv.speaker_b, conv.sessions, qa)
        )
    return out


def turn_pairs(conv: Conversation, *, user_id: str | None = None) -> list[PairRecord]:
    """Non-overlapping consecutive turn pairs per session (1+2, 3+4, ...; an odd last turn pairs
    with an empty reply): the paper's ``[timestamp] Q: <first> / A: <second>`` memories."""
    uid = validate_user_id(conv.sample_id if user_id is None else user_id)
    records = []
    for session in conv.sessions:
        turns = session.turns
        for j in range(0, len(turns), 2):
            first = turns[j]
            second = turns[j + 1] if j + 1 < len(turns) else None
            pair = TurnPair(
                user_id=uid,
                session_id=f"session_{session.index}",
                turn_index=j // 2,
                user_text=first.render(),
                assistant_text=second.render() if second else "",
                session_time=session.date_time,
                source_model=DATASET_SOURCE,
                created_at=float(session.date_time),
            )
            dia = (first.dia_id,) if second is None else (first.dia_id, second.dia_id)
            records.append(PairRecord(pair=pair, dia_ids=dia))
    return records


def evidence_pair_ids(qa: QA, records: Iterable[PairRecord]) -> tuple[int, ...]:
    """Ids of the turn-pairs holding the question's evidence turns (evidence order, no repeats);
    the gold set for retrieval metrics over stored pairs. Evidence ids not in ``records`` are
    skipped."""
    by_dia = {d: r.pair.id for r in records for d in r.dia_ids}
    out: list[int] = []
    for dia_id in qa.evidence:
        pid = by_dia.get(dia_id)
        if pid is not None and pid not in out:
            out.append(pid)
    return tuple(out)
