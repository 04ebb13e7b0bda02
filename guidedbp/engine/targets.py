"""What to explain: a class, one output unit, a segmentation region, a similarity, any score.

A target turns the model's output into one score per image, ``(B,)``; every method
explains that score (the gradient methods differentiate it, the perturbation methods
watch it move). Up to four targets share one forward pass
(:meth:`~guidedbp.engine.explainer.Explainer.explain_targets`), as the classes of
:meth:`~guidedbp.engine.explainer.Explainer.explain_top_k` do; more take a forward pass
per four, each target its own backward pass, with at most four traces per kind of target
whatever their number.

- :class:`Class` ``(c)``: today's rule, the logit behind a softmax or sigmoid head.
- :class:`Unit` ``(i)``: one raw output unit, nothing stripped (a regression output,
  a multi-label logit, a box coordinate).
- :class:`Region` ``(c, mask=None)``: for an output ``(B, H', W', C)``, the sum of class
  ``c``'s logits over the pixels the model assigns to ``c`` (its argmax), or over
  ``mask``.
- :class:`Similarity` ``(reference)``: the cosine similarity between the image's output
  (an embedding) and the reference's.
- :class:`Score` ``(function)``: any function of the output to ``(B,)``; a plain callable
  given as ``target=`` becomes one.
- :class:`Detection` ``(box, label=None)``: a detector's detection that best matches
  ``box``: ``max_j IoU(box, box_j) * p_j[label]`` over the model's proposals (D-RISE's
  similarity; Petsiuk et al., CVPR 2021).
- :class:`Text` ``(prompt, contrast=())``: for a two-tower model (CLIP, SigLIP), the
  cosine similarity between the image's embedding and a text prompt's, or the prompt's
  zero-shot log-probability against ``contrast`` prompts.

Each names the ``output`` it reads (a name or an index) where the model has several;
``None`` reads the explainer's ``output=``. Like a class, a target is fixed on the clean
image: the region that ``Region(c)`` finds there and the reference's embedding stay the
same for SmoothGrad's noisy copies, integrated gradients' path and the perturbed copies
of occlusion and Score-CAM.

Importing this module does not import TensorFlow.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from guidedbp._text import not_text
from guidedbp.errors import ArgumentError

__all__ = ["Class", "Detection", "Region", "Score", "Similarity", "Target", "Text", "Unit",
           "as_target"]

#: An output of a multi-output model: its name, or its index.
OutputName = str | int | None


class Target:
    """What every method explains: one score per image, read off the model's output.

    Attributes:
        kind: ``"class"``, ``"unit"``, ``"region"``, ``"similar"``, ``"score"``,
            ``"detection"`` or ``"text"``.
        output: The output it reads (a name or an index), or ``None`` for the
            explainer's.
    """

    kind = ""
    output: OutputName = None

    @property
    def label(self) -> str:
        """How the target is named in file names, manifests and panels:
        ``class:3``, ``unit:2``, ``region:1``, ``similar``, ``score:NAME``."""
        raise NotImplementedError


def _check_output(output) -> None:
    if output is not None and (isinstance(output, bool)
                               or not isinstance(output, (str, int, np.integer))):
        raise ArgumentError(f"output={output!r} must be an output's name or index")


def _index(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ArgumentError(f"{what}={value!r} must be a non-negative integer")
    return int(value)


@dataclass(frozen=True, eq=False)
class Class(Target):
    """Class ``index``'s score: the logit behind the model's softmax or sigmoid head (a
    single logit ``z`` behind a sigmoid scores class 1 as ``z``, class 0 as ``-z``), as
    ``target=index`` does. One output unit with no sigmoid or softmax head is a value,
    not a class: a class of it is refused (explain it with ``Unit(0)``)."""

    index: int
    output: OutputName = None
    kind = "class"

    def __post_init__(self):
        _index(self.index, "Class index")
        _check_output(self.output)

    @property
    def label(self) -> str:
        return f"class:{int(self.index)}"


@dataclass(frozen=True, eq=False)
class Unit(Target):
    """One raw output unit, nothing stripped: ``output[:, index]``.

    ``index`` is an int (the flat index over the output's non-batch axes, C order) or a
    tuple with one index per non-batch axis (``(row, column, channel)`` of a map).
    """

    index: int | tuple[int, ...]
    output: OutputName = None
    kind = "unit"

    def __post_init__(self):
        if isinstance(self.index, tuple):
            if not self.index:
                raise ArgumentError("Unit index () is empty")
            for value in self.index:
                _index(value, "Unit index")
        else:
            _index(self.index, "Unit index")
        _check_output(self.output)

    @property
    def label(self) -> str:
        index = self.index
        return f"unit:{','.join(map(str, index)) if isinstance(index, tuple) else index}"


@dataclass(frozen=True, eq=False)
class Region(Target):
    """Class ``index``'s logits summed over a region of a dense output ``(B, H', W', C)``.

    The logits are those behind a softmax or sigmoid head. The region is the pixels
    whose argmax is ``index`` (``mask=None``, found on each clean image), or ``mask``:
    an ``(h, w)`` array for every image or ``(N, h, w)`` one per image, resized to
    ``H' x W'`` by nearest neighbour (half-pixel centres), nonzero inside. ``name`` is
    how it is labelled (``region:NAME``; :class:`guidedbp.Explainer` keeps a class name
    given as ``index`` there).
    """

    index: int | str
    mask: np.ndarray | None = None
    output: OutputName = None
    name: str | None = None
    kind = "region"

    def __post_init__(self):
        if not isinstance(self.index, str):
            _index(self.index, "Region class")
        _check_output(self.output)
        if self.mask is not None:
            mask = np.asarray(self.mask)
            if mask.ndim not in (2, 3) or 0 in mask.shape:
                raise ArgumentError(
                    f"Region mask must be (h, w) or (N, h, w), got shape {mask.shape}")
            if not (np.issubdtype(mask.dtype, np.number) or mask.dtype == bool):
                raise ArgumentError(f"Region mask must be numeric, got dtype {mask.dtype}")
            object.__setattr__(self, "mask", mask)

    @property
    def label(self) -> str:
        return f"region:{self.name or self.index}"


@dataclass(frozen=True, eq=False)
class Similarity(Target):
    """Cosine similarity between each image's output, flattened, and a reference's.

    ``reference`` is the reference embedding (a 1-D array), or a reference image
    ``(H, W, C)`` in the model's input space whose output the explainer computes once;
    :class:`guidedbp.Explainer` also takes an image file's path. ``name`` is how it is
    labelled (``similar:NAME``).
    """

    reference: object
    output: OutputName = None
    name: str | None = None
    kind = "similar"

    def __post_init__(self):
        _check_output(self.output)
        if isinstance(self.reference, (str, os.PathLike)):
            if self.name is None:
                object.__setattr__(self, "name", os.path.basename(os.fspath(self.reference)))
            return
        array = np.asarray(self.reference)
        if array.ndim not in (1, 3) or not np.issubdtype(array.dtype, np.number):
            raise ArgumentError(
                "Similarity reference must be an embedding (1-D), an image (H, W, C) or an "
                f"image file's path, got an array of shape {array.shape}")
        object.__setattr__(self, "reference", array.astype(np.float32))

    @property
    def is_embedding(self) -> bool:
        return np.asarray(self.reference).ndim == 1

    @property
    def label(self) -> str:
        return f"similar:{self.name}" if self.name else "similar"


@dataclass(frozen=True, eq=False)
class Score(Target):
    """Any score: ``function(output) -> (B,)``, traced once per input signature.

    ``function`` receives the chosen output (the target's, else the explainer's), or,
    where none is chosen, the model's whole output (a tensor, or its list or dict of
    outputs).
    """

    function: Callable
    output: OutputName = None
    name: str | None = None
    kind = "score"

    def __post_init__(self):
        if not callable(self.function):
            raise ArgumentError(f"Score function must be callable, got {self.function!r}")
        _check_output(self.output)

    @property
    def label(self) -> str:
        name = self.name or getattr(self.function, "__name__", None)
        return f"score:{name}" if name and name != "<lambda>" else "score"


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
            _index(self.class_label, "Detection label")
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
            _check_output(output)

    def with_label(self, index: int, name: str | None = None) -> Detection:
        """This target with class ``index`` (a class name resolved), labelled ``name``."""
        import copy

        twin = copy.copy(self)
        object.__setattr__(twin, "class_label", _index(index, "Detection label"))
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


def as_target(target) -> Target | None:
    """``target`` as a :class:`Target`, a callable as a :class:`Score`; ``None`` for what is
    not one (a class, classes, ``None``)."""
    if isinstance(target, Target):
        return target
    if callable(target) and not isinstance(target, (np.ndarray, type)):
        return Score(target)
    return None


#: The zero-shot logit scale of a model that has none (CLIP's trained value, ``exp(4.6052)``).
DEFAULT_TEXT_SCALE = 100.0


@dataclass(frozen=True, eq=False)
class Text(Target):
    """How well the image matches a text prompt, for a two-tower model (CLIP, SigLIP).

    The image tower is explained; the text tower embeds the prompts once, with no
    gradient. With no ``contrast``, the score is the cosine similarity between the image's
    embedding and the prompt's (a :class:`Similarity` to the prompt's embedding). With
    ``contrast``, it is the prompt's zero-shot log-probability against the other prompts
    (Radford et al., *Learning transferable visual models from natural language
    supervision*, ICML 2021): ``log_softmax(scale * cos)[0]`` over ``[prompt, *contrast]``,
    ``scale`` the model's learned logit scale (``exp(logit_scale)``: CLIP's, SigLIP's;
    SigLIP's bias changes no softmax), :data:`DEFAULT_TEXT_SCALE` for a model that has
    none. A prompt may be an ensemble, a sequence of prompts: its embedding is the mean of
    their unit embeddings, renormalised (CLIP's prompt ensembling); so may each contrast.

    :class:`guidedbp.Explainer` embeds the prompts with the model's text tower and
    tokenizer; the engine takes a target already embedded (:meth:`embedded`).

    Args:
        prompt: The text, or a sequence of texts (an ensemble).
        contrast: Other prompts (each a text or an ensemble): the zero-shot classes the
            prompt is scored against; a text alone is one prompt.
        output: The output read, where the model has several.
        name: How it is labelled (``text:NAME``); else ``text:PROMPT`` (an ensemble's
            prompts joined by ``|``).
    """

    prompt: str | tuple[str, ...]
    contrast: tuple = ()
    output: OutputName = None
    name: str | None = None
    kind = "text"

    def __post_init__(self):
        prompts = _prompts(self.prompt, "Text prompt")
        object.__setattr__(self, "prompt", self.prompt if isinstance(self.prompt, str)
                           else prompts)
        contrast = (self.contrast,) if isinstance(self.contrast, str) else self.contrast
        if not isinstance(contrast, (list, tuple)):
            raise ArgumentError(f"Text contrast must be prompts (a sequence of texts), got "
                                f"{type(self.contrast).__name__}")
        groups = tuple(item if isinstance(item, str) and _prompts(item, "Text contrast")
                       else _prompts(item, "Text contrast") for item in contrast)
        seen = [self.prompts, *(_group(item) for item in groups)]
        for index, group in enumerate(seen):
            if group in seen[:index]:
                raise ArgumentError(f"Text contrast repeats the prompt {_shown(group[0])}: each "
                                    "prompt is one zero-shot class")
        object.__setattr__(self, "contrast", groups)
        _check_output(self.output)
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            raise ArgumentError(f"Text name={self.name!r} must be a non-empty text")

    @property
    def prompts(self) -> tuple[str, ...]:
        """The prompt as an ensemble: one text or several."""
        return _group(self.prompt)

    @property
    def groups(self) -> tuple[tuple[str, ...], ...]:
        """The prompt's ensemble, then each contrast's: one row of :attr:`vectors` each."""
        return (self.prompts, *(_group(item) for item in self.contrast))

    @property
    def vectors(self) -> np.ndarray | None:
        """float32 ``(1 + len(contrast), D)``: the unit embeddings of :attr:`groups`, once
        :meth:`embedded`; else ``None``."""
        return getattr(self, "_vectors", None)

    @property
    def scale(self) -> float:
        """The zero-shot logit scale, once :meth:`embedded`; else :data:`DEFAULT_TEXT_SCALE`."""
        return getattr(self, "_scale", DEFAULT_TEXT_SCALE)

    def embedded(self, vectors, scale: float | None = None) -> Text:
        """This target with its prompts' embeddings: ``vectors`` ``(len(groups), D)``, one
        row per group (normalised here), and the model's logit ``scale`` (``None``:
        :data:`DEFAULT_TEXT_SCALE`).

        Raises:
            ArgumentError: Another number of rows, or a row that is zero or not finite.
        """
        import copy

        rows = np.asarray(vectors, np.float64)
        if rows.ndim != 2 or len(rows) != len(self.groups) or rows.shape[1] == 0:
            raise ArgumentError(f"Text embeddings must be ({len(self.groups)}, size): one row "
                                f"per prompt and contrast, got shape {rows.shape}")
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        if not np.isfinite(rows).all() or not (norms > 0).all():
            raise ArgumentError(f"the text embedding of {self.short_label} is zero or not finite")
        scale = DEFAULT_TEXT_SCALE if scale is None else float(scale)
        if not (np.isfinite(scale) and scale > 0):
            raise ArgumentError(f"Text scale={scale!r} must be a positive number")
        twin = copy.copy(self)
        object.__setattr__(twin, "_vectors", (rows / norms).astype(np.float32))
        object.__setattr__(twin, "_scale", scale)
        return twin

    @property
    def label(self) -> str:
        return f"text:{self.name or '|'.join(self.prompts)}"

    @property
    def short_label(self) -> str:
        """:attr:`label` as messages name it: a prompt past 40 characters cut
        (``text:a photo of...``), so that a huge prompt is named, not copied whole.

        >>> Text("a cat").short_label, Text("word " * 20_000).short_label
        ('text:a cat', 'text:word word word word word word word word ...')
        """
        shown = self.name or "|".join(self.prompts)
        return f"text:{shown}" if len(shown) <= 40 else f"text:{shown[:40]}..."


def _group(prompt) -> tuple[str, ...]:
    return (prompt,) if isinstance(prompt, str) else tuple(prompt)


def _shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for a message, cut to ``limit`` characters."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _prompts(value, what: str) -> tuple[str, ...]:
    """``value`` (a text or a sequence of texts) as texts, each checked.

    Raises:
        ArgumentError: No text, an empty or blank one, or something that is not a text.
    """
    if isinstance(value, str):
        items = (value,)
    elif isinstance(value, (list, tuple)):
        items = tuple(value)
        if not items:
            raise ArgumentError(f"{what} is an empty sequence: give a text or several")
    else:
        raise ArgumentError(f"{what} must be a text or a sequence of texts, got "
                            f"{type(value).__name__}")
    for item in items:
        if not isinstance(item, str):
            raise ArgumentError(f"{what} holds a {type(item).__name__}, not a text")
        if not item.strip():
            raise ArgumentError(f"{what} {item!r} is empty: give the words to match")
        reason = not_text(item)
        if reason is not None:
            raise ArgumentError(f"{what} {_shown(item)} is no text: {reason}")
    return items
