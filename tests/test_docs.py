"""The README and docs/ stay true: the README is short and gives a newcomer two commands, its
Python example runs as printed, every relative link lands on a file, and the reference pages
generated from the code (docs/generate_reference.py) are current."""

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def _links(text: str) -> list[str]:
    """The targets of a Markdown page's links and images, outside code."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return re.findall(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose)


def test_the_generated_reference_is_current():
    done = subprocess.run([sys.executable, "docs/generate_reference.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout


def test_the_readme_is_at_most_200_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def test_the_readmes_newcomer_commands_are_make_quickstart_and_make_test():
    """Exactly two commands, in one shell block, each a Makefile target that sets up first;
    CI runs the second."""
    blocks = _blocks(README.read_text(encoding="utf-8"), "bash")
    commands = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    assert [c for c in commands if c] == ["make quickstart", "make test"]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^quickstart: setup\b", makefile, flags=re.M)
    assert re.search(r"^test: setup\b", makefile, flags=re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            for title in re.findall(r"^#+ (.*)$", text, flags=re.M)}


def test_every_relative_link_points_at_a_file_and_its_anchor_at_a_heading():
    broken = []
    for page in [README, *DOCS]:
        for target in _links(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            file = page.parent / path if path else page
            if not file.exists() or anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
    assert _links(README.read_text(encoding="utf-8")), "the README links to the docs"


def test_every_page_of_the_docs_is_linked_from_another_page():
    linked = {(page.parent / target.split("#")[0]).resolve()
              for page in [README, *DOCS] for target in _links(page.read_text(encoding="utf-8"))}
    assert not [page.relative_to(ROOT).as_posix() for page in DOCS if page.resolve() not in linked]
    readme = README.read_text(encoding="utf-8")
    assert all(f"(docs/{name})" in readme for name in (
        "compose_your_own_graph.md", "studio.md", "evaluate.md", "train.md", "scale_out.md", "gpu.md",
        "layout.md", "methods.md", "reference/cli.md", "reference/config.md"))


def test_the_readmes_python_example_runs_as_printed(monkeypatch):
    """The one Python block, executed as it stands: a graph from public pieces, run on the
    scripted policy; it prints what the README says it prints."""
    [example] = _blocks(README.read_text(encoding="utf-8"), "python")
    assert "import ragteam as rt" in example and 15 <= len(example.strip().splitlines()) <= 25
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(example, "README.md", "exec"), {"__name__": "readme_example"})
    lines = out.getvalue().splitlines()
    assert lines[0] == "Kiss and Tell (1945 film) answered 2"
    assert "It prints `Kiss and Tell (1945 film) answered 2`" in README.read_text(encoding="utf-8")
    assert [line.split()[1] for line in lines[1:]] == ["QR", "AG"]


def test_the_layout_lists_every_module():
    layout = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    modules = [ROOT / "ragteam" / "__init__.py",
               *(p for root in ("nodes", "graphs", "stores", "trainers")
                 for p in (ROOT / root).rglob("*.py") if "__pycache__" not in p.parts)]
    missing = [p.relative_to(ROOT).as_posix() for p in modules
               if f"`{p.relative_to(ROOT).as_posix()}`" not in layout]
    assert not missing, missing
