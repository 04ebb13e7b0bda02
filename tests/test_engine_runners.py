"""The engine's shape: each method a registry record naming its runner, each class
activation map a weighting function in a table."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from guidedbp.engine.explainer import Explainer
from guidedbp.engine.methods import cams as _cams
from guidedbp.engine.methods import registry
from guidedbp.engine.passes import dispatch as _dispatch

from .models import cam_cnn


def test_every_record_names_a_known_runner_and_the_kinds_follow_from_it():
    kinds = {name: registry.method(name).runner for name in registry.METHODS}
    assert set(kinds.values()) == set(registry.RUNNERS)
    assert kinds["guided"] == kinds["gradcam"] == kinds["layercam"] == registry.GRADIENT
    assert kinds["scorecam"] == kinds["occlusion"] == registry.PERTURBATION
    assert kinds["integrated-gradients"] == registry.PATH_INTEGRATED
    for name in registry.METHODS:
        record = registry.method(name)
        assert record.perturbation == (record.runner == registry.PERTURBATION)
        assert record.path_integrated == (record.runner == registry.PATH_INTEGRATED)
    with pytest.raises(ValueError, match="runner='sideways'"):
        dataclasses.replace(registry.method("guided"), runner="sideways")


def test_methods_are_grouped_by_runner_in_the_runners_order():
    groups = _dispatch.by_runner(("occlusion", "integrated-gradients", "guided", "scorecam",
                                 "gradcam"))
    assert groups == {
        registry.GRADIENT: ("guided", "gradcam"),
        registry.PERTURBATION: ("occlusion", "scorecam"),
        registry.PATH_INTEGRATED: ("integrated-gradients",),
    }
    assert _dispatch.by_runner(("vanilla",)) == {registry.GRADIENT: ("vanilla",)}
    assert _dispatch.hands_out_features(("guided", "scorecam"))
    assert not _dispatch.hands_out_features(("gradcam", "occlusion"))


def test_a_new_class_activation_map_is_one_function_one_table_entry_and_one_record(monkeypatch):
    def doubled_gradcam_weights(feature_map, gradient):
        return 2.0 * tf.reduce_mean(gradient, axis=(1, 2), keepdims=True)

    monkeypatch.setitem(_cams.WEIGHTINGS, "doubled", doubled_gradcam_weights)
    record = dataclasses.replace(registry.method("gradcam"), name="doubled-gradcam",
                                 combine=lambda parts: parts.cam("doubled"))
    monkeypatch.setitem(registry.REGISTRY, record.name, record)
    images = np.random.default_rng(0).uniform(0, 1, (2, 4, 4, 1)).astype(np.float32)
    explanation = Explainer(cam_cnn(), ("gradcam", "doubled-gradcam")).explain(images)
    # relu(sum_k 2 w_k A_k) = 2 relu(sum_k w_k A_k), and bilinear resizing is linear.
    np.testing.assert_allclose(explanation.by_method["doubled-gradcam"],
                               2 * explanation.by_method["gradcam"], rtol=1e-6, atol=1e-7)
    assert explanation.by_method["gradcam"].max() > 0


def test_an_unknown_weighting_is_named():
    with pytest.raises(ValueError, match="weighting='nope' is not one of gradcam, gradcam"):
        _cams.class_activation_map(tf.ones((1, 2, 2, 1)), tf.ones((1, 2, 2, 1)), "nope",
                                      (4, 4), "bilinear")
