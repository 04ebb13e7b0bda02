"""guidedbp.io.png: PNG files any decoder reads back exactly, filtered row by row as libpng
chooses, the same bytes every time."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from guidedbp.io import png
from guidedbp.io.write import encode_png


def pictures() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    found = []
    for shape in [(1, 1), (1, 1, 3), (1, 9), (9, 1, 3), (70, 33, 3), (41, 300), (3, 5000, 3)]:
        rows, columns = np.mgrid[0 : shape[0], 0 : shape[1]]
        smooth = ((rows * 3 + columns * 5) % 256).astype(np.uint8)
        if len(shape) == 3:
            smooth = np.stack([smooth, 255 - smooth, smooth // 2], axis=2)
        found += [rng.integers(0, 256, shape, dtype=np.uint8), np.full(shape, 200, np.uint8),
                  smooth]
    return found


def decoded(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return np.asarray(image)


def chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    assert data[:8] == png.SIGNATURE
    found, offset = [], 8
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind, body = data[offset + 4 : offset + 8], data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        assert crc == zlib.crc32(kind + body)
        found.append((kind, body))
        offset += 12 + length
    return found


@pytest.mark.parametrize("strip_bytes", [png.STRIP_BYTES, 1, 100])
def test_pictures_decode_to_themselves(monkeypatch, strip_bytes):
    monkeypatch.setattr(png, "STRIP_BYTES", strip_bytes)  # one row, or a few, at a time
    for picture in pictures():
        np.testing.assert_array_equal(decoded(png.encode(picture, {})), picture)


def test_long_data_is_split_into_idat_chunks(monkeypatch):
    monkeypatch.setattr(png, "_IDAT_BYTES", 1000)
    picture = np.random.default_rng(1).integers(0, 256, (50, 130, 3), dtype=np.uint8)
    data = png.encode(picture, {"Software": "guidedbp"})
    kinds = [kind for kind, _ in chunks(data)]
    assert kinds[:2] == [b"IHDR", b"tEXt"] and kinds[-1] == b"IEND"
    assert kinds[2:-1] == [b"IDAT"] * (len(kinds) - 3) and len(kinds) - 3 > 10
    np.testing.assert_array_equal(decoded(data), picture)


def test_each_row_takes_the_filter_with_the_least_signed_sum():
    rng = np.random.default_rng(2)
    rows, columns = np.mgrid[0:40, 0:30]
    picture = np.stack([(rows * 7) % 256, (columns * 9) % 256, (rows * columns) % 256],
                       axis=2).astype(np.uint8)
    picture[::5] = rng.integers(0, 256, picture[::5].shape)  # some noisy rows
    stream = b"".join(body for kind, body in chunks(png.encode(picture, {})) if kind == b"IDAT")
    filtered = np.frombuffer(zlib.decompress(stream), np.uint8).reshape(40, 1 + 30 * 3)
    raw = picture.reshape(40, -1).astype(int)
    above = np.vstack([np.zeros((1, 90), int), raw[:-1]])
    left = np.hstack([np.zeros((40, 3), int), raw[:, :-3]])
    candidates = {1: raw - left, 2: raw - above, 3: raw - (left + above) // 2}
    for row in range(40):
        kind = int(filtered[row, 0])
        assert kind in candidates
        np.testing.assert_array_equal(filtered[row, 1:], candidates[kind][row] % 256)
        sums = {k: int(np.abs(((c[row] % 256) ^ 128) - 128).sum())
                for k, c in candidates.items()}
        assert sums[kind] == min(sums.values())
        assert kind == min(k for k, total in sums.items() if total == sums[kind])  # ties: first


def test_the_same_picture_gives_the_same_bytes():
    picture = np.random.default_rng(3).integers(0, 256, (30, 20, 3), dtype=np.uint8)
    first = png.encode(picture, {"Software": "guidedbp"})
    assert png.encode(picture.copy(), {"Software": "guidedbp"}) == first
    assert png.encode(np.asfortranarray(picture), {"Software": "guidedbp"}) == first
    header = dict(chunks(first))[b"IHDR"]
    assert struct.unpack(">IIBBBBB", header) == (20, 30, 8, 2, 0, 0, 0)


def test_renders_compress_about_as_well_as_pillows_default():
    """A render-like picture (smooth, with noise) within 10% of Pillow's own level-6 file."""
    rng = np.random.default_rng(4)
    rows, columns = np.mgrid[0:240, 0:320]
    smooth = 127 + 60 * np.sin(rows[..., None] / 17 + columns[..., None] / 29 + [0, 1, 2])
    picture = np.clip(smooth + rng.normal(0, 12, smooth.shape), 0, 255).astype(np.uint8)
    pillow = io.BytesIO()
    Image.fromarray(picture).save(pillow, format="PNG", compress_level=6)
    assert len(encode_png(picture)) <= 1.1 * len(pillow.getvalue())


@pytest.mark.parametrize("picture", [np.zeros((2, 2), np.float32), np.zeros((2, 2, 4), np.uint8),
                                     np.zeros((0, 3), np.uint8), np.zeros((2, 2, 1), np.uint8)])
def test_refuses_what_it_cannot_encode(picture):
    with pytest.raises(ValueError, match="picture must be"):
        png.encode(picture, {})
