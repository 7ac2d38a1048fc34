"""Start (or join) Ray for a job: a loopback-only local node by default, a cluster by address."""

from __future__ import annotations

import logging
import os

from memroute.config import RayConfig
from memroute.errors import MemrouteError


def init_ray(cfg: RayConfig) -> bool:
    """Start a local loopback node, or join ``cfg.address``. False if Ray was already up."""
    # Read by Ray when it is imported: keeps every socket of a local node on 127.0.0.1.
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray
    from ray._private import ray_constants

    if ray.is_initialized():
        return False
    level = logging.getLevelName(cfg.log_level.upper())
    if not isinstance(level, int):
        raise MemrouteError(f"ray.log_level must be DEBUG, INFO, WARNING or ERROR, got "
                            f"{cfg.log_level!r}", field="ray.log_level")
    if cfg.address:
        ray.init(address=cfg.address, logging_level=level, log_to_driver=cfg.log_to_driver)
        return True
    if ray_constants.ENABLE_RAY_CLUSTER:
        raise MemrouteError(
            "Ray was imported without RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, so a local node would "
            "listen on the external interface; set it in the environment",
            field="ray",
        )
    from serve.loopback import runtime_env

    ray.init(
        runtime_env=runtime_env(),  # the replicas' gRPC servers on loopback too
        num_cpus=cfg.num_cpus,
        num_gpus=cfg.num_gpus,
        object_store_memory=cfg.object_store_memory,
        include_dashboard=cfg.include_dashboard,
        dashboard_host="127.0.0.1",
        logging_level=level,
        log_to_driver=cfg.log_to_driver,
    )
    if not cfg.log_to_driver:
        print(f"ray: workers' logs in {worker_logs()} (ray.log_to_driver=true prints them here)",
              flush=True)
    return True


def worker_logs() -> str:
    """The local node's session log folder."""
    import ray

    try:
        return str(ray._private.worker.global_worker.node.get_logs_dir_path())
    except AttributeError:  # a Ray without this private path: the documented default
        return "/tmp/ray/session_latest/logs"
