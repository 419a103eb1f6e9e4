"""Checks made before a run starts a cluster or touches a store.

Each check fails with one clear error instead of a hang or a traceback later on:
:func:`parse_scheduler_address` (the address is well formed; ``tls://`` has certificates),
:func:`probe_scheduler` (something at the address answers as a Dask scheduler, within a
deadline that also covers servers that accept and never speak or that answer garbage),
:func:`check_store_path` (the store can be created or resumed there) and
:func:`check_study_size` (a study whose store or run time would be huge needs ``--yes``) and
:func:`check_resources` (toys that do not fit in memory, more local workers than cores).
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from ..errors import ClusterError, ConfirmationNeeded, StoreError, UsageError

__all__ = ["BYTES_PER_EVENT", "CONNECT_TIMEOUT", "check_resources", "check_store_path",
           "check_study_size", "expected_events", "parse_scheduler_address", "probe_scheduler"]

#: seconds allowed for reaching a scheduler and hearing it identify itself (with the
#: start-up of the command, an unreachable scheduler is reported within about 30 s)
CONNECT_TIMEOUT = 25.0
#: a study with a store larger than this (bytes) needs --yes
CONFIRM_STORE_BYTES = 20e9
#: a study with more toys than this (all variants) needs --yes
CONFIRM_TOYS = 20_000_000
#: a study estimated to need more CPU time than this (seconds) needs --yes
CONFIRM_CPU_SECONDS = 30 * 86400.0


_ADDRESS = re.compile(r"^(?:(tcp|tls)://)?(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def parse_scheduler_address(address: str, tls_config: str | None = None) -> str:
    """Normalise ``tcp://host:port``, ``tls://host:port`` or ``host:port``.

    Raises
    ------
    UsageError
        Not of that form, port outside 1..65535, or ``tls://`` without ``--tls-config``.
    """
    m = _ADDRESS.match(address.strip())
    if m is None:
        msg = (f"--scheduler {address!r}: expected tcp://HOST:PORT or tls://HOST:PORT "
               "(e.g. tcp://127.0.0.1:8786)")
        raise UsageError(msg)
    proto, host, port = m.group(1) or "tcp", m.group(2), int(m.group(3))
    if not 1 <= port <= 65535:
        msg = f"--scheduler {address!r}: port {port} is not in 1..65535"
        raise UsageError(msg)
    if proto == "tls" and tls_config is None:
        msg = (f"--scheduler {address!r} uses TLS: give --tls-config SECURITY.yaml (made by "
               "'toyengine cluster make-certs')")
        raise UsageError(msg)
    if proto == "tcp" and tls_config is not None:
        msg = f"--tls-config given but --scheduler {address!r} is not a tls:// address"
        raise UsageError(msg)
    return f"{proto}://{host}:{port}"


async def _identify(address: str, security: Any, timeout: float) -> str:
    from distributed.comm import connect

    kwargs = security.get_connection_args("client") if security is not None else {}
    comm = await connect(address, timeout=timeout, **kwargs)
    try:
        await comm.write({"op": "identity", "reply": True})
        reply = await comm.read()
    finally:
        comm.abort()
    if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
        return "it answered, but not as a Dask scheduler"
    return ""


def probe_scheduler(address: str, security: Any = None,
                    timeout: float = CONNECT_TIMEOUT) -> None:
    """Connect to ``address`` and ask it to identify itself, all within ``timeout``.

    Raises
    ------
    ClusterError
        "could not connect to a Dask scheduler at ADDRESS (reason)": nothing listening,
        a TLS failure, no answer in time, or an answer that is not a scheduler's.
    """
    async def bounded() -> str:
        return await asyncio.wait_for(_identify(address, security, timeout), timeout)

    try:
        problem = asyncio.run(bounded())
    except TimeoutError:
        problem = f"no answer within {timeout:g} s"
    except MemoryError:
        problem = "it answered with something that is not the Dask protocol"
    except Exception as exc:  # noqa: BLE001 - any failure to talk is "could not connect"
        text = " ".join(str(exc).split())[:200]
        problem = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if problem:
        msg = f"could not connect to a Dask scheduler at {address} ({problem})"
        raise ClusterError(msg)


def check_store_path(store: str | Path) -> None:
    """Fail now, not after the cluster started, if the store cannot be made or resumed.

    Raises
    ------
    StoreError
        A parent of the path is a file, the place is not writable or is read-only, or an
        existing path is not a directory.
    """
    p = Path(store).expanduser()
    if p.exists() and not p.is_dir():
        msg = f"store {p}: exists and is not a directory (a store is a zarr directory)"
        raise StoreError(msg)
    anc = p if p.exists() else p.parent
    while not anc.exists():
        anc = anc.parent
    if not anc.is_dir():
        msg = f"store {p}: cannot be created, {anc} is a file, not a directory"
        raise StoreError(msg)
    try:
        probe = tempfile.mkdtemp(prefix=".toyengine-write-test-", dir=anc)
        os.rmdir(probe)
    except OSError as exc:
        msg = f"store {p}: cannot write in {anc} ({exc.strerror or exc})"
        raise StoreError(msg) from None


def store_bytes(n_variants: int, toys: int, n_hyp: int, n_par: int) -> float:
    """Upper estimate of a store's size: per toy and hypothesis 4 float64 per parameter
    (value, error, MINOS bounds) and 8 per-fit scalars, uncompressed."""
    return float(n_variants) * toys * n_hyp * (4 * n_par + 8) * 8.0


def check_study_size(n_variants: int, toys: int, n_hyp: int, n_par: int, yes: bool,
                     seconds_per_toy: float | None = None) -> None:
    """Refuse (unless ``yes``) a study whose store, toy count or CPU time (from the time of
    one toy, when measured) is huge.

    Raises
    ------
    ConfirmationNeeded
        With the estimate, and "add --yes to run it anyway".
    """
    total = n_variants * toys
    size = store_bytes(n_variants, toys, n_hyp, n_par)
    cpu = total * seconds_per_toy if seconds_per_toy is not None else 0.0
    if yes or (total <= CONFIRM_TOYS and size <= CONFIRM_STORE_BYTES
               and cpu <= CONFIRM_CPU_SECONDS):
        return
    cpu_text = f", about {cpu / 86400:,.1f} CPU-days" if cpu else ""
    msg = (f"this study asks for {total:,} toys ({n_variants:,} variants x {toys:,}), a store "
           f"of up to {size / 1e9:,.1f} GB{cpu_text}; check 'toys'/'count' (or --toys) and "
           "add --yes to run it anyway")
    raise ConfirmationNeeded(msg)


#: memory one generated event costs while its toy is generated and fitted (the event, the
#: uniforms drawn for it, per-component densities and likelihood terms): an upper estimate
BYTES_PER_EVENT = 200.0


def expected_events(model: Any) -> float | None:
    """Expected events per toy of a generator model at its generation values: its
    ``expected_events()`` where it has one (e.g. the ``gauss`` model's ``events``), the sum
    of its yields for a 1-D mixture (:class:`toyengine.core.model1d.Model1D`), else None
    (unknown)."""
    hook = getattr(model, "expected_events", None)
    if callable(hook):
        n = hook()
        return None if n is None else float(n)
    idx = getattr(model, "_yield_idx", None)
    if idx is not None:
        import numpy as np

        x = np.asarray(model.parameters.values, dtype=float)[np.asarray(idx)]
        return float(np.sum(np.clip(x, 0.0, None)))
    return None


def available_memory() -> float:
    """Bytes of memory available on this machine (``psutil``; ``sysconf`` without it)."""
    try:
        import psutil

        return float(psutil.virtual_memory().available)
    except (ImportError, OSError):  # no psutil (or it cannot read): the kernel's count
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def check_resources(generators: dict[str, Any], workers: int | None, local: bool,
                    yes: bool) -> None:
    """Refuse (unless ``yes``) a run whose toys cannot fit in this machine's memory, or that
    asks for more local workers than cores, before anything starts.

    ``generators``: the models that generate toys, by the name of what generates them (a
    variant or model name, for the message). Each toy of ``n`` expected events
    (:func:`expected_events`) needs about ``n × BYTES_PER_EVENT`` bytes in the task that
    generates and fits it; ``workers`` tasks run at once on a local cluster (one per
    core by default), one per worker elsewhere, where this machine's memory is the only
    measure at hand.

    Raises
    ------
    ConfirmationNeeded
        One line naming the model, its size and the memory, and "add --yes".
    """
    if yes:
        return
    cores = os.cpu_count() or 1
    if local and workers is not None and workers > cores:
        msg = (f"--workers {workers}: this machine has {cores} cores; more local workers "
               "than cores only compete for them (and for memory); add --yes to run anyway")
        raise ConfirmationNeeded(msg)
    tasks = (workers or cores) if local else 1
    mem = available_memory()
    for name, model in generators.items():
        n = expected_events(model)
        if n is None:
            continue
        need = n * BYTES_PER_EVENT * tasks
        if need > 0.8 * mem:
            msg = (f"{name}: about {n:.3g} events per toy need ~{need / 1e9:,.3g} GB for "
                   f"{tasks} task(s) at once, and this machine has {mem / 1e9:,.3g} GB "
                   "available; check the model's size (events, yields) and add --yes to "
                   "run anyway")
            raise ConfirmationNeeded(msg)
