"""The class report's figures (``report.py``), drawn with matplotlib in the book's style, returned as PNG bytes."""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")  # no display: the figures go into the page

import matplotlib.pyplot as plt
import numpy as np

from ..plots import OKABE_ITO, use_course_style


def png(figure) -> bytes:
    """``figure`` as PNG bytes (and closed)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)  # sharp on a screen, small in the page
    plt.close(figure)
    return buffer.getvalue()


def score_histogram(totals: list[float], max_total: float) -> bytes:
    """The totals' histogram over ``[0, max_total]``, mean and median marked."""
    use_course_style()
    figure, axes = plt.subplots(figsize=(6.5, 3.0))
    bins = np.linspace(0, max_total, min(21, max(6, int(max_total * 2) + 1)))
    axes.hist(totals, bins=bins, color=OKABE_ITO[0], edgecolor="white")
    mean, median = float(np.mean(totals)), float(np.median(totals))
    axes.axvline(mean, color=OKABE_ITO[1], linewidth=2, label=f"mean {mean:.2f}")
    axes.axvline(median, color=OKABE_ITO[7], linestyle="--", linewidth=1.5, label=f"median {median:g}")
    axes.set(xlabel=f"total score (of {max_total:g})", ylabel="submissions", xlim=(0, max_total))
    axes.yaxis.get_major_locator().set_params(integer=True)
    axes.legend(loc="upper left")
    return png(figure)


def part_bars(summaries: list) -> bytes:
    """One horizontal bar per part (``summaries``: ``report.PartSummary``): the share with full marks, the hardest
    at the top."""
    use_course_style()
    ordered = sorted(summaries, key=lambda s: s.full_marks, reverse=True)  # barh draws the first at the bottom
    figure, axes = plt.subplots(figsize=(6.5, max(3.0, 0.8 + 0.35 * len(ordered))))
    shares = [100 * s.full_marks for s in ordered]
    axes.barh([s.name for s in ordered], shares, color=OKABE_ITO[2])
    for y, share in enumerate(shares):  # the share at the bar's end: outside it, or inside a long one
        inside = share > 85
        axes.text(share - 1 if inside else share + 1, y, f"{share:.0f} %", va="center", fontsize=9,
                  ha="right" if inside else "left", color="white" if inside else "black")
    axes.set(xlabel="students with full marks (%)", xlim=(0, 100))
    axes.grid(axis="y", visible=False)
    return png(figure)


def time_against_limit(seconds: list[float], limit: float, part: str) -> bytes:
    """The histogram of a part's times, its limit as a line."""
    use_course_style()
    figure, axes = plt.subplots(figsize=(6.5, 2.8))
    top = max(limit, max(seconds)) * 1.05
    axes.hist(seconds, bins=np.linspace(0, top, 31), color=OKABE_ITO[5], edgecolor="white")
    axes.axvline(limit, color=OKABE_ITO[1], linewidth=2, label=f"limit {limit:g} s")
    axes.set(xlabel=f"{part}: kernel CPU time (s)", ylabel="submissions", xlim=(0, top))
    axes.yaxis.get_major_locator().set_params(integer=True)
    axes.legend(loc="upper right")
    return png(figure)


def totals_heatmap(assignments: list, students: list[str]) -> bytes:
    """Students (rows) × assignments (``report.Assignment``, columns): each total as a share of the assignment's
    points; blank: none."""
    use_course_style()
    shares = np.full((len(students), len(assignments)), np.nan)
    for column, assignment in enumerate(assignments):
        totals = assignment.totals()
        for row, student in enumerate(students):
            if student in totals and assignment.max_total > 0:
                shares[row, column] = totals[student] / assignment.max_total
    height = min(16.0, 1.2 + 0.22 * len(students))  # a class of hundreds: rows thinner than a name
    figure, axes = plt.subplots(figsize=(1.6 + 1.1 * len(assignments), height))
    image = axes.imshow(shares, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    axes.set_xticks(range(len(assignments)), [a.name for a in assignments], rotation=30, ha="right")
    step = max(1, math.ceil(len(students) / 60))  # at most 60 names on the axis
    axes.set_yticks(range(0, len(students), step), students[::step], fontsize=8)
    axes.grid(False)
    figure.colorbar(image, ax=axes, label="share of the points", fraction=0.05)
    return png(figure)
