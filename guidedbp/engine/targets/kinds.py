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
- :class:`~guidedbp.engine.targets.box_target.Detection` ``(box, label=None)``: a
  detector's detection that best matches ``box`` (:mod:`guidedbp.engine.targets.box_target`).
- :class:`~guidedbp.engine.targets.text.Text` ``(prompt, contrast=())``: for a two-tower
  model (CLIP, SigLIP), a text prompt (:mod:`guidedbp.engine.targets.text`).

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

from guidedbp.errors import ArgumentError

__all__ = ["Class", "Region", "Score", "Similarity", "Target", "Unit", "as_target"]

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


def check_output(output) -> None:
    if output is not None and (isinstance(output, bool)
                               or not isinstance(output, (str, int, np.integer))):
        raise ArgumentError(f"output={output!r} must be an output's name or index")


def index_of(value, what: str) -> int:
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
        index_of(self.index, "Class index")
        check_output(self.output)

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
                index_of(value, "Unit index")
        else:
            index_of(self.index, "Unit index")
        check_output(self.output)

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
            index_of(self.index, "Region class")
        check_output(self.output)
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
        check_output(self.output)
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
        check_output(self.output)

    @property
    def label(self) -> str:
        name = self.name or getattr(self.function, "__name__", None)
        return f"score:{name}" if name and name != "<lambda>" else "score"


def as_target(target) -> Target | None:
    """``target`` as a :class:`Target`, a callable as a :class:`Score`; ``None`` for what is
    not one (a class, classes, ``None``)."""
    if isinstance(target, Target):
        return target
    if callable(target) and not isinstance(target, (np.ndarray, type)):
        return Score(target)
    return None
