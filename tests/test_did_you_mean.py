"""An unknown name is refused with what would have been valid, and a "did you mean" where
one is close: classes, layers, colormaps, renders, methods and the other choices.

Issue 19, item 6.
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import guidedbp._text
from guidedbp import Explainer, RunOptions
from guidedbp.errors import ArgumentError
from guidedbp.render import apply_colormap, render

from . import zoo
from .helpers import assert_one_line_error, run_cli
from .models import cam_cnn

STAR = "sample_images/shapes/star_0.png"


def test_the_text_helpers_examples_hold():
    assert doctest.testmod(guidedbp._text).failed == 0


def test_an_unknown_class_lists_the_demo_classes(tmp_path):
    result = run_cli("explain", "demo", STAR, "-o", tmp_path / "out", "--class", "hexagon")
    assert_one_line_error(result, "unknown class 'hexagon': the classes are circle, square, "
                                  "triangle, star, ring, cross")
    result = run_cli("explain", "demo", STAR, "-o", tmp_path / "out", "--class", "cirle")
    assert_one_line_error(result, "unknown class 'cirle' (did you mean 'circle'?): the classes")


def test_an_unknown_layer_lists_the_layers_with_a_4d_output(tmp_path):
    result = run_cli("explain", "demo", STAR, "-o", tmp_path / "out", "--method", "gradcam",
                     "--layer", "conv55")
    assert_one_line_error(result, "no layer named 'conv55'", "(did you mean 'conv5'",
                          "; layers with a 4-D output: rescale, conv1, pool1, conv2, pool2, "
                          "conv3, pool3, conv4, pool4, conv5")
    result = run_cli("explain", "demo", STAR, "-o", tmp_path / "out", "--method", "gradcam",
                     "--layer", "gap")
    assert_one_line_error(result, "layer 'gap' outputs shape (None, 64)",
                          "layers with a 4-D output: rescale, conv1,")


def test_layers_inside_a_nested_model_are_listed_by_their_own_names():
    explainer = Explainer(cam_cnn(nested=True), "gradcam", layer="pol")
    with pytest.raises(ArgumentError, match=r"\(did you mean 'pool'\?\); layers with a 4-D "
                                            r"output: conv, pool$"):
        explainer(np.ones((1, 4, 4, 1), np.float32))


@pytest.mark.parametrize(("flag", "value", "meant"), [
    ("--cmap", "infern", "inferno"),
    ("--render", "color,overlai", "overlay"),
    ("--method", "guided,gradcamm", "gradcam"),
    ("--output-size", "modl", "model"),
    ("--resize", "crp", "crop"),
    ("--upsample", "bilinar", "bilinear"),
])
def test_an_unknown_choice_says_what_was_meant(tmp_path, flag, value, meant):
    result = run_cli("explain", "demo", STAR, "-o", tmp_path / "out", flag, value)
    assert result.exit_code == 2 and "Traceback" not in result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"Error: Invalid value for '{flag}'")
    assert f"(did you mean '{meant}'" in line and line.endswith("?)"), line


def test_a_far_name_gets_the_list_and_no_guess(tmp_path):
    result = run_cli("explain", "demo", STAR, "-o", tmp_path / "out", "--cmap", "zzz")
    assert result.exit_code == 2 and "did you mean" not in result.stderr
    assert "'inferno', 'viridis'" in result.stderr


@pytest.mark.parametrize(("fields", "meant"), [
    ({"cmap": "infern"}, "inferno"),
    ({"renders": "panle"}, "panel"),
    ({"methods": "guidd"}, "guided"),
    ({"class_": "cat"}, "classes"),
])
def test_the_library_says_what_was_meant_too(fields, meant):
    with pytest.raises(ArgumentError, match=f"did you mean '{meant}'"):
        RunOptions.of(**fields)


def test_render_and_colormap_functions_say_what_was_meant():
    with pytest.raises(ValueError, match=r"unknown render 'overlai' \(did you mean 'overlay'\?\)"):
        render("overlai", np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ValueError, match=r"unknown colormap 'viridi' \(did you mean 'viridis'"):
        apply_colormap(np.zeros((2, 2), np.float32), "viridi")


def test_a_savedmodel_lists_the_name_scopes_of_its_4d_outputs(tmp_path):
    import guidedbp

    exported = zoo.saved("cam_cnn", cam_cnn, ("savedmodel",))["savedmodel"]  # shared, cached
    loaded = guidedbp.load_model(str(exported))
    with pytest.raises(ArgumentError) as caught:
        Explainer(loaded, "gradcam", layer="pol")(np.ones((1, 4, 4, 1), np.float32))
    message = str(caught.value)
    assert "(did you mean 'pool" in message
    listed = message.split("layers with a 4-D output: ")[1].split(", ")
    assert [name.split("_")[0] for name in listed[-2:]] == ["conv", "pool"]
    for name in listed[-2:]:  # each listed name is one the explainer takes
        maps = Explainer(loaded, "gradcam", layer=name)(np.ones((1, 4, 4, 1), np.float32))
        assert maps.shape == (1, 4, 4, 1)
