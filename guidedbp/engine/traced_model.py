"""The model as an explainer traces it: its traced functions, the runners that compute
each kind of method from them, its targets as columns, and what can be read off the
traced graph without explaining (the report, the forward pass's scores, a detector's
detections). :class:`~guidedbp.engine.explainer.Explainer` adds the explaining.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from guidedbp.engine import found_caveats as _found_caveats
from guidedbp.engine import inputs as _inputs
from guidedbp.engine import payoff as _payoff
from guidedbp.engine.explanation import NoReluWarning
from guidedbp.engine.graph import layers as _layers
from guidedbp.engine.graph import precision as _precision
from guidedbp.engine.graph import report as _report
from guidedbp.engine.options import MethodOptions
from guidedbp.engine.passes.dispatch import MethodRunners, hands_out_features
from guidedbp.engine.passes.functions import TracedFunctions
from guidedbp.engine.passes.runners import Progress
from guidedbp.engine.passes.target_columns import TargetColumns
from guidedbp.engine.rules import activations as _activation_rules
from guidedbp.engine.rules import relu as _relu
from guidedbp.engine.targets import detect
from guidedbp.engine.targets.columns import Columns
from guidedbp.engine.targets.kinds import OutputName
from guidedbp.engine.warn import warn
from guidedbp.errors import ArgumentError


class TracedModel:
    """A model traced for some methods: what an explainer knows of it before explaining.

    Args:
        model: The traceable callable (checked by the explainer).
        methods: The methods, as :func:`~guidedbp.engine.methods.registry.as_methods`
            gives them.
        options: Their options.
        output: The output a target reads where it names none.
        pixel_to_input: Maps 0-255 pixels into the model's input space, or ``None``.
        progress: Hears of each forward pass of a perturbation method and of each batch of
            rows of many targets (the explainer's ``progress``).
    """

    def __init__(self, model, methods: tuple[str, ...], options: MethodOptions,
                 output: OutputName, pixel_to_input: Callable | None,
                 progress: Progress | None):
        self.methods = methods
        self.options = options
        self.output = output
        #: The dtype the model's passes compute in (``options.precision``); the maps
        #: are float32 whatever it is.
        self.compute_dtype = "float32"
        traced_model = model
        if options.precision == "mixed":  # a copy in low precision: graph.precision
            self.compute_dtype = _precision.fast_dtype()
            traced_model = _precision.low_precision_model(model, self.compute_dtype)
            small = (_payoff.small_model_warning(traced_model.copy, self.compute_dtype)
                     if _precision.gpu_capability() is None else None)  # measured on CPUs
            if small:
                warn(small)
        _relu.register_gradients()  # the rules' gradients, once per process
        _activation_rules.register_gradients()
        self.model = model
        self.pixel_to_input = pixel_to_input
        layer = options.gradcam.layer
        layer_path = None
        if layer is not None:
            layer_path = _layers.layer_path(model, layer) or layer.split("/")
        self._traced = TracedFunctions(traced_model, methods, layer_path,
                                       options.gradcam.upsample,
                                       features=hands_out_features(methods),
                                       guide=options.guided.guide)
        # The methods by the runner each record names, and how their maps are computed.
        self._runs = MethodRunners(
            methods, self._traced, options, self.check_memory,
            partial(_inputs.pixel_values, pixel_to_input=pixel_to_input), progress)
        self._targets = TargetColumns(self._traced, methods, self._runs.clean, output,
                                      self._report_for)
        self._warned: set[tuple] = set()
        self._detectors: dict[tuple, object] = {}  # image shape -> proposals (detect)

    @property
    def method(self) -> str:
        """The methods as one name: ``guided`` or ``guided,gradcam``."""
        return ",".join(self.methods)

    @property
    def image_shape(self) -> tuple | None:
        """The ``(H, W, C)`` the model declares (free sides ``None``), or ``None``."""
        return _inputs.declared_image_shape(self.model)

    @property
    def batch_size(self) -> int:
        return self.options.batch_size

    @property
    def trace_count(self) -> int:
        """How many traces the explainer's functions ran: one per input signature and
        pass (the classes resolved with the maps, or scored alone)."""
        return self._traced.trace_count

    @property
    def _functions(self) -> dict:
        """The traced gradient passes by ``(signature, methods, columns)``."""
        return self._traced.gradient_functions

    # -- what the traced graph tells ---------------------------------------------------

    def predict(self, images) -> tuple[np.ndarray, np.ndarray]:
        """Every class's score and probability, forward only.

        The scores are the logits the maps explain (a softmax or sigmoid head bypassed;
        a single logit behind a sigmoid scores class 0 as ``-z`` and class 1 as ``z``);
        the probabilities are the model's own. One output unit with no sigmoid or softmax
        head is a value, not classes: it is refused (:meth:`reads_a_value`). Images go
        through the model ``batch_size`` at a time, in a function traced once per input
        signature, with no gradient.

        Args:
            images: float ``(N, H, W, C)`` in the model's input space.

        Returns:
            ``(scores, probabilities)``, float32 ``(N, classes)`` each.

        >>> import numpy as np, keras
        >>> model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(),
        ...                           keras.layers.Dense(3, activation="softmax")])
        >>> scores, probabilities = Explainer(model).predict(np.ones((2, 4, 4, 1)))
        >>> scores.shape, probabilities.shape
        ((2, 3), (2, 3))
        """
        images = _inputs.as_images(images)
        function = self._traced.predict(self._traced.signature(images.shape[1:]), self.output)
        parts = [function(images[start : start + self.batch_size])
                 for start in range(0, len(images), self.batch_size)]
        return (np.concatenate([scores.numpy() for scores, _ in parts]),
                np.concatenate([probabilities.numpy() for _, probabilities in parts]))

    def report_for(self, image_shape: tuple, targets: Sequence | None = None
                   ) -> _report.Report:
        """The report for images of ``(H, W, C)`` ``image_shape``, tracing once for it.

        Args:
            image_shape: The images' shape.
            targets: Targets (:data:`TargetLike`, one per column, as :meth:`explain_targets`
                takes them) whose pass's report is wanted: their class activation maps'
                layer may not be a class's (a detection's is the last feature map its
                proposals share). ``None``: the signature's first report.

        Raises:
            ArgumentError: The model cannot take images of that shape, or bad targets.
        """
        key = self._traced.signature(tuple(image_shape))
        if targets is None:
            return self._report_for(key)
        images = np.zeros((1, *image_shape), np.float32)
        columns = self._targets.of(key, images, list(targets))
        return self._traced.pass_report(key, self._runs.clean, columns.specs)

    @property
    def report(self) -> _report.Report:
        """What was done to the model: guided ops, plain activations, bypassed head.

        The report of the model's declared input shape; where the model declares none,
        the report of the newest image shape explained (:meth:`report_for` names one).
        """
        shape = _inputs.declared_image_shape(self.model)
        if shape is not None:
            return self._report_for(shape)
        newest = self._traced.newest_report()
        if newest is None:
            raise ArgumentError(
                "the model declares no input shape: call the explainer on images "
                "before reading its report"
            )
        return newest

    def reads_a_value(self, image_shape: tuple | None = None) -> bool:
        """Whether the output the explainer reads is one unit that no sigmoid or softmax
        head makes a probability: a value (a regression, or a binary classifier's raw
        logit), not a class. A target of ``None`` then explains that value,
        ``Unit(0)`` (with a :class:`ValueOutputWarning`), and a class target is refused.

        Args:
            image_shape: ``(H, W, C)`` of the images; ``None``: the model's declared one.

        Raises:
            ArgumentError: No ``image_shape`` for a model that declares none, or one the
                model cannot take.
        """
        shape = image_shape if image_shape is not None else self.image_shape
        if shape is None:
            raise ArgumentError("the model declares no input shape: give image_shape")
        return self._targets.reads_a_value(self._traced.signature(tuple(shape)))

    def detector(self, image_shape: tuple | None = None) -> detect.DetectorInfo:
        """How a :class:`~guidedbp.engine.targets.box_target.Detection` target reads the model (the
        explainer's ``output``): its boxes and class scores outputs, proposals and classes.

        Args:
            image_shape: ``(H, W, C)`` of the images; ``None``: the model's declared one.

        Raises:
            ArgumentError: (``NotADetector``) a model whose outputs hold no boxes and
                class scores, in one line; no ``image_shape`` for a model that declares
                none.
        """
        shape = image_shape if image_shape is not None else self.image_shape
        if shape is None:
            raise ArgumentError("the model declares no input shape: give image_shape")
        return detect.detector(self.model, tuple(shape), self.output)

    def detect(self, images, top: int, threshold: float = 0.3) -> list[detect.Detected]:
        """Each image's ``top`` best detections (fewer where it has fewer), best first:
        its proposals (as a :class:`~guidedbp.engine.targets.box_target.Detection` reads them) whose
        class score is at least ``threshold``, after per-class greedy non-maximum
        suppression at IoU 0.5 (:func:`~guidedbp.engine.targets.detect.suppress`). Forward only,
        in float32, ``batch_size`` images a pass, traced once per image shape.

        Raises:
            ArgumentError: ``top`` or ``threshold`` out of range, or (``NotADetector``) a
                model that is no detector.
        """
        if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
            raise ArgumentError(f"top={top!r} must be a positive integer")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.number)) \
                or not 0 <= threshold <= 1:
            raise ArgumentError(f"threshold={threshold!r} must be a number in [0, 1]")
        images = _inputs.as_images(images)
        shape = tuple(int(side) for side in images.shape[1:])
        self._traced.signature(shape)  # the model can take them: checked as for maps
        if shape not in self._detectors:
            self._detectors[shape] = detect.proposals_function(self.model, shape, self.output)
        return detect.detections(self._detectors[shape], images, int(top), float(threshold),
                                 self.batch_size)

    def check_memory(self, image_shape: tuple, columns: int = 1, methods: tuple = (),
                     batch: int | None = None) -> None:
        """Refuse at once a batch whose images and maps alone would not fit in the free
        memory (``columns`` classes per image, the explainer's methods by default), or
        an occlusion patch that does not fit the images or takes too many positions.

        Raises:
            ArgumentError: Naming the sizes and a ``batch_size`` that would fit.
        """
        methods = methods or self.methods
        _inputs.check_memory(batch or self.batch_size, tuple(image_shape),
                             columns * len(methods))
        self._runs.check(methods, image_shape)

    def _report_for(self, key: tuple, columns: Columns | None = None) -> _report.Report:
        """The report of signature ``key``, tracing the clean pass once for it (for
        ``columns``' targets where given); warns once per signature when guided or
        deconvnet backprop would equal the plain gradient."""
        report = self._traced.report(key, self._runs.clean, self.output,
                                     None if columns is None else columns.specs)
        if key not in self._warned:
            self._warned.add(key)
            message = _found_caveats.plain_rules(self.methods, report, self.model)
            if message:
                warn(message, NoReluWarning)
        return report
