"""The Dockerfile: hadolint-clean, three targets that each run as a non-root user with a
HEALTHCHECK, pinned base images, and every install step a Makefile target (the CPU image runs
`make install`, the very recipe `make test` runs; the GPU ones `make install-gpu`)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def stages() -> dict[str, list[str]]:
    """Each stage's instructions (continuation lines joined), by stage name."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if m := re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I):
            current = m.group(2) or m.group(1)
            out[current] = [line]
        elif current is not None:
            out[current].append(line)
    return out


def args() -> dict[str, str]:
    return dict(re.findall(r"^ARG\s+(\w+)=(\S+)", DOCKERFILE.read_text(), re.M))


def test_hadolint_finds_nothing():
    hadolint = Path(sys.executable).with_name("hadolint")  # the venv's, from the dev extra
    if not hadolint.is_file():
        pytest.fail("hadolint is missing: it comes with the dev extra (make install)")
    run = subprocess.run([str(hadolint), "--failure-threshold", "info", str(DOCKERFILE)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("target", ["cpu", "cuda", "rocm"])
def test_each_target_runs_unprivileged_with_a_healthcheck(target):
    steps = stages()[target]
    users = [s.split(None, 1)[1] for s in steps if s.startswith("USER ")]
    inherited = [] if users else [s.split(None, 1)[1] for s in stages()["base"] if s.startswith("USER ")]
    last_user = (users or inherited)[-1]
    assert last_user not in ("root", "0"), target
    assert any(s.startswith("HEALTHCHECK ") and "/healthz" in s for s in steps), target
    assert any(s.startswith("CMD ") for s in steps), target


def test_base_images_are_pinned_by_tag():
    values = args()
    for name, steps in stages().items():
        image = steps[0].split()[1]
        image = re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], image)
        if image in stages():  # a stage of this file
            continue
        assert ":" in image and not image.endswith(":latest"), f"{name}: {image}"


def test_every_install_step_is_a_makefile_target_that_exists():
    """`make -n` of each `make ...` the Dockerfile runs: a renamed target or variable fails here."""
    calls = []
    for steps in stages().values():
        for step in steps:
            if step.startswith("RUN "):
                calls += [shlex.split(part.strip()) for part in step[4:].split("&&")
                          if part.strip().startswith("make ")]
    assert {c[1] for c in calls} >= {"install", "install-gpu", "fetch-assets", "assets-all"}
    for call in calls:
        dry = subprocess.run(["make", "-n", *call[1:]], cwd=ROOT, capture_output=True, text=True)
        assert dry.returncode == 0, f"{' '.join(call)}: {dry.stderr}"
    # no pip install outside the Makefile's recipes
    assert not re.search(r"\bpip3?\s+install\b", DOCKERFILE.read_text())
