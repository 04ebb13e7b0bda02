"""The engine room: TensorFlow gradients, nothing about files or images on disk."""
