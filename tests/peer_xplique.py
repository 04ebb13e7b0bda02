"""Xplique's metrics on maps written by tests/test_peer_xplique.py: run by the Python of
build/xplique-venv (make peer-venv), never by guidedbp's, and importing no guidedbp.

    build/xplique-venv/bin/python tests/peer_xplique.py DATA.npz [MODEL.keras] > out.json

DATA.npz holds ``inputs`` (N, H, W, C) float32 model inputs, ``targets`` (N,) class
indices, one ``maps_<name>`` array per set of maps, and, for MuFidelity, ``cells``
(N, samples, grid, grid) bool: the grid cells each subset sets to the baseline, and
``settings`` (grid_size, samples, steps as int64). A ``class_maps_<name>`` array
(N, classes, H, W, C), every class's map of each image, adds RandomLogit: a stand-in
explainer hands Xplique the map of whatever class it asks for, and the classes it drew
are reported (``"other_classes"``). Without a model only the model-free metrics
(Complexity, Sparseness) run.

Prints JSON ``{maps name: {metric: {"per_image": [...], "mean": x}}}``: Xplique's own
``evaluate`` gives ``mean``, ``detailed_evaluate`` (or one image at a time) the per-image
values.

MuFidelity draws its subsets with ``tf.random.uniform`` inside ``_perturb_samples``; here
that one call is answered with the subsets of DATA.npz (0 where a cell is removed, 1
where it is kept, so Xplique's own ``> subset_percent`` test and nearest-neighbour resize
turn them into its masks), and the method runs eagerly so each image gets its own draws.
Everything else is Xplique's code as installed.
"""

from __future__ import annotations

import json
import os
import sys
from unittest import mock

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from xplique.metrics import (  # noqa: E402
    AverageDropMetric,
    AverageGainMetric,
    AverageIncreaseMetric,
    Complexity,
    Deletion,
    Insertion,
    MuFidelity,
    RandomLogitMetric,
    Sparseness,
)
from xplique.metrics import fidelity as xplique_fidelity  # noqa: E402


def _result(per_image, mean) -> dict:
    return {"per_image": [float(value) for value in per_image], "mean": float(mean)}


def model_free(maps: np.ndarray) -> dict:
    """Complexity and Sparseness of one set of maps."""
    out = {}
    for name, metric in (("complexity", Complexity()), ("sparseness", Sparseness())):
        out[name] = _result(metric.detailed_evaluate(tf.constant(maps, tf.float32)),
                            metric.evaluate(maps))
    return out


def average_x(model, inputs: np.ndarray, one_hot: np.ndarray, maps: np.ndarray) -> dict:
    """Average Drop, Increase and Gain on the model's softmax probabilities."""
    out = {}
    for name, kind in (("average-drop", AverageDropMetric),
                       ("average-increase", AverageIncreaseMetric),
                       ("average-gain", AverageGainMetric)):
        metric = kind(model, inputs, one_hot, batch_size=64, activation="softmax")
        per_image = metric.detailed_evaluate(tf.constant(inputs), tf.constant(one_hot),
                                             tf.constant(maps, tf.float32))
        out[name] = _result(per_image, metric.evaluate(maps))
    return out


def causal(model, inputs: np.ndarray, one_hot: np.ndarray, maps: np.ndarray, steps: int
           ) -> dict:
    """Deletion and Insertion (baseline 0, ``steps`` steps, softmax probabilities): the
    score of each image alone, and Xplique's score of them all (the AUC of the mean
    curve)."""
    out = {}
    for name, kind in (("deletion", Deletion), ("insertion", Insertion)):
        per_image = [kind(model, inputs[i : i + 1], one_hot[i : i + 1], baseline_mode=0.0,
                          steps=steps, activation="softmax").evaluate(maps[i : i + 1])
                     for i in range(len(inputs))]
        together = kind(model, inputs, one_hot, baseline_mode=0.0, steps=steps,
                        activation="softmax").evaluate(maps)
        out[name] = _result(per_image, together)
    return out


def mufidelity(model, inputs: np.ndarray, one_hot: np.ndarray, maps: np.ndarray,
               cells: np.ndarray, grid_size: int) -> dict:
    """MuFidelity (Spearman, logits, baseline 0) on the subsets of ``cells``."""
    samples = cells.shape[1]
    # batch_size == samples: one image per _perturb_samples call, all its subsets at once.
    metric = MuFidelity(model, inputs, one_hot, batch_size=samples, grid_size=grid_size,
                        subset_percent=0.2, baseline_mode=0.0, nb_samples=samples)
    metric._perturb_samples = MuFidelity._perturb_samples.python_function.__get__(metric)
    draws = iter(np.where(cells.reshape(len(cells), samples, -1), 0.0, 1.0)
                 .astype(np.float32))
    original_uniform = tf.random.uniform

    def replayed_uniform(shape, *args, **kwargs):
        if tuple(shape) != (samples, grid_size**2):
            return original_uniform(shape, *args, **kwargs)
        return tf.constant(next(draws))

    recorded = []

    def recording_spearmanr(first, second):
        result = xplique_fidelity_spearmanr(first, second)
        recorded.append(0.0 if np.isnan(result[0]) else float(result[0]))
        return result

    xplique_fidelity_spearmanr = xplique_fidelity.spearmanr
    with mock.patch.object(tf.random, "uniform", replayed_uniform), \
            mock.patch.object(xplique_fidelity, "spearmanr", recording_spearmanr):
        mean = metric.evaluate(maps)
    if next(draws, None) is not None or len(recorded) != len(inputs):
        raise RuntimeError("MuFidelity did not draw one set of subsets per image")
    return {"mufidelity": _result(recorded, mean)}


class ReplayExplainer:
    """Answers ``explain(inputs, targets)`` with the precomputed map of each image for the
    one-hot class asked (the whole data set in one batch), and records the classes."""

    def __init__(self, class_maps: np.ndarray):
        self.class_maps = class_maps
        self.asked: list[np.ndarray] = []

    def explain(self, inputs, targets):
        classes = np.argmax(np.asarray(targets), axis=-1)
        self.asked.append(classes)
        return tf.constant(self.class_maps[np.arange(len(classes)), classes])


def random_logit(model, inputs: np.ndarray, one_hot: np.ndarray, class_maps: np.ndarray
                 ) -> dict:
    """RandomLogitMetric (SSIM, Xplique's seed 42), on the replayed maps."""
    metric = RandomLogitMetric(model, inputs, one_hot, batch_size=len(inputs), seed=42)
    explainer = ReplayExplainer(class_maps.astype(np.float32))
    recorded = []
    similarity = metric._compute_similarity

    def recording_similarity(first, second):
        values = similarity(first, second)
        recorded.extend(np.asarray(values).tolist())
        return values

    metric._compute_similarity = recording_similarity
    mean = metric.evaluate(explainer)
    if len(explainer.asked) != 2:
        raise RuntimeError("RandomLogitMetric did not explain all images in one batch")
    result = _result(recorded, mean)
    result["other_classes"] = explainer.asked[1].tolist()
    return {"random-logit": result}


def main(argv: list[str]) -> int:
    data = np.load(argv[1])
    inputs = data["inputs"].astype(np.float32)
    targets = data["targets"].astype(np.int64)
    model = None
    if len(argv) > 2:
        import keras

        model = keras.models.load_model(argv[2], compile=False)
        num_classes = int(model.output_shape[-1])
        one_hot = np.eye(num_classes, dtype=np.float32)[targets]
        grid_size, _, steps = (int(value) for value in data["settings"])
    results = {}
    for key in sorted(k for k in data.files if k.startswith("maps_")):
        maps = data[key].astype(np.float32)
        values = model_free(maps)
        if model is not None:
            values.update(average_x(model, inputs, one_hot, maps))
            values.update(causal(model, inputs, one_hot, maps, steps))
            values.update(mufidelity(model, inputs, one_hot, maps, data["cells"],
                                     grid_size))
            if f"class_{key}" in data.files:
                values.update(random_logit(model, inputs, one_hot, data[f"class_{key}"]))
        results[key[len("maps_"):]] = values
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
