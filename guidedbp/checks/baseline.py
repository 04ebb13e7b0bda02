"""Stored guided maps to compare later runs with: ``--save-baseline`` / ``--baseline``.

A baseline folder holds one float32 ``.npy`` map per image, at the image's key
(``circle_0.npy``, ``sub/cat.npy``, ``generated/0.npy``), and ``baseline.json``
with the options that made them. numpy and :mod:`guidedbp.io.write` only.

``baseline.json``::

    {"format": 1, "guidedbp_version": "0.1.0", "model": "model.keras",
     "options": {"method": "guided", "preprocess": "none", "resize": "stretch",
                 "size": [96, 96], "inputs": "files"},
     "images": [{"key": "circle_0", "path": "sample_images/shapes/circle_0.png",
                 "map": "circle_0.npy", "class": 0, "shape": [96, 96, 3]}]}
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass

import numpy as np

from guidedbp._files import MISSING, NotRegularFileError, open_regular
from guidedbp.errors import GuidedbpError
from guidedbp.io import store
from guidedbp.io.write import atomic_write_bytes, save_npy

BASELINE_FILE = "baseline.json"
FORMAT = 1
#: Options that must be equal for two runs' maps to be comparable.
COMPARED_OPTIONS = ("method", "preprocess", "resize", "size", "inputs", "target")


class BaselineError(ValueError, GuidedbpError):
    """A baseline folder that cannot be read; the message is one line."""


@dataclass(frozen=True)
class BaselineImage:
    key: str
    path: str | None
    map_file: str
    target: int
    shape: tuple


@dataclass(frozen=True)
class Baseline:
    """A loaded baseline: where it is, what made it, and its images by key."""

    folder: str
    model: str
    version: str
    options: dict
    images: dict[str, BaselineImage]

    def load_map(self, key: str) -> np.ndarray:
        """The stored map of one image.

        Raises:
            BaselineError: When the file is missing, not a regular file (a FIFO is
                refused, not waited on) or not a readable ``.npy``.
        """
        path = os.path.join(self.folder, self.images[key].map_file)
        try:
            with _open(path, "rb", "baseline map") as handle:
                return np.load(handle, allow_pickle=False)
        except NotRegularFileError as error:
            raise BaselineError(str(error)) from None
        except (OSError, ValueError) as error:
            raise BaselineError(f"cannot read the baseline map {path}: {error}") from error

    def mismatches(self, options: dict) -> list[str]:
        """``preprocess: baseline 'none', now 'scale01'`` for each option that differs."""
        return [
            f"{key}: baseline {self.options.get(key)!r}, now {options.get(key)!r}"
            for key in COMPARED_OPTIONS
            if _jsonable(self.options.get(key)) != _jsonable(options.get(key))
        ]


def map_file(key: str) -> str:
    """The map's file name in the baseline folder for an image key."""
    return f"{key}.npy"


def diff_file(key: str) -> str:
    """The diff picture's file name in the diff folder for an image key."""
    return f"{key}-diff.png"


def save_diff_picture(folder: str, key: str, stored, current, explained: str,
                      caption: str) -> str:
    """Write the picture baseline | current | |difference| of one drifted map
    (:func:`guidedbp.render.diff.render_difference`) into ``folder``, atomically.

    Args:
        folder: The diff folder (created).
        key: The image's key: the picture is ``folder/<key>-diff.png``.
        stored, current: The baseline's map and this run's, of one size.
        explained: What the maps explain (``"class 0 (circle)"``), for the titles.
        caption: The line above the picture.

    Returns:
        The picture's path.

    Raises:
        ValueError: For maps that cannot be drawn (NaN, other sizes).
        OSError: When the file cannot be written.
    """
    from guidedbp.io.write import save_png
    from guidedbp.render.diff import render_difference

    path = os.path.join(folder, diff_file(key))
    save_png(path, render_difference(stored, current, explained=explained, caption=caption))
    return path


def save_baseline(folder: str, model: str, options: dict, entries: list[dict]) -> str:
    """Write maps and ``baseline.json`` into ``folder`` (created), each file atomically.

    Args:
        folder: The baseline folder.
        model: The model spec, as given.
        options: The run's options (see :data:`COMPARED_OPTIONS`).
        entries: Per image: ``key``, ``path`` (or ``None``), ``class`` and ``map``.

    Returns:
        The path of ``baseline.json``, written last, so that it never names a map
        that is not on disk yet.
    """
    from guidedbp import __version__

    images = []
    for entry in entries:
        values = np.asarray(entry["map"], dtype=np.float32)
        relative = map_file(entry["key"])
        save_npy(os.path.join(folder, relative), values)
        images.append({"key": entry["key"], "path": entry["path"], "map": relative,
                       "class": int(entry["class"]), "shape": list(values.shape)})
    document = {"format": FORMAT, "guidedbp_version": __version__, "model": model,
                "options": _jsonable(options), "images": images}
    path = os.path.join(folder, BASELINE_FILE)
    atomic_write_bytes(path, (json.dumps(document, indent=2) + "\n").encode())
    return path


def load_baseline(folder: str) -> Baseline:
    """Read ``folder/baseline.json``.

    Raises:
        BaselineError: For a missing folder or file, a file that is not a regular file,
            bad JSON, or an unknown format.
    """
    path = os.path.join(folder, BASELINE_FILE)
    if not (store.is_prefix(folder) if store.is_url(folder) else os.path.isdir(folder)):
        raise BaselineError(f"baseline folder {folder!r} not found")
    try:
        with _open(path, "r", "baseline file") as handle:
            document = json.load(handle)
    except NotRegularFileError as error:
        if error.kind != MISSING:
            raise BaselineError(str(error)) from None
        raise BaselineError(
            f"{folder!r} holds no {BASELINE_FILE}: make one with "
            f"`guidedbp check MODEL IMAGES --save-baseline {folder}`"
        ) from None
    except (OSError, ValueError) as error:
        raise BaselineError(f"cannot read {path}: {error}") from error
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise BaselineError(f"{path} is not a guidedbp baseline of format {FORMAT}")
    try:
        images = {
            entry["key"]: BaselineImage(entry["key"], entry.get("path"), entry["map"],
                                        int(entry["class"]), tuple(entry["shape"]))
            for entry in document["images"]
        }
        for image in images.values():
            if os.path.isabs(image.map_file) or ".." in image.map_file.split("/"):
                raise ValueError(f"map path {image.map_file!r} leaves the baseline folder")
    except (KeyError, TypeError, ValueError) as error:
        raise BaselineError(f"{path} is malformed: {error}") from error
    return Baseline(folder, str(document.get("model")), str(document.get("guidedbp_version")),
                    dict(document.get("options") or {}), images)


def _open(path: str, mode: str, what: str):
    """A baseline file: a regular file on disk, or an object's bytes (a URL) in memory."""
    if not store.is_url(path):
        return open_regular(path, mode, what, **({"encoding": "utf-8"} if mode == "r" else {}))
    try:
        data = store.read_bytes(path, limit=1 << 30)
    except FileNotFoundError:
        raise NotRegularFileError(path, what, MISSING) from None
    return io.BytesIO(data) if mode == "rb" else io.StringIO(data.decode("utf-8"))


def _jsonable(value):
    """Tuples as lists, recursively: how values look after a JSON round trip."""
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value
