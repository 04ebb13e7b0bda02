"""``guidedbp evaluate``: pointing game and energy inside the mask, and the deletion and
insertion games, on a model whose maps are known; the games also against the library."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from .helpers import assert_one_line_error, run_cli, tinted_noise
from .models import corner_cnn, tiny_cnn


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The model of :func:`tests.models.corner_cnn` (class 0 is the top-left block) and
    labels; images "on" and "sub/off" (constant 100) with masks that do and do not
    cover the top-left block."""
    folder = tmp_path_factory.mktemp("evaluate")
    corner_cnn().save(folder / "m.keras")
    (folder / "labels.txt").write_text("corner\nfar\n")
    images, masks = folder / "images", folder / "masks"
    (images / "sub").mkdir(parents=True)
    (masks / "sub").mkdir(parents=True)
    flat = np.full((8, 8), 100, np.uint8)
    Image.fromarray(flat, "L").save(images / "on.png")
    Image.fromarray(flat, "L").save(images / "sub" / "off.jpg", quality=100)
    on = np.zeros((8, 8), np.uint8)
    on[:3, :3] = 255  # covers the top-left block and one pixel more each way
    off = np.zeros((8, 8), np.uint8)
    off[6:, 6:] = 255  # the far corner: 6*sqrt(2) = 8.5 px from the maximum at (0, 0)
    Image.fromarray(on, "L").save(masks / "on.png")
    Image.fromarray(off, "L").save(masks / "sub" / "off.png")
    return folder


def evaluate(setup, *args):
    return run_cli("evaluate", setup / "m.keras", setup / "images", "--masks", setup / "masks",
                   "--labels", setup / "labels.txt", "--json", *args)


def test_pointing_game_and_energy(setup):
    result = evaluate(setup, "--method", "guided,vanilla", "--tolerance", "2")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["results"]
    # Both images are class 0 ("corner"): the map is the top-left block. "on" hits with all
    # its energy inside; "off" misses (8.5 px > 2) with none inside.
    expected = {"n": 2, "pointing_game": 0.5, "energy_inside": 0.5}
    for method in ("guided", "vanilla"):
        by_class = {r["class"]: r for r in rows if r["method"] == method}
        assert set(by_class) == {"corner", "overall"}
        for name in ("corner", "overall"):
            assert {k: by_class[name][k] for k in expected} == expected


def test_tolerance_is_a_distance_in_pixels(setup):
    # The far mask's nearest pixel (6, 6) is sqrt(72) = 8.49 px from the maximum (0, 0).
    for tolerance, rate in (("8.4", 0.5), ("8.5", 1.0)):
        rows = json.loads(evaluate(setup, "--method", "guided", "--tolerance", tolerance).output)
        assert rows["results"][-1]["pointing_game"] == rate


def test_table_output(setup):
    result = run_cli("evaluate", setup / "m.keras", setup / "images", "--masks", setup / "masks",
                     "--method", "guided", "--tolerance", "2")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    # The heading line names the model and the masks (wrapped to the width when long).
    start = next(i for i, line in enumerate(lines) if line.startswith("pointing game"))
    assert lines[0].startswith("model ") and start in (2, 3), result.output
    assert lines[start] == "pointing game (within 2 px)"
    assert lines[start + 2].split() == ["0", "2", "0.500"]
    assert lines[start + 3].split() == ["overall", "2", "0.500"]


def test_missing_mask_and_usage_errors(setup, tmp_path):
    (tmp_path / "extra.png").write_bytes((setup / "images" / "on.png").read_bytes())
    result = run_cli("evaluate", setup / "m.keras", tmp_path, "--masks", setup / "masks")
    assert result.exit_code == 2 and "no mask in" in result.output and "extra.png" in result.output
    result = run_cli("evaluate", setup / "m.keras")
    assert result.exit_code == 2 and "--shapes N" in result.output
    result = run_cli("evaluate", setup / "m.keras", tmp_path)
    assert result.exit_code == 2 and "need --masks" in result.output


def test_synthetic_samples_explain_the_asked_object():
    from guidedbp.cli.evaluate_samples import synthetic_samples
    from guidedbp.demo import make_scenes

    scenes = make_scenes(3, 11, distractors=True)
    for explain_distractor, mask, other, labels in (
        (False, scenes.masks, scenes.distractor_masks, scenes.labels),
        (True, scenes.distractor_masks, scenes.masks, scenes.distractor_labels),
    ):
        samples = synthetic_samples(3, 11, True, explain_distractor)
        for index, sample in enumerate(samples):
            np.testing.assert_array_equal(sample.picture, scenes.images[index])
            np.testing.assert_array_equal(sample.mask, mask[index])
            np.testing.assert_array_equal(sample.other_mask, other[index])
            assert sample.label == labels[index]
    assert all(sample.other_mask is None for sample in synthetic_samples(2, 11, False))


# -- deletion and insertion -------------------------------------------------------------------


def games(setup, *args, code: int = 0):
    """``evaluate`` on the corner images without masks, as JSON; the run must exit ``code``."""
    result = run_cli("evaluate", setup / "m.keras", setup / "images", "--labels",
                     setup / "labels.txt", *args, code=code)
    return json.loads(result.stdout) if "--json" in args else result


def test_deletion_and_insertion_need_no_masks(setup):
    top = games(setup, "--metric", "deletion,insertion", "--baseline", "black", "--steps", "4",
                "--method", "guided,vanilla", "--json")
    assert top["metrics"] == ["deletion", "insertion"]
    assert "results" not in top and "tolerance" not in top
    record = top["faithfulness"]
    assert (record["steps"], record["baseline"]) == (4, "black") and "blur_sigma" not in record
    assert record["fractions"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert sorted(Path(image["image"]).name for image in record["images"]) == [
        "off.jpg", "on.png"]
    assert all((image["target"], image["class"]) == (0, "corner") for image in record["images"])
    # Both images: constant 100, logits (400, 200), class 0 with p = 1. Both maps are 1 on the
    # top-left block and 0 elsewhere, so the block goes first, then row-major order; each of
    # the 4 steps takes 16 pixels. Deletion: step 1 blacks the block out (logits 0, 200:
    # p = 0); class 1's bottom-right block goes only at step 4 (logits 0, 0: p = 0.5).
    # Insertion: black (p = 0.5), then the block is back from step 1 on (p = 1).
    for method in ("guided", "vanilla"):
        deletion, insertion = (record["methods"][method][game]
                               for game in ("deletion", "insertion"))
        assert deletion["curves"] == [[1.0, 0.0, 0.0, 0.0, 0.5]] * 2
        assert deletion["auc"] == [0.1875] * 2 and deletion["mean_auc"] == 0.1875
        assert insertion["curves"] == [[0.5, 1.0, 1.0, 1.0, 1.0]] * 2
        assert insertion["auc"] == [0.9375] * 2 and insertion["mean_auc"] == 0.9375


def test_blurring_a_flat_image_removes_nothing(setup):
    record = games(setup, "--metric", "deletion", "--method", "guided", "--json")["faithfulness"]
    assert (record["steps"], record["baseline"]) == (20, "blur")
    assert record["blur_sigma"] == "0.1 x the shorter side"
    assert list(record["methods"]["guided"]) == ["deletion"]
    assert record["methods"]["guided"]["deletion"]["curves"] == [[1.0] * 21] * 2


def test_both_kinds_of_metric_together_and_their_tables(setup):
    top = json.loads(evaluate(setup, "--metric", "pointing,deletion", "--method", "guided",
                              "--tolerance", "2", "--baseline", "black", "--steps", "4").stdout)
    assert [set(row) for row in top["results"]] == [
        {"method", "class", "n", "constant", "pointing_game"}] * 2  # no energy: not asked
    assert top["results"][-1]["pointing_game"] == 0.5
    assert top["faithfulness"]["methods"]["guided"]["deletion"]["mean_auc"] == 0.1875
    result = run_cli("evaluate", setup / "m.keras", setup / "images", "--masks", setup / "masks",
                     "--metric", "pointing,deletion", "--method", "guided,vanilla",
                     "--tolerance", "2", "--baseline", "black", "--steps", "4", code=0)
    lines = result.stdout.splitlines()
    assert "pointing game (within 2 px)" in lines[2:4], result.output
    assert "energy" not in result.stdout
    start = lines.index("deletion AUC (black baseline, 4 steps; lower is more faithful)")
    assert lines[start + 1].split() == ["image", "guided", "vanilla"]
    rows = lines[start + 2 : start + 5]
    assert [row.split()[-2:] for row in rows] == [["0.188", "0.188"]] * 3
    assert sorted(Path(row.split()[0]).name for row in rows[:2]) == ["off.jpg", "on.png"]
    assert rows[2].split()[0] == "mean" and lines[start + 5] == ""  # the ranking follows


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    """A 16x16 RGB CNN with seeded weights (no probability near 0 or 1) and three tinted
    noise images."""
    folder = tmp_path_factory.mktemp("noisy")
    tiny_cnn(3).save(folder / "m.keras")
    (folder / "images").mkdir()
    for seed in range(3):
        Image.fromarray(tinted_noise(16, 16, seed=seed)).save(folder / "images" / f"n{seed}.png")
    return folder


def test_values_are_the_library_s(noisy):
    from guidedbp.api import Explainer
    from guidedbp.checks.faithfulness import GAMES, deletion_insertion
    from guidedbp.io.images import decode_image
    from guidedbp.models.loading import load_model
    from guidedbp.models.preprocess import prepare, preprocess

    methods = ("guided", "vanilla", "gradcam")
    result = run_cli("evaluate", noisy / "m.keras", noisy / "images", "--metric",
                     "insertion,deletion", "--method", ",".join(methods), "--steps", "5",
                     "--batch-size", "4", "--json", code=0)
    record = json.loads(result.stdout)["faithfulness"]
    loaded = load_model(str(noisy / "m.keras"))
    explainer = Explainer(loaded, methods, batch_size=4)
    pictures = [prepare(decode_image(image["image"], channels=3), loaded.input_shape,
                        loaded.preprocess)[0] for image in record["images"]]
    explanation = explainer.explain(preprocess(np.stack(pictures), loaded.preprocess))
    assert [image["target"] for image in record["images"]] == explanation.targets.tolist()
    for method in methods:
        expected = deletion_insertion(
            lambda inputs: explainer.predict(inputs)[1], pictures, explanation.by_method[method],
            explanation.targets, steps=5, baseline="blur", batch_size=4,
            pixel_to_input=functools.partial(preprocess, mode=loaded.preprocess))
        assert list(record["methods"][method]) == list(GAMES)  # their order, not --metric's
        for game in GAMES:
            found, curves = record["methods"][method][game], expected.games[game]
            assert len(found["curves"]) == 3 and len(found["curves"][0]) == 6
            np.testing.assert_allclose(found["curves"], curves.curves, atol=1e-6)
            np.testing.assert_allclose(found["auc"], curves.aucs, atol=1e-6)
            assert found["mean_auc"] == pytest.approx(curves.mean_auc, abs=1e-6)
    # Not every curve is flat: the games measured something.
    assert np.ptp(record["methods"]["guided"]["deletion"]["curves"]) > 0.01


def test_plot_curves_writes_a_figure_per_image_and_game(setup, tmp_path):
    from guidedbp.plot import is_own_figure

    folder = tmp_path / "curves"
    arguments = ("--metric", "deletion,insertion", "--baseline", "black", "--steps", "4",
                 "--method", "guided,vanilla", "--plot-curves", folder)
    games(setup, *arguments)
    written = sorted(folder.rglob("*.png"))
    assert sorted(path.name for path in written) == [
        "off.jpg.deletion.png", "off.jpg.insertion.png", "on.png.deletion.png",
        "on.png.insertion.png"]
    for path in written:
        assert is_own_figure(path)
        with Image.open(path) as image:
            image.load()
            assert image.size == (1125, 600)  # 7.5 x 4 inches at 150 dpi
    games(setup, *arguments)  # its own figures are replaced
    written[0].write_bytes(b"a user's file")
    result = games(setup, *arguments, code=2)
    assert_one_line_error(result, str(written[0]), "not a figure guidedbp wrote")
    assert written[0].read_bytes() == b"a user's file"


def test_plot_curves_without_matplotlib_says_how_to_install_it(setup, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    result = games(setup, "--metric", "deletion", "--plot-curves", tmp_path / "c", code=2)
    assert_one_line_error(result, "pip install 'guidedbp[plot]'")
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("args, fragment", [
    (("--metric", "deletion", "--steps", "0"), "--steps"),
    (("--metric", "deletion", "--steps", "many"), "--steps"),
    (("--metric", "deletion", "--baseline", "grey"), "--baseline"),
    (("--metric", "occlusion"), "occlusion: choose from pointing, energy, deletion, insertion"),
    (("--metric", "deletion", "--masks", "."), "--masks is only used by --metric pointing"),
    (("--metric", "pointing", "--plot-curves", "out"), "--plot-curves needs --metric deletion"),
    (("--metric", "energy,insertion"), "IMAGES need --masks DIR for --metric energy"),
])
def test_usage_errors_of_the_games(setup, args, fragment):
    result = games(setup, *args, code=2)
    assert fragment in result.output and "Traceback" not in result.output


def test_games_need_images_or_shapes(setup):
    result = run_cli("evaluate", setup / "m.keras", "--metric", "deletion", code=2)
    assert "give IMAGES, or --shapes N" in result.output


def test_costs_time_each_method_against_guided(noisy):
    result = run_cli("evaluate", noisy / "m.keras", noisy / "images", "--metric", "deletion",
                     "--method", "vanilla,occlusion", "--steps", "2", "--costs", "--json",
                     code=0)
    costs = json.loads(result.output)["costs"]
    assert (costs["reference"], costs["images"], costs["rounds"]) == ("guided", 3, 3)
    assert list(costs["relative"]) == ["guided", "vanilla", "occlusion"]
    assert costs["relative"]["guided"] == 1.0
    # Wall-clock ratios depend on the machine's load: make bench measures them; here only
    # that each is a real measurement (the ordering and arithmetic are tested below).
    assert all(0 < value < float("inf") for value in costs["relative"].values())
    table = run_cli("evaluate", noisy / "m.keras", noisy / "images", "--metric", "deletion",
                    "--method", "vanilla", "--steps", "2", "--costs", code=0).output
    assert "cost per image relative to guided" in table


def test_relative_costs_validates_and_puts_the_reference_first():
    from guidedbp.checks.costs import relative_costs
    from guidedbp.errors import ArgumentError

    calls = []

    class Counting:  # a real object with the one method relative_costs calls
        def __init__(self, name):
            calls.append(name)

        def explain(self, images):
            return images

    costs = relative_costs(Counting, np.zeros((1, 2, 2, 1)), ("vanilla", "guided"), rounds=2)
    assert list(costs) == ["guided", "vanilla"] and calls == ["guided", "vanilla"]
    assert costs["guided"] == 1.0
    with pytest.raises(ArgumentError, match="rounds=0"):
        relative_costs(Counting, np.zeros((1, 2, 2, 1)), ("guided",), rounds=0)
    with pytest.raises(ArgumentError, match="empty"):
        relative_costs(Counting, np.zeros((0, 2, 2, 1)), ("guided",))
