"""TLS for clusters (as ``distributed/security.py``): the toyengine security file,
certificates made for a run (a private CA, scheduler/worker/client certificates) and the
security of a farm submission.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import dask
import yaml

from ..errors import ClusterError
from .cluster_settings import TLS_ROLES, SubmitSettings

# --------------------------------------------------------------------------------------
# TLS
# --------------------------------------------------------------------------------------


def load_security(path: str | Path) -> Any:
    """A ``distributed.Security`` from a Dask security YAML file.

    The file has the layout of Dask's own configuration (``distributed.comm.tls.ca-file``
    and ``cert``/``key`` for the ``scheduler``, ``worker`` and ``client`` roles;
    ``distributed.comm.require-encryption``), as written by ``cluster/tls/make-certs.sh``.
    Relative paths are taken relative to the file. Roles that are absent are left
    unset, so a client-only file works for ``toyengine run --tls-config``.
    """
    from distributed import Security

    p = Path(path).expanduser()
    if not p.is_file():
        msg = (f"TLS config {p} not found; make certificates and the file with "
               "'toyengine cluster make-certs DIR' or cluster/tls/make-certs.sh DIR (both "
               "write DIR/dask-security.yaml)")
        raise ClusterError(msg)
    cfg = yaml.safe_load(p.read_text()) or {}
    comm = (cfg.get("distributed") or {}).get("comm") or {}
    tls = comm.get("tls") or {}

    def resolve(value: Any, key: str) -> str:
        f = Path(str(value)).expanduser()
        f = f if f.is_absolute() else (p.parent / f)
        if not f.is_file():
            msg = f"{p}: distributed.comm.tls.{key} = {value!r}: file {f} not found"
            raise ClusterError(msg)
        return str(f.resolve())

    if not tls.get("ca-file"):
        msg = f"{p}: distributed.comm.tls.ca-file is not set"
        raise ClusterError(msg)
    kwargs = {"tls_ca_file": resolve(tls["ca-file"], "ca-file")}
    for role in TLS_ROLES:
        entry = tls.get(role) or {}
        for part in ("cert", "key"):
            if entry.get(part):
                kwargs[f"tls_{role}_{part}"] = resolve(entry[part], f"{role}.{part}")
    return Security(require_encryption=bool(comm.get("require-encryption", True)), **kwargs)


def write_security_config(directory: str | Path) -> Path:
    """Write ``directory/dask-security.yaml`` pointing (absolute paths) at the ``ca.pem``
    and ``<role>.pem`` / ``<role>-key.pem`` files of ``directory``; returns its path."""
    d = Path(directory).resolve()
    lines = [
        "# Dask security configuration (TLS with mutual authentication), written by",
        "# toyengine. Use it with:  toyengine run|submit ... --tls-config THIS_FILE,",
        "# cluster/start-cluster.sh --tls-config THIS_FILE, or  DASK_CONFIG=THIS_FILE.",
        "# Only holders of a certificate signed by ca.pem can join or use the cluster.",
        "distributed:",
        "  comm:",
        "    require-encryption: true",
        "    default-scheme: tls",
        "    tls:",
        f"      ca-file: {d / 'ca.pem'}",
    ]
    for role in TLS_ROLES:
        lines += [f"      {role}:", f"        cert: {d / (role + '.pem')}",
                  f"        key: {d / (role + '-key.pem')}"]
    out = d / "dask-security.yaml"
    out.write_text("\n".join(lines) + "\n")
    return out


def make_certificates(directory: str | Path, *, hosts: Sequence[str] = ("localhost",
                      "127.0.0.1"), days: int = 365) -> Path:
    """Create a private CA and a certificate + key for each Dask role, with the
    ``cryptography`` package (the Python fallback of ``cluster/tls/make-certs.sh``).

    Writes ``ca.pem``, ``ca-key.pem``, ``{scheduler,worker,client}.pem`` and
    ``*-key.pem`` (mode 600) and ``dask-security.yaml`` into ``directory``; returns the
    YAML's path. Every certificate is valid for both TLS server and client use (workers
    and the scheduler are both) and names ``hosts`` as subject alternative names (Dask
    does not check host names, but other TLS tools do). Keep ``ca-key.pem`` private:
    whoever has it can mint certificates that the cluster accepts.
    """
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as exc:
        msg = ("making certificates needs openssl (cluster/tls/make-certs.sh) or the "
               "Python package 'cryptography' (pip install cryptography)")
        raise ClusterError(msg) from exc

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    def write_key(key: Any, name: str) -> None:
        f = d / name
        f.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                        serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()))
        f.chmod(0o600)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                            f"toyengine Dask CA {uuid.uuid4().hex[:8]}")])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=True, crl_sign=True,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    write_key(ca_key, "ca-key.pem")
    (d / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))

    alt: list[x509.GeneralName] = []
    for h in hosts:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            alt.append(x509.DNSName(h))
    for role in TLS_ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"toyengine-{role}")])
        builder = (
            x509.CertificateBuilder().subject_name(name).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=True, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
        )
        if alt:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        write_key(key, f"{role}-key.pem")
        (d / f"{role}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return write_security_config(d)


@contextlib.contextmanager
def temporary_certificates(parent: str | Path) -> Iterator[Any]:
    """TLS credentials for one submission: a ``distributed.Security`` for certificates
    made by :func:`make_certificates` in a fresh private directory under ``parent``,
    deleted on exit.

    This is what ``toyengine submit`` uses when no certificates are configured, so that
    a batch farm runs with TLS and mutual authentication without any set-up. Why not
    refuse instead and ask for ``toyengine cluster make-certs``: on a shared farm the
    safe choice must also be the easy one, and a CA that lives only as long as the
    submission cannot leak later. Why not distributed's ``Security.temporary()`` (one
    self-signed certificate for every role, whose key is also the CA key, written by
    dask-jobqueue into the shared directory and removed only when the cluster object is
    garbage-collected): here the CA key is deleted as soon as the certificates are
    signed, so nobody — not even a stolen worker key — can mint another certificate
    the scheduler accepts, and the directory (mode 700, keys 600) is removed when the
    submission ends, normally or not.

    Parameters
    ----------
    parent : path
        Where the directory is made; on a file system that the batch nodes see (the
        workers read their certificate and key from there):
        ``jobqueue.<system>.shared-temp-directory``, by default the current directory, as
        for dask-jobqueue's own temporary credentials.

    Yields
    ------
    distributed.Security
        Certificates and keys of the scheduler, worker and client roles, and the CA.

    Raises
    ------
    ClusterError
        ``parent`` is not writable, or the ``cryptography`` package is missing (one line
        naming the alternatives: ``--tls-config FILE`` or ``--no-tls``).
    """
    base = Path(parent).expanduser()
    try:
        d = Path(tempfile.mkdtemp(prefix=".toyengine-tls-", dir=base))
    except OSError as exc:
        msg = (f"cannot make the temporary TLS certificates in {base} "
               f"({exc.strerror or exc}); set jobqueue.<system>.shared-temp-directory to "
               "a private directory the batch nodes see")
        raise ClusterError(msg) from None
    try:
        try:
            config = make_certificates(d)
        except ClusterError as exc:
            msg = ("toyengine submit uses TLS and makes temporary certificates, which needs "
                   "the Python package 'cryptography' (pip install 'toyengine[cluster]'); or "
                   "give --tls-config FILE made by cluster/tls/make-certs.sh (openssl), or "
                   "--no-tls on a network only you use")
            raise ClusterError(msg) from exc
        (d / "ca-key.pem").unlink()  # signed: no further certificate can be made
        yield load_security(config)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def submit_security(settings: SubmitSettings, security: Any = None) -> Iterator[Any]:
    """The ``distributed.Security`` of a submission (``None``: plain TCP), valid inside the
    context.

    Parameters
    ----------
    settings : SubmitSettings
        ``tls`` false means no TLS; else ``tls_config`` is loaded, and without one (or
        with ``"temporary"``) :func:`temporary_certificates` are made in
        ``jobqueue.<system>.shared-temp-directory`` (default: the current directory).
    security : distributed.Security or path or "temporary", optional
        Takes priority over ``settings``.

    Yields
    ------
    distributed.Security or None
    """
    if security is None:
        if not settings.tls:
            yield None
            return
        security = settings.tls_config or "temporary"
    if str(security) == "temporary":
        shared = dask.config.get(f"jobqueue.{settings.system}.shared-temp-directory", None)
        with temporary_certificates(shared or Path.cwd()) as sec:
            yield sec
        return
    yield load_security(security) if isinstance(security, (str, Path)) else security


