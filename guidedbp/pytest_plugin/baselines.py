"""The saliency baselines of :class:`~guidedbp.pytest_plugin.SaliencyRegression`: two files
beside the test (the map's magnitude as ``.npy``, what it explains as ``.json``), written,
read back, compared with what they replace, and drawn beside a failing map.

>>> safe_name("test_x[a-1]"), size_text(__import__("numpy").zeros((3, 4)))
('test_x_a_1_', '3x4')
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

UPDATE_OPTION = "--guidedbp-update"
#: Version of the baseline ``.json`` layout.
BASELINE_FORMAT = 1
RE_RECORD = f"if the change is intended, re-record it with: pytest {UPDATE_OPTION}"


@dataclass(frozen=True)
class ComparedMap:
    """One explained image: what is stored and compared, and the words for messages."""

    magnitude: object  # float32 (H, W) numpy array
    target: int  # the class explained
    predicted: int  # the model's top-1 class
    labels: tuple | None

    def label(self, index: int) -> str | None:
        if self.labels is not None and 0 <= index < len(self.labels):
            return str(self.labels[index])
        return None

    def name(self, index: int) -> str:
        """``0 (circle)``, or ``0`` without class names."""
        label = self.label(index)
        return str(index) if label is None else f"{index} ({label})"


def record_baseline(npy: Path, meta: Path, current: ComparedMap, method: str, shown: str) -> None:
    from guidedbp import __version__
    from guidedbp.io.write import atomic_write_bytes, save_npy

    save_npy(npy, current.magnitude)
    document = {"format": BASELINE_FORMAT, "guidedbp_version": __version__, "method": method,
                "class": current.target, "label": current.label(current.target),
                "image": shown, "shape": list(current.magnitude.shape)}
    atomic_write_bytes(meta, (json.dumps(document, indent=2) + "\n").encode())


def replaced_baseline(npy: Path, meta: Path, current: ComparedMap) -> dict:
    """What recording ``current`` at ``npy`` replaces (see ``on_record``)."""
    from guidedbp.checks.stats import map_similarity

    entry = {"baseline": shown_path(npy), "class": current.name(current.target),
             "existed": npy.exists() or meta.exists(), "old_class": None,
             "old_shape": None, "old_similarity": None}
    if not entry["existed"]:
        return entry
    try:
        stored, document = read_baseline(npy, meta)
    except AssertionError:  # unreadable: nothing to compare
        return entry
    if int(document["class"]) != current.target:
        entry["old_class"] = current.name(int(document["class"]))
    if stored.shape != current.magnitude.shape:
        entry["old_shape"] = size_text(stored)
    else:
        similarity = float(map_similarity(stored[..., None], current.magnitude[..., None]))
        entry["old_similarity"] = similarity if similarity == similarity else None  # NaN
    return entry


def read_baseline(npy: Path, meta: Path):
    import numpy as np

    try:
        document = json.loads(meta.read_text(encoding="utf-8"))
        stored = np.load(npy, allow_pickle=False)
        if document.get("format") != BASELINE_FORMAT or stored.ndim != 2:
            raise ValueError(f"not a guidedbp saliency baseline of format {BASELINE_FORMAT}")
        int(document["class"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise AssertionError(f"cannot read the saliency baseline {shown_path(npy)}: {error}; "
                             f"re-record it with: pytest {UPDATE_OPTION}") from None
    return stored, document


def diff_picture(path: Path, stored, current: ComparedMap, caption: str) -> str:
    """Save baseline | current | |difference| and return the message's line about it."""
    from guidedbp.io.write import save_png
    from guidedbp.render.diff import DIFF_COLUMNS, render_difference

    try:
        save_png(path, render_difference(stored, current.magnitude, caption=caption,
                                          explained=f"class {current.name(current.target)}"))
    except (ValueError, OSError) as error:  # a NaN map cannot be drawn; say why
        return f"no diff picture: {error}"
    return f"diff picture ({DIFF_COLUMNS}): {shown_path(path)}"


def safe_name(name: str) -> str:
    """A test or base name as a file name: ``test_x[a-1]`` -> ``test_x_a_1_``."""
    return re.sub(r"\W", "_", name)


def describe_image(image) -> str:
    if isinstance(image, (str, os.PathLike)):
        return os.fspath(image)
    return f"an image array of shape {tuple(getattr(image, 'shape', ()))}"


def shown_path(path: Path) -> str:
    """``path`` relative to the working folder when it lies inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def size_text(values) -> str:
    return "x".join(str(side) for side in values.shape)
