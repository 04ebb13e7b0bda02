"""The explain job: stream images through decode -> engine -> render -> write.

Decoding runs one batch ahead and rendering/writing one batch behind the engine,
in threads (TensorFlow, Pillow and zlib release the GIL), so the model is rarely
idle. At most three batches are in memory at once, whatever the number of images.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from guidedbp._text import one_line
from guidedbp.cli.outputs import class_slug, comparison_panel, label_of, raw_items, raw_paths
from guidedbp.io.images import ImageError, decode_image
from guidedbp.io.inputs import InputItem
from guidedbp.io.manifest import ManifestWriter
from guidedbp.io.write import save_npy, save_png
from guidedbp.models.preprocess import prepare
from guidedbp.render import render


@dataclass(frozen=True)
class Settings:
    """What an explain run writes, from the command's options."""

    output: str
    methods: tuple[str, ...] = ("guided",)
    renders: tuple[str, ...] = ("color", "overlay")
    classes: tuple[int, ...] = ()  # explicit classes; empty = top-1 or top-k
    top_k: int | None = None
    output_size: str = "original"
    raw: bool = False
    cmap: str = "inferno"
    clip: float = 99.0
    alpha: float = 0.5
    batch_size: int = 16
    size: tuple[int, int] | None = None
    resize: str = "stretch"
    skip_existing: bool = False
    fail_fast: bool = False
    manifest: str = "manifest.jsonl"  # file name under output; shards name theirs

    @property
    def method(self) -> str:
        """The methods as the manifest names them: ``guided`` or ``guided,gradcam``."""
        return ",".join(self.methods)


@dataclass
class Summary:
    done: int = 0
    skipped: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)
    interrupted: bool = False
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if self.failures else 0


@dataclass
class _Prepared:
    item: InputItem
    original: np.ndarray | None = None  # decoded uint8 (H0, W0, C)
    fitted: np.ndarray | None = None  # uint8 at model resolution
    placement: object = None
    model_input: np.ndarray | None = None
    error: str | None = None


def batched(items: list[InputItem], size: int) -> list[list[InputItem]]:
    """The engine's batches, in input order. Every engine forms the same ones: a map can
    differ in its last bits with the batch it was computed in, and outputs must not."""
    return [items[i : i + size] for i in range(0, len(items), size)]


class ExplainJob:
    """Explains a list of inputs into ``settings.output`` with a manifest."""

    def __init__(self, loaded, explainers, settings: Settings, progress=None):
        """``explainers``: one Explainer, or a dict method -> Explainer in settings.methods order."""
        self.loaded = loaded
        if not isinstance(explainers, dict):
            explainers = {settings.methods[0]: explainers}
        self.explainers = explainers
        self.settings = settings
        self.progress = progress
        self._stop = False  # Ctrl-C: finish the current batch, then stop
        self._halt = False  # --fail-fast saw a failure

    # -- names -------------------------------------------------------------------------

    def _names(self, item: InputItem, class_part: str | None) -> tuple[dict, str | dict | None]:
        """Output paths (relative to OUT) for one input and class.

        One method: ``render -> STEM.METHOD.RENDER.png`` and raw ``STEM.METHOD.npy``.
        Several: ``METHOD.RENDER -> STEM.METHOD.RENDER.png`` for each, one
        comparison ``panel -> STEM.panel.png``, and raw as ``method -> path``.
        """
        stem = item.output_stem + (f".{class_part}" if class_part else "")
        methods, renders = self.settings.methods, self.settings.renders
        if len(methods) == 1:
            outputs = {name: f"{stem}.{methods[0]}.{name}.png" for name in renders}
            raw = f"{stem}.{methods[0]}.npy" if self.settings.raw else None
            return outputs, raw
        outputs = {f"{method}.{name}": f"{stem}.{method}.{name}.png"
                   for method in methods for name in renders if name != "panel"}
        if "panel" in renders:
            outputs["panel"] = f"{stem}.panel.png"
        raw = {m: f"{stem}.{m}.npy" for m in methods} if self.settings.raw else None
        return outputs, raw

    def _existing(self, item: InputItem) -> list[dict] | None:
        """The targets of an input whose outputs are all on disk already, or None."""
        out, labels = self.settings.output, self.loaded.labels
        if self.settings.top_k:
            return None  # names depend on the predicted classes
        found = []
        for target in self.settings.classes or [None]:
            outputs, raw = self._names(item, None if target is None else class_slug(target, labels))
            paths = list(outputs.values()) + raw_paths(raw)
            if not all(os.path.isfile(os.path.join(out, p)) for p in paths):
                return None
            label = None if target is None else label_of(target, labels)
            found.append({"class": target, "label": label, "score": None,
                          "outputs": outputs, "raw": raw})
        return found

    # -- stages ------------------------------------------------------------------------

    def _prepare(self, item: InputItem) -> _Prepared:
        prepared = _Prepared(item)
        if self.settings.skip_existing and self._existing(item) is not None:
            return prepared  # neither decoded nor computed
        try:
            image = decode_image(item.path, channels=self.loaded.channels)
        except ImageError as error:
            prepared.error = error.reason
            return prepared
        prepared.original = image
        prepared.fitted, prepared.placement, prepared.model_input = prepare(
            image, self.loaded.input_shape, self.loaded.preprocess, self.settings.size,
            self.settings.resize,
        )
        return prepared

    def _explain(self, batch: list[_Prepared]) -> dict[int, list[tuple]]:
        """Maps for each good item: position -> [(class, probability, map), ...]."""
        results: dict[int, list[tuple]] = {}
        groups: dict[tuple, list[int]] = {}
        for position, prepared in enumerate(batch):
            if prepared.model_input is not None:
                groups.setdefault(prepared.model_input.shape, []).append(position)
        for positions in groups.values():
            self._explain_group(batch, positions, results)
        return results

    def _explain_group(self, batch: list[_Prepared], positions: list[int], results: dict) -> None:
        images = np.stack([batch[p].model_input for p in positions])
        try:
            explained = self._targets(images)
        # The engine raises TensorFlow's own error types for an input the model cannot
        # take (a free-size model given an image smaller than its kernels); cli stays
        # free of TensorFlow names, so any error counts. It fails that image, not the run.
        except Exception as error:
            if len(positions) > 1:  # find the image(s) to blame: retry one by one
                for position in positions:
                    self._explain_group(batch, [position], results)
                return
            prepared = batch[positions[0]]
            height, width = prepared.model_input.shape[:2]
            prepared.error = (f"the model cannot take this image ({height}x{width} at its "
                              f"input): {_engine_reason(error)}")
            return
        for position, targets in zip(positions, explained):
            results[position] = targets

    def _targets(self, images: np.ndarray) -> list[list[tuple]]:
        """Per image: [(class, probability, {method: map}), ...], one entry per class."""
        per_image: list[list[tuple]] = [[] for _ in images]

        def add(target):
            explanations = {m: e.explain(images, target) for m, e in self.explainers.items()}
            first = next(iter(explanations.values()))
            for index, row in enumerate(per_image):
                row.append((int(first.targets[index]), float(first.probabilities[index]),
                            {m: e.maps[index] for m, e in explanations.items()}))
            return first

        if self.settings.classes:
            for target in self.settings.classes:
                add(target)
        else:
            first = add(None)
            if self.settings.top_k and self.settings.top_k > 1:
                ranked = np.argsort(-first.class_probabilities, axis=1, kind="stable")
                # The top-1 map is already made; the others follow it in probability
                # order, never repeating it when two probabilities tie.
                others = np.stack([row[row != top] for row, top in zip(ranked, first.targets)])
                for rank in range(min(self.settings.top_k, ranked.shape[1]) - 1):
                    add(others[:, rank])
        return per_image

    def _write(self, prepared: _Prepared, explained: list[tuple]) -> dict:
        settings, labels = self.settings, self.loaded.labels
        targets = []
        for target, probability, maps in explained:
            named = bool(settings.classes or settings.top_k)
            outputs, raw = self._names(prepared.item, class_slug(target, labels) if named else None)
            if settings.output_size == "original":
                shown = {m: prepared.placement.to_original(v) for m, v in maps.items()}
                picture = prepared.original
            else:
                shown, picture = maps, prepared.fitted
            label = label_of(target, labels)
            named_class = f"{label} (class {target})" if label else f"class {target}"
            caption = f"{named_class} p={probability:.3f}"
            if len(settings.methods) == 1:  # a comparison panel captions its columns instead
                caption += f" {settings.methods[0]}"
            style = {"cmap": settings.cmap, "clip": settings.clip, "alpha": settings.alpha}
            for key, relative in outputs.items():
                if key == "panel" and len(maps) > 1:
                    array = comparison_panel(shown, picture, caption, style)
                else:
                    method, _, name = key.rpartition(".")
                    method = method or settings.methods[0]
                    array = render(name, shown[method], picture, caption=caption, **style)
                save_png(os.path.join(settings.output, relative), array)
            for method, relative in raw_items(raw, settings.methods):
                save_npy(os.path.join(settings.output, relative), maps[method].astype(np.float32))
            targets.append({"class": target, "label": label, "score": round(probability, 6),
                            "outputs": outputs, "raw": raw})
        return self._record(prepared.item, "ok", None, targets)

    def outcome(self, prepared: _Prepared, explained: list[tuple] | None) -> dict:
        """The manifest record of one input, after writing its outputs.

        ``explained`` is the input's entry of :meth:`_explain`, ``None`` when it has
        none: it failed (``prepared.error``) or was skipped (outputs already there).
        A failed write (disk full, permissions) fails that input, not the run.
        """
        item = prepared.item
        if prepared.error is not None:
            return self._record(item, "error", prepared.error, [])
        if explained is None:
            return self._record(item, "skipped", None, self._existing(item) or [])
        try:
            return self._write(prepared, explained)
        except (OSError, ValueError) as error:
            return self._record(item, "error", one_line(error), [])

    def prepare_batch(self, items: list[InputItem]) -> list[_Prepared]:
        """Decode, fit and preprocess a batch (needs the model's shape, not the model)."""
        return [self._prepare(item) for item in items]

    def explain_batch(self, prepared: list[_Prepared]) -> list[dict]:
        """Engine, render and write for one prepared batch: its manifest records, in order.

        The whole pipeline after decoding, in the calling thread: what a Ray worker runs.
        """
        explained = self._explain(prepared)
        return [self.outcome(p, explained.get(i)) for i, p in enumerate(prepared)]

    def _record(self, item: InputItem, status: str, error, targets: list[dict]) -> dict:
        first = targets[0] if targets else {}
        return {
            "input": item.path,
            "status": status,
            "error": error,
            "class": first.get("class"),
            "label": first.get("label"),
            "score": first.get("score"),
            "method": self.settings.method,
            "outputs": first.get("outputs", {}),
            "raw": first.get("raw"),
            "targets": targets,
        }

    # -- the run -----------------------------------------------------------------------

    def run(self, items: list[InputItem]) -> Summary:
        summary = Summary()
        start = time.perf_counter()
        size = self.settings.batch_size
        batches = batched(items, size)
        previous_handler = _install_interrupt(self)
        manifest = ManifestWriter(os.path.join(self.settings.output, self.settings.manifest))
        try:
            with ThreadPoolExecutor(2, "guidedbp-decode") as decoders, \
                    ThreadPoolExecutor(2, "guidedbp-write") as writers:
                pending: list[tuple[list[_Prepared], Future]] = []
                upcoming = self._submit_decode(decoders, batches, 0)
                for index in range(len(batches)):
                    prepared, halt = self._up_to_failure([f.result() for f in upcoming])
                    upcoming = [] if halt else self._submit_decode(decoders, batches, index + 1)
                    explained = self._explain(prepared)
                    prepared, failed = self._up_to_failure(prepared)  # the engine's failures
                    pending.append((prepared, [
                        writers.submit(self.outcome, p, explained.get(i))
                        for i, p in enumerate(prepared)
                    ]))
                    if len(pending) > 1:  # keep one batch of writes in flight
                        self._finish(pending.pop(0), manifest, summary)
                    if self._stop or halt or failed or self._halt:
                        break
                for batch in pending:
                    self._finish(batch, manifest, summary)
                for future in upcoming:
                    future.cancel()
        finally:
            manifest.close()
            _restore_interrupt(previous_handler)
        summary.interrupted = self._stop
        summary.seconds = time.perf_counter() - start
        return summary

    def _up_to_failure(self, prepared: list[_Prepared]) -> tuple[list[_Prepared], bool]:
        """With --fail-fast: the batch up to its first failed input, and whether one failed."""
        if self.settings.fail_fast:
            for position, item in enumerate(prepared):
                if item.error is not None:
                    return prepared[: position + 1], True
        return prepared, False

    def _submit_decode(self, pool, batches, index) -> list[Future]:
        if index >= len(batches) or self._stop:
            return []
        return [pool.submit(self._prepare, item) for item in batches[index]]

    def _finish(self, batch, manifest: ManifestWriter, summary: Summary) -> None:
        _, futures = batch
        for future in futures:
            self.deliver(future.result(), manifest, summary)

    def deliver(self, record: dict, manifest: ManifestWriter, summary: Summary) -> None:
        """Count one input's record, append it to the manifest and advance the progress bar."""
        if record["status"] == "error":
            summary.failures.append((record["input"], record["error"]))
            # A write failure shows only here: with --fail-fast, stop after this batch.
            self._halt = self._halt or self.settings.fail_fast
        elif record["status"] == "skipped":
            summary.skipped += 1
        else:
            summary.done += 1
        manifest.write(record)
        if self.progress is not None:
            self.progress.advance()


def _install_interrupt(job: ExplainJob):
    """First Ctrl-C: finish the current batch and stop. Second: stop at once."""

    def handler(signum, frame):
        if job._stop:
            raise KeyboardInterrupt
        job._stop = True
        print("\ninterrupted: finishing the current batch (Ctrl-C again to abort)",
              file=sys.stderr, flush=True)

    try:
        return signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread (e.g. embedded use): leave SIGINT alone
        return signal.getsignal(signal.SIGINT)


def _restore_interrupt(handler) -> None:
    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:
        pass


def _engine_reason(error: BaseException) -> str:
    """The line that says what went wrong in a TensorFlow error, without its op trace."""
    skipped = ("File ", "Graph execution error", "Detected at node", "[[")
    lines = [line.strip() for line in str(error).splitlines()]
    useful = [line for line in lines if line and not line.startswith(skipped)]
    return one_line(useful[0], limit=200) if useful else type(error).__name__
