"""Boxes of the shapes, and what a detector's proposals find of them; numpy only.

The bundled detector (``demo-det``, :mod:`guidedbp.demo.train_det`) outputs, for each
image, ``N`` proposals: ``"boxes"`` ``(B, N, 4)`` as ``(x0, y0, x1, y1)`` in input pixels
and ``"scores"`` ``(B, N, C)``, one sigmoid probability per class of
:data:`~guidedbp.demo.shapes.CLASS_NAMES`. Here are the generator's true boxes
(:func:`scene_boxes`: the tight box of each object's mask), the overlap of boxes
(:func:`pairwise_iou`), the decoding of proposals into detections by per-class greedy
non-maximum suppression (:func:`detections`) and the held-out figure the detector is
trained to (:func:`detection_recall`).

Boxes are half-open in pixels: a mask whose pixels span columns ``3..7`` and rows
``2..4`` has the box ``(3, 2, 8, 5)``, 5 wide and 3 high.

>>> mask = np.zeros((1, 6, 10), bool); mask[0, 2:5, 3:8] = True
>>> mask_boxes(mask).tolist()
[[3.0, 2.0, 8.0, 5.0]]
>>> float(pairwise_iou(np.array([[0, 0, 4, 4]]), np.array([[2, 0, 6, 4]]))[0, 0])
0.3333333333333333
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: Objects per scene in :func:`scene_boxes`: the target, then the distractor.
OBJECTS_PER_SCENE = 2


class Detected(NamedTuple):
    """One detection kept by :func:`detections`.

    Attributes:
        box: ``(x0, y0, x1, y1)`` in input pixels.
        label: The class index.
        score: Its probability for that class.
    """

    box: tuple[float, float, float, float]
    label: int
    score: float


def mask_boxes(masks: np.ndarray) -> np.ndarray:
    """Float32 ``(N, 4)``: the tight half-open box ``(x0, y0, x1, y1)`` of each mask.

    Args:
        masks: Bool ``(N, H, W)``.

    Returns:
        Each mask's box; all zeros for an empty mask.

    Raises:
        ValueError: For masks that are not ``(N, H, W)``.
    """
    masks = np.asarray(masks, bool)
    if masks.ndim != 3:
        raise ValueError(f"masks must have shape (N, H, W), got {masks.shape}")
    boxes = np.zeros((len(masks), 4), np.float32)
    rows, cols = masks.any(axis=2), masks.any(axis=1)  # (N, H), (N, W)
    filled = rows.any(axis=1)
    height, width = masks.shape[1:]
    boxes[:, 0] = cols.argmax(axis=1)
    boxes[:, 1] = rows.argmax(axis=1)
    boxes[:, 2] = width - cols[:, ::-1].argmax(axis=1)
    boxes[:, 3] = height - rows[:, ::-1].argmax(axis=1)
    boxes[~filled] = 0.0
    return boxes


def scene_boxes(scenes) -> tuple[np.ndarray, np.ndarray]:
    """The true boxes and classes of :class:`~guidedbp.demo.shapes.Scenes`.

    Args:
        scenes: Scenes from :func:`~guidedbp.demo.shapes.make_scenes`.

    Returns:
        ``(boxes, labels)``: float32 ``(N, 2, 4)`` and int64 ``(N, 2)``, the target's box
        and class first, the distractor's second; a scene without a distractor has
        label -1 and an all-zero box there.
    """
    boxes = np.stack([mask_boxes(scenes.masks), mask_boxes(scenes.distractor_masks)], axis=1)
    labels = np.stack([scenes.labels, scenes.distractor_labels], axis=1).astype(np.int64)
    boxes[labels < 0] = 0.0
    return boxes, labels


def pairwise_iou(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Float64 ``(M, K)`` intersection over union of boxes ``(M, 4)`` and ``(K, 4)``
    (0 where the union is empty)."""
    first = np.asarray(first, np.float64).reshape(-1, 4)
    second = np.asarray(second, np.float64).reshape(-1, 4)
    low = np.maximum(first[:, None, :2], second[None, :, :2])
    high = np.minimum(first[:, None, 2:], second[None, :, 2:])
    inter = np.prod(np.clip(high - low, 0.0, None), axis=-1)
    area_first = np.prod(np.clip(first[:, 2:] - first[:, :2], 0.0, None), axis=-1)
    area_second = np.prod(np.clip(second[:, 2:] - second[:, :2], 0.0, None), axis=-1)
    union = area_first[:, None] + area_second[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def _check_proposals(boxes, scores) -> tuple[np.ndarray, np.ndarray]:
    boxes, scores = np.asarray(boxes, np.float64), np.asarray(scores, np.float64)
    if boxes.ndim != 3 or boxes.shape[-1] != 4:
        raise ValueError(f"boxes must have shape (B, N, 4), got {boxes.shape}")
    if scores.ndim != 3 or scores.shape[:2] != boxes.shape[:2]:
        raise ValueError(f"scores must have shape (B, N, C) with the boxes' (B, N) = "
                         f"{boxes.shape[:2]}, got {scores.shape}")
    return boxes, scores


def detections(
    boxes: np.ndarray,
    scores: np.ndarray,
    threshold: float = 0.3,
    iou: float = 0.5,
    top: int | None = None,
) -> list[list[Detected]]:
    """Per-class greedy non-maximum suppression of a detector's proposals.

    For each image and class, the proposals scoring at least ``threshold`` for the class
    are taken from the highest score down (the lower index first on a tie); each is
    kept unless its IoU with a box already kept for that class exceeds ``iou``.

    Args:
        boxes: ``(B, N, 4)`` proposal boxes ``(x0, y0, x1, y1)``.
        scores: ``(B, N, C)`` per-class probabilities.
        threshold: The least score kept, in [0, 1].
        iou: The overlap above which a lower-scoring box of the same class is dropped,
            in (0, 1].
        top: Keep at most this many detections per image (the highest scores), or all.

    Returns:
        Per image, its :class:`Detected` items from the highest score down (then by
        class, then by proposal index).

    Raises:
        ValueError: For shapes that do not fit or values out of range.

    >>> boxes = np.array([[[0, 0, 10, 10], [1, 0, 11, 10], [30, 30, 40, 40]]], float)
    >>> scores = np.array([[[0.9, 0.1], [0.8, 0.7], [0.2, 0.6]]])
    >>> [(d.label, d.score) for d in detections(boxes, scores)[0]]
    [(0, 0.9), (1, 0.7), (1, 0.6)]
    """
    boxes, scores = _check_proposals(boxes, scores)
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold={threshold!r} must lie in [0, 1]")
    if not 0.0 < iou <= 1.0:
        raise ValueError(f"iou={iou!r} must lie in (0, 1]")
    if top is not None and (isinstance(top, bool) or not isinstance(top, (int, np.integer))
                            or top < 1):
        raise ValueError(f"top={top!r} must be a positive integer or None")
    found = []
    for image_boxes, image_scores in zip(boxes, scores):
        kept = []
        for label in range(image_scores.shape[1]):
            column = image_scores[:, label]
            candidates = np.flatnonzero(column >= threshold)
            # Highest score first; a stable sort keeps the lower index first on a tie.
            candidates = candidates[np.argsort(-column[candidates], kind="stable")]
            chosen: list[int] = []
            for index in candidates:
                if chosen and pairwise_iou(image_boxes[index], image_boxes[chosen]).max() > iou:
                    continue
                chosen.append(int(index))
            kept += [(-column[index], label, index) for index in chosen]
        kept.sort()
        found.append([Detected(tuple(float(v) for v in image_boxes[index]), label,
                               float(-negative))
                      for negative, label, index in kept[:top]])
    return found


def detection_recall(
    boxes: np.ndarray,
    scores: np.ndarray,
    truth_boxes: np.ndarray,
    truth_labels: np.ndarray,
    threshold: float = 0.5,
    iou: float = 0.5,
) -> dict[str, float]:
    """How many true objects the proposals find, with their class right.

    For each true object, the proposals scoring at least ``threshold`` for its class
    are its candidates; the object is found when its best candidate overlaps it with
    IoU at least ``iou``. No suppression: every proposal may find any object.

    Args:
        boxes: ``(B, N, 4)`` proposal boxes.
        scores: ``(B, N, C)`` per-class probabilities.
        truth_boxes: ``(B, K, 4)`` true boxes (:func:`scene_boxes`).
        truth_labels: ``(B, K)`` their classes, -1 for no object.
        threshold: The least class score a candidate has.
        iou: The least IoU that finds an object.

    Returns:
        ``recall`` (share of objects found), ``mean_iou`` (the mean best IoU of the
        objects found), ``mean_best_iou`` (of all objects, 0 where no candidate) and
        ``objects`` (how many).
    """
    boxes, scores = _check_proposals(boxes, scores)
    truth_boxes = np.asarray(truth_boxes, np.float64)
    truth_labels = np.asarray(truth_labels)
    if truth_boxes.shape[:1] != boxes.shape[:1] or truth_boxes.shape[2:] != (4,) \
            or truth_labels.shape != truth_boxes.shape[:2]:
        raise ValueError(f"truth_boxes must be (B, K, 4) and truth_labels (B, K) with the "
                         f"proposals' B = {boxes.shape[0]}, got {truth_boxes.shape} and "
                         f"{truth_labels.shape}")
    best = []
    for image in range(len(boxes)):
        overlaps = pairwise_iou(truth_boxes[image], boxes[image])  # (K, N)
        for k, label in enumerate(truth_labels[image]):
            if label < 0:
                continue
            candidates = scores[image, :, label] >= threshold
            best.append(float(overlaps[k][candidates].max()) if candidates.any() else 0.0)
    best = np.asarray(best)
    found = best >= iou
    return {"recall": float(found.mean()) if best.size else float("nan"),
            "mean_iou": float(best[found].mean()) if found.any() else float("nan"),
            "mean_best_iou": float(best.mean()) if best.size else float("nan"),
            "objects": int(best.size)}
