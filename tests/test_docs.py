"""The README stays a front page, the documentation site's links and pictures hold, and the
configuration reference names every setting.

The site itself is built by `.ci/run` (`mkdocs build --strict`, which also fails on broken
links and anchors); these tests need no docs dependency and run with the suite."""

import ast
import re
from pathlib import Path

from django.conf import settings

ROOT = Path(settings.BASE_DIR)
DOCS = ROOT / "docs"
README = ROOT / "README.md"
SCREENSHOTS = DOCS / "screenshots"
# Notes waiting to be integrated into the pages; the site leaves them out (mkdocs.yml).
INCOMING = DOCS / "incoming"
README_MAX_LINES = 300
# Not the product's own files: where the code names docs pages, and where it does not look.
SKIPPED_DIRS = {".git", ".venv", ".ruff_cache", "var", "site", "docs", "node_modules"}
READER_SECTIONS = ("operators", "admins", "integrators", "operations", "design")

LINK = re.compile(r"(!?)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if INCOMING not in p.parents)


def links(path: Path) -> list[tuple[bool, str]]:
    """(is an image, target) of each Markdown link outside code blocks, external ones left out."""
    text = FENCE.sub("", path.read_text())
    return [
        (bool(bang), target)
        for bang, target in LINK.findall(text)
        if not re.match(r"[a-z]+:", target) and not target.startswith("#")
    ]


def resolve(page: Path, target: str) -> Path:
    return (page.parent / target.partition("#")[0]).resolve()


def nav_pages() -> set[Path]:
    """The pages mkdocs.yml's nav lists (`- Title: path.md` lines under `nav:`)."""
    nav = (ROOT / "mkdocs.yml").read_text().partition("\nnav:\n")[2]
    assert nav, "mkdocs.yml has no nav"
    entries = re.findall(r"^\s+- (?:[^:\n]+: )?(\S+\.md)\s*$", nav, re.M)
    return {(DOCS / page).resolve() for page in entries}


def taken_pictures() -> list[re.Pattern]:
    """The names the browser tests give their screenshots: `screenshot(page, "name")`, an
    f-string name, or a helper's `shot="name"`."""

    def pattern(node: ast.expr) -> re.Pattern | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value:
            return re.compile(re.escape(node.value))
        if isinstance(node, ast.JoinedStr):
            return re.compile(
                "".join(
                    re.escape(part.value) if isinstance(part, ast.Constant) else r"[\w-]+"
                    for part in node.values
                )
            )
        return None

    found = []
    for path in sorted((ROOT / "tests" / "e2e").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else ""
            if name == "screenshot" and len(node.args) == 2:
                found.append(pattern(node.args[1]))
            found += [pattern(kw.value) for kw in node.keywords if kw.arg == "shot"]
    return [p for p in found if p is not None]


def test_the_readme_stays_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) < README_MAX_LINES, (
        f"README.md has {len(lines)} lines: keep it to what agentops is, how to run and test"
        " it and where to go next, and move the rest into a page under docs/"
    )
    text = README.read_text()
    for command in ("uv run manage.py up", "uv run pytest"):
        assert f"\n{command}" in text, f"README.md lost its command {command!r}"


def test_the_readme_links_to_pages_of_the_site_that_exist():
    targets = [(image, target, resolve(README, target)) for image, target in links(README)]
    missing = [target for _, target, path in targets if not path.exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
    in_nav = nav_pages()
    off_site = [
        target
        for image, target, path in targets
        if not image and path.suffix == ".md" and path not in in_nav
    ]
    assert not off_site, f"README.md links to pages the site does not have: {off_site}"
    linked = {path for image, _, path in targets if not image}
    assert (DOCS / "index.md").resolve() in linked, "README.md does not link the docs index"
    for section in READER_SECTIONS:
        assert any(DOCS / section in path.parents for path in linked), (
            f"README.md links no page of docs/{section}/"
        )


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    in_nav = nav_pages()
    on_disk = {page.resolve() for page in pages()}
    assert not in_nav - on_disk, f"mkdocs.yml names pages that do not exist: {in_nav - on_disk}"
    assert not on_disk - in_nav, f"pages missing from mkdocs.yml's nav: {on_disk - in_nav}"


def test_every_picture_the_docs_show_is_taken_by_a_browser_test():
    taken = taken_pictures()
    assert len(taken) >= 20, taken  # the parser still finds the suite's screenshots
    shown = {
        (page.relative_to(ROOT), target, resolve(page, target))
        for page in [README, *pages()]
        for image, target in links(page)
        if image
    }
    assert shown
    for page, target, path in shown:
        assert path.parent == SCREENSHOTS.resolve() and path.suffix == ".png", (
            f"{page} shows {target}: pictures live in docs/screenshots/, taken by a browser test"
        )
        assert path.exists(), f"{page} shows {target}, which does not exist"
        assert any(p.fullmatch(path.stem) for p in taken), (
            f"{page} shows {target}, which no browser test takes: a picture nobody retakes"
            " goes stale; take it with screenshot(page, {path.stem!r}) in tests/e2e/"
        )


def test_every_picture_in_docs_screenshots_is_shown():
    shown = {resolve(page, target) for page in [README, *pages()] for _, target in links(page)}
    unused = sorted(p.name for p in SCREENSHOTS.glob("*.png") if p.resolve() not in shown)
    assert not unused, f"docs/screenshots/ holds pictures no page shows: {unused}"


def test_the_configuration_reference_names_every_setting():
    source = (ROOT / "agentops" / "settings.py").read_text()
    read = set(re.findall(r"\b(?:env|Env\(\))(?:\.\w+)?\(\s*\"([A-Z][A-Z0-9_]+)\"", source))
    assert len(read) > 50, read  # the pattern still finds the settings
    reference = (DOCS / "operations" / "configuration.md").read_text()
    rows = set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", reference, re.M))
    named = set(re.findall(r"`([A-Z][A-Z0-9_]+)", reference))
    assert not read - named, (
        f"settings read that docs/operations/configuration.md does not name: {read - named}"
    )
    assert not rows - read, f"configuration rows for settings nobody reads: {rows - read}"


def test_the_docs_pages_the_code_points_to_exist():
    named = {}
    tops = [d for d in ROOT.iterdir() if d.is_dir() and d.name not in SKIPPED_DIRS]
    files = [*ROOT.glob("*.yaml"), *(path for top in tops for path in top.rglob("*"))]
    for path in files:
        if not path.is_file() or path.suffix not in (".py", ".html", ".yaml", ".md"):
            continue
        for page in re.findall(r"\bdocs/[\w/.-]+?\.md\b", path.read_text(errors="replace")):
            named.setdefault(page, path.relative_to(ROOT))
    assert "docs/admins/compliance-evidence.md" in named  # the pattern still finds them
    missing = {page: where for page, where in named.items() if not (ROOT / page).exists()}
    assert not missing, f"the code points to docs pages that do not exist: {missing}"


# A module docstring says what the module owns and may not import in a few lines; the
# reasoning is docs/design/modules.md's. A package's map of its parts may be longer.
DOCSTRING_MAX_LINES = 9
PACKAGE_MAPS = {"runs/engine/__init__.py"}
DOCUMENTED_PACKAGES = (
    "agentkit",
    "agentops",
    "approvals",
    "gateway",
    "runs",
    "accounts",
    "triggers",
    "history",
)


def test_module_docstrings_are_a_few_lines():
    long = {}
    for package in DOCUMENTED_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = str(path.relative_to(ROOT))
            doc = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
            if len(doc.splitlines()) > DOCSTRING_MAX_LINES and name not in PACKAGE_MAPS:
                long[name] = len(doc.splitlines())
    assert not long, f"module docstrings over {DOCSTRING_MAX_LINES} lines: {long}"
