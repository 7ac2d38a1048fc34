"""Erasure of a user or a whole tenant (GDPR Art. 17 / CCPA): every copy of their turn-pairs.

Where a user's content lives: the journal (pending, flushed and parked entries), the
idempotency table (stored answers), Milvus (the memories, and the atomic context units in their
own collection), the fact store, and derived caches (the in-process BM25 indexes, the memory
search's fact vectors). :func:`erase_user` / :func:`erase_tenant`
remove it from all of them, in an order that cannot bring it back:

1. Journal (one fsync'd transaction, under :meth:`TurnJournal.store_gate`): the tombstone with the
   boundary seq B, the deletion of the target's entries, and the audit row (counts so far,
   ``completed_at`` NULL). From here on no flusher and no read-your-writes read returns an
   entry at or below B (the rule: see :mod:`memroute.journal.store`).
2. Idempotency rows (stored answers; a request whose claim goes cannot record its answer).
3. Milvus: delete by the exact user filter (a tenant: its users found by a prefix scan), then
   ``store.flush()``; then the facts and the units (``UnitIndex.erase_user``: its collection,
   flushed, and its BM25 cache).
4. Caches: ``retriever.forget_user`` / ``forget_tenant`` and each of ``caches``.
5. The audit row is completed (store and idempotency counts, ``completed_at``).

Steps 1-4 run with the store gate held, so the flusher writes nothing in between: a batch it was
writing finished before step 1 (step 3 deletes it), and pairs appended after step 1 (seq > B:
new data, e.g. a request that was in flight) reach Milvus only after step 3, so the erasure
never deletes new data. An erasure that fails part-way leaves its audit row incomplete and
nothing that can resurrect (the journal part is done first); running it again finishes it.
Idempotent: a second call erases nothing, returns zero counts and is audited too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from memroute.journal.idempotency import IdempotencyStore
from memroute.journal.protocol import TurnJournal
from memroute.journal.records import AuditEntry, JournalErasure
from memroute.namespace import tenant_of, validate_tenant
from memroute.types import TurnPair

GATE_TIMEOUT_S = 60.0  # how long an erasure waits for the flusher's batch in flight


class ErasableStore(Protocol):
    def delete_user(self, user_id: str) -> int: ...

    def delete_tenant(self, tenant: str) -> int: ...

    def flush(self) -> None: ...


class UserCache(Protocol):
    """Anything holding per-user derived data (BM25 indexes, pending-pair vectors, facts)."""

    def forget_user(self, user_id: str) -> object: ...

    def forget_tenant(self, tenant: str) -> object: ...


@dataclass(frozen=True)
class ErasureReport:
    scope: str  # "user" | "tenant"
    target: str  # the namespaced user id, or the tenant
    store_rows: int  # Milvus rows deleted
    journal_rows: int  # journal entries deleted (pending, flushed and parked)
    idempotency_rows: int  # stored answers deleted
    fact_rows: int  # facts deleted (every status: the only delete facts ever get)
    at: float  # when the tombstone was written (unix seconds)
    actor: str
    audit_id: int
    boundary_seq: int  # journal entries of the target with seq <= this are erased data
    # atomic context units deleted (Milvus rows too: the audit row's store_rows counts both)
    unit_rows: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def erase_user(
    store: ErasableStore,
    journal: TurnJournal,
    idempotency: IdempotencyStore | None,
    retriever: UserCache | None,
    user_id: str,
    *,
    actor: str,
    caches: Sequence[UserCache] = (),
    facts: Any = None,
    units: Any = None,
    gate_timeout_s: float = GATE_TIMEOUT_S,
) -> ErasureReport:
    """Erase one namespace (``tenant:user``) everywhere; see the module doc for the order.
    ``facts``: the fact store (memroute.memory.facts), whose rows of the user go too;
    ``units``: the unit index (memroute.memory.units), likewise."""
    tenant_of(user_id)  # validates: a namespaced id
    return _erase(
        "user", user_id, journal, actor, gate_timeout_s, [retriever, *caches],
        journal_step=lambda: journal.erase_user(user_id, actor=actor),
        idem_step=(lambda: idempotency.erase_user(user_id)) if idempotency is not None else None,
        store_step=lambda: store.delete_user(user_id),
        facts_step=(lambda: facts.erase_user(user_id)) if facts is not None else None,
        units_step=(lambda: units.erase_user(user_id)) if units is not None else None,
        store=store,
    )


def erase_tenant(
    store: ErasableStore,
    journal: TurnJournal,
    idempotency: IdempotencyStore | None,
    retriever: UserCache | None,
    tenant: str,
    *,
    actor: str,
    caches: Sequence[UserCache] = (),
    facts: Any = None,
    units: Any = None,
    gate_timeout_s: float = GATE_TIMEOUT_S,
) -> ErasureReport:
    """Erase every user of ``tenant`` (admin); the same order and guarantees as :func:`erase_user`."""
    validate_tenant(tenant)
    return _erase(
        "tenant", tenant, journal, actor, gate_timeout_s, [retriever, *caches],
        journal_step=lambda: journal.erase_tenant(tenant, actor=actor),
        idem_step=(lambda: idempotency.erase_tenant(tenant)) if idempotency is not None else None,
        store_step=lambda: store.delete_tenant(tenant),
        facts_step=(lambda: facts.erase_tenant(tenant)) if facts is not None else None,
        units_step=(lambda: units.erase_tenant(tenant)) if units is not None else None,
        store=store,
    )


def _erase(
    scope: str,
    target: str,
    journal: TurnJournal,
    actor: str,
    gate_timeout_s: float,
    caches: Sequence[UserCache | None],
    *,
    journal_step: Callable[[], JournalErasure],
    idem_step: Callable[[], int] | None,
    store_step: Callable[[], int],
    facts_step: Callable[[], int] | None = None,
    units_step: Callable[[], int] | None = None,
    store: ErasableStore,
) -> ErasureReport:
    method = "forget_user" if scope == "user" else "forget_tenant"
    live = [c for c in caches if c is not None]
    for c in live:  # before anything is erased: a cache that cannot forget would keep content
        if not callable(getattr(c, method, None)):
            raise TypeError(f"{type(c).__name__} has no {method}(); it would keep erased data")
    with journal.store_gate(gate_timeout_s):
        done = journal_step()
        idem_rows = idem_step() if idem_step is not None else 0
        store_rows = store_step()
        store.flush()
        fact_rows = facts_step() if facts_step is not None else 0
        unit_rows = units_step() if units_step is not None else 0
        for c in live:
            getattr(c, method)(target)
    journal.finish_erasure(done.audit_id, store_rows=int(store_rows) + int(unit_rows),
                           idempotency_rows=idem_rows)
    return ErasureReport(
        scope=scope, target=target, store_rows=int(store_rows), journal_rows=done.journal_rows,
        idempotency_rows=int(idem_rows), fact_rows=int(fact_rows), at=done.at, actor=actor,
        audit_id=done.audit_id,
        boundary_seq=done.boundary_seq, unit_rows=int(unit_rows),
    )


def erasure_audit(
    journal: TurnJournal, limit: int = 100, *, target: str | None = None
) -> list[dict[str, Any]]:
    """The newest audit rows (who, when, scope, target, row counts; never content), newest first;
    ``completed`` is False for an erasure that did not finish (run it again)."""
    return [_audit_json(a) for a in journal.erasure_audit(limit, target=target)]


def _audit_json(a: AuditEntry) -> dict[str, Any]:
    return {**asdict(a), "completed": a.completed_at is not None}


def store_remover(store: Any, retriever: UserCache | None = None) -> Callable[[list[TurnPair]], None]:
    """The flusher's ``on_erased`` (``Flusher.from_config(..., on_erased=store_remover(store,
    retriever))``): deletes pairs that an erasure in another process on the same journal file
    covered while this flusher was writing them, and drops their users' caches."""

    def remove(pairs: list[TurnPair]) -> None:
        by_user: dict[str, list[int]] = {}
        for p in pairs:
            by_user.setdefault(p.user_id, []).append(p.id)
        for uid, ids in by_user.items():
            store.delete_ids(uid, ids)
            if retriever is not None:
                retriever.forget_user(uid)
        store.flush()

    return remove


__all__ = [
    "ErasureReport",
    "erase_tenant",
    "erase_user",
    "erasure_audit",
    "store_remover",
]
