"""targets: guided backprop of a :class:`~guidedbp.targets.Region` target on a 224x224
segmentation model (ResNet50 backbone, ``weights=None``, a 1x1 conv head of 21 classes
upsampled 32x, softmax) against a class target on the same backbone with a pooled dense
head; and two targets from one forward pass (``explain_targets([Region(0), Region(1)])``)
against one. Batch 8, median of interleaved rounds.
"""

from __future__ import annotations

import statistics

import keras
import numpy as np

from guidedbp import Explainer
from sections.common import timed

#: The section's name, as ``--only`` takes it.
NAME = "targets"


TARGET_REGION_RATIO = 1.10
TARGET_TWO_TARGETS = 1.7


def target_costs(rounds: int = 7, batch: int = 8, size: int = 224) -> None:
    from guidedbp.targets import Region

    keras.utils.set_random_seed(0)
    backbone = keras.applications.ResNet50(weights=None, include_top=False,
                                           input_shape=(size, size, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(backbone.output)
    classifier = keras.Model(backbone.input,
                             keras.layers.Dense(21, activation="softmax")(pooled))
    dense = keras.layers.Conv2D(21, 1)(backbone.output)
    dense = keras.layers.UpSampling2D(32, interpolation="bilinear")(dense)
    segmenter = keras.Model(backbone.input, keras.layers.Softmax()(dense))
    images = np.random.default_rng(0).uniform(-1, 1, (batch, size, size, 3)).astype(np.float32)
    by_class = Explainer(classifier, "guided", batch_size=batch)
    by_region = Explainer(segmenter, "guided", batch_size=batch)
    runs = {
        "class": lambda: by_class.explain(images, 0),
        "region": lambda: by_region.explain(images, Region(0)),
        "two regions": lambda: by_region.explain_targets(images, [Region(0), Region(1)]),
    }
    for run in runs.values():  # trace and warm up
        run()
        run()
    times = {name: [] for name in runs}
    for round_index in range(rounds):
        names = list(runs) if round_index % 2 == 0 else list(reversed(runs))
        for name in names:
            times[name].append(timed(runs[name]))
    region = statistics.median(r / c for r, c in zip(times["region"], times["class"]))
    two = statistics.median(t / r for t, r in zip(times["two regions"], times["region"]))
    print(f"targets: ResNet50 backbone, {size}x{size}, batch {batch}, guided, median of "
          f"{rounds} interleaved rounds")
    print(f"  class target {statistics.median(times['class']):.3f} s, Region target "
          f"{statistics.median(times['region']):.3f} s: ratio {region:.3f} (target <= "
          f"{TARGET_REGION_RATIO:.2f} {'met' if region <= TARGET_REGION_RATIO else 'NOT met'})")
    both = statistics.median(times["two regions"])
    print(f"  two Region targets from one forward pass {both:.3f} s: {two:.3f} x one "
          f"(target <= {TARGET_TWO_TARGETS:.1f} "
          f"{'met' if two <= TARGET_TWO_TARGETS else 'NOT met'})")



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    target_costs()
