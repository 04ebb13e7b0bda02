"""Targets as the traced pass sees them: K columns per image, each one score per image.

A :class:`Column` is what a trace depends on (the kind, the output read, a unit's index,
a function): the traced functions are kept per tuple of columns. :class:`Columns` adds
what varies from image to image and is fed to the trace as tensors: the class of a
class column (``-r``: the r-th most probable), a region's mask, a similarity's reference
embedding. :func:`score` reads the K scores off the model's output inside the trace, and
what each column resolved on the clean images (the classes of ranks, the argmax region),
so that every later pass (SmoothGrad's copies, integrated gradients' path, the
perturbed copies) explains the same fixed target.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import tensorflow as tf

from guidedbp import _outputs
from guidedbp.engine import _detections, _graph, _score_checks
from guidedbp.engine.targets import (
    Class,
    Detection,
    OutputName,
    Region,
    Score,
    Similarity,
    Target,
    Text,
    Unit,
)
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


# -- inside the trace ---------------------------------------------------------------------


def _flat_tensors(value) -> list:
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flat_tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat_tensors(v)]
    return [value]


def _one_tensor(model, raw, selected, column: Column, needs: str):
    if isinstance(selected, (list, tuple, dict)):
        raise NotAClassifier(
            f"the model has {len(_flat_tensors(selected))} outputs "
            f"({_outputs.describe(model, raw)}): choose one with output=NAME_OR_INDEX "
            f"for {needs}")
    return selected


@dataclass
class Scored:
    """The K scores of a traced batch, and what each column resolved.

    Attributes:
        scores: float32 ``(B, K)`` the scores differentiated.
        targets: int32 ``(B, K)``: a class, a unit's flat index or a region's class;
            -1 for similarities and score functions.
        probabilities: float32 ``(B, K)``: a class's probability, a region's mean
            probability of its class, a text prompt's zero-shot probability; NaN for the
            other kinds.
        class_probabilities: float32 ``(B, classes)`` of the first class column's output,
            or ``(B, 0)``.
        resolved: K float32 tensors: a region's mask at the output's resolution, a
            similarity's reference, a text column's prompt embeddings, else ``(B, 0)``.
        ends: The tensors the scores read (the activations found lie before them).
        heads: The head ops stripped or passed (never activations).
        base: The tensor the default feature map is looked for behind.
        head: The main output's head name (bypassed for classes), or None.
        num_classes: Classes of the main output (``(B, C)`` or ``(B, H', W', C)``), else 0.
        output_shape: The main output's shape.
    """

    scores: tf.Tensor
    targets: tf.Tensor
    probabilities: tf.Tensor
    class_probabilities: tf.Tensor
    resolved: list
    ends: list
    heads: list
    base: tf.Tensor
    head: str | None
    num_classes: int
    output_shape: tuple


def score(model, raw, columns: tuple[Column, ...], classes, data,
          image_size: tuple[int, int] | None = None) -> Scored:
    """The K columns' scores on the model's output ``raw`` (traced), ``classes`` int32
    ``(B, K)``, ``data`` K float32 tensors; ``image_size`` the input's ``(height,
    width)`` (a detector's boxes need it)."""
    first = _flat_tensors(raw)[0]
    batch = tf.shape(first)[0]
    nan = tf.fill([batch], float("nan"))
    empty = tf.zeros([batch, 0], tf.float32)
    scores, targets, probabilities, resolved, ends, heads = [], [], [], [], [], []
    class_probabilities, main = None, None
    for position, column in enumerate(columns):
        selected = _outputs.select(model, raw, column.output)
        if column.kind in ("score", "probe"):
            tensors = _flat_tensors(selected)
            if column.kind == "probe":
                parts = []
                for tensor in tensors:
                    logits, _, head_op = _graph.find_logits(tensor)
                    heads += [head_op] if head_op is not None else []
                    ends.append(logits)
                    flat = tf.reshape(tf.cast(logits, tf.float32), [batch, -1])
                    parts.append(tf.reduce_sum(flat, axis=1))
                value = tf.add_n(parts)
            else:
                value = _score_checks.user_score(column.function, selected, batch,
                                                 first.shape[0])
                ends += tensors
            main = main or (tensors[0], None, 0)
            scores.append(value)
            targets.append(tf.fill([batch], -1))
            probabilities.append(nan)
            resolved.append(empty)
            continue
        if column.kind == "detection":
            weight, boxes_format, boxes, class_scores_output = column.index
            selected = raw if column.output is None else _outputs.select(model, raw,
                                                                        column.output)
            corners, probs, read = _detections.proposals(
                model, selected, image_size, boxes_format, boxes, class_scores_output)
            wanted = _score_checks.detection_label(classes[:, position], probs.shape[-1])
            found = _detections.matched(data[position][:, :4], wanted, corners, probs, weight)
            scores.append(found["score"])
            targets.append(found["label"])
            probabilities.append(found["found"][:, 5])
            resolved.append(tf.concat([data[position][:, :4], found["found"]], axis=1))
            # The class scores first: the default feature map is looked for behind them
            # (a box head's distances are no class evidence).
            ends += read[::-1]
            main = main or (read[-1], None, 0)
            continue
        needs = {"class": "a class target", "unit": "a Unit target",
                 "region": "a Region target", "similar": "a Similarity target",
                 "text": "a Text target"}[column.kind]
        output = _one_tensor(model, raw, selected, column, needs)
        logits, head, head_op = _graph.find_logits(output)
        heads += [head_op] if head_op is not None else []
        if column.kind == "class":
            if logits.shape.rank != 2:
                raise NotAClassifier(
                    f"the model's output{_named(column)} has shape {tuple(output.shape)}; a "
                    "class target needs (batch, classes): name a target that fits it "
                    "(Region(c) for a map, Unit(i), Similarity(reference), a score function)")
            refuse_a_value(logits, head, column)
            class_scores, class_probs = _graph.class_scores(logits, output, head)
            ranked = tf.argsort(class_scores, axis=-1, direction="DESCENDING", stable=True)
            wanted = classes[:, position]
            rank = tf.minimum(-wanted - 1, tf.shape(class_scores)[-1] - 1)
            chosen = tf.where(wanted < 0, tf.gather(ranked, tf.maximum(rank, 0), batch_dims=1),
                              wanted)
            scores.append(tf.gather(class_scores, chosen, batch_dims=1))
            targets.append(chosen)
            probabilities.append(tf.gather(class_probs, chosen, batch_dims=1))
            resolved.append(empty)
            ends.append(logits)
            if class_probabilities is None:
                class_probabilities = class_probs
            main = main or (output, head, int(class_scores.shape[-1]))
        elif column.kind == "unit":
            flat = tf.reshape(tf.cast(output, tf.float32), [batch, -1])
            index = _flat_index(column.index, output, column)
            scores.append(flat[:, index])
            targets.append(tf.fill([batch], index))
            probabilities.append(nan)
            resolved.append(empty)
            ends.append(output)
            main = main or (output, head, _classes_of(output))
        elif column.kind == "region":
            if logits.shape.rank != 4:
                raise ArgumentError(
                    f"a Region target needs an output of shape (batch, H', W', classes); "
                    f"the model's output{_named(column)} has shape {tuple(output.shape)}")
            count = int(logits.shape[-1])
            if column.index >= count:
                raise ArgumentError(
                    f"Region class {column.index} is out of range: the output{_named(column)} "
                    f"has {count} classes (0..{count - 1})")
            values = tf.cast(logits, tf.float32)
            if column.auto:
                mask = tf.cast(tf.equal(tf.argmax(values, axis=-1, output_type=tf.int32),
                                        column.index), tf.float32)
            else:
                given = data[position][..., None]
                size = tf.shape(values)[1:3]
                mask = tf.cast(tf.image.resize(given, size, method="nearest")[..., 0] != 0,
                               tf.float32)
            mask = tf.stop_gradient(mask)
            scores.append(tf.reduce_sum(values[..., column.index] * mask, axis=[1, 2]))
            targets.append(tf.fill([batch], column.index))
            probs = _probabilities(values, output, head)[..., column.index]
            probabilities.append(tf.math.divide_no_nan(tf.reduce_sum(probs * mask, axis=[1, 2]),
                                                       tf.reduce_sum(mask, axis=[1, 2])))
            resolved.append(mask)
            ends.append(logits)
            main = main or (output, head, count)
        elif column.kind == "similar":
            flat = tf.reshape(tf.cast(output, tf.float32), [batch, -1])
            reference = _score_checks.reference(flat, data[position], _named(column))
            dot = tf.reduce_sum(flat * reference, axis=1)
            norms = tf.norm(flat, axis=1) * tf.norm(reference, axis=1)
            scores.append(tf.math.divide_no_nan(dot, norms))
            targets.append(tf.fill([batch], -1))
            probabilities.append(nan)
            resolved.append(reference)
            ends.append(output)
            main = main or (output, head, 0)
        elif column.kind == "text":
            flat = tf.reshape(tf.cast(output, tf.float32), [batch, -1])
            log_probabilities = _zero_shot(flat, data[position], column)
            scores.append(log_probabilities)
            targets.append(tf.fill([batch], -1))
            probabilities.append(tf.exp(log_probabilities))
            resolved.append(data[position])
            ends.append(output)
            main = main or (output, head, 0)
    base_tensor, head, num_classes = main
    return Scored(
        scores=tf.stack(scores, axis=1), targets=tf.stack(targets, axis=1),
        probabilities=tf.stack(probabilities, axis=1),
        class_probabilities=(class_probabilities if class_probabilities is not None
                             else tf.zeros([batch, 0], tf.float32)),
        resolved=resolved, ends=ends, heads=heads, base=ends[0] if ends else base_tensor,
        head=head, num_classes=num_classes, output_shape=tuple(base_tensor.shape))


def _zero_shot(flat, prompts, column: Column):
    """A :class:`Text` target's zero-shot log-probability ``(B,)``: ``log_softmax(scale *
    cos)[:, 0]``, ``cos`` ``(B, prompts)`` between each image embedding ``flat`` ``(B,
    size)`` and the prompts' unit embeddings ``prompts`` ``(B, prompts, size)``.

    Raises:
        ArgumentError: The embeddings' size differs from the output's.
    """
    count, size, scale = column.index
    if flat.shape[-1] is not None and flat.shape[-1] != size:
        raise ArgumentError(f"the Text prompts' embeddings have {size} values; the "
                            f"output{_named(column)} has {flat.shape[-1]} per image: the "
                            "image and text towers must embed into one space")
    unit = tf.math.divide_no_nan(flat, tf.norm(flat, axis=1, keepdims=True))
    cosines = tf.einsum("bd,bkd->bk", unit, prompts)
    return tf.nn.log_softmax(scale * cosines, axis=1)[:, 0]


def refuse_a_value(logits, head: str | None, column: Column) -> None:
    """Refuse a class of one output unit that no sigmoid or softmax head makes a
    probability: its value is no class score (a regression; a binary classifier's raw
    logit is class 1's score, which ``Unit(0)`` explains just as well).

    Raises:
        NotAClass: With the ``Unit(0)`` hint.
    """
    if logits.shape[-1] == 1 and head is None:
        raise NotAClass(f"the model's output{_named(column)} has one unit and no sigmoid or "
                        "softmax head: it is a value, not a class: explain it with "
                        "target=Unit(0)")


def _named(column: Column) -> str:
    return "" if column.output is None else f" {column.output!r}"


def _classes_of(output) -> int:
    return int(output.shape[-1]) if output.shape.rank in (2, 4) and output.shape[-1] else 0


def _probabilities(logits, output, head):
    if head in ("softmax", "sigmoid"):
        return tf.cast(output, tf.float32)
    if head == "log_softmax":
        return tf.exp(tf.cast(output, tf.float32))
    return tf.nn.softmax(logits) if logits.shape[-1] != 1 else tf.sigmoid(logits)


def _flat_index(index, output, column: Column) -> int:
    shape = tuple(output.shape[1:])
    if any(side is None for side in shape):
        if isinstance(index, tuple) or len(shape) != 1:
            raise ArgumentError(f"a Unit target needs an output of fixed shape; the output"
                                f"{_named(column)} has shape {tuple(output.shape)}")
    size = int(np.prod(shape)) if shape and None not in shape else None
    if isinstance(index, tuple):
        if len(index) != len(shape) or any(i >= s for i, s in zip(index, shape)):
            raise ArgumentError(f"Unit index {index} does not fit the output{_named(column)} "
                                f"of shape {tuple(output.shape)}")
        return int(np.ravel_multi_index(index, shape))
    if size is not None and index >= size:
        raise ArgumentError(f"Unit index {index} is out of range: the output{_named(column)} "
                            f"has {size} units per image (shape {tuple(output.shape)})")
    return int(index)
