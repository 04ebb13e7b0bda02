"""What an explain run checks before it loads anything: no TensorFlow needed, none imported.

A missing or unreadable model file, inputs that name nothing, an output folder that
cannot be created or holds a manifest guidedbp did not write, a figure format without
matplotlib: each is a one-line :class:`~guidedbp.errors.GuidedbpError` within
milliseconds, instead of after the seconds TensorFlow takes to import.
:func:`check_run` makes these checks; :func:`guidedbp.explain_files` calls it (or
takes its result, as the CLI passes it after checking before importing TensorFlow).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from guidedbp._text import plural
from guidedbp.engine.methods.registry import method
from guidedbp.errors import ArgumentError, GuidedbpError
from guidedbp.figures import require_matplotlib
from guidedbp.io import store
from guidedbp.io.inputs import InputItem, collect_inputs
from guidedbp.io.lock import check_lock_object, check_lock_path
from guidedbp.io.manifest import check_own_manifest
from guidedbp.io.shard import select_shard
from guidedbp.models.loading import check_model_path
from guidedbp.pipeline.family import check_family
from guidedbp.pipeline.options import DEFAULT_OUTPUT, RunOptions
from guidedbp.pipeline.target_specs import DETECTION_KINDS


class NoImagesError(GuidedbpError):
    """The inputs name no image at all."""


@dataclass(frozen=True)
class CheckedRun:
    """A run's inputs and output folder, checked (:func:`check_run`), nothing written.

    Attributes:
        output: OUT.
        options: The run's options.
        items: The images to explain (of this shard, with ``shard``), in order, then
            the objects listed on a store that are skipped, each with its reason
            (:attr:`~guidedbp.io.inputs.InputItem.skipped`): each gets a record.
        passed_over: Files in input folders that are not images.
        hidden: Images and folders in input folders skipped as hidden (``.name``).
    """

    output: str
    options: RunOptions
    items: tuple[InputItem, ...]
    passed_over: int = 0
    hidden: int = 0


def check_run(
    model,
    inputs: str | os.PathLike | Sequence[str | os.PathLike],
    output: str | os.PathLike = DEFAULT_OUTPUT,
    *,
    options: RunOptions | None = None,
    runner: str = "local",
    **fields,
) -> CheckedRun:
    """Check what :func:`~guidedbp.explain_files` would run, without loading the model.

    Args: As :func:`~guidedbp.explain_files`' (``fields`` by flat option name).

    Returns:
        The :class:`CheckedRun`, which ``explain_files`` takes as its ``inputs``.

    Raises:
        GuidedbpError: The runner is unknown (or Ray missing), the model file is
            missing, unreadable or not a model, an input names nothing
            (:class:`~guidedbp.io.inputs.InputError`) or no input is an image
            (:class:`NoImagesError`), a figure needs matplotlib, ``mask_dir`` is no
            folder, or OUT cannot be created or written, or holds a manifest or lock
            guidedbp did not write; ``drise`` for targets that are not all detections
            (:func:`check_bound_methods`).
    """
    options = RunOptions.of(options, **fields)
    check_bound_methods(options)
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
        skipped = [plural(collected.passed_over, "other file") + " passed over"]
        if collected.hidden:
            skipped.append(f"{hidden_phrase(collected.hidden)} skipped")
        if collected.skipped:
            first = collected.skipped[0]
            skipped.append(f"{plural(len(collected.skipped), 'object')} skipped, "
                           f"{first.path!r} as {first.skipped}")
        raise NoImagesError(f"no images found in {', '.join(names)} ({', '.join(skipped)})")
    # The skipped objects last, each to get its record: the images' batches stay the same.
    items = collected.items + collected.skipped
    if options.inputs.shard is not None:  # an empty shard still writes its (empty) manifest
        items = select_shard(items, *options.inputs.shard)
    if options.output.figure is not None:
        require_matplotlib()
    mask_dir = options.classes.mask_dir
    missing = store.missing_bucket(mask_dir) if store.is_url(mask_dir) else None
    if missing is not None:
        raise GuidedbpError(f"mask_dir={mask_dir!r}: {missing}")
    if mask_dir is not None and not (store.is_prefix(mask_dir) if store.is_url(mask_dir)
                                     else os.path.isdir(mask_dir)):
        raise GuidedbpError(f"mask_dir={mask_dir!r} is not a folder: region masks lie in a "
                            "folder, at each input's path below its INPUT folder")
    check_output(output, options.manifest, create=False)
    if isinstance(model, (str, os.PathLike)):  # last, as loading it came after the rest
        check_model_path(os.fspath(model))
    return CheckedRun(output, options, tuple(items), collected.passed_over, collected.hidden)


def check_bound_methods(options: RunOptions) -> None:
    """Refuse a method that explains detections alone (``drise``) in a run whose targets
    are not all detections, before anything is loaded.

    Raises:
        ArgumentError: One line naming the method, what the run explains instead, and
            the targets it needs.
    """
    bound = [name for name in options.methods if method(name).target is not None]
    if not bound or options.classes.detections_only:
        return
    wanted = options.classes
    other = next((f"targets={spec.text}" for spec in wanted.targets
                  if spec.kind not in DETECTION_KINDS), None)
    instead = (f"classes={wanted.classes[0]}" if wanted.classes else
               f"top_k={wanted.top_k}" if wanted.top_k else
               other if other is not None else "each image's top class")
    raise ArgumentError(
        f"methods={bound[0]} explains a detector's detections alone, and this run explains "
        f"{instead}: name detections with targets=box:X0,Y0,X1,Y1[:C] or detections=top:K "
        "(guidedbp.targets.Detection in Python), or leave it out")


def hidden_phrase(count: int) -> str:
    """``"2 hidden images or folders"``: what the summary says was skipped."""
    return f"{count} hidden {'image or folder' if count == 1 else 'images or folders'} " \
        "('.name')"


def check_output(output: str, manifest_name: str, create: bool = True) -> list[str]:
    """OUT can be created and written into, its manifest and lock file, if any, are
    files guidedbp wrote, and it holds no other family's manifests
    (:func:`~guidedbp.pipeline.family.check_family`).

    With ``create=False`` the folders it creates to find out are removed again, so a
    check leaves nothing behind.

    Returns:
        The folders it created (``create=False``: would create), deepest last.

    Raises:
        GuidedbpError: Naming what is wrong; nothing is left behind.
    """
    if store.is_url(output):
        _check_store_output(output, manifest_name)
        return []  # a store has no folders to create
    created, folder = [], os.path.abspath(output)
    while not os.path.isdir(folder) and not os.path.lexists(folder):
        created.insert(0, folder)
        folder = os.path.dirname(folder)
    try:
        os.makedirs(output, exist_ok=True)
    except OSError as error:
        remove_created(created)
        raise GuidedbpError(f"cannot create the output folder {output!r}: "
                            f"{error.strerror or error}") from None
    try:
        if not os.access(output, os.W_OK | os.X_OK):
            raise GuidedbpError(f"cannot write into the output folder {output!r}: "
                                "permission denied")
        check_lock_path(output, manifest_name)
        check_own_manifest(os.path.join(output, manifest_name))
        check_family(output, manifest_name)
    except BaseException:
        remove_created(created)
        raise
    if not create:
        remove_created(created)
    return created


def _check_store_output(output: str, manifest_name: str) -> None:
    """OUT on a store: its bucket answers, and its manifest and lock, if any, are
    guidedbp's."""
    try:
        missing = store.missing_bucket(output)
        if missing is not None:
            raise GuidedbpError(f"cannot write to {output!r}: {missing} (guidedbp creates "
                                "none)")
        check_lock_object(output, manifest_name)
        check_own_manifest(store.join(output, manifest_name))
        check_family(output, manifest_name)
    except OSError as error:
        raise GuidedbpError(f"cannot reach {output!r}: {store.describe(error)}") from None


def remove_created(folders: list[str]) -> None:
    """Remove the folders a run created, deepest first, as long as they are empty."""
    for folder in reversed(folders):
        try:
            os.rmdir(folder)
        except OSError:
            return
