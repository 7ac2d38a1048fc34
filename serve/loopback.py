"""Keep a local node's Serve replicas on 127.0.0.1.

Ray 2.60 starts each replica's inter-deployment gRPC server on ``[::]:0`` (every interface),
hard-coded in ``ray/serve/_private/replica.py`` with no setting to change it (ray-project/ray
#64544), while every other socket of a local node follows ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
onto loopback. :func:`loopback_replicas` is a ``worker_process_setup_hook``: run in each worker
before any replica exists, it rewrites that one bind address to 127.0.0.1, the address the node
advertises anyway. Only for a local node (``jobs/ray_init.py``); a cluster's replicas must be
reachable from other nodes. ``tests/reliability/test_serving_tree.py`` checks every listening
socket of the tree, so a Ray upgrade that changes this shows up as a failing test.
"""

from __future__ import annotations

_ANY = "[::]:"


def loopback_replicas() -> None:
    from ray._common import tls_utils

    bind = tls_utils.add_port_to_grpc_server
    if getattr(bind, "memroute_loopback", False):
        return

    def on_loopback(server, address: str):
        if address.startswith(_ANY):
            address = "127.0.0.1:" + address[len(_ANY):]
        return bind(server, address)

    on_loopback.memroute_loopback = True  # type: ignore[attr-defined]
    tls_utils.add_port_to_grpc_server = on_loopback
    import sys

    replica = sys.modules.get("ray.serve._private.replica")  # imported by name: patch it there too
    if replica is not None:
        replica.add_port_to_grpc_server = on_loopback


def runtime_env() -> dict:
    """The ``ray.init(runtime_env=...)`` of a local loopback node."""
    return {"worker_process_setup_hook": loopback_replicas}
