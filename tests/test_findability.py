"""The "where is…" questions of docs/design/finding-your-way.md still lead somewhere: each
named file exists and defines the named function or class (at its top level, or as a method
of one of its classes)."""

import ast
import re
from pathlib import Path

from django.conf import settings

ROOT = Path(settings.BASE_DIR)
PAGE = ROOT / "docs" / "design" / "finding-your-way.md"
ROW = re.compile(r"^\| (?P<question>[^|]+) \| `(?P<file>[^`]+)` \| `(?P<symbol>[^`]+)` \|$", re.M)


def rows() -> list[tuple[str, str, str]]:
    return [(m["question"], m["file"], m["symbol"]) for m in ROW.finditer(PAGE.read_text())]


def defined(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    tops = [node for node in tree.body if isinstance(node, kinds)]
    methods = [
        node
        for top in tops
        if isinstance(top, ast.ClassDef)
        for node in top.body
        if isinstance(node, kinds)
    ]
    return any(node.name == name for node in [*tops, *methods])


def test_the_page_asks_ten_questions():
    assert len(rows()) == 10


def test_each_answer_names_a_file_that_defines_the_symbol():
    missing = [
        (file, symbol)
        for _, file, symbol in rows()
        if not (ROOT / file).is_file() or not defined(ROOT / file, symbol)
    ]
    assert not missing, f"finding-your-way.md names what is not there: {missing}"
