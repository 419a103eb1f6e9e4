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
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import StoreError, StoreUnreachableError, StoreWriteError

__all__ = ["MISTYPED_SCHEMES", "UNREACHABLE_ERRORS", "WRITE_ERRNOS", "Location", "check_url",
           "parse_storage_options", "quiet_store_errors", "store_access_error",
           "store_unreachable_error", "store_write_error", "store_writes"]

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

#: exception classes (by name, anywhere in the class's bases: their packages are optional)
#: that mean the store's service cannot be reached, raised by botocore (S3) and aiohttp
#: (S3, GCS, HTTP) instead of an ``OSError``
UNREACHABLE_ERRORS = frozenset({
    "EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
    "ConnectionClosedError", "ProxyConnectionError", "ClientConnectionError",
    "ClientConnectorError", "ServerDisconnectedError", "ServerTimeoutError",
    "ClientConnectionResetError", "ClientOSError",
})

#: URL schemes of remote and in-memory stores: a local path starting with one of them and
#: "//", ":/" or ":" ("s3//b/x", "s3:/b/x") is a mistyped URL (schemes that are also common
#: folder names, such as fsspec's data://, dir:// or zip://, are left out)
MISTYPED_SCHEMES = frozenset({
    "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oci", "oss", "hdfs", "webhdfs",
    "http", "https", "ftp", "sftp", "ssh", "smb", "memory", "file",
})
_MISTYPED_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)(//|:/?)(?!/)")

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

    def __post_init__(self) -> None:
        check_url(self.url)

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

            try:
                fs, path = fsspec.core.url_to_fs(self.url, **self._fs_options())
            except ImportError as exc:  # e.g. s3:// without s3fs, gs:// without gcsfs
                msg = f"store {self.url}: {' '.join(str(exc).split())}"
                raise StoreError(msg) from None
            except (TypeError, ValueError) as exc:  # a storage option it does not take
                msg = f"store {self.url}: {' '.join(str(exc).split())[:300]}"
                raise StoreError(msg) from None
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
        return FsspecStore.from_url(self.url, storage_options=self._fs_options(),
                                    read_only=read_only)

    def _fs_options(self) -> dict[str, Any]:
        """The filesystem's options: the user's, and on S3 ``max_concurrency=1`` unless
        given. s3fs reads a whole object with several ranged GETs only above its block size
        (50 MB), yet asks for the size first (a HEAD) whenever ``max_concurrency > 1`` (its
        default 10): every chunk object of a store is far smaller, so one GET is enough."""
        opts = dict(self.storage_options)
        if self.protocol in ("s3", "s3a"):
            opts.setdefault("max_concurrency", 1)
        return opts

    # small control objects (JSON), each written in one atomic step
    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self.path(key)))

    def read_bytes(self, key: str) -> bytes | None:
        """The object at ``key``; None if absent (one open of a local file, one GET)."""
        try:
            if self.is_local:
                with open(self.path(key), "rb") as f:
                    return f.read()
            return bytes(self.fs.cat_file(self.path(key)))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def read_json(self, key: str) -> Any | None:
        """The JSON object at ``key``; None if absent or unreadable (a torn write)."""
        raw = self.read_bytes(key)
        if raw is None:
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
        self.write_bytes(key, json.dumps(obj, sort_keys=True).encode())

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


def _known_protocols() -> set[str]:
    from fsspec.registry import known_implementations, registry

    return {*known_implementations, *registry, "file", "local"}


def check_url(url: str) -> None:
    """Refuse a store URL whose scheme fsspec does not know (``foo://x``) and a local path
    that looks like a URL with a mistyped scheme separator (``s3//bucket/x``,
    ``s3:/bucket/x``): with a known scheme as its first component it would silently become
    a local folder. A local folder of that name is still reachable as ``./s3//x``.

    Raises
    ------
    StoreError
        Naming the URL and what was expected.
    """
    if "://" in url:
        for part in url.split("::"):  # chained URLs: simplecache::s3://...
            proto = part.split("://", 1)[0] if "://" in part else part
            if proto not in _known_protocols():
                msg = (f"store {url}: unsupported URL scheme {proto + '://'!r}; expected a "
                       "local path or an fsspec URL such as s3://bucket/x.zarr, gs://, "
                       "memory:// or file://")
                raise StoreError(msg)
        return
    m = _MISTYPED_URL.match(url)
    if m and m.group(1).lower() in MISTYPED_SCHEMES:
        fixed = f"{m.group(1)}://{url[m.end():]}"
        msg = (f"store {url}: looks like a URL with a mistyped '://'; write {fixed} (or "
               f"./{url} for a local folder of that name)")
        raise StoreError(msg)


def store_unreachable_error(store: Location | str,
                            exc: BaseException) -> StoreUnreachableError | None:
    """The one-line :class:`StoreUnreachableError` for ``exc`` if it (or an exception it
    was raised from) says that the store's service cannot be reached, also when raised on
    a Dask worker; else ``None``."""
    if isinstance(exc, StoreUnreachableError):
        return exc
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if any(c.__name__ in UNREACHABLE_ERRORS for c in type(e).__mro__):
            cause = " ".join(str(e).split())[:300] or type(e).__name__
            return StoreUnreachableError(
                f"store {Location.of(store).url}: cannot reach it: {cause}; the results "
                "written so far are kept: check the endpoint and the network, then run the "
                "same command again to resume")
        e = e.__cause__ or e.__context__
    return None


def store_access_error(store: Location | str,
                       exc: BaseException) -> StoreWriteError | StoreUnreachableError | None:
    """:func:`store_write_error` or :func:`store_unreachable_error`, whichever applies."""
    return store_write_error(store, exc) or store_unreachable_error(store, exc)


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
    system, permission) becomes one :class:`StoreWriteError` naming the store, and a store
    whose service cannot be reached one :class:`StoreUnreachableError`; any other error
    passes unchanged."""
    try:
        yield
    except Exception as exc:
        err = store_access_error(store, exc)
        if err is None or err is exc:
            raise
        raise err from exc


_FAILED_TASK = re.compile(r"^(\w+)\((\d+)?")


def _is_store_failure(text: str) -> bool:
    """``repr`` of a task's exception (as Dask logs it) names an unwritable or unreachable
    store."""
    m = _FAILED_TASK.match(text)
    if m is None:
        return False
    name, code = m.group(1), m.group(2)
    if name in UNREACHABLE_ERRORS or name in ("StoreWriteError", "StoreUnreachableError"):
        return True
    return code is not None and int(code) in WRITE_ERRNOS and name.endswith("Error")


class _StoreErrorFilter:
    """Logging filter: drops Dask's "Compute Failed" record of a task that failed on the
    store, and asyncio's "exception was never retrieved" for a store connection."""

    def filter(self, record: Any) -> bool:
        msg = str(record.msg)
        if msg.startswith("Compute Failed") and isinstance(record.args, tuple) \
                and len(record.args) > 3:
            # also a task of a run the client already ended (its study withdrawn from the
            # workers while the cancelled task was queued): the client reported why
            text = str(record.args[3])
            return not (_is_store_failure(text) or "was not shipped to this worker" in text)
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            return not any(c.__name__ in UNREACHABLE_ERRORS for c in type(exc).__mro__)
        return True


_QUIET = _StoreErrorFilter()


def quiet_store_errors() -> None:
    """In this process (a worker of our own cluster), log no traceback for a task that
    failed because the store cannot be written or reached: the client reports it in one
    line. Other failures are logged as before. Idempotent."""
    import logging

    for name in ("distributed.worker", "asyncio"):
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)
