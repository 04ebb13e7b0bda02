"""Every target and score is checked before it is used, for every method of the registry.

- A score function of the wrong kind (one value for a batch of two, ``(B, 2)``, a scalar,
  a flattened output, ``None``, a string or an object) and a :class:`Similarity` reference
  that does not fit the model (an embedding of the wrong length, an image of the wrong
  shape) are one :class:`~guidedbp.errors.ArgumentError` line naming the parameter, the
  same for each method of :data:`guidedbp.METHODS` (but ``drise``, which refuses any
  target but a detection at once), with SmoothGrad or not, before any method runs; a
  valid score function explains what :class:`Unit` explains.
- A one-unit output with no sigmoid or softmax head is a value, not a class: with no
  target it is explained as ``unit:0`` (said once), a class of it is refused with the
  ``unit:0`` hint, and ``inspect`` says which reading applies; a sigmoid head stays a
  binary classifier.
- ``guidedbp.targets``, ``guidedbp.plot`` and ``guidedbp.checks`` are attributes of
  ``import guidedbp``, imported on first use.
- A score that is not finite (a model whose weights overflow) gives its maps a
  ``non-finite-score`` caveat; a run fails that input in one line, and every manifest line
  stays strict JSON.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import guidedbp
from guidedbp.caveats import NON_FINITE_SCORE
from guidedbp.engine.explainer import Explainer
from guidedbp.engine.explanation import ValueOutputWarning
from guidedbp.engine.methods.registry import as_methods
from guidedbp.errors import ArgumentError
from guidedbp.targets import Class, Score, Similarity, Unit

from .helpers import assert_one_line_error, run_cli

#: Options that keep every method of the registry well under a second on 6x6 images.
SMALL = {"masks": 8, "samples": 8, "designs": 2, "grid": 2, "steps": 2, "max_channels": 2,
         "patch": 3, "stride": 3, "seed": 0}
IMAGES = np.random.default_rng(0).uniform(0, 1, (2, 6, 6, 1)).astype(np.float32)
#: Every method that explains these targets: all but D-RISE, which explains detections
#: alone and refuses the others before any check (tests/test_drise.py).
EVERY = as_methods("all")


def _set(layer, *arrays) -> None:
    layer.set_weights([np.asarray(array, np.float32) for array in arrays])


def small_model(units: int = 3, head: str | None = None, scale: float = 1.0) -> keras.Model:
    """6x6x1 -> Conv2D(2, 3x3, relu) -> global average -> Dense(units[, head]), fixed
    weights; ``scale`` multiplies the last layer's (1e38 overflows its output)."""
    inputs = keras.Input((6, 6, 1))
    conv = keras.layers.Conv2D(2, 3, activation="relu")
    dense = keras.layers.Dense(units, activation=head)
    model = keras.Model(inputs, dense(keras.layers.GlobalAveragePooling2D()(conv(inputs))))
    kernel = np.stack([np.linspace(-1, 1, 9), np.linspace(1, -0.5, 9)], axis=-1)
    _set(conv, kernel.reshape(3, 3, 1, 2), [0.1, 0.2])
    weights = np.linspace(-1, 1.5, 2 * units).reshape(2, units) * scale
    _set(dense, weights, np.linspace(0.1, 0.3, units) * min(scale, 1.0))
    return model


@pytest.fixture(scope="module")
def model() -> keras.Model:
    return small_model()


# -- 1. scores and references, checked once for every method ------------------------------

#: (what, target, fragments of the one-line message).
BAD_TARGETS = [
    ("one score for two images", Score(lambda out: out[:1, 0]),
     ("Score function returned shape (1,) for a batch of 2 images", "shape (batch,)")),
    ("a flattened output", Score(lambda out: tf.reshape(out, [-1])),
     ("Score function returned shape (6,) for a batch of 2 images",)),
    ("a fixed length", Score(lambda out: tf.reduce_sum(out)[None]),
     ("Score function returned shape (1,) whatever the batch",)),
    ("a scalar", Score(lambda out: tf.reduce_sum(out)),
     ("Score function returned shape ()", "one score per image")),
    ("two scores per image", Score(lambda out: out[:, :2]),
     ("Score function returned shape (batch, 2)",)),
    ("None", Score(lambda out: None), ("Score function returned None",)),
    ("a string", Score(lambda out: "high"), ("Score function returned dtype string",)),
    ("an object", Score(lambda out: object()),
     ("Score function returned type object, not a tensor",)),
    ("a short embedding", Similarity(np.ones(5, np.float32)),
     ("Similarity reference has 5 values", "output has 3 per image")),
    ("an image of the wrong size", Similarity(np.ones((5, 5, 1), np.float32)),
     ("Similarity reference image is 5x5x1", "6x6x1")),
    ("an image of the wrong channels", Similarity(np.ones((6, 6, 3), np.float32)),
     ("Similarity reference image is 6x6x3", "6x6x1")),
]


@pytest.mark.parametrize("smooth", [0, 2], ids=["plain", "smoothgrad"])
@pytest.mark.parametrize("name", EVERY)
def test_a_bad_score_or_reference_is_one_line_for_every_method(model, name, smooth):
    explainer = Explainer(model, name, smooth=smooth, **SMALL)
    for what, target, fragments in BAD_TARGETS:
        with pytest.raises(ArgumentError) as raised:
            explainer.explain(IMAGES, target)
        message = str(raised.value)
        assert "\n" not in message and type(raised.value) is ArgumentError, (what, message)
        for fragment in fragments:
            assert fragment in message, (what, fragment, message)


@pytest.mark.parametrize("name", EVERY)
def test_a_bad_score_fails_before_any_method_runs(model, name):
    # No method runs half-way: a shape known when tracing fails the trace, before any
    # image goes through the model; one known only when it runs, the first batch.
    passes = tf.Variable(0)

    def counted(images, training=False):
        passes.assign_add(tf.shape(images)[0])
        return model(images, training=training)

    counted.inputs = model.inputs
    explainer = Explainer(counted, name, batch_size=1, **SMALL)
    with pytest.raises(ArgumentError, match="whatever the batch"):
        explainer.explain(IMAGES, Score(lambda out: tf.reduce_sum(out)[None]))
    assert int(passes.numpy()) == 0
    with pytest.raises(ArgumentError, match="for a batch of 1 image"):
        explainer.explain(IMAGES, Score(lambda out: tf.concat([out[:, 0], out[:, 1]], 0)))
    assert int(passes.numpy()) == 1


@pytest.mark.parametrize("name", EVERY)
def test_a_valid_score_explains_what_the_unit_explains(model, name):
    # The checks add nothing to the score: the same maps as Unit(1), for every method.
    explainer = Explainer(model, name, **SMALL)
    by_unit = explainer.explain(IMAGES, Unit(1))
    by_score = explainer.explain(IMAGES, Score(lambda out: out[:, 1]))
    np.testing.assert_allclose(by_score.maps, by_unit.maps, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(by_score.logits, np.asarray(model(IMAGES))[:, 1], rtol=1e-6)


def test_an_integer_score_is_accepted_and_a_boolean_refused(model):
    # An integer score counts (a black-box method reads it); it has no gradient, and the
    # gradient maps say so (a negligible map), as any flat score's do.
    explainer = Explainer(model, "vanilla,occlusion", patch=3, stride=3)
    counted = explainer.explain(IMAGES, Score(lambda out: tf.cast(out[:, 0] * 100, tf.int32)))
    np.testing.assert_array_equal(counted.logits,
                                  np.trunc(np.asarray(model(IMAGES))[:, 0] * 100))
    assert "negligible-map" in [c.code for c in counted.caveats_of(0)]
    with pytest.raises(ArgumentError, match="Score function returned dtype bool"):
        explainer.explain(IMAGES, Score(lambda out: out[:, 0] > 0))


def test_a_similarity_embedding_of_the_right_length_is_the_cosine(model):
    outputs = np.asarray(model(IMAGES), np.float64)
    reference = np.array([1.0, -2.0, 0.5])
    explained = Explainer(model, "vanilla").explain(IMAGES, Similarity(reference))
    cosine = outputs @ reference / np.linalg.norm(outputs, axis=1) / np.linalg.norm(reference)
    np.testing.assert_allclose(explained.logits, cosine, rtol=1e-5)


def test_a_similarity_to_a_free_size_embedding_is_checked_when_it_runs():
    # A fully convolutional embedding has no length until the images come: the check
    # happens on the first batch, still one line.
    inputs = keras.Input((None, None, 1))
    model = keras.Model(inputs, keras.layers.Conv2D(2, 3)(inputs))
    with pytest.raises(ArgumentError) as raised:
        Explainer(model, "vanilla").explain(IMAGES, Similarity(np.ones(5, np.float32)))
    assert str(raised.value) == ("the Similarity reference has 5 values; the output has 32 "
                                 "per image: give an embedding of 32 values, or a reference "
                                 "image")


def test_the_cli_reference_image_fits_the_model_whatever_its_size(ws):
    # --target similar:IMAGE: the reference (9x4 RGB here) is decoded and stretched as the
    # inputs are, so its embedding always fits; compared with itself it scores 1.
    out = ws / "out-reference"
    run_cli("explain", ws / "model.keras", ws / "ref.png", ws / "a.png", "-o", out,
            "--method", "vanilla,rise", "--masks", "8", "--target", f"similar:{ws}/ref.png",
            code=0)
    itself, other = strict_lines(out / "manifest.jsonl")
    assert itself["targets"][0]["value"] == pytest.approx(1.0, abs=1e-5)
    assert -1.0 <= other["targets"][0]["value"] < 1.0


# -- 2. a one-unit output with no head is a value ------------------------------------------


@pytest.fixture(scope="module")
def regressor() -> keras.Model:
    return small_model(units=1)


@pytest.fixture(scope="module")
def binary() -> keras.Model:
    return small_model(units=1, head="sigmoid")


def test_no_target_on_a_regressor_explains_its_value_and_says_so(regressor):
    value = np.asarray(regressor(IMAGES))[:, 0]
    explainer = Explainer(regressor, "vanilla,rise", **SMALL)
    with pytest.warns(ValueOutputWarning, match=r"one output unit with no sigmoid or softmax"
                      r" head: explaining its value, target=Unit\(0\), not a class"):
        explained = explainer.explain(IMAGES)
    assert explained.target.label == "unit:0"
    np.testing.assert_allclose(explained.logits, value, rtol=1e-6)  # not its sigmoid
    assert np.isnan(explained.probabilities).all()
    explicit = explainer.explain(IMAGES, Unit(0))
    for name in ("vanilla", "rise"):
        np.testing.assert_array_equal(explained.by_method[name], explicit.by_method[name])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        explainer.explain(IMAGES)  # said once per explainer


@pytest.mark.parametrize("call", [
    lambda e: e.explain(IMAGES, 1), lambda e: e.explain(IMAGES, Class(0)),
    lambda e: e.explain_top_k(IMAGES, 2), lambda e: e.explain_classes(IMAGES, [0]),
    lambda e: e.predict(IMAGES),
], ids=["int", "Class", "top_k", "classes", "predict"])
def test_a_class_of_a_regressor_is_refused_with_the_unit_hint(regressor, call):
    with pytest.raises(ArgumentError) as raised:
        call(Explainer(regressor, "vanilla"))
    assert str(raised.value) == (
        "the model's output has one unit and no sigmoid or softmax head: it is a value, not "
        "a class: explain it with target=Unit(0)")


def test_a_sigmoid_unit_stays_a_binary_classifier(binary):
    probability = np.asarray(binary(IMAGES))[:, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        explained = Explainer(binary, "vanilla").explain(IMAGES)
    expected = (probability >= 0.5).astype(int)
    np.testing.assert_array_equal(explained.targets, expected)
    np.testing.assert_allclose(explained.probabilities,
                               np.where(expected == 1, probability, 1 - probability), rtol=1e-6)
    assert Explainer(binary, "vanilla").report.num_classes == 2


@pytest.fixture(scope="module")
def ws(tmp_path_factory, regressor, binary) -> Path:
    root = tmp_path_factory.mktemp("target-checks")
    small_model().save(root / "model.keras")
    regressor.save(root / "reg.keras")
    binary.save(root / "binary.keras")
    small_model(scale=1e38).save(root / "inf.keras")
    small_model(units=1, scale=1e38).save(root / "inf1.keras")
    for index, name in enumerate(("a.png", "b.png")):
        pixels = np.random.default_rng(index).integers(0, 256, (6, 6), dtype=np.uint8)
        Image.fromarray(pixels).save(root / name)
    Image.fromarray(np.full((9, 4, 3), 200, np.uint8)).save(root / "ref.png")
    return root


def _refuse(constant):
    raise ValueError(f"not JSON: {constant}")


def strict_lines(path: Path) -> list[dict]:
    """The manifest's records, parsed as strict JSON (``JSON.parse`` rejects NaN and
    Infinity, and so does this)."""
    return [json.loads(line, parse_constant=_refuse)
            for line in path.read_text().splitlines()]


def test_the_cli_explains_a_regressors_value_and_says_so(ws, regressor):
    out = ws / "out-reg"
    result = run_cli("explain", ws / "reg.keras", ws / "a.png", ws / "b.png", "-o", out,
                     "--method", "vanilla", code=0)
    assert ("warning: one output unit with no sigmoid or softmax: explaining its value "
            "(unit:0), not a class; --target unit:0 says so explicitly") in result.stderr
    records = strict_lines(out / "manifest.jsonl")
    pictures = np.stack([np.asarray(Image.open(ws / name), np.float32)[..., None]
                         for name in ("a.png", "b.png")])
    values = np.asarray(regressor(pictures))[:, 0]
    for record, value in zip(records, values):
        (target,) = record["targets"]
        assert (record["status"], target["target"]["spec"]) == ("ok", "unit:0")
        assert record["score"] == pytest.approx(value, abs=1e-5)  # the value, no sigmoid
        assert target["value"] == pytest.approx(value, abs=1e-5)
        # Named as a plain run names its files: no target part.
        assert target["outputs"]["color"] == f"{Path(record['input']).name}.vanilla.color.png"


def test_explain_image_of_a_regressor_is_captioned_with_its_value(ws, regressor):
    pixels = np.asarray(Image.open(ws / "a.png"), np.float32)[None, ..., None]
    value = float(np.asarray(regressor(pixels))[0, 0])
    with pytest.warns(guidedbp.ValueOutputWarning):
        result = guidedbp.explain_image(ws / "reg.keras", ws / "a.png", methods="vanilla")
    assert result.explanation.target.label == "unit:0"
    assert result.explanation.logits[0] == pytest.approx(value, rel=1e-5)
    figure = guidedbp.plot.plot(result)
    assert figure._suptitle.get_text().startswith(f"unit:0 = {value:.3g}")


@pytest.mark.parametrize("flags, fragment", [
    (("--class", "1"), "--class 1"), (("--top-k", "2"), "--top-k 2"),
    (("--class", "0", "--target", "unit:0"), "--class 0"),
])
def test_the_cli_refuses_a_class_of_a_regressor(ws, flags, fragment):
    result = run_cli("explain", ws / "reg.keras", ws / "a.png", "-o", ws / "out-refused",
                     *flags)
    assert_one_line_error(result, fragment, "one unit and no sigmoid or softmax head",
                          "not a class", "--target unit:0")
    assert not (ws / "out-refused").exists()


def test_the_cli_keeps_a_sigmoid_unit_a_binary_classifier(ws, binary):
    out = ws / "out-binary"
    result = run_cli("explain", ws / "binary.keras", ws / "a.png", "-o", out,
                     "--method", "vanilla", code=0)
    assert "not a class" not in result.stderr
    (record,) = strict_lines(out / "manifest.jsonl")
    probability = float(np.asarray(binary(
        np.asarray(Image.open(ws / "a.png"), np.float32)[None, ..., None]))[0, 0])
    assert record["class"] == int(probability >= 0.5)
    assert record["score"] == pytest.approx(max(probability, 1 - probability), abs=1e-5)


def test_check_explains_a_regressors_value_as_explain_does(ws, regressor):
    result = run_cli("check", ws / "reg.keras", ws / "a.png", "--checks", "loads,self-test",
                     code=0)
    assert result.stdout.splitlines()[1] == "target: unit:0"
    value = float(np.asarray(regressor(
        np.asarray(Image.open(ws / "a.png"), np.float32)[None, ..., None]))[0, 0])
    assert f"target unit:0 = {value:.3g}" in result.stdout


def test_inspect_says_which_reading_applies(ws):
    value = json.loads(run_cli("inspect", ws / "reg.keras", "--json", code=0).stdout)
    assert value["default_target"] == "unit:0"
    assert value["outputs"][0]["targets"] == ["unit", "score"]
    assert value["classes"] == 0
    text = run_cli("inspect", ws / "reg.keras", code=0).stdout
    assert ("\ntarget      unit:0 when none is given: one output unit with no sigmoid or "
            "softmax is a value, not a class\n") in text
    binary = json.loads(run_cli("inspect", ws / "binary.keras", "--json", code=0).stdout)
    assert (binary["default_target"], binary["classes"]) == ("class", 2)
    assert binary["outputs"][0]["targets"] == ["unit", "class", "score"]
    text = run_cli("inspect", ws / "binary.keras", code=0).stdout
    assert ("\ntarget      the top class when none is given: a binary classifier (one logit "
            "z behind a sigmoid: class 1 scores z, class 0 scores -z)\n") in text


# -- 3. the public submodules from `import guidedbp` ---------------------------------------


def test_public_submodules_are_attributes_of_the_package_imported_on_first_use():
    code = (
        "import sys, guidedbp\n"
        "names = ('guidedbp.targets', 'guidedbp.plot', 'guidedbp.checks')\n"
        "before = [name in sys.modules for name in (*names, 'tensorflow')]\n"
        "listed = [name in dir(guidedbp) for name in ('targets', 'plot', 'checks')]\n"
        "label = guidedbp.targets.Region(1).label\n"
        "after = 'guidedbp.targets' in sys.modules, 'tensorflow' in sys.modules\n"
        "modules = type(guidedbp.plot).__name__, type(guidedbp.checks).__name__\n"
        "heavy = [name in sys.modules for name in ('tensorflow', 'matplotlib')]\n"
        "print(before, listed, label, after, modules, heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == ("[False, False, False, False] [True, True, True] "
                                     "region:1 (True, False) ('module', 'module') "
                                     "[False, False]")


def test_an_unknown_attribute_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'targetz'"):
        guidedbp.targetz  # noqa: B018


# -- 4. scores that are not finite ----------------------------------------------------------


#: Raw pixels: the weights of 1e38 take the outputs past float32's largest number.
PIXELS = IMAGES * 255


def test_a_score_that_is_not_finite_gets_a_caveat():
    model = small_model(scale=1e38)
    explained = Explainer(model, "vanilla").explain(PIXELS, Unit(1))
    assert not np.isfinite(explained.logits).any()
    for index in range(2):
        (caveat,) = [c for c in explained.caveats_of(index) if c.code == NON_FINITE_SCORE]
        assert caveat.text.startswith(f"unit:1's score ({explained.logits[index]}) is not "
                                      "finite: the model's output overflows on this image")
    finite = Explainer(small_model(), "vanilla").explain(PIXELS, Unit(1))
    assert NON_FINITE_SCORE not in [c.code for c in finite.caveats_of(0)]


def test_a_class_whose_probability_is_not_finite_gets_a_caveat():
    explained = Explainer(small_model(scale=1e38), "vanilla").explain(PIXELS)
    assert np.isnan(explained.probabilities).all()
    for index in range(2):
        assert NON_FINITE_SCORE in [c.code for c in explained.caveats_of(index)]


@pytest.mark.parametrize("model, flags", [
    ("inf.keras", ()), ("inf.keras", ("--target", "unit:1")), ("inf1.keras", ()),
    ("inf.keras", ("--method", "vanilla,occlusion", "--patch", "3", "--stride", "3")),
    ("inf.keras", ("--target", "similar:{ws}/ref.png")),
], ids=["class", "unit", "value", "occlusion", "similar"])
def test_a_run_fails_an_input_whose_score_is_not_finite_in_strict_json(ws, model, flags,
                                                                       request):
    out = ws / f"out-{request.node.callspec.id}"
    flags = tuple(flag.format(ws=ws) for flag in flags)
    result = run_cli("explain", ws / model, ws / "a.png", "-o", out, *flags, code=1)
    (record,) = strict_lines(out / "manifest.jsonl")
    assert record["status"] == "error" and record["score"] is None
    assert "is not finite: the model's output overflows on this image" in record["error"]
    assert "no maps written" in record["error"]
    assert [path.name for path in out.iterdir() if path.suffix == ".png"] == []
    assert "1 failed" in result.stderr


@pytest.mark.filterwarnings("ignore:no Rescaling")
def test_an_input_whose_map_is_not_finite_fails_before_any_file_is_written(tmp_path):
    # A finite score whose gradient is not (the square root's at a black pixel): the
    # input fails in one line, with no picture of the methods drawn before it left behind.
    inputs = keras.Input((6, 6, 1))
    rooted = keras.layers.Lambda(lambda x: tf.sqrt(x))(inputs)
    conv = keras.layers.Conv2D(2, 3, activation="relu")
    dense = keras.layers.Dense(3)
    model = keras.Model(inputs, dense(keras.layers.GlobalAveragePooling2D()(conv(rooted))))
    _set(conv, np.ones((3, 3, 1, 2)), [0.0, -1.0])
    _set(dense, [[1.0, 2.0, -1.0], [0.5, -1.0, 1.0]], [0.0, 0.0, 0.0])
    pixels = np.full((6, 6), 100, np.uint8)
    pixels[2, 3] = 0
    Image.fromarray(pixels).save(tmp_path / "a.png")
    summary = guidedbp.explain_files(model, tmp_path / "a.png", tmp_path / "out",
                                     methods="gradcam,vanilla")
    (failure,) = summary.failures
    assert failure[1] == "its vanilla map has NaN or infinite values; no maps written"
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        "index.html", "manifest.jsonl"]
    (record,) = strict_lines(tmp_path / "out" / "manifest.jsonl")
    assert record["status"] == "error"


def test_manifest_writers_write_strict_json(tmp_path):
    from guidedbp.io.manifest import ManifestWriter

    record = {"score": math.inf, "targets": [{"value": math.nan, "score": -math.inf}],
              "ok": 0.5}
    with ManifestWriter(tmp_path / "m.jsonl") as writer:
        writer.write(record)
    assert strict_lines(tmp_path / "m.jsonl") == [
        {"score": None, "targets": [{"value": None, "score": None}], "ok": 0.5}]


def test_evaluate_json_of_a_segmentation_with_no_pixel_is_strict():
    # evaluate --json's segmentation record has a NaN mean IoU when no class has a pixel:
    # the command writes it through the strict writer, as null.
    from guidedbp._json import dumps
    from guidedbp.cli.evaluate_regions import segmentation_record

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy: the mean of no value
        record = segmentation_record(np.zeros((2, 2), np.int64), ["a", "b"])
    assert math.isnan(record["mean_iou"])
    with pytest.raises(ValueError):
        json.dumps(record, allow_nan=False)
    parsed = json.loads(dumps(record, indent=2), parse_constant=_refuse)
    assert parsed["mean_iou"] is None and parsed["iou"] == {"a": None, "b": None}
