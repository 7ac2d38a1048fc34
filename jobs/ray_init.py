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
    if cfg.address:
        ray.init(address=cfg.address, logging_level=logging.WARNING)
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
        logging_level=logging.WARNING,
    )
    return True
