"""The small tier's frontier with and without router.grounding, read off a replay's shadow log.

A replay with ``shadow_share=1.0`` records, for every question, each tier's answer alone with the
memories the routed request saw, its log-prob confidence, its F1 and grounding's verdict
(``shadow.jsonl``; the replay must run with grounding on so the verdict is recorded). Accepting the
small tier's answer when ``confidence >= tau`` (and, with grounding, when the verdict is not
False) gives, per tau, the share of questions the small tier keeps and the share of those it gets
wrong (F1 < 0.5): the confidently-wrong rate issue 27 asks about. No model is called.

    .venv/bin/python bench/bench_grounding_frontier.py .memroute/replays/<run>/shadow.jsonl \
        --plot frontier.png --trace .memroute/traces/<trace>.jsonl

F1 < 0.5 counts a verbose right answer as wrong ("Warranty number is WG-6877" scores 0.4).
With ``--trace`` (the replayed trace, for the references) a second judge is printed alongside:
an answer is right when it holds every term of a reference (memroute.text.answers.holds_value:
"$40,000" in "our car budget is $40,000.").
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

TAUS = (0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.97, 0.98)


def frontier(rows: list[dict], gate: bool,
             right: Callable[[dict], bool] | None = None) -> list[tuple[float, float, float]]:
    """(tau, small share %, wrong of accepted %) per tau; ``right`` judges the small tier's
    answer (default: F1 >= 0.5)."""
    right = right or (lambda r: r["f1"][0] >= 0.5)
    out = []
    for tau in TAUS:
        kept = [r for r in rows if r["confidences"][0] >= tau
                and not (gate and r["grounded"][0] is False)]
        wrong = sum(not right(r) for r in kept)
        out.append((tau, 100 * len(kept) / len(rows), 100 * wrong / max(1, len(kept))))
    return out


def holds_reference(references: dict[str, list[str]]) -> Callable[[dict], bool]:
    """Right when the small tier's answer holds every term of one of the references."""
    from memroute.text.answers import holds_value

    return lambda row: bool(holds_value(row["answers"][0], references[row["request_id"]]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shadow", type=Path)
    ap.add_argument("--plot", type=Path, default=None)
    ap.add_argument("--trace", type=Path, default=None,
                    help="the replayed trace: also judge by 'the answer holds the reference'")
    args = ap.parse_args()
    lines = args.shadow.read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    if not rows or "grounded" not in rows[0]:
        raise SystemExit(f"{args.shadow}: no grounding verdicts "
                         "(replay with router.grounding=memory)")
    right = sum(r["f1"][0] >= 0.5 for r in rows)
    verdicts = [(r["grounded"][0], r["f1"][0] >= 0.5) for r in rows]
    print(f"{len(rows)} questions; the small tier alone is right on "
          f"{100 * right / len(rows):.1f} %")
    for v in (True, False, None):
        n = sum(g is v for g, _ in verdicts)
        ok = sum(g is v and good for g, good in verdicts)
        print(f"  grounded={v}: {n} answers, {ok} right")
    curves = {gate: frontier(rows, gate) for gate in (False, True)}
    print("\n| tau | small % (confidence) | wrong of accepted % "
          "| small % (+ grounding) | wrong of accepted % |")
    print("|---|---|---|---|---|")
    for (tau, s0, w0), (_, s1, w1) in zip(curves[False], curves[True]):
        print(f"| {tau} | {s0:.1f} | {w0:.1f} | {s1:.1f} | {w1:.1f} |")
    if args.trace:
        lines = args.trace.read_text().splitlines()
        refs = {r["request_id"]: r["reference"] for r in map(json.loads, lines) if r}
        judge = holds_reference(refs)
        held = {gate: frontier(rows, gate, judge) for gate in (False, True)}
        print("\nJudged by 'the answer holds the reference' instead of F1 >= 0.5:\n")
        print("| tau | small % | wrong of accepted % | small % (+ grounding) "
              "| wrong of accepted % |")
        print("|---|---|---|---|---|")
        for (tau, s0, w0), (_, s1, w1) in zip(held[False], held[True]):
            print(f"| {tau} | {s0:.1f} | {w0:.1f} | {s1:.1f} | {w1:.1f} |")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 4))
        for gate, label in ((False, "log-prob confidence"), (True, "+ grounding")):
            points = curves[gate]
            ax.plot([s for _, s, _ in points], [w for _, _, w in points], "o-", label=label)
        ax.axhline(5, color="grey", ls=":", lw=1)
        ax.axvline(60, color="grey", ls=":", lw=1)
        ax.set_xlabel("questions the small tier keeps (%)")
        ax.set_ylabel("wrong among those kept (%)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
