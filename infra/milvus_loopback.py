"""A real Milvus server (PyPI ``milvus``, the 2.3 standalone build) reachable only on 127.0.0.1.

``milvus-server`` binds its gRPC ports on every interface and has no setting to change that, and
its coordinators advertise "the first unicastable address". So it runs in a network namespace of
its own (``unshare -rn``: unprivileged where user namespaces are allowed, or ``unshare -n`` as
root), where the only interface is loopback and its fixed ports collide with nothing. Two relays
join that namespace to ours over a Unix socket (files are not namespaced):

    client -> 127.0.0.1:PORT (relay, our namespace) -> DATA/milvus.sock
           -> (relay, its namespace) -> 127.0.0.1:19530 -> milvus

    python infra/milvus_loopback.py --data DIR --port PORT [--milvus-server PATH]

prints ``ready 127.0.0.1:PORT`` once Milvus' /healthz says every component is up and gRPC
answers through both relays,
and stops the server cleanly on SIGTERM / SIGINT (SIGINT to ``milvus-server``, whose wrapper
orphans its child on SIGTERM). Standard library only: the tests and the scale benchmark start it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

INNER_PORT = 19530  # the server's default proxy port, inside its own namespace
HEALTH_PORT = 9091  # its HTTP /healthz, inside the namespace
HEALTHY_FILE = "healthy"  # touched inside once /healthz answers 200
READY_TIMEOUT_S = 120.0


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def _joiner(connect):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await connect()
        except OSError:
            writer.close()  # the server is not up yet: the client retries
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    return handle


async def _serve_while(server: asyncio.AbstractServer, stop: asyncio.Event,
                       child: subprocess.Popen) -> None:
    """Relay until a stop signal, the child's exit or our parent's (a test run killed: the
    server must not outlive it). Polled: a thread blocked in ``wait`` would keep
    ``asyncio.run`` from returning before the child is stopped."""
    parent = os.getppid()
    async with server:
        while child.poll() is None and not stop.is_set() and os.getppid() == parent:
            try:
                await asyncio.wait_for(stop.wait(), 0.5)
            except asyncio.TimeoutError:
                pass


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _mark_when_healthy(marker: Path) -> None:
    """Touch ``marker`` once Milvus' own /healthz (port 9091, inside the namespace) says every
    component is up: its gRPC port accepts before the coordinators can serve a query."""
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", HEALTH_PORT)
            writer.write(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            await writer.drain()
            reply = await reader.read()
            writer.close()
            if reply.startswith(b"HTTP/1.") and b" 200 " in reply.split(b"\r\n", 1)[0]:
                marker.touch()
                return
        except OSError:
            pass
        await asyncio.sleep(0.2)


# -- inside the namespace: milvus-server and the Unix-socket -> 127.0.0.1:19530 relay ----------

def _inside(data: Path, sock: Path, milvus_server: str) -> int:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    log = open(data / "milvus-server.log", "ab")
    proc = subprocess.Popen([milvus_server, "--data", str(data)], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)

    healthy = data / HEALTHY_FILE
    healthy.unlink(missing_ok=True)

    async def main() -> None:
        stop = _stop_event()
        sock.unlink(missing_ok=True)
        asyncio.create_task(_mark_when_healthy(healthy))
        server = await asyncio.start_unix_server(
            _joiner(lambda: asyncio.open_connection("127.0.0.1", INNER_PORT)), path=str(sock))
        await _serve_while(server, stop, proc)

    try:
        asyncio.run(main())
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # the wrapper's child (the milvus binary, etcd inside it) shares the process group
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return 0 if proc.returncode in (0, -signal.SIGINT, 130) else 1


# -- our namespace: unshare, then the 127.0.0.1:PORT -> Unix-socket relay ----------------------

def _unshare_prefix() -> list[str]:
    """``unshare -rn`` where user namespaces are allowed, else ``unshare -n`` as root."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        raise SystemExit("milvus_loopback: needs `unshare` (util-linux) and `ip` (iproute2)")
    for prefix in (["unshare", "-rn"], ["unshare", "-n"]):
        if subprocess.run(prefix + ["true"], capture_output=True).returncode == 0:
            return prefix
    raise SystemExit("milvus_loopback: cannot create a network namespace "
                     "(unprivileged user namespaces are off and this is not root)")


def _health(port: int) -> bool:
    """A gRPC round trip would need grpcio; a TCP connect through both relays that is not
    closed at once means the inner port accepted (the inner relay closes when it refuses)."""
    try:
        with socket.create_connection(("127.0.0.1", port), 1.0) as s:
            # the HTTP/2 client preface and an empty SETTINGS frame: gRPC answers with its own
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            s.settimeout(2.0)
            return s.recv(9)[3:4] == b"\x04"  # a frame of type SETTINGS
    except OSError:
        return False


def _outside(data: Path, port: int, milvus_server: str) -> int:
    data.mkdir(parents=True, exist_ok=True)
    sock = data / "milvus.sock"
    (data / HEALTHY_FILE).unlink(missing_ok=True)  # a restart's: not this start's health
    inner = subprocess.Popen(
        _unshare_prefix() + [sys.executable, os.path.abspath(__file__), "--inside",
                             "--data", str(data), "--milvus-server", milvus_server])

    async def main() -> None:
        stop = _stop_event()
        server = await asyncio.start_server(
            _joiner(lambda: asyncio.open_unix_connection(str(sock))), "127.0.0.1", port)
        t0 = time.monotonic()
        while not ((data / HEALTHY_FILE).exists() and await asyncio.to_thread(_health, port)):
            if inner.poll() is not None:
                raise SystemExit(f"milvus_loopback: the server exited ({data}/milvus-server.log)")
            if time.monotonic() - t0 > READY_TIMEOUT_S:
                raise SystemExit(f"milvus_loopback: not ready in {READY_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.2)
        print(f"ready 127.0.0.1:{port} in {time.monotonic() - t0:.1f}s", flush=True)
        await _serve_while(server, stop, inner)

    try:
        asyncio.run(main())
    finally:
        if inner.poll() is None:
            inner.send_signal(signal.SIGTERM)
            try:
                inner.wait(45)
            except subprocess.TimeoutExpired:
                inner.kill()
                inner.wait()
    return inner.returncode or 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="the server's data directory")
    ap.add_argument("--port", type=int, default=19530, help="the port on 127.0.0.1")
    ap.add_argument("--milvus-server", default=shutil.which("milvus-server") or "milvus-server",
                    help="the PyPI milvus package's milvus-server")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    data = args.data.resolve()
    if args.inside:
        return _inside(data, data / "milvus.sock", args.milvus_server)
    if not Path(args.milvus_server).is_file() and shutil.which(args.milvus_server) is None:
        print(f"milvus_loopback: --milvus-server {args.milvus_server} not found "
              "(`make milvus-server` installs it in .venv-milvus)", file=sys.stderr)
        return 2
    return _outside(data, args.port, args.milvus_server)


if __name__ == "__main__":
    sys.exit(main())
