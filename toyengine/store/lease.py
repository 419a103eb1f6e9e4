"""A lease in the store against two runs writing the same store at once, and the fence
that stops a run which lost it.

Every command that changes a store (``run``: create, extend, resume, repair; ``verify``)
holds the lease while it works. A second command waits for it (saying who holds it) and
then finds the chunks already done, so no chunk is computed twice and the toy axis is never
appended twice. The holder renews the lease from a background thread; a lease whose holder
stopped renewing expires after ``ttl`` seconds, and a lease held by a dead process on this
host is taken over at once.

The lease is a numbered object, ``_toyengine/lease/<epoch>.json``; the highest number
present is the current lease. Taking a lease, first or over an expired one, is the
exclusive creation of the next number (an atomic hard link on a file system, a PUT with
``If-None-Match: *`` on an object store), so of several processes taking over the same
expired lease exactly one succeeds. A holder only ever rewrites its own object; releasing
creates the next number marked ``released``. The epoch therefore only grows, and a run
checks that the store's current epoch is still its own (:class:`Fence`) before each write
of a chunk and of its done marker, which records the epoch: a run that paused for longer
than the lease lasts finds another epoch and stops (:class:`~toyengine.errors.LeaseLost`)
instead of writing over the newer run's results. This is the fencing-token scheme of
Kleppmann, "How to do distributed locking" (2016), with the check made by the writer
because neither a file system nor S3 compares a token on an ordinary write.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, TextIO

from ..errors import LeaseLost, StoreError
from .location import Location

__all__ = ["LEASE_PREFIX", "Fence", "Lease", "current_epoch", "lease_key"]

#: the folder of the numbered lease objects
LEASE_PREFIX = "_toyengine/lease"
DEFAULT_TTL = 60.0
#: objects whose presence makes the location a store (or a store being created): a lease
#: released there leaves its epoch behind, so that the next lease's is higher
_STORE_KEYS = ("_toyengine/state.json", "_toyengine/creating.json", "zarr.json")


def lease_key(epoch: int) -> str:
    """The object of lease number ``epoch``."""
    return f"{LEASE_PREFIX}/{epoch}.json"


def _epochs(loc: Location) -> list[int]:
    """The lease numbers present, ascending (temporary files of writers are skipped)."""
    out = []
    for key in loc.sizes(LEASE_PREFIX):
        name = key.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit():
            out.append(int(name[:-5]))
    return sorted(out)


def current_epoch(loc: Location) -> int:
    """The store's current lease epoch (0: no lease was ever taken there)."""
    got = _epochs(loc)
    return got[-1] if got else 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Fence:
    """What a writer (the client, or a worker writing its own chunk) needs to know that
    the run it works for still holds the store's lease: the store and the run's epoch.
    Small and picklable."""

    loc: Location
    epoch: int

    def check(self) -> None:
        """Raise :class:`~toyengine.errors.LeaseLost` unless the store's current lease
        is still this one (one listing of the lease folder)."""
        now = current_epoch(self.loc)
        if now != self.epoch:
            raise LeaseLost(lost_message(self.loc, self.epoch, now))


def lost_message(loc: Location, epoch: int, now: int) -> str:
    """The one line of a run that lost the lease of ``loc``."""
    return (f"lease lost to another run: store {loc} is now at lease epoch {now}, this run "
            f"held epoch {epoch} (it paused or could not renew the lease for longer than "
            "the lease lasts); this run stopped writing. Run `toyengine status` on the "
            "store to see what is done, the same command again to finish it")


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

    Attributes
    ----------
    epoch : int
        The lease's number while held (0 before).
    lost : bool
        Set by the renewal thread when another run took the lease over.
    """

    def __init__(self, location: Location, *, ttl: float = DEFAULT_TTL,
                 wait: float | None = None, progress: TextIO | None = sys.stderr):
        self.loc = location
        self.ttl = float(ttl)
        self.wait = wait
        self.progress = progress
        self.token = uuid.uuid4().hex
        self.epoch = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._new_root = False
        self.lost = False

    def _record(self, *, released: bool = False) -> dict[str, Any]:
        return {"epoch": self.epoch + released, "owner": self.token,
                "host": socket.gethostname(), "pid": os.getpid(),
                "expires": 0.0 if released else time.time() + self.ttl, "ttl": self.ttl,
                "released": released}

    @property
    def fence(self) -> Fence:
        """The fence of this lease, for the writers of the run holding it."""
        return Fence(self.loc, self.epoch)

    def check(self) -> None:
        """Raise :class:`~toyengine.errors.LeaseLost` if this lease is no longer the
        store's current one."""
        if self.lost:
            raise LeaseLost(lost_message(self.loc, self.epoch, current_epoch(self.loc)))
        self.fence.check()

    def _stale(self, epoch: int, held: dict[str, Any] | None) -> bool:
        if held is None:  # unreadable or vanished: abandoned after one ttl of age
            try:
                info = self.loc.fs.info(self.loc.path(lease_key(epoch)))
                mtime = float(info.get("mtime") or info.get("LastModified").timestamp())
            except Exception:  # noqa: BLE001 - gone: nothing to wait for
                return True
            return time.time() - mtime > self.ttl
        if held.get("released") or float(held.get("expires", 0)) < time.time():
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

    def _take(self, epoch: int) -> bool:
        """Create lease ``epoch`` exclusively; True if this call made it the current one."""
        self.epoch = epoch
        if not self.loc.create_json(lease_key(epoch), self._record()):
            self.epoch = 0
            return False
        epochs = _epochs(self.loc)
        if epochs and epochs[-1] != epoch:
            # the number was free only because it had been cleaned up: this process
            # looked at the lease folder long ago, and a newer lease exists
            self.loc.delete(lease_key(epoch))
            self.epoch = 0
            return False
        for old in epochs[:-1]:  # the leases this one supersedes
            self.loc.delete(lease_key(old))
        return True

    def _wait_and_take(self) -> None:
        t0 = time.monotonic()
        said = False
        while True:
            now = current_epoch(self.loc)
            held = self.loc.read_json(lease_key(now)) if now else None
            if now == 0 or self._stale(now, held):
                if self._take(now + 1):
                    return
                continue  # another process took it first: look again
            held = held or {}
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
            if not self.renew_once():
                self.lost = True
                return

    def renew_once(self) -> bool:
        """Renew the lease (what the renewal thread does every ``ttl / 3`` seconds);
        False if it is lost. A renewal that fails (full disk, read-only file system,
        unreachable store) is left to the next one: the run's own writes report the
        cause."""
        try:
            if current_epoch(self.loc) != self.epoch:
                return False
            # only ever this lease's own object: a renewal racing a take-over leaves an
            # old number behind, never a current lease overwritten
            self.loc.write_json(lease_key(self.epoch), self._record())
        except Exception:  # noqa: BLE001 - see above
            pass
        return True

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self.epoch and current_epoch(self.loc) == self.epoch:
                if any(self.loc.exists(k) for k in _STORE_KEYS):
                    # the next number, released: the epoch never goes back, so a writer of
                    # this run that is still on its way finds it changed
                    self.loc.create_json(lease_key(self.epoch + 1),
                                         self._record(released=True))
                self.loc.delete(lease_key(self.epoch))
        except OSError:  # a read-only file system: the lease expires by itself
            pass
        self._remove_empty_folders()

    def _remove_empty_folders(self) -> None:
        """Leave no empty folders behind (e.g. a refused store path)."""
        if self.loc.is_local:
            folder = self.loc.path(LEASE_PREFIX)
            folders = [folder, os.path.dirname(folder)]
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
