"""A real S3 API for the tests: moto's server, in its own process, on 127.0.0.1.

:func:`start` runs ``python -m moto.server`` on a free port (with this interpreter, or
``GUIDEDBP_TEST_MOTO_PYTHON``: make test-pythons' venvs at the floors have s3fs but not
moto's server, whose Flask needs a newer click) and waits until it answers;
the tests reach it as any S3 client does, through ``AWS_ENDPOINT_URL`` and dummy
credentials in the environment (:func:`environment`), which the CLI subprocesses and Ray
workers inherit. Buckets are made with :func:`make_bucket`; objects are compared with
:func:`objects`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start() -> tuple[subprocess.Popen, str]:
    """Start the server; returns the process and its endpoint URL."""
    for _ in range(5):  # another process may take the port between its choice and bind
        port = free_port()
        process = subprocess.Popen(
            [os.environ.get("GUIDEDBP_TEST_MOTO_PYTHON") or sys.executable, "-m",
             "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and process.poll() is None:
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).close()
                return process, endpoint
            except OSError:
                time.sleep(0.1)
        process.kill()
        process.wait()
    raise RuntimeError("moto's S3 server did not start")


def environment(endpoint: str) -> dict[str, str]:
    """What an S3 client needs to use the server (no credentials of anyone's)."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true"}


def filesystem():
    """A fresh s3fs filesystem (no cached listings) for the test's own checks."""
    import s3fs

    return s3fs.S3FileSystem(use_listings_cache=False, skip_instance_cache=True)


def make_bucket(name: str) -> str:
    filesystem().mkdir(name)
    return f"s3://{name}"


def upload(folder: str, url: str) -> None:
    """Every file below ``folder`` to the same relative keys below ``url``."""
    fs = filesystem()
    base = url.split("://", 1)[1].rstrip("/")
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            relative = os.path.relpath(path, folder).replace(os.sep, "/")
            fs.pipe_file(f"{base}/{relative}", open(path, "rb").read())


def objects(url: str) -> dict[str, bytes]:
    """Every object below ``url``, by its key relative to it."""
    fs = filesystem()
    base = url.split("://", 1)[1].rstrip("/")
    return {key[len(base) + 1:]: fs.cat_file(key) for key in fs.find(base)}


def files(folder: str) -> dict[str, bytes]:
    """Every file below ``folder``, by its path relative to it (``/``-separated)."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder).replace(os.sep, "/")] = open(path, "rb").read()
    return found
