"""The shared model cache (tests/zoo.py): built once, then read; a model the same after."""

from __future__ import annotations

import keras
import numpy as np

from . import zoo
from .models import cnn

BUILT = []


def counted_cnn():
    BUILT.append(1)
    return cnn()


def test_a_model_is_built_once_and_loads_as_it_was_built(tmp_path, monkeypatch):
    monkeypatch.setattr(zoo, "ROOT", tmp_path / "zoo")
    first = zoo.saved("cnn", counted_cnn, ("keras", "h5"))
    again = zoo.saved("cnn", counted_cnn, ("keras", "h5"))
    assert first == again and len(BUILT) == 1
    images = np.random.default_rng(0).normal(size=(2, 3, 3, 1)).astype(np.float32)
    expected = cnn().predict(images, verbose=0)
    for path in first.values():
        np.testing.assert_allclose(keras.models.load_model(path).predict(images, verbose=0),
                                   expected, rtol=1e-6)
    # Another key (the digest of a file the builder reads) is another model.
    zoo.saved("cnn", counted_cnn, ("keras",), key="other")
    assert len(BUILT) == 2
    assert not list((tmp_path / "zoo").rglob(".model*"))  # no temporary left behind
