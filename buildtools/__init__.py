"""torch-buildtools: plan, build, repair, check and publish PyTorch extension wheels."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
