"""An explainer's targets as its traced passes read them: columns, checked once.

What a user names (``None`` for each image's top-1, a class, a
:class:`~guidedbp.engine.targets.kinds.Target`, a score function) becomes
:class:`~guidedbp.engine.targets.columns.Columns`, and is checked against the model
before any method runs: a method bound to detections (D-RISE) beside other targets,
classes out of range (read off the traced pass that explains them), a class of an
output that is a value (explained as ``Unit(0)`` where no target is named).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from guidedbp.engine import inputs as _inputs
from guidedbp.engine.explanation import ValueOutputWarning
from guidedbp.engine.methods import registry
from guidedbp.engine.passes.functions import TracedFunctions
from guidedbp.engine.targets.columns import (
    Column,
    Columns,
    NotAClass,
    NotAClassifier,
    columns_of,
    pass_columns,
    traced_passes,
)
from guidedbp.engine.targets.kinds import Class, OutputName, Unit, as_target
from guidedbp.engine.warn import warn
from guidedbp.errors import ArgumentError


class TargetColumns:
    """The targets of one explainer's calls, as columns of its traced passes.

    Args:
        functions: The explainer's traced functions.
        methods: The explainer's methods.
        clean: The methods of the pass that resolves the targets (its runners').
        output: The output a target reads where it names none.
        report: ``(key, columns)``: traces signature ``key``'s report, with these
            targets if it is the first trace (the explainer's, which warns).
    """

    def __init__(self, functions: TracedFunctions, methods: tuple[str, ...],
                 clean: tuple[str, ...], output: OutputName,
                 report: Callable[[tuple, Columns], object]):
        self.functions = functions
        self.methods = methods
        self.clean = clean
        self.output = output
        self.report = report
        self._warned: set[tuple] = set()
        self._values: dict[tuple, bool] = {}  # signature -> whether the output is a value

    def check_bound(self, targets: Sequence) -> None:
        """Refuse, before anything is traced or run, a method bound to detections
        (D-RISE) for ``targets`` that are not all detections."""
        found = [as_target(target) for target in targets]
        registry.check_targets(
            self.methods, [target.kind if target is not None else "class" for target in found],
            lambda index: (f"target {found[index].label}" if found[index] is not None
                           else "a class target"))

    def of(self, key: tuple, images: np.ndarray, targets: list) -> Columns:
        """The columns of ``targets`` for ``images``; ``None`` alone on an output that is
        a value (:meth:`reads_a_value`): ``Unit(0)``."""
        self.check_bound(targets)
        if len(targets) == 1 and targets[0] is None and self.reads_a_value(key):
            if key not in self._warned:  # once per signature, as NoReluWarning
                self._warned.add(key)
                warn("the model has one output unit with no sigmoid or softmax head: "
                     "explaining its value, target=Unit(0), not a class", ValueOutputWarning)
            targets = [Unit(0)]
        if all(as_target(target) is None for target in targets):
            classes = np.stack([_inputs.as_targets(target, len(images)) for target in targets],
                               axis=1)
            return Columns.of_classes(classes, self.output)
        objects = []
        for target in targets:
            found = as_target(target)
            if found is None:  # a class among other targets: one class for every image
                if isinstance(target, bool) or not isinstance(target, (int, np.integer)):
                    raise ArgumentError(
                        f"target {target!r}: among other targets, a class is an int or Class(c)")
                found = Class(int(target))
            objects.append(found)
        return columns_of(objects, self.output, len(images), partial(self.embedding, key),
                          tuple(np.shape(images)[1:3]))

    def embedding(self, key: tuple, image: np.ndarray, output: OutputName) -> np.ndarray:
        """A reference image's output, flattened: ``(size,)``.

        Raises:
            ArgumentError: An image the model cannot take, or of another shape than the
                images explained.
        """
        image = _inputs.as_images(np.asarray(image)[None])
        try:
            if self.functions.signature(image.shape[1:]) != key:
                _inputs.check_shape(image.shape[1:], key)
        except ArgumentError as error:
            size = "x".join(map(str, image.shape[1:]))
            raise ArgumentError(f"the Similarity reference image is {size}: "
                                f"{str(error).split(', got ')[0]}") from None
        return self.functions.output(key, output)(image).numpy()[0]

    def check(self, key: tuple, columns: Columns) -> None:
        """Trace the report (with these targets, if it is the first trace), then check
        the class columns' classes against their outputs."""
        self.report(key, columns)
        outputs = {spec.output for spec in columns.specs if spec.kind == "class"}
        for output in outputs:
            wanted = [i for i, spec in enumerate(columns.specs)
                      if spec.kind == "class" and spec.output == output]
            count = (self.classes_in(key, columns.specs) if len(outputs) == 1
                     else self.num_classes(key, output))
            _inputs.check_range(columns.classes[:, wanted], count)

    def classes_in(self, key: tuple, specs: tuple) -> int:
        """How many classes the first class target of ``specs`` chooses from, read off
        the traced pass (traced anyway to explain them)."""
        first = next((i for i, spec in enumerate(specs) if spec.kind == "class"), 0)
        layout = next(layout for layout in traced_passes(specs)
                      if any(first in targets for targets in layout))
        concrete = self.functions.concrete(key, self.clean, pass_columns(specs, layout))
        return int(concrete.structured_outputs[
            "class_probabilities"].shape[-1])

    def num_classes(self, key: tuple, output: OutputName) -> int:
        """How many classes ``output`` scores (two for a single logit behind a sigmoid)."""
        return self.classes_in(key, (Column("class", output),))

    def reads_a_value(self, key: tuple) -> bool:
        """Whether the output is a value, not classes, found once per signature: a class
        of it fails to trace."""
        if key not in self._values:
            try:
                self.num_classes(key, self.output)
                self._values[key] = False
            except NotAClass:
                self._values[key] = True
            except NotAClassifier:  # a map, several outputs: not one value either
                self._values[key] = False
        return self._values[key]
