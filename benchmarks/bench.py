"""`make bench`: speed figures measured side by side in one process.

- engine: guided vs vanilla (plain input gradient) on Keras applications with
  ``weights=None`` at 224x224, batch 8 — the ReLU models, then EfficientNetB0,
  ConvNeXtTiny and keras-hub's ViT-B/16, guided by the generalised rule (SiLU, GELU).
  Both explainers are warmed up (traced and run once), then timed alternately; the
  ratio is the median of per-round ratios.
- savedmodel: VGG16 and ResNet50 (``weights=None``, 224x224) loaded with ``load_model``
  from a SavedModel (``model.export``) and from the same model's ``.keras`` file, each
  load in a fresh process (best of 2): load time, peak RSS (``VmHWM`` once loaded)
  and the first map's time (its trace); targets: the SavedModel within 2x the
  ``.keras`` load time and 1.5x its peak RSS.
- methods: several methods from one forward pass. On ResNet50 (``weights=None``),
  224x224, batch 16: the marginal time per image (so start-up cancels) of
  ``guided,vanilla,gradcam,guided-gradcam`` over ``guided`` alone, and of top-3 over
  top-1 classes, measured in the engine and end to end (``explain_files``, the
  ``guidedbp explain`` job).
- end-to-end: the pipeline at engine speed. MobileNetV2 and ResNet50 (``keras:NAME``,
  ``weights=None``), 320x240 JPEGs, batch 16, guided, renders color+overlay: the
  marginal rate (``(256 - 64) / (t256 - t64)``, so start-up cancels) of the explain job
  (``run_local`` and the report, what ``explain_files`` runs after loading and tracing)
  against the engine alone on the same decoded, preprocessed batches, same explainer,
  same process; median of interleaved rounds.
- memory: peak RSS of ``guidedbp explain`` on 100 and on 1,000 images (separate
  processes).
- memory-big: peak RSS of ``guidedbp explain`` on one PNG of 1 megapixel and on one
  of 81 megapixels (9000 x 9000, a few hundred KB), same small model, default renders
  (separate processes): memory must follow the batch, not the image's size.
- costs: every method's time per image relative to guided backprop, on ResNet50
  (``weights=None``), 224x224, batch 16, each method in an explainer of its own, warmed
  up; perturbation methods (Score-CAM, occlusion) at their default settings; the
  black-box methods apart (blackbox).
- blackbox: RISE, KernelSHAP, LIME and Sobol at their defaults on 2 ResNet50 images
  (224x224, 16 copies per forward pass): cost per image relative to guided backprop, and
  the time over that of the same number of plain forward passes of the model (16 images
  per pass, the same forward function): what the method adds to its forward passes.
- drise: D-RISE beside RISE on the bundled detector (``demo-det``, 96x96) and one
  Detection target per image (the object's true box, 4 held-out shape scenes),
  1000 masks each, 64 copies per pass, each at its default grid (D-RISE 16, RISE 7):
  forward passes per image, seconds per image, D-RISE over RISE, each over the same
  number of plain forward passes of the detector, and over guided backprop of the same
  Detection target; median of interleaved rounds. Then both at one grid: the same maps.
- callback: ``guidedbp.keras.SaliencyCallback`` at one epoch's end on the bundled demo
  CNN (16 images, guided and Grad-CAM): the time training waits (the explain pass) and
  the whole work (with the drawing, PNG encoding and logging done in the background),
  each against one plain ``Explainer`` call on the same images; median of alternating
  rounds.
- report: writing ``OUT/index.html`` from a manifest of 10,000 records.
- targets: guided backprop of a :class:`~guidedbp.targets.Region` target on a 224x224
  segmentation model (ResNet50 backbone, ``weights=None``, a 1x1 conv head of 21
  classes upsampled 32x, softmax) against a class target on the same backbone with a
  pooled dense head; and two targets from one forward pass
  (``explain_targets([Region(0), Region(1)])``) against one. Batch 8, median of
  interleaved rounds.
- detection: a :class:`~guidedbp.targets.Detection` target (D-RISE's similarity, the max
  over every proposal's IoU times class score) against a class-like target of the same
  detector (a ``Unit``: one proposal's class score), guided and vanilla, on the bundled
  detector (``demo-det``, 96x96, 144 proposals, 6 classes), 32 scenes, batch 16, median
  of interleaved rounds; target <= 1.2x.
- many-targets: K targets per image cost K backward passes and one trace whatever K:
  guided backprop of each image's top-K classes on MobileNetV2 (``weights=None``, 1000
  classes, 128x128, 4 images, batch 16) and of K Detection targets on the bundled
  detector (``demo-det``, one scene, the K best proposals' boxes), K = 1, 10, 100: the
  first call's seconds (with the trace where K is new) and seconds per target of
  a second call (the median of 3), and the traces run.
- precision: guided backprop with ``precision="mixed"`` against float32 on ResNet50
  (``weights=None``), 224x224, batch 16 (the sample photos and shapes, caffe
  preprocessing): time per batch, median of interleaved rounds, the speed-up, and each
  map's Pearson and Spearman correlation with its float32 map; skipped, with the
  reason, where the hardware has no fast path. With a GPU, also images/s of ResNet50
  and MobileNetV2 in float32 and mixed.
- fingerprint: the resume fingerprint (``made_by``, once per run) against a ResNet50
  (``weights=None``) run of 256 images, 224x224, batch 16, guided, side by side in this
  process, for the model in memory and as a ``.keras`` file (target <= 2 %); every input's
  fingerprint (``input_file``) for 256 JPEGs against the same run (target <= 2 %); and the
  model digest of VGG16 (528 MB of weights) as a ``.keras`` file, a SavedModel folder and
  in memory.
- startup: a cold ``guidedbp explain demo ONE.png``, phase by phase (guidedbp's imports,
  TensorFlow's import, loading, the trace, the first and a second map), median of 3 fresh
  processes, and the whole command's wall time.
- s3: object storage, against moto's S3 server on 127.0.0.1 (in a process of its own, on
  the same machine; nothing beyond 127.0.0.1). ``explain_files`` (local runner) from a
  bucket into a bucket against local folder into local folder: MobileNetV2 and ResNet50
  (``keras:NAME``, ``weights=None``), the end-to-end section's 320x240 JPEGs, batch 16,
  color+overlay, marginal images/s, median of interleaved rounds (target: the ratio
  >= 0.9), on 64 vs 16 images, not 256 vs 64: against moto on 2 shared cores a store run
  goes at a few images/s, and ResNet50 at 256 would take minutes per run. With the S3
  requests per image and the CPU time per image of both runs and of moto (on a busy
  machine the CPU time moves less than the wall time). Peak RSS
  of ``guidedbp explain`` (fresh processes) from buckets of 1,000 to 100,000 8x8 PNGs,
  each listed whole and one shard of about 125 explained (moto serves a few images/s
  here: a whole 100,000 would take an hour or more); target flat. Listing and collection
  alone (``collect_inputs``) of each bucket, fresh process, peak RSS. images/s of one
  1-CPU worker (the local runner, TensorFlow on one thread, the process pinned to one
  core, moto on the others), 224x224 JPEGs from and to the bucket, ResNet50 and
  MobileNetV2, and the worker-hours per million images that makes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import warnings  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

from guidedbp import Explainer  # noqa: E402
from guidedbp.engine import format_counts  # noqa: E402
from guidedbp.pipeline.run import ModelWarning  # noqa: E402

# The benchmark's random networks and scale-less test models are known; their notes
# would only clutter the figures.
warnings.simplefilter("ignore", ModelWarning)

APPLICATIONS = ("ResNet50", "DenseNet121", "MobileNetV2", "VGG16")
#: Models whose activations are not ReLUs, guided by the generalised rule (--guide all):
#: SiLU and sigmoid, GELU, and keras-hub's ViT-B/16 (GELU, attention) built from a config.
MODERN = ("EfficientNetB0", "ConvNeXtTiny", "keras-hub ViT-B16")
TARGET_RATIO = 1.10


def _bench_model(name: str, size: int):
    """A ``keras.applications`` model or keras-hub's ViT-B/16, random weights."""
    keras.utils.set_random_seed(0)
    if name == "keras-hub ViT-B16":
        import keras_hub

        backbone = keras_hub.models.ViTBackbone(
            image_shape=(size, size, 3), patch_size=16, num_layers=12, num_heads=12,
            hidden_dim=768, mlp_dim=3072)
        return keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=1000,
                                                   preprocessor=None)
    return getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3))


def timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def engine_ratios(rounds: int, batch: int, size: int) -> bool:
    print(f"guided vs vanilla gradient: weights=None, {size}x{size}, batch {batch}, "
          f"median of >= {rounds} interleaved rounds (~10 s per model)")
    print(f"{'model':<18}{'guided s':>10}{'vanilla s':>11}{'ratio':>8}")
    images = np.random.default_rng(0).uniform(-1, 1, (batch, size, size, 3)).astype(np.float32)
    worst = 0.0
    for name in (*APPLICATIONS, *MODERN):
        try:
            model = _bench_model(name, size)
        except ImportError as error:  # keras-hub needs Python >= 3.11
            print(f"{name:<18}skipped: {error}")
            continue
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
        print(f"{name:<18}{statistics.median(guided_times):>10.3f}"
              f"{statistics.median(vanilla_times):>11.3f}{ratio:>8.3f}  ({model_rounds} rounds; "
              f"guided {format_counts(guided.report.guided_activations)})", flush=True)
        assert guided.trace_count == 1 and vanilla.trace_count == 1
    verdict = "met" if worst <= TARGET_RATIO else "NOT met"
    print(f"worst ratio {worst:.3f}: target <= {TARGET_RATIO:.2f} {verdict}")
    return worst <= TARGET_RATIO


def savedmodel_load(folder: str, rounds: int = 2) -> bool:
    """A SavedModel against the same model's ``.keras`` file: ``load_model``'s time and
    peak RSS, and the first map's time, each load in a fresh process (alternating, best
    of ``rounds``); whether the SavedModel is within the targets for every model."""
    import json
    import shutil
    import textwrap

    time_target, memory_target = 2.0, 1.5  # SavedModel / .keras
    # TensorFlow and Keras are imported before the clock starts (guidedbp imports them
    # lazily); the peak RSS is read once the model is loaded, before the first map, from
    # /proc (ru_maxrss would start at this process's own size, inherited through fork).
    script = textwrap.dedent("""
        import json, sys, time
        import keras, numpy as np, tensorflow
        from guidedbp import Explainer, load_model
        from guidedbp.engine import format_counts
        start = time.perf_counter()
        loaded = load_model(sys.argv[1])
        load_s = time.perf_counter() - start
        with open("/proc/self/status") as status:
            peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
        explainer = Explainer(loaded)
        start = time.perf_counter()
        explainer(np.zeros((1, 224, 224, 3), np.float32))
        print(json.dumps({"load_s": load_s, "peak_mib": peak_kib / 1024,
                          "first_s": time.perf_counter() - start,
                          "guided": format_counts(explainer.report.guided_activations)}))
    """)

    def measure(path: str) -> dict:
        result = subprocess.run([sys.executable, "-c", script, path], capture_output=True,
                                text=True, check=True)
        return json.loads(result.stdout.strip().splitlines()[-1])

    print(f"SavedModel (model.export) vs .keras: load_model in a fresh process, weights=None, "
          f"224x224, best of {rounds}")
    print(f"{'model':<10}{'format':<12}{'load s':>8}{'peak RSS MiB':>14}{'first map s':>13}")
    met = True
    for name in ("VGG16", "ResNet50"):
        keras.utils.set_random_seed(0)
        model = getattr(keras.applications, name)(weights=None)
        paths = {".keras": os.path.join(folder, f"{name}.keras"),
                 "SavedModel": os.path.join(folder, f"{name}_savedmodel")}
        model.save(paths[".keras"])
        model.export(paths["SavedModel"], verbose=False)
        del model
        runs: dict[str, list[dict]] = {kind: [] for kind in paths}
        for _ in range(rounds):
            for kind, path in paths.items():  # alternate: neither always runs on a warmer disk
                runs[kind].append(measure(path))
        best = {kind: {"load_s": min(run["load_s"] for run in kind_runs),
                       "peak_mib": max(run["peak_mib"] for run in kind_runs),
                       "first_s": min(run["first_s"] for run in kind_runs),
                       "guided": kind_runs[0]["guided"]} for kind, kind_runs in runs.items()}
        for kind, figures in best.items():
            print(f"{name:<10}{kind:<12}{figures['load_s']:>8.2f}{figures['peak_mib']:>14.0f}"
                  f"{figures['first_s']:>13.2f}", flush=True)
        time_ratio = best["SavedModel"]["load_s"] / best[".keras"]["load_s"]
        memory_ratio = best["SavedModel"]["peak_mib"] / best[".keras"]["peak_mib"]
        ok = time_ratio <= time_target and memory_ratio <= memory_target
        met = met and ok
        print(f"{'':<10}SavedModel / .keras: time {time_ratio:.2f}x (target <= "
              f"{time_target:g}x), peak RSS {memory_ratio:.2f}x (target <= {memory_target:g}x): "
              f"{'met' if ok else 'NOT met'}; guided {best['SavedModel']['guided']}", flush=True)
        os.remove(paths[".keras"])
        shutil.rmtree(paths["SavedModel"])
    return met


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


#: The explain job's marginal rate over the engine's, at least (issue 22).
END_TO_END_TARGETS = {"MobileNetV2": 0.75, "ResNet50": 0.92}


def end_to_end(folder: str, rounds: int = 3, count: int = 256, few: int = 64,
               batch: int = 16) -> bool:
    """The explain job against the engine alone, per model: marginal rates from ``count``
    and ``few`` images (start-up cancels), median of interleaved rounds."""
    import shutil

    from guidedbp.io.inputs import collect_inputs
    from guidedbp.io.report import write_report
    from guidedbp.models.loading import load_model
    from guidedbp.pipeline import stages
    from guidedbp.pipeline.local import run_local
    from guidedbp.pipeline.options import RunOptions

    images_dir = os.path.join(folder, "e2e-images")
    write_images(images_dir, count)
    items = collect_inputs([images_dir]).items
    options = RunOptions.of(methods="guided", batch_size=batch, renders=("color", "overlay"))
    print(f"explain job vs engine alone: weights=None, {count} vs {few} JPEGs 320x240, batch "
          f"{batch}, guided, renders color+overlay, marginal images/s, median of {rounds} "
          f"interleaved rounds, {os.cpu_count()} CPUs")
    print(f"{'model':<14}{'engine':>9}{'job':>9}{'ratio':>8}  target")
    met = True
    for name, target in END_TO_END_TARGETS.items():
        keras.utils.set_random_seed(0)
        loaded = load_model(f"keras:{name}", weights="none")
        explainer = Explainer(loaded, "guided", batch_size=batch)
        plan = stages.Plan("", options, stages.Feed.of(loaded),
                           guided=explainer.report.as_dict()["by_rule"])
        # The engine's inputs, decoded and preprocessed as the job does, outside the timing.
        inputs = np.stack([stages.prepare(plan, item).model_input for item in items])
        explainer.explain_top_k(inputs[:batch], 1)  # traced and warmed up

        def engine(n: int) -> None:
            for start in range(0, n, batch):
                explainer.explain_top_k(inputs[start : start + batch], 1)

        def job(n: int) -> None:
            output = os.path.join(folder, f"e2e-{name}-{n}")
            shutil.rmtree(output, ignore_errors=True)
            os.makedirs(output)
            job_plan = stages.Plan(output, options, plan.feed, guided=plan.guided)
            summary = run_local(job_plan, explainer, items[:n])
            write_report(output, options.manifest)
            assert summary.done == n, summary

        job(few)  # the first job's threads and imports, outside the timing
        rates: dict[str, list[float]] = {"engine": [], "job": []}
        ratios = []
        for round_index in range(rounds):
            seconds: dict[tuple, float] = {}
            # Alternate the order so neither side always runs on a warmer machine.
            order = [(kind, n) for n in (few, count) for kind in ("engine", "job")]
            for kind, n in order if round_index % 2 == 0 else reversed(order):
                seconds[kind, n] = timed(engine if kind == "engine" else job, n)
            for kind in rates:
                rates[kind].append((count - few) / (seconds[kind, count] - seconds[kind, few]))
            ratios.append(rates["job"][-1] / rates["engine"][-1])
        ratio = statistics.median(ratios)
        met = met and ratio >= target
        print(f"{name:<14}{statistics.median(rates['engine']):>9.1f}"
              f"{statistics.median(rates['job']):>9.1f}{ratio:>8.2f}  >= {target:.2f} "
              f"{'met' if ratio >= target else 'NOT met'}  (per round: "
              f"{', '.join(f'{r:.2f}' for r in ratios)})", flush=True)
    return met


def ray_engine(folder: str, count: int = 256, batch: int = 16, workers: int = 2) -> None:
    """The local runner against the Ray runner (local Ray, ``workers`` actors of 1 CPU each)
    on the same JPEGs and the same saved MobileNetV2 (weights=None, 224x224): ResNet50 on
    2 shared cores would take minutes per runner."""
    import ray

    from guidedbp import explain_files
    from guidedbp.pipeline.ray_runner import Cluster

    images_dir = os.path.join(folder, "ray-images")
    write_images(images_dir, count)
    keras.utils.set_random_seed(0)
    model_path = os.path.join(folder, "mobilenetv2.keras")
    keras.applications.MobileNetV2(weights=None).save(model_path)
    load = {"preprocess": "tf"}
    local_out, ray_out = os.path.join(folder, "ray-local"), os.path.join(folder, "ray-ray")
    local_s = timed(lambda: explain_files(model_path, images_dir, local_out, load=load,
                                          batch_size=batch))
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             logging_level="warning")
    try:
        cluster = Cluster(workers=workers)

        def on_ray():
            explain_files(model_path, images_dir, ray_out, load=load, batch_size=batch,
                          runner="ray", cluster=cluster)
        # The first run in a fresh Ray instance also starts its worker processes; both
        # runs start their actors (model load, trace). Both include the driver's load.
        cold_s = timed(on_ray)
        ray_s = timed(on_ray)
    finally:
        ray.shutdown()
    from guidedbp.io.manifest import read_manifest

    first_map = read_manifest(os.path.join(local_out, "manifest.jsonl"))[0]["outputs"]["color"]
    same = all(
        open(os.path.join(local_out, name), "rb").read()
        == open(os.path.join(ray_out, name), "rb").read()
        for name in ("manifest.jsonl", first_map)
    )
    print(f"MobileNetV2 weights=None (saved .keras), {count} JPEGs 320x240, batch {batch}, "
          f"renders color+overlay, {os.cpu_count()} CPUs: local runner {count / local_s:.1f} "
          f"images/s, Ray runner ({workers} workers x 1 CPU, local Ray, incl. actor start-up) "
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


def _small_model(folder: str) -> str:
    """A small rescaling CNN on 64x64 images, saved once per folder; its path."""
    model_path = os.path.join(folder, "small.keras")
    if not os.path.exists(model_path):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((64, 64, 3))
        x = keras.layers.Rescaling(1 / 255)(inputs)
        x = keras.layers.Conv2D(16, 3, activation="relu")(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        keras.Model(inputs, keras.layers.Dense(5, activation="softmax")(x)).save(model_path)
    return model_path


def _peak_rss(model_path: str, images: str, output: str, *flags: str) -> int:
    """Peak RSS in bytes of ``guidedbp explain MODEL IMAGES -o OUTPUT -q FLAGS`` in a
    process of its own."""
    result = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT, "explain", model_path, images, "-q",
         "-o", output, *flags],
        capture_output=True, text=True, check=True,
    )
    return int(result.stdout.strip().splitlines()[-1]) * 1024  # KiB -> bytes


def memory(folder: str) -> None:
    model_path = _small_model(folder)
    peaks = {}
    for count in (100, 1000):
        images_dir = os.path.join(folder, f"memory{count}")
        write_images(images_dir, count, size=(64, 64))
        peaks[count] = _peak_rss(model_path, images_dir, os.path.join(folder, f"memory-out{count}"),
                                 "--batch-size", "16") / 2**20
    growth = peaks[1000] / peaks[100] - 1
    verdict = "met" if abs(growth) <= 0.10 else "NOT met"
    print(f"peak RSS of explain: 100 images {peaks[100]:.0f} MiB, "
          f"1,000 images {peaks[1000]:.0f} MiB ({growth:+.1%}; target within 10% {verdict})")


#: The most the 81-megapixel image may add to the peak, in bytes.
BIG_IMAGE_EXTRA = 1.5e9


def memory_big(folder: str) -> None:
    from PIL import Image, ImageDraw

    model_path = _small_model(folder)
    peaks, seconds = {}, {}
    for side in (1000, 9000):
        picture = Image.new("RGB", (side, side))
        draw = ImageDraw.Draw(picture)  # flat shapes: the PNG compresses to a few 100 KB
        draw.rectangle([side // 10, side // 10, side // 3, side // 2], fill=(200, 30, 30))
        draw.ellipse([side // 2, side // 2, side * 9 // 10, side * 8 // 10], fill=(30, 200, 60))
        images_dir = os.path.join(folder, f"big{side}")
        os.makedirs(images_dir)
        picture.save(os.path.join(images_dir, "picture.png"))
        del picture, draw
        start = time.perf_counter()
        peaks[side] = _peak_rss(model_path, images_dir, os.path.join(folder, f"big-out{side}"))
        seconds[side] = time.perf_counter() - start
    extra = peaks[9000] - peaks[1000]
    verdict = "met" if extra <= BIG_IMAGE_EXTRA else "NOT met"
    print(f"peak RSS of explain on one PNG: 1 megapixel {peaks[1000] / 2**20:.0f} MiB "
          f"({seconds[1000]:.1f} s), 81 megapixels {peaks[9000] / 2**20:.0f} MiB "
          f"({seconds[9000]:.1f} s): {extra / 1e9:+.2f} GB "
          f"(target <= {BIG_IMAGE_EXTRA / 1e9:.1f} GB {verdict})")


#: Buckets of this many 8x8 PNGs: peak RSS of a run that lists each whole, and of the
#: listing alone.
STORE_COUNTS = (1000, 10_000, 100_000)

#: The explain job from a bucket into a bucket over local folder into local folder,
#: marginal images/s, at least.
STORE_TARGET = 0.9

# moto's S3 server in a process of its own, its buckets filled in memory through moto's
# backend rather than by 100,000 PUTs (one PUT takes moto 10-20 ms on 2 shared cores).
# argv: port, then NAME=COUNT per bucket (COUNT 8x8 PNGs at pNNN/imgNNNNNN.png, 1,000 per
# prefix; 0: an empty bucket). moto lists a prefix by scanning every key of the bucket,
# which makes walking 100 prefixes of 100,000 keys take minutes; for the filled buckets,
# which nothing writes to, it is handed the keys below the prefix alone (the same answer).
# It serves until its stdin closes.
_MOTO_SCRIPT = r"""
import bisect, io, logging, sys, types
import numpy as np
from PIL import Image
from moto.s3.models import S3Backend, s3_backends
from moto.server import ThreadedMotoServer

logging.getLogger("werkzeug").setLevel(logging.ERROR)
buffer = io.BytesIO()
Image.fromarray(np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
    buffer, "PNG")
backend = s3_backends["123456789012"]["aws"]
names = {}
for spec in sys.argv[2:]:
    bucket, count = spec.split("=")
    backend.create_bucket(bucket, "us-east-1")
    for index in range(int(count)):
        backend.put_object(bucket, f"p{index // 1000:03d}/img{index:06d}.png", buffer.getvalue())
    if int(count):
        names[bucket] = sorted(backend.get_bucket(bucket).keys.keys())
original = S3Backend.list_objects

def list_objects(self, bucket, prefix, delimiter, marker, max_keys):
    keys = names.get(getattr(bucket, "name", None))
    if keys is None or not prefix:
        return original(self, bucket, prefix, delimiter, marker, max_keys)
    low, high = bisect.bisect_left(keys, prefix), bisect.bisect_left(keys, prefix + "\U0010ffff")
    below = types.SimpleNamespace(keys={key: bucket.keys[key] for key in keys[low:high]})
    return original(self, below, prefix, delimiter, marker, max_keys)

S3Backend.list_objects = list_objects
server = ThreadedMotoServer(ip_address="127.0.0.1", port=int(sys.argv[1]), verbose=False)
server.start()
print("ready", flush=True)
sys.stdin.read()
server.stop()
"""


class _Moto:
    """moto's S3 server on 127.0.0.1 with ``buckets`` ({name: PNGs}) filled, and the
    AWS_* variables that reach it set in this process (inherited by its children) for
    the ``with`` block."""

    def __init__(self, buckets: dict[str, int]):
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from tests import s3server

        self.s3server = s3server
        port = s3server.free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [sys.executable, "-c", _MOTO_SCRIPT, str(port),
             *(f"{name}={count}" for name, count in buckets.items())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if self.process.stdout.readline().strip() != "ready":
            self.process.kill()
            self.process.wait()
            raise RuntimeError("moto's S3 server did not start")
        self.saved = {name: os.environ.get(name) for name in s3server.environment("")}
        os.environ.update(s3server.environment(self.endpoint))

    def cpu_seconds(self) -> float:
        """The server's CPU time so far (user + system)."""
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> _Moto:
        return self

    def __exit__(self, *exc) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _upload(folder: str, url: str) -> None:
    """Every file below ``folder`` to the same keys below ``url``, 8 PUTs at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from guidedbp.io import store

    paths = [os.path.join(root, name) for root, _, names in os.walk(folder) for name in names]

    def put(path: str) -> None:
        with open(path, "rb") as handle:
            store.put(store.join(url, os.path.relpath(path, folder).replace(os.sep, "/")),
                      handle.read())

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, paths))


class _Requests:
    """S3 requests this process makes through guidedbp's store, by operation (botocore's
    ``before-call`` event on guidedbp's s3fs client)."""

    def __init__(self):
        import collections

        from guidedbp.io import store

        self.counts: collections.Counter = collections.Counter()
        store.filesystem("s3://").s3.meta.events.register(
            "before-call.s3", lambda model, **_: self.counts.update([model.name]))

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)


def store_throughput(folder: str, moto: _Moto, rounds: int = 3, count: int = 64,
                     few: int = 16, batch: int = 16) -> bool:
    """``explain_files`` (local runner) from a bucket into a bucket against local folder
    into local folder: same JPEGs, same loaded model; marginal images/s from ``count``
    and ``few`` images (loading, tracing and listing cancel), median of interleaved
    rounds; the S3 requests per image, and the CPU time per image of both jobs and of
    moto."""
    import shutil

    from guidedbp import explain_files
    from guidedbp.io import store
    from guidedbp.io.manifest import read_manifest
    from guidedbp.models.loading import load_model

    local_in = {n: os.path.join(folder, "s3-photos", f"n{n}") for n in (few, count)}
    for n, path in local_in.items():
        write_images(path, n)  # the same RNG: the first `few` images are the same
        _upload(path, f"s3://bench-photos/n{n}")
    remote_in = {n: f"s3://bench-photos/n{n}/" for n in (few, count)}
    requests = _Requests()
    heads = []
    for _ in range(20):
        heads.append(timed(store.size_of, f"s3://bench-photos/n{few}/part0/img0000.jpg"))
    print(f"explain job from a bucket into a bucket vs local folder into local folder "
          f"(moto's S3 server on 127.0.0.1, same machine; it answers a HEAD in "
          f"{statistics.median(heads) * 1000:.0f} ms here): weights=None, {count} vs {few} "
          f"JPEGs 320x240, batch {batch}, guided, renders color+overlay, marginal images/s, "
          f"median of {rounds} interleaved rounds, {os.cpu_count()} CPUs")
    print(f"{'model':<14}{'local':>8}{'s3':>8}{'ratio':>8}  target")
    met, runs = True, 0
    for name in ("MobileNetV2", "ResNet50"):
        keras.utils.set_random_seed(0)
        loaded = load_model(f"keras:{name}", weights="none")
        last: dict[tuple, str] = {}
        calls: dict[int, dict[str, int]] = {}

        def job(kind: str, n: int) -> None:
            nonlocal runs
            runs += 1
            if kind == "s3":
                before = requests.snapshot()
                output = f"s3://bench-maps/{name}-{n}-{runs}/"
                summary = explain_files(loaded, remote_in[n], output, batch_size=batch)
                calls[n] = {op: made - before.get(op, 0)
                            for op, made in requests.snapshot().items()}
            else:
                output = os.path.join(folder, f"s3-local-{name}-{n}")
                shutil.rmtree(output, ignore_errors=True)
                summary = explain_files(loaded, local_in[n], output, batch_size=batch)
            assert summary.done == n, summary
            last[kind, n] = output

        job("local", few)  # the first job's threads and imports, outside the timing
        job("s3", few)
        rates: dict[str, list[float]] = {"local": [], "s3": []}
        # CPU seconds per image (marginal) of this process (the engine, the pipeline and
        # the S3 client) and of moto: on a busy machine they move less than the wall time.
        cpu: dict[str, list[float]] = {"local": [], "s3": [], "moto": []}
        ratios = []
        for round_index in range(rounds):
            seconds: dict[tuple, float] = {}
            used: dict[tuple, float] = {}
            order = [(kind, n) for n in (few, count) for kind in ("local", "s3")]
            for kind, n in order if round_index % 2 == 0 else reversed(order):
                server, mine = moto.cpu_seconds(), os.times()
                seconds[kind, n] = timed(job, kind, n)
                after = os.times()
                used[kind, n] = after.user + after.system - mine.user - mine.system
                if kind == "s3":
                    used["moto", n] = moto.cpu_seconds() - server
            for kind in rates:
                rates[kind].append((count - few) / (seconds[kind, count] - seconds[kind, few]))
            for kind in cpu:
                cpu[kind].append((used[kind, count] - used[kind, few]) / (count - few))
            ratios.append(rates["s3"][-1] / rates["local"][-1])
        # The last runs' maps, byte for byte: the first image's color map.
        local_out, remote_out = last["local", count], last["s3", count]
        first = read_manifest(os.path.join(local_out, "manifest.jsonl"))[0]["outputs"]["color"]
        with open(os.path.join(local_out, first), "rb") as handle:
            same = handle.read() == store.read_bytes(store.join(remote_out, first))
        per_image = {op: (calls[count].get(op, 0) - calls[few].get(op, 0)) / (count - few)
                     for op in sorted(set(calls[count]) | set(calls[few]))}
        ratio = statistics.median(ratios)
        met = met and ratio >= STORE_TARGET
        print(f"{name:<14}{statistics.median(rates['local']):>8.1f}"
              f"{statistics.median(rates['s3']):>8.1f}{ratio:>8.2f}  >= {STORE_TARGET} "
              f"{'met' if ratio >= STORE_TARGET else 'NOT met'}  (per round: "
              f"{', '.join(f'{r:.2f}' for r in ratios)}; same bytes: {same})", flush=True)
        ms = {kind: statistics.median(values) * 1000 for kind, values in cpu.items()}
        print(f"{'':<14}requests per image: "
              + ", ".join(f"{op} {made:.2f}" for op, made in per_image.items() if made)
              + f"; CPU per image: local {ms['local']:.0f} ms, s3 {ms['s3']:.0f} ms "
              f"(ratio {ms['local'] / ms['s3']:.2f}) + moto's own {ms['moto']:.0f} ms",
              flush=True)
    return met


def store_memory(explained: int = 125) -> None:
    """Peak RSS of ``guidedbp explain`` (fresh processes) from buckets of ``STORE_COUNTS``
    8x8 PNGs, each listing the whole bucket and explaining one shard of about
    ``explained`` of them: moto serves a store run at a few images/s here, so a whole
    run of 10,000 would take most of an hour."""
    peaks = {}
    for count in STORE_COUNTS:
        peaks[count] = _peak_rss("demo", f"s3://tiny-{count}/", f"s3://tiny-maps/{count}/",
                                 "--render", "color", "--shard",
                                 f"0/{count // explained}") / 2**20
    low, high = STORE_COUNTS[0], STORE_COUNTS[-1]
    growth = peaks[high] / peaks[low] - 1
    verdict = "met" if abs(growth) <= 0.10 else "NOT met"
    print(f"peak RSS of explain from a bucket (demo CNN, 8x8 PNGs, --render color, the whole "
          f"bucket listed, shard 0 of count/{explained} explained): "
          + ", ".join(f"{count:,} objects {peak:.0f} MiB" for count, peak in peaks.items())
          + f" ({low:,} to {high:,}: {growth:+.1%}; target flat: within 10% {verdict})",
          flush=True)


# collect_inputs of one URL in a fresh process: objects found, seconds, RSS before (s3fs
# imported and set up) and the peak after, in KiB.
_LISTING_SCRIPT = """
import sys, time
from guidedbp.io import store
from guidedbp.io.inputs import collect_inputs

def status(field):
    with open("/proc/self/status") as lines:
        return int(next(line.split()[1] for line in lines if line.startswith(field + ":")))

store.is_prefix(sys.argv[1])  # s3fs imported, its client made: before the clock
before = status("VmRSS")
start = time.perf_counter()
found = len(collect_inputs([sys.argv[1]]).items)
print(found, time.perf_counter() - start, before, status("VmHWM"))
"""


def store_listing(counts=None) -> None:
    """Listing and collection alone (``collect_inputs([url])``) of buckets of ``counts``
    objects, each in a fresh process: time and peak RSS."""
    counts = counts or STORE_COUNTS
    print("listing + collection alone (collect_inputs of s3://BUCKET/, 1,000 objects per "
          "prefix), fresh process each:")
    peaks = {}
    for count in counts:
        result = subprocess.run([sys.executable, "-c", _LISTING_SCRIPT, f"s3://tiny-{count}/"],
                                capture_output=True, text=True, check=True)
        found, seconds, before, peak = result.stdout.split()
        assert int(found) == count, (found, count)
        peaks[count] = int(peak) * 1024
        print(f"  {count:>7,} objects: {float(seconds):5.1f} s, peak RSS {int(peak) / 1024:.0f} "
              f"MiB ({(int(peak) - int(before)) / 1024:+.0f} MiB over the process before "
              f"listing)", flush=True)
    slope = (peaks[counts[-1]] - peaks[counts[0]]) / (counts[-1] - counts[0])
    print(f"  growth: about {slope:.0f} bytes per object listed (the list of inputs is held "
          f"for the run)")


# A 1-CPU worker: the process pinned to one core, TensorFlow on one thread, the local
# runner; explain_files of the bucket's prefixes nFEW/ and nCOUNT/ into the bucket,
# alternating, after one warm-up run. Prints each run's wall and CPU seconds (the
# process's user + system time: on a busy machine the core is shared, the CPU time
# less so) as JSON.
_WORKER_SCRIPT = """
import json, os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras
from guidedbp import explain_files
from guidedbp.models.loading import load_model
name, source, output = sys.argv[2:5]
few, count, rounds = map(int, sys.argv[5:8])
keras.utils.set_random_seed(0)
loaded = load_model(f"keras:{name}", weights="none")
explain_files(loaded, f"{source}n{few}/", f"{output}warm/", batch_size=16)
seconds = []
for round_index in range(rounds):
    times = {}
    for n in (few, count) if round_index % 2 == 0 else (count, few):
        start, cpu = time.perf_counter(), os.times()
        summary = explain_files(loaded, f"{source}n{n}/", f"{output}{round_index}-{n}/",
                                batch_size=16)
        after = os.times()
        times[n] = [time.perf_counter() - start,
                    after.user + after.system - cpu.user - cpu.system]
        assert summary.done == n, summary
    seconds.append(times)
print(json.dumps(seconds))
"""


def store_per_worker(folder: str, moto: _Moto, rounds: int = 3, count: int = 40,
                     few: int = 8) -> None:
    """images/s of one 1-CPU worker from and to the bucket, 224x224 JPEGs, and what a
    million images cost in worker-hours."""
    cpus = sorted(os.sched_getaffinity(0))
    worker, rest = cpus[0], set(cpus[1:]) or {cpus[0]}
    for task in os.listdir(f"/proc/{moto.process.pid}/task"):  # the server's threads
        try:
            os.sched_setaffinity(int(task), rest)
        except OSError:
            pass
    for n in (few, count):
        path = os.path.join(folder, "s3-worker", f"n{n}")
        write_images(path, n, size=(224, 224))
        _upload(path, f"s3://bench-photos/w224/n{n}")
    print(f"per 1-CPU worker: local runner, TensorFlow on 1 thread, the process pinned to one "
          f"core (moto on {'the other' if len(cpus) > 1 else 'the same'}), weights=None, "
          f"224x224 JPEGs from and to the bucket, batch 16, guided, renders color+overlay, "
          f"marginal ({count} - {few} images), median of {rounds} rounds:")
    print(f"  {'model':<14}{'images/s':>9}{'CPU s per image':>17}"
          f"{'worker-hours per 1M images':>28}")
    for name in ("ResNet50", "MobileNetV2"):
        result = subprocess.run(
            [sys.executable, "-c", _WORKER_SCRIPT, str(worker), name,
             "s3://bench-photos/w224/", f"s3://bench-maps/worker-{name}/", str(few),
             str(count), str(rounds)],
            capture_output=True, text=True, check=True)
        runs = json.loads(result.stdout.strip().splitlines()[-1])
        rate = statistics.median((count - few) / (run[str(count)][0] - run[str(few)][0])
                                 for run in runs)
        cpu = statistics.median((run[str(count)][1] - run[str(few)][1]) / (count - few)
                                for run in runs)
        # A 1-CPU worker kept busy does one image per `cpu` seconds: the hours a million
        # images take it, from the CPU time (the wall rate counts other tenants' share
        # of the core too).
        print(f"  {name:<14}{rate:>9.2f}{cpu:>17.3f}{1e6 * cpu / 3600:>28.0f}", flush=True)
    print("  worker-hours from the CPU time per image (a busy 1-CPU worker); GPU workers: "
          "not measured (no GPU on this machine)")


def object_store(folder: str) -> None:
    """The ``s3`` section: moto's S3 server on 127.0.0.1, nothing beyond it."""
    try:
        import moto  # noqa: F401
        import s3fs  # noqa: F401
    except ImportError as error:
        print(f"s3: skipped: {error} (pip install 'guidedbp[s3]' 'moto[server]')")
        return
    start = time.perf_counter()
    load = os.getloadavg()[0]
    # Two servers: one holding 111,000 objects in its memory answers more slowly (its
    # garbage collector walks them), which would be counted against the store runs.
    with _Moto({"bench-photos": 0, "bench-maps": 0}) as moto:
        store_throughput(folder, moto)
        store_per_worker(folder, moto)
    # The runs below are fresh processes, which reach this second server through the
    # environment (this process's s3fs client stays with the first).
    with _Moto({"tiny-maps": 0, **{f"tiny-{count}": count for count in STORE_COUNTS}}):
        store_memory()
        store_listing()
    print(f"s3 section: {time.perf_counter() - start:.0f} s; load average (1 min) {load:.1f} "
          f"at its start, {os.getloadavg()[0]:.1f} at its end, on {os.cpu_count()} CPUs")


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


def drise_costs(rounds: int = 3, batch: int = 64, count: int = 4, masks: int = 1000) -> None:
    """D-RISE beside RISE on the bundled detector (``demo-det``), the same Detection target
    and mask count: passes per image, seconds per image, their ratio, each over as many
    plain forward passes and over guided backprop of the target; then both at one grid,
    the same maps."""
    import tensorflow as tf

    import guidedbp
    from guidedbp.demo.detection_table import mask_box
    from guidedbp.demo.shapes import make_scenes
    from guidedbp.engine.methods.blackbox import grid_of, passes_per_image
    from guidedbp.targets import Detection

    model = guidedbp.load_model("demo-det").model
    size = model.input_shape[1]
    scenes = make_scenes(count, seed=35_000, distractors=True)  # held-out scenes
    images = scenes.images.astype("float32")
    # Each scene's main object: its true box, the class the detector finds there.
    target = Detection(np.array([mask_box(mask) for mask in scenes.masks], "float32"))
    plain_batch = np.resize(images, (batch, *images.shape[1:]))
    forward = tf.function(lambda x: model(x, training=False))
    names = ("drise", "rise")
    explainers = {name: Explainer(model, name, batch_size=batch, masks=masks)
                  for name in ("guided", *names)}
    options = explainers["drise"].options.blackbox
    passes = {name: passes_per_image(name, options, size, size) for name in names}
    forward(plain_batch)
    for explainer in explainers.values():
        explainer.explain(images, target)  # traced and run once
    seconds: dict[str, list[float]] = {name: [] for name in ("guided", "forward", *names)}
    for round_index in range(rounds):
        order = ("guided", *names) if round_index % 2 == 0 else ("guided", *reversed(names))
        seconds["forward"].append(timed(lambda: forward(plain_batch)["scores"].numpy())
                                  / batch)  # one copy's forward pass
        for name in order:
            seconds[name].append(timed(explainers[name].explain, images, target) / count)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    print(f"D-RISE beside RISE: the bundled detector demo-det ({size}x{size}, "
          f"{model.output['scores'].shape[1]} proposals, {model.output['scores'].shape[2]} "
          f"classes), one Detection target per image (its object's true box), "
          f"{count} images, {masks} masks, {batch} copies per pass, median of {rounds} "
          "interleaved rounds:")
    print(f"  plain forward pass: {median['forward'] * 1000:.2f} ms per copy; guided backprop "
          f"of the target: {median['guided'] * 1000:.1f} ms per image")
    print(f"  {'method':<8}{'grid':>6}{'passes':>8}{'s/image':>10}{'vs plain passes':>17}"
          f"{'vs guided':>11}")
    for name in names:
        print(f"  {name:<8}{grid_of(options, name, size, size):>6}{passes[name]:>8}"
              f"{median[name]:>10.2f}{median[name] / (passes[name] * median['forward']):>17.2f}"
              f"{median[name] / median['guided']:>11.0f}")
    ratio = statistics.median(d / r for d, r in zip(seconds["drise"], seconds["rise"]))
    print(f"  drise / rise: {ratio:.2f} (the same passes: forward passes dominate both)")
    grid = grid_of(options, "drise", size, size)
    same = Explainer(model, "drise,rise", batch_size=batch, masks=masks, grid=grid).explain(
        images, target)
    equal = np.array_equal(same.by_method["drise"], same.by_method["rise"])
    print(f"  at one grid ({grid}), the same seed and masks: "
          f"drise {'==' if equal else '!='} rise, map for map")


#: The most the callback's epoch may cost, over one plain Explainer call.
CALLBACK_TARGET = 1.2


def callback_cost(folder: str, rounds: int = 15, count: int = 16) -> None:
    import guidedbp
    from guidedbp.engine.explainer import Explainer as EngineExplainer
    from guidedbp.keras import SaliencyCallback

    model = guidedbp.load_model("demo").model  # the bundled shapes CNN, 96x96
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (count, 96, 96, 3)).astype("float32")
    methods = ("guided", "gradcam")
    callback = SaliencyCallback(images, methods, log_dir=os.path.join(folder, "logs"))
    callback.set_model(model)
    callback.on_train_begin()
    plain = EngineExplainer(model, methods)
    plain.explain(images)  # both warmed up: traced and run once
    callback.on_epoch_end(0)
    callback.wait()
    blocking, total, plain_times = [], [], []
    for epoch in range(1, rounds + 1):
        blocking.append(timed(callback.on_epoch_end, epoch))  # what training waits for
        total.append(blocking[-1] + timed(callback.wait))  # + drawing and writing
        plain_times.append(timed(plain.explain, images))
    callback.on_train_end()
    ratio = statistics.median(b / p for b, p in zip(blocking, plain_times))
    work = statistics.median(t / p for t, p in zip(total, plain_times))
    verdict = "met" if ratio <= CALLBACK_TARGET else "NOT met"
    print(f"SaliencyCallback, demo CNN 96x96, {count} images, {','.join(methods)}: training "
          f"waits {statistics.median(blocking) * 1000:.0f} ms per epoch vs one Explainer call "
          f"{statistics.median(plain_times) * 1000:.0f} ms: {ratio:.2f}x (target <= "
          f"{CALLBACK_TARGET} {verdict}); with the background drawing and writing "
          f"{work:.2f}x; traces: {callback.explainer.trace_count}")


#: Seconds the report of 10,000 records may take to write.
REPORT_TARGET = 5.0


def report_time(folder: str, count: int = 10_000) -> None:
    import json

    from guidedbp.io.report import write_report

    output = os.path.join(folder, "report")
    os.makedirs(output)
    methods = ("guided", "gradcam")
    with open(os.path.join(output, "manifest.jsonl"), "w", encoding="utf-8") as manifest:
        for index in range(count):
            name = f"photos/{index // 100:03d}/image-{index:05d}.jpg"
            failed = index % 50 == 7
            outputs = {} if failed else {f"{m}.{r}": f"{name}.{m}.{r}.png"
                                         for m in methods for r in ("color", "overlay")}
            target = {"class": index % 1000, "label": f"class {index % 1000}",
                      "score": round((index * 7919 % 10007) / 10007, 6), "outputs": outputs,
                      "raw": None}
            manifest.write(json.dumps({
                "input": name, "status": "error" if failed else "ok",
                "error": "cannot identify image file" if failed else None,
                **({k: None for k in ("class", "label", "score")} if failed else
                   {k: target[k] for k in ("class", "label", "score")}),
                "method": ",".join(methods), "outputs": outputs, "raw": None,
                "targets": [] if failed else [target]}) + "\n")
    seconds = timed(write_report, output)
    size = os.path.getsize(os.path.join(output, "index.html"))
    verdict = "met" if seconds < REPORT_TARGET else "NOT met"
    print(f"report of {count:,} manifest records: {seconds:.2f} s, index.html "
          f"{size / 2**20:.1f} MiB (target < {REPORT_TARGET:.0f} s {verdict})")


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


#: The most a Detection target may cost over a Unit of the same detector's class scores.
DETECTION_RATIO = 1.2


def detection_costs(rounds: int = 7, batch: int = 16, count: int = 32) -> None:
    """A Detection target against a Unit (one proposal's class score) on ``demo-det``,
    guided and vanilla: seconds per image of each and their ratio."""
    import guidedbp
    from guidedbp.demo.detection_table import mask_box
    from guidedbp.demo.shapes import make_scenes
    from guidedbp.targets import Detection, Unit

    model = guidedbp.load_model("demo-det").model
    size = model.input_shape[1]
    proposals, classes = model.output["scores"].shape[1:]
    scenes = make_scenes(count, seed=35_000, distractors=True)  # held-out scenes
    images = scenes.images.astype("float32")
    # Each scene's main object's true box, the class the detector finds there; the Unit:
    # the class score of the proposal the first scene's box matches.
    detection = Detection(np.array([mask_box(mask) for mask in scenes.masks], "float32"))
    found = Explainer(model, "vanilla", batch_size=batch).explain(
        images[:1], Detection(detection.box[:1]))
    boxes = np.asarray(model(images[:1], training=False)["boxes"])[0]
    row = int(np.argmin(np.abs(boxes - found.detections[0, :4]).sum(axis=1)))
    unit = Unit(row * classes + int(found.targets[0]), output="scores")
    runs = {}
    for method in ("guided", "vanilla"):
        explainer = Explainer(model, method, batch_size=batch)
        runs[(method, "detection")] = lambda e=explainer: e.explain(images, detection)
        runs[(method, "unit")] = lambda e=explainer: e.explain(images, unit)
    for run in runs.values():  # trace and warm up
        run()
        run()
    times: dict[tuple, list[float]] = {key: [] for key in runs}
    for round_index in range(rounds):
        keys = list(runs) if round_index % 2 == 0 else list(reversed(runs))
        for key in keys:
            times[key].append(timed(runs[key]) / count)
    print(f"detection: demo-det ({size}x{size}, {proposals} proposals, {classes} classes), "
          f"{count} scenes, batch {batch}, median of {rounds} interleaved rounds; a "
          f"Detection target (its max over every proposal's IoU x class score) against "
          f"{unit.label} (one proposal's class score)")
    for method in ("guided", "vanilla"):
        ratio = statistics.median(d / u for d, u in zip(times[(method, "detection")],
                                                       times[(method, "unit")]))
        median = {kind: statistics.median(times[(method, kind)]) * 1000
                  for kind in ("detection", "unit")}
        print(f"  {method:<8} Detection {median['detection']:.2f} ms/image, Unit "
              f"{median['unit']:.2f} ms/image: ratio {ratio:.3f} (target <= {DETECTION_RATIO:.1f} "
              f"{'met' if ratio <= DETECTION_RATIO else 'NOT met'})")


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


#: The least speed-up of ``precision="mixed"`` over float32, and the least Pearson
#: correlation of each mixed map with its float32 map.
PRECISION_SPEEDUP = 1.3
PRECISION_PEARSON = 0.99


def _sample_batch(count: int, size: int, mode: str) -> np.ndarray:
    """``count`` images of the repository's sample_images (photos and shapes, mirrored
    on the second pass round), fitted to ``size`` and preprocessed by ``mode``."""
    import glob

    from guidedbp.io.images import decode_image
    from guidedbp.models.preprocess import prepare

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "sample_images")
    paths = sorted(glob.glob(os.path.join(root, "*.jpg"))
                   + glob.glob(os.path.join(root, "shapes", "*.png")))
    if not paths:
        return np.random.default_rng(0).uniform(-100, 100, (count, size, size, 3)).astype(
            np.float32)
    images = []
    for index in range(count):
        picture = decode_image(paths[index % len(paths)], channels=3)
        if (index // len(paths)) % 2:
            picture = picture[:, ::-1]
        images.append(prepare(picture, (size, size, 3), mode, None, "stretch")[2])
    return np.stack(images).astype(np.float32)


def mixed_precision(rounds: int = 7, batch: int = 16, size: int = 224) -> None:
    import tensorflow as tf

    from guidedbp.checks.stats import spearman
    from guidedbp.errors import ArgumentError

    keras.utils.set_random_seed(0)
    model = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3))
    images = _sample_batch(batch, size, "caffe")
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
        model = _bench_model(name, size)
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


# Phases of a cold `guidedbp explain demo ONE.png`, in a fresh process each round. The
# script does what the command does, in its order, timing each step.
_PHASES = r"""
import os, sys, time, json
started = time.perf_counter()
marks = {}
def mark(name):
    marks[name] = time.perf_counter()
from guidedbp.cli import main
import guidedbp.cli.explain
mark("guidedbp imports")
from guidedbp.cli.common import import_tensorflow
import_tensorflow()
mark("TensorFlow import")
from guidedbp.models.loading import load_model
loaded = load_model("demo")
mark("load")
from guidedbp import Explainer
from guidedbp.io.images import decode_image
from guidedbp.models.preprocess import fit, preprocess
explainer = Explainer(loaded)
explainer.report
mark("trace")
image = preprocess(fit(decode_image(sys.argv[1]), loaded.input_shape[:2])[0], loaded.preprocess)
explainer.explain(image[None])
mark("first map")
explainer.explain(image[None])
mark("second map")
last, phases = started, {}
for name, moment in marks.items():
    phases[name], last = moment - last, moment
print(json.dumps(phases))
"""


def startup(folder: str, rounds: int = 3) -> None:
    """Phases of a cold ``guidedbp explain demo ONE.png`` (median of ``rounds`` fresh
    processes), and the whole command's wall time, also cold."""
    import json

    image = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "sample_images", "shapes", "circle_0.png")
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    phases, walls = [], []
    for round_index in range(rounds):
        result = subprocess.run([sys.executable, "-c", _PHASES, image], env=environment,
                                capture_output=True, text=True, check=True)
        phases.append(json.loads(result.stdout.strip().splitlines()[-1]))
        out = os.path.join(folder, f"startup{round_index}")
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "guidedbp", "explain", "demo", image, "-o", out,
                        "-q"], env=environment, check=True)
        walls.append(time.perf_counter() - start)
    median = {name: statistics.median(p[name] for p in phases) for name in phases[0]}
    tensorflow = median["TensorFlow import"]
    ours = sum(median.values()) - tensorflow - median["second map"]
    print("cold `guidedbp explain demo one.png`, median of "
          f"{rounds} fresh processes: " + ", ".join(f"{name} {seconds:.2f} s"
                                                     for name, seconds in median.items()))
    print(f"  whole command {statistics.median(walls):.2f} s wall, of which TensorFlow's own "
          f"import {tensorflow:.2f} s and the rest of the phases {ours:.2f} s")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--only", choices=["engine", "savedmodel", "methods", "end-to-end",
                                           "memory", "memory-big", "ray", "callback",
                                           "report", "costs", "blackbox", "drise", "targets",
                                           "detection", "precision", "startup", "s3",
                                           "fingerprint", "many-targets"])
    parser.add_argument("--methods", default=None,
                        help="With --only costs: a comma list of methods (default: all).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="guidedbp-bench-") as folder:
        if args.only in (None, "engine"):
            engine_ratios(args.rounds, args.batch, args.size)
        if args.only in (None, "savedmodel"):
            savedmodel_load(folder)
        if args.only in (None, "methods"):
            several_methods(folder)
        if args.only in (None, "end-to-end"):
            end_to_end(folder)
        if args.only in (None, "memory"):
            memory(folder)
        if args.only in (None, "memory-big"):
            memory_big(folder)
        if args.only in (None, "targets"):
            target_costs()
        if args.only in (None, "detection"):
            detection_costs()
        if args.only in (None, "many-targets"):
            many_targets()
        if args.only in (None, "costs"):
            method_costs(only=args.methods.split(",") if args.methods else None)
        if args.only in (None, "blackbox"):
            blackbox_costs()
        if args.only in (None, "drise"):
            drise_costs()
        if args.only in (None, "callback"):
            callback_cost(folder)
        if args.only in (None, "report"):
            report_time(folder)
        if args.only in (None, "ray"):
            ray_engine(folder)
        if args.only in (None, "s3"):
            object_store(folder)
        if args.only in (None, "precision"):
            mixed_precision()
        if args.only in (None, "startup"):
            startup(folder)
        if args.only in (None, "fingerprint"):
            fingerprint_cost(folder)


if __name__ == "__main__":
    main()
