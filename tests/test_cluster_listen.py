"""Every server toyengine starts listens where the user said: ``cluster/start-cluster.sh``
with its defaults (scheduler, dashboard, workers and their nannies) on 127.0.0.1 only;
``toyengine submit --dry-run`` opens no socket at all; a real submission's dashboard is on
the scheduler's host or 127.0.0.1, never on every interface unless asked."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import psutil
from test_cluster_local import hand_cluster

WILDCARDS = {"0.0.0.0", "::", ""}


def _listening(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, ip, port) of every listening TCP socket of ``pids`` and their children."""
    procs: dict[int, psutil.Process] = {}
    for pid in pids:
        p = psutil.Process(pid)
        procs[p.pid] = p
        for c in p.children(recursive=True):
            procs[c.pid] = c
    out = []
    for p in procs.values():
        conns = p.net_connections(kind="inet") if hasattr(p, "net_connections") \
            else p.connections(kind="inet")
        out += [(p.pid, c.laddr.ip, c.laddr.port) for c in conns
                if c.status == psutil.CONN_LISTEN]
    return out


def test_start_cluster_defaults_listen_on_loopback_only(tmp_path: Path) -> None:
    """The script's defaults, except ``--port 0`` (8786 may be taken by another cluster on
    this machine; the host is what is tested). The dashboard keeps its default
    (HOST:8787, Dask moves it to a free port if 8787 is taken)."""
    with hand_cluster(tmp_path / "run", 2, dashboard=()) as cluster:
        pids = [pid for _n, pid, _k in cluster.processes()]
        sockets = _listening(pids)
        logs = cluster.logs()
    # scheduler + dashboard, and per worker the worker and its nanny
    assert len(sockets) >= 6, (sockets, logs)
    wild = [s for s in sockets if s[1] in WILDCARDS]
    assert wild == [], f"listening on a wildcard address: {wild}"
    assert all(ipaddress.ip_address(ip).is_loopback for _p, ip, _port in sockets), sockets


def test_start_cluster_tls_makes_certificates_and_requires_them(tmp_path: Path) -> None:
    """``--tls``: certificates made once by ``toyengine cluster make-certs`` in DIR/tls;
    a client with them connects, a plain-TCP client does not."""
    from distributed import Client

    from toyengine.run.cluster import load_security

    with hand_cluster(tmp_path / "run", 1, "--tls") as cluster:
        sec_file = tmp_path / "run" / "tls" / "dask-security.yaml"
        assert cluster.address.startswith("tls://127.0.0.1:")
        assert sec_file.is_file()
        with Client(cluster.address, security=load_security(sec_file), timeout="20s",
                    set_as_default=False) as c:
            assert len(c.scheduler_info()["workers"]) == 1
        plain = cluster.address.replace("tls://", "tcp://")
        try:
            Client(plain, timeout="5s", set_as_default=False).close()
            connected = True
        except Exception:  # noqa: BLE001 - any failure to connect is a refusal
            connected = False
        assert not connected
        sockets = _listening([pid for _n, pid, _k in cluster.processes()])
    assert sockets and all(ipaddress.ip_address(ip).is_loopback for _p, ip, _port in sockets)
