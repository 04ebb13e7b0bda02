"""The images ``guidedbp evaluate`` scores: synthetic shapes (``--shapes``) drawn with
their masks and classes, or image files with their masks from ``--masks``."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from guidedbp.cli.exits import UsageFailure


@dataclass(frozen=True)
class Sample:
    """One image to score: its picture, its object's mask (None without masks), its true
    class (or None: the model's top-1), with distractors the other object's mask, where
    its figures go below --plot-curves (None: its name), and with distractors the other
    object's class."""

    name: str
    picture: np.ndarray
    mask: np.ndarray | None
    label: int | None = None
    other_mask: np.ndarray | None = None
    stem: str | None = None
    other_label: int | None = None


def synthetic_samples(count: int, seed: int, distractors: bool, explain_distractor: bool = False):
    """One :class:`Sample` per synthetic image."""
    from guidedbp.demo import make_scenes

    scenes = make_scenes(count, seed, distractors=distractors)
    if explain_distractor:
        return [Sample(f"shape{i}", scenes.images[i], scenes.distractor_masks[i],
                       int(scenes.distractor_labels[i]), scenes.masks[i],
                       other_label=int(scenes.labels[i])) for i in range(count)]
    others = scenes.distractor_masks if distractors else [None] * count
    return [Sample(f"shape{i}", scenes.images[i], scenes.masks[i], int(scenes.labels[i]),
                   others[i], other_label=int(scenes.distractor_labels[i]) if distractors
                   else None) for i in range(count)]


def file_samples(inputs, mask_root: str | None, channels: int):
    """One :class:`Sample` per image of ``inputs``, with its mask from ``mask_root`` (if
    given)."""
    from guidedbp.io import store
    from guidedbp.io.images import IMAGE_EXTENSIONS, ImageError, decode_image
    from guidedbp.io.inputs import collect_inputs

    samples, missing = [], []
    for item in collect_inputs(list(inputs)).items:
        if mask_root is None:
            try:
                picture = decode_image(item.path, channels=channels)
            except ImageError as error:
                raise UsageFailure(str(error)) from None
            samples.append(Sample(item.path, picture, None, stem=item.output_stem))
            continue
        stem = os.path.splitext(item.relative)[0]  # its path below the IMAGES folder
        candidates = [os.path.join(mask_root, stem + ext)
                      for ext in dict.fromkeys((".png", *IMAGE_EXTENSIONS))]
        is_file = store.exists if store.is_url(mask_root) else os.path.isfile
        mask_path = next((c for c in candidates if is_file(c)), None)
        if mask_path is None:
            missing.append(item.path)
            continue
        try:
            picture = decode_image(item.path, channels=channels)
            mask = decode_image(mask_path, channels=1)[..., 0] > 127
        except ImageError as error:
            raise UsageFailure(str(error)) from None
        if mask.shape != picture.shape[:2]:
            raise UsageFailure(f"{mask_path}: mask is {mask.shape[1]}x{mask.shape[0]}, "
                               f"image is {picture.shape[1]}x{picture.shape[0]}")
        samples.append(Sample(item.path, picture, mask, stem=item.output_stem))
    if not samples and not missing:
        raise UsageFailure(f"no images in {', '.join(inputs)}")
    if missing:
        raise UsageFailure(f"no mask in {mask_root} for {len(missing)} image(s): "
                           + ", ".join(missing[:5]))
    return samples
