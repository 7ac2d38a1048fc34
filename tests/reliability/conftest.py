"""The reliability suite's shared parts: one mock-tier Serve app per module (real ingress, real
HTTP, Milvus Lite and the journal in a tmp dir), two tenants, an admin key, and a summary file.

Each test writes the figures it measured to ``.memroute/reliability/<name>.json`` (what
docs/RELIABILITY.md quotes), so a run leaves its numbers behind, not just a pass.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.integration import serving

KEYS = {"sk-rel-a": "acme", "sk-rel-b": "globex"}
ADMIN = "sk-rel-admin"
TIMEOUT = 60.0
# tier 0 escalates "why" questions; a stated "... is XX-123" fact is acknowledged verbatim so
# the stored pair carries it and a later prompt echoes it (the mock's memory echo).
TIER0_RULES = [
    {"match": "(?i)^why\\b", "logprob": -2.5},
    {"match": "(?i)\\bis [A-Z]{2}-\\d+", "answer": "Noted: {query}"},
]
FIGURES = Path(".memroute/reliability")


def record(name: str, figures: dict) -> Path:
    """Write one test's measured figures (JSON) for docs/RELIABILITY.md."""
    FIGURES.mkdir(parents=True, exist_ok=True)
    path = FIGURES / f"{name}.json"
    path.write_text(json.dumps({"measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), **figures},
                               indent=2, default=str))
    return path


def auth(key: str = "sk-rel-a") -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def error_of(r) -> dict:
    """The OpenAI error object of a response (fails on FastAPI's {"detail": ...} or plain text)."""
    body = r.json()
    assert set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"]), body
    return body["error"]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """A deployed mock app: ``url``, ``cfg``, ``tmp`` (its state dir), ``down`` (a path that,
    when it exists, makes tier 0 raise as an engine that is down; ``down1`` for tier 1)."""
    tmp = tmp_path_factory.mktemp("reliability")
    port = serving.free_port()
    down0, down1 = tmp / "tier0.down", tmp / "tier1.down"
    cfg = serving.mock_serve_config(
        tmp, port, keys=KEYS, admin_keys=[ADMIN], tier0_rules=TIER0_RULES,
        tier0_args={"down_when_exists": str(down0)}, tier1_args={"down_when_exists": str(down1)},
    )
    with serving.deployed(cfg, port) as up:
        yield {"url": up["url"], "cfg": cfg, "tmp": tmp, "down": down0, "down1": down1}
