"""Methods that average another method's maps: SmoothGrad and integrated gradients.

Each is written once, on top of any map function that runs the model in batches,
so all noisy copies or interpolation steps go through the model batch by batch,
never one image at a time. SmoothGrad averages several methods' maps at once, so
the methods computed from one forward pass share their noisy copies too; it keeps the
variance over the copies instead of the mean for the methods that ask (VarGrad).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import numpy as np

from guidedbp.engine.options import BASELINES
from guidedbp.errors import ArgumentError

MapsFunction = Callable[[np.ndarray, np.ndarray], np.ndarray]
#: ``(copies, rows, numbers)`` -> method -> maps: the copies of images ``rows``, each its
#: image's copy number ``numbers`` (0, 1, ...).
MethodMapsFunction = Callable[[np.ndarray, np.ndarray, np.ndarray], dict[str, np.ndarray]]


def smoothgrad(
    maps_for: MethodMapsFunction, images: np.ndarray, samples: int, noise: float, seed: int,
    chunk: int, variance: Collection[str] = (),
) -> dict[str, np.ndarray]:
    """SmoothGrad (Smilkov et al., 2017): the mean map over noisy copies.

    Each image gets ``samples`` copies with Gaussian noise of standard deviation
    ``noise * (max - min)`` of that image. Noise for image ``i`` is drawn from
    ``numpy.random.default_rng([seed, i])``, so maps do not depend on batching.
    The methods named in ``variance`` get the population variance of their maps over
    the copies instead (VarGrad), in float64: two-pass within a batch of copies, batches
    joined by Chan et al.'s update, never ``E[m^2] - E[m]^2``.

    Args:
        maps_for: The base methods on a batch of copies, the image each copy is of (int
            ``(B,)`` rows of ``images``) and its number among that image's copies, with
            the target fixed on the clean image: method -> maps.
        images: float32 ``(N, H, W, C)``.
        samples: Copies per image.
        noise: Relative noise level.
        seed: Seed of the noise.
        chunk: Copies per model batch.
        variance: The methods whose variance over the copies is kept, not their mean.

    Returns:
        method -> float32 mean (or variance) maps, ``(N, ...)``.
    """
    result: dict[str, np.ndarray] = {}

    def keep(start: int, means: dict[str, np.ndarray]) -> None:
        for name, mean in means.items():
            if name not in result:
                result[name] = np.empty((len(images), *mean.shape[1:]), np.float32)
            result[name][start : start + len(mean)] = mean

    if samples > chunk:  # one image at a time, its copies a batch at a time: memory does
        for index, image in enumerate(images):  # not grow with the number of copies
            keep(index, _chunked_mean(maps_for, image, samples, noise, seed, index, chunk,
                                      variance))
        return result
    per_group = chunk // samples
    for start in range(0, len(images), per_group):
        group = images[start : start + per_group]
        copies = np.concatenate([_noisy(np.random.default_rng([seed, start + offset]), image,
                                        samples, noise)
                                 for offset, image in enumerate(group)])
        by_method = maps_for(copies, np.repeat(np.arange(start, start + len(group)), samples),
                             np.tile(np.arange(samples), len(group)))
        keep(start, {name: (np.var if name in variance else np.mean)(
                         maps.reshape(len(group), samples, *maps.shape[1:]), axis=1,
                         dtype=np.float64)
                     for name, maps in by_method.items()})
    return result


def _chunked_mean(maps_for: MethodMapsFunction, image: np.ndarray, samples: int,
                  noise: float, seed: int, index: int, chunk: int,
                  variance: Collection[str] = ()) -> dict[str, np.ndarray]:
    """One image's mean (or, for the methods in ``variance``, variance) maps over
    ``samples`` noisy copies, made ``chunk`` at a time from the image's one noise stream
    (so the same copies as made all at once)."""
    rng = np.random.default_rng([seed, index])
    totals: dict[str, np.ndarray] = {}
    moments: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # variance's: (mean, M2)
    for start in range(0, samples, chunk):
        count = min(chunk, samples - start)
        copies = _noisy(rng, image, count, noise)
        for name, maps in maps_for(copies, np.full(count, index),
                                   np.arange(start, start + count)).items():
            if name in variance:
                mean = maps.mean(axis=0, dtype=np.float64)
                squares = np.square(maps - mean).sum(axis=0)
                if name in moments:  # Chan et al. (1979): join two batches' moments
                    before, m2 = moments[name]
                    delta = mean - before
                    mean = before + delta * (count / (start + count))
                    squares = m2 + squares + delta**2 * (start * count / (start + count))
                moments[name] = (mean, squares)
                continue
            total = maps.sum(axis=0, dtype=np.float64)
            totals[name] = total if name not in totals else totals[name] + total
    return {**{name: (total / samples)[None] for name, total in totals.items()},
            **{name: (m2 / samples)[None] for name, (_, m2) in moments.items()}}


def _noisy(rng: np.random.Generator, image: np.ndarray, samples: int, noise: float
           ) -> np.ndarray:
    sigma = noise * float(image.max() - image.min())
    return (image[None] + rng.normal(0.0, sigma, (samples, *image.shape))).astype(np.float32)


def integrated_gradients(
    maps_for: MapsFunction, images: np.ndarray, baselines: np.ndarray, steps: int, chunk: int,
) -> np.ndarray:
    """Integrated gradients (Sundararajan et al., 2017), midpoint Riemann sum.

    ``(x - x0) * mean_k grad(x0 + a_k (x - x0))`` with ``a_k = (k + 1/2) / steps``;
    the attributions sum to ``score(x) - score(x0)`` as ``steps`` grows. ``maps_for``
    takes the path's points and the image each is of (int ``(B,)`` rows of ``images``),
    with the target fixed on the clean image.
    """
    alphas = ((np.arange(steps) + 0.5) / steps).astype(np.float32)
    result = np.empty(images.shape, np.float32)
    for index, (image, baseline) in enumerate(zip(images, baselines)):
        difference = image - baseline
        total = np.zeros(image.shape, np.float64)
        for start in range(0, steps, chunk):
            part = alphas[start : start + chunk]
            path = baseline[None] + part[:, None, None, None] * difference[None]
            grads = maps_for(path.astype(np.float32), np.full(len(part), index))
            total += grads.sum(axis=0, dtype=np.float64)
        result[index] = (difference * (total / steps)).astype(np.float32)
    return result


def make_baselines(
    images: np.ndarray, baseline, black: np.ndarray, white: np.ndarray
) -> np.ndarray:
    """Baselines in the model's input space.

    Args:
        images: float32 ``(N, H, W, C)``.
        baseline: ``"black"``, ``"white"``, ``"blur"`` or an array broadcastable to images.
        black: The input-space value of a black pixel, per channel.
        white: The input-space value of a white pixel, per channel.
    """
    if isinstance(baseline, str):
        if baseline == "black":
            return np.broadcast_to(black, images.shape).astype(np.float32)
        if baseline == "white":
            return np.broadcast_to(white, images.shape).astype(np.float32)
        if baseline == "blur":
            return np.stack([gaussian_blur(image, sigma=max(image.shape[:2]) / 20)
                             for image in images])
        raise ArgumentError(
            f"baseline={baseline!r} is not one of {', '.join(BASELINES)} or an array"
        )
    array = np.asarray(baseline, np.float32)
    try:
        return np.broadcast_to(array, images.shape).astype(np.float32)
    except ValueError:
        raise ArgumentError(
            f"baseline of shape {array.shape} does not broadcast to images {images.shape}"
        ) from None


def gaussian_blur(image: np.ndarray, sigma: float) -> np.ndarray:
    """Separable Gaussian blur of an ``(H, W, C)`` image, edges reflected."""
    radius = max(1, int(round(3 * sigma)))
    offsets = np.arange(-radius, radius + 1, dtype=np.float64)
    kernel = np.exp(-0.5 * (offsets / sigma) ** 2)
    kernel /= kernel.sum()
    blurred = image.astype(np.float64)
    for axis in (0, 1):
        pad = [(0, 0)] * 3
        pad[axis] = (radius, radius)
        padded = np.pad(blurred, pad, mode="reflect" if image.shape[axis] > radius else "edge")
        blurred = sum(
            weight * np.take(padded, np.arange(i, i + image.shape[axis]), axis=axis)
            for i, weight in enumerate(kernel)
        )
    return blurred.astype(np.float32)
