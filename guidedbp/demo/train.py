"""Train a bundled shapes classifier: ``python -m guidedbp.demo.train [--activation silu]``.

A small ReLU CNN (four conv/ReLU/max-pool blocks, one more conv, global average
pooling, a softmax dense head) on :func:`guidedbp.demo.shapes.make_shapes` images, a
tenth of them with a distractor (labelled by their target). It takes raw 0..255
pixels: a ``Rescaling(1/127.5, offset=-1)`` layer inside maps them to [-1, 1], so the
model needs no preprocessing outside it. Shape classes do not change under flips and
quarter turns, so each epoch shows every image under a random one of the eight.

``--activation silu`` trains its twin, the bundled ``demo-silu`` model
(``data/shapes_silu.keras``): SiLU in place of ReLU in the five convs and nothing else
changed (the same data, seeds, epochs and learning-rate schedule).

Seeds are fixed and TensorFlow's op determinism is on, so on one machine the same
command gives the same weights (TensorFlow promises no more across CPUs and builds).
The saved ``.keras`` file holds the model without optimizer state; the class names go
next to it, one per line, in ``<stem>_labels.txt``.

After training the script prints the held-out accuracy and the guided-backprop
pointing game (Zhang et al., 2016) on held-out shapes, with and without distractors.

>>> from guidedbp.demo.train import build_model
>>> build_model().output_shape
(None, 6)
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from guidedbp.demo.metrics import energy_inside, pointing_game
from guidedbp.demo.shapes import CLASS_NAMES, IMAGE_SIZE, make_scenes, make_shapes

if TYPE_CHECKING:
    import keras

#: Default output, inside the package so that it ships as package data.
DEFAULT_OUTPUT = Path(__file__).parent / "data" / "shapes.keras"

#: The conv activations :func:`build_model` takes, with each one's default output and
#: model name. The SiLU model is the same network, data, seeds and schedule with SiLU
#: in place of ReLU in the convs.
ACTIVATIONS = ("relu", "silu")
DEFAULT_OUTPUTS = {"relu": DEFAULT_OUTPUT, "silu": DEFAULT_OUTPUT.with_name("shapes_silu.keras")}
MODEL_NAMES = {"relu": "shapes_cnn", "silu": "shapes_silu_cnn"}

#: Seeds of the training images and of the held-out images the script reports on.
#: The training images with a distractor use ``TRAIN_SEED + DISTRACTOR_SEED_OFFSET``
#: (far from the small seeds people evaluate on: ``guidedbp evaluate --shapes`` defaults
#: to 1000), the 500 images monitored during training ``HELDOUT_SEED + 1000``; the tests
#: use 12345. Evaluating on a training seed, with or without distractors, measures
#: training data: both modes draw the same labels and backgrounds from a seed.
TRAIN_SEED = 0
DISTRACTOR_SEED_OFFSET = 900_001
HELDOUT_SEED = 1
LOCALISATION_SEED = 2


def build_model(num_classes: int = len(CLASS_NAMES), activation: str = "relu") -> keras.Model:
    """The demo CNN, untrained: raw 0..255 RGB ``(96, 96, 3)`` in, class probabilities out.

    ``activation`` (one of :data:`ACTIVATIONS`) is the five convs' activation; nothing
    else changes with it but the model's name.
    """
    import keras
    from keras import layers

    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, not {activation!r}")

    inputs = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3), name="image")
    # To [-1, 1]: centred inputs train faster than [0, 1] without batch norm.
    x = layers.Rescaling(1.0 / 127.5, offset=-1.0, name="rescale")(inputs)
    conv = {"kernel_size": 3, "padding": "same", "activation": activation,
            "kernel_initializer": "he_normal"}
    for block, filters in enumerate((16, 32, 64, 64), start=1):
        x = layers.Conv2D(filters, name=f"conv{block}", **conv)(x)
        x = layers.MaxPooling2D(name=f"pool{block}")(x)
    # One more conv at 6x6 widens the receptive field to the largest shapes (60 px).
    x = layers.Conv2D(64, name="conv5", **conv)(x)
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    outputs = layers.Dense(num_classes, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs, name=MODEL_NAMES[activation])


def dihedral(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each ``(N, H, W, C)`` square image under a random flip and quarter turn."""
    out = np.empty_like(images)
    choices = rng.integers(0, 8, len(images))
    for k in range(8):
        chosen = choices == k
        view = np.rot90(images[chosen], k % 4, axes=(1, 2))
        out[chosen] = view[:, :, ::-1] if k >= 4 else view
    return out


def train(
    output: Path,
    train_images: int = 12000,
    distractor_share: float = 0.1,
    epochs: int = 12,
    batch_size: int = 32,
    seed: int = TRAIN_SEED,
    activation: str = "relu",
) -> keras.Model:
    """Train the demo model and save it to ``output`` with its labels file beside it.

    Args:
        output: Path of the ``.keras`` file to write.
        train_images: Number of training images.
        distractor_share: Share of training images that also hold a distractor
            (labelled by their target), in [0, 1].
        epochs: Passes over the training images.
        batch_size: Images per optimisation step.
        seed: Seed of the training images, the initial weights and the shuffling.
        activation: The convs' activation, one of :data:`ACTIVATIONS`.

    Returns:
        The trained model (with its optimizer).
    """
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    tf.config.experimental.enable_op_determinism()

    started = time.perf_counter()
    with_distractors = round(train_images * distractor_share)
    images, _, labels = make_shapes(train_images - with_distractors, seed=seed)
    if with_distractors:
        # A different seed, so these are not the plain images with a shape added.
        extra_images, _, extra_labels = make_shapes(
            with_distractors, seed=seed + DISTRACTOR_SEED_OFFSET, distractors=True
        )
        images = np.concatenate([images, extra_images])
        labels = np.concatenate([labels, extra_labels])
    print(f"generated {len(images)} training images ({with_distractors} with a distractor) "
          f"in {time.perf_counter() - started:.0f} s", flush=True)

    model = build_model(activation=activation)
    steps = epochs * -(-len(images) // batch_size)
    schedule = keras.optimizers.schedules.CosineDecay(1e-3, decay_steps=steps, alpha=0.02)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    monitor_images, _, monitor_labels = make_shapes(500, seed=HELDOUT_SEED + 1000)
    rng = np.random.default_rng(seed)
    for epoch in range(epochs):
        model.fit(dihedral(images, rng), labels, batch_size=batch_size, epochs=epoch + 1,
                  initial_epoch=epoch, shuffle=True, verbose=2,
                  validation_data=(monitor_images, monitor_labels))

    save(model, output, activation)
    print(f"trained in {time.perf_counter() - started:.0f} s", flush=True)
    return model


def save(model, output: Path, activation: str = "relu") -> None:
    """Save the weights in a fresh, uncompiled copy (no optimizer state), and the labels."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    inference = build_model(activation=activation)
    inference.set_weights(model.get_weights())
    inference.save(output)
    make_portable(output)
    labels_path = output.with_name(f"{output.stem}_labels.txt")
    labels_path.write_text("".join(f"{name}\n" for name in CLASS_NAMES), encoding="utf-8")
    print(f"wrote {output} ({output.stat().st_size / 1024:.0f} KiB) and {labels_path}")


#: Config keys newer Keras writes that older Keras 3 refuses, with the value that means
#: "the default" (None: any value). Initializers' axes (Keras 3.15) do nothing for a
#: trained model, whose weights are loaded, and a null quantization config (3.13) is no
#: quantization.
NEWER_KEYS = {"input_axes": None, "output_axes": None, "quantization_config": None}


def make_portable(path: Path) -> int:
    """Drop :data:`NEWER_KEYS` from a ``.keras`` file's config, so that every Keras 3 from
    3.10 on loads it (the weights are untouched); returns how many were dropped.

    The archive is rewritten in place: the same members, in the same order.
    """
    import json
    import zipfile

    path = Path(path)
    with zipfile.ZipFile(path) as archive:
        members = [(info, archive.read(info.filename)) for info in archive.infolist()]
    dropped = 0

    def strip(node):
        nonlocal dropped
        if isinstance(node, dict):
            for key in [k for k in node if k in NEWER_KEYS and
                        (k != "quantization_config" or node[k] is None)]:
                del node[key]
                dropped += 1
            for value in node.values():
                strip(value)
        elif isinstance(node, list):
            for value in node:
                strip(value)

    rewritten = path.with_name(f".{path.name}.portable")
    with zipfile.ZipFile(rewritten, "w") as archive:
        for info, data in members:
            if info.filename == "config.json":
                config = json.loads(data)
                strip(config)
                data = json.dumps(config).encode("utf-8")
            archive.writestr(info, data)
    os.replace(rewritten, path)
    return dropped


def accuracy(model, images: np.ndarray, labels: np.ndarray, batch_size: int = 100) -> float:
    """Share of ``images`` whose top class is their label."""
    probabilities = model.predict(images.astype(np.float32), batch_size=batch_size, verbose=0)
    return float(np.mean(probabilities.argmax(axis=1) == labels))


def localisation(model, count: int, seed: int, distractors: bool) -> dict[str, float]:
    """Guided-backprop pointing game and energy share for the true class on held-out shapes.

    Returns the hit rate against the target's mask (tolerance 15 px), the mean share of
    the saliency inside the target's mask, and with distractors the hit rate against
    the distractor's mask.
    """
    from guidedbp.engine.explainer import Explainer

    scenes = make_scenes(count, seed=seed, distractors=distractors)
    maps = Explainer(model, method="guided")(scenes.images.astype(np.float32),
                                             target=scenes.labels)
    magnitude = np.abs(maps).max(axis=-1)
    report = {
        "pointing_target": float(pointing_game(magnitude, scenes.masks).mean()),
        "energy_target": float(energy_inside(magnitude, scenes.masks).mean()),
    }
    if distractors:
        report["pointing_distractor"] = float(
            pointing_game(magnitude, scenes.distractor_masks).mean()
        )
    return report


def evaluate(model, count: int = 2000, localisation_count: int = 500) -> None:
    """Print held-out accuracy and localisation figures."""
    images, _, labels = make_shapes(count, seed=HELDOUT_SEED)
    print(f"held-out accuracy ({count} shapes, seed {HELDOUT_SEED}): "
          f"{accuracy(model, images, labels):.4f}")
    images, _, labels = make_shapes(count, seed=HELDOUT_SEED, distractors=True)
    print(f"held-out accuracy with a distractor ({count} shapes, seed {HELDOUT_SEED}): "
          f"{accuracy(model, images, labels):.4f}")
    for distractors in (False, True):
        figures = localisation(model, localisation_count, LOCALISATION_SEED, distractors)
        what = "with a distractor" if distractors else "single object"
        print(f"guided backprop, {what} ({localisation_count} shapes, seed "
              f"{LOCALISATION_SEED}): " + ", ".join(f"{k} {v:.3f}" for k, v in figures.items()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m guidedbp.demo.train", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--activation", choices=ACTIVATIONS, default="relu",
                        help="the convs' activation (default: relu)")
    parser.add_argument("--output", type=Path, default=None,
                        help=f"the .keras file to write (default: {DEFAULT_OUTPUT} for "
                             f"relu, {DEFAULT_OUTPUTS['silu']} for silu)")
    parser.add_argument("--train-images", type=int, default=12000)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--distractor-share", type=float, default=0.1)
    parser.add_argument("--evaluate-only", action="store_true",
                        help="skip training; evaluate the model at --output")
    args = parser.parse_args(argv)
    if args.output is None:
        args.output = DEFAULT_OUTPUTS[args.activation]
    if args.train_images < 1 or args.epochs < 1:
        parser.error("--train-images and --epochs must be positive")
    if not 0.0 <= args.distractor_share <= 1.0:
        parser.error("--distractor-share must lie in [0, 1]")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()
    if args.evaluate_only:
        import keras

        model = keras.models.load_model(args.output)
    else:
        model = train(args.output, args.train_images, args.distractor_share, args.epochs,
                      activation=args.activation)
    evaluate(model)
    print(f"total wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
