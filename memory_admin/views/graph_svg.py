"""The small graph around an entity, laid out on the server for an inline SVG (no JavaScript, no CDN):
the entity in the middle, the entities one relation away on a ring around it, those further out on a
wider ring. The template draws it; every name is escaped there like any other text."""

from __future__ import annotations

import math
from dataclasses import dataclass

from memory_admin.selectors.entities import EntityGraph

WIDTH, HEIGHT = 640, 420
_RINGS = (0, 135, 195)
MAX_NODES = 36
_LABEL = 22

# Node fill per entity type (SVG presentation attributes, so the page's CSP needs no inline style).
FILL = {
    "person": "#2f6fb3",
    "company": "#8a4fb3",
    "project": "#2e8b57",
    "place": "#b36b00",
    "tool": "#5f6b7a",
    "other": "#7a7a7a",
}


@dataclass(frozen=True)
class Node:
    pk: str
    x: float
    y: float
    label: str
    type: str
    fill: str
    root: bool

    @property
    def label_y(self) -> float:
        return round(self.y - (20 if self.root else 14), 1)


@dataclass(frozen=True)
class Edge:
    x1: float
    y1: float
    x2: float
    y2: float
    label: str
    mx: float
    my: float


def _short(text: str) -> str:
    return text if len(text) <= _LABEL else text[: _LABEL - 1] + "…"


def _levels(graph: EntityGraph) -> dict:
    """Relations away from the root, by breadth-first walk over the graph's edges."""
    neighbours: dict = {}
    for r in graph.edges:
        neighbours.setdefault(r.subject_id, set()).add(r.object_id)
        neighbours.setdefault(r.object_id, set()).add(r.subject_id)
    level, frontier = {graph.root.pk: 0}, [graph.root.pk]
    while frontier:
        step = []
        for pk in frontier:
            for other in sorted(neighbours.get(pk, ()), key=str):
                if other not in level:
                    level[other] = level[pk] + 1
                    step.append(other)
        frontier = step
    return level


def layout(graph: EntityGraph) -> dict:
    """Nodes and edges with coordinates; at most MAX_NODES nodes (the nearest ones)."""
    level = _levels(graph)
    by_pk = {e.pk: e for e in graph.nodes}
    by_pk.setdefault(graph.root.pk, graph.root)
    ordered = sorted((pk for pk in level if pk in by_pk), key=lambda pk: (level[pk], by_pk[pk].name.casefold()))
    kept = ordered[:MAX_NODES]
    rings: dict[int, list] = {}
    for pk in kept:
        rings.setdefault(min(level[pk], 2), []).append(pk)
    cx, cy = WIDTH / 2, HEIGHT / 2
    points = {}
    for ring, members in rings.items():
        for i, pk in enumerate(members):
            angle = 2 * math.pi * i / max(1, len(members)) - math.pi / 2 + (0.35 if ring == 2 else 0)
            radius = _RINGS[ring]
            points[pk] = (round(cx + radius * math.cos(angle), 1), round(cy + radius * 0.82 * math.sin(angle), 1))
    nodes = [
        Node(
            str(pk),
            *points[pk],
            _short(by_pk[pk].name),
            by_pk[pk].type,
            FILL.get(by_pk[pk].type, FILL["other"]),
            pk == graph.root.pk,
        )
        for pk in kept
    ]
    edges = []
    for r in graph.edges:
        if r.subject_id in points and r.object_id in points:
            (x1, y1), (x2, y2) = points[r.subject_id], points[r.object_id]
            edges.append(
                Edge(x1, y1, x2, y2, r.type.replace("_", " "), round((x1 + x2) / 2, 1), round((y1 + y2) / 2, 1))
            )
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "nodes": nodes,
        "edges": edges,
        "hidden": max(0, len(ordered) - len(kept)),
        "types": sorted({n.type for n in nodes}),
        "fills": FILL,
    }
