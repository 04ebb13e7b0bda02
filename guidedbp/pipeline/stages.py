"""The explain pipeline's stages, as plain functions of a picklable :class:`Plan`.

    list inputs -> prepare (decode, fit, preprocess) -> explain (engine)
                -> outcome (render, write) -> manifest record

Every runner (the local streaming runner, the Ray runner) calls these same
functions (the last, writing, in :mod:`~guidedbp.pipeline.writing`; which earlier
records a resumed run carries over, in :mod:`~guidedbp.pipeline.resume`); only where and
when they run differs. A stage needs the plan and its
own inputs, never a runner's object: decoding needs the model's input shape and
preprocessing (in the plan), explaining needs an explainer, writing needs neither.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

import numpy as np

from guidedbp._text import one_line
from guidedbp.caveats import Caveat
from guidedbp.io import source, store
from guidedbp.io.images import ImageError, decode_image
from guidedbp.io.inputs import InputItem
from guidedbp.models.preprocess import prepare as fit_and_preprocess
from guidedbp.models.resizing import draft_side, resize_picture
from guidedbp.pipeline import detections
from guidedbp.pipeline.masks import MaskError, find_mask, read_mask, reference_input
from guidedbp.pipeline.naming import Naming
from guidedbp.pipeline.options import RunOptions
from guidedbp.pipeline.target_plan import PlannedTarget, TargetPlan


@dataclass(frozen=True)
class Feed:
    """What decoding needs to know of the model (picklable: no model inside).

    Attributes:
        input_shape: ``(H, W, C)``, ``None`` for free dimensions.
        channels: Image channels the model takes (1 or 3).
        preprocess: The preprocessing mode.
        labels: Class names, or ``None``.
    """

    input_shape: tuple
    channels: int
    preprocess: str
    labels: tuple[str, ...] | None = None

    @classmethod
    def of(cls, loaded) -> Feed:
        """The feed of a :class:`~guidedbp.models.loading.LoadedModel`."""
        labels = None if loaded.labels is None else tuple(loaded.labels)
        return cls(tuple(loaded.input_shape), loaded.channels, loaded.preprocess, labels)


@dataclass(frozen=True)
class Plan:
    """What every stage of one run reads.

    Attributes:
        output: OUT.
        options: The run's :class:`~guidedbp.pipeline.options.RunOptions`.
        feed: The model's :class:`Feed`.
        classes: The explicit classes, resolved to indices (empty: top-1 or top-k).
        num_classes: How many classes the model has (0: not known).
        owned: Files under OUT (relative paths) that an earlier run's manifest says
            guidedbp wrote; with the PNGs that carry guidedbp's mark, the only files
            a run may replace.
        guided: What the swapping rules guided, from the explainer's report: rule ->
            ``{"guide": scope, "guided_activations": {kind: count}}`` (empty when no
            method swaps gradients); every record carries it.
        layers: Each class activation map's layer, by method, from the explainer's report
            (``{"gradcam": "conv5_block3_out"}``, named as ``--layer`` takes it; empty
            without one): every record carries it, and the captions say it.
        targets: The run's :class:`~guidedbp.pipeline.target_plan.TargetPlan` when it names
            targets or a model output; ``None`` for a plain class run.
        conditional: OUT is on a store that honours conditional writes (``If-None-Match:
            *``, found out by the run's lock): outputs are written by conditional PUTs,
            and only an object already there is checked before it is replaced.
        made_by: What makes the run's maps (:mod:`~guidedbp.pipeline.fingerprint`), in
            every record; computed once, on the driver.
    """

    output: str
    options: RunOptions
    feed: Feed
    classes: tuple[int, ...] = ()
    num_classes: int = 0
    owned: frozenset = frozenset()
    guided: dict = field(default_factory=dict)
    layers: dict = field(default_factory=dict)
    targets: TargetPlan | None = None
    conditional: bool = False
    made_by: dict = field(default_factory=dict)

    @property
    def naming(self) -> Naming:
        options = self.options
        named = self.targets.named if self.targets is not None \
            else bool(self.classes or options.classes.top_k)
        return Naming(options.methods, options.render.renders, options.output.raw,
                      self.feed.labels, named, options.output.figure)


@dataclass
class Prepared:
    """One input after decoding: its pictures and model input, or why it failed."""

    item: InputItem
    original: np.ndarray | None = None  # decoded uint8 (H0, W0, C)
    fitted: np.ndarray | None = None  # uint8 at model resolution
    placement: object = None
    model_input: np.ndarray | None = None
    error: str | None = None
    carried: dict | None = None  # an earlier run's record, when resuming skips it
    mask: np.ndarray | None = None  # bool (H, W): the region mask at the model's input
    mask_file: str | None = None  # its path below the mask folder
    mask_sha256: str | None = None
    boxes: dict | None = None  # box: target spec -> its corners on the model's input
    found: int | None = None  # with detections=K: how many the model found (at most K)
    source: dict | None = None  # the input's fingerprint before it was read (io.source)


@dataclass(frozen=True)
class Explained:
    """One target's maps for one input, and what makes them less meaningful.

    ``target`` is the class (a unit's flat index, a region's class; -1 for a
    similarity); ``value`` the score differentiated; ``pixels`` a region's size at the
    output's resolution and ``region`` the region itself there (bool ``(H', W')``);
    ``planned`` the run's target (``None`` for a ranked class); ``detection`` a detection
    target's box on the model's input, then what it matched there (the proposal's
    corners, IoU and class score: float32 ``(10,)``).
    """

    target: int
    probability: float
    maps: dict  # method -> float32 map at model resolution
    caveats: tuple[Caveat, ...] = ()
    value: float = float("nan")
    pixels: int | None = None
    planned: PlannedTarget | None = None
    region: np.ndarray | None = None
    detection: np.ndarray | None = None


@dataclass
class Summary:
    """What a run did."""

    done: int = 0
    skipped: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)
    interrupted: bool = False
    seconds: float = 0.0  # the whole run, loading the model included
    loading: float = 0.0  # of which: loading the model and tracing the engine
    passed_over: int = 0
    hidden: int = 0  # images and folders in input folders skipped as hidden (".name")
    output: str = ""
    manifest: str = "manifest.jsonl"
    report: str | None = None  # the run's index.html, when one was written
    # Inputs with an earlier ok record recomputed, by reason (guidedbp.io.made_by.REASONS)
    recomputed: dict[str, int] = field(default_factory=dict)
    # Objects no output path can name (InputItem.skipped): (input, reason), recorded skipped
    unusable: list[tuple[str, str]] = field(default_factory=list)
    # With detections=K: inputs with fewer than K detections above the threshold, of which
    # with none at all; and (K, threshold)
    fewer_detections: int = 0
    no_detections: int = 0
    detections: tuple = ()

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if self.failures else 0

    def count(self, record: dict, skipped: bool = False) -> None:
        """Count one input's manifest record (``skipped``: carried over from an earlier
        run)."""
        if record["status"] == "error":
            self.failures.append((record["input"], record["error"]))
        elif record["status"] == "skipped":
            self.unusable.append((record["input"], record["error"]))
        elif skipped:
            self.skipped += 1
        else:
            self.done += 1
        found = record.get("detections")
        if record["status"] == "ok" and isinstance(found, dict):
            self.detections = (found.get("top"), found.get("threshold"))
            if found.get("found", 0) < found.get("top", 0):
                self.fewer_detections += 1
                self.no_detections += found.get("found") == 0


def batched(items: list, size: int) -> list[list]:
    """The engine's batches, in input order. Every runner forms the same ones: a map can
    differ in its last bits with the batch it was computed in, and outputs must not."""
    return [items[i : i + size] for i in range(0, len(items), size)]


# -- prepare -----------------------------------------------------------------------------


def is_npy(path: str) -> bool:
    if store.is_url(path):
        try:
            return store.read_range(path, 0, 6) == b"\x93NUMPY"
        except OSError:
            return False
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        with open(path, "rb") as handle:
            return handle.read(6) == b"\x93NUMPY"
    except OSError:
        return False


def prepare(plan: Plan, item: InputItem, carried: dict | None = None) -> Prepared:
    """Decode, fit and preprocess one input (or pass on its ``carried`` earlier record)."""
    prepared = Prepared(item, carried=carried)
    if carried is not None or item.skipped is not None:
        return prepared  # neither decoded nor computed
    inputs = plan.options.inputs
    # A box is in the pixels of the file: its image is decoded whole, never reduced.
    boxes = detections.has_boxes(plan)
    try:  # before the read: a file replaced meanwhile is recomputed next time
        prepared.source = source.fingerprint(item)
    except OSError:
        pass  # decoding says why it cannot be read
    try:
        # A JPEG far larger than anything drawn from it is decoded reduced.
        image = decode_image(item.path, channels=plan.feed.channels,
                             draft_side=None if boxes else draft_side(plan.feed.input_shape,
                                                                      inputs.size))
    except ImageError as error:
        prepared.error = error.reason
        return prepared
    try:
        prepared.fitted, prepared.placement, prepared.model_input = fit_and_preprocess(
            image, plan.feed.input_shape, plan.feed.preprocess, inputs.size, inputs.resize,
        )
        if plan.targets is not None and plan.targets.mask_dir is not None:
            path, prepared.mask_file = find_mask(plan.targets.mask_dir, item)
            prepared.mask, prepared.mask_sha256 = read_mask(
                path, prepared.mask_file, image.shape[:2], prepared.placement,
                draft_side(plan.feed.input_shape, inputs.size))
        if boxes:
            prepared.boxes = detections.input_boxes(plan.targets.targets, prepared.placement)
        shown = prepared.placement.shown_size  # maps are drawn at most this large
        if tuple(image.shape[:2]) != tuple(shown):
            image = resize_picture(image, shown)
    except (MaskError, detections.BoxOutside) as error:
        prepared.error, prepared.model_input = str(error), None  # not explained: failed
        return prepared
    except MemoryError:
        prepared.error = "out of memory while fitting the image to the model"
        return prepared
    prepared.original = image
    return prepared


# -- explain -----------------------------------------------------------------------------


def explain(plan: Plan, explainer, batch: list[Prepared]) -> dict[int, list[Explained]]:
    """Maps for each decoded item of a batch: position -> one :class:`Explained` per class.

    Images of one shape go through the engine together. An image the model cannot
    take (a free-size model given an image smaller than its kernels) fails alone:
    its ``error`` is set and the others are explained.
    """
    results: dict[int, list[Explained]] = {}
    groups: dict[tuple, list[int]] = {}
    for position, prepared in enumerate(batch):
        if prepared.model_input is not None:
            groups.setdefault(prepared.model_input.shape, []).append(position)
    for positions in groups.values():
        _explain_group(plan, explainer, batch, positions, results)
    return results


def _explain_group(plan, explainer, batch, positions, results) -> None:
    images = np.stack([batch[p].model_input for p in positions])
    try:
        explained = _targets(plan, explainer, images, [batch[p] for p in positions])
    # The engine raises TensorFlow's own error types for an input the model cannot
    # take; the pipeline stays free of TensorFlow names, so any error counts. It fails
    # that image, not the run.
    except Exception as error:
        if len(positions) > 1:  # find the image(s) to blame: retry one by one
            for position in positions:
                _explain_group(plan, explainer, batch, [position], results)
            return
        prepared = batch[positions[0]]
        height, width = prepared.model_input.shape[:2]
        prepared.error = (f"the model cannot take this image ({height}x{width} at its "
                          f"input): {engine_reason(error)}")
        return
    for position, targets in zip(positions, explained):
        results[position] = targets


def _targets(plan: Plan, explainer, images: np.ndarray, prepared: list[Prepared]
             ) -> list[list[Explained]]:
    """Per image, one :class:`Explained` per target: every method and every target from
    one engine call (one forward pass)."""
    wanted = plan.targets
    if wanted is not None and wanted.detections:
        return _detections(plan, explainer, images, prepared)
    planned: list = []
    if wanted is not None and wanted.targets:
        planned = list(wanted.targets)
        explanations = explainer.explain_targets(
            images, [_engine_target(plan, target, images, prepared) for target in planned])
    elif plan.classes:
        explanations = explainer.explain_classes(images, plan.classes)
    else:
        explanations = explainer.explain_top_k(
            images, wanted.top_k if wanted is not None else plan.options.classes.top_k or 1)
    planned += [None] * (len(explanations) - len(planned))
    return [[_explained(e, index, target, None if target is None or target.kind != "box"
                        else prepared[index].boxes[target.spec])
             for e, target in zip(explanations, planned)]
            for index in range(len(images))]


def _explained(explanation, index: int, target: PlannedTarget | None,
               box: np.ndarray | None = None) -> Explained:
    """Image ``index``'s :class:`Explained` of an engine ``explanation`` of ``target``;
    ``box`` a detection target's box on the model's input."""
    e = explanation
    detection = None
    if e.detections is not None:
        detection = np.concatenate([np.asarray(box, np.float32), e.detections[index]])
    return Explained(int(e.targets[index]), float(e.probabilities[index]),
                     {m: maps[index] for m, maps in e.by_method.items()}, e.caveats_of(index),
                     value=float(e.logits[index]),
                     pixels=None if e.region_pixels is None else int(e.region_pixels[index]),
                     planned=target,
                     region=None if e.region_masks is None else e.region_masks[index],
                     detection=detection)


def _detections(plan: Plan, explainer, images: np.ndarray, prepared: list[Prepared]
                ) -> list[list[Explained]]:
    """``detections=K``: each image's K best detections on the clean image (fewer where
    it has fewer, none for some), each explained as a box of its class. An image's
    detections are its own (their number, boxes and classes), so each image goes through
    the engine alone, its detections sharing one forward pass."""
    wanted = plan.targets
    found = explainer.detect(images, wanted.detections, wanted.threshold)
    results = []
    for index, (detected, item) in enumerate(zip(found, prepared)):
        if detected.caveat is not None:  # a NaN score: as a box target's, the input fails
            item.error = f"{detected.caveat.text}; no maps written"
            results.append([])
            continue
        item.found = len(detected)
        targets = detections.ranked(detected, item.placement, plan.feed.labels)
        if not targets:
            results.append([])
            continue
        explanations = explainer.explain_targets(
            images[index : index + 1],
            [detections.engine_ranked(detected, target.rank, wanted) for target in targets])
        results.append([_explained(e, 0, target, detected.boxes[target.rank - 1])
                        for e, target in zip(explanations, targets)])
    return results


def _engine_target(plan: Plan, target: PlannedTarget, images: np.ndarray,
                   prepared: list[Prepared]):
    """What the engine explains for ``target`` in a batch of ``images``: a class index,
    :class:`~guidedbp.targets.Unit`, :class:`~guidedbp.targets.Region` (with the batch's
    masks, from ``mask_dir``), :class:`~guidedbp.targets.Similarity` (the reference
    fitted as the inputs are) or :class:`~guidedbp.targets.Text` (the prompt)."""
    from guidedbp.targets import Region, Similarity, Text, Unit

    if target.kind == "class":
        return target.index
    if target.kind == "unit":
        return Unit(target.unit)
    if target.kind == "text":  # embedded by the explainer's text tower, once per prompt
        return Text(target.spec.partition(":")[2])
    if target.kind == "box":
        return detections.engine_box(target, np.stack([p.boxes[target.spec] for p in prepared]),
                                     plan.targets)
    if target.kind == "region":
        masks = None
        if plan.targets.mask_dir is not None:
            masks = np.stack([p.mask for p in prepared])
        return Region(target.index, mask=masks, name=target.spec.partition(":")[2])
    feed, inputs = plan.feed, plan.options.inputs
    size = inputs.size
    if size is None and None in tuple(feed.input_shape[:2]):  # free sides: the batch's size
        size = tuple(images.shape[1:3])
    reference = reference_input(target.reference_path, target.reference_sha256,
                                tuple(feed.input_shape), feed.preprocess, size, inputs.resize,
                                feed.channels)
    return Similarity(reference, name=os.path.basename(target.reference))


def engine_reason(error: BaseException) -> str:
    """The line that says what went wrong in a TensorFlow error, without its op trace."""
    skipped = ("File ", "Graph execution error", "Detected at node", "[[")
    lines = [line.strip() for line in str(error).splitlines()]
    useful = [line for line in lines if line and not line.startswith(skipped)]
    return one_line(useful[0], limit=200) if useful else type(error).__name__
