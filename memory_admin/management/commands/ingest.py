"""Ingest a file, a page, a site or a folder into a tenant's trained knowledge, here and now, with a
progress bar (the API does the same on the worker).

    manage.py ingest acme --site https://docs.example.com/ --depth 2 --pages 100
    manage.py ingest acme --file handbook.pdf --user alice
    manage.py ingest acme --folder /srv/wiki --refresh-minutes 1440
    manage.py ingest acme --source 3f2a...   # crawl an existing source again

A folder given here needs no KNOWLEDGE_FOLDER_ROOTS entry: whoever runs manage.py is the operator.
URLs obey the same rules as the API's (no private addresses unless KNOWLEDGE_ALLOWED_HOSTS allows them).
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from memory_admin.errors import DomainError
from memory_admin.knowledge.crawl import crawl_step
from memory_admin.knowledge.entities import chunks_draw
from memory_admin.knowledge.parsing import doc_type
from memory_admin.knowledge.selectors import source_detail
from memory_admin.knowledge.services import source_crawl_now, source_create
from memory_admin.models import KnowledgeSource, Tenant
from memory_admin.selectors.access import Principal, memory_user_for


class Command(BaseCommand):
    help = "Ingest a file, URL, site or folder into a tenant's trained knowledge, with a progress bar."

    def add_arguments(self, parser) -> None:
        parser.add_argument("tenant", help="tenant slug")
        what = parser.add_mutually_exclusive_group(required=True)
        what.add_argument("--file", type=Path, help="a Markdown, text, HTML or PDF file")
        what.add_argument("--url", help="one page")
        what.add_argument("--site", help="a same-host crawl from this page")
        what.add_argument("--folder", type=Path, help="a local folder")
        what.add_argument("--source", help="crawl an existing source (its id) again")
        parser.add_argument("--user", default="", help="a memory user's own source (default: the tenant's)")
        parser.add_argument("--name", default="")
        parser.add_argument("--depth", type=int, default=2)
        parser.add_argument("--pages", type=int, default=50)
        parser.add_argument("--refresh-minutes", type=int, default=None)
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args, tenant: str, **options) -> None:
        owner = Tenant.objects.filter(slug=tenant).first()
        if owner is None:
            raise CommandError(f"No tenant {tenant!r}.")
        principal = Principal.system(owner.pk, actor="system:ingest")
        try:
            source = self._source(principal, options)
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.detail}") from exc
        with tqdm(
            total=max(1, source.pages_total), unit="page", disable=options["no_progress"], file=self.stderr
        ) as bar:
            while crawl_step(source.pk):
                source.refresh_from_db(fields=["pages_done", "pages_total"])
                bar.total = max(1, source.pages_total)
                bar.n = source.pages_done
                bar.refresh()
            source.refresh_from_db()
            bar.total = bar.n = max(1, source.pages_done)
            bar.refresh()
        drawn, more = chunks_draw(source.pk)  # the new chunks' entities, here too (the worker's task does it)
        while more:
            done, more = chunks_draw(source.pk)
            drawn += done
        detail = source_detail(principal, source.pk)
        summary = {k: detail[k] for k in ("id", "kind", "name", "state", "pages_done", "documents", "chunks")}
        summary["chunks_drawn"] = drawn
        summary["errors"] = {d["locator"]: d["error"] for d in detail["document_list"] if d["error"]}
        if detail["last_error"]:
            summary["last_error"] = detail["last_error"]
        self.stdout.write(json.dumps(summary, default=str, indent=1))

    def _source(self, principal: Principal, options: dict) -> KnowledgeSource:
        if options["source"]:
            return source_crawl_now(principal, options["source"], dispatch=False)
        user = memory_user_for(principal, options["user"], create=True) if options["user"] else None
        common = {
            "memory_user": user,
            "refresh_minutes": options["refresh_minutes"],
            "max_depth": options["depth"],
            "max_pages": options["pages"],
            "dispatch": False,
        }
        if options["file"]:
            path: Path = options["file"]
            if not path.is_file():
                raise CommandError(f"No file at {path}.")
            return source_create(
                principal,
                kind="file",
                name=options["name"] or path.name,
                location=path.name,
                upload=path.read_bytes(),
                upload_type="" if doc_type(name=path.name) else "text/plain",
                **common,
            )
        if options["folder"]:
            folder = str(options["folder"])
            return source_create(
                principal,
                kind="folder",
                name=options["name"] or folder,
                location=folder,
                folder_roots=(folder,),
                **common,
            )
        kind = "url" if options["url"] else "site"
        location = options["url"] or options["site"]
        return source_create(principal, kind=kind, name=options["name"] or location, location=location, **common)
