"""Crash and store faults under live traffic: every acknowledged turn-pair ends up in Milvus once.

Clients (threads, plain httpx, no Idempotency-Key) state facts with unique markers ("My code is
KZ-00042.") for users of two tenants; a 200 is an acknowledgement. Faults injected:

- **kill -9 of the serving tree** (``test_kill9_of_the_serving_tree_then_restart``): the app runs
  in a process of its own (``mock_server.py``: driver, GCS, raylet, Serve controller, proxy,
  replicas, Milvus Lite in the router replica) started with ``start_new_session``. Mid-traffic the
  process group gets SIGKILL; Ray's workers, which sit in process groups of their own, get it at
  the same instant (found by the tree snapshot and by ``RAY_RAYLET_PID`` in their environment),
  and the test checks that nothing of that node survives. The app restarts on the same state dir
  and port: the journal replays into Milvus, and each acknowledged marker is counted exactly once.
  Run twice in the slow variant (a second crash on the restarted app).
- **store process killed** (``TestStoreServer``, slow): the app uses a ``milvus-lite server``
  process (the multi-process deployment the store's error hint names; memory.uri http://...)
  that gets SIGKILL and is started again on the same data dir and port.
- **store process hung** (``TestStoreServer``, slow): that server gets SIGSTOP, then SIGCONT.
- **store unwritable** (``test_store_unwritable``, the conftest's in-process app): the Milvus Lite
  data directory made immutable with ``chattr -R +i`` (root ignores chmod; +i is what a read-only
  remount looks like: EPERM on every write, reads still work), then ``chattr -R -i``.
- **a store flush failing on that fault** (``test_failed_store_flush_keeps_pairs``): no pair the
  journal released may sit in Milvus Lite's memtable (a failed flush drops it), and pairs
  acknowledged while every flush fails stay pending until the store is writable again.

Milvus Lite 3.2 (the file URI) is pure Python threads inside the router replica: there is no
server subprocess to stop or kill there, hence the ``milvus-lite server`` process for those two.
A moved data directory is not tested: Milvus Lite silently recreates the directory tree at the
old path and writes new segments there, which no rename back can merge (not a recoverable fault).

Asserted: answers keep flowing (200 within STALL_S) during a store fault, flagged
``memory_degraded`` exactly when retrieval failed; /readyz is 503 naming the store while it is
down and 200 after; after /admin/drain each acknowledged marker is stored exactly once, no marker
twice (checked first, whatever else failed). Three product bugs this suite found are fixed and
kept as regressions: a failed Milvus Lite flush lost pairs the journal had released, a restarted
server's released collection failed every search, and a hung server blocked requests and
health checks with no timeout. The figures go to
``.memroute/reliability/{crash_restart,store_faults}.json`` (docs/RELIABILITY.md).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import pytest

from tests.integration import serving
from tests.reliability.conftest import ADMIN, KEYS, auth, record

httpx = pytest.importorskip("httpx")
psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.reliability

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "tests" / "reliability" / "mock_server.py"
TENANT_KEYS = {tenant: key for key, tenant in KEYS.items()}  # acme -> sk-rel-a, ...
MARKER = re.compile(r"My code is (KZ-\d{5})\.")
START_TIMEOUT_S = 240.0  # a cold Ray node + three replicas on 2 busy cores
REQUEST_TIMEOUT_S = 30.0
CRASH_CLIENTS = 6  # concurrent clients before a kill
KILL_AFTER_ACKS = 40  # acknowledged requests before the SIGKILL ...
KILL_AFTER_S = 20.0  # ... or this long, whichever comes first
FAULT_S = 6.0  # how long each store fault lasts (at least)
STALL_S = 5.0  # a request without a 200 this long into a store fault has stalled
RECOVER_TIMEOUT_S = 60.0
_summary: dict[str, dict] = {}  # store_faults figures, one entry per fault


# -- processes -------------------------------------------------------------------------------


def _alive(p) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _new_session(cmd: list[str], log: Path) -> subprocess.Popen:
    """``cmd`` in a session (process group) of its own (mock_server.py kills that group when
    the test process dies)."""
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


@dataclass
class AppProcess:
    """``mock_server.py`` in a session of its own; its Ray node's files under ``ray_tmp``."""

    state: Path
    port: int
    memory_uri: str = ""
    proc: subprocess.Popen | None = None
    ray_tmp: str = ""
    raylets: set[str] = field(default_factory=set)  # raylet pids (their workers carry them)
    started_s: float = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> float:
        """Start and wait for READY; returns the seconds it took."""
        self.ray_tmp = tempfile.mkdtemp(prefix="mr-rel-ray-", dir="/tmp")  # short: unix sockets
        log = self.state.parent / f"server-{Path(self.ray_tmp).name}.log"  # one per start
        t0 = time.perf_counter()
        self.proc = _new_session([sys.executable, str(SERVER), str(self.state), str(self.port),
                                  self.ray_tmp, self.memory_uri], log)
        while f"READY {self.url}" not in log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.perf_counter() - t0 > START_TIMEOUT_S:
                raise AssertionError(f"mock_server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        self.started_s = time.perf_counter() - t0
        self.raylets |= {str(p.pid) for p in self.tree() if p.name() == "raylet"}
        return self.started_s

    def tree(self) -> list:
        """Every live process of this app: descendants of the server, anything naming its Ray
        temp dir, and Ray workers of its raylets (workers sit in process groups of their own)."""
        found = {}
        with suppress(psutil.Error):
            root = psutil.Process(self.proc.pid)
            found = {p.pid: p for p in [root, *root.children(recursive=True)]}
        for p in psutil.process_iter():
            if p.pid in found:
                continue
            with suppress(psutil.Error):
                if (self.ray_tmp and self.ray_tmp in " ".join(p.cmdline())) or \
                        p.environ().get("RAY_RAYLET_PID") in self.raylets:
                    found[p.pid] = p
        return [p for p in found.values() if _alive(p)]

    def kill9(self) -> dict:
        """SIGKILL the process group, then at once every process of the tree outside it; wait
        until none is left. Returns what was killed and how many sat outside the group."""
        assert self.proc is not None
        snapshot = self.tree()
        t0 = time.perf_counter()
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        outside = [p for p in snapshot if _alive(p) and _pgid(p) != self.proc.pid]
        for p in outside:
            with suppress(psutil.Error):
                p.kill()
        self.proc.wait(10)
        strays = _wait_gone(self.tree, 20.0)
        figures = {"processes_killed": len(snapshot), "outside_process_group": len(outside),
                   "strays_left": len(strays), "kill_s": round(time.perf_counter() - t0, 2)}
        assert not strays, f"processes of the killed app still run: {strays}"
        self.raylets.clear()  # dead pids: never match a later process that reuses one
        return figures

    def cleanup(self) -> None:
        """Finalizer: kill whatever of the app still runs (also after a failed test)."""
        if self.proc is not None:
            with suppress(Exception):
                self.kill9()
        if self.ray_tmp:
            shutil.rmtree(self.ray_tmp, ignore_errors=True)


def _pgid(p) -> int | None:
    try:
        return os.getpgid(p.pid)
    except OSError:
        return None


def _wait_gone(tree, timeout: float) -> list:
    deadline = time.monotonic() + timeout
    while (left := tree()) and time.monotonic() < deadline:
        for p in left:  # leftovers: started after the snapshot (a worker being spawned)
            with suppress(psutil.Error):
                p.kill()
        time.sleep(0.2)
    return [(p.pid, p.name()) for p in left if _alive(p)]


@dataclass
class MilvusServer:
    """Milvus Lite's gRPC server (``milvus-lite server``) on 127.0.0.1 in a session of its own,
    data under ``data`` (started through mock_server.py, which dies with the test)."""

    data: Path
    port: int = field(default_factory=serving.free_port)
    proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> float:
        t0 = time.perf_counter()
        self.proc = _new_session([sys.executable, str(SERVER), "milvus", str(self.data),
                                  str(self.port)], self.data.parent / "milvus-server.log")
        while not _port_open(self.port):
            assert self.proc.poll() is None, "milvus-lite server exited"
            assert time.perf_counter() - t0 < 60, "milvus-lite server did not listen"
            time.sleep(0.1)
        return time.perf_counter() - t0

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, sig)
        if sig == signal.SIGKILL:
            self.proc.wait(10)

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGCONT)
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def _port_open(port: int) -> bool:
    with suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


# -- traffic ---------------------------------------------------------------------------------


@dataclass
class Sent:
    tenant: str
    user: str
    marker: str
    status: int | None = None  # None: no response (connection lost, timeout)
    degraded: bool | None = None
    t_sent: float = 0.0  # monotonic times: request sent, answer (or failure) came
    at: float = 0.0
    error: str = ""  # the client's exception, when no response came
    bad: str = ""  # a 200 whose body or headers are not what the app must send

    @property
    def acked(self) -> bool:
        return self.status == 200


class Clients:
    """``n`` client threads, each one user (tenants alternate), sending statements with unique
    markers back to back until :meth:`stop`."""

    def __init__(self, url: str, n: int, prefix: str, counter: itertools.count) -> None:
        self.url, self.counter, self.sent = url, counter, []
        self.users = [(("acme", "globex")[i % 2], f"{prefix}-u{i}") for i in range(n)]
        self._stop, self._lock = threading.Event(), threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=u, daemon=True)
                         for u in self.users]

    def __enter__(self) -> Self:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(REQUEST_TIMEOUT_S + 5)

    def acked(self) -> list[Sent]:
        with self._lock:
            return [s for s in self.sent if s.acked]

    def _run(self, tenant: str, user: str) -> None:
        with httpx.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S) as http:
            while not self._stop.is_set():
                s = Sent(tenant, user, f"KZ-{next(self.counter):05d}")
                with self._lock:
                    self.sent.append(s)
                _send(http, s)
                if s.status is None:
                    time.sleep(0.05)  # the app is gone: do not spin


def _send(http, s: Sent) -> None:
    body = {"model": "memroute", "user": s.user,
            "messages": [{"role": "user", "content": f"My code is {s.marker}."}]}
    s.t_sent = time.monotonic()
    try:
        r = http.post("/v1/chat/completions", json=body, headers=auth(TENANT_KEYS[s.tenant]))
    except httpx.HTTPError as exc:
        s.at, s.error = time.monotonic(), type(exc).__name__
        return
    s.at, s.status = time.monotonic(), r.status_code
    if r.status_code != 200:
        return
    try:  # checked here, reported by exactly_once (an assert would only end this thread)
        out = r.json()
        s.degraded = out["memroute"]["memory_degraded"]
        answer = out["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        s.bad = r.text[:300]
        return
    # the stored pair carries the marker (the tier-0 rule echoes the statement)
    if answer != f"Noted: My code is {s.marker}." or \
            r.headers.get("x-memroute-memory-degraded") != str(s.degraded).lower():
        s.bad = r.text[:300]


# -- what the app says -----------------------------------------------------------------------


def drain(url: str) -> None:
    r = httpx.post(f"{url}/admin/drain", headers=auth(ADMIN), timeout=60)
    assert r.status_code == 200 and r.json() == {"drained": True}, r.text


def memories(url: str, tenant: str, user: str, timeout: float = 60.0) -> dict:
    r = httpx.get(f"{url}/admin/memories", params={"tenant": tenant, "user": user},
                  headers=auth(ADMIN), timeout=timeout)
    assert r.status_code == 200, r.text
    return r.json()


def stored_markers(url: str, users) -> Counter:
    """How many stored rows carry each marker (after a drain; nothing may stay pending)."""
    drain(url)
    counts: Counter = Counter()
    for tenant, user in users:
        body = memories(url, tenant, user)
        assert body["pending"] == 0, body
        for row in body["memories"]:
            found = set(MARKER.findall(row["text"]))
            assert len(found) == 1, row  # one statement per pair, no foreign rows
            counts.update(found)
    return counts


def health(url: str) -> dict:
    return httpx.get(f"{url}/healthz", timeout=30).json()


def journal_stats(url: str) -> dict | None:
    """/healthz's journal figures; None when liveness itself does not answer within 10 s."""
    try:
        return httpx.get(f"{url}/healthz", timeout=10).json()["journal"]
    except httpx.HTTPError:
        return None


def readyz(url: str, timeout: float = 5.0) -> tuple[int | None, list[str]]:
    """(status, problems); (None, []) when it did not answer within ``timeout``."""
    try:
        r = httpx.get(f"{url}/readyz", timeout=timeout)
    except httpx.HTTPError:
        return None, []
    return r.status_code, r.json().get("problems", [])


class PairsLost(AssertionError):
    """Acknowledged pairs are missing from the store."""


class AnswersStopped(AssertionError):
    """Requests got no 200 while the store was faulty."""


class RetrievalNotRecovered(AssertionError):
    """Answers stay flagged memory_degraded after the store is back."""


def exactly_once(sent: list[Sent], counts: Counter) -> dict:
    """Acknowledged markers: each stored once; any marker: never twice. Returns the figures."""
    acked = {s.marker for s in sent if s.acked}
    others = {s.marker for s in sent} - acked
    lost = sorted(m for m in acked if counts[m] == 0)
    dup = sorted(m for m, c in counts.items() if c > 1)
    unknown = sorted(set(counts) - {s.marker for s in sent})
    figures = {"requests_sent": len(sent), "acknowledged": len(acked),
               "acknowledged_found_once": sum(counts[m] == 1 for m in acked),
               "unacknowledged": len(others),
               "unacknowledged_stored": sum(counts[m] == 1 for m in others),
               "duplicates": len(dup), "lost": len(lost)}
    assert not [s.bad for s in sent if s.bad], "200s with a wrong answer or header"
    if lost:
        raise PairsLost(f"{len(lost)} acknowledged pairs lost: {lost}")
    assert not dup, f"pairs stored twice: {dup}"
    assert not unknown, f"rows nobody sent: {unknown}"
    return figures


def wait_until(check, timeout: float, every: float = 0.3) -> float | None:
    """Seconds until ``check()`` is true, None if it never was within ``timeout``."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if check():
            return time.perf_counter() - t0
        time.sleep(every)
    return None


# -- 1. kill -9 of the whole serving tree, then restart ---------------------------------------


@pytest.fixture
def crash_app(tmp_path):
    """The app in its own process group (killed by the test, and by this finalizer)."""
    state = tmp_path / "state"
    state.mkdir()
    apps: list[AppProcess] = []

    def start() -> AppProcess:
        app = AppProcess(state, port)
        apps.append(app)
        app.start()
        return app

    port = serving.free_port()
    try:
        yield start
    finally:
        for app in apps:
            app.cleanup()


def crash_cycle(start, app: AppProcess, counter, n: int) -> tuple[AppProcess, dict, list[Sent]]:
    """Traffic -> SIGKILL mid-traffic -> restart on the same state dir -> the figures."""
    with Clients(app.url, CRASH_CLIENTS, f"crash{n}", counter) as clients:
        wait_until(lambda: len(clients.acked()) >= KILL_AFTER_ACKS, KILL_AFTER_S, 0.05)
        pending_at_kill = health(app.url)["journal"]["pending"]
        acked_at_kill = len(clients.acked())
        killed = app.kill9()
    assert acked_at_kill > 0, f"no request was acknowledged in {KILL_AFTER_S}s before the kill"
    restarted = start()
    recovered = wait_until(lambda: health(restarted.url)["journal"]["pending"] == 0,
                           RECOVER_TIMEOUT_S)
    figures = {"acknowledged_before_kill": acked_at_kill,
               "journal_pending_at_kill": pending_at_kill, **killed,
               "restart_s": round(restarted.started_s, 1),
               "replayed_within_s": None if recovered is None else round(recovered, 1)}
    return restarted, figures, clients.sent


def run_crash_test(crash_app, cycles: int) -> None:
    counter, sent, runs = itertools.count(1), [], []
    app = crash_app()
    first_start = app.started_s
    for n in range(cycles):
        app, figures, cycle_sent = crash_cycle(crash_app, app, counter, n)
        sent += cycle_sent
        users = {(s.tenant, s.user) for s in cycle_sent}
        figures |= exactly_once(cycle_sent, stored_markers(app.url, users))
        runs.append(figures)
        print(f"\n[crash {n + 1}/{cycles}] {figures}")
    total = exactly_once(sent, stored_markers(app.url, {(s.tenant, s.user) for s in sent}))
    record("crash_restart", {"cycles": cycles, "clients": CRASH_CLIENTS,
                             "first_start_s": round(first_start, 1), "per_cycle": runs,
                             "total": total})


def test_kill9_of_the_serving_tree_then_restart(crash_app):
    run_crash_test(crash_app, cycles=1)


@pytest.mark.slow
def test_kill9_twice(crash_app):
    """A second crash, on the app the first restart brought up (the replay itself replayed)."""
    run_crash_test(crash_app, cycles=2)


# -- 2. store faults under traffic ------------------------------------------------------------

STORE_CLIENTS = 3
MARKERS = itertools.count(50_000)  # store-fault markers: unique across the module's faults


class Readiness(threading.Thread):
    """Polls /readyz every half second: (monotonic time, status or None, problems)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.seen, self._done = url, [], threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.seen.append((time.monotonic(), *readyz(self.url)))
            self._done.wait(0.5)

    def stop(self) -> None:
        self._done.set()
        self.join(10)


def pair_counts(url: str, users) -> dict:
    """Pairs in Milvus and still in the journal, summed over ``users`` (None: unreadable)."""
    try:
        bodies = [memories(url, t, u, timeout=10) for t, u in users]  # a hung store: 10 s
    except (AssertionError, httpx.HTTPError):
        return {"in_store": None, "pending": None}
    return {"in_store": sum(b["count"] for b in bodies),
            "pending": sum(b["pending"] for b in bodies)}


@dataclass
class Fault:
    name: str
    inject: object  # () -> None
    restore: object  # () -> None
    down: bool  # reads fail too: answers during the fault are flagged memory_degraded


def run_fault(url: str, fault: Fault, count=None) -> dict:
    """Traffic; inject; FAULT_S of traffic with the fault; restore; recovery; then every
    acknowledged pair exactly once, counted by ``count(users)`` (default: the app's admin API
    after a drain). Returns the figures; asserts what must hold during the fault."""
    with Clients(url, STORE_CLIENTS, f"sf-{fault.name}", MARKERS) as clients:
        assert wait_until(lambda: len(clients.acked()) >= 6, 60), "no traffic before the fault"
        before = pair_counts(url, clients.users)
        probe = Readiness(url)
        t_fault = time.monotonic()
        fault.inject()
        probe.start()
        time.sleep(FAULT_S)
        during = pair_counts(url, clients.users)
        journal = journal_stats(url)  # the outage's backlog (flushed oldest first)
        t_restore = time.monotonic()
        fault.restore()
        ready_s = wait_until(lambda: readyz(url)[0] == 200, RECOVER_TIMEOUT_S)
        probe.stop()
        healthz_answered = journal is not None
        journal = journal or health(url)["journal"]  # no answer during the fault: right after
        flushed_s = wait_until(lambda: health(url)["journal"]["flushed"] - journal["flushed"]
                               >= journal["pending"], RECOVER_TIMEOUT_S)
        t_recovered = time.monotonic()
        time.sleep(2.0)  # traffic after the recovery
    figures = {"fault": fault.name,
               **fault_figures(clients.sent, probe.seen, t_fault, t_restore, t_recovered),
               "pairs_before_fault": before, "pairs_at_fault_end": during,
               "healthz_answered_at_fault_end": healthz_answered,
               "backlog_at_restore": journal["pending"],
               "ready_again_after_restore_s": ready_s and round(ready_s, 1),
               "backlog_written_after_restore_s": flushed_s and round(flushed_s, 1)}
    _summary[fault.name] = figures
    print(f"\n[{fault.name}] {figures}")
    assert ready_s is not None, f"/readyz not 200 within {RECOVER_TIMEOUT_S}s of the recovery"
    assert flushed_s is not None, "the outage's backlog was not written after the recovery"
    # exactly once first: it must hold whatever else the fault did
    counts = (count or (lambda users: stored_markers(url, users)))(clients.users)
    figures |= exactly_once(clients.sent, counts)
    figures["pairs_after_drain"] = sum(counts.values())
    print(f"[{fault.name}] counted: {figures}")
    check_fault(figures, fault.down)
    return figures


def fault_figures(sent: list[Sent], seen, t_fault, t_restore, t_recovered) -> dict:
    """The requests sent while the store was faulty and what /readyz said meanwhile. A request
    sent at least STALL_S before the restore that got no 200 within STALL_S has stalled."""
    during = [s for s in sent if t_fault <= s.t_sent < t_restore]
    answered = [s for s in during if s.acked and s.at < t_restore]
    stalled = [s for s in during if s.t_sent < t_restore - STALL_S
               and not (s.acked and s.at - s.t_sent <= STALL_S)]
    before = [s for s in sent if s.at < t_fault]
    after = [s for s in sent if s.t_sent > t_recovered]
    not_ready = [(t, st, pr) for t, st, pr in seen if t <= t_restore and st != 200]
    return {"fault_s": round(t_restore - t_fault, 1),
            "requests_during_fault": len(during),
            "ok_during_fault": len(answered),
            "max_latency_during_fault_s": max((round(s.at - s.t_sent, 2) for s in during),
                                              default=None),
            "stalled_during_fault": [(s.marker, s.status or s.error, round(s.at - s.t_sent, 1))
                                     for s in stalled],
            "flagged_degraded_during_fault": sum(bool(s.degraded) for s in answered),
            "flagged_degraded_before_fault": sum(bool(s.degraded) for s in before),
            "requests_after_recovery": len(after),
            "flagged_degraded_after_recovery": sum(bool(s.degraded) for s in after),
            "readyz_polls_during_fault": sum(t <= t_restore for t, _, _ in seen),
            "readyz_not_ready": len(not_ready),
            "readyz_no_answer": sum(st is None for _, st, _ in not_ready),
            "readyz_503_naming_store": sum(st == 503 and any("store" in p for p in pr)
                                           for _, st, pr in not_ready),
            "not_ready_after_s": not_ready and round(not_ready[0][0] - t_fault, 1),
            "readyz_problems": sorted({re.sub(r"\d+ in a row", "N in a row", p)[:140]
                                       for _, _, pr in not_ready for p in pr})}


def check_fault(f: dict, down: bool) -> None:
    """Answers kept flowing, flagged exactly when memory was unreadable; /readyz said so."""
    if f["stalled_during_fault"] or not f["ok_during_fault"]:
        raise AnswersStopped(f"{f['ok_during_fault']} answers during the fault; stalled "
                             f"(marker, status, s): {f['stalled_during_fault']}")
    assert f["flagged_degraded_before_fault"] == 0
    if down:  # retrieval failed: the answers say so
        assert f["flagged_degraded_during_fault"] > 0
    else:  # reads still work: nothing to flag
        assert f["flagged_degraded_during_fault"] == 0
    assert f["readyz_503_naming_store"] > 0, "/readyz never said 503 naming the store"


# -- 2a. the store as a milvus-lite server process: killed, hung --------------------------------


def server_counts(url: str, milvus: MilvusServer):
    """After a drain, counts markers straight from the Milvus server (a second client: it is
    a server), since the app's own reads fail after a store restart (see the killed test)."""
    from pymilvus import MilvusClient

    from memroute.namespace import namespace

    def count(users) -> Counter:
        drain(url)
        client = MilvusClient(uri=milvus.uri)
        try:
            client.load_collection(COLLECTION)  # the app's load is lost with a server restart
            counts: Counter = Counter()
            for tenant, user in users:
                rows = client.query(COLLECTION, filter=f'user_id == "{namespace(tenant, user)}"',
                                    output_fields=["text"], limit=16384)
                for row in rows:
                    found = set(MARKER.findall(row["text"]))
                    assert len(found) == 1, row
                    counts.update(found)
            return counts
        finally:
            client.close()

    return count


COLLECTION = "memroute_mock"  # serving.mock_serve_config's collection


@pytest.mark.slow
class TestStoreServer:
    """The app on a ``milvus-lite server`` process (``memory.uri: http://127.0.0.1:PORT``)."""

    @pytest.fixture(scope="class")
    def served(self, tmp_path_factory):
        tmp = tmp_path_factory.mktemp("store-server")
        milvus = MilvusServer(tmp / "milvus-data")
        app = AppProcess(tmp / "state", serving.free_port())
        app.state.mkdir()
        try:
            milvus.start()
            app.memory_uri = milvus.uri
            app.start()
            yield {"url": app.url, "milvus": milvus}
        finally:
            app.cleanup()
            milvus.cleanup()

    def test_store_server_killed_then_restarted(self, served):
        """SIGKILL of the store process, started again on its data dir and port: answers flow
        (flagged), /readyz 503 "the store does not answer", the backlog is written once; then
        retrieval must work again without restarting the app."""
        milvus, t = served["milvus"], {}

        def restart() -> None:
            t["store_restart_s"] = round(milvus.start(), 1)

        fault = Fault("store_server_killed", lambda: milvus.signal(signal.SIGKILL), restart,
                      down=True)
        f = run_fault(served["url"], fault, count=server_counts(served["url"], milvus))
        _summary[fault.name] |= t
        record("store_faults", _summary)
        if f["flagged_degraded_after_recovery"]:
            raise RetrievalNotRecovered(f"{f['flagged_degraded_after_recovery']} of "
                                        f"{f['requests_after_recovery']} answers after recovery")

    def test_store_server_hung(self, served):
        """SIGSTOP of the store process, then SIGCONT: the pairs must still be stored once."""
        milvus = served["milvus"]
        fault = Fault("store_server_hung", lambda: milvus.signal(signal.SIGSTOP),
                      lambda: milvus.signal(signal.SIGCONT), down=True)
        try:
            f = run_fault(served["url"], fault, count=server_counts(served["url"], milvus))
        finally:
            record("store_faults", _summary)
        assert f["flagged_degraded_after_recovery"] == 0


# -- 2b. the Milvus Lite directory turns unwritable (the conftest's in-process app) ----------


def _chattr(flag: str, db: Path) -> None:
    """chattr -R ``flag`` on the WAL dirs first, then the rest: a write then fails at the WAL
    (no store flush follows a failed upsert) rather than between an upsert and its flush."""
    for path in [*db.glob("collections/*/wal"), db]:
        # -f: files Milvus Lite creates or removes meanwhile are no errors; the dirs matter
        subprocess.run(["chattr", "-R", "-f", flag, str(path)], check=False)
    out = subprocess.run(["lsattr", "-d", str(db)], check=False, capture_output=True,
                         text=True).stdout
    assert ("i" in out.split()[0]) == (flag == "+i"), out


def _chattr_works(tmp: Path) -> bool:
    """True where an immutable directory refuses even root (ext4 and the like, CAP_LINUX_IMMUTABLE)."""
    if shutil.which("chattr") is None:
        return False
    probe = tmp / "chattr-probe"
    probe.mkdir(exist_ok=True)
    try:
        if subprocess.run(["chattr", "+i", str(probe)], check=False,
                          capture_output=True).returncode:
            return False
        try:
            (probe / "x").touch()
        except OSError:
            return True
        return False
    finally:
        subprocess.run(["chattr", "-i", str(probe)], check=False, capture_output=True)
        shutil.rmtree(probe, ignore_errors=True)


@pytest.fixture
def unwritable_store(app):
    """(inject, restore) for the app's Milvus Lite dir; always writable again afterwards."""
    db = app["tmp"] / "milvus.db"
    if not _chattr_works(app["tmp"]):
        pytest.skip("chattr +i is not available or not enforced here")
    try:
        yield (lambda: _chattr("+i", db)), (lambda: _chattr("-i", db))
    finally:
        subprocess.run(["chattr", "-R", "-f", "-i", str(db)], check=False)


def test_store_unwritable(app, unwritable_store):
    """EPERM on every store write under traffic, then writable again: reads keep working (no
    answer flagged), /readyz 503 "store writes failing", the backlog written once after."""
    inject, restore = unwritable_store
    f = run_fault(app["url"], Fault("store_unwritable", inject, restore, down=False))
    assert f["flagged_degraded_after_recovery"] == 0
    record("store_faults", _summary)


def _memtable_rows(db: Path) -> bool:
    """True while Milvus Lite holds written rows not yet flushed to segments (its WAL file)."""
    return any(w.stat().st_size > 0 for w in db.glob("collections/*/wal/wal_data_*.arrow"))


def test_failed_store_flush_keeps_pairs(app, unwritable_store):
    """Regression (a pair lost for good): the flusher marked pairs flushed after the upsert while
    the store was flushed only now and then, and a Milvus Lite flush that fails on an I/O error
    drops its memtable (the next good flush deletes the WAL). Now the store is flushed before
    the journal lets pairs go: no released pair sits in the memtable, a failing flush keeps the
    pairs pending, and once the store is writable each is stored exactly once."""
    url, db = app["url"], app["tmp"] / "milvus.db"
    inject, restore = unwritable_store
    counter, sent = itertools.count(90_000), []
    user = ("acme", "flushfail-u0")
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S) as http:
        for _ in range(5):
            sent.append(s := Sent(*user, f"KZ-{next(counter):05d}"))
            _send(http, s)
            assert wait_until(lambda: health(url)["journal"]["pending"] == 0, 30, 0.05)
            assert not _memtable_rows(db), "the journal let go of a pair Milvus Lite had not flushed"
        inject()
        try:
            for _ in range(3):  # acknowledged (journaled) while every store flush fails
                sent.append(s := Sent(*user, f"KZ-{next(counter):05d}"))
                _send(http, s)
            failed = httpx.post(f"{url}/admin/drain", headers=auth(ADMIN), timeout=60)
            pending = health(url)["journal"]["pending"]
        finally:
            restore()
    figures = {"drain_during_fault_status": failed.status_code, "pending_during_fault": pending,
               "sent": len(sent)}
    _summary["store_flush_failed"] = figures
    try:
        assert pending >= 1  # kept, not released
        figures |= exactly_once(sent, stored_markers(url, [user]))
    finally:
        record("store_faults", _summary)
