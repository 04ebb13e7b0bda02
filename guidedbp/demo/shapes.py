"""Synthetic shapes on cluttered backgrounds, with exact object masks; numpy and Pillow only.

Each image is 96x96 RGB: one filled, opaque shape of a class in :data:`CLASS_NAMES`, of
random size, position, rotation and colour, on a background made to be anything but
plain: a colour gradient, smooth colour variation, translucent irregular blobs and thin
straight lines, and pixel noise over everything. The clutter puts edges everywhere, so
a classifier has to tell the shape's outline from them; colours are drawn independently
of the class, and the shape's colour is kept at least an RGB distance of 100 from the
mean of the background it covers, so it can be found at all.

Shapes are drawn at 4x the size (lines at 2x) and downsampled with Lanczos, so edges
are anti-aliased. The object's mask is the same 4x drawing, downsampled the same way
and thresholded at one half: the pixels the object (about) mostly covers.

Every image has its own random stream spawned from the seed, so image ``i`` depends
only on ``seed``, ``i`` and ``distractors``: ``make_shapes(10, s)[0][:5]`` equals
``make_shapes(5, s)[0]``.

>>> images, masks, labels = make_shapes(3, seed=7)
>>> images.dtype, masks.dtype, images.shape
(dtype('uint8'), dtype('bool'), (3, 96, 96, 3))
>>> bool(np.array_equal(images, make_shapes(3, seed=7)[0]))
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
from PIL import Image, ImageDraw

#: The shape classes, in label order.
CLASS_NAMES = ("circle", "square", "triangle", "star", "ring", "cross")

#: Images are ``IMAGE_SIZE`` x ``IMAGE_SIZE`` RGB.
IMAGE_SIZE = 96

#: Circumradius of the target shape in pixels, inclusive range.
RADIUS_RANGE = (14.0, 30.0)

#: With a distractor: the target's circumradius range in pixels (big enough to leave a
#: smaller shape room to be recognisable), the distractor's area as a share of the
#: target's, and bounds on the distractor's circumradius (pixels, share of the target's).
DISTRACTOR_TARGET_RADIUS_RANGE = (16.0, 26.0)
DISTRACTOR_AREA_SHARE = (0.25, 0.5)
DISTRACTOR_MIN_RADIUS = 8.0
DISTRACTOR_MAX_SCALE = 0.65

_SCALE = 4  # supersampling factor for drawing shapes (and their masks)
_LINE_SCALE = 2  # supersampling factor for background lines (RGB resizes cost 3x)
_MIN_CONTRAST = 100.0  # RGB distance between the object and its local background mean
_STAR_INNER = 0.45  # inner/outer radius of the five-pointed star
_RING_INNER = 0.55  # hole/outer radius of the ring
_CROSS_HALF_WIDTH = 0.3  # half arm width / circumradius of the cross
# Clutter is seen through: it has edges everywhere, but the opaque object stands out.
_BLOB_OPACITY = (0.25, 0.55)
_LINE_OPACITY = (0.35, 0.7)


@dataclass(frozen=True)
class Scenes:
    """Rendered shape images with the target's and the distractor's masks and labels.

    Attributes:
        images: uint8 ``(N, 96, 96, 3)``.
        masks: bool ``(N, 96, 96)``, the target object's pixels.
        labels: int64 ``(N,)``, the target's class (index into :data:`CLASS_NAMES`).
        distractor_masks: bool ``(N, 96, 96)``, the distractor's pixels (all False
            without distractors).
        distractor_labels: int64 ``(N,)``, the distractor's class, -1 without one.
    """

    images: np.ndarray
    masks: np.ndarray
    labels: np.ndarray
    distractor_masks: np.ndarray
    distractor_labels: np.ndarray


def make_shapes(
    n: int, seed: int, distractors: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw ``n`` labelled shape images with their object masks.

    Args:
        n: Number of images, ``>= 0``.
        seed: Seed of the random stream; the same seed gives the same bytes.
        distractors: Also draw a second, smaller shape of another class that does not
            touch the target. The label and mask stay the target's.

    Returns:
        ``(images, masks, labels)``: uint8 ``(n, 96, 96, 3)``, bool ``(n, 96, 96)``
        and int64 ``(n,)`` indices into :data:`CLASS_NAMES`.

    Raises:
        TypeError: For a non-integer ``n`` or ``seed``.
        ValueError: For a negative ``n``.

    >>> images, masks, labels = make_shapes(4, seed=1, distractors=True)
    >>> bool(masks.any(axis=(1, 2)).all()), bool(((0 <= labels) & (labels < 6)).all())
    (True, True)
    """
    scenes = make_scenes(n, seed, distractors)
    return scenes.images, scenes.masks, scenes.labels


def make_scenes(n: int, seed: int, distractors: bool = False) -> Scenes:
    """Like :func:`make_shapes`, but also returns the distractors' masks and labels."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n={n!r} must be an integer")
    if n < 0:
        raise ValueError(f"n={n!r} must be non-negative")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed={seed!r} must be an integer")
    size = IMAGE_SIZE
    images = np.empty((n, size, size, 3), np.uint8)
    masks = np.empty((n, size, size), bool)
    labels = np.empty(n, np.int64)
    distractor_masks = np.zeros((n, size, size), bool)
    distractor_labels = np.full(n, -1, np.int64)
    streams = np.random.SeedSequence(int(seed)).spawn(n)
    for i, stream in enumerate(streams):
        rng = np.random.default_rng(stream)
        scene = _render_scene(rng, distractors)
        images[i], masks[i], labels[i] = scene[0], scene[1], scene[2]
        if distractors:
            distractor_masks[i], distractor_labels[i] = scene[3], scene[4]
    return Scenes(images, masks, labels, distractor_masks, distractor_labels)


# -- one scene ---------------------------------------------------------------------------


def _render_scene(rng: np.random.Generator, distractors: bool):
    size = IMAGE_SIZE
    label = int(rng.integers(len(CLASS_NAMES)))
    radius = float(rng.uniform(*(DISTRACTOR_TARGET_RADIUS_RANGE if distractors else RADIUS_RANGE)))
    background = _background(rng)
    if distractors:
        other = int(rng.choice([c for c in range(len(CLASS_NAMES)) if c != label]))
        # Smaller in area, whatever the two classes (a circle covers 2.4x a triangle).
        share = float(rng.uniform(*DISTRACTOR_AREA_SHARE))
        other_radius = radius * math.sqrt(
            share * _area_per_squared_radius(label) / _area_per_squared_radius(other)
        )
        other_radius = min(max(other_radius, DISTRACTOR_MIN_RADIUS), DISTRACTOR_MAX_SCALE * radius)
        centre, other_centre = _place_pair(rng, radius, other_radius)
    else:
        centre = _place(rng, radius)

    image = background.copy()
    if distractors:
        other_alpha = _shape_alpha(other, other_centre, other_radius, _angle(rng))
        image = _paint(image, other_alpha, _contrasting_colour(rng, background, other_alpha))
    alpha = _shape_alpha(label, centre, radius, _angle(rng))
    image = _paint(image, alpha, _contrasting_colour(rng, background, alpha))

    noise = rng.standard_normal((size, size, 3), np.float32) * np.float32(rng.uniform(3.0, 12.0))
    pixels = np.clip(np.rint(image + noise), 0, 255).astype(np.uint8)
    mask = alpha >= 0.5
    if distractors:
        return pixels, mask, label, other_alpha >= 0.5, other
    return pixels, mask, label


def _angle(rng: np.random.Generator) -> float:
    return float(rng.uniform(0.0, 2.0 * math.pi))


def _place(rng: np.random.Generator, radius: float) -> tuple[float, float]:
    # The whole circumscribed circle, plus a pixel, lies inside the image.
    low, high = radius + 1.0, IMAGE_SIZE - radius - 1.0
    return float(rng.uniform(low, high)), float(rng.uniform(low, high))


def _place_pair(rng: np.random.Generator, radius: float, other_radius: float):
    """Centres whose circumscribed circles are 3 px apart, so the masks are disjoint."""
    gap = radius + other_radius + 3.0
    while True:  # a 30 px target leaves room in a corner; a few tries suffice
        centre = _place(rng, radius)
        for _ in range(20):
            other = _place(rng, other_radius)
            if math.dist(centre, other) >= gap:
                return centre, other


# -- drawing -----------------------------------------------------------------------------


def _vertices(label: int, centre, radius: float, angle: float) -> list[tuple[float, float]]:
    """Vertices, at the 4x scale, of a polygonal shape centred at ``centre`` (image pixels)."""
    name = CLASS_NAMES[label]
    if name == "square":
        polar = [(radius, angle + math.pi / 4 + k * math.pi / 2) for k in range(4)]
    elif name == "triangle":
        polar = [(radius, angle + k * 2 * math.pi / 3) for k in range(3)]
    elif name == "star":
        polar = [
            (radius if k % 2 == 0 else radius * _STAR_INNER, angle + k * math.pi / 5)
            for k in range(10)
        ]
    elif name == "cross":
        half = radius * _CROSS_HALF_WIDTH
        arm = math.sqrt(radius**2 - half**2)  # arm corners lie on the circumcircle
        outline = [(arm, -half), (arm, half), (half, half), (half, arm), (-half, arm),
                   (-half, half), (-arm, half), (-arm, -half), (-half, -half),
                   (-half, -arm), (half, -arm), (half, -half)]
        polar = [(math.hypot(x, y), angle + math.atan2(y, x)) for x, y in outline]
    else:
        raise ValueError(f"{name!r} is not a polygon")
    cx, cy = centre
    return [
        (_SCALE * (cx + r * math.cos(t)), _SCALE * (cy + r * math.sin(t))) for r, t in polar
    ]


@cache
def _area_per_squared_radius(label: int) -> float:
    """Area of a shape of the class with circumradius 1."""
    name = CLASS_NAMES[label]
    if name == "circle":
        return math.pi
    if name == "ring":
        return math.pi * (1.0 - _RING_INNER**2)
    points = np.array(_vertices(label, (0.0, 0.0), 1.0, 0.0)) / _SCALE
    x, y = points[:, 0], points[:, 1]
    return 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))  # shoelace


def _shape_alpha(label: int, centre, radius: float, angle: float) -> np.ndarray:
    """Coverage in [0, 1], float32 ``(96, 96)``, of one shape drawn at 4x and downsampled.

    Only a box around the shape is drawn and resized: with a margin of twice the
    Lanczos filter's reach (3 output pixels), the box's edges see only zeros, so the
    result equals resizing the whole canvas.
    """
    size, margin = IMAGE_SIZE, 6
    cx, cy = centre
    left, top = max(0, math.floor(cx - radius) - margin), max(0, math.floor(cy - radius) - margin)
    right = min(size, math.ceil(cx + radius) + margin)
    bottom = min(size, math.ceil(cy + radius) + margin)
    canvas = Image.new("L", (_SCALE * (right - left), _SCALE * (bottom - top)), 0)
    draw = ImageDraw.Draw(canvas)
    local = (cx - left, cy - top)
    name = CLASS_NAMES[label]
    if name in ("circle", "ring"):
        x, y, r = _SCALE * local[0], _SCALE * local[1], _SCALE * radius
        draw.ellipse((x - r, y - r, x + r, y + r), fill=255)
        if name == "ring":
            r *= _RING_INNER
            draw.ellipse((x - r, y - r, x + r, y + r), fill=0)
    else:
        draw.polygon(_vertices(label, local, radius, angle), fill=255)
    small = canvas.resize((right - left, bottom - top), Image.Resampling.LANCZOS)
    alpha = np.zeros((size, size), np.float32)
    alpha[top:bottom, left:right] = np.asarray(small, np.float32) / 255.0
    return alpha


def _paint(image: np.ndarray, alpha: np.ndarray, colour: np.ndarray) -> np.ndarray:
    """``image`` (float32, changed in place and returned) with ``colour`` over it at ``alpha``."""
    image += alpha[..., None] * (np.asarray(colour, np.float32) - image)
    return image


def _contrasting_colour(rng, background: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """A random colour far from the mean of the background the shape covers."""
    weights = alpha[..., None]
    local = (background * weights).sum(axis=(0, 1)) / max(float(weights.sum()), 1e-6)
    best, best_distance = None, -1.0
    for _ in range(64):
        colour = rng.uniform(0.0, 255.0, 3)
        distance = float(np.linalg.norm(colour - local))
        if distance >= _MIN_CONTRAST:
            return colour
        if distance > best_distance:
            best, best_distance = colour, distance
    return best


# -- background --------------------------------------------------------------------------


@cache
def _smooth_matrix(knots: int) -> np.ndarray:
    """``(96, knots)`` Gaussian interpolation weights: ``W @ grid @ W.T`` is a smooth field."""
    size = IMAGE_SIZE
    spacing = size / (knots - 3)
    positions = (np.arange(knots) - 1.0) * spacing  # one knot beyond each border
    x = np.arange(size) + 0.5
    weights = np.exp(-0.5 * ((x[:, None] - positions[None, :]) / (0.6 * spacing)) ** 2)
    weights = (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32)
    weights.setflags(write=False)  # cached and shared
    return weights


def _smooth_field(rng: np.random.Generator, knots: int, channels: int) -> np.ndarray:
    weights = _smooth_matrix(knots)
    grid = rng.normal(0.0, 1.0, (channels, knots, knots)).astype(np.float32)
    field = weights @ grid @ weights.T  # (channels, 96, 96)
    return np.moveaxis(field, 0, -1)


@cache
def _centred_coordinates() -> np.ndarray:
    """Row and column of each pixel centre, from the image centre, float32 ``(2, 96, 96)``."""
    grid = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE].astype(np.float32)
    grid += np.float32(0.5 - IMAGE_SIZE / 2)
    grid.setflags(write=False)
    return grid


def _background(rng: np.random.Generator) -> np.ndarray:
    """Float ``(96, 96, 3)`` in about 0..255: gradient, colour variation, blobs, lines."""
    # A linear colour gradient in a random direction.
    start, end = rng.uniform(0.0, 255.0, (2, 3))
    direction = _angle(rng)
    y, x = _centred_coordinates()
    t = x * np.float32(math.cos(direction)) + y * np.float32(math.sin(direction))
    t = (t - t.min()) / (t.max() - t.min())
    image = start.astype(np.float32) + t[..., None] * (end - start).astype(np.float32)
    # Smooth colour variation on top.
    knots = int(rng.integers(4, 8))
    variation = _smooth_field(rng, knots, 3)
    image += variation * np.float32(rng.uniform(15.0, 40.0) / variation.std())
    # Irregular blobs: the tops of a smooth random field, soft-edged.
    for _ in range(int(rng.integers(2, 6))):
        field = _smooth_field(rng, int(rng.integers(7, 13)), 1)[..., 0]
        rank = int(rng.uniform(0.8, 0.93) * (field.size - 1))
        threshold = np.partition(field.ravel(), rank)[rank]
        softness = 0.15 * field.std()
        opacity = np.float32(rng.uniform(*_BLOB_OPACITY))
        alpha = np.clip((field - threshold) / softness, 0.0, 1.0) * opacity
        image = _paint(image, alpha, rng.uniform(0.0, 255.0, 3))
    image = _lines(rng, image)
    return np.clip(image, 0.0, 255.0, out=image)


def _lines(rng: np.random.Generator, image: np.ndarray) -> np.ndarray:
    """Thin straight lines across the image, drawn at 2x into premultiplied layers."""
    big = IMAGE_SIZE * _LINE_SCALE
    colour_layer = Image.new("RGB", (big, big), (0, 0, 0))
    alpha_layer = Image.new("L", (big, big), 0)
    draw_colour, draw_alpha = ImageDraw.Draw(colour_layer), ImageDraw.Draw(alpha_layer)
    for _ in range(int(rng.integers(2, 8))):
        # Segments 30..160 px long, centred anywhere in the image.
        middle = rng.uniform(0.0, IMAGE_SIZE, 2)
        direction = _angle(rng)
        half = rng.uniform(15.0, 80.0)
        offset = half * np.array([math.cos(direction), math.sin(direction)])
        ends = [tuple(_LINE_SCALE * (middle - offset)), tuple(_LINE_SCALE * (middle + offset))]
        width = round(_LINE_SCALE * rng.uniform(0.75, 2.5))
        opacity = rng.uniform(*_LINE_OPACITY)
        colour = tuple(round(c * opacity) for c in rng.integers(0, 256, 3))
        draw_colour.line(ends, fill=colour, width=width)
        draw_alpha.line(ends, fill=round(255 * opacity), width=width)
    small = (IMAGE_SIZE, IMAGE_SIZE)
    lanczos = Image.Resampling.LANCZOS
    premultiplied = np.asarray(colour_layer.resize(small, lanczos), np.float32)
    alpha = np.asarray(alpha_layer.resize(small, lanczos), np.float32)[..., None] / 255.0
    image *= 1.0 - alpha
    image += premultiplied
    return image
