"""Every ``jobs/*`` entry point funnels errors the same way (jobs/cli.py): a bad setting or bad
input is ONE stderr line naming the field and exit 2; an internal fault is a traceback and exit 1;
Ctrl-C is exit 130 without a traceback.

The command-line cases run the real ``python -m jobs.<job>``; each fails before any model, store or
Ray starts (a second or two each), all of them together in a thread pool.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from jobs import cli
from memroute.errors import AssetError, BackendError, ConfigError

ROOT = Path(__file__).resolve().parents[2]

# (job, arguments, the field the line must name). {tmp}: a fresh temp folder.
CASES = [
    ("benchmark", ["dataset=locomoo"], "[dataset]"),
    ("benchmark", ["dataset=locomo", "dataset.path=/nonexistent.json"], "[dataset.path]"),
    ("benchmark", ["dataset.limit=abc"], "[dataset.limit]"),
    ("benchmark", ["router.tau=high"], "[router.tau]"),
    ("benchmark", ["dataset.limitt=3"], "[dataset.limitt]"),
    ("benchmark", ["dataset.name=locomoo"], "[dataset.name]"),
    ("ingest", ["dataset=locomoo"], "[dataset]"),
    ("ingest", ["dataset=locomo", "dataset.path=/nonexistent.json"], "[dataset.path]"),
    ("ingest", ["dataset.limit=abc"], "[dataset.limit]"),
    ("retrieval_eval", ["dataset=locomoo"], "[dataset]"),
    ("retrieval_eval", ["dataset=locomo", "dataset.path=/nonexistent.json"], "[dataset.path]"),
    ("retrieval_eval", ["dataset.limit=abc"], "[dataset.limit]"),
    ("rescore", ["run_id=no-such-run"], "[run_id]"),
    ("rescore", ["run_dir=/nonexistent/run"], "[run_dir]"),
    ("rescore", ["run_id=x", "wrong_below=abc"], "[wrong_below]"),
    ("cost_report", ["run_id=no-such-run"], "[run_id]"),
    ("cost_report", ["run_dir=/nonexistent/run"], "[run_dir]"),
    ("cost_report", ["run_id=x", "volumes.personal=abc"], "[volumes.personal]"),
    ("serve", ["serve=cpuu"], "[serve]"),
    ("serve", ["http.port=99999"], "[http.port]"),
    ("serve", ["http.port=abc"], "[http.port]"),
    ("serve", ["serve=cpu-tiny", "router.tau=high"], "[router.tau]"),
    ("serve", ["serve=cpu-tiny", "cascade.1.path=/nonexistent/model"], "[cascade.1.path]"),
    ("serve", ["serve=cpu-tiny", "embedder.path={tmp}/no-encoder"], "[embedder.path]"),
    ("replay", ["trace={tmp}/t.jsonl", "strategies=[memroutee]"], "[strategies]"),
    ("replay", ["trace=/nonexistent/trace.jsonl"], "[trace]"),
    ("replay", ["trace={tmp}/t.jsonl", "concurrency=abc"], "[concurrency]"),
    ("make_trace", ["source=synthetc"], "[source]"),
    ("make_trace", ["source=locomo", "path=/nonexistent/locomo10.json"], "[path]"),
    ("make_trace", ["num_requests=abc"], "[num_requests]"),
    ("calibrate", ["run_id=no-such-run"], "[run_id]"),
    ("calibrate", ["run_dir=/nonexistent/run"], "[run_dir]"),
    ("calibrate", ["run_id=x", "target_f1=abc"], "[target_f1]"),
    ("assets", ["fetch", "nope"], "Unknown asset 'nope'"),
    ("assets", ["verify", "minilm-l6", "--cache-dir", "{tmp}/empty"], "fetch minilm-l6"),
]
EXPECTED = {  # the whole line where it is fixed by the config alone
    ("benchmark", ("dataset=locomoo",)):
        "error [dataset]: Unknown dataset config 'locomoo'. Available: locomo, longmemeval, "
        "synthetic, traces",
    ("serve", ("serve=cpuu",)):
        "error [serve]: Unknown serve config 'cpuu'. Available: cpu, cpu-tiny, external, gpu, gpu-a100-80g, gpu-h200",
    ("serve", ("http.port=99999",)): "error [http.port]: http.port must be 1-65535, got 99999",
}


def _command(job: str, args: list[str], tmp: Path) -> list[str]:
    args = [a.replace("{tmp}", str(tmp)) for a in args]
    if job == "assets":
        return [sys.executable, "-m", "jobs.assets", *args]
    extra = [f"hydra.run.dir={tmp / 'hydra'}"]
    if job not in ("serve", "make_trace", "calibrate"):
        extra.append("tracking.enabled=false")
    if job in ("benchmark", "retrieval_eval", "rescore", "cost_report", "replay", "calibrate"):
        extra.append(f"output_dir={tmp / 'out'}")
    if job == "ingest":
        extra.append(f"work_dir={tmp / 'work'}")
    if job == "make_trace":
        extra.append(f"output={tmp / 'trace.jsonl'}")
    return [sys.executable, "-m", f"jobs.{job}", *args, *extra]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmps = [tmp_path_factory.mktemp(f"case{i}") for i in range(len(CASES))]  # not in threads: racy

    def one(i: int) -> subprocess.CompletedProcess[str]:
        job, args, _ = CASES[i]
        tmp = tmps[i]
        return subprocess.run(_command(job, args, tmp), cwd=ROOT, capture_output=True, text=True,
                              timeout=120, check=False)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, range(len(CASES))))


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{j}:{' '.join(a)}" for j, a, _ in CASES])
def test_bad_setting_is_one_line_naming_the_field_and_exit_2(results, i):
    job, args, names = CASES[i]
    proc = results[i]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert lines[0].startswith("error") and names in lines[0], lines[0]
    expected = EXPECTED.get((job, tuple(args)))
    assert expected is None or lines[0] == expected


def _boom() -> None:
    raise RuntimeError("an internal fault")


def test_an_internal_fault_prints_the_traceback_and_exits_1(capsys):
    assert cli.guarded(_boom) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: an internal fault" in err and "_boom" in err


def test_ctrl_c_exits_130_without_a_traceback(capsys):
    def interrupted() -> None:
        raise KeyboardInterrupt

    assert cli.guarded(interrupted) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip() == "interrupted"


@pytest.mark.parametrize(
    "exc, code, line",
    [
        (ConfigError("bad fusion", field="retrieval.fusion"), 2,
         "error [retrieval.fusion]: bad fusion"),
        (ConfigError("no field"), 2, "error: no field"),
        (AssetError("Asset 'x' is not in the cache. Run: ..."), 2,
         "error: Asset 'x' is not in the cache. Run: ..."),
        (BackendError("engine died", field="cascade.0"), 1, "error [cascade.0]: engine died"),
    ],
)
def test_memroute_errors_are_one_line(capsys, exc, code, line):
    def fail() -> None:
        raise exc

    assert cli.guarded(fail) == code
    assert capsys.readouterr().err.strip() == line


def test_a_missing_file_a_setting_names_is_bad_input(tmp_path, capsys):
    missing = tmp_path / "nope.json"
    settings = {"dataset": {"name": "traces", "path": str(missing)}}

    def read() -> None:
        missing.read_text()

    assert cli.guarded(read, settings) == 2
    assert capsys.readouterr().err.strip() == (
        f"error [dataset.path]: No such file or directory: {str(missing)!r}"
    )
    # The same error about a file no setting names is an internal fault.
    assert cli.guarded(read, {"dataset": {"path": str(tmp_path / "other.json")}}) == 1
    assert "Traceback" in capsys.readouterr().err


def test_body_exit_codes_pass_through():
    assert cli.guarded(lambda: None) == 0
    assert cli.guarded(lambda: 1) == 1  # e.g. jobs.ingest: the store refused rows


def test_preflight_leaves_sweeps_and_hydra_settings_to_hydra():
    cli.preflight("benchmark", ["-m", "retrieval.top_k=1,2", "hydra/launcher=ray",
                                "+hydra.launcher.ray.init.num_cpus=2", "dataset=locomo,synthetic"])
    cli.preflight("benchmark", ["--help", "dataset=locomoo"])  # help needs no valid config
    with pytest.raises(ConfigError) as e:  # the rest of a multirun is still checked
        cli.preflight("benchmark", ["-m", "retrieval.top_k=1,2", "router.tau=high"])
    assert e.value.field == "router.tau"
    with pytest.raises(ConfigError) as e:  # a single run's sweep is an error, named
        cli.preflight("benchmark", ["dataset=locomo,synthetic"])
    assert e.value.field == "dataset"
