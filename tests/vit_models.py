"""Tiny vision transformers with fixed random weights, for the token-layer CAM tests.

Both take 32x32x3 images, cut into 8x8 patches: 16 patch tokens (a 4x4 grid) after one
class token, 17 tokens of 16 channels in all, and end in a final LayerNormalization
whose class token feeds the 3-class head. Nothing is downloaded.
"""

from __future__ import annotations

import keras

IMAGE = (32, 32, 3)
PATCH = 8
WIDTH = 16
CLASSES = 3


def keras_hub_vit(seed: int = 0, pooling: str = "token") -> keras.Model:
    """keras-hub's ``ViTImageClassifier`` on a 2-block ``ViTBackbone``, from its config.

    Its blocks are ``transformer_block_1`` and ``transformer_block_2`` inside the
    backbone's ``vit_encoder`` layer, which ends in the final LayerNormalization ``ln``.
    The head reads the class token (``pooling="token"``) or the mean of all the tokens
    (``"gap"``).
    """
    import keras_hub

    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.ViTBackbone(
        image_shape=IMAGE, patch_size=PATCH, num_layers=2, num_heads=2, hidden_dim=WIDTH,
        mlp_dim=2 * WIDTH,
    )
    return keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=CLASSES,
                                               preprocessor=None, pooling=pooling)


@keras.saving.register_keras_serializable(package="guidedbp_tests")
class ClassToken(keras.layers.Layer):
    """Prepends a learned class token to ``(N, T, C)`` tokens."""

    def build(self, input_shape):
        self.token = self.add_weight(shape=(1, 1, input_shape[-1]), name="token",
                                     initializer="random_normal")

    def call(self, tokens):
        batch = keras.ops.shape(tokens)[0]
        return keras.ops.concatenate(
            [keras.ops.broadcast_to(self.token, (batch, 1, tokens.shape[-1])), tokens], axis=1)


@keras.saving.register_keras_serializable(package="guidedbp_tests")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned embedding to each token position."""

    def build(self, input_shape):
        self.embedding = self.add_weight(shape=tuple(input_shape[1:]), name="embedding",
                                         initializer="random_normal")

    def call(self, tokens):
        return tokens + self.embedding


def plain_vit(seed: int = 0) -> keras.Model:
    """A Keras ViT of our own: Conv2D patch embedding ``patches`` (stride 8), reshape to
    tokens, class token, position embedding, 2 pre-norm blocks whose outputs are the
    ``Add`` layers ``block_1`` and ``block_2`` (LayerNormalization, MultiHeadAttention,
    residual, LayerNormalization, Dense(gelu) MLP, residual), final LayerNormalization
    ``final_norm``, class token -> Dense head ``head``."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input(IMAGE)
    patches = keras.layers.Conv2D(WIDTH, PATCH, strides=PATCH, name="patches")(inputs)
    grid = IMAGE[0] // PATCH
    tokens = keras.layers.Reshape((grid * grid, WIDTH), name="tokens")(patches)
    tokens = PositionEmbedding(name="position")(ClassToken(name="class_token")(tokens))
    for block in (1, 2):
        normed = keras.layers.LayerNormalization(name=f"block_{block}_norm_1")(tokens)
        attended = keras.layers.MultiHeadAttention(2, WIDTH // 2, name=f"block_{block}_mha")(
            normed, normed)
        tokens = keras.layers.Add(name=f"block_{block}_attention")([tokens, attended])
        normed = keras.layers.LayerNormalization(name=f"block_{block}_norm_2")(tokens)
        hidden = keras.layers.Dense(2 * WIDTH, activation="gelu",
                                    name=f"block_{block}_mlp_1")(normed)
        mlp = keras.layers.Dense(WIDTH, name=f"block_{block}_mlp_2")(hidden)
        tokens = keras.layers.Add(name=f"block_{block}")([tokens, mlp])
    normed = keras.layers.LayerNormalization(name="final_norm")(tokens)
    first = keras.layers.Cropping1D((0, grid * grid), name="take_class_token")(normed)
    class_token = keras.layers.Flatten()(first)
    return keras.Model(inputs, keras.layers.Dense(CLASSES, name="head")(class_token),
                       name="plain_vit")
