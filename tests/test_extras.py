"""The optional extras: pyproject.toml's and guidedbp/_extras.py's are the same, and a
missing one is named in one line with the command that installs it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile

import pytest

from guidedbp._extras import EXTRAS, install, needs

from .helpers import REPO

#: Each extra's first requirement, by distribution name (what the message names).
DISTRIBUTIONS = {"plot": "matplotlib", "segments": "scikit-image", "ray": "ray",
                 "s3": "s3fs", "gcs": "gcsfs", "azure": "adlfs",
                 "tensorboard": "tensorboard", "hub": "keras-hub"}


def test_the_extras_are_pyprojects():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert set(extras) - {"test", "docs"} == set(EXTRAS) == set(DISTRIBUTIONS)
    for extra, distribution in DISTRIBUTIONS.items():
        first = re.match(r"[A-Za-z0-9_.-]+", extras[extra][0]).group(0)
        assert first == distribution, extra
        assert EXTRAS[extra].lower().startswith(distribution.split("-")[0][:5]), extra


def test_messages_name_the_extra():
    assert install("hub") == "pip install 'guidedbp[hub]'"
    assert needs("figures", "plot") == "figures need matplotlib: pip install 'guidedbp[plot]'"
    assert needs("--engine ray", "ray") == \
        "--engine ray needs Ray Data: pip install 'guidedbp[ray]'"
    with pytest.raises(ValueError, match="unknown extra 'nope'"):
        install("nope")


def test_a_keras_hub_model_without_keras_hub_is_one_line_naming_the_hub_extra(tmp_path):
    # A .keras archive whose model is a keras-hub class, loaded where keras_hub cannot be
    # imported (blocked in that process): the loader's own error, as a user meets it.
    path = tmp_path / "vit.keras"
    config = {"module": "keras_hub.src.models.vit.vit_image_classifier",
              "class_name": "ViTImageClassifier", "config": {},
              "registered_name": "keras_hub>ViTImageClassifier"}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("model.weights.h5", b"")
    code = ("import sys; sys.modules['keras_hub'] = None\n"
            "from guidedbp.cli import main\n"
            f"main(['inspect', {str(path)!r}])\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert result.returncode == 2, result.stderr
    assert lines == [f"Error: {str(path)!r} is a keras-hub model (ViTImageClassifier), and "
                     "keras-hub cannot be imported: pip install 'guidedbp[hub]'"], result.stderr
    assert "Traceback" not in result.stderr
