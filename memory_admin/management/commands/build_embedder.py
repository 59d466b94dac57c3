"""Build (or check) the int8 ONNX embedding model in the data directory, offline, from the installed wheel."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand

from memory_admin import onnx_model


class Command(BaseCommand):
    help = "Export all-MiniLM-L6-v2 from the installed wheel to int8 ONNX in .data/embedder/ (no network)."

    def add_arguments(self, parser):
        parser.add_argument("--force", action="store_true", help="rebuild even if the cached model verifies")

    def handle(self, *args, force: bool, **options):
        directory = onnx_model.cache_dir()
        started = time.monotonic()
        if force:
            path = onnx_model.build(directory)
            state = "built"
        else:
            state = "verified" if onnx_model.verified_model(directory) else "built"
            path = onnx_model.ensure_model(directory)
        manifest = onnx_model.read_manifest(directory)
        self.stdout.write(
            f"{state}: {path} ({manifest['bytes']:,} bytes, sha256 {manifest['sha256'][:16]}…) "
            f"in {time.monotonic() - started:.1f} s"
        )
