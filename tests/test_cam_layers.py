"""Every class activation map says which layer it used: the explainer's report, ``inspect``
(text and JSON), each manifest record and the captions, named as ``layer=`` / ``--layer``
takes it; and the layer named is the layer whose map it is (checked against a reference
computed from Keras' own layer outputs)."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from guidedbp import Explainer
from guidedbp.pipeline import writing

from .helpers import run_cli
from .models import _set, cam_cnn

RNG = np.random.default_rng(34)
IMAGES = RNG.uniform(0.0, 1.0, (2, 8, 8, 1)).astype(np.float32)


def seeded(*layers) -> None:
    """Weights from a seeded generator, biases positive (few dead ReLUs)."""
    for layer in layers:
        kernel, bias = layer.get_weights()
        _set(layer, RNG.normal(0.0, 0.7, kernel.shape), RNG.uniform(0.1, 0.3, bias.shape))


def collide() -> keras.Model:
    """8x8x1 -> Conv2D "conv" -> Conv2D "conv_1" -> GAP -> Dense(2): the second layer's
    name is the one TensorFlow gives the first's name scope when it is traced."""
    first = keras.layers.Conv2D(3, 3, activation="relu", name="conv")
    second = keras.layers.Conv2D(3, 3, activation="relu", name="conv_1")
    dense = keras.layers.Dense(2, name="dense")
    inputs = keras.Input((8, 8, 1))
    model = keras.Model(inputs, dense(keras.layers.GlobalAveragePooling2D()(
        second(first(inputs)))), name="collide")
    seeded(first, second, dense)
    return model


def twins() -> keras.Model:
    """8x8x1 -> sub-model "a" (Conv2D "conv") -> sub-model "b" (Conv2D "conv") -> GAP ->
    Dense(2): two layers of one name, in two nested models."""
    a = keras.Sequential([keras.Input((8, 8, 1)),
                          keras.layers.Conv2D(3, 3, activation="relu", name="conv")], name="a")
    b = keras.Sequential([keras.Input((6, 6, 3)),
                          keras.layers.Conv2D(3, 3, activation="relu", name="conv")], name="b")
    dense = keras.layers.Dense(2, name="dense")
    inputs = keras.Input((8, 8, 1))
    model = keras.Model(inputs, dense(keras.layers.GlobalAveragePooling2D()(b(a(inputs)))),
                        name="twins")
    seeded(a.layers[0], b.layers[0], dense)
    return model


def gradcam_reference(forward, images, target: int) -> np.ndarray:
    """Grad-CAM from ``forward``: images -> (the layer's output A, logits), in eager Keras:
    relu(sum_k mean_ab(d logit / d A_k) A_k), bilinear to the input size."""
    images = tf.constant(images)
    with tf.GradientTape() as tape:
        features, logits = forward(images)
        score = tf.reduce_sum(logits[:, target])
    gradient = tape.gradient(score, features)
    weights = tf.reduce_mean(gradient, axis=(1, 2), keepdims=True)
    cam = tf.nn.relu(tf.reduce_sum(weights * features, axis=-1, keepdims=True))
    return tf.image.resize(cam, images.shape[1:3], method="bilinear").numpy()


def at_layer(model: keras.Model, name: str):
    """``forward`` of a flat model's layer ``name``, by Keras' own graph of it."""
    return keras.Model(model.inputs, [model.get_layer(name).output, model.output])


@pytest.fixture(scope="module")
def flat():
    return collide()


@pytest.fixture(scope="module")
def nested():
    return twins()


# -- the report ----------------------------------------------------------------------------


def test_the_report_names_the_default_layer_and_the_one_chosen(flat):
    report = Explainer(flat, "gradcam").report
    assert report.cam_layers == {"gradcam": "conv_1"}
    assert report.as_dict()["cam_layers"] == {"gradcam": "conv_1"}
    assert str(report).splitlines()[-1] == "CAM layer: conv_1 (gradcam)"
    chosen = Explainer(flat, "gradcam", layer="conv").report
    assert chosen.cam_layers == {"gradcam": "conv"}
    assert str(chosen).splitlines()[-1] == "CAM layer: conv (gradcam)"


def test_the_layer_named_is_the_layer_whose_map_it_is(flat):
    # layer="conv_1" was read as the scope "conv_1", which the layer "conv" opens: the
    # map of the wrong layer, said nowhere.
    expected = {name: gradcam_reference(at_layer(flat, name), IMAGES, 0)
                for name in ("conv", "conv_1")}
    assert np.abs(expected["conv"] - expected["conv_1"]).max() > 1e-2  # the test can tell
    for layer, name in ((None, "conv_1"), ("conv_1", "conv_1"), ("conv", "conv")):
        explainer = Explainer(flat, "gradcam", layer=layer)
        np.testing.assert_allclose(explainer(IMAGES, 0), expected[name], atol=1e-5,
                                   err_msg=str(layer))
        assert explainer.report.cam_layers == {"gradcam": name}


def test_every_class_activation_map_is_listed_and_no_other_method(flat):
    report = Explainer(flat, ("guided", "gradcam++", "scorecam", "occlusion"),
                       layer="conv").report
    assert report.cam_layers == {"gradcam++": "conv", "scorecam": "conv"}
    assert "CAM layer: conv (gradcam++, scorecam)" in str(report)
    plain = Explainer(flat, ("guided", "occlusion")).report
    assert plain.cam_layers == {} and plain.as_dict()["cam_layers"] == {}
    assert "CAM layer" not in str(plain)
    # Score-CAM alone reads its feature map from the traced pass too.
    assert Explainer(flat, "scorecam").report.cam_layers == {"scorecam": "conv_1"}


def test_nested_layers_are_named_as_layer_takes_them(nested):
    a, b = nested.layers[1], nested.layers[2]

    def through(first: bool):
        def forward(images):
            features = a(images) if first else b(a(images))
            after = b(features) if first else features
            return features, nested.layers[-1](nested.layers[-2](after))
        return forward

    expected_a = gradcam_reference(through(True), IMAGES, 1)
    expected_b = gradcam_reference(through(False), IMAGES, 1)
    assert np.abs(expected_a - expected_b).max() > 1e-2
    default = Explainer(nested, "gradcam")
    # "conv" alone is the first layer of that name, a's: b's takes its model's name.
    assert default.report.cam_layers == {"gradcam": "b/conv"}
    np.testing.assert_allclose(default(IMAGES, 1), expected_b, atol=1e-5)
    for layer in ("conv", "a/conv"):
        explainer = Explainer(nested, "gradcam", layer=layer)
        assert explainer.report.cam_layers == {"gradcam": "conv"}, layer
        np.testing.assert_allclose(explainer(IMAGES, 1), expected_a, atol=1e-5)
    # The name reported leads back to the same layer.
    again = Explainer(nested, "gradcam", layer="b/conv")
    assert again.report.cam_layers == {"gradcam": "b/conv"}
    assert again.report.layer == default.report.layer


def test_a_layer_inside_one_nested_model_goes_by_its_own_name():
    model = cam_cnn(nested=True)  # "features" holds "conv" and "pool"
    assert Explainer(model, "gradcam").report.cam_layers == {"gradcam": "pool"}
    assert Explainer(model, "layercam", layer="conv").report.cam_layers == {"layercam": "conv"}
    assert Explainer(model, "gradcam", layer="features/conv").report.cam_layers == {
        "gradcam": "conv"}


def test_a_model_of_free_size_reports_the_layer_of_each_size():
    inputs = keras.Input((None, None, 1))
    conv = keras.layers.Conv2D(2, 3, activation="relu", name="features")
    model = keras.Model(inputs, keras.layers.Dense(2)(
        keras.layers.GlobalAveragePooling2D()(conv(inputs))))
    explainer = Explainer(model, "gradcam")
    assert explainer.report_for((8, 8, 1)).cam_layers == {"gradcam": "features"}
    assert explainer.report_for((12, 10, 1)).cam_layers == {"gradcam": "features"}


# -- inspect, the manifest and the captions ---------------------------------------------------


@pytest.fixture(scope="module")
def files(tmp_path_factory, flat):
    from PIL import Image

    folder = tmp_path_factory.mktemp("cam_layers")
    flat.save(folder / "collide.keras")
    flat.export(str(folder / "collide_saved"), verbose=False)
    mlp = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(),
                            keras.layers.Dense(2)])
    mlp.save(folder / "mlp.keras")
    (folder / "images").mkdir()
    for index, image in enumerate(IMAGES):
        Image.fromarray(np.uint8(image[:, :, 0] * 255)).save(folder / "images" / f"{index}.png")
    return folder


def inspected(*args) -> tuple[dict, dict]:
    """``inspect ARGS`` as JSON, and its text's ``key  value`` lines."""
    info = json.loads(run_cli("inspect", *args, "--json", code=0).stdout)
    text = run_cli("inspect", *args, code=0).stdout
    lines = {line[:11].strip(): line[12:] for line in text.splitlines()}
    return info, lines


def test_inspect_shows_the_default_layer_and_checks_a_chosen_one(files):
    info, lines = inspected(files / "collide.keras")
    assert info["cam_layer"] == "conv_1" and lines["cam layer"] == "conv_1"
    assert "cam_layer_error" not in info
    info, lines = inspected(files / "collide.keras", "--layer", "conv")
    assert info["cam_layer"] == "conv" and lines["cam layer"] == "conv"
    result = run_cli("inspect", files / "collide.keras", "--layer", "conv9", code=2)
    assert result.stderr.startswith("Error: no layer named 'conv9' in the model's graph "
                                    "(did you mean 'conv'")
    assert len(result.stderr.splitlines()) == 1


def test_a_savedmodel_names_each_layer_as_its_keras_file_does(files, flat):
    """Exporting made every layer's scope unique ("conv" became "conv_1", the layer
    "conv_1" "conv_1_2"): the SavedModel's layers were named by those scopes, and
    layer="conv_1" read the layer "conv". Each now goes by its own name, and is the layer
    whose map it is."""
    saved = str(files / "collide_saved")
    expected = {name: gradcam_reference(at_layer(flat, name), IMAGES, 0)
                for name in ("conv", "conv_1")}
    for layer, name in ((None, "conv_1"), ("conv_1", "conv_1"), ("conv", "conv")):
        explainer = Explainer(saved, "gradcam", layer=layer)
        np.testing.assert_allclose(explainer(IMAGES, 0), expected[name], atol=1e-5,
                                   err_msg=str(layer))
        assert explainer.report.cam_layers == {"gradcam": name}
    info, lines = inspected(saved)
    assert info["cam_layer"] == "conv_1" and lines["cam layer"] == "conv_1"
    result = run_cli("inspect", saved, "--layer", "conv9", code=2)
    assert "layers with a 4-D output: conv, conv_1" in result.stderr


def test_inspect_says_why_a_model_has_no_class_activation_map_layer(files):
    info, lines = inspected(files / "mlp.keras")
    assert info["cam_layer"] is None
    assert info["cam_layer_error"].startswith("the model has no 4-D feature map")
    assert lines["cam layer"] == f"none: {info['cam_layer_error']}"


class Spy:
    """Calls the real function, and keeps the captions it was given."""

    def __init__(self, function, caption_at: int):
        self.function, self.caption_at, self.captions = function, caption_at, []

    def __call__(self, *args, **kwargs):
        self.captions.append(kwargs["caption"] if "caption" in kwargs
                             else args[self.caption_at])
        return self.function(*args, **kwargs)


def explained(files, tmp_path, monkeypatch, *args) -> tuple[list[dict], list[str], list[str]]:
    """``explain`` the two images: (the records, the panels' captions, the single renders')."""
    panels = Spy(writing.comparison_panel, 2)
    renders = Spy(writing.render, 3)
    monkeypatch.setattr(writing, "comparison_panel", panels)
    monkeypatch.setattr(writing, "render", renders)
    run_cli("explain", files / "collide.keras", files / "images", "-o", tmp_path / "out", *args,
            code=0)
    records = [json.loads(line)
               for line in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    return records, panels.captions, renders.captions


def test_records_and_captions_name_the_default_layer(files, tmp_path, monkeypatch):
    records, panels, renders = explained(files, tmp_path, monkeypatch, "--method",
                                         "guided,gradcam,scorecam", "--render", "panel,overlay")
    assert [record["layers"] for record in records] == [
        {"gradcam": "conv_1", "scorecam": "conv_1"}] * 2
    titles = [f"class {r['class']} p={r['score']:.3f}" for r in records]
    assert sorted(panels) == sorted(f"{title} · gradcam, scorecam at conv_1" for title in titles)
    assert sorted(renders) == sorted(caption for title in titles for caption in (
        title, f"gradcam at conv_1: {title}", f"scorecam at conv_1: {title}"))


def test_records_captions_and_figures_name_the_chosen_layer(files, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from guidedbp import figures

    drawn = Spy(figures.draw, 2)
    monkeypatch.setattr(figures, "draw", drawn)
    records, panels, renders = explained(files, tmp_path, monkeypatch, "--method", "gradcam",
                                         "--layer", "conv", "--render", "panel",
                                         "--figure", "png")
    assert [record["layers"] for record in records] == [{"gradcam": "conv"}] * 2
    assert panels == []  # one method: its panel is a single render
    titles = [f"class {r['class']} p={r['score']:.3f}" for r in records]
    assert sorted(renders) == sorted(f"gradcam at conv: {title}" for title in titles)
    assert sorted(drawn.captions) == sorted(f"{title} · gradcam at conv" for title in titles)


def test_a_run_without_class_activation_maps_records_no_layer(files, tmp_path, monkeypatch):
    records, _, renders = explained(files, tmp_path, monkeypatch, "--method", "guided",
                                    "--render", "panel")
    assert [record["layers"] for record in records] == [{}, {}]
    assert all(caption.startswith("guided: class ") for caption in renders)
    assert not any(" at " in caption for caption in renders)


def test_the_examples_in_the_docstrings():
    import doctest

    from guidedbp import _text
    from guidedbp.engine.graph import scopes as _scopes

    for module in (_scopes, _text):
        assert doctest.testmod(module).failed == 0, module.__name__
