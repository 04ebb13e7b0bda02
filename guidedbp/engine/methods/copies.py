"""The black-box methods' masked copies, scored a batch at a time, their designs a block at
a time.

A method hides regions of an image with masks in ``[0, 1]`` (1: kept): a pixel kept to
the fraction ``m`` becomes ``m * x + (1 - m) * fill``. Its copies are built and scored
``chunk`` at a time (the explainer's ``batch_size``: one forward pass each). KernelSHAP,
LIME and Sobol draw one mask value per region, a row of their *design*; the design of an
image is built, scored and folded into the method's estimate :data:`DESIGN_BYTES` at a
time (:func:`scored_blocks`), so that memory holds a block of it, never the whole design
(100,000 rows of 4,096 regions at the options' upper bounds: 3.2 GB of float64). A block
is a whole number of chunks: the forward passes are those of the whole design scored
``chunk`` at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from guidedbp.engine.methods.perturbation import ScoresFunction
from guidedbp.engine.methods.superpixels import segments, slic_segments

#: Bytes of float64 design rows a block holds (one chunk at least).
DESIGN_BYTES = 16 * 2**20

#: Rows ``start`` to ``stop`` of a design: float ``(stop - start, regions)`` in ``[0, 1]``.
Design = Callable[[int, int], np.ndarray]
#: ``(design, rows)`` -> ``(start, design rows, their float64 (n, K) scores)`` a block at a
#: time, in order: the copies an image's design asks for, scored.
Scorer = Callable[[Design, int], Iterator[tuple[int, np.ndarray, np.ndarray]]]


def scored(image: np.ndarray, row: int, masks_of: Callable[[int, int], np.ndarray],
           count: int, fill: np.ndarray, scores: ScoresFunction, chunk: int
           ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(masks, scores)`` of ``count`` copies of ``image``, ``chunk`` per forward pass:
    ``masks_of(start, stop)`` gives float32 ``(n, H, W)`` masks in ``[0, 1]`` (1: kept),
    the copies are ``m * x + (1 - m) * fill``, their scores float64 ``(n, K)``."""
    for start in range(0, count, chunk):
        masks = masks_of(start, min(start + chunk, count))
        kept = masks[..., None]  # kept pixels stay exactly x, hidden ones exactly fill
        copies = kept * image  # in place below: two batches of copies in memory, not four
        copies += (1 - kept) * fill
        copies = copies.astype(np.float32, copy=False)
        found = scores(copies, np.full(len(masks), row))
        yield masks, np.asarray(found, np.float64)


def block_rows(regions: int, chunk: int) -> int:
    """Design rows per block: a whole number of chunks, about :data:`DESIGN_BYTES` of
    float64 rows of ``regions`` values.

    >>> block_rows(64, 16), block_rows(4096, 16), block_rows(4096, 1024)
    (32768, 512, 1024)
    """
    return chunk * max(1, DESIGN_BYTES // (8 * regions * chunk))


def cell_attributions(images: np.ndarray, columns: int, grid: int, scores: ScoresFunction,
                      chunk: int, fill: np.ndarray,
                      attribute: Callable[[int, int, Scorer], np.ndarray],
                      kind: str = "grid") -> np.ndarray:
    """float32 ``(N, K, H, W, 1)``: each pixel its region's value, ``attribute(row,
    regions, score)`` giving image ``row``'s ``(regions, K)`` values from the scored
    blocks of the designs it passes to ``score`` (:data:`Scorer`). The regions: the
    grid's cells, or with ``kind`` ``"slic"`` each image's SLIC superpixels (about
    ``grid ** 2``)."""
    count, height, width = images.shape[:3]
    grid_labels = segments(height, width, grid)
    result = np.zeros((count, columns, height, width), np.float32)
    for row, image in enumerate(images):
        labels = slic_segments(image, grid * grid) if kind == "slic" else grid_labels
        regions = int(labels.max()) + 1

        def score(design: Design, rows: int, image=image, row=row, labels=labels,
                  regions=regions) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
            size = block_rows(regions, chunk)
            for start in range(0, rows, size):
                values = design(start, min(start + size, rows))
                masks_of = _region_masks(values, labels)
                found = [part for _, part in scored(image, row, masks_of, len(values), fill,
                                                    scores, chunk)]
                yield start, values, np.concatenate(found)

        values = attribute(row, regions, score)  # (regions, K)
        result[row] = values.T[:, labels]
    return result[..., None]


def _region_masks(values: np.ndarray, labels: np.ndarray) -> Callable[[int, int], np.ndarray]:
    """``masks_of`` for a block's per-region values ``(n, regions)``, its rows numbered
    from 0: each pixel takes its region's value."""
    values = values.astype(np.float32)

    def masks_of(start: int, stop: int) -> np.ndarray:
        return values[start:stop][:, labels]
    return masks_of
