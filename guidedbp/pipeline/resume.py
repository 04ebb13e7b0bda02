"""Resuming (``skip_existing``): which earlier records still describe this run's maps.

An input is carried over, neither decoded nor computed, only when its earlier record
is ``ok``, was made the same way (its ``made_by``: the same model content, maths,
method options and render options, :mod:`guidedbp.io.made_by`) of the same input file
(its ``input_file``: :mod:`guidedbp.io.source`), for the same methods,
guide and classes or targets, names exactly the outputs this run would write, and
every one of those files is whole. Any other earlier record is recomputed, and counted
by the reason (:data:`guidedbp.io.made_by.REASONS`) in the run's summary.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from guidedbp.figures import is_own_figure
from guidedbp.io import made_by, source, store
from guidedbp.io.inputs import InputItem
from guidedbp.io.write import is_own_png, is_whole_png
from guidedbp.pipeline.detections import same_ranked
from guidedbp.pipeline.masks import MaskError, find_mask
from guidedbp.pipeline.stages import Plan, is_npy
from guidedbp.pipeline.target_plan import file_digest, ranked_target


@dataclass
class Resumed:
    """What a resumed run takes from the earlier one.

    Attributes:
        carried: Input path -> its earlier record, carried over as this run names it.
        recomputed: Reason code (a key of :data:`guidedbp.io.made_by.REASONS`) -> how many
            inputs with an earlier ``ok`` record are recomputed for it.
    """

    carried: dict[str, dict] = field(default_factory=dict)
    recomputed: dict[str, int] = field(default_factory=dict)


def carried_over(plan: Plan, items: list[InputItem], earlier: dict[str, dict]) -> Resumed:
    """Resuming: the inputs whose earlier record and outputs still describe them, with
    those records (input path -> record), so they are neither decoded nor computed, and
    why the others with an earlier record are recomputed.

    A carried record is the earlier one as this run names it (its input path, its
    ``made_by`` model): the resumed manifest then holds the records an uninterrupted run
    writes. An earlier record that failed is tried again, not counted.
    """
    by_path = {same_file_key(path): record for path, record in earlier.items()}
    resumed = Resumed()
    reasons: Counter = Counter()
    for item in items:
        record = by_path.get(same_file_key(item.path))
        if record is None:
            continue
        reason = stale_reason(plan, item, record)
        if reason is None:
            # A record from before caveats were recorded lists none.
            resumed.carried[item.path] = {"caveats": [], **record, "input": item.path,
                                          made_by.FIELD: plan.made_by}
        elif reason != "failed":
            reasons[reason] += 1
    resumed.recomputed = dict(reasons)
    return resumed


def same_file_key(path: str) -> str:
    """An earlier record's input and this run's, however spelled (``a/../a/x.png``);
    its outputs must still be the ones this run names (:func:`stale_reason`)."""
    return path if store.is_url(path) else os.path.normpath(os.path.abspath(path))


def _scopes(guided) -> dict:
    """Rule -> scope of a record's or a plan's ``guided`` field."""
    if not isinstance(guided, dict):
        return {}
    return {rule: value.get("guide") if isinstance(value, dict) else None
            for rule, value in guided.items()}


def stale_reason(plan: Plan, item: InputItem, record: dict) -> str | None:
    """Why ``record`` (an earlier run's, for ``item``) does not describe this run's maps: a
    key of :data:`guidedbp.io.made_by.REASONS`, ``"failed"`` for a record that is not
    ``ok``, or ``None`` when it does and its outputs are all there, whole."""
    options, naming = plan.options, plan.naming
    if record.get("status") != "ok":
        return "failed"
    reason = made_by.difference(record.get(made_by.FIELD), plan.made_by)
    if reason is not None:
        return reason
    recorded = record.get(source.FIELD)
    if recorded is None:
        return "input_unfingerprinted"
    if not source.unchanged(recorded, item):
        return "input"  # replaced at the same path, or changed in place
    if record.get("method") != ",".join(options.methods) \
            or _scopes(record.get("guided")) != _scopes(plan.guided):
        return "options"  # another --guide: other maps
    targets = record.get("targets") or []
    if not all(isinstance(target, dict) for target in targets):
        return "targets"
    slugs = _same_targets(plan, item, targets, record)
    if slugs is None:
        return "targets"
    for target, slug in zip(targets, slugs):
        outputs, raw = naming.paths(item.output_stem, slug)
        if target.get("outputs") != outputs or target.get("raw") != raw:
            return "outputs"
        if not all(_is_own_output(os.path.join(plan.output, path)) for path in outputs.values()):
            return "outputs"
        if not all(is_npy(os.path.join(plan.output, path))
                   for _, path in naming.raw_items(raw)):
            return "outputs"
    return None


def _same_targets(plan: Plan, item: InputItem, targets: list[dict], record: dict
                  ) -> list | None:
    """The file-name part of each of an earlier record's targets when they are the ones
    this run explains (the same classes, or the same targets of the same model output,
    mask file contents and reference; the same ``detections`` and threshold), else
    ``None``."""
    options, wanted = plan.options, plan.targets
    classes = [target.get("class") for target in targets]
    if wanted is not None and wanted.detections:  # each image's own: as they were found
        return same_ranked(plan, targets, record)
    if wanted is None or not wanted.targets:  # classes: listed, ranked or the top one
        top_k = wanted.top_k if wanted is not None else options.classes.top_k
        if plan.classes:
            same = list(plan.classes) == classes
        elif top_k:
            same = len(classes) == min(top_k, plan.num_classes or len(classes))
        else:
            same = len(classes) == 1
        if not same or not all(isinstance(c, int) for c in classes):
            return None
        if wanted is None:  # a plain class run: its records name no target
            return classes if not any("target" in target for target in targets) else None
        expected = [wanted.identity(ranked_target(c, plan.feed.labels)) for c in classes]
        slugs = classes
    else:
        if len(targets) != len(wanted.targets):
            return None
        mask = (None, None)
        if wanted.mask_dir is not None:
            try:
                path, relative = find_mask(wanted.mask_dir, item)
                mask = (relative, file_digest(path))
            except (MaskError, OSError):
                return None
        expected = [wanted.identity(target, *mask) for target in wanted.targets]
        slugs = [target.slug for target in wanted.targets]
    for target, identity in zip(targets, expected):
        found = target.get("target")
        if not isinstance(found, dict) or {key: found.get(key) for key in identity} != identity:
            return None
    return slugs


def _is_own_output(path: str) -> bool:
    """Whether ``path`` is a whole picture or figure that guidedbp wrote."""
    if path.endswith(".png"):
        return is_whole_png(path) and is_own_png(path)
    return is_own_figure(path)


def earlier_outputs(earlier: dict[str, dict]) -> dict[str, list[str]]:
    """The files (relative to OUT) each earlier record names, by its input (as
    :func:`same_file_key` spells it): what an earlier run wrote, which this one may
    replace, and, where it recomputes an input, remove when its new record no longer
    names them (:mod:`guidedbp.pipeline.replaced`)."""
    return {same_file_key(path): [path for target in record["targets"]
                                   if isinstance(target, dict) for path in paths_of(target)]
            for path, record in earlier.items()}


def paths_of(target: dict) -> list[str]:
    """The files (relative to OUT) a record's target names: its outputs and raw maps."""
    outputs = target.get("outputs") if isinstance(target.get("outputs"), dict) else {}
    raw = target.get("raw")
    raws = [raw] if isinstance(raw, str) else list(raw.values()) if isinstance(raw, dict) else []
    return [p for p in [*outputs.values(), *raws] if isinstance(p, str)]
