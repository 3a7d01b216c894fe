"""Sphinx extension: the course's page furniture that jupyter-book's settings cannot express.

* Launch buttons (Colab, Binder) belong on the Exercises part only. The chapters are MyST
  Markdown notebooks, which Colab cannot open, and the theme would offer them a launch
  button anyway; an exercise page is the repository's own ``exercises/<id>/<id>.ipynb``,
  so its button opens exactly the notebook a student should work in.
* sphinx-thebe adds its inline configuration script after the HTML builder exists, so
  Sphinx records it twice (in the registry, with file ``None``, and in the builder, with
  file ``""``) and its own de-duplication, which compares file names, keeps both. The
  second copy redeclares a ``const`` and the browser reports "Identifier 'THEBE_JS_URL'
  has already been declared" on every page. The proper fix belongs in sphinx-thebe;
  until then each page keeps one copy of each script.
* A folded code cell's own button label (``code_prompt_show`` in its options) is shown in the edition's
  language: the Chinese pages keep the English cells' options, since they are part of what the execution
  cache matches a page by, and ``course_code_prompts`` ({English label: label}) gives their labels.
* Every page of one edition links to the same page in the other (``course_edition``: ``en``,
  the book at the site's root, or ``zh``, the Chinese edition served under ``zh/``), at the top
  of its text. The English instructors' pages have no Chinese counterpart, nor the Chinese page of the checks'
  message phrases an English one, and they link to none.
"""

from html import escape

from docutils import nodes
from sphinx.application import Sphinx

EXERCISES = "exercises/"
LAUNCH_GROUP = "launch-buttons"


def keep_launch_buttons_on_exercises(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Remove the theme's launch-button group from every page outside ``exercises/``."""
    if pagename.startswith(EXERCISES):
        return
    buttons = context.get("header_buttons", [])
    buttons[:] = [button for button in buttons if button.get("label") != LAUNCH_GROUP]


def drop_repeated_scripts(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Keep the first of identical ``<script>`` entries (same file, same inline body)."""
    seen = set()
    unique = []
    for script in context.get("script_files", []):
        # An inline script has no file: sphinx-thebe's two copies have None and "".
        key = (getattr(script, "filename", script) or None, getattr(script, "attributes", {}).get("body"))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


#: Where the Chinese edition is served, under the English site; the pages of English only.
CHINESE_FOLDER, ENGLISH_ONLY = "zh", ("book/instructors/",)
#: Pages of the Chinese edition only: the table of the checks' English message phrases.
CHINESE_ONLY = ("book/messages",)
#: The link to the other edition, as each edition writes it.
OTHER_EDITION = {"en": ("zh-Hans", "中文版"), "zh": ("en", "English edition")}


def other_edition_href(edition: str, pagename: str) -> str | None:
    """The relative address of ``pagename`` in the other edition, from that page in ``edition``; ``None``
    where it has none."""
    if pagename.startswith(ENGLISH_ONLY) or edition == "zh" and pagename in CHINESE_ONLY:
        return None
    up = "../" * pagename.count("/")
    return f"{up}{CHINESE_FOLDER}/{pagename}.html" if edition == "en" else f"../{up}{pagename}.html"


def link_the_other_edition(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Put a link to this page in the other edition at the top of its body (pages made from a document only)."""
    href = other_edition_href(app.config.course_edition, pagename)
    if doctree is None or href is None or "body" not in context:
        return
    language, text = OTHER_EDITION[app.config.course_edition]
    context["body"] = (f'<p class="edition-link"><a href="{escape(href)}" hreflang="{language}" lang="{language}">'
                       f"{escape(text)}</a></p>\n" + context["body"])


def translate_code_prompts(app: Sphinx, doctree: nodes.document) -> None:
    """Each folded cell's own label (myst-nb's ``prompt_show`` of the cell's container) in the edition's language."""
    labels = app.config.course_code_prompts
    for container in doctree.findall(nodes.container):
        if container.get("prompt_show") in labels:
            container["prompt_show"] = labels[container["prompt_show"]]


def setup(app: Sphinx) -> dict:
    app.add_config_value("course_edition", "en", "html", types=[str])
    app.add_config_value("course_code_prompts", {}, "env", types=[dict])
    app.connect("doctree-read", translate_code_prompts)
    app.connect("html-page-context", link_the_other_edition)
    # sphinx-book-theme adds its launch buttons at priority 501; this runs after it.
    app.connect("html-page-context", keep_launch_buttons_on_exercises, priority=502)
    app.connect("html-page-context", drop_repeated_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
