"""Where :class:`~guidedbp.keras.SaliencyCallback`'s pictures go, one logged step at a
time: TensorBoard image summaries in its event file, and PNG files.

The summaries are written with ``tf.summary.write`` in the format of TensorBoard's
image plugin (``tensorboard/plugins/image/summary_v2.py``: a string tensor
``[width, height, png]`` and plugin ``"images"`` metadata), so training does not need
the ``tensorboard`` package installed; only viewing them does.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from guidedbp.engine.methods import registry
from guidedbp.io.write import encode_png, save_png

__all__ = ["IMAGE_PLUGIN", "StepWriter", "describe_maps", "write_image"]

#: TensorBoard's image plugin name (``tensorboard/plugins/image/metadata.py``).
IMAGE_PLUGIN = "images"


class StepWriter:
    """Writes each logged step's pictures: as TensorBoard images into ``log_dir``'s event
    file (opened at the first step, and again after :meth:`close`), and as PNGs
    ``png_dir/step-<step>/image-<i>.<method>.<render>.png``.

    Args:
        log_dir: The event file's folder, or ``None``.
        png_dir: The PNGs' folder, or ``None``.
        count: How many images each step has (their names' width: ``image-00``).
        pictures: The pictures explained, logged once as ``picture/image-<i>``, or
            ``None``.
        renders: Each method's render, for the PNG names.
        descriptions: Each method's summary description (:func:`describe_maps`).
    """

    def __init__(self, log_dir: str | None, png_dir: str | None, count: int,
                 pictures: np.ndarray | None, renders: dict[str, str],
                 descriptions: dict[str, str]):
        self.log_dir, self.png_dir = log_dir, png_dir
        self.pictures, self.renders, self.descriptions = pictures, renders, descriptions
        self._index_width = max(2, len(str(count - 1)))
        self._writer = None
        self._pictures_logged = False

    def write(self, step: int, drawn: dict[tuple[str, int], np.ndarray]) -> None:
        """Write one step's pictures, by ``(method, image index)``."""
        if self.log_dir is not None:
            if self._writer is None:  # closed at the end of training; reopened for more
                self._writer = tf.summary.create_file_writer(self.log_dir)
            with self._writer.as_default():
                if self.pictures is not None and not self._pictures_logged:
                    for index, picture in enumerate(self.pictures):
                        write_image(f"picture/{self._image_name(index)}", picture, step,
                                    "The picture explained, as given.")
                    self._pictures_logged = True
                for (name, index), picture in drawn.items():
                    write_image(f"{name}/{self._image_name(index)}", picture, step,
                                self.descriptions[name])
            self._writer.flush()
        if self.png_dir is not None:
            folder = os.path.join(self.png_dir, f"step-{step:04d}")
            for (name, index), picture in drawn.items():
                save_png(os.path.join(folder, f"{self._image_name(index)}.{name}."
                                              f"{self.renders[name]}.png"), picture)

    def close(self) -> None:
        """Close the event file (the next :meth:`write` opens a new one)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _image_name(self, index: int) -> str:
        return f"image-{index:0{self._index_width}d}"


def describe_maps(name: str, render: str, tile: int | None, given_classes: bool) -> str:
    """The summary description of method ``name``'s pictures: the method and its paper,
    which class, how they are drawn."""
    record = registry.method(name)
    which = "the given class" if given_classes else "each image's top-1 class at that epoch"
    panel = "" if tile is None else \
        f" in a panel ({tile} px, with the class, its probability and a colorbar)"
    return (f"{record.title} ({record.paper}) of {which}, drawn as "
            f"'{render}'{panel}. Step: the epoch index (0-based).")


def write_image(tag: str, picture: np.ndarray, step: int, description: str) -> None:
    """One picture as a TensorBoard image summary, the image plugin's format: a string
    tensor ``[width, height, png]`` with plugin ``"images"`` metadata (its content, an
    ``ImagePluginData`` with no field set, serialises to ``b""``)."""
    height, width = picture.shape[:2]
    tensor = tf.constant([str(width).encode(), str(height).encode(), encode_png(picture)])
    metadata = summary_pb2.SummaryMetadata(
        summary_description=description,
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=IMAGE_PLUGIN,
                                                           content=b""),
    )
    tf.summary.write(tag, tensor, step=step, metadata=metadata)
