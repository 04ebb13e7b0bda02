"""The local runner's threads change when the work is done, never what is written: its
files and manifest are, byte for byte, those of the same stages run one after another
in one thread."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from guidedbp import Explainer, load_model
from guidedbp.io.inputs import collect_inputs
from guidedbp.io.manifest import ManifestWriter
from guidedbp.pipeline import stages, writing
from guidedbp.pipeline.local import run_local
from guidedbp.pipeline.options import RunOptions

from .helpers import tinted_noise
from .imagetree import snapshot
from .models import colour_cnn

OPTIONS = RunOptions.of(methods="guided", top_k=2, batch_size=3, raw=True,
                        renders="color,gray,heatmap,overlay,panel")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("threads")
    images = root / "images"
    images.mkdir()
    sizes = [(20, 24), (16, 16), (31, 17), (40, 30), (9, 60), (16, 16), (25, 25), (50, 12)]
    for index, size in enumerate(sizes):
        suffix = "jpg" if index % 2 else "png"
        Image.fromarray(tinted_noise(*size, seed=index)).save(images / f"i{index}.{suffix}")
    (images / "broken.png").write_bytes(b"not a picture")  # fails alone, in its place
    loaded = load_model(colour_cnn((16, 16, 3)))
    explainer = Explainer(loaded, OPTIONS.methods, options=OPTIONS.method)
    items = collect_inputs([str(images)]).items
    return root, loaded, explainer, items


def plan_for(output: Path, loaded, explainer) -> stages.Plan:
    output.mkdir()
    return stages.Plan(str(output), OPTIONS, stages.Feed.of(loaded),
                       num_classes=explainer.report.num_classes,
                       guided=explainer.report.as_dict()["by_rule"])


def in_turn(plan: stages.Plan, explainer, items: list) -> None:
    """The stages one after another in this thread, batch by batch."""
    with ManifestWriter(Path(plan.output) / plan.options.manifest) as manifest:
        for batch in stages.batched(items, plan.options.method.batch_size):
            prepared = [stages.prepare(plan, item) for item in batch]
            explained = stages.explain(plan, explainer, prepared)
            for position, item in enumerate(prepared):
                manifest.write(writing.outcome(plan, item, explained.get(position)))


def test_threaded_run_writes_the_bytes_of_the_stages_in_turn(job):
    root, loaded, explainer, items = job
    summary = run_local(plan_for(root / "threaded", loaded, explainer), explainer, items)
    assert (summary.done, len(summary.failures)) == (len(items) - 1, 1)
    in_turn(plan_for(root / "in-turn", loaded, explainer), explainer, items)
    threaded, serial = snapshot(root / "threaded"), snapshot(root / "in-turn")
    assert sorted(threaded) == sorted(serial)
    assert sum(name.endswith(".png") for name in threaded) == (len(items) - 1) * 2 * 5
    for name in threaded:
        assert threaded[name][2] == serial[name][2], name  # sha256 of the bytes


def test_threaded_runs_repeat_their_bytes(job):
    root, loaded, explainer, items = job
    digests = []
    for attempt in ("again-1", "again-2"):
        run_local(plan_for(root / attempt, loaded, explainer), explainer, items)
        digests.append({name: facts[2] for name, facts in snapshot(root / attempt).items()})
    assert digests[0] == digests[1]
