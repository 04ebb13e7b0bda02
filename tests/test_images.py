"""Tests for guidedbp.io.images: every image kind is made with Pillow in tmp_path."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image, ImageFile

from guidedbp.io import images
from guidedbp.io.images import IMAGE_EXTENSIONS, ImageError, decode_image, is_image_path

from .helpers import noise

RED, GREEN, BLUE = (255, 0, 0), (0, 255, 0), (0, 0, 255)


def solid(size: tuple[int, int], colour, mode: str = "RGB") -> Image.Image:
    return Image.new(mode, size, colour)


# --- paths ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("cat.jpg", True),
        ("dir/CAT.JPEG", True),
        ("x.Png", True),
        ("x.tif", True),
        ("x.TIFF", True),
        ("x.webp", True),
        ("x.bmp", True),
        ("x.gif", True),
        ("x.txt", False),
        ("x.npy", False),
        ("jpg", False),
        ("archive.png.zip", False),
    ],
)
def test_is_image_path(path, expected):
    assert is_image_path(path) is expected


def test_is_image_path_accepts_pathlike(tmp_path):
    assert is_image_path(tmp_path / "a.JPG")
    assert not is_image_path(tmp_path / "a")


def test_image_extensions_are_lower_case_with_dot():
    assert all(ext.startswith(".") and ext == ext.lower() for ext in IMAGE_EXTENSIONS)
    assert len(set(IMAGE_EXTENSIONS)) == len(IMAGE_EXTENSIONS) == 8


# --- lossless formats round-trip exactly --------------------------------------------


@pytest.mark.parametrize(
    ("suffix", "options"),
    [(".png", {}), (".bmp", {}), (".tif", {}), (".tiff", {}), (".webp", {"lossless": True})],
)
def test_lossless_rgb_round_trip(tmp_path, suffix, options):
    pixels = noise(9, 13)
    path = tmp_path / f"img{suffix}"
    Image.fromarray(pixels).save(path, **options)
    out = decode_image(path)
    assert out.dtype == np.uint8
    assert out.shape == (9, 13, 3)
    np.testing.assert_array_equal(out, pixels)


def test_output_is_a_writable_array(tmp_path):
    path = tmp_path / "a.png"
    Image.fromarray(noise(4, 5)).save(path)
    out = decode_image(path)
    out[0, 0] = 7
    assert out.flags.writeable and out[0, 0, 0] == 7


def test_jpeg_rgb(tmp_path):
    image = solid((32, 16), RED)
    image.paste(BLUE, (0, 8, 32, 16))  # bottom half blue
    path = tmp_path / "a.jpg"
    image.save(path, quality=95)
    out = decode_image(path)
    assert out.shape == (16, 32, 3)
    with Image.open(path) as reference:
        np.testing.assert_array_equal(out, np.asarray(reference.convert("RGB")))
    assert np.abs(out[2, 16].astype(int) - RED).max() <= 3
    assert np.abs(out[13, 16].astype(int) - BLUE).max() <= 3


# --- colour modes --------------------------------------------------------------------


def test_grayscale_gives_three_equal_channels_or_one(tmp_path):
    gray = noise(6, 7, channels=1)
    path = tmp_path / "g.png"
    Image.fromarray(gray).save(path)
    rgb = decode_image(path)
    assert rgb.shape == (6, 7, 3)
    for channel in range(3):
        np.testing.assert_array_equal(rgb[..., channel], gray)
    one = decode_image(path, channels=1)
    assert one.shape == (6, 7, 1)
    np.testing.assert_array_equal(one[..., 0], gray)


def test_rgb_to_one_channel_uses_itu_601_luma(tmp_path):
    image = Image.new("RGB", (4, 1))
    for x, colour in enumerate([RED, GREEN, BLUE, (255, 255, 255)]):
        image.putpixel((x, 0), colour)
    path = tmp_path / "c.png"
    image.save(path)
    out = decode_image(path, channels=1)
    assert out.shape == (1, 4, 1)
    # Pillow's L = (19595 R + 38470 G + 7471 B + 32768) >> 16.
    assert out[0, :, 0].tolist() == [76, 150, 29, 255]


def test_bilevel_image(tmp_path):
    image = Image.new("1", (3, 1), 0)
    image.putpixel((1, 0), 1)
    path = tmp_path / "b.png"
    image.save(path)
    assert decode_image(path)[0].tolist() == [[0, 0, 0], [255, 255, 255], [0, 0, 0]]


def test_palette(tmp_path):
    image = Image.new("P", (3, 1))
    image.putpalette([10, 20, 30, 200, 100, 50, 0, 255, 0] + [0] * (3 * 253))
    image.putdata([0, 1, 2])
    path = tmp_path / "p.png"
    image.save(path)
    assert decode_image(path)[0].tolist() == [[10, 20, 30], [200, 100, 50], [0, 255, 0]]


def test_palette_with_transparency_composites_on_white(tmp_path):
    image = Image.new("P", (2, 1))
    image.putpalette([0, 0, 0, 10, 20, 30] + [0] * (3 * 254))
    image.putdata([0, 1])
    path = tmp_path / "pt.png"
    image.save(path, transparency=0)
    with Image.open(path) as check:
        assert check.mode == "P" and check.info["transparency"] == 0
    assert decode_image(path)[0].tolist() == [[255, 255, 255], [10, 20, 30]]


def test_palette_gif_with_transparency(tmp_path):
    image = Image.new("P", (2, 1))
    image.putpalette([0, 0, 0, 10, 20, 30] + [0] * (3 * 254))
    image.putdata([0, 1])
    path = tmp_path / "pt.gif"
    image.save(path, transparency=0)
    assert decode_image(path)[0].tolist() == [[255, 255, 255], [10, 20, 30]]


def test_rgba_composites_on_white_exactly(tmp_path):
    image = Image.new("RGBA", (4, 1))
    image.putdata([(255, 0, 0, 128), (0, 0, 0, 0), (0, 0, 255, 255), (0, 200, 0, 64)])
    path = tmp_path / "a.png"
    image.save(path)
    out = decode_image(path)
    # round(c * a / 255 + 255 * (1 - a / 255)) per channel.
    assert out[0].tolist() == [[255, 127, 127], [255, 255, 255], [0, 0, 255], [191, 241, 191]]


def test_rgba_to_one_channel_composites_first(tmp_path):
    path = tmp_path / "a.png"
    Image.new("RGBA", (1, 1), (255, 0, 0, 128)).save(path)
    # White-composited (255, 127, 127) -> (19595*255 + 38470*127 + 7471*127 + 32768) >> 16.
    assert decode_image(path, channels=1).tolist() == [[[165]]]


def test_la_composites_on_white(tmp_path):
    image = Image.new("LA", (2, 1))
    image.putdata([(100, 128), (40, 255)])
    path = tmp_path / "la.png"
    image.save(path)
    assert decode_image(path)[0].tolist() == [[177, 177, 177], [40, 40, 40]]
    assert decode_image(path, channels=1)[0, :, 0].tolist() == [177, 40]


def test_cmyk_tiff_exact(tmp_path):
    image = Image.new("CMYK", (3, 1))
    image.putdata([(0, 255, 255, 0), (0, 0, 0, 255), (0, 0, 0, 0)])
    path = tmp_path / "c.tif"
    image.save(path)
    assert decode_image(path)[0].tolist() == [[255, 0, 0], [0, 0, 0], [255, 255, 255]]


def test_cmyk_jpeg(tmp_path):
    path = tmp_path / "c.jpg"
    Image.new("CMYK", (16, 16), (0, 255, 255, 0)).save(path, quality=100)
    with Image.open(path) as check:
        assert check.mode == "CMYK"
    out = decode_image(path)
    assert out.shape == (16, 16, 3)
    assert np.abs(out.astype(int) - RED).max() <= 2


def test_16_bit_png_scaled_to_8_bit(tmp_path):
    values = np.array([[0, 128, 129, 257, 385, 386, 32896, 65535]], dtype=np.uint16)
    path = tmp_path / "deep.png"
    Image.fromarray(values).save(path)
    with Image.open(path) as check:
        assert check.mode == "I;16"
    out = decode_image(path)
    expected = [0, 0, 1, 1, 1, 2, 128, 255]  # round(v / 257)
    assert out.shape == (1, 8, 3)
    assert out[0, :, 0].tolist() == expected
    np.testing.assert_array_equal(out[..., 1], out[..., 0])
    assert decode_image(path, channels=1)[0, :, 0].tolist() == expected


def test_32_bit_int_tiff_treated_as_16_bit(tmp_path):
    values = np.array([[-5, 0, 257, 32896, 70000]], dtype=np.int32)
    path = tmp_path / "int.tif"
    Image.fromarray(values).save(path)
    with Image.open(path) as check:
        assert check.mode == "I"
    assert decode_image(path, channels=1)[0, :, 0].tolist() == [0, 0, 1, 128, 255]


def test_float_tiff_taken_as_zero_to_one(tmp_path):
    values = np.array([[0.0, 0.25, 0.5, 1.0, 2.0, -1.0]], dtype=np.float32)
    path = tmp_path / "float.tif"
    Image.fromarray(values).save(path)
    with Image.open(path) as check:
        assert check.mode == "F"
    assert decode_image(path, channels=1)[0, :, 0].tolist() == [0, 64, 128, 255, 255, 0]


# --- orientation and animation -------------------------------------------------------


def test_exif_orientation_6_is_applied(tmp_path):
    stored = Image.new("RGB", (48, 32), BLUE)  # 48 wide, 32 high as stored
    stored.paste(RED, (0, 0, 16, 16))  # marked stored top-left corner
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to display"
    path = tmp_path / "rotated.jpg"
    stored.save(path, exif=exif.tobytes(), quality=95)
    out = decode_image(path)
    assert out.shape == (48, 32, 3)  # transposed: 48 rows, 32 columns
    # A clockwise quarter turn moves the top-left corner to the top-right.
    assert np.abs(out[8, 24].astype(int) - RED).max() <= 8
    assert np.abs(out[8, 8].astype(int) - BLUE).max() <= 8
    assert np.abs(out[40, 24].astype(int) - BLUE).max() <= 8


def test_animated_gif_gives_first_frame(tmp_path):
    frames = [solid((5, 4), RED), solid((5, 4), GREEN), solid((5, 4), BLUE)]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=50, loop=0)
    with Image.open(path) as check:
        assert check.n_frames == 3
    out = decode_image(path)
    assert out.shape == (4, 5, 3)
    assert np.all(out == RED)


def test_animated_webp_gives_first_frame(tmp_path):
    frames = [solid((6, 6), GREEN), solid((6, 6), RED)]
    path = tmp_path / "anim.webp"
    frames[0].save(path, save_all=True, append_images=frames[1:], lossless=True, duration=50)
    out = decode_image(path)
    assert np.all(out == GREEN)


# --- failures ------------------------------------------------------------------------


def _save_noise(path, fmt: str) -> None:
    Image.fromarray(noise(64, 64, seed=3)).save(path, fmt)


@pytest.mark.parametrize(("name", "fmt"), [("cut.png", "PNG"), ("cut.jpg", "JPEG")])
def test_truncated_file(tmp_path, name, fmt):
    path = tmp_path / name
    _save_noise(path, fmt)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageError) as caught:
        decode_image(path)
    assert str(caught.value) == f"{path}: truncated image file"
    assert caught.value.reason == "truncated image file"
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False


def test_corrupt_png_data(tmp_path):
    path = tmp_path / "bad.png"
    _save_noise(path, "PNG")
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 40] = bytes(40)
    path.write_bytes(bytes(data))
    with pytest.raises(ImageError) as caught:
        decode_image(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: corrupt image data (")
    assert "\n" not in message


def test_empty_file(tmp_path):
    path = tmp_path / "empty.png"
    path.write_bytes(b"")
    with pytest.raises(ImageError, match="empty file$") as caught:
        decode_image(path)
    assert str(caught.value) == f"{path}: empty file"


def test_text_file_named_jpg(tmp_path):
    path = tmp_path / "cat.jpg"
    path.write_text("this is not a picture\n")
    with pytest.raises(ImageError) as caught:
        decode_image(path)
    assert str(caught.value) == f"{path}: not a readable image (cannot identify image file)"


def test_unsupported_format_is_not_identified(tmp_path):
    # Pillow can read ICO, but only the listed photo formats are accepted.
    path = tmp_path / "icon.png"
    solid((16, 16), RED).save(path, format="ICO")
    with pytest.raises(ImageError, match="cannot identify image file"):
        decode_image(path)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.png"
    with pytest.raises(ImageError) as caught:
        decode_image(path)
    assert str(caught.value) == f"{path}: no such file"


def test_directory(tmp_path):
    with pytest.raises(ImageError) as caught:
        decode_image(tmp_path)
    assert str(caught.value) == f"{tmp_path}: is a directory, not an image file"


def test_message_uses_the_name_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ImageError) as caught:
        decode_image("sub/cat.jpg")
    assert str(caught.value) == "sub/cat.jpg: no such file"
    assert caught.value.path == "sub/cat.jpg"


def test_max_pixels_refuses_large_image(tmp_path):
    path = tmp_path / "big.png"
    solid((20, 10), RED).save(path)
    with pytest.raises(ImageError) as caught:
        decode_image(path, max_pixels=199)
    assert str(caught.value) == (
        f"{path}: image too large to decode safely: 20 x 10 pixels (limit 199 pixels)"
    )
    assert decode_image(path, max_pixels=200).shape == (10, 20, 3)


def test_pillow_warning_level_bomb_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    path = tmp_path / "bomb.png"
    solid((12, 10), RED).save(path)  # 120 pixels: Pillow only warns
    with pytest.raises(ImageError) as caught:
        decode_image(path)
    assert str(caught.value) == (
        f"{path}: image too large to decode safely: 12 x 10 pixels (limit 100 pixels)"
    )
    ok = tmp_path / "ok.png"
    solid((10, 10), RED).save(ok)
    assert decode_image(ok).shape == (10, 10, 3)


def test_pillow_error_level_bomb_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    path = tmp_path / "bomb.gif"
    solid((30, 10), RED).save(path)  # 300 pixels: over twice the limit, Pillow raises
    with pytest.raises(ImageError) as caught:
        decode_image(path)
    assert str(caught.value) == (
        f"{path}: image too large to decode safely: 300 pixels (limit 100 pixels)"
    )


@pytest.mark.parametrize("channels", [0, 2, 4, True, "3"])
def test_bad_channels(tmp_path, channels):
    with pytest.raises(ValueError, match="channels must be 1 or 3") as caught:
        decode_image(tmp_path / "x.png", channels=channels)
    assert not isinstance(caught.value, ImageError)


@pytest.mark.parametrize("max_pixels", [0, -1, 1.5, True])
def test_bad_max_pixels(tmp_path, max_pixels):
    with pytest.raises(ValueError, match="max_pixels must be a positive int"):
        decode_image(tmp_path / "x.png", max_pixels=max_pixels)


def test_image_error_is_value_error_and_pickles():
    error = ImageError("a.png", "empty file")
    assert isinstance(error, ValueError)
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.path, copy.reason) == ("a.png: empty file", "a.png", "empty file")


def test_modules_import_neither_tensorflow_nor_keras():
    code = (
        "import sys; import guidedbp.io.images, guidedbp.models.preprocess, "
        "guidedbp.models.labels; from PIL import ImageFile; "
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')]; "
        "print(heavy, ImageFile.LOAD_TRUNCATED_IMAGES)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[] False"


# --- non-regular files, memory, strips, JPEG draft ------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    path = tmp_path / "pipe.png"
    os.mkfifo(path)
    with pytest.raises(ImageError) as caught:  # a blocking open would never return
        decode_image(path)
    assert str(caught.value) == f"{path}: not a regular file (a FIFO)"


def test_character_device_is_refused():
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    with pytest.raises(ImageError, match=r"not a regular file \(a character device\)"):
        decode_image("/dev/zero")


def test_memory_error_fails_the_image_with_its_size(tmp_path, monkeypatch):
    path = tmp_path / "a.png"
    solid((20, 10), RED).save(path)

    def out_of_memory(*args):
        raise MemoryError

    monkeypatch.setattr(images, "_to_array", out_of_memory)
    with pytest.raises(ImageError) as caught:
        decode_image(path)
    assert caught.value.reason == "not enough memory to decode it (20 x 10 pixels)"


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "LA", "P", "I;16", "F", "1", "CMYK"])
@pytest.mark.parametrize("channels", [1, 3])
def test_strip_by_strip_conversion_equals_whole(tmp_path, monkeypatch, mode, channels):
    rng = np.random.default_rng(5)
    if mode in ("I;16", "F"):
        values = rng.integers(0, 65536, (37, 23)).astype(np.uint16)
        picture = Image.fromarray(values) if mode == "I;16" else \
            Image.fromarray((values / 65535).astype(np.float32))
        path = tmp_path / ("x.tif" if mode == "F" else "x.png")
    else:
        picture = Image.fromarray(noise(37, 23, 4, seed=3)[..., :3]).convert(mode)
        if mode == "P":
            picture.info["transparency"] = 7
        path = tmp_path / ("x.tif" if mode in ("CMYK",) else "x.png")
    picture.save(path)
    whole = decode_image(path, channels)
    monkeypatch.setattr(images, "_STRIP_BYTES", 4 * 23 * 5)  # strips of 5 rows
    assert np.array_equal(decode_image(path, channels), whole)


def test_jpeg_draft_decodes_reduced_keeping_the_longer_side(tmp_path):
    path = tmp_path / "wide.jpg"
    Image.fromarray(noise(1000, 2000, seed=4)).save(path, quality=90)
    assert decode_image(path).shape == (1000, 2000, 3)
    # 2000 >= 2 x 400: the DCT scale 1/4 keeps the longer side >= 400 (1/8 would not).
    assert decode_image(path, draft_side=400).shape == (250, 500, 3)
    assert decode_image(path, draft_side=1000).shape == (500, 1000, 3)
    assert decode_image(path, draft_side=1001).shape == (1000, 2000, 3)  # not twice
    gray = decode_image(path, channels=1, draft_side=250)
    assert gray.shape == (125, 250, 1)


def test_jpeg_draft_applies_the_exif_orientation(tmp_path):
    path = tmp_path / "turned.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    Image.fromarray(noise(400, 800, seed=6)).save(path, exif=exif.tobytes(), quality=90)
    # Stored 800 x 400, decoded at 1/4 (200 x 100), then turned upright.
    assert decode_image(path, draft_side=200).shape == (200, 100, 3)


def test_draft_side_leaves_other_formats_whole(tmp_path):
    path = tmp_path / "wide.png"
    solid((2000, 1000), RED).save(path)
    assert decode_image(path, draft_side=100).shape == (1000, 2000, 3)


@pytest.mark.parametrize("draft_side", [0, -1, 1.5, True])
def test_bad_draft_side(tmp_path, draft_side):
    with pytest.raises(ValueError, match="draft_side must be a positive int"):
        decode_image(tmp_path / "x.jpg", draft_side=draft_side)
