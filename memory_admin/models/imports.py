"""What an import of an export (services/imports.py) has already replayed for a memory user."""

from __future__ import annotations

from django.db import models

from memory_admin.models.tenancy import MemoryUser


class ImportedItem(models.Model):
    """One item of an export replayed into this memory user: a fact (by its exported id), a notebook
    revision, a skill revision, an episode or a message (by a digest of what identifies it, never its
    text or path). A second import of the same export finds its items here and writes nothing again.
    `target` is what the item became here (a fact id, a version), "" when the write path refused it."""

    memory_user = models.ForeignKey(MemoryUser, on_delete=models.CASCADE, related_name="+")
    source = models.CharField(max_length=100)
    target = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["memory_user", "source"], name="imported_item_once")]

    def __str__(self) -> str:
        return f"{self.source} -> {self.target or '(refused)'}"
