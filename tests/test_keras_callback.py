"""guidedbp.keras.SaliencyCallback: saliency maps logged to TensorBoard while a model trains.

One tiny conv model trains for three epochs with two callbacks (every epoch, guided and
Grad-CAM of each image's top class, with PNGs; every second epoch, vanilla of a fixed
class) and a third callback that records the weights at each epoch end. The event files
are read back the way TensorBoard's Images tab reads them, and every logged picture is
compared, pixel for pixel, with the picture rendered from a fresh explainer on a copy of
the model holding that epoch's weights.

Run this file as a script to write a run worth a TensorBoard screenshot:
``.venv/bin/python tests/test_keras_callback.py /tmp/tb-demo`` (see :func:`write_demo_run`).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from guidedbp.engine.explainer import Explainer
from guidedbp.errors import ArgumentError
from guidedbp.keras import SaliencyCallback
from guidedbp.render import PANEL_MARGIN, render, render_column, render_panel

REPO = Path(__file__).resolve().parents[1]
SHAPE = (12, 12, 1)
NUM_CLASSES = 3
EPOCHS = 3
LOGGED = 3  # images the callbacks explain
LABELS = ("red", "green", "blue")
TILE = 96  # the panels' tile (the maps are 12 px: each pixel becomes an 8 px square)


def tiny_model() -> keras.Model:
    keras.utils.set_random_seed(7)
    return keras.Sequential([
        keras.Input(SHAPE),
        keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(NUM_CLASSES, activation="softmax"),
    ])


class WeightsAtEpochEnd(keras.callbacks.Callback):
    """The model's weights at each epoch end, by epoch index."""

    def __init__(self):
        super().__init__()
        self.weights: dict[int, list[np.ndarray]] = {}

    def on_epoch_end(self, epoch, logs=None):
        self.weights[epoch] = [np.array(w) for w in self.model.get_weights()]


@dataclass
class Run:
    root: Path
    model: keras.Model
    images: np.ndarray
    pictures: np.ndarray
    every: SaliencyCallback
    fixed: SaliencyCallback
    weights: dict


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    root = tmp_path_factory.mktemp("training")
    rng = np.random.default_rng(0)
    pictures = rng.integers(0, 256, (36, *SHAPE), dtype=np.uint8)
    images = pictures.astype(np.float32) / 255.0
    labels = np.argmax(images.reshape(36, NUM_CLASSES, -1).mean(axis=2), axis=1)
    model = tiny_model()
    model.compile(keras.optimizers.Adam(0.05), "sparse_categorical_crossentropy")
    every = SaliencyCallback(images[:LOGGED], ("guided", "gradcam"), log_dir=root / "logs",
                             pictures=pictures[:LOGGED], png_dir=root / "png", tile=TILE,
                             labels=LABELS)
    fixed = SaliencyCallback(images[:LOGGED], "vanilla", log_dir=root / "logs", run="fixed",
                             every_n_epochs=2, classes=1, tile=None)
    weights = WeightsAtEpochEnd()
    model.fit(images, labels, epochs=EPOCHS, batch_size=12, shuffle=False, verbose=0,
              callbacks=[every, fixed, weights])
    return Run(root, model, images[:LOGGED], pictures[:LOGGED], every, fixed, weights.weights)


def read_images(log_dir: Path) -> dict:
    """run -> tag -> [(step, width, height, png bytes)], read by the data provider that
    serves TensorBoard's Images tab (every step kept, not TensorBoard's default sample)."""
    from tensorboard import context
    from tensorboard.backend.event_processing.data_provider import MultiplexerDataProvider
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

    multiplexer = EventMultiplexer(tensor_size_guidance={"images": 0})
    multiplexer.AddRunsFromDirectory(str(log_dir))
    multiplexer.Reload()
    provider = MultiplexerDataProvider(multiplexer, str(log_dir))
    request = context.RequestContext()
    listed = provider.list_blob_sequences(request, experiment_id="", plugin_name="images")
    read = provider.read_blob_sequences(request, experiment_id="", plugin_name="images",
                                        downsample=1000)
    result = {}
    for run_name, tags in read.items():
        assert set(tags) == set(listed[run_name])
        for tag, datums in tags.items():
            rows = []
            for datum in datums:
                blobs = [provider.read_blob(request, blob_key=blob.blob_key)
                         for blob in datum.values]
                assert len(blobs) == 3, f"{tag}: one picture per step, got {len(blobs) - 2}"
                rows.append((datum.step, int(blobs[0]), int(blobs[1]), blobs[2]))
            result.setdefault(run_name, {})[tag] = rows
    return result


def decode(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)))


def expected_pictures(run: Run, epoch: int, methods, classes, renders, tile=TILE,
                      labels=LABELS) -> dict:
    """(method, index) -> the picture the API gives for the weights at ``epoch``: the
    panel of the render, titled with the method and captioned with the class and its
    probability, at ``tile`` pixels; with ``tile=None``, the bare render."""
    copy = keras.models.clone_model(run.model)
    copy.set_weights(run.weights[epoch])
    explainer = Explainer(copy, methods)
    explanation = explainer.explain(run.images, classes)
    layers = explainer.report.cam_layers  # a class activation map's caption names it
    conv = next(layer.name for layer in copy.layers if isinstance(layer, keras.layers.Conv2D))
    assert layers == ({"gradcam": conv} if "gradcam" in methods else {})
    pictures = {}
    for name in methods:
        for index, saliency in enumerate(explanation.by_method[name]):
            if tile is None:
                pictures[name, index] = render(renders[name], saliency, run.pictures[index])
                continue
            target = int(explanation.targets[index])
            named = f"{labels[target]} (class {target})" if labels else f"class {target}"
            caption = f"{named} p={explanation.probabilities[index]:.3f}"
            if name in layers:
                caption += f" · {name} at {layers[name]}"
            pictures[name, index] = render_panel(
                [render_column(renders[name], saliency, run.pictures[index], title=name)],
                caption=caption, tile=tile)
    return pictures


# -- what TensorBoard sees --------------------------------------------------------------------


def test_tensorboard_sees_one_image_per_method_image_and_epoch(run):
    logged = read_images(run.root / "logs")
    assert set(logged) == {"guidedbp", "fixed"}
    names = [f"image-{index:02d}" for index in range(LOGGED)]
    assert set(logged["guidedbp"]) == {f"{group}/{name}" for group in
                                       ("guided", "gradcam", "picture") for name in names}
    assert set(logged["fixed"]) == {f"vanilla/{name}" for name in names}
    for tag, rows in logged["guidedbp"].items():
        steps = [0] if tag.startswith("picture/") else [0, 1, 2]
        assert [row[0] for row in rows] == steps, tag
        if tag.startswith("picture/"):
            assert all(row[1:3] == (12, 12) for row in rows), tag
        else:  # a panel: the map at the tile's size, text above, colorbar below
            assert all(row[1] == TILE + 2 * PANEL_MARGIN and row[2] > TILE + 40
                       for row in rows), tag
    for rows in logged["fixed"].values():  # tile=None: the bare render
        assert all(row[1:3] == (12, 12) for row in rows)
    for rows in logged["fixed"].values():
        assert [row[0] for row in rows] == [0, 2]  # epochs 0, 2, ... as histogram_freq


def test_logged_pictures_are_the_maps_of_each_epochs_weights(run):
    logged = read_images(run.root / "logs")["guidedbp"]
    renders = {"guided": "color", "gradcam": "overlay"}
    for epoch in range(EPOCHS):
        expected = expected_pictures(run, epoch, ("guided", "gradcam"), None, renders)
        for (name, index), picture in expected.items():
            step, _, _, png = logged[f"{name}/image-{index:02d}"][epoch]
            assert step == epoch
            np.testing.assert_array_equal(decode(png), picture, err_msg=f"{name} {index} {epoch}")
    # The maps did change while training: each epoch's weights, not the first trace's.
    for name in renders:
        firsts = {decode(logged[f"{name}/image-00"][epoch][3]).tobytes()
                  for epoch in range(EPOCHS)}
        assert len(firsts) == EPOCHS, name
    for index in range(LOGGED):
        np.testing.assert_array_equal(decode(logged[f"picture/image-{index:02d}"][0][3]),
                                      run.pictures[index][..., 0])


def test_a_panel_shows_the_map_its_class_probability_and_colorbar(run):
    """Read as a person reads the card: the map fills a TILE-pixel square (each map pixel
    a sharp 8-pixel square of the bare render's colour), with the class name and
    probability above it and a colorbar below it."""
    logged = read_images(run.root / "logs")["guidedbp"]
    last = run.every.last  # the newest epoch's explanation
    for name, drawn in (("guided", "color"), ("gradcam", "overlay")):
        panel = decode(logged[f"{name}/image-00"][EPOCHS - 1][3])
        bare = render(drawn, last.by_method[name][0], run.pictures[0])
        assert bare.shape == (12, 12, 3)
        columns = slice(PANEL_MARGIN, PANEL_MARGIN + TILE)
        # Where the map sits: the rows whose 8-pixel squares are the bare render's pixels.
        tops = [top for top in range(panel.shape[0] - TILE + 1)
                if np.array_equal(panel[top + 4:top + TILE:8, PANEL_MARGIN + 4::8][:, :12],
                                  bare)]
        # Sampled 4 px into each square: the 8 offsets from 4 px above the map match.
        assert len(tops) == 8, f"{name}: the map is not in the panel once"
        top = tops[0] + 4
        tile = panel[top:top + TILE, columns]
        np.testing.assert_array_equal(tile, np.repeat(np.repeat(bare, 8, 0), 8, 1))
        assert np.any(panel[:top, columns] < 128), f"{name}: no text above the map"
        assert np.any(panel[top + TILE:, columns] < 128), f"{name}: no colorbar under it"
    target = int(last.targets[0])
    assert run.every.caption(last, 0) == (f"{LABELS[target]} (class {target}) "
                                          f"p={last.probabilities[0]:.3f}")


def test_the_panel_render_draws_its_own_panel(tmp_path):
    from types import SimpleNamespace

    saliency = np.random.default_rng(0).normal(size=(1, 12, 12, 1)).astype(np.float32)
    pictures = np.full((1, 12, 12, 1), 100, np.uint8)
    explanation = SimpleNamespace(by_method={"guided": saliency}, targets=np.array([2]),
                                  probabilities=np.array([0.25]))
    callback = SaliencyCallback(np.zeros((1, *SHAPE), np.float32), "guided", log_dir=tmp_path,
                                render="panel", pictures=pictures, tile=64,
                                labels=np.array(["a", "b", "c"]))
    np.testing.assert_array_equal(
        callback.draw(explanation)["guided", 0],
        render("panel", saliency[0], pictures[0], caption="guided: c (class 2) p=0.250",
               tile=64))


def test_fixed_class_every_second_epoch(run):
    logged = read_images(run.root / "logs")["fixed"]
    assert run.fixed.last.targets.tolist() == [1] * LOGGED
    for epoch in (0, 2):
        expected = expected_pictures(run, epoch, ("vanilla",), 1, {"vanilla": "color"},
                                     tile=None)
        for (_, index), picture in expected.items():
            row = logged[f"vanilla/image-{index:02d}"][epoch // 2]
            assert row[0] == epoch
            np.testing.assert_array_equal(decode(row[3]), picture)


def test_png_files_are_the_logged_images(run):
    logged = read_images(run.root / "logs")["guidedbp"]
    folder = run.root / "png"
    assert sorted(os.listdir(folder)) == ["step-0000", "step-0001", "step-0002"]
    for epoch in range(EPOCHS):
        files = sorted(os.listdir(folder / f"step-{epoch:04d}"))
        assert files == sorted(f"image-{index:02d}.{name}" for index in range(LOGGED)
                               for name in ("guided.color.png", "gradcam.overlay.png"))
        for name in files:
            stem, method, _, _ = name.split(".")
            png = (folder / f"step-{epoch:04d}" / name).read_bytes()
            assert png == logged[f"{method}/{stem}"][epoch][3]


def test_one_trace_for_every_epoch(run):
    assert run.every.explainer.trace_count == 1
    assert run.fixed.explainer.trace_count == 1
    assert run.every.explainer.model is run.model


def test_log_outside_fit_uses_the_current_weights(run, tmp_path):
    callback = SaliencyCallback(run.images, "guided", log_dir=tmp_path, run=None)
    with pytest.raises(ArgumentError, match="no model yet"):
        callback.log(0)
    callback.set_model(run.model)
    callback.log(10)
    callback.close()
    # The default tile (224) and no labels: "class 2 p=0.412".
    expected = expected_pictures(run, EPOCHS - 1, ("guided",), None, {"guided": "color"},
                                 tile=224, labels=None)
    logged = read_images(tmp_path)["."]
    assert [row[0] for row in logged["guided/image-01"]] == [10]
    np.testing.assert_array_equal(decode(logged["guided/image-01"][0][3]),
                                  expected["guided", 1])


def test_pictures_are_written_in_the_background_and_failures_surface(run, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_bytes(b"a file where png_dir's step folders should go")
    callback = SaliencyCallback(run.images, "guided", log_dir=None, png_dir=blocker)
    callback.set_model(run.model)
    explanation = callback.log(0)  # returns once the maps are computed
    assert callback.last is explanation
    with pytest.raises(OSError):
        callback.close()  # the background write failed: the end of training says so
    assert blocker.read_bytes() == b"a file where png_dir's step folders should go"
    # A later log() waits for the previous step's pictures before it starts the next.
    folder = tmp_path / "pngs"
    callback = SaliencyCallback(run.images, "guided", log_dir=None, png_dir=folder)
    callback.set_model(run.model)
    callback.log(0)
    callback.log(1)
    callback.close()
    assert sorted(p.name for p in folder.iterdir()) == ["step-0000", "step-0001"]


def test_summaries_match_tensorboards_own_image_summary(tmp_path):
    """The hand-written format is what ``tf.summary.image`` (tensorboard's) writes."""
    from guidedbp.keras.summaries import write_image

    picture = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3) * 14
    for run_name, write in {
        "ours": lambda: write_image("map", picture, 4, "described"),
        "theirs": lambda: tf.summary.image("map", picture[None], step=4),
    }.items():
        with tf.summary.create_file_writer(str(tmp_path / run_name)).as_default():
            write()
    logged = read_images(tmp_path)
    ours, theirs = logged["ours"]["map"], logged["theirs"]["map"]
    assert [row[:3] for row in ours] == [row[:3] for row in theirs] == [(4, 3, 2)]
    np.testing.assert_array_equal(decode(ours[0][3]), decode(theirs[0][3]))


def test_works_without_tensorboard_installed(tmp_path):
    """Training and logging never import tensorboard; TensorBoard still reads the result."""
    script = textwrap.dedent(f"""
        import json, sys
        sys.modules["tensorboard"] = None  # import tensorboard now fails
        import numpy as np, keras
        from guidedbp.keras import SaliencyCallback
        model = keras.Sequential([
            keras.Input((12, 12, 1)), keras.layers.Conv2D(2, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        images = np.random.default_rng(1).random((6, 12, 12, 1), np.float32)
        callback = SaliencyCallback(images[:2], "guided", log_dir={str(tmp_path)!r})
        model.fit(images, np.arange(6) % 3, epochs=2, verbose=0, callbacks=[callback])
        model.fit(images, np.arange(6) % 3, epochs=3, initial_epoch=2, verbose=0,
                  callbacks=[callback])
        print(json.dumps(callback.explainer.trace_count))
    """)
    process = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                             text=True, timeout=120,
                             env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert process.returncode == 0, process.stderr
    assert json.loads(process.stdout.splitlines()[-1]) == 1  # one trace over two fits
    logged = read_images(tmp_path)["guidedbp"]
    assert [row[0] for row in logged["guided/image-00"]] == [0, 1, 2]


# -- arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize("arguments, words", [
    ({"images": np.zeros((12, 12, 1))}, "(12, 12, 1) (add a batch axis"),
    ({"images": np.zeros((0, 12, 12, 1))}, "images is empty"),
    ({"methods": "guided,sparkles"}, "'sparkles'"),
    ({"every_n_epochs": 0}, "every_n_epochs=0"),
    ({"every_n_epochs": 1.5}, "every_n_epochs=1.5"),
    ({"classes": [0, 1]}, "2 classes for 3 images"),
    ({"classes": -1}, "classes=-1"),
    ({"classes": "cat"}, "classes='cat'"),
    ({"render": "sketch"}, "render='sketch'"),
    ({"render": "overlay"}, "give pictures="),
    ({"pictures": np.zeros((3, 12, 12), np.float32)}, "dtype float32"),
    ({"pictures": np.zeros((2, 12, 12), np.uint8)}, "got (2, 12, 12)"),
    ({"cmap": "rainbow"}, "cmap='rainbow'"),
    ({"tile": 10}, "tile=10"),
    ({"tile": 2.5}, "tile=2.5"),
    ({"labels": "red"}, "labels='red'"),
    ({"log_dir": None}, "nothing to write"),
    ({"smooth": -2}, "smooth"),
    ({"sparkle": 1}, "'sparkle'"),
])
def test_bad_arguments_name_the_value(tmp_path, arguments, words):
    arguments = {"images": np.zeros((3, *SHAPE), np.float32), "log_dir": tmp_path, **arguments}
    with pytest.raises(ArgumentError) as caught:
        SaliencyCallback(**arguments)
    assert words in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_a_class_out_of_range_fails_before_the_first_epoch(tmp_path):
    model = tiny_model()
    model.compile("adam", "sparse_categorical_crossentropy")
    images = np.zeros((2, *SHAPE), np.float32)
    weights = WeightsAtEpochEnd()
    callback = SaliencyCallback(images, classes=[0, 3], log_dir=tmp_path)
    with pytest.raises(ArgumentError, match=r"class 3 is out of range: the model has 3 classes"):
        model.fit(images, np.zeros(2), epochs=1, verbose=0, callbacks=[callback, weights])
    assert weights.weights == {}
    assert callback.explainer is None  # the next fit checks again


def test_default_renders(tmp_path):
    images = np.zeros((2, *SHAPE), np.float32)
    plain = SaliencyCallback(images, "guided,gradcam", log_dir=tmp_path)
    drawn = SaliencyCallback(images, "guided,gradcam", log_dir=tmp_path,
                             pictures=np.zeros((2, 12, 12), np.uint8))
    chosen = SaliencyCallback(images, "guided,gradcam", log_dir=tmp_path, render="gray")
    assert plain.renders == {"guided": "color", "gradcam": "heatmap"}
    assert drawn.renders == {"guided": "color", "gradcam": "overlay"}
    assert chosen.renders == {"guided": "gray", "gradcam": "gray"}
    assert plain.log_dir == os.path.join(tmp_path, "guidedbp")


def test_module_examples():
    import doctest

    import guidedbp.keras

    result = doctest.testmod(guidedbp.keras, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


# -- a run for a screenshot ------------------------------------------------------------------


def write_demo_run(log_dir: str = "/tmp/tb-demo", epochs: int = 15, count: int = 4000) -> None:
    """Train the demo shapes CNN from scratch with :class:`SaliencyCallback` and Keras'
    TensorBoard callback into ``log_dir``; then ``tensorboard --logdir LOG_DIR
    --samples_per_plugin images=100`` shows loss curves (runs ``train``, ``validation``)
    and, in the Images tab, run ``guidedbp``: one card per method and sample picture,
    with a step slider over the epochs. A few minutes on two cores.
    """
    from guidedbp.demo import CLASS_NAMES, make_shapes
    from guidedbp.demo.train import build_model

    keras.utils.set_random_seed(0)
    images, _, labels = make_shapes(count, seed=0)
    held_out, _, held_out_labels = make_shapes(200, seed=1)
    samples = np.stack([np.asarray(Image.open(REPO / "sample_images" / "shapes" /
                                              f"{name}_0.png").convert("RGB"))
                        for name in CLASS_NAMES])
    model = build_model()
    model.compile(keras.optimizers.Adam(2e-3), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    saliency = SaliencyCallback(samples.astype(np.float32), ("guided", "gradcam"),
                                log_dir=log_dir, pictures=samples,
                                png_dir=os.path.join(log_dir, "png"))
    model.fit(images.astype(np.float32), labels, epochs=epochs, batch_size=32, verbose=2,
              validation_data=(held_out.astype(np.float32), held_out_labels),
              callbacks=[saliency, keras.callbacks.TensorBoard(log_dir)])
    print(f"wrote {log_dir}: tensorboard --logdir {log_dir} --samples_per_plugin images=100")


if __name__ == "__main__":
    write_demo_run(*sys.argv[1:2])
