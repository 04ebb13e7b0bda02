"""The explain pipeline's last stage: render and write one input's outputs, and its
manifest record.

:func:`outcome` takes what :func:`~guidedbp.pipeline.stages.explain` made of an input
(or why it failed) and writes its maps, panels and figures atomically under OUT, never
through a link nor over a file guidedbp did not write; :func:`record` is the manifest
line every runner delivers.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import replace

import numpy as np

from guidedbp._text import layer_note, method_at_layer, one_line
from guidedbp.caveats import NON_FINITE_SCORE, Caveat, unique
from guidedbp.engine.methods.registry import method
from guidedbp.figures import is_own_figure, is_whole_figure
from guidedbp.io import source, store
from guidedbp.io.inputs import InputItem
from guidedbp.io.write import atomic_write_bytes, encode_npy, encode_png, is_own_png, is_whole_png
from guidedbp.models.resizing import resize_map, resize_picture
from guidedbp.pipeline import detections
from guidedbp.pipeline.beside import Beside, beside
from guidedbp.pipeline.naming import label_of
from guidedbp.pipeline.stages import Explained, Plan, Prepared, is_npy
from guidedbp.pipeline.target_plan import PlannedTarget, describe, ranked_target
from guidedbp.render import Column, render, render_column, render_panel


def outcome(plan: Plan, prepared: Prepared, explained: list[Explained] | None) -> dict:
    """Write one input's outputs and return its manifest record.

    ``explained`` is the input's entry of :func:`~guidedbp.pipeline.stages.explain`,
    ``None`` when it has none: it failed (``prepared.error``) or was carried over from an
    earlier run. A failed write (disk full, permissions, a file of the user's in the way,
    no memory left) fails that input, not the run.
    """
    item = prepared.item
    if item.skipped is not None:  # an object no output path can name: why, in "error"
        return record(plan, item, "skipped", item.skipped, [])
    if prepared.error is not None:
        return record(plan, item, "error", prepared.error, [])
    if prepared.carried is not None:
        return prepared.carried
    reason = _not_drawable(explained or [])
    if reason is not None:  # found before any file is written: nothing half-written
        return record(plan, item, "error", reason, [])
    try:
        return _write(plan, prepared, explained)
    except (OSError, ValueError) as error:
        return record(plan, item, "error", one_line(error), [])
    except MemoryError:
        return record(plan, item, "error", "out of memory while rendering its maps", [])


def _not_drawable(explained: list[Explained]) -> str | None:
    """Why an input's maps are not written, or ``None``: a target whose score is not
    finite (the model's output overflows: its maps mean nothing, and a record of them
    would hold no score), or a map with NaN or infinite values (no render draws it)."""
    for entry in explained:
        for caveat in entry.caveats:
            if caveat.code == NON_FINITE_SCORE:
                return f"{caveat.text}; no maps written"
    for entry in explained:
        for name, values in entry.maps.items():
            if not np.isfinite(values).all():
                return f"its {name} map has NaN or infinite values; no maps written"
    return None


def _write(plan: Plan, prepared: Prepared, explained: list[Explained]) -> dict:
    options, labels, naming = plan.options, plan.feed.labels, plan.naming
    style = options.render.style
    targets = []
    caveats: list[Caveat] = []
    for entry in explained:
        caveats += entry.caveats
        planned = entry.planned
        if planned is None and plan.targets is not None:
            planned = ranked_target(entry.target, labels)
        outputs, raw = naming.paths(prepared.item.output_stem,
                                    entry.target if planned is None else planned.slug)
        if not plan.conditional:  # else each PUT asks the store itself (_save)
            for relative in [*outputs.values(), *(path for _, path in naming.raw_items(raw))]:
                _check_target(plan, relative, outputs.values())
        if options.render.output_size == "original":
            shown = {m: prepared.placement.to_original(v) for m, v in entry.maps.items()}
            picture = prepared.original
        else:
            shown, picture = entry.maps, prepared.fitted
        extras = beside(plan, prepared, entry, planned, next(iter(shown.values())).shape[:2])
        label = label_of(entry.target, labels)
        if planned is None:
            named_class = f"{label} (class {entry.target})" if label else f"class {entry.target}"
            title = f"{named_class} p={entry.probability:.3f}"
        elif entry.detection is not None:
            title = detections.describe_detection(planned, entry.target, entry.probability,
                                                  float(entry.detection[8]), labels)
        else:
            title = describe(planned, entry.value, entry.probability, extras.pixels)
        # The class activation maps' layer, said where their maps are shown.
        with_layers = title + layer_note(options.methods, plan.layers)
        if extras.boxes:  # what the boxes drawn on its pictures are
            with_layers += " " + detections.BOX_LEGEND
        caption = with_layers
        if len(options.methods) == 1:  # a comparison panel titles its columns instead
            caption = f"{method_at_layer(options.methods[0], plan.layers)}: {title}"
        for key, relative in outputs.items():
            if key == "figure":
                _write_figure(plan, relative, outputs.values(), picture, shown, with_layers,
                              entry.caveats)
                continue
            if key == "panel" and len(shown) > 1:
                array = comparison_panel(shown, picture, caption, style, options.render.tile,
                                         entry.caveats, extras)
            else:
                name_of_method, _, name = key.rpartition(".")
                one = caption  # one method's run: its caption
                if name_of_method:  # one of several methods' renders: its own
                    one = (f"{method_at_layer(name_of_method, plan.layers)}: {title}"
                           if name_of_method in plan.layers else title)
                name_of_method = name_of_method or options.methods[0]
                lines = [c.line for c in entry.caveats if c.concerns(name_of_method)]
                array = render(name, shown[name_of_method], picture, caption=one,
                               caveats=lines, outline=extras.outline,
                               reference=extras.reference, boxes=extras.boxes,
                               **options.render.panel_style)
            _save(plan, relative, encode_png(array), outputs.values())
        for name_of_method, relative in naming.raw_items(raw):
            _save(plan, relative, encode_npy(np.asarray(entry.maps[name_of_method],
                                                        dtype=np.float32)),  # no copy
                  outputs.values())
        if planned is None:
            targets.append({"class": entry.target, "label": label,
                            "score": round(entry.probability, 6), "outputs": outputs,
                            "raw": raw,
                            "caveats": [caveat.as_record() for caveat in entry.caveats]})
        else:
            targets.append(_target_record(plan, prepared, entry, planned, outputs, raw, title,
                                          extras.pixels))
    written = record(plan, prepared.item, "ok", None, targets, caveats)
    written[source.FIELD] = prepared.source  # what the input was: a resumed run compares it
    if prepared.found is not None:  # detections=K: how many the model found
        written["detections"] = {"top": plan.targets.detections, "found": prepared.found,
                                 "threshold": plan.targets.threshold}
    return written


def _target_record(plan: Plan, prepared: Prepared, entry: Explained, planned: PlannedTarget,
                   outputs: dict, raw, description: str, image_pixels: int | None = None
                   ) -> dict:
    """One target's manifest entry in a run with targets: a class's fields as ever (a
    target's index as its class, its value as its score where it has no probability),
    then ``target`` (what was explained, :meth:`TargetPlan.identity`; a region's
    ``pixels`` at the output's resolution and ``image_pixels``, its area in the maps'
    pictures, which the description counts), ``value`` (the score differentiated) and
    ``description``."""
    identity = plan.targets.identity(planned, prepared.mask_file, prepared.mask_sha256)
    if planned.kind == "region":
        identity["pixels"] = entry.pixels
        identity["image_pixels"] = image_pixels
    if entry.detection is not None:
        identity.update(detections.detection_record(planned, entry.detection[:4],
                                                    entry.detection[4:], prepared.placement))
    is_class = planned.kind in ("class", "box", "detection")  # a class score: its probability
    return {"class": None if planned.kind in ("similar", "text") else entry.target,
            "label": planned.name,
            "score": round(entry.probability if is_class else entry.value, 6),
            "outputs": outputs, "raw": raw,
            "caveats": [caveat.as_record() for caveat in entry.caveats],
            "target": identity, "value": round(entry.value, 6), "description": description}


#: Figures are drawn one at a time: matplotlib's caches are not meant for threads.
_FIGURE_LOCK = threading.Lock()
#: A figure's pictures are reduced to this many pixels on their longer side.
FIGURE_MAX_SIDE = 1024


def _save(plan: Plan, relative: str, data: bytes, pictures) -> None:
    """Write ``OUT/relative`` whole (atomically on a disk, one PUT on a store).

    On a store that honours conditional writes (``plan.conditional``) the PUT asks
    whether an object is there (``If-None-Match: *``): only when one is, is it checked
    (:func:`_check_target`: it must be guidedbp's own) and replaced. One request per
    output where a HEAD, and on S3 a listing, would come before each PUT.
    """
    path = os.path.join(plan.output, relative)
    if plan.conditional:
        try:
            store.put(path, data, create=True)
            return
        except FileExistsError:
            _check_target(plan, relative, pictures)
    atomic_write_bytes(path, data)


def _write_figure(plan: Plan, relative: str, pictures, picture: np.ndarray, maps: dict,
                  title: str, caveats: tuple[Caveat, ...] = ()) -> None:
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
    _save(plan, relative, data, pictures)


def _check_target(plan: Plan, relative: str, pictures) -> None:
    """Refuse to write ``OUT/relative`` through a link, or over a file guidedbp did not write.

    Every folder between OUT and the file must be a real folder (a link there would
    lead outside OUT); an existing file must be one of guidedbp's own: a PNG with its
    mark, or a raw ``.npy`` that an earlier manifest lists or that sits beside one of
    the marked ``pictures`` of the same class (they are written before it).

    Raises:
        OSError: With the reason, which fails this input only.
    """
    target = os.path.join(plan.output, relative)
    if store.is_url(target):  # a store has no links and no folders: only objects
        if not store.exists(target):
            return
    else:
        folder = plan.output
        for part in relative.split("/")[:-1]:
            folder = os.path.join(folder, part)
            if os.path.islink(folder):
                raise OSError(f"{folder!r} is a symbolic link: refusing to write through it")
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
    elif relative in plan.owned or (is_npy(target) and any(
            is_own_png(os.path.join(plan.output, picture)) for picture in pictures)):
        return
    raise OSError(f"{target!r} exists and was not written by guidedbp: refusing to "
                  "overwrite it")


def comparison_panel(maps: dict, picture: np.ndarray, caption: str, style: dict,
                     tile: int | None, caveats: tuple[Caveat, ...] = (),
                     extras: Beside = Beside()) -> np.ndarray:
    """The original (a region outlined on it), a similarity's reference, then one titled
    column per method, each with its colorbar, and a line per caveat under the caption;
    rows of at most :data:`~guidedbp.render.PANEL_COLUMNS` pictures.

    Each map is drawn as :func:`panel_render` says: signed per-pixel maps (gradients) as
    the signed ``color`` render, signed coarse maps (occlusion, KernelSHAP, LIME) as a
    signed overlay on the picture, non-negative maps (the CAMs, RISE, Sobol) as their
    ``overlay``.
    """
    columns = [Column("original", picture, outline=extras.outline, boxes=extras.boxes)]
    if extras.reference is not None:
        columns.append(Column("reference", extras.reference))
    for name, saliency in maps.items():
        column = render_column(panel_render(name), saliency, picture, title=name, **style)
        columns.append(replace(column, boxes=extras.boxes))
    return render_panel(columns, caption=caption, tile=tile,
                        caveats=[caveat.line for caveat in caveats])


def panel_render(name: str) -> str:
    """How a comparison panel draws method ``name``'s map: its sign kept wherever it has
    one, over the picture wherever the map is coarse.

    A gradient is a map of pixels: the ``color`` render shows its sign channel by
    channel, and laid over the photo it would hide what it traces. A class activation
    map (and RISE, Sobol) is non-negative and coarse: its ``overlay`` on the picture.
    Occlusion, KernelSHAP and LIME are coarse too but signed (a patch that lowers the
    score is not one that raises it): a ``signed-overlay``, red and blue on the picture.

    >>> panel_render("guided"), panel_render("gradcam"), panel_render("kernelshap")
    ('color', 'overlay', 'signed-overlay')
    """
    record = method(name)
    if not record.signed:
        return "overlay"
    return "signed-overlay" if record.perturbation else "color"


def record(plan: Plan, item: InputItem, status: str, error, targets: list[dict],
           caveats: list[Caveat] | tuple[Caveat, ...] = ()) -> dict:
    """One input's manifest record; the first target's fields are repeated at the top,
    ``caveats`` (every class's, without repeats) are listed as
    ``{"code", "text"[, "method"]}`` objects, ``layers`` names each class activation
    map's layer (``{"gradcam": "conv_1"}``, empty without one), ``input_file`` is the
    input's fingerprint (:mod:`guidedbp.io.source`; ``None`` but in an ``ok`` record) and
    ``made_by`` says what made its maps (:mod:`guidedbp.io.made_by`)."""
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
        "layers": plan.layers,
        "outputs": first.get("outputs", {}),
        "raw": first.get("raw"),
        "targets": targets,
        "caveats": [caveat.as_record() for caveat in unique(caveats)],
        source.FIELD: None,  # an ok record's: what its input was (io.source)
        "made_by": plan.made_by,
    }
