"""Images without Docker: base root filesystems per ``FROM`` family (``bases``), layers in a
content-addressed store (``store``), and sandboxes over an overlay of them (``sandbox``,
``persistent``). The Dockerfile side lives in ``envlab.sandbox.tasks.image_build``."""

from envlab.sandbox.image.bases import ensure_base, recipe_for, register_base
from envlab.sandbox.image.store import Image, ImageConfig, images_root, prune_layers

__all__ = [
    "Image",
    "ImageConfig",
    "ensure_base",
    "images_root",
    "prune_layers",
    "recipe_for",
    "register_base",
]
