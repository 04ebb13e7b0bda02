"""Maps that say nothing say so (issue 33, section 3): ``evaluate`` leaves constant maps and
masks without a pixel out of its scores and names them; every method's constant map carries
the ``negligible-map`` caveat (class activation maps, perturbation maps and VarGrad too);
VarGrad over identical copies is exactly zero.

The models are tiny and exact: one whose output does not depend on its input (every map is
zero), the corner model of :func:`tests.models.corner_cnn` (a black image shuts its ReLU,
so its maps are zero), and a 1x1-convolution model whose class 0 has negative weights
behind a global average (its gradient at the feature map is negative everywhere, so every
gradient-weighted CAM of class 0 is zero, while class 1's is ``(3x + 2) / 36``).
"""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np
import pytest
from PIL import Image

from guidedbp.caveats import NEGLIGIBLE_MAP
from guidedbp.engine.explainer import Explainer as EngineExplainer
from guidedbp.engine.methods import averaging as _averaging

from .helpers import run_cli, tinted_noise
from .models import corner_cnn

ZERO_TEXT = "negligible map: it is all zero (flat in every render)"
INK = np.array([170, 30, 0])  # the panels' caveat ink (guidedbp/render/panel.py)


def constant_output_model() -> keras.Model:
    """8x8x1 -> Conv2D(1, 1x1, relu, zero kernel and bias) "conv" -> Flatten -> Dense(2),
    biases (1, 0): the logits are (1, 0) whatever the image, every map is zero."""
    inputs = keras.Input((8, 8, 1))
    conv = keras.layers.Conv2D(1, 1, activation="relu", name="conv")
    dense = keras.layers.Dense(2)
    model = keras.Model(inputs, dense(keras.layers.Flatten()(conv(inputs))), name="constant")
    conv.set_weights([np.zeros((1, 1, 1, 1), np.float32), np.zeros(1, np.float32)])
    dense.set_weights([np.ones((64, 2), np.float32), np.array([1.0, 0.0], np.float32)])
    return model


def negative_cam_cnn() -> keras.Model:
    """6x6x1 -> Conv2D(2, 1x1, relu; w = (1, 2), b = (1, 1)) "conv" -> global average ->
    Dense(2), class 0 = (-1, -1), class 1 = (1, 1), no bias.

    On non-negative pixels x both channels are active (x + 1 and 2x + 1). Class 0's gradient
    at "conv" is -1/36 everywhere: Grad-CAM, Grad-CAM++ and LayerCAM of class 0 are zero.
    Class 1's is +1/36: its Grad-CAM and LayerCAM are (3x + 2) / 36 per pixel."""
    inputs = keras.Input((6, 6, 1))
    conv = keras.layers.Conv2D(2, 1, activation="relu", name="conv")
    dense = keras.layers.Dense(2, use_bias=False)
    model = keras.Model(inputs, dense(keras.layers.GlobalAveragePooling2D()(conv(inputs))),
                        name="negative_cam")
    conv.set_weights([np.array([1.0, 2.0], np.float32).reshape(1, 1, 1, 2),
                      np.ones(2, np.float32)])
    dense.set_weights([np.array([[-1.0, 1.0], [-1.0, 1.0]], np.float32)])
    return model


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


def red_ink(picture: np.ndarray) -> np.ndarray:
    return np.all(np.abs(picture.astype(int) - INK) <= 6, axis=-1)


def save_gray(path: Path, pixels) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(pixels, np.uint8), "L").save(path)


# -- evaluate: constant maps and masks without a pixel ------------------------------------


@pytest.fixture(scope="module")
def constant(tmp_path_factory):
    """The constant-output model, and two noise images: "near" with its object at the
    top-left corner (the argmax of a zero map is pixel (0, 0)), "far" with it at the
    bottom-right."""
    folder = tmp_path_factory.mktemp("constant")
    constant_output_model().save(folder / "m.keras")
    near, far = np.zeros((8, 8), np.uint8), np.zeros((8, 8), np.uint8)
    near[:2, :2] = 255
    far[6:, 6:] = 255
    for name, mask, seed in (("near", near, 0), ("far", far, 1)):
        save_gray(folder / "images" / f"{name}.png", tinted_noise(8, 8, 1, seed=seed))
        save_gray(folder / "masks" / f"{name}.png", mask)
    return folder


@pytest.fixture(scope="module")
def corner(tmp_path_factory):
    """The corner model; "on" (constant 100: its map is the top-left block) and "black"
    (all 0: every ReLU shut, its map is zero) with masks on the top-left block, "blank"
    (constant 100) with a mask of no pixel."""
    folder = tmp_path_factory.mktemp("corner")
    corner_cnn().save(folder / "m.keras")
    (folder / "labels.txt").write_text("corner\nfar\n")
    block = np.zeros((8, 8), np.uint8)
    block[:3, :3] = 255
    for name, value, mask in (("on", 100, block), ("black", 0, block),
                              ("blank", 100, np.zeros((8, 8)))):
        save_gray(folder / "images" / f"{name}.png", np.full((8, 8), value))
        save_gray(folder / "masks" / f"{name}.png", mask)
    return folder


def evaluate(folder: Path, *args, masks: bool = True):
    extra = ("--masks", folder / "masks") if masks else ()
    labels = ("--labels", folder / "labels.txt") if (folder / "labels.txt").exists() else ()
    return run_cli("evaluate", folder / "m.keras", folder / "images", *extra, *labels,
                   "--preprocess", "none", *args, code=0)


def names(paths) -> list[str]:
    return sorted(Path(path).name for path in paths)


def test_constant_maps_are_not_scored_by_the_mask_metrics(constant):
    # Before: pointing 1.000 ("near": the zero map's argmax (0, 0) is on the object) and
    # 0.000 ("far"), energy 0, for every method, as if measured.
    result = json.loads(evaluate(constant, "--method", "guided,vanilla,gradcam",
                                 "--tolerance", "2", "--json").stdout)
    for method in ("guided", "vanilla", "gradcam"):
        (row,) = [r for r in result["results"] if r["method"] == method
                  and r["class"] == "overall"]
        assert row == {"method": method, "class": "overall", "n": 2, "constant": 2,
                       "pointing_game": None, "energy_inside": None}
        assert names(result["constant_maps"][method]) == ["far.png", "near.png"]
    assert result["empty_masks"] == []
    assert {(c["code"], c["method"]) for c in result["caveats"]} == {
        (NEGLIGIBLE_MAP, m) for m in ("guided", "vanilla", "gradcam")}
    assert "2 of 2 maps constant" in result["caveats"][0]["text"]


def test_the_table_names_the_constant_maps_and_shows_no_score(constant):
    lines = evaluate(constant, "--method", "guided,gradcam", "--tolerance", "2"
                     ).stdout.splitlines()
    start = lines.index("pointing game (within 2 px)")
    assert lines[start + 1].split() == ["class", "n", "guided", "gradcam"]
    assert lines[start + 3].split() == ["overall", "2", "-", "-"]
    assert "guided: 2 of 2 maps constant (max_c |map| the same at every pixel), not scored" \
        in lines
    assert "gradcam: 2 of 2 maps constant (max_c |map| the same at every pixel), not scored" \
        in lines
    assert "1.000" not in "\n".join(lines) and "0.000" not in "\n".join(lines)


def test_some_constant_maps_and_a_mask_without_a_pixel(corner):
    # Before: 3 images scored; "black"'s zero map hit the top-left mask from (0, 0) with no
    # energy inside, "blank" missed its empty mask: pointing 0.667, energy 0.333.
    result = json.loads(evaluate(corner, "--method", "guided,vanilla", "--tolerance", "2",
                                 "--json").stdout)
    for method in ("guided", "vanilla"):
        rows = [r for r in result["results"] if r["method"] == method]
        assert [r["class"] for r in rows] == ["corner", "overall"]
        for row in rows:  # "on" alone is scored: its map is the block, inside the mask
            assert (row["n"], row["constant"], row["pointing_game"], row["energy_inside"]
                    ) == (2, 1, 1.0, 1.0)
        assert names(result["constant_maps"][method]) == ["black.png"]
    assert names(result["empty_masks"]) == ["blank.png"]
    lines = evaluate(corner, "--method", "guided", "--tolerance", "2").stdout.splitlines()
    assert "guided: 1 of 3 maps constant (max_c |map| the same at every pixel), not scored" \
        in lines
    assert any(line.startswith("1 image without a mask pixel, not scored: ")
               and line.endswith("blank.png") for line in lines)


def test_families_and_games_leave_constant_maps_out(constant):
    # Before: a zero map is perfectly stable (max-sensitivity 0.000, the best there is), of
    # sparseness 0 and complexity log 64, and ranks pixels in row-major order for the games.
    asked = "deletion,max-sensitivity,avg-sensitivity,sparseness,complexity,random-logit"
    result = json.loads(evaluate(constant, "--method", "guided,gradcam", "--metric", asked,
                                 "--steps", "4", "--json", masks=False).stdout)
    for name, entry in result["scores"]["metrics"].items():
        for method in ("guided", "gradcam"):
            assert entry["methods"][method] == {"mean": None, "values": [None, None]}, name
    for method in ("guided", "gradcam"):
        deletion = result["faithfulness"]["methods"][method]["deletion"]
        assert (deletion["mean_auc"], deletion["auc"]) == (None, [None, None])
    lines = evaluate(constant, "--method", "guided,gradcam", "--metric", asked, "--steps", "4",
                     masks=False).stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ranking: "))
    for method in ("guided", "gradcam"):  # a block per family: 1, 2, 2 and 1 metrics
        cells = [cell for line in lines[start:] if line.split()[:1] == [method]
                 for cell in line.split()[1:]]
        assert cells == ["-"] * 6, (method, cells)
    assert "guided: 2 of 2 maps constant (max_c |map| the same at every pixel), not scored" \
        in lines


def test_the_other_maps_keep_their_values(corner, tmp_path):
    # "black" (a zero map) beside "on" leaves "on"'s values as they are alone.
    asked = "deletion,insertion,max-sensitivity,sparseness,complexity"
    both = json.loads(evaluate(corner, "--method", "guided", "--metric", asked, "--steps", "4",
                               "--baseline", "black", "--json", masks=False).stdout)
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "on.png").write_bytes((corner / "images" / "on.png").read_bytes())
    (tmp_path / "m.keras").write_bytes((corner / "m.keras").read_bytes())
    alone = json.loads(evaluate(tmp_path, "--method", "guided", "--metric", asked, "--steps",
                                "4", "--baseline", "black", "--json", masks=False).stdout)
    order = [Path(image["image"]).name for image in both["faithfulness"]["images"]]
    on, black = order.index("on.png"), order.index("black.png")
    for game in ("deletion", "insertion"):
        found = both["faithfulness"]["methods"]["guided"][game]
        expected = alone["faithfulness"]["methods"]["guided"][game]
        assert found["auc"][on] == expected["auc"][0] and found["auc"][black] is None
        assert found["mean_auc"] == expected["mean_auc"]
    for name, entry in both["scores"]["metrics"].items():
        values = entry["methods"]["guided"]["values"]
        assert values[black] is None, name
        assert values[on] == alone["scores"]["metrics"][name]["methods"]["guided"]["values"][0]
    assert both["scores"]["metrics"]["sparseness"]["methods"]["guided"]["values"][on] == \
        15 / 16  # the Gini index of 4 ones among 64 pixels


def test_plot_curves_leaves_a_constant_maps_curve_out(corner, tmp_path):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "curves"
    evaluate(corner, "--method", "guided", "--metric", "deletion", "--steps", "4",
             "--plot-curves", folder, masks=False)
    # "black"'s only map is constant: no curve to draw, no figure; the others have theirs.
    assert names(folder.rglob("*.png")) == ["blank.png.deletion.png", "on.png.deletion.png"]


def test_a_segmentation_model_of_constant_output(tmp_path):
    # 1x1 convolutions, the first with a zero kernel (its ReLUs shut): every region's maps
    # are zero. Before, scored as misses (pointing and energy 0.000: no shape at the corner).
    from guidedbp.demo.segmentation import SEG_CLASS_NAMES

    inputs = keras.Input((96, 96, 3))
    features = keras.layers.Conv2D(2, 1, activation="relu", name="features")
    top = keras.layers.Conv2D(len(SEG_CLASS_NAMES), 1)
    model = keras.Model(inputs, top(features(inputs)))
    features.set_weights([np.zeros((1, 1, 3, 2), np.float32), np.zeros(2, np.float32)])
    top.set_weights([np.ones((1, 1, 2, 7), np.float32), np.arange(7, dtype=np.float32)])
    model.save(tmp_path / "seg.keras")
    (tmp_path / "labels.txt").write_text("\n".join(SEG_CLASS_NAMES) + "\n")
    result = json.loads(run_cli("evaluate", tmp_path / "seg.keras", "--shapes", "2",
                                "--labels", tmp_path / "labels.txt", "--method",
                                "vanilla,gradcam", "--json", code=0).stdout)
    for row in result["results"]:
        assert (row["constant"], row["pointing_game"], row["energy_inside"],
                row.get("energy_within_reach")) == (row["n"], None, None, None)
    assert result["constant_maps"] == {"vanilla": ["shape0", "shape1"],
                                       "gradcam": ["shape0", "shape1"]}


# -- the engine's caveat on every method's constant map ------------------------------------


@pytest.fixture(scope="module")
def negative():
    return negative_cam_cnn()


X6 = (np.arange(36, dtype=np.float32).reshape(1, 6, 6, 1) / 4.0)  # distinct pixels >= 0


def test_all_zero_cams_carry_the_caveat(negative):
    cams = ("gradcam", "gradcam++", "layercam", "hirescam", "xgradcam", "guided-gradcam++")
    explanation = EngineExplainer(negative, method=cams).explain(X6, target=0)
    for name in cams:
        np.testing.assert_array_equal(explanation.by_method[name], 0)
    found = {(c.code, c.method, c.text) for c in explanation.caveats_of(0)}
    assert found == {(NEGLIGIBLE_MAP, name, ZERO_TEXT) for name in cams}
    # Class 1: (3x + 2) / 36, not constant: nothing to say.
    other = EngineExplainer(negative, method=cams[:3]).explain(X6, target=1)
    np.testing.assert_allclose(other.by_method["gradcam"][0, ..., 0],
                               (3 * X6[0, ..., 0] + 2) / 36, rtol=1e-6)
    assert other.caveats_of(0) == ()


def test_a_constant_non_zero_cam_carries_the_caveat(negative):
    flat = np.full((1, 6, 6, 1), 2.0, np.float32)
    explanation = EngineExplainer(negative, method="layercam").explain(flat, target=1)
    assert np.ptp(explanation.maps) == 0  # exactly constant, (3 * 2 + 2) / 36:
    np.testing.assert_allclose(explanation.maps, 8.0 / 36, rtol=1e-6)
    ((code, method, text),) = [(c.code, c.method, c.text) for c in explanation.caveats_of(0)]
    assert (code, method) == (NEGLIGIBLE_MAP, "layercam")
    assert text == f"constant map: every pixel holds {8.0 / 36:.3g}, so it singles out no pixel"


def test_perturbation_and_black_box_maps_of_a_constant_model():
    model = constant_output_model()
    methods = ("occlusion", "rise", "scorecam")
    explanation = EngineExplainer(model, method=methods, patch=4, stride=4, masks=8,
                                  seed=0).explain(np.ones((1, 8, 8, 1), np.float32), 0)
    for name in methods:
        assert np.ptp(explanation.by_method[name]) == 0, name
    assert {c.method for c in explanation.caveats_of(0) if c.code == NEGLIGIBLE_MAP} == \
        set(methods)


def test_vargrad_of_identical_copies_is_exactly_zero_with_the_caveat(negative):
    # noise 0: 16 identical copies; two-pass variance in float64, exactly 0.
    explanation = EngineExplainer(negative, method="vargrad", noise=0.0).explain(X6, 1)
    assert np.all(explanation.maps == 0)
    ((code, method, text),) = [(c.code, c.method, c.text) for c in explanation.caveats_of(0)]
    assert (code, method, text) == (NEGLIGIBLE_MAP, "vargrad", ZERO_TEXT)


def test_one_copy_has_a_variance_of_exactly_zero():
    # What a single sample would give, at the level that takes the copies (the options give
    # VarGrad 16 copies when SmoothGrad is off, --smooth 0 or 1: tests/test_gradient_family).
    rng = np.random.default_rng(4)

    def maps_for(copies, rows, numbers):
        return {"vargrad": copies * rng.uniform(0.5, 2.0, copies.shape).astype(np.float32)}

    images = rng.uniform(0, 1, (3, 5, 5, 2)).astype(np.float32)
    for chunk in (1, 2, 8):
        found = _averaging.smoothgrad(maps_for, images, 1, 0.3, 0, chunk, variance={"vargrad"})
        assert found["vargrad"].shape == images.shape and np.all(found["vargrad"] == 0)


def test_the_cli_records_and_draws_the_caveat_of_zero_cams(negative, tmp_path):
    negative.save(tmp_path / "m.keras")
    save_gray(tmp_path / "in" / "ramp.png", np.arange(36).reshape(6, 6) * 7)
    for target, expected in ((0, {"gradcam++", "layercam"}), (1, set())):
        out = tmp_path / f"out{target}"
        run_cli("explain", tmp_path / "m.keras", tmp_path / "in", "-o", out, "--class", target,
                "--method", "gradcam++,layercam", "--render", "panel", "--preprocess", "none",
                "-q", code=0)
        (record,) = records(out)
        assert {(c["code"], c["method"], c["text"]) for c in record["caveats"]} == {
            (NEGLIGIBLE_MAP, name, ZERO_TEXT) for name in expected}
        panel = np.asarray(Image.open(out / record["outputs"]["panel"]).convert("RGB"))
        assert bool(red_ink(panel).any()) is bool(expected)
