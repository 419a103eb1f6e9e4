"""How many S3 requests ``toyengine run``, ``status`` and ``summary`` make, by chunk count.

A moto S3 server (from the ``[test]`` extra) is started on a free 127.0.0.1 port, its
request log read back after each command: the number of requests of each method (GET, HEAD,
PUT, ...) and the command's wall time, for the hello study (``studies/examples/hello.yaml``)
at two chunk sizes, so that the requests per chunk can be read off the difference. On a real
S3 endpoint each request costs tens of milliseconds; the counts, not the times, carry over.

Usage: python benchmarks/s3_requests.py [--toys 30] [--chunk-sizes 10 1] [--workers 1]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "studies" / "examples" / "hello.yaml"
REQUEST = re.compile(r'"(GET|HEAD|PUT|POST|DELETE) ([^" ]*) HTTP/1\.1"')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _requests(log: Path, start: int) -> tuple[collections.Counter, int, collections.Counter]:
    """The methods of the requests logged after line ``start``, the log's line count, and
    the requests by method and path (digits as N, the query string dropped)."""
    lines = log.read_text(errors="replace").splitlines()
    methods: collections.Counter = collections.Counter()
    paths: collections.Counter = collections.Counter()
    for line in lines[start:]:
        # the server colours some lines: strip ANSI escapes before matching
        m = REQUEST.search(re.sub(r"\x1b\[[0-9;]*m", "", line))
        if m:
            methods[m.group(1)] += 1
            paths[(m.group(1), re.sub(r"[0-9]+", "N", m.group(2).split("?")[0]))] += 1
    return methods, len(lines), paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--toys", type=int, default=30)
    ap.add_argument("--chunk-sizes", type=int, nargs="+", default=[10, 1])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--by-path", type=int, default=0, metavar="N",
                    help="also print each command's N most requested (method, path) pairs")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="s3_requests_"))
    log = tmp / "moto.log"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": url}
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                   "-p", str(port)], env=env, stdout=out, stderr=out)
    try:
        import s3fs

        deadline = time.monotonic() + 60
        while True:
            try:
                s3fs.S3FileSystem(endpoint_url=url, key="testing", secret="testing",
                                  skip_instance_cache=True).mkdir("toys")
                break
            except Exception:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)
        _, seen, _ = _requests(log, 0)
        totals: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
        print(f"hello study, {args.toys} toys, {args.workers} worker(s), moto at {url}")
        for size in args.chunk_sizes:
            store = f"s3://toys/hello-{size}.zarr"
            chunks = -(-args.toys // size)
            commands = {
                "run": ["run", str(HELLO), "--toys", str(args.toys), "--chunk-size", str(size),
                        "--store", store, "--workers", str(args.workers), "--quiet"],
                "status": ["status", store, "--json"],
                "summary": ["summary", store, "--format", "json"],
            }
            for name, argv in commands.items():
                t0 = time.monotonic()
                r = subprocess.run([sys.executable, "-m", "toyengine", *argv], env=env,
                                   capture_output=True, text=True)
                wall = time.monotonic() - t0
                methods, seen, paths = _requests(log, seen)
                if r.returncode not in (0, 1):  # status exits 1 for an incomplete store
                    raise SystemExit(f"{name} exited {r.returncode}: {r.stderr[-500:]}")
                total = sum(methods.values())
                totals[name].append((chunks, total))
                print(f"  {chunks:4d} chunks  {name:8s} {total:6d} requests "
                      f"({total / chunks:6.1f} per chunk) {dict(sorted(methods.items()))}, "
                      f"{wall:.1f} s")
                for (method, path), n in paths.most_common(args.by_path):
                    print(f"        {n:6d} {method} {path}")
        for name, rows in totals.items():
            (c0, n0), (c1, n1) = min(rows), max(rows)
            if c1 > c0:
                print(f"  {name}: {(n1 - n0) / (c1 - c0):.1f} requests per additional chunk "
                      f"({c0} -> {c1} chunks)")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
