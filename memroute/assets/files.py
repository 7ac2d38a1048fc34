"""File helpers of the asset cache: content hashes, crash-safe writes and the verified sidecar.

Every write goes to a temporary name, is fsynced and then renamed, so a killed process never
leaves anything that looks complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path

CHUNK = 1 << 20  # read/copy block size: large files are streamed, never loaded whole


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def folder_files(root: Path) -> list[tuple[str, Path]]:
    """Regular files below ``root`` as (posix relative path, path), sorted by relative path."""
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for fname in files:
            p = Path(dirpath) / fname
            out.append((p.relative_to(root).as_posix(), p))
    return sorted(out)


def folder_sha256(root: Path) -> str:
    """Digest of a folder: sha256 over ``"<relpath>\\0<file sha256>\\n"`` for files sorted by path.

    Adding, removing, renaming or changing any file changes it.
    """
    h = hashlib.sha256()
    for rel, p in folder_files(root):
        h.update(f"{rel}\0{file_sha256(p)}\n".encode())
    return h.hexdigest()


def fingerprint(path: Path) -> dict[str, list[int]]:
    """(size, mtime_ns) of the file, or of every file of the folder: cheap change detection."""
    if path.is_dir():
        files = folder_files(path)
    else:
        files = [(path.name, path)]
    fp = {}
    for rel, p in files:
        st = p.stat()
        fp[rel] = [st.st_size, st.st_mtime_ns]
    return fp


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{secrets.token_hex(4)}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def fsync_tree(root: Path) -> None:
    for _rel, p in folder_files(root):
        with open(p, "rb") as fh:
            os.fsync(fh.fileno())
    for dirpath, _dirs, _files in os.walk(root):
        fsync_dir(Path(dirpath))


def swap_in_dir(tmp: Path, final: Path) -> None:
    """Rename a finished temp folder onto ``final``, replacing an old copy if there is one."""
    trash = None
    if final.exists():
        trash = final.with_name(f".{final.name}.old-{secrets.token_hex(4)}")
        os.replace(final, trash)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


# The verified sidecar (models/<name>.verified.json) records the sha256 and the (size, mtime_ns)
# of every file once they were hashed against the pin, so later lookups trust an unchanged file
# without re-hashing 1 GB.


def sidecar_ok(sidecar: Path, sha256: str, path: Path) -> bool:
    """True when ``sidecar`` says this exact (unchanged) content hashed to ``sha256``."""
    try:
        rec = json.loads(sidecar.read_text())
        return rec.get("sha256") == sha256 and rec.get("files") == fingerprint(path)
    except (OSError, ValueError):
        return False


def write_sidecar(sidecar: Path, path: Path, sha256: str) -> None:
    """Record that the current content of ``path`` hashed to ``sha256``."""
    fp = fingerprint(path)
    rec = {"sha256": sha256, "size": sum(s for s, _ in fp.values()), "files": fp}
    write_atomic(sidecar, json.dumps(rec, indent=1).encode())
