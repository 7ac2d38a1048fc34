"""Plumbing shared by the tests that deploy the Serve app: a free loopback port, the health wait,
and the app deployed on a loopback Ray node (started here unless a test module already has one)."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from typing import Any


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, timeout: float = 120.0) -> dict:
    import httpx

    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{url}/healthz", timeout=10)
            if r.status_code == 200 and r.json().get("status") == "ok":
                return r.json()
            last = r.text
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"the app did not become healthy at {url}: {last!r}")


def start_local_ray(runtime_env: dict, attempts: int = 2) -> None:
    """A loopback Ray node of this process's own; retried once when it times out during start
    (a busy machine: processes of a node another test just killed still winding down)."""
    import ray

    for attempt in range(attempts):
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False,
                     logging_level="WARNING", runtime_env=runtime_env)
            return
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for this
            if "timed out during startup" not in str(exc) or attempt == attempts - 1:
                raise
            ray.shutdown()
            time.sleep(5.0)


@contextlib.contextmanager
def deployed(cfg: Any, port: int) -> Iterator[dict[str, Any]]:
    """``cfg`` (a ServeConfig listening on ``port``) deployed and healthy; yields url, health and
    the times Ray was up and the app healthy. Shuts down only what it started."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback-only node
    import ray
    from ray import serve

    from serve.app import build_app

    t0 = time.perf_counter()
    ray_was_up = ray.is_initialized()
    if not ray_was_up:
        # "local": a node of its own, never another session's cluster found on this machine
        from serve.loopback import runtime_env

        start_local_ray(runtime_env())
    ray_up = time.perf_counter()
    url = f"http://127.0.0.1:{port}"
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port},
                    logging_config={"enable_access_log": False})
        serve.run(build_app(cfg), name=cfg.name, route_prefix="/", blocking=False)
        health = wait_healthy(url)
        yield {"url": url, "health": health, "t0": t0, "ray_up": ray_up, "healthy": time.perf_counter()}
    finally:
        serve.shutdown()
        if not ray_was_up and ray.is_initialized():
            ray.shutdown()


def mock_serve_config(
    tmp: Any,
    port: int,
    *,
    keys: dict[str, str],
    admin_keys: list[str],
    tier0_rules: list[dict] = (),  # type: ignore[assignment]
    tier0_args: dict | None = None,
    tier1_args: dict | None = None,
    tenant_rate_limits: dict | None = None,
    **serve_fields: Any,
) -> Any:
    """Two ``engine: mock`` tiers (0.5B-priced "mock-small" -> 8B-priced "mock-large", tau 0.5)
    behind the real ingress, with Milvus Lite and the journal under ``tmp``."""
    from memroute.config.api import ApiConfig
    from memroute.config.journal import JournalConfig
    from memroute.config.schema import MemoryConfig, ModelConfig, RouterConfig
    from memroute.config.serve import (
        AutoscalingConfig,
        HttpConfig,
        IngressConfig,
        ServeConfig,
        TierDeployConfig,
    )

    small = ModelConfig(name="mock-small", engine="mock", params_b=0.5,
                        engine_args={"logprob": -0.05, "rules": list(tier0_rules), **(tier0_args or {})})
    large = ModelConfig(name="mock-large", engine="mock", params_b=8.0,
                        engine_args={"answer": "Large answer.", "logprob": -0.01, **(tier1_args or {})})
    one = AutoscalingConfig(min_replicas=1, max_replicas=1)
    fields: dict[str, Any] = dict(
        http=HttpConfig(port=port),
        ingress=IngressConfig(num_cpus=0.25, autoscaling=one),
        cascade={"0": small, "1": large},
        deploy={str(i): TierDeployConfig(num_cpus=0.25, autoscaling=one) for i in range(2)},
        memory=MemoryConfig(uri=str(tmp / "milvus.db"), collection="memroute_mock"),
        # The mock tiers answer canned text: the confidence rule alone routes (no grounding).
        router=RouterConfig(tau=0.5, max_tokens=24, grounding="off"),
        journal=JournalConfig(path=str(tmp / "journal.sqlite3")),
        api=ApiConfig(api_keys=dict(keys), admin_keys=list(admin_keys),
                      tenant_rate_limits=dict(tenant_rate_limits or {})),
        blocking=False,
    )
    fields.update(serve_fields)
    return ServeConfig(**fields)
