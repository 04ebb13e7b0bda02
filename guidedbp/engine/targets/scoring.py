"""Targets inside the traced pass: each column's score read off the model's output.

A column is read in two steps. :func:`prepare` finds, once per batch, what its rows
read on the model's output (the logits behind a bypassed head, a detector's proposals,
an output flattened); the reading then takes any number of rows, each an image's target
(its class, its data). :func:`score` reads K columns of one row per image (the traced
gradient pass, one backward pass per column); :func:`score_rows` reads each distinct
column for any number of targets per image from one forward pass, as one trace whatever
that number (the perturbation methods score an image's K targets on each copy).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from guidedbp import _outputs
from guidedbp.engine.graph import ops as _ops
from guidedbp.engine.targets import checks as _checks
from guidedbp.engine.targets import proposals as _proposals
from guidedbp.engine.targets.columns import Column, NotAClass, NotAClassifier
from guidedbp.errors import ArgumentError

#: ``(rows, classes, data)`` -> ``(score, target, probability, resolved)`` of R rows:
#: ``rows`` int32 ``(R,)`` the image of each row (``None``: one row per image, in order),
#: ``classes`` int32 ``(R,)``, ``data`` float32 ``(R, ...)``.
Read = Callable[[tf.Tensor | None, tf.Tensor, tf.Tensor], tuple]


def flat_tensors(value) -> list:
    """The tensors of an output structure (a tensor, or lists and dicts of them)."""
    if isinstance(value, dict):
        return [t for v in value.values() for t in flat_tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flat_tensors(v)]
    return [value]


def one_tensor(model, raw, selected, needs: str):
    """``selected``, refused where it is several outputs (``needs``: what for)."""
    if isinstance(selected, (list, tuple, dict)):
        raise NotAClassifier(
            f"the model has {len(flat_tensors(selected))} outputs "
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


@dataclass
class Reading:
    """One column prepared on a batch's output.

    Attributes:
        read: Reads any rows of it (:data:`Read`).
        ends: The tensors it reads.
        heads: The head ops it stripped or passed.
        main: ``(tensor, head, classes)``: the output it reads, its head, its classes.
        class_probabilities: float32 ``(B, classes)`` for a class column, else ``None``.
    """

    read: Read
    ends: list
    heads: list
    main: tuple
    class_probabilities: tf.Tensor | None = None


def score(model, raw, columns: tuple[Column, ...], classes, data,
          image_size: tuple[int, int] | None = None) -> Scored:
    """The K columns' scores on the model's output ``raw`` (traced), ``classes`` int32
    ``(B, K)``, ``data`` K float32 tensors; ``image_size`` the input's ``(height,
    width)`` (a detector's boxes need it)."""
    first = flat_tensors(raw)[0]
    batch = tf.shape(first)[0]
    found = {name: [] for name in ("scores", "targets", "probabilities", "resolved")}
    ends, heads, main, class_probabilities = [], [], None, None
    for position, column in enumerate(columns):
        reading = prepare(model, raw, column, image_size)
        for name, value in zip(found, reading.read(None, classes[:, position],
                                                   data[position])):
            found[name].append(value)
        ends += reading.ends
        heads += reading.heads
        main = main or reading.main
        if class_probabilities is None:
            class_probabilities = reading.class_probabilities
    base_tensor, head, num_classes = main
    return Scored(
        scores=tf.stack(found["scores"], axis=1), targets=tf.stack(found["targets"], axis=1),
        probabilities=tf.stack(found["probabilities"], axis=1),
        class_probabilities=(class_probabilities if class_probabilities is not None
                             else tf.zeros([batch, 0], tf.float32)),
        resolved=found["resolved"], ends=ends, heads=heads,
        base=ends[0] if ends else base_tensor, head=head, num_classes=num_classes,
        output_shape=tuple(base_tensor.shape))


def score_rows(model, raw, columns: tuple[Column, ...], classes: tuple, data: tuple,
               image_size: tuple[int, int] | None = None) -> tuple:
    """Each of the distinct ``columns``' scores for any number of targets per image:
    ``classes[d]`` int32 ``(B, k_d)`` and ``data[d]`` float32 ``(B, k_d, ...)`` column
    ``d``'s k_d targets of each image -> one float32 ``(B, k_d)`` per column. The model's
    output ``raw`` is read once per column; its rows are taken per target."""
    batch = tf.shape(flat_tensors(raw)[0])[0]
    scores = []
    for column, wanted, given in zip(columns, classes, data):
        reading = prepare(model, raw, column, image_size)
        width = tf.shape(wanted)[1]
        rows = tf.repeat(tf.range(batch), width)
        flat = tf.reshape(given, tf.concat([[-1], tf.shape(given)[2:]], axis=0))
        value = reading.read(rows, tf.reshape(wanted, [-1]), flat)[0]
        scores.append(tf.reshape(value, [batch, width]))
    return tuple(scores)


def prepare(model, raw, column: Column, image_size: tuple[int, int] | None = None
            ) -> Reading:
    """What ``column``'s rows read on the model's output ``raw``, found once per batch.

    Raises:
        ArgumentError: The column does not fit the output (``NotAClassifier`` for a class
            of an output that holds no classes).
    """
    first = flat_tensors(raw)[0]
    batch = tf.shape(first)[0]
    selected = _outputs.select(model, raw, column.output)
    if column.kind in ("score", "probe"):
        return _whole(model, column, selected, batch, first)
    if column.kind == "detection":
        return _detection(model, raw, column, image_size)
    needs = {"class": "a class target", "unit": "a Unit target",
             "region": "a Region target", "similar": "a Similarity target",
             "text": "a Text target"}[column.kind]
    output = one_tensor(model, raw, selected, needs)
    logits, head, head_op = _ops.find_logits(output)
    heads = [head_op] if head_op is not None else []
    kinds = {"class": _class, "unit": _unit, "region": _region, "similar": _similar,
             "text": _text}
    return kinds[column.kind](column, output, logits, head, heads, batch)


def _picker(rows):
    """Each row's image of a per-image tensor: ``rows`` gathered, or all in order."""
    return (lambda tensor: tensor) if rows is None else (lambda tensor: tf.gather(tensor, rows))


def _count(wanted) -> tf.Tensor:
    return tf.shape(wanted)[0]


def _nan(wanted) -> tf.Tensor:
    return tf.fill([_count(wanted)], float("nan"))


def _empty(wanted) -> tf.Tensor:
    return tf.zeros([_count(wanted), 0], tf.float32)


def _whole(model, column: Column, selected, batch, first) -> Reading:
    """A score function's value, or (``probe``, the report's trace) every output's
    logits summed: one value per image whatever the row."""
    tensors = flat_tensors(selected)
    ends, heads = [], []
    if column.kind == "probe":
        parts = []
        for tensor in tensors:
            logits, _, head_op = _ops.find_logits(tensor)
            heads += [head_op] if head_op is not None else []
            ends.append(logits)
            flat = tf.reshape(tf.cast(logits, tf.float32), [batch, -1])
            parts.append(tf.reduce_sum(flat, axis=1))
        value = tf.add_n(parts)
    else:
        value = _checks.user_score(column.function, selected, batch, first.shape[0])
        ends += tensors

    def read(rows, wanted, given):
        return (_picker(rows)(value), tf.fill([_count(wanted)], -1), _nan(wanted),
                _empty(wanted))

    return Reading(read, ends, heads, (tensors[0], None, 0))


def _detection(model, raw, column: Column, image_size) -> Reading:
    weight, boxes_format, boxes, class_scores_output = column.index
    selected = raw if column.output is None else _outputs.select(model, raw, column.output)
    corners, probs, reads = _proposals.proposals(
        model, selected, image_size, boxes_format, boxes, class_scores_output)

    def read(rows, wanted, given):
        pick = _picker(rows)
        label = _checks.detection_label(wanted, probs.shape[-1])
        found = _proposals.matched(given[:, :4], label, pick(corners), pick(probs), weight)
        return (found["score"], found["label"], found["found"][:, 5],
                tf.concat([given[:, :4], found["found"]], axis=1))

    # The class scores first: the default feature map is looked for behind them (a box
    # head's distances are no class evidence).
    return Reading(read, reads[::-1], [], (reads[-1], None, 0))


def _class(column: Column, output, logits, head, heads, batch) -> Reading:
    if logits.shape.rank != 2:
        raise NotAClassifier(
            f"the model's output{_named(column)} has shape {tuple(output.shape)}; a "
            "class target needs (batch, classes): name a target that fits it "
            "(Region(c) for a map, Unit(i), Similarity(reference), a score function)")
    refuse_a_value(logits, head, column)
    class_scores, class_probs = _ops.class_scores(logits, output, head)
    ranked = tf.argsort(class_scores, axis=-1, direction="DESCENDING", stable=True)

    def read(rows, wanted, given):
        pick = _picker(rows)
        rank = tf.minimum(-wanted - 1, tf.shape(class_scores)[-1] - 1)
        chosen = tf.where(wanted < 0, tf.gather(pick(ranked), tf.maximum(rank, 0),
                                                batch_dims=1), wanted)
        return (_chosen(pick(class_scores), chosen), chosen,
                tf.gather(pick(class_probs), chosen, batch_dims=1), _empty(wanted))

    return Reading(read, [logits], heads, (output, head, int(class_scores.shape[-1])),
                   class_probs)


def _chosen(values, chosen):
    """``values[i, chosen[i]]`` of ``(B, C)`` ``values``: picked by a select, whose
    gradient is a select too (a batched gather's is a scatter that costs a fifth of a
    trace to build), and exactly the value picked (no product with the other columns,
    which could be infinite)."""
    picked = tf.equal(tf.range(tf.shape(values)[-1])[None, :], chosen[:, None])
    return tf.reduce_sum(tf.where(picked, values, tf.zeros_like(values)), axis=1)


def _unit(column: Column, output, logits, head, heads, batch) -> Reading:
    flat = tf.reshape(tf.cast(output, tf.float32), [batch, -1])
    index = _flat_index(column.index, output, column)

    def read(rows, wanted, given):
        return (_picker(rows)(flat)[:, index], tf.fill([_count(wanted)], index),
                _nan(wanted), _empty(wanted))

    return Reading(read, [output], heads, (output, head, _classes_of(output)))


def _region(column: Column, output, logits, head, heads, batch) -> Reading:
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
    probs = _probabilities(values, output, head)[..., column.index]
    found = None
    if column.auto:
        found = tf.cast(tf.equal(tf.argmax(values, axis=-1, output_type=tf.int32),
                                 column.index), tf.float32)

    def read(rows, wanted, given):
        pick = _picker(rows)
        if found is not None:
            mask = pick(found)
        else:
            size = tf.shape(values)[1:3]
            mask = tf.cast(tf.image.resize(given[..., None], size, method="nearest")[..., 0]
                           != 0, tf.float32)
        mask = tf.stop_gradient(mask)
        return (tf.reduce_sum(pick(values)[..., column.index] * mask, axis=[1, 2]),
                tf.fill([_count(wanted)], column.index),
                tf.math.divide_no_nan(tf.reduce_sum(pick(probs) * mask, axis=[1, 2]),
                                      tf.reduce_sum(mask, axis=[1, 2])),
                mask)

    return Reading(read, [logits], heads, (output, head, count))


def _similar(column: Column, output, logits, head, heads, batch) -> Reading:
    flat = tf.reshape(tf.cast(output, tf.float32), [batch, -1])

    def read(rows, wanted, given):
        mine = _picker(rows)(flat)
        reference = _checks.reference(mine, given, _named(column))
        dot = tf.reduce_sum(mine * reference, axis=1)
        norms = tf.norm(mine, axis=1) * tf.norm(reference, axis=1)
        return (tf.math.divide_no_nan(dot, norms), tf.fill([_count(wanted)], -1),
                _nan(wanted), reference)

    return Reading(read, [output], heads, (output, head, 0))


def _text(column: Column, output, logits, head, heads, batch) -> Reading:
    flat = tf.reshape(tf.cast(output, tf.float32), [batch, -1])

    def read(rows, wanted, given):
        log_probabilities = _zero_shot(_picker(rows)(flat), given, column)
        return (log_probabilities, tf.fill([_count(wanted)], -1), tf.exp(log_probabilities),
                given)

    return Reading(read, [output], heads, (output, head, 0))


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
