"""Fitting an image to a model's input size, and bringing its maps back (numpy and Pillow).

:func:`fit` resizes an image to a model's input size (:data:`RESIZE_MODES`: stretch, crop
or pad) and returns a :class:`Placement` that maps a model-resolution saliency map back
onto the original image: at the original's size, or at most :data:`MAX_SHOWN_SIDE`
pixels on the longer side with the original's aspect, so the memory a map takes is
bounded whatever the image's size. The pixel values themselves are
:mod:`guidedbp.models.preprocess`'s.

>>> import numpy as np
>>> fitted, placement = fit(np.zeros((30, 60, 3), np.uint8), (10, 10), "pad")
>>> fitted.shape, placement.scaled_size, placement.box
((10, 10, 3), (5, 10), (-2, 0, 8, 10))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from PIL import Image

__all__ = [
    "MAX_SHOWN_SIDE",
    "RESIZE_MODES",
    "Placement",
    "draft_side",
    "fit",
    "model_size",
    "resize_map",
    "resize_picture",
    "shown_size",
]

#: How :func:`fit` brings an image to the model's input size.
RESIZE_MODES = ("stretch", "crop", "pad")

#: The longest side, in pixels, of a map brought back to an original image's size
#: (:meth:`Placement.to_original`) and so of every render at the original size. A
#: larger original's maps and renders keep its aspect at this longer side: a
#: 9000 x 6000 photo gets 4096 x 2731 renders. One 3-channel float32 map at this size
#: is 201 MB; at 9000 x 9000 it would be 972 MB.
MAX_SHOWN_SIDE = 4096


@dataclass(frozen=True)
class Placement:
    """Where a model input came from in the original image, as :func:`fit` made it.

    :func:`fit` resizes the whole original image to ``scaled_size`` and then takes the
    window ``box`` of that scaled image as the model input, with zeros wherever the
    window reaches past the scaled image (the padding of ``"pad"`` mode).

    Attributes:
        mode: The :data:`RESIZE_MODES` entry used.
        original_size: ``(height, width)`` of the original image.
        size: ``(height, width)`` of the model input.
        scaled_size: ``(height, width)`` the original image was resized to.
        box: ``(top, left, bottom, right)`` of the model input window in scaled-image
            pixels; ``bottom - top`` and ``right - left`` equal ``size``. Inside the
            scaled image for ``"crop"``; with negative ``top``/``left`` for ``"pad"``.
    """

    mode: str
    original_size: tuple[int, int]
    size: tuple[int, int]
    scaled_size: tuple[int, int]
    box: tuple[int, int, int, int]

    @property
    def shown_size(self) -> tuple[int, int]:
        """``(height, width)`` maps come back at: :attr:`original_size`, capped to
        :data:`MAX_SHOWN_SIDE` on the longer side (see :func:`shown_size`)."""
        return shown_size(self.original_size)

    @property
    def content_box(self) -> tuple[int, int, int, int]:
        """``(top, left, bottom, right)`` of the model input that shows the image (not padding)."""
        top, left, _, _ = self.box
        return (
            max(0, -top),
            max(0, -left),
            min(self.size[0], self.scaled_size[0] - top),
            min(self.size[1], self.scaled_size[1] - left),
        )

    @property
    def original_box(self) -> tuple[int, int, int, int]:
        """``(top, left, bottom, right)`` of the original image that the model sees.

        Rounded to whole original pixels; the whole image for ``"stretch"`` and ``"pad"``.
        """
        top, left, bottom, right = self.box
        (original_h, original_w), (scaled_h, scaled_w) = self.original_size, self.scaled_size
        rows = _scale_span(max(top, 0), min(bottom, scaled_h), original_h, scaled_h)
        cols = _scale_span(max(left, 0), min(right, scaled_w), original_w, scaled_w)
        return (rows[0], cols[0], rows[1], cols[1])

    def to_original(
        self, array: np.ndarray, max_side: int | None = MAX_SHOWN_SIDE
    ) -> np.ndarray:
        """Map a model-resolution map back onto the original image's pixel grid.

        The part of ``array`` that shows image content (:attr:`content_box`) is resized
        bilinearly onto :attr:`original_box`; original pixels the model never saw (cut
        away by ``"crop"``) are 0. Padding is dropped.

        An original whose longer side exceeds ``max_side`` (by default
        :data:`MAX_SHOWN_SIDE`) gets its map at :attr:`shown_size` instead, the same
        picture scaled down: the memory a map takes stays bounded. Pictures to draw
        it on are scaled down alike (``guidedbp.render`` does it for a larger picture).

        Args:
            array: ``(height, width, K)`` or ``(height, width)`` map with
                ``(height, width) == size``.
            max_side: The longest side of the result; ``None`` for the original size
                whatever it is.

        Returns:
            A new float32 array of shape ``(H0, W0, K)`` (or ``(H0, W0)`` for 2-D
            input): ``original_size``, or ``shown_size(original_size, max_side)``.

        Raises:
            ValueError: ``array`` is not 2-D or 3-D, or its height and width are not
                :attr:`size`.
        """
        values = np.asarray(array)
        if values.ndim not in (2, 3) or values.shape[:2] != tuple(self.size):
            raise ValueError(
                f"array must have shape ({self.size[0]}, {self.size[1]}, K) or "
                f"({self.size[0]}, {self.size[1]}), got shape {values.shape}"
            )
        target = self.original_size if max_side is None else \
            shown_size(self.original_size, max_side)
        # The same placement onto a smaller original: its boxes scale with it.
        onto = self if target == self.original_size else replace(self, original_size=target)
        flat = values.ndim == 2
        stack = values[..., np.newaxis] if flat else values
        c_top, c_left, c_bottom, c_right = onto.content_box
        o_top, o_left, o_bottom, o_right = onto.original_box
        out = np.zeros((*target, stack.shape[2]), dtype=np.float32)
        resize_map(stack[c_top:c_bottom, c_left:c_right, :], (o_bottom - o_top, o_right - o_left),
                   out=out[o_top:o_bottom, o_left:o_right, :])
        return out[..., 0] if flat else out

    def box_to_input(self, box) -> np.ndarray:
        """A box of the original image as the model input has it: float64 corners
        ``(x0, y0, x1, y1)`` (x right, y down, in pixel edges: ``(0, 0, W0, H0)`` is the
        whole original) scaled as :func:`fit` scaled the image, then moved by its window
        (``"crop"`` cuts, ``"pad"`` shifts). Not clipped: a box may reach past the input.

        >>> _, placement = fit(np.zeros((100, 200, 3), np.uint8), (50, 50), "pad")
        >>> placement.box_to_input([0, 0, 200, 100]).tolist()  # the whole image: 13 px pad
        [0.0, 12.0, 50.0, 37.0]
        >>> placement.box_to_original(placement.box_to_input([20, 10, 60, 90])).tolist()
        [20.0, 10.0, 60.0, 90.0]
        """
        corners = np.asarray(box, np.float64).reshape(4)
        (original_h, original_w), (scaled_h, scaled_w) = self.original_size, self.scaled_size
        top, left = self.box[0], self.box[1]
        scale = np.array([scaled_w / original_w, scaled_h / original_h] * 2)
        return corners * scale - np.array([left, top, left, top], np.float64)

    def box_to_original(self, box) -> np.ndarray:
        """The inverse of :meth:`box_to_input`: a box of the model input, float64 corners
        ``(x0, y0, x1, y1)``, in the original image's pixels (e.g. what a detector found,
        to draw it on the original)."""
        corners = np.asarray(box, np.float64).reshape(4)
        (original_h, original_w), (scaled_h, scaled_w) = self.original_size, self.scaled_size
        top, left = self.box[0], self.box[1]
        scale = np.array([original_w / scaled_w, original_h / scaled_h] * 2)
        return (corners + np.array([left, top, left, top], np.float64)) * scale


def shown_size(size: tuple[int, int], max_side: int = MAX_SHOWN_SIDE) -> tuple[int, int]:
    """``size`` (height, width) scaled down to ``max_side`` on its longer side, aspect kept.

    Sizes within ``max_side`` are returned unchanged; sides are rounded, at least 1.

    >>> shown_size((9000, 6000)), shown_size((300, 200))
    ((4096, 2731), (300, 200))
    """
    height, width = int(size[0]), int(size[1])
    if isinstance(max_side, bool) or not isinstance(max_side, (int, np.integer)) \
            or max_side < 1:
        raise ValueError(f"max_side must be a positive int, got {max_side!r}")
    longer = max(height, width)
    if longer <= max_side:
        return height, width
    return max(1, round(height * max_side / longer)), max(1, round(width * max_side / longer))


def fit(
    image: np.ndarray, size: tuple[int, int], mode: str = "stretch"
) -> tuple[np.ndarray, Placement]:
    """Resize an image to a model's input size and record how, to map results back.

    Modes (all resize with Pillow's bilinear filter):

    - ``"stretch"`` (default): resize to ``size`` ignoring the aspect ratio, as Keras'
      image loading does (``image_dataset_from_directory`` also resizes bilinearly);
    - ``"crop"``: scale so the image covers ``size``, then cut the centre;
    - ``"pad"``: scale so the image fits inside ``size``, then centre it on zeros.

    Args:
        image: ``uint8`` array of shape ``(H, W, C)`` with ``C`` 1 or 3. Not modified.
        size: ``(height, width)`` of the model input, positive ints.
        mode: One of :data:`RESIZE_MODES`.

    Returns:
        ``(resized, placement)``: a new ``uint8`` array of shape ``(height, width, C)``
        and the :class:`Placement` that maps maps of that shape back.

    Raises:
        ValueError: Unknown mode, a bad size, or an image that is not ``uint8``
            ``(H, W, 1 or 3)``.

    >>> import numpy as np
    >>> resized, placement = fit(np.zeros((100, 200, 3), np.uint8), (50, 50), "crop")
    >>> resized.shape, placement.box, placement.original_box
    ((50, 50, 3), (0, 25, 50, 75), (0, 50, 100, 150))
    """
    if mode not in RESIZE_MODES:
        raise ValueError(f"unknown resize mode {mode!r}; expected one of {', '.join(RESIZE_MODES)}")
    height, width = _check_size(size)
    pixels = np.asarray(image)
    if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[2] not in (1, 3):
        raise ValueError(
            f"image must be a uint8 array of shape (H, W, 1) or (H, W, 3), "
            f"got dtype {pixels.dtype} and shape {pixels.shape}"
        )
    if pixels.shape[0] < 1 or pixels.shape[1] < 1:
        raise ValueError(f"image must not be empty, got shape {pixels.shape}")
    original_h, original_w = pixels.shape[:2]
    if mode == "stretch":
        scaled_h, scaled_w = height, width
    else:
        pick = max if mode == "crop" else min
        scale = pick(height / original_h, width / original_w)
        scaled_h = max(1, round(original_h * scale))
        scaled_w = max(1, round(original_w * scale))
        # Rounding must not leave a gap (crop) or overflow (pad) on the matched side.
        clamp = max if mode == "crop" else min
        scaled_h, scaled_w = clamp(scaled_h, height), clamp(scaled_w, width)
    if mode == "pad":  # the window reaches past the scaled image: negative top/left
        top, left = -((height - scaled_h) // 2), -((width - scaled_w) // 2)
    else:
        top, left = (scaled_h - height) // 2, (scaled_w - width) // 2
    placement = Placement(
        mode=mode,
        original_size=(original_h, original_w),
        size=(height, width),
        scaled_size=(scaled_h, scaled_w),
        box=(top, left, top + height, left + width),
    )
    scaled = resize_picture(pixels, (scaled_h, scaled_w))
    out = np.zeros((height, width, pixels.shape[2]), dtype=np.uint8)
    c_top, c_left, c_bottom, c_right = placement.content_box
    out[c_top:c_bottom, c_left:c_right] = scaled[
        c_top + top : c_bottom + top, c_left + left : c_right + left
    ]
    return out, placement


def _check_size(size: tuple[int, int]) -> tuple[int, int]:
    try:
        height, width = size
    except (TypeError, ValueError):
        raise ValueError(f"size must be (height, width), got {size!r}") from None
    for side in (height, width):
        if isinstance(side, bool) or not isinstance(side, (int, np.integer)) or side < 1:
            raise ValueError(f"size must be two positive ints (height, width), got {size!r}")
    return int(height), int(width)


def _scale_span(start: int, stop: int, original: int, scaled: int) -> tuple[int, int]:
    """Map ``[start, stop)`` in scaled pixels to whole original pixels (at least one)."""
    first = min(original - 1, round(start * original / scaled))
    last = max(first + 1, min(original, round(stop * original / scaled)))
    return first, last


def resize_picture(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A uint8 ``(H, W, C)`` picture resized bilinearly to ``size`` ``(h, w)`` (a copy)."""
    if pixels.shape[:2] == size:
        return pixels.copy()
    # Channel by channel: Pillow would hold an RGB picture at 4 bytes a pixel, and
    # resamples each band alike either way (same bytes).
    resized = np.empty((size[0], size[1], pixels.shape[2]), dtype=np.uint8)
    for channel in range(pixels.shape[2]):
        plane = Image.fromarray(np.ascontiguousarray(pixels[:, :, channel]))
        resized[:, :, channel] = plane.resize((size[1], size[0]), Image.Resampling.BILINEAR)
    return resized


def resize_map(
    saliency: np.ndarray, size: Sequence[int], *, out: np.ndarray | None = None
) -> np.ndarray:
    """Resize a saliency map bilinearly, channel by channel, in 32-bit float.

    Uses Pillow's ``BILINEAR`` filter on mode ``'F'`` images (pixel centres
    aligned, edges clamped; when shrinking, the filter widens to average every
    covered pixel). Values are not rescaled: a constant map stays constant.

    Args:
        saliency: Real array of shape ``(h, w, C)``, ``C >= 1``.
        size: Target ``(H, W)``, two positive integers (height first, like
            numpy shapes).
        out: Where to write the result, a float32 array (or view) of shape
            ``(H, W, C)``; a new array when ``None``. Only one channel at a time is
            held besides it.

    Returns:
        ``float32`` array of shape ``(H, W, C)`` (``out`` when given).

    Raises:
        ValueError: If ``saliency`` is not a non-empty real 3-D array,
            ``size`` is not two positive integers, or ``out`` has the wrong shape or
            dtype.

    >>> resize_map(np.array([[[0.0], [1.0]]]), (1, 4))[0, :, 0].tolist()
    [0.0, 0.25, 0.75, 1.0]
    """
    values = np.asarray(saliency)
    if values.ndim != 3 or 0 in values.shape:
        raise ValueError(f"saliency map must have shape (h, w, C) and be non-empty, "
                         f"got shape {values.shape}")
    if values.dtype.kind not in "biuf":
        raise ValueError(f"saliency map must be a real array, got dtype {values.dtype}")
    if (not isinstance(size, (tuple, list)) or len(size) != 2
            or not all(isinstance(side, (int, np.integer)) and not isinstance(side, bool)
                       for side in size)
            or min(size) < 1):
        raise ValueError(f"size must be (H, W) with two positive integers, got {size!r}")
    height, width = int(size[0]), int(size[1])
    shape = (height, width, values.shape[2])
    if out is None:
        out = np.empty(shape, dtype=np.float32)
    elif out.shape != shape or out.dtype != np.float32:
        raise ValueError(f"out must be a float32 array of shape {shape}, "
                         f"got {out.dtype} {out.shape}")
    for channel in range(values.shape[2]):
        plane = np.ascontiguousarray(values[:, :, channel], dtype=np.float32)
        image = Image.fromarray(plane).resize(  # mode 'F'
            (width, height), resample=Image.Resampling.BILINEAR)
        out[:, :, channel] = image
        del image
    return out


def model_size(
    input_shape: tuple, image_size: tuple[int, int], size: tuple[int, int] | None = None
) -> tuple[int, int]:
    """The ``(H, W)`` an image is fitted to: the model's own, else ``size``, else the image's.

    Args:
        input_shape: The model's ``(H, W, C)``, ``None`` for free dimensions.
        image_size: The decoded image's ``(H, W)``.
        size: The size asked for, used only by models with free spatial dimensions.
    """
    height, width = input_shape[0], input_shape[1]
    if height is not None and width is not None:
        return int(height), int(width)
    return tuple(size) if size else tuple(image_size[:2])


def draft_side(input_shape: tuple, size: tuple[int, int] | None = None) -> int | None:
    """The longer side a decoded image needs: ``decode_image(draft_side=...)``'s argument.

    :data:`MAX_SHOWN_SIDE` (maps and renders go no larger), or the model's input side
    where that is larger; ``None`` (decode whole) for a model with free spatial
    dimensions and no ``size``, whose input is the image's own size.

    >>> draft_side((224, 224, 3)), draft_side((None, None, 3)), draft_side((None, None, 3), (9, 9))
    (4096, None, 4096)
    """
    height, width = input_shape[0], input_shape[1]
    if height is None or width is None:
        if not size:
            return None
        height, width = size
    return max(MAX_SHOWN_SIDE, int(height), int(width))
