"""Build (or check) the local embedding model in the data directory, offline, from the installed wheel."""

from __future__ import annotations

import time

from django.conf import settings
from django.core.management.base import BaseCommand

from memory_admin import onnx_model, static_model


class Command(BaseCommand):
    help = (
        "Export all-MiniLM-L6-v2 from the installed wheel to int8 ONNX (or, for EMBEDDER=static, distil its "
        "static token table) in .data/embedder/ (no network)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--force", action="store_true", help="rebuild even if the cached model verifies")
        parser.add_argument("--engine", default="", help="onnx or static (default: settings.EMBEDDER)")

    def handle(self, *args, force: bool, engine: str, **options):
        module = static_model if (engine or settings.EMBEDDER) == "static" else onnx_model
        verified, ensure = (
            (static_model.verified_table, static_model.ensure_table)
            if module is static_model
            else (onnx_model.verified_model, onnx_model.ensure_model)
        )
        directory = onnx_model.cache_dir()
        started = time.monotonic()
        if force or not verified(directory):
            what = "a static token table" if module is static_model else "int8"
            self.stdout.write(f"building all-MiniLM-L6-v2 {what} in {directory} (first start only) ...")
            self.stdout.flush()
        progress = self._progress if module is onnx_model else None
        if force:
            path = module.build(directory, progress) if progress else module.build(directory)
            state = "built"
        else:
            state = "verified" if verified(directory) else "built"
            path = ensure(directory, progress) if progress else ensure(directory)
        manifest = module.read_manifest(directory)
        self.stdout.write(
            f"{state}: {path} ({manifest['bytes']:,} bytes, sha256 {manifest['sha256'][:16]}…) "
            f"in {time.monotonic() - started:.1f} s"
        )

    def _progress(self, stage: str) -> None:
        self.stdout.write(f"  {stage} ...")
        self.stdout.flush()
