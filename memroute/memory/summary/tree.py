"""One user's compacting summary tree: sessions become leaf summaries, merged upward under a budget.

The *view* is what the answering model sees: the top-level summaries (oldest first) and the open
session's verbatim turn-pairs. After every step the view fits ``budget_tokens`` (each line
counted as the router renders it, ``- <text>`` plus its newline):

* A session closes when the user's next session starts; its turn-pairs become a **leaf**
  (one compaction call). An open session whose verbatim turns reach ``leaf_trigger_tokens`` is
  compacted too, so a leaf never summarizes more than about that much text.
* While the view is over budget, ``fan_in`` adjacent top-level summaries are **merged** into a
  parent (one call). The window merged is the one whose highest level is lowest, oldest first:
  leaves pair up like a binary counter, so a fact is re-summarized O(log sessions) times, not once
  per later session as in a rolling summary.
* Nothing is deleted: merged nodes stay in :attr:`UserTree.nodes` (with their children's ids),
  so a run can be rescored, or a lost fact traced to the compaction that dropped it.

The tree makes no model call itself: :meth:`UserTree.next_job` says what to compact and
:meth:`UserTree.apply` takes the result, so :class:`~memroute.memory.summary.memory.SummaryMemory`
can batch the jobs of many users into one engine call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from memroute.config.summary import SummaryConfig
from memroute.types import TurnPair, format_session_date, stable_id

CountText = Callable[[str], int]


@dataclass(frozen=True)
class SummaryNode:
    id: int
    level: int  # 0: a leaf (a session or part of one); a parent is max(children) + 1
    summary: str  # what the compactor wrote
    covers: tuple[int, ...]  # the turn-pair ids under it, oldest first
    first_time: int  # session times (epoch s) of its oldest and newest turn
    last_time: int
    children: tuple[int, ...] = ()  # merged nodes' ids (none for a leaf)

    @property
    def text(self) -> str:
        """The memory text the router injects: ``[date] Summary: ...`` or ``[d1 - d2] ...``."""
        first, last = format_session_date(self.first_time), format_session_date(self.last_time)
        when = first if first == last else f"{first} - {last}"
        return f"[{when}] Summary: {self.summary}"


@dataclass(frozen=True)
class Job:
    """One compaction to run: a leaf over ``pairs`` or a merge of the roots ``children``."""

    user_id: str
    level: int
    prompt_text: str  # what the compactor is given
    pairs: tuple[TurnPair, ...] = ()
    children: tuple[int, ...] = ()


def view_line_tokens(text: str, count: CountText) -> int:
    return count(f"- {text}") + 1  # the router's line, and the newline joining it


@dataclass
class UserTree:
    user_id: str
    cfg: SummaryConfig
    count: CountText
    nodes: dict[int, SummaryNode] = field(default_factory=dict)
    roots: list[int] = field(default_factory=list)  # top-level summaries, oldest first
    closed: list[list[TurnPair]] = field(default_factory=list)  # sessions waiting for their leaf
    open_session: str | None = None
    open_pairs: list[TurnPair] = field(default_factory=list)

    # -- what the model sees -------------------------------------------------------------
    def view_pairs(self) -> list[TurnPair]:
        return [p for s in self.closed for p in s] + self.open_pairs

    def view_tokens(self) -> int:
        lines = [self.nodes[i].text for i in self.roots] + [p.text() for p in self.view_pairs()]
        return sum(view_line_tokens(t, self.count) for t in lines)

    # -- input ---------------------------------------------------------------------------
    def add(self, pair: TurnPair) -> None:
        if self.open_session is not None and pair.session_id != self.open_session and self.open_pairs:
            self.closed.append(self.open_pairs)
            self.open_pairs = []
        self.open_session = pair.session_id
        self.open_pairs.append(pair)

    # -- compaction ----------------------------------------------------------------------
    def next_job(self) -> Job | None:
        """The next compaction this tree needs, or None when it is settled."""
        if self.closed:
            return self._leaf_job(self.closed[0])
        open_tokens = sum(view_line_tokens(p.text(), self.count) for p in self.open_pairs)
        if self.open_pairs and open_tokens >= self.cfg.leaf_trigger_tokens:
            return self._leaf_job(self.open_pairs)
        if self.view_tokens() <= self.cfg.budget_tokens:
            return None
        if len(self.roots) >= 2:
            return self._merge_job()
        if self.open_pairs:  # one summary and a short open session still too much: compact it
            return self._leaf_job(self.open_pairs)
        return None  # a lone summary: capped at node_tokens, which the budget holds

    def apply(self, job: Job, summary: str) -> SummaryNode:
        """Records the compaction of ``job`` (its text already fitted to node_tokens)."""
        if job.pairs:
            covers = tuple(p.id for p in job.pairs)
            times = [p.session_time for p in job.pairs]
            if self.closed and self.closed[0] and self.closed[0][0].id == job.pairs[0].id:
                self.closed.pop(0)
            else:
                self.open_pairs = self.open_pairs[len(job.pairs):]
            node = SummaryNode(stable_id(self.user_id, "summary", 0, covers[0], covers[-1]), 0,
                               summary, covers, min(times), max(times))
            self.nodes[node.id] = node
            self.roots.append(node.id)
            return node
        kids = [self.nodes[i] for i in job.children]
        covers = tuple(c for k in kids for c in k.covers)
        node = SummaryNode(stable_id(self.user_id, "summary", job.level, covers[0], covers[-1]),
                           job.level, summary, covers, min(k.first_time for k in kids),
                           max(k.last_time for k in kids), tuple(job.children))
        self.nodes[node.id] = node
        at = self.roots.index(job.children[0])
        self.roots[at:at + len(job.children)] = [node.id]
        return node

    def _leaf_job(self, pairs: Sequence[TurnPair]) -> Job:
        lines = [f"[{format_session_date(p.session_time)}] User: {p.user_text}\n"
                 f"Assistant: {p.assistant_text}" for p in pairs]
        return Job(self.user_id, 0, "\n".join(lines), pairs=tuple(pairs))

    def _merge_job(self) -> Job:
        n = min(self.cfg.fan_in, len(self.roots))
        windows = [self.roots[i:i + n] for i in range(len(self.roots) - n + 1)]
        best = min(windows, key=lambda w: max(self.nodes[i].level for i in w))  # oldest on ties
        level = max(self.nodes[i].level for i in best) + 1
        text = "\n".join(self.nodes[i].text for i in best)
        return Job(self.user_id, level, text, children=tuple(best))

    # -- saving (rescore, a resumed replay) -----------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "nodes": [asdict(n) for n in self.nodes.values()],
            "roots": list(self.roots),
            "closed": [[asdict(p) for p in s] for s in self.closed],
            "open_session": self.open_session,
            "open_pairs": [asdict(p) for p in self.open_pairs],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], cfg: SummaryConfig, count: CountText) -> UserTree:
        def node(n: dict[str, Any]) -> SummaryNode:
            return SummaryNode(**{**n, "covers": tuple(n["covers"]), "children": tuple(n["children"])})

        return cls(d["user_id"], cfg, count, nodes={n["id"]: node(n) for n in d["nodes"]},
                   roots=list(d["roots"]), closed=[[TurnPair(**p) for p in s] for s in d["closed"]],
                   open_session=d["open_session"], open_pairs=[TurnPair(**p) for p in d["open_pairs"]])
