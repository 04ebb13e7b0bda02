"""guidedbp's own Keras layers, registered so that a ``.keras`` file using them loads
safely (no ``Lambda``, no ``unsafe_deserialization``).

:func:`~guidedbp.models.keras_files.load_keras_file` imports this module before it loads
any file, so the bundled detector (``demo-det``) and any model a user builds with these
layers load like plain Keras ones. Importing it imports Keras (and TensorFlow): it is
imported only where Keras already is.

>>> import numpy as np
>>> distances = np.full((1, 2, 2, 4), 0.5, np.float32)  # half a cell on every side
>>> np.asarray(GridBoxes(stride=8)(distances))[0].tolist()
[[0.0, 0.0, 8.0, 8.0], [8.0, 0.0, 16.0, 8.0], [0.0, 8.0, 8.0, 16.0], [8.0, 8.0, 16.0, 16.0]]
"""

from __future__ import annotations

import keras
from keras import ops

__all__ = ["GridBoxes"]


@keras.saving.register_keras_serializable(package="guidedbp")
class GridBoxes(keras.layers.Layer):
    """Boxes of an anchor-free grid head (FCOS, Tian et al., 2019): each cell's distances
    to the four sides of its box, made into the box in input pixels.

    The input ``(B, H, W, 4)`` holds, per cell of ``stride x stride`` input pixels, the
    distances ``(l, t, r, b)`` from the cell's centre to its box's left, top, right and
    bottom sides, in units of ``stride`` (non-negative: the caller's activation sees to
    that). The output ``(B, H * W, 4)`` is each cell's box ``(x0, y0, x1, y1)`` =
    ``centre + stride * (-l, -t, r, b)`` in input pixels, cells in row-major order; cell
    ``(i, j)``'s centre is ``((j + 0.5) * stride, (i + 0.5) * stride)``. With a
    ``min_distance``, every distance is that much longer, so that every box is at least
    ``2 * min_distance * stride`` pixels wide and high, ``x0 < x1`` and ``y0 < y1`` even
    where the distances underflow to zero. With ``clip``, the boxes are cut to the
    image the grid covers, ``(0, 0, W * stride, H * stride)``: a box keeps its cell's
    centre inside it, so ``x0 < x1`` and ``y0 < y1`` still hold with a ``min_distance``.

    Args:
        stride: Input pixels per cell side, a positive integer.
        min_distance: Added to each distance, in units of ``stride``; ``>= 0``.
        clip: Cut the boxes to the image.
        **kwargs: Passed to ``keras.layers.Layer`` (``name``...).

    Raises:
        ValueError: For a stride that is not a positive integer, or a negative
            ``min_distance``.
    """

    def __init__(self, stride: int, min_distance: float = 0.0, clip: bool = False, **kwargs):
        super().__init__(**kwargs)
        if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
            raise ValueError(f"stride={stride!r} must be a positive integer")
        if not min_distance >= 0:
            raise ValueError(f"min_distance={min_distance!r} must be non-negative")
        self.stride = stride
        self.min_distance = float(min_distance)
        self.clip = bool(clip)

    def call(self, distances):
        rows, cols = ops.shape(distances)[1], ops.shape(distances)[2]
        stride = float(self.stride)
        ys = (ops.arange(rows, dtype=distances.dtype) + 0.5) * stride
        xs = (ops.arange(cols, dtype=distances.dtype) + 0.5) * stride
        centre_y, centre_x = ops.meshgrid(ys, xs, indexing="ij")
        centres = ops.stack([centre_x, centre_y, centre_x, centre_y], axis=-1)  # (H, W, 4)
        sides = ops.convert_to_tensor([-stride, -stride, stride, stride], distances.dtype)
        boxes = centres[None] + (distances + self.min_distance) * sides
        if self.clip:
            high = ops.convert_to_tensor([cols, rows, cols, rows], distances.dtype) * stride
            boxes = ops.minimum(ops.maximum(boxes, 0.0), high)
        return ops.reshape(boxes, (-1, rows * cols, 4))

    def compute_output_shape(self, input_shape):
        rows, cols = input_shape[1], input_shape[2]
        cells = rows * cols if rows is not None and cols is not None else None
        return (input_shape[0], cells, 4)

    def get_config(self) -> dict:
        return {**super().get_config(), "stride": self.stride,
                "min_distance": self.min_distance, "clip": self.clip}
