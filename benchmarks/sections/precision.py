"""precision: guided backprop with ``precision="mixed"`` against float32 on ResNet50
(``weights=None``), 224x224, batch 16 (the sample photos and shapes, caffe preprocessing):
time per batch, median of interleaved rounds, the speed-up, and each map's Pearson and
Spearman correlation with its float32 map; skipped, with the reason, where the hardware has
no fast path. With a GPU, also images/s of ResNet50 and MobileNetV2 in float32 and mixed.
"""

from __future__ import annotations

import statistics

import keras
import numpy as np

from guidedbp import Explainer
from guidedbp.engine import format_counts
from sections.common import bench_model, sample_batch, timed

#: The section's name, as ``--only`` takes it.
NAME = "precision"


#: The least speed-up of ``precision="mixed"`` over float32, and the least Pearson
#: correlation of each mixed map with its float32 map.
PRECISION_SPEEDUP = 1.3
PRECISION_PEARSON = 0.99


def mixed_precision(rounds: int = 7, batch: int = 16, size: int = 224) -> None:
    import tensorflow as tf

    from guidedbp.checks.stats import spearman
    from guidedbp.errors import ArgumentError

    keras.utils.set_random_seed(0)
    model = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3))
    images = sample_batch(batch, size, "caffe")
    full = Explainer(model, "guided", batch_size=batch)
    try:
        mixed = Explainer(model, "guided", batch_size=batch, precision="mixed")
    except ArgumentError as error:
        print(f"precision: skipped: {error}")
        return
    guided = (mixed.report.guided_activations, full.report.guided_activations)
    assert guided[0] == guided[1], guided  # bfloat16 guides every activation float32 does
    references = full(images)
    maps = mixed(images)
    assert maps.dtype == np.float32
    times: dict[str, list[float]] = {"float32": [], "mixed": []}
    for round_index in range(rounds):
        pair = ("float32", "mixed") if round_index % 2 == 0 else ("mixed", "float32")
        for name in pair:
            times[name].append(timed(full if name == "float32" else mixed, images))
    speedup = statistics.median(f / m for f, m in zip(times["float32"], times["mixed"]))
    pearson = [float(np.corrcoef(a.ravel(), b.ravel())[0, 1])
               for a, b in zip(references, maps)]
    spearmans = [spearman(a.ravel(), b.ravel()) for a, b in zip(references, maps)]
    print(f"precision: guided backprop, ResNet50 weights=None, {size}x{size}, batch {batch}, "
          f"{mixed.compute_dtype} past the stem, median of {rounds} interleaved rounds "
          f"(guided {format_counts(mixed.report.guided_activations)} in both)")
    print(f"  float32 {statistics.median(times['float32']):.3f} s, mixed "
          f"{statistics.median(times['mixed']):.3f} s per batch: speed-up {speedup:.2f}x "
          f"(target >= {PRECISION_SPEEDUP} {'met' if speedup >= PRECISION_SPEEDUP else 'NOT met'})")
    print(f"  per-map Pearson min {min(pearson):.4f} median {statistics.median(pearson):.4f} "
          f"(target >= {PRECISION_PEARSON} "
          f"{'met' if min(pearson) >= PRECISION_PEARSON else 'NOT met'}); Spearman min "
          f"{min(spearmans):.4f} median {statistics.median(spearmans):.4f}")
    if not tf.config.list_physical_devices("GPU"):
        return
    gpu_batch = 64
    print(f"  GPU images/s, guided, {size}x{size}, batch {gpu_batch}:")
    for name in ("ResNet50", "MobileNetV2"):
        model = bench_model(name, size)
        gpu_images = np.random.default_rng(0).uniform(-1, 1, (gpu_batch, size, size, 3)).astype(
            np.float32)
        explainers = {precision: Explainer(model, "guided", batch_size=gpu_batch,
                                           precision=precision)
                      for precision in ("float32", "mixed")}
        rates = {}
        for precision, explainer in explainers.items():
            explainer(gpu_images, 0)  # trace and warm up
            explainer(gpu_images, 0)
            rates[precision] = gpu_batch / statistics.median(
                timed(explainer, gpu_images, 0) for _ in range(rounds))
        print(f"    {name:<12} float32 {rates['float32']:>8.1f}  mixed "
              f"({explainers['mixed'].compute_dtype}) {rates['mixed']:>8.1f}  "
              f"x{rates['mixed'] / rates['float32']:.2f}")



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    mixed_precision()
