"""The model's outputs as a run sees them, and the one it reads (``model_output=``).

:func:`model_outputs` lists a Keras model's outputs (name, position, shape) by the rule
every room uses (:mod:`guidedbp._outputs`); :func:`select_output` picks the one a run
names, with one line listing them all when the name or index is wrong.

>>> str(ModelOutput("seg", 0, (None, 64, 64, 3)))
"'seg' (None, 64, 64, 3)"
"""

from __future__ import annotations

from dataclasses import dataclass

from guidedbp._outputs import output_names
from guidedbp._text import did_you_mean, plural
from guidedbp.errors import ArgumentError


@dataclass(frozen=True)
class ModelOutput:
    """One output of the model: its name, position and shape (``None`` for free axes)."""

    name: str
    index: int
    shape: tuple

    def __str__(self) -> str:
        return f"{self.name!r} {shape_text(self.shape)}"


def shape_text(shape: tuple) -> str:
    """A shape as a person reads it: ``(None, 10)``, ``(3,)``."""
    return "(" + ", ".join(str(side) for side in shape) + ("," if len(shape) == 1 else "") + ")"


def model_outputs(model, fallback_shape: tuple | None = None) -> tuple[ModelOutput, ...] | None:
    """The outputs of a Keras model, by its ``outputs`` and ``output_names``; for any other
    callable one output of ``fallback_shape`` (``None`` when that is not given)."""
    try:
        tensors = list(model.outputs)
        shapes = [tuple(tensor.shape) for tensor in tensors]
    except (AttributeError, TypeError, ValueError):
        tensors = []
    if not tensors:
        if fallback_shape is None:
            return None
        return (ModelOutput("output", 0, tuple(fallback_shape)),)
    names = output_names(model, tensors)  # the rule every room uses
    return tuple(ModelOutput(name, index, shape)
                 for index, (name, shape) in enumerate(zip(names, shapes)))


def select_output(outputs: tuple[ModelOutput, ...], wanted) -> ModelOutput | None:
    """The output ``wanted`` names (``None``: the only one, or ``None`` among several).

    Raises:
        ArgumentError: An unknown name or an index out of range, listing the outputs.
    """
    listed = ", ".join(map(str, outputs))
    if wanted is None:
        return outputs[0] if len(outputs) == 1 else None
    if isinstance(wanted, str):
        for output in outputs:
            if output.name == wanted:
                return output
        hint = did_you_mean(wanted, [output.name for output in outputs])
        raise ArgumentError(f"model_output={wanted!r} is not an output of the model"
                            + (f" ({hint})" if hint else "") + f": its outputs are {listed}")
    if not 0 <= wanted < len(outputs):
        raise ArgumentError(f"model_output={wanted} is out of range: the model has "
                            f"{plural(len(outputs), 'output')} ({listed})")
    return outputs[wanted]
