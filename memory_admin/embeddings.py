"""Moved to the package `memory_admin.embedding` (one engine per module, one query cache). This module
only re-exports its names for code written against the old path; nothing in the project imports it."""

from memory_admin.embedding import *  # noqa: F403
from memory_admin.embedding import __all__ as _moved
from memory_admin.embedding.onnx import OnnxEmbedder
from memory_admin.embedding.openai import OpenAIEmbedder

__all__ = [*_moved, "OnnxEmbedder", "OpenAIEmbedder"]
