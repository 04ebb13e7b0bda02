"""A detector's detection as a target: :class:`Detection`, the box formats it reads.

``Detection(box, label=None)`` explains the detection that best matches ``box``:
``max_j IoU(box, box_j) * p_j[label] ** score_weight`` over the model's proposals
(D-RISE's similarity; Petsiuk et al., CVPR 2021). The traced pass reads the proposals
with :mod:`guidedbp.engine.targets.proposals`.

Importing this module does not import TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guidedbp.engine.targets.kinds import OutputName, Target, check_output, index_of
from guidedbp.errors import ArgumentError

__all__ = ["BOXES_FORMATS", "BOX_FORMATS", "Detection", "as_corners"]


#: How :class:`Detection` boxes may be written: corners ``(x0, y0, x1, y1)``, the same
#: as rows first ``(y0, x0, y1, x1)``, or a corner and the size ``(x0, y0, width, height)``.
BOX_FORMATS = ("xyxy", "yxyx", "xywh")
#: How a detector's boxes output may be written (Keras' bounding box formats): in input
#: pixels, or ``rel_`` relative to the input's width and height (``center_``: the centre
#: and the size).
BOXES_FORMATS = ("xyxy", "yxyx", "xywh", "center_xywh", "center_yxhw", "rel_xyxy",
                 "rel_yxyx", "rel_xywh", "rel_center_xywh", "rel_center_yxhw")


@dataclass(frozen=True, eq=False, init=False)
class Detection(Target):
    """One detection of a detector: the proposal that best matches ``box``.

    The score is D-RISE's similarity with a class score in place of the class vectors'
    cosine (Petsiuk et al., *Black-box explanation of object detectors via saliency
    maps*, CVPR 2021): ``max_j IoU(box, box_j) * p_j[label] ** score_weight`` over the
    model's proposals ``j``, ``p_j`` each proposal's class probabilities. Every method
    explains it: the gradient methods differentiate it (through the matched proposal's
    box and class score), the perturbation methods watch it move as proposals come and
    go. ``score_weight=0`` explains where the box is alone (its IoU).

    The detector is read from its outputs: a keras-hub ``RetinaNetObjectDetector`` or
    ``DFineObjectDetector`` (their raw outputs decoded to boxes, their logits through a
    sigmoid), or a model with a boxes output ``(B, N, 4)`` in input pixels or relative
    to the input (``boxes_format``) and a class scores output ``(B, N, C)``
    (probabilities behind a sigmoid or softmax; raw logits go through a sigmoid), found
    by their names (``boxes``/``scores``, ...) or shapes, or named by ``boxes=`` and
    ``scores=``.

    Args:
        box: The box, ``(4,)``, or one per image ``(N, 4)``, in ``box_format``, in the
            pixels of the model's input, or of an image of ``image_size`` stretched to
            it (the command line maps each file's boxes through its resizing).
        label: The class (an index, or a name where the model has class names); ``None``:
            the class of the proposal that best matches the box on the clean image.
        score_weight: The exponent of the class score (1: D-RISE's; 0: the IoU alone).
        box_format: How ``box`` is written, one of :data:`BOX_FORMATS` (the model's
            boxes output is read in ``boxes_format``).
        image_size: ``(height, width)`` the box's pixels belong to, or ``None``: the
            model's input.
        threshold: Below this class score or an IoU of 0.5, the matched proposal is no
            detection of the box: its maps carry the ``no-detection`` caveat.
        boxes: The output holding the boxes (a name or index), where it cannot be found.
        scores: The output holding the class scores, likewise.
        name: How it is labelled (``det:NAME``); else ``box:X0,Y0,X1,Y1[:LABEL]``.
        output: The output the detector's outputs are read from, where the model has
            several heads of which one is the detector (rarely needed).
        boxes_format: How a plain model's boxes output is written, one of
            :data:`BOXES_FORMATS` (``rel_``: relative to the input's width and height);
            keras-hub's detectors are decoded as their own decoders do whatever it is.
    """

    box: np.ndarray
    class_label: int | str | None
    score_weight: float
    box_format: str
    image_size: tuple[int, int] | None
    threshold: float
    boxes: OutputName
    scores: OutputName
    name: str | None
    output: OutputName
    boxes_format: str
    kind = "detection"

    def __init__(self, box, label: int | str | None = None, score_weight: float = 1.0,
                 box_format: str = "xyxy", image_size: tuple[int, int] | None = None,
                 threshold: float = 0.3, boxes: OutputName = None, scores: OutputName = None,
                 name: str | None = None, output: OutputName = None,
                 boxes_format: str = "xyxy"):
        # ``label`` is every target's name in files and panels: the class is kept as
        # class_label.
        for field_name, value in (("box", box), ("class_label", label),
                                  ("score_weight", score_weight), ("box_format", box_format),
                                  ("image_size", image_size), ("threshold", threshold),
                                  ("boxes", boxes), ("scores", scores), ("name", name),
                                  ("output", output), ("boxes_format", boxes_format)):
            object.__setattr__(self, field_name, value)
        self.__post_init__()

    def __post_init__(self):
        if self.box_format not in BOX_FORMATS:
            raise ArgumentError(f"box_format={self.box_format!r} is not one of "
                                f"{', '.join(BOX_FORMATS)}")
        if self.boxes_format not in BOXES_FORMATS:
            raise ArgumentError(f"boxes_format={self.boxes_format!r} is not one of "
                                f"{', '.join(BOXES_FORMATS)}")
        try:
            box = np.asarray(self.box, dtype=np.float64)
        except (TypeError, ValueError):
            raise ArgumentError(f"Detection box {self.box!r} is not four numbers") from None
        if box.ndim not in (1, 2) or box.shape[-1] != 4 or 0 in box.shape:
            raise ArgumentError(f"Detection box must be 4 numbers (x0, y0, x1, y1) or one "
                                f"row of 4 per image, got shape {box.shape}")
        if not np.isfinite(box).all():
            raise ArgumentError(f"Detection box {_box_text(box)} is not finite")
        corners = as_corners(box, self.box_format)
        width, height = corners[..., 2] - corners[..., 0], corners[..., 3] - corners[..., 1]
        if (width < 0).any() or (height < 0).any():
            raise ArgumentError(f"Detection box {_box_text(box)} is inverted: x1 must be "
                                f"above x0 and y1 above y0 ({self.box_format})")
        if (width == 0).any() or (height == 0).any():
            raise ArgumentError(f"Detection box {_box_text(box)} is empty: it has no area")
        object.__setattr__(self, "box", box)
        if self.class_label is not None and not isinstance(self.class_label, str):
            index_of(self.class_label, "Detection label")
            object.__setattr__(self, "class_label", int(self.class_label))
        weight = self.score_weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float, np.number)) \
                or not 0 <= weight < float("inf"):
            raise ArgumentError(f"score_weight={weight!r} must be a number >= 0")
        threshold = self.threshold
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.number)) \
                or not 0 <= threshold <= 1:
            raise ArgumentError(f"threshold={threshold!r} must be a number in [0, 1]")
        if self.image_size is not None:
            size = tuple(self.image_size)
            if len(size) != 2 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer))
                                     or v < 1 for v in size):
                raise ArgumentError(f"image_size={self.image_size!r} must be (height, width), "
                                    "positive integers")
            object.__setattr__(self, "image_size", (int(size[0]), int(size[1])))
        for output in (self.output, self.boxes, self.scores):
            check_output(output)

    def with_label(self, index: int, name: str | None = None) -> Detection:
        """This target with class ``index`` (a class name resolved), labelled ``name``."""
        import copy

        twin = copy.copy(self)
        object.__setattr__(twin, "class_label", index_of(index, "Detection label"))
        if name is not None and self.name is None:
            object.__setattr__(twin, "name", None)
            object.__setattr__(twin, "_label_name", name)
        return twin

    def corners(self, count: int, size: tuple[int, int]) -> np.ndarray:
        """float32 ``(count, 4)``: the box of each of ``count`` images as corners
        ``(x0, y0, x1, y1)`` in the pixels of a model input of ``size`` ``(height,
        width)``.

        Raises:
            ArgumentError: One box per image for another number of images, or a box that
                lies wholly outside the image.
        """
        corners = as_corners(self.box, self.box_format)
        if corners.ndim == 2 and len(corners) != count:
            raise ArgumentError(f"Detection has {len(corners)} boxes for {count} images")
        corners = np.broadcast_to(corners, (count, 4)).astype(np.float64)
        if self.image_size is not None:
            scale = np.array([size[1] / self.image_size[1], size[0] / self.image_size[0]] * 2)
            corners = corners * scale
        outside = ((corners[:, 2] <= 0) | (corners[:, 3] <= 0) | (corners[:, 0] >= size[1])
                   | (corners[:, 1] >= size[0]))
        if outside.any():
            where = self.image_size or size
            box = self.box[int(np.argmax(outside))] if self.box.ndim == 2 else self.box
            raise ArgumentError(f"Detection box {_box_text(box)} lies outside the "
                                f"{where[1]}x{where[0]} image")
        return corners.astype(np.float32)

    @property
    def label(self) -> str:
        if self.name:
            return f"det:{self.name}"
        box = self.box if self.box.ndim == 1 else None
        where = "box:" + (",".join(_number(v) for v in box) if box is not None else "per-image")
        shown = getattr(self, "_label_name", None) or self.class_label
        return where if shown is None else f"{where}:{shown}"


def as_corners(box: np.ndarray, box_format: str) -> np.ndarray:
    """``box`` (``(..., 4)`` in ``box_format``) as corners ``(x0, y0, x1, y1)``.

    >>> as_corners(np.array([10., 20, 30, 40]), "xywh").tolist()
    [10.0, 20.0, 40.0, 60.0]
    """
    box = np.asarray(box, np.float64)
    if box_format == "yxyx":
        return box[..., [1, 0, 3, 2]]
    if box_format == "xywh":
        return np.concatenate([box[..., :2], box[..., :2] + box[..., 2:]], axis=-1)
    return box


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _box_text(box) -> str:
    return "(" + ", ".join(_number(v) if np.isfinite(v) else str(v)
                           for v in np.asarray(box).reshape(-1)[:4]) + ")"
