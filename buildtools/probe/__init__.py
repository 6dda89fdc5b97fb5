"""What a Python environment has installed, as its own interpreter reports it."""
