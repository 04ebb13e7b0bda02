"""Forward-only methods: maps from the model's scores on perturbed copies of the images.

Score-CAM and occlusion never differentiate, so they take no part in the traced
backward pass. The explainer runs them afterwards, on the classes the traced pass
resolved, and sends every perturbed copy through its forward-only traced function
(``Explainer.predict``'s) in batches of ``batch_size``, copies of several images
together. Each pass returns every class's score, so the classes of one image (top-k,
several classes) share its copies: K classes cost no more passes than one.

Both work in the model's input space: Score-CAM multiplies the input by masks,
occlusion pastes the input-space value of a pixel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from guidedbp.engine.options import MAX_OCCLUSION_POSITIONS, MethodOptions
from guidedbp.errors import ArgumentError

#: float32 ``(B, H, W, C)`` copies, int ``(B,)`` the image each copy is of -> float32
#: ``(B, K)`` the scores of that image's K targets.
ScoresFunction = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Probe:
    """What a perturbation method's ``combine`` reads (see
    :class:`~guidedbp.engine.methods.registry.Probe`).

    Attributes:
        images: float32 ``(N, H, W, C)`` in the model's input space.
        columns: K, the targets explained per image.
        scores: The K target scores of up to ``chunk`` copies at a time.
        chunk: Copies per forward pass (the explainer's ``batch_size``).
        options: The explainer's :class:`~guidedbp.engine.options.MethodOptions`.
        features: float32 ``(N, h, w, k)`` feature map of the images (for Score-CAM),
            or ``None``.
        fill: float32 ``(C,)`` the occlusion patch's value in the model's input space.
    """

    images: np.ndarray
    columns: int
    scores: ScoresFunction
    chunk: int
    options: MethodOptions
    features: np.ndarray | None = None
    fill: np.ndarray | None = None

    def score_cam(self) -> np.ndarray:
        return score_cam(self.images, self.columns, self.features, self.scores, self.chunk,
                         self.options.scorecam.max_channels, self.options.gradcam.upsample)

    def occlusion(self) -> np.ndarray:
        occlusion_options = self.options.occlusion
        return occlusion(self.images, self.columns, self.scores, self.chunk,
                         occlusion_options.patch, occlusion_options.stride, self.fill)


def score_cam(images: np.ndarray, columns: int, features: np.ndarray,
              scores: ScoresFunction, chunk: int, max_channels: int | None,
              upsample: str) -> np.ndarray:
    """Score-CAM (Wang et al., 2020): feature-map channels weighted by the class scores of
    the images they mask.

    Each kept channel ``A_k`` of an image's feature map is resized to the image
    (bilinear, half-pixel centres) and min-max normalised to ``[0, 1]`` (a constant
    channel gives an all-zero mask); the image times that mask, ``x * M_k`` in the
    model's input space (so masked-out pixels become the input-space zero), is scored
    by the model. The channel weights are the softmax over the kept channels of the
    class's logit (any target's score) on the masked images, and the map is
    ``relu(sum_k w_k A_k)`` at the feature map's resolution, upsampled like Grad-CAM.

    This is pytorch-grad-cam's ``ScoreCAM`` and the paper's Algorithm 1 (whose baseline
    score ``f(X_b)``, the same for every channel, cancels in the softmax).
    Implementations differ: the authors' code weights each channel by the class's
    *probability* on the masked image, with no softmax over channels, skips constant
    channels and sums the upsampled maps; tf-keras-vis weights by the raw score of the
    masked image (no softmax) and resizes with a spline. pytorch-grad-cam resizes with
    ``align_corners=True`` and adds 1e-8 to the normalising range.

    ``max_channels`` keeps, per image, the channels of largest mean activation (ties: the
    lower index). Faster Score-CAM (tabayashi0117, as tf-keras-vis's ``max_N``) keeps the
    channels of largest spatial *variance* instead, chosen over the whole batch.

    Args:
        images: float32 ``(N, H, W, C)``.
        columns: K, the targets per image.
        features: float32 ``(N, h, w, k)`` feature map of ``images``.
        scores: Target scores of a batch of copies.
        chunk: Copies per batch.
        max_channels: Channels kept per image; ``None`` or 0: all.
        upsample: ``"bilinear"`` or ``"nearest"``: how the map reaches the input size.

    Returns:
        float32 ``(N, K, H, W, 1)``.
    """
    count, height = images.shape[:2]
    kept = keep_channels(features, max_channels)  # (N, n)
    selected = np.take_along_axis(features, kept[:, None, None, :], axis=3)  # (N, h, w, n)

    size = (height, images.shape[2])

    def masked_images() -> Iterator[tuple[np.ndarray, int]]:
        for row, (image, channels) in enumerate(zip(images, selected)):
            for mask in _masks(channels, size):
                yield image * mask[..., None], row

    logits = batched_scores(masked_images(), scores, chunk).reshape(
        count, kept.shape[1], columns).astype(np.float64)
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))  # (N, n, K)
    weights /= weights.sum(axis=1, keepdims=True)
    cams = np.maximum(np.einsum("ihwn,ink->ikhw", selected.astype(np.float64), weights), 0)
    cams = cams.astype(np.float32).reshape(-1, *cams.shape[2:], 1)  # (N * K, h, w, 1)
    if cams.shape[1:3] != size:
        cams = tf.image.resize(cams, size, method=upsample).numpy()
    return cams.reshape(count, columns, *size, 1)


def keep_channels(features: np.ndarray, max_channels: int | None) -> np.ndarray:
    """Per image, the indices (ascending) of the ``max_channels`` channels of largest
    mean activation; every channel when ``max_channels`` is ``None``, 0 or too many.

    >>> keep_channels(np.array([1.0, 3, 2, 3]).reshape(1, 1, 1, 4), 2)
    array([[1, 3]])
    """
    count, channels = features.shape[0], features.shape[-1]
    if not max_channels or max_channels >= channels:
        return np.tile(np.arange(channels), (count, 1))
    means = features.reshape(count, -1, channels).mean(axis=1)
    return np.sort(np.argsort(-means, axis=1, kind="stable")[:, :max_channels], axis=1)


def _masks(channels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``(h, w, n)`` channels -> ``(n, H, W)`` masks: resized (bilinear), each scaled to
    ``[0, 1]``; a constant channel gives zeros."""
    if channels.shape[:2] != size:
        channels = tf.image.resize(channels[None], size, method="bilinear").numpy()[0]
    low = channels.min(axis=(0, 1), keepdims=True)
    spread = channels.max(axis=(0, 1), keepdims=True) - low
    masks = np.divide(channels - low, spread, out=np.zeros_like(channels), where=spread > 0)
    return np.moveaxis(masks, -1, 0).astype(np.float32)


def occlusion(images: np.ndarray, columns: int, scores: ScoresFunction, chunk: int,
              patch: int | None, stride: int | None, fill: np.ndarray) -> np.ndarray:
    """Occlusion (Zeiler & Fergus, 2014): the drop in the class score when a patch hides
    each region.

    A ``patch`` x ``patch`` square of ``fill`` (in every channel) slides over the image
    by ``stride`` pixels, from the top-left corner until the image is covered (the last
    row and column of patches may be cut off by the edge, as in Captum's
    ``Occlusion``). For each position, the drop is the class's logit on the image minus
    its logit on the occluded copy; a pixel's value is the mean drop over the positions
    whose patch covers it (Captum averages the same way). Positive: hiding the pixel
    lowers the score.

    Args:
        images: float32 ``(N, H, W, C)``.
        columns: K, the targets per image.
        scores: Target scores of a batch of copies.
        chunk: Copies per batch.
        patch: Patch side in pixels; ``None``: a quarter of the shorter side.
        stride: Step in pixels; ``None``: two thirds of the patch, rounded up.
        fill: ``(C,)`` input-space value pasted into the patch.

    Returns:
        float32 ``(N, K, H, W, 1)``.

    Raises:
        ArgumentError: The patch is larger than the images, or the stride than the patch.
    """
    count, height, side = images.shape[:3]
    patch, stride = occlusion_geometry(height, side, patch, stride)
    corners = positions(height, side, patch, stride)

    def copies() -> Iterator[tuple[np.ndarray, int]]:
        for row, image in enumerate(images):
            yield image, row
            for top, left in corners:
                occluded = image.copy()
                occluded[top : top + patch, left : left + patch] = fill
                yield occluded, row

    logits = batched_scores(copies(), scores, chunk).reshape(
        count, 1 + len(corners), columns).astype(np.float64)
    drops = logits[:, :1] - logits[:, 1:]  # (N, positions, K)
    total = np.zeros((count, columns, height, side), np.float64)
    covered = np.zeros((height, side), np.float64)
    for position, (top, left) in enumerate(corners):
        total[:, :, top : top + patch, left : left + patch] += drops[:, position, :, None, None]
        covered[top : top + patch, left : left + patch] += 1
    return (total / covered).astype(np.float32)[..., None]


def occlusion_geometry(height: int, width: int, patch: int | None, stride: int | None
                       ) -> tuple[int, int]:
    """The patch and stride for ``height`` x ``width`` images, defaults filled in.

    >>> occlusion_geometry(224, 224, None, None)  # 6 x 6 positions
    (56, 38)

    Raises:
        ArgumentError: The patch is larger than the images, the stride than the patch, or
            they give more than :data:`MAX_OCCLUSION_POSITIONS` positions.
    """
    if patch is None:
        patch = max(1, min(height, width) // 4)
    if patch > min(height, width):
        raise ArgumentError(f"patch={patch} is larger than the {height}x{width} images")
    if stride is None:  # two thirds of the patch: 6 x 6 positions, overlapping by a third
        stride = max(1, -(-2 * patch // 3))
    if stride > patch:
        raise ArgumentError(
            f"stride={stride} must not exceed patch={patch}: pixels between patches would get "
            "no value"
        )
    positions = len(_starts(height, patch, stride)) * len(_starts(width, patch, stride))
    if positions > MAX_OCCLUSION_POSITIONS:
        raise ArgumentError(
            f"patch={patch}, stride={stride} place the patch at {positions} positions on "
            f"{height}x{width} images, one forward pass each: above the upper bound of "
            f"{MAX_OCCLUSION_POSITIONS} (choose a larger patch or stride)")
    return patch, stride


def positions(height: int, width: int, patch: int, stride: int) -> list[tuple[int, int]]:
    """The ``(top, left)`` corner of each patch position, row by row."""
    return [(top, left) for top in _starts(height, patch, stride)
            for left in _starts(width, patch, stride)]


def _starts(size: int, patch: int, stride: int) -> range:
    """Where patches start along one side: every ``stride`` until the side is covered."""
    steps = -(-(size - patch) // stride)  # ceil
    return range(0, steps * stride + 1, stride)


def batched_scores(copies: Iterable[tuple[np.ndarray, int]], scores: ScoresFunction,
                   chunk: int) -> np.ndarray:
    """The target scores of every ``(H, W, C)`` copy (with the image it is of), ``chunk``
    copies per forward pass: ``(copies, K)``. Copies are made as the batches fill, so
    memory holds one batch."""
    results, batch, rows = [], [], []
    for copy, row in copies:
        batch.append(copy)
        rows.append(row)
        if len(batch) == chunk:
            results.append(np.asarray(scores(np.stack(batch), np.asarray(rows))))
            batch, rows = [], []
    if batch:
        results.append(np.asarray(scores(np.stack(batch), np.asarray(rows))))
    return np.concatenate(results)
