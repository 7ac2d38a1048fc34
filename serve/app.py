"""The application builder: one typed config -> the Serve application (tiers + router ingress).

Used by all three ways to start it:

    python -m jobs.serve serve=cpu-tiny                         # Hydra job (make serve)
    serve run serve.app:build_app preset=cpu-tiny router.tau=0.6
    serve build serve.presets:gpu -o serve-config.yaml          # config for a KubeRay RayService
"""

from __future__ import annotations

from typing import Any

from ray.serve import Application

from memroute.config.serve import ServeConfig, check_serve_config, served_tiers, with_absolute_paths
from serve.ingress import RouterIngress
from serve.tier import TierDeployment

_LOGGING = {"enable_access_log": False, "log_level": "WARNING"}  # no per-request log lines


def build_app(args: ServeConfig | dict[str, Any] | None = None) -> Application:
    """``args``: a typed :class:`ServeConfig`, or ``serve run``-style strings
    (``preset=<conf/serve/NAME.yaml>`` plus dotted overrides) composed by the Hydra job's loader."""
    cfg = args if isinstance(args, ServeConfig) else _from_args(args or {})
    cfg = with_absolute_paths(check_serve_config(cfg))
    tiers = []
    for tier in served_tiers(cfg):
        d = tier.deploy
        deployment = TierDeployment.options(
            name=f"tier{tier.index}-{tier.model.name}",
            autoscaling_config=d.autoscaling.to_ray(),
            max_ongoing_requests=d.max_ongoing_requests,
            ray_actor_options={"num_cpus": d.num_cpus, "num_gpus": d.num_gpus},
            logging_config=_LOGGING,
        )
        tiers.append(deployment.bind(tier.model, cfg.assets, d.max_batch_size, d.batch_wait_timeout_s))
    ingress = RouterIngress.options(
        name="router",
        autoscaling_config=cfg.ingress.autoscaling.to_ray(),
        max_ongoing_requests=cfg.ingress.max_ongoing_requests,
        ray_actor_options={"num_cpus": cfg.ingress.num_cpus},
        logging_config=_LOGGING,
    )
    return ingress.bind(cfg, *tiers)


def _from_args(args: dict[str, Any]) -> ServeConfig:
    from memroute.config.compose import compose_serve_config

    args = dict(args)
    preset = str(args.pop("preset", "cpu"))
    return compose_serve_config(preset, [f"{k}={v}" for k, v in args.items()])
