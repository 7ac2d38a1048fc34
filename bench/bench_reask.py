"""Re-ask a replay's questions with the memories it injected, under other memory layouts (paired).

A replay records, per request, the tier that answered and the ids of the memories it was shown;
its Milvus Lite folder keeps their texts. This bench rebuilds each scored question's prompt with
those same memories under each ``--layout`` (``router.*`` overrides, e.g. ``memory_dates=all``)
and asks the same tier again, greedy, so the layouts differ in nothing else: a paired comparison
without a second replay's drift (a different answer changes what later requests remember).
The first layout should reproduce the replay's own answers (it prints how many it does).

    .venv/bin/python bench/bench_reask.py .memroute/replays/<run> [<run> ...] \
        --layout all:memory_dates=all --layout auto:memory_dates=auto --asks-time

Limits: the facts block is not rebuilt (the replays measured here ran with extraction below its
threshold); the memory texts are the store's at the end of the run (a pair's text never changes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from memroute.config.schema import AssetsConfig, ModelConfig, RouterConfig
from memroute.eval.replay.scoring import best_f1
from memroute.routing.memory_view import asks_stated_time
from memroute.routing.prompt import build_messages, memory_layout
from memroute.types import Memory, RetrievalHit

WRONG_BELOW = 0.5


@dataclass
class Case:
    run: str
    row: dict
    references: tuple[str, ...]
    hits: list[RetrievalHit]
    answers: dict[str, tuple[str, float]] = field(default_factory=dict)


def flat_section(config: dict, prefix: str, cls: type) -> dict:
    names = {f.name for f in fields(cls)}
    return {k[len(prefix):]: v for k, v in config.items()
            if k.startswith(prefix) and k[len(prefix):] in names}


def store_texts(run: Path, ids: list[int]) -> dict[int, Memory]:
    """The memories ``ids`` from a copy of the run's Milvus Lite folder (the original stays as
    the run left it)."""
    from pymilvus import MilvusClient

    copy = Path(tempfile.mkdtemp(prefix="reask-")) / "milvus.db"
    shutil.copytree(run / "milvus_memroute.db", copy)
    client = MilvusClient(str(copy))
    client.load_collection("memroute_turns")
    out: dict[int, Memory] = {}
    for i in range(0, len(ids), 500):
        for m in client.query("memroute_turns", filter=f"id in {ids[i:i + 500]}",
                              output_fields=["id", "user_id", "text", "session_time",
                                             "source_model", "created_at", "session_id",
                                             "turn_index"]):
            out[m["id"]] = Memory(m["id"], m["user_id"], m["text"], m["session_time"],
                                  m["source_model"], m["created_at"], m["session_id"],
                                  m["turn_index"])
    client.close()
    shutil.rmtree(copy.parent, ignore_errors=True)
    return out


def load_cases(run: Path, asks_time: bool) -> tuple[list[Case], dict]:
    config = json.loads((run / "config.json").read_text())
    trace = {}
    with open(config["trace"]) as f:
        for line in f:
            r = json.loads(line)
            trace[r["request_id"]] = r
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("f1") is not None and r["memory_ids"]
            and r.get("strategy", "memroute") == "memroute"
            and (not asks_time or asks_stated_time(r["query"]))]
    memories = store_texts(run, sorted({int(i) for r in rows for i in r["memory_ids"]}))
    cases = [Case(run.name, r, tuple(trace[r["request_id"]]["reference"]),
                  [RetrievalHit(memories[int(i)], 1.0) for i in r["memory_ids"]
                   if int(i) in memories]) for r in rows]
    return cases, config


def _value(text: str) -> object:
    """``false`` -> False, ``0.5`` -> 0.5, anything else stays text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--layout", action="append", required=True,
                    help="name:key=value,... (router.* overrides); the first is the baseline")
    ap.add_argument("--asks-time", action="store_true",
                    help="only questions asking a stated date or time (asks_stated_time)")
    ap.add_argument("--out", type=Path, default=None, help="write every answer as JSON lines")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # before vLLM's import: quiet start-up

    from memroute import build

    layouts = {}
    for spec in args.layout:
        name, _, overrides = spec.partition(":")
        layouts[name] = {k: _value(v) for k, v in (kv.split("=", 1) for kv in overrides.split(",")
                                                   if kv)}
    cases, configs = [], {}
    for run in args.runs:
        got, config = load_cases(run, args.asks_time)
        cases += got
        configs[run.name] = config
    print(f"{len(cases)} questions from {len(args.runs)} run(s)", flush=True)
    assets = build.asset_store(AssetsConfig())
    for tier in sorted({c.row["tier"] for c in cases}):
        todo = [c for c in cases if c.row["tier"] == tier]
        first = configs[todo[0].run]
        engine = build.backend(ModelConfig(**flat_section(first, f"cascade.{tier}.", ModelConfig)),
                               assets)
        try:
            for name, overrides in layouts.items():
                prompts = []
                for c in todo:
                    router = replace(RouterConfig(**flat_section(configs[c.run], "router.",
                                                                 RouterConfig)), **overrides)
                    layout = memory_layout(router).for_question(c.row["query"])
                    prompts.append(build_messages(router.system_prompt, c.row["query"], c.hits,
                                                  layout=layout, now=c.row["ts"]))
                for c, reply in zip(todo, engine.generate_many(prompts, max_tokens=32)):
                    c.answers[name] = (reply.text.strip(), best_f1(reply.text, c.references) or 0.0)
        finally:
            engine.close()
    report(cases, list(layouts), args.out)


def report(cases: list[Case], names: list[str], out: Path | None) -> None:
    base = names[0]
    same = sum(c.answers[base][0] == c.row["answer"].strip() for c in cases)
    print(f"baseline '{base}' reproduces {same} of {len(cases)} recorded answers")
    print("| layout | questions | F1 | wrong (F1 < 0.5) | better than baseline | worse |")
    print("|---|---|---|---|---|---|")
    for name in names:
        f1s = [c.answers[name][1] for c in cases]
        better = sum(c.answers[name][1] > c.answers[base][1] for c in cases)
        worse = sum(c.answers[name][1] < c.answers[base][1] for c in cases)
        print(f"| {name} | {len(cases)} | {100 * sum(f1s) / max(1, len(f1s)):.1f} | "
              f"{sum(f < WRONG_BELOW for f in f1s)} | {better} | {worse} |")
    for c in cases:
        if len({round(a[1], 3) for a in c.answers.values()}) > 1:
            print(f"- {c.run[-6:]} #{c.row['seq']} tier {c.row['tier']} {c.row['query'][:60]!r} "
                  f"ref {c.references[0]!r}: "
                  + "; ".join(f"{n} {a[0][:30]!r} ({a[1]:.2f})" for n, a in c.answers.items()))
    if out:
        with out.open("w") as f:
            for c in cases:
                f.write(json.dumps({"run": c.run, "seq": c.row["seq"], "tier": c.row["tier"],
                                    "query": c.row["query"], "references": c.references,
                                    "answers": c.answers}) + "\n")


if __name__ == "__main__":
    main()
