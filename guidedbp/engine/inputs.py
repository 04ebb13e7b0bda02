"""The caller's images, classes and model shapes, checked and normalised.

Messages name the value and what was expected, with a hint where one helps
("add a batch axis: images[None]").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from guidedbp.errors import ArgumentError

#: A class to explain: ``None`` (each image's top-1), one for all images, or one per image.
Target = int | Sequence[int] | np.ndarray | None


def check_range(targets: np.ndarray, num_classes: int) -> None:
    """Every class index is below ``num_classes`` (negative ones name ranks)."""
    if np.any(targets >= num_classes):
        bad = int(targets[targets >= num_classes][0])
        raise ArgumentError(
            f"target class {bad} is out of range: the model has "
            f"{num_classes} classes (0..{num_classes - 1})"
        )


def as_images(images) -> np.ndarray:
    """A non-empty numeric ``(N, H, W, C)`` batch, as contiguous float32."""
    array = np.asarray(images)
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise ArgumentError(f"images must be numeric, got dtype {array.dtype}")
    if array.ndim != 4:
        hint = " (add a batch axis: images[None])" if array.ndim == 3 else ""
        raise ArgumentError(f"images must have shape (N, H, W, C), got {array.shape}{hint}")
    if len(array) == 0:
        raise ArgumentError("images is empty: expected at least one image")
    return np.ascontiguousarray(array, dtype=np.float32)


def as_targets(target: Target, count: int) -> np.ndarray:
    """int32 ``(count,)`` classes; ``-1`` (the top-1 class) for ``None``."""
    if target is None:
        return np.full(count, -1, np.int32)
    if isinstance(target, (int, np.integer)):
        targets = np.full(count, int(target), np.int64)
    else:
        targets = np.asarray(target)
        if targets.ndim != 1 or not np.issubdtype(targets.dtype, np.integer):
            raise ArgumentError(
                f"target must be None, an int or a sequence of ints, got {target!r}"
            )
        if len(targets) != count:
            raise ArgumentError(f"target has {len(targets)} classes for {count} images")
    if np.any(targets < 0):
        raise ArgumentError(f"target classes must be >= 0, got {int(targets.min())}")
    return targets.astype(np.int32)


def declared_image_shape(model) -> tuple | None:
    """The ``(H, W, C)`` the model declares (free dims ``None``), or ``None``."""
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        return None
    if not inputs or len(inputs) != 1:
        if inputs and len(inputs) > 1:
            raise ArgumentError(
                f"the model has {len(inputs)} inputs; guidedbp explains one image input"
            )
        return None
    shape = tuple(inputs[0].shape[1:])
    return shape if len(shape) == 3 else None


def check_shape(image_shape: tuple, declared: tuple) -> None:
    """``image_shape`` fits the declared one."""
    if len(image_shape) != len(declared) or any(
        d is not None and d != s for s, d in zip(image_shape, declared)
    ):
        want = "x".join("?" if d is None else str(d) for d in declared)
        got = "x".join(str(s) for s in image_shape)
        raise ArgumentError(f"the model takes images of HxWxC {want}, got {got}")


def build_if_needed(model, image_shape: tuple) -> None:
    """Build a model that has not been called yet (a subclassed model)."""
    if not getattr(model, "built", True):
        model(np.zeros((1, *image_shape), np.float32), training=False)


def available_memory() -> int | None:
    """Bytes the system can still give this process without swapping (Linux'
    ``MemAvailable``); ``None`` where it is not known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_memory(batch: int, image_shape: tuple, maps: int) -> None:
    """Refuse, before it starts, a pass whose images and maps alone cannot fit in the free
    memory: ``batch`` images of ``image_shape``, their gradients and ``maps`` maps each
    (the model's activations come on top).

    Raises:
        ArgumentError: Naming the sizes and a ``batch_size`` that would fit.
    """
    per_image = int(np.prod(image_shape)) * 4 * (2 + maps)
    free = available_memory()
    if free is None or batch * per_image <= free:
        return
    fits = free // per_image
    advice = (f"try batch_size={fits}" if fits >= 1 else
              "use smaller images (size=) or fewer classes and methods")
    raise ArgumentError(
        f"batch_size={batch}: a pass over {batch} images of "
        f"{'x'.join(str(side) for side in image_shape)} needs at least "
        f"{_size(batch * per_image)} for its images and maps alone, and {_size(free)} are "
        f"free: {advice}")


def _size(count: int) -> str:
    return f"{count / 2**30:.1f} GiB" if count >= 2**30 else f"{count / 2**20:.2f} MiB"


def pixel_values(values, channels: int, pixel_to_input=None) -> np.ndarray:
    """Uniform pixels of 0-255 ``values`` in the model's input space, through
    ``pixel_to_input`` (``(N, H, W, C)`` pixels -> model inputs; ``None``: the identity):
    ``(len, C)``, or ``(C,)`` for one value."""
    values = np.asarray(values, np.float32)
    pixels = values.reshape(-1).repeat(channels).reshape(-1, 1, 1, channels)
    if pixel_to_input is not None:
        pixels = np.asarray(pixel_to_input(pixels), np.float32)
    pixels = pixels.reshape(-1, channels)
    return pixels[0] if values.ndim == 0 else pixels


def black_white(channels: int, pixel_to_input=None) -> tuple[np.ndarray, np.ndarray]:
    """The input-space values of a black and a white pixel, ``(C,)`` each."""
    black, white = pixel_values([0.0, 255.0], channels, pixel_to_input)
    return black, white
