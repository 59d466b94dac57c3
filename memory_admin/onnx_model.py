"""Moved to `memory_admin.embedding.onnx_recipe` (the onnx engine's frozen build recipe). This module only
re-exports its names for code written against the old path; nothing in the project imports it."""

from memory_admin.embedding.onnx_recipe import (  # noqa: F401
    BUILD_STAGES,
    DISABLED_OPTIMIZERS,
    GRAPH_OPTIMIZATION,
    MANIFEST_FILE,
    MAX_TOKENS,
    MODEL_FILE,
    RECIPE,
    SENTENCE,
    TOKENS,
    build,
    cache_dir,
    ensure_model,
    read_manifest,
    sha256_file,
    source_dir,
    verified_model,
)
