"""Compose a job's config the way its Hydra entry point would, as a typed dataclass.

``compose("benchmark", ["dataset=locomo"], BenchmarkConfig)`` is what
``python -m jobs.benchmark dataset=locomo`` runs (the ``hydra`` node left out; the jobs'
pre-flight check, jobs/cli.py, uses :func:`compose_dict`). A composition failure (a misspelt
group option, an unknown key, a value of the wrong type, an override that does not parse)
raises :class:`~memroute.errors.ConfigError` naming the field or group, as
:func:`memroute.config.to_object` does for validation. Hydra is imported here only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from memroute.config import register_configs, to_object
from memroute.errors import ConfigError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from memroute.config.serve import ServeConfig

T = TypeVar("T")

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"  # the repo's conf/, what jobs/ load


def compose(config_name: str, overrides: Sequence[str], schema: type[T]) -> T:
    """``conf/<config_name>.yaml`` with command-line ``overrides``, validated as ``schema``."""
    return to_object(compose_dict(config_name, overrides), schema)


def compose_dict(config_name: str, overrides: Sequence[str]) -> DictConfig:
    """The composed config before :func:`to_object` (interpolations unresolved)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            return hydra_compose(config_name, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        raise composition_error(exc) from None


def compose_serve_config(preset: str, overrides: Sequence[str]) -> ServeConfig:
    """The config ``python -m jobs.serve serve=<preset> <overrides>`` would run."""
    from memroute.config.serve import ServeConfig

    return compose("serve", [f"serve={preset}", *overrides], ServeConfig)


def composition_error(exc: BaseException) -> ConfigError:
    """A Hydra composition failure as one :class:`ConfigError` line naming the field or group."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and exc.options:
        group, _, name = exc.missing_cfg_file.rpartition("/")
        options = ", ".join(o for o in exc.options if not o.endswith("_schema"))
        kind = f"{group} config" if group else "config"
        return ConfigError(f"Unknown {kind} {name!r}. Available: {options}", field=group or None)
    if isinstance(exc, OverrideParseException):
        return ConfigError(_summary(str(exc)), field=exc.override)
    cause = exc if isinstance(exc, OmegaConfBaseException) else exc.__cause__
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        message = _summary(cause.msg)
        schema = getattr(cause, "object_type", None)
        if message.startswith("Key ") and is_dataclass(schema):
            message += f". Keys: {', '.join(f.name for f in fields(schema))}"
        return ConfigError(message, field=cause.full_key)
    text = str(exc)
    key = re.search(r"full_key: (\S+)", text) or re.search(r"(?:override|argument) '([^'=]+)", text)
    field = key.group(1) if key else None
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file:
        field = exc.missing_cfg_file.rpartition("/")[0] or field
    return ConfigError(_summary(text), field=field)


def _summary(text: str) -> str:
    """Hydra/OmegaConf messages as one line: no indented details, search path or docs link."""
    text = text.split("\nConfig search path:")[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln[:1].isspace()]
    lines = [ln for ln in lines if not ln.startswith("See https://")]
    head, *rest = [ln.rstrip(":") for ln in lines] or [""]
    return ": ".join([head, "; ".join(rest)]) if rest else head
