"""Write the example pictures in ``sample_images/``: ``python -m guidedbp.demo.samples``.

Shapes: the first image of each class drawn by :func:`guidedbp.demo.shapes.make_shapes`
with seed :data:`SAMPLES_SEED` goes to ``shapes/<class>_0.png``, and its object mask
(mode ``L``, 0 or 255) to ``masks/shapes/<class>_0.png``: the same path under
``masks/``, so a tool can pair each image with its mask.

The six shapes also ship inside the package, in :data:`PACKAGED_SAMPLES`
(``guidedbp/demo/data/samples/``), so that ``guidedbp demo`` runs from a ``pip install``
alone, and so does the rest of ``sample_images/`` (masks, scenes, photographs and their
``CREDITS``), in :data:`PACKAGED_PICTURES`: ``guidedbp demo --write-samples DIR``
(:func:`copy_samples`) writes the whole folder again from them, for the documentation's
examples, which name ``sample_images/...``. The command writes those copies too when it
writes the default ``sample_images/``, and a test checks that they hold the same bytes.

Photographs: with ``--skimage-wheel``, three of scikit-image's bundled photographs are
read from its wheel (``pip download --no-deps scikit-image``; the wheel is a zip file and
is not installed), shrunk so the longer side is at most 512 px, and saved as JPEG
(quality 90). Their sources and licences are in ``sample_images/CREDITS``.

>>> from guidedbp.demo.samples import PHOTOS
>>> PHOTOS["cat.jpg"]
'skimage/data/chelsea.png'
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

import numpy as np
from PIL import Image

from guidedbp.demo.shapes import CLASS_NAMES, make_scenes, make_shapes

#: Seed of the sample shapes.
SAMPLES_SEED = 2024

#: Output name of each photograph and its path inside the scikit-image wheel.
PHOTOS = {
    "cat.jpg": "skimage/data/chelsea.png",
    "coffee.jpg": "skimage/data/coffee.png",
    "astronaut.jpg": "skimage/data/astronaut.png",
}

#: Longest side of a photograph, in pixels, and its JPEG quality.
PHOTO_MAX_SIDE = 512
PHOTO_QUALITY = 90

DEFAULT_ROOT = Path("sample_images")

#: The sample shapes the package carries (the wheel too): what ``guidedbp demo`` explains.
PACKAGED_SAMPLES = Path(__file__).with_name("data") / "samples"


#: The rest of ``sample_images/`` as the package carries it: ``masks/shapes/``,
#: ``scenes/``, the photographs and ``CREDITS``.
PACKAGED_PICTURES = PACKAGED_SAMPLES.with_name("sample_images")


class SamplesExistError(ValueError):
    """:func:`copy_samples` would replace a file of other bytes."""


def packaged_files() -> dict[str, Path]:
    """Every file of ``sample_images/`` the package carries: its path there (``shapes/
    circle_0.png``, ``scenes/scene_0.png``, ``cat.jpg``...) -> the package's copy.

    >>> files = packaged_files()
    >>> files["shapes/circle_0.png"].parent.name, "scenes/scene_0.png" in files
    ('samples', True)
    """
    files = {f"shapes/{path.name}": path for path in packaged_samples()}
    files.update({path.relative_to(PACKAGED_PICTURES).as_posix(): path
                  for path in sorted(PACKAGED_PICTURES.rglob("*")) if path.is_file()})
    return dict(sorted(files.items()))


def copy_samples(root: str | Path) -> list[Path]:
    """Write the package's copy of ``sample_images/`` (:func:`packaged_files`) under
    ``root``, as a clone has it; files already there with the same bytes are kept.

    Returns:
        The paths written or kept, sorted.

    Raises:
        SamplesExistError: A file there holds other bytes (nothing is written then).
    """
    root = Path(root)
    files = {root / name: source for name, source in packaged_files().items()}
    for target, source in files.items():
        if target.exists() and (not target.is_file()
                                or target.read_bytes() != source.read_bytes()):
            raise SamplesExistError(f"{target} exists and is not the sample of that name: "
                                    "choose another folder")
    for target, source in files.items():
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    return sorted(files)


def _update_package_copy(root: Path) -> list[Path]:
    """Copy ``root``'s masks, scenes, photographs and CREDITS into
    :data:`PACKAGED_PICTURES` (the package's copy of ``sample_images/``)."""
    written = []
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root)
        if path.is_file() and name.parts[0] != "shapes":
            target = PACKAGED_PICTURES / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
            written.append(target)
    return written


def packaged_samples() -> list[Path]:
    """The shape images shipped in :data:`PACKAGED_SAMPLES`, sorted by name.

    >>> [path.name for path in packaged_samples()][:2]
    ['circle_0.png', 'cross_0.png']
    """
    return sorted(PACKAGED_SAMPLES.glob("*.png"))


def write_shapes(root: Path, seed: int = SAMPLES_SEED, per_class: int = 1) -> list[Path]:
    """Write ``per_class`` shape images of each class and their masks under ``root``.

    Returns:
        The image paths written, in class order.

    Raises:
        ValueError: For a non-positive ``per_class``.
    """
    if per_class < 1:
        raise ValueError(f"per_class={per_class!r} must be at least 1")
    root = Path(root)
    count = 20 * per_class * len(CLASS_NAMES)  # plenty: every class turns up per_class times
    images, masks, labels = make_shapes(count, seed=seed)
    written = []
    for label, name in enumerate(CLASS_NAMES):
        for index, i in enumerate(np.flatnonzero(labels == label)[:per_class]):
            image_path = root / "shapes" / f"{name}_{index}.png"
            mask_path = root / "masks" / "shapes" / f"{name}_{index}.png"
            image_path.parent.mkdir(parents=True, exist_ok=True)
            mask_path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(images[i], "RGB").save(image_path)
            Image.fromarray(masks[i].astype(np.uint8) * 255, "L").save(mask_path)
            written.append(image_path)
    return written


def _two_shape_scenes(seed: int, count: int):
    """The scenes of :func:`make_scenes` and the indices of its first ``count`` that hold
    a second shape."""
    scenes = make_scenes(20 * count, seed=seed, distractors=True)
    return scenes, np.flatnonzero(scenes.distractor_masks.any(axis=(1, 2)))[:count]


def write_scenes(root: Path, seed: int = SAMPLES_SEED, count: int = 2) -> list[Path]:
    """Write ``count`` scenes of two shapes each (the detector's, ``demo-det``) under
    ``root/scenes``: the first scenes of :func:`~guidedbp.demo.shapes.make_scenes` that
    hold a second shape, each object's box printed by ``main``.

    Returns:
        The image paths written, ``scene_0.png`` first.
    """
    root = Path(root) / "scenes"
    root.mkdir(parents=True, exist_ok=True)
    scenes, kept = _two_shape_scenes(seed, count)
    written = []
    for index, i in enumerate(kept):
        path = root / f"scene_{index}.png"
        Image.fromarray(scenes.images[i], "RGB").save(path)
        written.append(path)
    return written


def scene_boxes_text(seed: int = SAMPLES_SEED, count: int = 2) -> list[str]:
    """Each scene's objects as ``scene_0.png circle 10,12,40,44``: class and box
    ``(x0, y0, x1, y1)`` in pixels (the tight box of its mask, ends exclusive)."""
    from guidedbp.demo.detection import mask_boxes

    scenes, kept = _two_shape_scenes(seed, count)
    lines = []
    for index, i in enumerate(kept):
        boxes = mask_boxes(np.stack([scenes.masks[i], scenes.distractor_masks[i]]))
        for label, box in zip((scenes.labels[i], scenes.distractor_labels[i]), boxes):
            corners = ",".join(f"{value:g}" for value in box)
            lines.append(f"scene_{index}.png {CLASS_NAMES[label]} {corners}")
    return lines


def write_photos(root: Path, wheel: Path) -> list[Path]:
    """Extract, shrink and save the photographs of :data:`PHOTOS` from a scikit-image wheel.

    Raises:
        ValueError: When the wheel lacks one of the photographs.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    written = []
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for output, member in PHOTOS.items():
            if member not in names:
                raise ValueError(f"{wheel} has no {member}: is it a scikit-image wheel?")
            with archive.open(member) as stream:
                photo = Image.open(stream).convert("RGB")
            photo.thumbnail((PHOTO_MAX_SIDE, PHOTO_MAX_SIDE), Image.Resampling.LANCZOS)
            path = root / output
            photo.save(path, "JPEG", quality=PHOTO_QUALITY)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m guidedbp.demo.samples", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                        help=f"folder to write into (default: {DEFAULT_ROOT})")
    parser.add_argument("--seed", type=int, default=SAMPLES_SEED)
    parser.add_argument("--skimage-wheel", type=Path,
                        help="a scikit-image wheel to take the photographs from")
    args = parser.parse_args(argv)
    for path in write_shapes(args.root, args.seed):
        print(path)
        if args.root == DEFAULT_ROOT and args.seed == SAMPLES_SEED:
            packaged = PACKAGED_SAMPLES / path.name  # the copy the package (and wheel) ships
            packaged.write_bytes(path.read_bytes())
            print(packaged)
    for path in write_scenes(args.root, args.seed):
        print(path)
    print("\n".join(scene_boxes_text(args.seed)))
    if args.skimage_wheel is not None:
        for path in write_photos(args.root, args.skimage_wheel):
            print(path)
    if args.root == DEFAULT_ROOT and args.seed == SAMPLES_SEED:
        for path in _update_package_copy(args.root):  # the copy the package (and wheel) ships
            print(path)


if __name__ == "__main__":
    main()
