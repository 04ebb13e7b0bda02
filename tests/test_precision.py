"""``precision="mixed"`` (``--precision mixed``): bfloat16 past the stem, float32 where it
matters, refused where the hardware has no fast path (issue 22, item 3).

One seeded CNN serves the module: 32x32x3 -> Rescaling -> Conv2D(8, relu) -> MaxPool ->
Conv2D(8, relu) -> MaxPool (the stem: at least half the input's resolution, float32) ->
Conv2D(16, relu) -> Conv2D(16, relu) -> global average (8x8: bfloat16) -> Dense(5,
softmax) (the output: float32). The maps' values do not depend on how fast bfloat16 runs,
so the tests that run it tell the hardware probe that the CPU has AVX512-BF16 (TensorFlow
emulates bfloat16 where it has not); the refusal tests tell it the opposite.
"""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest
from PIL import Image

from guidedbp import Explainer
from guidedbp.engine.graph import precision as _precision
from guidedbp.engine.methods import averaging as _averaging
from guidedbp.engine.options import MethodOptions
from guidedbp.errors import ArgumentError
from guidedbp.pipeline.options import RunOptions

from .helpers import assert_one_line_error, run_cli, tinted_noise

STEM = ("rescale", "conv1", "pool1", "conv2", "pool2")
DEEP = ("conv3", "conv4", "gap")
REFUSED = ("precision='mixed' needs a CPU with bfloat16 instructions (AVX512-BF16 or AMX) or "
           "a GPU, and this machine has neither: bfloat16 would be slower than float32 here; "
           "use precision='float32'")


def stem_cnn() -> keras.Model:
    keras.utils.set_random_seed(22)
    inputs = keras.Input((32, 32, 3), name="image")
    x = keras.layers.Rescaling(1 / 127.5, offset=-1, name="rescale")(inputs)
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="conv1")(x)
    x = keras.layers.MaxPooling2D(name="pool1")(x)
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="conv2")(x)
    x = keras.layers.MaxPooling2D(name="pool2")(x)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="conv3")(x)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="conv4")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    outputs = keras.layers.Dense(5, activation="softmax", name="scores")(x)
    return keras.Model(inputs, outputs, name="stem_cnn")


@pytest.fixture(scope="module")
def model() -> keras.Model:
    return stem_cnn()


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return np.stack([tinted_noise(32, 32, seed=seed) for seed in range(4)]).astype(np.float32)


@pytest.fixture
def bfloat16_cpu(monkeypatch):
    """The hardware probe answers: a CPU with AVX512-BF16, no GPU, oneDNN on."""
    monkeypatch.setattr(_precision, "gpu_capability", lambda: None)
    monkeypatch.setattr(_precision, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)


@pytest.fixture
def no_fast_path(monkeypatch):
    """The hardware probe answers: AVX-512 without BF16, no GPU."""
    monkeypatch.setattr(_precision, "gpu_capability", lambda: None)
    monkeypatch.setattr(_precision, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


# -- the option ------------------------------------------------------------------------------


def test_precision_is_one_option_from_the_engine_to_the_cli():
    assert MethodOptions().precision == "float32"
    options = MethodOptions.of(precision="mixed", smooth=4)
    assert (options.precision, options.smoothgrad.smooth) == ("mixed", 4)
    assert options.flat()["precision"] == "mixed"
    assert MethodOptions.of(**options.flat()) == options
    assert RunOptions.of(precision="mixed").method.precision == "mixed"
    assert RunOptions.of(precision="mixed").flat()["precision"] == "mixed"
    with pytest.raises(ArgumentError, match=r"^precision='half' is not one of float32, mixed$"):
        MethodOptions.of(precision="half")
    for command in ("explain", "evaluate"):
        shown = " ".join(run_cli(command, "--help", code=0).output.split())
        assert "--precision [float32|mixed]" in shown and "[default: float32]" in shown
    result = run_cli("explain", "demo", "sample_images/cat.jpg", "--precision", "half")
    assert result.exit_code == 2 and "'half' is not one of 'float32', 'mixed'" in result.output


# -- mixed maps ------------------------------------------------------------------------------


@pytest.mark.usefixtures("bfloat16_cpu")
def test_the_copy_runs_bfloat16_past_the_stem_and_leaves_the_callers_model_alone(model):
    weights = [w.copy() for w in model.get_weights()]
    explainer = Explainer(model, "guided", precision="mixed")
    assert explainer.compute_dtype == "bfloat16"
    copy = explainer._traced.model
    assert copy is not model and explainer.model is model
    policies = {layer.name: layer.dtype_policy.name for layer in copy.layers[1:]}
    assert policies == {**dict.fromkeys(STEM, "float32"), **dict.fromkeys(DEEP, "mixed_bfloat16"),
                        "scores": "float32"}
    for copied, own in zip(copy.get_weights(), weights):
        np.testing.assert_array_equal(copied, own)
    assert {layer.dtype_policy.name for layer in model.layers} == {"float32"}
    for now, before in zip(model.get_weights(), weights):
        np.testing.assert_array_equal(now, before)


@pytest.mark.usefixtures("bfloat16_cpu")
@pytest.mark.parametrize(("method", "least"), [
    ("guided", 0.99), ("deconvnet", 0.99), ("gradcam", 0.99), ("guided-gradcam", 0.99),
    # The plain gradient's signed terms cancel: its small values move more (0.987 on this
    # random network's worst image, 0.997-0.9997 on the demo's shapes).
    ("vanilla", 0.98),
])
def test_mixed_maps_are_float32_and_correlate_with_float32_maps(model, images, method, least):
    full = Explainer(model, method)
    mixed = Explainer(model, method, precision="mixed")
    expected, found = full.explain(images), mixed.explain(images)
    assert found.maps.dtype == np.float32 and found.maps.shape == expected.maps.shape
    np.testing.assert_array_equal(found.targets, expected.targets)
    assert not np.array_equal(found.maps, expected.maps)  # bfloat16 did run
    for reference, map_ in zip(expected.maps, found.maps):
        assert pearson(reference, map_) >= least
    # Every activation guided in float32 is guided in bfloat16.
    assert mixed.report.guided_activations == full.report.guided_activations
    assert mixed.report.head == full.report.head == "softmax"
    scores, probabilities = mixed.predict(images)
    full_scores, full_probabilities = full.predict(images)
    assert scores.dtype == probabilities.dtype == np.float32
    np.testing.assert_allclose(probabilities, full_probabilities, atol=0.02)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-6)  # float32 softmax


@pytest.mark.usefixtures("bfloat16_cpu")
def test_the_copy_computes_with_the_models_current_weights(images):
    model = stem_cnn()  # its own: trained below
    mixed = Explainer(model, "guided", precision="mixed")
    before = mixed(images, target=2)
    conv = model.get_layer("conv3")  # a bfloat16 layer of the copy
    kernel, bias = conv.get_weights()
    conv.set_weights([-kernel, bias])  # as an epoch of training might
    after = mixed(images, target=2)
    assert mixed.trace_count == 1  # the traced function reads the new weights itself
    assert pearson(after, before) < 0.9
    expected = Explainer(model, "guided")(images, target=2)
    for reference, map_ in zip(expected, after):
        assert pearson(reference, map_) >= 0.99
    np.testing.assert_allclose(mixed.predict(images)[1],
                               Explainer(model).predict(images)[1], atol=0.02)


@pytest.mark.usefixtures("bfloat16_cpu")
def test_smoothgrad_and_integrated_gradients_sum_float32_maps_in_float64(
        model, images, monkeypatch):
    seen: dict[str, list] = {"smoothgrad": [], "integrated_gradients": []}

    def recording(name):
        original = getattr(_averaging, name)

        def run(maps_for, *args, **kwargs):
            def recorded(*batch):
                maps = maps_for(*batch)
                seen[name].append((batch, maps))
                return maps

            return original(recorded, *args, **kwargs)

        return run

    for name in seen:
        monkeypatch.setattr(_averaging, name, recording(name))
    smooth = Explainer(model, "guided", precision="mixed", smooth=4, batch_size=8)
    averaged = smooth(images[:2], target=1)
    (copies, rows, numbers), by_method = seen["smoothgrad"][0]
    np.testing.assert_array_equal(numbers, np.tile(np.arange(4), 2))  # each image's copies
    assert by_method["guided"].dtype == np.float32 and len(copies) == 8
    mean = by_method["guided"].reshape(2, 4, 32, 32, 3).mean(axis=1, dtype=np.float64)
    np.testing.assert_array_equal(averaged, mean.astype(np.float32))
    assert pearson(averaged, Explainer(model, "guided", smooth=4)(images[:2], target=1)) >= 0.99

    integrated = Explainer(model, "integrated-gradients", precision="mixed", steps=8,
                           batch_size=8)(images[:1], target=1)
    (path, _), gradients = seen["integrated_gradients"][0]
    assert gradients.dtype == np.float32 and len(path) == 8
    total = gradients.sum(axis=0, dtype=np.float64)
    np.testing.assert_array_equal(integrated[0], (images[0] * (total / 8)).astype(np.float32))
    full = Explainer(model, "integrated-gradients", steps=8)(images[:1], target=1)
    assert pearson(integrated, full) >= 0.99


def test_float32_is_todays_path(model, images):
    default = Explainer(model, "guided")
    explicit = Explainer(model, "guided", precision="float32")
    assert default._traced.model is model and explicit._traced.model is model
    assert default.compute_dtype == explicit.compute_dtype == "float32"
    np.testing.assert_array_equal(explicit(images), default(images))


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(("gpu", "flags", "expected"), [
    ((9, 0), None, "bfloat16"),
    ((8, 0), None, "bfloat16"),
    ((7, 5), frozenset({"avx512_bf16"}), "float16"),  # the GPU runs the ops, not the CPU
    ((6, 1), frozenset({"avx512_bf16"}), "compute capability 7.0 or more, and this one has 6.1"),
    (None, frozenset({"avx512_bf16"}), "bfloat16"),
    (None, frozenset({"amx_bf16", "amx_tile"}), "bfloat16"),
    (None, frozenset({"avx512f", "avx512_vnni"}), REFUSED),
    (None, None, "and this CPU's cannot be read (no /proc/cpuinfo)"),
])
def test_the_fast_dtype_follows_the_hardware(monkeypatch, gpu, flags, expected):
    monkeypatch.setattr(_precision, "gpu_capability", lambda: gpu)
    monkeypatch.setattr(_precision, "cpu_flags", lambda: flags)
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    if expected in ("bfloat16", "float16"):
        assert _precision.fast_dtype() == expected
    else:
        with pytest.raises(ArgumentError) as caught:
            _precision.fast_dtype()
        assert expected in str(caught.value) and "\n" not in str(caught.value)
        assert str(caught.value).endswith("use precision='float32'")


@pytest.mark.usefixtures("bfloat16_cpu")
def test_onednn_turned_off_is_refused(model, monkeypatch):
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    with pytest.raises(ArgumentError, match="TF_ENABLE_ONEDNN_OPTS=0 turns off"):
        Explainer(model, precision="mixed")


@pytest.mark.usefixtures("no_fast_path")
def test_no_fast_path_is_refused_in_one_line_and_exit_code_2(model, tmp_path):
    with pytest.raises(ArgumentError) as caught:
        Explainer(model, "guided", precision="mixed")
    assert str(caught.value) == REFUSED
    Explainer(model, "guided")  # float32 needs no probe
    model.save(tmp_path / "model.keras")
    Image.fromarray(tinted_noise(32, 32)).save(tmp_path / "a.png")
    result = run_cli("explain", tmp_path / "model.keras", tmp_path / "a.png", "-o",
                     tmp_path / "out", "--precision", "mixed")
    line = assert_one_line_error(result, "--precision mixed needs a CPU with bfloat16",
                                 "use --precision float32")
    assert "precision=" not in line
    result = run_cli("evaluate", tmp_path / "model.keras", tmp_path / "a.png", "--metric",
                     "deletion", "--precision", "mixed")
    assert_one_line_error(result, "use --precision float32")


@pytest.mark.usefixtures("bfloat16_cpu")
def test_models_that_cannot_be_rebuilt_are_refused(model, tmp_path):
    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__(name="subclassed")
            self.dense = keras.layers.Dense(2)

        def call(self, images, training=False):
            return self.dense(keras.ops.mean(images, axis=(1, 2)))

    subclassed = Subclassed()
    subclassed(np.zeros((1, 4, 4, 3), np.float32))
    with pytest.raises(ArgumentError, match=r"subclassed is a subclassed Subclassed: use "
                                            r"precision='float32'$"):
        Explainer(subclassed, precision="mixed")

    model.export(str(tmp_path / "saved"))  # no verbose= at the Keras floor, 3.4.1
    Image.fromarray(tinted_noise(32, 32)).save(tmp_path / "a.png")
    message = ("a SavedModel loads as a frozen TensorFlow graph, which cannot be converted): "
               "use precision='float32'")
    with pytest.raises(ArgumentError, match="is a FrozenGraph, not a keras.Model") as caught:
        Explainer(str(tmp_path / "saved"), precision="mixed")
    assert str(caught.value).endswith(message)
    result = run_cli("explain", tmp_path / "saved", tmp_path / "a.png", "-o", tmp_path / "out",
                     "--precision", "mixed")
    assert_one_line_error(result, "cannot be converted): use --precision float32")


# -- the command line ------------------------------------------------------------------------


@pytest.mark.usefixtures("bfloat16_cpu")
def test_explain_precision_mixed_writes_maps_close_to_float32(model, tmp_path):
    model.save(tmp_path / "model.keras")
    for seed in range(2):
        Image.fromarray(tinted_noise(32, 32, seed=seed)).save(tmp_path / f"{seed}.png")
    maps = {}
    for precision in ("float32", "mixed"):
        out = tmp_path / precision
        run_cli("explain", tmp_path / "model.keras", tmp_path / "0.png", tmp_path / "1.png",
                "-o", out, "--raw", "--no-report", "--precision", precision, code=0)
        maps[precision] = [np.load(out / f"{seed}.png.guided.npy") for seed in range(2)]
    for full, mixed in zip(maps["float32"], maps["mixed"]):
        assert mixed.dtype == np.float32 and not np.array_equal(full, mixed)
        assert pearson(full, mixed) >= 0.99


@pytest.mark.usefixtures("bfloat16_cpu")
def test_evaluate_precision_mixed_keeps_the_demos_pointing_game():
    games = {}
    for precision in ("float32", "mixed"):
        result = run_cli("evaluate", "demo", "--shapes", "24", "--method", "guided",
                         "--precision", precision, "--json", code=0)
        rows = json.loads(result.stdout)["results"]
        games[precision] = {row["class"]: (row["pointing_game"], row["energy_inside"])
                            for row in rows}
    assert games["float32"]["overall"][0] > 0.9
    assert {name: game for name, (game, _) in games["mixed"].items()} == \
        {name: game for name, (game, _) in games["float32"].items()}
    for name, (_, energy) in games["mixed"].items():
        assert energy == pytest.approx(games["float32"][name][1], abs=0.002)


@pytest.mark.skipif("avx512_bf16" not in (_precision.cpu_flags() or ())
                    and "amx_bf16" not in (_precision.cpu_flags() or ()),
                    reason="this CPU has no bfloat16 instructions")
def test_this_cpu_is_offered_bfloat16_by_the_real_probe(model, images):
    if _precision.gpu_capability() is not None:
        pytest.skip("a GPU decides")
    if os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0":
        pytest.skip("oneDNN is off: refused (test_onednn_turned_off_is_refused)")
    explainer = Explainer(model, "guided", precision="mixed")
    assert explainer.compute_dtype == "bfloat16"
    assert pearson(explainer(images), Explainer(model, "guided")(images)) >= 0.99


def folding_cnn() -> keras.Model:
    """Every case of batch-normalization folding: a convolution with a bias, one
    without, a depthwise one with a channel multiplier, normalizations without a scale or
    a centre; and the cases that must not fold: a convolution with an activation, one whose
    output a second layer also reads, a normalization on another axis."""
    keras.utils.set_random_seed(5)
    inputs = keras.Input((12, 12, 3), name="image")
    a = keras.layers.Conv2D(6, 3, padding="same", name="biased")(inputs)
    a = keras.layers.BatchNormalization(name="norm_biased")(a)
    b = keras.layers.Conv2D(6, 3, padding="same", use_bias=False, name="unbiased")(
        keras.layers.ReLU(name="relu1")(a))
    b = keras.layers.BatchNormalization(scale=False, name="norm_unbiased")(b)
    c = keras.layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2, name="depthwise")(
        keras.layers.ReLU(name="relu2")(b))
    c = keras.layers.BatchNormalization(center=False, name="norm_depthwise")(c)
    d = keras.layers.Conv2D(6, 1, activation="relu", name="activated")(c)
    d = keras.layers.BatchNormalization(name="norm_activated")(d)
    e = keras.layers.Conv2D(6, 1, name="shared")(d)
    f = keras.layers.BatchNormalization(name="norm_shared")(e)
    g = keras.layers.BatchNormalization(axis=1, name="norm_rows")(
        keras.layers.Conv2D(6, 1, name="rows")(keras.layers.Add(name="add")([e, f])))
    outputs = keras.layers.Dense(4, name="scores")(keras.layers.GlobalAveragePooling2D()(g))
    model = keras.Model(inputs, outputs, name="folding_cnn")
    for layer in model.layers:  # statistics away from the identity
        if isinstance(layer, keras.layers.BatchNormalization):
            rng = np.random.default_rng(len(layer.name))
            layer.set_weights([rng.uniform(0.5, 2.0, w.shape) if "variance" in w.path or
                               "gamma" in w.path else rng.normal(0, 0.5, w.shape)
                               for w in layer.weights])
    return model


def test_batch_normalizations_fold_into_the_convolutions_before_them():
    """The folded copy (here in float32) computes what the model does, to rounding; only the
    plain convolution -> normalization pairs fold; the weights read are the model's
    current ones."""
    model = folding_cnn()
    images = np.random.default_rng(0).normal(0, 1, (3, 12, 12, 3)).astype(np.float32)
    folds: list = []
    copy = _precision.LowPrecisionCopy(
        _precision._rebuilt(model, "float32", True, None, None, folds), model, folds)
    assert sorted(fold.convolution.name for fold in folds) == [
        "biased", "depthwise", "unbiased"]
    assert {fold.normalization.name for fold in folds} == {
        "norm_biased", "norm_unbiased", "norm_depthwise"}
    np.testing.assert_allclose(copy(images), model(images), rtol=1e-5, atol=1e-5)
    depthwise = model.get_layer("norm_depthwise")
    depthwise.set_weights([w * 1.5 for w in depthwise.get_weights()])
    np.testing.assert_allclose(copy(images), model(images), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="inference mode only"):
        copy(images, training=True)


def test_folded_weights_are_the_inference_transform_by_hand():
    """One channel's folded kernel and bias, computed on paper from the formulas."""
    model = folding_cnn()
    folds: list = []
    _precision._rebuilt(model, "float32", True, None, None, folds)
    fold = next(f for f in folds if f.convolution.name == "biased")
    kernel, bias = (np.asarray(w) for w in fold.weights())
    conv_kernel, conv_bias = model.get_layer("biased").get_weights()
    gamma, beta, mean, variance = model.get_layer("norm_biased").get_weights()
    scale = gamma / np.sqrt(variance + 1e-3)
    np.testing.assert_allclose(kernel, conv_kernel * scale, rtol=1e-6)
    np.testing.assert_allclose(bias, (conv_bias - mean) * scale + beta, rtol=1e-5, atol=1e-6)
    fold = next(f for f in folds if f.convolution.name == "depthwise")
    kernel = np.asarray(fold.weights()[0])
    depth_kernel = model.get_layer("depthwise").get_weights()[0]  # (3, 3, 6, 2)
    gamma, mean, variance = model.get_layer("norm_depthwise").get_weights()  # no beta
    scale = gamma / np.sqrt(variance + 1e-3)  # channel 2 * input + multiplier
    np.testing.assert_allclose(kernel[..., 4, 1], depth_kernel[..., 4, 1] * scale[9], rtol=1e-6)
    np.testing.assert_allclose(fold.weights()[1], -mean * scale, rtol=1e-5, atol=1e-6)
