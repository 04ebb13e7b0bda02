"""Generated folders of good and bad image files for the input and explain tests.

Pillow and numpy only (no TensorFlow), so ``tests/test_inputs.py`` stays fast.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from .helpers import tinted_noise

#: Reasons the decoder gives, as the manifest's ``error`` field shows them.
TRUNCATED = "truncated image file"
EMPTY = "empty file"
NOT_IMAGE = "not a readable image (cannot identify image file)"
CORRUPT = "corrupt image data ("  # then Pillow's own words, which vary by version


def reason_matches(actual: str | None, expected: str) -> bool:
    """Whether a manifest ``error`` is the expected reason (a prefix ending in "(" for CORRUPT)."""
    if actual is None:
        return False
    if expected.endswith("("):
        return actual.startswith(expected) and actual.endswith(")") and "\n" not in actual
    return actual == expected


@dataclass
class Tree:
    """What :func:`make_tree` wrote.

    Attributes:
        root: The tree's folder.
        good: Relative path -> (height, width) of each decodable image.
        bad: Relative path -> the decoder's reason for each image-named file that fails
            (see :func:`reason_matches`).
        passed_over: Relative paths of the files that are not images by extension.
    """

    root: Path
    good: dict[str, tuple[int, int]] = field(default_factory=dict)
    bad: dict[str, str] = field(default_factory=dict)
    passed_over: list[str] = field(default_factory=list)

    def path(self, relative: str) -> str:
        return str(self.root / relative)


def rgb(height: int, width: int, seed: int) -> Image.Image:
    return Image.fromarray(tinted_noise(height, width, seed=seed))


def _save(tree: Tree, relative: str, image: Image.Image, **params) -> None:
    path = tree.root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = params.pop("format", None)
    image.save(path, format=fmt, **params)
    tree.good[relative] = (image.height, image.width)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def make_tree(root: Path) -> Tree:
    """Write a tree of images with repeated names, odd colour modes and broken files.

    Layout (sizes are height x width)::

        top.png                      RGB 11x9
        notes.txt                    passed over
        a/cat.jpg                    RGB 20x30      \\ the same name in two folders
        b/cat.jpg                    RGB 24x18      /
        b/readme.md                  passed over
        b/deep/er/gray.png           L 17x13
        mixed/cat.jpg, mixed/cat.png RGB 16x16, 12x20 (one stem, two files)
        mixed/rgba.png               RGBA 10x14
        mixed/palette.gif            P 9x11
        mixed/cmyk.jpg               CMYK 15x15
        mixed/sixteen.png            16-bit grey 8x21
        mixed/UPPER.JPG              RGB 14x10 (upper-case extension)
        formats/photo.jpeg, pic.bmp, pic.webp, scan.tif, big.TIFF
        bad/truncated.png, bad/truncated.jpg, bad/corrupt.png, bad/empty.jpg, bad/text.jpg
    """
    tree = Tree(Path(root))
    tree.root.mkdir(parents=True, exist_ok=True)
    _save(tree, "top.png", rgb(11, 9, 1))
    _save(tree, "a/cat.jpg", rgb(20, 30, 2), quality=95)
    _save(tree, "b/cat.jpg", rgb(24, 18, 3), quality=95)
    _save(tree, "b/deep/er/gray.png", Image.fromarray(tinted_noise(17, 13, 1, seed=4)))
    _save(tree, "mixed/cat.jpg", rgb(16, 16, 5), quality=95)
    _save(tree, "mixed/cat.png", rgb(12, 20, 6))
    _save(tree, "mixed/rgba.png", Image.fromarray(tinted_noise(10, 14, 4, seed=7)))
    _save(tree, "mixed/palette.gif", rgb(9, 11, 8).convert("P"))
    _save(tree, "mixed/cmyk.jpg", rgb(15, 15, 9).convert("CMYK"), quality=95)
    deep = tinted_noise(8, 21, 1, seed=10).astype(np.uint16) * 257
    _save(tree, "mixed/sixteen.png", Image.fromarray(deep))
    _save(tree, "mixed/UPPER.JPG", rgb(14, 10, 11), format="JPEG", quality=95)
    _save(tree, "formats/photo.jpeg", rgb(13, 17, 12), quality=95)
    _save(tree, "formats/pic.bmp", rgb(10, 10, 13))
    _save(tree, "formats/pic.webp", rgb(12, 9, 14), lossless=True)
    _save(tree, "formats/scan.tif", rgb(9, 16, 15))
    _save(tree, "formats/big.TIFF", rgb(18, 12, 16), format="TIFF")

    bad = tree.root / "bad"
    bad.mkdir()
    for name, fmt in (("truncated.png", "PNG"), ("truncated.jpg", "JPEG")):
        Image.fromarray(tinted_noise(64, 64, seed=17)).save(bad / name, fmt)
        _truncate(bad / name)
        tree.bad[f"bad/{name}"] = TRUNCATED
    Image.fromarray(tinted_noise(64, 64, seed=18)).save(bad / "corrupt.png")
    data = bytearray((bad / "corrupt.png").read_bytes())
    data[len(data) // 2 : len(data) // 2 + 40] = bytes(40)  # inside the compressed pixels
    (bad / "corrupt.png").write_bytes(bytes(data))
    tree.bad["bad/corrupt.png"] = CORRUPT
    (bad / "empty.jpg").write_bytes(b"")
    tree.bad["bad/empty.jpg"] = EMPTY
    (bad / "text.jpg").write_text("this is not a picture\n")
    tree.bad["bad/text.jpg"] = NOT_IMAGE

    (tree.root / "notes.txt").write_text("not an image\n")
    (tree.root / "b" / "readme.md").write_text("# not an image\n")
    tree.passed_over = ["notes.txt", "b/readme.md"]
    return tree


def make_flat(root: Path, count: int, size: tuple[int, int] = (24, 24)) -> list[Path]:
    """``count`` small PNGs ``img0000.png``... in one folder."""
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        path = root / f"img{index:04d}.png"
        Image.fromarray(tinted_noise(*size, seed=1000 + index)).save(path)
        paths.append(path)
    return paths


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``root``: relative path -> (size, mtime_ns, sha256)."""
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            stat = os.stat(path)
            with open(path, "rb") as handle:
                digest = hashlib.sha256(handle.read()).hexdigest()
            files[os.path.relpath(path, root)] = (stat.st_size, stat.st_mtime_ns, digest)
    return files
