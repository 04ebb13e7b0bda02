"""Keras model files (.keras zip archives and HDF5 .h5), safe by default.

The file's first bytes say its format; Keras loads it with ``safe_mode`` unless the
caller trusts it, and Keras' many error types are classified into one-line
:class:`~guidedbp.errors.ModelLoadError` messages that say what to do. Custom layer
classes come from a Python file or module the caller names.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import zipfile
from pathlib import Path

from guidedbp._extras import install
from guidedbp._files import regular_file
from guidedbp._text import one_line
from guidedbp.errors import GuidedbpError, ModelLoadError
from guidedbp.models.loaded import LoadedModel

__all__ = ["import_custom_objects", "keras_file_format", "load_keras_file"]

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def load_keras_file(
    spec: str,
    unsafe_deserialization: bool = False,
    custom_objects: str | None = None,
) -> LoadedModel:
    """Load a ``.keras`` or ``.h5`` model file, recognised by its content, not its name.

    Args:
        spec: The file's path.
        unsafe_deserialization: Allow ``Lambda`` layers (their code runs on load).
        custom_objects: A Python file or module name whose Keras classes the loader
            may use (see :func:`import_custom_objects`).

    Returns:
        A :class:`~guidedbp.models.loaded.LoadedModel` of format ``"keras"`` or ``"h5"``.

    Raises:
        ModelLoadError: With a one-line reason: empty, corrupt or truncated file,
            Lambda layer, unknown class, weights-only file, unimportable custom objects.
    """
    file_format = keras_file_format(spec)
    objects = import_custom_objects(custom_objects)

    import keras

    # guidedbp's own layers (the bundled detector's GridBoxes), known to every file.
    import guidedbp.models.layers  # noqa: F401

    if file_format == "keras" and not _zip_is_whole(spec):
        raise ModelLoadError(f"{spec!r} is truncated or corrupt: not a readable .keras archive")
    try:
        model = keras.models.load_model(
            spec, custom_objects=objects, compile=False, safe_mode=not unsafe_deserialization
        )
    except Exception as error:  # Keras raises many types; we classify by message
        raise ModelLoadError(_keras_load_error(spec, error)) from error
    if not isinstance(model, keras.Model):
        raise ModelLoadError(f"{spec!r} holds a {type(model).__name__}, not a Keras model")
    return LoadedModel.from_keras(model, file_format, spec)


def keras_file_format(spec: str) -> str:
    """``"h5"`` or ``"keras"``, from the file's first bytes (no TensorFlow needed).

    Raises:
        ModelLoadError: An empty file, or one of neither format.
        OSError: The file cannot be read.
    """
    with open(spec, "rb") as handle:
        head = handle.read(8)
    if not head:
        raise ModelLoadError(f"{spec!r} is empty, not a model file")
    if head.startswith(_HDF5_MAGIC):
        return "h5"
    if head.startswith(b"PK"):
        return "keras"
    raise ModelLoadError(_unknown_file_message(spec, Path(spec).suffix.lower()))


def _unknown_file_message(spec: str, suffix: str) -> str:
    if suffix == ".keras":
        return (
            f"{spec!r} is corrupt or not a Keras model: a .keras file is a zip archive, "
            "this is not"
        )
    if suffix in (".h5", ".hdf5"):
        return f"{spec!r} is corrupt or not a Keras model: it is not an HDF5 file"
    return f"{spec!r} is not a model file guidedbp reads (.keras, .h5, or a SavedModel folder)"


def _zip_is_whole(path: str) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None
    except (zipfile.BadZipFile, OSError, EOFError):
        return False


def _keras_load_error(spec: str, error: Exception) -> str:
    """One line that says why Keras refused ``spec``, and what to do about it."""
    text = str(error)
    if "Lambda" in text and ("safe_mode" in text or "unsafe" in text):
        return (
            f"{spec!r} contains a Lambda layer, whose code runs when the model loads; "
            "if you trust this file, pass unsafe_deserialization=True"
        )
    missing = re.search(r"Could not deserialize class '([\w.]+)' because its parent module "
                        r"([\w.]+) cannot be imported", text)
    if missing:
        name, module = missing.groups()
        if module.split(".")[0] == "keras_hub":
            return (f"{spec!r} is a keras-hub model ({name}), and keras-hub cannot be "
                    f"imported: {install('hub')}")
        return (f"{spec!r} uses {name!r} of module {module!r}, which cannot be imported: "
                "install the package that defines it, or pass custom_objects=FILE_OR_MODULE")
    unknown = re.search(
        r"Unknown (?:layer|object|class)[^'`\"]*['`\"]([\w.>]+)", text
    ) or re.search(r"Could not locate class '([\w.]+)'", text)
    if unknown:
        return (
            f"{spec!r} uses {unknown.group(1)!r}, which is not a known Keras class: "
            "pass custom_objects=FILE_OR_MODULE defining it"
        )
    if "No model config found" in text:
        return (
            f"{spec!r} holds weights only, no model: pass the whole model (.keras, .h5 or "
            "SavedModel), or use it as weights=PATH for the keras:NAME model it belongs to"
        )
    if "config.json" in text and "archive" in text:
        return f"{spec!r} is a zip archive but not a .keras model (it has no config.json)"
    if isinstance(error, (OSError, EOFError)) or "truncated" in text.lower() or "signature" in text:
        return f"{spec!r} is truncated or corrupt: {one_line(error, limit=200)}"
    return f"cannot load {spec!r}: {one_line(error, limit=200)}"


def import_custom_objects(source: str | None) -> dict:
    """Import a Python file or module; its Keras classes become loadable.

    Classes registered with ``keras.saving.register_keras_serializable`` are found by
    Keras itself once imported; the others are returned by class name. A file may
    import modules that sit beside it, as under ``python file.py``.

    Args:
        source: A ``.py`` file path, a module name, or ``None`` (nothing to import).

    Returns:
        ``{class name: class}`` for the ``keras.layers.Layer`` and ``keras.Model``
        subclasses the module defines or imports.

    Raises:
        ModelLoadError: For a missing file, or a module that fails to import or calls
            ``sys.exit`` while imported (``KeyboardInterrupt`` is not caught).
    """
    if not source:
        return {}
    try:
        if source.endswith(".py") or os.path.sep in source:
            if not os.path.lexists(source):
                raise ModelLoadError(f"custom objects file {source!r} not found")
            try:  # a FIFO would block the import: refuse it unopened
                regular_file(source, "custom objects file")
            except GuidedbpError as error:
                raise ModelLoadError(str(error)) from None
            name = "guidedbp_custom_objects_" + re.sub(r"\W", "_", Path(source).stem)
            module_spec = importlib.util.spec_from_file_location(name, source)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            # Like `python file.py`: the file may import modules that sit beside it.
            folder = os.path.dirname(os.path.abspath(source))
            sys.path.insert(0, folder)
            try:
                module_spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(name, None)  # no half-imported module left behind
                raise
            finally:
                sys.path.remove(folder)
        else:
            module = importlib.import_module(source)
    except ModelLoadError:
        raise
    except SystemExit as error:  # else the whole run would end here, silently
        code = "" if error.code is None else repr(error.code)
        raise ModelLoadError(
            f"custom objects {source!r} called sys.exit({code}) while being imported"
        ) from error
    except Exception as error:
        raise ModelLoadError(
            f"cannot import custom objects {source!r}: {one_line(error, limit=200)}"
        ) from error
    import keras

    return {
        name: value
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, (keras.layers.Layer, keras.Model))
    }
