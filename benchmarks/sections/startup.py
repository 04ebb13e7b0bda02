"""startup: a cold ``guidedbp explain demo ONE.png``, phase by phase (guidedbp's imports,
TensorFlow's import, loading, the trace, the first and a second map), median of 3 fresh
processes, and the whole command's wall time.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from sections.common import REPO

#: The section's name, as ``--only`` takes it.
NAME = "startup"


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
from guidedbp.cli.process import import_tensorflow
import_tensorflow()
mark("TensorFlow import")
from guidedbp.models.loading import load_model
loaded = load_model("demo")
mark("load")
from guidedbp import Explainer
from guidedbp.io.images import decode_image
from guidedbp.models.preprocess import preprocess
from guidedbp.models.resizing import fit
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

    image = os.path.join(REPO, "sample_images", "shapes", "circle_0.png")
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



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    startup(folder)
