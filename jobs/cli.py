"""The error funnel of every ``jobs/*`` entry point: what the command line does with an exception.

* a bad setting or bad input (a :class:`~memroute.errors.MemrouteError` with status < 500, a
  Hydra composition failure, a missing file a setting names; an
  :class:`~memroute.errors.AssetError` too: its line says what to fetch) prints ONE line to
  stderr naming the field, ``error [dataset.name]: Unknown dataset 'locomoo'. Available: ...``,
  and exits 2;
* another :class:`~memroute.errors.MemrouteError` with status >= 500 (a back end down) prints its
  one line and exits 1;
* anything else is an internal fault: the traceback, exit 1; Ctrl-C exits 130, no traceback.

A Hydra job uses it twice::

    @hydra.main(config_path="../conf", config_name="benchmark", version_base="1.3")
    def main(dcfg: DictConfig) -> None:
        cli.run_task(dcfg, BenchmarkConfig, body)        # body(cfg) -> exit code or None

    if __name__ == "__main__":
        cli.main(main, "benchmark")

:func:`main` composes the config once before Hydra does (:func:`memroute.config.compose.compose`),
so a setting Hydra would reject (``dataset=locomoo``, ``dataset.limit=abc``, an unknown key) is
one line too; a multirun is checked without its sweeps, whose trials Hydra reports itself.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from memroute.errors import AssetError, MemrouteError

T = TypeVar("T")

BAD_INPUT, FAULT, INTERRUPTED = 2, 1, 130


def error_line(exc: BaseException, settings: Any = None, *, tag_field: bool = True) -> str | None:
    """The one line for an error the user can fix, or None for an internal fault.

    ``settings`` (a config, a dict): an ``OSError`` about a path one of them names is bad input.
    ``tag_field=False``: no ``[field]`` tag (``jobs.assets``, whose messages name the asset).
    """
    if isinstance(exc, MemrouteError):
        tagged = tag_field and exc.field
        return f"error [{exc.field}]: {exc.message}" if tagged else f"error: {exc.message}"
    if isinstance(exc, OSError) and (key := _setting_naming(exc, settings)):
        return f"error [{key}]: {exc.strerror or type(exc).__name__}: {os.fsdecode(exc.filename)!r}"
    return None


def report(exc: BaseException, settings: Any = None, *, tag_field: bool = True) -> int:
    """Print ``exc`` the funnel's way and return the exit code."""
    if isinstance(exc, KeyboardInterrupt):
        print("interrupted", file=sys.stderr, flush=True)
        return INTERRUPTED
    line = error_line(exc, settings, tag_field=tag_field)
    if line is None:
        traceback.print_exception(exc)
        return FAULT
    print(line, file=sys.stderr, flush=True)
    server_side = isinstance(exc, MemrouteError) and exc.status >= 500
    return FAULT if server_side and not isinstance(exc, AssetError) else BAD_INPUT


def guarded(body: Callable[[], int | None], settings: Any = None, *, tag_field: bool = True) -> int:
    """Run ``body``; its exit code (None: 0), or the code :func:`report` gives its exception."""
    try:
        return body() or 0
    except (Exception, KeyboardInterrupt) as exc:
        return report(exc, settings, tag_field=tag_field)


def run_task(dcfg: Any, schema: type[T], body: Callable[[T], int | None]) -> None:
    """Inside ``@hydra.main``: ``body(typed config)``, exiting with its code or the funnel's.

    ``SystemExit`` passes Hydra's handler (it catches ``Exception``). A multirun trial raises
    instead, so that Hydra (or Ray) records the failed trial; a bad setting as its one line.
    """
    from hydra.core.hydra_config import HydraConfig

    from memroute.config import to_object
    from memroute.logs import quiet_third_party_logs

    if not (HydraConfig.initialized() and HydraConfig.get().verbose):  # hydra.verbose=true: all
        quiet_third_party_logs()
    if _full_error():
        code = body(to_object(dcfg, schema))
    elif _multirun():
        from hydra.errors import CompactHydraException  # Hydra prints these without a traceback

        try:
            code = body(to_object(dcfg, schema))
        except Exception as exc:
            line = error_line(exc, dcfg)
            if line is None:
                raise
            raise CompactHydraException(line) from None
    else:
        code = guarded(lambda: body(to_object(dcfg, schema)), settings=dcfg)
    if code:
        sys.exit(code)


def main(hydra_main: Callable[[], Any], config_name: str) -> None:
    """The ``__main__`` of a Hydra job: check the command line's config, then hand over to Hydra.

    ``HYDRA_FULL_ERROR=1`` turns the funnel off: Hydra's full tracebacks, for debugging."""
    from memroute.config import register_configs

    try:
        if not _full_error():
            preflight(config_name, sys.argv[1:])
        register_configs()
        hydra_main()
    except (Exception, KeyboardInterrupt) as exc:  # Hydra's own handler reports what it runs
        _exit(report(exc))


def preflight(config_name: str, argv: Sequence[str]) -> None:
    """Compose what ``argv`` asks for (``hydra.*`` overrides and sweeps left out); raises
    :class:`~memroute.errors.ConfigError` naming the field. Help and info flags skip it; the
    schema validates the composition (``to_object`` follows inside the task, under Hydra)."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from memroute.config.compose import compose_dict, composition_error

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = get_args_parser().parse_args(list(argv))
    except SystemExit:  # a bad flag: Hydra says so itself
        return
    if (args.help or args.hydra_help or args.info or args.shell_completion or args.config_path
            or args.config_dir or args.experimental_rerun):
        return
    try:
        overrides = OverridesParser.create().parse_overrides(args.overrides)
    except HydraException as exc:
        raise composition_error(exc) from None
    multirun = args.multirun or "hydra.mode=MULTIRUN" in args.overrides
    kept = [o.input_line for o in overrides
            if not o.is_hydra_override() and not (multirun and o.is_sweep_override())]
    compose_dict(args.config_name or config_name, kept)


def _exit(code: int) -> NoReturn:
    sys.stderr.flush()
    sys.exit(code)


def _full_error() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def _multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _setting_naming(exc: OSError, settings: Any) -> str | None:
    """The setting whose value is the path ``exc`` is about (or, for a permission error, a
    folder above it)."""
    if settings is None or not exc.filename:
        return None
    target = Path(os.fsdecode(exc.filename)).expanduser().resolve()
    for key, value in _string_settings(settings):
        path = Path(value).expanduser().resolve()
        if path == target or (isinstance(exc, PermissionError) and path in target.parents):
            return key
    return None


def _string_settings(obj: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Every ``(dotted key, value)`` with a non-empty string (or path) value, depth first."""
    if isinstance(obj, (str, os.PathLike)):
        return [(prefix, os.fspath(obj))] if prefix and os.fspath(obj) else []
    if is_dataclass(obj) and not isinstance(obj, type):
        items = [(f.name, getattr(obj, f.name)) for f in fields(obj)]
    elif isinstance(obj, Mapping):
        items = list(_safe_items(obj))
    elif isinstance(obj, Sequence):
        items = list(enumerate(obj))
    else:
        return []
    found = []
    for key, value in items:
        found += _string_settings(value, f"{prefix}.{key}" if prefix else str(key))
    return found


def _safe_items(mapping: Mapping) -> list[tuple[Any, Any]]:
    out = []
    for key in mapping:
        try:  # a DictConfig resolves interpolations on access; one that fails names no path
            out.append((key, mapping[key]))
        except Exception:
            continue
    return out
