"""What a bulk ingest has left to do: drop repeated pairs and pairs an earlier run stored.

Ids are deterministic (:attr:`TurnPair.id`), so a pair already in the store is skipped before
it is embedded: a re-run embeds and writes nothing and says how much it skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from memroute.types import TurnPair

# (user_id, ids) -> the ids among them that the store already holds for that user
ExistingIds = Callable[[str, list[int]], set[int]]


@dataclass(frozen=True)
class IngestPlan:
    new: list[TurnPair]  # to embed and write, in input order
    read: int  # pairs the dataset produced
    duplicates: int  # repeats of an id within the input (the last copy is kept)
    skipped: int  # already stored
    users: int  # distinct users in the input


def plan_ingest(pairs: Iterable[TurnPair], existing: ExistingIds | None) -> IngestPlan:
    """Split ``pairs`` into new ones and repeats; ``existing=None`` skips no stored pairs."""
    unique: dict[int, TurnPair] = {}
    read = 0
    for pair in pairs:
        read += 1
        # Later copies win, as in the store's upsert; the first position is kept.
        unique[pair.id] = pair
    by_user: dict[str, list[int]] = {}
    for pid, pair in unique.items():
        by_user.setdefault(pair.user_id, []).append(pid)
    stored: set[int] = set()
    if existing is not None:
        for user_id, ids in by_user.items():
            stored |= existing(user_id, ids)
    new = [p for pid, p in unique.items() if pid not in stored]
    return IngestPlan(
        new=new,
        read=read,
        duplicates=read - len(unique),
        skipped=len(unique) - len(new),
        users=len(by_user),
    )


def store_is_new(uri: str) -> bool:
    """True when ``uri`` names a Milvus Lite file that does not exist yet: it holds nothing,
    so the plan needs no lookups and the store can be created while the pipeline starts."""
    from memroute.config.schema import is_server_uri

    return not is_server_uri(uri) and not Path(uri).expanduser().exists()
