"""Saved models the tests share, built once and cached under ``build/test-zoo/``.

Saving a model, and above all exporting a SavedModel (``model.export``: a trace and a
graph written to disk, seconds each), is the costly part of many fixtures. :func:`saved`
does it once for every test file, every pytest worker and every later run, in a folder
named by the TensorFlow and Keras versions and by the builder's own source code, so a
changed builder or an upgraded Keras builds afresh. Workers that ask at once wait for one
build (a file lock); a build is written to a temporary folder and renamed into place, so
no test ever sees half of one.

Only deterministic builders belong here (fixed weights, or a fixed seed): a cached model
must be the model the builder would build now.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import inspect
import os
import shutil
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "build" / "test-zoo"
#: What a model can be saved as, and the name each gets in its folder.
KINDS = {"keras": "model.keras", "h5": "model.h5", "savedmodel": "saved_model"}


def _folder(name: str, builder: Callable, key: str) -> Path:
    import keras
    import tensorflow as tf

    if isinstance(builder, functools.partial):  # the function's source and its arguments
        key += repr((builder.args, sorted(builder.keywords.items())))
        builder = builder.func
    source = inspect.getsource(builder).encode() + key.encode()
    tag = hashlib.sha256(source).hexdigest()[:12]
    return ROOT / f"tf{tf.__version__}-keras{keras.__version__}" / f"{name}-{tag}"


def saved(name: str, builder: Callable, kinds: tuple[str, ...] = tuple(KINDS),
          key: str = "") -> dict:
    """``builder()``'s model saved as each of ``kinds`` (of :data:`KINDS`): kind -> path,
    built on the first call anywhere and read from the cache after. ``key`` names what
    else the model depends on (the digest of a file it loads)."""
    folder = _folder(name, builder, key)
    wanted = {kind: folder / KINDS[kind] for kind in kinds}
    if all(path.exists() for path in wanted.values()):
        return wanted
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be building it: wait
        missing = [kind for kind, path in wanted.items() if not path.exists()]
        if missing:
            model = builder()
            for kind in missing:
                _save(model, kind, wanted[kind])
    return wanted


def by_script(name: str, script: str) -> Path:
    """The folder that ``python -c SCRIPT FOLDER`` fills, run once in a process of its own
    (models saved where they were not built, as a user's are) and cached as :func:`saved`
    caches, by the script's text and the TensorFlow and Keras versions. The script must be
    deterministic (a fixed seed)."""
    import subprocess
    import sys

    folder = _folder(name, by_script, script)
    if folder.exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not folder.exists():
            temporary = folder.with_name(f".{folder.name}.{os.getpid()}")
            shutil.rmtree(temporary, ignore_errors=True)
            temporary.mkdir()
            subprocess.run([sys.executable, "-c", script, str(temporary)], check=True,
                           env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
                           capture_output=True)
            os.replace(temporary, folder)
    return folder


def _save(model, kind: str, path: Path) -> None:
    """Save ``model`` as ``kind`` at ``path``, whole or not at all."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    if kind == "savedmodel":
        model.export(str(temporary))  # no verbose=: Keras 3.4 (the floor) has none
    else:
        temporary.mkdir(parents=True)
        model.save(temporary / path.name)
        temporary = temporary / path.name
    os.replace(temporary, path)
    shutil.rmtree(path.with_name(f".{path.name}.{os.getpid()}"), ignore_errors=True)


#: The tiny CLIP's image side, text length and the letters its tokenizer knows.
CLIP_SIZE, CLIP_LENGTH = 32, 12
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def tiny_clip():
    """A tiny keras-hub CLIP built from a config, seeded (``(backbone, tokenizer)``):
    32x32 images in a 4x4 grid of 8x8 patches, two encoder blocks of width 16,
    quick-GELU, an 8-value embedding; a hand-written tokenizer of the 26 letters, alone
    and word-final, and two merged words (``cat``, ``dog``)."""
    import keras
    import keras_hub

    # <|endoftext|> has the largest id, as in CLIP's vocabulary: the text pooler finds
    # each prompt's end by its argmax.
    tokens = [*LETTERS, *(f"{c}</w>" for c in LETTERS), "ca", "cat</w>", "do", "dog</w>",
              "<|startoftext|>", "<|endoftext|>"]
    tokenizer = keras_hub.models.CLIPTokenizer(
        vocabulary={token: i for i, token in enumerate(tokens)},
        merges=["c a", "ca t</w>", "d o", "do g</w>"])
    keras.utils.set_random_seed(35)
    backbone = keras_hub.models.CLIPBackbone(
        vision_encoder=keras_hub.models.CLIPVisionEncoder(
            patch_size=8, hidden_dim=16, num_layers=2, num_heads=2, intermediate_dim=32,
            image_shape=(CLIP_SIZE, CLIP_SIZE, 3)),
        text_encoder=keras_hub.models.CLIPTextEncoder(
            vocabulary_size=len(tokens), embedding_dim=16, hidden_dim=16, num_layers=2,
            num_heads=2, intermediate_dim=32, max_sequence_length=CLIP_LENGTH),
        projection_dim=8)
    return backbone, tokenizer


def clip_preset() -> Path:
    """:func:`tiny_clip` saved as a keras-hub preset folder with its tokenizer, built
    once (as :func:`saved` builds)."""
    folder = _folder("clip-preset", tiny_clip, "")
    if (folder / "preset").exists():
        return folder / "preset"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "preset").exists():
            backbone, tokenizer = tiny_clip()
            temporary = folder / f".preset.{os.getpid()}"
            shutil.rmtree(temporary, ignore_errors=True)
            backbone.save_to_preset(str(temporary))
            tokenizer.save_to_preset(str(temporary))
            os.replace(temporary, folder / "preset")
    return folder / "preset"
