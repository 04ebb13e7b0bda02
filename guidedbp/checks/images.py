"""The images a check run feeds the model: image files, or generated stand-ins.

Image files go through the same steps as in ``guidedbp explain`` (decode, fit to the
model's input size, preprocess). Without files, a few smooth random images in pixel
space (0..255) stand in for them, seeded so that two runs see the same pixels.
numpy, Pillow (through :mod:`guidedbp.io.images`) and the model's preprocessing only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from guidedbp.io.images import ImageError, decode_image
from guidedbp.models.preprocess import prepare, preprocess

#: Generated images when no image files are given.
GENERATED_COUNT = 4
#: Their size for models with free spatial dimensions, unless ``size`` says otherwise.
FREE_SIZE = (64, 64)
#: Random values per side of the coarse grid the smooth images are interpolated from.
_GRID = 5


@dataclass
class CheckImage:
    """One image of a check run.

    Attributes:
        key: Stable name used in reports and baselines: the path relative to the
            folder it was found in, without extension (``circle_0``), or
            ``generated/0``.
        path: The file, or ``None`` for a generated image.
        pixels: ``(H, W, C)`` values in the model's input space, or ``None`` when the
            file could not be decoded.
        error: Why the file could not be used, or ``None``.
    """

    key: str
    path: str | None
    pixels: np.ndarray | None
    error: str | None = None


def smooth_image(rng: np.random.Generator, height: int, width: int, channels: int) -> np.ndarray:
    """A float32 ``(H, W, C)`` image in 0..255: a coarse random grid, bilinearly
    interpolated, so it has edges and gradients at several scales but no noise."""
    grid = rng.uniform(0.0, 255.0, size=(_GRID, _GRID, channels))
    rows = np.linspace(0, _GRID - 1, height)
    cols = np.linspace(0, _GRID - 1, width)
    row0 = np.minimum(np.floor(rows).astype(int), _GRID - 2)
    col0 = np.minimum(np.floor(cols).astype(int), _GRID - 2)
    row_t = (rows - row0)[:, None, None]
    col_t = (cols - col0)[None, :, None]
    top = grid[row0][:, col0] * (1 - col_t) + grid[row0][:, col0 + 1] * col_t
    bottom = grid[row0 + 1][:, col0] * (1 - col_t) + grid[row0 + 1][:, col0 + 1] * col_t
    return (top * (1 - row_t) + bottom * row_t).astype(np.float32)


def generated_images(
    input_shape: tuple,
    preprocess_mode: str,
    count: int = GENERATED_COUNT,
    seed: int = 0,
    size: tuple[int, int] | None = None,
) -> list[CheckImage]:
    """``count`` seeded smooth images at the model's input size, preprocessed.

    Args:
        input_shape: The model's ``(H, W, C)``; ``None`` for free dimensions.
        preprocess_mode: The model's preprocessing (pixels are made in 0..255).
        count: How many images.
        seed: Same seed, same images.
        size: ``(H, W)`` for models with free spatial dimensions (default 64x64).

    Raises:
        ValueError: For a count below 1.
    """
    if count < 1:
        raise ValueError(f"count={count!r} must be at least 1")
    height, width, channels = input_shape
    if height is None or width is None:
        height, width = size or FREE_SIZE
    channels = channels or 3
    rng = np.random.default_rng(seed)
    return [
        CheckImage(f"generated/{index}", None,
                   preprocess(smooth_image(rng, height, width, channels), preprocess_mode))
        for index in range(count)
    ]


def image_files(
    items,
    input_shape: tuple,
    channels: int,
    preprocess_mode: str,
    size: tuple[int, int] | None = None,
    resize: str = "stretch",
) -> list[CheckImage]:
    """Decode, fit and preprocess image files as ``guidedbp explain`` does.

    Args:
        items: :class:`~guidedbp.io.inputs.InputItem` from ``collect_inputs``.
        input_shape: The model's ``(H, W, C)``.
        channels: Channels to decode to (1 or 3).
        preprocess_mode: The model's preprocessing.
        size: ``(H, W)`` for models with free spatial dimensions (default: each
            image's own size).
        resize: ``stretch``, ``crop`` or ``pad``.

    Returns:
        One :class:`CheckImage` per item, in order; an undecodable file has
        ``pixels=None`` and the reason in ``error``.
    """
    images = []
    for item, key in zip(items, image_keys(items)):
        try:
            decoded = decode_image(item.path, channels=channels)
        except ImageError as error:
            images.append(CheckImage(key, item.path, None, error.reason))
            continue
        _, _, pixels = prepare(decoded, input_shape, preprocess_mode, size, resize)
        images.append(CheckImage(key, item.path, pixels))
    return images


def image_keys(items) -> list[str]:
    """Short unique names for a check's images: their paths below the folders they were
    found in, without extension (``a/cat``), as reports and baselines name them.

    With several folders, paths are relative to their common folder, so ``a/cat.jpg``
    and ``b/cat.jpg`` stay apart; two images with the same stem in one folder
    (``cat.jpg``, ``cat.png``) keep their extension (``cat_jpg``, ``cat_png``); a stem
    that still clashes gets ``_2``, ``_3``... in input order.
    """
    roots = {os.path.abspath(item.root) for item in items}
    common = os.path.commonpath(sorted(roots)) if len(roots) > 1 else None
    relative = [os.path.relpath(os.path.abspath(item.path),
                                common if common is not None else os.path.abspath(item.root))
                for item in items]
    stems: dict[str, list[str]] = {}
    for rel in relative:
        stems.setdefault(os.path.splitext(rel)[0].lower(), []).append(rel)
    keys, taken = [], set()
    for rel in relative:
        stem, extension = os.path.splitext(rel)
        if len(stems[stem.lower()]) > 1:
            stem = f"{stem}_{extension.lstrip('.').lower()}"
        unique, number = stem, 2
        while unique.lower() in taken:
            unique, number = f"{stem}_{number}", number + 1
        taken.add(unique.lower())
        keys.append(Path(unique).as_posix())
    return keys
