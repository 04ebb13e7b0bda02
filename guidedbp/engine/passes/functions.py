"""The cache of traced functions: each traced once per input signature, then reused.

A signature is the model's declared ``(H, W, C)`` (free dims stay free, so one trace
serves every image size), else the images' own shape. Per signature the cache holds
the gradient passes (:func:`guidedbp.engine.passes.trace.attribute`), one per set of
methods and number of classes per image, the forward-only pass
(:func:`guidedbp.engine.passes.trace.predict`) and the report of the first trace, read off
its graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import tensorflow as tf

from guidedbp.engine import inputs as _inputs
from guidedbp.engine.graph import report as _report
from guidedbp.engine.passes import trace as _trace
from guidedbp.engine.targets import columns as _columns
from guidedbp.errors import ArgumentError

#: A ``tf.function`` traced from one of the bodies of :mod:`guidedbp.engine.passes.trace`.
Function = tf.types.experimental.GenericFunction


class TracedFunctions:
    """The traced functions of one model and one explainer's methods.

    Args:
        model: The traceable callable.
        methods: The explainer's methods (what the reports speak for).
        layer_path: The class activation maps' layer (enclosing model names, then its
            own), or ``None`` for the default feature map.
        upsample: Class activation map upsampling.
        features: Whether the gradient passes return the feature map too (Score-CAM).
        guide: Where the swapping rules apply (``"all"``, ``"relu"``, ``None``: each
            rule's default; :func:`guidedbp.engine.passes.trace.guide_scopes`).

    Attributes:
        gradient_functions: ``(signature, methods, columns)`` -> the gradient pass
            (``columns``: a tuple of :class:`~guidedbp.engine.targets.columns.Column`).
        trace_count: How many traces the functions have run, all kinds together.
    """

    def __init__(self, model, methods: Sequence[str], layer_path: list[str] | None,
                 upsample: str, features: bool, guide: str | None = None):
        self.model = model
        self.methods = tuple(methods)
        self.layer_path = layer_path
        self.upsample = upsample
        self.features = features
        self.guide = guide
        self.gradient_functions: dict[tuple, Function] = {}
        self._predict_functions: dict[tuple, Function] = {}
        self._score_functions: dict[tuple, Function] = {}
        self._reports: dict[tuple, _report.Report] = {}
        self._pass_reports: dict[tuple, _report.Report] = {}
        self._refused: dict[tuple, ArgumentError] = {}  # a trace that refused its targets
        self.trace_count = 0

    def signature(self, image_shape: tuple) -> tuple:
        """The trace key of an ``(H, W, C)`` image shape: the declared shape, else the
        shape itself (building a model never called).

        Raises:
            ArgumentError: The model cannot take images of that shape.
        """
        declared = _inputs.declared_image_shape(self.model)
        if declared is not None:
            _inputs.check_shape(image_shape, declared)
            return declared
        key = tuple(image_shape)
        _inputs.build_if_needed(self.model, key)
        return key

    def report(self, key: tuple, methods: tuple, output=None, columns: tuple | None = None
               ) -> _report.Report:
        """The report of signature ``key``, tracing the gradient pass of ``methods`` for
        it unless a pass of that signature was traced already: for ``columns``, else for
        the top class of ``output``, or, where that output is no ``(batch, classes)``, a
        score reading every unit of it (of every output when ``output`` is ``None``)."""
        if key not in self._reports and columns is not None:  # the first pass of them
            first = _columns.traced_passes(columns)[0]
            self.concrete(key, methods, _columns.pass_columns(columns, first))
        if key not in self._reports:
            try:
                self.concrete(key, methods, (replace(_columns.CLASS, output=output),))
            except _columns.NotAClassifier:
                self.concrete(key, methods, (_columns.Column("probe", output),))
        return self._reports[key]

    def pass_report(self, key: tuple, methods: tuple, columns: tuple) -> _report.Report:
        """The report of the first gradient pass of ``methods`` that explains ``columns``
        (:func:`~guidedbp.engine.targets.columns.traced_passes`; traced once): its class
        activation maps' layer is the one those targets use (a detection's is the last
        feature map its proposals share, where a class's is the one before the output)."""
        first = _columns.pass_columns(columns, _columns.traced_passes(columns)[0])
        self.concrete(key, methods, first)
        return self._pass_reports[(key, methods, first)]

    def newest_report(self) -> _report.Report | None:
        """The report of the newest signature traced, or ``None`` before any trace."""
        return next(reversed(self._reports.values())) if self._reports else None

    def concrete(self, key: tuple, methods: tuple, columns: tuple):
        """The traced graph of :meth:`gradient`'s pass, traced once. A trace that refused
        its targets (a class of an output that holds none) is refused again at once, not
        traced again: a detector's first report and its value check both ask for a
        class pass, and a trace costs the whole forward and backward graph."""
        if (key, methods, columns) in self._refused:
            raise self._refused[(key, methods, columns)].with_traceback(None)
        try:
            return self.gradient(key, methods, columns).get_concrete_function()
        except ArgumentError as error:
            self._refused[(key, methods, columns)] = error
            raise

    def gradient(self, key: tuple, methods: tuple, columns: tuple = (_columns.CLASS,)
                 ) -> Function:
        """The gradient pass of ``methods`` for K targets per image, ``columns`` their
        :class:`~guidedbp.engine.targets.columns.Column` (an int K: K classes): float32
        ``(B, *key)`` images, int32 ``(B, K)`` classes and K data tensors -> the outputs
        of :func:`~guidedbp.engine.passes.trace.attribute`. The runners ask for a few columns at
        a time (:func:`~guidedbp.engine.targets.columns.traced_passes`): a trace's cost grows
        faster than its columns."""
        if isinstance(columns, int):
            columns = (_columns.CLASS,) * columns
        if (key, methods, columns) not in self.gradient_functions:
            signature = [
                tf.TensorSpec((None, *key), tf.float32, name="images"),
                tf.TensorSpec((None, len(columns)), tf.int32, name="targets"),
                tuple(tf.TensorSpec((None, *column.data_shape), tf.float32)
                      for column in columns),
            ]

            def traced(images, targets, data):
                self.trace_count += 1
                outputs, report = _trace.attribute(
                    self.model, images, targets, data, columns, methods, self.methods,
                    self.layer_path, self.upsample, features=self.features, guide=self.guide,
                )
                self._reports.setdefault(key, report)
                self._pass_reports[(key, methods, columns)] = report
                return outputs

            # autograph=False: the body builds a graph in plain Python; nothing to convert.
            self.gradient_functions[(key, methods, columns)] = tf.function(
                traced, input_signature=signature, autograph=False
            )
        return self.gradient_functions[(key, methods, columns)]

    def predict(self, key: tuple, output=None) -> Function:
        """The forward-only pass of signature ``key``: images -> (scores, probabilities)."""
        if (key, output) not in self._predict_functions:

            def forward(images):
                self.trace_count += 1
                return _trace.predict(self.model, images, output)

            self._predict_functions[(key, output)] = tf.function(
                forward, input_signature=[tf.TensorSpec((None, *key), tf.float32, name="images")],
                autograph=False,
            )
        return self._predict_functions[(key, output)]

    def scores(self, key: tuple, columns: tuple) -> Function:
        """The forward-only pass of signature ``key`` scoring the distinct ``columns``:
        images, then per column int32 ``(B, k)`` classes and float32 ``(B, k, ...)`` data
        -> per column float32 ``(B, k)`` scores (the perturbation methods'), traced
        once whatever the number of targets ``k`` of each column."""
        if (key, columns) not in self._score_functions:

            def forward(images, targets, data):
                self.trace_count += 1
                return _trace.target_scores(self.model, images, targets, data, columns)

            self._score_functions[(key, columns)] = tf.function(forward, input_signature=[
                tf.TensorSpec((None, *key), tf.float32, name="images"),
                tuple(tf.TensorSpec((None, None), tf.int32) for _ in columns),
                tuple(tf.TensorSpec((None, None, *column.data_shape), tf.float32)
                      for column in columns),
            ], autograph=False)
        return self._score_functions[(key, columns)]

    def output(self, key: tuple, output=None) -> Function:
        """The forward-only pass of signature ``key`` giving the output ``output`` names,
        flattened per image (a reference's embedding)."""
        if ("output", key, output) not in self._score_functions:

            def forward(images):
                self.trace_count += 1
                return _trace.raw_output(self.model, images, output)

            self._score_functions[("output", key, output)] = tf.function(
                forward, input_signature=[tf.TensorSpec((None, *key), tf.float32, name="images")],
                autograph=False)
        return self._score_functions[("output", key, output)]
