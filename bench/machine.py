"""Machine facts printed with every benchmark, so a number always says where it was measured."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any


def _proc_field(path: str, prefix: str) -> str | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def machine_info(packages: tuple[str, ...] = ("torch",)) -> dict[str, Any]:
    mem = _proc_field("/proc/meminfo", "MemTotal")
    info: dict[str, Any] = {
        "cpu": _proc_field("/proc/cpuinfo", "model name") or platform.processor() or "?",
        "nproc": len(os.sched_getaffinity(0)),
        "ram_gib": round(int(mem.split()[0]) / 2**20, 1) if mem else "?",
        "python": platform.python_version(),
        "os": platform.platform(),
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
    }
    for pkg in packages:
        try:
            info[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return info
