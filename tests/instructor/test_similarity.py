"""``python -m autograder similarity``: a class of 12 notebooks, built here as JSON, with known copies.

Eight honest students answer three parts, each in their own way (``normalise`` and ``pairwise``: a dozen
lines each; ``causal_mask``: the one line everyone writes), under the released stubs and a given helper.
Four copy: one renames every local and rewrites the comments, one swaps statements and lays the code out
again (a statement rewritten to let it move), one copies one part and writes the other itself, and one copies
the first copy. In a class of 12, a pair is flagged when two parts are alike: the three pairs of the copy of a
copy are; the two copies that share one part stay just below the threshold, listed as such, above every honest
pair, and are flagged at a lower one. No honest pair has any evidence; the one-line part shared by all and
the released code count for nothing. The page is opened in Chromium with the network refused, and its screenshot is the instructors'
guide's figure (``book/instructors/similarity.png``, copied from ``_build/screenshots/``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from itertools import combinations
from pathlib import Path

import pytest

from autograder.instructor.similarity import (
    Settings,
    Submission,
    analyse,
    marks,
    page,
    read_notebook,
    similarity,
)

ROOT = Path(__file__).resolve().parents[2]
A = "09_similarity"
SCREENSHOTS = ROOT / "_build" / "screenshots"

GIVEN = '''
def describe(scores, name="scores"):
    """Print the shape, the smallest and the largest value of a tensor of scores."""
    low, high = scores.min().item(), scores.max().item()
    print(f"{name}: shape {tuple(scores.shape)}, values from {low:.3f} to {high:.3f}")
    return low, high
'''
STUBS = {
    "normalise": '''
def normalise(scores, valid_lens):
    """Softmax over the last axis, keeping only the first valid_lens[i] entries of row i.

    Args:
        scores: (batch, n) float tensor.
        valid_lens: (batch,) int tensor.

    Returns:
        (batch, n) weights; each row sums to 1 over its valid entries.
    """
    # YOUR CODE HERE
    raise NotImplementedError()
''',
    "pairwise": '''
def pairwise(queries, keys):
    """Scaled dot-product scores between every query and every key.

    Args:
        queries: (batch, q, d); keys: (batch, k, d).

    Returns:
        (batch, q, k) scores divided by the square root of d.
    """
    # YOUR CODE HERE
    raise NotImplementedError()
''',
    "causal_mask": '''
def causal_mask(n):
    """(n, n) bool mask: True where a query may attend to a key."""
    # YOUR CODE HERE
    raise NotImplementedError()
''',
}
ONE_LINE = "    return torch.ones(n, n, dtype=torch.bool).tril()\n"

#: Each honest student's bodies of normalise and pairwise: eight ways to write each.
HONEST = {
    "h1": ('''
    n = scores.shape[-1]
    positions = torch.arange(n, device=scores.device)
    keep = positions[None, :] < valid_lens[:, None]
    masked = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(masked, dim=-1)
''', '''
    d = queries.shape[-1]
    return torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
'''),
    "h2": ('''
    out = torch.zeros_like(scores)
    for row in range(scores.shape[0]):
        length = int(valid_lens[row])
        exps = torch.exp(scores[row, :length] - scores[row, :length].max())
        out[row, :length] = exps / exps.sum()
    return out
''', '''
    batch, q, d = queries.shape
    result = torch.empty(batch, q, keys.shape[1])
    for b in range(batch):
        result[b] = queries[b] @ keys[b].T
    return result * d ** -0.5
'''),
    "h3": ('''
    mask = torch.arange(scores.size(1)).expand(len(valid_lens), -1) >= valid_lens.unsqueeze(1)
    big_negative = torch.finfo(scores.dtype).min
    weights = scores.clone()
    weights[mask] = big_negative
    weights = weights - weights.amax(dim=1, keepdim=True)
    weights = weights.exp() * (~mask)
    return weights / weights.sum(dim=1, keepdim=True)
''', '''
    scale = 1.0 / queries.size(-1) ** 0.5
    return torch.einsum("bqd,bkd->bqk", queries * scale, keys)
'''),
    "h4": ('''
    rows = []
    for s, length in zip(scores, valid_lens.tolist()):
        valid = torch.nn.functional.softmax(s[:length], dim=0)
        rows.append(torch.cat([valid, s.new_zeros(len(s) - length)]))
    return torch.stack(rows)
''', '''
    similarity = queries.matmul(keys.permute(0, 2, 1))
    similarity.div_(torch.tensor(float(queries.shape[2])).sqrt())
    return similarity
'''),
    "h5": ('''
    lengths = valid_lens.view(-1, 1).to(scores.device)
    idx = torch.arange(scores.shape[1], device=scores.device).view(1, -1)
    penalty = torch.where(idx < lengths, 0.0, -1e9)
    e = (scores + penalty).softmax(-1)
    return e * (idx < lengths)
''', '''
    width = keys.shape[-1]
    kt = keys.transpose(-1, -2).contiguous()
    raw = torch.matmul(queries, kt)
    return raw / (width ** 0.5)
'''),
    "h6": ('''
    result = scores.new_zeros(scores.shape)
    for i, v in enumerate(valid_lens):
        if v > 0:
            row = scores[i][: v.item()]
            row = row - row.logsumexp(0)
            result[i][: v.item()] = row.exp()
    return result
''', '''
    dots = (queries.unsqueeze(2) * keys.unsqueeze(1)).sum(-1)
    return dots / math.sqrt(keys.size(2))
'''),
    "h7": ('''
    b, n = scores.shape
    allowed = torch.zeros(b, n, dtype=torch.bool)
    for i in range(b):
        allowed[i, : valid_lens[i]] = True
    shifted = scores - scores.max()
    numerator = torch.exp(shifted) * allowed
    denominator = numerator.sum(1).clamp_min(1e-30).unsqueeze(-1)
    return numerator / denominator
''', '''
    q_scaled = queries / np.sqrt(queries.shape[2])
    answer = q_scaled @ keys.mT
    assert answer.shape == (queries.shape[0], queries.shape[1], keys.shape[1])
    return answer
'''),
    "h8": ('''
    grid = torch.arange(scores.shape[-1]).repeat(scores.shape[0], 1)
    hidden = grid.ge(valid_lens.reshape(-1, 1))
    logits = torch.where(hidden, torch.full_like(scores, -float("inf")), scores)
    probabilities = F.softmax(logits, dim=1)
    return torch.nan_to_num(probabilities, nan=0.0)
''', '''
    transposed = torch.swapaxes(keys, 1, 2)
    numerator = torch.baddbmm(torch.zeros(1), queries, transposed)
    return numerator.mul(queries.new_tensor(queries.shape[-1]).rsqrt())
'''),
}

RENAMED = ('''
    width = scores.shape[-1]  # how many keys
    idx = torch.arange(width, device=scores.device)

    # which entries are valid
    ok = idx[None, :] < valid_lens[:, None]
    filled = scores.masked_fill(~ok, float("-inf"))  # -inf where not valid
    return torch.softmax(filled, dim=-1)
''', '''
    dim = queries.shape[-1]  # feature size
    return torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(dim)
''')
REORDERED = ('''
    out = torch.zeros_like(scores)
    for row in range(scores.shape[0]):
        length = int(valid_lens[row])
        exps = torch.exp(scores[row, :length]
                         - scores[row, :length].max())
        out[row, :length] = exps / exps.sum()
    return out
''', '''
    result = torch.empty(queries.shape[0], queries.shape[1], keys.shape[1])
    batch, q, d = queries.shape
    for b in range(batch):
        result[b] = queries[b] @ keys[b].T
    return result * d ** -0.5
''')
OWN_PAIRWISE = '''
    logits = torch.zeros(queries.shape[0], queries.shape[1], keys.shape[1])
    for j in range(keys.shape[1]):
        logits[:, :, j] = (queries * keys[:, j : j + 1, :]).sum(dim=-1)
    return logits / queries.shape[-1] ** 0.5
'''
RENAMED_AGAIN = ('''
    nk = scores.shape[-1]
    pos = torch.arange(nk, device=scores.device)
    good = pos[None, :] < valid_lens[:, None]
    s2 = scores.masked_fill(~good, float("-inf"))
    return torch.softmax(s2, dim=-1)
''', RENAMED[1].replace("dim", "size"))

#: Each copy: (what it copied, its bodies).
COPIES = {"c1-renamed": ("h1", RENAMED), "c2-reordered": ("h2", REORDERED),
          "c3-one-part-own": ("h3", (HONEST["h3"][0], OWN_PAIRWISE)),
          "c4-copy-of-c1": ("c1-renamed", RENAMED_AGAIN)}
#: Every pair a copy makes: each copy with what it copied, and the copy of a copy with the first student.
COPY_PAIRS = {frozenset(("c1-renamed", "h1")), frozenset(("c2-reordered", "h2")),
              frozenset(("c3-one-part-own", "h3")), frozenset(("c4-copy-of-c1", "c1-renamed")),
              frozenset(("c4-copy-of-c1", "h1"))}
#: The pairs that share two alike parts (the others share one).
TWO_PARTS = {frozenset(("c1-renamed", "h1")), frozenset(("c4-copy-of-c1", "c1-renamed")),
             frozenset(("c4-copy-of-c1", "h1"))}


def cell(source: str, grade_id: str | None = None, kind: str = "code") -> dict:
    """A code cell; ``kind`` ``answer`` or ``test`` gives it nbgrader's metadata."""
    meta = {"answer": {"grade": False, "solution": True, "locked": False},
            "test": {"grade": True, "solution": False, "locked": True, "points": 1}}.get(kind)
    metadata = {"nbgrader": {**meta, "grade_id": grade_id, "schema_version": 3}} if meta else {}
    return {"cell_type": "code", "metadata": metadata, "source": textwrap.dedent(source).strip() + "\n",
            "outputs": [], "execution_count": None}


def notebook(answers: dict[str, str]) -> dict:
    """The released notebook with ``answers`` (``{part: body}``) in place of the stubs' ``raise``."""
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# Attention, by hand"},
             cell("import math\n\nimport numpy as np\nimport torch\nimport torch.nn.functional as F"),
             cell(GIVEN)]
    for part, stub in STUBS.items():
        body = answers.get(part)
        code = stub if body is None else stub.replace("    # YOUR CODE HERE\n    raise NotImplementedError()\n", body)
        cells += [cell(code.lstrip("\n"), part, "answer"), cell(f"check_{part}({part})", f"test_{part}", "test")]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def bodies(normalise: str, pairwise: str) -> dict[str, str]:
    return {"normalise": textwrap.indent(textwrap.dedent(normalise).strip("\n"), "    ") + "\n",
            "pairwise": textwrap.indent(textwrap.dedent(pairwise).strip("\n"), "    ") + "\n",
            "causal_mask": ONE_LINE}


def the_class() -> dict[str, dict]:
    """``{student: notebook JSON}``: the eight honest students and the four copies."""
    made = {student: notebook(bodies(*code)) for student, code in HONEST.items()}
    for student, (_, code) in COPIES.items():
        made[student] = notebook(bodies(*code))
    return made


def analysed(made: dict[str, dict] | None = None, released: dict | None = None, **settings):
    made = the_class() if made is None else made
    submissions = [read_notebook(student, json.dumps(nb)) for student, nb in made.items()]
    release = read_notebook("(release)", json.dumps(notebook({}) if released is None else released))
    return analyse(submissions, release, assignment=A, settings=Settings(**settings))


def flagged(analysis) -> set[frozenset]:
    return {frozenset(pair.students) for pair in analysis.pairs}


def test_copies_sharing_two_parts_are_flagged_and_one_part_copies_are_next():
    analysis = analysed()
    assert flagged(analysis) == TWO_PARTS, _scores(analysis)
    assert {frozenset(pair.students) for pair in analysis.near} == COPY_PAIRS - TWO_PARTS, _scores(analysis)
    assert {"c1-renamed", "c4-copy-of-c1", "h1"} in [set(group) for group in analysis.groups()], \
        "the copy of a copy is not one group with the first two"
    assert [pair.score for pair in analysis.pairs] == sorted((pair.score for pair in analysis.pairs), reverse=True)
    evidence = analysis.evidence()
    index = {s: i for i, s in enumerate(analysis.students)}
    honest = [evidence[index[a], index[b]] for a, b in combinations(analysis.students, 2)
              if frozenset((a, b)) not in COPY_PAIRS]
    assert max(honest) == 0, "an honest pair has parts alike"
    lower = analysed(threshold=min(pair.score for pair in analysis.near))
    assert flagged(lower) == COPY_PAIRS, "at a lower threshold every copy is flagged, and still no honest pair"


def test_the_parts_that_match_are_named_and_the_part_written_apart_is_not():
    analysis = analysed()
    by_pair = {frozenset(pair.students): pair for pair in [*analysis.pairs, *analysis.near]}
    renamed = by_pair[frozenset(("c1-renamed", "h1"))]
    assert set(renamed.parts) == {"normalise", "pairwise"} and renamed.shared > 0.8
    assert renamed.one_pair_in > len(analysis.students) * (len(analysis.students) - 1) / 2 / 2
    own = by_pair[frozenset(("c3-one-part-own", "h3"))]
    assert set(own.parts) == {"normalise"}, own
    reordered = by_pair[frozenset(("c2-reordered", "h2"))]
    assert set(reordered.parts) == {"normalise"}, reordered
    assert analysis.units["pairwise"].scores[analysis.students.index("h2"), analysis.students.index("c2-reordered")] \
        >= 0.7, "the reordered part keeps most of its statements"


def test_a_one_line_part_shared_by_all_counts_for_nothing():
    analysis = analysed()
    assert analysis.alike["causal_mask"] == 0 and not analysis.units["causal_mask"].evidence.any()
    assert all("causal_mask" not in pair.parts for pair in [*analysis.pairs, *analysis.near])
    # the same honest class, each with the same one-liner: no pair of them is flagged for it
    honest = {student: nb for student, nb in the_class().items() if student.startswith("h")}
    assert not analysed(honest).pairs and not analysed(honest).near


def test_the_released_code_is_not_counted():
    """Two honest students both keep the given helper, the stubs' docstrings and a long given cell: set aside
    with the release, they share nothing; compared without it, they would be flagged."""
    given_cell = cell("\n".join(f"table_{i} = describe(torch.randn({i + 2}, {i + 3}), name='table {i}')"
                                for i in range(12)))
    released = notebook({})
    released["cells"].insert(3, given_cell)
    made = {student: notebook(bodies(*HONEST[student])) for student in ("h1", "h2", "h3", "h4", "h5")}
    for student in ("h4", "h5"):
        made[student]["cells"].insert(3, given_cell)
    assert not analysed(made, released).pairs
    assert {frozenset(pair.students) for pair in analysed(made, {"cells": []}).pairs} == {frozenset(("h4", "h5"))}, \
        "without the release, the given code would make the pair"


def test_shared_lines_are_marked_on_both_sides_and_given_lines_are_not():
    analysis = analysed()
    left, right = marks(analysis, "c1-renamed", "h1", "normalise")
    code = analysis.codes["h1"]["normalise"].text.split("\n")
    assert {code[i].strip() for i in right} >= {'masked = scores.masked_fill(~keep, float("-inf"))',
                                                "return torch.softmax(masked, dim=-1)"}
    assert not any('"""' in code[i] or "Args:" in code[i] for i in right), "released docstring lines marked"
    assert left and right


def test_unreadable_and_empty_notebooks_are_left_out_not_fatal():
    made = the_class()
    submissions = [read_notebook(s, json.dumps(nb)) for s, nb in made.items()]
    submissions += [read_notebook("broken", "{not json"), read_notebook("blank", json.dumps(notebook({})))]
    analysis = analyse(submissions, read_notebook("(release)", json.dumps(notebook({}))), assignment=A)
    assert analysis.unread == {"broken": "not a notebook (its JSON cannot be read)"}
    assert not any({"broken", "blank"} & set(pair.students) for pair in analysis.pairs)


def test_student_text_is_escaped_on_the_page():
    made = the_class()
    hostile = HONEST["h1"][0].replace("return", "print('</pre><script>alert(1)</script>')\n    return")
    made["<script>x</script>"] = notebook(bodies(hostile, HONEST["h1"][1]))
    text = page(analysed(made))
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "a reason to look, not a verdict" in text and "never goes into feedback" in text
    assert "Nothing here changes a grade" in text


def test_the_command_prints_json_and_writes_the_page(tmp_path):
    course = _course(tmp_path)
    result = subprocess.run([sys.executable, "-m", "autograder", "similarity", "09", "--course-dir", str(course),
                             "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    pairs = json.loads(result.stdout)
    assert pairs and all(set(pair) == {"students", "score", "one_pair_in", "parts", "shared"} for pair in pairs)
    assert all(len(p["students"]) == 2 and p["score"] > 0 and 0 <= p["shared"] <= 1 and p["one_pair_in"] > 1
               and isinstance(p["parts"], dict) for p in pairs)
    assert {frozenset(p["students"]) for p in pairs} == TWO_PARTS
    lower = subprocess.run([sys.executable, "-m", "autograder", "similarity", "09", "--course-dir", str(course),
                            "--json", "--threshold", "2"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert {frozenset(p["students"]) for p in json.loads(lower.stdout)} == COPY_PAIRS
    page_file = course / "grades" / f"similarity-{A}.html"
    assert page_file.is_file() and "c2-reordered" in page_file.read_text(encoding="utf-8")


def test_user_errors_say_what_is_wrong(tmp_path, capsys):
    from autograder.instructor.cli import main

    course = _course(tmp_path)
    assert main(["similarity", "07", "--course-dir", str(course)]) == 2
    assert "error: unknown assignment '07'" in capsys.readouterr().err
    (course / "exercises" / A / f"{A}.ipynb").unlink()
    assert main(["similarity", A, "--course-dir", str(course)]) == 2
    assert "error: no released notebook of 09_similarity" in capsys.readouterr().err
    empty = tmp_path / "empty"  # no nbgrader_config.py: nbgrader's own folder names
    (empty / "release" / A).mkdir(parents=True)
    (empty / "release" / A / f"{A}.ipynb").write_text(json.dumps(notebook({})))
    assert main(["similarity", A, "--course-dir", str(empty)]) == 2
    assert "error: no submissions of 09_similarity" in capsys.readouterr().err


def test_the_course_is_read_as_nbgrader_lays_it_out(tmp_path):
    analysis = similarity("09", course_dir=_course(tmp_path))
    assert analysis.assignment == A and len(analysis.students) == 12
    assert flagged(analysis) == TWO_PARTS


@pytest.mark.slow
@pytest.mark.browser
def test_the_page_reads_offline_with_the_pairs_side_by_side(tmp_path):
    from browser import offline_page

    course = _course(tmp_path)
    result = subprocess.run([sys.executable, "-m", "autograder", "similarity", A, "--course-dir", str(course)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    path = course / "grades" / f"similarity-{A}.html"
    assert f"similarity page: {path}" in result.stdout
    refused = []
    with offline_page(path, refused) as tab:
        found = similarity(A, course_dir=course)
        assert tab.locator("#pairs + table.pairs tr").count() == 1 + len(found.pairs)
        assert tab.locator("section.pair").count() == len(found.pairs) + len(found.near) == len(COPY_PAIRS)
        first = tab.locator("section.pair").first
        assert first.locator(".column").count() >= 4, "the two answers are not side by side"
        assert first.locator(".line.shared").count() >= 6, "no shared lines marked"
        assert first.locator(".line.given").count() >= 4, "the released lines are not told apart"
        colour = first.locator(".line.shared").first.evaluate("e => getComputedStyle(e).backgroundColor")
        assert colour not in ("rgba(0, 0, 0, 0)", "transparent"), "shared lines are not highlighted"
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        top = tab.locator("#pairs").bounding_box()  # the guide's figure: the pairs, then the first side by side
        tab.screenshot(path=str(SCREENSHOTS / "similarity.png"), full_page=True,
                       clip={"x": 0, "y": top["y"] - 12, "width": 1280, "height": 1150})
    assert not refused, f"the page asked the network for {refused}"


def _course(tmp_path: Path) -> Path:
    """A course folder laid out as nbgrader's, with this repository's config: the released notebook in
    ``exercises/`` (the config's release folder) and the class in ``submitted/``."""
    course = tmp_path / "course"
    (course / "exercises" / A).mkdir(parents=True)
    (course / "nbgrader_config.py").write_text((ROOT / "nbgrader_config.py").read_text())
    (course / "exercises" / A / f"{A}.ipynb").write_text(json.dumps(notebook({})))
    for student, nb in the_class().items():
        folder = course / "submitted" / student / A
        folder.mkdir(parents=True)
        (folder / f"{A}.ipynb").write_text(json.dumps(nb))
    return course


def _diagonal(analysis):
    import numpy as np

    return np.eye(len(analysis.students), dtype=bool)


def _scores(analysis) -> str:
    index = {s: i for i, s in enumerate(analysis.students)}
    matrix = analysis.evidence()
    return "\n".join(f"  {a} {b}: {matrix[index[a], index[b]]:.2f} (threshold {analysis.threshold:.2f})"
                     for a, b in combinations(analysis.students, 2) if matrix[index[a], index[b]] > 0)


def test_submission_reading_keeps_answers_and_leaves_tests_out():
    submission = read_notebook("s", json.dumps(notebook(bodies(*HONEST["h1"]))))
    assert isinstance(submission, Submission) and set(submission.parts) == set(STUBS)
    assert not any("check_" in code for code in submission.cells), "a test cell was read as code"
