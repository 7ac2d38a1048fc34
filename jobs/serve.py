"""Serve the routed endpoint on Ray Serve: `make serve` == `python -m jobs.serve`.

    python -m jobs.serve                       # embedded default (preset cpu), http://127.0.0.1:8000
    python -m jobs.serve serve=cpu-tiny http.port=8010
    python -m jobs.serve serve=gpu memory=server ray=cluster

The same typed config feeds `serve run serve.app:build_app preset=...` and `serve build`.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import hydra
from omegaconf import DictConfig

from jobs import cli
from jobs.ray_init import init_ray
from memroute.config.serve import ServeConfig

log = logging.getLogger(__name__)


def start(cfg: ServeConfig) -> str:
    """Deploy the app on Ray Serve (local loopback node by default); returns the base URL."""
    from memroute.config.serve import check_serve_config

    check_serve_config(cfg)  # before Ray is imported: a bad field fails in a second, not a minute
    if cfg.router.calibrator:  # the artifact checked here, its path absolute for the replicas
        from pathlib import Path

        from memroute import build

        cfg.router.calibrator = str(Path(cfg.router.calibrator).expanduser().resolve())
        build.calibrator(cfg.router)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    from ray import serve

    from serve.app import build_app

    init_ray(cfg.ray)
    level = logging.getLevelName(cfg.ray.log_level.upper())
    logging.getLogger("ray.serve").setLevel(level)  # Serve's lines in this process
    # In the replicas' own log files, memroute's warnings stay (a store failing, a tier skipped).
    replicas = logging.getLevelName(min(level, logging.WARNING))
    serve.start(http_options={"host": cfg.http.host, "port": cfg.http.port},
                logging_config={"enable_access_log": False, "log_level": replicas})
    from memroute.config.schema import ordered_cascade

    names = " -> ".join(m.name for m in ordered_cascade(cfg.cascade))
    print(f"memroute: deploying the router and {names} (loading models)...", flush=True)
    t0 = time.perf_counter()
    serve.run(build_app(cfg), name=cfg.name, route_prefix=cfg.route_prefix, blocking=False)
    print(f"memroute: ready in {time.perf_counter() - t0:.0f} s", flush=True)
    return f"http://{cfg.http.host}:{cfg.http.port}"


def usage(url: str) -> str:
    key = (os.environ.get("MEMROUTE_API_KEYS", "") or "YOUR_KEY:tenant").split(",")[0].rsplit(":", 1)[0]
    admin = (os.environ.get("MEMROUTE_ADMIN_KEYS", "") or "YOUR_ADMIN_KEY").split(",")[0].strip()
    return f"""memroute is serving at {url}/v1 (OpenAI-compatible; health {url}/healthz)
operators (admin key): curl -s {url}/metrics -H 'Authorization: Bearer {admin}'

curl -s {url}/v1/chat/completions -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' \\
  -d '{{"model": "memroute", "user": "alice", "messages": [{{"role": "user", "content": "My locker code is 4471."}}]}}'

python - <<'PY'
from openai import OpenAI
client = OpenAI(base_url="{url}/v1", api_key="{key}")
reply = client.chat.completions.create(model="memroute", user="alice",
                                       messages=[{{"role": "user", "content": "What is my locker code?"}}])
print(reply.choices[0].message.content, reply.model_extra["memroute"])
PY
Ctrl-C stops the server."""


@hydra.main(config_path="../conf", config_name="serve", version_base="1.3")
def main(dcfg: DictConfig) -> None:
    cli.run_task(dcfg, ServeConfig, run)


def run(cfg: ServeConfig) -> None:
    """Deploy, print how to call it, and (``blocking``) serve until Ctrl-C or SIGTERM."""
    url = start(cfg)
    print(usage(url), flush=True)
    if not cfg.blocking:
        return
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    from ray import serve

    print("shutting down: draining the journal into Milvus...", flush=True)
    serve.shutdown()


if __name__ == "__main__":
    cli.main(main, "serve")
