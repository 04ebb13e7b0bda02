"""Many targets per image (issue 39, item 14): K targets cost K backward passes, with a
few traces whatever K.

A trace of K targets at once grew faster than K (0.7 s at K = 1, 118 s at K = 20), and
every new K was traced again. Now a traced pass holds at most four columns
(``guidedbp.engine.targets.columns.traced_passes``): a column's many targets (an image's top-K
classes, its K detections) take ``ceil(K / 4)`` rows per image, so one to four columns of
it are ever traced. Each test counts the traces and compares every map with the same
target explained alone, or with the independent reference of
``tests/targets_reference.py``.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from guidedbp import Explainer
from guidedbp.engine.targets.columns import TRACED_COLUMNS
from guidedbp.targets import Detection, Unit

from . import targets_reference as ref

CLASSES = 30


@pytest.fixture(scope="module")
def classifier() -> keras.Model:
    keras.utils.set_random_seed(3)
    inputs = keras.Input((8, 8, 3))
    hidden = keras.layers.Conv2D(6, 3, activation="relu")(inputs)
    hidden = keras.layers.GlobalAveragePooling2D()(hidden)
    return keras.Model(inputs, keras.layers.Dense(CLASSES, activation="softmax")(hidden))


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(3, 8, 8, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def detector():
    model = ref.model_of(ref.detector_graph(), "dict")
    scenes = np.random.default_rng(1).uniform(0.0, 1.0, (2, 16, 16, 3)).astype(np.float32)
    outputs = ref.Reference(ref.detector_graph, model).outputs(scenes)
    return model, ref.Reference(ref.detector_graph, model), scenes, \
        outputs.heads["boxes"].numpy()


def test_top_k_is_traced_once_whatever_k(classifier, images):
    explainer = Explainer(classifier, ("guided", "vanilla", "gradcam"), batch_size=4)
    scores, _ = explainer.predict(images)
    order = np.argsort(-scores, axis=1, kind="stable")
    traces = {}
    for k in (1, 7, CLASSES, 2, 3, 4, 13):
        ranked = explainer.explain_top_k(images, k)
        traces[k] = explainer.trace_count
        assert len(ranked) == k
        for rank, explanation in enumerate(ranked):
            np.testing.assert_array_equal(explanation.targets, order[:, rank])
        # Each rank as if it were explained alone: of the passes of one and four columns,
        # a row's first and last column, and a column of a last row with fewer targets.
        for rank in {1: (0,), 7: (1, 6), CLASSES: (0, 7, 29)}.get(k, ()):
            alone = explainer.explain(images, order[:, rank])
            for name, maps in alone.by_method.items():
                assert np.any(maps != 0), name
                np.testing.assert_allclose(ranked[rank].by_method[name], maps,
                                           rtol=1e-6, atol=1e-7, err_msg=f"{name} rank {rank}")
            np.testing.assert_allclose(ranked[rank].probabilities, alone.probabilities,
                                       rtol=1e-6)
    # The predictions' forward pass, then a pass of one, four (K = 7 and 30), two and
    # three columns: K = 4 and 13 trace nothing new.
    assert list(traces.values()) == [2, 3, 3, 4, 5, 5, 5]


def test_k_detections_are_traced_once_and_equal_the_reference(detector):
    model, reference, scenes, boxes = detector
    explainer = Explainer(model, ("guided", "vanilla"), batch_size=5)
    cells = [0, 3, 5, 6, 9, 10, 12, 15, 1, 2, 4, 7, 8, 11, 13, 14]
    traces, found = [], {}
    for count in (1, 7, 16):
        targets = [Detection(boxes[:, cell] + 0.25, label=cell % 3) for cell in cells[:count]]
        found[count] = explainer.explain_targets(scenes, targets)
        traces.append(explainer.trace_count)
    assert traces == [1, 2, 2]  # a column, then four (7 and 16 targets: 2 and 4 rows)
    for cell, explanation in list(zip(cells, found[16]))[::5]:
        score = ref.detection(boxes[:, cell] + 0.25, [cell % 3] * len(scenes))
        for method in ("guided", "vanilla"):
            expected, values = reference.gradient(scenes, score, method)
            np.testing.assert_allclose(explanation.by_method[method], expected,
                                       rtol=1e-5, atol=1e-6, err_msg=f"{method} {cell}")
            np.testing.assert_allclose(explanation.logits, values, rtol=1e-5, atol=1e-6)
    for count in (1, 7):  # the same targets among fewer: the same maps
        for fewer, more in zip(found[count], found[16]):
            for method in ("guided", "vanilla"):
                np.testing.assert_allclose(fewer.by_method[method], more.by_method[method],
                                           rtol=1e-6, atol=1e-7)


def test_many_distinct_targets_share_a_few_passes(classifier, images):
    # Units of the softmax output (distinct columns) with repeated class columns.
    units = [Unit(index) for index in (4, 0, 9, 2, 7, 1)]
    targets = [*units[:3], 5, *units[3:], 11, 5]
    explainer = Explainer(classifier, "guided")
    found = explainer.explain_targets(images, targets)
    # The three classes in a pass of three class columns (their classes are data), the
    # six units in passes of four and two.
    assert explainer.trace_count == 3
    assert TRACED_COLUMNS == 4
    for target, explanation in zip(targets, found):
        alone = Explainer(classifier, "guided").explain(images, target)
        np.testing.assert_array_equal(explanation.targets, alone.targets)
        np.testing.assert_allclose(explanation.maps, alone.maps, rtol=1e-6, atol=1e-7,
                                   err_msg=str(target))
        np.testing.assert_allclose(explanation.logits, alone.logits, rtol=1e-6, atol=1e-7)


def test_black_box_scores_of_k_detections_are_traced_once(detector):
    model, _, scenes, boxes = detector
    explainer = Explainer(model, "rise", masks=12, grid=4, seed=3, batch_size=7)
    targets = [Detection(boxes[:, cell] + 0.25, label=cell % 3) for cell in (2, 5, 9, 14)]
    first = explainer.explain_targets(scenes, targets[:1])
    traces = explainer.trace_count  # the pass that fixes the targets, the scoring pass
    assert traces == 2
    every = explainer.explain_targets(scenes, targets)
    # The pass of four columns that fixes them; the scoring pass serves any number.
    assert explainer.trace_count == traces + 1
    explainer.explain_targets(scenes, targets[:3])
    assert explainer.trace_count == traces + 2  # three columns
    # An image's masks are its own whatever the targets: the first target's map is the
    # same beside three others, and each equals its map explained alone.
    np.testing.assert_allclose(every[0].maps, first[0].maps, rtol=1e-6, atol=1e-7)
    for target, explanation in zip(targets[1:], every[1:]):
        alone = explainer.explain(scenes, target)
        assert np.any(alone.maps != 0)
        np.testing.assert_allclose(explanation.maps, alone.maps, rtol=1e-6, atol=1e-7)


def test_progress_counts_the_rows_of_many_targets(classifier, images):
    heard = []
    explainer = Explainer(classifier, "guided", batch_size=4,
                          progress=lambda method, done, total: heard.append((method, done, total)))
    explainer.explain(images)  # one target per image: no rows to tell of
    assert heard == []
    explainer.explain_top_k(images, 4)
    assert heard == []  # up to four targets: one row per image
    explainer.explain_top_k(images, 9)  # three rows per image, nine rows, four a batch
    assert heard == [("guided", done, 9) for done in (4, 8, 9)]
