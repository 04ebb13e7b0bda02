"""The hostile cases on an object store, which has no rename and no append.

The guarantees of a local run (tests/hostile/test_runs.py), through moto's real S3
server (``s3_server`` in conftest.py): nothing of the user's overwritten, one writer per
OUT (a conditional write, renewed, taken over when a killed run left it), a kill mid-run
leaving whole objects only and a resume from the manifest parts, an unreadable object
failing alone, a listing taken once, one-line errors for bad URLs, shards merged on the
store. A store that ignores conditional writes is an in-memory fsspec filesystem.
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import fsspec
import numpy as np
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from PIL import Image

from guidedbp.io import store
from guidedbp.io.lock import LockedError, LockFileError, ObjectLock
from guidedbp.io.manifest import read_manifest
from guidedbp.io.write import encode_png

from . import s3server
from .helpers import (
    assert_one_line_error,
    guidedbp_command,
    run_cli,
    subprocess_environment,
    tinted_noise,
)
from .imagetree import make_flat
from .models import colour_cnn

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MARK = b"tEXtSoftware\x00guidedbp"
KILL_COUNT = 32


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("store-hostile")


@pytest.fixture(scope="module")
def module_bucket(s3_server) -> str:
    """One bucket for the module: a new s3fs client costs seconds, a prefix nothing."""
    name = f"guidedbp-hostile-{os.getpid()}"
    _fs().mkdir(name)
    return f"s3://{name}"


@pytest.fixture
def root(module_bucket) -> str:
    """A fresh, empty prefix of this test's own (as conftest's ``bucket``, cheaper)."""
    return f"{module_bucket}/{next(_prefixes)}"


_prefixes = itertools.count()


@functools.lru_cache(maxsize=None)
def _fs():
    """The tests' own s3fs client, made once (listings not cached)."""
    return s3server.filesystem()


def _objects(url: str) -> dict[str, bytes]:
    """Every object below ``url``, by its key relative to it (s3server.objects, one
    client; another store's through its fsspec filesystem)."""
    base = url.split("://", 1)[1].strip("/")
    fs = _fs() if url.startswith("s3://") else store.filesystem(url)
    return {key.split(base, 1)[1].lstrip("/"): fs.cat_file(key) for key in fs.find(base)}


def _upload(folder: Path, url: str) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            store.put(store.join(url, path.relative_to(folder).as_posix()), path.read_bytes())


@pytest.fixture(scope="module")
def model(workspace) -> str:
    path = workspace / "tiny.keras"
    colour_cnn((16, 16, 3)).save(path)
    return str(path)


def _png(seed: int = 0, size=(16, 16)) -> bytes:
    """A PNG of the user's: no guidedbp mark."""
    buffer = io.BytesIO()
    Image.fromarray(tinted_noise(*size, seed=seed)).save(buffer, format="PNG")
    return buffer.getvalue()


def _upload_images(url: str, count: int, first_seed: int = 0) -> list[str]:
    names = [f"p{index}.png" for index in range(count)]
    for index, name in enumerate(names):
        store.put(store.join(url, name), _png(first_seed + index))
    return names


def _records(url: str, manifest: str = "manifest.jsonl") -> list[dict]:
    return read_manifest(store.join(url, manifest))


def _by_input(records: list[dict]) -> dict[str, dict]:
    return {record["input"].rsplit("/", 1)[-1]: record for record in records}


def _is_whole_own_png(data: bytes) -> bool:
    """A PNG guidedbp wrote, complete: its mark, IEND last, every pixel decodes."""
    if not (data.startswith(PNG_SIGNATURE) and MARK in data[:80] and data[-8:-4] == b"IEND"):
        return False
    Image.open(io.BytesIO(data)).load()
    return True


def _hidden(objects: dict) -> list[str]:
    """Keys guidedbp keeps only while it runs (the lock, manifest parts)."""
    return sorted(key for key in objects if key.startswith("."))


def _summary(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if " explained" in line]
    assert len(lines) == 1, stderr
    return lines[0]


# -- 1. nothing of the user's is overwritten ------------------------------------------------


@pytest.fixture(params=["s3", "nocond"])
def either_root(request) -> str:
    """A fresh prefix on moto's S3 (conditional writes: each output is one conditional
    PUT, and only an object already there is checked), or on a store that ignores them
    (each output key checked before its PUT)."""
    return request.getfixturevalue("root" if request.param == "s3" else "nocond")


def test_objects_of_the_users_at_output_keys_are_never_overwritten(model, either_root):
    """A plain object and an unmarked PNG at output keys fail their inputs alone (one-line
    reasons, exit 1) and keep their bytes; a guidedbp-marked PNG there is replaced."""
    root = either_root
    _upload_images(f"{root}/in", 4)
    out = f"{root}/maps"
    mine = {"p0.png": b"my notes, not a picture\n", "p1.png": _png(99),
            "p2.png": encode_png(np.zeros((4, 4), np.uint8))}  # the last one is guidedbp's
    for name, data in mine.items():
        store.put(f"{out}/in/{name}.guided.color.png", data)
    result = run_cli("explain", model, f"{root}/in/", "-o", out, "--render", "color")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "2 explained, 2 failed" in _summary(result.stderr)
    records = _by_input(_records(out))
    objects = _objects(out)
    for name in ("p0.png", "p1.png"):
        error = records[name]["error"]
        assert records[name]["status"] == "error" and "\n" not in error
        assert "was not written by guidedbp" in error and f"in/{name}.guided.color.png" in error
        assert objects[f"in/{name}.guided.color.png"] == mine[name]  # untouched
        failed = [line for line in result.stderr.splitlines() if f"failed: {root}/in/{name}"
                  in line]
        assert len(failed) == 1 and "refusing to overwrite it" in failed[0]
    for name in ("p2.png", "p3.png"):
        assert records[name]["status"] == "ok"
        assert _is_whole_own_png(objects[f"in/{name}.guided.color.png"])
    assert objects["in/p2.png.guided.color.png"] != mine["p2.png"]  # replaced
    assert _hidden(objects) == []  # the lock object and the parts are gone


def test_a_manifest_object_of_the_users_is_refused_before_anything_is_written(model, root):
    _upload_images(f"{root}/in", 1)
    store.put(f"{root}/maps/manifest.jsonl", b"my own notes\n")
    result = run_cli("explain", model, f"{root}/in", "-o", f"{root}/maps")
    assert_one_line_error(result, "manifest.jsonl", "not a guidedbp manifest")
    assert _objects(f"{root}/maps") == {"manifest.jsonl": b"my own notes\n"}


# -- 2. one writer per OUT --------------------------------------------------------------------


def _lock_object(url: str, **fields) -> bytes:
    holder = {"pid": 999999, "host": "elsewhere", "started": "2001-02-03 04:05:06",
              "token": "feedfacecafebeef", "renewed": time.time()}
    return json.dumps({**holder, **fields}).encode()


def test_the_object_lock_refuses_a_live_holder_and_takes_over_a_stale_one(root, monkeypatch):
    out = f"{root}/maps"
    key = f"{out}/.manifest.jsonl.lock"
    first = ObjectLock(out).acquire()
    try:
        assert first.conditional is True  # S3 refuses a second If-None-Match: * write
        holder = json.loads(store.read_bytes(key))
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        with pytest.raises(LockedError) as refused:
            ObjectLock(out).acquire()
        message = str(refused.value)
        assert "\n" not in message
        assert f"pid {os.getpid()} on {socket.gethostname()}, started " \
               f"{holder['started']}" in message
        assert json.loads(store.read_bytes(key))["token"] == holder["token"]  # not touched
    finally:
        first.release()
    assert not store.exists(key)  # a run that ends removes its lock

    # A lock a killed run left: taken over once not renewed for the lease, not before.
    monkeypatch.setenv("GUIDEDBP_LOCK_LEASE", "30")
    monkeypatch.setenv("GUIDEDBP_LOCK_SETTLE", "0.05")
    store.put(key, _lock_object(key, renewed=time.time() - 5))
    with pytest.raises(LockedError, match="pid 999999 on elsewhere, started 2001-02-03 04:05:06"):
        ObjectLock(out).acquire()
    assert json.loads(store.read_bytes(key))["pid"] == 999999
    store.put(key, _lock_object(key, renewed=time.time() - 31))
    taken = ObjectLock(out).acquire()
    try:
        holder = json.loads(store.read_bytes(key))
        assert holder["pid"] == os.getpid() and holder["token"] != "feedfacecafebeef"
    finally:
        taken.release()
    assert not store.exists(key)


def test_the_object_lock_is_renewed_while_held(root, monkeypatch):
    monkeypatch.setenv("GUIDEDBP_LOCK_LEASE", "0.4")  # renewed every 0.1 s
    key = f"{root}/maps/.manifest.jsonl.lock"
    with ObjectLock(f"{root}/maps"):
        first = json.loads(store.read_bytes(key))["renewed"]
        deadline = time.monotonic() + 10
        while json.loads(store.read_bytes(key))["renewed"] == first:
            assert time.monotonic() < deadline, "the lock was not renewed"
            time.sleep(0.05)
    assert not store.exists(key)


@pytest.mark.parametrize("data", [b"mine", b"{}", b'{"pid": 1}', b"x" * 70000],
                         ids=["text", "empty-object", "no-token", "large"])
def test_an_object_at_the_lock_key_that_is_no_lock_is_refused(model, root, data):
    """Refused in one line before anything is written, and left as it is."""
    _upload_images(f"{root}/in", 1)
    key = f"{root}/maps/.manifest.jsonl.lock"
    store.put(key, data)
    result = run_cli("explain", model, f"{root}/in", "-o", f"{root}/maps")
    assert_one_line_error(result, ".manifest.jsonl.lock", "not a guidedbp lock")
    assert _objects(f"{root}/maps") == {".manifest.jsonl.lock": data}
    with pytest.raises(LockFileError):
        ObjectLock(f"{root}/maps").acquire()


# -- 3. a store that ignores conditional writes -----------------------------------------------


class NoConditionFileSystem(MemoryFileSystem):
    """A store that takes ``If-None-Match: *`` and overwrites anyway (some S3 clones)."""

    protocol = ("nocond",)
    store: dict = {}
    pseudo_dirs = [""]

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        return super().pipe_file(path, value, mode="overwrite", **kwargs)


@pytest.fixture
def nocond(monkeypatch):
    fsspec.register_implementation("nocond", NoConditionFileSystem, clobber=True)
    NoConditionFileSystem.store.clear()
    NoConditionFileSystem.pseudo_dirs[:] = [""]
    monkeypatch.setenv("GUIDEDBP_LOCK_SETTLE", "0.3")
    yield "nocond://bucket/maps"
    NoConditionFileSystem.store.clear()


def test_a_store_without_conditional_writes_is_found_out(nocond):
    probe = f"{nocond}/probe"
    store.put(probe, b"one", create=True)
    store.put(probe, b"two", create=True)  # the condition ignored: no FileExistsError
    assert store.read_bytes(probe) == b"two" and not store.honours_create(probe)
    lock = ObjectLock(nocond)
    started = time.monotonic()
    with lock:
        assert lock.conditional is False
        assert time.monotonic() - started >= 0.3  # written, settled, read back
        holder = json.loads(store.read_bytes(f"{nocond}/.manifest.jsonl.lock"))
        assert holder["pid"] == os.getpid()
        with pytest.raises(LockedError, match=f"pid {os.getpid()} on "):
            ObjectLock(nocond).acquire()  # a live lock is refused without writing
        assert json.loads(store.read_bytes(f"{nocond}/.manifest.jsonl.lock")) == holder
    assert not store.exists(f"{nocond}/.manifest.jsonl.lock")


def _race(folder: str) -> None:
    """Two runs (threads) acquire the lock of ``folder`` at once: exactly one gets it, the
    other is refused naming the winner, and the winner's lock is the one there."""
    barrier = threading.Barrier(2)
    outcomes: dict[int, object] = {}
    locks = [ObjectLock(folder), ObjectLock(folder)]

    def contend(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = locks[index].acquire()
        except Exception as error:  # noqa: BLE001 - the outcome is the point
            outcomes[index] = error

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    won = [i for i, outcome in outcomes.items() if isinstance(outcome, ObjectLock)]
    lost = [outcome for outcome in outcomes.values() if not isinstance(outcome, ObjectLock)]
    try:
        assert len(won) == 1 and len(lost) == 1, outcomes
        assert isinstance(lost[0], LockedError), lost[0]
        holder = json.loads(store.read_bytes(f"{folder}/.manifest.jsonl.lock"))
        assert holder["token"] == locks[won[0]]._token
        assert f"pid {holder['pid']} on {holder['host']}, started {holder['started']}" \
            in str(lost[0])
    finally:
        for index in won:
            locks[index].release()
    assert not store.exists(f"{folder}/.manifest.jsonl.lock")


@pytest.mark.parametrize("round_", range(3))
def test_two_runs_racing_on_a_store_without_conditional_writes_one_wins(nocond, round_):
    """Both find no lock and write their own (the second overwriting the first): after the
    settle time each reads it back, and only the one whose lock is there goes on."""
    _race(nocond)


@pytest.mark.parametrize("round_", range(3))
def test_two_runs_racing_for_a_stale_lock_one_wins(root, monkeypatch, round_):
    monkeypatch.setenv("GUIDEDBP_LOCK_LEASE", "30")
    monkeypatch.setenv("GUIDEDBP_LOCK_SETTLE", "0.3")
    key = f"{root}/maps/.manifest.jsonl.lock"
    store.put(key, _lock_object(key, renewed=time.time() - 60))
    _race(f"{root}/maps")


@pytest.mark.parametrize("when", ["after-probe", "before-probe"])
def test_a_takeover_removed_by_a_second_taker_leaves_one_holder(root, monkeypatch, when):
    """The interleaving a conditional write cannot stop: two runs read the same stale
    lock; one removes it and writes its own; the other, late, removes that one and writes
    its own, after or before the first probed the store's conditional writes with it. The
    first reads its lock back after the settle time and stands down, naming the other."""
    monkeypatch.setenv("GUIDEDBP_LOCK_LEASE", "30")
    monkeypatch.setenv("GUIDEDBP_LOCK_SETTLE", "1.5")
    out, key = f"{root}/maps", f"{root}/maps/.manifest.jsonl.lock"
    store.put(key, _lock_object(key, renewed=time.time() - 60))
    late = _lock_object(key, pid=4242, host="late", token="0123456789abcdef")
    written = threading.Event()

    class Watched:  # the store, with the late taker's delete and write where wanted
        def __getattr__(self, name):
            return getattr(store, name)

        def honours_create(self, url):
            if when == "after-probe":
                try:
                    return store.honours_create(url)
                finally:
                    written.set()  # the late taker goes on in the test's thread
            store.delete(url)
            try:
                return store.honours_create(url)  # finds nothing to probe with
            finally:
                store.put(url, late, create=True)

    first = ObjectLock(out)
    first._store = Watched()
    outcome: dict[str, object] = {}

    def take_over() -> None:
        try:
            outcome["lock"] = first.acquire()
        except Exception as error:  # noqa: BLE001 - the outcome is the point
            outcome["lock"] = error

    thread = threading.Thread(target=take_over)
    thread.start()
    try:
        if when == "after-probe":
            assert written.wait(30)
            assert json.loads(store.read_bytes(key))["token"] == first._token
            store.delete(key)
            store.put(key, late, create=True)
    finally:
        thread.join(timeout=60)
    if isinstance(outcome["lock"], ObjectLock):
        outcome["lock"].release()
        pytest.fail("both runs went on holding the lock")
    assert isinstance(outcome["lock"], LockedError), outcome
    assert "pid 4242 on late, started 2001-02-03 04:05:06" in str(outcome["lock"])
    assert store.read_bytes(key) == late  # the refused run left the other's lock alone


# -- 4. a kill mid-write ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def flat(workspace) -> Path:
    folder = workspace / "flat"
    make_flat(folder, KILL_COUNT, size=(16, 16))
    return folder


def _wait_for_a_part(out: str, process, timeout: float = 300) -> None:
    """Wait until the run writing ``out`` has written a manifest part; fail the test if it
    exits first. Looked at slowly (each look is a request moto answers, with CPU the run
    needs) until the run holds its lock, then often: its batches follow fast."""
    prefix = out.split("://", 1)[1]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            names = {name.rsplit("/", 1)[-1] for name in _fs().ls(prefix, refresh=True)}
        except FileNotFoundError:
            names = set()
        if ".manifest.jsonl.parts" in names:
            return
        if process.poll() is not None:
            pytest.fail(f"guidedbp exited early with {process.returncode}: "
                        f"{process.stderr.read().decode(errors='replace')}")
        time.sleep(0.02 if ".manifest.jsonl.lock" in names else 0.25)
    process.kill()
    pytest.fail(f"no manifest part under {out} in {timeout} s")


def test_a_kill_mid_run_leaves_whole_objects_and_skip_existing_resumes_from_the_parts(
        model, flat, root, workspace, monkeypatch):
    _upload(flat, f"{root}/flat")
    out, local = f"{root}/maps", workspace / "kill-local"
    flags = ["--batch-size", "4", "--render", "color"]
    process = subprocess.Popen(
        guidedbp_command("explain", model, f"{root}/flat", "-o", out, *flags, "-q"),
        env=subprocess_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # The clean local run to compare with, while the subprocess imports TensorFlow.
        run_cli("explain", model, flat, "-o", local, *flags, "-q", code=0)
        _wait_for_a_part(out, process)
        process.send_signal(signal.SIGSTOP)  # mid-run, holding its lock
        # A second run while the first holds the lock: refused, naming the holder.
        holder = json.loads(store.read_bytes(f"{out}/.manifest.jsonl.lock"))
        second = run_cli("explain", model, f"{root}/flat", "-o", out, *flags)
        assert_one_line_error(second, "being written by another guidedbp run",
                              f"(pid {process.pid} on {socket.gethostname()}, started "
                              f"{holder['started']})")
        assert process.poll() is None
    finally:
        process.kill()
        process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL

    objects = _objects(out)
    assert "manifest.jsonl" not in objects  # compacted only by a run that ends
    parts = {key: data for key, data in objects.items()
             if key.startswith(".manifest.jsonl.parts/")}
    assert parts and all(key.endswith(".jsonl") for key in parts)
    in_parts = []
    for data in parts.values():  # whole JSON lines, each a whole record
        assert data.endswith(b"\n")
        in_parts += [json.loads(line) for line in data.splitlines()]
    assert all(isinstance(record, dict) and record["status"] == "ok" for record in in_parts)
    outputs = {key: data for key, data in objects.items() if not key.startswith(".")}
    assert outputs and all(key.endswith(".png") and _is_whole_own_png(data)
                           for key, data in outputs.items())  # no partial object
    for record in in_parts:  # a record is written after its outputs
        assert all(path in outputs for path in record["outputs"].values())
    assert set(_hidden(objects)) == {*parts, ".manifest.jsonl.lock"}
    carried = len({record["input"] for record in in_parts})
    assert 0 < carried < KILL_COUNT  # killed mid-run

    # The killed run's lock is live for its lease (300 s): not taken over before...
    again = run_cli("explain", model, f"{root}/flat", "-o", out, *flags, "--skip-existing")
    assert_one_line_error(again, f"pid {process.pid} on ")
    # ... and taken over after it.
    monkeypatch.setenv("GUIDEDBP_LOCK_LEASE", "3")  # the run renews its own every 0.75 s
    monkeypatch.setenv("GUIDEDBP_LOCK_SETTLE", "0.05")
    renewed = json.loads(store.read_bytes(f"{out}/.manifest.jsonl.lock"))["renewed"]
    time.sleep(max(0.0, renewed + 3.2 - time.time()))
    resumed = run_cli("explain", model, f"{root}/flat", "-o", out, *flags,
                      "--skip-existing", code=0)
    assert _summary(resumed.stderr).startswith(
        f"{KILL_COUNT - carried} explained, {carried} skipped (outputs exist) in ")
    final = _objects(out)
    assert _hidden(final) == []  # no parts, no lock left

    wanted = s3server.files(str(local))
    assert {key: data for key, data in final.items() if key.endswith(".png")} == \
        {key: data for key, data in wanted.items() if key.endswith(".png")}
    remote_records = _records(out)
    local_records = read_manifest(local / "manifest.jsonl")
    assert [record["input"] for record in remote_records] == \
        [f"{root}/flat/{Path(record['input']).name}" for record in local_records]
    assert [{**record, "input": None, "input_file": None} for record in remote_records] == \
        [{**record, "input": None, "input_file": None} for record in local_records]
    assert b'content="guidedbp"' in final["index.html"]


# -- 5, 6. objects that change under the run ---------------------------------------------------


def _between_listing_and_reading(monkeypatch, action) -> None:
    """Run ``action`` once the CLI has listed its inputs, before it reads any."""
    import guidedbp.cli.explain as explain_cli

    original = explain_cli.import_tensorflow

    def hooked(*args, **kwargs):
        action()
        return original(*args, **kwargs)

    monkeypatch.setattr(explain_cli, "import_tensorflow", hooked)


def test_an_unreadable_object_fails_alone(model, root, monkeypatch):
    url = f"{root}/in"
    _upload_images(url, 4)
    store.put(f"{url}/empty.png", b"")
    store.put(f"{url}/corrupt.png", _png(7)[:40])
    _between_listing_and_reading(monkeypatch, lambda: store.delete(f"{url}/p1.png"))
    result = run_cli("explain", model, url, "-o", f"{root}/maps", "--render", "color")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "3 explained, 3 failed" in _summary(result.stderr)
    records = _by_input(_records(f"{root}/maps"))
    assert sorted(records) == ["corrupt.png", "empty.png", "p0.png", "p1.png", "p2.png",
                               "p3.png"]
    failed = {name: record["error"] for name, record in records.items()
              if record["status"] == "error"}
    assert sorted(failed) == ["corrupt.png", "empty.png", "p1.png"]
    assert all(error and "\n" not in error and len(error) < 300 for error in failed.values())
    assert "no such object" in failed["p1.png"]
    for name in failed:
        assert sum(f"failed: {url}/{name}: " in line
                   for line in result.stderr.splitlines()) == 1


def test_a_listing_that_changes_during_the_run(model, root, monkeypatch):
    """The inputs are listed once, at the start: an object added later waits for the next
    run, one removed fails alone; a rerun with --skip-existing explains the new one only."""
    url, out = f"{root}/in", f"{root}/maps"
    _upload_images(url, 3)

    def change():
        store.put(f"{url}/new.png", _png(50))
        store.delete(f"{url}/p0.png")

    _between_listing_and_reading(monkeypatch, change)
    result = run_cli("explain", model, url, "-o", out, "--render", "color")
    assert result.exit_code == 1, result.output
    assert "2 explained, 1 failed" in _summary(result.stderr)
    records = _by_input(_records(out))
    assert sorted(records) == ["p0.png", "p1.png", "p2.png"]  # not new.png
    assert records["p0.png"]["status"] == "error"
    assert "in/new.png.guided.color.png" not in _objects(out)
    monkeypatch.undo()
    before = _objects(out)
    rerun = run_cli("explain", model, url, "-o", out, "--render", "color", "--skip-existing",
                    code=0)
    assert _summary(rerun.stderr).startswith("1 explained, 2 skipped (outputs exist) in ")
    after = _objects(out)
    assert sorted(_by_input(_records(out))) == ["new.png", "p1.png", "p2.png"]
    assert _is_whole_own_png(after["in/new.png.guided.color.png"])
    for name in ("p1.png", "p2.png"):
        key = f"in/{name}.guided.color.png"
        assert after[key] == before[key]


# -- 7. bad URLs ----------------------------------------------------------------------------------


def _absent_protocol() -> tuple[str, str]:
    """A protocol of store.py's whose library is not installed, and its extra."""
    import importlib.util

    for protocol, library, extra in (("gs", "gcsfs", "gcs"), ("az", "adlfs", "azure")):
        if importlib.util.find_spec(library) is None:
            return protocol, extra
    pytest.skip("gcsfs and adlfs are both installed")


def _bad_url_case(case: str, root: str, image: Path) -> tuple[str, str, list[str]]:
    """INPUT, OUT and what the error line must say."""
    good_in, good_out = f"{root}/in", f"{root}/maps"
    if case == "out-bucket":
        return good_in, "s3://no-such-bucket-guidedbp/maps", [
            "the bucket 's3://no-such-bucket-guidedbp' does not exist"]
    if case == "in-bucket":
        return "s3://no-such-bucket-guidedbp/in", good_out, [
            "s3://no-such-bucket-guidedbp/in", "the bucket 's3://no-such-bucket-guidedbp' "
            "does not exist"]
    if case == "empty-prefix":
        return f"{root}/nothing/", good_out, [f"{root}/nothing/", "not found"]
    if case == "missing-object":
        return f"{root}/in/nope.png", good_out, ["nope.png", "not found"]
    if case == "unknown-protocol":
        return "nosuchstore://bucket/x", good_out, ["nosuchstore://"]
    protocol, extra = _absent_protocol()
    url = f"{protocol}://bucket/x"
    wanted = [f"{protocol}:// URLs need", f"pip install 'guidedbp[{extra}]'"]
    return (url, good_out, wanted) if case == "library-in" else (str(image), url, wanted)


@pytest.mark.parametrize("case", ["out-bucket", "in-bucket", "empty-prefix", "missing-object",
                                  "library-in", "library-out", "unknown-protocol"])
def test_a_bad_url_is_one_line_exit_2(model, root, case, tmp_path):
    _upload_images(f"{root}/in", 1)
    image = tmp_path / "a.png"
    image.write_bytes(_png())
    inputs, out, fragments = _bad_url_case(case, root, image)
    result = run_cli("explain", model, inputs, "-o", out)
    assert_one_line_error(result, *fragments)
    assert list(_objects(root)) == ["in/p0.png"]  # nothing written


# -- 8. shards, merge-manifests and report with an OUT URL -----------------------------------


def test_shards_merge_and_report_on_the_store(model, root, workspace):
    local_in = workspace / "shards" / "in"
    local_in.mkdir(parents=True)
    for index in range(5):
        (local_in / f"p{index}.png").write_bytes(_png(200 + index))
    _upload(local_in, f"{root}/in")
    out, local = f"{root}/maps", workspace / "shards" / "out"
    for shard in ("0/2", "1/2"):
        run_cli("explain", model, f"{root}/in", "-o", out, "--render", "color", "-q",
                "--shard", shard, code=0)
        run_cli("explain", model, local_in, "-o", local, "--render", "color", "-q",
                "--shard", shard, code=0)
    objects = _objects(out)
    assert {"manifest-0-of-2.jsonl", "manifest-1-of-2.jsonl"} <= set(objects)
    assert "manifest.jsonl" not in objects and _hidden(objects) == []
    merged = run_cli("merge-manifests", out, code=0)
    assert f"5 records from 2 shards -> {out}/manifest.jsonl" in merged.stderr
    run_cli("merge-manifests", local, code=0)
    remote, wanted = _records(out), read_manifest(local / "manifest.jsonl")
    assert [record["input"] for record in remote] == \
        [f"{root}/in/{Path(record['input']).name}" for record in wanted]
    assert [{**record, "input": None, "input_file": None} for record in remote] == \
        [{**record, "input": None, "input_file": None} for record in wanted]
    page = _objects(out)["index.html"]
    assert b'content="guidedbp"' in page
    store.delete(f"{out}/index.html")
    result = run_cli("report", out, code=0)
    assert f"{out}/index.html" in result.stderr and "(5 inputs)" in result.stderr
    assert _objects(out)["index.html"] == page
    # A page of the user's at that key is refused and left as it is.
    store.put(f"{out}/index.html", b"<html>mine</html>")
    assert_one_line_error(run_cli("report", out), "index.html")
    assert _objects(out)["index.html"] == b"<html>mine</html>"
