"""A detector's detections on clean images: what ``--detections top:K`` explains.

:func:`detector` says whether a model is a detector the
:class:`~guidedbp.engine.targets.box_target.Detection` target can read (its boxes and class scores
outputs, how many proposals and classes), tracing its proposals once;
:func:`detections` decodes each image's proposals
(:func:`guidedbp.engine.targets.proposals.proposals`, forward only, in a function traced once
per image shape) and keeps the best ones by per-class greedy non-maximum suppression
(:func:`suppress`), as detectors' own decoders do.

>>> boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [20, 20, 30, 30]], np.float32)
>>> probabilities = np.array([[0.9, 0.0], [0.8, 0.7], [0.1, 0.6]], np.float32)
>>> [(int(row), int(label)) for row, label in zip(*suppress(boxes, probabilities, 0.3, 5))]
[(0, 0), (1, 1), (2, 1)]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from guidedbp import _outputs, caveats
from guidedbp.caveats import Caveat
from guidedbp.engine.targets import proposals as _proposals

__all__ = ["DETECTION_OVERLAP", "MAX_CANDIDATES", "Detected", "DetectorInfo", "NotADetector",
           "degenerate", "detections", "detector", "suppress"]

#: A detection suppresses another of its class that it overlaps by more than this IoU.
DETECTION_OVERLAP = 0.5
#: The best candidates (proposal and class pairs above the threshold) suppression looks at
#: per image: detectors decode their top few thousand, and an untrained detector may put
#: every anchor above the threshold.
MAX_CANDIDATES = 10_000

NotADetector = _proposals.NotADetector


@dataclass(frozen=True)
class DetectorInfo:
    """How a Detection target reads a model (what ``guidedbp inspect`` shows).

    Attributes:
        kind: ``"retinanet"``, ``"d-fine"`` (keras-hub's, decoded) or ``"boxes"`` (a model
            with boxes and class scores outputs).
        boxes: The name of the output read as the boxes (a RetinaNet's box deltas).
        scores: The name of the output read as the class scores (or logits).
        proposals: Proposals per image at the size traced, ``None`` where it is free.
        classes: How many classes each proposal scores, ``None`` where it is free.
        degenerate: What makes the model no detector a target can read, though its
            outputs have a detector's shapes (one line), or ``None``: no proposal (on a
            blank image of the size traced), or every proposal's box inverted there
            (:func:`degenerate`).
    """

    kind: str
    boxes: str
    scores: str
    proposals: int | None
    classes: int | None
    degenerate: str | None = None


@dataclass(frozen=True)
class Detected:
    """One image's detections, the best first.

    Attributes:
        boxes: float32 ``(K, 4)``: corners ``(x0, y0, x1, y1)`` in input pixels.
        labels: int32 ``(K,)``: each one's class.
        scores: float32 ``(K,)``: its class score (probability).
        caveat: A :data:`~guidedbp.caveats.NON_FINITE_SCORE` caveat where a proposal's
            class score or box is NaN or infinite (its detections are then none: the
            model's output overflows on this image), else ``None``.
    """

    boxes: np.ndarray
    labels: np.ndarray
    scores: np.ndarray
    caveat: Caveat | None = None

    def __len__(self) -> int:
        return len(self.labels)


def proposals_function(model, image_shape: tuple, output=None, box_format: str = "xyxy",
                       boxes=None, scores=None):
    """A ``tf.function`` of float32 images ``(B, *image_shape)`` -> every proposal's
    corners ``(B, N, 4)`` and class probabilities ``(B, N, C)`` (no gradient)."""
    size = tuple(image_shape[:2])

    def forward(images):
        raw = model(images, training=False)
        selected = _outputs.select(model, raw, output)
        corners, probabilities, _ = _proposals.proposals(model, selected, size, box_format,
                                                          boxes, scores)
        return corners, probabilities

    # autograph=False: the body builds a graph in plain Python, as the engine's others do.
    return tf.function(forward, input_signature=[
        tf.TensorSpec((None, *image_shape), tf.float32, name="images")], autograph=False)


def detector(model, image_shape: tuple, output=None, box_format: str = "xyxy", boxes=None,
             scores=None) -> DetectorInfo:
    """What a Detection target reads of ``model`` on images of ``image_shape`` ``(H, W,
    C)`` (a free side traced at 64 pixels).

    Raises:
        NotADetector: A model whose outputs hold no boxes and class scores, in one line.
    """
    traced = tuple(64 if side is None else int(side) for side in image_shape[:2])
    shape = (*traced, image_shape[2])
    found: dict = {}

    def forward(images):
        raw = model(images, training=False)
        selected = _outputs.select(model, raw, output)
        corners, probabilities, read = _proposals.proposals(
            model, selected, traced, box_format, boxes, scores)
        found["names"] = _read_names(model, selected, read, _proposals.kind_of(model))
        return corners, probabilities

    concrete = tf.function(forward, autograph=False).get_concrete_function(
        tf.TensorSpec((None, *shape), tf.float32))
    corners, probabilities = concrete.structured_outputs
    free = None in tuple(image_shape[:2])
    proposals = corners.shape[1]
    blank = concrete(tf.zeros((1, *shape), tf.float32))[0].numpy()[0]
    return DetectorInfo(_proposals.kind_of(model), *found["names"],
                        None if free or proposals is None else int(proposals),
                        None if probabilities.shape[-1] is None
                        else int(probabilities.shape[-1]),
                        degenerate(blank, found["names"][0], traced))


def degenerate(boxes: np.ndarray, name: str, size: tuple) -> str | None:
    """What is wrong with a detector whose proposals on a blank ``size`` image are
    ``boxes`` ``(N, 4)`` (corners, as a Detection target reads its ``name`` output), or
    ``None``: no proposal at all, or every one inverted (its ``x1`` below ``x0`` or
    ``y1`` below ``y0``: not corners ``x0, y0, x1, y1``), so no box can match one.

    >>> degenerate(np.zeros((0, 4)), "boxes", (64, 64))
    "its boxes output 'boxes' holds no proposal (0 per image at 64x64)"
    >>> degenerate(np.array([[8.0, 8, 0, 0], [9, 9, 1, 1]]), "boxes", (64, 64))
    "every proposal of its boxes output 'boxes' is inverted on a blank 64x64 image (the \
first: 8, 8, 0, 0; x1 below x0 or y1 below y0): its boxes are not corners x0, y0, x1, y1 \
in input pixels"
    """
    where = f"{size[0]}x{size[1]}"
    if len(boxes) == 0:
        return f"its boxes output {name!r} holds no proposal (0 per image at {where})"
    inverted = (boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1])
    if inverted.all():
        first = ", ".join(f"{value:g}" for value in boxes[0])
        return (f"every proposal of its boxes output {name!r} is inverted on a blank "
                f"{where} image (the first: {first}; x1 below x0 or y1 below y0): its boxes "
                "are not corners x0, y0, x1, y1 in input pixels")
    return None


def _read_names(model, raw, read: list, kind: str) -> tuple[str, str]:
    if kind == "retinanet":
        return "bbox_regression", "cls_logits"
    if kind == "d-fine":
        return "pred_boxes", "logits"
    names = _outputs.output_names(model, raw)
    tensors = _outputs.tensors_of(model, raw)
    boxes = next((name for name, tensor in zip(names, tensors) if tensor is read[0]), names[0])
    # read[1] may be the logits behind the scores' head: the output whose head it is
    scores = next((name for name, tensor in zip(names, tensors)
                   if tensor is read[1] or _outputs.behind_head(tensor)[0] is read[1]),
                  names[-1])
    return boxes, scores


def detections(function, images: np.ndarray, top: int, threshold: float,
               batch_size: int) -> list[Detected]:
    """Each image's ``top`` best detections above ``threshold`` (fewer where it has fewer),
    from :func:`proposals_function`'s ``function``, ``batch_size`` images a pass."""
    found = []
    for start in range(0, len(images), batch_size):
        corners, probabilities = function(images[start : start + batch_size])
        for boxes, scores in zip(corners.numpy(), probabilities.numpy()):
            caveat = _non_finite(boxes, scores)
            if caveat is not None:  # no detection can be told: none, and why
                found.append(Detected(np.zeros((0, 4), np.float32), np.zeros(0, np.int32),
                                      np.zeros(0, np.float32), caveat))
                continue
            rows, labels = suppress(boxes, scores, threshold, top)
            found.append(Detected(boxes[rows].astype(np.float32), labels.astype(np.int32),
                                  scores[rows, labels].astype(np.float32)))
    return found


def _non_finite(boxes: np.ndarray, scores: np.ndarray) -> Caveat | None:
    """A :data:`~guidedbp.caveats.NON_FINITE_SCORE` caveat naming the first proposal whose
    class score (``scores`` ``(N, C)``) or box (``boxes`` ``(N, 4)``) is NaN or infinite,
    or ``None``: as a box target's score of such a proposal would be."""
    bad = ~np.isfinite(scores).all(axis=1) | ~np.isfinite(boxes).all(axis=1)
    if not bad.any():
        return None
    row = int(np.argmax(bad))
    if not np.isfinite(scores[row]).all():
        value = scores[row][~np.isfinite(scores[row])][0]
        return caveats.non_finite_score(f"proposal {row}'s class score", value)
    value = boxes[row][~np.isfinite(boxes[row])][0]
    return caveats.non_finite_score(f"proposal {row}'s box", value)


def suppress(boxes: np.ndarray, probabilities: np.ndarray, threshold: float, top: int,
             overlap: float = DETECTION_OVERLAP) -> tuple[np.ndarray, np.ndarray]:
    """Per-class greedy non-maximum suppression of one image's proposals.

    Every (proposal, class) pair whose probability is at least ``threshold`` is a
    candidate, where the proposal's box has an area (an inverted box is no detection);
    from the best down (ties: the lower proposal, then the lower class), a candidate is
    kept unless a kept one of its class overlaps it by more than ``overlap`` (IoU), until
    ``top`` are kept. Only the best :data:`MAX_CANDIDATES` are looked at.

    Args:
        boxes: ``(N, 4)`` corners ``(x0, y0, x1, y1)``.
        probabilities: ``(N, C)``.

    Returns:
        ``(rows, labels)``: the kept proposals' rows and classes, int64 ``(K,)``, best first.
    """
    boxes = np.asarray(boxes, np.float64)
    area = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    rows, labels = np.nonzero((np.asarray(probabilities) >= threshold) & area[:, None])
    scores = np.asarray(probabilities)[rows, labels]
    order = np.lexsort((labels, rows, -scores))[:MAX_CANDIDATES]
    kept: list[int] = []
    for candidate in order:
        same = [k for k in kept if labels[k] == labels[candidate]]
        if same and (_iou(boxes[rows[candidate]], boxes[rows[same]]) > overlap).any():
            continue
        kept.append(candidate)
        if len(kept) == top:
            break
    kept_array = np.array(kept, np.int64)
    return rows[kept_array].astype(np.int64), labels[kept_array].astype(np.int64)


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """The IoU of ``box`` ``(4,)`` with each of ``others`` ``(M, 4)`` (0 without area)."""
    width = np.clip(np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]), 0, None)
    height = np.clip(np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]), 0,
                     None)
    inter = width * height
    area = max(box[2] - box[0], 0) * max(box[3] - box[1], 0)
    areas = np.clip(others[:, 2] - others[:, 0], 0, None) * np.clip(
        others[:, 3] - others[:, 1], 0, None)
    union = area + areas - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
