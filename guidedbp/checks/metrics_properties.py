"""Complexity metrics: how concentrated a map is, read off the map alone (no model).

- :func:`sparseness`: Chalasani et al. (2020), "Concise Explanations of Neural Networks
  using Adversarial Training" (ICML): the Gini index of the map's magnitudes. 0 for a
  constant map, ``1 - 1/n`` for a map of one non-zero pixel among ``n``. **Higher is
  better** (sparser, more concise).
- :func:`complexity`: Bhatt, Weller and Moura (2020), "Evaluating and Aggregating
  Feature-based Model Explanations" (IJCAI): the entropy (natural log) of the magnitudes
  normalised to sum 1. ``log n`` for a uniform map, 0 for one non-zero pixel. **Lower is
  better** (simpler).

Both read a map as its per-pixel magnitudes ``max_c |map|``, as the renders show it and
the deletion game ranks it, so a 3-channel and a 1-channel map of one image count the
same ``n = H * W`` pixels. Xplique's ``Sparseness`` and ``Complexity`` take the channels'
mean ``mean_c |map|`` instead (``channels="mean"`` here) and add ``1e-8`` to the
denominators and inside the log; here there is no epsilon, and an all-zero map counts as
constant (sparseness 0, complexity ``log n``).

>>> one_hot = np.zeros((1, 2, 2, 1)); one_hot[0, 0, 0, 0] = 5.0
>>> sparseness(one_hot).tolist(), complexity(one_hot).tolist()
([0.75], [0.0])
>>> uniform = np.ones((1, 2, 2, 3))
>>> sparseness(uniform).tolist(), round(float(complexity(uniform)[0]), 6)
([0.0], 1.386294)
"""

from __future__ import annotations

import numpy as np

from guidedbp.checks.metrics_arrays import as_choice, as_maps, pixel_magnitudes

__all__ = ["CHANNEL_REDUCTIONS", "complexity", "sparseness"]

#: How a pixel's channels become one magnitude: ``max_c |map|`` (the renders' magnitude,
#: the default) or ``mean_c |map|`` (Xplique's).
CHANNEL_REDUCTIONS = ("max", "mean")


def _magnitudes(maps, channels: str) -> np.ndarray:
    """Float64 ``(N, H * W)``: each pixel's magnitude, its channels reduced by
    ``channels`` (a :data:`CHANNEL_REDUCTIONS` entry)."""
    as_choice(channels, CHANNEL_REDUCTIONS, "channels")
    array = as_maps(maps)
    values = (pixel_magnitudes(array) if channels == "max"
              else np.abs(array).mean(axis=-1))
    return values.reshape(len(values), -1)


def sparseness(maps, *, channels: str = "max") -> np.ndarray:
    """The Gini index of each map's magnitudes (Chalasani et al. 2020); higher is better.

    With the ``n`` magnitudes sorted ascending, ``a_1 <= ... <= a_n``:
    ``G = sum_k (2k - n - 1) a_k / (n * sum_k a_k)``, in ``[0, 1 - 1/n]``.

    Args:
        maps: Real, finite ``(N, H, W, C)`` or ``(N, H, W)``.
        channels: ``"max"`` reads a pixel as ``max_c |map|``, ``"mean"`` as
            ``mean_c |map|`` (Xplique's); the same for one channel.

    Returns:
        Float64 ``(N,)``; 0 for an all-zero map.

    Raises:
        ArgumentError: Another shape, non-finite values, or an unknown ``channels``.

    >>> sparseness(np.array([[[1.0, 0.0], [0.0, 0.0]]])).tolist()
    [0.75]
    """
    values = np.sort(_magnitudes(maps, channels), axis=1)
    count = values.shape[1]
    weights = 2.0 * np.arange(1, count + 1) - count - 1
    totals = values.sum(axis=1)
    safe = np.where(totals > 0, totals, 1.0)
    return np.where(totals > 0, (values * weights).sum(axis=1) / (count * safe), 0.0)


def complexity(maps, *, channels: str = "max") -> np.ndarray:
    """The entropy of each map's normalised magnitudes (Bhatt et al. 2020); lower is
    better.

    ``p = |map| / sum |map|`` per pixel, ``H = -sum p log p`` (natural log, ``0 log 0 = 0``),
    in ``[0, log n]``.

    Args:
        maps: Real, finite ``(N, H, W, C)`` or ``(N, H, W)``.
        channels: As :func:`sparseness`'s.

    Returns:
        Float64 ``(N,)``; ``log n`` for an all-zero map (nothing singled out).

    Raises:
        ArgumentError: Another shape, non-finite values, or an unknown ``channels``.

    >>> round(float(complexity(np.ones((1, 4, 4)))[0]), 6) == round(float(np.log(16)), 6)
    True
    """
    values = _magnitudes(maps, channels)
    totals = values.sum(axis=1, keepdims=True)
    shares = np.where(totals > 0, values / np.where(totals > 0, totals, 1.0),
                      1.0 / values.shape[1])
    logs = np.log(np.where(shares > 0, shares, 1.0))
    return -(shares * logs).sum(axis=1) + 0.0  # + 0.0: no negative zero
