"""Caveats travel with the maps: the engine's Explanation, the package's Explainer and
explain_image, each manifest record, panels and figures (issue 19, item 4).

The models are tiny and exact: a network with no activation (so guided equals the plain
gradient; a swish/GELU one is guided by the generalised rule now), a ReLU network without
a Rescaling layer fed raw 0-255 pixels, and a linear model whose input gradient is a
chosen power of two (so the negligible-map criterion can be checked on both sides of its
threshold by hand).
"""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np
import pytest
from PIL import Image

import guidedbp
from guidedbp import caveats as caveat_kinds
from guidedbp import plot as plotting
from guidedbp.caveats import NEGLIGIBLE_EFFECT, Caveat
from guidedbp.engine.explainer import Explainer as EngineExplainer
from guidedbp.engine.explainer import NoReluWarning
from guidedbp.models.loading import load_model
from guidedbp.pipeline.run import ModelWarning
from tests import models
from tests.helpers import tinted_noise

NO_GUIDED = {"code": "no-guided-activation", "method": "guided",
             "text": "guided = plain gradient: the model has no guided activation"}
NO_RESCALING = {"code": "no-rescaling",
                "text": "raw 0-255 pixels fed to a model with no Rescaling/Normalization "
                        "layer: wrong if it was trained on scaled pixels"}
INK = np.array([170, 30, 0])  # the panels' caveat ink (guidedbp/render/panel.py)


@pytest.fixture(scope="module")
def swish():
    return models.swish_cnn(("linear", "linear"))  # nothing for any rule to guide


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("caveat-inputs")
    for seed in range(2):
        Image.fromarray(tinted_noise(20, 24, seed=seed)).save(folder / f"photo{seed}.png")
    return folder


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


def red_ink(picture: np.ndarray) -> np.ndarray:
    """Where a picture holds the caveat ink (within a few levels)."""
    return np.all(np.abs(picture.astype(int) - INK) <= 6, axis=-1)


# -- the engine -------------------------------------------------------------------------


def test_engine_explanation_says_guided_is_the_plain_gradient(swish):
    images = tinted_noise(16, 16, seed=3)[None].astype(np.float32).repeat(2, axis=0)
    with pytest.warns(NoReluWarning):  # the warning stays as it was
        explanation = EngineExplainer(swish, method=("vanilla", "guided")).explain(images)
    np.testing.assert_array_equal(explanation.by_method["guided"],
                                  explanation.by_method["vanilla"])
    expected = (Caveat("no-guided-activation", NO_GUIDED["text"], "guided"),)
    assert explanation.caveats == (expected, expected)
    assert explanation.caveats_of(1)[0].as_record() == NO_GUIDED
    # The plain gradient alone has nothing to say, and a ReLU model neither.
    assert EngineExplainer(swish, method="vanilla").explain(images).caveats == ((), ())
    relu = EngineExplainer(models.cnn(), method="guided")
    assert relu.explain(np.full((1, 3, 3, 1), 2.0, np.float32)).caveats == ((),)
    # An all-zero map (every ReLU shut: 1 - 1 + 1 + 1 - 2 = 0) is negligible too.
    (zero,) = relu.explain(np.ones((1, 3, 3, 1), np.float32)).caveats_of(0)
    assert (zero.code, zero.text) == ("negligible-map",
                                      "negligible map: it is all zero (flat in every render)")


def test_every_guided_method_is_named_in_its_own_caveat(swish):
    images = tinted_noise(16, 16, seed=3)[None].astype(np.float32)
    with pytest.warns(NoReluWarning):
        explanation = EngineExplainer(swish, method="deconvnet,guided-gradcam").explain(images)
    assert [(c.method, c.text) for c in explanation.caveats_of(0)] == [
        ("deconvnet", "deconvnet = plain gradient: the model has no ReLU-family activation "
                      "(--guide relu)"),
        ("guided-gradcam",
         "guided-gradcam = plain gradient x gradcam: the model has no guided activation")]


@pytest.mark.parametrize("exponent, negligible", [(-40, True), (-30, False)])
def test_negligible_map_criterion_on_both_sides(exponent, negligible):
    # Class 0 is the sum of the pixels times 2**exponent: the gradient is that everywhere,
    # and moving all 16 pixels from black to white moves the logit by 16 * 255 * it.
    model = models.scaled_linear(2.0**exponent)
    explanation = EngineExplainer(model, method="vanilla").explain(
        np.full((1, 4, 4, 1), 7.0, np.float32), target=0)
    np.testing.assert_array_equal(explanation.maps, np.full((1, 4, 4, 1), 2.0**exponent))
    effect = 16 * 255 * 2.0**exponent
    assert (effect < NEGLIGIBLE_EFFECT) is negligible
    if negligible:
        (caveat,) = explanation.caveats_of(0)
        assert (caveat.code, caveat.method) == ("negligible-map", "vanilla")
        assert f"by {effect:.2g}, below float32 resolution (1.2e-07)" in caveat.text
    else:
        assert explanation.caveats_of(0) == ()


def test_integrated_gradients_are_measured_in_the_scores_units():
    # (x - black) * gradient: 7 * 2**-40 on each of 16 pixels, summed: 112 * 2**-40.
    model = models.scaled_linear(2.0**-40)
    explanation = EngineExplainer(model, method="integrated-gradients", steps=4).explain(
        np.full((1, 4, 4, 1), 7.0, np.float32), target=0)
    np.testing.assert_allclose(explanation.maps, 7 * 2.0**-40, rtol=1e-6)
    (caveat,) = explanation.caveats_of(0)
    assert (caveat.code, caveat.method) == ("negligible-map", "integrated-gradients")
    assert f"by {112 * 2.0**-40:.2g}," in caveat.text


def test_negligible_span_is_the_models_own_pixel_range():
    # 16 pixels with a gradient of 2**-28: from black to white at 0..255 (a span of 255)
    # they move the logit by 255 * 2**-24, above 2**-23; with pixels mapped to [0, 1]
    # (a span of 1) by 2**-24, below it.
    model = models.scaled_linear(2.0**-28)
    images = np.full((1, 4, 4, 1), 0.5, np.float32)
    raw = EngineExplainer(model, method="vanilla").explain(images, target=0)
    assert raw.caveats_of(0) == ()
    scaled = EngineExplainer(model, method="vanilla", pixel_to_input=lambda p: p / 255.0)
    assert [c.code for c in scaled.explain(images, target=0).caveats_of(0)] == ["negligible-map"]


def test_a_capped_scorecam_says_how_many_channels_it_kept():
    # Seeded, on pixels in [0, 1]: on raw 0-255 pixels its ReLU6 could saturate (unseeded
    # weights), a constant Score-CAM map that rightly adds a negligible-map caveat.
    keras.utils.set_random_seed(2)
    model = models.mixed_relu_cnn()  # its last 4-D layer has 4 channels
    images = tinted_noise(8, 8, seed=2)[None].astype(np.float32) / 255
    capped = EngineExplainer(model, method="scorecam", max_channels=3).explain(images)
    assert [c.as_record() for c in capped.caveats_of(0)] == [{
        "code": "scorecam-capped", "method": "scorecam",
        "text": "scorecam used only the 3 most active of 4 feature channels"}]
    whole = EngineExplainer(model, method="scorecam", max_channels=4).explain(images)
    assert whole.caveats_of(0) == ()


# -- the package's Explainer and explain_image ------------------------------------------------


def test_package_explainer_adds_the_models_caveats_first(swish):
    images = np.full((1, 3, 3, 1), 200.0, np.float32)
    loaded = load_model(models.cnn())  # no Rescaling layer: raw 0-255 pixels go in
    assert [c.as_record() for c in loaded.caveats] == [NO_RESCALING]
    explanation = guidedbp.Explainer(loaded).explain(images)
    assert [c.as_record() for c in explanation.caveats_of(0)] == [NO_RESCALING]
    # Choosing a preprocessing answers it.
    assert guidedbp.Explainer(loaded, preprocess="tf").explain(images).caveats_of(0) == ()
    with pytest.warns(NoReluWarning):
        both = guidedbp.Explainer(load_model(models.gelu_cnn("linear")), method="guided").explain(
            np.ones((1, 5, 5, 1), np.float32))
    assert [c.code for c in both.caveats_of(0)] == ["no-rescaling", "no-guided-activation"]


def test_a_model_that_rescales_itself_has_no_model_caveat(swish):
    # keras:NAME --weights none's untrained-weights: tests/test_loading.py (MobileNetV2).
    assert load_model(swish).caveats == ()


def test_explain_image_and_its_figure_carry_the_line(swish, inputs):
    with pytest.warns(NoReluWarning):
        result = guidedbp.explain_image(swish, inputs / "photo0.png", methods="guided,vanilla")
    assert [c.as_record() for c in result.caveats] == [NO_GUIDED]
    figure = plotting.plot(result)
    title = figure.get_suptitle().splitlines()
    assert title[1:] == ["\u26a0 " + NO_GUIDED["text"]]
    assert title[0].startswith("class ")
    # Only the methods a caveat concerns bring it.
    assert plotting.plot(result, methods="vanilla").get_suptitle() == title[0]


def test_figure_caveat_lines_are_drawn_under_the_title():
    picture = np.zeros((6, 6), np.uint8)
    maps = {"guided": np.linspace(-1, 1, 36).reshape(6, 6, 1)}
    plain = plotting.draw(picture, maps, "class 3 p=0.250")
    warned = plotting.draw(picture, maps, "class 3 p=0.250", caveats=["one", "two"])
    assert warned.get_suptitle() == "class 3 p=0.250\n\u26a0 one\n\u26a0 two"
    assert warned.get_figheight() == pytest.approx(plain.get_figheight() + 0.4)
    # The maps sit lower, under the longer title.
    assert warned.axes[1].get_position().y1 < plain.axes[1].get_position().y1
    with pytest.raises(guidedbp.errors.ArgumentError, match="caveats must be a sequence"):
        plotting.draw(picture, maps, "t", caveats="one")


# -- manifest records and panels ---------------------------------------------------------


@pytest.fixture(scope="module")
def swish_run(swish, inputs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("swish") / "out"
    with pytest.warns(NoReluWarning):
        summary = guidedbp.explain_files(swish, str(inputs), str(out), methods="guided",
                                         renders="panel,color", figure="svg")
    assert summary.exit_code == 0
    return out


def test_manifest_records_list_the_no_guided_caveat(swish_run):
    for record in records(swish_run):
        assert record["caveats"] == [NO_GUIDED]
        assert record["targets"][0]["caveats"] == [NO_GUIDED]


def test_the_runs_figures_carry_the_caveat_line(swish_run):
    for record in records(swish_run):
        svg = (swish_run / record["outputs"]["figure"]).read_text()
        assert "\u26a0 guided = plain gradient: the model has no guided activation" in svg


def test_panel_carries_the_caveat_line_and_plain_renders_do_not(swish_run, inputs,
                                                                 tmp_path):
    (record, _) = records(swish_run)
    panel = np.asarray(Image.open(swish_run / record["outputs"]["panel"]))
    color = np.asarray(Image.open(swish_run / record["outputs"]["color"]))
    assert not red_ink(color).any()
    rows = np.flatnonzero(red_ink(panel).any(axis=1))
    assert rows.size > 5  # a line of dark-red text ...
    assert rows.max() - rows.min() < 20  # ... one line high, ...
    assert (np.abs(panel[rows.min():rows.max() + 1].astype(int) - [255, 176, 0]) <= 6).all(
        axis=-1).any()  # ... after the amber warning sign
    # The same panel of a ReLU model (no caveat) holds no such ink, and is shorter by it.
    out = tmp_path / "relu"
    summary = guidedbp.explain_files(models.swish_cnn(("relu", "gelu")),
                                     str(inputs / "photo0.png"), str(out), methods="guided",
                                     renders="panel")
    assert summary.exit_code == 0
    (plain,) = records(out)
    assert plain["caveats"] == []
    plain_panel = np.asarray(Image.open(out / plain["outputs"]["panel"]))
    assert not red_ink(plain_panel).any()
    assert panel.shape[1] == plain_panel.shape[1]
    assert panel.shape[0] - plain_panel.shape[0] >= rows.max() - rows.min() + 1


def test_skip_existing_carries_the_records_caveats(swish, swish_run, inputs):
    before = records(swish_run)
    with pytest.warns(NoReluWarning):
        summary = guidedbp.explain_files(swish, str(inputs), str(swish_run), methods="guided",
                                         renders="panel,color", figure="svg",
                                         skip_existing=True)
    assert (summary.skipped, summary.done) == (2, 0)
    assert records(swish_run) == before


def test_manifest_record_of_unscaled_pixels(inputs, tmp_path):
    out = tmp_path / "out"
    with pytest.warns(ModelWarning, match="no Rescaling/Normalization layer"):  # as before
        summary = guidedbp.explain_files(models.cnn(), str(inputs / "photo0.png"), str(out),
                                         methods="guided")
    assert summary.exit_code == 0
    (record,) = records(out)
    assert record["caveats"] == [NO_RESCALING]
    # Raw pixels chosen on purpose: nothing to warn about.
    out = tmp_path / "chosen"
    guidedbp.explain_files(models.cnn(), str(inputs / "photo0.png"), str(out),
                           methods="guided", load={"preprocess": "none"})
    assert records(out)[0]["caveats"] == []


def test_manifest_record_of_a_negligible_map(inputs, tmp_path):
    out = tmp_path / "out"
    summary = guidedbp.explain_files(models.scaled_linear(2.0**-40), str(inputs / "photo0.png"),
                                     str(out), methods="vanilla", classes=[0], renders="panel")
    assert summary.exit_code == 0
    (record,) = records(out)
    ((code, method),) = [(c["code"], c.get("method")) for c in record["caveats"]]
    assert (code, method) == ("negligible-map", "vanilla")
    panel = np.asarray(Image.open(out / record["outputs"]["panel"]))
    assert red_ink(panel).any()


def test_caveat_codes_are_the_documented_ones():
    assert caveat_kinds.CODES == ("untrained-weights", "no-guided-activation", "no-rescaling",
                                  "negligible-map", "scorecam-capped", "empty-region",
                                  "non-finite-score", "unguided-activation",
                                  "mixed-precision-drift", "no-detection")
    # Each code has its row in the table of the Caveats page, in the order of CODES.
    page = (Path(__file__).resolve().parents[1] / "docs" / "caveats.md").read_text()
    rows = [line.split("|")[1].strip() for line in page.splitlines()
            if line.startswith("| `")]
    assert rows == [f"`{code}`" for code in caveat_kinds.CODES]
    with pytest.raises(ValueError, match="unknown caveat code 'nope'"):
        Caveat("nope", "text")
