"""costs: every method's time per image relative to guided backprop, on ResNet50
(``weights=None``), 224x224, batch 16, each method in an explainer of its own, warmed up;
perturbation methods (Score-CAM, occlusion) at their default settings; the black-box methods
apart (blackbox).
"""

from __future__ import annotations

import statistics

import keras
import numpy as np

from guidedbp import Explainer
from sections.common import timed

#: The section's name, as ``--only`` takes it.
NAME = "costs"


#: The most a many-forward-pass method (Score-CAM, occlusion) may cost, over guided.
PERTURBATION_TARGET = 20.0


def method_costs(rounds: int = 3, batch: int = 16, only=None) -> None:
    from guidedbp import METHODS
    from guidedbp.engine.methods.registry import method

    keras.utils.set_random_seed(0)
    model = keras.applications.ResNet50(weights=None)
    images = np.random.default_rng(0).normal(size=(batch, 224, 224, 3)).astype("float32")
    # The black-box methods cost hundreds of forward passes per image: blackbox_costs
    # times them on fewer images.
    # D-RISE explains detections alone: the drise section times it on a detector.
    names = ["guided", *(name for name in (only or METHODS) if name != "guided"
                         and (only or "blackbox" not in method(name).options)
                         and method(name).target is None)]
    explainers = {name: Explainer(model, name, batch_size=batch) for name in names}
    for explainer in explainers.values():
        explainer.explain(images)  # traced and run once
    # Interleaved rounds, each method against the guided run of its own round, so a
    # machine that slows down for a while slows both sides of a ratio.
    ratios: dict[str, list[float]] = {name: [] for name in names}
    guided_seconds = []
    for _ in range(rounds):
        guided = timed(explainers["guided"].explain, images)
        guided_seconds.append(guided)
        for name in names:
            seconds = guided if name == "guided" else timed(explainers[name].explain, images)
            ratios[name].append(seconds / guided)
    print(f"cost per image relative to guided, ResNet50 weights=None, 224x224, batch {batch}, "
          f"median of {rounds} interleaved rounds (guided: "
          f"{statistics.median(guided_seconds) / batch * 1000:.0f} ms per image):")
    for name in names:
        value = statistics.median(ratios[name])
        verdict = ""
        if method(name).perturbation:
            verdict = (f" (target <= {PERTURBATION_TARGET:.0f} "
                       f"{'met' if value <= PERTURBATION_TARGET else 'NOT met'})")
        print(f"  {name:<22}{value:>7.2f}{verdict}")



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    method_costs(only=args.methods.split(",") if args.methods else None)
