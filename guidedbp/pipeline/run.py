"""The pipeline as a library: explain files into a folder, or one image for a notebook.

:func:`explain_files` is exactly what ``guidedbp explain`` runs (the command only
parses flags and prints the summary), so both write the same files byte for byte.
:func:`explain_image` decodes and preprocesses one file as the command does and
returns the maps together with the picture.
"""

from __future__ import annotations

import os
import stat
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from guidedbp._text import plural
from guidedbp.api import Explainer
from guidedbp.engine.explainer import Explanation
from guidedbp.errors import GuidedbpError
from guidedbp.io.images import decode_image
from guidedbp.io.inputs import collect_inputs
from guidedbp.io.lock import OutputLock
from guidedbp.io.manifest import is_manifest, read_earlier
from guidedbp.io.report import write_report
from guidedbp.io.shard import select_shard
from guidedbp.models.labels import resolve_class
from guidedbp.models.loading import LoadedModel, load_model
from guidedbp.models.preprocess import prepare
from guidedbp.pipeline.local import run_local
from guidedbp.pipeline.naming import label_of
from guidedbp.pipeline.options import DEFAULT_OUTPUT, RunOptions
from guidedbp.pipeline.stages import Feed, Plan, Summary, carried_over, record
from guidedbp.plot import require_matplotlib


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
    started = time.perf_counter()
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
                            f"({plural(collected.passed_over, 'other file')} passed over)")
    items = collected.items
    if options.inputs.shard is not None:  # an empty shard still writes its (empty) manifest
        items = select_shard(items, *options.inputs.shard)
    if options.output.figure is not None:
        require_matplotlib()  # before anything is written or loaded
    manifest = os.path.join(output, options.manifest)
    created = _check_output(output, manifest)  # before the model loads: fail fast
    try:
        summary, loading = _run(model, load, options, output, manifest, items, runner,
                                cluster, progress, started)
    except BaseException:
        _remove_if_empty(created)  # a run that wrote nothing leaves nothing behind
        raise
    summary.passed_over = collected.passed_over
    summary.loading = loading
    if options.output.report and options.inputs.shard is None:
        summary.report = _report(output, options.manifest)
    summary.seconds = time.perf_counter() - started
    return summary


class ReportWarning(UserWarning):
    """The run's maps and manifest are written, but its ``index.html`` could not be."""


def _report(output: str, manifest: str) -> str | None:
    """Write OUT/index.html from the manifest; a page that cannot be written is a warning
    (the run's own files are all there), not a failed run."""
    try:
        return write_report(output, manifest)
    except (GuidedbpError, OSError) as error:
        warnings.warn(f"no report written: {error}", ReportWarning, stacklevel=3)
        return None


def _run(model, load, options, output, manifest, items, runner, cluster, progress, started):
    with OutputLock(output, options.manifest):
        earlier = read_earlier(manifest)
        loaded = model if isinstance(model, LoadedModel) else load_model(model, **(load or {}))
        explainer = Explainer(loaded, options.methods, options=options.method)
        num_classes = explainer.report.num_classes  # traces once: a bad layer fails here
        for note in _notes(loaded, num_classes):
            warnings.warn(note, ModelWarning, stacklevel=3)
        classes = tuple(resolve_class(spec, loaded.labels, num_classes)
                        for spec in options.classes.classes)
        owned = frozenset(path for record in earlier.values()
                          for target in record["targets"] if isinstance(target, dict)
                          for path in _paths_of(target))
        plan = Plan(output, options, Feed.of(loaded), classes, num_classes, owned)
        carried = carried_over(plan, items, earlier) if options.output.skip_existing else {}
        carried.update(_clashes(plan, items))
        if hasattr(progress, "begin"):
            progress.begin(len(items))
        loading = time.perf_counter() - started
        if runner == "ray" and items:
            from guidedbp.pipeline.ray_runner import Cluster, Recipe, run_on_ray

            recipe = Recipe(os.fspath(model), dict(load or {}))
            summary = run_on_ray(plan, recipe, items, cluster or Cluster(), progress, carried)
        else:
            summary = run_local(plan, explainer, items, progress, carried)
    return summary, loading


def _clashes(plan: Plan, items: list) -> dict[str, dict]:
    """Failed records for inputs whose output names differ from an earlier input's only in
    letter case (``A.PNG``, ``a.png``): on a case-insensitive disk they would be one file."""
    seen: dict[str, str] = {}
    failed = {}
    for item in items:
        key = item.output_stem.casefold()
        if key in seen:
            failed[item.path] = record(plan, item, "error", (
                f"its output names differ from those of {seen[key]!r} only in letter case, "
                "which a case-insensitive disk cannot keep apart: rename one of them"), [])
        else:
            seen[key] = item.path
    return failed


class ModelWarning(UserWarning):
    """Something to know about the model before trusting its maps (what ``guidedbp
    inspect`` notes): random weights, no preprocessing found, labels that do not
    match the classes."""


def _notes(loaded, num_classes: int) -> list[str]:
    notes = list(loaded.notes)
    if loaded.labels is not None and len(loaded.labels) != num_classes:
        notes.append(f"{plural(len(loaded.labels), 'class name')} for "
                     f"{plural(num_classes, 'class')}: names may be wrong")
    return notes


def _paths_of(target: dict) -> list[str]:
    outputs = target.get("outputs") if isinstance(target.get("outputs"), dict) else {}
    raw = target.get("raw")
    raws = [raw] if isinstance(raw, str) else list(raw.values()) if isinstance(raw, dict) else []
    return [p for p in [*outputs.values(), *raws] if isinstance(p, str)]


def _check_output(output: str, manifest: str) -> list[str]:
    """OUT can be created, and its manifest, if any, is a file guidedbp wrote.

    Returns:
        The folders it created, deepest last.

    Raises:
        GuidedbpError: Naming what is wrong.
    """
    created, folder = [], os.path.abspath(output)
    while not os.path.isdir(folder) and not os.path.lexists(folder):
        created.insert(0, folder)
        folder = os.path.dirname(folder)
    try:
        os.makedirs(output, exist_ok=True)
    except OSError as error:
        raise GuidedbpError(f"cannot create the output folder {output!r}: "
                            f"{error.strerror or error}") from None
    if not os.access(output, os.W_OK | os.X_OK):
        raise GuidedbpError(f"cannot write into the output folder {output!r}: permission denied")
    try:
        mode = os.lstat(manifest).st_mode
    except FileNotFoundError:
        return created
    if stat.S_ISLNK(mode):
        raise GuidedbpError(f"{manifest!r} is a symbolic link: guidedbp does not write "
                            "through links (remove it, or choose another output folder)")
    if not stat.S_ISREG(mode) or not is_manifest(manifest):
        raise GuidedbpError(f"{manifest!r} exists and is not a guidedbp manifest: refusing to "
                            "overwrite it (move it, or choose another output folder)")
    return created


def _remove_if_empty(folders: list[str]) -> None:
    for folder in reversed(folders):
        try:
            os.rmdir(folder)
        except OSError:
            return


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
