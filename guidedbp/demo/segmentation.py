"""Per-pixel labels of the shapes and how well a segmentation matches them; numpy only.

The bundled segmentation model (``demo-seg``, :mod:`guidedbp.demo.train_seg`) labels
every pixel of a shapes image with one of :data:`SEG_CLASS_NAMES`: ``background``, then
the shape classes of :data:`~guidedbp.demo.shapes.CLASS_NAMES` (shape class ``c`` is
segmentation class ``c + 1``). Its output is coarser than the image, so the generator's
masks are brought down to it by :func:`label_maps`: a cell of ``stride x stride`` image
pixels takes an object's class when the object's mask covers at least half of it (as the
generator's masks are the pixels an object at least half covers), else background.

>>> from guidedbp.demo.shapes import make_scenes
>>> truth = label_maps(make_scenes(2, seed=7), stride=4)
>>> truth.shape, truth.dtype, int(truth.min()), int(truth.max()) < len(SEG_CLASS_NAMES)
((2, 24, 24), dtype('int64'), 0, True)
>>> bool(confusion(truth, truth, 7).trace() == truth.size)
True
"""

from __future__ import annotations

import numpy as np

from guidedbp.demo.shapes import CLASS_NAMES

#: The segmentation classes, in output order: background, then the shape classes.
SEG_CLASS_NAMES = ("background", *CLASS_NAMES)


def downsample_mask(masks: np.ndarray, stride: int) -> np.ndarray:
    """Bool ``(N, H/stride, W/stride)``: the cells at least half covered by the masks.

    Args:
        masks: Bool ``(N, H, W)``, ``H`` and ``W`` multiples of ``stride``.
        stride: Cell side in pixels, ``>= 1``.

    Raises:
        ValueError: For a stride that does not divide the masks' sides.

    >>> mask = np.zeros((1, 4, 4), bool); mask[0, :2, :1] = True; mask[0, 2:, 2:] = True
    >>> downsample_mask(mask, 2)[0].tolist()
    [[True, False], [False, True]]
    """
    masks = np.asarray(masks, bool)
    if masks.ndim != 3:
        raise ValueError(f"masks must have shape (N, H, W), got {masks.shape}")
    count, height, width = masks.shape
    if stride < 1 or height % stride or width % stride:
        raise ValueError(f"stride={stride!r} must be a positive divisor of the masks' "
                         f"{height}x{width}")
    cells = masks.reshape(count, height // stride, stride, width // stride, stride)
    return cells.sum(axis=(2, 4)) * 2 >= stride * stride


def label_maps(scenes, stride: int) -> np.ndarray:
    """Int64 ``(N, H/stride, W/stride)`` segmentation labels of :class:`Scenes`.

    Each cell is background (0) unless :func:`downsample_mask` marks it for an object:
    then the object's shape class plus one. A cell marked for both the target and the
    distractor (their masks lie 3 px apart: it cannot happen at stride 4) is the target's.
    """
    cells = downsample_mask(scenes.masks, stride)
    truth = np.zeros(cells.shape, np.int64)
    distractors = scenes.distractor_labels >= 0
    if distractors.any():
        other = downsample_mask(scenes.distractor_masks, stride) & distractors[:, None, None]
        truth[other] = np.broadcast_to(scenes.distractor_labels[:, None, None] + 1,
                                       truth.shape)[other]
    truth[cells] = np.broadcast_to(scenes.labels[:, None, None] + 1, truth.shape)[cells]
    return truth


def confusion(predicted: np.ndarray, truth: np.ndarray, classes: int) -> np.ndarray:
    """Int64 ``(classes, classes)`` pixel counts: row the true class, column the predicted."""
    predicted, truth = np.asarray(predicted), np.asarray(truth)
    if predicted.shape != truth.shape:
        raise ValueError(f"predicted labels have shape {predicted.shape}, expected the "
                         f"truth's {truth.shape}")
    pairs = truth.astype(np.int64).ravel() * classes + predicted.astype(np.int64).ravel()
    return np.bincount(pairs, minlength=classes * classes).reshape(classes, classes)


def iou_per_class(matrix: np.ndarray) -> np.ndarray:
    """Float64 intersection over union of each class from a :func:`confusion` matrix
    (NaN for a class neither true nor predicted anywhere)."""
    matrix = np.asarray(matrix, np.float64)
    hits = np.diag(matrix)
    union = matrix.sum(axis=0) + matrix.sum(axis=1) - hits
    return np.divide(hits, union, out=np.full_like(hits, np.nan), where=union > 0)


def pixel_accuracy(matrix: np.ndarray) -> float:
    """Share of pixels labelled right, from a :func:`confusion` matrix."""
    matrix = np.asarray(matrix)
    return float(np.trace(matrix) / max(int(matrix.sum()), 1))
