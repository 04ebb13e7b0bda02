"""Text prompts as targets (issue 35): a two-tower model's image tower explained for a prompt.

A tiny keras-hub CLIP is built from a config (32x32 images in a 4x4 grid of 8x8 patches,
two encoder blocks of width 16, quick-GELU, an 8-value embedding) with a hand-written
tokenizer (the 26 letters, alone and word-final, and two merged words), and saved as a
preset folder with its tokenizer. Every score is computed again here from keras-hub's own
calls (``CLIPPreprocessor``, ``get_text_embeddings``, ``get_vision_embeddings``), not
guidedbp's, and differentiated with ``tf.GradientTape``: plainly (vanilla, integrated
gradients' midpoint sum) and, for guided backpropagation, on a copy of the backbone whose
quick-GELUs have the generalised guided rule's backward (``tests.activation_reference``).
"""

from __future__ import annotations

import json
import shutil
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from guidedbp import Explainer, load_model
from guidedbp.engine import explainer as engine
from guidedbp.errors import ArgumentError
from guidedbp.pipeline.naming import target_slug
from guidedbp.pipeline.target_specs import parse_target
from guidedbp.targets import Text

from . import activation_reference as activation_ref
from . import zoo
from .helpers import assert_one_line_error, noise, run_cli
from .models import tiny_cnn

# keras-hub models are the suite's heavy part (make test-all); the rest runs in make test.
hub = pytest.mark.heavy

SIZE, LENGTH, STEPS = zoo.CLIP_SIZE, zoo.CLIP_LENGTH, 8
RTOL, ATOL = 1e-5, 1e-5  # ATOL: of the map's largest value (float32 sums differ ~1e-6)
# CLIP's pixel normalisation (its mean and standard deviation per channel, of 0-1 pixels).
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
CLIP_SCALE = [1 / (255 * std) for std in CLIP_STD]
CLIP_OFFSET = [-mean / std for mean, std in zip(CLIP_MEAN, CLIP_STD)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny CLIP, its tokenizer, its preset folder and .keras file, and two images."""
    keras_hub = pytest.importorskip("keras_hub")
    backbone, tokenizer = zoo.tiny_clip()
    folder = tmp_path_factory.mktemp("clip")
    preset = folder / "preset"
    backbone.save_to_preset(str(preset))
    tokenizer.save_to_preset(str(preset))
    backbone.save(str(folder / "clip.keras"))
    # The same with CLIP's image converter beside it (pixels 0-255 -> x * scale + offset),
    # as keras-hub's own preset folders hold it.
    shutil.copytree(preset, folder / "converted")
    keras_hub.layers.CLIPImageConverter(image_size=(SIZE, SIZE), scale=CLIP_SCALE,
                                        offset=CLIP_OFFSET).save_to_preset(
        str(folder / "converted"))
    images = np.random.default_rng(3).uniform(-1, 1, (2, SIZE, SIZE, 3)).astype(np.float32)
    # The backbone's own image embedding, as a model of its own.
    pixels = keras.Input((SIZE, SIZE, 3))
    vision = keras.Model(pixels, backbone.get_vision_embeddings(pixels))
    return {"backbone": backbone, "vision": vision, "tokenizer": tokenizer, "preset": preset,
            "keras": folder / "clip.keras", "images": images, "folder": folder,
            "converted": folder / "converted",
            "packer": keras_hub.models.CLIPPreprocessor(tokenizer, sequence_length=LENGTH)}


@pytest.fixture(scope="module")
def explainer(tiny):
    return Explainer(str(tiny["preset"]), ("vanilla", "guided", "integrated-gradients"),
                     steps=STEPS)


# -- the scores, written out from keras-hub's own calls --------------------------------------


def text_units(tiny, prompts) -> np.ndarray:
    """float64 ``(P, 8)``: each prompt's unit text embedding, by keras-hub alone."""
    packed = tiny["packer"]({"prompts": list(prompts), "images": None})
    raw = tiny["backbone"].get_text_embeddings(packed["token_ids"]).numpy().astype(np.float64)
    return raw / np.linalg.norm(raw, axis=1, keepdims=True)


def logit_scale(tiny) -> float:
    return float(np.exp(tiny["backbone"].clip_head.logit_scale.numpy()))


def cosine_score(vectors: np.ndarray):
    """``images-embedding -> (B,)``: the cosine with ``vectors[0]``, or with contrast
    (``vectors`` of several rows), the first row's log-softmax of the scaled cosines."""
    def score(embedding, scale):
        unit = embedding / tf.norm(embedding, axis=1, keepdims=True)
        cosines = tf.matmul(unit, tf.constant(vectors.T, tf.float32))
        if len(vectors) == 1:
            return cosines[:, 0]
        return tf.nn.log_softmax(scale * cosines, axis=1)[:, 0]
    return score


def tape_maps(vision, images, score, scale) -> tuple[np.ndarray, np.ndarray]:
    """``d score / d images`` through ``vision`` (images -> embedding), and the scores."""
    images = tf.convert_to_tensor(images)
    with tf.GradientTape() as tape:
        tape.watch(images)
        scores = score(vision(images), scale)
        total = tf.reduce_sum(scores)
    return tape.gradient(total, images).numpy(), scores.numpy()


def integrated(vision, images, score, scale) -> np.ndarray:
    """``x * mean_k grad(a_k x)``, ``a_k = (k + 1/2) / STEPS``: the black (zero) baseline's
    midpoint sum, as the engine documents it."""
    total = np.zeros(images.shape, np.float64)
    for k in range(STEPS):
        total += tape_maps(vision, images * np.float32((k + 0.5) / STEPS), score, scale)[0]
    return (images * total / STEPS).astype(np.float32)


@pytest.fixture(scope="module")
def guided_vision(tiny):
    """``images -> embedding`` of a copy of the backbone whose quick-GELUs send
    ``f'(x) * max(g, 0)`` back (the generalised guided rule); checked to leave no
    activation op plain."""
    import keras_hub
    from keras_hub.src.models.clip.clip_layers import quick_gelu

    twin = keras_hub.models.CLIPBackbone.from_config(tiny["backbone"].get_config())
    twin.set_weights(tiny["backbone"].get_weights())
    patched = 0
    for layer in twin.vision_encoder._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.Activation) and layer.activation is quick_gelu:
            layer.activation = activation_ref.guided_activation(quick_gelu)
            patched += 1
    assert patched == 2  # one per vision block
    images = keras.Input((SIZE, SIZE, 3))
    vision = keras.Model(images, twin.get_vision_embeddings(images))
    activation_ref._check_no_plain_activation(vision)
    return vision


# -- exact maps -----------------------------------------------------------------------------


@hub
@pytest.mark.parametrize("contrast", [(), ("a dog", "a zebra")], ids=["cosine", "contrast"])
def test_maps_equal_a_tape_of_the_same_score(tiny, explainer, guided_vision, contrast):
    target = Text("a cat", contrast=contrast)
    found = explainer.explain(tiny["images"], target)
    vectors = text_units(tiny, ("a cat", *contrast))
    score, scale = cosine_score(vectors), logit_scale(tiny)
    vision = tiny["vision"]
    vanilla, scores = tape_maps(vision, tiny["images"], score, scale)
    guided, _ = tape_maps(guided_vision, tiny["images"], score, scale)
    expected = {"vanilla": vanilla, "guided": guided,
                "integrated-gradients": integrated(vision, tiny["images"], score, scale)}
    assert not np.allclose(guided, vanilla, atol=1e-3)  # the rule changes the map
    for method, maps in expected.items():
        assert np.abs(maps).max() > 0, method
        np.testing.assert_allclose(found.by_method[method], maps, rtol=RTOL,
                                   atol=ATOL * np.abs(maps).max(), err_msg=method)
    np.testing.assert_allclose(found.logits, scores, rtol=1e-5, atol=1e-6)
    assert found.target.label == "text:a cat"


@hub
def test_the_cosine_is_numpys_of_the_two_towers(tiny, explainer):
    found = explainer.explain(tiny["images"], Text("a dog"))
    image = tiny["backbone"].get_vision_embeddings(tiny["images"]).numpy().astype(np.float64)
    text = tiny["backbone"].get_text_embeddings(
        tiny["packer"]({"prompts": ["a dog"], "images": None})["token_ids"]).numpy()[0]
    cosines = image @ text / (np.linalg.norm(image, axis=1) * np.linalg.norm(text))
    np.testing.assert_allclose(found.logits, cosines, rtol=1e-5, atol=1e-6)
    assert np.isnan(found.probabilities).all()  # a cosine is no probability


@hub
def test_contrast_gives_the_zero_shot_probability(tiny, explainer):
    found = explainer.explain(tiny["images"], Text("a cat", contrast="a dog"))
    image = tiny["backbone"].get_vision_embeddings(tiny["images"]).numpy().astype(np.float64)
    image /= np.linalg.norm(image, axis=1, keepdims=True)
    logits = logit_scale(tiny) * image @ text_units(tiny, ["a cat", "a dog"]).T
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert logit_scale(tiny) == pytest.approx(1 / 0.07, rel=1e-6)  # CLIP's initial scale
    np.testing.assert_allclose(found.probabilities, probabilities[:, 0], rtol=1e-5)
    np.testing.assert_allclose(found.logits, np.log(probabilities[:, 0]), rtol=1e-5)


@hub
def test_a_prompt_ensemble_is_the_renormalised_mean(tiny, explainer):
    prompts = ("a cat", "a dog", "the cat")
    found = explainer.explain(tiny["images"], Text(prompts))
    units = text_units(tiny, prompts)
    mean = units.mean(axis=0)
    image = tiny["backbone"].get_vision_embeddings(tiny["images"]).numpy().astype(np.float64)
    image /= np.linalg.norm(image, axis=1, keepdims=True)
    np.testing.assert_allclose(found.logits, image @ (mean / np.linalg.norm(mean)),
                               rtol=1e-5, atol=1e-6)
    # Not the raw mean's cosine's scale, nor any one prompt's: the ensemble matters.
    assert not np.allclose(found.logits, image @ mean, atol=1e-4)
    for unit in units:
        assert not np.allclose(found.logits, image @ unit, atol=1e-4)
    assert found.target.label == "text:a cat|a dog|the cat"


@hub
def test_every_activation_of_the_image_tower_is_guided(explainer):
    report = explainer.report.as_dict()
    assert report["plain_activations"] == {}
    assert sum(report["guided_activations"].values()) == 2  # the two quick-GELUs
    assert report["unreached_activations"] == {}


@hub
def test_gradcam_reads_the_vit_tokens_for_a_prompt(tiny):
    cams = Explainer(str(tiny["preset"]), ("gradcam", "layercam"))
    found = cams.explain(tiny["images"], Text("a cat"))
    for method in ("gradcam", "layercam"):
        maps = found.by_method[method]
        assert maps.shape == (2, SIZE, SIZE, 1)
        assert np.isfinite(maps).all() and np.ptp(maps[0]) > 0, method
        assert not np.allclose(maps[0], maps[1])
    # The tokens' grid: the last block's input (its output reaches the embedding through
    # the class token alone).
    assert cams.report.cam_layers["gradcam"].endswith("encoder_block_0")


@hub
def test_several_prompts_share_one_pass_and_keep_their_order(tiny, explainer):
    many = explainer.explain_targets(tiny["images"], [Text("a cat"), Text("a dog")])
    single = [explainer.explain(tiny["images"], Text(p)) for p in ("a cat", "a dog")]
    for joint, alone in zip(many, single):
        assert joint.target.label == alone.target.label
        np.testing.assert_allclose(joint.by_method["guided"], alone.by_method["guided"],
                                   rtol=1e-5, atol=1e-7)


@hub
def test_an_in_memory_backbone_is_explained_and_untouched(tiny):
    backbone = tiny["backbone"]
    before = [weight.copy() for weight in backbone.get_weights()]
    config = backbone.get_config()
    with_tokenizer = Explainer(backbone, "vanilla", tokenizer=tiny["tokenizer"])
    found = with_tokenizer.explain(tiny["images"], Text("a cat"))
    assert with_tokenizer.model is not backbone and len(with_tokenizer.model.inputs) == 1
    assert found.caveats == ((), ())  # fed in its own input space, as any keras.Model
    for old, new in zip(before, backbone.get_weights()):
        np.testing.assert_array_equal(old, new)
    assert backbone.get_config() == config
    with pytest.raises(ArgumentError, match="the model has no tokenizer: .*tokenizer=PRESET_DIR"):
        Explainer(backbone, "vanilla").explain(tiny["images"], Text("a cat"))


@hub
def test_a_keras_file_loads_its_image_tower_and_takes_a_tokenizer(tiny):
    loaded = load_model(str(tiny["keras"]))
    assert loaded.input_shape == (SIZE, SIZE, 3) and loaded.text is not None
    with pytest.raises(ArgumentError, match="the model has no tokenizer"):
        loaded.text.check(["a cat"])
    told = load_model(str(tiny["keras"]), tokenizer=str(tiny["preset"]))
    np.testing.assert_allclose(told.text.vector(["a cat"]), text_units(tiny, ["a cat"])[0],
                               rtol=1e-5, atol=1e-6)


@hub
def test_a_preset_with_an_image_converter_takes_raw_pixels(tiny, tmp_path):
    from PIL import Image

    pixels = np.random.default_rng(5).integers(0, 256, (2, SIZE, SIZE, 3)).astype(np.float32)
    explainer = Explainer(str(tiny["converted"]), ("vanilla", "guided"))
    found = explainer.explain(pixels, Text("a cat"))
    report = explainer.report.as_dict()  # the rescaling before the tower hides no activation
    assert report["plain_activations"] == {} and sum(report["guided_activations"].values()) == 2
    # The converter's own rescaling, written out: CLIP's mean and deviation per channel.
    normalised = (pixels / 255 - np.float32(CLIP_MEAN)) / np.float32(CLIP_STD)
    score = cosine_score(text_units(tiny, ["a cat"]))
    rescale = np.float32(CLIP_SCALE)
    # d/dpixels of f(pixels * scale + offset) is scale * f'(...): the tape at the normalised
    # pixels, times the scale.
    maps, scores = tape_maps(tiny["vision"], normalised.astype(np.float32), score, None)
    np.testing.assert_allclose(found.logits, scores, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(found.by_method["vanilla"], maps * rescale, rtol=1e-4,
                               atol=1e-5 * np.abs(maps * rescale).max())
    assert found.caveats == ((), ())  # it rescales itself: no no-rescaling caveat
    # The command line feeds the same raw pixels: the manifest's score is the same cosine.
    Image.fromarray(pixels[0].astype(np.uint8)).save(tmp_path / "a.png")
    run_cli("explain", tiny["converted"], tmp_path / "a.png", "--target", "text:a cat",
            "--method", "vanilla", "-o", tmp_path / "out", code=0)
    record = json.loads((tmp_path / "out" / "manifest.jsonl").read_text().splitlines()[0])
    assert record["targets"][0]["value"] == pytest.approx(float(scores[0]), abs=2e-5)
    assert record["targets"][0]["caveats"] == []


# -- hostile --------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, fragment", [
    ({"prompt": ""}, "Text prompt '' is empty"),
    ({"prompt": " \t\n"}, "is empty"),
    ({"prompt": 3}, "must be a text or a sequence of texts, got int"),
    ({"prompt": b"a cat"}, "got bytes"),
    ({"prompt": []}, "Text prompt is an empty sequence"),
    ({"prompt": ["a cat", None]}, "holds a NoneType, not a text"),
    ({"prompt": "a cat", "contrast": ["a dog", "  "]}, "Text contrast '  ' is empty"),
    ({"prompt": "a cat", "contrast": ["a dog", "a cat"]}, "repeats the prompt 'a cat'"),
    ({"prompt": "a cat", "contrast": 7}, "Text contrast must be prompts"),
])
def test_bad_prompts_are_refused_in_one_line(kwargs, fragment):
    with pytest.raises(ArgumentError) as error:
        Text(**kwargs)
    assert fragment in str(error.value) and "\n" not in str(error.value)


@hub
def test_a_huge_prompt_is_refused_at_once(tiny, explainer):
    started = time.perf_counter()
    with pytest.raises(ArgumentError, match=r"is 100,000 characters long: the model's text "
                                            r"tower reads 12 tokens at most"):
        explainer.explain(tiny["images"], Text("a cat " * 16_666 + "a cat"[:4]))
    assert time.perf_counter() - started < 2
    # 11 words: more than 12 tokens with its start and end: refused, not cut.
    with pytest.raises(ArgumentError, match="longer than the 12 tokens the model's text "
                                            "tower reads .*: shorten it"):
        explainer.explain(tiny["images"], Text("a cat " * 6))
    # 10 tokens with the start and end: read whole.
    assert explainer.explain(tiny["images"][:1], Text("a cat " * 4)).logits.shape == (1,)


def test_a_text_target_on_a_classifier_is_refused():
    classifier = Explainer(tiny_cnn(0), "vanilla")
    with pytest.raises(ArgumentError, match=r"^text:a cat: .* has no text tower: a Text "
                                            "target needs a two-tower model"):
        classifier.explain(np.zeros((1, 16, 16, 3), np.float32), Text("a cat"))
    # A huge prompt is named, not copied whole, in the message.
    with pytest.raises(ArgumentError, match=r"^text:x{40}\.\.\.: .* has no text tower") \
            as error:
        classifier.explain(np.zeros((1, 16, 16, 3), np.float32), Text("x" * 100_000))
    assert len(str(error.value)) < 200
    with pytest.raises(ArgumentError, match="tokenizer= applies to a two-tower model"):
        Explainer(tiny_cnn(0), "vanilla", tokenizer=lambda prompts: prompts)


def test_the_engine_takes_embedded_prompts_only():
    model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(3)])
    images = np.random.default_rng(0).normal(size=(2, 4, 4, 1)).astype(np.float32)
    bare = engine.Explainer(model, "vanilla")
    with pytest.raises(ArgumentError, match="text:a cat is a prompt: guidedbp.Explainer embeds"):
        bare.explain(images, Text("a cat"))
    # Embedded: a cosine with the prompt's vector, and its zero-shot log-probability.
    vectors = np.array([[1.0, 2.0, 2.0], [0.0, 3.0, -4.0]])
    cosine = bare.explain(images, Text("a cat").embedded(vectors[:1])).logits
    outputs = model(images).numpy().astype(np.float64)
    units = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosines = outputs @ units.T / np.linalg.norm(outputs, axis=1, keepdims=True)
    np.testing.assert_allclose(cosine, cosines[:, 0], rtol=1e-5)
    zero_shot = bare.explain(images, Text("a cat", contrast="a dog").embedded(vectors, 2.0))
    logits = 2 * cosines
    log_p = logits[:, 0] - np.log(np.exp(logits).sum(axis=1))
    np.testing.assert_allclose(zero_shot.logits, log_p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(zero_shot.probabilities, np.exp(log_p), rtol=1e-5)
    with pytest.raises(ArgumentError, match=r"Text embeddings must be \(2, size\)"):
        Text("a cat", contrast="a dog").embedded(vectors[:1])


# -- the command line -----------------------------------------------------------------------


def test_text_specs_parse_and_name_their_files():
    spec = parse_target("text:  A photo of a cat ")
    assert (spec.kind, spec.value, spec.text) == ("text", "A photo of a cat",
                                                  "text:A photo of a cat")
    assert spec.as_target().label == "text:A photo of a cat"
    assert target_slug("text", spec.value) == "text-a-photo-of-a-cat"
    long = target_slug("text", "x" * 100)  # cut to 48 characters, then the prompt's digest
    assert long.startswith("text-" + "x" * 48 + "-") and len(long) == 5 + 48 + 9
    assert target_slug("text", "猫") != target_slug("text", "犬")  # no letters: a digest


@pytest.mark.parametrize("spec", ["text:", "text:   "])
def test_an_empty_cli_prompt_is_a_usage_error(tmp_path, spec):
    image = tmp_path / "a.png"
    result = run_cli("explain", "demo", image, "--target", spec, "-o", tmp_path / "out")
    assert result.exit_code == 2 and "names no text: expected text:PROMPT" in result.stderr
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize("prompt, shown", [("a cat", "text:a cat"),
                                           ("x" * 100_000, "text:" + "x" * 40 + "...")],
                         ids=["short", "huge"])
def test_text_on_a_classifier_is_refused_before_any_input(tmp_path, prompt, shown):
    # Not an image: decoding it would fail the input (exit 1), not the target (exit 2).
    (tmp_path / "a.png").write_bytes(b"not a png")
    result = run_cli("explain", "demo", tmp_path / "a.png", "--target", f"text:{prompt}",
                     "-o", tmp_path / "out")
    line = assert_one_line_error(result, f"--target {shown} needs a two-tower model",
                                 "this model has no text tower")
    assert len(line) < 300
    assert not (tmp_path / "out").exists()


@hub
def test_the_cli_explains_each_prompt_of_a_preset(tiny, tmp_path):
    from PIL import Image

    pixels = np.random.default_rng(4).integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "cat.png")
    out = tmp_path / "out"
    run_cli("explain", tiny["preset"], tmp_path / "cat.png", "--target", "text:a cat",
            "--target", "text:A dog", "--method", "guided", "--render", "color", "-o", out,
            code=0)
    written = sorted(path.name for path in out.glob("*.png"))
    assert written == ["cat.png.text-a-cat.guided.color.png",
                       "cat.png.text-a-dog.guided.color.png"]
    record = json.loads((out / "manifest.jsonl").read_text().splitlines()[0])
    # The model's size already, fed as raw 0-255 pixels (no preprocessing chosen).
    image = tiny["backbone"].get_vision_embeddings(pixels[None].astype(np.float32)).numpy()[
        0].astype(np.float64)
    for entry, prompt in zip(record["targets"], ("a cat", "A dog")):
        assert entry["target"]["kind"] == "text" and entry["class"] is None
        cosine = image @ text_units(tiny, [prompt])[0] / np.linalg.norm(image)
        assert entry["value"] == pytest.approx(cosine, abs=2e-5)
        assert entry["description"] == f"text:{prompt} = {cosine:.3g}"


@hub
def test_the_cli_refuses_a_prompt_too_long_and_a_model_with_no_tokenizer(tiny, tmp_path):
    from PIL import Image

    Image.fromarray(noise(32, 32)).save(tmp_path / "a.png")
    result = run_cli("explain", tiny["preset"], tmp_path / "a.png", "--target",
                     "text:" + "a cat " * 6, "-o", tmp_path / "out")
    assert_one_line_error(result, "longer than the 12 tokens")
    started = time.perf_counter()
    result = run_cli("explain", tiny["preset"], tmp_path / "a.png", "--target",
                     "text:" + "a cat " * 20_000, "-o", tmp_path / "out")
    line = assert_one_line_error(result,
                                 "--target text:a cat a cat a cat a cat a cat a cat a ca...",
                                 "is 119,999 characters long: the model's text tower reads 12 "
                                 "tokens at most")
    assert len(line) < 300 and time.perf_counter() - started < 30
    result = run_cli("explain", tiny["keras"], tmp_path / "a.png", "--target", "text:a cat",
                     "-o", tmp_path / "out")
    assert_one_line_error(result, "the model has no tokenizer")
    assert not (tmp_path / "out").exists()


@hub
def test_inspect_shows_the_text_tower(tiny):
    result = run_cli("inspect", tiny["preset"], code=0)
    assert ("text tower  prompts of 12 tokens at most (tokenizer: the preset's tokenizer.json), "
            "logit scale 14.3; explain one with --target text:PROMPT") in result.stdout


# -- SigLIP ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def siglip():
    """A tiny SigLIP (gelu) with a word-level SentencePiece tokenizer trained here, its
    logit scale set to 7 and its bias to 3."""
    keras_hub = pytest.importorskip("keras_hub")
    sentencepiece = pytest.importorskip("sentencepiece")
    import io

    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["a photo of a cat", "a photo of a dog", "the quick brown fox"]),
        model_writer=proto, vocab_size=12, model_type="WORD", pad_id=0, unk_id=1, bos_id=-1,
        eos_id=2, pad_piece="</s>", eos_piece="<eos>", unk_piece="<unk>", minloglevel=2)
    tokenizer = keras_hub.models.SigLIPTokenizer(proto=proto.getvalue())
    keras.utils.set_random_seed(7)
    backbone = keras_hub.models.SigLIPBackbone(
        keras_hub.models.SigLIPVisionEncoder(patch_size=8, hidden_dim=16, num_layers=2,
                                             num_heads=2, intermediate_dim=32,
                                             image_shape=(SIZE, SIZE, 3)),
        keras_hub.models.SigLIPTextEncoder(vocabulary_size=12, embedding_dim=16, hidden_dim=16,
                                           num_layers=2, num_heads=2, intermediate_dim=32,
                                           max_sequence_length=8))
    backbone.siglip_head.logit_scale.assign(np.log(7.0))
    backbone.siglip_head.logit_bias.assign(3.0)
    packer = keras_hub.models.SigLIPPreprocessor(tokenizer, sequence_length=8)
    return backbone, tokenizer, packer


@hub
def test_siglip_scores_with_its_own_scale_and_guides_its_gelus(siglip):
    backbone, tokenizer, packer = siglip
    images = np.random.default_rng(8).uniform(-1, 1, (2, SIZE, SIZE, 3)).astype(np.float32)
    explainer = Explainer(backbone, "guided", tokenizer=tokenizer)
    found = explainer.explain(images, Text("a photo of a cat", contrast="a photo of a dog"))
    texts = backbone.get_text_embeddings(packer(
        {"prompts": ["a photo of a cat", "a photo of a dog"], "images": None})["token_ids"])
    texts = texts.numpy().astype(np.float64)
    texts /= np.linalg.norm(texts, axis=1, keepdims=True)
    image = backbone.get_vision_embeddings(images).numpy().astype(np.float64)
    image /= np.linalg.norm(image, axis=1, keepdims=True)
    logits = 7.0 * image @ texts.T  # exp(logit_scale); a bias changes no softmax
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(found.probabilities, probabilities[:, 0], rtol=1e-5)
    report = explainer.report.as_dict()
    assert report["plain_activations"] == {}
    assert report["guided_activations"] == {"gelu": 3}  # two blocks, the pooling head's MLP


def test_the_examples_of_inspects_words_hold():
    import doctest

    from guidedbp.cli import inspect

    assert doctest.testmod(inspect).failed == 0


@hub
def test_a_class_of_the_embedding_is_refused(tiny, explainer, tmp_path):
    # The image tower's 8 values are no classes: a top class of them would mean nothing.
    for call in (lambda: explainer.explain(tiny["images"]),
                 lambda: explainer.explain(tiny["images"], 3),
                 lambda: explainer.explain_top_k(tiny["images"], 2),
                 lambda: explainer.explain_targets(tiny["images"], [Text("a cat"), 1])):
        with pytest.raises(ArgumentError, match="two-tower model .*: its image tower gives an "
                                                "embedding, not classes: explain Text"):
            call()
    from PIL import Image

    Image.fromarray(noise(32, 32)).save(tmp_path / "a.png")
    for extra in ((), ("--top-k", "2"), ("--target", "class:1")):
        result = run_cli("explain", tiny["preset"], tmp_path / "a.png", *extra,
                         "-o", tmp_path / "out")
        assert_one_line_error(result, "gives an embedding, not classes: name a target with "
                                      "--target text:PROMPT")
    assert not (tmp_path / "out").exists()


@hub
def test_a_broken_preset_folder_is_one_line(tiny, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny["preset"], broken)
    (broken / "config.json").write_text('{"class_name": "NoSuchBackbone", "config": {}}')
    result = run_cli("inspect", broken)
    assert_one_line_error(result, f"cannot load the keras-hub preset '{broken}'")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "config.json").write_text("{}")
    result = run_cli("inspect", tmp_path / "plain")
    assert_one_line_error(result, "is a directory but not a SavedModel",
                          "nor a keras-hub preset")
