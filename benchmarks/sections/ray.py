"""ray: the local runner against the Ray runner (local Ray, 2 actors of 1 CPU each) on the same
256 JPEGs (320x240) and the same saved MobileNetV2 (``weights=None``), batch 16: images/s of
each, the Ray runner's first run (with its workers' start-up) and second, and whether both
wrote the same bytes.
"""

from __future__ import annotations

import os

import keras

from sections.common import timed, write_images

#: The section's name, as ``--only`` takes it.
NAME = "ray"


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



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    ray_engine(folder)
