"""guidedbp's metrics against Xplique 2.0.2's on the same model, inputs and maps.

Marked ``peer``: ``make test-peers`` runs it (``make test`` deselects it). Xplique pins
TensorFlow <= 2.20, so it lives in its own venv, build/xplique-venv (``make peer-venv``);
tests/peer_xplique.py runs there by subprocess on an ``.npz`` and a ``.keras`` file
written here, and prints Xplique's values as JSON.

The model is a tiny seeded CNN on 32x32 RGB pixels (0-255, rescaled inside the model)
with 5 logits; 6 seeded pictures (a bright square on noise), explained for their most
probable class (even pictures) or their least probable one (odd pictures, so that keeping
the salient pixels can raise the probability: Average Increase and Gain are not all 0).
The maps: guided backprop (3 signed channels) and Grad-CAM (1 channel, >= 0) from
guidedbp's ``Explainer`` on that model, and a hand-made map (1 channel, a Gaussian bump
plus noise: positive, no ties). Both libraries get the same model inputs; guidedbp's
percentages are divided by 100. MuFidelity replays guidedbp's subsets in Xplique (see
tests/peer_xplique.py) and uses Spearman's correlation; RandomLogit compares, with
``statistic="ssim"``, the same pairs of maps (the other class is the one Xplique drew).
Each number agrees to the third decimal (|a - b| < 5e-4, or 1e-4 relative for the
entropies near log 1024), except the cases ``DIFFERENT`` and ``ZERO_MAP`` explain.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from guidedbp.checks import (
    average_drop,
    average_gain,
    average_increase,
    complexity,
    confidence_change,
    mufidelity,
    mufidelity_subsets,
    sparseness,
)
from guidedbp.checks.faithfulness import deletion_insertion
from guidedbp.checks.metrics_random_logit import similarities

pytestmark = pytest.mark.peer

ROOT = Path(__file__).resolve().parent.parent
PEER_PYTHON = ROOT / "build" / "xplique-venv" / "bin" / "python"
SCRIPT = Path(__file__).resolve().parent / "peer_xplique.py"
SIZE, CLASSES, IMAGES = 32, 5, 6
GRID, SAMPLES, STEPS = 9, 200, 8  # Xplique's MuFidelity defaults; 1024 / 8 pixels a step


@pytest.fixture(scope="module")
def peer_python() -> Path:
    if not PEER_PYTHON.exists():
        pytest.fail(f"{PEER_PYTHON} is missing: run make peer-venv", pytrace=False)
    return PEER_PYTHON


def _model():
    import keras

    keras.utils.set_random_seed(7)
    return keras.Sequential([
        keras.Input((SIZE, SIZE, 3)),
        keras.layers.Rescaling(1 / 255),
        keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu"),
        keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(CLASSES, kernel_initializer=keras.initializers.RandomNormal(
            stddev=3.0)),  # logits spread enough that the probabilities move
    ])


def _pictures() -> np.ndarray:
    rng = np.random.default_rng(11)
    pictures = rng.uniform(0, 80, size=(IMAGES, SIZE, SIZE, 3))
    for index, picture in enumerate(pictures):
        top, left = rng.integers(2, SIZE - 14, size=2)
        picture[top : top + 12, left : left + 12] = rng.uniform(150, 255, size=3)
        picture[..., index % 3] *= 0.5  # each picture its own tint
    return pictures.astype(np.float32)


def _hand_maps() -> np.ndarray:
    rng = np.random.default_rng(12)
    rows, columns = np.mgrid[0:SIZE, 0:SIZE]
    maps = []
    for _ in range(IMAGES):
        centre = rng.uniform(6, SIZE - 6, size=2)
        bump = np.exp(-((rows - centre[0]) ** 2 + (columns - centre[1]) ** 2) / 40.0)
        maps.append(bump + rng.uniform(0.0, 0.3, size=(SIZE, SIZE)))
    return np.stack(maps)[..., None].astype(np.float32)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


@pytest.fixture(scope="module")
def setting(tmp_path_factory, peer_python):
    """The model, pictures, classes, maps, guidedbp's values and Xplique's."""
    from guidedbp import Explainer

    model = _model()

    def logits(inputs):
        return np.asarray(model(inputs, training=False), np.float64)

    def probabilities(inputs):
        return _softmax(logits(inputs))

    pictures = _pictures()
    scores = logits(pictures)
    classes = np.where(np.arange(IMAGES) % 2 == 0, scores.argmax(axis=1),
                       scores.argmin(axis=1))
    class_maps = {}  # every class's map: (N, classes, H, W, C)
    for method in ("guided", "gradcam"):
        explanations = Explainer(model, method).explain_classes(pictures, range(CLASSES))
        class_maps[method] = np.stack([e.by_method[method] for e in explanations], axis=1)
    maps = {name: every[np.arange(IMAGES), classes] for name, every in class_maps.items()}
    maps["hand"] = _hand_maps()
    subsets = mufidelity_subsets(logits, pictures, classes, grid_size=GRID, samples=SAMPLES,
                                 seed=0)
    ours = {}
    for name, saliency in maps.items():
        change = confidence_change(probabilities, pictures, saliency, classes)
        games = deletion_insertion(probabilities, pictures, saliency, classes, steps=STEPS,
                                   baseline="black")
        ours[name] = {
            "complexity": complexity(saliency, channels="mean"),
            "sparseness": sparseness(saliency, channels="mean"),
            "average-drop": average_drop(change.base, change.after) / 100,
            "average-increase": average_increase(change.base, change.after) / 100,
            "average-gain": average_gain(change.base, change.after) / 100,
            "deletion": games.games["deletion"].aucs,
            "insertion": games.games["insertion"].aucs,
            "mufidelity": subsets.correlations(saliency, "spearman"),
        }
    # The keyword path once: explicit cells give the same numbers as the subsets object.
    np.testing.assert_allclose(
        mufidelity(logits, pictures, maps["hand"], classes, correlation="spearman",
                   grid_size=GRID, samples=SAMPLES, cells=subsets.cells),
        ours["hand"]["mufidelity"])

    folder = tmp_path_factory.mktemp("peer")
    model.save(folder / "model.keras")
    np.savez(folder / "data.npz", inputs=pictures, targets=classes, cells=subsets.cells,
             settings=np.array([GRID, SAMPLES, STEPS]),
             **{f"maps_{name}": saliency for name, saliency in maps.items()},
             **{f"class_maps_{name}": every for name, every in class_maps.items()})
    done = subprocess.run([str(peer_python), str(SCRIPT), str(folder / "data.npz"),
                           str(folder / "model.keras")], capture_output=True, text=True,
                          timeout=600, cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout)
    for name, every in class_maps.items():
        others = np.asarray(theirs[name]["random-logit"]["other_classes"])
        assert np.all(others != classes)
        ours[name]["random-logit"] = similarities(maps[name], every[np.arange(IMAGES), others],
                                                  statistic="ssim")
    return maps, ours, theirs


METRICS = ("complexity", "sparseness", "average-drop", "average-increase", "average-gain",
           "mufidelity", "deletion", "insertion", "random-logit")
# Printed, not compared, and why (the README's notes):
DIFFERENT = {
    # Deletion/Insertion rank pixels by max_c |map| here, by the signed mean_c map there.
    ("guided", "deletion"): "ranked by magnitude vs signed channel mean",
    ("guided", "insertion"): "ranked by magnitude vs signed channel mean",
    # The Grad-CAM maps of the least probable class are mostly 0 (up to 95 % of pixels):
    # equal values are ordered row-major here, by a reversed argsort in Xplique.
    ("gradcam", "deletion"): "tied zero pixels ordered differently",
    ("gradcam", "insertion"): "tied zero pixels ordered differently",
    # Those maps' sums over the subsets take few distinct values; summed in float32
    # (Xplique) some of them tie that differ in float64 here, and Spearman's ranks move.
    ("gradcam", "mufidelity"): "subset sums that tie in float32",
}
# RandomLogit needs every class's map: the hand-made maps have only one.
ABSENT = {("hand", "random-logit")}
COMPARED = [(maps, metric) for metric in METRICS for maps in ("guided", "gradcam", "hand")
            if (maps, metric) not in DIFFERENT.keys() | ABSENT]
# An all-zero map (a Grad-CAM of the least probable class) is documented apart: guidedbp
# gives complexity log n and sparseness 0, Xplique 0 and -(n + 1) / n.
ZERO_MAP = {"complexity", "sparseness"}


def _close(first: float, second: float) -> bool:
    return math.isclose(first, second, rel_tol=1e-4, abs_tol=5e-4)


def test_table(setting):
    """Prints the README's table (make test-peers runs pytest with -s)."""
    _, ours, theirs = setting
    lines = ["| metric | maps | guidedbp | Xplique 2.0.2 | largest per-image difference |",
             "|---|---|---|---|---|"]
    for metric in METRICS:
        for name in ours:
            if (name, metric) in ABSENT:
                continue
            note = f" ({DIFFERENT[name, metric]})" if (name, metric) in DIFFERENT else ""
            if metric in ZERO_MAP and not np.all(np.any(setting[0][name], axis=(1, 2, 3))):
                note = " (one all-zero map)"
            largest = np.max(np.abs(np.asarray(ours[name][metric])
                                    - theirs[name][metric]["per_image"]))
            lines.append(f"| {metric} | {name}{note} | {float(np.mean(ours[name][metric])):.4f}"
                         f" | {theirs[name][metric]['mean']:.4f} | {largest:.1e} |")
    print("\n" + "\n".join(lines))
    assert set(theirs) == set(ours)


@pytest.mark.parametrize(("maps", "metric"), COMPARED)
def test_same_number(setting, maps, metric):
    saliency, ours, theirs = setting
    per_image = np.asarray(theirs[maps][metric]["per_image"])
    nonzero = np.any(saliency[maps], axis=(1, 2, 3))
    for index, (first, second) in enumerate(zip(ours[maps][metric], per_image)):
        if metric in ZERO_MAP and not nonzero[index]:
            continue  # test_all_zero_map
        assert _close(float(first), float(second)), (maps, metric, index, first, second)
    if metric not in ZERO_MAP or nonzero.all():
        assert _close(float(np.mean(ours[maps][metric])), theirs[maps][metric]["mean"])


def test_all_zero_map(setting):
    """Xplique's epsilons make an all-zero map's entropy 0 and its Gini -(n + 1) / n;
    guidedbp counts it as constant: log n and 0."""
    saliency, ours, theirs = setting
    zero = np.flatnonzero(~np.any(saliency["gradcam"], axis=(1, 2, 3)))
    assert len(zero) >= 1  # the model's least probable class leaves no Grad-CAM
    pixels = SIZE * SIZE
    for index in zero:
        assert ours["gradcam"]["complexity"][index] == pytest.approx(math.log(pixels))
        assert ours["gradcam"]["sparseness"][index] == 0.0
        assert theirs["gradcam"]["complexity"]["per_image"][index] == pytest.approx(0.0)
        assert theirs["gradcam"]["sparseness"]["per_image"][index] == pytest.approx(
            -(pixels + 1) / pixels, abs=1e-6)


@pytest.mark.parametrize(("maps", "metric"), sorted(DIFFERENT))
def test_documented_difference_is_small(setting, maps, metric):
    """The differences DIFFERENT explains stay within 0.01 on average: a change of
    Xplique's or of this model that makes them large needs a new look."""
    _, ours, theirs = setting
    assert abs(float(np.mean(ours[maps][metric])) - theirs[maps][metric]["mean"]) < 0.01
