"""``guidedbp evaluate`` on a segmentation model (output ``(batch, H', W', classes)``):
each shape's region explained, scored against its mask and the mask grown by the
model's receptive field, beside the model's own segmentation scores."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guidedbp.cli.exits import UsageFailure


@dataclass(frozen=True)
class RegionScored:
    """One region map's scores: as the classifier's, plus the share of its energy within
    :attr:`Geometry.reach` pixels of the mask (None where the reach is unknown); a
    ``constant`` map's are not counted."""

    target: int
    hit: bool
    energy: float
    other_hit: bool | None
    energy_reach: float | None
    constant: bool = False


@dataclass(frozen=True)
class Geometry:
    """What the model's layers say about where a region's map can be: its receptive
    field and reach in input pixels (:mod:`guidedbp.demo.receptive`), None when its
    layers are not all convolutions, poolings, upsamplings and per-pixel layers."""

    receptive_field: int | None
    reach: int | None

    @classmethod
    def of(cls, model) -> Geometry:
        from guidedbp.demo.receptive import reach, receptive_field

        try:
            return cls(receptive_field(model), reach(model))
        except (ValueError, AttributeError, TypeError):  # not a plain Keras CNN
            return cls(None, None)


def is_segmentation(loaded) -> bool:
    """Whether the model's one output is a map of class scores, ``(batch, H', W', C)``."""
    shape = getattr(loaded.model, "output_shape", None)
    return isinstance(shape, tuple) and len(shape) == 4


def refuse_for_segmentation(shapes: int | None, games: tuple, costs: bool) -> None:
    """What a segmentation model cannot be evaluated on, refused before any work
    (``games``: the games and metric families asked)."""
    import click

    if shapes is None:
        raise click.UsageError("a segmentation model is evaluated on --shapes N (each "
                               "shape's region is explained against its exact mask)")
    if games:
        raise click.UsageError(f"--metric {','.join(games)} explains and scores a "
                               "classifier's classes; a segmentation model takes "
                               "pointing,energy")
    if costs:
        raise click.UsageError("--costs times class targets: not for a segmentation model")


def measure_segmentation(loaded, explainer, samples: list, tolerance: float,
                         options: dict) -> tuple[dict, dict]:
    """:func:`measure_regions` with the model's :class:`Geometry`; returns the scores per
    method and the result's extra fields (the target kind, the model's own segmentation,
    its receptive field and reach)."""
    geometry = Geometry.of(loaded.model)
    scored, matrix = measure_regions(loaded, explainer, samples, tolerance, options, geometry)
    extra = {"target": "region", "segmentation": segmentation_record(matrix, loaded.labels)}
    if geometry.reach is not None:
        extra.update(receptive_field=geometry.receptive_field, reach=geometry.reach)
    return scored, extra


def region_classes(labels, samples: list) -> np.ndarray:
    """Each sample's shape class as an index into the segmentation model's labels."""
    from guidedbp.demo.shapes import CLASS_NAMES

    indices = []
    for sample in samples:
        name = CLASS_NAMES[sample.label]
        if not labels or name not in labels:
            raise UsageFailure(f"the model's labels do not name the shape class {name!r}: "
                               "a segmentation model needs its class names (a labels file)")
        indices.append(labels.index(name))
    return np.array(indices, np.int32)


def measure_regions(loaded, explainer, samples: list, tolerance: float, options: dict,
                    geometry: Geometry) -> tuple[dict, np.ndarray]:
    """Explain each sample's region (its shape's class over its mask) with every method
    and score the maps; also count the model's own per-pixel labels against the truth.

    Returns:
        ``(scored, matrix)``: per method a list of :class:`RegionScored` in sample order,
        and the confusion matrix of the model's per-pixel argmax (rows the truth).
    """
    from guidedbp.checks.metrics_arrays import constant_maps
    from guidedbp.demo.metrics import energy_inside, energy_inside_dilated, pointing_game
    from guidedbp.demo.segmentation import confusion
    from guidedbp.models.preprocess import prepare
    from guidedbp.targets import Region

    classes = region_classes(loaded.labels, samples)
    scored: dict[str, list] = {m: [None] * len(samples) for m in explainer.methods}
    matrix = np.zeros((len(loaded.labels), len(loaded.labels)), np.int64)
    for start in range(0, len(samples), explainer.batch_size):
        chunk = range(start, min(start + explainer.batch_size, len(samples)))
        prepared = [prepare(samples[i].picture, loaded.input_shape, loaded.preprocess,
                            options.get("size"), options.get("resize", "stretch"))
                    for i in chunk]
        inputs = np.stack([model_input for _, _, model_input in prepared])
        predicted = np.asarray(loaded.model(inputs, training=False)).argmax(axis=-1)
        matrix += confusion(predicted, _truth([samples[i] for i in chunk], classes[chunk],
                                              loaded.labels, predicted.shape[1:]),
                            len(loaded.labels))
        # A region's class is one per explanation: one call per class in the batch.
        for region_class in np.unique(classes[chunk]):
            picked = [i for i in chunk if classes[i] == region_class]
            target = Region(int(region_class), mask=np.stack([samples[i].mask for i in picked]))
            explanation = explainer.explain(inputs[[i - start for i in picked]], target)
            for method, maps in explanation.by_method.items():
                for row, index in enumerate(picked):
                    sample = samples[index]
                    placement = prepared[index - start][1]
                    magnitude = np.abs(placement.to_original(maps[row], max_side=None)
                                       ).max(axis=-1)[None]
                    flat = magnitude.max() == magnitude.min() or bool(
                        constant_maps(maps[row][None])[0])  # as the classifier's
                    mask, other = sample.mask[None], sample.other_mask
                    scored[method][index] = RegionScored(
                        target=int(region_class),
                        hit=bool(pointing_game(magnitude, mask, tolerance)[0]),
                        energy=float(energy_inside(magnitude, mask)[0]),
                        other_hit=None if other is None
                        else bool(pointing_game(magnitude, other[None], tolerance)[0]),
                        energy_reach=None if geometry.reach is None
                        else float(energy_inside_dilated(magnitude, mask, geometry.reach)[0]),
                        constant=bool(flat),
                    )
    return scored, matrix


def _truth(chunk: list, classes: np.ndarray, labels, size: tuple) -> np.ndarray:
    """The samples' per-pixel labels at the output's ``size``: each object's class where
    its mask covers at least half of an output pixel's block
    (:func:`guidedbp.demo.segmentation.downsample_mask`), else class 0 (background)."""
    from guidedbp.demo.segmentation import downsample_mask
    from guidedbp.demo.shapes import CLASS_NAMES

    height = chunk[0].mask.shape[0]
    if height % size[0] or chunk[0].mask.shape[1] * size[0] != height * size[1]:
        raise UsageFailure(f"the model's {size[0]}x{size[1]} output does not divide the "
                           f"{chunk[0].mask.shape[1]}x{height} shapes")
    stride = height // size[0]
    truth = np.zeros((len(chunk), *size), np.int64)
    for row, (sample, region_class) in enumerate(zip(chunk, classes)):
        if sample.other_mask is not None and sample.other_label is not None:
            other = labels.index(CLASS_NAMES[sample.other_label])
            truth[row][downsample_mask(sample.other_mask[None], stride)[0]] = other
        truth[row][downsample_mask(sample.mask[None], stride)[0]] = region_class
    return truth


def segmentation_record(matrix: np.ndarray, labels) -> dict:
    """The model's own per-pixel accuracy, mean IoU and each class's IoU (4 decimals)."""
    from guidedbp.demo.segmentation import iou_per_class, pixel_accuracy

    ious = iou_per_class(matrix)
    return {
        "pixels": int(matrix.sum()),
        "pixel_accuracy": round(pixel_accuracy(matrix), 4),
        "mean_iou": round(float(np.nanmean(ious)), 4),
        "iou": {name: None if np.isnan(value) else round(float(value), 4)
                for name, value in zip(labels, ious)},
    }
