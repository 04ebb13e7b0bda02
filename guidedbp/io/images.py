"""Decode image files into uint8 arrays, refusing broken or unsafe files with a clear reason.

Every failure a user can cause (missing file, empty file, a FIFO or device instead of a
file, not an image, truncated or corrupt data, a decompression bomb, too little memory)
is raised as :class:`ImageError`, whose message is one line that starts with the file
name, ready to be shown as is.

Memory: decoding holds Pillow's decoded image and the output array, and converts
between them in strips of rows, so a large image costs about twice its decoded size
at its peak (an RGB image of 81 megapixels: about 570 MB), never more.

>>> from guidedbp.io.images import decode_image, is_image_path
>>> is_image_path("photos/Cat.JPG")
True
"""

from __future__ import annotations

import io
import os
import re
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from guidedbp._files import MISSING, NotRegularFileError, open_regular
from guidedbp._text import one_line
from guidedbp.errors import GuidedbpError
from guidedbp.io import store

__all__ = ["IMAGE_EXTENSIONS", "ImageError", "decode_image", "is_image_path"]

#: File extensions (lower case) that :func:`is_image_path` accepts.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")

# Pillow plugins allowed to identify a file (JPEG also opens multi-picture MPO files).
# Restricting them keeps untrusted input away from plugins that run external programs
# (EPS runs Ghostscript) or rarely used parsers.
_PILLOW_FORMATS = ("JPEG", "PNG", "GIF", "BMP", "WEBP", "TIFF")

_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})
_PIXEL_COUNT = re.compile(r"\((\d+) pixels\)")
# Rows are converted from Pillow to numpy this many bytes (of Pillow's image) at a time.
_STRIP_BYTES = 1 << 24


class ImageError(ValueError, GuidedbpError):
    """A file that cannot be decoded as an image, with a one-line user-facing reason.

    ``str(error)`` is ``"<path>: <reason>"``, e.g.
    ``"cat.jpg: not a readable image (cannot identify image file)"``.

    Attributes:
        path: The file name as the caller gave it.
        reason: Why it could not be decoded, without the file name.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self):
        return (type(self), (self.path, self.reason))


def is_image_path(path: str | os.PathLike[str]) -> bool:
    """Tell whether a path has one of the :data:`IMAGE_EXTENSIONS`, in any letter case.

    Args:
        path: A file name or path; the file need not exist.

    Returns:
        True when the extension is a known image extension.

    >>> is_image_path("a/b.TIFF"), is_image_path("notes.txt")
    (True, False)
    """
    return Path(path).suffix.lower() in IMAGE_EXTENSIONS


#: The largest image object read from a store (it is read into memory whole).
MAX_OBJECT_BYTES = 512 * 2**20


def _open_image(name: str):
    """The image file, or an object's bytes (a URL) as a file in memory."""
    if not store.is_url(name):
        return open_regular(name, "rb", "image")
    try:
        return io.BytesIO(store.read_bytes(name, limit=MAX_OBJECT_BYTES))
    except FileNotFoundError:
        raise ImageError(name, "no such object") from None
    except PermissionError:
        raise ImageError(name, "permission denied") from None
    except OSError as error:
        raise ImageError(name, f"cannot read it ({store.describe(error)})") from None


def _size_of(file) -> int:
    if isinstance(file, io.BytesIO):
        return len(file.getbuffer())
    return os.fstat(file.fileno()).st_size


def decode_image(
    path: str | os.PathLike[str],
    channels: int = 3,
    *,
    max_pixels: int | None = None,
    draft_side: int | None = None,
) -> np.ndarray:
    """Decode an image file into a ``uint8`` array of shape ``(height, width, channels)``.

    The EXIF orientation is applied, so the array is upright as a viewer shows it.
    Animated files give their first frame. Colour modes are converted as follows:

    - alpha (RGBA, LA, palette or grey with transparency) is composited on white;
    - palette, CMYK and YCbCr become RGB through Pillow;
    - 16-bit grey (``I;16*``, and ``I``, which Pillow uses for 16-bit data) is scaled
      from 0..65535 to 0..255 as ``round(v / 257)``; values outside 0..65535 are clipped;
    - 32-bit float grey (``F``) is taken as 0..1, clipped, and scaled to 0..255;
    - ``channels=1`` turns colour into grey with Pillow's ITU-R 601-2 luma;
      ``channels=3`` repeats grey into three equal channels.

    Only regular files are read: a FIFO, socket or device is refused without being
    opened for a blocking read (it could wait forever).

    Args:
        path: The image file.
        channels: 3 for RGB or 1 for grey.
        max_pixels: Refuse images with more pixels than this. ``None`` uses Pillow's
            ``Image.MAX_IMAGE_PIXELS`` (about 89 megapixels unless changed). Pillow's own
            hard limit, twice ``MAX_IMAGE_PIXELS``, applies whatever this is.
        draft_side: When given, a JPEG whose longer side is at least twice this is
            decoded reduced by 1/2, 1/4 or 1/8 (Pillow's draft mode: DCT scaling, several
            times faster and smaller), keeping its longer side at least ``draft_side``.
            For callers that need no more than that (a model input and pictures capped
            at that side); the array's shape is then the reduced size. Other formats
            are decoded whole.

    Returns:
        A new, writable ``uint8`` array of shape ``(height, width, channels)``.

    Raises:
        ImageError: The file is missing, empty, not a regular file, not an image,
            truncated, corrupt, too large to decode safely, or there is not enough
            memory to decode it. The message is one line naming the file.
        ValueError: ``channels`` is not 1 or 3, or ``max_pixels`` or ``draft_side`` is
            not a positive int.

    >>> try:
    ...     decode_image("missing.png")
    ... except ImageError as error:
    ...     print(error)
    missing.png: no such file
    """
    if isinstance(channels, bool) or channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels!r}")
    for option, value in (("max_pixels", max_pixels), ("draft_side", draft_side)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(f"{option} must be a positive int or None, got {value!r}")
    name = os.fspath(path)
    limit = Image.MAX_IMAGE_PIXELS if max_pixels is None else max_pixels
    size = ""
    try:
        with _open_image(name) as file:
            if _size_of(file) == 0:
                raise ImageError(name, "empty file")
            with warnings.catch_warnings():
                # The warning-level limit is enforced below with a clearer message.
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                image = Image.open(file, formats=_PILLOW_FORMATS)
            with image:
                width, height = image.size
                size = f" ({width} x {height} pixels)"
                if limit is not None and width * height > limit:
                    raise ImageError(
                        name,
                        f"image too large to decode safely: {width} x {height} pixels "
                        f"(limit {limit} pixels)",
                    )
                if draft_side is not None and image.format in ("JPEG", "MPO"):
                    _draft(image, draft_side)
                image.load()
                # In place: a transposed copy only where the orientation asks for one.
                ImageOps.exif_transpose(image, in_place=True)
                return _to_array(image, channels, name)
    except ImageError:
        raise
    except NotRegularFileError as error:
        if error.kind == MISSING:
            raise ImageError(name, "no such file") from None
        if error.kind == "a directory":
            raise ImageError(name, "is a directory, not an image file") from None
        raise ImageError(name, f"not a regular file ({error.kind})") from None
    except FileNotFoundError:
        raise ImageError(name, "no such file") from None
    except IsADirectoryError:
        raise ImageError(name, "is a directory, not an image file") from None
    except PermissionError:
        raise ImageError(name, "permission denied") from None
    except MemoryError:
        raise ImageError(name, f"not enough memory to decode it{size}") from None
    except UnidentifiedImageError:
        raise ImageError(name, "not a readable image (cannot identify image file)") from None
    except Image.DecompressionBombError as error:
        found = _PIXEL_COUNT.search(str(error))
        size = f"{found.group(1)} pixels" if found else "too many pixels"
        raise ImageError(
            name, f"image too large to decode safely: {size} (limit {limit} pixels)"
        ) from None
    except OSError as error:
        if "truncated" in str(error).lower():
            raise ImageError(name, "truncated image file") from None
        if error.errno is not None:  # the operating system failed to read the file
            raise ImageError(name, f"cannot read file ({error.strerror or error})") from None
        raise ImageError(name, f"corrupt image data ({one_line(error)})") from None
    except Exception as error:
        # Pillow's decoders report malformed data with many exception types
        # (SyntaxError, ValueError, struct.error, zlib.error, EOFError, ...).
        raise ImageError(name, f"corrupt image data ({one_line(error)})") from None


def _draft(image: Image.Image, side: int) -> None:
    """Ask a JPEG decoder for the smallest DCT scale whose longer side is still >= side."""
    width, height = image.size
    longer = max(width, height)
    if longer < 2 * side:
        return
    # Pillow keeps both sides at least the requested ones: ask for the image's own aspect.
    wanted = (max(1, -(-width * side // longer)), max(1, -(-height * side // longer)))
    image.draft(None, wanted)


def _to_array(image: Image.Image, channels: int, name: str) -> np.ndarray:
    """Convert a loaded, upright Pillow image to uint8 ``(H, W, channels)``.

    Strips of rows are converted one at a time into the output array (every
    conversion here is per pixel), so the peak is the Pillow image plus the output.
    """
    width, height = image.size
    out = np.empty((height, width, channels), dtype=np.uint8)
    rows = max(1, _STRIP_BYTES // (4 * max(width, 1)))
    # Decided on the whole image: a strip of a palette image keeps its palette and info.
    alpha = image.mode in _ALPHA_MODES or "transparency" in image.info
    for top in range(0, height, rows):
        bottom = min(height, top + rows)
        strip = image if (top, bottom) == (0, height) else image.crop((0, top, width, bottom))
        out[top:bottom] = _strip_to_array(strip, channels, name, alpha)
    return out


def _strip_to_array(image: Image.Image, channels: int, name: str, alpha: bool) -> np.ndarray:
    mode = image.mode
    if mode == "I" or mode.startswith("I;16"):
        values = np.asarray(image).astype(np.int64)
        return _gray_out(((np.clip(values, 0, 65535) + 128) // 257).astype(np.uint8), channels)
    if mode == "F":
        values = np.nan_to_num(np.asarray(image, dtype=np.float64), nan=0.0)
        return _gray_out(np.rint(np.clip(values, 0.0, 1.0) * 255.0).astype(np.uint8), channels)
    if alpha:
        rgba = np.asarray(_convert(image, "RGBA", name), dtype=np.uint32)
        alpha_values = rgba[..., 3:]
        # round((c * a + 255 * (255 - a)) / 255): alpha-composite over white, exactly.
        rgb = ((rgba[..., :3] * alpha_values + 255 * (255 - alpha_values) + 127) // 255
               ).astype(np.uint8)
        if channels == 3:
            return rgb
        return np.asarray(Image.fromarray(rgb).convert("L"))[..., np.newaxis]
    if mode in ("L", "1"):
        return _gray_out(np.asarray(_convert(image, "L", name)), channels)
    rgb_image = _convert(image, "RGB", name)
    if channels == 1:
        return np.asarray(rgb_image.convert("L"))[..., np.newaxis]
    return np.asarray(rgb_image)


def _convert(image: Image.Image, mode: str, name: str) -> Image.Image:
    if image.mode == mode:
        return image
    try:
        return image.convert(mode)
    except ValueError as error:
        raise ImageError(
            name, f"unsupported colour mode {image.mode!r} ({one_line(error)})"
        ) from None


def _gray_out(gray: np.ndarray, channels: int) -> np.ndarray:
    return gray[..., np.newaxis] if channels == 1 else np.repeat(gray[..., np.newaxis], 3, axis=2)


