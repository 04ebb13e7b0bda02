"""The local runner: stream inputs through the stages in this process.

Decoding runs one batch ahead and rendering/writing one batch behind the engine,
in threads (TensorFlow, numpy, Pillow and zlib release the GIL), so the model is rarely
idle. At most three batches are in memory at once, whatever the number of images.
Two threads decode and two write; on an object store, where each read and write waits
on the network, ``STORE_THREADS`` each.
The worker threads keep the engine's scheduling priority: lowered (a nice value,
``SCHED_BATCH``) they were measured to slow the run on a busy machine, where they lose
their share of the cores to other processes rather than to TensorFlow.
"""

from __future__ import annotations

import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

from guidedbp.io import store
from guidedbp.io.manifest import open_manifest
from guidedbp.pipeline import stages, writing
from guidedbp.pipeline.replaced import remove_replaced
from guidedbp.pipeline.resume import same_file_key
from guidedbp.pipeline.stages import Plan, Prepared, Summary

#: Decoding and writing threads each when the inputs or OUT are on an object store.
STORE_THREADS = 8


class Delivery:
    """Where finished records go: the summary, the manifest and the progress bar, in
    input order. Shared by every runner.

    Args:
        carried: Input paths whose records are carried over from an earlier run.
        previous: The files each input's earlier record names, by input
            (:func:`~guidedbp.pipeline.resume.earlier_outputs`): those a recomputed
            input's new record no longer names are removed
            (:mod:`~guidedbp.pipeline.replaced`).
    """

    def __init__(self, plan: Plan, summary: Summary, progress=None, carried=(),
                 previous: dict | None = None):
        self.plan, self.summary, self.progress = plan, summary, progress
        self.carried = carried
        self.previous = previous or {}
        self.failed = False  # a record with status "error" was delivered
        # On a store: a part object per batch of records (a store cannot append).
        self._manifest = open_manifest(plan.output, plan.options.manifest,
                                       plan.options.method.batch_size)

    def deliver(self, record: dict) -> None:
        self.summary.count(record, skipped=record["input"] in self.carried)
        self.failed = self.failed or record["status"] == "error"
        self._manifest.write(record)
        if self.previous and record["input"] not in self.carried:
            earlier = self.previous.get(same_file_key(record["input"]))
            if earlier:
                remove_replaced(self.plan.output, earlier, record)
        if self.progress is not None:
            self.progress.advance()

    def close(self) -> None:
        self._manifest.close()


def run_local(plan: Plan, explainer, items: list, progress=None,
              carried: dict | None = None, previous: dict | None = None) -> Summary:
    """Explain ``items`` into ``plan.output``; returns the run's summary.

    Ctrl-C stops the run at once (the summary says ``interrupted``): the records
    delivered so far stay in the manifest, which is closed with whole lines only; queued
    work is dropped and outputs being written are finished or never appear (writes are
    atomic). A second Ctrl-C while stopping raises ``KeyboardInterrupt``. With
    ``fail_fast`` the run stops after the first input that fails.
    """
    summary = Summary(output=plan.output, manifest=plan.options.manifest)
    start = time.perf_counter()
    fail_fast = plan.options.output.fail_fast
    batches = stages.batched(items, plan.options.method.batch_size)
    interrupt = _Interrupt()
    carried = carried or {}
    delivery = Delivery(plan, summary, progress, carried, previous)
    try:
        # On a store each read and write waits on the network: more threads hide it.
        threads = STORE_THREADS if store.is_url(plan.output) or any(
            store.is_url(item.path) for item in items) else 2
        with _pool("guidedbp-decode", threads) as decoders, \
                _pool("guidedbp-write", threads) as writers:

            def submit_decode(index: int) -> list[Future]:
                if index >= len(batches) or interrupt.stopped:
                    return []
                return [decoders.submit(stages.prepare, plan, item, carried.get(item.path))
                        for item in batches[index]]

            def finish(futures: list[Future]) -> None:
                for future in futures:
                    record = future.result()
                    with interrupt.deferred():  # a manifest line and its count, or neither
                        delivery.deliver(record)

            def decoded(futures: list[Future]) -> list[Prepared]:
                results = []
                for future in futures:  # counted as they come: the first batch's show
                    results.append(future.result())
                    _tell(progress, "decode", 1)
                return results

            pending: list[list[Future]] = []
            upcoming = submit_decode(0)
            for index in range(len(batches)):
                prepared, halt = _up_to_failure(decoded(upcoming), fail_fast)
                upcoming = [] if halt else submit_decode(index + 1)
                _tell(progress, "explaining")
                explained = stages.explain(plan, explainer, prepared)
                _tell(progress, "explained", len(prepared))
                prepared, failed = _up_to_failure(prepared, fail_fast)  # the engine's failures
                pending.append([writers.submit(writing.outcome, plan, p, explained.get(i))
                                for i, p in enumerate(prepared)])
                if len(pending) > 1:  # keep one batch of writes in flight
                    finish(pending.pop(0))
                # A write failure shows only in its record: with fail_fast, stop after it.
                if interrupt.stopped or halt or failed or (fail_fast and delivery.failed):
                    break
            for futures in pending:
                finish(futures)
            for future in upcoming:
                future.cancel()
    except KeyboardInterrupt:
        if interrupt.presses != 1:  # not our first Ctrl-C: not ours to turn into a summary
            raise
    finally:
        try:
            delivery.close()
        finally:
            interrupt.restore()
    summary.interrupted = interrupt.stopped
    summary.seconds = time.perf_counter() - start
    return summary


def _tell(progress, event: str, *args) -> None:
    """Call ``progress``'s method ``event``, where it has one (a progress object may
    count deliveries alone)."""
    told = getattr(progress, event, None)
    if told is not None:
        told(*args)


def _up_to_failure(prepared: list[Prepared], fail_fast: bool) -> tuple[list[Prepared], bool]:
    """With fail_fast: the batch up to its first failed input, and whether one failed."""
    if fail_fast:
        for position, item in enumerate(prepared):
            if item.error is not None:
                return prepared[: position + 1], True
    return prepared, False


@contextmanager
def _pool(name: str, threads: int):
    """``threads`` worker threads. Leaving on an exception (Ctrl-C) drops the queued
    tasks and waits only for the running ones (one image each), not for a batch of them."""
    executor = ThreadPoolExecutor(threads, name)
    try:
        yield executor
    except BaseException:
        executor.shutdown(wait=True, cancel_futures=True)
        raise
    executor.shutdown(wait=True)


class _Interrupt:
    """Ctrl-C: stop now. The first press raises ``KeyboardInterrupt`` in the main thread
    wherever it is (waiting for a decode, in the engine, delivering), except inside
    :meth:`deferred`, which it leaves first.

    Outside the main thread (embedded use) SIGINT is left alone.
    """

    def __init__(self):
        self.presses = 0
        self._deferring = False
        self._pending = False
        try:
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        except ValueError:
            self._installed = False

    @property
    def stopped(self) -> bool:
        return self.presses > 0

    def _handle(self, signum, frame) -> None:
        self.presses += 1
        if self._deferring and self.presses == 1:
            self._pending = True
            return
        raise KeyboardInterrupt

    @contextmanager
    def deferred(self):
        """A block the first Ctrl-C does not cut in two: it is raised at its end."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt

    def restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
