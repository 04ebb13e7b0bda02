"""Every explain option means the same to explain_files, explain_image and the CLI, or is
refused in one line; and every option has an upper bound past which it is refused at once.

Issue 19, items 1 and 10: ``explain_image(..., classes=["circle"])`` used to explain the
top-1 class, and ``--smooth 100000`` used to try 20 GiB.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import keras
import numpy as np
import pytest

import guidedbp
from guidedbp import Explainer, RunOptions, explain_files, explain_image
from guidedbp.engine.methods import averaging as _averaging
from guidedbp.errors import ArgumentError
from guidedbp.io.inputs import output_stem
from guidedbp.pipeline.options import IMAGE_OPTIONS

from .helpers import assert_one_line_error, run_cli, tinted_noise
from .models import colour_cnn, tiny_cnn


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    from PIL import Image

    root = tmp_path_factory.mktemp("parity")
    colour_cnn((16, 16, 3)).save(root / "colour.keras")
    colour_cnn((None, None, 3)).save(root / "free.keras")
    # Two convolutions with biases: ReLUs and max-pooling switch with the input, so that
    # maps depend on the image (noise, crop) and gradients on the path (steps).
    biased = tiny_cnn(5)
    rng = np.random.default_rng(5)
    for layer in biased.layers:
        if isinstance(layer, keras.layers.Conv2D):
            kernel, bias = layer.get_weights()
            layer.set_weights([kernel, rng.normal(0, 0.3, bias.shape).astype(np.float32)])
    biased.save(root / "biased.keras")
    Image.fromarray(tinted_noise(20, 24, seed=3)).save(root / "a.png")
    return root


@pytest.fixture(scope="module")
def models(workspace) -> dict:
    return {name: guidedbp.load_model(str(workspace / f"{name}.keras"))
            for name in ("colour", "free", "biased")}


def _first_layer(loaded) -> str:
    """The first convolution (the default is the last one)."""
    return next(layer.name for layer in loaded.model.layers
                if isinstance(layer, keras.layers.Conv2D))


#: Each option explain_image shares with explain_files: (name, a non-default value, the
#: methods it applies to, other options it needs, whether it changes the maps).
SHARED = [
    ("methods", "vanilla", None, {}, True),
    ("batch_size", 1, "guided", {"smooth": 3}, False),
    # bfloat16 past the stem: maps close to float32's, not equal (test_precision.py)
    ("precision", "mixed", "guided", {}, True),
    # A ReLU model: both scopes guide the same ops (test_activation_regions: other nets).
    ("guide", "relu", "guided", {}, False),
    ("layer", _first_layer, "gradcam", {}, True),
    ("upsample", "nearest", "gradcam", {}, True),
    ("smooth", 3, "guided", {}, True),
    ("noise", 0.5, "guided", {"smooth": 3}, True),
    ("seed", 5, "guided", {"smooth": 3}, True),
    ("steps", 3, "integrated-gradients", {}, True),
    ("baseline", "white", "integrated-gradients", {}, True),
    ("max_channels", 1, "scorecam", {}, True),
    ("patch", 6, "occlusion", {}, True),
    ("stride", 2, "occlusion", {"patch": 6}, True),
    ("fill", 0.0, "occlusion", {}, True),
    ("grid", 2, "rise", {"masks": 16}, True),
    ("masks", 8, "rise", {}, True),
    ("keep_probability", 0.25, "rise", {"masks": 16}, True),
    ("samples", 16, "lime", {}, True),
    ("designs", 2, "sobol", {}, True),
    ("segments", "slic", "lime", {"samples": 16}, True),
    ("size", (12, 20), "guided", {}, True),
    ("resize", "crop", "guided", {}, True),
]

#: The options explain_image refuses, each with a non-default value.
REFUSED = {"classes": (1,), "top_k": 2, "recursive": False, "shard": (0, 2),
           "renders": "panel", "cmap": "gray", "clip": 50.0, "alpha": 0.2,
           "output_size": "model", "tile": 128, "raw": True, "figure": "png", "dpi": 100,
           "report": False, "skip_existing": True, "fail_fast": True,
           "targets": ("unit:0",), "model_output": 0, "mask_dir": "masks", "detections": 2,
           "detection_threshold": 0.5}


@pytest.fixture(autouse=True)
def bfloat16_probe(monkeypatch):
    """precision='mixed' runs on any CPU here: the hardware probe is told of AVX512-BF16
    (TensorFlow emulates bfloat16 without it); this module compares maps, not speed."""
    from guidedbp.engine.graph import precision as _precision

    monkeypatch.setattr(_precision, "gpu_capability", lambda: None)
    monkeypatch.setattr(_precision, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)


def test_every_run_option_is_shared_with_explain_image_or_refused_by_it():
    shared = {name for name, *_ in SHARED}
    assert shared == IMAGE_OPTIONS
    assert set(RunOptions().flat()) == shared | set(REFUSED)
    assert shared.isdisjoint(REFUSED)


@pytest.fixture(scope="module")
def by_default(workspace, models):
    """``explain_image``'s result for the image with the default options but ``extra``,
    computed once for each model, methods and ``extra`` that :data:`SHARED` compares with."""
    results: dict = {}

    def result(model: str, methods, extra: dict):
        key = (model, methods, tuple(sorted(extra.items())))
        if key not in results:
            results[key] = explain_image(models[model], workspace / "a.png", methods=methods,
                                         **extra)
        return results[key]

    return result


@pytest.mark.parametrize(("name", "value", "methods", "extra", "changes"), SHARED,
                         ids=[case[0] for case in SHARED])
def test_a_shared_option_gives_explain_image_the_maps_explain_files_writes(
        workspace, models, by_default, tmp_path, name, value, methods, extra, changes):
    # size needs free spatial dimensions; the others, ReLUs that switch with the input
    model = "free" if name == "size" else "biased"
    loaded = models[model]
    image = workspace / "a.png"
    value = value(loaded) if callable(value) else value
    if name == "methods":
        methods, fields = value, {}
    else:
        fields = {**extra, name: value}
    summary = explain_files(loaded, str(image), tmp_path, methods=methods, raw=True,
                            renders="color", report=False, **fields)
    assert (summary.done, summary.failures) == (1, [])
    result = explain_image(loaded, image, methods=methods, **fields)
    stem = output_stem(str(image))
    for method, saliency in result.maps.items():
        np.testing.assert_array_equal(saliency, np.load(tmp_path / f"{stem}.{method}.npy"))
    default = by_default(model, None if name == "methods" else methods, extra)
    if name == "methods":
        assert set(result.maps) == {"vanilla"} and set(default.maps) == {"guided"}
        return
    for method, saliency in result.maps.items():
        other = default.maps[method]
        same = saliency.shape == other.shape and np.array_equal(saliency, other)
        assert same != changes, (name, method)  # the option is applied, not ignored


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_explain_image_refuses_each_option_it_has_no_use_for_in_one_line(
        workspace, models, name):
    image = workspace / "a.png"
    for given in ({name: REFUSED[name]}, {"options": RunOptions.of(**{name: REFUSED[name]})}):
        with pytest.raises(ArgumentError, match=rf"^explain_image .*\b{name}= ") as caught:
            explain_image(models["colour"], image, **given)
        assert "\n" not in str(caught.value)


def test_explain_image_takes_no_classes_but_one_target(workspace):
    star = "sample_images/shapes/star_0.png"
    with pytest.raises(ArgumentError, match="explains one class: give it as target="):
        explain_image("demo", star, methods="guided,gradcam", classes=["circle"])
    result = explain_image("demo", star, methods="guided,gradcam", target="circle")
    assert result.label == "circle"
    with pytest.raises(ArgumentError, match=r"^unknown option 'class_' \(did you mean "
                                            r"'target'\?\): explain_image takes target, "):
        explain_image("demo", star, class_="circle")
    with pytest.raises(ArgumentError, match=r"unknown option 'smoth' \(did you mean 'smooth'"):
        explain_image("demo", star, smoth=8)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("smooth", -1, "smooth=-1 must be an integer >= 0"),
    ("smooth", 100000, "smooth=100000 is above the upper bound of 1000"),
    ("steps", 100000, "steps=100000 is above the upper bound of 1000"),
    ("batch_size", 100000, "batch_size=100000 is above the upper bound of 1024"),
    ("upsample", "cubic", "upsample='cubic' is not one of"),
    ("resize", "squash", "resize='squash' is not one of"),
    ("size", (5000, 10), "size=(5000, 10) is above the upper bound of 4096 pixels a side"),
    ("methods", "guided,nope", "'nope'"),
])
def test_a_bad_shared_option_is_refused_alike_and_at_once(workspace, models, tmp_path, name,
                                                          value, message):
    image = workspace / "a.png"
    started = time.process_time()  # CPU seconds: the same on a loaded machine
    with pytest.raises(ArgumentError, match=re.escape(message)) as by_files:
        explain_files(models["colour"], str(image), tmp_path / "out", **{name: value})
    with pytest.raises(ArgumentError) as by_image:
        explain_image(models["colour"], image, **{name: value})
    assert str(by_image.value) == str(by_files.value)
    assert time.process_time() - started < 5  # refused before any work
    assert not (tmp_path / "out").exists()


def test_an_explainer_keeps_its_own_options_and_refuses_others(workspace, models):
    image = workspace / "a.png"
    explainer = Explainer(models["colour"], "guided", smooth=3)
    assert explain_image(explainer, image, smooth=3).maps["guided"].shape == (16, 16, 3)
    for fields, named in [({"smooth": 4}, "smooth=4.*differs from the Explainer's own"),
                          ({"methods": "guided,vanilla"}, "are not all among the Explainer's"),
                          ({"options": RunOptions.of(seed=9)}, "seed=9.*differs from")]:
        with pytest.raises(ArgumentError, match=named):
            explain_image(explainer, image, **fields)
    both = Explainer(models["colour"], "guided,vanilla")
    chosen = explain_image(both, image, methods="vanilla")
    assert list(chosen.maps) == ["vanilla"]
    np.testing.assert_array_equal(chosen.maps["vanilla"],
                                  explain_image(both, image).maps["vanilla"])
    with pytest.raises(ArgumentError, match="load= applies to a model spec"):
        explain_image(explainer, image, load={"labels": "x.txt"})


def test_load_is_refused_with_a_model_already_loaded(workspace, models, tmp_path):
    with pytest.raises(ArgumentError, match="load= applies to a model spec"):
        explain_files(models["colour"], str(workspace / "a.png"), tmp_path,
                      load={"labels": "x.txt"})
    with pytest.raises(ArgumentError, match="load= applies to a model spec"):
        explain_image(models["colour"], workspace / "a.png", load={"labels": "x.txt"})


# -- upper bounds ------------------------------------------------------------------------------


@pytest.mark.parametrize(("flags", "fragment"), [
    (["--smooth", "100000"], "100000 is not in the range 0<=x<=1000"),
    (["--steps", "100000"], "100000 is not in the range 1<=x<=1000"),
    (["--tile", "100000"], "100000 is not in the range 64<=x<=4096"),
    (["--batch-size", "100000"], "100000 is not in the range 1<=x<=1024"),
    (["--top-k", "1000"], "1000 is not in the range 1<=x<=100"),
    (["--size", "100000x5"], "'100000x5' is above the upper bound of 4096 pixels a side"),
    (["--class", "0"] * 101, "101 classes is above the upper bound of 100 classes per image"),
])
def test_an_absurd_value_is_refused_at_once_through_the_cli(workspace, tmp_path, flags,
                                                            fragment):
    started = time.process_time()  # CPU seconds: the same on a loaded machine
    result = run_cli("explain", workspace / "colour.keras", workspace / "a.png", "-o",
                     tmp_path / "out", *flags)
    assert result.exit_code == 2, result.output
    assert fragment in result.stderr and "Traceback" not in result.output
    assert time.process_time() - started < 5
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("args", "fragment"), [
    (["check", "--batch-size", "5000"], "5000 is not in the range 1<=x<=1024"),
    (["check", "--generated", "100000"], "100000 is not in the range 1<=x<=1000"),
    (["evaluate", "--steps", "100000"], "100000 is not in the range 1<=x<=1000"),
    (["evaluate", "--shapes", "100000"], "100000 is not in the range 1<=x<=10000"),
])
def test_the_other_commands_bound_their_counts_too(workspace, args, fragment):
    result = run_cli(args[0], workspace / "colour.keras", *args[1:])
    assert result.exit_code == 2 and fragment in result.stderr, result.output


def test_curves_bound_their_steps_in_the_library():
    from guidedbp.checks.faithfulness import deletion_insertion

    with pytest.raises(ArgumentError, match="steps=1001 is above the upper bound of 1000"):
        deletion_insertion(lambda x: x, [np.zeros((4, 4, 3), np.uint8)],
                           [np.zeros((4, 4, 3), np.float32)], classes=[0], steps=1001)


@pytest.mark.parametrize(("fields", "message"), [
    ({"tile": 100000}, "tile=100000 must be a whole number of pixels from 64 to 4096"),
    ({"top_k": 1000}, "top_k=1000 is above the upper bound of 100 classes per image"),
    ({"classes": tuple(range(101))}, "101 classes is above the upper bound of 100"),
])
def test_an_absurd_value_is_refused_at_once_through_the_api(workspace, models, tmp_path,
                                                            fields, message):
    with pytest.raises(ArgumentError, match=message):
        explain_files(models["colour"], str(workspace / "a.png"), tmp_path / "out", **fields)
    with pytest.raises(ArgumentError, match="above the upper bound of 1000"):
        Explainer(models["colour"].model, "integrated-gradients", steps=1001)


def test_smoothgrad_memory_does_not_grow_with_the_number_of_copies():
    """Copies go through the model ``chunk`` at a time, even one image's many copies, and
    the mean is the one of all copies drawn at once."""
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 1, (2, 5, 4, 3)).astype(np.float32)
    batches = []

    numbered = []

    def maps_for(copies, fixed, numbers):
        batches.append(len(copies))
        numbered.append(np.stack([fixed, numbers], axis=1))
        return {"square": copies ** 2 * (1 + fixed[:, None, None, None])}

    maps = _averaging.smoothgrad(maps_for, images, samples=50, noise=0.2, seed=4,
                                 chunk=8)["square"]
    assert max(batches) == 8 and sum(batches) == 100
    # Every copy is numbered within its image, whatever batch it went in.
    np.testing.assert_array_equal(np.concatenate(numbered), [(image, copy) for image in (0, 1)
                                                             for copy in range(50)])
    for index, image in enumerate(images):
        sigma = 0.2 * (image.max() - image.min())
        copies = (image[None] + np.random.default_rng([4, index]).normal(
            0, sigma, (50, *image.shape))).astype(np.float32)
        np.testing.assert_allclose(maps[index], (copies ** 2).mean(axis=0) * (1 + index),
                                   rtol=1e-5)


def test_a_batch_that_cannot_fit_in_the_free_memory_is_refused_at_once(workspace, tmp_path,
                                                                       monkeypatch):
    from guidedbp.engine import inputs as _inputs

    # 16 images of 16x16x3: float32 images, gradients and one map each = 147456 bytes.
    monkeypatch.setattr(_inputs, "available_memory", lambda: 100_000)
    result = run_cli("explain", workspace / "colour.keras", workspace / "a.png", "-o",
                     tmp_path / "out")
    line = assert_one_line_error(result, "--batch-size 16: a pass over 16 images of 16x16x3 "
                                         "needs at least 0.14 MiB", "0.10 MiB are free",
                                 "try --batch-size 10")
    assert "Traceback" not in line and not (tmp_path / "out").exists()
    run_cli("explain", workspace / "colour.keras", workspace / "a.png", "-o", tmp_path / "ok",
            "--batch-size", "10", "-q", code=0)
    model = guidedbp.load_model(str(workspace / "colour.keras"))
    with pytest.raises(ArgumentError, match="try batch_size=8"):  # two maps per image
        Explainer(model, "guided,vanilla").explain(np.zeros((16, 16, 16, 3), np.float32))


def test_occlusion_positions_have_an_upper_bound(tmp_path):
    result = run_cli("explain", "demo", "sample_images/shapes/star_0.png", "-o", tmp_path / "o",
                     "--method", "occlusion", "--patch", "1", "--stride", "1")
    assert_one_line_error(result, "--patch 1, --stride 1 place the patch at 9216 positions on "
                                  "96x96 images", "above the upper bound of 4096")
    assert not (tmp_path / "o").exists()
    from guidedbp.engine.methods.perturbation import occlusion_geometry

    assert occlusion_geometry(96, 96, 2, 2) == (2, 2)  # 48 x 48 = 2304 positions: allowed
    with pytest.raises(ArgumentError, match="4225 positions on 65x65 images"):
        occlusion_geometry(65, 65, 1, 1)
