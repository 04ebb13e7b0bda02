"""Robustness metrics: how much a map changes when its image changes imperceptibly.

Yeh et al. (2019), "On the (In)fidelity and Sensitivity of Explanations" (NeurIPS):
explain ``samples`` noisy copies ``x + delta`` of each image, ``delta`` uniform in the
L-infinity ball of radius ``r = radius * (max(x) - min(x))``, for the class explained on
the clean image (the targets are fixed, not re-chosen per copy), and take

    ``||phi(x + delta) - phi(x)|| / ||phi(x)||``  (Frobenius norms)

per copy: **max-sensitivity** is the largest over the copies, **average sensitivity**
their mean. **Lower is better** for both (0: the map does not move).

The ratio of Frobenius norms is Quantus' (``MaxSensitivity``, ``AvgSensitivity``); it
draws 200 copies with an absolute noise bound on normalised inputs and normalises the
maps first, where this draws 10, scales the bound to each image's range and leaves the
maps as they are (the ratio does not depend on their scale). Xplique's
``AverageStability`` differs more: noise in ``[0, 1/d)`` for ``d`` input values, the
squared L2 distance averaged over 200 copies, not divided by the clean map's norm. A
zero clean map gives 0 when the noisy maps are zero too, else infinity (no epsilon).

>>> def explain(inputs, classes):  # the gradient of a linear model: the same everywhere
...     return np.ones_like(inputs)
>>> result = sensitivity(explain, np.zeros((2, 3, 3, 1)), [0, 0], samples=4)
>>> result.maximum.tolist(), result.average.tolist()
([0.0, 0.0], [0.0, 0.0])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from guidedbp.checks.metrics_arrays import as_classes, as_images, as_maps, seeded
from guidedbp.curves import positive_int
from guidedbp.errors import ArgumentError

__all__ = ["SENSITIVITY_DEFAULTS", "Sensitivity", "noisy_copies", "relative_changes",
           "sensitivity"]

#: Noise radius as a share of each image's value range, and noisy copies per image.
SENSITIVITY_DEFAULTS = {"radius": 0.1, "samples": 10}
_SALT = 2  # the noise's random stream, apart from other metrics' of the same seed


@dataclass(frozen=True)
class Sensitivity:
    """Each image's relative map changes over its noisy copies.

    Attributes:
        changes: Float64 ``(N, samples)``: ``||phi(x + delta) - phi(x)|| / ||phi(x)||``.
    """

    changes: np.ndarray

    @property
    def maximum(self) -> np.ndarray:
        """Max-sensitivity per image, float64 ``(N,)``; lower is better."""
        return self.changes.max(axis=1)

    @property
    def average(self) -> np.ndarray:
        """Average sensitivity per image, float64 ``(N,)``; lower is better."""
        return self.changes.mean(axis=1)


def noisy_copies(inputs, samples: int = 10, radius: float = 0.1, seed: int = 0,
                 first_index: int = 0) -> np.ndarray:
    """``samples`` copies of each image plus uniform noise in ``[-r, r]`` per value,
    ``r = radius * (max - min)`` of that image (seeded per image: image ``i`` of a batch
    starting at ``first_index`` draws from stream ``first_index + i``).

    Returns:
        Float32 ``(N * samples, H, W, C)``, image by image (copy ``s`` of image ``i`` is
        row ``i * samples + s``).
    """
    images = as_images(inputs)
    samples = positive_int(samples, "samples")
    if not np.isfinite(radius) or radius < 0:
        raise ArgumentError(f"radius={radius!r} must be a non-negative share of the range")
    out = np.empty((len(images), samples, *images.shape[1:]), np.float32)
    for index, image in enumerate(images):
        width = float(radius) * float(image.max() - image.min())
        noise = seeded(seed, first_index + index, _SALT).uniform(
            -width, width, size=(samples, *image.shape))
        out[index] = image + noise
    return out.reshape(-1, *images.shape[1:])


def relative_changes(clean_maps, noisy_maps) -> np.ndarray:
    """``||noisy - clean|| / ||clean||`` per copy (Frobenius norms).

    Args:
        clean_maps: ``(N, H, W, C)``.
        noisy_maps: ``(N * samples, H, W, C)``, image by image as :func:`noisy_copies`.

    Returns:
        Float64 ``(N, samples)``; 0 where both are zero, infinity where only the clean
        map is.

    >>> relative_changes(np.ones((1, 1, 2, 1)), np.array([[[[1.0], [1.0]]], [[[2.0], [1.0]]]])
    ...                  ).round(6).tolist()
    [[0.0, 0.707107]]
    """
    clean = as_maps(clean_maps, name="clean_maps")
    noisy = as_maps(noisy_maps, name="noisy_maps")
    if len(noisy) % len(clean) or noisy.shape[1:] != clean.shape[1:]:
        raise ArgumentError(f"noisy_maps has shape {noisy.shape}; expected a whole number "
                            f"of copies of each of the {clean.shape} clean maps")
    noisy = noisy.reshape(len(clean), -1, *clean.shape[1:])
    difference = np.sqrt(((noisy - clean[:, None]) ** 2).sum(axis=(2, 3, 4)))
    norm = np.sqrt((clean ** 2).sum(axis=(1, 2, 3)))[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(difference == 0, 0.0, difference / norm)


def sensitivity(explain: Callable[[np.ndarray, np.ndarray], np.ndarray], inputs, classes, *,
                samples: int = 10, radius: float = 0.1, seed: int = 0,
                clean_maps=None) -> Sensitivity:
    """Max- and average sensitivity of one explainer's maps (Yeh et al. 2019).

    Args:
        explain: ``(n, H, W, C)`` inputs and ``(n,)`` classes -> ``(n, H, W, C')`` maps,
            e.g. ``lambda x, c: explainer(x, c)``.
        inputs: Real ``(N, H, W, C)``, in the space ``explain`` takes.
        classes: The class explained for each image, kept for its noisy copies.
        samples: Noisy copies per image.
        radius: The noise's half-width as a share of each image's value range.
        seed: Seeds the noise (per image).
        clean_maps: The images' own maps when already computed.

    Returns:
        A :class:`Sensitivity`: ``.maximum`` and ``.average`` per image.
    """
    images = as_images(inputs)
    targets = as_classes(classes, len(images))
    clean = explain(images, targets) if clean_maps is None else clean_maps
    copies = noisy_copies(images, samples, radius, seed)
    noisy = explain(copies, np.repeat(targets, samples))
    return Sensitivity(relative_changes(clean, noisy))
