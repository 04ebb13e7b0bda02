"""The pipeline as a library: explain files into a folder, or one image for a notebook.

:func:`explain_files` is exactly what ``guidedbp explain`` runs (the command only
parses flags and prints the summary), so both write the same files byte for byte.
:func:`explain_image` decodes and preprocesses one file as the command does and
returns the maps together with the picture.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from guidedbp.api import Explainer
from guidedbp.engine.explainer import Explanation
from guidedbp.errors import GuidedbpError
from guidedbp.io.images import decode_image
from guidedbp.io.inputs import collect_inputs
from guidedbp.io.shard import select_shard
from guidedbp.models.labels import resolve_class
from guidedbp.models.loading import LoadedModel, load_model
from guidedbp.models.preprocess import prepare
from guidedbp.pipeline.local import run_local
from guidedbp.pipeline.naming import label_of
from guidedbp.pipeline.options import DEFAULT_OUTPUT, RunOptions
from guidedbp.pipeline.stages import Feed, Plan, Summary


class NoImagesError(GuidedbpError):
    """The inputs name no image at all."""


def explain_files(
    model,
    inputs: str | os.PathLike | Sequence[str | os.PathLike],
    output: str | os.PathLike = DEFAULT_OUTPUT,
    *,
    options: RunOptions | None = None,
    load: dict | None = None,
    runner: str = "local",
    cluster=None,
    progress=None,
    **fields,
) -> Summary:
    """Explain image files, folders and globs into ``output``, with a manifest.

    This is what ``guidedbp explain`` runs: the same inputs, names, renders and
    manifest (see the command's help for the naming rule).

    Args:
        model: A model spec (``model.keras``, ``model.h5``, a SavedModel folder,
            ``keras:NAME``, ``demo``), a :class:`~guidedbp.models.loading.LoadedModel`
            or a ``keras.Model``.
        inputs: Image files, folders and glob patterns.
        output: The folder for maps and ``manifest.jsonl``.
        options: :class:`~guidedbp.pipeline.options.RunOptions`.
        load: Keyword arguments of :func:`guidedbp.load_model` for a spec.
        runner: ``"local"`` (this process) or ``"ray"`` (a Ray Data pipeline; needs
            ``model`` as a spec, which each worker loads).
        cluster: :class:`~guidedbp.pipeline.ray_runner.Cluster` for the Ray runner.
        progress: An object with ``advance()``, called once per input (and
            ``begin(total)``, if it has one, called once before the first).
        **fields: Options by their flat names (``methods="guided,gradcam"``,
            ``top_k=3``, ``renders=("panel",)``, ``classes=("tabby",)``, ...),
            replacing those of ``options``.

    Returns:
        The run's :class:`~guidedbp.pipeline.stages.Summary`; its ``exit_code`` is the
        command's.

    Raises:
        GuidedbpError: Bad options, inputs that name nothing, a model that does not
            load, a class that does not exist. Failing inputs do not raise: they are
            counted in the summary and recorded in the manifest.

    >>> summary = explain_files("demo", "sample_images/shapes", "maps",
    ...                         methods="guided,gradcam", renders="panel")  # doctest: +SKIP
    >>> summary.done, summary.failures  # doctest: +SKIP
    (6, [])
    """
    options = RunOptions.of(options, **fields)
    output = os.fspath(output)
    if runner not in ("local", "ray"):
        raise GuidedbpError(f"runner={runner!r} is not one of local, ray")
    if runner == "ray":
        from guidedbp.pipeline.ray_runner import import_ray

        import_ray()
        if not isinstance(model, (str, os.PathLike)):
            raise GuidedbpError("runner='ray' needs the model as a spec (a path or keras:NAME)")
    names = [os.fspath(inputs)] if isinstance(inputs, (str, os.PathLike)) else \
        [os.fspath(i) for i in inputs]
    collected = collect_inputs(names, options.inputs.recursive, exclude=output)
    if not collected.items:
        raise NoImagesError(f"no images found in {', '.join(names)} "
                            f"({collected.passed_over} other files passed over)")
    items = collected.items
    if options.inputs.shard is not None:  # an empty shard still writes its (empty) manifest
        items = select_shard(items, *options.inputs.shard)

    loaded = model if isinstance(model, LoadedModel) else load_model(model, **(load or {}))
    explainer = Explainer(loaded, options.methods, options=options.method)
    num_classes = explainer.report.num_classes  # traces once: a bad layer fails here
    classes = tuple(resolve_class(spec, loaded.labels, num_classes)
                    for spec in options.classes.classes)
    os.makedirs(output, exist_ok=True)
    if hasattr(progress, "begin"):
        progress.begin(len(items))
    plan = Plan(output, options, Feed.of(loaded), classes)
    if runner == "ray" and items:
        from guidedbp.pipeline.ray_runner import Cluster, Recipe, run_on_ray

        recipe = Recipe(os.fspath(model), dict(load or {}))
        summary = run_on_ray(plan, recipe, items, cluster or Cluster(), progress)
    else:
        summary = run_local(plan, explainer, items, progress)
    summary.passed_over = collected.passed_over
    return summary


@dataclass(frozen=True)
class ImageExplanation:
    """One image file's explanation, with the pictures it was made from.

    Attributes:
        path: The file.
        image: The decoded uint8 picture ``(H0, W0, C)``.
        fitted: The uint8 picture at the model's resolution.
        placement: How ``fitted`` sits in ``image`` (maps back to the original size).
        explanation: The engine's :class:`~guidedbp.engine.explainer.Explanation`
            for this one image (batch axis of 1).
        labels: The model's class names, or ``None``.
    """

    path: str
    image: np.ndarray
    fitted: np.ndarray
    placement: object
    explanation: Explanation
    labels: tuple[str, ...] | None = None

    @property
    def target(self) -> int:
        return int(self.explanation.targets[0])

    @property
    def label(self) -> str | None:
        return label_of(self.target, self.labels)

    @property
    def probability(self) -> float:
        return float(self.explanation.probabilities[0])

    @property
    def maps(self) -> dict[str, np.ndarray]:
        """Each method's map at the model's resolution, ``(h, w, C)``."""
        return {m: maps[0] for m, maps in self.explanation.by_method.items()}

    def original_maps(self) -> dict[str, np.ndarray]:
        """Each method's map mapped back onto the original picture, ``(H0, W0, C)``."""
        return {m: self.placement.to_original(v) for m, v in self.maps.items()}


def explain_image(model, path: str | os.PathLike, target=None, *, methods="guided",
                  load: dict | None = None, **fields) -> ImageExplanation:
    """Decode, fit and preprocess one image file as ``guidedbp explain`` does, and explain it.

    Args:
        model: What :func:`explain_files` takes, or a :class:`guidedbp.Explainer`
            (reused as it is: build one once to explain many images in a notebook).
        path: The image file.
        target: ``None`` (top-1), a class index or a class name.
        methods: Method names (ignored when ``model`` is an Explainer).
        load: Keyword arguments of :func:`guidedbp.load_model` for a spec.
        **fields: Method and input options by flat name (``smooth``, ``layer``,
            ``size``, ``resize``, ...).

    Raises:
        GuidedbpError: A file that is not a readable image, a bad option or class.

    >>> result = explain_image("demo", "sample_images/shapes/circle.png")  # doctest: +SKIP
    >>> result.label, result.maps["guided"].shape  # doctest: +SKIP
    ('circle', (96, 96, 3))
    """
    options = RunOptions.of(methods=methods, **fields)
    if isinstance(model, Explainer):
        explainer = model
    else:
        loaded = model if isinstance(model, LoadedModel) else load_model(model, **(load or {}))
        explainer = Explainer(loaded, options.methods, options=options.method)
    loaded = explainer.loaded or load_model(explainer.model)
    image = decode_image(os.fspath(path), channels=loaded.channels)
    fitted, placement, model_input = prepare(image, loaded.input_shape, loaded.preprocess,
                                             options.inputs.size, options.inputs.resize)
    explanation = explainer.explain(model_input[None], target)
    labels = None if loaded.labels is None else tuple(loaded.labels)
    return ImageExplanation(os.fspath(path), image, fitted, placement, explanation, labels)
