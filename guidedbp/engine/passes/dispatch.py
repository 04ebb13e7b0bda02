"""An explainer's methods grouped by the runner their records name
(:mod:`guidedbp.engine.passes.runners`), and each group asked for its maps: the traced
pass that fixes the targets first, then the runners that share its columns, one target
at a time for the others, and what SmoothGrad averages.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from guidedbp.engine.methods import registry
from guidedbp.engine.options import MethodOptions
from guidedbp.engine.passes.functions import TracedFunctions
from guidedbp.engine.passes.runners import (
    GradientRunner,
    MemoryCheck,
    NoiseStatisticRunner,
    Pass,
    PathIntegratedRunner,
    PerturbationRunner,
    PixelValues,
    Progress,
    Runner,
)
from guidedbp.engine.targets.columns import Columns


class MethodRunners:
    """An explainer's methods grouped by the runner their records name, and those runners.

    Args:
        methods: The explainer's methods.
        functions: The explainer's cache of traced functions.
        options: The explainer's options.
        check_memory: Refuses a gradient pass that cannot fit in memory.
        pixel_values: 0-255 pixel values -> the model's input space.

    Attributes:
        groups: runner kind -> its methods, in the order of
            :data:`~guidedbp.engine.methods.registry.RUNNERS`; kinds with no method left out.
        clean: The gradient methods of the traced pass that resolves the classes: the
            first a runner runs anyway (the gradient methods', else integrated
            gradients'), else none (a pass computing no map).
        shares_columns: Whether every runner explains K classes per image at once.
        feature_channels: Signature -> channels of the feature map the pass handed out.
    """

    def __init__(self, methods: Sequence[str], functions: TracedFunctions,
                 options: MethodOptions, check_memory: MemoryCheck, pixel_values: PixelValues,
                 progress: Progress | None = None):
        self.functions = functions
        self.gradient = GradientRunner(functions, options, check_memory, progress)
        every = {
            registry.GRADIENT: self.gradient,
            registry.PERTURBATION: PerturbationRunner(functions, options, pixel_values,
                                                      progress),
            registry.PATH_INTEGRATED: PathIntegratedRunner(self.gradient, options, pixel_values),
            registry.NOISE_STATISTIC: NoiseStatisticRunner(self.gradient, options),
        }
        self.groups = by_runner(methods)
        self.runners: dict[str, Runner] = {kind: every[kind] for kind in self.groups}
        self.clean: tuple[str, ...] = next(
            (traced for traced in (self.runners[kind].traced_methods(names)
                                   for kind, names in self.groups.items()) if traced), ())
        self.shares_columns = all(runner.shares_columns for runner in self.runners.values())
        self.feature_channels: dict[tuple, int] = {}

    def check(self, methods: Sequence[str], image_shape: tuple) -> None:
        """Each runner's :meth:`Runner.check` of its methods among ``methods``."""
        for kind, names in by_runner(methods).items():
            self.runners[kind].check(names, tuple(image_shape))

    def resolve(self, key: tuple, images: np.ndarray, columns: Columns) -> Pass:
        """The clean traced pass for ``columns`` (a class ``-r``: the r-th most probable):
        the targets fixed, with their scores."""
        return self.gradient.run(self.clean, key, images, columns)

    def columns(self, key: tuple, images: np.ndarray, columns: Columns,
                noise: bool = True) -> tuple[Pass, dict[str, np.ndarray]]:
        """The traced pass for the K targets ``columns`` and the ``(N, K, ...)`` maps of
        the runners that explain K targets at once, from it (but for those that draw
        noisy copies themselves, unless ``noise``)."""
        traced = self.gradient.run(self.clean, key, images, columns,
                                   features=self.functions.features)
        if traced.features is not None:
            self.feature_channels[key] = int(traced.features.shape[-1])
        maps = {}
        for kind, names in self.groups.items():
            runner = self.runners[kind]
            if runner.shares_columns and (noise or not runner.draws_noise):
                maps.update(runner.maps(names, key, images, traced.columns, traced))
        return traced, maps

    def per_class(self, key: tuple, images: np.ndarray, column: Columns
                  ) -> dict[str, np.ndarray]:
        """The ``(N, ...)`` maps of the runners that explain one target at a time, for the
        one fixed target ``column``."""
        maps = {}
        for kind, names in self.groups.items():
            if not self.runners[kind].shares_columns:
                found = self.runners[kind].maps(names, key, images, column, None)
                maps.update({name: columns[:, 0] for name, columns in found.items()})
        return maps

    def fixed_maps(self, key: tuple, images: np.ndarray, column: Columns
                   ) -> dict[str, np.ndarray]:
        """Every method's ``(N, ...)`` maps for the one fixed target ``column``, but for
        those that are statistics over noisy copies already (:meth:`noise_statistics`):
        what SmoothGrad averages."""
        maps = {}
        if any(runner.shares_columns and not runner.draws_noise
               for runner in self.runners.values()):
            _, shared = self.columns(key, images, column, noise=False)
            maps = {name: columns[:, 0] for name, columns in shared.items()}
        return {**maps, **self.per_class(key, images, column)}

    def noise_statistics(self, key: tuple, images: np.ndarray, column: Columns
                         ) -> dict[str, np.ndarray]:
        """The ``(N, ...)`` maps of the runners that draw SmoothGrad's noisy copies
        themselves (SquareGrad, VarGrad), for the one fixed target ``column``: under
        SmoothGrad, the maps it does not average again."""
        maps = {}
        for kind, names in self.groups.items():
            if self.runners[kind].draws_noise:
                found = self.runners[kind].maps(names, key, images, column, None)
                maps.update({name: columns[:, 0] for name, columns in found.items()})
        return maps

    @property
    def averaged(self) -> bool:
        """Whether SmoothGrad has any method to average: one whose runner does not draw
        noisy copies itself."""
        return any(not runner.draws_noise for runner in self.runners.values())


def hands_out_features(methods: Sequence[str]) -> bool:
    """Whether the traced pass must return its feature map: a method with a feature map
    (the ``layer`` option) is computed by another runner (Score-CAM)."""
    return any(registry.method(m).feature_map and registry.method(m).runner != registry.GRADIENT
               for m in methods)


def by_runner(methods: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``methods`` grouped by the runner their records name, in the order of
    :data:`~guidedbp.engine.methods.registry.RUNNERS`, each group in the order of ``methods``;
    runners with no method left out."""
    groups = {kind: tuple(m for m in methods if registry.method(m).runner == kind)
              for kind in registry.RUNNERS}
    return {kind: names for kind, names in groups.items() if names}
