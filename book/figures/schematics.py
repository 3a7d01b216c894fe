"""The book's schematic figures, drawn from code in both editions' languages.

    .venv/bin/python book/figures/schematics.py          (write every figure whose source changed)
    .venv/bin/python book/figures/schematics.py --all    (write them all)

Runs in the book's build (``_ext/schematic_figures.py`` calls :func:`render_stale` for the
edition it builds) and by hand. Each figure is one function below, named in :data:`FIGURES`;
its words come from ``labels.yml`` beside this file, one entry per label with its English and
its Chinese, so that the two editions' figures are drawn by the same code and differ only in
their labels. Each is written as SVG with its text turned into outlines (matplotlib's default
``svg.fonttype``), so it reads the same whatever fonts the reader has, to
``book/figures/<name>.svg`` and ``zh/book/figures/<name>.svg``. The Chinese labels are drawn
with Noto Sans CJK (Debian's ``fonts-noto-cjk``), needed only where a figure is drawn again.

Every figure sits on a white card, as the book's plots do, so it reads the same in the light
and the dark theme. Queries, keys and values have one colour each across the book
(:data:`QUERY`, :data:`KEY`, :data:`VALUE`), and symbols are the notation page's.

Each SVG starts with a comment holding a digest of what draws it (this file and the figure's
labels): :func:`stale` compares it with the source, and ``tests/book/test_figures.py`` fails
when a figure's source changed and its file was not drawn again.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402
from matplotlib.font_manager import FontProperties  # noqa: E402
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle, Wedge  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: Where each edition's figures are written.
FOLDERS = {"en": ROOT / "book" / "figures", "zh": ROOT / "zh" / "book" / "figures"}
#: The font of the Chinese labels (a collection: matplotlib reads its first face, which holds every CJK ideograph).
CJK_FONT = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")

# One colour per role, across every figure of the book (the Okabe–Ito palette of the plots).
QUERY, KEY, VALUE = "#0072B2", "#E69F00", "#009E73"
OUTPUT, ACCENT, MUTED = "#CC79A7", "#D55E00", "#BBBBBB"
INK, PAPER = "#222222", "#FFFFFF"
#: Every label's size is multiplied by this: a figure is shrunk to a phone's width, and its words must stay readable.
FONT_SCALE = 1.25


class Labels:
    """A figure's words in one language: ``labels("query")`` is the entry ``query`` of the figure in ``labels.yml``."""

    def __init__(self, table: dict[str, dict[str, str]], language: str):
        self.table, self.language = table, language

    def __call__(self, key: str) -> str:
        try:
            return self.table[key][self.language]
        except KeyError:
            raise KeyError(f"labels.yml has no {self.language!r} text for {key!r}") from None


class Canvas:
    """One figure on a white card, in data units (x to the right, y up), with the helpers every figure uses."""

    def __init__(self, width: float, height: float, language: str, scale: float = 0.55):
        self.fig = plt.figure(figsize=(width * scale, height * scale))
        self.fig.patch.set_facecolor(PAPER)
        self.ax = self.fig.add_axes((0, 0, 1, 1))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(0, height)
        self.ax.set_aspect("equal")
        self.ax.axis("off")
        self.font = FontProperties(fname=str(CJK_FONT)) if language == "zh" else FontProperties(family="DejaVu Sans")

    def text(self, x: float, y: float, words: str, size: float = 11, color: str = INK, **options) -> None:
        """``words`` centred at ``(x, y)`` (``ha``/``va`` to change that); ``$…$`` is drawn as math."""
        options = {"ha": "center", "va": "center", **options}
        font = self.font.copy()
        font.set_size(size * FONT_SCALE)
        self.ax.text(x, y, words, color=color, fontproperties=font, **options)

    def box(self, x: float, y: float, w: float, h: float, color: str, words: str = "", fill: float = 0.18,
            size: float = 11, text_color: str = INK, radius: float = 0.12) -> None:
        """A rounded box with its lower left corner at ``(x, y)``, tinted with ``color``, ``words`` in it."""
        self.ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle=f"round,pad=0,rounding_size={radius}",
                                         facecolor=_tint(color, fill), edgecolor=color, linewidth=1.6))
        if words:
            self.text(x + w / 2, y + h / 2, words, size=size, color=text_color)

    def cell(self, x: float, y: float, size: float, color: str, edge: str = PAPER) -> None:
        """A square of a grid, lower left at ``(x, y)``."""
        self.ax.add_patch(Rectangle((x, y), size, size, facecolor=color, edgecolor=edge, linewidth=1.2))

    def arrow(self, start: tuple[float, float], end: tuple[float, float], color: str = INK, width: float = 1.4,
              bend: float = 0.0, style: str = "-|>") -> None:
        """An arrow from ``start`` to ``end`` (``bend``: its curvature, 0 straight)."""
        self.ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=12, color=color,
                                          linewidth=width, connectionstyle=f"arc3,rad={bend}",
                                          shrinkA=2, shrinkB=2))

    def dot(self, x: float, y: float, radius: float, color: str) -> None:
        self.ax.add_patch(Circle((x, y), radius, facecolor=color, edgecolor=INK, linewidth=1.0))

    def svg(self) -> str:
        """The figure as SVG text (no date in it: the same drawing gives the same file)."""
        out = io.StringIO()
        self.fig.savefig(out, format="svg", metadata={"Date": None}, facecolor=PAPER)
        plt.close(self.fig)
        return out.getvalue()


def _tint(color: str, amount: float) -> tuple[float, float, float]:
    """``color`` mixed with white: ``amount`` of the colour (0 white, 1 the colour)."""
    rgb = matplotlib.colors.to_rgb(color)
    return tuple(1 - amount * (1 - channel) for channel in rgb)


# --------------------------------------------------------------------------------------
# The figures, one idea each
# --------------------------------------------------------------------------------------


def attention_pooling(c: Canvas, say: Labels) -> None:
    """Chapter 1: a query meets every key; each key's weight pools its value into the output."""
    keys = ["$x_1$", "$x_2$", "$x_3$", "$x_4$"]
    values = ["$y_1$", "$y_2$", "$y_3$", "$y_4$"]
    weights = [0.10, 0.55, 0.30, 0.05]
    c.box(0.4, 3.0, 1.6, 1.0, QUERY, "$x$")
    c.text(1.2, 4.45, say("query"), color=QUERY)
    for row, (key, value, weight) in enumerate(zip(keys, values, weights)):
        y = 5.6 - row * 1.4
        c.box(3.4, y, 1.4, 0.9, KEY, key)
        c.arrow((2.0, 3.5), (3.4, y + 0.45), color=MUTED, width=1.0)
        c.box(5.6, y + 0.1, 2.2 * weight + 0.2, 0.7, OUTPUT, fill=0.55)  # the weight, as a bar
        c.text(5.7 + 2.2 * weight + 0.35, y + 0.45, f"$\\alpha_{row + 1}$", ha="left", size=10)
        c.box(8.6, y, 1.4, 0.9, VALUE, value)
        c.arrow((10.0, y + 0.45), (11.6, 3.5), color=VALUE, width=0.6 + 5 * weight)
    c.text(4.1, 6.95, say("keys"), color=KEY)
    c.text(6.4, 6.95, say("weights"), color=OUTPUT)
    c.text(9.3, 6.95, say("values"), color=VALUE)
    c.box(11.6, 2.9, 2.2, 1.2, OUTPUT, "$\\hat{y}(x)$", fill=0.3)
    c.text(12.7, 1.9, "$\\sum_i \\alpha_i\\, y_i$", size=12)
    c.text(12.7, 4.55, say("output"), color=OUTPUT)
    c.text(6.9, 0.45, say("caption"), size=10, color="#555555")


def two_scores(c: Canvas, say: Labels) -> None:
    """Chapter 2: the same query and key scored two ways, additive and scaled dot product."""
    # additive: project both, add, tanh, project to one number
    c.text(3.6, 7.5, say("additive"), size=12)
    c.box(0.4, 5.6, 1.4, 0.9, QUERY, "$\\mathbf{q}$")
    c.box(0.4, 3.6, 1.4, 0.9, KEY, "$\\mathbf{k}$")
    c.box(2.6, 5.6, 1.4, 0.9, QUERY, "$W_q$", fill=0.08)
    c.box(2.6, 3.6, 1.4, 0.9, KEY, "$W_k$", fill=0.08)
    c.arrow((1.8, 6.05), (2.6, 6.05))
    c.arrow((1.8, 4.05), (2.6, 4.05))
    c.dot(4.9, 5.05, 0.32, PAPER)
    c.text(4.9, 5.05, "$+$", size=13)
    c.arrow((4.0, 6.05), (4.65, 5.3))
    c.arrow((4.0, 4.05), (4.65, 4.8))
    c.box(5.7, 4.6, 1.3, 0.9, MUTED, "tanh", fill=0.25, size=10)
    c.arrow((5.22, 5.05), (5.7, 5.05))
    c.box(5.7, 2.8, 1.3, 0.9, MUTED, "$\\mathbf{w}_v^\\top$", fill=0.25)
    c.arrow((6.35, 4.6), (6.35, 3.7))
    c.box(5.8, 1.0, 1.1, 0.9, OUTPUT, "$a$", fill=0.4)
    c.arrow((6.35, 2.8), (6.35, 1.9))
    # dot product: multiply feature by feature, add, divide by √d
    c.text(11.4, 7.5, say("dot"), size=12)
    c.box(8.8, 5.6, 1.4, 0.9, QUERY, "$\\mathbf{q}$")
    c.box(8.8, 3.6, 1.4, 0.9, KEY, "$\\mathbf{k}$")
    c.box(11.0, 4.6, 1.5, 0.9, MUTED, "$\\mathbf{q}^\\top\\mathbf{k}$", fill=0.25)
    c.arrow((10.2, 6.05), (11.0, 5.2))
    c.arrow((10.2, 4.05), (11.0, 4.9))
    c.box(11.0, 2.8, 1.5, 0.9, MUTED, "$\\div\\sqrt{d}$", fill=0.25)
    c.arrow((11.75, 4.6), (11.75, 3.7))
    c.box(11.2, 1.0, 1.1, 0.9, OUTPUT, "$a$", fill=0.4)
    c.arrow((11.75, 2.8), (11.75, 1.9))
    c.text(3.6, 0.35, say("additive note"), size=9.5, color="#555555")
    c.text(11.4, 0.35, say("dot note"), size=9.5, color="#555555")


def three_masks(c: Canvas, say: Labels) -> None:
    """Chapter 3: causal, padding and window masks on the same 6 × 6 grid, True = may attend."""
    n, size = 6, 0.62
    rules = [("causal", lambda i, j: j <= i), ("padding", lambda i, j: j < 4), ("window", lambda i, j: abs(i - j) <= 1)]
    for panel, (name, allowed) in enumerate(rules):
        left = 0.9 + panel * 5.0
        for i in range(n):
            for j in range(n):
                c.cell(left + j * size, 1.2 + (n - 1 - i) * size, size, QUERY if allowed(i, j) else "#E6E6E6")
        c.text(left + n * size / 2, 5.25, say(name), size=11.5)
        c.text(left + n * size / 2, 0.75, say("key"), size=9.5, color=KEY)
        c.text(left - 0.35, 1.2 + n * size / 2, say("query"), size=9.5, color=QUERY, rotation=90)
    c.cell(4.6, 0.1, 0.35, QUERY)
    c.text(5.05, 0.28, say("may attend"), size=9.5, ha="left")
    c.cell(8.6, 0.1, 0.35, "#E6E6E6", edge=MUTED)
    c.text(9.05, 0.28, say("masked"), size=9.5, ha="left")


def heads(c: Canvas, say: Labels) -> None:
    """Chapter 4: the projected queries split into heads, each head attends on its own, the heads merged."""
    c.box(0.3, 2.6, 1.2, 2.8, QUERY, "$X$")
    c.text(0.9, 2.2, "$(n, d_\\mathrm{model})$", size=9)
    c.box(1.95, 3.45, 2.1, 1.1, MUTED, "$W_q, W_k, W_v$", fill=0.25, size=8.5)
    c.arrow((1.5, 4.0), (1.95, 4.0))
    colors = [QUERY, KEY, VALUE, OUTPUT]
    for g, color in enumerate(colors):
        y = 6.1 - g * 1.55
        c.box(4.6, y, 1.1, 1.1, color, f"$g{{=}}{g + 1}$", fill=0.3, size=8)
        c.arrow((4.05, 4.0), (4.6, y + 0.55), color=MUTED, width=1.0)
        c.box(6.3, y, 2.2, 1.1, color, say("attention"), fill=0.12, size=9)
        c.arrow((5.7, y + 0.55), (6.3, y + 0.55))
        c.arrow((8.5, y + 0.55), (9.4, 4.0), color=MUTED, width=1.0)
    c.text(5.15, 7.65, say("split"), size=10)
    c.text(7.4, 7.65, say("per head"), size=10)
    c.text(10.1, 7.65, say("merge"), size=10)
    c.box(9.4, 2.6, 1.4, 2.8, MUTED, say("concat"), fill=0.12, size=9)
    c.box(11.5, 3.45, 1.0, 1.1, MUTED, "$W_o$", fill=0.25)
    c.arrow((10.8, 4.0), (11.5, 4.0))
    c.box(13.2, 2.6, 1.2, 2.8, OUTPUT, say("output"), fill=0.3, size=9)
    c.arrow((12.5, 4.0), (13.2, 4.0))
    c.text(5.0, 0.4, "$d_\\mathrm{head} = d_\\mathrm{model} / n_\\mathrm{heads}$", size=10)


def rotation(c: Canvas, say: Labels) -> None:
    """Chapter 5: a pair of features turned by the angle ω_p t: the same vector at positions 0, 1, 2, 3."""
    import math

    center, radius, omega = (3.6, 3.6), 2.6, 0.38
    c.ax.add_patch(Circle(center, radius, facecolor="none", edgecolor=MUTED, linewidth=1.0, linestyle="--"))
    c.arrow((center[0] - radius - 0.4, center[1]), (center[0] + radius + 0.5, center[1]), color=MUTED, width=0.8)
    c.arrow((center[0], center[1] - radius - 0.4), (center[0], center[1] + radius + 0.5), color=MUTED, width=0.8)
    start = 0.25
    for t in range(4):
        angle = start + omega * t
        tip = (center[0] + radius * math.cos(angle), center[1] + radius * math.sin(angle))
        color = QUERY if t == 0 else _tint(QUERY, 1 - 0.2 * t)
        c.arrow(center, tip, color=color, width=2.0)
        c.text(tip[0] + 0.45 * math.cos(angle), tip[1] + 0.45 * math.sin(angle), f"$t{{=}}{t}$", size=9.5)
    c.ax.add_patch(Wedge(center, 1.1, math.degrees(start), math.degrees(start + omega), facecolor=_tint(ACCENT, 0.3),
                         edgecolor=ACCENT))
    c.text(center[0] + 1.45, center[1] + 0.45, "$\\omega_p$", size=10, color=ACCENT)
    c.text(center[0] + radius + 0.7, center[1] - 0.35, "$x_{2p}$", size=10)
    c.text(center[0] - 0.25, center[1] + radius + 0.45, "$x_{2p+1}$", size=10, ha="right")
    c.text(9.6, 5.0, say("turn"), size=10.5)
    c.text(9.6, 3.9, "$B(\\omega_p t)\\,\\binom{x_{2p}}{x_{2p+1}}$", size=12)
    c.text(9.6, 2.6, say("relative"), size=10.5)
    c.text(9.6, 1.8, "$\\varphi = \\omega_p \\Delta$", size=11)


def block(c: Canvas, say: Labels) -> None:
    """Chapter 6: a pre-norm Transformer block: each sublayer reads a normalised copy and adds to the stream."""
    x, w = 2.2, 3.6
    c.arrow((x + w / 2, 0.3), (x + w / 2, 11.4), color=MUTED, width=2.2)  # the residual stream
    layers = [(1.6, say("norm"), MUTED), (3.2, say("attention"), QUERY), (6.2, say("norm"), MUTED),
              (7.8, say("ffn"), VALUE)]
    for y, words, color in layers:
        c.box(x + 4.6, y, 3.6, 1.0, color, words, fill=0.2, size=9.5)
    for start, end in ((0.9, 1.6), (7.0, 6.2)):  # the stream into each norm
        c.arrow((x + w / 2 + 0.1, start + (0.0 if start < 2 else 0.4)), (x + 4.6, end + 0.5), color=INK, width=1.0,
                bend=-0.2)
    c.arrow((x + 6.4, 2.6), (x + 6.4, 3.2))
    c.arrow((x + 6.4, 7.2), (x + 6.4, 7.8))
    for y in (4.2, 8.8):  # each sublayer's output added back
        c.dot(x + w / 2, y + 0.6, 0.3, PAPER)
        c.text(x + w / 2, y + 0.6, "$+$", size=12)
        c.arrow((x + 4.6, y - 0.5), (x + w / 2 + 0.3, y + 0.6), color=INK, width=1.0, bend=0.2)
    c.text(x + w / 2 - 0.3, 0.5, "$X$", size=12, ha="right")
    c.text(x + w / 2 - 0.3, 11.2, say("out"), size=10, ha="right")
    c.text(x + w / 2 - 0.3, 5.4, say("stream"), size=9, ha="right", color="#555555", rotation=90)


def online_softmax(c: Canvas, say: Labels) -> None:
    """Chapter 6: one query's scores read a chunk of keys at a time, with a running maximum, sum and output."""
    size, chunks, width = 0.62, 4, 4
    for j in range(chunks * width):
        chunk = j // width
        color = _tint(ACCENT, 0.35) if chunk < 2 else ACCENT if chunk == 2 else "#EEEEEE"
        c.cell(0.8 + j * size + chunk * 0.25, 5.6, size, color)
    for chunk in range(chunks):
        left = 0.8 + chunk * (width * size + 0.25)
        c.ax.add_patch(Rectangle((left, 5.6), width * size, size, fill=False, edgecolor=KEY, linewidth=1.4))
        c.text(left + width * size / 2, 6.65, f"$C_{chunk + 1}$", size=10, color=KEY)
    c.text(0.55, 5.6 + size / 2, "$s_j$", size=11, ha="right")
    c.text(6.2, 7.35, say("scores"), size=10)
    c.box(5.9, 3.4, 6.2, 0.9, OUTPUT, "$m_\\mathrm{new} = \\max(m, \\max_{j \\in C} s_j)$",
          fill=0.15, size=10)
    c.box(5.9, 2.2, 6.2, 0.9, OUTPUT, "$z \\leftarrow e^{m - m_\\mathrm{new}} z + \\sum_{j \\in C} e^{s_j - m_\\mathrm{new}}$",
          fill=0.15, size=10)
    c.box(5.9, 1.0, 6.2, 0.9, VALUE,
          "$\\mathbf{o} \\leftarrow e^{m - m_\\mathrm{new}} \\mathbf{o} + \\sum_{j \\in C} e^{s_j - m_\\mathrm{new}} \\mathbf{v}_j$",
          fill=0.15, size=10)
    c.arrow((0.8 + 2 * (width * size + 0.25) + width * size / 2, 5.6), (5.9, 3.85), color=ACCENT, width=1.2, bend=0.15)
    for row, (key, color) in enumerate((("done", _tint(ACCENT, 0.35)), ("now", ACCENT), ("next", "#EEEEEE"))):
        c.cell(0.8, 3.0 - row * 0.7, 0.4, color, edge=KEY)  # the legend of the chunks' colours
        c.text(1.4, 3.2 - row * 0.7, say(key), size=9.5, ha="left")
    c.text(9.0, 0.35, say("at the end"), size=9.5, color="#555555")


def beam_tree(c: Canvas, say: Labels) -> None:
    """Chapter 7: beam search with a beam of 2: every step extends each kept prefix, keeps the 2 best, prunes the rest."""
    tokens = [["A", "B", "C"], ["AA", "AB", "BA", "BC"], ["ABA", "ABC", "BCA", "BCC"]]
    scores = {"A": -0.5, "B": -0.9, "C": -2.3, "AA": -2.6, "AB": -1.2, "BA": -3.1, "BC": -1.6,
              "ABA": -2.0, "ABC": -2.9, "BCA": -2.4, "BCC": -3.4}
    kept = {"A", "B", "AB", "BC", "ABA", "BCA"}
    place = {"<s>": (0.9, 4.8)}
    for depth, row in enumerate(tokens, start=1):
        for index, token in enumerate(row):
            place[token] = (0.9 + depth * 3.6, 7.6 - index * 5.6 / max(1, len(row) - 1))
    for token, (x, y) in place.items():
        parent = "<s>" if len(token) == 1 or token == "<s>" else token[:-1]
        if token != "<s>":
            px, py = place[parent]
            c.arrow((px + 0.75, py), (x - 0.75, y), color=QUERY if token in kept else MUTED,
                    width=1.8 if token in kept else 0.8)
        alive = token in kept or token == "<s>"
        c.box(x - 0.75, y - 0.42, 1.5, 0.84, QUERY if alive else MUTED, token.replace("<s>", "$\\langle s \\rangle$"),
              fill=0.3 if alive else 0.08, size=10, text_color=INK if alive else "#888888")
        if token in scores:
            c.text(x, y - 0.7, f"{scores[token]:.1f}", size=8.5, color=INK if alive else "#888888")
    c.text(0.9, 0.55, say("legend"), size=9.5, ha="left", color="#555555", linespacing=1.4)


def kv_cache(c: Canvas, say: Labels) -> None:
    """Chapter 8: generating token t adds one row to the cached keys and values; the new query reads them all."""
    steps = 4
    for s in range(steps):
        left = 0.8 + s * 3.4
        c.text(left + 1.0, 7.75, f"$t = {s + 1}$", size=10.5)
        for r in range(s + 1):
            new = r == s
            y = 6.3 - r * 0.75
            c.box(left, y, 0.9, 0.6, KEY, fill=0.6 if new else 0.18)
            c.box(left + 1.1, y, 0.9, 0.6, VALUE, fill=0.6 if new else 0.18)
        c.box(left + 0.45, 1.4, 1.1, 0.7, QUERY, "$\\mathbf{q}_t$", fill=0.4, size=10)
        c.arrow((left + 1.0, 2.1), (left + 1.0, 6.3 - s * 0.75 - 0.05), color=QUERY, width=1.0)
    for s in range(steps):  # the columns' names
        c.text(0.8 + s * 3.4 + 0.45, 7.2, "$K$", size=10, color=KEY)
        c.text(0.8 + s * 3.4 + 1.55, 7.2, "$V$", size=10, color=VALUE)
    c.box(0.8, 0.3, 0.5, 0.4, KEY, fill=0.6)
    c.text(1.45, 0.5, say("new row"), size=9.5, ha="left")
    c.box(6.6, 0.3, 0.5, 0.4, KEY, fill=0.18)
    c.text(7.25, 0.5, say("cached"), size=9.5, ha="left")


def shared_heads(c: Canvas, say: Labels) -> None:
    """Chapter 8: grouped-query attention: 8 query heads in 2 groups, each group reading one key/value head."""
    for g in range(8):
        x = 0.6 + g * 1.45
        group = g // 4
        c.box(x, 5.2, 1.1, 1.0, QUERY, f"$\\mathbf{{q}}^{{({g + 1})}}$", fill=0.25 if group == 0 else 0.45, size=9)
        c.arrow((x + 0.55, 5.2), (3.0 + group * 5.8 + 0.9, 3.0), color=MUTED, width=1.0)
    for group in range(2):
        x = 3.0 + group * 5.8
        c.box(x, 2.0, 0.9, 1.0, KEY, "$K$", fill=0.35)
        c.box(x + 1.0, 2.0, 0.9, 1.0, VALUE, "$V$", fill=0.35)
        c.text(x + 0.95, 1.45, say("kv head").format(group + 1), size=9.5)
    c.text(3.0, 6.75, say("queries"), size=10, color=QUERY)
    c.text(6.4, 0.5, say("note"), size=9.5, color="#555555")


def rolling_buffer(c: Canvas, say: Labels) -> None:
    """Chapter 8: a window of r + 1 = 4 positions: each step appends the new key and value and drops the oldest."""
    slots, size, left = 4, 1.1, 3.2
    for r, t in enumerate((5, 6, 7)):
        y = 5.4 - r * 1.75
        c.text(0.8, y + size / 2, f"$t = {t}$", size=10.5)
        c.box(left - size - 0.5, y, size, size, MUTED, str(t - slots), fill=0.05, size=10.5, text_color="#999999")
        c.arrow((left - 0.02, y + size / 2), (left - 0.48, y + size / 2), color=MUTED, width=1.0)
        for s in range(slots):
            position = t - slots + 1 + s
            c.box(left + s * (size + 0.15), y, size, size, KEY, str(position), fill=0.6 if position == t else 0.15,
                  size=11)
    c.text(left - size / 2 - 0.5, 7.0, say("dropped"), size=9.5, color="#777777")
    c.text(left + slots * (size + 0.15) / 2, 7.0, say("window"), size=10)
    c.box(left + slots * (size + 0.15) + 0.5, 5.6, 0.45, 0.45, KEY, fill=0.6)
    c.text(left + slots * (size + 0.15) + 1.1, 5.82, say("new"), size=9.5, ha="left")
    c.text(6.2, 0.45, say("note"), size=9.5, color="#555555")


#: ``{name: (drawing function, width, height)}``: the book's schematic figures, in the order of the chapters.
FIGURES: dict[str, tuple[Callable[[Canvas, Labels], None], float, float]] = {
    "attention-pooling": (attention_pooling, 14.2, 7.4),
    "two-scores": (two_scores, 15.0, 8.0),
    "three-masks": (three_masks, 15.0, 5.7),
    "heads": (heads, 14.8, 8.1),
    "rotation": (rotation, 13.0, 7.4),
    "block": (block, 12.0, 11.8),
    "online-softmax": (online_softmax, 12.6, 7.8),
    "beam-tree": (beam_tree, 14.0, 8.4),
    "kv-cache": (kv_cache, 14.2, 8.2),
    "shared-heads": (shared_heads, 12.6, 7.0),
    "rolling-buffer": (rolling_buffer, 12.4, 7.6),
}


# --------------------------------------------------------------------------------------
# Drawing and checking
# --------------------------------------------------------------------------------------


def labels() -> dict[str, dict[str, dict[str, str]]]:
    """``labels.yml``: ``{figure: {label: {"en": …, "zh": …}}}``."""
    return yaml.safe_load((HERE / "labels.yml").read_text(encoding="utf-8"))


def digest(name: str) -> str:
    """What draws figure ``name``: this file and the figure's labels, hashed."""
    source = Path(__file__).read_bytes() + json.dumps(labels().get(name, {}), sort_keys=True).encode()
    return hashlib.sha256(source).hexdigest()[:16]


def draw(name: str, language: str) -> str:
    """Figure ``name`` in ``language`` (``en``, ``zh``) as SVG text, its source's digest in a comment at the top."""
    function, width, height = FIGURES[name]
    if language == "zh" and not CJK_FONT.is_file():
        raise FileNotFoundError(f"the Chinese labels are drawn with {CJK_FONT}: install Debian's fonts-noto-cjk")
    matplotlib.rcParams["svg.hashsalt"] = name  # the same drawing gives the same ids
    canvas = Canvas(width, height, language)
    function(canvas, Labels(labels().get(name, {}), language))
    svg = canvas.svg()
    return re.sub(r"(<svg )", f"<!-- schematic {name}, source {digest(name)} -->\n\\1", svg, count=1)


def written_digest(path: Path) -> str | None:
    """The source digest a written figure was drawn from (``None``: not written, or not by this module)."""
    if not path.is_file():
        return None
    found = re.search(r"<!-- schematic \S+, source (\w+) -->", path.read_text(encoding="utf-8")[:2000])
    return found.group(1) if found else None


def stale(language: str) -> list[str]:
    """The figures of ``language`` whose file is missing or was drawn from another source."""
    return [name for name in FIGURES if written_digest(FOLDERS[language] / f"{name}.svg") != digest(name)]


def render_stale(language: str, everything: bool = False) -> list[Path]:
    """Draw again the figures of ``language`` that are stale (``everything``: all of them); the files written."""
    written = []
    for name in FIGURES if everything else stale(language):
        path = FOLDERS[language] / f"{name}.svg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(draw(name, language), encoding="utf-8")
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description="Draw the book's schematic figures in both editions.")
    parser.add_argument("--all", action="store_true", help="draw every figure, not only those whose source changed")
    args = parser.parse_args()
    for language in FOLDERS:
        for path in render_stale(language, args.all):
            print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
