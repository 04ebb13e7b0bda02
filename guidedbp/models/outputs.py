"""What a model outputs: each output's name, shape, head activation and the targets it fits.

A model may output class scores, one regression value, a segmentation map, an
embedding, or several of these by name. :func:`model_outputs` traces the model once on a
symbolic batch and describes each output as an :class:`OutputInfo`, read off the traced
graph: the last op before the output (behind ``Identity`` and ``Cast``) says whether a
softmax or sigmoid head turns its logits into probabilities. Names follow the engine's
``output=`` (:mod:`guidedbp._outputs`): a dict's keys in the model's ``output_names``
order, else the model's ``output_names``, else ``output_0``...

>>> OutputInfo("seg", (None, 64, 64, 3), "softmax").targets
('region', 'unit', 'score')
>>> OutputInfo("age", (None, 1), None).describe_targets()
'unit (a value: no sigmoid or softmax, so no class), score function (API)'
>>> OutputInfo("cat", (None, 1), "sigmoid").targets
('unit', 'class', 'score')
"""

from __future__ import annotations

from dataclasses import dataclass

from guidedbp import _outputs

__all__ = ["TARGET_KINDS", "OutputInfo", "model_outputs"]

#: The target kinds an output may fit, as ``--target`` spells them (``score``: a score
#: function, through the API only).
TARGET_KINDS = ("class", "unit", "region", "similar", "score")


@dataclass(frozen=True)
class OutputInfo:
    """One model output, as the engine's ``output=`` names it.

    Attributes:
        name: Its name (a dict key, a Keras output layer's name, ``output_0``...).
        shape: Its shape, ``None`` for the batch and for free dimensions.
        head: ``"softmax"``, ``"sigmoid"`` or ``"log_softmax"`` where such an op makes
            it, else ``None`` (the output is raw: logits, a regression, an embedding).
    """

    name: str
    shape: tuple
    head: str | None

    @property
    def classes(self) -> int:
        """How many classes a class or region target may name: ``C`` of ``(batch, C)``
        (2 for a single unit behind a sigmoid: a binary classifier; 0 with no head: a
        value) or of ``(batch, H, W, C)``; 0 for other shapes or a free ``C``."""
        last = self.shape[-1] if len(self.shape) in (2, 4) else None
        if last is None:
            return 0
        if len(self.shape) == 2 and last == 1:
            return 2 if self.head is not None else 0
        return int(last)

    @property
    def targets(self) -> tuple[str, ...]:
        """The :data:`TARGET_KINDS` that fit this output, the likeliest first.

        ``(batch, 1)``: unit (a regression), and class (a binary classifier) behind a
        sigmoid or softmax head, with none it is a value, not a class; ``(batch, C)``
        behind a softmax or sigmoid head: class, unit; ``(batch, D)`` with no head: unit,
        similar (an embedding), class (should it be a classifier's logits);
        ``(batch, H, W, C)``: region, unit; any other: unit. Every output fits a score
        function.
        """
        rank = len(self.shape)
        if rank == 2 and self.shape[1] == 1:
            kinds = ("unit", "class") if self.head is not None else ("unit",)
        elif rank == 2 and self.head is not None:
            kinds = ("class", "unit")
        elif rank == 2:
            kinds = ("unit", "similar", "class")
        elif rank == 4:
            kinds = ("region", "unit")
        else:
            kinds = ("unit",)
        return (*kinds, "score")

    def describe_targets(self) -> str:
        """:attr:`targets` in words: ``"region, unit, score function (API)"``."""
        if len(self.shape) == 2 and self.shape[1] == 1 and self.head is None:
            fitting = ["unit (a value: no sigmoid or softmax, so no class)"]
        elif len(self.shape) == 2 and self.shape[1] == 1:
            fitting = ["unit (regression) / class (binary)"]
        elif len(self.shape) == 2 and self.head is None:
            fitting = ["unit", "similar", "class (if logits)"]
        else:
            fitting = [kind for kind in self.targets if kind != "score"]
        return ", ".join([*fitting, "score function (API)"])

    def as_dict(self) -> dict:
        """The JSON form: ``name``, ``shape`` (``None`` for the batch), ``head``,
        ``targets``."""
        return {"name": self.name, "shape": list(self.shape), "head": self.head,
                "targets": list(self.targets)}


def model_outputs(model, image_shape: tuple) -> list[OutputInfo]:
    """Describe each output of ``model`` for images of ``(H, W, C)`` ``image_shape``.

    Traces ``model(images, training=False)`` once on a symbolic batch; nothing runs.

    Args:
        model: A ``keras.Model``, a :class:`~guidedbp.models.frozen.FrozenGraph` or any
            callable taking ``(N, H, W, C)`` float images; its output is a tensor, or a
            list or dict of them.
        image_shape: ``(H, W, C)``; ``None`` for a free dimension.

    Returns:
        One :class:`OutputInfo` per output, in the model's order.
    """
    import tensorflow as tf

    def forward(images):
        return model(images, training=False)

    spec = tf.TensorSpec((None, *image_shape), tf.float32)
    traced = tf.function(forward, autograph=False).get_concrete_function(spec)
    raw = traced.structured_outputs
    return [OutputInfo(name, tuple(tensor.shape), _outputs.behind_head(tensor)[1])
            for name, tensor in zip(_outputs.output_names(model, raw),
                                    _outputs.tensors_of(model, raw))]
