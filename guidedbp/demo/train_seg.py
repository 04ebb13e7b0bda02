"""Train the bundled shapes segmentation model: ``python -m guidedbp.demo.train_seg``.

A small ReLU encoder-decoder (``demo-seg``, ``data/shapes_seg.keras``): three conv/ReLU/
max-pool blocks down to 12x12, two more convs there, a nearest-neighbour upsampling to
24x24, one conv and a 1x1 conv with a softmax over :data:`SEG_CLASS_NAMES` (background and
the six shapes). It takes raw 0..255 pixels of 96x96 RGB (a ``Rescaling`` layer inside maps
them to [-1, 1], as in the classifier) and returns ``(B, 24, 24, 7)`` probabilities: one
distribution per cell of 4x4 pixels. Only Conv2D, MaxPooling2D and UpSampling2D move
pixels, so its receptive field is exact: 62 px
(:func:`guidedbp.demo.receptive.receptive_field`).

Labels come from the generator's exact masks, brought to 24x24 by
:func:`guidedbp.demo.segmentation.label_maps` (a cell is an object's when its mask covers
at least half of the cell). A share of the training images hold a distractor, labelled by
its own class, so that images hold two objects of different classes. Every epoch shows
each image (and its labels) under a random one of the eight flips and quarter turns.

Seeds are fixed and TensorFlow's op determinism is on, as for the classifier
(:mod:`guidedbp.demo.train`); the training images use the classifier's training seeds,
so the same seeds stay off-limits for evaluation. After training the script prints the
per-pixel accuracy and each class's intersection over union on held-out shapes.

>>> from guidedbp.demo.train_seg import build_model
>>> build_model().output_shape
(None, 24, 24, 7)
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from guidedbp.demo.segmentation import (
    SEG_CLASS_NAMES,
    confusion,
    iou_per_class,
    label_maps,
    pixel_accuracy,
)
from guidedbp.demo.shapes import IMAGE_SIZE, Scenes, make_scenes
from guidedbp.demo.train import (
    DISTRACTOR_SEED_OFFSET,
    HELDOUT_SEED,
    TRAIN_SEED,
    dihedral,
    make_portable,
)

if TYPE_CHECKING:
    import keras

#: Default output, inside the package so that it ships as package data.
DEFAULT_OUTPUT = Path(__file__).parent / "data" / "shapes_seg.keras"
MODEL_NAME = "shapes_seg_cnn"

#: Image pixels per output cell along each side: the output is 24x24.
OUTPUT_STRIDE = 4
OUTPUT_SIZE = IMAGE_SIZE // OUTPUT_STRIDE


def build_model(num_classes: int = len(SEG_CLASS_NAMES)) -> keras.Model:
    """The segmentation CNN, untrained: raw 0..255 RGB ``(96, 96, 3)`` in,
    ``(24, 24, num_classes)`` per-cell class probabilities out."""
    import keras
    from keras import layers

    inputs = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3), name="image")
    x = layers.Rescaling(1.0 / 127.5, offset=-1.0, name="rescale")(inputs)
    conv = {"kernel_size": 3, "padding": "same", "activation": "relu",
            "kernel_initializer": "he_normal"}
    for block, filters in enumerate((16, 32, 48), start=1):
        x = layers.Conv2D(filters, name=f"conv{block}", **conv)(x)
        x = layers.MaxPooling2D(name=f"pool{block}")(x)
    x = layers.Conv2D(64, name="conv4", **conv)(x)
    x = layers.Conv2D(64, name="conv5", **conv)(x)
    x = layers.UpSampling2D(name="up")(x)  # nearest neighbour: 12x12 -> 24x24
    x = layers.Conv2D(32, name="conv6", **conv)(x)
    outputs = layers.Conv2D(num_classes, 1, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs, name=MODEL_NAME)


def training_scenes(count: int, distractor_share: float, seed: int) -> Scenes:
    """``count`` scenes, ``round(count * distractor_share)`` of them with a distractor
    (drawn from ``seed + DISTRACTOR_SEED_OFFSET``, as the classifier's)."""
    with_distractors = round(count * distractor_share)
    plain = make_scenes(count - with_distractors, seed=seed)
    if not with_distractors:
        return plain
    extra = make_scenes(with_distractors, seed=seed + DISTRACTOR_SEED_OFFSET, distractors=True)
    return Scenes(*(np.concatenate([mine, theirs]) for mine, theirs in
                    zip(vars(plain).values(), vars(extra).values(), strict=True)))


def train(
    output: Path,
    train_images: int = 6000,
    distractor_share: float = 0.3,
    epochs: int = 8,
    batch_size: int = 32,
    seed: int = TRAIN_SEED,
    foreground_weight: float = 2.0,
) -> keras.Model:
    """Train the segmentation model and save it to ``output`` with its labels beside it.

    Args:
        output: Path of the ``.keras`` file to write.
        train_images: Number of training images.
        distractor_share: Share of them that also hold a distractor, in [0, 1].
        epochs: Passes over the training images.
        batch_size: Images per optimisation step.
        seed: Seed of the training images, the initial weights and the augmentation.
        foreground_weight: Weight of an object's cells in the loss, against 1 for
            background cells (nine in ten cells are background).

    Returns:
        The trained model (with its optimizer).
    """
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    tf.config.experimental.enable_op_determinism()

    started = time.perf_counter()
    scenes = training_scenes(train_images, distractor_share, seed)
    images, truth = scenes.images, label_maps(scenes, OUTPUT_STRIDE)
    print(f"generated {len(images)} training images "
          f"({round(train_images * distractor_share)} with a distractor) "
          f"in {time.perf_counter() - started:.0f} s", flush=True)

    model = build_model()
    steps = epochs * -(-len(images) // batch_size)
    schedule = keras.optimizers.schedules.CosineDecay(2e-3, decay_steps=steps, alpha=0.02)
    model.compile(optimizer=keras.optimizers.Adam(schedule),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    monitor = make_scenes(300, seed=HELDOUT_SEED + 1000, distractors=True)
    monitor_truth = label_maps(monitor, OUTPUT_STRIDE)
    rng = np.random.default_rng(seed)
    for epoch in range(epochs):
        # One draw of flips and turns for the images and their labels alike.
        turn = int(rng.integers(2**31))
        turned = dihedral(truth[..., None], np.random.default_rng(turn))[..., 0]
        weights = np.where(turned > 0, np.float32(foreground_weight), np.float32(1.0))
        model.fit(dihedral(images, np.random.default_rng(turn)), turned, sample_weight=weights,
                  batch_size=batch_size, epochs=epoch + 1, initial_epoch=epoch,
                  shuffle=True, verbose=2, validation_data=(monitor.images, monitor_truth))

    save(model, output)
    print(f"trained in {time.perf_counter() - started:.0f} s", flush=True)
    return model


def save(model, output: Path) -> None:
    """Save the weights in a fresh, uncompiled copy (no optimizer state), and the labels."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    inference = build_model()
    inference.set_weights(model.get_weights())
    inference.save(output)
    make_portable(output)
    labels_path = output.with_name(f"{output.stem}_labels.txt")
    labels_path.write_text("".join(f"{name}\n" for name in SEG_CLASS_NAMES), encoding="utf-8")
    print(f"wrote {output} ({output.stat().st_size / 1024:.0f} KiB) and {labels_path}")


def segmentation_scores(model, scenes: Scenes, batch_size: int = 100) -> dict[str, float]:
    """Per-pixel accuracy, each class's IoU and their mean, of the model's per-cell argmax
    against :func:`label_maps` of ``scenes``."""
    probabilities = model.predict(scenes.images.astype(np.float32), batch_size=batch_size,
                                  verbose=0)
    matrix = confusion(probabilities.argmax(axis=-1), label_maps(scenes, OUTPUT_STRIDE),
                       len(SEG_CLASS_NAMES))
    ious = iou_per_class(matrix)
    scores = {"pixel_accuracy": pixel_accuracy(matrix), "mean_iou": float(np.nanmean(ious))}
    scores.update({f"iou_{name}": float(value) for name, value in zip(SEG_CLASS_NAMES, ious)})
    return scores


def evaluate(model, count: int = 1000) -> None:
    """Print held-out segmentation scores, single shapes and with a distractor."""
    for distractors in (False, True):
        scores = segmentation_scores(model, make_scenes(count, HELDOUT_SEED, distractors))
        what = "with a distractor" if distractors else "single shapes"
        print(f"held-out, {what} ({count} images, seed {HELDOUT_SEED}): "
              + ", ".join(f"{key} {value:.4f}" for key, value in scores.items()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m guidedbp.demo.train_seg", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT,
                        help=f"the .keras file to write (default: {DEFAULT_OUTPUT})")
    parser.add_argument("--train-images", type=int, default=6000)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--distractor-share", type=float, default=0.3)
    parser.add_argument("--foreground-weight", type=float, default=2.0)
    parser.add_argument("--evaluate-only", action="store_true",
                        help="skip training; evaluate the model at --output")
    args = parser.parse_args(argv)
    if args.train_images < 1 or args.epochs < 1:
        parser.error("--train-images and --epochs must be positive")
    if not 0.0 <= args.distractor_share <= 1.0:
        parser.error("--distractor-share must lie in [0, 1]")
    if not args.foreground_weight > 0:
        parser.error("--foreground-weight must be positive")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()
    if args.evaluate_only:
        import keras

        model = keras.models.load_model(args.output)
    else:
        model = train(args.output, args.train_images, args.distractor_share, args.epochs,
                      foreground_weight=args.foreground_weight)
    evaluate(model)
    print(f"total wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
