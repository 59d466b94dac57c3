"""Build (or check) the local embedding model in the data directory, offline, from the installed wheel."""

from __future__ import annotations

import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from memory_admin.embedding import onnx_recipe
from memory_admin.embedding.engine import UnknownEngine, engine_class


class Command(BaseCommand):
    help = "Export all-MiniLM-L6-v2 from the installed wheel to int8 ONNX in .data/embedder/ (no network)."

    def add_arguments(self, parser):
        parser.add_argument("--force", action="store_true", help="rebuild even if the cached model verifies")
        parser.add_argument("--engine", default="", help="onnx (default: settings.EMBEDDER, when it is onnx)")

    def handle(self, *args, force: bool, engine: str, **options):
        engine = engine or settings.EMBEDDER
        if engine != "onnx":
            try:
                engine_class(engine)
            except UnknownEngine as exc:  # a removed engine (static) or a misspelt one: what to do instead
                raise CommandError(str(exc)) from exc
            raise CommandError(f"EMBEDDER={engine} has no model to build here: only onnx's is")
        directory = onnx_recipe.cache_dir()
        started = time.monotonic()
        if force or not onnx_recipe.verified_model(directory):
            self.stdout.write(f"building all-MiniLM-L6-v2 int8 in {directory} (first start only) ...")
            self.stdout.flush()
        if force:
            path = onnx_recipe.build(directory, self._progress)
            state = "built"
        else:
            state = "verified" if onnx_recipe.verified_model(directory) else "built"
            path = onnx_recipe.ensure_model(directory, self._progress)
        manifest = onnx_recipe.read_manifest(directory)
        self.stdout.write(
            f"{state}: {path} ({manifest['bytes']:,} bytes, sha256 {manifest['sha256'][:16]}…) "
            f"in {time.monotonic() - started:.1f} s"
        )

    def _progress(self, stage: str) -> None:
        self.stdout.write(f"  {stage} ...")
        self.stdout.flush()
