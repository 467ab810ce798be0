"""Matplotlib on the Agg backend (no display), with one consistent look for every plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # after matplotlib.use(): the backend is chosen first

__all__ = ["color_for", "new_figure", "save"]

_COLORS = {
    "ours": "#d62728",
    "redis-py": "#1f77b4",
    "redis-py-1ms": "#17becf",
    "python-redis-lock": "#2ca02c",
    "pottery": "#9467bd",
    "book-lua": "#ff7f0e",
    "floor": "#7f7f7f",
    "ping2": "#bcbd22",
    "book": "#8c564b",
    "ours-sem": "#d62728",
    "book-fair-sem": "#8c564b",
    "book-lua-sem": "#ff7f0e",
    "zset-sem": "#9467bd",
    "naive": "#1f77b4",
    "plain": "#7f7f7f",
    "decorated": "#d62728",
    "lock": "#ff9896",
}


def color_for(name: str) -> str:
    return _COLORS.get(name, "#333333")


def new_figure(width: float = 8.0, height: float = 4.5, ncols: int = 1) -> tuple[Any, Any]:
    """A figure and its axes (a sequence of ``ncols`` axes side by side when ``ncols > 1``)."""
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), dpi=110)
    for ax in axes if ncols > 1 else [axes]:
        ax.grid(True, axis="y", alpha=0.3)
    return fig, axes


def save(fig: Any, out_dir: Path, filename: str) -> str:
    """Write the figure as PNG into ``out_dir``; returns the file name for a markdown link."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out_dir / filename)
    plt.close(fig)
    return filename
