"""many-targets: K targets per image cost K backward passes and one trace whatever K: guided
backprop of each image's top-K classes on MobileNetV2 (``weights=None``, 1000 classes,
128x128, 4 images, batch 16) and of K Detection targets on the bundled detector
(``demo-det``, one scene, the K best proposals' boxes), K = 1, 10, 100: the first call's
seconds (with the trace where K is new) and seconds per target of a second call (the median
of 3), and the traces run.
"""

from __future__ import annotations

import statistics

import keras
import numpy as np

from guidedbp import Explainer
from sections.common import timed

#: The section's name, as ``--only`` takes it.
NAME = "many-targets"


def many_targets(counts=(1, 10, 100), rounds: int = 3) -> None:
    """Top-K classes and K detections per image: first call, then seconds per target."""
    import guidedbp
    from guidedbp.demo.shapes import make_scenes
    from guidedbp.targets import Detection

    keras.utils.set_random_seed(0)
    classifier = keras.applications.MobileNetV2(weights=None, input_shape=(128, 128, 3))
    images = np.random.default_rng(0).uniform(-1, 1, (4, 128, 128, 3)).astype(np.float32)
    by_class = Explainer(classifier, "guided", batch_size=16)
    detector = guidedbp.load_model("demo-det").model
    scene = make_scenes(1, seed=35_000, distractors=True).images.astype("float32")
    by_box = Explainer(detector, "guided", batch_size=16)
    found = by_box.detect(scene, max(counts), threshold=0.0)[0]

    def boxes(count: int) -> list:
        return [Detection(found.boxes[index], label=int(found.labels[index]))
                for index in range(min(count, len(found.boxes)))]

    runs = {"MobileNetV2 top-K classes (4 images)": (by_class, lambda k: by_class.explain_top_k(
                images, k), len(images)),
            "demo-det K detections (1 scene)": (by_box, lambda k: by_box.explain_targets(
                scene, boxes(k)), 1)}
    print("many-targets: guided backprop, K targets per image; first call (trace where K "
          f"is new), then seconds per target (median of {rounds})")
    for name, (explainer, run, count) in runs.items():
        print(f"  {name}")
        for k in counts:
            traces = explainer.trace_count
            first = timed(run, k)
            again = statistics.median(timed(run, k) for _ in range(rounds))
            print(f"    K={k:<4} first {first:6.2f} s, then {again / (k * count) * 1000:7.2f} ms "
                  f"per target ({again:.2f} s), traces run {explainer.trace_count - traces}")



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    many_targets()
