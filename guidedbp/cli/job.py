"""The explain job: stream images through decode -> engine -> render -> write.

Decoding runs one batch ahead and rendering/writing one batch behind the engine,
in threads (TensorFlow, Pillow and zlib release the GIL), so the model is rarely
idle. At most three batches are in memory at once, whatever the number of images.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from guidedbp.io.images import ImageError, decode_image
from guidedbp.io.inputs import InputItem
from guidedbp.io.manifest import ManifestWriter
from guidedbp.io.write import save_npy, save_png
from guidedbp.models.preprocess import fit, preprocess
from guidedbp.render import render


@dataclass(frozen=True)
class Settings:
    """What an explain run writes, from the command's options."""

    output: str
    method: str = "guided"
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


def class_slug(index: int, labels: list[str] | None) -> str:
    """``281-tabby`` (or ``281`` without labels): the class part of an output name."""
    if labels is None or index >= len(labels):
        return str(index)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", labels[index]).strip("-").lower()
    return f"{index}-{slug}" if slug else str(index)


class ExplainJob:
    """Explains a list of inputs into ``settings.output`` with a manifest."""

    def __init__(self, loaded, explainer, settings: Settings, progress=None):
        self.loaded = loaded
        self.explainer = explainer
        self.settings = settings
        self.progress = progress
        self._stop = False

    # -- names -------------------------------------------------------------------------

    def _names(self, item: InputItem, class_part: str | None) -> tuple[dict, str | None]:
        """Output paths (relative to OUT) for one input and class."""
        stem = item.output_stem + (f".{class_part}" if class_part else "")
        method = self.settings.method
        outputs = {name: f"{stem}.{method}.{name}.png" for name in self.settings.renders}
        raw = f"{stem}.{method}.npy" if self.settings.raw else None
        return outputs, raw

    def _existing(self, item: InputItem) -> dict | None:
        """The outputs of an input that are all on disk already, or None."""
        out = self.settings.output
        if self.settings.top_k:
            return None  # names depend on the predicted classes
        parts = [class_slug(c, self.loaded.labels) for c in self.settings.classes] or [None]
        found = {}
        for part in parts:
            outputs, raw = self._names(item, part)
            paths = list(outputs.values()) + ([raw] if raw else [])
            if not all(os.path.isfile(os.path.join(out, p)) for p in paths):
                return None
            found.update(outputs)
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
        height, width, _ = self.loaded.input_shape
        if height is None or width is None:
            size = self.settings.size or image.shape[:2]
        else:
            size = (height, width)
        fitted, placement = fit(image, size, self.settings.resize)
        prepared.original, prepared.fitted, prepared.placement = image, fitted, placement
        prepared.model_input = preprocess(fitted, self.loaded.preprocess)
        return prepared

    def _explain(self, batch: list[_Prepared]) -> dict[int, list[tuple]]:
        """Maps for each good item: position -> [(class, probability, map), ...]."""
        results: dict[int, list[tuple]] = {}
        groups: dict[tuple, list[int]] = {}
        for position, prepared in enumerate(batch):
            if prepared.model_input is not None:
                groups.setdefault(prepared.model_input.shape, []).append(position)
        for positions in groups.values():
            images = np.stack([batch[p].model_input for p in positions])
            for position, explained in zip(positions, self._targets(images)):
                results[position] = explained
        return results

    def _targets(self, images: np.ndarray) -> list[list[tuple]]:
        per_image: list[list[tuple]] = [[] for _ in images]

        def add(explanation):
            for index, row in enumerate(per_image):
                row.append((int(explanation.targets[index]),
                            float(explanation.probabilities[index]), explanation.maps[index]))

        if self.settings.classes:
            for target in self.settings.classes:
                add(self.explainer.explain(images, target))
        else:
            first = self.explainer.explain(images)
            add(first)
            if self.settings.top_k and self.settings.top_k > 1:
                ranked = np.argsort(-first.class_probabilities, axis=1, kind="stable")
                for rank in range(1, min(self.settings.top_k, ranked.shape[1])):
                    add(self.explainer.explain(images, ranked[:, rank]))
        return per_image

    def _write(self, prepared: _Prepared, explained: list[tuple]) -> dict:
        settings, labels = self.settings, self.loaded.labels
        targets = []
        for target, probability, saliency in explained:
            named = bool(settings.classes or settings.top_k)
            outputs, raw = self._names(prepared.item, class_slug(target, labels) if named else None)
            if settings.output_size == "original":
                shown = prepared.placement.to_original(saliency)
                picture = prepared.original
            else:
                shown, picture = saliency, prepared.fitted
            label = labels[target] if labels is not None and target < len(labels) else None
            named_class = f"{label} (class {target})" if label else f"class {target}"
            caption = f"{named_class} p={probability:.3f} {settings.method}"
            for name, relative in outputs.items():
                array = render(name, shown, picture, cmap=settings.cmap, clip=settings.clip,
                               alpha=settings.alpha, caption=caption)
                save_png(os.path.join(settings.output, relative), array)
            if raw:
                save_npy(os.path.join(settings.output, raw), saliency.astype(np.float32))
            targets.append({"class": target, "label": label, "score": round(probability, 6),
                            "outputs": outputs, "raw": raw})
        return self._record(prepared.item, "ok", None, targets)

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
        batches = [items[i : i + size] for i in range(0, len(items), size)]
        previous_handler = _install_interrupt(self)
        manifest = ManifestWriter(os.path.join(self.settings.output, "manifest.jsonl"))
        try:
            with ThreadPoolExecutor(2, "guidedbp-decode") as decoders, \
                    ThreadPoolExecutor(2, "guidedbp-write") as writers:
                pending: list[tuple[list[_Prepared], Future]] = []
                upcoming = self._submit_decode(decoders, batches, 0)
                halt = False
                for index in range(len(batches)):
                    prepared = [f.result() for f in upcoming]
                    halt = self.settings.fail_fast and any(p.error for p in prepared)
                    upcoming = self._submit_decode(decoders, batches, index + 1)
                    explained = self._explain(prepared)
                    pending.append((prepared, [
                        writers.submit(self._write, p, explained[i]) if i in explained else None
                        for i, p in enumerate(prepared)
                    ]))
                    if len(pending) > 1:  # keep one batch of writes in flight
                        self._finish(pending.pop(0), manifest, summary)
                    if self._stop or halt:
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

    def _submit_decode(self, pool, batches, index) -> list[Future]:
        if index >= len(batches) or self._stop:
            return []
        return [pool.submit(self._prepare, item) for item in batches[index]]

    def _finish(self, batch, manifest: ManifestWriter, summary: Summary) -> None:
        prepared_list, futures = batch
        for prepared, future in zip(prepared_list, futures):
            item = prepared.item
            if prepared.error is not None:
                record = self._record(item, "error", prepared.error, [])
            elif future is None:  # skipped: outputs already there
                existing = self._existing(item) or {}
                record = self._record(item, "skipped", None, [])
                record["outputs"] = existing
            else:
                try:
                    record = future.result()
                except (OSError, ValueError) as error:
                    record = self._record(item, "error", _one_line(error), [])
            if record["status"] == "error":
                summary.failures.append((item.path, record["error"]))
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


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
