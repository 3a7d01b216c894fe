"""Sphinx extension: author-year citations in round brackets, and a list of references
labelled the same way.

sphinxcontrib-bibtex's ``author_year`` style writes "[Vaswani et al., 2017]"; the
``author_year_round`` style registered here writes "(Vaswani et al., 2017)" and
"Vaswani et al. (2017)", as papers in the field do. pybtex's default labels would list
that paper as "[VSP+17]", which a reader cannot match to the citation; the ``author_year``
bibliography style keeps pybtex's ``unsrt`` formatting of the entries, sorts them by
author, and labels each one "Vaswani et al., 2017".
"""

import dataclasses

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx.application import Sphinx
from sphinxcontrib.bibtex.plugin import register_plugin as register_bibtex_plugin
from sphinxcontrib.bibtex.style.referencing import BracketStyle
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle


def _round_brackets() -> BracketStyle:
    return BracketStyle(left="(", right=")")


@dataclasses.dataclass
class RoundAuthorYearReferences(AuthorYearReferenceStyle):
    """Author-year citations with round brackets everywhere."""

    bracket_parenthetical: BracketStyle = dataclasses.field(default_factory=_round_brackets)
    bracket_textual: BracketStyle = dataclasses.field(default_factory=_round_brackets)
    bracket_author: BracketStyle = dataclasses.field(default_factory=_round_brackets)
    bracket_label: BracketStyle = dataclasses.field(default_factory=_round_brackets)
    bracket_year: BracketStyle = dataclasses.field(default_factory=_round_brackets)


class AuthorYearLabels(BaseLabelStyle):
    """"Nadaraya, 1964", "Bahdanau et al., 2014", "Luong and Manning, 2015"-style labels."""

    def format_labels(self, sorted_entries):
        for entry in sorted_entries:
            yield f"{_authors(entry.persons.get('author', []))}, {entry.fields.get('year', 'n.d.')}"


def _authors(people) -> str:
    surnames = [" ".join(person.prelast_names + person.last_names) for person in people]
    if len(surnames) > 2:
        return f"{surnames[0]} et al."
    return " and ".join(surnames) or "Anonymous"


class AuthorYearStyle(UnsrtStyle):
    default_label_style = "author_year"
    default_sorting_style = "author_year_title"


def setup(app: Sphinx) -> dict:
    register_bibtex_plugin("sphinxcontrib.bibtex.style.referencing", "author_year_round", RoundAuthorYearReferences)
    register_plugin("pybtex.style.labels", "author_year", AuthorYearLabels)
    register_plugin("pybtex.style.formatting", "author_year", AuthorYearStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
