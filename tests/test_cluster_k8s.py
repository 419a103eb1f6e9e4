"""The Kubernetes manifests of ``cluster/k8s`` (issues 6 and 13): secure by default.

Every manifest whose file name does not say ``insecure`` runs its Dask scheduler, workers
and in-cluster client with TLS and mutual authentication (``tls://`` addresses,
certificates from the mounted Secret); the ones without TLS are named ``*-insecure.yaml``
and say so in their first line. Worker commands that go through a shell are evaluated
with ``sh`` (after Kubernetes' ``$$`` -> ``$`` unescaping), so the address checked is the
one the worker really gets.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

K8S = Path(__file__).resolve().parents[1] / "cluster" / "k8s"
SECRET = "toyengine-dask-tls"
#: the address the Dask Kubernetes operator hands to worker and job pods
OPERATOR_ADDRESS = "tcp://toyengine-scheduler:8786"
MANIFESTS = sorted(p.name for p in K8S.glob("*.yaml"))


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def _pods(name: str) -> dict[str, dict[str, Any]]:
    """Pod specs of the Dask resources of a manifest: scheduler, worker, job."""
    out = {}
    for doc in _docs(name):
        if doc.get("kind") == "DaskCluster":
            spec = doc["spec"]
        elif doc.get("kind") == "DaskJob":
            spec = doc["spec"]["cluster"]["spec"]
            out["job"] = doc["spec"]["job"]["spec"]
        else:
            continue
        out["scheduler"] = spec["scheduler"]["spec"]
        out["worker"] = spec["worker"]["spec"]
    return out


def _argv(container: dict[str, Any]) -> list[str]:
    """The command line a container runs: plain ``args``, or a ``sh -c`` script evaluated
    by ``sh`` with the operator's environment."""
    if container.get("command", [])[:2] != ["/bin/sh", "-c"]:
        return [str(a) for a in container["args"]]
    script = container["args"][0].replace("$$", "$")  # Kubernetes' own unescaping
    assert script.startswith("exec "), script
    probe = "set -- " + script[len("exec "):] + '\nprintf "%s\\n" "$@"'
    r = subprocess.run(["sh", "-c", probe], capture_output=True, text=True, timeout=10,
                       env={"DASK_SCHEDULER_ADDRESS": OPERATOR_ADDRESS,
                            "DASK_WORKER_NAME": "w-0", "PATH": os.environ.get("PATH", "")})
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def _value(argv: list[str], flag: str) -> str:
    assert flag in argv, (flag, argv)
    return argv[argv.index(flag) + 1]


def _secret_mount(pod: dict[str, Any], container: dict[str, Any]) -> str:
    """Where the container mounts the certificate Secret (read-only, not world-readable)."""
    secret_volumes = {v["name"]: v["secret"] for v in pod.get("volumes", []) if "secret" in v}
    mounts = [m for m in container.get("volumeMounts", []) if m["name"] in secret_volumes]
    assert len(mounts) == 1, container.get("volumeMounts")
    m = mounts[0]
    secret = secret_volumes[m["name"]]
    assert secret["secretName"] == SECRET and m.get("readOnly") is True
    assert secret["defaultMode"] & 0o007 == 0  # keys readable by the pod's group only
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
    return m["mountPath"]


def _uses_tls(name: str) -> bool:
    pods = _pods(name)
    return bool(pods) and all(
        "tls" in _argv(c) or any(a.startswith("tls://") for a in _argv(c))
        for role in ("scheduler", "worker") for c in pods[role]["containers"])


def test_every_manifest_without_tls_is_named_insecure() -> None:
    assert "daskcluster.yaml" in MANIFESTS and "daskjob.yaml" in MANIFESTS
    for name in MANIFESTS:
        text = (K8S / name).read_text()
        if "insecure" in name:
            assert text.startswith("# INSECURE:"), name
            assert not _uses_tls(name), f"{name} uses TLS but is named insecure"
            assert "tls" not in text.replace("TLS", ""), name  # no half-configured TLS
        elif _pods(name):
            assert _uses_tls(name), f"{name} runs Dask without TLS but is not named insecure"


@pytest.mark.parametrize("name", [n for n in MANIFESTS if "insecure" not in n and _pods(n)])
def test_default_manifests_use_tls_with_the_certificate_secret(name: str) -> None:
    pods = _pods(name)
    sched_pod = pods["scheduler"]
    (sched,) = sched_pod["containers"]
    argv = _argv(sched)
    tls_dir = _secret_mount(sched_pod, sched)
    assert argv[:2] == ["dask", "scheduler"] and _value(argv, "--protocol") == "tls"
    for flag, file in (("--tls-ca-file", "ca.pem"), ("--tls-cert", "scheduler.pem"),
                       ("--tls-key", "scheduler-key.pem")):
        assert _value(argv, flag) == f"{tls_dir}/{file}"

    worker_pod = pods["worker"]
    (worker,) = worker_pod["containers"]
    argv = _argv(worker)
    tls_dir = _secret_mount(worker_pod, worker)
    assert argv[:2] == ["dask", "worker"]
    assert argv[2] == OPERATOR_ADDRESS.replace("tcp://", "tls://")
    for flag, file in (("--tls-ca-file", "ca.pem"), ("--tls-cert", "worker.pem"),
                       ("--tls-key", "worker-key.pem")):
        assert _value(argv, flag) == f"{tls_dir}/{file}"

    if "job" in pods:  # the in-cluster client: toyengine run over TLS with a client cert
        job_pod = pods["job"]
        (job,) = job_pod["containers"]
        argv = _argv(job)
        tls_dir = _secret_mount(job_pod, job)
        assert argv[:2] == ["toyengine", "run"]
        assert _value(argv, "--scheduler") == OPERATOR_ADDRESS.replace("tcp://", "tls://")
        assert _value(argv, "--store").startswith("/results/")
        config = Path(_value(argv, "--tls-config"))
        maps = {d["metadata"]["name"]: d for d in _docs(name) if d["kind"] == "ConfigMap"}
        mount = next(m for m in job["volumeMounts"] if m["mountPath"] == str(config.parent))
        volume = next(v for v in job_pod["volumes"] if v["name"] == mount["name"])
        security = yaml.safe_load(maps[volume["configMap"]["name"]]["data"][config.name])
        comm = security["distributed"]["comm"]
        assert comm["require-encryption"] is True
        assert comm["tls"] == {"ca-file": f"{tls_dir}/ca.pem",
                               "client": {"cert": f"{tls_dir}/client.pem",
                                          "key": f"{tls_dir}/client-key.pem"}}


@pytest.mark.parametrize("name", [n for n in MANIFESTS if _pods(n)])
def test_workers_are_single_threaded_and_recycled(name: str) -> None:
    for container in _pods(name)["worker"]["containers"]:
        argv = _argv(container)
        assert argv[:2] == ["dask", "worker"]
        assert _value(argv, "--nthreads") == "1"  # one fit at a time: fits hold the GIL
        assert {"--lifetime", "--lifetime-stagger", "--lifetime-restart"} <= set(argv)


def test_secret_instructions_name_every_file_the_pods_read() -> None:
    """The ``kubectl create secret`` line in daskcluster.yaml puts into the Secret every
    certificate and key the default manifests read from it, and never the CA key."""
    header = (K8S / "daskcluster.yaml").read_text().split("apiVersion:", 1)[0]
    cmd = header.split("kubectl create secret generic", 1)[1].split("\n#   kubectl", 1)[0]
    words = shlex.split(cmd.replace("#", " ").replace("\\\n", " "))
    assert words[0] == SECRET
    files = {w.split("/")[-1] for w in words if w.startswith("--from-file=")}
    assert "ca-key.pem" not in files
    read = set()
    for name in MANIFESTS:
        if "insecure" not in name:
            read |= {w.rsplit("/", 1)[-1] for w in (K8S / name).read_text().split()
                     if w.startswith("/tls/") and w.endswith(".pem")}
    assert read and read <= files, read - files
