"""One runner per method kind: each registry record names the one that computes it.

- :class:`GradientRunner` (``gradient``): the traced pass of
  :mod:`guidedbp.engine.passes.trace`, one forward and one backward pass per ReLU rule, K
  classes per image at once, batch by batch. It also resolves the classes (``-r``: the
  r-th most probable) and scores them for every other runner.
- :class:`PerturbationRunner` (``perturbation``): forward passes on perturbed copies of
  the images (:mod:`guidedbp.engine.methods.perturbation`), after the traced pass, on the
  classes it resolved; the K classes of an image share the copies.
- :class:`PathIntegratedRunner` (``path-integrated``): a gradient method's map integrated
  along a path from a baseline (:mod:`guidedbp.engine.methods.averaging`), many traced passes
  per image, one class at a time.
- :class:`NoiseStatisticRunner` (``noise-statistic``): a statistic of a gradient method's
  map over SmoothGrad's noisy copies (SquareGrad, VarGrad), many traced passes per image,
  K classes at once.

Every runner answers ``maps(names, key, images, columns, traced)`` with method ->
float32 ``(N, K, ...)`` maps, ``columns`` the K targets per image
(:class:`~guidedbp.engine.targets.columns.Columns`, fixed by the traced pass: classes of ranks
resolved, regions found). :class:`~guidedbp.engine.passes.dispatch.MethodRunners`
groups an explainer's methods by the runner their records name and asks each runner for
its group, in the order of :data:`~guidedbp.engine.methods.registry.RUNNERS`. SmoothGrad
is not a runner: it averages
every runner's maps over noisy copies (:func:`~guidedbp.engine.methods.averaging.smoothgrad`),
but for the noise-statistic runner's, which are statistics over those very copies already.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from guidedbp.engine.methods import averaging as _averaging
from guidedbp.engine.methods import blackbox as _blackbox
from guidedbp.engine.methods import perturbation as _perturbation
from guidedbp.engine.methods import registry
from guidedbp.engine.options import MethodOptions
from guidedbp.engine.passes.functions import TracedFunctions
from guidedbp.engine.targets import checks as _checks
from guidedbp.engine.targets.columns import Columns, pass_columns, row_width, traced_passes

#: ``(image_shape, columns, methods, batch)`` -> None, raising when a pass cannot fit.
MemoryCheck = Callable[..., None]

#: ``(0-255 values, channels)`` -> those pixels in the model's input space.
PixelValues = Callable[[object, int], np.ndarray]

#: ``(method, done, total)``: a perturbation method's copies scored so far in one call,
#: and their total (the explainer's ``progress``).
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Pass:
    """What one traced pass over the images gave, K targets per image.

    Attributes:
        maps: method -> float32 ``(N, K, ...)`` maps of the pass's gradient methods.
        columns: The K targets fixed: ranks resolved to classes, regions found.
        targets: int32 ``(N, K)`` the classes (a unit's index, a region's class; -1 for
            the other kinds), ranks resolved.
        logits: float32 ``(N, K)`` their scores.
        probabilities: float32 ``(N, K)`` their probabilities (NaN for units,
            similarities and score functions).
        class_probabilities: float32 ``(N, classes)`` every class's probability.
        features: float32 ``(N, h, w, k)`` feature map (a token layer's grid) of the
            images (for Score-CAM), or ``None``.
    """

    maps: dict[str, np.ndarray]
    columns: Columns
    targets: np.ndarray
    logits: np.ndarray
    probabilities: np.ndarray
    class_probabilities: np.ndarray
    features: np.ndarray | None = None


class Runner:
    """How the methods of one kind are computed (the defaults fit a traced pass).

    Attributes:
        shares_columns: Whether it explains K classes per image in one run, reading
            the traced pass of those K classes; else it runs one class at a time, with
            no traced pass (``traced`` is ``None``).
        draws_noise: Whether its maps are statistics over SmoothGrad's noisy copies
            already, which SmoothGrad does not average again.
    """

    shares_columns = True
    draws_noise = False

    def traced_methods(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """The gradient methods whose traced pass it runs anyway: the explainer resolves
        the classes with that pass, sharing its trace."""
        return ()

    def check(self, names: tuple[str, ...], image_shape: tuple) -> None:
        """Refuse at once options of ``names`` that cannot work on ``(H, W, C)`` images."""

    def maps(self, names: tuple[str, ...], key: tuple, images: np.ndarray,
             columns: Columns, traced: Pass | None) -> dict[str, np.ndarray]:
        """method -> float32 ``(N, K, ...)`` maps of ``names`` for the K fixed targets
        ``columns``, ``traced`` the traced pass of those targets (``None`` for a runner
        that does not share columns)."""
        raise NotImplementedError


class GradientRunner(Runner):
    """Maps computed in the traced pass itself: guided, vanilla, deconvnet, the CAMs."""

    def __init__(self, functions: TracedFunctions, options: MethodOptions,
                 check_memory: MemoryCheck, progress: Progress | None = None):
        self.functions = functions
        self.options = options
        self.check_memory = check_memory
        self.progress = progress

    def traced_methods(self, names: tuple[str, ...]) -> tuple[str, ...]:
        return names

    def run(self, methods: tuple[str, ...], key: tuple, images: np.ndarray,
            columns: Columns, features: bool = False) -> Pass:
        """Gradient ``methods`` for K targets per image (``columns``; a class ``-r`` the
        r-th most probable), with ``features`` the feature map of the images.

        Each traced pass explains a few columns, one target each per row
        (:func:`~guidedbp.engine.targets.columns.traced_passes`): a column's many targets (an
        image's top-K classes, its K detections) take ``ceil(K / 4)`` rows per image and
        four columns, ``batch_size`` rows a pass, so that K targets cost K backward
        passes, ``ceil(K / 4)`` forward passes and at most four traces whatever K (a
        trace of K columns at once costs more than K times one). With several rows per
        image, ``progress`` hears of each batch of them."""
        batch_size = self.options.batch_size
        count = len(images)
        width = columns.width
        maps = {m: [None] * width for m in methods}
        fields = {name: [None] * width for name in ("targets", "logits", "probabilities")}
        resolved: list = [None] * width
        class_probabilities = found_features = None
        first_class = next((index for index, spec in enumerate(columns.specs)
                            if spec.kind == "class"), None)
        for indices in traced_passes(columns.specs):
            specs = pass_columns(columns.specs, indices)
            self.check_memory(images.shape[1:], len(specs), methods,
                              batch=min(count, batch_size))
            per_image = row_width(indices)
            total = count * per_image
            function = self.functions.gradient(key, methods, specs)
            parts = []
            with _checks.one_line():  # a score checked only as it runs: the first batch
                for start in range(0, total, batch_size):
                    rows = np.arange(start, min(start + batch_size, total))
                    part = columns.rows(indices, rows)
                    parts.append(function(images[rows // per_image], part.classes, part.data))
                    if self.progress is not None and per_image > 1:
                        self.progress(",".join(methods) or "targets", int(rows[-1]) + 1, total)

            def joined(read, parts=parts, per_image=per_image) -> np.ndarray:
                rows = np.concatenate([read(p).numpy() for p in parts])
                return rows.reshape(count, per_image, *rows.shape[1:])  # (N, slot, ...)

            def place(into: list, found, by_column: bool = False, indices=indices) -> None:
                """Each target's values: ``found`` ``(N, slot, column, ...)``, or one
                ``(N, slot, ...)`` per column."""
                for position, targets in enumerate(indices):
                    for slot, index in enumerate(targets):
                        into[index] = (found[position][:, slot] if by_column
                                       else found[:, slot, position])

            for m in methods:
                place(maps[m], joined(lambda p, m=m: p["maps"][m]))
            for name, values in fields.items():
                place(values, joined(lambda p, name=name: p[name]))
            place(resolved, [joined(lambda p, d=d: p["resolved"][d]) for d in range(len(specs))],
                  by_column=True)
            if any(first_class in targets for targets in indices):  # the first class's
                class_probabilities = joined(lambda p: p["class_probabilities"])[:, 0]
            if features and found_features is None:
                found_features = joined(lambda p: p["features"])[:, 0]
        fixed = replace(columns, classes=np.stack(fields["targets"], axis=1).astype(np.int32),
                        data=tuple(resolved),
                        specs=tuple(replace(spec, auto=False) for spec in columns.specs))
        return Pass(
            maps={m: np.stack(maps[m], axis=1) for m in methods},
            columns=fixed,
            targets=fixed.classes,
            logits=np.stack(fields["logits"], axis=1),
            probabilities=np.stack(fields["probabilities"], axis=1),
            class_probabilities=(class_probabilities if class_probabilities is not None
                                 else np.zeros((count, 0), np.float32)),
            features=found_features,
        )

    def maps(self, names, key, images, columns, traced):
        return {name: traced.maps[name] for name in names}


class PerturbationRunner(Runner):
    """Maps from the model's scores on perturbed copies, forward only: Score-CAM,
    occlusion and the black-box methods, RISE, KernelSHAP, LIME, Sobol (their ``combine``
    reads a :class:`~guidedbp.engine.methods.blackbox.BlackBoxProbe`)."""

    def __init__(self, functions: TracedFunctions, options: MethodOptions,
                 pixel_values: PixelValues, progress: Progress | None = None):
        self.functions = functions
        self.options = options
        self.pixel_values = pixel_values
        self.progress = progress

    def check(self, names, image_shape):
        if "occlusion" in names:  # its patch fits, and not too often
            occlusion = self.options.occlusion
            _perturbation.occlusion_geometry(*image_shape[:2], occlusion.patch, occlusion.stride)
        for name in names:  # the black-box methods' grid fits, and not too many passes
            if "blackbox" in registry.method(name).options:
                _blackbox.check(name, self.options.blackbox, *image_shape[:2])

    def maps(self, names, key, images, columns, traced):
        outputs = {spec.output for spec in columns.specs}
        if columns.all_classes and len(outputs) == 1:
            # Classes: every class's score from the forward pass explain's predict()
            # shares, whatever the number of classes per image.
            predict = self.functions.predict(key, outputs.pop())

            def scores(batch: np.ndarray, rows: np.ndarray) -> np.ndarray:
                return np.take_along_axis(predict(batch)[0].numpy(), columns.classes[rows],
                                          axis=1)
        else:
            groups = columns.groups()
            function = self.functions.scores(key, tuple(spec for spec, _ in groups))

            def scores(batch: np.ndarray, rows: np.ndarray) -> np.ndarray:
                part = columns.take(rows)
                with _checks.one_line():  # perturbed copies may score otherwise
                    found = function(
                        batch, tuple(part.classes[:, indices] for _, indices in groups),
                        tuple(np.stack([part.data[i] for i in indices], axis=1)
                              for _, indices in groups))
                joined = np.empty((len(batch), columns.width), np.float32)
                for (_, indices), values in zip(groups, found):
                    joined[:, indices] = values.numpy()
                return joined

        probe = _blackbox.BlackBoxProbe(
            images, columns.width, scores, self.options.batch_size, self.options,
            features=None if traced is None else traced.features,
            fill=self.pixel_values(self.options.occlusion.fill, images.shape[-1]),
            seed=self.options.smoothgrad.seed, streams=columns.stream_keys(),
        )
        return {name: registry.method(name).combine(self._reporting(probe, name))
                for name in names}

    def _reporting(self, probe: _blackbox.BlackBoxProbe, name: str
                   ) -> _blackbox.BlackBoxProbe:
        """``probe``, its scores reporting each forward pass to ``progress``."""
        if self.progress is None:
            return probe
        total = len(probe.images) * self._copies_per_image(name, probe)
        done, scores, progress = 0, probe.scores, self.progress

        def reported(batch: np.ndarray, rows: np.ndarray) -> np.ndarray:
            nonlocal done
            found = scores(batch, rows)
            done += len(batch)
            progress(name, done, total)
            return found

        return replace(probe, scores=reported)

    def _copies_per_image(self, name: str, probe: _blackbox.BlackBoxProbe) -> int:
        """The copies ``name`` scores per image (for KernelSHAP over SLIC, at most)."""
        height, width = probe.images.shape[1:3]
        if name == "occlusion":
            occlusion = self.options.occlusion
            patch, stride = _perturbation.occlusion_geometry(height, width, occlusion.patch,
                                                             occlusion.stride)
            return 1 + len(_perturbation.positions(height, width, patch, stride))
        if name == "scorecam":
            channels = probe.features.shape[-1]
            return min(self.options.scorecam.max_channels or channels, channels)
        return _blackbox.passes_per_image(name, self.options.blackbox, height, width)


class PathIntegratedRunner(Runner):
    """Maps integrated along a path from a baseline: integrated gradients, over the
    traced pass of its own record (the plain input gradient), one class at a time."""

    shares_columns = False

    def __init__(self, gradient: GradientRunner, options: MethodOptions,
                 pixel_values: PixelValues):
        self.gradient = gradient
        self.options = options
        self.pixel_values = pixel_values

    def traced_methods(self, names: tuple[str, ...]) -> tuple[str, ...]:
        return names[:1]

    def maps(self, names, key, images, columns, traced):
        ig = self.options.integrated_gradients
        black, white = self.pixel_values([0.0, 255.0], images.shape[-1])
        baselines = _averaging.make_baselines(images, ig.baseline, black, white)
        result = {}
        for name in names:
            per_column = []
            for column in range(columns.width):
                target = columns.column(column)

                def base_maps(batch: np.ndarray, rows: np.ndarray, name: str = name,
                              target: Columns = target) -> np.ndarray:
                    return self.gradient.run((name,), key, batch, target.take(rows)
                                             ).maps[name][:, 0]

                per_column.append(_averaging.integrated_gradients(
                    base_maps, images, baselines, ig.steps, self.options.batch_size))
            result[name] = np.stack(per_column, axis=1)
        return result


class NoiseStatisticRunner(Runner):
    """Statistics over SmoothGrad's noisy copies of the map each record's ``combine``
    gives in the traced pass, K classes at once: SquareGrad (the mean of the squared
    plain gradient), VarGrad (the variance of the plain gradient). The copies are
    SmoothGrad's (``smooth``, ``noise``, ``seed``, seeded per image), or
    :data:`~guidedbp.engine.options.STATISTIC_COPIES` of them where SmoothGrad is off."""

    draws_noise = True

    def __init__(self, gradient: GradientRunner, options: MethodOptions):
        self.gradient = gradient
        self.options = options

    def traced_methods(self, names: tuple[str, ...]) -> tuple[str, ...]:
        return names

    def maps(self, names, key, images, columns, traced):
        smooth = self.options.smoothgrad

        def copy_maps(copies: np.ndarray, rows: np.ndarray, numbers: np.ndarray
                      ) -> dict[str, np.ndarray]:
            return self.gradient.run(names, key, copies, columns.take(rows)).maps

        return _averaging.smoothgrad(
            copy_maps, images, smooth.copies, smooth.noise, smooth.seed,
            self.options.batch_size,
            variance={name for name in names if registry.method(name).statistic == "variance"})
