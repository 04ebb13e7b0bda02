"""savedmodel: VGG16 and ResNet50 (``weights=None``, 224x224) loaded with ``load_model`` from a
SavedModel (``model.export``) and from the same model's ``.keras`` file, each load in a
fresh process (best of 2): load time, peak RSS (``VmHWM`` once loaded) and the first map's
time (its trace); targets: the SavedModel within 2x the ``.keras`` load time and 1.5x its
peak RSS.
"""

from __future__ import annotations

import os
import subprocess
import sys

import keras

#: The section's name, as ``--only`` takes it.
NAME = "savedmodel"


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



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    savedmodel_load(folder)
