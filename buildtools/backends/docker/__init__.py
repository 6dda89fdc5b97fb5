"""The docker backend: cibuildwheel in a builder image, and the steps run inside it."""
