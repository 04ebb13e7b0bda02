"""methods: several methods from one forward pass. On ResNet50 (``weights=None``), 224x224,
batch 16: the marginal time per image (so start-up cancels) of
``guided,vanilla,gradcam,guided-gradcam`` over ``guided`` alone, and of top-3 over top-1
classes, measured in the engine and end to end (``explain_files``, the ``guidedbp explain``
job).
"""

from __future__ import annotations

import os
import statistics

import keras
import numpy as np

from guidedbp import Explainer
from sections.common import timed, write_images

#: The section's name, as ``--only`` takes it.
NAME = "methods"


def several_methods(folder: str, rounds: int = 5, batch: int = 16) -> None:
    """Marginal time per image of several methods (and top-3) against one method (top-1)."""
    from guidedbp import explain_files
    from guidedbp.models.loading import load_model

    keras.utils.set_random_seed(0)
    loaded = load_model("keras:ResNet50", weights="none")
    four = ("guided", "vanilla", "gradcam", "guided-gradcam")
    images = np.random.default_rng(0).uniform(-1, 1, (2 * batch, 224, 224, 3)).astype(np.float32)
    runs = {"guided": Explainer(loaded, "guided", batch_size=batch),
            "four": Explainer(loaded, four, batch_size=batch)}
    top = {"top1": 1, "top3": 3}

    def per_image(name, count):
        return timed(runs[name].explain, images[:count]) / count

    def engine_topk(k, count):
        return timed(runs["guided"].explain_top_k, images[:count], k) / count

    for explainer in runs.values():  # trace and warm up
        explainer.explain(images[:batch])
    runs["guided"].explain_top_k(images[:batch], 3)
    # Marginal: the time of 2 batches minus the time of 1, per extra image.
    ratios = {"four": [], "top3": []}
    for _ in range(rounds):
        slope = {name: (per_image(name, 2 * batch) * 2 * batch
                        - per_image(name, batch) * batch) / batch for name in runs}
        ratios["four"].append(slope["four"] / slope["guided"])
        topk = {k: (engine_topk(v, 2 * batch) * 2 * batch - engine_topk(v, batch) * batch)
                / batch for k, v in top.items()}
        ratios["top3"].append(topk["top3"] / topk["top1"])
    engine = {k: statistics.median(v) for k, v in ratios.items()}

    # End to end: explain_files on 1 and on 4 batches of JPEGs; the slope per image.
    images_dir = os.path.join(folder, "methods-images")
    write_images(images_dir, 4 * batch)
    ends = {}
    for label, fields in (("guided", {"methods": "guided"}), ("four", {"methods": four}),
                          ("top1", {"methods": "guided"}),
                          ("top3", {"methods": "guided", "top_k": 3})):
        times = {}
        for count in (batch, 4 * batch):
            names = sorted(os.path.join(images_dir, sub, f)
                           for sub in os.listdir(images_dir)
                           for f in os.listdir(os.path.join(images_dir, sub)))[:count]
            out = os.path.join(folder, f"methods-{label}-{count}")
            times[count] = timed(lambda: explain_files(loaded, names, out, batch_size=batch,
                                                       **fields))
        ends[label] = (times[4 * batch] - times[batch]) / (3 * batch)
    e2e = {"four": ends["four"] / ends["guided"], "top3": ends["top3"] / ends["top1"]}
    four_verdict = "met" if engine["four"] <= 1.8 else "NOT met"
    print(f"ResNet50 weights=None, 224x224, batch {batch}, marginal time per image "
          f"(end to end: 320x240 JPEGs, renders color+overlay, so 4x the PNGs):")
    print(f"  guided,vanilla,gradcam,guided-gradcam over guided: engine {engine['four']:.2f}, "
          f"end to end {e2e['four']:.2f} (target <= 1.8 {four_verdict}; floor ~1.67)")
    print(f"  top-3 over top-1: engine {engine['top3']:.2f}, end to end {e2e['top3']:.2f} "
          f"(floor ~2.33)")



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    several_methods(folder)
