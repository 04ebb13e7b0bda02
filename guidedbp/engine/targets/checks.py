"""The checks of a target's score, where the traced pass computes it.

Every method reads a target's score from :func:`guidedbp.engine.targets.scoring.score` (the
gradient methods differentiate it, the perturbation methods watch it move), so it is
checked there once, for all of them: a :class:`~guidedbp.engine.targets.kinds.Score` function
must return numbers, one per image, shape ``(batch,)``; a
:class:`~guidedbp.engine.targets.kinds.Similarity` reference must be as long as the output it
is compared with, flattened. A shape the trace knows is checked while tracing, before
any image goes through the model. One it does not know (a score whose length depends on
the batch, an output of free size) is checked by an assertion in the graph, on the
first batch, and :func:`one_line` turns its failure into the same one-line
:class:`~guidedbp.errors.ArgumentError` in place of TensorFlow's graph trace.
"""

from __future__ import annotations

import contextlib
import re

import tensorflow as tf

from guidedbp._text import plural
from guidedbp.errors import ArgumentError

#: What a score function must return.
_ONE_PER_IMAGE = "it must return one score per image, shape (batch,)"
#: The mark of this module's assertions in TensorFlow's error message.
_MARK = "guidedbp-check"
_FAILED = re.compile(r"assertion failed: \[" + _MARK + r":(score|similar|label)\] \[([0-9 ]*)\] "
                     r"\[([0-9]+)\]")


def user_score(function, selected, batch: tf.Tensor, images: int | None) -> tf.Tensor:
    """``function(selected)`` checked: float32 ``(batch,)``.

    Args:
        function: The :class:`~guidedbp.engine.targets.kinds.Score`'s function.
        selected: What it reads: the chosen output, or every output.
        batch: The batch's size, a scalar tensor.
        images: That size where the trace knows it, else ``None``.

    Raises:
        ArgumentError: ``None``, no tensor, no numbers, or a shape other than one score
            per image, where the trace can tell; an assertion checks the rest.
    """
    value = function(selected)
    if value is None:
        raise ArgumentError(f"the Score function returned None: {_ONE_PER_IMAGE}")
    try:
        value = tf.convert_to_tensor(value)
    except (TypeError, ValueError):
        raise ArgumentError(f"the Score function returned type {type(value).__name__}, not "
                            f"a tensor: {_ONE_PER_IMAGE}") from None
    if not (value.dtype.is_floating or value.dtype.is_integer):
        raise ArgumentError(f"the Score function returned dtype {value.dtype.name}: it must "
                            "return numbers, one score per image")
    shape = value.shape
    if shape.rank is not None and shape.rank != 1:
        raise ArgumentError(f"the Score function returned shape {_shape(shape)}: "
                            f"{_ONE_PER_IMAGE}")
    if shape.rank == 1 and shape[0] is not None:  # a length fixed when tracing
        if images is None:
            raise ArgumentError(f"the Score function returned shape {_shape(shape)} whatever "
                                f"the batch: {_ONE_PER_IMAGE}")
        if shape[0] != images:
            raise ArgumentError(f"the Score function returned shape {_shape(shape)} for a "
                                f"batch of {plural(images, 'image')}: {_ONE_PER_IMAGE}")
        return tf.cast(value, tf.float32)
    fits = tf.logical_and(tf.equal(tf.rank(value), 1), tf.equal(tf.size(value), batch))
    check = tf.debugging.Assert(fits, [f"{_MARK}:score", tf.shape(value), batch], summarize=8)
    with tf.control_dependencies([check]):
        return tf.reshape(tf.cast(value, tf.float32), [batch])


def reference(flat: tf.Tensor, given: tf.Tensor, where: str) -> tf.Tensor:
    """A similarity's reference embeddings ``given`` ``(B, n)``, checked against the
    output ``flat`` ``(B, size)`` it is compared with (``where``: how the message names
    that output).

    Raises:
        ArgumentError: ``n`` differs from ``size``, where the trace knows both; an
            assertion checks them otherwise.
    """
    size, length = flat.shape[-1], given.shape[-1]
    if size is not None and length is not None:
        if size != length:
            raise ArgumentError(_reference_message(length, size, where))
        return given
    fits = tf.equal(tf.shape(given)[1], tf.shape(flat)[1])
    check = tf.debugging.Assert(
        fits, [f"{_MARK}:similar", tf.shape(given)[1:], tf.shape(flat)[1]], summarize=8)
    with tf.control_dependencies([check]):
        return tf.identity(given)


def detection_label(wanted: tf.Tensor, classes: int | None) -> tf.Tensor:
    """A :class:`~guidedbp.engine.targets.box_target.Detection`'s classes ``wanted`` ``(B,)`` (-1:
    the matched proposal's), checked against the detector's ``classes`` by an assertion
    (the classes are data, fed per image).

    Raises:
        ArgumentError: Through :func:`one_line`: a class out of range.
    """
    if classes is None:
        return wanted
    largest = tf.reduce_max(tf.concat([wanted, [-1]], axis=0))
    check = tf.debugging.Assert(largest < classes, [f"{_MARK}:label", [largest], classes])
    with tf.control_dependencies([check]):
        return tf.identity(wanted)


def _reference_message(length: int, size: int, where: str = "") -> str:
    return (f"the Similarity reference has {plural(length, 'value')}; the output{where} has "
            f"{size} per image: give an embedding of {plural(size, 'value')}, or a reference "
            "image")


def _shape(shape) -> str:
    sides = ["batch" if index == 0 and side is None else "?" if side is None else str(side)
             for index, side in enumerate(shape)]
    return "(" + ", ".join(sides) + ("," if len(sides) == 1 else "") + ")"


@contextlib.contextmanager
def one_line():
    """Run traced passes, turning the failure of a check of this module into its
    one-line :class:`~guidedbp.errors.ArgumentError`; other errors pass unchanged."""
    try:
        yield
    except tf.errors.InvalidArgumentError as error:
        found = _FAILED.search(str(error.message))
        if found is None:
            raise
        kind, shape, count = found.group(1), found.group(2).split(), int(found.group(3))
        if kind == "similar":
            raise ArgumentError(_reference_message(int(shape[0]), count)) from None
        if kind == "label":
            raise ArgumentError(f"Detection label {shape[0]} is out of range: the detector "
                                f"scores {plural(count, 'class', 'classes')} "
                                f"(0..{count - 1})") from None
        raise ArgumentError(
            f"the Score function returned shape {_shape([int(side) for side in shape])} for "
            f"a batch of {plural(count, 'image')}: {_ONE_PER_IMAGE}") from None
