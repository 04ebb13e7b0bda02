"""blackbox: RISE, KernelSHAP, LIME and Sobol at their defaults on 2 ResNet50 images (224x224,
16 copies per forward pass): cost per image relative to guided backprop, and the time over
that of the same number of plain forward passes of the model (16 images per pass, the same
forward function): what the method adds to its forward passes.
"""

from __future__ import annotations

import statistics

import keras
import numpy as np

from guidedbp import Explainer
from sections.common import timed

#: The section's name, as ``--only`` takes it.
NAME = "blackbox"


#: The most a black-box method may cost over the same number of plain forward passes of
#: the model, batched alike.
BLACKBOX_OVERHEAD = 1.2


def blackbox_costs(rounds: int = 3, batch: int = 16, count: int = 2) -> None:
    """Each black-box method, defaults, on ``count`` ResNet50 images: its cost per image
    relative to guided (on a batch of ``batch``), and its time over that of the same number
    of plain forward passes (``batch`` copies per pass, timed through the same forward
    function), interleaved rounds."""
    from guidedbp.engine.methods.blackbox import passes_per_image
    from guidedbp.engine.methods.registry import REGISTRY

    keras.utils.set_random_seed(0)
    model = keras.applications.ResNet50(weights=None)
    rng = np.random.default_rng(0)
    batch_images = rng.normal(size=(batch, 224, 224, 3)).astype("float32")
    images = batch_images[:count]
    names = [name for name, record in REGISTRY.items()
             if "blackbox" in record.options and record.target is None]  # drise: its section
    guided = Explainer(model, "guided", batch_size=batch)
    explainers = {name: Explainer(model, name, batch_size=batch) for name in names}
    passes = {name: passes_per_image(name, explainers[name].options.blackbox, 224, 224)
              for name in names}
    guided.explain(batch_images)
    guided.predict(batch_images)
    for explainer in explainers.values():
        explainer.explain(images[:1])  # traced and run once
    costs: dict[str, list[float]] = {name: [] for name in names}
    overheads: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        per_image = timed(guided.explain, batch_images) / batch
        forward = timed(guided.predict, batch_images) / batch  # one copy's forward pass
        for name in names:
            seconds = timed(explainers[name].explain, images) / count
            costs[name].append(seconds / per_image)
            overheads[name].append(seconds / (passes[name] * forward))
    print(f"black-box methods, ResNet50 weights=None, 224x224, {count} images, {batch} copies "
          f"per pass, defaults, median of {rounds} interleaved rounds:")
    print(f"  {'method':<12}{'passes':>8}{'cost vs guided':>16}{'vs plain passes':>17}")
    for name in names:
        overhead = statistics.median(overheads[name])
        verdict = "met" if overhead <= BLACKBOX_OVERHEAD else "NOT met"
        print(f"  {name:<12}{passes[name]:>8}{statistics.median(costs[name]):>16.1f}"
              f"{overhead:>11.2f} (target <= {BLACKBOX_OVERHEAD} {verdict})")



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    blackbox_costs()
