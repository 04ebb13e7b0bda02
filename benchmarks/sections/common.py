"""What the sections share: a timer, the benchmark's random-weight models, the sample
JPEGs and pictures, and peak RSS of ``guidedbp explain`` in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import keras
import numpy as np

#: The repository's root folder.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bench_model(name: str, size: int):
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


def small_model(folder: str) -> str:
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


def peak_rss(model_path: str, images: str, output: str, *flags: str) -> int:
    """Peak RSS in bytes of ``guidedbp explain MODEL IMAGES -o OUTPUT -q FLAGS`` in a
    process of its own."""
    result = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT, "explain", model_path, images, "-q",
         "-o", output, *flags],
        capture_output=True, text=True, check=True,
    )
    return int(result.stdout.strip().splitlines()[-1]) * 1024  # KiB -> bytes


def sample_batch(count: int, size: int, mode: str) -> np.ndarray:
    """``count`` images of the repository's sample_images (photos and shapes, mirrored
    on the second pass round), fitted to ``size`` and preprocessed by ``mode``."""
    import glob

    from guidedbp.io.images import decode_image
    from guidedbp.models.preprocess import prepare

    root = os.path.join(REPO, "sample_images")
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

