"""Charts: geometry computed here, drawn by templates (so every label is auto-escaped)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# --- Charts: geometry computed here, drawn by templates (so every label is auto-escaped) -----------

CHART_W, CHART_H, PAD_L, PAD_B = 560, 160, 36, 20


@dataclass
class Bar:
    x: float
    y: float
    w: float
    h: float
    label: str
    value: float
    series: int = 0
    link: str | None = None


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exp:
            return step * exp
    return 10 * exp


def bar_chart(
    labels: list[str],
    series: list[list[float]],
    names: list[str] | None = None,
    colors: list[int] | None = None,
    links: list[list[str | None]] | None = None,
) -> dict[str, Any]:
    """Stacked bars: `series[i][j]` is series i at label j; `colors[i]` picks series i's palette slot so
    that one outcome keeps its colour from day to day and chart to chart."""
    colors = colors or list(range(len(series)))
    n = max(1, len(labels))
    totals = [sum(s[j] for s in series) for j in range(len(labels))]
    top = _nice_max(max(totals, default=0))
    # Room for the y axis labels (about 6 px a character at 10 px): "0.0005" does not fit in PAD_L.
    pad_l = max(PAD_L, 6 * max(len(f"{top:g}"), len(f"{top / 2:g}")) + 8)
    plot_w, plot_h = CHART_W - pad_l, CHART_H - PAD_B
    slot = plot_w / n
    width = max(2.0, slot * 0.72)
    bars: list[Bar] = []
    for j, label in enumerate(labels):
        base = 0.0
        for i, s in enumerate(series):
            if not s[j]:
                continue
            h = plot_h * s[j] / top
            bars.append(
                Bar(
                    x=round(pad_l + j * slot + (slot - width) / 2, 1),
                    y=round(plot_h - base - h, 1),
                    w=round(width, 1),
                    h=round(h, 1),
                    label=f"{label}: {names[i] + ' ' if names else ''}{s[j]:g}",
                    value=s[j],
                    series=colors[i],
                    link=links[i][j] if links else None,
                )
            )
            base += h
    step = max(1, n // 7)
    ticks = [{"x": round(pad_l + j * slot + slot / 2, 1), "label": labels[j]} for j in range(0, len(labels), step)]
    # Totals written above the bars when they fit (up to a month of days), and every value as a table.
    values = (
        [
            {
                "x": round(pad_l + j * slot + slot / 2, 1),
                "y": round(max(9.0, plot_h - plot_h * totals[j] / top - 3), 1),
                "text": f"{totals[j]:g}",
            }
            for j in range(len(labels))
            if totals[j]
        ]
        if n <= 31
        else []
    )
    rows = [
        {
            "label": label,
            "total": totals[j],
            "cells": [{"value": s[j], "link": links[i][j] if links and s[j] else None} for i, s in enumerate(series)],
        }
        for j, label in enumerate(labels)
    ]
    return {
        "w": CHART_W,
        "h": CHART_H,
        "plot_h": plot_h,
        "pad_l": pad_l,
        "bars": bars,
        "ticks": ticks,
        "values": values,
        "rows": rows,
        "names": names or ["count"],
        "linked": any(b.link for b in bars),
        "top": f"{top:g}",
        "mid": f"{top / 2:g}",
        "mid_y": plot_h / 2,
        "legend": list(zip(names, colors, strict=True)) if names and len(names) > 1 else [],
        "empty": not any(totals),
    }
