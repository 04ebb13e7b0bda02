"""What mixed precision costs in accuracy and gains in speed, said to the user.

**Accuracy.** ``precision="mixed"`` promises maps that correlate at least
:data:`LEAST_CORRELATION` (Pearson, per map) with float32's. Guided backprop, deconvnet
and the CAMs keep it on every network measured (0.995 to 0.9998), but the plain gradient
does not always: its signed terms cancel, and their rounding moves its small values
(0.97 to 0.987 on random-weight CNNs, MobileNetV2 and ResNet50; 0.997 and more on the
trained demo). So the explainer measures it (:func:`measure`): on the first image of the
first explanation of each input size, it computes the same maps in float32 (one more
trace and one pass of one image) and, where a method's correlation falls below the
promise, every map of that method carries a
:data:`~guidedbp.caveats.MIXED_PRECISION_DRIFT` caveat with the figure. Methods computed
in one gradient pass are measured as they are. Those that average many passes
(SmoothGrad, integrated gradients, SquareGrad, VarGrad) are measured by the one-pass map
of their rule (``vanilla`` for the plain rule), which bounds theirs: the averages smooth
the rounding. Perturbation and black-box methods read forward scores alone and are not
measured.

**Speed.** On a CPU, bfloat16 pays off with the work done in it: ResNet50 runs 1.6 to
1.8 times faster than float32, MobileNetV2 and 4-stage CNNs of 2 to 115 million
multiply-adds in bfloat16 1.05 to 1.3 times, and a CNN of 0.2 million (a few
milliseconds a batch, call overhead) no faster (1.0 to 1.09). Below
:data:`SMALL_MULTIPLY_ADDS` per image in its low-precision layers, the explainer warns
(:func:`small_model_warning`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from guidedbp import caveats as kinds
from guidedbp.caveats import Caveat
from guidedbp.engine.methods import registry

#: The least per-map Pearson correlation with float32 maps that mixed precision promises.
LEAST_CORRELATION = 0.99

#: The one-pass method each ReLU rule's averaged methods are measured by.
_ONE_PASS = {"plain": "vanilla", "guided": "guided", "deconvnet": "deconvnet"}


def one_pass(name: str, smoothed: bool) -> bool:
    """Whether method ``name``'s maps come from one gradient pass (SmoothGrad, when
    ``smoothed``, averages the methods of a ReLU rule)."""
    record = registry.method(name)
    return record.runner == registry.GRADIENT and not (smoothed and record.relu_rule)


def measured_by(methods: Sequence[str], smoothed: bool) -> dict[str, str]:
    """Each measurable method -> the one-pass method whose maps measure its drift: itself
    where :func:`one_pass`, else its rule's one-pass map. Perturbation methods are left
    out."""
    found = {}
    for name in methods:
        record = registry.method(name)
        if one_pass(name, smoothed):
            found[name] = name
        elif record.relu_rule is not None:
            found[name] = _ONE_PASS[record.relu_rule]
    return found


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """The Pearson correlation of two maps; 1.0 for two equal constant maps, 0.0 for a
    constant map against another map (no correlation to speak of)."""
    a, b = (np.asarray(x, np.float64).ravel() for x in (a, b))
    if a.std() == 0 or b.std() == 0:
        return 1.0 if np.array_equal(a, b) else 0.0
    return float(np.corrcoef(a, b)[0, 1])


def measure(methods: Sequence[str], smoothed: bool, own: dict[str, np.ndarray],
            maps: Callable[[str, tuple[str, ...]], dict[str, np.ndarray]]
            ) -> list[Caveat]:
    """The drift caveats of ``methods``.

    Args:
        methods: The explainer's methods.
        smoothed: Whether SmoothGrad averages them.
        own: The run's own maps of the first image, by method (mixed precision).
        maps: ``maps(precision, names)``: the first image's maps of the one-pass methods
            ``names``, computed in ``"float32"`` or ``"mixed"`` precision.

    Returns:
        A :func:`~guidedbp.caveats.mixed_precision_drift` caveat for each method whose
        maps correlate less than :data:`LEAST_CORRELATION` with float32's.
    """
    by = measured_by(methods, smoothed)
    if not by:
        return []
    names = tuple(dict.fromkeys(by.values()))
    full = maps("float32", names)
    # The run's own maps where they are one-pass maps; the others computed again.
    direct = {name: own[name] for name in names if name in own and one_pass(name, smoothed)}
    missing = tuple(name for name in names if name not in direct)
    low = {**direct, **(maps("mixed", missing) if missing else {})}
    found = []
    for name, measured in by.items():
        correlation = pearson(full[measured], low[measured])
        if correlation < LEAST_CORRELATION:
            found.append(kinds.mixed_precision_drift(
                name, correlation, LEAST_CORRELATION,
                None if measured == name else measured))
    return found


#: Below this many multiply-adds per image in its low-precision layers, mixed precision
#: ran no faster than float32 on a CPU (module notes).
SMALL_MULTIPLY_ADDS = 1_000_000


def multiply_adds(copy) -> int | None:
    """The multiply-adds per image of ``copy``'s low-precision layers (a Keras model
    rebuilt by :func:`~guidedbp.engine.graph.precision.low_precision_model`): its convolutions
    and dense layers, nested models' too. ``None`` where that cannot be told: a layer
    with weights of another kind, or a layer whose shapes are free or not one."""
    import keras

    counted = (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D,
               keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D, keras.layers.Dense)
    # Normalisations weigh each value once: next to nothing beside a convolution.
    elementwise = (keras.layers.BatchNormalization, keras.layers.LayerNormalization,
                   keras.layers.GroupNormalization)
    total = 0
    for layer in copy._flatten_layers(include_self=False, recursive=True):
        if (isinstance(layer, keras.Model) or not layer.weights
                or isinstance(layer, elementwise)
                or layer.dtype_policy.compute_dtype == "float32"):
            continue
        if not isinstance(layer, counted):
            return None
        try:
            inputs, outputs = tuple(layer.input.shape[1:]), tuple(layer.output.shape[1:])
        except (AttributeError, ValueError):  # called more than once: no one shape
            return None
        if None in inputs or None in outputs:
            return None
        per_output = inputs[-1]  # each output value reads this many inputs per kernel tap
        if isinstance(layer, (keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D)):
            per_output = 1
        elif not isinstance(layer, keras.layers.Dense):
            per_output //= getattr(layer, "groups", 1)
        taps = int(np.prod(getattr(layer, "kernel_size", ())))
        total += int(np.prod(outputs)) * taps * per_output
    return total


def small_model_warning(copy, dtype: str) -> str | None:
    """The warning for a model whose low-precision layers do fewer than
    :data:`SMALL_MULTIPLY_ADDS` per image, where mixed precision ran no faster than
    float32 on a CPU; ``None`` otherwise (or where they cannot be counted)."""
    counted = multiply_adds(copy)
    if counted is None or counted >= SMALL_MULTIPLY_ADDS:
        return None
    return (f"precision='mixed' does not pay off on a model this small: its {dtype} layers "
            f"do {counted:,} multiply-adds per image, and below {SMALL_MULTIPLY_ADDS:,} "
            "mixed precision ran no faster than float32 on a CPU; float32 gives exact maps "
            "as fast")
