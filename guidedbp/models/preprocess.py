"""Input preprocessing for image classifiers (numpy only): the pixel values a model expects.

:func:`preprocess` reproduces the ``preprocess_input`` functions of
``keras.applications`` without importing Keras; :data:`KERAS_APPLICATIONS` says which
mode and input size each application uses. :func:`prepare` fits a decoded image to a
model's input size (:mod:`guidedbp.models.resizing`, whose :func:`fit`,
:class:`Placement` and the rest are importable from here too) and preprocesses it.

>>> import numpy as np
>>> preprocess(np.array([[[0, 255, 51]]], dtype=np.uint8), "scale01")
array([[[0. , 1. , 0.2]]], dtype=float32)
>>> KERAS_APPLICATIONS["resnet50"]
KerasApplication(name='ResNet50', preprocess='caffe', default_size=224)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# Resizing's names, importable from here as before it had a module of its own.
from guidedbp.models.resizing import (
    MAX_SHOWN_SIDE,
    RESIZE_MODES,
    Placement,
    draft_side,
    fit,
    model_size,
    resize_map,
    resize_picture,
    shown_size,
)

__all__ = [
    "KERAS_APPLICATIONS",
    "MAX_SHOWN_SIDE",
    "PREPROCESS_MODES",
    "RESIZE_MODES",
    "KerasApplication",
    "Placement",
    "fit",
    "draft_side",
    "preprocess",
    "resize_map",
    "resize_picture",
    "shown_size",
]

#: Pixel preprocessing modes understood by :func:`preprocess`.
PREPROCESS_MODES = ("none", "scale01", "tf", "caffe", "torch")

# BGR order, as keras.applications.imagenet_utils uses after flipping RGB to BGR.
_CAFFE_MEAN_BGR = np.array([103.939, 116.779, 123.68], dtype=np.float32)
_TORCH_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
_TORCH_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
_GRAY_MODES = ("none", "scale01", "tf")


def preprocess(pixels: np.ndarray, mode: str) -> np.ndarray:
    """Scale RGB pixel values in 0..255 the way a model family expects.

    Modes (the names ``keras.applications`` uses):

    - ``"none"``: unchanged, as float32 (models that rescale inside themselves);
    - ``"scale01"``: ``x / 255``, to 0..1;
    - ``"tf"``: ``x / 127.5 - 1``, to -1..1;
    - ``"caffe"``: RGB to BGR, then subtract the ImageNet mean ``[103.939, 116.779,
      123.68]`` (BGR order), no scaling;
    - ``"torch"``: ``x / 255``, minus mean ``[0.485, 0.456, 0.406]``, divided by std
      ``[0.229, 0.224, 0.225]`` (RGB order).

    Args:
        pixels: ``uint8`` or float array of shape ``(N, H, W, C)`` or ``(H, W, C)``,
            RGB when ``C == 3``, values in 0..255. It is not modified.
        mode: One of :data:`PREPROCESS_MODES`. ``"caffe"`` and ``"torch"`` need
            ``C == 3``.

    Returns:
        A new float32 array of the same shape.

    Raises:
        ValueError: Unknown mode, wrong number of dimensions, a non-numeric dtype, or a
            channel count the mode cannot handle.

    >>> import numpy as np
    >>> preprocess(np.full((1, 1, 3), 255, dtype=np.uint8), "tf")
    array([[[1., 1., 1.]]], dtype=float32)
    """
    if mode not in PREPROCESS_MODES:
        raise ValueError(
            f"unknown preprocess mode {mode!r}; expected one of {', '.join(PREPROCESS_MODES)}"
        )
    array = np.asarray(pixels)
    if array.ndim not in (3, 4):
        raise ValueError(
            f"pixels must have shape (N, H, W, C) or (H, W, C), got shape {array.shape}"
        )
    if array.dtype == np.bool_ or not (
        np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
    ):
        raise ValueError(f"pixels must be an integer or float array, got dtype {array.dtype}")
    channels = array.shape[-1]
    if mode not in _GRAY_MODES and channels != 3:
        raise ValueError(
            f"preprocess mode {mode!r} needs 3 (RGB) channels, got {channels}; "
            f"with {channels} channel(s) use one of {', '.join(_GRAY_MODES)}"
        )
    values = array.astype(np.float32)  # always a copy
    if mode == "scale01":
        values /= 255.0
    elif mode == "tf":
        values /= 127.5
        values -= 1.0
    elif mode == "caffe":
        values = values[..., ::-1] - _CAFFE_MEAN_BGR
    elif mode == "torch":
        values /= 255.0
        values -= _TORCH_MEAN
        values /= _TORCH_STD
    return np.ascontiguousarray(values, dtype=np.float32)


class KerasApplication(NamedTuple):
    """One ``keras.applications`` model: its name, preprocessing and default input side."""

    name: str
    """Constructor name in ``keras.applications``, e.g. ``"ResNet50"``."""
    preprocess: str
    """The :data:`PREPROCESS_MODES` entry its ``preprocess_input`` performs."""
    default_size: int
    """Default input height and width (ImageNet weights are trained at this size)."""


def _table(preprocess_mode: str, *sized_names: tuple[str, int]) -> dict[str, KerasApplication]:
    return {
        name.lower(): KerasApplication(name, preprocess_mode, size) for name, size in sized_names
    }


#: Every model constructor in ``keras.applications`` (Keras 3.15), keyed by lower-cased
#: name. ``"none"`` marks models that rescale their input themselves, whose
#: ``preprocess_input`` is the identity (MobileNetV3, EfficientNet, EfficientNetV2,
#: ConvNeXt). MobileNetV3 accepts any size of at least 32; its weights are for 224.
KERAS_APPLICATIONS: dict[str, KerasApplication] = {
    **_table("caffe", ("ResNet50", 224), ("ResNet101", 224), ("ResNet152", 224)),
    **_table("caffe", ("VGG16", 224), ("VGG19", 224)),
    **_table("tf", ("ResNet50V2", 224), ("ResNet101V2", 224), ("ResNet152V2", 224)),
    **_table("tf", ("InceptionV3", 299), ("InceptionResNetV2", 299), ("Xception", 299)),
    **_table("tf", ("MobileNet", 224), ("MobileNetV2", 224)),
    **_table("tf", ("NASNetMobile", 224), ("NASNetLarge", 331)),
    **_table("torch", ("DenseNet121", 224), ("DenseNet169", 224), ("DenseNet201", 224)),
    **_table("none", ("MobileNetV3Small", 224), ("MobileNetV3Large", 224)),
    **_table(
        "none",
        ("EfficientNetB0", 224),
        ("EfficientNetB1", 240),
        ("EfficientNetB2", 260),
        ("EfficientNetB3", 300),
        ("EfficientNetB4", 380),
        ("EfficientNetB5", 456),
        ("EfficientNetB6", 528),
        ("EfficientNetB7", 600),
    ),
    **_table(
        "none",
        ("EfficientNetV2B0", 224),
        ("EfficientNetV2B1", 240),
        ("EfficientNetV2B2", 260),
        ("EfficientNetV2B3", 300),
        ("EfficientNetV2S", 384),
        ("EfficientNetV2M", 480),
        ("EfficientNetV2L", 480),
    ),
    **_table(
        "none",
        ("ConvNeXtTiny", 224),
        ("ConvNeXtSmall", 224),
        ("ConvNeXtBase", 224),
        ("ConvNeXtLarge", 224),
        ("ConvNeXtXLarge", 224),
    ),
}


def prepare(
    image: np.ndarray,
    input_shape: tuple,
    mode: str,
    size: tuple[int, int] | None = None,
    resize: str = "stretch",
) -> tuple[np.ndarray, Placement, np.ndarray]:
    """A decoded image made ready for a model: fitted to its size, then preprocessed.

    Returns:
        ``(fitted, placement, model_input)``: the uint8 picture at model resolution, the
        :class:`Placement` that maps maps back, and the float32 model input.
    """
    fitted, placement = fit(image, model_size(input_shape, image.shape[:2], size), resize)
    return fitted, placement, preprocess(fitted, mode)
