"""s3: object storage, against moto's S3 server on 127.0.0.1 (in a process of its own, on the
same machine; nothing beyond 127.0.0.1). ``explain_files`` (local runner) from a bucket into
a bucket against local folder into local folder: MobileNetV2 and ResNet50 (``keras:NAME``,
``weights=None``), the end-to-end section's 320x240 JPEGs, batch 16, color+overlay, marginal
images/s, median of interleaved rounds (target: the ratio >= 0.9), on 64 vs 16 images, not
256 vs 64: against moto on 2 shared cores a store run goes at a few images/s, and ResNet50
at 256 would take minutes per run. With the S3 requests per image and the CPU time per image
of both runs and of moto (on a busy machine the CPU time moves less than the wall time).
Peak RSS of ``guidedbp explain`` (fresh processes) from buckets of 1,000 to 100,000 8x8
PNGs, each listed whole and one shard of about 125 explained (moto serves a few images/s
here: a whole 100,000 would take an hour or more); target flat. Listing and collection alone
(``collect_inputs``) of each bucket, fresh process, peak RSS. images/s of one 1-CPU worker
(the local runner, TensorFlow on one thread, the process pinned to one core, moto on the
others), 224x224 JPEGs from and to the bucket, ResNet50 and MobileNetV2, and the
worker-hours per million images that makes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import keras

from sections.common import REPO, peak_rss, timed, write_images

#: The section's name, as ``--only`` takes it.
NAME = "s3"


#: Buckets of this many 8x8 PNGs: peak RSS of a run that lists each whole, and of the
#: listing alone.
STORE_COUNTS = (1000, 10_000, 100_000)

#: The explain job from a bucket into a bucket over local folder into local folder,
#: marginal images/s, at least.
STORE_TARGET = 0.9

# moto's S3 server in a process of its own, its buckets filled in memory through moto's
# backend rather than by 100,000 PUTs (one PUT takes moto 10-20 ms on 2 shared cores).
# argv: port, then NAME=COUNT per bucket (COUNT 8x8 PNGs at pNNN/imgNNNNNN.png, 1,000 per
# prefix; 0: an empty bucket). moto lists a prefix by scanning every key of the bucket,
# which makes walking 100 prefixes of 100,000 keys take minutes; for the filled buckets,
# which nothing writes to, it is handed the keys below the prefix alone (the same answer).
# It serves until its stdin closes.
_MOTO_SCRIPT = r"""
import bisect, io, logging, sys, types
import numpy as np
from PIL import Image
from moto.s3.models import S3Backend, s3_backends
from moto.server import ThreadedMotoServer

logging.getLogger("werkzeug").setLevel(logging.ERROR)
buffer = io.BytesIO()
Image.fromarray(np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
    buffer, "PNG")
backend = s3_backends["123456789012"]["aws"]
names = {}
for spec in sys.argv[2:]:
    bucket, count = spec.split("=")
    backend.create_bucket(bucket, "us-east-1")
    for index in range(int(count)):
        backend.put_object(bucket, f"p{index // 1000:03d}/img{index:06d}.png", buffer.getvalue())
    if int(count):
        names[bucket] = sorted(backend.get_bucket(bucket).keys.keys())
original = S3Backend.list_objects

def list_objects(self, bucket, prefix, delimiter, marker, max_keys):
    keys = names.get(getattr(bucket, "name", None))
    if keys is None or not prefix:
        return original(self, bucket, prefix, delimiter, marker, max_keys)
    low, high = bisect.bisect_left(keys, prefix), bisect.bisect_left(keys, prefix + "\U0010ffff")
    below = types.SimpleNamespace(keys={key: bucket.keys[key] for key in keys[low:high]})
    return original(self, below, prefix, delimiter, marker, max_keys)

S3Backend.list_objects = list_objects
server = ThreadedMotoServer(ip_address="127.0.0.1", port=int(sys.argv[1]), verbose=False)
server.start()
print("ready", flush=True)
sys.stdin.read()
server.stop()
"""


class _Moto:
    """moto's S3 server on 127.0.0.1 with ``buckets`` ({name: PNGs}) filled, and the
    AWS_* variables that reach it set in this process (inherited by its children) for
    the ``with`` block."""

    def __init__(self, buckets: dict[str, int]):
        sys.path.insert(0, REPO)
        from tests import s3server

        self.s3server = s3server
        port = s3server.free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [sys.executable, "-c", _MOTO_SCRIPT, str(port),
             *(f"{name}={count}" for name, count in buckets.items())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if self.process.stdout.readline().strip() != "ready":
            self.process.kill()
            self.process.wait()
            raise RuntimeError("moto's S3 server did not start")
        self.saved = {name: os.environ.get(name) for name in s3server.environment("")}
        os.environ.update(s3server.environment(self.endpoint))

    def cpu_seconds(self) -> float:
        """The server's CPU time so far (user + system)."""
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> _Moto:
        return self

    def __exit__(self, *exc) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _upload(folder: str, url: str) -> None:
    """Every file below ``folder`` to the same keys below ``url``, 8 PUTs at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from guidedbp.io import store

    paths = [os.path.join(root, name) for root, _, names in os.walk(folder) for name in names]

    def put(path: str) -> None:
        with open(path, "rb") as handle:
            store.put(store.join(url, os.path.relpath(path, folder).replace(os.sep, "/")),
                      handle.read())

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, paths))


class _Requests:
    """S3 requests this process makes through guidedbp's store, by operation (botocore's
    ``before-call`` event on guidedbp's s3fs client)."""

    def __init__(self):
        import collections

        from guidedbp.io import store

        self.counts: collections.Counter = collections.Counter()
        store.filesystem("s3://").s3.meta.events.register(
            "before-call.s3", lambda model, **_: self.counts.update([model.name]))

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)


def store_throughput(folder: str, moto: _Moto, rounds: int = 3, count: int = 64,
                     few: int = 16, batch: int = 16) -> bool:
    """``explain_files`` (local runner) from a bucket into a bucket against local folder
    into local folder: same JPEGs, same loaded model; marginal images/s from ``count``
    and ``few`` images (loading, tracing and listing cancel), median of interleaved
    rounds; the S3 requests per image, and the CPU time per image of both jobs and of
    moto."""
    import shutil

    from guidedbp import explain_files
    from guidedbp.io import store
    from guidedbp.io.manifest import read_manifest
    from guidedbp.models.loading import load_model

    local_in = {n: os.path.join(folder, "s3-photos", f"n{n}") for n in (few, count)}
    for n, path in local_in.items():
        write_images(path, n)  # the same RNG: the first `few` images are the same
        _upload(path, f"s3://bench-photos/n{n}")
    remote_in = {n: f"s3://bench-photos/n{n}/" for n in (few, count)}
    requests = _Requests()
    heads = []
    for _ in range(20):
        heads.append(timed(store.size_of, f"s3://bench-photos/n{few}/part0/img0000.jpg"))
    print(f"explain job from a bucket into a bucket vs local folder into local folder "
          f"(moto's S3 server on 127.0.0.1, same machine; it answers a HEAD in "
          f"{statistics.median(heads) * 1000:.0f} ms here): weights=None, {count} vs {few} "
          f"JPEGs 320x240, batch {batch}, guided, renders color+overlay, marginal images/s, "
          f"median of {rounds} interleaved rounds, {os.cpu_count()} CPUs")
    print(f"{'model':<14}{'local':>8}{'s3':>8}{'ratio':>8}  target")
    met, runs = True, 0
    for name in ("MobileNetV2", "ResNet50"):
        keras.utils.set_random_seed(0)
        loaded = load_model(f"keras:{name}", weights="none")
        last: dict[tuple, str] = {}
        calls: dict[int, dict[str, int]] = {}

        def job(kind: str, n: int) -> None:
            nonlocal runs
            runs += 1
            if kind == "s3":
                before = requests.snapshot()
                output = f"s3://bench-maps/{name}-{n}-{runs}/"
                summary = explain_files(loaded, remote_in[n], output, batch_size=batch)
                calls[n] = {op: made - before.get(op, 0)
                            for op, made in requests.snapshot().items()}
            else:
                output = os.path.join(folder, f"s3-local-{name}-{n}")
                shutil.rmtree(output, ignore_errors=True)
                summary = explain_files(loaded, local_in[n], output, batch_size=batch)
            assert summary.done == n, summary
            last[kind, n] = output

        job("local", few)  # the first job's threads and imports, outside the timing
        job("s3", few)
        rates: dict[str, list[float]] = {"local": [], "s3": []}
        # CPU seconds per image (marginal) of this process (the engine, the pipeline and
        # the S3 client) and of moto: on a busy machine they move less than the wall time.
        cpu: dict[str, list[float]] = {"local": [], "s3": [], "moto": []}
        ratios = []
        for round_index in range(rounds):
            seconds: dict[tuple, float] = {}
            used: dict[tuple, float] = {}
            order = [(kind, n) for n in (few, count) for kind in ("local", "s3")]
            for kind, n in order if round_index % 2 == 0 else reversed(order):
                server, mine = moto.cpu_seconds(), os.times()
                seconds[kind, n] = timed(job, kind, n)
                after = os.times()
                used[kind, n] = after.user + after.system - mine.user - mine.system
                if kind == "s3":
                    used["moto", n] = moto.cpu_seconds() - server
            for kind in rates:
                rates[kind].append((count - few) / (seconds[kind, count] - seconds[kind, few]))
            for kind in cpu:
                cpu[kind].append((used[kind, count] - used[kind, few]) / (count - few))
            ratios.append(rates["s3"][-1] / rates["local"][-1])
        # The last runs' maps, byte for byte: the first image's color map.
        local_out, remote_out = last["local", count], last["s3", count]
        first = read_manifest(os.path.join(local_out, "manifest.jsonl"))[0]["outputs"]["color"]
        with open(os.path.join(local_out, first), "rb") as handle:
            same = handle.read() == store.read_bytes(store.join(remote_out, first))
        per_image = {op: (calls[count].get(op, 0) - calls[few].get(op, 0)) / (count - few)
                     for op in sorted(set(calls[count]) | set(calls[few]))}
        ratio = statistics.median(ratios)
        met = met and ratio >= STORE_TARGET
        print(f"{name:<14}{statistics.median(rates['local']):>8.1f}"
              f"{statistics.median(rates['s3']):>8.1f}{ratio:>8.2f}  >= {STORE_TARGET} "
              f"{'met' if ratio >= STORE_TARGET else 'NOT met'}  (per round: "
              f"{', '.join(f'{r:.2f}' for r in ratios)}; same bytes: {same})", flush=True)
        ms = {kind: statistics.median(values) * 1000 for kind, values in cpu.items()}
        print(f"{'':<14}requests per image: "
              + ", ".join(f"{op} {made:.2f}" for op, made in per_image.items() if made)
              + f"; CPU per image: local {ms['local']:.0f} ms, s3 {ms['s3']:.0f} ms "
              f"(ratio {ms['local'] / ms['s3']:.2f}) + moto's own {ms['moto']:.0f} ms",
              flush=True)
    return met


def store_memory(explained: int = 125) -> None:
    """Peak RSS of ``guidedbp explain`` (fresh processes) from buckets of ``STORE_COUNTS``
    8x8 PNGs, each listing the whole bucket and explaining one shard of about
    ``explained`` of them: moto serves a store run at a few images/s here, so a whole
    run of 10,000 would take most of an hour."""
    peaks = {}
    for count in STORE_COUNTS:
        peaks[count] = peak_rss("demo", f"s3://tiny-{count}/", f"s3://tiny-maps/{count}/",
                                 "--render", "color", "--shard",
                                 f"0/{count // explained}") / 2**20
    low, high = STORE_COUNTS[0], STORE_COUNTS[-1]
    growth = peaks[high] / peaks[low] - 1
    verdict = "met" if abs(growth) <= 0.10 else "NOT met"
    print(f"peak RSS of explain from a bucket (demo CNN, 8x8 PNGs, --render color, the whole "
          f"bucket listed, shard 0 of count/{explained} explained): "
          + ", ".join(f"{count:,} objects {peak:.0f} MiB" for count, peak in peaks.items())
          + f" ({low:,} to {high:,}: {growth:+.1%}; target flat: within 10% {verdict})",
          flush=True)


# collect_inputs of one URL in a fresh process: objects found, seconds, RSS before (s3fs
# imported and set up) and the peak after, in KiB.
_LISTING_SCRIPT = """
import sys, time
from guidedbp.io import store
from guidedbp.io.inputs import collect_inputs

def status(field):
    with open("/proc/self/status") as lines:
        return int(next(line.split()[1] for line in lines if line.startswith(field + ":")))

store.is_prefix(sys.argv[1])  # s3fs imported, its client made: before the clock
before = status("VmRSS")
start = time.perf_counter()
found = len(collect_inputs([sys.argv[1]]).items)
print(found, time.perf_counter() - start, before, status("VmHWM"))
"""


def store_listing(counts=None) -> None:
    """Listing and collection alone (``collect_inputs([url])``) of buckets of ``counts``
    objects, each in a fresh process: time and peak RSS."""
    counts = counts or STORE_COUNTS
    print("listing + collection alone (collect_inputs of s3://BUCKET/, 1,000 objects per "
          "prefix), fresh process each:")
    peaks = {}
    for count in counts:
        result = subprocess.run([sys.executable, "-c", _LISTING_SCRIPT, f"s3://tiny-{count}/"],
                                capture_output=True, text=True, check=True)
        found, seconds, before, peak = result.stdout.split()
        assert int(found) == count, (found, count)
        peaks[count] = int(peak) * 1024
        print(f"  {count:>7,} objects: {float(seconds):5.1f} s, peak RSS {int(peak) / 1024:.0f} "
              f"MiB ({(int(peak) - int(before)) / 1024:+.0f} MiB over the process before "
              f"listing)", flush=True)
    slope = (peaks[counts[-1]] - peaks[counts[0]]) / (counts[-1] - counts[0])
    print(f"  growth: about {slope:.0f} bytes per object listed (the list of inputs is held "
          f"for the run)")


# A 1-CPU worker: the process pinned to one core, TensorFlow on one thread, the local
# runner; explain_files of the bucket's prefixes nFEW/ and nCOUNT/ into the bucket,
# alternating, after one warm-up run. Prints each run's wall and CPU seconds (the
# process's user + system time: on a busy machine the core is shared, the CPU time
# less so) as JSON.
_WORKER_SCRIPT = """
import json, os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras
from guidedbp import explain_files
from guidedbp.models.loading import load_model
name, source, output = sys.argv[2:5]
few, count, rounds = map(int, sys.argv[5:8])
keras.utils.set_random_seed(0)
loaded = load_model(f"keras:{name}", weights="none")
explain_files(loaded, f"{source}n{few}/", f"{output}warm/", batch_size=16)
seconds = []
for round_index in range(rounds):
    times = {}
    for n in (few, count) if round_index % 2 == 0 else (count, few):
        start, cpu = time.perf_counter(), os.times()
        summary = explain_files(loaded, f"{source}n{n}/", f"{output}{round_index}-{n}/",
                                batch_size=16)
        after = os.times()
        times[n] = [time.perf_counter() - start,
                    after.user + after.system - cpu.user - cpu.system]
        assert summary.done == n, summary
    seconds.append(times)
print(json.dumps(seconds))
"""


def store_per_worker(folder: str, moto: _Moto, rounds: int = 3, count: int = 40,
                     few: int = 8) -> None:
    """images/s of one 1-CPU worker from and to the bucket, 224x224 JPEGs, and what a
    million images cost in worker-hours."""
    cpus = sorted(os.sched_getaffinity(0))
    worker, rest = cpus[0], set(cpus[1:]) or {cpus[0]}
    for task in os.listdir(f"/proc/{moto.process.pid}/task"):  # the server's threads
        try:
            os.sched_setaffinity(int(task), rest)
        except OSError:
            pass
    for n in (few, count):
        path = os.path.join(folder, "s3-worker", f"n{n}")
        write_images(path, n, size=(224, 224))
        _upload(path, f"s3://bench-photos/w224/n{n}")
    print(f"per 1-CPU worker: local runner, TensorFlow on 1 thread, the process pinned to one "
          f"core (moto on {'the other' if len(cpus) > 1 else 'the same'}), weights=None, "
          f"224x224 JPEGs from and to the bucket, batch 16, guided, renders color+overlay, "
          f"marginal ({count} - {few} images), median of {rounds} rounds:")
    print(f"  {'model':<14}{'images/s':>9}{'CPU s per image':>17}"
          f"{'worker-hours per 1M images':>28}")
    for name in ("ResNet50", "MobileNetV2"):
        result = subprocess.run(
            [sys.executable, "-c", _WORKER_SCRIPT, str(worker), name,
             "s3://bench-photos/w224/", f"s3://bench-maps/worker-{name}/", str(few),
             str(count), str(rounds)],
            capture_output=True, text=True, check=True)
        runs = json.loads(result.stdout.strip().splitlines()[-1])
        rate = statistics.median((count - few) / (run[str(count)][0] - run[str(few)][0])
                                 for run in runs)
        cpu = statistics.median((run[str(count)][1] - run[str(few)][1]) / (count - few)
                                for run in runs)
        # A 1-CPU worker kept busy does one image per `cpu` seconds: the hours a million
        # images take it, from the CPU time (the wall rate counts other tenants' share
        # of the core too).
        print(f"  {name:<14}{rate:>9.2f}{cpu:>17.3f}{1e6 * cpu / 3600:>28.0f}", flush=True)
    print("  worker-hours from the CPU time per image (a busy 1-CPU worker); GPU workers: "
          "not measured (no GPU on this machine)")


def object_store(folder: str) -> None:
    """The ``s3`` section: moto's S3 server on 127.0.0.1, nothing beyond it."""
    try:
        import moto  # noqa: F401
        import s3fs  # noqa: F401
    except ImportError as error:
        print(f"s3: skipped: {error} (pip install 'guidedbp[s3]' 'moto[server]')")
        return
    start = time.perf_counter()
    load = os.getloadavg()[0]
    # Two servers: one holding 111,000 objects in its memory answers more slowly (its
    # garbage collector walks them), which would be counted against the store runs.
    with _Moto({"bench-photos": 0, "bench-maps": 0}) as moto:
        store_throughput(folder, moto)
        store_per_worker(folder, moto)
    # The runs below are fresh processes, which reach this second server through the
    # environment (this process's s3fs client stays with the first).
    with _Moto({"tiny-maps": 0, **{f"tiny-{count}": count for count in STORE_COUNTS}}):
        store_memory()
        store_listing()
    print(f"s3 section: {time.perf_counter() - start:.0f} s; load average (1 min) {load:.1f} "
          f"at its start, {os.getloadavg()[0]:.1f} at its end, on {os.cpu_count()} CPUs")



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    object_store(folder)
