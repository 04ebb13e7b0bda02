"""Randomisation metric: does the map change with the class it explains?

Sixt, Granz and Landgraf (2020), "When Explanations Lie: Why Many Modified BP
Attributions Fail" (ICML): explain each image for its class and for a class drawn
uniformly among the others, and compare the two maps. A class-sensitive method gives
dissimilar maps: **lower similarity is better**.

The similarity is the Spearman rank correlation of the two maps' per-pixel magnitudes
``max_c |map|`` (:func:`guidedbp.checks.stats.map_similarity`: two equal constant maps
count 1, two different constant maps 0), in [-1, 1]. Sixt et al., Quantus'
``RandomLogit`` and Xplique's ``RandomLogitMetric`` use SSIM (Xplique: of the signed maps,
an 11-pixel Gaussian window of sigma 1.5): ``statistic="ssim"`` computes Xplique's
(:func:`guidedbp.checks.stats.ssim`). The default, a rank correlation of magnitudes,
ignores the maps' scale and sign, needs no window, and is the statistic ``guidedbp
check`` already compares maps with. The other class is drawn as Xplique draws it
(uniform over the others), from guidedbp's seeded stream rather than TensorFlow's.

>>> other_classes([0, 2, 2], 3, seed=0).tolist() != [0, 2, 2]
True
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from guidedbp.checks.metrics_arrays import (
    as_choice,
    as_classes,
    as_images,
    as_maps,
    pixel_magnitudes,
    seeded,
)
from guidedbp.checks.stats import map_similarity, ssim
from guidedbp.curves import positive_int
from guidedbp.errors import ArgumentError

__all__ = ["STATISTICS", "other_classes", "random_logit", "similarities"]

#: How two maps are compared: the Spearman correlation of their magnitudes (the default)
#: or the SSIM of the signed maps (Sixt et al.'s, Quantus' and Xplique's).
STATISTICS = ("spearman", "ssim")

_SALT = 3  # the class draw's random stream, apart from other metrics' of the same seed


def other_classes(classes, num_classes: int, seed: int = 0, first_index: int = 0
                  ) -> np.ndarray:
    """For each image a class drawn uniformly among the ``num_classes - 1`` others
    (image ``i`` of a batch starting at ``first_index`` draws from stream
    ``first_index + i``).

    Raises:
        ArgumentError: Fewer than 2 classes, or a class out of range.

    >>> other_classes([1, 0], 2).tolist()
    [0, 1]
    """
    num_classes = positive_int(num_classes, "num_classes")
    if num_classes < 2:
        raise ArgumentError("num_classes must be at least 2: a random other class needs one")
    targets = as_classes(classes, len(np.asarray(classes)))
    if np.any(targets >= num_classes):
        raise ArgumentError(f"class {int(targets.max())} is out of range: the model has "
                            f"{num_classes} classes")
    draws = np.array([seeded(seed, first_index + index, _SALT).integers(num_classes - 1)
                      for index in range(len(targets))], np.int64)
    return draws + (draws >= targets)  # skip the image's own class


def similarities(maps, other_maps, statistic: str = "spearman") -> np.ndarray:
    """Each pair of maps' similarity, float64 ``(N,)``: the Spearman correlation of their
    magnitudes, or with ``statistic="ssim"`` the SSIM of the signed maps (Xplique's)."""
    as_choice(statistic, STATISTICS, "statistic")
    first, second = as_maps(maps), as_maps(other_maps, name="other_maps")
    if statistic == "ssim":
        if first.shape != second.shape:
            raise ArgumentError(f"other_maps has shape {second.shape}; expected "
                                f"{first.shape}")
        return np.array([ssim(a, b) for a, b in zip(first, second)], np.float64)
    if first.shape[:3] != second.shape[:3]:
        raise ArgumentError(f"other_maps has shape {second.shape}; expected {first.shape}")
    first_magnitude = pixel_magnitudes(first)[..., None]
    second_magnitude = pixel_magnitudes(second)[..., None]
    return np.array([map_similarity(a, b) for a, b in zip(first_magnitude, second_magnitude)],
                    np.float64)


def random_logit(explain: Callable[[np.ndarray, np.ndarray], np.ndarray], inputs, classes,
                 num_classes: int, *, seed: int = 0, maps=None,
                 statistic: str = "spearman") -> np.ndarray:
    """Each image's map similarity between its class and a random other class (Sixt et
    al. 2020); lower is better.

    Args:
        explain: ``(n, H, W, C)`` inputs and ``(n,)`` classes -> maps.
        inputs: Real ``(N, H, W, C)``.
        classes: The class of each image's map.
        num_classes: Classes of the model (the other class is drawn among them).
        seed: Seeds the draws (per image).
        maps: The images' maps of ``classes`` when already computed.
        statistic: ``"spearman"`` (of the magnitudes) or ``"ssim"`` (of the signed maps,
            Xplique's); see :data:`STATISTICS`.

    Returns:
        Float64 ``(N,)`` in [-1, 1].
    """
    as_choice(statistic, STATISTICS, "statistic")  # before the maps are computed
    images = as_images(inputs)
    targets = as_classes(classes, len(images))
    own = explain(images, targets) if maps is None else maps
    return similarities(own, explain(images, other_classes(targets, num_classes, seed)),
                        statistic)
