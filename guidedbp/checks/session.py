"""What the checks share: the loaded model, its images, and maps computed once.

A :class:`CheckSession` runs the guided explainer over every image the first time a
check asks, keeps each image's map and prediction, and hands out explainers for the
other methods, so that six checks cost about one explain run and a few traces.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace

import numpy as np

from guidedbp.checks.check_target import BatchTargets, CheckTarget
from guidedbp.checks.images import CheckImage


@dataclass
class CheckSettings:
    """Knobs of the checks, from the command's options.

    Attributes:
        randomization_steps: Weighted layers the cascading randomization re-draws,
            top layer first (one step each).
        randomization_images: Images the randomization check explains at each step.
        max_randomized_similarity: Gate for the randomization check: fail when the
            Spearman correlation at the last step is above it; ``None``: information only.
        min_similarity: The baseline check fails an image whose map's Spearman
            correlation with its stored map is below this.
        seed: Seeds the random weights of the randomization check.
        batch_size: Images per engine pass.
        expectations: ``(image, class index, line)`` from ``--expect``.
        baseline: A loaded :class:`~guidedbp.checks.baseline.Baseline`, or ``None``.
        run_options: The options that made this run's maps (method, preprocess,
            resize, size, inputs), compared with a baseline's.
        diff_folder: Where the baseline check writes a diff picture (baseline |
            current | |difference|) of each drifted map; ``None``: none is written.
        target: What every map explains (:func:`~guidedbp.checks.check_target.plan_check_target`);
            ``None``: each image's top class.
    """

    randomization_steps: int = 5
    randomization_images: int = 2
    max_randomized_similarity: float | None = None
    min_similarity: float = 0.9
    seed: int = 0
    batch_size: int = 16
    expectations: list = field(default_factory=list)
    baseline: object = None
    run_options: dict = field(default_factory=dict)
    diff_folder: str | None = None
    target: CheckTarget | None = None


@dataclass(frozen=True)
class Explained:
    """One image's guided map and the prediction it explains.

    Attributes:
        map: The guided map.
        target: The class explained (a unit's flat index, a region's class; -1 for a
            similarity).
        probability: Its probability (NaN for targets that have none).
        logit: The score differentiated.
        pixels: A region target's pixels at the output's resolution, else ``None``.
        description: How the target is named (``region:circle (1,234 px)``) when the
            run names one, else ``None``.
    """

    map: np.ndarray
    target: int
    probability: float
    logit: float
    pixels: int | None = None
    description: str | None = None


class CheckSession:
    """The loaded model, its images and the maps the checks share.

    Args:
        loaded: A :class:`~guidedbp.models.loading.LoadedModel`.
        images: The run's :class:`~guidedbp.checks.images.CheckImage` list.
        settings: The checks' :class:`CheckSettings`.
    """

    def __init__(self, loaded, images: list[CheckImage], settings: CheckSettings | None = None):
        self.loaded = loaded
        self.images = images
        self.settings = settings or CheckSettings()
        self._explainers: dict[str, object] = {}
        self._explained: dict[str, Explained] | None = None
        self._masks: dict[str, np.ndarray] = {}
        self.prediction_errors: dict[str, str] = {}

    # -- shared results ----------------------------------------------------------------

    def explainer(self, method: str = "guided", guide: str | None = None):
        """The engine's explainer for ``method`` (and ``guide``, the rule's scope;
        ``None``: its default) on this model, made once."""
        key = method if guide is None else f"{method}/{guide}"
        if key not in self._explainers:
            from guidedbp.api import Explainer

            target = self.settings.target
            self._explainers[key] = Explainer(
                self.loaded, method, batch_size=self.settings.batch_size, guide=guide,
                output=None if target is None else target.output,
            )
        return self._explainers[key]

    @property
    def report(self):
        """The guided explainer's report: guided activations, plain ones, head.

        Raises:
            ValueError: When the engine cannot trace the model (several outputs, no
                ``(batch, classes)`` output).
        """
        explainer = self.explainer("guided")
        with _quiet():
            try:
                return explainer.report
            except ValueError:
                # A model that declares no input shape is traced by explaining images.
                if not self.explained:
                    raise
                return explainer.report

    def scope_report(self, guide: str):
        """The report of the guided explainer of scope ``guide`` (``"all"``, ``"relu"``),
        traced for the first usable image (or the declared shape)."""
        explainer = self.explainer("guided", guide=guide)
        with _quiet():
            usable = self.usable
            return explainer.report_for(usable[0].pixels.shape) if usable else explainer.report

    @property
    def explained(self) -> dict[str, Explained]:
        """Guided map and prediction of each decoded image the model could take, by key."""
        if self._explained is None:
            decoded, target = [], self.settings.target
            for image in self.images:
                if image.pixels is None:
                    continue
                try:
                    self._mask(image)
                except Exception as error:  # as explain_each does: this image fails alone
                    self.prediction_errors[image.key] = _reason(error)
                    continue
                decoded.append(image)
            if target is None or target.planned is None:
                wanted = None  # each image's top class
            elif target.by_class:
                wanted = [target.planned.index] * len(decoded)
            else:
                wanted = self._batch(decoded)
            results, errors = explain_each(
                self.explainer("guided"), [image.pixels for image in decoded], wanted
            )
            self._explained = {}
            for image, result, error in zip(decoded, results, errors):
                if error is not None:
                    self.prediction_errors[image.key] = error
                    continue
                if target is not None:
                    result = replace(result, description=target.describe(
                        result.target, result.logit, result.probability, result.pixels))
                self._explained[image.key] = result
        return self._explained

    def targets_of(self, images: list[CheckImage]):
        """What the maps of ``images`` explain, for :meth:`maps` and
        :func:`explain_each`: the class each was explained for, or, for a target
        other than a class, that target with each image's region fixed."""
        target = self.settings.target
        if target is None or target.by_class:
            return [self.explained[image.key].target for image in images]
        return self._batch(images)

    def describe(self, key: str) -> str:
        """How image ``key``'s explained target is named: ``region:circle (1,234 px)``
        for a run that names its target, else ``class 3 (circle)``."""
        result = self.explained[key]
        if result.description is not None:
            return result.description
        labels = self.loaded.labels
        if labels is not None and 0 <= result.target < len(labels):
            return f"class {result.target} ({labels[result.target]})"
        return f"class {result.target}"

    def region_mask(self, key: str) -> np.ndarray | None:
        """Image ``key``'s region (``(H', W')`` bool) for a region target, else ``None``."""
        return self._masks.get(key)

    def _mask(self, image: CheckImage) -> None:
        target = self.settings.target
        if target is not None and image.key not in self._masks:
            mask = target.region_mask(self.loaded.model, image.pixels)
            if mask is not None:
                self._masks[image.key] = mask

    def _batch(self, images: list[CheckImage]) -> BatchTargets:
        masks = [self._masks.get(image.key) for image in images]
        return BatchTargets(self.settings.target,
                            tuple(masks) if masks and masks[0] is not None else None)

    @property
    def usable(self) -> list[CheckImage]:
        """Images that decoded and that the model explained, in input order."""
        explained = self.explained
        return [image for image in self.images if image.key in explained]

    def maps(self, method: str, images: list[CheckImage], targets,
             guide: str | None = None) -> list[np.ndarray]:
        """``method``'s maps of ``images`` for the given classes (or
        :meth:`targets_of`), one per image, the guided rules in scope ``guide``
        (``None``: their default).

        Raises:
            RuntimeError: When the engine fails on an image (it explained them all once).
        """
        results, errors = explain_each(self.explainer(method, guide),
                                       [i.pixels for i in images], targets)
        failed = [image.key for image, error in zip(images, errors) if error is not None]
        if failed:
            raise RuntimeError(f"the engine failed on {', '.join(failed)}: "
                               f"{next(e for e in errors if e is not None)}")
        return [result.map for result in results]


def explain_each(explainer, pixels: list[np.ndarray], targets=None) -> tuple[list, list]:
    """Explain images of possibly different shapes, one engine pass per shape.

    Args:
        explainer: An :class:`~guidedbp.engine.explainer.Explainer`.
        pixels: ``(H, W, C)`` images in the model's input space.
        targets: ``None`` (each image's top-1 class), one class per image, or a
            :class:`~guidedbp.checks.check_target.BatchTargets` (one target for them all).

    Returns:
        ``(results, errors)``: per image an :class:`Explained` (or ``None``) and the
        error message where the engine could not take it (or ``None``).
    """
    count = len(pixels)
    classes = targets if targets is None or isinstance(targets, BatchTargets) \
        else np.asarray(targets, np.int64).reshape(count)
    results: list = [None] * count
    errors: list = [None] * count
    groups: dict[tuple, list[int]] = {}
    for index, values in enumerate(pixels):
        groups.setdefault(values.shape, []).append(index)
    for indices in groups.values():
        _explain_group(explainer, pixels, classes, indices, results, errors)
    return results, errors


def _explain_group(explainer, pixels, classes, indices, results, errors) -> None:
    batch = np.stack([pixels[i] for i in indices])
    if isinstance(classes, BatchTargets):
        target = classes.for_batch(indices)
    else:
        target = None if classes is None else classes[indices]
    try:
        with _quiet():
            explanation = explainer.explain(batch, target)
    # TensorFlow raises its own error types for an input the model cannot take; any
    # error fails those images, not the run: retry one by one to find the culprit.
    except Exception as error:
        if len(indices) > 1:
            for index in indices:
                _explain_group(explainer, pixels, classes, [index], results, errors)
            return
        errors[indices[0]] = _reason(error)
        return
    pixels_of = explanation.region_pixels
    for position, index in enumerate(indices):
        results[index] = Explained(
            map=explanation.maps[position],
            target=int(explanation.targets[position]),
            probability=float(explanation.probabilities[position]),
            logit=float(explanation.logits[position]),
            pixels=None if pixels_of is None else int(pixels_of[position]),
        )


def _reason(error: BaseException) -> str:
    return " ".join(str(error).split())[:300] or type(error).__name__


class _quiet(warnings.catch_warnings):
    """Silence NoReluWarning: the relu-coverage check reports it instead."""

    def __enter__(self):
        result = super().__enter__()
        from guidedbp.engine.explainer import NoReluWarning

        warnings.simplefilter("ignore", NoReluWarning)
        return result
