"""One progress bar over a replay, with the live escalation rate and cost of the strategy."""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]


class Progress:
    """One bar over all strategies' requests, with the live escalation rate and cost."""

    def __init__(self, total: int, done: int, *, enabled: bool) -> None:
        self.bar = None
        self.start("")
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=done, unit="req", dynamic_ncols=True)

    def start(self, strategy: str) -> None:
        self.strategy, self.n, self.escalated, self.cost = strategy, 0, 0, 0.0

    def update(self, rows: list[Row]) -> None:
        self.n += len(rows)
        self.escalated += sum(bool(r["escalated"]) for r in rows)
        self.cost += sum(float(r["eff_cost"]) for r in rows)
        if self.bar is not None:
            self.bar.set_description(self.strategy)
            self.bar.set_postfix(esc=f"{self.escalated / self.n:.0%}", cost=f"{self.cost / self.n:.0f}")
            self.bar.update(len(rows))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
