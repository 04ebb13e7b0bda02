"""A bundled demo: synthetic shapes, a small CNN trained on them, and localisation metrics.

The shapes come with exact object masks, so a saliency map can be scored: does it
point at the object? :mod:`guidedbp.demo.shapes` draws the images (numpy and Pillow
only), :mod:`guidedbp.demo.metrics` scores maps against masks (numpy only),
:mod:`guidedbp.demo.train` trains the bundled model ``guidedbp/demo/data/shapes.keras``
(and its SiLU twin ``shapes_silu.keras``, the ``demo-silu`` model),
:mod:`guidedbp.demo.train_seg` the segmentation model ``shapes_seg.keras`` (``demo-seg``;
:mod:`guidedbp.demo.segmentation` holds its per-pixel labels and scores, and
:mod:`guidedbp.demo.receptive` computes its receptive field),
:mod:`guidedbp.demo.train_det` the detector ``shapes_det.keras`` (``demo-det``;
:mod:`guidedbp.demo.detection` holds the shapes' boxes, the decoding of its proposals and
its recall) and
:mod:`guidedbp.demo.samples` writes the example pictures in ``sample_images/`` and the
six shapes the package ships for ``guidedbp demo`` (``data/samples/``).

Nothing here imports TensorFlow at import time.

>>> from guidedbp.demo import CLASS_NAMES, make_shapes
>>> images, masks, labels = make_shapes(2, seed=0)
>>> images.shape, masks.shape, len(CLASS_NAMES)
((2, 96, 96, 3), (2, 96, 96), 6)
"""

from guidedbp.demo.metrics import energy_inside, pointing_game
from guidedbp.demo.shapes import CLASS_NAMES, IMAGE_SIZE, Scenes, make_scenes, make_shapes

__all__ = [
    "CLASS_NAMES",
    "IMAGE_SIZE",
    "Scenes",
    "energy_inside",
    "make_scenes",
    "make_shapes",
    "pointing_game",
]
