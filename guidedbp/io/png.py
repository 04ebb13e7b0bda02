"""PNG encoding with numpy and zlib: the same bytes for the same picture, every run.

A picture becomes the signature, ``IHDR``, one ``tEXt`` chunk per text entry, ``IDAT``
chunks and ``IEND``. Each row is filtered (PNG filter types 1 to 3: Sub, Up, Average,
computed on whole strips of rows at once) with the filter whose bytes, read as signed,
sum to the least magnitude: libpng's rule, over three of its five filters (None seldom
wins; Paeth costs numpy as much as the other three together, for files a few percent
smaller). The filtered rows are deflated with zlib's run-length strategy. On saliency
renders, which are mostly noise to a compressor, files come within a few percent of
Pillow's default encoding (level 6) in a quarter of the time; deflating is most of it.

Memory: rows are filtered and deflated :data:`STRIP_BYTES` at a time, so encoding a
picture holds the picture, its compressed bytes and a few strips.

>>> import numpy as np
>>> data = encode(np.zeros((2, 3), np.uint8), {"Software": "guidedbp"})
>>> data[:8] == SIGNATURE, data[12:16], data[37:41], data[-8:-4]
(True, b'IHDR', b'tEXt', b'IEND')
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

import numpy as np

__all__ = ["SIGNATURE", "STRIP_BYTES", "encode"]

#: The eight bytes every PNG file starts with.
SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: Bytes of picture rows filtered at a time.
STRIP_BYTES = 1 << 16
#: The most compressed bytes one ``IDAT`` chunk holds.
_IDAT_BYTES = 1 << 20
#: The filter types tried on each row (1 Sub, 2 Up, 3 Average).
_FILTERS = (1, 2, 3)


def encode(picture: np.ndarray, text: dict[str, str], level: int = 6) -> bytes:
    """Encode a picture as 8-bit grayscale or RGB PNG bytes.

    Args:
        picture: ``uint8``, ``(H, W)`` (grayscale) or ``(H, W, 3)`` (RGB), not empty.
        text: ``tEXt`` chunks, keyword -> text (Latin-1), written after ``IHDR`` in
            this order.
        level: zlib's compression level (0 stores; any other level deflates the same
            way under the run-length strategy and is only recorded in the stream's
            header).

    Returns:
        The file's bytes.

    Raises:
        ValueError: If ``picture`` is not a non-empty uint8 array of those shapes.
    """
    picture = np.ascontiguousarray(picture)
    if picture.dtype != np.uint8 or not (
            picture.ndim == 2 or (picture.ndim == 3 and picture.shape[2] == 3)) \
            or 0 in picture.shape:
        raise ValueError("picture must be a non-empty uint8 array of shape (H, W) or "
                         f"(H, W, 3), got {picture.dtype} {picture.shape}")
    height, width = picture.shape[:2]
    colour_type = 0 if picture.ndim == 2 else 2
    compressor = zlib.compressobj(level, zlib.DEFLATED, 15, 9, zlib.Z_RLE)
    pieces = [compressor.compress(rows) for rows in _filtered_rows(picture)]
    pieces.append(compressor.flush())
    data = memoryview(b"".join(pieces))
    chunks = [_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0))]
    chunks += [_chunk(b"tEXt", key.encode("latin-1") + b"\x00" + value.encode("latin-1"))
               for key, value in text.items()]
    chunks += [_chunk(b"IDAT", data[start : start + _IDAT_BYTES])
               for start in range(0, len(data), _IDAT_BYTES)]
    chunks.append(_chunk(b"IEND", b""))
    return SIGNATURE + b"".join(chunks)


def _chunk(kind: bytes, data: bytes | memoryview) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(data, zlib.crc32(kind))))


def _filtered_rows(picture: np.ndarray) -> Iterator[np.ndarray]:
    """The picture's rows, each led by its filter type and filtered by it, a strip of
    rows at a time: uint8 ``(rows, 1 + W * C)``."""
    height = picture.shape[0]
    rows = picture.reshape(height, -1)
    row_bytes = rows.shape[1]
    pixel_bytes = 1 if picture.ndim == 2 else picture.shape[2]
    step = max(1, STRIP_BYTES // row_bytes)
    # The strip with the row above it and a pixel of zeros on its left: what the filters
    # read beyond the picture's edges is zero.
    padded = np.zeros((min(step, height) + 1, pixel_bytes + row_bytes), np.uint8)
    candidates = np.empty((len(_FILTERS), min(step, height), row_bytes), np.uint8)
    scores = np.empty((len(_FILTERS), min(step, height)), np.uint32)
    for top in range(0, height, step):
        count = min(step, height - top)
        padded[0, pixel_bytes:] = rows[top - 1] if top else 0
        padded[1 : count + 1, pixel_bytes:] = rows[top : top + count]
        raw = padded[1 : count + 1, pixel_bytes:]
        left = padded[1 : count + 1, :-pixel_bytes]
        above = padded[:count, pixel_bytes:]
        sub, up, average = candidates[:, :count]
        np.subtract(raw, left, out=sub)
        np.subtract(raw, above, out=up)
        # floor((left + above) / 2) in uint8, without overflow.
        np.right_shift(left, 1, out=average)
        average += above >> 1
        average += left & above & 1
        np.subtract(raw, average, out=average)
        for index in range(len(_FILTERS)):  # libpng's heuristic: the least sum of |signed|
            magnitude = np.abs(candidates[index, :count].view(np.int8)).view(np.uint8)
            magnitude.sum(axis=1, dtype=np.uint32, out=scores[index, :count])
        choice = np.argmin(scores[:, :count], axis=0)
        filtered = np.empty((count, 1 + row_bytes), np.uint8)
        filtered[:, 0] = np.asarray(_FILTERS, np.uint8)[choice]
        filtered[:, 1:] = candidates[choice, np.arange(count)]
        yield filtered
