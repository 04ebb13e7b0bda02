"""What a target's panels show beside its maps: a region outlined on the picture, a
similarity's reference picture, the region's size in the picture's pixels, and a
detection's boxes (the target's, and the proposal it matched) on the picture and maps.

A region target's region is the user's mask (``--mask-dir``, at the model's input) or
else the model's own region, found at the output's resolution (``(H', W')``, often
coarser than the input) and enlarged to the input by nearest neighbour; either is then
placed on the picture the maps are drawn on (``--output-size original``: onto the
original's pixels, as the maps are).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

from guidedbp.models.resizing import resize_picture
from guidedbp.pipeline.masks import reference_picture
from guidedbp.render import MATCHED_BOX, Box


@dataclass(frozen=True)
class Beside:
    """What one target's panels add to its maps.

    Attributes:
        outline: A region target's region on the shown picture, bool of the maps' size;
            else ``None``.
        reference: A similarity's reference picture, ``uint8``, as tall as the maps;
            else ``None``.
        boxes: A detection target's boxes on the shown picture (and over each map): its
            own, then the proposal it matched (dashed); else empty.
    """

    outline: np.ndarray | None = None
    reference: np.ndarray | None = None
    boxes: tuple[Box, ...] = ()

    @property
    def pixels(self) -> int | None:
        """The region's area in the shown picture's pixels (``None`` without a region)."""
        return None if self.outline is None else int(self.outline.sum())


def beside(plan, prepared, entry, planned, size: tuple[int, int]) -> Beside:
    """What the panels of ``entry`` (an :class:`~guidedbp.pipeline.stages.Explained` of
    ``prepared``, explaining ``planned``, a
    :class:`~guidedbp.pipeline.target_plan.PlannedTarget` or ``None``) show beside its maps,
    whose size is ``size`` (H, W)."""
    if planned is not None and planned.kind == "region" and entry.region is not None:
        return Beside(outline=region_on_picture(
            entry.region, prepared.mask, prepared.placement,
            plan.options.render.output_size == "original", size))
    if planned is not None and planned.kind == "similar":
        feed, inputs = plan.feed, plan.options.inputs
        fitted_size = inputs.size
        if fitted_size is None and None in tuple(feed.input_shape[:2]):  # free sides
            fitted_size = tuple(prepared.fitted.shape[:2])
        picture = reference_picture(planned.reference_path, planned.reference_sha256,
                                    tuple(feed.input_shape), feed.preprocess, fitted_size,
                                    inputs.resize, feed.channels)
        height, width = picture.shape[:2]
        shown = (size[0], max(1, round(width * size[0] / height)))
        if shown != (height, width):
            picture = resize_picture(picture, shown)
        return Beside(reference=picture)
    if entry.detection is not None:
        return Beside(boxes=boxes_on_picture(entry.detection, prepared.placement,
                                             plan.options.render.output_size == "original",
                                             size))
    return Beside()


def boxes_on_picture(detection: np.ndarray, placement, on_original: bool,
                     size: tuple[int, int]) -> tuple[Box, Box]:
    """A detection's target box and matched proposal (``detection``: both boxes' corners
    on the model's input, as :class:`~guidedbp.pipeline.stages.Explained` holds them) on
    a picture of ``size`` (H, W): the model's input, or where ``on_original`` the original
    (through ``placement``), scaled as a larger original's pictures are.

    >>> from guidedbp.models.resizing import fit
    >>> _, placement = fit(np.zeros((20, 40, 3), np.uint8), (10, 10), "stretch")
    >>> found = np.array([0, 0, 5, 5, 5, 5, 10, 10, 0.1, 0.9])
    >>> [box.corners for box in boxes_on_picture(found, placement, True, (20, 40))]
    [(0.0, 0.0, 20.0, 10.0), (20.0, 10.0, 40.0, 20.0)]
    """
    target, matched = detection[:4], detection[4:8]
    if on_original:
        target, matched = placement.box_to_original(target), placement.box_to_original(matched)
        height, width = placement.original_size
    else:
        height, width = placement.size
    scale = np.array([size[1] / width, size[0] / height] * 2)
    return (Box(tuple(float(v) for v in np.asarray(target) * scale)),
            Box(tuple(float(v) for v in np.asarray(matched) * scale), MATCHED_BOX, dashed=True))


def region_on_picture(cells: np.ndarray, mask: np.ndarray | None, placement,
                      on_original: bool, size: tuple[int, int]) -> np.ndarray:
    """The region drawn on a picture of ``size`` (H, W): ``mask`` (bool, at the model's
    input) when the user gave one, else ``cells`` (bool ``(H', W')``, the output's) enlarged
    to the input by nearest neighbour; on the original, where ``on_original``, as
    ``placement`` puts the maps there (a pixel at least half inside is inside).

    >>> from guidedbp.models.resizing import fit
    >>> _, placement = fit(np.zeros((8, 8, 3), np.uint8), (8, 8), "stretch")
    >>> cells = np.array([[True, False], [False, False]])
    >>> int(region_on_picture(cells, None, placement, False, (8, 8)).sum())  # 4x4 px a cell
    16
    """
    region = mask
    if region is None:
        plane = Image.fromarray(cells.astype(np.uint8))
        height, width = placement.size
        region = np.asarray(plane.resize((width, height), Image.Resampling.NEAREST)) != 0
    if on_original:
        region = placement.to_original(region.astype(np.float32)) >= 0.5
    if region.shape != tuple(size):  # a picture the render reduces: the region with it
        plane = Image.fromarray(region.astype(np.uint8) * np.uint8(255))
        region = np.asarray(plane.resize((size[1], size[0]), Image.Resampling.BOX)) >= 128
    return region
