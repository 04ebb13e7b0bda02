"""Reading images from disk into numpy arrays (numpy and Pillow only)."""
