"""Sphinx extension: alt text for the images a chapter's code draws, from a table per edition.

An image a code cell draws has no alt text of its own: MyST-NB writes none, and the HTML writer
then puts the image's file path in its ``alt``, which is all a screen reader announces. The alt
text cannot go into the cells' options either: the Chinese pages keep the English cells' options,
which the execution cache matches a page by. So each edition has a table, ``book/figures/alt.yml``
(``zh/book/figures/alt.yml`` in the Chinese book): per page, the alt text of each image its cells
draw, in the order the page shows them, in the edition's language. An image placed with alt text
of its own (a ``{figure}`` with ``:alt:``: the schematic figures) keeps it and is not counted.

A page whose drawn images and table entries differ in number, or an image without alt text, is a
warning, which fails ``make book`` (warnings are errors there): a figure added to a chapter must
say what it shows in both editions.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

log = logging.getLogger(__name__)

#: The table of each edition, relative to its book's source folder.
TABLE = Path("book") / "figures" / "alt.yml"


def drawn_images(doctree: nodes.document) -> list[nodes.image]:
    """The images of a page that carry no alt text of their own (those its code cells draw), in page order."""
    return [image for image in doctree.findall(nodes.image) if not image.get("alt")]


def read_table(srcdir: Path) -> dict[str, list[str]]:
    """``{page: [alt text, ...]}`` of the edition whose book is at ``srcdir`` (empty if it has no table)."""
    path = srcdir / TABLE
    if not path.is_file():
        return {}
    table = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {str(page): [str(text).strip() for text in texts] for page, texts in table.items()}


def give_alt_text(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Set each drawn image's ``alt`` from the table, warning where the page and the table disagree."""
    images = drawn_images(doctree)
    texts = read_table(Path(app.srcdir)).get(docname, [])
    if len(images) != len(texts):
        log.warning(f"{docname}: {len(images)} images drawn by its code, {len(texts)} alt texts in {TABLE} "
                    "(one per image, in the order the page shows them)", location=docname)
    for image, text in zip(images, texts, strict=False):  # warned above when they differ
        image["alt"] = text
    for image in images[len(texts):]:
        image["alt"] = ""  # warned above; never the file's path


def setup(app: Sphinx) -> dict:
    app.connect("doctree-resolved", give_alt_text)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
