"""Train the bundled shapes detector: ``python -m guidedbp.demo.train_det``.

A small anchor-free ReLU detector (``demo-det``, ``data/shapes_det.keras``), in the
manner of FCOS (Tian et al., 2019): raw 0..255 RGB ``(96, 96, 3)`` in (a
``Rescaling(1/127.5, offset=-1)`` inside, as the classifier's), three conv/ReLU/max-pool
blocks down to a 12x12 grid of 8x8-pixel cells, two more convs, then two heads of a
conv/ReLU and a 1x1 conv each. Out comes a dict of 144 proposals, one per cell:

- ``"boxes"`` ``(B, 144, 4)``: the cell's box ``(x0, y0, x1, y1)`` in input pixels, its
  centre plus 8 times the softplus distances ``(-l, -t, r, b)`` of the box head, each
  half a pixel longer, cut to the image (:class:`~guidedbp.models.layers.GridBoxes`):
  ``0 <= x0 < x1 <= 96`` and ``0 <= y0 < y1 <= 96``;
- ``"scores"`` ``(B, 144, 6)``: the cell's sigmoid probability of each shape class.

It learns from :func:`~guidedbp.demo.shapes.make_scenes` images, most with a smaller
distractor of another class, both objects labelled with their tight boxes
(:func:`~guidedbp.demo.detection.scene_boxes`). A cell is positive for an object when
its centre lies inside the object's box and within a quarter of the box's width (and
height) of the box's centre, at least half a cell (the smaller object wins a cell both
claim): its targets are the object's class and box. The loss is the binary
cross-entropy of every cell's six scores plus the GIoU loss (Rezatofighi et al., 2019)
of the positive cells' boxes, both divided by the batch's positive cells. Each epoch
shows every image (and its boxes) under a random one of the eight flips and quarter
turns.

Seeds are fixed and TensorFlow's op determinism is on, as for the classifier
(:mod:`guidedbp.demo.train`); the training images use the classifier's training seeds,
so the same seeds stay off-limits for evaluation. After training the script prints, on
held-out scenes, the recall at IoU 0.5 with the class right (a true object is found when
a proposal scoring at least 0.5 for its class overlaps it with IoU at least 0.5) and the
mean IoU of the objects found (:func:`~guidedbp.demo.detection.detection_recall`).

>>> from guidedbp.demo.train_det import build_model
>>> {name: tuple(tensor.shape) for name, tensor in build_model().output.items()}
{'boxes': (None, 144, 4), 'scores': (None, 144, 6)}
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from guidedbp.demo.detection import detection_recall, detections, pairwise_iou, scene_boxes
from guidedbp.demo.shapes import CLASS_NAMES, IMAGE_SIZE, make_scenes
from guidedbp.demo.train import HELDOUT_SEED, TRAIN_SEED, dihedral, make_portable
from guidedbp.demo.train_seg import training_scenes

if TYPE_CHECKING:
    import keras

#: Default output, inside the package so that it ships as package data.
DEFAULT_OUTPUT = Path(__file__).parent / "data" / "shapes_det.keras"
MODEL_NAME = "shapes_det_cnn"

#: Image pixels per grid cell side: 12x12 cells, 144 proposals.
STRIDE = 8
GRID = IMAGE_SIZE // STRIDE

#: A cell is positive for an object within this share of its box's width (height) of
#: the box's centre, or half a cell, whichever is more.
CENTRE_SHARE = 0.25

#: The score a proposal needs for its class, and the IoU that finds an object, in the
#: figures the script prints (and the tests check).
SCORE_THRESHOLD = 0.5
IOU_THRESHOLD = 0.5


def build_model(num_classes: int = len(CLASS_NAMES)) -> keras.Model:
    """The detector, untrained: raw 0..255 RGB ``(96, 96, 3)`` in, a dict of
    ``"boxes"`` ``(B, 144, 4)`` and ``"scores"`` ``(B, 144, num_classes)`` out."""
    import keras
    from keras import layers

    from guidedbp.models.layers import GridBoxes

    inputs = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3), name="image")
    x = layers.Rescaling(1.0 / 127.5, offset=-1.0, name="rescale")(inputs)
    conv = {"kernel_size": 3, "padding": "same", "activation": "relu",
            "kernel_initializer": "he_normal"}
    for block, filters in enumerate((16, 32, 48), start=1):
        x = layers.Conv2D(filters, name=f"conv{block}", **conv)(x)
        x = layers.MaxPooling2D(name=f"pool{block}")(x)
    x = layers.Conv2D(64, name="conv4", **conv)(x)
    # Dilated: the receptive field reaches the largest shapes' sides (60 px across)
    # from the cells at their centre.
    x = layers.Conv2D(64, dilation_rate=2, name="conv5", **conv)(x)

    box = layers.Conv2D(64, name="box_conv", **conv)(x)
    distances = layers.Conv2D(4, 1, activation="softplus", name="distances")(box)
    # Half a pixel more on every side: no box is under 1 px, even should softplus
    # underflow; boxes cut to the image.
    boxes = GridBoxes(STRIDE, min_distance=0.5 / STRIDE, clip=True, name="boxes")(distances)

    head = layers.Conv2D(64, name="class_conv", **conv)(x)
    # Start every score near 0.01: most cells are background (Lin et al., 2017).
    logits = layers.Conv2D(num_classes, 1, name="class_logits",
                           bias_initializer=keras.initializers.Constant(-4.6))(head)
    logits = layers.Reshape((GRID * GRID, num_classes), name="cell_logits")(logits)
    # The sigmoid last, so that the output's head is seen to be one.
    scores = layers.Activation("sigmoid", name="scores")(logits)
    return keras.Model(inputs, {"boxes": boxes, "scores": scores}, name=MODEL_NAME)


def dihedral_boxes(boxes: np.ndarray, choices: np.ndarray,
                   size: int = IMAGE_SIZE) -> np.ndarray:
    """Boxes ``(N, K, 4)`` of ``size`` x ``size`` images under the flips and quarter turns
    :func:`~guidedbp.demo.train.dihedral` applies: choice ``k`` turns ``k % 4`` quarters
    (``np.rot90``) and, for ``k >= 4``, then flips left to right."""
    out = np.asarray(boxes, np.float32).copy()
    for k in range(8):
        chosen = choices == k
        view = out[chosen]
        for _ in range(k % 4):  # np.rot90: column x goes to row size - 1 - x, row y to column y
            view = np.stack([view[..., 1], size - view[..., 2], view[..., 3],
                             size - view[..., 0]], axis=-1)
        if k >= 4:
            view = np.stack([size - view[..., 2], view[..., 1], size - view[..., 0],
                             view[..., 3]], axis=-1)
        out[chosen] = view
    return out


def cell_targets(
    boxes: np.ndarray, labels: np.ndarray, num_classes: int = len(CLASS_NAMES)
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each grid cell's training targets from the true boxes.

    Args:
        boxes: Float ``(B, K, 4)`` true boxes in input pixels.
        labels: Int ``(B, K)`` their classes, -1 for no object.
        num_classes: Classes in the scores.

    Returns:
        ``(classes, cell_boxes, positive)``: float32 ``(B, 144, num_classes)`` one-hot
        class targets (all zero for background cells), float32 ``(B, 144, 4)`` the box
        of each positive cell's object (zeros elsewhere) and bool ``(B, 144)``.
    """
    boxes = np.asarray(boxes, np.float32)
    labels = np.asarray(labels)
    centres = (np.arange(GRID, dtype=np.float32) + 0.5) * STRIDE
    centre_y, centre_x = (grid.ravel() for grid in np.meshgrid(centres, centres, indexing="ij"))
    x0, y0, x1, y1 = (boxes[..., i, None] for i in range(4))  # (B, K, 1) each
    half_x = np.maximum(CENTRE_SHARE * (x1 - x0), STRIDE / 2)
    half_y = np.maximum(CENTRE_SHARE * (y1 - y0), STRIDE / 2)
    inside = ((x0 < centre_x) & (centre_x < x1) & (y0 < centre_y) & (centre_y < y1)
              & (np.abs(centre_x - (x0 + x1) / 2) <= half_x)
              & (np.abs(centre_y - (y0 + y1) / 2) <= half_y)
              & (labels >= 0)[..., None])  # (B, K, 144)
    area = np.where(inside, ((x1 - x0) * (y1 - y0)), np.inf)
    owner = area.argmin(axis=1)  # (B, 144): the smallest object claiming the cell
    positive = inside.any(axis=1)
    batch = np.arange(len(boxes))[:, None]
    classes = np.zeros((*positive.shape, num_classes), np.float32)
    owner_labels = labels[batch, owner]
    classes[positive, owner_labels[positive]] = 1.0
    cell_boxes = np.where(positive[..., None], boxes[batch, owner], 0.0).astype(np.float32)
    return classes, cell_boxes, positive


def train(
    output: Path,
    train_images: int = 6000,
    distractor_share: float = 0.7,
    epochs: int = 15,
    batch_size: int = 32,
    seed: int = TRAIN_SEED,
    learning_rate: float = 2e-3,
) -> keras.Model:
    """Train the detector and save it to ``output`` with its labels beside it.

    Args:
        output: Path of the ``.keras`` file to write.
        train_images: Number of training images.
        distractor_share: Share of them that also hold a distractor, in [0, 1].
        epochs: Passes over the training images.
        batch_size: Images per optimisation step.
        seed: Seed of the training images, the initial weights and the augmentation.
        learning_rate: Adam's initial learning rate (cosine decay to 2 % of it).

    Returns:
        The trained model (a detector as :func:`build_model` makes it).
    """
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    tf.config.experimental.enable_op_determinism()

    started = time.perf_counter()
    scenes = training_scenes(train_images, distractor_share, seed)
    images = scenes.images
    truth_boxes, truth_labels = scene_boxes(scenes)
    print(f"generated {len(images)} training images "
          f"({round(train_images * distractor_share)} with a distractor) "
          f"in {time.perf_counter() - started:.0f} s", flush=True)

    model = build_model()
    # Trained on logits (stable cross-entropy); the saved model ends in the sigmoid.
    trainer = keras.Model(model.inputs, [model.get_layer("boxes").output,
                                         model.get_layer("cell_logits").output])
    batches = -(-len(images) // batch_size)
    schedule = keras.optimizers.schedules.CosineDecay(
        learning_rate, decay_steps=epochs * batches, alpha=0.02)
    optimizer = keras.optimizers.Adam(schedule)
    step = _train_step(trainer, optimizer)

    rng = np.random.default_rng(seed)
    for epoch in range(epochs):
        epoch_started = time.perf_counter()
        turn = int(rng.integers(2**31))
        choices = np.random.default_rng(turn).integers(0, 8, len(images))  # dihedral's draw
        turned_images = dihedral(images, np.random.default_rng(turn))
        classes, cell_boxes, positive = cell_targets(
            dihedral_boxes(truth_boxes, choices), truth_labels)
        order = rng.permutation(len(images))
        totals = np.zeros(2)
        for start in range(0, len(images), batch_size):
            index = order[start:start + batch_size]
            losses = step(turned_images[index].astype(np.float32), classes[index],
                          cell_boxes[index], positive[index].astype(np.float32))
            totals += [float(value) for value in losses]
        totals /= batches
        print(f"epoch {epoch + 1}/{epochs}: class loss {totals[0]:.4f}, box loss "
              f"{totals[1]:.4f}, {time.perf_counter() - epoch_started:.0f} s", flush=True)

    save(model, output)
    print(f"trained in {time.perf_counter() - started:.0f} s", flush=True)
    return model


def _train_step(trainer, optimizer):
    """A traced step of the loss: ``(images, classes, boxes, positive) -> (class loss,
    box loss)``, both per positive cell of the batch."""
    import tensorflow as tf

    @tf.function(reduce_retracing=True)
    def step(images, classes, boxes, positive):
        with tf.GradientTape() as tape:
            predicted, logits = trainer(images, training=True)
            count = tf.maximum(tf.reduce_sum(positive), 1.0)
            class_loss = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(
                labels=classes, logits=logits)) / count
            box_loss = tf.reduce_sum(positive * (1.0 - generalized_iou(predicted, boxes))) / count
            loss = class_loss + box_loss
        gradients = tape.gradient(loss, trainer.trainable_variables)
        optimizer.apply_gradients(zip(gradients, trainer.trainable_variables))
        return class_loss, box_loss

    return step


def generalized_iou(predicted, truth):
    """GIoU (Rezatofighi et al., 2019) of boxes ``(..., 4)``, elementwise: IoU minus the
    share of the smallest enclosing box that the union leaves empty; in (-1, 1]."""
    import tensorflow as tf

    def area(box):
        return tf.maximum(box[..., 2] - box[..., 0], 0.0) * tf.maximum(box[..., 3] - box[..., 1],
                                                                       0.0)

    low = tf.maximum(predicted[..., :2], truth[..., :2])
    high = tf.minimum(predicted[..., 2:], truth[..., 2:])
    inter = tf.reduce_prod(tf.maximum(high - low, 0.0), axis=-1)
    union = area(predicted) + area(truth) - inter
    enclosing = tf.reduce_prod(tf.maximum(predicted[..., 2:], truth[..., 2:])
                               - tf.minimum(predicted[..., :2], truth[..., :2]), axis=-1)
    epsilon = 1e-6
    return inter / (union + epsilon) - (enclosing - union) / (enclosing + epsilon)


def save(model, output: Path) -> None:
    """Save the weights in a fresh copy of :func:`build_model`, and the labels."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    inference = build_model()
    inference.set_weights(model.get_weights())
    inference.save(output)
    make_portable(output)
    labels_path = output.with_name(f"{output.stem}_labels.txt")
    labels_path.write_text("".join(f"{name}\n" for name in CLASS_NAMES), encoding="utf-8")
    print(f"wrote {output} ({output.stat().st_size / 1024:.0f} KiB) and {labels_path}")


def detection_scores(model, scenes, batch_size: int = 100) -> dict[str, float]:
    """:func:`~guidedbp.demo.detection.detection_recall` of the model's proposals on
    ``scenes`` (thresholds :data:`SCORE_THRESHOLD` and :data:`IOU_THRESHOLD`), plus,
    after per-class suppression of the proposals scoring at least the threshold, the
    detections per image that find no object of their class (``false_per_image``)."""
    outputs = model.predict(scenes.images.astype(np.float32), batch_size=batch_size,
                            verbose=0)
    truth_boxes, truth_labels = scene_boxes(scenes)
    scores = detection_recall(outputs["boxes"], outputs["scores"], truth_boxes, truth_labels,
                              SCORE_THRESHOLD, IOU_THRESHOLD)
    false = 0
    kept = detections(outputs["boxes"], outputs["scores"], threshold=SCORE_THRESHOLD)
    for image, found in enumerate(kept):
        for detected in found:
            mine = truth_labels[image] == detected.label
            overlaps = pairwise_iou(np.asarray([detected.box]), truth_boxes[image][mine])
            false += not (overlaps >= IOU_THRESHOLD).any()
    scores["false_per_image"] = false / len(kept)
    return scores


def evaluate(model, count: int = 500) -> None:
    """Print held-out detection figures, with a distractor and single shapes."""
    for distractors in (True, False):
        scores = detection_scores(model, make_scenes(count, HELDOUT_SEED, distractors))
        what = "with a distractor" if distractors else "single shapes"
        print(f"held-out, {what} ({count} images, seed {HELDOUT_SEED}, {scores['objects']} "
              f"objects): recall@{IOU_THRESHOLD} {scores['recall']:.4f}, mean IoU of the "
              f"found {scores['mean_iou']:.4f}, mean best IoU {scores['mean_best_iou']:.4f}, "
              f"false detections per image {scores['false_per_image']:.3f}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m guidedbp.demo.train_det", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT,
                        help=f"the .keras file to write (default: {DEFAULT_OUTPUT})")
    parser.add_argument("--train-images", type=int, default=6000)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--distractor-share", type=float, default=0.7)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--evaluate-only", action="store_true",
                        help="skip training; evaluate the model at --output")
    args = parser.parse_args(argv)
    if args.train_images < 1 or args.epochs < 1:
        parser.error("--train-images and --epochs must be positive")
    if not 0.0 <= args.distractor_share <= 1.0:
        parser.error("--distractor-share must lie in [0, 1]")
    if not args.learning_rate > 0:
        parser.error("--learning-rate must be positive")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()
    if args.evaluate_only:
        import keras

        import guidedbp.models.layers  # noqa: F401  (registers GridBoxes)

        model = keras.models.load_model(args.output)
    else:
        model = train(args.output, args.train_images, args.distractor_share, args.epochs,
                      learning_rate=args.learning_rate)
    evaluate(model)
    print(f"total wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
