"""A model's outputs by name and the head behind each: one rule for every room.

The engine (``output=``, the logits behind a head), the model loaders and ``inspect``
(each output described) and the checks read a model's outputs the same way. Plain
Python on whatever the model returns (a tensor, or a list or dict of them) and on
graph tensors' ``op`` attributes: nothing here imports TensorFlow.
"""

from __future__ import annotations

from guidedbp._text import did_you_mean
from guidedbp.errors import ArgumentError

#: Ops a model's output may pass through after its head.
PASS_THROUGH_OPS = ("Identity", "Cast", "StopGradient")

#: Head ops that turn logits into probabilities, by the name reports give them.
HEAD_OPS = {"Softmax": "softmax", "Sigmoid": "sigmoid", "LogSoftmax": "log_softmax"}


def behind_head(output):
    """``(logits, head, head_op)``: the input of the softmax, sigmoid or log-softmax op
    that makes the graph tensor ``output`` (behind ``Identity``, ``Cast`` and
    ``StopGradient``), that head's name and op; ``(output, None, None)`` where no head
    makes it."""
    tensor = output
    while tensor.op.type in PASS_THROUGH_OPS and tensor.op.inputs:
        tensor = tensor.op.inputs[0]
    head = HEAD_OPS.get(tensor.op.type)
    if head is None:
        return output, None, None
    return tensor.op.inputs[0], head, tensor.op


def output_names(model, raw) -> list[str]:
    """The names of the outputs ``raw`` (what ``model`` returned), in order: a dict's
    keys in the order of the model's ``output_names`` (Keras sorts them) where those are
    its keys, else as the dict gives them; a list's the model's ``output_names`` where
    they count as many; else ``output_0``... (``output`` alone)."""
    names = [str(name) for name in (getattr(model, "output_names", None) or [])]
    if isinstance(raw, dict):
        keys = [str(key) for key in raw]
        return names if sorted(names) == sorted(keys) else keys
    count = len(raw) if isinstance(raw, (list, tuple)) else 1
    if len(names) != count:
        names = [f"output_{index}" for index in range(count)] if count > 1 else ["output"]
    return names


def tensors_of(model, raw) -> list:
    """The outputs ``raw`` as a list, in the order of :func:`output_names`."""
    if isinstance(raw, dict):
        by_name = {str(key): value for key, value in raw.items()}
        return [by_name[name] for name in output_names(model, raw)]
    return list(raw) if isinstance(raw, (list, tuple)) else [raw]


def describe(model, raw) -> str:
    """``'label' (None, 4), 'box' (None, 4)``: each output's name and shape, in order."""
    return ", ".join(f"{name!r} {tuple(tensor.shape)}"
                     for name, tensor in zip(output_names(model, raw), tensors_of(model, raw)))


def select(model, raw, output):
    """The output ``output`` names in ``raw``: by name (:func:`output_names`) or position;
    ``None``: ``raw`` itself.

    Raises:
        ArgumentError: A name or position the model does not have, listing its outputs.
    """
    if output is None:
        return raw
    names = output_names(model, raw)
    if isinstance(output, str):
        if output not in names:
            hint = did_you_mean(output, names)
            raise ArgumentError(f"output={output!r} is not an output of the model"
                                + (f" ({hint})" if hint else "")
                                + f": its outputs are {describe(model, raw)}")
        index = names.index(output)
    else:
        index = int(output)
        if not 0 <= index < len(names):
            raise ArgumentError(f"output={output} is out of range: the model has "
                                f"{len(names)} output{'s' * (len(names) != 1)} "
                                f"({describe(model, raw)})")
    return tensors_of(model, raw)[index]
