"""The explain pipeline's stages, as plain functions of a picklable :class:`Plan`.

    list inputs -> prepare (decode, fit, preprocess) -> explain (engine)
                -> outcome (render, write) -> manifest record

Every runner (the local streaming runner, the Ray runner) calls these same
functions; only where and when they run differs. A stage needs the plan and its
own inputs, never a runner's object: decoding needs the model's input shape and
preprocessing (in the plan), explaining needs an explainer, writing needs neither.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass, field

import numpy as np

from guidedbp._text import one_line
from guidedbp.caveats import Caveat, unique
from guidedbp.engine.methods import method
from guidedbp.figures import is_own_figure, is_whole_figure
from guidedbp.io.images import ImageError, decode_image
from guidedbp.io.inputs import InputItem
from guidedbp.io.write import atomic_write_bytes, is_own_png, is_whole_png, save_npy, save_png
from guidedbp.models.preprocess import draft_side, resize_map, resize_picture
from guidedbp.models.preprocess import prepare as fit_and_preprocess
from guidedbp.pipeline.naming import Naming, label_of
from guidedbp.pipeline.options import RunOptions
from guidedbp.render import Column, render, render_column, render_panel


@dataclass(frozen=True)
class Feed:
    """What decoding needs to know of the model (picklable: no model inside).

    Attributes:
        input_shape: ``(H, W, C)``, ``None`` for free dimensions.
        channels: Image channels the model takes (1 or 3).
        preprocess: The preprocessing mode.
        labels: Class names, or ``None``.
    """

    input_shape: tuple
    channels: int
    preprocess: str
    labels: tuple[str, ...] | None = None

    @classmethod
    def of(cls, loaded) -> Feed:
        """The feed of a :class:`~guidedbp.models.loading.LoadedModel`."""
        labels = None if loaded.labels is None else tuple(loaded.labels)
        return cls(tuple(loaded.input_shape), loaded.channels, loaded.preprocess, labels)


@dataclass(frozen=True)
class Plan:
    """What every stage of one run reads.

    Attributes:
        output: OUT.
        options: The run's :class:`~guidedbp.pipeline.options.RunOptions`.
        feed: The model's :class:`Feed`.
        classes: The explicit classes, resolved to indices (empty: top-1 or top-k).
        num_classes: How many classes the model has (0: not known).
        owned: Files under OUT (relative paths) that an earlier run's manifest says
            guidedbp wrote; with the PNGs that carry guidedbp's mark, the only files
            a run may replace.
        guided: What the swapping rules guided, from the explainer's report: rule ->
            ``{"guide": scope, "guided_activations": {kind: count}}`` (empty when no
            method swaps gradients); every record carries it.
    """

    output: str
    options: RunOptions
    feed: Feed
    classes: tuple[int, ...] = ()
    num_classes: int = 0
    owned: frozenset = frozenset()
    guided: dict = field(default_factory=dict)

    @property
    def naming(self) -> Naming:
        options = self.options
        return Naming(options.methods, options.render.renders, options.output.raw,
                      self.feed.labels, bool(self.classes or options.classes.top_k),
                      options.output.figure)


@dataclass
class Prepared:
    """One input after decoding: its pictures and model input, or why it failed."""

    item: InputItem
    original: np.ndarray | None = None  # decoded uint8 (H0, W0, C)
    fitted: np.ndarray | None = None  # uint8 at model resolution
    placement: object = None
    model_input: np.ndarray | None = None
    error: str | None = None
    carried: dict | None = None  # an earlier run's record, when resuming skips it


@dataclass(frozen=True)
class Explained:
    """One class's maps for one input, and what makes them less meaningful."""

    target: int
    probability: float
    maps: dict  # method -> float32 map at model resolution
    caveats: tuple[Caveat, ...] = ()


@dataclass
class Summary:
    """What a run did."""

    done: int = 0
    skipped: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)
    interrupted: bool = False
    seconds: float = 0.0  # the whole run, loading the model included
    loading: float = 0.0  # of which: loading the model and tracing the engine
    passed_over: int = 0
    hidden: int = 0  # images and folders in input folders skipped as hidden (".name")
    output: str = ""
    manifest: str = "manifest.jsonl"
    report: str | None = None  # the run's index.html, when one was written

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if self.failures else 0

    def count(self, record: dict, skipped: bool = False) -> None:
        """Count one input's manifest record (``skipped``: carried over from an earlier
        run)."""
        if record["status"] == "error":
            self.failures.append((record["input"], record["error"]))
        elif skipped or record["status"] == "skipped":
            self.skipped += 1
        else:
            self.done += 1


def batched(items: list, size: int) -> list[list]:
    """The engine's batches, in input order. Every runner forms the same ones: a map can
    differ in its last bits with the batch it was computed in, and outputs must not."""
    return [items[i : i + size] for i in range(0, len(items), size)]


# -- prepare -----------------------------------------------------------------------------


def carried_over(plan: Plan, items: list[InputItem], earlier: dict[str, dict]) -> dict:
    """Resuming: the inputs whose earlier record and outputs still describe them, with
    those records (input path -> record), so they are neither decoded nor computed.

    An input is carried over only when its earlier record is ``ok`` for the same
    methods and classes, names exactly the outputs this run would write, and every
    one of those files is whole (a PNG that ends in IEND and carries guidedbp's mark,
    an ``.npy`` with its header): the resumed manifest then holds the same records an
    uninterrupted run writes. Anything less is recomputed.
    """
    by_path = {_same_file_key(path): record for path, record in earlier.items()}
    carried = {}
    for item in items:
        record = by_path.get(_same_file_key(item.path))
        if record is not None and _still_valid(plan, item, record):
            # As this run names it; a record from before caveats were recorded lists none.
            carried[item.path] = {"caveats": [], **record, "input": item.path}
    return carried


def _same_file_key(path: str) -> str:
    """An earlier record's input and this run's, however spelled (``a/../a/x.png``);
    its outputs must still be the ones this run names (:func:`_still_valid`)."""
    return os.path.normpath(os.path.abspath(path))


def _scopes(guided) -> dict:
    """Rule -> scope of a record's or a plan's ``guided`` field."""
    if not isinstance(guided, dict):
        return {}
    return {rule: value.get("guide") if isinstance(value, dict) else None
            for rule, value in guided.items()}


def _still_valid(plan: Plan, item: InputItem, record: dict) -> bool:
    options, naming = plan.options, plan.naming
    targets = record.get("targets") or []
    if record.get("status") != "ok" or record.get("method") != ",".join(options.methods):
        return False
    if _scopes(record.get("guided")) != _scopes(plan.guided):
        return False  # another --guide (or a manifest from before it): other maps
    classes = [target.get("class") for target in targets]
    if plan.classes:
        wanted = list(plan.classes) == classes
    elif options.classes.top_k:
        wanted = len(classes) == min(options.classes.top_k, plan.num_classes or len(classes))
    else:
        wanted = len(classes) == 1
    if not wanted or not all(isinstance(c, int) for c in classes):
        return False
    for target in targets:
        outputs, raw = naming.paths(item.output_stem, target["class"])
        if target.get("outputs") != outputs or target.get("raw") != raw:
            return False
        if not all(_is_own_output(os.path.join(plan.output, path)) for path in outputs.values()):
            return False
        if not all(_is_npy(os.path.join(plan.output, path))
                   for _, path in naming.raw_items(raw)):
            return False
    return True


def _is_own_output(path: str) -> bool:
    """Whether ``path`` is a whole picture or figure that guidedbp wrote."""
    if path.endswith(".png"):
        return is_whole_png(path) and is_own_png(path)
    return is_own_figure(path)


def _is_npy(path: str) -> bool:
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        with open(path, "rb") as handle:
            return handle.read(6) == b"\x93NUMPY"
    except OSError:
        return False


def prepare(plan: Plan, item: InputItem, carried: dict | None = None) -> Prepared:
    """Decode, fit and preprocess one input (or pass on its ``carried`` earlier record)."""
    prepared = Prepared(item, carried=carried)
    if carried is not None:
        return prepared  # neither decoded nor computed
    inputs = plan.options.inputs
    try:
        # A JPEG far larger than anything drawn from it is decoded reduced.
        image = decode_image(item.path, channels=plan.feed.channels,
                             draft_side=draft_side(plan.feed.input_shape, inputs.size))
    except ImageError as error:
        prepared.error = error.reason
        return prepared
    try:
        prepared.fitted, prepared.placement, prepared.model_input = fit_and_preprocess(
            image, plan.feed.input_shape, plan.feed.preprocess, inputs.size, inputs.resize,
        )
        shown = prepared.placement.shown_size  # maps are drawn at most this large
        if tuple(image.shape[:2]) != tuple(shown):
            image = resize_picture(image, shown)
    except MemoryError:
        prepared.error = "out of memory while fitting the image to the model"
        return prepared
    prepared.original = image
    return prepared


# -- explain -----------------------------------------------------------------------------


def explain(plan: Plan, explainer, batch: list[Prepared]) -> dict[int, list[Explained]]:
    """Maps for each decoded item of a batch: position -> one :class:`Explained` per class.

    Images of one shape go through the engine together. An image the model cannot
    take (a free-size model given an image smaller than its kernels) fails alone:
    its ``error`` is set and the others are explained.
    """
    results: dict[int, list[Explained]] = {}
    groups: dict[tuple, list[int]] = {}
    for position, prepared in enumerate(batch):
        if prepared.model_input is not None:
            groups.setdefault(prepared.model_input.shape, []).append(position)
    for positions in groups.values():
        _explain_group(plan, explainer, batch, positions, results)
    return results


def _explain_group(plan, explainer, batch, positions, results) -> None:
    images = np.stack([batch[p].model_input for p in positions])
    try:
        explained = _targets(plan, explainer, images)
    # The engine raises TensorFlow's own error types for an input the model cannot
    # take; the pipeline stays free of TensorFlow names, so any error counts. It fails
    # that image, not the run.
    except Exception as error:
        if len(positions) > 1:  # find the image(s) to blame: retry one by one
            for position in positions:
                _explain_group(plan, explainer, batch, [position], results)
            return
        prepared = batch[positions[0]]
        height, width = prepared.model_input.shape[:2]
        prepared.error = (f"the model cannot take this image ({height}x{width} at its "
                          f"input): {engine_reason(error)}")
        return
    for position, targets in zip(positions, explained):
        results[position] = targets


def _targets(plan: Plan, explainer, images: np.ndarray) -> list[list[Explained]]:
    """Per image, one :class:`Explained` per class: every method and every class from one
    engine call (one forward pass)."""
    if plan.classes:
        explanations = explainer.explain_classes(images, plan.classes)
    else:
        explanations = explainer.explain_top_k(images, plan.options.classes.top_k or 1)
    return [
        [Explained(int(e.targets[index]), float(e.probabilities[index]),
                   {m: maps[index] for m, maps in e.by_method.items()}, e.caveats_of(index))
         for e in explanations]
        for index in range(len(images))
    ]


def engine_reason(error: BaseException) -> str:
    """The line that says what went wrong in a TensorFlow error, without its op trace."""
    skipped = ("File ", "Graph execution error", "Detected at node", "[[")
    lines = [line.strip() for line in str(error).splitlines()]
    useful = [line for line in lines if line and not line.startswith(skipped)]
    return one_line(useful[0], limit=200) if useful else type(error).__name__


# -- write -------------------------------------------------------------------------------


def outcome(plan: Plan, prepared: Prepared, explained: list[Explained] | None) -> dict:
    """Write one input's outputs and return its manifest record.

    ``explained`` is the input's entry of :func:`explain`, ``None`` when it has none:
    it failed (``prepared.error``) or was carried over from an earlier run. A failed
    write (disk full, permissions, a file of the user's in the way, no memory left)
    fails that input, not the run.
    """
    item = prepared.item
    if prepared.error is not None:
        return record(plan, item, "error", prepared.error, [])
    if prepared.carried is not None:
        return prepared.carried
    try:
        return _write(plan, prepared, explained)
    except (OSError, ValueError) as error:
        return record(plan, item, "error", one_line(error), [])
    except MemoryError:
        return record(plan, item, "error", "out of memory while rendering its maps", [])


def _write(plan: Plan, prepared: Prepared, explained: list[Explained]) -> dict:
    options, labels, naming = plan.options, plan.feed.labels, plan.naming
    style = options.render.style
    targets = []
    caveats: list[Caveat] = []
    for entry in explained:
        caveats += entry.caveats
        outputs, raw = naming.paths(prepared.item.output_stem, entry.target)
        for relative in [*outputs.values(), *(path for _, path in naming.raw_items(raw))]:
            _check_target(plan, relative, outputs.values())
        if options.render.output_size == "original":
            shown = {m: prepared.placement.to_original(v) for m, v in entry.maps.items()}
            picture = prepared.original
        else:
            shown, picture = entry.maps, prepared.fitted
        label = label_of(entry.target, labels)
        named_class = f"{label} (class {entry.target})" if label else f"class {entry.target}"
        caption = f"{named_class} p={entry.probability:.3f}"
        if len(options.methods) == 1:  # a comparison panel titles its columns instead
            caption = f"{options.methods[0]}: {caption}"
        for key, relative in outputs.items():
            if key == "figure":
                _write_figure(plan, os.path.join(plan.output, relative), picture, shown,
                              f"{named_class} p={entry.probability:.3f}", entry.caveats)
                continue
            if key == "panel" and len(shown) > 1:
                array = comparison_panel(shown, picture, caption, style, options.render.tile,
                                         entry.caveats)
            else:
                name_of_method, _, name = key.rpartition(".")
                name_of_method = name_of_method or options.methods[0]
                lines = [c.line for c in entry.caveats if c.concerns(name_of_method)]
                array = render(name, shown[name_of_method], picture, caption=caption,
                               caveats=lines, **options.render.panel_style)
            save_png(os.path.join(plan.output, relative), array)
        for name_of_method, relative in naming.raw_items(raw):
            save_npy(os.path.join(plan.output, relative),
                     entry.maps[name_of_method].astype(np.float32))
        targets.append({"class": entry.target, "label": label,
                        "score": round(entry.probability, 6), "outputs": outputs, "raw": raw,
                        "caveats": [caveat.as_record() for caveat in entry.caveats]})
    return record(plan, prepared.item, "ok", None, targets, caveats)


#: Figures are drawn one at a time: matplotlib's caches are not meant for threads.
_FIGURE_LOCK = threading.Lock()
#: A figure's pictures are reduced to this many pixels on their longer side.
FIGURE_MAX_SIDE = 1024


def _write_figure(plan: Plan, path: str, picture: np.ndarray, maps: dict, title: str,
                  caveats: tuple[Caveat, ...] = ()) -> None:
    """Draw one explanation's matplotlib figure and write it atomically."""
    from guidedbp import figures

    output, style = plan.options.output, plan.options.render
    longer = max(picture.shape[:2])
    if longer > FIGURE_MAX_SIDE:  # a figure on a page needs no more; a PDF stays small
        size = tuple(max(1, round(side * FIGURE_MAX_SIDE / longer)) for side in picture.shape[:2])
        picture = resize_picture(picture, size)
        maps = {name: resize_map(saliency, size) for name, saliency in maps.items()}
    with _FIGURE_LOCK:
        figure = figures.draw(picture, maps, title, cmap=style.cmap, clip=style.clip,
                              caveats=[caveat.line for caveat in caveats])
        data = figures.figure_bytes(figure, output.figure, dpi=output.dpi)
    atomic_write_bytes(path, data)


def _check_target(plan: Plan, relative: str, pictures) -> None:
    """Refuse to write ``OUT/relative`` through a link, or over a file guidedbp did not write.

    Every folder between OUT and the file must be a real folder (a link there would
    lead outside OUT); an existing file must be one of guidedbp's own: a PNG with its
    mark, or a raw ``.npy`` that an earlier manifest lists or that sits beside one of
    the marked ``pictures`` of the same class (they are written before it).

    Raises:
        OSError: With the reason, which fails this input only.
    """
    folder = plan.output
    for part in relative.split("/")[:-1]:
        folder = os.path.join(folder, part)
        if os.path.islink(folder):
            raise OSError(f"{folder!r} is a symbolic link: refusing to write through it")
    target = os.path.join(plan.output, relative)
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise OSError(f"{target!r} is a symbolic link: refusing to replace it")
    if not stat.S_ISREG(mode):
        raise OSError(f"{target!r} exists and is not a file: refusing to replace it")
    if relative.endswith(".png"):
        # The mark decides, not a manifest: a PNG of the user's may have taken its place.
        # A file the manifest lists that is no whole PNG at all is our own, damaged.
        if is_own_png(target) or (relative in plan.owned and not is_whole_png(target)):
            return
    elif not relative.endswith(".npy"):  # a PDF or SVG figure: the same rule
        if is_own_figure(target) or (relative in plan.owned and not is_whole_figure(target)):
            return
    elif relative in plan.owned or (_is_npy(target) and any(
            is_own_png(os.path.join(plan.output, picture)) for picture in pictures)):
        return
    raise OSError(f"{target!r} exists and was not written by guidedbp: refusing to "
                  "overwrite it")


def comparison_panel(maps: dict, picture: np.ndarray, caption: str, style: dict,
                     tile: int | None, caveats: tuple[Caveat, ...] = ()) -> np.ndarray:
    """The original, then one titled column per method, each with its colorbar, and a
    line per caveat under the caption.

    Signed maps (gradients) show as the signed ``color`` render; a non-negative
    coarse map (Grad-CAM) as its ``overlay`` on the picture.
    """
    columns = [Column("original", picture)]
    for name, saliency in maps.items():
        drawn = "color" if method(name).signed else "overlay"
        columns.append(render_column(drawn, saliency, picture, title=name, **style))
    return render_panel(columns, caption=caption, tile=tile,
                        caveats=[caveat.line for caveat in caveats])


def record(plan: Plan, item: InputItem, status: str, error, targets: list[dict],
           caveats: list[Caveat] | tuple[Caveat, ...] = ()) -> dict:
    """One input's manifest record; the first target's fields are repeated at the top,
    and ``caveats`` (every class's, without repeats) are listed as
    ``{"code", "text"[, "method"]}`` objects."""
    first = targets[0] if targets else {}
    return {
        "input": item.path,
        "status": status,
        "error": error,
        "class": first.get("class"),
        "label": first.get("label"),
        "score": first.get("score"),
        "method": ",".join(plan.options.methods),
        "guided": plan.guided,
        "outputs": first.get("outputs", {}),
        "raw": first.get("raw"),
        "targets": targets,
        "caveats": [caveat.as_record() for caveat in unique(caveats)],
    }
