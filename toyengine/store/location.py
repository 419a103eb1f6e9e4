"""Where a result store lives: a local path or any fsspec URL (``file://``, ``s3://``,
``gs://``, ``memory://``), with its storage options.

S3-compatible services take their endpoint and credentials from the standard environment
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ...), which
botocore reads itself, or from explicit storage options (``--storage-option
endpoint_url=http://...``). A :class:`Location` is small and picklable: workers rebuild the
filesystem from it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import StoreError, StoreWriteError

__all__ = ["WRITE_ERRNOS", "Location", "parse_storage_options", "store_write_error",
           "store_writes"]

#: what a failed write into a store means, and what to do about it; these errors come
#: from the place the store is in, not from toyengine
WRITE_ERRNOS: dict[int, str] = {
    errno.ENOSPC: "free some disk space",
    errno.EFBIG: "free some disk space",
    errno.EDQUOT: "free some space within your quota",
    errno.EROFS: "make the file system writable again",
    errno.EACCES: "check that you may write into the store",
    errno.EPERM: "check that you may write into the store",
}

#: (url, options) → (filesystem, root path), resolved once per process
_RESOLVED: dict[tuple[str, str], tuple[Any, str]] = {}


def parse_storage_options(items: Iterable[str]) -> dict[str, Any]:
    """``["key=value", ...]`` → dict; values ``true``/``false``/integers become Python
    values (e.g. ``anon=true``, ``client_kwargs`` is not settable this way)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            msg = f"--storage-option {item!r}: expected key=value"
            raise StoreError(msg)
        k, v = item.split("=", 1)
        low = v.lower()
        val: Any = v
        if low in ("true", "false"):
            val = low == "true"
        else:
            try:
                val = int(v)
            except ValueError:
                pass
        out[k.strip()] = val
    return out


@dataclass(frozen=True)
class Location:
    """A store's URL (or local path) and storage options.

    Parameters
    ----------
    url : str or Path
        Local path or fsspec URL.
    storage_options : mapping, optional
        Passed to the fsspec filesystem (e.g. ``endpoint_url``, ``key``, ``secret``).
    """

    url: str
    storage_options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, store: str | Path | Location,
           storage_options: Mapping[str, Any] | None = None) -> Location:
        if isinstance(store, Location):
            return store
        return cls(str(store), dict(storage_options or {}))

    @property
    def protocol(self) -> str:
        return self.url.split("://", 1)[0] if "://" in self.url else "file"

    @property
    def is_local(self) -> bool:
        """On this machine's file system (a worker on another node may not see it)."""
        return self.protocol in ("file", "local")

    @property
    def shared_by_processes(self) -> bool:
        """Other processes on this machine can reach it (``memory://`` is per process)."""
        return self.protocol != "memory"

    def _resolved(self) -> tuple[Any, str]:
        key = (self.url, json.dumps(dict(self.storage_options), sort_keys=True, default=str))
        got = _RESOLVED.get(key)
        if got is None:
            import fsspec

            fs, path = fsspec.core.url_to_fs(self.url, **dict(self.storage_options))
            got = _RESOLVED[key] = (fs, path.rstrip("/"))
        return got

    @property
    def fs(self) -> Any:
        """The fsspec filesystem."""
        return self._resolved()[0]

    @property
    def root(self) -> str:
        """The store's path within :attr:`fs`."""
        return self._resolved()[1]

    def path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    def __str__(self) -> str:
        return self.url

    def zarr_store(self, read_only: bool = False) -> Any:
        """The zarr store object (``LocalStore`` for local paths)."""
        from zarr.storage import FsspecStore, LocalStore

        if self.is_local:
            return LocalStore(self.root, read_only=read_only)
        return FsspecStore.from_url(self.url, storage_options=dict(self.storage_options),
                                    read_only=read_only)

    # small control objects (JSON), each written in one atomic step
    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self.path(key)))

    def read_json(self, key: str) -> Any | None:
        """The JSON object at ``key``; None if absent or unreadable (a torn write)."""
        try:
            raw = self.fs.cat_file(self.path(key))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None

    def _local_temporary(self, key: str, data: bytes) -> tuple[Path, Path]:
        """``(path of key, complete temporary file beside it)``: the temporary name is
        unique per process and call (``.name.pid.uuid.tmp``, hidden), so concurrent writers
        never share one; on failure (e.g. a full disk) nothing is left behind."""
        path = Path(self.path(key))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        try:
            tmp.write_bytes(data)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        return path, tmp

    def write_json(self, key: str, obj: Any) -> None:
        """Write ``obj`` at ``key`` atomically: a local file is written under a unique
        temporary name and renamed; an object-store PUT is atomic by itself."""
        data = json.dumps(obj, sort_keys=True).encode()
        if self.is_local:
            path, tmp = self._local_temporary(key, data)
            try:
                os.replace(tmp, path)
            except OSError:
                tmp.unlink(missing_ok=True)
                raise
        else:
            self.fs.pipe_file(self.path(key), data)

    def write_bytes(self, key: str, data: bytes) -> None:
        """Write ``data`` at ``key`` atomically (as :meth:`write_json`)."""
        if self.is_local:
            path, tmp = self._local_temporary(key, data)
            try:
                os.replace(tmp, path)
            except OSError:
                tmp.unlink(missing_ok=True)
                raise
        else:
            self.fs.pipe_file(self.path(key), data)

    def create_json(self, key: str, obj: Any) -> bool:
        """Write ``obj`` at ``key`` only if nothing is there; True if this call wrote it.
        Local: a hard link of a complete temporary file (atomic, exclusive). Object
        stores: a conditional PUT where the filesystem supports it (``mode="xb"``)."""
        data = json.dumps(obj, sort_keys=True).encode()
        if self.is_local:
            path, tmp = self._local_temporary(key, data)
            try:
                os.link(tmp, path)
                return True
            except FileExistsError:
                return False
            finally:
                tmp.unlink(missing_ok=True)
        try:
            with self.fs.open(self.path(key), "xb") as f:
                f.write(data)
            return True
        except FileExistsError:
            return False

    def delete(self, key: str) -> None:
        try:
            self.fs.rm_file(self.path(key))
        except FileNotFoundError:
            pass

    def cat(self, keys: list[str]) -> dict[str, bytes | None]:
        """Contents of several objects (None where missing), fetched concurrently."""
        if not keys:
            return {}
        paths = [self.path(k) for k in keys]
        got = self.fs.cat(paths, on_error="return")
        out: dict[str, bytes | None] = {}
        for k, p in zip(keys, paths, strict=True):
            v = got.get(p)
            out[k] = v if isinstance(v, bytes) else None
        return out

    def sizes(self, prefix: str) -> dict[str, int]:
        """``{key: size}`` of every object under ``prefix`` (keys relative to the root)."""
        base = self.path(prefix)
        fs = self.fs
        fs.invalidate_cache()  # other processes (workers) write here
        try:
            found = fs.find(base, detail=True)
        except FileNotFoundError:
            return {}
        n = len(self.root) + 1
        return {p[n:] if p.startswith(self.root) else p: int(info.get("size") or 0)
                for p, info in found.items()}

    def wipe(self) -> None:
        """Delete everything under the root."""
        if self.fs.exists(self.root):
            self.fs.rm(self.root, recursive=True)


def store_write_error(store: Location | str, exc: BaseException) -> StoreWriteError | None:
    """The one-line :class:`StoreWriteError` for ``exc`` if it is a failed write into
    ``store`` (an ``OSError`` with an errno of :data:`WRITE_ERRNOS` and no file name or
    one inside the store, also when raised on a Dask worker), else ``None``."""
    if isinstance(exc, StoreWriteError):
        return exc
    if not isinstance(exc, OSError) or exc.errno not in WRITE_ERRNOS:
        return None
    loc = Location.of(store)
    if exc.filename:  # a write() that fails has no file name; an open() or rename() has
        name = str(exc.filename)
        if loc.is_local:
            name = os.path.abspath(name)
            root = os.path.abspath(loc.root)
        else:
            root = loc.root
        if name != root and not name.startswith(root.rstrip("/") + "/"):
            return None  # somewhere else (a scratch directory, ...): not the store
    problem = exc.strerror or os.strerror(exc.errno)
    return StoreWriteError(f"store {loc}: cannot write: {problem}; the results written so "
                           f"far are kept: {WRITE_ERRNOS[exc.errno]}, then run the same "
                           "command again to resume")


@contextlib.contextmanager
def store_writes(store: Location | str) -> Iterator[None]:
    """Context in which a failed write into ``store`` (full disk, quota, read-only file
    system, permission) becomes one :class:`StoreWriteError` naming the store; any other
    error passes unchanged."""
    try:
        yield
    except OSError as exc:
        err = store_write_error(store, exc)
        if err is None or err is exc:
            raise
        raise err from exc
