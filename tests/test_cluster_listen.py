"""Every server toyengine starts listens where the user said: ``cluster/start-cluster.sh``
with its defaults (scheduler, dashboard, workers and their nannies) on 127.0.0.1 only;
``toyengine submit --dry-run`` opens no socket at all; a real submission's dashboard is on
the scheduler's host or 127.0.0.1, never on every interface unless asked."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from test_cluster_jobqueue import _fake_slurm
from test_cluster_local import hand_cluster

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "cluster" / "profiles"
STUDY = ROOT / "studies" / "tcc" / "pulls.yaml"

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


@pytest.mark.parametrize("tls", [True, False])
def test_submit_dry_run_opens_no_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        cli, tls: bool) -> None:
    """The job script is rendered without a scheduler: no socket is even created."""
    created: list[tuple] = []
    real_init = socket.socket.__init__

    def record(self, *args, **kwargs):  # noqa: ANN001, ANN202
        created.append(args)
        real_init(self, *args, **kwargs)

    monkeypatch.chdir(tmp_path)  # where the submission's temporary certificates go
    monkeypatch.setattr(socket.socket, "__init__", record)
    r = cli("submit", STUDY, "--store", tmp_path / "s.zarr", "--cluster", "slurm",
            "--profile", PROFILES / "slurm.yaml", "--dry-run", *([] if tls else ["--no-tls"]))
    monkeypatch.undo()
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("#!/usr/bin/env bash")
    assert ("tls" if tls else "tcp") + "://<scheduler-address>" in r.stdout
    assert created == []


def test_submit_dashboard_on_the_scheduler_host(tmp_path: Path) -> None:
    """A real submission (a stand-in sbatch that accepts the job and never runs it): the
    scheduler on --scheduler-host 127.0.0.1 and, no dashboard address given, its
    dashboard there too, not on every interface. Sockets are read while it waits."""
    env = _fake_slurm(tmp_path / "bin", tmp_path / "slurm")
    (tmp_path / "bin" / "sbatch").write_text(
        f"#!/usr/bin/env bash\necho \"sbatch $*\" >> {tmp_path / 'slurm' / 'calls'}\n"
        "echo 'Submitted batch job 4242'\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "toyengine.cli", "submit", str(STUDY), "--store",
         str(tmp_path / "s.zarr"), "--cluster", "slurm", "--jobs", "1", "--cores", "1",
         "--memory", "1GB", "--scheduler-host", "127.0.0.1", "--wait-timeout", "8",
         "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        cwd=tmp_path)
    seen: set[tuple[str, int]] = set()
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                seen |= {(ip, port) for _p, ip, port in _listening([proc.pid])}
            except psutil.Error:
                pass
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
        _out, err = proc.communicate(timeout=30)
    assert "no worker joined within 8.0 s" in err, err
    assert len(seen) >= 2, seen  # the scheduler and its dashboard
    wild = [s for s in seen if s[0] in WILDCARDS]
    assert wild == [], f"listening on a wildcard address: {wild}"
    assert all(ipaddress.ip_address(ip).is_loopback for ip, _port in seen), seen


@pytest.mark.parametrize("name", ["docker-compose.yml", "k8s/daskcluster-insecure.yaml",
                                  "k8s/helm-values-insecure.yaml"])
def test_files_without_authentication_say_who_reaches_them_first(name: str) -> None:
    first = (ROOT / "cluster" / name).read_text().splitlines()[0]
    expected = ("# INSECURE: reachable by every pod" if "insecure" in name
                else "# WHO CAN REACH IT: every user and process of this machine")
    assert first.startswith(expected), first
