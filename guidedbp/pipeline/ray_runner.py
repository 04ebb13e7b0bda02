"""The Ray runner: the explain stages as a Ray Data pipeline.

The driver lists the inputs and cuts them into the same batches as the local
runner (:func:`~guidedbp.pipeline.stages.batched`): a map's last bits can depend
on the batch it was computed in, and both runners must write the same bytes. Then::

    from_items(batches) -> map(prepare)         tasks, in parallel
                        -> map(ExplainWorker)   actor pool, ``workers``
                        -> driver: manifest records, in input order

Each worker loads the model and traces the engine once, then runs the same stages
as the local runner for a batch (explain, then render and the atomic writes,
straight into OUT). Only manifest records come back. OUT and the inputs must
therefore be where every worker reaches them: on a file system every node sees at
the same path (on one machine: always), or on an object store (URLs), which the
workers read and write themselves; the driver only lists, schedules and writes the
manifest. The driver's store settings (``AWS_*``, ``GOOGLE_*``, ``AZURE_*``,
``FSSPEC_*``... in its environment) go to the workers in their ``runtime_env``.

A node may be lost mid-run: the explain actors are restarted elsewhere and the batch
an actor was working on is run again (its maps are written again, with the same
bytes); each batch's records reach the manifest once, in input order.
Ray is imported only here, only for this runner.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import time

from guidedbp._extras import needs
from guidedbp.io import store
from guidedbp.pipeline import stages, writing
from guidedbp.pipeline.local import Delivery
from guidedbp.pipeline.stages import Plan, Summary

RAY_MISSING = needs("runner='ray'", "ray")
#: Environment variables the stores' libraries read (fsspec, s3fs and botocore, gcsfs
#: and google-auth, adlfs and azure-identity): a worker on another node needs the
#: driver's to reach the same store as the same user.
STORE_ENV_PREFIXES = ("AWS_", "GOOGLE_", "GCSFS_", "AZURE_", "FSSPEC_")


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How a worker rebuilds the driver's model (picklable).

    Attributes:
        model: The model spec (a path, a SavedModel folder, ``keras:NAME``, ``demo``).
        load: Keyword arguments of :func:`guidedbp.load_model`.
    """

    model: str
    load: dict


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Where and how wide the Ray pipeline runs.

    Attributes:
        address: ``None`` starts a local Ray instance; ``auto`` or ``ray://...`` joins one.
        workers: Explainer actors, each with its own model copy.
        cpus_per_worker: CPUs each actor reserves, and its TensorFlow thread count.
        gpus_per_worker: GPUs each actor reserves (0: CPU only).
    """

    address: str | None = None
    workers: int = 2
    cpus_per_worker: int = 1
    gpus_per_worker: float = 0.0


def import_ray():
    """``ray`` and ``ray.data``, or ImportError with the install hint."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as error:
        raise ImportError(RAY_MISSING) from error
    return ray


def run_on_ray(plan: Plan, recipe: Recipe, items: list, cluster: Cluster,
               progress=None, carried: dict | None = None, previous: dict | None = None
               ) -> Summary:
    """Explain ``items`` on Ray; the manifest is written by the driver, in input order.

    The plan's feed tells the decode tasks what to do (the tasks never receive the
    model itself). A Ray instance already initialised in this process is used as it
    is; else one is started (or joined, with ``cluster.address``) and shut down at
    the end.
    """
    ray = import_ray()
    for name in ("ray.data", "ray"):  # guidedbp has its own progress report
        logging.getLogger(name).setLevel(logging.WARNING)
    started = False
    if not ray.is_initialized():
        quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
        if cluster.address:
            ray.init(address=cluster.address, **quiet)
        else:
            local_cpus = max(os.cpu_count() or 1, int(cluster.workers * cluster.cpus_per_worker))
            # "local": a new instance, even where `ray start` (or a test's cluster) left
            # its address in /tmp/ray for a bare ray.init() to join, num_cpus refused.
            ray.init(address="local", num_cpus=local_cpus, include_dashboard=False, **quiet)
        started = True
    summary = Summary(output=plan.output, manifest=plan.options.manifest)
    start = time.perf_counter()
    # Workers may run in another folder (or machine): they get absolute paths, and the
    # records get back the paths as the user gave them.
    remote = dataclasses.replace(plan, output=_absolute(plan.output))
    batches = stages.batched(items, plan.options.method.batch_size)
    carried = carried or {}
    rows = [{"batch": index, "items": pickle.dumps(
        [(dataclasses.replace(item, path=_absolute(item.path)), carried.get(item.path))
         for item in batch])}
        for index, batch in enumerate(batches)]
    # Workers on other nodes reach the store with the driver's settings, whether this
    # runner started Ray, joined a cluster or found Ray initialised (the job's own
    # runtime_env is kept: Ray merges env_vars into it).
    environment = _runtime_env(store.is_url(plan.output) or store.is_url(recipe.model)
                               or any(store.is_url(item.path) for item in items))
    delivery = Delivery(plan, summary, progress, carried, previous)
    try:
        dataset = (
            ray.data.from_items(rows)
            .map(_prepare_row, fn_kwargs={"plan": remote},
                 # Decoding is light next to the engine; reserving no CPU lets it run
                 # beside actors that hold every CPU, and the task pool bounds it. A
                 # task lost with its node is run again (Ray's task retries).
                 num_cpus=0, **_task_pool(ray, min(len(rows), max(2, cluster.workers))),
                 **environment)
            # A lost node (or a crashed actor) costs no input: Ray Data's actor pool
            # restarts the actor on a node with room and runs the batches it held again
            # (its defaults, max_restarts=-1 and max_task_retries=-1, which Ray 2.60
            # deprecates passing as ray_remote_args; its actors are spread over the
            # nodes). A batch run again writes its maps again, with the same bytes.
            .map(ExplainWorker,
                 fn_constructor_kwargs={"recipe": recipe, "plan": remote,
                                        "threads": max(1, int(cluster.cpus_per_worker))},
                 # No more model copies than batches (Ray warns of idle actors).
                 compute=ray.data.ActorPoolStrategy(size=min(len(rows), cluster.workers)),
                 num_cpus=cluster.cpus_per_worker, num_gpus=cluster.gpus_per_worker,
                 **environment)
        )
        waiting, following = {}, 0
        for row in dataset.iter_rows():
            batch = int(row["batch"])
            if batch < following or batch in waiting:
                continue  # a batch delivered already (Ray returns each once: a safeguard)
            waiting[batch] = json.loads(row["records"])
            while following in waiting:  # batches may finish out of order
                for item, record in zip(batches[following], waiting.pop(following)):
                    record["input"] = item.path
                    delivery.deliver(record)
                following += 1
        if following != len(batches):
            raise RuntimeError(f"Ray returned the records of {following} of {len(batches)} "
                               "batches: the run is incomplete")
    finally:
        delivery.close()
        if started:
            ray.shutdown()
    summary.seconds = time.perf_counter() - start
    return summary


def _runtime_env(on_a_store: bool) -> dict:
    """``{"runtime_env": {"env_vars": ...}}`` with the driver's store settings, when the
    run reads or writes a store and any are set; else ``{}`` (local paths need none, and
    a credential is not spread where it is not needed)."""
    if not on_a_store:
        return {}
    variables = {name: value for name, value in os.environ.items()
                 if name.startswith(STORE_ENV_PREFIXES)}
    return {"runtime_env": {"env_vars": variables}} if variables else {}


def _absolute(path: str) -> str:
    """A local path made absolute (workers may run elsewhere); a URL as it is."""
    return path if store.is_url(path) else os.path.abspath(path)


def _task_pool(ray, size: int) -> dict:
    """At most ``size`` tasks at once: ``compute=`` since Ray 2.51, ``concurrency=`` before."""
    if hasattr(ray.data, "TaskPoolStrategy"):
        return {"compute": ray.data.TaskPoolStrategy(size=size)}
    return {"concurrency": size}


def _prepare_row(row: dict, plan: Plan) -> dict:
    """A decode task: one batch of inputs -> decoded, fitted, preprocessed."""
    prepared = [stages.prepare(plan, item, carried)
                for item, carried in pickle.loads(row["items"])]
    # Pickled: images of one batch differ in size, which Arrow tensor columns refuse.
    return {"batch": row["batch"], "prepared": pickle.dumps(prepared)}


def draw_as_workers(load: dict) -> None:
    """Before a model is loaded with ``load``: a random network (``keras:NAME``,
    ``weights='none'``) is drawn once per process, and one seed makes every worker, and
    the driver (whose records name its content digest), draw the same one."""
    if str(load.get("weights")).lower() == "none":
        import keras

        keras.utils.set_random_seed(0)


class ExplainWorker:
    """A Ray actor: loads the model and traces the engine once, then explains batches."""

    def __init__(self, recipe: Recipe, plan: Plan, threads: int = 1):
        import tensorflow as tf

        # Before any op runs: N workers on N cores must not each start a core-wide pool.
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        from guidedbp.api import Explainer
        from guidedbp.models.loading import load_model

        draw_as_workers(recipe.load)
        loaded = load_model(recipe.model, **recipe.load)
        self.plan = plan
        self.explainer = Explainer(loaded, plan.options.methods, options=plan.options.method,
                                   output=plan.options.classes.model_output)

    def __call__(self, row: dict) -> dict:
        prepared = pickle.loads(row["prepared"])
        explained = stages.explain(self.plan, self.explainer, prepared)
        records = [writing.outcome(self.plan, p, explained.get(i)) for i, p in enumerate(prepared)]
        return {"batch": row["batch"], "records": json.dumps(records)}
