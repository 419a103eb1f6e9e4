"""Issue 6: TLS with mutual authentication on a hand-started cluster (127.0.0.1).

Certificates come from cluster/tls/make-certs.sh (openssl); a second, unrelated CA comes
from ``toyengine cluster make-certs`` (Python ``cryptography``), which also tests that
fallback. Scheduler, workers and client with certificates complete a study; a client
without a certificate, one whose certificate is signed by another CA, and a plain-TCP
client are refused within a timeout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

from toyengine.run.cluster import ClusterError, load_security
from toyengine.store import StoreInfo, open_results

ROOT = Path(__file__).resolve().parents[1]
START = ROOT / "cluster" / "start-cluster.sh"
STOP = ROOT / "cluster" / "stop-cluster.sh"
MAKE_CERTS = ROOT / "cluster" / "tls" / "make-certs.sh"
STUDY = ROOT / "studies" / "tcc" / "pulls.yaml"
REFUSE_WITHIN = 20.0  # seconds: a refused client must fail this fast (Client timeout 5 s;
# margin for a loaded 2-core CI machine)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHON"] = sys.executable
    return env


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory, cli) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("tls")
    r = subprocess.run([str(MAKE_CERTS), "-o", str(base / "good")], capture_output=True,
                       text=True, timeout=60, env=_env())
    assert r.returncode == 0, r.stderr
    good = Path(r.stdout.strip().splitlines()[-1])
    r = cli("cluster", "make-certs", base / "other")
    assert r.returncode == 0, r.stderr
    other = Path(r.stdout.strip().splitlines()[-1])
    return {"good": good, "other": other, "good_dir": good.parent, "other_dir": other.parent}


@pytest.fixture(scope="module")
def tls_cluster(certs: dict[str, Path],
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    d = tmp_path_factory.mktemp("dask-tls") / "run"
    r = subprocess.run([str(START), "-d", str(d), "-n", "2", "--port", "0",
                        "--dashboard-address", "none", "--timeout", "60",
                        "--tls-config", str(certs["good"])],
                       capture_output=True, text=True, timeout=90, env=_env())
    recorded = []
    if (d / "pids").exists():
        recorded = [line.split() for line in (d / "pids").read_text().splitlines()]
    try:
        logs = "\n".join(f.read_text()[-2000:] for f in d.glob("*.log"))
        assert r.returncode == 0, f"{r.stderr}\n{logs}"
        yield r.stdout.strip().splitlines()[-1], d
    finally:
        subprocess.run([str(STOP), "-d", str(d)], capture_output=True, timeout=60)
        for _name, pid, kind in recorded:
            if _alive(int(pid)) and kind == "group":
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(pid), signal.SIGKILL)


def _refused(address: str, security: object) -> tuple[bool, float, str]:
    from distributed import Client

    t0 = time.monotonic()
    try:
        client = Client(address, security=security, timeout="5s", set_as_default=False)
    except Exception as exc:  # noqa: BLE001 - any failure to connect is a refusal
        return True, time.monotonic() - t0, f"{type(exc).__name__}: {exc}"
    client.close()
    return False, time.monotonic() - t0, "connected"


def test_tls_cluster_completes_study(tls_cluster: tuple[str, Path], certs: dict[str, Path],
                                     tmp_path: Path, cli) -> None:
    address, _d = tls_cluster
    assert address.startswith("tls://127.0.0.1:")
    store = tmp_path / "tls.zarr"
    r = cli("run", STUDY, "--store", store, "--scheduler", address, "--tls-config",
            certs["good"], "--toys", "20", "--seed", "7", "--quiet")
    assert r.returncode == 0, r.stderr
    assert StoreInfo(store).done().all()
    ds = open_results(store)
    assert np.all(ds["status"].values != 0) and np.all(np.isfinite(ds["nll"].values))


def test_client_with_certificate_connects(tls_cluster: tuple[str, Path],
                                          certs: dict[str, Path]) -> None:
    # the positive control for the refusals below: same address, our CA's client cert
    refused, _t, why = _refused(tls_cluster[0], load_security(certs["good"]))
    assert not refused, why


def test_client_without_certificate_refused(tls_cluster: tuple[str, Path],
                                            certs: dict[str, Path]) -> None:
    from distributed import Security

    address, _d = tls_cluster
    # Dask refuses to even try TLS without a client certificate ...
    for sec in (None, Security(tls_ca_file=str(certs["good_dir"] / "ca.pem"),
                               require_encryption=True)):
        refused, t, why = _refused(address, sec)
        assert refused and t < REFUSE_WITHIN, why
    # ... so check the scheduler itself: a raw TLS client that trusts our CA but shows
    # no certificate is cut off; with our client certificate it is kept.
    host, port = address.removeprefix("tls://").rsplit(":", 1)

    def raw(cert: bool) -> str:
        ctx = ssl.create_default_context(cafile=str(certs["good_dir"] / "ca.pem"))
        ctx.check_hostname = False
        if cert:
            ctx.load_cert_chain(certs["good_dir"] / "client.pem",
                                certs["good_dir"] / "client-key.pem")
        with socket.create_connection((host, int(port)), timeout=3) as sock:
            try:
                with ctx.wrap_socket(sock) as tls:
                    tls.settimeout(1.5)
                    data = tls.recv(1)
            except TimeoutError:
                return "open"
            except (ssl.SSLError, ConnectionError) as exc:
                return f"refused: {exc}"
            return "refused: closed" if data == b"" else "open"

    assert raw(cert=True) == "open"
    assert raw(cert=False).startswith("refused"), "scheduler accepted a client without cert"


def test_client_with_certificate_from_other_ca_refused(tls_cluster: tuple[str, Path],
                                                       certs: dict[str, Path]) -> None:
    from distributed import Security

    address, d = tls_cluster
    other = certs["other_dir"]
    for ca in (certs["good_dir"] / "ca.pem", other / "ca.pem"):
        sec = Security(tls_ca_file=str(ca), tls_client_cert=str(other / "client.pem"),
                       tls_client_key=str(other / "client-key.pem"), require_encryption=True)
        refused, t, why = _refused(address, sec)
        assert refused and t < REFUSE_WITHIN, why
    # the scheduler logs the refusal asynchronously: poll briefly (loaded CI machines)
    deadline = time.monotonic() + 15
    log = ""
    while time.monotonic() < deadline:
        log = (d / "scheduler.log").read_text()
        if "TLS handshake failed" in log and "certificate verify failed" in log:
            break
        time.sleep(0.2)
    assert "TLS handshake failed" in log and "certificate verify failed" in log


def test_plain_tcp_client_refused(tls_cluster: tuple[str, Path]) -> None:
    refused, t, why = _refused(tls_cluster[0].replace("tls://", "tcp://"), None)
    assert refused and t < REFUSE_WITHIN, why


def test_load_security_resolves_relative_paths_and_reports_missing_files(
        certs: dict[str, Path], tmp_path: Path) -> None:
    good = certs["good_dir"]
    rel = tmp_path / "sec"
    rel.mkdir()
    for f in ("ca.pem", "client.pem", "client-key.pem"):
        (rel / f).write_bytes((good / f).read_bytes())
    cfg = {"distributed": {"comm": {"tls": {"ca-file": "ca.pem", "client": {
        "cert": "client.pem", "key": "client-key.pem"}}}}}
    (rel / "client.yaml").write_text(yaml.safe_dump(cfg))
    sec = load_security(rel / "client.yaml")
    assert sec.tls_ca_file == str(rel / "ca.pem") and sec.require_encryption
    assert sec.tls_client_cert == str(rel / "client.pem") and sec.tls_worker_cert is None
    (rel / "client.pem").unlink()
    with pytest.raises(ClusterError, match="client.cert"):
        load_security(rel / "client.yaml")
    with pytest.raises(ClusterError, match="make-certs"):
        load_security(tmp_path / "missing.yaml")


def test_generated_security_files_are_private_and_complete(certs: dict[str, Path]) -> None:
    for key in ("good", "other"):
        d = certs[f"{key}_dir"]
        assert (d.stat().st_mode & 0o077) == 0
        for role in ("ca", "scheduler", "worker", "client"):
            assert (d / f"{role}-key.pem").stat().st_mode & 0o077 == 0
        sec = load_security(certs[key])
        for role in ("scheduler", "worker", "client"):
            assert getattr(sec, f"tls_{role}_cert") == str(d / f"{role}.pem")


def test_make_certs_falls_back_to_python_without_openssl(tmp_path: Path) -> None:
    # PATH without openssl (nor anything else): the script must hand over to Python
    env = {"PATH": str(tmp_path / "empty"), "PYTHON": sys.executable,
           "HOME": os.environ.get("HOME", str(tmp_path))}
    r = subprocess.run(["/bin/bash", str(MAKE_CERTS), "-o", str(tmp_path / "c"), "--host",
                        "node-a.example.org"], capture_output=True, text=True, timeout=60,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert "openssl not found" in r.stderr
    sec = load_security(r.stdout.strip().splitlines()[-1])
    assert sec.tls_worker_cert == str(tmp_path / "c" / "worker.pem")
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((tmp_path / "c" / "worker.pem").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["node-a.example.org"]


def test_temporary_certificates_of_a_submission(tmp_path: Path) -> None:
    """What ``toyengine submit`` uses without configured certificates: a private CA whose
    key is gone once the certificates are signed, files only the user can read, all
    removed when the submission ends (also after an error)."""
    from cryptography import x509

    from toyengine.run.cluster import temporary_certificates

    with temporary_certificates(tmp_path) as sec:
        (d,) = tmp_path.glob(".toyengine-tls-*")
        assert d.stat().st_mode & 0o077 == 0
        assert not (d / "ca-key.pem").exists()  # nothing can sign another certificate
        assert sec.require_encryption
        ca = x509.load_pem_x509_certificate(Path(sec.tls_ca_file).read_bytes())
        for role in ("scheduler", "worker", "client"):
            assert Path(getattr(sec, f"tls_{role}_key")).stat().st_mode & 0o077 == 0
            cert = x509.load_pem_x509_certificate(
                Path(getattr(sec, f"tls_{role}_cert")).read_bytes())
            cert.verify_directly_issued_by(ca)
    assert not list(tmp_path.glob(".toyengine-tls-*"))
    with pytest.raises(RuntimeError, match="boom"), temporary_certificates(tmp_path):
        raise RuntimeError("boom")
    assert not list(tmp_path.glob(".toyengine-tls-*"))


def test_temporary_certificates_without_cryptography_is_one_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from toyengine.run.cluster import temporary_certificates

    monkeypatch.setitem(sys.modules, "cryptography", None)  # as if not installed
    with pytest.raises(ClusterError) as err, temporary_certificates(tmp_path):
        pass
    text = str(err.value)
    assert "cryptography" in text and "--tls-config" in text and "--no-tls" in text
    assert "\n" not in text
    assert not list(tmp_path.glob(".toyengine-tls-*"))
