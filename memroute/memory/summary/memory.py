"""The summary tree as a memory the Router reads: the ``MemoryRetriever`` of the compacting strategy.

``remember`` adds turn-pairs to their users' trees and settles them: the compaction jobs of all
users touched are run round by round, each round one batched engine call, until every tree's view
fits its budget. ``retrieve_many`` returns a user's whole view whatever the query (no search: the
summaries are the memory), newest first, so a router budget smaller than the tree's drops the
oldest lines.

Every compaction call is kept (``calls``, per user), so the benchmark and the replay can price
the compaction beside the answers; :meth:`SummaryMemory.drain_calls` hands a user's new calls to
the request that caused them. :meth:`save` / :meth:`load` keep the trees as JSON (a run's record,
a resumed replay).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from memroute.config.summary import SummaryConfig, check_summary_config
from memroute.memory.summary.compactor import Compactor
from memroute.memory.summary.tree import SummaryNode, UserTree
from memroute.types import CallRecord, Memory, RetrievalHit, TurnPair, memory_of


SUMMARY_SESSION = "summary-L"  # a summary's Memory.session_id: this, then its level


def node_memory(user_id: str, node: SummaryNode) -> Memory:
    return Memory(id=node.id, user_id=user_id, text=node.text, session_time=node.last_time,
                  session_id=f"{SUMMARY_SESSION}{node.level}")


def is_summary(memory: Memory) -> bool:
    """A view item that is a summary (not a verbatim turn-pair of the open session)."""
    return memory.session_id.startswith(SUMMARY_SESSION)


class SummaryMemory:
    stores_verbatim = False  # what a router reads back is not the turn-pairs it stored

    def __init__(self, cfg: SummaryConfig, compactor: Compactor) -> None:
        self.cfg = check_summary_config(cfg)
        self.compactor = compactor
        self.trees: dict[str, UserTree] = {}
        self.calls: dict[str, list[CallRecord]] = {}
        self._undrained: dict[str, int] = {}
        self._owner: dict[int, str] = {}  # summary node id -> its user

    def tree(self, user_id: str) -> UserTree:
        if user_id not in self.trees:
            self.trees[user_id] = UserTree(user_id, self.cfg, self.compactor.count_text_tokens)
        return self.trees[user_id]

    # -- MemoryRetriever ------------------------------------------------------------------
    def remember(self, pairs: Sequence[TurnPair]) -> int:
        users: list[str] = []
        for p in pairs:
            self.tree(p.user_id).add(p)
            if p.user_id not in users:
                users.append(p.user_id)
        self.settle(users)
        return len(pairs)

    def retrieve_many(self, user_ids: Sequence[str], queries: Sequence[str], *,
                      top_k: int | None = None) -> list[list[RetrievalHit]]:
        return [self.view(u) for u in user_ids]

    # -- the tree ---------------------------------------------------------------------------
    def view(self, user_id: str) -> list[RetrievalHit]:
        """The user's view as hits, newest first (score 1, 1/2, 1/3, ...)."""
        t = self.trees.get(user_id)
        if t is None:
            return []
        items = [node_memory(user_id, t.nodes[i]) for i in t.roots]
        items += [memory_of(p) for p in t.view_pairs()]
        items.reverse()
        return [RetrievalHit(m, 1.0 / (rank + 1)) for rank, m in enumerate(items)]

    def settle(self, users: Sequence[str]) -> None:
        """Runs the users' compaction jobs, one batch per round, until every view fits."""
        while True:
            jobs = [j for u in users if (j := self.trees[u].next_job()) is not None]
            if not jobs:
                return
            for job, done in zip(jobs, self.compactor.compact_many([j.prompt_text for j in jobs])):
                node = self.trees[job.user_id].apply(job, done.summary)
                self._owner[node.id] = job.user_id
                self.calls.setdefault(job.user_id, []).append(done.call)

    def covers(self, memory_id: int) -> tuple[int, ...]:
        """The turn-pair ids a view item stands for (a summary: every pair under it)."""
        user = self._owner.get(memory_id)
        return self.trees[user].nodes[memory_id].covers if user is not None else (memory_id,)

    def is_summary(self, memory_id: int) -> bool:
        return memory_id in self._owner

    def drain_calls(self, user_id: str) -> list[CallRecord]:
        """The user's compaction calls since the last drain (those its latest request caused)."""
        calls = self.calls.get(user_id, [])
        start = self._undrained.get(user_id, 0)
        self._undrained[user_id] = len(calls)
        return calls[start:]

    # -- saving ------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        data = {"config": self.cfg.__dict__,
                "trees": [t.to_dict() for t in self.trees.values()],
                "calls": {u: [c.__dict__ for c in cs] for u, cs in self.calls.items()},
                "drained": self._undrained}
        tmp = Path(path).with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)

    def load(self, path: str | Path) -> None:
        data = json.loads(Path(path).read_text())
        count = self.compactor.count_text_tokens
        self.trees = {d["user_id"]: UserTree.from_dict(d, self.cfg, count) for d in data["trees"]}
        self.calls = {u: [CallRecord(**c) for c in cs] for u, cs in data["calls"].items()}
        self._undrained = {u: int(n) for u, n in data.get("drained", {}).items()}
        self._owner = {i: u for u, t in self.trees.items() for i in t.nodes}

    def stats(self) -> dict[str, float]:
        calls = [c for cs in self.calls.values() for c in cs]
        return {
            "users": len(self.trees),
            "compaction_calls": len(calls),
            "compaction_in": sum(c.input_tokens for c in calls),
            "compaction_out": sum(c.output_tokens for c in calls),
            "compaction_eff_cost": sum(c.eff_cost for c in calls),
            "nodes": sum(len(t.nodes) for t in self.trees.values()),
            "max_level": max((n.level for t in self.trees.values() for n in t.nodes.values()),
                             default=0),
            "max_view_tokens": max((t.view_tokens() for t in self.trees.values()), default=0),
        }
