"""A user's fact keys for the open-keys canonicaliser, and the descriptions they came with.

:func:`known_keys` reads every key the user has a fact under (active or not: a superseded key
is still the user's name for that fact type) with its category, and the description the key
was first proposed with (``fact_keys``; ``""`` for a key from a fixed schema or an older run).
:func:`remember_keys` records the descriptions of keys new to the user after their facts are
written, refused like those writes if the user was erased since the extraction began.
:func:`canonical_facts` puts the extractor's facts on the user's keys
(:class:`~memroute.memory.facts.keys.KeyCanonicalizer`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import sqlalchemy as sa

from memroute.memory.facts import erasures
from memroute.memory.facts.keys import KeyCanonicalizer, KnownKey, Resolution
from memroute.memory.facts.schema import fact_keys, facts
from memroute.memory.facts.store import FactStore
from memroute.memory.facts.types import FactInput
from memroute.types import validate_user_id


def known_keys(store: FactStore, user_id: str) -> list[KnownKey]:
    """The user's keys in key order, each with its category and description."""
    uid = validate_user_id(user_id)
    with store.transaction("read the user's fact keys", write=False) as conn:
        rows = conn.execute(
            sa.select(facts.c.key, sa.func.max(facts.c.category))
            .where(facts.c.user_id == uid).group_by(facts.c.key).order_by(facts.c.key)
        ).all()
        described = dict(conn.execute(
            sa.select(fact_keys.c.key, fact_keys.c.description).where(fact_keys.c.user_id == uid)
        ).all())
    return [KnownKey(k, c, described.get(k, "")) for k, c in rows]


def remember_keys(store: FactStore, user_id: str, described: Sequence[tuple[str, str]], *,
                  unless_erased_after: int | None = None) -> int:
    """Record ``(key, description)`` for the keys without one yet (the first description
    stays: a key's text does not drift); the number recorded."""
    uid = validate_user_id(user_id)
    wanted = {k: d for k, d in described if d}
    if not wanted:
        return 0
    with store.transaction("record fact key descriptions", write=True) as conn:
        if unless_erased_after is not None:
            erasures.refuse_if_erased(conn, uid, unless_erased_after, store.backend)
        have = set(conn.execute(sa.select(fact_keys.c.key).where(
            fact_keys.c.user_id == uid, fact_keys.c.key.in_(list(wanted)))).scalars())
        rows = [{"user_id": uid, "key": k, "description": d, "recorded_at": store._clock()}
                for k, d in wanted.items() if k not in have]
        if rows:
            conn.execute(sa.insert(fact_keys), rows)
    return len(rows)


def canonical_facts(
    canon: KeyCanonicalizer, store: FactStore, user_id: str, found: Sequence[FactInput],
    descriptions: Sequence[str], *, fields: Mapping[str, str] | None = None,
) -> tuple[list[FactInput], list[Resolution]]:
    """``found`` on the user's keys, with each proposal's :class:`Resolution`. A fact put on
    an existing key takes that key's category; a new key keeps the parsed one (the schema
    field's, else ``temporal``), the same for every fact of the output under it. ``fields``:
    the schema's descriptions by key, for the user's keys that have none recorded."""
    facts_in = list(found)
    if not facts_in:
        return [], []
    fields = fields or {}
    known = [k if k.description else replace(k, description=fields.get(k.key, ""))
             for k in known_keys(store, user_id)]
    resolved = canon.resolve([(f.key, d) for f, d in zip(facts_in, descriptions, strict=True)],
                             known)
    categories: dict[str, str] = {}
    out = []
    for f, r in zip(facts_in, resolved, strict=True):
        category = categories.setdefault(
            r.key, r.known.category if r.known is not None and r.known.category else f.category)
        out.append(f if (r.key, category) == (f.key, f.category)
                   else replace(f, key=r.key, category=category))
    return out, resolved


__all__ = ["canonical_facts", "known_keys", "remember_keys"]
