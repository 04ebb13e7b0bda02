"""What ``guidedbp check`` explains when told: a target spec and a model output.

By default every check explains each image's top class. With a target (``unit:I``,
``region:C``, ``similar:IMAGE``, ``class:C``) or a model output named, the spec is
checked against the model's outputs as an explain run checks it
(:func:`~guidedbp.pipeline.target_plan.plan_targets`) and becomes a :class:`CheckTarget`:
the engine's form of the target, the words that name it (``region:circle (1,234 px)``,
as manifests do), and an independent score of it for the literal reference chain.

What the target depends on is fixed from the model as loaded: a region's pixels (the
model's argmax on each image) and a similarity's reference embedding, so that a
randomized model (the randomization check) is asked about the same region and the same
reference as the original, as a class target keeps its class.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from guidedbp import _outputs
from guidedbp.models.outputs import model_outputs
from guidedbp.pipeline.model_outputs import ModelOutput
from guidedbp.pipeline.options import ClassOptions
from guidedbp.pipeline.target_plan import PlannedTarget, describe, plan_targets, ranked_target

__all__ = ["BatchTargets", "CheckTarget", "plan_check_target"]


@dataclass(frozen=True)
class CheckTarget:
    """The target every check explains, resolved against the model.

    Attributes:
        planned: The resolved spec, or ``None``: each image's top class of :attr:`output`.
        output: The model output read (a name or an index), ``None`` for the only one.
        reference: A similarity's reference embedding (flat, float32), or a text
            prompt's, from the model as loaded; ``None`` for other targets.
        labels: The model's class names, for the words.
    """

    planned: PlannedTarget | None
    output: str | int | None = None
    reference: np.ndarray | None = field(default=None, repr=False)
    labels: list | None = field(default=None, repr=False)

    @property
    def spec(self) -> str:
        """The spec as given (``region:circle``), with the output where one was named."""
        spec = self.planned.spec if self.planned is not None else "top class"
        return spec if self.output is None else f"{spec} of output {self.output!r}"

    @property
    def by_class(self) -> bool:
        """Whether it explains a class (a given one or each image's top one)."""
        return self.planned is None or self.planned.kind == "class"

    def engine_target(self, masks: np.ndarray | None = None):
        """What the engine explains: ``None`` (each image's top class), a class index, a
        :class:`~guidedbp.targets.Unit`, a :class:`~guidedbp.targets.Region` over
        ``masks`` (``(N, H', W')``, one per image of the batch) or a
        :class:`~guidedbp.targets.Similarity` to the reference embedding."""
        from guidedbp.targets import Region, Similarity, Unit

        planned = self.planned
        if planned is None or planned.kind == "class":
            return None if planned is None else planned.index
        if planned.kind == "unit":
            return Unit(planned.unit)
        if planned.kind == "region":
            return Region(planned.index, mask=masks, name=planned.spec.partition(":")[2])
        if planned.kind == "text":  # the prompt's embedding, fixed from the model as loaded
            from guidedbp.targets import Text

            return Text(planned.spec.partition(":")[2]).embedded(self.reference[None])
        return Similarity(self.reference, name=os.path.basename(planned.reference))

    def describe(self, index: int, value: float, probability: float,
                 pixels: int | None) -> str:
        """How one image's explained target is named: ``class:3 tabby p=0.912``,
        ``unit:2 = 0.73``, ``region:circle (1,234 px)``, ``similar:ref.jpg = 0.91``."""
        planned = self.planned or ranked_target(index, self.labels)
        return describe(planned, value, probability, pixels)

    def region_mask(self, model, pixels: np.ndarray) -> np.ndarray | None:
        """A region target's pixels on one ``(H, W, C)`` image: where the model's output
        (``(H', W')``) has its argmax at the region's class; ``None`` for other targets."""
        if self.planned is None or self.planned.kind != "region":
            return None
        output = self._output(model, pixels[None])
        return np.argmax(output[0], axis=-1) == self.planned.index

    def reference_model(self, model, mask: np.ndarray | None = None):
        """``(scorer, class)`` for the literal reference chain
        (:func:`~guidedbp.engine.reference.reference_saliency`): a callable whose output's
        ``class`` is this target's score of ``model``, written here from the target's
        definition, not taken from the engine. A class target reads the chosen output as
        it is (the chain finds its logits); any other becomes one logit, class 1.

        Args:
            model: The model (a ``keras.Model`` or a frozen graph).
            mask: A region target's ``(H', W')`` pixels on the image (:meth:`region_mask`).
        """
        import tensorflow as tf

        planned = self.planned

        def scorer(images, training=False):
            raw = model(images, training=training)
            output = _outputs.select(model, raw, self.output)
            if planned is None or planned.kind == "class":
                return output
            batch = tf.shape(output)[0]
            if planned.kind == "unit":
                score = tf.reshape(tf.cast(output, tf.float32), [batch, -1])[:, planned.index]
            elif planned.kind == "region":
                logits = tf.cast(_outputs.behind_head(output)[0], tf.float32)
                inside = tf.constant(np.asarray(mask, np.float32))[None]
                score = tf.reduce_sum(logits[..., planned.index] * inside, axis=[1, 2])
            else:
                flat = tf.reshape(tf.cast(output, tf.float32), [batch, -1])
                reference = tf.constant(self.reference)[None]
                score = tf.reduce_sum(flat * reference, axis=1) / (
                    tf.norm(flat, axis=1) * tf.norm(reference, axis=1))
            return score[:, None]

        return scorer, (planned.index if planned is not None and planned.kind == "class"
                        else 1)

    def _output(self, model, images: np.ndarray) -> np.ndarray:
        raw = model(np.asarray(images, np.float32), training=False)
        return np.asarray(_outputs.select(model, raw, self.output))


@dataclass(frozen=True)
class BatchTargets:
    """One :class:`CheckTarget` for a list of images, with each image's region mask."""

    target: CheckTarget
    masks: tuple | None = None

    def for_batch(self, indices: list[int]):
        """The engine's target for the images at ``indices`` of the list."""
        masks = None if self.masks is None else np.stack([self.masks[i] for i in indices])
        return self.target.engine_target(masks)


def plan_check_target(loaded, spec, model_output, image_shape: tuple) -> CheckTarget | None:
    """Resolve ``--target``/``--model-output`` against the loaded model, as explain does.

    Args:
        loaded: The :class:`~guidedbp.models.loaded.LoadedModel`.
        spec: A :class:`~guidedbp.pipeline.target_specs.TargetSpec` (or its text), or ``None``.
        model_output: An output's name or index, or ``None``.
        image_shape: ``(H, W, C)`` of the images (``None`` for free sides).

    Returns:
        ``None`` when neither is given (each image's top class, as ever), else the
        :class:`CheckTarget`; ``unit:0`` when neither is given and the output is one unit
        with no sigmoid or softmax head (a value, not a class).

    Raises:
        ArgumentError: One line for a target that cannot fit the output (a class on a
            map, a region on a vector, a unit out of range...), an unknown output, an
            unreadable reference image.
    """
    wanted = ClassOptions(targets=() if spec is None else (spec,), model_output=model_output)
    found = model_outputs(loaded.model, image_shape)
    outputs = tuple(ModelOutput(output.name, index, output.shape)
                    for index, output in enumerate(found))
    read = [output for index, output in enumerate(found)
            if (len(found) == 1 if model_output is None else model_output in (output.name, index))]
    # One unit with no sigmoid or softmax: a value, checked as unit:0 (explain's rule).
    value = len(read) == 1 and tuple(read[0].shape[1:]) == (1,) and read[0].head is None
    if spec is None and model_output is None and not value and loaded.text is None:
        return None  # each image's top class, as ever (a two-tower model's is refused)
    plan = plan_targets(wanted, outputs, loaded.labels, value, text=loaded.text)
    if plan is None:
        return None
    planned = plan.targets[0] if plan.targets else None
    target = CheckTarget(planned, wanted.model_output, labels=loaded.labels)
    if planned is not None and planned.kind == "similar":
        from guidedbp.api import Explainer

        image = Explainer(loaded, "vanilla").reference_image(planned.reference_path,
                                                             image_shape)
        embedding = target._output(loaded.model, image[None]).reshape(-1)
        target = CheckTarget(planned, wanted.model_output, embedding.astype(np.float32),
                             loaded.labels)
    if planned is not None and planned.kind == "text":  # a similarity to the prompt's
        embedding = loaded.text.vector([planned.spec.partition(":")[2]])
        target = CheckTarget(planned, wanted.model_output, embedding, loaded.labels)
    return target
