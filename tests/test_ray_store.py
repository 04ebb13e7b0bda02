"""``--engine ray`` without a shared file system: inputs and maps on an object store, the
explain actors spread over nodes, and a node lost mid-run.

One Ray cluster for the module (:class:`ray.cluster_utils.Cluster`, all on this machine):
a head node with no CPUs (the driver's only) and two worker nodes of two CPUs. Its
processes start without the store's settings (``AWS_*``), so a worker reaches moto's S3
server only with what the runner passes it in its ``runtime_env``.

Every Ray run must write the very bytes a local run of the same inputs writes into a
local folder, and a manifest with one record per input, in input order.

The workers are watched, not changed: a ``worker_process_setup_hook`` (in the job's
``runtime_env``, set by the test) wraps :func:`guidedbp.io.store.put` in each worker
process, to record the node of each map it writes and to hold each actor at a gate
after the maps of its first input (in the middle of its first batch). With an actor held
mid-batch on each node, the test knows, without timing guesses, that the actors run on
both nodes, and removes one of the nodes while its actor is mid-batch. Every wait is
bounded.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from . import s3server
from .helpers import run_cli
from .imagetree import make_flat

# A Ray cluster of three nodes on moto: make test-all runs these, make test leaves them out
# (the heavy marker). Ray Data's own deprecation notices are about its defaults, not about
# guidedbp's calls.
pytestmark = [pytest.mark.heavy,
              pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")]

COUNT = 24  # inputs
BATCH = 4  # inputs per batch: 6 batches
#: Names (and prefixes) of the variables that must not reach the cluster's processes
#: except through the runner: the store's settings.
STORE_VARIABLES = ("AWS_", "GOOGLE_", "GCSFS_", "AZURE_", "FSSPEC_")
GATE = "GUIDEDBP_TEST_RAY_GATE"  # the gate's folder, in the job's env_vars
WAIT = 180  # seconds: the most a worker or the test waits for the other
RUN = 300  # seconds: the most a Ray run may take


# -- the workers' side: runs in each Ray worker process of a gated job --------------------------


def _watch_puts() -> None:
    """``worker_process_setup_hook``: wrap ``store.put`` in this worker process.

    Each map PUT is recorded as ``GATE/wrote/NODE~PID~NAME``. The maps of the first input
    a process writes pass; those of any other input, until ``GATE/open`` exists (at most
    :data:`WAIT` seconds), first record ``GATE/held/NODE~PID~NAME`` and wait: an actor is
    held in the middle of a batch, after some of its maps are written. The bytes PUT are
    untouched.
    """
    folder = os.environ.get(GATE)
    if not folder:
        return
    import ray

    from guidedbp.io import store

    put = store.put
    first = []  # the first input whose maps this process writes

    def mark(kind: str, url: str) -> None:
        name = "~".join([ray.get_runtime_context().get_node_id(), str(os.getpid()),
                         url.rsplit("/", 1)[-1]])
        Path(folder, kind, name).touch()

    def watched(url: str, data: bytes, create: bool = False) -> None:
        name = url.rsplit("/", 1)[-1]
        source = name[:name.index(".png") + 4]  # imgNNNN.png.guided.color.png: imgNNNN.png
        first[:] = first or [source]
        if source != first[0] and not Path(folder, "open").exists():
            mark("held", url)
            deadline = time.monotonic() + WAIT
            while not Path(folder, "open").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        put(url, data, create=create)
        mark("wrote", url)

    store.put = watched


# -- the test's side ----------------------------------------------------------------------------


class Gate:
    """The folder the hook reads and writes, and what it recorded."""

    def __init__(self, folder: Path):
        self.folder = folder
        for kind in ("held", "wrote"):
            (folder / kind).mkdir(parents=True)

    def events(self, kind: str) -> list[tuple[str, int, str]]:
        """``(node, pid, object name)`` of each map held (``held``) or written (``wrote``)."""
        found = []
        for name in os.listdir(self.folder / kind):
            node, pid, key = name.split("~", 2)
            found.append((node, int(pid), key))
        return found

    def held_nodes(self) -> set[str]:
        return {node for node, _, _ in self.events("held")}

    def open(self) -> None:
        (self.folder / "open").touch()


def store_environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items()
            if name.startswith(STORE_VARIABLES)}


@contextlib.contextmanager
def without_store_environment():
    hidden = store_environment()
    for name in hidden:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(hidden)


def forget_address(address: str) -> None:
    """Take the cluster off ``/tmp/ray/ray_current_cluster``, where ``Cluster`` writes it:
    a ``ray.init()`` without an address anywhere on this machine (another test module, in
    this or another process) would join it instead of starting its own instance."""
    try:
        from ray._common.utils import get_ray_address_file
    except ImportError:  # another Ray: nothing to forget
        return
    path = get_ray_address_file(None)
    with contextlib.suppress(OSError):
        if Path(path).read_text().strip() == address:
            os.remove(path)


def add_workers(state) -> None:
    """Worker nodes of two CPUs, up to two of them (a test may have removed one)."""
    with without_store_environment():
        while len(state.workers) < 2:
            state.workers.append(state.cluster.add_node(num_cpus=2))
    state.cluster.wait_for_nodes(timeout=WAIT)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ray_store")


@pytest.fixture(scope="module")
def images(workspace) -> Path:
    folder = workspace / "flat"
    make_flat(folder, COUNT)
    return folder


@pytest.fixture(scope="module")
def local(workspace, images):
    """The reference: the local runner, from a local folder into a local folder."""
    from guidedbp.io.manifest import read_manifest
    from guidedbp.pipeline.run import explain_files

    out = workspace / "local"
    summary = explain_files("demo", str(images), str(out), batch_size=BATCH)
    assert summary.done == COUNT and not summary.failures
    files = s3server.files(out)
    maps = {key: data for key, data in files.items() if key.endswith(".png")}
    assert len(maps) >= COUNT
    return SimpleNamespace(maps=maps, others=set(files) - set(maps),
                           records=read_manifest(out / "manifest.jsonl"))


@pytest.fixture(scope="module")
def cluster(s3_server):
    """A head node with no CPUs and two worker nodes of two CPUs each, whose processes do
    not have the store's settings; shut down after the module."""
    pytest.importorskip("ray", reason="Ray is not installed: pip install '.[ray]'")
    pytest.importorskip("ray.data", reason="Ray Data is not installed: pip install '.[ray]'")
    import ray
    from ray.cluster_utils import Cluster

    with without_store_environment():  # the nodes' processes inherit this environment
        cluster = Cluster(initialize_head=True,
                          head_node_args={"num_cpus": 0, "include_dashboard": False})
    forget_address(cluster.address)
    state = SimpleNamespace(cluster=cluster, address=cluster.address, workers=[])
    try:
        add_workers(state)
        yield state
    finally:
        if ray.is_initialized():
            ray.shutdown()
        try:
            cluster.shutdown()
        except ValueError:  # a run left behind (a failed test) joined Ray again
            cluster.shutdown()  # remove_node has called ray.shutdown()


@pytest.fixture
def gated(cluster, tmp_path):
    """This process joined to the cluster with the watching hook; the :class:`Gate`."""
    import ray
    from ray import cloudpickle

    add_workers(cluster)
    gate = Gate(tmp_path / "gate")
    # The workers cannot import the tests: the hook goes to them by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(address=cluster.address, log_to_driver=False, runtime_env={
        "worker_process_setup_hook": _watch_puts, "env_vars": {GATE: str(gate.folder)}})
    try:
        yield gate
    finally:
        gate.open()  # a worker still held lets go
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def source(bucket, images) -> str:
    """The inputs, uploaded to a new bucket: its ``s3://bucket/flat`` prefix."""
    url = f"{bucket}/{images.name}"
    s3server.upload(str(images), url)
    return url


def bounded(run, timeout: float = RUN):
    """``run()``'s result, or its exception; a run not over after ``timeout`` seconds fails
    the test (the thread is left to end with the cluster, at the fixtures' teardown)."""
    outcome = {}

    def target() -> None:
        try:
            outcome["result"] = run()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=target, name="ray-run", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"the Ray run was not over after {timeout} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def open_when(gate: Gate, ready, then=None, timeout: float = WAIT) -> dict:
    """In a thread: once ``ready()`` (checked every 0.1 s, at most ``timeout`` s), call
    ``then()``, and open the gate (even after a timeout or an error: the run must end).
    Returns a dict that tells what happened, for the test to assert once the run is over."""
    outcome = {"thread": None, "ready": False, "error": None}

    def watch() -> None:
        try:
            deadline = time.monotonic() + timeout
            while not ready():
                if time.monotonic() > deadline:
                    return
                time.sleep(0.1)
            outcome["ready"] = True
            outcome["held"] = gate.events("held")
            if then is not None:
                then()
        except BaseException as error:  # reported by the test
            outcome["error"] = error
        finally:
            gate.open()

    outcome["thread"] = threading.Thread(target=watch, name="open-gate", daemon=True)
    outcome["thread"].start()
    return outcome


def assert_same_as_local(local, out: str) -> None:
    """The store run's maps byte for byte, and its manifest, as the local run's."""
    from guidedbp.io.manifest import read_manifest

    written = s3server.objects(out)
    maps = {key: data for key, data in written.items() if key.endswith(".png")}
    # The manifest and the page, no parts left, no lock: what the local run leaves.
    assert set(written) - set(maps) == local.others == {"manifest.jsonl", "index.html"}
    assert maps.keys() == local.maps.keys()
    assert [key for key in maps if maps[key] != local.maps[key]] == []
    records = read_manifest(f"{out}/manifest.jsonl")
    assert len(records) == COUNT
    assert [record["status"] for record in records] == ["ok"] * COUNT
    # Each input once, in input order; every other field as the local run's.
    assert [record["input"].rsplit("/", 1)[-1] for record in records] == \
        [record["input"].rsplit("/", 1)[-1] for record in local.records]
    assert [{**r, "input": None, "input_file": None} for r in records] == \
        [{**r, "input": None, "input_file": None} for r in local.records]


def worker_node_ids(cluster) -> set[str]:
    return {node.node_id for node in cluster.workers}


def test_bucket_to_bucket_ray_run_writes_the_local_runs_bytes(cluster, gated, source, bucket,
                                                              local):
    out = f"{bucket}/run"
    # The maps of the later batches wait until an actor on each worker node holds one.
    watch = open_when(gated, lambda: gated.held_nodes() == worker_node_ids(cluster))
    result = bounded(lambda: run_cli("explain", "demo", source, "-o", out, "--batch-size",
                                     BATCH, "--engine", "ray", "--workers", 2, "-q"))
    watch["thread"].join(WAIT)
    assert result.exit_code == 0, (result.output, result.exception)
    assert watch["error"] is None and watch["ready"], gated.events("held")
    assert {node for node, _, _ in gated.events("wrote")} == worker_node_ids(cluster)
    assert_same_as_local(local, out)


def test_losing_a_node_mid_run_still_explains_each_input_once(cluster, gated, source, bucket,
                                                              local):
    from guidedbp.pipeline.ray_runner import Cluster
    from guidedbp.pipeline.run import explain_files

    out = f"{bucket}/run"
    written = {}
    victim, survivor = cluster.workers
    nodes = worker_node_ids(cluster)

    def ready() -> bool:  # an actor held mid-batch on each node
        return gated.held_nodes() == nodes

    def remove() -> None:
        written["before"] = set(s3server.objects(out))  # some maps, maybe a manifest part
        cluster.workers.remove(victim)
        cluster.cluster.remove_node(victim)

    watch = open_when(gated, ready, then=remove)
    summary = bounded(lambda: explain_files("demo", source, out, batch_size=BATCH,
                                            runner="ray", cluster=Cluster(workers=2)))
    watch["thread"].join(WAIT)
    assert watch["error"] is None and watch["ready"], gated.events("held")
    assert summary.done == COUNT and not summary.failures
    assert [key for key in written["before"] if key.endswith(".png")]  # some maps were out
    # The victim's actor was held mid-batch when its node went; that batch was explained
    # again, and its maps written, by the actor restarted on the surviving node (a
    # process there that the gate never held).
    lost = {key for node, _, key in watch["held"] if node == victim.node_id}
    assert lost
    held = {pid for _, pid, _ in watch["held"]}
    restarted = {key for node, pid, key in gated.events("wrote")
                 if node == survivor.node_id and pid not in held}
    assert lost <= restarted
    assert_same_as_local(local, out)
