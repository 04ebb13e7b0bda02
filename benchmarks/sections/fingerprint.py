"""fingerprint: the resume fingerprint (``made_by``, once per run) against a ResNet50
(``weights=None``) run of 256 images, 224x224, batch 16, guided, side by side in this
process, for the model in memory and as a ``.keras`` file (target <= 2 %); every input's
fingerprint (``input_file``) for 256 JPEGs against the same run (target <= 2 %); and the
model digest of VGG16 (528 MB of weights) as a ``.keras`` file, a SavedModel folder and in
memory.
"""

from __future__ import annotations

import os
import statistics

import keras
import numpy as np

from guidedbp import Explainer
from sections.common import timed

#: The section's name, as ``--only`` takes it.
NAME = "fingerprint"


def fingerprint_cost(folder: str, count: int = 256, batch: int = 16, rounds: int = 5) -> bool:
    """The resume fingerprint (``made_by``: the model's content digest and the options'
    digests, computed once per run) against a run of ``count`` images on ResNet50
    (``weights=None``, 224x224, batch 16, guided: the engine alone, a lower bound of the
    whole job's time, so the ratio is an upper bound), side by side in this process; the
    fingerprint of ResNet50 in memory (``keras:NAME``) and as a ``.keras`` file, median of
    ``rounds`` taken before and after the run. Then VGG16's model digest (528 MB of
    weights) as a ``.keras`` file, a SavedModel folder (``model.export``) and in memory,
    median of ``rounds``, files just written (in the page cache, as after loading)."""
    import shutil

    from guidedbp.models.digest import file_digest, folder_digest, keras_digest
    from guidedbp.models.loading import load_model
    from guidedbp.pipeline.fingerprint import made_by
    from guidedbp.pipeline.options import RunOptions

    target = 0.02
    options = RunOptions.of(methods="guided", batch_size=batch)
    keras.utils.set_random_seed(0)
    in_memory = load_model("keras:ResNet50", weights="none")
    path = os.path.join(folder, "fingerprint-ResNet50.keras")
    in_memory.model.save(path)
    from_file = load_model(path, preprocess="caffe")
    explainer = Explainer(in_memory, "guided", batch_size=batch)
    images = np.random.default_rng(0).uniform(-120, 150, (count, 224, 224, 3)).astype(np.float32)
    explainer.explain_top_k(images[:batch], 1)  # traced and warmed up

    def run() -> None:
        for start in range(0, count, batch):
            explainer.explain_top_k(images[start : start + batch], 1)

    seconds: dict[str, list[float]] = {"in memory": [], ".keras file": []}

    def fingerprints(times: int) -> None:
        for _ in range(times):
            seconds["in memory"].append(timed(made_by, in_memory, options))
            seconds[".keras file"].append(timed(made_by, from_file, options, None, path))

    fingerprints(rounds // 2 + 1)
    run_s = timed(run)
    fingerprints(rounds - rounds // 2 - 1)
    print(f"resume fingerprint vs a run: ResNet50 weights=None, {count} images 224x224, batch "
          f"{batch}, guided (engine alone), {os.cpu_count()} CPUs: run {run_s:.1f} s")
    met = True
    for kind, values in seconds.items():
        ratio = statistics.median(values) / run_s
        met = met and ratio <= target
        print(f"  fingerprint, model {kind}: {statistics.median(values):.3f} s = "
              f"{100 * ratio:.2f} % of the run (target <= {100 * target:g} %): "
              f"{'met' if ratio <= target else 'NOT met'}", flush=True)

    met = input_fingerprint_cost(folder, count, run_s, rounds, target) and met

    keras.utils.set_random_seed(0)
    model = keras.applications.VGG16(weights=None)
    paths = {".keras": os.path.join(folder, "fingerprint-VGG16.keras"),
             "SavedModel": os.path.join(folder, "fingerprint-VGG16_savedmodel")}
    model.save(paths[".keras"])
    model.export(paths["SavedModel"], verbose=False)
    digests = {".keras": (file_digest, paths[".keras"]),
               "SavedModel": (folder_digest, paths["SavedModel"]),
               "in memory": (keras_digest, model)}
    size = sum(v.numpy().nbytes for v in model.weights)
    print(f"VGG16 weights=None ({size / 1e6:.0f} MB of weights): model digest (SHA-256), "
          f"median of {rounds}")
    for kind, (function, argument) in digests.items():
        values = [timed(function, argument) for _ in range(rounds)]
        median = statistics.median(values)
        print(f"  {kind:<11}{median:>7.2f} s ({size / 1e9 / median:.1f} GB/s of weights)",
              flush=True)
    os.remove(paths[".keras"])
    shutil.rmtree(paths["SavedModel"])
    return met


def input_fingerprint_cost(folder: str, count: int, run_s: float, rounds: int,
                           target: float) -> bool:
    """Every input's fingerprint (``input_file``, :mod:`guidedbp.io.source`: taken once per
    explained input, and once per input a resumed run carries over) for ``count`` JPEGs of
    224x224 (quality 90, noise: about 46 kB), against the run of ``count`` images: with
    times in nanoseconds (a ``stat``) and in whole seconds (a ``stat`` and the content's
    SHA-256), median of ``rounds``, files in the page cache."""
    import shutil

    from PIL import Image

    from guidedbp.io.inputs import InputItem
    from guidedbp.io.source import fingerprint

    images = os.path.join(folder, "fingerprint-inputs")
    os.makedirs(images, exist_ok=True)
    rng = np.random.default_rng(0)
    items = []
    for index in range(count):
        path = os.path.join(images, f"{index:04d}.jpg")
        Image.fromarray(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)).save(
            path, quality=90)
        items.append(InputItem(path, f"{index:04d}.jpg"))
    size = sum(os.path.getsize(item.path) for item in items) / count

    def all_of_them() -> None:
        for item in items:
            fingerprint(item)

    met = True
    print(f"  input fingerprints, {count} JPEGs of {size / 1e3:.0f} kB:")
    for kind in ("time in ns", "time in whole s"):
        if kind == "time in whole s":
            for index, item in enumerate(items):
                os.utime(item.path, ns=(1_600_000_000 * 10**9, 1_600_000_000 * 10**9))
        seconds = statistics.median(timed(all_of_them) for _ in range(rounds))
        ratio = seconds / run_s
        met = met and ratio <= target
        print(f"    {kind:<16}{seconds * 1e3:7.1f} ms = {1e6 * seconds / count:5.1f} us per "
              f"input = {100 * ratio:.3f} % of the run (target <= {100 * target:g} %): "
              f"{'met' if ratio <= target else 'NOT met'}", flush=True)
    shutil.rmtree(images)
    return met



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    fingerprint_cost(folder)
