"""Targets as the traced pass sees them: K columns per image, each one score per image.

A :class:`Column` is what a trace depends on (the kind, the output read, a unit's index,
a function): the traced functions are kept per column, and the targets of one column
(an image's top-K classes, its K detections) share its function whatever their number
(:meth:`Columns.groups`). :class:`Columns` adds what varies from image to image and is
fed to the trace as tensors: the class of a class column (``-r``: the r-th most
probable), a region's mask, a similarity's reference embedding.
:func:`guidedbp.engine.targets.scoring.score` reads the scores off the model's output inside the
trace, and what each column resolved on the clean images (the classes of ranks, the
argmax region), so that every later pass (SmoothGrad's copies, integrated gradients'
path, the perturbed copies) explains the same fixed target.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from guidedbp.engine.targets.box_target import Detection
from guidedbp.engine.targets.kinds import Class, OutputName, Region, Score, Similarity, Target, Unit
from guidedbp.engine.targets.text import Text
from guidedbp.errors import ArgumentError

#: The column kinds; ``probe`` scores every output at once (the report's trace only).
KINDS = ("class", "unit", "region", "similar", "score", "detection", "text", "probe")

#: A detection column's data per image: its box's corners, then what it matched (the
#: proposal's corners, IoU and class score; zeros until the traced pass finds them).
DETECTION_DATA = 10


class NotAClassifier(ArgumentError):
    """A class target on an output that is not ``(batch, classes)``."""


class NotAClass(NotAClassifier):
    """A class target on one output unit that no sigmoid or softmax head makes a
    probability: a value (a regression), which :class:`Unit` ``(0)`` explains."""


@dataclass(frozen=True)
class Column:
    """What one target's trace depends on (hashable: a key of the traced functions).

    Attributes:
        kind: One of :data:`KINDS`.
        output: The output read (name or index), ``None`` for the model's only output
            (or, for ``score`` and ``probe``, all of them).
        index: A unit's flat index, a region's class, a similarity's reference
            length, a detection's ``(score_weight, boxes_format, boxes, scores)``, or a
            text column's ``(prompts, size, scale)``.
        auto: A region found by argmax (else given by a mask).
        function: A score function.
    """

    kind: str
    output: OutputName = None
    index: int | tuple | None = None
    auto: bool = False
    function: Callable | None = None

    @property
    def data_shape(self) -> tuple:
        """The per-image shape of the data fed for this column (``(0,)``: none)."""
        if self.kind == "region":
            return (None, None)
        if self.kind == "similar":
            return (self.index,)  # its length, so that the trace checks it
        if self.kind == "detection":
            return (DETECTION_DATA,)
        if self.kind == "text":
            return self.index[:2]  # (prompts, size): each prompt's unit embedding
        return (0,)


#: The column of today's class targets on the model's one output.
CLASS = Column("class")

#: The most columns one traced gradient pass holds: its trace's cost grows faster than
#: its columns (one backward pass each), so more targets take more rows per image.
TRACED_COLUMNS = 4

#: A traced pass's layout: per column, the targets (their indices) it explains, one per
#: row of an image.
Layout = list[list[int]]


def traced_passes(specs: Sequence[Column]) -> list[Layout]:
    """The traced passes that explain targets of columns ``specs``, at most
    :data:`TRACED_COLUMNS` columns each.

    A column's many targets (top-K classes, K detections) share passes of their own:
    K targets take ``ceil(K / TRACED_COLUMNS)`` rows per image, in as few columns as fit
    them, so that one to :data:`TRACED_COLUMNS` columns of it are ever traced, whatever
    K. Targets of distinct columns go together, a few a pass, one row per image.

    >>> units = [Column("unit", index=index) for index in range(5)]
    >>> traced_passes([CLASS] * 3 + units + [CLASS] * 3)
    [[[0, 1], [2, 8], [9, 10]], [[3], [4], [5], [6]], [[7]]]
    """
    found: dict[Column, list[int]] = {}
    for index, spec in enumerate(specs):
        found.setdefault(spec, []).append(index)
    passes, single = [], []
    for targets in found.values():
        if len(targets) == 1:
            single.append(targets)
            continue
        rows = -(-len(targets) // TRACED_COLUMNS)
        passes.append([targets[start : start + rows] for start in range(0, len(targets), rows)])
    return passes + [single[start : start + TRACED_COLUMNS]
                     for start in range(0, len(single), TRACED_COLUMNS)]


def pass_columns(specs: Sequence[Column], layout: Layout) -> tuple[Column, ...]:
    """The columns a pass of ``layout`` traces (the key of its function)."""
    return tuple(specs[targets[0]] for targets in layout)


def row_width(indices: Sequence[Sequence[int]]) -> int:
    """The rows a pass takes per image to explain each column's targets ``indices``:
    the most targets one column has."""
    return max(len(targets) for targets in indices)


@dataclass(frozen=True)
class Columns:
    """K targets for N images.

    Attributes:
        specs: The K columns.
        classes: int32 ``(N, K)``: a class column's class (``-r`` the r-th most probable);
            0 for the other kinds.
        data: K float32 arrays ``(N, ...)``: a region's mask, a similarity's reference
            embedding, a text column's prompt embeddings ``(N, prompts, size)``, else
            ``(N, 0)``.
        targets: The K targets as given (``None`` for classes given as ints).
        streams: int64 ``(N, k)``: each row's key to the random streams of the methods
            that draw per image (the black-box methods), or ``None``: the row's index.
            SmoothGrad's noisy copies are keyed ``(image, copy)``, so their draws do not
            depend on how the copies are batched.
    """

    specs: tuple[Column, ...]
    classes: np.ndarray
    data: tuple[np.ndarray, ...]
    targets: tuple[Target | None, ...] = field(default=())
    streams: np.ndarray | None = None

    @classmethod
    def of_classes(cls, classes: np.ndarray, output: OutputName = None) -> Columns:
        """Class columns for int ``(N, K)`` ``classes``."""
        classes = np.asarray(classes, np.int32)
        count, width = classes.shape
        empty = np.zeros((count, 0), np.float32)
        return cls((replace(CLASS, output=output),) * width, classes, (empty,) * width,
                   (None,) * width)

    @property
    def width(self) -> int:
        return len(self.specs)

    @property
    def all_classes(self) -> bool:
        return all(spec.kind == "class" for spec in self.specs)

    def take(self, rows) -> Columns:
        """The columns of images ``rows`` (an int array: copies of images)."""
        rows = np.asarray(rows)
        return replace(self, classes=self.classes[rows],
                       data=tuple(data[rows] for data in self.data),
                       streams=None if self.streams is None else self.streams[rows])

    def slice(self, start: int, stop: int) -> Columns:
        return replace(self, classes=self.classes[start:stop],
                       data=tuple(data[start:stop] for data in self.data),
                       streams=None if self.streams is None else self.streams[start:stop])

    def column(self, index: int) -> Columns:
        """Column ``index`` alone."""
        return Columns(self.specs[index : index + 1], self.classes[:, index : index + 1],
                       self.data[index : index + 1],
                       self.targets[index : index + 1] if self.targets else (),
                       self.streams)

    def groups(self) -> list[tuple[Column, list[int]]]:
        """The distinct columns, in the order they first come, each with the indices of
        its targets (an image's top-K classes are K targets of one column)."""
        found: dict[Column, list[int]] = {}
        for index, spec in enumerate(self.specs):
            found.setdefault(spec, []).append(index)
        return list(found.items())

    def rows(self, indices: Layout, rows: np.ndarray) -> Columns:
        """Rows ``rows`` of a pass of layout ``indices`` (:func:`traced_passes`): row
        ``r`` holds image ``r // width``'s target ``indices[d][r % width]`` in column
        ``d`` (its last, again, where the column has fewer), ``width`` the rows a pass
        takes per image (:func:`row_width`)."""
        rows = np.asarray(rows, np.int64)
        images, slot = np.divmod(rows, row_width(indices))
        classes, data = [], []
        for targets in indices:
            wanted = np.asarray(targets, np.int64)[np.minimum(slot, len(targets) - 1)]
            classes.append(self.classes[images, wanted])
            picked = [self.data[target][image] for image, target in zip(images, wanted)]
            data.append(np.stack(picked) if picked else self.data[targets[0]][:0])
        return Columns(tuple(self.specs[targets[0]] for targets in indices),
                       np.stack(classes, axis=1).astype(np.int32), tuple(data), (),
                       None if self.streams is None else self.streams[images])

    def stream_keys(self) -> np.ndarray:
        """int64 ``(N, k)``: :attr:`streams`, or each row's index."""
        if self.streams is not None:
            return self.streams
        return np.arange(len(self.classes), dtype=np.int64)[:, None]


def column_of(target: Target, output: OutputName, count: int,
              embedding: Callable[[np.ndarray, OutputName], np.ndarray],
              image_size: tuple[int, int] | None = None
              ) -> tuple[Column, np.ndarray, np.ndarray]:
    """The column of ``target`` for ``count`` images, its classes ``(count,)`` and data
    ``(count, ...)``; ``output`` the explainer's, for a target naming none.
    ``embedding(image, output)`` is a reference image's output, flattened;
    ``image_size`` ``(height, width)`` the images' (a detection's box is mapped to it)."""
    output = target.output if target.output is not None else output
    classes = np.zeros(count, np.int32)
    empty = np.zeros((count, 0), np.float32)
    if isinstance(target, Class):
        return Column("class", output), np.full(count, int(target.index), np.int32), empty
    if isinstance(target, Unit):
        return Column("unit", output, target.index), classes, empty
    if isinstance(target, Region):
        if isinstance(target.index, str):
            raise ArgumentError(
                f"Region class {target.index!r} is a name: guidedbp.Explainer resolves names "
                "with the model's labels; the engine takes an index")
        column = Column("region", output, int(target.index), auto=target.mask is None)
        if target.mask is None:
            return column, np.full(count, int(target.index), np.int32), \
                np.zeros((count, 1, 1), np.float32)
        mask = (np.asarray(target.mask) != 0).astype(np.float32)
        if mask.ndim == 2:
            mask = np.broadcast_to(mask, (count, *mask.shape))
        elif len(mask) != count:
            raise ArgumentError(f"Region mask has {len(mask)} masks for {count} images")
        return column, np.full(count, int(target.index), np.int32), np.ascontiguousarray(mask)
    if isinstance(target, Similarity):
        reference = target.reference
        if isinstance(reference, str) or not isinstance(reference, np.ndarray):
            raise ArgumentError(
                f"Similarity reference {reference!r} is a path: guidedbp.Explainer decodes "
                "image files; the engine takes an embedding or an image array")
        vector = reference if target.is_embedding else embedding(reference, output)
        vector = np.asarray(vector, np.float32).reshape(-1)
        return Column("similar", output, len(vector)), np.full(count, -1, np.int32), \
            np.ascontiguousarray(np.broadcast_to(vector, (count, len(vector))))
    if isinstance(target, Score):
        return Column("score", output, function=target.function), np.full(count, -1, np.int32), \
            empty
    if isinstance(target, Text):
        return _text_column(target, output, count)
    if isinstance(target, Detection):
        if isinstance(target.class_label, str):
            raise ArgumentError(
                f"Detection label {target.class_label!r} is a name: guidedbp.Explainer resolves "
                "names with the model's labels; the engine takes an index")
        if image_size is None:
            raise ArgumentError("a Detection target needs the images' size")
        data = np.zeros((count, DETECTION_DATA), np.float32)
        data[:, :4] = target.corners(count, image_size)
        label = -1 if target.class_label is None else int(target.class_label)
        # the model's boxes' format: the target's box was turned into corners above
        index = (float(target.score_weight), target.boxes_format, target.boxes, target.scores)
        return Column("detection", target.output, index), np.full(count, label, np.int32), data
    raise ArgumentError(f"target {target!r} is not a guidedbp target")


def _text_column(target: Text, output: OutputName, count: int
                 ) -> tuple[Column, np.ndarray, np.ndarray]:
    """A :class:`Text` target's column: with no contrast, a similarity to the prompt's
    embedding; with contrast, a ``text`` column fed every prompt's unit embedding
    ``(count, prompts, size)``."""
    vectors = target.vectors
    if vectors is None:
        raise ArgumentError(
            f"{target.short_label} is a prompt: guidedbp.Explainer embeds prompts with the model's "
            "text tower; the engine takes Text(...).embedded(embeddings, scale)")
    classes = np.full(count, -1, np.int32)
    if not target.contrast:
        return Column("similar", output, vectors.shape[1]), classes, \
            np.ascontiguousarray(np.broadcast_to(vectors[0], (count, vectors.shape[1])))
    column = Column("text", output, (*vectors.shape, float(target.scale)))
    return column, classes, np.ascontiguousarray(np.broadcast_to(vectors, (count,
                                                                           *vectors.shape)))


def columns_of(targets: Sequence[Target], output: OutputName, count: int,
               embedding: Callable[[np.ndarray, OutputName], np.ndarray],
               image_size: tuple[int, int] | None = None) -> Columns:
    """The columns of ``targets`` for ``count`` images (see :func:`column_of`)."""
    if not targets:
        raise ArgumentError("targets is empty: expected at least one target")
    parts = [column_of(target, output, count, embedding, image_size) for target in targets]
    return Columns(tuple(spec for spec, _, _ in parts),
                   np.stack([classes for _, classes, _ in parts], axis=1),
                   tuple(data for _, _, data in parts), tuple(targets))
