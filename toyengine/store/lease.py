"""A lease in the store against two runs writing the same store at once.

Every command that changes a store (``run``: create, extend, resume, repair; ``verify``)
holds the lease ``_toyengine/lease.json`` while it works. A second command waits for it
(saying who holds it) and then finds the chunks already done, so no chunk is computed
twice and the toy axis is never appended twice. The holder renews the lease from a
background thread; a lease whose holder stopped renewing expires after ``ttl`` seconds, and
a lease held by a dead process on this host is taken over at once.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import uuid
from typing import Any, TextIO

from ..errors import StoreError
from .location import Location

__all__ = ["LEASE_KEY", "Lease"]

LEASE_KEY = "_toyengine/lease.json"
DEFAULT_TTL = 60.0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Lease:
    """Context manager holding the store's lease.

    Parameters
    ----------
    location : Location
        The store.
    ttl : float
        Seconds after the last renewal at which the lease counts as abandoned.
    wait : float or None
        Give up after this many seconds of waiting (``None``: wait as long as the holder
        keeps renewing).
    progress : file, optional
        Where "waiting for ..." is said.
    """

    def __init__(self, location: Location, *, ttl: float = DEFAULT_TTL,
                 wait: float | None = None, progress: TextIO | None = sys.stderr):
        self.loc = location
        self.ttl = float(ttl)
        self.wait = wait
        self.progress = progress
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._new_root = False
        self.lost = False

    def _record(self) -> dict[str, Any]:
        return {"owner": self.token, "host": socket.gethostname(), "pid": os.getpid(),
                "expires": time.time() + self.ttl, "ttl": self.ttl}

    def _stale(self, held: dict[str, Any] | None) -> bool:
        if held is None:  # torn or vanished: treat as abandoned after one ttl of age
            try:
                info = self.loc.fs.info(self.loc.path(LEASE_KEY))
                mtime = float(info.get("mtime") or info.get("LastModified").timestamp())
            except Exception:  # noqa: BLE001 - gone: nothing to wait for
                return True
            return time.time() - mtime > self.ttl
        if float(held.get("expires", 0)) < time.time():
            return True
        return held.get("host") == socket.gethostname() and not _pid_alive(int(held["pid"]))

    def acquire(self) -> None:
        self._new_root = self.loc.is_local and not os.path.exists(self.loc.root)
        try:
            self._wait_and_take()
        except BaseException:  # e.g. a full disk: leave no empty store folders behind
            self._remove_empty_folders()
            raise
        self._thread = threading.Thread(target=self._renew, daemon=True,
                                        name="toyengine-lease")
        self._thread.start()

    def _wait_and_take(self) -> None:
        t0 = time.monotonic()
        said = False
        while True:
            if self.loc.create_json(LEASE_KEY, self._record()):
                break
            held = self.loc.read_json(LEASE_KEY)
            if self._stale(held):
                # take over: remove the abandoned lease only if it is still the one we saw
                again = self.loc.read_json(LEASE_KEY)
                if again == held:
                    self.loc.delete(LEASE_KEY)
                continue
            if self.wait is not None and time.monotonic() - t0 > self.wait:
                msg = (f"store {self.loc} is in use by process {held.get('pid')} on "
                       f"{held.get('host')} (lease renewed until "
                       f"{time.ctime(float(held.get('expires', 0)))}); try again later")
                raise StoreError(msg)
            if not said and self.progress is not None:
                self.progress.write(f"store {self.loc} is in use by process "
                                    f"{held.get('pid')} on {held.get('host')}; waiting for "
                                    "it to finish\n")
                self.progress.flush()
                said = True
            time.sleep(min(1.0, self.ttl / 10))

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            held = self.loc.read_json(LEASE_KEY)
            if held is None or held.get("owner") != self.token:
                self.lost = True
                return
            try:
                self.loc.write_json(LEASE_KEY, self._record())
            except OSError:  # full disk, read-only: the run's own writes report it; try
                pass  # again next time (a lease not renewed only expires)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        held = self.loc.read_json(LEASE_KEY)
        if held is not None and held.get("owner") == self.token:
            try:
                self.loc.delete(LEASE_KEY)
            except OSError:  # a read-only file system: the lease expires by itself
                pass
        self._remove_empty_folders()

    def _remove_empty_folders(self) -> None:
        """Leave no empty folders behind (e.g. a refused store path)."""
        if self.loc.is_local:
            folders = [os.path.dirname(self.loc.path(LEASE_KEY))]
            if self._new_root:
                folders.append(self.loc.root)
            for folder in folders:
                try:
                    os.rmdir(folder)
                except OSError:  # not empty, or gone
                    pass

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
