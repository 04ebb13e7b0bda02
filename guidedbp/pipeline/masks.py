"""Region masks from ``mask_dir`` and similarity references, fitted as the inputs are.

An input's mask lies in ``mask_dir`` at the input's path below its INPUT folder, under
any image extension: ``photos/a/cat.jpg`` found in the INPUT ``photos`` has its mask at
``MASK_DIR/a/cat.png`` (or ``.jpg``, ``.bmp``, ...). Nonzero pixels (in any channel) are
inside the region. The mask is fitted to the model's input exactly as its image is
(:class:`~guidedbp.models.resizing.Placement`: the same stretch, crop or pad), by
nearest neighbour, so that it stays a mask.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from guidedbp.io import store
from guidedbp.io.images import IMAGE_EXTENSIONS, ImageError, decode_image
from guidedbp.io.inputs import InputItem
from guidedbp.models.preprocess import prepare
from guidedbp.pipeline.target_plan import file_digest

#: How far a mask's proportions may stray from its image's (rounding of resized masks).
_ASPECT_TOLERANCE = 0.02


class MaskError(Exception):
    """An input's mask is missing or unusable; the message fails that input only."""


def find_mask(mask_dir: str, item: InputItem) -> tuple[str, str]:
    """``(path, relative path below mask_dir)`` of ``item``'s mask.

    Raises:
        MaskError: None there, or several (``cat.png`` and ``cat.jpg``).
    """
    relative = item.relative
    folder, name = os.path.split(relative)
    stem = os.path.splitext(name)[0]
    on_store = store.is_url(mask_dir)
    where = store.join(mask_dir, folder) if on_store else os.path.join(mask_dir, folder)
    try:
        entries = next(iter(store.walk(where, False)), ("", [], []))[2] if on_store \
            else os.listdir(where)
        names = sorted(entry for entry in entries
                       if os.path.splitext(entry)[0] == stem
                       and os.path.splitext(entry)[1].lower() in IMAGE_EXTENSIONS)
    except OSError:
        names = []
    looked = os.path.join(mask_dir, folder, f"{stem}.*")
    if not names:
        raise MaskError(f"no mask for it (looked for {looked})")
    if len(names) > 1:
        raise MaskError(f"several masks for it ({', '.join(names)} in "
                        f"{os.path.join(mask_dir, folder) or '.'}): keep one")
    found = "/".join(part for part in (folder.replace(os.sep, "/"), names[0]) if part)
    return (store.join(where, names[0]) if on_store else os.path.join(where, names[0])), found


def read_mask(path: str, relative: str, image_size: tuple[int, int], placement,
              draft_side: int | None = None) -> tuple[np.ndarray, str]:
    """The mask at ``path`` fitted to the model's input as its image was, and the file's
    digest: ``(bool (H, W), sha256 prefix)``.

    Raises:
        MaskError: It cannot be read, or its proportions are not its image's.
    """
    try:
        pixels = decode_image(path, channels=3, draft_side=draft_side)
        digest = file_digest(path)
    except ImageError as error:
        raise MaskError(f"mask {relative}: {error.reason}") from None
    except OSError as error:
        raise MaskError(f"mask {relative}: cannot read it ({error.strerror or error})") from None
    height, width = pixels.shape[:2]
    image_height, image_width = image_size
    # Proportions equal within 2 %, or within a pixel of rounding.
    if abs(height * image_width - width * image_height) > \
            max(_ASPECT_TOLERANCE * image_height * width, image_width, width):
        raise MaskError(f"mask {relative} is {width}x{height} pixels, its image "
                        f"{image_width}x{image_height}: a mask must have its image's proportions")
    return fit_mask(np.any(pixels != 0, axis=-1), placement), digest


def fit_mask(mask: np.ndarray, placement) -> np.ndarray:
    """A bool ``(h, w)`` mask placed on the model's input as ``placement`` placed its image:
    resized to the scaled size by nearest neighbour (half-pixel centres), then the
    input's window taken, outside the image (padding) empty.

    >>> from guidedbp.models.resizing import fit
    >>> _, placement = fit(np.zeros((2, 4, 3), np.uint8), (4, 4), "pad")
    >>> fit_mask(np.array([[1, 0, 0, 0], [1, 0, 0, 0]], bool), placement).astype(int)
    array([[0, 0, 0, 0],
           [1, 0, 0, 0],
           [1, 0, 0, 0],
           [0, 0, 0, 0]])
    """
    scaled_height, scaled_width = placement.scaled_size
    rows = np.minimum(((np.arange(scaled_height) + 0.5) * mask.shape[0]
                       / scaled_height).astype(np.int64), mask.shape[0] - 1)
    columns = np.minimum(((np.arange(scaled_width) + 0.5) * mask.shape[1]
                          / scaled_width).astype(np.int64), mask.shape[1] - 1)
    scaled = mask[rows][:, columns]
    top, left, _, _ = placement.box
    fitted = np.zeros(placement.size, bool)
    c_top, c_left, c_bottom, c_right = placement.content_box
    fitted[c_top:c_bottom, c_left:c_right] = scaled[c_top + top : c_bottom + top,
                                                    c_left + left : c_right + left]
    return fitted


def reference_input(path: str, digest: str, input_shape: tuple, preprocess: str,
                    size: tuple | None, resize: str, channels: int) -> np.ndarray:
    """A similarity reference image as the model takes it, decoded and fitted exactly as
    the inputs are (``size`` and ``resize``; a model with free sides and no ``size``
    takes it at its own size). Cached per process: every batch reads the same one
    (``digest`` keys the cache on the file's content)."""
    return _reference(path, digest, input_shape, preprocess, size, resize, channels)[1]


def reference_picture(path: str, digest: str, input_shape: tuple, preprocess: str,
                      size: tuple | None, resize: str, channels: int) -> np.ndarray:
    """The same reference as :func:`reference_input`, as the ``uint8`` picture the model
    was given (fitted, not preprocessed): what a similarity's panel shows."""
    return _reference(path, digest, input_shape, preprocess, size, resize, channels)[0]


@functools.lru_cache(maxsize=8)
def _reference(path: str, digest: str, input_shape: tuple, preprocess: str,
               size: tuple | None, resize: str, channels: int
               ) -> tuple[np.ndarray, np.ndarray]:
    image = decode_image(path, channels=channels)
    fitted, _, model_input = prepare(image, input_shape, preprocess, size, resize)
    return fitted, model_input
