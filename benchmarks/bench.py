"""`make bench`: speed figures measured side by side in one process.

- engine: guided vs vanilla (plain input gradient) on Keras applications with
  ``weights=None`` at 224x224, batch 8. Both explainers are warmed up (traced and
  run once), then timed alternately; the ratio is the median of per-round ratios.
- savedmodel: loading a ResNet50 SavedModel (inlining its graph) and its first trace.
- end-to-end: ``guidedbp explain`` over a folder of 256 JPEGs against the engine
  alone on the same preprocessed batches, same explainer, same process.
- memory: peak RSS of ``guidedbp explain`` on 100 and on 1,000 images (separate
  processes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from guidedbp import Explainer  # noqa: E402

APPLICATIONS = ("ResNet50", "DenseNet121", "MobileNetV2", "VGG16")
TARGET_RATIO = 1.10


def timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def engine_ratios(rounds: int, batch: int, size: int) -> bool:
    print(f"guided vs vanilla gradient: weights=None, {size}x{size}, batch {batch}, "
          f"median of >= {rounds} interleaved rounds (~10 s per model)")
    print(f"{'model':<14}{'guided s':>10}{'vanilla s':>11}{'ratio':>8}")
    images = np.random.default_rng(0).uniform(-1, 1, (batch, size, size, 3)).astype(np.float32)
    worst = 0.0
    for name in APPLICATIONS:
        keras.utils.set_random_seed(0)
        model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3))
        guided = Explainer(model, "guided", batch_size=batch)
        vanilla = Explainer(model, "vanilla", batch_size=batch)
        for explainer in (guided, vanilla):  # trace and warm up
            explainer(images, 0)
            explainer(images, 0)
        # Fast models get more rounds (about 10 s of vanilla time): their medians are
        # otherwise at the mercy of a few noisy milliseconds.
        model_rounds = min(41, max(rounds, int(10.0 / max(timed(vanilla, images, 0), 1e-3))))
        guided_times, vanilla_times, ratios = [], [], []
        for round_index in range(model_rounds):
            # Alternate which goes first so neither always runs on a warmer cache.
            pair = (guided, vanilla) if round_index % 2 == 0 else (vanilla, guided)
            times = {id(e): timed(e, images, 0) for e in pair}
            guided_times.append(times[id(guided)])
            vanilla_times.append(times[id(vanilla)])
            ratios.append(times[id(guided)] / times[id(vanilla)])
        ratio = statistics.median(ratios)
        worst = max(worst, ratio)
        print(f"{name:<14}{statistics.median(guided_times):>10.3f}"
              f"{statistics.median(vanilla_times):>11.3f}{ratio:>8.3f}  ({model_rounds} rounds)",
              flush=True)
        assert guided.trace_count == 1 and vanilla.trace_count == 1
    verdict = "met" if worst <= TARGET_RATIO else "NOT met"
    print(f"worst ratio {worst:.3f}: target <= {TARGET_RATIO:.2f} {verdict}")
    return worst <= TARGET_RATIO


def savedmodel_load(folder: str) -> None:
    from guidedbp import load_model

    keras.utils.set_random_seed(0)
    path = os.path.join(folder, "resnet50_savedmodel")
    keras.applications.ResNet50(weights=None).export(path, verbose=False)
    start = time.perf_counter()
    loaded = load_model(path)
    loaded_s = time.perf_counter() - start
    explainer = Explainer(loaded)
    start = time.perf_counter()
    explainer(np.zeros((1, 224, 224, 3), np.float32))
    first_s = time.perf_counter() - start
    print(f"ResNet50 SavedModel: load + inline {loaded_s:.2f} s, "
          f"first map (trace) {first_s:.2f} s, guided ops {explainer.report.guided_ops}")


def write_images(folder: str, count: int, size=(240, 320)) -> None:
    from PIL import Image

    rng = np.random.default_rng(1)
    yy, xx = np.mgrid[0 : size[0], 0 : size[1]]
    os.makedirs(folder, exist_ok=True)
    for index in range(count):
        phase = rng.uniform(0, 6.3, 3)
        base = 127 + 100 * np.sin(xx[..., None] / rng.uniform(8, 40) + yy[..., None] / 23 + phase)
        noise = rng.normal(0, 20, (*size, 3))
        pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
        sub = os.path.join(folder, f"part{index % 4}")
        os.makedirs(sub, exist_ok=True)
        Image.fromarray(pixels).save(os.path.join(sub, f"img{index:04d}.jpg"), quality=90)


def end_to_end(folder: str, model_name: str = "ResNet50", count: int = 256, batch: int = 16,
               rounds: int = 2) -> None:
    from guidedbp.cli.job import ExplainJob, Settings
    from guidedbp.io.images import decode_image
    from guidedbp.io.inputs import collect_inputs
    from guidedbp.models.loading import load_model
    from guidedbp.models.preprocess import fit, preprocess

    images_dir = os.path.join(folder, "images")
    write_images(images_dir, count)
    keras.utils.set_random_seed(0)
    loaded = load_model(f"keras:{model_name}", weights="none")
    explainer = Explainer(loaded, batch_size=batch)
    items = collect_inputs([images_dir]).items
    size = loaded.input_shape[:2]
    # Engine-only inputs are decoded and preprocessed up front, outside the timing.
    arrays = [preprocess(fit(decode_image(item.path), size)[0], loaded.preprocess)
              for item in items]
    batches = [np.stack(arrays[i : i + batch]) for i in range(0, count, batch)]
    explainer.explain(batches[0])  # trace and warm up

    def engine_only():
        for images in batches:
            explainer.explain(images)

    def whole_job(round_index):
        out = os.path.join(folder, f"out{round_index}")
        summary = ExplainJob(loaded, explainer, Settings(output=out, batch_size=batch)).run(items)
        assert summary.done == count, summary

    engine_rates, job_rates = [], []
    for round_index in range(rounds):
        engine_rates.append(count / timed(engine_only))
        job_rates.append(count / timed(whole_job, round_index))
    engine_rate, job_rate = statistics.median(engine_rates), statistics.median(job_rates)
    ratio = job_rate / engine_rate
    verdict = "met" if ratio >= 0.85 else "NOT met"
    print(f"{model_name} weights=None, {count} JPEGs 320x240, batch {batch}, "
          f"renders color+overlay: engine-only {engine_rate:.1f} images/s, "
          f"end-to-end {job_rate:.1f} images/s, ratio {ratio:.2f} (target >= 0.85 {verdict})")


def ray_engine(folder: str, count: int = 256, batch: int = 16, workers: int = 2) -> None:
    """The local engine against the Ray engine (local Ray, ``workers`` actors of 1 CPU each)
    on the same JPEGs and the same saved MobileNetV2 (weights=None, 224x224): ResNet50 on
    2 shared cores would take minutes per engine."""
    import ray

    from guidedbp.cli.job import ExplainJob, Settings
    from guidedbp.cli.ray_job import Cluster, Recipe, run_on_ray
    from guidedbp.io.inputs import collect_inputs
    from guidedbp.models.loading import load_model

    images_dir = os.path.join(folder, "ray-images")
    write_images(images_dir, count)
    keras.utils.set_random_seed(0)
    model_path = os.path.join(folder, "mobilenetv2.keras")
    keras.applications.MobileNetV2(weights=None).save(model_path)
    items = collect_inputs([images_dir]).items
    load = {"preprocess": "tf"}
    loaded = load_model(model_path, **load)

    local_settings = Settings(output=os.path.join(folder, "ray-local"), batch_size=batch)
    explainer = Explainer(loaded, batch_size=batch)
    local_s = timed(lambda: ExplainJob(loaded, explainer, local_settings).run(items))

    options = {"methods": ("guided",), "batch_size": batch, "upsample": "bilinear",
               "layer": None, "smooth": 0, "noise": 0.15, "seed": 0, "steps": 32,
               "baseline": "black"}
    recipe = Recipe(model=model_path, load=load, explain=options)
    ray_settings = Settings(output=os.path.join(folder, "ray-ray"), batch_size=batch)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             logging_level="warning")
    try:
        cluster = Cluster(workers=workers)
        # The first run in a fresh Ray instance also starts its worker processes; both
        # runs start their actors (model load, trace).
        cold_s = timed(lambda: run_on_ray(recipe, loaded, ray_settings, items, cluster))
        ray_s = timed(lambda: run_on_ray(recipe, loaded, ray_settings, items, cluster))
    finally:
        ray.shutdown()
    same = all(
        open(os.path.join(local_settings.output, name), "rb").read()
        == open(os.path.join(ray_settings.output, name), "rb").read()
        for name in ("manifest.jsonl", "part0/img0000.guided.color.png")
    )
    print(f"MobileNetV2 weights=None (saved .keras), {count} JPEGs 320x240, batch {batch}, "
          f"renders color+overlay, {os.cpu_count()} CPUs: local engine {count / local_s:.1f} "
          f"images/s, Ray engine ({workers} workers x 1 CPU, local Ray, incl. actor start-up) "
          f"{count / cold_s:.1f} images/s first run, {count / ray_s:.1f} images/s second run; "
          f"same bytes: {same}")


# Peak RSS from VmHWM: ru_maxrss would carry the parent's peak across fork + exec.
_MEMORY_SCRIPT = """
import sys
from guidedbp.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
with open("/proc/self/status") as status:
    print(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
"""


def memory(folder: str) -> None:
    keras.utils.set_random_seed(0)
    inputs = keras.Input((64, 64, 3))
    x = keras.layers.Rescaling(1 / 255)(inputs)
    x = keras.layers.Conv2D(16, 3, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model_path = os.path.join(folder, "small.keras")
    keras.Model(inputs, keras.layers.Dense(5, activation="softmax")(x)).save(model_path)
    peaks = {}
    for count in (100, 1000):
        images_dir = os.path.join(folder, f"memory{count}")
        write_images(images_dir, count, size=(64, 64))
        result = subprocess.run(
            [sys.executable, "-c", _MEMORY_SCRIPT, "explain", model_path, images_dir, "-q",
             "-o", os.path.join(folder, f"memory-out{count}"), "--batch-size", "16"],
            capture_output=True, text=True, check=True,
        )
        peaks[count] = int(result.stdout.strip().splitlines()[-1]) / 1024  # KiB -> MiB
    growth = peaks[1000] / peaks[100] - 1
    verdict = "met" if abs(growth) <= 0.10 else "NOT met"
    print(f"peak RSS of explain: 100 images {peaks[100]:.0f} MiB, "
          f"1,000 images {peaks[1000]:.0f} MiB ({growth:+.1%}; target within 10% {verdict})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--only", choices=["engine", "savedmodel", "end-to-end", "memory", "ray"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="guidedbp-bench-") as folder:
        if args.only in (None, "engine"):
            engine_ratios(args.rounds, args.batch, args.size)
        if args.only in (None, "savedmodel"):
            savedmodel_load(folder)
        if args.only in (None, "end-to-end"):
            end_to_end(folder)
        if args.only in (None, "memory"):
            memory(folder)
        if args.only in (None, "ray"):
            ray_engine(folder)


if __name__ == "__main__":
    main()
