"""How an explain run names and draws its outputs (numpy and the render room only)."""

from __future__ import annotations

import re

import numpy as np

from guidedbp.render import render, render_panel


def class_slug(index: int, labels: list[str] | None) -> str:
    """``281-tabby`` (or ``281`` without labels): the class part of an output name."""
    if labels is None or index >= len(labels):
        return str(index)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", labels[index]).strip("-").lower()
    return f"{index}-{slug}" if slug else str(index)


def comparison_panel(maps: dict, picture: np.ndarray, caption: str, style: dict) -> np.ndarray:
    """The original, then one captioned column per method.

    Gradient maps show as the signed ``color`` render; Grad-CAM, a coarse positive
    map, as its ``overlay`` on the picture.
    """
    columns = [("original", picture)]
    for method, saliency in maps.items():
        name = "overlay" if method == "gradcam" else "color"
        columns.append((method, render(name, saliency, picture, **style)))
    return render_panel(columns, caption=caption)


def raw_items(raw, methods) -> list[tuple[str, str]]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [(methods[0], raw)]
    return list(raw.items())


def raw_paths(raw) -> list[str]:
    return [path for _, path in raw_items(raw, ("",))]


def label_of(target: int, labels: list[str] | None) -> str | None:
    return labels[target] if labels is not None and target < len(labels) else None
