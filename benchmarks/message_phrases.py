"""Which phrases of the checks' messages do students meet most, and does the Chinese phrase page cover them?

    .venv/bin/python benchmarks/message_phrases.py [--top 30]

Grades every catalogued wrong answer (``tests/catalogue_chNN.py``) on its visible cases, as a student's notebook
does, and counts the phrases of ``zh/messages.yml`` (the table of the Chinese edition's page
``zh/book/messages.md``) that its message holds. It prints each phrase's count, the messages that hold none of
them (the phrases the page still lacks, by their most common words), and the share of messages the page
covers: the page is meant to cover the phrases a class meets, most frequent first.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import re
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "_ext"))

from messages_page import phrases  # noqa: E402 - _ext is not a package


def messages() -> list[str]:
    """The message of every catalogued wrong answer on its visible cases (those caught only by hidden cases left
    out), as a student reads it."""
    found = []
    for number in range(1, 9):
        catalogue = importlib.import_module(f"catalogue_ch{number:02d}")
        slow = set(getattr(catalogue, "TRAINING_CHECKS", ()))
        for _, check, answer, hidden_only, _ in catalogue.WRONG_AND_WHY:
            if hidden_only or check in slow:
                continue
            try:
                check(answer)
            except AssertionError as failure:
                found.append(str(failure))
            except Exception as error:  # noqa: BLE001 - a wrong answer may raise anything
                found.append(f"{type(error).__name__}: {error}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=30, help="uncovered message beginnings to print")
    options = parser.parse_args()
    torch.set_num_threads(1)
    said = messages()
    table = phrases()
    counts = collections.Counter()
    uncovered = []
    for message in said:
        held = [english for english in table if english in message]
        counts.update(held)
        if not held:
            uncovered.append(message)
    for english, count in counts.most_common():
        print(f"{count:4}  {english}")
    print(f"\n{len(table) - len(counts)} phrases of the page in no message: "
          f"{sorted(set(table) - set(counts))}")
    heads = collections.Counter(re.sub(r"\d+(\.\d+)?", "#", m.splitlines()[0].split(": ", 1)[-1])[:60]
                                for m in uncovered)
    print(f"\nmessages with none of the page's phrases, by their beginning (top {options.top}):")
    for head, count in heads.most_common(options.top):
        print(f"{count:4}  {head}")
    share = 1 - len(uncovered) / len(said)
    print(f"\n{len(said)} messages; the page's {len(table)} phrases are in {share:.0%} of them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
